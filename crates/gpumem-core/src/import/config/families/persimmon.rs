//! Persimmon (`persimmon`, PersimmonConfig; transformers 5.23
//! `models/persimmon/modeling_persimmon.py`): one `query_key_value` linear and `dense`
//! with biases, q and k LayerNorms over one head's width with bias (`qk_layernorm`,
//! default true), a plain MLP (`dense_h_to_4h`, `dense_4h_to_h`) with biases, two
//! LayerNorms with bias a layer and a final one, an untied lm_head without bias;
//! checked against the model transformers builds from the class's defaults
//! (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::families::gpt::{activation, rotary_fraction};
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};

/// Persimmon.
pub(crate) const PERSIMMON: Family = Family {
    types: "persimmon",
    class: "PersimmonConfig",
    // q, k and v are one linear here too (same count as three with as many K/V heads
    // as heads); `fused_qkv` stays off so that the activations, with their q/k
    // LayerNorms and squared ReLU, are not read as GPT-2's derivation.
    arch: Architecture {
        gated_mlp: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        layernorm_bias: true,
        ..Architecture::BASE
    },
    hook: Some(persimmon),
    // PersimmonConfig's partial_rotary_factor default.
    rotary_fraction: 0.5,
    ..BASE
};

fn persimmon(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    if c.flag("qk_layernorm").unwrap_or(true) {
        // PersimmonAttention: q_layernorm and k_layernorm, nn.LayerNorm(head_dim) with
        // weight and bias shared by the heads: 4 × head_dim values a layer.
        d.arch.layer_scalars = d
            .arch
            .head_dim
            .checked_mul(4)
            .ok_or_else(|| parse("head_dim: absurdly large".into()))?;
    }
    rotary_fraction(c, d, "partial_rotary_factor", 0.5)?;
    // PersimmonConfig's hidden_act default "relu2" (`ReLUSquaredActivation`).
    activation(c, d, "hidden_act", "relu2");
    Ok(())
}

/// Fuyu (FuyuConfig, transformers 5.23 `models/fuyu/modeling_fuyu.py`): a Persimmon
/// language model (`text_config`) fed image patches through one linear layer,
/// `vision_embed_tokens` = nn.Linear(patch_size² × num_channels, hidden) with bias.
pub(crate) const FUYU: Family = Family {
    types: "fuyu",
    class: "FuyuConfig",
    inert: "image_size",
    patches: Some(fuyu_patches),
    ..PERSIMMON
};

/// `vision_embed_tokens`, with FuyuConfig's defaults (patch_size 30, num_channels 3).
fn fuyu_patches(root: &Cfg, hidden: u64) -> Result<u64, EstimateError> {
    // The images' size sets how many patches a prompt holds, not a tensor.
    root.touch(&["image_size"]);
    let patch = root.uint("patch_size")?.unwrap_or(30);
    let channels = root.uint("num_channels")?.unwrap_or(3);
    patch
        .checked_mul(patch)
        .and_then(|p| p.checked_mul(channels))
        .and_then(|rows| rows.checked_add(1))
        .and_then(|rows| rows.checked_mul(hidden))
        .ok_or_else(|| parse("patch_size: absurdly large".into()))
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&PERSIMMON, &FUYU];
