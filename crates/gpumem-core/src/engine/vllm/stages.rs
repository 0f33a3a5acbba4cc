//! vLLM's pipeline stages over several cards (`--pp 2 --card a100-80gb,a100-40gb`):
//! each GPU sizes its own pool for the layers of its stage, and the engine keeps the
//! fewest blocks any of them has.
//!
//! Read in vllm v0.27.1 (the wheel's sources):
//! - `vllm/distributed/utils.py` `get_pp_indices`: each stage holds layers ÷ pp
//!   decoder layers; the remainder goes one each to the stages before the last,
//!   counting back from the second-to-last; `VLLM_PP_LAYER_PARTITION` (`20,12`)
//!   replaces the split, its length the stages and its sum the layers, or vLLM refuses.
//! - `vllm/model_executor/models/llama.py` (the model every Llama-style family
//!   follows): the embeddings on the first stage, and on the last too when they are
//!   tied to the head; the final norm and the head on the last; `make_layers` builds
//!   only the stage's decoder layers.
//! - `vllm/v1/worker/gpu_model_runner.py` `profile_run`: every stage profiles the
//!   forward of max_num_batched_tokens; only the last samples. A later stage keeps
//!   buffers for what it receives (`make_empty_intermediate_tensors`).
//! - `vllm/v1/core/kv_cache_utils.py` `get_kv_cache_configs`: each worker's pool is cut
//!   into blocks of its own layers' page, then "the num_blocks of each rank" becomes
//!   "the smallest among all ranks" — the engine's blocks are the fewest any GPU holds,
//!   the other GPUs' pools shrunk to them.
//!
//! Tensor parallelism inside a stage takes the stage's GPUs in `--card`'s order
//! (rank = stage × tp + tp rank, vLLM's order): each sizes its own pool, the smallest
//! card binding.

use super::flags::{CPU_OFFLOAD_GB, PP_LAYER_PARTITION, SPECULATIVE_METHOD};
use crate::engine::arith::{gib_text, prod, sum};
use crate::engine::outcome::{DeviceShare, Outcome};
use crate::engine::pool::Draft;
use crate::engine::request::{Ctx, Stage, kv_bytes_per_token, rope_in_buffers};
use crate::error::EstimateError;
use crate::estimate::{Group, LineKey};
use crate::units::share_ceil as part;

const KEY: &str = "pp-layer-partition";

/// Each stage's decoder layers, as `get_pp_indices` splits them (or as
/// `VLLM_PP_LAYER_PARTITION` gives them).
pub(super) fn partition(
    layers: u64,
    pp: u64,
    given: Option<&str>,
) -> Result<Vec<u64>, EstimateError> {
    let stages = usize::try_from(pp).map_err(|_| EstimateError::invalid("pp", "too many stages"))?;
    if let Some(text) = given {
        let parts: Vec<u64> = text
            .split(',')
            .map(|x| x.trim().parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| EstimateError::invalid(KEY, "each stage's layers as whole numbers"))?;
        if parts.len() != stages {
            return Err(EstimateError::invalid(
                KEY,
                format!(
                    "{} stages given for --pp {pp} (vLLM: \"len(partitions)={} does not match pp_size={pp}\")",
                    parts.len(),
                    parts.len()
                ),
            ));
        }
        let total = sum(&parts)?;
        if total != layers {
            return Err(EstimateError::invalid(
                KEY,
                format!(
                    "the stages add up to {total} layers; the model has {layers} (vLLM: \"sum(partitions)={total} does not match num_hidden_layers={layers}\")"
                ),
            ));
        }
        return Ok(parts);
    }
    let per = layers.checked_div(pp).unwrap_or(0);
    let remaining = usize::try_from(layers.checked_rem(pp).unwrap_or(0)).unwrap_or(0);
    let mut parts = vec![per; stages];
    // `for i in range(2, remaining_layers + 2): partitions[-i] += 1`
    for i in 2..remaining.saturating_add(2) {
        if let Some(p) = stages.checked_sub(i).and_then(|at| parts.get_mut(at)) {
            *p = p.saturating_add(1);
        }
    }
    Ok(parts)
}

/// The estimate's weights that one GPU of `stage` loads: its share of the decoder
/// layers (norms kept whole by tensor parallelism), the embeddings on the first stage
/// (and the last when tied), the head on the last, a vision or audio tower on each
/// (counted where vLLM builds it, on the safe side); MTP layers are loaded only to
/// speculate, which is not modelled over several cards.
fn stage_weights(c: &Ctx, layers: u64, tied: bool, stage: Stage) -> Result<u64, EstimateError> {
    let tp = c.input.tp.max(1);
    let mut total = 0u64;
    // transformers' rotary buffers are not vLLM's (`engine_weights`).
    let rope = rope_in_buffers(c.est, c.input)?;
    for l in c.est.lines.iter().filter(|l| l.in_total && l.group == Group::Weights) {
        let lb = if l.label == crate::estimate::BUFFERS_LABEL {
            l.bytes.saturating_sub(rope)
        } else {
            l.bytes
        };
        let bytes = match l.key {
            LineKey::WeightsEmbeddings if stage.first || (stage.last && tied) => lb.div_ceil(tp),
            LineKey::WeightsLmHead if stage.last => lb.div_ceil(tp),
            LineKey::WeightsTower => lb.div_ceil(tp),
            LineKey::WeightsEmbeddings | LineKey::WeightsLmHead | LineKey::WeightsMtp => 0,
            LineKey::WeightsNorms => part(lb, stage.layers, layers),
            _ => part(lb, stage.layers, prod(&[layers, tp])?),
        };
        total = sum(&[total, bytes])?;
    }
    Ok(total)
}

/// The pool a stage's draft leaves (what the common ending would compute), bytes.
fn pool_of(d: &Draft) -> i128 {
    if d.refused.is_some() {
        return 0;
    }
    if let Some(p) = d.pool {
        return i128::from(p);
    }
    let Some((first, rest)) = d.lines.split_first() else {
        return 0;
    };
    rest.iter()
        .filter(|l| l.subtracted)
        .fold(i128::from(first.bytes), |acc, l| {
            acc.saturating_sub(i128::from(l.bytes))
        })
}

/// The bytes of a draft's line (0 when absent).
fn bytes_of(d: &Draft, key: &str) -> u64 {
    d.lines
        .iter()
        .filter(|l| l.key == key && l.subtracted)
        .map(|l| l.bytes)
        .fold(0, u64::saturating_add)
}

/// vLLM over several cards: the stage rule on every GPU, the engine's blocks the
/// fewest of them; the answer's lines are that GPU's, and each GPU's row says what it
/// holds and needs.
pub(super) fn rule(c: &Ctx) -> Result<Draft, EstimateError> {
    let p = c.params;
    let input = c.input;
    let n = u64::try_from(p.devices.len()).unwrap_or(u64::MAX);
    let Some(a) = input.arch else {
        return Err(EstimateError::invalid(
            "card",
            "vLLM's pipeline stages over several cards need the model's layers (a config.json, --model or a preset)",
        ));
    };
    let (tp, pp) = (input.tp.max(1), input.pp.max(1));
    if pp < 2 {
        return Err(EstimateError::invalid(
            "card",
            format!(
                "{n} cards under vLLM are its pipeline stages: give --pp {} (its tensor parallelism alone runs on equal GPUs: one card and --tp)",
                n.checked_div(tp).unwrap_or(n)
            ),
        ));
    }
    let gpus = prod(&[tp, pp])?;
    if n != gpus {
        return Err(EstimateError::invalid(
            "card",
            format!(
                "{n} cards for tp {tp} × pp {pp} = {gpus} GPUs: name one card per GPU, stage by stage"
            ),
        ));
    }
    if p.text(SPECULATIVE_METHOD.key()).is_some() {
        return Err(EstimateError::invalid(
            "speculative-method",
            "speculative decoding over several cards is not modelled: name one card",
        ));
    }
    if p.text(CPU_OFFLOAD_GB.key()).is_some() {
        return Err(EstimateError::invalid(
            "cpu-offload-gb",
            "--cpu-offload-gb over several cards is not modelled: name one card",
        ));
    }
    let parts = partition(a.layers, pp, p.text(PP_LAYER_PARTITION.key()))?;
    // The whole model's KV bytes per token on one tensor-parallel rank, spread over
    // the layers: a stage keeps its layers' share.
    let whole = {
        let mut one = input.clone();
        one.pp = 1;
        kv_bytes_per_token(&one, crate::arch::CacheRuntime::Serving)?
    };
    struct Gpu {
        stage: Stage,
        card: crate::catalogue::GpuCard,
        draft: Draft,
        pool: i128,
        blocks: u64,
    }
    let mut gpus_sized: Vec<Gpu> = Vec::with_capacity(p.devices.len());
    let mut start = 0u64;
    for (si, layers) in parts.iter().copied().enumerate() {
        let index = u64::try_from(si).unwrap_or(u64::MAX);
        let stage = Stage {
            index,
            start,
            layers,
            first: si == 0,
            last: index.saturating_add(1) == pp,
        };
        start = sum(&[start, layers])?;
        let weights = stage_weights(c, a.layers, a.tied_embeddings, stage)?;
        let per_token = part(whole, layers, a.layers);
        let from = si.saturating_mul(usize::try_from(tp).unwrap_or(usize::MAX));
        for card in p.devices.iter().skip(from).take(usize::try_from(tp).unwrap_or(0)) {
            let sc = Ctx {
                input,
                est: c.est,
                params: p,
                card: *card,
                weights,
                embed_bytes: c.embed_bytes,
                mtp_bytes: 0,
                per_token,
                max_model_len: c.max_model_len,
                encoder_tokens: c.encoder_tokens,
                stage: Some(stage),
            };
            let draft = super::rule(&sc)?;
            let pool = pool_of(&draft);
            let blocks = u64::try_from(pool.max(0))
                .unwrap_or(0)
                .checked_div(draft.group_block_bytes)
                .unwrap_or(0);
            gpus_sized.push(Gpu {
                stage,
                card: *card,
                draft,
                pool,
                blocks,
            });
        }
    }
    // The fewest blocks bind (the later GPU on a tie: it also samples).
    let fewest = gpus_sized.iter().map(|g| g.blocks).min().unwrap_or(0);
    let binding = gpus_sized
        .iter()
        .rposition(|g| g.blocks == fewest)
        .unwrap_or(0);
    let mut devices = Vec::with_capacity(gpus_sized.len());
    for (i, g) in gpus_sized.iter().enumerate() {
        let d = &g.draft;
        // The card's capacity as the headline states it; vLLM sizes from what torch
        // reports (`d.capacity`), and the difference is in the need.
        let (capacity, _) = g.card.capacity();
        let share = d.lines.first().map_or(0, |l| l.bytes);
        let fit_margin = d.capacity.saturating_sub(share);
        let weights = bytes_of(d, "weights");
        let compute = sum(&[
            bytes_of(d, "activation_peak"),
            bytes_of(d, "pp_buffers"),
            bytes_of(d, "cuda_graphs"),
            bytes_of(d, "lora"),
        ])?;
        let context = bytes_of(d, "non_torch");
        // One sequence of max-model-len on this GPU: its layers' blocks.
        let kv = prod(&[d.seq_blocks, d.group_block_bytes])?;
        let headroom = i64::try_from(g.pool.saturating_sub(i128::from(kv))).unwrap_or(i64::MIN);
        let need = i64::try_from(capacity)
            .unwrap_or(i64::MAX)
            .saturating_sub(headroom);
        let unc = i64::try_from(d.uncertainty).unwrap_or(i64::MAX);
        let outcome = if g.pool <= 0 || headroom < unc.saturating_neg() {
            Outcome::Refused
        } else if headroom <= unc {
            Outcome::Borderline
        } else {
            Outcome::Fits
        };
        let s = g.stage;
        let end = s.start.saturating_add(s.layers);
        let mut held = if s.layers == 0 {
            "no decoder layer".to_string()
        } else {
            format!("layers {}–{}", s.start, end.saturating_sub(1))
        };
        if s.first {
            held.push_str(" + embeddings");
        }
        if s.last {
            held.push_str(" and the output layer");
        }
        devices.push(DeviceShare {
            device: u64::try_from(i).unwrap_or(u64::MAX),
            card: g.card.id.to_string(),
            card_name: g.card.name.to_string(),
            capacity_bytes: capacity,
            split: if tp > 1 {
                format!(
                    "stage {} of {pp}, tp rank {}",
                    s.index,
                    u64::try_from(i).unwrap_or(0).checked_rem(tp).unwrap_or(0)
                )
            } else {
                format!("stage {} of {pp}", s.index)
            },
            layers: held,
            blocks: s.layers,
            output_layer: s.last,
            weights_bytes: weights,
            kv_bytes: kv,
            compute_bytes: compute,
            mmproj_bytes: 0,
            context_bytes: context,
            fit_margin_bytes: fit_margin,
            need_bytes: u64::try_from(need.max(0)).unwrap_or(0),
            headroom_bytes: headroom,
            uncertainty_bytes: d.uncertainty,
            outcome,
            most_loaded: i == binding,
        });
    }
    let mut others: Vec<String> = Vec::new();
    for (i, g) in gpus_sized.iter().enumerate() {
        if i != binding {
            for w in &g.draft.warnings {
                if !others.contains(w) {
                    others.push(w.clone());
                }
            }
        }
    }
    let mut d = gpus_sized.swap_remove(binding).draft;
    let split: Vec<String> = parts.iter().map(ToString::to_string).collect();
    d.assumptions.insert(
        0,
        format!(
            "pipeline stages of {} decoder layers ({}); each GPU sizes its own pool, the engine keeps the fewest blocks of any ({fewest}: GPU {binding}, {}); KV bytes per token spread evenly over the layers",
            split.join(", "),
            if p.text(PP_LAYER_PARTITION.key()).is_some() {
                "VLLM_PP_LAYER_PARTITION"
            } else {
                "vLLM's get_pp_indices"
            },
            gib_text(fewest.saturating_mul(d.group_block_bytes)),
        ),
    );
    for w in others {
        if !d.warnings.contains(&w) {
            d.warnings.push(w);
        }
    }
    d.devices = devices;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::partition;

    /// vLLM's own goldens (`tests/distributed/test_pipeline_partition.py`) and its
    /// docstring's cases.
    #[test]
    fn layers_split_as_get_pp_indices_splits_them() {
        assert_eq!(partition(32, 2, None).unwrap(), [16, 16]);
        assert_eq!(partition(5, 2, None).unwrap(), [3, 2]);
        assert_eq!(partition(5, 3, None).unwrap(), [2, 2, 1]);
        assert_eq!(partition(6, 4, None).unwrap(), [1, 2, 2, 1]);
        assert_eq!(partition(31, 4, None).unwrap(), [8, 8, 8, 7]);
        assert_eq!(partition(80, 3, None).unwrap(), [27, 27, 26]);
        assert_eq!(partition(32, 2, Some("20,12")).unwrap(), [20, 12]);
        let e = partition(32, 2, Some("20,10")).unwrap_err().to_string();
        assert!(e.contains("30 layers"), "{e}");
        let e = partition(32, 3, Some("20,12")).unwrap_err().to_string();
        assert!(e.contains("2 stages"), "{e}");
    }
}
