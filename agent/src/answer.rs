//! The answer `estimate` prints by default: the inputs in one line, the verdict on
//! the card with its bar, need, capacity, headroom and margin, then the ways out
//! (cards needed, smallest card, widest format) — within 100 columns and about 25
//! lines. Every figure and label is [`gpumem_core::headline`]'s; this only lays
//! them out. `--verbose` adds the full tables (`estimate::render_table`).

use std::fmt::Write;

use gpumem_core::estimate::{Estimate, Group, Kind, LineKey};
use gpumem_core::fit::{MARGIN_RULE, RESERVE_SIDE, Verdict};
use gpumem_core::headline::{
    FormatFit, Headline, HostFit, LABEL_CARDS, LABEL_FORMAT, LABEL_MARGIN, LABEL_SMALLEST,
};
use gpumem_core::units::{Bytes, group_digits, signed_gb_string, signed_gib_string};

use crate::engine_cli::EngineOutput;
use gpumem_core::placement::device_map::DeviceMapPlan;
use gpumem_core::placement::llama_cpp::LlamaPlacement;
use gpumem_core::placement::vllm::VllmOffload;

/// The widest line printed.
pub const WIDTH: usize = 100;
/// Cells of the bar.
const BAR: u64 = 50;

/// "20.61 GiB (22.13 GB)".
fn both(b: u64) -> String {
    format!(
        "{} GiB ({} GB)",
        Bytes(b).gib_string(2),
        Bytes(b).gb_string(2)
    )
}

/// `text` wrapped at [`WIDTH`] (its leading spaces kept), continuation lines
/// indented by `indent` spaces.
pub fn wrap(text: &str, indent: usize) -> String {
    let body = text.trim_start_matches(' ');
    let mut line = " ".repeat(text.len().saturating_sub(body.len()));
    let start = line.len();
    let mut out = String::new();
    for word in body.split(' ').filter(|w| !w.is_empty()) {
        let len = line.chars().count();
        if len > start && len + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = " ".repeat(indent);
        } else if len > start {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// The bar: filled cells for the need's share of the capacity, "▶" past it.
fn bar(used_ppm: u64) -> String {
    let filled = used_ppm.saturating_mul(BAR) / 1_000_000;
    let cells: String = (0..BAR)
        .map(|i| if i < filled { '█' } else { '·' })
        .collect();
    let over = if used_ppm > 1_000_000 { "▶" } else { " " };
    format!(
        "[{cells}]{over} {}.{} % of the card",
        used_ppm / 10_000,
        used_ppm / 1_000 % 10
    )
}

/// The default answer.
pub fn render(
    inputs: &str,
    h: &Headline,
    est: &Estimate,
    engine: &EngineOutput,
    formats: Option<&[FormatFit]>,
    from_files: bool,
    sharded: bool,
) -> String {
    let mut s = wrap(inputs, 2);
    let c = &h.card;
    let verdict = Verdict::of_fit(c);
    let split = engine
        .engine
        .as_ref()
        .map_or(&[][..], |b| b.devices.as_slice());
    let on = if h.card_given && !split.is_empty() {
        format!(
            "{} ({} capacity), the most loaded of {} cards",
            c.name,
            c.capacity_kind,
            split.len()
        )
    } else if h.card_given {
        format!("{} ({} capacity)", c.name, c.capacity_kind)
    } else if h.any_fits {
        format!("{} (no --card: the smallest card that fits)", c.name)
    } else {
        format!(
            "{} (no --card, and no card in the catalogue holds it alone: the largest)",
            c.name
        )
    };
    let basis = if h.basis == "estimate" {
        String::new()
    } else {
        format!(", under {}'s budget", h.basis)
    };
    let _ = writeln!(s, "\n{}  on {on}{basis}", verdict.word());
    let _ = writeln!(s, "  {}", bar(h.used_ppm));
    let row = |s: &mut String, label: &str, gib: String, gb: String, b: String| {
        let _ = writeln!(s, "  {label:<10} {gib:>12} GiB {gb:>12} GB {b:>24} B");
    };
    row(
        &mut s,
        "need",
        Bytes(c.need_bytes).gib_string(2),
        Bytes(c.need_bytes).gb_string(2),
        group_digits(c.need_bytes),
    );
    row(
        &mut s,
        "capacity",
        Bytes(c.capacity_bytes).gib_string(2),
        Bytes(c.capacity_bytes).gb_string(2),
        group_digits(c.capacity_bytes),
    );
    row(
        &mut s,
        "headroom",
        signed_gib_string(c.headroom_bytes, 2),
        signed_gb_string(c.headroom_bytes, 2),
        gpumem_core::units::signed_group_digits(c.headroom_bytes),
    );
    let _ = writeln!(
        s,
        "  {:<10} {:>12} GiB    {}{}",
        LABEL_MARGIN.to_lowercase(),
        format!("±{}", Bytes(h.margin.bytes).gib_string(2)),
        if h.basis == "estimate" {
            "½ of the assumed lines"
        } else {
            "the engine's assumed lines' uncertainty"
        },
        if h.margin.capacity_bytes > 0 {
            format!(
                " + {} GiB a label capacity may lack",
                Bytes(h.margin.capacity_bytes).gib_string(2)
            )
        } else {
            String::new()
        }
    );
    if h.margin.reserve_bytes > 0 && verdict != Verdict::Fits {
        let _ = writeln!(
            s,
            "  {:<10} {:>12} GiB    {RESERVE_SIDE}",
            "",
            format!("-{}", Bytes(h.margin.reserve_bytes).gib_string(2)),
        );
    }
    if let Some(q) = &h.sequences {
        let text = match engine.engine.as_ref().and_then(|b| b.batch_tokens) {
            Some(tokens) => batch_text(q, &h.basis, tokens),
            None => sequences_text(q, &h.basis),
        };
        let _ = writeln!(s, "  {:<10} {text}", "sequences");
    }
    if verdict == Verdict::Borderline {
        s.push_str(&wrap(&format!("  {MARGIN_RULE}"), 4));
    }
    if let Some(hf) = &h.host {
        s.push_str(&wrap(&host_text(hf, h.unified.is_some()), 4));
    }
    if let Some(u) = &h.unified {
        s.push_str(&wrap(&format!("  unified memory: {}", u.sentence()), 4));
    }

    if !split.is_empty() {
        let vllm = engine
            .engine
            .as_ref()
            .is_some_and(|b| b.engine.name() == "vllm");
        s.push_str(&split_table(split, vllm, verdict, h));
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "  {LABEL_CARDS:<24} {}",
        match &h.cards {
            Some(n) if n.pp > 1 => format!(
                "{} × {} at tp {} × pp {}: {} each",
                n.cards,
                c.name,
                n.tp,
                n.pp,
                both(n.need_bytes)
            ),
            Some(n) => format!(
                "{} × {} at tp {}: {} each",
                n.cards,
                c.name,
                n.tp,
                both(n.need_bytes)
            ),
            None => match &h.cards_note {
                Some(note) => note.clone(),
                None => format!("more than 64 × {} (tp ≤ 64 tried)", c.name),
            },
        }
    );
    let _ = writeln!(
        s,
        "  {LABEL_SMALLEST:<24} {}",
        match &h.smallest {
            Some(f) => format!(
                "{} ({} GiB, headroom {} GiB)",
                f.name,
                Bytes(f.capacity_bytes).gib_string(2),
                signed_gib_string(f.headroom_bytes, 2)
            ),
            None => "none in the catalogue (see cards needed)".into(),
        }
    );
    let _ = writeln!(
        s,
        "  {LABEL_FORMAT:<24} {}",
        match &h.format {
            Some(f) => format!("{}: {} per device", f.format, both(f.fit.need_bytes)),
            None if from_files => "the file's (weights read from its headers)".into(),
            None => "none this workload can take (--formats compares any)".into(),
        }
    );
    if let Some(p) = &engine.placement {
        s.push_str(&placement_text(p, h.unified.is_some()));
    }
    if let Some(o) = &engine.cpu_offload {
        s.push_str(&cpu_offload_text(o, h.unified.is_some()));
    }
    if let Some(p) = &engine.device_map {
        s.push_str(&device_map_text(p, LABEL_DEVICE_MAP, h.unified.is_some()));
        if let Some(c) = &p.chosen {
            s.push_str(&device_map_text(c, LABEL_MAX_MEMORY, h.unified.is_some()));
        }
    }
    if let Some(rows) = formats {
        s.push('\n');
        s.push_str(&render_formats(rows, &c.name));
    }
    s.push('\n');
    // One total per screen: under an engine its budget is the answer (the engine
    // summary below); the estimate's transformers-style total is in --verbose.
    if h.basis == "estimate" {
        s.push_str(&total_line(est, sharded));
    }
    s.push_str(&engine_summary(engine));
    for w in h.warnings.iter().chain(&est.warnings) {
        s.push_str(&wrap(&format!("  warning: {w}"), 4));
    }
    let assumed = est
        .lines
        .iter()
        .filter(|l| l.in_total && l.kind == Kind::Assumed)
        .count();
    let _ = writeln!(
        s,
        "  {} assumption(s), {assumed} assumed line(s): --verbose for every line, formula and card; --json",
        est.assumptions.len()
    );
    s
}

/// An encoder's batch (no KV pool): "4 sequence(s) of 512 tokens a batch of 2 048
/// tokens in vllm; 16 asked are served in 4 batches".
pub fn batch_text(q: &gpumem_core::headline::Sequences, engine: &str, tokens: u64) -> String {
    let batches = q.asked.div_ceil(q.fit.max(1));
    format!(
        "{} sequence(s) of {} tokens a batch of {} tokens in {engine} (no KV cache); {} asked: {} batch(es)",
        group_digits(q.fit),
        group_digits(q.tokens),
        group_digits(tokens),
        group_digits(q.asked),
        if q.fit == 0 {
            "none".to_string()
        } else {
            group_digits(batches)
        }
    )
}

/// "14 of 16 sequences of 32 768 tokens fit at once in vllm's pool".
pub fn sequences_text(q: &gpumem_core::headline::Sequences, engine: &str) -> String {
    if q.fit >= q.asked {
        format!(
            "all {} sequence(s) of {} tokens fit at once in {engine}'s pool ({} would)",
            group_digits(q.asked),
            group_digits(q.tokens),
            group_digits(q.fit)
        )
    } else {
        format!(
            "{} of {} sequences of {} tokens fit at once in {engine}'s pool",
            group_digits(q.fit),
            group_digits(q.asked),
            group_digits(q.tokens)
        )
    }
}

/// "total 26.59 GiB = weights 14.96 + KV cache 4.00 + …"; for a sharded training
/// run what one rank holds ("per rank …", the groups' device figures), and the host
/// memory per node that offloading needs.
fn total_line(est: &Estimate, per_rank: bool) -> String {
    let device = |g: Group| -> u64 {
        est.lines
            .iter()
            .filter(|l| l.in_total && l.group == g)
            .map(|l| l.device_bytes)
            .fold(0, u64::saturating_add)
    };
    let pick = |g: Group, whole: u64| if per_rank { device(g) } else { whole };
    let mut parts = vec![format!(
        "weights {}",
        Bytes(pick(Group::Weights, est.weights_bytes)).gib_string(2)
    )];
    for (name, group, b) in [
        (
            "KV cache",
            Group::KvCache,
            pick(Group::KvCache, est.kv_cache_bytes),
        ),
        (
            "training",
            Group::Training,
            pick(Group::Training, est.training_bytes),
        ),
        (
            "transients",
            Group::Transient,
            pick(Group::Transient, est.transient_bytes),
        ),
        ("reserve", Group::Reserve, est.reserve_bytes),
    ] {
        if b > 0 {
            let tag = if est.group_is_assumed(group) {
                " (assumed)"
            } else {
                ""
            };
            parts.push(format!("{name}{tag} {}", Bytes(b).gib_string(2)));
        }
    }
    let mut s = wrap(
        &format!(
            "  {} {} GiB = {} GiB",
            if per_rank { "per rank" } else { "total" },
            Bytes(if per_rank {
                est.per_device_bytes
            } else {
                est.total_bytes
            })
            .gib_string(2),
            parts.join(" + ")
        ),
        4,
    );
    // The caching allocator: the step's allocated and reserved peaks (the verdict's
    // figure is the reserved one) and the model loading's peak beside them.
    let line = |k: LineKey| est.lines.iter().find(|l| l.key == k);
    if let Some(load) = line(LineKey::ModelLoad) {
        let cache = line(LineKey::AllocatorCache).map_or(0, |l| l.device_bytes);
        let need = est.per_device_bytes.saturating_sub(est.reserve_bytes);
        let load_reserved = load
            .inputs
            .get("reserved")
            .and_then(|r| r.parse::<u64>().ok())
            .unwrap_or(load.bytes);
        s.push_str(&wrap(
            &format!(
                "  step: allocated {} GiB, reserved {} GiB (the caching allocator's segments: the need above); model loading: allocated {} GiB, reserved {} GiB",
                Bytes(need.saturating_sub(cache)).gib_string(2),
                Bytes(need).gib_string(2),
                Bytes(load.bytes).gib_string(2),
                Bytes(load_reserved).gib_string(2)
            ),
            4,
        ));
    }
    s
}

/// The rows of an engine's split over several cards: each GPU's card, layers, weights,
/// KV cache, need, capacity and headroom (GiB). The verdict is the answer's, on the most
/// loaded GPU's row (the one the headline judges): a row's own check (vLLM's rows hold
/// one sequence of max-model-len) never stands beside it, so no row says "fits" under a
/// DOES NOT FIT; when the answer's need is not that row's, the note says why (the page's
/// table says the same).
pub fn split_table(
    devices: &[gpumem_core::engine::DeviceShare],
    vllm: bool,
    verdict: Verdict,
    h: &Headline,
) -> String {
    let gib = |b: u64| Bytes(b).gib_string(2);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n  {:<3} {:<14} {:<26} {:>7} {:>6} {:>6} {:>8} {:>8} verdict",
        "GPU", "card", "layers", "weights", "KV", "need", "capacity", "headroom"
    );
    for d in devices {
        let verdict = if d.most_loaded {
            format!("most loaded: {}", verdict.word())
        } else {
            String::new()
        };
        let row = format!(
            "  {:<3} {:<14} {:<26} {:>7} {:>6} {:>6} {:>8} {:>8} {verdict}",
            d.device,
            d.card,
            d.layers.replace(" and the output layer", " + output"),
            gib(d.weights_bytes),
            gib(d.kv_bytes),
            gib(d.need_bytes),
            gib(d.capacity_bytes),
            signed_gib_string(d.headroom_bytes, 2),
        );
        let _ = writeln!(s, "{}", row.trim_end());
    }
    let why = match (devices.iter().find(|d| d.most_loaded), &h.sequences) {
        (Some(d), Some(q)) if d.need_bytes != h.card.need_bytes && q.asked > 1 => format!(
            "; the answer's need, {} GiB ({} GB), is GPU {}'s with the {} sequences asked at once",
            Bytes(h.card.need_bytes).gib_string(2),
            Bytes(h.card.need_bytes).gb_string(2),
            d.device,
            q.asked
        ),
        _ => String::new(),
    };
    s.push_str(&wrap(
        &format!(
            "  GiB; {}{why}",
            if vllm {
                gpumem_core::engine::SPLIT_NOTE_VLLM
            } else {
                gpumem_core::engine::SPLIT_NOTE_LLAMA_CPP
            }
        ),
        4,
    ));
    s
}

fn engine_summary(e: &EngineOutput) -> String {
    let mut s = String::new();
    if let Some(b) = &e.engine
        && let Some(tokens) = b.batch_tokens
    {
        s.push_str(&wrap(
            &format!(
                "  {} on {}: no KV cache; {} GiB left on the card at its largest batch ({} tokens: {} sequence(s) of {} tokens)",
                b.engine.name(),
                b.card_name,
                signed_gib_string(b.kv_capacity_bytes, 2),
                group_digits(tokens),
                group_digits(b.max_sequences),
                group_digits(b.max_model_len)
            ),
            4,
        ));
    } else if let Some(b) = &e.engine {
        s.push_str(&wrap(
            &format!(
                "  {} on {}{}: KV pool {} GiB = {} tokens → {} sequence(s) of {} tokens",
                b.engine.name(),
                b.card_name,
                if b.devices.is_empty() {
                    ""
                } else {
                    " (the most loaded card)"
                },
                signed_gib_string(b.kv_capacity_bytes, 2),
                group_digits(b.kv_capacity_tokens),
                group_digits(b.max_sequences),
                group_digits(b.max_model_len)
            ),
            4,
        ));
        // An engine that refuses before it sizes any pool (no pool at all: vLLM's
        // start-up check, mlx-lm off a Mac) says why: the common ending's last word.
        if b.outcome == gpumem_core::engine::Outcome::Refused
            && b.kv_capacity_bytes == 0
            && let Some(why) = b.warnings.last()
        {
            s.push_str(&wrap(&format!("    refused: {why}"), 6));
        }
    } else if e.engine_per_card.is_some() {
        s.push_str(
            "  the engine's KV pool on every card: --verbose (or --card CARD for its budget)\n",
        );
    } else if let Some(l) = &e.largest {
        let ctx = l
            .largest_context
            .map_or("none".into(), |c| format!("{} tokens", group_digits(c)));
        let trained = l
            .positions_note()
            .map_or(String::new(), |n| format!(", {n}"));
        s.push_str(&wrap(
            &format!(
                "  largest context on the card ({}) at {} sequence(s): {ctx}{trained}",
                if l.basis == "estimate" {
                    "no engine: the estimate".to_string()
                } else {
                    l.basis.clone()
                },
                l.at_sequences
            ),
            4,
        ));
    }
    s
}

/// The label of the placement chosen ([`placement_text`]).
pub const LABEL_PLACEMENT: &str = "Placement that fits";

/// llama.cpp's placement chosen for the card: the flags to type, what they leave
/// where, the card's verdict with them and with one block more, the host RAM they
/// need against `--ram`, and what llama.cpp's own `--fit` would do.
pub fn placement_text(p: &LlamaPlacement, mac: bool) -> String {
    // The label padded as the rows above it are: `wrap` keeps no inner run of spaces,
    // so the padding is no-break spaces until the line is wrapped.
    let label = format!("{LABEL_PLACEMENT:<24}").replace(' ', "\u{a0}");
    let f = &p.fit;
    let mut s = String::new();
    if Verdict::of_fit(f) == Verdict::DoesNotFit {
        s.push_str(&wrap(
            &format!(
                "  {label} none: even {} needs {} on the card (the context, the compute buffer and the 1 GiB --fit leaves free)",
                p.flags,
                both(f.need_bytes)
            ),
            4,
        ));
        return s.replace('\u{a0}', " ");
    }
    let next = Verdict::of_fit(&p.next);
    s.push_str(&wrap(
        &format!(
            "  {label} llama-server {}: {}; {} of {} on the card, {} (headroom {} GiB); one block more: {}, headroom {} GiB",
            p.flags,
            p.what(),
            both(f.need_bytes),
            both(f.capacity_bytes),
            Verdict::of_fit(f).word(),
            signed_gib_string(f.headroom_bytes, 2),
            next.word(),
            signed_gib_string(p.next.headroom_bytes, 2)
        ),
        4,
    ));
    if let Some(hf) = &p.host {
        s.push_str(&wrap(
            &format!("    {}", host_text(hf, mac).trim_start()),
            6,
        ));
    }
    s.push_str(&wrap(&format!("    {}", p.fit_note), 6));
    s.replace('\u{a0}', " ")
}

/// vLLM's `--cpu-offload-gb` chosen: the flag, the card's verdict with it and with
/// one GiB less, and the pinned host RAM against `--ram`.
pub fn cpu_offload_text(o: &VllmOffload, mac: bool) -> String {
    let label = format!("{LABEL_PLACEMENT:<24}").replace(' ', "\u{a0}");
    let f = &o.fit;
    let mut s = if Verdict::of_fit(f) == Verdict::DoesNotFit {
        wrap(
            &format!(
                "  {label} none: even vllm serve {} (every decoder layer's weights in host memory) needs {} on the card",
                o.flags,
                both(f.need_bytes)
            ),
            4,
        )
    } else {
        let next = o.next.as_ref().map_or(String::new(), |n| {
            format!(
                "; one GiB less: {}, headroom {} GiB",
                Verdict::of_fit(n).word(),
                signed_gib_string(n.headroom_bytes, 2)
            )
        });
        wrap(
            &format!(
                "  {label} vllm serve {}: {} of {} on the card, {} (headroom {} GiB){next}",
                o.flags,
                both(f.need_bytes),
                both(f.capacity_bytes),
                Verdict::of_fit(f).word(),
                signed_gib_string(f.headroom_bytes, 2)
            ),
            4,
        )
    };
    if let Some(hf) = &o.host {
        s.push_str(&wrap(
            &format!("    {}", host_text(hf, mac).trim_start()),
            6,
        ));
    }
    s.replace('\u{a0}', " ")
}

/// The label of transformers' device map ([`device_map_text`]).
pub const LABEL_DEVICE_MAP: &str = "device_map=\"auto\"";

/// The label of a `max_memory` chosen to fit.
pub const LABEL_MAX_MEMORY: &str = "max_memory that fits";

/// transformers' `device_map="auto"` planned: the call to type, then per device what
/// the map puts there, its bytes and (GPUs) its verdict, the host RAM against
/// `--ram`, and how the figures were reached.
pub fn device_map_text(p: &DeviceMapPlan, label: &str, mac: bool) -> String {
    let label = format!("{label:<24}").replace(' ', "\u{a0}");
    let mut s = wrap(&format!("  {label} {}", p.code), 4);
    for d in &p.devices {
        let name = match d.device.as_str() {
            "cpu" => "CPU".to_string(),
            "disk" => "disk".to_string(),
            g => format!("GPU {g}"),
        };
        let mm = d
            .max_memory_bytes
            .map(|m| format!(" (max_memory {} GiB)", Bytes(m).gib_string(2)))
            .unwrap_or_default();
        let mut t = format!(
            "    {name}: {}: {} of weights{mm}",
            if d.modules.is_empty() {
                "nothing"
            } else {
                &d.modules
            },
            both(d.weights_bytes)
        );
        if let Some(f) = &d.fit {
            t.push_str(&format!(
                ", {} KV; needs {} of {}: {} (headroom {} GiB)",
                both(d.kv_bytes),
                both(f.need_bytes),
                both(f.capacity_bytes),
                Verdict::of_fit(f).word(),
                signed_gib_string(f.headroom_bytes, 2)
            ));
        }
        s.push_str(&wrap(&t, 6));
    }
    if let Some(hf) = &p.host {
        s.push_str(&wrap(
            &format!("    {}", host_text(hf, mac).trim_start()),
            6,
        ));
    }
    for n in &p.notes {
        s.push_str(&wrap(&format!("    {n}"), 6));
    }
    s.replace('\u{a0}', " ")
}

/// The host memory's line: what it holds, per node, and its verdict against the RAM.
pub fn host_text(h: &HostFit, mac: bool) -> String {
    format!("  host RAM   {}", h.sentence(mac))
}

/// `--formats`: each format side by side on the card.
pub fn render_formats(rows: &[FormatFit], card: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "  {:<14} {:>22} {:>22} {:>13}  on {card}",
        "format", "weights", "need per device", "headroom"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "  {:<14} {:>22} {:>22} {:>9} GiB  {}{}",
            r.format,
            both(r.weights_bytes),
            both(r.fit.need_bytes),
            signed_gib_string(r.fit.headroom_bytes, 2),
            Verdict::of_fit(&r.fit).word(),
            if r.runs {
                ""
            } else {
                " (the card runs no fp8)"
            }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_every_word_within_the_width() {
        let text = "word ".repeat(60);
        let w = wrap(text.trim(), 4);
        assert!(w.lines().all(|l| l.chars().count() <= WIDTH), "{w}");
        assert_eq!(w.split_whitespace().count(), 60);
        assert!(w.lines().skip(1).all(|l| l.starts_with("    word")));
    }

    #[test]
    fn the_bar_fills_with_the_share_and_marks_an_overflow() {
        assert!(bar(500_000).starts_with(&format!("[{}{}]", "█".repeat(25), "·".repeat(25))));
        assert!(bar(500_000).ends_with(" 50.0 % of the card"));
        assert!(bar(1_200_000).contains("]▶ 120.0 %"));
        assert_eq!(bar(0).matches('█').count(), 0);
    }
}
