//! Vision towers counted from their own config (`vision_config`), with the
//! projector that feeds the language model: each family's counter is in its file
//! (the record's `tower`, found by the config's root `model_type`); here the bounds
//! they share. Kept in 16 bits and no part of the active parameters. Each formula is
//! checked against the model transformers builds (`tests/cases/transformers`).

use serde_json::Value;

use crate::error::EstimateError;

use super::json::{Cfg, parse};

/// The tower's sizes (`keys` with their defaults), each at most 2^20, as u128.
pub(crate) fn sizes<const N: usize>(
    tower: &Value,
    keys: [(&str, u64); N],
) -> Result<[u128; N], EstimateError> {
    let t = Cfg::new(tower);
    let mut out = [0u128; N];
    for (o, (k, d)) in out.iter_mut().zip(keys) {
        let v = t.uint(k)?.unwrap_or(d);
        if v > 1 << 20 {
            return Err(parse("vision_config: absurdly large".into()));
        }
        *o = u128::from(v);
    }
    Ok(out)
}

pub(crate) fn fit(n: u128) -> Result<u64, EstimateError> {
    u64::try_from(n).map_err(|_| parse("vision_config: absurdly large".into()))
}
