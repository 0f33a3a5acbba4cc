//! `gpumem-agent estimate --json` against its published schema
//! (`schemas/estimate.v1.schema.json`, generated from the types): the plain estimate, an
//! engine on a card, an engine on every card, a typed capacity and `--compare-formats`.

mod web_support;

use std::process::Command;

use serde_json::Value;
use web_support::{agent_binary, root};

const LLAMA_8B: [&str; 14] = [
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

#[test]
fn estimate_json_matches_its_schema() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("schemas/estimate.v1.schema.json")).expect("schema"),
    )
    .expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
    for extra in [
        vec!["--context", "8192"],
        vec!["--context", "8192", "--engine", "vllm", "--card", "l40s"],
        vec!["--engine", "vllm", "--max-model-len", "16000"],
        vec!["--context", "8192", "--card", "22.5GB", "--compare-formats"],
        vec!["--context", "8192", "--card", "t4", "--train", "full"],
    ] {
        let out = Command::new(agent_binary())
            .args(["estimate", "--json"])
            .args(LLAMA_8B)
            .args(&extra)
            .output()
            .expect("run the agent");
        // An answer: 0 fits or borderline, 1 does not fit (2 is no answer).
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let value: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{extra:?} breaks the schema: {errors:#?}"
        );
        assert_eq!(value["schema"], "gpumem.estimate/v1");
        assert!(value["verdict"]["card"]["need_bytes"].is_u64(), "{extra:?}");
    }
}
