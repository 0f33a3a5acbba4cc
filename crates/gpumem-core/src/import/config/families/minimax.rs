//! MiniMax-M2 (`minimax_m2`; vLLM's minimax_m2.py): grouped-query attention with
//! RMSNorms on queries and keys over the whole projection (`use_qk_norm` with
//! `qk_norm_type` "per_layer": `q_norm` [heads × head_dim], `k_norm` [kv_heads ×
//! head_dim]), 256 routed experts `intermediate_size` wide without shared experts,
//! and with `use_routing_bias` the router's fp32 `e_score_correction_bias` (vLLM
//! declares it float32; the FP8 checkpoint keeps it out of quantisation).
//!
//! MiniMax-Text-01 / MiniMax-M1 (`minimax`, MiniMaxConfig; transformers 5.23
//! `models/minimax/modeling_minimax.py`): Mixtral-style experts under a hybrid of
//! softmax and lightning attention, one kind per layer by `layer_types`.
//!
//! | mechanism | transformers (5.23, `modeling_minimax.py`) | here |
//! |---|---|---|
//! | `"linear_attention"` layers: `qkv_proj` (3 × heads × head dim), `output_gate`, an RMSNorm over heads × head dim, `out_proj`, no biases | `MiniMaxLightningAttention` | mixer `lightning` |
//! | their decay tables, persistent buffers: `slope_rate` [heads], `query_decay`, `key_decay` [heads, block], `diagonal_decay` [heads, block, block] (`block_size`) | `MiniMaxLightningAttention.decay_factors` | `mixer-block` |
//! | their cache: heads × head dim × head dim per sequence, none over tokens | `MiniMaxCache.linear_cache` | the state line |
//! | `"full_attention"` layers: grouped-query attention without biases | `MiniMaxAttention` | attention layers |
//! | experts: `num_local_experts` of `intermediate_size`, a router without bias, top `num_experts_per_tok` | `MiniMaxSparseMoeBlock`, `MiniMaxExperts`, `MiniMaxTopKRouter` | MoE |

use crate::arch::{Mixer, MixerKind};
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

/// MiniMax-Text-01 and MiniMax-M1.
pub(crate) const MINIMAX: Family = Family {
    types: "minimax",
    class: "MiniMaxConfig",
    layer_types: "linear_attention",
    // The residual and branch scales of the deep-norm layers (scalars in the forward,
    // no tensor), the router's noise.
    inert: "full_attn_alpha_factor full_attn_beta_factor linear_attn_alpha_factor \
            linear_attn_beta_factor mlp_alpha_factor mlp_beta_factor router_jitter_noise",
    hook: Some(minimax),
    ..BASE
};

fn minimax(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    // MiniMaxConfig's default layer_types alternate full and linear attention.
    let linear = match c.count_of("layer_types", "linear_attention") {
        Some(n) => n,
        None => {
            d.notes.push(
                "layer_types absent: every other layer, from the second, is a lightning-attention layer (MiniMaxConfig's default)"
                    .into(),
            );
            d.arch.layers / 2
        }
    };
    let inner = d.arch.heads.saturating_mul(d.arch.head_dim);
    let block = d.or_default(c, "block_size", 256)?;
    d.arch.mixer = Some(Mixer {
        kind: MixerKind::Lightning,
        layers: linear,
        inner,
        state: d.arch.head_dim,
        heads: d.arch.heads,
        block,
        ..Mixer::BASE
    })
    .filter(|_| linear > 0);
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&MINIMAX_M2, &MINIMAX];
