//! The agent's measurement documents: the results file (`gpumem.results/v1`), the
//! environment report (`gpumem.environment/v1`) and the live event lines that
//! `gpumem-agent measure --events jsonl` prints (`gpumem.events/v1`).
//!
//! These types are the contract between the agent, `serve` (which forwards event lines
//! and replays saved files) and the page. Rules that hold for every type here:
//!
//! - Every byte count is a raw integer in a field whose name ends in `_bytes`; every
//!   duration is an integer in a field ending in `_ns`. No unit conversion happens
//!   before a value is stored (method §2).
//! - A value that was not measured is `null`, never `0` (method §7, §10). Environment facts
//!   that could not be read are a [`Fact`] with `value: null` and a `reason`.
//! - Pool figures (allocated/reserved) and device-level figures live in separate
//!   structs ([`PoolCounters`], [`DeviceLevel`]) because their scopes differ (method §5);
//!   they are never added together.
//! - Names are stable within a schema version; a breaking change bumps the version
//!   constant, and readers refuse a version they do not know
//!   ([`ResultsFile::check_schema`]).

use serde::{Deserialize, Serialize};

/// Schema identifier of the results file written by `gpumem-agent measure --output`.
pub const RESULTS_SCHEMA: &str = "gpumem.results/v1";
/// Schema identifier carried by the `started` event of `--events jsonl`.
pub const EVENTS_SCHEMA: &str = "gpumem.events/v1";
/// Schema identifier of `gpumem-agent environment --json`.
pub const ENVIRONMENT_SCHEMA: &str = "gpumem.environment/v1";

/// The measured phases, in the order of method §8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PhaseName {
    /// Allocate and fill every layer's weight and bias.
    ModelLoad,
    /// Allocate and fill the synthetic input `[batch × context, width]`.
    Inputs,
    /// The first forward pass after the device and the network are ready.
    ColdForward,
    /// `warmup_iterations` forward passes, measured together as one phase.
    Warmup,
    /// One kept forward pass after warm-up; there is one phase per repeat.
    WarmForward,
}

impl PhaseName {
    /// The phases in the order the protocol runs them.
    pub const ORDER: [PhaseName; 5] = [
        PhaseName::ModelLoad,
        PhaseName::Inputs,
        PhaseName::ColdForward,
        PhaseName::Warmup,
        PhaseName::WarmForward,
    ];

    /// The wire name (`"model_load"`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            PhaseName::ModelLoad => "model_load",
            PhaseName::Inputs => "inputs",
            PhaseName::ColdForward => "cold_forward",
            PhaseName::Warmup => "warmup",
            PhaseName::WarmForward => "warm_forward",
        }
    }
}

impl std::fmt::Display for PhaseName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Element type of the measured network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// IEEE 754 binary32, 4 bytes.
    Float32,
    /// IEEE 754 binary16, 2 bytes.
    Float16,
    /// bfloat16, 2 bytes.
    Bfloat16,
}

impl Dtype {
    /// Bytes per element.
    pub const fn size_bytes(self) -> u64 {
        match self {
            Dtype::Float32 => 4,
            Dtype::Float16 | Dtype::Bfloat16 => 2,
        }
    }

    /// The wire and CLI name (`"float32"`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            Dtype::Float32 => "float32",
            Dtype::Float16 => "float16",
            Dtype::Bfloat16 => "bfloat16",
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Outcome of a phase or of a whole run on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Everything asked for ran and was read.
    Ok,
    /// A phase failed (e.g. out of memory); what was read before the failure is kept.
    Failed,
}

/// A fact about the environment: its value, or `null` and why it is unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Fact<T> {
    /// The value as reported by the driver, NVML or the OS; `null` when unknown.
    pub value: Option<T>,
    /// Why `value` is `null` (absent when the value is known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl<T> Fact<T> {
    /// A known value.
    pub fn known(value: T) -> Self {
        Fact {
            value: Some(value),
            reason: None,
        }
    }

    /// An unknown value and the reason, in words.
    pub fn unknown(reason: impl Into<String>) -> Self {
        Fact {
            value: None,
            reason: Some(reason.into()),
        }
    }

    /// `Ok(v)` → known, `Err(e)` → unknown with `e` as the reason.
    pub fn from_result<E: std::fmt::Display>(result: Result<T, E>) -> Self {
        match result {
            Ok(v) => Fact::known(v),
            Err(e) => Fact::unknown(e.to_string()),
        }
    }
}

/// The allocator the pool figures come from, and its settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AllocatorInfo {
    /// Backend name: `"cuda_mempool"` (a CUDA stream-ordered memory pool).
    pub backend: String,
    /// Which pool: e.g. `"dedicated pool from cuMemPoolCreate (device-local)"`.
    pub pool: String,
    /// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`: memory the pool keeps when synchronising.
    /// `u64::MAX` means it keeps everything (the analogue of a caching allocator).
    pub release_threshold_bytes: u64,
    /// Where "allocated" comes from (e.g. `CU_MEMPOOL_ATTR_USED_MEM_CURRENT`).
    pub allocated_counter: String,
    /// Where "reserved" comes from (e.g. `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`).
    pub reserved_counter: String,
    /// How peaks are reset (e.g. setting `USED_MEM_HIGH` and `RESERVED_MEM_HIGH` to 0).
    pub peak_reset: String,
}

/// Everything the agent can know about one device and its software.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Environment {
    /// `"cuda:N"`.
    pub device: String,
    /// CUDA device ordinal N.
    pub index: u32,
    /// Marketing name as the driver reports it.
    pub gpu_name: Fact<String>,
    /// `GPU-xxxxxxxx-xxxx-…` as nvidia-smi prints it.
    pub uuid: Fact<String>,
    /// `"major.minor"`, e.g. `"9.0"`.
    pub compute_capability: Fact<String>,
    /// Total memory as the device reports it (cuDeviceTotalMem), not the marketing label.
    pub total_memory_bytes: Fact<u64>,
    /// Free memory at the time of the report (cuMemGetInfo, all processes).
    pub free_memory_bytes: Fact<u64>,
    /// Kernel-mode driver version, e.g. `"580.95.05"` (NVML).
    pub driver_version: Fact<String>,
    /// CUDA driver API version, e.g. `"13.0"` (cuDriverGetVersion).
    pub cuda_driver_api_version: Fact<String>,
    /// cuBLAS library version, e.g. `"13.1.0"`, when cuBLAS is loadable.
    pub cublas_version: Fact<String>,
    /// NVML library version (per-process memory comes from NVML).
    pub nvml_version: Fact<String>,
    /// Rust binding used for CUDA, e.g. `"cudarc 0.19"`.
    pub binding: String,
    /// The allocator whose counters are reported as allocated/reserved.
    pub allocator: AllocatorInfo,
    /// Version of `gpumem-agent`.
    pub agent_version: String,
    /// Operating system and architecture, e.g. `"linux x86_64"`.
    pub os: String,
    /// OS release (e.g. kernel release), when readable.
    pub os_release: Fact<String>,
}

/// `gpumem-agent environment --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EnvironmentReport {
    /// Always [`ENVIRONMENT_SCHEMA`].
    pub schema: String,
    /// Version of `gpumem-agent`.
    pub agent_version: String,
    /// Operating system and architecture.
    pub os: String,
    /// Whether libcuda could be loaded.
    pub cuda_driver_library: Fact<String>,
    /// Whether libcublas could be loaded (needed by `measure`).
    pub cublas_library: Fact<String>,
    /// Number of CUDA devices visible to this process.
    pub device_count: Fact<u32>,
    /// One entry per requested device.
    pub devices: Vec<Environment>,
    /// What is missing for `measure` to run here; empty when it can run.
    pub missing: Vec<String>,
}

/// The network's dimensions as requested (method §9: these describe tensors, not an LLM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Dimensions {
    /// Batch size.
    pub batch: u64,
    /// "Context": rows per batch item (not an LLM context with a KV cache).
    pub context: u64,
    /// Features per row; every layer is Linear(width, width).
    pub width: u64,
    /// Number of Linear + ReLU layers.
    pub layers: u64,
    /// Element type of weights, inputs and activations.
    pub dtype: Dtype,
}

/// How the phases were run: order, warm-up policy and conditions (method §8, §10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Protocol {
    /// Phase names in the order they ran (warm_forward once per repeat).
    pub phase_order: Vec<PhaseName>,
    /// Forward passes inside the `warmup` phase.
    pub warmup_iterations: u32,
    /// Number of kept `warm_forward` repeats.
    pub warm_repeats: u32,
    /// Whether the pool was trimmed (cuMemPoolTrimTo 0) before each warm repeat: the
    /// pool analogue of `empty_cache`; it changes the conditions (method §10).
    pub trim_between_repeats: bool,
    /// Seed of the synthetic input and weights.
    pub seed: u64,
    /// The synchronisation boundary used before and after each phase.
    pub synchronisation: String,
    /// Process policy: every phase and repeat ran in one process (method §8).
    pub process: String,
}

/// The four pool counters read at one phase (method §5, §7): start, both peaks, both
/// end levels. `null` means not read (e.g. the phase failed before the read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PoolCounters {
    /// Bytes in use by allocations at the start, after synchronising.
    pub allocated_start_bytes: Option<u64>,
    /// Bytes the pool held from the device at the start.
    pub reserved_start_bytes: Option<u64>,
    /// High watermark of allocated bytes during the phase (absolute, not a delta).
    pub allocated_peak_bytes: Option<u64>,
    /// High watermark of reserved bytes during the phase (absolute, not a delta).
    pub reserved_peak_bytes: Option<u64>,
    /// Allocated bytes at the end, after synchronising.
    pub allocated_end_bytes: Option<u64>,
    /// Reserved bytes at the end, after synchronising.
    pub reserved_end_bytes: Option<u64>,
}

/// Device-level memory around a phase: broader scope than the pool (all processes, the
/// CUDA context, library workspaces), so it is never added to the pool figures (method §5).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeviceLevel {
    /// Device memory as cuMemGetInfo reports it.
    pub total_bytes: Option<u64>,
    /// Free device memory at the start (cuMemGetInfo).
    pub free_start_bytes: Option<u64>,
    /// Free device memory at the end (cuMemGetInfo).
    pub free_end_bytes: Option<u64>,
    /// `total − free` at the start: every process and context on the device.
    pub used_start_bytes: Option<u64>,
    /// `total − free` at the end.
    pub used_end_bytes: Option<u64>,
    /// This process's device memory per NVML at the start.
    pub process_used_start_bytes: Option<u64>,
    /// This process's device memory per NVML at the end.
    pub process_used_end_bytes: Option<u64>,
    /// Why the NVML per-process figures are `null`, when they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_used_reason: Option<String>,
}

/// What one entry of the allocation trace did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TraceOp {
    /// A buffer was allocated from the pool.
    Alloc,
    /// A buffer was returned to the pool.
    Free,
    /// An allocation was refused (e.g. out of memory).
    AllocFailed,
}

/// One of the agent's own allocations or frees, in program order (method §10, trace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TraceEntry {
    /// Sequence number across the whole run on this device, from 0.
    pub seq: u64,
    /// What happened.
    pub op: TraceOp,
    /// Which tensor: `"layer0.weight"`, `"input"`, `"act0"`, …
    pub tensor: String,
    /// Requested size in bytes (the pool may round it up).
    pub bytes: u64,
}

/// One measured phase (method §7 steps 1–6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PhaseResult {
    /// Which phase.
    pub phase: PhaseName,
    /// 0-based repeat index for `warm_forward`; `null` for the other phases.
    pub repeat: Option<u32>,
    /// Forward passes run in this phase (0 for model_load and inputs).
    pub iterations: u32,
    /// The phase's exact input, in words (method §7 step 1).
    pub input: String,
    /// Whether the phase completed.
    pub status: Status,
    /// The error text when `status` is `failed`.
    pub error: Option<String>,
    /// Whether the pool was trimmed just before this phase (`--trim-between-repeats`).
    pub trimmed_before: bool,
    /// The four pool counters.
    pub pool: PoolCounters,
    /// Device-level figures, in their own columns.
    pub device_level: DeviceLevel,
    /// Wall time of the "run" step, from just before it starts to the end of the
    /// closing synchronisation.
    pub wall_time_ns: Option<u64>,
    /// Time spent in the protocol's own calls for this phase (opening sync, reads,
    /// peak reset, device-level reads), to check that measuring costs little.
    #[serde(default)]
    pub protocol_overhead_ns: Option<u64>,
    /// The agent's own allocations and frees during this phase.
    pub trace: Vec<TraceEntry>,
}

/// What gpumem-core predicts for one phase of the same network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ComputedPhase {
    /// Which phase (warm_forward stands for every repeat).
    pub phase: PhaseName,
    /// Predicted pool allocated bytes at the start.
    pub allocated_start_bytes: u64,
    /// Predicted pool allocated high watermark.
    pub allocated_peak_bytes: u64,
    /// Predicted pool allocated bytes at the end.
    pub allocated_end_bytes: u64,
}

/// The computed side, kept apart from the observed phases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Computed {
    /// Where the figures come from, e.g. `"gpumem-core network::predict"`.
    pub source: String,
    /// One entry per phase name in protocol order.
    pub phases: Vec<ComputedPhase>,
    /// Known reasons observed and computed may differ, in words.
    pub known_differences: Vec<String>,
}

/// The measurement of one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MeasurementResult {
    /// `"cuda:N"`.
    pub device: String,
    /// `ok` when every phase passed; `failed` when one failed (the run stops there).
    pub status: Status,
    /// The failed phase, when `status` is `failed`.
    pub failed_phase: Option<PhaseName>,
    /// The error text, when `status` is `failed`.
    pub error: Option<String>,
    /// The device and software this run used.
    pub environment: Environment,
    /// Every phase that was started, in order; phases never started are absent.
    pub phases: Vec<PhaseResult>,
    /// The prediction for the same network, if it could be computed.
    pub computed: Option<Computed>,
    /// Wall time of the whole run on this device.
    pub wall_time_ns: Option<u64>,
}

/// The results file: one request, one [`MeasurementResult`] per device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResultsFile {
    /// Always [`RESULTS_SCHEMA`] for this version.
    pub schema: String,
    /// `true` only for hand-made or predicted files that are **not** GPU measurements
    /// (test fixtures, demos). The agent never writes `true`.
    #[serde(default)]
    pub synthetic: bool,
    /// A free note; synthetic files say here why they are not measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Version of `gpumem-agent` that wrote the file.
    pub agent_version: String,
    /// Seconds since the Unix epoch when the run began (wall clock).
    pub created_unix_s: Option<u64>,
    /// `--device` as given (`"cuda:0"`, `"all"`).
    pub requested_device: String,
    /// The requested dimensions (recorded even when a phase fails).
    pub dimensions: Dimensions,
    /// Phase order and warm-up policy.
    pub protocol: Protocol,
    /// One run per measured device, in the order they were measured.
    pub runs: Vec<MeasurementResult>,
    /// Where it ran: host, scheduler ids, device UUIDs and PCI bus ids (absent in
    /// files written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::context::RunContext>,
}

/// Why a document could not be accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaError {
    /// The `schema` field names a version this build does not read.
    UnknownVersion {
        /// The version found.
        found: String,
        /// The version this build reads.
        expected: &'static str,
    },
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SchemaError::UnknownVersion { found, expected } => write!(
                f,
                "unknown schema {found:?}: this build reads {expected:?} only"
            ),
        }
    }
}

impl std::error::Error for SchemaError {}

impl ResultsFile {
    /// Refuses a file whose `schema` is not [`RESULTS_SCHEMA`].
    pub fn check_schema(&self) -> Result<(), SchemaError> {
        if self.schema == RESULTS_SCHEMA {
            Ok(())
        } else {
            Err(SchemaError::UnknownVersion {
                found: self.schema.clone(),
                expected: RESULTS_SCHEMA,
            })
        }
    }

    /// `0` when every run passed, `1` when a run failed but was recorded: the agent's
    /// exit status for this file.
    pub fn any_failed(&self) -> bool {
        self.runs.iter().any(|r| r.status == Status::Failed)
    }

    /// The event lines a live `--events jsonl` run would have printed for this file, in
    /// order (for `serve --replay`), ending with `saved` when `path` is given.
    pub fn events(&self, path: Option<&str>) -> Vec<Event> {
        let mut out = Vec::new();
        for run in &self.runs {
            out.push(Event::Started {
                schema: EVENTS_SCHEMA.to_owned(),
                device: run.device.clone(),
                dimensions: self.dimensions,
                protocol: self.protocol.clone(),
                environment: Box::new(run.environment.clone()),
            });
            for phase in &run.phases {
                out.push(Event::Phase {
                    device: run.device.clone(),
                    result: Box::new(phase.clone()),
                });
            }
            out.push(Event::Finished {
                device: run.device.clone(),
                status: run.status,
                failed_phase: run.failed_phase,
                error: run.error.clone(),
                computed: run.computed.clone(),
                wall_time_ns: run.wall_time_ns,
            });
        }
        if let Some(path) = path {
            out.push(Event::Saved {
                path: path.to_owned(),
                status: if self.any_failed() {
                    Status::Failed
                } else {
                    Status::Ok
                },
            });
        }
        out
    }
}

/// One line of `gpumem-agent measure --events jsonl` (stdout, one JSON object per line).
///
/// Per device the sequence is `started`, one `phase` per finished phase (sent as soon as
/// it is read), then `finished` (status `ok`, or `failed` with the failed phase). After
/// every device, `saved` names the results file. `failed` means the command itself
/// stopped without a result for that device (no driver, no device, cannot write): it is
/// the last line, and the exit code is 2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A device's run begins.
    Started {
        /// Always [`EVENTS_SCHEMA`].
        schema: String,
        /// `"cuda:N"`.
        device: String,
        /// Requested dimensions.
        dimensions: Dimensions,
        /// Phase order and warm-up policy.
        protocol: Protocol,
        /// The device and software.
        environment: Box<Environment>,
    },
    /// A phase finished (ok or failed) and its figures were read.
    Phase {
        /// `"cuda:N"`.
        device: String,
        /// The phase's figures, as they will appear in the results file.
        result: Box<PhaseResult>,
    },
    /// A device's run ended; `status` says whether every phase passed.
    Finished {
        /// `"cuda:N"`.
        device: String,
        /// Outcome of the run on this device.
        status: Status,
        /// The failed phase, when `status` is `failed`.
        failed_phase: Option<PhaseName>,
        /// The error text, when `status` is `failed`.
        error: Option<String>,
        /// The prediction for the same network.
        computed: Option<Computed>,
        /// Wall time of the run on this device.
        wall_time_ns: Option<u64>,
    },
    /// The results file was written (atomically) at `path`.
    Saved {
        /// Path of the results file.
        path: String,
        /// `failed` if any device's run failed.
        status: Status,
    },
    /// The command stopped: nothing (more) could be measured or recorded.
    Failed {
        /// The device concerned, when one was selected.
        device: Option<String>,
        /// What went wrong, in words.
        error: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Environment {
        Environment {
            device: "cuda:0".into(),
            index: 0,
            gpu_name: Fact::known("Test GPU".into()),
            uuid: Fact::unknown("not read"),
            compute_capability: Fact::known("9.0".into()),
            total_memory_bytes: Fact::known(1 << 30),
            free_memory_bytes: Fact::unknown("not read"),
            driver_version: Fact::unknown("NVML not loaded"),
            cuda_driver_api_version: Fact::known("13.0".into()),
            cublas_version: Fact::unknown("not read"),
            nvml_version: Fact::unknown("NVML not loaded"),
            binding: "cudarc 0.19".into(),
            allocator: AllocatorInfo {
                backend: "cuda_mempool".into(),
                pool: "dedicated".into(),
                release_threshold_bytes: u64::MAX,
                allocated_counter: "USED_MEM_CURRENT".into(),
                reserved_counter: "RESERVED_MEM_CURRENT".into(),
                peak_reset: "set HIGH to 0".into(),
            },
            agent_version: "0.0.0".into(),
            os: "linux x86_64".into(),
            os_release: Fact::unknown("not read"),
        }
    }

    fn file() -> ResultsFile {
        ResultsFile {
            schema: RESULTS_SCHEMA.into(),
            synthetic: true,
            note: Some("test".into()),
            agent_version: "0.0.0".into(),
            created_unix_s: None,
            requested_device: "cuda:0".into(),
            dimensions: Dimensions {
                batch: 1,
                context: 2,
                width: 3,
                layers: 1,
                dtype: Dtype::Bfloat16,
            },
            protocol: Protocol {
                phase_order: vec![PhaseName::ModelLoad],
                warmup_iterations: 0,
                warm_repeats: 0,
                trim_between_repeats: false,
                seed: 7,
                synchronisation: "ctx".into(),
                process: "one".into(),
            },
            runs: vec![MeasurementResult {
                device: "cuda:0".into(),
                status: Status::Failed,
                failed_phase: Some(PhaseName::ModelLoad),
                error: Some("out of memory".into()),
                environment: env(),
                phases: vec![PhaseResult {
                    phase: PhaseName::ModelLoad,
                    repeat: None,
                    iterations: 0,
                    input: "weights".into(),
                    status: Status::Failed,
                    error: Some("out of memory".into()),
                    trimmed_before: false,
                    pool: PoolCounters {
                        allocated_start_bytes: Some(0),
                        ..PoolCounters::default()
                    },
                    device_level: DeviceLevel::default(),
                    wall_time_ns: None,
                    protocol_overhead_ns: None,
                    trace: vec![TraceEntry {
                        seq: 0,
                        op: TraceOp::AllocFailed,
                        tensor: "layer0.weight".into(),
                        bytes: 18,
                    }],
                }],
                computed: None,
                wall_time_ns: None,
            }],
            context: None,
        }
    }

    #[test]
    fn missing_values_serialise_as_null_not_zero() {
        let json = serde_json::to_value(file()).unwrap();
        let pool = &json["runs"][0]["phases"][0]["pool"];
        assert_eq!(pool["allocated_start_bytes"], 0);
        assert!(pool["allocated_peak_bytes"].is_null());
        assert!(pool["reserved_end_bytes"].is_null());
        assert!(json["runs"][0]["environment"]["uuid"]["value"].is_null());
        assert_eq!(json["runs"][0]["environment"]["uuid"]["reason"], "not read");
        assert_eq!(json["dimensions"]["dtype"], "bfloat16");
        assert_eq!(
            json["runs"][0]["phases"][0]["trace"][0]["op"],
            "alloc_failed"
        );
    }

    #[test]
    fn round_trips_and_checks_its_version() {
        let f = file();
        let text = serde_json::to_string(&f).unwrap();
        let back: ResultsFile = serde_json::from_str(&text).unwrap();
        assert_eq!(back, f);
        assert!(back.check_schema().is_ok());
        let mut other = f;
        other.schema = "gpumem.results/v9".into();
        let err = other.check_schema().unwrap_err().to_string();
        assert!(err.contains("gpumem.results/v9"), "{err}");
    }

    #[test]
    fn events_are_tagged_and_replay_in_order() {
        let f = file();
        let events = f.events(Some("out.json"));
        let tags: Vec<String> = events
            .iter()
            .map(|e| {
                serde_json::to_value(e).unwrap()["event"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(tags, ["started", "phase", "finished", "saved"]);
        let line = serde_json::to_string(&events[0]).unwrap();
        assert!(line.contains(r#""schema":"gpumem.events/v1""#), "{line}");
        let back: Event = serde_json::from_str(&line).unwrap();
        assert_eq!(back, events[0]);
        let failed: Event =
            serde_json::from_str(r#"{"event":"failed","device":null,"error":"no driver"}"#)
                .unwrap();
        assert!(matches!(failed, Event::Failed { device: None, .. }));
    }

    /// The published JSON Schema is generated from these types; a stale file fails
    /// here. Regenerate with
    /// `GPUMEM_BLESS=1 cargo test -p gpumem-proto --features schema published_schema`.
    #[cfg(feature = "schema")]
    #[test]
    fn published_schema_matches_the_types() {
        crate::assert_published_schema(
            "results.v1.schema.json",
            schemars::schema_for!(ResultsFile),
            format!(
                "{RESULTS_SCHEMA}: the results file written by `gpumem-agent measure --output`. Byte counts are raw integers in fields ending in _bytes; durations in fields ending in _ns; null means not measured, never 0."
            ),
        );
    }

    /// The synthetic fixture that the page and replay tests use deserialises into these
    /// types and round-trips unchanged.
    #[test]
    fn synthetic_fixture_deserialises_and_round_trips() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/measurements/synthetic-seed-dims.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let file: ResultsFile = serde_json::from_str(&text).unwrap();
        file.check_schema().unwrap();
        assert!(file.synthetic);
        let back: ResultsFile =
            serde_json::from_str(&serde_json::to_string(&file).unwrap()).unwrap();
        assert_eq!(back, file);
        assert_eq!(
            serde_json::to_value(&file).unwrap(),
            serde_json::from_str::<serde_json::Value>(&text).unwrap(),
            "every field of the fixture is known to the types"
        );
    }
}
