//! What every rule starts from: the request (the workload, the card, the engine's
//! flags) and the figures of the estimate it reads (weights, KV bytes per token, the
//! activation peak of a serving engine's forward).

use super::EngineParams;
use super::arith::{mib, prod, sum};
use crate::catalogue::GpuCard;
use crate::error::EstimateError;
use crate::estimate::{CacheRuntime, Estimate, EstimateInput, Group, LineKey, TrainMode, estimate};

/// The common facts every rule starts from.
pub struct Ctx<'a> {
    /// The workload.
    pub(crate) input: &'a EstimateInput,
    /// Its estimate.
    pub(crate) est: &'a Estimate,
    /// The engine's flags.
    pub(crate) params: &'a EngineParams,
    /// The card.
    pub(crate) card: GpuCard,
    /// The estimate's weights on the most loaded device.
    pub(crate) weights: u64,
    /// The estimate's embedding weight line, per device (llama.cpp's placement without
    /// an architecture).
    pub(crate) embed_bytes: u64,
    /// The checkpoint's MTP layers, per device (vLLM loads them only to speculate).
    pub(crate) mtp_bytes: u64,
    /// KV bytes of one token on the device, from the estimator.
    pub(crate) per_token: u64,
    /// The length each sequence is served at.
    pub(crate) max_model_len: u64,
    /// Tokens of the pool each sequence holds beside its text's: its encoder's (the
    /// cross-attention layers' keys and values, vLLM V0's cross block table); 0 for
    /// most models.
    pub(crate) encoder_tokens: u64,
    /// The pipeline stage this device runs, when a rule sizes several cards stage by
    /// stage (vLLM's pipeline parallelism over `--card a,b`); `None`: the rule's one
    /// device.
    pub(crate) stage: Option<Stage>,
}

/// One pipeline stage of a model split over several cards: which decoder layers its
/// devices hold and whether it is the first (embeddings, no received activations) or
/// the last (final norm, head, sampler).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stage {
    /// Its rank in the pipeline.
    pub(crate) index: u64,
    /// The first decoder layer it holds.
    pub(crate) start: u64,
    /// How many decoder layers it holds.
    pub(crate) layers: u64,
    /// The first stage.
    pub(crate) first: bool,
    /// The last stage.
    pub(crate) last: bool,
}

/// The CUDA context an engine's process creates on its GPU before it measures free
/// memory, MiB (assumed; the SGLang and vLLM rules' figure).
pub(super) const CONTEXT_MIB: u64 = 512;

/// The per-thread stack the CUDA driver reserves local memory for when it creates a
/// context: `cudaLimitStackSize`'s default, 1 KiB (`cudaDeviceGetLimit` on a fresh
/// context).
const STACK_BYTES: u64 = 1024;

/// The H100 SXM's local-memory reservation (132 SMs × 2 048 resident threads × 1 KiB,
/// 264 MiB): the part of the assumed [`CONTEXT_MIB`] that follows the card.
const H100_LOCAL_BYTES: u64 = 132 * 2048 * STACK_BYTES;

/// Resident threads per SM by the card's compute capability (CUDA C++ Programming
/// Guide, "Technical Specifications per Compute Capability", "Maximum number of
/// resident threads per SM"): 2 048 on 7.0, 8.0, 9.0 and 10.0, 1 024 on 7.5, 1 536 on
/// 8.6, 8.9 and 12.0. Ampere and Blackwell hold two capabilities each: the A100
/// (GA100, 8.0) and the B200 (10.0) against the GA10x boards (8.6) and the RTX 50 and
/// RTX PRO cards (12.0). `None` off NVIDIA or for a typed capacity.
fn threads_per_sm(card: &GpuCard) -> Option<u64> {
    use crate::catalogue::Arch;
    match card.arch {
        Arch::Volta | Arch::Hopper => Some(2048),
        Arch::Turing => Some(1024),
        Arch::Ampere if card.id.starts_with("a100") => Some(2048),
        Arch::Blackwell if card.id == "b200" => Some(2048),
        Arch::Ampere | Arch::Ada | Arch::Blackwell => Some(1536),
        _ => None,
    }
}

/// The CUDA context on `card`, bytes, and how it was reached, where the engine counts
/// the context against the pool (vLLM 0.6.4's and 0.8's workers: everything on the
/// device torch did not allocate).
///
/// The driver keeps one local-memory allocation per context, sized max resident
/// threads per SM × SMs × local memory per thread (NVIDIA's answers on the CUDA
/// forums: https://forums.developer.nvidia.com/t/local-memory-management/289339/9,
/// https://forums.developer.nvidia.com/t/memory-required-for-kernel-launch/39558; the
/// `CU_CTX_LMEM_RESIZE_TO_MAX` flag of `cuCtxCreate` and `cuCtxSetLimit`'s
/// `CU_LIMIT_STACK_SIZE` in the driver API documentation), at the default 1 KiB stack
/// until a kernel needs more. That part follows the card; the rest (the driver's own
/// buffers, the modules loaded) is kept as an H100 SXM shows it: vLLM 0.19's worker
/// logs `non_torch_memory=0.51GiB` in its start-up snapshot on one H100 SXM (every
/// tp 1 record of the calibration corpus, before any weight), whose reservation is
/// 264 MiB, so 248 MiB + the card's reservation. An RTX 3090 (82 SMs × 1 536) reserves
/// 123 MiB, its context 371 MiB (0.6.4 logs 0.35 GiB outside torch on one, the
/// context included). A card whose SMs or capability are not known keeps the 512 MiB.
pub(super) fn cuda_context(card: &GpuCard) -> (u64, String) {
    let flat = (mib(CONTEXT_MIB), format!("{CONTEXT_MIB} MiB (assumed)"));
    let (sms, assumed) = card.sms();
    let Some(threads) = threads_per_sm(card).filter(|_| !assumed) else {
        return flat;
    };
    let local = sms
        .checked_mul(threads)
        .and_then(|t| t.checked_mul(STACK_BYTES));
    let rest = mib(CONTEXT_MIB).saturating_sub(H100_LOCAL_BYTES);
    match local.and_then(|l| l.checked_add(rest)) {
        Some(bytes) => (
            bytes,
            format!(
                "{} MiB (assumed): {} MiB of the driver's own + local memory for {sms} SMs × {threads} resident threads × 1 KiB of stack",
                bytes >> 20,
                rest >> 20
            ),
        ),
        None => flat,
    }
}

/// NCCL communicators and custom all-reduce buffers per GPU at tp ≥ 2, MiB (assumed):
/// what vLLM 0.19's start-ups on H100s (SXM, NVSwitch) show outside torch at tp 2–4
/// beyond tp 1 (2 140 − 256 MiB, vLLM's own table), the same libraries allocating the
/// same buffers in the engines that measure free memory after them (SGLang). NVLink
/// boards only: see [`interconnect`] and [`PCIE_COMM_MIB`].
pub(super) const COMM_BUFFERS_MIB: u64 = 1884;

/// NCCL communicators and all-reduce buffers per GPU at tp ≥ 2 on PCIe-only GPUs, MiB
/// (assumed): what vLLM counts outside torch at tp ≥ 2 beyond tp 1 without NVLink's
/// communicators — vLLM 0.10 on H100s (0.55 GiB at tp 2 against 0.13 at tp 1, before the
/// NVLink-only all-reduces came in) and vLLM 0.8 on two PCIe RTX 3090s without P2P
/// (replayed with it within 2 %) — and what SGLang's start-up on four PCIe RTX 4090s
/// left before loading beyond the CUDA context (0.91 GiB of torch's 23.99 GiB, 512 MiB
/// of it the context). What vLLM 0.19 counts beyond it on H100s (1 454 MiB,
/// [`COMM_BUFFERS_MIB`] in all) is the NVLink boards' own: the symmetric-memory
/// all-reduce (vLLM `device_communicators/symm_mem.py`: device capability 9.0 and 10.0
/// only; "not supported" is logged on 8.6, 8.9 and 12.0), FlashInfer's all-reduce fusion
/// workspace (NVSwitch), custom all-reduce beyond two GPUs (`custom_all_reduce.py`, vLLM's
/// and SGLang's: "not supported on more than two PCIe-only GPUs"), NCCL's NVLS buffers,
/// set up only where the device supports multicast, an NVSwitch system (NVIDIA/nccl
/// 2.30.7 `src/transport/nvls.cc` `ncclNvlsInit`: `CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`;
/// `ncclNvlsBufferSetup`: 16 channels × 2 × 1 MiB × tp on sm_90, aligned to the multicast
/// granularity), and NCCL's NVLink channel count: on PCIe its ring search finds one
/// channel or two, doubled (`src/graph/connect.cc` `ncclTopoPostset`: 2 to 4 channels,
/// where an NVSwitch H100 runs 24), and each P2P connection holds on the receiver `ncclRecvMem` + the
/// LL (512 KiB), LL128 (4 800 KiB) and SIMPLE (4 MiB, `NCCL_BUFFSIZE`) buffers aligned to
/// 2 MiB (`src/init.cc` `computeBuffSizes`, `src/transport/p2p.cc` `p2pRecvSetup`,
/// `CUDA_IPC_MIN`), 10 MiB, and on the sender 2 MiB: 48 MiB for a rank's ring and tree
/// peers at tp > 2 in one communicator (none where the transport is SHM: host memory,
/// `src/transport/shm.cc`). The rest of the 430 MiB (the communicators' device
/// structures, torch's own NCCL communicator, NCCL's kernels) is not derived here. SGLang 0.4.3 with NCCL 2.21.5 logs less for its
/// distributed init on four PCIe L4s ("Init torch distributed ends. mem usage=0.13 GB"):
/// the pool it sizes is then smaller than the log's, the safe side.
pub(super) const PCIE_COMM_MIB: u64 = 430;

/// How the GPUs of a tensor-parallel group reach each other, as the rules read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Interconnect {
    /// NVLink (NVSwitch boards, bridged pairs), or not known: the NVLink figures.
    NvLink,
    /// PCIe only.
    Pcie,
}

/// The interconnect of `c`'s GPUs and how it was reached: `--interconnect` where given,
/// else the card's row ([`crate::catalogue::Links`]); a row that cannot say (sold as
/// SXM and PCIe, a bridge optional, not NVIDIA) keeps NVLink's figures, the more memory
/// taken before the pool.
pub(super) fn interconnect(c: &Ctx) -> (Interconnect, String) {
    use crate::catalogue::Links;
    match c.params.text(super::flags::INTERCONNECT.key()) {
        Some("pcie") => return (Interconnect::Pcie, "PCIe only (--interconnect pcie)".into()),
        Some("nvlink") => {
            return (
                Interconnect::NvLink,
                "NVLink (--interconnect nvlink)".into(),
            );
        }
        _ => {}
    }
    match c.card.links() {
        Links::Pcie => (
            Interconnect::Pcie,
            format!("PCIe only ({}: the card has no NVLink)", c.card.name),
        ),
        Links::NvSwitch => (
            Interconnect::NvLink,
            format!("NVLink/NVSwitch ({})", c.card.name),
        ),
        Links::Either => (
            Interconnect::NvLink,
            format!(
                "NVLink assumed ({} is sold as SXM and PCIe, or takes an NVLink bridge: --interconnect pcie if its GPUs have none)",
                c.card.name
            ),
        ),
        Links::Unknown => (
            Interconnect::NvLink,
            "NVLink figures kept (the card's links are not known: --interconnect pcie if its GPUs have none)".into(),
        ),
    }
}

/// Sum of the per-device bytes of one group's counted lines.
pub(super) fn group_device_bytes(est: &Estimate, group: Group) -> Result<u64, EstimateError> {
    est.lines
        .iter()
        .filter(|l| l.in_total && l.group == group)
        .try_fold(0u64, |acc, l| acc.checked_add(l.device_bytes))
        .ok_or(EstimateError::Overflow {
            what: "engine lines",
        })
}

/// The per-device bytes of the weights an engine loads: the estimate's weights less
/// the rotary buffers transformers' modules build
/// ([`crate::arch::Architecture::rotary_buffer_bytes`], in the buffers line: the
/// frequency tables, GPT-J's and CodeGen's per-layer sin/cos tables, a vision
/// tower's). An engine builds its own rotary embedding, not transformers' (vLLM's
/// `RotaryEmbedding` keeps a `cos_sin_cache` of its own shape, llama.cpp and
/// TurboMind compute the angles in their kernels), and its tables are not modelled
/// here. The other buffers stay: vLLM keeps the same ones under its own names
/// (Gemma's embedding scale as `GemmaModel.normalizer`, a scalar in the model's
/// dtype; Falcon-H1's `mup_vector` on each `FalconH1SSMDecoderLayer`, its share over
/// tensor parallelism: `vllm/model_executor/models/gemma.py`, `falcon_h1.py`), and
/// an engine that folds them into its kernels is over by them, on the safe side.
pub(super) fn engine_weights(est: &Estimate, input: &EstimateInput) -> Result<u64, EstimateError> {
    let all = group_device_bytes(est, Group::Weights)?;
    Ok(all.saturating_sub(rope_in_buffers(est, input)?))
}

/// The rotary buffers' bytes in the estimate's buffers line (0 without one).
pub(super) fn rope_in_buffers(est: &Estimate, input: &EstimateInput) -> Result<u64, EstimateError> {
    let line: u64 = est
        .lines
        .iter()
        .filter(|l| l.in_total && l.label == crate::estimate::BUFFERS_LABEL)
        .map(|l| l.device_bytes)
        .sum();
    let rope = match input.arch {
        Some(a) => a.rotary_buffer_bytes()?,
        None => 0,
    };
    Ok(rope.min(line))
}

/// The per-device bytes of one line of the estimate (0 when absent).
pub(super) fn line_bytes(est: &Estimate, key: LineKey) -> u64 {
    est.lines
        .iter()
        .filter(|l| l.key == key)
        .map(|l| l.device_bytes)
        .sum()
}

/// Per-device KV bytes of one token of one sequence, from the estimator itself, its
/// indexer keys in `runtime`'s layout (the engine's).
pub(super) fn kv_bytes_per_token(
    input: &EstimateInput,
    runtime: CacheRuntime,
) -> Result<u64, EstimateError> {
    let no_shape = || {
        EstimateError::invalid(
            "engine",
            "the KV cache's shape is unknown: give the architecture (a preset, a config.json, --model) or layers, kv-heads and head-dim",
        )
    };
    // A counted cache measured at the lengths asked is no figure per token (it
    // compresses or selects its tokens): a pool of blocks is not divided by it.
    if input
        .counted
        .as_ref()
        .is_some_and(|c| c.cache.is_none() && c.measured.is_some())
    {
        return Err(EstimateError::invalid(
            "engine",
            "this model's KV cache was measured by its own code at the lengths asked, not per token (it compresses or selects its tokens): an engine's pool of blocks per token is not derived from it",
        ));
    }
    if input.arch.is_none() && input.kv_only.is_none() {
        return Err(no_shape());
    }
    let mut one = input.clone();
    one.context = Some(1);
    one.generate = 0;
    one.sequences = 1;
    one.static_cache = None;
    one.train = TrainMode::None;
    one.runtime = runtime;
    let est = estimate(&one)?;
    // A sparse-attention model's indexer keys (DeepSeek-V3.2, GLM-5) live in the same
    // pool, one per token beside the MLA latent (vllm v0.19.0
    // `vllm/model_executor/models/deepseek_v2.py` `DeepseekV32IndexerCache`).
    let bytes = est
        .lines
        .iter()
        .filter(|l| matches!(l.key, LineKey::KvCache | LineKey::KvCacheIndexer))
        .try_fold(0u64, |acc, l| acc.checked_add(l.device_bytes))
        .ok_or(EstimateError::Overflow {
            what: "KV bytes per token",
        })?;
    if bytes == 0 {
        if input.arch.is_some_and(|a| a.attention_layers() == 0) {
            return Err(EstimateError::invalid(
                "engine",
                "no attention layer keeps a KV cache (a pure state-space model): there is no KV pool to predict; its constant state is the kv_cache.state line",
            ));
        }
        return Err(no_shape());
    }
    Ok(bytes)
}

/// The assumed activation peak of one forward of `tokens` tokens in a serving engine
/// with fused kernels (vLLM, TGI), per device: its MLP's merged gate/up output beside
/// the activation's (3 × tokens × intermediate × v; 2 × for a non-gated MLP; MoE: the
/// active experts' widths) and one position's fp32 logits. transformers' own forward
/// (the estimate's prefill lines) keeps other tensors; these engines run their own
/// model code, and the vLLM start-up logs calibrate this figure.
pub(super) fn forward_peak(input: &EstimateInput, tokens: u64) -> Result<u64, EstimateError> {
    let Some(a) = input.arch else {
        return Ok(0);
    };
    let inter = match a.moe {
        Some(m) => prod(&[m.expert_intermediate, m.active])?,
        None => a.intermediate,
    };
    let live = if a.gated_mlp { 3 } else { 2 };
    let tp = input.tp.max(1);
    sum(&[
        prod(&[live, tokens, inter, input.compute_dtype.bytes()])?.div_ceil(tp),
        prod(&[a.vocab, 4])?.div_ceil(tp),
    ])
}

/// The card's capacity as the catalogue gives it, with its kind's name.
pub(super) fn catalogue_capacity(card: &GpuCard) -> (u64, &'static str) {
    let (c, kind) = card.capacity();
    (c, kind.as_str())
}

/// What loading takes beyond the weights' tensors where an engine measures its load by
/// the drop in free memory (SGLang's `get_available_gpu_memory`, vLLM 0.27's
/// `total_consumed`). Both build the model on the device
/// (`python/sglang/srt/model_loader/loader.py` `DefaultModelLoader.load_model`:
/// `with target_device: model = _initialize_model(...)`, read in sgl-project/sglang's
/// stored loader; vLLM's `model_loader/base_loader.py` `load_model` the same), so every
/// parameter is a `torch.empty` of torch's caching allocator, and
/// `torch.cuda.mem_get_info` sees the segments the allocator reserved, not the tensors
/// in them. A request between 1 and 10 MiB takes a block of a 20 MiB
/// segment, a larger one a segment rounded up to 2 MiB, the norms and biases 2 MiB
/// small-pool segments (c10/cuda/CUDACachingAllocator.cpp `get_allocation_size`,
/// replayed by [`crate::allocator`]). The parameters are the ones the engines' layers
/// create (SGLang's are vLLM's, adapted), in their order: the vocabulary padded to 64 rows and split over tp
/// (`VocabParallelEmbedding`, `ParallelLMHead`), then per layer the fused
/// `QKVParallelLinear` (the KV heads split over tp, or one kept whole per rank when
/// fewer than tp), `o_proj`, the fp32 rotary cache (made once, in the first layer's
/// attention: `get_rope` memoises it; `rope` bytes, in the engine's dtype), the fused `MergedColumnParallelLinear` gate/up
/// and `down_proj`, then the norms. Returns the bytes reserved beyond the tensors
/// (the padded rows included) and how, or `None` where this is not replayed: a model
/// other than a plain dense decoder (MoE, MLA, state layers, a vision tower), a
/// quantised checkpoint (its scales' tensors are not listed here), pipeline stages.
pub(super) fn load_rounding(
    input: &EstimateInput,
    rope: u64,
) -> Result<Option<(u64, String)>, EstimateError> {
    use crate::allocator::Allocator;
    use crate::format::StorageFormat;
    let Some(a) = input.arch else {
        return Ok(None);
    };
    if a.encdec_params > 0 {
        return whisper_rounding(input, &a);
    }
    let plain = a.moe.is_none()
        && a.mla.is_none()
        && a.mixer.is_none()
        && a.shared_attn.is_none()
        && a.global_attn.is_none()
        && a.per_layer_input.is_none()
        && a.kv_share.is_none()
        && a.indexer.is_none()
        && a.attn_layers.is_none_or(|l| l == a.layers)
        && a.mlp_layers.is_none_or(|l| l == a.layers)
        && a.tower_params == 0
        && a.mtp_layers == 0
        && a.learned_positions == 0
        && a.token_types == 0
        && !a.encoder
        && !a.attn_gate
        && a.layers > 0;
    let format = input.format.unwrap_or(input.keep_format);
    let StorageFormat::Dense { dtype } = format else {
        return Ok(None);
    };
    if !plain || input.pp > 1 {
        return Ok(None);
    }
    let v = dtype.bytes();
    let tp = input.tp.max(1);
    let (h, hd) = (a.hidden, a.head_dim);
    let q_heads = a.heads.div_ceil(tp);
    let kv_heads = if a.kv_heads >= tp {
        a.kv_heads.div_ceil(tp)
    } else {
        1
    };
    let inter = a.intermediate.div_ceil(tp);
    let padded = a.vocab.div_ceil(64).saturating_mul(64);
    let vocab_rows = padded.div_ceil(tp);
    let mut alloc = Allocator::new(false);
    let mut tensors = 0u64;
    let mut take = |bytes: u64, alloc: &mut Allocator| {
        if bytes > 0 {
            alloc.malloc(bytes);
            tensors = tensors.saturating_add(bytes);
        }
    };
    let qkv_rows = prod(&[q_heads.saturating_add(kv_heads.saturating_mul(2)), hd])?;
    let embed = prod(&[vocab_rows, h, v])?;
    take(embed, &mut alloc);
    let per_layer = [
        prod(&[qkv_rows, h, v])?,
        if a.qkv_bias { prod(&[qkv_rows, v])? } else { 0 },
        prod(&[h, q_heads, hd, v])?,
        if a.o_bias { prod(&[h, v])? } else { 0 },
    ];
    let mlp = [
        prod(&[inter, h, v, if a.gated_mlp { 2 } else { 1 }])?,
        if a.mlp_bias {
            prod(&[inter, v, if a.gated_mlp { 2 } else { 1 }])?
        } else {
            0
        },
        prod(&[h, inter, v])?,
        if a.mlp_bias { prod(&[h, v])? } else { 0 },
    ];
    let norms = [
        if a.qk_norm { prod(&[hd, v])? } else { 0 },
        if a.qk_norm { prod(&[hd, v])? } else { 0 },
        prod(&[h, v])?,
        prod(&[h, v])?,
    ];
    for layer in 0..a.layers {
        for b in per_layer {
            take(b, &mut alloc);
        }
        if layer == 0 {
            take(rope, &mut alloc);
        }
        for b in mlp.into_iter().chain(norms) {
            take(b, &mut alloc);
        }
    }
    take(prod(&[h, v])?, &mut alloc);
    if !a.tied_embeddings {
        take(embed, &mut alloc);
    }
    let unpadded = prod(&[a.vocab.div_ceil(tp), h, v])?;
    let pad = embed
        .saturating_sub(unpadded)
        .saturating_mul(if a.tied_embeddings { 1 } else { 2 });
    let beyond = alloc.reserved().saturating_sub(tensors).saturating_add(pad);
    Ok(Some((
        beyond,
        format!(
            "{} B of segments for {} B of parameters (the rotary cache included), {} B of them padded vocabulary rows",
            alloc.reserved(),
            tensors,
            pad
        ),
    )))
}

/// [`load_rounding`] for Whisper as vLLM builds it (read in vllm v0.27.1,
/// `model_executor/models/whisper.py`), its parameters in creation order: the
/// encoder's `conv1`, `conv2` (weights, biases), each `WhisperEncoderLayer` (the
/// attention's `QKVParallelLinear` and its bias split over tp, `out_proj` split with
/// its bias whole, `self_attn_layer_norm`, `fc1` split with its bias, `fc2` split with
/// its bias whole, `final_layer_norm`), the encoder's `layer_norm` and
/// `embed_positions`; the decoder's `embed_tokens` (an `nn.Embedding`, whole) and
/// `embed_positions`, each `WhisperDecoderLayer` (self-attention as the encoder's, its
/// norm, `encoder_attn`'s `q_proj` and `MergedColumnParallelLinear` `kv_proj` split with
/// their biases, `out_proj`, its norm, the MLP, `final_layer_norm`), the decoder's
/// `layer_norm`; then `ParallelLMHead` `proj_out` (the padded vocabulary ÷ tp), made
/// and then dropped by `tie_weights`: its segment stays reserved, counted here (the
/// profile may reuse it, the safe side). The encoder's layers and mel bins are read
/// back from the placement facts (`encdec_split`, `encdec_whole`: the reader's count of
/// `whisper_placement`), its FFN width taken as the decoder's; `None` where they do not
/// come out whole. Temporaries (the sinusoid table's copy) and the attention layers'
/// scalar scales are not counted.
fn whisper_rounding(
    input: &EstimateInput,
    a: &crate::arch::Architecture,
) -> Result<Option<(u64, String)>, EstimateError> {
    use crate::allocator::Allocator;
    use crate::format::StorageFormat;
    let format = input.format.unwrap_or(input.keep_format);
    let (StorageFormat::Dense { dtype }, Some(tgt)) = (format, input.max_position) else {
        return Ok(None);
    };
    if a.encdec_split == 0 || a.encoder_length == 0 || input.pp > 1 {
        return Ok(None);
    }
    let (d, f, ld, src) = (a.hidden, a.intermediate, a.layers, a.encoder_length);
    // Per layer, the split part: q, k, v with their biases (k's added) and out's
    // weight; fc1 with its bias and fc2's weight (the decoder's layers two
    // attentions).
    let attn = sum(&[prod(&[4, d, d])?, prod(&[3, d])?])?;
    let mlp = sum(&[prod(&[2, d, f])?, f])?;
    let enc_layer = sum(&[attn, mlp])?;
    let dec_split = prod(&[ld, sum(&[attn, attn, mlp])?])?;
    let Some(le) = a
        .encdec_split
        .checked_sub(dec_split)
        .and_then(|r| (r.checked_rem(enc_layer) == Some(0)).then(|| r.checked_div(enc_layer)))
        .flatten()
    else {
        return Ok(None);
    };
    // The whole part: out's and fc2's biases and two LayerNorms per encoder layer,
    // two outs, fc2 and three LayerNorms per decoder layer, the final norms, conv2,
    // the position tables, conv1's bias; what is left is conv1's d × mels × 3.
    let rest = sum(&[
        prod(&[le, 6, d])?,
        prod(&[ld, 9, d])?,
        prod(&[4, d])?,
        prod(&[3, d, d])?,
        prod(&[2, d])?,
        prod(&[src, d])?,
        prod(&[tgt, d])?,
    ])?;
    let conv = prod(&[3, d])?;
    let Some(mels) = a
        .encdec_whole
        .checked_sub(rest)
        .and_then(|r| (r.checked_rem(conv) == Some(0)).then(|| r.checked_div(conv)))
        .flatten()
    else {
        return Ok(None);
    };
    let v = dtype.bytes();
    let tp = input.tp.max(1);
    let (ds, fs) = (d.div_ceil(tp), f.div_ceil(tp));
    let mut alloc = Allocator::new(false);
    let mut tensors = 0u64;
    let mut take = |elements: &[u64], alloc: &mut Allocator| -> Result<(), EstimateError> {
        for e in elements {
            let bytes = prod(&[*e, v])?;
            if bytes > 0 {
                alloc.malloc(bytes);
                tensors = tensors.saturating_add(bytes);
            }
        }
        Ok(())
    };
    let self_attn = [prod(&[3, ds, d])?, prod(&[3, ds])?, prod(&[d, ds])?, d];
    let norm = [d, d];
    let mlp = [prod(&[fs, d])?, fs, prod(&[d, fs])?, d];
    take(&[prod(&[d, mels, 3])?, d, prod(&[d, d, 3])?, d], &mut alloc)?;
    for _ in 0..le {
        take(&self_attn, &mut alloc)?;
        take(&norm, &mut alloc)?;
        take(&mlp, &mut alloc)?;
        take(&norm, &mut alloc)?;
    }
    take(&norm, &mut alloc)?;
    take(&[prod(&[src, d])?], &mut alloc)?;
    take(&[prod(&[a.vocab, d])?, prod(&[tgt, d])?], &mut alloc)?;
    let cross = [
        prod(&[ds, d])?,
        ds,
        prod(&[2, ds, d])?,
        prod(&[2, ds])?,
        prod(&[d, ds])?,
        d,
    ];
    for _ in 0..ld {
        take(&self_attn, &mut alloc)?;
        take(&norm, &mut alloc)?;
        take(&cross, &mut alloc)?;
        take(&norm, &mut alloc)?;
        take(&mlp, &mut alloc)?;
        take(&norm, &mut alloc)?;
    }
    take(&norm, &mut alloc)?;
    let head = prod(&[a.vocab.div_ceil(64).saturating_mul(64).div_ceil(tp), d])?;
    take(&[head], &mut alloc)?;
    let head_bytes = prod(&[head, v])?;
    let beyond = alloc
        .reserved()
        .saturating_sub(tensors)
        .saturating_add(head_bytes);
    Ok(Some((
        beyond,
        format!(
            "{} B of segments for {} B of parameters ({le} encoder layers, {mels} mel bins read back from the placement), {head_bytes} B of them proj_out's own weight, dropped by tie_weights",
            alloc.reserved(),
            tensors
        ),
    )))
}
