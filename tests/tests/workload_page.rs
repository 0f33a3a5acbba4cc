//! A user's workload on the page, end to end: the real `gpumem-agent` (built here, so it
//! embeds the current `dist/`) runs `serve --replay` with a `gpumem.workload/v1` fixture,
//! headless Chromium opens the pairing URL it prints, and the agent page shows the
//! workload without being asked — phases grouped with the first step apart, the
//! timeline, and the computed-vs-observed table with each named difference — all with
//! the fixture's values, labelled replay and SYNTHETIC. Screenshot:
//! `target/artifacts/workload.png`.
//!
//! Expected figures are read from the fixture, never typed in.

mod web_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use web_support::{Browser, ReplayAgent, artifacts, browser_tools, bytes_of, root, serial};

const FIXTURE: &str = "tests/fixtures/workloads/synthetic-train_adamw.json";

fn strings(b: &Browser, script: &str) -> Vec<String> {
    serde_json::from_value(b.js(script, json!([]))).unwrap_or_default()
}

#[test]
fn a_replayed_workload_shows_its_phases_and_computed_vs_observed() {
    let Some(driver) = browser_tools("a_replayed_workload_shows_its_phases") else {
        return;
    };
    let _guard = serial();
    let fixture: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join(FIXTURE)).expect("fixture"))
            .expect("JSON");
    let rank = &fixture["ranks"][0];
    let phases = rank["phases"].as_array().expect("phases");
    let agent = ReplayAgent::start(FIXTURE, &["--replay-delay-ms", "20"]);
    let url = agent.url.clone();
    let downloads = tempfile::tempdir().expect("download dir");
    let b = Browser::start_with_downloads(&driver, Some(downloads.path()));
    b.goto(&url);
    // Pushed without asking: the page never clicks "start".
    b.wait_for(
        "the workload document",
        "const w = document.querySelector('[data-testid=workload]'); return w && w.dataset.state !== 'running' && !!w.querySelector('[data-testid=workload-comparison]');",
    );
    // The page can start nothing here: no measurement form.
    assert_eq!(
        b.js(
            "return document.querySelector('[data-testid=measure-start]') === null",
            json!([])
        ),
        json!(true)
    );
    let workload = b.testid("workload");
    assert!(workload.contains("replay"), "{workload}");
    assert!(b.testid("synthetic-label").contains("SYNTHETIC"));
    let source = b.js(
        "return document.querySelector('[data-testid=workload]').dataset.source",
        json!([]),
    );
    assert_eq!(source, json!("replay"));

    // Phases: the fixture's, in order, the first step apart.
    let names = strings(
        &b,
        "return [...document.querySelectorAll('[data-testid=workload-phase-row]')].map(r => r.dataset.phase);",
    );
    let groups = strings(
        &b,
        "return [...document.querySelectorAll('[data-testid=workload-phase-row]')].map(r => r.dataset.group);",
    );
    let expected_names: Vec<String> = phases
        .iter()
        .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    let expected_groups: Vec<&str> = phases
        .iter()
        .map(|p| {
            if p["first_step"] == json!(true) {
                "first"
            } else if p["step"].is_null() {
                "before"
            } else {
                "later"
            }
        })
        .collect();
    assert_eq!(names, expected_names);
    assert_eq!(groups, expected_groups);
    assert!(groups.contains(&"first".to_owned()) && groups.contains(&"later".to_owned()));
    // Each row's allocated peak (third cell: step, alloc start, alloc peak) is the fixture's.
    let peaks = strings(
        &b,
        "return [...document.querySelectorAll('[data-testid=workload-phase-row]')].map(r => r.querySelectorAll('td')[2].textContent);",
    );
    for (cell, p) in peaks.iter().zip(phases) {
        assert_eq!(
            bytes_of(cell),
            p["allocator"]["allocated_peak_bytes"].as_u64(),
            "{cell}"
        );
    }
    assert!(!b.testid("workload-timeline").is_empty());

    // Computed vs observed: every line with the fixture's figures, null shown as —.
    let lines = rank["comparison"]["lines"].as_array().expect("lines");
    let items = strings(
        &b,
        "return [...document.querySelectorAll('[data-testid=comparison-row]')].map(r => r.dataset.item);",
    );
    let cells: Vec<Vec<String>> = serde_json::from_value(b.js(
        "return [...document.querySelectorAll('[data-testid=comparison-row]')].map(r => [...r.querySelectorAll('td')].map(td => td.textContent));",
        json!([]),
    ))
    .expect("cells");
    assert_eq!(items.len(), lines.len());
    for ((item, row), line) in items.iter().zip(&cells).zip(lines) {
        assert_eq!(Some(item.as_str()), line["item"].as_str());
        let shown = |text: &str, v: &Value| match v.as_u64() {
            Some(n) => bytes_of(text) == Some(n),
            None => text.trim() == "—",
        };
        assert!(shown(&row[0], &line["computed_bytes"]), "{item}: {row:?}");
        assert!(shown(&row[2], &line["observed_bytes"]), "{item}: {row:?}");
    }
    // Each named difference, with its explanation.
    let differences = rank["comparison"]["differences"]
        .as_array()
        .expect("differences");
    let shown = strings(
        &b,
        "return [...document.querySelectorAll('[data-testid=difference]')].map(d => d.textContent);",
    );
    assert_eq!(shown.len(), differences.len());
    for (text, d) in shown.iter().zip(differences) {
        assert!(
            text.contains(d["explanation"].as_str().unwrap_or("?")),
            "{text}"
        );
        if let Some(n) = d["bytes"].as_i64() {
            assert!(
                text.replace(['\u{a0}', ' ', ',', '\u{202f}'], "")
                    .contains(&n.unsigned_abs().to_string()),
                "{text}"
            );
        }
    }
    // No Rust debug text reaches the page (a step was once shown as "step Some(2)").
    let text = b.js("return document.body.innerText", json!([]));
    let text = text.as_str().unwrap_or_default();
    for debug in ["Some(", "None)", "Ok(", "Err("] {
        assert!(!text.contains(debug), "{debug} on the page");
    }
    // The timeline says what its axes are.
    let axes = b.testid("workload-timeline");
    assert!(
        axes.contains("y: allocator peak per phase, bytes")
            && axes.contains("x, top: the phases in order"),
        "{axes}"
    );
    // The sheet's summary counts the replayed run of the user's command.
    let observed = b.wait_for(
        "the sheet summary",
        "const e = document.querySelector('[data-testid=sheet-observed]'); return e && e.textContent.includes('1 run(s) of your own command') && e.textContent;",
    );
    assert!(
        observed.as_str().unwrap_or_default().contains("replayed"),
        "{observed}"
    );
    b.js(
        "document.querySelector('[data-testid=workload]').scrollIntoView()",
        json!([]),
    );
    b.screenshot(&artifacts().join("workload.png"));

    // The sheet attaches the workload, its document unchanged, within the schema.
    b.click("[data-testid=sheet-download]");
    let file = wait_download(downloads.path());
    let text = std::fs::read_to_string(&file).expect("read the sheet");
    let value: Value = serde_json::from_str(&text).expect("the sheet is JSON");
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("schemas/sheet.v1.schema.json")).expect("schema"),
    )
    .expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid JSON Schema");
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "the sheet breaks its schema: {errors:#?}"
    );
    let attached = &value["observed"]["workloads"][0];
    assert_eq!(attached["source"], "replay");
    assert_eq!(attached["synthetic"], true);
    assert_eq!(
        attached["raw"], fixture,
        "the document is attached unchanged"
    );
    drop(b);

    // Imported into a fresh, unpaired page, the workload is shown again.
    let b = Browser::start(&driver);
    let origin = url.split("/#").next().unwrap_or_default().to_owned();
    b.goto(&format!("{origin}/agent/"));
    b.upload("[data-testid=sheet-import]", &[&file]);
    b.wait_for(
        "the imported workload",
        "const w = document.querySelector('[data-testid=workload]'); return w && w.dataset.state === 'imported';",
    );
    let again = strings(
        &b,
        "return [...document.querySelectorAll('[data-testid=workload-phase-row]')].map(r => r.dataset.phase);",
    );
    assert_eq!(again, expected_names);
}

/// Waits for one finished `.json` download in `dir`.
fn wait_download(dir: &Path) -> PathBuf {
    let t0 = std::time::Instant::now();
    loop {
        let done: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("download dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        if let Some(p) = done.into_iter().next() {
            return p;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no sheet was downloaded into {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
