//! Vision towers counted from their own config (`vision_config`), with the
//! projector that feeds the language model, by the multimodal `model_type` at the
//! config's root; kept in 16 bits and no part of the active parameters. Each formula is
//! checked against the model transformers builds (`tests/cases/transformers`).

use serde_json::Value;

use crate::error::EstimateError;

use super::json::{Cfg, parse};

/// The tower's parameters, if the root's `model_type` names one counted here.
pub(crate) fn count(
    root: &Cfg,
    tower: &Value,
    text_hidden: u64,
) -> Result<Option<u64>, EstimateError> {
    Ok(match root.str("model_type") {
        Some("gemma3") => gemma3_siglip(root, tower, text_hidden)?,
        Some("qwen2_5_vl") => Some(qwen2_5_vl(tower)?),
        Some("qwen3_vl" | "qwen3_vl_moe") => Some(qwen3_vl(tower)?),
        Some("mistral3") => Some(pixtral(root, tower, text_hidden)?),
        _ => None,
    })
}

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

/// The tower's sizes (`keys` with their defaults), each at most 2^20, as u128.
fn sizes<const N: usize>(
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

fn fit(n: u128) -> Result<u64, EstimateError> {
    u64::try_from(n).map_err(|_| parse("vision_config: absurdly large".into()))
}

/// Qwen3-VL's vision tower (transformers' `Qwen3VLVisionModel`): a Conv3d patch
/// embedding with bias, a learned position table of `num_position_embeddings`,
/// `depth` blocks of two LayerNorms, `qkv` and `proj` with biases and a two-layer MLP
/// with biases, the merger (a LayerNorm over one patch, then `spatial_merge_size²`
/// patches through two linears with biases to `out_hidden_size`), and one such merger
/// per `deepstack_visual_indexes` entry normed over the merged patches.
// Factors at most 2^20 (see `sizes`): the u128 products stay below 2^100.
#[allow(clippy::arithmetic_side_effects)]
pub(crate) fn qwen3_vl(tower: &Value) -> Result<u64, EstimateError> {
    let [h, inter, depth, ch, patch, temporal, merge, out, positions] = sizes(
        tower,
        [
            ("hidden_size", 1152),
            ("intermediate_size", 4304),
            ("depth", 27),
            ("in_channels", 3),
            ("patch_size", 16),
            ("temporal_patch_size", 2),
            ("spatial_merge_size", 2),
            ("out_hidden_size", 3584),
            ("num_position_embeddings", 2304),
        ],
    )?;
    let deepstack = Cfg::new(tower)
        .list("deepstack_visual_indexes")
        .map_or(3, |l| l.len()) as u128;
    let embed = h * ch * temporal * patch * patch + h + positions * h;
    let block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (inter * h + inter) + (h * inter + h);
    let wide = h * merge * merge;
    let mlp = (wide * wide + wide) + (out * wide + out);
    let merger = 2 * h + mlp;
    let deep = deepstack * (2 * wide + mlp);
    fit(embed + depth * block + merger + deep)
}

/// Mistral-3's Pixtral vision tower and projector (transformers' `PixtralVisionModel`
/// and `Mistral3MultiModalProjector`): a bias-free patch convolution, `ln_pre`, layers
/// of two RMSNorms, bias-free q/k/v/o and a gated MLP; the projector's RMSNorm, the
/// patch merger (`spatial_merge_size²` patches to one) and two linears to the text
/// width, with biases under `multimodal_projector_bias`.
#[allow(clippy::arithmetic_side_effects)]
pub(crate) fn pixtral(root: &Cfg, tower: &Value, text_hidden: u64) -> Result<u64, EstimateError> {
    let [h, inter, layers, ch, patch] = sizes(
        tower,
        [
            ("hidden_size", 1024),
            ("intermediate_size", 4096),
            ("num_hidden_layers", 24),
            ("num_channels", 3),
            ("patch_size", 16),
        ],
    )?;
    let merge = u128::from(root.uint("spatial_merge_size")?.unwrap_or(2).min(1 << 20));
    let bias = u128::from(root.flag("multimodal_projector_bias") == Some(true));
    let text = u128::from(text_hidden);
    let embed = h * ch * patch * patch + h;
    let layer = 2 * h + 4 * h * h + 3 * inter * h;
    let projector =
        h + h * h * merge * merge + (text * h + bias * text) + (text * text + bias * text);
    fit(embed + layers * layer + projector)
}

/// One image as the tower takes it: (prompt tokens, pixel values), for the towers whose
/// processor fixes both; `None` otherwise. Gemma 3 without pan-and-scan (vLLM v0.19.0
/// `model_executor/models/gemma3_mm.py` `get_num_image_tokens`: (crops + 1) ×
/// `mm_tokens_per_image`, no crops by default) resizes every image to `image_size`
/// square over `num_channels`.
pub(crate) fn item(root: &Cfg, tower: &Value) -> Result<Option<(u64, u64)>, EstimateError> {
    if root.str("model_type") != Some("gemma3") {
        return Ok(None);
    }
    let t = Cfg::new(tower);
    let tokens = root.uint("mm_tokens_per_image")?.unwrap_or(256);
    let side = t.uint("image_size")?.unwrap_or(224);
    let channels = t.uint("num_channels")?.unwrap_or(3);
    let values = channels
        .checked_mul(side)
        .and_then(|v| v.checked_mul(side))
        .ok_or_else(|| parse("vision_config: absurdly large".into()))?;
    Ok(Some((tokens, values)))
}
