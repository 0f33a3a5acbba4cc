//! Exact import, offline: a Hugging Face `config.json`, and the *headers*
//! of `.safetensors` and GGUF files, whose tensor tables give every tensor's dtype
//! and shape — so weights are counted byte for byte, scales and zero-points
//! included, without reading (or uploading) the weights themselves.
//!
//! Parsers take byte slices and never allocate in proportion to a number read from
//! the file before checking it against the bytes actually present.

// Checked arithmetic only (here and in every reader): the numbers come from files.
#![deny(clippy::arithmetic_side_effects)]

pub mod config;
pub mod gguf;
pub mod hub;
pub mod read_policy;
pub mod safetensors;

pub use crate::summary::{Tally, TensorSummary};
