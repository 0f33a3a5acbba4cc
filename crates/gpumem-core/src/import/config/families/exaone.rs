//! EXAONE-4 (`exaone4`, Exaone4Config): the Llama decoder with per-head q/k norms; and
//! EXAONE-MoE (`exaone_moe`, ExaoneMoeConfig; transformers 5.23
//! `models/exaone_moe/modeling_exaone_moe.py`): the same attention, the layers
//! `mlp_layer_types` lists as `sparse` holding `num_experts` gated experts, a router
//! with its fp32 `e_score_correction_bias` and one shared MLP `moe_intermediate_size ×
//! num_shared_experts` wide. Both checked against the models transformers builds from
//! the classes' defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family, RouterBias};
use crate::import::config::json::{Cfg, parse};

use super::deepseek::mlp_layer_types;

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

/// EXAONE-MoE.
pub(crate) const EXAONE_MOE: Family = Family {
    types: "exaone_moe",
    class: "ExaoneMoeConfig",
    router_bias: RouterBias::Correction,
    hook: Some(exaone_moe),
    ..EXAONE4
};

fn exaone_moe(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let shared = c.uint("num_shared_experts")?.unwrap_or(0);
    if let Some(m) = d.arch.moe.as_mut()
        && shared > 0
    {
        m.shared_experts = 1;
        m.shared_intermediate = m
            .expert_intermediate
            .checked_mul(shared)
            .ok_or_else(|| parse("num_shared_experts: absurdly large".into()))?;
    }
    mlp_layer_types(c, d)
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&EXAONE4, &EXAONE_MOE];
