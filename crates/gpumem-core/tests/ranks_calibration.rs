//! The per-rank estimate replayed against published per-GPU peaks of training on many
//! GPUs (`calibration/ranks/`, sources and quotes in its README and in each record):
//! every record's model (its config.json, read by the same reader as `--config`) and
//! its `gpumem.flags` (the agent's `estimate` flags without their dashes: `--gpus`,
//! `--fsdp`, …) go through `params::from_pairs` and `estimate` with no reserve, and the
//! most loaded rank's figure is compared with the one the source printed per GPU: the
//! need (`per_device_bytes`), or, for a figure read as `max_memory_reserved` (or by a
//! counter the source does not name) where the estimate models the reserved bytes
//! apart from the need (FSDP1's streams: the `allocator.cache` line's `reserved`
//! input), what the allocator reserves on a device with room. The table — record,
//! measured, predicted, error — is printed
//! (`cargo test -p gpumem-core --test ranks_calibration -- --nocapture`).
//!
//! Bounds: each record's error stays within its `gpumem.max_error_pct` (it may shrink,
//! never grow); a record read under a ceiling (`measured.capped`: a memory fraction,
//! or the card itself, where the allocator returns its cache before it fails) must lie
//! between the need and the reserved bytes with room (the need above it by no more
//! than its `max_error_pct`, where it has one: a replay at a stand-in length); a record
//! gpumem cannot express is listed with the options it lacks, never skipped silently.
//!
//! A record whose `gpumem.batches` names a file (under `calibration/ranks/`) of its
//! run's padded batch lengths, in the order its rank saw them, is compared with FSDP1's
//! pools replayed over those batches (`estimate::fsdp1_reserved_over_batches`); the
//! peaks after 10, 100 and 1 000 batches and the whole file are printed beside it.

// The test prints its per-record table for the reader (the harness captures it).
#![allow(clippy::disallowed_macros)]

use gpumem_core::estimate::{LineKey, estimate, fsdp1_reserved_over_batches};
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

/// The batch files the records name (`gpumem.batches`): a run's padded batch lengths
/// in its rank's order, made by `tools/alpaca_batch_lengths.py` from the run's data
/// set and tokenizer. None yet: the April LoRA row's needs yahma/alpaca-cleaned, which
/// cannot be read here (see the corpus README).
const BATCHES: &[(&str, &str)] = &[];

/// The most loaded rank's need (no reserve) for a record's config and flags, and
/// what `max_memory_reserved` reads on a device with room where the estimate models
/// it apart from the need (the `allocator.cache` line's `reserved` input: FSDP1's
/// streams, whose cached blocks the allocator returns when the device is full).
fn predict(r: &Value) -> (u64, Option<u64>) {
    let id = r["id"].as_str().unwrap();
    let input = replay::input_of(r, CONFIGS);
    assert!(
        input.gpus > 1,
        "{id}: a per-rank record runs on several GPUs"
    );
    let e = estimate(&input).unwrap_or_else(|e| panic!("{id}: {e}"));
    let room = e
        .lines
        .iter()
        .find(|l| l.key == LineKey::AllocatorCache)
        .and_then(|l| l.inputs.get("reserved"))
        .map(|v| v.parse::<u64>().expect("the reserved bytes"));
    let room = match r["gpumem"]["batches"].as_str() {
        Some(file) => Some(over_batches(id, &input, file)),
        None => room,
    };
    (e.per_device_bytes, room)
}

/// A record's batch lengths: the integers of its `gpumem.batches` file (one of
/// [`BATCHES`]), `#` lines being comments.
fn batch_lengths(id: &str, file: &str) -> Vec<u64> {
    let text = BATCHES
        .iter()
        .find(|(name, _)| *name == file)
        .map(|(_, text)| *text)
        .unwrap_or_else(|| panic!("{id}: {file} is not among the embedded batch files"));
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .map(|n| n.parse().unwrap_or_else(|e| panic!("{id}: {n}: {e}")))
        .collect()
}

/// FSDP1's pools over the record's own batches, with the peaks after 10, 100 and
/// 1 000 of them printed: what a log at each would have read.
fn over_batches(id: &str, input: &gpumem_core::estimate::EstimateInput, file: &str) -> u64 {
    let lengths = batch_lengths(id, file);
    let mut total = 0;
    for n in [10, 100, 1000, lengths.len()] {
        if n > lengths.len() {
            continue;
        }
        let r = fsdp1_reserved_over_batches(input, &lengths[..n])
            .unwrap_or_else(|e| panic!("{id}: {e}"))
            .unwrap_or_else(|| panic!("{id}: no FSDP1 step to replay its batches through"));
        eprintln!(
            "{id}: its first {n} batches (longest {}): reserved {:.2} GiB (default {:.2}, unshard {:.2}, post-backward {:.3})",
            lengths[..n].iter().max().unwrap_or(&0),
            r.total as f64 / GIB,
            r.per_stream[0] as f64 / GIB,
            r.per_stream[1] as f64 / GIB,
            r.per_stream[2] as f64 / GIB,
        );
        total = r.total;
    }
    total
}

/// The replay over a run's batches is the estimate's own when every batch is the
/// record's length: the April LoRA record's 2 × 512 tokens, three batches, give the
/// `allocator.cache` line's reserved bytes to the byte; batches that rise to 512
/// cut the cached blocks and reserve more.
#[test]
fn batches_of_the_records_length_replay_the_estimate() {
    let id = "torchtune-2024-04-llama2-7b-lora-2x4090";
    let r: Value = RECORDS
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["id"] == id)
        .expect("the record");
    let input = replay::input_of(&r, CONFIGS);
    let e = estimate(&input).unwrap();
    let room: u64 = e
        .lines
        .iter()
        .find(|l| l.key == LineKey::AllocatorCache)
        .and_then(|l| l.inputs.get("reserved"))
        .map(|v| v.parse().unwrap())
        .expect("the reserved bytes");
    let same = fsdp1_reserved_over_batches(&input, &[512; 3])
        .unwrap()
        .expect("an FSDP1 step");
    assert_eq!(same.total, room);
    let rising: Vec<u64> = (2..=16).map(|k| k * 32).collect();
    let rising = fsdp1_reserved_over_batches(&input, &rising)
        .unwrap()
        .expect("an FSDP1 step");
    assert!(rising.total > room, "{rising:?} against {room}");
    // Bounded: no batch longer than the context, none empty, not none.
    assert!(fsdp1_reserved_over_batches(&input, &[513]).is_err());
    assert!(fsdp1_reserved_over_batches(&input, &[0]).is_err());
    assert!(fsdp1_reserved_over_batches(&input, &[]).is_err());
}

/// Whether a record's figure read `max_memory_reserved` (or a counter the source does
/// not name, read as the verdict's).
fn reads_reserved(what: &str) -> bool {
    let w = what.to_ascii_lowercase();
    w.contains("reserved") || !(w.contains("allocated") || w.contains("active"))
}

#[test]
fn per_rank_records_stay_within_their_bounds() {
    let mut failures = Vec::new();
    let (mut within, mut replayed, mut inexpressible, mut capped) = (0, 0, 0, 0);
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
        let (need, room) = predict(&r);
        let what = m["what"].as_str().unwrap_or("unknown");
        let pred = match room {
            Some(room) if reads_reserved(what) => room.max(need),
            _ => need,
        };
        let err = (pred as f64 - obs) / obs * 100.0;
        if let Some(cap) = m["capped"].as_str() {
            // Read under a ceiling (a memory fraction, or the card itself): past it
            // the allocator returns its cache and tries again, so the figure lies
            // between the step's need and what it reserves with room.
            replayed += 1;
            capped += 1;
            eprintln!(
                "{id:<52} {method:<6} {gpus:>5} {:>12.2} {:>12.2} {err:>+8.1}  capped ({}): need {:.2} GiB ≤ measured ≤ reserved with room; {what}",
                obs / GIB,
                pred as f64 / GIB,
                cap.split(':').next().unwrap_or(cap),
                need as f64 / GIB,
            );
            // A capped record replayed at a stand-in length (one the source does not
            // state) may carry a bound: its need may lie above the figure by that much.
            let over = g["max_error_pct"].as_f64().unwrap_or(0.0);
            if !(need as f64 <= obs * (1.0 + over / 100.0) && obs <= pred as f64) {
                failures.push(format!(
                    "{id}: measured {:.2} GiB outside [need {:.2}, with room {:.2}] GiB",
                    obs / GIB,
                    need as f64 / GIB,
                    pred as f64 / GIB
                ));
            }
            continue;
        }
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
            what
        );
        if err.abs() > bound {
            failures.push(format!("{id}: error {err:+.2} % beyond ±{bound} %"));
        }
    }
    eprintln!(
        "\n{within}/{} replayed records within 10 %; {capped} read under a ceiling, between need and reserved with room; {inexpressible} inexpressible",
        replayed - capped
    );
    assert!(replayed > 0 && failures.is_empty(), "{failures:#?}");
}
