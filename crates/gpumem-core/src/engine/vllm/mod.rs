//! vLLM: the pool its worker sizes after a profiling run, version by version.
//!
//! vllm v0.19.0 `vllm/v1/worker/gpu_worker.py` `determine_available_memory`:
//! available KV = requested − (weights + torch peak increase of `profile_run` +
//! non-torch increase), where requested = ⌈total × gpu_memory_utilization⌉
//! (`vllm/v1/worker/utils.py` `request_memory`) and total is what torch reports for
//! the device. The CUDA-graph estimate is subtracted only with
//! `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1` (`vllm/envs.py`, default 0 in 0.19).
//!
//! The profiling run (`gpu_model_runner.py` `profile_run`) is a forward of
//! `max_num_batched_tokens` tokens (`_dummy_run`) and then, on the last pipeline
//! stage, `_dummy_sampler_run` over one row per request, `min(max_num_seqs,
//! max_num_batched_tokens)` rows, while the forward's hidden states are still held.
//! Its torch peak is the larger of the two phases, plus what stays allocated: the
//! fused-MoE workspace (`vllm/v1/worker/workspace.py`, kept across forwards) and
//! torch's cuBLAS workspace.
//!
//! Earlier versions differ where the logs show it: 0.10 (and 0.8) sorted the
//! vocabulary for top-k/top-p (`vllm/v1/sample/ops/topk_topp_sampler.py`
//! `apply_top_k_top_p`) and freed the MoE buffers after each forward; 0.10 paged hybrid
//! attention + state models at one page size ([`pool::state_pool`]); 0.8 counted every byte
//! outside torch on the device, the CUDA context included; V0 profiled 256
//! sequences in eager PyTorch and counted every byte outside torch on the device, the
//! CUDA context included (0.6.4), or measured from just after the context (0.6.5,
//! 0.6.6 and 0.7).
//!
//! 0.27 (`vllm@0.27`, the default `vllm`) picks its model runner per model
//! (`vllm/config/vllm.py` `use_v2_model_runner`): Model Runner V2 for dense,
//! unquantised models — its sampler copies the logits to fp32 and the profile skips
//! top-k/top-p, and its `profile_cudagraph_memory` returns 0, so no graph estimate
//! leaves the pool — and the V1 runner otherwise, which since 0.20 profiles its CUDA
//! graphs before the pool is sized and takes the estimate out of it
//! (`GPUModelRunner.profile_cudagraph_memory`, `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`
//! on by default). Its non-KV figure is the drop in free memory since start-up plus
//! the part of the torch peak above what stays allocated (`vllm/utils/mem_utils.py`
//! `memory_profiling`), the same sum as 0.19's three terms.
//!
//! 0.29 (the default `vllm`; 0.30 keeps its accounting) runs Model Runner V2 for every
//! model, and V2 profiles its CUDA graphs before sizing the pool and takes the estimate
//! out of it (`vllm/v1/worker/gpu/cudagraph_utils.py` `profile_cudagraph_memory`,
//! https://github.com/vllm-project/vllm/pull/53306): 0.27's V2 profile with 0.27's V1
//! graph line. MoE and quantised models move
//! from the V1 runner's sampler (14 B per element and the triton buffer) to V2's.

mod encoder;
mod flags;
mod parallel;
mod pool;
mod profile;
mod releases;
mod speculative;
mod stages;

pub use releases::VllmVersion;
pub use speculative::parse_draft;

pub(crate) use flags::offload_bytes;
use flags::{
    CPU_OFFLOAD_GB, DATA_PARALLEL_SIZE, DRAFT_MODEL, ENABLE_EXPERT_PARALLEL, PP_LAYER_PARTITION, ENABLE_LORA, ENFORCE_EAGER, GPU_MEMORY_UTILIZATION, KV_CACHE_MEMORY_BYTES,
    MAX_LORA_RANK, MAX_LORAS, MAX_NUM_SEQS, NUM_SPECULATIVE_TOKENS, SPECULATIVE_METHOD,
};
use pool::{pool_shape, state_pool};
use profile::{
    DraftPhase, GRAPH_BASE, GRAPH_PER_LAYER, MEL_BINS, QWEN2_AUDIO_FRAMES, audio_held, capture_counts,
    encoder_held, qwen2_audio_held, qwen2_audio_tokens,
    profile_peak,
};
use releases::{RULES, Rules};

use super::arith::{GIB, MIB, gib_text, mib, prod, sum};
use super::contract::{Engine, Info};
use super::flags::{BATCHED_TOKENS, INTERCONNECT, MAX_MODEL_LEN, MEMORY_IN_USE};
use super::fraction::{ONE, fraction_text, times_fraction};
use super::outcome::line;
use super::pool::{Batch, Draft, simple_pool};
use super::request::{CONTEXT_MIB, Ctx, cuda_context, interconnect, load_rounding};
use crate::catalogue::GpuCard;
use crate::error::EstimateError;
use crate::estimate::{EstimateInput, Kind};

const SRC_WORKER: &str = "vllm/v1/worker/gpu_worker.py (determine_available_memory)";
/// The V0 engine's worker (0.6.4 to 0.8's V0 fallback), where the non-KV figure is
/// measured.
const SRC_WORKER_V0: &str = "vllm/worker/worker.py (determine_num_available_blocks)";
const SRC_PROFILE: &str =
    "vllm/v1/worker/gpu_model_runner.py (profile_run: _dummy_run, _dummy_sampler_run)";
const SRC_PROFILE_BNB: &str = "vllm/v1/worker/gpu_model_runner.py (profile_run: _dummy_run, _dummy_sampler_run); vllm/model_executor/layers/quantization/bitsandbytes.py (_apply_bnb_4bit, _apply_8bit_weight, BitsAndBytesMoEMethod._apply_4bit_dequnt); bitsandbytes autograd/_functions.py (MatMul8bitLt.forward)";

/// vLLM (`vllm serve`).
pub struct Vllm;

impl Engine for Vllm {
    const INFO: Info = Info {
        name: "vllm",
        aliases: &[],
        summary: "vLLM.",
        releases: &[
            ("vllm", "vLLM 0.29"),
            ("vllm@0.27", "vLLM 0.27"),
            ("vllm@0.19", "vLLM 0.19"),
            ("vllm@0.10", "vLLM 0.10"),
            ("vllm@0.8", "vLLM 0.8"),
            ("vllm@0.7", "vLLM 0.7 (V0)"),
            ("vllm@0.6", "vLLM 0.6.5–0.6.6 (V0)"),
            ("vllm@0.6.4", "vLLM 0.6.4 (V0)"),
        ],
        release: Some(|text| VllmVersion::parse(text).map(VllmVersion::index)),
        hint: "vllm (0.29; vllm@0.27, @0.19, @0.10, @0.8, @0.7, @0.6, @0.6.4)",
        flags: &[
            &GPU_MEMORY_UTILIZATION,
            &MAX_MODEL_LEN,
            &MAX_NUM_SEQS,
            &BATCHED_TOKENS,
            &KV_CACHE_MEMORY_BYTES,
            &ENFORCE_EAGER,
            &ENABLE_LORA,
            &MAX_LORAS,
            &MAX_LORA_RANK,
            &SPECULATIVE_METHOD,
            &NUM_SPECULATIVE_TOKENS,
            &DRAFT_MODEL,
            &CPU_OFFLOAD_GB,
            &PP_LAYER_PARTITION,
            &DATA_PARALLEL_SIZE,
            &ENABLE_EXPERT_PARALLEL,
            &MEMORY_IN_USE,
            &INTERCONNECT,
        ],
        formats: &["bf16", "fp8", "int8", "awq-4-g128"],
        windows: true,
        shared_context: false,
        // vLLM's own Apple silicon support is its CPU backend.
        metal: false,
        refusal: Some(
            "No available memory for the cache blocks: vLLM refuses to start (raise gpu-memory-utilization, use a larger card, tp, or quantised weights)",
        ),
    };

    /// The V0 engine (0.6.4–0.7: `vllm/worker/cache_engine.py`
    /// `CacheEngine.get_cache_block_size`, `vllm/core/block_manager.py`'s cross block
    /// table) makes every block span all layers and takes each request's encoder
    /// tokens from the pool; 0.8–0.10 fall back to V0 (not carried); from 0.11 on the
    /// model is gone (`registry.py` `_PREVIOUSLY_SUPPORTED_MODELS`).
    fn cross_attention(
        x: &super::cross::CrossLayers,
        params: &super::flags::EngineParams,
    ) -> Result<super::cross::Cross, EstimateError> {
        let refuse = |why: String| Err(EstimateError::invalid("engine", why));
        match VllmVersion::of(params.release) {
            VllmVersion::V07 | VllmVersion::V06 | VllmVersion::V064 => Ok(super::cross::Cross {
                per_token: x.all,
                encoder_tokens: x.tokens,
                length_tokens: 0,
                assumption: format!(
                    "cross-attention (V0 engine): every block spans all {} layers, the {} cross-attention layers' included, and each request holds {} encoder tokens in blocks of its own (its cross block table) beside its text; the vision encoder's profile forward not modelled",
                    x.layers, x.cross, x.tokens
                ),
            }),
            VllmVersion::V010 | VllmVersion::V08 => refuse(format!(
                "vllm@{}: Llama 3.2 Vision (MllamaForConditionalGeneration) runs on the V0 engine in this release (the V1 engine does not support it), whose accounting here is carried for 0.6.4–0.7 only: name vllm@0.7",
                VllmVersion::of(params.release).key()
            )),
            v => refuse(format!(
                "vllm@{}: vLLM serves Llama 3.2 Vision (MllamaForConditionalGeneration) up to 0.10.2 only (its model registry lists it among the previously supported models: encoder-decoder models but Whisper went with the V0 engine); name vllm@0.7, sglang or tgi",
                v.key()
            )),
        }
    }

    /// Whisper on the V1 engine (read in vllm v0.19.0 and v0.27.1, the same code in
    /// both): `model_executor/models/whisper.py` gives each decoder layer an
    /// `Attention` (self-attention: `FullAttentionSpec`) and a `CrossAttention`
    /// (`CrossAttentionSpec`, `v1/kv_cache_interface.py`) over the same heads, and the
    /// encoder's `MMEncoderAttention` no cache. The two kinds are two KV-cache groups of
    /// one page size (`pool::pool_shape`); a request takes its encoder's 1500 positions
    /// (`WhisperProcessingInfo.get_num_audio_tokens`: `max_source_positions`) from the
    /// same pool at its first step (`v1/core/sched/scheduler.py` `schedule`:
    /// `num_encoder_tokens` to `allocate_slots`, `CrossAttentionManager`). From 0.11
    /// Whisper is the one encoder-decoder in vLLM's tree
    /// (https://github.com/vllm-project/vllm/pull/24907); 0.10 and the V0 releases'
    /// Whisper path was not read.
    fn encoder_decoder(
        x: &super::cross::CrossLayers,
        params: &super::flags::EngineParams,
    ) -> Result<super::cross::Cross, EstimateError> {
        let refuse = |why: String| Err(EstimateError::invalid("engine", why));
        let v = VllmVersion::of(params.release);
        if !matches!(v, VllmVersion::V029 | VllmVersion::V027 | VllmVersion::V019) {
            return refuse(format!(
                "vllm@{}: how this release serves Whisper (its encoder-decoder path, V0's or 0.10's V1 support) was not read: name vllm (0.29), vllm@0.27 or vllm@0.19",
                v.key()
            ));
        }
        if !x.whisper {
            return refuse(format!(
                "vllm@{}: vLLM's tree serves Whisper and no other encoder-decoder (T5 and BART went with the V0 engine, https://github.com/vllm-project/vllm/pull/24907; BART's plugin was not read); a Whisper is modelled from its config (its encoder's frames and vLLM's placement): leave out --engine for transformers' generate",
                v.key()
            ));
        }
        Ok(super::cross::Cross {
            per_token: x.per_token,
            encoder_tokens: x.tokens,
            length_tokens: 0,
            assumption: format!(
                "encoder-decoder (Whisper): {} self-attention and {} cross-attention layers in two KV-cache groups of one page size; a request holds its text's blocks and ⌈{} ÷ 16⌉ blocks for its encoder's positions from the same pool",
                x.own, x.cross, x.tokens
            ),
        })
    }

    fn budget(c: &Ctx) -> Result<Draft, EstimateError> {
        rule(c)
    }

    // Pipeline stages over `--card a,b` (`--pp`): `stages`.
    const SEVERAL_CARDS: bool = true;

    // The pooling runner (`--runner pooling`) serves an encoder-only model with no KV
    // cache: `encoder::rule`.
    const ENCODERS: bool = true;

    fn batch_budget(c: &Ctx) -> Result<(Draft, Batch), EstimateError> {
        if !c.params.devices.is_empty() {
            return Err(EstimateError::invalid(
                "card",
                "an encoder-only model over several cards is not modelled (vLLM's pipeline stages are read for decoders): name one card",
            ));
        }
        if c.params.count(DATA_PARALLEL_SIZE.key()).is_some_and(|n| n > 1)
            || c.params.on(ENABLE_EXPERT_PARALLEL.key())
        {
            return Err(EstimateError::invalid(
                DATA_PARALLEL_SIZE.key(),
                "data or expert parallelism under the pooling runner (an encoder-only model) is not modelled: its DP groups were not read",
            ));
        }
        let version = VllmVersion::of(c.params.release);
        match version {
            VllmVersion::V029 | VllmVersion::V027 | VllmVersion::V019 => {
                encoder::rule(c, version.rules(c.input, false), version.key())
            }
            _ => Err(EstimateError::invalid(
                "engine",
                format!(
                    "vllm@{}: an encoder-only model is modelled for vllm (0.29, the pooling runner assumed as 0.27's), vllm@0.27 and vllm@0.19 only (the pooling runner read in their source: no KV cache, no profile); earlier releases' encoder support was not read",
                    version.key()
                ),
            )),
        }
    }
}

fn rule(c: &Ctx) -> Result<Draft, EstimateError> {
    if !c.params.devices.is_empty() && c.input.is_encoder_decoder() {
        return Err(EstimateError::invalid(
            "card",
            "Whisper over several cards is not modelled (vLLM's pipeline stages are read for decoders): name one card",
        ));
    }
    // Data and expert parallelism: one rank's share, or a refusal (`parallel`).
    let par = parallel::plan(c, VllmVersion::of(c.params.release))?;
    // Several cards: one pipeline stage's rule per GPU, the pool the fewest blocks.
    if !c.params.devices.is_empty() && c.stage.is_none() {
        return stages::rule(c);
    }
    let p = c.params;
    let input = c.input;
    let speculating = p.text(SPECULATIVE_METHOD.key()).is_some();
    let version = VllmVersion::of(p.release);
    let encdec = input.is_encoder_decoder();
    if encdec && speculating {
        return Err(EstimateError::invalid(
            "speculative-method",
            "speculative decoding over Whisper (an encoder-decoder) is not modelled",
        ));
    }
    // bitsandbytes MoE layers came with `BitsAndBytesMoEMethod` (vllm-project/vllm
    // PR #20061, merged June 2025, first released in 0.10): before, vLLM's bitsandbytes
    // loader refuses a model with fused experts.
    let bnb = matches!(input.format, Some(crate::format::StorageFormat::Bnb4 { .. }));
    let int8 = matches!(input.format, Some(crate::format::StorageFormat::Int8));
    // An 8-bit bitsandbytes MoE fails at model construction in every release read:
    // `BitsAndBytesMoEMethod._create_weights_8bit` raises `NotImplementedError` (vllm
    // v0.19.0 and v0.27.1 `model_executor/layers/quantization/bitsandbytes.py`).
    if int8 && input.arch.is_some_and(|a| a.moe.is_some_and(|m| m.experts > 0)) {
        return Err(EstimateError::invalid(
            "format",
            format!(
                "vllm@{}: bitsandbytes 8-bit on an MoE model does not start (BitsAndBytesMoEMethod._create_weights_8bit raises NotImplementedError); nf4 runs from vLLM 0.10 on",
                version.key()
            ),
        ));
    }
    if bnb
        && input.arch.is_some_and(|a| a.moe.is_some())
        && !matches!(
            version,
            VllmVersion::V029 | VllmVersion::V027 | VllmVersion::V019 | VllmVersion::V010
        )
    {
        return Err(EstimateError::invalid(
            "format",
            format!(
                "vllm@{}: bitsandbytes on an MoE model runs from vLLM 0.10 on (BitsAndBytesMoEMethod); earlier releases refuse it",
                version.key()
            ),
        ));
    }
    if par.active() && (speculating || p.text(CPU_OFFLOAD_GB.key()).is_some()) {
        return Err(EstimateError::invalid(
            if speculating { SPECULATIVE_METHOD.key() } else { CPU_OFFLOAD_GB.key() },
            "speculative decoding and --cpu-offload-gb under data or expert parallelism are not modelled (the drafter's and the offloader's share of a rank's experts were not read)",
        ));
    }
    let r = version.rules(input, speculating);
    let (total, derived) = c.card.torch_total();
    let (sms, sms_assumed) = c.card.sms();
    let sm90 = c.card.sm90();
    let mut assumptions: Vec<String> = Vec::new();
    if int8 {
        assumptions.push(
            "bitsandbytes 8-bit: the profile's outlier columns (inputs past llm_int8_threshold) are not counted: each keeps its input and dequantised weight column, 2 × (tokens + shard width) bytes".into(),
        );
        if !matches!(version, VllmVersion::V029 | VllmVersion::V027 | VllmVersion::V019) {
            assumptions.push(format!(
                "bitsandbytes 8-bit under vllm@{}: the int8 matmul's scratch as bitsandbytes 0.48–0.50 runs it (what vLLM 0.19 and 0.27 accept); the bitsandbytes releases this one accepted were not read",
                version.key()
            ));
        }
    }
    if sms_assumed && r.triton {
        assumptions.push(format!(
            "{}: SM count unknown: {sms} assumed (the top-k/top-p buffer holds one vocabulary row per SM)",
            c.card.id
        ));
    }
    if c.card.arch == crate::catalogue::Arch::Unknown {
        assumptions.push(format!(
            "{}: generation unknown: cuBLAS's workspace of a card other than sm_90 assumed",
            c.card.id
        ));
    }
    let mut warnings: Vec<String> = Vec::new();
    if r.label == RULES[4].label {
        assumptions.push("Model Runner V2 assumed for this dense, unquantised model (vLLM 0.27.1's logs run Qwen2 and Qwen3 on it; an architecture left on the V1 runner would lose its CUDA-graph estimate from the pool)".into());
    }
    if r.label == RULES[9].label {
        assumptions.push("speculative decoding under vLLM 0.29: Model Runner V2 runs it, whose drafter profile was not read; the V1 runner's profile (a larger sampler phase) is counted".into());
    }
    if r.v2 && version == VllmVersion::V029 && input.tp > 1 {
        assumptions.push(format!(
            "the sampler phase is counted whole on each of the {} tp ranks (vLLM 0.29's batch-sharded sampling gives each rank 1/tp of the logits: not modelled, a smaller pool than vLLM gives)",
            input.tp
        ));
    }
    let util = p
        .fraction(GPU_MEMORY_UTILIZATION.key())
        .unwrap_or(ONE / 10 * 9);
    let requested = times_fraction(total, util, r.ceil)?;
    let total_text = format!(
        "{total} B (torch{})",
        if derived { ", derived" } else { "" }
    );
    if derived {
        assumptions.push(format!(
            "{}: torch total derived: the catalogue's less 1 %",
            c.card.id
        ));
    }
    let mut lines = vec![line(
        "budget",
        "vLLM's share: total × gpu_memory_utilization",
        requested,
        Kind::Computed,
        format!("{} total × utilisation", if r.ceil { "⌈" } else { "⌊" }),
        &[
            ("total", total_text),
            ("gpu-memory-utilization", fraction_text(util)),
        ],
        "vllm/v1/worker/utils.py (request_memory)",
    )];
    if derived {
        lines[0].kind = Kind::Assumed;
    }
    // Weights as vLLM loads them: the estimate's, plus the rotary cos/sin cache buffer
    // (`rotary_embedding/base.py`: [max_position, rotary_dim] in the model dtype), one
    // per stage, which "Model loading took" counts. A scaled RoPE's cache reaches as far
    // as its scaling (`linear_scaling_rope.py`, `dynamic_ntk_scaling_rope.py`: positions
    // × factor; `yarn_scaling_rope.py`: original positions × factor), which is
    // `rope-positions` where the config reader derived it.
    let arch = input.arch;
    let b = input.compute_dtype.bytes();
    // Whisper's positions are learned tables (`WhisperPositionalEmbedding`, and the
    // encoder's sinusoids as a table): no rotary cache.
    let rope = match arch {
        Some(a) if a.learned_positions == 0 && a.encdec_params == 0 => {
            let dim = a.mla.map_or(a.head_dim, |m| m.qk_rope_dim);
            let rows = input.rope_positions.or(input.max_position).unwrap_or(0);
            prod(&[rows, dim, b])?
        }
        _ => 0,
    };
    let lora = lora_bytes(c, r)?;
    let pad = mxfp4_padding(input, &c.card, &par)?;
    let rocm_pad = rocm_fp8_padding(input, &c.card)?;
    // The checkpoint's MTP layers are not the main model's: vLLM loads them only as
    // the drafter (the `draft_weights` line), see `speculative`.
    let weights = c.weights.saturating_sub(c.mtp_bytes);
    // Data or expert parallelism: this rank's routed experts in place of the
    // estimate's tp slice of every expert (`parallel::expert_shares`).
    let (experts_tp, experts_rank) = if par.active() {
        parallel::expert_shares(input, &par)?
    } else {
        (0, 0)
    };
    let weights = weights.saturating_sub(experts_tp).saturating_add(experts_rank);
    let offloaded = match p.text(CPU_OFFLOAD_GB.key()).and_then(offload_bytes) {
        Some(budget) if budget > 0 => cpu_offloaded(c, budget)?,
        _ => 0,
    };
    // Whisper: vLLM's attentions carry a k bias the checkpoint lacks (`QKVParallelLinear`
    // and `kv_proj` with `bias=True`, loaded with zeros); over tp the placement holds
    // them (`encdec_split`), at tp 1 the estimate's transformers count does not.
    let zero_biases = match arch.filter(|a| a.encdec_split > 0 && input.tp == 1) {
        Some(a) => {
            let stacks = a
                .encdec_params
                .saturating_sub(a.vocab.saturating_mul(a.hidden));
            prod(&[
                sum(&[a.encdec_whole, a.encdec_split])?.saturating_sub(stacks),
                b,
            ])?
        }
        None => 0,
    };
    let weights = weights.saturating_sub(offloaded).saturating_add(zero_biases);
    if c.mtp_bytes > 0 {
        assumptions
            .push("the checkpoint's MTP layers are loaded only by speculative-method mtp".into());
    }
    lines.push(line(
        "weights",
        "Weights on this device (with the rotary cache)",
        sum(&[weights, rope, pad, rocm_pad])?,
        Kind::Computed,
        "the estimate's weights − MTP layers − --cpu-offload-gb's parameters + max_position × rotary_dim × dtype + MXFP4 expert padding + ROCm's fp8 row padding".into(),
        &[
            ("cpu-offloaded", offloaded.to_string()),
            ("tp", input.tp.to_string()),
            ("pp", input.pp.to_string()),
            ("rotary-cache", rope.to_string()),
            ("mxfp4-padding", pad.to_string()),
            ("rocm-fp8-padding", rocm_pad.to_string()),
            ("mtp-layers-skipped", c.mtp_bytes.to_string()),
        ],
        "vllm/model_executor/layers/rotary_embedding/base.py (cos_sin_cache)",
    ));
    if p.on(ENABLE_EXPERT_PARALLEL.key()) && !par.ep {
        assumptions.push("--enable-expert-parallel on one rank (tp × dp = 1): vLLM leaves expert parallelism off (FusedMoEParallelConfig.make: use_ep needs tp × dp > 1)".into());
    }
    if par.active()
        && let Some(l) = lines.last_mut()
    {
        if par.experts > 0 {
            l.formula.push_str(if par.ep {
                " − the estimate's tp slice of the routed experts + this rank's ⌈experts ÷ ep⌉ whole experts"
            } else {
                " − the estimate's tp slice of the routed experts + each expert ÷ (tp × dp)"
            });
            l.source.to_mut().push_str(
                "; vllm/model_executor/layers/fused_moe/config.py (FusedMoEParallelConfig.make), fused_moe/layer.py (determine_expert_map)",
            );
        }
        for (k, v) in [
            ("dp", par.dp),
            ("ep", par.ep_size),
            ("moe-tp", par.moe_tp),
            ("local-experts", par.local_experts),
            ("experts-as-estimated", experts_tp),
            ("experts-on-this-rank", experts_rank),
        ] {
            l.inputs.insert(k.into(), v.to_string());
        }
        let gpus = prod(&[input.tp.max(1), input.pp.max(1), par.dp])?;
        assumptions.push(format!(
            "per rank: {} data-parallel engine core(s) of tp {} × pp {} ({gpus} GPUs in all), each with its own profile and KV pool: the figures are one rank's, the most loaded{}; attention and shared experts tp-split",
            par.dp,
            input.tp.max(1),
            input.pp.max(1),
            if par.ep {
                format!(
                    ", ep {} holding {} of the {} experts whole (vLLM's determine_expert_map: the first experts mod ep ranks one more)",
                    par.ep_size, par.local_experts, par.experts
                )
            } else if par.experts > 0 {
                format!(", each expert split over tp × dp = {}", par.moe_tp)
            } else {
                String::new()
            }
        ));
        if input.gpus > 1 && input.gpus != gpus {
            warnings.push(format!(
                "--gpus {}: vLLM at dp {} × tp {} × pp {} runs on {gpus} GPUs",
                input.gpus,
                par.dp,
                input.tp.max(1),
                input.pp.max(1)
            ));
        }
    }
    if zero_biases > 0
        && let Some(l) = lines.last_mut()
    {
        l.formula.push_str(" + Whisper's zero k biases at tp 1");
        l.inputs
            .insert("zero-k-biases".into(), zero_biases.to_string());
    }
    // 0.27 measures what stays allocated by the drop in free memory since its start-up
    // snapshot (`memory_profiling`: `total_consumed` = free before − free after the
    // profile, vllm-project/vllm PR #37111's accounting), and 0.6.4's and 0.8's workers
    // count every byte on the device torch has not allocated (`mem_get_info` total −
    // free − `allocated_bytes.all.current`, after `empty_cache`): both see the caching
    // allocator's segments around the weights, not only the tensors ("Model loading
    // took" prints the tensors). 0.6.5–0.19 sum torch's allocated bytes and what lies
    // outside torch's reserve: the segments' slack is in neither.
    let rounding = if (r.consumed || r.context_counted) && offloaded == 0 {
        load_rounding(input, rope)?
    } else {
        None
    };
    if let Some((bytes, how)) = &rounding {
        lines.push(line(
            "load_rounding",
            "Weights' segments beyond the tensors (torch's caching allocator)",
            *bytes,
            Kind::Computed,
            how.clone(),
            &[("tp", input.tp.to_string())],
            if r.context_counted {
                "vllm/v1/worker/gpu_worker.py (determine_available_memory: mem_get_info less allocated_bytes.all.current); c10/cuda/CUDACachingAllocator.cpp (get_allocation_size)"
            } else {
                "vllm/utils/mem_utils.py (memory_profiling: total_consumed from mem_get_info); c10/cuda/CUDACachingAllocator.cpp (get_allocation_size)"
            },
        ));
    }
    let rounding = rounding.map_or(0, |r| r.0);
    if offloaded > 0 {
        // Each GPU's offloaded parameters, in pinned host memory: tp × pp GPUs on the
        // node (one node assumed).
        let ranks = prod(&[input.tp.max(1), input.pp.max(1)])?;
        let mut host = line(
            "host_weights",
            "Weights in pinned host memory (--cpu-offload-gb), per node",
            prod(&[offloaded, ranks])?,
            Kind::Computed,
            format!(
                "{offloaded} B per GPU × {ranks} GPU(s): whole parameters of the decoder layers, first layer first, until the budget is reached"
            ),
            &[("cpu-offloaded-per-gpu", offloaded.to_string())],
            SRC_OFFLOAD,
        );
        host.subtracted = false;
        lines.push(host);
        assumptions.push("--cpu-offload-gb: the UVA offloader (vLLM's default where UVA is available); without UVA a module's parameters are copied back for its forward, which the profile would add".into());
    }
    if lora > 0 {
        lines.push(line(
            "lora",
            "LoRA slots: max_loras × rank × (inputs + outputs) per linear",
            lora,
            Kind::Computed,
            "max-loras × max-lora-rank × Σ layers (7 hidden + (2 q + 2 kv + 3 intermediate) ÷ tp) × dtype".into(),
            &[("max-loras", p.count(MAX_LORAS.key()).unwrap_or(1).to_string()), ("max-lora-rank", p.count(MAX_LORA_RANK.key()).unwrap_or(16).to_string())],
            "vllm/lora/layers/base_linear.py (create_lora_weights)",
        ));
    }
    // vllm/engine/arg_utils.py get_batch_defaults: 8192 / 1024 for `vllm serve` on a
    // card of ≥ 70 GiB (torch total) other than an A100, else 2048 / 256. V0: 256
    // sequences, batched = max(max_model_len, 2048) (vllm 0.6 config.py SchedulerConfig).
    let large = total >= 70 * GIB && !c.card.name.to_ascii_lowercase().contains("a100");
    let seqs = p
        .count(MAX_NUM_SEQS.key())
        .unwrap_or(if large && !r.v0 { 1024 } else { 256 });
    let batched = p.count(BATCHED_TOKENS.key()).unwrap_or(if r.v0 {
        c.max_model_len.max(2048)
    } else if large {
        8192
    } else {
        2048
    });
    // vllm v0.19.0 and v0.27.1 `engine/arg_utils.py`
    // `_set_default_max_num_seqs_and_batched_tokens_args`: a default batched count is at
    // most max_num_seqs × max_model_len ("Some models (e.g., Whisper) have embeddings
    // tied to max length").
    let batched = if p.count(BATCHED_TOKENS.key()).is_none()
        && matches!(version, VllmVersion::V029 | VllmVersion::V027 | VllmVersion::V019)
    {
        batched.min(seqs.saturating_mul(c.max_model_len))
    } else {
        batched
    };
    if p.count(MAX_NUM_SEQS.key()).is_none() || p.count(BATCHED_TOKENS.key()).is_none() {
        assumptions.push(format!("vllm serve defaults: max-num-batched-tokens {batched}, max-num-seqs {seqs} (vllm/engine/arg_utils.py get_batch_defaults)"));
    }
    // The drafter (speculative decoding, 0.19 rules only) sits on the last stage.
    // The drafter is read in the V1 runner (0.19's, and 0.27's V1 runner, which runs
    // speculative decoding here).
    let v1_runner = [RULES[0].label, RULES[6].label, RULES[9].label].contains(&r.label);
    let mut spec = if speculating && !v1_runner {
        return Err(EstimateError::invalid(
            "speculative-method",
            "modelled with the vllm (0.29), vllm@0.27 and vllm@0.19 rules only",
        ));
    } else {
        speculative::plan(c, batched)?
    };
    let draft_weights = spec.as_ref().map_or(0, |s| s.info.draft_weights_bytes);
    if let Some(s) = spec.as_mut() {
        assumptions.append(&mut s.assumptions);
        lines.extend(s.line.take());
    }
    // The most loaded device is the last stage: it also runs the sampler.
    let audio_tower = !encdec && input.arch.is_some_and(|a| a.audio.is_some());
    let (held, items) = if encdec {
        audio_held(c, batched, seqs)?
    } else if audio_tower {
        qwen2_audio_held(c, r, batched, seqs)?
    } else {
        encoder_held(c, batched, seqs)?
    };
    let drafter = spec.as_ref().map(|s| DraftPhase {
        forward: s.info.draft_forward_bytes,
        workspace: s.workspace,
    });
    let (peak, parts) = profile_peak(
        c,
        r,
        batched,
        seqs,
        sms,
        sm90,
        drafter.as_ref(),
        (held, items),
        &par,
    )?;
    if held > 0 && encdec {
        assumptions.push(format!(
            "Whisper's encoder: {items} clips of 30 s held through the profile (input features of {MEL_BINS} mel bins assumed, large-v3's) and their encoder's own forward assumed below the decoder's of {batched} tokens"
        ));
    } else if held > 0 && audio_tower {
        let tokens = qwen2_audio_tokens(QWEN2_AUDIO_FRAMES);
        let kept = if r.v2 {
            "their embeddings"
        } else {
            "their input features and embeddings"
        };
        let given = match input.audio_seconds {
            Some(s) => format!(
                "; the prompt's clip (--mm-audio-seconds {s}) is not read: vLLM sizes its pool on its own dummy clip"
            ),
            None => String::new(),
        };
        let read = if matches!(version, VllmVersion::V029 | VllmVersion::V027 | VllmVersion::V019) {
            ""
        } else {
            " (read in vLLM 0.19's and 0.27's source; this release's assumed alike)"
        };
        assumptions.push(format!(
            "Qwen2-Audio's encoder: {items} dummy clips of 30 s ({QWEN2_AUDIO_FRAMES} frames, {tokens} tokens each), {kept} held through the profile{read}, the encoder's own forward assumed below the text's{given}"
        ));
    } else if held > 0 {
        assumptions.push("encoder: its dummy batch is held through the profile; its own forward assumed below the text's".into());
    }
    lines.push(line(
        "activation_peak",
        "Torch peak of the profiling run (forward, then sampler)",
        peak,
        Kind::Computed,
        if bnb {
            "max(forward of the batched tokens with bitsandbytes' dequantised weights, sampler phase) + MoE workspace + cuBLAS workspace"
        } else if int8 {
            "max(forward of the batched tokens with bitsandbytes' int8 matmul scratch, sampler phase) + MoE workspace + cuBLAS workspace"
        } else {
            "max(forward of the batched tokens, sampler phase) + MoE workspace + cuBLAS workspace"
        }
        .into(),
        &parts,
        if bnb || int8 { SRC_PROFILE_BNB } else { SRC_PROFILE },
    ));
    // A stage after the first receives the previous stage's activations into buffers
    // it keeps: `make_empty_intermediate_tensors` (`hidden_states` and `residual`,
    // max_num_batched_tokens × hidden in the model dtype each), made by the V1 runner's
    // first `_dummy_run` and by Model Runner V2's `load_model` (vllm v0.27.1
    // `v1/worker/gpu_model_runner.py`, `v1/worker/gpu/model_runner.py`,
    // `model_executor/models/utils.py` `make_empty_intermediate_tensors_factory`).
    // One card under `--pp` is the most loaded stage, the last (it also samples).
    let stage = c.stage.map_or(input.pp.max(1).saturating_sub(1), |s| s.index);
    if c.stage.map_or(input.pp >= 2, |s| !s.first) {
        let hidden = input.arch.map_or(0, |a| a.hidden);
        lines.push(line(
            "pp_buffers",
            "Buffers for the previous stage's activations",
            prod(&[2, batched, hidden, input.compute_dtype.bytes()])?,
            Kind::Computed,
            "2 (hidden_states, residual) × max_num_batched_tokens × hidden × dtype".into(),
            &[
                ("stage", stage.to_string()),
                ("max-num-batched-tokens", batched.to_string()),
            ],
            "vllm/model_executor/models/utils.py (make_empty_intermediate_tensors_factory)",
        ));
    }
    let (nt, nt_how) = r.non_torch(input.tp, input.pp, interconnect(c));
    // Under DP, vLLM sets up beside the tp group a DP group (dp ranks) and, for a MoE,
    // an EP group spanning tp × dp ranks (`vllm/distributed/parallel_state.py`
    // `initialize_model_parallel`), each with its NCCL communicator; custom all-reduce
    // and symmetric memory only for a "tp" group (`device_communicators/
    // cuda_communicator.py` `CudaCommunicator.__init__`). Each such group is assumed to
    // take what tp ≥ 2 adds beyond tp 1 on this interconnect (the safe side: that step
    // holds the custom all-reduce buffers too; not measured under DP).
    let dp_groups = if par.dp > 1 {
        if par.experts > 0 { 2 } else { 1 }
    } else {
        0
    };
    let (nt, nt_how) = if dp_groups > 0 {
        let step = r
            .non_torch(2, 1, interconnect(c))
            .0
            .saturating_sub(r.non_torch(1, 1, interconnect(c)).0);
        (
            nt.saturating_add(step.saturating_mul(dp_groups)),
            format!(
                "{nt_how}; + {dp_groups} × {step} MiB for the {} group's NCCL communicator (assumed: tp ≥ 2's step beyond tp 1)",
                if dp_groups == 2 { "DP and EP" } else { "DP" }
            ),
        )
    } else {
        (nt, nt_how)
    };
    let mut non_torch_bytes = mib(nt);
    if r.context_counted {
        // 0.6.4's and 0.8's workers take no baseline after the CUDA context: the
        // context is in what they count outside torch, the card's own.
        let (context, how) = cuda_context(&c.card);
        non_torch_bytes = sum(&[context, mib(nt)])?;
        lines.push(line(
            "non_torch",
            "Memory outside torch: the CUDA context + the libraries' (assumed, by card and tp/pp)",
            non_torch_bytes,
            Kind::Assumed,
            format!("CUDA context {how} + {nt_how}"),
            &[
                ("tp", input.tp.to_string()),
                ("pp", input.pp.to_string()),
                ("cuda-context", format!("{context} B")),
            ],
            if r.v0 { SRC_WORKER_V0 } else { SRC_WORKER },
        ));
    } else {
        lines.push(line(
            "non_torch",
            "Memory outside torch since start-up (assumed, by tp/pp)",
            mib(nt),
            Kind::Assumed,
            nt_how,
            &[
                ("tp", input.tp.to_string()),
                ("pp", input.pp.to_string()),
                ("dp", par.dp.to_string()),
            ],
            if r.v0 { SRC_WORKER_V0 } else { SRC_WORKER },
        ));
    }
    let (in_use_line, refused) = foreign_memory(c, r, requested, peak, util)?;
    // An encoder-decoder runs without chunked multimodal input, so one clip's encoder
    // positions must fit in a batch (vllm v0.19.0 and v0.27.1
    // `v1/core/encoder_cache_manager.py` `compute_mm_encoder_budget` raises otherwise).
    let refused = if encdec && batched < c.encoder_tokens {
        Some(format!(
            "Chunked MM input disabled but max_tokens_per_mm_item ({}) is larger than max_num_batched_tokens ({batched}): vLLM refuses to start (give max-num-batched-tokens ≥ {}, or more max-num-seqs)",
            c.encoder_tokens, c.encoder_tokens
        ))
    } else if let Some(most) = input
        .max_position
        .filter(|m| encdec && c.max_model_len > *m)
    {
        // `transformers_utils/model_arch_config_convertor.py`
        // `derive_max_model_len_and_key` takes Whisper's `max_target_positions`, and
        // `config/model.py` refuses a longer max_model_len (its decoder's position
        // table has that many rows).
        Some(format!(
            "User-specified max_model_len ({}) is greater than the derived max_model_len (max_target_positions={most}): vLLM refuses to start (give max-model-len ≤ {most})",
            c.max_model_len
        ))
    } else {
        refused
    };
    if let Some(l) = in_use_line {
        lines.push(l);
    }
    let margin = total.saturating_sub(requested);
    let mut graph_bytes = 0;
    if p.on(ENFORCE_EAGER.key()) {
        assumptions.push("--enforce-eager: no CUDA graphs are captured".into());
    } else if r.graphs_subtracted {
        let query = sum(&[1, p.count(NUM_SPECULATIVE_TOKENS.key()).unwrap_or(0)])?;
        let (n_p, n_f) = capture_counts(seqs, batched, query);
        let layers = c.stage.map_or_else(
            || input.arch.map_or(0, |a| a.layers).div_ceil(input.pp.max(1)),
            |s| s.layers,
        );
        graph_bytes = prod(&[
            sum(&[n_p, n_f])?,
            sum(&[GRAPH_BASE, prod(&[GRAPH_PER_LAYER, layers])?])?,
        ])?;
        lines.push(line(
            "cuda_graphs",
            "CUDA-graph memory profiled before sizing (assumed per graph)",
            graph_bytes,
            Kind::Assumed,
            format!(
                "(PIECEWISE {n_p} + FULL {n_f} graphs) × ({} MiB + {} KiB × {layers} layers): the per-graph cost assumed from the 'Estimated CUDA graph memory' vLLM 0.19 printed on H100s (0.49–1.82 GiB for 102 graphs at 8–80 layers a device; above all but an MLA model, 1.39 GiB at 27 layers, and one tp 2 run){}",
                GRAPH_BASE / MIB,
                GRAPH_PER_LAYER >> 10,
                if r.v2 {
                    "; Model Runner V2 captures every PIECEWISE graph and the two largest FULL ones, and extrapolates the other FULL graphs from the second"
                } else {
                    ""
                }
            ),
            &[
                ("piecewise-graphs", n_p.to_string()),
                ("full-graphs", n_f.to_string()),
                ("layers", layers.to_string()),
            ],
            if r.v2 {
                "vllm/v1/worker/gpu/cudagraph_utils.py (profile_cudagraph_memory, _extrapolate_full_graph_memory)"
            } else {
                "vllm/v1/worker/gpu_model_runner.py (profile_cudagraph_memory)"
            },
        ));
    } else {
        let mut graphs = line(
            "cuda_graphs",
            "CUDA-graph pool (captured after sizing; not subtracted)",
            0,
            Kind::Assumed,
            format!(
                "{}; taken from the {} margin (0.5–1.8 GiB in H100 logs)",
                if r.v2 {
                    "not subtracted: Model Runner V2's profile_cudagraph_memory returns 0"
                } else {
                    "not subtracted unless VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1"
                },
                gib_text(margin)
            ),
            &[],
            "vllm/envs.py (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS)",
        );
        graphs.subtracted = false;
        lines.push(graphs);
        if margin < GIB {
            warnings.push(format!("only {} left beside vLLM's share for CUDA graphs (0.5–1.8 GiB in logs): may run out of memory", gib_text(margin)));
        }
    }
    // The activation line is computed from the source; its residue in the corpus is
    // ±0.05 GiB except fp32 models and vision towers (≤ 0.5 GiB), and the non-torch
    // line spreads ±0.08 GiB: a quarter of both is the band (and of the assumed
    // CUDA-graph estimate where it is subtracted).
    let uncertainty = sum(&[peak, non_torch_bytes, graph_bytes])?
        .checked_div(4)
        .unwrap_or(0);
    let draft_kv = spec.as_ref().map_or((0, 0, 0), |s| {
        (
            s.info.draft_kv_bytes_per_token,
            s.info.draft_kv_layers,
            s.layer_kv_bytes,
        )
    });
    let (group_block_bytes, groups, seq_blocks) = if r.v0 {
        simple_pool(c, 16)?
    } else {
        pool_shape(c, r, batched, draft_kv, &mut assumptions)?
    };
    let block = match (r.v0, draft_kv.1) {
        (false, 0) if r.state_pages => state_pool(c)?.map_or(16, |p| p.block),
        _ => 16,
    };
    let pool = match p.count(KV_CACHE_MEMORY_BYTES.key()) {
        Some(k) => {
            assumptions.push(format!(
                "--kv-cache-memory-bytes {k}: the pool; utilisation ignored"
            ));
            let used = sum(&[
                weights,
                draft_weights,
                rope,
                rounding,
                lora,
                peak,
                non_torch_bytes,
                k,
            ])?;
            if used > total {
                warnings.push(format!(
                    "pool + weights + profile {} > total {}",
                    gib_text(used),
                    gib_text(total)
                ));
            }
            Some(i64::try_from(k).unwrap_or(i64::MAX))
        }
        None => None,
    };
    if input.sliding_window.is_some() && groups > 1 {
        assumptions.push(format!(
            "hybrid KV cache: {groups} groups of equal page size"
        ));
    }
    Ok(Draft {
        version: r.label,
        capacity: total,
        capacity_kind: if derived { "torch, derived" } else { "torch" },
        lines,
        block,
        group_block_bytes,
        groups,
        seq_blocks,
        tokens_by_concurrency: r.consumed,
        kv_cache_bytes: None,
        pool,
        need: None,
        uncertainty,
        speculative: spec.map(|s| s.info),
        assumptions,
        warnings,
        refused,
        devices: Vec::new(),
    })
}

const SRC_GATE: &str = "vllm/v1/worker/gpu_worker.py (init_device: init_snapshot, requested_memory)";

/// Memory other processes hold on the device (`--memory-in-use`), as each release's
/// worker treats it: its line (subtracted where the release counts it) and the
/// start-up refusal, if any.
///
/// - 0.6.4's V0 worker and 0.8's V1 worker (`determine_available_memory`, read at
///   vllm-project/vllm 0012cf69, the early-2025 V1 worker) add to the torch peak
///   every byte in use on the device torch did not allocate, `mem_get_info`'s
///   total − free − torch's current ("NOTE(woosuk): Here we assume that the other
///   processes using the same GPU did not change their memory usage during the
///   profiling"): another process's memory leaves the pool byte for byte.
/// - 0.6.5, 0.6.6 and 0.7 (V0) measure from the free memory at `init_device`
///   (`baseline_memory_in_bytes = total − init_gpu_memory`): another process's memory
///   is in the baseline, not in the pool's deductions, and nothing checks it at start;
///   the pool, allocated after the profile, must still fit in what is free then:
///   context + memory in use + the share − the profile's freed peak ≤ total, else the
///   cache's allocation runs out of memory.
/// - 0.9 onwards (the 0.10, 0.19 and 0.27 rules): `Worker.init_device` takes
///   `init_snapshot = MemorySnapshot()` (after the CUDA context; at 35d5cda1 after
///   NCCL's initialisation too), `requested_memory = total × gpu_memory_utilization`, and
///   raises "Free memory on device (…) on startup is less than desired GPU memory
///   utilization" when the snapshot's free memory is below it (read at
///   vllm-project/vllm 35d5cda1; the same check in 0.9.1 and 0.9.2,
///   https://github.com/vllm-project/vllm/issues/20305 and a traceback through 0.9.2's
///   `gpu_worker.py` in https://github.com/ovg-project/kvcached/issues/29). The non-KV figure is measured from that snapshot, so memory
///   held before it does not shrink the pool: it only decides whether vLLM starts.
fn foreign_memory(
    c: &Ctx,
    r: &Rules,
    requested: u64,
    peak: u64,
    util: u64,
) -> Result<(Option<crate::engine::EngineLine>, Option<String>), EstimateError> {
    let in_use = c.params.count(MEMORY_IN_USE.key()).unwrap_or(0);
    if in_use == 0 {
        return Ok((None, None));
    }
    let (total, _) = c.card.torch_total();
    let context = mib(CONTEXT_MIB);
    // What is free when the worker looks: the card less its own context and the rest.
    let free = total.saturating_sub(context).saturating_sub(in_use);
    let inputs = [
        ("memory-in-use", format!("{in_use} B")),
        ("free-at-start-up", format!("{free} B")),
        ("cuda-context", format!("{context} B (assumed)")),
    ];
    let l = if r.foreign_counted {
        line(
            "memory_in_use",
            "Held by other processes, counted outside torch (--memory-in-use)",
            in_use,
            Kind::Computed,
            "mem_get_info's total − free − torch's allocated: every byte on the device the worker's torch did not allocate".into(),
            &inputs,
            if r.v0 { SRC_WORKER_V0 } else { SRC_WORKER },
        )
    } else {
        let mut l = line(
            "memory_in_use",
            "Held by other processes (--memory-in-use): outside vLLM's share, not deducted",
            in_use,
            Kind::Computed,
            if r.startup_gate {
                "measured before init_snapshot: not in the non-KV figure; the start-up check compares the snapshot's free memory with total × utilisation".into()
            } else {
                "in the baseline (free memory at init_device): not in the non-KV figure".into()
            },
            &inputs,
            if r.startup_gate { SRC_GATE } else { "vllm/worker/worker.py (determine_num_available_blocks: memory_profiling baseline)" },
        );
        l.subtracted = false;
        l
    };
    let refused = if r.startup_gate && free < requested {
        // The largest utilisation that starts, in hundredths, rounded down.
        let most = u128::from(free)
            .saturating_mul(100)
            .checked_div(u128::from(total))
            .unwrap_or(0);
        Some(format!(
            "Free memory on device ({}/{}) on startup is less than desired GPU memory utilization ({}, {}): vLLM refuses to start (gpu-memory-utilization 0.{most:02} at most, or free memory)",
            gib_text(free),
            gib_text(total),
            fraction_text(util),
            gib_text(requested)
        ))
    } else if !r.startup_gate && !r.foreign_counted && free.saturating_add(peak) < requested {
        Some(format!(
            "CUDA out of memory allocating the KV cache: vLLM's share ({}) less the profile's freed peak ({}) is more than is free beside the memory in use ({})",
            gib_text(requested),
            gib_text(peak),
            gib_text(free)
        ))
    } else {
        None
    };
    Ok((Some(l), refused))
}

const SRC_OFFLOAD: &str = "vllm/model_executor/offloader/uva.py (UVAOffloader._maybe_offload_to_cpu), vllm/model_executor/models/utils.py (make_layers)";

/// The bytes `--cpu-offload-gb` takes off this GPU: vLLM's UVA offloader
/// (vllm-project/vllm `vllm/model_executor/offloader/uva.py`,
/// `UVAOffloader._maybe_offload_to_cpu`, read at commit 00593fa; the same rule as
/// `maybe_offload_to_cpu` in `vllm/model_executor/models/utils.py` since 0.5.3) is
/// handed the decoder layers of this rank's stage in order (`make_layers`, its one
/// caller), and moves each layer's parameters one by one to pinned host memory while
/// the running total is below `int(cpu_offload_gb × 1024**3)` — whole parameters, so
/// the total may pass the budget by one parameter — and never the embeddings, the
/// final norm or the head. A layer's parameters as vLLM's Llama-style layer registers
/// them: `qkv_proj`, `o_proj` (the attention line split by their shapes), `gate_up_proj`
/// (or the experts' `w13`), `down_proj` (`w2`: 2 : 1 of the MLP line), the two norms;
/// this device's share of the estimate's lines, spread evenly over its layers. Exact
/// for a dense unquantised Llama-style layer; for a quantised or MoE layer the
/// boundaries between its parameters are these proportions (scales and the router
/// inside them).
fn cpu_offloaded(c: &Ctx, budget: u64) -> Result<u64, EstimateError> {
    use crate::estimate::LineKey;
    let Some(a) = c.input.arch else {
        return Err(EstimateError::invalid(
            "cpu-offload-gb",
            "needs the model's layers (a config.json, --model or a preset)",
        ));
    };
    let layers = a.layers.div_ceil(c.input.pp.max(1)).max(1);
    let per = |k: LineKey| super::request::line_bytes(c.est, k).checked_div(layers).unwrap_or(0);
    let (attn, mlp) = (per(LineKey::WeightsAttention), per(LineKey::WeightsMlp));
    // The norms line holds the layers' norms and the final one: one norm's bytes is
    // the line ÷ (layers × norms a layer + 1).
    let count = prod(&[layers, a.layer_norms])?.saturating_add(1);
    let one_norm = super::request::line_bytes(c.est, LineKey::WeightsNorms)
        .checked_div(count)
        .unwrap_or(0);
    let norms = prod(&[one_norm, a.layer_norms])?;
    let q = prod(&[a.heads, a.head_dim])?;
    let kv = prod(&[a.kv_heads, a.head_dim])?;
    let qkv_share = |x: u64| -> u64 {
        let num = u128::from(x).saturating_mul(u128::from(q.saturating_add(kv.saturating_mul(2))));
        let den = u128::from(q.saturating_mul(2).saturating_add(kv.saturating_mul(2)));
        u64::try_from(num.checked_div(den).unwrap_or(0)).unwrap_or(u64::MAX)
    };
    let qkv = qkv_share(attn);
    let gate_up = u64::try_from(u128::from(mlp).saturating_mul(2).checked_div(3).unwrap_or(0))
        .unwrap_or(u64::MAX);
    let n1 = norms / 2;
    let params = [
        qkv,
        attn.saturating_sub(qkv),
        gate_up,
        mlp.saturating_sub(gate_up),
        n1,
        norms.saturating_sub(n1),
    ];
    let mut total = 0u64;
    'layers: for _ in 0..layers {
        for p in params {
            if total >= budget {
                break 'layers;
            }
            total = total.saturating_add(p);
        }
    }
    Ok(total)
}

/// MXFP4 experts as vLLM 0.19 loads them: `fused_moe/oracle/mxfp4.py`
/// (`select_gpt_oss_mxfp4_moe_backend`, `_get_priority_backends`, read at upstream
/// 799973af4, April 2026) takes FlashInfer's TRT-LLM kernels on sm_100, the triton
/// kernels on sm_90 (supported from 9.0 below 11.0), AITER on ROCm and Marlin on every
/// other NVIDIA card (Ampere, Ada, sm_120 Blackwell), and
/// `mxfp4_round_up_hidden_size_and_intermediate_size` pads each rank's expert sizes for
/// it: triton the intermediate size to 64; Marlin the intermediate to 128 and the
/// hidden size to 256; TRT-LLM and ROCm both to 256 (a card the catalogue does not
/// know: both to 256, the most). gpt-oss-20b's 2880 × 2880 becomes 3072 × 2944 under
/// Marlin. The padding adds 3 × (H' × I' − H × I) values per expert and layer (w13 and
/// w2), 17 B per 32 (MXFP4 + its E8M0 scale), and 2 (I' − I) + (H' − H) bias values
/// (w13, w2 biases in the model dtype, created at the padded sizes).
///
/// Under data or expert parallelism (`parallel`) a rank pads its own experts at its
/// own split: ⌈experts ÷ ep⌉ whole experts, or each expert ÷ (tp × dp).
fn mxfp4_padding(
    input: &EstimateInput,
    card: &GpuCard,
    par: &parallel::Parallel,
) -> Result<u64, EstimateError> {
    use crate::catalogue::{Arch, Segment, Vendor};
    let (Some(a), Some(crate::format::StorageFormat::Mxfp4)) = (input.arch, input.format) else {
        return Ok(0);
    };
    let Some(m) = a.moe else { return Ok(0) };
    let i = m.expert_intermediate.div_ceil(par.moe_tp.max(1));
    let h = a.hidden;
    let (h_to, i_to) = match (card.vendor, card.arch, card.segment) {
        (_, Arch::Hopper, _) => (1, 64),
        (_, Arch::Blackwell, Segment::DataCentre) | (Vendor::Amd, _, _) | (_, Arch::Unknown, _) => {
            (256, 256)
        }
        _ => (256, 128),
    };
    let up = |x: u64, to: u64| x.div_ceil(to).saturating_mul(to);
    let (hp, ip) = (up(h, h_to), up(i, i_to));
    let layers = m.moe_layers(a.layers).div_ceil(input.pp.max(1));
    let per_expert = prod(&[3, hp, ip])?.saturating_sub(prod(&[3, h, i])?);
    let values = prod(&[per_expert, par.local_experts, layers])?;
    let bias = sum(&[prod(&[2, ip.saturating_sub(i)])?, hp.saturating_sub(h)])?;
    let bias_bytes = prod(&[bias, par.local_experts, layers, input.compute_dtype.bytes()])?;
    sum(&[values.div_ceil(32).saturating_mul(17), bias_bytes])
}

/// FP8 linears as vLLM loads them on ROCm: `_maybe_pad_fp8_weight`
/// (`model_executor/layers/quantization/utils/fp8_utils.py`, vLLM 0.19.0 and 0.27.1),
/// on by default (`VLLM_ROCM_FP8_PADDING`, envs.py: "1"), replaces each fp8 weight
/// whose rows are a multiple of 512 bytes with `F.pad(weight, (0, 256))[..., :-256]`:
/// a view, but of a storage 256 bytes a row wider, kept for the run (the unpadded one
/// is freed, `torch.accelerator.empty_cache()`). It runs for per-tensor scales
/// (`process_fp8_weight_tensor_strategy`, `Fp8LinearMethod` and compressed-tensors'
/// W8A8 FP8) and for block scales (`process_fp8_weight_block_strategy`: 0.19.0's
/// `Fp8LinearMethod.process_weights_after_loading`, 0.27.1's
/// `Fp8BlockScaledMMLinearKernel.process_weights_after_loading`, which ROCm's default
/// `TritonFp8BlockScaledMMKernel` inherits; AITER's, behind `VLLM_ROCM_USE_AITER`, off
/// by default, calls it too), not for per-channel scales nor for the fused experts.
/// The block scales themselves are the checkpoint's grid, ⌈out ÷ 128⌉ × ⌈in ÷ 128⌉
/// fp32 (`create_fp8_scale_parameter` over the fused output), which the weights
/// already count matrix by matrix (⌈⌉ of each, never fewer).
///
/// Over tp each rank pads its own slice: the output projections (`o_proj`,
/// `down_proj`, `out_proj`: `RowParallelLinear`) split their inputs, the others
/// (`ColumnParallelLinear`, `QKVParallelLinear`, `MergedColumnParallelLinear`) their
/// outputs, DeepSeek's replicated ones neither; a pipeline stage holds its share of
/// the layers.
fn rocm_fp8_padding(input: &EstimateInput, card: &GpuCard) -> Result<u64, EstimateError> {
    use crate::arch::ParamClass;
    use crate::catalogue::Vendor;
    use crate::format::StorageFormat;
    let Some(a) = input.arch.filter(|_| card.vendor == Vendor::Amd) else {
        return Ok(0);
    };
    let formats = crate::estimate::module_formats(input)?;
    let tp = input.tp.max(1);
    let layers = a.layers.max(1);
    let stage = layers.div_ceil(input.pp.max(1));
    let mut total = 0u64;
    for t in a.tensors()? {
        if !matches!(t.class, ParamClass::Attention | ParamClass::Mlp)
            || t.cols <= 1
            || t.name.starts_with("experts.")
            || t.name.starts_with("attn_experts.")
            || !matches!(formats.for_group(&t), StorageFormat::Fp8 { .. })
        {
            continue;
        }
        let row_parallel = ["o_proj", "down_proj", "out_proj"]
            .iter()
            .any(|n| t.name.ends_with(n));
        // DeepSeek's `q_a_proj`, `kv_a_proj_with_mqa` and its indexer's `wq_b`, `wk`
        // are `ReplicatedLinear`s (models/deepseek_v2.py): whole on every rank.
        let replicated = t.name.contains("_a_proj") || t.name.starts_with("indexer.");
        let (rows, cols) = if replicated {
            (t.rows, t.cols)
        } else if row_parallel {
            (t.rows, t.cols.div_ceil(tp))
        } else {
            (t.rows.div_ceil(tp), t.cols)
        };
        if !cols.is_multiple_of(512) {
            continue;
        }
        let count = crate::units::share_ceil(t.count, stage, layers);
        total = sum(&[total, prod(&[rows, 256, count])?])?;
    }
    Ok(total)
}

/// vLLM's LoRA slots (vllm/lora/layers/base_linear.py `create_lora_weights`): per
/// slot and linear, A = rank × input and B = output × rank for each slice; qkv has 3
/// slices and gate_up 2; column-parallel layers shard B, row-parallel ones A.
fn lora_bytes(c: &Ctx, _r: &Rules) -> Result<u64, EstimateError> {
    let p = c.params;
    let Some(a) = c.input.arch.filter(|_| p.on(ENABLE_LORA.key())) else {
        return Ok(0);
    };
    let tp = c.input.tp.max(1);
    let q = prod(&[a.heads, a.head_dim])?;
    let kv = prod(&[a.kv_heads, a.head_dim])?;
    let sharded =
        sum(&[prod(&[2, q])?, prod(&[2, kv])?, prod(&[3, a.intermediate])?])?.div_ceil(tp);
    let per_layer = sum(&[prod(&[7, a.hidden])?, sharded])?;
    let layers = a.layers.div_ceil(c.input.pp.max(1));
    prod(&[
        p.count(MAX_LORAS.key()).unwrap_or(1),
        p.count(MAX_LORA_RANK.key()).unwrap_or(16),
        per_layer,
        layers,
        c.input.compute_dtype.bytes(),
    ])
}

#[cfg(test)]
mod tests;
