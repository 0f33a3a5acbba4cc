//! GPT-2 (GPT2Config: a learned position table, biases everywhere, LayerNorms with
//! bias), GPTBigCode (multi-query), GPT-NeoX (untied `embed_out`), and GPT-J, OPT and
//! BLOOM read with these rules (not every tensor of theirs is modelled).

use crate::import::config::family::{BASE, Family};

/// GPT-2.
pub(crate) const GPT2: Family = Family {
    types: "gpt2",
    class: "GPT2Config",
    tied: true,
    gated_mlp: false,
    all_bias: true,
    ln_bias: true,
    positions: true,
    // n_ctx repeats n_positions; attention scaling switches; task parameters.
    inert: concat!(
        "n_ctx scale_attn_weights reorder_and_upcast_attn ",
        "scale_attn_by_inverse_layer_idx task_specific_params",
    ),
    ..BASE
};

/// GPTBigCode (StarCoder): GPT-2 with one K/V head unless `multi_query` is false.
pub(crate) const GPT_BIGCODE: Family = Family {
    types: "gpt_bigcode",
    class: "GPTBigCodeConfig",
    multi_query: true,
    ..GPT2
};

/// GPT-NeoX (Pythia).
pub(crate) const GPT_NEOX: Family = Family {
    types: "gpt_neox",
    class: "GPTNeoXConfig",
    gated_mlp: false,
    all_bias: true,
    ln_bias: true,
    // Residual order and RoPE base: no tensors.
    inert: "use_parallel_residual rotary_emb_base",
    ..BASE
};

/// GPT-J: one LayerNorm feeding parallel attention and MLP.
pub(crate) const GPTJ: Family = Family {
    types: "gptj",
    class: "GPTJConfig",
    modelled: false,
    gated_mlp: false,
    ln_bias: true,
    norms: 1,
    ..BASE
};

/// OPT and BLOOM.
pub(crate) const OPT_BLOOM: Family = Family {
    types: "opt bloom",
    class: "OPTConfig",
    modelled: false,
    tied: true,
    gated_mlp: false,
    ln_bias: true,
    ..BASE
};
