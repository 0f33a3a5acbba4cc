//! Arcee AFM (`arcee`, ArceeConfig: AFM-4.5B; transformers 5.23
//! `models/arcee/modeling_arcee.py`): a Llama-style decoder whose `ArceeMLP` is not
//! gated (`up_proj`, ReLU², `down_proj`, biases under `mlp_bias`); checked against the
//! model transformers builds from the class's defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family};

/// Arcee AFM.
pub(crate) const ARCEE: Family = Family {
    types: "arcee",
    class: "ArceeConfig",
    arch: Architecture {
        gated_mlp: false,
        ..Architecture::BASE
    },
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&ARCEE];
