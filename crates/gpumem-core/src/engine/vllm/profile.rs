//! vLLM's profiling run: the torch peak of `profile_run` (the forward of
//! `max_num_batched_tokens`, the sampler phase, the MoE and cuBLAS workspaces, the
//! encoder's dummy batch) and the CUDA graphs the V1 runner captures.

use super::parallel::Parallel;
use super::releases::Rules;
use crate::engine::arith::{MIB, prod, sum};
use crate::engine::outcome::Inputs;
use crate::engine::request::{Ctx, forward_peak};
use crate::error::EstimateError;
use crate::estimate::EstimateInput;

/// The drafter's share of the profiling run (speculative decoding): its forward beside
/// the target's held hidden states, and its share of the fused-MoE workspace.
pub(super) struct DraftPhase {
    /// The drafter's profiling forward, bytes.
    pub forward: u64,
    /// Its share of the fused-MoE workspace (the one buffer serves both).
    pub workspace: u64,
}

/// The torch peak of `profile_run` on the last stage, with its parts as inputs.
#[allow(clippy::too_many_arguments)]
pub(super) fn profile_peak(
    c: &Ctx,
    r: &Rules,
    batched: u64,
    seqs: u64,
    sms: u64,
    sm90: bool,
    spec: Option<&DraftPhase>,
    (mm, mm_items): (u64, u64),
    par: &Parallel,
) -> Result<(u64, Inputs), EstimateError> {
    let input = c.input;
    let b = input.compute_dtype.bytes();
    let (vocab, hidden) = input.arch.map_or((0, 0), |a| (a.vocab, a.hidden));
    // V0 profiles in eager PyTorch, where a tensor lives as long as a Python name holds
    // it: `LlamaMLP.forward` (vllm v0.7.2 `vllm/model_executor/models/llama.py`, and
    // Qwen2MLP alike) keeps `gate_up` while `down_proj` writes its output, and the
    // decoder layer still holds the MLP's normed input and the residual
    // (`LlamaDecoderLayer.forward`), three full-width rows per token beside the three
    // intermediate-width ones `forward_peak` counts (the down output before its
    // all-reduce is full width on every tp rank). V1 runs the profile through
    // torch.compile, whose Inductor graph frees each buffer at its last use.
    let eager = if r.v0 {
        prod(&[3, batched, hidden, b])?
    } else {
        0
    };
    let bnb = sum(&[bnb_dequant(input, batched)?, bnb_int8(input, batched)?])?;
    // Under data or expert parallelism the estimate's forward counts the MoE
    // intermediates of this rank's tokens at the model's tp (`base`): they are taken
    // out, and the workspace of the rows the layer sees at its own split put in, with
    // the DP all-gather's buffers (`super::parallel`).
    let rows_moe = par.moe_tokens(batched, input.tp.max(1))?;
    let base = moe_workspace(input, batched, input.tp)?;
    let gathered = super::parallel::gathered(input, par, rows_moe)?;
    let forward = sum(&[forward_peak(input, batched)?, eager, bnb, gathered])?;
    let rows = seqs.min(batched);
    // ParallelLMHead pads the vocabulary to a multiple of 64 (vocab_parallel_embedding.py);
    // the logits keep the padded width, the sampler's copies the real one.
    let padded = vocab.div_ceil(64).saturating_mul(64);
    let model_logits = prod(&[rows, padded, b])?;
    let sort_path = !r.v2 && (!r.triton || rows < 8);
    let per_elem = if sort_path { 38 } else { r.sampler_bytes };
    // Past the model's logits (2 B counted above): a model in fp32 has no fp32 copy.
    // (V2 copies into a new fp32 tensor whatever the model's dtype.)
    let extra = per_elem
        .saturating_sub(2)
        .saturating_sub(if b == 4 && !r.v2 { 4 } else { 0 });
    let sampler = prod(&[rows, vocab, extra])?;
    // topk_topp_triton.py: one fp32 vocabulary row per program, min(next_pow2(min(SMs, rows)), SMs).
    let triton = if sort_path || !r.triton {
        0
    } else {
        let n = sms.min(rows).next_power_of_two().min(sms);
        prod(&[n, vocab, 4])?
    };
    // Held while sampling: the forward's hidden states, the last position of each
    // request and its random stand-in (`torch.rand_like`).
    let held = prod(&[sum(&[batched, rows, rows])?, hidden, b])?;
    // With speculative decoding, `_dummy_sampler_run` then runs the rejection
    // sampler (`vllm/v1/sample/rejection_sampler.py` `forward`) over one draft token
    // per request: fresh target logits of 2 rows per request (`torch.randn`, the
    // logits' dtype) are held while it samples the bonus tokens from a copy of one
    // row per request — the sampler phase again, the model's logits replaced by that
    // copy, beside the 2 rows.
    let rejection = if spec.is_some() {
        prod(&[2, rows, vocab, b])?
    } else {
        0
    };
    // Only the last pipeline stage samples (`profile_run`: `_dummy_sampler_run` where
    // `get_pp_group().is_last_rank`).
    let sampler_phase = if vocab > 0 && c.stage.is_none_or(|s| s.last) {
        sum(&[model_logits, sampler, triton, held, rejection])?
    } else {
        0
    };
    // The drafter's forward (its own MoE intermediates are in the shared workspace).
    let draft_phase = spec.map_or(0, |s| s.forward.saturating_sub(s.workspace));
    let ws = moe_workspace(input, rows_moe, par.moe_tp)?;
    // torch CublasHandlePool.cpp: 32 MiB of cuBLAS workspace on sm_90, 4096 KiB × 2 +
    // 16 KiB × 8 elsewhere, allocated by the caching allocator at the first GEMM.
    let cublas = crate::catalogue::cublas_workspace_bytes(sm90);
    // The estimator's forward counts the MoE intermediates, which vLLM allocates as
    // that workspace: kept (0.19), the forward phase holds the rest beside it; freed
    // (earlier), the forward itself is the phase.
    let peak = if r.workspace_kept {
        let drafter = spec.map_or(0, |s| s.workspace);
        let (ws, base) = (ws.max(drafter), base.max(drafter));
        sum(&[
            forward
                .saturating_sub(base)
                .max(sampler_phase)
                .max(draft_phase),
            ws,
            mm,
            cublas,
        ])?
    } else {
        sum(&[
            forward.max(ws).max(sampler_phase).max(draft_phase),
            mm,
            cublas,
        ])?
    };
    let parts = vec![
        ("forward", forward.to_string()),
        ("forward-eager-rows", eager.to_string()),
        (
            if matches!(input.format, Some(crate::format::StorageFormat::Int8)) {
                "bnb-int8-scratch"
            } else {
                "bnb-dequantised"
            },
            bnb.to_string(),
        ),
        ("sampler-phase", sampler_phase.to_string()),
        ("sampler-rows", rows.to_string()),
        ("moe-workspace", ws.to_string()),
        ("cublas-workspace", cublas.to_string()),
        ("max-num-batched-tokens", batched.to_string()),
    ];
    let mut parts = parts;
    if par.active() {
        parts.push(("moe-rows", rows_moe.to_string()));
        parts.push(("moe-tp", par.moe_tp.to_string()));
        parts.push(("dp-gathered", gathered.to_string()));
    }
    if mm > 0 {
        parts.push(("encoder-items", mm_items.to_string()));
        parts.push(("encoder-held", mm.to_string()));
    }
    if spec.is_some() {
        parts.push(("rejection-logits", rejection.to_string()));
        parts.push(("drafter-phase", draft_phase.to_string()));
    }
    Ok((peak, parts))
}

/// The cost of one captured CUDA graph in 0.27's V1 estimate, assumed (no public
/// figure splits it): a fixed part and a part per layer on the device, set so that
/// (PIECEWISE + FULL graphs) × cost is not below the "Estimated CUDA graph memory"
/// vLLM 0.19 printed in the H100 logs of `tests/calibration/` (0.49 GiB at 8 layers a
/// device, 0.84 at 32, 1.02 at 48, 1.82 at 80, each over 51 + 51 graphs), except the
/// MLA model (1.39 GiB at 27 layers) and one tp 2 run (1.69 at 32): an estimate too
/// large leaves a smaller pool, the safe side.
pub(super) const GRAPH_BASE: u64 = 4 * MIB;

pub(super) const GRAPH_PER_LAYER: u64 = 192 << 10;

/// The CUDA graphs 0.27's V1 runner captures (PIECEWISE, FULL): vllm v0.22.0
/// (upstream 3cb83c95922f) `vllm/config/vllm.py` `_set_cudagraph_sizes`: up to
/// min(max_num_seqs × decode query length × 2, 512, max_num_batched_tokens) tokens,
/// sizes 1, 2, 4, every 8 below 256 and every 16 from 256, plus max_num_batched_tokens
/// when it is within; `vllm/v1/cudagraph_dispatcher.py` `initialize_cudagraph_keys`
/// (the default FULL_AND_PIECEWISE mode): a PIECEWISE graph per size, and a FULL
/// decode graph per size from the query length up to max_num_seqs × query length.
pub(super) fn capture_counts(seqs: u64, batched: u64, query: u64) -> (u64, u64) {
    let cap = seqs
        .saturating_mul(query)
        .saturating_mul(2)
        .min(512)
        .min(batched)
        .max(1);
    let small = [1u64, 2, 4].into_iter().filter(|x| *x <= cap);
    let by8 = (8..cap.saturating_add(1).min(256)).step_by(8);
    let by16 = (256..cap.saturating_add(1)).step_by(16);
    let sizes = || small.clone().chain(by8.clone()).chain(by16.clone());
    let extra = u64::from(batched <= cap && !sizes().any(|x| x == batched));
    let decode_max = seqs.saturating_mul(query);
    let full = sizes()
        .chain((extra > 0).then_some(batched))
        .filter(|x| *x <= decode_max && *x >= query)
        .count();
    let n = sizes().count();
    (
        u64::try_from(n).unwrap_or(u64::MAX).saturating_add(extra),
        u64::try_from(full).unwrap_or(u64::MAX),
    )
}

/// What the multimodal encoder's profiling leaves allocated through the text forward
/// and the sampler: vllm v0.19.0 `gpu_model_runner.py` `profile_run` first encodes a
/// dummy batch (`_get_mm_dummy_batch`) of the item with the most tokens and keeps, as
/// locals and in `encoder_cache`, its inputs (in the model dtype:
/// `multimodal/processing/context.py` `_postprocess_output`) and its outputs (one
/// embedding of the text width per token) until the run ends. The batch holds
/// `encoder budget ÷ tokens per item` items (`multimodal/encoder_budget.py`
/// `_get_max_items`; the budget is max(max_num_batched_tokens, tokens per item),
/// `v1/core/encoder_cache_manager.py` `compute_mm_encoder_budget`), at most
/// max_num_seqs × max(1, min(999, max_model_len ÷ tokens)) (999 items per prompt by
/// default, `config/multimodal.py`). Returns the bytes and the items.
pub(super) fn encoder_held(c: &Ctx, batched: u64, seqs: u64) -> Result<(u64, u64), EstimateError> {
    let input = c.input;
    let (Some(tokens), Some(values), Some(a)) =
        (input.mm_item_tokens, input.mm_item_values, input.arch)
    else {
        return Ok((0, 0));
    };
    if tokens == 0 || a.tower_params == 0 {
        return Ok((0, 0));
    }
    let items = batch_items(c, batched, seqs, tokens)?;
    let one = sum(&[values, prod(&[tokens, a.hidden])?])?;
    Ok((prod(&[items, one, input.compute_dtype.bytes()])?, items))
}

/// The items of `tokens` tokens each in the encoder's dummy batch, with chunked
/// prefill on (vllm v0.19.0 and v0.27.1 `multimodal/encoder_budget.py`
/// `MultiModalBudget._get_max_items`): max(1, min(budget ÷ tokens, max_num_seqs ×
/// max(1, min(999, max_model_len ÷ tokens)))), the budget max(max_num_batched_tokens,
/// tokens) (`v1/core/encoder_cache_manager.py` `compute_mm_encoder_budget`), 999 the
/// items a prompt may hold by default (`config/multimodal.py` `get_limit_per_prompt`)
/// where the model sets no limit of its own.
fn batch_items(c: &Ctx, batched: u64, seqs: u64, tokens: u64) -> Result<u64, EstimateError> {
    let budget = batched.max(tokens);
    let per_prompt = c
        .max_model_len
        .checked_div(tokens)
        .unwrap_or(0)
        .clamp(1, 999);
    Ok(budget
        .checked_div(tokens)
        .unwrap_or(0)
        .min(prod(&[seqs, per_prompt])?)
        .max(1))
}

/// Feature frames of the dummy clip vLLM profiles Qwen2-Audio with: 30 s at 16 kHz in
/// hops of 160 samples (`Qwen2AudioDummyInputsBuilder.get_dummy_mm_data`: a clip of
/// `chunk_length × sampling_rate` samples, which the processor pads to that length;
/// `Qwen2AudioFeatureInputs` fixes the features' last dimension at 3000), vllm v0.19.0
/// and v0.27.1 `model_executor/models/qwen2_audio.py`.
pub(super) const QWEN2_AUDIO_FRAMES: u64 = 3000;

/// The prompt tokens of one Qwen2-Audio clip of `frames` feature frames: vllm v0.19.0
/// and v0.27.1 `qwen2_audio.py` `_get_feat_extract_output_lengths` (the second
/// convolution's stride 2, then the encoder's average pooling of stride 2), which
/// `Qwen2AudioProcessingInfo.get_mm_max_tokens_per_item` applies to the 30 s clip:
/// 3000 frames give 750 tokens.
pub(super) const fn qwen2_audio_tokens(frames: u64) -> u64 {
    let feat = (frames.saturating_sub(1) / 2).saturating_add(1);
    (feat.saturating_sub(2) / 2).saturating_add(1)
}

/// What Qwen2-Audio's encoder profiling leaves allocated through the text forward and
/// the sampler (the model whose audio tower the config reader keeps: [`crate::arch::AudioTower`],
/// read from its `audio_config`), read in vllm v0.19.0 and v0.27.1:
/// - the batch: `Qwen2AudioProcessingInfo.get_supported_mm_limits` sets no limit on
///   audio items (`{"audio": None}`: the default 999 a prompt) and the model keeps
///   chunked prefill, so the dummy batch holds [`batch_items`] clips of 750 tokens
///   ([`qwen2_audio_tokens`] of [`QWEN2_AUDIO_FRAMES`]);
/// - the outputs, held in `encoder_cache` until the run ends: `_process_audio_input`
///   returns views of `masked_audio_features` (`audio_features[audio_features_mask]`,
///   a copy), 750 × the text width a clip in the model dtype (its projector's output,
///   a local, is freed on return);
/// - the inputs, under the V1 runner (0.19's, and 0.27's for the models it keeps):
///   `gpu_model_runner.py` `profile_run` holds the batch `_get_mm_dummy_batch` moved
///   to the device (`batched_dummy_mm_inputs`, a local) until it returns:
///   `input_features`, `num_mel_bins` × 3000 values a clip in the model dtype
///   (`multimodal/processing/context.py` `_postprocess_output` casts floating
///   tensors), and `feature_attention_mask`, 3000 int32 values a clip
///   (`WhisperFeatureExtractor`'s mask, not cast). Model Runner V2 (0.27's
///   `v1/worker/gpu/mm/encoder_runner.py` `profile_encoder_cache` →
///   `execute_mm_encoder`) builds the device batch inside `execute_mm_encoder` and
///   frees it on return: its outputs only.
///
/// Returns the bytes and the clips.
pub(super) fn qwen2_audio_held(
    c: &Ctx,
    r: &Rules,
    batched: u64,
    seqs: u64,
) -> Result<(u64, u64), EstimateError> {
    let Some((a, tower)) = c
        .input
        .arch
        .filter(|a| !a.encoder && a.encdec_params == 0)
        .and_then(|a| a.audio.map(|t| (a, t)))
    else {
        return Ok((0, 0));
    };
    let b = c.input.compute_dtype.bytes();
    let tokens = qwen2_audio_tokens(QWEN2_AUDIO_FRAMES);
    let items = batch_items(c, batched, seqs, tokens)?;
    let outputs = prod(&[tokens, a.hidden, b])?;
    let inputs = if r.v2 {
        0
    } else {
        sum(&[
            prod(&[tower.mels, QWEN2_AUDIO_FRAMES, b])?,
            prod(&[QWEN2_AUDIO_FRAMES, 4])?,
        ])?
    };
    Ok((prod(&[items, sum(&[outputs, inputs])?])?, items))
}

/// Whisper's mel bins assumed for the encoder's dummy inputs: large-v3's 128 (the
/// earlier checkpoints' 80 hold less), as the config reader does not keep
/// `num_mel_bins`.
pub(super) const MEL_BINS: u64 = 128;

/// What Whisper's encoder profiling leaves allocated through the decoder's forward and
/// the sampler, the same rule as [`encoder_held`] for an audio item (read in vllm
/// v0.19.0 and v0.27.1: `gpu_model_runner.py` `profile_run` and Model Runner V2's
/// `profile_run` with `profile_encoder_cache`): each item is one 30 s clip
/// (`WhisperDummyInputsBuilder.get_dummy_mm_data`: `chunk_length × sampling_rate`
/// samples), its input features `num_mel_bins × 2 × max_source_positions` values (3000
/// frames the two convolutions halve to 1500) in the model dtype and its encoder
/// output `max_source_positions × d_model` (`embed_multimodal`). Whisper allows one
/// audio per prompt (`get_supported_mm_limits`) and disables chunked prefill, so
/// `multimodal/encoder_budget.py` `MultiModalBudget._get_max_items` holds
/// max(1, min(budget ÷ 1500, min(max_num_seqs, max_num_batched_tokens ÷ 1500)))
/// items, the budget max(max_num_batched_tokens, 1500)
/// (`encoder_cache_manager.py` `compute_mm_encoder_budget`). Returns the bytes and
/// the items.
pub(super) fn audio_held(c: &Ctx, batched: u64, seqs: u64) -> Result<(u64, u64), EstimateError> {
    let Some(a) = c.input.arch.filter(|a| a.encoder_length > 0) else {
        return Ok((0, 0));
    };
    let tokens = a.encoder_length;
    let budget = batched.max(tokens);
    let reqs = seqs.min(batched.checked_div(tokens).unwrap_or(0));
    let items = budget
        .checked_div(tokens)
        .unwrap_or(0)
        .min(reqs)
        .max(1);
    let one = sum(&[prod(&[MEL_BINS, 2, tokens])?, prod(&[tokens, a.hidden])?])?;
    Ok((prod(&[items, one, c.input.compute_dtype.bytes()])?, items))
}

/// vllm v0.19.0 `fused_moe/modular_kernel.py` `_allocate_buffers` with the triton
/// experts' `workspace_shapes` (`fused_moe.py`): workspace13 = max(M × top-k ×
/// max(I, H), M × H), workspace2 = M × top-k × max(2 I, H), in the activation dtype,
/// each rounded to 256 B (I: the expert intermediate size per tp rank).
///
/// `moe_tp` is the tp each expert is split over: the model's tp, tp × dp under data
/// parallelism, 1 under expert parallelism (`super::parallel`), where the top-k is
/// still the model's (the kernel's rows for experts of other ranks are masked by the
/// expert map, not dropped).
pub(super) fn moe_workspace(
    input: &EstimateInput,
    tokens: u64,
    moe_tp: u64,
) -> Result<u64, EstimateError> {
    let Some(a) = input.arch else { return Ok(0) };
    let Some(m) = a.moe else { return Ok(0) };
    let i = m.expert_intermediate.div_ceil(moe_tp.max(1));
    let h = a.hidden;
    let b = input.compute_dtype.bytes();
    let w13 = prod(&[tokens, m.active, i.max(h)])?.max(prod(&[tokens, h])?);
    let w2 = prod(&[tokens, m.active, prod(&[2, i])?.max(h)])?;
    let up = |e: u64| prod(&[e, b]).map(|x| x.div_ceil(256).saturating_mul(256));
    sum(&[up(w13)?, up(w2)?])
}

/// The (input width, widest shard's output width, layer's output width) of each
/// linear vLLM's bitsandbytes method runs, per tp rank: qkv (shards q, k, v), o,
/// gate_up (shards gate, up; one shard without a gated MLP), down. A column-parallel
/// shard is its width ÷ tp, a row-parallel linear (o, down) reads its width ÷ tp.
fn bnb_linears(a: &crate::arch::Architecture, tp: u64) -> Result<Vec<(u64, u64, u64)>, EstimateError> {
    let h = a.hidden;
    let q = prod(&[a.heads, a.head_dim])?.div_ceil(tp);
    let kv = prod(&[a.kv_heads, a.head_dim])?.div_ceil(tp);
    let inter = a.intermediate.div_ceil(tp);
    let up = if a.gated_mlp { 2 } else { 1 };
    let mut linears = vec![(h, q, sum(&[q, kv, kv])?), (q, h, h)];
    if inter > 0 {
        linears.push((h, inter, prod(&[up, inter])?));
        linears.push((inter, h, h));
    }
    Ok(linears)
}

/// What vLLM's bitsandbytes 8-bit path (LLM.int8(), a pre-quantised `load_in_8bit`
/// checkpoint) holds in the profile's forward beyond the 16-bit output the forward
/// counts, at its widest linear (vllm v0.19.0 and v0.27.1
/// `model_executor/layers/quantization/bitsandbytes.py`
/// `BitsAndBytesLinearMethod._apply_8bit_weight`; bitsandbytes 0.48.1 to 0.50.1, the
/// releases vLLM's `_check_bitsandbytes_version` accepts on CUDA:
/// `autograd/_functions.py` `MatMul8bitLt.forward`, `backends/cuda/ops.py`
/// `int8_vectorwise_quant`, `int8_linear_matmul`, `int8_mm_dequant`,
/// `backends/default/ops.py` `int8_scaled_mm`, `int8_mixed_scaled_mm`):
/// - vLLM casts the input to bf16 (`bf_x`, a copy unless the model is in bf16, held to
///   the end) and writes the shards into an fp16 `out` as wide as the layer's output;
///   after the loop `out.to(original_type)` copies it unless the model is in fp16;
/// - per shard, `MatMul8bitLt` quantises `A.to(torch.float16)` (a copy of the input:
///   2 B a value) with vLLM's `llm_int8_threshold` (6.0 unless the checkpoint says
///   otherwise): `int8_vectorwise_quant` allocates the int8 rows (1 B) and the fp32
///   row scales (4 B a row), then finds outliers with `A.abs() >= threshold` (2 B, then
///   1 B a value, both alive at the comparison): 6 B a value and 4 B a row;
/// - `int8_scaled_mm`: the int32 product (4 B a value of the shard's output), its fp16
///   dequantisation (2 B), cast to the input's dtype (bf16: 2 B) while both are alive,
///   beside the int8 rows and their scales: 8 B an output value, 1 B an input value
///   and 4 B a row;
/// - an input dimension not a multiple of 4 takes `_int8_linear_matmul_impl`'s fp32
///   fallback: the int8 rows and the shard's int8 weight in fp32 and their fp32
///   product before its int32 copy (into the preallocated int32 output).
///
/// With threshold 0 (no outlier search) the quantisation holds 3 B a value: the
/// threshold's figure is the larger, counted. Not counted: the outlier columns
/// (`int8_mixed_scaled_mm`: each keeps its input column and its dequantised weight
/// column, 2 × (tokens + shard width) bytes, beside the product; how many depends on
/// the profile's dummy activations). vLLM refuses an 8-bit MoE
/// (`BitsAndBytesMoEMethod._create_weights_8bit` raises `NotImplementedError`).
pub(super) fn bnb_int8(input: &EstimateInput, tokens: u64) -> Result<u64, EstimateError> {
    if !matches!(input.format, Some(crate::format::StorageFormat::Int8)) {
        return Ok(0);
    }
    let Some(a) = input.arch else { return Ok(0) };
    let tp = input.tp.max(1);
    let b = input.compute_dtype.bytes();
    let bf16 = input.compute_dtype == crate::format::Dtype::Bf16;
    let fp16 = input.compute_dtype == crate::format::Dtype::F16;
    let mut worst = 0;
    for (width_in, shard, out) in bnb_linears(&a, tp)? {
        let values_in = prod(&[tokens, width_in])?;
        let row_scales = prod(&[tokens, 4])?;
        let quantise = sum(&[prod(&[values_in, 6])?, row_scales])?;
        let product = if width_in % 4 == 0 {
            prod(&[tokens, shard, 8])?
        } else {
            // fp32 rows and weight, the fp32 product, the int32 output; then the
            // dequantisation's fp16 and bf16 copies once the fp32 ones are freed.
            sum(&[
                prod(&[values_in, 4])?,
                prod(&[shard, width_in, 4])?,
                prod(&[tokens, shard, 8])?,
            ])?
        };
        let shard_peak = quantise.max(sum(&[values_in, row_scales, product])?);
        let copy_in = if bf16 { 0 } else { prod(&[values_in, 2])? };
        let copy_out = if fp16 { 0 } else { prod(&[tokens, out, b])? };
        worst = worst.max(sum(&[copy_in, shard_peak.max(copy_out)])?);
    }
    Ok(worst)
}

/// What vLLM's bitsandbytes 4-bit path holds in the profile's forward beyond the
/// 16-bit output the forward counts (vllm `model_executor/layers/quantization/
/// bitsandbytes.py`, upstream as merged in 1CatAI/1Cat-vLLM 92a785cb, May 2026;
/// bitsandbytes 0.46 `autograd/_functions.py`):
/// - a linear (`_apply_4bit_weight`, `_apply_bnb_4bit`): its input in bf16
///   (`x.to(torch.bfloat16)`, a copy unless the model is in bf16, held to the end),
///   then, shard by shard (q, k, v; gate, up), `matmul_4bit` over all the batch's
///   rows, which `MatMul4Bit.forward` runs as `linear(A, dequantize_4bit(B)
///   .to(A.dtype).t())`: the shard's whole weight dequantised to bf16 (two copies
///   while it is cast from a model dtype other than bf16) and the shard's output,
///   beside the layer's bf16 `out`; then `out.to(original_type)`, a copy of the
///   layer's output unless the model is in bf16. Per tp rank a column-parallel
///   shard (q, gate, up) is its width ÷ tp × hidden, a row-parallel one (o, down)
///   hidden × its width ÷ tp with hidden-wide rows;
/// - an MoE layer (`BitsAndBytesMoEMethod.apply`, `_apply_4bit_dequnt`): every
///   expert's gate-up and down weights dequantised in the model dtype before
///   `fused_experts` runs (both held through it), with the nested absmax of the
///   second in fp32 while it is dequantised (`dequantize_4bit` under double
///   quantisation, blocks of 64 as vLLM quantises).
///
/// Added to the forward's peak: the linear's part is an upper bound (it runs before
/// the activation the forward's peak holds), the MoE part is held at its peak.
pub(super) fn bnb_dequant(input: &EstimateInput, tokens: u64) -> Result<u64, EstimateError> {
    let Some(crate::format::StorageFormat::Bnb4 { double_quant, .. }) = input.format else {
        return Ok(0);
    };
    let Some(a) = input.arch else { return Ok(0) };
    let tp = input.tp.max(1);
    let b = input.compute_dtype.bytes();
    let bf16 = input.compute_dtype == crate::format::Dtype::Bf16;
    let h = a.hidden;
    let up = if a.gated_mlp { 2 } else { 1 };
    let mut linear = 0;
    for (width_in, shard, out) in bnb_linears(&a, tp)? {
        let weight = prod(&[shard, width_in, 2])?;
        let rows = prod(&[tokens, shard, 2])?;
        let (copy_in, cast, copy_out) = if bf16 {
            (0, 0, 0)
        } else {
            (prod(&[tokens, width_in, 2])?, weight, prod(&[tokens, out, b])?)
        };
        let held = sum(&[weight, cast])?.max(sum(&[weight, rows])?).max(copy_out);
        linear = linear.max(sum(&[copy_in, held])?);
    }
    let experts = match a.moe {
        Some(m) if m.experts > 0 => {
            let i = m.expert_intermediate.div_ceil(tp);
            let width = if m.latent > 0 { m.latent } else { h };
            let w13 = prod(&[m.experts, up, i, width, b])?;
            let w2 = prod(&[m.experts, i, width, b])?;
            let absmax = if double_quant {
                prod(&[m.experts, i, width])?.div_ceil(64).saturating_mul(4)
            } else {
                0
            };
            sum(&[w13, w2, absmax])?
        }
        _ => 0,
    };
    Ok(linear.max(experts))
}
