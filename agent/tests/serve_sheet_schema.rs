//! `schemas/sheet.v1.schema.json` is generated from `gpumem_proto::sheet::Sheet`;
//! this test fails when the checked-in file no longer matches the types.
//! To regenerate it after changing the types:
//! `GPUMEM_BLESS=1 cargo test -p gpumem-agent --test serve_sheet_schema`.

use std::path::PathBuf;

use gpumem_proto::sheet::{SHEET_SCHEMA, Sheet};

fn schema_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schemas/sheet.v1.schema.json")
}

fn generated() -> String {
    let schema = schemars::schema_for!(Sheet);
    let mut text = serde_json::to_string_pretty(&schema).expect("schema serialises");
    text.push('\n');
    text
}

#[test]
fn the_checked_in_sheet_schema_matches_the_types() {
    gpumem_e2e::check_generated(
        &schema_path(),
        &generated(),
        "cargo test -p gpumem-agent --test serve_sheet_schema",
    );
}

#[test]
fn the_schema_names_the_version_and_requires_every_section() {
    let schema: serde_json::Value = serde_json::from_str(&generated()).expect("JSON");
    let required: Vec<&str> = schema["required"]
        .as_array()
        .expect("required list")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    // Sections that always hold something are required; the others are `null` until
    // known (serde reads a missing one as null too, and the schema says the same).
    for section in [
        "schema",
        "identity",
        "dimensions",
        "computed",
        "observed",
        "assumed",
        "provenance",
    ] {
        assert!(
            required.contains(&section),
            "{section} is required: {required:?}"
        );
    }
    for section in ["environment", "maximum_load_tested", "decision"] {
        assert!(
            schema["properties"].get(section).is_some(),
            "{section} is described"
        );
    }
    assert_eq!(
        schema["properties"]["schema"]["const"], SHEET_SCHEMA,
        "foreign documents fail the schema"
    );
    assert_eq!(SHEET_SCHEMA, "gpumem.sheet/v1");
}
