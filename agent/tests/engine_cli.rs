//! `gpumem-agent estimate --engine … --card …` end to end: the `engine` JSON object,
//! the table's engine section, the largest workload on a card (checked against the
//! CLI's own fit table at N and N + 1), and refusals of bad engine flags (exit 2).

use std::process::{Command, Output};

use serde_json::Value;

/// Llama-3.1-8B's shape (huggingface.co/meta-llama/Llama-3.1-8B config.json).
const LLAMA_8B: &[&str] = &[
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
];

fn agent(extra: &[&str]) -> Output {
    // --verbose: the engine section and the per-card rows are the full tables.
    let mut args = vec!["estimate", "--verbose"];
    args.extend_from_slice(LLAMA_8B);
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args(&args)
        .output()
        .expect("the agent binary runs")
}

fn json(extra: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(extra);
    let out = agent(&all);
    // An answer either way: 0 fits or borderline, 1 does not fit.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// The 0.19 rules, named (the default `vllm` follows the newest release carried).
const VLLM_H100: &[&str] = &[
    "--engine",
    "vllm@0.19",
    "--card",
    "h100-sxm-80gb",
    "--gpu-memory-utilization",
    "0.9",
    "--max-model-len",
    "16000",
];

/// The figure derived by hand in `gpumem-core`'s engine tests (vLLM 0.19):
/// ⌈85 027 979 264 (torch's total) × 0.9⌉ − 16 060 522 496 (weights) − 2 023 837 696
/// (profiling peak: sampler phase + cuBLAS workspace) − 268 435 456 (outside torch,
/// assumed) = 58 172 385 690 B → 27 738 blocks of 16 tokens → 27 sequences of 16 000.
#[test]
fn vllm_budget_is_in_the_json_as_an_engine_object() {
    let v = json(VLLM_H100);
    let e = &v["engine"];
    assert_eq!(e["engine"], "vllm");
    assert_eq!(e["card"], "h100-sxm-80gb");
    assert_eq!(e["version"], "0.19");
    assert_eq!(e["outcome"], "fits");
    assert_eq!(e["kv_capacity_bytes"], 58_172_385_690i64);
    assert_eq!(e["kv_capacity_tokens"], 443_808);
    assert_eq!(e["max_sequences"], 27);
    assert_eq!(e["max_model_len"], 16000);
    assert_eq!(e["margin_bytes"], 58_172_385_690i64 - 1000 * 2_097_152);
    let lines = e["lines"].as_array().expect("lines");
    let keys: Vec<&str> = lines.iter().map(|l| l["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        [
            "budget",
            "weights",
            "activation_peak",
            "non_torch",
            "cuda_graphs"
        ]
    );
    // Each line names the engine source its rule comes from; profiled ones are assumed.
    for l in lines {
        assert!(!l["source"].as_str().unwrap().is_empty());
    }
    assert_eq!(lines[2]["kind"], "computed");
    assert_eq!(lines[3]["kind"], "assumed");
    assert_eq!(lines[4]["subtracted"], false);
    // The sum of what was subtracted closes the account.
    let sum: i64 = lines[1..]
        .iter()
        .filter(|l| l["subtracted"] == true)
        .map(|l| l["bytes"].as_i64().unwrap())
        .sum();
    assert_eq!(lines[0]["bytes"].as_i64().unwrap() - sum, 58_172_385_690);
    // And the estimate's own fields are still there.
    assert_eq!(v["weights_bytes"], 16_060_522_496u64);
}

/// Plain `--engine vllm` follows the newest release carried, and says which: 0.29, on
/// Model Runner V2 with its CUDA-graph estimate subtracted, an fp8 model too;
/// `vllm@0.27` runs the fp8 one on the V1 runner.
#[test]
fn plain_vllm_is_the_newest_release_and_says_so() {
    let mut args = VLLM_H100.to_vec();
    args[1] = "vllm";
    let v = json(&args);
    assert_eq!(v["engine"]["version"], "0.29 (Model Runner V2)");
    let out = agent(&args);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("\nengine vllm 0.29 (Model Runner V2) on NVIDIA H100 SXM 80GB")
    );
    args.extend(["--format", "fp8"]);
    let v = json(&args);
    let e = &v["engine"];
    assert_eq!(e["version"], "0.29 (Model Runner V2)");
    let graphs = e["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["key"] == "cuda_graphs")
        .expect("the CUDA-graph line");
    assert_eq!(graphs["subtracted"], true);
    assert_eq!(graphs["kind"], "assumed");
    args[1] = "vllm@0.27";
    assert_eq!(json(&args)["engine"]["version"], "0.27 (Model Runner V1)");
}

#[test]
fn table_prints_an_engine_section_with_each_subtracted_line() {
    let out = agent(VLLM_H100);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let section = text
        .split("\nengine vllm 0.19 on NVIDIA H100 SXM 80GB")
        .nth(1)
        .expect("an engine section");
    assert!(section.contains("76 525 181 338"), "{section}");
    assert!(section.contains("16 060 522 496"), "{section}");
    let kv = section
        .lines()
        .find(|l| l.trim_start().starts_with("= KV cache capacity"))
        .expect("the KV line");
    assert!(kv.contains("58 172 385 690"), "{kv}");
    assert!(section.contains("443 808 tokens"), "{section}");
    assert!(section.contains("→ 27 sequence(s)"), "{section}");
    assert!(section.contains("fits: margin"), "{section}");
    assert!(section.contains("vllm/v1/worker/gpu_worker.py"));
}

#[test]
fn too_little_memory_is_a_negative_capacity_not_an_error() {
    let v = json(&[
        "--engine",
        "vllm@0.19",
        "--card",
        "h100-sxm-80gb",
        "--gpu-memory-utilization",
        "0.2",
        "--max-model-len",
        "16000",
    ]);
    // ⌈85 027 979 264 × 0.2⌉ = 17 005 595 853 < 16 060 522 496 + 2 023 837 696 + 268 435 456.
    assert_eq!(v["engine"]["kv_capacity_bytes"], -1_347_199_795i64);
    assert_eq!(v["engine"]["kv_capacity_tokens"], 0);
    assert_eq!(v["engine"]["outcome"], "refused");
    let warnings = v["engine"]["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("No available memory"))
    );
}

/// The CLI's fit table must agree with the search at the boundary: N fits, N + 1 not.
fn fits_on_h100(extra: &[&str]) -> bool {
    let v = json(extra);
    v["fit"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "h100-sxm-80gb")
        .expect("h100 in the fit table")["fits"]
        .as_bool()
        .unwrap()
}

#[test]
fn card_alone_gives_the_largest_context_and_most_sequences_exactly() {
    let v = json(&[
        "--card",
        "h100-sxm-80gb",
        "--sequences",
        "4",
        "--context",
        "8000",
    ]);
    assert!(v.get("engine").is_none(), "no engine was named");
    let l = &v["largest"];
    assert_eq!(l["at_sequences"], 4);
    let n = l["largest_context"].as_u64().expect("some context fits");
    let (n_s, n1_s) = (n.to_string(), (n + 1).to_string());
    assert!(fits_on_h100(&["--sequences", "4", "--context", &n_s]));
    assert!(!fits_on_h100(&["--sequences", "4", "--context", &n1_s]));
    let m = l["most_sequences"].as_u64().expect("some sequences fit");
    let (m_s, m1_s) = (m.to_string(), (m + 1).to_string());
    assert!(fits_on_h100(&["--sequences", &m_s, "--context", "8000"]));
    assert!(!fits_on_h100(&["--sequences", &m1_s, "--context", "8000"]));
    // The table says the same.
    let out = agent(&[
        "--card",
        "h100-sxm-80gb",
        "--sequences",
        "4",
        "--context",
        "8000",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("most sequences at context 8 000: {}", m)),
        "{text}"
    );
}

#[test]
fn bad_engine_flags_exit_2_with_one_message_each() {
    let out = agent(&[
        "--engine",
        "vlm",
        "--card",
        "nope",
        "--gpu-memory-utilization",
        "1.5",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for flag in ["--engine:", "--card:", "--gpu-memory-utilization:"] {
        assert!(err.contains(flag), "{flag} in {err}");
    }
    // Engine options without an engine or a card cannot be answered.
    let out = agent(&["--gpu-memory-utilization", "0.8", "--max-model-len", "100"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--card"));
    // Nor without a length to serve.
    let out = agent(&["--engine", "sglang", "--card", "h100-sxm-80gb"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-model-len"));
}

#[test]
fn engine_without_a_card_answers_for_every_card() {
    let v = json(&["--engine", "vllm@0.19", "--max-model-len", "16000"]);
    assert!(v.get("engine").is_none() && v.get("largest").is_none());
    let rows = v["engine_per_card"].as_array().expect("one row per card");
    assert_eq!(rows.len(), v["fit"].as_array().unwrap().len());
    let h100 = rows.iter().find(|r| r["id"] == "h100-sxm-80gb").unwrap();
    assert_eq!(h100["kv_capacity_bytes"], 58_172_385_690i64);
    assert_eq!(h100["max_sequences"], 27);
    let t4 = rows.iter().find(|r| r["id"] == "t4-16gb").unwrap();
    assert!(t4["kv_capacity_bytes"].as_i64().unwrap() < 0);
    let out = agent(&["--engine", "vllm@0.19", "--max-model-len", "16000"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("NVIDIA H100 SXM 80GB") && l.contains("tokens"))
        .expect("an H100 row");
    assert!(
        row.contains("58 172 385 690") && row.contains("27 sequence(s)"),
        "{row}"
    );
}

/// vLLM accepts any float for its utilisation; so does the CLI, exactly, and the
/// version whose rules applied is in the JSON.
#[test]
fn engine_flags_take_the_values_the_engines_take() {
    let v = json(&[
        "--engine",
        "vllm@0.10",
        "--card",
        "h100-sxm-80gb",
        "--gpu-memory-utilization",
        "0.8938626454842437",
        "--max-model-len",
        "auto",
    ]);
    let e = &v["engine"];
    assert_eq!(e["version"], "0.10");
    assert_eq!(
        e["lines"][0]["inputs"]["gpu-memory-utilization"],
        "0.8938626454842437"
    );
    // ⌊85 027 979 264 × 0.8938626454842437⌋ (0.10 truncates).
    assert_eq!(e["lines"][0]["bytes"], 76_003_334_485u64);
    // auto: the longest max-model-len one sequence of which the pool holds.
    let m = e["max_model_len"].as_u64().unwrap();
    assert!(e["max_sequences"] == 1 && m > 100_000, "{m}");
    let out = agent(&[
        "--engine",
        "llama.cpp",
        "--card",
        "rtx-4090",
        "--max-model-len",
        "8192",
        "--cache-type-k",
        "q8_0",
        "--cache-type-v",
        "q8_0",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // 8192 cells × 32 layers × (2 × 32 blocks × 34 B).
    assert_eq!(v["engine"]["kv_cache_bytes"], 8192u64 * 32 * 2176);
}

/// One record of the calibration corpus through the CLI, as a user runs it: Llama-3.1-8B
/// on an H100 at 0.95, max-model-len 8192 (vLLM 0.19 logged "Available KV cache memory:
/// 58.11 GiB", "GPU KV cache size: 476,016 tokens").
#[test]
fn a_calibration_record_through_the_cli() {
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crates/gpumem-core/tests/calibration/configs/llama-3.1-8b.json"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args([
            "estimate",
            "--config",
            config,
            "--engine",
            "vllm@0.19",
            "--card",
            "h100-sxm-80gb",
            "--gpu-memory-utilization",
            "0.95",
            "--max-model-len",
            "8192",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let kv = v["engine"]["kv_capacity_bytes"].as_i64().unwrap() as f64;
    let logged = 58.11 * (1u64 << 30) as f64;
    assert!(((kv - logged) / logged).abs() < 0.02, "{kv}");
    let tokens = v["engine"]["kv_capacity_tokens"].as_u64().unwrap() as f64;
    assert!(((tokens - 476_016.0) / 476_016.0).abs() < 0.02, "{tokens}");
}

/// Speculative decoding with a draft model read from its config.json: the drafter's
/// weights are a line of their own and its 16 layers share the KV pool, so the pool
/// holds fewer tokens — the same figures as the draft named by its preset id.
#[test]
fn a_draft_model_from_its_config_shrinks_the_pool() {
    // huggingface.co/meta-llama/Llama-3.2-1B config.json (the keys that set its shape).
    let dir = std::env::temp_dir().join(format!("gpumem-draft-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        r#"{"model_type":"llama","architectures":["LlamaForCausalLM"],"hidden_size":2048,
            "intermediate_size":8192,"num_attention_heads":32,"num_hidden_layers":16,
            "num_key_value_heads":8,"head_dim":64,"tie_word_embeddings":true,
            "vocab_size":128256,"max_position_embeddings":131072,"rms_norm_eps":1e-05,
            "torch_dtype":"bfloat16"}"#,
    )
    .expect("config written");
    let plain = json(VLLM_H100);
    let spec = [
        "--speculative-method",
        "draft_model",
        "--num-speculative-tokens",
        "4",
    ];
    let mut args: Vec<&str> = VLLM_H100.to_vec();
    args.extend_from_slice(&spec);
    let path = config.to_str().expect("utf-8 path");
    args.extend_from_slice(&["--draft-config", path]);
    let drafted = json(&args);
    let (p, d) = (&plain["engine"], &drafted["engine"]);
    // 32 target layers × 4096 B + 16 draft layers × 2 × 8 × 64 × 2 B.
    assert_eq!(p["kv_bytes_per_token"], 131_072);
    assert_eq!(d["kv_bytes_per_token"], 131_072 + 32_768);
    assert_eq!(d["speculative"]["method"], "draft_model");
    assert_eq!(d["speculative"]["draft_kv_layers"], 16);
    let draft_line = d["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .find(|l| l["key"] == "draft_weights")
        .expect("a draft_weights line");
    let draft_bytes = draft_line["bytes"].as_i64().expect("bytes");
    // Llama-3.2-1B in bf16, tied embeddings: 1 235 814 400 parameters.
    assert_eq!(draft_bytes, 2 * 1_235_814_400);
    let (pk, dk) = (
        p["kv_capacity_bytes"].as_i64().expect("bytes"),
        d["kv_capacity_bytes"].as_i64().expect("bytes"),
    );
    assert!(dk <= pk - draft_bytes, "{dk} vs {pk} − {draft_bytes}");
    let (pt, dt) = (
        p["kv_capacity_tokens"].as_i64().expect("tokens"),
        d["kv_capacity_tokens"].as_i64().expect("tokens"),
    );
    assert_eq!(dt, dk / (16 * 163_840) * 16);
    assert!(dt * 10 < pt * 8, "{dt} tokens with the draft, {pt} without");
    // The preset id gives the same pool.
    let mut by_id: Vec<&str> = VLLM_H100.to_vec();
    by_id.extend_from_slice(&spec);
    by_id.extend_from_slice(&["--draft-model", "llama-3.2-1b"]);
    assert_eq!(json(&by_id)["engine"]["kv_capacity_tokens"], dt);
    // The table says where the tokens went.
    let out = agent(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Drafter's weights"), "{text}");
    assert!(
        text.contains("the drafter's 16 attention layer(s) take 32 768 B"),
        "{text}"
    );
    // A missing file and a draft given twice are refused, naming the problem.
    let mut missing: Vec<&str> = VLLM_H100.to_vec();
    missing.extend_from_slice(&spec);
    missing.extend_from_slice(&["--draft-config", "/nonexistent/config.json"]);
    let out = agent(&missing);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/config.json"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut twice = args.clone();
    twice.extend_from_slice(&["--draft-model", "llama-3.2-1b"]);
    let out = agent(&twice);
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Mixtral-8x7B's config (the core's test cases) under llama.cpp on an H100.
fn mixtral_llama_cpp(extra: &[&str]) -> Output {
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crates/gpumem-core/tests/cases/configs/mixtral-8x7b.json"
    );
    let mut args = vec![
        "estimate",
        "--config",
        config,
        "--context",
        "8192",
        "--engine",
        "llama.cpp",
        "--card",
        "h100-sxm-80gb",
    ];
    args.extend_from_slice(extra);
    Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args(&args)
        .output()
        .expect("the agent binary runs")
}

fn mixtral_engine(extra: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(extra);
    let out = mixtral_llama_cpp(&all);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    v["engine"].clone()
}

/// `--override-tensor '\.ffn_.*_exps\.=CPU'` moves every block's routed experts to the
/// host, as `--n-cpu-moe 32` does: Mixtral's 32 blocks × 3 projections × 8 experts ×
/// 14 336 × 4096 in bf16 leave the card's model buffer for `host_weights_bytes`.
#[test]
fn override_tensor_moves_the_experts_to_the_host() {
    let plain = mixtral_engine(&[]);
    let ot = mixtral_engine(&["--override-tensor", "\\.ffn_.*_exps\\.=CPU"]);
    let ncm = mixtral_engine(&["--n-cpu-moe", "32"]);
    assert_eq!(ot, ncm);
    let experts = 32 * 3 * 8 * 14_336 * 4096 * 2u64;
    let host = |v: &Value| v["host_weights_bytes"].as_u64().expect("host bytes");
    assert_eq!(host(&ot) - host(&plain), experts);
    let weights = |v: &Value| {
        v["lines"]
            .as_array()
            .expect("lines")
            .iter()
            .find(|l| l["key"] == "weights")
            .and_then(|l| l["bytes"].as_u64())
            .expect("weights line")
    };
    assert_eq!(weights(&plain) - weights(&ot), experts);
    // The text answer shows the host line.
    let out = mixtral_llama_cpp(&["--verbose", "--override-tensor", "exps=CPU"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Model weights in host memory"));
}

/// A pattern regex-lite refuses (look-around, which llama.cpp's std::regex takes)
/// or a buffer type off this card: exit 2, one message naming the flag, nothing printed.
#[test]
fn bad_override_tensor_exits_2_with_a_clear_message() {
    for (value, says) in [
        ("blk\\.(?!0\\.)ffn=CPU", "look-around"),
        ("ffn_(up=CPU", "not a regular expression"),
        ("exps=CUDA1", "one card"),
        ("exps", "<pattern>=<buffer type>"),
    ] {
        let out = mixtral_llama_cpp(&["--override-tensor", value]);
        assert_eq!(out.status.code(), Some(2), "{value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--override-tensor:") && err.contains(says),
            "{value}: {err}"
        );
        assert!(out.stdout.is_empty(), "{value}");
    }
}

/// The verdict key (`yes`, `borderline`, `no`) and the placement of a JSON answer.
fn verdict_and_placement(v: &Value) -> (String, Value) {
    (
        v["verdict"]["verdict"]
            .as_str()
            .expect("verdict")
            .to_string(),
        v["placement"].clone(),
    )
}

/// When every layer does not fit, the answer chooses the placement: Mixtral-8x7B in
/// bf16 (93 GB) on an H100 gets the smallest `--n-cpu-moe`, which typed back is
/// "fits" (exit 0) where one block fewer is not; the default text says the flags and
/// the host RAM against `--ram`. Llama-3.1-8B in bf16 on a 12 GB card gets the largest
/// `--n-gpu-layers`, the same way.
#[test]
fn a_placement_is_chosen_when_every_layer_does_not_fit() {
    let run = |extra: &[&str]| {
        let mut all = vec!["--json"];
        all.extend_from_slice(extra);
        let out = mixtral_llama_cpp(&all);
        let v: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
        (out.status.code(), verdict_and_placement(&v))
    };
    let (code, (verdict, p)) = run(&["--ram", "16GiB"]);
    assert_eq!((code, verdict.as_str()), (Some(1), "no"));
    let k = p["n_cpu_moe"].as_u64().expect("--n-cpu-moe chosen");
    assert!(k > 0 && k < 32, "{p}");
    assert!(p["n_gpu_layers"].is_null(), "{p}");
    assert_eq!(p["flags"], format!("--n-cpu-moe {k}"));
    assert_eq!(p["fit"]["verdict"], "yes");
    assert_ne!(p["next"]["verdict"], "yes");
    // The token embeddings (32 000 × 4096 × 2 B) and k blocks' experts, against 16 GiB.
    let experts = 3 * 8 * 14_336 * 4096 * 2u64;
    let host = p["host"]["need_bytes"].as_u64().expect("host bytes");
    assert_eq!(host, 32_000 * 4096 * 2 + k * experts);
    assert_eq!(p["host"]["fits"], host <= 16 << 30);
    let typed = k.to_string();
    let (code, (verdict, again)) = run(&["--n-cpu-moe", &typed]);
    assert_eq!((code, verdict.as_str()), (Some(0), "yes"));
    assert!(again.is_null(), "a placement given is the user's: {again}");
    let fewer = (k - 1).to_string();
    let (_, (verdict, _)) = run(&["--n-cpu-moe", &fewer]);
    assert_ne!(verdict, "yes");
    let out = mixtral_llama_cpp(&["--ram", "16GiB"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Placement that fits      llama-server --n-cpu-moe"),
        "{text}"
    );
    assert!(text.contains("--ram 16.00 GiB"), "{text}");
    assert!(text.contains("--fit"), "{text}");

    // Dense: the largest -ngl.
    let dense = |extra: &[&str]| {
        let mut all = vec![
            "--json",
            "--engine",
            "llama.cpp",
            "--card",
            "rtx-3060-12gb",
            "--context",
            "8192",
        ];
        all.extend_from_slice(extra);
        let out = agent(&all);
        let v: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
        verdict_and_placement(&v)
    };
    let (verdict, p) = dense(&[]);
    assert_eq!(verdict, "no");
    let g = p["n_gpu_layers"].as_u64().expect("-ngl chosen");
    assert!(g > 1 && g < 33, "{p}");
    assert!(p["n_cpu_moe"].is_null(), "{p}");
    let (verdict, _) = dense(&["--n-gpu-layers", &g.to_string()]);
    assert_eq!(verdict, "yes");
    let (verdict, _) = dense(&["--n-gpu-layers", &(g + 1).to_string()]);
    assert_ne!(verdict, "yes");
    // Every layer fits an H100: nothing to choose.
    let out = agent(&[
        "--json",
        "--engine",
        "llama.cpp",
        "--card",
        "h100-sxm-80gb",
        "--context",
        "8192",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert!(v.get("placement").is_none(), "{}", v["placement"]);
}

/// vLLM: when the weights leave the pool too little, the answer chooses the smallest
/// whole `--cpu-offload-gb`: Llama-3.1-8B in bf16 on a 16 GiB card at 8 192 tokens.
/// Typed back it is "fits" (exit 0) where one GiB less is not; its host RAM is the
/// whole parameters vLLM moves (at least the GiB asked, less than one layer more),
/// judged against `--ram` (exit 1 when short).
#[test]
fn a_cpu_offload_is_chosen_when_vllm_has_no_pool() {
    let run = |extra: &[&str]| {
        let mut all = vec![
            "--json",
            "--engine",
            "vllm",
            "--card",
            "16GiB",
            "--max-model-len",
            "8192",
        ];
        all.extend_from_slice(extra);
        let out = agent(&all);
        let v: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
        (out.status.code(), v)
    };
    let (code, v) = run(&["--ram", "32GiB"]);
    assert_eq!(
        (code, v["verdict"]["verdict"].as_str()),
        (Some(1), Some("no"))
    );
    let o = &v["cpu_offload"];
    let g = o["gib"].as_u64().expect("--cpu-offload-gb chosen");
    assert!(g > 0 && g < 16, "{o}");
    assert_eq!(o["flags"], format!("--cpu-offload-gb {g}"));
    assert_eq!(o["fit"]["verdict"], "yes");
    assert_ne!(o["next"]["verdict"], "yes");
    let host = o["host"]["need_bytes"].as_u64().expect("host bytes");
    // A layer: 436 224 000 B; its largest parameter, gate_up_proj, 234 881 024 B.
    assert!(host >= g << 30 && host < (g << 30) + 234_881_024, "{host}");
    assert_eq!(o["host"]["fits"], true);
    let typed = g.to_string();
    let (code, v) = run(&["--cpu-offload-gb", &typed, "--ram", "32GiB"]);
    assert_eq!(
        (code, v["verdict"]["verdict"].as_str()),
        (Some(0), Some("yes"))
    );
    assert!(
        v.get("cpu_offload").is_none(),
        "given, not chosen: {}",
        v["cpu_offload"]
    );
    assert_eq!(v["verdict"]["host"]["need_bytes"].as_u64(), Some(host));
    let (_, v) = run(&["--cpu-offload-gb", &(g - 1).to_string()]);
    assert_ne!(v["verdict"]["verdict"], "yes");
    // Too little RAM for the pinned weights: exit 1.
    let (code, v) = run(&["--cpu-offload-gb", &typed, "--ram", "2GiB"]);
    assert_eq!(code, Some(1));
    assert_eq!(v["verdict"]["host"]["fits"], false);
}

/// llama.cpp over two cards: the default answer prints one row per GPU and names the
/// most loaded; `--json` carries the devices, whose weights add up to the one-card
/// model buffer; a bad list or split exits 2 with its reason.
#[test]
fn several_cards_under_llama_cpp_print_each_device() {
    let split = [
        "--engine",
        "llama.cpp",
        "--card",
        "24GiB,12GiB",
        "--max-model-len",
        "8192",
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .arg("estimate")
        .args(LLAMA_8B)
        .args(split)
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("the most loaded of 2 cards"), "{text}");
    assert!(text.contains("blocks 0–22"), "{text}");
    assert!(text.contains("blocks 23–31 + output"), "{text}");
    let v = json(&split);
    let devices = v["engine"]["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[1]["most_loaded"], true);
    assert_eq!(v["engine"]["capacity_bytes"], 12u64 << 30);
    assert_eq!(v["verdict"]["card"]["capacity_bytes"], 12u64 << 30);
    let weights: u64 = devices
        .iter()
        .map(|d| d["weights_bytes"].as_u64().unwrap())
        .sum();
    let one = json(&[
        "--engine",
        "llama.cpp",
        "--card",
        "48GiB",
        "--max-model-len",
        "8192",
    ]);
    let model_buffer = one["engine"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["key"] == "weights")
        .unwrap()["bytes"]
        .as_u64()
        .unwrap();
    assert_eq!(weights, model_buffer);
    for (flags, why) in [
        (&["--card", "24GiB,rtx-9999x"][..], "card 1"),
        (
            &["--card", "24GiB,12GiB", "--tensor-split", "-1,1"][..],
            "tensor-split",
        ),
        (
            &["--card", "24GiB,12GiB", "--tensor-split", "1,1,1"][..],
            "3 shares for 2 cards",
        ),
        (
            &["--card", "24GiB,12GiB", "--split-mode", "row"][..],
            "split-mode",
        ),
    ] {
        let mut args = vec!["--engine", "llama.cpp", "--max-model-len", "8192"];
        args.extend_from_slice(flags);
        let out = agent(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(why), "{flags:?}: {err}");
    }
    // Another engine, or none, judges one card: a list is refused.
    let out = agent(&["--card", "24GiB,12GiB", "--context", "8192"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("llama.cpp"));
}

/// vLLM's stages asked for more sequences than their pool holds: the answer is the stage
/// rule's DOES NOT FIT (no `--cpu-offload-gb` offered: the stages take none), and the
/// table's rows, which hold one sequence each, carry no verdict of their own beside it:
/// the most loaded row says the headline's, and the note says whose need it is.
#[test]
fn stages_asked_too_many_sequences_answer_one_verdict() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .arg("estimate")
        .args(LLAMA_8B)
        .args([
            "--engine",
            "vllm@0.19",
            "--pp",
            "2",
            "--gpus",
            "2",
            "--card",
            "l40s,a10",
            "--context",
            "16000",
            "--sequences",
            "40",
        ])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    // 1: does not fit (2 would be bad input, with no answer).
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    assert!(text.contains("DOES NOT FIT  on NVIDIA A10"), "{text}");
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("layers 0–15") || l.contains("layers 16–31"))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(
        !rows[0].contains("fits") && !rows[0].contains("FIT"),
        "{text}"
    );
    assert!(rows[1].ends_with("most loaded: DOES NOT FIT"), "{text}");
    assert!(!text.contains("cpu-offload-gb"), "{text}");
    assert!(
        text.contains("is GPU 1's with the 40 sequences asked at once"),
        "{text}"
    );
}

/// vLLM over two unequal cards: its pipeline stages, one row per GPU, the most loaded
/// the one with the fewest blocks (the 40 GB card, which also holds the head); the
/// devices' weights add up to the one-card weights; VLLM_PP_LAYER_PARTITION moves
/// layers; a list that is not one card per GPU exits 2 with its reason.
#[test]
fn several_cards_under_vllm_are_its_pipeline_stages() {
    let stages = [
        "--engine",
        "vllm@0.19",
        "--pp",
        "2",
        "--gpus",
        "2",
        "--card",
        "a100-80gb,a100-40gb",
        "--max-model-len",
        "8192",
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .arg("estimate")
        .args(LLAMA_8B)
        .args(stages)
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("on NVIDIA A100 40GB (reported capacity), the most loaded of 2 cards"),
        "{text}"
    );
    assert!(text.contains("layers 0–15 + embeddings"), "{text}");
    assert!(text.contains("layers 16–31 + output"), "{text}");
    let v = json(&stages);
    let devices = v["engine"]["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[1]["most_loaded"], true);
    assert_eq!(devices[0]["split"], "stage 0 of 2");
    let weights: u64 = devices
        .iter()
        .map(|d| d["weights_bytes"].as_u64().unwrap())
        .sum();
    let one = json(&[
        "--engine",
        "vllm@0.19",
        "--card",
        "a100-80gb",
        "--max-model-len",
        "8192",
    ]);
    let one_weights = one["engine"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["key"] == "weights")
        .unwrap()["bytes"]
        .as_u64()
        .unwrap();
    assert_eq!(weights, one_weights);
    let mut moved = stages.to_vec();
    moved.extend_from_slice(&["--pp-layer-partition", "20,12"]);
    let m = json(&moved);
    assert_eq!(
        m["engine"]["devices"][0]["layers"],
        "layers 0–19 + embeddings"
    );
    assert!(
        m["engine"]["max_sequences"].as_u64() > v["engine"]["max_sequences"].as_u64(),
        "{m}"
    );
    for (flags, why) in [
        (&["--gpus", "2", "--tp", "2"][..], "--pp"),
        (&["--gpus", "4", "--pp", "4"][..], "2 cards for tp 1 × pp 4"),
        (
            &["--gpus", "2", "--pp", "2", "--pp-layer-partition", "20,10"][..],
            "30 layers",
        ),
    ] {
        let mut args = vec![
            "--engine",
            "vllm",
            "--card",
            "a100-80gb,a100-40gb",
            "--max-model-len",
            "8192",
        ];
        args.extend_from_slice(flags);
        let out = agent(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(why), "{flags:?}: {err}");
    }
}

/// `--mmproj FILE`: the projector's GGUF header is read (its tensors counted as the
/// model file's are) and its weights and its encoder's compute buffer come off the
/// card's room; `--no-mmproj-offload` moves them to the host line. The file is LLaVA-1.5's
/// `mmproj-model-f16.gguf` header (377 tensors, 624 412 672 B: the 595.49 MiB llama.cpp
/// logs for it).
#[test]
fn an_mmproj_file_is_counted_on_the_card_or_the_host() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("mmproj-model-f16.gguf");
    std::fs::write(&path, gpumem_core::engine::mmproj::llava_15_header(true))
        .expect("header written");
    let file = path.to_str().expect("utf-8 path");
    let base = [
        "--engine",
        "llama.cpp",
        "--card",
        "rtx-4090",
        "--max-model-len",
        "8192",
    ];
    let line = |v: &Value, key: &str| {
        v["engine"]["lines"]
            .as_array()
            .expect("lines")
            .iter()
            .find(|l| l["key"] == key)
            .map(|l| l["bytes"].as_u64().expect("bytes"))
    };
    let plain = json(&base);
    let mut args = base.to_vec();
    args.extend_from_slice(&["--mmproj", file]);
    let on = json(&args);
    assert_eq!(line(&on, "mmproj_weights"), Some(624_412_672));
    let enc = line(&on, "mmproj_compute").expect("the encoder's compute line");
    let room = |v: &Value| v["engine"]["kv_capacity_bytes"].as_i64().expect("room");
    assert_eq!(room(&plain) - room(&on), (624_412_672 + enc) as i64);
    args.push("--no-mmproj-offload");
    let off = json(&args);
    assert_eq!(line(&off, "mmproj_weights"), None);
    assert_eq!(room(&off), room(&plain));
    assert_eq!(
        line(&off, "host_weights").unwrap() - line(&plain, "host_weights").unwrap(),
        624_412_672 + enc
    );
    // A file that is no projector, and a missing one: exit 2 with the flag named.
    let model = dir.path().join("model.gguf");
    std::fs::write(
        &model,
        gpumem_core::import::gguf::build_header("llama", &[("blk.0.attn_q.weight", &[32, 32], 0)]),
    )
    .expect("header written");
    for bad in [
        model.to_str().expect("utf-8 path"),
        "/nonexistent/mmproj.gguf",
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(&["--mmproj", bad]);
        let out = agent(&args);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--mmproj"), "{bad}: {err}");
    }
}
