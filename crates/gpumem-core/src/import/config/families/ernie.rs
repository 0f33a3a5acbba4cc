//! ERNIE-4.5 (`ernie4_5`, Ernie4_5Config): the generic decoder as it is; and
//! ERNIE-4.5-MoE (`ernie4_5_moe`, Ernie4_5_MoeConfig; transformers 5.23
//! `models/ernie4_5_moe/modeling_ernie4_5_moe.py`): `Ernie4_5_MoeDecoderLayer` makes
//! layer `i` an MoE layer when `moe_layer_start_index ≤ i ≤ moe_layer_end_index` and
//! `(i + 1) % moe_layer_interval == 0`, the others a dense MLP of
//! `intermediate_size`; an MoE layer holds `moe_num_experts` gated experts of
//! `moe_intermediate_size`, the router, `Ernie4_5_MoeStatics`' fp32
//! `e_score_correction_bias` and one shared MLP `moe_intermediate_size ×
//! moe_num_shared_experts` wide. Both checked against the models transformers builds
//! from the classes' defaults (`tests/cases/transformers`).

use serde_json::Value;

use crate::arch::Moe;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};

/// ERNIE-4.5 (dense).
pub(crate) const ERNIE4_5: Family = Family {
    types: "ernie4_5",
    class: "Ernie4_5Config",
    ..BASE
};

/// ERNIE-4.5-MoE (ERNIE-4.5-21B-A3B, 300B-A47B).
pub(crate) const ERNIE4_5_MOE: Family = Family {
    types: "ernie4_5_moe",
    class: "Ernie4_5_MoeConfig",
    // Tied unless said (the class's default).
    arch: crate::arch::Architecture {
        tied_embeddings: true,
        ..crate::arch::Architecture::BASE
    },
    // The routing's normalisation floor.
    inert: "moe_norm_min",
    hook: Some(ernie_moe),
    ..BASE
};

/// The MoE layers by ERNIE's keys (Ernie4_5_MoeConfig's defaults where absent: 64
/// experts, 6 active, 1536 wide, 2 shared, from layer 1 to the last, every layer).
fn ernie_moe(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let layers = d.arch.layers;
    let experts = d.or_default(c, "moe_num_experts", 64)?;
    let active = d.or_default(c, "moe_k", 6)?;
    let width = d.or_default(c, "moe_intermediate_size", 1536)?;
    let shared = d.or_default(c, "moe_num_shared_experts", 2)?;
    let start = d.or_default(c, "moe_layer_start_index", 1)?;
    let interval = d.or_default(c, "moe_layer_interval", 1)?;
    // -1 (the class's default) is the last layer.
    let end = match c.get("moe_layer_end_index").filter(|v| !v.is_null()) {
        None => layers.saturating_sub(1),
        Some(v) => match v.as_i64() {
            Some(-1) => layers.saturating_sub(1),
            Some(n) => u64::try_from(n).map_err(|_| {
                parse(format!(
                    "moe_layer_end_index should be -1 or a layer, found {n}"
                ))
            })?,
            None => {
                return Err(parse(format!(
                    "moe_layer_end_index should be an integer, found {}",
                    Value::to_string(v)
                )));
            }
        },
    };
    if experts < 2 {
        return Ok(());
    }
    // Only the count of MoE layers matters (every = 1, the rest dense): the n = i + 1
    // in [start + 1, end + 1] that the interval divides.
    let last = end.min(layers.saturating_sub(1)).saturating_add(1);
    let per = |n: u64| n.checked_div(interval).unwrap_or(0);
    let moe_layers = if start >= last {
        0
    } else {
        per(last).saturating_sub(per(start))
    };
    d.arch.moe = Some(Moe {
        experts,
        active,
        expert_intermediate: width,
        shared_experts: u64::from(shared > 0),
        shared_intermediate: width
            .checked_mul(shared)
            .ok_or_else(|| parse("moe_num_shared_experts: absurdly large".into()))?,
        dense_layers: layers.saturating_sub(moe_layers),
        every: 1,
        correction_bias: true,
        ..Moe::BASE
    });
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&ERNIE4_5, &ERNIE4_5_MOE];
