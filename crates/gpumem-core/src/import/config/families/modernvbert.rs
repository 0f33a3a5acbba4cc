//! ModernVBERT (`modernvbert`, ModernVBertConfig; transformers 5.23
//! `models/modernvbert/modeling_modernvbert.py`): a ModernBERT encoder of its
//! `text_config` (read by that model's own record, as `AutoModel` builds it: no
//! masked-LM head) and, counted here, what `ModernVBertModel.__init__` builds beside
//! it: `vision_model`, the SigLIP tower of `vision_config` (`AutoModel.from_config`:
//! a `SiglipVisionModel`, its pooling head included when the config keeps it), and
//! `connector` (`ModernVBertConnector`): a pixel shuffle that folds
//! `pixel_shuffle_factor`² neighbouring patches into one token, then
//! `modality_projection`, a bias-free Linear [vision hidden × factor² → text hidden].
//!
//! Its image tokens are placeholders in the prompt's ids (`image_token_id`, which
//! `ModernVBertModel.forward` overwrites with `masked_scatter`): they are part of the
//! context given, not added to it.

use serde_json::Value;

use crate::error::EstimateError;
use crate::import::config::family::{BASE, Family, TowerCount};
use crate::import::config::json::Cfg;
use crate::import::config::tower::{fit, siglip, sizes};

/// ModernVBERT: only the root's record (its tower); the text is ModernBERT's.
pub(crate) const MODERNVBERT: Family = Family {
    types: "modernvbert",
    class: "ModernVBertConfig",
    tower: Some(modernvbert_tower),
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&MODERNVBERT];

/// The SigLIP tower and the connector's projection; one image tile is
/// `ModernVBertModel.image_seq_len` tokens, `int((image_size // patch_size)² /
/// pixel_shuffle_factor²)`, of `num_channels × image_size²` pixel values (the
/// processor, Idefics3's, cuts a larger image into tiles of that size and adds a
/// global one: each takes as many). `None` for another tower.
#[allow(clippy::arithmetic_side_effects)]
fn modernvbert_tower(
    root: &Cfg,
    tower: &Value,
    text_hidden: u64,
) -> Result<Option<TowerCount>, EstimateError> {
    if tower.get("model_type").and_then(Value::as_str) != Some("siglip_vision_model") {
        return Ok(None);
    }
    let [h, ch, image, patch] = sizes(
        tower,
        [
            ("hidden_size", 768),
            ("num_channels", 3),
            ("image_size", 224),
            ("patch_size", 16),
        ],
    )?;
    // ModernVBertConfig's default factor is 4; bounded as the tower's sizes are.
    let factor = u128::from(root.uint("pixel_shuffle_factor")?.unwrap_or(4).min(1 << 10));
    let projection = h * factor * factor * u128::from(text_hidden);
    let side = image.checked_div(patch).unwrap_or(0);
    let tokens = (side * side).checked_div(factor * factor).unwrap_or(0);
    let item = (fit(tokens)?, fit(ch * image * image)?);
    Ok(Some((fit(siglip(tower)? + projection)?, Some(item))))
}

#[cfg(test)]
mod tests {
    use crate::import::config::{ImportedConfig, parse_config};

    /// A transformers case's config read, the parameters its tensors hold, and the
    /// case's own count.
    fn read(case: &str) -> (ImportedConfig, u64, Option<u64>) {
        let doc: serde_json::Value = serde_json::from_str(case).expect("fixture");
        let c = parse_config(&doc["config"].to_string()).expect("config");
        let ours = c
            .arch
            .tensors()
            .expect("tensors")
            .iter()
            .map(|t| t.params().expect("count"))
            .sum();
        (c, ours, doc["parameters"].as_u64())
    }

    /// ModernVBertConfig's defaults (a 22-layer, 768-wide ModernBERT, SigLIP
    /// ViT-B/16 at 224 with its pooling head, a factor-4 shuffle), against
    /// `ModernVBertModel` as transformers 5.23 builds it on the meta device:
    /// 251 335 680 parameters, of which `vision_model` 92 884 224 and `connector`
    /// 9 437 184 (768 × 16 × 768); one tile is int(196 / 16) = 12 tokens.
    #[test]
    fn modernvbert_counts_siglip_and_its_connector() {
        let (c, ours, truth) = read(include_str!(
            "../../../../tests/cases/transformers/modernvbert.json"
        ));
        assert_eq!((ours, truth), (251_335_680, Some(251_335_680)));
        assert_eq!(c.arch.tower_params, 92_884_224 + 9_437_184);
        assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
        assert_eq!(c.mm_item, Some((12, 3 * 224 * 224)));
    }

    /// The published layout as vLLM's `ColModernVBertConfig` spells it out
    /// (vllm-project/vllm 029329a8eded, `vllm/transformers_utils/configs/colmodernvbert.py`:
    /// SigLIP at 512 pixels, patch 16; ModernBERT with `additional_vocab_size` 40 more
    /// token rows, 50 408), against
    /// transformers 5.23's `ModernVBertModel` on meta: 252 002 304 parameters; a tile
    /// is (512 / 16)² / 4² = 64 tokens, `ColModernVBertConfig.image_seq_len`.
    #[test]
    fn a_512_pixel_tile_is_64_tokens() {
        let (c, ours, truth) = read(include_str!(
            "../../../../tests/cases/transformers/modernvbert-512.json"
        ));
        assert_eq!((ours, truth), (252_002_304, Some(252_002_304)));
        assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
        assert_eq!(c.mm_item, Some((64, 3 * 512 * 512)));
    }
}
