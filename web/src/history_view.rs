//! The allocator's history of one process on the agent page (`run --memory-history`,
//! live or replayed): the timeline — allocated by the estimate's line over the events,
//! stacked, the reserved segments behind it, the phases as bands — and the highest
//! peak's breakdown beside the estimate's lines, with the largest allocations of each.
//!
//! Everything drawn is the attribution the agent computed
//! (`gpumem_proto::history::attribute`); no figure is derived here. The document comes
//! from the network: points, bands and rows are bounded ("n more" says what was left
//! out), scaling saturates, and no value makes it panic. SVG shapes and classes only
//! (the pages' Content-Security-Policy forbids style attributes).

use gpumem_core::units::{Bytes, group_digits};
use gpumem_proto::history::{Attribution, HistoryLine, PeakAttribution, TimelinePoint};
use gpumem_proto::workload::{Comparison, HistoryStatus};
use leptos::prelude::*;
use serde::Deserialize;

/// Most timeline points drawn (the agent sends at most
/// `gpumem_proto::history::TIMELINE_POINTS`).
pub const MAX_POINTS: usize = 600;
/// Most phase bands drawn.
pub const MAX_BANDS: usize = 200;
/// Most largest allocations listed.
pub const MAX_LARGEST: usize = 12;

const W: u64 = 1000;
const TOP: u64 = 22;
const H: u64 = 220;

/// A process's history as the page reads it: everything but the events (which the agent
/// leaves out of what it sends; a document that still holds them is read past them).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ShownHistory {
    /// Recorded or not.
    pub status: HistoryStatus,
    /// What was recorded, or why not.
    pub detail: String,
    /// Where the raw snapshot was written.
    #[serde(default)]
    pub pickle: Option<String>,
    /// The attribution.
    #[serde(default)]
    pub attribution: Option<Attribution>,
    /// Why the events are not in the document, when they are not.
    #[serde(default)]
    pub left_out: Option<String>,
}

/// The class of a line's shapes (colours in style.css).
fn class_of(line: HistoryLine) -> &'static str {
    match line {
        HistoryLine::Weights => "h-weights",
        HistoryLine::MasterWeights => "h-master",
        HistoryLine::Gradients => "h-grads",
        HistoryLine::OptimizerState => "h-optim",
        HistoryLine::Activations => "h-activ",
        HistoryLine::Logits => "h-logits",
        HistoryLine::KvCache => "h-kv",
        HistoryLine::Workspaces => "h-wkspace",
        HistoryLine::Temporaries => "h-temp",
    }
}

/// The comparison item (the estimate's line) a history line stands beside.
fn item_of(line: HistoryLine) -> Option<&'static str> {
    Some(match line {
        HistoryLine::Weights => "weights",
        HistoryLine::Gradients => "gradients",
        HistoryLine::OptimizerState => "optimizer_states",
        HistoryLine::Activations => "activations",
        HistoryLine::KvCache => "kv_cache",
        _ => return None,
    })
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
fn thin<T: Clone>(items: &[T], n: usize) -> Vec<T> {
    if items.len() <= n || n < 2 {
        return items.iter().take(n.max(1)).cloned().collect();
    }
    let last = items.len() - 1;
    (0..n)
        .filter_map(|i| items.get(i.saturating_mul(last) / (n - 1)).cloned())
        .collect()
}

fn at(p: &TimelinePoint, k: usize) -> u64 {
    p.by_line.get(k).copied().unwrap_or(0)
}

/// The stacked areas (one polygon per line), the reserved area behind them and the bands.
fn timeline(a: &Attribution) -> impl IntoView + use<> {
    let points = thin(&a.timeline, MAX_POINTS);
    let last = points
        .iter()
        .map(|p| p.event)
        .chain(a.bands.iter().map(|b| b.last))
        .max()
        .unwrap_or(1);
    let max = points
        .iter()
        .map(|p| p.reserved_bytes.max(p.allocated()))
        .max()
        .unwrap_or(1)
        .max(1);
    let base = TOP + H;
    let y = |v: u64| base.saturating_sub(scaled(v, max));
    let reserved: String = points
        .iter()
        .map(|p| format!("{},{}", x_of(p.event, last), y(p.reserved_bytes)))
        .chain([
            format!(
                "{},{base}",
                x_of(points.last().map_or(0, |p| p.event), last)
            ),
            format!(
                "{},{base}",
                x_of(points.first().map_or(0, |p| p.event), last)
            ),
        ])
        .collect::<Vec<_>>()
        .join(" ");
    // Cumulative tops per point, line by line in the order shown.
    let mut below = vec![0u64; points.len()];
    let areas = HistoryLine::ALL
        .iter()
        .enumerate()
        .filter(|(k, _)| points.iter().any(|p| at(p, *k) > 0))
        .map(|(k, &line)| {
            let tops: Vec<u64> = points
                .iter()
                .zip(&below)
                .map(|(p, b)| b.saturating_add(at(p, k)))
                .collect();
            let upper = points
                .iter()
                .zip(&tops)
                .map(|(p, t)| format!("{},{}", x_of(p.event, last), y(*t)));
            let lower = points
                .iter()
                .zip(&below)
                .rev()
                .map(|(p, b)| format!("{},{}", x_of(p.event, last), y(*b)));
            let shape = upper.chain(lower).collect::<Vec<_>>().join(" ");
            below = tops;
            view! { <polygon points=shape class=format!("area {}", class_of(line))
            data-testid="history-area" data-line=line.label()/> }
        })
        .collect_view();
    let bands = a
        .bands
        .iter()
        .take(MAX_BANDS)
        .enumerate()
        .map(|(i, b)| {
            let x0 = x_of(b.first, last);
            let x1 = x_of(b.last, last).max(x0.saturating_add(1));
            let name = match b.step {
                Some(s) => format!("{} {s}", b.phase),
                None => b.phase.clone(),
            };
            let wide = x1 - x0 >= 8 * u64::try_from(name.chars().count()).unwrap_or(u64::MAX);
            view! {
                <rect x=x0.to_string() y=TOP.to_string() width=(x1 - x0).to_string()
                    height=H.to_string() class=if i % 2 == 0 { "band" } else { "band odd" }
                    data-testid="history-band" data-phase=b.phase.clone()
                    data-step=b.step.map(|s| s.to_string())/>
                {wide.then(|| view! { <text x=((x0 + x1) / 2).to_string() y=(TOP - 6).to_string()
                    class="lbl">{name}</text> })}
            }
        })
        .collect_view();
    let hidden = a.bands.len().saturating_sub(MAX_BANDS);
    let legend = HistoryLine::ALL
        .iter()
        .map(|&line| {
            view! { <span><i class=format!("sw {}", class_of(line))></i>{line.label()}</span> }
        })
        .collect_view();
    view! {
        <figure class="timeline history-timeline" data-testid="history-timeline">
            <svg viewBox=format!("0 0 {W} {}", TOP + H + 24) role="img"
                aria-label="Allocated by the estimate's line over the allocator's events, reserved behind, phases as bands">
                {bands}
                <polygon points=reserved class="area h-reserved" data-testid="history-reserved"/>
                {areas}
                <text x="4" y=(TOP + H + 18).to_string() class="axis">
                    {format!("y: bytes, 0 to {}; x: the allocator's events in order, 0 to {}",
                        Bytes(max).describe(), group_digits(last))}
                </text>
            </svg>
            <figcaption class="legend">
                {legend}
                <span><i class="sw h-reserved"></i>"reserved (segments)"</span>
                {(hidden > 0).then(|| view! { <span class="muted" data-testid="history-more">
                    {format!("{hidden} more phase band(s) not drawn")}</span> })}
            </figcaption>
        </figure>
    }
}

/// The highest peak's lines beside the estimate's, and the largest allocations.
fn breakdown(peak: &PeakAttribution, comparison: Option<&Comparison>) -> impl IntoView + use<> {
    let estimate = |line: HistoryLine| -> Option<u64> {
        let item = item_of(line)?;
        comparison?
            .lines
            .iter()
            .find(|l| l.item == item)?
            .computed_bytes
    };
    let cell = |v: Option<u64>| {
        let (text, title) = match v {
            Some(b) => (group_digits(b), Bytes(b).describe()),
            None => ("—".to_owned(), "no estimate line for it".to_owned()),
        };
        view! { <td class="num" title=title>{text}</td> }
    };
    let rows = HistoryLine::ALL
        .iter()
        .map(|&line| {
            let bytes = peak.bytes(line);
            let est = estimate(line);
            let over = est.is_some_and(|e| bytes > e);
            view! {
                <tr data-testid="history-line" data-line=line.label() data-bytes=bytes.to_string()
                    data-estimate=est.map(|e| e.to_string()) class:over=over>
                    <th scope="row"><i class=format!("sw {}", class_of(line))></i> " " {line.label()}</th>
                    {cell(Some(bytes))}
                    {cell(est)}
                </tr>
            }
        })
        .collect_view();
    let mut largest: Vec<_> = peak.largest.iter().collect();
    largest.sort_by_key(|b| std::cmp::Reverse(b.bytes));
    let items = largest
        .iter()
        .take(MAX_LARGEST)
        .map(|b| {
            view! {
                <li data-testid="history-largest" data-line=b.line.label()>
                    <span class="num" title=Bytes(b.bytes).describe()>{group_digits(b.bytes)} " B"</span>
                    " " <strong>{b.line.label()}</strong> " " <code>{b.site.clone()}</code>
                    {(!b.scope.is_empty()).then(|| view! { " " <span class="muted">{format!("[{}]", b.scope)}</span> })}
                </li>
            }
        })
        .collect_view();
    let at = match peak.step {
        Some(s) => format!("{} of step {s}", peak.phase),
        None => peak.phase.clone(),
    };
    view! {
        <div class="scroll">
            <table class="comparison history-breakdown" data-testid="history-breakdown"
                data-phase=peak.phase.clone() data-step=peak.step.map(|s| s.to_string())>
                <caption>{format!("The highest peak, at {at}: {} allocated, {} reserved — each line beside the estimate's, in bytes",
                    Bytes(peak.allocated_bytes).describe(), Bytes(peak.reserved_bytes).describe())}</caption>
                <thead><tr>
                    <th scope="col">"line"</th>
                    <th scope="col" class="num">"at the peak (history)"</th>
                    <th scope="col" class="num">"estimate (computed)"</th>
                </tr></thead>
                <tbody>
                    {rows}
                    <tr data-testid="history-line" data-line="slack" data-bytes=peak.slack_bytes.to_string()>
                        <th scope="row"><i class="sw h-reserved"></i> " allocator slack (reserved − allocated)"</th>
                        {cell(Some(peak.slack_bytes))}
                        {cell(None)}
                    </tr>
                </tbody>
            </table>
        </div>
        <p class="small">"The largest allocations live at that peak, with where they were made:"</p>
        <ul class="small largest" data-testid="history-largest-list">{items}</ul>
    }
}

/// One process's history: its detail, then the timeline and the breakdown.
pub fn history_view(h: &ShownHistory, comparison: Option<&Comparison>) -> impl IntoView + use<> {
    let recorded = h.status == HistoryStatus::Recorded;
    let drawn = h.attribution.as_ref().map(|a| {
        let top = a.peaks.iter().fold(None::<&PeakAttribution>, |best, p| match best {
            Some(b) if b.allocated_bytes >= p.allocated_bytes => Some(b),
            _ => Some(p),
        });
        view! {
            {timeline(a)}
            {top.map(|p| breakdown(p, comparison))}
            {a.notes.iter().take(8).map(|n| view! { <p class="small muted">{n.clone()}</p> }).collect_view()}
        }
    });
    view! {
        <section class="history" data-testid="history"
            data-status=if recorded { "recorded" } else { "not_possible" }>
            <h5>"Which tensors: the allocator's history"</h5>
            <p class="small" data-testid="history-detail">{h.detail.clone()}</p>
            {h.pickle.clone().map(|p| view! { <p class="small">"Raw snapshot (pytorch.org/memory_viz reads it): " <code>{p}</code></p> })}
            {drawn}
        </section>
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
        assert_eq!(thin(&[1, 2, 3, 4, 5], 3), [1, 3, 5]);
        assert_eq!(
            item_of(HistoryLine::OptimizerState),
            Some("optimizer_states")
        );
        assert_eq!(item_of(HistoryLine::Logits), None);
    }
}
