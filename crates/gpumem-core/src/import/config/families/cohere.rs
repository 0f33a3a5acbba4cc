//! Cohere2 (`cohere2`, Cohere2Config: Command-R7B, Command-A): one LayerNorm without
//! bias feeding parallel attention and MLP, tied embeddings; checked against the model
//! transformers builds from the class's defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family, Sliding};

/// Cohere2.
pub(crate) const COHERE2: Family = Family {
    types: "cohere2",
    class: "Cohere2Config",
    arch: Architecture {
        tied_embeddings: true,
        layer_norms: 1,
        ..Architecture::BASE
    },
    // The logits' scale is a constant.
    inert: "logit_scale",
    sliding: Sliding::Pattern(4),
    gguf: "cohere2",
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&COHERE2];
