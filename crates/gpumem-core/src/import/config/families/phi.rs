//! Phi-3 (Phi3Config: the generic decoder, fused qkv and gate/up projections of
//! the same sizes), and Phi-1/2 (PhiConfig: one LayerNorm with bias feeding parallel
//! attention and MLP, a non-gated MLP) read with the generic rules.

use crate::import::config::family::{BASE, Family};

/// Phi-3.
pub(crate) const PHI3: Family = Family {
    types: "phi3",
    class: "Phi3Config",
    fused_qkv: true,
    ..BASE
};

/// Phi-1 / Phi-2: not every tensor modelled (dense biases).
pub(crate) const PHI: Family = Family {
    types: "phi",
    class: "PhiConfig",
    modelled: false,
    tied: true,
    gated_mlp: false,
    ln_bias: true,
    norms: 1,
    ..BASE
};
