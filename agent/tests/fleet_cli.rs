//! `merge` and `export` through the real binary on the committed (SYNTHETIC) fixtures:
//! the fleet sheet reads back into its types and says SYNTHETIC, the exposition text
//! has its families, and bad input is refused with exit 2 and words, never a panic,
//! never an overwrite.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpumem_proto::fleet::{DocumentKind, FLEET_SCHEMA, FleetSheet};

fn agent(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args(args)
        .output()
        .expect("the agent binary runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "the agent panicked: {err}");
    out
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn merge_writes_a_fleet_sheet_of_the_fixtures_and_never_overwrites_one() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("fleet.json");
    let m = fixtures().join("measurements");
    let w = fixtures().join("workloads");
    let out = agent(&["merge", s(&m), s(&w), "--output", s(&out_path)]);
    assert_eq!(out.status.code(), Some(0));
    // One row per committed document: the measurements' results, then each workload.
    let json_files = |d: &Path| {
        std::fs::read_dir(d)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json"))
            })
            .count()
    };
    let (results, workloads) = (json_files(&m), json_files(&w));
    assert!(
        results >= 1 && workloads >= 2,
        "{results} results, {workloads} workloads"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let head = format!("fleet sheet: {} documents", results + workloads);
    assert!(stdout.starts_with(&head), "{stdout}");
    assert!(stdout.contains("SYNTHETIC"), "{stdout}");
    let sheet: FleetSheet =
        serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    assert_eq!(sheet.schema, FLEET_SCHEMA);
    assert!(sheet.synthetic);
    let kinds: Vec<DocumentKind> = sheet.rows.iter().map(|r| r.kind).collect();
    // Documents of one configuration share a row: the training workload and its run
    // with the allocator's history are one.
    assert_eq!(
        kinds,
        [
            DocumentKind::Results,
            DocumentKind::Workload,
            DocumentKind::Workload
        ]
    );
    let documents: u64 = sheet.rows.iter().map(|r| r.documents).sum();
    assert_eq!(documents, (results + workloads) as u64);
    // --json prints the same sheet.
    let json = agent(&["merge", s(&m), s(&w), "--json"]);
    let again: FleetSheet = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(again.rows, sheet.rows);
    // An existing output is refused before anything is read.
    let out = agent(&["merge", s(&m), "--output", s(&out_path)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to overwrite"));
    // A missing input is an error, not an empty sheet.
    let out = agent(&["merge", "/nonexistent/gpumem-fleet"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn export_prints_the_exposition_text_and_refuses_what_is_not_a_document() {
    let f = fixtures().join("workloads/synthetic-train_adamw.json");
    let out = agent(&["export", s(&f)]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for family in [
        "# TYPE gpumem_run_info gauge",
        "# TYPE gpumem_phase_allocated_peak_bytes gauge",
        "# TYPE gpumem_estimate_error_ratio gauge",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    assert!(
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .all(|l| l.contains("synthetic=\"true\"")),
        "every series of a synthetic document says so:\n{text}"
    );
    let dir = tempfile::tempdir().unwrap();
    let not_json = dir.path().join("x.json");
    std::fs::write(&not_json, "{nope").unwrap();
    let out = agent(&["export", s(&not_json)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not JSON"));
    let sheet = dir.path().join("sheet.json");
    std::fs::write(&sheet, r#"{"schema":"gpumem.sheet/v1"}"#).unwrap();
    let out = agent(&["export", s(&sheet)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("export reads"));
}
