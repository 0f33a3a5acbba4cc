//! The `run` probe's messages (protocol v1): the JSON lines the Python probe
//! (`agent/python/gpumem_probe`) sends over the agent's unix socket, and the limits both
//! sides keep. `schemas/probe.v1.schema.json` is generated from these types; the probe's
//! own copy of the limits is generated from the constants here ([`python_constants`]) and
//! checked by a test, and the probe's tests validate every message they send against the
//! schema.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The protocol version (`"v"` in every line); other versions are refused.
pub const PROTOCOL_VERSION: u64 = 1;
/// Longest line, newline included: the probe drops longer ones (sending `truncated`),
/// the agent refuses them.
pub const MAX_LINE_BYTES: usize = 65_536;
/// Most messages one process sends; the agent closes a connection past it.
pub const MAX_MESSAGES: u64 = 10_000;
/// Longest text kept from any string field (the probe clips, the agent clips again).
pub const MAX_TEXT: usize = 4_000;
/// Longest config.json the probe sends in `model.hf_config`.
pub const MAX_CONFIG_BYTES: usize = 32_768;

/// The probe's copy of the limits, as Python source: the block between the
/// `# BEGIN generated limits` and `# END generated limits` lines of
/// `agent/python/gpumem_probe/__init__.py`.
pub fn python_constants() -> String {
    format!(
        "#: Version of the JSON lines sent to the agent (the agent refuses other versions).\n\
         PROTOCOL_VERSION = {PROTOCOL_VERSION}\n\
         #: Longest line the probe sends; the agent drops longer ones.\n\
         MAX_LINE_BYTES = {MAX_LINE_BYTES}\n\
         #: Most messages one process sends; the agent enforces the same bound.\n\
         MAX_MESSAGES = {MAX_MESSAGES}\n\
         #: Longest text kept from a string field.\n\
         MAX_TEXT = {MAX_TEXT}\n\
         #: Longest config.json sent with the model's facts.\n\
         MAX_CONFIG_BYTES = {MAX_CONFIG_BYTES}\n"
    )
}

/// Count and bytes of one dtype, as the probe sends them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DtypeCount {
    /// Elements.
    pub count: u64,
    /// Bytes.
    pub bytes: u64,
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

/// One message from the probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProbeMessage {
    /// First message of a process: who it is and what it runs on.
    Hello {
        /// Process id.
        pid: u32,
        /// Parent process id.
        #[serde(default)]
        ppid: Option<u32>,
        /// `RANK`.
        rank: Option<u32>,
        /// `LOCAL_RANK`.
        local_rank: Option<u32>,
        /// `WORLD_SIZE`.
        world_size: Option<u32>,
        /// The memory reader (`torch.cuda`, or the test stand-in).
        reader: String,
        /// `cuda`, `rocm` or `none`.
        backend: String,
        /// Whether torch saw a device.
        #[serde(default)]
        device_available: bool,
        /// `torch.__version__`.
        torch_version: Option<String>,
        /// `torch.version.cuda`.
        cuda_version: Option<String>,
        /// `torch.version.hip`.
        hip_version: Option<String>,
        /// cuDNN version number.
        cudnn_version: Option<u64>,
        /// Allocator backend.
        allocator_backend: Option<String>,
        /// `PYTORCH_CUDA_ALLOC_CONF`.
        alloc_conf: Option<String>,
        /// Steps the probe instruments before removing its hooks.
        #[serde(default)]
        max_steps: Option<u32>,
        /// `sys.executable`: the Python that runs the program (the agent traces the
        /// same workload in it).
        #[serde(default)]
        python_executable: Option<String>,
    },
    /// A finished phase with its readings (method §7).
    Phase {
        /// Phase name.
        name: String,
        /// Step or generate call.
        step: Option<u32>,
        /// Step 0.
        first_step: bool,
        /// A manual marker.
        manual: bool,
        /// Device index.
        device: Option<u32>,
        /// Wall time.
        wall_ns: u64,
        /// Allocated at the start.
        allocated_start_bytes: Option<u64>,
        /// Allocated peak.
        allocated_peak_bytes: Option<u64>,
        /// Allocated at the end.
        allocated_end_bytes: Option<u64>,
        /// Reserved at the start.
        reserved_start_bytes: Option<u64>,
        /// Reserved peak.
        reserved_peak_bytes: Option<u64>,
        /// Reserved at the end.
        reserved_end_bytes: Option<u64>,
        /// Free device memory at the end.
        device_free_bytes: Option<u64>,
        /// Total device memory.
        device_total_bytes: Option<u64>,
        /// The error that ended it.
        error: Option<String>,
    },
    /// The model of the first top-level forward.
    Model {
        /// Class name.
        module: String,
        /// Parameters by dtype.
        parameters_by_dtype: BTreeMap<String, DtypeCount>,
        /// Buffers by dtype.
        buffers_by_dtype: BTreeMap<String, DtypeCount>,
        /// Trainable parameters.
        trainable_parameters: u64,
        /// Input shapes.
        input_shapes: Vec<InputShape>,
        /// Transformer dimensions from `config`.
        #[serde(default)]
        config: BTreeMap<String, u64>,
        /// The model's whole config as transformers writes config.json (its
        /// `to_json_string()`), when it has one and it is at most
        /// [`MAX_CONFIG_BYTES`]: the agent estimates the workload from it.
        #[serde(default)]
        hf_config: Option<String>,
        /// transformers' `is_gradient_checkpointing`, when the model has it.
        #[serde(default)]
        gradient_checkpointing: Option<bool>,
        /// The rank's data-parallel job, when it runs one.
        #[serde(default)]
        distributed: Option<crate::workload::DistributedFacts>,
    },
    /// The optimizer after its first step.
    Optimizer {
        /// Class name.
        optimizer_class: String,
        /// State bytes.
        state_bytes: u64,
        /// State by dtype.
        #[serde(default)]
        state_by_dtype: BTreeMap<String, DtypeCount>,
        /// Parameters in its groups.
        parameters_covered: u64,
    },
    /// One generate call.
    Generation {
        /// Which generate call (0 first).
        #[serde(default)]
        call: Option<u32>,
        /// Top-level forwards inside it.
        forwards: u64,
        /// Output shape.
        output_shape: Option<Vec<u64>>,
        /// KV bytes seen.
        kv_bytes: Option<u64>,
        /// KV tensors seen.
        kv_tensors: Option<u64>,
        /// KV bytes by dtype.
        #[serde(default)]
        kv_by_dtype: BTreeMap<String, DtypeCount>,
    },
    /// An uncaught exception.
    Failure {
        /// `oom` or `exception`.
        kind: String,
        /// Phase open (or last failed) at the time.
        phase: Option<String>,
        /// Its step.
        step: Option<u32>,
        /// Exception class.
        exception_type: String,
        /// Its text.
        message: String,
        /// Last counter values read.
        #[serde(default)]
        last: BTreeMap<String, Option<u64>>,
    },
    /// The probe removed its hooks.
    HooksRemoved {
        /// Why.
        reason: String,
        /// Steps done.
        steps: u32,
        /// generate calls done.
        #[serde(default)]
        generate_calls: Option<u32>,
    },
    /// With `run --memory-history`: the allocator history was written (the snapshot
    /// pickle and its `gpumem.history/v1` conversion, `history-<pid>.pickle` and
    /// `history-<pid>.json` in the probe's own folder, which the agent reads back), or
    /// why it could not be recorded.
    MemoryHistory {
        /// `recorded` or `not_possible`.
        status: String,
        /// What was recorded, or why nothing was, in words.
        detail: String,
        /// Entries PyTorch's recorder returned over the run, kept or not.
        #[serde(default)]
        entries: u64,
        /// Entries left out by the bounds (the ring buffer's, the probe's).
        #[serde(default)]
        dropped: u64,
        /// Snapshots taken (one after each phase and one at the end).
        #[serde(default)]
        snapshots: u32,
    },
    /// The probe hit a bug of its own and disabled itself.
    ProbeError {
        /// What.
        message: String,
    },
    /// A message the probe had to drop because it was too long.
    Truncated {
        /// Its type.
        original_type: String,
    },
    /// Last message of a process.
    Bye {
        /// Time inside the probe.
        overhead_ns: u64,
        /// Hook calls.
        hook_calls: u64,
        /// Instrumented wall time.
        instrumented_ns: u64,
        /// Steps done.
        #[serde(default)]
        steps: Option<u32>,
        /// generate calls done.
        #[serde(default)]
        generate_calls: Option<u32>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips_with_its_tag() {
        let m = ProbeMessage::Bye {
            overhead_ns: 1,
            hook_calls: 2,
            instrumented_ns: 3,
            steps: Some(4),
            generate_calls: None,
        };
        let text = serde_json::to_string(&m).unwrap();
        assert!(text.starts_with(r#"{"type":"bye""#), "{text}");
        assert_eq!(serde_json::from_str::<ProbeMessage>(&text).unwrap(), m);
        assert!(python_constants().contains("MAX_MESSAGES = 10000\n"));
    }

    /// The published JSON Schema is generated from these types; a stale file fails
    /// here. Regenerate with
    /// `GPUMEM_BLESS=1 cargo test -p gpumem-proto --features schema published_schema`.
    #[cfg(feature = "schema")]
    #[test]
    fn published_schema_matches_the_types() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let path = root.join("schemas/probe.v1.schema.json");
        let mut schema = schemars::schema_for!(ProbeMessage);
        schema.insert(
            "$id".to_owned(),
            serde_json::json!("https://gpumem.invalid/schemas/probe.v1.schema.json"),
        );
        schema.insert(
            "description".to_owned(),
            serde_json::json!(format!(
                "One JSON line from the `run` probe to the agent (protocol {PROTOCOL_VERSION}; every line also carries \"v\": {PROTOCOL_VERSION}). Limits: a line is at most {MAX_LINE_BYTES} bytes, a process sends at most {MAX_MESSAGES} messages, text fields are clipped to {MAX_TEXT} characters."
            )),
        );
        schema.insert(
            "x-limits".to_owned(),
            serde_json::json!({
                "protocol_version": PROTOCOL_VERSION,
                "max_line_bytes": MAX_LINE_BYTES,
                "max_messages": MAX_MESSAGES,
                "max_text": MAX_TEXT,
                "max_config_bytes": MAX_CONFIG_BYTES,
            }),
        );
        let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
        let probe = root.join("agent/python/gpumem_probe/__init__.py");
        let source = std::fs::read_to_string(&probe).unwrap();
        let (begin, end) = ("# BEGIN generated limits\n", "# END generated limits\n");
        let (a, b) = (
            source.find(begin).unwrap() + begin.len(),
            source.find(end).unwrap(),
        );
        let fresh = format!("{}{}{}", &source[..a], python_constants(), &source[b..]);
        if std::env::var_os("GPUMEM_BLESS").is_some() {
            std::fs::write(&path, &text).unwrap();
            std::fs::write(&probe, &fresh).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == text && source == fresh,
            "{} or the probe's generated limits are stale: regenerate them with `GPUMEM_BLESS=1 cargo test -p gpumem-proto --features schema published_schema` and commit them",
            path.display()
        );
    }
}
