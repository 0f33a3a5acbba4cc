//! Bamba (BambaConfig): attention at `attn_layer_indices`, a Mamba-2 mixer
//! (`mamba_expand` × hidden wide) in every other layer, a gated MLP in every layer.

use serde_json::Value;

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse, shown};

use crate::import::config::mixers::expand_mamba2;

/// Bamba.
pub(crate) const BAMBA: Family = Family {
    types: "bamba",
    class: "BambaConfig",
    hook: Some(bamba),
    // BambaConfig sets partial_rotary_factor 0.5 whatever the config says.
    rotary_fraction: 0.5,
    ..BASE
};

fn bamba(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let layers = d.arch.layers;
    let mut attention: Vec<u64> = Vec::new();
    match c.get("attn_layer_indices") {
        None | Some(Value::Null) => d.notes.push(
            "attn_layer_indices absent: every layer is a Mamba-2 layer (BambaConfig's default)"
                .into(),
        ),
        Some(Value::Array(list)) => {
            for x in list {
                let i = x.as_u64().filter(|i| *i < layers).ok_or_else(|| {
                    parse(format!(
                        "attn_layer_indices: {} is not a layer index below num_hidden_layers ({layers})",
                        shown(x)
                    ))
                })?;
                if !attention.contains(&i) {
                    attention.push(i);
                }
            }
        }
        Some(x) => {
            return Err(parse(format!(
                "attn_layer_indices should be a list of layer indices, found {}",
                shown(x)
            )));
        }
    }
    let mamba = layers.saturating_sub(attention.len() as u64);
    d.arch.mixer = Some(expand_mamba2(c, d, mamba)?);
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&BAMBA];
