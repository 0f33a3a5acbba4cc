//! The allocator's history of one process on the agent page (`run --memory-history`,
//! live or replayed): the timeline — allocated by the estimate's line over the events,
//! stacked, the reserved segments behind it, the phases as bands — and the highest
//! peak's breakdown beside the estimate's lines, with the largest allocations of it.
//!
//! Everything drawn is the attribution the agent computed
//! (`gpumem_proto::history::attribute`); no figure is derived here. It is read from the
//! document's JSON as it arrived and written as markup by [`history_html`], a pure
//! function: no deserializer and no view code per shape, which keeps the agent page's
//! wasm small. The document comes from the network or from an imported file, so every
//! text is escaped ([`esc`]) and clipped, points, bands and rows are bounded ("n more"
//! says what was left out), scaling saturates, and no value makes it panic. SVG shapes
//! and classes only (the pages' Content-Security-Policy forbids style attributes).

use gpumem_core::units::{Bytes, group_digits};
use gpumem_proto::workload::Comparison;
use leptos::prelude::*;
use serde_json::Value;

/// Most timeline points drawn (the agent sends at most
/// `gpumem_proto::history::TIMELINE_POINTS`).
pub const MAX_POINTS: usize = 600;
/// Most phase bands drawn.
pub const MAX_BANDS: usize = 200;
/// Most largest allocations listed.
pub const MAX_LARGEST: usize = 12;
/// Most notes shown.
const MAX_NOTES: usize = 8;
/// Longest text shown (a phase, a site, a note); the detail may be longer.
const MAX_TEXT: usize = 300;

const W: u64 = 1000;
const TOP: u64 = 22;
const H: u64 = 220;

/// The lines in the order of `gpumem_proto::history::HistoryLine::ALL`: the JSON name,
/// the words, the class of its shapes (colours in style.css) and the comparison item
/// (the estimate's line) it stands beside.
const LINES: [(&str, &str, &str, Option<&str>); 9] = [
    ("weights", "weights", "h-weights", Some("weights")),
    ("master_weights", "master weights", "h-master", None),
    ("gradients", "gradients", "h-grads", Some("gradients")),
    (
        "optimizer_state",
        "optimizer state",
        "h-optim",
        Some("optimizer_states"),
    ),
    ("activations", "activations", "h-activ", Some("activations")),
    ("logits", "logits", "h-logits", None),
    ("kv_cache", "KV cache", "h-kv", Some("kv_cache")),
    ("workspaces", "workspaces", "h-wkspace", None),
    ("temporaries", "temporaries", "h-temp", None),
];

pub use gpumem_proto::markup::esc;

fn num(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn step(v: &Value) -> Option<u64> {
    v.get("step").and_then(Value::as_u64)
}

/// `v` of `max` as a height in `0..=H`; saturating.
fn scaled(v: u64, max: u64) -> u64 {
    let s = u128::from(v).saturating_mul(u128::from(H)) / u128::from(max.max(1));
    u64::try_from(s).unwrap_or(H).min(H)
}

/// Event `e` of `last` as an x in `0..=W`; saturating.
fn x_of(e: u64, last: u64) -> u64 {
    let s = u128::from(e).saturating_mul(u128::from(W)) / u128::from(last.max(1));
    u64::try_from(s).unwrap_or(W).min(W)
}

/// Evenly thinned to at most `n` (the first and last kept).
fn thin(items: &[Value], n: usize) -> Vec<&Value> {
    if items.len() <= n || n < 2 {
        return items.iter().take(n.max(1)).collect();
    }
    let last = items.len() - 1;
    (0..n)
        .filter_map(|i| items.get(i.saturating_mul(last) / (n - 1)))
        .collect()
}

/// The bytes of line `k` at a timeline point.
fn at(p: &Value, k: usize) -> u64 {
    list(p, "by_line")
        .get(k)
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

fn phase_words(v: &Value) -> String {
    match step(v) {
        Some(s) => format!("{} {s}", text(v, "phase")),
        None => text(v, "phase").to_owned(),
    }
}

/// The timeline's markup: bands, the reserved area, one stacked area per line that holds
/// bytes, the axis, and the legend.
fn timeline(a: &Value, out: &mut String) {
    let points = thin(list(a, "timeline"), MAX_POINTS);
    let bands = list(a, "bands");
    let last = points
        .iter()
        .map(|p| num(p, "event"))
        .chain(bands.iter().map(|b| num(b, "last")))
        .max()
        .unwrap_or(1);
    let max = points
        .iter()
        .map(|p| {
            let allocated = (0..LINES.len()).fold(0u64, |s, k| s.saturating_add(at(p, k)));
            num(p, "reserved_bytes").max(allocated)
        })
        .max()
        .unwrap_or(1)
        .max(1);
    let base = TOP + H;
    let y = |v: u64| base.saturating_sub(scaled(v, max));
    out.push_str(&format!(
        "<figure class=\"timeline history-timeline\" data-testid=\"history-timeline\"><svg viewBox=\"0 0 {W} {}\" role=\"img\" aria-label=\"Allocated by the estimate's line over the allocator's events, reserved behind, phases as bands\">",
        TOP + H + 24
    ));
    for (i, b) in bands.iter().take(MAX_BANDS).enumerate() {
        let x0 = x_of(num(b, "first"), last);
        let x1 = x_of(num(b, "last"), last).max(x0.saturating_add(1));
        let name = esc(&phase_words(b), MAX_TEXT);
        out.push_str(&format!(
            "<rect x=\"{x0}\" y=\"{TOP}\" width=\"{}\" height=\"{H}\" class=\"band{}\" data-testid=\"history-band\" data-phase=\"{}\"{}/>",
            x1 - x0,
            if i % 2 == 1 { " odd" } else { "" },
            esc(text(b, "phase"), MAX_TEXT),
            step(b).map_or(String::new(), |s| format!(" data-step=\"{s}\""))
        ));
        let width = x1 - x0;
        if width >= 8 * u64::try_from(name.chars().count()).unwrap_or(u64::MAX) {
            out.push_str(&format!(
                "<text x=\"{}\" y=\"{}\" class=\"lbl\">{name}</text>",
                x0 + width / 2,
                TOP - 6
            ));
        }
    }
    let xs: Vec<u64> = points.iter().map(|p| x_of(num(p, "event"), last)).collect();
    let mut reserved: Vec<String> = points
        .iter()
        .zip(&xs)
        .map(|(p, x)| format!("{x},{}", y(num(p, "reserved_bytes"))))
        .collect();
    reserved.push(format!("{},{base}", xs.last().copied().unwrap_or(0)));
    reserved.push(format!("{},{base}", xs.first().copied().unwrap_or(0)));
    out.push_str(&format!(
        "<polygon points=\"{}\" class=\"area h-reserved\" data-testid=\"history-reserved\"/>",
        reserved.join(" ")
    ));
    // Cumulative tops per point, line by line in the order shown.
    let mut below = vec![0u64; points.len()];
    for (k, (_, label, class, _)) in LINES.iter().enumerate() {
        if points.iter().all(|p| at(p, k) == 0) {
            continue;
        }
        let tops: Vec<u64> = points
            .iter()
            .zip(&below)
            .map(|(p, b)| b.saturating_add(at(p, k)))
            .collect();
        let upper = xs.iter().zip(&tops).map(|(x, t)| format!("{x},{}", y(*t)));
        let lower = xs
            .iter()
            .zip(&below)
            .rev()
            .map(|(x, b)| format!("{x},{}", y(*b)));
        out.push_str(&format!(
            "<polygon points=\"{}\" class=\"area {class}\" data-testid=\"history-area\" data-line=\"{label}\"/>",
            upper.chain(lower).collect::<Vec<_>>().join(" ")
        ));
        below = tops;
    }
    out.push_str(&format!(
        "<text x=\"4\" y=\"{}\" class=\"axis\">y: bytes, 0 to {}; x: the allocator's events in order, 0 to {}</text></svg><figcaption class=\"legend\">",
        TOP + H + 18,
        esc(&Bytes(max).describe(), MAX_TEXT),
        group_digits(last)
    ));
    for (_, label, class, _) in LINES {
        out.push_str(&format!("<span><i class=\"sw {class}\"></i>{label}</span>"));
    }
    out.push_str("<span><i class=\"sw h-reserved\"></i>reserved (segments)</span>");
    let hidden = bands.len().saturating_sub(MAX_BANDS);
    if hidden > 0 {
        out.push_str(&format!(
            "<span class=\"muted\" data-testid=\"history-more\">{hidden} more phase band(s) not drawn</span>"
        ));
    }
    out.push_str("</figcaption></figure>");
}

fn cell(v: Option<u64>, out: &mut String) {
    match v {
        Some(b) => out.push_str(&format!(
            "<td class=\"num\" title=\"{}\">{}</td>",
            esc(&Bytes(b).describe(), MAX_TEXT),
            group_digits(b)
        )),
        None => out.push_str("<td class=\"num\" title=\"no estimate line for it\">—</td>"),
    }
}

/// The highest peak's lines beside the estimate's, and its largest allocations.
fn breakdown(peak: &Value, comparison: Option<&Comparison>, out: &mut String) {
    let estimate = |item: Option<&str>| -> Option<u64> {
        comparison?
            .lines
            .iter()
            .find(|l| Some(l.item.as_str()) == item)?
            .computed_bytes
    };
    let at_words = match step(peak) {
        Some(s) => format!("{} of step {s}", text(peak, "phase")),
        None => text(peak, "phase").to_owned(),
    };
    out.push_str(&format!(
        "<div class=\"scroll\"><table class=\"comparison history-breakdown\" data-testid=\"history-breakdown\" data-phase=\"{}\"{}><caption>The highest peak, at {}: {} allocated, {} reserved — each line beside the estimate's, in bytes</caption><thead><tr><th scope=\"col\">line</th><th scope=\"col\" class=\"num\">at the peak (history)</th><th scope=\"col\" class=\"num\">estimate (computed)</th></tr></thead><tbody>",
        esc(text(peak, "phase"), MAX_TEXT),
        step(peak).map_or(String::new(), |s| format!(" data-step=\"{s}\"")),
        esc(&at_words, MAX_TEXT),
        esc(&Bytes(num(peak, "allocated_bytes")).describe(), MAX_TEXT),
        esc(&Bytes(num(peak, "reserved_bytes")).describe(), MAX_TEXT),
    ));
    let lines = list(peak, "lines");
    for (name, label, class, item) in LINES {
        let bytes = lines
            .iter()
            .find(|l| text(l, "line") == name)
            .map_or(0, |l| num(l, "bytes"));
        let est = estimate(item);
        out.push_str(&format!(
            "<tr data-testid=\"history-line\" data-line=\"{label}\" data-bytes=\"{bytes}\"{}{}><th scope=\"row\"><i class=\"sw {class}\"></i> {label}</th>",
            est.map_or(String::new(), |e| format!(" data-estimate=\"{e}\"")),
            if est.is_some_and(|e| bytes > e) {
                " class=\"over\""
            } else {
                ""
            },
        ));
        cell(Some(bytes), out);
        cell(est, out);
        out.push_str("</tr>");
    }
    let slack = num(peak, "slack_bytes");
    out.push_str(&format!(
        "<tr data-testid=\"history-line\" data-line=\"slack\" data-bytes=\"{slack}\"><th scope=\"row\"><i class=\"sw h-reserved\"></i> allocator slack (reserved − allocated)</th>"
    ));
    cell(Some(slack), out);
    cell(None, out);
    out.push_str("</tr></tbody></table></div><p class=\"small\">The largest allocations live at that peak, with where they were made:</p><ul class=\"small largest\" data-testid=\"history-largest-list\">");
    let mut largest: Vec<&Value> = list(peak, "largest").iter().collect();
    largest.sort_by_key(|b| std::cmp::Reverse(num(b, "bytes")));
    for b in largest.iter().take(MAX_LARGEST) {
        let label = LINES
            .iter()
            .find(|l| l.0 == text(b, "line"))
            .map_or("", |l| l.1);
        let bytes = num(b, "bytes");
        out.push_str(&format!(
            "<li data-testid=\"history-largest\" data-line=\"{label}\"><span class=\"num\" title=\"{}\">{} B</span> <strong>{label}</strong> <code>{}</code>",
            esc(&Bytes(bytes).describe(), MAX_TEXT),
            group_digits(bytes),
            esc(text(b, "site"), MAX_TEXT)
        ));
        if !text(b, "scope").is_empty() {
            out.push_str(&format!(
                " <span class=\"muted\">[{}]</span>",
                esc(text(b, "scope"), MAX_TEXT)
            ));
        }
        out.push_str("</li>");
    }
    out.push_str("</ul>");
}

/// One process's history (its `memory_history` object) as markup: the detail, the
/// snapshot's file, then the timeline, the highest peak's breakdown and the notes.
pub fn history_html(h: &Value, comparison: Option<&Comparison>) -> String {
    let mut out = String::from("<h5>Which tensors: the allocator's history</h5>");
    out.push_str(&format!(
        "<p class=\"small\" data-testid=\"history-detail\">{}</p>",
        esc(text(h, "detail"), 4 * MAX_TEXT)
    ));
    if !text(h, "pickle").is_empty() {
        out.push_str(&format!(
            "<p class=\"small\">Raw snapshot (pytorch.org/memory_viz reads it): <code>{}</code></p>",
            esc(text(h, "pickle"), MAX_TEXT)
        ));
    }
    if let Some(a) = h.get("attribution").filter(|a| a.is_object()) {
        timeline(a, &mut out);
        // The highest peak (the first of equals).
        let top = list(a, "peaks")
            .iter()
            .fold(None::<&Value>, |best, p| match best {
                Some(b) if num(b, "allocated_bytes") >= num(p, "allocated_bytes") => Some(b),
                _ => Some(p),
            });
        if let Some(p) = top {
            breakdown(p, comparison, &mut out);
        }
        for n in list(a, "notes").iter().take(MAX_NOTES) {
            out.push_str(&format!(
                "<p class=\"small muted\">{}</p>",
                esc(n.as_str().unwrap_or(""), MAX_TEXT)
            ));
        }
    }
    out
}

/// One process's history on the page.
pub fn history_view(h: &Value, comparison: Option<&Comparison>) -> impl IntoView + use<> {
    let status = if text(h, "status") == "recorded" {
        "recorded"
    } else {
        "not_possible"
    };
    view! {
        <section class="history" data-testid="history" data-status=status
            inner_html=history_html(h, comparison)></section>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_saturate_and_thinning_keeps_the_ends() {
        assert_eq!(scaled(u64::MAX, 1), H);
        assert_eq!(scaled(5, 0), H);
        assert_eq!(x_of(u64::MAX, 0), W);
        assert_eq!(x_of(0, u64::MAX), 0);
        let items: Vec<Value> = (1..=5).map(Value::from).collect();
        assert_eq!(thin(&items, 3), [&items[0], &items[2], &items[4]]);
    }

    /// Texts from the document never become markup, and nothing it holds (wrong
    /// types, huge numbers, missing fields) makes it panic.
    #[test]
    fn hostile_documents_are_escaped_and_bounded() {
        let evil = "<img src=x onerror=alert(1)>\"'&";
        let h = serde_json::json!({
            "status": "recorded",
            "detail": evil,
            "pickle": evil,
            "attribution": {
                "peaks": [{"phase": evil, "step": 1, "allocated_bytes": u64::MAX,
                    "reserved_bytes": u64::MAX, "slack_bytes": 0,
                    "lines": [{"line": "weights", "bytes": u64::MAX}, {"line": 3}],
                    "largest": [{"line": "weights", "bytes": 7, "site": evil, "scope": evil}]}],
                "timeline": [{"event": u64::MAX, "reserved_bytes": u64::MAX,
                    "by_line": [u64::MAX, u64::MAX, "x", -1]}, {"event": 0}, 5],
                "bands": [{"phase": evil, "step": null, "first": u64::MAX, "last": 0}],
                "notes": [evil, 3]
            }
        });
        let html = history_html(&h, None);
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("onerror=alert(1)>\""));
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;&quot;&#39;&amp;"));
        for weird in [
            serde_json::json!(null),
            serde_json::json!([1]),
            serde_json::json!({"attribution": 5}),
            serde_json::json!({"attribution": {"peaks": 1, "timeline": {}, "bands": "x"}}),
        ] {
            let _ = history_html(&weird, None);
        }
        let long = "x".repeat(10_000);
        let clipped = esc(&long, MAX_TEXT);
        assert_eq!(clipped.chars().count(), MAX_TEXT + 1);
    }

    /// The fixture's history: one band per phase, one row per line and the slack, the
    /// estimate beside the lines it has.
    #[test]
    fn the_fixtures_history_is_drawn() {
        let doc: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/workloads/synthetic-train_history.json"
        ))
        .expect("fixture");
        let rank = &doc["ranks"][0];
        let c: Comparison = serde_json::from_value(rank["comparison"].clone()).expect("comparison");
        let html = history_html(&rank["memory_history"], Some(&c));
        assert_eq!(
            html.matches("data-testid=\"history-band\"").count(),
            list(&rank["memory_history"]["attribution"], "bands").len()
        );
        assert_eq!(html.matches("data-testid=\"history-line\"").count(), 10);
        assert!(html.contains("data-line=\"optimizer state\" data-bytes=\"33554432\""));
        assert!(!html.contains("style="));
    }
}
