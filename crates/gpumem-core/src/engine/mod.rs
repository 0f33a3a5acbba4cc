//! Serving-engine budgets: what each engine leaves for its KV cache on a card.
//!
//! An estimate says how many bytes a workload needs; a serving engine answers a
//! different question: it takes a share of the card, loads the weights, profiles a
//! forward pass and hands what is left to a KV-cache pool. [`budget`] follows each
//! engine's own rule, read in its source and version-pinned (one file per engine:
//! [`vllm`], [`sglang`], [`tgi`], [`llama_cpp`], [`transformers`]), to predict that
//! pool: bytes per device, tokens and concurrent sequences at `max-model-len`.
//!
//! The rules are applied exactly, in integer bytes. What the engines *measure* at
//! start-up (the activation peak of their profiling run, memory outside torch) is
//! computed from the model's shapes where the source says what is allocated, and an
//! *assumed* line otherwise, with its formula and the public logs it rests on. The
//! assumed lines' spread gives the *borderline* band: a pool within it of what one
//! sequence needs is neither "fits" nor "refused".
//!
//! [`largest`] answers "what is the largest workload that fits on this card": with an
//! engine named, from that engine's pool; without one, from the estimate itself.
//!
//! The engine flags are the engine group of the one field table
//! ([`crate::fields::FIELDS`]), named like the engines' own flags; [`from_pairs`]
//! parses them. Fractions are kept exactly (parts per 10^18): vLLM accepts any float,
//! e.g. `0.8938626454842437`.

#![deny(clippy::arithmetic_side_effects)]

mod largest;
mod llama_cpp;
mod sglang;
mod speculative;
mod tgi;
mod transformers;
mod vllm;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::arch::MAX_DIM;
use crate::catalogue::{CATALOGUE, GpuCard};
use crate::error::EstimateError;
use crate::estimate::{Estimate, EstimateInput, Group, Kind, LineKey, TrainMode, estimate};
use crate::params::parse_count;

pub use largest::{Largest, largest, largest_context, most_sequences};
pub use llama_cpp::{CacheType, Override, parse_overrides, tensors};
pub use sglang::SglangVersion;
pub use speculative::{SpecMethod, Speculative, parse_draft};
pub use tgi::TgiVersion;
pub use vllm::VllmVersion;

/// Bytes in one MiB.
const MIB: u64 = 1 << 20;
/// Bytes in one GiB.
const GIB: u64 = 1 << 30;
/// A fraction is held in parts per 10^18: exact for every decimal an engine prints.
pub const ONE: u64 = 1_000_000_000_000_000_000;

/// A serving engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Engine {
    /// vLLM.
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

    /// Parses an engine name (case-insensitive; `llamacpp` and `llama-cpp` too), with
    /// an optional `@version` for vLLM (`vllm@0.10`) and TGI (`tgi@2.0`).
    pub fn parse(text: &str) -> Result<(Engine, Option<Release>), EstimateError> {
        let t = text.trim().to_ascii_lowercase();
        let (name, version) = match t.split_once('@') {
            Some((n, v)) => (n, Some(v)),
            None => (t.as_str(), None),
        };
        let engine = match name {
            "vllm" => Engine::Vllm,
            "sglang" => Engine::Sglang,
            "tgi" | "text-generation-inference" => Engine::Tgi,
            "llama.cpp" | "llamacpp" | "llama-cpp" => Engine::LlamaCpp,
            "transformers" | "hf" => Engine::Transformers,
            _ => {
                return Err(EstimateError::invalid(
                    "engine",
                    format!(
                        "{text:?} is not an engine; use vllm (0.27; vllm@0.19, @0.10, @0.8, @0.7, @0.6), sglang (sglang@0.5.0), tgi (tgi@3, @2.0, @0.9), llama.cpp or transformers"
                    ),
                ));
            }
        };
        match (engine, version) {
            (_, None) => Ok((engine, None)),
            (Engine::Vllm, Some(v)) => {
                VllmVersion::parse(v).map(|v| (engine, Some(Release::Vllm(v))))
            }
            (Engine::Tgi, Some(v)) => TgiVersion::parse(v).map(|v| (engine, Some(Release::Tgi(v)))),
            (Engine::Sglang, Some(v)) => {
                SglangVersion::parse(v).map(|v| (engine, Some(Release::Sglang(v))))
            }
            (_, Some(_)) => Err(EstimateError::invalid(
                "engine",
                format!(
                    "{text:?}: one version of this engine's rules is carried (name it without @)"
                ),
            )),
        }
    }
}

/// An engine release named after `@` ([`Engine::parse`]): the rules of that release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// `vllm@…`.
    Vllm(VllmVersion),
    /// `tgi@…`.
    Tgi(TgiVersion),
    /// `sglang@…`.
    Sglang(SglangVersion),
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
    /// vLLM's accounting version (`vllm@0.10`); `None` is the newest carried.
    pub version: Option<VllmVersion>,
    /// TGI's accounting version (`tgi@2.0`); `None` is the newest carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgi_version: Option<TgiVersion>,
    /// SGLang's accounting version (`sglang@0.5.0`); `None` is the newest carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sglang_version: Option<SglangVersion>,
    /// The card (a catalogue entry, or a typed capacity).
    #[serde(skip)]
    pub card: Option<GpuCard>,
    /// `--gpu-memory-utilization`, parts per 10^18.
    pub gpu_memory_utilization: Option<u64>,
    /// `--max-model-len`.
    pub max_model_len: Option<u64>,
    /// `--max-model-len auto`: the largest length the pool holds, as vLLM computes it.
    pub max_model_len_auto: bool,
    /// `--max-num-seqs`.
    pub max_num_seqs: Option<u64>,
    /// `--max-num-batched-tokens` (vLLM), the chunked-prefill size (SGLang), the
    /// warmup prefill (TGI) or `--ubatch-size` (llama.cpp).
    pub max_num_batched_tokens: Option<u64>,
    /// `--mem-fraction-static`, parts per 10^18.
    pub mem_fraction_static: Option<u64>,
    /// vLLM `--kv-cache-memory-bytes`: an absolute pool, no profiling subtraction.
    pub kv_cache_memory_bytes: Option<u64>,
    /// vLLM `--enforce-eager` (no CUDA graphs).
    pub enforce_eager: bool,
    /// vLLM `--enable-lora`.
    pub enable_lora: bool,
    /// vLLM `--max-loras` (adapter slots on the GPU, default 1).
    pub max_loras: Option<u64>,
    /// vLLM `--max-lora-rank` (default 16).
    pub max_lora_rank: Option<u64>,
    /// vLLM `--speculative-config` `method`.
    pub speculative_method: Option<SpecMethod>,
    /// vLLM `--speculative-config` `num_speculative_tokens`.
    pub num_speculative_tokens: Option<u64>,
    /// vLLM `--speculative-config` `model`: the draft or EAGLE head, as a preset id or
    /// its shape in `key=value` pairs ([`parse_draft`]).
    pub draft_model: Option<String>,
    /// llama.cpp `--cache-type-k`.
    pub cache_type_k: Option<CacheType>,
    /// llama.cpp `--cache-type-v`.
    pub cache_type_v: Option<CacheType>,
    /// llama.cpp `--kv-unified`: one KV stream shared by every slot (llama-server's
    /// `-np auto` turns it on).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kv_unified: bool,
    /// llama.cpp `--swa-full`: the sliding-window layers' cache as large as the full
    /// layers' (`src/llama-kv-cache-iswa.cpp`: `size_swa = size_base`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub swa_full: bool,
    /// llama.cpp `--n-gpu-layers` (all when absent).
    pub n_gpu_layers: Option<u64>,
    /// llama.cpp `--n-cpu-moe`: MoE layers whose experts stay in host memory.
    pub n_cpu_moe: Option<u64>,
    /// llama.cpp `--override-tensor` (`-ot`) as typed: `<pattern>=<buffer type>,…`
    /// (split and checked by [`llama_cpp::override_rules`]; the patterns compiled where
    /// the placement is: [`llama_cpp::parse_overrides`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub override_tensor: Option<String>,
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

/// The engine flags among `pairs` (a page's or a workload's: every other key is
/// skipped), as [`from_pairs`] parses them.
pub fn from_pairs_among<'a, I>(pairs: I) -> (EngineParams, Vec<EstimateError>)
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    from_pairs(pairs.into_iter().filter(|(k, _)| is_engine_key(k)))
}

/// Looks a card up as people type it ([`crate::catalogue::resolve`]: id, name, short
/// form or capacity); `None` when it names no card or several.
pub fn find_card(text: &str) -> Option<GpuCard> {
    crate::catalogue::resolve(text).ok()
}

/// Parses a decimal fraction in (0, 1] such as "0.9" or "0.8938626454842437" into
/// parts per 10^18, exactly (up to 18 decimals, as many as a float64 prints).
pub fn parse_fraction(field: &'static str, text: &str) -> Result<u64, EstimateError> {
    let t = text.trim();
    let bad = || {
        EstimateError::invalid(
            field,
            format!("{text:?} is not a fraction in (0, 1] (at most 18 decimals), e.g. 0.9"),
        )
    };
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    if (int.is_empty() && frac.is_empty())
        || frac.len() > 18
        || int.len() > 1
        || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit())
    {
        return Err(bad());
    }
    let mut v: u64 = 0;
    for (i, c) in int
        .bytes()
        .chain(frac.bytes())
        .chain(std::iter::repeat(b'0'))
        .enumerate()
    {
        if i >= int.len().saturating_add(18) {
            break;
        }
        v = v
            .checked_mul(10)
            .and_then(|x| x.checked_add(u64::from(c.saturating_sub(b'0'))))
            .ok_or_else(bad)?;
    }
    if v == 0 || v > ONE {
        return Err(bad());
    }
    Ok(v)
}

/// A fraction in parts per 10^18 as a decimal ("0.9").
pub fn fraction_text(f: u64) -> String {
    let whole = f.checked_div(ONE).unwrap_or(0);
    let part = f.checked_rem(ONE).unwrap_or(0);
    if part == 0 {
        return whole.to_string();
    }
    format!("{whole}.{part:018}")
        .trim_end_matches('0')
        .to_string()
}

/// `bytes × f / 10^18`, rounded down (`up`: rounded up, as vLLM's `math.ceil`).
fn times_fraction(bytes: u64, f: u64, up: bool) -> Result<u64, EstimateError> {
    let p = u128::from(bytes)
        .checked_mul(u128::from(f))
        .ok_or(EstimateError::Overflow {
            what: "engine budget",
        })?;
    let one = u128::from(ONE);
    let v = if up {
        p.div_ceil(one)
    } else {
        p.checked_div(one).unwrap_or(0)
    };
    u64::try_from(v).map_err(|_| EstimateError::Overflow {
        what: "engine budget",
    })
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
            "engine" => Engine::parse(value).map(|(e, r)| {
                p.engine = Some(e);
                p.version = None;
                p.tgi_version = None;
                p.sglang_version = None;
                match r {
                    Some(Release::Vllm(v)) => p.version = Some(v),
                    Some(Release::Tgi(v)) => p.tgi_version = Some(v),
                    Some(Release::Sglang(v)) => p.sglang_version = Some(v),
                    None => {}
                }
            }),
            "card" => crate::catalogue::resolve(value)
                .map(|c| p.card = Some(c))
                .map_err(|why| EstimateError::invalid("card", why)),
            "gpu-memory-utilization" => parse_fraction("gpu-memory-utilization", value)
                .map(|v| p.gpu_memory_utilization = Some(v)),
            "mem-fraction-static" => parse_fraction("mem-fraction-static", value)
                .map(|v| p.mem_fraction_static = Some(v)),
            "max-model-len" if matches!(value.trim(), "auto" | "-1") => {
                p.max_model_len_auto = true;
                Ok(())
            }
            "max-model-len" => positive("max-model-len", value).map(|v| p.max_model_len = Some(v)),
            "max-num-seqs" => positive("max-num-seqs", value).map(|v| p.max_num_seqs = Some(v)),
            "max-num-batched-tokens" => positive("max-num-batched-tokens", value)
                .map(|v| p.max_num_batched_tokens = Some(v)),
            "kv-cache-memory-bytes" => {
                positive("kv-cache-memory-bytes", value).map(|v| p.kv_cache_memory_bytes = Some(v))
            }
            "enforce-eager" => flag("enforce-eager", value).map(|v| p.enforce_eager = v),
            "kv-unified" => flag("kv-unified", value).map(|v| p.kv_unified = v),
            "swa-full" => flag("swa-full", value).map(|v| p.swa_full = v),
            "enable-lora" => flag("enable-lora", value).map(|v| p.enable_lora = v),
            "max-loras" => positive("max-loras", value).map(|v| p.max_loras = Some(v)),
            "max-lora-rank" => positive("max-lora-rank", value).map(|v| p.max_lora_rank = Some(v)),
            "speculative-method" => {
                SpecMethod::parse(value).map(|v| p.speculative_method = Some(v))
            }
            "num-speculative-tokens" => positive("num-speculative-tokens", value)
                .map(|v| p.num_speculative_tokens = Some(v)),
            // Read with the rest of the rule (`speculative::parse_draft`).
            "draft-model" => {
                p.draft_model = Some(value.trim().to_string());
                Ok(())
            }
            "cache-type-k" => {
                CacheType::parse("cache-type-k", value).map(|v| p.cache_type_k = Some(v))
            }
            "cache-type-v" => {
                CacheType::parse("cache-type-v", value).map(|v| p.cache_type_v = Some(v))
            }
            "n-gpu-layers" => parse_count("n-gpu-layers", value).map(|v| p.n_gpu_layers = Some(v)),
            "n-cpu-moe" => parse_count("n-cpu-moe", value).map(|v| p.n_cpu_moe = Some(v)),
            "override-tensor" => llama_cpp::override_rules(value)
                .map(|_| p.override_tensor = Some(value.to_string())),
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
    if v > MAX_DIM && field != "kv-cache-memory-bytes" {
        return Err(EstimateError::invalid(field, "absurdly large"));
    }
    Ok(v)
}

fn flag(field: &'static str, text: &str) -> Result<bool, EstimateError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(EstimateError::invalid(
            field,
            format!("{text:?} is not true or false"),
        )),
    }
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
    /// Whether the rule subtracts it from the first line (false: shown only, e.g.
    /// vLLM 0.19's CUDA-graph line; 0.27's V1 runner subtracts its estimate).
    #[serde(default = "yes")]
    pub subtracted: bool,
    /// The formula, in words.
    pub formula: String,
    /// The formula's inputs.
    pub inputs: BTreeMap<Cow<'static, str>, String>,
    /// The engine source file the rule comes from.
    pub source: Cow<'static, str>,
}

fn yes() -> bool {
    true
}

/// How the engine's start-up ends for this workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Outcome {
    /// The pool holds a sequence of `max-model-len` with more than the uncertainty to spare.
    Fits,
    /// The margin is within the assumed lines' uncertainty of zero.
    Borderline,
    /// The engine refuses to start (no pool, or one sequence does not fit).
    Refused,
}

/// What an engine leaves for the KV cache on one card (per device of the tp × pp group).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EngineBudget {
    /// The engine.
    pub engine: Engine,
    /// The version whose rules were applied.
    pub version: String,
    /// Catalogue id of the card.
    pub card: String,
    /// Card name.
    pub card_name: String,
    /// The card's capacity (bytes) the rule starts from.
    pub capacity_bytes: u64,
    /// "torch" (the total torch reports), "torch, derived" (assumed), "reported" or "label".
    pub capacity_kind: String,
    /// The first line (the engine's share of the card), then every other line.
    pub lines: Vec<EngineLine>,
    /// Bytes left for the KV cache on the most loaded device: the share minus the
    /// subtracted lines; negative when the engine refuses to start.
    pub kv_capacity_bytes: i64,
    /// llama.cpp: the KV cache it allocates for its context cells (it sizes the cache
    /// from `-c`, not from free memory); `None` for pool engines.
    pub kv_cache_bytes: Option<u64>,
    /// llama.cpp: the model weights it keeps in host memory (its CPU buffer: the
    /// token embeddings, blocks left off the card by `-ngl`, tensors sent there by
    /// `--n-cpu-moe` or `--override-tensor`); `None` for the other engines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_weights_bytes: Option<u64>,
    /// KV bytes one token takes on that device (every layer, K and V).
    pub kv_bytes_per_token: u64,
    /// The engine's allocation unit in tokens (vLLM and TGI blocks; 1 otherwise).
    pub block_size: u64,
    /// Tokens the KV pool holds as the engine reports them ("GPU KV cache size").
    pub kv_capacity_tokens: u64,
    /// The sequence length served.
    pub max_model_len: u64,
    /// Sequences of `max_model_len` tokens the pool holds at once.
    pub max_sequences: u64,
    /// Whether one sequence of `max_model_len` tokens fits (vLLM refuses to start otherwise).
    pub fits_one_sequence: bool,
    /// Fits, borderline or refused.
    pub outcome: Outcome,
    /// The pool less what one sequence of `max_model_len` needs (negative: short).
    pub margin_bytes: i64,
    /// The sequences asked for (`sequences`), served at once.
    pub sequences: u64,
    /// The pool less what the asked sequences need at once (negative: short): the
    /// workload's own check, beside the engine's start-up check of one sequence.
    pub workload_margin_bytes: i64,
    /// Whether the pool holds the asked sequences at once.
    pub workload_outcome: Outcome,
    /// The assumed lines' uncertainty the margin is compared with.
    pub uncertainty_bytes: u64,
    /// vLLM's drafter, with `speculative-method`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Speculative>,
    /// Hypotheses the figure rests on.
    pub assumptions: Vec<String>,
    /// Soft problems.
    pub warnings: Vec<String>,
}

#[allow(clippy::too_many_arguments)]
fn line(
    key: &'static str,
    label: &'static str,
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
        label: Cow::Borrowed(label),
        bytes,
        kind,
        subtracted: true,
        formula,
        inputs: map,
        source: Cow::Borrowed(source),
    }
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

/// The per-device bytes of one line of the estimate (0 when absent).
fn line_bytes(est: &Estimate, key: LineKey) -> u64 {
    est.lines
        .iter()
        .filter(|l| l.key == key)
        .map(|l| l.device_bytes)
        .sum()
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
fn forward_peak(input: &EstimateInput, tokens: u64) -> Result<u64, EstimateError> {
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

fn mib(n: u64) -> u64 {
    n.saturating_mul(MIB)
}

/// Checked `a × b × …` of shape numbers.
fn prod(xs: &[u64]) -> Result<u64, EstimateError> {
    xs.iter()
        .try_fold(1u64, |a, x| a.checked_mul(*x))
        .ok_or(EstimateError::Overflow {
            what: "engine shapes",
        })
}

/// Checked sum.
fn sum(xs: &[u64]) -> Result<u64, EstimateError> {
    xs.iter()
        .try_fold(0u64, |a, x| a.checked_add(*x))
        .ok_or(EstimateError::Overflow {
            what: "engine lines",
        })
}

/// Bytes as "12.34 GiB" for the texts (two decimals, truncated).
fn gib_text(b: u64) -> String {
    crate::units::Bytes(b).gib_string(2) + " GiB"
}

/// What an engine's rule produces before the common ending (tokens, sequences, outcome).
struct Draft {
    version: &'static str,
    capacity: u64,
    capacity_kind: &'static str,
    lines: Vec<EngineLine>,
    block: u64,
    /// Bytes of one block across the layers of one group (vLLM's page × group size);
    /// `block × per-token` for a single group.
    group_block_bytes: u64,
    /// KV-cache groups (vLLM's hybrid allocator); 1 otherwise.
    groups: u64,
    /// Blocks one sequence of `max_model_len` takes (all groups).
    seq_blocks: u64,
    /// The tokens reported are max concurrency × max_model_len (vLLM 0.22 onwards),
    /// not whole blocks per group.
    tokens_by_concurrency: bool,
    kv_cache_bytes: Option<u64>,
    /// The pool, when the engine does not derive it from the lines (llama.cpp's
    /// allocated cache, vLLM's `--kv-cache-memory-bytes`).
    pool: Option<i64>,
    /// llama.cpp: what its context needs (the allocated cache), the cells that fit
    /// the room, and the sequences served; `None`: one sequence's blocks.
    need: Option<Need>,
    uncertainty: u64,
    assumptions: Vec<String>,
    warnings: Vec<String>,
}

/// An engine that allocates its cache up front (llama.cpp): what it needs against the room.
struct Need {
    bytes: u64,
    tokens: u64,
    sequences: u64,
}

/// The common facts every rule starts from.
struct Ctx<'a> {
    input: &'a EstimateInput,
    params: &'a EngineParams,
    card: GpuCard,
    weights: u64,
    /// The estimate's embedding weight line, per device (llama.cpp's placement without
    /// an architecture).
    embed_bytes: u64,
    /// The checkpoint's MTP layers, per device (vLLM loads them only to speculate).
    mtp_bytes: u64,
    per_token: u64,
    max_model_len: u64,
}

/// Predicts the KV-cache pool `params.engine` leaves on `params.card` for the
/// workload `input` (whose estimate is `est`).
pub fn budget(
    input: &EstimateInput,
    est: &Estimate,
    params: &EngineParams,
) -> Result<EngineBudget, EstimateError> {
    if !(params.max_model_len_auto && params.max_model_len.is_none()) {
        return budget_at(input, est, params);
    }
    // vllm kv_cache_utils.py `_auto_fit_max_model_len`: the longest length whose one
    // request fits the pool, up to the model's own (its positions, as far as its
    // RoPE scaling reaches: `_get_and_verify_max_len`'s derived length).
    let cap = input.position_limit().unwrap_or(MAX_DIM);
    let at = |m: u64| {
        let p = EngineParams {
            max_model_len: Some(m),
            max_model_len_auto: false,
            ..params.clone()
        };
        budget_at(input, est, &p)
    };
    let m = largest::search(cap, |m| at(m).is_ok_and(|b| b.fits_one_sequence)).unwrap_or(cap);
    let mut b = at(m)?;
    b.assumptions.push(format!(
        "max-model-len auto: {m}, the longest the pool holds (≤ {cap})"
    ));
    Ok(b)
}

/// [`budget`] at a given (or derived) max-model-len: one copy of the rules, called
/// by the searches (never inlined into them, which would copy every engine's rule).
#[inline(never)]
fn budget_at(
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
    let per_token = kv_bytes_per_token(input)?;
    let max_model_len = match params.max_model_len {
        Some(m) => m,
        None => match (input.context, input.position_limit()) {
            // llama-server's `-c` is the context of all its slots together, each slot
            // holding `-c / -np` (tools/server: n_ctx_slot = n_ctx / n_parallel): N
            // sequences of L tokens are `-c N×L -np N`. The pool engines serve each
            // sequence at max-model-len.
            (Some(c), _) => c
                .checked_add(input.generate)
                .and_then(|l| match engine {
                    Engine::LlamaCpp => l.checked_mul(input.sequences.max(1)),
                    _ => Some(l),
                })
                .ok_or(EstimateError::Overflow {
                    what: "max-model-len",
                })?,
            (None, Some(p)) => p,
            (None, None) => {
                return Err(EstimateError::invalid(
                    "max-model-len",
                    "give max-model-len (or context, or a model whose max-position is known)",
                ));
            }
        },
    };
    let ctx = Ctx {
        input,
        params,
        card,
        weights: group_device_bytes(est, Group::Weights)?,
        embed_bytes: line_bytes(est, LineKey::WeightsEmbeddings),
        mtp_bytes: line_bytes(est, LineKey::WeightsMtp),
        per_token,
        max_model_len,
    };
    let (mut d, spec) = match engine {
        Engine::Vllm => vllm::rule(&ctx)?,
        Engine::Sglang => (sglang::rule(&ctx)?, None),
        Engine::Tgi => (tgi::rule(&ctx)?, None),
        Engine::LlamaCpp => (llama_cpp::rule(&ctx)?, None),
        Engine::Transformers => (transformers::rule(&ctx, est)?, None),
    };
    if engine != Engine::Vllm && params.speculative_method.is_some() {
        d.warnings
            .push("speculative decoding is modelled for vLLM only: ignored".into());
    }
    if input.sliding_window.is_some() && engine != Engine::Vllm && engine != Engine::LlamaCpp {
        d.assumptions
            .push("sliding-window layers are counted at the full length per token".into());
    }
    if ctx.weights == 0 {
        d.warnings.push("no weights counted (only the KV cache's shape was given): the KV capacity is an upper bound".into());
    }
    if input.state_layers > 0 {
        d.warnings
            .push("recurrent-state layers are not counted in the engine budget".into());
    }
    if input.train != TrainMode::None {
        d.warnings
            .push("an engine budget is for inference; the training mode is ignored".into());
    }
    finish(engine, &ctx, d, spec)
}

/// The common ending: pool → blocks → tokens and sequences, the outcome and its margin.
fn finish(
    engine: Engine,
    ctx: &Ctx,
    mut d: Draft,
    speculative: Option<Speculative>,
) -> Result<EngineBudget, EstimateError> {
    let (first, rest) = d
        .lines
        .split_first()
        .ok_or(EstimateError::invalid("engine", "no budget"))?;
    let subtracted = rest
        .iter()
        .filter(|l| l.subtracted)
        .try_fold(0i128, |acc, l| acc.checked_add(i128::from(l.bytes)))
        .ok_or(EstimateError::Overflow {
            what: "engine lines",
        })?;
    let kv = match d.pool {
        Some(p) => i128::from(p),
        None => i128::from(first.bytes)
            .checked_sub(subtracted)
            .ok_or(EstimateError::Overflow {
                what: "engine budget",
            })?,
    };
    let kv_capacity_bytes = i64::try_from(kv).map_err(|_| EstimateError::Overflow {
        what: "engine budget",
    })?;
    let usable = u64::try_from(kv).unwrap_or(0);
    // vllm/v1/core/kv_cache_utils.py: num_blocks = available // page_size // group_size;
    // "GPU KV cache size" = num_blocks // len(groups) × block_size.
    let blocks = usable.checked_div(d.group_block_bytes).unwrap_or(0);
    let (need, kv_capacity_tokens, max_sequences) = match &d.need {
        Some(n) => (
            n.bytes,
            n.tokens,
            if n.bytes <= usable && kv > 0 {
                n.sequences
            } else {
                0
            },
        ),
        // "Maximum concurrency": num_blocks ÷ blocks one request of max_model_len takes.
        None => (
            prod(&[d.seq_blocks, d.group_block_bytes])?,
            if d.tokens_by_concurrency {
                // vllm v0.22.0 `kv_cache_utils.py` `_report_kv_cache_config`: "GPU KV
                // cache size" = int(num_blocks ÷ blocks per request × max_model_len)
                // (`get_max_concurrency_for_kv_cache_config`).
                u64::try_from(
                    u128::from(blocks)
                        .saturating_mul(u128::from(ctx.max_model_len))
                        .checked_div(u128::from(d.seq_blocks))
                        .unwrap_or(0),
                )
                .unwrap_or(u64::MAX)
            } else {
                prod(&[blocks.checked_div(d.groups).unwrap_or(0), d.block])?
            },
            blocks.checked_div(d.seq_blocks).unwrap_or(0),
        ),
    };
    let fits_one_sequence = max_sequences >= 1;
    let margin = kv
        .checked_sub(i128::from(need))
        .and_then(|m| i64::try_from(m).ok())
        .ok_or(EstimateError::Overflow {
            what: "engine margin",
        })?;
    let unc = i64::try_from(d.uncertainty).unwrap_or(i64::MAX);
    let judge = |margin: i64| {
        if kv <= 0 || margin < unc.saturating_neg() {
            Outcome::Refused
        } else if margin <= unc {
            Outcome::Borderline
        } else {
            Outcome::Fits
        }
    };
    let outcome = judge(margin);
    // The asked sequences at once: llama.cpp's cache already holds all its slots; a
    // pool holds each sequence's blocks.
    let sequences = ctx.input.sequences.max(1);
    let workload_need = match &d.need {
        Some(_) => i128::from(need),
        None => i128::from(need).saturating_mul(i128::from(sequences)),
    };
    let mut workload_margin =
        i64::try_from(kv.saturating_sub(workload_need).max(i128::from(i64::MIN)))
            .unwrap_or(i64::MIN);
    // A sequence longer than what the engine serves one (max-model-len, or a llama.cpp
    // slot's share of -c) is not served at all.
    let served = match &d.need {
        Some(_) => ctx.max_model_len.checked_div(sequences).unwrap_or(0),
        None => ctx.max_model_len,
    };
    if let Some(c) = ctx.input.context
        && c.saturating_add(ctx.input.generate) > served
    {
        workload_margin = workload_margin.min(-1);
        d.warnings.push(format!(
            "a sequence of {} tokens is longer than the {served} the engine serves one",
            c.saturating_add(ctx.input.generate)
        ));
    }
    let workload_outcome = judge(workload_margin);
    let mml = ctx.max_model_len;
    if kv_capacity_bytes <= 0 {
        d.warnings.push(match engine {
            Engine::Vllm => "No available memory for the cache blocks: vLLM refuses to start (raise gpu-memory-utilization, use a larger card, tp, or quantised weights)".into(),
            Engine::Sglang => "Not enough memory: SGLang refuses to start (raise mem-fraction-static)".into(),
            _ => "nothing is left for the KV cache on this card".into(),
        });
    } else if !fits_one_sequence {
        d.warnings.push(format!(
            "one sequence of {mml} tokens needs {}, the pool holds {}: refused",
            gib_text(need),
            gib_text(usable)
        ));
    }
    if outcome == Outcome::Borderline {
        d.warnings.push(format!(
            "borderline: {} {} for one sequence of {mml} tokens, within ±{}",
            gib_text(margin.unsigned_abs()),
            if margin < 0 { "short" } else { "to spare" },
            gib_text(d.uncertainty)
        ));
    }
    let host_weights_bytes = d
        .lines
        .iter()
        .find(|l| l.key == "host_weights")
        .map(|l| l.bytes);
    Ok(EngineBudget {
        engine,
        version: d.version.to_string(),
        card: ctx.card.id.to_string(),
        card_name: ctx.card.name.to_string(),
        capacity_bytes: d.capacity,
        capacity_kind: d.capacity_kind.to_string(),
        lines: d.lines,
        kv_capacity_bytes,
        kv_cache_bytes: d.kv_cache_bytes,
        host_weights_bytes,
        // The drafter's layers share the pool (vLLM's speculative decoding).
        kv_bytes_per_token: ctx.per_token.saturating_add(
            speculative
                .as_ref()
                .map_or(0, |s| s.draft_kv_bytes_per_token),
        ),
        block_size: d.block,
        kv_capacity_tokens,
        max_model_len: mml,
        max_sequences,
        fits_one_sequence,
        outcome,
        margin_bytes: margin,
        sequences,
        workload_margin_bytes: workload_margin,
        workload_outcome,
        uncertainty_bytes: d.uncertainty,
        speculative,
        assumptions: d.assumptions,
        warnings: d.warnings,
    })
}

/// A single-group pool of `block`-token blocks (every engine but vLLM's hybrid case).
fn simple_pool(ctx: &Ctx, block: u64) -> Result<(u64, u64, u64), EstimateError> {
    Ok((
        prod(&[block, ctx.per_token])?,
        1,
        ctx.max_model_len.div_ceil(block.max(1)),
    ))
}

/// The card's capacity as the catalogue gives it, with its kind's name.
fn catalogue_capacity(card: &GpuCard) -> (u64, &'static str) {
    let (c, kind) = card.capacity();
    (c, kind.as_str())
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
    /// [`EngineBudget::outcome`].
    pub outcome: Outcome,
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
                outcome: b.outcome,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
