//! SmolLM3 (`smollm3`, transformers' modeling_smollm3.py): the Llama decoder whose
//! NoPE layers (`no_rope_layers`, `no_rope_layer_interval`) only skip the rotary
//! embedding, which holds no tensor; embeddings tied unless said (SmolLM3Config).

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family};

/// SmolLM3.
pub(crate) const SMOLLM3: Family = Family {
    types: "smollm3",
    class: "SmolLM3Config",
    arch: Architecture {
        tied_embeddings: true,
        ..Architecture::BASE
    },
    inert: "no_rope_layers no_rope_layer_interval",
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&SMOLLM3];
