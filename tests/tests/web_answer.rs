//! The answer first, in headless Chromium against the built page: the verdict box says
//! what `gpumem-agent estimate --json`'s `verdict` says (same card, need, cards, format);
//! a link's keys merge over the default model; cards are typed as people type them; at
//! 390 px the answer comes before the inputs and nothing widens the page; the agent page
//! on a machine that cannot measure says so and starts nothing. Screenshots at 1400 and
//! 390 px: `target/artifacts/answer-1400.png`, `answer-390.png`.
//!
//! Expected figures come from the agent binary (the same core), never typed in.

mod web_support;

use std::process::Command;

use gpumem_core::units::Bytes;
use serde_json::{Value, json};
use web_support::{Browser, Page, ReplayAgent, agent_binary, artifacts, browser_tools, serial};

const LLAMA_8B: &str = "layers=32&hidden=4096&heads=32&kv-heads=8&head-dim=128&intermediate=14336&vocab=128256&max-position=131072";

/// `gpumem-agent estimate --json`'s verdict for a query's keys.
fn agent_verdict(query: &str) -> Value {
    agent_document(query)["verdict"].clone()
}

/// `gpumem-agent estimate --json` for a query's keys (the page-only keys left out).
fn agent_document(query: &str) -> Value {
    let mut cmd = Command::new(agent_binary());
    cmd.args(["estimate", "--json"]);
    for (k, v) in query.split('&').filter_map(|p| p.split_once('=')) {
        cmd.arg(format!("--{k}")).arg(v);
    }
    let out = cmd.output().expect("run gpumem-agent estimate");
    // An answer: 0 fits or borderline, 1 does not fit.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn both(b: u64) -> String {
    format!(
        "{} GiB ({} GB)",
        Bytes(b).gib_string(2),
        Bytes(b).gb_string(2)
    )
}

/// A preset's shape as URL keys (`layers=28&hidden=3584&…`).
fn preset_shape(id: &str) -> String {
    let preset = gpumem_core::presets::find(id).expect("preset");
    let shape: Vec<String> = preset
        .pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    shape.join("&")
}

/// Waits for the answer's verdict word (not the "…" of a module still loading) and
/// returns it.
fn verdict(page: &Page) -> String {
    page.browser
        .wait_for(
            "the answer",
            "const e = document.querySelector('[data-testid=answer-verdict]'); return e && e.textContent !== '…' && e.textContent;",
        )
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The top of an element's box, in CSS pixels from the top of the document.
fn top(b: &Browser, css: &str) -> f64 {
    b.js(
        "const e = document.querySelector(arguments[0]); return e ? e.getBoundingClientRect().top + scrollY : -1;",
        json!([css]),
    )
    .as_f64()
    .unwrap_or(-1.0)
}

#[test]
fn web_answer_first_matches_the_cli_at_1400_and_390_px() {
    let Some(page) = Page::open("web_answer_first_matches_the_cli_at_1400_and_390_px") else {
        return;
    };
    let b = &page.browser;
    for (query, typed_card) in [
        (format!("{LLAMA_8B}&context=8192&card=4090"), true),
        (format!("{LLAMA_8B}&context=8192&card=t4"), true),
        (format!("{LLAMA_8B}&context=8192&sequences=64"), false),
        // A training run: answered by the training module, its searches (the formats it
        // can train on) included.
        (
            format!("{LLAMA_8B}&context=2048&train=lora&checkpointing=true&card=4090"),
            true,
        ),
        (format!("{LLAMA_8B}&context=1024&train=qlora"), false),
    ] {
        page.load(&query);
        let cli = agent_verdict(&query);
        let word = match cli["verdict"].as_str() {
            Some("yes") => "FITS",
            Some("borderline") => "BORDERLINE",
            _ => "DOES NOT FIT",
        };
        let want_need = both(cli["card"]["need_bytes"].as_u64().unwrap());
        let want_card = cli["card"]["name"].as_str().unwrap().to_string();
        let got = b.wait_for(
            "the answer for this query",
            &format!(
                "const n = document.querySelector('[data-testid=answer-need]'); return n && n.textContent.startsWith({}) && n.textContent;",
                json!(format!("{want_need} of "))
            ),
        );
        assert!(got.is_string(), "{query}");
        assert_eq!(verdict(&page), word, "{query}");
        assert!(
            b.testid("answer-card")
                .starts_with(&format!(" on {want_card}")),
            "{query}"
        );
        let cards = b.testid("answer-cards");
        match cli["cards"]["cards"].as_u64() {
            Some(n) => assert!(cards.starts_with(&format!("{n} × {want_card}")), "{cards}"),
            None => {
                let note = cli["cards_note"].as_str().unwrap_or("more than");
                assert!(cards.starts_with(note), "{query}: {cards}");
            }
        }
        if let Some(f) = cli["format"]["format"].as_str() {
            assert!(b.testid("answer-format").starts_with(f), "{query}");
        }
        if let Some(s) = cli["smallest"]["name"].as_str() {
            assert!(b.testid("answer-smallest").starts_with(s), "{query}");
        }
        let chosen = b.testid("answer");
        assert_eq!(!chosen.contains("no card chosen"), typed_card, "{chosen}");
    }
    // A headline figure is called assumed only when a counted line of its group is,
    // as the CLI's total says: a full fine-tune's transients and a Llama-style
    // prefill's are computed; a CUDA context given is an assumed transient line.
    for query in [
        format!("{LLAMA_8B}&context=2048&train=full&card=h100-sxm"),
        format!("{LLAMA_8B}&context=8192&card=4090"),
        format!("{LLAMA_8B}&context=8192&cuda-context-mib=500&card=4090"),
    ] {
        page.load(&query);
        verdict(&page);
        let doc = agent_document(&query);
        let assumed =
            doc["lines"].as_array().unwrap().iter().any(|l| {
                l["group"] == "transient" && l["in_total"] == true && l["kind"] == "assumed"
            });
        let label = b.js(
            "return document.querySelector('[data-testid=transient-bytes]').closest('.figure').querySelector('.flabel').textContent;",
            json!([]),
        );
        let want = if assumed {
            "Transients (assumed)"
        } else {
            "Transients"
        };
        assert_eq!(label.as_str(), Some(want), "{query}");
    }

    // The T4 has no bf16: the answer says so.
    page.load(&format!("{LLAMA_8B}&context=8192&card=t4"));
    verdict(&page);
    assert!(b.testid("answer-warnings").contains("no bf16"));

    // 1400 px: the answer is at the top of the results column.
    page.load(&format!("{LLAMA_8B}&context=8192&card=4090"));
    verdict(&page);
    b.resize(1400, 1000);
    assert!(
        top(b, "[data-testid=answer]") < 250.0,
        "the answer is above the fold"
    );
    assert!(
        b.testid("chart-axis")
            .contains("bytes on the most loaded device")
    );
    b.screenshot(&artifacts().join("answer-1400.png"));
    b.screenshot(std::path::Path::new("/tmp/verdict-answer-1400.png"));

    // 390 px (a phone): the answer before the inputs; wide tables scroll in their own
    // box, the page itself never scrolls sideways.
    b.resize(390, 844);
    let inner = b.js("return innerWidth", json!([])).as_f64().unwrap_or(0.0);
    assert!(inner <= 400.0, "the window did not shrink: {inner}");
    assert!(
        top(b, "[data-testid=answer]") < top(b, ".inputs"),
        "the answer comes first at 390 px"
    );
    assert!(top(b, "[data-testid=answer]") < 400.0);
    let page_wide = b.js(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
        json!([]),
    );
    assert_eq!(page_wide, json!(0), "the page scrolls sideways at 390 px");
    let fit_scrolls = b.js(
        "const t = document.querySelector('[data-testid=fit-table]'); return t.scrollWidth > t.clientWidth && t.clientWidth <= innerWidth;",
        json!([]),
    );
    assert_eq!(
        fit_scrolls,
        json!(true),
        "the fit table scrolls within its box"
    );
    b.screenshot(&artifacts().join("answer-390.png"));
    b.screenshot(std::path::Path::new("/tmp/verdict-answer-390.png"));
    b.resize(1400, 1000);
}

#[test]
fn web_link_keys_merge_over_the_default_model_and_cards_are_typed() {
    let Some(page) = Page::open("web_link_keys_merge_over_the_default_model") else {
        return;
    };
    let b = &page.browser;
    // A link with a workload only keeps the default model: no error, no warning.
    b.goto(&format!("{}/", page.server.origin));
    b.js("localStorage.clear()", json!([]));
    page.load("context=8192");
    verdict(&page);
    let layers = b.js("return document.getElementById('layers').value", json!([]));
    assert_eq!(layers, json!("32"), "the default model's shape stays");
    let context = b.js("return document.getElementById('context').value", json!([]));
    assert_eq!(context, json!("8192"));
    let banners = b.js(
        "return document.querySelectorAll('[data-testid=invalid-summary], [data-testid=estimate-error], .field.invalid').length",
        json!([]),
    );
    assert_eq!(
        banners,
        json!(0),
        "no red or yellow for a link with one key"
    );
    // Cards as people type them, in a link and in the field.
    page.load("card=4090");
    verdict(&page);
    assert!(
        b.testid("answer-card")
            .starts_with(" on NVIDIA GeForce RTX 4090")
    );
    page.load("card=24GiB");
    verdict(&page);
    assert!(b.testid("answer-card").starts_with(" on Custom card"));
    assert!(b.testid("answer").contains("25.77 GB"), "24 GiB = 25.77 GB");
    page.load("card=a100");
    let msg = b.wait_for(
        "the ambiguity beside the card field",
        "const e = document.getElementById('card-msg'); return e && e.textContent.includes('could be') && e.textContent;",
    );
    let msg = msg.as_str().unwrap_or_default();
    assert!(
        msg.contains("a100-80gb") && msg.contains("a100-40gb"),
        "{msg}"
    );
}

#[test]
fn web_agent_page_without_a_gpu_starts_nothing() {
    let Some(driver) = browser_tools("web_agent_page_without_a_gpu_starts_nothing") else {
        return;
    };
    let _guard = serial();
    // A live `serve` (no replay file) on this machine.
    let agent = ReplayAgent::serve(&[], &[]);
    let b = Browser::start(&driver);
    b.goto(&agent.url);
    let measure = b.wait_for(
        "the environment to be known",
        "const e = document.querySelector('[data-testid=pair-state]'); return e && e.dataset.measure;",
    );
    if measure == json!("yes") {
        gpumem_e2e::skip(
            "web_agent_page_without_a_gpu_starts_nothing",
            gpumem_e2e::Missing::Machine,
            "this machine can measure (a GPU is here)",
        );
        return;
    }
    assert_eq!(measure, json!("no"));
    let state = b.testid("pair-state");
    assert!(
        state.contains("cannot measure") && !state.contains("live measurements"),
        "{state}"
    );
    let disabled = b.js(
        "const s = document.querySelector('[data-testid=measure-start]'); return s === null || s.disabled;",
        json!([]),
    );
    assert_eq!(disabled, json!(true), "nothing can be started here");
    b.screenshot(&artifacts().join("agent-no-gpu.png"));
}

/// Under an engine the page's answer is the engine's for the workload asked: Qwen2.5-7B
/// on an L40S with vLLM, 16 sequences of 32 768 tokens — vLLM 0.29's pool holds 14 (459 040 tokens) — does not
/// fit, says how many do, and the workload card shows the same need, not a
/// transformers-style total beside it.
#[test]
fn web_under_an_engine_the_answer_checks_every_sequence() {
    let Some(page) = Page::open("web_under_an_engine_the_answer_checks_every_sequence") else {
        return;
    };
    let query = format!(
        "{}&context=32768&sequences=16&engine=vllm&card=l40s",
        preset_shape("qwen2.5-7b")
    );
    let cli = agent_verdict(&query);
    assert_eq!(cli["verdict"], "no");
    assert_eq!(cli["sequences"]["fit"], 14);
    page.browser
        .goto(&format!("{}/?{query}", page.server.origin));
    let word = page.browser.wait_for(
        "the engine's verdict",
        "const e = document.querySelector('[data-testid=answer-verdict]'); return e && e.textContent.includes('FIT') && e.textContent;",
    );
    assert_eq!(word, json!("DOES NOT FIT"));
    let seqs = page.browser.testid("answer-sequences");
    assert!(seqs.starts_with("14 of 16 at 32 768 tokens"), "{seqs}");
    let need = cli["card"]["need_bytes"].as_u64().expect("need");
    let answer_need = page.browser.testid("answer-need");
    assert!(answer_need.starts_with(&both(need)), "{answer_need}");
    // The focused workload's card: the same need, judged the same way.
    let focused = page.browser.js(
        "const t = document.querySelector('[role=tab][aria-selected=true]'); return t && t.textContent;",
        json!([]),
    );
    let focused = focused.as_str().unwrap_or_default();
    assert!(focused.contains(&Bytes(need).gib_string(2)), "{focused}");
    assert!(focused.contains("Does not fit"), "{focused}");
    // The screen a user acts on, wide and narrow (docs/images/engine-answer-*.png are
    // copies of these).
    for (w, h) in [(1400, 1000), (390, 844)] {
        page.browser.resize(w, h);
        page.browser.js(
            "document.querySelector('[data-testid=answer]').scrollIntoView()",
            json!([]),
        );
        page.browser
            .screenshot(&artifacts().join(format!("engine-answer-{w}.png")));
    }
}

/// The first screen asks the questions — model, context, sequences, card, engine — with
/// the architecture below them; the parameter-count tab starts from the model shown,
/// not from an error; under an engine the breakdown says whose figures it holds; a
/// link made with imported weights this browser does not hold says so instead of
/// showing another model's; a figure never breaks across lines.
#[test]
fn web_the_first_screen_asks_the_questions_and_nothing_stale_stands() {
    let Some(page) = Page::open("web_the_first_screen_asks_the_questions_and_nothing_stale_stands")
    else {
        return;
    };
    let b = &page.browser;
    b.resize(1400, 1000);
    page.load("");
    for css in [
        "[data-testid=model]",
        "#context",
        "#sequences",
        "#card",
        "#engine",
    ] {
        let t = top(b, css);
        assert!(
            (0.0..1000.0).contains(&t),
            "{css} is at {t} px, below the first screen"
        );
    }
    assert!(
        top(b, "#layers") > top(b, "#sequences"),
        "the architecture comes after the workload"
    );
    let line = b.testid("answer-inputs");
    assert!(line.contains("4\u{a0}096"), "{line:?}");

    // The parameter-count tab: the model's own count, and no message anywhere.
    b.click("[data-testid=mode-count]");
    let count = b.wait_for(
        "the parameter count",
        "const e = document.getElementById('parameters'); return e && e.value;",
    );
    assert_eq!(count, json!("8030261248"));
    let messages = b.js(
        "return [...document.querySelectorAll('[aria-invalid=true]')].map(e => e.id)",
        json!([]),
    );
    assert_eq!(messages, json!([]), "no error before anything is typed");
    let verdict = b.testid("answer-verdict");
    assert!(verdict.contains("FITS"), "{verdict}");

    // A training run's longer workloads follow its context, in the grid and the cards.
    page.load("train=lora&context=2048");
    let long = b.js(
        "return document.getElementById('long-context').value",
        json!([]),
    );
    assert_eq!(long, json!("4096"));
    let card = b.testid("workload-2");
    assert!(card.contains("8192"), "{card}");

    // Under an engine, the breakdown is named as the estimate's.
    page.load("engine=vllm&card=l40s");
    let note = b.wait_for(
        "the breakdown's basis",
        "const e = document.querySelector('[data-testid=breakdown-basis]'); return e && e.textContent;",
    );
    assert!(
        note.as_str().is_some_and(|n| n.contains("vllm's budget")),
        "{note}"
    );

    // A link made with imported weights this browser does not hold.
    page.load(&format!("{LLAMA_8B}&tensors=16060522496"));
    let banner = b.testid("lookup-failed");
    assert!(
        banner.contains("16060522496 B") && banner.contains("does not hold"),
        "{banner}"
    );
    assert_eq!(b.testid("imported"), "", "no other import stands for it");
}

/// Host memory and a Mac's unified memory on the page: llama.cpp with 20 blocks on an
/// M3 Max 36GB puts the rest in its CPU buffer; the answer says the host's need and its
/// verdict against the Mac's RAM, and how the RAM is split, in the CLI's words.
#[test]
fn web_answer_shows_the_host_memory_and_a_macs_split() {
    let Some(page) = Page::open("web_answer_shows_the_host_memory_and_a_macs_split") else {
        return;
    };
    let query = format!(
        "{}&context=8192&format=q8_0&engine=llama.cpp&n-gpu-layers=20&card=m3-max-36gb",
        preset_shape("qwen2.5-7b")
    );
    let doc = agent_document(&query);
    let host = &doc["verdict"]["host"];
    let need = host["need_bytes"]
        .as_u64()
        .expect("the CLI puts weights on the host");
    let ram = doc["verdict"]["unified"]["ram_bytes"]
        .as_u64()
        .expect("a Mac's split");
    let word = if host["fits"] == json!(true) {
        "FITS"
    } else {
        "DOES NOT FIT"
    };
    page.browser
        .goto(&format!("{}/?{query}", page.server.origin));
    page.browser.wait_for(
        "the host memory's line",
        "const e = document.querySelector('[data-testid=answer-host]'); return e && e.textContent;",
    );
    let text = page.browser.testid("answer-host");
    assert!(text.starts_with(&both(need)), "{text}");
    assert!(text.contains(&format!(": {word}, ")), "{text}");
    let split = page.browser.testid("answer-unified");
    assert!(
        split.starts_with(&format!("the GPU and the system share {}", both(ram))),
        "{split}"
    );
}
