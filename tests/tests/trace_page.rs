//! "Trace this workload" end to end: the real `gpumem-agent serve --python <torch venv>`
//! (no GPU: the trace runs the model's code on PyTorch's meta device), headless
//! Chromium on the dimensioner with a tiny Llama shape, then the agent page paired with
//! it asks for the trace of that workload. The traced activation line the page shows
//! must be the one `gpumem-agent trace` prints for the same model and workload from a
//! config.json (not typed in); a second request while none runs is answered again.

mod web_support;

use std::process::Command;

use serde_json::{Value, json};
use web_support::{Browser, ReplayAgent, agent_binary, browser_tools, serial};

/// The tiny Llama, as the dimensioner's URL keys and as a config.json.
const SHAPE: &str = "layers=2&hidden=64&heads=4&kv-heads=2&head-dim=16&intermediate=128&vocab=128&tied-embeddings=false&train=full&sequences=2&context=16";

fn config() -> Value {
    json!({
        "model_type": "llama",
        "vocab_size": 128,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "tie_word_embeddings": false,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu"
    })
}

#[test]
fn the_agent_page_traces_the_dimensioners_workload() {
    let Some(driver) = browser_tools("the_agent_page_traces") else {
        return;
    };
    let Some(python) = gpumem_e2e::torch_python("the_agent_page_traces") else {
        return;
    };
    let _guard = serial();
    // The expected figure: `gpumem-agent trace` on the same model and workload.
    let dir = tempfile::tempdir().expect("temp dir");
    let cfg = dir.path().join("config.json");
    std::fs::write(&cfg, config().to_string()).expect("write config");
    let out = Command::new(agent_binary())
        .args([
            "trace",
            "--json",
            "--train",
            "full",
            "--sequences",
            "2",
            "--context",
            "16",
        ])
        .arg("--config")
        .arg(&cfg)
        .arg("--python")
        .arg(&python)
        .output()
        .expect("run gpumem-agent trace");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).expect("trace JSON");
    let peak = doc["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .fold(None::<&Value>, |best, p| match best {
            Some(b) if b["allocated_peak_bytes"].as_u64() >= p["allocated_peak_bytes"].as_u64() => {
                Some(b)
            }
            _ => Some(p),
        })
        .expect("a peak phase");
    let expected = peak["at_peak"]["activations"].as_u64().unwrap()
        + peak["at_peak"]["temporaries"].as_u64().unwrap();

    let python = python.to_string_lossy().into_owned();
    let agent = ReplayAgent::serve(&["--python", &python], &[]);
    let b = Browser::start(&driver);
    // The dimensioner on the agent's own origin keeps the shape in its storage; the
    // pairing URL then opens the agent page, which reads it.
    b.goto(&format!("{}/?{SHAPE}", agent.origin));
    b.wait_for(
        "the headline figures",
        "const e = document.querySelector('[data-testid=\"total-bytes\"]'); return e && e.textContent;",
    );
    b.goto(&agent.url);
    b.wait_for(
        "the trace button",
        "return !!document.querySelector('[data-testid=trace-button]');",
    );
    b.click("[data-testid=trace-button]");
    let got = b.wait_for_within(
        "the traced lines",
        "const e = document.querySelector('[data-testid=trace-table] [data-key=activations]');
         const f = document.querySelector('[data-testid=trace-error]');
         return (e && e.dataset.bytes) || (f && ('error: ' + f.textContent));",
        std::time::Duration::from_secs(120),
    );
    let got = got.as_str().unwrap_or_default().to_owned();
    assert_eq!(got, expected.to_string(), "the page's traced activations");
    let detail = b.testid("trace-detail");
    assert!(detail.contains("traced llama"), "{detail}");
    assert!(detail.contains("not a GPU measurement"), "{detail}");
    // The estimate's own line is beside it, with its basis.
    let row = b.js(
        "return document.querySelector('[data-testid=trace-table] [data-key=activations]').textContent;",
        json!([]),
    );
    let row = row.as_str().unwrap_or_default();
    assert!(row.contains("traced"), "{row}");
    assert!(
        row.contains("(computed)") || row.contains("(assumed)"),
        "{row}"
    );
}
