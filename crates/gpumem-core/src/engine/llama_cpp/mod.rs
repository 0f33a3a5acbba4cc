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
//! GGML_PAD(min(n_ctx, n_swa × n_seq + n_ubatch), 256) cells (`--swa-full`: as many as
//! the full layers', `size_swa = size_base`) — only for architectures
//! that run SWA, whose windows alternate with full layers (Gemma 2/3, Cohere 2,
//! gpt-oss, Llama 4); Phi-3 is loaded with `n_swa = 0` (`src/llama-model.cpp`,
//! "Phi SWA is currently disabled") and Llama/Mistral/Qwen2 read no window, so a
//! window on every layer is a full cache there.
//!
//! The model buffer is placed tensor by tensor ([`tensors`]): `-ngl` keeps the first
//! blocks (and the token embeddings always) in host memory, `--n-cpu-moe N` the
//! routed experts of the first N blocks, and `--override-tensor` (`-ot`) whatever
//! tensors its patterns name; what leaves the card is the host line.

use serde::{Deserialize, Serialize};

use super::arith::{mib, prod, sum};
use super::contract::{Engine, Info};
use super::flags::{BATCHED_TOKENS, MAX_MODEL_LEN};
use super::outcome::line;
use super::pool::{Draft, Need};
use super::request::{Ctx, catalogue_capacity};
use crate::error::EstimateError;
use crate::estimate::Kind;

mod flags;
pub mod mmproj;
mod split;
pub mod tensors;

use crate::arch::Architecture;
pub use flags::parse_tensor_split;
use flags::{
    CACHE_TYPE_K, CACHE_TYPE_V, KV_UNIFIED, MAIN_GPU, MMPROJ, N_CPU_MOE, N_GPU_LAYERS,
    NO_MMPROJ_OFFLOAD, OVERRIDE_TENSOR, SPLIT_MODE, SWA_FULL, TENSOR_SPLIT,
};
use tensors::{GgufTensor, Slot};

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

/// The CUDA context on each device, MiB (assumed).
const CONTEXT_MIB: u64 = 512;
/// `--fit`'s target of free memory on each device, MiB (`common/common.h`
/// `fit_params_target`).
const FIT_MIB: u64 = 1024;

const SRC_KV: &str = "src/llama-kv-cache.cpp (K and V rows of ggml_row_size per cell)";

/// llama.cpp's `llama-server`.
pub struct LlamaCpp;

impl Engine for LlamaCpp {
    const INFO: Info = Info {
        name: "llama.cpp",
        aliases: &["llamacpp", "llama-cpp"],
        summary: "llama.cpp (`llama-server`).",
        releases: &[("llama.cpp", "llama.cpp")],
        release: None,
        hint: "llama.cpp",
        // `max-model-len` is its `-c` (all slots together), `max-num-batched-tokens`
        // its `--ubatch-size`.
        flags: &[
            &MAX_MODEL_LEN,
            &BATCHED_TOKENS,
            &CACHE_TYPE_K,
            &CACHE_TYPE_V,
            &KV_UNIFIED,
            &SWA_FULL,
            &N_GPU_LAYERS,
            &N_CPU_MOE,
            &OVERRIDE_TENSOR,
            &TENSOR_SPLIT,
            &SPLIT_MODE,
            &MAIN_GPU,
            &MMPROJ,
            &NO_MMPROJ_OFFLOAD,
        ],
        formats: &["bf16", "q8_0", "q6_k", "q4_k_m", "q3_k_m", "q2_k"],
        windows: true,
        shared_context: true,
        // ggml's Metal backend (ggml/src/ggml-metal).
        metal: true,
        refusal: None,
    };

    fn budget(c: &Ctx) -> Result<Draft, EstimateError> {
        rule(c)
    }

    // `--tensor-split` over `--card a,b`: `split`.
    const SEVERAL_CARDS: bool = true;
}

fn rule(c: &Ctx) -> Result<Draft, EstimateError> {
    let p = c.params;
    let input = c.input;
    let (capacity, kind) = catalogue_capacity(&c.card);
    let cache_type = |key: &'static str| match p.text(key) {
        Some(t) => CacheType::parse(key, t),
        None => Ok(CacheType::F16),
    };
    let (tk, tv) = (
        cache_type(CACHE_TYPE_K.key())?,
        cache_type(CACHE_TYPE_V.key())?,
    );
    let ubatch = p.count(BATCHED_TOKENS.key()).unwrap_or(512);
    let mut assumptions = Vec::new();
    // llama-server splits -c among its slots (one stream each, kv_unified off):
    // n_ctx_seq = GGML_PAD(GGML_PAD(n_ctx, 256) ÷ n_seq, 256) cells per stream. With
    // `--kv-unified` (`src/llama-context.cpp`: n_ctx_seq = n_ctx when
    // `cparams.kv_unified`; `src/llama-kv-cache.cpp`: n_stream = unified ? 1 : n_seq_max)
    // one stream of n_ctx cells serves every slot.
    let nseq = input.sequences.max(1);
    let streams = if p.on(KV_UNIFIED.key()) { 1 } else { nseq };
    let per_seq = c
        .max_model_len
        .div_ceil(256)
        .saturating_mul(256)
        .checked_div(streams)
        .unwrap_or(0)
        .div_ceil(256)
        .saturating_mul(256);
    let cells = prod(&[per_seq, streams])?;
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
            // KV-shared layers (Gemma 4: `attention.shared_kv_layers`, llama.cpp's
            // `n_layer_kv_from_start`) have no cache of their own.
            None => (
                a.cached_attention_layers(),
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
    // src/llama-model.cpp `load_tensors`: slots 0..n are the blocks, slot n the output
    // layer; slot il is on the GPU when il ≥ i_gpu_start = max(n + 1 − ngl, 0).
    let total_layers = input.arch.map_or(layers, |a| a.layers);
    let ngl = p.count(N_GPU_LAYERS.key()).unwrap_or(u64::MAX);
    let gpu_start = total_layers.saturating_add(1).saturating_sub(ngl);
    let gpu_layers = total_layers.saturating_sub(gpu_start.min(total_layers));
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
    let sw_layers = input
        .sliding_layers
        .map(|s| s.saturating_sub(input.arch.map_or(0, |a| a.kv_shared().0)))
        .unwrap_or(layers)
        .min(layers);
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
            // Per stream (`src/llama-kv-cache-iswa.cpp`): GGML_PAD(min(n_ctx_seq,
            // n_swa × (unified ? n_seq_max : 1) + n_ubatch), 256).
            // `--swa-full`: `size_swa = size_base`, every cell of the stream.
            let window = if p.on(KV_UNIFIED.key()) {
                prod(&[w, nseq])?
            } else {
                w
            };
            let n = if p.on(SWA_FULL.key()) {
                per_seq
            } else {
                sum(&[window, ubatch])?
                    .min(per_seq)
                    .div_ceil(256)
                    .saturating_mul(256)
            };
            (layers.saturating_sub(s), prod(&[n, streams])?, s)
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
    let rules = match p.text(OVERRIDE_TENSOR.key()) {
        Some(text) => parse_overrides(text)?,
        None => Vec::new(),
    };
    // The compute buffer (assumed): ggml's allocator sizes it for the reserve graph of
    // one ubatch; its largest phase is a layer's FFN in f32 — gate, up and their
    // product (3 × intermediate) beside the input and the residual (2 × hidden) — or
    // the output's logits for the sequences' last tokens (n_outputs = n_seq).
    let compute = prod(&[sum(&[prod(&[3, inter])?, prod(&[2, hidden])?])?, ubatch, 4])?
        .max(prod(&[sum(&[vocab, hidden])?, nseq, 4])?);
    let projector = match p.text(MMPROJ.key()) {
        Some(t) => Some(mmproj::Projector::parse(t)?),
        None => None,
    };
    let mm = place_projector(projector.as_ref(), !p.on(NO_MMPROJ_OFFLOAD.key()), &mut assumptions)?;
    if !p.devices.is_empty() {
        let Some(a) = input.arch else {
            return Err(EstimateError::invalid(
                "card",
                "several cards need the architecture (a preset, a config.json or the shape keys) to place each layer's tensors on its device",
            ));
        };
        let facts = split::Facts {
            arch: a,
            ngl,
            kv_all,
            per_cell_all: prod(&[full_l, cell])?,
            swa_all: prod(&[swa_cells, swa_l, swa_cell])?,
            compute,
            ubatch,
            cells,
            rules: &rules,
            kv_formula: format!(
                "{cells} cells × the device's layers × (K {} + V {})",
                tk.name(),
                tv.name()
            ),
            mmproj: &mm,
        };
        return split::draft(c, &facts, assumptions);
    }
    let placed = match input.arch {
        Some(a) => {
            if input.tensors.is_some() {
                assumptions.push("per-tensor bytes: the file header's class totals shared in proportion to the architecture's tensors".into());
            }
            place(c, &a, &|slot| on_card(slot, gpu_start, a.layers), 1, &rules)?
        }
        None if !rules.is_empty() => {
            return Err(EstimateError::invalid(
                "override-tensor",
                "needs the architecture (a preset, a config.json or the shape keys) to name the tensors",
            ));
        }
        _ => {
            // No architecture, so no tensors and no experts to name: the estimate's
            // weights less the token embeddings (always on the host), × the offloaded
            // blocks.
            let mut gpu = c.weights.saturating_sub(c.embed_bytes);
            if gpu_layers < total_layers {
                gpu = frac(gpu)?;
            }
            assumptions.push(
                "model buffer from the weights in proportion (no architecture to list the tensors)"
                    .into(),
            );
            Placed {
                gpu: vec![gpu],
                host: c.weights.saturating_sub(gpu),
                moved: 0,
                unnamed: Vec::new(),
            }
        }
    };
    if !placed.unnamed.is_empty() && !rules.is_empty() {
        assumptions.push(format!(
            "no llama.cpp name generated for {}: checkpoint names, spread evenly over the blocks, are what --override-tensor matched",
            placed.unnamed.join(", ")
        ));
    }
    let gpu_w = placed.gpu.first().copied().unwrap_or(0);
    let ctx_mib = CONTEXT_MIB;
    let fit = FIT_MIB;
    let mut lines = vec![
        line("budget", "Card total", capacity, Kind::Computed, "device total".into(), &[("total", format!("{capacity} B ({kind})"))], "common/fit.cpp (free memory per device)"),
        line("cuda_context", "CUDA context (assumed)", mib(ctx_mib), Kind::Assumed, format!("{ctx_mib} MiB"), &[], "common/fit.cpp"),
        line("weights", "Model buffer on this device", gpu_w, Kind::Computed, "output layer and blocks from max(layers + 1 − n-gpu-layers, 0), less tensors sent to CPU".into(), &[("gpu-blocks", gpu_layers.to_string()), ("moved-to-host-bytes", placed.moved.to_string())], "src/llama-model.cpp (load_tensors: layer → device), src/llama-model-loader.cpp (tensor_buft_overrides)"),
        line("compute_buffer", "Compute buffer for one ubatch (assumed)", compute, Kind::Assumed, "max((3 intermediate + 2 hidden) × ubatch × 4, (vocab + hidden) × sequences × 4)".into(), &[("ubatch", ubatch.to_string())], "src/llama-context.cpp (graph_reserve)"),
        line("fit_margin", "--fit margin left free", mib(fit), Kind::Assumed, format!("{fit} MiB (--fit-target default)"), &[], "common/common.h (fit_params_target)"),
    ];
    lines.extend(mm.lines.iter().cloned());
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
    let mut host_line = line(
        "host_weights",
        "Model weights in host memory (CPU buffer)",
        sum(&[placed.host, mm.host])?,
        Kind::Computed,
        if mm.host > 0 {
            format!("token embeddings, blocks below the GPU's, tensors sent to CPU, + the projector and its encoder's compute buffer ({} B, --no-mmproj-offload)", mm.host)
        } else {
            "token embeddings, blocks below the GPU's, tensors sent to CPU".into()
        },
        &[],
        "src/llama-model.cpp (load_tensors: the input layer stays on the CPU), tools/mtmd/clip.cpp (clip_ctx: the CPU backend without use_gpu)",
    );
    host_line.subtracted = false;
    lines.push(host_line);
    let room = sum(&[mib(ctx_mib), gpu_w, compute, mib(fit), mm.card])
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
        // The newest rule carried: -ngl's i_gpu_start = max(n + 1 − ngl, 0) is read
        // from b9993–b10964 (older builds put one block more on the card).
        version: "b9993+",
        capacity,
        capacity_kind: kind,
        lines,
        block: 1,
        group_block_bytes: per_cell,
        groups: 1,
        seq_blocks: cells,
        tokens_by_concurrency: false,
        kv_cache_bytes: Some(kv),
        pool: Some(i64::try_from(room).unwrap_or(i64::MIN)),
        speculative: None,
        need: Some(Need {
            bytes: kv,
            tokens: fit_cells,
            sequences: nseq,
        }),
        uncertainty: sum(&[
            sum(&[mib(ctx_mib), compute])?.checked_div(4).unwrap_or(0),
            mm.uncertainty,
        ])?,
        assumptions,
        warnings: Vec::new(),
        refused: None,
        devices: Vec::new(),
    })
}

/// Where the projector (`--mmproj`) goes: its weights and its encoder's compute buffer
/// on the first GPU, or in host memory with `--no-mmproj-offload` ([`mmproj`]).
pub(super) struct ProjectorPlaced {
    /// Bytes on the first GPU (device 0): weights and the encoder's compute buffer.
    pub card: u64,
    /// Bytes in host memory (`--no-mmproj-offload`).
    pub host: u64,
    /// The assumed compute buffer's uncertainty on the card (a quarter of it).
    pub uncertainty: u64,
    /// The card's lines for it (none on the host).
    pub lines: Vec<super::outcome::EngineLine>,
}

fn place_projector(
    projector: Option<&mmproj::Projector>,
    on_card: bool,
    assumptions: &mut Vec<String>,
) -> Result<ProjectorPlaced, EstimateError> {
    let mut out = ProjectorPlaced {
        card: 0,
        host: 0,
        uncertainty: 0,
        lines: Vec::new(),
    };
    let Some(pj) = projector else {
        if !on_card {
            assumptions.push("--no-mmproj-offload without --mmproj: no projector to place".into());
        }
        return Ok(out);
    };
    let (enc, enc_formula) = pj.compute_bound()?;
    if on_card {
        out.card = sum(&[pj.bytes, enc])?;
        out.uncertainty = enc.checked_div(4).unwrap_or(0);
        out.lines.push(line("mmproj_weights", "Projector (mmproj) weights on the card", pj.bytes, Kind::Computed, format!("{} tensors of the file's header, {} projector", pj.tensors, pj.projector), &[("tensors", pj.tensors.to_string()), ("projector", pj.projector.clone())], "tools/mtmd/clip.cpp (clip_model_loader::load_tensors: one buffer of the encoder's backend, the first GPU)"));
        out.lines.push(line("mmproj_compute", "Vision encoder compute buffer (assumed)", enc, Kind::Assumed, enc_formula, &[("image-size", pj.image_size.to_string()), ("patch-size", pj.patch_size.to_string())], "tools/mtmd/clip.cpp (alloc_compute_meta: the warm-up image's graph reserved)"));
    } else {
        out.host = sum(&[pj.bytes, enc])?;
        assumptions.push(format!(
            "--no-mmproj-offload: the projector's {} B and its encoder's compute buffer of {} B (assumed: {enc_formula}) in host memory (clip.cpp: the CPU backend)",
            pj.bytes, enc
        ));
    }
    assumptions.push(match pj.image_tokens() {
        Some((n, rule)) => format!(
            "each image takes {n} of the context's cells ({} projector: {rule} of {}-pixel patches over the {s}×{s} image, clip.cpp clip_n_output_tokens; an image cut into tiles takes that per tile): the context given must hold the images' tokens beside the text's",
            pj.projector,
            pj.patch_size,
            s = pj.image_size
        ),
        None => format!(
            "each image takes context cells by the {} projector's own count (clip.cpp clip_n_output_tokens, not modelled here): the context given must hold the images' tokens beside the text's",
            pj.projector
        ),
    });
    Ok(out)
}

/// Device 0 for a slot from `gpu_start` on (`-ngl`'s placement on one card), `None`
/// (the host) before it; the input layer always on the host.
fn on_card(slot: Slot, gpu_start: u64, blocks: u64) -> Option<usize> {
    let gpu = match slot {
        Slot::Input => false,
        Slot::Block(i) => i >= gpu_start,
        Slot::Output | Slot::Extra => blocks >= gpu_start,
    };
    gpu.then_some(0)
}

/// The model's weights split between the devices and the host.
struct Placed {
    /// Bytes on each device, in device order.
    gpu: Vec<u64>,
    host: u64,
    /// Bytes `--n-cpu-moe` and `--override-tensor` sent to the host from GPU slots.
    moved: u64,
    /// Tensor groups with no llama.cpp name here (named when `-ot` matched them).
    unnamed: Vec<&'static str>,
}

/// Places every tensor as `load_tensors` does: an override's buffer type first (the
/// first rule whose pattern `std::regex_search` finds in the name wins,
/// `src/llama-model-loader.cpp`), `--override-tensor`'s rules before `--n-cpu-moe`'s;
/// otherwise the slot's device. The tied output's copy of the embeddings counts on
/// the device only (the host holds the embeddings once).
/// `slot_dev` names each slot's device (`None`: the host), as `load_tensors`'s
/// `get_layer_buft_list` does; a tensor an override sends to the card goes to device 0
/// (`CUDA0`, the only device [`override_rules`] names).
fn place(
    c: &Ctx,
    a: &Architecture,
    slot_dev: &dyn Fn(Slot) -> Option<usize>,
    devices: usize,
    rules: &[Override],
) -> Result<Placed, EstimateError> {
    check_placement_cost(a.layers, rules.len())?;
    let mut list = tensors::gguf_tensors(a, &crate::estimate::module_formats(c.input)?)?;
    if let Some(file) = &c.input.tensors {
        tensors::scale_to(&mut list, file, c.weights)?;
    }
    let ncm = c.params.count(N_CPU_MOE.key()).unwrap_or(0);
    let mut placed = Placed {
        gpu: vec![0; devices.max(1)],
        host: 0,
        moved: 0,
        unnamed: Vec::new(),
    };
    for t in &list {
        let dev = slot_dev(t.slot);
        let slot_gpu = dev.is_some();
        let forced = override_for(rules, t).or_else(|| {
            (matches!(t.slot, Slot::Block(i) if i < ncm) && t.is_routed_expert()).then_some(true)
        });
        let on = match forced {
            Some(true) => None,
            Some(false) => Some(0),
            None => dev,
        };
        let on_gpu = on.is_some();
        if let Some(slot) = on.and_then(|d| placed.gpu.get_mut(d)) {
            *slot = sum(&[*slot, t.bytes])?;
        } else if !t.duplicate {
            placed.host = sum(&[placed.host, t.bytes])?;
        }
        if slot_gpu && !on_gpu {
            placed.moved = sum(&[placed.moved, t.bytes])?;
        }
        if !t.named && !rules.is_empty() && !placed.unnamed.contains(&t.suffix) {
            placed.unnamed.push(t.suffix);
        }
    }
    Ok(placed)
}

/// Most blocks placed tensor by tensor. Placement lists every tensor of every block
/// (about a dozen a block), and a largest-context search places the model once per
/// step; the deepest published GGUF models have under 200 blocks.
pub const MAX_BLOCKS: u64 = 1024;
/// Most `--override-tensor` rules (users write a handful; llama.cpp sets no limit).
pub const MAX_OVERRIDE_RULES: usize = 64;
/// Longest `--override-tensor` pattern, in bytes.
pub const MAX_OVERRIDE_PATTERN: usize = 512;
/// Most rules × blocks one placement matches (about a dozen tensors a block, and a
/// largest-context search places the model once per step): 126 blocks take 32 rules,
/// 61 blocks 64; 1 024 blocks 4.
pub const MAX_OVERRIDE_WORK: u64 = 4_096;

/// Refuses a placement that would cost more than the bounds above, before any tensor
/// is listed.
fn check_placement_cost(blocks: u64, rules: usize) -> Result<(), EstimateError> {
    if blocks > MAX_BLOCKS {
        return Err(EstimateError::invalid(
            "layers",
            "llama.cpp's placement takes at most 1024",
        ));
    }
    let rules = u64::try_from(rules).unwrap_or(u64::MAX);
    if blocks.saturating_mul(rules) > MAX_OVERRIDE_WORK {
        return Err(EstimateError::invalid(
            "override-tensor",
            format!(
                "{rules} rules over {blocks} blocks: at most {MAX_OVERRIDE_WORK} rule × block matches (fewer rules: one pattern can name many tensors)"
            ),
        ));
    }
    Ok(())
}

/// One `--override-tensor` rule: `<pattern>=<buffer type>`.
pub struct Override {
    /// The pattern as typed.
    pub pattern: String,
    /// Whether the buffer type is the host's (`CPU`) rather than this card's.
    pub host: bool,
    regex: regex_lite::Regex,
}

/// GPU backends' first device (`ggml_backend_buft_name` of device 0): the card.
const THIS_CARD: [&str; 7] = [
    "CUDA0", "ROCm0", "Vulkan0", "Metal", "SYCL0", "MUSA0", "CANN0",
];

/// Checks `--override-tensor` as `common/arg.cpp` `parse_tensor_buffer_overrides`
/// splits it: comma-separated `<pattern>=<buffer type>` (split at the first `=`), the
/// buffer type named as llama.cpp names it (case-sensitive), within the bounds. It
/// returns each rule's pattern and whether it goes to the host, without compiling the
/// patterns: the engine keys are read with this (so whatever reads them links no
/// regular-expression engine), the placement with [`parse_overrides`].
pub fn override_rules(text: &str) -> Result<Vec<(&str, bool)>, EstimateError> {
    let bad = |why: String| EstimateError::invalid("override-tensor", why);
    let mut rules = Vec::new();
    if text.split(',').count() > MAX_OVERRIDE_RULES {
        return Err(bad(format!("at most {MAX_OVERRIDE_RULES} rules")));
    }
    for item in text.split(',') {
        if item.len() > MAX_OVERRIDE_PATTERN {
            return Err(bad(format!(
                "a rule of {} bytes: at most {MAX_OVERRIDE_PATTERN}",
                item.len()
            )));
        }
        let Some((pattern, buft)) = item.split_once('=') else {
            return Err(bad(format!(
                "{item:?} is not <pattern>=<buffer type> (e.g. \\.ffn_.*_exps\\.=CPU)"
            )));
        };
        let host = match buft {
            "CPU" => true,
            b if THIS_CARD.contains(&b) => false,
            b if b.eq_ignore_ascii_case("cpu") => {
                return Err(bad(format!("buffer type {b:?}: llama.cpp names it CPU")));
            }
            b => {
                return Err(bad(format!(
                    "buffer type {b:?}: the budget is for one card, so CPU (host memory) or the card's own (CUDA0, ROCm0, Vulkan0, Metal, SYCL0, MUSA0, CANN0)"
                )));
            }
        };
        rules.push((pattern, host));
    }
    Ok(rules)
}

/// Parses `--override-tensor` ([`override_rules`]) and compiles each pattern. The
/// patterns are ECMAScript regular expressions matched with `std::regex_search`; here
/// `regex-lite` matches them (unanchored, the same search) on every target, the page's
/// included, so both answer alike; it refuses look-around and backreferences with a
/// clear error. Tensor names are ASCII, so its ASCII-only classes match as std::regex's.
pub fn parse_overrides(text: &str) -> Result<Vec<Override>, EstimateError> {
    override_rules(text)?
        .into_iter()
        .map(|(pattern, host)| compile(pattern, host))
        .collect()
}

fn compile(pattern: &str, host: bool) -> Result<Override, EstimateError> {
    let regex = regex_lite::Regex::new(pattern).map_err(|e| {
        // regex-lite's reason is one short line.
        let why = e.to_string();
        // std::regex (ECMAScript) takes both; name them when the crate's reason doesn't.
        let lookaround = pattern.contains("(?=")
            || pattern.contains("(?!")
            || pattern.contains("(?<=")
            || pattern.contains("(?<!");
        let backreference = pattern
            .as_bytes()
            .windows(2)
            .any(|w| w[0] == b'\\' && w[1].is_ascii_digit() && w[1] != b'0');
        let hint = if lookaround {
            " (look-around: llama.cpp's std::regex takes it; write the pattern without it, e.g. list the blocks: blk\\.(1|2|3)\\.)"
        } else if backreference {
            " (backreferences: llama.cpp's std::regex takes them; write the pattern without them)"
        } else {
            ""
        };
        EstimateError::invalid(
            "override-tensor",
            format!("{pattern:?} is not a regular expression gpumem can match: {why}{hint}"),
        )
    })?;
    Ok(Override {
        pattern: pattern.to_string(),
        host,
        regex,
    })
}

/// The first rule whose pattern is found in the tensor's name: `Some(true)` for the
/// host, `Some(false)` for the card.
fn override_for(rules: &[Override], t: &GgufTensor) -> Option<bool> {
    if rules.is_empty() {
        return None;
    }
    let name = t.name();
    rules
        .iter()
        .find(|r| r.regex.is_match(&name))
        .map(|r| r.host)
}

#[cfg(test)]
mod tests;
