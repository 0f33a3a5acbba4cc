//! Llama, Mistral and Mixtral (transformers' LlamaConfig, MistralConfig,
//! MixtralConfig: the generic decoder itself), and Llama-4 (Llama4TextConfig): its
//! MoE layers hold one shared expert beside the routed ones, and its RoPE layers
//! attend within chunks.

use serde_json::Value;

use crate::arch::VisionTower;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;
use crate::import::config::tower::{axial_rope_bytes, fit, head_width, sizes, vit_layer};

/// Llama, Mistral, Mixtral, and what transformers 5.23 builds with their modules:
/// Ministral-3's text model (`ministral3`, `models/ministral3/modeling_ministral3.py`,
/// Mistral's; its multimodal root is `mistral3`), IQuest-Coder (`iquestcoder`, a
/// LlamaConfig built as Llama).
pub(crate) const LLAMA: Family = Family {
    types: "llama mistral mixtral ministral3 iquestcoder",
    class: "LlamaConfig",
    ..BASE
};

/// Meta's CWM (`cwm`, CwmConfig; transformers 5.23 `models/cwm/modeling_cwm.py`):
/// Llama's layers with bias-free attention, a window of `sliding_window` (8192 when
/// absent) in the layers `layer_types` lists as sliding — when it lists none, every
/// layer but each fourth from the first (`CwmConfig.__post_init__`).
pub(crate) const CWM: Family = Family {
    types: "cwm",
    class: "CwmConfig",
    hook: Some(cwm),
    ..BASE
};

fn cwm(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    // Absent, the class's 8192; null, no window.
    if c.get("sliding_window").is_none() {
        d.window = Some(8192);
        d.notes
            .push("sliding_window absent: 8192 assumed (CwmConfig's default)".into());
    }
    if d.window.is_some() && c.list("layer_types").is_none() {
        let layers = d.arch.layers;
        // Full at i % 4 == 0: ⌈layers / 4⌉ of them.
        let full = layers.saturating_add(3).checked_div(4).unwrap_or(0);
        d.sliding_layers = Some(layers.saturating_sub(full));
        d.notes.push(
            "layer_types absent: every fourth layer from the first full, the others sliding (CwmConfig's pattern)"
                .into(),
        );
    }
    Ok(())
}

/// Mistral-3 (Mistral3ForConditionalGeneration): the Mistral language model of its
/// `text_config` and the Pixtral vision tower of its root.
pub(crate) const MISTRAL3: Family = Family {
    types: "mistral3",
    tower: Some(|root, tower, hidden| Ok(Some((pixtral(root, tower, hidden)?, None)))),
    // PixtralVisionModel.patch_positional_embedding (`models/pixtral/modeling_pixtral.py`,
    // `PixtralVisionRotaryEmbedding`: over the head), PixtralVisionConfig's
    // hidden_size 1024, num_attention_heads 16.
    tower_rope: Some(|t| {
        Ok(axial_rope_bytes(head_width(
            t,
            1024,
            "num_attention_heads",
            16,
        )?))
    }),
    ..LLAMA
};

/// Llama-4's text model (and the multimodal `llama4`, whose vision tower is counted).
pub(crate) const LLAMA4: Family = Family {
    types: "llama4 llama4_text",
    class: "Llama4TextConfig",
    hook: Some(llama4),
    tower: Some(|root, tower, hidden| Ok(llama4_vision(root, tower, hidden)?.map(|n| (n, None)))),
    tower_rope: Some(llama4_vision_rope),
    vision: Some(llama4_vision_shape),
    // Llama4TextL2Norm has no weight; attention temperature constants.
    inert: "use_qk_norm attn_temperature_tuning attn_scale floor_scale",
    // transformers 5.23 writes the RoPE layers as chunked_attention
    // (Llama4TextConfig.__post_init__, from no_rope_layers).
    layer_types: "chunked_attention",
    ..BASE
};

/// Llama-4: the routed experts and the one shared expert are `intermediate_size`
/// wide (the dense layers `intermediate_size_mlp`); RoPE layers attend within
/// chunks of `attention_chunk_size` (each keeps at most one chunk of tokens), every
/// `no_rope_layer_interval`-th layer is a global NoPE layer.
fn llama4(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    if let Some(dense) = c.uint("intermediate_size_mlp")? {
        d.arch.intermediate = dense;
    }
    let layers = d.arch.layers;
    if let Some(m) = d.arch.moe.as_mut() {
        let width = c.need(&["intermediate_size"])?;
        m.expert_intermediate = width;
        m.shared_experts = 1;
        m.shared_intermediate = width;
        // Llama4TextMoe.forward repeats the input for every expert, weighed by the
        // router's sigmoid scores, and Llama4TextExperts.forward runs one bmm over all.
        m.dense_dispatch = true;
        // transformers 5.23 lists the MoE layers' indices (Llama4TextDecoderLayer:
        // `layer_idx in config.moe_layers`); only their count matters.
        if let Some(list) = c.list("moe_layers") {
            let mut moe: Vec<u64> = list
                .iter()
                .filter_map(Value::as_u64)
                .filter(|i| *i < layers)
                .collect();
            moe.sort_unstable();
            moe.dedup();
            m.every = 1;
            m.dense_layers = layers.saturating_sub(moe.len() as u64);
        }
    }
    let Some(chunk) = c.uint("attention_chunk_size")? else {
        return Ok(());
    };
    // layer_types, when written, names the same layers.
    let listed = c.count_of("layer_types", "chunked_attention");
    let rope_layers = match (listed, c.list("no_rope_layers")) {
        (Some(n), _) => {
            // The interval that built the list.
            c.touch(&["no_rope_layer_interval"]);
            n
        }
        (None, Some(l)) if !l.is_empty() => {
            l.iter().filter(|x| x.as_u64() == Some(1)).count() as u64
        }
        _ => {
            let every = c.uint("no_rope_layer_interval")?.unwrap_or(4).max(1);
            layers.saturating_sub(layers.checked_div(every).unwrap_or(0))
        }
    };
    d.notes.push(format!(
        "attention_chunk_size = {chunk}: {rope_layers} chunked-attention layers keep at most {chunk} tokens (counted as a window)"
    ));
    d.window = Some(chunk);
    d.sliding_layers = Some(rope_layers);
    Ok(())
}

/// Mistral-3's Pixtral vision tower and projector (transformers' `PixtralVisionModel`
/// and `Mistral3MultiModalProjector`): a bias-free patch convolution, `ln_pre`, layers
/// of two RMSNorms, bias-free q/k/v/o and a gated MLP; the projector's RMSNorm, the
/// patch merger (`spatial_merge_size²` patches to one) and two linears to the text
/// width, with biases under `multimodal_projector_bias`.
#[allow(clippy::arithmetic_side_effects)]
fn pixtral(root: &Cfg, tower: &Value, text_hidden: u64) -> Result<u64, EstimateError> {
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

/// Bytes of Llama-4's vision rotary table (transformers 5.23
/// `models/llama4/modeling_llama4.py`, `Llama4VisionRotaryEmbedding._compute_freqs_ci`:
/// `freqs_ci`, a non-persistent complex64 buffer of `[patches + 1, 1, 2 × (f ÷ 2)]`,
/// `f = hidden ÷ heads ÷ 2`, patches = (image ÷ patch)²).
#[allow(clippy::arithmetic_side_effects)]
fn llama4_vision_rope(tower: &Value) -> Result<u64, EstimateError> {
    let [h, heads, image, patch] = sizes(
        tower,
        [
            ("hidden_size", 768),
            ("num_attention_heads", 16),
            ("image_size", 448),
            ("patch_size", 14),
        ],
    )?;
    let side = image.checked_div(patch).unwrap_or(0);
    let freq = h.checked_div(heads).unwrap_or(0) / 2;
    fit((side * side + 1) * (freq / 2 * 2) * 8)
}

/// Llama-4's vision tower, adapter and projector (transformers 5.23
/// `models/llama4/modeling_llama4.py`): `Llama4UnfoldConvolution`'s bias-free linear
/// over channels × patch² values, the class embedding and (patches + 1) learned
/// positions, `layernorm_pre` and `layernorm_post`, layers of two LayerNorms, q/k/v/o
/// and fc1/fc2 with biases; `Llama4VisionPixelShuffleMLP`'s two bias-free linears
/// (intermediate → `projector_input_dim`, `projector_output_dim` square) and
/// `Llama4MultiModalProjector`'s bias-free `vision_output_dim` → text width. `None`
/// for another tower.
#[allow(clippy::arithmetic_side_effects)]
fn llama4_vision(
    root: &Cfg,
    tower: &Value,
    text_hidden: u64,
) -> Result<Option<u64>, EstimateError> {
    if root.str("model_type") != Some("llama4")
        || tower.get("model_type").and_then(Value::as_str) != Some("llama4_vision_model")
    {
        return Ok(None);
    }
    // Llama4VisionConfig's defaults where the config is silent.
    let [h, inter, layers, ch, image, patch] = sizes(
        tower,
        [
            ("hidden_size", 768),
            ("intermediate_size", 5632),
            ("num_hidden_layers", 34),
            ("num_channels", 3),
            ("image_size", 448),
            ("patch_size", 14),
        ],
    )?;
    let [proj_in, proj_out, out] = sizes(
        tower,
        [
            ("projector_input_dim", 4096),
            ("projector_output_dim", 4096),
            ("vision_output_dim", 7680),
        ],
    )?;
    let side = image.checked_div(patch).unwrap_or(0);
    let embed = ch * patch * patch * h + h + (side * side + 1) * h + 4 * h;
    let layer = vit_layer(h, inter);
    let adapter = inter * proj_in + proj_out * proj_out;
    let projector = out * u128::from(text_hidden);
    fit(embed + layers * layer + adapter + projector).map(Some)
}

/// Llama-4's tower as its forward is derived (`estimate::tower`): tiles `image_size`
/// square of `patch_size` patches and a class token, pixel-shuffled by
/// `pixel_shuffle_ratio` (0.5, 0.25 or 1: merge 2, 4 or 1 a side; another ratio is not
/// derived) to `projector_output_dim`. Missing sizes are Llama4VisionConfig's defaults.
fn llama4_vision_shape(root: &Cfg, tower: &Value) -> Result<Option<VisionTower>, EstimateError> {
    if root.str("model_type") != Some("llama4")
        || tower.get("model_type").and_then(Value::as_str) != Some("llama4_vision_model")
    {
        return Ok(None);
    }
    let ratio = tower
        .get("pixel_shuffle_ratio")
        .and_then(Value::as_f64)
        .unwrap_or(0.5);
    let merge = if ratio == 0.5 {
        2
    } else if ratio == 0.25 {
        4
    } else if ratio == 1.0 {
        1
    } else {
        return Ok(None);
    };
    let [
        hidden,
        intermediate,
        layers,
        heads,
        channels,
        image,
        patch,
        out,
    ] = sizes(
        tower,
        [
            ("hidden_size", 768),
            ("intermediate_size", 5632),
            ("num_hidden_layers", 34),
            ("num_attention_heads", 16),
            ("num_channels", 3),
            ("image_size", 448),
            ("patch_size", 14),
            ("projector_output_dim", 4096),
        ],
    )?
    .map(fit);
    Ok(Some(VisionTower {
        hidden: hidden?,
        layers: layers?,
        heads: heads?,
        intermediate: intermediate?,
        patch: patch?,
        channels: channels?,
        merge,
        image: image?,
        out: out?,
        ..VisionTower::BASE
    }))
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&CWM, &LLAMA, &MISTRAL3, &LLAMA4];

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-4-Scout's tower (its published vision_config), against transformers 5.23's
    /// `Llama4ForConditionalGeneration` built on the meta device: `vision_model`
    /// 850 960 896 and `multi_modal_projector` 20 971 520 parameters.
    #[test]
    fn llama4_vision_counts_tower_adapter_and_projector() {
        let root = serde_json::json!({"model_type": "llama4"});
        let tower = serde_json::json!({"hidden_size": 1408, "image_size": 336,
            "intermediate_size": 5632, "model_type": "llama4_vision_model",
            "num_attention_heads": 16, "num_hidden_layers": 34, "patch_size": 14,
            "projector_input_dim": 4096, "projector_output_dim": 4096,
            "vision_output_dim": 4096});
        let n = llama4_vision(&Cfg::new(&root), &tower, 5120).unwrap();
        assert_eq!(n, Some(850_960_896 + 20_971_520));
        let text = serde_json::json!({"model_type": "llama4_text"});
        assert_eq!(llama4_vision(&Cfg::new(&text), &tower, 5120).unwrap(), None);
        // The shape its forward is derived from: 336-pixel tiles, merged 2 a side.
        let t = llama4_vision_shape(&Cfg::new(&root), &tower)
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                t.hidden,
                t.layers,
                t.heads,
                t.intermediate,
                t.patch,
                t.image,
                t.merge,
                t.out
            ),
            (1408, 34, 16, 5632, 14, 336, 2, 4096)
        );
        let mut odd = tower.clone();
        odd["pixel_shuffle_ratio"] = serde_json::json!(0.3);
        assert_eq!(llama4_vision_shape(&Cfg::new(&root), &odd).unwrap(), None);
    }
}
