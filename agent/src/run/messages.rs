//! The probe's JSON lines (protocol version 1), parsed defensively.
//!
//! The probe runs inside the user's program, so every line is untrusted input: a line
//! that is too long, not JSON, of another version or of an unknown type is refused (and
//! counted), never a panic. Accepted text fields are clipped to [`MAX_TEXT`] characters.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The protocol version this agent reads (`"v"` in every line).
pub const PROTOCOL_VERSION: u64 = 1;
/// Longest line accepted, newline included (the probe's `MAX_LINE_BYTES`).
pub const MAX_LINE_BYTES: usize = 65_536;
/// Longest text kept from any string field.
pub const MAX_TEXT: usize = 4_000;

/// Count and bytes of one dtype, as the probe sends them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct DtypeCount {
    /// Elements.
    pub count: u64,
    /// Bytes.
    pub bytes: u64,
}

/// One tensor argument of the first forward.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct InputShape {
    /// Its shape.
    pub shape: Vec<u64>,
    /// Its dtype name.
    pub dtype: String,
}

/// One message from the probe.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProbeMessage {
    /// First message of a process: who it is and what it runs on.
    Hello {
        /// Process id.
        pid: u32,
        /// The parent's process id (absent from older probes).
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
    },
    /// A finished phase with its §7 readings.
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
        /// Top-level forwards inside it.
        forwards: u64,
        /// Output shape.
        output_shape: Option<Vec<u64>>,
        /// KV bytes seen.
        kv_bytes: Option<u64>,
        /// KV tensors seen.
        kv_tensors: Option<u64>,
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
    },
}

/// Why a line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Longer than [`MAX_LINE_BYTES`].
    TooLong,
    /// Not a JSON object with a numeric `v`.
    NotJson,
    /// `v` is not [`PROTOCOL_VERSION`].
    Version(u64),
    /// Unknown `type` or wrong fields.
    Shape(String),
}

/// Parses one line (without its newline).
pub fn parse_line(line: &[u8]) -> Result<ProbeMessage, Refused> {
    if line.len() >= MAX_LINE_BYTES {
        return Err(Refused::TooLong);
    }
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|_| Refused::NotJson)?;
    let version = value
        .get("v")
        .and_then(serde_json::Value::as_u64)
        .ok_or(Refused::NotJson)?;
    if version != PROTOCOL_VERSION {
        return Err(Refused::Version(version));
    }
    let message: ProbeMessage = serde_json::from_value(value).map_err(|e| {
        let mut text = e.to_string();
        text.truncate(200);
        Refused::Shape(text)
    })?;
    Ok(message.clipped())
}

fn clip(s: &mut String) {
    if s.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
}

impl ProbeMessage {
    fn clipped(mut self) -> ProbeMessage {
        match &mut self {
            ProbeMessage::Phase { name, error, .. } => {
                clip(name);
                if let Some(e) = error {
                    clip(e);
                }
            }
            ProbeMessage::Failure {
                message,
                phase,
                exception_type,
                kind,
                ..
            } => {
                clip(message);
                clip(exception_type);
                clip(kind);
                if let Some(p) = phase {
                    clip(p);
                }
            }
            ProbeMessage::Hello {
                reader,
                backend,
                alloc_conf,
                ..
            } => {
                clip(reader);
                clip(backend);
                if let Some(a) = alloc_conf {
                    clip(a);
                }
            }
            ProbeMessage::ProbeError { message } => clip(message),
            ProbeMessage::HooksRemoved { reason, .. } => clip(reason),
            ProbeMessage::Model { module, .. } => clip(module),
            ProbeMessage::Optimizer {
                optimizer_class, ..
            } => clip(optimizer_class),
            ProbeMessage::Truncated { original_type } => clip(original_type),
            ProbeMessage::Generation { .. } | ProbeMessage::Bye { .. } => {}
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_lines_are_refused_not_panicked_on() {
        let long = vec![b'a'; MAX_LINE_BYTES + 10];
        assert_eq!(parse_line(&long), Err(Refused::TooLong));
        for bad in [
            &b""[..],
            b"null",
            b"[1,2]",
            b"{\"type\":\"bye\"}",
            b"{\"v\":\"1\",\"type\":\"bye\"}",
            b"\xff\xfe",
            b"{\"v\":1}",
        ] {
            assert!(
                parse_line(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse_line(
                br#"{"v":2,"type":"bye","overhead_ns":1,"hook_calls":1,"instrumented_ns":1}"#
            ),
            Err(Refused::Version(2))
        );
        assert!(matches!(
            parse_line(br#"{"v":1,"type":"launch_missiles"}"#),
            Err(Refused::Shape(_))
        ));
        // Negative or fractional byte counts are not bytes.
        assert!(matches!(
            parse_line(
                br#"{"v":1,"type":"bye","overhead_ns":-1,"hook_calls":1,"instrumented_ns":1}"#
            ),
            Err(Refused::Shape(_))
        ));
        // A deeply nested document is refused by serde_json's recursion limit.
        let deep = format!("{}{}", "[".repeat(30_000), "]".repeat(30_000));
        assert!(parse_line(deep.as_bytes()).is_err());
    }

    #[test]
    fn long_text_fields_are_clipped() {
        let message = "x".repeat(20_000);
        let line = format!(r#"{{"v":1,"type":"probe_error","message":"{message}"}}"#);
        match parse_line(line.as_bytes()) {
            Ok(ProbeMessage::ProbeError { message }) => {
                assert!(message.len() <= MAX_TEXT + 3);
            }
            other => panic!("{other:?}"),
        }
    }
}
