//! Apertus (`apertus`, ApertusConfig): a non-gated MLP whose xIELU activation keeps
//! four scalars per layer, per-head q/k norms; checked against the model transformers
//! builds from the class's defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// Apertus.
pub(crate) const APERTUS: Family = Family {
    types: "apertus",
    class: "ApertusConfig",
    arch: Architecture {
        gated_mlp: false,
        qk_norm: true,
        ..Architecture::BASE
    },
    hook: Some(apertus),
    ..BASE
};

/// transformers' XIELUActivation: `alpha_p` and `alpha_n` (parameters), `beta` and
/// `eps` (persistent buffers), in every layer's MLP.
fn apertus(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    if c.str("hidden_act") == Some("xielu") {
        d.arch.layer_scalars = 4;
    }
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&APERTUS];
