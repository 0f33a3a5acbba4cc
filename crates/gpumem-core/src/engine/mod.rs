//! Serving-engine budgets: what each engine leaves for its KV cache on a card (for an
//! encoder-only model, which keeps none, what its largest batch leaves on the card).
//!
//! An estimate says how many bytes a workload needs; a serving engine answers a
//! different question: it takes a share of the card, loads the weights, profiles a
//! forward pass and hands what is left to a KV-cache pool. [`budget`] follows each
//! engine's own rule, read in its source and version-pinned, to predict that pool:
//! bytes per device, tokens and concurrent sequences at `max-model-len`.
//!
//! Every engine keeps one contract ([`Engine`]: who it is — its name, releases, flags
//! and the formats it loads, [`Info`] — and its budget for a request) and lives in a
//! folder of its own (`vllm`, `sglang`, `tgi`, `llama_cpp`, `transformers`, `lmdeploy`, `mlx`, `tei`) with its
//! flags, releases, rules and tests; one line of the registry (`registry.rs`) lists it.
//! Nothing outside the registry names an engine: the `--engine` choices, the field
//! table's engine group ([`FIELDS`]) and the parser ([`from_pairs`]) are read from it.
//! What every rule shares is in modules of its own, below the engines: the request a
//! rule starts from (`request`), the flags as rows and their values (`flags`), checked
//! arithmetic (`arith`), fractions in parts per 10^18 (`fraction`: vLLM accepts any
//! float, e.g. `0.8938626454842437`), the pool cut into blocks and the common ending
//! (`pool`), the outcome (`outcome`), speculative decoding's drafter (`drafter`) and
//! the largest fit ([`largest`]). No engine's folder reads another's.
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

#![deny(clippy::arithmetic_side_effects)]

mod arith;
mod budget;
mod contract;
mod cross;
mod drafter;
mod flags;
mod fraction;
mod largest;
mod outcome;
mod pool;
#[macro_use]
mod registry;
mod request;

// The registry: one line per engine (its folder and its type), in the order `--help`,
// the page, the schema and the docs list them.
engines! {
    vllm::Vllm,
    sglang::Sglang,
    tgi::Tgi,
    llama_cpp::LlamaCpp,
    transformers::Transformers,
    lmdeploy::Lmdeploy,
    mlx::Mlx,
    tei::Tei,
}

pub use budget::{budget, budget_per_card};
pub use contract::{Engine, Info};
pub use cross::{Cross, CrossLayers};
pub use drafter::{SpecMethod, Speculative};
pub use flags::{EngineId, EngineParams, Flag, MAX_CARDS, Value};
pub use fraction::{ONE, fraction_text, parse_fraction};
pub use largest::{Largest, largest, largest_context, most_sequences};
pub use llama_cpp::{CacheType, Override, mmproj, parse_overrides, tensors};
pub use outcome::{
    CardKv, DeviceShare, EngineBudget, EngineLine, Outcome, SPLIT_NOTE_LLAMA_CPP, SPLIT_NOTE_VLLM,
};
pub use pool::{Batch, Draft};
pub use registry::{
    ENGINES, FIELDS, all, engine_keys, field_of, find, from_pairs, from_pairs_among, is_engine_key,
};
pub use request::Ctx;
pub use sglang::SglangVersion;
pub use tgi::TgiVersion;
pub use vllm::{VllmVersion, parse_draft};

/// Looks a card up as people type it ([`crate::catalogue::resolve`]: id, name, short
/// form or capacity); `None` when it names no card or several.
pub fn find_card(text: &str) -> Option<crate::catalogue::GpuCard> {
    crate::catalogue::resolve(text).ok()
}

#[cfg(test)]
mod tests;
