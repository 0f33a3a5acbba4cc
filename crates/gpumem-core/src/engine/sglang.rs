//! SGLang: the pool is what is free after loading, less the share of the card it keeps
//! for activations and CUDA graphs.
//!
//! sglang 0.5.23 `python/sglang/srt/mem_cache/kv_cache_configurator.py`
//! `_profile_available_bytes`: rest = free after loading − pre-load memory × (1 −
//! mem_fraction_static); tokens = rest ÷ the per-token cell (page size 1). When
//! `--mem-fraction-static` is not given, `arg_groups/memory_hook.py`
//! `handle_gpu_memory_settings` picks it from the card (nvidia-smi's total, MiB) and
//! tp × pp: reserved = 512 + max(chunked prefill, 2048) × 1.5 + tp × pp ÷ 8 × 1024 +
//! 2 × the decode CUDA-graph batch, at least 10 GiB on cards over 60 GiB; fraction =
//! round((total − reserved) ÷ total, 3).

use super::*;

/// Chunked-prefill size and decode CUDA-graph batch by card size (MiB) and tp, as
/// `handle_gpu_memory_settings` sets them: (below this many MiB, chunk, batch at tp < 4,
/// batch at tp ≥ 4).
const BY_CARD: [(u64, u64, u64, u64); 6] = [
    (20 * 1024, 2048, 8, 8),
    (35 * 1024, 4096, 48, 160),
    (60 * 1024, 4096, 32, 160),
    (90 * 1024, 8192, 256, 512),
    (160 * 1024, 8192, 256, 512),
    (u64::MAX, 16384, 512, 512),
];

/// SGLang's default `mem_fraction_static` (parts per 10^18) and the chunked-prefill size.
pub(super) fn default_fraction(total_mib: u64, tp: u64, pp: u64, chunk: Option<u64>) -> (u64, u64) {
    let row = BY_CARD
        .iter()
        .find(|r| total_mib < r.0)
        .unwrap_or(&BY_CARD[5]);
    let chunk = chunk.unwrap_or(row.1);
    let bs = if tp < 4 { row.2 } else { row.3 };
    // In eighths of a MiB, so 1.5 × chunk and tp × pp ÷ 8 × 1024 stay whole.
    let mut r8 = 4096u64
        .saturating_add(chunk.max(2048).saturating_mul(12))
        .saturating_add(tp.saturating_mul(pp).saturating_mul(1024))
        .saturating_add(bs.saturating_mul(16));
    if total_mib > 60 * 1024 {
        r8 = r8.max(10 * 1024 * 8);
    }
    let t8 = total_mib.saturating_mul(8).max(1);
    // round(x, 3) in thousandths, half away from zero.
    let thousandths = t8
        .saturating_sub(r8)
        .saturating_mul(2000)
        .saturating_add(t8)
        .checked_div(t8.saturating_mul(2))
        .unwrap_or(0);
    (thousandths.saturating_mul(ONE / 1000), chunk)
}

pub(super) fn rule(c: &Ctx) -> Result<Draft, EstimateError> {
    let (capacity, kind) = catalogue_capacity(&c.card);
    let mut assumptions = Vec::new();
    let mfs = match c.params.mem_fraction_static {
        Some(f) => f,
        None => {
            let (f, chunk) = default_fraction(
                capacity / MIB,
                c.input.tp.max(1),
                c.input.pp.max(1),
                c.params.max_num_batched_tokens,
            );
            assumptions.push(format!("mem-fraction-static {} by SGLang's rule for this card and tp (chunked prefill {chunk})", fraction_text(f)));
            f
        }
    };
    let total = format!("{capacity} B ({kind})");
    let ctx_mib = 512;
    let reserved = times_fraction(capacity, ONE.saturating_sub(mfs), false)?;
    let lines = vec![
        line(
            "budget",
            "Card total",
            capacity,
            Kind::Computed,
            "total_gpu_memory".into(),
            &[("total", total.clone())],
            "python/sglang/srt/mem_cache/kv_cache_configurator.py (_profile_available_bytes)",
        ),
        line(
            "cuda_context",
            "CUDA context and NCCL (assumed; not free after loading)",
            mib(ctx_mib),
            Kind::Assumed,
            format!("{ctx_mib} MiB"),
            &[],
            "python/sglang/srt/mem_cache/kv_cache_configurator.py (available memory after load)",
        ),
        line(
            "weights",
            "Weights on this device",
            c.weights,
            Kind::Computed,
            "the estimate's weight lines, most loaded device".into(),
            &[("tp", c.input.tp.to_string())],
            "the estimator",
        ),
        line(
            "reserved",
            "Kept for activations and CUDA graphs: total × (1 − mem_fraction_static)",
            reserved,
            Kind::Computed,
            "total × (1 − mem_fraction_static)".into(),
            &[
                ("total", total),
                ("mem-fraction-static", fraction_text(mfs)),
            ],
            "python/sglang/srt/mem_cache/kv_cache_configurator.py (slack)",
        ),
    ];
    let (group_block_bytes, groups, seq_blocks) = simple_pool(c, 1)?;
    Ok(Draft {
        version: "0.5",
        capacity,
        capacity_kind: kind,
        lines,
        block: 1,
        group_block_bytes,
        groups,
        seq_blocks,
        kv_cache_bytes: None,
        pool: None,
        need: None,
        uncertainty: mib(ctx_mib).checked_div(2).unwrap_or(0),
        assumptions,
        warnings: Vec::new(),
    })
}
