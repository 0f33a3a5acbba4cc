//! Encoders: BERT (BertConfig, transformers 5.23's modeling_bert.py), RoBERTa and
//! XLM-RoBERTa (modeling_roberta.py / modeling_xlm_roberta.py: BERT's layers, a
//! position table of `max_position_embeddings` rows whose first `pad_token_id + 1` are
//! never used) and ModernBERT (modeling_modernbert.py). Counted as `AutoModel` builds
//! them — the base model an embedding or reranking server loads — with no lm_head and
//! no KV cache:
//! - BERT / RoBERTa / XLM-R: `embeddings.{word,position,token_type}_embeddings`,
//!   `embeddings.LayerNorm` (weight and bias); per layer `attention.self.{query,key,
//!   value}` and `attention.output.dense` with biases, `attention.output.LayerNorm`,
//!   `intermediate.dense` and `output.dense` with biases, `output.LayerNorm`; the
//!   pooler's `dense` with its bias (`BertModel(add_pooling_layer=True)`).
//! - ModernBERT: `embeddings.tok_embeddings`, `embeddings.norm`; per layer `attn_norm`
//!   (an `Identity` in layer 0), `attn.Wqkv` [3·hidden, hidden], `attn.Wo`,
//!   `mlp_norm`, `mlp.Wi` [2·intermediate, hidden] (input and gate), `mlp.Wo`;
//!   `final_norm`; biases only where `attention_bias` / `mlp_bias` / `norm_bias` say
//!   (all false by default); rotary positions (no table), no pooler.

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// Keys of every BERT-style config that change nothing in memory (dropouts, the
/// classifier's dropout, gradient checkpointing as saved by old trainers).
const BERT_INERT: &str = concat!(
    "attention_probs_dropout_prob hidden_dropout_prob classifier_dropout ",
    "gradient_checkpointing output_past is_decoder add_cross_attention ",
    "chunk_size_feed_forward problem_type",
);

/// The heads `architectures` may name beyond the base model: their tensors are not in
/// the count.
fn heads(c: &Cfg, d: &mut Draft, base: &str) {
    let Some(list) = c.list("architectures") else {
        return;
    };
    for a in list.iter().filter_map(|v| v.as_str()) {
        if a != base {
            d.warnings.push(format!(
                "architectures names {a}: counted as {base} (what AutoModel builds for embeddings); the task head's own tensors are not counted"
            ));
        }
    }
}

/// BERT, RoBERTa, XLM-R: the token-type table (`type_vocab_size`, BertConfig's default
/// 2) and the position table (read by the generic reader from
/// `max_position_embeddings`).
fn bert_hook(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    d.arch.token_types = d.or_default(c, "type_vocab_size", 2)?;
    // transformers 5.x builds absolute positions only; the relative kinds of 4.x added
    // a `distance_embedding` per layer.
    match c.str("position_embedding_type") {
        None | Some("absolute") => {}
        Some(other) => d.warnings.push(format!(
            "position_embedding_type {other}: transformers 4.x added a distance_embedding table per layer, which is not counted (5.x builds absolute positions only)"
        )),
    }
    let base = match c.str("model_type") {
        Some("roberta") => "RobertaModel",
        Some("xlm-roberta") | Some("xlm_roberta") => "XLMRobertaModel",
        _ => "BertModel",
    };
    heads(c, d, base);
    Ok(())
}

/// ModernBERT: `norm_bias` puts a bias on every LayerNorm; the local attention's window
/// changes the mask, not a tensor.
fn modernbert_hook(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    d.arch.layernorm_bias = c.flag("norm_bias").unwrap_or(false);
    c.touch(&["global_attn_every_n_layers", "local_attention"]);
    // ModernBertConfig's layer_types when absent: full where i % every == 0, the
    // others sliding; one rotary table per kind present.
    if c.list("layer_types").is_none() {
        let every = c.uint("global_attn_every_n_layers")?.unwrap_or(3);
        d.arch.rope_tables = if every > 1 && d.arch.layers > 1 { 2 } else { 1 };
    }
    heads(c, d, "ModernBertModel");
    Ok(())
}

/// BERT.
pub(crate) const BERT: Family = Family {
    types: "bert",
    class: "BertConfig",
    arch: Architecture {
        encoder: true,
        pooler: true,
        tied_embeddings: true,
        gated_mlp: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        layernorm_bias: true,
        ..Architecture::BASE
    },
    positions: true,
    inert: BERT_INERT,
    hook: Some(bert_hook),
    // Learned or no positions: no rotary buffers.
    rope_tables: 0,
    ..BASE
};

/// RoBERTa and XLM-RoBERTa (BGE-M3, multilingual-e5, most rerankers).
pub(crate) const ROBERTA: Family = Family {
    types: "roberta xlm-roberta xlm_roberta",
    class: "RobertaConfig",
    ..BERT
};

/// ModernBERT.
pub(crate) const MODERNBERT: Family = Family {
    types: "modernbert",
    class: "ModernBertConfig",
    arch: Architecture {
        encoder: true,
        tied_embeddings: true,
        ..Architecture::BASE
    },
    // Rotary frequencies, the classifier's and the masked-LM head's settings (not in
    // the base model), the unpadding and Flash switches, initialisation.
    inert: concat!(
        "global_rope_theta local_rope_theta classifier_pooling classifier_bias ",
        "decoder_bias sparse_prediction sparse_pred_ignore_index deterministic_flash_attn ",
        "initializer_cutoff_factor repad_logits_with_grad reference_compile ",
        "position_embedding_type gradient_checkpointing norm_bias",
    ),
    hook: Some(modernbert_hook),
    // ModernBertRotaryEmbedding: one table per layer type (global and local).
    rope_tables: 2,
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&BERT, &ROBERTA, &MODERNBERT];
