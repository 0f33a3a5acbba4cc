//! The page's engine section: on the target card, the largest workload that fits
//! (largest context at the focused workload's sequences, most sequences at its
//! context) and what each serving engine leaves for the KV cache at its defaults.
//! Every figure is [`gpumem_core::engine`]'s; this module only formats.
//!
//! The engine flags (`engine`, `gpu-memory-utilization`, `max-model-len`, …) are
//! fields of the table like every other key, hence URL keys: a link reproduces this
//! section. An empty field is the engine's default; `engine` narrows the table to one
//! engine. The card is the page's target card (the `card` field by the sweep).

use gpumem_core::catalogue::{CATALOGUE, GpuCard, resolve};
use gpumem_core::engine::{
    self, Engine, EngineBudget, EngineParams, Largest, Outcome, engine_keys,
};
use gpumem_core::estimate::{EstimateInput, estimate};
use gpumem_core::import::TensorSummary;
use gpumem_core::params::{FieldGroup, from_pairs};
use gpumem_core::units::{group_digits, signed_gib_string, signed_group_digits};
use leptos::prelude::*;

use crate::compute::{Computed, engine_settings};
use crate::inputs::group_fields;
use crate::state::Form;

/// Every engine, in the order shown.
pub const ENGINES: [Engine; 5] = [
    Engine::Vllm,
    Engine::Sglang,
    Engine::Tgi,
    Engine::LlamaCpp,
    Engine::Transformers,
];

/// What the section shows for one workload on one card.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineView {
    /// The largest workload that fits.
    pub largest: Largest,
    /// Each engine's budget (every engine, or the one named), or why there is none.
    pub budgets: Vec<(Engine, Result<EngineBudget, String>)>,
}

/// The section's figures for a workload given as `key=value` pairs, with the
/// engine flags of `settings` (its card is replaced by `card`).
pub fn engine_view(
    pairs: &[(&'static str, String)],
    tensors: Option<&TensorSummary>,
    card: &GpuCard,
    settings: &EngineParams,
) -> Option<EngineView> {
    let (mut input, errors): (EstimateInput, _) =
        from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
    if !errors.is_empty() {
        return None;
    }
    input.tensors = tensors.cloned();
    let est = estimate(&input).ok()?;
    let budgets = ENGINES
        .iter()
        .filter(|e| settings.engine.is_none_or(|s| s == **e))
        .map(|e| {
            let params = EngineParams {
                engine: Some(*e),
                card: Some(*card),
                ..settings.clone()
            };
            (
                *e,
                engine::budget(&input, &est, &params).map_err(|err| err.to_string()),
            )
        })
        .collect();
    Some(EngineView {
        largest: engine::largest(&input, card, settings),
        budgets,
    })
}

/// "fits", "borderline (±margin GiB)" or "refused (margin GiB)", as the CLI says it.
pub fn outcome_text(b: &EngineBudget) -> String {
    match b.outcome {
        Outcome::Fits => "fits".into(),
        Outcome::Borderline => format!("borderline ({} GiB)", signed_gib_string(b.margin_bytes, 2)),
        Outcome::Refused => format!("refused ({} GiB)", signed_gib_string(b.margin_bytes, 2)),
    }
}

/// The engine section of the results column.
#[component]
pub fn EnginePanel() -> impl IntoView {
    let computed = expect_context::<Memo<Computed>>();
    let form = expect_context::<Form>();
    let focus = form.focus;
    let card_key = form.sig("card");
    let imported = form.imported;
    let sigs: Vec<(&'static str, RwSignal<String>)> = engine_keys()
        .filter(|k| *k != "card")
        .map(|k| (k, form.sig(k)))
        .collect();
    let view_memo = Memo::new(move |_| {
        let card = resolve(card_key.get().trim()).unwrap_or(CATALOGUE[0]);
        let pairs = computed.with(|c| c.workloads.get(focus.get()).map(|w| w.pairs.clone()))?;
        // Valid flags apply; an invalid one is shown beside its field (compute.rs)
        // and left at the engine's default here.
        let typed: Vec<(&'static str, String)> = sigs
            .iter()
            .map(|(k, s)| (*k, s.get()))
            .filter(|(_, v)| !v.trim().is_empty())
            .collect();
        let (settings, _) = engine_settings(&typed);
        imported
            .with(|i| engine_view(&pairs, i.as_ref().map(|i| &i.summary), &card, &settings))
            .map(|v| (card.name, v))
    });
    view! {
        <section class="engines" aria-label="Largest workload and engine budgets" data-testid="engine-panel">
            <div class="engine-fields">{group_fields(&[FieldGroup::Engine], &["card"])}</div>
            {move || view_memo.get().map(|(name, v)| {
                let l = v.largest.clone();
                let ctx = match l.largest_context {
                    Some(c) => format!("{} tokens", group_digits(c)),
                    None => "none (not even 1 token fits)".into(),
                };
                let seqs = match (l.at_context, l.most_sequences) {
                    (Some(c), Some(n)) => Some(format!("{} at {} tokens", group_digits(n), group_digits(c))),
                    (Some(c), None) => Some(format!("none at {} tokens", group_digits(c))),
                    _ => None,
                };
                let basis = if l.basis == "estimate" {
                    " (no engine: the estimate with its reserve)".to_string()
                } else {
                    format!(" ({}'s pool)", l.basis)
                };
                let beyond = l.positions_note().map(|n| format!(" — {n}"));
                view! {
                    <h3>"Largest workload on " {name} {basis}</h3>
                    <p>
                        "Largest context at " {l.at_sequences} " sequence(s): "
                        <strong data-testid="largest-context">{ctx}</strong>{beyond}
                        {seqs.map(|s| view! { " · most sequences: " <strong data-testid="most-sequences">{s}</strong> })}
                    </p>
                    <h3>"KV cache each engine leaves on " {name} " (per device; an empty field is the engine's default)"</h3>
                    <table class="lines engines-table">
                        <thead><tr><th>"engine"</th><th>"KV capacity"</th><th>"GiB"</th><th>"tokens"</th><th>"sequences at max-model-len"</th><th>"start-up"</th></tr></thead>
                        <tbody>
                            {v.budgets.into_iter().map(|(e, b)| match b {
                                Ok(b) => view! {
                                    <tr data-testid=format!("engine-{}", e.name())>
                                        <td>{e.name()} " " {b.version.clone()}</td>
                                        <td class="num">{signed_group_digits(b.kv_capacity_bytes)} " B"</td>
                                        <td class="num">{signed_gib_string(b.kv_capacity_bytes, 2)}</td>
                                        <td class="num">{group_digits(b.kv_capacity_tokens)}</td>
                                        <td class="num">{group_digits(b.max_sequences)} " × " {group_digits(b.max_model_len)}</td>
                                        <td data-testid=format!("outcome-{}", e.name())>{outcome_text(&b)}</td>
                                    </tr>
                                    <tr class="formula"><td colspan="6">
                                        {b.lines.iter().enumerate().map(|(i, l)| format!(
                                            "{}{} {} B ({})",
                                            match (i, l.subtracted) { (0, _) => "", (_, true) => " − ", _ => " · " },
                                            l.label,
                                            group_digits(l.bytes),
                                            l.source
                                        )).collect::<String>()}
                                    </td></tr>
                                }.into_any(),
                                Err(err) => view! {
                                    <tr><td>{e.name()}</td><td colspan="5" class="muted">{err}</td></tr>
                                }.into_any(),
                            }).collect_view()}
                        </tbody>
                    </table>
                }
            })}
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_matches_the_core_for_llama_8b_on_h100() {
        let pairs: Vec<(&'static str, String)> = [
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("head-dim", "128"),
            ("intermediate", "14336"),
            ("vocab", "128256"),
            ("context", "16000"),
        ]
        .iter()
        .map(|(k, v)| (*k, v.to_string()))
        .collect();
        let card = &resolve("h100-sxm-80gb").unwrap();
        let v = engine_view(&pairs, None, card, &EngineParams::default()).expect("a view");
        let (e, vllm) = &v.budgets[0];
        assert_eq!(*e, Engine::Vllm);
        // The same figure the core and the CLI derive (max-model-len = context here).
        let vllm = vllm.as_ref().unwrap();
        assert_eq!(vllm.kv_capacity_bytes, 58_172_385_690);
        assert_eq!(vllm.max_sequences, 27);
        assert_eq!(outcome_text(vllm), "fits");
        assert_eq!(v.largest.at_context, Some(16000));
        assert!(v.largest.most_sequences.is_some());
        // Bad input: no view rather than a wrong one.
        assert!(
            engine_view(
                &[("layers", "x".into())],
                None,
                card,
                &EngineParams::default()
            )
            .is_none()
        );
        // The engine flags apply, and `engine` keeps only that engine.
        let (settings, errors) = engine_settings(&[
            ("engine", "vllm".into()),
            ("gpu-memory-utilization", "0.85".into()),
            ("layers", "32".into()),
        ]);
        assert!(errors.is_empty());
        let v85 = engine_view(&pairs, None, card, &settings).expect("a view");
        assert_eq!(v85.budgets.len(), 1);
        let want = engine::budget(
            &from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).0,
            &estimate(&from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).0).unwrap(),
            &EngineParams {
                card: Some(*card),
                ..settings.clone()
            },
        )
        .unwrap();
        let got = v85.budgets[0].1.as_ref().unwrap();
        assert_eq!(got.kv_capacity_bytes, want.kv_capacity_bytes);
        assert!(got.kv_capacity_bytes < vllm.kv_capacity_bytes);
    }
}
