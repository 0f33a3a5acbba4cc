//! One question, one answer: the verdict checks the workload asked for, the ways out
//! respect every input, and nothing else on the screen contradicts it — through the
//! real (debug) binary on the real configs of the test set.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

use std::path::PathBuf;
use std::process::{Command, Output};

fn config(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/gpumem-core/tests/cases/configs")
        .join(format!("{name}.json"))
        .display()
        .to_string()
}

fn estimate(model: &str, extra: &[&str]) -> Output {
    let cfg = config(model);
    let mut args = vec!["estimate", "--config", cfg.as_str()];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args(&args)
        .output()
        .expect("the agent runs");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn verdict_line(out: &Output) -> String {
    text(out)
        .lines()
        .find(|l| {
            l.starts_with("FITS") || l.starts_with("BORDERLINE") || l.starts_with("DOES NOT FIT")
        })
        .unwrap_or_default()
        .to_owned()
}

fn row(out: &Output, label: &str) -> String {
    text(out)
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn under_an_engine_the_verdict_checks_every_sequence_asked_for() {
    // Qwen2.5-7B on an L40S with vLLM, 16 sequences of 32 768 tokens: one sequence
    // starts the engine, but its pool holds 13 at once (0.29's, its CUDA-graph
    // estimate taken off; 14 under 0.27's rules).
    let out = estimate(
        "qwen2.5-7b",
        &[
            "--engine",
            "vllm",
            "--card",
            "l40s",
            "--context",
            "32768",
            "--sequences",
            "16",
        ],
    );
    assert!(
        verdict_line(&out).starts_with("DOES NOT FIT"),
        "{}",
        text(&out)
    );
    assert_eq!(out.status.code(), Some(1), "does not fit: exit 1");
    let seqs = row(&out, "sequences");
    assert!(
        seqs.contains("13 of 16 sequences of 32 768 tokens"),
        "{}",
        text(&out)
    );
    // One total: the estimate's transformers-style total is not printed beside it.
    assert!(!text(&out).contains("  total "), "{}", text(&out));
    // The same workload at the concurrency the pool holds fits.
    let out = estimate(
        "qwen2.5-7b",
        &[
            "--engine",
            "vllm",
            "--card",
            "l40s",
            "--context",
            "32768",
            "--sequences",
            "13",
        ],
    );
    assert!(verdict_line(&out).starts_with("FITS"), "{}", text(&out));
    assert_eq!(out.status.code(), Some(0));
    // The JSON carries the same answer.
    let out = estimate(
        "qwen2.5-7b",
        &[
            "--engine",
            "vllm",
            "--card",
            "l40s",
            "--context",
            "32768",
            "--sequences",
            "16",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["verdict"]["verdict"], "no");
    assert_eq!(v["verdict"]["sequences"]["fit"], 13);
    assert_eq!(v["verdict"]["sequences"]["asked"], 16);
    assert_eq!(v["engine"]["workload_outcome"], "refused");
}

#[test]
fn a_quantised_72b_at_tp_2_is_judged_on_its_sequences() {
    let out = estimate(
        "qwen2.5-72b",
        &[
            "--format",
            "awq-4-g128",
            "--tp",
            "2",
            "--gpus",
            "2",
            "--engine",
            "vllm",
            "--card",
            "h100-sxm-80gb",
            "--context",
            "32768",
            "--sequences",
            "16",
        ],
    );
    assert!(
        verdict_line(&out).starts_with("DOES NOT FIT"),
        "{}",
        text(&out)
    );
    assert!(
        row(&out, "sequences").contains(" of 16 sequences"),
        "{}",
        text(&out)
    );
    // The ways out start from the split asked for.
    let cards = row(&out, "Cards needed");
    assert!(
        !cards.contains("at tp 1:") && !cards.contains("at tp 2:"),
        "{cards}"
    );
}

#[test]
fn cards_needed_never_undoes_the_split_asked_for() {
    let out = estimate(
        "llama-3.1-8b",
        &[
            "--tp",
            "4",
            "--gpus",
            "4",
            "--card",
            "h100-sxm-80gb",
            "--context",
            "8192",
        ],
    );
    let cards = row(&out, "Cards needed");
    assert!(
        cards.contains("4 × NVIDIA H100 SXM 80GB at tp 4"),
        "{cards}"
    );
}

#[test]
fn without_a_card_the_headline_is_never_a_failing_card_called_the_smallest_that_fits() {
    let out = estimate(
        "llama-3.1-70b",
        &["--context", "131072", "--sequences", "64"],
    );
    let line = verdict_line(&out);
    assert!(line.starts_with("DOES NOT FIT"), "{line}");
    assert!(!line.contains("the smallest card that fits"), "{line}");
    assert!(
        line.contains("no card in the catalogue holds it alone"),
        "{line}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn the_smallest_card_runs_the_weights_format() {
    // 70B in fp8 at 8 × 8k: the MI250X (128 GB, no fp8) would be the smallest by
    // capacity; the smallest card that runs fp8 weights is named instead.
    let out = estimate(
        "llama-3.1-70b",
        &["--format", "fp8", "--context", "8192", "--sequences", "8"],
    );
    let smallest = row(&out, "Smallest card that fits");
    assert!(!smallest.contains("MI250X"), "{smallest}");
    assert!(smallest.contains("H200"), "{smallest}");
}

#[test]
fn engine_rules_apply_without_a_card() {
    // llama.cpp's cache types change its answer whether or not a card is named.
    let need = |k: &str| {
        let out = estimate(
            "llama-3.1-8b",
            &[
                "--engine",
                "llama.cpp",
                "--cache-type-k",
                k,
                "--context",
                "32768",
            ],
        );
        assert!(
            verdict_line(&out).contains("under llama.cpp's budget"),
            "{}",
            text(&out)
        );
        row(&out, "need")
    };
    assert_ne!(need("f16"), need("q8_0"));
}

#[test]
fn the_widest_format_is_one_the_engine_loads() {
    let widest = |engine: &str| {
        let out = estimate(
            "llama-3.1-70b",
            &["--engine", engine, "--card", "4090", "--context", "4096"],
        );
        row(&out, "Widest format that fits")
    };
    let vllm = widest("vllm");
    assert!(!vllm.contains("q3_k") && !vllm.contains("q2_k"), "{vllm}");
    let llama = widest("llama.cpp");
    assert!(!llama.contains("fp8") && !llama.contains("awq"), "{llama}");
}

#[test]
fn gpus_say_whether_they_are_replicas_and_training_does_not_claim_more_cards_split_it() {
    let out = estimate(
        "llama-3.1-8b",
        &[
            "--train",
            "lora",
            "--gpus",
            "8",
            "--context",
            "2048",
            "--card",
            "4090",
        ],
    );
    let all = text(&out).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(all.contains("8 GPUs: 8 replicas of tp 1"), "{all}");
    let cards = row(&out, "Cards needed");
    assert!(
        cards.contains("each GPU holds the whole training step"),
        "{cards}"
    );
    assert!(!cards.contains("more than 64"), "{cards}");
}

#[test]
fn exit_status_follows_the_verdict() {
    let fits = estimate(
        "llama-3.1-8b",
        &["--context", "8192", "--card", "h100-sxm-80gb"],
    );
    assert_eq!(fits.status.code(), Some(0));
    let no = estimate("llama-3.1-70b", &["--context", "8192", "--card", "t4"]);
    assert_eq!(no.status.code(), Some(1));
    let bad = estimate("llama-3.1-8b", &["--context", "lots"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn impossible_inputs_and_other_model_kinds_are_refused_with_a_reason() {
    for (extra, says) in [
        (&["--context", "1000000000000"][..], "over 2^30 tokens"),
        (&["--context", "8192", "--card", "0GB"][..], "holds nothing"),
    ] {
        let out = estimate("llama-3.1-8b", extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{extra:?}: {err}");
    }
    // An encoder whose layers are not counted (DistilBERT's config): no KV cache to
    // invent; refused naming why. (BERT-style encoders are counted: estimate_cli.rs.)
    let dir = tempfile::tempdir().expect("tempdir");
    let bge = dir.path().join("config.json");
    std::fs::write(
        &bge,
        r#"{"architectures": ["DistilBertModel"], "model_type": "distilbert", "dim": 768,
            "n_layers": 6, "n_heads": 12, "hidden_dim": 3072, "vocab_size": 30522,
            "max_position_embeddings": 512}"#,
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args(["estimate", "--config"])
        .arg(&bge)
        .args(["--context", "512"])
        .output()
        .expect("the agent runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("encoder-only") && err.contains("no KV cache"),
        "{err}"
    );
}

#[test]
fn engine_switches_are_spelled_as_the_engines_spell_them() {
    let lines = |extra: &[&str]| {
        let mut args = vec![
            "--engine",
            "vllm",
            "--card",
            "h100-sxm-80gb",
            "--context",
            "8192",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = estimate("llama-3.1-8b", &args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        v["engine"]["lines"]
            .as_array()
            .expect("lines")
            .iter()
            .map(|l| l["key"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    // vLLM's `--enforce-eager` and `--enable-lora` are bare switches; a value still works.
    let bare = lines(&["--enforce-eager", "--enable-lora"]);
    assert!(bare.contains(&"lora".to_owned()), "{bare:?}");
    assert!(!bare.contains(&"cuda_graphs".to_owned()), "{bare:?}");
    assert_eq!(
        bare,
        lines(&["--enforce-eager", "true", "--enable-lora", "true"])
    );
    assert!(lines(&["--enforce-eager", "false"]).contains(&"cuda_graphs".to_owned()));
}

#[test]
fn an_assumed_reserve_alone_never_decides_a_no() {
    // Mistral-7B in fp16 on a T4 at 4 096 tokens: 14.46 GiB without the flat 4 GiB
    // reserve against 15.00 GiB; the reserve alone puts it over.
    let out = estimate(
        "mistral-7b-v0.1",
        &["--format", "fp16", "--card", "t4", "--context", "4096"],
    );
    assert!(
        verdict_line(&out).starts_with("BORDERLINE"),
        "{}",
        text(&out)
    );
    assert_eq!(out.status.code(), Some(0), "borderline exits 0");
    assert!(
        text(&out).contains("-4.00 GiB    short side"),
        "{}",
        text(&out)
    );
    // Short by more than the reserve is still a no.
    let out = estimate(
        "mistral-7b-v0.1",
        &["--format", "fp16", "--card", "t4", "--context", "65536"],
    );
    assert!(
        verdict_line(&out).starts_with("DOES NOT FIT"),
        "{}",
        text(&out)
    );
    assert_eq!(out.status.code(), Some(1));
    // A reserve given in bytes (measured) is no hypothesis: the rule is symmetric.
    let out = estimate(
        "mistral-7b-v0.1",
        &[
            "--format",
            "fp16",
            "--card",
            "t4",
            "--context",
            "4096",
            "--reserve-bytes",
            "4294967296",
        ],
    );
    assert!(
        verdict_line(&out).starts_with("DOES NOT FIT"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("short side"), "{}", text(&out));
}

/// `estimate --json`'s figures for a config of the test set and flags: every line's
/// bytes by key, and the total.
fn json_figures(model: &str, flags: &[&str]) -> (Vec<(String, u64)>, u64) {
    let out = estimate(model, &[&["--json"], flags].concat());
    let doc: gpumem_proto::estimate::EstimateDocument =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    figures(&doc.estimate)
}

fn figures(e: &gpumem_core::estimate::Estimate) -> (Vec<(String, u64)>, u64) {
    (
        e.lines
            .iter()
            .map(|l| (l.key.as_str().to_owned(), l.bytes))
            .collect(),
        e.total_bytes,
    )
}

/// The core's one reader (`inputs::read`, which the tracer, `run`'s comparison,
/// `models` and the page's modules answer from) on a config of the test set, the
/// estimate's pairs and the engine's.
fn read_figures(
    model: &str,
    pairs: &[(&str, &str)],
    engine: &[(&str, &str)],
) -> (Vec<(String, u64)>, u64) {
    #[allow(clippy::disallowed_methods)] // a test's fixture
    let text = std::fs::read_to_string(config(model)).unwrap();
    let mut all = gpumem_core::import::config::parse_config(&text)
        .unwrap()
        .pairs();
    all.extend(pairs.iter().map(|(k, v)| {
        let key = gpumem_core::params::keys().find(|p| p == k).unwrap();
        (key, (*v).to_owned())
    }));
    let read = gpumem_core::inputs::read(
        all.iter().map(|(k, v)| (*k, v.as_str())),
        engine.iter().copied(),
    );
    assert!(read.errors.is_empty() && read.engine_errors.is_empty());
    figures(&gpumem_core::estimate::estimate(&read.input).unwrap())
}

/// One answer per screen: `estimate --json` and the one reader every other path
/// answers from give the same figures, the engine and the card deciding the same —
/// a hybrid model served by vLLM (Qwen3-Next's state line in vLLM's layout) and a
/// state-space model trained on a card of another generation than sm_90 (a Mamba's
/// LoRA step on an L4: torch's smaller cuBLAS workspaces).
#[test]
fn estimate_json_and_the_one_reader_agree_on_engine_and_card() {
    let served = json_figures(
        "qwen3-next-80b-a3b",
        &["--context", "4096", "--engine", "vllm", "--card", "l4"],
    );
    let read = read_figures(
        "qwen3-next-80b-a3b",
        &[("context", "4096")],
        &[("engine", "vllm"), ("card", "l4")],
    );
    assert_eq!(served, read);
    let own = read_figures("qwen3-next-80b-a3b", &[("context", "4096")], &[]);
    let state = |f: &(Vec<(String, u64)>, u64)| {
        f.0.iter()
            .find(|(k, _)| k == "kv_cache.state")
            .map(|(_, b)| *b)
    };
    assert!(state(&served) < state(&own), "{served:?} {own:?}");
    let trained = json_figures(
        "mamba-2.8b",
        &["--context", "1024", "--train", "lora", "--card", "l4"],
    );
    let read = read_figures(
        "mamba-2.8b",
        &[("context", "1024"), ("train", "lora")],
        &[("card", "l4")],
    );
    assert_eq!(trained, read);
    let anywhere = read_figures("mamba-2.8b", &[("context", "1024"), ("train", "lora")], &[]);
    assert!(trained.1 < anywhere.1, "{trained:?} {anywhere:?}");
}
