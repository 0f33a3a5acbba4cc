//! Falcon (FalconConfig): multi-query attention by default, one LayerNorm feeding
//! parallel attention and MLP (`parallel_attn`), or with `new_decoder_architecture`
//! (Falcon-40B/180B) grouped K/V heads and `num_ln_in_parallel_attn` norms; biases
//! on every linear layer when `bias`.

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::families::gpt::{activation, dropouts};
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// Falcon.
pub(crate) const FALCON: Family = Family {
    types: "falcon",
    class: "FalconConfig",
    arch: Architecture {
        tied_embeddings: true,
        gated_mlp: false,
        layernorm_bias: true,
        falcon_layer: true,
        // Its eager attention takes the softmax in the compute dtype
        // (`FalconAttention.forward`: `F.softmax(..., dtype=hidden_states.dtype)`).
        softmax_in_dtype: true,
        ..Architecture::BASE
    },
    multi_query: true,
    hook: Some(falcon),
    ..BASE
};

fn falcon(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    // FalconConfig's defaults, listed when the config leaves them out.
    for (key, default) in [
        ("multi_query", "true"),
        ("parallel_attn", "true"),
        ("bias", "false"),
    ] {
        if c.flag(key).is_none() {
            d.notes.push(format!(
                "{key} absent: {default} assumed (FalconConfig's default)"
            ));
        }
    }
    // FalconModel builds its rotary embedding only without ALiBi (`alibi` true: the
    // bias is computed in the forward, no buffer).
    if c.flag("alibi") == Some(true) {
        d.arch.rope_tables = 0;
    }
    // FalconConfig's activation "gelu" (FalconMLP), hidden_dropout after the layer's
    // sum (`dropout_add`) and attention_dropout (ALiBi's eager path) 0; no dropout
    // over the embeddings (FalconModel.forward).
    activation(c, d, "activation", "gelu");
    dropouts(c, d, ["hidden_dropout", "", "attention_dropout"], 0.0);
    if c.flag("bias") == Some(true) {
        // Biases on every linear layer.
        let a = &mut d.arch;
        (a.qkv_bias, a.o_bias, a.mlp_bias) = (true, true, true);
    }
    d.arch.layer_norms = if c.flag("new_decoder_architecture") == Some(true) {
        d.arch.kv_heads = c.uint("num_kv_heads")?.unwrap_or(d.arch.heads);
        let norms = c.uint("num_ln_in_parallel_attn")?.unwrap_or(2);
        // Two norms (`ln_attn`, `ln_mlp`) both read the layer's input
        // (`FalconDecoderLayer.forward`): a parallel residual.
        d.arch.parallel_residual = norms == 2;
        norms
    } else if c.flag("parallel_attn").unwrap_or(true) {
        1
    } else {
        2
    };
    // FalconAttention: one K/V head under multi_query without the new architecture,
    // whatever num_kv_heads says (transformers 5.23 modeling_falcon.py).
    if c.flag("new_decoder_architecture") != Some(true) && c.flag("multi_query") != Some(false) {
        c.touch(&["num_kv_heads"]);
    }
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&FALCON];
