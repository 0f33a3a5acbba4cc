//! Llama 3.2 Vision (MllamaConfig; transformers 5.23 `models/mllama/modeling_mllama.py`):
//! a Llama decoder some of whose layers cross-attend to the image's vision states
//! instead of attending to the text, and a two-stage vision tower.
//!
//! | mechanism | transformers (5.23, `modeling_mllama.py`) | here |
//! |---|---|---|
//! | `cross_attention_layers`: q/k/v/o as self-attention, `q_norm`/`k_norm` over one head, `cross_attn_attn_gate`, `cross_attn_mlp_gate` | `MllamaCrossAttentionDecoderLayer`, `MllamaTextCrossAttention` | `cross-layers` |
//! | their cache: K and V over `max_num_tiles × ((image_size / patch_size)² + 1)` vision tokens per image, none over the text | `MllamaTextCrossAttention.forward`, `MllamaForConditionalGeneration._prepare_static_cache` | `cross-tokens` (one image), the `kv_cache.cross` line |
//! | `embed_tokens` of `vocab_size + 8` rows, the lm_head of `vocab_size` | `MllamaTextModel`, `MllamaForConditionalGeneration` | `embedding-extra-rows` = 8 |
//! | patch convolution without bias, class embedding, gated position and tile-position embeddings, pre/post LayerNorms | `MllamaVisionModel`, `MllamaPrecomputedPositionEmbedding`, `MllamaPrecomputedAspectRatioEmbedding` | [`tower`] |
//! | `num_hidden_layers` local and `num_global_layers` gated encoder layers: q/k/v/o without bias, fc1/fc2 with bias, two LayerNorms (the global ones two scalar gates more) | `MllamaVisionEncoderLayer` | [`tower`] |
//! | projector `vision_output_dim → hidden` with bias | `MllamaModel.multi_modal_projector` | [`tower`] |

use serde_json::Value;

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family, TowerCount};
use crate::import::config::json::{Cfg, parse, shown};
use crate::import::config::tower::{fit, sizes};

/// Rows MllamaTextModel's `embed_tokens` has beyond the vocabulary.
const EXTRA_ROWS: u64 = 8;

/// Llama 3.2 Vision (11B, 90B) and its text model.
pub(crate) const MLLAMA: Family = Family {
    types: "mllama mllama_text_model",
    class: "MllamaTextConfig",
    arch: Architecture {
        extra_embedding_rows: EXTRA_ROWS,
        ..Architecture::BASE
    },
    hook: Some(text),
    tower: Some(tower),
    root_hook: Some(vision_tokens),
    ..BASE
};

/// The cross-attention layers (`cross_attention_layers`, indices of the decoder's
/// layers; MllamaTextConfig's default is none).
fn text(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let layers = d.arch.layers;
    let mut seen: Vec<u64> = Vec::new();
    match c.get("cross_attention_layers") {
        None | Some(Value::Null) => d.notes.push(
            "cross_attention_layers absent: no cross-attention layer (MllamaTextConfig's default)"
                .into(),
        ),
        Some(Value::Array(list)) => {
            for x in list {
                let i = x.as_u64().filter(|i| *i < layers).ok_or_else(|| {
                    parse(format!(
                        "cross_attention_layers: {} is not a layer index below num_hidden_layers ({layers})",
                        shown(x)
                    ))
                })?;
                if !seen.contains(&i) {
                    seen.push(i);
                }
            }
        }
        Some(x) => {
            return Err(parse(format!(
                "cross_attention_layers should be a list of layer indices, found {}",
                shown(x)
            )));
        }
    }
    d.arch.cross_layers = seen.len() as u64;
    // The attention's dropout (MllamaTextSelfAttention, MllamaTextCrossAttention):
    // a mask kept for the backward when above 0 in training.
    if c.get("dropout")
        .and_then(Value::as_f64)
        .is_some_and(|p| p > 0.0)
    {
        d.arch.dropout = true;
    }
    Ok(())
}

/// One image's vision tokens, which the cross-attention layers keep K and V of:
/// `max_num_tiles × ((image_size / patch_size)² + 1)` (MllamaVisionConfig's defaults
/// 4, 448, 14).
fn vision_tokens(root: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let Some(v) = root.get("vision_config").filter(|v| v.is_object()) else {
        if d.arch.cross_layers > 0 {
            d.warnings.push(
                "no vision_config: the cross-attention layers' cache over an image's vision tokens is not counted (give cross-tokens)"
                    .into(),
            );
        }
        return Ok(());
    };
    let [tiles, image, patch] = sizes(
        v,
        [
            ("max_num_tiles", 4),
            ("image_size", 448),
            ("patch_size", 14),
        ],
    )?;
    let side = image.checked_div(patch).unwrap_or(0);
    // Sizes at most 2^20 (checked by `sizes`): the product stays below 2^61.
    #[allow(clippy::arithmetic_side_effects)]
    let tokens = tiles * (side * side + 1);
    d.arch.cross_tokens = fit(tokens)?;
    Ok(())
}

/// Parameters of `MllamaVisionModel` and the projector; `None` never (every size has
/// MllamaVisionConfig's default).
#[allow(clippy::arithmetic_side_effects)]
fn tower(_root: &Cfg, v: &Value, text_hidden: u64) -> Result<Option<TowerCount>, EstimateError> {
    let [h, inter, layers, global, ch, image, patch, tiles, out] = sizes(
        v,
        [
            ("hidden_size", 1280),
            ("intermediate_size", 5120),
            ("num_hidden_layers", 32),
            ("num_global_layers", 8),
            ("num_channels", 3),
            ("image_size", 448),
            ("patch_size", 14),
            ("max_num_tiles", 4),
            ("vision_output_dim", 7680),
        ],
    )?;
    // max_aspect_ratio_id = len(supported_aspect_ratios) (8 by default); the
    // embeddings have one row more.
    let ratios = match v.get("supported_aspect_ratios") {
        None | Some(Value::Null) => 8,
        Some(Value::Array(list)) if list.len() <= 1 << 10 => list.len() as u128,
        Some(x) => {
            return Err(parse(format!(
                "vision_config.supported_aspect_ratios should be a list, found {}",
                shown(x)
            )));
        }
    };
    let rows = ratios + 1;
    let side = image.checked_div(patch).unwrap_or(0);
    let patches = side * side + 1;
    let embed = h * ch * patch * patch + h;
    // The position embedding and its tile embedding with a gate; the pre- and
    // post-tile embeddings with a gate each.
    let positions = 1 + patches * h + rows * tiles * patches * h;
    let tile = 2 * (rows * tiles * h + 1);
    let layer = 4 * h * h + 2 * h * inter + inter + h + 4 * h;
    let encoders = layers * layer + global * (layer + 2);
    let projector = out * u128::from(text_hidden) + u128::from(text_hidden);
    let n = embed + positions + tile + 4 * h + encoders + projector;
    Ok(Some((fit(n)?, None)))
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&MLLAMA];
