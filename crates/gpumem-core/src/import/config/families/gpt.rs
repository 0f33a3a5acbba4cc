//! GPT-2 (GPT2Config: a learned position table, biases everywhere, LayerNorms with
//! bias), GPTBigCode (multi-query), GPT-NeoX (untied `embed_out`) and GPT-J (parallel
//! attention and MLP, an lm_head with a bias).

use serde_json::Value;

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// GPT-2 (and GPT-SW3, which transformers builds as GPT2LMHeadModel: its
/// `model_type` maps to GPT2Config in `configuration_auto.py`).
pub(crate) const GPT2: Family = Family {
    types: "gpt2 gpt-sw3",
    class: "GPT2Config",
    arch: Architecture {
        tied_embeddings: true,
        gated_mlp: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        layernorm_bias: true,
        // c_attn: one Conv1D for q, k and v, which split into views of its output.
        fused_qkv: true,
        // GPT2Config's defaults (configuration_gpt2.py, transformers 5.23):
        // activation_function "gelu_new", embd/resid/attn_pdrop 0.1; its
        // eager_attention_forward takes the softmax in the compute dtype.
        gelu_new: true,
        dropout: true,
        softmax_in_dtype: true,
        ..Architecture::BASE
    },
    positions: true,
    // n_ctx repeats n_positions; attention scaling switches; task parameters.
    inert: concat!(
        "n_ctx scale_attn_weights ",
        "scale_attn_by_inverse_layer_idx task_specific_params",
    ),
    hook: Some(gpt2),
    // Learned or no positions: no rotary buffers.
    rope_tables: 0,
    ..BASE
};

/// GPT-2's activation, dropout and softmax switches, read as `GPT2Model` uses them
/// (modeling_gpt2.py, transformers 5.23).
fn gpt2(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let default = if d.class == "GPTBigCodeConfig" {
        "gelu_pytorch_tanh"
    } else {
        "gelu_new"
    };
    activation(c, d, "activation_function", default);
    dropouts(c, d, ["resid_pdrop", "embd_pdrop", "attn_pdrop"], 0.1);
    if c.flag("reorder_and_upcast_attn") == Some(true) {
        // GPT2Attention._upcast_and_reordered_attn (eager only): fp32 copies of q and k
        // and an fp32 softmax, which the derivation does not count.
        d.arch.softmax_in_dtype = false;
        d.warnings.push(
            "reorder_and_upcast_attn: eager attention's fp32 copies of q and k are not counted in the activations".into(),
        );
    }
    Ok(())
}

/// The MLP's activation `key` (absent: `default`): `gelu_new` is written out in Python
/// (`NewGELUActivation`: autograd keeps its tanh and two products); `gelu` and
/// `gelu_pytorch_tanh` are one fused operator that keeps its input (activations.py,
/// transformers 5.23); `relu` is `nn.ReLU`, which keeps its output; any other
/// (`other_activation`) keeps tensors the derivations do not count, so the activations
/// stay assumed.
pub(crate) fn activation(c: &Cfg, d: &mut Draft, key: &str, default: &str) {
    let act = c.str(key).unwrap_or(default);
    d.arch.gelu_new = act == "gelu_new";
    d.arch.relu = act == "relu";
    d.arch.other_activation = !matches!(act, "gelu" | "gelu_new" | "gelu_pytorch_tanh" | "relu");
}

/// The dropouts the LayerNorm derivation follows one by one, each on when its
/// probability (absent: `default`) is above 0: `[residual, embedding, attention]`
/// keys, `residual` naming the dropout after the attention's and the MLP's output
/// projections (see [`Architecture::dropout`]); one key may stand for several, and
/// `""` for a dropout the family has not.
pub(crate) fn dropouts(
    c: &Cfg,
    d: &mut Draft,
    [residual, embedding, attention]: [&str; 3],
    default: f64,
) {
    let on = |k: &str| {
        c.get(k)
            .map_or(Some(default), Value::as_f64)
            .is_some_and(|p| p > 0.0)
    };
    d.arch.dropout = on(residual);
    d.arch.embedding_dropout = on(embedding);
    d.arch.attn_dropout = on(attention);
}

/// Whether any of the dropout probabilities `keys` (absent: `default`) is above 0:
/// in training each dropout keeps a boolean mask (the safe side where only some are).
pub(crate) fn dropout(c: &Cfg, d: &mut Draft, keys: &[&str], default: f64) {
    d.arch.dropout = keys.iter().any(|k| {
        c.get(k)
            .map_or(Some(default), Value::as_f64)
            .is_some_and(|p| p > 0.0)
    });
}

/// GPTBigCode (StarCoder): GPT-2 with one K/V head unless `multi_query` is false, and
/// an eager attention whose softmax runs in fp32 whatever `attention_softmax_in_fp32`
/// says (transformers 5.23 `modeling_gpt_bigcode.py` `eager_attention_forward`:
/// `softmax(..., dtype=torch.float32).to(query.dtype)`).
pub(crate) const GPT_BIGCODE: Family = Family {
    types: "gpt_bigcode",
    class: "GPTBigCodeConfig",
    multi_query: true,
    arch: Architecture {
        softmax_in_dtype: false,
        ..GPT2.arch
    },
    // Learned or no positions: no rotary buffers.
    rope_tables: 0,
    ..GPT2
};

/// GPT-NeoX (Pythia).
pub(crate) const GPT_NEOX: Family = Family {
    types: "gpt_neox",
    class: "GPTNeoXConfig",
    arch: Architecture {
        gated_mlp: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        layernorm_bias: true,
        // query_key_value: one linear whose output q, k and v are views of.
        fused_qkv: true,
        // GPTNeoXConfig's default use_parallel_residual (transformers 5.23).
        parallel_residual: true,
        ..Architecture::BASE
    },
    // RoPE base: no tensors.
    inert: "rotary_emb_base",
    hook: Some(gpt_neox),
    ..BASE
};

/// GPT-NeoX's residual order, rotary width, activation and dropouts, with
/// GPTNeoXConfig's defaults (configuration_gpt_neox.py, transformers 5.23:
/// use_parallel_residual true, rotary_pct 0.25, hidden_act "gelu", dropouts 0).
fn gpt_neox(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    d.arch.parallel_residual = c.flag("use_parallel_residual").unwrap_or(true);
    rotary_fraction(c, d, "rotary_pct", 0.25)?;
    activation(c, d, "hidden_act", "gelu");
    // GPTNeoXModel.emb_dropout and the layer's post_attention_dropout and
    // post_mlp_dropout all take hidden_dropout.
    dropouts(
        c,
        d,
        ["hidden_dropout", "hidden_dropout", "attention_dropout"],
        0.0,
    );
    Ok(())
}

/// The rotary width as a fraction of the head (GPTNeoXAttention, PhiAttention:
/// rotary_ndims = int(head_size × partial_rotary_factor), the factor from
/// rope_parameters, `key` or `partial_rotary_factor`; absent: `default`).
pub(crate) fn rotary_fraction(
    c: &Cfg,
    d: &mut Draft,
    key: &str,
    default: f64,
) -> Result<(), EstimateError> {
    let nested = c
        .get("rope_parameters")
        .and_then(|r| r.get("partial_rotary_factor"))
        .and_then(Value::as_f64);
    let pct = c
        .get(key)
        .or_else(|| c.get("partial_rotary_factor"))
        .and_then(Value::as_f64)
        .or(nested)
        .unwrap_or(default);
    if !(pct > 0.0 && pct <= 1.0) {
        return Err(crate::import::config::json::parse(format!(
            "{key} should be in (0, 1], found {pct}"
        )));
    }
    // The head size is bounded (validated), so the product is exact enough; the
    // truncation is Python's int().
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rot = (d.arch.head_dim as f64 * pct) as u64;
    d.arch.rotary_dims = if rot == d.arch.head_dim { 0 } else { rot };
    Ok(())
}

/// GPT-J (GPTJConfig, transformers 5.23 `models/gptj/modeling_gptj.py`): one
/// LayerNorm with bias feeding parallel attention (q, k, v and out_proj without bias)
/// and a plain MLP (fc_in, fc_out with biases), untied `lm_head` with a bias.
pub(crate) const GPTJ: Family = Family {
    types: "gptj",
    class: "GPTJConfig",
    arch: Architecture {
        gated_mlp: false,
        mlp_bias: true,
        layernorm_bias: true,
        layer_norms: 1,
        lm_head_bias: true,
        ..Architecture::BASE
    },
    // The published configs' `rotary`, `scale_attn_weights` and
    // `gradient_checkpointing`, which GPTJConfig and GPTJModel never read (rotary
    // always, the scale always); the tokenizer's class.
    inert: "rotary scale_attn_weights gradient_checkpointing tokenizer_class",
    hook: Some(gptj),
    // No inv_freq pair: GPTJAttention keeps its own sin/cos table (`embed_positions`,
    // per layer: `sincos_positions`, set by the hook).
    rope_tables: 0,
    ..BASE
};

/// GPT-J's rotary width (`rotary_dim`, GPTJConfig default 64; null: the whole head),
/// activation (default gelu_new) and dropouts (default 0). Every attention layer keeps
/// an fp32 sin/cos table of `n_positions` rows (default 2048) over `rotary_dim or
/// embed_dim` (`GPTJAttention.__init__`: `self.pos_embd_dim = self.rotary_dim or
/// self.embed_dim`, `embed_positions = nn.Buffer(create_sinusoidal_positions(
/// self.max_positions, self.pos_embd_dim), persistent=False)`, transformers 5.23
/// `models/gptj/modeling_gptj.py`; CodeGenAttention the same,
/// `models/codegen/modeling_codegen.py`): a buffer of each layer, not one shared.
fn gptj(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let rot = match c.get("rotary_dim") {
        None => 64,
        Some(Value::Null) => 0,
        Some(_) => c.uint("rotary_dim")?.unwrap_or(0),
    };
    d.arch.rotary_dims = if rot >= d.arch.head_dim { 0 } else { rot };
    // `max_position_embeddings` is GPTJConfig's alias of n_positions (attribute_map).
    d.arch.sincos_positions = match c.any(&["n_positions", "max_position_embeddings"])? {
        Some(n) => n,
        None => d.or_default(c, "n_positions", 2048)?,
    };
    // 0: the hidden size (a null rotary_dim).
    d.arch.sincos_dims = rot;
    activation(c, d, "activation_function", "gelu_new");
    dropout(c, d, &["embd_pdrop", "resid_pdrop", "attn_pdrop"], 0.0);
    Ok(())
}

/// CodeGen (CodeGenConfig, transformers 5.23 `models/codegen/modeling_codegen.py`):
/// GPT-J's layer with q, k and v in one `qkv_proj` (no bias) and the same defaults
/// (rotary_dim 64, gelu_new, dropouts 0, an lm_head with a bias, untied).
pub(crate) const CODEGEN: Family = Family {
    types: "codegen",
    class: "CodeGenConfig",
    arch: Architecture {
        fused_qkv: true,
        ..GPTJ.arch
    },
    // n_ctx repeats n_positions; GPT-2's task parameters; as GPT-J's.
    inert: concat!(
        "n_ctx task_specific_params rotary scale_attn_weights ",
        "gradient_checkpointing tokenizer_class",
    ),
    // CodeGenAttention keeps GPT-J's per-layer sin/cos table (`embed_positions`),
    // set by GPT-J's hook.
    rope_tables: 0,
    ..GPTJ
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&GPT2, &GPT_BIGCODE, &GPT_NEOX, &GPTJ, &CODEGEN];
