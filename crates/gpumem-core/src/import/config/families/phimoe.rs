//! PhiMoE (`phimoe`, PhiMoEConfig: Phi-3.5-MoE): the Mixtral-style decoder with
//! LayerNorms with bias; checked against the model transformers builds from the
//! class's defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family};

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

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&PHIMOE];
