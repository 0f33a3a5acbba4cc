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
    Ok(())
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

    /// Whether this plan changes anything (training on more than one data-parallel
    /// rank, or any ZeRO / FSDP setting).
    fn active(&self) -> bool {
        self.scheme != Scheme::Single
    }
}

/// Parameters per device of one wrapped block and of what stays outside the blocks
/// (embeddings, lm_head, towers: the root unit FSDP and ZeRO gather as one), and of
/// everything but the persistent norms.
struct Units {
    block: u64,
    root: u64,
    all: u64,
    norms: u64,
    /// lm_head's parameters (with the embeddings' when tied).
    head: u64,
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
            head: 0,
            module: 0,
        }));
    };
    let w = a.weights(&module_formats(i)?)?;
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
    let block_whole = per(of(ParamClass::Attention), a.attention_layers())
        .saturating_add(per(of(ParamClass::Mlp), mlp_layers))
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
        .saturating_add(split.layered(of(ParamClass::Mlp), true));
    Ok(Some(Units {
        block,
        root,
        all: layered.saturating_add(root),
        norms: split.layered(of(ParamClass::Norms), false),
        head: if head == 0 { emb } else { head },
        module: emb.max(head).max(block),
    }))
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
    // Each model-state line's per-device figure before sharding (tp/pp applied).
    let mut before: BTreeMap<LineKey, u64> = BTreeMap::new();
    for l in b.lines.iter_mut() {
        let state = l.group == Group::Weights
            || matches!(
                l.key,
                LineKey::TrainingAdapters
                    | LineKey::TrainingGradients
                    | LineKey::TrainingOptimizer
                    | LineKey::TrainingMasterWeights
            );
        if state {
            before.insert(l.key, l.device_bytes);
            l.device_bytes = plan.state(i, l.key, l.device_bytes);
        }
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
            Scheme::Fsdp(_) => (
                u.root
                    .checked_add(u.block.checked_mul(2).ok_or_else(|| over("gathered"))?)
                    .ok_or_else(|| over("gathered"))?,
                "the root unit (embeddings, lm_head: the root FSDP state keeps reshard_after_forward=False, torch 2.11 fully_shard) + 2 decoder blocks (the one computing and the next, all-gathered ahead on its own stream)".to_string(),
            ),
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
        if let Scheme::Fsdp(_) = plan.scheme {
            // foreach_reduce (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py):
            // a unit's unsharded gradients are copied into one reduce-scatter input
            // of world size × padded shard elements in reduce_dtype, and the output is
            // one shard; the input is kept until the collective finishes. At the
            // step's peak (the backward's start) the unit is lm_head's — its own unit
            // as torchtitan wraps `[norm, output]`, or the root's unsharded gradient
            // held to the backward's end as torchtune's root keeps it — or, soon
            // after, a decoder block's: the larger is counted.
            let reduce = i.reduce_dtype.unwrap_or(grad_dtype);
            let unit = u.block.max(u.head);
            let bytes = checked_product(&[unit, grad_dtype.bytes()], "reduce-scatter")?
                .checked_add(checked_product(&[unit, reduce.bytes()], "reduce-scatter")?)
                .and_then(|x| x.checked_add(rank_part(unit).saturating_mul(reduce.bytes())))
                .ok_or_else(|| over("reduce-scatter"))?;
            b.line(
                LineKey::CollectivesReduceScatter,
                "Reduce-scatter of a unit's gradients (lm_head's or a block's)",
                bytes,
                bytes,
                Kind::Computed,
                true,
                format!(
                    "{unit} parameters × ({} B unsharded gradients + {} B reduce-scatter input, {}) + one shard of the output (FSDP2 foreach_reduce, torch 2.11)",
                    grad_dtype.bytes(),
                    reduce.bytes(),
                    reduce.name()
                ),
                &[ranks.clone(), ("reduce-dtype", reduce.name().into())],
            );
        }
    }

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
    let what = match plan.scheme {
        Scheme::Single | Scheme::Ddp => return None,
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
        assert_eq!(
            ddp.per_device_bytes,
            one.per_device_bytes + device(&one, LineKey::TrainingGradients).unwrap()
        );
        let view = llama_8b(&[("gpus", "4"), ("ddp-bucket-view", "true")]);
        assert_eq!(device(&view, LineKey::TrainingGradBuckets), None);
        assert_eq!(view.per_device_bytes, one.per_device_bytes);
        // One GPU is no DDP.
        assert_eq!(device(&one, LineKey::TrainingGradBuckets), None);
    }

    /// FSDP shards everything over the group, gathers the root unit and two blocks,
    /// and reduce-scatters the largest unit's gradients; grad-op keeps every block
    /// gathered; hybrid shards within a node only.
    #[test]
    fn fsdp_shards_and_gathers_its_units() {
        let one = llama_8b(&[]);
        let full = llama_8b(&[("gpus", "8"), ("fsdp", "full")]);
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
        // bf16 unsharded gradients + a bf16 reduce-scatter input + one shard.
        // lm_head's unit (larger than a block here): bf16 unsharded gradients, a bf16
        // reduce-scatter input and one shard.
        let head = root / 2;
        assert!(head > block);
        assert_eq!(
            device(&full, LineKey::CollectivesReduceScatter),
            Some(head * 2 + head * 2 + head.div_ceil(8) * 2)
        );
        let fp32 = llama_8b(&[("gpus", "8"), ("fsdp", "full"), ("reduce-dtype", "fp32")]);
        assert_eq!(
            device(&fp32, LineKey::CollectivesReduceScatter),
            Some(head * 2 + head * 4 + head.div_ceil(8) * 4)
        );
        let grad_op = llama_8b(&[("gpus", "8"), ("fsdp", "grad-op")]);
        assert_eq!(
            device(&grad_op, LineKey::CollectivesAllGather),
            Some((32 * (attn + mlp) + root + 65 * 4096) * 2)
        );
        // Two nodes of 4: hybrid shards over 4.
        let hybrid = llama_8b(&[("gpus", "8"), ("nodes", "2"), ("fsdp", "hybrid")]);
        assert_eq!(
            device(&hybrid, LineKey::TrainingOptimizer),
            device(&one, LineKey::TrainingOptimizer).map(|b| b.div_ceil(4))
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
