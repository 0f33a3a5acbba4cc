//! GPT-1 (OpenAIGPTConfig; transformers 5.23 `models/openai/modeling_openai.py`,
//! `OpenAIGPTLMHeadModel`): GPT-2's tensors — a learned position table, `c_attn`
//! (q, k and v in one Conv1D) and `c_proj` with biases, an MLP `c_fc` / `c_proj` four
//! times the width with biases, two LayerNorms with bias per block, the lm_head tied —
//! but its norms come after each residual sum (`ln_1(x + a)`, `ln_2(n + m)`) and
//! nothing follows the last block: no final norm. Each block's `Attention` keeps a
//! causal mask `[n_positions, n_positions]` as a buffer (never saved), and the model
//! its position ids.

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::families::gpt::{activation, dropout};
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// GPT-1.
pub(crate) const OPENAI_GPT: Family = Family {
    types: "openai-gpt",
    class: "OpenAIGPTConfig",
    arch: Architecture {
        tied_embeddings: true,
        gated_mlp: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        layernorm_bias: true,
        fused_qkv: true,
        final_norm: false,
        // Attention._attn: softmax in the compute dtype.
        softmax_in_dtype: true,
        ..Architecture::BASE
    },
    positions: true,
    // n_ctx repeats n_positions; the special tokens' count and prediction switch are
    // the tokenizer's; task parameters.
    inert: "n_ctx n_special predict_special_tokens task_specific_params",
    hook: Some(openai_gpt),
    // Learned or no positions: no rotary buffers.
    rope_tables: 0,
    ..BASE
};

/// GPT-1's activation (`afn`: "gelu" is `gelu_new` in its own ACT_FNS table) and
/// dropouts (default 0.1), read as `OpenAIGPTModel` uses them.
fn openai_gpt(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let afn = c.str("afn").unwrap_or("gelu");
    match afn {
        // ACT_FNS = {"relu": nn.ReLU(), "silu": silu, "gelu": gelu_new, "swish": silu}.
        "gelu" => d.arch.gelu_new = true,
        _ => activation(c, d, "afn", "gelu"),
    }
    dropout(c, d, &["embd_pdrop", "resid_pdrop", "attn_pdrop"], 0.1);
    // Every block's Attention keeps its causal mask [n_positions, n_positions] as a
    // buffer, and OpenAIGPTModel its position ids (the table's rows, read above).
    d.arch.mask_positions = d.arch.learned_positions;
    d.notes.push(
        "OpenAIGPTLMHeadModel keeps no KV cache (each generated token recomputes the whole sequence): the KV lines count the keys and values a cache would hold, more than transformers keeps".into(),
    );
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&OPENAI_GPT];
