//! The user's own workload on the agent page (`gpumem-agent run --serve`, or a replayed
//! `gpumem.workload/v1` file): what the page keeps of the pushed messages
//! ([`WorkloadRecord`], [`apply`]) and how it shows them ([`WorkloadView`]) — phases per
//! step with the first step apart, the timeline (device-level line over time; allocator
//! peaks per phase on their own panel, never added together, method §5) and the
//! computed-vs-observed table with each named difference.
//!
//! Everything here comes from the network: what is kept and what is rendered is bounded
//! ("n more" says what was left out), arithmetic saturates, and no value — however
//! large, missing or inconsistent — makes it panic.

use gpumem_core::units::{Bytes, group_digits};
use gpumem_proto::sheet::{ObservationSource, ObservedWorkload};
use gpumem_proto::wire::AgentMessage;
use gpumem_proto::workload::{
    Basis, Comparison, DifferenceKind, Sample, WORKLOAD_SCHEMA, WorkloadPhase,
};
use leptos::prelude::*;
use serde::Deserialize;
use serde_json::Value;

use crate::history_view::history_view;
use crate::run_state::RunState;

/// Most workloads kept (one agent shows one; more only across re-pairings).
pub const MAX_WORKLOADS: usize = 16;
/// Most live phases kept per workload (the final document holds them all).
pub const MAX_KEPT_PHASES: usize = 20_000;
/// Most live samples kept per workload.
pub const MAX_KEPT_SAMPLES: usize = 200_000;
/// Most phase rows rendered per process and group.
pub const MAX_RENDERED_PHASES: usize = 60;
/// Most processes (ranks) rendered.
pub const MAX_RENDERED_RANKS: usize = 8;
/// Most points drawn per chart series (samples are thinned to this).
pub const MAX_CHART_POINTS: usize = 600;

/// The part of a `gpumem.workload/v1` document the page shows. Read with serde's
/// default of ignoring the other fields, so the probe's facts, the outcome and the
/// channel accounting (attached unchanged to the sheet as `raw`) add no deserializers to
/// the page's wasm.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ShownDocument {
    /// Must be [`WORKLOAD_SCHEMA`].
    pub schema: String,
    /// One entry per process that loaded the probe.
    pub ranks: Vec<ShownRank>,
    /// The device-level timeline.
    pub timeline: ShownTimeline,
}

/// One process of the document, as shown.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ShownRank {
    /// Its process id.
    pub pid: u32,
    /// `RANK`, when set.
    pub rank: Option<u32>,
    /// Its device, when read.
    pub device: Option<String>,
    /// Backend and reader.
    pub environment: ShownEnvironment,
    /// The phases, in the order they ended.
    pub phases: Vec<WorkloadPhase>,
    /// The computed-vs-observed table.
    pub comparison: Comparison,
}

/// The probe's environment, as shown.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ShownEnvironment {
    /// `torch.cuda`, or the test stand-in.
    pub reader: String,
    /// `cuda`, `rocm` or `none`.
    pub backend: String,
}

/// The timeline, as shown.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ShownTimeline {
    /// Why there are no samples, when there are none.
    pub reason: Option<String>,
    /// One series per device.
    pub devices: Vec<ShownDevice>,
}

/// One device's samples.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ShownDevice {
    /// The samples.
    pub samples: Vec<Sample>,
}

/// One pushed phase with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct LivePhase {
    /// The probe connection it came from.
    pub process: u64,
    /// Its `RANK`, when set.
    pub rank: Option<u32>,
    /// The phase.
    pub phase: WorkloadPhase,
}

/// One workload as the page holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadRecord {
    /// The agent's id for it.
    pub run_id: u64,
    /// Live or replayed.
    pub source: ObservationSource,
    /// Where it stands.
    pub state: RunState,
    /// The command's argv.
    pub command: Vec<String>,
    /// Figures from a test stand-in, not a GPU.
    pub synthetic: bool,
    /// Phases as pushed, oldest first (bounded).
    pub phases: Vec<LivePhase>,
    /// Phases pushed beyond the bound.
    pub phases_dropped: u64,
    /// Device-level samples as pushed: (NVML index, sample), bounded.
    pub samples: Vec<(u32, Sample)>,
    /// Samples pushed beyond the bound.
    pub samples_dropped: u64,
    /// `true` when the command succeeded and nothing failed.
    pub ok: bool,
    /// The final document, exactly as it arrived (the sheet attaches it).
    pub raw: Option<Value>,
    /// The same, typed; `None` until it arrives or when it cannot be read.
    pub file: Option<Box<ShownDocument>>,
    /// Why there is no document, in words.
    pub failure: Option<String>,
}

impl WorkloadRecord {
    /// The sheet's view of it (the allocator history's events left out:
    /// [`ObservedWorkload::attached`]).
    pub fn observed(&self) -> ObservedWorkload {
        ObservedWorkload {
            source: self.source,
            command: self.command.clone(),
            synthetic: self.synthetic,
            ok: self.ok,
            raw: self.raw.clone(),
            failure: self.failure.clone().or_else(|| {
                self.raw.is_none().then(|| {
                    "still running when the sheet was made: no workload document yet".to_owned()
                })
            }),
        }
        .attached()
    }
}

/// Takes one workload message into `records`. Messages for an unknown run are ignored.
pub fn apply(records: &mut Vec<WorkloadRecord>, source: ObservationSource, message: AgentMessage) {
    match message {
        AgentMessage::WorkloadStarted {
            run_id,
            command,
            synthetic,
            ..
        } => {
            if records.iter().any(|r| r.run_id == run_id) || records.len() >= MAX_WORKLOADS {
                return;
            }
            records.push(WorkloadRecord {
                run_id,
                source,
                state: RunState::Running,
                command,
                synthetic,
                phases: Vec::new(),
                phases_dropped: 0,
                samples: Vec::new(),
                samples_dropped: 0,
                ok: false,
                raw: None,
                file: None,
                failure: None,
            });
        }
        AgentMessage::WorkloadPhase {
            run_id,
            process,
            rank,
            phase,
        } => {
            if let Some(r) = records.iter_mut().find(|r| r.run_id == run_id) {
                if r.phases.len() < MAX_KEPT_PHASES {
                    r.phases.push(LivePhase {
                        process,
                        rank,
                        phase: *phase,
                    });
                } else {
                    r.phases_dropped = r.phases_dropped.saturating_add(1);
                }
            }
        }
        AgentMessage::WorkloadSamples {
            run_id,
            device,
            samples,
        } => {
            if let Some(r) = records.iter_mut().find(|r| r.run_id == run_id) {
                let room = MAX_KEPT_SAMPLES.saturating_sub(r.samples.len());
                let dropped = samples.len().saturating_sub(room);
                r.samples
                    .extend(samples.into_iter().take(room).map(|s| (device, s)));
                r.samples_dropped = r
                    .samples_dropped
                    .saturating_add(u64::try_from(dropped).unwrap_or(u64::MAX));
            }
        }
        AgentMessage::WorkloadFinished {
            run_id,
            ok,
            mut result,
        } => {
            if let Some(r) = records.iter_mut().find(|r| r.run_id == run_id) {
                // The agent sends no history events; a document that holds them is
                // kept without them all the same (the page draws the attribution).
                gpumem_proto::workload::strip_history_events(&mut result);
                r.state = RunState::Finished;
                r.ok = ok;
                match read_document(result.clone()) {
                    Ok(file) => r.file = Some(Box::new(file)),
                    Err(e) => r.failure = Some(e),
                }
                r.raw = Some(result);
            }
        }
        _ => {}
    }
}

/// Reads the shown part of a workload document; `Err` says in words why not.
/// It takes the value itself (callers clone it): read from an owned value, as the wire
/// messages are, its types share one deserializer each instead of a second one over
/// `&Value` (1.9 KB of the agent page's gzip).
fn read_document(raw: Value) -> Result<ShownDocument, String> {
    match gpumem_proto::json::from_value::<ShownDocument>(raw) {
        Ok(file) if file.schema == WORKLOAD_SCHEMA => Ok(file),
        Ok(file) => Err(format!(
            "the workload document has schema {:?}, not {WORKLOAD_SCHEMA}",
            file.schema.chars().take(64).collect::<String>()
        )),
        Err(e) => Err(format!("the workload document could not be read: {e}")),
    }
}

impl WorkloadRecord {
    /// A workload restored from an imported sheet.
    pub fn imported(w: ObservedWorkload) -> WorkloadRecord {
        let w = w.attached();
        let file = w.raw.clone().and_then(|raw| read_document(raw).ok());
        WorkloadRecord {
            run_id: 0,
            source: w.source,
            state: RunState::Imported,
            command: w.command,
            synthetic: w.synthetic,
            phases: Vec::new(),
            phases_dropped: 0,
            samples: Vec::new(),
            samples_dropped: 0,
            ok: w.ok,
            raw: w.raw,
            file: file.map(Box::new),
            failure: w.failure,
        }
    }
}

/// The agent went away: a workload still running is interrupted (everything is kept).
pub fn went_away(records: &mut [WorkloadRecord]) {
    for r in records {
        if r.state == RunState::Running {
            r.state = RunState::Interrupted;
            r.failure = Some(format!(
                "interrupted: the agent went away after {} phase(s); no workload document",
                r.phases.len()
            ));
        }
    }
}

/// One process's phases for display: from the document when it arrived (it carries the
/// device-level peaks), else as pushed.
struct ProcessView {
    label: String,
    phases: Vec<WorkloadPhase>,
    comparison: Option<Comparison>,
    /// The rank's `memory_history`, read from the document as it arrived.
    history: Option<Value>,
}

fn processes(record: &WorkloadRecord) -> Vec<ProcessView> {
    if let Some(file) = &record.file {
        let raw = record
            .raw
            .as_ref()
            .and_then(|r| r.get("ranks"))
            .and_then(Value::as_array);
        return file
            .ranks
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let history = raw
                    .and_then(|ranks| ranks.get(i))
                    .and_then(|r| r.get("memory_history"))
                    .filter(|h| h.is_object())
                    .cloned();
                process_of_rank(r, history)
            })
            .collect();
    }
    let mut out: Vec<(u64, ProcessView)> = Vec::new();
    for p in &record.phases {
        let at = match out.iter().position(|(id, _)| *id == p.process) {
            Some(at) => at,
            None => {
                out.push((
                    p.process,
                    ProcessView {
                        label: match p.rank {
                            Some(r) => format!("rank {r}"),
                            None => format!("process {}", p.process.saturating_add(1)),
                        },
                        phases: Vec::new(),
                        comparison: None,
                        history: None,
                    },
                ));
                out.len() - 1
            }
        };
        out[at].1.phases.push(p.phase.clone());
    }
    out.into_iter().map(|(_, v)| v).collect()
}

fn process_of_rank(r: &ShownRank, history: Option<Value>) -> ProcessView {
    let mut label = match r.rank {
        Some(rank) => format!("rank {rank}"),
        None => format!("pid {}", r.pid),
    };
    if let Some(d) = &r.device {
        label.push_str(&format!(" · {d}"));
    }
    label.push_str(&format!(
        " · backend {} · reader {}",
        r.environment.backend, r.environment.reader
    ));
    ProcessView {
        label,
        phases: r.phases.clone(),
        comparison: Some(r.comparison.clone()),
        history,
    }
}

fn bytes_cell(b: Option<u64>) -> impl IntoView {
    let (text, title) = match b {
        Some(b) => (group_digits(b), Bytes(b).describe()),
        // Not read is not zero (method §7).
        None => ("—".to_owned(), "not read (null, never 0)".to_owned()),
    };
    view! { <td class="num" title=title>{text}</td> }
}

fn signed(v: Option<i64>) -> String {
    match v {
        None => "—".into(),
        Some(v) if v < 0 => format!("−{}", group_digits(v.unsigned_abs())),
        Some(v) => format!("+{}", group_digits(v.unsigned_abs())),
    }
}

fn difference_name(kind: DifferenceKind) -> &'static str {
    match kind {
        DifferenceKind::AllocatorCaching => "allocator rounding and caching (reserved − allocated)",
        DifferenceKind::OutsideAllocator => "outside the allocator (device-level − reserved)",
        DifferenceKind::FirstStepState => "state created at the first step",
        DifferenceKind::ActivationsAboveAssumption => "activations above the assumption",
        DifferenceKind::LineAboveEstimate => "a line above its estimate (the allocator's history)",
    }
}

fn wall_ms(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000_000, (ns / 1_000) % 1_000)
}

/// Rows for one group of phases, at most [`MAX_RENDERED_PHASES`], then "n more".
fn phase_rows(group: &'static str, phases: &[&WorkloadPhase]) -> impl IntoView + use<> {
    let shown = phases.len().min(MAX_RENDERED_PHASES);
    let more = phases.len().saturating_sub(shown);
    let rows = phases[..shown]
        .iter()
        .map(|p| {
            let a = &p.allocator;
            let gap = a
                .reserved_end_bytes
                .zip(a.allocated_end_bytes)
                .and_then(|(r, al)| r.checked_sub(al));
            view! {
                <tr data-testid="workload-phase-row" data-group=group data-phase=p.name.clone()
                    class:failed=p.error.is_some()>
                    <th scope="row">{p.name.clone()}
                        {p.manual.then(|| view! { <span class="tag small">"marker"</span> })}</th>
                    <td class="num">{p.step.map_or("—".to_owned(), |s| s.to_string())}</td>
                    {bytes_cell(a.allocated_start_bytes)}
                    {bytes_cell(a.allocated_peak_bytes)}
                    {bytes_cell(a.allocated_end_bytes)}
                    {bytes_cell(a.reserved_start_bytes)}
                    {bytes_cell(a.reserved_peak_bytes)}
                    {bytes_cell(a.reserved_end_bytes)}
                    {bytes_cell(gap)}
                    {bytes_cell(p.process_tree_peak_bytes)}
                    <td class="num">{wall_ms(p.wall_time_ns)}</td>
                    <td>{p.error.clone().map(|e| view! { <span class="error small">{e}</span> })}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        {rows}
        {(more > 0).then(|| view! {
            <tr class="more"><td colspan="12" class="muted small" data-testid="workload-more">
                {format!("{more} more phase(s) not shown")}
            </td></tr>
        })}
    }
}

/// A group header row inside the phases table.
fn group_row(text: &'static str) -> impl IntoView {
    view! { <tr class="group"><th colspan="12" scope="rowgroup">{text}</th></tr> }
}

fn phases_table(phases: &[WorkloadPhase]) -> impl IntoView + use<> {
    // Before the first step (model_load, markers before it), the first step apart
    // (method §3, §8: the optimizer state appears there), then the later steps.
    let before: Vec<&WorkloadPhase> = phases
        .iter()
        .filter(|p| p.step.is_none() && !p.first_step)
        .collect();
    let first: Vec<&WorkloadPhase> = phases.iter().filter(|p| p.first_step).collect();
    let later: Vec<&WorkloadPhase> = phases
        .iter()
        .filter(|p| p.step.is_some() && !p.first_step)
        .collect();
    let head = [
        "step",
        "alloc start",
        "alloc peak",
        "alloc end",
        "resv start",
        "resv peak",
        "resv end",
        "resv − alloc at end",
        "device-level peak (NVML)",
        "wall ms",
        "error",
    ];
    view! {
        <div class="scroll">
            <table class="phases workload-phases" data-testid="workload-phases">
                <caption>
                    "Phases in bytes. Allocator counters (torch.cuda) and the device-level peak "
                    "of the command's process tree (NVML) are different scopes, never added together. "
                    "Reserved − allocated is read at one checkpoint. — means not read."
                </caption>
                <thead><tr>
                    <th scope="col">"phase"</th>
                    {head.into_iter().map(|h| view! { <th scope="col" class="num">{h}</th> }).collect_view()}
                </tr></thead>
                <tbody>
                    {(!before.is_empty()).then(|| view! {
                        {group_row("Before the first step")}
                        {phase_rows("before", &before)}
                    })}
                    {(!first.is_empty()).then(|| view! {
                        {group_row("First step (kept apart: optimizer state and first-pass work appear here)")}
                        {phase_rows("first", &first)}
                    })}
                    {(!later.is_empty()).then(|| view! {
                        {group_row("Later steps")}
                        {phase_rows("later", &later)}
                    })}
                </tbody>
            </table>
        </div>
    }
}

fn comparison_table(c: &Comparison) -> impl IntoView + use<> {
    let lines = c
        .lines
        .iter()
        .take(MAX_RENDERED_PHASES)
        .map(|l| {
            let basis = match l.basis {
                Basis::Computed => "computed",
                Basis::Assumed => "assumed",
                Basis::Traced => "traced",
            };
            view! {
                <tr data-testid="comparison-row" data-item=l.item.clone()>
                    <th scope="row">{l.item.clone()}</th>
                    {bytes_cell(l.computed_bytes)}
                    <td><span class=format!("tag {basis}")>{basis}</span></td>
                    {bytes_cell(l.observed_bytes)}
                    {bytes_cell(l.traced_bytes)}
                    {bytes_cell(l.attributed_bytes)}
                    <td class="small">{l.formula.clone()}</td>
                    <td class="small">{l.observed_how.clone()}
                        {l.why.clone().map(|w| view! { <span class="muted block">{w}</span> })}</td>
                </tr>
            }
        })
        .collect_view();
    let differences = c
        .differences
        .iter()
        .take(MAX_RENDERED_PHASES)
        .map(|d| {
            view! {
                <li data-testid="difference" data-kind=format!("{:?}", d.kind) data-item=d.item.clone()>
                    <strong>{difference_name(d.kind)}</strong> ": "
                    <span class="num" title=d.bytes.map(|b| Bytes(b.unsigned_abs()).describe())>
                        {signed(d.bytes)} " bytes"</span>
                    " — " {d.explanation.clone()}
                </li>
            }
        })
        .collect_view();
    view! {
        <div class="scroll">
            <table class="comparison" data-testid="workload-comparison">
                <caption>"Computed vs observed (" {c.source.clone()} "), in bytes"</caption>
                <thead><tr>
                    <th scope="col">"item"</th>
                    <th scope="col" class="num">"computed"</th>
                    <th scope="col">"basis"</th>
                    <th scope="col" class="num">"observed"</th>
                    <th scope="col" class="num">"traced"</th>
                    <th scope="col" class="num" title="The most of it live at any phase's peak in the allocator's history (run --memory-history)">"history"</th>
                    <th scope="col">"formula"</th>
                    <th scope="col">"how observed"</th>
                </tr></thead>
                <tbody>{lines}</tbody>
            </table>
        </div>
        <ul class="differences" data-testid="workload-differences">{differences}</ul>
        // The trace of the same workload (CPU, meta device), or why there is none.
        <p class="small" data-testid="workload-trace">{c.trace.as_ref().map(|t| t.detail.clone())}</p>
    }
}

const CHART_W: u64 = 1000;
const PANEL_H: u64 = 120;

/// `v` scaled into a panel of height [`PANEL_H`] whose top is `top`; saturating.
fn y_of(v: u64, max: u64, top: u64) -> u64 {
    let scaled = u128::from(v).saturating_mul(u128::from(PANEL_H)) / u128::from(max.max(1));
    top.saturating_add(PANEL_H)
        .saturating_sub(u64::try_from(scaled).unwrap_or(u64::MAX).min(PANEL_H))
}

/// Evenly thinned to at most `n` items (the first and last kept).
fn thin<T: Copy>(items: &[T], n: usize) -> Vec<T> {
    if items.len() <= n || n < 2 {
        return items.iter().take(n.max(1)).copied().collect();
    }
    let last = items.len() - 1;
    (0..n)
        .filter_map(|i| items.get(i.saturating_mul(last) / (n - 1)).copied())
        .collect()
}

/// Allocator peaks per phase (top, in phase order) and the device-level line over time
/// (bottom, its own scale).
fn timeline_chart(phases: &[WorkloadPhase], samples: &[Sample]) -> impl IntoView + use<> {
    let peaks: Vec<(Option<u64>, Option<u64>)> = thin(
        &phases
            .iter()
            .map(|p| {
                (
                    p.allocator.allocated_peak_bytes,
                    p.allocator.reserved_peak_bytes,
                )
            })
            .collect::<Vec<_>>(),
        MAX_CHART_POINTS,
    );
    let pool_max = peaks
        .iter()
        .flat_map(|(a, r)| [*a, *r])
        .flatten()
        .max()
        .unwrap_or(1);
    let n = u64::try_from(peaks.len()).unwrap_or(1).max(1);
    let step = (CHART_W / n).max(1);
    let bars = peaks
        .iter()
        .enumerate()
        .map(|(i, (a, r))| {
            let x = u64::try_from(i).unwrap_or(0).saturating_mul(step);
            let bar = |v: Option<u64>, dx: u64, class: &'static str| {
                v.map(|v| {
                    let y = y_of(v, pool_max, 20);
                    view! { <rect x=x.saturating_add(dx).to_string() y=y.to_string()
                    width=(step / 2).max(1).to_string()
                    height=(20 + PANEL_H).saturating_sub(y).to_string() class=class/> }
                })
            };
            view! { {bar(*r, 0, "s-reserved")} {bar(*a, step / 4, "s-allocated")} }
        })
        .collect_view();
    let points = thin(samples, MAX_CHART_POINTS);
    let t_max = points.iter().map(|s| s.t_ns).max().unwrap_or(1).max(1);
    let dev_max = points.iter().map(|s| s.used_bytes).max().unwrap_or(1);
    let dev_top = PANEL_H + 60;
    let line: String = points
        .iter()
        .map(|s| {
            let x = u64::try_from(
                u128::from(s.t_ns).saturating_mul(u128::from(CHART_W)) / u128::from(t_max),
            )
            .unwrap_or(CHART_W);
            format!("{x},{}", y_of(s.used_bytes, dev_max, dev_top))
        })
        .collect::<Vec<_>>()
        .join(" ");
    let no_samples = samples.is_empty();
    view! {
        <figure class="timeline" data-testid="workload-timeline">
            <svg viewBox=format!("0 0 {CHART_W} {}", 2 * PANEL_H + 80) role="img"
                aria-label="Allocator peaks per phase; device-level memory of the process tree over time">
                <text x="4" y="12" class="axis">
                    {format!("y: allocator peak per phase, bytes, 0 to {}", Bytes(pool_max).describe())}
                </text>
                {bars}
                <text x="4" y=(dev_top - 8).to_string() class="axis">
                    {if no_samples {
                        "device level (NVML): no samples".to_owned()
                    } else {
                        format!("y: device level (NVML, process tree), bytes, 0 to {}; x: time, 0 to {} ms", Bytes(dev_max).describe(), t_max / 1_000_000)
                    }}
                </text>
                {(!no_samples).then(|| view! { <polyline points=line class="s-process" data-testid="workload-device-line"/> })}
            </svg>
            <figcaption class="legend">
                <span><i class="sw s-allocated"></i>"allocated peak (torch.cuda)"</span>
                <span><i class="sw s-reserved"></i>"reserved peak (torch.cuda)"</span>
                <span><i class="sw s-process"></i>"device level, process tree (NVML), own scale"</span>
                <span class="muted">"x, top: the phases in order; bottom: time since the first sample."</span>
            </figcaption>
        </figure>
    }
}

/// One workload: its header, then per process the phases, the timeline and the
/// computed-vs-observed table.
#[component]
pub fn WorkloadView(
    /// The workload to show.
    record: WorkloadRecord,
) -> impl IntoView {
    let replay = record.source == ObservationSource::Replay;
    let (state_text, state_cls) = match record.state {
        RunState::Running => ("running — phases arrive as they end", "running"),
        RunState::Finished if record.ok => ("finished: the command succeeded", "ok"),
        RunState::Finished => ("finished: the command failed (recorded)", "failed"),
        RunState::Imported => ("imported from a sheet", "imported"),
        RunState::Failed | RunState::Interrupted => ("ended", "failed"),
    };
    let samples: Vec<Sample> = match &record.file {
        Some(f) => f
            .timeline
            .devices
            .iter()
            .flat_map(|d| d.samples.iter().copied())
            .collect(),
        None => record.samples.iter().map(|(_, s)| *s).collect(),
    };
    let timeline_reason = record.file.as_ref().and_then(|f| f.timeline.reason.clone());
    let all = processes(&record);
    let hidden = all.len().saturating_sub(MAX_RENDERED_RANKS);
    let views = all
        .into_iter()
        .take(MAX_RENDERED_RANKS)
        .map(|p| {
            view! {
                <section class="workload-process" data-testid="workload-process">
                    <h4>{p.label.clone()}</h4>
                    {phases_table(&p.phases)}
                    {timeline_chart(&p.phases, &samples)}
                    {p.comparison.as_ref().map(comparison_table)}
                    {p.history.as_ref().map(|h| history_view(h, p.comparison.as_ref()))}
                </section>
            }
        })
        .collect_view();
    view! {
        <article class="run workload" data-testid="workload" data-state=state_cls
            data-source=if replay { "replay" } else { "live" }>
            <h3>
                "Workload — " <code>{record.command.join(" ")}</code> " "
                {if replay {
                    view! { <span class="tag replay" data-testid="replay-label"
                        title="Pushed from a saved workload file: nothing was measured now">"replay"</span> }.into_any()
                } else {
                    view! { <span class="tag live">"live"</span> }.into_any()
                }}
                {record.synthetic.then(|| view! { <span class="tag failed" data-testid="synthetic-label"
                    title="The figures come from a test stand-in, not a GPU">"SYNTHETIC"</span> })}
                " " <span class=format!("tag state {state_cls}")>{state_text}</span>
            </h3>
            {record.failure.clone().map(|f| view! { <p class="banner warn">{f}</p> })}
            {timeline_reason.map(|r| view! { <p class="small muted">"Device-level timeline: none (" {r} ")"</p> })}
            {views}
            {(hidden > 0).then(|| view! { <p class="muted small">{format!("{hidden} more process(es) not shown")}</p> })}
            {(record.phases_dropped > 0 || record.samples_dropped > 0).then(|| view! {
                <p class="muted small">{format!("{} phase(s) and {} sample(s) pushed beyond the page's bounds were not kept",
                    record.phases_dropped, record.samples_dropped)}</p>
            })}
        </article>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Value {
        serde_json::from_str(include_str!(
            "../../tests/fixtures/workloads/synthetic-train_adamw.json"
        ))
        .expect("fixture")
    }

    #[test]
    fn pushed_messages_build_the_record_and_the_sheet_view() {
        let raw = fixture();
        let file: gpumem_proto::workload::WorkloadFile =
            serde_json::from_value(raw.clone()).expect("file");
        let mut records = Vec::new();
        let source = ObservationSource::Replay;
        apply(
            &mut records,
            source,
            AgentMessage::WorkloadStarted {
                run_id: 1,
                command: file.command.clone(),
                synthetic: true,
                steps_instrumented: 3,
            },
        );
        for p in &file.ranks[0].phases {
            apply(
                &mut records,
                source,
                AgentMessage::WorkloadPhase {
                    run_id: 1,
                    process: 0,
                    rank: None,
                    phase: Box::new(p.clone()),
                },
            );
        }
        // Hostile samples: huge values, an unknown run.
        apply(
            &mut records,
            source,
            AgentMessage::WorkloadSamples {
                run_id: 1,
                device: 0,
                samples: vec![Sample {
                    t_ns: u64::MAX,
                    used_bytes: u64::MAX,
                }],
            },
        );
        apply(
            &mut records,
            source,
            AgentMessage::WorkloadPhase {
                run_id: 99,
                process: 0,
                rank: None,
                phase: Box::new(file.ranks[0].phases[0].clone()),
            },
        );
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].phases.len(), file.ranks[0].phases.len());
        assert!(records[0].observed().failure.is_some(), "not ended yet");
        let live = processes(&records[0]);
        assert_eq!(live.len(), 1);
        apply(
            &mut records,
            source,
            AgentMessage::WorkloadFinished {
                run_id: 1,
                ok: true,
                result: raw.clone(),
            },
        );
        let r = &records[0];
        assert_eq!(r.state, RunState::Finished);
        assert_eq!(r.observed().raw.as_ref(), Some(&raw));
        assert!(r.observed().failure.is_none());
        let done = processes(r);
        assert_eq!(done[0].phases, file.ranks[0].phases);
        assert!(done[0].comparison.is_some());
        // Through a sheet and back: the same document, shown the same way.
        let back = WorkloadRecord::imported(r.observed());
        assert_eq!(back.state, RunState::Imported);
        assert_eq!(back.raw, r.raw);
        assert_eq!(processes(&back)[0].phases, file.ranks[0].phases);
        // Scaling never panics on extreme values.
        assert_eq!(y_of(u64::MAX, 1, 0), 0);
        assert_eq!(y_of(0, 0, u64::MAX), u64::MAX);
        assert_eq!(thin(&[1, 2, 3, 4, 5], 3), [1, 3, 5]);
        assert_eq!(signed(Some(i64::MIN)).chars().next(), Some('−'));
    }

    /// A document with an allocator history: the page keeps and draws its attribution,
    /// never its events, and the sheet attaches it the same way.
    #[test]
    fn the_history_is_kept_without_its_events() {
        let raw: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/workloads/synthetic-train_history.json"
        ))
        .expect("fixture");
        let events = raw["ranks"][0]["memory_history"]["history"]["events"]
            .as_array()
            .map_or(0, Vec::len);
        assert!(events > 0, "the fixture holds the events");
        let mut records = Vec::new();
        let source = ObservationSource::Replay;
        apply(
            &mut records,
            source,
            AgentMessage::WorkloadStarted {
                run_id: 1,
                command: vec!["x".into()],
                synthetic: true,
                steps_instrumented: 3,
            },
        );
        apply(
            &mut records,
            source,
            AgentMessage::WorkloadFinished {
                run_id: 1,
                ok: true,
                result: raw.clone(),
            },
        );
        let r = &records[0];
        let kept = &r.raw.as_ref().unwrap()["ranks"][0]["memory_history"];
        assert!(kept.get("history").is_none(), "the events are not kept");
        assert_eq!(
            kept["left_out"],
            gpumem_proto::workload::HISTORY_LEFT_OUT,
            "and it says so"
        );
        assert_eq!(
            kept["attribution"],
            raw["ranks"][0]["memory_history"]["attribution"]
        );
        let shown = processes(r).remove(0).history.expect("a history");
        assert_eq!(
            shown["attribution"]["bands"].as_array().map(Vec::len),
            Some(10)
        );
        // The sheet, and a sheet's workload read back, carry no events either.
        let attached = r.observed();
        assert!(
            attached.raw.as_ref().unwrap()["ranks"][0]["memory_history"]
                .get("history")
                .is_none()
        );
        let mut with_events = r.observed();
        with_events.raw = Some(raw);
        let back = WorkloadRecord::imported(with_events);
        assert!(
            back.raw.as_ref().unwrap()["ranks"][0]["memory_history"]
                .get("history")
                .is_none()
        );
    }

    #[test]
    fn a_workload_running_when_the_agent_goes_is_interrupted() {
        let mut records = Vec::new();
        apply(
            &mut records,
            ObservationSource::Live,
            AgentMessage::WorkloadStarted {
                run_id: 1,
                command: vec!["x".into()],
                synthetic: false,
                steps_instrumented: 1,
            },
        );
        went_away(&mut records);
        assert_eq!(records[0].state, RunState::Interrupted);
        assert!(records[0].observed().failure.is_some());
    }

    #[test]
    fn a_document_of_another_schema_or_shape_is_refused_in_words() {
        for (result, words) in [
            (
                serde_json::json!({"schema": "gpumem.results/v1", "ranks": [], "timeline": {"reason": null, "devices": []}}),
                "schema",
            ),
            (serde_json::json!([1, 2]), "could not be read"),
        ] {
            let mut records = Vec::new();
            let source = ObservationSource::Live;
            apply(
                &mut records,
                source,
                AgentMessage::WorkloadStarted {
                    run_id: 7,
                    command: Vec::new(),
                    synthetic: false,
                    steps_instrumented: 1,
                },
            );
            apply(
                &mut records,
                source,
                AgentMessage::WorkloadFinished {
                    run_id: 7,
                    ok: true,
                    result,
                },
            );
            assert!(records[0].file.is_none());
            let failure = records[0].failure.clone().unwrap_or_default();
            assert!(failure.contains(words), "{failure}");
        }
    }
}
