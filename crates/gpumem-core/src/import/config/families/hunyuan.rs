//! Hunyuan dense (`hunyuan_v1_dense`, HunYuanDenseV1Config: Hunyuan-0.5B … 7B;
//! transformers' modeling_hunyuan_v1_dense.py): a Llama-style decoder whose
//! `HunYuanDenseV1Attention` always builds `query_layernorm` and `key_layernorm`, RMSNorms
//! of one head's width; checked against the model transformers builds from the class's
//! defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family};

/// Hunyuan dense.
pub(crate) const HUNYUAN_V1_DENSE: Family = Family {
    types: "hunyuan_v1_dense",
    class: "HunYuanDenseV1Config",
    arch: Architecture {
        qk_norm: true,
        ..Architecture::BASE
    },
    // The query/key norms are built whatever use_qk_norm says; the forward's switch.
    inert: "use_qk_norm",
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&HUNYUAN_V1_DENSE];
