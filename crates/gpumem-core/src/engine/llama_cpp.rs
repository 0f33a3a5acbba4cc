//! llama.cpp (`llama-server`): the KV cache is allocated for the context's cells, in
//! its own block formats; what is left on the card is the room around it.
//!
//! `src/llama-context.cpp`: `n_ctx` is padded to a multiple of 256 and split among the
//! server's slots (`n_ctx_seq`, padded again, one stream each); the KV cache
//! (`src/llama-kv-cache.cpp`) holds, per layer, one K row of `n_embd_k_gqa` values
//! and one V row of `n_embd_v_gqa` values per cell, each row `ggml_row_size(type, n)`
//! bytes: block formats store 32 values per block (`ggml/src/ggml.c` type traits:
//! q8_0 34 B, q4_0 18 B, q4_1 20 B, q5_0 22 B, q5_1 24 B, iq4_nl 18 B). Layers with a
//! sliding window get their own cache (`src/llama-kv-cache-iswa.cpp`) of
//! GGML_PAD(min(n_ctx, n_swa × n_seq + n_ubatch), 256) cells — only for architectures
//! that run SWA, whose windows alternate with full layers (Gemma 2/3, Cohere 2,
//! gpt-oss, Llama 4); Phi-3 is loaded with `n_swa = 0` (`src/llama-model.cpp`,
//! "Phi SWA is currently disabled") and Llama/Mistral/Qwen2 read no window, so a
//! window on every layer is a full cache there. `-ngl` keeps the first layers, and
//! the token embeddings always, in host memory; `--n-cpu-moe N` the experts of the
//! first N layers.

use super::*;

/// A `--cache-type-k` / `--cache-type-v` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheType {
    /// 32-bit float.
    F32,
    /// 16-bit float (the default).
    F16,
    /// bfloat16.
    Bf16,
    /// 8-bit blocks of 32 values with an f16 scale: 34 B.
    Q8_0,
    /// 4-bit blocks with an f16 scale: 18 B.
    Q4_0,
    /// 4-bit blocks with f16 scale and min: 20 B.
    Q4_1,
    /// 5-bit blocks with an f16 scale: 22 B.
    Q5_0,
    /// 5-bit blocks with f16 scale and min: 24 B.
    Q5_1,
    /// 4-bit non-linear blocks with an f16 scale: 18 B.
    Iq4Nl,
}

/// Names and (values per block, bytes per block), `ggml/src/ggml.c` `type_traits`.
const TYPES: [(&str, CacheType, u64, u64); 9] = [
    ("f32", CacheType::F32, 1, 4),
    ("f16", CacheType::F16, 1, 2),
    ("bf16", CacheType::Bf16, 1, 2),
    ("q8_0", CacheType::Q8_0, 32, 34),
    ("q4_0", CacheType::Q4_0, 32, 18),
    ("q4_1", CacheType::Q4_1, 32, 20),
    ("q5_0", CacheType::Q5_0, 32, 22),
    ("q5_1", CacheType::Q5_1, 32, 24),
    ("iq4_nl", CacheType::Iq4Nl, 32, 18),
];

impl CacheType {
    /// Parses llama.cpp's name (case-insensitive).
    pub fn parse(field: &'static str, text: &str) -> Result<CacheType, EstimateError> {
        let t = text.trim().to_ascii_lowercase();
        TYPES.iter().find(|x| x.0 == t).map(|x| x.1).ok_or_else(|| {
            EstimateError::invalid(field, format!("{text:?} is not a llama.cpp cache type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)"))
        })
    }

    /// llama.cpp's name.
    pub fn name(self) -> &'static str {
        TYPES.iter().find(|x| x.1 == self).map_or("f16", |x| x.0)
    }

    /// `ggml_row_size`: bytes of a row of `n` values (`n` a multiple of the block).
    pub fn row_bytes(self, n: u64) -> Result<u64, EstimateError> {
        let (_, _, per, bytes) = TYPES
            .iter()
            .find(|x| x.1 == self)
            .copied()
            .unwrap_or(TYPES[1]);
        if !n.is_multiple_of(per) {
            return Err(EstimateError::invalid(
                "cache-type-k",
                format!("a row of {n} values is not a whole number of {per}-value blocks"),
            ));
        }
        prod(&[n.checked_div(per).unwrap_or(0), bytes])
    }
}

const SRC_KV: &str = "src/llama-kv-cache.cpp (K and V rows of ggml_row_size per cell)";

pub(super) fn rule(c: &Ctx) -> Result<Draft, EstimateError> {
    let p = c.params;
    let input = c.input;
    let (capacity, kind) = catalogue_capacity(&c.card);
    let (tk, tv) = (
        p.cache_type_k.unwrap_or(CacheType::F16),
        p.cache_type_v.unwrap_or(CacheType::F16),
    );
    let ubatch = p.max_num_batched_tokens.unwrap_or(512);
    let mut assumptions = Vec::new();
    // llama-server splits -c among its slots (one stream each, kv_unified off):
    // n_ctx_seq = GGML_PAD(GGML_PAD(n_ctx, 256) ÷ n_seq, 256) cells per stream.
    let nseq = input.sequences.max(1);
    let per_seq = c
        .max_model_len
        .div_ceil(256)
        .saturating_mul(256)
        .checked_div(nseq)
        .unwrap_or(0)
        .div_ceil(256)
        .saturating_mul(256);
    let cells = prod(&[per_seq, nseq])?;
    // Per-layer K and V widths from the shape; without one, the estimator's per-token
    // bytes in f16 halves.
    let (layers, k_w, v_w, vocab, hidden, inter) = match (input.arch, input.kv_only) {
        (Some(a), _) => match a.mla {
            // llama.cpp caches MLA's latent and rope part as K and the latent as V.
            Some(m) => (
                a.attention_layers(),
                sum(&[m.kv_lora_rank, m.qk_rope_dim])?,
                m.kv_lora_rank,
                a.vocab,
                a.hidden,
                a.intermediate,
            ),
            None => (
                a.attention_layers(),
                prod(&[a.kv_heads, a.head_dim])?,
                prod(&[a.kv_heads, a.head_dim])?,
                a.vocab,
                a.hidden,
                a.intermediate,
            ),
        },
        (None, Some(k)) => (
            k.layers,
            prod(&[k.kv_heads, k.head_dim])?,
            prod(&[k.kv_heads, k.head_dim])?,
            0,
            0,
            0,
        ),
        (None, None) => {
            return Err(EstimateError::invalid(
                "engine",
                "the KV cache's shape is unknown",
            ));
        }
    };
    let total_layers = input.arch.map_or(layers, |a| a.layers);
    let ngl = p.n_gpu_layers.unwrap_or(u64::MAX);
    let gpu_layers = ngl.min(total_layers);
    let frac = |x: u64| -> Result<u64, EstimateError> {
        Ok(u64::try_from(
            u128::from(x)
                .saturating_mul(u128::from(gpu_layers))
                .checked_div(u128::from(total_layers.max(1)))
                .unwrap_or(0),
        )
        .unwrap_or(u64::MAX))
    };
    let cell = sum(&[tk.row_bytes(k_w)?, tv.row_bytes(v_w)?])?;
    // SWA only where the window alternates with full layers.
    let sw_layers = input.sliding_layers.unwrap_or(layers).min(layers);
    let swa = match input.sliding_window {
        Some(w) if sw_layers < layers && sw_layers > 0 => Some((w, sw_layers)),
        Some(_) => {
            assumptions.push(
                "a window on every layer: a full cache in llama.cpp (Phi-3: n_swa = 0)".into(),
            );
            None
        }
        None => None,
    };
    let (full_l, swa_cells, swa_l) = match swa {
        Some((w, s)) => {
            // Per stream: GGML_PAD(min(n_ctx_seq, n_swa + n_ubatch), 256).
            let n = sum(&[w, ubatch])?
                .min(per_seq)
                .div_ceil(256)
                .saturating_mul(256);
            (layers.saturating_sub(s), prod(&[n, nseq])?, s)
        }
        None => (layers, 0, 0),
    };
    // ggml-org/llama.cpp pull request 21277 ("kv-cache : do not quantize SWA KV
    // cache"): the sliding layers' cache stays f16 whatever the cache types.
    let swa_cell = sum(&[
        CacheType::F16.row_bytes(k_w)?,
        CacheType::F16.row_bytes(v_w)?,
    ])?;
    let kv_all = sum(&[
        prod(&[cells, full_l, cell])?,
        prod(&[swa_cells, swa_l, swa_cell])?,
    ])?;
    let kv = frac(kv_all)?;
    // Weights on the GPU: the estimate's, less the token embeddings (always on the
    // host), scaled by the offloaded layers; --n-cpu-moe's experts stay on the host.
    let mut gpu_w = c.weights.saturating_sub(c.embed_bytes);
    if gpu_layers < total_layers {
        gpu_w = frac(gpu_w)?;
    }
    let cpu_moe = cpu_moe_bytes(c, p.n_cpu_moe.unwrap_or(0))?;
    gpu_w = gpu_w.saturating_sub(cpu_moe);
    // The compute buffer (assumed): ggml's allocator sizes it for the reserve graph of
    // one ubatch; its largest phase is a layer's FFN in f32 — gate, up and their
    // product (3 × intermediate) beside the input and the residual (2 × hidden) — or
    // the output's logits for the sequences' last tokens (n_outputs = n_seq).
    let compute = prod(&[sum(&[prod(&[3, inter])?, prod(&[2, hidden])?])?, ubatch, 4])?
        .max(prod(&[sum(&[vocab, hidden])?, nseq, 4])?);
    let ctx_mib = 512;
    let fit = 1024;
    let mut lines = vec![
        line("budget", "Card total", capacity, Kind::Computed, "device total".into(), &[("total", format!("{capacity} B ({kind})"))], "common/fit.cpp (free memory per device)"),
        line("cuda_context", "CUDA context (assumed)", mib(ctx_mib), Kind::Assumed, format!("{ctx_mib} MiB"), &[], "common/fit.cpp"),
        line("weights", "Model buffer on this device", gpu_w, Kind::Computed, "the estimate's weights less the token embeddings (host), × offloaded layers ÷ layers, less --n-cpu-moe's experts".into(), &[("n-gpu-layers", gpu_layers.to_string()), ("n-cpu-moe-bytes", cpu_moe.to_string())], "src/llama-model.cpp (load_tensors: layer → device)"),
        line("compute_buffer", "Compute buffer for one ubatch (assumed)", compute, Kind::Assumed, "max((3 intermediate + 2 hidden) × ubatch × 4, (vocab + hidden) × sequences × 4)".into(), &[("ubatch", ubatch.to_string())], "src/llama-context.cpp (graph_reserve)"),
        line("fit_margin", "--fit margin left free", mib(fit), Kind::Assumed, format!("{fit} MiB (--fit-target default)"), &[], "common/common.h (fit_params_target)"),
    ];
    let mut kv_line = line(
        "kv_cache",
        "KV cache for the context's cells",
        kv,
        Kind::Computed,
        format!(
            "{cells} cells × {full_l} layers × (K {} + V {}) + {swa_cells} SWA cells × {swa_l} layers × f16",
            tk.name(),
            tv.name()
        ),
        &[
            ("cells", cells.to_string()),
            ("cache-type-k", tk.name().into()),
            ("cache-type-v", tv.name().into()),
            ("bytes-per-cell-layer", cell.to_string()),
        ],
        SRC_KV,
    );
    kv_line.subtracted = false;
    lines.push(kv_line);
    let room = sum(&[mib(ctx_mib), gpu_w, compute, mib(fit)])
        .map(|u| i128::from(capacity).saturating_sub(i128::from(u)))?;
    let per_cell = frac(prod(&[full_l, cell])?)?.max(1);
    let room_u = u64::try_from(room.max(0)).unwrap_or(0);
    let swa_fixed = frac(prod(&[swa_cells, swa_l, swa_cell])?)?;
    // Cells that fit beside the fixed SWA part: the "tokens" of this engine.
    let fit_cells = room_u
        .saturating_sub(swa_fixed)
        .checked_div(per_cell)
        .unwrap_or(0);
    Ok(Draft {
        version: "b7000+",
        capacity,
        capacity_kind: kind,
        lines,
        block: 1,
        group_block_bytes: per_cell,
        groups: 1,
        seq_blocks: cells,
        kv_cache_bytes: Some(kv),
        pool: Some(i64::try_from(room).unwrap_or(i64::MIN)),
        need: Some(Need {
            bytes: kv,
            tokens: fit_cells,
            sequences: nseq,
        }),
        uncertainty: sum(&[mib(ctx_mib), compute])?.checked_div(4).unwrap_or(0),
        assumptions,
        warnings: Vec::new(),
    })
}

/// The routed experts of the first `n` MoE layers, from the estimate's MLP bytes in
/// proportion to their parameters.
fn cpu_moe_bytes(c: &Ctx, n: u64) -> Result<u64, EstimateError> {
    let (Some(a), true) = (c.input.arch, n > 0) else {
        return Ok(0);
    };
    let Some(m) = a.moe else { return Ok(0) };
    let moe_layers = m.moe_layers(a.layers).max(1);
    let routed = prod(&[m.experts, m.expert_intermediate])?;
    let shared = prod(&[m.shared_experts, m.shared_intermediate])?;
    let dense = prod(&[a.layers.saturating_sub(moe_layers), a.intermediate])?;
    let all = sum(&[prod(&[moe_layers, sum(&[routed, shared])?])?, dense])?.max(1);
    let off = prod(&[n.min(moe_layers), routed])?;
    let mlp = c.mlp_bytes;
    let share = u128::from(mlp)
        .saturating_mul(u128::from(off))
        .checked_div(u128::from(all))
        .unwrap_or(0);
    Ok(u64::try_from(share).unwrap_or(u64::MAX))
}
