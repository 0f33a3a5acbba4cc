//! Llama, Mistral and Mixtral (transformers' LlamaConfig, MistralConfig,
//! MixtralConfig: the generic decoder itself), and Llama-4 (Llama4TextConfig): its
//! MoE layers hold one shared expert beside the routed ones, and its RoPE layers
//! attend within chunks.

use serde_json::Value;

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;
use crate::import::config::tower::{fit, sizes};

/// Llama, Mistral, Mixtral.
pub(crate) const LLAMA: Family = Family {
    types: "llama mistral mixtral",
    class: "LlamaConfig",
    ..BASE
};

/// Mistral-3 (Mistral3ForConditionalGeneration): the Mistral language model of its
/// `text_config` and the Pixtral vision tower of its root.
pub(crate) const MISTRAL3: Family = Family {
    types: "mistral3",
    tower: Some(|root, tower, hidden| Ok(Some((pixtral(root, tower, hidden)?, None)))),
    ..LLAMA
};

/// Llama-4's text model.
pub(crate) const LLAMA4: Family = Family {
    types: "llama4 llama4_text",
    class: "Llama4TextConfig",
    hook: Some(llama4),
    // Llama4TextL2Norm has no weight; attention temperature constants.
    inert: "use_qk_norm attn_temperature_tuning attn_scale floor_scale",
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
    if let Some(m) = d.arch.moe.as_mut() {
        let width = c.need(&["intermediate_size"])?;
        m.expert_intermediate = width;
        m.shared_experts = 1;
        m.shared_intermediate = width;
    }
    let Some(chunk) = c.uint("attention_chunk_size")? else {
        return Ok(());
    };
    let layers = d.arch.layers;
    let rope_layers = match c.list("no_rope_layers") {
        Some(l) if !l.is_empty() => l.iter().filter(|x| x.as_u64() == Some(1)).count() as u64,
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

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&LLAMA, &MISTRAL3, &LLAMA4];
