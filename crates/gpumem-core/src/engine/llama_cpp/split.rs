//! llama.cpp over several cards (`--card rtx-4090,rtx-3090`, `--tensor-split 3,1`,
//! `--split-mode layer`, its default): each device holds whole layers, and each is
//! judged as the one-card rule judges its card.
//!
//! Read in ggml-org/llama.cpp at commit 08033df02cc32f3706271c068aaeaeecf94922a1:
//! - `src/llama-model.cpp` `llama_model::load_tensors`: the split points are the
//!   running sums of `tensor_split` (each device's free memory from
//!   `ggml_backend_dev_memory` when it is absent or all zero), normalised; each slot
//!   (a block, or slot `n_layer` for the output layer) goes to the first device whose
//!   point is above its place, the token embeddings stay on the CPU
//!   ([`tensor_split_layers`]); each tensor goes to its
//!   slot's device unless an override names another buffer.
//! - `src/llama-kv-cache.cpp` (`llama_kv_cache` constructor): each layer's K and V
//!   are created in a context of that layer's device (`model.dev_layer(il)`, with
//!   `offload_kqv`, the default): a device's cache is its layers' share.
//! - `src/llama-context.cpp`: one compute buffer per backend (`ggml_backend_sched`
//!   reserves each backend's part of the graph), and pipeline parallelism — the
//!   scheduler keeping `GGML_SCHED_MAX_COPIES` (4) copies of each split's inputs
//!   (`ggml/src/ggml-backend.cpp`) — when there are several devices, every layer is
//!   offloaded, the split mode is `layer`, the KV cache is offloaded and no tensor
//!   override is given (`--override-tensor`, `--n-cpu-moe`).
//! - `common/fit.cpp` `common_params_fit_impl`: `--fit` checks each device against its
//!   own target (1024 MiB free) and changes nothing when every device meets it; when
//!   one does not (and neither `-ngl` nor `-ts` was given) it re-splits the layers
//!   itself, which is not modelled: the answer judges the split given (or the
//!   default) and says which device is short.

use super::super::arith::{mib, prod, sum};
use super::super::outcome::{DeviceShare, Outcome, line};
use super::super::pool::{Draft, Need};
use super::super::request::{Ctx, catalogue_capacity};
use super::flags::{MAIN_GPU, TENSOR_SPLIT};
use super::{CONTEXT_MIB, FIT_MIB, N_CPU_MOE, Override, SRC_KV, Slot, place};
use crate::arch::Architecture;
use crate::catalogue::GpuCard;
use crate::error::EstimateError;
use crate::fit::Verdict;
use crate::estimate::Kind;

/// `GGML_SCHED_MAX_COPIES` (`ggml/src/ggml-backend.cpp`): the copies of each split's
/// inputs the scheduler keeps under pipeline parallelism.
const SCHED_COPIES: u64 = 4;

/// What the one-card rule has worked out before it places the weights.
pub(super) struct Facts<'a> {
    /// The model's shape.
    pub arch: Architecture,
    /// `--n-gpu-layers` (`u64::MAX`: all, the default).
    pub ngl: u64,
    /// Every attention layer's KV cache (full and sliding).
    pub kv_all: u64,
    /// Bytes of one full-attention cell over every full layer.
    pub per_cell_all: u64,
    /// The sliding layers' fixed cache over every sliding layer.
    pub swa_all: u64,
    /// The one-card compute buffer (assumed).
    pub compute: u64,
    /// `--ubatch-size`.
    pub ubatch: u64,
    /// The context's cells (every stream).
    pub cells: u64,
    /// `--override-tensor`'s rules.
    pub rules: &'a [Override],
    /// The KV line's formula, in words.
    pub kv_formula: String,
    /// The projector (`--mmproj`): on device 0, the first GPU
    /// (`ggml_backend_init_by_type`, `tools/mtmd/clip.cpp` `clip_ctx`).
    pub mmproj: &'a super::ProjectorPlaced,
}

/// `x × hi ÷ total − x × lo ÷ total`, each rounded down: a device's share of `x` for
/// the blocks `lo..hi` of `total`, so that the shares add up to `x × blocks ÷ total`.
fn share(x: u64, lo: u64, hi: u64, total: u64) -> u64 {
    let at = |k: u64| {
        u128::from(x)
            .saturating_mul(u128::from(k))
            .checked_div(u128::from(total.max(1)))
            .unwrap_or(0)
    };
    u64::try_from(at(hi).saturating_sub(at(lo))).unwrap_or(u64::MAX)
}

/// The blocks a device holds, in words.
fn blocks_text(first: Option<u64>, n: u64, output: bool) -> String {
    let blocks = match (first, n) {
        (_, 0) | (None, _) => String::new(),
        (Some(f), 1) => format!("block {f}"),
        (Some(f), n) => format!("blocks {f}–{}", f.saturating_add(n).saturating_sub(1)),
    };
    match (blocks.is_empty(), output) {
        (true, true) => "the output layer".into(),
        (true, false) => "none".into(),
        (false, true) => format!("{blocks} and the output layer"),
        (false, false) => blocks,
    }
}

/// A device's verdict as the answer judges a card ([`crate::fit::margin`],
/// [`Verdict::of`]): its headroom against the assumed lines' uncertainty and, on a
/// label capacity, what the label may lack — so the answer on the most loaded card is
/// the table's row for it.
fn judge(card: &GpuCard, headroom: i64, unc: u64) -> Outcome {
    match Verdict::of(headroom, crate::fit::margin(card, unc).bytes) {
        Verdict::Fits => Outcome::Fits,
        Verdict::Borderline => Outcome::Borderline,
        Verdict::DoesNotFit => Outcome::Refused,
    }
}

fn severity(o: Outcome) -> u8 {
    match o {
        Outcome::Fits => 0,
        Outcome::Borderline => 1,
        Outcome::Refused => 2,
    }
}

/// The budget over `c.params.devices`: each device's share ([`DeviceShare`]), and the
/// lines of the most loaded one (the worst verdict, then the least headroom), whose
/// pool and need are the budget's — so the answer fits only if every device does.
pub(super) fn draft(
    c: &Ctx,
    f: &Facts,
    mut assumptions: Vec<String>,
) -> Result<Draft, EstimateError> {
    let p = c.params;
    let cards = &p.devices;
    if c.input.gpus > 1 || c.input.tp > 1 || c.input.pp > 1 {
        return Err(EstimateError::invalid(
            "gpus",
            "--card names the GPUs (llama.cpp's --tensor-split over them): leave out --gpus, --tp and --pp",
        ));
    }
    let n = f.arch.layers;
    let ctx_bytes = mib(CONTEXT_MIB);
    let fit_bytes = mib(FIT_MIB);
    // The shares: as given (devices past the list at 0, as common/arg.cpp fills
    // them), or each device's free memory, which llama.cpp reads with
    // ggml_backend_dev_memory (cudaMemGetInfo) once its CUDA context exists.
    // src/llama.cpp (llama_model_load_from_file_impl) refuses a main GPU past the
    // devices; under --split-mode layer it places nothing.
    if let Some(mg) = p.count(MAIN_GPU.key()) {
        if usize::try_from(mg).map_or(true, |m| m >= cards.len()) {
            return Err(EstimateError::invalid(
                "main-gpu",
                format!(
                    "{mg}: an index among the {} cards --card names (0 to {})",
                    cards.len(),
                    cards.len().saturating_sub(1)
                ),
            ));
        }
        assumptions.push(format!(
            "--main-gpu {mg}: under --split-mode layer it places nothing (llama.cpp reads it for none and row)"
        ));
    }
    let given = match p.text(TENSOR_SPLIT.key()) {
        Some(t) => Some(super::parse_tensor_split(t)?),
        None => None,
    };
    let splits: Vec<f32> = match &given {
        Some(v) => {
            if v.len() > cards.len() {
                return Err(EstimateError::invalid(
                    "tensor-split",
                    format!(
                        "{} shares for {} cards: one share per card --card names, in its order",
                        v.len(),
                        cards.len()
                    ),
                ));
            }
            (0..cards.len())
                .map(|i| v.get(i).copied().unwrap_or(0.0))
                .collect()
        }
        None => {
            assumptions.push(format!(
                "tensor split by free memory (llama.cpp's default): each card's capacity less its {CONTEXT_MIB} MiB CUDA context, as cudaMemGetInfo reports it when nothing else holds the card (assumed)"
            ));
            cards
                .iter()
                .map(|card| {
                    // float(free), as load_tensors stores it.
                    #[allow(clippy::cast_precision_loss)]
                    let free = catalogue_capacity(card).0.saturating_sub(ctx_bytes) as f32;
                    free
                })
                .collect()
        }
    };
    let layer_dev = tensor_split_layers(n, f.ngl, &splits);
    if layer_dev.is_empty() {
        return Err(EstimateError::invalid(
            "tensor-split",
            "no card has a share (or free memory) to hold a layer",
        ));
    }
    let dev_of = |slot: Slot| match slot {
        Slot::Input => None,
        Slot::Block(i) => layer_dev
            .get(usize::try_from(i).unwrap_or(usize::MAX))
            .copied()
            .flatten(),
        Slot::Output | Slot::Extra => layer_dev
            .get(usize::try_from(n).unwrap_or(usize::MAX))
            .copied()
            .flatten(),
    };
    let placed = place(c, &f.arch, &dev_of, cards.len(), f.rules)?;
    let output_dev = dev_of(Slot::Output);
    // Pipeline parallelism (src/llama-context.cpp): several devices, every layer
    // offloaded (n_gpu_layers > n_layer), layer split, no tensor override.
    let pipeline = f.ngl > n && f.rules.is_empty() && p.count(N_CPU_MOE.key()).is_none();
    let copies_extra = if pipeline {
        // The inputs each device's part reads, per copy: the hidden state of one
        // ubatch and the KQ mask over the cells (f32).
        let inputs = sum(&[
            prod(&[f.ubatch, f.arch.hidden, 4])?,
            prod(&[f.cells, f.ubatch, 4])?,
        ])?;
        prod(&[SCHED_COPIES.saturating_sub(1), inputs])?
    } else {
        0
    };
    assumptions.push(format!(
        "compute buffer on each card that holds layers: the one-card figure, each backend reserving its own for its part of the graph{} (assumed)",
        if pipeline {
            format!(
                ", plus pipeline parallelism's {} more copies of its inputs (the hidden state and the KQ mask of one ubatch)",
                SCHED_COPIES.saturating_sub(1)
            )
        } else {
            String::new()
        }
    ));
    assumptions.push("--fit re-splits the layers when a card misses its 1024 MiB target and neither -ngl nor -ts was given (common/fit.cpp): not modelled, the split judged is the one given or the default".into());
    let total_blocks = n.max(1);
    let mut shares = Vec::with_capacity(cards.len());
    // (room, per-cell, swa fixed) per device, for its tokens.
    let mut rooms = Vec::with_capacity(cards.len());
    let mut before = 0u64;
    for (i, card) in cards.iter().enumerate() {
        let mine: Vec<u64> = (0..n)
            .filter(|il| dev_of(Slot::Block(*il)) == Some(i))
            .collect();
        let blocks = u64::try_from(mine.len()).unwrap_or(u64::MAX);
        let output = output_dev == Some(i);
        let lo = before;
        let hi = before.saturating_add(blocks);
        before = hi;
        let kv = share(f.kv_all, lo, hi, total_blocks);
        let per_cell = share(f.per_cell_all, lo, hi, total_blocks);
        let swa = share(f.swa_all, lo, hi, total_blocks);
        let holds = blocks > 0 || output;
        let compute = if holds {
            sum(&[f.compute, copies_extra])?
        } else {
            0
        };
        let weights = placed.gpu.get(i).copied().unwrap_or(0);
        let (capacity, _) = catalogue_capacity(card);
        // The projector is loaded after the model (llama-server's load_model), so the
        // free memory that split the layers did not count it; it lands on device 0.
        let (mm, mm_unc) = if i == 0 {
            (f.mmproj.card, f.mmproj.uncertainty)
        } else {
            (0, 0)
        };
        let need = sum(&[ctx_bytes, weights, compute, fit_bytes, kv, mm])?;
        let headroom = i64::try_from(i128::from(capacity).saturating_sub(i128::from(need)))
            .unwrap_or(i64::MIN);
        let unc = sum(&[
            sum(&[ctx_bytes, compute])?.checked_div(4).unwrap_or(0),
            mm_unc,
        ])?;
        let room = i128::from(capacity)
            .saturating_sub(i128::from(sum(&[ctx_bytes, weights, compute, fit_bytes, mm])?));
        rooms.push((room, per_cell, swa));
        shares.push(DeviceShare {
            device: u64::try_from(i).unwrap_or(u64::MAX),
            card: card.id.to_string(),
            card_name: card.name.to_string(),
            capacity_bytes: capacity,
            split: splits.get(i).copied().unwrap_or(0.0).to_string(),
            layers: blocks_text(mine.first().copied(), blocks, output),
            blocks,
            output_layer: output,
            weights_bytes: weights,
            kv_bytes: kv,
            compute_bytes: compute,
            mmproj_bytes: mm,
            context_bytes: ctx_bytes,
            fit_margin_bytes: fit_bytes,
            need_bytes: need,
            headroom_bytes: headroom,
            uncertainty_bytes: unc,
            outcome: judge(card, headroom, unc),
            most_loaded: false,
        });
    }
    // The most loaded device: the worst verdict, then the least headroom.
    let worst = shares
        .iter()
        .enumerate()
        .max_by_key(|(i, s)| {
            (
                severity(s.outcome),
                std::cmp::Reverse(s.headroom_bytes),
                std::cmp::Reverse(*i),
            )
        })
        .map_or(0, |(i, _)| i);
    if let Some(s) = shares.get_mut(worst) {
        s.most_loaded = true;
    }
    let Some(w) = shares.get(worst).cloned() else {
        return Err(EstimateError::invalid("card", "no card"));
    };
    let card = cards.get(worst).copied().unwrap_or(c.card);
    let (capacity, kind) = catalogue_capacity(&card);
    // The cells each device's room holds beside its sliding layers' fixed part; the
    // context is held where every device holding layers holds it.
    let tokens = rooms
        .iter()
        .zip(&shares)
        .filter(|(_, s)| s.blocks > 0)
        .map(|((room, per_cell, swa), _)| {
            u64::try_from((*room).max(0))
                .unwrap_or(0)
                .saturating_sub(*swa)
                .checked_div((*per_cell).max(1))
                .unwrap_or(0)
        })
        .min()
        .unwrap_or(0);
    let split_text = match &given {
        Some(v) => v
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        None => "free memory".into(),
    };
    let mut lines = vec![
        line("budget", "Card total (the most loaded device)", capacity, Kind::Computed, format!("device {worst} of {}: {}", cards.len(), card.name), &[("total", format!("{capacity} B ({kind})")), ("tensor-split", split_text)], "common/fit.cpp (free memory per device)"),
        line("cuda_context", "CUDA context (assumed)", ctx_bytes, Kind::Assumed, format!("{CONTEXT_MIB} MiB"), &[], "common/fit.cpp"),
        line("weights", "Model buffer on this device", w.weights_bytes, Kind::Computed, format!("{}: its slots' tensors by --tensor-split, less tensors sent to CPU", w.layers), &[("gpu-blocks", w.blocks.to_string())], "src/llama-model.cpp (load_tensors: layer → device by the split points)"),
        line("compute_buffer", "Compute buffer for one ubatch (assumed)", w.compute_bytes, Kind::Assumed, if pipeline { format!("the one-card figure + {} copies of the split inputs (pipeline parallelism)", SCHED_COPIES.saturating_sub(1)) } else { "the one-card figure".into() }, &[("ubatch", f.ubatch.to_string())], "src/llama-context.cpp (graph_reserve, pipeline_parallel), ggml/src/ggml-backend.cpp (GGML_SCHED_MAX_COPIES)"),
        line("fit_margin", "--fit margin left free", fit_bytes, Kind::Assumed, format!("{FIT_MIB} MiB (--fit-target default, per device)"), &[], "common/common.h (fit_params_target)"),
    ];
    if worst == 0 {
        lines.extend(f.mmproj.lines.iter().cloned());
    }
    let mut kv_line = line(
        "kv_cache",
        "KV cache of this device's layers",
        w.kv_bytes,
        Kind::Computed,
        f.kv_formula.clone(),
        &[("cells", f.cells.to_string()), ("gpu-blocks", w.blocks.to_string())],
        SRC_KV,
    );
    kv_line.subtracted = false;
    lines.push(kv_line);
    let mut host_line = line(
        "host_weights",
        "Model weights in host memory (CPU buffer)",
        sum(&[placed.host, f.mmproj.host])?,
        Kind::Computed,
        if f.mmproj.host > 0 {
            format!("token embeddings, blocks below the GPUs', tensors sent to CPU, + the projector and its encoder's compute buffer ({} B, --no-mmproj-offload)", f.mmproj.host)
        } else {
            "token embeddings, blocks below the GPUs', tensors sent to CPU".into()
        },
        &[],
        "src/llama-model.cpp (load_tensors: the input layer stays on the CPU)",
    );
    host_line.subtracted = false;
    lines.push(host_line);
    let (room, per_cell, _) = rooms.get(worst).copied().unwrap_or((0, 1, 0));
    Ok(Draft {
        version: "b9993+",
        capacity,
        capacity_kind: kind,
        lines,
        block: 1,
        group_block_bytes: per_cell.max(1),
        groups: 1,
        seq_blocks: f.cells,
        tokens_by_concurrency: false,
        kv_cache_bytes: Some(w.kv_bytes),
        pool: Some(i64::try_from(room).unwrap_or(i64::MIN)),
        speculative: None,
        need: Some(Need {
            bytes: w.kv_bytes,
            tokens,
            sequences: c.input.sequences.max(1),
        }),
        uncertainty: w.uncertainty_bytes,
        assumptions,
        warnings: Vec::new(),
        refused: None,
        devices: shares,
    })
}

/// The device of each layer under llama.cpp's `--tensor-split` over several GPUs:
/// index `il` for block `il` and `n_layer` for the output layer, `None` for the CPU.
///
/// Followed from `llama_model::load_tensors` (`src/llama-model.cpp`, ggml-org/llama.cpp
/// at commit 08033df): `splits` is `--tensor-split` as given, or each device's free
/// memory when it is absent or all zero; its running sums, divided by the total
/// (float32), are the split points. With `i_gpu_start = max(n_layer + 1 −
/// n_gpu_layers, 0)` and `act_gpu_layers = min(n_gpu_layers, n_layer + 1)`, a layer
/// before `i_gpu_start` stays on the CPU, and one after it goes to the first device
/// whose split point is above `(il − i_gpu_start) / act_gpu_layers`
/// (`std::upper_bound`). The input layer (token embeddings) is always on the CPU.
/// Empty when no split is positive.
pub fn tensor_split_layers(n_layer: u64, n_gpu_layers: u64, splits: &[f32]) -> Vec<Option<usize>> {
    let total: f32 = splits.iter().filter(|s| s.is_finite() && **s > 0.0).sum();
    if total <= 0.0 || !total.is_finite() {
        return Vec::new();
    }
    let mut points = Vec::with_capacity(splits.len());
    let mut running = 0f32;
    for s in splits {
        if s.is_finite() && *s > 0.0 {
            running += *s;
        }
        points.push(running / total);
    }
    let slots = n_layer.saturating_add(1);
    let start = slots.saturating_sub(n_gpu_layers);
    let active = n_gpu_layers.min(slots);
    let last = points.len().saturating_sub(1);
    (0..=n_layer)
        .map(|il| {
            if il < start || il.saturating_sub(start) >= active {
                return None;
            }
            // float(il - i_gpu_start) / act_gpu_layers, in float32.
            #[allow(clippy::cast_precision_loss)]
            let at = il.saturating_sub(start) as f32 / active as f32;
            Some(points.partition_point(|p| *p <= at).min(last))
        })
        .collect()
}

#[cfg(test)]
mod tests;
