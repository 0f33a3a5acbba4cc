//! `gpumem-agent merge DIR…`: every results and workload document of a fleet — ranks,
//! nodes, array tasks, bisect rounds — gathered into one fleet sheet
//! (`gpumem_proto::fleet`, `gpumem.fleet/v1`): one row per configuration × card with
//! the observed peaks per phase and the computed figures beside them, the distribution
//! of the estimate's error and the worst observation named by run, host, rank and
//! device.
//!
//! Folders are walked (depth ≤ [`MAX_DEPTH`], at most [`MAX_FILES`] files); each
//! `*.json` is read bounded and kept when its `schema` is `gpumem.results/v1` or
//! `gpumem.workload/v1`. Other JSON (plans, bisect summaries, sheets) is passed over;
//! a gpumem document that cannot be read is listed under `refused` with the reason,
//! never dropped silently. Synthetic documents are merged but keep their label on the
//! sheet and on each row.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use gpumem_core::units::Bytes;
use gpumem_proto::context::RunContext;
use gpumem_proto::fleet::{
    DocumentKind, EntryRef, FLEET_SCHEMA, FleetLine, FleetPhase, FleetRow, FleetSheet, FleetSource,
    Refused, Worst, distribution, error_bytes, error_ppm,
};
use gpumem_proto::results::{MeasurementResult, PhaseName, RESULTS_SCHEMA, ResultsFile, Status};
use gpumem_proto::workload::{RankResult, WORKLOAD_SCHEMA, WorkloadFile};

use crate::exit::Exit;

/// Deepest folder level walked below each argument.
pub const MAX_DEPTH: usize = 8;
/// Most files looked at in all.
pub const MAX_FILES: usize = 100_000;
/// Longest configuration text kept (a long command line is cut).
const MAX_CONFIGURATION: usize = 240;

/// Arguments of `merge`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folders (walked) or files: results files of `measure`/`bisect`, workload files of
    /// `run`.
    #[arg(required = true, num_args = 1..)]
    pub inputs: Vec<PathBuf>,
    /// Write the fleet sheet (`gpumem.fleet/v1` JSON) here; must not exist.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Print the fleet sheet's JSON on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

/// Every `*.json` below `inputs`, sorted, bounded.
fn walk(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack: Vec<(PathBuf, usize)> = Vec::new();
    for input in inputs {
        let meta = std::fs::metadata(input)
            .with_context(|| format!("{}: cannot read", input.display()))?;
        if meta.is_dir() {
            stack.push((input.clone(), 0));
        } else {
            out.push(input.clone());
        }
    }
    while let Some((dir, depth)) = stack.pop() {
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?;
        for entry in entries {
            let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() && depth < MAX_DEPTH {
                stack.push((path, depth + 1));
            } else if kind.is_file() && path.extension().is_some_and(|e| e == "json") {
                out.push(path);
            }
            if out.len() > MAX_FILES {
                bail!(
                    "more than {MAX_FILES} JSON files under the inputs: merge a smaller set at a time"
                );
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A document read from disk.
enum Doc {
    Results(Box<ResultsFile>),
    Workload(Box<WorkloadFile>),
}

/// Reads one file: `Ok(None)` for JSON that is not a gpumem measurement document.
fn read(path: &Path) -> Result<Option<Doc>, String> {
    let text = crate::export::read_document(path).map_err(|e| format!("{e:#}"))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
    let schema = value.get("schema").and_then(|s| s.as_str());
    match schema {
        Some(RESULTS_SCHEMA) => serde_json::from_value::<ResultsFile>(value)
            .map(|f| Some(Doc::Results(Box::new(f))))
            .map_err(|e| format!("not a valid {RESULTS_SCHEMA} document: {e}")),
        Some(WORKLOAD_SCHEMA) => serde_json::from_value::<WorkloadFile>(value)
            .map(|f| Some(Doc::Workload(Box::new(f))))
            .map_err(|e| format!("not a valid {WORKLOAD_SCHEMA} document: {e}")),
        Some(s) if s.starts_with("gpumem.results/") || s.starts_with("gpumem.workload/") => Err(
            format!("schema {s:?}: this build reads {RESULTS_SCHEMA:?} and {WORKLOAD_SCHEMA:?}"),
        ),
        _ => Ok(None),
    }
}

/// The rank a document's scheduler gave, for entries that report none themselves.
fn scheduler_rank(c: Option<&RunContext>) -> Option<u32> {
    let c = c?;
    c.torchrun
        .and_then(|t| t.rank)
        .or_else(|| c.slurm.as_ref().and_then(|s| s.procid))
        .or_else(|| c.kubernetes.as_ref().and_then(|k| k.job_completion_index))
}

/// Longest text an [`EntryRef`] keeps of each of a document's fields (a host name is
/// at most 253 bytes, a pod name too; a UUID 40). A reference is copied into every
/// phase and row it is the worst of, so a field past this is cut (and marked) once
/// here: the sheet's memory and size follow the number of phases, not a field's length.
pub const MAX_REF_FIELD: usize = 256;

/// `s` cut to [`MAX_REF_FIELD`] bytes at a character boundary, marked with "…".
fn cut(s: &str) -> String {
    if s.len() <= MAX_REF_FIELD {
        return s.to_owned();
    }
    let mut end = MAX_REF_FIELD - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn entry_ref(
    path: &str,
    c: Option<&RunContext>,
    rank: Option<u32>,
    device: Option<String>,
    uuid: Option<String>,
) -> EntryRef {
    EntryRef {
        path: cut(path),
        run_id: c.map(|c| cut(&c.run_id)),
        hostname: c.and_then(|c| c.hostname.as_deref().map(cut)),
        slurm_job_id: c.and_then(|c| c.hpc_job().map(cut)),
        pod: c.and_then(|c| {
            c.kubernetes
                .as_ref()
                .and_then(|k| k.pod.as_deref().map(cut))
        }),
        rank: rank.or_else(|| scheduler_rank(c)),
        device: device.as_deref().map(cut),
        uuid: uuid.as_deref().map(cut),
    }
}

/// A row while it is built.
struct RowAcc {
    row: FleetRow,
    /// Phase key (order of first appearance) → index in `row.phases`.
    phases: BTreeMap<(String, bool), usize>,
    lines: BTreeMap<String, usize>,
}

/// A phase reading of one entry, folded into its row.
fn fold_phase(
    acc: &mut RowAcc,
    key: (String, bool),
    allocated: Option<u64>,
    reserved: Option<u64>,
    computed: Option<u64>,
    at: &EntryRef,
) {
    let i = *acc.phases.entry(key.clone()).or_insert_with(|| {
        acc.row.phases.push(FleetPhase {
            phase: key.0.clone(),
            first_step: key.1,
            observations: 0,
            allocated_peak_bytes: None,
            allocated_peak_min_bytes: None,
            reserved_peak_bytes: None,
            computed_bytes: computed,
            error_bytes: None,
            peak_at: None,
        });
        acc.row.phases.len() - 1
    });
    let Some(p) = acc.row.phases.get_mut(i) else {
        return;
    };
    p.observations += 1;
    if let Some(a) = allocated {
        if p.allocated_peak_bytes.is_none_or(|m| a > m) {
            p.allocated_peak_bytes = Some(a);
            p.peak_at = Some(at.clone());
        }
        p.allocated_peak_min_bytes = Some(p.allocated_peak_min_bytes.map_or(a, |m| m.min(a)));
        if let Some(c) = computed.or(p.computed_bytes) {
            p.computed_bytes = Some(p.computed_bytes.map_or(c, |m| m.max(c)));
            if let Some(e) = error_bytes(a, c) {
                p.error_bytes = Some(p.error_bytes.map_or(e, |m| m.max(e)));
            }
        }
    }
    if let Some(r) = reserved {
        p.reserved_peak_bytes = Some(p.reserved_peak_bytes.map_or(r, |m| m.max(r)));
    }
}

/// Everything gathered so far.
#[derive(Default)]
struct Merge {
    rows: BTreeMap<(DocumentKind, String, String), RowAcc>,
    /// Numeric sort keys of results rows (so batch 2 comes before batch 10).
    order: BTreeMap<(DocumentKind, String, String), (Vec<u64>, String)>,
    errors: Vec<i64>,
    worst: Option<Worst>,
}

impl Merge {
    fn row(
        &mut self,
        kind: DocumentKind,
        configuration: String,
        card: String,
        sort: Vec<u64>,
    ) -> &mut RowAcc {
        let key = (kind, configuration.clone(), card.clone());
        self.order
            .entry(key.clone())
            .or_insert_with(|| (sort, configuration.clone()));
        self.rows.entry(key).or_insert_with(|| RowAcc {
            row: FleetRow {
                kind,
                configuration,
                card,
                synthetic: false,
                documents: 0,
                entries: 0,
                failed: 0,
                phases: Vec::new(),
                lines: Vec::new(),
            },
            phases: BTreeMap::new(),
            lines: BTreeMap::new(),
        })
    }

    /// Counts one error and keeps the worst.
    fn error(&mut self, row: &FleetRow, what: &str, observed: u64, computed: u64, at: &EntryRef) {
        let Some(ppm) = error_ppm(observed, computed) else {
            return;
        };
        self.errors.push(ppm);
        if self.worst.as_ref().is_none_or(|w| ppm > w.error_ppm) {
            self.worst = Some(Worst {
                configuration: row.configuration.clone(),
                card: row.card.clone(),
                what: what.to_owned(),
                observed_bytes: observed,
                computed_bytes: computed,
                error_bytes: error_bytes(observed, computed).unwrap_or(i64::MAX),
                error_ppm: ppm,
                at: at.clone(),
            });
        }
    }

    fn results(&mut self, path: &str, f: &ResultsFile) {
        let d = f.dimensions;
        let configuration = format!(
            "network batch={} context={} width={} layers={} dtype={} warmup={} repeats={}",
            d.batch,
            d.context,
            d.width,
            d.layers,
            d.dtype,
            f.protocol.warmup_iterations,
            f.protocol.warm_repeats
        );
        let sort = vec![d.batch, d.context, d.width, d.layers];
        let ctx = f.context.as_ref();
        let mut touched: Vec<(DocumentKind, String, String)> = Vec::new();
        for run in &f.runs {
            let card = card_of(f.synthetic, run.environment.gpu_name.value.as_deref());
            let at = entry_ref(
                path,
                ctx,
                None,
                Some(run.device.clone()),
                run.environment.uuid.value.clone(),
            );
            let acc = self.row(
                DocumentKind::Results,
                configuration.clone(),
                card.clone(),
                sort.clone(),
            );
            let key = (DocumentKind::Results, configuration.clone(), card.clone());
            if !touched.contains(&key) {
                acc.row.documents += 1;
                touched.push(key);
            }
            acc.row.synthetic |= f.synthetic;
            acc.row.entries += 1;
            acc.row.failed += u64::from(run.status == Status::Failed);
            let per_phase = measured_phases(run);
            for (phase, (alloc, resv)) in &per_phase {
                let computed = run.computed.as_ref().and_then(|c| {
                    c.phases
                        .iter()
                        .find(|p| p.phase == *phase)
                        .map(|p| p.allocated_peak_bytes)
                });
                fold_phase(
                    acc,
                    (phase.as_str().to_owned(), false),
                    *alloc,
                    *resv,
                    computed,
                    &at,
                );
            }
            let row = acc.row.clone();
            for (phase, (alloc, _)) in &per_phase {
                let computed = run.computed.as_ref().and_then(|c| {
                    c.phases
                        .iter()
                        .find(|p| p.phase == *phase)
                        .map(|p| p.allocated_peak_bytes)
                });
                if let (Some(a), Some(c)) = (alloc, computed) {
                    self.error(&row, phase.as_str(), *a, c, &at);
                }
            }
        }
    }

    fn workload(&mut self, path: &str, f: &WorkloadFile) {
        let mut configuration = f.command.join(" ");
        if configuration.len() > MAX_CONFIGURATION {
            let mut end = MAX_CONFIGURATION;
            while !configuration.is_char_boundary(end) {
                end -= 1;
            }
            configuration.truncate(end);
            configuration.push('…');
        }
        let ctx = f.context.as_ref();
        let mut touched: Vec<(DocumentKind, String, String)> = Vec::new();
        let failed_ranks: Vec<Option<u32>> = f.outcome.failures.iter().map(|x| x.rank).collect();
        for r in &f.ranks {
            let ordinal = rank_ordinal(r);
            let dev = ordinal.and_then(|o| ctx.and_then(|c| c.device_for_ordinal(o)));
            let card = card_of(f.synthetic, dev.and_then(|d| d.name.as_deref()));
            let at = entry_ref(
                path,
                ctx,
                r.rank,
                r.device.clone(),
                dev.map(|d| d.uuid.clone()),
            );
            let key = (DocumentKind::Workload, configuration.clone(), card.clone());
            let acc = self.row(
                DocumentKind::Workload,
                configuration.clone(),
                card.clone(),
                Vec::new(),
            );
            if !touched.contains(&key) {
                acc.row.documents += 1;
                touched.push(key);
            }
            acc.row.synthetic |= f.synthetic;
            acc.row.entries += 1;
            let failed = !r.ended_cleanly
                || failed_ranks.iter().any(|x| x.is_some() && *x == r.rank)
                || r.phases.iter().any(|p| p.error.is_some());
            acc.row.failed += u64::from(failed);
            for p in &r.phases {
                fold_phase(
                    acc,
                    (p.name.clone(), p.first_step),
                    p.allocator.allocated_peak_bytes,
                    p.allocator.reserved_peak_bytes,
                    None,
                    &at,
                );
            }
            for l in &r.comparison.lines {
                let i = *acc.lines.entry(l.item.clone()).or_insert_with(|| {
                    acc.row.lines.push(FleetLine {
                        item: l.item.clone(),
                        basis: l.basis,
                        computed_bytes: None,
                        observed_max_bytes: None,
                        observed_min_bytes: None,
                        error_bytes: None,
                        observed_max_at: None,
                    });
                    acc.row.lines.len() - 1
                });
                let Some(line) = acc.row.lines.get_mut(i) else {
                    continue;
                };
                if let Some(c) = l.computed_bytes {
                    line.computed_bytes = Some(line.computed_bytes.map_or(c, |m| m.max(c)));
                }
                if let Some(o) = l.observed_bytes {
                    if line.observed_max_bytes.is_none_or(|m| o > m) {
                        line.observed_max_bytes = Some(o);
                        line.observed_max_at = Some(at.clone());
                    }
                    line.observed_min_bytes = Some(line.observed_min_bytes.map_or(o, |m| m.min(o)));
                    if let Some(c) = l.computed_bytes
                        && let Some(e) = error_bytes(o, c)
                    {
                        line.error_bytes = Some(line.error_bytes.map_or(e, |m| m.max(e)));
                    }
                }
            }
            let row = acc.row.clone();
            for l in &r.comparison.lines {
                if let (Some(o), Some(c)) = (l.observed_bytes, l.computed_bytes) {
                    self.error(&row, &l.item, o, c, &at);
                }
            }
        }
    }

    fn into_rows(self) -> (Vec<FleetRow>, Vec<i64>, Option<Worst>) {
        let order = self.order;
        let mut rows: Vec<_> = self.rows.into_iter().collect();
        rows.sort_by(|(a, _), (b, _)| {
            let ka = order.get(a);
            let kb = order.get(b);
            (a.0, ka, &a.2).cmp(&(b.0, kb, &b.2))
        });
        (
            rows.into_iter().map(|(_, acc)| acc.row).collect(),
            self.errors,
            self.worst,
        )
    }
}

/// A card's name for a row: the driver's name, `SYNTHETIC`, or `unknown`.
fn card_of(synthetic: bool, name: Option<&str>) -> String {
    if synthetic {
        return "SYNTHETIC".to_owned();
    }
    name.unwrap_or("unknown").to_owned()
}

/// The CUDA ordinal a rank ran on.
fn rank_ordinal(r: &RankResult) -> Option<u32> {
    r.device
        .as_deref()
        .and_then(|d| d.strip_prefix("cuda:"))
        .and_then(|n| n.parse().ok())
        .or_else(|| r.phases.iter().find_map(|p| p.device))
}

/// A phase's largest allocated and reserved peaks.
type Peaks = (Option<u64>, Option<u64>);

/// Per phase name of one device, in protocol order: the largest allocated and reserved
/// peak over its repeats.
fn measured_phases(run: &MeasurementResult) -> Vec<(PhaseName, Peaks)> {
    let mut out: Vec<(PhaseName, Peaks)> = Vec::new();
    for name in PhaseName::ORDER {
        let mut seen = false;
        let (mut a, mut r) = (None::<u64>, None::<u64>);
        for p in run.phases.iter().filter(|p| p.phase == name) {
            seen = true;
            if let Some(v) = p.pool.allocated_peak_bytes {
                a = Some(a.map_or(v, |m| m.max(v)));
            }
            if let Some(v) = p.pool.reserved_peak_bytes {
                r = Some(r.map_or(v, |m| m.max(v)));
            }
        }
        if seen {
            out.push((name, (a, r)));
        }
    }
    out
}

/// The fleet sheet of `inputs`.
pub fn merge(inputs: &[PathBuf]) -> Result<FleetSheet> {
    let files = walk(inputs)?;
    let mut m = Merge::default();
    let mut sources = Vec::new();
    let mut refused = Vec::new();
    for path in files {
        let shown = path.display().to_string();
        match read(&path) {
            Ok(None) => {}
            Err(reason) => refused.push(Refused {
                path: shown,
                reason,
            }),
            Ok(Some(Doc::Results(f))) => {
                m.results(&shown, &f);
                sources.push(FleetSource {
                    path: shown,
                    kind: DocumentKind::Results,
                    synthetic: f.synthetic,
                    ok: !f.any_failed(),
                    context: f.context.clone(),
                });
            }
            Ok(Some(Doc::Workload(f))) => {
                m.workload(&shown, &f);
                sources.push(FleetSource {
                    path: shown,
                    kind: DocumentKind::Workload,
                    synthetic: f.synthetic,
                    ok: f.outcome.status == Status::Ok,
                    context: f.context.clone(),
                });
            }
        }
    }
    let synthetic = sources.iter().any(|s| s.synthetic);
    let (rows, errors, worst) = m.into_rows();
    Ok(FleetSheet {
        schema: FLEET_SCHEMA.to_owned(),
        synthetic,
        note: synthetic.then(|| {
            "SYNTHETIC — some merged documents come from the agent's test stand-in, not a GPU; their rows say so and their figures are not memory of anything".to_owned()
        }),
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        sources,
        refused,
        rows,
        errors: distribution(&errors),
        worst,
    })
}

fn pct(ppm: Option<i64>) -> String {
    match ppm {
        // ppm / 10 000 = percent, shown with two decimals from integers.
        Some(p) => {
            let sign = if p < 0 { "-" } else { "+" };
            let a = p.unsigned_abs();
            format!("{sign}{}.{:02}%", a / 10_000, (a % 10_000) / 100)
        }
        None => "—".to_owned(),
    }
}

fn bytes(v: Option<u64>) -> String {
    v.map_or("—".to_owned(), |b| Bytes(b).describe())
}

fn raw(v: Option<u64>) -> String {
    v.map_or("—".to_owned(), gpumem_core::units::group_digits)
}

/// The human summary.
pub fn summary(s: &FleetSheet) -> String {
    let mut out = String::new();
    let docs = s.sources.len();
    let synthetic = s.sources.iter().filter(|x| x.synthetic).count();
    let failed = s.sources.iter().filter(|x| !x.ok).count();
    let hosts: std::collections::BTreeSet<&str> = s
        .sources
        .iter()
        .filter_map(|x| x.context.as_ref().and_then(|c| c.hostname.as_deref()))
        .collect();
    let _ = writeln!(
        out,
        "fleet sheet: {docs} documents ({failed} with a failure, {synthetic} synthetic) from {} hosts · {} rows · {} refused",
        hosts.len(),
        s.rows.len(),
        s.refused.len()
    );
    if let Some(n) = &s.note {
        let _ = writeln!(out, "{n}");
    }
    for r in &s.rows {
        let _ = writeln!(
            out,
            "\n{} · {} · {} documents, {} entries, {} failed{}",
            r.configuration,
            r.card,
            r.documents,
            r.entries,
            r.failed,
            if r.synthetic && r.card != "SYNTHETIC" {
                " · SYNTHETIC"
            } else {
                ""
            }
        );
        for p in &r.phases {
            let _ = writeln!(
                out,
                "  {:<16}{:<7} allocated peak {} (smallest {} B) · reserved peak {} B · computed {} B · error {}",
                p.phase,
                if p.first_step { " first" } else { "" },
                bytes(p.allocated_peak_bytes),
                raw(p.allocated_peak_min_bytes),
                raw(p.reserved_peak_bytes),
                raw(p.computed_bytes),
                p.error_bytes.map_or("—".to_owned(), |e| format!("{e:+} B")),
            );
        }
        for l in &r.lines {
            let _ = writeln!(
                out,
                "  line {:<16} computed {} ({:?}) · observed {} to {}",
                l.item,
                bytes(l.computed_bytes),
                l.basis,
                bytes(l.observed_min_bytes),
                bytes(l.observed_max_bytes),
            );
        }
    }
    let e = &s.errors;
    let _ = writeln!(
        out,
        "\nerror (observed − computed) / computed over {} observations: min {} · median {} · p90 {} · max {}",
        e.count,
        pct(e.min_ppm),
        pct(e.p50_ppm),
        pct(e.p90_ppm),
        pct(e.max_ppm)
    );
    for b in e.buckets.iter().filter(|b| b.count > 0) {
        let _ = writeln!(out, "  {:<14} {}", b.label, b.count);
    }
    if let Some(w) = &s.worst {
        let _ = writeln!(
            out,
            "worst: {} {} on {} — observed {} against computed {} ({}), at run {} host {} rank {} {} {}",
            w.configuration,
            w.what,
            w.card,
            Bytes(w.observed_bytes).describe(),
            Bytes(w.computed_bytes).describe(),
            pct(Some(w.error_ppm)),
            w.at.run_id.as_deref().unwrap_or("?"),
            w.at.hostname.as_deref().unwrap_or("?"),
            w.at.rank.map_or("?".to_owned(), |r| r.to_string()),
            w.at.device.as_deref().unwrap_or(""),
            w.at.uuid.as_deref().unwrap_or(""),
        );
    }
    for r in &s.refused {
        let _ = writeln!(out, "refused {}: {}", r.path, r.reason);
    }
    out
}

/// Runs `merge`.
pub fn run(args: Args) -> Result<Exit> {
    if let Some(out) = &args.output {
        crate::private::check_new_path(out)?;
    }
    let sheet = merge(&args.inputs)?;
    let text = serde_json::to_string_pretty(&sheet).context("serialising the fleet sheet")?;
    if let Some(out) = &args.output {
        crate::private::write_new_atomically(out, text.as_bytes())?;
    }
    if args.json {
        crate::out::outln!("{text}");
    } else {
        crate::out::out!("{}", summary(&sheet));
        if let Some(out) = &args.output {
            crate::out::outln!("fleet sheet written to {}", out.display());
        }
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests;
