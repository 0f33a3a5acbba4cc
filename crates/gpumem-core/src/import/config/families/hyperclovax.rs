//! HyperCLOVA X (`hyperclovax`, HyperCLOVAXConfig; transformers 5.23
//! `models/hyperclovax/modeling_hyperclovax.py`): a Llama-style decoder whose layers add
//! `post_norm1` and `post_norm2` RMSNorms under `use_post_norm` (Peri-LN: four norms
//! per layer) and scale by muP multipliers (no tensors); checked against the model
//! transformers builds from the class's defaults (`tests/cases/transformers`).

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// HyperCLOVA X.
pub(crate) const HYPERCLOVAX: Family = Family {
    types: "hyperclovax",
    class: "HyperCLOVAXConfig",
    // The logits' scale (no tensor).
    inert: "logits_scaling",
    hook: Some(hyperclovax),
    ..BASE
};

fn hyperclovax(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let post = c.flag("use_post_norm").unwrap_or_else(|| {
        d.notes
            .push("use_post_norm absent: true assumed (HyperCLOVAXConfig's default)".into());
        true
    });
    if post {
        d.arch.layer_norms = 4;
    }
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&HYPERCLOVAX];
