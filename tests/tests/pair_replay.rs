//! The page paired with the real agent, end to end: the
//! `gpumem-agent` binary (built here, so it embeds the current `dist/`) runs
//! `serve --replay` on loopback, and headless Chromium opens the pairing URL it prints
//! (the dimensioner at `/`, which forwards the token to the agent & sheet page at
//! `/agent/`), pairs, starts the replay, sees every phase arrive, downloads the sheet — which is
//! validated against `schemas/sheet.v1.schema.json` — and imports it into a fresh page.
//! A second test stops the agent mid-run; a third pairs a page hosted elsewhere by
//! pasting the URL. Screenshot: `target/artifacts/paired.png`.
//!
//! Expected figures come from the replayed fixture and from gpumem-core, never typed in.

mod web_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpumem_core::network::{Dtype, NetworkSpec, predict};
use gpumem_proto::sheet::Sheet;
use serde_json::{Value, json};
use web_support::{
    Browser, ReplayAgent, StaticServer, agent_binary, artifacts, browser_tools, bytes_of, root,
    serial,
};

const FIXTURE: &str = "tests/fixtures/measurements/synthetic-seed-dims.json";

/// The replayed results file, as JSON.
fn fixture() -> Value {
    let text = std::fs::read_to_string(root().join(FIXTURE)).expect("read the fixture");
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// The page's pairing state (`data-state` of the status line).
fn pair_state(b: &Browser) -> String {
    b.js(
        "const e = document.querySelector('[data-testid=pair-state]'); return e ? e.dataset.state : '';",
        json!([]),
    )
    .as_str()
    .unwrap_or_default()
    .to_string()
}

fn wait_state(b: &Browser, want: &str) {
    b.wait_for(
        &format!("pairing state {want}"),
        &format!(
            "const e = document.querySelector('[data-testid=pair-state]'); return e && e.dataset.state === '{want}';"
        ),
    );
}

/// Phase rows of the newest run, as `data-phase` names.
fn phase_rows(b: &Browser) -> Vec<String> {
    let v = b.js(
        "const run = document.querySelector('[data-testid=run]');
         return run ? [...run.querySelectorAll('[data-testid=phase-row]')].map(r => r.dataset.phase) : [];",
        json!([]),
    );
    serde_json::from_value(v).unwrap_or_default()
}

/// The cells of one phase row of the newest run.
fn row_cells(b: &Browser, index: usize) -> Vec<String> {
    let v = b.js(
        "const rows = document.querySelector('[data-testid=run]').querySelectorAll('[data-testid=phase-row]');
         return [...rows[arguments[0]].querySelectorAll('td')].map(td => td.textContent);",
        json!([index]),
    );
    serde_json::from_value(v).unwrap_or_default()
}

fn input_value(b: &Browser, id: &str) -> String {
    b.js(
        "const e = document.getElementById(arguments[0]); return e ? e.value : null;",
        json!([id]),
    )
    .as_str()
    .unwrap_or_default()
    .to_string()
}

fn set_input(b: &Browser, id: &str, value: &str) {
    b.js(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];
         e.dispatchEvent(new Event(e.tagName === 'SELECT' ? 'change' : 'input', {bubbles: true}));",
        json!([id, value]),
    );
}

/// Waits until the dimensioner's results show `reserve` bytes as the reserve.
fn wait_reserve(b: &Browser, reserve: u64) {
    b.wait_for(
        "the reserve to follow",
        &format!(
            "const e = document.querySelector('[data-testid=reserve-bytes]'); return !!e && e.textContent.replace(/\\D/g, '') === '{reserve}'"
        ),
    );
}

/// The figures the fixture holds for phase `i`: (allocated peak, reserved end).
fn fixture_phase(fixture: &Value, i: usize) -> (u64, u64) {
    let pool = &fixture["runs"][0]["phases"][i]["pool"];
    (
        pool["allocated_peak_bytes"]
            .as_u64()
            .expect("allocated peak"),
        pool["reserved_end_bytes"].as_u64().expect("reserved end"),
    )
}

/// The largest (device used − pool reserved) at one checkpoint, as the page must offer.
fn fixture_overhead(fixture: &Value) -> u64 {
    fixture["runs"][0]["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .flat_map(|p| {
            ["start", "end"].map(|at| {
                let used = p["device_level"][format!("used_{at}_bytes")].as_u64()?;
                let reserved = p["pool"][format!("reserved_{at}_bytes")].as_u64()?;
                used.checked_sub(reserved)
            })
        })
        .flatten()
        .max()
        .expect("the fixture has device-level figures")
}

/// Waits for one finished `.json` download in `dir`.
fn wait_download(dir: &Path) -> PathBuf {
    let t0 = Instant::now();
    loop {
        let done: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("download dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        // Chromium may name the file before it has written it: a sheet is there once
        // it is not empty and its length held for one poll.
        if let Some(p) = done.into_iter().next() {
            let len = std::fs::metadata(&p).map_or(0, |m| m.len());
            std::thread::sleep(Duration::from_millis(100));
            if len > 0 && std::fs::metadata(&p).is_ok_and(|m| m.len() == len) {
                return p;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no sheet was downloaded into {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn pair_replay_end_to_end() {
    let Some(driver) = browser_tools("pair_replay_end_to_end") else {
        return;
    };
    let _guard = serial();
    let t_start = Instant::now();
    let fixture = fixture();
    let order: Vec<String> =
        serde_json::from_value(fixture["protocol"]["phase_order"].clone()).expect("phase order");
    let agent = ReplayAgent::start(FIXTURE, &[]);
    let downloads = tempfile::tempdir().expect("download dir");
    let b = Browser::start_with_downloads(&driver, Some(downloads.path()));

    // Open the URL the agent printed: the dimensioner forwards it to the agent page,
    // which pairs by itself and drops the token from the address bar.
    b.goto(&agent.url);
    wait_state(&b, "replay");
    assert_eq!(
        b.js("return location.pathname", json!([])),
        json!("/agent/"),
        "the pairing URL leads to the agent page"
    );
    let status = b.testid("pair-state");
    assert!(
        status.contains("gpumem-agent v") && status.contains("replay"),
        "{status}"
    );
    let href = b.js("return location.href", json!([]));
    assert!(
        !href.as_str().unwrap_or_default().contains("token"),
        "the token stayed in the address bar: {href}"
    );
    // The environment: unknown facts are shown with their reason.
    let env = b.wait_for(
        "the environment",
        "const e = document.querySelector('[data-testid=environment]'); return e && e.textContent;",
    );
    let env = env.as_str().unwrap_or_default();
    assert!(env.contains("unknown — SYNTHETIC"), "{env}");
    assert!(env.contains("cuda_mempool"), "{env}");

    // Start the replay; the default dimensions pass the agent's bounds.
    assert_eq!(input_value(&b, "m-batch"), "2");
    assert_eq!(input_value(&b, "m-width"), "1024");
    b.click("[data-testid=measure-start]");
    // Phases arrive one by one (the agent pauses between them): record the row
    // counts seen, and take the screenshot while the run is still live.
    let mut seen = Vec::new();
    let mut shot = false;
    let t0 = Instant::now();
    loop {
        let n = phase_rows(&b).len();
        if seen.last() != Some(&n) {
            seen.push(n);
        }
        if !shot && n >= 6 {
            b.js(
                "document.querySelector('[data-testid=agent-panel]').scrollIntoView()",
                json!([]),
            );
            b.screenshot(&artifacts().join("paired.png"));
            shot = true;
        }
        if n == order.len() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "phases stopped arriving at {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(15));
    }
    assert!(
        seen.len() >= order.len() / 2,
        "phases did not arrive one by one: row counts seen {seen:?}"
    );
    assert_eq!(phase_rows(&b), order, "phases in the protocol's order");
    b.wait_for(
        "the run to finish",
        "const e = document.querySelector('[data-testid=run]'); return e && e.dataset.state === 'ok';",
    );
    let run_source = b.js(
        "return document.querySelector('[data-testid=run]').dataset.source",
        json!([]),
    );
    assert_eq!(run_source, json!("replay"));
    assert!(b.testid("replay-label").contains("replay"));
    assert!(
        b.testid("phases-table")
            .contains("Replay of a saved results file"),
        "the table is labelled replay"
    );
    // Observed figures are the fixture's; the computed column is gpumem-core's.
    let predicted = predict(
        &NetworkSpec {
            batch: 2,
            context: 128,
            width: 1024,
            layers: 4,
            dtype: Dtype::Float32,
        },
        3,
    )
    .expect("prediction");
    for (i, name) in order.iter().enumerate() {
        let cells = row_cells(&b, i);
        let (alloc_peak, reserved_end) = fixture_phase(&fixture, i);
        // Columns: status, allocated start/peak/end, computed start/peak/end, reserved
        // start/peak/end, gaps, device level.
        assert_eq!(bytes_of(&cells[2]), Some(alloc_peak), "{name}: {cells:?}");
        assert_eq!(bytes_of(&cells[9]), Some(reserved_end), "{name}: {cells:?}");
        let computed_peak = predicted
            .iter()
            .find(|p| serde_json::to_value(p.phase).ok() == Some(json!(name)))
            .expect("a prediction for every phase")
            .peak
            .get();
        assert_eq!(
            bytes_of(&cells[5]),
            Some(computed_peak),
            "{name}: {cells:?}"
        );
        assert!(cells[0].contains("ok"), "{name}: {cells:?}");
    }
    assert!(
        b.js(
            "return document.querySelectorAll('[data-testid=timeline] polyline').length",
            json!([])
        )
        .as_u64()
        .is_some_and(|n| n >= 4),
        "the timeline draws the counters"
    );

    // The observed non-pool overhead becomes the reserve (the dimensioner shows it
    // once back there, below; the sheet holds it at once).
    let overhead = fixture_overhead(&fixture);
    assert!(b.testid("overhead").contains("observed"));
    b.click("[data-testid=use-as-reserve]");

    // Identity and decision, then the sheet.
    set_input(&b, "sheet-model", "example/model-7b");
    set_input(&b, "sheet-revision", "r1");
    set_input(&b, "sheet-seed", "7");
    set_input(&b, "sheet-card", "h100-sxm-80gb");
    set_input(
        &b,
        "sheet-reason",
        "the near-limit workload fits with headroom",
    );
    b.wait_for(
        "the sheet summary",
        "const e = document.querySelector('[data-testid=sheet-summary]'); return e && e.textContent.includes('replay');",
    );
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
    let sheet = Sheet::from_json(&text).expect("the sheet reads back");
    assert_eq!(value["schema"], "gpumem.sheet/v1");
    assert_eq!(value["provenance"]["observations"], "replay");
    assert_eq!(sheet.observed.runs.len(), 1);
    let run = &value["observed"]["runs"][0];
    assert_eq!(run["source"], "replay");
    assert_eq!(run["phases"].as_array().map(Vec::len), Some(order.len()));
    assert_eq!(run["raw"], fixture, "raw results attached unchanged");
    assert_eq!(value["identity"]["model"], "example/model-7b");
    assert_eq!(value["identity"]["seed"], 7);
    assert_eq!(
        value["computed"]["estimates"].as_array().map(Vec::len),
        Some(3)
    );
    assert_eq!(
        value["computed"]["estimates"][0]["input"]["reserve-bytes"],
        overhead.to_string()
    );
    // The observed overhead in place of the flat reserve is a measured figure, no
    // longer a hypothesis: the sheet does not list it among the assumptions.
    assert!(
        !sheet.assumed.iter().any(|a| a.key == "reserve"),
        "the observed reserve is not an assumption: {:?}",
        sheet.assumed
    );
    assert_eq!(value["maximum_load_tested"]["passed"], true);
    assert_eq!(value["decision"]["card"], "NVIDIA H100 SXM 80GB");
    assert!(value["environment"]["devices"].is_array());
    println!(
        "pair: sheet {} ({} bytes) valid against the schema",
        file.display(),
        text.len()
    );
    // Back on the dimensioner, the reserve is the one chosen on the agent page.
    b.click("[data-testid=to-dimensioner]");
    b.wait_for(
        "the dimensioner",
        "return location.pathname === '/' && !!document.getElementById('reserve-bytes')",
    );
    assert_eq!(input_value(&b, "reserve-bytes"), overhead.to_string());
    wait_reserve(&b, overhead);
    drop(b);

    // A fresh browser (empty storage), from the dimensioner to the agent's page, not
    // paired: import.
    let b = Browser::start(&driver);
    b.goto(&format!("{}/", agent.origin));
    assert_eq!(input_value(&b, "reserve-bytes"), "");
    b.click("[data-testid=to-agent-page]");
    wait_state(&b, "not-paired");
    assert_eq!(
        b.js("return location.pathname", json!([])),
        json!("/agent/")
    );
    assert_eq!(input_value(&b, "sheet-model"), "");
    // Bad and foreign files are refused in words, and nothing is lost.
    let bad = downloads.path().join("bad.txt");
    for (content, words) in [
        ("{not json", "not JSON"),
        ("{\"name\": \"package.json\"}", "not a gpumem sheet"),
    ] {
        std::fs::write(&bad, content).unwrap();
        b.upload("[data-testid=sheet-import]", &[&bad]);
        b.wait_for(
            "the refusal",
            &format!(
                "return document.querySelector('[data-testid=sheet-status]').textContent.includes({words:?})"
            ),
        );
        assert!(b.testid("sheet-status").contains("Not imported"));
    }
    set_input(&b, "sheet-model", "kept");
    b.upload("[data-testid=sheet-import]", &[&bad]);
    b.wait_for(
        "the refusal",
        "return document.querySelector('[data-testid=sheet-status]').textContent.includes('Not imported')",
    );
    assert_eq!(input_value(&b, "sheet-model"), "kept", "nothing lost");
    // A fleet sheet (`gpumem-agent merge`) is shown as its one-line summary, labelled
    // SYNTHETIC like its input, and changes nothing else.
    let fleet = downloads.path().join("fleet.json");
    let merged = std::process::Command::new(agent_binary())
        .arg("merge")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/measurements"))
        .arg("--output")
        .arg(&fleet)
        .output()
        .unwrap();
    assert!(merged.status.success(), "{merged:?}");
    b.upload("[data-testid=sheet-import]", &[&fleet]);
    b.wait_for(
        "the fleet summary",
        "return document.querySelector('[data-testid=sheet-status]').textContent.includes('fleet sheet: 1 documents, 1 rows')",
    );
    assert!(
        b.testid("sheet-status")
            .contains("SYNTHETIC (not GPU figures)")
    );
    assert_eq!(input_value(&b, "sheet-model"), "kept", "nothing changed");
    // The good sheet restores inputs, identity, decision and the observed run.
    b.upload("[data-testid=sheet-import]", &[&file]);
    b.wait_for(
        "the import",
        "return document.querySelector('[data-testid=sheet-status]').textContent.includes('Imported')",
    );
    assert_eq!(input_value(&b, "sheet-model"), "example/model-7b");
    assert_eq!(input_value(&b, "sheet-revision"), "r1");
    assert_eq!(input_value(&b, "sheet-seed"), "7");
    assert_eq!(input_value(&b, "sheet-card"), "h100-sxm-80gb");
    assert_eq!(phase_rows(&b), order, "the observed run is restored");
    let restored = b.js(
        "return document.querySelector('[data-testid=run]').dataset.source",
        json!([]),
    );
    assert_eq!(restored, json!("replay"), "still labelled replay");
    // The sheet's inputs are the dimensioner's state now.
    b.click("[data-testid=to-dimensioner]");
    b.wait_for(
        "the dimensioner",
        "return location.pathname === '/' && !!document.getElementById('reserve-bytes')",
    );
    assert_eq!(input_value(&b, "reserve-bytes"), overhead.to_string());
    wait_reserve(&b, overhead);
    let pairs: Vec<(String, String)> = sheet.computed.estimates[0]
        .input
        .as_object()
        .expect("input pairs")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    for (k, v) in &pairs {
        // A switch shows its value as checked or not; every other input as text.
        let shown = b.js(
            "const e = document.getElementById(arguments[0]);
             return e.type === 'checkbox' ? String(e.checked) : e.value;",
            json!([k]),
        );
        assert_eq!(shown.as_str(), Some(v.as_str()), "input {k} restored");
    }
    println!(
        "pair: paired, {} phases live, sheet downloaded, validated and imported in {:.1} s",
        order.len(),
        t_start.elapsed().as_secs_f64()
    );
}

#[test]
fn pair_agent_going_away_keeps_what_was_received() {
    let Some(driver) = browser_tools("pair_agent_going_away_keeps_what_was_received") else {
        return;
    };
    let _guard = serial();
    let mut agent = ReplayAgent::start(FIXTURE, &["--replay-delay-ms", "400"]);
    let b = Browser::start(&driver);
    b.goto(&agent.url);
    wait_state(&b, "replay");
    b.click("[data-testid=measure-start]");
    b.wait_for(
        "three phases",
        "return document.querySelectorAll('[data-testid=phase-row]').length >= 3",
    );
    agent.stop();
    wait_state(&b, "disconnected");
    let status = b.testid("pair-state");
    assert!(
        status.contains("the agent went away") && status.contains("everything received is kept"),
        "{status}"
    );
    let kept = phase_rows(&b);
    assert!(kept.len() >= 3, "received phases were kept: {kept:?}");
    assert_eq!(
        b.js(
            "return document.querySelector('[data-testid=run]').dataset.state",
            json!([])
        ),
        json!("failed"),
        "the run is marked interrupted"
    );
    assert!(b.testid("run-state").contains("interrupted"));
    // What was received can still go into a sheet.
    assert!(
        b.testid("sheet-summary")
            .contains("1 measurement run(s) and 0 run(s) of your own command, replayed")
    );
    println!(
        "pair: agent stopped after {} phases; the page kept them",
        kept.len()
    );
}

#[test]
fn pair_by_pasting_the_url_into_a_page_hosted_elsewhere() {
    let Some(driver) = browser_tools("pair_by_pasting_the_url_into_a_page_hosted_elsewhere") else {
        return;
    };
    let _guard = serial();
    // The same built page, served from another origin, which the agent allows.
    let elsewhere = StaticServer::start(&root().join("dist"));
    let agent = ReplayAgent::start(FIXTURE, &["--allow-origin", &elsewhere.origin]);
    let b = Browser::start(&driver);
    b.goto(&format!("{}/agent/", elsewhere.origin));
    wait_state(&b, "not-paired");
    // A wrong token is refused, and the page says so.
    let wrong = format!("{}/#token={}", agent.origin, "ab".repeat(32));
    set_input(&b, "pair-url", &wrong);
    b.click("[data-testid=pair-button]");
    wait_state(&b, "disconnected");
    assert!(b.testid("pair-state").contains("Could not pair"));
    // A URL that is not the agent's is refused before connecting.
    set_input(&b, "pair-url", "http://example.com:80/#token=abc");
    b.click("[data-testid=pair-button]");
    assert!(
        b.testid("agent-panel").contains("not this machine"),
        "{}",
        b.testid("agent-panel")
    );
    // The printed URL pairs.
    set_input(&b, "pair-url", &agent.url);
    b.click("[data-testid=pair-button]");
    wait_state(&b, "replay");
    assert_eq!(pair_state(&b), "replay");
    println!(
        "pair: a page from {} paired by pasting the URL",
        elsewhere.origin
    );
}
