//! Hugging Face TGI: blocks from what is free after a warm-up prefill, version by version.
//!
//! The router's warm-up (`router/client/src/client.rs` `warmup`) sends one batch of
//! `max_batch_prefill_tokens` prompt tokens, cut into requests of at most
//! `max_input_length`, with `prefill_logprobs: true`: the server then runs the LM head
//! over every prompt token (`prefill_head_indices` cover them all) and takes
//! `torch.log_softmax` of those logits (`flash_causal_lm.py` `generate_token`), a copy
//! as large (text-generation-inference pull request 2661 made it in place, later). The
//! warm-up batch's own KV blocks are allocated first and added back to the count.
//!
//! - 0.9 (v0.9.4, the first release that infers `max_batch_total_tokens`):
//!   `server/text_generation_server/models/flash_causal_lm.py` `FlashCausalLM.warmup`:
//!   free = `mem_get_info` free − (1 − `MEMORY_FRACTION`) × total; blocks = free ÷ block
//!   bytes + the warm-up's blocks; its requests ask for 2 new tokens.
//! - 2.0 (v2.0.0, same file and function): blocks = free × 0.95 ("Leave 5% for some
//!   wiggle room") ÷ block bytes + the warm-up's blocks; its requests ask for
//!   `max_total_tokens − truncate` new tokens, so each holds `max_total_tokens − 1`.
//! - 3 (the newest carried, `--engine tgi`): free = `get_free_memory(device,
//!   MEMORY_FRACTION × TGI_WIGGLE_ROOM)` = free − (1 − fraction) × total
//!   (`utils/import_utils.py`); `TGI_WIGGLE_ROOM` is 0.90 and `--cuda-memory-fraction`
//!   1.0 by default (`models/globals.py`). The warm-up still asks for prefill logprobs
//!   (`backends/v3/src/client/client.rs` `Client::warmup`); `log_softmax` runs in place.
//!
//! `total` is torch's (`torch.cuda.get_device_properties(device).total_memory`); free
//! is after the warm-up with nothing returned to the driver, so the caching allocator
//! still holds the prefill's segments: for 0.9 and 2.0 the forward's tensors are
//! replayed through the allocator's rules (`warmup_reserved`), which reserve more than
//! the tensors alive at the peak.

use serde::{Deserialize, Serialize};

use super::arith::{mib, prod, sum};
use super::contract::{Engine, Info};
use super::flags::{BATCHED_TOKENS, MAX_MODEL_LEN};
use super::fraction::{ONE, times_fraction};
use super::outcome::{Inputs, line};
use super::pool::{Draft, simple_pool};
use super::request::{Ctx, catalogue_capacity};
use crate::allocator::{Allocator, Handle};
use crate::error::EstimateError;
use crate::estimate::{EstimateInput, Kind};

/// The TGI accounting carried; `--engine tgi` is the newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TgiVersion {
    /// 3 (`TGI_WIGGLE_ROOM`).
    #[serde(rename = "3")]
    V3,
    /// 2.0 (95 % of what is free).
    #[serde(rename = "2.0")]
    V2,
    /// 0.9 (v0.9.4: all that is free).
    #[serde(rename = "0.9")]
    V09,
}

impl TgiVersion {
    /// Every release carried, in the order of the engine's `releases` (newest first).
    pub const ALL: [TgiVersion; 3] = [TgiVersion::V3, TgiVersion::V2, TgiVersion::V09];

    /// The release at `release`'s place in [`TgiVersion::ALL`]; the newest when none
    /// was named.
    pub fn of(release: Option<usize>) -> TgiVersion {
        release
            .and_then(|i| TgiVersion::ALL.get(i).copied())
            .unwrap_or(TgiVersion::V3)
    }

    /// Its place in [`TgiVersion::ALL`].
    pub fn index(self) -> usize {
        TgiVersion::ALL.iter().position(|v| *v == self).unwrap_or(0)
    }

    /// Parses "3", "2.0", "2.0.4", "0.9", "0.9.4": the release picks the rules.
    pub fn parse(text: &str) -> Result<TgiVersion, EstimateError> {
        let mut parts = text.trim().trim_start_matches('v').split('.');
        match (parts.next(), parts.next()) {
            (Some("3"), _) => Ok(TgiVersion::V3),
            (Some("2"), None | Some("0")) => Ok(TgiVersion::V2),
            (Some("0"), Some("9")) => Ok(TgiVersion::V09),
            _ => Err(EstimateError::invalid(
                "engine",
                format!("tgi@{text}: the rules carried are tgi@3 (newest), tgi@2.0 and tgi@0.9"),
            )),
        }
    }
}

const SRC_WARMUP: &str = "server/text_generation_server/models/flash_causal_lm.py (warmup)";

/// Hugging Face text-generation-inference (`text-generation-launcher`).
pub struct Tgi;

impl Engine for Tgi {
    const INFO: Info = Info {
        name: "tgi",
        aliases: &["text-generation-inference"],
        summary: "Hugging Face text-generation-inference.",
        releases: &[
            ("tgi", "TGI 3"),
            ("tgi@2.0", "TGI 2.0"),
            ("tgi@0.9", "TGI 0.9"),
        ],
        release: Some(|text| TgiVersion::parse(text).map(TgiVersion::index)),
        hint: "tgi (tgi@3, @2.0, @0.9)",
        // `max-num-batched-tokens` is its `--max-batch-prefill-tokens`, `max-model-len`
        // its `--max-total-tokens`.
        flags: &[&MAX_MODEL_LEN, &BATCHED_TOKENS],
        formats: &["bf16", "fp8", "int8", "awq-4-g128"],
        windows: false,
        shared_context: false,
        // CUDA, ROCm and Gaudi only.
        metal: false,
        refusal: None,
    };

    /// TGI 3 caches every layer of the text config (`flash_causal_lm.py`
    /// `FlashCausalLM.__init__` at v3.3.7) and keeps the vision states outside the pool;
    /// its Mllama came in 2.3.1.
    fn cross_attention(
        x: &super::cross::CrossLayers,
        params: &super::flags::EngineParams,
    ) -> Result<super::cross::Cross, EstimateError> {
        match TgiVersion::of(params.release) {
            TgiVersion::V3 => Ok(super::cross::Cross {
                per_token: x.all,
                encoder_tokens: 0,
                length_tokens: 0,
                assumption: format!(
                    "cross-attention: a cache for all {} layers, the {} cross-attention layers' unused; their keys and values are projected at each step from the batch's vision states ({} tokens × hidden per image), which are held outside the pool and not counted",
                    x.layers, x.cross, x.tokens
                ),
            }),
            v => Err(EstimateError::invalid(
                "engine",
                format!(
                    "tgi@{}: TGI serves Llama 3.2 Vision from 2.3.1 on (its flash Mllama); name tgi",
                    match v {
                        TgiVersion::V2 => "2.0",
                        _ => "0.9",
                    }
                ),
            )),
        }
    }

    fn budget(c: &Ctx) -> Result<Draft, EstimateError> {
        rule(c)
    }
}

fn rule(c: &Ctx) -> Result<Draft, EstimateError> {
    match TgiVersion::of(c.params.release) {
        TgiVersion::V3 => rule_v3(c),
        v => rule_free(c, v),
    }
}

/// The 0.9 and 2.0 warm-ups: what torch's allocator holds after the warm-up prefill is
/// not free; blocks = ⌊free × wiggle⌋ ÷ block bytes + the warm-up batch's blocks.
fn rule_free(c: &Ctx, v: TgiVersion) -> Result<Draft, EstimateError> {
    let (total, derived) = c.card.torch_total();
    let prefill = c.params.count(BATCHED_TOKENS.key()).unwrap_or(4096);
    let max_total = c.max_model_len;
    // max_input_length is not a flag here: TGI's launcher caps it at max_total_tokens − 1,
    // the most a request may take; it only sets how the prefill is cut into requests.
    let max_input = max_total.saturating_sub(1).max(1);
    let requests = prefill.div_ceil(max_input);
    let block_bytes = prod(&[16, c.per_token])?;
    // Each request's blocks: ⌈(input + max_new_tokens − 1) ÷ 16⌉ (`FlashCausalLMBatch.from_pb`).
    let blocks_of = |input: u64| -> Result<u64, EstimateError> {
        let new = match v {
            TgiVersion::V09 => 2,
            _ => max_total.saturating_sub(input),
        };
        let blocks = sum(&[input, new])?.saturating_sub(1).div_ceil(16);
        // 2.0 serves a model whose every layer has a sliding window through
        // `FlashMistralBatch` (flash_mistral.py `from_pb`: "Needed blocks can not go over
        // SLIDING_WINDOW_BLOCKS"): a request holds at most ⌈window ÷ 16⌉ blocks.
        Ok(match (v, all_layers_window(c.input)) {
            (TgiVersion::V2, Some(window)) => blocks.min(window.div_ceil(16)),
            _ => blocks,
        })
    };
    // Every request but the last takes max_input tokens, the last the rest (counted in
    // closed form: the number of requests is the user's to make large).
    let (full, rest) = (
        prefill.checked_div(max_input).unwrap_or(0),
        prefill.checked_rem(max_input).unwrap_or(0),
    );
    let mut warm_blocks = prod(&[full, blocks_of(max_input)?])?;
    if rest > 0 {
        warm_blocks = sum(&[warm_blocks, blocks_of(rest)?])?;
    }
    debug_assert_eq!(full.saturating_add(u64::from(rest > 0)), requests);
    let warm_bytes = prod(&[warm_blocks, block_bytes])?;
    let (peak, parts) = warmup_reserved(c.input, prefill)?;
    let ctx_mib = 512;
    let (wiggle, wiggle_text) = match v {
        TgiVersion::V09 => (ONE, "1"),
        _ => (ONE / 100 * 95, "0.95"),
    };
    let used = sum(&[mib(ctx_mib), c.weights, warm_bytes, peak])?;
    let free = total.saturating_sub(used);
    let kept = free.saturating_sub(times_fraction(free, wiggle, false)?);
    let total_text = format!(
        "{total} B (torch{})",
        if derived { ", derived" } else { "" }
    );
    let version = match v {
        TgiVersion::V09 => "0.9",
        _ => "2.0",
    };
    let mut lines = vec![
        line("budget", "Card total as torch reports it", total, if derived { Kind::Assumed } else { Kind::Computed }, "torch.cuda.get_device_properties(device).total_memory".into(), &[("total", total_text)], SRC_WARMUP),
        line("cuda_context", "CUDA context (assumed; not free at warm-up)", mib(ctx_mib), Kind::Assumed, format!("{ctx_mib} MiB"), &[], SRC_WARMUP),
        line("weights", "Weights on this device", c.weights, Kind::Computed, "the estimate's weight lines, most loaded device".into(), &[("tp", c.input.tp.to_string())], "the estimator"),
        line("warmup_blocks", "The warm-up batch's KV blocks (added back to the count)", warm_bytes, Kind::Computed, "Σ requests ⌈(input + max_new_tokens − 1) ÷ 16⌉ blocks × block bytes".into(), &[("blocks", warm_blocks.to_string()), ("requests", requests.to_string())], "server/text_generation_server/models/flash_causal_lm.py (FlashCausalLMBatch.from_pb)"),
        line("activation_peak", "The warm-up prefill's segments, reserved by torch's caching allocator", peak, Kind::Computed, "the prefill's tensors, layer by layer, through torch's caching allocator: the segments it reserved (the layers' hidden, QKV and MLP rows, then every prompt token's logits and their log_softmax)".into(), &parts, SRC_WARMUP),
        line("wiggle_room", "Left free: what is free × (1 − wiggle)", kept, Kind::Computed, format!("free × (1 − {wiggle_text})"), &[("wiggle", wiggle_text.into()), ("cuda-memory-fraction", "1".into())], SRC_WARMUP),
    ];
    // The count adds the warm-up's blocks back: they are in the pool, not taken from it.
    lines[3].subtracted = false;
    let (group_block_bytes, groups, seq_blocks) = simple_pool(c, 16)?;
    let mut assumptions = vec![format!(
        "max-input-length {max_input} (max-model-len − 1): the warm-up's {requests} requests"
    )];
    if prefill == 4096 && c.params.count(BATCHED_TOKENS.key()).is_none() {
        assumptions.push("max-batch-prefill-tokens 4096 (TGI's default)".into());
    }
    // TGI 0.9 pins bitsandbytes ^0.38.1, 2.0 ^0.43.0 (server/pyproject.toml): their
    // `MatMul8bitLt` also makes the rows' transposed copy and col32 layouts, which
    // 0.45's tensors (replayed) leave out.
    assumptions.extend(int8_assumption(
        c.input,
        "bitsandbytes 0.45 runs it (this release pins an older one, whose transposed and col32 copies of the rows are not counted)",
    ));
    Ok(Draft {
        version,
        capacity: total,
        capacity_kind: if derived { "torch, derived" } else { "torch" },
        lines,
        block: 16,
        group_block_bytes,
        groups,
        seq_blocks,
        tokens_by_concurrency: false,
        kv_cache_bytes: None,
        pool: None,
        need: None,
        speculative: None,
        uncertainty: sum(&[peak, mib(ctx_mib)])?.checked_div(4).unwrap_or(0),
        assumptions,
        warnings: Vec::new(),
        refused: None,
        devices: Vec::new(),
    })
}

/// What both warm-up counts read: the architecture, the compute dtype's bytes, the
/// tensor-parallel ranks and the MLP's width per token (a MoE's active experts'
/// together); `None` without an architecture.
fn warmup_shape(
    input: &EstimateInput,
) -> Result<Option<(crate::arch::Architecture, u64, u64, u64)>, EstimateError> {
    let Some(a) = input.arch else {
        return Ok(None);
    };
    let inter = match a.moe {
        Some(m) => prod(&[m.expert_intermediate, m.active])?,
        None => a.intermediate,
    };
    Ok(Some((a, input.compute_dtype.bytes(), input.tp.max(1), inter)))
}

/// The weights bitsandbytes dequantises while TGI's 4-bit linears run over the
/// warm-up's tokens (`--quantize bitsandbytes-nf4|fp4`): `layers/bnb.py`
/// `Linear4bit.forward` calls `bnb.matmul_4bit`, which for more than one token
/// dequantises the whole weight to the compute dtype (bitsandbytes `MatMul4Bit.forward`)
/// while the output is written. TGI loads q, k, v as one column-parallel linear and
/// gate and up as another (`TensorParallelColumnLinear.load_multi`, `load_gate_up`), so
/// each is one weight: per tp rank [(q + 2 kv) ÷ tp, hidden], [hidden, q ÷ tp],
/// [(gate + up) ÷ tp, hidden], [hidden, intermediate ÷ tp], in bytes of the model's
/// dtype. `None` for another format.
struct Dequantised {
    qkv: u64,
    o: u64,
    gate_up: u64,
    down: u64,
}

fn dequantised(input: &EstimateInput) -> Result<Option<Dequantised>, EstimateError> {
    let (Some(a), Some(crate::format::StorageFormat::Bnb4 { .. })) = (input.arch, input.format)
    else {
        return Ok(None);
    };
    let (b, tp) = (input.compute_dtype.bytes(), input.tp.max(1));
    let inter = match a.moe {
        Some(m) => m.expert_intermediate,
        None => a.intermediate,
    };
    let up = if a.gated_mlp { 2 } else { 1 };
    let q = prod(&[a.heads, a.head_dim])?;
    let qkv = sum(&[q, prod(&[2, a.kv_heads, a.head_dim])?])?;
    Ok(Some(Dequantised {
        qkv: prod(&[qkv.div_ceil(tp), a.hidden, b])?,
        o: prod(&[a.hidden, q.div_ceil(tp), b])?,
        gate_up: prod(&[prod(&[up, inter])?.div_ceil(tp), a.hidden, b])?,
        down: prod(&[a.hidden, inter.div_ceil(tp), b])?,
    }))
}

/// What one of TGI's 8-bit linears (`--quantize bitsandbytes`: `layers/bnb.py`
/// `Linear8bitLt`, threshold 6.0, int8 weights) holds beyond its output while
/// `bnb.matmul` runs over `tokens` rows, in bitsandbytes 0.45 (`>=0.45.0` since TGI
/// v3.0.2, 0.45.5 pinned in v3.3.x; `autograd/_functions.py` `MatMul8bitLt.forward`,
/// `functional.py` `int8_vectorwise_quant`, `int8_linear_matmul`, `int8_mm_dequant`):
/// - `quantise`: the input's fp16 copy (none when the model is in fp16), then the int8
///   rows (1 B a value) and fp32 row scales (4 B a row), then the outlier search
///   `A.abs() >= threshold` (2 B and 1 B a value, alive together);
/// - `product`: the int8 rows and scales, the int32 product (4 B an output value) and,
///   for a model not in fp16, its fp16 dequantisation while it is cast to the model's
///   dtype (2 B an output value; the cast is the linear's output).
///
/// Not counted: the outlier columns (each keeps its input column and dequantised
/// weight column; how many depends on the prompt's activations).
#[derive(Clone, Copy)]
struct Int8Scratch {
    quantise: u64,
    product: u64,
}

fn int8_scratch(
    input: &EstimateInput,
    tokens: u64,
    width_in: u64,
    width_out: u64,
) -> Result<Option<Int8Scratch>, EstimateError> {
    if !matches!(input.format, Some(crate::format::StorageFormat::Int8)) {
        return Ok(None);
    }
    let fp16 = input.compute_dtype == crate::format::Dtype::F16;
    let values_in = prod(&[tokens, width_in])?;
    let values_out = prod(&[tokens, width_out])?;
    let scales = prod(&[tokens, 4])?;
    Ok(Some(Int8Scratch {
        quantise: sum(&[prod(&[values_in, if fp16 { 4 } else { 6 }])?, scales])?,
        product: sum(&[
            values_in,
            scales,
            prod(&[values_out, if fp16 { 4 } else { 6 }])?,
        ])?,
    }))
}

/// The MLP's two linears' 8-bit scratch per tp rank, (gate_up, down); `None` for
/// another format.
fn int8_mlp(
    input: &EstimateInput,
    tokens: u64,
) -> Result<Option<(Int8Scratch, Int8Scratch)>, EstimateError> {
    let Some(a) = input.arch else { return Ok(None) };
    let tp = input.tp.max(1);
    let inter = match a.moe {
        Some(m) => m.expert_intermediate,
        None => a.intermediate,
    }
    .div_ceil(tp);
    let up = if a.gated_mlp { 2 } else { 1 };
    let gate_up = int8_scratch(input, tokens, a.hidden, prod(&[up, inter])?)?;
    let down = int8_scratch(input, tokens, inter, a.hidden)?;
    Ok(gate_up.zip(down))
}

/// What the warm-up prefill of `tokens` prompt tokens leaves in torch's caching
/// allocator, per device. TGI runs its own modelling code eagerly: `LlamaMLP.forward`
/// (and Mistral's, `custom_modeling/flash_*_modeling.py`) is
/// `down_proj(act(gate_up[:, 0]) * gate_up[:, 1])`, so the merged gate/up output, the
/// activation and the product are alive together (4 intermediate rows per token; a
/// non-gated MLP 2), beside the residual and the normed input (2 hidden rows). The LM
/// head then gathers every prompt token's hidden row and computes its logits, and
/// `log_softmax` copies them (both in the model dtype, the full vocabulary on every tp
/// rank: `TensorParallelHead` gathers). The logits rows, a vocabulary wide, are larger
/// than any block the forward freed, so the allocator takes new segments for them: the
/// two phases add up.
///
/// `logit_copies` is 1 where `log_softmax` runs in place (3: `torch.log_softmax(out, -1,
/// out=out)`, "Get prefill logprobs with inplace softmax", text-generation-inference
/// pull request 2661). The 0.9 and 2.0 rules replay the allocator instead
/// ([`warmup_reserved`]).
fn warmup_peak(
    input: &EstimateInput,
    tokens: u64,
    logit_copies: u64,
) -> Result<(u64, Inputs), EstimateError> {
    let Some((a, b, tp, inter)) = warmup_shape(input)? else {
        return Ok((0, Vec::new()));
    };
    let rows = if a.gated_mlp { 4 } else { 2 };
    let row = prod(&[tokens, inter, b])?.div_ceil(tp);
    let residual = prod(&[2, tokens, a.hidden, b])?;
    let mut mlp = sum(&[prod(&[rows, row])?, residual])?;
    // Under bitsandbytes the MLP's two linears each hold their dequantised weight
    // while they write: gate_up beside its output (2 rows, or 1), down beside gate_up
    // and the product (3 rows; a plain MLP's activation alone) and its hidden row.
    let bnb = dequantised(input)?;
    if let Some(d) = &bnb {
        let (before, during) = if a.gated_mlp { (2, 3) } else { (1, 1) };
        let gate_up = sum(&[residual, prod(&[before, row])?, d.gate_up])?;
        let down = sum(&[
            residual,
            prod(&[during, row])?,
            d.down,
            prod(&[tokens, a.hidden, b])?,
        ])?;
        mlp = mlp.max(gate_up).max(down);
    }
    // Under bitsandbytes 8-bit each MLP linear quantises its input, then holds its
    // int32 product ([`int8_scratch`]): gate_up beside the residual rows (and its
    // output once the product is dequantised), down beside gate_up, the activation and
    // the product (a plain MLP's activation alone) and, with the product, its output.
    let int8 = int8_mlp(input, tokens)?;
    if let Some((gu, dn)) = int8 {
        let (before, during) = if a.gated_mlp { (2, 3) } else { (1, 1) };
        let gate_up = sum(&[residual, gu.quantise])?.max(sum(&[
            residual,
            prod(&[before, row])?,
            gu.product,
        ])?);
        let down = sum(&[residual, prod(&[during, row])?, dn.quantise])?.max(sum(&[
            residual,
            prod(&[during, row])?,
            dn.product,
            prod(&[tokens, a.hidden, b])?,
        ])?);
        mlp = mlp.max(gate_up).max(down);
    }
    let logits = sum(&[
        prod(&[tokens, a.hidden, b])?,
        prod(&[logit_copies, tokens, a.vocab, b])?,
    ])?;
    let mut parts = vec![
        ("max-batch-prefill-tokens", tokens.to_string()),
        ("mlp-rows", mlp.to_string()),
        ("prefill-logprobs", logits.to_string()),
    ];
    if let Some(d) = bnb {
        parts.push(("bnb-dequantised-gate-up", d.gate_up.to_string()));
    }
    if let Some((gu, _)) = int8 {
        parts.push(("bnb-int8-gate-up-product", gu.product.to_string()));
    }
    Ok((sum(&[mlp, logits])?, parts))
}

/// The sliding window when every layer of the model has one (Mistral-7B-v0.1's 4096).
fn all_layers_window(input: &EstimateInput) -> Option<u64> {
    let window = input.sliding_window.filter(|w| *w > 0)?;
    let layers = input.arch.map_or(0, |a| a.layers);
    match input.sliding_layers {
        Some(l) if l < layers => None,
        _ => Some(window),
    }
}

/// What the 0.9 and 2.0 warm-up prefill of `tokens` prompt tokens leaves reserved in
/// torch's caching allocator, per device: `warmup` reads `torch.cuda.mem_get_info` right
/// after `generate_token`, with no `empty_cache` in between, so the segments the
/// forward reserved count as used, not only the tensors alive at its peak. The
/// tensors, in the order the eager code allocates and frees them
/// (`custom_modeling/flash_llama_modeling.py` of v0.9.4 and
/// `flash_mistral_modeling.py` of v2.0.0, the same layer code):
///
/// - `FlashLlamaLayer.forward`: `input_layernorm(hidden_states, residual)` returns a
///   new normed row and a new residual sum (`dropout_add_ln_fwd`; the first layer only
///   the normed row); the attention's fused QKV rows, `attn_output =
///   torch.empty_like(query)` and the `o_proj` output, the first two freed on return;
///   `post_attention_layernorm` two more rows; the MLP (`gate_up`, the activation,
///   their product, `down_proj`'s output). The layer's locals (both norms' outputs,
///   the attention's output) and its arguments — still bound in the model's loop
///   (`hidden_states, residual = layer(hidden_states, residual, …)`) until the call
///   returns — stay alive through the MLP: seven hidden rows beside its four
///   intermediate ones.
/// - The model's final norm, `hidden_states[lm_head_indices]` (every prompt token's
///   row, `prefill_logprobs`), the logits, and `torch.log_softmax(out, -1)` beside them
///   in `generate_token` (a copy before text-generation-inference pull request 2661).
///
/// Each goes through [`Allocator`] (c10/cuda/CUDACachingAllocator.cpp's rules): the
/// allocator splits the freed MLP segments to serve later hidden rows, so the
/// intermediate rows need fresh segments again, and the vocabulary-wide logits fit in
/// no segment the layers left. Sizes are per tensor-parallel rank (QKV and MLP
/// columns split; hidden rows and the gathered logits whole).
fn warmup_reserved(input: &EstimateInput, tokens: u64) -> Result<(u64, Inputs), EstimateError> {
    let Some((a, b, tp, inter)) = warmup_shape(input)? else {
        return Ok((0, Vec::new()));
    };
    let hidden = prod(&[tokens, a.hidden, b])?;
    let qkv_cols = prod(&[sum(&[a.heads, prod(&[2, a.kv_heads])?])?, a.head_dim])?;
    let qkv = prod(&[tokens, qkv_cols, b])?.div_ceil(tp);
    let inter_row = prod(&[tokens, inter, b])?.div_ceil(tp);
    let logits = prod(&[tokens, a.vocab, b])?;
    let bnb = dequantised(input)?;
    let int8 = matches!(input.format, Some(crate::format::StorageFormat::Int8));
    let fp16 = input.compute_dtype == crate::format::Dtype::F16;
    // A 4-bit linear: its weight dequantised, then its output, then the weight freed.
    // An 8-bit one ([`int8_scratch`], bitsandbytes 0.45's tensors in the order
    // `MatMul8bitLt.forward` makes and drops them): the input's fp16 copy, the int8
    // rows, their scales, the outlier search's two copies; then the int32 product,
    // its fp16 dequantisation and (a model not in fp16) the cast that is the output.
    let linear = |al: &mut Allocator, weight: Option<u64>, width_in: u64, out: u64| {
        if int8 {
            let values = tokens.saturating_mul(width_in);
            let a16 = (!fp16).then(|| al.malloc(values.saturating_mul(2)));
            let stats = al.malloc(tokens.saturating_mul(4));
            let rows = al.malloc(values);
            let abs = al.malloc(values.saturating_mul(2));
            let found = al.malloc(values);
            al.free(abs);
            al.free(found);
            if let Some(h) = a16 {
                al.free(h);
            }
            let values_out = out.checked_div(b).unwrap_or(out);
            let product = al.malloc(values_out.saturating_mul(4));
            let o = if fp16 {
                al.malloc(out)
            } else {
                let half = al.malloc(values_out.saturating_mul(2));
                let o = al.malloc(out);
                al.free(half);
                o
            };
            al.free(product);
            al.free(rows);
            al.free(stats);
            return o;
        }
        let w = weight.map(|w| al.malloc(w));
        let o = al.malloc(out);
        if let Some(w) = w {
            al.free(w);
        }
        o
    };
    let q_width = prod(&[a.heads, a.head_dim])?.div_ceil(tp);
    let inter_width = inter.div_ceil(tp);
    let mut al = Allocator::new(false);
    let mut h = al.malloc(hidden);
    let mut r: Option<Handle> = None;
    for _ in 0..a.layers {
        let n1 = al.malloc(hidden);
        let x1 = r.map(|_| al.malloc(hidden));
        let q = linear(&mut al, bnb.as_ref().map(|d| d.qkv), a.hidden, qkv);
        let attn = al.malloc(hidden);
        let o = linear(&mut al, bnb.as_ref().map(|d| d.o), q_width, hidden);
        al.free(q);
        al.free(attn);
        let n2 = al.malloc(hidden);
        let x2 = al.malloc(hidden);
        let (w_up, w_down) = (
            bnb.as_ref().map(|d| d.gate_up),
            bnb.as_ref().map(|d| d.down),
        );
        let d = if a.gated_mlp {
            let gu = linear(&mut al, w_up, a.hidden, prod(&[2, inter_row])?);
            let act = al.malloc(inter_row);
            let p = al.malloc(inter_row);
            al.free(act);
            let d = linear(&mut al, w_down, inter_width, hidden);
            al.free(p);
            al.free(gu);
            d
        } else {
            let up = linear(&mut al, w_up, a.hidden, inter_row);
            let act = al.malloc(inter_row);
            al.free(up);
            let d = linear(&mut al, w_down, inter_width, hidden);
            al.free(act);
            d
        };
        for t in [Some(n1), x1, Some(o), Some(n2), Some(h), r].into_iter().flatten() {
            al.free(t);
        }
        h = d;
        r = Some(x2);
    }
    let n = al.malloc(hidden);
    let x = al.malloc(hidden);
    for t in [Some(h), r, Some(x)].into_iter().flatten() {
        al.free(t);
    }
    let rows = al.malloc(hidden);
    al.free(n);
    let out = al.malloc(logits);
    al.free(rows);
    al.malloc(logits);
    let _ = out;
    let reserved = al.peak_reserved();
    let mut parts = vec![
        ("max-batch-prefill-tokens", tokens.to_string()),
        ("peak-allocated", al.peak_allocated().to_string()),
        ("reserved", reserved.to_string()),
    ];
    if let Some(d) = bnb {
        parts.push(("bnb-dequantised-gate-up", d.gate_up.to_string()));
    }
    Ok((reserved, parts))
}

/// The newest rules (3): what is free after the warm-up, less `TGI_WIGGLE_ROOM`.
fn rule_v3(c: &Ctx) -> Result<Draft, EstimateError> {
    let (capacity, kind) = catalogue_capacity(&c.card);
    let batched = c.params.count(BATCHED_TOKENS.key()).unwrap_or(4096);
    // TGI 3's warm-up is still one batch of max-batch-prefill-tokens prompt tokens with
    // `prefill_logprobs: true` (backends/v3/src/client/client.rs `Client::warmup`), so
    // `FlashCausalLM.generate_token` (server/text_generation_server/models/
    // flash_causal_lm.py) runs the LM head over every prompt token before `warmup` reads
    // what is free; its `log_softmax` runs in place (one copy of the logits). Checked
    // against a TGI 3 log: Gemma-3-27B on 2 x RTX A6000, 8000 prefill tokens.
    let (peak, parts) = warmup_peak(c.input, batched, 1)?;
    let kept = times_fraction(capacity, ONE / 10, false)?;
    let ctx_mib = 512;
    let lines = vec![
        line("budget", "Card total", capacity, Kind::Computed, "total memory (torch.cuda.mem_get_info)".into(), &[("total", format!("{capacity} B ({kind})"))], SRC_WARMUP),
        line("cuda_context", "CUDA context (assumed; not free at warmup)", mib(ctx_mib), Kind::Assumed, format!("{ctx_mib} MiB"), &[], "server/text_generation_server/models/flash_causal_lm.py (warmup: get_free_memory)"),
        line("weights", "Weights on this device", c.weights, Kind::Computed, "the estimate's weight lines, most loaded device".into(), &[("tp", c.input.tp.to_string())], "the estimator"),
        line("activation_peak", "The warm-up prefill's tensors, held by torch's caching allocator", peak, Kind::Computed, "eager MLP (gate_up, act, product) and residual rows + every prompt token's logits (log_softmax in place)".into(), &parts, SRC_WARMUP),
        line("wiggle_room", "Left free: total × (1 − MEMORY_FRACTION × TGI_WIGGLE_ROOM)", kept, Kind::Computed, "total × (1 − 1.0 × 0.90)".into(), &[("cuda-memory-fraction", "1".into()), ("TGI_WIGGLE_ROOM", "0.9".into())], "server/text_generation_server/models/globals.py (TGI_WIGGLE_ROOM)"),
    ];
    let (group_block_bytes, groups, seq_blocks) = simple_pool(c, 16)?;
    Ok(Draft {
        version: "3",
        capacity,
        capacity_kind: kind,
        lines,
        block: 16,
        group_block_bytes,
        groups,
        seq_blocks,
        tokens_by_concurrency: false,
        kv_cache_bytes: None,
        pool: None,
        need: None,
        speculative: None,
        uncertainty: sum(&[peak, mib(ctx_mib)])?.checked_div(4).unwrap_or(0),
        assumptions: int8_assumption(c.input, "bitsandbytes 0.45").into_iter().collect(),
        warnings: Vec::new(),
        refused: None,
        devices: Vec::new(),
    })
}

/// What an 8-bit run's warm-up leaves out, said beside the figure.
fn int8_assumption(input: &EstimateInput, release: &str) -> Option<String> {
    matches!(input.format, Some(crate::format::StorageFormat::Int8)).then(|| {
        format!(
            "bitsandbytes 8-bit: the linears' int8 scratch as {release} runs it; the outlier columns (inputs past the 6.0 threshold: each keeps its input and dequantised weight column) are not counted"
        )
    })
}

#[cfg(test)]
mod tests;
