//! The run's two peaks and what the caching allocator reserves for them: the model's
//! loading (`model_load`, the framework's own setup, allocation by allocation) and
//! the training step (every tensor the step's lines count, placed in the segments the
//! load left cached), each through `crate::allocator::Allocator`. The step's need is
//! the reserved peak (`max_memory_reserved`), the verdict's figure: the
//! `allocator.cache` line is what it holds beyond the allocated one.
//!
//! The step's tensors are placed as they stand at the peak, without the churn that led
//! there (temporaries freed between kept tensors, shapes that change from batch to
//! batch): the segment rounding and packing and the loading transient's cached blocks
//! are modelled, the step's own fragmentation is not — a run can reserve more. Then
//! the step's tensors are freed and the optimizer step's temporaries placed and freed:
//! the segments they add stay reserved through every later step.

use super::*;
use crate::allocator::{Allocator, Handle};
use crate::training::load::{self, Stored, Torchao, TtLinear, TtModel, TtPath};
use crate::training::{LoadPath, ModulesToSave, unsloth};

/// `(count, bytes)`: `count` tensors of `bytes` each.
type Tensors = Vec<(u64, u64)>;

fn place(a: &mut Allocator, ts: &[(u64, u64)]) {
    for &(count, bytes) in ts {
        for _ in 0..count {
            a.malloc(bytes);
        }
    }
}

/// [`place`], keeping the blocks' handles so that they can be freed.
fn place_kept(a: &mut Allocator, ts: &[(u64, u64)]) -> Vec<Handle> {
    let mut hs = Vec::new();
    for &(count, bytes) in ts {
        for _ in 0..count {
            hs.push(a.malloc(bytes));
        }
    }
    hs
}

/// A bound on the tensors one simulation places: beyond it the lines are left without
/// a reserved figure (a model of millions of tensors is not one a card holds).
const MAX_TENSORS: u64 = 2_000_000;

/// Whether tensor `t` repeats in each of the `layers` decoder layers (its attention,
/// MLP and norms, not the final norm): the model's load and FSDP1's flat parameters
/// place it layer by layer.
fn repeats_per_layer(t: &crate::arch::TensorGroup, layers: u64) -> bool {
    t.count >= layers
        && t.count.is_multiple_of(layers)
        && matches!(
            t.class,
            ParamClass::Attention | ParamClass::Mlp | ParamClass::Norms
        )
        && t.name != "final norm"
}

/// The architecture's stored tensors in checkpoint order (embeddings, then layer by
/// layer, then the final norm and the output projection): each as the loader places
/// it, with the values of those PEFT's QLoRA preparation casts to fp32.
fn stored(
    a: &Architecture,
    input: &EstimateInput,
) -> Result<Vec<(Stored, u64, bool)>, EstimateError> {
    let formats = module_formats(input)?;
    let qlora_fp32 = input.train == TrainMode::Qlora
        && input.keep_format == StorageFormat::Dense { dtype: Dtype::F32 };
    let head4 = super::head_quantised(input);
    let layers = a.layers.max(1);
    let mut head = Vec::new();
    let mut per_layer = Vec::new();
    let mut tail = Vec::new();
    for t in a.tensors()? {
        let format = if head4 && t.class == ParamClass::LmHead {
            formats.linear
        } else {
            formats.for_group(&t)
        };
        let values = t.rows.saturating_mul(t.cols);
        let s = match format {
            StorageFormat::Bnb4 { double_quant, .. } if t.cols > 1 => Stored::Bnb4 {
                n: values,
                dq: double_quant,
            },
            // Loaded in 16 bits, cast to fp32 afterwards.
            StorageFormat::Dense { dtype: Dtype::F32 } if qlora_fp32 => {
                Stored::Dense(values.saturating_mul(2))
            }
            f if t.cols > 1 => Stored::Dense(f.matrix_bytes(t.rows, t.cols)?.bytes),
            f => Stored::Dense(f.vector_bytes(t.rows)?),
        };
        let layered = repeats_per_layer(&t, layers);
        let cast = qlora_fp32 && format == StorageFormat::Dense { dtype: Dtype::F32 };
        if layered {
            per_layer.push((s, t.count.checked_div(layers).unwrap_or(0), cast));
        } else if t.class == ParamClass::Embeddings {
            head.push((s, t.count, cast));
        } else {
            tail.push((s, t.count, cast));
        }
    }
    let mut out = head;
    for _ in 0..layers {
        out.extend(per_layer.iter().copied());
    }
    out.extend(tail);
    Ok(out)
}

/// The LoRA adapters' tensors (`lora_A` r × in, `lora_B` out × r per targeted
/// projection and layer) in `value`-byte elements.
fn adapter_tensors(a: &Architecture, input: &EstimateInput, value: u64) -> Tensors {
    let Ok(t) = LoraTargets::parse("lora-targets", &input.lora_targets) else {
        return Vec::new();
    };
    let r = input.lora_rank;
    let (h, q, kv, i) = (
        a.hidden,
        a.heads.saturating_mul(a.head_dim),
        a.kv_heads.saturating_mul(a.head_dim),
        a.intermediate,
    );
    let l = a.layers;
    let mut out = Vec::new();
    for (on, inp, o) in [
        (t.q, h, q),
        (t.k, h, kv),
        (t.v, h, kv),
        (t.o, q, h),
        (t.gate && a.gated_mlp, h, i),
        (t.up, h, i),
        (t.down, i, h),
    ] {
        if on {
            out.push((l, r.saturating_mul(inp).saturating_mul(value)));
            out.push((l, r.saturating_mul(o).saturating_mul(value)));
        }
    }
    if t.lm_head {
        out.push((1, r.saturating_mul(h).saturating_mul(value)));
        out.push((1, r.saturating_mul(a.vocab).saturating_mul(value)));
    }
    out
}

/// The torchtune model of a Llama-style architecture, for its model setup.
fn torchtune_model(a: &Architecture, input: &EstimateInput) -> Option<TtModel> {
    if a.moe.is_some() || a.mla.is_some() || a.mixer.is_some() || !a.gated_mlp {
        return None;
    }
    let t = LoraTargets::parse("lora-targets", &input.lora_targets).ok()?;
    let adapters = input.train.adapters();
    let (h, q, kv, i) = (
        a.hidden,
        a.heads.saturating_mul(a.head_dim),
        a.kv_heads.saturating_mul(a.head_dim),
        a.intermediate,
    );
    let lin = |out, inp, on: bool| TtLinear {
        out,
        inp,
        lora: adapters && on,
    };
    Some(TtModel {
        vocab: a.vocab,
        hidden: h,
        layers: a.layers,
        attention: [
            lin(q, h, t.q),
            lin(kv, h, t.k),
            lin(kv, h, t.v),
            lin(h, q, t.o),
        ],
        mlp: [lin(i, h, t.gate), lin(h, i, t.down), lin(i, h, t.up)],
        output_lora: adapters && t.lm_head,
        rank: input.lora_rank,
        quantize: input.train == TrainMode::Qlora,
        rope: (input.max_position.unwrap_or(4096), a.head_dim),
    })
}

/// The model's setup as the framework runs it, into `alloc`; its words.
fn model_load(
    alloc: &mut Allocator,
    a: &Architecture,
    input: &EstimateInput,
) -> Result<String, EstimateError> {
    let path = input.framework.defaults().load;
    let adapter_value = input.lora_dtype.bytes();
    match path {
        LoadPath::Torchtune01 | LoadPath::Torchtune06 => {
            if let Some(m) = torchtune_model(a, input) {
                let p = if path == LoadPath::Torchtune01 {
                    TtPath {
                        clones: true,
                        torchao: Torchao::V01,
                        copy_on_device: true,
                        convert: true,
                    }
                } else {
                    TtPath {
                        clones: false,
                        torchao: Torchao::Chunked,
                        copy_on_device: false,
                        convert: false,
                    }
                };
                load::torchtune(alloc, &m, p);
                return Ok(if path == LoadPath::Torchtune01 {
                    "torchtune 0.1's model setup: one layer built on the device in bf16 and deep-copied per layer (TransformerDecoder's _get_clones), an NF4 weight cloned by dequantising and quantising it again (torchao 0.1's to_nf4 compares every value with the 16 levels at once: 64 B per value), the checkpoint's fp16 tensors moved to the device and quantised there (load_state_dict → torchtune's inplace_copy)".into()
                } else {
                    "torchtune 0.6's model setup: each layer built on the device in bf16, an NF4 weight quantised as it is built (torchao's to_nf4, 2^20 values at a time), the checkpoint quantised on the host and copied in".into()
                });
            }
        }
        LoadPath::Litgpt => {
            // fabric.init_module builds every tensor on the device (a 4-bit linear in
            // 16 bits, quantised by bitsandbytes), then load_checkpoint copies the
            // checkpoint in: a 4-bit weight's 16-bit value moved to the device and
            // quantised again in its place.
            let tensors = stored(a, input)?;
            let mut quantised = Vec::new();
            for (s, count, _) in &tensors {
                for _ in 0..*count {
                    match *s {
                        Stored::Dense(b) => {
                            alloc.malloc(b);
                        }
                        Stored::Bnb4 { n, dq } => {
                            let w = alloc.malloc(n.saturating_mul(2));
                            quantised.push((load::bnb_quantize_4bit(alloc, n, dq), n, dq));
                            alloc.free(w);
                        }
                    }
                }
            }
            place(alloc, &adapter_tensors(a, input, adapter_value));
            for (old, n, dq) in quantised {
                let w = alloc.malloc(n.saturating_mul(2));
                load::bnb_quantize_4bit(alloc, n, dq);
                alloc.free(w);
                for h in old {
                    alloc.free(h);
                }
            }
            return Ok("LitGPT's model setup: every tensor built on the device by fabric.init_module (a 4-bit linear in 16 bits, then quantised by bitsandbytes), then the checkpoint copied in (a 4-bit weight moved to the device in 16 bits and quantised again)".into());
        }
        LoadPath::Transformers => {}
    }
    let tensors = stored(a, input)?;
    load::transformers(alloc, &tensors);
    let upcast = tensors.iter().any(|(_, _, cast)| *cast);
    place(alloc, &adapter_tensors(a, input, adapter_value));
    Ok(format!(
        "transformers' from_pretrained: one warm-up block of the weights' bytes (caching_allocator_warmup), every tensor carved from it in checkpoint order{}{}",
        if tensors
            .iter()
            .any(|(s, _, _)| matches!(s, Stored::Bnb4 { .. }))
        {
            ", a 4-bit weight moved in 16 bits and quantised (bitsandbytes' quantize_4bit)"
        } else {
            ""
        },
        if !upcast {
            ""
        } else {
            "; PEFT's prepare_model_for_kbit_training casts the 16-bit modules to fp32, then empty_cache"
        }
    ))
}

/// The bytes of one of the step's lines, by key (0 when absent).
fn line(b: &Builder, key: LineKey) -> u64 {
    b.lines
        .iter()
        .filter(|l| l.key == key && l.in_total)
        .map(|l| l.bytes)
        .fold(0u64, u64::saturating_add)
}

/// The step's tensors, beyond the weights and adapters the load placed: the
/// persistent ones (gradients, optimizer states, master weights, `modules_to_save`
/// copies), the activations and the loss's tensors at the step's peak, and the
/// optimizer step's temporaries (one per trainable tensor), which come after the
/// backward has freed the step's tensors.
fn step_tensors(
    b: &Builder,
    a: &Architecture,
    input: &EstimateInput,
    seq: u64,
) -> (Tensors, Tensors, Tensors, Tensors) {
    let v = input.compute_dtype.bytes();
    let tokens = seq.saturating_mul(input.sequences);
    let hidden = tokens.saturating_mul(a.hidden).saturating_mul(v).max(1);
    // The trainable tensors' shapes in values: the adapters (and whole copies of
    // modules_to_save), or every stored matrix and vector of a full fine-tune.
    let shapes: Tensors = if input.train.adapters() {
        let mut s = adapter_tensors(a, input, 1);
        let m = ModulesToSave::parse("modules-to-save", &input.modules_to_save).unwrap_or_default();
        let copies = u64::from(m.embed).saturating_add(u64::from(m.lm_head));
        if copies > 0 {
            s.push((copies, a.vocab.saturating_mul(a.hidden)));
        }
        s
    } else {
        a.tensors()
            .map(|ts| {
                ts.iter()
                    .map(|t| (t.count, t.rows.saturating_mul(t.cols)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let values: u64 = shapes
        .iter()
        .map(|(c, n)| c.saturating_mul(*n))
        .fold(0, u64::saturating_add)
        .max(1);
    // A line's bytes spread over the trainable tensors, `per` tensors each (AdamW's
    // two states).
    let spread = |bytes: u64, per: u64| -> Tensors {
        let per = per.max(1);
        shapes
            .iter()
            .map(|(c, n)| {
                // This tensor's share of the line, in proportion to its values.
                let each = (u128::from(bytes).saturating_mul(u128::from(*n)))
                    .checked_div(u128::from(values).saturating_mul(u128::from(per)))
                    .unwrap_or(0);
                (
                    c.saturating_mul(per),
                    u64::try_from(each).unwrap_or(u64::MAX),
                )
            })
            .collect()
    };
    let mut persistent: Tensors = Vec::new();
    for (key, per) in [
        (LineKey::TrainingGradients, 1),
        (LineKey::TrainingGradBuckets, 1),
        (LineKey::TrainingOptimizer, 2),
        (LineKey::TrainingMasterWeights, 1),
    ] {
        let bytes = line(b, key);
        if key == LineKey::TrainingGradients && input.optimizer_in_backward {
            // One parameter's gradient at a time.
            persistent.push((1, bytes));
        } else if bytes > 0 {
            persistent.extend(spread(bytes, per));
        }
    }
    if input.train.adapters() {
        // modules_to_save's copies (the adapters line beyond the adapters the load
        // placed).
        let copies = line(b, LineKey::TrainingAdapters).saturating_sub(
            adapter_tensors(a, input, input.lora_dtype.bytes())
                .iter()
                .map(|(c, b)| c.saturating_mul(*b))
                .fold(0, u64::saturating_add),
        );
        if copies > 0 {
            persistent.push((1, copies));
        }
    }
    // The activations: each layer's input under checkpointing, the layer's MLP
    // tensors (tokens × intermediate) and hidden-sized tensors otherwise.
    let mut forward: Tensors = Vec::new();
    let mut acts = line(b, LineKey::Activations);
    // transformers 4.39's RoPE caches, within the activations line: a cos and a sin
    // tensor per layer, on the device from the load on (the step never frees them).
    if input.framework.defaults().transformers_rope_per_layer {
        let positions = input.max_position.unwrap_or(seq);
        if let Ok(total) =
            crate::training::transformers_rope_caches(a.layers, positions, a.head_dim, v)
        {
            let n = a.layers.saturating_mul(2);
            persistent.push((n, total.checked_div(n).unwrap_or(0)));
            acts = acts.saturating_sub(total);
        }
    }
    let mlp_tensor = tokens
        .saturating_mul(a.intermediate)
        .saturating_mul(v)
        .max(1);
    let layers = a.layers.max(1);
    if input.offload_activations {
        // Offloaded (torchtune's OffloadActivations, unsloth's checkpointing): the
        // line is what stays on the device — two layers' saved tensors, or two layer
        // inputs and the one layer recomputed — so it is placed as one layer's
        // tensors, not spread over every layer.
        let mlp_each = if input.train.adapters() { 3 } else { 4 };
        let mlp = mlp_tensor.saturating_mul(mlp_each).min(acts);
        let n_mlp = mlp.checked_div(mlp_tensor).unwrap_or(0);
        forward.push((n_mlp, mlp_tensor));
        let rest = acts.saturating_sub(n_mlp.saturating_mul(mlp_tensor));
        forward.push((rest.div_ceil(hidden), hidden));
    } else if input.checkpointing {
        let inputs = layers.saturating_mul(hidden).min(acts);
        forward.push((inputs.checked_div(hidden).unwrap_or(0), hidden));
        let rest = acts.saturating_sub(inputs);
        forward.push((rest.div_ceil(hidden), hidden));
    } else {
        let mlp_each = if input.train.adapters() { 3 } else { 4 };
        let per_layer = acts.checked_div(layers).unwrap_or(0);
        let mlp = mlp_tensor.saturating_mul(mlp_each).min(per_layer);
        forward.push((
            layers.saturating_mul(mlp.checked_div(mlp_tensor).unwrap_or(0)),
            mlp_tensor,
        ));
        forward.push((
            layers.saturating_mul(per_layer.saturating_sub(mlp).div_ceil(hidden)),
            hidden,
        ));
    }
    // AdamW's foreach temporaries (torch/optim/adamw.py `_multi_tensor_adamw`,
    // `torch._foreach_sqrt`: one `empty_like` per trainable tensor), whether or not
    // the optimizer_step line counts them: a LoRA adapter's are under 1 MiB each,
    // small-pool blocks that the large blocks the backward freed cannot serve.
    let optimizer_step = spread(b.optimizer_temporaries, 1);
    // The loss's tensors, each of one chunk or of the whole batch's logits
    // (transformers 4.39's are placed in program order by `peaks`).
    let logits = line(b, LineKey::Logits);
    if input.loss == Loss::FloatShifted {
        return (persistent, forward, Vec::new(), optimizer_step);
    }
    let piece = match input.loss {
        Loss::Chunked(n) => tokens.div_ceil(n.max(1)),
        Loss::ChunkedCompute(c) | Loss::ChunkedFabric(c) => {
            c.min(seq).saturating_mul(input.sequences)
        }
        Loss::Checkpointed(c) => c.min(tokens),
        _ => tokens,
    }
    .saturating_mul(a.vocab)
    .saturating_mul(
        if matches!(input.loss, Loss::ChunkedCompute(_) | Loss::Fused) {
            v
        } else {
            4
        },
    )
    .max(1);
    let mut loss = vec![(logits.checked_div(piece).unwrap_or(0), piece)];
    let rest = logits.checked_rem(piece).unwrap_or(0);
    if rest > 0 {
        loss.push((1, rest));
    }
    (persistent, forward, loss, optimizer_step)
}

/// transformers 4.39's loss in program order (`LlamaForCausalLM.forward`,
/// models/llama/modeling_llama.py at v4.39.3): `lm_head`'s logits in the compute
/// dtype, their fp32 copy (`logits.float()`, none in fp32 compute), the compute-dtype
/// ones freed as the name is rebound, then the shifted contiguous copy and
/// `CrossEntropyLoss`'s log-softmax — each larger than the freed block, which stays
/// cached beside them.
fn place_float_shifted(
    alloc: &mut Allocator,
    a: &Architecture,
    input: &EstimateInput,
    seq: u64,
) -> Result<Vec<Handle>, EstimateError> {
    let v = input.compute_dtype.bytes();
    let (_, [fp32, shifted, log_softmax]) =
        crate::training::float_shifted(seq, input.sequences, a.vocab)?;
    let compute = (v < 4).then(|| {
        alloc.malloc(
            seq.saturating_mul(input.sequences)
                .saturating_mul(a.vocab)
                .saturating_mul(v),
        )
    });
    let fp32 = alloc.malloc(fp32);
    if let Some(h) = compute {
        alloc.free(h);
    }
    Ok(vec![fp32, alloc.malloc(shifted), alloc.malloc(log_softmax)])
}

/// Adds `model_load` (the loading peak, shown) and `allocator.cache` (what the step's
/// reserved peak holds beyond the allocated lines) for a training run on one device.
pub(super) fn peaks(input: &EstimateInput, b: &mut Builder) -> Result<(), EstimateError> {
    let (Some(a), Some(seq)) = (input.arch, input.context) else {
        return Ok(());
    };
    if input.train == TrainMode::None || line(b, LineKey::Activations) == 0 {
        return Ok(());
    }
    let fsdp1_step = fsdp1_applies(input);
    if !fsdp1_step && (input.tp > 1 || input.pp > 1 || input.zero > 0 || input.fsdp != Fsdp::None) {
        b.assumptions.push("the caching allocator's reserved peak is modelled for one device without sharding: the need here is the allocated one".into());
        return Ok(());
    }
    // A bound on the simulation's work, checked before it starts.
    let tensors: u64 = a
        .tensors()?
        .iter()
        .map(|t| t.count)
        .fold(0, u64::saturating_add);
    if tensors.saturating_mul(4) > MAX_TENSORS || a.layers > 4096 {
        b.assumptions
            .push("too many tensors to place one by one: the need is the allocated one".into());
        return Ok(());
    }
    if fsdp1_step {
        return fsdp1(input, &a, seq, b);
    }
    let mut alloc = Allocator::new(input.expandable_segments);
    let how = model_load(&mut alloc, &a, input)?;
    let (load_allocated, load_reserved) = (alloc.peak_allocated(), alloc.peak_reserved());
    // unsloth returns the loading's cached segments to the driver before training
    // (models/llama.py `FastLlamaModel.post_patch`: gc.collect() and
    // torch.cuda.empty_cache() three times, unsloth 6dad5dd): the step starts from
    // the tensors alone.
    if input.framework.defaults().unsloth_rope_per_layer.is_some() {
        alloc.empty_cache();
    }
    // The cuBLAS workspaces (the `cublas.workspace` line): the forward's at the first
    // iteration's first GEMM, before any gradient or optimizer state exists, and the
    // backward's at its first GEMM; each a block of its own, kept (a request under
    // 10 MiB is carved from a 20 MiB segment or a cached block that holds it).
    let workspaces = line(b, LineKey::CublasWorkspace);
    if workspaces > 0 {
        let n = super::training::CUBLAS_THREADS;
        place(&mut alloc, &[(n, workspaces.checked_div(n).unwrap_or(0))]);
    }
    let (persistent, forward, loss, optimizer_step) = step_tensors(b, &a, input, seq);
    place(&mut alloc, &persistent);
    let mut at_forward = alloc;
    // The step's tensors still held when its backward ends: the backward frees them
    // before the optimizer step.
    let mut freed: Vec<Handle> = Vec::new();
    // The same condition as the activations line's (estimate/training.rs): unsloth's
    // step where the decoder's activations are derived, not assumed.
    let derived = b
        .lines
        .iter()
        .any(|l| l.key == LineKey::Activations && l.kind == Kind::Computed && l.bytes > 0);
    if super::training::unsloth_step_applies(input, &a) && derived {
        // unsloth 2024.4's step in program order (training::unsloth::step_2024): the
        // no-grad layers' temporaries leave their blocks cached, the logits and their
        // fp32 copy take what no cached block holds, and the recomputed layer's
        // tensors reuse the blocks the logits free.
        let v = input.compute_dtype.bytes();
        let positions = unsloth::rope_positions(seq, input.max_position);
        place(&mut at_forward, &[unsloth::rope_caches(&a, positions, v)?]);
        let tokens = checked_product(&[seq, input.sequences], "activations")?;
        let step = unsloth::step_2024(
            &a,
            tokens,
            input.lora_rank,
            v,
            input.train == TrainMode::Qlora,
        )?;
        let mut live = Vec::new();
        for op in &step.ops {
            match *op {
                unsloth::Op::Malloc(id, bytes) => live.push((id, at_forward.malloc(bytes))),
                unsloth::Op::Free(id) => {
                    if let Some(k) = live.iter().position(|(i, _)| *i == id) {
                        at_forward.free(live.swap_remove(k).1);
                    }
                }
            }
        }
        freed.extend(live.into_iter().map(|(_, h)| h));
    } else {
        freed = place_kept(&mut at_forward, &forward);
        let logits = if input.loss == Loss::FloatShifted {
            place_float_shifted(&mut at_forward, &a, input, seq)?
        } else {
            place_kept(&mut at_forward, &loss)
        };
        // Logits the loop holds through the optimizer step stay allocated.
        if input
            .loss
            .kept_through_step(seq, input.sequences, a.vocab)?
            == 0
        {
            freed.extend(logits);
        }
    }
    // The optimizer step, after the backward (the order of the first step; each later
    // step finds its segments cached): the step's tensors are freed, then the
    // optimizer's temporaries are carved from the blocks they left where the pool and
    // sizes allow, in new segments otherwise, and freed. The caching allocator keeps
    // every segment it reserved (transformers v4.39.3's trainer.py calls no
    // `empty_cache` between steps), so those new segments stay reserved
    // through the next step's forward: the reserved peak is the sequence's, not the
    // larger of its moments. For LoRA the temporaries are the adapters' sizes, under
    // 1 MiB each: small-pool blocks (c10/cuda/CUDACachingAllocator.cpp `get_pool`,
    // `kSmallSize`), which none of the activations' large blocks can serve.
    for h in freed {
        at_forward.free(h);
    }
    for h in place_kept(&mut at_forward, &optimizer_step) {
        at_forward.free(h);
    }
    let reserved = at_forward.peak_reserved();
    // The step's allocated need: every counted line but the reserve and the CUDA
    // context, which the driver holds outside torch's allocator: beside its reserved
    // segments, never in them.
    let allocated = b
        .lines
        .iter()
        .filter(|l| l.in_total && l.group != Group::Reserve && l.key != LineKey::CudaContext)
        .map(|l| l.bytes)
        .fold(0u64, u64::saturating_add);
    b.line(
        LineKey::ModelLoad,
        "Model loading peak (shown beside the step's)",
        load_allocated,
        load_allocated,
        Kind::Computed,
        false,
        format!(
            "{how}; allocated peak {load_allocated} B, reserved {load_reserved} B (the caching allocator's segments, kept for the step)"
        ),
        &[
            ("framework", {
                let n = input.framework.name();
                if n.is_empty() { "transformers + PEFT".into() } else { n.into() }
            }),
            ("reserved", load_reserved.to_string()),
            ("expandable-segments", input.expandable_segments.to_string()),
        ],
    );
    let cache = reserved.saturating_sub(allocated);
    if cache > 0 {
        b.line(
            LineKey::AllocatorCache,
            "Caching allocator: reserved beyond the allocated peak",
            cache,
            cache,
            Kind::Computed,
            true,
            format!(
                "the run's reserved peak {reserved} B (max_memory_reserved: {}) − the step's allocated {allocated} B; PyTorch's CUDACachingAllocator (torch 2.11): 512 B blocks, 2 MiB small-pool segments, 20 MiB segments under 10 MiB, larger ones rounded to 2 MiB{}",
                if load_reserved >= reserved {
                    "the model's loading left it cached"
                } else {
                    "the step's tensors placed in the segments the loading left cached"
                },
                if input.expandable_segments {
                    ", expandable segments"
                } else {
                    ""
                }
            ),
            &[
                ("allocated", allocated.to_string()),
                ("reserved", reserved.to_string()),
                ("loading reserved", load_reserved.to_string()),
            ],
        );
    }
    Ok(())
}

/// Whether the step is FSDP1's as torchtune's 2024 recipes ran it
/// (`--framework torchtune@0.1`: `FullyShardedDataParallel` with `FULL_SHARD` around
/// every decoder layer, no mixed precision), a full fine-tune or a LoRA one (every
/// adapter matrix its own unit) on data-parallel ranks alone: the one whose reserved
/// peak [`crate::training::fsdp1`] models.
fn fsdp1_applies(input: &EstimateInput) -> bool {
    input.framework == Framework::Torchtune01
        && input.fsdp == Fsdp::Full
        && input.gpus > 1
        && matches!(input.train, TrainMode::Full | TrainMode::Lora)
        && !input.master_weights
        && input.tp <= 1
        && input.pp <= 1
        && input.cp <= 1
        && input.ep <= 1
        && input.offload_param == super::input::Offload::None
        && !input.optimizer_in_backward
        && !input.offload_activations
}

/// The `allocator.cache` line of an FSDP1 step: its three streams' pools
/// ([`crate::training::fsdp1::reserved`]) beyond the allocated lines.
fn fsdp1(
    input: &EstimateInput,
    a: &Architecture,
    seq: u64,
    b: &mut Builder,
) -> Result<(), EstimateError> {
    // FULL_SHARD over every rank (no tp/pp here): one flat parameter per unit split `gpus` ways.
    let world = input.gpus;
    let v = input.compute_dtype.bytes();
    let layers = a.layers.max(1);
    let mut layer_tensors = Vec::new();
    let (mut emb, mut norm, mut head) = (0u64, 0u64, 0u64);
    for t in a.tensors()? {
        let n = t.rows.saturating_mul(t.cols);
        let layered = repeats_per_layer(&t, layers);
        if layered {
            for _ in 0..t.count.checked_div(layers).unwrap_or(0) {
                layer_tensors.push(n);
            }
        } else {
            match t.class {
                ParamClass::Embeddings => emb = emb.saturating_add(n.saturating_mul(t.count)),
                ParamClass::LmHead => head = head.saturating_add(n.saturating_mul(t.count)),
                ParamClass::Norms => norm = norm.saturating_add(n.saturating_mul(t.count)),
                // A model with more than decoder layers and their root is not the
                // recipes' Llama: no figure.
                _ => return Ok(()),
            }
        }
    }
    let mut root_tensors = vec![emb, norm];
    if head > 0 && !a.tied_embeddings {
        root_tensors.push(head);
    }
    // LoRA (torchtune's lora_finetune_distributed): the layers and the root frozen,
    // each adapter matrix a unit of its own inside its layer, in forward order
    // (torchtune 0.1's CausalSelfAttention q, k, v, then output_proj; FeedForward w1,
    // w3, w2). An adapted output projection, a MoE's experts or adapters of another
    // dtype than the base are not this recipe's: no figure.
    let frozen = input.train == TrainMode::Lora;
    let mut adapters = Vec::new();
    if frozen {
        let t = LoraTargets::parse("lora-targets", &input.lora_targets)?;
        if t.lm_head || a.moe.is_some() || input.lora_dtype != input.compute_dtype {
            return Ok(());
        }
        let r = input.lora_rank;
        let q = checked_product(&[a.heads, a.head_dim], "LoRA parameters")?;
        let kv = checked_product(&[a.kv_heads, a.head_dim], "LoRA parameters")?;
        let (h, i) = (a.hidden, a.intermediate);
        for (on, (inp, out)) in [
            (t.q, (h, q)),
            (t.k, (h, kv)),
            (t.v, (h, kv)),
            (t.o, (q, h)),
            (t.gate && a.gated_mlp, (h, i)),
            (t.up, (h, i)),
            (t.down, (i, h)),
        ] {
            if on {
                adapters.push(checked_product(&[r, inp], "LoRA parameters")?);
                adapters.push(checked_product(&[out, r], "LoRA parameters")?);
            }
        }
    }
    let tokens = checked_product(&[seq, input.sequences], "activations")?;
    let hidden = checked_product(&[tokens, a.hidden, v], "activations")?.max(1);
    let mlp = checked_product(&[tokens, a.intermediate, v], "activations")?.max(1);
    // One layer's saved tensors beside its input, as the activations line counts them:
    // under checkpointing the one layer recomputed, else each layer's share.
    let acts = b.device(LineKey::Activations);
    let per_layer = if input.checkpointing {
        acts.saturating_sub(layers.saturating_mul(hidden))
    } else {
        acts.checked_div(layers).unwrap_or(0).saturating_sub(hidden)
    };
    let n_mlp = per_layer.checked_div(mlp).unwrap_or(0).min(4);
    let mut layer_saved = vec![mlp; usize::try_from(n_mlp).unwrap_or(0)];
    let rest = per_layer.saturating_sub(n_mlp.saturating_mul(mlp));
    for _ in 0..rest.div_ceil(hidden) {
        layer_saved.push(hidden.min(rest));
    }
    // The loss's tensors, each of the whole batch's fp32 logits.
    let logits_bytes = b.device(LineKey::Logits);
    let piece = checked_product(&[tokens, a.vocab, 4], "logits")?.max(1);
    let whole = logits_bytes.checked_div(piece).unwrap_or(0);
    let mut logits = vec![piece; usize::try_from(whole).unwrap_or(0)];
    let rest = logits_bytes.checked_rem(piece).unwrap_or(0);
    if rest > 0 {
        logits.push(rest);
    }
    let kept = input
        .loss
        .kept_through_step(seq, input.sequences, a.vocab)?;
    // The optimizer's states and temporaries per shard element, in the parameters'
    // dtype (no master weights).
    let elements = layer_tensors
        .iter()
        .fold(0u64, |s, n| s.saturating_add(*n))
        .saturating_mul(layers)
        .saturating_add(root_tensors.iter().fold(0u64, |s, n| s.saturating_add(*n)));
    let shard_bytes = if frozen {
        adapters
            .iter()
            .fold(0u64, |s, n| s.saturating_add(n.div_ceil(world.max(1))))
            .saturating_mul(layers)
    } else {
        elements.div_ceil(world.max(1))
    }
    .saturating_mul(v)
    .max(1);
    let states = b
        .device(LineKey::TrainingOptimizer)
        .saturating_add(shard_bytes.checked_div(2).unwrap_or(0))
        .checked_div(shard_bytes)
        .unwrap_or(0);
    let temporaries = input
        .optimizer
        .step_temporary_bytes(1, input.compute_dtype)?
        .checked_div(v.max(1))
        .unwrap_or(0);
    let step = crate::training::fsdp1::Step {
        world,
        value: v,
        layers,
        frozen,
        adapters,
        layer_tensors,
        root_tensors,
        hidden,
        layer_saved,
        checkpointing: input.checkpointing,
        logits,
        kept,
        states,
        temporaries,
        // torchtune 0.1's recipes log `loss.item()` on rank 0 every step
        // (`log_every_n_steps` null in the configs, 1 in the recipe).
        sync_after_forward: true,
        iterations: 3,
        workspace: b
            .device(LineKey::CublasWorkspace)
            .checked_div(super::training::CUBLAS_THREADS)
            .unwrap_or(0),
    };
    if b.step_only {
        b.fsdp1_step = Some(step);
        return Ok(());
    }
    let room = crate::training::fsdp1::reserved(&step);
    let least = crate::training::fsdp1::least(&step);
    let allocated = b
        .lines
        .iter()
        .filter(|l| l.in_total && l.group != Group::Reserve && l.key != LineKey::CudaContext)
        .map(|l| l.device_bytes)
        .fold(0u64, u64::saturating_add);
    // The need: the least device memory the step runs in (past it the allocator
    // returns its cache and tries again), beyond the allocated lines. What
    // `max_memory_reserved` reads on a device with room is shown beside it.
    let cache = least.saturating_sub(allocated);
    b.line(
        LineKey::AllocatorCache,
        "Caching allocator: what FSDP1's three streams reserve beyond the allocated peak",
        cache,
        cache,
        Kind::Computed,
        true,
        format!(
            "FSDP1's step (three iterations) replayed through torch's caching allocator, one pool per stream. With room the pools reserve default {} B + unshard {} B + post-backward {} B = {} B (max_memory_reserved on a device with room); the step runs in {least} B (past it the allocator waits for the streams' events and returns every free segment, release_cached_blocks, then tries again), {cache} B beyond the allocated lines {allocated} B. A block serves only its own stream; the unsharded flat parameters (all-gathered on the unshard stream) and flat gradients (reduce-scattered from the post-backward stream) return to their pools once the rate limiter's synchronisation proves their streams done (limit_all_gathers: 2 all-gathers in flight; record_stream on the compute, post-backward and NCCL streams). torch 2.2: torch/distributed/fsdp/_runtime_utils.py (_unshard, _reshard, _post_backward_hook, _reduce_grad, _get_reduce_scatter_tensors), _limiter_utils.py (_FreeEventQueue), c10/cuda/CUDACachingAllocator.cpp",
            room.per_stream[0], room.per_stream[1], room.per_stream[2], room.total
        ),
        &[
            ("allocated", allocated.to_string()),
            ("reserved", room.total.to_string()),
            ("least reserved", least.to_string()),
            ("default stream", room.per_stream[0].to_string()),
            ("unshard stream", room.per_stream[1].to_string()),
            ("post-backward stream", room.per_stream[2].to_string()),
        ],
    );
    Ok(())
}
