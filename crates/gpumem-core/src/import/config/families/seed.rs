//! Seed-OSS (`seed_oss`, transformers' modeling_seed_oss.py `SeedOssAttention`): the
//! Llama decoder with biases on q, k and v under `attention_bias` and on `o_proj`
//! under its own `attention_out_bias`.

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// Seed-OSS.
pub(crate) const SEED_OSS: Family = Family {
    types: "seed_oss",
    class: "SeedOssConfig",
    hook: Some(seed_oss),
    ..BASE
};

fn seed_oss(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    d.arch.o_bias = c.flag("attention_out_bias") == Some(true);
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&SEED_OSS];
