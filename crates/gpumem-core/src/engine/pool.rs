//! The pool a rule leaves, cut into blocks: what every engine's rule hands to the
//! common ending ([`Draft`]), the single-group cut most engines use, and the common
//! ending itself (pool → blocks → tokens and sequences, the outcome and its margin).

use super::arith::{gib_text, prod};
use super::drafter::Speculative;
use super::flags::EngineId;
use super::outcome::{DeviceShare, EngineBudget, EngineLine, Outcome};
use super::request::Ctx;
use crate::error::EstimateError;

/// What an engine's rule produces before the common ending (tokens, sequences, outcome).
pub struct Draft {
    /// The release whose rules applied, as the budget prints it ("0.19").
    pub(crate) version: &'static str,
    /// The card's capacity the rule starts from.
    pub(crate) capacity: u64,
    /// Which figure it is: "torch", "torch, derived" (assumed), "reported", "label".
    pub(crate) capacity_kind: &'static str,
    /// The engine's share of the card first, then every line it subtracts or shows.
    pub(crate) lines: Vec<EngineLine>,
    /// The allocation unit in tokens.
    pub(crate) block: u64,
    /// Bytes of one block across the layers of one group (vLLM's page × group size);
    /// `block × per-token` for a single group.
    pub(crate) group_block_bytes: u64,
    /// KV-cache groups (vLLM's hybrid allocator); 1 otherwise.
    pub(crate) groups: u64,
    /// Blocks one sequence of `max_model_len` takes (all groups).
    pub(crate) seq_blocks: u64,
    /// The tokens reported are max concurrency × max_model_len (vLLM 0.22 onwards),
    /// not whole blocks per group.
    pub(crate) tokens_by_concurrency: bool,
    /// The cache an engine allocates up front (llama.cpp), if it does.
    pub(crate) kv_cache_bytes: Option<u64>,
    /// The pool, when the engine does not derive it from the lines (llama.cpp's
    /// allocated cache, vLLM's `--kv-cache-memory-bytes`).
    pub(crate) pool: Option<i64>,
    /// llama.cpp: what its context needs (the allocated cache), the cells that fit
    /// the room, and the sequences served; `None`: one sequence's blocks.
    pub(crate) need: Option<Need>,
    /// The assumed lines' uncertainty: the borderline band.
    pub(crate) uncertainty: u64,
    /// Speculative decoding's drafter, when the rule models one: its layers' KV per
    /// token joins the pool's.
    pub(crate) speculative: Option<Speculative>,
    /// Hypotheses the figure rests on.
    pub(crate) assumptions: Vec<String>,
    /// Soft problems.
    pub(crate) warnings: Vec<String>,
    /// The engine refuses to start before it sizes a pool, and why (vLLM's start-up
    /// check on free memory): no pool, the outcome refused, the reason a warning.
    pub(crate) refused: Option<String>,
    /// Several cards (llama.cpp's `--tensor-split`, vLLM's pipeline stages): each
    /// device's share, the most loaded one's being the lines above; empty for one card.
    pub(crate) devices: Vec<DeviceShare>,
}

/// The batch an engine serves an encoder-only model in ([`super::Engine::batch_budget`]):
/// no KV cache, one forward per batch; the rule's lines leave what is still free on the
/// card at that batch's peak.
pub struct Batch {
    /// The most tokens one forward takes (vLLM's `max_num_batched_tokens`, TEI's
    /// `--max-batch-tokens`).
    pub(crate) tokens: u64,
    /// Sequences of `max_model_len` tokens one batch holds.
    pub(crate) sequences: u64,
}

/// An engine that allocates its cache up front (llama.cpp): what it needs against the room.
pub(crate) struct Need {
    /// What its context needs (the allocated cache).
    pub(crate) bytes: u64,
    /// The cells that fit the room: the tokens it reports.
    pub(crate) tokens: u64,
    /// The sequences it serves.
    pub(crate) sequences: u64,
}

/// A single-group pool of `block`-token blocks (every engine but vLLM's hybrid case);
/// a sequence's blocks are its text's and its encoder's, each rounded up to a block.
pub(super) fn simple_pool(ctx: &Ctx, block: u64) -> Result<(u64, u64, u64), EstimateError> {
    let unit = block.max(1);
    Ok((
        prod(&[block, ctx.per_token])?,
        1,
        ctx.max_model_len
            .div_ceil(unit)
            .checked_add(ctx.encoder_tokens.div_ceil(unit))
            .ok_or(EstimateError::Overflow {
                what: "blocks per sequence",
            })?,
    ))
}

/// The common ending: pool → blocks → tokens and sequences, the outcome and its margin.
pub(super) fn finish(
    engine: EngineId,
    ctx: &Ctx,
    mut d: Draft,
) -> Result<EngineBudget, EstimateError> {
    let speculative = d.speculative.take();
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
    let kv = match (&d.refused, d.pool) {
        (Some(_), _) => 0,
        (None, Some(p)) => i128::from(p),
        (None, None) => {
            i128::from(first.bytes)
                .checked_sub(subtracted)
                .ok_or(EstimateError::Overflow {
                    what: "engine budget",
                })?
        }
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
    if let Some(why) = d.refused.take() {
        d.warnings.push(why);
    } else if kv_capacity_bytes <= 0 {
        d.warnings.push(
            engine
                .refusal()
                .unwrap_or("nothing is left for the KV cache on this card")
                .into(),
        );
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
    let most_loaded = d.devices.iter().find(|s| s.most_loaded);
    Ok(EngineBudget {
        batch_tokens: None,
        engine,
        version: d.version.to_string(),
        // Over several cards, the most loaded one's.
        card: most_loaded
            .map_or(ctx.card.id, |s| s.card.as_str())
            .to_string(),
        card_name: most_loaded
            .map_or(ctx.card.name, |s| s.card_name.as_str())
            .to_string(),
        capacity_bytes: d.capacity,
        capacity_kind: d.capacity_kind.to_string(),
        lines: d.lines,
        kv_capacity_bytes,
        kv_cache_bytes: d.kv_cache_bytes,
        host_weights_bytes,
        // The drafter's layers share the pool (vLLM's speculative decoding). Over
        // several cards a pool engine's blocks are the most loaded GPU's: its layers'
        // bytes per token (one group: the block's bytes ÷ its tokens).
        kv_bytes_per_token: if !d.devices.is_empty() && d.need.is_none() && d.groups == 1 {
            d.group_block_bytes
                .checked_div(d.block)
                .unwrap_or(ctx.per_token)
        } else {
            ctx.per_token
        }
        .saturating_add(
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
        devices: d.devices,
        assumptions: d.assumptions,
        warnings: d.warnings,
    })
}

/// The common ending of an encoder's batch: no KV pool, so no blocks and no tokens
/// cached; what the lines leave is what is still free on the card at the largest
/// batch's peak (negative: that batch runs out of memory), and the margin is that room
/// for one sequence and for the asked sequences alike (they are served in batches,
/// each at most the batch measured).
pub(super) fn finish_batch(
    engine: EngineId,
    ctx: &Ctx,
    mut d: Draft,
    batch: &Batch,
) -> Result<EngineBudget, EstimateError> {
    let (first, rest) = d
        .lines
        .split_first()
        .ok_or(EstimateError::invalid("engine", "no budget"))?;
    let room = rest
        .iter()
        .filter(|l| l.subtracted)
        .try_fold(i128::from(first.bytes), |acc, l| {
            acc.checked_sub(i128::from(l.bytes))
        })
        .and_then(|r| i64::try_from(r).ok())
        .ok_or(EstimateError::Overflow {
            what: "engine budget",
        })?;
    let unc = i64::try_from(d.uncertainty).unwrap_or(i64::MAX);
    let judge = |margin: i64| {
        if margin < unc.saturating_neg() {
            Outcome::Refused
        } else if margin <= unc {
            Outcome::Borderline
        } else {
            Outcome::Fits
        }
    };
    let mml = ctx.max_model_len;
    // The engine refuses to start (vLLM's batch below max-model-len, its start-up
    // check), or a batch holds no sequence.
    let stops = d.refused.is_some() || batch.sequences == 0;
    let outcome = if stops { Outcome::Refused } else { judge(room) };
    let mut workload_margin = room;
    if let Some(c) = ctx.input.context
        && c.saturating_add(ctx.input.generate) > mml
    {
        workload_margin = workload_margin.min(-1);
        d.warnings.push(format!(
            "a sequence of {} tokens is longer than the {mml} the engine serves one",
            c.saturating_add(ctx.input.generate)
        ));
    }
    let workload_outcome = if stops {
        Outcome::Refused
    } else {
        judge(workload_margin)
    };
    if let Some(why) = d.refused.take() {
        d.warnings.push(why);
    } else if room < 0 {
        d.warnings.push(format!(
            "the largest batch ({} tokens) runs out of memory on this card: {} short",
            batch.tokens,
            gib_text(room.unsigned_abs())
        ));
    }
    if outcome == Outcome::Borderline {
        d.warnings.push(format!(
            "borderline: {} {} at the largest batch's peak, within ±{}",
            gib_text(room.unsigned_abs()),
            if room < 0 { "short" } else { "to spare" },
            gib_text(d.uncertainty)
        ));
    }
    Ok(EngineBudget {
        engine,
        version: d.version.to_string(),
        card: ctx.card.id.to_string(),
        card_name: ctx.card.name.to_string(),
        capacity_bytes: d.capacity,
        capacity_kind: d.capacity_kind.to_string(),
        lines: d.lines,
        kv_capacity_bytes: room,
        kv_cache_bytes: None,
        host_weights_bytes: None,
        kv_bytes_per_token: 0,
        block_size: 1,
        kv_capacity_tokens: 0,
        max_model_len: mml,
        max_sequences: if room > 0 && !stops {
            batch.sequences
        } else {
            0
        },
        fits_one_sequence: !stops && room > 0,
        outcome,
        margin_bytes: room,
        sequences: ctx.input.sequences.max(1),
        workload_margin_bytes: workload_margin,
        workload_outcome,
        uncertainty_bytes: d.uncertainty,
        speculative: None,
        batch_tokens: Some(batch.tokens),
        devices: d.devices,
        assumptions: d.assumptions,
        warnings: d.warnings,
    })
}
