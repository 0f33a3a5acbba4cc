//! Hugging Face text-embeddings-inference (TEI, `text-embeddings-router`): a Rust
//! server on candle that serves embedding and reranking models one batch at a time,
//! with no KV cache and no memory fraction. Read in huggingface/text-embeddings-inference
//! v1.9.3 (main at 0d124dc):
//!
//! - `router/src/main.rs`: `--max-batch-tokens` (default 16384, "the total amount of
//!   potential tokens within a batch"), `--max-batch-requests` (none),
//!   `--max-client-batch-size` (32 inputs a request) and `--max-concurrent-requests`
//!   (512) — the last two bound the router's queue on the host, not the GPU's batch.
//! - `router/src/lib.rs` `run`: the longest input is the sentence-transformers
//!   `max_seq_length` (else `max_position_embeddings` less the position offset); longer
//!   than `--max-batch-tokens`, it is truncated to it (`--auto-truncate`, on by
//!   default) or the server refuses to start. The dtype is `DType::default()`:
//!   float16 with candle on CUDA (`backends/src/dtype.rs`), float32 for `gemma3_text`.
//! - `backends/src/lib.rs` `Backend::warmup`: on a CUDA GPU one batch of
//!   `max_batch_tokens` tokens, cut into requests of the longest input (at most
//!   `max_batch_requests` of them), runs through the model before the server starts:
//!   if it does not fit, TEI fails at start-up.
//! - candle (0.8) has no caching allocator of its own: cudarc (0.13) allocates with
//!   `cuMemAllocAsync` from the driver's stream-ordered pool (`CudaDevice::alloc_async`)
//!   and frees a tensor when it is dropped, so the card holds the weights, the CUDA
//!   context and cuBLASLt's handle, and at a batch's peak that forward's live tensors.
//!
//! The forward is TEI's own (`backends/candle/src/models/flash_bert.rs` for BERT,
//! RoBERTa and XLM-R on Ampere and newer; `flash_modernbert.rs`), see [`forward_peak`].
//! Elsewhere TEI pads its batches (Volta, ROCm's warm-up of several shapes, Metal) or
//! is reported out of memory with far more room than that forward needs (the Turing
//! image), so those cards are refused, as are decoder embedding models (TEI serves
//! Qwen2, Qwen3, Mistral, Llama and Gemma 3 ones, with no KV cache, through kernels
//! not modelled here) and tensor parallelism (TEI has none).

use super::arith::{mib, prod, sum};
use super::contract::{Engine, Info};
use super::flags::{Flag, MAX_MODEL_LEN, field, positive};
use super::outcome::{Inputs, line};
use super::pool::{Batch, Draft};
use super::request::{CONTEXT_MIB, Ctx, catalogue_capacity};
use crate::error::EstimateError;
use crate::estimate::{EstimateInput, Kind};
use crate::fields::{FieldKind, Unit};

const SRC_WARMUP: &str = "backends/src/lib.rs (Backend::warmup)";

/// `--max-batch-tokens`: the most tokens one batch (and the warm-up) takes.
const MAX_BATCH_TOKENS: Flag = Flag::new(
    field(
        "max-batch-tokens",
        FieldKind::Count,
        "TEI max batch tokens",
        "16384",
        "TEI: tokens in one batch, the warm-up's batch too (default 16384)",
    )
    .unit(Unit::Tokens),
    positive,
);

/// `--max-batch-requests`: the most requests in one batch (none by default).
const MAX_BATCH_REQUESTS: Flag = Flag::new(
    field(
        "max-batch-requests",
        FieldKind::Count,
        "TEI max batch requests",
        "none",
        "TEI: requests in one batch (default: as many as the batch tokens allow)",
    ),
    positive,
);

/// `--max-client-batch-size`: inputs one client request may carry.
const MAX_CLIENT_BATCH_SIZE: Flag = Flag::new(
    field(
        "max-client-batch-size",
        FieldKind::Count,
        "TEI max client batch size",
        "32",
        "TEI: inputs one client request may carry (the router's check; no GPU memory)",
    ),
    positive,
);

/// `--max-concurrent-requests`: the router's queue.
const MAX_CONCURRENT_REQUESTS: Flag = Flag::new(
    field(
        "max-concurrent-requests",
        FieldKind::Count,
        "TEI max concurrent requests",
        "512",
        "TEI: requests the router queues before refusing (host side; no GPU memory)",
    ),
    positive,
);

/// Hugging Face text-embeddings-inference.
pub struct Tei;

impl Engine for Tei {
    const INFO: Info = Info {
        name: "tei",
        aliases: &["text-embeddings-inference", "text-embeddings-router"],
        summary: "Hugging Face text-embeddings-inference (embedding and reranking models).",
        releases: &[("tei", "TEI 1.9")],
        release: None,
        hint: "tei (1.9)",
        // `max-model-len` is the longest input (TEI's from the sentence-transformers
        // config); the rest are TEI's own flags.
        flags: &[
            &MAX_MODEL_LEN,
            &MAX_BATCH_TOKENS,
            &MAX_BATCH_REQUESTS,
            &MAX_CLIENT_BATCH_SIZE,
            &MAX_CONCURRENT_REQUESTS,
        ],
        // float16 on CUDA whatever the checkpoint's dtype.
        formats: &["fp16"],
        windows: false,
        shared_context: false,
        // TEI's Metal build runs on a Mac's GPU (candle's Metal backend).
        metal: true,
        refusal: None,
    };

    /// A decoder: TEI serves some decoder embedding models, not modelled here.
    fn budget(_c: &Ctx) -> Result<Draft, EstimateError> {
        Err(EstimateError::invalid(
            "engine",
            "tei: an encoder-only model only (BERT, RoBERTa, XLM-R, ModernBERT). TEI also serves some decoder embedding models (Qwen2, Qwen3, Mistral, Llama, Gemma 3: one forward per batch, no KV cache) through its own flash kernels, whose activations are not modelled here",
        ))
    }

    const ENCODERS: bool = true;

    fn batch_budget(c: &Ctx) -> Result<(Draft, Batch), EstimateError> {
        rule(c)
    }
}

fn rule(c: &Ctx) -> Result<(Draft, Batch), EstimateError> {
    let input = c.input;
    if input.tp > 1 || input.pp > 1 {
        return Err(EstimateError::invalid(
            "tp",
            "tei: one GPU per server (TEI has no tensor or pipeline parallelism): tp 1, pp 1",
        ));
    }
    use crate::catalogue::Arch;
    let mut assumptions: Vec<String> = Vec::new();
    match c.card.arch {
        Arch::Ampere | Arch::Ada | Arch::Hopper | Arch::Blackwell => {}
        Arch::Unknown => assumptions.push(
            "a CUDA card of compute capability 8.0 or newer assumed (TEI's flash-attention models)".into(),
        ),
        Arch::Turing => {
            // The Turing image (`Dockerfile-cuda`: `candle-cuda-turing`, flash-attn v1)
            // runs out of memory at start-up where this rule finds ample room:
            // https://github.com/huggingface/text-embeddings-inference/issues/670 (bge-m3
            // on a T4 with 10 GB free) and …/issues/760 (Qwen3-Embedding-0.6B, which the
            // CUDA image starts).
            return Err(EstimateError::invalid(
                "card",
                "tei: not modelled on Turing (T4, RTX 20): TEI's Turing image (flash-attention v1) is reported to run out of memory at start-up with far more room than its forward needs here (bge-m3 on a T4 with 10 GB free), for a reason not read in its source",
            ));
        }
        _ => {
            return Err(EstimateError::invalid(
                "card",
                "tei: modelled on NVIDIA cards from Ampere on, where TEI runs its flash-attention models on unpadded batches; elsewhere (Volta, AMD's ROCm warm-up of several shapes, Apple's Metal) it pads its batches, which is not modelled",
            ));
        }
    }
    let p = c.params;
    let (capacity, kind) = catalogue_capacity(&c.card);
    let mut warnings: Vec<String> = Vec::new();
    if c.params.max_model_len.is_none() && c.input.context.is_none() {
        assumptions.push(format!(
            "max-model-len {} from the model's positions: the engine takes the sentence-transformers max_seq_length (sentence_bert_config.json) where the repository has one; give --max-model-len",
            c.max_model_len
        ));
    }
    let batch_tokens = p.count(MAX_BATCH_TOKENS.key()).unwrap_or(16_384);
    let requests_cap = p.count(MAX_BATCH_REQUESTS.key());
    // router/src/lib.rs `run`: an input longer than the batch is truncated to it.
    let longest = if c.max_model_len > batch_tokens {
        warnings.push(format!(
            "the longest input ({}) exceeds --max-batch-tokens={batch_tokens}: TEI truncates inputs to {batch_tokens} tokens (--auto-truncate, the default) or, with --auto-truncate false, refuses to start",
            c.max_model_len
        ));
        batch_tokens
    } else {
        c.max_model_len
    };
    // Backend::warmup: requests of `longest` tokens until the batch is spent, at most
    // max_batch_requests of them.
    let mut requests = batch_tokens.div_ceil(longest.max(1));
    if let Some(r) = requests_cap {
        requests = requests.min(r);
    }
    let warm_tokens = batch_tokens.min(prod(&[requests, longest])?);
    let per_batch = requests_cap
        .unwrap_or(u64::MAX)
        .min(batch_tokens.checked_div(longest).unwrap_or(0));
    if input.compute_dtype.bytes() != 2 {
        assumptions.push(
            "TEI computes in float16 on CUDA (DType::default() with candle): the activations at 2 bytes whatever the workload's compute dtype".into(),
        );
    }
    let weights = tei_weights(c)?;
    if weights != c.weights {
        assumptions.push(format!(
            "weights cast to float16 as TEI loads them: {weights} B (the estimate's {} B at the checkpoint's format)",
            c.weights
        ));
    }
    let (peak, parts) = forward_peak(input, warm_tokens)?;
    let client = p.count(MAX_CLIENT_BATCH_SIZE.key()).unwrap_or(32);
    let concurrent = p.count(MAX_CONCURRENT_REQUESTS.key()).unwrap_or(512);
    assumptions.push(format!(
        "max-client-batch-size {client} and max-concurrent-requests {concurrent} bound the router's queue on the host; the GPU holds one batch of at most {batch_tokens} tokens"
    ));
    let lines = vec![
        line(
            "budget",
            "Card total (TEI takes no share: it allocates as it goes)",
            capacity,
            Kind::Computed,
            "the card's memory".into(),
            &[("total", format!("{capacity} B ({kind})"))],
            "router/src/main.rs (no memory fraction)",
        ),
        line(
            "cuda_context",
            "CUDA context and cuBLASLt handle (assumed)",
            mib(CONTEXT_MIB),
            Kind::Assumed,
            format!("{CONTEXT_MIB} MiB"),
            &[],
            "backends/candle/src/layers/cublaslt.rs (CublasLt::new)",
        ),
        line(
            "weights",
            "Weights in float16",
            weights,
            Kind::Computed,
            "the estimate's weights, at 2 bytes a parameter where the checkpoint is wider".into(),
            &[("dtype", "float16".into())],
            "backends/src/dtype.rs (DType::default)",
        ),
        line(
            "activation_peak",
            "The warm-up batch's forward (max-batch-tokens tokens), float16",
            peak,
            Kind::Computed,
            "tokens × max(attention rows, MLP rows) × 2 B".into(),
            &parts,
            SRC_WARMUP,
        ),
    ];
    if per_batch == 0 {
        warnings.push(format!(
            "a batch of {batch_tokens} tokens holds no input of {longest} tokens"
        ));
    }
    let draft = Draft {
        version: "1.9",
        capacity,
        capacity_kind: kind,
        lines,
        block: 1,
        group_block_bytes: 0,
        groups: 1,
        seq_blocks: 0,
        tokens_by_concurrency: false,
        kv_cache_bytes: None,
        pool: None,
        need: None,
        speculative: None,
        uncertainty: sum(&[peak, mib(CONTEXT_MIB)])?.checked_div(4).unwrap_or(0),
        assumptions,
        warnings,
        refused: None,
        devices: Vec::new(),
    };
    Ok((
        draft,
        Batch {
            tokens: warm_tokens,
            sequences: per_batch,
        },
    ))
}

/// The weights as TEI holds them: float16 on CUDA (`VarBuilder::from_mmaped_safetensors`
/// with the dtype, `backends/candle/src/lib.rs`), so float32 weights are halved; a
/// quantised format is not what TEI loads.
fn tei_weights(c: &Ctx) -> Result<u64, EstimateError> {
    use crate::format::{Dtype, StorageFormat};
    let linear = c.input.format.unwrap_or(c.input.keep_format);
    match (linear, c.input.keep_format) {
        (StorageFormat::Dense { dtype: Dtype::F32 }, StorageFormat::Dense { dtype: Dtype::F32 }) => {
            Ok(c.weights.div_ceil(2))
        }
        (StorageFormat::Dense { dtype: Dtype::F32 }, _) | (_, StorageFormat::Dense { dtype: Dtype::F32 }) => Err(EstimateError::invalid(
            "format",
            "tei: give the checkpoint's one dtype (float32 or 16-bit): TEI casts every weight to float16",
        )),
        (StorageFormat::Dense { dtype: Dtype::F16 | Dtype::Bf16 }, _) => Ok(c.weights),
        _ => Err(EstimateError::invalid(
            "format",
            "tei: TEI loads float16 safetensors (candle's VarBuilder): a quantised format is not served",
        )),
    }
}

/// One forward of `tokens` tokens in float16, per token the most rows alive at once:
///
/// - BERT, RoBERTa, XLM-R (`flash_bert.rs` `BertAttention::forward`, `BertLayer::forward`):
///   the attention keeps the layer's input (the residual), the fused QKV rows (3
///   hidden), the flash attention's output and the output projection's, and
///   `fused_add_layer_norm` writes its result and the residual sum (2 more): 8 hidden
///   rows; the MLP keeps the input, the intermediate rows (cuBLASLt fuses the bias and
///   GELU into the matmul: one tensor), the output projection and the norm's two
///   outputs: 4 hidden + 1 intermediate.
/// - ModernBERT (`flash_modernbert.rs`, `modernbert.rs` `ModernBertMLP::forward`): 8
///   hidden rows in the attention as above; the MLP keeps the residual, the sum, the
///   normed input and the output (4 hidden) beside `Wi`'s merged rows (2 intermediate),
///   the activation and its product with the gate (1 each): 4 hidden + 4 intermediate.
fn forward_peak(
    input: &EstimateInput,
    tokens: u64,
) -> Result<(u64, Inputs), EstimateError> {
    let Some(a) = input.arch else {
        return Ok((0, Vec::new()));
    };
    let attention = prod(&[8, tokens, a.hidden, 2])?;
    let inter_rows = if a.gated_mlp { 4 } else { 1 };
    let mlp = sum(&[
        prod(&[4, tokens, a.hidden, 2])?,
        prod(&[inter_rows, tokens, a.intermediate, 2])?,
    ])?;
    Ok((
        attention.max(mlp),
        vec![
            ("max-batch-tokens", tokens.to_string()),
            ("attention-rows", attention.to_string()),
            ("mlp-rows", mlp.to_string()),
        ],
    ))
}

#[cfg(test)]
mod tests;
