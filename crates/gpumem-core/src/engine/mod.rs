//! Serving-engine budgets: what each engine leaves for its KV cache on a card.
//!
//! An estimate says how many bytes a workload needs; a serving engine answers a
//! different question: it takes a share of the card, loads the weights, profiles a
//! forward pass and hands what is left to a KV-cache pool. [`budget`] follows each
//! engine's own rule, read in its source and version-pinned (one folder per engine:
//! `vllm`, `sglang`, `tgi`, `llama_cpp`, `transformers`), to predict that pool: bytes
//! per device, tokens and concurrent sequences at `max-model-len`. What every rule
//! shares is in modules of its own: the request it starts from (`request`), checked
//! arithmetic (`arith`), fractions in parts per 10^18 (`fraction`), the pool cut into
//! blocks (`pool`), the outcome (`outcome`) and the largest fit ([`largest`]).
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

mod arith;
mod drafter;
mod fraction;
mod largest;
mod llama_cpp;
mod outcome;
mod pool;
mod request;
mod sglang;
mod tgi;
mod transformers;
mod vllm;

use serde::{Deserialize, Serialize};

use crate::arch::MAX_DIM;
use crate::catalogue::{CATALOGUE, GpuCard};
use crate::error::EstimateError;
use crate::estimate::{Estimate, EstimateInput, Group, LineKey, TrainMode};
use crate::params::parse_count;

pub use drafter::{SpecMethod, Speculative};
pub use fraction::{ONE, fraction_text, parse_fraction};
pub use largest::{Largest, largest, largest_context, most_sequences};
pub use llama_cpp::{CacheType, Override, parse_overrides, tensors};
pub use outcome::{CardKv, EngineBudget, EngineLine, Outcome};
pub use sglang::SglangVersion;
pub use tgi::TgiVersion;
pub use vllm::{VllmVersion, parse_draft};

use outcome::finish;
use request::{Ctx, group_device_bytes, kv_bytes_per_token, line_bytes};

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
