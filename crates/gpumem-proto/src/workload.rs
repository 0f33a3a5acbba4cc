//! The workload results document (`gpumem.workload/v1`) written by `gpumem-agent run`:
//! the user's own program measured phase by phase, per rank, beside the estimator's
//! prediction for the same workload.
//!
//! The rules of [`crate::results`] hold here too: raw integer bytes in `_bytes` fields,
//! durations in `_ns` fields, `null` for what was not measured (never `0`), allocator
//! figures ([`AllocatorCounters`]) and device-level figures (the NVML [`Timeline`]) in
//! separate places, never added together (method §5). Ranks and devices are kept apart,
//! never pooled (method §12). A document whose figures come from the test stand-in carries
//! `synthetic: true` and must never be read as a GPU measurement.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::results::{SchemaError, Status};

/// Schema identifier of the file written by `gpumem-agent run --output`.
pub const WORKLOAD_SCHEMA: &str = "gpumem.workload/v1";

/// The whole document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkloadFile {
    /// Always [`WORKLOAD_SCHEMA`].
    pub schema: String,
    /// True when the figures come from a stand-in, not a GPU (tests, fixtures).
    pub synthetic: bool,
    /// Free text, e.g. what the synthetic figures are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// `gpumem-agent` version.
    pub agent_version: String,
    /// When the run started (seconds since the Unix epoch).
    pub created_unix_s: Option<u64>,
    /// `--device` as given (`cuda:N` or `all`).
    pub requested_device: String,
    /// The command's argv, exactly as run (no environment variables).
    pub command: Vec<String>,
    /// Allocator settings in the child's environment (`PYTORCH_CUDA_ALLOC_CONF`, …); the
    /// only environment variables recorded.
    pub allocator_env: BTreeMap<String, String>,
    /// Training steps / generate calls instrumented before the probe removed its hooks.
    pub steps_instrumented: u32,
    /// The command's outcome.
    pub outcome: Outcome,
    /// One entry per process that loaded the probe (each rank of a torchrun job).
    pub ranks: Vec<RankResult>,
    /// Device-level memory of the command's whole process tree, sampled over time.
    pub timeline: Timeline,
    /// What the probe channel received and refused.
    pub channel: ChannelStats,
    /// Where it ran: host, scheduler ids, device UUIDs and PCI bus ids; a rank's
    /// `device` (`cuda:N`) is the device whose `cuda_ordinal` is N (absent in files
    /// written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::context::RunContext>,
}

impl WorkloadFile {
    /// Refuses a file whose `schema` is not [`WORKLOAD_SCHEMA`].
    pub fn check_schema(&self) -> Result<(), SchemaError> {
        if self.schema == WORKLOAD_SCHEMA {
            Ok(())
        } else {
            Err(SchemaError::UnknownVersion {
                found: self.schema.clone(),
                expected: WORKLOAD_SCHEMA,
            })
        }
    }
}

/// How the command ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Outcome {
    /// `ok` when the command exited 0 and nothing failed; `failed` otherwise.
    pub status: Status,
    /// The command's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Signals the agent forwarded to the command's process group (e.g. Ctrl-C).
    pub forwarded_signals: Vec<i32>,
    /// Wall time from start to exit.
    pub wall_time_ns: u64,
    /// What went wrong, in the order found (empty when all went well).
    pub failures: Vec<Failure>,
}

/// One recorded failure (method §10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Failure {
    /// What kind.
    pub kind: FailureKind,
    /// The rank it happened on, when known.
    pub rank: Option<u32>,
    /// The phase it happened in, when known.
    pub phase: Option<String>,
    /// The step it happened in, when known.
    pub step: Option<u32>,
    /// The bytes the failed allocation asked for, parsed from the error text.
    pub requested_bytes: Option<u64>,
    /// The error text or a description, bounded.
    pub message: String,
}

/// Kinds of [`Failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The program ran out of device memory.
    OutOfMemory,
    /// An uncaught exception other than out-of-memory.
    Exception,
    /// The command exited with a non-zero code.
    ExitCode,
    /// The command was ended by a signal (a crash or a kill).
    Signal,
    /// The probe never connected (not a PyTorch program, or torch never imported).
    ProbeNeverConnected,
    /// A probe connected but its process ended without saying goodbye (killed, crashed).
    ProbeLost,
}

/// One process that loaded the probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RankResult {
    /// Its process id.
    pub pid: u32,
    /// `RANK`, when set (torchrun).
    pub rank: Option<u32>,
    /// `LOCAL_RANK`, when set.
    pub local_rank: Option<u32>,
    /// `WORLD_SIZE`, when set.
    pub world_size: Option<u32>,
    /// When this process is a helper of another, not a rank: the pid of the process
    /// that started it (a DataLoader worker inherits its rank's `RANK` and imports
    /// torch, but runs no model step).
    #[serde(default)]
    pub worker_of: Option<u32>,
    /// Whether this process is the launcher that started the ranks (torchrun's agent,
    /// `accelerate launch`, DeepSpeed's launcher): it imports torch but has no `RANK`
    /// and runs no model step. Not a rank.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub launcher: bool,
    /// The device its phases ran on (`cuda:N`), when read.
    pub device: Option<String>,
    /// What the probe found about its environment.
    pub environment: ProbeEnvironment,
    /// The phases, in the order they ended.
    pub phases: Vec<WorkloadPhase>,
    /// What the estimator needs for a prediction of the same workload.
    pub facts: ProbeFacts,
    /// The probe's own cost, from its goodbye message.
    pub overhead: Option<Overhead>,
    /// Why and when the probe removed its hooks.
    pub hooks_removed: Option<String>,
    /// False when the process ended without the probe's goodbye.
    pub ended_cleanly: bool,
    /// The estimator's lines beside what was observed.
    pub comparison: Comparison,
    /// With `run --memory-history`: PyTorch's allocator history of this process, each
    /// phase's peak attributed to the estimate's lines, or why there is none; absent
    /// without the flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_history: Option<RankHistory>,
}

/// Whether a process's allocator history was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum HistoryStatus {
    /// Recorded: `attribution` is set (and `history`, unless it was left out).
    Recorded,
    /// Not possible here (no CUDA allocator in the process, a torch without the
    /// recording API, a probe that stopped early): `detail` says why.
    NotPossible,
}

/// One process's allocator history (`run --memory-history`): recorded by
/// `torch.cuda.memory._record_memory_history` in the probe, converted to
/// `gpumem.history/v1` (bounded: events, stack depth, bytes) and attributed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RankHistory {
    /// Recorded or not.
    pub status: HistoryStatus,
    /// What was recorded (events, snapshots, what the bounds left out), or why nothing
    /// was, in words.
    pub detail: String,
    /// The file the raw snapshot was written to (PyTorch's pickle, which
    /// <https://pytorch.org/memory_viz> and `torch.cuda._memory_viz` read), when one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pickle: Option<String>,
    /// Each phase's peak split into the estimate's lines, the timeline by line and the
    /// phases as bands (`gpumem_proto::history::attribute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<crate::history::Attribution>,
    /// The events themselves (`gpumem.history/v1`). The page is sent the document
    /// without them, and the sheet attaches it without them ([`strip_history_events`]):
    /// `left_out` then says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<crate::history::MemoryHistory>,
    /// Why `history` is absent from a recorded process, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_out: Option<String>,
}

/// What [`strip_history_events`] writes in `left_out`.
pub const HISTORY_LEFT_OUT: &str = "the events are left out here (the attribution is kept): the workload file written by --output and the pickle hold them";

/// Removes every rank's `memory_history.history` (the events) from a workload document
/// given as JSON, marking each with `left_out`; the attribution stays. Returns how many
/// were removed. What the page is sent and what the sheet attaches stay bounded by
/// the phases, not by the events a history holds. Anything that is not a workload
/// document's shape is left as it is.
pub fn strip_history_events(document: &mut serde_json::Value) -> usize {
    let Some(ranks) = document
        .get_mut("ranks")
        .and_then(serde_json::Value::as_array_mut)
    else {
        return 0;
    };
    let mut removed = 0;
    for rank in ranks {
        let Some(h) = rank
            .get_mut("memory_history")
            .and_then(serde_json::Value::as_object_mut)
        else {
            continue;
        };
        if h.remove("history").is_some() {
            removed += 1;
            h.insert("left_out".to_owned(), HISTORY_LEFT_OUT.into());
        }
    }
    removed
}

/// The probe's view of the software environment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProbeEnvironment {
    /// `torch.cuda` for the real reader, `recording-standin` in tests (SYNTHETIC).
    pub reader: String,
    /// `cuda`, `rocm` (HIP) or `none`: what torch was built for (method §12).
    pub backend: String,
    /// Whether torch saw a usable device.
    pub device_available: bool,
    /// `torch.__version__`.
    pub torch_version: Option<String>,
    /// `torch.version.cuda`.
    pub cuda_version: Option<String>,
    /// `torch.version.hip`.
    pub hip_version: Option<String>,
    /// `torch.backends.cudnn.version()`.
    pub cudnn_version: Option<u64>,
    /// `torch.cuda.get_allocator_backend()` (`native` or `cudaMallocAsync`).
    pub allocator_backend: Option<String>,
    /// `PYTORCH_CUDA_ALLOC_CONF` (or the HIP one) as the process saw it.
    pub alloc_conf: Option<String>,
    /// `sys.executable`: the Python that ran the program (the trace runs in it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_executable: Option<String>,
}

/// The caching allocator's four counters around a phase (method §7), as read by
/// `torch.cuda`; absolute values, not deltas.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AllocatorCounters {
    /// `memory_allocated` at the start, after synchronising.
    pub allocated_start_bytes: Option<u64>,
    /// `max_memory_allocated` over the phase (peaks reset at its start).
    pub allocated_peak_bytes: Option<u64>,
    /// `memory_allocated` at the end, after synchronising.
    pub allocated_end_bytes: Option<u64>,
    /// `memory_reserved` at the start.
    pub reserved_start_bytes: Option<u64>,
    /// `max_memory_reserved` over the phase.
    pub reserved_peak_bytes: Option<u64>,
    /// `memory_reserved` at the end.
    pub reserved_end_bytes: Option<u64>,
}

/// One measured phase of one rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkloadPhase {
    /// `model_load`, `forward`, `backward`, `optimizer_step`, `prefill`, `decode`, or a
    /// manual marker's name.
    pub name: String,
    /// The step (training) or generate call; `null` for `model_load`.
    pub step: Option<u32>,
    /// True for step 0: the first step is kept apart (method §3, §8).
    pub first_step: bool,
    /// True for a manual `gpumem_probe.phase(...)` marker.
    pub manual: bool,
    /// The device index the counters were read on.
    pub device: Option<u32>,
    /// The allocator's counters.
    pub allocator: AllocatorCounters,
    /// Free device memory at the end (`torch.cuda.mem_get_info`): every process.
    pub device_free_end_bytes: Option<u64>,
    /// Total device memory (`mem_get_info`).
    pub device_total_bytes: Option<u64>,
    /// Largest NVML per-process-tree figure sampled during the phase, when the timeline
    /// is available (device-level: context, library workspaces, NCCL included).
    pub process_tree_peak_bytes: Option<u64>,
    /// Wall time of the phase, synchronisations included.
    pub wall_time_ns: u64,
    /// The error that ended the phase, when it failed.
    pub error: Option<String>,
}

/// Facts the probe reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProbeFacts {
    /// The model of the first top-level forward.
    pub model: Option<ModelFacts>,
    /// The optimizer after its first step.
    pub optimizer: Option<OptimizerFacts>,
    /// One entry per instrumented generate call.
    pub generations: Vec<GenerationFacts>,
}

/// Count and bytes of one dtype.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DtypeCount {
    /// Elements.
    pub count: u64,
    /// Bytes.
    pub bytes: u64,
}

/// The model as the first top-level forward saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ModelFacts {
    /// The module's class name.
    pub module: String,
    /// Parameters by dtype name (`float32`, `bfloat16`, …).
    pub parameters_by_dtype: BTreeMap<String, DtypeCount>,
    /// Buffers by dtype name.
    pub buffers_by_dtype: BTreeMap<String, DtypeCount>,
    /// Parameters with `requires_grad`.
    pub trainable_parameters: u64,
    /// Shapes and dtypes of the first forward's tensor arguments (batch, tokens).
    pub input_shapes: Vec<InputShape>,
    /// Transformer dimensions from the model's `config`, when it has one.
    pub config: BTreeMap<String, u64>,
    /// The model's whole config.json (transformers' `to_json_string()`), when it has one
    /// of at most 32 KiB: the computed lines are estimated from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hf_config: Option<String>,
    /// Whether transformers' activation checkpointing was on (`is_gradient_checkpointing`),
    /// when the model says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gradient_checkpointing: Option<bool>,
    /// The rank's data-parallel job as the probe found it (torch.distributed and the
    /// model's wrapper), when the process runs one; the parameters above are then what
    /// this rank holds (its shards under FSDP or ZeRO-3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributed: Option<DistributedFacts>,
}

/// A rank's data-parallel job: how many ranks, on how many nodes, and how the model is
/// wrapped — what the estimate of each rank is made with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DistributedFacts {
    /// Ranks in the job: torch.distributed's world size, or `WORLD_SIZE`.
    pub world_size: u64,
    /// Ranks per node (`LOCAL_WORLD_SIZE`, which torchrun, accelerate and DeepSpeed's
    /// launcher set), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_world_size: Option<u64>,
    /// The default process group's backend (`nccl`, `gloo`, …), when initialised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// The wrapper of the model's first forward: `ddp` (DistributedDataParallel),
    /// `fsdp2` (`fully_shard`), `fsdp1` (FullyShardedDataParallel), `deepspeed`
    /// (DeepSpeedEngine) or `none`.
    pub wrapper: String,
    /// FSDP's sharding (`full`, `hybrid`, `grad-op`, `none`) or DeepSpeed's ZeRO stage
    /// (`0`–`3`), when the wrapper has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<String>,
    /// DDP's `gradient_as_bucket_view`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gradient_as_bucket_view: Option<bool>,
}

/// One tensor argument of the first forward.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct InputShape {
    /// Its shape.
    pub shape: Vec<u64>,
    /// Its dtype name.
    pub dtype: String,
}

/// The optimizer after its first step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct OptimizerFacts {
    /// Its class name (`AdamW`, …).
    pub optimizer_class: String,
    /// Bytes of the tensors in its state after the first step.
    pub state_bytes: u64,
    /// The same by dtype.
    pub state_by_dtype: BTreeMap<String, DtypeCount>,
    /// Parameters in its groups.
    pub parameters_covered: u64,
}

/// One generate call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GenerationFacts {
    /// Top-level forwards inside it (1 prefill + decode steps).
    pub forwards: u64,
    /// Shape of the returned tensor (batch, prompt + generated), when it was one.
    pub output_shape: Option<Vec<u64>>,
    /// Bytes of the KV cache returned by its last forward (distinct storages).
    pub kv_bytes: Option<u64>,
    /// Tensors in that cache.
    pub kv_tensors: Option<u64>,
}

/// The probe's cost, as it measured itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Overhead {
    /// Time spent inside the probe's hooks (synchronisations included).
    pub overhead_ns: u64,
    /// Hook calls.
    pub hook_calls: u64,
    /// Wall time from the probe's start to the removal of its hooks (or the exit).
    pub instrumented_ns: u64,
}

/// Whether an estimator line follows from the inputs or is a hypothesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Follows from the probe's facts.
    Computed,
    /// An assumption (activations): only a measurement settles it.
    Assumed,
    /// Traced: the model's code run on the meta device (`gpumem-agent trace`).
    Traced,
}

/// The estimator's lines for the same workload beside what was observed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Comparison {
    /// Where the computed figures come from.
    pub source: String,
    /// One line per item (weights, gradients, optimizer states, KV cache, activations).
    pub lines: Vec<ComparisonLine>,
    /// The named differences between computed and observed.
    pub differences: Vec<Difference>,
    /// The trace of the same workload (`gpumem-agent trace`: the model's code on
    /// PyTorch's meta device, no GPU), or why there is none; absent in documents
    /// written before `run` traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceOutcome>,
}

/// Whether the workload was traced, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TraceOutcome {
    /// `traced`, `not_possible` or `off` (`--no-trace`).
    pub status: TraceStatus,
    /// What was traced (model, dtype, attention kernel, workload, torch and
    /// transformers versions), or why nothing was, in one line. (Kept as words: the
    /// page reads this document, and every typed field costs it bytes.)
    pub detail: String,
    /// Wall time of the trace, milliseconds (when traced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time_ms: Option<u64>,
}

/// Kinds of [`TraceOutcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TraceStatus {
    /// Traced: the lines carry `traced_bytes`.
    Traced,
    /// No trace was possible (no config.json, a Python without torch or
    /// transformers, a family transformers does not carry, …): `detail` says why.
    NotPossible,
    /// Turned off with `--no-trace`.
    Off,
}

/// One item, computed and observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ComparisonLine {
    /// `weights`, `gradients`, `optimizer_states`, `kv_cache`, `activations`.
    pub item: String,
    /// The estimator's bytes, or `null` when the facts do not allow it (with `why`).
    pub computed_bytes: Option<u64>,
    /// Computed or assumed.
    pub basis: Basis,
    /// The estimator's formula in words.
    pub formula: String,
    /// What was observed, or `null`.
    pub observed_bytes: Option<u64>,
    /// How the observed figure was obtained.
    pub observed_how: String,
    /// The same item read from a trace of the same workload (basis *traced*: the
    /// model's code on PyTorch's meta device, never a GPU figure), when one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traced_bytes: Option<u64>,
    /// How the traced figure was read from the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traced_how: Option<String>,
    /// The same item in the allocator's history (`run --memory-history`): the most of
    /// it live at any phase's peak, blocks as the allocator counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributed_bytes: Option<u64>,
    /// Where the attributed figure was read (which phase's peak).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributed_how: Option<String>,
    /// Why a figure is `null`, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// A named difference between the estimate and the observation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Difference {
    /// Which difference.
    pub kind: DifferenceKind,
    /// Its size in bytes (signed: observed − computed where it compares the two).
    pub bytes: Option<i64>,
    /// Where it was read, in words.
    pub explanation: String,
    /// The estimate's line it is about (`LineAboveEstimate`: the comparison item; the
    /// explanation names the largest allocations behind it, and the rank's
    /// `memory_history` holds them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<String>,
}

/// Kinds of [`Difference`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum DifferenceKind {
    /// reserved − allocated at one checkpoint: allocator rounding and caching (method §6).
    AllocatorCaching,
    /// NVML process-tree peak − reserved peak: CUDA context, cuBLAS/cuDNN workspaces,
    /// NCCL (what vLLM calls "non-torch").
    OutsideAllocator,
    /// Allocated after − before the first optimizer step: the states it created.
    FirstStepState,
    /// Observed activations − the estimator's assumption.
    ActivationsAboveAssumption,
    /// A line of the allocator's history above the estimate's line for it (beyond the
    /// allocator's 512 B rounding of its blocks): attributed − computed, with the
    /// largest allocations behind it.
    LineAboveEstimate,
}

/// Device-level memory of the whole process tree over time (NVML).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Timeline {
    /// Sampling interval asked for (`--sample-ms`).
    pub interval_ms: u64,
    /// Why there are no samples, when there are none (no NVML, synthetic run, …).
    pub reason: Option<String>,
    /// One series per device.
    pub devices: Vec<DeviceTimeline>,
}

/// Samples of one device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeviceTimeline {
    /// NVML device index.
    pub index: u32,
    /// Its UUID, when read.
    pub uuid: Option<String>,
    /// Samples (bounded; `truncated` says when later ones were dropped).
    pub samples: Vec<Sample>,
    /// Largest sampled value.
    pub peak_bytes: Option<u64>,
    /// True when the sample bound was reached.
    pub truncated: bool,
}

/// One NVML sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Sample {
    /// Time since the command started.
    pub t_ns: u64,
    /// Device memory used by the command's process tree on this device.
    pub used_bytes: u64,
}

/// The probe channel's accounting: what was accepted and what was refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChannelStats {
    /// Connections accepted.
    pub connections: u64,
    /// Connections refused (over the bound).
    pub connections_refused: u64,
    /// Messages accepted.
    pub messages: u64,
    /// Lines refused: too long, not JSON, unknown version or type, over a bound.
    pub rejected: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_events_are_stripped_and_said_so_and_nothing_else() {
        let mut doc = serde_json::json!({
            "ranks": [
                {"pid": 1, "memory_history": {"status": "recorded", "detail": "d",
                    "attribution": {"peaks": []}, "history": {"events": [1, 2, 3]}}},
                {"pid": 2, "memory_history": {"status": "not_possible", "detail": "no CUDA"}},
                {"pid": 3},
                "not a rank"
            ]
        });
        assert_eq!(strip_history_events(&mut doc), 1);
        let h = &doc["ranks"][0]["memory_history"];
        assert!(h.get("history").is_none());
        assert_eq!(h["left_out"], HISTORY_LEFT_OUT);
        assert_eq!(h["attribution"], serde_json::json!({"peaks": []}));
        assert!(doc["ranks"][1]["memory_history"].get("left_out").is_none());
        assert_eq!(strip_history_events(&mut doc), 0, "idempotent");
        for mut other in [serde_json::json!([1]), serde_json::json!({"ranks": 3})] {
            let before = other.clone();
            assert_eq!(strip_history_events(&mut other), 0);
            assert_eq!(other, before);
        }
    }

    #[test]
    fn unknown_versions_are_refused() {
        let file = WorkloadFile {
            schema: "gpumem.workload/v9".into(),
            synthetic: true,
            note: None,
            agent_version: "0".into(),
            created_unix_s: None,
            requested_device: "cuda:0".into(),
            command: vec!["python".into()],
            allocator_env: BTreeMap::new(),
            steps_instrumented: 3,
            outcome: Outcome {
                status: Status::Ok,
                exit_code: Some(0),
                signal: None,
                forwarded_signals: Vec::new(),
                wall_time_ns: 1,
                failures: Vec::new(),
            },
            ranks: Vec::new(),
            timeline: Timeline::default(),
            channel: ChannelStats::default(),
            context: None,
        };
        assert!(file.check_schema().is_err());
        let ok = WorkloadFile {
            schema: WORKLOAD_SCHEMA.into(),
            ..file
        };
        assert!(ok.check_schema().is_ok());
        let text = serde_json::to_string(&ok).expect("serialises");
        let back: WorkloadFile = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, ok);
    }
}
