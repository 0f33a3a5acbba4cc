//! StableLM (`stablelm`, StableLmConfig: StableLM-2, StableLM-3B-4E1T, Stable Code;
//! transformers 5.23 `models/stablelm/modeling_stablelm.py`): LayerNorms with bias, a
//! gated MLP without biases, q/k/v biases under `use_qkv_bias` (none on `o_proj`);
//! under `use_parallel_residual` one norm feeds attention and MLP alike; under
//! `qk_layernorm` `StableLmLayerNormPerHead` gives every query and key head its own
//! bias-free LayerNorm (`heads × head_dim` and `kv_heads × head_dim` weights, as a norm
//! over the whole projection counts them); checked against the model transformers
//! builds from the class's defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::families::gpt::{dropouts, rotary_fraction};
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// StableLM.
pub(crate) const STABLELM: Family = Family {
    types: "stablelm",
    class: "StableLmConfig",
    arch: Architecture {
        layernorm_bias: true,
        ..Architecture::BASE
    },
    hook: Some(stablelm),
    // StableLmConfig's partial_rotary_factor default.
    rotary_fraction: 0.25,
    ..BASE
};

fn stablelm(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    // The rotated width of each head (`StableLmAttention.rotary_ndims`), and the
    // dropouts: `hidden_dropout` after the MLP (`StableLmDecoderLayer.dropout`),
    // `attention_dropout` over eager attention's probabilities (both 0 by default).
    rotary_fraction(c, d, "partial_rotary_factor", 0.25)?;
    dropouts(c, d, ["hidden_dropout", "", "attention_dropout"], 0.0);
    d.arch.qkv_bias = c.flag("use_qkv_bias") == Some(true);
    d.arch.o_bias = false;
    d.arch.qk_norm_whole = c.flag("qk_layernorm") == Some(true);
    // One norm feeding attention and MLP, as Falcon-7B's parallel layer.
    if c.flag("use_parallel_residual") == Some(true) {
        d.arch.layer_norms = 1;
    }
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&STABLELM];
