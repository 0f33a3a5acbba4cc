//! The page's engine section: on the target card, the largest workload that fits
//! (largest context at the focused workload's sequences, most sequences at its
//! context) and what each serving engine leaves for the KV cache at its defaults.
//! Every figure and word is the engine module's ([`crate::rules`], `web/engine`, over
//! [`gpumem_core::engine`]), which draws them; this component holds the fields.
//!
//! The engine flags (`engine`, `gpu-memory-utilization`, `max-model-len`, …) are
//! fields of the table like every other key, hence URL keys: a link reproduces this
//! section. An empty field is the engine's default; `engine` narrows the table to one
//! engine. The card is the page's target card (the `card` field by the sweep).

use gpumem_core::engine::engine_keys;
use gpumem_core::params::FieldGroup;
use leptos::prelude::*;

use crate::compute::Computed;
use crate::inputs::group_fields;
use crate::rules::{Rules, request};
use crate::state::Form;

/// The engine section of the results column.
#[component]
pub fn EnginePanel() -> impl IntoView {
    let computed = expect_context::<Memo<Computed>>();
    let form = expect_context::<Form>();
    let rules = use_context::<Rules>();
    let focus = form.focus;
    let imported = form.imported;
    let sigs: Vec<(&'static str, RwSignal<String>)> =
        engine_keys().map(|k| (k, form.sig(k))).collect();
    let view_memo = Memo::new(move |_| {
        let pairs = computed.with(|c| c.workloads.get(focus.get()).map(|w| w.pairs.clone()))?;
        // Valid flags apply; an invalid one is shown beside its field (compute.rs)
        // and left at the engine's default by the module.
        let page: Vec<(&'static str, String)> = sigs
            .iter()
            .map(|(k, s)| (*k, s.get()))
            .filter(|(_, v)| !v.trim().is_empty())
            .collect();
        let request = imported.with(|i| request(&pairs, &page, i.as_ref().map(|i| &i.summary)));
        // Empty markup: the workload has no estimate (its error is shown elsewhere).
        match rules?.draw("panel_view", &request) {
            Ok(html) if html.is_empty() => None,
            other => Some(other),
        }
    });
    view! {
        <section class="engines" aria-label="Largest workload and engine budgets" data-testid="engine-panel">
            <div class="engine-fields">{group_fields(&[FieldGroup::Engine], &["card", "engine"])}</div>
            {move || view_memo.get().map(|p| match p {
                Err(e) => view! { <p class="muted" data-testid="engine-rules">{e}</p> }.into_any(),
                Ok(html) => view! { <div class="drawn" inner_html=html></div> }.into_any(),
            })}
        </section>
    }
}
