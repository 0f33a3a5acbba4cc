//! The pool a rule leaves, cut into blocks: what every engine's rule hands to the
//! common ending ([`Draft`]), and the single-group cut most engines use.

use super::arith::prod;
use super::outcome::EngineLine;
use super::request::Ctx;
use crate::error::EstimateError;

/// What an engine's rule produces before the common ending (tokens, sequences, outcome).
pub(super) struct Draft {
    pub(super) version: &'static str,
    pub(super) capacity: u64,
    pub(super) capacity_kind: &'static str,
    pub(super) lines: Vec<EngineLine>,
    pub(super) block: u64,
    /// Bytes of one block across the layers of one group (vLLM's page × group size);
    /// `block × per-token` for a single group.
    pub(super) group_block_bytes: u64,
    /// KV-cache groups (vLLM's hybrid allocator); 1 otherwise.
    pub(super) groups: u64,
    /// Blocks one sequence of `max_model_len` takes (all groups).
    pub(super) seq_blocks: u64,
    /// The tokens reported are max concurrency × max_model_len (vLLM 0.22 onwards),
    /// not whole blocks per group.
    pub(super) tokens_by_concurrency: bool,
    pub(super) kv_cache_bytes: Option<u64>,
    /// The pool, when the engine does not derive it from the lines (llama.cpp's
    /// allocated cache, vLLM's `--kv-cache-memory-bytes`).
    pub(super) pool: Option<i64>,
    /// llama.cpp: what its context needs (the allocated cache), the cells that fit
    /// the room, and the sequences served; `None`: one sequence's blocks.
    pub(super) need: Option<Need>,
    pub(super) uncertainty: u64,
    pub(super) assumptions: Vec<String>,
    pub(super) warnings: Vec<String>,
}

/// An engine that allocates its cache up front (llama.cpp): what it needs against the room.
pub(super) struct Need {
    pub(super) bytes: u64,
    pub(super) tokens: u64,
    pub(super) sequences: u64,
}

/// A single-group pool of `block`-token blocks (every engine but vLLM's hybrid case).
pub(super) fn simple_pool(ctx: &Ctx, block: u64) -> Result<(u64, u64, u64), EstimateError> {
    Ok((
        prod(&[block, ctx.per_token])?,
        1,
        ctx.max_model_len.div_ceil(block.max(1)),
    ))
}
