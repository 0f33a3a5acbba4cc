//! EXAONE-4 (`exaone4`, Exaone4Config): the Llama decoder with per-head q/k norms;
//! checked against the model transformers builds from the class's defaults
//! (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family};

/// EXAONE-4.
pub(crate) const EXAONE4: Family = Family {
    types: "exaone4",
    class: "Exaone4Config",
    arch: Architecture {
        qk_norm: true,
        ..Architecture::BASE
    },
    // The pattern layer_types spells out.
    inert: "sliding_window_pattern",
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&EXAONE4];
