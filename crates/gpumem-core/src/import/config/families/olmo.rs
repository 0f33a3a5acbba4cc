//! OLMo-2 (Olmo2Config): q/k RMSNorms over the whole projection.

use crate::import::config::family::{BASE, Family, QkNorm};

/// OLMo-2.
pub(crate) const OLMO2: Family = Family {
    types: &["olmo2"],
    class: "Olmo2Config",
    qk_norm: QkNorm::Whole,
    ..BASE
};
