//! gpumem-proto: serialisable documents shared by the agent and the page — the
//! measurement results file, the agent↔page wire messages, the sheet, the workload
//! results of `gpumem-agent run`, the trace of `gpumem-agent trace` and the
//! `estimate --json` document.

pub mod context;
pub mod diffusion;
pub mod estimate;
pub mod fleet;
pub mod history;
pub mod json;
pub mod lookup;
pub mod markup;
pub mod probe;
pub mod results;
pub mod rules;
pub mod sheet;
pub mod trace;
pub mod training;
pub mod wire;
pub mod workload;

/// The one check behind every published schema: `schemas/NAME` is generated from the
/// types with its `$id` and `description`, and a stale file fails the test. With
/// `GPUMEM_BLESS` set the file is written instead (`GPUMEM_BLESS=1 cargo test -p
/// gpumem-proto --features schema published_schema`).
#[cfg(all(test, feature = "schema"))]
pub(crate) fn check_published_schema(
    name: &str,
    mut schema: schemars::Schema,
    description: String,
) -> (std::path::PathBuf, String) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../schemas")
        .join(name);
    schema.insert(
        "$id".to_owned(),
        serde_json::json!(format!("https://gpumem.invalid/schemas/{name}")),
    );
    schema.insert("description".to_owned(), serde_json::json!(description));
    let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
    if std::env::var_os("GPUMEM_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    (path, text)
}

/// Asserts that `schemas/NAME` is what [`check_published_schema`] generates.
#[cfg(all(test, feature = "schema"))]
pub(crate) fn assert_published_schema(name: &str, schema: schemars::Schema, description: String) {
    let (path, text) = check_published_schema(name, schema, description);
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == text,
        "{} is stale or missing: regenerate it with `GPUMEM_BLESS=1 cargo test -p gpumem-proto --features schema published_schema` and commit it",
        path.display()
    );
}
