//! Training on many GPUs: what each data-parallel rank holds.
//!
//! `gpus / (tp × pp)` data-parallel ranks either hold replicas (DDP, which adds its
//! gradient buckets), or share the model states: DeepSpeed ZeRO partitions the
//! optimizer states (stage 1), the gradients (2) and the parameters (3) over them,
//! FSDP shards all three (within a node under `hybrid`). Sharded parameters are
//! gathered again for each wrapped block's forward and backward, and gradients are
//! reduced through buffers of their own: those are lines of their own here
//! (`training.grad_buckets`, `collectives.all_gather`, `collectives.reduce_scatter`).
//! What is offloaded leaves the device and is counted per node as host memory
//! (`host.*` lines, not part of the device's total).
//!
//! Every rule is read in the framework's own code: DeepSpeed 0.19.8
//! (`deepspeed/runtime/zero/config.py`, `offload_config.py`, `stage_1_and_2.py`,
//! `stage3.py`, `partitioned_param_coordinator.py`) and torch 2.11
//! (`torch/nn/parallel/distributed.py`, `torch/distributed/fsdp/_fully_shard/`).

use super::input::{Fsdp, Offload, Pipeline};
use super::*;

/// `reduce_bucket_size`: elements of one gradient bucket (DeepSpeedZeroConfig's
/// default, `pp_int(5e8)`, deepspeed/runtime/zero/config.py, 0.19.8).
pub const REDUCE_BUCKET_SIZE: u64 = 500_000_000;
/// `stage3_prefetch_bucket_size`: parameter elements fetched ahead of use (`pp_int(5e7)`).
pub const PREFETCH_BUCKET_SIZE: u64 = 50_000_000;
/// `stage3_max_live_parameters`: parameter elements resident per GPU (`pp_int(1e9)`).
pub const MAX_LIVE_PARAMETERS: u64 = 1_000_000_000;
/// `sub_group_size`: elements of the optimizer's partition stepped at a time (`pp_int(1e9)`).
pub const SUB_GROUP_SIZE: u64 = 1_000_000_000;
/// `offload_param.buffer_count` and `buffer_size` (elements): the pinned host buffers
/// parameters are swapped from NVMe through (DeepSpeedZeroOffloadParamConfig, 0.19.8).
pub const PARAM_SWAP_BUFFERS: (u64, u64) = (5, 100_000_000);
/// `offload_optimizer.buffer_count`: pinned fp32 buffers of the largest sub-group's
/// partition the optimizer states are swapped through (DeepSpeedZeroOffloadOptimizerConfig).
pub const OPTIMIZER_SWAP_BUFFERS: u64 = 4;

/// How the data-parallel ranks hold the model states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    /// One rank, or inference: nothing of this module applies.
    Single,
    /// Replicas under DDP.
    Ddp,
    /// DeepSpeed ZeRO stage 1, 2 or 3.
    Zero(u8),
    /// FSDP.
    Fsdp(Fsdp),
}

/// The ranks of a training run: the scheme, the data-parallel degree, the shard group.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    scheme: Scheme,
    /// Data-parallel ranks: gpus / (tp × pp).
    dp: u64,
    /// Ranks one copy of the model states is sharded over.
    shard: u64,
    /// GPUs per node.
    per_node: u64,
}

/// Checks the sharding keys against each other and against the GPUs.
pub(super) fn validate(i: &EstimateInput) -> Result<(), EstimateError> {
    if i.zero > 3 {
        return Err(EstimateError::invalid("zero", "use 1, 2 or 3"));
    }
    let sharded = i.zero > 0 || i.fsdp != Fsdp::None;
    if i.zero > 0 && i.fsdp != Fsdp::None {
        return Err(EstimateError::invalid(
            "zero",
            "DeepSpeed ZeRO and FSDP do not shard one model together: choose one",
        ));
    }
    if sharded && i.train == TrainMode::None {
        return Err(EstimateError::invalid(
            if i.zero > 0 { "zero" } else { "fsdp" },
            "shards a training run's states: set train (full, lora or qlora)",
        ));
    }
    if i.offload_optimizer != Offload::None && i.zero == 0 {
        return Err(EstimateError::invalid(
            "offload-optimizer",
            if i.fsdp == Fsdp::None {
                "is DeepSpeed's: set zero 1, 2 or 3"
            } else {
                "FSDP offloads parameters, gradients and the optimizer step together: use offload-param cpu"
            },
        ));
    }
    if i.offload_param != Offload::None {
        match (i.zero, i.fsdp) {
            (3, _) => {}
            (0, Fsdp::None) => {
                return Err(EstimateError::invalid(
                    "offload-param",
                    "needs zero 3 or fsdp",
                ));
            }
            (0, _) if i.offload_param == Offload::Nvme => {
                return Err(EstimateError::invalid(
                    "offload-param",
                    "FSDP offloads to the CPU only (CPUOffloadPolicy): use cpu",
                ));
            }
            (0, _) => {}
            _ => {
                return Err(EstimateError::invalid(
                    "offload-param",
                    "ZeRO partitions (and offloads) parameters at stage 3 only",
                ));
            }
        }
    }
    if i.nodes > i.gpus || !i.gpus.is_multiple_of(i.nodes) {
        return Err(EstimateError::invalid(
            "nodes",
            format!(
                "{} GPUs cannot be spread evenly over {} nodes",
                i.gpus, i.nodes
            ),
        ));
    }
    if i.fsdp == Fsdp::Hybrid {
        // Both at most MAX_DIM (checked before): the products cannot saturate.
        let per_node = i.gpus.checked_div(i.nodes).unwrap_or(i.gpus);
        if !per_node.is_multiple_of(i.tp.saturating_mul(i.pp)) {
            return Err(EstimateError::invalid(
                "fsdp",
                format!(
                    "hybrid shards within a node: {per_node} GPUs per node do not hold whole tp {} × pp {} groups",
                    i.tp, i.pp
                ),
            ));
        }
    }
    if i.fsdp != Fsdp::None && i.arch.is_none() {
        return Err(EstimateError::invalid(
            "fsdp",
            "needs the architecture (layers, hidden, …) to size the blocks it gathers",
        ));
    }
    // Both at most MAX_DIM (checked before): the products cannot saturate.
    let dp = i.gpus.checked_div(i.tp.saturating_mul(i.pp)).unwrap_or(1);
    for (key, degree) in [("cp", i.cp), ("ep", i.ep)] {
        if degree <= 1 {
            continue;
        }
        if i.train == TrainMode::None {
            return Err(EstimateError::invalid(
                key,
                "splits a training step (set train); serving engines' own parallelism is not modelled here",
            ));
        }
        if !dp.is_multiple_of(degree) {
            return Err(EstimateError::invalid(
                key,
                format!(
                    "{degree} ranks are taken from the data-parallel ranks, and {} GPUs / (tp {} × pp {}) = {dp} is not a multiple of {degree}",
                    i.gpus, i.tp, i.pp
                ),
            ));
        }
    }
    if i.cp > 1 && (i.arch.is_none() || i.context.is_none()) {
        return Err(EstimateError::invalid(
            "cp",
            "needs the architecture and the context to size what each rank holds of a sequence",
        ));
    }
    if i.ep > 1 {
        match i.arch.and_then(|a| a.moe) {
            None => {
                return Err(EstimateError::invalid(
                    "ep",
                    "splits a mixture of experts' routed experts: the architecture has none",
                ));
            }
            Some(m) if !m.experts.is_multiple_of(i.ep) => {
                return Err(EstimateError::invalid(
                    "ep",
                    format!(
                        "{} experts per layer do not split evenly over {} ranks",
                        m.experts, i.ep
                    ),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The routed experts' parameters, the MLP class's and the model's, per device under
/// tp/pp (`None` without a MoE): every MoE layer's experts, three matrices each with
/// a gated MLP (gate, up, down), else two, at the latent width where the MoE has one.
struct Experts {
    routed: u64,
    mlp: u64,
    all: u64,
}

fn experts(i: &EstimateInput) -> Result<Option<Experts>, EstimateError> {
    let Some(a) = i.arch else { return Ok(None) };
    let Some(m) = a.moe else { return Ok(None) };
    let w = super::weights::weight_breakdown(&a, i)?;
    let mlp: u64 = w
        .classes
        .iter()
        .filter(|x| x.class == ParamClass::Mlp)
        .map(|x| x.params)
        .sum();
    let all: u64 = w.classes.iter().map(|x| x.params).sum();
    let width = if m.latent > 0 { m.latent } else { a.hidden };
    let routed = [
        m.moe_layers(a.mlp_layer_count()),
        m.experts,
        if a.gated_mlp { 3 } else { 2 },
        width,
        m.expert_intermediate,
    ]
    .iter()
    .fold(1u64, |x, y| x.saturating_mul(*y))
    .min(mlp);
    Ok(Some(Experts { routed, mlp, all }))
}

/// A line's bytes less what expert parallelism takes off this rank: the routed
/// experts' share of the line (`share` of `whole` parameters) × (1 − 1/ep).
fn without_other_experts(bytes: u64, routed: u64, whole: u64, ep: u64) -> u64 {
    let expert_part = Split::part(bytes, routed, whole.max(1));
    let kept = Split::part(expert_part, 1, ep);
    bytes.saturating_sub(expert_part.saturating_sub(kept))
}

impl Plan {
    /// The plan of a (validated) input.
    pub(super) fn new(i: &EstimateInput) -> Plan {
        let dp = i
            .gpus
            .checked_div(i.tp.saturating_mul(i.pp))
            .unwrap_or(1)
            .max(1);
        let per_node = i.gpus.checked_div(i.nodes).unwrap_or(i.gpus).max(1);
        let scheme = match (i.train, i.zero, i.fsdp) {
            (TrainMode::None, _, _) => Scheme::Single,
            (_, 1..=3, _) => Scheme::Zero(i.zero),
            (_, _, f) if f != Fsdp::None => Scheme::Fsdp(f),
            _ if dp > 1 => Scheme::Ddp,
            _ => Scheme::Single,
        };
        let shard = match scheme {
            Scheme::Zero(_) | Scheme::Fsdp(Fsdp::Full | Fsdp::GradOp) => dp,
            // A node's ranks share one copy (the validation made them whole groups).
            Scheme::Fsdp(_) => per_node
                .checked_div(i.tp.saturating_mul(i.pp))
                .unwrap_or(1)
                .max(1),
            _ => 1,
        };
        Plan {
            scheme,
            dp,
            shard,
            per_node,
        }
    }

    /// A rank's share of a model-state line that tp/pp already split to `device`
    /// bytes: divided by the shard group where the scheme partitions it, 0 where it
    /// is offloaded, else unchanged.
    pub(super) fn state(&self, i: &EstimateInput, key: LineKey, device: u64) -> u64 {
        let shard = |b: u64| Split::part(b, 1, self.shard);
        let off_opt = i.offload_optimizer != Offload::None;
        let off_param = i.offload_param != Offload::None;
        let optimizer_side = matches!(
            key,
            LineKey::TrainingOptimizer | LineKey::TrainingMasterWeights | LineKey::OptimizerStep
        );
        match self.scheme {
            Scheme::Single | Scheme::Ddp => device,
            Scheme::Fsdp(_) if off_param => 0,
            // FSDP2's mixed precision (MixedPrecisionPolicy.param_dtype): the sharded
            // parameters are the fp32 copy the optimizer steps, cast to the compute
            // dtype only as they are gathered, and their gradients arrive in that fp32
            // dtype (`foreach_reduce` casts the reduced output to the parameters'
            // dtype): no 16-bit shard is kept, and the gradients' shard is fp32.
            Scheme::Fsdp(_) if fsdp_mixed_precision(i) && key.group() == Group::Weights => 0,
            Scheme::Fsdp(_) if fsdp_mixed_precision(i) && key == LineKey::TrainingGradients => {
                let g = i.grad_dtype.unwrap_or(i.compute_dtype).bytes();
                Split::part(device, 4, g.saturating_mul(self.shard))
            }
            Scheme::Fsdp(_) => shard(device),
            Scheme::Zero(_) if optimizer_side && off_opt => 0,
            Scheme::Zero(_) if optimizer_side => shard(device),
            // Stage 2 and 3 reduce each gradient into its owner's partition; with
            // the optimizer offloaded that partition lives on the host
            // (`single_partition_of_fp32_groups[i].grad`, stage_1_and_2.py
            // initialize_optimizer_states; stage3.py `grad_partitions_flat_buffer` on
            // the offload device).
            Scheme::Zero(s) if key == LineKey::TrainingGradients && s >= 2 => {
                if off_opt {
                    0
                } else {
                    shard(device)
                }
            }
            // Parameters below `stage3_param_persistence_threshold` (1e5 elements: the
            // norms) stay whole on every rank (`param_persistence_threshold`, config.py).
            Scheme::Zero(3) if key == LineKey::WeightsNorms => device,
            Scheme::Zero(3)
                if key.group() == Group::Weights || key == LineKey::TrainingAdapters =>
            {
                if off_param { 0 } else { shard(device) }
            }
            Scheme::Zero(_) => device,
        }
    }

    /// Whether the ranks are DDP replicas.
    pub(super) fn is_ddp(&self) -> bool {
        self.scheme == Scheme::Ddp
    }

    /// Whether this plan changes anything (training on more than one data-parallel
    /// rank, or any ZeRO / FSDP setting).
    fn active(&self) -> bool {
        self.scheme != Scheme::Single
    }
}

/// Whether FSDP runs with a mixed-precision policy: full training of 16-bit compute
/// with fp32 master weights, which FSDP2 keeps as its fp32 sharded parameters.
fn fsdp_mixed_precision(i: &EstimateInput) -> bool {
    i.fsdp != Fsdp::None
        && i.train == TrainMode::Full
        && i.master_weights
        && i.compute_dtype != Dtype::F32
}

/// Parameters per device of one wrapped block and of what stays outside the blocks
/// (embeddings, lm_head, towers: the root unit FSDP and ZeRO gather as one), and of
/// everything but the persistent norms.
struct Units {
    block: u64,
    root: u64,
    all: u64,
    norms: u64,
    /// The embeddings' parameters and lm_head's (0 when tied: the embeddings are it).
    emb: u64,
    head: u64,
    tied: bool,
    /// ZeRO-3 gathers module by module (`fetch_sub_module`: each module's own
    /// parameters): the largest of the embeddings, lm_head and a whole block (a
    /// block's largest linear is smaller, so this never undercounts).
    module: u64,
}

fn units(
    i: &EstimateInput,
    split: &Split,
    params: Option<u64>,
) -> Result<Option<Units>, EstimateError> {
    let Some(a) = i.arch else {
        // Parameter-count mode: the blocks are unknown, the whole count is.
        return Ok(params.map(|p| Units {
            block: 0,
            root: 0,
            all: Split::part(p, 1, split.pp.saturating_mul(split.tp)),
            norms: 0,
            emb: 0,
            head: 0,
            tied: false,
            module: 0,
        }));
    };
    let w = super::weights::weight_breakdown(&a, i)?;
    let of = |c: ParamClass| -> u64 {
        w.classes
            .iter()
            .filter(|x| x.class == c)
            .map(|x| x.params)
            .sum()
    };
    let per = |n: u64, d: u64| n.div_ceil(d.max(1));
    let mlp_layers = match a.moe {
        Some(m) => m.moe_layers(a.mlp_layer_count()).max(1),
        // Dividing every MLP parameter by the MoE layers alone keeps the dense
        // layers' share in too: the largest block is never undercounted.
        None => a.mlp_layer_count(),
    };
    // Expert parallelism: a block holds 1/ep of its routed experts.
    let mlp_rank = match experts(i)? {
        Some(e) if i.ep > 1 => without_other_experts(e.mlp, e.routed, e.mlp, i.ep),
        _ => of(ParamClass::Mlp),
    };
    let block_whole = per(of(ParamClass::Attention), a.attention_layers())
        .saturating_add(per(mlp_rank, mlp_layers))
        .saturating_add(per(of(ParamClass::Norms), a.layers));
    let block = Split::part(block_whole, 1, split.tp);
    let emb = Split::part(of(ParamClass::Embeddings), 1, split.tp);
    let head = Split::part(of(ParamClass::LmHead), 1, split.tp);
    let other = Split::part(
        of(ParamClass::Tower).saturating_add(of(ParamClass::Mtp)),
        1,
        split.tp,
    );
    // Embeddings sit on the first stage, lm_head on the last.
    let root = if split.pp > 1 {
        emb.max(head)
    } else {
        emb.saturating_add(head)
    }
    .saturating_add(other);
    let layered = split
        .layered(of(ParamClass::Attention), true)
        .saturating_add(split.layered(mlp_rank, true));
    Ok(Some(Units {
        block,
        root,
        all: layered.saturating_add(root),
        norms: split.layered(of(ParamClass::Norms), false),
        emb,
        head,
        tied: a.tied_embeddings,
        module: emb.max(head).max(block),
    }))
}

/// With LoRA, the gradients a unit reduce-scatters are its adapters' (FSDP2 reduces
/// only parameters with a gradient, `FSDPParamGroup.post_backward`): a decoder
/// block's share of the adapters, or lm_head's adapter in the root unit when it is
/// targeted. `None` for full training (every parameter of the unit).
fn trainable_units(i: &EstimateInput, trainable: u64, split: &Split) -> Option<u64> {
    if !i.train.adapters() {
        return None;
    }
    let a = i.arch?;
    let per_block = Split::part(trainable, 1, a.layers.max(1).saturating_mul(split.tp));
    let head = match LoraTargets::parse("lora-targets", &i.lora_targets) {
        Ok(t) if t.lm_head => Split::part(
            i.lora_rank.saturating_mul(a.hidden.saturating_add(a.vocab)),
            1,
            split.tp,
        ),
        _ => 0,
    };
    Some(per_block.max(head))
}

/// What the training loop still holds of the loss's tensors at the optimizer step, on
/// this rank (torchtune 0.1's `logits`: [`crate::training::Loss::kept_through_step`]),
/// split as the logits line is.
fn kept_through_step(i: &EstimateInput, split: &Split) -> Result<u64, EstimateError> {
    match (i.arch, i.context) {
        (Some(a), Some(seq)) if i.train != TrainMode::None && !i.optimizer_in_backward => {
            Ok(Split::part(
                i.loss.kept_through_step(seq, i.sequences, a.vocab)?,
                1,
                split.tp.saturating_mul(i.cp),
            ))
        }
        _ => Ok(0),
    }
}

/// FSDP2's other buffers at the step's peak, beyond the lines already built (the
/// gradients, activations, logits and the parameters gathered at the backward's
/// start): the `collectives.reduce_scatter` line. A rank's step peaks at one of three
/// moments, each read in torch 2.11's `torch/distributed/fsdp/_fully_shard/`:
///
/// - the backward's start: the activations and logits, the root and 2 blocks
///   gathered, and lm_head's unsharded gradient, which the root reduces only at the
///   backward's end (no sharded gradient exists yet);
/// - the forward's first block: the root's flat all-gather buffer is still held beside
///   its gathered parameters while the block's are gathered (FSDPParamGroup
///   `wait_for_unshard` frees the previous unit's buffer only after the next unit's
///   copy-out: `all_gather_state`), 2 × (root + block), before any activation;
/// - the backward's end: every block's sharded gradients, the last block's
///   reduce-scatter input (kept in `reduce_scatter_state` until the next
///   `post_backward`), and the root's unsharded gradients — a tied embedding's two
///   and their sum beside the gathered root (autograd's InputBuffer::add sums them
///   out of place), then `foreach_reduce`'s copy-in: the gradients and the
///   reduce-scatter input in reduce_dtype together (`unsharded_grads.clear()` frees
///   the gradients before the output, the root's sharded gradients, is allocated).
///
/// The line is the highest of the three less what the other lines count (never
/// below 0): the other lines keep the gradients beside the backward's start, when the
/// step has not made them yet, so the sum errs by at most the sharded gradients,
/// upward.
#[allow(clippy::too_many_arguments)]
fn fsdp_peak(
    i: &EstimateInput,
    f: Fsdp,
    u: &Units,
    trainable: u64,
    split: &Split,
    shard: u64,
    gathered_at_start: u64,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    let grads = b.device(LineKey::TrainingGradients);
    let act = b.device(LineKey::Activations);
    let logits = b.device(LineKey::Logits);
    let grad_dtype = if i.train.adapters() {
        i.lora_dtype
    } else {
        i.grad_dtype.unwrap_or(i.compute_dtype)
    };
    let (p, g) = (i.compute_dtype.bytes(), grad_dtype.bytes());
    let reduce = i.reduce_dtype.unwrap_or(grad_dtype);
    let r = reduce.bytes();
    let bytes = |n: u64, each: u64| n.saturating_mul(each);
    // The root's gradients: every root parameter's in full training; with LoRA only an
    // adapter on lm_head has one (FSDP2 reduces parameters with a gradient,
    // FSDPParamGroup.post_backward). A block's gradients: its parameters', or its share
    // of the adapters.
    let lm_head_adapter = match LoraTargets::parse("lora-targets", &i.lora_targets) {
        Ok(t) if t.lm_head && i.train.adapters() => i.arch.map_or(0, |a| {
            Split::part(
                i.lora_rank.saturating_mul(a.hidden.saturating_add(a.vocab)),
                1,
                split.tp,
            )
        }),
        _ => 0,
    };
    let (root_train, head_train, block_train) = match trainable_units(i, trainable, split) {
        Some(per_block) => (lm_head_adapter, lm_head_adapter, per_block),
        None => (u.root, if u.tied { u.emb } else { u.head }, u.block),
    };
    let full = i.train == TrainMode::Full;
    let start = act
        .saturating_add(logits)
        .saturating_add(bytes(gathered_at_start, p))
        .saturating_add(bytes(head_train, g));
    let first_block = bytes(u.root.saturating_add(u.block), p).saturating_mul(2);
    let root_sum = if full && u.tied {
        bytes(u.root, p).saturating_add(bytes(u.emb, g).saturating_mul(3))
    } else {
        bytes(u.root, p).saturating_add(bytes(root_train, g))
    };
    let root_reduce = bytes(root_train, g.saturating_add(r));
    let g_shard = if fsdp_mixed_precision(i) { 4 } else { g };
    let end = grads
        .saturating_sub(bytes(Split::part(root_train, 1, shard), g_shard))
        .saturating_add(bytes(block_train, r))
        .saturating_add(root_sum.max(root_reduce));
    // The optimizer step: the sharded gradients and AdamW's foreach temporaries on the
    // shards. Under FSDP2's mixed precision the sharded parameters are the fp32 copy
    // and their gradients arrive in fp32 (`foreach_reduce` casts the output to the
    // parameters' dtype): no separate master update, so the estimate's fp32 gradient
    // copy for a master update is not made here.
    let state_dtype = if full && i.master_weights && i.compute_dtype != Dtype::F32 {
        Dtype::F32
    } else if i.train.adapters() {
        i.lora_dtype
    } else {
        i.compute_dtype
    };
    let kept = kept_through_step(i, split)?;
    let step = grads
        .saturating_add(Split::part(
            split.layered(
                i.optimizer.step_temporary_bytes(trainable, state_dtype)?,
                true,
            ),
            1,
            shard,
        ))
        .saturating_add(kept);
    for l in b
        .lines
        .iter_mut()
        .filter(|l| l.key == LineKey::OptimizerStep)
    {
        l.device_bytes = 0;
        l.formula
            .push_str("; per rank under FSDP: within the FSDP line's highest moment");
    }
    let peak = start.max(first_block).max(end).max(step);
    let counted = grads
        .saturating_add(act)
        .saturating_add(logits)
        .saturating_add(bytes(gathered_at_start, p));
    let extra = peak.saturating_sub(counted);
    let which = if peak == start {
        "the backward's start"
    } else if peak == first_block {
        "the forward's first block"
    } else if peak == end {
        "the backward's end"
    } else {
        "the optimizer step"
    };
    b.line(
        LineKey::CollectivesReduceScatter,
        "FSDP's unsharded gradients and buffers at the step's peak, beyond the lines above",
        extra,
        extra,
        Kind::Computed,
        true,
        format!(
            "the peak is {which}: max(backward's start {start} B = activations {act} + logits {logits} + the gathered {} × {p} B + lm_head's unsharded gradient {head_train} × {g} B; forward's first block {first_block} B = 2 × (root {} + block {}) × {p} B; backward's end {end} B = the blocks' sharded gradients + the last block's reduce-scatter input {} × {r} B + max(the root gathered and its unsharded gradients{} {root_sum} B, the root's reduce-scatter {root_train} × ({g} B + {r} B {}) {root_reduce} B); optimizer step {step} B = the sharded gradients + the step's temporaries on the shards + the loss's tensors the training loop keeps through it {kept} B) − the gradients, activations, logits and gathered parameters counted above {counted} B (FSDP2, torch 2.11: see the method)",
            gathered_at_start,
            u.root,
            u.block,
            block_train,
            if full && u.tied {
                ", a tied embedding's two and their sum,"
            } else {
                ""
            },
            reduce.name()
        ),
        &[
            ("ranks sharing one copy", shard.to_string()),
            ("reduce-dtype", reduce.name().into()),
            ("block gradients", block_train.to_string()),
            (
                "fsdp",
                match f {
                    Fsdp::GradOp => "grad-op",
                    Fsdp::Hybrid => "hybrid",
                    _ => "full",
                }
                .into(),
            ),
        ],
    );
    Ok(())
}

/// DeepSpeed ZeRO stage 1 and 2's highest moment beyond its model states
/// (`deepspeed/runtime/zero/stage_1_and_2.py`, DeepSpeedZeroOptimizer, 0.19.8), in place
/// of the one-device optimizer step:
///
/// - the backward: the gradient hooks copy each gradient into the contiguous bucket
///   (`setup_buckets`, allocated at the first hook) and free it once its bucket is
///   reduced, so the backward holds the bucket, a tied embedding's two gradients and
///   their out-of-place sum (the last gradient to arrive) and, at stage 1, every other
///   gradient (kept whole until the step); at stage 2, once the bucket has been
///   reduced before the backward's end (more trainable elements than
///   `reduce_bucket_size`), the rank's gradient partition (`grads_in_partition`,
///   `copy_grads_in_partition`) as well; an untied lm_head's gradient arrives with
///   the logits' gradients and the activations still held;
/// - the step: the partition's gradients, and 8 B per partition element: the fp64 copy
///   of each gradient for the norm (`get_grad_norm_direct`, `get_norm_dtype()` is
///   float64 where the device has it), then the fp32 gradient partition
///   (`single_grad_partition`) with AdamW's foreach temporary of one fp32 state.
///
/// Stage 3 (`stage3.py`, `partition_parameters.py`) keeps its gradient partition
/// (`grad_partitions_flat_buffer`) and its bucket from construction, and gathers each
/// module's parameters around its forward and backward: the backward ends with the
/// embedding gathered beside a tied embedding's two gradients and their sum; the
/// gathering's highest moment holds the gathered parameters (that line) with the
/// activations and logits; the step, 8 B per partition element (the fp32 gradients of
/// its sub-group, `_prepare_fp32_grad_for_sub_group`, and AdamW's foreach temporary).
fn zero_peak(
    i: &EstimateInput,
    stage: u8,
    bucket: u64,
    trainable: u64,
    split: &Split,
    shard: u64,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    let grads = b.device(LineKey::TrainingGradients);
    let act = b.device(LineKey::Activations);
    let logits = b.device(LineKey::Logits);
    let g = i.grad_dtype.unwrap_or(i.compute_dtype).bytes();
    let (input_emb, emb, head) = match i.arch {
        Some(a) => {
            let e = checked_product(&[a.vocab, a.hidden], "embedding")?;
            if a.tied_embeddings {
                (e, e, 0)
            } else {
                (e, 0, e)
            }
        }
        None => (0, 0, 0),
    };
    // The backward's last gradient, the input embedding's, made before its hook copies
    // it into the bucket; tied, lm_head's beside it and their out-of-place sum.
    let last_g = input_emb.saturating_mul(g);
    let tail = if emb > 0 {
        last_g.saturating_mul(3)
    } else {
        last_g
    };
    // Stage 2 allocates its gradient partition at the first reduction of the bucket:
    // before the input embedding's gradient (the backward's last) arrives only if the
    // other gradients overflow the bucket.
    let gathered = b.device(LineKey::CollectivesAllGather);
    let p = i.compute_dtype.bytes();
    let partition = split.layered(trainable, true).div_ceil(shard.max(1));
    // Stage 1 and 2's gradients at the step: every parameter touching the rank's
    // partition, whole, and its step's temporaries (the most loaded rank's).
    let largest = i.arch.map_or(Ok(0), |a| {
        a.tensors().map(|t| {
            t.iter()
                .filter(|t| !matches!(t.class, ParamClass::Embeddings | ParamClass::LmHead))
                .map(|t| t.rows.saturating_mul(t.cols))
                .max()
                .unwrap_or(0)
        })
    })?;
    let (whole, step_temps) = grad_partitions(
        split.layered(trainable, true),
        input_emb,
        head,
        largest,
        shard,
        g,
    );
    let whole = whole.saturating_mul(g).max(grads);
    // Stage 3's gradient partition is held from construction, like the states: not
    // part of the moments below.
    let (held, step_grads, moving) = match stage {
        1 => (grads.saturating_sub(last_g), whole, grads),
        2 if trainable.saturating_sub(input_emb) > REDUCE_BUCKET_SIZE => (whole, whole, grads),
        2 => (0, whole, grads),
        _ => (emb.saturating_mul(p), 0, 0),
    };
    let backward_end = bucket.saturating_add(held).saturating_add(tail);
    let backward_start = bucket
        .saturating_add(act)
        .saturating_add(logits)
        .saturating_add(head.saturating_mul(g))
        .saturating_add(gathered);
    let kept = kept_through_step(i, split)?;
    let step = if stage == 3 {
        bucket.saturating_add(partition.saturating_mul(8))
    } else {
        step_temps.max(partition.saturating_mul(8))
    }
    .saturating_add(kept);
    let peak = backward_end.max(backward_start).max(step);
    let counted = moving
        .saturating_add(act)
        .saturating_add(logits)
        .saturating_add(bucket)
        .saturating_add(gathered);
    let extra = peak.saturating_sub(counted);
    let which = if peak == backward_end {
        "the backward's end"
    } else if peak == backward_start {
        "the backward's start"
    } else {
        "the optimizer step"
    };
    let formula = format!(
        "per rank under ZeRO-{stage}: the peak is {which}: max(backward's end {backward_end} B = the bucket {bucket} B + the gradients held (stage 3: the embedding gathered) {held} B + the input embedding's gradient, the last (tied: with lm_head's and their sum, 3 ×) {tail} B; backward's start {backward_start} B = the bucket + activations {act} B + logits {logits} B + an untied lm_head's gradient {head} × {g} B + the parameters gathered {gathered} B; optimizer step {step} B = stage 1 and 2: the gradients of every parameter touching the most loaded rank's partition, whole (up to {step_grads} B), with the fp64 copy of its largest piece for the gradients' norm or its flat copy and fp32 gradient partition, then 8 B × {partition} partition elements, the fp32 gradient partition and AdamW's foreach temporary; stage 3: the bucket + those 8 B; + the loss's tensors the training loop keeps through it {kept} B) − the gradients, activations, logits, bucket and gathered parameters counted above {counted} B (deepspeed/runtime/zero/{}, DeepSpeed 0.19.8)",
        if stage == 3 {
            "stage3.py, partition_parameters.py"
        } else {
            "stage_1_and_2.py"
        }
    );
    if let Some(l) = b.lines.iter_mut().find(|l| l.key == LineKey::OptimizerStep) {
        l.device_bytes = extra;
        l.formula = formula;
    } else {
        b.line(
            LineKey::OptimizerStep,
            "Optimizer step beyond the freed activations",
            extra,
            extra,
            Kind::Computed,
            true,
            formula,
            &[("ranks sharing one copy", shard.to_string())],
        );
    }
    Ok(())
}

/// ZeRO stage 1 and 2's gradients at the step, for the most loaded rank:
/// `(elements, bytes)` — the elements of every parameter touching a rank's partition,
/// whole (stage 2 copies them into `grads_in_partition` whole, `copy_grads_in_partition`;
/// stage 1 keeps their gradients), and those gradients' bytes with the step's largest
/// moment: the fp64 copy of the partition's largest piece for the norm
/// (`get_grad_norm_direct`), or the partition flattened in the gradients' dtype and cast
/// to fp32 (`step`: `flatten`, `.to(fp32)`) — stage_1_and_2.py, DeepSpeed 0.19.8.
///
/// The parameters in the order DeepSpeed flattens them (the model's): the input
/// embedding first, the decoder's tensors (none larger than `largest`), an untied
/// lm_head last; a partition boundary inside the decoder's tensors may cut one of at
/// most `largest` elements, counted whole.
fn grad_partitions(
    total: u64,
    emb: u64,
    head: u64,
    largest: u64,
    ranks: u64,
    g: u64,
) -> (u64, u64) {
    let last = ranks.saturating_sub(1);
    let part = total.div_ceil(ranks.max(1));
    let rest_end = total.saturating_sub(head);
    let (mut most, mut most_bytes) = (0u64, 0u64);
    // Ranks whose partitions hold the same kind of pieces give the same figures: the
    // ranks at the embedding's end, at the decoder's start and end, at lm_head's start,
    // the first and the last.
    let at = |pos: u64| pos.checked_div(part).unwrap_or(0).min(last);
    let candidates = [
        0,
        last,
        at(emb.saturating_sub(1)),
        at(emb),
        at(emb).saturating_add(1).min(last),
        at(rest_end.saturating_sub(1)),
        at(rest_end),
    ];
    for r in candidates {
        let lo = r.saturating_mul(part);
        let hi = lo.saturating_add(part).min(total);
        if lo >= hi {
            continue;
        }
        let mut whole = 0u64;
        let mut piece = 0u64;
        if lo < emb {
            whole = emb;
            piece = hi.min(emb).saturating_sub(lo);
        }
        let (a, z) = (lo.max(emb), hi.min(rest_end));
        if a < z {
            let mut n = z.saturating_sub(a);
            if a > emb {
                n = n.saturating_add(largest);
            }
            if z < rest_end {
                n = n.saturating_add(largest);
            }
            whole = whole.saturating_add(n.min(rest_end.saturating_sub(emb)));
            piece = piece.max(largest.min(z.saturating_sub(a)));
        }
        if hi > rest_end {
            whole = whole.saturating_add(head);
            piece = piece.max(hi.saturating_sub(lo.max(rest_end)));
        }
        let moment = whole.saturating_mul(g).saturating_add(
            piece
                .saturating_mul(8)
                .max(part.saturating_mul(g.saturating_add(4))),
        );
        if moment > most_bytes {
            (most, most_bytes) = (whole, moment);
        }
    }
    (most, most_bytes)
}

/// Context and expert parallelism's own buffers, one layer at a time.
///
/// Context parallelism (torch 2.11 `torch/distributed/tensor/experimental/
/// _context_parallel/_attention.py`, with its defaults `rotate_method=ALL_GATHER`,
/// `convert_to_f32=True`): each rank holds 1/cp of every sequence (two load-balanced
/// chunks); the ring attention's backward (`_templated_ring_attention_backward`, the
/// larger of its two passes) holds the whole sequence's K and V all-gathered once
/// (`_AllGatherRotater`), the local K and V concatenated for the exchange, fp32
/// accumulators of dQ, dK and dV (`grad_query`, `grad_key`, `grad_value`), and dK,
/// dV concatenated, sent and received around the ring (`_AllToAllRotater`).
///
/// Expert parallelism (torchtitan `torchtitan/distributed/expert_parallel.py`,
/// `ExpertParallel._token_dispatch`): a MoE layer's routed tokens (tokens × top-k ×
/// hidden) go through `all_to_all_single_autograd` to the ranks of their experts and
/// are regrouped by local expert (`_permute`), so the received tokens and their
/// regrouped copy are live together; with balanced routing a rank receives what it
/// sends — an assumption: an imbalanced router sends more to some ranks.
fn parallel_buffers(
    i: &EstimateInput,
    split: &Split,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    let (Some(a), Some(s)) = (i.arch, i.context) else {
        return Ok(());
    };
    let v = i.compute_dtype.bytes();
    let seqs = i.sequences;
    if i.cp > 1 {
        let c = i.cp;
        let local = s.div_ceil(c);
        // The query heads: torchtitan repeats K and V to every query head before its
        // attention (`repeat_kv`), so the ring carries heads × head_dim; with K/V
        // heads it would carry less, never more.
        let heads = a.heads.div_ceil(split.tp.max(1));
        let width = checked_product(&[seqs, heads, a.head_dim], "context parallel")?;
        let gathered = checked_product(&[2, s, v], "context parallel")?;
        let local_kv = checked_product(&[2, local, v], "context parallel")?;
        let accumulators = checked_product(&[3, local, 4], "context parallel")?;
        let rotated = checked_product(&[4, local, 4], "context parallel")?;
        let per_width = gathered
            .saturating_add(local_kv)
            .saturating_add(accumulators)
            .saturating_add(rotated);
        let bytes = checked_product(&[width, per_width], "context parallel")?;
        b.line(
            LineKey::CollectivesContextParallel,
            "Ring attention's buffers (context parallel, one layer's backward)",
            bytes,
            bytes,
            Kind::Computed,
            true,
            format!(
                "sequences {seqs} × heads {heads} × head dim {} × (the whole sequence's K and V all-gathered 2 × {s} × {v} B + the local K and V for the exchange 2 × {local} × {v} B + fp32 dQ, dK, dV accumulators 3 × {local} × 4 B + dK, dV sent and received 4 × {local} × 4 B): torch 2.11 context_parallel, rotate_method allgather, convert_to_f32 (_templated_ring_attention_backward)",
                a.head_dim
            ),
            &[
                ("cp", c.to_string()),
                ("tokens per rank", local.to_string()),
            ],
        );
    }
    if i.ep > 1
        && let Some(m) = a.moe
    {
        let tokens = seqs.saturating_mul(s.div_ceil(i.cp.max(1)));
        let bytes = checked_product(&[2, tokens, m.active, a.hidden, v], "all-to-all")?;
        b.line(
            LineKey::CollectivesAllToAll,
            "Expert parallel all-to-all: the received tokens and their regrouping",
            bytes,
            bytes,
            Kind::Assumed,
            true,
            format!(
                "2 × tokens per rank {tokens} × top-k {} × hidden {} × {v} B, one MoE layer at a time (torchtitan ExpertParallel._token_dispatch: all_to_all_single_autograd, then _permute); assumed: balanced routing, a rank receives what it sends",
                m.active, a.hidden
            ),
            &[
                ("ep", i.ep.to_string()),
                ("experts per rank", m.experts.div_ceil(i.ep).to_string()),
            ],
        );
    }
    Ok(())
}

/// Applies the plan to the lines already built (weights and model states), then adds
/// the buffers the scheme allocates and the host memory it needs per node.
pub(super) fn ranks(
    i: &EstimateInput,
    plan: &Plan,
    split: &Split,
    params: Option<u64>,
    trainable: u64,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    if !plan.active() {
        return Ok(());
    }
    let over = |what: &'static str| EstimateError::Overflow { what };
    let ep_split = if i.ep > 1 { experts(i)? } else { None };
    // Each model-state line's per-device figure before sharding (tp/pp applied).
    let mut before: BTreeMap<LineKey, u64> = BTreeMap::new();
    for l in b.lines.iter_mut() {
        // The buffers transformers builds beside the weights (rotary tables) are no
        // parameters: ZeRO and FSDP partition and offload parameters only, a module's
        // buffers stay whole on every rank (DeepSpeed's `zero.Init` converts
        // parameters, `partition_parameters.py`; FSDP2's `fully_shard` shards the
        // parameters and moves the buffers to the device whole).
        let buffers = l.label == super::weights::BUFFERS_LABEL;
        let state = (l.group == Group::Weights && !buffers)
            || matches!(
                l.key,
                LineKey::TrainingAdapters
                    | LineKey::TrainingGradients
                    | LineKey::TrainingOptimizer
                    | LineKey::TrainingMasterWeights
            );
        if state {
            before.insert(l.key, l.device_bytes);
            let sharded = plan.state(i, l.key, l.device_bytes);
            // Expert parallelism: a rank keeps 1/ep of the routed experts. Where the
            // plan shards the line, its shard group (the data-parallel ranks) already
            // divides the experts as finely: torchtitan shards the experts over
            // dp / ep ranks of the ep group (`dp_shard_mod_ep`), DeepSpeed MoE over
            // its expert-data-parallel group, so the rank's share is the same.
            l.device_bytes = match &ep_split {
                Some(e)
                    if sharded == l.device_bytes
                        && (l.group == Group::Weights || i.train == TrainMode::Full) =>
                {
                    let whole = if l.key == LineKey::WeightsMlp {
                        e.mlp
                    } else if l.group == Group::Weights {
                        0
                    } else {
                        e.all
                    };
                    if whole == 0 {
                        sharded
                    } else {
                        without_other_experts(sharded, e.routed, whole, i.ep)
                    }
                }
                _ => sharded,
            };
            if fsdp_mixed_precision(i)
                && (l.group == Group::Weights || l.key == LineKey::TrainingGradients)
            {
                l.formula.push_str(if l.group == Group::Weights {
                    "; per rank under FSDP mixed precision: 0, the fp32 shard (master weights line) is gathered in the compute dtype (MixedPrecisionPolicy.param_dtype, torch 2.11)"
                } else {
                    "; per rank under FSDP mixed precision: the shard in fp32, the sharded parameters' dtype (foreach_reduce casts the reduced output to it, torch 2.11)"
                });
            }
        }
    }
    // DeepSpeed's ZeRO optimizer steps its own copy of the rank's partition, made
    // whatever the precision: `single_partition_of_fp32_groups` (stage_1_and_2.py,
    // `.detach().clone()` of the 16-bit partition in `master_weights_and_grads_dtype`),
    // stage 3's `fp32_partitioned_groups_flat`. fp32 unless the 16-bit copy
    // (`bf16_master_weights_and_grads`) is what "no master weights" means; under fp32
    // training it is an fp32 copy beside the fp32 parameters.
    if let Scheme::Zero(_) = plan.scheme
        && i.train == TrainMode::Full
        && !b
            .lines
            .iter()
            .any(|l| l.key == LineKey::TrainingMasterWeights)
    {
        let each = if i.compute_dtype == Dtype::F32 {
            4
        } else {
            i.compute_dtype.bytes()
        };
        let whole = split.layered(checked_product(&[trainable, each], "ZeRO's copy")?, true);
        let device = if i.offload_optimizer == Offload::None {
            Split::part(whole, 1, plan.shard)
        } else {
            0
        };
        b.line(
            LineKey::TrainingMasterWeights,
            "ZeRO's copy of the partition the optimizer steps",
            whole,
            device,
            Kind::Computed,
            true,
            format!(
                "trainable × {each} B ({}), per rank 1/{}: DeepSpeed's optimizer steps a copy of the rank's partition, not the parameters (deepspeed/runtime/zero/stage_1_and_2.py single_partition_of_fp32_groups, stage3.py fp32_partitioned_groups_flat, DeepSpeed 0.19.8)",
                if each == 4 { "fp32" } else { i.compute_dtype.name() },
                plan.shard
            ),
            &[("ranks sharing one copy", plan.shard.to_string())],
        );
    }
    let pre = |k: LineKey| before.get(&k).copied().unwrap_or(0);
    let grad_dtype = if i.train.adapters() {
        i.lora_dtype
    } else {
        i.grad_dtype.unwrap_or(i.compute_dtype)
    };
    let param_bytes = i.compute_dtype.bytes();
    let shard = plan.shard;
    let rank_part = |bytes: u64| Split::part(bytes, 1, shard);
    let ranks = ("ranks sharing one copy", shard.to_string());
    let dp = ("data-parallel ranks", plan.dp.to_string());

    // Gradient buckets.
    let buckets = match plan.scheme {
        Scheme::Ddp if !i.ddp_bucket_view => Some((
            pre(LineKey::TrainingGradients),
            "DDP gradient buckets".to_string(),
            "every trainable gradient copied into flat buckets of bucket_cap_mb = 25 MiB for the all-reduce (the first of 1 MiB): together the gradients' size again (torch/nn/parallel/distributed.py, DistributedDataParallel: gradient_as_bucket_view=False; True makes the gradients views of the buckets and saves this)".to_string(),
        )),
        Scheme::Zero(s) => {
            // Stage 1 and 2 allocate one contiguous-gradients buffer (two with
            // overlap_comm, whose default is True at stage 3 only) when the
            // backward starts (`setup_buckets`, stage_1_and_2.py); stage 3 one per
            // dtype at construction (stage3.py, `bucket.buffer = torch.empty(
            // self.reduce_bucket_size, …)`). contiguous_gradients defaults to True.
            let bytes = checked_product(&[REDUCE_BUCKET_SIZE, grad_dtype.bytes()], "ZeRO buckets")?;
            Some((
                bytes,
                format!("ZeRO-{s} gradient bucket"),
                format!(
                    "reduce_bucket_size {REDUCE_BUCKET_SIZE} elements × {} B ({}), contiguous_gradients: one buffer, whatever the model's size (deepspeed/runtime/zero/{}, DeepSpeed 0.19.8)",
                    grad_dtype.bytes(),
                    grad_dtype.name(),
                    if s == 3 { "stage3.py" } else { "stage_1_and_2.py setup_buckets" }
                ),
            ))
        }
        _ => None,
    };
    let bucket_bytes = buckets.as_ref().map_or(0, |b| b.0);
    if let Some((bytes, label, formula)) = buckets {
        b.line(
            LineKey::TrainingGradBuckets,
            label,
            bytes,
            bytes,
            Kind::Computed,
            true,
            formula,
            std::slice::from_ref(&dp),
        );
    }

    // Gathered parameters and reduce-scatter buffers.
    let u = match plan.scheme {
        Scheme::Zero(3) | Scheme::Fsdp(_) => units(i, split, params)?,
        _ => None,
    };
    if let Some(u) = u {
        let value = |n: u64| checked_product(&[n, param_bytes], "gathered parameters");
        let (count, formula) = match plan.scheme {
            Scheme::Fsdp(Fsdp::GradOp) => (
                u.all.saturating_add(u.norms),
                "reshard_after_forward=False (SHARD_GRAD_OP): every block's gathered parameters stay from its forward through its backward, so the step's peak holds all of them (torch/distributed/fsdp/_fully_shard/_fully_shard.py, fully_shard)".to_string(),
            ),
            Scheme::Fsdp(_) => {
                // Under mixed precision (fp32 shards gathered in the compute dtype) the
                // prefetched block's shard is first cast into one flat buffer for the
                // copy-in (`_get_param_all_gather_inputs`, foreach copy).
                let cast = if i.train == TrainMode::Full
                    && i.master_weights
                    && i.compute_dtype != Dtype::F32
                {
                    Split::part(u.block, 1, shard)
                } else {
                    0
                };
                (
                    u.root
                        .checked_add(u.block.checked_mul(2).ok_or_else(|| over("gathered"))?)
                        .and_then(|x| x.checked_add(cast))
                        .ok_or_else(|| over("gathered"))?,
                    format!(
                        "the root unit (embeddings, final norm, lm_head: the root state keeps reshard_after_forward=False, `_auto_reshard_after_forward`, torch 2.11 fully_shard) + 2 decoder blocks (the one computing and the one prefetched, FSDPParamGroup._backward_prefetch) at the backward's start{}",
                        if cast > 0 {
                            format!(" + the prefetched block's fp32 shard cast for the all-gather, {cast} (MixedPrecisionPolicy)")
                        } else {
                            String::new()
                        }
                    ),
                )
            }
            _ => {
                let cap = MAX_LIVE_PARAMETERS.max(u.module.saturating_add(PREFETCH_BUCKET_SIZE));
                (
                    u.all.min(cap),
                    format!(
                        "min(all parameters, stage3_max_live_parameters {MAX_LIVE_PARAMETERS}): the live set the coordinator keeps, the last blocks' parameters staying into the backward within stage3_max_reuse_distance, prefetched {PREFETCH_BUCKET_SIZE} elements ahead (deepspeed/runtime/zero/partitioned_param_coordinator.py, DeepSpeed 0.19.8)"
                    ),
                )
            }
        };
        let bytes = value(count)?;
        b.line(
            LineKey::CollectivesAllGather,
            "Parameters gathered at the step's peak",
            bytes,
            bytes,
            Kind::Computed,
            true,
            format!(
                "{count} parameters × {param_bytes} B ({}): {formula}",
                i.compute_dtype.name()
            ),
            &[
                ("block parameters", u.block.to_string()),
                ("root parameters", u.root.to_string()),
                ranks.clone(),
            ],
        );
        if let Scheme::Fsdp(f) = plan.scheme {
            fsdp_peak(i, f, &u, trainable, split, shard, count, b)?;
        }
    }

    if let Scheme::Zero(stage) = plan.scheme
        && i.offload_optimizer == Offload::None
        && i.offload_param == Offload::None
        && i.train == TrainMode::Full
    {
        zero_peak(i, stage, bucket_bytes, trainable, split, shard, b)?;
    }

    parallel_buffers(i, split, b)?;

    // Host memory per node.
    let per_node = plan.per_node;
    let node = |per_rank: u64| checked_product(&[per_rank, per_node], "host memory per node");
    let fp32_grads =
        rank_part(split.layered(checked_product(&[trainable, 4], "fp32 gradients")?, true));
    let grad_part = rank_part(pre(LineKey::TrainingGradients));
    let states = rank_part(
        pre(LineKey::TrainingOptimizer).saturating_add(pre(LineKey::TrainingMasterWeights)),
    );
    let weights_part = rank_part(
        before
            .iter()
            .filter(|(k, _)| k.group() == Group::Weights && **k != LineKey::WeightsNorms)
            .map(|(_, v)| *v)
            .fold(pre(LineKey::TrainingAdapters), u64::saturating_add),
    );
    let mut host = |key: LineKey,
                    label: &'static str,
                    per_rank: u64,
                    formula: String|
     -> Result<(), EstimateError> {
        let bytes = node(per_rank)?;
        b.line(
            key,
            label,
            bytes,
            0,
            Kind::Computed,
            false,
            format!("{formula}; × {per_node} GPUs per node"),
            &[
                ("GPUs per node", per_node.to_string()),
                ("ranks sharing one copy", shard.to_string()),
            ],
        );
        Ok(())
    };
    match plan.scheme {
        Scheme::Zero(s) if i.offload_optimizer != Offload::None => {
            // The 16-bit gradient partition stage 3 keeps on the offload device.
            let grads16 = if s == 3 { grad_part } else { 0 };
            let per_rank = match i.offload_optimizer {
                Offload::Cpu => states.saturating_add(fp32_grads).saturating_add(grads16),
                _ => {
                    let largest = rank_part(split.layered(trainable, true)).min(SUB_GROUP_SIZE);
                    checked_product(&[OPTIMIZER_SWAP_BUFFERS, largest, 4], "swap buffers")?
                        .saturating_add(fp32_grads)
                        .saturating_add(grads16)
                }
            };
            host(
                LineKey::HostOptimizer,
                "Host: offloaded optimizer (per node)",
                per_rank,
                match i.offload_optimizer {
                    Offload::Cpu => format!(
                        "per rank: optimizer states and fp32 master weights {states} B + fp32 gradient partition {fp32_grads} B{} (pinned: offload_optimizer.pin_memory, DeepSpeed 0.19.8; the step runs on the CPU)",
                        if s == 3 {
                            format!(
                                " + {grads16} B 16-bit gradient partition (stage3.py grad_partitions_flat_buffer)"
                            )
                        } else {
                            String::new()
                        }
                    ),
                    _ => format!(
                        "per rank: states and master weights on NVMe; {OPTIMIZER_SWAP_BUFFERS} pinned swap buffers (offload_optimizer.buffer_count) × the largest sub-group's partition (≤ sub_group_size {SUB_GROUP_SIZE}) × 4 B + fp32 gradient partition {fp32_grads} B{}",
                        if s == 3 {
                            format!(" + {grads16} B 16-bit gradient partition")
                        } else {
                            String::new()
                        }
                    ),
                },
            )?;
        }
        _ => {}
    }
    match (plan.scheme, i.offload_param) {
        (_, Offload::None) => {}
        (Scheme::Zero(_), Offload::Cpu) => host(
            LineKey::HostParameters,
            "Host: offloaded parameters (per node)",
            weights_part,
            format!(
                "per rank: its {weights_part} B partition of the parameters (offload_param cpu, pinned)"
            ),
        )?,
        (Scheme::Zero(_), _) => {
            let (count, size) = PARAM_SWAP_BUFFERS;
            host(
                LineKey::HostParameters,
                "Host: NVMe parameter swap buffers (per node)",
                checked_product(&[count, size, param_bytes], "swap buffers")?,
                format!(
                    "per rank: offload_param.buffer_count {count} × buffer_size {size} elements × {param_bytes} B, pinned (parameters on NVMe)"
                ),
            )?
        }
        (Scheme::Fsdp(_), _) => {
            let all = weights_part
                .saturating_add(grad_part)
                .saturating_add(states);
            host(
                LineKey::HostParameters,
                "Host: FSDP CPU offload (per node)",
                all,
                format!(
                    "per rank: its shard of the parameters {weights_part} B, gradients {grad_part} B, optimizer states and master weights {states} B (CPUOffloadPolicy(pin_memory=True): the optimizer step runs on the CPU, torch 2.11)"
                ),
            )?
        }
        _ => {}
    }
    Ok(())
}

/// Micro-batches whose activations the most loaded pipeline stage holds at once: 1
/// without pipelining; under 1F1B the first stage runs pp − 1 warm-up forwards and
/// one more before its first backward, min(pp, micro-batches) (Megatron-LM
/// `megatron/core/pipeline_parallel/schedules.py`,
/// `forward_backward_pipelining_without_interleaving`: `num_warmup_microbatches =
/// min(pp - rank - 1, num_microbatches)`; torch.distributed.pipelining's
/// `Schedule1F1B` alike); under GPipe every micro-batch (micro-batches, else pp).
pub(super) fn in_flight(i: &EstimateInput) -> u64 {
    if i.pp <= 1 || i.train == TrainMode::None {
        return 1;
    }
    let m = i.micro_batches.unwrap_or(i.pp);
    match i.pipeline {
        Pipeline::OneFOneB => m.min(i.pp),
        Pipeline::Gpipe => m,
    }
}

/// What each rank holds, in one phrase (the inputs line of the CLI and the page), or
/// `None` for a single replica.
pub fn summary(i: &EstimateInput) -> Option<String> {
    let plan = Plan::new(i);
    // Context and expert parallelism, said after the sharding.
    let mut split = String::new();
    if i.cp > 1 && i.train != TrainMode::None {
        split.push_str(&format!(
            ", cp {}: each rank holds 1/{} of every sequence",
            i.cp, i.cp
        ));
    }
    if i.ep > 1 && i.train != TrainMode::None {
        split.push_str(&format!(
            ", ep {}: each rank holds 1/{} of the routed experts",
            i.ep, i.ep
        ));
    }
    let what = match plan.scheme {
        Scheme::Single | Scheme::Ddp if split.is_empty() => return None,
        Scheme::Single | Scheme::Ddp => {
            return Some(format!("replicas{split}"));
        }
        Scheme::Zero(1) => "optimizer states",
        Scheme::Zero(2) => "optimizer states and gradients",
        Scheme::Zero(_) | Scheme::Fsdp(_) => "parameters, gradients and optimizer states",
    };
    let name = match plan.scheme {
        Scheme::Zero(s) => format!("ZeRO-{s}"),
        Scheme::Fsdp(Fsdp::Hybrid) => "FSDP hybrid shard".into(),
        Scheme::Fsdp(Fsdp::GradOp) => "FSDP grad-op shard".into(),
        _ => "FSDP full shard".into(),
    };
    let mut s = format!("{name}: each rank holds 1/{} of the {what}", plan.shard);
    for (o, what) in [
        (i.offload_optimizer, "optimizer"),
        (i.offload_param, "parameters"),
    ] {
        if o != Offload::None {
            s.push_str(&format!(", {what} offloaded to {}", o.name()));
        }
    }
    s.push_str(&split);
    Some(s)
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::params::from_pairs;

    /// Llama-3.1-8B's shape, fully trained with AdamW and master weights.
    fn llama_8b(extra: &[(&'static str, &'static str)]) -> Estimate {
        let mut pairs = vec![
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("intermediate", "14336"),
            ("vocab", "128256"),
            ("train", "full"),
            ("context", "2048"),
        ];
        pairs.extend_from_slice(extra);
        let (input, errors) = from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        estimate(&input).unwrap()
    }

    fn device(e: &Estimate, k: LineKey) -> Option<u64> {
        e.lines.iter().find(|l| l.key == k).map(|l| l.device_bytes)
    }

    fn bytes(e: &Estimate, k: LineKey) -> Option<u64> {
        e.lines.iter().find(|l| l.key == k).map(|l| l.bytes)
    }

    /// torchtune 0.1's recipe loop leaves its fp32 shifted logits bound to `logits`
    /// through the optimizer step: where the step is a rank's highest moment, the need
    /// grows by that copy exactly, and a loss whose tensors die with the backward keeps
    /// nothing there.
    #[test]
    fn a_loop_that_keeps_its_logits_holds_them_at_the_fsdp_step() {
        let at = |loss: &'static str| {
            llama_8b(&[
                ("gpus", "2"),
                ("fsdp", "full"),
                ("checkpointing", "true"),
                ("context", "512"),
                ("sequences", "2"),
                ("loss", loss),
            ])
        };
        let (full, sliced) = (at("full"), at("float-sliced"));
        for e in [&full, &sliced] {
            let line = e
                .lines
                .iter()
                .find(|l| l.key == LineKey::CollectivesReduceScatter)
                .expect("the FSDP line");
            assert!(
                line.formula.starts_with("the peak is the optimizer step"),
                "{}",
                line.formula
            );
        }
        let kept = (2 * 511 * 128_256 * 4u64).div_ceil(512) * 512;
        assert_eq!(
            Loss::FloatSliced
                .kept_through_step(512, 2, 128_256)
                .unwrap(),
            kept
        );
        assert_eq!(Loss::Full.kept_through_step(512, 2, 128_256).unwrap(), 0);
        assert_eq!(sliced.per_device_bytes - full.per_device_bytes, kept);
    }

    /// ZeRO's stages partition, one after the other, the optimizer states, the
    /// gradients and the parameters (norms stay whole: the persistence threshold).
    #[test]
    fn zero_stages_partition_states_then_gradients_then_parameters() {
        let one = llama_8b(&[]);
        let n = 8;
        let part = |b: u64| b.div_ceil(n);
        for stage in ["1", "2", "3"] {
            let z = llama_8b(&[("gpus", "8"), ("zero", stage)]);
            let s: u8 = stage.parse().unwrap();
            for k in [LineKey::TrainingOptimizer, LineKey::TrainingMasterWeights] {
                assert_eq!(device(&z, k), device(&one, k).map(part), "{stage} {k}");
            }
            let g = device(&one, LineKey::TrainingGradients);
            assert_eq!(
                device(&z, LineKey::TrainingGradients),
                if s >= 2 { g.map(part) } else { g },
                "{stage}"
            );
            let w = device(&one, LineKey::WeightsMlp);
            assert_eq!(
                device(&z, LineKey::WeightsMlp),
                if s == 3 { w.map(part) } else { w }
            );
            assert_eq!(
                device(&z, LineKey::WeightsNorms),
                device(&one, LineKey::WeightsNorms)
            );
            // One contiguous-gradients bucket of reduce_bucket_size bf16 elements.
            assert_eq!(
                device(&z, LineKey::TrainingGradBuckets),
                Some(REDUCE_BUCKET_SIZE * 2)
            );
            // The whole-workload figures do not change: only what a rank holds.
            assert_eq!(
                bytes(&z, LineKey::TrainingOptimizer),
                bytes(&one, LineKey::TrainingOptimizer)
            );
            assert!(z.per_device_bytes < one.per_device_bytes, "{stage}");
            assert_eq!(z.host_bytes, 0);
        }
        // Stage 3 gathers at most stage3_max_live_parameters (8 B parameters here).
        let z3 = llama_8b(&[("gpus", "8"), ("zero", "3")]);
        assert_eq!(
            device(&z3, LineKey::CollectivesAllGather),
            Some(MAX_LIVE_PARAMETERS * 2)
        );
    }

    /// DeepSpeed's optimizer steps its own copy of the rank's partition whatever the
    /// precision: fp32 beside fp32 parameters, 16-bit without master weights.
    #[test]
    fn zero_keeps_its_copy_of_the_partition_in_every_precision() {
        let one = llama_8b(&[("compute-dtype", "fp32"), ("master-weights", "false")]);
        assert_eq!(device(&one, LineKey::TrainingMasterWeights), None);
        let trainable = bytes(&one, LineKey::TrainingGradients).unwrap() / 4;
        for (dtype, master, each) in [("fp32", "false", 4), ("bf16", "false", 2)] {
            let z = llama_8b(&[
                ("gpus", "8"),
                ("zero", "2"),
                ("compute-dtype", dtype),
                ("master-weights", master),
            ]);
            assert_eq!(
                device(&z, LineKey::TrainingMasterWeights),
                Some((trainable * each).div_ceil(8)),
                "{dtype}"
            );
        }
        // Offloaded with the optimizer: on the host, not the device.
        let off = llama_8b(&[
            ("gpus", "8"),
            ("zero", "2"),
            ("compute-dtype", "fp32"),
            ("master-weights", "false"),
            ("offload-optimizer", "cpu"),
        ]);
        assert_eq!(device(&off, LineKey::TrainingMasterWeights), Some(0));
    }

    /// DDP's replicas each hold the whole model and a gradient-sized set of buckets,
    /// unless the gradients are views of them.
    #[test]
    fn ddp_replicas_hold_their_gradient_buckets() {
        let one = llama_8b(&[]);
        let ddp = llama_8b(&[("gpus", "4")]);
        assert_eq!(
            device(&ddp, LineKey::TrainingGradBuckets),
            device(&one, LineKey::TrainingGradients)
        );
        // The allocated need: what the caching allocator reserves beyond it differs
        // with the buckets' segments.
        let allocated =
            |e: &Estimate| e.per_device_bytes - device(e, LineKey::AllocatorCache).unwrap_or(0);
        assert_eq!(
            allocated(&ddp),
            allocated(&one) + device(&one, LineKey::TrainingGradients).unwrap()
        );
        let view = llama_8b(&[("gpus", "4"), ("ddp-bucket-view", "true")]);
        assert_eq!(device(&view, LineKey::TrainingGradBuckets), None);
        assert_eq!(allocated(&view), allocated(&one));
        // One GPU is no DDP.
        assert_eq!(device(&one, LineKey::TrainingGradBuckets), None);
    }

    /// FSDP shards everything over the group, gathers the root unit and two blocks,
    /// and reduce-scatters the largest unit's gradients; grad-op keeps every block
    /// gathered; hybrid shards within a node only.
    #[test]
    fn fsdp_shards_and_gathers_its_units() {
        let pure = [("master-weights", "false")];
        let one = llama_8b(&pure);
        let full = llama_8b(&[("gpus", "8"), ("fsdp", "full"), pure[0]]);
        let part = |b: u64| b.div_ceil(8);
        for k in [
            LineKey::WeightsMlp,
            LineKey::WeightsNorms,
            LineKey::TrainingGradients,
            LineKey::TrainingOptimizer,
        ] {
            assert_eq!(device(&full, k), device(&one, k).map(part), "{k}");
        }
        // Llama-3.1-8B: a block is 4 × 4096² × (1 + 2·8/32)… counted from the shape.
        let attn = 4096 * 4096 * 2 + 4096 * 1024 * 2;
        let mlp = 3 * 4096 * 14336;
        // The norms' share: 2 per layer and the final one, over 32 layers.
        let block = attn + mlp + (65 * 4096u64).div_ceil(32);
        let root = 2 * 128256 * 4096;
        assert_eq!(
            device(&full, LineKey::CollectivesAllGather),
            Some((root + 2 * block) * 2)
        );
        // At 2 048 tokens the backward's start is the step's peak (activations and
        // logits beside the gathered root and blocks and lm_head's unsharded
        // gradient): the FSDP line adds what the gradients line, counted beside it,
        // does not cover.
        let grads = device(&full, LineKey::TrainingGradients).unwrap();
        let head_grad = root / 2 * 2;
        assert_eq!(
            device(&full, LineKey::CollectivesReduceScatter),
            Some(head_grad.saturating_sub(grads))
        );
        // The backward's end takes over where the activations are few: the root's
        // reduce-scatter, its bf16 gradients and an fp32 input (untied: the root is
        // the embeddings and lm_head).
        let short = |extra: &[(&'static str, &'static str)]| {
            let mut p = vec![("gpus", "8"), ("fsdp", "full"), ("context", "16"), pure[0]];
            p.extend_from_slice(extra);
            llama_8b(&p)
        };
        let end = short(&[("reduce-dtype", "fp32")]);
        let rs = device(&end, LineKey::CollectivesReduceScatter).unwrap();
        assert!(rs > 0);
        assert!(
            end.lines
                .iter()
                .any(|l| l.key == LineKey::CollectivesReduceScatter
                    && l.formula.starts_with("the peak is the backward's end")),
        );
        assert!(rs > device(&short(&[]), LineKey::CollectivesReduceScatter).unwrap());
        let grad_op = llama_8b(&[("gpus", "8"), ("fsdp", "grad-op"), pure[0]]);
        assert_eq!(
            device(&grad_op, LineKey::CollectivesAllGather),
            Some((32 * (attn + mlp) + root + 65 * 4096) * 2)
        );
        // Two nodes of 4: hybrid shards over 4.
        let hybrid = llama_8b(&[("gpus", "8"), ("nodes", "2"), ("fsdp", "hybrid"), pure[0]]);
        assert_eq!(
            device(&hybrid, LineKey::TrainingOptimizer),
            device(&one, LineKey::TrainingOptimizer).map(|b| b.div_ceil(4))
        );
        // Mixed precision (fp32 master weights): FSDP2 keeps the fp32 shard, no 16-bit
        // one, and fp32 gradients; 16 B a parameter per rank either way.
        let mp_one = llama_8b(&[]);
        let mp = llama_8b(&[("gpus", "8"), ("fsdp", "full")]);
        assert_eq!(device(&mp, LineKey::WeightsMlp), Some(0));
        assert_eq!(
            device(&mp, LineKey::TrainingMasterWeights),
            device(&mp_one, LineKey::TrainingMasterWeights).map(part)
        );
        assert_eq!(
            device(&mp, LineKey::TrainingGradients),
            device(&mp_one, LineKey::TrainingGradients).map(|b| (b * 2).div_ceil(8))
        );
    }

    /// Offloading moves states off the device and counts them per node on the host.
    #[test]
    fn offload_moves_states_to_the_host_per_node() {
        let one = llama_8b(&[]);
        let z = llama_8b(&[("gpus", "8"), ("zero", "2"), ("offload-optimizer", "cpu")]);
        assert_eq!(device(&z, LineKey::TrainingOptimizer), Some(0));
        assert_eq!(device(&z, LineKey::TrainingGradients), Some(0));
        let n = one.parameters.unwrap();
        let part = |b: u64| b.div_ceil(8);
        // States (8 B) + master (4 B) + fp32 gradients (4 B) per rank, 8 ranks a node.
        let states = part(
            bytes(&one, LineKey::TrainingOptimizer).unwrap()
                + bytes(&one, LineKey::TrainingMasterWeights).unwrap(),
        );
        assert_eq!(z.host_bytes, 8 * (states + part(n * 4)));
        assert_eq!(bytes(&z, LineKey::HostOptimizer), Some(z.host_bytes));
        // Host lines are never part of the device's total.
        let dev: u64 = z
            .lines
            .iter()
            .filter(|l| l.in_total)
            .map(|l| l.device_bytes)
            .sum();
        assert_eq!(dev, z.per_device_bytes);
        // Two nodes: each holds its 4 ranks' partitions.
        let two = llama_8b(&[
            ("gpus", "8"),
            ("nodes", "2"),
            ("zero", "3"),
            ("offload-optimizer", "cpu"),
            ("offload-param", "cpu"),
        ]);
        assert_eq!(device(&two, LineKey::WeightsMlp), Some(0));
        let params = bytes(&two, LineKey::HostParameters).unwrap();
        let weights: u64 = one
            .lines
            .iter()
            .filter(|l| l.group == Group::Weights && l.key != LineKey::WeightsNorms)
            .map(|l| l.device_bytes)
            .sum();
        assert_eq!(params, 4 * part(weights));
        // FSDP's CPU offload takes parameters, gradients and the optimizer together.
        let f = llama_8b(&[("gpus", "8"), ("fsdp", "full"), ("offload-param", "cpu")]);
        for k in [
            LineKey::WeightsMlp,
            LineKey::TrainingGradients,
            LineKey::TrainingOptimizer,
        ] {
            assert_eq!(device(&f, k), Some(0), "{k}");
        }
        assert!(f.host_bytes > 8 * part(weights));
    }

    /// Under 1F1B the first stage holds min(pp, micro-batches) micro-batches'
    /// activations for its layers; GPipe all of them; inference one.
    #[test]
    fn pipeline_stages_hold_the_micro_batches_in_flight() {
        let one = llama_8b(&[("gpus", "4"), ("pp", "4"), ("micro-batches", "1")]);
        let act = |e: &Estimate| device(e, LineKey::Activations).unwrap();
        for (m, want) in [("2", 2), ("8", 4)] {
            let e = llama_8b(&[("gpus", "4"), ("pp", "4"), ("micro-batches", m)]);
            assert_eq!(act(&e), act(&one) * want, "{m}");
        }
        // Without a count, at least pp micro-batches (1F1B's steady state).
        let d = llama_8b(&[("gpus", "4"), ("pp", "4")]);
        assert_eq!(act(&d), act(&one) * 4);
        let g = llama_8b(&[
            ("gpus", "4"),
            ("pp", "4"),
            ("pipeline", "gpipe"),
            ("micro-batches", "8"),
        ]);
        assert_eq!(act(&g), act(&one) * 8);
        // Sequence parallelism splits a stage's activations over tp.
        let tp = llama_8b(&[
            ("gpus", "8"),
            ("pp", "4"),
            ("tp", "2"),
            ("micro-batches", "1"),
        ]);
        let sp = llama_8b(&[
            ("gpus", "8"),
            ("pp", "4"),
            ("tp", "2"),
            ("sp", "true"),
            ("micro-batches", "1"),
        ]);
        assert_eq!(act(&tp), act(&one));
        assert_eq!(act(&sp), act(&one).div_ceil(2));
        // One stage: nothing changes.
        let flat = llama_8b(&[("micro-batches", "8")]);
        assert_eq!(act(&flat), act(&llama_8b(&[])));
    }

    /// Context parallelism: each rank holds 1/cp of every sequence's activations and
    /// logits, and the ring attention's buffers of one layer's backward.
    #[test]
    fn context_parallel_splits_the_sequence_and_adds_the_ring() {
        let base = [("gpus", "8"), ("fsdp", "full"), ("context", "8192")];
        let one = llama_8b(&base);
        let cp = llama_8b(&[base[0], base[1], base[2], ("cp", "2")]);
        let act = |e: &Estimate| device(e, LineKey::Activations).unwrap();
        assert_eq!(act(&cp), act(&one).div_ceil(2));
        assert_eq!(
            device(&cp, LineKey::Logits),
            device(&one, LineKey::Logits).map(|b| b.div_ceil(2))
        );
        // The model states are sharded over the same 8 ranks (cp ranks are
        // data-parallel ranks for them).
        assert_eq!(
            device(&cp, LineKey::TrainingOptimizer),
            device(&one, LineKey::TrainingOptimizer)
        );
        // 1 sequence × 32 heads × 128 × (2 × 8192 × 2 + 2 × 4096 × 2 + 3 × 4096 × 4 +
        // 4 × 4096 × 4) bytes.
        let ring = 32 * 128 * (2 * 8192 * 2 + 2 * 4096 * 2 + 3 * 4096 * 4 + 4 * 4096 * 4);
        assert_eq!(device(&cp, LineKey::CollectivesContextParallel), Some(ring));
        assert_eq!(device(&one, LineKey::CollectivesContextParallel), None);
    }

    fn moe(extra: &[(&'static str, &'static str)]) -> Estimate {
        // Mixtral-8x7B's shape.
        let mut pairs = vec![
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("intermediate", "14336"),
            ("experts", "8"),
            ("active-experts", "2"),
            ("expert-intermediate", "14336"),
            ("vocab", "32000"),
            ("train", "full"),
            ("context", "4096"),
            ("master-weights", "false"),
        ];
        pairs.extend_from_slice(extra);
        let (input, errors) = from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        estimate(&input).unwrap()
    }

    /// Expert parallelism: replicas keep 1/ep of the routed experts and their states;
    /// sharded states are already divided over the data-parallel ranks; the all-to-all
    /// buffers are an assumed line.
    #[test]
    fn expert_parallel_splits_the_routed_experts() {
        let ddp = moe(&[("gpus", "8")]);
        let ep = moe(&[("gpus", "8"), ("ep", "8")]);
        let routed: u64 = 32 * 8 * 3 * 4096 * 14336;
        let router: u64 = 32 * 8 * 4096;
        let mlp = bytes(&ddp, LineKey::WeightsMlp).unwrap();
        // bf16: the routed experts and the routers (no shared expert here).
        assert_eq!(mlp, (routed + router) * 2);
        assert_eq!(
            device(&ep, LineKey::WeightsMlp),
            Some(router * 2 + routed * 2 / 8)
        );
        let n = ddp.parameters.unwrap();
        let grads = device(&ddp, LineKey::TrainingGradients).unwrap();
        assert_eq!(grads, n * 2);
        assert_eq!(
            device(&ep, LineKey::TrainingGradients),
            Some((n - routed) * 2 + routed * 2 / 8)
        );
        // Two bf16 copies of 4096 tokens × top-2 × 4096.
        let a2a = device(&ep, LineKey::CollectivesAllToAll).unwrap();
        assert_eq!(a2a, 2 * 4096 * 2 * 4096 * 2);
        assert!(
            ep.lines
                .iter()
                .any(|l| l.key == LineKey::CollectivesAllToAll && l.kind == Kind::Assumed)
        );
        // Under FSDP the data-parallel ranks already shard the experts as finely.
        let fsdp = moe(&[("gpus", "8"), ("fsdp", "full")]);
        let fsdp_ep = moe(&[("gpus", "8"), ("fsdp", "full"), ("ep", "8")]);
        assert_eq!(
            device(&fsdp_ep, LineKey::TrainingOptimizer),
            device(&fsdp, LineKey::TrainingOptimizer)
        );
        // …but a gathered block carries only its rank's experts.
        assert!(
            device(&fsdp_ep, LineKey::CollectivesAllGather).unwrap()
                < device(&fsdp, LineKey::CollectivesAllGather).unwrap()
        );
    }

    #[test]
    fn settings_that_contradict_each_other_are_refused_naming_the_key() {
        let refused = |extra: &[(&'static str, &'static str)], key: &str| {
            let mut pairs = vec![("parameters", "7e9"), ("train", "full"), ("gpus", "8")];
            pairs.extend_from_slice(extra);
            let (input, errors) = from_pairs(pairs);
            assert!(errors.is_empty(), "{errors:?}");
            let e = estimate(&input).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{key}:")), "{extra:?}: {e}");
        };
        refused(&[("zero", "3"), ("fsdp", "full")], "zero");
        refused(&[("offload-optimizer", "cpu")], "offload-optimizer");
        refused(&[("zero", "2"), ("offload-param", "cpu")], "offload-param");
        refused(&[("nodes", "3")], "nodes");
        refused(&[("cp", "3")], "cp");
        refused(&[("ep", "2")], "ep");
        // FSDP sizes its blocks from the architecture.
        refused(&[("fsdp", "full")], "fsdp");
        let (input, _) = from_pairs([("parameters", "7e9"), ("zero", "3")]);
        assert!(
            estimate(&input)
                .unwrap_err()
                .to_string()
                .starts_with("zero:")
        );
    }
}
