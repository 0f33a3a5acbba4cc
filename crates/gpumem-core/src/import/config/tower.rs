//! Vision towers counted from their own config (`vision_config`), with the
//! projector that feeds the language model: each family's counter is in its file
//! (the record's `tower`, found by the config's root `model_type`); here the bounds
//! they share. Kept in 16 bits and no part of the active parameters. Each formula is
//! checked against the model transformers builds (`tests/cases/transformers`).

use serde_json::Value;

use crate::error::EstimateError;

use super::json::{Cfg, parse};

/// The tower's sizes (`keys` with their defaults), each at most 2^20, as u128.
pub(crate) fn sizes<const N: usize>(
    tower: &Value,
    keys: [(&str, u64); N],
) -> Result<[u128; N], EstimateError> {
    let t = Cfg::new(tower);
    let mut out = [0u128; N];
    for (o, (k, d)) in out.iter_mut().zip(keys) {
        let v = t.uint(k)?.unwrap_or(d);
        if v > 1 << 20 {
            return Err(parse("vision_config: absurdly large".into()));
        }
        *o = u128::from(v);
    }
    Ok(out)
}

pub(crate) fn fit(n: u128) -> Result<u64, EstimateError> {
    u64::try_from(n).map_err(|_| parse("vision_config: absurdly large".into()))
}

/// Parameters of one pre-norm ViT encoder layer as CLIP, SigLIP and Llama 4's tower
/// build it: two LayerNorms, q/k/v/out and fc1/fc2, every one with its bias (sizes at
/// most 2^20, checked by [`sizes`]).
#[allow(clippy::arithmetic_side_effects)]
pub(crate) fn vit_layer(h: u128, inter: u128) -> u128 {
    4 * h + 4 * (h * h + h) + 2 * h * inter + inter + h
}

/// transformers' `SiglipVisionModel` (`models/siglip/modeling_siglip.py`): the patch
/// convolution with its bias, (image / patch)² learned positions, layers of two
/// LayerNorms, q/k/v/out and fc1/fc2 with biases, `post_layernorm`, and under
/// `vision_use_head` (SiglipVisionConfig's default: true) the attention-pooling head
/// (a probe, `nn.MultiheadAttention`'s packed in-projection and out-projection with
/// biases, a LayerNorm and an MLP). Missing sizes are SiglipVisionConfig's defaults.
#[allow(clippy::arithmetic_side_effects)]
pub(crate) fn siglip(tower: &Value) -> Result<u128, EstimateError> {
    let [h, inter, layers, ch, image, patch] = sizes(
        tower,
        [
            ("hidden_size", 768),
            ("intermediate_size", 3072),
            ("num_hidden_layers", 12),
            ("num_channels", 3),
            ("image_size", 224),
            ("patch_size", 16),
        ],
    )?;
    let side = image.checked_div(patch).unwrap_or(0);
    let embed = h * ch * patch * patch + h + side * side * h;
    let mlp = 2 * h * inter + inter + h;
    let layer = vit_layer(h, inter);
    let head = if tower.get("vision_use_head").and_then(Value::as_bool) == Some(false) {
        0
    } else {
        h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + mlp
    };
    Ok(embed + layers * layer + 2 * h + head)
}

/// A vision tower's attention head width: `head_dim` where its config states it, else
/// `hidden_size ÷ heads` (`heads_key` with its default): transformers 5.23's
/// `getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads`.
pub(crate) fn head_width(
    tower: &Value,
    hidden: u64,
    heads_key: &str,
    heads: u64,
) -> Result<u64, EstimateError> {
    let [h, n, given] = sizes(
        tower,
        [("hidden_size", hidden), (heads_key, heads), ("head_dim", 0)],
    )?;
    fit(if given > 0 {
        given
    } else {
        h.checked_div(n).unwrap_or(0)
    })
}

/// Bytes of an axial 2-D rotary embedding's two fp32 buffers over `dim`
/// (`inv_freq` and `original_inv_freq`, non-persistent, `torch.arange(0, dim, 2)`:
/// ⌈dim ÷ 2⌉ values each): transformers 5.23's `Qwen2_5_VLVisionRotaryEmbedding`,
/// `Qwen3VLVisionRotaryEmbedding` (dim = head ÷ 2) and
/// `PixtralVisionRotaryEmbedding` (dim = head; its 2-D reordering keeps the length).
/// `dim` is bounded by [`sizes`].
#[allow(clippy::arithmetic_side_effects)]
pub(crate) fn axial_rope_bytes(dim: u64) -> u64 {
    dim.div_ceil(2) * 2 * 4
}
