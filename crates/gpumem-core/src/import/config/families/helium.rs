//! Helium (`helium`, HeliumConfig: Kyutai's Helium-1; transformers 5.23
//! `models/helium/modeling_helium.py`): a Llama-style decoder whose `HeliumAttention`
//! gives q/k/v a bias under `attention_bias` and `o_proj` none, whatever it says;
//! checked against the model transformers builds from the class's defaults
//! (`tests/cases/transformers`).

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// Helium.
pub(crate) const HELIUM: Family = Family {
    types: "helium",
    class: "HeliumConfig",
    hook: Some(helium),
    ..BASE
};

/// `o_proj` is bias-free: the generic reader's `attention_bias` on it undone.
fn helium(_: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    d.arch.o_bias = false;
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&HELIUM];
