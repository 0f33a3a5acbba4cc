//! Solar Open (`solar_open`, SolarOpenConfig: Upstage's Solar-Open-100B; transformers
//! 5.23 `models/solar_open/modeling_solar_open.py`): every layer an MoE layer
//! (`SolarOpenMoE`: `n_routed_experts` gated experts of `moe_intermediate_size`, one
//! shared MLP `moe_intermediate_size × n_shared_experts` wide, `SolarOpenTopkRouter`
//! with its fp32 `e_score_correction_bias`), q/k/v biases under `attention_bias` and
//! none on `o_proj`; checked against the model transformers builds from the class's
//! defaults (`tests/cases/transformers`).

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family, RouterBias};
use crate::import::config::json::Cfg;

/// Solar Open.
pub(crate) const SOLAR_OPEN: Family = Family {
    types: "solar_open",
    class: "SolarOpenConfig",
    router_bias: RouterBias::Correction,
    hook: Some(solar_open),
    ..BASE
};

fn solar_open(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    d.arch.o_bias = false;
    // SolarOpenDecoderLayer builds an MoE block in every layer, whatever
    // first_k_dense_replace says.
    if let Some(m) = d.arch.moe.as_mut()
        && m.dense_layers > 0
    {
        m.dense_layers = 0;
        d.warnings.push(
            "first_k_dense_replace: transformers' Solar Open builds every layer as MoE; counted so"
                .into(),
        );
    }
    c.touch(&["first_k_dense_replace"]);
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&SOLAR_OPEN];
