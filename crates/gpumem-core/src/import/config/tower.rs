//! Vision towers counted from their own config (`vision_config`), with the
//! projector that feeds the language model; kept in 16 bits and no part of the
//! active parameters.

use serde_json::Value;

use crate::error::EstimateError;

use super::json::{Cfg, parse};

/// Parameters of Gemma-3's SigLIP vision tower and its projector, counted as the
/// checkpoint stores them (transformers' SiglipVisionModel without the pooling
/// head, and Gemma3MultiModalProjector: `mm_input_projection_weight`
/// [vision, text hidden] + `mm_soft_emb_norm` [vision]); `None` for other towers.
// Every factor is at most 2^20 (checked below) but the text hidden size (a u64):
// the u128 products stay below 2^90.
#[allow(clippy::arithmetic_side_effects)]
pub(crate) fn gemma3_siglip(
    root: &Cfg,
    tower: &Value,
    text_hidden: u64,
) -> Result<Option<u64>, EstimateError> {
    let tower_type = tower.get("model_type").and_then(Value::as_str);
    if root.str("model_type") != Some("gemma3")
        || tower_type != Some("siglip_vision_model")
        || tower.get("vision_use_head").and_then(Value::as_bool) != Some(false)
    {
        return Ok(None);
    }
    let t = Cfg::new(tower);
    // SiglipVisionConfig's defaults where the config is silent.
    let get = |k: &str, d: u64| t.uint(k).map(|x| x.unwrap_or(d));
    let (h, inter, layers) = (
        get("hidden_size", 768)?,
        get("intermediate_size", 3072)?,
        get("num_hidden_layers", 12)?,
    );
    let (channels, image, patch) = (
        get("num_channels", 3)?,
        get("image_size", 224)?,
        get("patch_size", 16)?.max(1),
    );
    // Far above any real tower; keeps every product below in u128.
    if [h, inter, layers, channels, image, patch]
        .into_iter()
        .any(|v| v > 1 << 20)
    {
        return Err(parse("vision_config: absurdly large".into()));
    }
    let [h, inter, layers, channels, side, patch, text] = [
        h,
        inter,
        layers,
        channels,
        image.checked_div(patch).unwrap_or(0),
        patch,
        text_hidden,
    ]
    .map(u128::from);
    // Patch embedding (conv weight + bias), positions, post-layernorm.
    let embed = h * channels * patch * patch + h + side * side * h + 2 * h;
    // Per layer: two LayerNorms, q/k/v/out with biases, fc1 and fc2 with biases.
    let layer = 4 * h + 4 * (h * h + h) + 2 * h * inter + inter + h;
    let projector = h * text + h;
    let total = embed + layers * layer + projector;
    u64::try_from(total)
        .map(Some)
        .map_err(|_| parse("vision_config: absurdly large".into()))
}

/// Parameters of Qwen2.5-VL's vision tower and merger, counted as transformers'
/// `Qwen2_5_VisionTransformerPretrainedModel` stores them: the patch embedding (a
/// bias-free Conv3d of `in_channels × temporal_patch_size × patch_size²` per output),
/// `depth` blocks of two RMSNorms, `qkv` and `proj` with biases and a gated MLP with
/// biases, and the merger (`ln_q`, then `spatial_merge_size²` patches concatenated
/// through two linears with biases to `out_hidden_size`).
// Every factor is at most 2^20 (checked below): the u128 products stay below 2^100.
#[allow(clippy::arithmetic_side_effects)]
pub(crate) fn qwen2_5_vl(tower: &Value) -> Result<u64, EstimateError> {
    let t = Cfg::new(tower);
    // Qwen2_5_VLVisionConfig's defaults where the config is silent.
    let get = |k: &str, d: u64| t.uint(k).map(|x| x.unwrap_or(d));
    let dims = [
        get("hidden_size", 3584)?,
        get("intermediate_size", 3420)?,
        get("depth", 32)?,
        get("in_channels", 3)?,
        get("patch_size", 14)?,
        get("temporal_patch_size", 2)?,
        get("spatial_merge_size", 2)?,
        get("out_hidden_size", 3584)?,
    ];
    if dims.iter().any(|v| *v > 1 << 20) {
        return Err(parse("vision_config: absurdly large".into()));
    }
    let [h, inter, depth, ch, patch, temporal, merge, out] = dims.map(u128::from);
    let embed = h * ch * temporal * patch * patch;
    let block = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * (inter * h + inter) + h * inter + h;
    let wide = h * merge * merge;
    let merger = h + (wide * wide + wide) + (out * wide + out);
    u64::try_from(embed + depth * block + merger)
        .map_err(|_| parse("vision_config: absurdly large".into()))
}
