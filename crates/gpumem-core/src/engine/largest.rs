//! The largest workload that fits a card: one answer per question.
//!
//! With an engine named, the largest context and the most sequences are that
//! engine's: the longest `max-model-len` its pool serves one sequence of (vLLM's own
//! `--max-model-len auto`), and the sequences of the context its pool holds at once.
//! Without one, they come from the estimate (transients and the reserve included),
//! by binary search: the per-device need never decreases when the context or the
//! sequences grow, so the boundary found is exact to the token. Either way a context
//! beyond the model's trained positions is flagged, never silently offered.

use serde::{Deserialize, Serialize};

use super::arith::search;
use super::budget::budget;
use super::flags::EngineParams;
use crate::arch::MAX_DIM;
use crate::catalogue::GpuCard;
use crate::estimate::{EstimateInput, estimate};

/// The largest workload that fits one card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Largest {
    /// Catalogue id (over several cards, llama.cpp's split, their ids comma-separated).
    pub card: String,
    /// Capacity compared against (the engine's first line with an engine).
    pub capacity_bytes: u64,
    /// Whose answer: the engine's name (its pool) or "estimate" (no engine: the
    /// estimate's need, transients and reserve included, against the card).
    pub basis: String,
    /// Largest prompt tokens per sequence (`context`; with an engine, its
    /// max-model-len) at `at_sequences`; `None` when not even one token fits.
    pub largest_context: Option<u64>,
    /// The sequences it was searched at.
    pub at_sequences: u64,
    /// Most sequences at `at_context`; `None` when not even one fits or no context was given.
    pub most_sequences: Option<u64>,
    /// The context it was searched at.
    pub at_context: Option<u64>,
    /// Positions the model was trained for, when known.
    pub trained_positions: Option<u64>,
    /// Positions its RoPE scaling reaches, when the config's scaling goes past them.
    pub scaled_positions: Option<u64>,
    /// Whether `largest_context` exceeds what the model serves (the scaled positions,
    /// else the trained ones; the search is capped there with an engine, without one
    /// it says so).
    pub beyond_trained: bool,
}

impl Largest {
    /// What the largest context means against the model's positions, in one phrase
    /// shared by the CLI and the page: past the positions it serves (trained, or
    /// reached by the config's RoPE scaling), capped at them, or within the scaling.
    pub fn positions_note(&self) -> Option<String> {
        let g = crate::units::group_digits;
        let c = self.largest_context?;
        let trained = self.trained_positions;
        let limit = self.scaled_positions.or(trained)?;
        let reach = |r: u64| format!("the {} positions its RoPE scaling reaches", g(r));
        Some(match (self.scaled_positions, trained) {
            (Some(r), Some(t)) if self.beyond_trained => {
                format!("beyond {} (trained for {})", reach(r), g(t))
            }
            (Some(r), None) if self.beyond_trained => format!("beyond {}", reach(r)),
            (None, Some(t)) if self.beyond_trained => format!(
                "beyond the {} positions it was trained for; its config declares no RoPE scaling that reaches further",
                g(t)
            ),
            (Some(r), _) if self.basis != "estimate" && c == limit => {
                format!("capped at {}; the pool holds more", reach(r))
            }
            (None, Some(t)) if self.basis != "estimate" && c == limit => format!(
                "capped at the {} positions it was trained for; the pool holds more",
                g(t)
            ),
            (Some(r), Some(t)) if c > t => {
                format!("past the {} trained positions, within {}", g(t), reach(r))
            }
            _ => return None,
        })
    }
}

/// Whether `input` fits `capacity` per device; an input the estimator refuses
/// (overflow, absurd size) does not fit.
fn fits(input: &EstimateInput, capacity: u64) -> bool {
    estimate(input).is_ok_and(|e| e.per_device_bytes <= capacity)
}

/// The largest context (prompt tokens per sequence, `generate` kept) that fits
/// `card` at `input.sequences`, from the estimate.
pub fn largest_context(input: &EstimateInput, card: &GpuCard) -> Option<u64> {
    let (capacity, _) = card.capacity();
    search(MAX_DIM, |c| {
        let mut i = input.clone();
        i.context = Some(c);
        fits(&i, capacity)
    })
}

/// The most sequences that fit `card` at `input.context` (`None` without a context),
/// from the estimate.
pub fn most_sequences(input: &EstimateInput, card: &GpuCard) -> Option<u64> {
    input.context?;
    let (capacity, _) = card.capacity();
    search(MAX_DIM, |s| {
        let mut i = input.clone();
        i.sequences = s;
        fits(&i, capacity)
    })
}

/// Both answers for one card: from `params.engine`'s pool when one is named (and its
/// budget can be computed), else from the estimate.
pub fn largest(input: &EstimateInput, card: &GpuCard, params: &EngineParams) -> Largest {
    let limit = input.position_limit();
    if let Some(l) = params.engine.and_then(|_| from_engine(input, card, params)) {
        return l;
    }
    let lc = largest_context(input, card);
    Largest {
        card: card.id.to_string(),
        capacity_bytes: card.capacity().0,
        basis: "estimate".into(),
        largest_context: lc,
        at_sequences: input.sequences,
        most_sequences: most_sequences(input, card),
        at_context: input.context,
        trained_positions: input.max_position,
        scaled_positions: input.rope_positions,
        beyond_trained: matches!((lc, limit), (Some(c), Some(t)) if c.saturating_add(input.generate) > t),
    }
}

/// The engine's answers: the longest max-model-len one sequence of which its pool
/// serves (capped at the model's positions, scaled ones included, as vLLM caps
/// `auto`), and its sequences
/// at the given context.
fn from_engine(input: &EstimateInput, card: &GpuCard, params: &EngineParams) -> Option<Largest> {
    let est = estimate(input).ok()?;
    let at = |m: u64| {
        let p = EngineParams {
            card: Some(*card),
            max_model_len: Some(m),
            max_model_len_auto: false,
            ..params.clone()
        };
        budget(input, &est, &p).ok()
    };
    let base = at(input
        .context
        .map_or(1, |c| c.saturating_add(input.generate)))?;
    let cap = input.position_limit().unwrap_or(MAX_DIM);
    let lc = search(cap, |m| at(m).is_some_and(|b| b.fits_one_sequence));
    let most = input
        .context
        .and_then(|_| Some(base.max_sequences).filter(|n| *n > 0));
    Some(Largest {
        // Several cards (llama.cpp's split): all of them, as --card names them; the
        // capacity is the most loaded one's.
        card: if params.devices.is_empty() {
            card.id.to_string()
        } else {
            params
                .devices
                .iter()
                .map(|c| c.id)
                .collect::<Vec<_>>()
                .join(",")
        },
        capacity_bytes: base.capacity_bytes,
        basis: base.engine.name().into(),
        largest_context: lc,
        at_sequences: 1,
        most_sequences: most,
        at_context: input.context.map(|c| c.saturating_add(input.generate)),
        trained_positions: input.max_position,
        scaled_positions: input.rope_positions,
        beyond_trained: false,
    })
}
