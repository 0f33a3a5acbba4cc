//! vLLM's data parallelism (`--data-parallel-size`) and expert parallelism
//! (`--enable-expert-parallel`), read in vllm v0.19.0 and v0.27.1 (the same rules in
//! both), as they change one rank's figures.
//!
//! - Each data-parallel rank is an engine core of its own over tp × pp GPUs, with its
//!   own profile and its own KV pool (`vllm/v1/engine/core.py` `DPEngineCoreProc`):
//!   the figures here are one rank's, and the deployment needs tp × pp × dp GPUs.
//! - A MoE layer spans the data-parallel ranks: `vllm/model_executor/layers/fused_moe/
//!   config.py` `FusedMoEParallelConfig.make` flattens tp across dp
//!   (`flatten_tp_across_dp_and_pcp`: tp × dp ranks). Without expert parallelism each
//!   expert is split over those tp × dp ranks (`intermediate_size_per_partition`);
//!   with it (`use_ep` when tp × dp > 1 and `enable_expert_parallel`) ep_size = tp × dp,
//!   the layer's tp is 1 and each rank holds whole experts: `determine_expert_map`
//!   (0.19 `fused_moe/layer.py`, 0.27 `fused_moe/expert_map_manager.py`) gives
//!   ⌊E ÷ ep⌋ to every rank and one more to the first E mod ep ranks, so the most
//!   loaded rank holds ⌈E ÷ ep⌉. Attention, shared experts and the rest stay tp-split.
//! - With dp > 1 the default all-to-all backend, `allgather_reducescatter`
//!   (`vllm/config/parallel.py` `ParallelConfig.all2all_backend`), gathers every DP
//!   rank's tokens into each MoE layer (`device_communicators/all2all.py`
//!   `AgRsAll2AllManager.dispatch_router_logits`, `all_gatherv` over the DP group, or
//!   over the EP group under sequence-parallel MoE: ep with tp > 1 and dp > 1,
//!   `ParallelConfig.use_sequence_parallel_moe`, each rank's ⌈tokens ÷ tp⌉) and
//!   reduce-scatters the output; the chunking by `VLLM_MOE_DP_CHUNK_SIZE`
//!   (`DefaultMoERunner.use_dp_chunking`, 0.19) is only for the DeepEP low-latency,
//!   MoRI, FlashInfer and NIXL backends, and 0.27's runner has none. The profile's
//!   `_dummy_run` of max_num_batched_tokens agrees the token counts across the DP
//!   ranks (`v1/worker/dp_utils.py` `coordinate_batch_across_dp`), every rank running
//!   the same count, so the MoE layer sees dp × max_num_batched_tokens rows.
//! - vLLM refuses expert parallelism on a model without experts
//!   (`config/model.py` `ModelConfig._verify_with_expert_parallelism`: "Number of
//!   experts in the model must be greater than 0 when expert parallelism is enabled").

use super::flags::{DATA_PARALLEL_SIZE, ENABLE_EXPERT_PARALLEL};
use super::releases::VllmVersion;
use crate::arch::ParamClass;
use crate::engine::arith::{prod, sum};
use crate::engine::request::Ctx;
use crate::error::EstimateError;
use crate::estimate::EstimateInput;
use crate::units::share_ceil;

/// One rank's share of a MoE layer under vLLM's data and expert parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Parallel {
    /// Data-parallel ranks (engine cores).
    pub dp: u64,
    /// Expert parallelism in effect: the experts split whole over `ep_size` ranks.
    pub ep: bool,
    /// The expert-parallel group's size (1 without expert parallelism).
    pub ep_size: u64,
    /// The tp each routed expert is split over (tp × dp without expert parallelism,
    /// 1 with it).
    pub moe_tp: u64,
    /// Routed experts on the most loaded rank (all of them without expert parallelism).
    pub local_experts: u64,
    /// Routed experts per MoE layer (0 for a dense model).
    pub experts: u64,
}

impl Parallel {
    /// No data or expert parallelism: the one-engine rule.
    pub(super) fn none(input: &EstimateInput) -> Parallel {
        let experts = input.arch.and_then(|a| a.moe).map_or(0, |m| m.experts);
        Parallel {
            dp: 1,
            ep: false,
            ep_size: 1,
            moe_tp: input.tp.max(1),
            local_experts: experts,
            experts,
        }
    }

    /// Whether this changes anything from the one-engine rule.
    pub(super) fn active(&self) -> bool {
        self.dp > 1 || self.ep
    }

    /// The rows each MoE layer sees in the profile's forward of `tokens` tokens a
    /// rank: the DP ranks' tokens gathered (every rank runs the same count), each
    /// ⌈tokens ÷ tp⌉ under sequence-parallel MoE; a rank's own without DP.
    pub(super) fn moe_tokens(&self, tokens: u64, tp: u64) -> Result<u64, EstimateError> {
        if self.dp <= 1 {
            return Ok(tokens);
        }
        if self.ep && tp > 1 {
            return prod(&[self.dp, tp, tokens.div_ceil(tp)]);
        }
        prod(&[self.dp, tokens])
    }
}

/// Reads `--data-parallel-size` and `--enable-expert-parallel` for `version`, refusing
/// what vLLM refuses or what is not read here.
pub(super) fn plan(c: &Ctx, version: VllmVersion) -> Result<Parallel, EstimateError> {
    let p = c.params;
    let input = c.input;
    let dp = p.count(DATA_PARALLEL_SIZE.key()).unwrap_or(1).max(1);
    let asked_ep = p.on(ENABLE_EXPERT_PARALLEL.key());
    let mut par = Parallel::none(input);
    if dp == 1 && !asked_ep {
        return Ok(par);
    }
    if !matches!(version, VllmVersion::V029 | VllmVersion::V027 | VllmVersion::V019) {
        return Err(EstimateError::invalid(
            if asked_ep { ENABLE_EXPERT_PARALLEL.key() } else { DATA_PARALLEL_SIZE.key() },
            format!(
                "vllm@{}: data and expert parallelism are read in vLLM 0.19 and 0.27 only (0.29 assumed as 0.27) (FusedMoEParallelConfig, the all-gather dispatch and the DP ranks' profile); this release's were not: name vllm (0.27) or vllm@0.19",
                version.key()
            ),
        ));
    }
    if asked_ep && par.experts == 0 {
        return Err(EstimateError::invalid(
            ENABLE_EXPERT_PARALLEL.key(),
            "Number of experts in the model must be greater than 0 when expert parallelism is enabled: vLLM refuses expert parallelism on a dense model (ModelConfig._verify_with_expert_parallelism)",
        ));
    }
    if !p.devices.is_empty() {
        return Err(EstimateError::invalid(
            "card",
            "data or expert parallelism over several kinds of card is not modelled: name one card (every rank on it)",
        ));
    }
    let tp = input.tp.max(1);
    par.dp = dp;
    let flat = prod(&[tp, dp])?;
    if asked_ep && flat > 1 {
        par.ep = true;
        par.ep_size = flat;
        par.moe_tp = 1;
        par.local_experts = par.experts.div_ceil(flat);
    } else if par.experts > 0 {
        par.moe_tp = flat;
    }
    Ok(par)
}

/// Bytes of the routed experts' matrices in the whole model (the MLP class's
/// `experts.*` groups, each in its stored format: [`crate::arch::ModuleFormats::for_group`]).
pub(super) fn expert_bytes(input: &EstimateInput) -> Result<u64, EstimateError> {
    let Some(a) = input.arch else { return Ok(0) };
    if a.moe.is_none() {
        return Ok(0);
    }
    let formats = crate::estimate::module_formats(input)?;
    let mut total = 0u64;
    for t in a.tensors()? {
        if t.class != ParamClass::Mlp || !t.name.starts_with("experts.") || t.cols <= 1 {
            continue;
        }
        let one = formats.for_group(&t).matrix_bytes(t.rows, t.cols)?.bytes;
        total = sum(&[total, prod(&[one, t.count])?])?;
    }
    Ok(total)
}

/// The routed experts' bytes on one rank: as the estimate splits them (each expert
/// over tp, the stage's share of the layers), and as vLLM does under `par`.
pub(super) fn expert_shares(
    input: &EstimateInput,
    par: &Parallel,
) -> Result<(u64, u64), EstimateError> {
    let whole = expert_bytes(input)?;
    let layers = input.arch.map_or(1, |a| a.layers).max(1);
    let stage = layers.div_ceil(input.pp.max(1));
    let tp = input.tp.max(1);
    let estimate = share_ceil(whole, stage, layers.saturating_mul(tp));
    let rank = if par.ep {
        share_ceil(
            whole,
            stage.saturating_mul(par.local_experts),
            layers.saturating_mul(par.experts.max(1)),
        )
    } else {
        share_ceil(whole, stage, layers.saturating_mul(par.moe_tp))
    };
    Ok((estimate, rank))
}

/// What the DP all-gather holds in each MoE layer beyond one rank's own tokens, at
/// its widest: the gathered hidden states and router logits (fp32 assumed, the wider),
/// the top-k weights and ids (4 B each) and the fused output before its
/// reduce-scatter, over the `rows` the layer sees. 0 without DP.
pub(super) fn gathered(
    input: &EstimateInput,
    par: &Parallel,
    rows: u64,
) -> Result<u64, EstimateError> {
    let (Some(a), true) = (input.arch, par.dp > 1) else {
        return Ok(0);
    };
    let Some(m) = a.moe else { return Ok(0) };
    let b = input.compute_dtype.bytes();
    sum(&[
        prod(&[2, rows, a.hidden, b])?,
        prod(&[rows, m.experts, 4])?,
        prod(&[rows, m.active, 8])?,
    ])
}
