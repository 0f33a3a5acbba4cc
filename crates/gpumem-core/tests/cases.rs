//! Estimator cases as data: each `cases/*.json` file holds inputs (the shared
//! `key=value` vocabulary) and the bytes each line must have, derived independently
//! by `cases/oracle.py` from the formats' layouts and published model configs.
//! One `check()` runs them all — natively, and compiled to wasm32 in headless
//! Chromium (wasm-bindgen-test), so both targets must compute identical numbers.

use gpumem_core::estimate::estimate;
use gpumem_core::params::from_pairs;
use gpumem_core::units::Bytes;
use serde_json::Value;

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test;
#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// Every case file, embedded so the wasm build needs no file system.
const CASES: &[(&str, &str)] = &[
    (
        "llama-3.1-8b-awq-4-g128",
        include_str!("cases/llama-3.1-8b-awq-4-g128.json"),
    ),
    (
        "llama-3.1-8b-bf16",
        include_str!("cases/llama-3.1-8b-bf16.json"),
    ),
    (
        "llama-3.1-8b-fp8-block",
        include_str!("cases/llama-3.1-8b-fp8-block.json"),
    ),
    (
        "llama-3.1-8b-fp8",
        include_str!("cases/llama-3.1-8b-fp8.json"),
    ),
    (
        "llama-3.1-8b-gptq-4-g128",
        include_str!("cases/llama-3.1-8b-gptq-4-g128.json"),
    ),
    (
        "llama-3.1-8b-int8",
        include_str!("cases/llama-3.1-8b-int8.json"),
    ),
    (
        "llama-3.1-8b-lora-r16",
        include_str!("cases/llama-3.1-8b-lora-r16.json"),
    ),
    (
        "llama-3.1-8b-nf4-dq",
        include_str!("cases/llama-3.1-8b-nf4-dq.json"),
    ),
    (
        "llama-3.1-8b-nf4",
        include_str!("cases/llama-3.1-8b-nf4.json"),
    ),
    (
        "llama-3.1-8b-q4_k",
        include_str!("cases/llama-3.1-8b-q4_k.json"),
    ),
    (
        "llama-3.1-8b-q8_0",
        include_str!("cases/llama-3.1-8b-q8_0.json"),
    ),
    (
        "mistral-7b-sliding-window",
        include_str!("cases/mistral-7b-sliding-window.json"),
    ),
    (
        "mistral-7b-v0.1-bf16",
        include_str!("cases/mistral-7b-v0.1-bf16.json"),
    ),
    (
        "mixtral-8x7b-bf16",
        include_str!("cases/mixtral-8x7b-bf16.json"),
    ),
    (
        "qwen2.5-0.5b-bf16",
        include_str!("cases/qwen2.5-0.5b-bf16.json"),
    ),
    (
        "qwen2.5-0.5b-full-adamw",
        include_str!("cases/qwen2.5-0.5b-full-adamw.json"),
    ),
    (
        "qwen2.5-7b-bf16",
        include_str!("cases/qwen2.5-7b-bf16.json"),
    ),
    (
        "qwen2.5-7b-kv-fp8-tp2",
        include_str!("cases/qwen2.5-7b-kv-fp8-tp2.json"),
    ),
    (
        "seed-s2-7b-bf16",
        include_str!("cases/seed-s2-7b-bf16.json"),
    ),
    (
        "seed-s4-kv-1seq",
        include_str!("cases/seed-s4-kv-1seq.json"),
    ),
    (
        "seed-s4-kv-4seq",
        include_str!("cases/seed-s4-kv-4seq.json"),
    ),
];

/// Runs one case; returns every mismatch in words.
fn check(name: &str, text: &str) -> Vec<String> {
    let case: Value = serde_json::from_str(text).expect("case file is JSON");
    let pairs: Vec<(String, String)> = case["input"]
        .as_object()
        .expect("input object")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("string value").to_string()))
        .collect();
    let (input, errors) = from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    assert!(errors.is_empty(), "{name}: input errors {errors:?}");
    let est = estimate(&input).unwrap_or_else(|e| panic!("{name}: {e}"));
    let got = serde_json::to_value(&est).expect("serialisable");
    let mut wrong = Vec::new();
    let expect = &case["expect"];
    for (field, want) in expect.as_object().expect("expect object") {
        match field.as_str() {
            "lines" | "device_lines" => {
                let device = field == "device_lines";
                for (key, want) in want.as_object().expect("lines object") {
                    let line = est.lines.iter().find(|l| &l.key == key);
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
