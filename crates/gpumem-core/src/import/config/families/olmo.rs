//! OLMo (OlmoConfig, transformers' modeling_olmo.py: `OlmoLayerNorm`, "LayerNorm but
//! with no learnable weight or bias", before attention, before the MLP and at the end;
//! the Llama decoder otherwise), OLMo-2 (Olmo2Config) and OLMoE (OlmoeConfig,
//! transformers' modeling_olmoe.py: `q_norm` [heads × head_dim], `k_norm` [kv_heads ×
//! head_dim]): q/k RMSNorms over the whole projection; OLMoE's experts without shared
//! experts or router bias.

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family};

/// OLMo (OLMo-1B-hf, OLMo-7B-hf and their 0424 / 0724 releases).
pub(crate) const OLMO: Family = Family {
    types: "olmo",
    class: "OlmoConfig",
    arch: Architecture {
        nonparametric_norms: true,
        ..Architecture::BASE
    },
    // clip_qkv clamps the projections' outputs (no tensor).
    inert: "clip_qkv",
    ..BASE
};

/// OLMo-2.
pub(crate) const OLMO2: Family = Family {
    types: "olmo2",
    class: "Olmo2Config",
    arch: Architecture {
        qk_norm_whole: true,
        ..Architecture::BASE
    },
    ..BASE
};

/// OLMo-3: OLMo-2's layers, some with a window; `Olmo3RotaryEmbedding` keeps one
/// table per layer type.
pub(crate) const OLMO3: Family = Family {
    types: "olmo3",
    class: "Olmo3Config",
    rope_tables: 2,
    ..OLMO2
};

/// OLMoE.
pub(crate) const OLMOE: Family = Family {
    types: "olmoe",
    class: "OlmoeConfig",
    // clip_qkv clamps activations.
    inert: "clip_qkv",
    ..OLMO2
};

/// FlexOlmo (FlexOlmoConfig; transformers 5.23 `models/flex_olmo/modeling_flex_olmo.py`):
/// OLMo-2's layers (post-attention and post-feedforward RMSNorms, q/k norms over the
/// whole projection) with OLMoE's experts.
pub(crate) const FLEX_OLMO: Family = Family {
    types: "flex_olmo",
    class: "FlexOlmoConfig",
    ..OLMO2
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&OLMO, &OLMO2, &OLMO3, &OLMOE, &FLEX_OLMO];
