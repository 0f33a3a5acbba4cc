//! Training state (method §3): gradients, optimizer states, fp32 master
//! weights, LoRA adapters — computed from the layout each optimizer really keeps —
//! and activations, which have no universal constant and are therefore an
//! *assumption* with its formula shown.

// Checked arithmetic only: every operand here is user input.
#![deny(clippy::arithmetic_side_effects)]

use serde::{Deserialize, Serialize};

use crate::arch::{Architecture, Mla, Moe};
use crate::error::EstimateError;
use crate::format::Dtype;
use crate::units::checked_product;

pub(crate) mod fsdp1;
pub(crate) mod litgpt;
pub(crate) mod load;
pub(crate) mod unsloth;

/// A paged bitsandbytes optimizer allocates a tensor's states in CUDA unified memory
/// only when the tensor has at least 1e5 values; a smaller tensor's states are
/// `torch.zeros_like(p)` on the device, in PyTorch's caching allocator (bitsandbytes
/// 0.41.1 optim/optimizer.py, `Optimizer8bit.get_state_buffer`:
/// `if not self.is_paged or p.numel() < 1e5`). LoRA's adapters are mostly such tensors.
pub const PAGED_MIN_VALUES: u64 = 100_000;

/// bitsandbytes' 8-bit optimizers keep 32-bit states for tensors under this many values
/// (`min_8bit_size`).
pub const MIN_8BIT_SIZE: u64 = 4096;

/// The optimizer and the states it creates at its first step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// torch.optim.AdamW: `exp_avg` and `exp_avg_sq`, each like the parameter, updated
    /// by the `foreach` path PyTorch picks by default on CUDA.
    Adamw,
    /// torch.optim.AdamW with `fused=True` (Hugging Face's `adamw_torch_fused`): the same
    /// states, updated by one kernel that allocates nothing at the step.
    AdamwFused,
    /// bitsandbytes AdamW8bit: two uint8 states + one fp32 absmax per 256 values each
    /// (blockwise quantisation, `bnb.optim.Optimizer8bit`).
    Adamw8bit,
    /// bitsandbytes PagedAdamW (32-bit): two fp32 states allocated in CUDA unified
    /// memory (`cudaMallocManaged` through `get_paged`, bitsandbytes/optim/optimizer.py
    /// `Optimizer8bit.get_state_buffer` with `is_paged`): outside PyTorch's caching
    /// allocator, on the device while there is room and paged to the host under
    /// pressure, so never the cause of an out-of-memory error.
    PagedAdamw,
    /// bitsandbytes PagedAdamW8bit: AdamW8bit's states and block scales, paged as
    /// `PagedAdamw`'s.
    PagedAdamw8bit,
    /// torch.optim.SGD with momentum: one `momentum_buffer` like the parameter.
    SgdMomentum,
    /// Plain SGD: no state.
    Sgd,
    /// No optimizer (e.g. gradients only).
    None,
}

impl Optimizer {
    /// Parses `adamw`, `adamw-fused`, `adamw8bit`, `sgd-momentum`, `sgd`, `none`.
    pub fn parse(field: &'static str, t: &str) -> Result<Optimizer, EstimateError> {
        match t.trim().to_ascii_lowercase().as_str() {
            // Hugging Face `TrainingArguments.optim` names too (training_args.py,
            // `OptimizerNames`): the torch AdamW variants keep the same two states.
            "adamw" | "adam" | "adamw_torch" | "adamw_hf" => Ok(Optimizer::Adamw),
            "adamw-fused" | "adamw_fused" | "adamw_torch_fused" => Ok(Optimizer::AdamwFused),
            "adamw8bit" | "adam8bit" | "adamw-8bit" | "adamw_8bit" | "adamw_bnb_8bit" => {
                Ok(Optimizer::Adamw8bit)
            }
            "paged-adamw" | "paged_adamw" | "paged_adamw_32bit" | "pagedadamw" => {
                Ok(Optimizer::PagedAdamw)
            }
            "paged-adamw8bit" | "paged_adamw_8bit" | "pagedadamw8bit" => {
                Ok(Optimizer::PagedAdamw8bit)
            }
            "sgd-momentum" | "sgdm" => Ok(Optimizer::SgdMomentum),
            "sgd" => Ok(Optimizer::Sgd),
            "none" => Ok(Optimizer::None),
            other => Err(EstimateError::invalid(
                field,
                format!(
                    "unknown optimizer {other:?}; use adamw, adamw-fused, adamw8bit, paged-adamw, paged-adamw8bit, sgd-momentum, sgd or none"
                ),
            )),
        }
    }

    /// Canonical name.
    pub const fn name(self) -> &'static str {
        match self {
            Optimizer::Adamw => "adamw",
            Optimizer::AdamwFused => "adamw-fused",
            Optimizer::Adamw8bit => "adamw8bit",
            Optimizer::PagedAdamw => "paged-adamw",
            Optimizer::PagedAdamw8bit => "paged-adamw8bit",
            Optimizer::SgdMomentum => "sgd-momentum",
            Optimizer::Sgd => "sgd",
            Optimizer::None => "none",
        }
    }

    /// Bytes of the optimizer state for `n` trainable values whose full-precision
    /// state type is `state`.
    pub fn state_bytes(self, n: u64, state: Dtype) -> Result<u64, EstimateError> {
        match self {
            Optimizer::Adamw | Optimizer::AdamwFused => {
                checked_product(&[2, n, state.bytes()], "optimizer states")
            }
            // bitsandbytes' 32-bit optimizers keep fp32 states whatever the parameter's
            // dtype (`Optimizer2State.init_state`, `dtype=torch.float32`).
            Optimizer::PagedAdamw => checked_product(&[2, n, 4], "optimizer states"),
            Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit => {
                let one = n
                    .checked_add(checked_product(&[n.div_ceil(256), 4], "optimizer absmax")?)
                    .ok_or(EstimateError::Overflow {
                        what: "optimizer states",
                    })?;
                checked_product(&[2, one], "optimizer states")
            }
            Optimizer::SgdMomentum => checked_product(&[n, state.bytes()], "optimizer states"),
            Optimizer::Sgd | Optimizer::None => Ok(0),
        }
    }

    /// The states' bytes of one tensor of `n` values. bitsandbytes' 8-bit optimizers
    /// keep 32-bit states for a tensor under `min_8bit_size` (4096) values
    /// (bitsandbytes 0.41.1 optim/optimizer.py, `Optimizer2State.init_state`).
    pub fn tensor_state_bytes(self, n: u64, state: Dtype) -> Result<u64, EstimateError> {
        match self {
            Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit if n < MIN_8BIT_SIZE => {
                checked_product(&[2, n, 4], "optimizer states")
            }
            _ => self.state_bytes(n, state),
        }
    }

    /// Whether the states live in CUDA unified memory (bitsandbytes' paged optimizers),
    /// outside the caching allocator and the device's need (but see
    /// [`PAGED_MIN_VALUES`]).
    pub const fn paged(self) -> bool {
        matches!(self, Optimizer::PagedAdamw | Optimizer::PagedAdamw8bit)
    }

    /// Bytes the step allocates for the duration of its update, for `n` trainable values
    /// whose state type is `state`. AdamW's `foreach` path (torch/optim/adam.py
    /// `_multi_tensor_adam`, torch 2.11; AdamW is Adam with decoupled weight decay)
    /// takes `exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)` over every
    /// parameter of a device and dtype group at once: one more state. The fused kernel,
    /// bitsandbytes' 8-bit kernels and SGD's in-place foreach updates allocate nothing
    /// that size. Traced: Llama-3.2-1B pure bf16, the step holds 2 471 636 992 B beyond
    /// weights, gradients and states (one bf16 state).
    pub fn step_temporary_bytes(self, n: u64, state: Dtype) -> Result<u64, EstimateError> {
        match self {
            Optimizer::Adamw => checked_product(&[n, state.bytes()], "optimizer step"),
            _ => Ok(0),
        }
    }
}

/// How the loss is computed from the last hidden states: what the logits hold at the
/// step's peak (`--loss`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Loss {
    /// transformers' `ForCausalLMLoss` (loss/loss_utils.py, 5.23): the logits upcast to
    /// fp32 and one log-softmax over every position; 12 B per token and vocabulary entry
    /// at the backward's start.
    #[default]
    Full,
    /// torchtune 0.1–0.2's recipes: the decoder returns `output(h).float()`, the recipe
    /// keeps `logits[..., :-1, :].contiguous()` referenced through the backward and runs
    /// `nn.CrossEntropyLoss` on its (batch, vocabulary, tokens) transpose
    /// (recipes/lora_finetune_single_device.py, `train`): at `log_softmax`'s backward the
    /// fp32 copy, the saved log-softmax, NLL's gradient and log-softmax's gradient, 16 B.
    FloatSliced,
    /// transformers 4.39's `LlamaForCausalLM.forward` (models/llama/modeling_llama.py
    /// at v4.39.3, lines 1215–1229): `logits = logits.float()` rebinds the name, so the
    /// compute-dtype logits go as their fp32 copy is made; `logits[..., :-1,
    /// :].contiguous()` copies the shifted positions and `CrossEntropyLoss` keeps their
    /// fp32 log-softmax. At the loss: the fp32 logits, the shifted copy and the
    /// log-softmax (4·(t + 2(t − 1)) B per sequence and vocabulary entry). The Trainer
    /// drops the outputs before the backward (`Trainer.compute_loss` returns the loss
    /// alone), whose first steps hold less: the log-softmax, NLL's and log-softmax's
    /// gradients over t − 1 positions. The compute-dtype logits' block, freed before
    /// the three larger fp32 ones are allocated, stays in the caching allocator's
    /// cache at that moment (`estimate::peaks`).
    FloatShifted,
    /// torchtune's `CEWithChunkedOutputLoss` and `LinearCrossEntropyLoss`
    /// (torchtune/modules/loss, 0.6: `num_output_chunks` 8): each chunk upcast to fp32 and
    /// its log-softmax kept, 4 B per token and vocabulary entry, plus one chunk's
    /// gradients at the backward (fp32 NLL and log-softmax gradients and the compute
    /// dtype's: 10 B per chunk's token).
    Chunked(u64),
    /// LitGPT's `chunked_cross_entropy` over `lm_head_chunk_size` token chunks in the
    /// compute dtype (litgpt/utils.py; finetune/lora.py passes 128): the chunks and their
    /// log-softmax kept (2·v B), plus one chunk's two gradients.
    ChunkedCompute(u64),
    /// TRL's `chunked_nll` (trl/trainer/sft_trainer.py, `_chunked_cross_entropy_loss`,
    /// `_CHUNKED_LM_HEAD_CHUNK_SIZE` 256): each chunk of tokens projected and its loss
    /// computed under activation checkpointing, so only one chunk's logits exist at a
    /// time, recomputed in the backward: (v + 12) B per chunk's token.
    Checkpointed(u64),
    /// LitGPT's `chunked_cross_entropy` over `lm_head_chunk_size` token chunks as it
    /// runs under Lightning Fabric: `_FabricModule.forward` passes the model's output
    /// through the precision plugin's `convert_output`, which casts every floating
    /// tensor to the default dtype, fp32 (`HalfPrecision` and `BitsandbytesPrecision`,
    /// lightning/fabric/plugins/precision, Lightning 2.1 to 2.6): each chunk's logits
    /// are kept in fp32 by the loop's list and their log-softmax in fp32 (8 B per token
    /// and vocabulary entry), plus one chunk's two fp32 gradients; or, at the output
    /// projection's backward, the fp32 chunks, every chunk's gradient in the compute
    /// dtype and a 4-bit projection's dequantised weight, whichever is higher.
    ChunkedFabric(u64),
    /// unsloth's `Fast_CrossEntropyLoss` (unsloth/kernels/cross_entropy_loss.py): the
    /// logits in the compute dtype kept and the gradient written into them, an fp32
    /// log-sum-exp and loss per row. unsloth's own default, `unsloth_fused_ce_loss`,
    /// picks its chunk from the free memory at run time and holds less: this is its
    /// upper bound.
    Fused,
}

impl Loss {
    /// Parses `full`, `float-sliced`, `float-shifted`, `chunked[:N]` (N output chunks, 8 by default),
    /// `chunked-compute[:C]` (C-token chunks, 128 by default), `checkpointed[:C]` (256)
    /// and `fused`.
    pub fn parse(field: &'static str, t: &str) -> Result<Loss, EstimateError> {
        let t = t.trim().to_ascii_lowercase();
        let (name, n) = match t.split_once(':') {
            Some((name, n)) => match n.trim().parse::<u64>() {
                Ok(n) if n > 0 && n <= 1 << 20 => (name.trim().to_string(), Some(n)),
                _ => {
                    return Err(EstimateError::invalid(
                        field,
                        format!("{n:?}: a chunk count or size from 1 to 1048576"),
                    ));
                }
            },
            None => (t.clone(), None),
        };
        match name.as_str() {
            "" | "full" | "cross-entropy" if n.is_none() => Ok(Loss::Full),
            "float-sliced" | "sliced" if n.is_none() => Ok(Loss::FloatSliced),
            "float-shifted" | "shifted" if n.is_none() => Ok(Loss::FloatShifted),
            "chunked" | "cewithchunkedoutputloss" | "linearcrossentropyloss" => {
                Ok(Loss::Chunked(n.unwrap_or(8)))
            }
            "chunked-compute" | "chunked-bf16" => Ok(Loss::ChunkedCompute(n.unwrap_or(128))),
            "chunked-fabric" | "chunked-fp32" => Ok(Loss::ChunkedFabric(n.unwrap_or(128))),
            "checkpointed" | "chunked_nll" | "chunked-nll" => {
                Ok(Loss::Checkpointed(n.unwrap_or(256)))
            }
            "fused" if n.is_none() => Ok(Loss::Fused),
            _ => Err(EstimateError::invalid(
                field,
                format!(
                    "unknown loss {t:?}; use full, float-sliced, float-shifted, chunked[:N], chunked-compute[:C], chunked-fabric[:C], checkpointed[:C] or fused"
                ),
            )),
        }
    }

    /// The bytes of the loss's tensors the training loop still holds at the optimizer
    /// step, for `batch` sequences of `seq` tokens of a `vocab`-wide output. torchtune
    /// 0.1–0.2's recipes rebind `logits` to the fp32 shifted copy
    /// (`logits[..., :-1, :].contiguous()`, then its transpose) and never delete it, so
    /// the copy lives through `loss.backward()` and `self._optimizer.step()` until the
    /// next iteration's forward rebinds the name (recipes/full_finetune_distributed.py,
    /// lora_finetune_distributed.py and lora_finetune_single_device.py, `train`, pytorch/
    /// torchtune fef3ed10, April 2024, and 0217d44, May 2024): 4 B per shifted token and
    /// vocabulary entry. The other losses' tensors are the backward's, freed with it (0).
    pub fn kept_through_step(self, seq: u64, batch: u64, vocab: u64) -> Result<u64, EstimateError> {
        match self {
            Loss::FloatSliced => {
                let bytes = block(&[seq.saturating_sub(1).max(1), batch, vocab, 4]);
                if bytes == u64::MAX {
                    return Err(EstimateError::Overflow {
                        what: "logits kept through the step",
                    });
                }
                Ok(bytes)
            }
            _ => Ok(0),
        }
    }

    /// The key's value ("" for the default).
    pub fn name(self) -> String {
        match self {
            Loss::Full => String::new(),
            Loss::FloatSliced => "float-sliced".into(),
            Loss::FloatShifted => "float-shifted".into(),
            Loss::Chunked(n) => format!("chunked:{n}"),
            Loss::ChunkedCompute(c) => format!("chunked-compute:{c}"),
            Loss::ChunkedFabric(c) => format!("chunked-fabric:{c}"),
            Loss::Checkpointed(c) => format!("checkpointed:{c}"),
            Loss::Fused => "fused".into(),
        }
    }
}

impl From<Loss> for String {
    fn from(l: Loss) -> String {
        l.name()
    }
}

impl TryFrom<String> for Loss {
    type Error = EstimateError;
    fn try_from(s: String) -> Result<Loss, EstimateError> {
        Loss::parse("loss", &s)
    }
}

impl From<Framework> for String {
    fn from(f: Framework) -> String {
        f.name().into()
    }
}

impl TryFrom<String> for Framework {
    type Error = EstimateError;
    fn try_from(s: String) -> Result<Framework, EstimateError> {
        Framework::parse("framework", &s)
    }
}

/// How a framework builds and loads the model (the `model_load` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadPath {
    /// transformers' `from_pretrained` (its caching-allocator warm-up, then tensor by
    /// tensor; a 4-bit weight in 16 bits then quantised), PEFT's adapters after it.
    Transformers,
    /// torchtune 0.1's model setup: one layer built and deep-copied, torchao 0.1's NF4,
    /// the checkpoint quantised on the device.
    Torchtune01,
    /// torchtune 0.6's: each layer built on the device, torchao's chunked NF4, the
    /// checkpoint quantised on the host and copied in.
    Torchtune06,
    /// LitGPT: `fabric.init_module` builds the model on the device, then the checkpoint
    /// is copied in.
    Litgpt,
}

/// The fine-tuning framework whose recipe runs the step (`--framework`): its defaults,
/// each applied only where the key is not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Framework {
    /// None named: transformers' decoder, loss and `from_pretrained`, PEFT's adapters
    /// and QLoRA preparation, with gpumem's own defaults (AdamW's foreach update, fp32
    /// master weights for a full fine-tune).
    #[default]
    Unnamed,
    /// transformers' `Trainer` with PEFT (transformers 5.23, PEFT 0.21).
    Transformers,
    /// transformers 4.39 (April 2024) as its `Trainer` and Llama-style decoders ran a
    /// step: its loss (`Loss::FloatShifted`), a RoPE cache per attention layer, AdamW's
    /// foreach update.
    Transformers439,
    /// TRL's `SFTTrainer` (TRL 1.9).
    Trl,
    /// torchtune's single-device recipes (0.6).
    Torchtune,
    /// torchtune 0.1's recipes (April 2024).
    Torchtune01,
    /// LitGPT's `finetune_lora` (2026).
    Litgpt,
    /// lit-gpt's `finetune/lora.py` at commit 8641822 (October 2023; Lightning Fabric
    /// 71aed751, bitsandbytes 0.41.1): its own GPT's activations.
    Litgpt2023,
    /// unsloth's `FastLanguageModel` with TRL.
    Unsloth,
    /// unsloth 2024.4 (6dad5dd, April 2024) as LLaMA-Factory's `use_unsloth` ran it:
    /// `Unsloth`'s defaults plus a RoPE cache per layer (`training::unsloth`).
    Unsloth2024,
    /// axolotl (its YAML schema's defaults, run through transformers' `Trainer`).
    Axolotl,
}

/// A framework's defaults (`None`: the framework leaves gpumem's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameworkDefaults {
    /// Activation checkpointing.
    pub checkpointing: Option<bool>,
    /// Saved activations offloaded to the host.
    pub offload_activations: Option<bool>,
    /// The optimizer; QLoRA's where the framework picks another for a 4-bit base.
    pub optimizer: Option<(Optimizer, Optimizer)>,
    /// fp32 master weights (a full fine-tune).
    pub master_weights: Option<bool>,
    /// Adapters in the compute dtype (`false`: PEFT's fp32).
    pub adapters_in_compute: Option<bool>,
    /// Dropout before each adapter.
    pub lora_dropout: Option<bool>,
    /// QLoRA keeps the unquantised modules in the compute dtype (not PEFT's fp32).
    pub qlora_keeps_compute: Option<bool>,
    /// The loss.
    pub loss: Option<Loss>,
    /// How the model is built and loaded.
    pub load: LoadPath,
    /// The 4-bit kernel a QLoRA base runs.
    pub qlora_kernel: Option<QloraKernel>,
    /// QLoRA quantises the output projection with the decoder's linears (Lightning's
    /// `BitsandbytesPrecision` replaces every `nn.Linear`).
    pub head_4bit: bool,
    /// The model's code is lit-gpt 2023's GPT, whose activations have their own
    /// derivation (`training::litgpt`), not transformers' decoder.
    pub lit_gpt_2023: bool,
    /// unsloth's own buffers (`training::unsloth`): the dequantised 4-bit weight at
    /// `LoRA_MLP`'s backward, and with `Some(true)` 2024.4's RoPE cache per layer.
    pub unsloth_rope_per_layer: Option<bool>,
    /// transformers 4.39's rotary embeddings: a `_cos_cached` and a `_sin_cached` of
    /// `max_position_embeddings` positions in every attention layer
    /// ([`transformers_rope_caches`]).
    pub transformers_rope_per_layer: bool,
}

impl Framework {
    /// Every framework a user can name, with its key.
    pub const ALL: [(Framework, &'static str); 10] = [
        (Framework::Transformers, "transformers"),
        (Framework::Transformers439, "transformers@4.39"),
        (Framework::Trl, "trl"),
        (Framework::Torchtune, "torchtune"),
        (Framework::Torchtune01, "torchtune@0.1"),
        (Framework::Litgpt, "litgpt"),
        (Framework::Litgpt2023, "litgpt@2023"),
        (Framework::Unsloth, "unsloth"),
        (Framework::Unsloth2024, "unsloth@2024.4"),
        (Framework::Axolotl, "axolotl"),
    ];

    /// Parses a framework as users name it (`transformers`, `peft`, `hf`,
    /// `transformers@4.39`, `trl`,
    /// `torchtune`, `torchtune@0.1`, `litgpt`, `unsloth`, `unsloth@2024.4`, `axolotl`).
    pub fn parse(field: &'static str, t: &str) -> Result<Framework, EstimateError> {
        let t = t.trim().to_ascii_lowercase();
        match t.as_str() {
            "" | "none" => Ok(Framework::Unnamed),
            "transformers" | "peft" | "hf" | "transformers+peft" => Ok(Framework::Transformers),
            "torchtune@0.1" | "torchtune@0.2" => Ok(Framework::Torchtune01),
            "lit-gpt" | "lit-gpt@8641822" => Ok(Framework::Litgpt2023),
            "unsloth@2024" | "unsloth@6dad5dd" => Ok(Framework::Unsloth2024),
            // transformers 4.36 (4.36.2, December 2023) runs the same step in what
            // this variant models: LlamaForCausalLM.forward's loss (`logits.float()`,
            // the shifted contiguous copy, CrossEntropyLoss), a `cos_cached` and a
            // `sin_cached` of max_position_embeddings positions in the default dtype in
            // every attention layer (`LlamaRotaryEmbedding._set_cos_sin_cache`, called
            // by `LlamaAttention._init_rope`) and `optim` adamw_torch
            // (models/llama/modeling_llama.py and training_args.py at v4.36.2). 4.38
            // differs (LlamaModel's max_position_embeddings² causal-mask buffer).
            "transformers@4.39.3" | "transformers@4.36" | "transformers@4.36.2" => {
                Ok(Framework::Transformers439)
            }
            _ => Framework::ALL
                .iter()
                .find(|(_, k)| *k == t)
                .map(|(f, _)| *f)
                .ok_or_else(|| {
                    EstimateError::invalid(
                        field,
                        format!(
                            "unknown framework {t:?}; use transformers, transformers@4.39, trl, torchtune, torchtune@0.1, litgpt, litgpt@2023, unsloth, unsloth@2024.4 or axolotl"
                        ),
                    )
                }),
        }
    }

    /// The key's value ("" when none is named).
    pub fn name(self) -> &'static str {
        Framework::ALL
            .iter()
            .find(|(f, _)| *f == self)
            .map_or("", |(_, k)| k)
    }

    /// What the framework's recipe sets, read in its code and default configs.
    pub const fn defaults(self) -> FrameworkDefaults {
        let none = FrameworkDefaults {
            checkpointing: None,
            offload_activations: None,
            optimizer: None,
            master_weights: None,
            adapters_in_compute: None,
            lora_dropout: None,
            qlora_keeps_compute: None,
            loss: None,
            load: LoadPath::Transformers,
            qlora_kernel: None,
            head_4bit: false,
            lit_gpt_2023: false,
            unsloth_rope_per_layer: None,
            transformers_rope_per_layer: false,
        };
        // transformers 5.23 `TrainingArguments`: `optim` adamw_torch_fused with torch ≥ 2.8,
        // `activation_checkpointing` off; a model loaded in bf16 trains in bf16 (no
        // fp32 copy); PEFT 0.21 `LoraConfig`: `lora_dropout` 0.0, adapters in fp32
        // (`autocast_adapter_dtype`).
        let trainer = FrameworkDefaults {
            optimizer: Some((Optimizer::AdamwFused, Optimizer::AdamwFused)),
            master_weights: Some(false),
            adapters_in_compute: Some(false),
            lora_dropout: Some(false),
            loss: Some(Loss::Full),
            ..none
        };
        match self {
            Framework::Unnamed => none,
            Framework::Transformers => trainer,
            // transformers 4.39.3: TrainingArguments' optim adamw_torch (torch.optim.AdamW,
            // foreach); LlamaForCausalLM.forward's loss; LlamaRotaryEmbedding's caches in
            // every LlamaAttention (models/llama/modeling_llama.py). The rest, PEFT's
            // of its time included, as gpumem's defaults.
            Framework::Transformers439 => FrameworkDefaults {
                optimizer: Some((Optimizer::Adamw, Optimizer::Adamw)),
                loss: Some(Loss::FloatShifted),
                transformers_rope_per_layer: true,
                ..none
            },
            // axolotl's schema (src/axolotl/utils/schemas): gradient_checkpointing false,
            // optimizer adamw_torch_fused, lora_dropout 0.0, sample_packing off.
            Framework::Axolotl => trainer,
            // TRL 1.9 `SFTConfig`: gradient_checkpointing true, bf16 true, loss_type
            // chunked_nll (256-token chunks under checkpointing), no packing.
            Framework::Trl => FrameworkDefaults {
                checkpointing: Some(true),
                loss: Some(Loss::Checkpointed(256)),
                ..trainer
            },
            // unsloth: FastLanguageModel.get_peft_model(use_gradient_checkpointing =
            // "unsloth": each layer's input offloaded to the host; lora_dropout 0);
            // its loss and Trainer as TRL's SFTTrainer runs them.
            Framework::Unsloth => FrameworkDefaults {
                checkpointing: Some(true),
                offload_activations: Some(true),
                adapters_in_compute: Some(false),
                lora_dropout: Some(false),
                qlora_keeps_compute: Some(false),
                loss: Some(Loss::Fused),
                unsloth_rope_per_layer: Some(false),
                ..trainer
            },
            // unsloth 2024.4 (6dad5dd): the same, plus the RoPE cache its
            // LlamaRotaryEmbedding keeps in every attention layer, and with every
            // linear adapted its step as its kernels run it (training::unsloth).
            // transformers 4.39's TrainingArguments: optim adamw_torch (foreach).
            Framework::Unsloth2024 => FrameworkDefaults {
                optimizer: Some((Optimizer::Adamw, Optimizer::Adamw)),
                unsloth_rope_per_layer: Some(true),
                ..Framework::Unsloth.defaults()
            },
            // torchtune 0.6 recipes/configs/llama3_1/8B_lora_single_device.yaml:
            // enable_activation_checkpointing True, offloading False, AdamW fused,
            // LinearCrossEntropyLoss (8 chunks), lora_dropout 0.0, dtype bf16.
            Framework::Torchtune => FrameworkDefaults {
                checkpointing: Some(true),
                offload_activations: Some(false),
                optimizer: Some((Optimizer::AdamwFused, Optimizer::AdamwFused)),
                master_weights: Some(false),
                adapters_in_compute: Some(true),
                lora_dropout: Some(false),
                qlora_keeps_compute: Some(true),
                loss: Some(Loss::Chunked(8)),
                load: LoadPath::Torchtune06,
                qlora_kernel: None,
                head_4bit: false,
                lit_gpt_2023: false,
                unsloth_rope_per_layer: None,
                transformers_rope_per_layer: false,
            },
            // torchtune 0.1: configs/llama2/7B_lora_single_device.yaml and its QLoRA
            // twin (enable_activation_checkpointing True, torch.optim.AdamW,
            // torch.nn.CrossEntropyLoss), lora_llama2's lora_dropout 0.05.
            Framework::Torchtune01 => FrameworkDefaults {
                checkpointing: Some(true),
                offload_activations: Some(false),
                optimizer: Some((Optimizer::Adamw, Optimizer::Adamw)),
                master_weights: Some(false),
                adapters_in_compute: Some(true),
                lora_dropout: Some(true),
                qlora_keeps_compute: Some(true),
                loss: Some(Loss::FloatSliced),
                load: LoadPath::Torchtune01,
                qlora_kernel: None,
                head_4bit: false,
                lit_gpt_2023: false,
                unsloth_rope_per_layer: None,
                transformers_rope_per_layer: false,
            },
            // LitGPT finetune/lora.py: lora_dropout 0.05, precision bf16-true, AdamW
            // (bnb PagedAdamW with --quantize), lm_head_chunk_size 128 with
            // chunked_cross_entropy over chunks Fabric casts to fp32, no checkpointing;
            // BitsandbytesPrecision quantises every nn.Linear, lm_head included.
            Framework::Litgpt => FrameworkDefaults {
                checkpointing: Some(false),
                offload_activations: Some(false),
                optimizer: Some((Optimizer::Adamw, Optimizer::PagedAdamw)),
                master_weights: Some(false),
                adapters_in_compute: Some(true),
                lora_dropout: Some(true),
                qlora_keeps_compute: Some(true),
                loss: Some(Loss::ChunkedFabric(128)),
                load: LoadPath::Litgpt,
                qlora_kernel: None,
                head_4bit: true,
                lit_gpt_2023: false,
                unsloth_rope_per_layer: None,
                transformers_rope_per_layer: false,
            },
            // lit-gpt 8641822 finetune/lora.py (the same settings), its own GPT
            // (training::litgpt), bitsandbytes 0.41.1's MatMul4Bit (keeps its input).
            Framework::Litgpt2023 => FrameworkDefaults {
                qlora_kernel: Some(QloraKernel::Bnb0431),
                lit_gpt_2023: true,
                ..Framework::Litgpt.defaults()
            },
        }
    }

    /// What the framework's defaults are, in words, for the output ("" when none is
    /// named). Apart from [`Framework::defaults`], whose table the inference estimate
    /// reads: that table would otherwise carry these texts into every build (the
    /// dimensioner's wasm among them), where only the training stages print them.
    pub const fn said(self) -> &'static str {
        match self {
            Framework::Unnamed => "",
            Framework::Transformers => {
                "transformers 5.23 Trainer + PEFT 0.21: fused AdamW (adamw_torch_fused), no checkpointing (QLoRA: prepare_model_for_kbit_training turns it on), the model's dtype throughout (no fp32 master copy), fp32 adapters without dropout, ForCausalLMLoss over every position, padding to each batch's longest sample, from_pretrained"
            }
            Framework::Transformers439 => {
                "transformers 4.39 (April 2024) Trainer: AdamW (adamw_torch, foreach); LlamaForCausalLM's loss (the fp32 logits, their shifted contiguous copy and CrossEntropyLoss's log-softmax, the compute-dtype logits' block left cached beside them); a cos and a sin RoPE cache of max_position_embeddings positions in every attention layer (LlamaRotaryEmbedding, kept for backward compatibility); otherwise gpumem's defaults"
            }
            Framework::Axolotl => {
                "axolotl (its schema's defaults, through transformers' Trainer and PEFT): fused AdamW, no gradient checkpointing, no sample packing, fp32 adapters without dropout, ForCausalLMLoss, from_pretrained"
            }
            Framework::Trl => {
                "TRL 1.9 SFTTrainer: gradient checkpointing on, bf16, chunked_nll loss (256-token chunks, checkpointed), fused AdamW, fp32 PEFT adapters without dropout, no packing, from_pretrained"
            }
            Framework::Unsloth => {
                "unsloth: its gradient checkpointing (each layer's input offloaded to the host), its fused cross-entropy (counted at Fast_CrossEntropyLoss's upper bound), LoRA without dropout, the Trainer's fused AdamW (its notebooks pass adamw_8bit), from_pretrained; its fused LoRA kernels keep no more than PEFT's layers, which are counted; a QLoRA base's largest projection dequantised at the MLP's backward (fast_dequantize)"
            }
            Framework::Unsloth2024 => {
                "unsloth 2024.4 (6dad5dd): its gradient checkpointing (each layer's input offloaded to the host), Fast_CrossEntropyLoss over the whole logits, LoRA without dropout, the Trainer of its time's AdamW (transformers 4.39 adamw_torch, foreach), from_pretrained; with every linear adapted (its kernels' condition), its step in program order: the embedding's output held by the graph (enable_input_require_grads), each layer under no_grad, at the forward's end the logits it returns in the compute dtype and accelerate's fp32 copy of them (convert_outputs_to_fp32), released before the last layer is recomputed with LoRA_QKV, LoRA_W and LoRA_MLP keeping what they save and fast_dequantize's weights, the caching allocator fed in that order; otherwise PEFT's layers, a QLoRA base's largest projection dequantised at the MLP's backward and the forward's end where it exceeds the backward's peak; a cos and a sin RoPE cache of max(context, max_position_embeddings) positions in every layer (LlamaRotaryEmbedding)"
            }
            Framework::Torchtune => {
                "torchtune 0.6 single-device recipe: activation checkpointing on, fused AdamW, LinearCrossEntropyLoss in 8 chunks, bf16 throughout (adapters and the modules QLoRA does not quantise too), no LoRA dropout, the model built layer by layer on the device, NF4 through torchao"
            }
            Framework::Torchtune01 => {
                "torchtune 0.1 single-device recipe: activation checkpointing on, AdamW (foreach), fp32 logits sliced and CrossEntropyLoss, bf16 throughout, LoRA dropout 0.05, one layer built on the device and deep-copied, NF4 through torchao 0.1"
            }
            Framework::Litgpt => {
                "LitGPT finetune_lora: bf16-true, no checkpointing, AdamW (bitsandbytes PagedAdamW with --quantize, which quantises lm_head too), chunked_cross_entropy over 128-token lm_head chunks cast to fp32 by Fabric, bf16 adapters with dropout 0.05, the model built on the device; transformers' decoder stands in for LitGPT's own"
            }
            Framework::Litgpt2023 => {
                "lit-gpt 8641822 finetune/lora.py (Lightning Fabric 71aed751, bitsandbytes 0.41.1): its own GPT (fused qkv, RMSNorm in bf16), bf16-true, no checkpointing, AdamW (bitsandbytes PagedAdamW with --quantize, which quantises lm_head too, each 4-bit linear keeping its input), chunked_cross_entropy over 128-token lm_head chunks cast to fp32 by Fabric, bf16 adapters with dropout 0.05, the model built on the device"
            }
        }
    }
}

/// Whole modules trained beside LoRA (PEFT's `modules_to_save`, e.g.
/// `["embed_tokens", "lm_head"]` to train new tokens' embeddings): PEFT wraps each in
/// a `ModulesToSaveWrapper` that keeps the frozen original and a trainable deep copy
/// (peft/utils/other.py, `ModulesToSaveWrapper.update`), in the module's dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModulesToSave {
    /// The input embeddings.
    pub embed: bool,
    /// The output projection.
    pub lm_head: bool,
}

impl ModulesToSave {
    /// Parses a comma-separated list of `embed` (`embed_tokens`, `wte`,
    /// `tok_embeddings`) and `lm_head` (`output`).
    pub fn parse(field: &'static str, t: &str) -> Result<ModulesToSave, EstimateError> {
        let mut m = ModulesToSave::default();
        for x in t.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            match x {
                "embed" | "embed_tokens" | "embeddings" | "wte" | "tok_embeddings" => {
                    m.embed = true
                }
                "lm_head" | "output" => m.lm_head = true,
                other => {
                    return Err(EstimateError::invalid(
                        field,
                        format!("unknown module {other:?}; use embed and lm_head"),
                    ));
                }
            }
        }
        Ok(m)
    }

    /// The key's value ("" for none).
    pub fn name(self) -> String {
        match (self.embed, self.lm_head) {
            (true, true) => "embed,lm_head".into(),
            (true, false) => "embed".into(),
            (false, true) => "lm_head".into(),
            (false, false) => String::new(),
        }
    }
}

/// Which projections carry a LoRA adapter (`--lora-targets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoraTargets {
    /// Attention projections q, k, v, o.
    pub q: bool,
    /// Key projection.
    pub k: bool,
    /// Value projection.
    pub v: bool,
    /// Attention output projection.
    pub o: bool,
    /// The gated MLP's gate projection.
    pub gate: bool,
    /// The MLP's up projection.
    pub up: bool,
    /// The MLP's down projection.
    pub down: bool,
    /// The output projection (`lm_head`; torchtune's `apply_lora_to_output`).
    pub lm_head: bool,
}

impl LoraTargets {
    /// Parses a comma-separated list of q, k, v, o, gate, up, down (with or without
    /// `_proj`), `lm_head` (or `output`), or `all`: every linear layer of the decoder
    /// blocks, as PEFT's `all-linear` (which leaves the output projection out); `all`
    /// may be combined with `lm_head`.
    pub fn parse(field: &'static str, text: &str) -> Result<LoraTargets, EstimateError> {
        let mut t = LoraTargets::default();
        for x in text.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            match x.trim_end_matches("_proj") {
                "all" | "all-linear" => {
                    (t.q, t.k, t.v, t.o) = (true, true, true, true);
                    (t.gate, t.up, t.down) = (true, true, true);
                }
                "q" => t.q = true,
                "k" => t.k = true,
                "v" => t.v = true,
                "o" => t.o = true,
                "gate" => t.gate = true,
                "up" => t.up = true,
                "down" => t.down = true,
                "lm_head" | "output" => t.lm_head = true,
                _ => {
                    return Err(EstimateError::invalid(
                        field,
                        format!(
                            "unknown projection {x:?}; use q,k,v,o,gate,up,down,lm_head or all"
                        ),
                    ));
                }
            }
        }
        Ok(t)
    }

    /// Any attention projection.
    pub const fn attention(self) -> bool {
        self.q || self.k || self.v || self.o
    }
}

/// Which 4-bit linear a QLoRA base runs (`--qlora-kernel`): it decides what each
/// quantised linear keeps for the backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QloraKernel {
    /// bitsandbytes from 0.43.2 on (`bitsandbytes/autograd/_functions.py`,
    /// `MatMul4Bit.forward`: `ctx.tensors = (None, B)`), and torchao's `linear_nf4`
    /// that torchtune runs (`torchao/dtypes/nf4tensor.py`, `LinearNF4.forward` keeps
    /// only `ctx.nf4_weight`): the packed weight only, no activation.
    #[default]
    Bnb,
    /// bitsandbytes up to 0.43.1 (`MatMul4Bit.forward`: `ctx.tensors = (A, B)` whenever
    /// an input needs a gradient; bitsandbytes commit 9e75374, "fix QLoRA mem bug:
    /// delete useless buffered activation", released in 0.43.2, stopped keeping `A`):
    /// each quantised linear keeps its input for the backward.
    #[serde(rename = "bnb@0.43.1")]
    Bnb0431,
}

impl QloraKernel {
    /// Parses `bnb` (also `bitsandbytes`, `torchao`) and `bnb@0.43.1`.
    pub fn parse(field: &'static str, t: &str) -> Result<QloraKernel, EstimateError> {
        match t.trim().to_ascii_lowercase().as_str() {
            "" | "bnb" | "bitsandbytes" | "torchao" => Ok(QloraKernel::Bnb),
            "bnb@0.43.1" | "bitsandbytes@0.43.1" => Ok(QloraKernel::Bnb0431),
            other => Err(EstimateError::invalid(
                field,
                format!(
                    "unknown 4-bit kernel {other:?}; use bnb (bitsandbytes 0.43.2 or later, torchao) or bnb@0.43.1 (bitsandbytes 0.43.1 or earlier)"
                ),
            )),
        }
    }

    /// Canonical name.
    pub const fn name(self) -> &'static str {
        match self {
            QloraKernel::Bnb => "bnb",
            QloraKernel::Bnb0431 => "bnb@0.43.1",
        }
    }
}

/// What a checkpointed layer saves for the backward (`--checkpointing-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointPolicy {
    /// The layer's input only; the backward recomputes every other tensor
    /// (`torch.utils.checkpoint` without a policy: transformers'
    /// `gradient_checkpointing_enable`, torchtitan's `mode = "full"`, torchtune).
    #[default]
    Layer,
    /// torchtitan's selective op policy (`activation_checkpoint.mode = "selective"`,
    /// `selective_ac_option = "op"`; torchtitan/parallelisms/parallelize_llama.py at
    /// 3f20451 (December 2024), `_apply_ac_to_transformer_block` and its
    /// `_custom_policy`): beside the input, the outputs of the matmuls (`aten.mm`) but
    /// every second one, counted per layer, and those of the fused attention kernels
    /// (`_scaled_dot_product_flash_attention`, `_efficient_attention`) are saved
    /// (`CheckpointPolicy.MUST_SAVE`); the rest is recomputed.
    Op,
}

impl CheckpointPolicy {
    /// Parses `layer` (also empty, `full`) and `op` (also `selective`).
    pub fn parse(field: &'static str, t: &str) -> Result<CheckpointPolicy, EstimateError> {
        match t.trim().to_ascii_lowercase().as_str() {
            "" | "layer" | "full" => Ok(CheckpointPolicy::Layer),
            "op" | "selective" | "selective-op" => Ok(CheckpointPolicy::Op),
            other => Err(EstimateError::invalid(
                field,
                format!(
                    "unknown checkpointing policy {other:?}; use layer (every tensor but the layer's input recomputed) or op (torchtitan's selective op policy)"
                ),
            )),
        }
    }

    /// Canonical name.
    pub const fn name(self) -> &'static str {
        match self {
            CheckpointPolicy::Layer => "layer",
            CheckpointPolicy::Op => "op",
        }
    }
}

/// Under torchtitan's selective op policy ([`CheckpointPolicy::Op`]), what one layer of
/// a dense Llama-style decoder saves beyond its input, and how much of that the full
/// recompute of a layer would have made again (`(saved, overlap)`, bytes over all
/// tokens). The layer's matmuls run in the order q, k, v, o, gate, up, down (transformers'
/// `LlamaAttention` and `LlamaMLP`, torchtitan's `wq, wk, wv, wo, w1, w3, w2`), so the
/// policy keeps the outputs of q, v, gate and down (the 1st, 3rd, 5th and 7th `mm`) and
/// the attention kernel's output and log-sum-exp. Of these, v (the attention's input,
/// a view of the projection's output), the attention's output and log-sum-exp and gate
/// are tensors the recompute of the layer keeps anyway; q is taken again by RoPE, and
/// down's output is kept by the policy only. Traced with transformers 5.23 on meta
/// (Llama-3.2-1B, 2 × 512, flash): 30 539 776 B a layer, as derived. `Err` names why a
/// layer is outside it (the matmuls' order or kind differs, or an adapter adds its own).
pub fn op_policy_layer(
    a: &Architecture,
    seq: u64,
    batch: u64,
    value: u64,
    attention: AttentionImpl,
    adapters: bool,
) -> Result<(u64, u64), &'static str> {
    if adapters {
        return Err(
            "LoRA's adapters add matmuls of their own, which move the op policy's every-second count",
        );
    }
    if a.moe.is_some() || a.fused_qkv || layernorm_decoder(a) || not_derived(a).is_some() {
        return Err(
            "the op policy is derived for dense decoders with separate q, k, v, o, gate, up and down projections (a fused projection, a GPT-2 Conv1D or routed experts change which matmuls it saves)",
        );
    }
    let tokens = seq.saturating_mul(batch);
    let (h, heads, kv, d, i) = (a.hidden, a.heads, a.kv_heads, a.head_dim, a.intermediate);
    let lse = match attention {
        AttentionImpl::Flash | AttentionImpl::Sdpa => block(&[tokens, 4, heads]),
        AttentionImpl::Efficient => block(&[batch, heads, seq.div_ceil(32), 32, 4]),
        AttentionImpl::Eager => {
            return Err(
                "eager attention runs no fused kernel for the op policy to save (its products are batched matmuls, not counted)",
            );
        }
    };
    let qd = block(&[tokens, value, heads, d]);
    let kd = block(&[tokens, value, kv, d]);
    let gate = block(&[tokens, value, i]);
    let down = block(&[tokens, value, h]);
    let saved = add(&[qd, kd, qd, lse, gate, down]);
    let overlap = add(&[kd, qd, lse, gate]);
    Ok((saved, overlap))
}

/// LoRA adapters on a frozen base, as far as the backward's saved tensors go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adapters {
    /// The adapted projections.
    pub targets: LoraTargets,
    /// LoRA rank.
    pub rank: u64,
    /// Bytes per value of the adapters' weights (4: PEFT's fp32 adapters; 2: torchtune's
    /// and LitGPT's adapters in the compute dtype).
    pub value: u64,
    /// Dropout before each adapter (`lora_dropout` > 0).
    pub dropout: bool,
    /// The base's linear layers keep their inputs (QLoRA with bitsandbytes ≤ 0.43.1).
    pub base_keeps_inputs: bool,
    /// The decoder's adapted projections are bitsandbytes 4-bit linears (QLoRA through
    /// PEFT): PEFT's `lora.bnb.Linear4bit.forward` casts the input to the adapter's
    /// dtype only outside autocast (`requires_conversion = not
    /// torch.is_autocast_enabled()`).
    pub base_4bit: bool,
    /// QLoRA prepared by PEFT's `prepare_model_for_kbit_training` (peft 0.21.2
    /// `peft/utils/other.py`: every fp16/bf16 parameter that is not a `Params4bit` cast
    /// to fp32): the embeddings and norms are fp32, so the hidden states are fp32 from
    /// the embedding to the output projection, and each bitsandbytes `Linear4bit` casts
    /// its fp32 input to its compute dtype and its output back to fp32
    /// (`Linear4bit.forward`, bitsandbytes 0.45 - 0.50 `bitsandbytes/nn/modules.py`).
    /// Derived for transformers' Llama-style dense decoder (per-head q/k norms
    /// included) under every kernel, eager too, and for Mixtral's, Qwen3-MoE's and
    /// Qwen2-MoE's routed experts, which stay unquantised and run in fp32
    /// ([`kbit_outside`]).
    pub fp32_hidden: bool,
    /// The step runs under `torch.autocast` in the compute dtype: `F.linear` casts
    /// `lora_A`'s input and weight to that dtype and keeps those copies, so an adapter
    /// keeps a 16-bit copy of its input (where one exists at all) and a 16-bit
    /// `lora_A` output, whatever the adapters' own dtype.
    pub autocast: bool,
    /// Under autocast, the 16-bit copies of the adapters' weights that autocast casts
    /// (fp32 leaves, held in its cast cache until the forward's autocast exits and
    /// saved for the backward), in bytes; 0 otherwise.
    pub weight_copies: u64,
    /// Whole modules trained beside the adapters (PEFT's `modules_to_save`): a trainable
    /// embedding gives the first layer's input a gradient, a trainable output
    /// projection keeps its input for its weight's gradient.
    pub modules: ModulesToSave,
}

/// Which attention kernel runs: it decides whether a tokens² score matrix exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionImpl {
    /// Eager attention: the batch × heads × tokens² score matrix is materialised.
    Eager,
    /// PyTorch SDPA (memory-efficient / flash backends): no score matrix kept.
    Sdpa,
    /// FlashAttention: no score matrix kept.
    Flash,
    /// The memory-efficient kernel (xFormers' cutlass kernel in PyTorch): no score
    /// matrix kept; grouped K/V are repeated to every query head first.
    Efficient,
}

impl AttentionImpl {
    /// Parses `eager`, `sdpa`, `flash`.
    pub fn parse(field: &'static str, t: &str) -> Result<AttentionImpl, EstimateError> {
        match t.trim().to_ascii_lowercase().as_str() {
            "eager" => Ok(AttentionImpl::Eager),
            "sdpa" => Ok(AttentionImpl::Sdpa),
            "flash" | "flash_attention_2" | "flash-attention" => Ok(AttentionImpl::Flash),
            "efficient" | "mem-efficient" | "memory-efficient" => Ok(AttentionImpl::Efficient),
            other => Err(EstimateError::invalid(
                field,
                format!("unknown attention {other:?}; use eager, sdpa, flash or efficient"),
            )),
        }
    }

    /// Canonical name.
    pub const fn name(self) -> &'static str {
        match self {
            AttentionImpl::Eager => "eager",
            AttentionImpl::Sdpa => "sdpa",
            AttentionImpl::Flash => "flash",
            AttentionImpl::Efficient => "efficient",
        }
    }
}

/// Activation memory kept for the backward pass, after Korthikanti et al. 2022
/// ("Reducing Activation Recomputation in Large Transformer Models", eq. 1–2): per
/// layer `s·b·h·(34 + 5·a·s/h)` bytes with 16-bit activations and eager attention;
/// the `5·a·s²·b` score term vanishes with flash/SDPA kernels; full activation
/// checkpointing keeps only each layer's 16-bit input (`2·s·b·h`) plus one layer
/// recomputed at a time. Returns the bytes and the formula as text.
pub fn activation_bytes(
    layers: u64,
    hidden: u64,
    heads: u64,
    seq: u64,
    micro_batch: u64,
    checkpointing: bool,
    attention: AttentionImpl,
) -> Result<(u64, String), EstimateError> {
    let sbh = checked_product(&[seq, micro_batch, hidden], "activations")?;
    let scores = match attention {
        AttentionImpl::Eager => checked_product(&[5, heads, seq, seq, micro_batch], "activations")?,
        _ => 0,
    };
    let one_layer = checked_product(&[34, sbh], "activations")?
        .checked_add(scores)
        .ok_or(EstimateError::Overflow {
            what: "activations",
        })?;
    let score_text = if scores > 0 { " + 5·a·s²·b" } else { "" };
    if checkpointing {
        let kept = checked_product(&[2, sbh, layers], "activations")?;
        let bytes = kept.checked_add(one_layer).ok_or(EstimateError::Overflow {
            what: "activations",
        })?;
        Ok((
            bytes,
            format!(
                "2·s·b·h × L (checkpointed inputs) + one layer recomputed (34·s·b·h{score_text})"
            ),
        ))
    } else {
        let bytes = checked_product(&[one_layer, layers], "activations")?;
        Ok((bytes, format!("L × (34·s·b·h{score_text})")))
    }
}

/// Activations a transformers decoder keeps for the backward, derived from its code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activations {
    /// Bytes kept at the end of the forward (every tensor rounded to the caching
    /// allocator's 512 B blocks), plus one layer recomputed with checkpointing.
    pub bytes: u64,
    /// Of which kept at the end of the forward (what a trace's forward ends with).
    pub kept: u64,
    /// The formula, in words.
    pub formula: String,
    /// `None` when the architecture is one the derivation covers (the line is then
    /// computed); otherwise why the figure stays an assumption.
    pub assumed_because: Option<&'static str>,
}

/// The product of `xs`, saturating (an overflow is caught once, at the end: a
/// saturated figure is `u64::MAX`, which no real workload reaches).
fn mul(xs: &[u64]) -> u64 {
    xs.iter().fold(1u64, |a, x| a.saturating_mul(*x))
}

/// The allocator's block for a tensor of the product of `xs` bytes: a multiple of 512,
/// at least 512 (c10/cuda/CUDACachingAllocator.cpp, `round_size`), saturating.
fn block(xs: &[u64]) -> u64 {
    mul(xs).max(1).div_ceil(512).saturating_mul(512)
}

/// The int64 labels the loss keeps for the backward (transformers 5.23
/// `loss/loss_utils.py` `ForCausalLMLoss`: `labels = nn.functional.pad(labels, (0, 1))`,
/// `shift_labels = labels[..., 1:].contiguous()`, which `nll_loss` keeps). With one
/// sequence the slice is already contiguous and `contiguous()` returns it: the padded
/// tensor's storage, tokens + 1 values, is what stays; with more, a copy of
/// batch × tokens values.
fn shifted_labels(seq: u64, batch: u64) -> u64 {
    if batch == 1 {
        block(&[seq.saturating_add(1), 8])
    } else {
        block(&[seq, batch, 8])
    }
}

/// The saturating sum of `xs`.
fn add(xs: &[u64]) -> u64 {
    xs.iter().fold(0u64, |a, x| a.saturating_add(*x))
}

/// Why an architecture is outside the derivations of [`decoder_activations`] and
/// [`decoder_prefill`] (`None`: transformers' Llama-style decoder, which they cover):
/// its optional parts, then the first fact not at its default whose row in the facts
/// table says why ([`Architecture::underived`]).
fn not_derived(a: &Architecture) -> Option<&'static str> {
    if a.indexer.is_some() {
        Some("sparse attention's indexer (DeepSeek-V3.2, GLM-5) is not in the derivation")
    } else if a.moe.is_some_and(|m| !plain_moe(a, &m)) && !deepseek_v2(a) {
        Some(
            "this mixture of experts' layout (shared experts without Qwen2-MoE's sigmoid gate outside DeepSeek's layout, router or expert biases, latent experts, whole-projection q/k norms) is not in the derivation",
        )
    } else if a.mla.is_some() && !deepseek_v2(a) {
        Some(
            "multi-head latent attention is derived only in DeepSeek's layout as transformers runs it (its MoE, no attention biases, value heads narrower than query heads)",
        )
    } else if a.mixer.is_some() {
        Some("state-space / linear-attention layers are not in the derivation")
    } else if a.falcon_layer && !falcon_derived(a) {
        Some(
            "Falcon's layers other than Falcon-7B's (one norm, one K/V head), Falcon-40B's (two parallel norms, grouped K/V) and Falcon2-11B's (one norm, grouped K/V) with RoPE, and Falcon-RW's (two sequential norms, every head, ALiBi), each without dropout, are not in the derivation",
        )
    } else if layernorm_decoder(a) {
        // GPT-2's, GPTBigCode's, GPT-NeoX's, StarCoder 2's, Phi's and OPT's LayerNorm
        // layers are derived (`layernorm_activations`); any other fact off its default still says
        // why.
        Architecture {
            layer_norms: Architecture::BASE.layer_norms,
            gated_mlp: Architecture::BASE.gated_mlp,
            layernorm_bias: Architecture::BASE.layernorm_bias,
            learned_positions: Architecture::BASE.learned_positions,
            parallel_residual: Architecture::BASE.parallel_residual,
            gelu_new: Architecture::BASE.gelu_new,
            relu: Architecture::BASE.relu,
            dropout: Architecture::BASE.dropout,
            attn_dropout: Architecture::BASE.attn_dropout,
            embedding_dropout: Architecture::BASE.embedding_dropout,
            softmax_in_dtype: Architecture::BASE.softmax_in_dtype,
            // Falcon-7B's layer is derived; Falcon's others said why above.
            falcon_layer: Architecture::BASE.falcon_layer,
            // OPT-350m's projections around its post-norm layers are derived.
            embed_proj: if opt_post_norm(a) {
                Architecture::BASE.embed_proj
            } else {
                a.embed_proj
            },
            // BLOOM's norm over the embeddings is derived with its layer.
            embedding_norm: if bloom(a) {
                Architecture::BASE.embedding_norm
            } else {
                a.embedding_norm
            },
            ..*a
        }
        .underived()
    } else if gemma_norms(a) {
        // Gemma 2's and 3's four norms are derived, and its text decoder is the same beside a
        // vision tower (gemma-3-4b's whole model traced on text: equal to the byte); any
        // other fact off its default still says why.
        Architecture {
            layer_norms: Architecture::BASE.layer_norms,
            tower_params: 0,
            ..*a
        }
        .underived()
    } else {
        a.underived()
    }
}

/// The LayerNorm decoders as transformers 5.23 writes them, what
/// [`layernorm_activations`] derives: LayerNorms with bias, a non-gated MLP, nothing
/// else optional, and either
/// - GPT-2's and GPT-NeoX's layer: two norms, one fused q/k/v projection, multi-head
///   attention, learned positions (GPT-2) or rotary ones (GPT-NeoX); GPTBigCode's
///   ([`gpt_bigcode`]: GPT-2's with one K/V head); or
/// - [`layernorm_separate`]'s: StarCoder 2's, Phi's and OPT's.
fn layernorm_decoder(a: &Architecture) -> bool {
    stablelm(a) || layernorm_gelu_decoder(a)
}

/// The LayerNorm decoders with a non-gated MLP (see [`layernorm_decoder`]).
fn layernorm_gelu_decoder(a: &Architecture) -> bool {
    a.layernorm_bias
        && !a.gated_mlp
        && ((a.fused_qkv && a.layer_norms == 2 && (a.kv_heads == a.heads || gpt_bigcode(a)))
            || layernorm_separate(a)
            || falcon_derived(a))
        && !a.nonparametric_norms
        && !a.qk_norm
        && !a.qk_norm_whole
        && a.moe.is_none()
        && a.mla.is_none()
        && a.mixer.is_none()
}

/// GPTBigCode's multi-query layer (transformers 5.23
/// `models/gpt_bigcode/modeling_gpt_bigcode.py`, `GPTBigCodeAttention.forward` with
/// `multi_query`): GPT-2's layer with one K/V head, `c_attn`'s output (`h + 2·d` wide)
/// split into views (`unsqueeze(1).split`), a learned position table, and an eager
/// path whose softmax runs in fp32 (its own `eager_attention_forward`, which repeats
/// the K/V head to every query head: `repeat_kv`, copies).
fn gpt_bigcode(a: &Architecture) -> bool {
    a.fused_qkv
        && a.kv_heads == 1
        && a.heads > 1
        && a.layer_norms == 2
        && a.learned_positions > 0
        && !a.parallel_residual
        && !a.falcon_layer
        && !a.softmax_in_dtype
        && !a.embedding_norm
}

/// StarCoder 2's layer (transformers 5.23 `models/starcoder2/modeling_starcoder2.py`,
/// `Starcoder2DecoderLayer`: two LayerNorms in sequence), Phi-1/1.5/2's
/// (`models/phi/modeling_phi.py`, `PhiDecoderLayer`: one LayerNorm feeding parallel
/// attention and MLP) and OPT's with its LayerNorms before attention and MLP
/// (`models/opt/modeling_opt.py`, `OPTDecoderLayer` with `do_layer_norm_before`, a
/// learned position table, a ReLU MLP): separate q, k and v projections (grouped K/V
/// heads allowed), rotary positions over the whole head or part of it or OPT's table,
/// no q/k LayerNorms but Phi's `qk_layernorm` ([`phi_qk_norm`], counted in
/// `layer_scalars`), no sinusoidal table or causal-mask buffer, a final norm or OPT's
/// post-norm layers ([`opt_post_norm`]).
fn layernorm_separate(a: &Architecture) -> bool {
    !a.fused_qkv
        && !a.falcon_layer
        && !a.softmax_in_dtype
        // A position table with separate projections is OPT's layer, derived with its
        // ReLU (BioGPT's, with GELU and an activation dropout, stays outside).
        && (a.learned_positions == 0 || (a.relu && a.layer_norms == 2))
        && a.sinusoid_positions == 0
        && a.mask_positions == 0
        && (a.layer_scalars == 0 || phi_qk_norm(a))
        && (a.final_norm || opt_post_norm(a))
        && match a.layer_norms {
            2 => !a.parallel_residual,
            1 => true,
            _ => false,
        }
}

/// Phi's `qk_layernorm` (transformers 5.23 `models/phi/modeling_phi.py`,
/// `PhiAttention.forward`): `q_layernorm` and `k_layernorm`, each an `nn.LayerNorm`
/// over the head width (the reader counts their weights and biases, 4 × head_dim
/// values, in `layer_scalars`), read the projections' outputs viewed by head and keep
/// them (`native_layer_norm` saves its input: the projection's output, a view of it)
/// and their fp32 mean and rstd per head and token; their outputs are rotated and
/// `torch.cat` (the rotation keeps only cos and sin), so they are not kept.
fn phi_qk_norm(a: &Architecture) -> bool {
    a.layer_norms == 1
        && !a.fused_qkv
        && !a.falcon_layer
        && a.rope_tables > 0
        && a.layer_scalars == a.head_dim.saturating_mul(4)
}

/// OPT's post-norm layers (transformers 5.23 `models/opt/modeling_opt.py`,
/// `OPTDecoderLayer` without `do_layer_norm_before`: OPT-350m): each LayerNorm reads a
/// residual sum and its output is the next linear's and the next residual's input, so
/// a layer keeps what the pre-norm layer keeps (its input, two sums, two norms' stats
/// and outputs, the last being the next layer's input); `OPTDecoder` builds no final
/// LayerNorm, and `project_in` / `project_out` (`word_embed_proj_dim`) keep their
/// inputs (the embeddings' output, the last layer's) and `project_out`'s output feeds
/// the head (none where `word_embed_proj_dim` is the hidden size).
fn opt_post_norm(a: &Architecture) -> bool {
    !a.final_norm && !a.fused_qkv && a.relu && a.learned_positions > 0 && a.layer_norms == 2
}

/// Falcon-7B's layer (transformers 5.23 `models/falcon/modeling_falcon.py`,
/// `FalconDecoderLayer` with `parallel_attn` and `multi_query`, not
/// `new_decoder_architecture`): one LayerNorm feeding attention and MLP, one K/V head
/// split off the fused `query_key_value`, RoPE (no ALiBi: its rotary tables), and no
/// dropout; the other Falcon layouts stay outside (`falcon_layer`).
fn falcon_mqa(a: &Architecture) -> bool {
    a.falcon_layer && a.layer_norms == 1 && a.kv_heads == 1 && falcon_plain(a)
}

/// Falcon-40B's and Falcon-180B's layer (transformers 5.23 `modeling_falcon.py`,
/// `FalconDecoderLayer` with `new_decoder_architecture` and two norms in parallel,
/// `num_ln_in_parallel_attn` 2): `ln_attn` and `ln_mlp` read the layer's input (the
/// reader's `parallel_residual`), the fused `query_key_value` holds grouped K/V heads
/// which `_split_heads` broadcasts to every query head (`torch.broadcast_to`,
/// `flatten`: copies), RoPE and no dropout.
fn falcon_grouped(a: &Architecture) -> bool {
    a.falcon_layer && a.layer_norms == 2 && a.parallel_residual && falcon_plain(a)
}

/// Falcon2-11B's layer (transformers 5.23 `modeling_falcon.py`, `FalconDecoderLayer`
/// with `new_decoder_architecture`, `parallel_attn` and `num_ln_in_parallel_attn` 1):
/// one norm (`input_layernorm`) feeding attention and MLP, as Falcon-7B's, over
/// Falcon-40B's grouped K/V, which `_split_heads` broadcasts to every query head. Told
/// from Falcon-7B's by its K/V heads: more than one and fewer than the query heads
/// (the old layout has one under `multi_query`, else as many as the query heads); a
/// new-layout config with one K/V head and one norm reads as Falcon-7B's.
fn falcon_grouped_one_norm(a: &Architecture) -> bool {
    a.falcon_layer
        && a.layer_norms == 1
        && a.kv_heads > 1
        && a.kv_heads < a.heads
        && falcon_plain(a)
}

/// Falcon-RW's layer (transformers 5.23 `modeling_falcon.py`, `FalconDecoderLayer`
/// without `parallel_attn`, `multi_query` or `new_decoder_architecture`, with `alibi`):
/// two LayerNorms in sequence, every head's K/V in the fused `query_key_value`, ALiBi
/// (no rotary table: the reader's `rope_tables` 0) and no dropout. Its SDPA path passes
/// ALiBi folded into a 16-bit mask (the memory-efficient kernel); its eager path adds
/// ALiBi to fp32 scores and keeps a softmax in the compute dtype; flash is refused.
fn falcon_rw(a: &Architecture) -> bool {
    a.falcon_layer
        && a.layer_norms == 2
        && !a.parallel_residual
        && a.kv_heads == a.heads
        && a.rope_tables == 0
        && !a.dropout
        && !a.attn_dropout
        && !a.embedding_dropout
        && a.learned_positions == 0
        && a.layer_scalars == 0
        && a.final_norm
}

/// A Falcon layer [`layernorm_activations`] derives: Falcon-7B's ([`falcon_mqa`]),
/// Falcon-40B's ([`falcon_grouped`]), Falcon2-11B's ([`falcon_grouped_one_norm`]) or
/// Falcon-RW's ([`falcon_rw`]).
fn falcon_derived(a: &Architecture) -> bool {
    falcon_mqa(a) || falcon_grouped(a) || falcon_grouped_one_norm(a) || falcon_rw(a)
}

/// BLOOM's layer (transformers 5.23 `models/bloom/modeling_bloom.py`, `BloomModel.forward`,
/// `BloomBlock`, `BloomAttention.forward`, `BloomMLP`, `GeLUFunction`): a LayerNorm
/// over the token embeddings (`word_embeddings_layernorm`), two LayerNorms in sequence,
/// the fused `query_key_value` over every head, ALiBi (no rotary table, no position
/// table), a GELU that keeps only its input (a `torch.autograd.Function` saving it), no
/// dropout. Its attention is its own eager code whatever kernel is asked
/// (`BloomPreTrainedModel` supports no SDPA: the default request runs it; flash and
/// the memory-efficient kernel are refused by transformers).
fn bloom(a: &Architecture) -> bool {
    a.embedding_norm
        && a.fused_qkv
        && a.layer_norms == 2
        && a.kv_heads == a.heads
        && !a.parallel_residual
        && a.learned_positions == 0
        && a.rope_tables == 0
        && a.rotary_dims == 0
        && !a.gelu_new
        && !a.relu
        && !a.softmax_in_dtype
        && !a.dropout
        && !a.attn_dropout
        && !a.embedding_dropout
        && !a.falcon_layer
        && a.final_norm
}

/// StableLM's layer (transformers 5.23 `models/stablelm/modeling_stablelm.py`,
/// `StableLmDecoderLayer` without `use_parallel_residual`, `StableLmAttention.forward`,
/// `StableLmMLP`): two LayerNorms with bias in sequence, separate q, k and v
/// projections whose first `partial_rotary_factor` of each head is rotated and
/// `torch.cat` with the rest (q and k head-major, as Phi's), Llama's gated SiLU MLP, no
/// q/k LayerNorms and no dropout.
fn stablelm(a: &Architecture) -> bool {
    a.layernorm_bias
        && a.gated_mlp
        && !a.fused_qkv
        && a.layer_norms == 2
        && !a.parallel_residual
        && !a.qk_norm
        && !a.qk_norm_whole
        && !a.nonparametric_norms
        && a.learned_positions == 0
        && a.rope_tables > 0
        && !a.dropout
        && !a.attn_dropout
        && !a.embedding_dropout
        && !a.softmax_in_dtype
        && !a.relu
        && !a.gelu_new
        && !a.other_activation
        && !a.falcon_layer
        && !a.embedding_norm
        && a.final_norm
        && a.layer_scalars == 0
        && a.sinusoid_positions == 0
        && a.mask_positions == 0
        && a.moe.is_none()
        && a.mla.is_none()
        && a.mixer.is_none()
}

/// What both derived Falcon layouts share: RoPE (no ALiBi: its rotary tables), no
/// dropout, no position table, no layer scalars, a final norm.
fn falcon_plain(a: &Architecture) -> bool {
    a.falcon_layer
        && a.rope_tables > 0
        && !a.dropout
        && !a.attn_dropout
        && !a.embedding_dropout
        && a.learned_positions == 0
        && a.layer_scalars == 0
        && a.final_norm
}

/// Activations of a full fine-tune of GPT-2 or GPT-NeoX (Pythia), derived tensor by
/// tensor from transformers 5.23's `models/gpt2/modeling_gpt2.py` (`GPT2Block`,
/// `GPT2Attention.forward`, `GPT2MLP`, `eager_attention_forward`) and
/// `models/gpt_neox/modeling_gpt_neox.py` (`GPTNeoXLayer.forward`,
/// `GPTNeoXAttention.forward`, `apply_rotary_pos_emb`, `GPTNeoXMLP`), and checked
/// against `gpumem-agent trace` (equal to the byte for gpt2 and pythia-160m under
/// each kernel, with and without checkpointing).
///
/// Per layer, with `T` tokens, `v` bytes per value and every tensor in 512 B blocks:
/// - `nn.LayerNorm` (`native_layer_norm`) keeps its input, its fp32 mean and rstd (4 B
///   a token each) and its output, which the projection keeps: two norms a layer. The
///   first norm's input is the layer's input; the second's is the attention's sum with
///   the residual (GPT-2, GPT-NeoX without `use_parallel_residual`) or the layer's
///   input again (parallel residual: kept once);
/// - the fused q/k/v output (`c_attn`, `query_key_value`): q, k and v are views of
///   it. GPT-2 hands the views to the kernel: flash, SDPA and the memory-efficient
///   kernel keep the whole output, their own output and an fp32 log-sum-exp per head.
///   GPT-NeoX rotates q and k first (`torch.cat` of the rotated and passed parts: new
///   tensors), as Phi-3 does, so its kernels keep the same terms as Phi-3's. Eager
///   attention multiplies contiguous copies of q, k and v and keeps none of the fused
///   output: v·4·h, and the probabilities per head and token²: GPT-NeoX's fp32
///   softmax and its 16-bit copy (4 + v), GPT-2's softmax in the compute dtype (v);
/// - dropout in training (`native_dropout` on CUDA, PyTorch's Dropout.cpp
///   `is_fused_kernel_acceptable`) keeps a boolean mask: after the attention's and the
///   MLP's output projections (1·h each) and, in eager attention, over the
///   probabilities (1 per head and token², and GPT-2 keeps the dropped copy beside the
///   softmax's output, v); the fused kernels drop inside and keep nothing more;
/// - the MLP keeps the first projection's output and the activation's output (2·v·i)
///   for a fused GELU; transformers' `NewGELUActivation` (`gelu_new`, activations.py)
///   also keeps its tanh, `0.5·x` and `1 + tanh` (5·v·i);
/// - once: the final LayerNorm (input, output, mean, rstd), GPT-NeoX's RoPE cos and
///   sin over the rotary width (`rotary_pct`), GPT-2's position ids (the learned
///   table's backward), the embedding's dropout mask, the labels and the loss.
///
/// With full activation checkpointing the forward keeps each layer's input and the
/// once-terms (the checkpointed layers' arguments also hold GPT-NeoX's position ids and
/// eager attention's additive mask), and the backward recomputes one layer at a time.
///
/// GPTBigCode ([`gpt_bigcode`]; equal to the trace to the byte for SantaCoder's shape
/// with and without its dropouts, multi-query and not, under each kernel, with and
/// without checkpointing) keeps GPT-2's tensors with its narrower `c_attn` output and
/// an fp32 eager softmax ([`layernorm_attention`]).
///
/// StarCoder 2, Phi and OPT ([`layernorm_separate`]: equal to the trace to the byte for
/// starcoder2-7b, phi-1_5, phi-2 and opt-125m under each kernel, with and without
/// checkpointing) keep the same norms, masks and MLP terms, with their own attention
/// ([`separate_attention`]); Phi's one norm is read by attention and MLP alike (its
/// input kept once); OPT's ReLU keeps only its output (1·v·i) and its table's position
/// ids are per sequence (batch × tokens int64, held by the checkpointed layers'
/// arguments too). Each dropout counts where its own probability is above 0: after the
/// output projections (`dropout`), over the embeddings (`embedding_dropout`), over
/// eager attention's probabilities (`attn_dropout`).
fn layernorm_activations(
    a: &Architecture,
    (seq, batch): (u64, u64),
    value: u64,
    checkpointing: bool,
    attention: AttentionImpl,
    why: Option<&'static str>,
) -> Result<Activations, EstimateError> {
    let tokens = seq.saturating_mul(batch);
    let (h, d, i) = (a.hidden, a.head_dim, a.intermediate);
    let hidden = block(&[tokens, value, h]);
    let stats = mul(&[2, block(&[tokens, 4])]);
    let norm = add(&[stats, hidden]);
    // Phi's one norm reads only the layer's input, as GPT-NeoX's parallel layer does.
    let one_norm = a.layer_norms == 1;
    let inputs = if a.parallel_residual || one_norm {
        1
    } else {
        2
    };
    let norms = if one_norm { 1 } else { 2 };
    let bloom = bloom(a);
    // BLOOM has neither a rotary nor a position table (ALiBi), and runs its eager
    // attention whatever is asked. Falcon-RW's ALiBi layers apply no rotary table
    // (FalconModel still computes one, which only the checkpointed layers' arguments
    // hold).
    let rw = falcon_rw(a);
    let rotary = a.learned_positions == 0 && !bloom && !rw;
    let falcon = falcon_derived(a);
    let why = why
        .or((rw && attention == AttentionImpl::Flash).then_some(
            "Falcon with ALiBi refuses flash attention (transformers 5.23 FalconFlashAttention2: `alibi` is not supported): not derived",
        ))
        .or((stablelm(a) && attention == AttentionImpl::Efficient).then_some(
            "StableLM under the memory-efficient kernel keeps one more tensor of the attention's width than the derivation counts (traced, not explained)",
        ))
        .or(
        (bloom && matches!(attention, AttentionImpl::Flash | AttentionImpl::Efficient)).then_some(
            "BLOOM runs only its eager attention (transformers 5.23 BloomPreTrainedModel supports no SDPA kernel): a flash or memory-efficient request is refused, not derived",
        ),
    );
    // Phi's q/k LayerNorms keep the projections' outputs and their fp32 mean and rstd.
    let qk_norms = if phi_qk_norm(a) {
        let (heads, kv, d) = (a.heads, a.kv_heads, a.head_dim);
        add(&[
            block(&[tokens, value, heads, d]),
            block(&[tokens, value, kv, d]),
            mul(&[2, block(&[tokens, 4, heads])]),
            mul(&[2, block(&[tokens, 4, kv])]),
        ])
    } else {
        0
    };
    let (attn, attn_text) = if falcon {
        falcon_attention(a, (seq, batch), value, attention)
    } else if bloom {
        layernorm_attention(a, (seq, batch), value, AttentionImpl::Eager)
    } else if a.fused_qkv {
        layernorm_attention(a, (seq, batch), value, attention)
    } else {
        separate_attention(a, (seq, batch), value, attention)
    };
    // Falcon's SDPA path always passes its boolean causal mask (FalconModel builds it
    // for SDPA), one for all sequences, which the memory-efficient kernel's backward
    // reads.
    // Falcon-RW's is ALiBi folded into a 16-bit mask per sequence and head
    // (`FalconModel.forward`: `masked_fill(alibi / sqrt(d), causal_mask < -1, min)`),
    // the SDPA path's `attn_mask`, kept by the memory-efficient kernel, and held by the
    // checkpointed layers' arguments whatever the kernel.
    let falcon_mask = if rw {
        if attention != AttentionImpl::Eager || checkpointing {
            block(&[batch, a.heads, seq, seq, value])
        } else {
            0
        }
    } else if falcon && attention != AttentionImpl::Eager {
        block(&[seq, seq])
    } else {
        0
    };
    let mask = block(&[tokens, h]);
    let masks = if a.dropout { mul(&[2, mask]) } else { 0 };
    // ReLU's backward reads its output (`threshold_backward`), which the second
    // projection keeps too: the first projection's output is not kept.
    // StableLM's gated MLP keeps, as Llama's, the gate's and up's outputs, SiLU's
    // output and the product `down_proj` reads.
    let stablelm = stablelm(a);
    let act = if stablelm {
        4
    } else if a.relu {
        1
    } else if a.gelu_new {
        5
    } else {
        2
    };
    let mlp = mul(&[act, block(&[tokens, value, i])]);
    let layer = add(&[
        mul(&[inputs, hidden]),
        mul(&[norms, norm]),
        attn,
        qk_norms,
        masks,
        mlp,
    ]);
    let rot = if a.rotary_dims > 0 { a.rotary_dims } else { d };
    // GPT-2's position ids are one sequence's (`cache_position`); OPT's are computed
    // per sequence from the attention mask (`OPTDecoder.forward`: `cumsum`), and its
    // table reads them plus its offset of 2, a tensor of its own.
    let opt = !a.fused_qkv && !rotary && !rw;
    let positions = if opt {
        block(&[tokens, 8])
    } else {
        block(&[seq, 8])
    };
    // BLOOM's `word_embeddings_layernorm` keeps its input (the embeddings' output) and
    // its fp32 mean and rstd; its output is the first layer's input.
    let embedding_norm = if bloom { add(&[hidden, stats]) } else { 0 };
    // OPT's post-norm layers: no final LayerNorm (the last layer's output is the
    // head's or `project_out`'s input); `project_in` keeps the embeddings' output and
    // the head keeps `project_out`'s, each `word_embed_proj_dim` wide.
    let post_norm = opt_post_norm(a);
    let final_norm = if post_norm { 0 } else { norm };
    let projections = if a.embed_proj > 0 {
        mul(&[2, block(&[tokens, value, a.embed_proj])])
    } else {
        0
    };
    let once = add(&[
        hidden,
        final_norm,
        projections,
        embedding_norm,
        if rotary {
            mul(&[2, block(&[seq, value, rot])])
        } else if bloom || rw {
            0
        } else {
            positions
        },
        if a.embedding_dropout { mask } else { 0 },
        falcon_mask,
        shifted_labels(seq, batch),
        1024,
    ]);
    let layers = a.layers;
    let (kept, bytes, shape) = if checkpointing {
        // The checkpointed layers' arguments also hold eager attention's additive
        // mask (masking_utils.py `create_causal_mask`: one 16-bit tokens² per sequence).
        // BLOOM's are eager's mask whatever is asked, and its ALiBi bias (one row of
        // `batch × heads` in the compute dtype, `build_alibi_tensor`).
        // Falcon-RW's hold its mask (in `once`), the ALiBi bias as BLOOM's, the
        // position ids and the rotary cos and sin FalconModel computes anyway.
        let held_mask = if (attention == AttentionImpl::Eager || bloom) && !rw {
            block(&[batch, seq, seq, value])
        } else {
            0
        };
        let alibi = if bloom || rw {
            block(&[batch, a.heads, seq, value])
        } else {
            0
        };
        let kept = add(&[
            mul(&[layers, hidden]),
            once,
            if rotary || opt || rw { positions } else { 0 },
            if rw {
                mul(&[2, block(&[seq, value, d])])
            } else {
                0
            },
            held_mask,
            alibi,
        ]);
        (
            kept,
            add(&[kept, layer]),
            if alibi > 0 {
                "L × v·h (checkpointed layer inputs) + eager attention's 16-bit mask and the ALiBi bias, which their arguments hold + one layer recomputed"
            } else if held_mask > 0 {
                "L × v·h (checkpointed layer inputs) + eager attention's 16-bit mask, which their arguments hold + one layer recomputed"
            } else {
                "L × v·h (checkpointed layer inputs) + one layer recomputed"
            },
        )
    } else {
        let kept = add(&[mul(&[layers, layer]), once]);
        (kept, kept, "L × per-layer")
    };
    if bytes == u64::MAX {
        return Err(EstimateError::Overflow {
            what: "activations",
        });
    }
    let formula = format!(
        "{shape}; per layer and token: {} LayerNorm input{} v·h, {} + attention {attn_text}{} + MLP {}·v·i ({}); once: final LayerNorm, {}{}, labels, loss (transformers' {}, every tensor in 512 B blocks)",
        inputs,
        if inputs == 1 {
            " (parallel residual)"
        } else {
            "s"
        },
        if one_norm {
            "1 LayerNorm's output v·h and fp32 mean and rstd 8"
        } else {
            "2 LayerNorms' outputs 2·v·h and fp32 mean and rstd 16"
        },
        if a.dropout {
            " + dropout masks 2·h"
        } else {
            ""
        },
        act,
        if stablelm {
            "gate, up, SiLU's output and their product"
        } else if a.relu {
            "ReLU's output"
        } else if a.gelu_new {
            "gelu_new keeps its input, tanh, 0.5·x, 1 + tanh and output"
        } else {
            "the projection's and GELU's outputs"
        },
        if rotary {
            "RoPE cos/sin over the rotary width"
        } else if bloom {
            "the embeddings' LayerNorm (its input, mean and rstd)"
        } else {
            "position ids"
        },
        if a.embedding_dropout {
            ", the embedding's dropout mask"
        } else {
            ""
        },
        match (a.fused_qkv, rotary, one_norm) {
            _ if bloom => "BLOOM",
            _ if stablelm => "StableLM",
            _ if gpt_bigcode(a) => "GPTBigCode",
            (true, true, _) => "GPT-NeoX",
            (true, false, _) => "GPT-2",
            _ if falcon => "Falcon",
            (false, true, false) => "StarCoder 2",
            (false, false, _) => "OPT",
            (false, true, true) => "Phi",
        },
    );
    Ok(Activations {
        bytes,
        kept,
        formula,
        assumed_because: why,
    })
}

/// What GPT-2's, GPTBigCode's or GPT-NeoX's attention keeps for the backward in a full
/// fine-tune (see [`layernorm_activations`]): bytes over all tokens and the formula's
/// words. GPTBigCode's multi-query `c_attn` output is `h + 2·d` wide and the fused
/// kernels read its views (transformers' `sdpa_attention_forward` hands SDPA the one
/// K/V head with `enable_gqa`: no copy); its eager path repeats the K/V head
/// (`repeat_kv`) and keeps GPT-2's four copies but over one sequence (views, above).
fn layernorm_attention(
    a: &Architecture,
    (seq, batch): (u64, u64),
    value: u64,
    attention: AttentionImpl,
) -> (u64, &'static str) {
    let tokens = seq.saturating_mul(batch);
    let (heads, d) = (a.heads, a.head_dim);
    let qd = block(&[tokens, value, heads, d]);
    // GPTBigCode's multi-query `c_attn` is `h + 2·d` wide (one K/V head).
    let whole = block(&[
        tokens,
        value,
        heads.saturating_add(mul(&[2, a.kv_heads])),
        d,
    ]);
    let lse = block(&[tokens, 4, heads]);
    let lse_padded = block(&[batch, heads, seq.div_ceil(32), 32, 4]);
    let rotary = a.learned_positions == 0;
    let scores = |bytes: u64| block(&[batch, heads, seq, seq, bytes]);
    match (attention, rotary) {
        (AttentionImpl::Eager, _) => {
            let probs = if a.softmax_in_dtype {
                scores(value)
            } else {
                add(&[scores(4), scores(value)])
            };
            let dropped = if a.attn_dropout {
                add(&[
                    scores(1),
                    if a.softmax_in_dtype { scores(value) } else { 0 },
                ])
            } else {
                0
            };
            // GPTBigCode's one K/V head over one sequence: `repeat_kv`'s expand and
            // reshape merge a size-1 batch with the stride-0 heads, a view, and
            // `matmul` folds q's size-1 batch into its heads as a view too: the
            // products keep views of `c_attn`'s output (its storage once, `h + 2·d`
            // wide) instead of contiguous copies of q, k and v.
            let operands = if gpt_bigcode(a) && batch == 1 {
                add(&[whole, qd])
            } else {
                mul(&[4, qd])
            };
            (
                add(&[operands, probs, dropped]),
                match (a.softmax_in_dtype, a.attn_dropout) {
                    (true, true) => {
                        "v·4·h + (1 + 2v)·a·s (softmax and its dropped copy in the compute dtype, the mask)"
                    }
                    (true, false) => "v·4·h + v·a·s (softmax in the compute dtype)",
                    (false, true) => {
                        "v·4·h + (5 + v)·a·s (fp32 softmax, its dropped 16-bit copy, the mask)"
                    }
                    (false, false) => "v·4·h + (4 + v)·a·s",
                },
            )
        }
        (AttentionImpl::Flash | AttentionImpl::Sdpa, true) => (
            add(&[mul(&[4, qd]), lse, whole]),
            "v·(4 + 3)·h + 4·a (q, k rotated, v's copy, the output and the fused output)",
        ),
        (AttentionImpl::Efficient, true) => (
            add(&[mul(&[3, qd]), lse_padded, whole]),
            "v·(3 + 3)·h + 4·a·⌈s/32⌉·32/s (q, k rotated, the output and the fused output)",
        ),
        (AttentionImpl::Flash | AttentionImpl::Sdpa, false) => (
            add(&[qd, lse, whole]),
            if a.kv_heads == heads {
                "v·(1 + 3)·h + 4·a (the fused output and the kernel's)"
            } else {
                "v·(2·h + 2·d) + 4·a (c_attn's output, one K/V head, and the kernel's)"
            },
        ),
        (AttentionImpl::Efficient, false) => (
            add(&[qd, lse_padded, whole]),
            if a.kv_heads == heads {
                "v·(1 + 3)·h + 4·a·⌈s/32⌉·32/s (the fused output and the kernel's)"
            } else {
                "v·(2·h + 2·d) + 4·a·⌈s/32⌉·32/s (c_attn's output, one K/V head, and the kernel's)"
            },
        ),
    }
}

/// What Falcon-7B's attention keeps for the backward in a full fine-tune (see
/// [`falcon_mqa`]; `FalconAttention.forward`): `_split_heads` indexes the one K/V head
/// off the fused output (`fused_qkv[..., [-1], :]`: a copy), q and k are rotated
/// elementwise; flash and SDPA both run the SDPA path with Falcon's mask, so the
/// memory-efficient kernel keeps q, k, v, its output and its padded log-sum-exp;
/// eager multiplies contiguous copies of q, the broadcast K and V, keeps the output made
/// contiguous and a softmax in the compute dtype (`dtype=hidden_states.dtype`).
/// Falcon-40B's grouped K/V ([`falcon_grouped`]) are broadcast to every query head in
/// `_split_heads` (`torch.broadcast_to`, then `flatten(2, 3)`: a copy) and the kernels
/// see as many K/V heads as query heads (`num_kv_heads = self.num_heads` under
/// `new_decoder_architecture`): k and v are as wide as q.
fn falcon_attention(
    a: &Architecture,
    (seq, batch): (u64, u64),
    value: u64,
    attention: AttentionImpl,
) -> (u64, &'static str) {
    let tokens = seq.saturating_mul(batch);
    let kv = if falcon_grouped(a) || falcon_grouped_one_norm(a) {
        a.heads
    } else {
        a.kv_heads
    };
    let (heads, d) = (a.heads, a.head_dim);
    let qd = block(&[tokens, value, heads, d]);
    let kd = block(&[tokens, value, kv, d]);
    match attention {
        AttentionImpl::Eager => (
            add(&[mul(&[4, qd]), block(&[batch, heads, seq, seq, value])]),
            "v·4·a·d + v·a·s (Falcon's softmax in the compute dtype)",
        ),
        _ => (
            add(&[
                qd,
                qd,
                kd,
                kd,
                block(&[batch, heads, seq.div_ceil(32), 32, 4]),
            ]),
            if kv == heads && a.kv_heads != heads {
                "v·4·a·d + 4·a·⌈s/32⌉·32/s (Falcon's SDPA path with its mask: the memory-efficient kernel; K/V broadcast to every head)"
            } else {
                "v·(2·a·d + 2·k·d) + 4·a·⌈s/32⌉·32/s (Falcon's SDPA path with its mask: the memory-efficient kernel)"
            },
        ),
    }
}

/// What StarCoder 2's, Phi's and OPT's attention keeps for the backward in a full fine-tune
/// (see [`layernorm_activations`]): bytes over all tokens and the formula's words.
/// Separate q, k and v projections, rotated as the Llama-style decoder's are
/// (`apply_rotary_pos_emb`; Phi rotates the first `rotary_ndims` of each head and
/// `torch.cat`s the rest back, new tensors either way): flash and SDPA keep q and k
/// rotated, v (the projection's output), their output and an fp32 log-sum-exp per
/// head; the memory-efficient kernel repeats K/V to every head and pads the
/// log-sum-exp to 32 positions; eager (`eager_attention_forward`: `repeat_kv`, an fp32
/// softmax cast back, dropout) keeps q, the repeated K/V and the output made
/// contiguous, the fp32 softmax and its 16-bit copy (or, with dropout, the mask and
/// the dropped copy).
fn separate_attention(
    a: &Architecture,
    (seq, batch): (u64, u64),
    value: u64,
    attention: AttentionImpl,
) -> (u64, &'static str) {
    let tokens = seq.saturating_mul(batch);
    let (heads, kv, d) = (a.heads, a.kv_heads, a.head_dim);
    let qd = block(&[tokens, value, heads, d]);
    let kd = block(&[tokens, value, kv, d]);
    let scores = |bytes: u64| block(&[batch, heads, seq, seq, bytes]);
    // Phi's q is a `torch.cat` (contiguous heads-first), and the flash kernel's output
    // takes q's layout, so `attn_output.transpose(1, 2).contiguous()` (transformers'
    // `sdpa_attention_forward`, `dense`'s input) is a copy beside the kernel's own;
    // StarCoder 2's q (rotated elementwise) and OPT's (`q_proj(x) * scaling`) keep the
    // projection's token-first layout and the copy is the output itself. The memory-efficient kernel writes token-first either way.
    // StableLM's q and k are a `torch.cat` too.
    let phi = a.layer_norms == 1 || stablelm(a);
    match attention {
        AttentionImpl::Flash | AttentionImpl::Sdpa if phi => (
            add(&[qd, qd, qd, kd, kd, block(&[tokens, 4, heads])]),
            "v·(3·a·d + 2·k·d) + 4·a (the output's contiguous copy: Phi's q is a torch.cat)",
        ),
        AttentionImpl::Flash | AttentionImpl::Sdpa => (
            add(&[qd, qd, kd, kd, block(&[tokens, 4, heads])]),
            "v·(2·a·d + 2·k·d) + 4·a",
        ),
        AttentionImpl::Efficient => (
            add(&[
                mul(&[4, qd]),
                block(&[batch, heads, seq.div_ceil(32), 32, 4]),
            ]),
            "v·4·a·d + 4·a·⌈s/32⌉·32/s",
        ),
        AttentionImpl::Eager => {
            let dropped = if a.attn_dropout { scores(1) } else { 0 };
            (
                add(&[mul(&[4, qd]), scores(4), scores(value), dropped]),
                if a.attn_dropout {
                    "v·4·a·d + (5 + v)·a·s (fp32 softmax, its dropped 16-bit copy, the mask)"
                } else {
                    "v·4·a·d + (4 + v)·a·s"
                },
            )
        }
    }
}

/// Why LoRA on a LayerNorm decoder stays outside [`layernorm_frozen_base`], where it
/// does: it is derived for PEFT's LoRA as its defaults run it (adapters in a dtype wider
/// than the compute dtype, so each adapter keeps a cast copy of its input) on the
/// decoder's linear layers only, without autocast or a 4-bit base.
fn layernorm_lora_outside(value: u64, ad: &Adapters) -> Option<&'static str> {
    if ad.autocast || ad.base_4bit || ad.base_keeps_inputs {
        Some("LoRA on a LayerNorm decoder is derived without autocast or a 4-bit base only")
    } else if ad.value == value {
        Some(
            "LoRA on a LayerNorm decoder is derived with adapters wider than the compute dtype only (PEFT's fp32 adapters over a 16-bit model)",
        )
    } else if ad.targets.lm_head || ad.modules != ModulesToSave::default() {
        Some(
            "LoRA on a LayerNorm decoder is derived on the decoder's linear layers only (no adapted or trained embedding or output projection)",
        )
    } else {
        None
    }
}

/// The q/k/v projection PEFT adapts as one module: GPT-2's `c_attn`, GPT-NeoX's and
/// Falcon's `query_key_value` (any of q, k, v in the targets adapts it); StarCoder 2's,
/// Phi's and OPT's `q_proj`, `k_proj` and `v_proj` are modules of their own.
fn one_qkv_module(a: &Architecture) -> bool {
    a.fused_qkv || falcon_derived(a)
}

/// Activations of a LoRA step on a LayerNorm decoder ([`layernorm_decoder`]: GPT-2,
/// GPT-NeoX, StarCoder 2, Phi-1/1.5/2, OPT's pre-norm layers, Falcon-7B) with a frozen
/// base, derived tensor by tensor from the same code as [`layernorm_activations`]
/// (transformers 5.23 `modeling_gpt2.py`, `modeling_gpt_neox.py`,
/// `modeling_starcoder2.py`, `modeling_phi.py`, `modeling_opt.py`,
/// `modeling_falcon.py`) and PEFT 0.21's `peft/tuners/lora/layer.py` `Linear.forward`
/// (GPT-2's `Conv1D` is wrapped as a `Linear` with `fan_in_fan_out`):
/// `x = self._cast_input_dtype(x, lora_A.weight.dtype)`,
/// `result + lora_B(lora_A(dropout(x))) * scaling`. PyTorch's autograd records an
/// operator only when an input needs a gradient and keeps an operand only for the
/// gradient that reads it (`tools/autograd/derivatives.yaml`). Per layer, `T` tokens,
/// every tensor in 512 B blocks, against the full fine-tune:
/// - a frozen `nn.LayerNorm` keeps its input, mean and rstd (`native_layer_norm`'s
///   backward for the input), and its output no longer: the frozen projections
///   (`addmm`, `linear`) keep only their weights;
/// - each adapted module keeps its input cast to the adapter's dtype (`lora_A`'s weight
///   gradient; with `lora_dropout` > 0 the dropped copy and its boolean mask instead)
///   and `lora_A`'s output (`lora_B`'s weight gradient). The q/k/v projection is one
///   module where it is fused ([`one_qkv_module`]); StarCoder 2's, Phi's and OPT's
///   `q_proj`, `k_proj` and `v_proj` each cast the same norm output for themselves:
///   one copy each. The attention's output projection (`c_proj`, `dense`, `o_proj`,
///   `out_proj`) is `o`, the MLP's first linear `up`, its second `down`;
/// - the attention keeps what it keeps in the full fine-tune, less the copy of the
///   kernel's output that the output projection alone kept (`reshape(...).contiguous()`
///   or `transpose(1, 2).contiguous()` copies it where the kernel's output is laid out
///   by head: eager's, and flash's and SDPA's behind GPT-NeoX's and Phi's head-major
///   queries, a `torch.cat`; GPT-2's queries are views of the token-major fused output,
///   StarCoder 2's and OPT's keep the projection's token-first layout, Falcon's flash
///   and SDPA requests run the memory-efficient kernel, which writes token-major, so
///   there the output projection reads the kernel's output itself);
/// - the MLP keeps the activation's input (exact GELU, StarCoder 2's one fused
///   `gelu_pytorch_tanh`) or `NewGELUActivation`'s input, tanh, `0.5·x` and `1 + tanh`
///   (`gelu_new`: GPT-2, Phi): the activation's output was kept only for the frozen
///   second linear's weight; ReLU (OPT) keeps its output, which its backward
///   (`threshold_backward`) reads;
/// - the dropout masks after the output projections, where their inputs need a
///   gradient;
/// - without checkpointing the first layer's input (the frozen embeddings' sum) needs
///   no gradient: nothing before its first adapter is recorded (its first LayerNorm;
///   with a parallel residual or Phi's and Falcon's one norm also the MLP's LayerNorm
///   and, unless an MLP linear is adapted, the MLP), and the embedding dropout keeps no
///   mask;
/// - once: the final LayerNorm's input, mean and rstd, RoPE's cos and sin, Falcon's
///   boolean causal mask (its SDPA path), the labels and the loss (GPT-2's and OPT's
///   frozen position tables keep no position ids).
///
/// With checkpointing (transformers' `gradient_checkpointing_enable` with PEFT's
/// `enable_input_require_grads`, whose hook makes the embeddings' output need a
/// gradient) every layer's input does, the embedding dropout keeps its mask, and
/// the forward keeps the layers' inputs, what their arguments hold (the position ids,
/// OPT's per sequence, eager's mask), the embeddings' output where it is not the first
/// layer's input (a leaf needing a gradient, held by its `AccumulateGrad` node) and the
/// once-terms. Equal to `gpumem-agent trace` (PEFT 0.21, transformers 5.23) to the byte
/// for gpt2, santacoder, pythia-160m, starcoder2-7b, phi-1_5, phi-2, opt-125m, falcon-7b,
/// falcon-40b and Falcon2-11B's layout under
/// each kernel, with and without checkpointing, for attention and all-linear targets.
fn layernorm_frozen_base(
    a: &Architecture,
    (seq, batch): (u64, u64),
    value: u64,
    checkpointing: bool,
    attention: AttentionImpl,
    ad: &Adapters,
) -> Result<Activations, EstimateError> {
    let tokens = seq.saturating_mul(batch);
    let (h, d, i) = (a.hidden, a.head_dim, a.intermediate);
    let t = ad.targets;
    let hidden = block(&[tokens, value, h]);
    let stats = mul(&[2, block(&[tokens, 4])]);
    // BLOOM: no rotary or position table (ALiBi), its own eager attention whatever is
    // asked.
    let bloom = bloom(a);
    // Falcon-RW: ALiBi, no rotary table applied (see `layernorm_activations`).
    let rw = falcon_rw(a);
    let rotary = a.learned_positions == 0 && !bloom && !rw;
    let attention = if bloom {
        AttentionImpl::Eager
    } else {
        attention
    };
    let falcon = falcon_derived(a);
    let one_norm = a.layer_norms == 1;
    // Phi's rotated q is a `torch.cat` (head-major), as GPT-NeoX's is.
    let head_major = if a.fused_qkv {
        rotary
    } else {
        one_norm && !falcon
    };
    let (full_attn, attn_text) = if falcon {
        falcon_attention(a, (seq, batch), value, attention)
    } else if a.fused_qkv {
        layernorm_attention(a, (seq, batch), value, attention)
    } else {
        separate_attention(a, (seq, batch), value, attention)
    };
    let output_copy = match attention {
        AttentionImpl::Eager => true,
        AttentionImpl::Flash | AttentionImpl::Sdpa => head_major && !falcon,
        AttentionImpl::Efficient => false,
    };
    let qd = block(&[tokens, value, a.heads, d]);
    let attn = full_attn.saturating_sub(if output_copy { qd } else { 0 });
    let module = |on: bool, width: u64| {
        if !on {
            return 0;
        }
        add(&[
            block(&[tokens, ad.value, width]),
            if ad.dropout {
                block(&[tokens, width])
            } else {
                0
            },
            block(&[tokens, ad.value, ad.rank]),
        ])
    };
    let mask = if a.dropout { block(&[tokens, h]) } else { 0 };
    // gelu_new keeps 4 tensors of the intermediate width; an exact GELU its input and
    // ReLU its output, one.
    let act_tensors = if a.gelu_new && !a.relu { 4 } else { 1 };
    let act = mul(&[act_tensors, block(&[tokens, value, i])]);
    let width_o = a.heads.saturating_mul(d);
    let qkv = t.q || t.k || t.v;
    let qkv_kept = if one_qkv_module(a) {
        module(qkv, h)
    } else {
        add(&[module(t.q, h), module(t.k, h), module(t.v, h)])
    };
    let up = t.up || t.gate;
    let parallel = a.parallel_residual || one_norm;
    let layer = |input_grad: bool| {
        let attn_grad = input_grad || qkv;
        let out_grad = attn_grad || t.o;
        // What the MLP's LayerNorm reads needs a gradient: the residual's sum, or the
        // layer's input under a parallel residual (read by the first LayerNorm too; Phi's
        // and Falcon's one norm feeds the MLP as well).
        let (mlp_in_grad, norm2) = if parallel {
            (input_grad, if input_grad && !one_norm { stats } else { 0 })
        } else {
            (out_grad, if out_grad { add(&[hidden, stats]) } else { 0 })
        };
        let act_grad = mlp_in_grad || up;
        add(&[
            if input_grad { add(&[hidden, stats]) } else { 0 },
            qkv_kept,
            if attn_grad { attn } else { 0 },
            module(t.o, width_o),
            if out_grad { mask } else { 0 },
            norm2,
            module(up, h),
            if act_grad { act } else { 0 },
            module(t.down, i),
            if act_grad || t.down { mask } else { 0 },
        ])
    };
    let rot = if a.rotary_dims > 0 { a.rotary_dims } else { d };
    let ropes = if rotary {
        mul(&[2, block(&[seq, value, rot])])
    } else {
        0
    };
    let layers = a.layers;
    // Falcon's SDPA path keeps its boolean causal mask where any layer's attention is
    // recorded (as in `layernorm_activations`), and the checkpointed layers' arguments
    // hold it.
    // Falcon-RW's is its 16-bit ALiBi mask per sequence and head, which the
    // checkpointed layers' arguments hold whatever the kernel.
    let recorded = attention != AttentionImpl::Eager && (qkv || layers > 1);
    let falcon_mask = if rw {
        if checkpointing || recorded {
            block(&[batch, a.heads, seq, seq, value])
        } else {
            0
        }
    } else if falcon && (checkpointing && attention != AttentionImpl::Eager || recorded) {
        block(&[seq, seq])
    } else {
        0
    };
    let once = add(&[
        hidden,
        stats,
        ropes,
        falcon_mask,
        shifted_labels(seq, batch),
        1024,
    ]);
    // OPT's position ids are per sequence (`OPTDecoder.forward`: `cumsum` of the
    // attention mask); the others' one sequence's (`position_ids`, GPT-2's
    // `cache_position`).
    let opt = !a.fused_qkv && !rotary && !rw;
    let (kept, bytes, shape) = if checkpointing {
        // The checkpointed layers' arguments hold the position ids and eager attention's
        // additive mask; the embeddings' output, made a leaf that needs a gradient by
        // PEFT's hook, is held by its `AccumulateGrad` node where the first layer reads
        // another tensor (GPT-2 and OPT add the position embeddings; a dropout with
        // p > 0 copies).
        let held = add(&[
            if opt {
                block(&[tokens, 8])
            } else if bloom {
                // No position ids: ALiBi's bias (batch × heads rows, 16-bit) instead,
                // and `word_embeddings_layernorm`'s mean and rstd (its input, the
                // embeddings' output, now needs a gradient and is held below).
                add(&[block(&[batch, a.heads, seq, value]), stats])
            } else if gpt_bigcode(a) {
                // GPTBigCodeModel.forward hands its blocks no position ids (only the
                // frozen `wpe` reads them, which keeps nothing).
                0
            } else if rw {
                // Falcon-RW: the position ids, the ALiBi bias (as BLOOM's) and the
                // rotary cos and sin FalconModel computes though no layer applies
                // them; its first layer reads the embeddings' output itself.
                add(&[
                    block(&[seq, 8]),
                    block(&[batch, a.heads, seq, value]),
                    mul(&[2, block(&[seq, value, d])]),
                ])
            } else {
                block(&[seq, 8])
            },
            if (!rotary && !rw) || a.embedding_dropout {
                hidden
            } else {
                0
            },
            if attention == AttentionImpl::Eager && !rw {
                block(&[batch, seq, seq, value])
            } else {
                0
            },
        ]);
        // The embeddings' dropout mask (their output needs a gradient here).
        let embedding_mask = if a.embedding_dropout {
            block(&[tokens, h])
        } else {
            0
        };
        let kept = add(&[mul(&[layers, hidden]), once, embedding_mask, held]);
        (
            kept,
            add(&[kept, layer(true)]),
            "L × v·h (checkpointed layer inputs) + one layer recomputed",
        )
    } else {
        let kept = add(&[
            layer(false),
            mul(&[layers.saturating_sub(1), layer(true)]),
            once,
        ]);
        (
            kept,
            kept,
            "L × per-layer (the first layer keeps nothing before its first adapter)",
        )
    };
    if bytes == u64::MAX {
        return Err(EstimateError::Overflow {
            what: "activations",
        });
    }
    let family = match (a.fused_qkv, rotary, one_norm) {
        _ if bloom => "BLOOM",
        (true, true, _) => "GPT-NeoX",
        (true, false, _) => "GPT-2",
        _ if falcon => "Falcon",
        (false, true, false) => "StarCoder 2",
        (false, false, _) => "OPT",
        (false, true, true) => "Phi",
    };
    let formula = format!(
        "{shape}; frozen base, per layer and token: {} + attention {attn_text}{}{} + MLP {}·v·i ({}); each adapted module{} keeps {} and lora_A's output {}·r (PEFT's LoRA Linear.forward); once: final LayerNorm's input, mean and rstd, {}labels, loss (transformers' {family}, every tensor in 512 B blocks)",
        match (one_norm, parallel) {
            (true, _) => "1 LayerNorm input v·h and fp32 mean and rstd 8",
            (false, true) => "1 LayerNorm input (parallel residual) v·h and fp32 mean and rstd 16",
            (false, false) => "2 LayerNorm inputs v·h and fp32 mean and rstd 16",
        },
        if output_copy {
            " − v·h (the output projection's copy of the kernel's output, kept for its frozen weight only)"
        } else {
            ""
        },
        if a.dropout {
            " + dropout masks 2·h"
        } else {
            ""
        },
        act_tensors,
        if a.relu {
            "ReLU keeps its output"
        } else if a.gelu_new {
            "gelu_new keeps its input, tanh, 0.5·x and 1 + tanh"
        } else {
            "GELU keeps its input"
        },
        if one_qkv_module(a) {
            ""
        } else {
            " (q, k, v apart)"
        },
        if ad.dropout {
            format!(
                "its input cast to the adapter's {} B and dropped out (a·in), the dropout's mask (1·in)",
                ad.value
            )
        } else {
            format!("its input cast to the adapter's {} B (a·in)", ad.value)
        },
        ad.value,
        match (rotary, falcon_mask > 0) {
            (true, true) => "RoPE cos/sin, Falcon's causal mask, ",
            (true, false) => "RoPE cos/sin, ",
            (false, _) => "",
        },
    );
    Ok(Activations {
        bytes,
        kept,
        formula,
        assumed_because: None,
    })
}

/// LoRA on a LayerNorm decoder outside [`layernorm_frozen_base`] (adapters in the
/// compute dtype, autocast, a 4-bit base, an adapted or trained embedding or output
/// projection, fp32 compute, a layout outside the full fine-tune's derivation), bounded
/// from above: the full fine-tune's kept tensors (which hold every linear layer's input;
/// a frozen linear keeps none) plus what each adapter adds in PEFT's `Linear.forward`
/// (peft/tuners/lora/layer.py): its input cast to the adapters' dtype, dropout's output
/// and 1-byte mask (`lora_dropout` > 0) and the A projection's output. PEFT adapts
/// GPT-2's `c_attn` and GPT-NeoX's and Falcon's `query_key_value` as one module (any of
/// q, k, v; [`one_qkv_module`]) and StarCoder 2's, Phi's and OPT's `q_proj`, `k_proj`
/// and `v_proj` as three, each with its own copies; `o` is the attention's output
/// projection, `up` or `gate` the first MLP linear, `down` the second. The line stays
/// assumed and says why.
fn layernorm_lora_bound(
    a: &Architecture,
    (seq, batch): (u64, u64),
    value: u64,
    checkpointing: bool,
    ad: &Adapters,
    full: Activations,
) -> Activations {
    let tokens = seq.saturating_mul(batch);
    let t = ad.targets;
    let module = |input: u64| {
        let cast = if ad.value != value {
            block(&[tokens, ad.value, input])
        } else {
            0
        };
        let dropped = if ad.dropout {
            add(&[block(&[tokens, ad.value, input]), block(&[tokens, input])])
        } else {
            0
        };
        add(&[cast, dropped, block(&[tokens, ad.value, ad.rank])])
    };
    let width = a.heads.saturating_mul(a.head_dim);
    let per_layer = add(&[
        if one_qkv_module(a) {
            if t.q || t.k || t.v {
                module(a.hidden)
            } else {
                0
            }
        } else {
            mul(&[
                add(&[u64::from(t.q), u64::from(t.k), u64::from(t.v)]),
                module(a.hidden),
            ])
        },
        if t.o { module(width) } else { 0 },
        if t.up || t.gate { module(a.hidden) } else { 0 },
        if t.down { module(a.intermediate) } else { 0 },
    ]);
    // Under autocast the copies above are 16-bit (counted at the adapters' own dtype,
    // the larger) and autocast's copies of the adapters' weights are added once.
    let head = add(&[
        if t.lm_head { module(a.hidden) } else { 0 },
        ad.weight_copies,
    ]);
    // With checkpointing only the recomputed layer holds its adapters' tensors.
    let layers = if checkpointing { 1 } else { a.layers };
    let layer_part = mul(&[layers, per_layer]);
    let kept = add(&[full.kept, head, if checkpointing { 0 } else { layer_part }]);
    Activations {
        bytes: add(&[full.bytes, head, layer_part]),
        kept,
        formula: format!(
            "{}; LoRA (an upper bound): + per adapted module its input cast to the adapters' dtype, dropout's copy and mask, the A output",
            full.formula
        ),
        assumed_because: full.assumed_because.or(Some(
            "LoRA on a LayerNorm decoder is bounded from above (the full fine-tune's tensors plus each adapter's), not derived",
        )),
    }
}

/// Why fp32 compute stays outside the derivation, where it does: the Llama-style
/// full fine-tune under SDPA, the memory-efficient kernel and eager is derived for it
/// (its fp32 upcasts are the tensors themselves: the norms keep their input where
/// 16-bit compute keeps the upcast, the same bytes; SDPA runs the memory-efficient
/// kernel; eager's softmax is not copied back) and checked against traces; the other
/// layouts and LoRA were not traced in fp32, and flash-attn runs only 16-bit inputs.
fn fp32_outside(
    a: &Architecture,
    value: u64,
    attention: AttentionImpl,
    adapters: bool,
) -> Option<&'static str> {
    if value != 4 {
        return None;
    }
    if attention == AttentionImpl::Flash {
        Some(
            "flash-attn runs only fp16 and bf16: fp32 compute with flash attention is not in the derivation",
        )
    } else if adapters
        || a.moe.is_some()
        || gemma_norms(a)
        || layernorm_decoder(a)
        || a.qk_norm_whole
    {
        Some(
            "fp32 compute is derived for the Llama-style full fine-tune only (its upcasts become the tensors themselves)",
        )
    } else {
        None
    }
}

/// Why a QLoRA base prepared by PEFT's `prepare_model_for_kbit_training`
/// ([`Adapters::fp32_hidden`]) stays outside the derivation, where it does. Derived (and
/// traced to the byte through the probe's NF4 stand-in and PEFT's own preparation) for
/// transformers' Llama-style dense decoder with PEFT's fp32 adapters, no dropout and no
/// autocast: there every tensor a layer keeps is the fp32 one of fp32 compute, because
/// the hidden states never leave fp32 — the embedding and the RMSNorms' weights are
/// fp32 (`LlamaRMSNorm.forward` casts back to its input's dtype, fp32, before its fp32
/// weight), each bitsandbytes `Linear4bit` casts its input to the compute dtype and its
/// output back to the input's (`x.to(self.compute_dtype)`, `.to(inp_dtype)`: neither
/// copy kept, `MatMul4Bit` saving only the packed weight from bitsandbytes 0.43.2;
/// 0.46 and earlier compute in fp32 outright, `set_compute_type`, keeping the same),
/// PEFT's fp32 adapters read the fp32 input uncast, and RoPE's cos and sin follow the
/// hidden states' dtype (`LlamaRotaryEmbedding.forward`). Only flash-attn takes 16-bit
/// q, k and v (transformers' `fa_peft_integration_check`), so an adapted `o_proj` casts
/// the kernel's 16-bit output to fp32 for its adapter. Eager attention runs in fp32
/// throughout (its softmax's cast back to fp32 and its `p = 0` dropout are the
/// softmax's output itself): what its matmuls keep follows which of q, k and v need a
/// gradient ([`eager_kept`]). Qwen3's per-head q/k norms (`Qwen3RMSNorm`, the Llama
/// norm over each head) keep their fp32 input, already fp32, and `rsqrt`: the frozen
/// norm's terms at v = 4.
///
/// Mixtral's and Qwen3-MoE's routed layers ([`plain_moe`] without a shared expert) run
/// in fp32 too, so [`moe_kept`] at v = 4 is what they keep. Their router is a bare
/// parameter (`MixtralTopKRouter`, `Qwen3MoeTopKRouter`: `F.linear(x, self.weight)`,
/// transformers 5.23) and their experts 3-D parameters, neither an `nn.Linear`, which
/// is all bitsandbytes' quantiser replaces (`integrations/bitsandbytes.py`
/// `replace_with_bnb_linear`: `type(module) is nn.Linear`), so PEFT's preparation casts
/// both to fp32: the router's logits, its top-k weights (`.to(router_logits.dtype)`)
/// and the gathered routing weights are fp32, and transformers' `_grouped_mm`
/// (`integrations/moe.py`) casts its input to the weights' dtype, a no-op, before
/// `torch.nn.functional.grouped_mm` — on CUDA an fp32 grouped matmul runs
/// `_grouped_mm_fallback`, a loop of `mm` over the groups, its inputs validated as
/// fp32, bf16 or fp16 (torch `aten/src/ATen/native/GroupedMMUtils.h`
/// `_grouped_mm_validate_inputs`), into an output of the operands' dtype; its autograd
/// formula is the bf16 kernel's (`tools/autograd/derivatives.yaml`: the input's
/// gradient reads the weights, the weights' the input, which frozen experts do not
/// keep), so what the backward keeps is too. Traced with q/k
/// norms (Qwen3-30B-A3B's layers) under flash, SDPA and eager, q,v and q,k,v,o adapted,
/// with and without checkpointing. Qwen2-MoE's shared expert and its gate are
/// `nn.Linear`s, so 4-bit (`Qwen2MoeSparseMoeBlock`: `shared_expert` a `Qwen2MoeMLP`,
/// `shared_expert_gate` an `nn.Linear(h, 1)`; transformers' quantiser skips only the
/// output embedding and tied weights, `quantizers/base.py` `get_keys_to_not_convert`):
/// each casts its fp32 input to the compute dtype and its output back, so the shared
/// expert keeps fp32 `gate`, `act(gate)` and `up`, the sigmoid its fp32 output and the
/// product the fp32 down output — [`moe_kept`]'s shared terms at v = 4 (traced, flash,
/// SDPA and eager). LoRA on the experts themselves (PEFT's `ParamWrapper`) stays
/// outside, as without the preparation; so do the layouts below, each for a reason of
/// its own: whole-projection q/k norms (OLMo-2's, OLMoE's, whose fp32 weight product is
/// not the per-head norm's), a fused qkv projection (Phi-3's, not derived for LoRA over
/// a 16-bit base either), Gemma's fp32 `1 + w` norms and LayerNorm decoders (their
/// 16-bit LoRA derivations not traced over fp32 hidden states), routers of other kinds
/// (DeepSeek's, gpt-oss's, latent experts), autocast (what it casts between the fp32
/// hidden states and the 16-bit linears), and dropout, 16-bit adapters, an adapted or
/// trained output projection or embedding and bitsandbytes 0.43.1's 4-bit linears (not
/// traced).
fn kbit_outside(a: &Architecture, ad: &Adapters) -> Option<&'static str> {
    if !ad.fp32_hidden {
        None
    } else if a.moe.is_some_and(|m| !plain_moe(a, &m))
        || a.mla.is_some()
        || a.fused_qkv
        || a.qk_norm_whole
        || gemma_norms(a)
        || layernorm_decoder(a)
        || gpt_oss(a)
    {
        Some(
            "fp32 embeddings and norms (PEFT's prepare_model_for_kbit_training) make the hidden states fp32: derived for the Llama-style dense decoder (per-head q/k norms included) and Mixtral's, Qwen3-MoE's and Qwen2-MoE's experts only (not whole-projection q/k norms, fused projections, Gemma's norms, LayerNorm layers or other routers)",
        )
    } else if ad.autocast {
        Some(
            "fp32 embeddings and norms (PEFT's prepare_model_for_kbit_training) under autocast: what autocast casts between the fp32 hidden states and the 16-bit linears is not in the derivation",
        )
    } else if ad.dropout
        || ad.value != 4
        || ad.base_keeps_inputs
        || ad.targets.lm_head
        || ad.modules != ModulesToSave::default()
    {
        Some(
            "fp32 embeddings and norms (PEFT's prepare_model_for_kbit_training) are derived with PEFT's fp32 adapters without dropout on the decoder's projections, over bitsandbytes 0.43.2 or later (not traced with dropout, 16-bit adapters, an adapted or trained output projection or embedding, or bitsandbytes 0.43.1's 4-bit linears)",
        )
    } else {
        None
    }
}

/// Gemma 2's and Gemma 3's decoder (four fp32 norms a layer, no per-layer scalars or
/// global layers of another shape; Gemma 3 with q/k norms): its norms are derived
/// (`decoder_activations`).
fn gemma_norms(a: &Architecture) -> bool {
    a.layer_norms == 4 && !a.qk_norm_whole && a.layer_scalars == 0 && a.global_attn.is_none()
}

/// Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's vision-language models (Qwen's tower:
/// patches merged after the encoder, no fixed image side, no pooling — `VisionTower`):
/// their language models are Qwen2's and Qwen3's layers under multimodal RoPE
/// (transformers 5.23 `models/qwen2_vl/modeling_qwen2_vl.py` `Qwen2VLTextModel`,
/// `models/qwen2_5_vl/modeling_qwen2_5_vl.py` `Qwen2_5_VLTextModel`,
/// `models/qwen3_vl/modeling_qwen3_vl.py` `Qwen3VLTextModel`).
/// Qwen3.5's tower is the same, beside layers of its own (their mixer says why).
fn qwen_vl(a: &Architecture) -> bool {
    a.vision
        .is_some_and(|t| t.merge > 0 && t.pool == 0 && t.image == 0)
}

/// A mixture of experts as transformers 5.23 runs Mixtral's, Qwen3-MoE's and
/// Qwen2-MoE's: a softmax top-k router without bias, gated routed experts without
/// biases, no latent projection, per-head q/k norms if any (OLMoE's whole-projection
/// norms keep other tensors: +8 % against its trace), and either no shared expert or
/// Qwen2-MoE's one shared expert scaled by its sigmoid gate — what [`moe_kept`]
/// derives. A shared expert without a gate (DeepSeek's, Llama-4's) comes with routers
/// of other kinds (sigmoid scores, correction biases, MLA beside it) and stays outside
/// (Llama-4's block has a derivation of its own, [`llama4_prefill`]).
fn plain_moe(a: &Architecture, m: &Moe) -> bool {
    ((m.shared_experts == 0 && !m.shared_gate) || (m.shared_experts == 1 && m.shared_gate))
        && !m.router_bias
        && !m.correction_bias
        && m.latent == 0
        && !a.mlp_bias
        && !a.qk_norm_whole
}

/// DeepSeek-V2's and V3's layout as transformers 5.23 runs them
/// (`models/deepseek_v2/modeling_deepseek_v2.py`,
/// `models/deepseek_v3/modeling_deepseek_v3.py`): their multi-head latent attention
/// (`DeepseekV2Attention`, `DeepseekV3Attention`) with value heads narrower than the
/// query heads (every DeepSeek config: 128 against 192, which makes flash-attn pad the
/// values and SDPA run the memory-efficient kernel), no attention or MLP biases, and
/// their MoE blocks (`DeepseekV2Moe`, `DeepseekV3MoE`): the routed experts, ungated
/// shared experts and the router — V2's `DeepseekV2TopkRouter` (softmax scores, greedy
/// or group-limited top-k) or, where the fp32 correction bias marks it, V3's
/// `DeepseekV3TopkRouter` (sigmoid scores, the bias, group-limited choice, normalised
/// weights) — what [`mla_attention`] and [`moe_kept`] derive. Outside: DeepSeek-V3.2's
/// and GLM-5's indexer beside the attention, GLM-4.7-Flash's value heads as wide as its
/// query heads (its router is V3's code), Kimi-K2's own code.
fn deepseek_v2(a: &Architecture) -> bool {
    match (a.moe, a.mla) {
        (Some(m), Some(l)) => {
            m.shared_experts > 0
                && !m.shared_gate
                && !m.router_bias
                // Kimi-K2 runs its own code (trust_remote_code), not transformers'
                // DeepseekV3 classes: its family counts no rotary buffers for it.
                && (!m.correction_bias || a.rope_tables > 0)
                && a.indexer.is_none()
                && m.latent == 0
                && !m.output_bias
                && !a.mlp_bias
                && !a.qkv_bias
                && !a.o_bias
                && !a.qk_norm
                && !a.qk_norm_whole
                && !a.fused_qkv
                && l.v_head_dim < l.qk_nope_dim.saturating_add(l.qk_rope_dim)
        }
        _ => false,
    }
}

/// gpt-oss's layout as transformers 5.23 runs it (`models/gpt_oss/modeling_gpt_oss.py`):
/// `GptOssAttention` with a learned sink logit per head (`sinks`), biases on q/k/v/o or
/// none, sliding-window layers alternating with full ones; `GptOssMLP` on every layer:
/// `GptOssTopKRouter` (a linear with bias, top-k over the logits, a softmax over the k
/// chosen) and `GptOssExperts` with biases on the fused gate/up and down projections and
/// its clamped SwiGLU (`_apply_gate`: `alpha`, `limit`); no shared expert, no q/k norms —
/// what [`gpt_oss_activations`] and [`gpt_oss_frozen_base`] derive. The sinks mark it: no other family has them.
fn gpt_oss(a: &Architecture) -> bool {
    match a.moe {
        Some(m) => {
            a.attn_sinks
                && m.router_bias
                && a.mlp_bias
                && m.shared_experts == 0
                && !m.shared_gate
                && !m.correction_bias
                && m.latent == 0
                && !m.output_bias
                && !m.group_limited
                && m.dense_layers == 0
                && m.every <= 1
                && a.mla.is_none()
                && a.indexer.is_none()
                && a.mixer.is_none()
                && a.global_attn.is_none()
                && !a.qk_norm
                && !a.qk_norm_whole
                && !a.fused_qkv
                && !a.falcon_layer
                && !layernorm_decoder(a)
                && !gemma_norms(a)
                && Architecture {
                    attn_sinks: Architecture::BASE.attn_sinks,
                    ..*a
                }
                .underived()
                .is_none()
        }
        None => false,
    }
}

/// Why a full fine-tune of gpt-oss under `attention` stays outside
/// [`gpt_oss_activations`] (transformers 5.23, `GptOssPreTrainedModel`):
/// - flash: `_compatible_flash_implementations` sends a request for flash attention to
///   `kernels-community/vllm-flash-attn3`, the kernel that takes the sinks (`s_aux`,
///   `modeling_flash_attention_utils.py` `_process_flash_attention_kwargs`); it has a
///   forward with sinks and no backward
///   (https://github.com/Dao-AILab/flash-attention/issues/1797,
///   https://github.com/Dao-AILab/flash-attention/issues/1895), so a fine-tune does not
///   run under it;
/// - the memory-efficient kernel is PyTorch's SDPA, which gpt-oss refuses
///   (`_supports_sdpa = False`: `from_pretrained(…, attn_implementation="sdpa")` raises).
///
/// SDPA itself is derived as eager: with no implementation named transformers runs
/// gpt-oss eager, as [`gpt_oss_activations`] says.
fn gpt_oss_outside(attention: AttentionImpl) -> Option<&'static str> {
    match attention {
        AttentionImpl::Flash => Some(
            "gpt-oss does not train under flash attention: transformers 5.23 loads kernels-community/vllm-flash-attn3 for its sinks, which has no backward with sinks (https://github.com/Dao-AILab/flash-attention/issues/1797); --attention eager is what a fine-tune runs",
        ),
        AttentionImpl::Efficient => Some(
            "gpt-oss does not run the memory-efficient kernel: transformers 5.23 refuses SDPA for it (GptOssPreTrainedModel._supports_sdpa false); --attention eager is what it runs when none is named",
        ),
        AttentionImpl::Eager | AttentionImpl::Sdpa => None,
    }
}

/// Activations of a full fine-tune of gpt-oss in 16-bit compute, tensor by tensor from
/// transformers 5.23 `models/gpt_oss/modeling_gpt_oss.py` (the bf16 model its config
/// builds: an MXFP4 checkpoint's experts are dequantised to bf16 to train, and the
/// trace, which builds the model from the config without its `quantization_config`,
/// covers that bf16 model only) and equal to `gpumem-agent trace` to the byte. Per
/// layer, with `T` tokens, `S = T·k` token–expert pairs, `e` the expert width, `n`
/// heads of width `d`, `v` bytes a value, every tensor in 512 B blocks:
/// - each `GptOssRMSNorm` keeps its fp32 upcast, `rsqrt`, the fp32 normalised value
///   (the weight multiplies it before the cast back, so its gradient reads the fp32
///   value; `from_pretrained` keeps the weight itself in fp32 by
///   `_keep_in_fp32_modules`, the same tensors) and its 16-bit output, which the
///   projections and the router keep: (8 + v)·h + 4;
/// - `GptOssAttention` under `eager_attention_forward` (SDPA asked is eager: gpt-oss
///   refuses SDPA, `_supports_sdpa = False`, and transformers runs eager when none is
///   named): the query after `_apply_rotary_emb` (its `torch.cat`), the keys and values
///   `repeat_kv` copies to every head (where there are as many K/V heads as query heads,
///   the key's `cat` and `v_proj`'s output, the same bytes), the scores with the sinks
///   appended (`torch.cat([attn_weights, sinks])`, s + 1 columns), whose softmax in the
///   compute dtype is kept (`probs`, of which the scores are a view), the int64 indices
///   of the row maximum subtracted before it, and the output made contiguous for
///   `o_proj`: v·4·n·d + v·n·(s + 1) + 8·n per token; the sinks' expansion keeps
///   nothing; the window changes no tensor's size (the mask is tokens² either way);
/// - `GptOssTopKRouter.forward`: top-k's int64 indices over the logits (the logits are
///   not kept) and the softmax over the k values in the compute dtype: 8·k + v·k;
/// - `grouped_mm_experts_forward` (transformers 5.23 `integrations/moe.py`, the default
///   `experts_implementation`, `has_bias` and `is_transposed` from
///   `use_experts_implementation` on `GptOssExperts`): the sort's values and
///   permutation, `perm // k` and the inverse permutation (int64, 4·8·S), the groups'
///   int32 offsets (4·E) and the gathered routing weights (v·S); per pair the gathered
///   input (v·h), the fused gate/up output, to which the gathered bias is added in
///   place (2·v·e; the bias gather is not kept), `_apply_gate`'s clamped gate, the
///   sigmoid's output, `up + 1`, `glu` and their product (5·v·e; the clamped `up` and
///   `gate·alpha` are not kept) and the down output the routing weights multiply (v·h):
///   v·(2·h + 7·e);
/// - once: the final norm, RoPE's cos and sin over half the head (`_apply_rotary_emb`
///   multiplies each half: seq × d/2 each), the shifted labels (int64) and the loss.
///
/// With full activation checkpointing each layer's input (v·h per token), the
/// once-terms, the position ids and, under eager attention, one additive mask per layer
/// type present (`create_causal_mask`, `create_sliding_window_causal_mask`: b·s²·v
/// each), which the layers' arguments hold, and one layer recomputed.
fn gpt_oss_activations(
    a: &Architecture,
    m: &Moe,
    (seq, batch): (u64, u64),
    value: u64,
    checkpointing: bool,
) -> Result<Activations, EstimateError> {
    let tokens = seq.saturating_mul(batch);
    let pairs = tokens.saturating_mul(m.active);
    let (h, heads, d, e) = (a.hidden, a.heads, a.head_dim, m.expert_intermediate);
    let norm = add(&[
        mul(&[2, block(&[tokens, 4, h])]),
        block(&[tokens, value, h]),
        block(&[tokens, 4]),
    ]);
    let qd = block(&[tokens, value, heads, d]);
    let attention = add(&[
        mul(&[4, qd]),
        block(&[batch, heads, seq, seq.saturating_add(1), value]),
        block(&[batch, heads, seq, 8]),
    ]);
    let router = add(&[
        block(&[tokens, 8, m.active]),
        block(&[tokens, value, m.active]),
    ]);
    let dispatch = add(&[
        mul(&[4, block(&[pairs, 8])]),
        block(&[m.experts, 4]),
        block(&[pairs, value]),
    ]);
    let experts = add(&[
        mul(&[2, block(&[pairs, value, h])]),
        block(&[pairs, value, 2, e]),
        mul(&[5, block(&[pairs, value, e])]),
    ]);
    let layer = add(&[norm, norm, attention, router, dispatch, experts]);
    let once = add(&[
        norm,
        mul(&[2, block(&[seq, value, d.div_ceil(2)])]),
        shifted_labels(seq, batch),
        1024,
    ]);
    let layers = a.layers;
    let (kept, bytes, shape) = if checkpointing {
        let masks = mul(&[layers.min(2), block(&[batch, seq, seq, value])]);
        let kept = add(&[
            mul(&[layers, block(&[tokens, value, h])]),
            once,
            block(&[seq, 8]),
            masks,
        ]);
        (
            kept,
            add(&[kept, layer]),
            "L × v·h (checkpointed layer inputs) + the position ids and eager attention's 16-bit mask per layer type (sliding, full), which their arguments hold + one layer recomputed",
        )
    } else {
        let kept = add(&[mul(&[layers, layer]), once]);
        (kept, kept, "L × per-layer")
    };
    if bytes == u64::MAX {
        return Err(EstimateError::Overflow {
            what: "activations",
        });
    }
    Ok(Activations {
        bytes,
        kept,
        formula: format!(
            "{shape}; per layer and token: 2 RMSNorms (8 + v)·h (the normalised value in fp32) + eager attention with sinks v·4·a·d + v·a·(s + 1) + 8·a (SDPA is refused for gpt-oss: eager runs) + the router's top-k 8·k + v·k + per pair the gathered input, gate/up, the clamped SwiGLU's five tensors and the down output v·(2·h + 7·e) and the dispatch's int64 permutations; once: final norm, RoPE cos/sin over half a head, labels, loss (transformers' gpt-oss with grouped_mm experts, every tensor in 512 B blocks)"
        ),
        assumed_because: None,
    })
}

/// Why LoRA on gpt-oss stays outside [`gpt_oss_frozen_base`], where it does:
/// - MLP targets: PEFT adapts no linear in gpt-oss's MLP. `GptOssExperts` holds
///   `gate_up_proj` and `down_proj` as 3-D `nn.Parameter`s and `GptOssTopKRouter` its
///   weight and bias as bare parameters (transformers 5.23 `modeling_gpt_oss.py`), none an
///   `nn.Linear`, so PEFT's `all-linear` adapts q, k, v and o there
///   (peft 0.21.2 `tuners/tuners_utils.py` `_maybe_include_all_linear_layers` selects
///   `nn.Linear` and `Conv1D`). The experts are adapted only through `target_parameters`
///   (peft 0.21.2 `tuners/lora/layer.py` `ParamWrapper`), which `--lora-targets` does not
///   name; `all` (which counts gate, up and down adapters on every expert) stays assumed;
/// - QLoRA and autocast were not traced over gpt-oss's eager attention, router and
///   grouped experts.
fn gpt_oss_lora_outside(ad: &Adapters) -> Option<&'static str> {
    let t = ad.targets;
    if t.gate || t.up || t.down {
        Some(
            "LoRA on gpt-oss's MLP is not in the derivation: PEFT adapts no linear there (GptOssExperts' gate_up_proj and down_proj are 3-D parameters, the router no nn.Linear), so PEFT's all-linear adapts q, k, v, o (--lora-targets q,k,v,o); adapters on the experts' parameters (PEFT's target_parameters, ParamWrapper) are not among gpumem's targets",
        )
    } else if ad.base_4bit || ad.base_keeps_inputs {
        Some(
            "QLoRA on gpt-oss is not in the derivation (its 4-bit attention projections beside bf16 experts were not traced)",
        )
    } else if ad.autocast {
        Some(
            "LoRA on gpt-oss under autocast is not in the derivation (autocast's casts over its eager attention, router and grouped experts were not traced)",
        )
    } else {
        None
    }
}

/// Activations of LoRA on a frozen gpt-oss in 16-bit compute, tensor by tensor from
/// transformers 5.23 `models/gpt_oss/modeling_gpt_oss.py` and `integrations/moe.py`
/// (`grouped_mm_experts_forward`) with PEFT 0.21.2's adapters (`tuners/lora/layer.py`,
/// `Linear.forward`: `x = self._cast_input_dtype(x, lora_A.weight.dtype)`, then
/// `lora_B(lora_A(dropout(x)))`), and equal to `gpumem-agent trace` to the byte. PEFT
/// freezes every base parameter, the sinks, the router and the experts among them, so
/// autograd keeps an operand only where an input's gradient needs it — less than
/// [`gpt_oss_activations`] keeps. Per layer whose input needs a gradient, with `T`
/// tokens, `S = T·k` token–expert pairs, `e` the expert width, `n` heads of width `d`,
/// `v` bytes a value, every tensor in 512 B blocks:
/// - each `GptOssRMSNorm` keeps its fp32 upcast and `rsqrt` (4·h + 4): the weight's
///   product keeps the frozen weight, not the normalised value, and no frozen
///   projection keeps the output;
/// - eager attention keeps the query after RoPE (for the keys' gradient), the keys and
///   values `repeat_kv` copies, the softmax over the scores with the sinks appended
///   (v·n·(s + 1)) and the int64 indices of its row maximum, but not the output made
///   contiguous, which only `o_proj`'s weight would read: v·3·n·d + v·n·(s + 1) + 8·n;
/// - the router keeps top-k's indices and its softmax (8·k + v·k), its frozen linear
///   nothing;
/// - the dispatch keeps the sort's permutation, `perm // k` and the inverse permutation
///   (int64, 3·8·S: the sorted expert ids index only the frozen biases), the groups'
///   offsets (4·E) and the gathered routing weights (v·S); per pair the experts keep the
///   fused gate/up output (the clamps read it in place; 2·v·e), `_apply_gate`'s clamped
///   gate, sigmoid, `up + 1` and `glu` (4·v·e: their product is read only by the frozen
///   down projection's weight) and the down output (v·h), not the gathered input:
///   v·(h + 6·e).
///
/// Each adapted projection keeps what `lora_A` and `lora_B` read: the input cast to the
/// adapters' dtype (a·in; PEFT's fp32 adapters over a 16-bit model) or, under a dropout,
/// its dropped-out copy, with the dropout's 1-byte mask only where the input needs a
/// gradient (autograd records the dropout only then); adapters in the compute dtype with
/// no dropout read the projection's input itself (the first norm's output once for q, k,
/// v; the attention's contiguous output for o); and `lora_A`'s output (a·r).
///
/// Without checkpointing the first layer's input (the frozen embedding's output) needs
/// no gradient: its first norm is not recorded, its attention keeps only what the
/// adapted projections' gradients need (an adapted q keeps the repeated keys, an adapted
/// k the query; either keeps the softmax, its maximum's indices and the repeated values;
/// an adapted v alone only the softmax, which the product with the values keeps), and
/// its MLP half is recorded once any attention projection is adapted. RoPE's cos and
/// sin are kept where a query or key needs a gradient. Once: the final norm's upcast and
/// `rsqrt`, the shifted labels and the loss (and an adapted or trained `lm_head`'s
/// input). With checkpointing (PEFT's `enable_input_require_grads` gives every layer's
/// input a gradient) what [`gpt_oss_activations`] holds but the final norm's frozen
/// terms, and one layer recomputed.
fn gpt_oss_frozen_base(
    a: &Architecture,
    m: &Moe,
    (seq, batch): (u64, u64),
    value: u64,
    checkpointing: bool,
    ad: &Adapters,
) -> Result<Activations, EstimateError> {
    let tokens = seq.saturating_mul(batch);
    let pairs = tokens.saturating_mul(m.active);
    let (h, heads, d, e) = (a.hidden, a.heads, a.head_dim, m.expert_intermediate);
    let t = ad.targets;
    let norm = add(&[block(&[tokens, 4, h]), block(&[tokens, 4])]);
    let qd = block(&[tokens, value, heads, d]);
    let probs = block(&[batch, heads, seq, seq.saturating_add(1), value]);
    let row_max = block(&[batch, heads, seq, 8]);
    // An adapter keeps an input of its own when it casts it or drops it out (autocast
    // and 4-bit bases are outside: `gpt_oss_lora_outside`).
    let own = ad.value != value || ad.dropout;
    let module = |on: bool, width: u64, input_grad: bool| {
        if !on {
            return 0;
        }
        add(&[
            if own {
                block(&[tokens, ad.value, width])
            } else {
                0
            },
            if ad.dropout && input_grad {
                block(&[tokens, width])
            } else {
                0
            },
            block(&[tokens, ad.value, ad.rank]),
        ])
    };
    let mlp = add(&[
        norm,
        block(&[tokens, 8, m.active]),
        block(&[tokens, value, m.active]),
        mul(&[3, block(&[pairs, 8])]),
        block(&[m.experts, 4]),
        block(&[pairs, value]),
        block(&[pairs, value, 2, e]),
        mul(&[4, block(&[pairs, value, e])]),
        block(&[pairs, value, h]),
    ]);
    let layer = |input_grad: bool| {
        let (q_grad, k_grad, v_grad) = (input_grad || t.q, input_grad || t.k, input_grad || t.v);
        let scores_grad = q_grad || k_grad;
        add(&[
            if input_grad { norm } else { 0 },
            if !own && (t.q || t.k || t.v) {
                block(&[tokens, value, h])
            } else {
                0
            },
            module(t.q, h, input_grad),
            module(t.k, h, input_grad),
            module(t.v, h, input_grad),
            if k_grad { qd } else { 0 },
            if q_grad { qd } else { 0 },
            if scores_grad {
                add(&[probs, row_max, qd])
            } else if v_grad {
                probs
            } else {
                0
            },
            module(t.o, heads.saturating_mul(d), q_grad || k_grad || v_grad),
            if t.o && !own { qd } else { 0 },
            if input_grad || t.attention() { mlp } else { 0 },
        ])
    };
    let layers = a.layers;
    let rope = checkpointing || layers > 1 || ad.modules.embed || t.q || t.k;
    let once = add(&[
        norm,
        if rope {
            mul(&[2, block(&[seq, value, d.div_ceil(2)])])
        } else {
            0
        },
        shifted_labels(seq, batch),
        1024,
        if (t.lm_head && !own) || ad.modules.lm_head {
            block(&[tokens, value, h])
        } else {
            0
        },
        module(t.lm_head, h, true),
    ]);
    let (kept, bytes, shape) = if checkpointing {
        let masks = mul(&[layers.min(2), block(&[batch, seq, seq, value])]);
        let kept = add(&[
            mul(&[layers, block(&[tokens, value, h])]),
            once,
            block(&[seq, 8]),
            masks,
        ]);
        (
            kept,
            add(&[kept, layer(true)]),
            "L × v·h (checkpointed layer inputs) + the position ids and eager attention's 16-bit mask per layer type (sliding, full), which their arguments hold + one layer recomputed",
        )
    } else {
        let kept = add(&[
            layer(ad.modules.embed),
            mul(&[layers.saturating_sub(1), layer(true)]),
            once,
        ]);
        (
            kept,
            kept,
            "L × per-layer (the first layer keeps only what its adapters' gradients need)",
        )
    };
    if bytes == u64::MAX {
        return Err(EstimateError::Overflow {
            what: "activations",
        });
    }
    let adapter_input = match (ad.value != value, ad.dropout) {
        (true, true) => format!(
            "its input cast to the adapter's {} B and dropped out (a·in), the dropout's mask (1·in) where the input needs a gradient",
            ad.value
        ),
        (true, false) => format!("its input cast to the adapter's {} B (a·in)", ad.value),
        (false, true) => {
            "its dropped-out input (v·in) and the dropout's mask (1·in) where the input needs a gradient".into()
        }
        (false, false) => "the projection's input (v·in, once per tensor read)".into(),
    };
    Ok(Activations {
        bytes,
        kept,
        formula: format!(
            "{shape}; frozen base, per layer and token: 2 RMSNorms keep their fp32 upcast 4·h + eager attention with sinks v·3·n·d + v·n·(s + 1) + 8·n (SDPA is refused for gpt-oss: eager runs) + the router's top-k 8·k + v·k + per pair gate/up, the clamped SwiGLU's four kept tensors and the down output v·(h + 6·e) and the dispatch's int64 permutations; each adapted projection keeps {adapter_input} and lora_A's output a·r (PEFT's LoRA Linear.forward); once: final norm, RoPE cos/sin over half a head, labels, loss (transformers' gpt-oss with grouped_mm experts, every tensor in 512 B blocks)"
        ),
        assumed_because: None,
    })
}

/// What DeepSeek-V2's multi-head latent attention keeps per layer for the backward
/// (`DeepseekV2Attention.forward`, transformers 5.23
/// `models/deepseek_v2/modeling_deepseek_v2.py`), with `n` heads, `dq` = nope + rope
/// query/key width, `dv` the value width, `r` the KV latent's rank, `rq` the query's
/// (0: a plain `q_proj`), `T` tokens and `v` bytes a value, every tensor in 512 B
/// blocks; its input is the first norm's output, counted with the norms:
/// - `q_a_layernorm` (where `rq` > 0) and `kv_a_layernorm` keep what an RMSNorm keeps
///   over their width — the fp32 upcast, `rsqrt`, the normalised value and the output
///   that `q_b_proj` / `kv_b_proj` keep for their weights' gradients: (4 + 2v)·width;
///   the projections' own outputs are split and copied, not kept;
/// - `apply_rotary_emb` multiplies the complex fp32 copies of the rotary halves by the
///   position embedding, which needs no gradient: it keeps that embedding (once per
///   model) and nothing per layer;
/// - `torch.cat((q_nope, q_pe))` (the query, v·n·dq) and `expand_kv`'s `new_empty` key
///   (v·n·dq), which the kernel keeps;
/// - flash-attn (transformers pads the values to `dq` with zeros for one head size):
///   the padded values and padded output (2·v·n·dq), the fp32 log-sum-exp (4·n) and
///   the output cut back to `dv` made contiguous for `o_proj` (v·n·dv);
/// - SDPA and the memory-efficient kernel (PyTorch's flash kernel needs one head size,
///   `sdp_utils.cpp` `check_head_dim_size_flash`): the values are a view of
///   `kv_b_proj`'s output, which stays whole (v·n·(nope + dv)), the output (v·n·dv, the
///   layout `o_proj` reads) and the log-sum-exp padded to 32 positions;
/// - eager (`eager_attention_forward`): the fp32 softmax and its `v` copy, (4 + v)·n·s,
///   the values made contiguous for the second matmul (v·n·dv) and the output made
///   contiguous (v·n·dv).
fn mla_attention(
    l: &Mla,
    heads: u64,
    (seq, batch): (u64, u64),
    value: u64,
    attention: AttentionImpl,
) -> (u64, &'static str) {
    let tokens = seq.saturating_mul(batch);
    let dq = l.qk_nope_dim.saturating_add(l.qk_rope_dim);
    let dv = l.v_head_dim;
    let norm = |width: u64| {
        add(&[
            block(&[tokens, 4, width]),
            block(&[tokens, 4]),
            mul(&[2, block(&[tokens, value, width])]),
        ])
    };
    let q_norm = if l.q_lora_rank > 0 {
        norm(l.q_lora_rank)
    } else {
        0
    };
    let qk = block(&[tokens, value, heads, dq]);
    let out = block(&[tokens, value, heads, dv]);
    let (kernel, text) = match attention {
        AttentionImpl::Flash => (
            add(&[qk, qk, block(&[tokens, 4, heads]), out]),
            "latent norms (4 + 2v)·(r + r_q) + q, k, padded v and output v·4·n·d_qk + 4·n + the output cut back v·n·d_v (MLA under flash-attn)",
        ),
        AttentionImpl::Sdpa | AttentionImpl::Efficient => (
            add(&[
                block(&[tokens, value, heads, l.qk_nope_dim.saturating_add(dv)]),
                out,
                block(&[batch, heads, seq.div_ceil(32), 32, 4]),
            ]),
            "latent norms (4 + 2v)·(r + r_q) + q, k v·2·n·d_qk + kv_b's output v·n·(d_nope + d_v) + the output v·n·d_v + 4·n·⌈s/32⌉·32/s (MLA under the memory-efficient kernel)",
        ),
        AttentionImpl::Eager => (
            add(&[
                block(&[batch, heads, seq, seq, 4]),
                if value == 4 {
                    0
                } else {
                    block(&[batch, heads, seq, seq, value])
                },
                out,
                out,
            ]),
            "latent norms (4 + 2v)·(r + r_q) + q, k v·2·n·d_qk + (4 + v)·n·s + the values' and the output's copies v·2·n·d_v (MLA under eager)",
        ),
    };
    (add(&[q_norm, norm(l.kv_lora_rank), qk, qk, kernel]), text)
}

/// What one MoE layer's experts and router keep for the backward, per
/// `grouped_mm_experts_forward` (transformers 5.23 `integrations/moe.py`, the default
/// `experts_implementation` on CUDA from compute capability 8.0, and on the meta
/// device) after `MixtralTopKRouter.forward` (`modeling_mixtral.py`). With `T` tokens
/// routed to `k` experts each, `S = T·k` token–expert pairs, `e` the expert's
/// intermediate size, every tensor in 512 B blocks:
/// - the router: softmax's fp32 output (4·E per token), top-k's int64 indices and its
///   fp32 values and their sum for the normalisation (12·k + 4 per token; DeepSeek-V2's
///   `DeepseekV2TopkRouter.forward` (`deepseek`) runs the linear on fp32 copies of its
///   input and weight, which it keeps (4·h per token, 4·E·h), keeps the softmax and
///   the indices, multiplies the values by `routed_scaling_factor` (a Python float:
///   nothing kept) and does not normalise; its group-limited top-k keeps the boolean
///   mask `masked_fill` reads, E per token, and nothing of the groups' maxima and
///   top-k, which lead only to the mask. DeepSeek-V3's `DeepseekV3TopkRouter.forward`
///   (the correction bias marks it) keeps the same fp32 copies, its sigmoid's fp32
///   output (4·E), top-k's indices, and for `norm_topk_prob` the sum (4) and, as the
///   division is in place, a copy of the gathered weights (4·k): Mixtral's terms; its
///   group-limited choice (the bias added, the groups' top-2 sums, the mask) leads only
///   to the indices and keeps nothing; a router
///   that does not normalise, as Qwen2-MoE's under its default `norm_topk_prob` false
///   and OLMoE's, keeps `T·(4·k + 4)` bytes less: counted, the safe side, since the
///   architecture does not say whether it normalises);
/// - the dispatch: the sort's permutation, the token index it gathers by and the
///   inverse permutation (int64, 3·8·S), the groups' int32 offsets (4·E) and the
///   gathered routing weights (fp32, 4·S; v·S where the router casts its scores to
///   the compute dtype: `Qwen2MoeTopKRouter.forward`, the router of the layout with a
///   gated shared expert, always does; Qwen3-MoE's and OLMoE's do too, which keeps
///   their figure `2·S` above);
/// - the experts: the fused gate/up output (SiLU's input and `up` are views of it,
///   2·v·e per pair), `act(gate)` (v·e) and the down projection's output, which the
///   routing weights' product keeps (v·h); with trainable experts also the gathered
///   input and the product `act(gate)·up`, which the grouped matmuls keep for their
///   weights' gradients (v·h + v·e);
/// - Qwen2-MoE's shared expert (`Qwen2MoeSparseMoeBlock.forward`,
///   `models/qwen2_moe/modeling_qwen2_moe.py`): a `Qwen2MoeMLP` of width `s` over every
///   token keeps what the dense gated MLP keeps — `gate`, `act(gate)`, `up` and, when
///   its weights train, their product (4·v·s, frozen 3·v·s); its input is the second
///   norm's output, kept already. `sigmoid(shared_expert_gate(x)) · shared` keeps the
///   sigmoid's output (v per token, its own block), which its backward and the
///   product's read, and the shared expert's down output (v·h), the product's other
///   operand; the sum with the routed experts' output keeps nothing. DeepSeek-V2's
///   shared experts (one `DeepseekV2MLP` `n_shared_experts` times as wide) are the
///   same MLP without the gate: 4·v·s, added to the routed output as they are.
fn moe_kept(m: &Moe, tokens: u64, value: u64, h: u64, trainable: bool, deepseek: bool) -> u64 {
    let pairs = tokens.saturating_mul(m.active);
    let e = m.expert_intermediate;
    let shared = if m.shared_experts > 0 {
        let s = mul(&[m.shared_experts, m.shared_intermediate]);
        add(&[
            mul(&[if trainable { 4 } else { 3 }, block(&[tokens, value, s])]),
            if m.shared_gate {
                add(&[block(&[tokens, value]), block(&[tokens, value, h])])
            } else {
                0
            },
        ])
    } else {
        0
    };
    let router = if deepseek && m.correction_bias {
        add(&[
            block(&[tokens, 4, h]),
            block(&[m.experts, 4, h]),
            block(&[tokens, 4, m.experts]),
            block(&[tokens, 8, m.active]),
            block(&[tokens, 4, m.active]),
            block(&[tokens, 4]),
        ])
    } else if deepseek {
        add(&[
            block(&[tokens, 4, h]),
            block(&[m.experts, 4, h]),
            block(&[tokens, 4, m.experts]),
            block(&[tokens, 8, m.active]),
            if m.group_limited {
                block(&[tokens, m.experts])
            } else {
                0
            },
        ])
    } else {
        add(&[
            block(&[tokens, 4, m.experts]),
            block(&[tokens, 8, m.active]),
            block(&[tokens, 4, m.active]),
            block(&[tokens, 4]),
        ])
    };
    add(&[
        router,
        mul(&[3, block(&[pairs, 8])]),
        block(&[m.experts, 4]),
        block(&[pairs, if m.shared_gate { value } else { 4 }]),
        block(&[pairs, value, 2, e]),
        block(&[pairs, value, e]),
        block(&[pairs, value, h]),
        if trainable {
            add(&[block(&[pairs, value, h]), block(&[pairs, value, e])])
        } else {
            0
        },
        shared,
    ])
}

/// Whether `a`'s MoE layers run a shared expert beside the routed ones, and whether a
/// sigmoid gate scales it (Qwen2-MoE's) or not (DeepSeek-V2's).
fn shared_expert(a: &Architecture) -> Option<bool> {
    a.moe
        .filter(|m| m.shared_experts > 0)
        .map(|m| m.shared_gate)
}

/// How many of `a`'s layers run routed experts, and whether the first does.
fn moe_split(a: &Architecture) -> (u64, bool) {
    match a.moe {
        Some(m) => (
            m.moe_layers(a.layers).min(a.layers),
            m.dense_layers == 0 && m.every <= 1,
        ),
        None => (0, false),
    }
}

/// The MoE layers' part of a formula (`shared`: a shared expert, gated as Qwen2-MoE's
/// or not as DeepSeek-V2's).
fn moe_text(moe_layers: u64, layers: u64, trainable: bool, shared: Option<bool>) -> String {
    if moe_layers == 0 {
        return String::new();
    }
    format!(
        " ({moe_layers} of {layers} layers route each token to k experts instead: per pair {}, the router's fp32 softmax and top-k and the dispatch's int64 permutations{}; transformers' grouped_mm experts)",
        if trainable {
            "the gathered input, gate/up, act(gate), their product and the down output v·(2·h + 4·e)"
        } else {
            "gate/up, act(gate) and the down output v·(h + 3·e)"
        },
        match (shared, trainable) {
            (None, _) => "",
            (Some(true), true) => {
                "; per token the shared expert's gated MLP 4·v·s, its down output v·h and its sigmoid gate v"
            }
            (Some(true), false) => {
                "; per token the shared expert's gated MLP 3·v·s, its down output v·h and its sigmoid gate v"
            }
            (Some(false), true) => {
                "; per token the shared experts' MLP 4·v·s and the router's fp32 copy of its input 4·h (DeepSeek's router, its fp32 weight copy once a layer)"
            }
            (Some(false), false) => "; per token the shared experts' MLP 3·v·s",
        }
    )
}

/// Activations of a full fine-tune with transformers' Llama-style decoder (RMSNorm,
/// gated MLP, rotary positions, dense attention: Llama, Mistral, Qwen2/2.5/3, OLMo-2),
/// derived tensor by tensor from its code and checked against `gpumem-agent trace`.
///
/// Per token and layer, with `v` bytes per value of the compute dtype (the kept tensors
/// are those an operator's backward needs, modeling_llama.py in transformers 5.23):
/// - each of the two RMSNorms keeps its fp32 upcast (4·h), the normalised value in
///   `v` (for the weight's gradient) and its output (for the projections): (4 + 2v)·h,
///   plus one fp32 `rsqrt` per token (its own block);
/// - q/k norms (Qwen3, OLMo-2) keep their fp32 upcast and normalised value:
///   (4 + v)·(heads + kv heads)·d;
/// - attention keeps q and k after RoPE, v, the output and, for the fused kernels,
///   an fp32 log-sum-exp per head: flash/SDPA v·(2·a·d + 2·k·d) + 4·a; the
///   memory-efficient kernel repeats K/V to every head (v·4·a·d) and pads the
///   log-sum-exp to 32 positions; eager keeps the repeated K/V, the fp32 softmax and
///   its `v` copy, (4 + v)·a·s per token, and the output made contiguous;
/// - the gated MLP keeps gate, its activation, up and their product: 4·v·i;
/// - once: the final norm, RoPE's cos and sin (one sequence's positions), the
///   shifted labels (int64) and the loss.
///
/// With full activation checkpointing the forward keeps each layer's input (v·h per
/// token), the once-terms and what the layers' arguments hold (the position ids and,
/// under eager attention, its additive mask), and the backward recomputes one layer at
/// a time.
pub fn decoder_activations(
    a: &Architecture,
    seq: u64,
    batch: u64,
    value: u64,
    checkpointing: bool,
    attention: AttentionImpl,
    adapters: Option<&Adapters>,
) -> Result<Activations, EstimateError> {
    // A gpt-oss step under a kernel it cannot train with does not run: refused, not
    // given a figure.
    if gpt_oss(a)
        && let Some(why) = gpt_oss_outside(attention)
    {
        return Err(EstimateError::invalid("attention", why));
    }
    let why = not_derived(a).or(match adapters {
        Some(_) if a.qk_norm_whole || a.fused_qkv => Some(
            "LoRA on a decoder with whole-projection q/k norms (OLMo-2) or a fused qkv projection is not in the derivation",
        ),
        Some(_) if a.mla.is_some() => Some(
            "LoRA on multi-head latent attention (DeepSeek's projections and latent norms) is not in the derivation",
        ),
        None if gemma_norms(a) && !a.qk_norm && attention == AttentionImpl::Efficient => {
            Some("Gemma 2 under the memory-efficient kernel is not in the derivation")
        }
        Some(ad)
            if a.moe.is_some()
                && (ad.targets.gate
                    || ad.targets.up
                    || ad.targets.down
                    || ad.base_keeps_inputs) =>
        {
            Some(
                "LoRA or 4-bit kernels on a mixture of experts' MLP are not in the derivation (PEFT's all-linear adapts the stacked experts through ParamWrapper, whose fold keeps a copy of every expert's weights a layer: traced far above this formula)",
            )
        }
        _ => None,
    })
    .or(fp32_outside(a, value, attention, adapters.is_some()))
    .or(adapters.and_then(|ad| kbit_outside(a, ad)));
    // gpt-oss's full fine-tune (`gpt_oss_activations`) and LoRA on its attention
    // (`gpt_oss_frozen_base`) are derived under the kernels transformers runs it with;
    // elsewhere its line stays assumed, saying why.
    let why = match (a.moe, adapters) {
        (Some(m), None) if gpt_oss(a) => match fp32_outside(a, value, attention, false) {
            None => return gpt_oss_activations(a, &m, (seq, batch), value, checkpointing),
            outside => outside,
        },
        (Some(m), Some(ad)) if gpt_oss(a) => {
            match fp32_outside(a, value, attention, true).or(gpt_oss_lora_outside(ad)) {
                None => {
                    return gpt_oss_frozen_base(a, &m, (seq, batch), value, checkpointing, ad);
                }
                outside => outside,
            }
        }
        _ => why,
    };
    if layernorm_decoder(a) {
        return match adapters {
            None => layernorm_activations(a, (seq, batch), value, checkpointing, attention, why),
            Some(ad) => {
                // PEFT adapts the fused q/k/v module (GPT-2, GPT-NeoX, Falcon) or the
                // separate q, k and v projections here, both derived below, so only the
                // layout's own reasons and the adapters' scope count.
                let why = not_derived(a)
                    .or(stablelm(a).then_some(
                        "LoRA on StableLM (a gated MLP under LayerNorms) is not in the derivation",
                    ))
                    .or(opt_post_norm(a).then_some(
                        "LoRA on OPT's post-norm layers (OPT-350m: project_in, project_out) is not in the derivation",
                    ))
                    .or(phi_qk_norm(a).then_some(
                        "LoRA on Phi with qk_layernorm is not in the derivation",
                    ))
                    .or((bloom(a)
                        && matches!(attention, AttentionImpl::Flash | AttentionImpl::Efficient))
                    .then_some(
                        "BLOOM runs only its eager attention (transformers 5.23 BloomPreTrainedModel supports no SDPA kernel): a flash or memory-efficient request is refused, not derived",
                    ))
                    .or((falcon_rw(a) && attention == AttentionImpl::Flash).then_some(
                        "Falcon with ALiBi refuses flash attention (transformers 5.23 FalconFlashAttention2: `alibi` is not supported): not derived",
                    ))
                    .or(fp32_outside(a, value, attention, true))
                    .or(layernorm_lora_outside(value, ad))
                    .or(kbit_outside(a, ad));
                match why {
                    None => {
                        layernorm_frozen_base(a, (seq, batch), value, checkpointing, attention, ad)
                    }
                    Some(_) => {
                        let full = layernorm_activations(
                            a,
                            (seq, batch),
                            value,
                            checkpointing,
                            attention,
                            why,
                        )?;
                        Ok(layernorm_lora_bound(
                            a,
                            (seq, batch),
                            value,
                            checkpointing,
                            ad,
                            full,
                        ))
                    }
                }
            }
        };
    }
    // A QLoRA base prepared by PEFT (`Adapters::fp32_hidden`) carries fp32 hidden states
    // through every layer: the tensors kept are those of fp32 compute, save what the
    // flash kernel takes (cast back to the compute dtype below).
    let kbit = adapters.is_some_and(|ad| ad.fp32_hidden);
    let compute = value;
    let value = if kbit { 4 } else { value };
    let tokens = seq.saturating_mul(batch);
    let (h, heads, kv, d, i) = (a.hidden, a.heads, a.kv_heads, a.head_dim, a.intermediate);
    let rsqrt = block(&[tokens, 4]);
    // OLMo-2's RMSNorm multiplies the weight in fp32 (modeling_olmo2.py), so the value
    // kept for the weight's gradient is fp32; its q/k norms span the whole projection.
    let olmo = a.qk_norm_whole;
    let normalised = if olmo { 4 } else { value };
    let norm = add(&[
        block(&[tokens, 4, h]),
        block(&[tokens, normalised, h]),
        block(&[tokens, value, h]),
        rsqrt,
    ]);
    let qk_norm = if olmo {
        add(&[
            block(&[tokens, 8, heads, d]),
            block(&[tokens, 8, kv, d]),
            rsqrt,
            rsqrt,
        ])
    } else if a.qk_norm {
        add(&[
            block(&[tokens, 4, heads, d]),
            block(&[tokens, value, heads, d]),
            block(&[tokens, 4, heads]),
            block(&[tokens, 4, kv, d]),
            block(&[tokens, value, kv, d]),
            block(&[tokens, 4, kv]),
        ])
    } else {
        0
    };
    let qd = block(&[tokens, value, heads, d]);
    let kd = block(&[tokens, value, kv, d]);
    // Gemma 2 runs eager attention where SDPA is asked (its model refuses SDPA and
    // transformers falls back when none is named), and soft-caps the scores
    // (modeling_gemma2.py `eager_attention_forward`: `/ softcap`, `tanh`, `· softcap`):
    // the tanh's output is kept beside eager's tensors.
    let gemma2 = gemma_norms(a) && !a.qk_norm;
    let attention = if gemma2 && attention == AttentionImpl::Sdpa {
        AttentionImpl::Eager
    } else {
        attention
    };
    // PyTorch's SDPA has no flash kernel for fp32: it runs the memory-efficient one
    // (`sdp_utils.cpp` `check_tensor_dtype` in `use_flash_attention`), which repeats
    // grouped K/V to every head first (transformers' `sdpa_attention_forward`).
    let attention = if value == 4 && attention == AttentionImpl::Sdpa {
        AttentionImpl::Efficient
    } else {
        attention
    };
    // Eager's softmax runs in fp32 and is cast back to the compute dtype: in fp32
    // compute the cast is the same tensor, not a second copy.
    let softmax_copy = if value == 4 {
        0
    } else {
        block(&[batch, heads, seq, seq, value])
    };
    let capped_scores = if gemma2 {
        block(&[batch, heads, seq, seq, value])
    } else {
        0
    };
    let (attn, attn_text) = match attention {
        // fp32 q, k and v reach flash-attn only cast to a 16-bit dtype: transformers
        // 5.23 `flash_attention_forward` casts them to a quantised model's
        // `config.dtype` (integrations/flash_attention.py `get_target_dtype`,
        // modeling_flash_attention_utils.py `fa_peft_integration_check`), and the kernel
        // keeps those copies and its 16-bit output; the fp32 q, k, v it read are freed.
        AttentionImpl::Flash if kbit => {
            let (q16, k16) = (
                block(&[tokens, compute, heads, d]),
                block(&[tokens, compute, kv, d]),
            );
            (
                add(&[q16, q16, k16, k16, block(&[tokens, 4, heads])]),
                "c·(2·a·d + 2·k·d) + 4·a (q, k, v cast from fp32 to the compute dtype c for flash-attn: transformers' fa_peft_integration_check)",
            )
        }
        AttentionImpl::Flash | AttentionImpl::Sdpa => (
            add(&[qd, qd, kd, kd, block(&[tokens, 4, heads])]),
            "v·(2·a·d + 2·k·d) + 4·a",
        ),
        AttentionImpl::Efficient => (
            add(&[
                mul(&[4, qd]),
                block(&[batch, heads, seq.div_ceil(32), 32, 4]),
            ]),
            "v·4·a·d + 4·a·⌈s/32⌉·32/s",
        ),
        AttentionImpl::Eager if gemma2 => (
            add(&[
                mul(&[4, qd]),
                block(&[batch, heads, seq, seq, 4]),
                block(&[batch, heads, seq, seq, value]),
                capped_scores,
            ]),
            "v·4·a·d + (4 + 2v)·a·s (Gemma 2's eager attention, the soft-cap's tanh output kept)",
        ),
        AttentionImpl::Eager => (
            add(&[
                mul(&[4, qd]),
                block(&[batch, heads, seq, seq, 4]),
                softmax_copy,
            ]),
            if value == 4 {
                "v·4·a·d + 4·a·s (fp32: the softmax's cast back is the same tensor)"
            } else {
                "v·4·a·d + (4 + v)·a·s"
            },
        ),
    };
    // A fused qkv_proj (Phi-3) keeps its whole output: q, k and v are views of it, and
    // the backward of the attention kernel holds v's view. The flash kernel also takes a
    // contiguous copy of v (the slice's row stride is the fused width), which stands in
    // the term above where separate projections keep v's own output; the efficient
    // kernel reads v in place, so the fused output replaces that term; the eager path
    // multiplies contiguous copies and keeps none of the fused output. Traced with
    // transformers' Phi3Attention (phi-3-mini, 2 × 512): `mm` keeps the fused output,
    // `clone` v's copy under flash/sdpa.
    let fused = if a.fused_qkv {
        let whole = block(&[tokens, value, add(&[heads, kv, kv]), d]);
        match attention {
            AttentionImpl::Flash | AttentionImpl::Sdpa => whole,
            AttentionImpl::Efficient => whole.saturating_sub(kd),
            AttentionImpl::Eager => 0,
        }
    } else {
        0
    };
    // RoPE tables kept (Gemma 3 one per layer type, sliding and full; the others one)
    // and Gemma's once-terms: the embedding's scale (a 16-bit scalar) and, for Gemma 3
    // under SDPA, the boolean mask its sliding layers take once the prompt reaches the
    // window (masking_utils.py `_ignore_causal_mask_sdpa`), one for all sequences:
    // counted whatever the window (the safe side for shorter prompts).
    let (ropes, gemma_once) = if gemma_norms(a) {
        let mask = if attention == AttentionImpl::Sdpa {
            block(&[seq, seq])
        } else {
            0
        };
        (if a.qk_norm { 4 } else { 2 }, add(&[512, mask]))
    } else {
        (2, 0)
    };
    // With checkpointing the checkpointed layers' arguments also hold the position ids
    // (int64, one sequence's: `LlamaModel.forward` passes `position_ids` to every layer)
    // and eager attention's additive mask (masking_utils.py `create_causal_mask`: one
    // 16-bit tokens² per sequence), as in `layernorm_activations`; Gemma's layers
    // alternate sliding and full attention, one mask for each (`causal_mask_mapping`).
    let held_mask = if attention == AttentionImpl::Eager {
        mul(&[
            if gemma_norms(a) { 2 } else { 1 },
            block(&[batch, seq, seq, value]),
        ])
    } else {
        0
    };
    let held = add(&[block(&[seq, 8]), held_mask]);
    if let Some(ad) = adapters {
        let (kept, bytes, formula) = frozen_base(
            a,
            (seq, batch),
            value,
            checkpointing,
            (
                attn,
                attn_text,
                kbit && attention == AttentionImpl::Flash,
                // Eager attention over a frozen base: what its matmuls keep depends on
                // which of q, k and v need a gradient (`eager_kept`). Derived without
                // autocast, Gemma's norms (Gemma 2's soft-capping) or bitsandbytes
                // 0.43.1's 4-bit linears (which keep o_proj's input themselves).
                (attention == AttentionImpl::Eager
                    && why.is_none()
                    && !gemma_norms(a)
                    && !ad.autocast
                    && !ad.base_keeps_inputs)
                    .then(|| {
                        (
                            block(&[tokens, value, heads, d]),
                            block(&[batch, heads, seq, seq, 4]),
                            softmax_copy,
                        )
                    }),
            ),
            (ropes, gemma_once, held),
            ad,
        );
        if bytes == u64::MAX {
            return Err(EstimateError::Overflow {
                what: "activations",
            });
        }
        return Ok(Activations {
            bytes,
            kept,
            formula,
            assumed_because: why,
        });
    }
    // DeepSeek's latent attention replaces the kernel's term, and its rotary
    // embedding is what every layer's rotation keeps: V2's one complex64 table
    // (`DeepseekV2RotaryEmbedding.forward`: `torch.polar`, seq × rope/2 × 8 B) or V3's
    // cos/sin pair in the compute dtype over the rotary width (the correction bias
    // marks V3's code).
    let deepseek = deepseek_v2(a);
    let (attn, attn_text, rope_once) = match a.mla.filter(|_| deepseek) {
        Some(l) => {
            let (kept, text) = mla_attention(&l, heads, (seq, batch), value, attention);
            let rope = if a.moe.is_some_and(|m| m.correction_bias) {
                mul(&[2, block(&[seq, value, l.qk_rope_dim])])
            } else {
                block(&[seq, 4, l.qk_rope_dim])
            };
            (kept, text, rope)
        }
        None => (attn, attn_text, mul(&[ropes, block(&[seq, value, d])])),
    };
    let mlp = mul(&[4, block(&[tokens, value, i])]);
    // The layer's norms, the final norm, the RoPE tables kept and what else is kept once.
    let (norms, qk_norm, final_norm) = if gemma_norms(a) {
        // Gemma 2 and 3 (modeling_gemma2.py, modeling_gemma3.py, Gemma3RMSNorm.forward):
        // the norm runs in fp32 and multiplies by (1 + w) before the cast, so it keeps
        // its fp32 input and its fp32 normalised value, the fp32 (1 + w) and `rsqrt`;
        // four such norms a layer, of which the input and pre-MLP norms' 16-bit outputs
        // feed projections; Gemma 3's q/k norms alike over each head.
        let g = |rows: u64, width: u64| {
            add(&[
                mul(&[2, block(&[rows, 4, width])]),
                block(&[rows, 4]),
                block(&[4, width]),
            ])
        };
        let out = block(&[tokens, value, h]);
        (
            add(&[mul(&[4, g(tokens, h)]), out, out]),
            if a.qk_norm {
                add(&[
                    g(tokens.saturating_mul(heads), d),
                    g(tokens.saturating_mul(kv), d),
                ])
            } else {
                0
            },
            add(&[g(tokens, h), out]),
        )
    } else {
        (add(&[norm, norm]), qk_norm, norm)
    };
    let layer = add(&[norms, qk_norm, attn, fused, mlp]);
    let (moe_layers, _) = moe_split(a);
    let moe_layer = match a.moe {
        Some(m) => add(&[
            norms,
            qk_norm,
            attn,
            fused,
            moe_kept(&m, tokens, value, h, true, deepseek),
        ]),
        None => 0,
    };
    let dense_layers = a.layers.saturating_sub(moe_layers);
    let once = add(&[
        final_norm,
        rope_once,
        shifted_labels(seq, batch),
        1024,
        gemma_once,
    ]);
    let layers = a.layers;
    let recomputed = if moe_layers > 0 {
        moe_layer.max(if dense_layers > 0 { layer } else { 0 })
    } else {
        layer
    };
    let (kept, bytes, shape) = if checkpointing {
        let kept = add(&[mul(&[layers, block(&[tokens, value, h])]), once, held]);
        (
            kept,
            add(&[kept, recomputed]),
            if held_mask > 0 {
                "L × v·h (checkpointed layer inputs) + the position ids and eager attention's 16-bit mask (Gemma: one per layer type), which their arguments hold + one layer recomputed"
            } else {
                "L × v·h (checkpointed layer inputs) + the position ids, which their arguments hold + one layer recomputed"
            },
        )
    } else {
        let kept = add(&[
            mul(&[dense_layers, layer]),
            mul(&[moe_layers, moe_layer]),
            once,
        ]);
        (kept, kept, "L × per-layer")
    };
    if bytes == u64::MAX {
        return Err(EstimateError::Overflow {
            what: "activations",
        });
    }
    let formula = format!(
        "{shape}; per layer and token: {} + attention {attn_text}{} + gated MLP 4·v·i{}; once: final norm, RoPE cos/sin, labels, loss (transformers' Llama-style decoder, every tensor in 512 B blocks)",
        if gemma_norms(a) && a.tower_params > 0 {
            "4 fp32 RMSNorms (Gemma 3: input and normalised value in fp32, 8·h) and 2 of their outputs 2·v·h + q/k norms 8·(a + k)·d (text batches: the vision tower runs on no image)"
        } else if gemma_norms(a) && a.qk_norm {
            "4 fp32 RMSNorms (Gemma 3: input and normalised value in fp32, 8·h) and 2 of their outputs 2·v·h + q/k norms 8·(a + k)·d"
        } else if gemma_norms(a) {
            "4 fp32 RMSNorms (Gemma 2: input and normalised value in fp32, 8·h) and 2 of their outputs 2·v·h"
        } else if olmo {
            "2 RMSNorms (4 + 2v)·h (OLMo-2: the normalised value in fp32) + whole q/k norms 8·(a + k)·d"
        } else if a.qk_norm {
            "2 RMSNorms (4 + 2v)·h + q/k norms (4 + v)·(a + k)·d"
        } else {
            "2 RMSNorms (4 + 2v)·h"
        },
        if fused > 0 {
            " + the fused qkv output v·(a + 2k)·d"
        } else {
            ""
        },
        moe_text(moe_layers, layers, true, shared_expert(a))
    );
    Ok(Activations {
        bytes,
        kept,
        formula,
        assumed_because: why,
    })
}

/// What transformers' eager attention keeps in a frozen base's layer whose input does or
/// does not need a gradient (`input_grad`), `qd` one tensor of v·a·d per token (q, K or
/// V repeated to every head, the output), `probs` the softmax's fp32 4·a·s per token
/// and `copy` its cast back to a 16-bit compute dtype (0 in fp32: a QLoRA base prepared
/// by PEFT, [`Adapters::fp32_hidden`], where the cast is the softmax's output itself).
///
/// `eager_attention_forward` (transformers 5.23 `models/llama/modeling_llama.py`; the
/// Qwen3, Mixtral, Qwen2-MoE and Qwen3-MoE copies alike) runs `matmul(q,
/// repeat_kv(k)ᵀ)`, a scalar product and the mask's sum (neither keeps anything),
/// `softmax(…, dtype=fp32).to(q.dtype)`, `dropout` with `p = 0.0` (the configs'
/// `attention_dropout`; ATen's `dropout` returns its input when `p == 0`,
/// `aten/src/ATen/native/Dropout.cpp`), `matmul(probs, repeat_kv(v))` and a
/// `transpose(1, 2).contiguous()` copy of the output that `o_proj` reads. Autograd saves
/// an operand only for the gradient that reads it (`BmmBackward0` saves `self` where
/// `mat2` needs a gradient and `mat2` where `self` does; `SoftmaxBackward0` its output
/// where its input needs one). Where the layer's input needs a gradient, q, k and v all
/// do; in the first layer (its input the frozen embedding's output) only the adapted
/// ones. So q is kept where k needs a gradient, K repeated where q does, V repeated
/// where the scores do (q or k), the softmax's output where the scores do, its 16-bit
/// cast where v does (in fp32 the one tensor where either does), and the output's copy
/// only by an adapted `o_proj`'s `lora_A` where it reads that input uncast
/// (`shared_input`: PEFT's fp32 adapters over fp32 hidden states; a cast copy is
/// [`frozen_base`]'s `module`) — the frozen `o_proj` keeps none (bitsandbytes'
/// `MatMul4Bit` from 0.43.2 only its packed weight, a frozen `nn.Linear` no input).
fn eager_kept(
    (qd, probs, copy): (u64, u64, u64),
    input_grad: bool,
    t: LoraTargets,
    shared_input: bool,
) -> u64 {
    let (q, k, v) = (input_grad || t.q, input_grad || t.k, input_grad || t.v);
    add(&[
        if k { qd } else { 0 },
        if q { qd } else { 0 },
        if q || k { qd } else { 0 },
        if q || k || (v && copy == 0) { probs } else { 0 },
        if v { copy } else { 0 },
        if t.o && shared_input { qd } else { 0 },
    ])
}

/// What the same decoder keeps when its base is frozen and LoRA adapters train
/// (`decoder_activations` with adapters): `(kept at the forward's end, with one layer
/// recomputed under checkpointing, formula)`. `attn` is the attention kernel's term and
/// its formula, which a frozen base leaves as it is.
///
/// What changes against a full fine-tune, operator by operator (PyTorch's autograd keeps
/// an operand only for the gradient that needs it; transformers 5.23 modeling_llama.py,
/// PEFT 0.20 `peft/tuners/lora/layer.py` `Linear.forward`):
/// - a frozen RMSNorm keeps its fp32 upcast and `rsqrt` (for its input's gradient), not
///   the normalised value (kept for the weight's gradient) nor its output (kept by the
///   projections for their weights' gradients): 4·h per token;
/// - the gated MLP keeps `gate` (SiLU's input), `act(gate)` and `up` (the product's
///   operands), not the product, which only `down`'s weight gradient reads: 3·v·i;
/// - each adapted projection runs `lora_B(lora_A(dropout(x)))` after
///   `x = self._cast_input_dtype(x, lora_A.weight.dtype)`: `lora_A` keeps its input for
///   its weight's gradient — a copy of its own (a·in) when the adapter's dtype differs
///   from the compute dtype (PEFT's fp32 adapters) or a dropout runs (which also keeps
///   its boolean mask, 1·in), else the projection's input itself, shared by the
///   projections that read it (q, k, v read the first norm's output; gate and up the
///   second's; o reads the attention output the kernel keeps anyway) — and `lora_B`
///   keeps `lora_A`'s output (a·r);
/// - with bitsandbytes ≤ 0.43.1 every 4-bit linear keeps its input
///   (`MatMul4Bit.forward`, `ctx.tensors = (A, B)`): the two norms' outputs and the
///   MLP's product, v·(2·h + i) per token;
/// - without checkpointing the first layer's input (the frozen embedding's output)
///   needs no gradient, so nothing before the layer's first adapter is recorded: its
///   first norm, and its attention and second norm too when only MLP projections are
///   adapted;
/// - eager attention (outside autocast, Gemma's soft-capped layers and bitsandbytes
///   0.43.1's linears) keeps only the operands its matmuls' gradients read, and no
///   copy of the output for the frozen `o_proj` ([`eager_kept`]): fewer than the full
///   fine-tune's terms where o or, in the first layer, k, q or v is not adapted.
fn frozen_base(
    a: &Architecture,
    (seq, batch): (u64, u64),
    value: u64,
    checkpointing: bool,
    (attn, attn_text, o_cast, eager): (u64, &str, bool, Option<(u64, u64, u64)>),
    (ropes, gemma_once, held): (u64, u64, u64),
    ad: &Adapters,
) -> (u64, u64, String) {
    let attn_text = match eager {
        Some((_, _, 0)) => {
            "eager over fp32 q, k, v: 4·a·d each for q (where k needs a gradient), K and V repeated to every head (where q, or q or k, does) and an adapted o_proj's input, + 4·a·s, the softmax's fp32 output, its cast and p = 0 dropout the same tensor (eager_kept)"
        }
        Some(_) => {
            "eager: v·a·d each for q (where k needs a gradient), K and V repeated to every head (where q, or q or k, does) and an adapted o_proj's input read uncast, + the softmax's fp32 output 4·a·s (where q or k needs a gradient) and its cast v·a·s (where v does) (eager_kept)"
        }
        None => attn_text,
    };
    let tokens = seq.saturating_mul(batch);
    let (h, i, d) = (a.hidden, a.intermediate, a.head_dim);
    let width_o = a.heads.saturating_mul(d);
    let t = ad.targets;
    // A frozen norm keeps what its input's gradient needs: its fp32 upcast and `rsqrt`;
    // Gemma's also the fp32 (1 + w) it multiplies by (its normalised value is kept only
    // for the weight's gradient).
    let gemma = gemma_norms(a);
    let frozen_norm = |rows: u64, width: u64| {
        add(&[
            block(&[rows, 4, width]),
            block(&[rows, 4]),
            if gemma { block(&[4, width]) } else { 0 },
        ])
    };
    let norm = frozen_norm(tokens, h);
    // Frozen q/k norms (Qwen3) keep, like the layer's norms, their fp32 upcast and
    // `rsqrt` for their inputs' gradients: 4·(a + k)·d + 4·(a + k) per token.
    // Each is recorded only when its input needs a gradient: the layer's input does, or
    // its own projection is adapted.
    let (q_norm, k_norm) = if a.qk_norm {
        (
            frozen_norm(tokens.saturating_mul(a.heads), d),
            frozen_norm(tokens.saturating_mul(a.kv_heads), d),
        )
    } else {
        (0, 0)
    };
    // An adapter keeps an input of its own when it casts it or drops it out. PEFT's
    // `Linear.forward` casts to the adapter's dtype (`_cast_input_dtype`); under
    // autocast `F.linear` casts that copy (or the dropout's output) back to the
    // autocast dtype and keeps the 16-bit copy, the fp32 one freed after the cast;
    // PEFT's `lora.bnb.Linear4bit.forward` (a QLoRA base) does not cast under
    // autocast, so its adapter shares the projection's input unless a dropout runs
    // (peft 0.10.0 and 0.21 `peft/tuners/lora/layer.py` and `bnb.py`).
    let casts = |four_bit: bool| ad.value != value && !(ad.autocast && four_bit);
    let own = casts(ad.base_4bit) || ad.dropout;
    let own_head = casts(false) || ad.dropout;
    // Bytes a value of the kept copy and of `lora_A`'s output.
    let kept_value = if ad.autocast { value } else { ad.value };
    let module_of = |own: bool| {
        move |on: bool, width: u64| {
            if !on {
                return 0;
            }
            add(&[
                if own {
                    block(&[tokens, kept_value, width])
                } else {
                    0
                },
                if ad.dropout {
                    block(&[tokens, width])
                } else {
                    0
                },
                block(&[tokens, kept_value, ad.rank]),
            ])
        }
    };
    let module = module_of(own);
    let head_module = module_of(own_head);
    let shared = |on: bool, width: u64| {
        if on {
            block(&[tokens, value, width])
        } else {
            0
        }
    };
    let base = ad.base_keeps_inputs;
    // A routed layer's experts are frozen (3-D parameters no LoRA target names): its
    // MLP term is what the router and the experts keep for their inputs' gradients.
    let layer = |input_grad: bool, routed: bool| {
        // The residual needs a gradient after the attention when the layer's input does
        // or an attention projection is adapted; the MLP's product when that holds or
        // gate or up is adapted.
        let attn_grad = input_grad || t.attention();
        let product_grad = attn_grad || t.gate || t.up;
        let mlp_kept = if attn_grad {
            3
        } else {
            add(&[u64::from(t.gate), u64::from(t.gate), u64::from(t.up)])
        };
        add(&[
            if input_grad { norm } else { 0 },
            shared((base && input_grad) || (!own && (t.q || t.k || t.v)), h),
            module(t.q, h),
            module(t.k, h),
            module(t.v, h),
            if input_grad || t.q { q_norm } else { 0 },
            if input_grad || t.k { k_norm } else { 0 },
            match eager {
                Some((qd, probs, copy)) => eager_kept((qd, probs, copy), input_grad, t, !own),
                None if attn_grad => attn,
                None => 0,
            },
            module(t.o, width_o),
            // The flash kernel's 16-bit output read by an fp32 adapter (a QLoRA base
            // prepared by PEFT): `_cast_input_dtype` makes an fp32 copy lora_A keeps.
            if o_cast && t.o {
                block(&[tokens, 4, width_o])
            } else {
                0
            },
            if attn_grad { norm } else { 0 },
            // Gemma's sandwich: the norm after the attention (beside the one before the
            // MLP) and the one after the MLP, whose input needs a gradient once any
            // earlier part of the layer or an MLP projection does.
            if gemma && attn_grad { norm } else { 0 },
            if gemma && (attn_grad || t.gate || t.up || t.down) {
                norm
            } else {
                0
            },
            shared((base && attn_grad) || (!own && (t.gate || t.up)), h),
            module(t.gate, h),
            module(t.up, h),
            match (routed, a.moe) {
                (true, Some(m)) if attn_grad => moe_kept(&m, tokens, value, h, false, false),
                (true, _) => 0,
                _ => mul(&[mlp_kept, block(&[tokens, value, i])]),
            },
            shared((base && product_grad) || (!own && t.down), i),
            module(t.down, i),
        ])
    };
    let once = add(&[
        norm,
        shared((t.lm_head && !own_head) || ad.modules.lm_head, h),
        head_module(t.lm_head, h),
        mul(&[ropes, block(&[seq, value, d])]),
        shifted_labels(seq, batch),
        1024,
        gemma_once,
    ]);
    let layers = a.layers;
    let (routed, first_routed) = moe_split(a);
    let dense = layers.saturating_sub(routed);
    let (routed_after, dense_after) = if first_routed {
        (routed.saturating_sub(1), dense)
    } else {
        (routed, dense.saturating_sub(1))
    };
    // Autocast's copies of the adapters' weights: saved by `F.linear` and so kept
    // through the backward without checkpointing; with it the checkpointed layers save
    // none, and the copies live in autocast's cast cache until the forward's autocast
    // exits (then once more, a layer's at a time, as each layer is recomputed): not
    // kept at the forward's end, but counted beside the recomputed layer, an upper bound
    // of the forward's peak (every layer's copies at once) and of the backward's.
    let (kept, bytes, shape) = if checkpointing {
        let kept = add(&[mul(&[layers, block(&[tokens, value, h])]), once, held]);
        let recomputed = if routed > 0 {
            layer(true, true).max(if dense > 0 { layer(true, false) } else { 0 })
        } else if ad.fp32_hidden {
            // With fp32 hidden states the first norm's fp32 input is the checkpointed
            // layer input itself, already kept, not an upcast copy.
            layer(true, false).saturating_sub(block(&[tokens, 4, h]))
        } else {
            layer(true, false)
        };
        (
            kept,
            add(&[kept, recomputed, ad.weight_copies]),
            if held > block(&[seq, 8]) {
                "L × v·h (checkpointed layer inputs) + the position ids and eager attention's 16-bit mask (Gemma: one per layer type), which their arguments hold + one layer recomputed"
            } else {
                "L × v·h (checkpointed layer inputs) + the position ids, which their arguments hold + one layer recomputed"
            },
        )
    } else {
        let kept = add(&[
            layer(ad.modules.embed, first_routed),
            mul(&[routed_after, layer(true, true)]),
            mul(&[dense_after, layer(true, false)]),
            once,
            ad.weight_copies,
        ]);
        (
            kept,
            kept,
            "L × per-layer (the first layer keeps nothing before its first adapter)",
        )
    };
    let adapter_input = match (casts(ad.base_4bit), ad.dropout, ad.autocast) {
        (true, true, false) => format!(
            "its input cast to the adapter's {} B and dropped out (a·in), the dropout's mask (1·in)",
            ad.value
        ),
        (true, false, false) => format!("its input cast to the adapter's {} B (a·in)", ad.value),
        (true, true, true) => format!(
            "its input cast to the adapter's {} B and dropped out, then cast by autocast to {kept_value} B (v·in, the wider copies freed), the dropout's mask (1·in)",
            ad.value
        ),
        (true, false, true) => format!(
            "its input cast to the adapter's {} B, then by autocast to {kept_value} B (v·in, the wider copy freed)",
            ad.value
        ),
        (false, true, _) => "its dropped-out input (v·in) and the dropout's mask (1·in)".into(),
        (false, false, _) if o_cast && t.o => "the projection's input (v·in, once per tensor read; o_proj an fp32 copy of the flash kernel's 16-bit output, 4·in)".into(),
        (false, false, _) => "the projection's input (v·in, once per tensor read)".into(),
    };
    let formula = format!(
        "{shape}; frozen base{}, per layer and token: 2 RMSNorms keep their fp32 upcast 4·h{} + attention {attn_text} + gated MLP 3·v·i{}{}; each adapted projection keeps {adapter_input} and lora_A's output {lora_a_out}·r (PEFT's LoRA Linear.forward){}; once: final norm, RoPE cos/sin, labels, loss{} (transformers' Llama-style decoder, every tensor in 512 B blocks)",
        if ad.fp32_hidden {
            " with fp32 hidden states, v = 4 B (PEFT's prepare_model_for_kbit_training: fp32 embeddings and norms; each bitsandbytes Linear4bit casts its input to the compute dtype and its output back to fp32, keeping neither)"
        } else {
            ""
        },
        match (gemma, a.qk_norm) {
            (true, true) =>
                " (Gemma: four norms a layer, each also with its fp32 1 + w) + q/k norms' fp32 upcast 4·(a + k)·(d + 1) where their inputs need a gradient",
            (true, false) => " (Gemma: four norms a layer, each also with its fp32 1 + w)",
            (false, true) =>
                " + q/k norms' fp32 upcast 4·(a + k)·(d + 1) where their inputs need a gradient",
            (false, false) => "",
        },
        if base {
            " + the 4-bit linears' inputs v·(2·h + i) (bitsandbytes ≤ 0.43.1 MatMul4Bit keeps A)"
        } else {
            ""
        },
        moe_text(routed, layers, false, shared_expert(a)),
        if ad.autocast && ad.base_4bit && !ad.dropout {
            ", under autocast the 4-bit layers' adapters their projection's input uncast (PEFT's bnb Linear4bit)"
        } else {
            ""
        },
        if ad.weight_copies > 0 {
            format!(
                ", autocast's {kept_value} B copies of the adapters' weights ({} B)",
                ad.weight_copies
            )
        } else {
            String::new()
        },
        lora_a_out = if ad.autocast { "v" } else { "a" },
    );
    (kept, bytes, formula)
}

/// What a prefill holds at its allocated peak beyond the weights and the KV cache, by
/// line of the estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefill {
    /// Hidden states, norms, projections and MLP tensors alive at the peak, with the
    /// input ids, the embeddings, the cache positions and RoPE's cos/sin.
    pub intermediates: u64,
    /// Eager attention's tokens² tensors alive at the peak: the additive mask, and the
    /// scores and probabilities when the attention is the peak.
    pub scores: u64,
    /// Logits alive at the peak (none when the peak is inside the last layer).
    pub logits: u64,
    /// Where the peak is.
    pub moment: &'static str,
    /// The formula, in words.
    pub formula: String,
    /// `None` when the derivation covers the architecture (the lines are then
    /// computed); otherwise why they stay an assumption.
    pub assumed_because: Option<&'static str>,
    /// The attention the figures are for: the one asked, but eager where Gemma 2 is
    /// asked for SDPA (transformers runs it eager: see [`decoder_prefill`]).
    pub attention: AttentionImpl,
}

/// The boolean mask SDPA is handed over a text prompt (the one [`decoder_prefill`]
/// counts): none for plain causal attention, which SDPA runs with `is_causal`;
/// sequences × tokens² where a sliding window is no longer than the prompt, or where
/// Qwen2-MoE builds its sliding-window mask whatever its layers use (masking_utils.py
/// `sdpa_mask`, `_ignore_causal_mask_sdpa`; transformers 5.23). `generate` always
/// hands the prefill an attention mask (`_prepare_attention_mask_for_generation`,
/// generation/utils.py: ones over the prompt when the caller gives none), which
/// `sdpa_mask` ands into the mask (`padding_mask_function`: `padding_mask[batch_idx,
/// kv_idx]`, one row per sequence), so the mask is one per sequence, not a view of
/// one sequence's expanded.
fn sdpa_text_mask(a: &Architecture, seq: u64, batch: u64, window: Option<u64>) -> u64 {
    if a.moe.is_some_and(|m| m.shared_gate) || window.is_some_and(|w| w <= seq) {
        block(&[batch, seq, seq])
    } else {
        0
    }
}

/// What a prompt holding an image adds to the attention masks of Gemma 3's and
/// PaliGemma's language models beyond a text prompt's (transformers 5.23), under the
/// attention the text model runs (Gemma 2's SDPA runs eager, as in
/// [`decoder_prefill`]). Their processors hand over `token_type_ids` (1 on the
/// image's tokens), which `generate` passes to the prefill, and the image's tokens
/// attend to each other both ways: `Gemma3Model.forward` builds both masks with
/// `get_block_sequence_ids_for_mask` (`create_masks_for_vision_model`: the full
/// layers' and the sliding layers', whatever layers the model has);
/// `PaliGemmaModel.forward` passes `block_sequence_ids` to `create_causal_mask` (and
/// to its sliding mask where the text config has a window). The block overlay turns
/// SDPA's causal skip off (`create_causal_mask`: `allow_is_causal_skip = False`) and
/// reads `block_sequence_ids[batch_idx, q_idx]`, so each mask is a boolean
/// sequences × tokens² tensor, held with the others through the language model's
/// forward, where a text prompt holds [`sdpa_text_mask`]'s. Eager's additive masks
/// are sequences × tokens² × v either way, and flash attention takes no tokens²
/// mask. Checked to the byte against traces of the whole models (tower outputs
/// handed over as `generate` hands them, a prompt with the image's tokens, two to six
/// layers; `tests/cases/tower_check.py --prefill`). Gemma 4 with
/// [`Architecture::vision_bidirectional`] builds one such mask, its sliding layers'.
pub fn image_prompt_masks(
    a: &Architecture,
    seq: u64,
    batch: u64,
    attention: AttentionImpl,
    window: Option<u64>,
) -> u64 {
    let gemma = gemma_norms(a);
    let gemma3 = gemma && a.qk_norm;
    // Gemma 2 (Gemma's norms without q/k norms) runs eager where SDPA is asked.
    let gemma2 = gemma && !a.qk_norm;
    if attention != AttentionImpl::Sdpa || gemma2 {
        return 0;
    }
    // Gemma 4 with `use_bidirectional_attention: "vision"` overlays the image's block
    // ids on its sliding mask only (`create_masks_for_vision_model`, modeling_gemma4.py:
    // the full layers' `create_causal_mask` keeps SDPA's causal skip); the overlay's
    // `or_mask_function` turns the skip off, so the sliding mask is built whatever the
    // prompt's length.
    let masks = if a.vision_bidirectional {
        1
    } else if gemma3 || window.is_some() {
        2
    } else {
        1
    };
    mul(&[masks, block(&[batch, seq, seq])]).saturating_sub(sdpa_text_mask(a, seq, batch, window))
}

/// The peak of one prefill (`generate`'s first forward, no gradients, a `DynamicCache`)
/// of transformers' Llama-style decoder, derived tensor by tensor from its code
/// (modeling_llama.py, cache_utils.py and generation/utils.py, transformers 5.23) and
/// checked against `gpumem-agent trace`.
///
/// The peak is the highest of these moments, `T` = sequences × tokens, `v` bytes per
/// value, every tensor in the allocator's 512 B blocks:
/// - throughout the forward: the input ids (int64), the embeddings (v·h per token),
///   the cache positions (int64) and RoPE's cos and sin (one sequence's positions,
///   v·d each, fp32 in OLMo-2; every sequence's under Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's
///   multimodal RoPE, whose text models are Qwen2's and Qwen3's layers — their
///   rotary's fp32 frequencies and sections, a few 4·3·d/2 tensors a token, come and
///   go before the first layer, far below the MLP's moment); eager attention adds its
///   mask (sequences × tokens² × v),
///   SDPA a boolean one (tokens²) when a sliding window is no longer than the prompt;
/// - the last layer's MLP, with the whole KV cache: the layer's input, the residual
///   after attention and the normalised input (3·v·h per token; 2 with OLMo-2's
///   post-norms, whose MLP reads the residual itself), then `act(gate)`, `up` and their
///   product (3·v·i; Phi-3's fused `gate_up_proj` keeps its 2·i output beside the
///   other two: 4·v·i);
/// - in a mixture of experts (Mixtral's, Qwen3-MoE's and Qwen2-MoE's block), the last
///   MoE layer's experts instead, with the same three hidden states and the cache less
///   the layers after it: the router's outputs, the dispatch over tokens × k pairs and
///   the highest of grouped_mm's moments ([`moe_prefill`]); its dense layers' MLP, if
///   any, as above in the last of them;
/// - eager attention in the last layer, the cache complete: input and normalised input,
///   q after RoPE, K/V repeated to every head (grouped-query only), Phi-3's fused qkv
///   output (q, k and v are views of it), the scores with the mask added (v) and softmax's fp32 input
///   copy and output (8) per head and tokens²;
/// - RoPE (and Qwen3's q norm in fp32) in the last layer, before its K/V enter the
///   cache (`torch.cat` into the layer's cache, one layer less than the whole):
///   q, k, v and three q-sized RoPE terms (q·cos, rotate_half(q)·sin, their sum; in
///   fp32 in OLMo-2);
/// - after the last layer: the final norm's output and the kept logits
///   (`logits_to_keep=1` in `generate`: one position per sequence), then the logits
///   and `generate`'s fp32 copy of the last position.
///
/// The norms' fp32 upcasts (8·h per token at most) stay below the MLP moment whenever
/// the intermediate width is at least the hidden width, as in every gated decoder.
///
/// Gemma 2's and Gemma 3's text decoders (`models/gemma2/modeling_gemma2.py`,
/// `models/gemma3/modeling_gemma3.py`, transformers 5.23; Gemma 3's multimodal model
/// runs the same `Gemma3TextModel` on a text prompt, its tower a line of its own) hold
/// the same tensors at those moments, the embedding's output being the product by
/// the embedding scale (`Gemma2TextScaledWordEmbedding.forward`), with these
/// differences, each checked against `gpumem-agent trace` to the byte:
/// - eager attention takes two additive masks, one per layer type, both built for
///   every prompt (`Gemma2Model.forward`, `Gemma3TextModel.forward`:
///   `causal_mask_mapping` with `create_causal_mask` and
///   `create_sliding_window_causal_mask`); Gemma 2's soft-capping
///   (`eager_attention_forward`: `/ softcap`, `tanh`, `· softcap`) holds two
///   v-sized score tensors at a time, below the mask's sum and softmax's fp32 pair;
/// - Gemma 2 refuses SDPA (`Gemma2PreTrainedModel._supports_sdpa = False`) and
///   transformers runs it eager when no implementation is named: SDPA asked is
///   derived as eager ([`Prefill::attention`]); the memory-efficient kernel, which is
///   SDPA, stays outside;
/// - Gemma 3 keeps two RoPE tables, cos and sin for the sliding layers' base and the
///   full layers' (`Gemma3RotaryEmbedding.forward` per layer type), and norms q and
///   k after all three projections (`Gemma3Attention.forward`): q's norm holds q, k
///   and v, q's fp32 upcast, its normalised value (`Gemma3RMSNorm._norm` on
///   `x.float()`) and the mean-square's fp32 statistics;
/// - each of the four fp32 norms a layer (`Gemma2RMSNorm.forward`: `x.float()`, the
///   normalised value times the fp32 `1 + weight`, cast back) holds two fp32 copies
///   of its input: the post-feedforward norm's, beside the layer's input, the
///   residual and the MLP's output, is counted as a moment of its own;
/// - the final logit soft-capping (`Gemma2ForCausalLM.forward`,
///   `final_logit_softcapping`) holds the kept logits twice (`lm_head`'s output and
///   its quotient by the cap, then the quotient and its tanh).
pub fn decoder_prefill(
    a: &Architecture,
    seq: u64,
    batch: u64,
    value: u64,
    attention: AttentionImpl,
    window: Option<u64>,
    all_logits: bool,
) -> Result<Prefill, EstimateError> {
    if layernorm_decoder(a)
        && a.fused_qkv
        && !gpt_bigcode(a)
        && (a.learned_positions > 0 || a.parallel_residual)
    {
        return layernorm_prefill(a, (seq, batch), value, attention, all_logits);
    }
    if let Some(m) = a.moe.filter(|_| llama4(a)) {
        return llama4_prefill(a, &m, (seq, batch), value, attention, window, all_logits);
    }
    // Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's language models run Qwen2's and Qwen3's layers; the
    // tower's forward and what the text forward holds of its outputs are the vision
    // tower's own line (`estimate::tower`), so their text prefill is derived without
    // the tower's parameters.
    let mrope = qwen_vl(a);
    let text = Architecture {
        tower_params: if mrope { 0 } else { a.tower_params },
        ..*a
    };
    let a = &text;
    // Gemma 2 refuses SDPA and runs eager where it is asked (`_supports_sdpa = False`
    // in `Gemma2PreTrainedModel`, modeling_gemma2.py; `get_correct_attn_implementation`
    // in modeling_utils.py falls back to eager when none is named).
    let gemma = gemma_norms(a);
    let gemma3 = gemma && a.qk_norm;
    let gemma2 = gemma && !a.qk_norm;
    let attention = if gemma2 && attention == AttentionImpl::Sdpa {
        AttentionImpl::Eager
    } else {
        attention
    };
    let why = (gemma2 && attention == AttentionImpl::Efficient)
        .then_some(
            "Gemma 2 under the memory-efficient kernel is not in the derivation (transformers 5.23 refuses SDPA for it: Gemma2PreTrainedModel._supports_sdpa false)",
        )
        .or(a
        .moe
        .filter(|m| !plain_moe(a, m))
        .map(|_| {
            if deepseek_v2(a) {
                "the prefill of DeepSeek's latent attention and router is not in the derivation"
            } else {
                "this mixture of experts' prefill is not in the derivation"
            }
        })
        .or((layernorm_decoder(a) && !a.fused_qkv).then_some(
            "the prefill of StarCoder 2, Phi, OPT or Falcon is not in the derivation",
        ))
        .or(bloom(a).then_some("the prefill of BLOOM is not in the derivation"))
        .or(gpt_bigcode(a).then_some("the prefill of GPTBigCode is not in the derivation"))
        .or(not_derived(a))
        // Gemma's four norms and a tower beside its text decoder: `not_derived` weighed
        // every other fact already.
        .or(if gemma { None } else { a.underived() })
        .or(if value == 4 {
        Some("fp32 compute makes the norms' and softmax's fp32 copies aliases, not in the derivation")
    } else {
        None
    }));
    let t = seq.saturating_mul(batch);
    let (h, heads, kv, d, i) = (a.hidden, a.heads, a.kv_heads, a.head_dim, a.intermediate);
    let eager = attention == AttentionImpl::Eager;
    let post_norms = a.qk_norm_whole;
    let hidden = block(&[t, value, h]);
    let (qd, kd) = (block(&[t, value, heads, d]), block(&[t, value, kv, d]));
    let whole = block(&[t, value, add(&[heads, kv, kv]), d]);
    // SDPA skips its mask for plain causal attention, not when a sliding window is no
    // longer than the prompt (masking_utils.py `_ignore_causal_mask_sdpa`): then a
    // boolean mask, one for every sequence.
    // Qwen2-MoE's model builds a sliding-window mask beside the full one whatever its
    // layers use (`Qwen2MoeModel.forward`: `create_sliding_window_causal_mask`,
    // modeling_qwen2_moe.py, transformers 5.23; its shared expert's gate marks the
    // layout): under eager a second additive mask, under SDPA a boolean one the trace
    // shows built even for a prompt shorter than the window.
    // Gemma's eager attention takes one additive mask per layer type (full and sliding).
    let both_masks = a.moe.is_some_and(|m| m.shared_gate);
    let two_masks = both_masks || gemma;
    let mask = match attention {
        AttentionImpl::Eager => mul(&[
            if two_masks { 2 } else { 1 },
            block(&[batch, seq, seq, value]),
        ]),
        AttentionImpl::Sdpa => sdpa_text_mask(a, seq, batch, window),
        _ => 0,
    };
    // The input ids and `generate`'s int64 attention mask over the prompt, both held
    // through the forward (`_prepare_attention_mask_for_generation`,
    // generation/utils.py, transformers 5.23).
    let ids = mul(&[2, block(&[t, 8])]);
    // OLMo-2's rotary embedding returns cos and sin in fp32 (modeling_olmo2.py).
    let rope = if post_norms { 4 } else { value };
    // Multimodal RoPE expands the positions to every sequence before it computes cos
    // and sin (`Qwen2_5_VLTextModel.forward`: `position_ids.view(1, 1,
    // -1).expand(3, batch, -1)`, Qwen2-VL's `Qwen2VLTextModel.forward` the same;
    // `Qwen2_5_VLRotaryEmbedding.forward` and its
    // `recomposition_frequencies`, which `torch.cat` the sections to sequences × tokens
    // × d; Qwen3-VL's alike, its sections interleaved), where Llama's are one
    // sequence's.
    let rope_rows = if mrope { t } else { seq };
    // Gemma 3 keeps cos and sin for each layer type (`Gemma3TextModel.forward`).
    let once = add(&[
        ids,
        hidden,
        block(&[seq, 8]),
        mul(&[if gemma3 { 4 } else { 2 }, block(&[rope_rows, rope, d])]),
    ]);
    let layer_kv = mul(&[2, block(&[batch, kv, seq, d, value])]);
    let mlp = if a.fused_qkv {
        // Phi-3 fuses gate/up as it fuses q/k/v (modeling_phi3.py, `gate_up_proj`).
        add(&[block(&[t, value, i, 2]), mul(&[2, block(&[t, value, i])])])
    } else {
        mul(&[3, block(&[t, value, i])])
    };
    // Each moment: (name, held throughout + its own, tokens² tensors, logits, cache
    // not yet full by).
    let norms_out = mul(&[if post_norms { 2 } else { 3 }, hidden]);
    // Eager attention returns its probabilities in v, which the decoder layer's
    // `hidden_states, _ = self.self_attn(...)` holds through the MLP
    // (modeling_llama.py `LlamaDecoderLayer.forward`, and each family's alike).
    let held_weights = if eager {
        block(&[batch, heads, seq, seq, value])
    } else {
        0
    };
    let mlp_scores = add(&[mask, held_weights]);
    let (at_mlp, at_moe) = match a.moe {
        Some(m) => {
            // The MoE layers' block and the dense layers' MLP, each in the last layer
            // of its kind, less the layers' K/V cached after it.
            let (last_moe, last_dense) = moe_last_layers(&m, a.layers);
            let dense = last_dense.map_or(("", 0, 0, 0, 0), |i| {
                (
                    "the last dense layer's MLP",
                    add(&[once, norms_out, mlp]),
                    mlp_scores,
                    0,
                    mul(&[a.layers.saturating_sub(i).saturating_sub(1), layer_kv]),
                )
            });
            let routed = last_moe.map_or(("", 0, 0, 0, 0), |i| {
                (
                    "the last MoE layer's experts",
                    add(&[
                        once,
                        norms_out,
                        moe_prefill(&m, t, value, h, deepseek_v2(a)),
                    ]),
                    mlp_scores,
                    0,
                    mul(&[a.layers.saturating_sub(i).saturating_sub(1), layer_kv]),
                )
            });
            (dense, routed)
        }
        None => (
            (
                "the last layer's MLP",
                add(&[once, norms_out, mlp]),
                mlp_scores,
                0,
                0,
            ),
            ("", 0, 0, 0, 0),
        ),
    };
    let at_attention = if eager {
        // Phi-3's q, k and v are views of the fused output, which stays referenced.
        let kv_copies = add(&[
            if a.fused_qkv { whole } else { 0 },
            if kv < heads { mul(&[2, qd]) } else { 0 },
        ]);
        let square = block(&[batch, heads, seq, seq]);
        (
            "the last layer's eager attention",
            add(&[
                once,
                mul(&[if post_norms { 1 } else { 2 }, hidden]),
                qd,
                kv_copies,
            ]),
            add(&[mask, mul(&[square, value]), mul(&[square, 8])]),
            0,
            0,
        )
    } else {
        ("", 0, 0, 0, 0)
    };
    let projections = if a.fused_qkv {
        add(&[whole, mul(&[3, qd]).max(add(&[qd, mul(&[3, kd])]))])
    } else if post_norms {
        // OLMo-2 rotates in fp32 (`apply_rotary_pos_emb` multiplies by fp32 cos/sin):
        // q·cos, rotate_half(q)·sin and their sum, then k's three beside q's result.
        let (q32, k32) = (block(&[t, 4, heads, d]), block(&[t, 4, kv, d]));
        add(&[
            qd,
            mul(&[2, kd]),
            mul(&[3, q32]).max(add(&[q32, mul(&[3, k32])])),
        ])
    } else {
        add(&[mul(&[4, qd]), mul(&[2, kd])])
    };
    let q_norm = if gemma3 {
        // q, k and v projected, q's fp32 upcast and its normalised value, with the
        // mean-square's fp32 statistics (two at once) or the fp32 `weight` and
        // `1 + weight` (`Gemma3RMSNorm.forward`).
        add(&[
            qd,
            mul(&[2, kd]),
            mul(&[2, block(&[t, 4, heads, d])]),
            mul(&[2, block(&[t, 4, heads])]).max(mul(&[2, block(&[d, 4])])),
        ])
    } else if a.qk_norm && !post_norms {
        add(&[
            qd,
            mul(&[2, block(&[t, 4, heads, d])]),
            mul(&[2, block(&[t, 4, heads])]),
        ])
    } else {
        0
    };
    let at_rope = (
        "RoPE in the last layer, before its K/V are cached",
        // OLMo-2's attention reads the layer's input itself (no norm before it).
        add(&[
            once,
            mul(&[if post_norms { 1 } else { 2 }, hidden]),
            projections.max(q_norm),
        ]),
        mask,
        0,
        layer_kv,
    );
    // DeepSeek's latent attention stays assumed: an upper bound on its moments (every
    // tensor its forward allocates, summed) keeps the assumed line on the safe side.
    let at_latent = match a.mla {
        Some(l) if deepseek_v2(a) => (
            "the last layer's latent attention (a bound)",
            add(&[
                once,
                mul(&[2, hidden]),
                mla_prefill_bound(&l, heads, h, (seq, batch), value, attention),
            ]),
            add(&[
                mask,
                if eager {
                    mul(&[
                        add(&[mul(&[2, value]), 8]),
                        block(&[batch, heads, seq, seq]),
                    ])
                } else {
                    0
                },
            ]),
            0,
            0,
        ),
        _ => ("", 0, 0, 0, 0),
    };
    // Gemma's post-feedforward norm in the last layer: the layer's input, the residual
    // and the MLP's output, with the norm's fp32 upcast and normalised value (then its
    // product by the fp32 `1 + weight`), beside the mean-square's or the weight's fp32
    // terms (`Gemma2RMSNorm.forward`).
    let at_norm = if gemma {
        (
            "the last layer's post-feedforward norm",
            add(&[
                once,
                mul(&[3, hidden]),
                mul(&[2, block(&[t, 4, h])]),
                block(&[t, 4]).max(mul(&[2, block(&[h, 4])])),
            ]),
            mlp_scores,
            0,
            0,
        )
    } else {
        ("", 0, 0, 0, 0)
    };
    let kept = block(&[batch, if all_logits { seq } else { 1 }, a.vocab, value]);
    let fp32 = block(&[batch, a.vocab, 4]);
    // Soft-capped logits: `lm_head`'s output and its quotient by the cap alive at once
    // (`Gemma2ForCausalLM.forward`, `final_logit_softcapping`).
    let capped = if a.logit_softcap { kept } else { 0 };
    let at_logits = if add(&[hidden, capped]) >= fp32 {
        (
            "the logits",
            add(&[ids, hidden]),
            0,
            add(&[kept, capped]),
            0,
        )
    } else {
        ("the logits' fp32 copy", ids, 0, add(&[kept, fp32]), 0)
    };
    // SDPA's materialised mask, built before the first layer (masking_utils.py
    // `sdpa_mask`, non-vmap path, transformers 5.23): `and_masks` evaluates the sliding
    // overlay (`kv_idx > q_idx - sliding_window`), ands it into its running result, then
    // the causal comparison (`kv_idx <= q_idx`) and its and: the running result, the
    // comparison and their and, three tokens² booleans at once; the outer `and_masks`
    // then ands the padding rows (`padding_mask[batch_idx, kv_idx]`), the previous
    // result beside the sequences × tokens² one. Held meanwhile: the input ids,
    // `generate`'s attention mask and its boolean copy (`_preprocess_mask_arguments`),
    // the embeddings, the position ids and another int64 index over the prompt
    // (`arange`), the batch's and the head's indices and `and_masks`' scalar result.
    // Eager's additive masks are built the same way, but its attention's tokens²
    // tensors (heads × (v + 8) per sequence) stay above them. The KV cache is still
    // empty at this moment; the lines leave the estimate's KV line beside it (over by
    // the cache, never under).
    let square = block(&[seq, seq]);
    let at_masks = if attention == AttentionImpl::Sdpa && mask > 0 {
        (
            "the SDPA masks' creation, before the first layer",
            add(&[
                ids,
                hidden,
                mul(&[2, block(&[seq, 8])]),
                block(&[t]),
                block(&[batch, 8]),
                block(&[8]),
                block(&[1]),
            ]),
            mul(&[3, square]).max(add(&[square, block(&[batch, seq, seq])])),
            0,
            0,
        )
    } else {
        ("", 0, 0, 0, 0)
    };
    let total = |m: &(&'static str, u64, u64, u64, u64)| add(&[m.1, m.2, m.3]).saturating_sub(m.4);
    // A tie keeps the MLP's moment: the same bytes either way.
    let mut peak = at_mlp;
    for m in [
        at_moe,
        at_attention,
        at_rope,
        at_latent,
        at_norm,
        at_logits,
        at_masks,
    ] {
        if total(&m) > total(&peak) {
            peak = m;
        }
    }
    if total(&peak) == u64::MAX {
        return Err(EstimateError::Overflow { what: "prefill" });
    }
    let mlp_text = match a.moe {
        Some(m) => format!(
            "the last MoE layer's experts, 3·v·h per token + the router's logits, top-k indices and weights{} + per token–expert pair the sort's int64 values and permutation, the gathered input and weights, histc's int32 input, then the highest of gate/up, act(gate) and their product (4·v·e), the product and the down output (v·(e + h)), the down output with its product by the weights and their reordered copy ({}·h) and the inverse permutation, or the sum over the k experts (transformers' grouped_mm experts){}{}",
            if m.router_casts {
                " (cast to v)"
            } else {
                " (fp32)"
            },
            if m.router_casts { "3·v" } else { "v + 2·4" },
            if m.shared_experts > 0 {
                "; the shared expert's gated MLP 3·v·s per token, its output v·h held beside the routed experts"
            } else {
                ""
            },
            if at_mlp.1 > 0 {
                ", less the K/V cached after it; the last dense layer's MLP, 3·v·h + 3·v·i per token"
            } else {
                ""
            },
        ),
        None => format!(
            "the last layer's MLP, {}·v·h + {} per token",
            if post_norms { 2 } else { 3 },
            if a.fused_qkv { "4·v·i" } else { "3·v·i" },
        ),
    };
    let formula = format!(
        "the highest of: {mlp_text}{}{}{}; RoPE before the last K/V are cached, less one layer's K/V; the final norm and the logits{}{}; plus the input ids, generate's attention mask, embeddings, cache positions and RoPE's cos/sin{} throughout ({}, every tensor in 512 B blocks)",
        if at_masks.2 > 0 {
            "; SDPA's sliding mask being built before the first layer, the larger of 3·tokens² and (1 + sequences)·tokens² booleans (sdpa_mask's and_masks)"
        } else {
            ""
        },
        match (eager, two_masks) {
            (true, true) =>
                "; eager attention, (v + 8)·heads·tokens² per sequence and both masks (full and sliding)",
            (true, false) => "; eager attention, (v + 8)·heads·tokens² per sequence and the mask",
            (false, _) => "",
        },
        if gemma {
            "; the post-feedforward fp32 norm, 3·v·h + 2·4·h per token"
        } else {
            ""
        },
        if all_logits {
            " (every position)"
        } else {
            " (one position per sequence, then its fp32 copy)"
        },
        if a.logit_softcap {
            ", soft-capped (lm_head's output and its quotient by the cap at once)"
        } else {
            ""
        },
        if mrope {
            " (multimodal RoPE: one per sequence)"
        } else {
            ""
        },
        match (gemma3, gemma2) {
            (true, _) =>
                "transformers' Gemma 3 text decoder: four fp32 norms a layer, q/k norms in fp32 after the three projections, two RoPE tables, the embedding scaled",
            (false, true) =>
                "transformers' Gemma 2 decoder: four fp32 norms a layer, soft-capped eager attention (which SDPA asked runs), the embedding scaled",
            _ => "transformers' Llama-style decoder",
        },
    );
    Ok(Prefill {
        intermediates: peak.1.saturating_sub(peak.4),
        scores: peak.2,
        logits: peak.3,
        moment: peak.0,
        formula,
        assumed_because: why,
        attention,
    })
}

/// Llama-4's text decoder as transformers 5.23 runs it (`models/llama4/modeling_llama4.py`):
/// `Llama4TextMoe` (one ungated shared expert, every routed expert run over every token
/// by `Llama4TextExperts`' bmm — [`Moe::dense_dispatch`]), dense layers of
/// `intermediate_size_mlp` between them (`interleave_moe_layer_step`), no biases, no
/// latent attention — what [`llama4_prefill`] derives. Scout's weightless L2 q/k norm
/// (`Llama4TextL2Norm`) has no fact: its moment stays below RoPE's (see there).
fn llama4(a: &Architecture) -> bool {
    a.moe.is_some_and(|m| {
        m.dense_dispatch
            && m.shared_experts == 1
            && !m.shared_gate
            && !m.router_bias
            && !m.correction_bias
            && m.latent == 0
            && !m.output_bias
    }) && a.mla.is_none()
        && a.indexer.is_none()
        && a.mixer.is_none()
        && !a.mlp_bias
        && !a.qkv_bias
        && !a.o_bias
        && !a.fused_qkv
        && !a.qk_norm
        && !a.qk_norm_whole
}

/// The prefill's peak of Llama-4's text decoder ([`llama4`]; the multimodal model runs
/// the same `Llama4TextModel` on a text prompt), derived from transformers 5.23
/// `models/llama4/modeling_llama4.py` and checked against `gpumem-agent trace` to the
/// byte (Scout's and Maverick's `Llama4ForCausalLM` at 2 and 4 layers, SDPA and eager,
/// prompts longer than the attention chunk). `T` = sequences × tokens, `v` bytes per value, every tensor
/// in the caching allocator's 512 B blocks (c10/cuda/CUDACachingAllocator.cpp,
/// `round_size`). Held throughout: the input ids (int64), the embeddings (v·h per
/// token), the positions (int64) and RoPE's complex64 table, one sequence's positions
/// × d/2 × 8 B (`Llama4TextRotaryEmbedding.forward`: `torch.polar`). Masks
/// (`Llama4TextModel.forward` builds a full and a chunked one, `create_causal_mask`,
/// `create_chunked_causal_mask`): under eager both, additive, sequences × tokens² × v
/// each; under SDPA only the chunked one, a boolean per sequence, once the prompt
/// reaches the chunk (masking_utils.py `_ignore_causal_mask_sdpa`: `kv_length >=
/// local_attention_size`). The moments, the highest the peak:
/// - the last MoE layer's block (`Llama4TextDecoderLayer.forward` holds the layer's
///   input, the attention's output `attention_states`, the residual and the
///   normalised input — and under eager the probabilities `_`): the router's logits
///   and its sigmoid scores cast back to v (`Llama4Router.forward`, v·E per token
///   each); `hidden_states.repeat(E, 1)` weighed by the scores, E·T rows of v·h
///   (`Llama4TextMoe.forward`); then `Llama4TextExperts.forward`'s bmm over every
///   expert: gate/up (E·T·2·i), act(gate) and the product (E·T·i each), or the
///   product with the down output (E·T·h) in place of act(gate); then the routed
///   output beside the shared expert's gated MLP (3·v·s per token, or its product and
///   output) or the shared output and the sum over the experts; less the K/V of the
///   layers after it;
/// - the last dense layer's `Llama4TextMLP` (`intermediate_size_mlp` wide): act(gate),
///   up and their product beside the same four hidden states, less the K/V after it;
/// - RoPE (`apply_rotary_emb`): q, k, v, the fp32 copies of q and k, their complex
///   products with the table (as wide as the fp32 copies) and their casts back to v,
///   beside the layer's input and normalised input, counted as if the last layer
///   rotated (one layer's K/V not yet cached; a NoPE last layer's is two, so never
///   below). The L2 q/k norm after it (`Llama4TextL2Norm`: an fp32 copy, its product
///   and the cast, one of q or k at a time) and the NoPE layers' temperature
///   (`query_states * attn_scales`: an fp32 product, then its cast; positions-sized
///   scales) hold less, as does SDPA's kernel (q, K/V repeated, the output and its
///   contiguous copy: 5 q-sized);
/// - eager attention in the last layer (`eager_attention_forward`, no fp32 softmax in
///   Llama-4): a NoPE layer's positions and temperature scales (counted whichever
///   layer is last), q, K/V repeated to every head (grouped-query only), then two
///   heads·tokens² tensors at once (the scores and their scaled copy, the sum with the
///   mask, softmax's output) or the probabilities beside the output and its
///   contiguous copy;
/// - the logits, as [`decoder_prefill`] counts them.
fn llama4_prefill(
    a: &Architecture,
    m: &Moe,
    (seq, batch): (u64, u64),
    value: u64,
    attention: AttentionImpl,
    window: Option<u64>,
    all_logits: bool,
) -> Result<Prefill, EstimateError> {
    // The vision tower is idle on a text prompt (the whole model traced on text: equal
    // to the byte); its own line counts an image's pass (`estimate::tower`).
    let rest = Architecture {
        moe: None,
        tower_params: 0,
        ..*a
    };
    let why = match attention {
        AttentionImpl::Sdpa | AttentionImpl::Eager => None,
        _ => Some(
            "Llama 4 under FlashAttention or the memory-efficient kernel is not in the derivation (SDPA's moments stand for it)",
        ),
    }
    .or(not_derived(&rest))
    .or(rest.underived())
    .or((value == 4).then_some(
        "fp32 compute makes the norms' and RoPE's fp32 copies aliases, not in the derivation",
    ));
    let t = seq.saturating_mul(batch);
    let (h, heads, kv, d) = (a.hidden, a.heads, a.kv_heads, a.head_dim);
    let (e, i, s) = (m.experts, m.expert_intermediate, m.shared_intermediate);
    let eager = attention == AttentionImpl::Eager;
    let hidden = block(&[t, value, h]);
    // The input ids and `generate`'s int64 attention mask (generation/utils.py
    // `_prepare_attention_mask_for_generation`), held through the forward.
    let once = add(&[
        mul(&[2, block(&[t, 8])]),
        hidden,
        block(&[seq, 8]),
        block(&[seq, d.div_ceil(2), 8]),
    ]);
    let mask = if eager {
        mul(&[2, block(&[batch, seq, seq, value])])
    } else if window.is_some_and(|w| w <= seq) {
        block(&[batch, seq, seq])
    } else {
        0
    };
    let held_weights = if eager {
        block(&[batch, heads, seq, seq, value])
    } else {
        0
    };
    let layer_kv = mul(&[2, block(&[batch, kv, seq, d, value])]);
    let after = |l: u64| mul(&[a.layers.saturating_sub(l).saturating_sub(1), layer_kv]);
    let (last_moe, last_dense) = moe_last_layers(m, a.layers);
    // Each moment: (name, held throughout + its own, tokens² tensors, logits, K/V not
    // yet cached).
    let four = add(&[once, mul(&[4, hidden])]);
    let at_moe = last_moe.map_or(("", 0, 0, 0, 0), |l| {
        let rows = block(&[e, t, value, h]);
        let gate_up = block(&[e, t, value, i, 2]);
        let wide = block(&[e, t, value, i]);
        let narrow = block(&[t, value, s]);
        let block_peak = [
            // The repeated input and its product by the scores.
            mul(&[2, rows]),
            add(&[rows, gate_up, mul(&[2, wide])]),
            add(&[rows, gate_up, wide, rows]),
            add(&[
                mul(&[2, rows]),
                mul(&[3, narrow]).max(add(&[narrow, hidden])),
            ]),
            add(&[mul(&[2, rows]), mul(&[2, hidden])]),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        (
            "the last MoE layer's experts",
            add(&[four, mul(&[2, block(&[t, value, e])]), block_peak]),
            add(&[mask, held_weights]),
            0,
            after(l),
        )
    });
    let at_dense = last_dense.map_or(("", 0, 0, 0, 0), |l| {
        let w = block(&[t, value, a.intermediate]);
        (
            "the last dense layer's MLP",
            add(&[four, mul(&[3, w]).max(add(&[w, hidden]))]),
            add(&[mask, held_weights]),
            0,
            after(l),
        )
    });
    let (qd, kd) = (block(&[t, value, heads, d]), block(&[t, value, kv, d]));
    let (q32, k32) = (block(&[t, 4, heads, d]), block(&[t, 4, kv, d]));
    let at_rope = (
        "RoPE in the last layer, before its K/V are cached",
        add(&[
            once,
            mul(&[2, hidden]),
            mul(&[2, qd]),
            mul(&[3, kd]),
            mul(&[2, q32]),
            mul(&[2, k32]),
        ]),
        mask,
        0,
        layer_kv,
    );
    let at_attention = if eager {
        let square = block(&[batch, heads, seq, seq, value]);
        (
            "the last layer's eager attention",
            // A NoPE layer holds its positions (int64) and fp32 temperature scales
            // through the attention; counted whichever layer is last (12 B per token
            // above a rotating one's).
            add(&[
                once,
                mul(&[2, hidden]),
                qd,
                if kv < heads { mul(&[2, qd]) } else { 0 },
                block(&[seq, 8]),
                block(&[seq, 4]),
            ]),
            add(&[mask, mul(&[2, square]).max(add(&[square, mul(&[2, qd])]))]),
            0,
            0,
        )
    } else {
        ("", 0, 0, 0, 0)
    };
    let ids = mul(&[2, block(&[t, 8])]);
    let kept = block(&[batch, if all_logits { seq } else { 1 }, a.vocab, value]);
    let fp32 = block(&[batch, a.vocab, 4]);
    let at_logits = if hidden >= fp32 {
        ("the logits", add(&[ids, hidden]), 0, kept, 0)
    } else {
        ("the logits' fp32 copy", ids, 0, add(&[kept, fp32]), 0)
    };
    let total = |m: &(&'static str, u64, u64, u64, u64)| add(&[m.1, m.2, m.3]).saturating_sub(m.4);
    let mut peak = at_moe;
    for m in [at_dense, at_rope, at_attention, at_logits] {
        if total(&m) > total(&peak) {
            peak = m;
        }
    }
    if total(&peak) == u64::MAX {
        return Err(EstimateError::Overflow { what: "prefill" });
    }
    let formula = format!(
        "the highest of: the last MoE layer's block, 4·v·h per token + the router's logits and scores (2·v·E) + every expert over every token (Llama4TextExperts' bmm): the repeated weighed input E·v·h, gate/up 2·E·v·i, act(gate) and the product 2·E·v·i, or the shared expert beside the routed output{}, less the K/V cached after it{}; RoPE's fp32 and complex copies of q and k, less one layer's K/V{}; the final norm and the logits{}; plus the input ids, embeddings, positions and RoPE's complex64 table throughout ({}, every tensor in 512 B blocks; transformers' Llama-4 text decoder)",
        if last_dense.is_some() {
            "; the last dense layer's MLP, 4·v·h + 3·v·i per token"
        } else {
            ""
        },
        if eager {
            ", with the probabilities the layer holds"
        } else {
            ""
        },
        if eager {
            "; eager attention, 2·v·heads·tokens² per sequence (no fp32 softmax)"
        } else {
            ""
        },
        if all_logits {
            " (every position)"
        } else {
            " (one position per sequence, then its fp32 copy)"
        },
        if eager {
            "both masks, full and chunked, v·tokens² per sequence each"
        } else if mask > 0 {
            "SDPA: the chunked attention's boolean mask, tokens² per sequence"
        } else {
            "SDPA: no mask within one chunk"
        },
    );
    Ok(Prefill {
        intermediates: peak.1.saturating_sub(peak.4),
        scores: peak.2,
        logits: peak.3,
        moment: peak.0,
        formula,
        assumed_because: why,
        attention,
    })
}

/// An upper bound on what DeepSeek's latent attention holds in a prefill
/// (`DeepseekV2Attention.forward`, transformers 5.23
/// `models/deepseek_v2/modeling_deepseek_v2.py`) beyond the layer's input and its
/// normalised input: every tensor its forward allocates, summed as if all were alive
/// at once — `q_proj`'s output (or `q_a_proj`'s, its norm's fp32 copies and
/// `q_b_proj`'s), `kv_a_proj_with_mqa`'s output, `kv_a_layernorm`'s fp32 copies and
/// output, `apply_rotary_emb`'s fp32 and complex copies of q_pe and k_pe and their
/// results, the concatenated query, `kv_b_proj`'s output, `expand_kv`'s key and a
/// copy of the values, the kernel's padded values and output and its log-sum-exp,
/// the output's contiguous copy and `o_proj`'s output. Eager's tokens² tensors are
/// counted beside it. Not derived moment by moment: a bound, never below the trace.
fn mla_prefill_bound(
    l: &Mla,
    heads: u64,
    h: u64,
    (seq, batch): (u64, u64),
    value: u64,
    attention: AttentionImpl,
) -> u64 {
    let t = seq.saturating_mul(batch);
    let (r, p, rq) = (l.kv_lora_rank, l.qk_rope_dim, l.q_lora_rank);
    let dq = l.qk_nope_dim.saturating_add(p);
    let dv = l.v_head_dim;
    let qk = block(&[t, value, heads, dq]);
    let norm = |w: u64| {
        add(&[
            mul(&[2, block(&[t, 4, w])]),
            block(&[t, 4]),
            block(&[t, value, w]),
        ])
    };
    add(&[
        if rq > 0 {
            add(&[block(&[t, value, rq]), norm(rq)])
        } else {
            0
        },
        // q, the concatenated query, the key, the padded (or copied) values and the
        // padded output.
        mul(&[5, qk]),
        block(&[t, value, add(&[r, p])]),
        norm(r),
        mul(&[2, block(&[t, 4, heads, p])]),
        block(&[t, value, heads, p]),
        mul(&[2, block(&[t, 4, p])]),
        block(&[t, value, p]),
        block(&[t, value, heads, l.qk_nope_dim.saturating_add(dv)]),
        match attention {
            AttentionImpl::Eager => 0,
            _ => block(&[batch, heads, seq.div_ceil(32), 32, 4]),
        },
        mul(&[2, block(&[t, value, heads, dv])]),
        block(&[t, value, h]),
    ])
}

/// The last MoE layer and the last dense one among `layers` (0-based), by
/// [`Moe::moe_layers`]' rule: layer `i` is MoE when `i ≥ dense_layers` and
/// `(i + 1) % every == 0`.
fn moe_last_layers(m: &Moe, layers: u64) -> (Option<u64>, Option<u64>) {
    let every = m.every.max(1);
    let is_moe = |i: u64| i >= m.dense_layers && i.saturating_add(1).is_multiple_of(every);
    let last = layers.checked_sub(1);
    let last_moe = layers
        .checked_div(every)
        .unwrap_or(0)
        .saturating_mul(every)
        .checked_sub(1)
        .filter(|&i| is_moe(i));
    let last_dense = match last {
        Some(i) if !is_moe(i) => Some(i),
        // The last layer is MoE: with `every` > 1 the one before it is dense; else the
        // leading dense layers end at `dense_layers` − 1.
        Some(i) if every > 1 => i.checked_sub(1),
        Some(_) => m.dense_layers.min(layers).checked_sub(1),
        None => None,
    };
    (last_moe, last_dense)
}

/// The peak of one MoE block in a prefill (no gradients), beyond what the layer holds
/// around it (its input, the residual, the normalised input), per
/// `grouped_mm_experts_forward` (transformers 5.23 `integrations/moe.py`, the default
/// `experts_implementation`: `modeling_utils.py` `get_correct_experts_implementation`)
/// after `MixtralTopKRouter.forward` / `Qwen3MoeTopKRouter.forward` /
/// `Qwen2MoeTopKRouter.forward`, in `MixtralSparseMoeBlock.forward`,
/// `Qwen3MoeSparseMoeBlock.forward` and `Qwen2MoeSparseMoeBlock.forward`. `T` tokens,
/// `S = T·k` token–expert pairs — the rows grouped_mm allocates whatever the balance of
/// the dispatch (the sort orders the pairs by expert; every pair is one row of each
/// grouped output), so the figure does not depend on how tokens are routed. Every
/// tensor in 512 B blocks. Held across the experts:
/// - the router's logits (`_` in the block's forward keeps them: v·E per token; fp32
///   with `fp32_router`, DeepSeek-V2's `DeepseekV2TopkRouter.forward`, whose linear runs
///   on fp32 copies and whose scaled top-k weights stay fp32, and with
///   [`Moe::router_fp32_logits`], GraniteMoE's `GraniteMoeTopKRouter.forward`), its
///   top-k indices (int64, 8·k) and weights (fp32 4·k, or v·k where the router casts
///   them: [`Moe::router_casts`]); the router's own fp32 softmax is freed before the
///   experts run, and below them (E against k·h);
/// - Qwen2-MoE: the shared expert's output (v·h), computed first; its own moment (the
///   gated MLP's `act(gate)`, `up` and their product, 3·v·s per token) is counted too;
///   the sigmoid gate and the final sum after the experts hold less than they do;
/// - the dispatch: the sort's values and permutation (int64, 2·8·S), the gathered
///   input (v·h·S), the gathered weights (w·S, w as above), `histc`'s int32 input
///   (4·S, kept as a local) and the groups' counts and offsets (4·E each);
///
/// and then the highest of the moments:
/// - `_apply_gate`: gate/up's output (2·v·e·S), `act(gate)` and its product with `up`
///   (v·e·S each);
/// - the down projection: the product and its output (v·(e + h)·S);
/// - the reordering `weighted_out[inv_perm]`: the down output (v·h·S), its product by
///   the weights and the reordered copy (w'·h·S each, w' = 4 when the weights are fp32,
///   as type promotion makes the product), the inverse permutation (int64, 8·S);
/// - the sum over the k experts: the down output, the reordered product, the inverse
///   permutation, the sum (w'·h·T) and, when it is fp32, its cast back (v·h·T).
fn moe_prefill(m: &Moe, tokens: u64, value: u64, h: u64, fp32_router: bool) -> u64 {
    let pairs = tokens.saturating_mul(m.active);
    let e = m.expert_intermediate;
    let w = if m.router_casts { value } else { 4 };
    let wide = w.max(value);
    let shared_width = mul(&[m.shared_experts, m.shared_intermediate]);
    // DeepSeek's shared experts run after the routed ones (`DeepseekV2Moe.forward`):
    // their MLP beside the routed output, its own output and the sum.
    let after = if fp32_router && m.shared_experts > 0 {
        add(&[
            mul(&[3, block(&[tokens, value, h])]),
            mul(&[3, block(&[tokens, value, shared_width])]),
        ])
    } else {
        0
    };
    let (shared_out, shared_mlp) = if m.shared_experts > 0 && !fp32_router {
        (
            block(&[tokens, value, h]),
            mul(&[3, block(&[tokens, value, shared_width])]),
        )
    } else {
        (0, 0)
    };
    // DeepSeek's router runs its linear on fp32 copies of its input and weight, freed
    // before the experts run: counted as if held (the safe side of an assumed line).
    let router_copies = if fp32_router {
        add(&[block(&[tokens, 4, h]), block(&[m.experts, 4, h])])
    } else {
        0
    };
    let router = add(&[
        router_copies,
        block(&[
            tokens,
            if fp32_router || m.router_fp32_logits {
                4
            } else {
                value
            },
            m.experts,
        ]),
        block(&[tokens, 8, m.active]),
        block(&[tokens, w, m.active]),
    ]);
    let held = add(&[
        shared_out,
        router,
        mul(&[2, block(&[pairs, 8])]),
        block(&[pairs, value, h]),
        block(&[pairs, w]),
        block(&[pairs, 4]),
        mul(&[2, block(&[m.experts, 4])]),
    ]);
    let gate = add(&[
        block(&[pairs, value, 2, e]),
        mul(&[2, block(&[pairs, value, e])]),
    ]);
    let down = add(&[block(&[pairs, value, e]), block(&[pairs, value, h])]);
    let reorder = add(&[
        block(&[pairs, value, h]),
        mul(&[2, block(&[pairs, wide, h])]),
        block(&[pairs, 8]),
    ]);
    let sum = add(&[
        block(&[pairs, value, h]),
        block(&[pairs, wide, h]),
        block(&[pairs, 8]),
        block(&[tokens, wide, h]),
        if wide == value {
            0
        } else {
            block(&[tokens, value, h])
        },
    ]);
    add(&[held, gate.max(down).max(reorder).max(sum)])
        .max(shared_mlp)
        .max(add(&[router, after]))
}

/// The peak of one prefill of GPT-2 or GPT-NeoX (Pythia, parallel residual), derived
/// from transformers 5.23's `modeling_gpt2.py` and `modeling_gpt_neox.py` under
/// `torch.no_grad()` and checked against `gpumem-agent trace`. `T` = sequences × tokens,
/// `v` bytes per value, every tensor in 512 B blocks:
/// - throughout the forward: the input ids and the position ids (int64), the token
///   embeddings' output (GPT-2 also its position embeddings' output, one sequence's:
///   the model's locals hold both until it returns), GPT-NeoX's RoPE cos and sin over the rotary
///   width, eager attention's additive mask (sequences × tokens² × v);
/// - the last layer's MLP: GPT-2 holds the layer's input, the attention's output, the
///   residual and `ln_2`'s output (4·v·h per token; eager also the attention weights its
///   block returns, v·heads·tokens² per sequence), then `c_fc`'s output and `gelu_new`'s
///   temporaries (`0.5·x` held while `x³` and `0.044715·x³` are built: 4·v·i; an exact
///   GELU 2·v·i); GPT-NeoX holds the attention's output and `post_attention_layernorm`'s
///   output beside the layer's input (the embedding itself in a one-layer model), then
///   `dense_h_to_4h`'s and the GELU's outputs (2·v·i);
/// - eager attention in the last layer: the layer's input, `ln_1`'s output, the fused
///   q/k/v projection (3·v·h) and, GPT-2, the scores and their scaled copy (2·v per head
///   and tokens²); GPT-NeoX, q after its partial RoPE (v·h), the masked scores (v) and
///   softmax's fp32 input copy and output (8);
/// - after the last layer: the final LayerNorm's output and the logits, as for the
///   Llama-style decoder.
fn layernorm_prefill(
    a: &Architecture,
    (seq, batch): (u64, u64),
    value: u64,
    attention: AttentionImpl,
    all_logits: bool,
) -> Result<Prefill, EstimateError> {
    let why = not_derived(a).or(if value == 4 {
        Some("fp32 compute makes the norms' and softmax's fp32 copies aliases, not in the derivation")
    } else {
        None
    });
    let gpt2 = a.learned_positions > 0;
    let t = seq.saturating_mul(batch);
    let (h, heads, i) = (a.hidden, a.heads, a.intermediate);
    let hidden = block(&[t, value, h]);
    let eager = attention == AttentionImpl::Eager;
    let square = block(&[batch, heads, seq, seq, value]);
    let mask = if eager {
        block(&[batch, seq, seq, value])
    } else {
        0
    };
    // The input ids and `generate`'s int64 attention mask (generation/utils.py
    // `_prepare_attention_mask_for_generation`), held through the forward.
    let ids = mul(&[2, block(&[t, 8])]);
    let rot = if a.rotary_dims > 0 {
        a.rotary_dims
    } else {
        a.head_dim
    };
    let once = add(&[
        ids,
        block(&[seq, 8]),
        hidden,
        // GPT-2's position embeddings' output is one sequence's ([1, tokens, h]).
        if gpt2 {
            block(&[seq, value, h])
        } else {
            mul(&[2, block(&[seq, value, rot])])
        },
    ]);
    // GPT-NeoX's first layer reads the embedding itself: no input of its own.
    let own_input = gpt2 || a.layers > 1;
    // Hidden-sized tensors the MLP's moment holds beyond `once`.
    let at_mlp_hidden: u64 = match (gpt2, own_input) {
        (true, _) => 4,
        (false, true) => 3,
        (false, false) => 2,
    };
    let act = if a.gelu_new { 4 } else { 2 };
    let at_mlp = (
        "the last layer's MLP",
        add(&[
            once,
            mul(&[at_mlp_hidden, hidden]),
            mul(&[act, block(&[t, value, i])]),
        ]),
        add(&[mask, if gpt2 && eager { square } else { 0 }]),
    );
    let at_attention = if eager {
        let fused = block(&[t, value, 3, h]);
        if gpt2 {
            (
                "the last layer's eager attention",
                add(&[once, mul(&[2, hidden]), fused]),
                add(&[mask, mul(&[2, square])]),
            )
        } else {
            let fp32 = block(&[batch, heads, seq, seq, 4]);
            (
                "the last layer's eager attention",
                add(&[
                    once,
                    if own_input { hidden } else { 0 },
                    hidden,
                    fused,
                    hidden,
                ]),
                add(&[mask, square, mul(&[2, fp32])]),
            )
        }
    } else {
        ("", 0, 0)
    };
    let kept = block(&[batch, if all_logits { seq } else { 1 }, a.vocab, value]);
    let fp32 = block(&[batch, a.vocab, 4]);
    let (at_logits, logits) = if hidden >= fp32 {
        (("the logits", add(&[ids, hidden]), 0), kept)
    } else {
        (("the logits' fp32 copy", ids, 0), add(&[kept, fp32]))
    };
    let mut peak = (at_mlp, 0);
    for m in [(at_attention, 0), (at_logits, logits)] {
        if add(&[m.0.1, m.0.2, m.1]) > add(&[peak.0.1, peak.0.2, peak.1]) {
            peak = m;
        }
    }
    let ((moment, intermediates, scores), logits) = peak;
    if add(&[intermediates, scores, logits]) == u64::MAX {
        return Err(EstimateError::Overflow { what: "prefill" });
    }
    let formula = format!(
        "the highest of: the last layer's MLP, {}·v·h + {}·v·i per token{}; the final LayerNorm and the logits{}; plus the input and position ids, {} throughout (transformers' {}, every tensor in 512 B blocks)",
        at_mlp_hidden,
        act,
        if eager {
            if gpt2 {
                "; eager attention, the fused q/k/v and two v·heads·tokens² score tensors, and the mask"
            } else {
                "; eager attention, the fused q/k/v, q after RoPE, (v + 8)·heads·tokens² per sequence and the mask"
            }
        } else {
            ""
        },
        if all_logits {
            " (every position)"
        } else {
            " (one position per sequence, then its fp32 copy)"
        },
        if gpt2 {
            "the token and position embeddings' outputs"
        } else {
            "the embeddings' output and RoPE's cos/sin"
        },
        if gpt2 { "GPT-2" } else { "GPT-NeoX" },
    );
    Ok(Prefill {
        intermediates,
        scores,
        logits,
        moment,
        formula,
        assumed_because: why,
        attention,
    })
}

/// The logits' peak in a training step: the forward keeps the logits in the compute
/// dtype, their fp32 copy and the fp32 log-softmax (transformers' `ForCausalLMLoss`
/// upcasts before `cross_entropy`); the backward's first steps hold the log-softmax,
/// its gradient and the fp32 logits' gradient. The larger of the two, 12 bytes per
/// token and vocabulary entry for 16-bit compute. Soft-capped logits (`softcap`:
/// Gemma 2's `logits / cap`, `tanh`, `· cap` before the loss) keep the tanh's output in
/// the compute dtype until its backward, beside the backward's three: 12 + v bytes
/// (14 for 16-bit compute, as gemma-2-2b's trace shows).
pub fn logits_peak_bytes(
    tokens: u64,
    vocab: u64,
    value: u64,
    softcap: bool,
) -> Result<u64, EstimateError> {
    let forward = if value == 4 {
        8
    } else {
        value.saturating_add(8)
    };
    let capped = if softcap { value } else { 0 };
    let bytes = block(&[tokens, vocab, forward.max(12).saturating_add(capped)]);
    if bytes == u64::MAX {
        return Err(EstimateError::Overflow { what: "logits" });
    }
    Ok(bytes)
}

/// transformers 4.39's loss (`Loss::FloatShifted`) for `batch` sequences of `seq`
/// tokens of a `vocab`-wide output, bytes: `(at the loss, each tensor)` — the fp32
/// logits (seq positions), the shifted contiguous copy and its log-softmax (seq − 1
/// positions each), each in the caching allocator's 512 B blocks.
pub fn float_shifted(seq: u64, batch: u64, vocab: u64) -> Result<(u64, [u64; 3]), EstimateError> {
    let logits = block(&[seq, batch, vocab, 4]);
    let shifted = block(&[seq.saturating_sub(1).max(1), batch, vocab, 4]);
    let each = [logits, shifted, shifted];
    let total = add(&each);
    if total == u64::MAX {
        return Err(EstimateError::Overflow { what: "logits" });
    }
    Ok((total, each))
}

/// transformers 4.39's RoPE caches, bytes: every `LlamaAttention` builds its own
/// `LlamaRotaryEmbedding` (`_init_rope`; its linear and dynamic scaling subclasses
/// alike), which registers a `_cos_cached` and a `_sin_cached` of
/// `max_position_embeddings` × head_dim values in the default dtype — the load's
/// `torch_dtype` while `from_pretrained` builds the model — and keeps them "for BC"
/// although its `forward` computes cos and sin from the positions
/// (models/llama/modeling_llama.py at v4.39.3). `positions`: the config's
/// `max_position_embeddings` (LLaMA-Factory's RoPE scaling sets a factor and leaves it).
pub fn transformers_rope_caches(
    layers: u64,
    positions: u64,
    head_dim: u64,
    value: u64,
) -> Result<u64, EstimateError> {
    let each = block(&[positions, head_dim, value]);
    let total = mul(&[2, layers, each]);
    if each == u64::MAX || total == u64::MAX {
        return Err(EstimateError::Overflow {
            what: "RoPE caches",
        });
    }
    Ok(total)
}

/// The logits' and loss's peak in a training step under `loss` for `batch` sequences
/// of `seq` tokens of a `vocab`-wide output in `value`-byte compute (LitGPT's chunks
/// split each sequence: `batch` × C tokens each), with the formula in words: the
/// bytes the loss holds at the step's peak beside the activations (see [`Loss`]).
/// `head_dequantised`: the bytes a 4-bit output projection dequantises at each
/// chunk's backward (0 for a 16-bit one).
pub fn loss_peak(
    loss: Loss,
    seq: u64,
    batch: u64,
    vocab: u64,
    value: u64,
    head_dequantised: u64,
    softcap: bool,
) -> Result<(u64, String), EstimateError> {
    let tokens = seq.saturating_mul(batch);
    // LitGPT's chunks: `x.split(C, dim=1)`, every sequence's C tokens at once, the
    // last chunk what remains: `(one full chunk's bytes, every chunk's)` at `per` bytes
    // per token and vocabulary entry.
    let sliced = |c: u64, per: u64| {
        let c = c.clamp(1, seq.max(1));
        let one = block(&[c, batch, vocab, per]);
        let rest = seq.checked_rem(c).unwrap_or(0);
        let all = add(&[
            mul(&[seq.checked_div(c).unwrap_or(0), one]),
            if rest > 0 {
                block(&[rest, batch, vocab, per])
            } else {
                0
            },
        ]);
        (one, all)
    };
    let (bytes, formula) = match loss {
        Loss::Full => (
            logits_peak_bytes(tokens, vocab, value, softcap)?,
            format!(
                "sequences × tokens × vocab × {} B: the fp32 log-softmax, its gradient and the fp32 logits' gradient at the backward's start (the forward holds the logits, their fp32 copy and the log-softmax: v + 8 B){}; transformers' ForCausalLMLoss",
                if softcap { "(12 + v)" } else { "12" },
                if softcap {
                    ", and the soft-cap's tanh output (v) until its backward"
                } else {
                    ""
                }
            ),
        ),
        Loss::FloatSliced => (
            block(&[tokens, vocab, 16]),
            "sequences × tokens × vocab × 16 B: the recipe's fp32 shifted copy, the saved log-softmax, NLL's gradient and log-softmax's gradient at log_softmax's backward (torchtune 0.1's recipe: output(h).float(), logits[..., :-1, :].contiguous(), nn.CrossEntropyLoss over the transpose)".to_string(),
        ),
        Loss::FloatShifted => {
            let (at_loss, _) = float_shifted(seq, batch, vocab)?;
            let capped = if softcap {
                block(&[tokens, vocab, value])
            } else {
                0
            };
            (
                add(&[at_loss, capped]),
                format!(
                    "sequences × vocab × 4 B × (tokens + 2 × (tokens − 1)): the fp32 logits, their shifted contiguous copy and its fp32 log-softmax at the forward's loss{} (transformers 4.39's LlamaForCausalLM.forward: logits.float(), logits[..., :-1, :].contiguous(), CrossEntropyLoss); the backward's start holds less (the log-softmax and two gradients over tokens − 1), the compute-dtype logits went with the rebinding",
                    if softcap {
                        ", and the soft-cap's tanh output (v)"
                    } else {
                        ""
                    }
                ),
            )
        }
        Loss::Chunked(n) => {
            let chunk = tokens.div_ceil(n.max(1));
            (
                add(&[
                    mul(&[n, block(&[chunk, vocab, 4])]),
                    mul(&[2, block(&[chunk, vocab, 4])]),
                    block(&[chunk, vocab, value]),
                ]),
                format!(
                    "{n} chunks' fp32 log-softmax kept (4 B per token and vocab entry) + one chunk's NLL and log-softmax gradients (fp32) and its gradient in the compute dtype at the backward (torchtune's CEWithChunkedOutputLoss / LinearCrossEntropyLoss, num_output_chunks {n})"
                ),
            )
        }
        Loss::ChunkedCompute(c) => {
            let (one, all) = sliced(c, value);
            (
                add(&[mul(&[2, all]), mul(&[2, one])]),
                format!(
                    "every {c}-token chunk's logits and log-softmax in the compute dtype (2·v B per token and vocab entry) + one chunk's two gradients (LitGPT's lm_head_chunk_size {c} and chunked_cross_entropy)"
                ),
            )
        }
        Loss::ChunkedFabric(c) => {
            let (one, all) = sliced(c, 4);
            // At the log-softmax's backward: every chunk's fp32 logits and log-softmax,
            // and one chunk's NLL and log-softmax gradients. At the output projection's
            // backward (the autograd engine runs every chunk's loss and cast first, by
            // sequence number): the fp32 chunks, every chunk's gradient cast back to the
            // compute dtype, and a 4-bit projection's dequantised weight.
            let at_loss = add(&[mul(&[2, all]), mul(&[2, one])]);
            let at_head = add(&[all, sliced(c, value).1, head_dequantised]);
            (
                at_loss.max(at_head),
                format!(
                    "the higher of every {c}-token chunk's fp32 logits and fp32 log-softmax (8 B per token and vocab entry) + one chunk's two fp32 gradients, and the fp32 chunks + every chunk's gradient in the compute dtype{} at the output projection's backward (LitGPT's chunked_cross_entropy, lm_head_chunk_size {c}, its chunks cast to fp32 by Lightning Fabric's convert_output)",
                    if head_dequantised > 0 {
                        format!(" + the 4-bit output projection's dequantised weight {head_dequantised} B (bitsandbytes MatMul4Bit.backward)")
                    } else {
                        String::new()
                    }
                ),
            )
        }
        Loss::Checkpointed(c) => (
            block(&[c.min(tokens), vocab, value.saturating_add(12)]),
            format!(
                "one {c}-token chunk at a time, recomputed in the backward: its logits, fp32 copy, log-softmax and gradients, (v + 12) B per token and vocab entry (TRL's chunked_nll)"
            ),
        ),
        Loss::Fused => (
            add(&[block(&[tokens, vocab, value]), mul(&[2, block(&[tokens, 4])])]),
            "sequences × tokens × vocab × v: the logits kept in the compute dtype, the gradient written into them, an fp32 log-sum-exp and loss per token (unsloth's Fast_CrossEntropyLoss; its chunked fused loss holds less)".to_string(),
        ),
    };
    if bytes == u64::MAX {
        return Err(EstimateError::Overflow { what: "logits" });
    }
    Ok((bytes, formula))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// transformers 4.39's loss by hand, Llama-2's 32 000-entry vocabulary, one
    /// sequence of 4 096 tokens in bf16: the fp32 logits 4096 × 32000 × 4 B, the
    /// shifted copy and its log-softmax 4095 × 32000 × 4 B each (whole 512 B blocks).
    #[test]
    fn transformers_439s_loss_holds_the_fp32_logits_the_shifted_copy_and_its_log_softmax() {
        let (at_loss, each) = float_shifted(4096, 1, 32_000).unwrap();
        assert_eq!(each, [524_288_000, 524_160_000, 524_160_000]);
        assert_eq!(at_loss, 1_572_608_000);
        // Per sequence: two sequences of 4 096 hold twice as much.
        assert_eq!(float_shifted(4096, 2, 32_000).unwrap().0, 2 * at_loss);
        // The line is the forward's loss; it is 8 B × vocab below `full`'s 12 B over
        // every position (the shift drops one position from two of the three).
        let (line, formula) = loss_peak(Loss::FloatShifted, 4096, 1, 32_000, 2, 0, false).unwrap();
        assert_eq!(line, at_loss);
        let (full, _) = loss_peak(Loss::Full, 4096, 1, 32_000, 2, 0, false).unwrap();
        assert_eq!(full - line, 8 * 32_000);
        assert!(formula.contains("contiguous()"), "{formula}");
        // A one-token sequence still allocates one position for each.
        assert_eq!(float_shifted(1, 1, 128).unwrap().1, [512, 512, 512]);
        assert!(float_shifted(u64::MAX, 2, 2).is_err());
        assert_eq!(
            Loss::parse("loss", "float-shifted").unwrap(),
            Loss::FloatShifted
        );
        assert_eq!(Loss::FloatShifted.name(), "float-shifted");
        assert_eq!(
            Loss::FloatShifted
                .kept_through_step(4096, 1, 32_000)
                .unwrap(),
            0
        );
    }

    #[test]
    fn transformers_439_keeps_a_rope_cache_pair_per_layer() {
        // Llama-2-7B: 32 layers × (cos + sin) × 4096 positions × 128 × 2 B = 64 MiB.
        assert_eq!(
            transformers_rope_caches(32, 4096, 128, 2).unwrap(),
            64 << 20
        );
        assert!(transformers_rope_caches(u64::MAX, u64::MAX, 2, 2).is_err());
        let d = Framework::parse("framework", "transformers@4.39").unwrap();
        assert_eq!(d, Framework::Transformers439);
        // 4.36's step is 4.39's in these rules; 4.38 is not accepted.
        for alias in [
            "transformers@4.39.3",
            "transformers@4.36",
            "transformers@4.36.2",
        ] {
            assert_eq!(Framework::parse("framework", alias).unwrap(), d);
        }
        assert!(Framework::parse("framework", "transformers@4.38").is_err());
        assert_eq!(d.name(), "transformers@4.39");
        let f = d.defaults();
        assert!(f.transformers_rope_per_layer);
        assert_eq!(f.loss, Some(Loss::FloatShifted));
        assert_eq!(f.optimizer, Some((Optimizer::Adamw, Optimizer::Adamw)));
        // No other framework keeps them.
        for (other, _) in Framework::ALL {
            assert_eq!(
                other.defaults().transformers_rope_per_layer,
                other == Framework::Transformers439
            );
        }
    }

    #[test]
    fn adamw_is_two_states_of_the_state_type() {
        assert_eq!(
            Optimizer::Adamw.state_bytes(1000, Dtype::F32).unwrap(),
            8000
        );
        assert_eq!(
            Optimizer::Adamw.state_bytes(1000, Dtype::Bf16).unwrap(),
            4000
        );
    }

    #[test]
    fn adamw8bit_counts_block_scales() {
        // 1024 values: 1024 B + 4 blocks × 4 B per state, two states.
        assert_eq!(
            Optimizer::Adamw8bit.state_bytes(1024, Dtype::F32).unwrap(),
            2 * (1024 + 16)
        );
    }

    /// Llama-3.2-1B's shape, 2 × 512 tokens in bf16: the figures `gpumem-agent trace`
    /// reports for the prefill's peak beyond weights and KV cache (transformers 5.23,
    /// torch 2.11); `agent/tests/trace_formulas.rs` compares every case's config.
    #[test]
    fn a_llama_prefill_peaks_in_its_last_mlp_or_its_eager_attention() {
        let (input, errors) = crate::params::from_pairs([
            ("layers", "16"),
            ("hidden", "2048"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("head-dim", "64"),
            ("intermediate", "8192"),
            ("vocab", "128256"),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        let a = input.arch.unwrap();
        let flash = decoder_prefill(&a, 512, 2, 2, AttentionImpl::Flash, None, false).unwrap();
        assert_eq!(flash.moment, "the last layer's MLP");
        assert_eq!(
            (flash.intermediates, flash.scores, flash.logits),
            (67_260_416, 0, 0)
        );
        let eager = decoder_prefill(&a, 512, 2, 2, AttentionImpl::Eager, None, false).unwrap();
        assert_eq!(eager.moment, "the last layer's eager attention");
        assert_eq!(eager.intermediates + eager.scores, 194_138_112);
        let all = decoder_prefill(&a, 512, 2, 2, AttentionImpl::Flash, None, true).unwrap();
        assert_eq!(all.moment, "the logits");
        assert_eq!((all.intermediates, all.logits), (4_210_688, 262_668_288));
        assert_eq!(flash.assumed_because, None);
    }

    /// The same shape as Qwen's vision-language models run it (Qwen's tower beside it):
    /// derived, RoPE's cos and sin now one per sequence (2 × 2·512·64·2 B against one
    /// sequence's 2 × 512·64·2 B: 131 072 B more than Llama's), the tower's own forward
    /// its own line. Another tower (Gemma 3's SigLIP, pooled by its projector) keeps the
    /// prefill assumed where its decoder is not derived.
    #[test]
    fn a_qwen_vl_prefill_is_llamas_with_rope_per_sequence() {
        use crate::arch::VisionTower;
        let (input, errors) = crate::params::from_pairs([
            ("layers", "16"),
            ("hidden", "2048"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("head-dim", "64"),
            ("intermediate", "8192"),
            ("vocab", "128256"),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        let llama = input.arch.unwrap();
        let qwen_tower = VisionTower {
            merge: 2,
            temporal: 2,
            ..VisionTower::BASE
        };
        let qwen_vl = Architecture {
            tower_params: 1_000_000,
            vision: Some(qwen_tower),
            ..llama
        };
        let flash =
            decoder_prefill(&qwen_vl, 512, 2, 2, AttentionImpl::Flash, None, false).unwrap();
        assert_eq!(flash.assumed_because, None);
        assert_eq!(flash.moment, "the last layer's MLP");
        assert_eq!(flash.intermediates, 67_260_416 + 131_072);
        // One sequence: the same bytes as Llama's.
        let one = |a: &Architecture| {
            decoder_prefill(a, 512, 1, 2, AttentionImpl::Sdpa, None, false)
                .unwrap()
                .intermediates
        };
        assert_eq!(one(&qwen_vl), one(&llama));
        let siglip = Architecture {
            vision: Some(VisionTower {
                merge: 0,
                ..qwen_tower
            }),
            ..qwen_vl
        };
        let p = decoder_prefill(&siglip, 512, 2, 2, AttentionImpl::Flash, None, false).unwrap();
        assert!(p.assumed_because.is_some());
    }

    /// A small Llama-style shape whose every tensor is a whole number of 512 B blocks
    /// (512 tokens, hidden 64, 4 heads of 16, intermediate 128, 2 layers), LoRA r 8 on q
    /// and v in fp32 (PEFT), SDPA, no checkpointing. By hand, per layer: two frozen norms
    /// 2 × (512·4·64 + 512·4) = 266 240; q and v each keep their fp32 copy 512·4·64 and
    /// lora_A's output 512·4·8: 294 912; SDPA q, k, v, out 4 × 512·2·64 and the
    /// log-sum-exp 512·4·4: 270 336; the MLP's gate, act and up 3 × 512·2·128: 393 216 —
    /// 1 224 704, less the first layer's input norm (133 120); once: the final norm
    /// 133 120, cos and sin 2 × 512·2·16, the labels (one sequence: the padded
    /// tensor's (512 + 1)·8, 4 608 in blocks), the loss 1 024: 171 520 (the trace of
    /// this shape: 2 487 808).
    #[test]
    fn one_sequences_labels_are_the_padded_tensor() {
        // 1024 tokens: 8 192 B shifted, 8 200 B padded (one more 512 B block); 1000
        // tokens: both in 8 192 B.
        assert_eq!(shifted_labels(1024, 1), 8704);
        assert_eq!(shifted_labels(1000, 1), 8192);
        assert_eq!(shifted_labels(1024, 2), 16384);
    }

    #[test]
    fn a_frozen_base_keeps_what_its_adapters_and_frozen_operators_need() {
        let (input, errors) = crate::params::from_pairs([
            ("layers", "2"),
            ("hidden", "64"),
            ("heads", "4"),
            ("kv-heads", "4"),
            ("head-dim", "16"),
            ("intermediate", "128"),
            ("vocab", "1000"),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        let a = input.arch.unwrap();
        let mut ad = Adapters {
            targets: LoraTargets::parse("lora-targets", "q,v").unwrap(),
            rank: 8,
            value: 4,
            dropout: false,
            base_keeps_inputs: false,
            base_4bit: false,
            fp32_hidden: false,
            autocast: false,
            weight_copies: 0,
            modules: ModulesToSave::default(),
        };
        let lora = |ad: &Adapters| {
            decoder_activations(&a, 512, 1, 2, false, AttentionImpl::Sdpa, Some(ad)).unwrap()
        };
        let peft = lora(&ad);
        assert_eq!(peft.assumed_because, None);
        assert_eq!(peft.bytes, 1_224_704 - 133_120 + 1_224_704 + 171_520);
        // bitsandbytes ≤ 0.43.1: each 4-bit linear keeps its input. The first layer's q,
        // k and v read an input that needs no gradient; every other norm output and
        // every MLP product is kept: 2 × 512·2·(64 + 128) + 512·2·64.
        ad.base_keeps_inputs = true;
        assert_eq!(
            lora(&ad).bytes - peft.bytes,
            2 * 512 * 2 * (64 + 128) + 512 * 2 * 64
        );
        // Adapters in the compute dtype without dropout read the norm's output itself:
        // one 16-bit tensor shared by q and v instead of two fp32 copies, and lora_A's
        // output in 2 B.
        ad.base_keeps_inputs = false;
        ad.value = 2;
        let shared = lora(&ad);
        let per_layer = 2 * 512 * 4 * 64 + 2 * 512 * 4 * 8 - (512 * 2 * 64 + 2 * 512 * 2 * 8);
        assert_eq!(peft.bytes - shared.bytes, 2 * per_layer);
        // Under bf16 autocast PEFT's fp32 adapters keep the 16-bit copy `F.linear` casts
        // (the fp32 copy is freed), and lora_A's output in 2 B: per layer q and v save
        // 2 × (512·2·64 + 512·2·8) against the fp32 copies; the weights' 16-bit copies
        // are added once.
        ad.value = 4;
        ad.autocast = true;
        ad.weight_copies = 4096;
        let autocast = lora(&ad);
        assert_eq!(
            peft.bytes - autocast.bytes,
            2 * 2 * (512 * 2 * 64 + 512 * 2 * 8) - 4096
        );
        assert!(autocast.formula.contains("then by autocast to 2 B"));
        // With dropout the dropped-out copy is cast too: the same 16-bit copy, and the
        // 1-byte mask of q's and v's inputs in each of the two layers.
        ad.dropout = true;
        let dropped = lora(&ad);
        assert_eq!(dropped.bytes - autocast.bytes, 2 * 2 * 512 * 64);
        // A QLoRA base under autocast: PEFT's bnb Linear4bit does not cast, so without
        // dropout its adapters read the projection's input itself, shared by q and v
        // (the 16-bit copy of 512·2·64 where there were two).
        ad.dropout = false;
        ad.base_4bit = true;
        let four_bit = lora(&ad);
        assert_eq!(autocast.bytes - four_bit.bytes, 2 * (512 * 2 * 64));
        assert!(four_bit.formula.contains("uncast"));
        // Outside autocast the 4-bit layers' adapters cast as any other.
        ad.autocast = false;
        ad.weight_copies = 0;
        assert_eq!(lora(&ad).bytes, peft.bytes);
    }

    #[test]
    fn flash_attention_drops_the_score_term() {
        let (eager, _) =
            activation_bytes(1, 4096, 32, 2048, 1, false, AttentionImpl::Eager).unwrap();
        let (flash, f) =
            activation_bytes(1, 4096, 32, 2048, 1, false, AttentionImpl::Flash).unwrap();
        assert_eq!(flash, 34 * 2048 * 4096);
        assert_eq!(eager - flash, 5 * 32 * 2048 * 2048);
        assert!(!f.contains("s²"));
    }

    /// Pythia-160m's and GPT-2's shapes, as the config reader gives them.
    fn neox() -> Architecture {
        Architecture {
            vocab: 50304,
            hidden: 768,
            layers: 12,
            heads: 12,
            kv_heads: 12,
            head_dim: 64,
            intermediate: 3072,
            gated_mlp: false,
            qkv_bias: true,
            o_bias: true,
            mlp_bias: true,
            layernorm_bias: true,
            fused_qkv: true,
            parallel_residual: true,
            rotary_dims: 16,
            ..Architecture::BASE
        }
    }

    #[test]
    fn a_layernorm_decoder_keeps_its_norms_inputs_fused_output_and_gelu() {
        let (t, v) = (1024u64, 2u64);
        let full =
            |a: &Architecture, att| decoder_activations(a, 512, 2, v, false, att, None).unwrap();
        let a = neox();
        let p = full(&a, AttentionImpl::Flash);
        assert_eq!(p.assumed_because, None);
        // Per layer: the input (v·h), two norms' outputs and fp32 mean and rstd, q and
        // k rotated, v's copy, the output, the log-sum-exp, the fused output, the MLP's
        // two; once: the final norm, RoPE over 16 of 64 dims, labels, the loss.
        let vh = t * v * 768;
        let layer = vh + 2 * (vh + 2 * t * 4) + 4 * vh + t * 4 * 12 + 3 * vh + 2 * t * v * 3072;
        let once = 2 * vh + 2 * t * 4 + 2 * 512 * v * 16 + t * 8 + 1024;
        assert_eq!(p.kept, 12 * layer + once);
        // Sequential residual: the second norm reads a sum of its own.
        let s = full(
            &Architecture {
                parallel_residual: false,
                ..a
            },
            AttentionImpl::Flash,
        );
        assert_eq!(s.kept - p.kept, 12 * vh);
        // Dropout: two masks a layer and the embedding's, one byte a value.
        let d = full(&Architecture { dropout: true, ..a }, AttentionImpl::Flash);
        assert_eq!(d.kept - p.kept, 2 * 12 * t * 768);
        let e = full(
            &Architecture {
                embedding_dropout: true,
                ..a
            },
            AttentionImpl::Flash,
        );
        assert_eq!(e.kept - p.kept, t * 768);
        // The attention's dropout keeps nothing more in the fused kernels, and its
        // one-byte mask a score in eager attention.
        let at = Architecture {
            attn_dropout: true,
            ..a
        };
        assert_eq!(full(&at, AttentionImpl::Flash).kept, p.kept);
        assert_eq!(
            full(&at, AttentionImpl::Eager).kept - full(&a, AttentionImpl::Eager).kept,
            12 * 2 * 12 * 512 * 512
        );
        // gelu_new keeps its tanh, 0.5·x and 1 + tanh beside the fused GELU's two.
        let g = full(
            &Architecture {
                gelu_new: true,
                ..a
            },
            AttentionImpl::Flash,
        );
        assert_eq!(g.kept - p.kept, 12 * 3 * t * v * 3072);
        // GPT-2: no RoPE, so q and k stay views of the fused output.
        let gpt2 = Architecture {
            learned_positions: 1024,
            rotary_dims: 0,
            parallel_residual: false,
            ..a
        };
        let f = full(&gpt2, AttentionImpl::Flash);
        let e = full(&gpt2, AttentionImpl::Efficient);
        assert_eq!(f.kept, e.kept);
        assert_eq!(s.kept - f.kept, 12 * 3 * vh + 2 * 512 * v * 16 - 512 * 8);
        // Eager: the fp32 softmax and its copy, or one softmax in the compute dtype.
        let scores = 2 * 12 * 512 * 512;
        let e32 = full(&gpt2, AttentionImpl::Eager);
        let e16 = full(
            &Architecture {
                softmax_in_dtype: true,
                ..gpt2
            },
            AttentionImpl::Eager,
        );
        assert_eq!(e32.kept - e16.kept, 12 * 4 * scores);
        // Eager keeps contiguous copies of q, k, v and its output (4·v·h) where the fused
        // kernels keep the fused output (3·v·h) and their own.
        assert_eq!(e32.kept - f.kept, 12 * ((4 + v) * scores - 12 * t * 4));
    }

    #[test]
    fn lora_on_a_layernorm_decoder_keeps_the_frozen_bases_inputs_and_each_adapters() {
        let (t, v) = (1024u64, 2u64);
        let a = neox();
        let ad = Adapters {
            targets: LoraTargets::parse("lora-targets", "q,k,v").unwrap(),
            rank: 16,
            value: 4,
            dropout: false,
            base_keeps_inputs: false,
            base_4bit: false,
            fp32_hidden: false,
            autocast: false,
            weight_copies: 0,
            modules: ModulesToSave::default(),
        };
        let lora = |a: &Architecture, ad: &Adapters, att| {
            decoder_activations(a, 512, 2, v, false, att, Some(ad)).unwrap()
        };
        let p = lora(&a, &ad, AttentionImpl::Flash);
        assert_eq!(p.assumed_because, None);
        // Pythia's parallel residual: the first layer keeps the adapter's fp32 input
        // and lora_A's output and the attention (q, k rotated, the output, the fused
        // output, the log-sum-exp); the others also their input, both norms' mean and
        // rstd and GELU's input; once: the final norm's input and statistics, RoPE over
        // 16 dims, labels, the loss.
        let vh = t * v * 768;
        let first = t * 4 * 768 + t * 4 * 16 + 3 * vh + 3 * vh + t * 4 * 12;
        let layer = first + vh + 4 * t * 4 + t * v * 3072;
        let once = vh + 2 * t * 4 + 2 * 512 * v * 16 + t * 8 + 1024;
        assert_eq!(p.kept, first + 11 * layer + once);
        // A dropout before each adapter keeps its one-byte mask beside the dropped copy.
        let d = lora(
            &a,
            &Adapters {
                dropout: true,
                ..ad
            },
            AttentionImpl::Flash,
        );
        assert_eq!(d.kept - p.kept, 12 * t * 768);
        // GPT-2: no rotation, so the output projection reads the kernel's output.
        let gpt2 = Architecture {
            learned_positions: 1024,
            rotary_dims: 0,
            parallel_residual: false,
            ..a
        };
        let g = lora(&gpt2, &ad, AttentionImpl::Flash);
        let e = lora(&gpt2, &ad, AttentionImpl::Efficient);
        assert_eq!(g.kept, e.kept);
        assert!(g.formula.contains("GPT-2"));
    }

    /// StarCoder 2's separate q, k and v projections each cast the norm's output for
    /// their own adapter (three fp32 copies where GPT-NeoX's fused module keeps one);
    /// Falcon-7B's `query_key_value` is one module; OPT's ReLU keeps one tensor of the
    /// intermediate width, Phi's `gelu_new` four.
    #[test]
    fn lora_on_separate_projections_keeps_a_copy_per_adapted_projection() {
        let (t, v) = (1024u64, 2u64);
        let starcoder2 = Architecture {
            fused_qkv: false,
            parallel_residual: false,
            kv_heads: 2,
            rotary_dims: 0,
            ..neox()
        };
        let lora = |a: &Architecture, targets: &str| {
            let ad = Adapters {
                targets: LoraTargets::parse("lora-targets", targets).unwrap(),
                ..ad_fp32()
            };
            decoder_activations(a, 512, 2, v, false, AttentionImpl::Flash, Some(&ad)).unwrap()
        };
        let q = lora(&starcoder2, "q");
        let qkv = lora(&starcoder2, "q,k,v");
        assert_eq!(q.assumed_because, None);
        assert!(qkv.formula.contains("StarCoder 2"), "{}", qkv.formula);
        // Two more fp32 copies of the norm's output and lora_A outputs, in 12 layers.
        assert_eq!(qkv.kept - q.kept, 12 * 2 * (t * 4 * 768 + t * 4 * 16));
        let falcon = Architecture {
            falcon_layer: true,
            layer_norms: 1,
            kv_heads: 1,
            rope_tables: 1,
            softmax_in_dtype: true,
            ..starcoder2
        };
        assert_eq!(lora(&falcon, "q").kept, lora(&falcon, "q,k,v").kept);
        assert!(lora(&falcon, "q").formula.contains("Falcon"));
        // The MLP's activation: ReLU keeps its output, gelu_new four tensors.
        let relu = lora(
            &Architecture {
                relu: true,
                ..starcoder2
            },
            "q,k,v",
        );
        let gelu_new = lora(
            &Architecture {
                gelu_new: true,
                ..starcoder2
            },
            "q,k,v",
        );
        assert_eq!(relu.kept, qkv.kept);
        assert_eq!(gelu_new.kept - qkv.kept, 12 * 3 * t * v * 3072);
    }

    fn ad_fp32() -> Adapters {
        Adapters {
            targets: LoraTargets::parse("lora-targets", "q,v").unwrap(),
            rank: 16,
            value: 4,
            dropout: false,
            base_keeps_inputs: false,
            base_4bit: false,
            fp32_hidden: false,
            autocast: false,
            weight_copies: 0,
            modules: ModulesToSave::default(),
        }
    }

    #[test]
    fn blooms_full_fine_tune_and_lora_are_derived_and_its_prefill_assumed() {
        // bigscience/bloom-560m's shape over 2 layers: by hand, 2 × 512 tokens, per layer
        // 2 inputs and 2 norms 2·2 MiB + 2·(2 MiB + 8 KiB), eager's q, k, v and merged
        // copies 4·2 MiB, the fp32 softmax and its bf16 copy 48 MiB, the MLP 16 MiB:
        // 83 902 464; once the final norm 4 202 496, the embeddings' norm 2 105 344, the
        // labels 8 192 and the loss 1 024 (the trace of these 2 layers: 174 121 984).
        let bloom_arch = Architecture {
            layers: 2,
            hidden: 1024,
            heads: 16,
            kv_heads: 16,
            head_dim: 64,
            intermediate: 4096,
            vocab: 250_880,
            gated_mlp: false,
            layernorm_bias: true,
            fused_qkv: true,
            embedding_norm: true,
            qkv_bias: true,
            o_bias: true,
            mlp_bias: true,
            tied_embeddings: true,
            rope_tables: 0,
            ..Architecture::BASE
        };
        let run = |a: &Architecture, attention, adapters: Option<&Adapters>| {
            decoder_activations(a, 512, 2, 2, false, attention, adapters).unwrap()
        };
        for attention in [AttentionImpl::Sdpa, AttentionImpl::Eager] {
            let d = run(&bloom_arch, attention, None);
            assert_eq!(d.assumed_because, None);
            assert_eq!(
                d.kept,
                2 * 83_902_464 + 4_202_496 + 2_105_344 + 8_192 + 1_024
            );
            assert!(d.formula.contains("BLOOM"));
        }
        for attention in [AttentionImpl::Flash, AttentionImpl::Efficient] {
            assert!(run(&bloom_arch, attention, None).assumed_because.is_some());
        }
        // LoRA with PEFT's fp32 adapters is derived too (its eager attention whatever
        // is asked), a flash request assumed.
        let sdpa = run(&bloom_arch, AttentionImpl::Sdpa, Some(&ad_fp32()));
        assert_eq!(sdpa.assumed_because, None);
        assert_eq!(
            sdpa.kept,
            run(&bloom_arch, AttentionImpl::Eager, Some(&ad_fp32())).kept
        );
        assert!(sdpa.formula.contains("BLOOM"));
        assert!(
            run(&bloom_arch, AttentionImpl::Flash, Some(&ad_fp32()))
                .assumed_because
                .is_some()
        );
        let p = decoder_prefill(&bloom_arch, 512, 1, 2, AttentionImpl::Sdpa, None, false).unwrap();
        assert!(p.assumed_because.is_some());
        for outside in [
            Architecture {
                dropout: true,
                ..bloom_arch
            },
            Architecture {
                learned_positions: 2048,
                ..bloom_arch
            },
            Architecture {
                parallel_residual: true,
                ..bloom_arch
            },
        ] {
            assert!(
                run(&outside, AttentionImpl::Sdpa, None)
                    .assumed_because
                    .is_some(),
                "{outside:?}"
            );
        }
    }

    #[test]
    fn stablelms_full_fine_tune_is_derived_and_its_switches_stay_assumed() {
        let stablelm_arch = Architecture {
            layers: 2,
            hidden: 2560,
            heads: 32,
            kv_heads: 32,
            head_dim: 80,
            intermediate: 6912,
            vocab: 50_304,
            layernorm_bias: true,
            rotary_dims: 20,
            rope_tables: 1,
            ..Architecture::BASE
        };
        let run = |a: &Architecture, attention, adapters: Option<&Adapters>| {
            decoder_activations(a, 512, 2, 2, false, attention, adapters).unwrap()
        };
        // The trace of these 2 layers under flash and SDPA: 218 457 088.
        let d = run(&stablelm_arch, AttentionImpl::Sdpa, None);
        assert_eq!((d.assumed_because, d.kept), (None, 218_457_088));
        assert!(d.formula.contains("StableLM"));
        assert!(
            run(&stablelm_arch, AttentionImpl::Efficient, None)
                .assumed_because
                .is_some()
        );
        assert!(
            run(&stablelm_arch, AttentionImpl::Sdpa, Some(&ad_fp32()))
                .assumed_because
                .is_some()
        );
        for outside in [
            Architecture {
                dropout: true,
                ..stablelm_arch
            },
            Architecture {
                qk_norm_whole: true,
                ..stablelm_arch
            },
            Architecture {
                layer_norms: 1,
                ..stablelm_arch
            },
        ] {
            assert!(
                run(&outside, AttentionImpl::Sdpa, None)
                    .assumed_because
                    .is_some(),
                "{outside:?}"
            );
        }
    }

    #[test]
    fn layernorm_decoders_outside_the_derivation_stay_assumed() {
        let a = neox();
        let assumed = |a: &Architecture, adapters: Option<&Adapters>| {
            decoder_activations(a, 512, 2, 2, false, AttentionImpl::Flash, adapters)
                .unwrap()
                .assumed_because
        };
        // One norm after a fused projection, grouped K/V on one, and two norms in
        // parallel after separate projections (none of them Falcon's layer).
        assert!(
            assumed(
                &Architecture {
                    layer_norms: 1,
                    ..a
                },
                None
            )
            .is_some()
        );
        assert!(assumed(&Architecture { kv_heads: 4, ..a }, None).is_some());
        assert!(
            assumed(
                &Architecture {
                    fused_qkv: false,
                    ..a
                },
                None
            )
            .is_some()
        );
        // StarCoder 2's and Phi's layers are derived, for a full fine-tune and for
        // PEFT's fp32 adapters; with another activation, Falcon's, Phi's q/k LayerNorms
        // or a learned position table they stay outside, and so does their prefill and
        // LoRA with adapters in the compute dtype.
        let starcoder2 = Architecture {
            fused_qkv: false,
            parallel_residual: false,
            kv_heads: 2,
            rotary_dims: 0,
            ..a
        };
        let phi = Architecture {
            layer_norms: 1,
            parallel_residual: false,
            gelu_new: true,
            ..starcoder2
        };
        for derived in [starcoder2, phi] {
            assert_eq!(assumed(&derived, None), None);
            for outside in [
                Architecture {
                    other_activation: true,
                    ..derived
                },
                Architecture {
                    falcon_layer: true,
                    ..derived
                },
                Architecture {
                    layer_scalars: 4 * derived.head_dim,
                    ..derived
                },
                Architecture {
                    learned_positions: 2050,
                    ..derived
                },
            ] {
                assert!(assumed(&outside, None).is_some(), "{outside:?}");
            }
            assert_eq!(assumed(&derived, Some(&ad_fp32())), None);
            let compute = Adapters {
                value: 2,
                ..ad_fp32()
            };
            assert!(assumed(&derived, Some(&compute)).is_some());
            let p = decoder_prefill(&derived, 512, 1, 2, AttentionImpl::Sdpa, None, false).unwrap();
            assert!(p.assumed_because.is_some());
        }
        // Falcon-7B's layer (one norm, one K/V head, RoPE) is derived; with dropout,
        // two norms in sequence or ALiBi it stays outside.
        let falcon = Architecture {
            falcon_layer: true,
            fused_qkv: false,
            layer_norms: 1,
            kv_heads: 1,
            rope_tables: 1,
            softmax_in_dtype: true,
            parallel_residual: false,
            ..a
        };
        assert_eq!(assumed(&falcon, None), None);
        assert_eq!(assumed(&falcon, Some(&ad_fp32())), None);
        for outside in [
            Architecture {
                dropout: true,
                ..falcon
            },
            Architecture {
                layer_norms: 2,
                kv_heads: 8,
                ..falcon
            },
            Architecture {
                rope_tables: 0,
                ..falcon
            },
        ] {
            assert!(assumed(&outside, None).is_some(), "{outside:?}");
        }
        // Falcon-40B's layer (two norms over the layer's input, grouped K/V) is derived,
        // K/V counted as wide as q (broadcast to every head); with dropout or ALiBi it
        // stays outside.
        let falcon40 = Architecture {
            layer_norms: 2,
            kv_heads: 8,
            parallel_residual: true,
            ..falcon
        };
        assert_eq!(assumed(&falcon40, None), None);
        assert_eq!(assumed(&falcon40, Some(&ad_fp32())), None);
        let wide = Architecture {
            kv_heads: falcon40.heads,
            ..falcon40
        };
        let kept = |a: &Architecture| {
            decoder_activations(a, 512, 2, 2, false, AttentionImpl::Sdpa, None)
                .unwrap()
                .kept
        };
        assert_eq!(kept(&falcon40), kept(&wide));
        for outside in [
            Architecture {
                dropout: true,
                ..falcon40
            },
            Architecture {
                rope_tables: 0,
                ..falcon40
            },
        ] {
            assert!(assumed(&outside, None).is_some(), "{outside:?}");
        }
        // Falcon2-11B's one norm over grouped K/V is derived too, K/V as wide as q.
        let falcon2 = Architecture {
            layer_norms: 1,
            parallel_residual: false,
            ..falcon40
        };
        assert_eq!(assumed(&falcon2, None), None);
        assert_eq!(assumed(&falcon2, Some(&ad_fp32())), None);
        // Falcon-7B's one K/V head, indexed off the fused output, is narrower.
        assert!(
            kept(&falcon2)
                > kept(&Architecture {
                    kv_heads: 1,
                    ..falcon2
                })
        );
        // A fused projection under LoRA.
        let ad = Adapters {
            targets: LoraTargets::parse("lora-targets", "q,v").unwrap(),
            rank: 16,
            value: 4,
            dropout: false,
            base_keeps_inputs: false,
            base_4bit: false,
            fp32_hidden: false,
            autocast: false,
            weight_copies: 0,
            modules: ModulesToSave::default(),
        };
        // LoRA on the fused projection is derived for PEFT's fp32 adapters over a
        // 16-bit model; adapters in the compute dtype, autocast or a 4-bit base stay
        // outside, bounded.
        assert!(assumed(&a, Some(&ad)).is_none());
        for outside in [
            Adapters { value: 2, ..ad },
            Adapters {
                autocast: true,
                ..ad
            },
            Adapters {
                base_4bit: true,
                fp32_hidden: false,
                ..ad
            },
        ] {
            assert!(assumed(&a, Some(&outside)).is_some());
        }
        // The facts a Llama-style decoder does not have stay outside its derivation.
        let llama = Architecture {
            dropout: true,
            ..Architecture::BASE
        };
        assert!(llama.underived().is_some());
        // The prefill is derived for GPT-NeoX's parallel residual, not a sequential one.
        let p = decoder_prefill(&a, 512, 1, 2, AttentionImpl::Sdpa, None, false).unwrap();
        assert!(p.assumed_because.is_none());
        let sequential = Architecture {
            parallel_residual: false,
            ..a
        };
        let p = decoder_prefill(&sequential, 512, 1, 2, AttentionImpl::Sdpa, None, false).unwrap();
        assert!(p.assumed_because.is_some());
    }

    /// Gemma 2's and Gemma 3's prefill peaks, `decoder_prefill` against `gpumem-agent
    /// trace` (transformers 5.23 on the meta device, bf16), gemma-3-4b's whole model on a
    /// text prompt with its vision tower beside the decoder: equal to the byte. Gemma 2
    /// asked for SDPA runs eager (traced eager); under the memory-efficient kernel, which
    /// it refuses, it stays assumed.
    #[test]
    fn gemma_prefills_equal_their_traces() {
        let arch = |text: &str| crate::import::config::parse_config(text).unwrap().arch;
        let gemma2 = arch(include_str!("../tests/cases/configs/gemma-2-2b.json"));
        let gemma3 = arch(include_str!("../tests/cases/configs/gemma-3-1b.json"));
        let gemma3_4b = arch(include_str!("../tests/cases/configs/gemma-3-4b.json"));
        assert!(gemma3_4b.tower_params > 0);
        let (sdpa, eager) = (AttentionImpl::Sdpa, AttentionImpl::Eager);
        let mlp = "the last layer's MLP";
        let attention = "the last layer's eager attention";
        let rows = [
            (gemma2, sdpa, 512, 1, 4096, 43_528_192, mlp),
            (gemma2, eager, 512, 1, 4096, 43_528_192, mlp),
            (gemma2, sdpa, 1024, 2, 4096, 230_727_680, attention),
            (gemma3, sdpa, 512, 1, 512, 27_275_264, mlp),
            (gemma3, eager, 512, 1, 512, 30_158_848, mlp),
            (gemma3, sdpa, 1024, 2, 512, 108_044_288, mlp),
            (gemma3, eager, 1024, 2, 512, 131_112_960, mlp),
            (gemma3, AttentionImpl::Flash, 512, 1, 512, 27_013_120, mlp),
            (gemma3_4b, sdpa, 512, 1, 1024, 43_003_904, mlp),
            (gemma3_4b, sdpa, 2048, 2, 1024, 348_209_152, mlp),
            (gemma3_4b, eager, 2048, 1, 1024, 413_188_096, attention),
        ];
        for (a, attention, seq, batch, window, traced, moment) in rows {
            let p = decoder_prefill(&a, seq, batch, 2, attention, Some(window), false).unwrap();
            assert_eq!(p.assumed_because, None, "{attention:?}");
            assert_eq!(
                (p.intermediates + p.scores, p.logits, p.moment),
                (traced, 0, moment),
                "{attention:?} {batch} × {seq}"
            );
        }
        // A long prompt under SDPA peaks while the sliding mask is built, before the
        // first layer: three tokens² booleans at once (six layers of gemma-3-4b,
        // 131 072 tokens, traced: 52 215 023 104 B; the MLP's moment gave 28 187 828 224).
        let six = Architecture {
            layers: 6,
            ..gemma3_4b
        };
        let p = decoder_prefill(&six, 131_072, 1, 2, sdpa, Some(1024), false).unwrap();
        assert_eq!(
            (p.intermediates + p.scores, p.moment),
            (
                52_215_023_104,
                "the SDPA masks' creation, before the first layer"
            )
        );
        let p = decoder_prefill(&gemma2, 512, 1, 2, sdpa, Some(4096), false).unwrap();
        assert_eq!(p.attention, eager);
        let p = decoder_prefill(&gemma2, 512, 1, 2, AttentionImpl::Efficient, None, false);
        assert!(p.unwrap().assumed_because.is_some());
        // Soft-capped logits: one layer, every position's logits, the quotient beside
        // lm_head's output (traced: 2 367 488 B and 524 288 000 B of logits).
        let one = Architecture {
            layers: 1,
            ..gemma2
        };
        let p = decoder_prefill(&one, 512, 1, 2, eager, Some(4096), true).unwrap();
        assert_eq!(
            (p.intermediates + p.scores, p.logits, p.moment),
            (2_367_488, 524_288_000, "the logits")
        );
    }

    /// Mixtures of experts' prefill peaks, `decoder_prefill` against `gpumem-agent
    /// trace` (transformers 5.23 on the meta device, bf16): GraniteMoE's router (fp32
    /// logits, cast weights), one expert a token (the sum over k is the peak), and MoE
    /// layers every second layer (the last MoE layer's moment less the K/V of the dense
    /// layer after it: the trace's temporaries at that moment are 76 067 840 B beside a
    /// cache one layer short).
    #[test]
    fn moe_prefills_equal_their_traces() {
        let granite = r#"{"model_type":"granitemoe","hidden_size":4096,"intermediate_size":11008,
            "num_attention_heads":32,"num_hidden_layers":2,"num_key_value_heads":32,
            "num_local_experts":8,"num_experts_per_tok":2,"vocab_size":32000,
            "tie_word_embeddings":false,"max_position_embeddings":2048}"#;
        let with = |text: &str, over: &str| {
            let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
            let o: serde_json::Value = serde_json::from_str(over).unwrap();
            for (k, x) in o.as_object().unwrap() {
                v[k] = x.clone();
            }
            crate::import::config::parse_config(&v.to_string())
                .unwrap()
                .arch
        };
        let mixtral = include_str!("../tests/cases/configs/mixtral-8x7b.json");
        let qwen3 = include_str!("../tests/cases/configs/qwen3-30b-a3b.json");
        let rows = [
            (
                with(granite, "{}"),
                AttentionImpl::Sdpa,
                512,
                1,
                115_667_968,
            ),
            (
                with(granite, "{}"),
                AttentionImpl::Eager,
                256,
                2,
                124_185_600,
            ),
            (
                with(granite, "{}"),
                AttentionImpl::Flash,
                2048,
                1,
                462_668_800,
            ),
            (
                with(
                    mixtral,
                    r#"{"num_hidden_layers": 2, "num_experts_per_tok": 1}"#,
                ),
                AttentionImpl::Flash,
                512,
                1,
                79_993_856,
            ),
            (
                with(
                    qwen3,
                    r#"{"num_hidden_layers": 4, "decoder_sparse_step": 2}"#,
                ),
                AttentionImpl::Flash,
                512,
                1,
                76_067_840,
            ),
            (
                with(
                    qwen3,
                    r#"{"num_hidden_layers": 3, "decoder_sparse_step": 2}"#,
                ),
                AttentionImpl::Flash,
                512,
                1,
                76_067_840 - 1_048_576,
            ),
        ];
        for (a, attention, seq, batch, traced) in rows {
            let p = decoder_prefill(&a, seq, batch, 2, attention, None, false).unwrap();
            assert_eq!(p.assumed_because, None, "{attention:?}");
            assert_eq!(p.moment, "the last MoE layer's experts", "{attention:?}");
            assert_eq!(
                p.intermediates + p.scores,
                traced,
                "{attention:?} {batch} × {seq}"
            );
        }
    }

    /// gpt-oss's full fine-tune and LoRA on its attention are derived under eager
    /// attention (and SDPA asked, which runs eager), equal to the meta trace; flash and
    /// the memory-efficient kernel are refused (no backward with the sinks; SDPA
    /// refused); fp32 compute, LoRA's MLP targets, QLoRA and autocast stay assumed.
    #[test]
    fn gpt_oss_is_derived_eager_with_lora_its_flash_refused() {
        let c = crate::import::config::parse_config(include_str!(
            "../tests/cases/configs/gpt-oss-20b.json"
        ))
        .unwrap();
        let pairs = c.pairs();
        let (input, errors) =
            crate::params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        let a = Architecture {
            layers: 2,
            ..input.arch.unwrap()
        };
        assert!(gpt_oss(&a));
        let kept = |att, ckpt| {
            let d = decoder_activations(&a, 512, 2, 2, ckpt, att, None).unwrap();
            assert_eq!(d.assumed_because, None, "{att:?}");
            assert!(d.formula.contains("sinks"), "{}", d.formula);
            d.kept
        };
        // gpumem-agent trace, transformers 5.23 on the meta device, 2 of its 24 layers
        // (one sliding, one full), 2 × 512 tokens, bf16.
        assert_eq!(kept(AttentionImpl::Eager, false), 775_223_296);
        assert_eq!(kept(AttentionImpl::Eager, true), 43_467_776);
        // SDPA asked runs eager (gpt-oss refuses SDPA).
        assert_eq!(kept(AttentionImpl::Sdpa, false), 775_223_296);
        // Flash (no backward with sinks) and the memory-efficient kernel (SDPA refused):
        // refused, naming why, with adapters or without.
        let lora = |targets: &str| Adapters {
            targets: LoraTargets::parse("t", targets).unwrap(),
            rank: 16,
            value: 4,
            dropout: false,
            base_keeps_inputs: false,
            base_4bit: false,
            fp32_hidden: false,
            autocast: false,
            weight_copies: 0,
            modules: ModulesToSave::default(),
        };
        for (att, word) in [
            (AttentionImpl::Flash, "backward with sinks"),
            (AttentionImpl::Efficient, "refuses SDPA"),
        ] {
            for ad in [None, Some(lora("q,v"))] {
                let err = decoder_activations(&a, 512, 2, 2, false, att, ad.as_ref())
                    .expect_err("refused")
                    .to_string();
                assert!(err.contains(word), "{att:?}: {err}");
            }
        }
        // LoRA (PEFT's fp32 adapters, rank 16) on q, v and on q, k, v, o (PEFT's
        // all-linear on gpt-oss): the meta trace's kept bytes, SDPA asked as eager.
        let lora_kept = |targets: &str, att, ckpt| {
            let d = decoder_activations(&a, 512, 2, 2, ckpt, att, Some(&lora(targets))).unwrap();
            assert_eq!(d.assumed_because, None, "{targets}");
            assert!(d.formula.contains("frozen base"), "{}", d.formula);
            d
        };
        assert_eq!(
            lora_kept("q,v", AttentionImpl::Eager, false).kept,
            602_793_984
        );
        assert_eq!(
            lora_kept("q,v", AttentionImpl::Sdpa, false).kept,
            602_793_984
        );
        assert_eq!(
            lora_kept("q,k,v,o", AttentionImpl::Eager, false).kept,
            668_592_128
        );
        // What the trace's request does not express, traced by building PEFT's model so:
        // adapters in bf16 (lora_A reads the projection's own input: the first norm's
        // output, the attention's contiguous output), a dropout (its mask kept only
        // where the adapter's input needs a gradient: not on the first layer's q, v)
        // and a trained embedding (the first layer's input then needs a gradient).
        let with = |targets: &str, f: &dyn Fn(Adapters) -> Adapters| {
            let d = decoder_activations(
                &a,
                512,
                2,
                2,
                false,
                AttentionImpl::Eager,
                Some(&f(lora(targets))),
            )
            .unwrap();
            assert_eq!(d.assumed_because, None, "{targets}");
            d.kept
        };
        let bf16 = |ad: Adapters| Adapters { value: 2, ..ad };
        assert_eq!(with("q,k,v,o", &bf16), 592_570_368);
        assert_eq!(with("o", &bf16), 487_647_232);
        assert_eq!(with("q,v,lm_head", &bf16), 573_204_480);
        let dropout = |ad: Adapters| Adapters {
            dropout: true,
            ..ad
        };
        assert_eq!(with("q,v", &dropout), 608_692_224);
        let embed = |ad: Adapters| Adapters {
            dropout: true,
            modules: ModulesToSave {
                embed: true,
                lm_head: false,
            },
            ..ad
        };
        assert_eq!(with("q,k,v,o", &embed), 706_476_032);
        let ckpt = lora_kept("q,k,v,o", AttentionImpl::Eager, true);
        assert_eq!(ckpt.kept, 25_773_056);
        // Beside what the forward keeps, one layer recomputed: below the full
        // fine-tune's.
        assert!(ckpt.bytes > ckpt.kept);
        let full = decoder_activations(&a, 512, 2, 2, true, AttentionImpl::Eager, None).unwrap();
        assert!(ckpt.bytes < full.bytes);
        // fp32 compute, the MLP's targets (`all` counts the experts' gate, up and down,
        // which PEFT adapts only through target_parameters), QLoRA and autocast:
        // assumed, naming why.
        for (value, ad, word) in [
            (4, lora("q,v"), "fp32"),
            (2, lora("all"), "3-D parameters"),
            (
                2,
                Adapters {
                    base_4bit: true,
                    fp32_hidden: false,
                    ..lora("q,v")
                },
                "QLoRA",
            ),
            (
                2,
                Adapters {
                    autocast: true,
                    ..lora("q,v")
                },
                "autocast",
            ),
        ] {
            let why =
                decoder_activations(&a, 512, 2, value, false, AttentionImpl::Eager, Some(&ad))
                    .unwrap()
                    .assumed_because;
            assert!(why.is_some_and(|w| w.contains(word)), "{word}: {why:?}");
        }
        // Without the sinks the layout is no longer gpt-oss's: assumed.
        let no_sinks = Architecture {
            attn_sinks: false,
            ..a
        };
        assert!(!gpt_oss(&no_sinks));
        assert!(
            decoder_activations(&no_sinks, 512, 2, 2, false, AttentionImpl::Eager, None)
                .unwrap()
                .assumed_because
                .is_some()
        );
    }

    /// Llama 4's block (every expert over every token) is derived: equal to the trace
    /// of Scout's text model at four layers; without the block's fact it stays assumed.
    #[test]
    fn llama4_prefill_is_derived_and_equals_its_trace() {
        let c = crate::import::config::parse_config(
            r#"{"model_type":"llama4_text","hidden_size":5120,"intermediate_size":8192,
            "intermediate_size_mlp":16384,"num_attention_heads":40,"num_key_value_heads":8,
            "head_dim":128,"num_hidden_layers":4,"num_local_experts":16,
            "num_experts_per_tok":1,"interleave_moe_layer_step":1,"vocab_size":202048,
            "attention_chunk_size":8192,"use_qk_norm":true,"rope_theta":500000.0,
            "tie_word_embeddings":false}"#,
        )
        .unwrap();
        let pairs = c.pairs();
        let (input, errors) =
            crate::params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        let a = input.arch.unwrap();
        let m = a.moe.unwrap();
        assert!(m.dense_dispatch && m.shared_experts == 1);
        let peak = |a: &Architecture, seq: u64, attention: AttentionImpl| {
            let p = decoder_prefill(a, seq, 1, 2, attention, input.sliding_window, false).unwrap();
            (p.intermediates + p.scores + p.logits, p.assumed_because)
        };
        // gpumem-agent trace, transformers 5.23 on the meta device, bf16, 1 sequence: the
        // last MoE layer's experts (beyond one 8 192-token chunk with SDPA's chunked
        // mask), and at 16 384 tokens under eager the last (NoPE) layer's attention.
        assert_eq!(peak(&a, 512, AttentionImpl::Sdpa), (647_278_592, None));
        assert_eq!(peak(&a, 512, AttentionImpl::Eager), (669_298_688, None));
        assert_eq!(peak(&a, 9000, AttentionImpl::Sdpa), (11_458_945_536, None));
        assert_eq!(
            peak(&a, 16_384, AttentionImpl::Eager),
            (45_039_026_176, None)
        );
        assert!(peak(&a, 512, AttentionImpl::Flash).1.is_some());
        let other = Architecture {
            moe: Some(Moe {
                dense_dispatch: false,
                ..m
            }),
            ..a
        };
        assert!(peak(&other, 512, AttentionImpl::Sdpa).1.is_some());
    }

    /// DeepSeek-V2's and V3's latent attention and MoE are derived (their routers, the
    /// ungated shared experts); V3.2's indexer and LoRA on latent attention stay
    /// assumed.
    #[test]
    fn deepseeks_latent_attention_and_moe_are_derived_and_other_routers_assumed() {
        let c = crate::import::config::parse_config(include_str!(
            "../tests/cases/configs/deepseek-v2-lite.json"
        ))
        .unwrap();
        let pairs = c.pairs();
        let (input, errors) =
            crate::params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        let a = input.arch.unwrap();
        let m = a.moe.unwrap();
        assert!(a.mla.is_some() && m.shared_experts == 2 && !m.shared_gate);
        let full = decoder_activations(&a, 512, 2, 2, false, AttentionImpl::Flash, None).unwrap();
        assert_eq!(full.assumed_because, None);
        assert!(full.formula.contains("MLA"), "{}", full.formula);
        // gpumem-agent trace, transformers 5.23 on the meta device, 2 × 512 tokens, bf16.
        assert_eq!(full.kept, 5_872_695_296);
        // The group-limited router keeps its boolean mask, E per token, in each MoE layer.
        let grouped = Architecture {
            moe: Some(Moe {
                group_limited: true,
                ..m
            }),
            ..a
        };
        let g =
            decoder_activations(&grouped, 512, 2, 2, false, AttentionImpl::Flash, None).unwrap();
        assert_eq!(g.kept - full.kept, 26 * block(&[1024, m.experts]));
        // DeepSeek-V3's router (its fp32 correction bias marks it): its sigmoid in
        // place of the softmax, and the normalisation's sum and weights' copy, in each
        // MoE layer; the rotary pair in 16 bits takes the complex table's bytes.
        let v3 = Architecture {
            moe: Some(Moe {
                correction_bias: true,
                ..m
            }),
            ..a
        };
        let d3 = decoder_activations(&v3, 512, 2, 2, false, AttentionImpl::Flash, None).unwrap();
        assert_eq!(d3.assumed_because, None);
        assert_eq!(
            d3.kept - full.kept,
            26 * (block(&[1024, 4, m.active]) + block(&[1024, 4]))
        );
        // DeepSeek-V3.2's indexer: assumed.
        let c = crate::import::config::parse_config(include_str!(
            "../tests/cases/configs/deepseek-v3.2.json"
        ))
        .unwrap();
        let pairs = c.pairs();
        let (input, errors) =
            crate::params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        let v32 = input.arch.unwrap();
        assert!(v32.indexer.is_some());
        let why = decoder_activations(&v32, 512, 2, 2, false, AttentionImpl::Flash, None)
            .unwrap()
            .assumed_because;
        assert!(why.is_some_and(|w| w.contains("indexer")), "{why:?}");
        // Kimi-K2 (its own code, no rotary buffers counted), a 16-bit router bias and
        // LoRA on the latent attention: assumed, naming why.
        for other in [
            Architecture {
                rope_tables: 0,
                ..v3
            },
            Architecture {
                moe: Some(Moe {
                    router_bias: true,
                    ..m
                }),
                ..a
            },
        ] {
            let why = decoder_activations(&other, 512, 2, 2, false, AttentionImpl::Flash, None)
                .unwrap()
                .assumed_because
                .unwrap();
            assert!(why.contains("mixture of experts"), "{why}");
        }
        let lora = decoder_activations(
            &a,
            512,
            2,
            2,
            false,
            AttentionImpl::Flash,
            Some(&Adapters {
                targets: LoraTargets::parse("lora-targets", "q,v").unwrap(),
                rank: 16,
                value: 4,
                dropout: false,
                base_keeps_inputs: false,
                base_4bit: false,
                fp32_hidden: false,
                autocast: false,
                weight_copies: 0,
                modules: ModulesToSave::default(),
            }),
        )
        .unwrap();
        assert!(
            lora.assumed_because
                .is_some_and(|w| w.contains("latent attention")),
            "{:?}",
            lora.assumed_because
        );
    }

    /// Qwen2-MoE's gated shared expert (the `qwen1.5-moe-a2.7b` preset) is derived:
    /// per MoE layer it adds to the plain layout the shared MLP (4·v·s, frozen 3·v·s),
    /// its down output and the sigmoid gate, and the router's 16-bit gathered weights;
    /// an ungated shared expert (DeepSeek's, Llama-4's kin) stays assumed.
    #[test]
    fn qwen2_moes_gated_shared_expert_is_derived_and_an_ungated_one_assumed() {
        let p = crate::presets::find("qwen1.5-moe-a2.7b").unwrap();
        let (input, errors) = crate::params::from_pairs(p.pairs.iter().copied());
        assert!(errors.is_empty(), "{errors:?}");
        let a = input.arch.unwrap();
        let m = a.moe.unwrap();
        assert!(m.shared_gate && m.shared_experts == 1);
        let full = decoder_activations(&a, 512, 2, 2, false, AttentionImpl::Flash, None).unwrap();
        assert_eq!(full.assumed_because, None);
        assert!(full.formula.contains("shared expert"), "{}", full.formula);
        // Against the same layout without its shared expert, with fp32 gathered
        // weights: the shared terms, less the weights' 2 B a pair, in every layer.
        let (t, v, s, h) = (1024, 2, m.shared_intermediate, a.hidden);
        let plain = Architecture {
            moe: Some(Moe {
                shared_experts: 0,
                shared_gate: false,
                ..m
            }),
            ..a
        };
        let without =
            decoder_activations(&plain, 512, 2, 2, false, AttentionImpl::Flash, None).unwrap();
        assert_eq!(without.assumed_because, None);
        let pairs = t * m.active;
        let shared = 4 * t * v * s + t * v * h + block(&[t, v]) + pairs * v - pairs * 4;
        assert_eq!(full.kept - without.kept, a.layers * shared);
        // A shared expert without the gate: assumed, naming why.
        let ungated = Architecture {
            moe: Some(Moe {
                shared_gate: false,
                ..m
            }),
            ..a
        };
        let why = decoder_activations(&ungated, 512, 2, 2, false, AttentionImpl::Flash, None)
            .unwrap()
            .assumed_because
            .unwrap();
        assert!(why.contains("shared experts"), "{why}");
    }
}
