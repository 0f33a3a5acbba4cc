//! ModernBERT-decoder (ModernBertDecoderConfig; transformers 5.23
//! `models/modernbert_decoder/modeling_modernbert_decoder.py`, the Ettin decoders):
//! ModernBERT's layers run causally —
//! - `embeddings.tok_embeddings` and `embeddings.norm` (a LayerNorm); per layer
//!   `attn_norm` (an `Identity` in layer 0, so the embeddings' norm takes its place in
//!   the count), `attn.{q,k,v}_proj` and `attn.Wo`, `mlp_norm`, `mlp.Wi`
//!   [2·intermediate, hidden] (input and gate) and `mlp.Wo`; `model.final_norm`; biases
//!   where `attention_bias` / `mlp_bias` / `norm_bias` say (all false by default);
//! - `ModernBertDecoderForCausalLM`'s `lm_head`, a `ModernBertDecoderPredictionHead`
//!   (`dense` [hidden, hidden] with a bias under `classifier_bias`, the activation,
//!   `norm`), then `decoder` [vocab, hidden] tied to the embeddings, its bias under
//!   `decoder_bias` (true by default);
//! - `layer_types` alternates global and local attention, the local window
//!   `sliding_window` (`local_attention // 2`), read as every decoder's.

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// The biases and the prediction head's switches as the config names them
/// (ModernBertDecoderConfig's defaults when absent).
fn modernbert_decoder(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let attention_bias = c.flag("attention_bias").unwrap_or(false);
    d.arch.qkv_bias = attention_bias;
    d.arch.o_bias = attention_bias;
    d.arch.mlp_bias = c.flag("mlp_bias").unwrap_or(false);
    d.arch.layernorm_bias = c.flag("norm_bias").unwrap_or(false);
    d.arch.lm_head_bias = c.flag("decoder_bias").unwrap_or(true);
    d.arch.prediction_head_bias = c.flag("classifier_bias").unwrap_or(false);
    Ok(())
}

/// ModernBERT-decoder.
pub(crate) const MODERNBERT_DECODER: Family = Family {
    types: "modernbert-decoder",
    class: "ModernBertDecoderConfig",
    arch: Architecture {
        tied_embeddings: true,
        prediction_head: true,
        ..Architecture::BASE
    },
    // The window's source (`sliding_window` is read), the head's activation, dropouts,
    // special tokens, initialisation.
    inert: concat!(
        "local_attention classifier_activation classifier_dropout embedding_dropout ",
        "mlp_dropout hidden_activation initializer_cutoff_factor cls_token_id sep_token_id"
    ),
    hook: Some(modernbert_decoder),
    // ModernBertDecoderRotaryEmbedding: one table per layer type (global and local).
    rope_tables: 2,
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&MODERNBERT_DECODER];

#[cfg(test)]
mod tests {
    use crate::import::config::parse_config;

    /// ModernBertDecoderConfig's defaults (22 layers, 768 wide, a 50 368-row
    /// vocabulary), against `ModernBertDecoderForCausalLM` as transformers 5.23 builds
    /// it on the meta device: 149 655 232 parameters, 640 960 of them the prediction
    /// head (768 × 768 + the norm's 768) and the decoder's bias (50 368).
    #[test]
    fn modernbert_decoder_counts_its_prediction_head() {
        let doc: serde_json::Value = serde_json::from_str(include_str!(
            "../../../../tests/cases/transformers/modernbert-decoder.json"
        ))
        .expect("fixture");
        let c = parse_config(&doc["config"].to_string()).expect("config");
        let ours: u64 = c
            .arch
            .tensors()
            .expect("tensors")
            .iter()
            .map(|t| t.params().expect("count"))
            .sum();
        assert_eq!(
            (ours, doc["parameters"].as_u64()),
            (149_655_232, Some(149_655_232))
        );
        assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
        // Without the head (the generic decoder's reading), 640 960 fewer.
        let mut bare = c.arch;
        bare.prediction_head = false;
        bare.lm_head_bias = false;
        let theirs: u64 = bare
            .tensors()
            .expect("tensors")
            .iter()
            .map(|t| t.params().expect("count"))
            .sum();
        assert_eq!(ours - theirs, 640_960);
    }
}
