//! ChatGLM2 / ChatGLM3 (`chatglm`, remote code `modeling_chatglm.py` of THUDM/chatglm3-6b,
//! as published in github.com/THUDM/ChatGLM3): `SelfAttention`'s fused
//! `query_key_value` [(heads + 2 × multi_query_group_num) × kv_channels, hidden] with
//! bias under `add_qkv_bias`, `dense` [hidden, heads × kv_channels] with bias under
//! `add_bias_linear`; `MLP`'s `dense_h_to_4h` [2 × ffn_hidden_size, hidden] (SwiGLU) and
//! `dense_4h_to_h`, biases under `add_bias_linear`; RMSNorm (LayerNorm with bias
//! without `rmsnorm`) before attention and MLP and `final_layernorm` under
//! `post_layer_norm`; an untied `output_layer` of `padded_vocab_size` rows. Rotary on
//! half the head dim changes no tensor and no cache: the cache keeps K and V of
//! `multi_query_group_num` heads × `kv_channels`.

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};

/// ChatGLM2-6B and ChatGLM3-6B (and their 32k / base releases).
pub(crate) const CHATGLM: Family = Family {
    types: "chatglm",
    class: "ChatGLMConfig",
    // The forward's numerics and layout switches (no tensor): the residual's source, the
    // rotary layout, query-key scaling, fp32 softmax and residual, fused dropout; the
    // training context; P-tuning is off unless pre_seq_len is set (checked).
    inert: "apply_residual_connection_post_layernorm original_rope apply_query_key_layer_scaling \
            attention_softmax_in_fp32 fp32_residual_connection bias_dropout_fusion seq_length \
            prefix_projection quantization_bit rope_ratio classifier_dropout",
    hook: Some(chatglm),
    // Its own code (trust_remote_code), not transformers': its rotary buffers are not
    // counted here.
    rope_tables: 0,
    ..BASE
};

fn chatglm(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    if c.uint("pre_seq_len")?.is_some_and(|n| n > 0) {
        return Err(parse(
            "pre_seq_len: ChatGLM's P-tuning prefix encoder is not modelled".into(),
        ));
    }
    if c.uint("quantization_bit")?.is_some_and(|n| n > 0) {
        return Err(parse(
            "quantization_bit: ChatGLM's own weight quantization is not modelled".into(),
        ));
    }
    if c.flag("post_layer_norm") == Some(false) {
        return Err(parse(
            "post_layer_norm false: a ChatGLM without its final norm is not modelled".into(),
        ));
    }
    let a = &mut d.arch;
    // ChatGLMConfig: embedding and output_layer are padded_vocab_size rows.
    if let Some(v) = c.uint("padded_vocab_size")? {
        a.vocab = v;
    }
    if let Some(kv) = c.uint("kv_channels")? {
        a.head_dim = kv;
    }
    // multi_query_attention (default False): K and V of multi_query_group_num heads.
    a.kv_heads = if c.flag("multi_query_attention") == Some(true) {
        c.uint("multi_query_group_num")?.unwrap_or(1)
    } else {
        a.heads
    };
    // query_key_value: bias=config.add_bias_linear or config.add_qkv_bias; dense and the
    // MLP: bias=config.add_bias_linear (ChatGLMConfig defaults both to False).
    let linear = c.flag("add_bias_linear") == Some(true);
    a.qkv_bias = linear || c.flag("add_qkv_bias") == Some(true);
    a.o_bias = linear;
    a.mlp_bias = linear;
    // rmsnorm (default True); else LayerNorm with weight and bias.
    a.layernorm_bias = c.flag("rmsnorm") == Some(false);
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&CHATGLM];
