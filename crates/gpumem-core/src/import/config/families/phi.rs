//! Phi-3 (Phi3Config: the generic decoder, fused qkv and gate/up projections of
//! the same sizes), and Phi-1/2 (PhiConfig: one LayerNorm with bias feeding parallel
//! attention and MLP, a non-gated MLP) read with the generic rules.

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family};

/// Phi-3.
pub(crate) const PHI3: Family = Family {
    types: "phi3",
    class: "Phi3Config",
    arch: Architecture {
        fused_qkv: true,
        ..Architecture::BASE
    },
    ..BASE
};

/// Phi-1 / Phi-2: not every tensor modelled (dense biases).
pub(crate) const PHI: Family = Family {
    types: "phi",
    class: "PhiConfig",
    modelled: false,
    // PhiConfig's tie_word_embeddings defaults to false (PhiForCausalLM's lm_head has
    // its own weight and bias).
    arch: Architecture {
        gated_mlp: false,
        layernorm_bias: true,
        layer_norms: 1,
        ..Architecture::BASE
    },
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&PHI3, &PHI];
