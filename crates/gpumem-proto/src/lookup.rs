//! What the page's lazily loaded lookup module (`web/lookup`, crate `gpumem-lookup`)
//! hands back to the dimensioner: a model's shape from its `config.json` and the exact
//! tensors from its weight files' headers, read from dropped files or from the Hub.
//!
//! The two wasm modules share no memory: the answer crosses as this JSON document,
//! so the dimensioner carries none of the readers (config, safetensors, GGUF, HTTP).

use gpumem_core::import::TensorSummary;
use serde::{Deserialize, Serialize};

/// A Hub lookup asked by the page. The token lives only in the page's memory and in
/// this request: never in the URL or in storage.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookupRequest {
    /// `org/name`.
    pub model: String,
    /// Branch, tag or commit ("main" when empty).
    #[serde(default)]
    pub revision: String,
    /// A weight file to read instead of the checkpoint (a `.gguf` of a GGUF repository).
    #[serde(default)]
    pub file: Option<String>,
    /// An access token for a gated or private repository.
    #[serde(default)]
    pub token: Option<String>,
}

/// A model's shape, read from its `config.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigRead {
    /// Where it came from (a file name, or `org/name@revision/config.json`).
    pub name: String,
    /// `model_type`.
    pub model_type: String,
    /// The shape as `key=value` pairs of the field table.
    pub pairs: Vec<(String, String)>,
    /// Defaults the reader assumed.
    pub notes: Vec<String>,
    /// Fields that change memory and are not modelled.
    pub warnings: Vec<String>,
    /// `exact`, `approximate: <why>` or `unknown family` (the reader's own summary).
    #[serde(default)]
    pub confidence: String,
}

/// Tensors read from weight-file headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorsRead {
    /// The files read (names only).
    pub files: Vec<String>,
    /// Their tensors, merged.
    pub summary: TensorSummary,
}

/// What a read gave: a shape, tensors, or both (a Hub lookup).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookupOutcome {
    /// The shape, when a config was read.
    pub config: Option<ConfigRead>,
    /// The tensors, when weight files were read.
    pub tensors: Option<TensorsRead>,
    /// HTTP requests sent (0 for local files).
    pub requests: u32,
    /// Sequential rounds of requests (the latency a lookup costs: requests sent
    /// together count once).
    pub round_trips: u32,
    /// The commit the Hub answered with, when it said.
    pub commit: Option<String>,
}
