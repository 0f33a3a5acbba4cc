//! The allocator's history on the agent page, end to end: the real `gpumem-agent`
//! (built here, so it embeds the current `dist/`) pushes a workload document recorded
//! with `run --memory-history`, and headless Chromium draws its timeline (allocated by
//! line over the events, reserved behind, the phases as bands) and the highest peak's
//! breakdown beside the estimate's lines — for a replayed file (`serve --replay`) and
//! for a live run (`run --serve`, the probe's recording stand-in on CPU). Every figure
//! is SYNTHETIC (the stand-in's plan of allocations, not PyTorch's recorder: no CUDA
//! here) and read from the document, never typed in. Screenshot:
//! `target/artifacts/history.png` (the one in docs/images/ is a copy of it).

mod web_support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use web_support::{Browser, ReplayAgent, agent_binary, artifacts, browser_tools, root, serial};

const FIXTURE: &str = "tests/fixtures/workloads/synthetic-train_history.json";

fn strings(b: &Browser, script: &str) -> Vec<String> {
    serde_json::from_value(b.js(script, json!([]))).unwrap_or_default()
}

/// The checks both tests make on the drawn history of `rank` (the document's).
fn check_history(b: &Browser, rank: &Value) {
    let h = &rank["memory_history"];
    let a = &h["attribution"];
    b.wait_for(
        "the history",
        "const h = document.querySelector('[data-testid=history]'); return h && h.dataset.status === 'recorded' && !!h.querySelector('[data-testid=history-breakdown]');",
    );
    assert!(b.testid("history-detail").starts_with("SYNTHETIC"));
    // The phases as bands, in order.
    let bands = strings(
        b,
        "return [...document.querySelectorAll('[data-testid=history-band]')].map(r => r.dataset.phase + ':' + (r.dataset.step ?? '-'));",
    );
    let expected: Vec<String> = a["bands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            format!(
                "{}:{}",
                x["phase"].as_str().unwrap(),
                x["step"].as_u64().map_or("-".into(), |s| s.to_string())
            )
        })
        .collect();
    assert_eq!(bands, expected);
    // One area per line that holds bytes somewhere on the timeline, reserved behind.
    let labels = [
        "weights",
        "master weights",
        "gradients",
        "optimizer state",
        "activations",
        "logits",
        "KV cache",
        "workspaces",
        "temporaries",
    ];
    let held: Vec<String> = labels
        .iter()
        .enumerate()
        .filter(|(k, _)| {
            a["timeline"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["by_line"][*k].as_u64().unwrap_or(0) > 0)
        })
        .map(|(_, l)| (*l).to_owned())
        .collect();
    let areas = strings(
        b,
        "return [...document.querySelectorAll('[data-testid=history-area]')].map(p => p.dataset.line);",
    );
    assert_eq!(areas, held);
    assert_eq!(
        b.js(
            "return document.querySelectorAll('[data-testid=history-reserved]').length",
            json!([])
        ),
        json!(1)
    );
    // The highest peak's breakdown: each line's bytes and the estimate's beside it.
    let top = a["peaks"]
        .as_array()
        .unwrap()
        .iter()
        .fold(None::<&Value>, |best, p| match best {
            Some(x) if x["allocated_bytes"].as_u64() >= p["allocated_bytes"].as_u64() => Some(x),
            _ => Some(p),
        })
        .unwrap();
    let table = b.js(
        "const t = document.querySelector('[data-testid=history-breakdown]'); return [t.dataset.phase, t.dataset.step ?? null];",
        json!([]),
    );
    let step = top["step"].as_u64().map(|s| s.to_string());
    assert_eq!(table, json!([top["phase"], step]));
    let rows: Vec<(String, String, Option<String>)> = serde_json::from_value(b.js(
        "return [...document.querySelectorAll('[data-testid=history-line]')].map(r => [r.dataset.line, r.dataset.bytes, r.dataset.estimate ?? null]);",
        json!([]),
    ))
    .unwrap();
    assert_eq!(rows.len(), 10, "nine lines and the slack: {rows:?}");
    let computed = |item: &str| {
        rank["comparison"]["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["item"] == item)
            .and_then(|l| l["computed_bytes"].as_u64())
            .map(|v| v.to_string())
    };
    for (i, line) in top["lines"].as_array().unwrap().iter().enumerate() {
        assert_eq!(rows[i].0, labels[i]);
        assert_eq!(
            rows[i].1,
            line["bytes"].as_u64().unwrap().to_string(),
            "{}",
            labels[i]
        );
        let item = match line["line"].as_str().unwrap() {
            "weights" => Some("weights"),
            "gradients" => Some("gradients"),
            "optimizer_state" => Some("optimizer_states"),
            "activations" => Some("activations"),
            "kv_cache" => Some("kv_cache"),
            _ => None,
        };
        assert_eq!(rows[i].2, item.and_then(computed), "{}", labels[i]);
    }
    assert_eq!(rows[9].1, top["slack_bytes"].as_u64().unwrap().to_string());
    // The largest allocations at that peak, largest first, with where they were made.
    let largest = strings(
        b,
        "return [...document.querySelectorAll('[data-testid=history-largest]')].map(l => l.textContent);",
    );
    let mut want: Vec<&Value> = top["largest"].as_array().unwrap().iter().collect();
    want.sort_by_key(|x| std::cmp::Reverse(x["bytes"].as_u64()));
    assert_eq!(largest.len(), want.len().min(12));
    assert!(
        largest[0].contains(want[0]["site"].as_str().unwrap()),
        "{largest:?}"
    );
    // The comparison's history column and the line named above its estimate.
    let above = rank["comparison"]["differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "line_above_estimate")
        .expect("a line above its estimate in the document");
    let item = above["item"].as_str().unwrap();
    let shown = b.js(
        "const d = document.querySelector('[data-testid=difference][data-item=\"' + arguments[0] + '\"]'); return d && d.textContent;",
        json!([item]),
    );
    assert!(
        shown
            .as_str()
            .unwrap_or_default()
            .contains(above["explanation"].as_str().unwrap()),
        "{shown}"
    );
    // The pages set no style attribute (the Content-Security-Policy forbids them).
    assert_eq!(
        b.js(
            "return document.querySelectorAll('[style]').length",
            json!([])
        ),
        json!(0)
    );
}

#[test]
fn a_replayed_history_is_drawn_and_attached_to_the_sheet_without_its_events() {
    let Some(driver) = browser_tools("a_replayed_history_is_drawn") else {
        return;
    };
    let _guard = serial();
    let fixture: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join(FIXTURE)).expect("fixture"))
            .expect("JSON");
    let agent = ReplayAgent::start(FIXTURE, &[]);
    let downloads = tempfile::tempdir().expect("download dir");
    let b = Browser::start_with_downloads(&driver, Some(downloads.path()));
    b.resize(1400, 1000);
    b.goto(&agent.url);
    check_history(&b, &fixture["ranks"][0]);
    b.js(
        "document.querySelector('[data-testid=history]').scrollIntoView()",
        json!([]),
    );
    b.screenshot(&artifacts().join("history.png"));

    // The sheet attaches the document without the events, the attribution kept.
    b.click("[data-testid=sheet-download]");
    let file = wait_download(downloads.path());
    let sheet: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("the sheet")).expect("JSON");
    let mut expected = fixture.clone();
    assert_eq!(
        gpumem_proto::workload::strip_history_events(&mut expected),
        1
    );
    let attached = &sheet["observed"]["workloads"][0]["raw"];
    assert_eq!(attached, &expected);
    assert!(attached["ranks"][0]["memory_history"]["attribution"]["peaks"].is_array());
    let size = serde_json::to_string(attached).unwrap().len();
    let whole = serde_json::to_string(&fixture).unwrap().len();
    assert!(
        size < whole,
        "the attached document ({size} B) is not smaller than the file ({whole} B)"
    );
}

#[test]
fn a_live_runs_history_is_drawn_when_the_run_ends() {
    let Some(driver) = browser_tools("a_live_runs_history_is_drawn") else {
        return;
    };
    let Some(python) = gpumem_e2e::torch_python("a_live_runs_history_is_drawn") else {
        return;
    };
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let output = dir.path().join("live.workload.json");
    let probe = root().join("agent/python");
    // The command waits until the page has paired, so the whole run reaches it live.
    let script = format!(
        "while [ ! -e '{}' ]; do sleep 0.1; done; exec '{}' '{}'",
        go.display(),
        python.display(),
        probe.join("tests/workloads/train_adamw.py").display()
    );
    let mut child = Command::new(agent_binary())
        .env("GPUMEM_RUN_SYNTHETIC_FOR_TESTS", "1")
        .env("PYTHONPATH", probe.join("tests/standin"))
        .env("GPUMEM_TEST_READER", "recording")
        .args([
            "run",
            "--serve",
            "--no-open",
            "--port",
            "0",
            "--memory-history",
        ])
        .arg("--output")
        .arg(&output)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gpumem-agent run --serve");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(at) = line
                .find("http://127.0.0.1:")
                .filter(|_| line.contains("#token="))
            {
                let _ = tx.send(line[at..].trim().to_owned());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("no pairing URL");
    let b = Browser::start(&driver);
    b.goto(&url);
    b.wait_for(
        "the running workload",
        "const w = document.querySelector('[data-testid=workload]'); return w && w.dataset.state === 'running';",
    );
    std::fs::write(&go, "").unwrap();
    b.wait_for_within(
        "the finished workload",
        "const w = document.querySelector('[data-testid=workload]'); return w && w.dataset.state !== 'running' && !!w.querySelector('[data-testid=history]');",
        Duration::from_secs(120),
    );
    let status = child.wait().expect("the agent ends");
    assert_eq!(status.code(), Some(0));
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&output).expect("--output")).unwrap();
    assert!(doc["ranks"][0]["memory_history"]["history"]["events"].is_array());
    assert_eq!(
        b.js(
            "return document.querySelector('[data-testid=workload]').dataset.source",
            json!([])
        ),
        json!("live")
    );
    check_history(&b, &doc["ranks"][0]);
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
