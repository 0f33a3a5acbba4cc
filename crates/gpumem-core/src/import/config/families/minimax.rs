//! MiniMax-M2 (`minimax_m2`; vLLM's minimax_m2.py): grouped-query attention with
//! RMSNorms on queries and keys over the whole projection (`use_qk_norm` with
//! `qk_norm_type` "per_layer": `q_norm` [heads × head_dim], `k_norm` [kv_heads ×
//! head_dim]), 256 routed experts `intermediate_size` wide without shared experts,
//! and with `use_routing_bias` the router's fp32 `e_score_correction_bias` (vLLM
//! declares it float32; the FP8 checkpoint keeps it out of quantisation).

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// MiniMax-M2.
pub(crate) const MINIMAX_M2: Family = Family {
    types: "minimax_m2",
    class: "MiniMaxM2Config",
    // The rotary width, the router's noise; its MTP modules are not in the published
    // checkpoint (230B in all: with three more MoE layers it would be 241B).
    inert: "rotary_dim router_jitter_noise use_mtp num_mtp_modules mtp_transformer_layers",
    hook: Some(minimax_m2),
    ..BASE
};

fn minimax_m2(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    // transformers' MiniMaxM2 builds both always: on unless the config turns them off.
    if c.flag("use_qk_norm") != Some(false) {
        let whole = c.str("qk_norm_type") != Some("per_head");
        d.arch.qk_norm_whole = whole;
        d.arch.qk_norm = !whole;
    }
    let bias = c.flag("use_routing_bias") != Some(false);
    if let Some(m) = d.arch.moe.as_mut() {
        m.correction_bias = bias;
    }
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&MINIMAX_M2];
