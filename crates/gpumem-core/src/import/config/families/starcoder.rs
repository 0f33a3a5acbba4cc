//! Starcoder2 (Starcoder2Config): a non-gated MLP, LayerNorms with bias, and
//! biases on every linear layer unless `use_bias` is false.

use crate::import::config::family::{BASE, Family};

/// Starcoder2.
pub(crate) const STARCODER2: Family = Family {
    types: &["starcoder2"],
    class: "Starcoder2Config",
    tied: true,
    gated_mlp: false,
    bias_key: Some(("use_bias", true)),
    ln_bias: true,
    ..BASE
};
