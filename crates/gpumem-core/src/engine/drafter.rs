//! Speculative decoding's drafter as a budget reports it: the method, in the names
//! vLLM's `--speculative-config` takes, and what the drafter costs
//! ([`Speculative`], `engine.speculative` in `--json`).

use serde::{Deserialize, Serialize};

use crate::error::EstimateError;

/// vLLM's speculative method (`--speculative-config '{"method": …}'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum SpecMethod {
    /// Prompt n-gram lookup on the host.
    Ngram,
    /// An EAGLE head (one or more decoder layers reading the target's hidden states).
    Eagle,
    /// An EAGLE-3 head (reads three of the target's hidden states; its own lm_head).
    Eagle3,
    /// The checkpoint's own multi-token-prediction layers (DeepSeek-V3, GLM-4.5, Qwen3-Next, Nemotron-3).
    Mtp,
    /// A separate, smaller model of the same vocabulary.
    DraftModel,
}

impl SpecMethod {
    /// Parses a method as vLLM takes it (its deprecated MTP names too).
    pub fn parse(text: &str) -> Result<SpecMethod, EstimateError> {
        Ok(match text.trim().to_ascii_lowercase().as_str() {
            "ngram" | "[ngram]" => SpecMethod::Ngram,
            "eagle" => SpecMethod::Eagle,
            "eagle3" => SpecMethod::Eagle3,
            "draft_model" | "draft-model" => SpecMethod::DraftModel,
            // config/speculative.py MTPModelTypes (deepseek_mtp, glm4_moe_mtp, …: every
            // one ends in _mtp), each "replaced with mtp".
            t if t == "mtp" || t.ends_with("_mtp") => SpecMethod::Mtp,
            _ => {
                return Err(EstimateError::invalid(
                    "speculative-method",
                    format!(
                        "{text:?} is not a method carried: ngram, eagle, eagle3, mtp or draft_model"
                    ),
                ));
            }
        })
    }

    /// The name vLLM uses.
    pub fn name(self) -> &'static str {
        match self {
            SpecMethod::Ngram => "ngram",
            SpecMethod::Eagle => "eagle",
            SpecMethod::Eagle3 => "eagle3",
            SpecMethod::Mtp => "mtp",
            SpecMethod::DraftModel => "draft_model",
        }
    }
}

/// What the drafter adds to the budget (`engine.speculative` in the JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Speculative {
    /// The method.
    pub method: SpecMethod,
    /// Tokens proposed per step.
    pub num_speculative_tokens: u64,
    /// The drafter's weights on the device, loaded beside the target's.
    pub draft_weights_bytes: u64,
    /// Attention layers the drafter adds to the KV pool.
    pub draft_kv_layers: u64,
    /// KV bytes per token those layers add on the device (included in the budget's
    /// `kv_bytes_per_token`).
    pub draft_kv_bytes_per_token: u64,
    /// The drafter's profiling forward: its activation peak beside the target's held
    /// hidden states.
    pub draft_forward_bytes: u64,
}
