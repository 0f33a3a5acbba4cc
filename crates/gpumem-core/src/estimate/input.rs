//! The estimate's input: every field named like a CLI flag, its defaults and the
//! checks made before anything is counted.

use super::*;

/// What is trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrainMode {
    /// Inference only.
    #[default]
    None,
    /// Every parameter is trainable.
    Full,
    /// LoRA adapters on a frozen base.
    Lora,
    /// QLoRA: LoRA adapters on a base whose linear layers are bitsandbytes NF4
    /// (Dettmers et al. 2023); the adapters and their states are as LoRA's.
    Qlora,
}

impl TrainMode {
    /// The key's value: `none`, `full`, `lora` or `qlora` (as serde writes it).
    pub const fn name(self) -> &'static str {
        match self {
            TrainMode::None => "none",
            TrainMode::Full => "full",
            TrainMode::Lora => "lora",
            TrainMode::Qlora => "qlora",
        }
    }

    /// LoRA adapters on a frozen base (LoRA or QLoRA).
    pub const fn adapters(self) -> bool {
        matches!(self, TrainMode::Lora | TrainMode::Qlora)
    }
}

/// Which positions' logits the framework keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Logits {
    /// Only the last position (Hugging Face `generate` with `logits_to_keep=1`).
    #[default]
    Last,
    /// Every position of the prompt.
    All,
}

impl Logits {
    /// The key's value: `last` or `all` (as serde writes it).
    pub const fn name(self) -> &'static str {
        match self {
            Logits::Last => "last",
            Logits::All => "all",
        }
    }
}

/// FSDP's sharding of the model states across data-parallel ranks, by the names of
/// FSDP1's `ShardingStrategy` and FSDP2's `fully_shard(reshard_after_forward=…)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fsdp {
    /// No FSDP.
    #[default]
    None,
    /// `FULL_SHARD` / `reshard_after_forward=True`: parameters, gradients and
    /// optimizer states sharded over every data-parallel rank, each block's
    /// parameters freed after its forward and gathered again for its backward.
    Full,
    /// `HYBRID_SHARD` / a 2-D mesh: full sharding within a node, replicas across nodes.
    Hybrid,
    /// `SHARD_GRAD_OP` / `reshard_after_forward=False`: as full, but the gathered
    /// parameters stay from the forward through the backward.
    GradOp,
}

impl Fsdp {
    /// The key's value: `full`, `hybrid`, `grad-op` ("" for none).
    pub const fn name(self) -> &'static str {
        match self {
            Fsdp::None => "",
            Fsdp::Full => "full",
            Fsdp::Hybrid => "hybrid",
            Fsdp::GradOp => "grad-op",
        }
    }

    /// Reads the key's value.
    pub fn parse(field: &'static str, t: &str) -> Result<Fsdp, EstimateError> {
        match t.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "" | "none" | "no" | "off" => Ok(Fsdp::None),
            "full" | "full-shard" => Ok(Fsdp::Full),
            "hybrid" | "hybrid-shard" => Ok(Fsdp::Hybrid),
            "grad-op" | "shard-grad-op" => Ok(Fsdp::GradOp),
            other => Err(EstimateError::invalid(
                field,
                format!("{other:?}: use full, hybrid or grad-op"),
            )),
        }
    }
}

/// The pipeline schedule of a training run with `pp` > 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pipeline {
    /// 1F1B: the first stage holds min(pp, micro-batches) micro-batches in flight.
    #[default]
    OneFOneB,
    /// GPipe: every micro-batch's forward before the first backward.
    Gpipe,
}

impl Pipeline {
    /// The key's value: `gpipe` ("" for 1F1B, the default).
    pub const fn name(self) -> &'static str {
        match self {
            Pipeline::OneFOneB => "",
            Pipeline::Gpipe => "gpipe",
        }
    }
}

/// Where DeepSpeed (or FSDP) keeps what it offloads from the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Offload {
    /// Kept on the device.
    #[default]
    None,
    /// Host memory (pinned).
    Cpu,
    /// NVMe, through pinned host buffers.
    Nvme,
}

impl Offload {
    /// The key's value: `cpu`, `nvme` ("" for none).
    pub const fn name(self) -> &'static str {
        match self {
            Offload::None => "",
            Offload::Cpu => "cpu",
            Offload::Nvme => "nvme",
        }
    }

    /// Reads the key's value.
    pub fn parse(field: &'static str, t: &str) -> Result<Offload, EstimateError> {
        match t.trim().to_ascii_lowercase().as_str() {
            "" | "none" | "no" | "off" => Ok(Offload::None),
            "cpu" => Ok(Offload::Cpu),
            "nvme" => Ok(Offload::Nvme),
            other => Err(EstimateError::invalid(
                field,
                format!("{other:?}: use cpu or nvme"),
            )),
        }
    }
}

/// Every input of an estimate, named like the CLI flags (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct EstimateInput {
    /// Parameter-count mode: total parameters.
    pub parameters: Option<u64>,
    /// Parameter-count mode: bits per parameter (32, 16, 8, 4, 3, 2), mapped to a format.
    pub bits: Option<u32>,
    /// Storage format of the linear layers (or of everything in parameter-count mode).
    pub format: Option<StorageFormat>,
    /// Format of embeddings, lm_head, norms and biases (default bf16).
    pub keep_format: StorageFormat,
    /// Format of the attention projections (default: `format`); gpt-oss and many
    /// compressed-tensors checkpoints keep attention in bf16.
    pub attention_format: Option<StorageFormat>,
    /// The quantised formats were read from a compressed-tensors checkpoint
    /// (`"quant_method": "compressed-tensors"`), which transformers decompresses to the
    /// model's dtype at the first forward (see `estimate::weights::ct_decompressed`).
    pub compressed_tensors: bool,
    /// Compute / activation dtype (default bf16).
    pub compute_dtype: Dtype,
    /// Architecture mode.
    pub arch: Option<Architecture>,
    /// The KV cache's shape alone (method §4: layers, KV heads, head dim), when no
    /// full architecture is given; weights then come from `parameters` or are absent.
    pub kv_only: Option<KvDims>,
    /// Positions the model was trained for (`max_position_embeddings`); a longer
    /// context is warned about.
    pub max_position: Option<u64>,
    /// Positions the config's RoPE scaling reaches when they differ from
    /// `max_position` (Qwen2.5 with yarn ×4: 131 072 over 32 768 trained).
    pub rope_positions: Option<u64>,
    /// Prompt tokens one multimodal item (an image) takes, when the model has an
    /// encoder (vLLM profiles it with a batch of them).
    pub mm_item_tokens: Option<u64>,
    /// Values of one item as the processor hands them to the encoder (channels ×
    /// height × width).
    pub mm_item_values: Option<u64>,
    /// Seconds of the one audio clip each sequence holds, where the model has an
    /// audio tower (transformers' runtime; Qwen2-Audio's processor pads every clip to
    /// 30 s and cuts a longer one there).
    pub audio_seconds: Option<u64>,
    /// Exact tensors read from file headers.
    pub tensors: Option<TensorSummary>,
    /// The model counted by its own code (the agent's transformers count): its
    /// weights and KV lines replace the architecture's.
    pub counted: Option<Counted>,
    /// Sequences processed together (the batch; also the training micro-batch).
    pub sequences: u64,
    /// Beams per sequence in beam search (transformers' `generate(num_beams=k)`): the
    /// caches and the encoder's output are kept k times per sequence; 1: none.
    pub beams: u64,
    /// Prompt (prefill) tokens per sequence; for training, the sequence length.
    pub context: Option<u64>,
    /// Tokens generated per sequence after the prompt.
    pub generate: u64,
    /// KV-cache value type (default: the compute dtype).
    pub kv_dtype: Option<KvDtype>,
    /// Sliding-window size.
    pub sliding_window: Option<u64>,
    /// Layers that use the sliding window (default all, when a window is set).
    pub sliding_layers: Option<u64>,
    /// Static cache length (pre-allocated per sequence).
    pub static_cache: Option<u64>,
    /// Layers that keep a constant per-sequence state instead of a KV cache
    /// (Mamba / linear-attention layers of hybrid models); the rest keep KV.
    pub state_layers: u64,
    /// Bytes of that state per layer and sequence (e.g. Mamba-2: heads × head dim
    /// × d_state plus the convolution window, in the state's dtype).
    pub state_bytes: u64,
    /// Whose cache layout the recurrent-state and indexer lines follow: transformers'
    /// own (no engine named, or the transformers engine) or a serving engine's. Set
    /// from the engine flags by [`crate::inputs::read`] only (read it with
    /// [`EstimateInput::runtime`]), so no caller answers apart from them.
    pub(crate) runtime: CacheRuntime,
    /// Attention implementation (decides whether a tokens² score matrix exists).
    pub attention: AttentionImpl,
    /// Logits kept in prefill.
    pub logits: Logits,
    /// CUDA context + library workspaces per device, in MiB (assumed; `None` = inside the reserve).
    pub cuda_context_mib: Option<u64>,
    /// Training mode.
    pub train: TrainMode,
    /// Optimizer (training).
    pub optimizer: Optimizer,
    /// Gradient dtype (training; default: the compute dtype).
    pub grad_dtype: Option<Dtype>,
    /// Keep fp32 master weights (mixed precision).
    pub master_weights: bool,
    /// LoRA rank.
    pub lora_rank: u64,
    /// LoRA target projections, e.g. "q,k,v,o" or "all".
    pub lora_targets: String,
    /// The adapters' dtype: fp32 as PEFT keeps them (`autocast_adapter_dtype`), or the
    /// compute dtype as torchtune and LitGPT do.
    pub lora_dtype: Dtype,
    /// A dropout before each adapter (`lora_dropout` > 0).
    pub lora_dropout: bool,
    /// The step runs under `torch.autocast` in this 16-bit dtype (transformers'
    /// `Trainer` with `bf16=True` or `fp16=True` through accelerate), which decides the
    /// copy each adapter keeps of its input; `None`: no autocast.
    pub autocast: Option<Dtype>,
    /// The QLoRA base's 4-bit linear.
    pub qlora_kernel: QloraKernel,
    /// Full activation checkpointing.
    pub checkpointing: bool,
    /// What a checkpointed layer saves: its input only, or torchtitan's op policy.
    pub checkpointing_policy: CheckpointPolicy,
    /// The fine-tuning framework whose recipe runs the step; its defaults are applied
    /// to the keys not given (`params::from_pairs`).
    pub framework: Framework,
    /// How the loss is computed from the last hidden states.
    pub loss: Loss,
    /// The optimizer steps each parameter inside the backward as soon as its gradient
    /// is ready, and frees that gradient (torchtune's `optimizer_in_bwd`).
    pub optimizer_in_backward: bool,
    /// With checkpointing, every n-th layer is checkpointed and the others keep their
    /// activations (torchtune's selective `ac_option`); 1 (or 0): every layer.
    pub checkpointing_every: u64,
    /// Saved activations move to pinned host memory during the forward and come back
    /// for the backward (torchtune's `enable_activation_offloading`, unsloth's
    /// checkpointing).
    pub offload_activations: bool,
    /// Whole modules trained beside LoRA (PEFT's `modules_to_save`): `embed`, `lm_head`.
    pub modules_to_save: String,
    /// The caching allocator's `expandable_segments:True`.
    pub expandable_segments: bool,
    /// The generation of the card the run is judged on, where it sizes something the
    /// estimate holds (torch's cuBLAS workspace in a training step): `Some(true)` an
    /// sm_90 card, `Some(false)` another, `None` no card named — the larger (sm_90's)
    /// is counted. Set from `--card` by [`crate::inputs::read`] only (any of several
    /// cards sm_90: true; read it with [`EstimateInput::card_sm90`]).
    pub(crate) card_sm90: Option<bool>,
    /// Whether transformers keeps fp8 weights on the card(s) named
    /// ([`crate::catalogue::cards_fp8`]; `None`: no card, or one of unknown generation).
    /// Set from `--card` by [`crate::inputs::read`] only.
    pub(crate) card_fp8: Option<bool>,
    /// DeepSpeed ZeRO stage over the data-parallel ranks (0: none; 1 optimizer states,
    /// 2 + gradients, 3 + parameters).
    pub zero: u8,
    /// FSDP's sharding over the data-parallel ranks.
    pub fsdp: Fsdp,
    /// ZeRO's `offload_optimizer` device.
    pub offload_optimizer: Offload,
    /// ZeRO-3's `offload_param` device, or FSDP's CPU offload (`cpu`).
    pub offload_param: Offload,
    /// DDP's `gradient_as_bucket_view`: gradients are views into the buckets.
    pub ddp_bucket_view: bool,
    /// The dtype gradients are reduced in (FSDP2's `reduce_dtype`; default: the
    /// gradients' dtype).
    pub reduce_dtype: Option<Dtype>,
    /// Reserve per device in whole GiB (method §2: a preparation hypothesis).
    pub reserve_gib: u64,
    /// Reserve per device in bytes (overrides `reserve-gib`, e.g. an observed overhead).
    pub reserve_bytes: Option<u64>,
    /// The host's RAM per node, bytes (`--ram 64GiB`): what the host memory the answer
    /// puts there (llama.cpp's CPU buffer, offloaded states) is judged against.
    pub ram: Option<u64>,
    /// GPUs in total.
    pub gpus: u64,
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Pipeline stages.
    pub pp: u64,
    /// Nodes the GPUs are spread over (equal numbers per node).
    pub nodes: u64,
    /// Megatron's sequence parallelism beside tensor parallelism: the activations
    /// are split over the tp ranks too.
    pub sp: bool,
    /// Context-parallel degree (training): each sequence split over `cp` ranks,
    /// taken from the data-parallel ranks.
    pub cp: u64,
    /// Expert-parallel degree (training a MoE): the routed experts split over `ep`
    /// ranks, taken from the data-parallel ranks.
    pub ep: u64,
    /// The pipeline schedule (training with pp > 1).
    pub pipeline: Pipeline,
    /// Micro-batches per optimizer step (training with pp > 1; default: at least pp).
    pub micro_batches: Option<u64>,
}

impl Default for EstimateInput {
    fn default() -> Self {
        EstimateInput {
            parameters: None,
            bits: None,
            format: None,
            keep_format: StorageFormat::BF16,
            attention_format: None,
            compressed_tensors: false,
            compute_dtype: Dtype::Bf16,
            arch: None,
            kv_only: None,
            max_position: None,
            rope_positions: None,
            mm_item_tokens: None,
            mm_item_values: None,
            audio_seconds: None,
            tensors: None,
            counted: None,
            sequences: 1,
            beams: 1,
            context: None,
            generate: 0,
            kv_dtype: None,
            sliding_window: None,
            sliding_layers: None,
            static_cache: None,
            state_layers: 0,
            state_bytes: 0,
            runtime: CacheRuntime::Transformers,
            attention: AttentionImpl::Sdpa,
            logits: Logits::Last,
            cuda_context_mib: None,
            train: TrainMode::None,
            optimizer: Optimizer::Adamw,
            grad_dtype: None,
            master_weights: true,
            lora_rank: 16,
            lora_targets: "q,k,v,o".into(),
            lora_dtype: Dtype::F32,
            lora_dropout: false,
            autocast: None,
            qlora_kernel: QloraKernel::Bnb,
            checkpointing: false,
            checkpointing_policy: CheckpointPolicy::Layer,
            framework: Framework::Unnamed,
            loss: Loss::Full,
            optimizer_in_backward: false,
            checkpointing_every: 1,
            offload_activations: false,
            modules_to_save: String::new(),
            expandable_segments: false,
            card_sm90: None,
            card_fp8: None,
            zero: 0,
            fsdp: Fsdp::None,
            offload_optimizer: Offload::None,
            offload_param: Offload::None,
            ddp_bucket_view: false,
            reduce_dtype: None,
            reserve_gib: 4,
            reserve_bytes: None,
            ram: None,
            gpus: 1,
            tp: 1,
            pp: 1,
            nodes: 1,
            sp: false,
            cp: 1,
            ep: 1,
            pipeline: Pipeline::OneFOneB,
            micro_batches: None,
        }
    }
}

impl EstimateInput {
    /// Whose cache layout the recurrent-state and indexer lines follow (the engine
    /// flags', settled by [`crate::inputs::read`]).
    pub fn runtime(&self) -> CacheRuntime {
        self.runtime
    }

    /// The generation of the card a training step's cuBLAS workspaces follow
    /// (`--card`'s, settled by [`crate::inputs::read`]; `None`: no card named).
    pub fn card_sm90(&self) -> Option<bool> {
        self.card_sm90
    }

    /// Whether transformers keeps fp8 weights on the card(s) named (`None`: no card).
    pub fn card_fp8(&self) -> Option<bool> {
        self.card_fp8
    }

    /// The longest sequence the model serves as configured: the positions its
    /// RoPE scaling reaches, else those it was trained for.
    pub fn position_limit(&self) -> Option<u64> {
        self.rope_positions.or(self.max_position)
    }

    /// An encoder: the reader's (`encoder`) or one counted by its own code, built bare.
    pub fn is_encoder(&self) -> bool {
        self.arch.is_some_and(|a| a.encoder) || self.counted.as_ref().is_some_and(|c| c.encoder)
    }

    /// An encoder-decoder: the reader's (`encoder-decoder-params`) or one counted by its
    /// own code with its cross-attention cache.
    pub fn is_encoder_decoder(&self) -> bool {
        self.arch.is_some_and(|a| a.encdec_params > 0)
            || self.counted.as_ref().is_some_and(|c| c.cross.is_some())
    }
}

/// The KV cache's dimensions without the rest of the architecture (method §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvDims {
    /// Attention layers.
    pub layers: u64,
    /// KV heads per layer.
    pub kv_heads: u64,
    /// Width of one head.
    pub head_dim: u64,
}

/// Checks ranges that cut across fields.
pub(super) fn validate(i: &EstimateInput) -> Result<(), EstimateError> {
    let positive = [
        ("sequences", i.sequences),
        ("beams", i.beams),
        ("gpus", i.gpus),
        ("tp", i.tp),
        ("pp", i.pp),
        ("nodes", i.nodes),
        ("cp", i.cp),
        ("ep", i.ep),
        ("micro-batches", i.micro_batches.unwrap_or(1)),
    ];
    for (f, v) in positive {
        if v == 0 {
            return Err(EstimateError::invalid(f, "must be at least 1"));
        }
        if v > MAX_DIM {
            return Err(EstimateError::invalid(f, "absurdly large"));
        }
    }
    if i.beams > 1 {
        // Beam search is generation's: a training step, an encoder's forward and a
        // model counted by its own code (whose cache lines are its own measure) have
        // no beams modelled.
        let refused = if i.train != TrainMode::None {
            Some("beam search is generation's: a training step has no beams")
        } else if i.is_encoder() {
            Some("an encoder generates nothing: beam search has no beams to keep")
        } else if i.counted.is_some() {
            Some(
                "beam search is modelled from the architecture's caches, not over a model counted by its own code",
            )
        } else {
            None
        };
        if let Some(why) = refused {
            return Err(EstimateError::invalid("beams", why));
        }
    }
    if i.train != TrainMode::None && i.is_encoder() {
        // An encoder's fine-tuning (sentence-transformers' losses over pooled
        // embeddings, a classifier's head) keeps other tensors than a decoder's
        // language-model step: no figure rather than a decoder's.
        return Err(EstimateError::invalid(
            "train",
            "training an encoder (embedding or classifier fine-tuning) is not modelled: its loss is no language model's; the encoder's inference is",
        ));
    }
    if i.is_encoder_decoder() {
        if i.train != TrainMode::None {
            return Err(EstimateError::invalid(
                "train",
                "training an encoder-decoder is not modelled (its encoder's and decoder's activations are not derived); its generation is",
            ));
        }
        // A counted one is counted tensor by tensor: its format is placed as any
        // counted model's.
        if i.arch.is_some_and(|a| a.encdec_params > 0)
            && i.format
                .is_some_and(|f| !matches!(f, StorageFormat::Dense { .. }))
        {
            return Err(EstimateError::invalid(
                "format",
                "an encoder-decoder's stacks are counted as one, not tensor by tensor: a quantised format's norms, biases and scales are not placed (give a dense dtype, or its safetensors header)",
            ));
        }
        if i.pp > 1 {
            return Err(EstimateError::invalid(
                "pp",
                "pipeline parallelism is not modelled for an encoder-decoder (where its encoder sits is not derived): give --pp 1",
            ));
        }
        validate_encdec_tp(i)?;
    }
    // Both are at most MAX_DIM (checked above): the product cannot saturate.
    if !i.gpus.is_multiple_of(i.tp.saturating_mul(i.pp)) {
        return Err(EstimateError::invalid(
            "gpus",
            format!(
                "{} GPUs cannot be split into tp {} × pp {} groups: give --gpus {} (tp × pp) or a multiple of it",
                i.gpus,
                i.tp,
                i.pp,
                i.tp.saturating_mul(i.pp)
            ),
        ));
    }
    super::ranks::validate(i)?;
    if let Some(a) = i.arch
        && i.pp > a.layers
    {
        return Err(EstimateError::invalid(
            "pp",
            format!("{} stages for {} layers", i.pp, a.layers),
        ));
    }
    for (f, v) in [
        ("context", i.context.unwrap_or(0)),
        ("generate", i.generate),
        ("static-cache", i.static_cache.unwrap_or(0)),
        ("sliding-window", i.sliding_window.unwrap_or(0)),
    ] {
        // 2^30 tokens: a hundred times the longest context any model serves (10 M).
        if v > 1 << 30 {
            return Err(EstimateError::invalid(f, "over 2^30 tokens"));
        }
    }
    if i.sliding_window == Some(0) {
        return Err(EstimateError::invalid(
            "sliding-window",
            "must be at least 1",
        ));
    }
    if let Some(p) = i.parameters
        && p == 0
    {
        return Err(EstimateError::invalid("parameters", "must be at least 1"));
    }
    if i.train.adapters() && i.lora_rank == 0 {
        return Err(EstimateError::invalid("lora-rank", "must be at least 1"));
    }
    if let Some(t) = i.autocast {
        validate_autocast(i, t)?;
    }
    Ok(())
}

/// Tensor parallelism over an encoder-decoder: modelled where the config reader placed
/// its stacks as vLLM does (Whisper: `Architecture::encdec_whole`, `encdec_split`),
/// for its parameters read from the config, with heads that split evenly
/// (vllm-project/vllm d1a2e94651cf, `vllm/model_executor/models/whisper.py`:
/// `WhisperAttention.__init__` asserts `total_num_heads % tp_size == 0`).
fn validate_encdec_tp(i: &EstimateInput) -> Result<(), EstimateError> {
    if i.tp == 1 {
        return Ok(());
    }
    let placed = i.arch.filter(|a| a.encdec_split > 0);
    let Some(a) = placed.filter(|_| i.tensors.is_none() && i.counted.is_none()) else {
        return Err(EstimateError::invalid(
            "tp",
            "tensor parallelism is modelled for Whisper read from its config (its stacks placed as vLLM shards them); this encoder-decoder's placement over ranks is not derived (T5, BART and mBART have no tensor-parallel serving modelled here): give --tp 1",
        ));
    };
    // The placement is of the stacks the count holds: what stays whole fits in them,
    // and with what is split it covers them (the split part may hold more: the zero
    // biases an engine adds).
    let stacks = a
        .encdec_params
        .saturating_sub(a.vocab.saturating_mul(a.hidden));
    if a.encdec_whole > stacks || a.encdec_whole.saturating_add(a.encdec_split) < stacks {
        return Err(EstimateError::invalid(
            "encoder-decoder-split",
            format!(
                "encoder-decoder-whole {} and encoder-decoder-split {} do not place the {stacks} parameters of the stacks (encoder-decoder-params less vocab × hidden): whole at most them, whole + split at least them",
                a.encdec_whole, a.encdec_split
            ),
        ));
    }
    if !a.heads.is_multiple_of(i.tp) {
        return Err(EstimateError::invalid(
            "tp",
            format!(
                "{} attention heads do not split over tp {} (vLLM's WhisperAttention asserts heads % tp == 0): give a tp that divides {}",
                a.heads, i.tp, a.heads
            ),
        ));
    }
    Ok(())
}

/// What `--autocast` models: a LoRA or QLoRA step whose 16-bit model runs under
/// `torch.autocast` in its own dtype, which changes only the copies the adapters keep.
fn validate_autocast(i: &EstimateInput, t: Dtype) -> Result<(), EstimateError> {
    use crate::training::Framework;
    let refuse = |why: String| Err(EstimateError::invalid("autocast", why));
    if !i.train.adapters() {
        return refuse(
            "autocast is modelled for LoRA and QLoRA (what the adapters keep of their inputs); leave it out for a full fine-tune or inference".into(),
        );
    }
    if t.bytes() != 2 {
        return refuse(format!("autocast runs in bf16 or fp16, not {}", t.name()));
    }
    if t != i.compute_dtype {
        return refuse(format!(
            "the model computes in {}: autocast in {} would cast every layer's inputs and weights, which is not modelled; give the autocast dtype as the compute dtype",
            i.compute_dtype.name(),
            t.name()
        ));
    }
    // torchtune's recipes (recipes/lora_finetune_single_device.py, 0.1 to 0.6) call no
    // torch.autocast; lit-gpt's finetune/lora.py runs Fabric's bf16-true (a model in
    // bf16, no autocast) and refuses mixed precision with --quantize.
    if matches!(
        i.framework,
        Framework::Torchtune | Framework::Torchtune01 | Framework::Litgpt | Framework::Litgpt2023
    ) {
        return refuse(format!(
            "{}'s recipe runs without torch.autocast (its model in the compute dtype)",
            i.framework.name()
        ));
    }
    Ok(())
}
