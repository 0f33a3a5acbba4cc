//! The probe's JSON lines (protocol version 1, `gpumem_proto::probe`), parsed defensively.
//!
//! The probe runs inside the user's program, so every line is untrusted input: a line
//! that is too long, not JSON, of another version or of an unknown type is refused (and
//! counted), never a panic. Accepted text fields are clipped to [`MAX_TEXT`] characters.

pub use gpumem_proto::probe::{
    DtypeCount, MAX_LINE_BYTES, MAX_MESSAGES, MAX_TEXT, PROTOCOL_VERSION, ProbeMessage,
};

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
    Ok(clipped(message))
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

/// Clips every text field to [`MAX_TEXT`].
fn clipped(mut message: ProbeMessage) -> ProbeMessage {
    {
        match &mut message {
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
                python_executable,
                ..
            } => {
                clip(reader);
                clip(backend);
                if let Some(a) = alloc_conf {
                    clip(a);
                }
                if let Some(p) = python_executable {
                    clip(p);
                }
            }
            ProbeMessage::ProbeError { message } => clip(message),
            ProbeMessage::MemoryHistory { status, detail, .. } => {
                clip(status);
                clip(detail);
            }
            ProbeMessage::HooksRemoved { reason, .. } => clip(reason),
            ProbeMessage::Model {
                module,
                distributed,
                ..
            } => {
                clip(module);
                if let Some(d) = distributed {
                    clip(&mut d.wrapper);
                    for t in [&mut d.backend, &mut d.sharding].into_iter().flatten() {
                        clip(t);
                    }
                }
            }
            ProbeMessage::Optimizer {
                optimizer_class, ..
            } => clip(optimizer_class),
            ProbeMessage::Truncated { original_type } => clip(original_type),
            ProbeMessage::Generation { .. } | ProbeMessage::Bye { .. } => {}
        }
    }
    message
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
