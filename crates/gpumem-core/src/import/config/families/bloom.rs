//! BLOOM (`bloom`, BloomConfig; transformers 5.23 `models/bloom/modeling_bloom.py`):
//! ALiBi (no position table), a LayerNorm with bias over the token embeddings
//! (`word_embeddings_layernorm`), one `query_key_value` linear and `dense`, both with
//! bias, a plain MLP `dense_h_to_4h` / `dense_4h_to_h` with biases that is always
//! 4 × hidden wide, two LayerNorms with bias a layer, the lm_head tied to the
//! embedding; checked against the model transformers builds from the class's defaults
//! (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::families::gpt::dropout;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};

/// BLOOM.
pub(crate) const BLOOM: Family = Family {
    types: "bloom",
    class: "BloomConfig",
    arch: Architecture {
        tied_embeddings: true,
        gated_mlp: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        layernorm_bias: true,
        fused_qkv: true,
        embedding_norm: true,
        ..Architecture::BASE
    },
    // Megatron-DeepSpeed's training switches the published configs carry, which
    // BloomConfig and BloomModel never read (BloomAttention always takes the softmax in
    // fp32); where the residual is taken; the tensor-parallel slicing of the
    // pretraining (pretraining_tp, slow_but_exact: the same tensors).
    inert: concat!(
        "apply_residual_connection_post_layernorm attention_softmax_in_fp32 ",
        "bias_dropout_fusion masked_softmax_fusion offset_alibi seq_length ",
        "skip_bias_add skip_bias_add_qkv slow_but_exact",
    ),
    hook: Some(bloom),
    // ALiBi: no rotary buffers.
    rope_tables: 0,
    ..BASE
};

fn bloom(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    // BloomMLP: nn.Linear(hidden, 4 × hidden) whatever the config says (n_inner, which
    // the published configs write as null, is not read).
    c.touch(&["n_inner"]);
    d.arch.intermediate = d
        .arch
        .hidden
        .checked_mul(4)
        .ok_or_else(|| parse("hidden_size: absurdly large".into()))?;
    dropout(c, d, &["hidden_dropout", "attention_dropout"], 0.0);
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&BLOOM];
