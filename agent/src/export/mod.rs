//! Prometheus export: a results or workload document as Prometheus' text exposition
//! format, written for node_exporter's textfile collector (`--textfile-dir`) or pushed
//! to a Pushgateway (`--pushgateway`) while a run goes ([`sink`]), and `gpumem-agent
//! export FILE` for a saved document.
//!
//! Names follow Prometheus' naming rules ("Metric and label naming": base units, a
//! `_bytes` suffix, `_info` for metadata whose value is 1, `_ratio` for a ratio) and the
//! device labels reuse DCGM's names — `Hostname`, `gpu` (NVML's index), `UUID`,
//! `modelName`, `hpc_job`, `pod`, `namespace` (NVIDIA dcgm-exporter, `README.md`,
//! `internal/pkg/transformation/const.go`) — so `on(UUID)` joins gpumem's series with
//! `DCGM_FI_DEV_FB_USED`. Every label set is bounded: a step is `first` or `later`
//! (never its number), no pid is a label, and at most [`MAX_PHASE_NAMES`] phase names
//! per run (the rest are `other`). A synthetic document labels every series
//! `synthetic="true"`: those figures are a test stand-in's, not a GPU's.
//!
//! Every series is a gauge; two readings with the same labels (steps, repeats) keep the
//! largest, so a text never holds a series twice.

pub mod sink;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use gpumem_proto::context::RunContext;
use gpumem_proto::fleet::error_ppm;
use gpumem_proto::results::{Environment, PhaseResult, RESULTS_SCHEMA, ResultsFile};
use gpumem_proto::workload::{Basis, RankResult, WORKLOAD_SCHEMA, WorkloadFile, WorkloadPhase};

use crate::exit::Exit;

/// Most distinct phase names exported per run; manual markers beyond are `other`.
pub const MAX_PHASE_NAMES: usize = 64;
/// Longest label value kept (longer ones are cut at a character boundary).
const MAX_LABEL_VALUE: usize = 128;
/// Largest document `export` reads.
pub const MAX_DOCUMENT_BYTES: u64 = 64 << 20;

/// The metric families, in the order they are written, with their help text.
const FAMILIES: [(&str, &str); 9] = [
    ("gpumem_run_info", "A gpumem run: what ran where (value 1)."),
    (
        "gpumem_run_failed",
        "1 when a phase, a rank or the command failed, else 0.",
    ),
    (
        "gpumem_run_start_time_seconds",
        "When the run started, seconds since the Unix epoch.",
    ),
    (
        "gpumem_phase_allocated_peak_bytes",
        "Allocator allocated high watermark of the phase (largest over its steps or repeats).",
    ),
    (
        "gpumem_phase_reserved_peak_bytes",
        "Allocator reserved high watermark of the phase (largest over its steps or repeats).",
    ),
    (
        "gpumem_device_used_peak_bytes",
        "Device-level memory: the largest NVML process-tree sample (run) or used = total - free reading at a phase boundary (measure); never added to the allocator figures.",
    ),
    (
        "gpumem_estimate_bytes",
        "gpumem-core's figure for a line (run: weights, optimizer states, ...; measure: a phase's allocated peak).",
    ),
    (
        "gpumem_observed_bytes",
        "What was observed for an estimate line.",
    ),
    (
        "gpumem_estimate_error_ratio",
        "(observed - estimate) / estimate for a line.",
    ),
];

/// A label set in insertion order.
pub type Labels = Vec<(&'static str, String)>;

/// Collected series: family → rendered labels → value (the largest reading).
#[derive(Debug, Default)]
pub struct Metrics {
    series: BTreeMap<&'static str, BTreeMap<String, Value>>,
    phase_names: BTreeMap<String, ()>,
    label_values: BTreeMap<String, std::collections::BTreeSet<String>>,
}

/// A sample value.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
enum Value {
    Int(i128),
    Float(f64),
}

impl Value {
    fn larger(self, other: Value) -> Value {
        let as_f = |v: Value| match v {
            Value::Int(i) => i as f64,
            Value::Float(f) => f,
        };
        if as_f(other) > as_f(self) {
            other
        } else {
            self
        }
    }
}

/// Most distinct values a label takes in one text; past it a series is folded into
/// the value `other` (the largest reading kept), so no document makes more series
/// than these products: phases and estimate lines by name, ranks, devices.
const MAX_LABEL_VALUES: &[(&str, usize)] = &[
    ("phase", MAX_PHASE_NAMES),
    ("line", 64),
    ("rank", 64),
    ("gpu", 64),
    ("UUID", 64),
    ("modelName", 16),
];

/// Escapes a label value as the text format allows (a backslash, a double quote and a
/// line feed escaped; nothing else may be): every other control character, and those
/// a terminal would act on, become U+FFFD, so the text is valid on a file, on a
/// Pushgateway and through the terminal-safe stdout alike.
fn escape(v: &str) -> String {
    let mut cut = v;
    if cut.len() > MAX_LABEL_VALUE {
        let mut end = MAX_LABEL_VALUE;
        while !cut.is_char_boundary(end) {
            end -= 1;
        }
        cut = &cut[..end];
    }
    let mut out = String::with_capacity(cut.len());
    for c in cut.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c if c.is_control() || crate::out::acts_on_terminal(c) => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

fn render_labels(labels: &[(&'static str, String)]) -> String {
    let mut s = String::new();
    for (k, v) in labels.iter().filter(|(_, v)| !v.is_empty()) {
        if !s.is_empty() {
            s.push(',');
        }
        let _ = write!(s, "{k}=\"{}\"", escape(v));
    }
    s
}

impl Metrics {
    fn put(&mut self, family: &'static str, labels: &[(&'static str, String)], value: Value) {
        let bounded: Labels = labels
            .iter()
            .map(|(k, v)| (*k, self.bounded_value(k, v)))
            .collect();
        let key = render_labels(&bounded);
        let slot = self.series.entry(family).or_default();
        let v = match slot.get(&key) {
            Some(old) => old.larger(value),
            None => value,
        };
        slot.insert(key, v);
    }

    fn int(&mut self, family: &'static str, labels: &[(&'static str, String)], v: u64) {
        self.put(family, labels, Value::Int(i128::from(v)));
    }

    /// `v` as the value of label `k`: itself while `k` has taken fewer than its
    /// [`MAX_LABEL_VALUES`] values, else `other`.
    fn bounded_value(&mut self, k: &str, v: &str) -> String {
        let Some((_, max)) = MAX_LABEL_VALUES.iter().find(|(name, _)| *name == k) else {
            return v.to_owned();
        };
        let seen = self.label_values.entry(k.to_owned()).or_default();
        if v.is_empty() || seen.contains(v) {
            return v.to_owned();
        }
        if seen.len() < *max {
            seen.insert(v.to_owned());
            return v.to_owned();
        }
        "other".to_owned()
    }

    /// The phase name as a bounded label value.
    fn phase_label(&mut self, name: &str) -> String {
        if self.phase_names.contains_key(name) {
            return name.to_owned();
        }
        if self.phase_names.len() < MAX_PHASE_NAMES {
            self.phase_names.insert(name.to_owned(), ());
            return name.to_owned();
        }
        "other".to_owned()
    }

    /// The text exposition format (version 0.0.4), families in a fixed order.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (name, help) in FAMILIES {
            let Some(series) = self.series.get(name) else {
                continue;
            };
            let _ = writeln!(s, "# HELP {name} {help}");
            let _ = writeln!(s, "# TYPE {name} gauge");
            for (labels, v) in series {
                let value = match v {
                    Value::Int(i) => i.to_string(),
                    Value::Float(f) => format!("{f}"),
                };
                if labels.is_empty() {
                    let _ = writeln!(s, "{name} {value}");
                } else {
                    let _ = writeln!(s, "{name}{{{labels}}} {value}");
                }
            }
        }
        s
    }
}

/// The labels every series of a run carries.
pub fn run_labels(context: Option<&RunContext>, synthetic: bool) -> Labels {
    let mut l: Labels = Vec::new();
    if let Some(c) = context {
        l.push(("run_id", c.run_id.clone()));
        l.push(("Hostname", c.hostname.clone().unwrap_or_default()));
        l.push(("hpc_job", c.hpc_job().unwrap_or_default().to_owned()));
        if let Some(k) = &c.kubernetes {
            l.push(("pod", k.pod.clone().unwrap_or_default()));
            l.push(("namespace", k.namespace.clone().unwrap_or_default()));
        }
    }
    if synthetic {
        l.push(("synthetic", "true".to_owned()));
    }
    l
}

/// The rank of a process that did not report one: the scheduler's task rank.
fn scheduler_rank(context: Option<&RunContext>) -> Option<u32> {
    let c = context?;
    c.torchrun
        .and_then(|t| t.rank)
        .or_else(|| c.slurm.as_ref().and_then(|s| s.procid))
        .or_else(|| c.kubernetes.as_ref().and_then(|k| k.job_completion_index))
}

/// The device labels of a CUDA ordinal (`gpu`, `UUID`, `modelName` when certain).
fn ordinal_labels(context: Option<&RunContext>, ordinal: Option<u32>) -> Labels {
    let dev = ordinal.and_then(|o| context.and_then(|c| c.device_for_ordinal(o)));
    match dev {
        Some(d) => vec![
            ("gpu", d.index.to_string()),
            ("UUID", d.uuid.clone()),
            ("modelName", d.name.clone().unwrap_or_default()),
        ],
        None => Vec::new(),
    }
}

fn with(base: &[(&'static str, String)], more: Labels) -> Labels {
    let mut l = base.to_vec();
    l.extend(more);
    l
}

/// The labels of one rank of a workload.
pub fn rank_labels(
    context: Option<&RunContext>,
    base: &[(&'static str, String)],
    rank: Option<u32>,
    device: Option<u32>,
) -> Labels {
    let rank = rank.or_else(|| scheduler_rank(context));
    let mut l = with(
        base,
        vec![("rank", rank.map(|r| r.to_string()).unwrap_or_default())],
    );
    l.extend(ordinal_labels(context, device));
    l
}

/// One phase of a workload rank.
pub fn workload_phase(m: &mut Metrics, rank: &[(&'static str, String)], p: &WorkloadPhase) {
    let step = match p.step {
        None => String::new(),
        Some(_) if p.first_step => "first".to_owned(),
        Some(_) => "later".to_owned(),
    };
    let labels = with(
        rank,
        vec![("phase", m.phase_label(&p.name)), ("step", step)],
    );
    if let Some(v) = p.allocator.allocated_peak_bytes {
        m.int("gpumem_phase_allocated_peak_bytes", &labels, v);
    }
    if let Some(v) = p.allocator.reserved_peak_bytes {
        m.int("gpumem_phase_reserved_peak_bytes", &labels, v);
    }
}

fn basis_str(b: Basis) -> String {
    serde_json::to_value(b)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn estimate_line(
    m: &mut Metrics,
    labels: &[(&'static str, String)],
    line: &str,
    basis: &str,
    computed: Option<u64>,
    observed: Option<u64>,
) {
    let with_line = with(labels, vec![("line", line.to_owned())]);
    let with_basis = with(&with_line, vec![("basis", basis.to_owned())]);
    if let Some(c) = computed {
        m.int("gpumem_estimate_bytes", &with_basis, c);
    }
    if let Some(o) = observed {
        m.int("gpumem_observed_bytes", &with_line, o);
    }
    if let (Some(o), Some(c)) = (observed, computed)
        && let Some(ppm) = error_ppm(o, c)
    {
        m.put(
            "gpumem_estimate_error_ratio",
            &with_basis,
            Value::Float(ppm as f64 / 1e6),
        );
    }
}

/// The serving engine a `run` command starts, read from its argv (the program, or
/// the module after `-m`): `vllm`, `sglang`, `text-generation-inference`,
/// `llama.cpp`; any other program is observed through PyTorch's allocator, so
/// `pytorch`. A bounded label: never the command itself.
fn engine_of(command: &[String]) -> &'static str {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_owned();
    let mut words = command.iter().map(|w| base(w));
    let mut program = words.next().unwrap_or_default();
    // `python3 -m vllm.entrypoints.openai.api_server`, `torchrun … -m sglang.…`
    if program.starts_with("python") || program == "torchrun" || program == "uv" {
        let rest: Vec<String> = words.collect();
        if let Some(i) = rest.iter().position(|w| w == "-m") {
            program = rest.get(i + 1).cloned().unwrap_or_default();
        } else if let Some(script) = rest.iter().find(|w| !w.starts_with('-')) {
            program = script.clone();
        }
    }
    let root = program.split(['.', ' ']).next().unwrap_or_default();
    match root {
        "vllm" => "vllm",
        "sglang" => "sglang",
        "text-generation-launcher" | "text_generation_server" => "text-generation-inference",
        "llama-server" | "llama-cli" => "llama.cpp",
        _ => "pytorch",
    }
}

fn info(m: &mut Metrics, base: &[(&'static str, String)], extra: Labels) {
    m.int("gpumem_run_info", &with(base, extra), 1);
}

/// A workload document's metrics.
pub fn from_workload(file: &WorkloadFile) -> Metrics {
    let mut m = Metrics::default();
    let ctx = file.context.as_ref();
    let base = run_labels(ctx, file.synthetic);
    let first = file.ranks.first();
    info(
        &mut m,
        &base,
        vec![
            ("kind", "workload".to_owned()),
            (
                "model",
                first
                    .and_then(|r| r.facts.model.as_ref())
                    .map(|f| f.module.clone())
                    .unwrap_or_default(),
            ),
            ("engine", engine_of(&file.command).to_owned()),
            ("agent_version", file.agent_version.clone()),
            (
                "torch_version",
                first
                    .and_then(|r| r.environment.torch_version.clone())
                    .unwrap_or_default(),
            ),
        ],
    );
    let failed = file.outcome.status != gpumem_proto::results::Status::Ok;
    m.int("gpumem_run_failed", &base, u64::from(failed));
    if let Some(t) = file.created_unix_s {
        m.int("gpumem_run_start_time_seconds", &base, t);
    }
    for r in &file.ranks {
        workload_rank(&mut m, ctx, &base, r);
    }
    for d in &file.timeline.devices {
        let Some(peak) = d.peak_bytes else { continue };
        let mut l = base.clone();
        l.push(("gpu", d.index.to_string()));
        let known = d
            .uuid
            .as_deref()
            .and_then(|u| ctx.and_then(|c| c.device_by_uuid(u)));
        l.push(("UUID", d.uuid.clone().unwrap_or_default()));
        l.push((
            "modelName",
            known.and_then(|k| k.name.clone()).unwrap_or_default(),
        ));
        m.int("gpumem_device_used_peak_bytes", &l, peak);
    }
    m
}

fn cuda_ordinal(device: Option<&str>) -> Option<u32> {
    device?.strip_prefix("cuda:")?.parse().ok()
}

fn workload_rank(
    m: &mut Metrics,
    ctx: Option<&RunContext>,
    base: &[(&'static str, String)],
    r: &RankResult,
) {
    let device =
        cuda_ordinal(r.device.as_deref()).or_else(|| r.phases.iter().find_map(|p| p.device));
    let labels = rank_labels(ctx, base, r.rank, device);
    for p in &r.phases {
        workload_phase(m, &labels, p);
    }
    for line in &r.comparison.lines {
        estimate_line(
            m,
            &labels,
            &line.item,
            &basis_str(line.basis),
            line.computed_bytes,
            line.observed_bytes,
        );
    }
}

/// The device labels of a measured device.
fn measured_labels(
    ctx: Option<&RunContext>,
    base: &[(&'static str, String)],
    env: &Environment,
) -> Labels {
    let rank = scheduler_rank(ctx);
    let mut l = with(
        base,
        vec![("rank", rank.map(|r| r.to_string()).unwrap_or_default())],
    );
    if let Some(uuid) = env.uuid.value.as_deref() {
        let known = ctx.and_then(|c| c.device_by_uuid(uuid));
        l.push((
            "gpu",
            known.map(|k| k.index.to_string()).unwrap_or_default(),
        ));
        l.push(("UUID", uuid.to_owned()));
    }
    l.push(("modelName", env.gpu_name.value.clone().unwrap_or_default()));
    l
}

/// One phase of a measured device.
pub fn results_phase(m: &mut Metrics, device: &[(&'static str, String)], p: &PhaseResult) {
    let labels = with(device, vec![("phase", m.phase_label(p.phase.as_str()))]);
    if let Some(v) = p.pool.allocated_peak_bytes {
        m.int("gpumem_phase_allocated_peak_bytes", &labels, v);
    }
    if let Some(v) = p.pool.reserved_peak_bytes {
        m.int("gpumem_phase_reserved_peak_bytes", &labels, v);
    }
    for v in [
        p.device_level.used_start_bytes,
        p.device_level.used_end_bytes,
    ]
    .into_iter()
    .flatten()
    {
        let dev: Labels = device
            .iter()
            .filter(|(k, _)| *k != "rank")
            .cloned()
            .collect();
        m.int("gpumem_device_used_peak_bytes", &dev, v);
    }
}

/// A results document's metrics.
pub fn from_results(file: &ResultsFile) -> Metrics {
    let mut m = Metrics::default();
    let ctx = file.context.as_ref();
    let base = run_labels(ctx, file.synthetic);
    let d = file.dimensions;
    let first = file.runs.first();
    info(
        &mut m,
        &base,
        vec![
            ("kind", "results".to_owned()),
            ("model", "gpumem test network".to_owned()),
            // The agent's own allocations through the CUDA driver, no framework.
            ("engine", "gpumem".to_owned()),
            (
                "configuration",
                format!(
                    "batch={} context={} width={} layers={} dtype={}",
                    d.batch, d.context, d.width, d.layers, d.dtype
                ),
            ),
            ("agent_version", file.agent_version.clone()),
            (
                "driver",
                first
                    .and_then(|r| r.environment.driver_version.value.clone())
                    .unwrap_or_default(),
            ),
        ],
    );
    m.int("gpumem_run_failed", &base, u64::from(file.any_failed()));
    if let Some(t) = file.created_unix_s {
        m.int("gpumem_run_start_time_seconds", &base, t);
    }
    for run in &file.runs {
        let labels = measured_labels(ctx, &base, &run.environment);
        let mut observed: BTreeMap<&'static str, u64> = BTreeMap::new();
        for p in &run.phases {
            results_phase(&mut m, &labels, p);
            if let Some(v) = p.pool.allocated_peak_bytes {
                let e = observed.entry(p.phase.as_str()).or_insert(v);
                *e = (*e).max(v);
            }
        }
        if let Some(c) = &run.computed {
            for cp in &c.phases {
                let name = cp.phase.as_str();
                estimate_line(
                    &mut m,
                    &labels,
                    name,
                    "computed",
                    Some(cp.allocated_peak_bytes),
                    observed.get(name).copied(),
                );
            }
        }
    }
    m
}

/// A saved document of either kind, read from `text`.
pub fn from_text(text: &str) -> Result<Metrics> {
    let value: serde_json::Value = serde_json::from_str(text).context("not JSON")?;
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(RESULTS_SCHEMA) => {
            let f: ResultsFile = serde_json::from_value(value).context("a results file")?;
            Ok(from_results(&f))
        }
        Some(WORKLOAD_SCHEMA) => {
            let f: WorkloadFile = serde_json::from_value(value).context("a workload file")?;
            Ok(from_workload(&f))
        }
        other => bail!(
            "schema {other:?}: export reads {RESULTS_SCHEMA:?} (measure, bisect) and {WORKLOAD_SCHEMA:?} (run)"
        ),
    }
}

/// Arguments of `export`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A results (`measure`, `bisect`) or workload (`run`) document.
    pub file: PathBuf,
    /// Write the text here (atomically; must not exist) instead of stdout, e.g.
    /// `/var/lib/node_exporter/textfile/gpumem.prom`.
    #[arg(long)]
    pub output: Option<PathBuf>,
}

/// Reads a document, bounded (`crate::private::read_to_string_bounded`).
pub fn read_document(path: &std::path::Path) -> Result<String> {
    crate::private::read_to_string_bounded(path, MAX_DOCUMENT_BYTES)
        .context("not a gpumem document")
}

/// Runs `export`.
pub fn run(args: Args) -> Result<Exit> {
    if let Some(out) = &args.output {
        crate::private::check_new_path(out)?;
    }
    let text = read_document(&args.file)?;
    let metrics = from_text(&text).with_context(|| format!("{}", args.file.display()))?;
    let body = metrics.render();
    match &args.output {
        Some(out) => crate::private::write_new_atomically(out, body.as_bytes())?,
        None => crate::out::out!("{body}"),
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests;
