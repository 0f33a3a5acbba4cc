//! The agent↔page wire protocol: versioned JSON messages over the local
//! WebSocket, defined once here and compiled into both `gpumem-agent` (native) and the
//! page (wasm32), so the two sides cannot drift apart.
//!
//! Every message is one JSON object in one WebSocket text message, tagged by `"type"`.
//! The page speaks [`ClientMessage`]; the agent answers with [`AgentFrame`]s, each of
//! which wraps an [`AgentMessage`] with two fields every message carries: whether it
//! comes from a replayed file rather than a live GPU, and the wall-clock
//! time at which the agent produced it (used to measure push latency).
//!
//! The flow, in order:
//! 1. the page connects to `ws://127.0.0.1:<port>/ws?token=<token>` and sends
//!    [`ClientMessage::Hello`] with [`PROTOCOL_VERSION`];
//! 2. the agent answers [`AgentMessage::Hello`] (its frame's `replay` says the mode) (or [`AgentMessage::Error`] with
//!    [`ErrorCode::VersionMismatch`] and closes) and then [`AgentMessage::Environment`]
//!    when it knows it;
//! 3. the page sends [`ClientMessage::StartMeasure`]; the agent answers
//!    [`AgentMessage::RunStarted`], then per device [`AgentMessage::DeviceStarted`], one
//!    [`AgentMessage::Phase`] per finished phase and [`AgentMessage::DeviceFinished`],
//!    then exactly one of [`AgentMessage::RunFinished`] or [`AgentMessage::RunFailed`];
//! 4. [`ClientMessage::Cancel`] stops the run in progress (it ends with `run_failed`,
//!    code `cancelled`).
//!
//! **Workload runs** (`gpumem-agent run --serve`, or `serve --replay` of a
//! `gpumem.workload/v1` file) are pushed, not requested: right after its hello the agent
//! sends the workload so far — [`AgentMessage::WorkloadStarted`], one
//! [`AgentMessage::WorkloadPhase`] per phase a process of the command ended,
//! [`AgentMessage::WorkloadSamples`] for the device-level timeline, and at the end
//! [`AgentMessage::WorkloadFinished`] with the whole document (its computed-vs-observed
//! table included) — then each new message as it happens. Such an agent refuses
//! `start_measure` (code `busy`): the page can start nothing there. These four messages
//! were added to version 1 without a bump: an agent sends them only in the workload
//! modes, which only a page of the same build (served by that agent) is shown, and
//! older messages are unchanged.
//!
//! **Invariant:** nothing here touches files, sockets or clocks — the page compiles this
//! module to wasm32. Timestamps are filled in by the agent and only carried here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::results::Dtype;
use crate::results::{
    Computed, Dimensions, Environment, EnvironmentReport, PhaseName, PhaseResult, Protocol, Status,
};
use crate::workload::{Sample, WorkloadPhase};

/// The protocol version both sides must agree on; bumped on any incompatible change.
pub const PROTOCOL_VERSION: u32 = 1;

/// A message from the page to the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMessage {
    /// First message of every connection: the protocol version the page speaks.
    Hello {
        /// The page's [`PROTOCOL_VERSION`].
        version: u32,
        /// Free text naming the client (e.g. `"gpumem-web 0.1.0"`), for the agent's log.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client: Option<String>,
    },
    /// Run the built-in measurement network with these dimensions (live), or replay the
    /// saved results file (when the agent was started with `--replay`).
    StartMeasure(MeasureRequest),
    /// Stop the run in progress on this connection.
    Cancel,
    /// Liveness check; the agent answers [`AgentMessage::Pong`] with the same nonce.
    Ping {
        /// Echoed back unchanged.
        nonce: u64,
    },
    /// Trace the dimensioner's workload on the agent's CPU (the model's code on
    /// PyTorch's meta device: no GPU, no weights); answered by [`AgentMessage::Traced`]
    /// or [`AgentMessage::TraceFailed`] with the same id.
    TraceEstimate(TraceRequest),
}

/// The dimensioner's inputs to trace: its `key=value` pairs in the estimator's
/// vocabulary (the field keys, as in the page's URL). No path, file or command: the
/// agent builds the model from the shape these describe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TraceRequest {
    /// Chosen by the page; the answer carries it back.
    pub id: u64,
    /// The inputs, key → value.
    pub inputs: std::collections::BTreeMap<String, String>,
}

/// Most inputs in a [`TraceRequest`] (the field table has about 120 keys).
pub const MAX_TRACE_INPUTS: usize = 256;
/// Longest key or value of a [`TraceRequest`], in bytes.
pub const MAX_TRACE_INPUT_BYTES: usize = 256;

impl TraceRequest {
    /// Checks the request's size; the agent refuses one that fails.
    pub fn validate(&self) -> Result<(), String> {
        if self.inputs.len() > MAX_TRACE_INPUTS {
            return Err(format!(
                "{} inputs; at most {MAX_TRACE_INPUTS}",
                self.inputs.len()
            ));
        }
        match self
            .inputs
            .iter()
            .find(|(k, v)| k.len() > MAX_TRACE_INPUT_BYTES || v.len() > MAX_TRACE_INPUT_BYTES)
        {
            Some((k, _)) => Err(format!(
                "input {:?} is longer than {MAX_TRACE_INPUT_BYTES} bytes",
                truncate(k, 64)
            )),
            None => Ok(()),
        }
    }
}

/// One line of the estimate as the trace found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TracedFigure {
    /// The estimate's line key it replaces (`activations`, `logits`, `prefill.mlp`, …).
    pub key: String,
    /// What it is, in words.
    pub label: String,
    /// Its bytes as the trace found them.
    pub bytes: u64,
    /// Where in the trace it was read.
    pub formula: String,
    /// The estimate's own figure for that line, from the same inputs and the same core
    /// (`null` when the estimate has no such line).
    pub estimate_bytes: Option<u64>,
    /// That line's basis: `computed` or `assumed`.
    pub estimate_basis: Option<String>,
}

/// Why no trace came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TraceFailure {
    /// The agent's Python lacks torch or transformers (the message says what to install).
    Unavailable,
    /// The inputs do not describe a model the trace can build.
    BadInputs,
    /// Another trace is running (one at a time per agent).
    Busy,
    /// The trace ran and failed, or ran past its time limit.
    Failed,
}

/// Every `type` value [`ClientMessage`] accepts, so that an unknown one can be named in
/// the error instead of being reported as a generic parse failure.
pub const CLIENT_MESSAGE_TYPES: &[&str] =
    &["hello", "start_measure", "cancel", "ping", "trace_estimate"];

/// The dimensions of one measurement series: the only thing the page may ask the agent
/// to run. There is no field for a command, a path or a file, by design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MeasureRequest {
    /// Sequences in the synthetic input.
    pub batch: u64,
    /// Tokens per sequence (the tensor's second dimension, not an LLM context, method §9).
    pub context: u64,
    /// Width of each Linear(width, width) layer.
    pub width: u64,
    /// Number of Linear + activation layers.
    pub layers: u64,
    /// Element type of weights and activations.
    pub dtype: Dtype,
    /// Warm-up iterations before the kept repeats (method §8).
    pub warmup: u64,
    /// Warm forward passes kept, each recorded.
    pub repeats: u64,
    /// Return unused pool memory to the device between repeats (method §10); it changes the
    /// conditions, so it is recorded with the result.
    #[serde(default)]
    pub trim_between_repeats: bool,
}

impl MeasureRequest {
    /// The default series: batch 2, context 128, width 1024, float32, 3
    /// warm-up iterations, 5 repeats; four layers.
    pub const SEED_EXAMPLE: MeasureRequest = MeasureRequest {
        batch: 2,
        context: 128,
        width: 1024,
        layers: 4,
        dtype: Dtype::Float32,
        warmup: 3,
        repeats: 5,
        trim_between_repeats: false,
    };

    /// The request that reproduces a recorded run (used to label a replay).
    pub fn from_recorded(dimensions: &Dimensions, protocol: &Protocol) -> MeasureRequest {
        MeasureRequest {
            batch: dimensions.batch,
            context: dimensions.context,
            width: dimensions.width,
            layers: dimensions.layers,
            dtype: dimensions.dtype,
            warmup: u64::from(protocol.warmup_iterations),
            repeats: u64::from(protocol.warm_repeats),
            trim_between_repeats: protocol.trim_between_repeats,
        }
    }

    /// Checks every dimension against `limits`; the agent refuses a request that fails,
    /// and the page can call the same function to explain the refusal before sending.
    pub fn validate(&self, limits: &MeasureLimits) -> Result<(), String> {
        let checks: [(&str, u64, u64, u64); 6] = [
            ("batch", self.batch, 1, limits.max_batch),
            ("context", self.context, 1, limits.max_context),
            ("width", self.width, 1, limits.max_width),
            ("layers", self.layers, 1, limits.max_layers),
            ("warmup", self.warmup, 0, limits.max_warmup),
            ("repeats", self.repeats, 1, limits.max_repeats),
        ];
        for (name, value, min, max) in checks {
            if value < min || value > max {
                return Err(format!(
                    "{name} = {value} is outside the agent's bounds ({min} to {max})"
                ));
            }
        }
        // The input tensor is [batch × context, width]; bound its element count so one
        // request cannot ask for an absurd allocation even within the per-axis limits.
        let elements = u128::from(self.batch) * u128::from(self.context) * u128::from(self.width);
        if elements > u128::from(limits.max_input_elements) {
            return Err(format!(
                "batch × context × width = {elements} elements exceeds the agent's bound of {}",
                limits.max_input_elements
            ));
        }
        Ok(())
    }
}

/// The bounds the agent enforces on a [`MeasureRequest`]; sent in the agent's hello so
/// the page can show them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MeasureLimits {
    /// Largest `batch`.
    pub max_batch: u64,
    /// Largest `context`.
    pub max_context: u64,
    /// Largest `width`.
    pub max_width: u64,
    /// Largest `layers`.
    pub max_layers: u64,
    /// Largest `warmup`.
    pub max_warmup: u64,
    /// Largest `repeats`.
    pub max_repeats: u64,
    /// Largest batch × context × width.
    pub max_input_elements: u64,
}

impl MeasureLimits {
    /// The agent's built-in bounds: generous enough to reach an out-of-memory boundary on
    /// today's largest cards (2^34 fp32 elements is 64 GiB of input), small enough that
    /// the page cannot ask for a run that never ends.
    pub const DEFAULT: MeasureLimits = MeasureLimits {
        max_batch: 4096,
        max_context: 131_072,
        max_width: 65_536,
        max_layers: 256,
        max_warmup: 100,
        max_repeats: 100,
        max_input_elements: 1 << 34,
    };
}

impl Default for MeasureLimits {
    fn default() -> Self {
        MeasureLimits::DEFAULT
    }
}

/// One message from the agent, with the fields every agent message carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentFrame {
    /// `true` on every message of an agent started with `serve --replay`: nothing it
    /// reports comes from a GPU now, but from a saved results file. The page
    /// labels such data *replay*; on the agent's hello it tells the page the mode.
    pub replay: bool,
    /// Wall-clock time at which the agent produced the message, in nanoseconds since the
    /// Unix epoch; the page may compare it with its own clock to show push latency.
    pub sent_unix_ns: u64,
    /// The message itself (its `type` field is flattened into this object).
    #[serde(flatten)]
    pub message: AgentMessage,
}

/// A message from the agent to the page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentMessage {
    /// Answer to the page's hello: the connection is paired.
    Hello {
        /// The agent's [`PROTOCOL_VERSION`].
        version: u32,
        /// `gpumem-agent`'s own version.
        agent_version: String,
        /// The bounds the agent enforces on [`ClientMessage::StartMeasure`].
        limits: MeasureLimits,
    },
    /// The GPU environment, sent right after the agent's hello: what
    /// `gpumem-agent environment --json` reports (live), or what the replayed file
    /// recorded (replay; facts the file does not hold are `null` with a reason).
    Environment {
        /// The report, as the results module defines it.
        report: EnvironmentReport,
    },
    /// A run was accepted and started.
    RunStarted {
        /// Identifies the run in the messages that follow.
        run_id: u64,
        /// The dimensions requested (in replay: those recorded in the file).
        request: MeasureRequest,
    },
    /// The measurement of one device begins (there is one per device in a run).
    DeviceStarted {
        /// The run.
        run_id: u64,
        /// `"cuda:N"`.
        device: String,
        /// The network's dimensions as the measurement recorded them.
        dimensions: Dimensions,
        /// Phase order and warm-up policy.
        protocol: Protocol,
        /// The device and software used.
        environment: Box<Environment>,
    },
    /// One finished phase, pushed the moment the agent read it.
    Phase {
        /// The run.
        run_id: u64,
        /// `"cuda:N"`.
        device: String,
        /// The phase's figures exactly as they appear in the results file.
        result: Box<PhaseResult>,
    },
    /// The measurement of one device ended.
    DeviceFinished {
        /// The run.
        run_id: u64,
        /// `"cuda:N"`.
        device: String,
        /// `ok` when every phase passed.
        status: Status,
        /// The failed phase, when `status` is `failed`.
        failed_phase: Option<PhaseName>,
        /// The error text, when `status` is `failed`.
        error: Option<String>,
        /// The prediction for the same network, to show beside each phase.
        computed: Option<Computed>,
        /// Wall time of the run on this device.
        wall_time_ns: Option<u64>,
    },
    /// The run ended and its results file was read back.
    RunFinished {
        /// The run that finished.
        run_id: u64,
        /// `true` when every phase succeeded; `false` when a phase failed but its
        /// failure was recorded (exit code 1: an observation, method §10).
        ok: bool,
        /// The complete results document (`gpumem.results/v1`) exactly as the
        /// measurement wrote it, so the sheet can attach it unchanged; read it with
        /// `serde_json::from_value::<ResultsFile>` to display it.
        result: Value,
    },
    /// The run ended without a results document.
    RunFailed {
        /// The run that failed.
        run_id: u64,
        /// Why, as a machine-readable code.
        code: RunFailure,
        /// Why, in words (e.g. the child's "no CUDA driver" message).
        message: String,
    },
    /// A workload run (`gpumem-agent run --serve`, or a replayed workload file) began.
    WorkloadStarted {
        /// Identifies the workload in the messages that follow.
        run_id: u64,
        /// The command's argv, exactly as run.
        command: Vec<String>,
        /// True when the figures come from the test stand-in, not a GPU.
        synthetic: bool,
        /// Steps the probe instruments (`--steps`).
        steps_instrumented: u32,
    },
    /// One phase of one process of the workload, pushed when the probe reported it.
    WorkloadPhase {
        /// The workload.
        run_id: u64,
        /// The process (probe connection) it came from, in connection order.
        process: u64,
        /// Its `RANK`, when set.
        rank: Option<u32>,
        /// The phase, as the workload document records it (its device-level peak is
        /// only known at the end, from the timeline, so it is `null` live).
        phase: Box<WorkloadPhase>,
    },
    /// New device-level (NVML) samples of the workload's process tree on one device.
    WorkloadSamples {
        /// The workload.
        run_id: u64,
        /// NVML device index.
        device: u32,
        /// The samples, oldest first.
        samples: Vec<Sample>,
    },
    /// The workload ended and its document was assembled.
    WorkloadFinished {
        /// The workload.
        run_id: u64,
        /// `true` when the command succeeded and nothing failed.
        ok: bool,
        /// The complete `gpumem.workload/v1` document, per-rank computed-vs-observed
        /// tables included; read it with `serde_json::from_value::<WorkloadFile>`.
        result: Value,
    },
    /// The trace asked for by [`ClientMessage::TraceEstimate`]: the lines it replaces
    /// (basis *traced*: the model's code on the CPU, never a GPU figure) and its peak.
    Traced {
        /// The request's id.
        id: u64,
        /// The estimate's lines as traced.
        lines: Vec<TracedFigure>,
        /// Highest allocated bytes of the trace.
        peak_allocated_bytes: u64,
        /// Highest reserved bytes (the allocator model's segments) of the trace.
        peak_reserved_bytes: u64,
        /// What was traced (model, workload, torch and transformers, seconds), in words.
        detail: String,
    },
    /// No trace for [`ClientMessage::TraceEstimate`].
    TraceFailed {
        /// The request's id.
        id: u64,
        /// Why, as a machine-readable code.
        code: TraceFailure,
        /// Why, in words the page shows as they are.
        message: String,
    },
    /// Answer to [`ClientMessage::Ping`].
    Pong {
        /// The nonce the page sent.
        nonce: u64,
    },
    /// The agent could not act on a message; the connection stays usable unless the
    /// code says otherwise ([`ErrorCode::VersionMismatch`] closes it).
    Error {
        /// What went wrong, as a machine-readable code.
        code: ErrorCode,
        /// What went wrong, in words the page can show as they are.
        message: String,
    },
}

/// Why a run ended without results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RunFailure {
    /// The GPU, the CUDA driver or a device is not available here (child exit code 2).
    Unavailable,
    /// The page cancelled the run.
    Cancelled,
    /// The measurement process ended abnormally or its output could not be read.
    Crashed,
}

/// Machine-readable error codes carried by [`AgentMessage::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The message is not a JSON object with a string `type`.
    Malformed,
    /// The `type` is not one the agent knows.
    UnknownMessage,
    /// The `type` is known but its fields are missing or wrong.
    BadFields,
    /// The page speaks another protocol version; the agent closes the connection.
    VersionMismatch,
    /// A message other than `hello` arrived before `hello`.
    HelloFirst,
    /// The requested dimensions are outside the agent's bounds.
    OutOfBounds,
    /// A run is already in progress (one at a time per agent, or per connection in replay).
    Busy,
    /// `cancel` arrived with no run in progress on this connection.
    NoRun,
    /// The page sends faster than the agent accepts; messages were dropped.
    RateLimited,
    /// Binary messages are not part of the protocol.
    Binary,
    /// Something went wrong inside the agent; the message says what.
    Internal,
}

/// Why a text message could not be read as a [`ClientMessage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    /// The code to send back in [`AgentMessage::Error`].
    pub code: ErrorCode,
    /// The explanation in words.
    pub message: String,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for WireError {}

impl ClientMessage {
    /// Reads one text message from the page, telling apart "not JSON", "unknown type"
    /// and "known type, wrong fields" so each gets its own answer.
    pub fn parse(text: &str) -> Result<ClientMessage, WireError> {
        let value: Value = serde_json::from_str(text).map_err(|e| WireError {
            code: ErrorCode::Malformed,
            message: format!("the message is not valid JSON: {e}"),
        })?;
        let Some(kind) = value.get("type").and_then(Value::as_str) else {
            return Err(WireError {
                code: ErrorCode::Malformed,
                message: "the message must be a JSON object with a string field \"type\"".into(),
            });
        };
        if !CLIENT_MESSAGE_TYPES.contains(&kind) {
            return Err(WireError {
                code: ErrorCode::UnknownMessage,
                message: format!(
                    "unknown message type {:?}; this agent understands {}",
                    truncate(kind, 64),
                    CLIENT_MESSAGE_TYPES.join(", ")
                ),
            });
        }
        let kind = kind.to_owned();
        serde_json::from_value(value).map_err(|e| WireError {
            code: ErrorCode::BadFields,
            message: format!("message {kind:?} has missing or wrong fields: {e}"),
        })
    }

    /// The JSON text of this message.
    pub fn to_json(&self) -> String {
        // Serialising these plain enums cannot fail (no maps with non-string keys).
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl AgentFrame {
    /// Reads one text message from the agent (the page's side of [`ClientMessage::parse`]).
    pub fn parse(text: &str) -> Result<AgentFrame, WireError> {
        serde_json::from_str(text).map_err(|e| WireError {
            code: ErrorCode::Malformed,
            message: format!("the agent sent a message this page cannot read: {e}"),
        })
    }

    /// Reads a frame already parsed into a JSON [`Value`], with the same result as
    /// [`AgentFrame::parse`] on the same text (tested below). Each field is read straight
    /// from the value instead of going through serde's buffering of internally tagged
    /// and flattened types, so a program that also reads other documents from values
    /// (the page reads sheets that way) carries one deserializer per type instead of
    /// two — a smaller wasm. The page uses this one.
    pub fn from_value(value: Value) -> Result<AgentFrame, WireError> {
        Self::read(value, |kind, m| match kind {
            "device_started" => Ok(Some(AgentMessage::DeviceStarted {
                run_id: take(m, "run_id")?,
                device: take(m, "device")?,
                dimensions: take(m, "dimensions")?,
                protocol: take(m, "protocol")?,
                environment: take(m, "environment")?,
            })),
            "device_finished" => Ok(Some(AgentMessage::DeviceFinished {
                run_id: take(m, "run_id")?,
                device: take(m, "device")?,
                status: take(m, "status")?,
                failed_phase: take(m, "failed_phase")?,
                error: take(m, "error")?,
                computed: take(m, "computed")?,
                wall_time_ns: take(m, "wall_time_ns")?,
            })),
            _ => Ok(None),
        })?
        .ok_or_else(|| unreadable("a per-device message was not read".into()))
    }

    /// As [`AgentFrame::from_value`], except that the per-device messages
    /// (`device_started`, `device_finished`), which the page does not show, are
    /// recognised but not read: they give `Ok(None)`. Every other message is read and
    /// checked exactly as [`AgentFrame::from_value`] reads it. Leaving those two
    /// unread keeps their deserializers (the measurement's environment, protocol and
    /// prediction) out of the page's wasm.
    pub fn from_value_shown(value: Value) -> Result<Option<AgentFrame>, WireError> {
        Self::read(value, |_, _| Ok(None))
    }

    /// Reads the fields every frame carries and the message; `device` reads the
    /// per-device messages (`Ok(None)`: recognised, not read).
    fn read(
        value: Value,
        device: impl FnOnce(
            &str,
            &mut serde_json::Map<String, Value>,
        ) -> Result<Option<AgentMessage>, WireError>,
    ) -> Result<Option<AgentFrame>, WireError> {
        let Value::Object(mut map) = value else {
            return Err(unreadable("the message is not a JSON object".into()));
        };
        let m = &mut map;
        let replay = take(m, "replay")?;
        let sent_unix_ns = take(m, "sent_unix_ns")?;
        let kind: String = take(m, "type")?;
        let message = match kind.as_str() {
            "hello" => AgentMessage::Hello {
                version: take(m, "version")?,
                agent_version: take(m, "agent_version")?,
                limits: take(m, "limits")?,
            },
            "environment" => AgentMessage::Environment {
                report: take(m, "report")?,
            },
            "run_started" => AgentMessage::RunStarted {
                run_id: take(m, "run_id")?,
                request: take(m, "request")?,
            },
            "phase" => AgentMessage::Phase {
                run_id: take(m, "run_id")?,
                device: take(m, "device")?,
                result: take(m, "result")?,
            },
            "run_finished" => AgentMessage::RunFinished {
                run_id: take(m, "run_id")?,
                ok: take(m, "ok")?,
                result: m.remove("result").unwrap_or(Value::Null),
            },
            "run_failed" => AgentMessage::RunFailed {
                run_id: take(m, "run_id")?,
                code: take(m, "code")?,
                message: take(m, "message")?,
            },
            "pong" => AgentMessage::Pong {
                nonce: take(m, "nonce")?,
            },
            "traced" => AgentMessage::Traced {
                id: take(m, "id")?,
                lines: take(m, "lines")?,
                peak_allocated_bytes: take(m, "peak_allocated_bytes")?,
                peak_reserved_bytes: take(m, "peak_reserved_bytes")?,
                detail: take(m, "detail")?,
            },
            "trace_failed" => AgentMessage::TraceFailed {
                id: take(m, "id")?,
                code: take(m, "code")?,
                message: take(m, "message")?,
            },
            "workload_started" => AgentMessage::WorkloadStarted {
                run_id: take(m, "run_id")?,
                command: take(m, "command")?,
                synthetic: take(m, "synthetic")?,
                steps_instrumented: take(m, "steps_instrumented")?,
            },
            "workload_phase" => AgentMessage::WorkloadPhase {
                run_id: take(m, "run_id")?,
                process: take(m, "process")?,
                rank: take(m, "rank")?,
                phase: take(m, "phase")?,
            },
            "workload_samples" => AgentMessage::WorkloadSamples {
                run_id: take(m, "run_id")?,
                device: take(m, "device")?,
                samples: take(m, "samples")?,
            },
            "workload_finished" => AgentMessage::WorkloadFinished {
                run_id: take(m, "run_id")?,
                ok: take(m, "ok")?,
                result: m.remove("result").unwrap_or(Value::Null),
            },
            "error" => AgentMessage::Error {
                code: take(m, "code")?,
                message: take(m, "message")?,
            },
            "device_started" | "device_finished" => match device(&kind, m)? {
                Some(message) => message,
                None => return Ok(None),
            },
            other => {
                return Err(unreadable(format!(
                    "unknown message type {:?}",
                    truncate(other, 64)
                )));
            }
        };
        Ok(Some(AgentFrame {
            replay,
            sent_unix_ns,
            message,
        }))
    }

    /// The JSON text of this frame.
    pub fn to_json(&self) -> String {
        // Values inside come from serde_json themselves, so serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The JSON text of a [`AgentMessage::RunFinished`] frame whose `result` is already
    /// serialised (`result_json` must be one JSON value). A replayed document is the same
    /// for every viewer, so the agent serialises it once instead of once per viewer;
    /// parsed, this text equals the frame built the ordinary way (tested below).
    pub fn run_finished_json(
        replay: bool,
        sent_unix_ns: u64,
        run_id: u64,
        ok: bool,
        result_json: &str,
    ) -> String {
        format!(
            "{{\"replay\":{replay},\"sent_unix_ns\":{sent_unix_ns},\"type\":\"run_finished\",\
             \"run_id\":{run_id},\"ok\":{ok},\"result\":{result_json}}}"
        )
    }
}

/// Checks the other side's protocol version, with the refusal in words for whichever
/// side reads it.
pub fn check_version(theirs: u32) -> Result<(), String> {
    if theirs == PROTOCOL_VERSION {
        Ok(())
    } else {
        let advice = if theirs > PROTOCOL_VERSION {
            "the other side is newer: update gpumem-agent (or use the page it serves)"
        } else {
            "the other side is older: reload the page or update it to match this agent"
        };
        Err(format!(
            "protocol version mismatch: this side speaks version {PROTOCOL_VERSION}, the other side \
             speaks version {theirs}; {advice}"
        ))
    }
}

fn unreadable(why: String) -> WireError {
    WireError {
        code: ErrorCode::Malformed,
        message: format!("the agent sent a message this page cannot read: {why}"),
    }
}

/// Removes `key` from a message object and reads it; a missing key reads as `null`, as
/// serde's derive does for `Option` fields (and refuses for the others).
fn take<T: serde::de::DeserializeOwned>(
    map: &mut serde_json::Map<String, Value>,
    key: &str,
) -> Result<T, WireError> {
    let value = map.remove(key).unwrap_or(Value::Null);
    crate::json::from_value(value).map_err(|e| unreadable(format!("field {key:?}: {e}")))
}

fn truncate(text: &str, max_chars: usize) -> String {
    text.chars().take(max_chars).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_messages_round_trip() {
        let messages = [
            ClientMessage::Hello {
                version: PROTOCOL_VERSION,
                client: Some("test".into()),
            },
            ClientMessage::Hello {
                version: 7,
                client: None,
            },
            ClientMessage::StartMeasure(MeasureRequest::SEED_EXAMPLE),
            ClientMessage::Cancel,
            ClientMessage::Ping { nonce: u64::MAX },
            ClientMessage::TraceEstimate(TraceRequest {
                id: 9,
                inputs: [("layers".to_owned(), "16".to_owned())].into(),
            }),
        ];
        for message in messages {
            let text = message.to_json();
            assert_eq!(ClientMessage::parse(&text), Ok(message), "{text}");
        }
    }

    /// A trace request is bounded and read defensively: wrong fields, wrong types,
    /// too many or too long inputs are refused with words, never a panic.
    #[test]
    fn trace_requests_are_bounded_and_malformed_ones_refused() {
        let ok = r#"{"type":"trace_estimate","id":1,"inputs":{"layers":"16","train":"full"}}"#;
        let Ok(ClientMessage::TraceEstimate(r)) = ClientMessage::parse(ok) else {
            panic!("{ok}");
        };
        assert_eq!(r.inputs["train"], "full");
        assert!(r.validate().is_ok());
        for bad in [
            r#"{"type":"trace_estimate"}"#,
            r#"{"type":"trace_estimate","id":-1,"inputs":{}}"#,
            r#"{"type":"trace_estimate","id":1,"inputs":[["layers","16"]]}"#,
            r#"{"type":"trace_estimate","id":1,"inputs":{"layers":16}}"#,
            r#"{"type":"trace_estimate","id":1,"inputs":null}"#,
        ] {
            let e = ClientMessage::parse(bad).expect_err(bad);
            assert_eq!(e.code, ErrorCode::BadFields, "{bad}");
        }
        let many = TraceRequest {
            id: 1,
            inputs: (0..=MAX_TRACE_INPUTS)
                .map(|i| (format!("k{i}"), String::new()))
                .collect(),
        };
        assert!(many.validate().unwrap_err().contains("at most"));
        let long = TraceRequest {
            id: 1,
            inputs: [("model".to_owned(), "x".repeat(MAX_TRACE_INPUT_BYTES + 1))].into(),
        };
        assert!(long.validate().unwrap_err().contains("longer than"));
    }

    #[test]
    fn start_measure_is_flat_and_trim_defaults_to_false() {
        let text = r#"{"type":"start_measure","batch":2,"context":128,"width":1024,
            "layers":4,"dtype":"float32","warmup":3,"repeats":5}"#;
        assert_eq!(
            ClientMessage::parse(text),
            Ok(ClientMessage::StartMeasure(MeasureRequest::SEED_EXAMPLE))
        );
    }

    #[test]
    fn agent_frames_round_trip_with_flattened_type() {
        let frames = [
            AgentMessage::Hello {
                version: PROTOCOL_VERSION,
                agent_version: "0.1.0".into(),
                limits: MeasureLimits::DEFAULT,
            },
            AgentMessage::RunStarted {
                run_id: 1,
                request: MeasureRequest::SEED_EXAMPLE,
            },
            AgentMessage::RunFinished {
                run_id: 1,
                ok: false,
                result: serde_json::json!({}),
            },
            AgentMessage::RunFailed {
                run_id: 2,
                code: RunFailure::Unavailable,
                message: "no CUDA driver".into(),
            },
            AgentMessage::Pong { nonce: 3 },
            AgentMessage::Error {
                code: ErrorCode::Busy,
                message: "busy".into(),
            },
            AgentMessage::Traced {
                id: 4,
                lines: vec![TracedFigure {
                    key: "activations".into(),
                    label: "Activations".into(),
                    bytes: u64::MAX,
                    formula: "traced".into(),
                    estimate_bytes: Some(3),
                    estimate_basis: Some("assumed".into()),
                }],
                peak_allocated_bytes: 1,
                peak_reserved_bytes: 2,
                detail: "traced llama".into(),
            },
            AgentMessage::TraceFailed {
                id: 5,
                code: TraceFailure::Unavailable,
                message: "pip install torch transformers".into(),
            },
        ];
        for message in frames {
            if matches!(
                message,
                AgentMessage::Traced { .. } | AgentMessage::TraceFailed { .. }
            ) {
                // The page reads frames from values: the same result as parse.
                let frame = AgentFrame {
                    replay: false,
                    sent_unix_ns: 1,
                    message: message.clone(),
                };
                let value: Value = serde_json::from_str(&frame.to_json()).expect("JSON");
                assert_eq!(AgentFrame::from_value(value), Ok(frame));
            }
            let frame = AgentFrame {
                replay: true,
                sent_unix_ns: 1_700_000_000_000_000_000,
                message,
            };
            let text = frame.to_json();
            let value: Value = serde_json::from_str(&text).expect("valid JSON");
            assert!(value["type"].is_string(), "type is flattened: {text}");
            assert_eq!(value["replay"], Value::Bool(true));
            assert_eq!(AgentFrame::parse(&text), Ok(frame));
        }
    }

    #[test]
    fn from_value_reads_every_message_as_parse_does() {
        use crate::results::{EnvironmentReport, Fact, ResultsFile};
        let file: ResultsFile = serde_json::from_str(include_str!(
            "../../../tests/fixtures/measurements/synthetic-seed-dims.json"
        ))
        .expect("the replay fixture reads");
        let workload: crate::workload::WorkloadFile = serde_json::from_str(include_str!(
            "../../../tests/fixtures/workloads/synthetic-train_adamw.json"
        ))
        .expect("the workload fixture reads");
        let run = &file.runs[0];
        let messages = vec![
            AgentMessage::Hello {
                version: PROTOCOL_VERSION,
                agent_version: "0.1.0".into(),
                limits: MeasureLimits::DEFAULT,
            },
            AgentMessage::Environment {
                report: EnvironmentReport {
                    schema: "gpumem.environment/v1".into(),
                    agent_version: "0.1.0".into(),
                    os: "linux".into(),
                    cuda_driver_library: Fact::unknown("none"),
                    cublas_library: Fact::known("libcublas.so.13".into()),
                    device_count: Fact::known(1),
                    devices: vec![run.environment.clone()],
                    missing: vec!["a GPU".into()],
                },
            },
            AgentMessage::RunStarted {
                run_id: 1,
                request: MeasureRequest::SEED_EXAMPLE,
            },
            AgentMessage::DeviceStarted {
                run_id: 1,
                device: run.device.clone(),
                dimensions: file.dimensions,
                protocol: file.protocol.clone(),
                environment: Box::new(run.environment.clone()),
            },
            AgentMessage::Phase {
                run_id: 1,
                device: run.device.clone(),
                result: Box::new(run.phases[2].clone()),
            },
            AgentMessage::DeviceFinished {
                run_id: 1,
                device: run.device.clone(),
                status: Status::Failed,
                failed_phase: Some(PhaseName::Warmup),
                error: Some("out of memory".into()),
                computed: run.computed.clone(),
                wall_time_ns: None,
            },
            AgentMessage::RunFinished {
                run_id: 1,
                ok: true,
                result: serde_json::to_value(&file).expect("serialisable"),
            },
            AgentMessage::RunFailed {
                run_id: 2,
                code: RunFailure::Cancelled,
                message: "cancelled".into(),
            },
            AgentMessage::Pong { nonce: 9 },
            AgentMessage::WorkloadStarted {
                run_id: 3,
                command: vec!["python".into(), "train.py".into()],
                synthetic: true,
                steps_instrumented: 3,
            },
            AgentMessage::WorkloadPhase {
                run_id: 3,
                process: 0,
                rank: Some(1),
                phase: Box::new(workload.ranks[0].phases[1].clone()),
            },
            AgentMessage::WorkloadSamples {
                run_id: 3,
                device: 0,
                samples: vec![crate::workload::Sample {
                    t_ns: 20_000_000,
                    used_bytes: u64::MAX,
                }],
            },
            AgentMessage::WorkloadFinished {
                run_id: 3,
                ok: false,
                result: serde_json::to_value(&workload).expect("serialisable"),
            },
            AgentMessage::Error {
                code: ErrorCode::OutOfBounds,
                message: "batch".into(),
            },
        ];
        for message in messages {
            let text = AgentFrame {
                replay: true,
                sent_unix_ns: 5,
                message,
            }
            .to_json();
            let value: Value = serde_json::from_str(&text).expect("JSON");
            let per_device = matches!(
                value["type"].as_str(),
                Some("device_started" | "device_finished")
            );
            // The page's reading: the same frame, except the per-device ones (unread).
            let shown = AgentFrame::from_value_shown(value.clone());
            if per_device {
                assert_eq!(shown, Ok(None), "{text}");
            } else {
                assert_eq!(
                    shown.map(Option::unwrap),
                    AgentFrame::parse(&text),
                    "{text}"
                );
            }
            assert_eq!(
                AgentFrame::from_value(value),
                AgentFrame::parse(&text),
                "{text}"
            );
        }
        // Missing optional fields read as null in both; bad ones are refused by both.
        for text in [
            r#"{"replay":false,"sent_unix_ns":1,"type":"device_finished","run_id":1,"device":"cuda:0","status":"ok"}"#,
            r#"{"replay":false,"sent_unix_ns":1,"type":"hello","version":1}"#,
            r#"{"replay":false,"sent_unix_ns":1,"type":"teleport"}"#,
            r#"{"sent_unix_ns":1,"type":"pong","nonce":1}"#,
            "[1]",
        ] {
            let value: Value = serde_json::from_str(text).expect("JSON");
            if !text.contains("device_finished") {
                assert_eq!(
                    AgentFrame::from_value_shown(value.clone()).is_ok(),
                    AgentFrame::parse(text).is_ok(),
                    "{text}"
                );
            }
            assert_eq!(
                AgentFrame::from_value(value).is_ok(),
                AgentFrame::parse(text).is_ok(),
                "{text}"
            );
        }
    }

    #[test]
    fn pre_serialised_run_finished_equals_the_typed_frame() {
        let result = serde_json::json!({"schema": "gpumem.results/v1", "runs": [{"a": [1, null]}]});
        let text = AgentFrame::run_finished_json(true, 42, 7, false, &result.to_string());
        let typed = AgentFrame {
            replay: true,
            sent_unix_ns: 42,
            message: AgentMessage::RunFinished {
                run_id: 7,
                ok: false,
                result,
            },
        };
        assert_eq!(AgentFrame::parse(&text), Ok(typed));
    }

    #[test]
    fn unknown_version_is_refused_in_words() {
        assert_eq!(check_version(PROTOCOL_VERSION), Ok(()));
        let newer = check_version(PROTOCOL_VERSION + 1).expect_err("newer refused");
        assert!(newer.contains("version mismatch") && newer.contains("update gpumem-agent"));
        let older = check_version(0).expect_err("older refused");
        assert!(older.contains("reload the page"));
    }

    #[test]
    fn unknown_type_malformed_and_bad_fields_are_told_apart() {
        let cases = [
            ("not json", ErrorCode::Malformed),
            ("[1,2]", ErrorCode::Malformed),
            (r#"{"kind":"hello"}"#, ErrorCode::Malformed),
            (r#"{"type":5}"#, ErrorCode::Malformed),
            (
                r#"{"type":"run_shell","cmd":"rm -rf /"}"#,
                ErrorCode::UnknownMessage,
            ),
            (r#"{"type":"hello"}"#, ErrorCode::BadFields),
            (
                r#"{"type":"start_measure","batch":-1}"#,
                ErrorCode::BadFields,
            ),
            (
                r#"{"type":"start_measure","batch":2,"context":1,"width":1,"layers":1,"dtype":"int4","warmup":0,"repeats":1}"#,
                ErrorCode::BadFields,
            ),
        ];
        for (text, code) in cases {
            let err = ClientMessage::parse(text).expect_err(text);
            assert_eq!(err.code, code, "{text}: {}", err.message);
            assert!(!err.message.is_empty());
        }
    }

    #[test]
    fn bounds_are_enforced_per_axis_and_in_total() {
        let limits = MeasureLimits::DEFAULT;
        assert_eq!(MeasureRequest::SEED_EXAMPLE.validate(&limits), Ok(()));
        let zero_batch = MeasureRequest {
            batch: 0,
            ..MeasureRequest::SEED_EXAMPLE
        };
        assert!(
            zero_batch
                .validate(&limits)
                .is_err_and(|m| m.contains("batch = 0"))
        );
        let huge = MeasureRequest {
            batch: limits.max_batch,
            context: limits.max_context,
            width: limits.max_width,
            ..MeasureRequest::SEED_EXAMPLE
        };
        assert!(
            huge.validate(&limits)
                .is_err_and(|m| m.contains("elements"))
        );
        let no_repeats = MeasureRequest {
            repeats: 0,
            ..MeasureRequest::SEED_EXAMPLE
        };
        assert!(no_repeats.validate(&limits).is_err());
    }
}
