//! Cohere (`cohere`, CohereConfig: Command-R, Command-R+; transformers'
//! modeling_cohere.py) and Cohere2 (`cohere2`, Cohere2Config: Command-R7B, Command-A): one LayerNorm without
//! bias feeding parallel attention and MLP, tied embeddings; checked against the model
//! transformers builds from the class's defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family, Sliding};

/// Cohere (Command-R v1, Command-R+): one LayerNorm without bias feeding parallel
/// attention and MLP, tied embeddings; under `use_qk_norm`, CohereAttention's q_norm
/// [heads, head_dim] and k_norm [kv_heads, head_dim] (a LayerNorm without bias over the
/// whole projection).
pub(crate) const COHERE: Family = Family {
    types: "cohere",
    class: "CohereConfig",
    arch: Architecture {
        tied_embeddings: true,
        layer_norms: 1,
        ..Architecture::BASE
    },
    inert: "logit_scale",
    hook: Some(|c, d| {
        d.arch.qk_norm_whole = c.flag("use_qk_norm") == Some(true);
        Ok(())
    }),
    ..BASE
};

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
pub(crate) const FAMILIES: &[&Family] = &[&COHERE, &COHERE2];
