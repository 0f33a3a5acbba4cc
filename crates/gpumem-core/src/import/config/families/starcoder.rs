//! Starcoder2 (Starcoder2Config): a non-gated MLP, LayerNorms with bias, and
//! biases on every linear layer unless `use_bias` is false.

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::families::gpt::{activation, dropouts};
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// Starcoder2.
pub(crate) const STARCODER2: Family = Family {
    types: "starcoder2",
    class: "Starcoder2Config",
    arch: Architecture {
        tied_embeddings: true,
        gated_mlp: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        layernorm_bias: true,
        ..Architecture::BASE
    },
    hook: Some(starcoder2),
    ..BASE
};

/// `use_bias` false takes the biases off every linear layer; the activation and the
/// dropouts with Starcoder2Config's defaults (configuration_starcoder2.py, transformers
/// 5.23: hidden_act "gelu_pytorch_tanh", residual/embedding/attention_dropout 0), as
/// `Starcoder2MLP`, `Starcoder2Attention` and `Starcoder2Model` use them.
fn starcoder2(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    if c.flag("use_bias") == Some(false) {
        let a = &mut d.arch;
        (a.qkv_bias, a.o_bias, a.mlp_bias) = (false, false, false);
    }
    activation(c, d, "hidden_act", "gelu_pytorch_tanh");
    dropouts(
        c,
        d,
        ["residual_dropout", "embedding_dropout", "attention_dropout"],
        0.0,
    );
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&STARCODER2];
