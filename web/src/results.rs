//! The results column: the three workloads side by side, the focused workload's
//! headline figures (raw bytes, GB, GiB), its stacked-bar breakdown and lines
//! (computed or assumed, with the formula's inputs), the per-card fit table and a
//! one-dimension sweep. Every number is the core's; this module only formats.

use gpumem_core::catalogue::{CATALOGUE, GpuCard, resolve};
use gpumem_core::engine::{DeviceShare, SPLIT_NOTE_LLAMA_CPP, SPLIT_NOTE_VLLM};
use gpumem_core::estimate::{Estimate, Group, Kind as LineKind, Line, LineKey};
use gpumem_core::fit::{CardFit, MARGIN_RULE, RESERVE_SIDE, Verdict, fit_estimate, fit_table};
use gpumem_core::headline::{Headline, LABEL_CARDS, LABEL_FORMAT, LABEL_MARGIN, LABEL_SMALLEST};
use gpumem_core::params::parse_count;
use gpumem_core::units::{
    Bytes, group_digits, signed_gb_string, signed_gib_string, signed_group_digits,
};
use gpumem_proto::rules::Answer;
use leptos::prelude::*;

use crate::compute::{
    Computed, DIMS, Estimator, WORKLOADS, answer, inputs_line, preset_index, sweep_values,
};
use crate::history_view::esc;
use crate::inputs::Field;
use crate::state::Form;
use crate::training::{Training, is_loading};

/// "13.04 GiB".
fn gib(b: u64) -> String {
    format!("{} GiB", Bytes(b).gib_string(2))
}

/// "14.00 GB".
fn gb(b: u64) -> String {
    format!("{} GB", Bytes(b).gb_string(2))
}

/// Milliseconds with three decimals, in integer arithmetic (keeps float
/// formatting out of the wasm).
fn millis(ms: f64) -> String {
    let us = (ms.max(0.0) * 1000.0).round() as u64;
    format!("{}.{:03}", us / 1000, us % 1000)
}

/// The card the chart and the sweep are judged against: the one typed (an id, a
/// short form, a capacity), else the first of the catalogue.
fn target_card(form: &Form) -> Memo<GpuCard> {
    let sig = form.sig("card");
    Memo::new(move |_| resolve(sig.get().trim()).unwrap_or(CATALOGUE[0]))
}

/// The core's verdict for one card: its words and its CSS key.
fn verdict(f: &CardFit) -> (&'static str, &'static str) {
    let v = Verdict::of_fit(f);
    (v.text(), v.key())
}

/// The texts of one fit-table row that the CLI's table prints too, from the core's
/// shared helpers: (verdict, its CSS key, headroom in GiB, in bytes, in GB).
fn fit_texts(f: &CardFit) -> (&'static str, &'static str, String, String, String) {
    let (text, key) = verdict(f);
    (
        text,
        key,
        format!("{} GiB", signed_gib_string(f.headroom_bytes, 2)),
        format!("{} B", signed_group_digits(f.headroom_bytes)),
        format!("{} GB", signed_gb_string(f.headroom_bytes, 2)),
    )
}

/// The colour of a line: one per key, shades of one hue per headline group.
fn color(key: LineKey) -> &'static str {
    match key {
        LineKey::WeightsEmbeddings => "#2f5fb8",
        LineKey::WeightsAttention => "#4f86e6",
        LineKey::WeightsMlp => "#1f4a94",
        LineKey::WeightsNorms => "#8fb3f2",
        LineKey::WeightsLmHead => "#6b9bef",
        LineKey::Weights
        | LineKey::WeightsMtp
        | LineKey::WeightsTower
        | LineKey::WeightsEncoderDecoder
        | LineKey::WeightsOther => "#3d6fd0",
        LineKey::KvCache => "#2a9867",
        LineKey::KvCachePrefill
        | LineKey::KvCacheState
        | LineKey::KvCacheDecompressed
        | LineKey::KvCacheIndexer
        | LineKey::KvCacheCross
        | LineKey::KvCacheEncoderOutput => "#7cc8a4",
        LineKey::TrainingGradients => "#e0862a",
        LineKey::TrainingOptimizer => "#b8650f",
        LineKey::TrainingMasterWeights => "#f2a75a",
        LineKey::TrainingAdapters => "#f6c787",
        LineKey::Activations => "#8e57c2",
        LineKey::Logits | LineKey::PrefillLogits => "#b58ad8",
        LineKey::OptimizerStep => "#d4a017",
        LineKey::PrefillMlp => "#9d6ccd",
        LineKey::PrefillAttentionScores => "#c9a7e6",
        LineKey::CudaContext | LineKey::CublasWorkspace => "#6f6484",
        LineKey::TrainingGradBuckets => "#c77a2c",
        LineKey::CollectivesAllGather
        | LineKey::CollectivesReduceScatter
        | LineKey::CollectivesContextParallel
        | LineKey::CollectivesAllToAll => "#5d8f8a",
        LineKey::HostOptimizer
        | LineKey::HostParameters
        | LineKey::HostPaged
        | LineKey::HostActivations => "#b9b2a6",
        LineKey::ModelLoad => "#a3c4bc",
        LineKey::AllocatorCache => "#c3c9d0",
        LineKey::Reserve => "#98a2ad",
    }
}

/// The whole results column.
#[component]
pub fn ResultsPanel() -> impl IntoView {
    let computed = expect_context::<Memo<Computed>>();
    let form = expect_context::<Form>();
    let focus = form.focus;
    let engine = form.sig("engine");
    let focused = Memo::new(move |_| {
        computed.with(|c| c.workloads.get(focus.get()).map(|w| w.result.clone()))
    });
    view! {
        <section class="panel results" aria-label="Results">
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
                Some(Ok(e)) => view! { <Breakdown e/> }.into_any(),
                // Its module still loading: no figures yet (not dashes as if refused).
                Some(Err(err)) if is_loading(&err) => view! {
                    <p class="note" role="status" data-testid="estimate-loading">{err.to_string()}</p>
                }
                .into_any(),
                Some(Err(err)) => view! {
                    <div class="banner error" role="alert" data-testid="estimate-error">
                        <p><strong>"No estimate yet: "</strong> {err.to_string()}</p>
                    </div>
                    <Headline e=None/>
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

/// "20.61 GiB (22.13 GB)": both units, as every figure of the answer.
fn both(b: u64) -> String {
    format!("{} ({})", gib(b), gb(b))
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
/// workload; the CLI prints the same value with the same labels.
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
                    (Some(Ok(a)), Some(p)) => {
                        let line = inputs_line(&p, tensors.as_ref(), model_name(&form).as_deref(), training);
                        answer_body(line, a).into_any()
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

/// `text` with each digit-group space made non-breaking ("4 096" never breaks across
/// lines on a narrow screen).
fn keep_numbers(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let digit = |i: Option<&char>| i.is_some_and(char::is_ascii_digit);
    (0..chars.len())
        .map(|i| {
            let c = chars[i];
            if c == ' ' && i > 0 && digit(chars.get(i - 1)) && digit(chars.get(i + 1)) {
                '\u{a0}'
            } else {
                c
            }
        })
        .collect()
}

/// The answer's figures: each row's test hook, label and text; over several cards,
/// each GPU's row ([`split_table`]).
fn answer_body(line: String, a: Answer) -> impl IntoView {
    let h = a.headline;
    let v = h.verdict();
    let split = (!a.devices.is_empty()).then(|| split_table(a.devices, &h));
    let c = &h.card;
    let pct = format!("{}.{} %", h.used_ppm / 10_000, h.used_ppm / 1_000 % 10);
    let sequences = h.sequences.map(|q| {
        format!(
            "{} of {} at {} tokens fit at once in {}'s pool",
            group_digits(q.fit.min(q.asked)),
            group_digits(q.asked),
            group_digits(q.tokens),
            h.basis
        )
    });
    // Host memory and a Mac's split: the same sentences as the CLI's answer.
    let host = h.host.as_ref().map(|f| f.sentence(h.unified.is_some()));
    let unified = h.unified.as_ref().map(|u| u.sentence());
    let rows = [
        (
            "answer-need",
            "Need",
            format!(
                "{} of {} — {pct} of the card's {} capacity",
                both(c.need_bytes),
                both(c.capacity_bytes),
                c.capacity_kind
            ),
        ),
        (
            "answer-headroom",
            "Headroom",
            format!(
                "{} GiB ({} GB) · {LABEL_MARGIN} ±{}{}{}",
                signed_gib_string(c.headroom_bytes, 2),
                signed_gb_string(c.headroom_bytes, 2),
                gib(h.margin.bytes),
                if h.margin.reserve_bytes > 0 && v != Verdict::Fits {
                    format!(", −{} {RESERVE_SIDE}", gib(h.margin.reserve_bytes))
                } else {
                    String::new()
                },
                if v == Verdict::Borderline {
                    format!(" — {MARGIN_RULE}")
                } else {
                    String::new()
                }
            ),
        ),
        (
            "answer-cards",
            LABEL_CARDS,
            match &h.cards {
                Some(n) => format!(
                    "{} × {} (tp {}{}): {} each",
                    n.cards,
                    c.name,
                    n.tp,
                    if n.pp > 1 {
                        format!(" × pp {}", n.pp)
                    } else {
                        String::new()
                    },
                    both(n.need_bytes)
                ),
                None => h
                    .cards_note
                    .clone()
                    .unwrap_or_else(|| format!("more than 64 × {}", c.name)),
            },
        ),
        (
            "answer-smallest",
            LABEL_SMALLEST,
            h.smallest
                .as_ref()
                .map_or("none in the catalogue".into(), |f| {
                    format!(
                        "{} — {}, headroom {} GiB",
                        f.name,
                        gib(f.capacity_bytes),
                        signed_gib_string(f.headroom_bytes, 2)
                    )
                }),
        ),
        (
            "answer-format",
            LABEL_FORMAT,
            h.format
                .as_ref()
                .map_or("none this workload can take".into(), |f| {
                    format!("{} — {} per device", f.format, both(f.fit.need_bytes))
                }),
        ),
    ];
    let head = format!(
        " on {}{}{}",
        c.name,
        if h.card_given {
            ""
        } else if h.any_fits {
            " (no card chosen: the smallest that fits)"
        } else {
            " (no card chosen, and none holds it alone: the largest)"
        },
        if h.basis == "estimate" {
            String::new()
        } else {
            format!(", under {}'s budget", h.basis)
        }
    );
    let warnings = h.warnings.join(" · ");
    view! {
        <p class="inputs" data-testid="answer-inputs">{keep_numbers(&line)}</p>
        <p class="verdict-line">
            <span class=format!("word {}", v.key()) data-testid="answer-verdict">{v.word()}</span>
            <span data-testid="answer-card">{head}</span>
        </p>
        <svg class="ubar" viewBox="0 0 1000 10" preserveAspectRatio="none" role="img" aria-label=pct>
            <rect class="track" width="1000" height="10"/>
            <rect class=format!("fill {}", v.key()) width=(h.used_ppm / 1_000).min(1_000).to_string() height="10"/>
        </svg>
        <dl class="ways">
            {sequences.map(|t| view! { <dt>"Sequences"</dt><dd data-testid="answer-sequences">{t}</dd> })}
            {rows.into_iter().map(|(id, label, text)| view! { <dt>{label}</dt><dd data-testid=id>{text}</dd> }).collect_view()}
            {host.map(|t| view! { <dt>"Host RAM"</dt><dd data-testid="answer-host">{t}</dd> })}
            {unified.map(|t| view! { <dt>"Unified memory"</dt><dd data-testid="answer-unified">{t}</dd> })}
        </dl>
        {split}
        {(!warnings.is_empty()).then(|| view! { <p class="banner warn" data-testid="answer-warnings">{warnings}</p> })}
    }
}

/// "7.48 (8.03)": GiB, then GB, of a row's figure.
fn gib_gb(b: i64) -> String {
    format!("{} ({})", signed_gib_string(b, 2), signed_gb_string(b, 2))
}

/// The words under the rows: the units, what the rows add up to (the CLI's words),
/// and, when the answer's need is not the most loaded GPU's row's (vLLM's rows hold
/// one sequence; the answer, the sequences asked at once), why.
fn split_note(devices: &[DeviceShare], h: &Headline) -> String {
    format!(
        "GiB (GB); {}{}",
        if h.basis == "vllm" {
            SPLIT_NOTE_VLLM
        } else {
            SPLIT_NOTE_LLAMA_CPP
        },
        match (devices.iter().find(|d| d.most_loaded), &h.sequences) {
            (Some(d), Some(q)) if d.need_bytes != h.card.need_bytes && q.asked > 1 => format!(
                "; the answer's need, {}, is GPU {}'s with the {} sequences asked at once",
                both(h.card.need_bytes),
                d.device,
                q.asked
            ),
            _ => String::new(),
        }
    )
}

/// Several cards: one row per GPU, as the CLI's table prints them — the layers it
/// holds, its weights, the KV cache of its layers, what it needs in all, its capacity
/// and headroom, in GiB and GB. The verdict is the headline's, given on the most
/// loaded GPU's row (the one the headline judges): a row's own start-up check (one
/// sequence) never stands beside it, so nothing here says otherwise.
fn split_table(devices: Vec<DeviceShare>, h: &Headline) -> impl IntoView + use<> {
    let note = split_note(&devices, h);
    view! {
        <div class="scroll" inner_html=split_html(&devices, h.verdict())></div>
        <p class="note" data-testid="answer-devices-note">{note}</p>
    }
}

/// The rows per GPU as markup, every text escaped (one string: a view writing out the
/// nine cells of each row took about 0.6 KB gzip more of the page's wasm).
fn split_html(devices: &[DeviceShare], v: Verdict) -> String {
    let mut s = String::from(r#"<table class="fit" data-testid="answer-devices"><thead><tr>"#);
    for c in [
        "GPU", "Card", "Layers", "Weights", "KV", "Need", "Capacity", "Headroom", "Verdict",
    ] {
        s.push_str(&format!("<th>{c}</th>"));
    }
    s.push_str("</tr></thead><tbody>");
    let signed = |b: u64| gib_gb(i64::try_from(b).unwrap_or(i64::MAX));
    for d in devices {
        s.push_str(if d.most_loaded {
            r#"<tr class="target">"#
        } else {
            "<tr>"
        });
        for (i, c) in [
            d.device.to_string(),
            esc(&d.card_name, 200),
            esc(&d.layers, 200),
            signed(d.weights_bytes),
            signed(d.kv_bytes),
            signed(d.need_bytes),
            signed(d.capacity_bytes),
            gib_gb(d.headroom_bytes),
        ]
        .iter()
        .enumerate()
        {
            s.push_str(if i < 3 { "<td>" } else { r#"<td class="num">"# });
            s.push_str(c);
            s.push_str("</td>");
        }
        if d.most_loaded {
            s.push_str(&format!(
                r#"<td>most loaded: <span class="verdict {}">{}</span></td>"#,
                v.key(),
                v.text()
            ));
        } else {
            s.push_str("<td></td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table>");
    s
}

/// Typical / long / near-limit, side by side, judged on the target card.
#[component]
fn WorkloadCards() -> impl IntoView {
    let training = expect_context::<Training>();
    let computed = expect_context::<Memo<Computed>>();
    let form = expect_context::<Form>();
    let focus = form.focus;
    let card = target_card(&form);
    view! {
        <div class="wcards" role="tablist" aria-label="Workloads">
            {WORKLOADS
                .iter()
                .enumerate()
                .map(|(i, (title, _))| {
                    let w = Memo::new(move |_| computed.with(|c| c.workloads[i].clone()));
                    let form = form.clone();
                    view! {
                        <button
                            type="button"
                            role="tab"
                            class="wcard"
                            data-testid=format!("workload-{i}")
                            aria-selected=move || (focus.get() == i).to_string()
                            on:click=move |_| focus.set(i)
                        >
                            <span class="wtitle">{*title}</span>
                            {let form = form.clone(); move || {
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
                                match w.result {
                                    Ok(e) => {
                                        // Under an engine, its budget is the need (the answer's own
                                        // headline), never the estimate's transformers-style total.
                                        let page = form.page_pairs();
                                        let under_engine = page.iter().any(|(k, _)| *k == "engine");
                                        let tensors = form.imported.with(|i| i.as_ref().map(|i| i.summary.clone()));
                                        let f = under_engine
                                            .then(|| answer(&w.pairs, tensors.as_ref(), &page, training))
                                            .flatten()
                                            .and_then(|a| a.ok())
                                            .map(|a| a.headline.card)
                                            .unwrap_or_else(|| fit_estimate(&card.get(), &e));
                                        let (v, cls) = verdict(&f);
                                        view! {
                                            <span class="wdims">{shape}</span>
                                            <span class="wtotal" data-testid=format!("workload-{i}-device-bytes")>
                                                {gib(f.need_bytes)}
                                            </span>
                                            <span class="wsub">"per device · " {group_digits(f.need_bytes)} " B"</span>
                                            <span class=format!("verdict {cls}")>{v} " on " {f.name.clone()}</span>
                                        }
                                        .into_any()
                                    }
                                    Err(err) => view! {
                                        <span class="wdims">{shape}</span>
                                        <span class="wtotal muted">"—"</span>
                                        <span class="verdict no">{err.to_string()}</span>
                                    }
                                    .into_any(),
                                }
                            }}
                        </button>
                    }
                })
                .collect_view()}
        </div>
    }
}

/// One headline figure: GiB large, then raw bytes and GB.
#[component]
fn Figure(
    #[prop(into)] label: String,
    /// The `data-testid` of the raw byte count, if it is a stable test hook.
    #[prop(optional)]
    testid: Option<&'static str>,
    bytes: Option<u64>,
    #[prop(optional)] strong: bool,
) -> impl IntoView {
    view! {
        <div class="figure" class:strong=strong>
            <span class="flabel">{label}</span>
            <span class="fgib">{bytes.map_or("—".to_string(), gib)}</span>
            <span class="fraw">
                <span class="bytes" data-testid=testid>{bytes.map_or("—".to_string(), group_digits)}</span>
                " B · " {bytes.map_or("—".to_string(), gb)}
            </span>
        </div>
    }
}

#[component]
fn Headline(e: Option<Estimate>) -> impl IntoView {
    let f = |g: fn(&Estimate) -> u64| e.as_ref().map(g);
    // "(assumed)" only where a counted line of the group is (the CLI's rule).
    let tag = |name: &'static str, g: Group| {
        if e.as_ref().is_some_and(|e| e.group_is_assumed(g)) {
            format!("{name} (assumed)")
        } else {
            name.to_string()
        }
    };
    view! {
        <div class="figures" aria-label="Headline figures">
            <Figure label="Weights" testid="weights-bytes" bytes=f(|e| e.weights_bytes)/>
            <Figure label="KV cache" testid="kv-cache-bytes" bytes=f(|e| e.kv_cache_bytes)/>
            <Figure label=tag("Training state", Group::Training) testid="training-bytes" bytes=f(|e| e.training_bytes)/>
            <Figure label=tag("Transients", Group::Transient) testid="transient-bytes" bytes=f(|e| e.transient_bytes)/>
            <Figure label=tag("Reserve (per device)", Group::Reserve) testid="reserve-bytes" bytes=f(|e| e.reserve_bytes)/>
            <Figure label="Total" testid="total-bytes" bytes=f(|e| e.total_bytes) strong=true/>
            <Figure label="Most loaded device" testid="per-device-bytes" bytes=f(|e| e.per_device_bytes) strong=true/>
        </div>
    }
}

#[component]
fn Breakdown(e: Estimate) -> impl IntoView {
    let params = e.parameters.map(|p| {
        let active = e
            .active_parameters
            .filter(|a| *a != p)
            .map(|a| format!(", {} active per token", group_digits(a)));
        view! {
            <p class="params">
                {group_digits(p)} " parameters" {active}
            </p>
        }
    });
    let lines = e.lines.clone();
    let assumptions = e.assumptions.clone();
    let warnings = e.warnings.clone();
    let need = e.per_device_bytes;
    let fits = fit_table(&e);
    view! {
        <Headline e=Some(e.clone())/>
        {params}
        <Chart e=e.clone()/>
        <LinesTable lines/>
        {(!warnings.is_empty()).then(|| view! {
            <div class="notes warn">
                <h3>"Warnings"</h3>
                <ul>{warnings.into_iter().map(|w| view! { <li>{w}</li> }).collect_view()}</ul>
            </div>
        })}
        {(!assumptions.is_empty()).then(|| view! {
            <div class="notes">
                <h3>"Assumed"</h3>
                <ul>{assumptions.into_iter().map(|a| view! { <li>{a}</li> }).collect_view()}</ul>
            </div>
        })}
        <FitTable need fits/>
    }
}

/// Stacked bar of what the most loaded device holds, against the target card.
#[component]
fn Chart(e: Estimate) -> impl IntoView {
    let form = expect_context::<Form>();
    let card = target_card(&form);
    let segments: Vec<(LineKey, String, u64)> = e
        .lines
        .iter()
        .filter(|l| l.in_total && l.device_bytes > 0)
        .map(|l| (l.key, l.label.to_string(), l.device_bytes))
        .collect();
    let need = e.per_device_bytes;
    let legend = segments.clone();
    view! {
        <figure class="chart">
            {move || {
                let cap = card.get().capacity().0;
                // Integer geometry in a 100 000-unit-wide view box: no float formatting.
                let scale = u128::from(need.max(cap).max(1)) * 104 / 100;
                let unit = |b: u64| (u128::from(b) * 100_000 / scale) as u64;
                let mut x = 0u64;
                let rects = segments
                    .iter()
                    .map(|(key, label, bytes)| {
                        let w = unit(*bytes);
                        let r = view! {
                            <rect x=x.to_string() y="8" width=w.to_string() height="44"
                                fill=color(*key)>
                                <title>{format!("{label}: {} B · {}", group_digits(*bytes), gib(*bytes))}</title>
                            </rect>
                        };
                        x += w;
                        r
                    })
                    .collect_view();
                let cx = unit(cap).to_string();
                let fits = need <= cap;
                view! {
                    <svg viewBox="0 0 100000 60" preserveAspectRatio="none" role="img" class="bar"
                        aria-label=format!("Most loaded device needs {}; {} holds {}", gib(need), card.get().name, gib(cap))>
                        <rect x="0" y="8" width="100000" height="44" class="track"/>
                        {rects}
                        <line x1=cx.clone() x2=cx y1="0" y2="60"
                            class=if fits { "cap fits" } else { "cap over" }/>
                    </svg>
                    <div class="axis-row" data-testid="chart-axis">
                        <span>"0 GiB"</span>
                        <span>"bytes on the most loaded device (GiB = 2³⁰ B)"</span>
                        <span>{gib(u64::try_from(scale).unwrap_or(u64::MAX))}</span>
                    </div>
                    <figcaption>
                        <span class="caption-need">"Most loaded device: " <strong>{gib(need)}</strong></span>
                        <span class=if fits { "caption-cap fits" } else { "caption-cap over" }>
                            "│ " {card.get().name} ": " {gib(cap)}
                            {if fits { " — fits" } else { " — does not fit" }}
                        </span>
                    </figcaption>
                }
            }}
            <ul class="legend">
                {legend
                    .iter()
                    .map(|(key, label, bytes)| view! {
                        <li><svg class="swatch" viewBox="0 0 1 1"><rect width="1" height="1" fill=color(*key)/></svg>
                            {label.clone()} " " <span class="muted">{gib(*bytes)}</span></li>
                    })
                    .collect_view()}
            </ul>
        </figure>
    }
}

#[component]
fn LinesTable(lines: Vec<Line>) -> impl IntoView {
    view! {
        <table class="lines">
            <caption class="sr">"Every line of the estimate"</caption>
            <thead>
                <tr>
                    <th scope="col">"Line"</th>
                    <th scope="col" class="num">"Bytes"</th>
                    <th scope="col" class="num">"GB"</th>
                    <th scope="col" class="num">"GiB"</th>
                    <th scope="col" class="num">"Per device"</th>
                </tr>
            </thead>
            <tbody>
                {lines
                    .into_iter()
                    .map(|l| {
                        let kind = match l.kind {
                            LineKind::Computed => ("computed", "tag computed"),
                            LineKind::Assumed => ("assumed", "tag assumed"),
                            LineKind::Traced => ("traced", "tag traced"),
                        };
                        let inputs = l.inputs.clone();
                        view! {
                            <tr class:aside=!l.in_total data-line=l.key.as_str()>
                                <td>
                                    <details>
                                        <summary>
                                            <svg class="swatch" viewBox="0 0 1 1"><rect width="1" height="1" fill=color(l.key)/></svg>
                                            {l.label.to_string()} " "
                                            <span class=kind.1>{kind.0}</span>
                                            {(!l.in_total).then_some(" (not added)")}
                                        </summary>
                                        <div class="formula">
                                            <p><code>{l.formula.clone()}</code></p>
                                            <dl>
                                                {inputs.into_iter().map(|(k, v)| view! {
                                                    <dt>{k.to_string()}</dt><dd>{v}</dd>
                                                }).collect_view()}
                                            </dl>
                                        </div>
                                    </details>
                                </td>
                                <td class="num mono">{group_digits(l.bytes)}</td>
                                <td class="num">{Bytes(l.bytes).gb_string(2)}</td>
                                <td class="num">{Bytes(l.bytes).gib_string(2)}</td>
                                <td class="num">{Bytes(l.device_bytes).gib_string(2)} " GiB"</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}

/// Every catalogue card against the per-device need `need` ([`fit_table`]'s `fits`).
#[component]
fn FitTable(need: u64, fits: Vec<CardFit>) -> impl IntoView {
    let form = expect_context::<Form>();
    let card_sig = form.sig("card");
    let n_fit = fits.iter().filter(|f| f.fits).count();
    view! {
        <h3 class="fit-title">
            "Per-card fit — " {n_fit} " of " {fits.len()} " cards hold the most loaded device's " {gib(need)}
        </h3>
        <p class="note">
            "Capacity is what the device reports where a public reading exists, else the label "
            "(label GB × 2³⁰). Each device is judged alone: memory is never pooled across GPUs."
        </p>
        <div class="scroll">
            <table class="fit" data-testid="fit-table">
                <thead>
                    <tr>
                        <th scope="col">"Card"</th>
                        <th scope="col" class="num">"Capacity"</th>
                        <th scope="col" class="num">"Headroom"</th>
                        <th scope="col">"Verdict"</th>
                    </tr>
                </thead>
                <tbody>
                    {CATALOGUE
                        .iter()
                        .zip(fits)
                        .map(|(c, f)| {
                            let (v, cls, head_gib, _, head_gb) = fit_texts(&f);
                            // Every cell one text: the table is 34 rows of the page's wasm.
                            let cap = format!("{} ({}, {})", gib(f.capacity_bytes), gb(f.capacity_bytes), f.capacity_kind);
                            let id = c.id;
                            view! {
                                <tr class:target=move || card_sig.get() == id data-card=id>
                                    <td><button type="button" class="linkish" title="Judge the answer, chart and sweep against this card"
                                        on:click=move |_| card_sig.set(id.to_string())>{f.name}</button></td>
                                    <td class="num">{cap}</td>
                                    <td class="num">{format!("{head_gib} ({head_gb})")}</td>
                                    <td><span class=format!("verdict {cls}")>{v}</span></td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </div>
    }
}

/// Method §11: change one variable at a time and watch the need move.
#[component]
fn Sweep() -> impl IntoView {
    let training = expect_context::<Training>();
    let computed = expect_context::<Memo<Computed>>();
    let form = expect_context::<Form>();
    let vary = form.sig("vary");
    let card = target_card(&form);
    let rows = Memo::new(move |_| {
        let dim = match vary.get().trim() {
            "sequences" => "sequences",
            "generate" => "generate",
            _ => "context",
        };
        let pairs = computed.with(|c| c.workloads[0].pairs.clone());
        let page = form.page_pairs();
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
        sweep_values(base)
            .into_iter()
            .map(|v| {
                let mut p = pairs.clone();
                p.retain(|(k, _)| *k != dim);
                p.push((dim, v.to_string()));
                let e = training.estimate(&p, &page, tensors.as_ref());
                (v, v == base, e.map_err(|e| e.to_string()))
            })
            .collect::<Vec<_>>()
    });
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
                <tbody>
                    {move || {
                        let card = card.get();
                        let cap = card.capacity().0;
                        rows.get()
                            .into_iter()
                            .map(|(v, is_base, r)| match r {
                                Ok(e) => {
                                    let f = fit_estimate(&card, &e);
                                    let (verdict_text, cls) = verdict(&f);
                                    // At most 100, printed as a u64 (no page links u128's printer).
                                    let pct = (u128::from(e.per_device_bytes) * 100 / u128::from(cap.max(1))).min(100) as u64;
                                    view! {
                                        <tr class:base=is_base>
                                            <td class="num mono">{group_digits(v)}</td>
                                            <td class="num">{gib(e.kv_cache_bytes)}</td>
                                            <td class="num">
                                                {gib(e.per_device_bytes)}
                                                <svg class="meter" viewBox="0 0 100 1" preserveAspectRatio="none"><rect class=format!("fill {cls}") width=pct.to_string() height="1"/></svg>
                                            </td>
                                            <td><span class=format!("verdict {cls}")>{verdict_text}</span></td>
                                        </tr>
                                    }
                                    .into_any()
                                }
                                Err(err) => view! {
                                    <tr><td class="num mono">{group_digits(v)}</td><td colspan="3" class="muted">{err}</td></tr>
                                }
                                .into_any(),
                            })
                            .collect_view()
                    }}
                </tbody>
            </table>
        </section>
    }
}

/// The same estimate as a command line (the typical workload).
#[component]
fn Command() -> impl IntoView {
    let computed = expect_context::<Memo<Computed>>();
    let form = expect_context::<Form>();
    let cmd = Memo::new(move |_| {
        let mut pairs = computed.with(|c| c.workloads[0].pairs.clone());
        // With an engine named, its flags too: the agent then prints the same budget
        // as the engine section (on the page's card, the first one when none is chosen).
        if !form.sig("engine").get().trim().is_empty() {
            for k in gpumem_core::engine::engine_keys() {
                let v = form.sig(k).get();
                let v = match v.trim() {
                    "" if k == "card" => CATALOGUE[0].id.to_string(),
                    "" => continue,
                    t => t.to_string(),
                };
                pairs.push((k, v));
            }
        }
        let mut s = String::from("gpumem-agent estimate");
        for (k, v) in pairs {
            let quoted = if v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.,".contains(c))
            {
                v
            } else {
                format!("'{}'", v.replace('\'', "'\\''"))
            };
            s.push_str(&format!(" --{k} {quoted}"));
        }
        if form.imported.with(|i| i.is_some()) {
            s.push_str(" --safetensors … (the imported files)");
        }
        s
    });
    view! {
        <section class="command" aria-label="Command line">
            <h3>"Same estimate on the command line"</h3>
            <pre data-testid="cli-command"><code>{move || cmd.get()}</code></pre>
            <p class="note">"The link in the address bar carries the same keys; share it to reproduce this page."</p>
        </section>
    }
}

#[cfg(test)]
mod tests {
    use super::keep_numbers;
    use gpumem_core::catalogue::CATALOGUE;
    use gpumem_core::fit::{Verdict, fit_card};

    #[test]
    fn a_figure_never_breaks_across_lines() {
        assert_eq!(
            keep_numbers("1 × (4 096 + 512) tokens · 8.03 B"),
            "1 × (4\u{a0}096 + 512) tokens · 8.03 B"
        );
        assert_eq!(keep_numbers("131 072 072"), "131\u{a0}072\u{a0}072");
        assert_eq!(keep_numbers(""), "");
    }
    use gpumem_core::units::GIB;

    use super::fit_texts;

    #[test]
    fn fit_rows_use_the_shared_signed_views_and_verdict() {
        let card = &CATALOGUE[0];
        let (cap, _) = card.capacity();
        let over = fit_card(card, cap + GIB, 0);
        let (v, key, gib, bytes, gb) = fit_texts(&over);
        assert_eq!((v, key), (Verdict::DoesNotFit.text(), "no"));
        assert_eq!(gib, "-1.00 GiB");
        assert_eq!(bytes, "-1 073 741 824 B");
        assert_eq!(gb, "-1.07 GB");
        let roomy = fit_card(card, 0, 0);
        let (v, _, gib, _, _) = fit_texts(&roomy);
        assert_eq!(v, "Fits");
        assert_eq!(
            gib,
            format!("{} GiB", gpumem_core::units::Bytes(cap).gib_string(2))
        );
    }

    /// The words under the rows per GPU: the CLI's for the engine, and why the
    /// answer's need is not the most loaded row's only when it is not (vLLM's rows
    /// hold one sequence, the answer the sequences asked at once).
    #[test]
    fn the_rows_per_gpu_say_what_they_add_up_to() {
        use gpumem_core::engine::{self, SPLIT_NOTE_LLAMA_CPP, SPLIT_NOTE_VLLM};
        use gpumem_core::headline::{Basis, headline};
        let base = [
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("head-dim", "128"),
            ("intermediate", "14336"),
            ("vocab", "128256"),
            ("context", "16000"),
        ];
        for (sequences, page, words, why) in [
            (
                "1",
                [("engine", "vllm"), ("card", "l40s,a10")],
                SPLIT_NOTE_VLLM,
                false,
            ),
            (
                "13",
                [("engine", "vllm"), ("card", "l40s,a10")],
                SPLIT_NOTE_VLLM,
                true,
            ),
            (
                "4",
                [("engine", "llama.cpp"), ("card", "24GiB,12GiB")],
                SPLIT_NOTE_LLAMA_CPP,
                false,
            ),
        ] {
            let mut pairs = base.to_vec();
            pairs.push(("sequences", sequences));
            if words == SPLIT_NOTE_VLLM {
                pairs.extend([("pp", "2"), ("gpus", "2")]);
            }
            // Read as the engine module reads the page (the core's one reader).
            let read = gpumem_core::inputs::read(pairs, page);
            assert!(read.errors.is_empty(), "{:?}", read.errors);
            assert!(read.engine_errors.is_empty(), "{:?}", read.engine_errors);
            let (input, params) = (read.input, read.engine);
            let est = gpumem_core::estimate::estimate(&input).unwrap();
            let devices = engine::budget(&input, &est, &params).unwrap().devices;
            let h = headline(
                &input,
                &est,
                params.card.as_ref(),
                &Basis::Engine(Box::new(params.clone())),
            )
            .unwrap();
            let note = super::split_note(&devices, &h);
            assert!(
                note.starts_with("GiB (GB); ") && note.contains(words),
                "{note}"
            );
            let said = format!(
                "the answer's need, {}, is GPU 1's with the {sequences} sequences asked at once",
                super::both(h.card.need_bytes)
            );
            assert_eq!(note.ends_with(&said), why, "{sequences} {page:?}: {note}");
        }
        assert_eq!(super::gib_gb(-1_073_741_824), "-1.00 (-1.07)");
    }

    /// The rows' markup: one row per GPU with its figures in GiB and GB, the most
    /// loaded one marked and carrying the answer's verdict (the others none), every
    /// text escaped.
    #[test]
    fn the_rows_per_gpu_are_escaped_markup_with_one_verdict() {
        use gpumem_core::engine::{DeviceShare, Outcome};
        let row = |device: u64, card_name: &str, headroom: i64, most_loaded: bool| DeviceShare {
            device,
            card: "custom".into(),
            card_name: card_name.into(),
            capacity_bytes: 12 << 30,
            split: "1".into(),
            layers: "blocks 0–15".into(),
            blocks: 16,
            output_layer: false,
            weights_bytes: 7 << 30,
            kv_bytes: 1 << 30,
            compute_bytes: 0,
            mmproj_bytes: 0,
            context_bytes: 0,
            fit_margin_bytes: 0,
            need_bytes: 9 << 30,
            headroom_bytes: headroom,
            uncertainty_bytes: 0,
            outcome: Outcome::Fits,
            most_loaded,
        };
        let html = super::split_html(
            &[
                row(0, "<b>\"A&B\"</b>", 3 << 30, false),
                row(1, "Custom card", -(1 << 30), true),
            ],
            Verdict::DoesNotFit,
        );
        assert!(!html.contains("<b>"), "{html}");
        assert!(
            html.contains("&lt;b&gt;&quot;A&amp;B&quot;&lt;/b&gt;"),
            "{html}"
        );
        assert_eq!(html.matches("<tr").count(), 3, "{html}");
        assert_eq!(html.matches("most loaded").count(), 1, "{html}");
        assert!(
            html.contains(r#"<tr class="target"><td>1</td><td>Custom card</td>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"most loaded: <span class="verdict no">Does not fit</span>"#),
            "{html}"
        );
        for cell in [
            "7.00 (7.52)",
            "1.00 (1.07)",
            "9.00 (9.66)",
            "12.00 (12.88)",
            "-1.00 (-1.07)",
            "3.00 (3.22)",
        ] {
            assert!(
                html.contains(&format!(r#"<td class="num">{cell}</td>"#)),
                "{cell}: {html}"
            );
        }
    }
}
