//! The estimator's error type: invalid input, overflow and unreadable headers.
//!
//! Core code never panics on user input; every refusal is one of these variants, with
//! a message a user can act on.

use thiserror::Error;

/// Why an estimate or an import could not be made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EstimateError {
    /// A field's value is out of its allowed range or inconsistent with another.
    #[error("{field}: {reason}")]
    Invalid {
        /// The input field (CLI flag / URL key without dashes).
        field: &'static str,
        /// What is wrong, in words.
        reason: String,
    },
    /// An intermediate product does not fit in 64-bit bytes.
    #[error("overflow while computing {what}: the inputs are too large")]
    Overflow {
        /// The quantity being computed.
        what: &'static str,
    },
    /// A model file or header could not be read.
    #[error("{format}: {reason}")]
    Parse {
        /// "safetensors", "gguf" or "config.json".
        format: &'static str,
        /// What is wrong, with the byte offset where it helps.
        reason: String,
    },
    /// The bytes end before the header does; `needed` is a lower bound of the bytes required.
    #[error(
        "{format}: the file ends inside its header ({have} bytes read, at least {needed} needed)"
    )]
    Truncated {
        /// "safetensors" or "gguf".
        format: &'static str,
        /// Bytes available.
        have: u64,
        /// Bytes needed at least.
        needed: u64,
    },
}

impl EstimateError {
    /// Shorthand for [`EstimateError::Invalid`].
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        EstimateError::Invalid {
            field,
            reason: reason.into(),
        }
    }
}
