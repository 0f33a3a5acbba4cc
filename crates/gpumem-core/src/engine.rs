//! Serving-engine budgets and the largest workload that fits (issue #10, items 3 and 4).
//!
//! An estimate says how many bytes a workload needs; a serving engine answers a
//! different question: it takes a share of the card, loads the weights, profiles a
//! forward pass and hands what is left to a KV-cache pool. [`budget`] follows each
//! engine's own rule (cited below with the engine's source file) to predict that pool:
//! bytes per device, tokens and concurrent sequences at `max-model-len`.
//!
//! The engines' rules are applied exactly, in integer bytes; what they *measure* at
//! start-up (the activation peak of their profiling forward, memory outside torch,
//! the CUDA context) cannot be known here and is an *assumed* line with its formula
//! and inputs — never presented as computed.
//!
//! [`largest_context`] and [`most_sequences`] answer "what is the largest workload
//! that fits on this card" by binary search over [`crate::estimate::estimate`]: the
//! per-device need never decreases when the context or the sequences grow, so the
//! boundary found is exact to the token (no closed form is guessed).
//!
//! The engine flags are the engine group of the one field table
//! ([`crate::fields::FIELDS`]), named like the engines' own flags
//! (`--gpu-memory-utilization`, `--max-model-len`, …); [`from_pairs`] parses them.

#![deny(clippy::arithmetic_side_effects)]

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::arch::MAX_DIM;
use crate::catalogue::{CATALOGUE, GpuCard};
use crate::error::EstimateError;
use crate::estimate::{Estimate, EstimateInput, Group, Kind, LineKey, Logits, TrainMode, estimate};
use crate::params::parse_count;
use crate::training::AttentionImpl;

/// Bytes in one MiB.
const MIB: u64 = 1 << 20;
/// A fraction is held in millionths: "0.9" → 900 000 (exact for up to six decimals).
const PPM: u64 = 1_000_000;

/// vLLM's default `--gpu-memory-utilization` (vllm/config/cache.py: `gpu_memory_utilization = 0.9`).
pub const VLLM_DEFAULT_UTILIZATION_PPM: u64 = 900_000;
/// vLLM's KV block size on CUDA (vllm/config/cache.py `block_size`, 16 when unset).
pub const VLLM_BLOCK_SIZE: u64 = 16;
/// Assumed `--max-num-batched-tokens` of `vllm serve` (vllm/engine/arg_utils.py
/// `get_batch_defaults`: 8192 for the OpenAI server on a card of ≥ 70 GiB other than
/// an A100, 2048 otherwise).
pub const VLLM_ASSUMED_BATCHED_TOKENS_LARGE: u64 = 8192;
/// The same default below 70 GiB.
pub const VLLM_ASSUMED_BATCHED_TOKENS_SMALL: u64 = 2048;
/// Assumed `--max-num-seqs` of `vllm serve` (same function: 1024 on ≥ 70 GiB non-A100, 256 otherwise).
pub const VLLM_ASSUMED_NUM_SEQS_LARGE: u64 = 1024;
/// The same default below 70 GiB.
pub const VLLM_ASSUMED_NUM_SEQS_SMALL: u64 = 256;
/// Assumed growth of memory outside torch during vLLM's profiling (NCCL, cuBLAS
/// workspaces): public `vllm serve` logs at tp = 1 print "non_torch_memory takes"
/// 0.04–0.26 GiB; more with tensor parallelism.
pub const VLLM_ASSUMED_NON_TORCH_MIB: u64 = 256;
/// Assumed CUDA context per device (driver + kernels loaded; commonly 0.3–0.6 GiB on
/// data-centre cards). SGLang, TGI and llama.cpp measure free memory *after* it exists.
pub const ASSUMED_CUDA_CONTEXT_MIB: u64 = 512;
/// Assumed SGLang `--mem-fraction-static` when not given: SGLang picks it at start
/// from the card's memory, tp and chunked-prefill size (python/sglang/srt/server_args.py);
/// 0.88 is a common pick for an 80 GB card at tp = 1.
pub const SGLANG_ASSUMED_MEM_FRACTION_PPM: u64 = 880_000;
/// SGLang's default chunked-prefill size on large cards (server_args.py), the
/// prefill its activations are assumed for.
pub const SGLANG_ASSUMED_PREFILL_TOKENS: u64 = 8192;
/// TGI's `TGI_WIGGLE_ROOM` default (server/text_generation_server/models/globals.py: "0.90").
pub const TGI_WIGGLE_ROOM_PPM: u64 = 900_000;
/// TGI's `--cuda-memory-fraction` default (`MEMORY_FRACTION`, 1.0).
pub const TGI_MEMORY_FRACTION_PPM: u64 = PPM;
/// TGI's `--max-batch-prefill-tokens` default (launcher: 4096), the warmup batch.
pub const TGI_ASSUMED_PREFILL_TOKENS: u64 = 4096;
/// TGI's paged-attention block size (globals.py `BLOCK_SIZE`; 16 with flashinfer/flashdecoding off).
pub const TGI_BLOCK_SIZE: u64 = 16;
/// llama.cpp's `--fit-target` default: 1024 MiB left free per device
/// (common/common.h `fit_params_target`).
pub const LLAMA_CPP_FIT_MARGIN_MIB: u64 = 1024;
/// llama.cpp's default physical batch (`-ub`, 512): its compute buffer is sized for it.
pub const LLAMA_CPP_UBATCH: u64 = 512;

/// A serving engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Engine {
    /// vLLM (V1 engine).
    #[serde(rename = "vllm")]
    Vllm,
    /// SGLang.
    #[serde(rename = "sglang")]
    Sglang,
    /// Hugging Face text-generation-inference.
    #[serde(rename = "tgi")]
    Tgi,
    /// llama.cpp (`llama-server`).
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    /// Hugging Face transformers `generate` (dynamic cache).
    #[serde(rename = "transformers")]
    Transformers,
}

impl Engine {
    /// The name on the command line and in the URL.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
            Engine::Tgi => "tgi",
            Engine::LlamaCpp => "llama.cpp",
            Engine::Transformers => "transformers",
        }
    }

    /// Parses an engine name (case-insensitive; `llamacpp` and `llama-cpp` too).
    pub fn parse(text: &str) -> Result<Engine, EstimateError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "vllm" => Ok(Engine::Vllm),
            "sglang" => Ok(Engine::Sglang),
            "tgi" | "text-generation-inference" => Ok(Engine::Tgi),
            "llama.cpp" | "llamacpp" | "llama-cpp" => Ok(Engine::LlamaCpp),
            "transformers" | "hf" => Ok(Engine::Transformers),
            _ => Err(EstimateError::invalid(
                "engine",
                format!(
                    "{text:?} is not an engine; use vllm, sglang, tgi, llama.cpp or transformers"
                ),
            )),
        }
    }
}

/// The engine's keys (the fields of [`crate::fields::FIELDS`] in the engine group:
/// the flags without dashes, also the page's URL keys), in table order.
pub fn engine_keys() -> impl Iterator<Item = &'static str> + Clone {
    crate::fields::FIELDS
        .iter()
        .filter(|f| f.is_engine())
        .map(|f| f.key)
}

/// The engine flags as parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineParams {
    /// The engine, if one was named.
    pub engine: Option<Engine>,
    /// The card (a catalogue entry, or a typed capacity).
    #[serde(skip)]
    pub card: Option<GpuCard>,
    /// `--gpu-memory-utilization` in millionths.
    pub gpu_memory_utilization_ppm: Option<u64>,
    /// `--max-model-len`.
    pub max_model_len: Option<u64>,
    /// `--max-num-seqs`.
    pub max_num_seqs: Option<u64>,
    /// `--max-num-batched-tokens`.
    pub max_num_batched_tokens: Option<u64>,
    /// `--mem-fraction-static` in millionths.
    pub mem_fraction_static_ppm: Option<u64>,
}

impl EngineParams {
    /// Whether any engine key was given.
    pub fn is_empty(&self) -> bool {
        *self == EngineParams::default()
    }
}

/// Whether `key` is one of the engine's keys ([`engine_keys`]).
pub fn is_engine_key(key: &str) -> bool {
    crate::fields::field(key).is_some_and(|f| f.is_engine())
}

/// Looks a card up as people type it ([`crate::catalogue::resolve`]: id, name, short
/// form or capacity); `None` when it names no card or several.
pub fn find_card(text: &str) -> Option<GpuCard> {
    crate::catalogue::resolve(text).ok()
}

/// Parses a decimal fraction in (0, 1] such as "0.9" into millionths, exactly.
pub fn parse_fraction(field: &'static str, text: &str) -> Result<u64, EstimateError> {
    let t = text.trim();
    let bad = || {
        EstimateError::invalid(
            field,
            format!("{text:?} is not a fraction in (0, 1] with at most 6 decimals, e.g. 0.9"),
        )
    };
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if (int.is_empty() && frac.is_empty())
        || frac.len() > 6
        || !int.chars().all(|c| c.is_ascii_digit())
        || !frac.chars().all(|c| c.is_ascii_digit())
        || int.len() > 1
    {
        return Err(bad());
    }
    let whole: u64 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| bad())?
    };
    let mut digits: String = frac.to_string();
    while digits.len() < 6 {
        digits.push('0');
    }
    let part: u64 = digits.parse().map_err(|_| bad())?;
    let ppm = whole
        .checked_mul(PPM)
        .and_then(|w| w.checked_add(part))
        .ok_or_else(bad)?;
    if ppm == 0 || ppm > PPM {
        return Err(bad());
    }
    Ok(ppm)
}

/// Reads the engine `key=value` pairs; one error per bad field, valid fields kept.
/// Keys that are not engine keys are an error too (the caller routes them).
pub fn from_pairs<'a, I>(pairs: I) -> (EngineParams, Vec<EstimateError>)
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let mut p = EngineParams::default();
    let mut errors = Vec::new();
    for (key, value) in pairs {
        let r: Result<(), EstimateError> = match key {
            "engine" => Engine::parse(value).map(|e| p.engine = Some(e)),
            "card" => crate::catalogue::resolve(value)
                .map(|c| p.card = Some(c))
                .map_err(|why| EstimateError::invalid("card", why)),
            "gpu-memory-utilization" => parse_fraction("gpu-memory-utilization", value)
                .map(|v| p.gpu_memory_utilization_ppm = Some(v)),
            "mem-fraction-static" => parse_fraction("mem-fraction-static", value)
                .map(|v| p.mem_fraction_static_ppm = Some(v)),
            "max-model-len" => positive("max-model-len", value).map(|v| p.max_model_len = Some(v)),
            "max-num-seqs" => positive("max-num-seqs", value).map(|v| p.max_num_seqs = Some(v)),
            "max-num-batched-tokens" => positive("max-num-batched-tokens", value)
                .map(|v| p.max_num_batched_tokens = Some(v)),
            other => Err(EstimateError::invalid(
                "input",
                format!("unknown engine key {other:?}"),
            )),
        };
        if let Err(e) = r {
            errors.push(e);
        }
    }
    (p, errors)
}

fn positive(field: &'static str, text: &str) -> Result<u64, EstimateError> {
    let v = parse_count(field, text)?;
    if v == 0 {
        return Err(EstimateError::invalid(field, "must be at least 1"));
    }
    if v > MAX_DIM {
        return Err(EstimateError::invalid(field, "absurdly large"));
    }
    Ok(v)
}

/// One line an engine's rule adds or subtracts, per device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EngineLine {
    /// Stable key ("budget", "weights", "activation_peak", …).
    pub key: Cow<'static, str>,
    /// Human label.
    pub label: Cow<'static, str>,
    /// Bytes per device.
    pub bytes: u64,
    /// Computed (from the inputs and the engine's rule) or assumed.
    pub kind: Kind,
    /// The formula, in words.
    pub formula: String,
    /// The formula's inputs.
    pub inputs: BTreeMap<Cow<'static, str>, String>,
    /// The engine source file the rule comes from.
    pub source: Cow<'static, str>,
}

/// What an engine leaves for the KV cache on one card (per device of the tp × pp group).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EngineBudget {
    /// The engine.
    pub engine: Engine,
    /// Catalogue id of the card.
    pub card: String,
    /// Card name.
    pub card_name: String,
    /// The card's capacity (bytes) the rule starts from.
    pub capacity_bytes: u64,
    /// "reported" or "label".
    pub capacity_kind: String,
    /// The first line (the engine's share of the card), then every line subtracted.
    pub lines: Vec<EngineLine>,
    /// Bytes left for the KV cache on the most loaded device: the share minus the
    /// subtracted lines; negative when the engine refuses to start (vLLM: "No
    /// available memory for the cache blocks").
    pub kv_capacity_bytes: i64,
    /// KV bytes one token takes on that device (every layer, K and V).
    pub kv_bytes_per_token: u64,
    /// The engine's allocation unit in tokens (vLLM and TGI blocks; 1 otherwise).
    pub block_size: u64,
    /// Tokens the KV pool holds (whole blocks), 0 when nothing fits.
    pub kv_capacity_tokens: u64,
    /// The sequence length served.
    pub max_model_len: u64,
    /// Sequences of `max_model_len` tokens the pool holds at once.
    pub max_sequences: u64,
    /// Whether one sequence of `max_model_len` tokens fits (vLLM refuses to start otherwise).
    pub fits_one_sequence: bool,
    /// Hypotheses the figure rests on.
    pub assumptions: Vec<String>,
    /// Soft problems.
    pub warnings: Vec<String>,
}

fn line(
    key: &'static str,
    label: impl Into<Cow<'static, str>>,
    bytes: u64,
    kind: Kind,
    formula: String,
    inputs: &[(&'static str, String)],
    source: &'static str,
) -> EngineLine {
    // One insert at a time: a `collect` into the map would sort, and the sort routine
    // costs the page ~1.5 KB of wasm (gzip) for a handful of entries.
    let mut map = BTreeMap::new();
    for (k, v) in inputs {
        map.insert(Cow::Borrowed(*k), v.clone());
    }
    EngineLine {
        key: Cow::Borrowed(key),
        label: label.into(),
        bytes,
        kind,
        formula,
        inputs: map,
        source: Cow::Borrowed(source),
    }
}

/// `bytes × ppm / 10^6`, rounded down (the engines truncate to whole bytes).
fn times_fraction(bytes: u64, ppm: u64) -> Result<u64, EstimateError> {
    let v = u128::from(bytes)
        .checked_mul(u128::from(ppm))
        .and_then(|x| x.checked_div(u128::from(PPM)))
        .ok_or(EstimateError::Overflow {
            what: "engine budget",
        })?;
    u64::try_from(v).map_err(|_| EstimateError::Overflow {
        what: "engine budget",
    })
}

/// A fraction in millionths as a decimal ("0.9").
pub fn fraction_text(ppm: u64) -> String {
    let whole = ppm.checked_div(PPM).unwrap_or(0);
    let part = ppm.checked_rem(PPM).unwrap_or(0);
    if part == 0 {
        return whole.to_string();
    }
    let s = format!("{whole}.{part:06}");
    s.trim_end_matches('0').to_string()
}

/// Sum of the per-device bytes of one group's counted lines.
fn group_device_bytes(est: &Estimate, group: Group) -> Result<u64, EstimateError> {
    est.lines
        .iter()
        .filter(|l| l.in_total && l.group == group)
        .try_fold(0u64, |acc, l| acc.checked_add(l.device_bytes))
        .ok_or(EstimateError::Overflow {
            what: "engine lines",
        })
}

/// Per-device KV bytes of one token of one sequence, from the estimator itself.
fn kv_bytes_per_token(input: &EstimateInput) -> Result<u64, EstimateError> {
    let no_shape = || {
        EstimateError::invalid(
            "engine",
            "the KV cache's shape is unknown: give the architecture (a preset, a config.json, --model) or layers, kv-heads and head-dim",
        )
    };
    if input.arch.is_none() && input.kv_only.is_none() {
        return Err(no_shape());
    }
    let mut one = input.clone();
    one.context = Some(1);
    one.generate = 0;
    one.sequences = 1;
    one.static_cache = None;
    one.train = TrainMode::None;
    let est = estimate(&one)?;
    let bytes = est
        .lines
        .iter()
        .find(|l| l.key == LineKey::KvCache)
        .map(|l| l.device_bytes)
        .unwrap_or(0);
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

/// The estimator's assumed activation peak of one prefill forward of `tokens`
/// tokens (flash attention, last-position logits), per device, with its inputs.
fn forward_peak(input: &EstimateInput, tokens: u64) -> Result<u64, EstimateError> {
    let mut f = input.clone();
    f.context = Some(tokens);
    f.generate = 0;
    f.sequences = 1;
    f.static_cache = None;
    f.train = TrainMode::None;
    f.attention = AttentionImpl::Flash;
    f.logits = Logits::Last;
    f.cuda_context_mib = None;
    let est = estimate(&f)?;
    group_device_bytes(&est, Group::Transient)
}

fn mib(n: u64) -> u64 {
    n.saturating_mul(MIB)
}

/// Predicts the KV-cache pool `params.engine` leaves on `params.card` for the
/// workload `input` (whose estimate is `est`).
pub fn budget(
    input: &EstimateInput,
    est: &Estimate,
    params: &EngineParams,
) -> Result<EngineBudget, EstimateError> {
    let Some(engine) = params.engine else {
        return Err(EstimateError::invalid("engine", "name an engine"));
    };
    let Some(card) = params.card else {
        return Err(EstimateError::invalid(
            "card",
            "an engine budget needs a card (e.g. --card h100-sxm-80gb)",
        ));
    };
    let (capacity, kind) = card.capacity();
    let capacity_kind = kind.as_str();
    let max_model_len = match params.max_model_len {
        Some(m) => m,
        None => match input.context {
            Some(c) => c
                .checked_add(input.generate)
                .ok_or(EstimateError::Overflow {
                    what: "max-model-len",
                })?,
            None => input.max_position.ok_or_else(|| {
                EstimateError::invalid(
                    "max-model-len",
                    "give max-model-len (or context, or a model whose max-position is known)",
                )
            })?,
        },
    };
    let per_token = kv_bytes_per_token(input)?;
    let weights = group_device_bytes(est, Group::Weights)?;
    let mut assumptions: Vec<String> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    if input.sliding_window.is_some() {
        assumptions.push("sliding-window layers are counted at the full length per token (the engines' hybrid allocators may keep less for them)".into());
    }
    if weights == 0 {
        warnings.push("no weights counted (only the KV cache's shape was given): the KV capacity is an upper bound".into());
    }
    if input.state_layers > 0 {
        warnings.push("recurrent-state layers are not counted in the engine budget".into());
    }
    if input.train != TrainMode::None {
        warnings.push("an engine budget is for inference; the training mode is ignored".into());
    }
    let cap_text = format!("{capacity} B ({capacity_kind})");
    // vllm/engine/arg_utils.py `get_batch_defaults`: the larger defaults on ≥ 70 GiB
    // cards except A100s ("Setting large max_num_batched_tokens for A100 reduces throughput").
    let large = capacity >= 70u64.saturating_mul(1 << 30)
        && !card.name.to_ascii_lowercase().contains("a100");
    let weights_line = line(
        "weights",
        "Weights on this device",
        weights,
        Kind::Computed,
        "the estimate's weight lines, most loaded device".into(),
        &[("tp", input.tp.to_string()), ("pp", input.pp.to_string())],
        "the estimator (gpumem-core estimate.rs)",
    );
    let mut lines: Vec<EngineLine> = Vec::new();
    let mut block_size = 1u64;
    match engine {
        Engine::Vllm => {
            // vllm/v1/worker/gpu_worker.py `init_device`: requested_memory =
            // total_memory × gpu_memory_utilization; `determine_available_memory`:
            // available KV = requested_memory − (weights + torch peak increase of
            // `gpu_model_runner.profile_run` + non-torch increase).
            let util = params
                .gpu_memory_utilization_ppm
                .unwrap_or(VLLM_DEFAULT_UTILIZATION_PPM);
            let requested = times_fraction(capacity, util)?;
            lines.push(line(
                "budget",
                "vLLM's share: total × gpu_memory_utilization",
                requested,
                Kind::Computed,
                "total_memory × gpu_memory_utilization, truncated to bytes".into(),
                &[
                    ("total", cap_text.clone()),
                    ("gpu-memory-utilization", fraction_text(util)),
                ],
                "vllm/v1/worker/gpu_worker.py (init_device: requested_memory)",
            ));
            lines.push(weights_line);
            // profile_run: a dummy forward of max_num_batched_tokens tokens spread over
            // up to max_num_seqs sequences, then a dummy sampler run over max_num_seqs rows.
            let batched = params.max_num_batched_tokens.unwrap_or(if large {
                VLLM_ASSUMED_BATCHED_TOKENS_LARGE
            } else {
                VLLM_ASSUMED_BATCHED_TOKENS_SMALL
            });
            let seqs = params.max_num_seqs.unwrap_or(if large {
                VLLM_ASSUMED_NUM_SEQS_LARGE
            } else {
                VLLM_ASSUMED_NUM_SEQS_SMALL
            });
            if params.max_num_batched_tokens.is_none() || params.max_num_seqs.is_none() {
                assumptions.push(format!("vllm serve defaults assumed for {} card: max-num-batched-tokens {batched}, max-num-seqs {seqs} (vllm/engine/arg_utils.py get_batch_defaults)", if large { "a ≥ 70 GiB non-A100" } else { "an A100 or a < 70 GiB" }));
            }
            let peak = forward_peak(input, batched)?;
            lines.push(line(
                "activation_peak",
                "Activation peak of the profiling forward (assumed)",
                peak,
                Kind::Assumed,
                "the estimator's prefill intermediates + last-position logits for one forward of max-num-batched-tokens tokens (flash attention)".into(),
                &[("max-num-batched-tokens", batched.to_string())],
                "vllm/v1/worker/gpu_model_runner.py (profile_run → _dummy_run)",
            ));
            let vocab = input.arch.map(|a| a.vocab).unwrap_or(0);
            let sampler = u64::try_from(
                u128::from(seqs)
                    .checked_mul(u128::from(vocab))
                    .and_then(|x| x.checked_mul(4))
                    .and_then(|x| x.checked_div(u128::from(input.tp.max(1))))
                    .ok_or(EstimateError::Overflow { what: "sampler" })?,
            )
            .map_err(|_| EstimateError::Overflow { what: "sampler" })?;
            lines.push(line(
                "sampler",
                "Sampler logits of the profiling run (assumed)",
                sampler,
                Kind::Assumed,
                "max-num-seqs × vocab × 4 B (fp32 logits) ÷ tp".into(),
                &[
                    ("max-num-seqs", seqs.to_string()),
                    ("vocab", vocab.to_string()),
                ],
                "vllm/v1/worker/gpu_model_runner.py (profile_run → _dummy_sampler_run)",
            ));
            lines.push(line(
                "non_torch",
                "Memory outside torch grown while profiling (assumed)",
                mib(VLLM_ASSUMED_NON_TORCH_MIB),
                Kind::Assumed,
                format!("{VLLM_ASSUMED_NON_TORCH_MIB} MiB (NCCL, cuBLAS workspaces; public tp = 1 logs show 0.04–0.26 GiB)"),
                &[("non-torch-mib", VLLM_ASSUMED_NON_TORCH_MIB.to_string())],
                "vllm/v1/worker/gpu_worker.py (determine_available_memory: non_torch_increase)",
            ));
            // Recent gpu_worker.py versions can also subtract a profiled CUDA-graph
            // estimate (`cudagraph_memory_estimate_applied`); counted as 0 here.
            assumptions.push("CUDA graphs: counted as 0 — vLLM captures them after the KV cache is sized, out of the 1 − gpu_memory_utilization margin; recent versions may instead subtract a profiled estimate (gpu_worker.py cudagraph_memory_estimate_applied), which lowers the KV capacity by that much".into());
            block_size = VLLM_BLOCK_SIZE;
        }
        Engine::Sglang => {
            // python/sglang/srt/model_executor/model_runner.py `profile_max_num_token`:
            // rest_memory = available_gpu_memory (free after loading) −
            // total_gpu_memory × (1 − mem_fraction_static); max tokens = rest // cell_size.
            let mfs = params
                .mem_fraction_static_ppm
                .unwrap_or(SGLANG_ASSUMED_MEM_FRACTION_PPM);
            if params.mem_fraction_static_ppm.is_none() {
                assumptions.push(format!("mem-fraction-static {} assumed (SGLang picks it at start from the card, tp and chunked-prefill size: python/sglang/srt/server_args.py)", fraction_text(mfs)));
            }
            lines.push(line(
                "budget",
                "Card total",
                capacity,
                Kind::Computed,
                "total_gpu_memory".into(),
                &[("total", cap_text.clone())],
                "python/sglang/srt/model_executor/model_runner.py (profile_max_num_token)",
            ));
            lines.push(line(
                "cuda_context",
                "CUDA context (assumed; not free after loading)",
                mib(ASSUMED_CUDA_CONTEXT_MIB),
                Kind::Assumed,
                format!("{ASSUMED_CUDA_CONTEXT_MIB} MiB"),
                &[("cuda-context-mib", ASSUMED_CUDA_CONTEXT_MIB.to_string())],
                "python/sglang/srt/model_executor/model_runner.py (available_gpu_memory after load)",
            ));
            lines.push(weights_line);
            let reserved = times_fraction(capacity, PPM.saturating_sub(mfs))?;
            lines.push(line(
                "reserved",
                "Kept for activations and CUDA graphs: total × (1 − mem_fraction_static)",
                reserved,
                Kind::Computed,
                "total_gpu_memory × (1 − mem_fraction_static)".into(),
                &[
                    ("total", cap_text.clone()),
                    ("mem-fraction-static", fraction_text(mfs)),
                ],
                "python/sglang/srt/model_executor/model_runner.py (profile_max_num_token: rest_memory)",
            ));
            assumptions.push(format!("SGLang's activations (chunked prefill of {SGLANG_ASSUMED_PREFILL_TOKENS} tokens) and CUDA graphs are assumed to fit in the reserved share"));
        }
        Engine::Tgi => {
            // server/text_generation_server/models/flash_causal_lm.py `warmup`: after a
            // prefill of max_batch_prefill_tokens, free = get_free_memory(device,
            // MEMORY_FRACTION × TGI_WIGGLE_ROOM) = max(0, free − (1 − fraction) × total)
            // (utils/import_utils.py); num_blocks = free // block bytes.
            let batched = params
                .max_num_batched_tokens
                .unwrap_or(TGI_ASSUMED_PREFILL_TOKENS);
            lines.push(line(
                "budget",
                "Card total",
                capacity,
                Kind::Computed,
                "total memory (torch.cuda.mem_get_info)".into(),
                &[("total", cap_text.clone())],
                "server/text_generation_server/models/flash_causal_lm.py (warmup)",
            ));
            lines.push(line(
                "cuda_context",
                "CUDA context (assumed; not free at warmup)",
                mib(ASSUMED_CUDA_CONTEXT_MIB),
                Kind::Assumed,
                format!("{ASSUMED_CUDA_CONTEXT_MIB} MiB"),
                &[("cuda-context-mib", ASSUMED_CUDA_CONTEXT_MIB.to_string())],
                "server/text_generation_server/models/flash_causal_lm.py (warmup: get_free_memory)",
            ));
            lines.push(weights_line);
            let peak = forward_peak(input, batched)?;
            lines.push(line(
                "activation_peak",
                "Activations of the warmup prefill, kept by torch's allocator (assumed)",
                peak,
                Kind::Assumed,
                "the estimator's prefill intermediates + logits for one forward of max-batch-prefill-tokens tokens".into(),
                &[("max-batch-prefill-tokens", batched.to_string())],
                "server/text_generation_server/models/flash_causal_lm.py (warmup)",
            ));
            let fraction = times_fraction(TGI_MEMORY_FRACTION_PPM, TGI_WIGGLE_ROOM_PPM)?;
            let kept = times_fraction(capacity, PPM.saturating_sub(fraction))?;
            lines.push(line(
                "wiggle_room",
                "Left free: total × (1 − MEMORY_FRACTION × TGI_WIGGLE_ROOM)",
                kept,
                Kind::Computed,
                "total × (1 − cuda-memory-fraction × TGI_WIGGLE_ROOM)".into(),
                &[
                    ("cuda-memory-fraction", fraction_text(TGI_MEMORY_FRACTION_PPM)),
                    ("TGI_WIGGLE_ROOM", fraction_text(TGI_WIGGLE_ROOM_PPM)),
                ],
                "server/text_generation_server/models/globals.py (TGI_WIGGLE_ROOM) and flash_causal_lm.py (warmup)",
            ));
            block_size = TGI_BLOCK_SIZE;
        }
        Engine::LlamaCpp => {
            // common/common.h `fit_params_target` (1024 MiB per device) and the --fit
            // logic (common/fit): n_ctx is lowered until model + context + compute
            // buffers leave the margin free; the KV cache is allocated for n_ctx
            // cells (src/llama-context.cpp, src/llama-kv-cache.cpp).
            let ubatch = params.max_num_batched_tokens.unwrap_or(LLAMA_CPP_UBATCH);
            lines.push(line(
                "budget",
                "Card total",
                capacity,
                Kind::Computed,
                "device total".into(),
                &[("total", cap_text.clone())],
                "common/fit.cpp (llama_params_fit: free memory per device)",
            ));
            lines.push(line(
                "cuda_context",
                "CUDA context (assumed)",
                mib(ASSUMED_CUDA_CONTEXT_MIB),
                Kind::Assumed,
                format!("{ASSUMED_CUDA_CONTEXT_MIB} MiB"),
                &[("cuda-context-mib", ASSUMED_CUDA_CONTEXT_MIB.to_string())],
                "common/fit.cpp (free memory is read after the backend starts)",
            ));
            lines.push(weights_line);
            let peak = forward_peak(input, ubatch)?;
            lines.push(line(
                "compute_buffer",
                "Compute buffer for one ubatch (assumed)",
                peak,
                Kind::Assumed,
                "the estimator's prefill intermediates + logits for one forward of ubatch tokens"
                    .into(),
                &[("ubatch", ubatch.to_string())],
                "src/llama-context.cpp (graph_reserve: compute buffers sized for n_ubatch)",
            ));
            lines.push(line(
                "fit_margin",
                "--fit margin left free",
                mib(LLAMA_CPP_FIT_MARGIN_MIB),
                Kind::Assumed,
                format!("{LLAMA_CPP_FIT_MARGIN_MIB} MiB (--fit-target default)"),
                &[("fit-target-mib", LLAMA_CPP_FIT_MARGIN_MIB.to_string())],
                "common/common.h (fit_params_target)",
            ));
        }
        Engine::Transformers => {
            // transformers' DynamicCache (src/transformers/cache_utils.py) grows with
            // every generated token: there is no pool, the KV room is what the rest of
            // the estimate leaves on the card.
            lines.push(line(
                "budget",
                "Card total",
                capacity,
                Kind::Computed,
                "device total".into(),
                &[("total", cap_text.clone())],
                "src/transformers/cache_utils.py (DynamicCache: no pre-allocated pool)",
            ));
            for l in est
                .lines
                .iter()
                .filter(|l| l.in_total && l.group != Group::KvCache)
            {
                lines.push(EngineLine {
                    key: Cow::Borrowed(l.key.as_str()),
                    label: l.label.clone(),
                    bytes: l.device_bytes,
                    kind: l.kind,
                    formula: l.formula.clone(),
                    inputs: l.inputs.clone(),
                    source: Cow::Borrowed("the estimator (gpumem-core estimate.rs)"),
                });
            }
        }
    }
    let (first, rest) = lines
        .split_first()
        .ok_or(EstimateError::invalid("engine", "no budget"))?;
    let subtracted = rest
        .iter()
        .try_fold(0u128, |acc, l| acc.checked_add(u128::from(l.bytes)))
        .ok_or(EstimateError::Overflow {
            what: "engine lines",
        })?;
    let kv = i128::from(first.bytes)
        .checked_sub(
            i128::try_from(subtracted).map_err(|_| EstimateError::Overflow {
                what: "engine lines",
            })?,
        )
        .ok_or(EstimateError::Overflow {
            what: "engine budget",
        })?;
    let kv_capacity_bytes = i64::try_from(kv).map_err(|_| EstimateError::Overflow {
        what: "engine budget",
    })?;
    let usable = u64::try_from(kv).unwrap_or(0);
    let block_bytes = per_token
        .checked_mul(block_size)
        .ok_or(EstimateError::Overflow { what: "KV block" })?;
    // vllm/v1/core/kv_cache_utils.py: page size per layer = block_size × 2 × kv_heads ×
    // head_size × dtype bytes; num_blocks = available // (page size × layers).
    let blocks = usable.checked_div(block_bytes).unwrap_or(0);
    let kv_capacity_tokens = blocks
        .checked_mul(block_size)
        .ok_or(EstimateError::Overflow { what: "KV tokens" })?;
    // vLLM's "Maximum concurrency": num_blocks ÷ blocks per request (cdiv(max_model_len, block_size)).
    let per_seq_blocks = max_model_len.div_ceil(block_size);
    let max_sequences = blocks.checked_div(per_seq_blocks).unwrap_or(0);
    let fits_one_sequence = max_sequences >= 1;
    if kv_capacity_bytes <= 0 {
        warnings.push(match engine {
            Engine::Vllm => "No available memory for the cache blocks: vLLM refuses to start (raise gpu-memory-utilization, use a larger card, tp, or quantised weights)".into(),
            Engine::Sglang => "Not enough memory: SGLang refuses to start (raise mem-fraction-static)".into(),
            _ => "nothing is left for the KV cache on this card".into(),
        });
    } else if !fits_one_sequence {
        warnings.push(format!("one sequence of {max_model_len} tokens does not fit the KV pool ({kv_capacity_tokens} tokens): the engine refuses this max-model-len"));
    }
    let scheduler_cap = params.max_num_seqs.unwrap_or(if large {
        VLLM_ASSUMED_NUM_SEQS_LARGE
    } else {
        VLLM_ASSUMED_NUM_SEQS_SMALL
    });
    if engine == Engine::Vllm && max_sequences > scheduler_cap {
        let s = scheduler_cap;
        warnings.push(format!(
            "the scheduler runs at most max-num-seqs = {s} sequences at once, fewer than the {max_sequences} the KV pool holds"
        ));
    }
    Ok(EngineBudget {
        engine,
        card: card.id.to_string(),
        card_name: card.name.to_string(),
        capacity_bytes: capacity,
        capacity_kind: capacity_kind.to_string(),
        lines,
        kv_capacity_bytes,
        kv_bytes_per_token: per_token,
        block_size,
        kv_capacity_tokens,
        max_model_len,
        max_sequences,
        fits_one_sequence,
        assumptions,
        warnings,
    })
}

/// One card's row of the engine fit table: the KV pool the engine leaves there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CardKv {
    /// Catalogue id.
    pub id: String,
    /// Card name.
    pub name: String,
    /// [`EngineBudget::kv_capacity_bytes`] on this card (negative: the engine refuses to start).
    pub kv_capacity_bytes: i64,
    /// [`EngineBudget::kv_capacity_tokens`].
    pub kv_capacity_tokens: u64,
    /// [`EngineBudget::max_sequences`].
    pub max_sequences: u64,
}

/// The engine's budget on every catalogue card, in catalogue order (the fit table's
/// engine columns); `params.card` is ignored.
pub fn budget_per_card(
    input: &EstimateInput,
    est: &Estimate,
    params: &EngineParams,
) -> Result<Vec<CardKv>, EstimateError> {
    CATALOGUE
        .iter()
        .map(|card| {
            let p = EngineParams {
                card: Some(*card),
                ..params.clone()
            };
            budget(input, est, &p).map(|b| CardKv {
                id: b.card,
                name: b.card_name,
                kv_capacity_bytes: b.kv_capacity_bytes,
                kv_capacity_tokens: b.kv_capacity_tokens,
                max_sequences: b.max_sequences,
            })
        })
        .collect()
}

/// The largest workload that fits one card (the estimate's per-device need ≤ capacity).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Largest {
    /// Catalogue id.
    pub card: String,
    /// Capacity compared against.
    pub capacity_bytes: u64,
    /// Largest prompt tokens per sequence (`context`) at the given sequences; `None`
    /// when not even one token fits.
    pub largest_context: Option<u64>,
    /// The sequences it was searched at.
    pub at_sequences: u64,
    /// Most sequences at the given context; `None` when not even one fits or no
    /// context was given.
    pub most_sequences: Option<u64>,
    /// The context it was searched at.
    pub at_context: Option<u64>,
}

/// Whether `input` fits `capacity` per device; an input the estimator refuses
/// (overflow, absurd size) does not fit.
fn fits(input: &EstimateInput, capacity: u64) -> bool {
    estimate(input).is_ok_and(|e| e.per_device_bytes <= capacity)
}

/// The largest `v` in `[1, MAX_DIM]` with `fits(set(v))`, assuming monotonicity;
/// `None` when 1 does not fit.
fn search(capacity: u64, make: impl Fn(u64) -> EstimateInput) -> Option<u64> {
    if !fits(&make(1), capacity) {
        return None;
    }
    let (mut lo, mut hi) = (1u64, MAX_DIM);
    if fits(&make(hi), capacity) {
        return Some(hi);
    }
    // Invariant: lo fits, hi does not.
    while hi.saturating_sub(lo) > 1 {
        let mid = lo.saturating_add(hi.saturating_sub(lo).checked_div(2).unwrap_or(0));
        if fits(&make(mid), capacity) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// The largest context (prompt tokens per sequence, `generate` kept) that fits
/// `card` at `input.sequences`.
pub fn largest_context(input: &EstimateInput, card: &GpuCard) -> Option<u64> {
    let (capacity, _) = card.capacity();
    search(capacity, |c| {
        let mut i = input.clone();
        i.context = Some(c);
        i
    })
}

/// The most sequences that fit `card` at `input.context` (`None` without a context).
pub fn most_sequences(input: &EstimateInput, card: &GpuCard) -> Option<u64> {
    input.context?;
    let (capacity, _) = card.capacity();
    search(capacity, |s| {
        let mut i = input.clone();
        i.sequences = s;
        i
    })
}

/// Both searches for one card.
pub fn largest(input: &EstimateInput, card: &GpuCard) -> Largest {
    Largest {
        card: card.id.to_string(),
        capacity_bytes: card.capacity().0,
        largest_context: largest_context(input, card),
        at_sequences: input.sequences,
        most_sequences: most_sequences(input, card),
        at_context: input.context,
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::presets;

    /// Llama-3.1-8B from its preset, bf16, plus extra pairs.
    fn llama_8b(extra: &[(&str, &str)]) -> EstimateInput {
        let preset = presets::find("llama-3.1-8b").expect("preset");
        let pairs = preset.pairs.iter().copied().chain(extra.iter().copied());
        let (input, errors) = crate::params::from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        input
    }

    fn engine(pairs: &[(&str, &str)]) -> EngineParams {
        let (p, errors) = from_pairs(pairs.iter().copied());
        assert!(errors.is_empty(), "{errors:?}");
        p
    }

    fn run(input: &EstimateInput, pairs: &[(&str, &str)]) -> EngineBudget {
        let est = estimate(input).expect("estimate");
        budget(input, &est, &engine(pairs)).expect("budget")
    }

    fn bytes_of(b: &EngineBudget, key: &str) -> u64 {
        b.lines
            .iter()
            .find(|l| l.key == key)
            .unwrap_or_else(|| panic!("no line {key}"))
            .bytes
    }

    #[test]
    fn fractions_parse_exactly_into_millionths() {
        assert_eq!(parse_fraction("f", "0.9"), Ok(900_000));
        assert_eq!(parse_fraction("f", ".9"), Ok(900_000));
        assert_eq!(parse_fraction("f", "0.123456"), Ok(123_456));
        assert_eq!(parse_fraction("f", "1"), Ok(1_000_000));
        assert_eq!(parse_fraction("f", "1.0"), Ok(1_000_000));
        for bad in [
            "0",
            "0.0",
            "1.5",
            "2",
            "0.1234567",
            "-0.5",
            "abc",
            "",
            ".",
            "0.9x",
            "10",
        ] {
            assert!(parse_fraction("f", bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(fraction_text(900_000), "0.9");
        assert_eq!(fraction_text(1_000_000), "1");
        assert_eq!(fraction_text(123_456), "0.123456");
    }

    #[test]
    fn engine_pairs_collect_one_error_per_bad_field() {
        let (p, errors) = from_pairs([
            ("engine", "vllm"),
            ("card", "H100-SXM-80GB"),
            ("gpu-memory-utilization", "1.2"),
            ("max-model-len", "0"),
            ("max-num-seqs", "64"),
            ("card2", "x"),
        ]);
        assert_eq!(p.engine, Some(Engine::Vllm));
        assert_eq!(p.card.map(|c| c.id), Some("h100-sxm-80gb"));
        assert_eq!(p.max_num_seqs, Some(64));
        assert_eq!(p.gpu_memory_utilization_ppm, None);
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            from_pairs([("engine", "ollama")]).1[0]
                .to_string()
                .contains("not an engine")
        );
        assert!(
            from_pairs([("card", "h100")]).1[0]
                .to_string()
                .starts_with("card:")
        );
        // By name as well as by id.
        assert_eq!(
            find_card("nvidia h100 sxm 80gb").map(|c| c.id),
            Some("h100-sxm-80gb")
        );
        for k in engine_keys() {
            assert!(is_engine_key(k));
            assert!(
                !crate::params::keys().any(|p| p == k),
                "{k} collides with a params key"
            );
        }
    }

    /// The figure: Llama-3.1-8B, bf16, H100 SXM 80GB, vLLM at 0.9, max-model-len 16000.
    ///
    /// By hand:
    /// - capacity: nvidia-smi 81 559 MiB × 2^20 = 85 520 809 984 B;
    /// - vLLM's share: ⌊85 520 809 984 × 0.9⌋ = 76 968 728 985 B;
    /// - weights: 8 030 261 248 parameters × 2 B = 16 060 522 496 B;
    /// - activation peak (assumed), 8192 tokens: MLP 3 × 8192 × 14 336 × 2 B =
    ///   704 643 072, last-position logits 128 256 × 4 = 513 024, no score matrix
    ///   (flash): 705 156 096 B;
    /// - sampler (assumed): 1024 seqs × 128 256 × 4 B = 525 336 576 B;
    /// - non-torch (assumed): 256 MiB = 268 435 456 B;
    /// - KV = 76 968 728 985 − 16 060 522 496 − 705 156 096 − 525 336 576 − 268 435 456
    ///   = 59 409 278 361 B (55.33 GiB);
    /// - a token: 32 layers × 2 × 8 heads × 128 × 2 B = 131 072 B; a block of 16:
    ///   2 097 152 B; ⌊59 409 278 361 / 2 097 152⌋ = 28 328 blocks = 453 248 tokens;
    /// - 16 000 tokens = 1000 blocks: 28 sequences.
    #[test]
    fn vllm_llama_8b_on_h100_matches_the_hand_derivation() {
        let input = llama_8b(&[]);
        let b = run(
            &input,
            &[
                ("engine", "vllm"),
                ("card", "h100-sxm-80gb"),
                ("gpu-memory-utilization", "0.9"),
                ("max-model-len", "16000"),
            ],
        );
        assert_eq!(b.capacity_bytes, 85_520_809_984);
        assert_eq!(bytes_of(&b, "budget"), 76_968_728_985);
        assert_eq!(bytes_of(&b, "weights"), 16_060_522_496);
        assert_eq!(bytes_of(&b, "activation_peak"), 705_156_096);
        assert_eq!(bytes_of(&b, "sampler"), 525_336_576);
        assert_eq!(bytes_of(&b, "non_torch"), 268_435_456);
        assert_eq!(b.kv_capacity_bytes, 59_409_278_361);
        assert_eq!(b.kv_bytes_per_token, 131_072);
        assert_eq!(b.block_size, 16);
        assert_eq!(b.kv_capacity_tokens, 453_248);
        assert_eq!(b.max_sequences, 28);
        assert!(b.fits_one_sequence);
        // Every profiled quantity is an assumption, the rule's lines are computed.
        for l in &b.lines {
            let want = match l.key.as_ref() {
                "budget" | "weights" => Kind::Computed,
                _ => Kind::Assumed,
            };
            assert_eq!(l.kind, want, "{}", l.key);
            assert!(!l.source.is_empty());
        }
    }

    #[test]
    fn vllm_without_room_is_negative_like_vllm_refusing_to_start() {
        // ⌊85 520 809 984 × 0.2⌋ = 17 104 161 996 B < 16 060 522 496 + 705 156 096
        // + 525 336 576 + 268 435 456 = 17 559 450 624 B: −455 288 628 B.
        let b = run(
            &llama_8b(&[]),
            &[
                ("engine", "vllm"),
                ("card", "h100-sxm-80gb"),
                ("gpu-memory-utilization", "0.2"),
                ("max-model-len", "16000"),
            ],
        );
        assert_eq!(b.kv_capacity_bytes, -455_288_628);
        assert_eq!(b.kv_capacity_tokens, 0);
        assert_eq!(b.max_sequences, 0);
        assert!(!b.fits_one_sequence);
        assert!(b.warnings.iter().any(|w| w.contains("No available memory")));
    }

    /// SGLang at 0.88: 85 520 809 984 − 512 MiB context (536 870 912) − weights
    /// 16 060 522 496 − ⌊85 520 809 984 × 0.12⌋ = 10 262 497 198 → 58 660 919 378 B;
    /// ÷ 131 072 B a token = 447 547 tokens; ÷ 16 000 = 27 sequences.
    #[test]
    fn sglang_subtracts_total_times_one_minus_fraction() {
        let b = run(
            &llama_8b(&[]),
            &[
                ("engine", "sglang"),
                ("card", "h100-sxm-80gb"),
                ("mem-fraction-static", "0.88"),
                ("max-model-len", "16000"),
            ],
        );
        assert_eq!(bytes_of(&b, "reserved"), 10_262_497_198);
        assert_eq!(b.kv_capacity_bytes, 58_660_919_378);
        assert_eq!(b.kv_capacity_tokens, 447_547);
        assert_eq!(b.max_sequences, 27);
        assert!(
            !b.assumptions
                .iter()
                .any(|a| a.contains("mem-fraction-static"))
        );
        // Not given: the 0.88 default is used and said to be assumed.
        let d = run(
            &llama_8b(&[]),
            &[
                ("engine", "sglang"),
                ("card", "h100-sxm-80gb"),
                ("max-model-len", "16000"),
            ],
        );
        assert_eq!(d.kv_capacity_bytes, b.kv_capacity_bytes);
        assert!(
            d.assumptions
                .iter()
                .any(|a| a.starts_with("mem-fraction-static 0.88 assumed"))
        );
    }

    /// TGI: wiggle room = ⌊total × (1 − 1.0 × 0.90)⌋ = 8 552 080 998 B; warmup of 4096
    /// tokens: MLP 3 × 4096 × 14 336 × 2 = 352 321 536 + logits 513 024 = 352 834 560 B;
    /// KV = 85 520 809 984 − 536 870 912 − 16 060 522 496 − 352 834 560 − 8 552 080 998
    /// = 60 018 501 018 B; blocks of 16 × 131 072 = 2 097 152 B: 28 619 → 457 904 tokens;
    /// 16 000 tokens = 1000 blocks: 28 sequences.
    #[test]
    fn tgi_keeps_its_wiggle_room() {
        let b = run(
            &llama_8b(&[]),
            &[
                ("engine", "tgi"),
                ("card", "h100-sxm-80gb"),
                ("max-model-len", "16000"),
            ],
        );
        assert_eq!(bytes_of(&b, "wiggle_room"), 8_552_080_998);
        assert_eq!(bytes_of(&b, "activation_peak"), 352_834_560);
        assert_eq!(b.kv_capacity_bytes, 60_018_501_018);
        assert_eq!(b.kv_capacity_tokens, 457_904);
        assert_eq!(b.max_sequences, 28);
    }

    /// llama.cpp: ubatch 512: MLP 3 × 512 × 14 336 × 2 = 44 040 192 + logits 513 024
    /// = 44 553 216 B; KV = 85 520 809 984 − 536 870 912 − 16 060 522 496 − 44 553 216
    /// − 1 073 741 824 = 67 805 121 536 B; ÷ 131 072 = 517 312 tokens (517 312.5 floored).
    #[test]
    fn llama_cpp_leaves_its_fit_margin() {
        let b = run(
            &llama_8b(&[]),
            &[
                ("engine", "llama.cpp"),
                ("card", "h100-sxm-80gb"),
                ("max-model-len", "16000"),
            ],
        );
        assert_eq!(bytes_of(&b, "fit_margin"), 1_073_741_824);
        assert_eq!(b.kv_capacity_bytes, 67_805_121_536);
        assert_eq!(b.kv_capacity_tokens, 517_312);
        assert_eq!(b.max_sequences, 32);
    }

    /// transformers has no pool: the room is the card minus the rest of the estimate.
    /// No context given: weights 16 060 522 496 + reserve 4 GiB 4 294 967 296;
    /// 85 520 809 984 − both = 65 165 320 192 B; ÷ 131 072 = 497 171 tokens.
    #[test]
    fn transformers_room_is_what_the_estimate_leaves() {
        let b = run(
            &llama_8b(&[]),
            &[
                ("engine", "transformers"),
                ("card", "h100-sxm-80gb"),
                ("max-model-len", "16000"),
            ],
        );
        assert_eq!(b.kv_capacity_bytes, 65_165_320_192);
        assert_eq!(b.kv_capacity_tokens, 497_171);
        assert_eq!(b.max_sequences, 31);
    }

    #[test]
    fn budget_needs_a_card_a_length_and_a_kv_shape() {
        let input = llama_8b(&[]);
        let est = estimate(&input).unwrap();
        let e = budget(&input, &est, &engine(&[("engine", "vllm")])).unwrap_err();
        assert!(e.to_string().starts_with("card:"), "{e}");
        let e = budget(
            &input,
            &est,
            &engine(&[("engine", "vllm"), ("card", "h100-sxm-80gb")]),
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("max-model-len:"), "{e}");
        let (no_shape, _) = crate::params::from_pairs([("parameters", "8e9")]);
        let est = estimate(&no_shape).unwrap();
        let e = budget(
            &no_shape,
            &est,
            &engine(&[
                ("engine", "vllm"),
                ("card", "h100-sxm-80gb"),
                ("max-model-len", "100"),
            ]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("KV cache's shape"), "{e}");
    }

    #[test]
    fn per_card_rows_match_single_card_budgets() {
        let input = llama_8b(&[]);
        let est = estimate(&input).unwrap();
        let p = engine(&[("engine", "vllm"), ("max-model-len", "16000")]);
        let rows = budget_per_card(&input, &est, &p).unwrap();
        assert_eq!(rows.len(), CATALOGUE.len());
        let h100 = rows.iter().find(|r| r.id == "h100-sxm-80gb").unwrap();
        assert_eq!(h100.kv_capacity_bytes, 59_409_278_361);
        assert_eq!(h100.max_sequences, 28);
        // A 16 GB T4 cannot hold 16.06 GB of weights: negative, nothing served.
        let t4 = rows.iter().find(|r| r.id == "t4-16gb").unwrap();
        assert!(t4.kv_capacity_bytes < 0 && t4.max_sequences == 0);
    }

    /// vLLM's A100 exception: 2048 batched tokens and 256 sequences on an A100 80GB.
    /// Activation peak: 3 × 2048 × 14 336 × 2 + 128 256 × 4 = 176 160 768 + 513 024
    /// = 176 673 792 B; sampler: 256 × 128 256 × 4 = 131 334 144 B.
    #[test]
    fn vllm_defaults_follow_its_a100_exception() {
        let b = run(
            &llama_8b(&[]),
            &[
                ("engine", "vllm"),
                ("card", "a100-80gb"),
                ("max-model-len", "4096"),
            ],
        );
        assert_eq!(bytes_of(&b, "activation_peak"), 176_673_792);
        assert_eq!(bytes_of(&b, "sampler"), 131_334_144);
        assert!(b.assumptions.iter().any(|a| a.contains("max-num-seqs 256")));
    }

    fn need(input: &EstimateInput) -> u64 {
        estimate(input).unwrap().per_device_bytes
    }

    #[test]
    fn largest_context_is_exact_to_the_token() {
        let card = &find_card("h100-sxm-80gb").unwrap();
        let cap = card.capacity().0;
        for seqs in ["1", "8", "64"] {
            let input = llama_8b(&[("sequences", seqs), ("generate", "100")]);
            let n = largest_context(&input, card).expect("fits");
            let at = |c: u64| {
                let mut i = input.clone();
                i.context = Some(c);
                need(&i)
            };
            assert!(at(n) <= cap, "{seqs}: {n} should fit");
            assert!(at(n + 1) > cap, "{seqs}: {} should not fit", n + 1);
        }
    }

    #[test]
    fn most_sequences_is_exact_and_none_when_nothing_fits() {
        let card = &find_card("h100-sxm-80gb").unwrap();
        let cap = card.capacity().0;
        let input = llama_8b(&[("context", "16000")]);
        let n = most_sequences(&input, card).expect("fits");
        let at = |s: u64| {
            let mut i = input.clone();
            i.sequences = s;
            need(&i)
        };
        assert!(at(n) <= cap && at(n + 1) > cap, "{n}");
        // Without a context there is nothing to search.
        assert_eq!(most_sequences(&llama_8b(&[]), card), None);
        // Llama-3.1-8B's bf16 weights alone (16.06 GB) exceed a 16 GB T4.
        let t4 = &find_card("t4-16gb").unwrap();
        assert_eq!(largest_context(&input, t4), None);
        assert_eq!(most_sequences(&input, t4), None);
        let l = largest(&input, card);
        assert_eq!(l.most_sequences, Some(n));
        assert_eq!(l.at_context, Some(16000));
    }
}
