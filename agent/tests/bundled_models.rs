//! The bundled catalogue end to end: a bundled `--model ID` answers with the Hub out
//! of reach (`HF_ENDPOINT` on a closed port, so any request would fail), says so, and
//! counts what `--config` of the same config.json counts; `--revision` still goes to
//! the Hub; an unknown id offline is answered with the bundled ids close to it; and
//! `gpumem-agent models` lists every entry, each of which parses.

use std::path::{Path, PathBuf};
use std::process::Output;

use gpumem_e2e::hub_standin::isolated_agent;
use serde_json::Value;

/// A port that was just free: nothing listens there, so a request is refused at once.
fn closed_endpoint() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    format!("http://127.0.0.1:{port}")
}

/// The agent with the Hub out of reach: a closed `HF_ENDPOINT`, a fresh cache and home,
/// no token, no proxy.
fn offline(home: &Path, args: &[&str]) -> Output {
    isolated_agent(
        Path::new(env!("CARGO_BIN_EXE_gpumem-agent")),
        &closed_endpoint(),
        home,
        None,
    )
    .args(args)
    .output()
    .expect("the agent binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json_ok(out: &Output) -> Value {
    // An answer: 0 fits or borderline, 1 does not fit (2 would be no answer).
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// The catalogue's files (`agent/models/*.json`), sorted.
fn catalogue_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("agent/models")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn entry(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("a catalogue file");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_bundled_model_answers_with_no_request_and_says_so() {
    let home = tempfile::tempdir().expect("temp dir");
    let out = offline(
        home.path(),
        &[
            "estimate",
            "--model",
            "meta-llama/Llama-3.1-8B",
            "--context",
            "8192",
            "--card",
            "l40s-48gb",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let first = text.lines().next().unwrap_or("");
    assert!(
        first.starts_with("meta-llama/Llama-3.1-8B (bundled) · 8.03 B parameters"),
        "{text}"
    );
    let err = stderr(&out);
    assert!(
        err.contains("bundled config.json") && err.contains("no request"),
        "{err}"
    );
    assert!(!err.contains("could not reach"), "{err}");

    let v = json_ok(&offline(
        home.path(),
        &["estimate", "--json", "--model", "meta-llama/Llama-3.1-8B"],
    ));
    let assumptions = v["assumptions"].as_array().expect("assumptions");
    let bundled = assumptions
        .iter()
        .filter_map(Value::as_str)
        .find(|a| a.contains("the bundled copy of meta-llama/Llama-3.1-8B"))
        .expect("the bundled assumption");
    assert!(
        bundled.contains("read 2026-12-02") && bundled.contains("--revision main"),
        "{bundled}"
    );
    assert_eq!(v["parameters"], 8_030_261_248u64);
}

#[test]
fn ids_are_matched_without_case_and_named_as_the_hub_spells_them() {
    let home = tempfile::tempdir().expect("temp dir");
    let out = offline(
        home.path(),
        &["estimate", "--model", "META-LLAMA/llama-3.1-8b"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("meta-llama/Llama-3.1-8B (bundled)"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn every_bundled_model_counts_what_its_config_json_counts() {
    let home = tempfile::tempdir().expect("temp dir");
    let files = catalogue_files();
    assert!(files.len() >= 100, "{} bundled models", files.len());
    for path in files {
        let e = entry(&path);
        let id = e["id"].as_str().expect("an id");
        let config = home.path().join("config.json");
        std::fs::write(&config, e["config"].to_string()).expect("write the config");
        let by_id = json_ok(&offline(
            home.path(),
            &["estimate", "--json", "--model", id, "--reserve-gib", "0"],
        ));
        let by_file = json_ok(&offline(
            home.path(),
            &[
                "estimate",
                "--json",
                "--config",
                config.to_str().expect("a UTF-8 path"),
                "--reserve-gib",
                "0",
            ],
        ));
        assert!(by_id["parameters"].as_u64().is_some_and(|p| p > 0), "{id}");
        for key in [
            "parameters",
            "active_parameters",
            "weights_bytes",
            "total_bytes",
        ] {
            assert_eq!(by_id[key], by_file[key], "{id}: {key}");
        }
    }
}

#[test]
fn a_revision_still_reads_the_hub() {
    let home = tempfile::tempdir().expect("temp dir");
    let out = offline(
        home.path(),
        &[
            "estimate",
            "--model",
            "meta-llama/Llama-3.1-8B",
            "--revision",
            "main",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("could not reach"), "{err}");
    assert!(
        err.contains("meta-llama/Llama-3.1-8B is bundled: without --revision"),
        "{err}"
    );
}

#[test]
fn an_unknown_model_offline_is_answered_with_the_closest_bundled_ids() {
    let home = tempfile::tempdir().expect("temp dir");
    let out = offline(
        home.path(),
        &["estimate", "--model", "meta-llama/Lama-3.1-8B"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("could not reach"), "{err}");
    let hint = err
        .lines()
        .find(|l| l.starts_with("bundled (no network needed): "))
        .unwrap_or_else(|| panic!("no hint: {err}"));
    assert!(
        hint.starts_with("bundled (no network needed): meta-llama/Llama-3.1-8B,"),
        "{hint}"
    );
    assert!(hint.contains("`gpumem-agent models` lists all"), "{hint}");
}

#[test]
fn trace_reads_a_bundled_config_without_the_hub() {
    // No Python at this path: the trace stops there, after config.json was read.
    let home = tempfile::tempdir().expect("temp dir");
    let python = home.path().join("no-python-here");
    let out = offline(
        home.path(),
        &[
            "trace",
            "--model",
            "Qwen/Qwen3-0.6B",
            "--python",
            python.to_str().expect("a UTF-8 path"),
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the bundled copy of Qwen/Qwen3-0.6B"), "{err}");
    assert!(!err.contains("could not reach"), "{err}");
}

#[test]
fn the_listing_names_every_bundled_model_with_its_parameters() {
    let home = tempfile::tempdir().expect("temp dir");
    let out = offline(home.path(), &["models"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let files = catalogue_files();
    for path in &files {
        let e = entry(path);
        let id = e["id"].as_str().expect("an id");
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{id} "))),
            "{id} not listed"
        );
    }
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");

    let rows = json_ok(&offline(home.path(), &["models", "--json"]));
    let rows = rows.as_array().expect("an array");
    assert_eq!(rows.len(), files.len());
    assert!(rows.len() >= 100, "{} bundled models", rows.len());
    for r in rows {
        let id = r["id"].as_str().expect("an id");
        assert!(r["parameters"].as_u64().is_some_and(|p| p > 0), "{id}");
        assert!(r["model_type"].is_string(), "{id}");
        assert!(
            r["source"].as_str().is_some_and(|s| s.len() > 10),
            "{id}: no source"
        );
        // The day the copy was read: the catalogue's first reading or a later one.
        let read = r["read"].as_str().unwrap_or_default();
        assert!(
            read.len() == 10 && read.as_bytes()[4] == b'-' && read >= "2026-12-02",
            "{id}: read {read}"
        );
    }
    let llama = rows
        .iter()
        .find(|r| r["id"] == "meta-llama/Llama-3.1-8B")
        .expect("listed");
    assert_eq!(llama["published_parameters"], 8_030_261_248u64);
    assert_eq!(llama["parameters"], 8_030_261_248u64);

    let some = json_ok(&offline(home.path(), &["models", "QWEN3", "--json"]));
    let some = some.as_array().expect("an array");
    assert!(!some.is_empty());
    assert!(some.iter().all(|r| {
        r["id"]
            .as_str()
            .is_some_and(|id| id.to_ascii_lowercase().contains("qwen3"))
    }));
}
