//! OPT (`opt`, OPTConfig; transformers 5.23 `models/opt/modeling_opt.py`): a learned
//! position table of `max_position_embeddings + 2` rows (`OPTLearnedPositionalEmbedding`
//! keeps an offset of 2), biases on q, k, v, `out_proj`, fc1 and fc2 (`enable_bias`),
//! two LayerNorms with bias a layer (`layer_norm_elementwise_affine`), a plain ReLU MLP
//! of `ffn_dim`, and the lm_head tied to the embedding; checked against the model
//! transformers builds from the class's defaults (`tests/cases/transformers`).

use serde_json::Value;

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::families::gpt::activation;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};

/// OPT.
pub(crate) const OPT: Family = Family {
    types: "opt",
    class: "OPTConfig",
    arch: Architecture {
        tied_embeddings: true,
        gated_mlp: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        layernorm_bias: true,
        ..Architecture::BASE
    },
    positions: true,
    // Initialisation, LayerDrop (training skips whole layers: no tensors), the
    // tokenizer's prefix.
    inert: "init_std layerdrop prefix",
    hook: Some(opt),
    // Learned or no positions: no rotary buffers.
    rope_tables: 0,
    ..BASE
};

fn opt(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let a = &mut d.arch;
    a.learned_positions = a
        .learned_positions
        .checked_add(2)
        .ok_or_else(|| parse("max_position_embeddings: absurdly large".into()))?;
    let bias = c.flag("enable_bias").unwrap_or(true);
    a.qkv_bias = bias;
    a.o_bias = bias;
    a.mlp_bias = bias;
    a.nonparametric_norms = c.flag("layer_norm_elementwise_affine") == Some(false);
    // OPTConfig: dropout 0.1 after the attention's and the MLP's output projections
    // (OPTDecoderLayer), attention_dropout 0 over eager attention's probabilities, none
    // over the embeddings (OPTDecoder.forward).
    let on = |k: &str, default: f64| {
        c.get(k)
            .map_or(Some(default), Value::as_f64)
            .is_some_and(|x| x > 0.0)
    };
    a.dropout = on("dropout", 0.1);
    a.attn_dropout = on("attention_dropout", 0.0);
    // OPTConfig's activation_function default "relu".
    activation(c, d, "activation_function", "relu");
    // OPT-350m: embeddings of word_embed_proj_dim with project_in / project_out
    // [hidden, proj] between them and the layers, and no final LayerNorm
    // (OPTDecoder builds it only with do_layer_norm_before and not
    // _remove_final_layer_norm).
    let proj = c.uint("word_embed_proj_dim")?;
    let hidden = d.arch.hidden;
    if let Some(p) = proj.filter(|p| *p != hidden) {
        d.arch.embed_proj = p;
    }
    if proj.is_some_and(|p| p != hidden) {
        d.warnings.push(format!(
            "word_embed_proj_dim {} differs from hidden_size {hidden}: the embeddings are counted {hidden} wide (more than the model has) and project_in / project_out are not counted",
            proj.unwrap_or(0)
        ));
    }
    let final_norm = c.flag("do_layer_norm_before").unwrap_or(true)
        && c.flag("_remove_final_layer_norm") != Some(true);
    if !final_norm {
        // The layers normalise after each residual sum instead (post-norm).
        d.arch.final_norm = false;
    }
    Ok(())
}

/// BioGPT (BioGptConfig, transformers 5.23 `models/biogpt/modeling_biogpt.py`): OPT's
/// layer (q, k, v and `out_proj`, fc1 and fc2 with biases, two LayerNorms with bias,
/// a final one) and its position table of `max_position_embeddings + 2` rows
/// (`BioGptLearnedPositionalEmbedding`'s offset), `output_projection` tied to the
/// embedding.
pub(crate) const BIOGPT: Family = Family {
    types: "biogpt",
    class: "BioGptConfig",
    // LayerDrop; the embedding's scale by √hidden (`BioGptScaledWordEmbedding`: no
    // tensor).
    inert: "layerdrop scale_embedding",
    hook: Some(biogpt),
    // Learned or no positions: no rotary buffers.
    rope_tables: 0,
    ..OPT
};

fn biogpt(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let a = &mut d.arch;
    a.learned_positions = a
        .learned_positions
        .checked_add(2)
        .ok_or_else(|| parse("max_position_embeddings: absurdly large".into()))?;
    // BioGptConfig: hidden_dropout_prob and attention_probs_dropout_prob 0.1.
    let on = |k: &str| {
        c.get(k)
            .map_or(Some(0.1), Value::as_f64)
            .is_some_and(|x| x > 0.0)
    };
    let (hidden, probs) = (
        on("hidden_dropout_prob"),
        on("attention_probs_dropout_prob"),
    );
    a.dropout = hidden || probs;
    activation(c, d, "hidden_act", "gelu");
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&OPT, &BIOGPT];
