//! mlx-lm (`mlx_lm.generate`, `mlx_lm.server`) on Apple silicon: no pool; the
//! process's peak — the weights, the KV cache as its 256-token growth leaves it, one
//! layer's growth copy and one prefill chunk's activations — against the Mac's GPU
//! working set.
//!
//! Read at ml-explore/mlx-lm d78bf58e (0.32.0) and ml-explore/mlx 846d17622:
//! - `mlx_lm/generate.py` `generate_step`: the prompt but its last token is run in
//!   chunks of `prefill_step_size` (2048) evaluating only the caches
//!   (`mx.eval([c.state for c in prompt_cache])`: the chunk's logits are never
//!   computed), `mx.clear_cache()` after each; then the last token and the generated
//!   ones one at a time (the cache ends at prompt + generated tokens). Before mlx-lm
//!   PR 406 (0.27) the prompt's last ≤ `prefill_step_size` tokens went through `_step`
//!   whole, their logits computed (`mlx@0.26`, from 0.22.2, PR 40: the causal mask a
//!   string, no mask array).
//! - `mlx_lm/models/cache.py` `KVCache.update_and_fetch`: a write past the capacity
//!   allocates `ceil(new ÷ 256) × 256` more tokens (`step = 256`) and concatenates them
//!   onto the old buffer, trimmed to the offset when it is not a multiple of 256: the
//!   old buffer and the zeros live beside the new one while one layer's concatenate
//!   runs. `RotatingKVCache` (`--max-kv-size`): a chunk is concatenated after the
//!   oldest tokens but `max_size − 1` (and the 4 kept) are dropped, so it holds up to
//!   `max_size − 1 + chunk`; one token at a time it is trimmed to `max_size` and
//!   written in place. `QuantizedKVCache` (`--kv-bits`, `--kv-group-size`, from
//!   `--quantized-kv-start`, `maybe_quantize_kv_cache`): the cache converted with
//!   `mx.quantize` at its capacity, `bits` per value in uint32 with a scale and a bias
//!   per group in the model's dtype, grown as `KVCache`; its attention
//!   (`mlx_lm/models/base.py` `quantized_scaled_dot_product_attention`) materialises
//!   the scores.
//! - `mlx/backend/metal/scaled_dot_product_attention.cpp` `has_fused_kernel` and
//!   `use_fallback`: for more than 8 queries the fused kernel takes head dims 64, 72,
//!   80, 96, 128, 192 and 256, but head dims 192 and 256 still take the unfused path
//!   (but on a GPU with neural accelerators, `is_nax_available`, for a causal 256
//!   with 1024 queries or more); for up to 8 queries head dims 64, 96, 128 and 256
//!   are fused. The unfused path (`mlx/fast.cpp` `scaled_dot_product_attention`'s
//!   fallback) holds the scores `[heads, queries, keys]` in the model's dtype and a
//!   boolean causal mask `[queries, keys]`; `where` and `softmax` write into the
//!   scores' buffer (`mlx/backend/common/ternary.h` `set_ternary_op_output_data`,
//!   `mlx/backend/metal/softmax.cpp`: a donatable input is reused).
//! - `mx.get_peak_memory()` (what `mlx_lm.generate` prints as "Peak memory", in GB of
//!   10^9 bytes) is the allocator's peak of active memory, not its buffer cache.
//! - `generate.py` `wired_limit`: the wired limit is raised to the GPU's
//!   `max_recommended_working_set_size` for the generation, with a warning when the
//!   model's bytes exceed 90 % of it.

use super::arith::{prod, sum};
use super::contract::{Engine, Info};
use super::flags::{Flag, MAX_MODEL_LEN, Value, field, positive};
use super::outcome::{EngineLine, line};
use super::pool::{Draft, Need};
use super::request::{Ctx, catalogue_capacity};
use crate::error::EstimateError;
use crate::estimate::Kind;
use crate::fields::{FieldKind, Unit};
use crate::format::StorageFormat;

#[cfg(test)]
mod tests;

/// mlx-lm's KV cache growth step (`cache.py` `KVCache.step`, also
/// `RotatingKVCache.step` and `QuantizedKVCache.step`).
const STEP: u64 = 256;

/// `generate_step`'s `prefill_step_size` default.
const PREFILL_STEP: u64 = 2048;

/// The `--quantized-kv-start` default of `mlx_lm.generate`'s command line
/// (`DEFAULT_QUANTIZED_KV_START`).
const QUANTIZED_KV_START: u64 = 5000;

/// Tokens `RotatingKVCache` keeps at the front (`make_prompt_cache`: `keep=4`).
const ROTATING_KEEP: u64 = 4;

/// `--prefill-step-size`.
const PREFILL_STEP_SIZE: Flag = Flag::new(
    field(
        "prefill-step-size",
        FieldKind::Count,
        "mlx-lm prefill step",
        "2048",
        "mlx-lm: prompt tokens per prefill chunk (mlx_lm.server, mlx_lm.benchmark; generate_step's prefill_step_size)",
    )
    .unit(Unit::Tokens),
    positive,
);

/// `--max-kv-size`: a rotating cache of that many tokens.
const MAX_KV_SIZE: Flag = Flag::new(
    field(
        "max-kv-size",
        FieldKind::Count,
        "mlx-lm max KV size",
        "unbounded",
        "mlx-lm: a rotating KV cache of this many tokens (the oldest but 4 overwritten)",
    )
    .unit(Unit::Tokens),
    positive,
)
.unread("--max-kv-size is mlx-lm's (--engine mlx): ignored");

/// `--kv-bits`: the KV cache quantised by `mx.quantize`.
const KV_BITS: Flag = Flag::new(
    field(
        "kv-bits",
        FieldKind::Choice,
        "mlx-lm KV bits",
        "16-bit",
        "mlx-lm: KV cache quantised to 2, 3, 4, 5, 6 or 8 bits (from --quantized-kv-start)",
    )
    .choices(&[
        ("", "the model's dtype"),
        ("8", "8 bits"),
        ("6", "6 bits"),
        ("5", "5 bits"),
        ("4", "4 bits"),
        ("3", "3 bits"),
        ("2", "2 bits"),
    ]),
    kv_bits,
)
.unread("--kv-bits is mlx-lm's (--engine mlx): ignored");

/// `--kv-group-size`.
const KV_GROUP_SIZE: Flag = Flag::new(
    field(
        "kv-group-size",
        FieldKind::Choice,
        "mlx-lm KV group size",
        "64",
        "mlx-lm: group size of the quantised KV cache (32, 64 or 128)",
    )
    .choices(&[
        ("", "64"),
        ("32", "32"),
        ("64", "64"),
        ("128", "128"),
    ]),
    kv_group,
)
.unread("--kv-group-size is mlx-lm's (--engine mlx): ignored");

/// `--quantized-kv-start`.
const QUANTIZED_KV_START_FLAG: Flag = Flag::new(
    field(
        "quantized-kv-start",
        FieldKind::Count,
        "mlx-lm quantised KV start",
        "5000",
        "mlx-lm: the cache is quantised once it holds this many tokens (with --kv-bits)",
    )
    .unit(Unit::Tokens),
    super::flags::count,
)
.unread("--quantized-kv-start is mlx-lm's (--engine mlx): ignored");

fn kv_bits(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    match positive(key, text)? {
        Value::Count(b @ (2..=6 | 8)) => Ok(Value::Count(b)),
        _ => Err(EstimateError::invalid(
            key,
            "mx.quantize takes 2, 3, 4, 5, 6 or 8 bits",
        )),
    }
}

fn kv_group(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    match positive(key, text)? {
        Value::Count(g @ (32 | 64 | 128)) => Ok(Value::Count(g)),
        _ => Err(EstimateError::invalid(
            key,
            "mx.quantize takes groups of 32, 64 or 128",
        )),
    }
}

/// mlx-lm on Apple silicon.
pub struct Mlx;

impl Engine for Mlx {
    const INFO: Info = Info {
        name: "mlx",
        aliases: &["mlx-lm", "mlx_lm"],
        summary: "mlx-lm (`mlx_lm.generate`, `mlx_lm.server`) on Apple silicon.",
        releases: &[
            ("mlx", "mlx-lm 0.27–0.32"),
            ("mlx@0.26", "mlx-lm 0.22.2–0.26"),
        ],
        release: Some(parse_release),
        hint: "mlx (mlx@0.26)",
        flags: &[
            &MAX_MODEL_LEN,
            &PREFILL_STEP_SIZE,
            &MAX_KV_SIZE,
            &KV_BITS,
            &KV_GROUP_SIZE,
            &QUANTIZED_KV_START_FLAG,
        ],
        formats: &["bf16", "mlx-8-g64", "mlx-4-g64"],
        windows: false,
        shared_context: false,
        metal: true,
        refusal: None,
    };

    fn budget(c: &Ctx) -> Result<Draft, EstimateError> {
        rule(c)
    }
}

/// The release's place in [`Info::releases`]: 0.27 on (the last prompt token peeled
/// off, mlx-lm PR 406), or 0.22.2–0.26 (the prompt's last chunk through the lm_head).
fn parse_release(text: &str) -> Result<usize, EstimateError> {
    let mut parts = text.trim().trim_start_matches('v').split('.');
    let num = |p: Option<&str>| -> Option<u64> {
        let digits: String = p?.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    match (num(parts.next()), num(parts.next()), num(parts.next())) {
        (Some(0), Some(27..=32), _) => Ok(0),
        (Some(0), Some(23..=26), _) | (Some(0), Some(22), Some(2..)) => Ok(1),
        _ => Err(EstimateError::invalid(
            "engine",
            format!(
                "mlx@{text}: the rules carried are mlx-lm 0.27–0.32 (mlx) and 0.22.2–0.26 (mlx@0.26); before 0.22.2 the models passed a mask array to the attention, a rule not carried"
            ),
        )),
    }
}

const SRC_GENERATE: &str = "mlx_lm/generate.py (generate_step), ml-explore/mlx-lm d78bf58e";
const SRC_CACHE: &str = "mlx_lm/models/cache.py (KVCache.update_and_fetch: step 256), ml-explore/mlx-lm d78bf58e";
const SRC_SDPA: &str = "mlx/backend/metal/scaled_dot_product_attention.cpp (use_fallback), mlx/fast.cpp (fallback), ml-explore/mlx 846d17622";

/// The cache kind mlx-lm builds for the request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CacheKind {
    /// `KVCache`, quantised from `start` tokens when `bits` is given.
    Growing {
        quantise: Option<(u64, u64, u64)>,
    },
    /// `RotatingKVCache(max_size, keep=4)`.
    Rotating { max_size: u64 },
}

/// The model's shapes the transients read.
#[derive(Clone, Copy)]
struct Shape {
    hidden: u64,
    heads: u64,
    kv_heads: u64,
    /// The head dims of the attention layers (regular, global).
    head_dims: [u64; 2],
    vocab: u64,
    /// The MLP's live width: gated 3 × intermediate, else 2 × (MoE: the active
    /// experts' widths).
    mlp_live: u64,
    /// Bytes of one activation value (the model's dtype).
    dtype: u64,
    /// Layers that keep KV.
    kv_layers: u64,
}

/// One moment of the request: a chunk's forward with its cache update.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Moment {
    /// The cache's bytes after the update (every layer).
    kv: u64,
    /// One layer's old buffer and appended zeros while its concatenate runs (or the
    /// unquantised cache beside its quantised copy).
    growth: u64,
    /// One layer's activations for the chunk (hidden states, q/k/v, the MLP), or the
    /// last chunk's logits (mlx@0.26) if larger.
    activations: u64,
    /// The unfused attention's scores and mask for the chunk.
    scores: u64,
    /// Tokens in the chunk.
    tokens: u64,
    /// Keys it attends.
    keys: u64,
    /// The logits' bytes taken as its activations (mlx@0.26's last chunk).
    logits: bool,
    /// Cache capacity in tokens after the update.
    capacity: u64,
}

impl Moment {
    fn total(&self) -> u64 {
        self.kv
            .saturating_add(self.growth)
            .saturating_add(self.activations)
            .saturating_add(self.scores)
    }
}

fn rule(c: &Ctx) -> Result<Draft, EstimateError> {
    let input = c.input;
    let p = c.params;
    let (capacity, kind) = catalogue_capacity(&c.card);
    let version = if p.release == Some(1) { "0.26" } else { "0.32" };
    let mut lines = vec![line(
        "budget",
        "GPU working set",
        capacity,
        Kind::Computed,
        "Metal's recommendedMaxWorkingSetSize (or the wired limit given)".into(),
        &[("working-set", format!("{capacity} B ({kind})"))],
        "mlx_lm/generate.py (wired_limit: the wired limit raised to max_recommended_working_set_size)",
    )];
    let refuse = |lines: Vec<EngineLine>, why: String| Draft {
        version,
        capacity,
        capacity_kind: kind,
        lines,
        block: 1,
        group_block_bytes: c.per_token.max(1),
        groups: 1,
        seq_blocks: c.max_model_len,
        tokens_by_concurrency: false,
        kv_cache_bytes: None,
        pool: None,
        need: None,
        speculative: None,
        uncertainty: 0,
        assumptions: Vec::new(),
        warnings: Vec::new(),
        refused: Some(why),
        devices: Vec::new(),
    };
    if !c.card.unified() {
        return Ok(refuse(
            lines,
            format!(
                "mlx-lm's rule here is MLX's Metal backend's on a Mac (the GPU's working set, Metal's attention kernels); {} is not a Mac, and MLX's CUDA backend is not modelled",
                c.card.name
            ),
        ));
    }
    if let Some(why) = unloadable(input) {
        return Ok(refuse(lines, why));
    }
    let Some(a) = input.arch else {
        return Err(EstimateError::invalid(
            "engine",
            "mlx: give the architecture (a preset, a config.json or the shape keys): the prefill's activations read its shapes",
        ));
    };
    let mut assumptions = Vec::new();
    let mut warnings = Vec::new();
    let dtype = input.compute_dtype.bytes();
    let kv_layers = a.attention_layers().max(1);
    let mlp_live = match a.moe {
        Some(m) => prod(&[3, m.expert_intermediate, m.active])?,
        None => prod(&[if a.gated_mlp { 3 } else { 2 }, a.intermediate])?,
    };
    let shape = Shape {
        hidden: a.hidden,
        heads: a.heads,
        kv_heads: a.kv_heads,
        head_dims: [a.head_dim, a.global_attn.map_or(a.head_dim, |g| g.head_dim)],
        vocab: a.vocab,
        mlp_live,
        dtype,
        kv_layers,
    };
    if a.moe.is_some() || a.mla.is_some() || a.mixer.is_some() {
        assumptions.push(
            "the prefill's activations are a dense layer's (q/k/v, the MLP at the active experts' width): MoE routing, MLA and recurrent mixers keep other buffers, not read here".into(),
        );
    }
    // The request: the prompt and the tokens generated, one sequence.
    let total = c.max_model_len;
    let prompt = input.context.unwrap_or(total).clamp(1, total.max(1));
    let generated = total.saturating_sub(prompt);
    // mlx_lm/server.py (d78bf58e): batched decoding (--decode-concurrency 32) and
    // prefill (--prompt-concurrency 8), and an LRU of finished requests' caches
    // (--prompt-cache-size 10).
    assumptions.push(
        "one request as mlx_lm.generate runs it; mlx_lm.server's batches (up to 32 decoding, 8 prefilling) and the caches its prompt cache keeps of earlier requests (up to 10) are not counted".into(),
    );
    if input.sequences > 1 {
        warnings.push(
            "mlx_lm.generate serves one sequence: the figure is one sequence's; mlx_lm.server's batched generation (BatchKVCache) is not modelled".into(),
        );
    }
    let step = p.count(PREFILL_STEP_SIZE.key()).unwrap_or(PREFILL_STEP);
    let kv_bits = p.count(KV_BITS.key());
    let cache = match (p.count(MAX_KV_SIZE.key()), kv_bits) {
        (Some(_), Some(_)) => {
            return Ok(refuse(
                lines,
                "--max-kv-size with --kv-bits: mlx-lm's RotatingKVCache has no quantised form (cache.py to_quantized: \"RotatingKVCache Quantization NYI\")".into(),
            ));
        }
        (Some(m), None) => CacheKind::Rotating { max_size: m },
        (None, Some(bits)) => {
            let group = p.count(KV_GROUP_SIZE.key()).unwrap_or(64);
            let start = p
                .count(QUANTIZED_KV_START_FLAG.key())
                .unwrap_or(QUANTIZED_KV_START);
            if a.mla.is_some() || shape
                    .head_dims
                    .iter()
                    .any(|d| d.checked_rem(group) != Some(0)) {
                return Ok(refuse(
                    lines,
                    format!(
                        "--kv-bits: mx.quantize needs the head dim ({}) to be a multiple of --kv-group-size {group} (and MLA's cache is not quantised this way)",
                        a.head_dim
                    ),
                ));
            }
            CacheKind::Growing {
                quantise: Some((bits, group, start)),
            }
        }
        (None, None) => CacheKind::Growing { quantise: None },
    };
    let quant_per_token = match cache {
        CacheKind::Growing {
            quantise: Some((bits, group, _)),
        } => quantised_per_token(&a, bits, group, dtype)?,
        _ => 0,
    };
    let nax = c.card.id.starts_with("m5");
    let peak = walk(&Walk {
        prompt,
        generated,
        step: step.max(1),
        old: p.release == Some(1),
        cache,
        per_token: c.per_token,
        quant_per_token,
        shape,
        nax,
    })?;
    let weights = c.weights;
    lines.push(line(
        "weights",
        "Model weights",
        weights,
        Kind::Computed,
        "the estimate's weights in the checkpoint's format".into(),
        &[(
            "format",
            input
                .format
                .map_or_else(|| "bf16".to_string(), StorageFormat::name),
        )],
        "mlx_lm/utils.py (load_model: every array of the checkpoint on the GPU)",
    ));
    let per_layer = c.per_token.div_ceil(shape.kv_layers);
    lines.push(line(
        "kv_growth",
        "KV cache growth (one layer's old buffer and its new step)",
        peak.growth,
        Kind::Computed,
        format!(
            "one layer's buffer of {} tokens beside its concatenate's result, at the peak's chunk",
            peak.growth.checked_div(per_layer.max(1)).unwrap_or(0)
        ),
        &[("bytes-per-token-layer", per_layer.to_string())],
        SRC_CACHE,
    ));
    lines.push(line(
        "activations",
        if peak.logits {
            "Prompt's last chunk: its logits (mlx-lm ≤ 0.26)"
        } else if peak.tokens <= 1 {
            "One token's forward (its logits at the peak's growth)"
        } else {
            "Prefill chunk's activations (one layer)"
        },
        peak.activations,
        Kind::Computed,
        if peak.logits {
            format!("{} tokens × vocab {} × {dtype} B + the hidden states", peak.tokens, shape.vocab)
        } else {
            format!(
                "{} tokens × (2 × hidden + max(q, k, v and the attention's output; the MLP's {} live columns)) × {dtype} B",
                peak.tokens, shape.mlp_live
            )
        },
        &[
            ("chunk", peak.tokens.to_string()),
            ("prefill-step-size", step.to_string()),
        ],
        SRC_GENERATE,
    ));
    if peak.scores > 0 {
        lines.push(line(
            "attention_scores",
            "Unfused attention's scores (MLX's fallback)",
            peak.scores,
            Kind::Computed,
            format!(
                "{} heads × {} queries × {} keys × {dtype} B + the causal mask (1 B per query × key)",
                shape.heads, peak.tokens, peak.keys
            ),
            &[("head-dim", format!("{:?}", shape.head_dims))],
            SRC_SDPA,
        ));
    }
    let mut kv_line = line(
        "kv_cache",
        "KV cache (at mlx-lm's 256-token growth)",
        peak.kv,
        Kind::Computed,
        format!(
            "{} tokens of capacity at the peak ({} prompt + {} generated)",
            peak.capacity, prompt, generated
        ),
        &[
            ("capacity-tokens", peak.capacity.to_string()),
            ("bytes-per-token", c.per_token.to_string()),
        ],
        SRC_CACHE,
    );
    kv_line.subtracted = false;
    lines.push(kv_line);
    let total_peak = sum(&[weights, peak.total()])?;
    let mut peak_line = line(
        "peak",
        "Peak memory (mlx_lm.generate's \"Peak memory\")",
        total_peak,
        Kind::Computed,
        "weights + KV cache + growth + the chunk's activations and scores".into(),
        &[(
            "gb-gib",
            format!(
                "{} GB, {} GiB",
                crate::units::Bytes(total_peak).gb_string(3),
                crate::units::Bytes(total_peak).gib_string(3)
            ),
        )],
        "mx.get_peak_memory(): the allocator's peak of active memory",
    );
    peak_line.subtracted = false;
    lines.push(peak_line);
    // mlx-lm's own warning (`wired_limit`): model bytes over 90 % of the working set.
    if u128::from(weights).saturating_mul(10) > u128::from(capacity).saturating_mul(9) {
        warnings.push(format!(
            "mlx-lm warns: \"Generating with a model that requires {} MB which is close to the maximum recommended size of {} MB\" (weights over 90 % of the working set; it runs slowly)",
            weights >> 20,
            capacity >> 20
        ));
    }
    if let CacheKind::Rotating { max_size } = cache
        && max_size < total
    {
        assumptions.push(format!(
            "--max-kv-size {max_size}: the oldest tokens but {ROTATING_KEEP} are overwritten, the model attends the last {max_size}"
        ));
    }
    let transients = sum(&[peak.growth, peak.activations, peak.scores])?;
    let room = i128::from(capacity)
        .saturating_sub(i128::from(weights))
        .saturating_sub(i128::from(transients));
    let room_u = u64::try_from(room.max(0)).unwrap_or(0);
    Ok(Draft {
        version,
        capacity,
        capacity_kind: kind,
        lines,
        block: 1,
        group_block_bytes: c.per_token.max(1),
        groups: 1,
        seq_blocks: peak.capacity,
        tokens_by_concurrency: false,
        kv_cache_bytes: Some(peak.kv),
        pool: Some(i64::try_from(room).unwrap_or(i64::MIN)),
        need: Some(Need {
            bytes: peak.kv,
            tokens: room_u.checked_div(c.per_token.max(1)).unwrap_or(0),
            sequences: 1,
        }),
        speculative: None,
        // The activations are read from the model's code one layer at a time; MLX
        // frees what the graph no longer holds, so what else coexists is the
        // uncertain part: a quarter of the transients.
        uncertainty: transients.checked_div(4).unwrap_or(0),
        assumptions,
        warnings,
        refused: None,
        devices: Vec::new(),
    })
}

/// Why mlx-lm cannot load the weights as given, if it cannot: it loads safetensors in
/// a dense dtype or MLX's own quantisation (affine, mxfp4, nvfp4).
fn unloadable(input: &crate::estimate::EstimateInput) -> Option<String> {
    match (input.format, input.bits) {
        (Some(StorageFormat::Dense { .. } | StorageFormat::Mlx { .. } | StorageFormat::Mxfp4 | StorageFormat::Nvfp4 { .. }), _) | (None, None | Some(16 | 32)) => None,
        (Some(f), _) => Some(format!(
            "mlx-lm loads safetensors in a dense dtype or MLX's own quantisation (mlx-4-g64, mxfp4, nvfp4: mlx_lm.convert writes them); {} is not one",
            f.name()
        )),
        (None, Some(b)) => Some(format!(
            "bits {b} names a GPTQ/int8 format mlx-lm does not load: give --format mlx-{b}-g64 (MLX's affine quantisation)"
        )),
    }
}

/// KV bytes of one token once quantised: per layer and KV head, K and V each
/// `d × bits ÷ 8` packed bytes and a scale and a bias per group in the model's dtype
/// (`cache.py` `QuantizedKVCache`, `mx.quantize`).
fn quantised_per_token(
    a: &crate::arch::Architecture,
    bits: u64,
    group: u64,
    dtype: u64,
) -> Result<u64, EstimateError> {
    let one = |kv_heads: u64, d: u64| -> Result<u64, EstimateError> {
        let packed = prod(&[d, bits])?.div_ceil(32);
        let per_head = sum(&[prod(&[packed, 4])?, prod(&[d.checked_div(group).unwrap_or(0), 2, dtype])?])?;
        prod(&[kv_heads, 2, per_head])
    };
    let layers = a.attention_layers();
    let (global, gkv, gd) = a
        .global_attn
        .map_or((0, 0, 0), |g| (g.layers, g.kv_heads, g.head_dim));
    sum(&[
        prod(&[layers.saturating_sub(global), one(a.kv_heads, a.head_dim)?])?,
        prod(&[global, one(gkv, gd)?])?,
    ])
}

/// What [`walk`] reads.
struct Walk {
    prompt: u64,
    generated: u64,
    step: u64,
    /// mlx-lm 0.22.2–0.26: chunks while more than a step remains, then the rest
    /// through `_step` with its logits.
    old: bool,
    cache: CacheKind,
    per_token: u64,
    quant_per_token: u64,
    shape: Shape,
    /// A GPU with neural accelerators (M5): MLX's head-dim-split kernel.
    nax: bool,
}

/// The cache as mlx-lm grows it.
#[derive(Clone, Copy)]
struct CacheState {
    /// Tokens written.
    offset: u64,
    /// Tokens the buffers hold room for (a rotating cache: tokens held).
    capacity: u64,
    quantised: bool,
}

/// Walks the request's updates (prefill chunks, the last prompt token, the generated
/// tokens) as `generate_step` and the cache make them, and returns the moment whose
/// total is highest.
fn walk(w: &Walk) -> Result<Moment, EstimateError> {
    let mut st = CacheState {
        offset: 0,
        capacity: 0,
        quantised: false,
    };
    let mut best = Moment::default();
    // The prompt's chunks.
    let mut remaining = w.prompt;
    if w.old {
        while remaining > w.step {
            step(w, &mut st, &mut best, w.step, false)?;
            remaining = remaining.saturating_sub(w.step);
        }
        step(w, &mut st, &mut best, remaining, true)?;
    } else {
        while remaining > 1 {
            let n = w.step.min(remaining.saturating_sub(1));
            step(w, &mut st, &mut best, n, false)?;
            remaining = remaining.saturating_sub(n);
        }
        step(w, &mut st, &mut best, 1, false)?;
    }
    // The generated tokens, one at a time: only a growth (or the rotating cache's
    // trim) changes the picture, so the walk jumps from one to the next.
    let mut left = w.generated;
    while left > 0 {
        let room = match w.cache {
            CacheKind::Rotating { max_size } if st.capacity == max_size => left,
            CacheKind::Rotating { max_size } if st.capacity > max_size => 0,
            _ => st.capacity.saturating_sub(st.offset),
        };
        if room > 0 {
            let n = room.min(left);
            st.offset = st.offset.saturating_add(n);
            left = left.saturating_sub(n);
            // A quantised switch may fall between growths.
            maybe_quantise(w, &mut st, &mut best)?;
            continue;
        }
        step(w, &mut st, &mut best, 1, false)?;
        left = left.saturating_sub(1);
    }
    keep(&mut best, state_only(w, &st)?);
    Ok(best)
}

/// Keeps the higher of two moments (the later when equal).
fn keep(best: &mut Moment, m: Moment) {
    if m.total() >= best.total() {
        *best = m;
    }
}

/// One forward and, after it, `maybe_quantize_kv_cache`.
fn step(
    w: &Walk,
    st: &mut CacheState,
    best: &mut Moment,
    n: u64,
    logits: bool,
) -> Result<(), EstimateError> {
    let m = update(w, st, n, logits)?;
    keep(best, m);
    maybe_quantise(w, st, best)
}

/// The cache's bytes for `tokens` of capacity.
fn kv_bytes(w: &Walk, tokens: u64, quantised: bool) -> Result<u64, EstimateError> {
    prod(&[tokens, if quantised { w.quant_per_token } else { w.per_token }])
}

/// One layer's share of the cache's bytes for `tokens`.
fn layer_bytes(w: &Walk, tokens: u64, quantised: bool) -> Result<u64, EstimateError> {
    Ok(kv_bytes(w, tokens, quantised)?.div_ceil(w.shape.kv_layers.max(1)))
}

/// The moment with only the cache (the end of the request).
fn state_only(w: &Walk, st: &CacheState) -> Result<Moment, EstimateError> {
    Ok(Moment {
        kv: kv_bytes(w, st.capacity, st.quantised)?,
        capacity: st.capacity,
        ..Moment::default()
    })
}

/// `maybe_quantize_kv_cache`: once the cache holds `start` tokens it is converted at
/// its capacity; the unquantised buffers and the quantised copy coexist.
fn maybe_quantise(w: &Walk, st: &mut CacheState, best: &mut Moment) -> Result<(), EstimateError> {
    if let CacheKind::Growing {
        quantise: Some((_, _, start)),
    } = w.cache
        && !st.quantised
        && st.offset >= start
    {
        keep(
            best,
            Moment {
            kv: sum(&[
                kv_bytes(w, st.capacity, false)?,
                kv_bytes(w, st.capacity, true)?,
            ])?,
            capacity: st.capacity,
            ..Moment::default()
        },
        );
        st.quantised = true;
    }
    Ok(())
}

/// One forward of `n` tokens: the cache's update and the chunk's transients.
fn update(w: &Walk, st: &mut CacheState, n: u64, logits: bool) -> Result<Moment, EstimateError> {
    let old_capacity = st.capacity;
    let mut growth_tokens = 0;
    match w.cache {
        CacheKind::Growing { .. } => {
            if st.offset.saturating_add(n) > st.capacity {
                // `update_and_fetch`: the old buffer trimmed to the offset when the
                // offset is not a multiple of the step, then ceil(n ÷ 256) × 256 more.
                let kept = if !st.offset.is_multiple_of(STEP) {
                    st.offset
                } else {
                    st.capacity
                };
                let added = n.div_ceil(STEP).saturating_mul(STEP);
                growth_tokens = old_capacity.saturating_add(added);
                st.capacity = kept.saturating_add(added);
            }
        }
        CacheKind::Rotating { max_size } => {
            if n > 1 {
                // `_update_concat`: in temporal order, trimmed to max_size − 1 (the 4
                // kept at the front), the chunk appended.
                let held = if st.capacity == 0 {
                    0
                } else {
                    st.capacity.min(max_size.saturating_sub(1))
                };
                growth_tokens = st.capacity;
                st.capacity = held.saturating_add(n);
            } else if st.capacity >= max_size {
                // `_update_in_place`: trimmed to max_size once, then written in place.
                if st.capacity > max_size {
                    growth_tokens = st.capacity;
                }
                st.capacity = max_size;
            } else if st.offset >= st.capacity {
                let added = STEP.min(max_size.saturating_sub(st.offset));
                growth_tokens = st.capacity.saturating_add(added);
                st.capacity = st.capacity.saturating_add(added);
            }
        }
    }
    st.offset = st.offset.saturating_add(n);
    let keys = match w.cache {
        CacheKind::Rotating { .. } => st.capacity.min(st.offset),
        CacheKind::Growing { .. } => st.offset,
    };
    let quantised_now = st.quantised;
    Ok(Moment {
        kv: kv_bytes(w, st.capacity, st.quantised)?,
        growth: layer_bytes(w, growth_tokens, st.quantised)?,
        activations: activations(w, n, logits)?,
        scores: scores(w, n, keys, quantised_now)?,
        tokens: n,
        keys,
        logits: logits && logits_bytes(w, n)? > layer_activations(w, n)?,
        capacity: st.capacity,
    })
}

/// One layer's activations for `n` tokens, or (the last chunk of mlx@0.26) its
/// logits with the final hidden states when larger.
fn activations(w: &Walk, n: u64, logits: bool) -> Result<u64, EstimateError> {
    let layer = layer_activations(w, n)?;
    if logits {
        Ok(layer.max(logits_bytes(w, n)?))
    } else if n == 1 {
        // The last prompt token and each generated one: its logits and their fp32
        // log-sum-exp beside the layer's.
        Ok(layer.max(prod(&[w.shape.vocab, w.shape.dtype.saturating_add(4)])?))
    } else {
        Ok(layer)
    }
}

/// `n` tokens' logits `[n, vocab]` in the model's dtype and the final hidden states.
fn logits_bytes(w: &Walk, n: u64) -> Result<u64, EstimateError> {
    let s = &w.shape;
    prod(&[n, sum(&[s.vocab, s.hidden])?, s.dtype])
}

/// One layer: the residual and the normed hidden states, then the larger of the
/// attention's q, k, v and output and the MLP's live columns, in the model's dtype.
fn layer_activations(w: &Walk, n: u64) -> Result<u64, EstimateError> {
    let s = &w.shape;
    let d = s.head_dims[0].max(s.head_dims[1]);
    let attn = sum(&[prod(&[2, s.heads, d])?, prod(&[2, s.kv_heads, d])?])?;
    prod(&[n, sum(&[prod(&[2, s.hidden])?, attn.max(s.mlp_live)])?, s.dtype])
}

/// The unfused attention's scores and causal mask for `n` queries over `keys`, where
/// MLX takes that path (`use_fallback`), or the quantised cache's attention.
fn scores(w: &Walk, n: u64, keys: u64, quantised: bool) -> Result<u64, EstimateError> {
    let s = &w.shape;
    let mut worst = 0;
    for d in s.head_dims {
        let unfused = quantised
            || if n > 8 {
                let fused = matches!(d, 64 | 72 | 80 | 96 | 128 | 192 | 256);
                let split = w.nax && d == 256 && n >= 1024;
                !fused || (matches!(d, 192 | 256) && !split)
            } else {
                !matches!(d, 64 | 96 | 128 | 256)
            };
        if unfused {
            worst = worst.max(sum(&[prod(&[s.heads, n, keys, s.dtype])?, prod(&[n, keys])?])?);
        }
    }
    Ok(worst)
}
