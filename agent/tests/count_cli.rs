//! `estimate` on model families the config reader does not know, counted by
//! transformers through the real (debug) binary with the torch venv's Python (CPU, no
//! download, no GPU). The oracle is transformers itself, run here apart from the
//! agent's probe: the parameters are `sum(p.numel())` of the model built on the meta
//! device, and the KV cache per token is read from the cache of a real forward on the
//! CPU of the same model cut to one layer (every layer of these families keeps the
//! same cache), scaled to its layers. Without a Python, the answer is the reader's,
//! with the line saying how to count it exactly.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn agent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
}

fn config(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/configs")
        .join(name)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const CONTEXT: u64 = 1000;
const GENERATE: u64 = 24;
const SEQUENCES: u64 = 2;

fn estimate(cfg: &Path, extra: &[&str]) -> (Output, serde_json::Value) {
    let out = agent()
        .arg("estimate")
        .arg("--config")
        .arg(cfg)
        .args([
            "--context",
            &CONTEXT.to_string(),
            "--generate",
            &GENERATE.to_string(),
            "--sequences",
            &SEQUENCES.to_string(),
            "--json",
        ])
        .args(extra)
        .output()
        .expect("agent runs");
    let doc = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out, doc)
}

/// transformers' own figures for `cfg`: parameters of the model on the meta device,
/// and KV bytes per token (bf16) from a real one-layer forward of 8 tokens on the CPU.
fn oracle(python: &Path, cfg: &Path) -> (u64, u64) {
    const ORACLE: &str = r#"
import json, sys, torch, transformers
d = json.load(open(sys.argv[1]))
mt = d.pop("model_type")
d = {k: v for k, v in d.items() if not k.startswith("_")}
config = transformers.AutoConfig.for_model(mt, **d)
with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
params = sum(p.numel() for p in model.parameters())
layers = config.num_hidden_layers
small = transformers.AutoConfig.for_model(mt, **{**d, "num_hidden_layers": 1, "vocab_size": 256})
torch.manual_seed(0)
tiny = transformers.AutoModelForCausalLM.from_config(small, dtype=torch.bfloat16).eval()
tokens = 8
with torch.no_grad():
    out = tiny(input_ids=torch.randint(0, 256, (1, tokens)), use_cache=True)
cache = out.past_key_values
per_layer = [
    (l.keys.numel() * l.keys.element_size() + l.values.numel() * l.values.element_size()) // tokens
    for l in cache.layers
]
assert len(set(per_layer)) == 1, per_layer
print(json.dumps({"parameters": params, "kv_per_token": per_layer[0] * layers}))
"#;
    let out = Command::new(python)
        .arg("-c")
        .arg(ORACLE)
        .arg(cfg)
        .env("HF_HUB_OFFLINE", "1")
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .expect("python runs");
    assert!(out.status.success(), "oracle: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("oracle JSON");
    (
        v["parameters"].as_u64().unwrap(),
        v["kv_per_token"].as_u64().unwrap(),
    )
}

fn line<'a>(doc: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    doc["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["key"] == key)
}

/// Each family: the reader's figures (unknown family) against the counted ones, which
/// equal transformers' own.
#[test]
fn unknown_families_are_counted_exactly_by_transformers() {
    let Some(python) = gpumem_e2e::torch_python("unknown_families_are_counted_exactly") else {
        return;
    };
    for name in ["gpt_neox_japanese.json", "jais2.json"] {
        let cfg = config(name);
        let (params, kv_per_token) = oracle(&python, &cfg);
        let (out, reader) = estimate(&cfg, &["--count-with", "reader"]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        assert_eq!(reader["confidence"], "unknown family", "{name}");
        let (out, doc) = estimate(&cfg, &["--python", python.to_str().unwrap()]);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let confidence = doc["confidence"].as_str().unwrap();
        assert!(
            confidence.starts_with("counted by transformers ")
                && confidence.ends_with("(model built on the meta device)"),
            "{name}: {confidence}"
        );
        eprintln!(
            "{name}: reader {} parameters, KV {} B; transformers {params} parameters, KV {} B",
            reader["parameters"],
            reader["kv_cache_bytes"],
            kv_per_token * (CONTEXT + GENERATE) * SEQUENCES
        );
        assert_eq!(doc["parameters"].as_u64(), Some(params), "{name}");
        // bf16 throughout: two bytes a parameter, plus the model's buffers.
        let weights = doc["weights_bytes"].as_u64().unwrap();
        assert!(
            weights >= 2 * params && weights - 2 * params < 1 << 20,
            "{name}: {weights} B for {params} parameters"
        );
        let kv = line(&doc, "kv_cache").expect("a KV line");
        assert_eq!(kv["kind"], "traced", "{name}");
        assert_eq!(
            kv["bytes"].as_u64(),
            Some(kv_per_token * (CONTEXT + GENERATE) * SEQUENCES),
            "{name}"
        );
        assert_eq!(
            line(&doc, "kv_cache.prefill").unwrap()["bytes"].as_u64(),
            Some(kv_per_token * CONTEXT * SEQUENCES),
            "{name}"
        );
        for l in doc["lines"].as_array().unwrap() {
            if l["group"] == "weights" {
                assert_eq!(l["kind"], "traced", "{name}: {l}");
            }
        }
        // The reader was wrong on each of these (that is why they are here).
        assert!(
            reader["parameters"].as_u64() != Some(params)
                || reader["kv_cache_bytes"] != doc["kv_cache_bytes"],
            "{name}: the reader was right: pick a family it gets wrong"
        );
    }
}

/// An fp8 KV cache and a 4-bit format are applied to the counted tensors.
#[test]
fn the_counted_model_takes_the_formats_given() {
    let Some(python) = gpumem_e2e::torch_python("the_counted_model_takes_the_formats_given") else {
        return;
    };
    let cfg = config("persimmon.json");
    let py = python.to_str().unwrap();
    let (_, bf16) = estimate(&cfg, &["--python", py]);
    let (out, small) = estimate(
        &cfg,
        &[
            "--python",
            py,
            "--kv-dtype",
            "fp8",
            "--format",
            "awq-4-g128",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        small["kv_cache_bytes"].as_u64().unwrap() * 2,
        bf16["kv_cache_bytes"].as_u64().unwrap()
    );
    let w = small["weights_bytes"].as_u64().unwrap();
    let full = bf16["weights_bytes"].as_u64().unwrap();
    // 4-bit linears with their scales: between a quarter and a half of bf16's bytes.
    assert!(w > full / 4 && w < full / 2, "{w} of {full}");
    assert_eq!(small["parameters"], bf16["parameters"]);
}

/// Without a Python that can count, the reader's answer stands, unchanged, with the
/// line saying how to count it exactly; asked for, the count's absence is an error.
#[test]
fn without_python_the_answer_is_the_readers_with_the_hint() {
    let cfg = config("jais2.json");
    let (out, reader) = estimate(&cfg, &["--count-with", "reader"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (out, doc) = estimate(&cfg, &["--python", "/nonexistent/python3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(doc["confidence"], "unknown family");
    for k in [
        "parameters",
        "weights_bytes",
        "kv_cache_bytes",
        "total_bytes",
    ] {
        assert_eq!(doc[k], reader[k], "{k}");
    }
    let warnings: Vec<&str> = doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("not counted exactly here")
                && w.contains("/nonexistent/python3 was not found")
                && w.contains("--python PATH")),
        "{warnings:#?}"
    );
    // The reader's own doubts stay where nothing else counted.
    assert!(
        warnings.iter().any(|w| w.contains("generic decoder rules")),
        "{warnings:#?}"
    );
    let (out, _) = estimate(
        &cfg,
        &[
            "--python",
            "/nonexistent/python3",
            "--count-with",
            "transformers",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot count with transformers here") && err.lines().count() == 1,
        "{err}"
    );
}

/// A repository's own code runs only when the user says so; allowed, it is built and
/// counted like any family.
#[test]
fn remote_code_is_not_run_unless_asked() {
    let Some(python) = gpumem_e2e::torch_python("remote_code_is_not_run_unless_asked") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("gpumem-count-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("config.json");
    std::fs::write(
        &cfg,
        r#"{"model_type": "acme_lm",
            "auto_map": {"AutoConfig": "configuration_acme.AcmeConfig",
                         "AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM"},
            "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
            "tie_word_embeddings": false}"#,
    )
    .unwrap();
    // The repository's code: a Llama under another name.
    std::fs::write(
        dir.join("configuration_acme.py"),
        "from transformers import LlamaConfig\n\nclass AcmeConfig(LlamaConfig):\n    model_type = \"acme_lm\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("modeling_acme.py"),
        "from transformers import LlamaForCausalLM\nfrom .configuration_acme import AcmeConfig\n\nclass AcmeForCausalLM(LlamaForCausalLM):\n    config_class = AcmeConfig\n",
    )
    .unwrap();
    let py = python.to_str().unwrap();
    let (out, _) = estimate(&cfg, &["--python", py, "--count-with", "transformers"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--trust-remote-code"), "{err}");
    assert!(!err.contains("Traceback"), "{err}");
    // transformers copies the repository's modules under HF_HOME: a folder of the test's.
    let out = agent()
        .arg("estimate")
        .arg("--config")
        .arg(&cfg)
        .args([
            "--context",
            "100",
            "--json",
            "--python",
            py,
            "--trust-remote-code",
        ])
        .env("HF_HOME", dir.join("hf"))
        .output()
        .expect("agent runs");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Untied 256 × 64 embeddings and head; per layer q, o 64 × 64, k, v 32 × 64, a
    // gated MLP 3 × 64 × 128 and two norms of 64; the final norm.
    let per_layer = 2 * 64 * 64 + 2 * 32 * 64 + 3 * 64 * 128 + 2 * 64;
    assert_eq!(doc["parameters"], 2 * 256 * 64 + 2 * per_layer + 64);
    // 2 layers × K and V of 2 heads × 16 × 100 tokens × 2 B.
    assert_eq!(doc["kv_cache_bytes"], 2 * 2 * 2 * 16 * 100 * 2);
    assert!(
        doc["confidence"]
            .as_str()
            .unwrap()
            .starts_with("counted by transformers")
    );
}

/// A config the reader refuses (MPT: `n_layers`, `n_heads`, `d_model`, keys it does not take)
/// is answered by the count where a Python can count it, and refused naming both
/// reasons where none can.
#[test]
fn a_config_the_reader_refuses_is_counted() {
    let cfg = config("mpt.json");
    let (out, _) = estimate(&cfg, &["--count-with", "reader"]);
    assert_eq!(out.status.code(), Some(2));
    let reader_err = text(&out.stderr);
    assert!(
        reader_err.contains("missing num_hidden_layers"),
        "{reader_err}"
    );
    let (out, _) = estimate(&cfg, &["--python", "/nonexistent/python3"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("missing num_hidden_layers")
            && err.contains("--python PATH")
            && err.contains("/nonexistent/python3 was not found"),
        "{err}"
    );
    let Some(python) = gpumem_e2e::torch_python("a_config_the_reader_refuses_is_counted") else {
        return;
    };
    let (params, kv_per_token) = oracle(&python, &cfg);
    let (out, doc) = estimate(&cfg, &["--python", python.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let confidence = doc["confidence"].as_str().unwrap();
    assert!(
        confidence.starts_with("counted by transformers ")
            && confidence.contains("the config reader cannot read it"),
        "{confidence}"
    );
    assert_eq!(doc["parameters"].as_u64(), Some(params));
    assert_eq!(
        doc["kv_cache_bytes"].as_u64(),
        Some(kv_per_token * (CONTEXT + GENERATE) * SEQUENCES)
    );
}

/// A config.json as transformers writes it for a Mamba-2 hybrid: a bare `Infinity`
/// (`time_step_limit`), which Python's json module writes and strict JSON lacks. The
/// reader reads it (Bamba's record), and so does the count: the probe is handed the
/// file's own text, and transformers' figure equals the reader's.
#[test]
fn a_config_with_a_bare_infinity_is_counted() {
    let cfg = config("bamba-infinity.json");
    assert!(std::fs::read_to_string(&cfg).unwrap().contains("Infinity"));
    let (out, reader) = estimate(&cfg, &["--count-with", "reader"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let Some(python) = gpumem_e2e::torch_python("a_config_with_a_bare_infinity_is_counted") else {
        return;
    };
    let (out, counted) = estimate(
        &cfg,
        &[
            "--count-with",
            "transformers",
            "--python",
            python.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        counted["confidence"]
            .as_str()
            .unwrap()
            .starts_with("counted by transformers "),
        "{counted}"
    );
    assert_eq!(counted["parameters"], reader["parameters"], "{counted}");
    assert!(
        counted["parameters"].as_u64() > Some(3_000_000),
        "{counted}"
    );
}

/// A sparse-attention layer keeps an indexer's keys beside its keys and values
/// (transformers' DynamicIndexedLayer: DeepSeek-V3.2, GLM-5): they grow with the tokens
/// and are counted with the cache, in the dtype the model keeps them. The oracle is a
/// real forward of the tiny model on the CPU, every tensor of its cache in bytes.
#[test]
fn an_indexers_keys_are_counted_with_the_cache() {
    let Some(python) = gpumem_e2e::torch_python("an_indexers_keys_are_counted_with_the_cache")
    else {
        return;
    };
    const ORACLE: &str = r#"
import json, sys, torch, transformers
d = json.load(open(sys.argv[1]))
mt = d.pop("model_type")
config = transformers.AutoConfig.for_model(mt, **d)
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
tokens = 5
with torch.no_grad():
    out = model(input_ids=torch.randint(0, d["vocab_size"], (1, tokens)), use_cache=True)
total, indexer = 0, 0
for layer in out.past_key_values.layers:
    for name, t in vars(layer).items():
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            total += t.numel() * t.element_size()
            indexer += t.numel() * t.element_size() if name == "indexer_keys" else 0
print(json.dumps({"per_token": total // tokens, "indexer": indexer}))
"#;
    let cfg = config("deepseek_v32-tiny.json");
    let out = Command::new(&python)
        .arg("-c")
        .arg(ORACLE)
        .arg(&cfg)
        .env("HF_HUB_OFFLINE", "1")
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .expect("python runs");
    assert!(out.status.success(), "oracle: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("oracle JSON");
    let per_token = v["per_token"].as_u64().unwrap();
    assert!(
        v["indexer"].as_u64().unwrap() > 0,
        "the model keeps an indexer's keys"
    );
    let (out, doc) = estimate(
        &cfg,
        &[
            "--count-with",
            "transformers",
            "--python",
            python.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        doc["kv_cache_bytes"].as_u64(),
        Some(per_token * (CONTEXT + GENERATE) * SEQUENCES)
    );
}

/// DeepSeek-V4's compressed caches (transformers' DeepseekV4HCACache and
/// DeepseekV4CSACache: a window of keys beside compressed entries emitted every few
/// tokens and a buffer of the tokens not yet compressed) do not grow by the same bytes
/// each token: the count measures them at the prompt's length and at the end of
/// generation instead of extrapolating. The oracle: real forwards of the small model
/// (the defaults' layer kinds, fewer layers, experts and narrower) on the CPU at those
/// lengths, every tensor of its cache in bytes once, a window layer at its
/// `sliding_window` tokens (DynamicSlidingWindowLayer.update keeps one fewer between
/// steps and holds them all while the next token is decoded).
#[test]
fn a_compressed_cache_is_measured_at_the_lengths_asked() {
    let Some(python) =
        gpumem_e2e::torch_python("a_compressed_cache_is_measured_at_the_lengths_asked")
    else {
        return;
    };
    const ORACLE: &str = r#"
import json, sys, torch, transformers
d = json.load(open(sys.argv[1]))
mt = d.pop("model_type")
config = transformers.AutoConfig.for_model(mt, **d)
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
out = {}
for tokens in map(int, sys.argv[2:]):
    with torch.no_grad():
        o = model(input_ids=torch.randint(0, d["vocab_size"], (1, tokens)), use_cache=True)
    total = 0
    for layer in o.past_key_values.layers:
        seen, stack = set(), list(vars(layer).values())
        while stack:
            x = stack.pop()
            if isinstance(x, torch.Tensor):
                if x.dim() > 0 and x.data_ptr() not in seen:
                    seen.add(x.data_ptr())
                    total += x.numel() * x.element_size()
            elif isinstance(x, dict):
                stack.extend(x.values())
            elif isinstance(x, (list, tuple)):
                stack.extend(x)
        w = getattr(layer, "sliding_window", None)
        if isinstance(w, int) and layer.keys.shape[-2] == w - 1:
            total += layer.keys[..., :1, :].numel() * layer.keys.element_size()
    out[str(tokens)] = total
print(json.dumps(out))
"#;
    let cfg = config("deepseek_v4-small.json");
    let run = |context: u64, generate: u64, extra: &[&str]| {
        let out = agent()
            .arg("estimate")
            .arg("--config")
            .arg(&cfg)
            .args(["--context", &context.to_string()])
            .args(["--generate", &generate.to_string()])
            .args(["--sequences", &SEQUENCES.to_string(), "--json"])
            .args(["--python", python.to_str().unwrap()])
            .args(extra)
            .output()
            .expect("agent runs");
        let doc = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        (out, doc)
    };
    // 1 000 tokens leave 104 in a heavily compressed layer's buffer (one entry every
    // 128), 1 024 none and 1 400 120: the cache shrinks, then grows.
    let lengths = [CONTEXT, CONTEXT + GENERATE, 1400];
    let out = Command::new(&python)
        .arg("-c")
        .arg(ORACLE)
        .arg(&cfg)
        .args(lengths.map(|n| n.to_string()))
        .env("HF_HUB_OFFLINE", "1")
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .expect("python runs");
    assert!(out.status.success(), "oracle: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("oracle JSON");
    let want = |n: u64| v[n.to_string()].as_u64().unwrap() * SEQUENCES;
    for end in [CONTEXT + GENERATE, 1400] {
        let (out, doc) = run(CONTEXT, end - CONTEXT, &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let kv_prefill = line(&doc, "kv_cache.prefill").expect("a prefill line");
        assert_eq!(kv_prefill["bytes"].as_u64(), Some(want(CONTEXT)));
        assert_eq!(kv_prefill["kind"], "traced");
        let kv = line(&doc, "kv_cache").expect("a KV line");
        // The cache in the total is never below the prompt's (its buffered tokens
        // compressed, the cache can be smaller at the end).
        assert_eq!(kv["bytes"].as_u64(), Some(want(end).max(want(CONTEXT))));
        assert_eq!(kv["kind"], "traced");
        let formula = kv["formula"].as_str().unwrap_or("");
        assert!(
            formula.contains(&format!("measured at {end} tokens"))
                && formula.contains("not per token"),
            "{formula}"
        );
        let assumptions = doc["assumptions"].to_string();
        assert!(
            assumptions.contains(&format!("KV cache measured at {CONTEXT} and {end} tokens")),
            "{assumptions}"
        );
    }
    assert!(want(CONTEXT + GENERATE) < want(CONTEXT) && want(1400) > want(CONTEXT));
    // An engine's pool divides by bytes per token: refused, not divided.
    let (out, _) = run(CONTEXT, GENERATE, &["--engine", "vllm"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not per token"),
        "{}",
        text(&out.stderr)
    );
    // Past the model's positions (4 096 in the fixture): refused, not extrapolated.
    let (out, _) = run(5000, 0, &[]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("positions: not measured"),
        "{}",
        text(&out.stderr)
    );
}

/// An encoder-decoder the reader refuses (Pegasus) is counted whole, as
/// `AutoModelForSeq2SeqLM` builds it (not the decoder-only `PegasusForCausalLM`), with
/// its three cache lines; an encoder (DeBERTa-v2) bare, as `AutoModel` builds it, with
/// no cache. The oracle: the same models built for real on the CPU, their parameters
/// summed and the caches of a real forward read tensor by tensor.
#[test]
fn encoders_and_encoder_decoders_are_counted_as_built() {
    let Some(python) = gpumem_e2e::torch_python("encoders_and_encoder_decoders_are_counted") else {
        return;
    };
    const ORACLE: &str = r#"
import json, sys, torch, transformers
d = {k: v for k, v in json.load(open(sys.argv[1])).items() if not k.startswith("_")}
mt = d.pop("model_type")
config = transformers.AutoConfig.for_model(mt, **d)
torch.manual_seed(0)
if config.is_encoder_decoder:
    model = transformers.AutoModelForSeq2SeqLM.from_config(config, dtype=torch.bfloat16).eval()
    source, tokens = 11, 5
    with torch.no_grad():
        out = model(input_ids=torch.randint(2, 256, (1, source)), decoder_input_ids=torch.randint(2, 256, (1, tokens)), use_cache=True)
    def size(cache):
        return sum(t.numel() * t.element_size() for l in cache.layers for t in (l.keys, l.values))
    c = out.past_key_values
    row = {"self_per_token": size(c.self_attention_cache) // tokens, "cross_per_position": size(c.cross_attention_cache) // source, "hidden": out.encoder_last_hidden_state.shape[-1]}
else:
    model = transformers.AutoModel.from_config(config)
    row = {}
row["parameters"] = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
print(json.dumps(row))
"#;
    let run = |name: &str| {
        let out = Command::new(&python)
            .arg("-c")
            .arg(ORACLE)
            .arg(config(name))
            .env("HF_HUB_OFFLINE", "1")
            .env("CUDA_VISIBLE_DEVICES", "")
            .output()
            .expect("python runs");
        assert!(out.status.success(), "oracle: {}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("oracle JSON")
    };
    let py = python.to_str().unwrap();
    // Pegasus: refused by the reader, counted by transformers.
    let want = run("pegasus-tiny.json");
    let source = 40u64;
    let (out, doc) = estimate(
        &config("pegasus-tiny.json"),
        &[
            "--python",
            py,
            "--kv-dtype",
            "bf16",
            "--encoder-length",
            &source.to_string(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        doc["confidence"]
            .as_str()
            .unwrap()
            .starts_with("counted by transformers "),
        "{}",
        doc["confidence"]
    );
    assert_eq!(doc["parameters"], want["parameters"]);
    let per_token = want["self_per_token"].as_u64().unwrap();
    assert_eq!(
        line(&doc, "kv_cache").unwrap()["bytes"].as_u64(),
        Some(per_token * (CONTEXT + GENERATE) * SEQUENCES)
    );
    let per_position = want["cross_per_position"].as_u64().unwrap();
    // 3 decoder layers × K and V × 64 values × 2 B.
    assert_eq!(per_position, 3 * 2 * 64 * 2);
    assert_eq!(
        line(&doc, "kv_cache.cross").unwrap()["bytes"].as_u64(),
        Some(per_position * source * SEQUENCES)
    );
    let enc = line(&doc, "kv_cache.encoder_output").unwrap();
    assert_eq!(enc["inputs"]["encoder length"], source.to_string());
    assert_eq!(enc["inputs"]["hidden"], want["hidden"].to_string());
    // Without --encoder-length the source is the context's, said in a warning.
    let (out, doc) = estimate(
        &config("pegasus-tiny.json"),
        &["--python", py, "--kv-dtype", "bf16"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        line(&doc, "kv_cache.cross").unwrap()["bytes"].as_u64(),
        Some(per_position * CONTEXT * SEQUENCES)
    );
    assert!(
        doc["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("give encoder-length")),
        "{}",
        doc["warnings"]
    );
    // DeBERTa-v2: an encoder, no cache, nothing generated.
    let want = run("deberta-v2-tiny.json");
    let out = agent()
        .args(["estimate", "--config"])
        .arg(config("deberta-v2-tiny.json"))
        .args([
            "--context",
            "128",
            "--sequences",
            "4",
            "--json",
            "--python",
            py,
        ])
        .output()
        .expect("agent runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["parameters"], want["parameters"]);
    assert_eq!(doc["kv_cache_bytes"].as_u64(), Some(0));
}

/// An audio encoder of any length (Moonshine, raw samples through its strided conv
/// stem): `--audio-seconds` is the clip, made into the encoder's input by the family's
/// own feature extractor, and the cross-attention cache and the encoder output span the
/// positions the model's own subsampling gives. The oracle: the model built for real on
/// the CPU, a clip of that many samples at 16 kHz through Wav2Vec2FeatureExtractor, the
/// encoder and a decoder forward run as generate runs them, the caches read tensor by
/// tensor. `--audio-seconds` on an encoder that reads tokens is refused, naming why.
#[test]
fn an_audio_encoders_clip_is_counted_through_its_own_subsampling() {
    let Some(python) = gpumem_e2e::torch_python("an_audio_encoders_clip_is_counted") else {
        return;
    };
    const ORACLE: &str = r#"
import json, sys, numpy as np, torch, transformers
d = {k: v for k, v in json.load(open(sys.argv[1])).items() if not k.startswith("_")}
mt = d.pop("model_type")
seconds = float(sys.argv[2])
torch.manual_seed(0)
model = transformers.AutoModelForSpeechSeq2Seq.from_config(transformers.AutoConfig.for_model(mt, **d), dtype=torch.bfloat16).eval()
fe = transformers.Wav2Vec2FeatureExtractor()
clip = np.random.default_rng(0).standard_normal(int(seconds * fe.sampling_rate)).astype(np.float32)
values = torch.from_numpy(fe(clip, sampling_rate=fe.sampling_rate, return_tensors="np")["input_values"]).to(torch.bfloat16)
tokens = 5
with torch.no_grad():
    encoded = model.get_encoder()(input_values=values)
    out = model(encoder_outputs=encoded, decoder_input_ids=torch.randint(2, 256, (1, tokens)), use_cache=True)
def size(cache):
    return sum(t.numel() * t.element_size() for l in cache.layers for t in (l.keys, l.values))
c = out.past_key_values
enc = encoded.last_hidden_state
print(json.dumps({"parameters": sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()),
    "positions": enc.shape[1], "hidden": enc.shape[-1], "cross": size(c.cross_attention_cache),
    "self_per_token": size(c.self_attention_cache) // tokens}))
"#;
    let seconds = "4.5";
    let cfg = config("moonshine-tiny.json");
    let out = Command::new(&python)
        .arg("-c")
        .arg(ORACLE)
        .arg(&cfg)
        .arg(seconds)
        .env("HF_HUB_OFFLINE", "1")
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .expect("python runs");
    assert!(out.status.success(), "oracle: {}", text(&out.stderr));
    let want: serde_json::Value = serde_json::from_slice(&out.stdout).expect("oracle JSON");
    let py = python.to_str().unwrap();
    let (out, doc) = estimate(
        &cfg,
        &[
            "--python",
            py,
            "--kv-dtype",
            "bf16",
            "--audio-seconds",
            seconds,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(doc["parameters"], want["parameters"]);
    let positions = want["positions"].as_u64().unwrap();
    // 72 000 samples through the conv stem (kernel 127 stride 64, 7 stride 3, 3 stride
    // 2): 1 124, 373, then 186 positions.
    assert_eq!(positions, 186);
    assert_eq!(
        line(&doc, "kv_cache.cross").unwrap()["bytes"].as_u64(),
        Some(want["cross"].as_u64().unwrap() * SEQUENCES)
    );
    let enc = line(&doc, "kv_cache.encoder_output").unwrap();
    assert_eq!(enc["inputs"]["encoder length"], positions.to_string());
    assert_eq!(enc["inputs"]["hidden"], want["hidden"].to_string());
    assert_eq!(
        line(&doc, "kv_cache").unwrap()["bytes"].as_u64(),
        Some(want["self_per_token"].as_u64().unwrap() * (CONTEXT + GENERATE) * SEQUENCES)
    );
    let said = doc["assumptions"].to_string();
    assert!(
        said.contains("4.5 s of audio at 16 000 Hz") && said.contains("186 encoder positions"),
        "{said}"
    );
    // Without a clip: per encoder position over the context, and a warning naming the
    // flags.
    let (out, doc) = estimate(&cfg, &["--python", py, "--kv-dtype", "bf16"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        doc["warnings"].to_string().contains("give --audio-seconds"),
        "{}",
        doc["warnings"]
    );
    // A text encoder reads tokens: the clip is refused, naming why.
    let (out, _) = estimate(
        &config("pegasus-tiny.json"),
        &["--python", py, "--audio-seconds", "3"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("does not read audio of any length"),
        "{}",
        text(&out.stderr)
    );
}

/// A model whose text config the reader knows (Qwen3) under a root it does not, with a
/// tower it does not count (MOSS's transcriber and its audio encoder): the reader says
/// the tower is left out, and with a Python the count takes the whole model.
#[test]
fn a_tower_the_reader_leaves_out_is_counted_by_transformers() {
    let Some(python) = gpumem_e2e::torch_python("a_tower_the_reader_leaves_out_is_counted") else {
        return;
    };
    const ORACLE: &str = r#"
import json, sys, torch, transformers
d = json.load(open(sys.argv[1]))
mt = d.pop("model_type")
d = {k: v for k, v in d.items() if not k.startswith("_")}
config = transformers.AutoConfig.for_model(mt, **d)
with torch.device("meta"):
    model = transformers.MossTranscribeDiarizeForConditionalGeneration(config)
print(sum(p.numel() for p in model.parameters()))
"#;
    let cfg = config("moss_transcribe_diarize.json");
    let out = Command::new(&python)
        .arg("-c")
        .arg(ORACLE)
        .arg(&cfg)
        .env("HF_HUB_OFFLINE", "1")
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .expect("python runs");
    assert!(out.status.success(), "oracle: {}", text(&out.stderr));
    let params: u64 = text(&out.stdout).trim().parse().expect("a count");

    let (out, reader) = estimate(&cfg, &["--count-with", "reader"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let warned = |doc: &serde_json::Value| {
        doc["warnings"].as_array().unwrap().iter().any(|w| {
            w.as_str()
                .unwrap()
                .contains("the audio tower is not counted")
        })
    };
    assert!(warned(&reader), "{reader}");
    assert!(reader["parameters"].as_u64().unwrap() < params);

    let (out, doc) = estimate(&cfg, &["--python", python.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        doc["confidence"]
            .as_str()
            .unwrap()
            .starts_with("counted by transformers "),
        "{}",
        doc["confidence"]
    );
    assert_eq!(doc["parameters"].as_u64(), Some(params));
    assert!(!warned(&doc), "the tower is counted now: {doc}");
}
