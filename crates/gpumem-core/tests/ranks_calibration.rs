//! The per-rank estimate replayed against published per-GPU peaks of training on many
//! GPUs (`calibration/ranks/`, sources and quotes in its README and in each record):
//! every record's model (its config.json, read by the same reader as `--config`) and
//! its `gpumem.flags` (the agent's `estimate` flags without their dashes: `--gpus`,
//! `--fsdp`, …) go through `params::from_pairs` and `estimate` with no reserve, and the
//! most loaded rank's need (`per_device_bytes`) is compared with the figure the source
//! printed per GPU. The table — record, measured, predicted, error — is printed
//! (`cargo test -p gpumem-core --test ranks_calibration -- --nocapture`).
//!
//! Bounds: each record's error stays within its `gpumem.max_error_pct` (it may shrink,
//! never grow); a record gpumem cannot express is listed with the options it lacks,
//! never skipped silently.

// The test prints its per-record table for the reader (the harness captures it).
#![allow(clippy::disallowed_macros)]

use gpumem_core::estimate::estimate;
use replay::measured_bytes;
use serde_json::Value;

mod replay;

const GIB: f64 = (1u64 << 30) as f64;

/// The corpus, embedded.
const RECORDS: &str = include_str!("calibration/ranks/records.jsonl");

/// The configs the records name.
const CONFIGS: &[(&str, &str)] = &[
    (
        "llama-2-7b.json",
        include_str!("calibration/ranks/configs/llama-2-7b.json"),
    ),
    (
        "llama-2-70b.json",
        include_str!("calibration/ranks/configs/llama-2-70b.json"),
    ),
    (
        "llama-3.1-8b.json",
        include_str!("calibration/ranks/configs/llama-3.1-8b.json"),
    ),
];

/// The most loaded rank's need (no reserve) for a record's config and flags.
fn predict(r: &Value) -> u64 {
    let id = r["id"].as_str().unwrap();
    let input = replay::input_of(r, CONFIGS);
    assert!(
        input.gpus > 1,
        "{id}: a per-rank record runs on several GPUs"
    );
    estimate(&input)
        .unwrap_or_else(|e| panic!("{id}: {e}"))
        .per_device_bytes
}

#[test]
fn per_rank_records_stay_within_their_bounds() {
    let mut failures = Vec::new();
    let (mut within, mut replayed, mut inexpressible) = (0, 0, 0);
    eprintln!(
        "\n{:<52} {:<6} {:>5} {:>12} {:>12} {:>8}  note",
        "record", "method", "GPUs", "measured GiB", "predict GiB", "err %"
    );
    for line in RECORDS.lines().filter(|l| !l.trim().is_empty()) {
        let r: Value = serde_json::from_str(line).unwrap();
        let id = r["id"].as_str().unwrap();
        let method = r["method"].as_str().unwrap();
        let gpus = r["gpus"].as_u64().unwrap();
        let m = &r["measured"];
        let g = &r["gpumem"];
        let obs = measured_bytes(m).unwrap_or_else(|| panic!("{id}: no measured figure"));
        assert!(
            !r["source"]["quote"].as_array().unwrap().is_empty(),
            "{id}: every record quotes its source"
        );
        let missing: Vec<&str> = g["inexpressible"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !missing.is_empty() {
            inexpressible += 1;
            let names: Vec<&str> = missing
                .iter()
                .map(|f| f.split(':').next().unwrap_or(f))
                .collect();
            eprintln!(
                "{id:<52} {method:<6} {gpus:>5} {:>12.2} {:>12} {:>8}  inexpressible: gpumem lacks {}",
                obs / GIB,
                "-",
                "-",
                names.join("; ")
            );
            continue;
        }
        let pred = predict(&r);
        let err = (pred as f64 - obs) / obs * 100.0;
        let bound = g["max_error_pct"]
            .as_f64()
            .unwrap_or_else(|| panic!("{id}: no gpumem.max_error_pct"));
        replayed += 1;
        if err.abs() <= 10.0 {
            within += 1;
        }
        eprintln!(
            "{id:<52} {method:<6} {gpus:>5} {:>12.2} {:>12.2} {err:>+8.1}  bound ±{bound}; {}",
            obs / GIB,
            pred as f64 / GIB,
            m["what"].as_str().unwrap_or("unknown")
        );
        if err.abs() > bound {
            failures.push(format!("{id}: error {err:+.2} % beyond ±{bound} %"));
        }
    }
    eprintln!("\n{within}/{replayed} replayed records within 10 %; {inexpressible} inexpressible");
    assert!(replayed > 0 && failures.is_empty(), "{failures:#?}");
}
