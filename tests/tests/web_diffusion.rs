//! A diffusers pipeline on the page, in headless Chromium: its files read from the
//! loopback Hub stand-in ([`gpumem_e2e::hub_standin`], serving the core's fixture
//! pipelines, SDXL and FLUX.1-dev, as their repositories), the answer from the lazily
//! loaded diffusion module. The page is served by `gpumem-agent serve` with
//! `HF_ENDPOINT` set to the stand-in; the figures must equal
//! `gpumem-agent estimate --diffusers DIR --json` for the same folder and flags, and
//! the lines its text answer.

mod web_support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use gpumem_e2e::hub_standin::{StandIn, TEST_TOKEN, pipeline_repo};
use serde_json::{Value, json};
use web_support::{Browser, ReplayAgent, agent_binary, browser_tools, root, serial};

const SDXL: &str = "stabilityai/stable-diffusion-xl-base-1.0";
const FLUX: &str = "black-forest-labs/FLUX.1-dev";

fn fixture(name: &str) -> PathBuf {
    root()
        .join("crates/gpumem-core/tests/diffusion/pipelines")
        .join(name)
}

/// `gpumem-agent estimate --diffusers DIR ARGS…`: its stdout (JSON with `--json`).
fn agent(dir: &PathBuf, args: &[&str]) -> String {
    let out = Command::new(agent_binary())
        .arg("estimate")
        .arg("--diffusers")
        .arg(dir)
        .args(args)
        .current_dir(root())
        .output()
        .expect("run gpumem-agent estimate --diffusers");
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn set(browser: &Browser, testid: &str, value: &str) {
    browser.js(
        "const i = document.querySelector('[data-testid=' + arguments[0] + ']'); i.value = arguments[1]; \
         i.dispatchEvent(new Event(i.tagName === 'SELECT' ? 'change' : 'input', {bubbles: true}));",
        json!([testid, value]),
    );
}

/// A pipeline folder's files as `[path in the folder named NAME, text]` pairs.
fn folder_files(dir: &PathBuf, name: &str) -> Value {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the fixture") {
        let entry = entry.expect("an entry");
        let path = entry.path();
        let files: Vec<PathBuf> = if path.is_dir() {
            vec![path.join("config.json")]
        } else {
            vec![path]
        };
        for f in files.into_iter().filter(|f| f.exists()) {
            let rel = f.strip_prefix(dir).expect("under the folder");
            let text = std::fs::read_to_string(&f).expect("UTF-8");
            out.push(json!([format!("{name}/{}", rel.display()), text]));
        }
    }
    Value::Array(out)
}

/// Waits until the pipeline section's status says `what` (or that the read failed).
fn wait_for_status(browser: &Browser, what: &str) {
    let s = browser.wait_for(
        what,
        &format!(
            "const s = document.querySelector('[data-testid=diffusion-status]').textContent; \
             return (s.startsWith('Could not') || s.includes({})) && s",
            json!(what)
        ),
    );
    assert!(s.as_str().unwrap_or_default().contains(what), "{s}");
}

/// The page's answer once shown: the verdict's key and card, the figures, the text.
fn page_answer(browser: &Browser, what: &str) -> (String, String, BTreeMap<String, u64>, String) {
    browser.wait_for_within(
        what,
        "const s = document.querySelector('[data-testid=diffusion-status]').textContent; \
         if (s.startsWith('Could not')) return s; \
         return document.querySelector('[data-testid=diffusion-verdict]') !== null \
           || document.querySelector('[data-testid=diffusion-refused]') !== null",
        Duration::from_secs(60),
    );
    let refused = browser.testid("diffusion-refused");
    assert!(refused.is_empty(), "{what}: refused: {refused}");
    let status = browser.testid("diffusion-status");
    assert!(!status.starts_with("Could not"), "{what}: {status}");
    let v = browser.js(
        "const v = document.querySelector('[data-testid=diffusion-verdict]'); \
         const rows = [...document.querySelectorAll('[data-testid=diffusion-figures] tr[data-figure]')] \
           .map(r => [r.dataset.figure, r.dataset.bytes]); \
         return [v.dataset.verdict, v.dataset.card, rows, \
           v.textContent + '\\n' + document.querySelector('[data-testid=diffusion-lines]').textContent];",
        json!([]),
    );
    let figures = v[2]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            let b = r[1].as_str().and_then(|b| b.parse().ok()).expect("bytes");
            (r[0].as_str().expect("name").to_string(), b)
        })
        .collect();
    let s = |i: usize| v[i].as_str().unwrap_or_default().to_string();
    (s(0), s(1), figures, s(3))
}

/// Every figure the page shows is the command's, and every figure the command gives
/// in bytes is on the page; the verdict and the card are the command's; the lines are
/// its text answer's (the host memory's line unwrapped: compared word by word).
fn check(browser: &Browser, what: &str, dir: &PathBuf, args: &[&str]) {
    let (verdict, card, figures, text) = page_answer(browser, what);
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let cli: Value = serde_json::from_str(&agent(dir, &with_json)).expect("--json");
    assert_eq!(
        Some(verdict.as_str()),
        cli["verdict"].as_str(),
        "{what}: verdict"
    );
    assert_eq!(Some(card.as_str()), cli["card"].as_str(), "{what}: card");
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for key in [
        "need_bytes",
        "device_bytes",
        "reserve_bytes",
        "host_bytes",
        "denoiser_activations_bytes",
        "eager_scores_bytes",
        "layerwise_upcast_bytes",
        "int8_matmul_bytes",
        "vae_decode_bytes",
        "vae_upcast_bytes",
        "text_encode_bytes",
    ] {
        want.insert(key.into(), cli[key].as_u64().expect(key));
    }
    // A mode the settings do not combine with is null in the JSON and absent here.
    for mode in ["none", "model", "sequential", "group"] {
        if let Some(b) = cli["by_offload_mode_bytes"][mode].as_u64() {
            want.insert(format!("by_offload_mode.{mode}"), b);
        }
    }
    if let Some(b) = cli["group_offload"]["resident_bytes"].as_u64() {
        want.insert("group_offload.resident_bytes".into(), b);
    }
    for c in cli["components"].as_array().expect("components") {
        want.insert(
            format!("component.{}", c["name"].as_str().expect("name")),
            c["bytes"].as_u64().expect("bytes"),
        );
    }
    let mut shown = figures.clone();
    shown.remove("capacity_bytes");
    assert_eq!(shown, want, "{what}: the page's figures are the command's");
    assert!(want["need_bytes"] > 4 << 30, "{what}: {want:?}");
    let words = |t: &str| t.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        words(&text),
        words(&agent(dir, args)),
        "{what}: the page's lines are the command's"
    );
    // Nothing contradicts the verdict: one verdict line.
    let verdicts = text
        .lines()
        .filter(|l| {
            l.contains("FITS on") || l.contains("DOES NOT FIT on") || l.contains("TIGHT on")
        })
        .count();
    assert_eq!(verdicts, 1, "{what}: {text}");
}

#[test]
fn web_answers_a_diffusion_pipeline_as_the_command_does() {
    let Some(driver) = browser_tools("web_answers_a_diffusion_pipeline_as_the_command_does") else {
        return;
    };
    let _guard = serial();
    let (sdxl, flux) = (
        fixture("stable-diffusion-xl-base-1.0"),
        fixture("FLUX.1-dev"),
    );
    let hub = StandIn::start(
        BTreeMap::from([
            (SDXL.to_string(), pipeline_repo(&sdxl, None)),
            // Gated, as FLUX.1-dev is on the Hub: the page's token field opens it.
            (FLUX.to_string(), pipeline_repo(&flux, Some(TEST_TOKEN))),
        ]),
        Duration::ZERO,
        &[],
    );
    let endpoint = hub.endpoint();
    let agent_page = ReplayAgent::serve(&[], &[("HF_ENDPOINT", endpoint.as_str())]);
    let browser = Browser::start(&driver);

    // 1. SDXL in fp16 with model offload, on the page's card (from the link).
    browser.goto(&format!("{}/?card=4090", agent_page.origin));
    browser.click("[data-testid=diffusion] summary");
    let loaded = browser.js(
        "return performance.getEntriesByType('resource').some(r => r.name.includes('/diffusion-'))",
        json!([]),
    );
    assert_eq!(
        loaded,
        json!(false),
        "the diffusion module loads only when a pipeline is read"
    );
    set(&browser, "diffusion-model", SDXL);
    set(&browser, "diffusion-compute-dtype", "fp16");
    set(&browser, "diffusion-offload", "model");
    hub.clear();
    browser.click("[data-testid=diffusion-go]");
    check(
        &browser,
        "SDXL fp16, model offload, RTX 4090",
        &sdxl,
        &[
            "--compute-dtype",
            "fp16",
            "--offload",
            "model",
            "--card",
            "4090",
        ],
    );
    let paths: Vec<String> = hub.log().into_iter().map(|l| l.path).collect();
    assert_eq!(
        paths.len(),
        5,
        "model_index.json and four configs, nothing else: {paths:?}"
    );
    assert!(
        paths
            .iter()
            .all(|p| p.ends_with("/model_index.json") || p.ends_with("/config.json")),
        "{paths:?}"
    );
    let requests = paths.len();

    // 2. A field changed answers again at once, from the files already read.
    set(&browser, "diffusion-height", "768");
    set(&browser, "diffusion-images", "2");
    set(&browser, "diffusion-vae-slicing", "true");
    browser.wait_for(
        "the answer for 768 px, two images",
        "return document.querySelector('[data-testid=diffusion-lines]').textContent.includes('2 per prompt')",
    );
    check(
        &browser,
        "SDXL 1024×768, two images, VAE slicing",
        &sdxl,
        &[
            "--compute-dtype",
            "fp16",
            "--offload",
            "model",
            "--card",
            "4090",
            "--height",
            "768",
            "--images",
            "2",
            "--vae-slicing",
        ],
    );
    assert_eq!(hub.log().len(), requests, "no file read again");

    // 2b. Group offloading of the denoiser, two blocks a group with a stream, as
    //     `--offload group --group-blocks 2 --group-stream` answers it.
    set(&browser, "diffusion-offload", "group");
    set(&browser, "diffusion-group-blocks", "2");
    set(&browser, "diffusion-group-stream", "true");
    browser.wait_for(
        "the answer under group offloading",
        "return document.querySelector('[data-testid=diffusion-lines]').textContent.includes('use_stream;')",
    );
    check(
        &browser,
        "SDXL 1024×768, two images, group offload 2 blocks with a stream",
        &sdxl,
        &[
            "--compute-dtype",
            "fp16",
            "--offload",
            "group",
            "--group-blocks",
            "2",
            "--group-stream",
            "--card",
            "4090",
            "--height",
            "768",
            "--images",
            "2",
            "--vae-slicing",
        ],
    );
    assert_eq!(hub.log().len(), requests, "no file read again");

    // 3. FLUX.1-dev with guidance on, 768×1360, a denoiser in nf4, no card given: the
    //    smallest catalogue card that holds it.
    browser.goto(&format!("{}/?card=", agent_page.origin));
    browser.click("[data-testid=diffusion] summary");
    set(&browser, "diffusion-model", FLUX);
    set(&browser, "diffusion-height", "768");
    set(&browser, "diffusion-width", "1360");
    set(&browser, "diffusion-cfg", "on");
    set(&browser, "diffusion-format", "nf4");
    // Without the token the Hub's refusal is said, asking for one.
    browser.click("[data-testid=diffusion-go]");
    let refused = browser.wait_for(
        "the gated pipeline's refusal",
        "const s = document.querySelector('[data-testid=diffusion-status]').textContent; \
         return s.startsWith('Could not') && s",
    );
    assert!(
        refused.as_str().unwrap_or_default().contains("token"),
        "{refused}"
    );
    hub.clear();
    set(&browser, "diffusion-token", TEST_TOKEN);
    browser.click("[data-testid=diffusion-go]");
    check(
        &browser,
        "FLUX.1-dev 1360×768, guidance on, nf4",
        &flux,
        &[
            "--height", "768", "--width", "1360", "--cfg", "on", "--format", "nf4",
        ],
    );

    let bearer = format!("Bearer {TEST_TOKEN}");
    let log = hub.log();
    assert!(!log.is_empty());
    assert!(
        log.iter()
            .filter(|l| l.method != "OPTIONS")
            .all(|l| l.server == "hub" && l.auth.as_deref() == Some(bearer.as_str())),
        "the token goes with every read, to the Hub alone: {log:?}"
    );
    assert!(
        !browser
            .js("return location.href", json!([]))
            .as_str()
            .unwrap_or_default()
            .contains(TEST_TOKEN),
        "the token is not in the link"
    );

    // 4. A value that is not one is refused in words, naming its field.
    set(&browser, "diffusion-text-tokens", "many");
    let why = browser.wait_for(
        "the refusal",
        "const e = document.querySelector('[data-testid=diffusion-refused]'); return e && e.textContent",
    );
    assert!(
        why.as_str().unwrap_or_default().contains("text-tokens"),
        "{why}"
    );
    // 5. The same pipeline picked as a folder on this computer: read in the browser
    //    (no request to the Hub), its config files only — the folder's weight shard is
    //    never read — and answered as the command answers that folder. ChromeDriver
    //    cannot send a folder to an `<input webkitdirectory>` (the list arrives empty),
    //    so the browser's part is played: the input's files are the folder's, each
    //    with its `webkitRelativePath`, as Chromium gives them.
    set(&browser, "diffusion-text-tokens", "");
    hub.clear();
    browser.js(
        "const [files] = arguments; \
         const list = files.map(([p, t]) => { const f = new File([t], p.split('/').pop()); \
           Object.defineProperty(f, 'webkitRelativePath', {value: p}); return f; }); \
         list.push({name: 'diffusion_pytorch_model.safetensors', size: 23802932552, \
           webkitRelativePath: 'FLUX.1-dev/transformer/diffusion_pytorch_model.safetensors', \
           text() { throw new Error('a weight file was read'); }}); \
         const input = document.querySelector('[data-testid=diffusion-folder]'); \
         Object.defineProperty(input, 'files', {value: list, configurable: true}); \
         input.dispatchEvent(new Event('change', {bubbles: true}));",
        json!([folder_files(&flux, "FLUX.1-dev")]),
    );
    wait_for_status(&browser, "from FLUX.1-dev (this browser's disk)");
    check(
        &browser,
        "FLUX.1-dev picked as a folder",
        &flux,
        &[
            "--height", "768", "--width", "1360", "--cfg", "on", "--format", "nf4",
        ],
    );
    assert!(hub.log().is_empty(), "a folder is read without the Hub");
    // The same with the transformer under layerwise casting, as the command counts it.
    set(&browser, "diffusion-format", "");
    set(&browser, "diffusion-layerwise-casting", "true");
    browser.wait_for(
        "the layerwise answer",
        "return document.querySelector('[data-testid=diffusion-lines]').textContent.includes('fp8 layerwise')",
    );
    check(
        &browser,
        "FLUX.1-dev folder, layerwise casting",
        &flux,
        &[
            "--height",
            "768",
            "--width",
            "1360",
            "--cfg",
            "on",
            "--layerwise-casting",
        ],
    );
    set(&browser, "diffusion-layerwise-casting", "");

    // 6. SDXL's folder dropped inside a parent folder: its entries walked as
    //    Chromium's entries API gives them (played by the test: a drop's entries
    //    cannot be made by ChromeDriver), the shallowest model_index.json the
    //    pipeline's.
    set(&browser, "diffusion-format", "");
    browser.js(
        "const [files] = arguments; \
         const dir = (name, fullPath) => { const kids = []; return {isFile: false, isDirectory: true, \
           name, fullPath, kids, createReader() { let done = false; return {readEntries(ok) { \
             const out = done ? [] : kids; done = true; setTimeout(() => ok(out), 0); }}; }}; }; \
         const file = (name, fullPath, text) => ({isFile: true, isDirectory: false, name, fullPath, \
           file(ok) { ok(new File([text], name)); }}); \
         const folders = new Map([['/models', dir('models', '/models')]]); \
         const folder = (path) => { if (!folders.has(path)) { const i = path.lastIndexOf('/'); \
           const d = dir(path.slice(i + 1), path); folder(path.slice(0, i)).kids.push(d); \
           folders.set(path, d); } return folders.get(path); }; \
         for (const [p, t] of files) { const full = '/models/' + p; const i = full.lastIndexOf('/'); \
           folder(full.slice(0, i)).kids.push(file(full.slice(i + 1), full, t)); } \
         const root = folders.get('/models'); \
         const ev = new DragEvent('drop', {bubbles: true, cancelable: true}); \
         Object.defineProperty(ev, 'dataTransfer', {value: {items: [{webkitGetAsEntry: () => root}]}}); \
         document.querySelector('[data-testid=diffusion-drop]').dispatchEvent(ev);",
        json!([folder_files(&sdxl, "stable-diffusion-xl-base-1.0")]),
    );
    wait_for_status(
        &browser,
        "from models/stable-diffusion-xl-base-1.0 (this browser's disk)",
    );
    check(
        &browser,
        "SDXL dropped as a folder",
        &sdxl,
        &["--height", "768", "--width", "1360", "--cfg", "on"],
    );
    assert!(hub.log().is_empty(), "a folder is read without the Hub");
}
