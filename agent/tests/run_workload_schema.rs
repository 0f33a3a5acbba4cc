//! `schemas/workload.v1.schema.json` is generated from
//! `gpumem_proto::workload::WorkloadFile`; this test fails when the checked-in file no
//! longer matches the types, and checks the committed workload fixtures against them.
//! To regenerate it after changing the types:
//! `GPUMEM_BLESS=1 cargo test -p gpumem-agent --test run_workload_schema`.

use std::path::PathBuf;

use gpumem_proto::workload::{WORKLOAD_SCHEMA, WorkloadFile};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn generated() -> String {
    let schema = schemars::schema_for!(WorkloadFile);
    let mut text = serde_json::to_string_pretty(&schema).expect("schema serialises");
    text.push('\n');
    text
}

#[test]
fn the_checked_in_workload_schema_matches_the_types() {
    gpumem_e2e::check_generated(
        &root().join("schemas/workload.v1.schema.json"),
        &generated(),
        "cargo test -p gpumem-agent --test run_workload_schema",
    );
}

#[test]
fn every_workload_fixture_parses_and_synthetic_ones_say_so() {
    let dir = root().join("tests/fixtures/workloads");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("fixtures folder") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        let file: WorkloadFile =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(file.schema, WORKLOAD_SCHEMA);
        let name = path.file_name().unwrap().to_string_lossy().to_lowercase();
        // A fixture without a GPU in its name is synthetic and labelled so, everywhere.
        if !name.contains("gpu") {
            assert!(file.synthetic, "{name} must be labelled synthetic");
            assert!(name.starts_with("synthetic-"), "{name}");
            assert!(file.note.unwrap_or_default().contains("SYNTHETIC"));
        }
        seen += 1;
    }
    assert!(seen > 0, "no fixture in {}", dir.display());
}
