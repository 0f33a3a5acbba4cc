//! `gpumem-agent estimate` end to end: the classic first command, the `--json` contract,
//! header-only model files, and refusals of bad input (exit 2, clear message).

use std::process::{Command, Output};

use gpumem_core::import::{gguf, safetensors};
use serde_json::Value;

fn agent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args(args)
        .output()
        .expect("the agent binary runs")
}

/// Whether `out` is an answer: exit 0 when it fits or is borderline, 1 when it does not
/// fit on the card or in `--ram` (2 is bad input).
fn answered(out: &Output) -> bool {
    let text = String::from_utf8_lossy(&out.stdout);
    // On the card, or in the host's RAM (`--ram`).
    let does_not_fit = match serde_json::from_str::<Value>(&text) {
        Ok(v) => v["verdict"]["verdict"] == "no" || v["verdict"]["host"]["fits"] == false,
        Err(_) => text.lines().any(|l| l.starts_with("DOES NOT FIT")),
    };
    out.status.code() == Some(if does_not_fit { 1 } else { 0 })
}

fn json(args: &[&str]) -> Value {
    let mut all = vec!["estimate", "--json"];
    all.extend_from_slice(args);
    let out = agent(&all);
    assert!(answered(&out), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

#[test]
fn seed_command_prints_exact_bytes_gb_and_gib() {
    let out = agent(&[
        "estimate",
        "--verbose",
        "--parameters",
        "7000000000",
        "--bits",
        "16",
        "--reserve-gib",
        "4",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let weights = text
        .lines()
        .find(|l| l.starts_with("Weights"))
        .expect("a weights line");
    assert!(
        weights.contains("14 000 000 000")
            && weights.contains("14.00")
            && weights.contains("13.04"),
        "{weights}"
    );
    let total = text
        .lines()
        .find(|l| l.starts_with("Total"))
        .expect("a total line");
    assert!(
        total.contains("18 294 967 296") && total.contains("17.04"),
        "{total}"
    );
}

#[test]
fn json_contract_has_the_headline_integers() {
    let v = json(&[
        "--parameters",
        "7000000000",
        "--bits",
        "16",
        "--reserve-gib",
        "4",
    ]);
    assert_eq!(v["schema"], "gpumem.estimate/v1");
    assert_eq!(v["weights_bytes"], 14_000_000_000u64);
    assert_eq!(v["kv_cache_bytes"], 0);
    assert_eq!(v["reserve_bytes"], 4u64 << 30);
    assert_eq!(v["total_bytes"], 14_000_000_000u64 + (4u64 << 30));
    assert!(v["lines"].as_array().is_some_and(|l| l.len() == 2));
    assert!(v["fit"].as_array().is_some_and(|f| !f.is_empty()));
}

#[test]
fn seed_kv_example_through_architecture_flags() {
    let v = json(&[
        "--layers",
        "32",
        "--hidden",
        "4096",
        "--heads",
        "32",
        "--kv-heads",
        "8",
        "--head-dim",
        "128",
        "--intermediate",
        "14336",
        "--vocab",
        "128256",
        "--context",
        "8192",
        "--sequences",
        "4",
        "--kv-dtype",
        "fp16",
    ]);
    assert_eq!(v["kv_cache_bytes"], 4u64 << 30);
}

#[test]
fn quantised_bits_are_never_params_over_two() {
    let v = json(&["--parameters", "7000000000", "--bits", "4"]);
    let w = v["weights_bytes"].as_u64().expect("integer");
    assert!(w > 3_500_000_000, "{w}");
}

#[test]
fn bad_input_exits_2_naming_each_flag() {
    let out = agent(&[
        "estimate",
        "--parameters",
        "-5",
        "--bits",
        "x",
        "--format",
        "gptq-5-g128",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for flag in ["--parameters", "--bits", "--format"] {
        assert!(err.contains(flag), "{flag} missing in {err}");
    }
    assert!(!err.contains("panicked"));
    let out = agent(&["estimate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("parameter count"));
}

#[test]
fn header_only_safetensors_shards_are_counted_exactly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = dir.path().join("model-00001-of-00002.safetensors");
    let b = dir.path().join("model-00002-of-00002.safetensors");
    std::fs::write(
        &a,
        safetensors::build_header(&[("model.embed_tokens.weight", "BF16", &[32000, 4096])]),
    )
    .expect("write");
    std::fs::write(
        &b,
        safetensors::build_header(&[
            ("model.layers.0.mlp.down_proj.qweight", "I32", &[1792, 4096]),
            ("model.layers.0.mlp.down_proj.scales", "F16", &[112, 4096]),
        ]),
    )
    .expect("write");
    let v = json(&[
        "--safetensors",
        a.to_str().expect("utf8"),
        "--safetensors",
        b.to_str().expect("utf8"),
        "--reserve-gib",
        "0",
    ]);
    assert_eq!(
        v["weights_bytes"],
        32000u64 * 4096 * 2 + 1792 * 4096 * 4 + 112 * 4096 * 2
    );
}

#[test]
fn header_only_gguf_is_counted_exactly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let p = dir.path().join("m.gguf");
    std::fs::write(
        &p,
        gguf::build_header("llama", &[("blk.0.ffn_up.weight", &[4096, 14336], 12)]),
    )
    .expect("write");
    let v = json(&["--gguf", p.to_str().expect("utf8"), "--reserve-gib", "0"]);
    assert_eq!(v["weights_bytes"], 4096u64 / 256 * 144 * 14336);
}

#[test]
fn garbage_model_files_are_refused_clearly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let p = dir.path().join("junk.safetensors");
    std::fs::write(&p, b"this is not a model").expect("write");
    let out = agent(&["estimate", "--safetensors", p.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("safetensors") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn config_json_fills_the_architecture_and_flags_override_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let p = dir.path().join("config.json");
    std::fs::write(
        &p,
        r#"{"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,
            "num_key_value_heads":8,"intermediate_size":14336,"vocab_size":128256}"#,
    )
    .expect("write");
    let v = json(&["--config", p.to_str().expect("utf8"), "--reserve-gib", "0"]);
    assert_eq!(v["parameters"], 8_030_261_248u64);
    let v = json(&[
        "--config",
        p.to_str().expect("utf8"),
        "--layers",
        "16",
        "--reserve-gib",
        "0",
    ]);
    assert!(v["parameters"].as_u64().expect("integer") < 5_000_000_000);
}

/// Regression: in parameter-count mode the weights line is assumed, and it was summed
/// as a transient too. Each line now belongs to one headline group.
#[test]
fn no_line_is_counted_twice_in_the_headline_figures() {
    let v = json(&["--parameters", "7e9", "--bits", "4"]);
    assert_eq!(v["transient_bytes"], 0, "{v}");
    let sum: u64 = [
        "weights_bytes",
        "kv_cache_bytes",
        "training_bytes",
        "transient_bytes",
        "reserve_bytes",
    ]
    .iter()
    .map(|k| v[*k].as_u64().expect("integer"))
    .sum();
    assert_eq!(v["total_bytes"].as_u64(), Some(sum));
}

/// Regression: an exponent of 4 294 967 295 used to loop for ever; now it is refused.
#[test]
fn a_huge_exponent_is_refused_at_once() {
    let start = std::time::Instant::now();
    let out = agent(&["estimate", "--parameters", "0e4294967295"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--parameters"));
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
}

/// Method §4's example exactly as typed: the KV shape alone, no weights.
#[test]
fn seed_kv_example_from_the_shape_alone() {
    let v = json(&[
        "--layers",
        "32",
        "--kv-heads",
        "8",
        "--head-dim",
        "128",
        "--context",
        "8192",
        "--kv-dtype",
        "bf16",
    ]);
    assert_eq!(v["kv_cache_bytes"], 1u64 << 30);
    assert_eq!(v["weights_bytes"], 0);
    let warnings = v["warnings"].to_string();
    assert!(warnings.contains("weights not counted"), "{warnings}");
}

fn config(name: &str) -> String {
    format!(
        "{}/../crates/gpumem-core/tests/cases/configs/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The printed table and `--json` compared with committed snapshots
/// (`agent/tests/snapshots/`). After an intended change of the output, rerun with
/// `UPDATE_SNAPSHOTS=1` and review the diff.
#[test]
fn table_and_json_match_their_snapshots() {
    let gpt_oss = config("gpt-oss-20b");
    let deepseek = config("deepseek-v3");
    let qwen3_next = config("qwen3-next-80b-a3b");
    let runs: [(&str, Vec<&str>); 6] = [
        (
            "seed-s2.txt",
            vec![
                "estimate",
                "--parameters",
                "7e9",
                "--bits",
                "16",
                "--reserve-gib",
                "4",
            ],
        ),
        (
            "seed-s4-kv-only.json",
            vec![
                "estimate",
                "--json",
                "--layers",
                "32",
                "--kv-heads",
                "8",
                "--head-dim",
                "128",
                "--context",
                "8192",
                "--kv-dtype",
                "bf16",
            ],
        ),
        (
            "params-4bit.json",
            vec!["estimate", "--json", "--parameters", "7e9", "--bits", "4"],
        ),
        (
            "gpt-oss-20b.txt",
            vec!["estimate", "--config", &gpt_oss, "--context", "8192"],
        ),
        (
            "deepseek-v3.json",
            vec![
                "estimate",
                "--json",
                "--config",
                &deepseek,
                "--context",
                "8192",
                "--kv-dtype",
                "bf16",
            ],
        ),
        (
            // A hybrid: KV for the 12 attention layers, a constant state for the 36
            // Gated DeltaNet layers.
            "qwen3-next.txt",
            vec![
                "estimate",
                "--verbose",
                "--config",
                &qwen3_next,
                "--context",
                "8192",
                "--sequences",
                "4",
            ],
        ),
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let update = std::env::var_os("UPDATE_SNAPSHOTS").is_some();
    let mut wrong = Vec::new();
    for (file, args) in runs {
        let out = agent(&args);
        assert!(
            answered(&out),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = String::from_utf8(out.stdout).expect("UTF-8 output");
        let path = dir.join(file);
        if update {
            std::fs::write(&path, &got).expect("snapshot written");
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if got != want {
            wrong.push(format!(
                "{file} differs from its snapshot:\n--- want\n{want}\n--- got\n{got}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A real case's config.json through the agent at the case's inputs (8k tokens, bf16 KV,
/// no reserve): its parameters, active parameters, weights and KV must be the oracle's
/// (tests/cases/oracle.py). Returns the agent's answer and a check that runs the same
/// inputs with the shape typed as flags and compares parameters and KV with the case.
fn real_case_through_config(name: &str) -> (Value, impl Fn(&[&str])) {
    const ARGS: [&str; 6] = [
        "--context",
        "8192",
        "--kv-dtype",
        "bf16",
        "--reserve-gib",
        "0",
    ];
    let case: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/../crates/gpumem-core/tests/cases/real-{name}.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("the case file"),
    )
    .expect("valid JSON");
    let expect = case["expect"].clone();
    let path = config(name);
    let mut from_config = vec!["--config", path.as_str()];
    from_config.extend_from_slice(&ARGS);
    let v = json(&from_config);
    for key in [
        "parameters",
        "active_parameters",
        "weights_bytes",
        "kv_cache_bytes",
    ] {
        assert_eq!(v[key], expect[key], "{name}: {key}");
    }
    let by_case = move |flags: &[&str]| {
        let mut by_hand = flags.to_vec();
        by_hand.extend_from_slice(&ARGS);
        let h = json(&by_hand);
        for key in ["parameters", "active_parameters", "kv_cache_bytes"] {
            assert_eq!(h[key], expect[key], "by hand: {key}");
        }
    };
    (v, by_case)
}

/// Nemotron-3 Nano's config.json (MoE `E` blocks among Mamba-2 and attention blocks)
/// through the agent equals the oracle's case (tests/cases/oracle.py, which lists the
/// checkpoint's tensors independently), and the same shape typed as flags agrees.
#[test]
fn nemotron_3_nano_config_matches_the_oracle_and_its_flags() {
    let (v, by_case) = real_case_through_config("nemotron-3-nano-30b-a3b");
    assert_eq!(v["parameters"], 31_577_940_288u64);
    // The shape by hand, with the keys README names.
    let by_hand = vec![
        "--layers",
        "52",
        "--hidden",
        "2688",
        "--vocab",
        "131072",
        "--heads",
        "32",
        "--kv-heads",
        "2",
        "--head-dim",
        "128",
        "--intermediate",
        "1856",
        "--gated-mlp",
        "false",
        "--layer-norms",
        "1",
        "--mixer",
        "mamba2",
        "--state-layers",
        "23",
        "--mixer-inner",
        "4096",
        "--mixer-state",
        "128",
        "--mixer-conv",
        "4",
        "--mixer-heads",
        "64",
        "--mixer-key-heads",
        "8",
        "--attention-layers",
        "6",
        "--mlp-layers",
        "23",
        "--experts",
        "128",
        "--active-experts",
        "6",
        "--expert-intermediate",
        "1856",
        "--shared-experts",
        "1",
        "--shared-intermediate",
        "3712",
        "--correction-bias",
        "true",
        // mamba_ssm_cache_dtype float32, as vLLM keeps it: per Mamba-2 layer the conv
        // window (4096 + 2·8·128) × 3 in bf16 + the SSM state 4096 × 128 in fp32.
        // Without an engine transformers' cache holds more (the whole window of 4),
        // which stands, as in the case.
        "--state-bytes",
        "2134016",
    ];
    by_case(&by_hand);
    // Under a serving engine the user's flag overrides the state the config implies
    // (all in bf16 here); without one, transformers' cache is what is held:
    // (4096 + 2·8·128) × 4 × 2 B + 4096 × 128 × 4 B per layer.
    let path = config("nemotron-3-nano-30b-a3b");
    let args = [
        "--config",
        path.as_str(),
        "--context",
        "8192",
        "--kv-dtype",
        "bf16",
        "--reserve-gib",
        "0",
        "--state-bytes",
        "1085440",
    ];
    let o = json(&args);
    assert_eq!(
        o["kv_cache_bytes"],
        Value::from(50_331_648u64 + 23 * (6144 * 4 * 2 + 4096 * 128 * 4))
    );
    let served: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--engine", "vllm", "--card", "h100-sxm"])
        .collect();
    let o = json(&served);
    assert_eq!(
        o["kv_cache_bytes"],
        Value::from(50_331_648u64 + 23 * 1_085_440)
    );
}

/// Nemotron-3 Super's config.json (latent MoE, its "*E" MTP blocks) through the agent
/// equals the oracle's case, whose total is the BF16 checkpoint's headers' count; the
/// same shape typed as flags agrees.
#[test]
fn nemotron_3_super_config_matches_the_oracle_and_its_flags() {
    let (v, by_case) = real_case_through_config("nemotron-3-super-120b-a12b");
    assert_eq!(v["parameters"], 123_611_033_088u64);
    let text = v.to_string();
    assert!(text.contains("multi-token-prediction"), "{text}");
    let by_hand = vec![
        "--layers",
        "88",
        "--hidden",
        "4096",
        "--vocab",
        "131072",
        "--heads",
        "32",
        "--kv-heads",
        "2",
        "--head-dim",
        "128",
        "--intermediate",
        "2688",
        "--gated-mlp",
        "false",
        "--layer-norms",
        "1",
        "--mixer",
        "mamba2",
        "--state-layers",
        "40",
        "--mixer-inner",
        "8192",
        "--mixer-state",
        "128",
        "--mixer-conv",
        "4",
        "--mixer-heads",
        "128",
        "--mixer-key-heads",
        "8",
        "--attention-layers",
        "8",
        "--mlp-layers",
        "40",
        "--experts",
        "512",
        "--active-experts",
        "22",
        "--expert-intermediate",
        "2688",
        "--shared-experts",
        "1",
        "--shared-intermediate",
        "5376",
        "--correction-bias",
        "true",
        "--moe-latent",
        "1024",
        "--mtp-layers",
        "1",
        "--state-bytes",
        "4255744",
    ];
    by_case(&by_hand);
}

/// What a new user sees first: the inputs, the verdict on the card, the ways out —
/// within 100 columns and about 25 lines, for every model of the real-config set.
#[test]
fn the_answer_comes_first_within_100_columns_and_25_lines() {
    for name in [
        "llama-3.1-8b",
        "qwen3-30b-a3b",
        "deepseek-v3",
        "gpt-oss-120b",
        "qwen3-next-80b-a3b",
    ] {
        let cfg = config(name);
        for card in ["4090", "t4", "h100-sxm"] {
            let out = agent(&[
                "estimate",
                "--config",
                &cfg,
                "--context",
                "8192",
                "--card",
                card,
            ]);
            assert!(
                answered(&out),
                "{name} {card}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8(out.stdout).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            assert!(
                lines.len() <= 26,
                "{name} on {card}: {} lines\n{text}",
                lines.len()
            );
            for l in &lines {
                assert!(l.chars().count() <= 100, "{name} on {card}: too wide: {l}");
            }
            assert!(
                lines[0].starts_with(&format!("{name}.json · ")),
                "{}",
                lines[0]
            );
            let verdict = lines[2];
            assert!(
                ["FITS  on ", "BORDERLINE  on ", "DOES NOT FIT  on "]
                    .iter()
                    .any(|w| verdict.starts_with(w)),
                "{verdict}"
            );
            for label in [
                "Cards needed",
                "Smallest card that fits",
                "Widest format that fits",
            ] {
                assert!(text.contains(label), "{label} in\n{text}");
            }
        }
    }
}

/// The `verdict` object of `--json` says what the answer says, in bytes.
#[test]
fn json_carries_the_verdict_with_its_numbers() {
    let cfg = config("llama-3.1-8b");
    let v = json(&["--config", &cfg, "--context", "8192", "--card", "rtx4090"]);
    let h = &v["verdict"];
    assert_eq!(h["verdict"], "yes");
    assert_eq!(h["card"]["id"], "rtx-4090");
    assert_eq!(h["card"]["need_bytes"], v["per_device_bytes"]);
    let cap = h["card"]["capacity_bytes"].as_i64().unwrap();
    let need = h["card"]["need_bytes"].as_i64().unwrap();
    assert_eq!(cap, 24_564 << 20);
    assert_eq!(h["card"]["headroom_bytes"].as_i64().unwrap(), cap - need);
    assert_eq!(h["card_given"], true);
    assert_eq!(h["cards"]["cards"], 1);
    assert_eq!(h["format"]["format"], "bf16");
    // The T4: two cards at tp 2, a 4-bit format on one (int8 is borderline once
    // LLM.int8's accumulator at the prefill is counted), and a word about bf16.
    let v = json(&["--config", &cfg, "--context", "8192", "--card", "t4"]);
    let h = &v["verdict"];
    assert_eq!(h["verdict"], "no");
    assert_eq!(
        (h["cards"]["cards"].as_u64(), h["cards"]["tp"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(h["format"]["format"], "awq-4-g128");
    assert!(
        h["warnings"][0].as_str().unwrap().contains("no bf16"),
        "{h}"
    );
}

/// Cards as people type them; several matches are refused naming each; a capacity is a card.
#[test]
fn cards_resolve_from_short_forms_and_capacities() {
    let cfg = config("llama-3.1-8b");
    for (typed, id) in [
        ("4090", "rtx-4090"),
        ("l40s", "l40s-48gb"),
        ("a100-40", "a100-40gb"),
        ("mi300x", "mi300x"),
    ] {
        let v = json(&["--config", &cfg, "--card", typed]);
        assert_eq!(v["verdict"]["card"]["id"], id, "{typed}");
    }
    let out = agent(&["estimate", "--config", &cfg, "--card", "a100"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--card") && err.contains("a100-80gb") && err.contains("a100-40gb"),
        "{err}"
    );
    let v = json(&["--config", &cfg, "--card", "22.5GB"]);
    assert_eq!(v["verdict"]["card"]["capacity_bytes"], 22_500_000_000u64);
    assert_eq!(v["verdict"]["card"]["capacity_kind"], "given");
}

/// `--formats` prints each format on the card, side by side; a bad name exits 2.
#[test]
fn formats_side_by_side() {
    let cfg = config("llama-3.1-8b");
    let out = agent(&[
        "estimate",
        "--config",
        &cfg,
        "--context",
        "8192",
        "--card",
        "4090",
        "--formats",
        "bf16,fp8,awq-4-g128,q4_k",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for f in ["bf16 ", "fp8 ", "awq-4-g128 ", "q4_k "] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(f)),
            "{f} in\n{text}"
        );
    }
    let v = json(&["--config", &cfg, "--card", "4090", "--compare-formats"]);
    assert_eq!(v["formats"].as_array().map(Vec::len), Some(6));
    let out = agent(&["estimate", "--config", &cfg, "--formats", "bf16,bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus"));
}

/// `cards` lists every catalogue card with its capacity in bytes and formats.
#[test]
fn cards_lists_the_catalogue() {
    let out = agent(&["cards"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let t4 = text
        .lines()
        .find(|l| l.starts_with("t4-16gb "))
        .expect("a T4 row");
    assert!(t4.contains("16 106 127 360") && t4.contains("320"), "{t4}");
    assert!(text.lines().all(|l| l.chars().count() <= 100));
    let out = agent(&["cards", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let h100 = v
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "h100-sxm-80gb")
        .unwrap();
    assert_eq!(h100["capacity_bytes"], 85_520_809_984u64);
    assert_eq!(
        (h100["bf16"].as_bool(), h100["fp8"].as_bool()),
        (Some(true), Some(true))
    );
}

/// The completions offer the catalogue's card ids and the formats; `--help` does not
/// list them as the only possible values (a card may be a capacity, a format `q4_k_m`).
#[test]
fn completions_offer_card_ids_and_formats() {
    let out = agent(&["completions", "bash"]);
    assert!(out.status.success());
    let script = String::from_utf8(out.stdout).unwrap();
    for word in ["rtx-4090", "h100-sxm-80gb", "t4-16gb", "awq-4-g128", "q4_k"] {
        assert!(script.contains(word), "{word} is not offered");
    }
    let help = String::from_utf8(agent(&["estimate", "--help"]).stdout).unwrap();
    let card = help
        .split("--card <CARD>")
        .nth(1)
        .expect("--card in the help");
    let card = card.split("\n      --").next().unwrap_or_default();
    assert!(!card.contains("possible values"), "{card}");
    assert!(card.contains("gpumem-agent cards"), "{card}");
}

const LLAMA_8B: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// A Mac is judged on its GPU's working set, not its RAM: an M3 Max 128GB on 96 GiB,
/// 32 GiB left to the system, said in the answer; `--wired-limit-mb` moves the split.
#[test]
fn a_mac_is_judged_on_its_working_set() {
    let args = [
        "--model",
        LLAMA_8B,
        "--context",
        "8192",
        "--card",
        "m3-max-128gb",
    ];
    let out = agent(&[&["estimate"], args.as_slice()].concat());
    assert!(answered(&out), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("on Apple M3 Max 128GB (working set capacity)"),
        "{text}"
    );
    let cap = text
        .lines()
        .find(|l| l.trim_start().starts_with("capacity"))
        .unwrap();
    assert!(
        cap.contains("96.00 GiB") && cap.contains("103.08 GB"),
        "{cap}"
    );
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("share 128.00 GiB (137.44 GB) of RAM")
            && flat.contains("32.00 GiB (34.36 GB) left for macOS"),
        "{text}"
    );
    let v = json(&args);
    assert_eq!(v["verdict"]["card"]["capacity_bytes"], 96u64 << 30);
    assert_eq!(v["verdict"]["card"]["capacity_kind"], "working set");
    assert_eq!(v["verdict"]["unified"]["system_bytes"], 32u64 << 30);
    assert!(v["verdict"]["cards"].is_null());
    // iogpu.wired_limit_mb=114688: 112 GiB to the GPU, 16 GiB left.
    let v = json(&[args.as_slice(), &["--wired-limit-mb", "114688"]].concat());
    assert_eq!(v["verdict"]["card"]["capacity_bytes"], 112u64 << 30);
    assert_eq!(v["verdict"]["unified"]["system_bytes"], 16u64 << 30);
    assert_eq!(v["verdict"]["unified"]["wired_limit"], true);
    // A wired limit on a card with memory of its own is bad input.
    let out = agent(&[
        "estimate",
        "--model",
        LLAMA_8B,
        "--card",
        "4090",
        "--wired-limit-mb",
        "20000",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("wired-limit-mb"));
}

/// `--ram`: llama.cpp's CPU buffer (-ngl 20 of 32 blocks) is judged against the host's
/// RAM in the default answer, in GiB and GB; short of it, the exit status is 1. On a
/// Mac the RAM is its own and the GPU's need is counted beside the host's.
#[test]
fn host_memory_gets_a_verdict_against_the_ram() {
    let base = [
        "--model",
        LLAMA_8B,
        "--context",
        "8192",
        "--format",
        "q8_0",
        "--engine",
        "llama.cpp",
        "--n-gpu-layers",
        "20",
    ];
    let on = |card: &'static str, ram: Option<&'static str>| {
        let mut a: Vec<&'static str> = base.to_vec();
        a.extend(["--card", card]);
        if let Some(r) = ram {
            a.extend(["--ram", r]);
        }
        a
    };
    let v = json(&on("rtx-4060-ti-16gb", None));
    let host = v["engine"]["host_weights_bytes"]
        .as_u64()
        .expect("a CPU buffer");
    assert!(host > 1 << 30, "{host}");
    assert_eq!(v["verdict"]["host"]["need_bytes"], host);
    assert!(v["verdict"]["host"]["fits"].is_null());
    for (ram, fits, code) in [("2GiB", false, 1), ("32GiB", true, 0)] {
        let args = on("rtx-4060-ti-16gb", Some(ram));
        let v = json(&args);
        assert_eq!(v["verdict"]["host"]["fits"], fits, "{ram}");
        let ram_bytes = gpumem_core::catalogue::parse_capacity(ram).unwrap();
        assert_eq!(
            v["verdict"]["host"]["left_bytes"],
            ram_bytes as i64 - host as i64
        );
        let out = agent(&[&["estimate"], args.as_slice()].concat());
        assert_eq!(out.status.code(), Some(code), "{ram}");
        let text = String::from_utf8(out.stdout).unwrap();
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let gib = format!("{:.2} GiB", host as f64 / f64::from(1u32 << 30));
        assert!(flat.contains(&format!("host RAM {gib}")), "{text}");
        assert!(
            flat.contains(if fits { "FITS" } else { "DOES NOT FIT" }),
            "{text}"
        );
    }
    // A Mac: its 36 GiB, the GPU's need beside the host's.
    let v = json(&on("m3-max-36gb", None));
    let h = &v["verdict"]["host"];
    assert_eq!(h["ram_bytes"], 36u64 << 30);
    assert_eq!(h["gpu_bytes"], v["verdict"]["card"]["need_bytes"]);
    let need = v["verdict"]["card"]["need_bytes"].as_u64().unwrap();
    assert_eq!(h["left_bytes"], (36i64 << 30) - need as i64 - host as i64);
    assert_eq!(h["fits"], true);
}

/// diffusers' CPU offload keeps the offloaded weights in the host's RAM: `--ram` judges
/// them (exit 1 when short), as it does an LLM's.
#[test]
fn diffusers_offload_is_judged_against_the_ram() {
    let flux = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/gpumem-core/tests/diffusion/pipelines/FLUX.1-dev");
    let flux = flux.to_str().unwrap();
    let run = |ram: &str| {
        let out = agent(&[
            "estimate",
            "--json",
            "--diffusers",
            flux,
            "--offload",
            "model",
            "--card",
            "h100-sxm-80gb",
            "--ram",
            ram,
        ]);
        let v: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
        (out.status.code(), v)
    };
    let (code, v) = run("16GiB");
    let host = v["host_bytes"].as_u64().unwrap();
    assert!(host > 16 << 30, "{host}");
    assert_eq!(v["host"]["need_bytes"], host);
    assert_eq!(v["host"]["fits"], false);
    assert_eq!(v["host"]["left_bytes"], (16i64 << 30) - host as i64);
    assert_eq!((v["verdict"].as_str(), code), (Some("yes"), Some(1)));
    let (code, v) = run("64GiB");
    assert_eq!((v["host"]["fits"].as_bool(), code), (Some(true), Some(0)));
}

/// `--offload group` is the denoiser's `enable_group_offload` (`--group-pipeline`: the
/// pipeline's): `--group-blocks N`, `--group-leaf`, `--group-stream` set it, `--json` gives the figure and the call;
/// what diffusers refuses (block level without a count, the group flags beside model
/// offload) is refused as a usage error.
#[test]
fn diffusers_group_offload_flags() {
    let flux = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/gpumem-core/tests/diffusion/pipelines/FLUX.1-dev");
    let flux = flux.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "estimate",
            "--json",
            "--diffusers",
            flux,
            "--card",
            "h100-sxm-80gb",
        ];
        args.extend_from_slice(extra);
        agent(&args)
    };
    let json = |extra: &[&str]| -> Value {
        let out = run(extra);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("valid JSON")
    };
    let block = json(&["--offload", "group", "--group-blocks", "1"]);
    let stream = json(&[
        "--offload",
        "group",
        "--group-blocks",
        "1",
        "--group-stream",
    ]);
    let leaf = json(&["--offload", "group", "--group-leaf"]);
    let g = |v: &Value| v["group_offload"]["resident_bytes"].as_u64().unwrap();
    // diffusers' own hooks hold these (tests/diffusion/group_offload.json).
    assert_eq!(
        (g(&block), g(&stream), g(&leaf)),
        (807_912_576, 1_487_575_168, 113_283_072)
    );
    assert_eq!(
        block["device_bytes"],
        block["by_offload_mode_bytes"]["group"]
    );
    assert_eq!(leaf["group_offload"]["offload_type"], "leaf_level");
    // `--group-pipeline`: `pipe.enable_group_offload`, the text encoders and the VAE
    // offloaded too; T5-XXL whole (block level) while it encodes sets the peak.
    let pipe = json(&[
        "--offload",
        "group",
        "--group-blocks",
        "1",
        "--group-pipeline",
    ]);
    assert_eq!(pipe["group_offload"]["pipeline"], true);
    let t5 = pipe["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "text_encoder_2")
        .unwrap()["bytes"]
        .clone();
    assert_eq!(
        pipe["group_offload"]["components_resident_bytes"]["text_encoder_2"],
        t5
    );
    assert_eq!(pipe["peak_phase"], "prompt encoding");
    assert!(pipe["device_bytes"].as_u64() < block["device_bytes"].as_u64());
    assert!(
        pipe["offload"]
            .as_str()
            .unwrap()
            .starts_with("pipe.enable_group_offload(")
    );
    assert!(
        block["offload"]
            .as_str()
            .unwrap()
            .contains("num_blocks_per_group=1")
    );
    for bad in [
        &["--offload", "group"][..],
        &["--offload", "model", "--group-blocks", "1"],
        &["--offload", "group", "--group-blocks", "0"],
        &["--offload", "group", "--group-blocks", "1", "--group-leaf"],
        &["--offload", "model", "--group-pipeline"],
    ] {
        let out = run(bad);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// An embedding model (BAAI/bge-large-en-v1.5, a BertModel) is answered: no KV cache,
/// its weights as transformers builds the model (the oracle's count, held equal to
/// transformers 5.23 on the meta device), its batch's forward; what an encoder does not
/// do (generate, a decoder engine's KV pool, language-model training) is refused, and
/// the engines that serve it (vLLM's pooling runner, TEI) answer by their own rule.
#[test]
fn an_embedding_model_keeps_no_kv_cache_and_weighs_what_transformers_builds() {
    let case: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/../crates/gpumem-core/tests/cases/real-bge-large-en-v1.5-512x32.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("the case file"),
    )
    .expect("valid JSON");
    let expect = &case["expect"];
    let path = config("bge-large-en-v1.5");
    let base = [
        "--config",
        path.as_str(),
        "--context",
        "512",
        "--sequences",
        "32",
        "--reserve-gib",
        "0",
    ];
    let v = json(&base);
    assert_eq!(v["kv_cache_bytes"], 0);
    assert_eq!(v["parameters"], expect["parameters"]);
    assert_eq!(v["parameters"], 335_141_888u64);
    assert_eq!(v["weights_bytes"], expect["weights_bytes"]);
    let line = |key: &str| {
        v["lines"]
            .as_array()
            .expect("lines")
            .iter()
            .find(|l| l["key"] == key)
            .unwrap_or_else(|| panic!("a {key} line"))["bytes"]
            .clone()
    };
    assert_eq!(line("kv_cache"), 0);
    for key in ["prefill.mlp", "prefill.attention_scores"] {
        assert_eq!(line(key), expect["lines"][key], "{key}");
    }
    let said = v["assumptions"].to_string();
    assert!(said.contains("an encoder keeps no KV cache"), "{said}");
    for (extra, says) in [
        (&["--generate", "16"][..], "generates no tokens"),
        (
            &["--engine", "sglang", "--card", "h100-sxm-80gb"][..],
            "does not serve an encoder-only model",
        ),
        (&["--train", "full"][..], "training an encoder"),
    ] {
        let out = agent(&[&["estimate"][..], &base, extra].concat());
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{extra:?}: {err}");
    }
    // The engines that serve an encoder answer it by their own rule: TEI's warm-up of
    // 16 384 tokens on an L4 leaves 24 152 899 584 − 536 870 912 (context) −
    // 670 283 776 (weights) − 268 435 456 (8 hidden rows × 16 384 tokens × 2 B) =
    // 22 677 309 440 B, 32 inputs of 512 a batch; vLLM's pooling runner, no KV cache.
    let tei = json(&[&base[..], &["--engine", "tei", "--card", "l4"]].concat());
    assert_eq!(tei["engine"]["kv_capacity_bytes"], 22_677_309_440u64);
    assert_eq!(tei["engine"]["batch_tokens"], 16_384);
    assert_eq!(tei["engine"]["kv_capacity_tokens"], 0);
    assert_eq!(tei["engine"]["max_sequences"], 32);
    let vllm = json(&[&base[..], &["--engine", "vllm", "--card", "l4"]].concat());
    assert_eq!(vllm["engine"]["batch_tokens"], 2048);
    assert_eq!(vllm["engine"]["kv_capacity_bytes"], 21_618_116_608u64);
}

/// An encoder-decoder (openai/whisper-small, google-t5/t5-small) is answered as
/// transformers' generate runs it: its weights as transformers builds the generation
/// class, the decoder's self-attention cache over its prompt and the generated tokens,
/// the cross-attention cache and the encoder's output over the encoder's length
/// (Whisper's 1500 frames; a T5's `--encoder-length`), each equal to the oracle's case
/// (whose figures `meta_check.py --encdec` read from transformers' own
/// EncoderDecoderCache on the meta device); training, tensor parallelism that does not
/// split the heads, and serving engines other than vLLM's (whose V1 engine serves
/// Whisper) are refused.
#[test]
fn an_encoder_decoder_keeps_its_self_and_cross_attention_caches_and_the_encoder_output() {
    let read = |file: &str| -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(format!(
                "{}/../crates/gpumem-core/tests/cases/{file}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .expect("the case file"),
        )
        .expect("valid JSON")
    };
    let line = |v: &Value, key: &str| {
        v["lines"]
            .as_array()
            .expect("lines")
            .iter()
            .find(|l| l["key"] == key)
            .unwrap_or_else(|| panic!("a {key} line"))["bytes"]
            .clone()
    };
    let whisper = config("whisper-small");
    let t5 = config("t5-small");
    for (file, args) in [
        (
            "real-whisper-small-4x16-gen224.json",
            vec![
                "--config",
                whisper.as_str(),
                "--context",
                "4",
                "--generate",
                "224",
                "--sequences",
                "16",
            ],
        ),
        (
            "real-t5-small-512x8-gen128.json",
            vec![
                "--config",
                t5.as_str(),
                "--context",
                "1",
                "--generate",
                "128",
                "--sequences",
                "8",
                "--encoder-length",
                "512",
            ],
        ),
    ] {
        let case = read(file);
        let expect = &case["expect"];
        let v = json(&[&args[..], &["--reserve-gib", "0"]].concat());
        for key in ["parameters", "weights_bytes", "kv_cache_bytes"] {
            assert_eq!(v[key], expect[key], "{file}: {key}");
        }
        for key in [
            "kv_cache",
            "kv_cache.prefill",
            "kv_cache.cross",
            "kv_cache.encoder_output",
        ] {
            assert_eq!(line(&v, key), expect["lines"][key], "{file}: {key}");
        }
    }
    // whisper-small, 16 clips: 12 decoder layers × 2 × 768 values × 1500 frames × 2 B
    // per clip in the cross-attention cache.
    let v = json(&[
        "--config",
        whisper.as_str(),
        "--context",
        "4",
        "--sequences",
        "16",
    ]);
    assert_eq!(line(&v, "kv_cache.cross"), 16u64 * 12 * 2 * 768 * 1500 * 2);
    // t5-small without --encoder-length: the source is taken as the context's length,
    // and the assumptions say how to give the source's own.
    let v = json(&["--config", t5.as_str(), "--context", "512"]);
    assert_eq!(line(&v, "kv_cache.cross"), 6u64 * 2 * 512 * 512 * 2);
    assert_eq!(line(&v, "kv_cache.encoder_output"), 512u64 * 512 * 2);
    let said = v["assumptions"].to_string();
    assert!(said.contains("give encoder-length"), "{said}");
    // ... and a warning, in the default output too: a short context would size the
    // cross-attention cache for almost nothing.
    let warned = v["warnings"].to_string();
    assert!(warned.contains("no encoder length given"), "{warned}");
    let v = json(&[
        "--config",
        t5.as_str(),
        "--context",
        "512",
        "--encoder-length",
        "512",
    ]);
    assert!(
        !v["warnings"]
            .to_string()
            .contains("no encoder length given"),
        "{}",
        v["warnings"]
    );
    for (extra, says) in [
        (
            &["--engine", "sglang", "--card", "h100-sxm-80gb"][..],
            "how it serves an encoder-decoder",
        ),
        (&["--train", "full"][..], "training an encoder-decoder"),
        // Whisper splits over tp as vLLM shards it, whole heads per rank.
        (&["--tp", "8", "--gpus", "8"][..], "do not split over tp 8"),
        (
            &["--pp", "2", "--gpus", "2"][..],
            "pipeline parallelism is not modelled",
        ),
        (&["--format", "nf4"][..], "counted as one"),
    ] {
        let out = agent(
            &[
                &["estimate", "--config", whisper.as_str(), "--context", "4"][..],
                extra,
            ]
            .concat(),
        );
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{extra:?}: {err}");
    }
    // vLLM's V1 engine serves Whisper: its self- and cross-attention layers in two
    // groups of blocks of one page, a request of 448 tokens counted as 28 + 512 blocks
    // (max-num-batched-tokens 8192 on an H100), the tokens printed per group.
    let out = agent(&[
        "estimate",
        "--config",
        whisper.as_str(),
        "--context",
        "4",
        "--generate",
        "444",
        "--engine",
        "vllm@0.19",
        "--card",
        "h100-sxm-80gb",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let e = &v["engine"];
    assert_eq!(e["max_model_len"], 448);
    let block = 16 * e["kv_bytes_per_token"].as_u64().expect("per token");
    let blocks = e["kv_capacity_bytes"].as_u64().expect("pool") / block;
    assert_eq!(e["max_sequences"].as_u64(), Some(blocks / 540));
    assert_eq!(e["kv_capacity_tokens"].as_u64(), Some(blocks / 2 * 16));
}
