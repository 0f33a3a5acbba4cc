//! PaliGemma and PaliGemma 2 (transformers' PaliGemmaConfig,
//! `models/paligemma/modeling_paligemma.py`, 5.23): a Gemma or Gemma 2 language model
//! of its `text_config` (read by that model's own record) and, counted here, the
//! SigLIP vision tower of its root with the linear projector to `projection_dim`.

use serde_json::Value;

use crate::error::EstimateError;
use crate::import::config::family::{BASE, Family, TowerCount};
use crate::import::config::json::Cfg;
use crate::import::config::tower::{fit, siglip, sizes};

/// PaliGemma: only the root's record (its tower).
pub(crate) const PALIGEMMA: Family = Family {
    types: "paligemma",
    class: "PaliGemmaConfig",
    tower: Some(paligemma_tower),
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
    fit(siglip(tower)? + h * proj + proj).map(|n| Some((n, None)))
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
    /// PaliGemmaConfig's own tower defaults, `multi_modal_projector` 2 656 512.
    #[test]
    fn paligemma_counts_siglip_and_its_projector() {
        let root = serde_json::json!({"model_type": "paligemma", "projection_dim": 2304});
        let with_head = serde_json::json!({"model_type": "siglip_vision_model",
            "hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27,
            "num_attention_heads": 16, "patch_size": 14, "image_size": 448});
        let no_head = serde_json::json!({"model_type": "siglip_vision_model",
            "hidden_size": 1152, "intermediate_size": 4096, "num_hidden_layers": 27,
            "patch_size": 14, "image_size": 224, "vision_use_head": false});
        for (tower, want) in [(with_head, 428_565_440), (no_head, 399_497_472)] {
            let n = paligemma_tower(&Cfg::new(&root), &tower, 2304).unwrap();
            assert_eq!(n, Some((want + 2_656_512, None)));
        }
    }
}
