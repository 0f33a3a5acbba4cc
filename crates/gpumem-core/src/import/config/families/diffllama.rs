//! DiffLlama (`diffllama`, DiffLlamaConfig: the Differential Transformer; transformers
//! 5.23 `models/diffllama/modeling_diffllama.py`): Llama's layers whose attention adds
//! four vectors of one head's width (`lambda_q1`, `lambda_k1`, `lambda_q2`,
//! `lambda_k2`, counted as per-layer scalars) and a `groupnorm` without weights; checked
//! against the model transformers builds from the class's defaults
//! (`tests/cases/transformers`).

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};

/// DiffLlama.
pub(crate) const DIFFLLAMA: Family = Family {
    types: "diffllama",
    class: "DiffLlamaConfig",
    // The lambdas' initialisation.
    inert: "lambda_std_dev",
    hook: Some(diffllama),
    ..BASE
};

fn diffllama(_: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    d.arch.layer_scalars = d
        .arch
        .head_dim
        .checked_mul(4)
        .ok_or_else(|| parse("head_dim: absurdly large".into()))?;
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&DIFFLLAMA];
