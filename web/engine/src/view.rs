//! The dimensioner's results, drawn here as markup: the answer's figures, a workload
//! card's figures, the focused workload's breakdown (headline figures, chart, lines,
//! per-card fit table), the engine section and the sweep's rows. The page's first
//! module shows the inputs and places this markup where the results go (it keeps the
//! fields and the buttons' clicks: a button drawn here carries `data-pick-card`, which
//! the page reads); every figure and word is the core's, as the CLI prints it, and
//! every text is escaped ([`esc`]).
//!
//! The page hands over what it holds as text: the workload's pairs and the page's keys
//! in a [`RulesRequest`], with the estimate and answer documents its modules wrote (a
//! training run's come from the training module) among the page's pairs.

use std::fmt::Write as _;

use gpumem_core::catalogue::{CATALOGUE, GpuCard, resolve};
use gpumem_core::engine::{DeviceShare, SPLIT_NOTE_LLAMA_CPP, SPLIT_NOTE_VLLM, engine_keys};
use gpumem_core::estimate::{Estimate, Group, Kind as LineKind, LineKey};
use gpumem_core::fit::{CardFit, MARGIN_RULE, RESERVE_SIDE, Verdict, fit_estimate, fit_table};
use gpumem_core::headline::{Headline, LABEL_CARDS, LABEL_FORMAT, LABEL_MARGIN, LABEL_SMALLEST};
use gpumem_core::units::{Bytes, group_digits, signed_gb_string, signed_gib_string};
use gpumem_proto::rules::{Answer, Panel, RulesRequest};

pub use gpumem_proto::markup::esc;

/// [`esc`] without a limit.
fn e(text: &str) -> String {
    esc(text, usize::MAX)
}

/// The page's value of `key` in the request (the last one given).
pub fn page_value<'a>(r: &'a RulesRequest, key: &str) -> Option<&'a str> {
    r.page
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// "13.04 GiB".
fn gib(b: u64) -> String {
    format!("{} GiB", Bytes(b).gib_string(2))
}

/// "14.00 GB".
fn gb(b: u64) -> String {
    format!("{} GB", Bytes(b).gb_string(2))
}

/// "20.61 GiB (22.13 GB)": both units, as every figure of the answer.
pub fn both(b: u64) -> String {
    format!("{} ({})", gib(b), gb(b))
}

/// The card the chart, the cards and the sweep are judged against: the one typed (an
/// id, a short form, a capacity), else the first of the catalogue.
pub fn target_card(r: &RulesRequest) -> GpuCard {
    resolve(page_value(r, "card").unwrap_or_default().trim()).unwrap_or(CATALOGUE[0])
}

/// The core's verdict for one card: its words and its CSS key.
fn verdict(f: &CardFit) -> (&'static str, &'static str) {
    let v = Verdict::of_fit(f);
    (v.text(), v.key())
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
        LineKey::PrefillQuantizedMatmul => "#a98bc9",
        LineKey::PrefillVisionTower | LineKey::PrefillAudioTower => "#7d5aa6",
        LineKey::PrefillDecompress => "#a98bc9",
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

/// `text` with each digit-group space made non-breaking ("4 096" never breaks across
/// lines on a narrow screen).
pub fn keep_numbers(text: &str) -> String {
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

/// The verdict line of a workload with no answer: "…" while a module loads (a reason
/// ending so), else NO ANSWER, with the reason.
pub fn no_answer(why: &str) -> String {
    let word = if why.ends_with('…') {
        "…"
    } else {
        "NO ANSWER"
    };
    format!(
        r#"<p class="verdict-line"><span class="word no" data-testid="answer-verdict">{word}</span> — {}</p>"#,
        e(why)
    )
}

/// The answer's figures: its first line (`line`, the inputs in words), the verdict on
/// the card with its bar, the ways out and, over several cards, each GPU's row
/// ([`split_table`]).
pub fn answer_body(line: &str, a: Answer) -> String {
    let h = a.headline;
    let v = h.verdict();
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
    let mut s = format!(
        r#"<p class="inputs" data-testid="answer-inputs">{}</p><p class="verdict-line"><span class="word {}" data-testid="answer-verdict">{}</span><span data-testid="answer-card">{}</span></p>"#,
        e(&keep_numbers(line)),
        v.key(),
        v.word(),
        e(&head)
    );
    let _ = write!(
        s,
        r#"<svg class="ubar" viewBox="0 0 1000 10" preserveAspectRatio="none" role="img" aria-label="{}"><rect class="track" width="1000" height="10"></rect><rect class="fill {}" width="{}" height="10"></rect></svg><dl class="ways">"#,
        e(&pct),
        v.key(),
        (h.used_ppm / 1_000).min(1_000)
    );
    let dd = |s: &mut String, label: &str, id: &str, text: &str| {
        let _ = write!(
            s,
            r#"<dt>{}</dt><dd data-testid="{id}">{}</dd>"#,
            e(label),
            e(text)
        );
    };
    if let Some(t) = &sequences {
        dd(&mut s, "Sequences", "answer-sequences", t);
    }
    for (id, label, text) in &rows {
        dd(&mut s, label, id, text);
    }
    if let Some(t) = &host {
        dd(&mut s, "Host RAM", "answer-host", t);
    }
    if let Some(t) = &unified {
        dd(&mut s, "Unified memory", "answer-unified", t);
    }
    s.push_str("</dl>");
    if !a.devices.is_empty() {
        let _ = write!(
            s,
            r#"<div class="scroll">{}</div><p class="note" data-testid="answer-devices-note">{}</p>"#,
            split_html(&a.devices, v),
            e(&split_note(&a.devices, &h))
        );
    }
    if !warnings.is_empty() {
        let _ = write!(
            s,
            r#"<p class="banner warn" data-testid="answer-warnings">{}</p>"#,
            e(&warnings)
        );
    }
    s
}

/// "7.48 (8.03)": GiB, then GB, of a row's figure.
pub fn gib_gb(b: i64) -> String {
    format!("{} ({})", signed_gib_string(b, 2), signed_gb_string(b, 2))
}

/// The words under the rows: the units, what the rows add up to (the CLI's words),
/// and, when the answer's need is not the most loaded GPU's row's (vLLM's rows hold
/// one sequence; the answer, the sequences asked at once), why.
pub fn split_note(devices: &[DeviceShare], h: &Headline) -> String {
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
pub fn split_html(devices: &[DeviceShare], v: Verdict) -> String {
    let mut s = String::from(r#"<table class="fit" data-testid="answer-devices"><thead><tr>"#);
    for c in [
        "GPU", "Card", "Layers", "Weights", "KV", "Need", "Capacity", "Headroom", "Verdict",
    ] {
        let _ = write!(s, "<th>{c}</th>");
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
            let _ = write!(
                s,
                r#"<td>most loaded: <span class="verdict {}">{}</span></td>"#,
                v.key(),
                v.text()
            );
        } else {
            s.push_str("<td></td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</tbody></table>");
    s
}

/// A workload card's figures: what the most loaded device needs — under an engine,
/// its budget (the answer's own headline, `answer`), else the estimate `est` on the
/// target card — and the verdict on that card; `i` is the card's place (its test id).
pub fn card_figures(i: usize, est: &Estimate, answer: Option<Answer>, card: &GpuCard) -> String {
    let f = answer
        .map(|a| a.headline.card)
        .unwrap_or_else(|| fit_estimate(card, est));
    let (v, cls) = verdict(&f);
    format!(
        r#"<span class="wtotal" data-testid="workload-{i}-device-bytes">{}</span><span class="wsub">per device · {} B</span><span class="verdict {cls}">{v} on {}</span>"#,
        gib(f.need_bytes),
        group_digits(f.need_bytes),
        e(&f.name)
    )
}

/// One headline figure: GiB large, then raw bytes and GB.
fn figure(s: &mut String, label: &str, testid: &str, bytes: Option<u64>, strong: bool) {
    let _ = write!(
        s,
        r#"<div class="figure{}"><span class="flabel">{}</span><span class="fgib">{}</span><span class="fraw"><span class="bytes" data-testid="{testid}">{}</span> B · {}</span></div>"#,
        if strong { " strong" } else { "" },
        e(label),
        bytes.map_or("—".to_string(), gib),
        bytes.map_or("—".to_string(), group_digits),
        bytes.map_or("—".to_string(), gb)
    );
}

/// The headline figures of an estimate (dashes without one).
pub fn headline_figures(est: Option<&Estimate>) -> String {
    let f = |g: fn(&Estimate) -> u64| est.map(g);
    // "(assumed)" only where a counted line of the group is (the CLI's rule).
    let tag = |name: &str, g: Group| {
        if est.is_some_and(|e| e.group_is_assumed(g)) {
            format!("{name} (assumed)")
        } else {
            name.to_string()
        }
    };
    let mut s = String::from(r#"<div class="figures" aria-label="Headline figures">"#);
    figure(
        &mut s,
        "Weights",
        "weights-bytes",
        f(|e| e.weights_bytes),
        false,
    );
    figure(
        &mut s,
        "KV cache",
        "kv-cache-bytes",
        f(|e| e.kv_cache_bytes),
        false,
    );
    figure(
        &mut s,
        &tag("Training state", Group::Training),
        "training-bytes",
        f(|e| e.training_bytes),
        false,
    );
    figure(
        &mut s,
        &tag("Transients", Group::Transient),
        "transient-bytes",
        f(|e| e.transient_bytes),
        false,
    );
    figure(
        &mut s,
        &tag("Reserve (per device)", Group::Reserve),
        "reserve-bytes",
        f(|e| e.reserve_bytes),
        false,
    );
    figure(&mut s, "Total", "total-bytes", f(|e| e.total_bytes), true);
    figure(
        &mut s,
        "Most loaded device",
        "per-device-bytes",
        f(|e| e.per_device_bytes),
        true,
    );
    s.push_str("</div>");
    s
}

/// The focused workload's breakdown: headline figures, parameters, the chart against
/// the target card, every line, the warnings and assumptions, the per-card fit table.
/// `typed` is the card field's text (its row is marked when it names a card's id).
pub fn breakdown(est: &Estimate, card: &GpuCard, typed: &str) -> String {
    let mut s = headline_figures(Some(est));
    if let Some(p) = est.parameters {
        let active = est
            .active_parameters
            .filter(|a| *a != p)
            .map(|a| format!(", {} active per token", group_digits(a)))
            .unwrap_or_default();
        let _ = write!(
            s,
            r#"<p class="params">{} parameters{active}</p>"#,
            group_digits(p)
        );
    }
    chart(&mut s, est, card);
    lines_table(&mut s, est);
    for (items, class, title) in [
        (&est.warnings, "notes warn", "Warnings"),
        (&est.assumptions, "notes", "Assumed"),
    ] {
        if !items.is_empty() {
            let _ = write!(s, r#"<div class="{class}"><h3>{title}</h3><ul>"#);
            for w in items {
                let _ = write!(s, "<li>{}</li>", e(w));
            }
            s.push_str("</ul></div>");
        }
    }
    fit_table_html(&mut s, est.per_device_bytes, fit_table(est), typed);
    s
}

/// Stacked bar of what the most loaded device holds, against the target card.
fn chart(s: &mut String, est: &Estimate, card: &GpuCard) {
    let segments: Vec<(LineKey, &str, u64)> = est
        .lines
        .iter()
        .filter(|l| l.in_total && l.device_bytes > 0)
        .map(|l| (l.key, l.label.as_ref(), l.device_bytes))
        .collect();
    let need = est.per_device_bytes;
    let cap = card.capacity().0;
    // Integer geometry in a 100 000-unit-wide view box: no float formatting.
    let scale = u128::from(need.max(cap).max(1)) * 104 / 100;
    let unit = |b: u64| (u128::from(b) * 100_000 / scale) as u64;
    let fits = need <= cap;
    let _ = write!(
        s,
        r#"<figure class="chart"><svg viewBox="0 0 100000 60" preserveAspectRatio="none" role="img" class="bar" aria-label="{}"><rect x="0" y="8" width="100000" height="44" class="track"></rect>"#,
        e(&format!(
            "Most loaded device needs {}; {} holds {}",
            gib(need),
            card.name,
            gib(cap)
        ))
    );
    let mut x = 0u64;
    for (key, label, bytes) in &segments {
        let w = unit(*bytes);
        let _ = write!(
            s,
            r#"<rect x="{x}" y="8" width="{w}" height="44" fill="{}"><title>{}</title></rect>"#,
            color(*key),
            e(&format!(
                "{label}: {} B · {}",
                group_digits(*bytes),
                gib(*bytes)
            ))
        );
        x += w;
    }
    let cx = unit(cap);
    let _ = write!(
        s,
        r#"<line x1="{cx}" x2="{cx}" y1="0" y2="60" class="{}"></line></svg>"#,
        if fits { "cap fits" } else { "cap over" }
    );
    let _ = write!(
        s,
        r#"<div class="axis-row" data-testid="chart-axis"><span>0 GiB</span><span>bytes on the most loaded device (GiB = 2³⁰ B)</span><span>{}</span></div>"#,
        gib(u64::try_from(scale).unwrap_or(u64::MAX))
    );
    let _ = write!(
        s,
        r#"<figcaption><span class="caption-need">Most loaded device: <strong>{}</strong></span><span class="{}">│ {}: {}{}</span></figcaption><ul class="legend">"#,
        gib(need),
        if fits {
            "caption-cap fits"
        } else {
            "caption-cap over"
        },
        e(card.name),
        gib(cap),
        if fits {
            " — fits"
        } else {
            " — does not fit"
        }
    );
    for (key, label, bytes) in &segments {
        let _ = write!(
            s,
            r#"<li><svg class="swatch" viewBox="0 0 1 1"><rect width="1" height="1" fill="{}"></rect></svg>{} <span class="muted">{}</span></li>"#,
            color(*key),
            e(label),
            gib(*bytes)
        );
    }
    s.push_str("</ul></figure>");
}

/// Every line of the estimate, each with its formula and inputs.
fn lines_table(s: &mut String, est: &Estimate) {
    s.push_str(r#"<table class="lines"><caption class="sr">Every line of the estimate</caption><thead><tr><th scope="col">Line</th><th scope="col" class="num">Bytes</th><th scope="col" class="num">GB</th><th scope="col" class="num">GiB</th><th scope="col" class="num">Per device</th></tr></thead><tbody>"#);
    for l in &est.lines {
        let kind = match l.kind {
            LineKind::Computed => ("computed", "tag computed"),
            LineKind::Assumed => ("assumed", "tag assumed"),
            LineKind::Traced => ("traced", "tag traced"),
        };
        let _ = write!(
            s,
            r#"<tr{} data-line="{}"><td><details><summary><svg class="swatch" viewBox="0 0 1 1"><rect width="1" height="1" fill="{}"></rect></svg>{} <span class="{}">{}</span>{}</summary><div class="formula"><p><code>{}</code></p><dl>"#,
            if l.in_total { "" } else { r#" class="aside""# },
            l.key.as_str(),
            color(l.key),
            e(&l.label),
            kind.1,
            kind.0,
            if l.in_total { "" } else { " (not added)" },
            e(&l.formula)
        );
        for (k, v) in &l.inputs {
            let _ = write!(s, "<dt>{}</dt><dd>{}</dd>", e(k), e(v));
        }
        let _ = write!(
            s,
            r#"</dl></div></details></td><td class="num mono">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{} GiB</td></tr>"#,
            group_digits(l.bytes),
            Bytes(l.bytes).gb_string(2),
            Bytes(l.bytes).gib_string(2),
            Bytes(l.device_bytes).gib_string(2)
        );
    }
    s.push_str("</tbody></table>");
}

/// Every catalogue card against the per-device need `need` ([`fit_table`]'s `fits`);
/// the row of the card whose id is `typed` marked. Each card's name is a button that
/// judges the page against it (`data-pick-card`, read by the page).
fn fit_table_html(s: &mut String, need: u64, fits: Vec<CardFit>, typed: &str) {
    let n_fit = fits.iter().filter(|f| f.fits).count();
    let _ = write!(
        s,
        r#"<h3 class="fit-title">Per-card fit — {n_fit} of {} cards hold the most loaded device's {}</h3><p class="note">Capacity is what the device reports where a public reading exists, else the label (label GB × 2³⁰). Each device is judged alone: memory is never pooled across GPUs.</p><div class="scroll"><table class="fit" data-testid="fit-table"><thead><tr><th scope="col">Card</th><th scope="col" class="num">Capacity</th><th scope="col" class="num">Headroom</th><th scope="col">Verdict</th></tr></thead><tbody>"#,
        fits.len(),
        gib(need)
    );
    for (c, f) in CATALOGUE.iter().zip(fits) {
        let (v, cls) = verdict(&f);
        let cap = format!(
            "{} ({}, {})",
            gib(f.capacity_bytes),
            gb(f.capacity_bytes),
            f.capacity_kind
        );
        let head = format!(
            "{} GiB ({} GB)",
            signed_gib_string(f.headroom_bytes, 2),
            signed_gb_string(f.headroom_bytes, 2)
        );
        let _ = write!(
            s,
            r#"<tr{} data-card="{id}"><td><button type="button" class="linkish" title="Judge the answer, chart and sweep against this card" data-pick-card="{id}">{}</button></td><td class="num">{}</td><td class="num">{}</td><td><span class="verdict {cls}">{v}</span></td></tr>"#,
            if typed == c.id {
                r#" class="target""#
            } else {
                ""
            },
            e(&f.name),
            e(&cap),
            head,
            id = e(c.id),
        );
    }
    s.push_str("</tbody></table></div>");
}

/// The engine section's figures in markup (its fields are the page's).
pub fn panel_html(p: Panel) -> String {
    let mut s = format!(
        r#"<h3>Largest workload on {}{}</h3><p>Largest context at {} sequence(s): <strong data-testid="largest-context">{}</strong>{}"#,
        e(&p.card),
        e(&p.basis),
        e(&p.at_sequences),
        e(&p.context),
        e(p.beyond.as_deref().unwrap_or_default())
    );
    if let Some(q) = &p.sequences {
        let _ = write!(
            s,
            r#" · most sequences: <strong data-testid="most-sequences">{}</strong>"#,
            e(q)
        );
    }
    let _ = write!(
        s,
        r#"</p><h3>KV cache each engine leaves on {} (per device; an empty field is the engine's default)</h3><table class="lines engines-table"><thead><tr><th>engine</th><th>KV capacity</th><th>GiB</th><th>tokens</th><th>sequences at max-model-len</th><th>start-up</th></tr></thead><tbody>"#,
        e(&p.card)
    );
    for r in p.rows {
        let name = e(&r.engine);
        match r.cells {
            Ok((cells, explained)) => {
                let _ = write!(s, r#"<tr data-testid="engine-{name}">"#);
                for (i, c) in cells.iter().enumerate() {
                    let _ = match i {
                        0 => write!(s, "<td>{}</td>", e(c)),
                        5 => write!(s, r#"<td data-testid="outcome-{name}">{}</td>"#, e(c)),
                        _ => write!(s, r#"<td class="num">{}</td>"#, e(c)),
                    };
                }
                let _ = write!(
                    s,
                    r#"</tr><tr class="formula"><td colspan="6">{}</td></tr>"#,
                    e(&explained)
                );
            }
            Err(err) => {
                let _ = write!(
                    s,
                    r#"<tr><td>{name}</td><td colspan="5" class="muted">{}</td></tr>"#,
                    e(&err)
                );
            }
        }
    }
    s.push_str("</tbody></table>");
    s
}

/// The typical workload's command line (`r`'s pairs): with an engine named among the
/// page's pairs, its flags too — the agent then prints the same budget as the engine
/// section (on the page's card, the first one when none is chosen); a value that is
/// not a plain word quoted for the shell; an import said in words (`imported`).
pub fn command(r: &RulesRequest) -> String {
    let mut pairs: Vec<(&str, &str)> = r
        .pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if page_value(r, "engine").is_some_and(|e| !e.trim().is_empty()) {
        for k in engine_keys() {
            match page_value(r, k).map_or("", str::trim) {
                "" if k == "card" => pairs.push((k, CATALOGUE[0].id)),
                "" => {}
                t => pairs.push((k, t)),
            }
        }
    }
    let mut s = String::from("gpumem-agent estimate");
    for (k, v) in pairs {
        if v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,".contains(c))
        {
            let _ = write!(s, " --{k} {v}");
        } else {
            let _ = write!(s, " --{k} '{}'", v.replace('\'', "'\\''"));
        }
    }
    if page_value(r, "imported").is_some() {
        s.push_str(" --safetensors … (the imported files)");
    }
    s
}

/// One row of the sweep: the value, and its estimate on the target card (or why it
/// has none); `base` marks the workload's own value.
pub fn sweep_row(v: u64, base: bool, est: Result<Estimate, String>, card: &GpuCard) -> String {
    match est {
        Ok(est) => {
            let cap = card.capacity().0;
            let f = fit_estimate(card, &est);
            let (verdict_text, cls) = verdict(&f);
            // At most 100, printed as a u64 (no page links u128's printer).
            let pct =
                (u128::from(est.per_device_bytes) * 100 / u128::from(cap.max(1))).min(100) as u64;
            format!(
                r#"<tr{}><td class="num mono">{}</td><td class="num">{}</td><td class="num">{}<svg class="meter" viewBox="0 0 100 1" preserveAspectRatio="none"><rect class="fill {cls}" width="{pct}" height="1"></rect></svg></td><td><span class="verdict {cls}">{verdict_text}</span></td></tr>"#,
                if base { r#" class="base""# } else { "" },
                group_digits(v),
                gib(est.kv_cache_bytes),
                gib(est.per_device_bytes)
            )
        }
        Err(err) => format!(
            r#"<tr><td class="num mono">{}</td><td colspan="3" class="muted">{}</td></tr>"#,
            group_digits(v),
            e(&err)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumem_core::engine::Outcome;

    #[test]
    fn a_figure_never_breaks_across_lines() {
        assert_eq!(
            keep_numbers("1 × (4 096 + 512) tokens · 8.03 B"),
            "1 × (4\u{a0}096 + 512) tokens · 8.03 B"
        );
        assert_eq!(keep_numbers("131 072 072"), "131\u{a0}072\u{a0}072");
        assert_eq!(keep_numbers(""), "");
    }

    /// The per-card fit table: one row per catalogue card with the core's verdict and
    /// signed headroom, the typed card's row marked, each name a button that picks it.
    #[test]
    fn the_fit_table_marks_the_typed_card_and_signs_the_headroom() {
        let (mut input, errors) =
            gpumem_core::params::from_pairs([("parameters", "7000000000"), ("bits", "16")]);
        assert!(errors.is_empty(), "{errors:?}");
        input.tensors = None;
        let est = gpumem_core::estimate::estimate(&input).unwrap();
        let card = CATALOGUE[0];
        let html = breakdown(&est, &card, card.id);
        assert_eq!(
            html.matches("data-pick-card=").count(),
            CATALOGUE.len(),
            "{html}"
        );
        assert_eq!(
            html.matches(r#"<tr class="target" data-card="#).count(),
            1,
            "{html}"
        );
        assert!(
            html.contains(&format!(r#"<tr class="target" data-card="{}">"#, card.id)),
            "{html}"
        );
        for f in fit_table(&est) {
            let (v, _) = verdict(&f);
            let head = format!(
                "{} GiB ({} GB)",
                signed_gib_string(f.headroom_bytes, 2),
                signed_gb_string(f.headroom_bytes, 2)
            );
            assert!(html.contains(&head), "{head}");
            assert!(html.contains(v), "{v}");
        }
        // Every line of the estimate, and the figures in bytes.
        for l in &est.lines {
            assert!(
                html.contains(&format!(r#"data-line="{}""#, l.key.as_str())),
                "{}",
                l.key.as_str()
            );
        }
        assert!(html.contains(&format!(
            r#"data-testid="total-bytes">{}</span>"#,
            group_digits(est.total_bytes)
        )));
        // Without an estimate, dashes.
        let none = headline_figures(None);
        assert_eq!(none.matches(">—</span>").count(), 14, "{none}");
    }

    /// The words under the rows per GPU: the CLI's for the engine, and why the
    /// answer's need is not the most loaded row's only when it is not (vLLM's rows
    /// hold one sequence, the answer the sequences asked at once).
    #[test]
    fn the_rows_per_gpu_say_what_they_add_up_to() {
        use gpumem_core::engine;
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
            let note = split_note(&devices, &h);
            assert!(
                note.starts_with("GiB (GB); ") && note.contains(words),
                "{note}"
            );
            let said = format!(
                "the answer's need, {}, is GPU 1's with the {sequences} sequences asked at once",
                both(h.card.need_bytes)
            );
            assert_eq!(note.ends_with(&said), why, "{sequences} {page:?}: {note}");
            // The answer's markup carries the rows and the note, escaped.
            let html = answer_body(
                "a line",
                Answer {
                    headline: h,
                    devices,
                },
            );
            assert!(html.contains(r#"data-testid="answer-devices""#), "{html}");
            assert!(html.contains(&e(&note)), "{html}");
        }
        assert_eq!(gib_gb(-1_073_741_824), "-1.00 (-1.07)");
    }

    /// The rows' markup: one row per GPU with its figures in GiB and GB, the most
    /// loaded one marked and carrying the answer's verdict (the others none), every
    /// text escaped.
    #[test]
    fn the_rows_per_gpu_are_escaped_markup_with_one_verdict() {
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
        let html = split_html(
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

    /// The command line: the engine's flags only with an engine named (the first card
    /// when none is chosen), a value that is not a plain word quoted for the shell.
    #[test]
    fn the_command_line_carries_the_engines_flags_and_quotes() {
        let own = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let r = |pairs: &[(&str, &str)], page: &[(&str, &str)]| RulesRequest {
            pairs: own(pairs),
            page: own(page),
            tensors: None,
        };
        let pairs = [("layers", "32"), ("model", "it's")];
        assert_eq!(
            command(&r(&pairs, &[("gpu-memory-utilization", "0.8")])),
            "gpumem-agent estimate --layers 32 --model 'it'\\''s'"
        );
        let cmd = command(&r(
            &pairs,
            &[
                ("engine", "vllm"),
                ("gpu-memory-utilization", "0.8"),
                ("imported", "1"),
            ],
        ));
        assert!(
            cmd.contains(" --engine vllm")
                && cmd.contains(" --gpu-memory-utilization 0.8")
                && cmd.contains(&format!(" --card {}", CATALOGUE[0].id))
                && cmd.ends_with(" --safetensors … (the imported files)"),
            "{cmd}"
        );
    }

    /// A text the user typed never becomes markup.
    #[test]
    fn every_text_is_escaped() {
        assert_eq!(no_answer("<i>x</i>").matches("<i>").count(), 0);
        assert!(no_answer("loading…").contains(">…</span>"));
        assert!(no_answer("refused").contains(">NO ANSWER</span>"));
        let p = Panel {
            card: "<card>".into(),
            rows: vec![gpumem_proto::rules::PanelRow {
                engine: "e\"x".into(),
                cells: Err("<no>".into()),
            }],
            ..Panel::default()
        };
        let html = panel_html(p);
        assert!(!html.contains("<card>") && !html.contains("<no>"), "{html}");
        assert!(html.contains(r#"colspan="5""#), "{html}");
        let row = sweep_row(4096, true, Err("<bad>".into()), &CATALOGUE[0]);
        assert!(
            row.contains("4 096") && row.contains("&lt;bad&gt;"),
            "{row}"
        );
    }
}
