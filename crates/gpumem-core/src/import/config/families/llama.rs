//! Llama, Mistral and Mixtral (transformers' LlamaConfig, MistralConfig,
//! MixtralConfig: the generic decoder itself), and Llama-4 (Llama4TextConfig): its
//! MoE layers hold one shared expert beside the routed ones, and its RoPE layers
//! attend within chunks.

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// Llama, Mistral, Mixtral.
pub(crate) const LLAMA: Family = Family {
    types: "llama mistral mixtral",
    class: "LlamaConfig",
    ..BASE
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

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&LLAMA, &LLAMA4];
