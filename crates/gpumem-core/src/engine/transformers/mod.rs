//! transformers `generate`: no pool; the KV room is what the rest of the estimate leaves.
//!
//! `src/transformers/cache_utils.py` `DynamicCache` grows with every token, so the
//! estimate's own lines (weights, transients, the reserve) are what stands between
//! the card and the cache.

use std::borrow::Cow;

use super::contract::{Engine, Info};
use super::flags::{Flag, MAX_MODEL_LEN, Value, field};
use super::outcome::{EngineLine, line};
use super::pool::{Draft, simple_pool};
use super::request::{Ctx, catalogue_capacity};
use crate::error::EstimateError;
use crate::fields::FieldKind;
use crate::max_memory::{MAX_MEMORY as MAX_MEMORY_KEY, parse_max_memory};
use crate::estimate::{Group, Kind};

/// Hugging Face transformers' `generate` with its dynamic cache.
pub struct Transformers;

impl Engine for Transformers {
    const INFO: Info = Info {
        name: "transformers",
        aliases: &["hf"],
        summary: "Hugging Face transformers `generate` (dynamic cache).",
        releases: &[("transformers", "transformers")],
        release: None,
        hint: "transformers",
        flags: &[&MAX_MODEL_LEN, &MAX_MEMORY],
        formats: &["bf16", "int8", "nf4"],
        windows: false,
        shared_context: false,
        // torch's MPS device.
        metal: true,
        refusal: None,
    };

    /// Its own cache classes (transformers 5.23 `cache_utils.py`): the whole
    /// convolution window, fp32 recurrent states, the indexer's keys in the model's dtype.
    const CACHE_RUNTIME: crate::arch::CacheRuntime = crate::arch::CacheRuntime::Transformers;

    /// `generate` keeps the cross layers' cache per sequence (the estimate's
    /// `kv_cache.cross` line), in tokens of the self-attention layers' bytes (rounded
    /// up: the safe side).
    fn cross_attention(
        x: &super::cross::CrossLayers,
        _params: &super::flags::EngineParams,
    ) -> Result<super::cross::Cross, EstimateError> {
        let equivalent = x
            .tokens
            .checked_mul(x.cross)
            .ok_or(EstimateError::Overflow {
                what: "cross-attention cache",
            })?
            .div_ceil(x.own.max(1));
        Ok(super::cross::Cross {
            per_token: x.per_token,
            encoder_tokens: equivalent,
            length_tokens: 0,
            assumption: format!(
                "cross-attention: each sequence's {} cross-attention layers keep {} vision tokens (the kv_cache.cross line, {equivalent} tokens' worth of the text's cache)",
                x.cross, x.tokens
            ),
        })
    }

    fn budget(c: &Ctx) -> Result<Draft, EstimateError> {
        rule(c)
    }
}

/// `--max-memory` examples: two GPUs and the CPU; one GPU and the CPU.
const MAX_MEMORY_EXAMPLES: &[(&str, &str)] = &[
    ("0=20GiB,1=20GiB,cpu=64GiB", "two GPUs and the CPU"),
    ("0=20GiB,cpu=64GiB", "one GPU and the CPU"),
];

/// `max_memory` for `device_map="auto"`, as users write it (`0=20GiB,1=20GiB,cpu=64GiB`).
const MAX_MEMORY: Flag = Flag::new(
    field(
        MAX_MEMORY_KEY,
        FieldKind::Text,
        "transformers max_memory",
        "",
        "transformers device_map=\"auto\": max_memory per device, e.g. 0=20GiB,1=20GiB,cpu=64GiB (default: each GPU's free memory, 90 % of the RAM)",
    )
    .choices(MAX_MEMORY_EXAMPLES),
    max_memory,
)
.unread("max_memory is transformers' device_map=\"auto\" (--engine transformers): ignored");

fn max_memory(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    parse_max_memory(text)
        .map(|_| Value::Text(text.trim().to_string()))
        .map_err(|e| EstimateError::invalid(key, e))
}

fn rule(c: &Ctx) -> Result<Draft, EstimateError> {
    let est = c.est;
    let (capacity, kind) = catalogue_capacity(&c.card);
    let mut lines = vec![line(
        "budget",
        "Card total",
        capacity,
        Kind::Computed,
        "device total".into(),
        &[("total", format!("{capacity} B ({kind})"))],
        "src/transformers/cache_utils.py (DynamicCache: no pre-allocated pool)",
    )];
    let mut assumed = 0u64;
    for l in est
        .lines
        .iter()
        .filter(|l| l.in_total && l.group != Group::KvCache)
    {
        if l.kind == Kind::Assumed {
            assumed = assumed.saturating_add(l.device_bytes);
        }
        lines.push(EngineLine {
            key: Cow::Borrowed(l.key.as_str()),
            label: l.label.clone(),
            bytes: l.device_bytes,
            kind: l.kind,
            subtracted: true,
            formula: l.formula.clone(),
            inputs: l.inputs.clone(),
            source: Cow::Borrowed("the estimator"),
        });
    }
    let (group_block_bytes, groups, seq_blocks) = simple_pool(c, 1)?;
    Ok(Draft {
        version: "any",
        capacity,
        capacity_kind: kind,
        lines,
        block: 1,
        group_block_bytes,
        groups,
        seq_blocks,
        tokens_by_concurrency: false,
        kv_cache_bytes: None,
        pool: None,
        need: None,
        speculative: None,
        uncertainty: assumed.checked_div(4).unwrap_or(0),
        assumptions: Vec::new(),
        warnings: Vec::new(),
        refused: None,
        devices: Vec::new(),
    })
}
