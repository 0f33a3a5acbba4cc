//! The page's model lookup in headless Chromium against the loopback Hub
//! stand-in ([`gpumem_e2e::hub_standin`]: resolve → 302 → CDN on a second port, Range
//! → 206, 401 for a gated repository, 404, one 429). The page is served by
//! `gpumem-agent serve` with `HF_ENDPOINT` set to the stand-in, so this also checks the
//! agent's rewrite of the page's Hub and Content-Security-Policy.
//!
//! Exact bytes are the fixtures' own (computed from the tensors they wrote) and the
//! agent's `estimate --model` answer for the same repository.

mod web_support;

use std::process::Command;
use std::time::Duration;

use gpumem_e2e::hub_standin::{
    GATED, GGUF_ONLY, MANY_GGUF, MANY_GGUF_FILES, ONE_GGUF, SHARDED, SHARDS, SINGLE, SPLIT_GGUF,
    SPLIT_GGUF_FILES, SPLIT_GGUF_SINGLE, StandIn, TEST_TOKEN, expected_bytes, expected_file_bytes,
    fixture_repos,
};
use serde_json::{Value, json};
use web_support::{Browser, ReplayAgent, agent_binary, browser_tools, bytes_of, root, serial};

const STATUS: &str =
    "return (document.querySelector('[data-testid=import-status]') || {}).textContent || ''";

/// Waits until the status line is final (not a progress line) and returns it.
fn final_status(browser: &Browser, what: &str) -> String {
    let script = format!(
        "const s = (function() {{ {STATUS} }})(); const go = document.querySelector('[data-testid=lookup-go]'); \
         return go && !go.disabled && (s.startsWith('Could not') || s.includes('round trips')) && s"
    );
    browser
        .wait_for_within(what, &script, Duration::from_secs(60))
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The bytes the imported-tensors box reports.
fn imported_bytes(browser: &Browser) -> Option<u64> {
    let text = browser.js(
        "const e = document.querySelector('[data-testid=imported]'); return e ? e.textContent : ''",
        json!([]),
    );
    // "… (N tensors, B B)": the figure before the last " B)".
    let text = text.as_str()?;
    let end = text.rfind(" B)")?;
    let start = text[..end].rfind(", ")? + 2;
    bytes_of(&text[start..end])
}

fn look_up(browser: &Browser, model: &str) {
    browser.js(
        "const i = document.querySelector('[data-testid=model]'); i.value = arguments[0]; \
         i.dispatchEvent(new Event('input', {bubbles: true}));",
        json!([model]),
    );
    browser.click("[data-testid=lookup-go]");
}

fn set_field(browser: &Browser, testid: &str, value: &str) {
    browser.js(
        "const i = document.querySelector('[data-testid=' + arguments[0] + ']'); i.value = arguments[1]; \
         i.dispatchEvent(new Event('input', {bubbles: true}));",
        json!([testid, value]),
    );
}

/// `gpumem-agent estimate --model REPO --json` against the stand-in: its weights.
fn agent_weights(endpoint: &str, repo: &str) -> u64 {
    agent_estimate(endpoint, repo, &[])["weights_bytes"]
        .as_u64()
        .expect("weights_bytes")
}

/// `gpumem-agent estimate --model REPO --json EXTRA…` against the stand-in.
fn agent_estimate(endpoint: &str, repo: &str, extra: &[&str]) -> Value {
    let cache = tempfile::tempdir().expect("tempdir");
    let out = Command::new(agent_binary())
        .args(["estimate", "--model", repo, "--json"])
        .args(extra)
        .env("HF_ENDPOINT", endpoint)
        .env("XDG_CACHE_HOME", cache.path())
        .env_remove("HF_TOKEN")
        .env("HF_HOME", cache.path())
        .current_dir(root())
        .output()
        .expect("run gpumem-agent estimate --model");
    assert!(
        out.status.success(),
        "estimate --model {repo}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

#[test]
fn web_looks_models_up_on_the_hub() {
    let Some(driver) = browser_tools("web_looks_models_up_on_the_hub") else {
        return;
    };
    let _guard = serial();
    // One 429 on a shard's first read: retried, not fatal.
    let hub = StandIn::start(
        fixture_repos(),
        Duration::ZERO,
        &[&format!("{SHARDED}/model-00007-of-{SHARDS:05}.safetensors")],
    );
    let endpoint = hub.endpoint();
    let agent = ReplayAgent::serve(&[], &[("HF_ENDPOINT", endpoint.as_str())]);
    let browser = Browser::start(&driver);

    // 1. A link naming a model looks it up on opening; the shape comes from its
    //    config.json, the weights from its header, exactly.
    browser.goto(&format!("{}/?model={SINGLE}", agent.origin));
    let status = final_status(&browser, "the lookup a link asked for");
    assert!(status.starts_with("Read "), "{status}");
    let single = expected_bytes(SINGLE);
    assert_eq!(imported_bytes(&browser), Some(single), "{status}");
    assert_eq!(agent_weights(&endpoint, SINGLE), single, "the agent agrees");
    let layers = browser.js(
        "return document.getElementById('layers') && document.getElementById('layers').value",
        json!([]),
    );
    assert!(
        layers.as_str().is_some_and(|l| !l.is_empty()),
        "the config's shape is in the fields: {layers}"
    );

    // 2. 61 shards: read concurrently, a handful of round trips, one 429 retried.
    hub.clear();
    look_up(&browser, SHARDED);
    let status = final_status(&browser, "the 61-shard lookup");
    let log = hub.log();
    let sharded = expected_bytes(SHARDED);
    assert_eq!(imported_bytes(&browser), Some(sharded), "{status}");
    assert!(status.contains(&format!("in {SHARDS} files")), "{status}");
    assert_eq!(
        agent_weights(&endpoint, SHARDED),
        sharded,
        "the agent agrees"
    );
    let gets = log.iter().filter(|l| l.method == "GET").count();
    let round_trips: u32 = status
        .split(" round trips")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("round trips in the status");
    println!(
        "web_lookup: {SHARDED}: {gets} GETs received by the stand-in (redirects included), {round_trips} round trips: {status}"
    );
    assert!(round_trips <= 4, "{status}");
    assert!(
        log.iter().any(|l| l.status == 429),
        "the stand-in's 429 was sent"
    );
    assert!(
        log.iter()
            .filter(|l| l.server == "cdn" && l.method == "GET")
            .all(|l| l.range.is_some_and(|(a, b)| b - a < 1 << 20)),
        "only header ranges were read from the CDN"
    );

    // 3. Gated: refused with words without a token; read with one, which goes to the
    //    Hub only — never to the CDN, the link or storage.
    hub.clear();
    look_up(&browser, GATED);
    let status = final_status(&browser, "the gated lookup without a token");
    assert!(status.contains("gated or private"), "{status}");
    set_field(&browser, "token", TEST_TOKEN);
    look_up(&browser, GATED);
    let status = final_status(&browser, "the gated lookup with a token");
    assert!(status.starts_with("Read "), "{status}");
    assert_eq!(imported_bytes(&browser), Some(expected_bytes(GATED)));
    let log = hub.log();
    assert!(
        log.iter()
            .any(|l| l.server == "hub" && l.auth.as_deref() == Some("Bearer hf_test_token")),
        "the token went to the Hub"
    );
    assert!(
        log.iter().all(|l| l.server != "cdn" || l.auth.is_none()),
        "the token never reaches the CDN"
    );
    let leaked = browser.js(
        "return location.href.includes(arguments[0]) || JSON.stringify(localStorage).includes(arguments[0])",
        json!([TEST_TOKEN]),
    );
    assert_eq!(leaked, json!(false), "the token is in memory only");

    // Search as you type: the Hub's model search fills the field's suggestions, and
    // the token in memory does not go with it.
    hub.clear();
    set_field(&browser, "model", "");
    browser.type_into("[data-testid=model]", "61-sh");
    let offered = browser.wait_for(
        "suggestions from the model search",
        "const o = [...document.querySelectorAll('#model-suggestions option')].map(o => o.value); return o.length > 0 && o",
    );
    assert_eq!(offered, json!([SHARDED]), "suggestions");
    assert!(
        hub.log()
            .iter()
            .all(|l| !l.path.starts_with("/api/models?") || l.auth.is_none()),
        "a search sends no token"
    );

    // 4. Unknown repository: "not found", said at the top of the answer; nothing is
    //    lost — the previous model's id, weights and figures stay, named as such.
    let field = |b: &Browser| {
        b.js(
            "return document.querySelector('[data-testid=model]').value",
            json!([]),
        )
    };
    // The last lookup that succeeded was the gated one (the field now holds the
    // search's typing).
    let (model_before, bytes_before, total_before) = (
        json!(GATED),
        imported_bytes(&browser),
        browser.testid("total-bytes"),
    );
    assert!(bytes_before.is_some(), "a model is imported before");
    look_up(&browser, "tiny-org/no-such-model");
    let status = final_status(&browser, "an unknown repository");
    assert!(status.contains("not found"), "{status}");
    let failed = browser.wait_for(
        "the failure at the top of the answer",
        "const e = document.querySelector('[data-testid=lookup-failed]'); return e && e.textContent;",
    );
    let failed = failed.as_str().unwrap_or_default();
    assert!(
        failed.contains("tiny-org/no-such-model") && failed.contains("not found"),
        "{failed}"
    );
    let before = model_before.as_str().unwrap_or_default();
    assert!(
        failed.contains(&format!("still those of {before}")),
        "{failed}"
    );
    assert_eq!(
        field(&browser),
        model_before,
        "the field goes back to the model shown"
    );
    assert_eq!(imported_bytes(&browser), bytes_before, "the import stays");
    let verdict = browser.testid("answer-verdict");
    assert!(!verdict.contains("NO ANSWER"), "{verdict}");
    assert_eq!(
        browser.testid("total-bytes"),
        total_before,
        "the figures stay"
    );

    // 5. GGUF: one file is found by itself; of three, the page names them and reads
    //    the one asked for.
    look_up(&browser, ONE_GGUF);
    let status = final_status(&browser, "the one-GGUF lookup");
    assert_eq!(
        imported_bytes(&browser),
        Some(expected_bytes(ONE_GGUF)),
        "{status}"
    );
    look_up(&browser, MANY_GGUF);
    let status = final_status(&browser, "the three-GGUF lookup");
    assert!(
        MANY_GGUF_FILES.iter().all(|f| status.contains(f)),
        "the choices are named: {status}"
    );
    set_field(&browser, "model-file", MANY_GGUF_FILES[2]);
    look_up(&browser, MANY_GGUF);
    let status = final_status(&browser, "the chosen GGUF file");
    assert_eq!(
        imported_bytes(&browser),
        Some(expected_file_bytes(MANY_GGUF, MANY_GGUF_FILES[2])),
        "{status}"
    );

    // 5b. A listing in four pages (followed through the exposed Link headers) with a
    //     split GGUF model in a folder: the set is one choice, beside the single file
    //     only the last page lists; naming its second file reads all three, summed.
    set_field(&browser, "model-file", "");
    look_up(&browser, SPLIT_GGUF);
    let status = final_status(&browser, "the paged split-GGUF lookup");
    assert!(
        status.contains(&format!("{} (3 split files)", SPLIT_GGUF_FILES[0]))
            && status.contains(SPLIT_GGUF_SINGLE)
            && !status.contains(SPLIT_GGUF_FILES[1]),
        "the split set is one choice: {status}"
    );
    set_field(&browser, "model-file", SPLIT_GGUF_FILES[1]);
    look_up(&browser, SPLIT_GGUF);
    let status = final_status(&browser, "the split GGUF set");
    assert_eq!(
        imported_bytes(&browser),
        Some(expected_file_bytes(SPLIT_GGUF, SPLIT_GGUF_FILES[1])),
        "{status}"
    );
    println!(
        "web_lookup: {SPLIT_GGUF} by {}: {status}",
        SPLIT_GGUF_FILES[1]
    );

    // 5c. A GGUF repository without a config.json: the header's metadata gives the KV
    //     cache's shape (as `estimate --model` reads it), so the page answers alone.
    set_field(&browser, "model-file", "");
    let by_id = |id: &str| {
        browser
            .js(
                "const e = document.getElementById(arguments[0]); return e ? e.value : null;",
                json!([id]),
            )
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    browser.wait_for(
        "the context field",
        "const i = document.getElementById('context'); if (!i) return false; i.value = '1000'; \
         i.dispatchEvent(new Event('input', {bubbles: true})); return true;",
    );
    look_up(&browser, GGUF_ONLY);
    let status = final_status(&browser, "the GGUF lookup without a config");
    assert!(status.contains("GGUF header"), "{status}");
    assert_eq!(
        imported_bytes(&browser),
        Some(expected_bytes(GGUF_ONLY)),
        "{status}"
    );
    assert_eq!(
        (by_id("layers"), by_id("kv-heads"), by_id("head-dim")),
        ("2".to_string(), "2".to_string(), "64".to_string())
    );
    let sequences = by_id("sequences");
    let sequences = if sequences.is_empty() {
        "1".to_string()
    } else {
        sequences
    };
    let mut extra = vec!["--context", "1000", "--sequences", &sequences];
    let (generate, kv_dtype) = (by_id("generate"), by_id("kv-dtype"));
    for (flag, v) in [("--generate", &generate), ("--kv-dtype", &kv_dtype)] {
        if !v.is_empty() {
            extra.extend([flag, v.as_str()]);
        }
    }
    let want = agent_estimate(&endpoint, GGUF_ONLY, &extra)["kv_cache_bytes"]
        .as_u64()
        .expect("kv_cache_bytes");
    assert!(want > 0);
    browser.wait_for(
        "the page's KV figure from the GGUF header",
        &format!(
            "const e = document.querySelector('[data-testid=kv-cache-bytes]'); return e && e.textContent.replace(/\\D/g, '') === '{want}';"
        ),
    );

    // 6. A mirror without the listing API: the shards come from the index, their sizes
    //    from Content-Range, the bytes the same.
    hub.serve_listing(false);
    set_field(&browser, "model-file", "");
    look_up(&browser, SHARDED);
    let status = final_status(&browser, "the 61-shard lookup without a listing");
    assert_eq!(imported_bytes(&browser), Some(sharded), "{status}");
    look_up(&browser, SINGLE);
    let status = final_status(&browser, "the single-file lookup without a listing");
    assert_eq!(imported_bytes(&browser), Some(single), "{status}");
    hub.serve_listing(true);
    drop(browser);
    drop(agent);

    // 7. Over a slow link (every answer 100 ms late), the 61-shard lookup costs a few
    //    round trips of latency, not 61 × 2 (reported; the browser's six connections
    //    per host over the stand-in's HTTP/1.1 queue the reads in waves — the Hub's
    //    HTTP/2 does not).
    let slow = StandIn::start(fixture_repos(), Duration::from_millis(100), &[]);
    let slow_endpoint = slow.endpoint();
    let agent = ReplayAgent::serve(&[], &[("HF_ENDPOINT", slow_endpoint.as_str())]);
    let browser = Browser::start(&driver);
    browser.goto(&format!("{}/", agent.origin));
    let started = std::time::Instant::now();
    look_up(&browser, SHARDED);
    let status = final_status(&browser, "the 61-shard lookup over a 100 ms link");
    let took = started.elapsed();
    assert_eq!(imported_bytes(&browser), Some(sharded), "{status}");
    println!(
        "web_lookup: {SHARDED} with 100 ms per answer: {} ms in the browser ({status})",
        took.as_millis()
    );
    assert!(
        took < Duration::from_secs(20),
        "61 shards × 2 sequential reads would take over 12 s: {took:?}"
    );
}

/// A Hub that never answers in time: the lookup can be cancelled, and without a cancel
/// it ends by itself ("timed out") instead of leaving "Looking up…" and a disabled
/// button for good.
#[test]
fn web_lookup_can_be_cancelled_and_times_out() {
    let Some(driver) = browser_tools("web_lookup_can_be_cancelled_and_times_out") else {
        return;
    };
    let _guard = serial();
    // Every answer waits 45 s: longer than a request may take (30 s).
    let hub = StandIn::start(fixture_repos(), Duration::from_secs(45), &[]);
    let endpoint = hub.endpoint();
    let agent = ReplayAgent::serve(&[], &[("HF_ENDPOINT", endpoint.as_str())]);
    let browser = Browser::start(&driver);
    browser.goto(&format!("{}/", agent.origin));
    browser.wait_for(
        "the dimensioner",
        "return !!document.querySelector('[data-testid=lookup-go]');",
    );
    assert_eq!(
        browser.js(
            "return document.querySelector('[data-testid=lookup-cancel]').hidden",
            json!([])
        ),
        json!(true),
        "no cancel without a lookup"
    );

    // 1. Cancelled while the Hub is silent.
    look_up(&browser, SINGLE);
    browser.wait_for(
        "the lookup to start",
        "const c = document.querySelector('[data-testid=lookup-cancel]'); return c && !c.hidden;",
    );
    let t0 = std::time::Instant::now();
    browser.click("[data-testid=lookup-cancel]");
    let status = final_status(&browser, "the cancelled lookup");
    assert!(status.contains("cancelled"), "{status}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());

    // 2. Left alone: it ends by itself with words saying it timed out.
    let t0 = std::time::Instant::now();
    look_up(&browser, SINGLE);
    let status = final_status(&browser, "the lookup of a silent Hub");
    let took = t0.elapsed();
    assert!(status.contains("timed out"), "{status}");
    assert!(
        took >= Duration::from_secs(29) && took < Duration::from_secs(45),
        "{took:?}"
    );
    assert_eq!(
        browser.js(
            "return document.querySelector('[data-testid=lookup-go]').disabled",
            json!([])
        ),
        json!(false)
    );
}

#[test]
fn web_offers_the_bundled_models_and_reads_one_the_hub_cannot_answer_for() {
    let Some(driver) =
        browser_tools("web_offers_the_bundled_models_and_reads_one_the_hub_cannot_answer_for")
    else {
        return;
    };
    let _guard = serial();
    // A Hub that refuses every connection: a loopback port bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let agent = ReplayAgent::serve(&[], &[("HF_ENDPOINT", endpoint.as_str())]);
    let browser = Browser::start(&driver);
    browser.goto(&format!("{}/", agent.origin));

    // The search offers the bundled ids although the Hub's search fails.
    browser.type_into("[data-testid=model]", "qwen2.5-7b");
    let offered = browser.wait_for(
        "suggestions from the bundled set",
        "const o = [...document.querySelectorAll('#model-suggestions option')].map(o => o.value); return o.length > 0 && o",
    );
    let offered: Vec<&str> = offered
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(offered.contains(&"Qwen/Qwen2.5-7B"), "{offered:?}");

    // The lookup reads the bundled config.json, says so, and the page's figures are
    // the agent's for the same bundled model.
    look_up(&browser, "Qwen/Qwen2.5-7B");
    let status = final_status(&browser, "a bundled model with the Hub unreachable");
    assert!(
        status.starts_with("Read Qwen/Qwen2.5-7B (the bundled config.json, read "),
        "{status}"
    );
    assert!(status.contains("could not be reached"), "{status}");
    let layers = browser.js("return document.getElementById('layers').value", json!([]));
    assert_eq!(
        layers,
        json!("28"),
        "Qwen2.5-7B's 28 layers are in the fields"
    );
    let weights = bytes_of(&browser.testid("weights-bytes")).expect("weights on the page");
    assert_eq!(
        weights,
        agent_weights(&endpoint, "Qwen/Qwen2.5-7B"),
        "the page and the agent count the bundled model alike"
    );
    assert_eq!(
        imported_bytes(&browser),
        None,
        "no tensors: the config alone"
    );
}
