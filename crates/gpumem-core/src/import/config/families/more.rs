//! Families the generic decoder reads but for a default or two, each checked against
//! the model transformers builds from its config class's defaults (parameters and
//! persistent buffers on the meta device, equal tensor for tensor in count):
//! Cohere2 (Command-R7B, Command-A: one LayerNorm without bias feeding parallel
//! attention and MLP, tied), EXAONE-4 (per-head q/k norms), PhiMoE (Phi-3.5-MoE:
//! LayerNorms with bias), Apertus (a non-gated MLP with the xIELU activation's four
//! scalars per layer, per-head q/k norms), ERNIE-4.5 and GraniteMoE (the generic
//! decoder as it is).

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

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
    ..BASE
};

/// EXAONE-4.
pub(crate) const EXAONE4: Family = Family {
    types: "exaone4",
    class: "Exaone4Config",
    arch: Architecture {
        qk_norm: true,
        ..Architecture::BASE
    },
    // The pattern layer_types spells out.
    inert: "sliding_window_pattern",
    ..BASE
};

/// PhiMoE (Phi-3.5-MoE).
pub(crate) const PHIMOE: Family = Family {
    types: "phimoe",
    class: "PhiMoEConfig",
    arch: Architecture {
        layernorm_bias: true,
        ..Architecture::BASE
    },
    inert: "input_jitter_noise router_jitter_noise lm_head_bias",
    ..BASE
};

/// Apertus.
pub(crate) const APERTUS: Family = Family {
    types: "apertus",
    class: "ApertusConfig",
    arch: Architecture {
        gated_mlp: false,
        qk_norm: true,
        ..Architecture::BASE
    },
    hook: Some(apertus),
    ..BASE
};

/// transformers' XIELUActivation: `alpha_p` and `alpha_n` (parameters), `beta` and
/// `eps` (persistent buffers), in every layer's MLP.
fn apertus(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    if c.str("hidden_act") == Some("xielu") {
        d.arch.layer_scalars = 4;
    }
    Ok(())
}

/// ERNIE-4.5 (dense) and GraniteMoE.
pub(crate) const ERNIE_GRANITEMOE: Family = Family {
    types: "ernie4_5 granitemoe",
    class: "Ernie4_5Config",
    // GraniteMoE's logits scale (a constant).
    inert: "logits_scaling",
    ..BASE
};
