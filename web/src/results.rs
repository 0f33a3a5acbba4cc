//! The results column: the three workloads side by side, the focused workload's
//! answer, headline figures (raw bytes, GB, GiB), its stacked-bar breakdown and lines
//! (computed or assumed, with the formula's inputs), the per-card fit table, the
//! engine section and a one-dimension sweep. Every number is the core's, and the
//! engine module draws them ([`crate::rules::Rules::draw`], web/engine's view: the
//! estimate and answer documents the modules wrote, in markup; the command line, in
//! words): this module lays out the column, holds its fields and buttons, and hands
//! the documents over.

use gpumem_core::params::parse_count;
use gpumem_core::units::group_digits;
use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::compute::{Computed, DIMS, WORKLOADS, answer, preset_index, sweep_values};
use crate::history_view::esc;
use crate::inputs::Field;
use crate::rules::{Rules, request};
use crate::state::Form;
use crate::training::{Training, is_loading, pending};

/// Milliseconds with three decimals, in integer arithmetic (keeps float
/// formatting out of the wasm).
fn millis(ms: f64) -> String {
    let us = (ms.max(0.0) * 1000.0).round() as u64;
    format!("{}.{:03}", us / 1000, us % 1000)
}

/// The engine module's markup `name` for one workload (its `pairs`, the imported
/// `tensors`) with `page`'s pairs; empty while it cannot draw (loading, not loaded).
fn drawn(
    rules: Rules,
    name: &str,
    pairs: &[(&'static str, String)],
    page: &[(&'static str, String)],
    form: &Form,
) -> String {
    let r = form
        .imported
        .with(|i| request(pairs, page, i.as_ref().map(|i| &i.summary)));
    rules.draw(name, &r).unwrap_or_default()
}

/// The whole results column. A card's button in the markup the engine module draws
/// (the per-card fit table's) carries `data-pick-card`: a click on it judges the page
/// against that card.
#[component]
pub fn ResultsPanel() -> impl IntoView {
    let computed = expect_context::<Memo<Computed>>();
    let form = expect_context::<Form>();
    let rules = expect_context::<Rules>();
    let focus = form.focus;
    let engine = form.sig("engine");
    let card = form.sig("card");
    let focused = Memo::new(move |_| {
        computed.with(|c| {
            c.workloads.get(focus.get()).map(|w| {
                (
                    w.result.clone().map(|_| w.document.clone()),
                    w.pairs.clone(),
                )
            })
        })
    });
    let pick = move |ev: leptos::ev::MouseEvent| {
        let id = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            .and_then(|e| e.closest("[data-pick-card]").ok().flatten())
            .and_then(|e| e.get_attribute("data-pick-card"));
        if let Some(id) = id {
            card.set(id);
        }
    };
    let breakdown = {
        let form = form.clone();
        move |doc: Option<String>, pairs: &[(&'static str, String)]| {
            let mut page = vec![("card", card.get())];
            page.extend(doc.map(|d| ("estimate", d)));
            drawn(rules, "breakdown_view", pairs, &page, &form)
        }
    };
    view! {
        <section class="panel results" aria-label="Results" on:click=pick>
            <Answer/>
            <WorkloadCards/>
            <div class="focus-head">
                <h2>
                    "Breakdown — "
                    <span data-testid="focused-workload">{move || WORKLOADS[focus.get()].0}</span>
                </h2>
                <p class="timing">
                    "3 workloads estimated in "
                    <span data-testid="recompute-ms">{move || millis(computed.with(|c| c.elapsed_ms))}</span>
                    " ms"
                </p>
            </div>
            {move || {
                let e = engine.get();
                (!e.trim().is_empty()).then(|| view! {
                    <p class="note" data-testid="breakdown-basis">
                        "These are the estimate's figures (what transformers would hold); the answer above is "
                        {e} "'s budget, line by line in the engine section below."
                    </p>
                })
            }}
            {move || computed.with(|c| (!c.general_errors.is_empty()).then(|| view! {
                <p class="banner error" role="alert">{c.general_errors.join(" · ")}</p>
            }))}
            {move || computed.with(|c| (!c.field_errors.is_empty()).then(|| {
                let fields: Vec<String> = c.field_errors.keys().cloned().collect();
                view! {
                    <p class="banner warn" role="status" data-testid="invalid-summary">
                        "Check " {fields.join(", ")}
                        ": the figures below leave out what could not be read (its default is used)."
                    </p>
                }
            }))}
            {move || match focused.get() {
                Some((Ok(doc), pairs)) => {
                    view! { <div class="drawn" inner_html=breakdown(Some(doc), &pairs)></div> }.into_any()
                }
                // Its module still loading: no figures yet (not dashes as if refused).
                Some((Err(err), _)) if is_loading(&err) => view! {
                    <p class="note" role="status" data-testid="estimate-loading">{err.to_string()}</p>
                }
                .into_any(),
                Some((Err(err), pairs)) => view! {
                    <div class="banner error" role="alert" data-testid="estimate-error">
                        <p><strong>"No estimate yet: "</strong> {err.to_string()}</p>
                    </div>
                    <div class="drawn" inner_html=breakdown(None, &pairs)></div>
                }
                .into_any(),
                None => ().into_any(),
            }}
            <crate::engine_panel::EnginePanel/>
            <Sweep/>
            <Command/>
        </section>
    }
}

/// The name the answer's first line gives the model: the Hub id looked up, the file
/// imported, or the preset the shape is.
fn model_name(form: &Form) -> Option<String> {
    let model = form.sig("model").get();
    if !model.trim().is_empty() {
        return Some(model.trim().to_string());
    }
    if let Some(f) = form
        .imported
        .with(|i| i.as_ref().and_then(|i| i.files.first().cloned()))
    {
        return Some(f);
    }
    let shape: Vec<(&'static str, String)> = gpumem_core::presets::shape_keys()
        .map(|k| (k, form.sig(k).get()))
        .filter(|(_, v)| !v.trim().is_empty())
        .collect();
    preset_index(&shape, expect_context::<crate::rules::Rules>())
        .map(|i| gpumem_core::presets::PRESETS[i].name.to_string())
}

/// The answer first: the inputs in a line, the verdict on the card (typed here: an id,
/// a short form or a capacity; empty: the smallest card that fits) with its bar, need,
/// headroom and margin, then the ways out. The core's headline, for the focused
/// workload, drawn by the engine module; the CLI prints the same value with the same
/// labels.
#[component]
fn Answer() -> impl IntoView {
    let training = expect_context::<Training>();
    let computed = expect_context::<Memo<Computed>>();
    let form = expect_context::<Form>();
    let focus = form.focus;
    let failed = form.lookup_failed;
    view! {
        <section class="answer" aria-label="The answer" data-testid="answer">
            {move || failed.get().map(|e| view! {
                <p class="banner error" role="alert" data-testid="lookup-failed">{e}</p>
            })}
            {move || {
                let pairs = computed.with(|c| c.workloads.get(focus.get()).map(|w| w.pairs.clone()));
                let tensors = form.imported.with(|i| i.as_ref().map(|i| i.summary.clone()));
                let got = pairs.as_ref().and_then(|p| {
                    answer(p, tensors.as_ref(), &form.page_pairs(), training)
                });
                match (got, pairs) {
                    (Some(Ok(doc)), Some(p)) => {
                        let mut page = vec![("answer", doc)];
                        page.extend(model_name(&form).map(|m| ("model-name", m)));
                        let html = drawn(training.rules(), "answer_view", &p, &page, &form);
                        view! { <div class="drawn" inner_html=html></div> }.into_any()
                    }
                    (other, _) => {
                        let why = match other {
                            Some(Err(e)) => e,
                            _ => "the inputs do not describe a workload yet (see the messages beside the fields)".into(),
                        };
                        // While the engine rules load, no verdict word yet.
                        let word = if why.ends_with('…') { "…" } else { "NO ANSWER" };
                        view! {
                            <p class="verdict-line"><span class="word no" data-testid="answer-verdict">{word}</span> " — " {why}</p>
                        }.into_any()
                    }
                }
            }}
            <div class="answer-card"><crate::inputs::Field key="card"/><crate::inputs::Field key="engine"/></div>
        </section>
    }
}

/// Typical / long / near-limit, side by side, judged on the target card (their
/// figures drawn by the engine module).
#[component]
fn WorkloadCards() -> impl IntoView {
    let training = expect_context::<Training>();
    let computed = expect_context::<Memo<Computed>>();
    let form = expect_context::<Form>();
    let focus = form.focus;
    let card = form.sig("card");
    view! {
        <div class="wcards" role="tablist" aria-label="Workloads">
            {WORKLOADS
                .iter()
                .enumerate()
                .map(|(i, (title, _))| {
                    let w = Memo::new(move |_| computed.with(|c| c.workloads[i].clone()));
                    let form = form.clone();
                    let body = move || {
                        let w = w.get();
                        let dims: Vec<String> = DIMS
                            .iter()
                            .map(|d| {
                                w.pairs
                                    .iter()
                                    .find(|(k, _)| k == d)
                                    .map_or("–".to_string(), |(_, v)| v.clone())
                            })
                            .collect();
                        let shape = format!(
                            "{} seq × {} prompt + {} generated",
                            dims[0].replace('–', "1"),
                            dims[1],
                            dims[2].replace('–', "0")
                        );
                        let head = format!(
                            r#"<span class="wtitle">{title}</span><span class="wdims">{}</span>"#,
                            esc(&shape, usize::MAX)
                        );
                        match w.result {
                            Ok(_) => {
                                // Under an engine, its budget is the need (the answer's own
                                // headline), never the estimate's transformers-style total.
                                let page = form.page_pairs();
                                let under_engine = page.iter().any(|(k, _)| *k == "engine");
                                let tensors = form.imported.with(|i| i.as_ref().map(|i| i.summary.clone()));
                                let answered = under_engine
                                    .then(|| answer(&w.pairs, tensors.as_ref(), &page, training))
                                    .flatten()
                                    .and_then(|a| a.ok());
                                let mut page = vec![
                                    ("index", i.to_string()),
                                    ("card", card.get()),
                                    ("estimate", w.document),
                                ];
                                page.extend(answered.map(|a| ("answer", a)));
                                head + &drawn(training.rules(), "card_view", &[], &page, &form)
                            }
                            Err(err) => format!(
                                r#"{head}<span class="wtotal muted">—</span><span class="verdict no">{}</span>"#,
                                esc(&err.to_string(), usize::MAX)
                            ),
                        }
                    };
                    view! {
                        <button
                            type="button"
                            role="tab"
                            class="wcard"
                            data-testid=format!("workload-{i}")
                            aria-selected=move || (focus.get() == i).to_string()
                            on:click=move |_| focus.set(i)
                            inner_html=body
                        ></button>
                    }
                })
                .collect_view()}
        </div>
    }
}

/// Method §11: change one variable at a time and watch the need move (the rows drawn
/// by the engine module from each value's estimate).
#[component]
fn Sweep() -> impl IntoView {
    let training = expect_context::<Training>();
    let computed = expect_context::<Memo<Computed>>();
    let form = expect_context::<Form>();
    let vary = form.sig("vary");
    let card = form.sig("card");
    let rows = {
        let form = form.clone();
        Memo::new(move |_| {
            let dim = match vary.get().trim() {
                "sequences" => "sequences",
                "generate" => "generate",
                _ => "context",
            };
            let pairs = computed.with(|c| c.workloads[0].pairs.clone());
            let keys = form.page_pairs();
            let tensors = form
                .imported
                .with(|i| i.as_ref().map(|i| i.summary.clone()));
            let base = pairs
                .iter()
                .find(|(k, _)| *k == dim)
                .and_then(|(_, v)| parse_count(dim, v).ok())
                .unwrap_or(match dim {
                    "sequences" => 1,
                    "generate" => 256,
                    _ => 2048,
                })
                .max(1);
            let mut page = vec![("card", card.get())];
            for v in sweep_values(base) {
                let mut p = pairs.clone();
                p.retain(|(k, _)| *k != dim);
                p.push((dim, v.to_string()));
                page.push(("value", v.to_string()));
                page.push(("base", if v == base { "1" } else { "0" }.to_string()));
                page.push(match training.estimate_text(&p, &keys, tensors.as_ref()) {
                    Ok(doc) => ("estimate", doc),
                    Err(why) => ("error", pending(why).to_string()),
                });
            }
            let r = form
                .imported
                .with(|i| request(&[], &page, i.as_ref().map(|i| &i.summary)));
            // Until the engine module draws them, each value with why it has no figure.
            training.rules().draw("sweep_view", &r).unwrap_or_else(|why| {
                let why = pending(why).to_string();
                page.iter()
                    .filter(|(k, _)| *k == "value")
                    .map(|(_, v)| {
                        let v = v.parse().map_or_else(|_| v.clone(), group_digits);
                        format!(r#"<tr><td class="num mono">{v}</td><td colspan="3" class="muted">{}</td></tr>"#, esc(&why, usize::MAX))
                    })
                    .collect()
            })
        })
    };
    view! {
        <section class="sweep" aria-label="Vary one dimension">
            <h3>"Vary one dimension at a time"</h3>
            <div class="sweep-controls">
                <Field key="vary" label="Dimension" choices=&[
                    ("", "prompt tokens"), ("sequences", "sequences together"),
                    ("generate", "generated tokens"),
                ]/>
            </div>
            <table class="sweep-table" data-testid="sweep">
                <thead>
                    <tr>
                        <th scope="col" class="num">"Value"</th>
                        <th scope="col" class="num">"KV cache"</th>
                        <th scope="col" class="num">"Most loaded device"</th>
                        <th scope="col">"On the chosen card"</th>
                    </tr>
                </thead>
                <tbody inner_html=move || rows.get()></tbody>
            </table>
        </section>
    }
}

/// The same estimate as a command line (the typical workload, with the engine's flags
/// when one is named), in the engine module's words (`command_view`).
#[component]
fn Command() -> impl IntoView {
    let computed = expect_context::<Memo<Computed>>();
    let form = expect_context::<Form>();
    let rules = expect_context::<Rules>();
    let cmd = Memo::new(move |_| {
        let pairs = computed.with(|c| c.workloads[0].pairs.clone());
        let mut page = form.page_pairs();
        if form.imported.with(|i| i.is_some()) {
            page.push(("imported", "1".into()));
        }
        rules
            .draw("command_view", &request(&pairs, &page, None))
            .unwrap_or_default()
    });
    view! {
        <section class="command" aria-label="Command line">
            <h3>"Same estimate on the command line"</h3>
            <pre data-testid="cli-command"><code>{move || cmd.get()}</code></pre>
            <p class="note">"The link in the address bar carries the same keys; share it to reproduce this page."</p>
        </section>
    }
}
