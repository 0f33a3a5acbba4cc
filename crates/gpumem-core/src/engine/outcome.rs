//! The outcome of a rule: its lines, the pool, the tokens and sequences it holds, and
//! whether the engine starts — fits, *borderline* when the margin for one sequence is
//! within the assumed lines' uncertainty, or refused — for one card ([`EngineBudget`])
//! or every catalogue card ([`CardKv`]).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::arith::{gib_text, prod};
use super::pool::Draft;
use super::request::Ctx;
use super::{Engine, Speculative};
use crate::error::EstimateError;
use crate::estimate::Kind;

/// A line's inputs, by name.
pub(super) type Inputs = Vec<(&'static str, String)>;

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
pub(super) fn line(
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

/// The common ending: pool → blocks → tokens and sequences, the outcome and its margin.
pub(super) fn finish(
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
