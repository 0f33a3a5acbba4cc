//! `gpumem-agent trace` and `estimate --trace` through the real (debug) binary, with the
//! torch venv's Python (torch, transformers and peft on the CPU; nothing downloaded, no
//! GPU): Llama-3.2-1B's full fine-tune traced, checkpointing's effect, a missing Python,
//! and the traced lines in the estimate.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

fn agent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
}

fn config(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/gpumem-core/tests/cases/configs")
        .join(name)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn trace(python: &Path, cfg: &str, extra: &[&str]) -> (Output, serde_json::Value) {
    let out = agent()
        .arg("trace")
        .arg("--config")
        .arg(config(cfg))
        .arg("--python")
        .arg(python)
        .args(extra)
        .arg("--json")
        .output()
        .expect("agent runs");
    assert!(
        out.status.success(),
        "trace failed: {}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    let doc = serde_json::from_slice(&out.stdout).expect("the trace is JSON");
    (out, doc)
}

fn phase<'a>(doc: &'a serde_json::Value, name: &str, step: u64) -> &'a serde_json::Value {
    doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name && p["step"] == step)
        .unwrap_or_else(|| panic!("no {name}[{step}]"))
}

fn at(p: &serde_json::Value, category: &str) -> u64 {
    p["at_peak"][category].as_u64().unwrap()
}

const LLAMA_1B: &[&str] = &[
    "--train",
    "full",
    "--sequences",
    "4",
    "--context",
    "2048",
    "--compute-dtype",
    "bf16",
    "--master-weights",
    "false",
    "--optimizer",
    "adamw",
    "--attention",
    "flash",
];

/// Llama-3.2-1B, full fine-tune, 4 × 2048 tokens, bf16, pure-bf16 AdamW, flash
/// attention: the exact parameter count, and the forward's kept activations and the
/// persistent state explained tensor by tensor.
#[test]
fn llama_3_2_1b_full_fine_tune_is_traced_and_explained() {
    let Some(python) = gpumem_e2e::torch_python("llama_3_2_1b_full_fine_tune") else {
        return;
    };
    let started = Instant::now();
    let (_, doc) = trace(&python, "llama-3.2-1b.json", LLAMA_1B);
    let wall = started.elapsed();
    eprintln!(
        "trace of Llama-3.2-1B 4 × 2048: {:.1} s wall ({} ms in Python)",
        wall.as_secs_f64(),
        doc["wall_time_ms"]
    );
    assert_eq!(doc["schema"], "gpumem.trace/v1");
    // 128 256 × 2048 tied embedding + 16 layers × (q 2048² + k, v 2048 × 512 + o 2048²
    // + gate, up, down 3 × 2048 × 8192 + 2 norms × 2048) + final norm 2048.
    let per_layer: u64 = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048;
    assert_eq!(
        doc["parameters"].as_u64(),
        Some(128_256 * 2048 + 16 * per_layer + 2048)
    );
    assert_eq!(doc["parameters"].as_u64(), Some(1_235_814_400));

    // Step 1's forward keeps, per layer and token (bf16, h = 2048, 32 query heads and
    // 8 KV heads of 64, intermediate 8192): two RMSNorms (fp32 upcast 4h + normalised
    // 2h + scaled output 2h), q and k after RoPE (2·2048 + 2·512), v (2·512), the
    // attention output (2·2048) and its fp32 log-sum-exp (4·32), the MLP's gate, SiLU,
    // up and product (4 × 2·8192), and each norm's fp32 rsqrt (4 B, one 512 B block
    // per tensor); then the final norm and the rotary cos/sin once.
    let tokens: u64 = 4 * 2048;
    let norm = tokens * (4 + 2 + 2) * 2048;
    let rsqrt: u64 = (tokens * 4).div_ceil(512) * 512;
    let layer = 2 * norm
        + 2 * rsqrt
        + tokens * 2 * (2048 + 512 + 512)
        + tokens * 2 * 2048
        + tokens * 4 * 32
        + 4 * tokens * 2 * 8192;
    // cos and sin of RoPE, (1, 2048, 64) bf16 each; the shifted labels (int64) and the
    // loss with nll_loss's total weight (one 512 B block each).
    let rotary = 2 * 2048 * 64 * 2;
    let labels = tokens * 8;
    let expected = 16 * layer + norm + rsqrt + rotary + labels + 2 * 512;
    let forward = phase(&doc, "forward", 1);
    let kept = at(forward, "activations");
    eprintln!(
        "forward[1] kept for backward: traced {kept} B, derived {expected} B; logits at the forward's peak {} B",
        at(forward, "logits")
    );
    assert_eq!(kept, expected, "every kept tensor accounted for");

    // The persistent state at the end of step 1: bf16 weights (one block each), bf16
    // gradients and two bf16 AdamW states of every parameter.
    let step = phase(&doc, "optimizer_step", 1);
    let weights = 2 * 1_235_814_400u64;
    for (cat, expected) in [
        ("parameters", weights),
        ("gradients", weights),
        ("optimizer_state", 2 * weights),
    ] {
        let got = at(step, cat);
        // Every tensor rounds up to 512 B: at most 147 tensors × 511 B over.
        assert!(
            got >= expected && got - expected < 147 * 512,
            "{cat}: {got} vs {expected}"
        );
    }
    // The peaks add up, reserved covers allocated.
    for p in doc["phases"].as_array().unwrap() {
        let sum: u64 = p["at_peak"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(sum, p["allocated_peak_bytes"].as_u64().unwrap(), "{p}");
        assert!(p["reserved_peak_bytes"].as_u64() >= p["allocated_peak_bytes"].as_u64());
    }
}

/// With checkpointing, the forward keeps each decoder layer's input (bf16 b·s·h) and
/// the final norm's tensors instead of every layer's activations.
#[test]
fn checkpointing_keeps_only_the_layer_inputs() {
    let Some(python) = gpumem_e2e::torch_python("checkpointing_keeps_only_the_layer_inputs") else {
        return;
    };
    let mut flags = LLAMA_1B.to_vec();
    flags.extend(["--checkpointing", "true"]);
    let (_, doc) = trace(&python, "llama-3.2-1b.json", &flags);
    let kept = at(phase(&doc, "forward", 1), "activations");
    let tokens: u64 = 4 * 2048;
    let inputs = 16 * tokens * 2 * 2048;
    eprintln!("checkpointed forward[1] keeps {kept} B (layer inputs {inputs} B)");
    assert!(kept >= inputs, "{kept} < {inputs}");
    // Beyond the inputs: the final norm (8 B per token and hidden unit), the rotary
    // tables and a few small tensors — far below one layer's activations.
    assert!(kept - inputs < tokens * 10 * 2048, "{kept}");
}

#[test]
fn without_a_usable_python_it_exits_2_and_says_what_to_install() {
    let out = agent()
        .arg("trace")
        .arg("--config")
        .arg(config("llama-3.2-1b.json"))
        .args(["--context", "16", "--python", "/nonexistent/python3"])
        .output()
        .expect("agent runs");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("pip install torch transformers peft"), "{err}");
    // No context: a usage error before any Python starts.
    let out = agent()
        .arg("trace")
        .arg("--config")
        .arg(config("llama-3.2-1b.json"))
        .args(["--python", "/nonexistent/python3"])
        .output()
        .expect("agent runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--context"));
}

/// `estimate --trace`: the assumed activation and logits lines become traced ones, the
/// assumed figure kept beside, and the totals (hence the fit) follow.
#[test]
fn estimate_with_trace_uses_the_traced_lines() {
    let Some(python) = gpumem_e2e::torch_python("estimate_with_trace_uses_the_traced_lines") else {
        return;
    };
    let run = |extra: &[&str]| {
        let out = agent()
            .arg("estimate")
            .arg("--config")
            .arg(config("qwen2.5-0.5b.json"))
            .args([
                "--train",
                "full",
                "--sequences",
                "2",
                "--context",
                "512",
                "--json",
            ])
            .args(extra)
            .output()
            .expect("agent runs");
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let plain = run(&[]);
    let traced = run(&["--trace", "--python", python.to_str().unwrap()]);
    let line = |doc: &serde_json::Value, key: &str| {
        doc["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["key"] == key)
            .cloned()
            .unwrap()
    };
    for key in ["activations", "logits"] {
        let a = line(&plain, key);
        let t = line(&traced, key);
        assert_eq!(a["kind"], "computed", "Qwen2.5's lines are derived");
        assert_eq!(t["kind"], "traced");
        assert_eq!(t["replaced_bytes"], a["bytes"]);
        assert!(
            t["formula"]
                .as_str()
                .unwrap()
                .contains("replaces the computed figure")
        );
    }
    let bytes = |doc: &serde_json::Value, key: &str| {
        doc["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["key"] == key)
            .map_or(0, |l| l["bytes"].as_i64().unwrap())
    };
    let delta = |key: &str| bytes(&traced, key) - bytes(&plain, key);
    // The optimizer step's line (here: mixed precision's fp32 gradients and AdamW's
    // temporaries beyond the freed activations) is the trace's peak too: traced, it
    // is within the peak's lines and counts 0.
    assert!(bytes(&plain, "optimizer_step") > 0);
    assert_eq!(bytes(&traced, "optimizer_step"), 0);
    assert_eq!(
        traced["total_bytes"].as_i64().unwrap() - plain["total_bytes"].as_i64().unwrap(),
        delta("activations") + delta("logits") + delta("optimizer_step")
    );
    // The computed lines are untouched.
    assert_eq!(
        line(&plain, "training.optimizer"),
        line(&traced, "training.optimizer")
    );
}

/// `estimate --trace` for an inference: the prefill's lines of a derived decoder are
/// computed, and the traced ones (what was alive at the prefill's peak) add up to the
/// same bytes, so the total does not move.
#[test]
fn a_traced_prefill_matches_the_computed_lines() {
    let Some(python) = gpumem_e2e::torch_python("a_traced_prefill_matches_the_computed_lines")
    else {
        return;
    };
    let run = |extra: &[&str]| {
        let out = agent()
            .arg("estimate")
            .arg("--config")
            .arg(config("qwen2.5-0.5b.json"))
            .args([
                "--sequences",
                "2",
                "--context",
                "512",
                "--attention",
                "eager",
            ])
            .args(["--json"])
            .args(extra)
            .output()
            .expect("agent runs");
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let plain = run(&[]);
    let traced = run(&["--trace", "--python", python.to_str().unwrap()]);
    let prefill = |doc: &serde_json::Value, kind: &str| {
        doc["lines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["key"].as_str().unwrap().starts_with("prefill."))
            .inspect(|l| assert_eq!(l["kind"], kind, "{l}"))
            .map(|l| l["bytes"].as_u64().unwrap())
            .sum::<u64>()
    };
    let computed = prefill(&plain, "computed");
    assert!(computed > 0);
    assert_eq!(prefill(&traced, "traced"), computed);
    assert_eq!(traced["total_bytes"], plain["total_bytes"]);
}

/// DeepSeek-V2-Lite's MLA attention has values narrower than its queries (128 against
/// 192): under flash the values are padded to the queries' width and the output cut
/// back (transformers' flash path), under SDPA the memory-efficient kernel runs (the
/// flash kernel needs one head size). Both trace, and the trace counts the
/// estimator's parameters.
#[test]
fn an_attention_with_narrower_values_traces_under_flash_and_sdpa() {
    let Some(python) =
        gpumem_e2e::torch_python("an_attention_with_narrower_values_traces_under_flash_and_sdpa")
    else {
        return;
    };
    let est = agent()
        .args(["estimate", "--json", "--config"])
        .arg(config("deepseek-v2-lite.json"))
        .output()
        .expect("agent runs");
    let est: serde_json::Value = serde_json::from_slice(&est.stdout).expect("JSON");
    for attention in ["flash", "sdpa"] {
        let flags = [
            "--train",
            "full",
            "--sequences",
            "1",
            "--context",
            "128",
            "--attention",
            attention,
        ];
        let (_, doc) = trace(&python, "deepseek-v2-lite.json", &flags);
        assert_eq!(doc["parameters"], est["parameters"], "{attention}");
        assert_eq!(doc["parameters"], 15_706_484_224u64, "{attention}");
        assert!(
            at(phase(&doc, "forward", 1), "activations") > 0,
            "{attention}"
        );
    }
}

/// `trace --memory-history`: the allocator history of Llama-3.2-1B's full fine-tune
/// (4 × 2048, bf16, pure-bf16 AdamW, flash), attributed to the estimate's lines from
/// lifetimes, stacks and sizes alone, within 2 % of each line the estimate computes; the
/// replay's peaks equal the trace's own; the pickle is PyTorch's snapshot shape, read
/// by torch's own `_memory_viz`, and private.
#[test]
fn a_traced_step_is_attributed_to_the_estimates_lines() {
    let Some(python) = gpumem_e2e::torch_python("memory_history_attribution") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pickle = dir.path().join("llama.pickle");
    let mut args: Vec<&str> = LLAMA_1B.to_vec();
    let p = pickle.to_str().unwrap().to_owned();
    args.extend(["--memory-history", &p]);
    let (_, doc) = trace(&python, "llama-3.2-1b.json", &args);
    let a = &doc["attribution"];
    let peak = |name: &str, step: u64| {
        a["peaks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["phase"] == name && p["step"] == step)
            .unwrap_or_else(|| panic!("no attributed {name}[{step}]"))
            .clone()
    };
    let line = |p: &serde_json::Value, l: &str| {
        p["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["line"] == l)
            .unwrap()["bytes"]
            .as_u64()
            .unwrap()
    };
    // The replay finds the trace's own peaks, to the byte.
    for p in doc["phases"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let Some(step) = p["step"].as_u64() else {
            continue;
        };
        assert_eq!(
            peak(name, step)["allocated_bytes"],
            p["allocated_peak_bytes"],
            "{name}[{step}]"
        );
    }

    // The estimate's lines for the same workload.
    let out = agent()
        .arg("estimate")
        .arg("--config")
        .arg(config("llama-3.2-1b.json"))
        .args(LLAMA_1B)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let est: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let est_line = |prefix: &str| -> u64 {
        est["lines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["key"].as_str().unwrap().starts_with(prefix))
            .map(|l| l["bytes"].as_u64().unwrap())
            .sum()
    };
    let step_peak = peak("backward", 1);
    let after = peak("optimizer_step", 1);
    for (history_line, at, estimate_key) in [
        ("weights", &step_peak, "weights."),
        ("optimizer_state", &step_peak, "training.optimizer"),
        ("activations", &step_peak, "activations"),
        ("logits", &step_peak, "logits"),
        ("gradients", &after, "training.gradients"),
    ] {
        let got = line(at, history_line) as f64;
        let want = est_line(estimate_key) as f64;
        let err = (got - want) / want;
        eprintln!(
            "{history_line:<16} attributed {got:>16.0} B, estimate {want:>16.0} B ({:+.3} %)",
            100.0 * err
        );
        assert!(err.abs() < 0.02, "{history_line}: {got} vs {want}");
    }
    // Every peak's lines add up; the slack is reserved minus allocated.
    for p in a["peaks"].as_array().unwrap() {
        let sum: u64 = p["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(Some(sum), p["allocated_bytes"].as_u64());
        assert_eq!(
            p["slack_bytes"].as_u64().unwrap(),
            p["reserved_bytes"].as_u64().unwrap() - sum
        );
    }
    // Activations by decoder layer: 16 layers, each the same.
    let scopes = step_peak["activations_by_scope"].as_array().unwrap();
    let layers: Vec<_> = scopes
        .iter()
        .filter(|s| s["scope"].as_str().unwrap().starts_with("model.layers."))
        .collect();
    assert_eq!(layers.len(), 16, "{scopes:?}");
    assert!(layers.windows(2).all(|w| w[0]["bytes"] == w[1]["bytes"]));

    // The pickle: private, and read by PyTorch's own viewer code.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&pickle).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let check = Command::new(&python)
        .arg("-c")
        .arg(
            "import pickle, sys\n\
             from torch.cuda import _memory_viz as viz\n\
             snap = pickle.load(open(sys.argv[1], 'rb'))\n\
             text = viz.trace(snap)\n\
             assert 'TOTAL MEM' in text, text[-200:]\n\
             summary = viz.segsum(snap)\n\
             html = viz.trace_plot(snap)\n\
             assert len(html) > 1000\n\
             print(len(snap['device_traces'][0]), 'entries')\n",
        )
        .arg(&pickle)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "memory_viz could not read the pickle: {}",
        text(&check.stderr)
    );
    // A second run refuses to replace the file.
    let again = agent()
        .arg("trace")
        .arg("--config")
        .arg(config("llama-3.2-1b.json"))
        .arg("--python")
        .arg(&python)
        .args(LLAMA_1B)
        .args(["--memory-history", &p])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("exists"),
        "{}",
        text(&again.stderr)
    );
}

/// `--compile`: each decoder block under torch.compile, as torchtitan compiles them.
/// Inductor's partitioner saves less than the eager step keeps (SiLU's output and the
/// RMSNorms' fp32 upcasts are recomputed in the backward), the fused attention
/// kernel's output and log-sum-exp are kept either way, and the report says what was
/// traced and what was not counted.
#[test]
fn a_compiled_step_keeps_what_inductors_partitioner_saves() {
    let Some(python) =
        gpumem_e2e::torch_python("a_compiled_step_keeps_what_inductors_partitioner_saves")
    else {
        return;
    };
    let mut flags = LLAMA_1B.to_vec();
    flags[3] = "1";
    flags[5] = "512";
    let (_, eager) = trace(&python, "llama-3.2-1b.json", &flags);
    flags.push("--compile");
    let (_, compiled) = trace(&python, "llama-3.2-1b.json", &flags);
    let kept = |d: &serde_json::Value| at(phase(d, "forward", 1), "activations");
    let by_op = |d: &serde_json::Value, op: &str| {
        d["activations_by_op"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["op"] == op)
            .map(|r| r["bytes"].as_u64().unwrap())
    };
    eprintln!(
        "forward[1] keeps {} B eager, {} B compiled",
        kept(&eager),
        kept(&compiled)
    );
    assert!(kept(&compiled) < kept(&eager));
    // SiLU's output, 16 layers × 512 tokens × 8192 bf16, eager only.
    assert_eq!(by_op(&eager, "silu"), Some(16 * 512 * 8192 * 2));
    assert_eq!(by_op(&compiled, "silu"), None);
    let flash = "_scaled_dot_product_flash_attention";
    assert_eq!(by_op(&compiled, flash), by_op(&eager, flash));
    assert_eq!(compiled["workload"]["compile"], true);
    assert!(eager["workload"].get("compile").is_none());
    // The human report marks the partition and what it leaves out.
    let human = agent()
        .arg("trace")
        .arg("--config")
        .arg(config("llama-3.2-1b.json"))
        .arg("--python")
        .arg(&python)
        .args(&flags)
        .output()
        .expect("agent runs");
    let human = text(&human.stdout);
    assert!(
        human.contains("as Inductor's partition saves it") && human.contains("not counted"),
        "{human}"
    );
    let notes = compiled["notes"].to_string();
    assert!(
        notes.contains("min_cut_rematerialization_partition") && notes.contains("not counted"),
        "{notes}"
    );
    // Refused where the probe does not trace it, before Python starts.
    let history =
        std::env::temp_dir().join(format!("gpumem-compile-{}.pickle", std::process::id()));
    for (extra, why) in [
        (
            vec![
                "--train".into(),
                "full".into(),
                "--checkpointing".into(),
                "true".into(),
            ],
            "without checkpointing",
        ),
        (vec!["--train".into(), "qlora".into()], "full or lora"),
        (
            vec![
                "--train".into(),
                "full".into(),
                "--memory-history".into(),
                history.display().to_string(),
            ],
            "without --memory-history",
        ),
    ] {
        let out = agent()
            .args(["trace", "--compile", "--context", "512"])
            .arg("--config")
            .arg(config("llama-3.2-1b.json"))
            .args(&extra)
            .output()
            .expect("agent runs");
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("--compile") && err.contains(why),
            "{extra:?}: {err}"
        );
    }
    assert!(!history.exists());
}
