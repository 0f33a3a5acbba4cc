//! Fine-tuning peaks published by other frameworks than the corpus's (ms-swift's
//! benchmark, LLaMA-Factory's performance comparison with and without unsloth),
//! replayed by the shared harness (`replay/mod.rs`) with their sources, configs and
//! counters in `calibration/external/` (README and `records.jsonl`).
//! `cargo test -p gpumem-core --test training_external -- --nocapture` prints the
//! table.

#![allow(clippy::disallowed_macros)]

mod replay;

const RECORDS: &str = include_str!("calibration/external/records.jsonl");

const CONFIGS: &[(&str, &str)] = &[
    (
        "yi-6b.json",
        include_str!("calibration/external/configs/yi-6b.json"),
    ),
    (
        "yi-34b.json",
        include_str!("calibration/external/configs/yi-34b.json"),
    ),
    (
        "qwen-7b-chat.json",
        include_str!("calibration/external/configs/qwen-7b-chat.json"),
    ),
    (
        "chatglm3-6b.json",
        include_str!("calibration/external/configs/chatglm3-6b.json"),
    ),
    (
        "llama-2-7b.json",
        include_str!("calibration/training/configs/llama-2-7b.json"),
    ),
];

#[test]
fn external_records_stay_within_their_bounds() {
    let (failures, _) = replay::run(RECORDS, CONFIGS);
    assert!(failures.is_empty(), "{failures:#?}");
}
