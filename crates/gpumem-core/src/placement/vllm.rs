//! vLLM's `--cpu-offload-gb` chosen for a card ([`choose`]): the smallest whole number
//! of GiB whose answer is "fits", when the weights leave the pool too little.
//!
//! `--cpu-offload-gb` takes whole decoder-layer parameters off each GPU, first layer
//! first, until that many GiB are in pinned host memory (the rule the budget reads:
//! `engine::vllm`); the need falls as it grows, so a bisection over whole GiB finds
//! the smallest that fits, and one GiB less does not.

use serde::{Deserialize, Serialize};

use super::{fits, judge};
use crate::catalogue::GpuCard;
use crate::engine::{EngineParams, Value};
use crate::error::EstimateError;
use crate::estimate::{Estimate, EstimateInput};
use crate::fit::CardFit;
use crate::headline::{HOST_VLLM, HostFit};

/// The flag.
const KEY: &str = "cpu-offload-gb";

/// A `--cpu-offload-gb` chosen for the card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct VllmOffload {
    /// The flag to add to `vllm serve`, as typed (`--cpu-offload-gb 6`).
    pub flags: String,
    /// Its value, GiB.
    pub gib: u64,
    /// The card's fit with it (verdict "yes"; "no" when even every layer's parameters
    /// on the host leave too much on the card).
    pub fit: CardFit,
    /// The card's fit with one GiB less: not "yes", which is why the search stopped.
    pub next: Option<CardFit>,
    /// The pinned host memory it needs per node and its verdict against `--ram`.
    pub host: Option<HostFit>,
}

fn with(params: &EngineParams, gib: u64) -> EngineParams {
    let mut p = params.clone();
    p.set(KEY, (gib > 0).then(|| Value::Text(gib.to_string())));
    p
}

/// The smallest whole `--cpu-offload-gb` that fits `card` under vLLM with `params`,
/// when the workload does not fit without it and none was given; `None` otherwise
/// (or without the model's layers). Searched up to the GiB that hold every weight on
/// the device; when even that does not fit, it is the answer with its verdict "no".
pub fn choose(
    input: &EstimateInput,
    est: &Estimate,
    params: &EngineParams,
    card: &GpuCard,
) -> Result<Option<VllmOffload>, EstimateError> {
    // Over several cards vLLM's stage rule takes no `--cpu-offload-gb` (it refuses
    // the flag there): nothing to offer, the stage rule's verdict stands.
    if params.get(KEY).is_some() || input.arch.is_none() || params.devices.len() > 1 {
        return Ok(None);
    }
    let (none, _) = judge(HOST_VLLM, input, est, card, params)?;
    if fits(&none) {
        return Ok(None);
    }
    let hi = est.per_device_bytes.div_ceil(1 << 30).max(1);
    let ok =
        |g: u64| judge(HOST_VLLM, input, est, card, &with(params, g)).is_ok_and(|(f, _)| fits(&f));
    let gib = if ok(hi) {
        let (mut lo, mut top) = (1u64, hi);
        while lo < top {
            let mid = lo.saturating_add(top.saturating_sub(lo) / 2);
            if ok(mid) {
                top = mid;
            } else {
                lo = mid.saturating_add(1);
            }
        }
        lo
    } else {
        hi
    };
    let (fit, host) = judge(HOST_VLLM, input, est, card, &with(params, gib))?;
    let next = if fits(&fit) {
        Some(
            judge(
                HOST_VLLM,
                input,
                est,
                card,
                &with(params, gib.saturating_sub(1)),
            )?
            .0,
        )
    } else {
        None
    };
    Ok(Some(VllmOffload {
        flags: format!("--cpu-offload-gb {gib}"),
        gib,
        fit,
        next,
        host,
    }))
}
