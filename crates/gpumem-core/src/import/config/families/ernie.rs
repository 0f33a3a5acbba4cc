//! ERNIE-4.5 (`ernie4_5`, Ernie4_5Config): the generic decoder as it is; checked
//! against the model transformers builds from the class's defaults
//! (`tests/cases/transformers`).

use crate::import::config::family::{BASE, Family};

/// ERNIE-4.5 (dense).
pub(crate) const ERNIE4_5: Family = Family {
    types: "ernie4_5",
    class: "Ernie4_5Config",
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&ERNIE4_5];
