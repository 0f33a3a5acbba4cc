//! The page's hardening in headless Chromium, against the page as `gpumem-agent serve` serves it
//! (so both the meta tag and the HTTP header policy apply):
//!
//! - the Content-Security-Policy has no `'unsafe-inline'` for scripts, yet both pages
//!   and the `#token=` pairing redirect boot, and an injected inline handler or script
//!   does not run (the browser reports the violation);
//! - a 60 MB sheet is refused with words, before it is read;
//! - a 20 000-phase sheet shows a bounded view, quickly, saying how much it left out;
//! - counters at u64::MAX are drawn on the chart, not wrapped.

mod web_support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpumem_proto::results::{DeviceLevel, PhaseName, PoolCounters, Status};
use gpumem_proto::sheet::{ObservationSource, ObservedPhase, ObservedRun, SheetImport};
use gpumem_proto::wire::MeasureRequest;
use serde_json::{Value, json};
use web_support::{Browser, ReplayAgent, browser_tools, serial};

const FIXTURE: &str = "tests/fixtures/measurements/synthetic-seed-dims.json";

/// A headless browser, or `None` after the shared skip rule has run: under the test
/// script a missing Chromium or chromedriver fails the test instead of passing it.
fn browser(test: &str) -> Option<Browser> {
    browser_tools(test).map(|driver| Browser::start(&driver))
}

/// Counts CSP violations from now on (in `window.__violations`).
const COUNT_VIOLATIONS: &str = "window.__violations = 0;
     document.addEventListener('securitypolicyviolation', () => { window.__violations += 1; });";

#[test]
fn csp_without_unsafe_inline_boots_both_pages_and_the_pairing_redirect() {
    let _guard = serial();
    let Some(b) = browser("csp_without_unsafe_inline_boots_both_pages_and_the_pairing_redirect")
    else {
        return;
    };
    let agent = ReplayAgent::start(FIXTURE, &[]);

    // The pairing URL: index.html's inline forwarder (allowed by its hash) sends the
    // token on to the agent page, whose inline bootstrap (hash) starts the wasm.
    b.goto(&agent.url);
    b.wait_for(
        "the agent page to pair through the #token= redirect",
        "const e = document.querySelector('[data-testid=pair-state]'); return e && e.dataset.state === 'replay';",
    );
    assert_eq!(
        b.js("return location.pathname", json!([])),
        json!("/agent/")
    );

    // The dimensioner boots too.
    b.goto(&format!("{}/", agent.origin));
    b.wait_for(
        "the dimensioner's headline figures",
        "const e = document.querySelector('[data-testid=\"total-bytes\"]'); return e && e.textContent;",
    );

    for page in ["/", "/agent/"] {
        b.goto(&format!("{}{page}", agent.origin));
        let policy = b
            .js(
                "const m = document.querySelector('meta[http-equiv=\"Content-Security-Policy\"]'); return m ? m.content : null;",
                json!([]),
            )
            .as_str()
            .unwrap_or_else(|| panic!("{page}: no CSP meta tag"))
            .to_owned();
        let script_src = policy
            .split(';')
            .map(str::trim)
            .find(|d| d.starts_with("script-src"))
            .unwrap_or_else(|| panic!("{page}: no script-src in {policy}"));
        assert!(!script_src.contains("unsafe-inline"), "{page}: {policy}");
        assert!(script_src.contains("'sha256-"), "{page}: {policy}");
        assert!(policy.contains("object-src 'none'"), "{page}: {policy}");
        assert!(policy.contains("base-uri 'none'"), "{page}: {policy}");

        // An HTML sink, if one ever appeared: its inline handler and script must not run.
        b.js(COUNT_VIOLATIONS, json!([]));
        b.js(
            "document.body.insertAdjacentHTML('beforeend', '<img src=\"data:,x\" onerror=\"window.__pwned = 1\" onload=\"window.__pwned = 1\">');
             const s = document.createElement('script'); s.textContent = 'window.__pwned2 = 1'; document.body.appendChild(s);",
            json!([]),
        );
        b.wait_for(
            "the browser to report the blocked inline code",
            "return window.__violations >= 2;",
        );
        assert_eq!(
            b.js(
                "return [window.__pwned === undefined, window.__pwned2 === undefined]",
                json!([])
            ),
            json!([true, true]),
            "{page}: injected inline code ran"
        );
    }
}

/// The pages set no inline style (swatches and meters are SVG shapes), so the
/// policy's style-src has no `'unsafe-inline'`: an injected `style` attribute is
/// refused, while the chart's swatches and meters keep their colours and widths.
#[test]
fn no_inline_styles_and_style_src_without_unsafe_inline() {
    let _guard = serial();
    let Some(b) = browser("no_inline_styles_and_style_src_without_unsafe_inline") else {
        return;
    };
    let agent = ReplayAgent::start(FIXTURE, &[]);
    b.goto(&format!("{}/", agent.origin));
    b.wait_for(
        "the legend's swatches",
        "return document.querySelectorAll('.legend .swatch').length > 0;",
    );
    let policy = b
        .js(
            "const m = document.querySelector('meta[http-equiv=\"Content-Security-Policy\"]'); return m ? m.content : '';",
            json!([]),
        )
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let style_src = policy
        .split(';')
        .map(str::trim)
        .find(|d| d.starts_with("style-src"))
        .unwrap_or_else(|| panic!("no style-src in {policy}"));
    assert!(!style_src.contains("unsafe-inline"), "{policy}");
    // The swatches are coloured (an SVG fill attribute: no style for the policy to refuse).
    let colours = b.js(
        "return [...document.querySelectorAll('.legend .swatch rect')].map(e => getComputedStyle(e).fill);",
        json!([]),
    );
    let colours = colours.as_array().expect("colours");
    assert!(!colours.is_empty());
    for c in colours {
        let c = c.as_str().unwrap_or_default();
        assert!(c.starts_with("rgb(") && c != "rgba(0, 0, 0, 0)", "{c}");
    }
    // An injected inline style is refused and reported.
    b.js(COUNT_VIOLATIONS, json!([]));
    b.js(
        "document.body.insertAdjacentHTML('beforeend', '<p id=\"injected\" style=\"color: rgb(1, 2, 3)\">x</p>');",
        json!([]),
    );
    b.wait_for(
        "the browser to report the blocked inline style",
        "return window.__violations >= 1;",
    );
    assert_ne!(
        b.js(
            "return getComputedStyle(document.getElementById('injected')).color;",
            json!([])
        ),
        json!("rgb(1, 2, 3)"),
        "an injected inline style applied"
    );
}

/// A phase with every counter at `bytes`.
fn phase(i: usize, bytes: u64) -> ObservedPhase {
    let order = [
        PhaseName::ModelLoad,
        PhaseName::Inputs,
        PhaseName::ColdForward,
        PhaseName::Warmup,
        PhaseName::WarmForward,
    ];
    let name = order[i % order.len()];
    let all = Some(bytes);
    ObservedPhase {
        device: "cuda:0".into(),
        phase: name,
        repeat: (name == PhaseName::WarmForward).then_some(u32::try_from(i).unwrap_or(u32::MAX)),
        status: Status::Ok,
        error: None,
        pool: PoolCounters {
            allocated_start_bytes: all,
            reserved_start_bytes: all,
            allocated_peak_bytes: all,
            reserved_peak_bytes: all,
            allocated_end_bytes: all,
            reserved_end_bytes: all,
        },
        device_level: DeviceLevel {
            used_start_bytes: all,
            used_end_bytes: all,
            process_used_start_bytes: all,
            process_used_end_bytes: all,
            ..DeviceLevel::default()
        },
    }
}

/// A sheet the page imports, with one replayed run of `phases`.
fn sheet_with(phases: Vec<ObservedPhase>, request: MeasureRequest) -> String {
    let run = ObservedRun {
        source: ObservationSource::Replay,
        workload: None,
        request,
        phases,
        ok: true,
        raw: Some(json!({"note": "synthetic, for the page's bounds"})),
        failure: None,
    };
    let sheet = json!({
        "schema": "gpumem.sheet/v1",
        "identity": {"model": "hostile", "revision": null, "input_set": null, "seed": null},
        "environment": null,
        "computed": {"estimates": [{"workload": "typical", "input": {"parameters": "7000000000", "bits": "16"}}]},
        "observed": {"runs": [serde_json::to_value(run).expect("run to JSON")]},
        "decision": null,
        "provenance": {"agent_version": "0.1.0", "observations": "replay"},
    });
    let text = sheet.to_string();
    SheetImport::from_json(&text).expect("the test sheet is one the page imports");
    text
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).expect("create test file");
    f.write_all(bytes).expect("write test file");
    path
}

fn status_text(b: &Browser) -> String {
    b.js(
        "const e = document.querySelector('[data-testid=sheet-status]'); return e ? e.textContent : '';",
        json!([]),
    )
    .as_str()
    .unwrap_or_default()
    .to_owned()
}

#[test]
fn hostile_sheets_are_refused_or_shown_bounded() {
    let _guard = serial();
    let Some(b) = browser("hostile_sheets_are_refused_or_shown_bounded") else {
        return;
    };
    let agent = ReplayAgent::start(FIXTURE, &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    b.goto(&format!("{}/agent/", agent.origin));
    b.wait_for(
        "the sheet panel",
        "return !!document.querySelector('[data-testid=sheet-import]');",
    );

    // 60 MB: refused with words, before it is read.
    let mut big = sheet_with(vec![phase(0, 1)], MeasureRequest::SEED_EXAMPLE).into_bytes();
    big.pop(); // the closing brace: pad inside the object, so the file stays JSON
    big.extend_from_slice(b",\"padding\":\"");
    big.resize(60_000_000 - 2, b'x');
    big.extend_from_slice(b"\"}");
    let big = write(dir.path(), "huge-sheet.json", &big);
    let t0 = Instant::now();
    b.upload("[data-testid=sheet-import]", &[&big]);
    b.wait_for_within(
        "the page's answer to the 60 MB sheet",
        "const e = document.querySelector('[data-testid=sheet-status]'); return e && e.textContent.includes('huge-sheet.json');",
        Duration::from_secs(60),
    );
    let answered_in = t0.elapsed();
    let words = status_text(&b);
    println!("60 MB sheet answered in {answered_in:?}: {words}");
    // Each case is checked, then all are reported, so one run measures every case.
    let mut failures = Vec::new();
    if !(words.contains("Not imported")
        && words.contains("16 MiB")
        && words.contains("60 000 000")
        && words.contains("Nothing was read"))
    {
        failures.push(format!(
            "the 60 MB refusal does not say what and why: {words}"
        ));
    }

    // 20 000 phases: a bounded view, quickly.
    let many: Vec<ObservedPhase> = (0..20_000).map(|i| phase(i, 1 << 30)).collect();
    let many = sheet_with(many, MeasureRequest::SEED_EXAMPLE);
    assert!(
        many.len() < 16 << 20,
        "{} bytes: over the import cap",
        many.len()
    );
    let many = write(dir.path(), "many-phases.json", many.as_bytes());
    let t0 = Instant::now();
    b.upload("[data-testid=sheet-import]", &[&many]);
    b.wait_for_within(
        "the 20 000-phase sheet to be shown",
        "const e = document.querySelector('[data-testid=sheet-status]'); return e && e.textContent.includes('many-phases.json') && document.querySelectorAll('[data-testid=run] [data-testid=phase-row]').length > 1;",
        Duration::from_secs(60),
    );
    let shown_in = t0.elapsed();
    let (rows, note): (u64, String) = serde_json::from_value(b.js(
        "const run = document.querySelector('[data-testid=run]');
         const note = run.querySelector('[data-testid=more-note]');
         return [run.querySelectorAll('[data-testid=phase-row]').length, note ? note.textContent : ''];",
        json!([]),
    ))
    .expect("rows and note");
    println!("20 000-phase sheet shown in {shown_in:?}: {rows} rows, {note:?}");
    if !(rows > 0 && rows <= 500) {
        failures.push(format!("not a bounded view: {rows} rows"));
    }
    let hidden: u64 = note
        .chars()
        .filter(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or(0);
    if rows + hidden != 20_000 {
        failures.push(format!("it does not say how many it left out: {note:?}"));
    }
    if shown_in >= Duration::from_secs(3) {
        failures.push(format!("20 000 phases took {shown_in:?} to show"));
    }

    // u64::MAX counters and dimensions: drawn on the chart, no wrap, no panic.
    let max = MeasureRequest {
        batch: u64::MAX,
        context: u64::MAX,
        width: u64::MAX,
        layers: u64::MAX,
        ..MeasureRequest::SEED_EXAMPLE
    };
    let huge = write(
        dir.path(),
        "max-counters.json",
        sheet_with(
            vec![phase(0, u64::MAX), phase(1, 0), phase(4, u64::MAX)],
            max,
        )
        .as_bytes(),
    );
    b.upload("[data-testid=sheet-import]", &[&huge]);
    b.wait_for(
        "the u64::MAX sheet to be shown",
        "const e = document.querySelector('[data-testid=sheet-status]'); return e && e.textContent.includes('max-counters.json') && !!document.querySelector('[data-testid=timeline]');",
    );
    let points: Vec<(f64, f64)> = serde_json::from_value(b.js(
        "const run = document.querySelector('[data-testid=run]');
         return [...run.querySelectorAll('[data-testid=timeline] polyline')]
           .flatMap(p => p.getAttribute('points').trim().split(/\\s+/).map(xy => xy.split(',').map(Number)));",
        json!([]),
    ))
    .expect("chart points");
    let (w, h): (f64, f64) = serde_json::from_value(b.js(
        "const v = document.querySelector('[data-testid=run] [data-testid=timeline] svg').viewBox.baseVal; return [v.width, v.height];",
        json!([]),
    ))
    .expect("viewBox");
    assert!(!points.is_empty(), "the counters are drawn");
    let off: Vec<&(f64, f64)> = points
        .iter()
        .filter(|(x, y)| !(*x >= 0.0 && *x <= w && *y >= 0.0 && *y <= h))
        .collect();
    println!(
        "u64::MAX counters: {} points, {} off the {w}×{h} chart",
        points.len(),
        off.len()
    );
    if !off.is_empty() {
        failures.push(format!("points off the chart (a wrapped counter): {off:?}"));
    }
    // u64::MAX is the top of its panel, 0 its bottom: the two differ.
    let ys: Vec<f64> = points.iter().map(|p| p.1).collect();
    if ys.iter().cloned().fold(f64::MIN, f64::max) <= ys.iter().cloned().fold(f64::MAX, f64::min) {
        failures.push(format!(
            "u64::MAX and 0 are drawn at one height: {points:?}"
        ));
    }
    let text: String = b
        .js(
            "return document.querySelector('[data-testid=run] h3').textContent;",
            json!([]),
        )
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(text.contains("18446744073709551615"), "{text}");
    // The sheet summary (and its maximum load, from saturating products) still renders.
    let summary: Value = b.js(
        "const e = document.querySelector('[data-testid=sheet-summary], [data-testid=sheet-blocked]'); return e ? e.textContent : null;",
        json!([]),
    );
    let summary = summary
        .as_str()
        .unwrap_or_else(|| panic!("no sheet summary: {summary}"));
    if summary.contains("Maximum load tested") && !summary.contains("batch 18446744073709551615") {
        failures.push(format!("the maximum load misstates the run: {summary}"));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
