//! GOT-OCR 2.0 (GotOcr2Config; transformers 5.23 `models/got_ocr2/modeling_got_ocr2.py`):
//! a Qwen2 language model (its `text_config`, read by the Qwen2 record) fed by a
//! SAM-style windowed ViT, a convolutional neck and a convolutional projector.
//!
//! | part | transformers (5.23, `modeling_got_ocr2.py`) | parameters |
//! |---|---|---|
//! | patch convolution with bias; absolute positions (image / patch)² × hidden under `use_abs_pos` | `GotOcr2PatchEmbeddings`, `GotOcr2VisionEncoder.pos_embed` | h·c·p² + h + s²·h |
//! | per layer: two LayerNorms, fused `qkv` (bias under `qkv_bias`), `proj` with bias, MLP `lin1`/`lin2` with biases | `GotOcr2VisionLayer`, `GotOcr2VisionAttention`, `GotOcr2MLPBlock` | 4h + 3h² (+3h) + h² + h + 2h·m + m + h |
//! | relative positions under `use_rel_pos`: `rel_pos_h`, `rel_pos_w` of (2·n − 1) × head dim, n the window (`window_size`) or, in `global_attn_indexes`, the whole side | `GotOcr2VisionAttention` | 2·(2n − 1)·h/heads |
//! | neck: 1×1 conv to `output_channels`, 3×3 conv, two channel LayerNorms with bias, no conv bias | `GotOcr2VisionNeck` | o·h + o·o·9 + 4o |
//! | projector: two stride-2 3×3 convs without bias (o → 2o → text hidden), a linear with bias | `GotOcr2MultiModalProjector` | 2o·o·9 + T·2o·9 + T² + T |

use serde_json::Value;

use crate::error::EstimateError;
use crate::import::config::family::{BASE, Family, TowerCount};
use crate::import::config::json::{Cfg, parse};
use crate::import::config::tower::{fit, sizes};

/// GOT-OCR 2.0's wrapper: its language model is read by its own record (`qwen2`).
pub(crate) const GOT_OCR2: Family = Family {
    types: "got_ocr2",
    class: "GotOcr2Config",
    tower: Some(tower),
    ..BASE
};

#[allow(clippy::arithmetic_side_effects)]
fn tower(root: &Cfg, v: &Value, text_hidden: u64) -> Result<Option<TowerCount>, EstimateError> {
    // How many image tokens the processor writes: no tensor (the projector's output
    // decides what the language model reads).
    root.touch(&["image_seq_length"]);
    if v.get("model_type").and_then(Value::as_str) != Some("got_ocr2_vision") {
        return Ok(None);
    }
    let [h, layers, heads, ch, image, patch, mlp, out, window] = sizes(
        v,
        [
            ("hidden_size", 768),
            ("num_hidden_layers", 12),
            ("num_attention_heads", 12),
            ("num_channels", 3),
            ("image_size", 1024),
            ("patch_size", 16),
            ("mlp_dim", 3072),
            ("output_channels", 256),
            ("window_size", 14),
        ],
    )?;
    let on = |k: &str| v.get(k).and_then(Value::as_bool) != Some(false);
    let global: Vec<u64> = match v.get("global_attn_indexes") {
        None | Some(Value::Null) => vec![2, 5, 8, 11],
        Some(Value::Array(l)) => l.iter().filter_map(Value::as_u64).collect(),
        Some(_) => {
            return Err(parse(
                "vision_config.global_attn_indexes should be a list of layer indices".into(),
            ));
        }
    };
    let side = image.checked_div(patch).unwrap_or(0);
    let hd = h.checked_div(heads).unwrap_or(0);
    let mut n = h * ch * patch * patch + h;
    if on("use_abs_pos") {
        n += side * side * h;
    }
    let qkv_bias = if on("qkv_bias") { 3 * h } else { 0 };
    let layer = 4 * h + 3 * h * h + qkv_bias + h * h + h + 2 * h * mlp + mlp + h;
    for i in 0..layers {
        n += layer;
        if on("use_rel_pos") {
            let span = if global.iter().any(|g| u128::from(*g) == i) {
                side
            } else {
                window
            };
            n += 2 * (2 * span).saturating_sub(1) * hd;
        }
    }
    n += out * h + out * out * 9 + 4 * out;
    let t = u128::from(text_hidden);
    n += 2 * out * out * 9 + t * 2 * out * 9 + t * t + t;
    Ok(Some((fit(n)?, None)))
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&GOT_OCR2];
