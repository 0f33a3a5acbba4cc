//! GPT-2 (GPT2Config: a learned position table, biases everywhere, LayerNorms with
//! bias), GPTBigCode (multi-query), GPT-NeoX (untied `embed_out`), and GPT-J, OPT and
//! BLOOM read with these rules (not every tensor of theirs is modelled).

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family};

/// GPT-2.
pub(crate) const GPT2: Family = Family {
    types: "gpt2",
    class: "GPT2Config",
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
    arch: Architecture {
        gated_mlp: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        layernorm_bias: true,
        ..Architecture::BASE
    },
    // Residual order and RoPE base: no tensors.
    inert: "use_parallel_residual rotary_emb_base",
    ..BASE
};

/// GPT-J: one LayerNorm feeding parallel attention and MLP.
pub(crate) const GPTJ: Family = Family {
    types: "gptj",
    class: "GPTJConfig",
    modelled: false,
    arch: Architecture {
        gated_mlp: false,
        layernorm_bias: true,
        layer_norms: 1,
        ..Architecture::BASE
    },
    ..BASE
};

/// OPT and BLOOM.
pub(crate) const OPT_BLOOM: Family = Family {
    types: "opt bloom",
    class: "OPTConfig",
    modelled: false,
    arch: Architecture {
        tied_embeddings: true,
        gated_mlp: false,
        layernorm_bias: true,
        ..Architecture::BASE
    },
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&GPT2, &GPT_BIGCODE, &GPT_NEOX, &GPTJ, &OPT_BLOOM];
