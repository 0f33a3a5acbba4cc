//! SGLang: the pool is what is free after loading, less the share of the card it keeps
//! for activations and CUDA graphs.
//!
//! sglang 0.5.23 `python/sglang/srt/mem_cache/kv_cache_configurator.py`
//! `_profile_available_bytes`: rest = free after loading − pre_model_load_memory ×
//! (1 − mem_fraction_static), where pre_model_load_memory is what was free once the
//! distributed init was done (`model_runner.py` `init_torch_distributed`: the CUDA
//! context, NCCL and the custom all-reduce buffers already taken); tokens = rest ÷
//! the per-token cell (page size 1). With free after loading = pre − weights, the
//! pool is pre × mem_fraction_static − weights. When `--mem-fraction-static` is not
//! given, `arg_groups/memory_hook.py` `handle_gpu_memory_settings` picks it from the
//! card (nvidia-smi's total, MiB) and tp × pp: reserved = 512 + max(chunked prefill,
//! 2048) × 1.5 + tp × pp ÷ 8 × 1024 + 2 × the decode CUDA-graph batch, at least 10 GiB
//! on cards over 60 GiB; fraction = round((total − reserved) ÷ total, 3).
//!
//! Memory other processes hold (`--memory-in-use`) is not free when SGLang measures
//! pre_model_load_memory, so it leaves the pool × mem_fraction_static.
//!
//! Checked against the one public SGLang start-up log found
//! (https://github.com/vllm-project/vllm/issues/21348:
//! Qwen3-235B-A22B-FP8, tp 4 on H100s, `--mem-fraction-static 0.93`: 367 404 tokens).

use serde::{Deserialize, Serialize};

use super::arith::{MIB, mib, prod, sum};
use super::contract::{Engine, Info};
use super::flags::{
    BATCHED_TOKENS, Flag, INTERCONNECT, MAX_MODEL_LEN, MEMORY_IN_USE, field, fraction,
};
use super::fraction::{ONE, fraction_text, times_fraction};
use super::outcome::line;
use super::pool::{Draft, simple_pool};
use super::request::{
    COMM_BUFFERS_MIB, CONTEXT_MIB, Ctx, Interconnect, PCIE_COMM_MIB, catalogue_capacity,
    interconnect, load_rounding,
};
use crate::error::EstimateError;
use crate::estimate::Kind;
use crate::fields::FieldKind;

/// The SGLang accounting carried; `--engine sglang` is the newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SglangVersion {
    /// 0.5.23 (`handle_gpu_memory_settings`: the reserve from the chunked prefill, tp × pp
    /// and the CUDA-graph batch).
    #[serde(rename = "0.5.23")]
    V0523,
    /// 0.5.0, mid-2025 (`ServerArgs.__post_init__`: a reserve per card size).
    #[serde(rename = "0.5.0")]
    V050,
}

impl SglangVersion {
    /// Every release carried, in the order of the engine's `releases` (newest first).
    pub const ALL: [SglangVersion; 2] = [SglangVersion::V0523, SglangVersion::V050];

    /// The release at `release`'s place in [`SglangVersion::ALL`]; the newest when
    /// none was named.
    pub fn of(release: Option<usize>) -> SglangVersion {
        release
            .and_then(|i| SglangVersion::ALL.get(i).copied())
            .unwrap_or(SglangVersion::V0523)
    }

    /// Its place in [`SglangVersion::ALL`].
    pub fn index(self) -> usize {
        SglangVersion::ALL
            .iter()
            .position(|v| *v == self)
            .unwrap_or(0)
    }

    /// Parses "0.5.23" (and later 0.5 releases), "0.5.0" … "0.5.2" and "0.4.x".
    pub fn parse(text: &str) -> Result<SglangVersion, EstimateError> {
        let mut parts = text.trim().trim_start_matches('v').split('.');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("0"), Some("4"), _) => Ok(SglangVersion::V050),
            (Some("0"), Some("5"), None | Some("0" | "1" | "2")) => Ok(SglangVersion::V050),
            (Some("0"), Some("5"), Some(_)) => Ok(SglangVersion::V0523),
            _ => Err(EstimateError::invalid(
                "engine",
                format!(
                    "sglang@{text}: the rules carried are sglang (0.5.23) and sglang@0.5.0 (mid-2025, 0.4 too)"
                ),
            )),
        }
    }
}

/// The mid-2025 default: sglang `python/sglang/srt/server_args.py`
/// `ServerArgs.__post_init__` (`_handle_mem_fraction_static`, the text stored in the
/// search index beside the `--enable-flashinfer-mxfp4-moe` deprecation of 0.5.0): the
/// reserve is (2.8 + tp × pp ÷ 10) GiB below 35 GiB of card (nvidia-smi's total, MiB),
/// (9.5 + tp × pp ÷ 2) GiB below 90, (12 + tp × pp ÷ 2) GiB below 160, 32 GiB above;
/// fraction = round((total − reserve) ÷ total, 3). Chunked prefill 2048 below 35 GiB,
/// 8192 below 160, 16384 above (the rows' comments). Speculative decoding (+2 GiB) and
/// DP attention (+4 GiB) are not modelled.
pub(super) fn fraction_050(total_mib: u64, tp: u64, pp: u64, chunk: Option<u64>) -> (u64, u64) {
    let p = tp.saturating_mul(pp);
    // In tenths of a MiB: (2.8 + p ÷ 10) GiB = (28 + p) × 1024 tenths, and so on.
    let reserve10 = if total_mib < 35 * 1024 {
        28u64
            .saturating_mul(1024)
            .saturating_add(p.saturating_mul(1024))
    } else if total_mib < 90 * 1024 {
        95u64
            .saturating_mul(1024)
            .saturating_add(p.saturating_mul(5 * 1024))
    } else if total_mib < 160 * 1024 {
        120u64
            .saturating_mul(1024)
            .saturating_add(p.saturating_mul(5 * 1024))
    } else {
        320 * 1024
    };
    let default_chunk = if total_mib < 35 * 1024 {
        2048
    } else if total_mib < 160 * 1024 {
        8192
    } else {
        16384
    };
    let t10 = total_mib.saturating_mul(10).max(1);
    let thousandths = t10
        .saturating_sub(reserve10)
        .saturating_mul(2000)
        .saturating_add(t10)
        .checked_div(t10.saturating_mul(2))
        .unwrap_or(0);
    (
        thousandths.saturating_mul(ONE / 1000),
        chunk.unwrap_or(default_chunk),
    )
}

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

/// `--mem-fraction-static`: the share of what is free before loading kept for the
/// weights and the KV pool.
const MEM_FRACTION_STATIC: Flag = Flag::new(
    field(
        "mem-fraction-static",
        FieldKind::Fraction,
        "SGLang static fraction",
        "by card and tp",
        "SGLang: fraction for weights + KV pool",
    ),
    fraction,
);

/// SGLang (`python -m sglang.launch_server`).
pub struct Sglang;

impl Engine for Sglang {
    const INFO: Info = Info {
        name: "sglang",
        aliases: &[],
        summary: "SGLang.",
        releases: &[
            ("sglang", "SGLang 0.5.23"),
            ("sglang@0.5.0", "SGLang 0.5.0 (mid-2025)"),
        ],
        release: Some(|text| SglangVersion::parse(text).map(SglangVersion::index)),
        hint: "sglang (sglang@0.5.0)",
        // `max-num-batched-tokens` is its `--chunked-prefill-size`.
        flags: &[
            &MAX_MODEL_LEN,
            &BATCHED_TOKENS,
            &MEM_FRACTION_STATIC,
            &MEMORY_IN_USE,
            &INTERCONNECT,
        ],
        formats: &["bf16", "fp8", "int8", "awq-4-g128"],
        windows: false,
        shared_context: false,
        // CUDA and ROCm only.
        metal: false,
        refusal: Some("Not enough memory: SGLang refuses to start (raise mem-fraction-static)"),
    };

    /// The image's tokens are padded ahead of the prompt and take cells of the one
    /// pool, each cell over all layers (`models/mllama.py` `pad_input_ids` at 013902a8);
    /// both releases carried run it alike.
    fn cross_attention(
        x: &super::cross::CrossLayers,
        _params: &super::flags::EngineParams,
    ) -> Result<super::cross::Cross, EstimateError> {
        Ok(super::cross::Cross {
            per_token: x.all,
            encoder_tokens: 0,
            length_tokens: x.tokens,
            assumption: format!(
                "cross-attention: each pool cell spans all {} layers, the {} cross-attention layers' included, and a request's {} image tokens are padded ahead of its prompt (they count in its length)",
                x.layers, x.cross, x.tokens
            ),
        })
    }

    fn budget(c: &Ctx) -> Result<Draft, EstimateError> {
        rule(c)
    }
}

fn rule(c: &Ctx) -> Result<Draft, EstimateError> {
    let version = SglangVersion::of(c.params.release);
    let (capacity, _) = catalogue_capacity(&c.card);
    let mut assumptions = Vec::new();
    let mfs = match c.params.fraction(MEM_FRACTION_STATIC.key()) {
        Some(f) => f,
        None => {
            let rule = match version {
                SglangVersion::V050 => fraction_050,
                _ => default_fraction,
            };
            let (f, chunk) = rule(
                capacity / MIB,
                c.input.tp.max(1),
                c.input.pp.max(1),
                c.params.count(BATCHED_TOKENS.key()),
            );
            assumptions.push(format!("mem-fraction-static {} by SGLang's rule for this card and tp (chunked prefill {chunk})", fraction_text(f)));
            f
        }
    };
    // Free memory is read through torch (`get_available_gpu_memory`:
    // torch.cuda.mem_get_info), so the card's total is torch's.
    let (total, derived) = c.card.torch_total();
    let multi = c.input.tp.max(1).saturating_mul(c.input.pp.max(1)) > 1;
    // What the distributed init takes at tp × pp > 1 follows the interconnect: on
    // NVLink boards NCCL's many channels, its NVLS buffers and the NVLink-only
    // all-reduces (`COMM_BUFFERS_MIB`); on PCIe-only GPUs two NCCL channels and, beyond
    // two GPUs, no custom all-reduce (`custom_all_reduce.py`: "not supported on more
    // than two PCIe-only GPUs"): `PCIE_COMM_MIB`.
    let link = interconnect(c);
    let comm_mib = match link.0 {
        Interconnect::Pcie => PCIE_COMM_MIB,
        Interconnect::NvLink => COMM_BUFFERS_MIB,
    };
    let pre_used_mib = if multi {
        CONTEXT_MIB.saturating_add(comm_mib)
    } else {
        CONTEXT_MIB
    };
    // Memory other processes hold is not free when SGLang measures: sglang 0.5.23
    // `model_runner.py` `init_torch_distributed` returns pre_model_load_memory =
    // `get_available_gpu_memory(distributed=world_size > 1)`, torch.cuda.mem_get_info's
    // free memory, the smallest over the ranks (read at sgl-project/sglang 0005834c; the
    // same call in 0.4.x `init_torch_distributed`, whose `min_per_gpu_memory` feeds
    // `profile_max_num_token`). At tp > 1 the figure given is each GPU's (the smallest
    // rank's sets the pool; SGLang warns, "The memory capacity is unbalanced", when one
    // rank has less than 0.9 × another's).
    let in_use = c.params.count(MEMORY_IN_USE.key()).unwrap_or(0);
    let pre = total
        .saturating_sub(mib(pre_used_mib))
        .saturating_sub(in_use);
    let reserved = times_fraction(pre, ONE.saturating_sub(mfs), false)?;
    // What loading takes beyond the checkpoint: the rotary cos/sin cache, one buffer
    // [max_position, rotary_dim] shared by the layers (`get_rope` memoises it), which
    // SGLang keeps in fp32 on CUDA ("cache needs to be in FP32 for numerical
    // stability": `layers/rotary_embedding.py` in 0.4.10, `rotary_embedding/base.py` in
    // 0.5.23; 0.4.2 still cast it to the model dtype, half as much). A scaled RoPE's
    // cache reaches as far as its scaling, as vLLM's does.
    let rope = match c.input.arch {
        Some(a) if a.learned_positions == 0 => {
            let dim = a.mla.map_or(a.head_dim, |m| m.qk_rope_dim);
            let rows = c.input.rope_positions.or(c.input.max_position).unwrap_or(0);
            prod(&[rows, dim, 4])?
        }
        _ => 0,
    };
    let weights = sum(&[c.weights, rope])?;
    let rounding = load_rounding(c.input, rope)?;
    let total_text = format!(
        "{total} B (torch{})",
        if derived { ", derived" } else { "" }
    );
    let mut lines = vec![
        line(
            "budget",
            "Card total as torch reports it",
            total,
            if derived {
                Kind::Assumed
            } else {
                Kind::Computed
            },
            "torch.cuda.mem_get_info's total".into(),
            &[("total", total_text)],
            "python/sglang/srt/utils (get_available_gpu_memory)",
        ),
        line(
            "cuda_context",
            if multi {
                "CUDA context, NCCL and all-reduce buffers before loading (assumed)"
            } else {
                "CUDA context before loading (assumed)"
            },
            mib(pre_used_mib),
            Kind::Assumed,
            if multi {
                match link.0 {
                    Interconnect::NvLink => format!(
                        "{CONTEXT_MIB} MiB context + {COMM_BUFFERS_MIB} MiB at tp × pp > 1 (vLLM 0.19's tp ≥ 2 start-ups on H100s); {}",
                        link.1
                    ),
                    Interconnect::Pcie => format!(
                        "{CONTEXT_MIB} MiB context + {PCIE_COMM_MIB} MiB at tp × pp > 1 (NCCL's two PCIe channels, no NVLink-only all-reduce: vLLM's tp ≥ 2 figure without them); {}",
                        link.1
                    ),
                }
            } else {
                format!("{CONTEXT_MIB} MiB")
            },
            &[
                ("tp", c.input.tp.to_string()),
                ("pp", c.input.pp.to_string()),
            ],
            "python/sglang/srt/model_executor/model_runner.py (init_torch_distributed: pre_model_load_memory)",
        ),
        line(
            "memory_in_use",
            "Held by other processes before start-up (--memory-in-use)",
            in_use,
            Kind::Computed,
            "as given: not free when SGLang measures pre_model_load_memory".into(),
            &[("memory-in-use", format!("{in_use} B"))],
            "python/sglang/srt/model_executor/model_runner.py (init_torch_distributed: get_available_gpu_memory)",
        ),
        line(
            "weights",
            "Weights on this device (with the rotary cache, fp32)",
            weights,
            Kind::Computed,
            "the estimate's weight lines, most loaded device + max_position × rotary_dim × 4".into(),
            &[
                ("tp", c.input.tp.to_string()),
                ("rotary-cache", rope.to_string()),
            ],
            "python/sglang/srt/layers/rotary_embedding.py (RotaryEmbedding.__init__: cos_sin_cache)",
        ),
        line(
            "load_rounding",
            "Weights' segments beyond the tensors (torch's caching allocator)",
            rounding.as_ref().map_or(0, |r| r.0),
            Kind::Computed,
            rounding.as_ref().map_or_else(
                || "not replayed for this architecture or format".into(),
                |r| r.1.clone(),
            ),
            &[("tp", c.input.tp.to_string())],
            "python/sglang/srt/model_loader/loader.py (DefaultModelLoader.load_model: the model built on the device); c10/cuda/CUDACachingAllocator.cpp (get_allocation_size)",
        ),
        line(
            "reserved",
            "Kept for activations and CUDA graphs: pre_model_load_memory × (1 − mem_fraction_static)",
            reserved,
            Kind::Computed,
            "(total − the memory taken before loading − memory in use elsewhere) × (1 − mem_fraction_static)".into(),
            &[
                ("pre_model_load_memory", format!("{pre} B")),
                ("mem-fraction-static", fraction_text(mfs)),
            ],
            "python/sglang/srt/mem_cache/kv_cache_configurator.py (_profile_available_bytes)",
        ),
    ];
    if in_use == 0 {
        lines.retain(|l| l.key != "memory_in_use");
    }
    if rounding.is_none() {
        lines.retain(|l| l.key != "load_rounding");
    }
    let (group_block_bytes, groups, seq_blocks) = simple_pool(c, 1)?;
    Ok(Draft {
        version: match version {
            SglangVersion::V050 => "0.5.0 (mid-2025)",
            _ => "0.5",
        },
        capacity: total,
        capacity_kind: if derived { "torch, derived" } else { "torch" },
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
        uncertainty: mib(pre_used_mib).checked_div(2).unwrap_or(0),
        assumptions,
        warnings: Vec::new(),
        refused: None,
        devices: Vec::new(),
    })
}

#[cfg(test)]
mod tests;
