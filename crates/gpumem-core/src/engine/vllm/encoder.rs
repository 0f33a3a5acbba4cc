//! vLLM's pooling runner serving an encoder-only model (BERT, RoBERTa, XLM-R,
//! ModernBERT: `vllm serve BAAI/bge-large-en-v1.5 --runner pooling`), read in vllm
//! v0.27.1 and v0.19.0 (the same code in both):
//!
//! - No KV cache. `EncoderOnlyAttention.get_kv_cache_spec` returns `None`
//!   (`vllm/model_executor/layers/attention/encoder_only_attention.py`), so
//!   `GPUModelRunner.get_kv_cache_spec` lists no layer, and `EngineCore.
//!   _initialize_kv_caches` (`vllm/v1/engine/core.py`) takes its "Attention free models
//!   don't need memory for kv cache" branch: `determine_available_memory` is never
//!   called — no profiling run, no pool, no "Available KV cache memory" or "GPU KV cache
//!   size" line. The encoder-only layers join the runner's own config afterwards
//!   (`may_add_encoder_only_layers_to_kv_cache_config`) for their attention metadata,
//!   with no memory.
//! - `gpu_memory_utilization` is only the start-up check: `request_memory`
//!   (`vllm/v1/worker/utils.py`) refuses to start when less than ⌈total × utilisation⌉
//!   is free; nothing afterwards holds the process to that share.
//! - The memory it holds is the weights, the CUDA graphs it captures and the largest
//!   batch's forward: a batch is at most `max_num_batched_tokens` tokens, whose default
//!   (`vllm/engine/arg_utils.py` `_set_default_max_num_seqs_and_batched_tokens_args`)
//!   is `get_batch_defaults`' (2048 for `vllm serve` below 70 GiB or on an A100, else
//!   8192), raised to `max_model_len` because an encoder cannot chunk its prefill
//!   (`ModelConfig.is_chunked_prefill_supported`: "Pooling models with bidirectional
//!   attn do not support chunked prefill"), and at most `max_num_seqs × max_model_len`.
//!   `SchedulerConfig.verify_max_model_len` refuses a `max_num_batched_tokens` below
//!   `max_model_len` (chunked prefill off).
//!
//! So the rule is the card's total less what the process holds at its largest batch:
//! what is left is the room on the card, not a pool.

use super::flags::{ENFORCE_EAGER, GPU_MEMORY_UTILIZATION, MAX_NUM_SEQS};
use super::profile::{GRAPH_BASE, GRAPH_PER_LAYER, capture_counts};
use super::releases::Rules;
use crate::engine::arith::{GIB, MIB, mib, prod, sum};
use crate::engine::flags::{BATCHED_TOKENS, MEMORY_IN_USE};
use crate::engine::fraction::{ONE, fraction_text, times_fraction};
use crate::engine::outcome::{Inputs, line};
use crate::engine::pool::{Batch, Draft};
use crate::engine::request::{CONTEXT_MIB, Ctx};
use crate::error::EstimateError;
use crate::estimate::{EstimateInput, Kind};

/// The flags of a decoder's pool or generation: an encoder's rule reads none of them.
const IGNORED: &[&str] = &[
    "kv-cache-memory-bytes",
    "speculative-method",
    "num-speculative-tokens",
    "draft-model",
    "enable-lora",
    "max-loras",
    "max-lora-rank",
    "cpu-offload-gb",
];

const SRC_CORE: &str = "vllm/v1/engine/core.py (_initialize_kv_caches: no KV cache spec, no profile)";

/// The pooling runner's rule for an encoder-only model (the releases whose source was
/// read: 0.27 and 0.19).
pub(super) fn rule(
    c: &Ctx,
    r: &Rules,
    version: &'static str,
) -> Result<(Draft, Batch), EstimateError> {
    let p = c.params;
    let input = c.input;
    let (total, derived) = c.card.torch_total();
    let mut assumptions: Vec<String> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    let util = p
        .fraction(GPU_MEMORY_UTILIZATION.key())
        .unwrap_or(ONE / 10 * 9);
    let requested = times_fraction(total, util, true)?;
    let large = total >= 70 * GIB && !c.card.name.to_ascii_lowercase().contains("a100");
    let mml = c.max_model_len;
    let seqs = p
        .count(MAX_NUM_SEQS.key())
        .unwrap_or(if large { 1024 } else { 256 });
    let batched = match p.count(BATCHED_TOKENS.key()) {
        Some(b) => b,
        None => {
            let d = if large { 8192 } else { 2048 };
            let b = d.max(mml).min(seqs.saturating_mul(mml));
            assumptions.push(format!(
                "vllm serve defaults: max-num-batched-tokens {b} (max({d}, max-model-len {mml}), at most max-num-seqs {seqs} × max-model-len: an encoder does not chunk its prefill), max-num-seqs {seqs} (vllm/engine/arg_utils.py)"
            ));
            b
        }
    };
    for (key, _) in &p.flags {
        if IGNORED.contains(key) {
            warnings.push(format!(
                "--{key} is ignored for an encoder-only model (no KV cache, no generation)"
            ));
        }
    }
    if c.params.max_model_len.is_none() && c.input.context.is_none() {
        assumptions.push(format!(
            "max-model-len {} from the model's positions: the engine takes the sentence-transformers max_seq_length (sentence_bert_config.json) where the repository has one; give --max-model-len",
            c.max_model_len
        ));
    }
    let mut refused = None;
    if batched < mml {
        refused = Some(format!(
            "max-num-batched-tokens ({batched}) is smaller than max-model-len ({mml}): vLLM refuses to start, an encoder cannot chunk its prefill (vllm/config/scheduler.py verify_max_model_len)"
        ));
    }
    let in_batch = seqs.min(batched.checked_div(mml).unwrap_or(0));
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
    let mut first = line(
        "budget",
        "Card total as torch reports it (no KV pool: nothing is sized from a share)",
        total,
        Kind::Computed,
        "torch total".into(),
        &[("total", total_text)],
        SRC_CORE,
    );
    if derived {
        first.kind = Kind::Assumed;
    }
    let mut lines = vec![first];
    lines.push(line(
        "cuda_context",
        "CUDA context (assumed)",
        mib(CONTEXT_MIB),
        Kind::Assumed,
        format!("{CONTEXT_MIB} MiB"),
        &[],
        "vllm/v1/worker/gpu_worker.py (init_device)",
    ));
    let in_use = p.count(MEMORY_IN_USE.key()).unwrap_or(0);
    if in_use > 0 {
        lines.push(line(
            "memory_in_use",
            "Memory other processes hold on the card",
            in_use,
            Kind::Computed,
            "--memory-in-use".into(),
            &[],
            "vllm/v1/worker/utils.py (request_memory)",
        ));
    }
    // The start-up check: what is free after the context must be the share.
    let free = total.saturating_sub(sum(&[in_use, mib(CONTEXT_MIB)])?);
    if free < requested && refused.is_none() {
        refused = Some(format!(
            "free memory at start-up ({free} B) is less than gpu-memory-utilization's share ({requested} B): vLLM refuses to start (vllm/v1/worker/utils.py request_memory)"
        ));
    }
    let mut share = line(
        "requested",
        "gpu_memory_utilization's share: checked free at start-up only (not subtracted)",
        requested,
        Kind::Computed,
        "⌈total × utilisation⌉, compared with what is free at start-up".into(),
        &[("gpu-memory-utilization", fraction_text(util))],
        "vllm/v1/worker/utils.py (request_memory)",
    );
    share.subtracted = false;
    lines.push(share);
    // ModernBERT's rotary cache (positions × rotary dim, model dtype); BERT and XLM-R
    // learn their positions.
    let b = input.compute_dtype.bytes();
    let rope = match input.arch {
        Some(a) if a.learned_positions == 0 => {
            prod(&[input.max_position.unwrap_or(0), a.head_dim, b])?
        }
        _ => 0,
    };
    lines.push(line(
        "weights",
        "Weights on this device (with the rotary cache)",
        sum(&[c.weights, rope])?,
        Kind::Computed,
        "the estimate's weights + max_position × head_dim × dtype where positions are rotary".into(),
        &[("tp", input.tp.to_string()), ("rotary-cache", rope.to_string())],
        "vllm/model_executor/models/bert.py, roberta.py, modernbert.py",
    ));
    let (peak, parts) = forward_peak(input, batched, c.card.sm90())?;
    lines.push(line(
        "activation_peak",
        "The largest batch's forward (max-num-batched-tokens tokens, no KV cache)",
        peak,
        Kind::Computed,
        "tokens × max(attention: input + qkv + attention + output rows; MLP: input + output rows + (2, gated 3) intermediate rows) × dtype, ÷ tp where split + cuBLAS workspace".into(),
        &parts,
        "vllm/model_executor/models/bert.py (BertLayer.forward)",
    ));
    let (nt, nt_how) = r.non_torch(input.tp, 1, crate::engine::request::interconnect(c));
    lines.push(line(
        "non_torch",
        "Memory outside torch (assumed, by tp)",
        mib(nt),
        Kind::Assumed,
        nt_how,
        &[("tp", input.tp.to_string())],
        "vllm/v1/worker/gpu_worker.py",
    ));
    let mut graph_bytes = 0;
    if p.on(ENFORCE_EAGER.key()) {
        assumptions.push("--enforce-eager: no CUDA graphs are captured".into());
    } else {
        let (n_p, n_f) = capture_counts(seqs, batched, 1);
        let layers = input.arch.map_or(0, |a| a.layers);
        graph_bytes = prod(&[
            sum(&[n_p, n_f])?,
            sum(&[GRAPH_BASE, prod(&[GRAPH_PER_LAYER, layers])?])?,
        ])?;
        lines.push(line(
            "cuda_graphs",
            "CUDA graphs captured at warm-up (assumed per graph)",
            graph_bytes,
            Kind::Assumed,
            format!(
                "(PIECEWISE {n_p} + FULL {n_f} graphs) × ({} MiB + {} KiB × {layers} layers): the decoder's per-graph cost assumed; compile_or_warm_up_model captures them unless --enforce-eager",
                GRAPH_BASE / MIB,
                GRAPH_PER_LAYER >> 10
            ),
            &[("layers", layers.to_string())],
            "vllm/v1/worker/gpu_worker.py (compile_or_warm_up_model: capture_model)",
        ));
    }
    assumptions.push(format!(
        "no KV cache: vLLM profiles nothing and sizes no pool for an encoder; the card's room at a batch of {batched} tokens ({in_batch} sequences of {mml})"
    ));
    if in_batch == 0 && refused.is_none() {
        warnings.push(format!(
            "a batch of {batched} tokens holds no sequence of {mml} tokens"
        ));
    }
    let uncertainty = sum(&[peak, mib(nt), graph_bytes, mib(CONTEXT_MIB)])?
        .checked_div(4)
        .unwrap_or(0);
    let draft = Draft {
        version,
        capacity: total,
        capacity_kind: if derived { "torch, derived" } else { "torch" },
        lines,
        block: 1,
        group_block_bytes: 0,
        groups: 1,
        seq_blocks: 0,
        tokens_by_concurrency: false,
        kv_cache_bytes: None,
        pool: None,
        need: None,
        uncertainty,
        speculative: None,
        assumptions,
        warnings,
        refused,
        devices: Vec::new(),
    };
    Ok((
        draft,
        Batch {
            tokens: batched,
            sequences: in_batch,
        },
    ))
}

/// The forward of `tokens` tokens through vLLM's encoder layers, per device:
/// `BertLayer.forward` (`vllm/model_executor/models/bert.py`) keeps the layer's input
/// (the residual) while its attention makes the fused QKV rows (3 hidden), the
/// attention's output and the output projection's (1 hidden each); its MLP keeps the
/// input beside the intermediate rows and their activation (`BertIntermediate`:
/// `dense` then `intermediate_act_fn`, 2 intermediate rows; a gated MLP's merged
/// gate/up and its product, 3) and the output projection's row. The heads and the
/// intermediate width split over tp. Plus torch's cuBLAS workspace (as the decoder's
/// profile: 32 MiB on sm_90, else 8 519 680 B).
fn forward_peak(
    input: &EstimateInput,
    tokens: u64,
    sm90: bool,
) -> Result<(u64, Inputs), EstimateError> {
    let Some(a) = input.arch else {
        return Ok((0, Vec::new()));
    };
    let b = input.compute_dtype.bytes();
    let tp = input.tp.max(1);
    let attention = sum(&[
        prod(&[2, tokens, a.hidden, b])?,
        prod(&[4, tokens, a.hidden, b])?.div_ceil(tp),
    ])?;
    let inter_rows = if a.gated_mlp { 3 } else { 2 };
    let mlp = sum(&[
        prod(&[2, tokens, a.hidden, b])?,
        prod(&[inter_rows, tokens, a.intermediate, b])?.div_ceil(tp),
    ])?;
    let cublas = crate::catalogue::cublas_workspace_bytes(sm90);
    let peak = sum(&[attention.max(mlp), cublas])?;
    Ok((
        peak,
        vec![
            ("max-num-batched-tokens", tokens.to_string()),
            ("attention-rows", attention.to_string()),
            ("mlp-rows", mlp.to_string()),
            ("cublas-workspace", cublas.to_string()),
        ],
    ))
}
