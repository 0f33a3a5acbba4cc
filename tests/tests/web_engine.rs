//! The page's engine section in headless Chromium: each engine's KV capacity on the
//! target card and the largest workload that fits, equal to `gpumem_core::engine`
//! for the same keys (expected figures come from the core, never typed in).

mod web_support;

use gpumem_core::catalogue::find;
use gpumem_core::engine::{self, Engine, EngineParams};
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
    for e in [Engine::Vllm, Engine::Sglang, Engine::Tgi, Engine::LlamaCpp] {
        let want = engine::budget(
            &input,
            &est,
            &EngineParams {
                engine: Some(e),
                card: Some(card),
                ..EngineParams::default()
            },
        )
        .unwrap();
        let id = format!("engine-{}", e.name());
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
    let largest = engine::largest(&input, card);
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
