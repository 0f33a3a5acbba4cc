//! The training estimate replayed against published, measured fine-tuning peaks
//! (`calibration/training/`, sources in its README) by the shared harness
//! (`replay/mod.rs`: each record compared on the counter its source read, bounded per
//! record). `cargo test -p gpumem-core --test training_calibration -- --nocapture`
//! prints the table.

// The test prints its per-record table for the reader (the harness captures it); the
// library itself stays free of terminal output.
#![allow(clippy::disallowed_macros)]

mod replay;

/// The corpus, embedded.
const RECORDS: &str = include_str!("calibration/training/records.jsonl");

/// The configs the records name.
const CONFIGS: &[(&str, &str)] = &[
    (
        "llama-2-7b.json",
        include_str!("calibration/training/configs/llama-2-7b.json"),
    ),
    (
        "llama-2-13b.json",
        include_str!("calibration/training/configs/llama-2-13b.json"),
    ),
    (
        "llama-3.1-8b.json",
        include_str!("calibration/training/configs/llama-3.1-8b.json"),
    ),
    (
        "llama-3.2-3b-instruct.json",
        include_str!("calibration/training/configs/llama-3.2-3b-instruct.json"),
    ),
    (
        "phi-1_5.json",
        include_str!("calibration/training/configs/phi-1_5.json"),
    ),
];

#[test]
fn training_records_stay_within_their_bounds() {
    let (failures, _) = replay::run(RECORDS, CONFIGS);
    assert!(failures.is_empty(), "{failures:#?}");
}
