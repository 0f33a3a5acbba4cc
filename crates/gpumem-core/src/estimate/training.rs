//! The training state's lines: gradients, optimizer states, master weights, LoRA
//! adapters and activations.

use super::*;
use crate::estimate::Pipeline;
use crate::training::{ModulesToSave, loss_peak};

/// LoRA-trainable parameters: r × (in + out) per targeted projection per layer
/// (attention targets on attention layers only, MLP targets on MLP layers only: a
/// hybrid's mixer projections are not among the targets), and r × (hidden + vocab) for
/// an adapted output projection. `stacked`: PEFT's adapters on transformers 5's
/// stacked experts ([`super::weights::peft_stacked_experts`]): gate and up fused into
/// one `gate_up_proj` adapter at rank 2r, r·E·(2·i + h)·2 for both, beside
/// `down_proj`'s r·E·(i + h), and the router's weight r·(h + E) per MoE layer when the
/// gate is targeted (the router's v4 name is `gate`; counted whenever gate is, the
/// larger). Families PEFT does not convert (Qwen2-MoE itself, PhiMoE, GraniteMoE)
/// adapt no routed expert: their count is above theirs, the safe side.
fn lora_params(
    a: &Architecture,
    rank: u64,
    t: LoraTargets,
    stacked: bool,
) -> Result<u64, EstimateError> {
    let what = "LoRA parameters";
    let over = || EstimateError::Overflow { what };
    // acc + x + y, checked.
    let add = |acc: u64, x: u64, y: u64| {
        acc.checked_add(x)
            .and_then(|s| s.checked_add(y))
            .ok_or_else(over)
    };
    let q = checked_product(&[a.heads, a.head_dim], what)?;
    let kv = checked_product(&[a.kv_heads, a.head_dim], what)?;
    let h = a.hidden;
    let mlp_layers = a.mlp_layer_count();
    let (inter, mlp_count) = match a.moe {
        Some(Moe {
            experts,
            expert_intermediate,
            dense_layers,
            ..
        }) => (
            expert_intermediate,
            add(
                checked_product(&[experts, mlp_layers.saturating_sub(dense_layers)], what)?,
                dense_layers,
                0,
            )?,
        ),
        // Mamba's blocks have no MLP (intermediate 0).
        None if a.intermediate == 0 => (0, 0),
        None => (a.intermediate, mlp_layers),
    };
    let mut per_layer_attn = 0u64;
    let mut mlp = 0u64;
    for (on, in_out) in [(t.q, (h, q)), (t.o, (h, q)), (t.k, (h, kv)), (t.v, (h, kv))] {
        if on {
            per_layer_attn = add(per_layer_attn, in_out.0, in_out.1)?;
        }
    }
    for (on, in_out) in [
        (t.gate && a.gated_mlp, (h, inter)),
        (t.up, (h, inter)),
        (t.down, (inter, h)),
    ] {
        if on {
            mlp = add(mlp, in_out.0, in_out.1)?;
        }
    }
    // Multi-head latent attention's linears (DeepSeek's `q_a_proj`, `q_b_proj` — or one
    // `q_proj` without a query rank —, `kv_a_proj_with_mqa`, `kv_b_proj`, `o_proj`), all
    // adapted when every attention target is (PEFT's `all-linear`), in place of q, k,
    // v and o at the heads' width.
    if let Some(m) = a.mla.filter(|_| t.q && t.k && t.v && t.o) {
        let qk = add(m.qk_nope_dim, m.qk_rope_dim, 0)?;
        let q_out = checked_product(&[a.heads, qk], what)?;
        let v_out = checked_product(&[a.heads, m.v_head_dim], what)?;
        let kv_out = checked_product(&[a.heads, add(m.qk_nope_dim, m.v_head_dim, 0)?], what)?;
        let mut per = if m.q_lora_rank > 0 {
            add(add(h, m.q_lora_rank, 0)?, m.q_lora_rank, q_out)?
        } else {
            add(h, q_out, 0)?
        };
        per = add(per, add(h, m.kv_lora_rank, m.qk_rope_dim)?, 0)?;
        per = add(per, add(m.kv_lora_rank, kv_out, 0)?, 0)?;
        per_layer_attn = add(per, v_out, h)?;
    }
    let attn = checked_product(&[rank, per_layer_attn, a.attention_layers()], what)?;
    let mut mlp = checked_product(&[rank, mlp, mlp_count], what)?;
    if let Some(m) = a.moe.filter(|m| stacked && m.experts > 0) {
        let moe_layers = mlp_layers.saturating_sub(m.dense_layers);
        let experts = checked_product(&[m.experts, moe_layers], what)?;
        // The fused gate_up adapter at rank 2r holds r·(2i + h)·2 where gate's and up's
        // separate adapters held r·(i + h) each: r·2i more per expert.
        if t.gate && t.up && a.gated_mlp {
            mlp = add(mlp, checked_product(&[rank, 2, inter, experts], what)?, 0)?;
        }
        if t.gate {
            let router = checked_product(&[rank, add(h, m.experts, 0)?, moe_layers], what)?;
            mlp = add(mlp, router, 0)?;
        }
    }
    let head = if t.lm_head {
        checked_product(&[rank, add(h, a.vocab, 0)?], what)?
    } else {
        0
    };
    add(attn, mlp, head)
}

/// The optimizer states a paged bitsandbytes optimizer keeps on the device, in
/// PyTorch's allocator: those of every trainable tensor under
/// [`crate::training::PAGED_MIN_VALUES`] values (`get_state_buffer` allocates them with
/// `torch.zeros_like`). LoRA's tensors are each adapter's `lora_A` (r × in) and
/// `lora_B` (out × r), lit-gpt 2023's fused q/k/v adapter one of each over the enabled
/// projections; a full fine-tune's, the architecture's tensors.
fn unpaged_state_bytes(
    input: &EstimateInput,
    a: &Architecture,
    state: Dtype,
) -> Result<u64, EstimateError> {
    use crate::training::PAGED_MIN_VALUES;
    let what = "optimizer states";
    // (values of one tensor, how many such tensors)
    let mut tensors: Vec<(u64, u64)> = Vec::new();
    match input.train {
        TrainMode::Full => {
            for t in a.tensors()? {
                if t.class != ParamClass::Tower {
                    tensors.push((t.rows.saturating_mul(t.cols), t.count));
                }
            }
        }
        TrainMode::Lora | TrainMode::Qlora => {
            let t = LoraTargets::parse("lora-targets", &input.lora_targets)?;
            let r = input.lora_rank;
            let (h, q, kv) = (
                a.hidden,
                checked_product(&[a.heads, a.head_dim], what)?,
                checked_product(&[a.kv_heads, a.head_dim], what)?,
            );
            let attn_layers = a.attention_layers();
            let mut projection = |on: bool, inp: u64, out: u64, count: u64| {
                if on {
                    tensors.push((r.saturating_mul(inp), count));
                    tensors.push((r.saturating_mul(out), count));
                }
            };
            if input.framework.defaults().lit_gpt_2023 {
                // LoRAQKVLinear: lora_A (r · enabled, in), lora_B (Σ enabled widths, r).
                let on = [(t.q, q), (t.k, kv), (t.v, kv)];
                let n = on.iter().filter(|(e, _)| *e).count() as u64;
                let width = on
                    .iter()
                    .filter(|(e, _)| *e)
                    .fold(0u64, |acc, (_, w)| acc.saturating_add(*w));
                projection(n > 0, n.saturating_mul(h), width, attn_layers);
            } else {
                projection(t.q, h, q, attn_layers);
                projection(t.k, h, kv, attn_layers);
                projection(t.v, h, kv, attn_layers);
            }
            projection(t.o, q, h, attn_layers);
            let mlp_layers = a.mlp_layer_count();
            let (inter, mlp_count) = match a.moe {
                Some(m) => (
                    m.expert_intermediate,
                    m.experts
                        .saturating_mul(mlp_layers.saturating_sub(m.dense_layers))
                        .saturating_add(m.dense_layers),
                ),
                None => (a.intermediate, mlp_layers),
            };
            if inter > 0 {
                projection(t.gate && a.gated_mlp, h, inter, mlp_count);
                projection(t.up, h, inter, mlp_count);
                projection(t.down, inter, h, mlp_count);
            }
            projection(t.lm_head, h, a.vocab, 1);
        }
        TrainMode::None => {}
    }
    let mut bytes = 0u64;
    for (values, count) in tensors {
        if values > 0 && values < PAGED_MIN_VALUES {
            let one = input.optimizer.tensor_state_bytes(values, state)?;
            bytes = bytes
                .checked_add(checked_product(&[one, count], what)?)
                .ok_or(EstimateError::Overflow { what })?;
        }
    }
    Ok(bytes)
}

/// The largest single trainable tensor's values: what an optimizer fused into the
/// backward holds at once (its gradient, then its update). A full fine-tune's largest
/// weight (the vocabulary matrices or an MLP projection); LoRA's largest adapter
/// matrix, or a `modules_to_save` copy.
fn largest_trainable(input: &EstimateInput, a: Option<&Architecture>) -> u64 {
    let Some(a) = a else { return 0 };
    match input.train {
        TrainMode::Full => a
            .tensors()
            .map(|ts| {
                ts.iter()
                    .filter(|t| t.class != ParamClass::Tower)
                    .map(|t| t.rows.saturating_mul(t.cols))
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0),
        TrainMode::Lora | TrainMode::Qlora => {
            let t = LoraTargets::parse("lora-targets", &input.lora_targets).unwrap_or_default();
            let r = input.lora_rank;
            let (h, q, kv) = (
                a.hidden,
                a.heads.saturating_mul(a.head_dim),
                a.kv_heads.saturating_mul(a.head_dim),
            );
            let inter = a.moe.map_or(a.intermediate, |m| {
                m.expert_intermediate.max(a.intermediate)
            });
            let mut big = 0u64;
            for (on, inp, out) in [
                (t.q, h, q),
                (t.k, h, kv),
                (t.v, h, kv),
                (t.o, q, h),
                (t.gate, h, inter),
                (t.up, h, inter),
                (t.down, inter, h),
                (t.lm_head, h, a.vocab),
            ] {
                if on {
                    big = big.max(r.saturating_mul(inp.max(out)));
                }
            }
            let m =
                ModulesToSave::parse("modules-to-save", &input.modules_to_save).unwrap_or_default();
            if m.embed || m.lm_head {
                big = big.max(a.vocab.saturating_mul(h));
            }
            big
        }
        TrainMode::None => 0,
    }
}

/// Adds the training lines; returns the trainable parameters (0 for inference).
pub(super) fn training(
    input: &EstimateInput,
    params: Option<u64>,
    weights_bytes: u64,
    split: &Split,
    plan: &super::ranks::Plan,
    b: &mut Builder,
) -> Result<u64, EstimateError> {
    if input.train == TrainMode::None {
        return Ok(0);
    }
    let grad = input.grad_dtype.unwrap_or(input.compute_dtype);
    let modules = ModulesToSave::parse("modules-to-save", &input.modules_to_save)?;
    // The vocabulary modules' dtype: what a `modules_to_save` copy trains in.
    let vocab_dtype = match input.keep_format {
        StorageFormat::Dense { dtype } => dtype,
        _ => input.compute_dtype,
    };
    let (trainable, state_dtype, master, copies) = match input.train {
        TrainMode::Full => {
            let Some(params) = params else {
                return Err(EstimateError::invalid(
                    "train",
                    "full training needs the parameter count or the architecture",
                ));
            };
            let master = input.master_weights && input.compute_dtype != Dtype::F32;
            (
                params,
                if master {
                    Dtype::F32
                } else {
                    input.compute_dtype
                },
                master,
                0,
            )
        }
        TrainMode::Lora | TrainMode::Qlora => {
            let Some(a) = input.arch else {
                return Err(EstimateError::invalid(
                    "train",
                    "LoRA needs the architecture to size its adapters",
                ));
            };
            // PEFT keeps adapter weights in fp32 (autocast_adapter_dtype) on a frozen
            // base; torchtune and LitGPT in the compute dtype (`lora-dtype`).
            let copies = checked_product(
                &[
                    u64::from(modules.embed).saturating_add(u64::from(modules.lm_head)),
                    a.vocab,
                    a.hidden,
                ],
                "modules_to_save",
            )?;
            (
                lora_params(
                    &a,
                    input.lora_rank,
                    LoraTargets::parse("lora-targets", &input.lora_targets)?,
                    super::weights::peft_stacked_experts(input),
                )?,
                input.lora_dtype,
                false,
                copies,
            )
        }
        TrainMode::None => return Ok(0),
    };
    // Device share of trainable state follows the weights' split.
    let device_share = |bytes: u64| split.layered(bytes, true);
    let add = |b: &mut Builder,
               key: LineKey,
               label: Cow<'static, str>,
               bytes: u64,
               formula: String,
               inputs: &[(&'static str, String)]| {
        b.line(
            key,
            label,
            bytes,
            device_share(bytes),
            Kind::Computed,
            true,
            formula,
            inputs,
        );
    };
    let plus = |x: u64, y: u64, what: &'static str| {
        x.checked_add(y).ok_or(EstimateError::Overflow { what })
    };
    let tr = ("trainable parameters", trainable.to_string());
    let tr_step = tr.clone();
    if input.framework != Framework::Unnamed {
        b.assumptions.push(format!(
            "framework {}: {} (each unless given)",
            input.framework.name(),
            input.framework.said()
        ));
    }
    if input.train.adapters() {
        let adapters = checked_product(&[trainable, input.lora_dtype.bytes()], "adapters")?;
        let copy_bytes = checked_product(&[copies, vocab_dtype.bytes()], "modules_to_save")?;
        let mut formula = format!(
            "r × (in + out) per targeted projection × {} B",
            input.lora_dtype.bytes()
        );
        if copies > 0 {
            formula.push_str(&format!(
                " + trainable copies of {} ({copies} values × {} B: PEFT's ModulesToSaveWrapper keeps the frozen original beside them)",
                modules.name(),
                vocab_dtype.bytes()
            ));
        }
        add(
            b,
            LineKey::TrainingAdapters,
            format!("LoRA adapters ({})", input.lora_dtype.name()).into(),
            plus(adapters, copy_bytes, "adapters")?,
            formula,
            &[
                tr.clone(),
                ("lora-rank", input.lora_rank.to_string()),
                ("lora-targets", input.lora_targets.clone()),
                ("modules-to-save", modules.name()),
            ],
        );
    }
    let grad_dtype = if input.train.adapters() {
        input.lora_dtype
    } else {
        grad
    };
    let gbytes = plus(
        checked_product(&[trainable, grad_dtype.bytes()], "gradients")?,
        checked_product(&[copies, vocab_dtype.bytes()], "gradients")?,
        "gradients",
    )?;
    // An optimizer fused into the backward steps each parameter as its gradient is
    // ready and frees it (torchtune's `OptimizerInBackwardWrapper`, one optimizer per
    // parameter hooked with `register_post_accumulate_grad_hook`): one gradient at a
    // time, the largest, and that parameter's step temporaries beside it.
    let largest = largest_trainable(input, input.arch.as_ref());
    if input.optimizer_in_backward {
        let one = checked_product(&[largest, grad_dtype.bytes()], "gradients")?;
        let step = input.optimizer.step_temporary_bytes(largest, state_dtype)?;
        let bytes = plus(one, step, "gradients")?;
        b.line(
            LineKey::TrainingGradients,
            "Gradients (optimizer in the backward: one parameter's at a time)",
            bytes,
            bytes,
            Kind::Computed,
            true,
            format!(
                "the largest trainable tensor's gradient, {largest} values × {} B, and its {} step's temporaries: each gradient is stepped and freed inside the backward (optimizer_in_bwd)",
                grad_dtype.bytes(),
                input.optimizer.name()
            ),
            &[tr.clone(), ("largest tensor", largest.to_string())],
        );
    } else {
        add(
            b,
            LineKey::TrainingGradients,
            "Gradients".into(),
            gbytes,
            format!(
                "trainable × {} B ({}){}",
                grad_dtype.bytes(),
                grad_dtype.name(),
                if copies > 0 {
                    format!(" + the copies' × {} B", vocab_dtype.bytes())
                } else {
                    String::new()
                }
            ),
            std::slice::from_ref(&tr),
        );
    }
    let obytes = plus(
        input.optimizer.state_bytes(trainable, state_dtype)?,
        input.optimizer.state_bytes(copies, vocab_dtype)?,
        "optimizer states",
    )?;
    if obytes > 0 {
        let formula = match input.optimizer {
            Optimizer::Adamw | Optimizer::AdamwFused => format!(
                "2 states × trainable × {} B ({})",
                state_dtype.bytes(),
                state_dtype.name()
            ),
            Optimizer::PagedAdamw => {
                "2 fp32 states × trainable (bitsandbytes' 32-bit optimizer)".into()
            }
            Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit => {
                "2 states × (trainable × 1 B + fp32 absmax per 256 values)".into()
            }
            _ => format!("1 state × trainable × {} B", state_dtype.bytes()),
        };
        if input.optimizer.paged() {
            // The small tensors' states: on the device, in the allocator.
            let unpaged = match input.arch {
                Some(a) => unpaged_state_bytes(input, &a, state_dtype)?.min(obytes),
                None => 0,
            };
            if unpaged > 0 {
                add(
                    b,
                    LineKey::TrainingOptimizer,
                    format!(
                        "Optimizer states ({}, tensors under 1e5 values: on the device)",
                        input.optimizer.name()
                    )
                    .into(),
                    unpaged,
                    format!(
                        "{formula}, for each trainable tensor under 1e5 values: bitsandbytes' get_state_buffer allocates those with torch.zeros_like on the device, not paged"
                    ),
                    &[tr.clone(), ("optimizer", input.optimizer.name().into())],
                );
            }
            // CUDA unified memory: not the caching allocator's, and paged out to the
            // host when the device is full — shown, never part of the device's need.
            let paged = obytes.saturating_sub(unpaged);
            if paged > 0 {
                b.line(
                LineKey::HostPaged,
                format!(
                    "Optimizer states ({}, paged: CUDA unified memory)",
                    input.optimizer.name()
                ),
                paged,
                0,
                Kind::Computed,
                false,
                format!(
                    "{formula}, allocated with cudaMallocManaged (bitsandbytes' get_paged): on the device while there is room, paged to the host under pressure; outside torch's allocator and the device's need"
                ),
                &[tr.clone(), ("optimizer", input.optimizer.name().into())],
            );
            }
        } else {
            add(
                b,
                LineKey::TrainingOptimizer,
                format!("Optimizer states ({})", input.optimizer.name()).into(),
                obytes,
                formula,
                &[tr.clone(), ("optimizer", input.optimizer.name().into())],
            );
        }
    }
    if master {
        let mbytes = checked_product(&[trainable, 4], "master weights")?;
        add(
            b,
            LineKey::TrainingMasterWeights,
            "fp32 master weights".into(),
            mbytes,
            "trainable × 4 B".into(),
            &[tr],
        );
    }
    if input.train.adapters() {
        b.assumptions.push(format!(
            "LoRA: the frozen base stays in its storage format ({} B of weights)",
            weights_bytes
        ));
    }
    if input.train == TrainMode::Qlora {
        b.assumptions.push(format!(
            "QLoRA as its recipes run it: the base's linear layers in bitsandbytes {}, the other modules in {} and activation checkpointing {} (peft's prepare_model_for_kbit_training casts them to fp32 and turns it on; --keep-format bf16 and --checkpointing false say otherwise); 4-bit kernel {} ({})",
            input.format.map(|f| f.name()).unwrap_or_else(|| "nf4-dq".into()),
            input.keep_format.name(),
            if input.checkpointing { "on" } else { "off" },
            input.qlora_kernel.name(),
            match input.qlora_kernel {
                QloraKernel::Bnb => "bitsandbytes 0.43.2 or later, or torchao: each 4-bit linear keeps only its packed weight",
                QloraKernel::Bnb0431 => "bitsandbytes 0.43.1 or earlier: each 4-bit linear keeps its input",
            }
        ));
    }
    // Activations: derived from transformers' code where the architecture is one the
    // derivation covers (checked against traces), else an assumption that says why.
    if let (Some(a), Some(seq)) = (input.arch, input.context) {
        let value = input.compute_dtype.bytes();
        // PEFT's prepare_model_for_kbit_training leaves the embeddings and norms in
        // fp32 (`keep-format fp32`), so the residual stream runs in fp32 between the
        // 16-bit linears.
        let kept_fp32 = input.train.adapters()
            && input.keep_format == StorageFormat::Dense { dtype: Dtype::F32 }
            && input.compute_dtype != Dtype::F32;
        // Over a QLoRA base, as transformers and PEFT run it (the frameworks whose step
        // is PEFT's layers over transformers' decoder), that is derived
        // (`Adapters::fp32_hidden`); a 16-bit LoRA base with fp32 norms, or another
        // framework's layers, stays assumed below.
        let fp32_hidden = kept_fp32
            && input.train == TrainMode::Qlora
            && matches!(
                input.framework,
                Framework::Unnamed | Framework::Transformers
            );
        let adapters = if input.train.adapters() {
            let targets = LoraTargets::parse("lora-targets", &input.lora_targets)?;
            let autocast = input.autocast.is_some();
            // autocast casts each fp32 adapter weight to the compute dtype once (its
            // cast cache, torch/csrc/autograd/autocast_mode.h `cached_cast`) and
            // `F.linear` saves the copy for the backward.
            let weight_copies = if autocast && input.lora_dtype.bytes() != value {
                checked_product(
                    &[
                        lora_params(
                            &a,
                            input.lora_rank,
                            targets,
                            super::weights::peft_stacked_experts(input),
                        )?,
                        value,
                    ],
                    "activations",
                )?
            } else {
                0
            };
            Some(Adapters {
                targets,
                rank: input.lora_rank,
                value: input.lora_dtype.bytes(),
                dropout: input.lora_dropout,
                base_keeps_inputs: input.train == TrainMode::Qlora
                    && input.qlora_kernel == QloraKernel::Bnb0431,
                base_4bit: input.train == TrainMode::Qlora,
                fp32_hidden,
                autocast,
                weight_copies,
                modules,
            })
        } else {
            None
        };
        let lit_gpt = input.framework.defaults().lit_gpt_2023;
        let derive = |checkpointing: bool| {
            if let (true, Some(ad)) = (lit_gpt, adapters.as_ref()) {
                return Ok(crate::training::litgpt::activations(
                    &a,
                    seq,
                    input.sequences,
                    value,
                    checkpointing,
                    ad,
                ));
            }
            decoder_activations(
                &a,
                seq,
                input.sequences,
                value,
                checkpointing,
                input.attention,
                adapters.as_ref(),
            )
        };
        let mut derived = derive(input.checkpointing)?;
        let layers = a.layers.max(1);
        let every = input.checkpointing_every.max(1);
        let layer_input = checked_product(
            &[
                seq,
                input.sequences,
                a.hidden,
                if fp32_hidden { 4 } else { value },
            ],
            "activations",
        )?;
        if input.checkpointing_policy == CheckpointPolicy::Op {
            // torchtitan's selective op policy: each layer also keeps what the policy
            // saves (`training::op_policy_layer`), and the backward's recompute of a
            // layer makes only the tensors the policy did not keep.
            let refuse = |why: String| EstimateError::invalid("checkpointing-policy", why);
            if !input.checkpointing {
                return Err(refuse(
                    "the op policy is a way of checkpointing: give --checkpointing true with it"
                        .into(),
                ));
            }
            if every > 1 {
                return Err(refuse(
                    "the op policy checkpoints every layer: leave out --checkpointing-every with it"
                        .into(),
                ));
            }
            let (saved, overlap) = crate::training::op_policy_layer(
                &a,
                seq,
                input.sequences,
                value,
                input.attention,
                adapters.is_some(),
            )
            .map_err(|why| refuse(format!("{why}: not derived, so not estimated")))?;
            let recomputed = derived.bytes.saturating_sub(derived.kept);
            derived.kept = derived
                .kept
                .checked_add(checked_product(&[saved, a.layers], "activations")?)
                .ok_or(EstimateError::Overflow {
                    what: "activations",
                })?;
            derived.bytes = derived
                .kept
                .saturating_add(recomputed.saturating_sub(overlap));
            derived.formula = format!(
                "{}; torchtitan's selective op policy: each layer also keeps the outputs of q, v, gate and down (every second matmul) and the attention's output and log-sum-exp, {saved} B, and the recompute makes {overlap} B fewer",
                derived.formula
            );
        }
        if input.checkpointing && every > 1 {
            // torchtune's selective checkpointing (`ac_mode: selective`, `ac_option`
            // k: every k-th layer wrapped, training/_activation_checkpointing.py): the
            // other layers keep what they keep without it.
            let full = derive(false)?;
            let checkpointed = layers.div_ceil(every);
            let extra_per_layer = full
                .kept
                .saturating_sub(derived.kept)
                .checked_div(layers)
                .unwrap_or(0);
            let kept = derived.kept.saturating_add(
                extra_per_layer.saturating_mul(layers.saturating_sub(checkpointed)),
            );
            derived.bytes = kept.saturating_add(derived.bytes.saturating_sub(derived.kept));
            derived.kept = kept;
            derived.formula = format!(
                "{}; every {every}-th layer checkpointed ({checkpointed} of {layers}), the others keep their activations",
                derived.formula
            );
        }
        let mut host_activations = 0u64;
        if input.offload_activations {
            // torchtune's OffloadActivations (training/_activation_offloading.py) and
            // unsloth's checkpointing move each saved tensor to pinned host memory as
            // the forward makes it and bring it back for its layer's backward, the next
            // layer's prefetched: the device keeps two layers' saved tensors (with
            // checkpointing, two layer inputs) beside the layer being recomputed.
            let per_layer = if input.checkpointing {
                layer_input
            } else {
                derived.kept.checked_div(layers).unwrap_or(0)
            };
            let on_device = per_layer.saturating_mul(2).min(derived.kept);
            host_activations = derived.kept.saturating_sub(on_device);
            derived.bytes = derived.bytes.saturating_sub(host_activations);
            derived.kept = derived.kept.saturating_sub(host_activations);
            derived.formula = format!(
                "{}; saved tensors offloaded to pinned host memory, two layers' kept on the device ({host_activations} B on the host)",
                derived.formula
            );
        }
        // What the layers keep at the forward's end (with offloading, what stays on
        // the device), for unsloth 2024.4's logits below.
        let kept_at_forward_end = derived.kept;
        let why = derived.assumed_because.or((kept_fp32 && !fp32_hidden).then_some(
            "fp32 embeddings and norms (PEFT's prepare_model_for_kbit_training) make the hidden states fp32: derived over a QLoRA base as transformers and PEFT run it, not over a 16-bit base (whose linears would take fp32 inputs only under autocast) or another framework's layers",
        ));
        let (bytes, formula, kind, label) = match why {
            None => (
                derived.bytes,
                derived.formula,
                Kind::Computed,
                Cow::Borrowed(if lit_gpt && adapters.is_some() {
                    "Activations kept for backward (lit-gpt's GPT)"
                } else {
                    "Activations kept for backward (transformers' decoder)"
                }),
            ),
            Some(why) => {
                let (bytes, formula) = activation_bytes(
                    a.layers,
                    a.hidden,
                    a.heads,
                    seq,
                    input.sequences,
                    input.checkpointing,
                    input.attention,
                )?;
                (
                    bytes,
                    format!(
                        "{formula} (Korthikanti et al. 2022, 16-bit activations; assumed: {why}{}; `estimate --trace` traces it)",
                        if input.autocast.is_some() {
                            "; what autocast changes in the adapters' copies is not in this formula"
                        } else {
                            ""
                        }
                    ),
                    Kind::Assumed,
                    Cow::Borrowed(
                        "Activations kept for backward (assumed — only a trace or a measured step settles it)",
                    ),
                )
            }
        };
        // unsloth's own buffers beside what the layers keep (training::unsloth, read
        // in unslothai/unsloth 6dad5dd): a QLoRA base's largest projection dequantised
        // at LoRA_MLP's backward (kernels/utils.py `fast_dequantize`), and in 2024.4 a
        // cos and a sin RoPE cache in every attention layer (models/llama.py
        // `LlamaRotaryEmbedding`). Both sit on the device through the step's peak.
        // Assumed activations give no split at the forward's end: all of them count.
        let kept_at_forward_end = if kind == Kind::Computed {
            kept_at_forward_end
        } else {
            bytes
        };
        let mut rope_caches = 0u64;
        let (bytes, formula) = match input.framework.defaults().unsloth_rope_per_layer {
            Some(per_layer) => {
                use crate::training::unsloth;
                let mut extra = 0u64;
                let mut said = String::new();
                if input.train == TrainMode::Qlora {
                    let w = unsloth::dequantised_weight(&a, value)?;
                    extra = extra.saturating_add(w);
                    said.push_str(&format!(
                        "; + {w} B: the largest 4-bit projection dequantised in the compute dtype with its fp32 block scales, alive at LoRA_MLP's backward (unsloth fast_dequantize)"
                    ));
                }
                if per_layer {
                    let positions = unsloth::rope_positions(seq, input.max_position);
                    let (n, each) = unsloth::rope_caches(&a, positions, value)?;
                    let rope = checked_product(&[n, each], "RoPE caches")?;
                    rope_caches = rope;
                    extra = extra.saturating_add(rope);
                    said.push_str(&format!(
                        "; + {rope} B: unsloth 2024.4's RoPE caches, cos and sin of {positions} positions × d in every layer (LlamaRotaryEmbedding, max(context, max_position_embeddings))"
                    ));
                }
                let total = bytes.checked_add(extra).ok_or(EstimateError::Overflow {
                    what: "activations",
                })?;
                (total, format!("{formula}{said}"))
            }
            None => (bytes, formula),
        };
        // transformers 4.39's rotary embeddings keep a cos and a sin cache of
        // max_position_embeddings positions in every attention layer
        // (training::transformers_rope_caches), on the device through the step.
        let (bytes, formula) = if input.framework.defaults().transformers_rope_per_layer {
            let positions = input.max_position.unwrap_or(seq);
            let rope =
                crate::training::transformers_rope_caches(a.layers, positions, a.head_dim, value)?;
            rope_caches = rope_caches.saturating_add(rope);
            (
                bytes.checked_add(rope).ok_or(EstimateError::Overflow {
                    what: "activations",
                })?,
                format!(
                    "{formula}; + {rope} B: transformers 4.39's RoPE caches, _cos_cached and _sin_cached of {positions} positions{} × d in every attention layer (LlamaRotaryEmbedding)",
                    if input.max_position.is_some() {
                        " (max_position_embeddings)"
                    } else {
                        " (the context: max_position_embeddings not given)"
                    }
                ),
            )
        } else {
            (bytes, formula)
        };
        // unsloth 2024.4's own kernels and phases (training::unsloth::step_2024, read
        // in unslothai/unsloth 6dad5dd) in place of PEFT's layers: the last layer's
        // backward as its kernels save it, the logits released before it, and the
        // forward's end the higher moment where it is.
        let unsloth_step = if kind == Kind::Computed && !lit_gpt && unsloth_step_applies(input, &a)
        {
            let tokens = checked_product(&[seq, input.sequences], "activations")?;
            let step = crate::training::unsloth::step_2024(
                &a,
                tokens,
                input.lora_rank,
                value,
                input.train == TrainMode::Qlora,
            )?;
            Some(crate::training::unsloth::phase_peaks(&step))
        } else {
            None
        };
        let (bytes, formula) = match unsloth_step {
            Some((_, backward)) => {
                host_activations = checked_product(&[layers, layer_input], "activations")?;
                let total = backward
                    .checked_add(rope_caches)
                    .ok_or(EstimateError::Overflow {
                        what: "activations",
                    })?;
                (
                    total,
                    format!(
                        "unsloth 2024.4's offloaded checkpointing: every layer's input on the host, each layer run under no_grad; at the last layer's backward ({backward} B) its input copied back and the layer recomputed with unsloth's kernels, which keep the norms' rstd, LoRA_QKV's X, flash-attn's Q, K, V, output and log-sum-exp, the residual sum, LoRA_MLP's X, e and g, beside the layer's output and its gradient, then LoRA_MLP.backward's DW and its LoRA term or a dequantised weight (fast_dequantize{}), every tensor in 512 B blocks{}",
                        if input.train == TrainMode::Qlora {
                            ": the compute dtype and fp32 block scales"
                        } else {
                            " returns a 16-bit base as it is"
                        },
                        if rope_caches > 0 {
                            format!(
                                "; + {rope_caches} B: unsloth 2024.4's RoPE caches, cos and sin of max(context, max_position_embeddings) positions × d in every layer (LlamaRotaryEmbedding)"
                            )
                        } else {
                            String::new()
                        }
                    ),
                )
            }
            None => (bytes, formula),
        };
        // A pipeline stage holds the activations of every micro-batch in flight.
        let in_flight = super::ranks::in_flight(input);
        let formula = if in_flight > 1 {
            format!(
                "{formula}; per device × {in_flight} micro-batches in flight on the first pipeline stage ({})",
                match input.pipeline {
                    Pipeline::OneFOneB =>
                        "1F1B: min(pp, micro-batches), Megatron-LM's schedules.py",
                    Pipeline::Gpipe => "GPipe: every micro-batch",
                }
            )
        } else {
            formula
        };
        // Tensor parallelism alone leaves the layer norms' and dropouts' inputs and the
        // residual stream whole on every tp rank (Korthikanti et al. 2022, sbh(10 +
        // 24/t + 5as/(ht)) per layer): counted whole, never less. Sequence parallelism
        // splits those too, and every activation is 1/t (sbh(34/t + 5as/(ht))).
        // Context parallelism: each rank holds its 1/cp of every sequence's tokens
        // (torch's context_parallel shards the sequence dimension of the inputs and
        // buffers; Megatron's CP alike).
        let act_device = Split::part(
            split
                .layered(bytes, input.sp && input.train != TrainMode::None)
                .saturating_mul(in_flight),
            1,
            input.cp,
        );
        let formula = if input.cp > 1 {
            format!(
                "{formula}; per rank ÷ cp {} (context parallelism: 1/cp of each sequence's tokens)",
                input.cp
            )
        } else {
            formula
        };
        let formula = if input.sp && input.tp > 1 {
            format!(
                "{formula}; per device ÷ tp {} (sequence parallel: Korthikanti et al. 2022, Megatron-LM)",
                input.tp
            )
        } else {
            formula
        };
        b.line(
            LineKey::Activations,
            label,
            bytes,
            act_device,
            kind,
            true,
            formula,
            &[
                ("L (layers)", a.layers.to_string()),
                ("h (hidden)", a.hidden.to_string()),
                ("a (heads)", a.heads.to_string()),
                ("k (KV heads)", a.kv_heads.to_string()),
                ("d (head dim)", a.head_dim.to_string()),
                ("i (intermediate)", a.intermediate.to_string()),
                ("s (context)", seq.to_string()),
                ("b (sequences)", input.sequences.to_string()),
                ("v (bytes per value)", value.to_string()),
                ("checkpointing", input.checkpointing.to_string()),
                ("attention", input.attention.name().into()),
            ],
        );
        if host_activations > 0 {
            b.line(
                LineKey::HostActivations,
                "Activations offloaded to pinned host memory",
                host_activations,
                0,
                Kind::Computed,
                false,
                "the saved tensors beyond the two layers' the device keeps".into(),
                &[],
            );
        }
        checked_product(&[input.sequences, seq], "logits")?;
        // A 4-bit output projection dequantises its weight at each chunk's backward.
        let head = if head_quantised(input) {
            checked_product(&[a.vocab, a.hidden, value], "logits")?
        } else {
            0
        };
        let (logits, loss_formula) = loss_peak(
            input.loss,
            seq,
            input.sequences,
            a.vocab,
            value,
            head,
            a.logit_softcap,
        )?;
        // unsloth 2024.4 returns its logits in the compute dtype and accelerate's
        // convert_outputs_to_fp32 copies them to fp32 beside the ones the loss keeps
        // (training::unsloth). At that moment — the forward's end — the device holds
        // the static lines, the RoPE caches, what the layers keep at the forward's end
        // and these logits; no recomputed layer, no dequantised weight. The step's
        // peak is the higher of that and the backward's (the lines' sum): the line
        // holds what the forward's end adds beyond the activations line, when that
        // exceeds the loss's own peak.
        let (logits, loss_formula) = if matches!(
            input.framework,
            crate::training::Framework::Unsloth2024
        ) && matches!(input.loss, crate::training::Loss::Fused)
        {
            let tokens = checked_product(&[input.sequences, seq], "logits")?;
            let end = crate::training::unsloth::forward_end_logits(tokens, a.vocab, value)?;
            let at_end = end
                .saturating_add(kept_at_forward_end)
                .saturating_add(rope_caches)
                .saturating_sub(bytes);
            if at_end > logits {
                (
                    at_end,
                    format!(
                        "the forward's end: sequences × tokens × vocab × (v + 4 B), the logits in the compute dtype unsloth 2024.4 returns and the fp32 copy accelerate's convert_outputs_to_fp32 makes of them, + an fp32 log-sum-exp and loss per token ({end} B), beside the {} B the layers keep then and the RoPE caches, less the activations line (the backward's); at the backward's start: {loss_formula}",
                        kept_at_forward_end
                    ),
                )
            } else {
                (
                    logits,
                    format!(
                        "{loss_formula}; the forward's end (the logits and accelerate's fp32 copy of them, {end} B, beside what the layers keep then) stays below the backward's peak"
                    ),
                )
            }
        } else {
            (logits, loss_formula)
        };
        // unsloth 2024.4 (training::unsloth::step_2024): its logits, their fp32 copy
        // and the loss's rows are released at lm_head's backward, before any layer is
        // recomputed, so the line is what the forward's end holds beyond the last
        // layer's backward.
        let (logits, loss_formula) = match unsloth_step {
            Some((forward, backward)) => (
                forward.saturating_sub(backward),
                format!(
                    "the forward's end ({forward} B: the final norm's input and rstd, the logits in the compute dtype unsloth 2024.4 returns, Fast_CrossEntropyLoss's fp32 log-sum-exp and loss per row, and the fp32 copy accelerate's convert_outputs_to_fp32 makes of the logits) beyond the last layer's backward ({backward} B, the activations line): the logits are released at lm_head's backward, before any layer is recomputed"
                ),
            ),
            None => (logits, loss_formula),
        };
        b.line(
            LineKey::Logits,
            if kind == Kind::Computed {
                "Logits, log-softmax and their gradients at the step's peak"
            } else {
                "Logits, log-softmax and their gradients at the step's peak (assumed)"
            },
            logits,
            Split::part(logits, 1, split.tp.saturating_mul(input.cp)),
            kind,
            true,
            loss_formula,
            &[
                ("sequences", input.sequences.to_string()),
                ("tokens", seq.to_string()),
                ("vocab", a.vocab.to_string()),
                ("loss", {
                    let n = input.loss.name();
                    if n.is_empty() { "full".into() } else { n }
                }),
            ],
        );
        // The step's other peak: after the backward has freed the activations and the
        // logits, the optimizer step holds its own temporaries — AdamW's foreach copy of
        // one state and, with master weights, the gradients cast to fp32 for the master
        // copy. Only what exceeds the freed bytes raises the step's peak. An optimizer
        // in the backward has no step of its own (its temporaries are in the gradients
        // line).
        let temporaries = if input.optimizer_in_backward {
            0
        } else {
            input
                .optimizer
                .step_temporary_bytes(trainable, state_dtype)?
                .checked_add(if master {
                    checked_product(&[trainable, 4], "fp32 gradients")?
                } else {
                    0
                })
                .ok_or(EstimateError::Overflow {
                    what: "optimizer step",
                })?
        };
        b.optimizer_temporaries = temporaries;
        // What the training loop still holds of the loss's tensors at the step is not
        // freed for it (torchtune 0.1's `logits`, [`crate::training::Loss::kept_through_step`]).
        let kept = input
            .loss
            .kept_through_step(seq, input.sequences, a.vocab)?
            .min(logits);
        let freed = bytes.saturating_add(logits).saturating_sub(kept);
        let freed_device = act_device
            .saturating_add(Split::part(logits, 1, split.tp.saturating_mul(input.cp)))
            .saturating_sub(Split::part(kept, 1, split.tp.saturating_mul(input.cp)));
        // A tied embedding's gradient arrives twice, lm_head's at the backward's start
        // and the embedding's at its end, and autograd sums the two out of place
        // (torch/csrc/autograd/input_buffer.cpp, InputBuffer::add: `old + new`): both
        // and their sum are live at once, after the activations and logits are freed —
        // two embedding-sized gradients beyond the gradients line. (Under FSDP they are
        // the root's unsharded gradients, within its gathered and reduce-scatter
        // lines.)
        let tied = match input.arch {
            Some(a)
                if a.tied_embeddings
                    && input.train == TrainMode::Full
                    && input.fsdp == super::input::Fsdp::None =>
            {
                // With DDP's gradient_as_bucket_view the sum is copied into the
                // bucket (the gradients line), so it is one more.
                let copies = if input.ddp_bucket_view && plan.is_ddp() {
                    3
                } else {
                    2
                };
                checked_product(&[copies, a.vocab, a.hidden, grad.bytes()], "tied gradients")?
            }
            _ => 0,
        };
        let step = temporaries.max(tied);
        let step_device = plan
            .state(input, LineKey::OptimizerStep, device_share(temporaries))
            .max(Split::part(tied, 1, split.tp));
        let extra = step.saturating_sub(freed);
        if extra > 0 || step_device > freed_device {
            b.line(
                LineKey::OptimizerStep,
                if tied > temporaries {
                    "Tied embedding's gradients summed beyond the freed activations"
                } else {
                    "Optimizer step beyond the freed activations"
                },
                extra,
                // Sharded or offloaded with the optimizer's states (ZeRO, FSDP).
                step_device.saturating_sub(freed_device),
                kind,
                true,
                format!(
                    "the larger of the step's temporaries {temporaries} B ({}{}) and a tied embedding's two gradients and their sum beyond the gradients line {tied} B − the activations and logits the backward freed {freed} B",
                    if input.optimizer == Optimizer::Adamw {
                        "AdamW's foreach sqrt of one state, torch/optim/adam.py _multi_tensor_adam"
                    } else {
                        "no optimizer temporaries"
                    },
                    if master { " + fp32 gradients for the master copy" } else { "" }
                ),
                &[
                    tr_step,
                    ("optimizer", input.optimizer.name().into()),
                    ("master weights", master.to_string()),
                ],
            );
        }
        cublas_workspaces(input, b)?;
    } else {
        b.assumptions.push("training activations are not estimated: give the architecture and the context (sequence length)".into());
    }
    Ok(trainable.saturating_add(copies))
}

/// The cuBLAS workspaces a training step holds on each device: one per thread that
/// runs GEMMs, from its first GEMM to the process's end.
pub(super) const CUBLAS_THREADS: u64 = 2;

/// Adds `cublas.workspace`: torch allocates a cuBLAS workspace through its caching
/// allocator for each (cuBLAS handle, stream) pair at the pair's first GEMM and never
/// frees it (pytorch/pytorch aten/src/ATen/cuda/CublasHandlePool.cpp at v2.2.0 and
/// v2.3.0, `getCurrentCUDABlasHandle`: `cublas_handle_stream_to_workspace`, built with
/// CUDA below 12.2 as their cu118 and cu121 wheels are; later releases whatever the
/// CUDA version, https://github.com/pytorch/pytorch/pull/124250).
/// The handles come from a pool, one per thread (`DeviceThreadHandlePool::PoolWindow`,
/// kept while the thread lives): the forward runs on the Python thread, the backward on
/// the autograd engine's thread for the device (torch/csrc/autograd/engine.cpp,
/// `Engine::thread_init`, one worker per device for the process's life), both on the
/// current stream, so a step holds two. Their size is the card's generation's
/// ([`crate::catalogue::cublas_workspace_bytes`], `input.card_sm90`): 32 MiB each on an
/// sm_90 card, 8 519 680 B on another; with no card named the larger, sm_90's, so that
/// the need is not short on the card it may run on. cuBLASLt's workspace at those
/// versions is allocated per call and freed (`gemm_and_bias`, a bias GEMM the Llama
/// family does not run); it became a kept one, then the cuBLAS one shared, later
/// (https://github.com/pytorch/pytorch/pull/145130).
fn cublas_workspaces(input: &EstimateInput, b: &mut Builder) -> Result<(), EstimateError> {
    let sm90 = input.card_sm90.unwrap_or(true);
    let each = crate::catalogue::cublas_workspace_bytes(sm90);
    let which = match input.card_sm90 {
        Some(true) => "torch's cuBLAS workspace on the card's sm_90: 32 MiB",
        Some(false) => {
            "torch's cuBLAS workspace on the card's generation, not sm_90: 4096 KiB × 2 + 16 KiB × 8"
        }
        None => {
            "torch's cuBLAS workspace on sm_90, 32 MiB, the larger, no card named (8 519 680 B outside sm_90: 4096 KiB × 2 + 16 KiB × 8)"
        }
    };
    let bytes = checked_product(&[CUBLAS_THREADS, each], "cuBLAS workspaces")?;
    b.line(
        LineKey::CublasWorkspace,
        "cuBLAS workspaces (torch's, the forward's thread and the backward's)",
        bytes,
        bytes,
        Kind::Computed,
        true,
        format!(
            "{CUBLAS_THREADS} threads run GEMMs (the forward on Python's, the backward on autograd's device thread) × {each} B ({which}), per device, allocated by the caching allocator at each thread's first GEMM and kept; torch 2.2/2.3 aten/src/ATen/cuda/CublasHandlePool.cpp getCurrentCUDABlasHandle, torch/csrc/autograd/engine.cpp"
        ),
        &[
            ("threads", CUBLAS_THREADS.to_string()),
            ("workspace", each.to_string()),
            ("sm90", sm90.to_string()),
        ],
    );
    Ok(())
}

/// Whether unsloth 2024.4's step (`training::unsloth::step_2024`) is the run's: `--framework
/// unsloth@2024.4` with its offloaded checkpointing and fused loss, LoRA or QLoRA on
/// every linear of a Llama-style decoder (gated MLP, no experts, separate q, k, v
/// without biases or norms) in 16-bit compute, without dropout (unsloth 6dad5dd
/// patches a layer with its kernels only when q, k, v, o or gate, up, down all carry
/// a LoRA without dropout, `FastLlamaModel.patch_peft_model`), on one device.
pub(super) fn unsloth_step_applies(input: &EstimateInput, a: &Architecture) -> bool {
    use crate::training::{Framework, LoraTargets, Loss};
    let all = LoraTargets::parse("lora-targets", &input.lora_targets)
        .map(|t| t.q && t.k && t.v && t.o && t.gate && t.up && t.down && !t.lm_head)
        .unwrap_or(false);
    matches!(input.framework, Framework::Unsloth2024)
        && input.offload_activations
        && input.checkpointing
        && input.checkpointing_every <= 1
        && input.train.adapters()
        && !input.lora_dropout
        && all
        && matches!(input.loss, Loss::Fused)
        && input.compute_dtype.bytes() == 2
        && a.gated_mlp
        && a.intermediate > 0
        && a.moe.is_none()
        && a.mla.is_none()
        && a.mixer.is_none()
        && !a.fused_qkv
        && !a.qkv_bias
        && !a.qk_norm
        && input.tp <= 1
        && input.pp <= 1
        && input.cp <= 1
}
