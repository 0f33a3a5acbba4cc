//! The page's engine section in headless Chromium: each engine's KV capacity on the
//! target card and the largest workload that fits, equal to `gpumem_core::engine`
//! for the same keys (expected figures come from the core, never typed in).

mod web_support;

use gpumem_core::catalogue::find;
use gpumem_core::engine::{self, EngineParams};
use gpumem_core::estimate::estimate;
use gpumem_core::params::from_pairs;
use gpumem_core::units::{group_digits, signed_group_digits};
use web_support::Page;

const LLAMA_8B: &str =
    "layers=32&hidden=4096&heads=32&kv-heads=8&head-dim=128&intermediate=14336&vocab=128256";

#[test]
fn web_engine_section_matches_the_core() {
    let Some(page) = Page::open("web_engine_section_matches_the_core") else {
        return;
    };
    let query = format!("{LLAMA_8B}&context=16000&sequences=2&card=h100-sxm-80gb");
    page.load(&query);
    // What the page must show, from the core (the estimate's own keys only).
    let pairs: Vec<(&str, &str)> = query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .filter(|(k, _)| *k != "card")
        .collect();
    let (input, errors) = from_pairs(pairs);
    assert!(errors.is_empty(), "{errors:?}");
    let est = estimate(&input).unwrap();
    let card = find("h100-sxm-80gb").unwrap();
    // Every engine of the registry: the section shows each.
    for e in engine::all() {
        let id = format!("engine-{}", e.name());
        let want = match engine::budget(
            &input,
            &est,
            &EngineParams {
                engine: Some(e),
                card: Some(*card),
                ..EngineParams::default()
            },
        ) {
            Ok(want) => want,
            Err(refused) => {
                // An engine that does not serve this model (TEI and a decoder) says why
                // in its row, as the core does.
                let why = refused.to_string();
                let tail: String = why
                    .chars()
                    .skip(why.chars().count().saturating_sub(60))
                    .collect();
                page.browser.wait_for(
                    &id,
                    &format!(
                        "return [...document.querySelectorAll('.engines-table td.muted')].some(td => td.textContent.includes({}));",
                        serde_json::to_string(&tail).unwrap()
                    ),
                );
                println!("web-engine: {id} refused: {why}");
                continue;
            }
        };
        let bytes = format!("{} B", signed_group_digits(want.kv_capacity_bytes));
        let row = page.browser.wait_for(
            &id,
            &format!(
                "const e = document.querySelector('[data-testid=\"{id}\"]'); return e && e.textContent.includes('{bytes}') && e.textContent;"
            ),
        );
        let row = row.as_str().unwrap().to_string();
        assert!(
            row.contains(&group_digits(want.kv_capacity_tokens)),
            "{id}: {row}"
        );
        println!("web-engine: {id} {row}");
    }
    let largest = engine::largest(&input, card, &engine::EngineParams::default());
    let ctx = page.browser.testid("largest-context");
    assert_eq!(
        ctx,
        format!("{} tokens", group_digits(largest.largest_context.unwrap()))
    );
    let seqs = page.browser.testid("most-sequences");
    assert!(
        seqs.starts_with(&format!(
            "{} at",
            group_digits(largest.most_sequences.unwrap())
        )),
        "{seqs}"
    );
}

/// The engine keys are URL keys like every field: a link with `engine`, `card` and an
/// engine flag shows them in the engine section, the figure follows the flag (the
/// core's, for the same keys), and a reload keeps all of it.
#[test]
fn web_engine_keys_come_from_the_url_and_survive_a_reload() {
    let Some(page) = Page::open("web_engine_keys_come_from_the_url_and_survive_a_reload") else {
        return;
    };
    let engine_keys =
        "engine=vllm&card=h100-sxm-80gb&gpu-memory-utilization=0.85&max-model-len=8000";
    let query = format!("{LLAMA_8B}&context=16000&{engine_keys}");
    let estimate_pairs: Vec<(&str, &str)> = LLAMA_8B
        .split('&')
        .chain(["context=16000"])
        .filter_map(|p| p.split_once('='))
        .collect();
    let (input, errors) = from_pairs(estimate_pairs);
    assert!(errors.is_empty(), "{errors:?}");
    let est = estimate(&input).unwrap();
    let (params, errors) =
        engine::from_pairs(engine_keys.split('&').filter_map(|p| p.split_once('=')));
    assert!(errors.is_empty(), "{errors:?}");
    let want = engine::budget(&input, &est, &params).unwrap();
    // The default utilisation gives another figure: the flag is what moves it.
    let mut default_params = params.clone();
    default_params.set("gpu-memory-utilization", None);
    let at_default = engine::budget(&input, &est, &default_params).unwrap();
    assert_ne!(want.kv_capacity_bytes, at_default.kv_capacity_bytes);
    let bytes = format!("{} B", signed_group_digits(want.kv_capacity_bytes));
    let check = |what: &str| {
        let row = page.browser.wait_for(
            what,
            &format!(
                "const e = document.querySelector('[data-testid=\"engine-vllm\"]'); return e && e.textContent.includes('{bytes}') && e.textContent;"
            ),
        );
        let row = row.as_str().unwrap().to_string();
        assert!(
            row.contains(&group_digits(want.max_sequences)),
            "{what}: {row}"
        );
        // `engine=vllm` keeps only vLLM's row.
        let others = page.browser.js(
            "return document.querySelectorAll('[data-testid^=\"engine-\"]:not([data-testid=\"engine-panel\"])').length",
            serde_json::json!([]),
        );
        assert_eq!(others, serde_json::json!(1), "{what}: rows");
        // The engine section's fields show the link's values.
        for (k, v) in [
            ("engine", "vllm"),
            ("gpu-memory-utilization", "0.85"),
            ("max-model-len", "8000"),
            ("card", "h100-sxm-80gb"),
        ] {
            let got = page.browser.js(
                "return document.getElementById(arguments[0]).value",
                serde_json::json!([k]),
            );
            assert_eq!(got, serde_json::json!(v), "{what}: {k}");
        }
        let in_section = page.browser.js(
            "return !!document.querySelector('[data-testid=\"engine-panel\"] #gpu-memory-utilization')",
            serde_json::json!([]),
        );
        assert_eq!(in_section, serde_json::json!(true), "{what}");
        let search = page
            .browser
            .js("return location.search", serde_json::json!([]));
        let search = search.as_str().unwrap().to_string();
        for pair in engine_keys.split('&') {
            assert!(search.contains(pair), "{what}: {pair} not in {search}");
        }
        search
    };
    page.load(&query);
    let search = check("from the link");
    // The page's command line carries the engine flags, and the agent prints the same
    // budget for it.
    let cmd = page.browser.testid("cli-command");
    let args: Vec<&str> = cmd
        .strip_prefix("gpumem-agent ")
        .unwrap_or_else(|| panic!("{cmd}"))
        .split_whitespace()
        .collect();
    assert!(
        cmd.contains("--engine vllm") && cmd.contains("--gpu-memory-utilization 0.85"),
        "{cmd}"
    );
    let out = std::process::Command::new(web_support::agent_binary())
        .args(&args)
        .arg("--json")
        .output()
        .expect("run the agent");
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
    assert_eq!(
        json["engine"]["kv_capacity_bytes"],
        serde_json::json!(want.kv_capacity_bytes),
        "{cmd}"
    );
    // A reload of the address the page wrote keeps the engine section.
    page.load(search.trim_start_matches('?'));
    check("after a reload");
    // A value out of range is kept beside its field with the parser's message.
    page.browser.type_into("#gpu-memory-utilization", "1.5");
    let msg = page.browser.wait_for(
        "the fraction's message",
        "const e = document.querySelector('#gpu-memory-utilization-msg'); return e && e.textContent.includes('fraction') && e.textContent;",
    );
    println!("web-engine: gpu-memory-utilization=1.5 → {msg}");
    // llama.cpp's --tensor-split and transformers' --max-memory are read by the page
    // as the CLI reads them: their messages beside their fields, the core's words.
    for (key, value, words) in [
        ("tensor-split", "3,x", "not a number"),
        ("tensor-split", "-1,1", "finite share"),
        ("tensor-split", "0,0", "every share is 0"),
        ("max-memory", "1=1GiB,0=1GiB,1=2GiB", "given twice"),
    ] {
        let (_, errors) = engine::from_pairs([(key, value)]);
        let want = errors.first().map(ToString::to_string).unwrap_or_default();
        assert!(want.contains(words), "{key}={value}: {want}");
        page.browser.type_into(&format!("#{key}"), value);
        let msg = page.browser.wait_for(
            &format!("{key}={value}'s message"),
            &format!(
                "const e = document.querySelector('#{key}-msg'); return e && e.textContent.includes('{words}') && e.textContent;"
            ),
        );
        let msg = msg.as_str().unwrap_or_default();
        assert!(want.ends_with(msg.trim()), "{key}={value}: {msg} / {want}");
        page.browser.type_into(&format!("#{key}"), "");
    }
}

/// A link that asks for more than the page can answer — llama.cpp's placement of 4096
/// layers (the most the estimate takes), which lists every block's tensors — is
/// answered with llama.cpp's bound
/// (never a blank page, never minutes of work), the page stays usable, and the state
/// it keeps does not blank a later visit.
#[test]
fn web_a_link_past_the_bounds_leaves_the_page_usable() {
    let Some(page) = Page::open("web_a_link_past_the_bounds_leaves_the_page_usable") else {
        return;
    };
    let deep = LLAMA_8B.replace("layers=32", "layers=4096");
    let url = format!(
        "{}/?{deep}&context=4096&engine=llama.cpp&card=h100-sxm-80gb",
        page.server.origin
    );
    let t0 = std::time::Instant::now();
    page.browser.goto(&url);
    let said = page.browser.wait_for(
        "the answer naming the bound",
        "const e = document.querySelector('[data-testid=\"answer\"]'); return e && e.textContent.includes('at most 1024') && e.textContent;",
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(30),
        "took {:?}: {said}",
        t0.elapsed()
    );
    // Usable: a field still answers.
    page.browser.type_into("#layers", "32");
    page.browser.wait_for(
        "an answer again",
        "const e = document.querySelector('[data-testid=\"answer-verdict\"]'); return e && !e.textContent.includes('NO ANSWER') && e.textContent;",
    );
    // A bare visit restores the kept state and renders it.
    page.browser.goto(&format!("{}/", page.server.origin));
    page.browser.wait_for(
        "the restored answer",
        "const e = document.querySelector('[data-testid=\"answer-verdict\"]'); return e && e.textContent;",
    );
}

/// Over several cards the page's answer shows one row per GPU — vLLM's tp 2 × pp 2 on
/// four H100s, its stages over an L40S and an A10 (asking more sequences than its pool
/// holds at once), llama.cpp's split over an RTX 4090 and an RTX 3090 — each figure the
/// one `gpumem-agent estimate --json` gives for the same keys (its `engine.devices`),
/// the most loaded GPU named with the answer's one verdict, and no row's verdict
/// beside it.
#[test]
fn web_the_answer_over_several_cards_has_the_clis_rows_per_gpu() {
    use gpumem_core::units::{signed_gb_string, signed_gib_string};
    let Some(page) = Page::open("web_the_answer_over_several_cards_has_the_clis_rows_per_gpu")
    else {
        return;
    };
    let h100 = "h100-sxm-80gb,h100-sxm-80gb,h100-sxm-80gb,h100-sxm-80gb";
    for keys in [
        format!("tp=2&pp=2&gpus=4&engine=vllm&card={h100}"),
        "pp=2&gpus=2&engine=vllm&card=l40s-48gb,a10-24gb".to_string(),
        "pp=2&gpus=2&sequences=13&engine=vllm&card=l40s-48gb,a10-24gb".to_string(),
        "engine=llama.cpp&card=rtx-4090,rtx-3090".to_string(),
    ] {
        let query = format!("{LLAMA_8B}&context=16000&{keys}");
        // The CLI's answer for the same keys.
        let mut cmd = std::process::Command::new(web_support::agent_binary());
        cmd.args(["estimate", "--json"]);
        for (k, v) in query.split('&').filter_map(|p| p.split_once('=')) {
            cmd.arg(format!("--{k}")).arg(v);
        }
        let out = cmd.output().expect("run the agent");
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{keys}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json");
        let devices = json["engine"]["devices"].as_array().expect("devices");
        let cards = keys.rsplit('=').next().unwrap().split(',').count();
        assert_eq!(devices.len(), cards, "{keys}");
        page.load(&query);
        let shown = page.browser.wait_for(
            &format!("{keys}: the rows per GPU"),
            &format!(
                "const rows = document.querySelectorAll('[data-testid=answer-devices] tbody tr'); return rows.length === {cards} && [...rows].map(r => [...r.querySelectorAll('td')].map(td => td.textContent));"
            ),
        );
        let shown: Vec<Vec<String>> = serde_json::from_value(shown).expect("cells");
        let word = page.browser.testid("answer-verdict");
        let verdict = json["verdict"]["verdict"].as_str().expect("verdict");
        let v = match verdict {
            "yes" => gpumem_core::fit::Verdict::Fits,
            "borderline" => gpumem_core::fit::Verdict::Borderline,
            _ => gpumem_core::fit::Verdict::DoesNotFit,
        };
        assert_eq!(word, v.word(), "{keys}");
        let figure = |d: &serde_json::Value, key: &str| {
            let b = d[key].as_i64().unwrap_or_else(|| panic!("{key}"));
            format!("{} ({})", signed_gib_string(b, 2), signed_gb_string(b, 2))
        };
        for (d, cells) in devices.iter().zip(&shown) {
            let want = [
                d["device"].to_string(),
                d["card_name"].as_str().unwrap().to_string(),
                d["layers"].as_str().unwrap().to_string(),
                figure(d, "weights_bytes"),
                figure(d, "kv_bytes"),
                figure(d, "need_bytes"),
                figure(d, "capacity_bytes"),
                figure(d, "headroom_bytes"),
                if d["most_loaded"] == serde_json::json!(true) {
                    format!("most loaded: {}", v.text())
                } else {
                    String::new()
                },
            ];
            assert_eq!(cells[..], want[..], "{keys}: GPU {}", d["device"]);
            println!("web-engine: {keys}: {}", cells.join(" | "));
        }
        // The most loaded GPU is the answer's card.
        let loaded = devices
            .iter()
            .find(|d| d["most_loaded"] == serde_json::json!(true))
            .expect("a most loaded GPU");
        assert_eq!(
            loaded["card_name"], json["verdict"]["card"]["name"],
            "{keys}"
        );
        let note = page.browser.testid("answer-devices-note");
        let need = json["verdict"]["card"]["need_bytes"].as_u64().unwrap();
        if need != loaded["need_bytes"].as_u64().unwrap() {
            // vLLM's rows hold one sequence; the answer, those asked at once.
            assert!(
                note.contains("13 sequences asked at once"),
                "{keys}: {note}"
            );
            assert_eq!(v, gpumem_core::fit::Verdict::DoesNotFit, "{keys}");
            // The screen, wide and narrow (artifacts/several-cards-answer-*.png).
            for (w, h) in [(1400, 1000), (390, 844)] {
                page.browser.resize(w, h);
                page.browser.js(
                    "document.querySelector('[data-testid=answer-devices]').scrollIntoView()",
                    serde_json::json!([]),
                );
                page.browser.screenshot(
                    &web_support::artifacts().join(format!("several-cards-answer-{w}.png")),
                );
            }
            page.browser.resize(1400, 1000);
        }
    }
}
