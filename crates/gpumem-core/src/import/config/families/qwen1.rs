//! Qwen-1 (`qwen`, remote code `modeling_qwen.py` of Qwen/Qwen-7B-Chat, as published in
//! github.com/QwenLM/Qwen): `QWenAttention`'s fused `c_attn` [3 × heads × kv_channels,
//! hidden] always with bias and `c_proj` with bias unless `no_bias`; `QWenMLP`'s `w1`,
//! `w2` [intermediate_size / 2, hidden] and `c_proj` (it halves `intermediate_size`:
//! `ff_dim_in = config.intermediate_size // 2`), biases unless `no_bias`; RMSNorm
//! `ln_1`, `ln_2`, `ln_f`; an untied `lm_head`; multi-head attention (one K and one V per
//! head, `kv_channels` wide).

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};

/// Qwen-1 (Qwen-1.8B, 7B, 14B, 72B and their Chat releases).
pub(crate) const QWEN1: Family = Family {
    types: "qwen",
    class: "QWenConfig",
    // seq_length is the training context (max_position_embeddings is read); the rest are
    // kernel, dtype and NTK/log-n switches of the forward, no tensor.
    inert: "seq_length bf16 fp16 fp32 onnx_safe scale_attn_weights use_dynamic_ntk \
            use_flash_attn use_logn_attn rotary_emb_base softmax_in_fp32 tokenizer_class \
            emb_dropout_prob attn_dropout_prob use_cache_kernel",
    hook: Some(qwen1),
    // Its own code (trust_remote_code), not transformers': its rotary buffers are not
    // counted here.
    rope_tables: 0,
    ..BASE
};

fn qwen1(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let a = &mut d.arch;
    if let Some(kv) = c.uint("kv_channels")? {
        a.head_dim = kv;
    }
    a.kv_heads = a.heads;
    // QWenMLP: ff_dim_in = config.intermediate_size // 2, for w1, w2 and c_proj.
    a.intermediate /= 2;
    if a.intermediate == 0 {
        return Err(parse("intermediate_size below 2".into()));
    }
    // c_attn: bias=True always; c_proj, w1, w2, mlp.c_proj: bias=not config.no_bias.
    a.qkv_bias = true;
    let biases = c.flag("no_bias") == Some(false);
    a.o_bias = biases;
    a.mlp_bias = biases;
    if c.flag("use_cache_quantization") == Some(true) {
        d.warnings.push(
            "use_cache_quantization: Qwen-1's int8 KV cache is not modelled (the cache is counted at the model's dtype, an overcount)"
                .into(),
        );
    }
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&QWEN1];
