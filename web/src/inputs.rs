//! The input panel: every estimator input, each bound to the raw text of its key, with
//! its error (if any) shown beside it. Presets and file import write into the
//! same keys, so whatever they set is visible, editable and in the URL.
//!
//! Labels, hints, placeholders, choices and a switch's default all come from the
//! field table ([`gpumem_core::inputs`]: the estimate's keys and the engines'); the
//! page only decides which group
//! goes in which section.

use gpumem_core::catalogue::CATALOGUE;
use gpumem_core::fields::Unit;
use gpumem_core::inputs::{field, table};
use gpumem_core::params::{FieldGroup, FieldKind};
use gpumem_core::presets::PRESETS;
use leptos::prelude::*;

use crate::compute::{Computed, WORKLOADS, dim_key, preset_index};
use crate::lookup::ImportZone;
use crate::state::{Form, KV_SHAPE_KEYS, Mode};

fn error_of(key: &'static str) -> Memo<Option<String>> {
    let computed = expect_context::<Memo<Computed>>();
    Memo::new(move |_| computed.with(|c| c.field_errors.get(key).cloned()))
}

/// How a field looks: the table's entry, or for a page-only key (`vary`) the
/// label and choices its caller gives.
#[derive(Clone, Copy)]
struct Spec {
    kind: FieldKind,
    label: &'static str,
    unit: Unit,
    hint: &'static str,
    placeholder: &'static str,
    choices: &'static [(&'static str, &'static str)],
}

fn spec(key: &str, label: &'static str, choices: &'static [(&'static str, &'static str)]) -> Spec {
    match field(key) {
        Some(f) => Spec {
            kind: f.kind,
            label: f.label,
            unit: f.unit,
            hint: f.help,
            placeholder: f.placeholder,
            choices: f.choices,
        },
        None => Spec {
            kind: if choices.is_empty() {
                FieldKind::Count
            } else {
                FieldKind::Choice
            },
            label,
            unit: Unit::None,
            hint: "",
            placeholder: "",
            choices,
        },
    }
}

/// One labelled input with its message, described by the field table.
#[component]
pub fn Field(
    /// The key: a field of the table, or a page key.
    key: &'static str,
    /// A page key's label (a table key takes its own).
    #[prop(default = "")]
    label: &'static str,
    /// A page key's choices (a table key takes its own).
    #[prop(default = &[])]
    choices: &'static [(&'static str, &'static str)],
) -> impl IntoView {
    let s = spec(key, label, choices);
    let form = expect_context::<Form>();
    let sig = form.sig(key);
    let err = error_of(key);
    let msg_id = format!("{key}-msg");
    let control = control(key, s, sig, err, msg_id.clone());
    let hint = s.hint;
    view! {
        <div class="field" class:invalid=move || err.get().is_some() class:bool=matches!(s.kind, FieldKind::Bool(_))>
            <label for=key>{s.label}{(s.unit != Unit::None).then(|| format!(" ({})", s.unit.name()))}</label>
            {control}
            <p class="msg" id=msg_id aria-live="polite">
                {move || err.get()}
                {move || (err.get().is_none() && !hint.is_empty()).then_some(hint)}
            </p>
        </div>
    }
}

/// The bare control of a field.
fn control(
    key: &'static str,
    s: Spec,
    sig: RwSignal<String>,
    err: Memo<Option<String>>,
    msg_id: String,
) -> AnyView {
    let invalid = move || if err.get().is_some() { "true" } else { "false" };
    match s.kind {
        FieldKind::Count | FieldKind::Text | FieldKind::Fraction | FieldKind::Card => {
            // A card is typed (an id, a short form such as 4090, a capacity such as
            // 24GiB); the catalogue's ids are its suggestions.
            let card = matches!(s.kind, FieldKind::Card);
            let list = (card || !s.choices.is_empty()).then(|| format!("{key}-choices"));
            let mode = match s.kind {
                FieldKind::Count => "numeric",
                FieldKind::Fraction => "decimal",
                _ => "text",
            };
            view! {
                <input
                    type="text"
                    id=key
                    name=key
                    data-key=key
                    autocomplete="off"
                    spellcheck="false"
                    inputmode=mode
                    list=list.clone()
                    placeholder=s.placeholder
                    aria-invalid=invalid
                    aria-describedby=msg_id
                    prop:value=move || sig.get()
                    on:input=move |ev| sig.set(event_target_value(&ev))
                />
                {list.map(|id| view! {
                    <datalist id=id>
                        {if card {
                            CATALOGUE.iter().map(|c| view! { <option value=c.id>{c.name}</option> }).collect_view().into_any()
                        } else {
                            s.choices.iter().map(|(v, _)| view! { <option value=*v></option> }).collect_view().into_any()
                        }}
                    </datalist>
                })}
            }
            .into_any()
        }
        FieldKind::Choice => {
            let options: Vec<(&'static str, &'static str)> = s.choices.to_vec();
            let known = options.clone();
            view! {
                <select
                    id=key
                    name=key
                    data-key=key
                    aria-invalid=invalid
                    aria-describedby=msg_id
                    prop:value=move || sig.get()
                    on:change=move |ev| sig.set(event_target_value(&ev))
                >
                    {options
                        .into_iter()
                        .map(|(v, l)| view! {
                            <option value=v>{l}{v.is_empty().then_some(" (default)")}</option>
                        })
                        .collect_view()}
                    // A value from a link that is not a choice stays visible (and flagged).
                    {move || {
                        let v = sig.get();
                        (!v.is_empty() && !known.iter().any(|(c, _)| *c == v))
                            .then(|| view! { <option value=v.clone()>{v.clone()}</option> })
                    }}
                </select>
            }
            .into_any()
        }
        FieldKind::Bool(default) => {
            let checked = move || match sig.get().trim() {
                "" => default,
                t => matches!(t.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"),
            };
            view! {
                <input
                    type="checkbox"
                    id=key
                    name=key
                    data-key=key
                    aria-invalid=invalid
                    aria-describedby=msg_id
                    prop:checked=checked
                    on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        // The default is written as nothing, so links stay short.
                        sig.set(if on == default { String::new() } else { on.to_string() });
                    }
                />
            }
            .into_any()
        }
    }
}

/// Every field of `groups` (in table order): values in a grid, switches after them.
/// `skip` leaves out keys shown elsewhere (the engine's card sits by the sweep).
pub fn group_fields(groups: &'static [FieldGroup], skip: &'static [&'static str]) -> impl IntoView {
    let of = move |bools: bool| {
        // The groups given are of one table (the engine group alone, or the estimate's).
        table(groups[0])
            .iter()
            .filter(move |f| {
                groups.contains(&f.group)
                    && !skip.contains(&f.key)
                    && matches!(f.kind, FieldKind::Bool(_)) == bools
            })
            .map(|f| view! { <Field key=f.key/> })
            .collect_view()
    };
    view! {
        <div class="grid3">{of(false)}</div>
        <div class="flags">{of(true)}</div>
    }
}

/// A table cell holding a bare control (the workloads grid).
#[component]
fn Cell(key: String, aria: String, placeholder: Signal<String>) -> impl IntoView {
    let form = expect_context::<Form>();
    // Every key is a 'static string of the vocabulary; find ours.
    let key: &'static str = crate::state::url_keys()
        .find(|k| *k == key)
        .unwrap_or("context");
    let sig = form.sig(key);
    let err = error_of(key);
    let msg_id = format!("{key}-msg");
    // What the workload runs at: a training run's longer workloads follow its context
    // (`compute::workload_pairs`), and the cell shows the context they run at.
    let computed = expect_context::<Memo<Computed>>();
    let at = WORKLOADS
        .iter()
        .position(|(_, p)| !p.is_empty() && key == dim_key(p, "context"));
    let shown = move || {
        let typed = sig.get();
        if typed.trim().is_empty() {
            return typed;
        }
        at.and_then(|i| {
            computed.with(|c| {
                c.workloads
                    .get(i)?
                    .pairs
                    .iter()
                    .find(|(k, _)| *k == "context")
                    .map(|(_, v)| v.clone())
            })
        })
        .unwrap_or(typed)
    };
    view! {
        <td class:invalid=move || err.get().is_some()>
            <input
                type="text"
                id=key
                name=key
                data-key=key
                inputmode="numeric"
                autocomplete="off"
                aria-label=aria
                aria-invalid=move || if err.get().is_some() { "true" } else { "false" }
                aria-describedby=msg_id.clone()
                placeholder=move || placeholder.get()
                prop:value=shown
                on:input=move |ev| sig.set(event_target_value(&ev))
            />
            <p class="msg" id=msg_id aria-live="polite">{move || err.get()}</p>
        </td>
    }
}

/// The whole input column.
#[component]
pub fn InputsPanel() -> impl IntoView {
    use FieldGroup as G;
    let form = expect_context::<Form>();
    let computed = expect_context::<Memo<Computed>>();
    let mode = form.mode;
    let experts = form.sig("experts");
    view! {
        <section class="panel inputs" aria-label="Inputs">
            // The questions first — which model, how much of it at once — and the
            // shape they give below, folded once a preset, a lookup or a file set it.
            <fieldset class="group">
                <legend>"Model"</legend>
                <ImportZone/>
            </fieldset>

            <fieldset class="group">
                <legend>"Workloads and KV cache"</legend>
                <WorkloadGrid/>
                {group_fields(&[G::Cache, G::CacheShape], &[])}
            </fieldset>

            <fieldset class="group">
                <legend>"Architecture"</legend>
                <div class="modes" role="radiogroup" aria-label="How the model is described">
                    <button
                        type="button"
                        role="radio"
                        data-testid="mode-arch"
                        aria-checked=move || (mode.get() == Mode::Arch).to_string()
                        on:click=move |_| mode.set(Mode::Arch)
                    >"Architecture"</button>
                    <button
                        type="button"
                        role="radio"
                        data-testid="mode-count"
                        aria-checked=move || (mode.get() == Mode::Count).to_string()
                        on:click=move |_| {
                            // Starts from the model shown (its count), not from an error.
                            let count = form.sig("parameters");
                            if count.get_untracked().trim().is_empty()
                                && let Some(p) = computed.with_untracked(|c| {
                                    c.workloads.first().and_then(|w| w.result.as_ref().ok()?.parameters)
                                })
                            {
                                count.set(p.to_string());
                            }
                            mode.set(Mode::Count)
                        }
                    >"Parameter count"</button>
                </div>
                <Show
                    when=move || mode.get() == Mode::Arch
                    fallback=|| view! {
                        {group_fields(&[G::Model], &[])}
                        <p class="note">"The KV cache's shape:"</p>
                        <div class="grid3">
                            {KV_SHAPE_KEYS.map(|k| view! { <Field key=k/> }).collect_view()}
                        </div>
                    }
                >
                    <PresetPicker/>
                    {group_fields(&[G::Architecture], &[])}
                    <details class="sub" open=move || !experts.get().trim().is_empty()>
                        <summary>"Mixture of experts"</summary>
                        {group_fields(&[G::Moe], &[])}
                    </details>
                    <details class="sub">
                        <summary>"Attention variants and extra tensors"</summary>
                        {group_fields(&[G::Variants], &[])}
                    </details>
                </Show>
            </fieldset>

            <fieldset class="group">
                <legend>"Formats"</legend>
                {group_fields(&[G::Format], &[])}
            </fieldset>

            <fieldset class="group">
                <legend>"Inference transients (assumed)"</legend>
                {group_fields(&[G::Transients], &[])}
            </fieldset>

            <fieldset class="group">
                <legend>"Training"</legend>
                {group_fields(&[G::Training], &[])}
            </fieldset>

            <fieldset class="group">
                <legend>"Devices and reserve"</legend>
                {group_fields(&[G::Devices], &[])}
                <p class="note">
                    "Several GPUs never pool their memory: the split decides what each device holds, "
                    "and the most loaded device must fit on its own card."
                </p>
            </fieldset>
        </section>
    }
}

/// Typical / long / near-limit dimensions side by side (the workload group of the
/// table: its labels, and its placeholders for the typical column).
#[component]
fn WorkloadGrid() -> impl IntoView {
    let form = expect_context::<Form>();
    view! {
        <table class="wgrid">
            <caption class="sr">"Workload dimensions"</caption>
            <thead>
                <tr>
                    <th scope="col"></th>
                    {WORKLOADS.iter().map(|(t, _)| view! { <th scope="col">{*t}</th> }).collect_view()}
                </tr>
            </thead>
            <tbody>
                {table(FieldGroup::Workload)
                    .iter()
                    .filter(|f| f.group == FieldGroup::Workload)
                    .map(|f| {
                        let (dim, label) = (f.key, f.label);
                        let typical = form.sig(dim);
                        view! {
                            <tr>
                                <th scope="row">{label}</th>
                                {WORKLOADS
                                    .iter()
                                    .map(|(title, prefix)| {
                                        let key = dim_key(prefix, dim);
                                        let placeholder = if prefix.is_empty() {
                                            Signal::derive(move || f.placeholder.to_string())
                                        } else {
                                            Signal::derive(move || {
                                                let t = typical.get();
                                                if t.is_empty() { "= typical".into() } else { format!("= {t}") }
                                            })
                                        };
                                        view! {
                                            <Cell key aria=format!("{label}, {title}") placeholder/>
                                        }
                                    })
                                    .collect_view()}
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}

/// Picks a published model shape; shows where its numbers come from.
#[component]
fn PresetPicker() -> impl IntoView {
    let form = expect_context::<Form>();
    let rules = expect_context::<crate::rules::Rules>();
    let current = {
        let form = form.clone();
        Memo::new(move |_| {
            let pairs: Vec<(&'static str, String)> = gpumem_core::presets::shape_keys()
                .map(|k| (k, form.sig(k).get()))
                .filter(|(_, v)| !v.trim().is_empty())
                .collect();
            preset_index(&pairs, rules)
        })
    };
    let on_pick = move |ev| {
        let v = event_target_value(&ev);
        if let Some(p) = PRESETS.iter().find(|p| p.id == v) {
            let pairs: Vec<(&str, String)> =
                p.pairs.iter().map(|(k, v)| (*k, v.to_string())).collect();
            form.set_shape(&pairs);
        }
    };
    view! {
        <div class="preset">
            <label for="preset">"Preset"</label>
            <select id="preset" data-testid="preset" on:change=on_pick
                prop:value=move || current.get().map_or("", |i| PRESETS[i].id)>
                <option value="">"— custom shape —"</option>
                {PRESETS.iter().map(|p| view! { <option value=p.id>{p.name}</option> }).collect_view()}
            </select>
            <p class="source">
                {move || match current.get() {
                    Some(i) => {
                        let p = &PRESETS[i];
                        view! {
                            "Source: " {p.source}
                            {(!p.note.is_empty()).then(|| view! { <br/> "Not modelled: " {p.note} })}
                        }.into_any()
                    }
                    None => "Type a shape, pick a published one, or import a config.json.".into_any(),
                }}
            </p>
        </div>
    }
}
