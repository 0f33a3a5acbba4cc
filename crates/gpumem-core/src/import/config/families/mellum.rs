//! Mellum (`mellum`, MellumConfig: JetBrains' Mellum MoE; transformers 5.23
//! `models/mellum/modeling_mellum.py`): per-head q/k RMSNorms (`q_norm`, `k_norm` of
//! one head's width), layers listed in `mlp_layer_types` as `sparse` (gated experts
//! and a router, no bias) or dense, sliding layers from `layer_types`; checked against
//! the model transformers builds from the class's defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family};

use super::deepseek::mlp_layer_types;

/// Mellum.
pub(crate) const MELLUM: Family = Family {
    types: "mellum",
    class: "MellumConfig",
    arch: Architecture {
        qk_norm: true,
        ..Architecture::BASE
    },
    hook: Some(mlp_layer_types),
    // MellumRotaryEmbedding: one table per layer type.
    rope_tables: 2,
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&MELLUM];
