//! The document `gpumem-agent estimate --json` prints (`gpumem.estimate/v1`): the
//! inputs as `key=value` text, the estimate's headline integers and lines (flattened
//! in), the per-card fit, the engine's figures when engine flags were given, the
//! answer (`verdict`) and, with `--formats`, each format on the card.
//! `schemas/estimate.v1.schema.json` is generated from this type; every figure is
//! gpumem-core's own type, so the schema follows the estimator.

use std::collections::BTreeMap;

use gpumem_core::engine::{CardKv, EngineBudget, Largest};
use gpumem_core::estimate::Estimate;
use gpumem_core::fit::CardFit;
use gpumem_core::headline::{FormatFit, Headline};
use gpumem_core::placement::device_map::DeviceMapPlan;
use gpumem_core::placement::llama_cpp::LlamaPlacement;
use gpumem_core::placement::vllm::VllmOffload;
use serde::{Deserialize, Serialize};

/// Schema identifier of the document.
pub const ESTIMATE_SCHEMA: &str = "gpumem.estimate/v1";

/// The whole document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(title = "gpumem estimate, version 1"))]
pub struct EstimateDocument {
    /// Always [`ESTIMATE_SCHEMA`].
    #[cfg_attr(feature = "schema", schemars(extend("const" = "gpumem.estimate/v1")))]
    pub schema: String,
    /// Every input as the flags name it (without dashes), defaults included, as text.
    pub input: BTreeMap<String, String>,
    /// Headline integers and every line.
    #[serde(flatten)]
    pub estimate: Estimate,
    /// How far the config reader vouches for the shape (`exact`, `approximate: …`,
    /// `unknown family`), when a config was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<String>,
    /// Every catalogue card against the most loaded device's need, in catalogue order.
    pub fit: Vec<CardFit>,
    /// With `--engine` and `--card`: the engine's KV budget on that card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineBudget>,
    /// With `--engine` and no `--card`: the engine's KV pool on every catalogue card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_per_card: Option<Vec<CardKv>>,
    /// With `--card`: the largest context and the most sequences on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest: Option<Largest>,
    /// With `--engine llama.cpp` and `--card`, when every layer does not fit the card
    /// and no `--n-gpu-layers`, `--n-cpu-moe` or `--override-tensor` was given: the
    /// placement chosen (the flags to type, the card's fit and the host RAM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<LlamaPlacement>,
    /// With `--engine transformers` and `--card`, when the model does not fit one card,
    /// `--gpus` is above 1 or `--max-memory` is given: `device_map="auto"` planned (the
    /// call to type, the map, each device's bytes and verdict, the host RAM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_map: Option<DeviceMapPlan>,
    /// With `--engine vllm` and `--card`, when the workload does not fit and no
    /// `--cpu-offload-gb` was given: the smallest whole `--cpu-offload-gb` that fits,
    /// the card's fit with it and with one GiB less, and the pinned host RAM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_offload: Option<VllmOffload>,
    /// The answer: the verdict on the card (or the smallest that fits), the ways out.
    pub verdict: Headline,
    /// With `--formats` or `--compare-formats`: each format on the card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formats: Option<Vec<FormatFit>>,
}

#[cfg(test)]
mod tests {
    /// The published JSON Schema is generated from these types; a stale file fails
    /// here. Regenerate with
    /// `GPUMEM_BLESS=1 cargo test -p gpumem-proto --features schema published_schema`.
    #[cfg(feature = "schema")]
    #[test]
    fn published_schema_matches_the_types() {
        crate::assert_published_schema(
            "estimate.v1.schema.json",
            schemars::schema_for!(super::EstimateDocument),
            format!(
                "{}: what `gpumem-agent estimate --json` prints. Byte counts are raw integers in fields ending in _bytes (signed where a headroom or a KV pool can be negative); fractions of a card in millionths (_ppm).",
                super::ESTIMATE_SCHEMA
            ),
        );
    }
}
