//! The sheet (method §12): one JSON document that keeps what was **computed**,
//! what was **observed** and what is still **assumed** apart, with the agent's raw
//! results attached unchanged. The page assembles it, offers it for download and reads
//! it back on import; `schemas/sheet.v1.schema.json` is generated from these types.
//!
//! Numbers are integer bytes wherever they are memory; a missing measurement
//! is `null`, never 0 (method §7, §10).
//!
//! **Invariant:** no I/O here; the page compiles this module to wasm32.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::results::{DeviceLevel, PhaseName, PhaseResult, PoolCounters, Status};
use crate::wire::MeasureRequest;

/// The value of the `schema` field of every version-1 sheet.
pub const SHEET_SCHEMA: &str = "gpumem.sheet/v1";

/// The prefix every gpumem sheet's `schema` starts with, whatever its version.
const SHEET_SCHEMA_FAMILY: &str = "gpumem.sheet/";

/// A complete sheet, version 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(title = "gpumem sheet, version 1"))]
pub struct Sheet {
    /// Always [`SHEET_SCHEMA`] (`"gpumem.sheet/v1"`).
    #[cfg_attr(feature = "schema", schemars(extend("const" = "gpumem.sheet/v1")))]
    pub schema: String,
    /// What was tried: model or code, revision, input set, seed.
    pub identity: Identity,
    /// The three workloads kept side by side (method §1).
    pub dimensions: Workloads,
    /// The GPU environment as the agent reported it, unchanged; `null` when
    /// no agent was paired.
    pub environment: Option<Value>,
    /// What the estimator computed.
    pub computed: Computed,
    /// What the GPU did.
    pub observed: Observed,
    /// What is still assumed, each in words and numbers.
    pub assumed: Vec<Assumption>,
    /// The largest load actually tested, and whether it passed (method §11: one small
    /// passing input does not validate the maximum load); `null` when none was tested.
    pub maximum_load_tested: Option<MaximumLoad>,
    /// The choice made and why; `null` while undecided.
    pub decision: Option<Decision>,
    /// Which tools produced this sheet, and whether observations are live or replayed.
    pub provenance: Provenance,
}

/// Identity of the trial (method §12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Identity {
    /// The model or code under study (e.g. a Hugging Face id or a preset name).
    pub model: String,
    /// Its revision (commit, tag, checkpoint), when known.
    pub revision: Option<String>,
    /// The input set the workloads were drawn from, when named.
    pub input_set: Option<String>,
    /// The random seed of the trial, when one was fixed.
    pub seed: Option<u64>,
}

/// The three workloads (method §1): typical, long but expected, near the limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Workloads {
    /// The typical workload.
    pub typical: Workload,
    /// A long but expected workload.
    pub long: Workload,
    /// A workload near the limit.
    pub near_limit: Workload,
}

/// Which of the three workloads something refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum WorkloadKey {
    /// [`Workloads::typical`].
    Typical,
    /// [`Workloads::long`].
    Long,
    /// [`Workloads::near_limit`].
    NearLimit,
}

/// One workload's dimensions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Workload {
    /// The user's name for it.
    pub label: String,
    /// Sequences processed together (batch / concurrency).
    pub batch: u64,
    /// Tokens kept per sequence (prompt + generated).
    pub context_tokens: u64,
    /// Inference or training.
    pub mode: WorkloadMode,
    /// Anything else that defines it, in words.
    pub note: Option<String>,
}

/// Whether a workload is inference or a training step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum WorkloadMode {
    /// Forward passes only (prefill + generation).
    Inference,
    /// Forward, backward and optimizer update.
    Training,
}

/// What the estimator computed, per workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Computed {
    /// Version of gpumem-core that computed the lines.
    pub estimator_version: String,
    /// One estimate per workload.
    pub estimates: Vec<ComputedEstimate>,
}

/// One estimate: its exact inputs and every line in bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ComputedEstimate {
    /// The workload this estimate is for.
    pub workload: WorkloadKey,
    /// The estimator's input, exactly as gpumem-core serialises it, so that the same
    /// estimate can be recomputed from the sheet.
    pub input: Value,
    /// Every line of the estimate (weights, KV cache, training state, reserve, …), as
    /// gpumem-core serialises it; each carries its size in bytes.
    pub lines: Vec<Value>,
    /// The sum of the lines, in bytes.
    pub total_bytes: u64,
}

/// What the GPU did: measurement runs, live or replayed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Observed {
    /// Every run received from the agent, in the order they were run.
    pub runs: Vec<ObservedRun>,
    /// The user's own workloads the page was shown (`gpumem-agent run --serve`, or a
    /// replayed `gpumem.workload/v1` file); absent in sheets made before they existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<ObservedWorkload>,
}

/// One workload run of the user's own command, as the page received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ObservedWorkload {
    /// Live (`run --serve`) or replayed from a saved workload file.
    pub source: ObservationSource,
    /// The command's argv.
    pub command: Vec<String>,
    /// True when the figures come from a test stand-in, not a GPU.
    pub synthetic: bool,
    /// `true` when the command succeeded and nothing failed; `false` otherwise or when
    /// it had not ended.
    pub ok: bool,
    /// The `gpumem.workload/v1` document, attached unchanged (method §12) but for the
    /// allocator history's events, which [`ObservedWorkload::attached`] leaves out (each
    /// rank's attribution stays); `null` when it had not arrived (then `failure` says
    /// why).
    pub raw: Option<Value>,
    /// Why there is no document, in words.
    pub failure: Option<String>,
}

impl ObservedWorkload {
    /// The workload as a sheet attaches it: the document without the allocator
    /// history's events (`ranks[].memory_history.history`, up to tens of megabytes per
    /// process, which the workload file and the snapshot keep), so that a sheet grows
    /// with the phases and the attribution, not with the events recorded.
    pub fn attached(mut self) -> ObservedWorkload {
        if let Some(raw) = &mut self.raw {
            crate::workload::strip_history_events(raw);
        }
        self
    }
}

/// One measurement series (one agent process, method §8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ObservedRun {
    /// Live from a GPU, or replayed from a saved file.
    pub source: ObservationSource,
    /// The workload this run was meant to check, when it was meant to check one.
    pub workload: Option<WorkloadKey>,
    /// The dimensions requested of the agent.
    pub request: MeasureRequest,
    /// The phases as the page showed them (four counters plus device level, in bytes).
    pub phases: Vec<ObservedPhase>,
    /// `true` when every phase succeeded.
    pub ok: bool,
    /// The agent's results document, attached unchanged (method §12); `null` when the run
    /// failed before writing one (then `failure` says why).
    pub raw: Option<Value>,
    /// Why the run produced no results document, in words.
    pub failure: Option<String>,
}

/// Where an observation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ObservationSource {
    /// Measured on a GPU while the page was paired.
    Live,
    /// Replayed from a saved results file (`serve --replay`).
    Replay,
}

/// One phase as the page showed it: the four pool counters and the device-level
/// figures (method §5–§7), in bytes (every field name ends in `_bytes`); `null` means not
/// read, never 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ObservedPhase {
    /// `"cuda:N"`.
    pub device: String,
    /// Which phase.
    pub phase: PhaseName,
    /// 0-based repeat index for `warm_forward`; `null` for the other phases.
    pub repeat: Option<u32>,
    /// Passed or failed.
    pub status: Status,
    /// The error text when the phase failed.
    pub error: Option<String>,
    /// Allocated and reserved: start, peaks, end.
    pub pool: PoolCounters,
    /// Device-level figures, kept in their own columns (broader scope, method §5).
    pub device_level: DeviceLevel,
}

impl ObservedPhase {
    /// The sheet's view of one phase of a results file.
    pub fn from_result(device: &str, result: &PhaseResult) -> ObservedPhase {
        ObservedPhase {
            device: device.to_owned(),
            phase: result.phase,
            repeat: result.repeat,
            status: result.status,
            error: result.error.clone(),
            pool: result.pool,
            device_level: result.device_level.clone(),
        }
    }
}

/// One assumption, in words and numbers (e.g. the 4 GiB reserve, activations).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Assumption {
    /// A stable key (e.g. `"reserve"`, `"activations"`).
    pub key: String,
    /// The assumption in a sentence, including what would settle it.
    pub statement: String,
    /// The numbers it rests on.
    pub values: Vec<AssumedValue>,
    /// The bytes it contributes to the estimate, when it contributes any.
    pub bytes: Option<u64>,
}

/// One number an assumption rests on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AssumedValue {
    /// What the number is.
    pub name: String,
    /// The number.
    pub value: f64,
    /// Its unit (e.g. `"GiB"`, `"tokens"`, `"bytes"`).
    pub unit: String,
}

/// The largest load tested (method §11–§12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MaximumLoad {
    /// The load in words.
    pub statement: String,
    /// The workload it corresponds to, when it corresponds to one.
    pub workload: Option<WorkloadKey>,
    /// Its dimensions by name (e.g. `{"batch": 4, "context": 4096}`).
    pub dimensions: BTreeMap<String, u64>,
    /// Whether it passed; `null` when it was not run to completion.
    pub passed: Option<bool>,
    /// Index into [`Observed::runs`] of the run that tested it, when one did.
    pub run: Option<usize>,
}

/// The configuration decision (method §12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Decision {
    /// The chosen card (catalogue label), when a card was chosen.
    pub card: Option<String>,
    /// Number of devices and how the work is split (e.g. `"2 × TP"`), per device.
    pub configuration: String,
    /// Why, in words.
    pub reason: String,
}

/// Which tools made the sheet, and from what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Provenance {
    /// Version of the page that assembled the sheet.
    pub page_version: String,
    /// Version of the paired agent; `null` when none was paired.
    pub agent_version: Option<String>,
    /// The wire protocol version in use ([`crate::wire::PROTOCOL_VERSION`]).
    pub protocol_version: u32,
    /// Whether the observations are live, replayed, both or absent.
    pub observations: ObservationsProvenance,
    /// When the sheet was assembled (RFC 3339), when the page knew the time.
    pub created_at: Option<String>,
}

/// Summary of [`ObservedRun::source`] over all runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ObservationsProvenance {
    /// No run was observed.
    None,
    /// Every run is live.
    Live,
    /// Every run is a replay.
    Replay,
    /// Some runs are live, some replayed.
    Mixed,
}

impl ObservationsProvenance {
    /// The summary that matches a list of runs.
    pub fn of(runs: &[ObservedRun]) -> ObservationsProvenance {
        let live = runs.iter().any(|r| r.source == ObservationSource::Live);
        let replay = runs.iter().any(|r| r.source == ObservationSource::Replay);
        match (live, replay) {
            (false, false) => ObservationsProvenance::None,
            (true, false) => ObservationsProvenance::Live,
            (false, true) => ObservationsProvenance::Replay,
            (true, true) => ObservationsProvenance::Mixed,
        }
    }
}

/// Why a JSON document is not a valid version-1 sheet; the message is meant to be shown
/// to the user as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SheetError {
    /// The explanation in words.
    pub message: String,
}

impl fmt::Display for SheetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SheetError {}

fn refuse(message: impl Into<String>) -> SheetError {
    SheetError {
        message: message.into(),
    }
}

impl Sheet {
    /// Reads and checks a sheet (the page's *Import sheet*). Foreign JSON, another
    /// sheet version, missing fields and inconsistent contents are refused with a message
    /// that says which.
    pub fn from_json(text: &str) -> Result<Sheet, SheetError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| refuse(format!("this file is not JSON: {e}")))?;
        Sheet::from_value(value)
    }

    /// As [`Sheet::from_json`], from an already-parsed value.
    pub fn from_value(value: Value) -> Result<Sheet, SheetError> {
        check_schema(&value)?;
        let sheet: Sheet = serde_json::from_value(value)
            .map_err(|e| refuse(format!("this gpumem sheet is incomplete or damaged: {e}")))?;
        sheet.validate()?;
        Ok(sheet)
    }

    /// Checks what the JSON Schema cannot: cross-references between sections.
    pub fn validate(&self) -> Result<(), SheetError> {
        if self.schema != SHEET_SCHEMA {
            return Err(refuse(format!("\"schema\" must be {SHEET_SCHEMA:?}")));
        }
        if let Some(load) = &self.maximum_load_tested
            && let Some(run) = load.run
            && run >= self.observed.runs.len()
        {
            return Err(refuse(format!(
                "maximum_load_tested.run is {run}, but only {} runs were observed",
                self.observed.runs.len()
            )));
        }
        check_runs(&self.observed.runs, self.provenance.observations)
    }

    /// The sheet as pretty-printed JSON (what *Download sheet* saves).
    pub fn to_json_pretty(&self) -> String {
        // Every map key is a string and every number finite, so this cannot fail;
        // a non-finite assumed value would be the only way, and JSON has no such number.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// The `schema` check of [`Sheet::from_value`]: refuses foreign JSON and other sheet
/// versions, in words.
fn check_schema(value: &Value) -> Result<(), SheetError> {
    let Some(object) = value.as_object() else {
        return Err(refuse(
            "this JSON is not a gpumem sheet: it is not an object",
        ));
    };
    match object.get("schema") {
        None => Err(refuse(
            "this JSON is not a gpumem sheet: it has no \"schema\" field \
             (expected \"gpumem.sheet/v1\")",
        )),
        Some(Value::String(s)) if s == SHEET_SCHEMA => Ok(()),
        Some(Value::String(s)) if s.starts_with(SHEET_SCHEMA_FAMILY) => Err(refuse(format!(
            "this sheet is version {:?}; this page reads only \"gpumem.sheet/v1\"",
            s.chars().take(64).collect::<String>()
        ))),
        Some(other) => {
            let shown: String = other.to_string().chars().take(64).collect();
            Err(refuse(format!(
                "this JSON is not a gpumem sheet: its \"schema\" is {shown}, \
                 expected \"gpumem.sheet/v1\""
            )))
        }
    }
}

/// The checks of [`Sheet::validate`] on the observed runs and their provenance summary.
fn check_runs(
    runs: &[ObservedRun],
    observations: ObservationsProvenance,
) -> Result<(), SheetError> {
    for (index, run) in runs.iter().enumerate() {
        if run.raw.is_none() && run.failure.is_none() {
            return Err(refuse(format!(
                "observed run {index} has neither its raw results nor a failure reason"
            )));
        }
        if run.ok && run.phases.iter().any(|p| p.status == Status::Failed) {
            return Err(refuse(format!(
                "observed run {index} is marked ok but one of its phases failed"
            )));
        }
    }
    let expected = ObservationsProvenance::of(runs);
    if observations != expected {
        return Err(refuse(format!(
            "provenance.observations says {observations:?}, but the observed runs are {expected:?}"
        )));
    }
    Ok(())
}

/// What a page restores from a sheet: [`Sheet`]'s identity, environment, estimator
/// inputs, observed runs, decision and agent version, read with the same field names,
/// the same `schema` check and the same checks on the runs as [`Sheet::from_json`].
/// The sections a page does not restore (dimensions, lines, assumptions, maximum load)
/// are not read, so their deserializers stay out of the page's wasm.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SheetImport {
    /// As [`Sheet::identity`].
    pub identity: Identity,
    /// As [`Sheet::environment`].
    pub environment: Option<Value>,
    /// [`Sheet::computed`]'s estimates, their workload and input only.
    pub computed: ImportComputed,
    /// As [`Sheet::observed`].
    pub observed: Observed,
    /// As [`Sheet::decision`].
    pub decision: Option<Decision>,
    /// [`Sheet::provenance`]'s agent version and observations.
    pub provenance: ImportProvenance,
}

/// [`Computed`] as [`SheetImport`] reads it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ImportComputed {
    /// [`Computed::estimates`], each its workload and input.
    pub estimates: Vec<ImportEstimate>,
}

/// [`ComputedEstimate`] as [`SheetImport`] reads it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ImportEstimate {
    /// As [`ComputedEstimate::workload`].
    pub workload: WorkloadKey,
    /// As [`ComputedEstimate::input`].
    pub input: Value,
}

/// [`Provenance`] as [`SheetImport`] reads it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ImportProvenance {
    /// As [`Provenance::agent_version`].
    pub agent_version: Option<String>,
    /// As [`Provenance::observations`].
    pub observations: ObservationsProvenance,
}

impl SheetImport {
    /// Reads a sheet's text for import: the same refusals as [`Sheet::from_json`] for
    /// foreign JSON, another version and inconsistent runs.
    pub fn from_json(text: &str) -> Result<SheetImport, SheetError> {
        // From bytes, as the page reads every other JSON text: one text reader in its wasm.
        let value: Value = serde_json::from_slice(text.as_bytes())
            .map_err(|e| refuse(format!("this file is not JSON: {e}")))?;
        check_schema(&value)?;
        let sheet: SheetImport = crate::json::from_value(value)
            .map_err(|e| refuse(format!("this gpumem sheet is incomplete or damaged: {e}")))?;
        check_runs(&sheet.observed.runs, sheet.provenance.observations)?;
        Ok(sheet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small but complete sheet used by these tests (and mirrored in the schema test).
    fn example() -> Sheet {
        let workload = |label: &str, batch, context_tokens| Workload {
            label: label.into(),
            batch,
            context_tokens,
            mode: WorkloadMode::Inference,
            note: None,
        };
        Sheet {
            schema: SHEET_SCHEMA.into(),
            identity: Identity {
                model: "example/7b".into(),
                revision: Some("main".into()),
                input_set: None,
                seed: Some(0),
            },
            dimensions: Workloads {
                typical: workload("typical", 1, 2048),
                long: workload("long", 1, 8192),
                near_limit: workload("near limit", 4, 8192),
            },
            environment: None,
            computed: Computed {
                estimator_version: "0.1.0".into(),
                estimates: vec![ComputedEstimate {
                    workload: WorkloadKey::Typical,
                    input: serde_json::json!({"parameters": 7_000_000_000u64, "bits": 16}),
                    lines: vec![serde_json::json!({"name": "weights", "bytes": 14_000_000_000u64})],
                    total_bytes: 14_000_000_000,
                }],
            },
            observed: Observed {
                workloads: Vec::new(),
                runs: vec![ObservedRun {
                    source: ObservationSource::Replay,
                    workload: None,
                    request: MeasureRequest::SEED_EXAMPLE,
                    phases: vec![ObservedPhase {
                        device: "cuda:0".into(),
                        phase: PhaseName::ModelLoad,
                        repeat: None,
                        status: Status::Ok,
                        error: None,
                        pool: PoolCounters {
                            allocated_start_bytes: Some(0),
                            reserved_start_bytes: Some(0),
                            allocated_peak_bytes: Some(16_777_216),
                            reserved_peak_bytes: Some(33_554_432),
                            allocated_end_bytes: Some(16_777_216),
                            reserved_end_bytes: Some(33_554_432),
                        },
                        device_level: DeviceLevel::default(),
                    }],
                    ok: true,
                    raw: Some(serde_json::json!({"phases": []})),
                    failure: None,
                }],
            },
            assumed: vec![Assumption {
                key: "reserve".into(),
                statement: "A 4 GiB reserve for the CUDA context and fragmentation: a \
                            preparation hypothesis, not proof (method §2)."
                    .into(),
                values: vec![AssumedValue {
                    name: "reserve".into(),
                    value: 4.0,
                    unit: "GiB".into(),
                }],
                bytes: Some(4 << 30),
            }],
            maximum_load_tested: Some(MaximumLoad {
                statement: "batch 2 × context 128 × width 1024 passed".into(),
                workload: None,
                dimensions: BTreeMap::from([("batch".into(), 2), ("context".into(), 128)]),
                passed: Some(true),
                run: Some(0),
            }),
            decision: Some(Decision {
                card: Some("NVIDIA L4 (24 GB)".into()),
                configuration: "1 device".into(),
                reason: "the near-limit workload fits with 3 GiB headroom".into(),
            }),
            provenance: Provenance {
                page_version: "0.1.0".into(),
                agent_version: Some("0.1.0".into()),
                protocol_version: crate::wire::PROTOCOL_VERSION,
                observations: ObservationsProvenance::Replay,
                created_at: None,
            },
        }
    }

    #[test]
    fn a_sheet_round_trips() {
        let sheet = example();
        let text = sheet.to_json_pretty();
        assert_eq!(Sheet::from_json(&text), Ok(sheet.clone()));
        // The page's import reads the same sections, unchanged.
        let import = SheetImport::from_json(&text).expect("imports");
        assert_eq!(import.identity, sheet.identity);
        assert_eq!(import.environment, sheet.environment);
        assert_eq!(import.observed, sheet.observed);
        assert_eq!(import.decision, sheet.decision);
        assert_eq!(
            import.provenance.agent_version,
            sheet.provenance.agent_version
        );
        assert_eq!(
            import.provenance.observations,
            sheet.provenance.observations
        );
        let inputs: Vec<_> = sheet
            .computed
            .estimates
            .iter()
            .map(|e| (e.workload, e.input.clone()))
            .collect();
        let read: Vec<_> = import
            .computed
            .estimates
            .into_iter()
            .map(|e| (e.workload, e.input))
            .collect();
        assert_eq!(read, inputs);
    }

    #[test]
    fn foreign_and_bad_json_is_refused_with_a_reason() {
        let good: Value = serde_json::to_value(example()).expect("serialisable");
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = good.clone();
            f(&mut v);
            v.to_string()
        };
        let cases: Vec<(String, &str)> = vec![
            ("{not json".into(), "not JSON"),
            ("[]".into(), "not an object"),
            (r#"{"name":"package.json"}"#.into(), "no \"schema\" field"),
            (with(&|v| v["schema"] = "gpumem.sheet/v2".into()), "version"),
            (
                with(&|v| v["schema"] = "https://json-schema.org/draft".into()),
                "not a gpumem sheet",
            ),
            (with(&|v| v["schema"] = 1.into()), "not a gpumem sheet"),
            (
                with(&|v| {
                    v.as_object_mut().map(|o| o.remove("computed"));
                }),
                "missing field `computed`",
            ),
            (
                with(&|v| v["maximum_load_tested"]["run"] = 9.into()),
                "only 1 runs",
            ),
            (
                with(&|v| v["provenance"]["observations"] = "live".into()),
                "provenance",
            ),
            (
                with(&|v| v["observed"]["runs"][0]["phases"][0]["status"] = "failed".into()),
                "marked ok",
            ),
            (
                with(&|v| {
                    v["observed"]["runs"][0]["phases"][0]["pool"]["allocated_peak_bytes"] =
                        (-1).into()
                }),
                "invalid value",
            ),
        ];
        for (text, expected) in cases {
            let err = Sheet::from_json(&text).expect_err(&text);
            assert!(
                err.message.contains(expected),
                "{expected:?} not in {:?}",
                err.message
            );
            // The page's import refuses the same way, except for the sections it
            // does not read (the maximum load's run index).
            if expected != "only 1 runs" {
                let err = SheetImport::from_json(&text).expect_err(&text);
                assert!(
                    err.message.contains(expected),
                    "import: {expected:?} not in {:?}",
                    err.message
                );
            }
        }
    }
}
