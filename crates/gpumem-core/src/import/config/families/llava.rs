//! LLaVA (transformers' LlavaConfig) and LLaVA-NeXT (LlavaNextConfig): a language
//! model of its `text_config` (read by that model's own record) and, counted here, the
//! CLIP vision tower of its root with the two-layer projector that feeds the language
//! model (`models/llava/modeling_llava.py`, `models/llava_next/modeling_llava_next.py`,
//! transformers 5.23).

use serde_json::Value;

use crate::error::EstimateError;
use crate::import::config::family::{BASE, Family, TowerCount};
use crate::import::config::json::Cfg;
use crate::import::config::tower::{fit, sizes, vit_layer};

/// LLaVA and LLaVA-NeXT: only the root's record (its tower); the text model is read by
/// the record of `text_config`'s `model_type`.
pub(crate) const LLAVA: Family = Family {
    types: "llava llava_next",
    class: "LlavaConfig",
    tower: Some(llava_tower),
    ..BASE
};

/// The CLIP tower and projector of a LLaVA root; `None` for another tower (SigLIP
/// LLaVA variants are named in a warning).
fn llava_tower(
    root: &Cfg,
    tower: &Value,
    text_hidden: u64,
) -> Result<Option<TowerCount>, EstimateError> {
    let root_type = root.str("model_type");
    if !matches!(root_type, Some("llava" | "llava_next"))
        || tower.get("model_type").and_then(Value::as_str) != Some("clip_vision_model")
    {
        return Ok(None);
    }
    // Which features the projector takes and how images are tiled change the image's
    // tokens, not the tensors (`vision_feature_layer` is read below).
    root.touch(&[
        "vision_feature_select_strategy",
        "image_seq_length",
        "image_grid_pinpoints",
    ]);
    // LlavaMultiModalProjector: linear_1 takes the tower's width once per feature
    // layer (`vision_feature_layer` an int or a list).
    let feature_layers = root
        .get("vision_feature_layer")
        .and_then(Value::as_array)
        .map_or(1, |l| l.len().max(1));
    let bias = root.flag("multimodal_projector_bias") != Some(false);
    let newline = root_type == Some("llava_next");
    clip(tower, text_hidden, feature_layers, bias, newline).map(|n| Some((n, None)))
}

/// transformers' `CLIPVisionModel` (`models/clip/modeling_clip.py`): a bias-free patch
/// convolution, the class embedding, (patches + 1) learned positions, `pre_layrnorm`,
/// layers of two LayerNorms, q/k/v/out and fc1/fc2 with biases, `post_layernorm`
/// (every LayerNorm with its bias; `position_ids` is not persistent). The projector:
/// `linear_1` [vision × feature layers → text] and `linear_2` [text → text], with
/// biases unless `multimodal_projector_bias` is false; LLaVA-NeXT adds
/// `image_newline` [text].
#[allow(clippy::arithmetic_side_effects)]
fn clip(
    tower: &Value,
    text_hidden: u64,
    feature_layers: usize,
    bias: bool,
    newline: bool,
) -> Result<u64, EstimateError> {
    // CLIPVisionConfig's defaults where the config is silent.
    let [h, inter, layers, ch, image, patch] = sizes(
        tower,
        [
            ("hidden_size", 768),
            ("intermediate_size", 3072),
            ("num_hidden_layers", 12),
            ("num_channels", 3),
            ("image_size", 224),
            ("patch_size", 32),
        ],
    )?;
    let side = image.checked_div(patch).unwrap_or(0);
    let text = u128::from(text_hidden);
    let k = u128::try_from(feature_layers)
        .unwrap_or(u128::MAX)
        .min(1 << 20);
    let b = u128::from(bias);
    let embed = h + ch * patch * patch * h + (side * side + 1) * h + 2 * h;
    let layer = vit_layer(h, inter);
    let projector = h * k * text + b * text + text * text + b * text + u128::from(newline) * text;
    fit(embed + layers * layer + 2 * h + projector)
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&LLAVA];

#[cfg(test)]
mod tests {
    use super::*;

    /// llava-hf/llava-1.5-7b-hf's tower (CLIP ViT-L/14 at 336) and projector into a
    /// 4096-wide Llama, against transformers 5.23's `LlavaForConditionalGeneration`
    /// built on the meta device: `model.vision_tower` 303 507 456 and
    /// `model.multi_modal_projector` 20 979 712 parameters; LLaVA-NeXT one
    /// `image_newline` more.
    #[test]
    fn llava_counts_clip_and_its_projector() {
        let tower = serde_json::json!({"model_type": "clip_vision_model", "hidden_size": 1024,
            "intermediate_size": 4096, "num_hidden_layers": 24, "image_size": 336,
            "patch_size": 14});
        for (root, want) in [
            ("llava", 303_507_456 + 20_979_712),
            ("llava_next", 303_507_456 + 20_979_712 + 4096),
        ] {
            let root = serde_json::json!({"model_type": root});
            let n = llava_tower(&Cfg::new(&root), &tower, 4096).unwrap();
            assert_eq!(n, Some((want, None)));
        }
        let siglip = serde_json::json!({"model_type": "siglip_vision_model"});
        let root = serde_json::json!({"model_type": "llava"});
        assert_eq!(llava_tower(&Cfg::new(&root), &siglip, 4096).unwrap(), None);
    }
}
