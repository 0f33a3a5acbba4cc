//! Estimator cases as data: each `cases/*.json` file holds inputs (the shared
//! `key=value` vocabulary, and for `real-*` cases a published config.json read by
//! the same reader as `--config`) and the figures each must give, derived
//! independently by `cases/oracle.py` from the formats' layouts and the tensors the
//! checkpoints store, cross-checked there against the published parameter totals.
//! One `check()` runs them all — natively, and compiled to wasm32 in headless
//! Chromium (wasm-bindgen-test), so both targets must compute identical numbers.

use gpumem_core::estimate::{CacheRuntime, estimate};
use gpumem_core::import::config::parse_config;
use gpumem_core::params::from_pairs;
use gpumem_core::units::Bytes;
use serde_json::Value;

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test;
#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// Every case file, embedded so the wasm build needs no file system: the list is
/// written by `cases/oracle.py` with the cases (and checked by its `--check`), so a new
/// case needs no edit here.
const CASES: &[(&str, &str)] = include!("cases/list.rs");

/// Runs one case; returns every mismatch in words.
fn check(name: &str, text: &str) -> Vec<String> {
    let case: Value = serde_json::from_str(text).expect("case file is JSON");
    let mut wrong: Vec<String> = Vec::new();
    // A real config.json goes through the same reader as `--config` and the page's
    // import; the case's own pairs follow it, as flags after `--config` do.
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    if let Some(config) = case.get("config") {
        let imported = parse_config(&config.to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
        pairs.extend(
            imported
                .pairs()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v)),
        );
        warnings.extend(imported.warnings);
        if let Some(want) = case.get("confidence")
            && want.as_str() != Some(imported.confidence.as_str())
        {
            wrong.push(format!(
                "{name}: confidence {:?}, expected {want}",
                imported.confidence
            ));
        }
    }
    pairs.extend(
        case["input"]
            .as_object()
            .expect("input object")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().expect("string value").to_string())),
    );
    let (input, errors) = from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    assert!(errors.is_empty(), "{name}: input errors {errors:?}");
    let est = estimate(&input).unwrap_or_else(|e| panic!("{name}: {e}"));
    warnings.extend(est.warnings.iter().cloned());
    for want in case["warnings"].as_array().into_iter().flatten() {
        let want = want.as_str().expect("warning text");
        if !warnings.iter().any(|w| w.contains(want)) {
            wrong.push(format!(
                "{name}: no warning says {want:?}; got {warnings:?}"
            ));
        }
    }
    let got = serde_json::to_value(&est).expect("serialisable");
    let expect = &case["expect"];
    for (field, want) in expect.as_object().expect("expect object") {
        match field.as_str() {
            "lines" | "device_lines" => {
                let device = field == "device_lines";
                for (key, want) in want.as_object().expect("lines object") {
                    let line = est.lines.iter().find(|l| l.key.as_str() == key);
                    let have = line.map(|l| if device { l.device_bytes } else { l.bytes });
                    if have != want.as_u64() {
                        wrong.push(format!(
                            "{name}: {field}[{key}] = {have:?}, expected {want}"
                        ));
                    }
                }
            }
            _ => {
                if &got[field] != want {
                    wrong.push(format!("{name}: {field} = {}, expected {want}", got[field]));
                }
            }
        }
    }
    if let Some(display) = case.get("display") {
        let show = |b: u64| Value::from(vec![Bytes(b).gb_string(2), Bytes(b).gib_string(2)]);
        if display["weights"] != show(est.weights_bytes) {
            wrong.push(format!(
                "{name}: weights shown as {}, expected {}",
                show(est.weights_bytes),
                display["weights"]
            ));
        }
        if display["total"] != show(est.total_bytes) {
            wrong.push(format!(
                "{name}: total shown as {}, expected {}",
                show(est.total_bytes),
                display["total"]
            ));
        }
    }
    wrong
}

#[cfg_attr(not(target_arch = "wasm32"), test)]
#[cfg_attr(target_arch = "wasm32", wasm_bindgen_test)]
fn every_case_matches_the_oracle() {
    let wrong: Vec<String> = CASES.iter().flat_map(|(n, t)| check(n, t)).collect();
    assert!(
        wrong.is_empty(),
        "{} mismatches:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Guards against a case file that exists but is not listed above.
#[cfg(not(target_arch = "wasm32"))]
#[test]
// The core's clippy.toml bans file access; this test (not the core) lists a folder.
#[allow(clippy::disallowed_methods)]
fn every_case_file_is_listed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .expect("cases dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
        .collect();
    files.sort();
    let mut listed: Vec<String> = CASES.iter().map(|(n, _)| (*n).to_string()).collect();
    listed.sort();
    assert_eq!(files, listed);
}

/// Family rules against transformers' own model classes: `cases/transformers/*.json`
/// hold a config class's defaults as transformers writes them and the parameters and
/// persistent buffers of the model it builds from them (written by `cases/meta_check.py
/// --defaults`), and the bytes of the non-persistent buffers the estimate counts. Where the reader says `exact`, its count (less the MTP layers, which
/// transformers does not build) must be transformers'; where it does not, it must say
/// why — never a confident wrong figure.
#[cfg(not(target_arch = "wasm32"))]
#[test]
// The core's clippy.toml bans file access; this test (not the core) reads fixtures.
#[allow(clippy::disallowed_methods)]
fn transformers_defaults() {
    use gpumem_core::arch::ParamClass;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases/transformers");
    let mut wrong = Vec::new();
    let mut read = 0;
    for entry in std::fs::read_dir(dir).expect("fixtures") {
        let path = entry.expect("entry").path();
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("text")).expect("JSON");
        let (mt, want) = (
            &doc["model_type"],
            doc["parameters"].as_u64().expect("count"),
        );
        let Ok(c) = parse_config(&doc["config"].to_string()) else {
            // Refused with a reason: not a confident figure.
            continue;
        };
        read += 1;
        let groups = c.arch.tensors().expect("tensors");
        let ours: u64 = groups
            .iter()
            .filter(|t| t.class != ParamClass::Mtp)
            .map(|t| t.params().expect("count"))
            .sum();
        if c.confidence == "exact" && ours != want {
            wrong.push(format!(
                "{mt}: {ours} parameters, transformers builds {want}"
            ));
        }
        // The rotary embeddings' fp32 frequency buffers (`rope_buffer_bytes`: the
        // language model's inv_freq and original_inv_freq tensors).
        if let Some(want) = doc["rope_buffer_bytes"].as_u64() {
            let rope: u64 = c
                .arch
                .buffers(2)
                .expect("buffers")
                .iter()
                .filter(|(what, _)| what.contains("inv_freq"))
                .map(|(_, b)| b)
                .sum();
            if rope != want {
                wrong.push(format!(
                    "{mt}: {rope} B of rotary buffers, transformers builds {want} B"
                ));
            }
        }
        // What transformers' linear-only quantizers store quantised, against the
        // estimate's quantised matrices with no engine named: bitsandbytes'
        // (`bnb_quantised_params`, `meta_check.py --bnb`), and the modules a
        // pre-quantised GPTQ or AWQ checkpoint's loader replaces
        // (`gptq_quantised_params`, `awq_quantised_params`, `meta_check.py --gptq-awq`).
        // An MoE's routed experts, 3D parameters, are none of them.
        for (field, format) in [
            ("bnb_quantised_params", "nf4"),
            ("gptq_quantised_params", "gptq-4-g128"),
            ("awq_quantised_params", "awq-4-g128"),
        ] {
            let Some(want) = doc[field].as_u64() else {
                continue;
            };
            if c.confidence != "exact" {
                continue;
            }
            let mut pairs = c.pairs();
            pairs.push(("format", format.into()));
            let (input, errors) = from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
            assert!(errors.is_empty(), "{mt}: {errors:?}");
            assert_eq!(input.runtime(), CacheRuntime::Transformers);
            let formats = gpumem_core::estimate::module_formats(&input).expect("formats");
            let quantised: u64 = groups
                .iter()
                .filter(|t| {
                    t.class != ParamClass::Mtp
                        && t.cols > 1
                        && !matches!(
                            formats.for_group(t),
                            gpumem_core::format::StorageFormat::Dense { .. }
                        )
                })
                .map(|t| t.params().expect("count"))
                .sum();
            // Small linears the estimate keeps in 16 bits (routers, Qwen's
            // `shared_expert_gate`, the DSA indexer's projections) the loader converts
            // too: the estimate may store that much more in 16 bits (the safe side),
            // never less.
            let kept: u64 = groups
                .iter()
                .filter(|t| t.role == gpumem_core::arch::Role::Kept && t.cols > 1)
                .map(|t| t.params().expect("count"))
                .sum();
            if quantised > want || want - quantised > kept {
                wrong.push(format!(
                    "{mt}: {quantised} parameters in {format}, transformers' loader converts {want} (16-bit matrices kept: {kept})"
                ));
            }
        }
        // Every buffer the estimate counts (`buffer_bytes`: the non-persistent buffers
        // transformers builds in bf16, less those `meta_check.py` names as uncounted),
        // where the reader is sure of the model.
        if let Some(want) = doc["buffer_bytes"].as_u64()
            && c.confidence == "exact"
        {
            let all: u64 = c
                .arch
                .buffers(2)
                .expect("buffers")
                .iter()
                .map(|(_, b)| b)
                .sum();
            if all != want {
                wrong.push(format!(
                    "{mt}: {all} B of buffers, transformers builds {want} B"
                ));
            }
        }
        if c.confidence != "exact" && c.warnings.is_empty() {
            wrong.push(format!("{mt}: {} without a warning", c.confidence));
        }
    }
    assert!(read >= 20, "only {read} fixtures read");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Caches against transformers' own: the `cases/transformers/*.json` fixtures with a
/// `cache` (written by `cases/meta_check.py --variant`) hold what the model's cache
/// keeps after a bf16 forward of `tokens` tokens of one sequence on the meta device.
/// The KV line over those tokens must be the attention layers' keys and values; the
/// state line the state layers' recurrent states and their conv windows as vLLM keeps
/// them — transformers' conv state holds the kernel's whole width (`conv_columns`),
/// vLLM's one column less (`MambaStateShapeCalculator`), so the conv states are
/// compared over the kernel's width − 1 (`conv_window_values`); the states are
/// compared in values, in the line's dtype. The cross-attention
/// layers' keys and values over an image's vision tokens (Mllama) are the cross line.
#[cfg(not(target_arch = "wasm32"))]
#[test]
#[allow(clippy::disallowed_methods)]
fn transformers_caches() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases/transformers");
    let mut wrong = Vec::new();
    let mut read = 0;
    for entry in std::fs::read_dir(dir).expect("fixtures") {
        let path = entry.expect("entry").path();
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("text")).expect("JSON");
        let Some(cache) = doc.get("cache") else {
            continue;
        };
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        let c = parse_config(&doc["config"].to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let n = |k: &str| cache[k].as_u64().unwrap_or_else(|| panic!("{name}: {k}"));
        // A cache fixture is a family counted here: `transformers_defaults` then holds
        // its parameters to transformers'.
        if c.confidence != "exact" {
            wrong.push(format!("{name}: {} ({:?})", c.confidence, c.warnings));
        }
        let mut pairs: Vec<(String, String)> = c
            .pairs()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        for (k, v) in [
            ("context", n("tokens").to_string()),
            ("sequences", "1".to_string()),
            ("compute-dtype", "bf16".to_string()),
        ] {
            pairs.push((k.to_string(), v));
        }
        let (input, errors) = from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        assert!(errors.is_empty(), "{name}: {errors:?}");
        let est = estimate(&input).unwrap_or_else(|e| panic!("{name}: {e}"));
        let line = |k: &str| {
            est.lines
                .iter()
                .find(|l| l.key.as_str() == k)
                .map_or(0, |l| l.bytes)
        };
        // Without an engine the state is transformers' own: every conv and recurrent
        // byte its cache holds (the whole kernel's window; the recurrent states in the
        // dtype the mixer made them, fp32 for most).
        let state = n("conv_state_bytes") + n("recurrent_state_bytes");
        // A serving engine's layout (vLLM's, everything in the model's bf16): the
        // window less its newest input, the same recurrent values.
        let served = gpumem_core::inputs::read(
            pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            [("engine", "vllm")],
        );
        assert_eq!(served.input.runtime(), CacheRuntime::Serving, "{name}");
        let served = estimate(&served.input).unwrap_or_else(|e| panic!("{name}: {e}"));
        let served_state = served
            .lines
            .iter()
            .find(|l| l.key.as_str() == "kv_cache.state")
            .map_or(0, |l| l.bytes);
        let vllm = (n("recurrent_state_values") + n("conv_window_values")) * 2;
        if served_state > state {
            wrong.push(format!(
                "{name}: the serving layout's state {served_state} B above transformers' {state} B"
            ));
        }
        for (what, ours, theirs) in [
            ("kv_cache", line("kv_cache"), n("kv_bytes")),
            ("kv_cache.state", line("kv_cache.state"), state),
            ("kv_cache.state (vLLM's layout)", served_state, vllm),
            (
                "kv_cache.cross",
                line("kv_cache.cross"),
                cache["cross_kv_bytes"].as_u64().unwrap_or(0),
            ),
        ] {
            if ours != theirs {
                wrong.push(format!("{name}: {what} {ours} B, transformers {theirs} B"));
            }
        }
        read += 1;
    }
    assert!(read >= 1, "no cache fixture read");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
