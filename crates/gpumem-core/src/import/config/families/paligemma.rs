//! PaliGemma and PaliGemma 2 (transformers' PaliGemmaConfig,
//! `models/paligemma/modeling_paligemma.py`, 5.23): a Gemma or Gemma 2 language model
//! of its `text_config` (read by that model's own record) and, counted here, the
//! SigLIP vision tower of its root with the linear projector to `projection_dim`.

use serde_json::Value;

use crate::arch::VisionTower;
use crate::error::EstimateError;
use crate::import::config::families::gemma::siglip_vision;
use crate::import::config::family::{BASE, Family, TowerCount};
use crate::import::config::json::{Cfg, parse};
use crate::import::config::tower::{fit, siglip, sizes};

/// PaliGemma: only the root's record (its tower).
pub(crate) const PALIGEMMA: Family = Family {
    types: "paligemma",
    class: "PaliGemmaConfig",
    tower: Some(paligemma_tower),
    vision: Some(paligemma_vision),
    ..BASE
};

/// The SigLIP tower (its pooling head when the config keeps it) and
/// `PaliGemmaMultiModalProjector`'s linear with its bias, [vision → `projection_dim`]
/// (PaliGemmaConfig's default 2048); `None` for another tower.
#[allow(clippy::arithmetic_side_effects)]
fn paligemma_tower(
    root: &Cfg,
    tower: &Value,
    _text_hidden: u64,
) -> Result<Option<TowerCount>, EstimateError> {
    if root.str("model_type") != Some("paligemma")
        || tower.get("model_type").and_then(Value::as_str) != Some("siglip_vision_model")
    {
        return Ok(None);
    }
    // The root's copies of the text model's sizes change nothing the text config
    // does not already say.
    root.touch(&["hidden_size", "vocab_size"]);
    let [h] = sizes(tower, [("hidden_size", 768)])?;
    let proj = u128::from(root.uint("projection_dim")?.unwrap_or(2048).min(1 << 20));
    let n = fit(siglip(tower)? + h * proj + proj)?;
    Ok(Some((n, paligemma_item(tower)?)))
}

/// One image as PaliGemma's processor hands it over: resized to the tower's
/// `image_size` square (transformers 5.23 `PaliGemmaProcessor`, its
/// `SiglipImageProcessor` at the checkpoint's size) over `num_channels`, and
/// (image_size ÷ patch_size)² prompt tokens (`PaliGemmaConfig.__post_init__`:
/// `num_image_tokens`; vLLM v0.19.0 `model_executor/models/paligemma.py` sizes its
/// dummy image and the encoder's tokens the same way). `None` for a tower whose
/// forward is not derived.
fn paligemma_item(tower: &Value) -> Result<Option<(u64, u64)>, EstimateError> {
    let Some(v) = siglip_vision(tower)? else {
        return Ok(None);
    };
    let side = v.image.checked_div(v.patch).unwrap_or(0);
    let tokens = side.checked_mul(side);
    let values = v
        .channels
        .checked_mul(v.image)
        .and_then(|x| x.checked_mul(v.image));
    match (tokens, values) {
        (Some(t), Some(x)) if t > 0 => Ok(Some((t, x))),
        (Some(_), Some(_)) => Ok(None),
        _ => Err(parse("vision_config: image_size absurdly large".into())),
    }
}

/// The SigLIP tower as its forward is derived (`estimate::tower`, read by
/// [`siglip_vision`]) with `PaliGemmaMultiModalProjector`'s linear to
/// `projection_dim` over every patch (PaliGemmaConfig's default 2048): transformers
/// 5.23 `PaliGemmaModel.get_image_features` projects the tower's
/// `last_hidden_state` whole, (image_size ÷ patch_size)² tokens an image
/// (`PaliGemmaConfig.__post_init__`: `num_image_tokens`).
fn paligemma_vision(root: &Cfg, tower: &Value) -> Result<Option<VisionTower>, EstimateError> {
    if root.str("model_type") != Some("paligemma") {
        return Ok(None);
    }
    let out = root.uint("projection_dim")?.unwrap_or(2048);
    Ok(siglip_vision(tower)?.map(|v| VisionTower { out, ..v }))
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&PALIGEMMA];

#[cfg(test)]
mod tests {
    use super::*;

    /// PaliGemma 2 at 448 pixels (SigLIP So400m/14) into a 2304-wide Gemma 2, against
    /// transformers 5.23's `PaliGemmaForConditionalGeneration` on the meta device:
    /// `vision_tower` 428 565 440 with its pooling head (the SiglipVisionConfig default
    /// when the config does not say), 399 497 472 less it at 224 pixels with
    /// PaliGemmaConfig's own tower defaults, `multi_modal_projector` 2 656 512. The
    /// headless tower's image: (224 ÷ 14)² = 256 tokens, 3 × 224² pixel values (a
    /// tower with its head has no derived forward, so no image of its own).
    #[test]
    fn paligemma_counts_siglip_and_its_projector() {
        let root = serde_json::json!({"model_type": "paligemma", "projection_dim": 2304});
        let with_head = serde_json::json!({"model_type": "siglip_vision_model",
            "hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27,
            "num_attention_heads": 16, "patch_size": 14, "image_size": 448});
        let no_head = serde_json::json!({"model_type": "siglip_vision_model",
            "hidden_size": 1152, "intermediate_size": 4096, "num_hidden_layers": 27,
            "patch_size": 14, "image_size": 224, "vision_use_head": false});
        for (tower, want, item) in [
            (with_head, 428_565_440, None),
            (no_head, 399_497_472, Some((256, 150_528))),
        ] {
            let n = paligemma_tower(&Cfg::new(&root), &tower, 2304).unwrap();
            assert_eq!(n, Some((want + 2_656_512, item)));
        }
    }

    /// The tower's shape for its forward: SigLIP without its pooling head, the image
    /// side and the projector's width from the config; a head is not derived.
    #[test]
    fn paligemmas_tower_shape_is_read() {
        let root = serde_json::json!({"model_type": "paligemma", "projection_dim": 2304});
        let tower = serde_json::json!({"model_type": "siglip_vision_model",
            "hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27,
            "num_attention_heads": 16, "patch_size": 14, "image_size": 448,
            "vision_use_head": false});
        let t = paligemma_vision(&Cfg::new(&root), &tower).unwrap().unwrap();
        assert_eq!(
            (
                t.hidden,
                t.layers,
                t.heads,
                t.intermediate,
                t.patch,
                t.image,
                t.out,
                t.merge
            ),
            (1152, 27, 16, 4304, 14, 448, 2304, 0)
        );
        let mut head = tower.clone();
        head["vision_use_head"] = serde_json::json!(true);
        assert_eq!(paligemma_vision(&Cfg::new(&root), &head).unwrap(), None);
        let gemma3 = serde_json::json!({"model_type": "gemma3"});
        assert_eq!(paligemma_vision(&Cfg::new(&gemma3), &tower).unwrap(), None);
    }
}
