//! Hugging Face TGI: blocks from what is free after a warmup prefill, less its wiggle room.
//!
//! text-generation-inference `server/text_generation_server/models/flash_causal_lm.py`
//! `warmup`: after a prefill of `max_batch_prefill_tokens`, free =
//! `get_free_memory(device, MEMORY_FRACTION × TGI_WIGGLE_ROOM)` = free − (1 − fraction)
//! × total (`utils/import_utils.py`); blocks = free ÷ block bytes. `TGI_WIGGLE_ROOM`
//! is 0.90 and `--cuda-memory-fraction` 1.0 by default (`models/globals.py`).

use super::*;

pub(super) fn rule(c: &Ctx) -> Result<Draft, EstimateError> {
    let (capacity, kind) = catalogue_capacity(&c.card);
    let batched = c.params.max_num_batched_tokens.unwrap_or(4096);
    let peak = forward_peak(c.input, batched)?;
    let kept = times_fraction(capacity, ONE / 10, false)?;
    let ctx_mib = 512;
    let lines = vec![
        line("budget", "Card total", capacity, Kind::Computed, "total memory (torch.cuda.mem_get_info)".into(), &[("total", format!("{capacity} B ({kind})"))], "server/text_generation_server/models/flash_causal_lm.py (warmup)"),
        line("cuda_context", "CUDA context (assumed; not free at warmup)", mib(ctx_mib), Kind::Assumed, format!("{ctx_mib} MiB"), &[], "server/text_generation_server/models/flash_causal_lm.py (warmup: get_free_memory)"),
        line("weights", "Weights on this device", c.weights, Kind::Computed, "the estimate's weight lines, most loaded device".into(), &[("tp", c.input.tp.to_string())], "the estimator"),
        line("activation_peak", "Activations of the warmup prefill, kept by torch's allocator (assumed)", peak, Kind::Assumed, "the estimator's prefill intermediates for one forward of max-batch-prefill-tokens tokens".into(), &[("max-batch-prefill-tokens", batched.to_string())], "server/text_generation_server/models/flash_causal_lm.py (warmup)"),
        line("wiggle_room", "Left free: total × (1 − MEMORY_FRACTION × TGI_WIGGLE_ROOM)", kept, Kind::Computed, "total × (1 − 1.0 × 0.90)".into(), &[("cuda-memory-fraction", "1".into()), ("TGI_WIGGLE_ROOM", "0.9".into())], "server/text_generation_server/models/globals.py (TGI_WIGGLE_ROOM)"),
    ];
    let (group_block_bytes, groups, seq_blocks) = simple_pool(c, 16)?;
    Ok(Draft {
        version: "3",
        capacity,
        capacity_kind: kind,
        lines,
        block: 16,
        group_block_bytes,
        groups,
        seq_blocks,
        kv_cache_bytes: None,
        pool: None,
        need: None,
        uncertainty: sum(&[peak, mib(ctx_mib)])?.checked_div(4).unwrap_or(0),
        assumptions: Vec::new(),
        warnings: Vec::new(),
    })
}
