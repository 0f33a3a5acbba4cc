//! The input panel: every R-EST input, each bound to the raw text of its key, with
//! its error (if any) shown beside it. Presets and file import write into the
//! same keys, so whatever they set is visible, editable and in the URL.

use gpumem_core::params::from_pairs;
use gpumem_core::presets::PRESETS;
use leptos::prelude::*;

use crate::compute::{Computed, WORKLOADS, dim_key};
use crate::lookup::ImportZone;
use crate::state::{Form, Mode};

/// How a field is edited.
#[derive(Clone, Copy)]
pub enum Kind {
    /// A whole number, typed freely (`7e9`, `7 000 000 000`).
    Count,
    /// Free text with suggestions from a `<datalist>` of this id.
    Text(&'static str),
    /// One of fixed choices: (value, label); "" means the default.
    Choice(&'static [(&'static str, &'static str)]),
    /// A yes/no switch and its default.
    Bool(bool),
}

fn error_of(key: &'static str) -> Memo<Option<String>> {
    let computed = expect_context::<Memo<Computed>>();
    Memo::new(move |_| computed.with(|c| c.field_errors.get(key).cloned()))
}

/// One labelled input with its message.
#[component]
pub fn Field(
    /// The shared key (CLI flag without dashes) or a page key.
    key: &'static str,
    /// What the user reads.
    label: &'static str,
    /// How it is edited.
    #[prop(default = Kind::Count)]
    kind: Kind,
    /// One line of help under the field.
    #[prop(default = "")]
    hint: &'static str,
    /// Shown when empty: usually the default.
    #[prop(default = "")]
    placeholder: &'static str,
) -> impl IntoView {
    let form = expect_context::<Form>();
    let sig = form.sig(key);
    let err = error_of(key);
    let msg_id = format!("{key}-msg");
    let control = control(key, kind, sig, err, msg_id.clone(), placeholder, None);
    view! {
        <div class="field" class:invalid=move || err.get().is_some() class:bool=matches!(kind, Kind::Bool(_))>
            <label for=key>{label}</label>
            {control}
            <p class="msg" id=msg_id aria-live="polite">
                {move || err.get()}
                {move || (err.get().is_none() && !hint.is_empty()).then_some(hint)}
            </p>
        </div>
    }
}

/// The bare control of a field (shared by labelled fields and table cells).
fn control(
    key: &'static str,
    kind: Kind,
    sig: RwSignal<String>,
    err: Memo<Option<String>>,
    msg_id: String,
    placeholder: &'static str,
    aria_label: Option<String>,
) -> AnyView {
    let invalid = move || if err.get().is_some() { "true" } else { "false" };
    match kind {
        Kind::Count | Kind::Text(_) => {
            let list = match kind {
                Kind::Text(l) if !l.is_empty() => Some(l),
                _ => None,
            };
            view! {
                <input
                    type="text"
                    id=key
                    name=key
                    data-key=key
                    autocomplete="off"
                    spellcheck="false"
                    inputmode=if list.is_none() { "numeric" } else { "text" }
                    list=list
                    placeholder=placeholder
                    aria-label=aria_label
                    aria-invalid=invalid
                    aria-describedby=msg_id
                    prop:value=move || sig.get()
                    on:input=move |ev| sig.set(event_target_value(&ev))
                />
            }
            .into_any()
        }
        Kind::Choice(choices) => view! {
            <select
                id=key
                name=key
                data-key=key
                aria-invalid=invalid
                aria-describedby=msg_id
                prop:value=move || sig.get()
                on:change=move |ev| sig.set(event_target_value(&ev))
            >
                {choices
                    .iter()
                    .map(|(v, l)| view! { <option value=*v>{*l}</option> })
                    .collect_view()}
                // A value from a link that is not a choice stays visible (and flagged).
                {move || {
                    let v = sig.get();
                    (!v.is_empty() && !choices.iter().any(|(c, _)| *c == v))
                        .then(|| view! { <option value=v.clone()>{v.clone()}</option> })
                }}
            </select>
        }
        .into_any(),
        Kind::Bool(default) => {
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

/// A table cell holding a bare control (the workloads grid).
#[component]
fn Cell(key: String, aria: String, placeholder: Signal<String>) -> impl IntoView {
    let form = expect_context::<Form>();
    // Page and CLI keys are 'static strings in the vocabulary; find ours.
    let key: &'static str = crate::state::PAGE_KEYS
        .iter()
        .chain(gpumem_core::params::KEYS)
        .find(|k| **k == key)
        .copied()
        .unwrap_or("context");
    let sig = form.sig(key);
    let err = error_of(key);
    let msg_id = format!("{key}-msg");
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
                prop:value=move || sig.get()
                on:input=move |ev| sig.set(event_target_value(&ev))
            />
            <p class="msg" id=msg_id aria-live="polite">{move || err.get()}</p>
        </td>
    }
}

/// Shape counts beyond the plain decoder (one loop, so the page's code stays small):
/// (key, label, placeholder).
const EXTRA_COUNTS: &[(&str, &str, &str)] = &[
    ("layer-norms", "Norms per layer", "2"),
    ("learned-positions", "Learned positions", "none"),
    ("max-position", "Trained positions", "unknown"),
    ("kv-lora-rank", "MLA KV latent rank", "no MLA"),
    ("q-lora-rank", "MLA query rank", "0"),
    ("qk-nope-dim", "MLA q/k no-RoPE dim", ""),
    ("qk-rope-dim", "MLA RoPE dim", ""),
    ("v-head-dim", "MLA value dim", ""),
    ("mtp-layers", "MTP layers", "0"),
    ("tower-params", "Vision/audio tower parameters", "0"),
    ("moe-every", "MoE every n-th layer", "1"),
];

/// Flags beyond the plain decoder: (key, label).
const EXTRA_FLAGS: &[(&str, &str)] = &[
    ("qk-norm-whole", "q/k norm over the projection"),
    ("attn-sinks", "Attention sinks"),
    ("router-bias", "MoE router bias"),
];

const FORMATS: &[&str] = &[
    "bf16",
    "mxfp4",
    "nvfp4",
    "nvfp4a16",
    "fp8-channel",
    "w4a16-g128",
    "fp16",
    "fp32",
    "fp8",
    "fp8-block",
    "int8",
    "gptq-4-g128",
    "gptq-8-g128",
    "gptq-3-g128",
    "gptq-4-g32",
    "awq-4-g128",
    "nf4",
    "nf4-dq",
    "fp4",
    "q4_0",
    "q4_k",
    "q5_k",
    "q6_k",
    "q8_0",
];
const KEEP_FORMATS: &[&str] = &["bf16", "fp16", "fp32", "fp8", "int8"];
const DTYPES: &[&str] = &["bf16", "fp16", "fp32", "fp8"];
const KV_DTYPES: &[&str] = &["bf16", "fp16", "fp32", "fp8", "int8", "int4", "int2"];

fn datalist(id: &'static str, options: &'static [&'static str]) -> impl IntoView {
    view! {
        <datalist id=id>
            {options.iter().map(|o| view! { <option value=*o></option> }).collect_view()}
        </datalist>
    }
}

/// The whole input column.
#[component]
pub fn InputsPanel() -> impl IntoView {
    let form = expect_context::<Form>();
    let mode = form.mode;
    let experts = form.sig("experts");
    view! {
        <section class="panel inputs" aria-label="Inputs">
            {datalist("formats", FORMATS)}
            {datalist("keep-formats", KEEP_FORMATS)}
            {datalist("dtypes", DTYPES)}
            {datalist("kv-dtypes", KV_DTYPES)}

            <fieldset class="group">
                <legend>"Model"</legend>
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
                        on:click=move |_| mode.set(Mode::Count)
                    >"Parameter count"</button>
                </div>
                <Show
                    when=move || mode.get() == Mode::Arch
                    fallback=|| view! {
                        <div class="grid2">
                            <Field key="parameters" label="Parameters" placeholder="7000000000"
                                hint="Total parameters: 7e9, 7 000 000 000 …"/>
                            <Field key="bits" label="Bits per parameter" placeholder="16"
                                hint="32, 16, 8, 4, 3 or 2 — or name a storage format below"/>
                        </div>
                    }
                >
                    <PresetPicker/>
                    <div class="grid3">
                        <Field key="layers" label="Layers"/>
                        <Field key="hidden" label="Hidden size"/>
                        <Field key="intermediate" label="MLP intermediate"/>
                        <Field key="heads" label="Attention heads"/>
                        <Field key="kv-heads" label="KV heads" placeholder="= heads"/>
                        <Field key="head-dim" label="Head dim" placeholder="hidden ÷ heads"/>
                        <Field key="vocab" label="Vocabulary"/>
                    </div>
                    <div class="flags">
                        <Field key="gated-mlp" label="Gated MLP" kind=Kind::Bool(true)/>
                        <Field key="tied-embeddings" label="Tied embeddings" kind=Kind::Bool(false)/>
                        <Field key="qkv-bias" label="q/k/v bias" kind=Kind::Bool(false)/>
                        <Field key="o-bias" label="o bias" kind=Kind::Bool(false)/>
                        <Field key="mlp-bias" label="MLP bias" kind=Kind::Bool(false)/>
                        <Field key="qk-norm" label="q/k norm" kind=Kind::Bool(false)/>
                        <Field key="layernorm-bias" label="LayerNorm bias" kind=Kind::Bool(false)/>
                    </div>
                    <details class="sub" open=move || !experts.get().trim().is_empty()>
                        <summary>"Mixture of experts"</summary>
                        <div class="grid3">
                            <Field key="experts" label="Routed experts" placeholder="none"/>
                            <Field key="active-experts" label="Active per token"/>
                            <Field key="expert-intermediate" label="Expert intermediate"
                                placeholder="= intermediate"/>
                            <Field key="shared-experts" label="Shared experts" placeholder="0"/>
                            <Field key="shared-intermediate" label="Shared intermediate"/>
                            <Field key="dense-layers" label="Leading dense layers" placeholder="0"/>
                        </div>
                    </details>
                    <details class="sub">
                        <summary>"Attention variants and extra tensors"</summary>
                        <div class="grid3">
                            {EXTRA_COUNTS.iter().map(|&(key, label, placeholder)| view! {
                                <Field key label placeholder/>
                            }).collect_view()}
                        </div>
                        <div class="flags">
                            {EXTRA_FLAGS.iter().map(|&(key, label)| view! {
                                <Field key label kind=Kind::Bool(false)/>
                            }).collect_view()}
                        </div>
                    </details>
                </Show>
                <ImportZone/>
            </fieldset>

            <fieldset class="group">
                <legend>"Formats"</legend>
                <div class="grid3">
                    <Field key="format" label="Storage (linear layers)" kind=Kind::Text("formats")
                        placeholder="bf16" hint="gptq-4-g128, awq-4-g128, nf4-dq, q4_k, fp8-block …"/>
                    <Field key="attention-format" label="Attention projections" kind=Kind::Text("formats")
                        placeholder="= storage" hint="bf16 when the quantiser left attention out"/>
                    <Field key="keep-format" label="Kept modules" kind=Kind::Text("keep-formats")
                        placeholder="bf16" hint="Embeddings, lm_head, norms, biases"/>
                    <Field key="compute-dtype" label="Compute dtype" kind=Kind::Text("dtypes")
                        placeholder="bf16"/>
                </div>
            </fieldset>

            <fieldset class="group">
                <legend>"Workloads and KV cache"</legend>
                <WorkloadGrid/>
                <div class="grid3">
                    <Field key="kv-dtype" label="KV cache dtype" kind=Kind::Text("kv-dtypes")
                        placeholder="= compute" hint="int8/int4/int2: quantised cache with its scales"/>
                    <Field key="static-cache" label="Static cache length" placeholder="dynamic"
                        hint="Pre-allocated tokens per sequence"/>
                    <Field key="sliding-window" label="Sliding window" placeholder="none"/>
                    <Field key="sliding-layers" label="Sliding layers" placeholder="all"/>
                    <Field key="state-layers" label="State layers (Mamba / linear)" placeholder="0"
                        hint="Layers with a constant per-sequence state instead of KV"/>
                    <Field key="state-bytes" label="State bytes per layer" placeholder="0"/>
                </div>
            </fieldset>

            <fieldset class="group">
                <legend>"Inference transients (assumed)"</legend>
                <div class="grid3">
                    <Field key="attention" label="Attention kernel" kind=Kind::Choice(&[
                        ("", "sdpa (default)"), ("flash", "flash"), ("eager", "eager — tokens² scores"),
                    ])/>
                    <Field key="logits" label="Logits kept" kind=Kind::Choice(&[
                        ("", "last position (default)"), ("all", "all positions"),
                    ])/>
                    <Field key="cuda-context-mib" label="CUDA context (MiB)" placeholder="in reserve"
                        hint="Per device; the agent measures it"/>
                </div>
            </fieldset>

            <fieldset class="group">
                <legend>"Training"</legend>
                <div class="grid3">
                    <Field key="train" label="Mode" kind=Kind::Choice(&[
                        ("", "inference (default)"), ("full", "full fine-tuning"), ("lora", "LoRA"),
                    ])/>
                    <Field key="optimizer" label="Optimizer" kind=Kind::Choice(&[
                        ("", "AdamW (default)"), ("adamw8bit", "AdamW 8-bit"),
                        ("sgd-momentum", "SGD + momentum"), ("sgd", "SGD"), ("none", "none"),
                    ])/>
                    <Field key="grad-dtype" label="Gradient dtype" kind=Kind::Text("dtypes")
                        placeholder="= compute"/>
                    <Field key="lora-rank" label="LoRA rank" placeholder="16"/>
                    <Field key="lora-targets" label="LoRA targets" kind=Kind::Text("")
                        placeholder="q,k,v,o" hint="q,k,v,o,gate,up,down or all"/>
                    <div class="flags">
                        <Field key="master-weights" label="fp32 master weights" kind=Kind::Bool(true)/>
                        <Field key="checkpointing" label="Activation checkpointing" kind=Kind::Bool(false)/>
                    </div>
                </div>
            </fieldset>

            <fieldset class="group">
                <legend>"Devices and reserve"</legend>
                <div class="grid3">
                    <Field key="reserve-gib" label="Reserve (GiB)" placeholder="4"
                        hint="A preparation hypothesis, not proof"/>
                    <Field key="reserve-bytes" label="…or reserve (bytes)" placeholder="—"
                        hint="e.g. the agent's observed overhead"/>
                    <Field key="gpus" label="GPUs" placeholder="1"/>
                    <Field key="tp" label="Tensor parallel" placeholder="1"/>
                    <Field key="pp" label="Pipeline stages" placeholder="1"/>
                </div>
                <p class="note">
                    "Several GPUs never pool their memory: the split decides what each device holds, "
                    "and the most loaded device must fit on its own card."
                </p>
            </fieldset>
        </section>
    }
}

/// Typical / long / near-limit dimensions side by side.
#[component]
fn WorkloadGrid() -> impl IntoView {
    let form = expect_context::<Form>();
    let rows: [(&'static str, &'static str); 3] = [
        ("sequences", "Sequences together"),
        ("context", "Prompt tokens"),
        ("generate", "Generated tokens"),
    ];
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
                {rows
                    .into_iter()
                    .map(|(dim, label)| {
                        let typical = form.sig(dim);
                        view! {
                            <tr>
                                <th scope="row">{label}</th>
                                {WORKLOADS
                                    .iter()
                                    .map(|(title, prefix)| {
                                        let key = dim_key(prefix, dim);
                                        let placeholder = if prefix.is_empty() {
                                            Signal::derive(move || match dim {
                                                "sequences" => "1".to_string(),
                                                "generate" => "0".to_string(),
                                                _ => "none".to_string(),
                                            })
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
    let shape = {
        let form = form.clone();
        Memo::new(move |_| {
            let pairs: Vec<(&'static str, String)> = gpumem_core::presets::SHAPE_KEYS
                .iter()
                .map(|k| (*k, form.sig(k).get()))
                .filter(|(_, v)| !v.trim().is_empty())
                .collect();
            let (input, _) = from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
            (input.arch, input.sliding_window, input.sliding_layers)
        })
    };
    let current = Memo::new(move |_| {
        let s = shape.get();
        PRESETS.iter().position(|p| {
            let (i, _) = from_pairs(p.pairs.iter().copied());
            s.0.is_some() && (i.arch, i.sliding_window, i.sliding_layers) == s
        })
    });
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
