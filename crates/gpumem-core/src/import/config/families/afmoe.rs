//! Arcee's AFMoE (`afmoe`, AfmoeConfig: the Trinity models; transformers 5.23
//! `models/afmoe/modeling_afmoe.py`): four RMSNorms per layer, per-head q/k norms, a
//! sigmoid output gate (`gate_proj`, as wide as the queries: counted as Qwen3-Next's
//! doubled q_proj), the first `num_dense_layers` layers dense, the others
//! `AfmoeSparseMoeBlock` — gated experts, a bias-free router, a 16-bit `expert_bias`
//! per expert and one shared MLP `moe_intermediate_size × num_shared_experts` wide;
//! sliding layers from `layer_types`, or all but every
//! `global_attn_every_n_layers`-th; checked against the model transformers builds from
//! the class's defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family, RouterBias};
use crate::import::config::json::{Cfg, parse};

/// AFMoE.
pub(crate) const AFMOE: Family = Family {
    types: "afmoe",
    class: "AfmoeConfig",
    arch: Architecture {
        layer_norms: 4,
        qk_norm: true,
        attn_gate: true,
        ..Architecture::BASE
    },
    router_bias: RouterBias::Yes,
    // The routing weights' scale; muP's scaling of activations (no tensor).
    inert: "route_scale mup_enabled",
    hook: Some(afmoe),
    ..BASE
};

fn afmoe(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let layers = d.arch.layers;
    let dense = d.or_default(c, "num_dense_layers", 1)?;
    let shared = d.or_default(c, "num_shared_experts", 2)?;
    if let Some(m) = d.arch.moe.as_mut() {
        m.dense_layers = dense;
        m.every = 1;
        m.shared_experts = u64::from(shared > 0);
        m.shared_intermediate = m
            .expert_intermediate
            .checked_mul(shared)
            .ok_or_else(|| parse("num_shared_experts: absurdly large".into()))?;
    }
    let every = d.or_default(c, "global_attn_every_n_layers", 4)?;
    if d.window.is_some() && c.list("layer_types").is_none() {
        // AfmoeConfig.__post_init__: full where (i + 1) % n == 0.
        let full = layers.checked_div(every).unwrap_or(0);
        d.sliding_layers = Some(layers.saturating_sub(full));
    }
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&AFMOE];
