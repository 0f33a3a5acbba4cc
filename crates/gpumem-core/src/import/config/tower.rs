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
