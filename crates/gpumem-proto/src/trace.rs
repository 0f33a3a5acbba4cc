//! The trace document (`gpumem.trace/v1`): what `gpumem-agent trace` learned by running
//! the model's own code on PyTorch's `meta` device — allocated bytes phase by phase,
//! reserved bytes from a model of the CUDA caching allocator, and what was live at each
//! phase's peak, by category. `schemas/trace.v1.schema.json` is generated from these
//! types.
//!
//! Nothing here was measured on a GPU: every figure follows from the shapes and dtypes
//! of the tensors the model's code creates, and from the allocator's published rules.

use serde::{Deserialize, Serialize};

/// The `schema` value of a trace document.
pub const TRACE_SCHEMA: &str = "gpumem.trace/v1";

/// A trace of one workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TraceDocument {
    /// Always [`TRACE_SCHEMA`].
    pub schema: String,
    /// The config's `model_type`.
    pub model_type: String,
    /// The workload traced.
    pub workload: TraceWorkload,
    /// Parameters of the model as built (tied weights counted once; LoRA adapters and
    /// the packed NF4 values included, as the framework counts them).
    pub parameters: u64,
    /// Parameters that receive gradients (0 for inference).
    pub trainable_parameters: u64,
    /// Vocabulary size (rows of the output embedding): a tensor whose last dimension is
    /// this counts as logits.
    pub vocab: u64,
    /// The phases in order.
    pub phases: Vec<TracePhase>,
    /// Training: what the last step's forward kept for the backward, by the operator
    /// that produced it, largest first (logits apart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub activations_by_op: Vec<OpBytes>,
    /// With `--memory-history`: every allocation and free of the trace as the CUDA
    /// allocator's history would hold it (`gpumem.history/v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<crate::history::MemoryHistory>,
    /// With `--memory-history`: each phase's peak attributed to the estimate's lines
    /// from the history alone (lifetimes, stacks, sizes), as `run --memory-history`
    /// attributes a GPU's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<crate::history::Attribution>,
    /// Versions of what ran the trace.
    pub versions: TraceVersions,
    /// Whether the allocator model grew expandable segments.
    pub expandable_segments: bool,
    /// What the trace simplified, in words.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Wall time of the trace in the Python process, milliseconds.
    pub wall_time_ms: u64,
}

/// The workload as the probe ran it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TraceWorkload {
    /// `none` (inference), `full`, `lora` or `qlora`.
    pub train: String,
    /// Sequences per step (the micro-batch) or per generation.
    pub sequences: u64,
    /// Tokens per sequence (training) or prompt tokens (inference).
    pub context: u64,
    /// Tokens generated per sequence (inference).
    pub generate: u64,
    /// Compute dtype: `bfloat16`, `float16` or `float32`.
    pub dtype: String,
    /// Attention kernel: `flash`, `efficient`, `sdpa` (as CUDA would choose) or `eager`.
    pub attention: String,
    /// Optimizer (training).
    pub optimizer: String,
    /// fp32 master weights beside 16-bit weights (full training).
    pub master_weights: bool,
    /// Activation checkpointing of every decoder layer.
    pub checkpointing: bool,
    /// What a checkpointed layer saves, where not only its input: `op` (torchtitan's
    /// selective op policy); absent for the whole-layer recompute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpointing_policy: Option<String>,
    /// LoRA rank (LoRA and QLoRA).
    pub lora_rank: u64,
    /// The forward and loss under `torch.autocast` in this dtype (`bfloat16`,
    /// `float16`; LoRA and QLoRA, as transformers' `Trainer` with `bf16`/`fp16` runs
    /// them), traced through the probe's stand-in for autocast's cast policy; absent
    /// without autocast.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autocast: Option<String>,
    /// LoRA target modules (`q_proj`, … or `all`).
    pub lora_targets: Vec<String>,
    /// Each decoder block under `torch.compile` (as torchtitan's `apply_compile`
    /// wraps them): the step keeps what AOTAutograd and Inductor's partitioner
    /// (`min_cut_rematerialization_partition`) save, each partitioned graph run
    /// operator by operator without Inductor's code generation, whose fused kernels'
    /// internal buffers and memory planning are not counted; absent (false) for the
    /// eager step.
    #[serde(default, skip_serializing_if = "is_false")]
    pub compile: bool,
    /// QLoRA: the 4-bit model prepared by PEFT's `prepare_model_for_kbit_training`
    /// (its embeddings, norms and output projection cast to fp32), as the QLoRA recipes
    /// run it; absent (false) for a base left in the compute dtype.
    #[serde(default, skip_serializing_if = "is_false")]
    pub kbit_prepared: bool,
    /// Logits kept in prefill: `last` or `all`.
    pub logits: String,
    /// The allocator model's `expandable_segments`.
    pub expandable_segments: bool,
    /// One data-parallel rank's step (`--gpus`): the rank, its peers and how the model
    /// is wrapped; absent for one GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<TraceRanks>,
}

/// Which rank of a data-parallel job a trace follows, and how the model is wrapped. The
/// probe runs that rank alone, under torch.distributed's fake process group (`FakeStore`
/// and the `fake` backend: collectives that move no data), with the framework's own
/// wrapping on PyTorch's `meta` device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TraceRanks {
    /// Ranks in the job (`--gpus`).
    pub world_size: u64,
    /// The rank traced (0 ≤ rank < world size).
    pub rank: u64,
    /// Nodes the ranks are spread over (`--nodes`).
    pub nodes: u64,
    /// `ddp` (DistributedDataParallel), `fsdp` (FSDP2 `fully_shard` on every decoder
    /// block and the root) or `zero` (DeepSpeed ZeRO, stage in `zero_stage`).
    pub scheme: String,
    /// DeepSpeed ZeRO's stage (1, 2 or 3) under `zero`; 0 otherwise.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zero_stage: u8,
    /// FSDP: the blocks free their gathered parameters after the forward (`full`,
    /// `hybrid`); false for `grad-op`.
    pub reshard_after_forward: bool,
    /// FSDP: shard within a node, replicate across nodes (HSDP's 2-D mesh).
    pub hybrid: bool,
    /// FSDP: `MixedPrecisionPolicy.reduce_dtype` (`float32`, `bfloat16`), or the
    /// gradients' own dtype when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduce_dtype: Option<String>,
    /// DDP: `gradient_as_bucket_view`.
    pub gradient_as_bucket_view: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

impl TraceWorkload {
    /// The workload in words, as `run` and `serve` report what they traced.
    pub fn words(&self) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        if self.train == "none" {
            format!(
                "inference, {} × {} prompt tokens + {} generated",
                self.sequences, self.context, self.generate
            )
        } else {
            format!(
                "{} training, {} × {} tokens, {}, master weights {}, checkpointing {}{}{}{}",
                self.train,
                self.sequences,
                self.context,
                self.optimizer,
                on(self.master_weights),
                match (self.checkpointing, self.checkpointing_policy.as_deref()) {
                    (true, Some(p)) => format!("on ({p} policy)"),
                    (c, _) => on(c).into(),
                },
                if self.kbit_prepared {
                    ", prepared for k-bit training (fp32 embeddings and norms)"
                } else {
                    ""
                },
                match (&self.autocast, self.compile) {
                    (Some(t), true) => format!(", autocast {t}, compiled"),
                    (Some(t), false) => format!(", autocast {t}"),
                    (None, true) =>
                        ", compiled (Inductor's partition, without its code generation)".into(),
                    (None, false) => String::new(),
                },
                self.ranks
                    .as_ref()
                    .map(|r| format!(
                        ", rank {} of {} ({}{})",
                        r.rank,
                        r.world_size,
                        r.scheme,
                        match (r.scheme.as_str(), r.hybrid, r.reshard_after_forward) {
                            ("ddp", ..) => "",
                            (_, true, _) => " hybrid",
                            (_, _, true) => " full",
                            _ => " grad-op",
                        }
                    ))
                    .unwrap_or_default()
            )
        }
    }
}

/// One phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TracePhase {
    /// `model_load`, `forward`, `backward`, `optimizer_step`, `prefill` or `decode`.
    pub name: String,
    /// Training step (0: optimizer state is created; 1: steady state); absent otherwise.
    pub step: Option<u32>,
    /// Allocated bytes (blocks as the caching allocator rounds them) at the phase's start.
    pub allocated_start_bytes: u64,
    /// Allocated bytes at the phase's end.
    pub allocated_end_bytes: u64,
    /// Highest allocated bytes during the phase.
    pub allocated_peak_bytes: u64,
    /// Reserved bytes (the allocator model's segments) at the phase's end.
    pub reserved_end_bytes: u64,
    /// Highest reserved bytes during the phase.
    pub reserved_peak_bytes: u64,
    /// Highest bytes of logits (and their copies and gradients) live during the phase,
    /// whether or not at the allocated peak.
    pub logits_peak_bytes: u64,
    /// What was live at the allocated peak, by category (they add up to the peak).
    pub at_peak: CategoryBytes,
    /// A rank's trace: the highest bytes each of the framework's buffers held at once
    /// during the phase, whether or not at the allocated peak — `all_gather` (FSDP2's
    /// gathered parameters and all-gather buffers), `reduce_scatter` (the unsharded
    /// gradients a reduce-scatter takes, its input and output), `buckets` (DDP's
    /// gradient buckets).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub collectives_peak_bytes: std::collections::BTreeMap<String, u64>,
}

/// Live bytes by category.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CategoryBytes {
    /// Parameters and buffers (frozen or trainable, adapters included).
    pub parameters: u64,
    /// fp32 master copies of 16-bit parameters.
    pub master_weights: u64,
    /// Parameter gradients.
    pub gradients: u64,
    /// Optimizer state.
    pub optimizer_state: u64,
    /// Kept from the forward for the backward (logits apart).
    pub activations: u64,
    /// Tensors whose last dimension is the vocabulary: logits, their fp32 copies and
    /// their gradients.
    pub logits: u64,
    /// The KV cache (inference).
    pub kv_cache: u64,
    /// A rank's trace: the data-parallel framework's own buffers (FSDP2's gathered
    /// parameters and reduce-scatter buffers, DDP's gradient buckets).
    #[serde(default)]
    pub collectives: u64,
    /// Everything else: intermediates freed within the phase.
    pub temporaries: u64,
}

impl CategoryBytes {
    /// The sum of every category, saturating (each is at most the peak, a `u64`).
    pub fn total(&self) -> u64 {
        [
            self.parameters,
            self.master_weights,
            self.gradients,
            self.optimizer_state,
            self.activations,
            self.logits,
            self.kv_cache,
            self.collectives,
            self.temporaries,
        ]
        .iter()
        .fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// Bytes that one operator's outputs hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct OpBytes {
    /// The ATen operator (`mm`, `_scaled_dot_product_flash_attention`, …).
    pub op: String,
    /// Tensors (storages) it produced that are still kept.
    pub tensors: u64,
    /// Their bytes, as the allocator rounds them.
    pub bytes: u64,
}

/// What ran the trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TraceVersions {
    /// Python.
    pub python: String,
    /// PyTorch.
    pub torch: String,
    /// transformers.
    pub transformers: String,
    /// peft (LoRA and QLoRA only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peft: Option<String>,
}

impl TraceDocument {
    /// The phase with the highest allocated peak (the first such, in order).
    pub fn peak_phase(&self) -> Option<&TracePhase> {
        self.phases
            .iter()
            .fold(None, |best: Option<&TracePhase>, p| match best {
                Some(b) if b.allocated_peak_bytes >= p.allocated_peak_bytes => Some(b),
                _ => Some(p),
            })
    }

    /// The phase `name` of `step`.
    pub fn phase(&self, name: &str, step: Option<u32>) -> Option<&TracePhase> {
        self.phases
            .iter()
            .find(|p| p.name == name && p.step == step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(name: &str, step: Option<u32>, peak: u64) -> TracePhase {
        TracePhase {
            name: name.into(),
            step,
            allocated_start_bytes: 0,
            allocated_end_bytes: 0,
            allocated_peak_bytes: peak,
            reserved_end_bytes: 0,
            reserved_peak_bytes: 0,
            logits_peak_bytes: 0,
            at_peak: CategoryBytes::default(),
            collectives_peak_bytes: Default::default(),
        }
    }

    #[test]
    fn the_peak_phase_is_the_first_highest() {
        let doc = TraceDocument {
            schema: TRACE_SCHEMA.into(),
            model_type: "llama".into(),
            workload: TraceWorkload {
                train: "full".into(),
                sequences: 1,
                context: 8,
                generate: 0,
                dtype: "bfloat16".into(),
                attention: "flash".into(),
                optimizer: "adamw".into(),
                master_weights: false,
                checkpointing: false,
                checkpointing_policy: None,
                lora_rank: 16,
                autocast: None,
                lora_targets: vec![],
                kbit_prepared: false,
                compile: false,
                logits: "last".into(),
                expandable_segments: false,
                ranks: None,
            },
            parameters: 1,
            trainable_parameters: 1,
            vocab: 2,
            phases: vec![
                phase("forward", Some(0), 5),
                phase("backward", Some(0), 9),
                phase("backward", Some(1), 9),
            ],
            activations_by_op: vec![],
            history: None,
            attribution: None,
            versions: TraceVersions {
                python: "3".into(),
                torch: "2".into(),
                transformers: "5".into(),
                peft: None,
            },
            expandable_segments: false,
            notes: vec![],
            wall_time_ms: 1,
        };
        let p = doc.peak_phase().unwrap();
        assert_eq!((p.name.as_str(), p.step), ("backward", Some(0)));
        assert_eq!(
            doc.phase("forward", Some(0)).unwrap().allocated_peak_bytes,
            5
        );
        let text = serde_json::to_string(&doc).unwrap();
        assert!(
            !text.contains("activations_by_op"),
            "empty lists are left out"
        );
        let back: TraceDocument = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
    }

    /// The published JSON Schema is generated from these types; a stale file fails
    /// here. Regenerate with
    /// `GPUMEM_BLESS=1 cargo test -p gpumem-proto --features schema published_schema`.
    #[cfg(feature = "schema")]
    #[test]
    fn published_schema_matches_the_types() {
        crate::assert_published_schema(
            "trace.v1.schema.json",
            schemars::schema_for!(TraceDocument),
            format!(
                "{TRACE_SCHEMA}: `gpumem-agent trace --json`, a training step or a generation run on PyTorch's meta device (no GPU, no weights). Byte counts are raw integers in fields ending in _bytes, as the CUDA caching allocator would round them; nothing here is a GPU measurement."
            ),
        );
    }
}
