//! A placement chosen, not only computed: when a model does not fit the card with
//! every layer on it, the flags that put as much as fits on the card and the rest in
//! host memory, with the host RAM they then need.
//!
//! llama.cpp ([`llama_cpp`]): the largest `--n-gpu-layers` of a dense model, the
//! smallest `--n-cpu-moe` of a MoE model (and, when even every block's experts in
//! host memory leave too much on the card, the largest `--n-gpu-layers` beside
//! them), each judged by the engine's own budget ([`crate::headline::Basis`]) at the
//! requested context and slots: the flags are the ones whose answer is "fits".
//!
//! llama.cpp chooses a placement itself: `--fit` (on by default, `common/common.h`
//! `fit_params = true`, target `fit_params_target` 1024 MiB free per device) runs
//! `common_params_fit_impl` (`common/fit.cpp`, ggml-org/llama.cpp at commit
//! 08033df02cc32f3706271c068aaeaeecf94922a1) when the user set neither
//! `--n-gpu-layers` nor `--override-tensor`: it measures the model and context at
//! each candidate (a dry run without allocation, `no_alloc`), keeps a context the user
//! gave, and
//! - for a dense model fills whole layers back to front (the output layer first, as
//!   `-ngl` does), by false position, to the largest count whose measured use is at
//!   most the free memory less the target: the largest `-ngl` that fits, the rule
//!   followed here;
//! - for a MoE model first puts every block's routed experts in host memory (one
//!   `-ot` pattern per block, `LAYER_FRACTION_MOE`), then, when that leaves a
//!   surplus, brings whole blocks back to the card front to back — the blocks whose
//!   experts stay on the host are the *last* ones, where `--n-cpu-moe N` keeps the
//!   *first* N on the host — and tries to fit part of one more block's FFN
//!   (`LAYER_FRACTION_UP`, `_GATE`, `_ATTN`).
//!
//! Where gpumem differs, and why: its answer is a flag to type (`--n-cpu-moe`), which
//! moves the same number of blocks' experts as `--fit` when the MoE blocks are alike,
//! but cannot express the partial block `--fit` may add (up to one block's FFN more on
//! the card); and it asks for the verdict "fits", beyond the engine's assumed lines'
//! uncertainty, where `--fit` takes the last count whose measurement is within its
//! target — so, on equal figures, it may leave more on the host than `--fit` would (the
//! blocks that uncertainty holds), never less.

#![deny(clippy::arithmetic_side_effects)]

pub mod accelerate;
pub mod device_map;
pub mod llama_cpp;
pub mod vllm;

use crate::catalogue::GpuCard;
use crate::engine::EngineParams;
use crate::error::EstimateError;
use crate::estimate::{Estimate, EstimateInput};
use crate::fit::{CardFit, Verdict, fit_card_reserve};
use crate::headline::{Basis, HostFit, Rule};

/// The placement to choose on `card` under the engine `params` names, when every
/// layer on the card does not fit and the engine has placement flags (llama.cpp);
/// `None` otherwise.
pub fn choose(
    input: &EstimateInput,
    est: &Estimate,
    params: &EngineParams,
    card: &GpuCard,
) -> Result<Option<llama_cpp::LlamaPlacement>, EstimateError> {
    if params.engine.is_none() || params.engine != crate::engine::find("llama.cpp") {
        return Ok(None);
    }
    llama_cpp::choose(input, est, params, card)
}

/// transformers' `device_map="auto"` on `card` (`--gpus` of them) under `--engine
/// transformers`: the map and each device's verdict ([`device_map::plan`]); `None`
/// under another engine or when there is nothing to place.
pub fn device_map(
    input: &EstimateInput,
    est: &Estimate,
    params: &EngineParams,
    card: &GpuCard,
) -> Result<Option<device_map::DeviceMapPlan>, EstimateError> {
    if params.engine.is_none() || params.engine != crate::engine::find("transformers") {
        return Ok(None);
    }
    device_map::plan(input, est, params, card)
}

/// vLLM's `--cpu-offload-gb` to choose on `card` under `--engine vllm`, when the
/// workload does not fit without it ([`vllm::choose`]); `None` otherwise.
pub fn cpu_offload(
    input: &EstimateInput,
    est: &Estimate,
    params: &EngineParams,
    card: &GpuCard,
) -> Result<Option<vllm::VllmOffload>, EstimateError> {
    if params.engine.is_none() || params.engine != crate::engine::find("vllm") {
        return Ok(None);
    }
    vllm::choose(input, est, params, card)
}

/// The card's fit and host memory under the engine `p` names (llama.cpp's and vLLM's
/// choices judge each candidate this way); `host` says what its host memory holds.
fn judge(
    host: &'static str,
    input: &EstimateInput,
    est: &Estimate,
    card: &GpuCard,
    p: &EngineParams,
) -> Result<(CardFit, Option<HostFit>), EstimateError> {
    let need = Basis::Engine(Box::new(p.clone())).need(input, est, card)?;
    let fit = fit_card_reserve(card, need.bytes, need.assumed, need.reserve);
    let held = HostFit::judge(need.host, need.bytes, input.ram, Some(card), host);
    Ok((fit, held))
}

/// Whether a candidate's verdict is "fits".
fn fits(f: &CardFit) -> bool {
    Verdict::of_fit(f) == Verdict::Fits
}
