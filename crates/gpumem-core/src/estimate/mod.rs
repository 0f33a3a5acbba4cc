//! The front door: [`EstimateInput`] in, [`Estimate`] out.
//!
//! The input is flat and named exactly like the CLI flags and the page's URL keys
//! (`parameters`, `bits`, `reserve-gib`, `kv-heads`, …: the flag without its
//! dashes), so one vocabulary serves the agent, the page and shared links. Each
//! output [`Line`] is tagged *computed* (follows from the inputs and a format's
//! layout) or *assumed* (a hypothesis only a measurement settles), and carries its
//! formula and inputs so the page can show them.
//!
//! One module per part of the estimate: `input` (the flat input and its
//! checks), `split` (the most loaded device's share), `weights`, `kv`,
//! `training` and `transients` (each adds its lines to one builder).

// Checked arithmetic only (here and in the submodules): user input reaches every
// operation, and an overflow must be an error, never a panic or a wrapped number.
#![deny(clippy::arithmetic_side_effects)]

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::arch::CacheRuntime;
use crate::arch::{Architecture, MAX_DIM, ModuleFormats, Moe, ParamClass};
use crate::error::EstimateError;
use crate::format::{Dtype, Fp8Scales, StorageFormat};
use crate::kv::{KvDtype, KvLayout, KvShape};
use crate::summary::TensorSummary;
use crate::training::{
    Adapters, AttentionImpl, CheckpointPolicy, Framework, LoraTargets, Loss, Optimizer,
    QloraKernel, activation_bytes, decoder_activations, decoder_prefill,
};
use crate::units::{Bytes, MIB, checked_product};

mod audio;
mod counted;
mod decompress;
mod input;
mod kv;
mod line_key;
mod peaks;
mod ranks;
mod split;
mod tower;
mod training;
mod transients;
mod weights;

pub use counted::{
    Counted, CountedCross, CountedLayer, CountedMatrices, CountedMeasured, CountedVectors,
};
pub use input::{EstimateInput, Fsdp, KvDims, Logits, Offload, Pipeline, TrainMode};
pub use line_key::LineKey;
pub use ranks::{
    MAX_LIVE_PARAMETERS, OPTIMIZER_SWAP_BUFFERS, PARAM_SWAP_BUFFERS, PREFETCH_BUCKET_SIZE,
    REDUCE_BUCKET_SIZE, SUB_GROUP_SIZE, summary as rank_summary,
};
use split::Split;
pub(crate) use weights::head_quantised;
pub use weights::{
    BUFFERS_LABEL, ct_decompressed, experts_not_loaded, fp8_dequantised, module_formats,
};

/// Side of the square matrices assumed in parameter-count mode to count a
/// quantised format's per-group and per-channel overhead.
pub const ASSUMED_MATRIX_DIM: u64 = 4096;

/// Which headline figure a line adds to; each line belongs to exactly one, so no
/// line is counted twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Group {
    /// Stored weights (`weights_bytes`).
    Weights,
    /// The KV cache (`kv_cache_bytes`).
    KvCache,
    /// Gradients, optimizer states, master weights, adapters (`training_bytes`).
    Training,
    /// Activations, prefill intermediates, logits, CUDA context (`transient_bytes`).
    Transient,
    /// The reserve (`reserve_bytes`).
    Reserve,
    /// Host memory per node that offloading needs (`host_bytes`): not device memory,
    /// so never part of the device's total.
    Host,
}

/// Whether a line follows from the inputs or is a hypothesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Kind {
    /// Follows from the inputs and the formats' layouts.
    Computed,
    /// A hypothesis: only a measurement settles it.
    Assumed,
    /// Traced: the model's own code run for this workload on PyTorch's `meta` device
    /// (`gpumem-agent trace`), every tensor counted as the CUDA caching allocator
    /// would round it. Not a GPU measurement: kernels' private workspaces and memory
    /// outside the allocator are not in it.
    Traced,
}

impl Kind {
    /// The word shown beside a line: `computed`, `assumed` or `traced`.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Computed => "computed",
            Kind::Assumed => "assumed",
            Kind::Traced => "traced",
        }
    }
}

/// One line of the breakdown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Line {
    /// Its key; serialised as the stable string ("weights.mlp", "kv_cache", "reserve", …).
    pub key: LineKey,
    /// Human label.
    pub label: Cow<'static, str>,
    /// Bytes for the whole workload.
    pub bytes: u64,
    /// Bytes on the most loaded device under the chosen split.
    pub device_bytes: u64,
    /// Computed, assumed or traced.
    pub kind: Kind,
    /// A traced line's predecessor: the formula's figure it replaced, kept beside it
    /// (the formula text says whether that figure was computed or assumed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced_bytes: Option<u64>,
    /// The headline figure the line adds to (always `key.group()`; kept in the
    /// output so a reader of `--json` need not know the keys).
    pub group: Group,
    /// Whether the line is part of the total (informational lines are not).
    pub in_total: bool,
    /// The formula, in words.
    pub formula: String,
    /// The formula's inputs, name → value.
    pub inputs: BTreeMap<Cow<'static, str>, String>,
}

/// The result: headline figures (a public contract, also in `--json`) and lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Estimate {
    /// All weights, stored bytes.
    pub weights_bytes: u64,
    /// KV cache at its largest (end of generation, or the static length).
    pub kv_cache_bytes: u64,
    /// Gradients + optimizer states + master weights + adapters (0 for inference).
    pub training_bytes: u64,
    /// Assumed activations and transients (training activations, prefill
    /// intermediates, logits, CUDA context).
    pub transient_bytes: u64,
    /// The reserve, per device.
    pub reserve_bytes: u64,
    /// Host memory per node that offloaded states and their pinned buffers need
    /// (the `host.*` lines; 0 without offloading). Not in any device total.
    #[serde(default)]
    pub host_bytes: u64,
    /// Sum of the lines in the total (reserve counted once).
    pub total_bytes: u64,
    /// What the most loaded device must hold (reserve included).
    pub per_device_bytes: u64,
    /// Parameters (logical, unquantised elements); `None` when weights come from a
    /// file header, which gives bytes but not the logical count of packed tensors.
    pub parameters: Option<u64>,
    /// Parameters used per token (MoE: active experts only); `None` as above.
    pub active_parameters: Option<u64>,
    /// Every line.
    pub lines: Vec<Line>,
    /// Hypotheses the figures rest on, in words.
    pub assumptions: Vec<String>,
    /// Soft problems with the input.
    pub warnings: Vec<String>,
}

struct Builder {
    lines: Vec<Line>,
    assumptions: Vec<String>,
    warnings: Vec<String>,
    /// The optimizer step's temporaries, bytes, whether or not they exceed what the
    /// backward freed (the `optimizer_step` line holds only what does): the caching
    /// allocator's model places them after the step's tensors are freed
    /// (`peaks::peaks`).
    optimizer_temporaries: u64,
    /// Set by [`fsdp1_reserved_over_batches`]: the FSDP1 step is wanted alone, and
    /// `peaks::peaks` leaves it in `fsdp1_step` instead of replaying it.
    step_only: bool,
    /// The FSDP1 step `peaks::peaks` built (with `step_only`).
    fsdp1_step: Option<crate::training::fsdp1::Step>,
}

impl Builder {
    /// The per-device bytes of the lines under `key` so far (0 when none).
    fn device(&self, key: LineKey) -> u64 {
        self.lines
            .iter()
            .filter(|l| l.key == key)
            .map(|l| l.device_bytes)
            .fold(0u64, u64::saturating_add)
    }

    #[allow(clippy::too_many_arguments)]
    fn line(
        &mut self,
        key: LineKey,
        label: impl Into<Cow<'static, str>>,
        bytes: u64,
        device_bytes: u64,
        kind: Kind,
        in_total: bool,
        formula: String,
        inputs: &[(&'static str, String)],
    ) {
        self.push_line(
            key,
            label.into(),
            [bytes, device_bytes],
            kind,
            in_total,
            formula,
            inputs,
        );
    }

    /// The one non-generic body of [`Builder::line`], compiled once rather than for
    /// each of its callers' argument types.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn push_line(
        &mut self,
        key: LineKey,
        label: Cow<'static, str>,
        [bytes, device_bytes]: [u64; 2],
        kind: Kind,
        in_total: bool,
        formula: String,
        inputs: &[(&'static str, String)],
    ) {
        // Inserted one by one rather than collected: `BTreeMap::from_iter` sorts,
        // and each sort instance costs the page kilobytes. A repeated name keeps
        // its last value either way.
        let mut map = BTreeMap::new();
        for (k, v) in inputs {
            map.insert(Cow::Borrowed(*k), v.clone());
        }
        self.lines.push(Line {
            group: key.group(),
            key,
            label,
            bytes,
            device_bytes,
            kind,
            replaced_bytes: None,
            in_total,
            formula,
            inputs: map,
        });
    }
}

/// Computes an estimate.
pub fn estimate(input: &EstimateInput) -> Result<Estimate, EstimateError> {
    stages::<true, true>(input)
}

/// Computes an estimate of a training run: the same value as [`estimate`] for an
/// input that trains (`train` ≠ none), without inference's stages — the prefill's
/// transients, the vision and audio towers' forward and the first forward's
/// decompression, each of which adds nothing to such an input. A caller that answers
/// inference elsewhere links none of them (the page's training module, loaded beside
/// the engine module that estimates inference). An input that trains nothing is
/// refused.
pub fn estimate_training(input: &EstimateInput) -> Result<Estimate, EstimateError> {
    if input.train == TrainMode::None {
        return Err(EstimateError::invalid(
            "train",
            "an inference is estimated with its prefill's stages, which this estimate leaves out",
        ));
    }
    stages::<true, false>(input)
}

/// Computes an estimate of inference: the same value as [`estimate`] for an input
/// that trains nothing (`train` = none), without the training stages — the training
/// state, the ranks' plan and the caching allocator's peaks, each of which adds
/// nothing to such an input. A caller that answers training elsewhere links none of
/// them (the page's first module, whose training estimates come from a module it
/// loads when a training run is asked about). A training input is refused.
pub fn estimate_inference(input: &EstimateInput) -> Result<Estimate, EstimateError> {
    if input.train != TrainMode::None {
        return Err(EstimateError::invalid(
            "train",
            "a training run is estimated with its training stages, which this estimate leaves out",
        ));
    }
    stages::<false, true>(input)
}

/// The input as the model runs it when it puts tokens ahead of the prompt's ids
/// ([`Architecture::prefix_tokens`], GIT's image): every stage — the cache, the
/// activations, a training step — sees `context + prefix` tokens per sequence, and
/// the position limits grow by as many, since those tokens take no row of the
/// position table. `None` when there are none (or no context to add them to).
fn with_prefix(
    input: &EstimateInput,
    b: &mut Builder,
) -> Result<Option<EstimateInput>, EstimateError> {
    let (Some(a), Some(context)) = (input.arch, input.context) else {
        return Ok(None);
    };
    let prefix = a.prefix_tokens;
    if prefix == 0 {
        return Ok(None);
    }
    let grow = |n: u64| {
        n.checked_add(prefix)
            .ok_or(EstimateError::Overflow { what: "tokens" })
    };
    let mut wide = input.clone();
    wide.context = Some(grow(context)?);
    wide.max_position = wide.max_position.map(grow).transpose()?;
    wide.rope_positions = wide.rope_positions.map(grow).transpose()?;
    b.assumptions.push(format!(
        "the model puts {prefix} tokens ahead of the prompt's {context} in every sequence (prefix-tokens: one image's, as GIT concatenates the projected image ahead of the text): the cache and the activations hold {} tokens per sequence",
        context.saturating_add(prefix)
    ));
    Ok(Some(wide))
}

/// The estimate's stages in order; `TRAINING` runs the training ones and `INFERENCE`
/// inference's (constants, so [`estimate_inference`] carries none of the training
/// stages' code and [`estimate_training`] none of inference's). Each set adds nothing
/// to an input of the other kind, so every pair gives [`estimate`]'s value where its
/// caller admits the input.
fn stages<const TRAINING: bool, const INFERENCE: bool>(
    input: &EstimateInput,
) -> Result<Estimate, EstimateError> {
    stages_with::<TRAINING, INFERENCE>(input, false).map(|(e, _)| e)
}

/// [`stages`], and with `step_only` the FSDP1 step the caching allocator's stage built
/// (its replay left out).
fn stages_with<const TRAINING: bool, const INFERENCE: bool>(
    input: &EstimateInput,
    step_only: bool,
) -> Result<(Estimate, Option<crate::training::fsdp1::Step>), EstimateError> {
    input::validate(input)?;
    let mut b = Builder {
        lines: Vec::new(),
        assumptions: Vec::new(),
        warnings: Vec::new(),
        optimizer_temporaries: 0,
        step_only,
        fsdp1_step: None,
    };
    let arch = input.arch;
    if let Some(a) = arch {
        a.validate()?;
    }
    let widened = with_prefix(input, &mut b)?;
    let input = widened.as_ref().unwrap_or(input);
    let split = Split {
        tp: input.tp,
        pp: input.pp,
        layers: arch.map(|a| a.layers).or(input.kv_only.map(|k| k.layers)),
    };
    if input.tp > 1 || input.pp > 1 {
        if let Some(a) = arch {
            if !a.kv_heads.is_multiple_of(input.tp) && !input.tp.is_multiple_of(a.kv_heads) {
                b.warnings.push(format!(
                    "tp = {} does not divide {} KV heads evenly",
                    input.tp, a.kv_heads
                ));
            }
            if !a.layers.is_multiple_of(input.pp) {
                b.warnings.push(format!(
                    "{} layers do not split evenly into {} stages: the heaviest stage is counted",
                    a.layers, input.pp
                ));
            }
        } else {
            b.assumptions.push("no architecture given: weights and states are assumed to split evenly across tp × pp devices".into());
        }
    }
    // tp and pp are at most MAX_DIM each (validated): the product cannot saturate,
    // and it is at least 1.
    let devices = input.tp.saturating_mul(input.pp);
    if input.gpus > devices && input.zero == 0 && input.fsdp == Fsdp::None {
        b.assumptions.push(format!(
            "{} GPUs with tp × pp = {}: {} data-parallel replicas, each device holding its own copy (memory is never pooled across GPUs)",
            input.gpus,
            devices,
            input.gpus.checked_div(devices).unwrap_or(input.gpus)
        ));
    }

    // Weights.
    let (params, active_params) = weights::weights(input, &split, &mut b)?;
    let weights_bytes = group_sum(&b.lines, Group::Weights)?;

    // KV cache.
    kv::kv_cache(input, &split, &mut b)?;

    // Training state.
    if TRAINING {
        let plan = ranks::Plan::new(input);
        let trainable = training::training(input, params, weights_bytes, &split, &plan, &mut b)?;
        ranks::ranks(input, &plan, &split, params, trainable, &mut b)?;
    }

    // Activations and transients.
    transients::cuda_context(input, &mut b)?;
    if INFERENCE {
        transients::prefill(input, &split, &mut b)?;
        // The vision tower's forward, a phase of the prefill beside the text's.
        tower::vision_tower(input, &mut b)?;
        audio::audio_tower(input, &mut b)?;
        // compressed-tensors' decompression, a moment before the first forward of an
        // inference (a training step's own activations are not modelled beside it).
        if input.train == TrainMode::None {
            decompress::decompress_moment(input, &mut b)?;
        }
    } else {
        audio::training_warning(input, &mut b);
    }

    // The caching allocator: the loading peak and what the step reserves.
    if TRAINING {
        peaks::peaks(input, &mut b)?;
    }

    // Reserve.
    let reserve = match input.reserve_bytes {
        Some(r) => r,
        None => Bytes::from_gib(input.reserve_gib)?.get(),
    };
    let reserve_formula = match input.reserve_bytes {
        Some(_) => "a reserve given in bytes (e.g. the agent's observed context/non-pool overhead)"
            .to_string(),
        None => format!("{} GiB × 2^30", input.reserve_gib),
    };
    b.line(
        LineKey::Reserve,
        "Reserve (preparation hypothesis, not proof)",
        reserve,
        reserve,
        // A reserve given in bytes is the user's or the agent's observed figure, not
        // the estimator's hypothesis: it does not widen the verdict's margin.
        if input.reserve_bytes.is_some() {
            Kind::Computed
        } else {
            Kind::Assumed
        },
        true,
        reserve_formula,
        &[("reserve-gib", input.reserve_gib.to_string())],
    );
    if input.cuda_context_mib.is_none() {
        b.assumptions.push("the CUDA context and library workspaces are assumed to fit inside the reserve (set cuda-context-mib, or use the agent's observed value)".into());
    }

    let counted = |l: &&Line| l.in_total;
    let kv_cache_bytes = group_sum(&b.lines, Group::KvCache)?;
    let training_bytes = group_sum(&b.lines, Group::Training)?;
    let transient_bytes = group_sum(&b.lines, Group::Transient)?;
    let total_bytes = sum_lines(&b.lines, counted, |l| l.bytes, "total")?;
    let per_device_bytes = sum_lines(&b.lines, counted, |l| l.device_bytes, "per-device total")?;
    let host_bytes = sum_lines(
        &b.lines,
        |l| l.group == Group::Host,
        |l| l.bytes,
        "host memory",
    )?;
    Ok((
        Estimate {
            weights_bytes,
            kv_cache_bytes,
            training_bytes,
            transient_bytes,
            reserve_bytes: reserve,
            host_bytes,
            total_bytes,
            per_device_bytes,
            parameters: params,
            active_parameters: active_params,
            lines: b.lines,
            assumptions: b.assumptions,
            warnings: b.warnings,
        },
        b.fsdp1_step,
    ))
}

/// The most batches [`fsdp1_reserved_over_batches`] replays (an epoch of a 52 000-row
/// data set at one sequence a rank, with room).
pub const MAX_BATCHES: usize = 60_000;

/// What FSDP1's three streams' pools reserve on a device with room
/// (`max_memory_reserved`) over a run's own batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchesReserved {
    /// Default (compute) stream, unshard stream, post-backward stream, bytes.
    pub per_stream: [u64; 3],
    /// The highest sum of the three over the run, bytes.
    pub total: u64,
}

/// The `allocator.cache` line's replay of an FSDP1 step (torchtune's recipes of 2024:
/// `--fsdp full` with `--framework torchtune@0.1`) over the batches of a run whose
/// collate function pads each batch to its longest sample (torchtune's
/// `padded_collate`): `padded[k]` is the k-th batch's padded length in tokens, in the
/// order the rank sees them. Each batch's step is the estimate's at `--context` =
/// that length (its activations, loss tensors and kept logits); the units, shards and
/// optimizer are the run's; the pools are replayed through every batch in turn, so
/// blocks cached at one length are cut for the next
/// (`training::fsdp1`'s `run_batches`).
///
/// `input.context` is the longest a batch may be (the data set's `max_seq_len`):
/// every length lies in 1..=context, and there are 1 to [`MAX_BATCHES`] of them.
/// `Ok(None)` where the estimate replays no FSDP1 step for `input`.
pub fn fsdp1_reserved_over_batches(
    input: &EstimateInput,
    padded: &[u64],
) -> Result<Option<BatchesReserved>, EstimateError> {
    let Some(context) = input.context else {
        return Err(EstimateError::invalid(
            "context",
            "the longest batch (the data set's max_seq_len) is needed",
        ));
    };
    if padded.is_empty() || padded.len() > MAX_BATCHES {
        return Err(EstimateError::invalid(
            "batches",
            format!("1 to {MAX_BATCHES} padded lengths, not {}", padded.len()),
        ));
    }
    if let Some(bad) = padded.iter().find(|&&l| l == 0 || l > context) {
        return Err(EstimateError::invalid(
            "batches",
            format!("a batch of {bad} tokens: each lies in 1..={context} (the context)"),
        ));
    }
    let mut steps: BTreeMap<u64, crate::training::fsdp1::Step> = BTreeMap::new();
    for &l in padded {
        if steps.contains_key(&l) {
            continue;
        }
        let at = EstimateInput {
            context: Some(l),
            ..input.clone()
        };
        match stages_with::<true, false>(&at, true)?.1 {
            Some(s) => steps.insert(l, s),
            None => return Ok(None),
        };
    }
    let run: Vec<crate::training::fsdp1::Step> = padded
        .iter()
        .filter_map(|l| steps.get(l).cloned())
        .collect();
    let r = crate::training::fsdp1::reserved_over(&run);
    Ok(Some(BatchesReserved {
        per_stream: r.per_stream,
        total: r.total,
    }))
}

/// A figure traced for one line (see [`Kind::Traced`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedLine {
    /// The line it replaces (or adds, when the estimate has none).
    pub key: LineKey,
    /// Its label.
    pub label: String,
    /// Traced bytes for the whole workload (one device).
    pub bytes: u64,
    /// How the trace got them, in words.
    pub formula: String,
}

impl Estimate {
    /// Whether a group of the total is called assumed: when any of its counted lines
    /// is (the transients are computed for a decoder the derivation covers, traced
    /// with a trace) — one rule for the CLI's total and the page's figures.
    pub fn group_is_assumed(&self, g: Group) -> bool {
        self.lines
            .iter()
            .any(|l| l.group == g && l.in_total && l.kind == Kind::Assumed)
    }

    /// Replaces lines with traced figures, keeping each replaced figure beside
    /// (`replaced`), and recomputes the headline figures, so the fit uses them.
    /// A traced line's device share follows the replaced line's (the trace is of one
    /// device: its figure is scaled by the share the estimate gave that device).
    pub fn with_traced(mut self, traced: &[TracedLine]) -> Result<Estimate, EstimateError> {
        for t in traced {
            let old = self.lines.iter().position(|l| l.key == t.key);
            // A traced zero where the estimate has no line says nothing new.
            if old.is_none() && t.bytes == 0 {
                continue;
            }
            let (device_bytes, replaced) = match old.map(|i| &self.lines[i]) {
                Some(l) if l.bytes > 0 => (
                    u64::try_from(
                        u128::from(t.bytes)
                            .checked_mul(u128::from(l.device_bytes))
                            .and_then(|x| x.checked_div(u128::from(l.bytes)))
                            .ok_or(EstimateError::Overflow {
                                what: "traced line",
                            })?,
                    )
                    .map_err(|_| EstimateError::Overflow {
                        what: "traced line",
                    })?,
                    Some((l.kind, l.bytes)),
                ),
                Some(l) => (t.bytes, Some((l.kind, l.bytes))),
                None => (t.bytes, None),
            };
            let line = Line {
                key: t.key,
                label: Cow::Owned(t.label.clone()),
                bytes: t.bytes,
                device_bytes,
                kind: Kind::Traced,
                replaced_bytes: replaced.map(|(_, b)| b),
                group: t.key.group(),
                in_total: true,
                formula: match replaced {
                    Some((kind, bytes)) => {
                        format!(
                            "{} (replaces the {} figure, {bytes} B)",
                            t.formula,
                            kind.name()
                        )
                    }
                    None => t.formula.clone(),
                },
                inputs: BTreeMap::new(),
            };
            match old {
                Some(i) => self.lines[i] = line,
                None => self.lines.push(line),
            }
        }
        // The text prefill's traced figures move the phase the tower's line tops up.
        tower::retop(&mut self.lines)?;
        decompress::retop(&mut self.lines)?;
        let counted = |l: &&Line| l.in_total;
        self.weights_bytes = group_sum(&self.lines, Group::Weights)?;
        self.kv_cache_bytes = group_sum(&self.lines, Group::KvCache)?;
        self.training_bytes = group_sum(&self.lines, Group::Training)?;
        self.transient_bytes = group_sum(&self.lines, Group::Transient)?;
        self.total_bytes = sum_lines(&self.lines, counted, |l| l.bytes, "total")?;
        self.per_device_bytes =
            sum_lines(&self.lines, counted, |l| l.device_bytes, "per-device total")?;
        Ok(self)
    }
}

/// Checked sum of one field over the lines that `keep` selects.
fn sum_lines(
    lines: &[Line],
    keep: impl Fn(&&Line) -> bool,
    field: impl Fn(&Line) -> u64,
    what: &'static str,
) -> Result<u64, EstimateError> {
    Bytes::sum(lines.iter().filter(keep).map(|l| Bytes(field(l))), what).map(Bytes::get)
}

/// Checked sum of the bytes of the counted lines of one group.
fn group_sum(lines: &[Line], group: Group) -> Result<u64, EstimateError> {
    sum_lines(
        lines,
        |l| l.in_total && l.group == group,
        |l| l.bytes,
        "headline figure",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::from_pairs;

    /// A line's bytes (the line must be there).
    fn line_bytes(e: &Estimate, key: LineKey) -> u64 {
        e.lines
            .iter()
            .find(|l| l.key == key)
            .map(|l| l.bytes)
            .unwrap()
    }

    fn llama_8b(extra: &[(&'static str, &'static str)]) -> EstimateInput {
        let mut pairs = vec![
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("intermediate", "14336"),
            ("vocab", "128256"),
        ];
        pairs.extend_from_slice(extra);
        let (input, errors) = from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        input
    }

    /// PEFT 0.21.2's LoRA over transformers 5.23's stacked experts: `all-linear` on
    /// OLMoE's shapes (the `olmoe.json` fixture: 16 layers, hidden 2 048, 64 experts of
    /// 2 048) trains 273 170 432 parameters at rank 16 — `get_peft_model(model,
    /// LoraConfig(r=16, target_modules="all-linear"))` on the model built on meta,
    /// `sum(p.numel() for p in model.parameters() if p.requires_grad)` —: q, k, v, o
    /// 262 144 a layer, each expert's fused gate_up adapter at rank 32 and down's
    /// 16 × (5 × 2 048 + 3 × 2 048) = 262 144, the router 16 × (2 048 + 64). The
    /// count equals it (the per-linear count was 205 520 896, 25 % under). DeepSeek-V3
    /// (7 645 254 656 by PEFT, its latent attention's five linears included) is counted
    /// 1 327 104 above, its three dense layers' MLP adapters, which PEFT's conversion
    /// leaves out: the safe side.
    #[test]
    fn peft_adapts_stacked_experts_and_routers() {
        let adapters = |fixture: &str| {
            let doc: serde_json::Value = serde_json::from_str(fixture).unwrap();
            let mut config = doc["config"].clone();
            config["model_type"] = doc["model_type"].clone();
            let c = crate::import::config::parse_config(&config.to_string()).unwrap();
            let mut pairs = c.pairs();
            for (k, v) in [
                ("train", "lora"),
                ("lora-targets", "all"),
                ("context", "128"),
            ] {
                pairs.push((k, v.to_string()));
            }
            let (input, errors) = from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
            assert!(errors.is_empty(), "{errors:?}");
            let e = estimate(&input).unwrap();
            line_bytes(&e, LineKey::TrainingAdapters) / 4
        };
        assert_eq!(
            adapters(include_str!("../../tests/cases/transformers/olmoe.json")),
            273_170_432
        );
        assert_eq!(
            adapters(include_str!(
                "../../tests/cases/transformers/deepseek_v3.json"
            )),
            7_645_254_656 + 1_327_104
        );
    }

    /// bitsandbytes' kernel at the prefill, the widest quantised linear's: Llama-3.1-8B
    /// at 8 192 tokens in nf4 dequantises a 14 336 × 4 096 MLP weight to bf16
    /// (117 440 512 B); in LLM.int8 the gate (or up) projection's int8 input, its fp32
    /// row scale, and its int32 product beside the product's fp16 dequantisation and
    /// bf16 cast, 8 192 × (4 096 + 4 + 6 × 14 336) B (above down_proj's quantisation of
    /// its 14 336-wide input, 6 B a value). Mixtral in nf4 under transformers
    /// keeps its experts in bf16 and has no dense MLP: the widest quantised linear is
    /// q_proj, 4 096 × 4 096 × 2 B.
    #[test]
    fn the_prefill_holds_the_widest_quantised_linears_kernel() {
        let line = |input: &EstimateInput| {
            let e = estimate(input).unwrap();
            e.lines
                .iter()
                .find(|l| l.key == LineKey::PrefillQuantizedMatmul)
                .map(|l| l.bytes)
        };
        let at = [("context", "8192")];
        assert_eq!(line(&llama_8b(&at)), None);
        let nf4 = llama_8b(&[("context", "8192"), ("format", "nf4")]);
        assert_eq!(line(&nf4), Some(14_336 * 4_096 * 2));
        let int8 = llama_8b(&[("context", "8192"), ("format", "int8")]);
        assert_eq!(line(&int8), Some(8_192 * (4_096 + 4 + 6 * 14_336)));
        let preset = crate::presets::find("mixtral-8x7b").unwrap();
        let pairs = preset
            .pairs
            .iter()
            .copied()
            .chain([("context", "8192"), ("format", "nf4")]);
        let (mixtral, errors) = from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(line(&mixtral), Some(4_096 * 4_096 * 2));
    }

    /// A pre-quantised GPTQ or AWQ Mixtral under transformers: the loaders replace
    /// `nn.Linear` modules only and the checkpoint's per-expert keys reach none of the
    /// 3D expert parameters, which transformers initialises in bf16: the MLP line holds
    /// 32 × 8 × 3 × 14 336 × 4 096 expert parameters at 2 B, and a warning says the model
    /// is not the checkpoint's. A serving engine keeps the experts quantised: about a
    /// quarter of that.
    #[test]
    fn a_gptq_or_awq_moe_under_transformers_holds_its_experts_in_16_bits() {
        let experts = 32 * 8 * 3 * 14_336 * 4_096u64;
        let preset = crate::presets::find("mixtral-8x7b").unwrap();
        for format in ["gptq-4-g128", "awq-4-g128"] {
            let run = |runtime: CacheRuntime| {
                let pairs = preset
                    .pairs
                    .iter()
                    .copied()
                    .chain([("context", "1024"), ("format", format)]);
                let (mut input, errors) = from_pairs(pairs);
                assert!(errors.is_empty(), "{errors:?}");
                input.runtime = runtime;
                let e = estimate(&input).unwrap();
                let mlp = line_bytes(&e, LineKey::WeightsMlp);
                let said = e
                    .warnings
                    .iter()
                    .any(|w| w.contains("not the checkpoint's") && w.contains("45097156608"));
                (mlp, said)
            };
            let (held, said) = run(CacheRuntime::Transformers);
            assert!(held >= experts * 2, "{format}: {held}");
            assert!(said, "{format}: no warning");
            let (served, said) = run(CacheRuntime::Serving);
            assert!(served < experts * 2 / 3, "{format}: {served}");
            assert!(!said, "{format}: warned under a serving engine");
        }
    }

    /// transformers dequantises an fp8 checkpoint to bf16 on a card below compute
    /// capability 8.9: the linears weigh 2 B a parameter there, with a warning; on an
    /// fp8 card, with no card (an assumption says so) and under a serving engine they
    /// stay in fp8.
    #[test]
    fn transformers_dequantises_fp8_on_a_card_without_fp8() {
        let weights = |card_fp8: Option<bool>, runtime: CacheRuntime| {
            let mut input = llama_8b(&[("format", "fp8-block"), ("context", "1024")]);
            input.card_fp8 = card_fp8;
            input.runtime = runtime;
            let e = estimate(&input).unwrap();
            let mlp = line_bytes(&e, LineKey::WeightsMlp);
            (mlp, e.warnings, e.assumptions)
        };
        let mlp_params = 3 * 32 * 14_336 * 4_096u64;
        let (ampere, warnings, _) = weights(Some(false), CacheRuntime::Transformers);
        assert_eq!(ampere, mlp_params * 2);
        assert!(
            warnings.iter().any(|w| w.contains("dequantises")),
            "{warnings:?}"
        );
        let (hopper, warnings, _) = weights(Some(true), CacheRuntime::Transformers);
        assert!(hopper < mlp_params + mlp_params / 10, "{hopper}");
        assert!(!warnings.iter().any(|w| w.contains("dequantises")));
        let (none, _, assumptions) = weights(None, CacheRuntime::Transformers);
        assert_eq!(none, hopper);
        assert!(
            assumptions
                .iter()
                .any(|a| a.contains("compute capability 8.9"))
        );
        assert_eq!(weights(Some(false), CacheRuntime::Serving).0, hopper);
        use crate::catalogue::{CATALOGUE, cards_fp8};
        let card = |id: &str| *CATALOGUE.iter().find(|c| c.id == id).unwrap();
        assert_eq!(cards_fp8(&[card("a100-80gb")]), Some(false));
        assert_eq!(cards_fp8(&[card("h100-sxm-80gb")]), Some(true));
        assert_eq!(
            cards_fp8(&[card("h100-sxm-80gb"), card("rtx-3090")]),
            Some(false)
        );
        assert_eq!(cards_fp8(&[]), None);
    }

    /// A compressed-tensors checkpoint under transformers: compressed-tensors
    /// decompresses every quantised linear to the model's dtype on the first forward
    /// and keeps its scales (compressed-tensors 0.20.1 `ModelCompressor.decompress_model`,
    /// `NaiveQuantizationCompressor.decompress`, `PackedQuantizationCompressor.decompress`).
    /// Llama-3.1-8B's MLP, 3 × 32 matrices of 14 336 × 4 096 (5 637 144 576 values):
    /// in fp8-channel, 1 B a value and a 2 B scale per output row (32 × (2 × 14 336 +
    /// 4 096) × 2 = 2 097 152 B) as stored, 2 B a value plus those scales under
    /// transformers; in w4a16-g128, 4 bits a value plus a 2 B scale per 128 and the
    /// 8 B shape (32 × 3 × (917 504 + 8) = 88 081 152 B) as stored, 2 B a value plus the
    /// scales and shapes under transformers. A serving engine keeps the stored bytes, and
    /// so does the same format from another quantiser (no `compressed-tensors` flag).
    #[test]
    fn transformers_decompresses_a_compressed_tensors_checkpoint() {
        let mlp = |format: &'static str, ct: bool, runtime: CacheRuntime| {
            let mut input = llama_8b(&[("format", format), ("context", "1024")]);
            input.compressed_tensors = ct;
            input.runtime = runtime;
            let e = estimate(&input).unwrap();
            let line = e
                .lines
                .iter()
                .find(|l| l.key == LineKey::WeightsMlp)
                .unwrap();
            (line.bytes, line.formula.clone(), e.warnings)
        };
        let values = 3 * 32 * 14_336 * 4_096u64;
        let fp8_scales = 32 * (2 * 14_336 + 4_096) * 2;
        let (stored, _, _) = mlp("fp8-channel", true, CacheRuntime::Serving);
        assert_eq!(stored, values + fp8_scales);
        let (held, formula, warnings) = mlp("fp8-channel", true, CacheRuntime::Transformers);
        assert_eq!(held, values * 2 + fp8_scales);
        assert!(formula.contains("bf16 + fp8-channel scales"), "{formula}");
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("compressed-tensors decompresses")),
            "{warnings:?}"
        );
        let w4_scales = 32 * 3 * (14_336 * 32 * 2 + 8);
        assert_eq!(w4_scales, 88_081_152);
        let (stored, _, _) = mlp("w4a16-g128", true, CacheRuntime::Serving);
        assert_eq!(stored, values / 2 + w4_scales);
        let (held, _, _) = mlp("w4a16-g128", true, CacheRuntime::Transformers);
        assert_eq!(held, values * 2 + w4_scales);
        // The same format from another quantiser, or no flag: as stored.
        let (other, _, warnings) = mlp("w4a16-g128", false, CacheRuntime::Transformers);
        assert_eq!(other, values / 2 + w4_scales);
        assert!(!warnings.iter().any(|w| w.contains("compressed-tensors")));
        // fp8-block from compressed-tensors: decompressed whatever the card, and the
        // fp8 quantizer's card rule (and its assumption) does not apply.
        let mut input = llama_8b(&[("format", "fp8-block"), ("context", "1024")]);
        input.compressed_tensors = true;
        input.runtime = CacheRuntime::Transformers;
        for card_fp8 in [None, Some(true), Some(false)] {
            input.card_fp8 = card_fp8;
            let e = estimate(&input).unwrap();
            let line = e
                .lines
                .iter()
                .find(|l| l.key == LineKey::WeightsMlp)
                .unwrap();
            // 128 × 128 tiles with an fp32 scale each: 32 × 3 × 112 × 32 × 4 B.
            assert_eq!(line.bytes, values * 2 + 32 * 3 * 112 * 32 * 4);
            assert!(
                !e.assumptions
                    .iter()
                    .any(|a| a.contains("compute capability 8.9"))
            );
            assert!(!e.warnings.iter().any(|w| w.contains("its fp8 quantizer")));
        }
    }

    /// compressed-tensors' decompression before the first forward: Llama-3.1-8B's last
    /// `down_proj` (4 096 × 14 336, 58 720 256 values) holds 3 B a value in
    /// fp8-channel, 3.5 B in W4A16 and 23 B less ⅜ B (+ 32 B) in NVFP4 beyond the dense
    /// weights. A 16-token prompt's prefill lines are below it: the line tops them up,
    /// and the need is the weights and KV cache plus the moment; at 32 768 tokens the
    /// prefill is the larger phase and the line is zero. A serving engine, or the
    /// same format without the flag, decompresses nothing.
    #[test]
    fn the_decompression_is_a_moment_beside_the_prefill() {
        let values = 4_096 * 14_336u64;
        for (format, moment) in [
            ("fp8-channel", 3 * values),
            ("w4a16-g128", 7 * values / 2),
            (
                "nvfp4",
                23 * values + values / 2 + values / 16 - 2 * values - values / 8 + 32,
            ),
        ] {
            for (context, tops) in [("16", true), ("32768", false)] {
                let mut input = llama_8b(&[("format", format), ("context", context)]);
                input.compressed_tensors = true;
                input.runtime = CacheRuntime::Transformers;
                let e = estimate(&input).unwrap();
                let line = e
                    .lines
                    .iter()
                    .find(|l| l.key == LineKey::PrefillDecompress)
                    .unwrap();
                assert_eq!(
                    line.inputs.get("moment"),
                    Some(&moment.to_string()),
                    "{format}"
                );
                let prefill: u64 = e
                    .lines
                    .iter()
                    .filter(|l| {
                        l.in_total
                            && l.key.as_str().starts_with("prefill.")
                            && l.key != LineKey::PrefillDecompress
                    })
                    .map(|l| l.bytes)
                    .sum();
                assert_eq!(prefill < moment, tops, "{format} {context}: {prefill}");
                assert_eq!(
                    line.bytes,
                    moment.saturating_sub(prefill),
                    "{format} {context}"
                );
                assert!(e.total_bytes >= e.weights_bytes + e.kv_cache_bytes + moment);
                input.runtime = CacheRuntime::Serving;
                let e = estimate(&input).unwrap();
                assert!(e.lines.iter().all(|l| l.key != LineKey::PrefillDecompress));
                input.runtime = CacheRuntime::Transformers;
                input.compressed_tensors = false;
                let e = estimate(&input).unwrap();
                assert!(e.lines.iter().all(|l| l.key != LineKey::PrefillDecompress));
            }
        }
    }

    /// A trace that replaces the text prefill's lines moves the decompression's line
    /// with them: the sum stays the larger phase.
    #[test]
    fn a_traced_prefill_retops_the_decompression() {
        let mut input = llama_8b(&[("format", "fp8-channel"), ("context", "16")]);
        input.compressed_tensors = true;
        input.runtime = CacheRuntime::Transformers;
        let e = estimate(&input).unwrap();
        let bytes = |e: &Estimate, key| e.lines.iter().find(|l| l.key == key).unwrap().bytes;
        let (mlp, before) = (
            bytes(&e, LineKey::PrefillMlp),
            bytes(&e, LineKey::PrefillDecompress),
        );
        let total = e.total_bytes;
        let traced = e
            .with_traced(&[TracedLine {
                key: LineKey::PrefillMlp,
                label: "traced".into(),
                bytes: mlp / 2,
                formula: "a trace".into(),
            }])
            .unwrap();
        assert_eq!(
            bytes(&traced, LineKey::PrefillDecompress),
            before + (mlp - mlp / 2)
        );
        assert_eq!(traced.total_bytes, total);
    }

    /// NVFP4's scales come back in bf16 beside the decompressed weight
    /// (`NVFP4PackedCompressor.decompress`): one 4096 × 4096 matrix keeps 4096 × 256
    /// scales at 2 B and its 4 B global scale (8 B with the input's, W4A4).
    #[test]
    fn nvfp4_keeps_its_scales_in_bf16() {
        use weights::ct_kept_scales;
        let f = |name: &str| crate::format::StorageFormat::parse("format", name).unwrap();
        assert_eq!(
            ct_kept_scales(f("nvfp4a16"), 4096, 4096).unwrap(),
            4096 * 256 * 2 + 4
        );
        assert_eq!(
            ct_kept_scales(f("nvfp4"), 4096, 4096).unwrap(),
            4096 * 256 * 2 + 8
        );
        assert_eq!(
            ct_kept_scales(f("fp8-channel"), 4096, 11008).unwrap(),
            4096 * 2
        );
        assert_eq!(ct_kept_scales(f("bf16"), 4096, 4096).unwrap(), 0);
    }

    /// A training step holds torch's two cuBLAS workspaces (the forward's thread's and
    /// the autograd engine's), 32 MiB each on an sm_90 card and with no card named,
    /// 8 519 680 B each on another generation, in the total and in the allocated lines
    /// the reserved peak is built on; an inference estimate and a training one without
    /// a context (no step) have none.
    #[test]
    fn a_training_step_holds_two_cublas_workspaces() {
        let key = |e: &Estimate| {
            e.lines
                .iter()
                .filter(|l| l.key == LineKey::CublasWorkspace)
                .map(|l| (l.bytes, l.device_bytes, l.in_total))
                .collect::<Vec<_>>()
        };
        let on = |sm90: Option<bool>, extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![("train", "lora"), ("context", "2048")];
            pairs.extend_from_slice(extra);
            let mut input = llama_8b(&pairs);
            input.card_sm90 = sm90;
            estimate(&input).unwrap()
        };
        // No card: the larger, sm_90's 2 × 32 MiB.
        assert_eq!(key(&on(None, &[])), vec![(64 << 20, 64 << 20, true)]);
        assert_eq!(key(&on(Some(true), &[])), vec![(64 << 20, 64 << 20, true)]);
        // An A100 or a 4090: 2 × (4096 KiB × 2 + 16 KiB × 8).
        let elsewhere = on(Some(false), &[]);
        assert_eq!(key(&elsewhere), vec![(17_039_360, 17_039_360, true)]);
        assert_eq!(
            crate::catalogue::cublas_workspace_bytes(false) * 2,
            17_039_360
        );
        assert_eq!(crate::catalogue::cublas_workspace_bytes(true), 32 << 20);
        // The larger workspaces need more.
        assert!(on(None, &[]).total_bytes > elsewhere.total_bytes);
        // Two ranks of data parallelism: each holds its own two.
        let ranks = on(Some(false), &[("gpus", "2")]);
        assert_eq!(key(&ranks), vec![(17_039_360, 17_039_360, true)]);
        let no_step = estimate(&llama_8b(&[("train", "lora")])).unwrap();
        assert!(key(&no_step).is_empty());
        let serve = estimate(&llama_8b(&[("context", "2048")])).unwrap();
        assert!(key(&serve).is_empty());
    }

    /// `--autocast`: PEFT's fp32 adapters keep the 16-bit copy autocast's `F.linear`
    /// makes, QLoRA's adapters on 4-bit layers the layer's input itself; autocast's
    /// 16-bit copies of the adapters' weights are counted once. By hand for this shape
    /// (h 4096, q and o widths 4096, k and v 1024, i 14336, r 16 on every linear, 32
    /// layers, 4096 tokens, checkpointing: the recomputed layer is the one that changes):
    /// LoRA keeps per token 2·(6·h + i) B less of the inputs' copies and 7 · 2·r B less of
    /// lora_A's outputs; QLoRA, where before each adapter kept 4·(6·h + i) + 7 · 4·r, now
    /// keeps the two norms' outputs and the MLP's product once, 2·(2·h + i), and 7 · 2·r
    /// (the attention output o reads is the kernel's own);
    /// the weights' copies are 2 B × r × 81 920 × 32 layers.
    #[test]
    fn autocast_decides_the_copy_the_adapters_keep() {
        let activations = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![
                ("context", "4096"),
                ("lora-targets", "all"),
                ("lora-rank", "16"),
                ("checkpointing", "true"),
            ];
            pairs.extend_from_slice(extra);
            let e = estimate(&llama_8b(&pairs)).unwrap();
            e.lines
                .iter()
                .filter(|l| l.key == LineKey::Activations)
                .map(|l| l.device_bytes)
                .sum::<u64>()
        };
        let (h, i, r, tokens) = (4096u64, 14336u64, 16u64, 4096u64);
        let copies = 2 * r * 81_920 * 32;
        let lora = activations(&[("train", "lora")]);
        let lora_ac = activations(&[("train", "lora"), ("autocast", "bf16")]);
        assert_eq!(
            lora - lora_ac,
            tokens * (2 * (6 * h + i) + 7 * 2 * r) - copies
        );
        // QLoRA with the modules it does not quantise in bf16 (PEFT's fp32 upcast leaves
        // the activations assumed, not derived).
        let qlora = activations(&[("train", "qlora"), ("keep-format", "bf16")]);
        let qlora_ac = activations(&[
            ("train", "qlora"),
            ("keep-format", "bf16"),
            ("autocast", "bf16"),
        ]);
        let before = 4 * (6 * h + i) + 7 * 4 * r;
        let after = 2 * (2 * h + i) + 7 * 2 * r;
        assert_eq!(qlora - qlora_ac, tokens * (before - after) - copies);
        // Adapters in the compute dtype cast nothing: autocast leaves them as they are.
        assert_eq!(
            activations(&[("train", "lora"), ("lora-dtype", "bf16")]),
            activations(&[
                ("train", "lora"),
                ("lora-dtype", "bf16"),
                ("autocast", "bf16")
            ])
        );
        // The key survives the round trip.
        let input = llama_8b(&[("train", "lora"), ("autocast", "bf16")]);
        assert!(
            crate::params::to_pairs(&input)
                .iter()
                .any(|(k, v)| *k == "autocast" && v == "bf16")
        );
        // Refused where it is not what the run does.
        let refused = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![("context", "512")];
            pairs.extend_from_slice(extra);
            estimate(&llama_8b(&pairs)).unwrap_err().to_string()
        };
        assert!(refused(&[("train", "full"), ("autocast", "bf16")]).contains("LoRA and QLoRA"));
        assert!(refused(&[("train", "lora"), ("autocast", "fp16")]).contains("computes in bf16"));
        assert!(
            refused(&[
                ("train", "lora"),
                ("compute-dtype", "fp32"),
                ("autocast", "fp32")
            ])
            .contains("bf16 or fp16")
        );
        assert!(
            refused(&[
                ("train", "lora"),
                ("framework", "torchtune"),
                ("autocast", "bf16")
            ])
            .contains("without torch.autocast")
        );
    }

    /// Inference without the training stages is the whole estimate, line for line, for
    /// every preset in every dtype and split asked here (the stages add nothing to it);
    /// a training input is refused rather than answered without its training state.
    #[test]
    fn the_inference_estimate_is_the_estimate_without_training() {
        for p in crate::presets::PRESETS {
            for extra in [
                &[("context", "8192")][..],
                &[
                    ("context", "4096"),
                    ("tp", "2"),
                    ("gpus", "4"),
                    ("sequences", "8"),
                ],
                &[("cuda-context-mib", "500"), ("zero", "3"), ("gpus", "8")],
            ] {
                let (input, _) = from_pairs(p.pairs.iter().copied().chain(extra.iter().copied()));
                assert_eq!(estimate_inference(&input), estimate(&input), "{}", p.id);
            }
        }
        for train in ["full", "lora", "qlora"] {
            let input = llama_8b(&[("context", "2048"), ("train", train)]);
            assert!(
                estimate(&input).is_ok_and(|e| e.training_bytes > 0),
                "{train}"
            );
            let refused = estimate_inference(&input).unwrap_err().to_string();
            assert!(refused.starts_with("train: "), "{refused}");
        }
    }

    /// A training run without inference's stages is the whole estimate, line for line
    /// and warning for warning, for every preset trained every way asked here (with a
    /// clip, an image and a CUDA context given, which inference's stages would read);
    /// an inference is refused rather than answered without its prefill.
    #[test]
    fn the_training_estimate_is_the_estimate_without_inference() {
        for p in crate::presets::PRESETS {
            for train in ["full", "lora", "qlora"] {
                for extra in [
                    &[("context", "2048")][..],
                    &[
                        ("context", "1024"),
                        ("sequences", "4"),
                        ("checkpointing", "false"),
                        ("gpus", "4"),
                        ("zero", "2"),
                    ],
                    &[
                        ("context", "512"),
                        ("cuda-context-mib", "500"),
                        ("mm-audio-seconds", "30"),
                        ("mm-item-tokens", "256"),
                    ],
                ] {
                    let (input, _) = from_pairs(
                        p.pairs
                            .iter()
                            .copied()
                            .chain([("train", train)])
                            .chain(extra.iter().copied()),
                    );
                    assert_eq!(
                        estimate_training(&input),
                        estimate(&input),
                        "{} {train}",
                        p.id
                    );
                }
            }
        }
        let clip = llama_8b(&[
            ("context", "2048"),
            ("train", "lora"),
            ("mm-audio-seconds", "30"),
        ]);
        assert!(
            estimate_training(&clip)
                .unwrap()
                .warnings
                .iter()
                .any(|w| w.contains("mm-audio-seconds"))
        );
        let refused = estimate_training(&llama_8b(&[("context", "2048")]))
            .unwrap_err()
            .to_string();
        assert!(refused.starts_with("train: "), "{refused}");
    }

    #[test]
    fn unsloth_adds_its_dequantised_weight_and_2024s_rope_caches() {
        let acts = |framework: &'static str, train: &'static str, context: &'static str| {
            let e = estimate(&llama_8b(&[
                ("framework", framework),
                ("train", train),
                ("context", context),
                ("sequences", "1"),
                ("max-position", "8192"),
                ("keep-format", "bf16"),
            ]))
            .unwrap();
            let l = e
                .lines
                .iter()
                .find(|l| l.key == LineKey::Activations)
                .unwrap()
                .clone();
            (l.bytes, l.formula)
        };
        // transformers' path given unsloth's settings: what unsloth adds beside (both with
        // the unquantised modules in bf16: PEFT's fp32 preparation is derived on
        // transformers' path, not on unsloth's, which stays assumed).
        let peft = estimate(&llama_8b(&[
            ("framework", "transformers"),
            ("train", "qlora"),
            ("context", "2048"),
            ("sequences", "1"),
            ("max-position", "8192"),
            ("checkpointing", "true"),
            ("offload-activations", "true"),
            ("loss", "fused"),
            ("keep-format", "bf16"),
        ]))
        .unwrap();
        let peft = peft
            .lines
            .iter()
            .find(|l| l.key == LineKey::Activations)
            .unwrap()
            .bytes;
        let (offloaded, formula) = acts("unsloth", "qlora", "2048");
        // By hand, Llama-3-8B (h 4096, i 14336, 32 heads × 128): the MLP's
        // 4096 × 14336 bf16 weight and one fp32 scale per 64 values.
        let w: u64 = 4096 * 14336 * 2 + 4096 * 14336 / 64 * 4;
        assert_eq!(offloaded - peft, w, "{formula}");
        assert!(formula.contains("fast_dequantize"), "{formula}");
        // LoRA dequantises nothing.
        let (_, lora) = acts("unsloth", "lora", "2048");
        assert!(!lora.contains("fast_dequantize"), "{lora}");
        // 2024.4: 32 layers × cos and sin × max(2048, 8192) positions × 128 × 2 B.
        let (old, formula) = acts("unsloth@2024.4", "qlora", "2048");
        assert_eq!(old - offloaded, 32 * 2 * 8192 * 128 * 2, "{formula}");
        assert!(formula.contains("RoPE caches"), "{formula}");
        // A context beyond max_position_embeddings extends them.
        let (old, _) = acts("unsloth@2024.4", "qlora", "16384");
        let (now, _) = acts("unsloth", "qlora", "16384");
        assert_eq!(old - now, 32 * 2 * 16384 * 128 * 2);
    }

    #[test]
    fn unsloth_2024s_forward_end_holds_the_logits_and_their_fp32_copy() {
        let line = |e: &Estimate, k: LineKey| e.lines.iter().find(|l| l.key == k).unwrap().clone();
        let run = |framework: &'static str, context: &'static str| {
            estimate(&llama_8b(&[
                ("framework", framework),
                ("train", "qlora"),
                ("keep-format", "bf16"),
                ("context", context),
                ("sequences", "1"),
                ("max-position", "8192"),
            ]))
            .unwrap()
        };
        // Llama-3-8B's 128 256-entry vocabulary at 2 048 tokens: the forward's end
        // (the bf16 logits, accelerate's fp32 copy, an fp32 log-sum-exp and loss per
        // token) beside the two bf16 layer inputs the offloaded checkpointing keeps
        // and the RoPE caches is above the backward's sum, and sets the peak.
        let e = run("unsloth@2024.4", "2048");
        let (acts, logits) = (line(&e, LineKey::Activations), line(&e, LineKey::Logits));
        let end = 2048 * 128_256 * 2 + 2048 * 128_256 * 4 + 2 * 2048 * 4;
        let kept = 2 * 2048 * 4096 * 2;
        let rope = 32 * 2 * 8192 * 128 * 2;
        assert_eq!(
            acts.bytes + logits.bytes,
            end + kept + rope,
            "{}",
            logits.formula
        );
        assert!(
            logits.formula.contains("convert_outputs_to_fp32"),
            "{}",
            logits.formula
        );
        // Above what the fused loss alone holds at the backward's start.
        assert!(logits.bytes > 2048 * 128_256 * 2 + 2 * 2048 * 4);
        // Today's unsloth returns no logits when it computes the loss: its line is the
        // fused loss's alone.
        let now = run("unsloth", "2048");
        assert_eq!(
            line(&now, LineKey::Logits).bytes,
            2048 * 128_256 * 2 + 2 * 2048 * 4
        );
        // A 32 000-entry vocabulary (Llama-2's): the recomputed layer outweighs the
        // logits, the forward's end adds nothing and the line stays the fused loss's.
        let small = estimate(&llama_8b(&[
            ("vocab", "32000"),
            ("framework", "unsloth@2024.4"),
            ("train", "qlora"),
            ("keep-format", "bf16"),
            ("context", "2048"),
            ("sequences", "1"),
        ]))
        .unwrap();
        let l = line(&small, LineKey::Logits);
        assert_eq!(l.bytes, 2048 * 32000 * 2 + 2 * 2048 * 4, "{}", l.formula);
        assert!(l.formula.contains("stays below"), "{}", l.formula);
    }

    #[test]
    fn unsloth_2024s_step_runs_its_kernels_and_phases() {
        use crate::training::unsloth::{phase_peaks, step_2024};
        let line = |e: &Estimate, k: LineKey| e.lines.iter().find(|l| l.key == k).cloned();
        let run = |targets: &'static str, context: &'static str| {
            estimate(&llama_8b(&[
                ("framework", "unsloth@2024.4"),
                ("train", "qlora"),
                ("keep-format", "bf16"),
                ("lora-targets", targets),
                ("context", context),
                ("sequences", "1"),
                ("max-position", "8192"),
            ]))
            .unwrap()
        };
        let base = llama_8b(&[]);
        let (a, rank) = (base.arch.unwrap(), base.lora_rank);
        for context in [2048u64, 65536] {
            let e = run("all", if context == 2048 { "2048" } else { "65536" });
            let acts = line(&e, LineKey::Activations).unwrap();
            let logits = line(&e, LineKey::Logits).unwrap();
            let (forward, backward) = phase_peaks(&step_2024(&a, context, rank, 2, true).unwrap());
            let rope = 32 * 2 * context.max(8192) * 128 * 2;
            // The last layer's backward and the RoPE caches; the logits line is what
            // the forward's end holds beyond that backward (the logits are gone by then).
            assert_eq!(acts.bytes, backward + rope, "{}", acts.formula);
            assert_eq!(
                logits.bytes,
                forward.saturating_sub(backward),
                "{}",
                logits.formula
            );
            assert!(acts.formula.contains("LoRA_QKV"), "{}", acts.formula);
            // Every layer's input on the host.
            let host = line(&e, LineKey::HostActivations).unwrap();
            assert_eq!(host.bytes, 32 * context * 4096 * 2);
            // The no-grad layers' MLP blocks (e, g, h: tokens × 14336 × 2 B each) stay
            // cached where the logits and their fp32 copy cannot reuse them.
            let cache = line(&e, LineKey::AllocatorCache).unwrap();
            if context == 65536 {
                assert!(cache.bytes >= 3 * context * 14336 * 2, "{}", cache.formula);
            }
        }
        // q and v only: unsloth 6dad5dd runs PEFT's layers, and so does the estimate.
        let qv = run("q,v", "2048");
        let acts = line(&qv, LineKey::Activations).unwrap();
        assert!(!acts.formula.contains("LoRA_QKV"), "{}", acts.formula);
        // fp32 norms make the activations an assumption: the line is not unsloth's
        // step (and peaks.rs runs its sequence only beside a derived line).
        let fp32 = estimate(&llama_8b(&[
            ("framework", "unsloth@2024.4"),
            ("train", "qlora"),
            ("keep-format", "fp32"),
            ("lora-targets", "all"),
            ("context", "2048"),
            ("sequences", "1"),
        ]))
        .unwrap();
        let acts = line(&fp32, LineKey::Activations).unwrap();
        assert_eq!(acts.kind, Kind::Assumed);
        assert!(!acts.formula.contains("LoRA_QKV"), "{}", acts.formula);
    }

    /// transformers 4.39's loss (`--loss float-shifted`): the bf16 logits' block is
    /// freed as `logits.float()` rebinds the name, before the shifted copy and the
    /// log-softmax, each larger, are allocated; it stays reserved beside them. Against
    /// `full` (the same fp32 tensors placed at once, 8 B × vocab more), the reserved
    /// peak holds that block more, to the 2 MiB a large segment is rounded to.
    #[test]
    fn transformers_439s_loss_leaves_the_bf16_logits_block_cached() {
        let reserved = |loss: &'static str| {
            let e = estimate(&llama_8b(&[
                ("train", "qlora"),
                ("keep-format", "bf16"),
                ("checkpointing", "true"),
                ("context", "8192"),
                ("sequences", "1"),
                ("loss", loss),
            ]))
            .unwrap();
            let of = |k: LineKey| e.lines.iter().find(|l| l.key == k).unwrap().clone();
            let cache = of(LineKey::AllocatorCache);
            let reserved: u64 = cache.inputs["reserved"].parse().unwrap();
            (reserved, of(LineKey::Logits).bytes)
        };
        let (full, full_logits) = reserved("full");
        let (shifted, shifted_logits) = reserved("float-shifted");
        assert_eq!(full_logits - shifted_logits, 8 * 128_256);
        // 8 192 × 128 256 × 2 B = 2 101 346 304 B of bf16 logits (1 002 × 2 MiB): a
        // segment of its own, no cached block holds it.
        let bf16 = 8192u64 * 128_256 * 2;
        let segment = bf16.div_ceil(2 << 20) * (2 << 20);
        let grown = shifted + (full_logits - shifted_logits) - full;
        assert!(
            grown >= bf16 && grown <= segment + (2 << 20),
            "{grown} against a {bf16} B block"
        );
    }

    /// `--framework transformers@4.39`: its loss, and 32 layers × (cos + sin) ×
    /// max_position_embeddings × 128 × 2 B of RoPE caches beside the activations.
    #[test]
    fn transformers_439_keeps_its_rope_caches_and_its_loss() {
        let run = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![
                ("train", "qlora"),
                ("keep-format", "bf16"),
                ("checkpointing", "true"),
                ("context", "2048"),
                ("sequences", "1"),
                ("max-position", "8192"),
            ];
            pairs.extend_from_slice(extra);
            let e = estimate(&llama_8b(&pairs)).unwrap();
            let of = |k: LineKey| e.lines.iter().find(|l| l.key == k).unwrap().clone();
            (of(LineKey::Activations), of(LineKey::Logits))
        };
        let (acts, logits) = run(&[("framework", "transformers@4.39")]);
        let (plain, plain_logits) = run(&[("loss", "float-shifted")]);
        assert_eq!(
            acts.bytes - plain.bytes,
            32 * 2 * 8192 * 128 * 2,
            "{}",
            acts.formula
        );
        assert!(acts.formula.contains("RoPE caches"), "{}", acts.formula);
        assert_eq!(logits.bytes, plain_logits.bytes);
        assert!(
            logits.formula.contains("contiguous()"),
            "{}",
            logits.formula
        );
        // Another framework keeps none.
        let (other, _) = run(&[("framework", "transformers"), ("optimizer", "adamw")]);
        assert!(!other.formula.contains("RoPE caches"), "{}", other.formula);
    }

    #[test]
    fn a_cuda_context_sits_beside_the_allocators_segments() {
        // The context is outside torch's allocator: giving it adds its bytes to the
        // need, whatever the reserved segments hold, and leaves the cache line alone.
        for context in ["1024", "65536"] {
            let run = |extra: &[(&'static str, &'static str)]| {
                let mut pairs = vec![
                    ("framework", "unsloth@2024.4"),
                    ("train", "qlora"),
                    ("lora-targets", "all"),
                    ("context", context),
                    ("sequences", "1"),
                ];
                pairs.extend_from_slice(extra);
                estimate(&llama_8b(&pairs)).unwrap()
            };
            let (without, with) = (run(&[]), run(&[("cuda-context-mib", "512")]));
            assert_eq!(
                with.total_bytes - without.total_bytes,
                512 << 20,
                "{context}"
            );
            let cache = |e: &Estimate| {
                e.lines
                    .iter()
                    .find(|l| l.key == LineKey::AllocatorCache)
                    .map(|l| l.bytes)
            };
            assert_eq!(cache(&with), cache(&without), "{context}");
        }
    }

    #[test]
    fn offloaded_activations_reach_the_allocator_model() {
        // What stays on the device of an offloaded run is placed as one layer's
        // tensors: the simulated reserved peak covers the allocated lines, so the
        // cache line exists and holds reserved − allocated.
        for extra in [
            &[("framework", "unsloth"), ("train", "qlora")][..],
            &[
                ("framework", "torchtune"),
                ("train", "lora"),
                ("offload-activations", "true"),
            ][..],
        ] {
            let mut pairs = vec![("context", "4096"), ("sequences", "1")];
            pairs.extend_from_slice(extra);
            let e = estimate(&llama_8b(&pairs)).unwrap();
            let cache = e
                .lines
                .iter()
                .find(|l| l.key == LineKey::AllocatorCache)
                .unwrap_or_else(|| panic!("{extra:?}: no allocator line"));
            let reserved: u64 = cache.inputs["reserved"].parse().unwrap();
            let allocated: u64 = cache.inputs["allocated"].parse().unwrap();
            assert_eq!(cache.bytes, reserved - allocated, "{extra:?}");
            // Not more than the segments' rounding and splits could add.
            assert!(cache.bytes < allocated / 10, "{extra:?}: {}", cache.bytes);
        }
    }

    #[test]
    fn the_optimizer_steps_small_temporaries_stay_reserved() {
        // AdamW's foreach step makes one temporary per trainable tensor
        // (`_foreach_sqrt` of one state); a LoRA adapter's are under 1 MiB, small-pool
        // blocks that the large blocks the backward freed cannot serve, and the
        // segments they take stay reserved through the next step. The fused AdamW
        // keeps the same states and makes none: the same allocated lines, and a
        // reserved peak lower by about one state (less the small blocks the step's
        // own small tensors left cached, plus the last segment's slack).
        let run = |optimizer: &'static str, context: &'static str| {
            let e = estimate(&llama_8b(&[
                ("train", "lora"),
                ("lora-targets", "all"),
                ("optimizer", optimizer),
                ("context", context),
                ("sequences", "1"),
            ]))
            .unwrap();
            let of = |k: LineKey| e.lines.iter().find(|l| l.key == k).unwrap().clone();
            let cache = of(LineKey::AllocatorCache);
            let reserved: u64 = cache.inputs["reserved"].parse().unwrap();
            let allocated: u64 = cache.inputs["allocated"].parse().unwrap();
            (
                reserved,
                allocated,
                of(LineKey::TrainingOptimizer).bytes / 2,
            )
        };
        for context in ["1024", "4096"] {
            let (foreach, allocated, state) = run("adamw", context);
            let (fused, fused_allocated, _) = run("adamw-fused", context);
            assert_eq!(allocated, fused_allocated, "{context}");
            let more = foreach - fused;
            assert!(
                more + (8 << 20) >= state && more <= state + (2 << 20),
                "{context}: reserved {more} B more for a state of {state} B"
            );
        }
    }

    #[test]
    fn the_optimizer_step_counts_what_exceeds_the_freed_activations() {
        let line = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![("train", "full"), ("context", "512"), ("sequences", "2")];
            pairs.extend_from_slice(extra);
            let e = estimate(&llama_8b(&pairs)).unwrap();
            let of = |k: LineKey| e.lines.iter().find(|l| l.key == k).map(|l| l.bytes);
            (
                of(LineKey::OptimizerStep),
                of(LineKey::Activations).unwrap() + of(LineKey::Logits).unwrap(),
                e.parameters.unwrap(),
            )
        };
        // Mixed precision: AdamW's foreach copy of one fp32 state plus the fp32
        // gradients for the master copy, less what the backward freed.
        let (step, freed, n) = line(&[("master-weights", "true"), ("checkpointing", "true")]);
        assert_eq!(step, Some(n * (4 + 4) - freed));
        // Pure bf16 with checkpointing: one bf16 state.
        let (step, freed, n) = line(&[("master-weights", "false"), ("checkpointing", "true")]);
        assert_eq!(step, Some(n * 2 - freed));
        // The fused kernel allocates nothing at the step; nor does a step whose
        // temporaries fit in what the backward freed.
        let fused = [
            ("master-weights", "false"),
            ("checkpointing", "true"),
            ("optimizer", "adamw-fused"),
        ];
        assert_eq!(line(&fused).0, None);
        assert_eq!(
            line(&[("master-weights", "false"), ("context", "8192")]).0,
            None
        );
    }

    #[test]
    fn three_workloads_side_by_side_vary_one_dimension() {
        let base = llama_8b(&[]);
        let results: Vec<Result<Estimate, EstimateError>> = [2048, 4096, 8192]
            .into_iter()
            .map(|context| {
                estimate(&EstimateInput {
                    context: Some(context),
                    ..base.clone()
                })
            })
            .collect();
        let kv: Vec<u64> = results
            .iter()
            .map(|r| r.as_ref().map(|e| e.kv_cache_bytes).unwrap_or(0))
            .collect();
        // Doubling the context at constant batch doubles a dense cache (method §11).
        assert_eq!(kv, vec![1 << 28, 1 << 29, 1 << 30]);
    }

    #[test]
    fn pipeline_stages_hold_their_layers_and_one_vocab_matrix() {
        let one = estimate(&llama_8b(&[])).unwrap();
        let two = estimate(&llama_8b(&[("gpus", "2"), ("pp", "2")])).unwrap();
        let line = |e: &Estimate, k: LineKey| {
            e.lines
                .iter()
                .find(|l| l.key == k)
                .map(|l| l.device_bytes)
                .unwrap()
        };
        assert_eq!(
            line(&two, LineKey::WeightsMlp) * 2,
            line(&one, LineKey::WeightsMlp)
        );
        // Embeddings and lm_head are the same size here: only one counts per device.
        assert_eq!(
            line(&two, LineKey::WeightsEmbeddings) + line(&two, LineKey::WeightsLmHead),
            line(&one, LineKey::WeightsLmHead)
        );
        assert!(two.per_device_bytes < one.per_device_bytes);
        // The reserve is per device, never pooled.
        assert_eq!(line(&two, LineKey::Reserve), line(&one, LineKey::Reserve));
    }

    /// Every headline figure is the sum of its group and the total is their sum:
    /// no line counts twice (the assumed weights line of parameter-count
    /// mode was also summed as a transient).
    #[test]
    fn headline_figures_partition_the_total() {
        let cases: [&[(&str, &str)]; 4] = [
            &[("parameters", "7e9"), ("bits", "4")],
            &[
                ("parameters", "7e9"),
                ("train", "full"),
                ("cuda-context-mib", "500"),
            ],
            &[
                ("layers", "32"),
                ("kv-heads", "8"),
                ("head-dim", "128"),
                ("context", "8192"),
            ],
            &[
                ("layers", "32"),
                ("hidden", "4096"),
                ("heads", "32"),
                ("intermediate", "14336"),
                ("vocab", "128256"),
                ("context", "4096"),
                ("attention", "eager"),
            ],
        ];
        for pairs in cases {
            let (input, errors) = from_pairs(pairs.iter().copied());
            assert!(errors.is_empty(), "{errors:?}");
            let e = estimate(&input).unwrap();
            let parts = e.weights_bytes
                + e.kv_cache_bytes
                + e.training_bytes
                + e.transient_bytes
                + e.reserve_bytes;
            assert_eq!(parts, e.total_bytes, "{pairs:?}");
        }
        let (input, _) = from_pairs([("parameters", "7e9"), ("bits", "4")]);
        assert_eq!(estimate(&input).unwrap().transient_bytes, 0);
    }

    /// DeepSeek-style MLA caches one latent per token and layer: 61 layers ×
    /// (512 + 64) values × 8192 tokens × 2 B; the decompressed line is shown aside.
    #[test]
    fn mla_caches_the_latent_and_shows_the_decompressed_cache_aside() {
        let (input, errors) = from_pairs([
            ("layers", "61"),
            ("hidden", "7168"),
            ("heads", "128"),
            ("intermediate", "18432"),
            ("vocab", "129280"),
            ("kv-lora-rank", "512"),
            ("q-lora-rank", "1536"),
            ("qk-nope-dim", "128"),
            ("qk-rope-dim", "64"),
            ("v-head-dim", "128"),
            ("context", "8192"),
            ("kv-dtype", "bf16"),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        let e = estimate(&input).unwrap();
        assert_eq!(e.kv_cache_bytes, 61 * 576 * 8192 * 2);
        let wide = e
            .lines
            .iter()
            .find(|l| l.key == LineKey::KvCacheDecompressed)
            .unwrap();
        assert_eq!(wide.bytes, 61 * 128 * (192 + 128) * 8192 * 2);
        assert!(!wide.in_total);
    }

    /// A hybrid's state layers keep a constant state instead of KV: 48 layers of
    /// which 36 linear-attention layers (Qwen3-Next's 3:1 pattern) keep 1 MiB each.
    #[test]
    fn state_layers_replace_kv_with_a_constant_state() {
        let pairs = |tokens: &'static str| {
            from_pairs([
                ("parameters", "80e9"),
                ("layers", "48"),
                ("kv-heads", "2"),
                ("head-dim", "256"),
                ("state-layers", "36"),
                ("state-bytes", "1048576"),
                ("sequences", "2"),
                ("context", tokens),
            ])
            .0
        };
        let short = estimate(&pairs("1024")).unwrap();
        let long = estimate(&pairs("2048")).unwrap();
        let state = 36 * 1_048_576 * 2;
        let kv = |t: u64| 12 * 2 * 2 * 256 * t * 2 * 2;
        assert_eq!(short.kv_cache_bytes, kv(1024) + state);
        assert_eq!(long.kv_cache_bytes, kv(2048) + state);
        let (bad, _) = from_pairs([
            ("layers", "4"),
            ("kv-heads", "2"),
            ("head-dim", "64"),
            ("state-layers", "5"),
            ("context", "8"),
        ]);
        assert!(
            estimate(&bad)
                .unwrap_err()
                .to_string()
                .starts_with("state-layers:")
        );
    }

    /// A mixer's layers keep no KV and no q/k/v/o for LoRA: 8 layers of which 2 attend.
    #[test]
    fn a_mixer_takes_its_layers_out_of_kv_and_lora_and_gives_them_a_state() {
        let (input, errors) = from_pairs([
            ("layers", "8"),
            ("hidden", "64"),
            ("heads", "4"),
            ("kv-heads", "2"),
            ("intermediate", "128"),
            ("vocab", "100"),
            ("mixer", "mamba"),
            ("state-layers", "6"),
            ("mixer-inner", "128"),
            ("mixer-state", "16"),
            ("mixer-dt-rank", "4"),
            ("context", "100"),
            ("kv-dtype", "bf16"),
            ("train", "lora"),
            ("lora-targets", "q,k,v,o"),
            ("lora-rank", "2"),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        let lora = estimate(&input).unwrap();
        let adapters = lora
            .lines
            .iter()
            .find(|l| l.key == LineKey::TrainingAdapters)
            .unwrap();
        // r × ((64 + 64) × 2 + (64 + 32) × 2) × 2 attention layers, fp32.
        assert_eq!(adapters.bytes, 2 * (2 * 128 + 2 * 96) * 2 * 4);
        let mut inference = input.clone();
        inference.train = TrainMode::None;
        let est = estimate(&inference).unwrap();
        let line = |k: LineKey| est.lines.iter().find(|l| l.key == k).unwrap().bytes;
        // KV: 2 attention layers × 2 × 2 heads × 16 × 100 tokens × 2 B.
        assert_eq!(line(LineKey::KvCache), 2 * 2 * 2 * 16 * 100 * 2);
        // State, whatever the tokens, without an engine as transformers' cache holds
        // it: 6 layers × (128 × 4 conv × 2 B + 128 × 16 SSM × 4 B).
        assert_eq!(
            line(LineKey::KvCacheState),
            6 * (128 * 4 * 2 + 128 * 16 * 4)
        );
        let state = est
            .lines
            .iter()
            .find(|l| l.key == LineKey::KvCacheState)
            .unwrap();
        assert_eq!(state.inputs["layout"], "transformers 5.23");
        assert!(state.label.contains("transformers"), "{}", state.label);
        // A serving engine's layout (vLLM's): 6 × (128 × 3 conv + 128 × 16 SSM) × 2 B.
        inference.runtime = CacheRuntime::Serving;
        let served = estimate(&inference).unwrap();
        let state = served
            .lines
            .iter()
            .find(|l| l.key == LineKey::KvCacheState)
            .unwrap();
        assert_eq!(state.bytes, 6 * (128 * 3 + 128 * 16) * 2);
        assert_eq!(state.inputs["layout"], "vLLM");
        // The KV itself is the same under both.
        assert_eq!(
            served
                .lines
                .iter()
                .find(|l| l.key == LineKey::KvCache)
                .unwrap()
                .bytes,
            line(LineKey::KvCache)
        );
    }

    #[test]
    fn a_state_bytes_below_transformers_cache_gives_way_without_an_engine() {
        // A mamba mixer as above, with state-bytes as a serving engine's fp32 SSM state
        // would read it (conv 128 × 3 × 2 B + SSM 128 × 16 × 4 B): transformers' cache
        // holds more (its whole conv window), which stands without an engine; with one,
        // the given figure.
        let pairs = [
            ("layers", "8"),
            ("hidden", "64"),
            ("heads", "4"),
            ("kv-heads", "2"),
            ("head-dim", "16"),
            ("intermediate", "0"),
            ("vocab", "100"),
            ("mixer", "mamba"),
            ("state-layers", "6"),
            ("mixer-inner", "128"),
            ("mixer-state", "16"),
            ("mixer-dt-rank", "4"),
            ("context", "100"),
            ("state-bytes", "8960"),
        ];
        let (mut input, errors) = from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        let state = |input: &EstimateInput| {
            estimate(input)
                .unwrap()
                .lines
                .into_iter()
                .find(|l| l.key == LineKey::KvCacheState)
                .unwrap()
        };
        let held = state(&input);
        assert_eq!(held.bytes, 6 * (128 * 4 * 2 + 128 * 16 * 4));
        input.runtime = CacheRuntime::Serving;
        let served = state(&input);
        assert_eq!(served.bytes, 6 * 8960);
        assert_eq!(served.inputs["layout"], "state-bytes given");
    }

    #[test]
    fn the_indexer_keys_follow_the_runtime() {
        // DeepSeek sparse attention's indexer, 128 wide: transformers keeps its keys
        // in the model's bf16 (256 B a token and layer), vLLM fp8 with a scale (132 B).
        let pairs = [
            ("layers", "4"),
            ("hidden", "256"),
            ("heads", "4"),
            ("vocab", "100"),
            ("intermediate", "512"),
            ("q-lora-rank", "64"),
            ("kv-lora-rank", "32"),
            ("qk-nope-dim", "16"),
            ("qk-rope-dim", "8"),
            ("v-head-dim", "16"),
            ("indexer-heads", "2"),
            ("indexer-head-dim", "128"),
            ("context", "1000"),
        ];
        let (mut input, errors) = from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        let indexer = |input: &EstimateInput| {
            estimate(input)
                .unwrap()
                .lines
                .into_iter()
                .find(|l| l.key == LineKey::KvCacheIndexer)
                .unwrap()
        };
        let held = indexer(&input);
        assert_eq!(held.bytes, 4 * 1000 * 128 * 2);
        assert_eq!(held.inputs["layout"], "transformers 5.23");
        input.runtime = CacheRuntime::Serving;
        assert_eq!(indexer(&input).bytes, 4 * 1000 * 132);
    }

    #[test]
    fn a_split_that_does_not_divide_the_gpus_is_refused() {
        let err = estimate(&llama_8b(&[("gpus", "3"), ("tp", "2")])).unwrap_err();
        assert!(err.to_string().starts_with("gpus:"), "{err}");
    }

    #[test]
    fn eager_attention_holds_tokens_squared_tensors_at_its_peak_and_sdpa_none() {
        let sdpa = estimate(&llama_8b(&[("context", "4096")])).unwrap();
        let eager = estimate(&llama_8b(&[("context", "4096"), ("attention", "eager")])).unwrap();
        let line = |e: &Estimate, k: LineKey| e.lines.iter().find(|l| l.key == k).unwrap().clone();
        assert_eq!(line(&sdpa, LineKey::PrefillAttentionScores).bytes, 0);
        // The mask (1 × 4096² × 2 B), then at the attention's moment the scores with
        // the mask added (2 B) and softmax's fp32 input copy and output (8 B) per head.
        assert_eq!(
            line(&eager, LineKey::PrefillAttentionScores).bytes,
            4096 * 4096 * 2 + 32 * 4096 * 4096 * (2 + 8)
        );
        // Not a sum: the MLP's intermediates are freed before the next attention.
        assert!(line(&eager, LineKey::PrefillMlp).bytes < line(&sdpa, LineKey::PrefillMlp).bytes);
        for k in [
            LineKey::PrefillMlp,
            LineKey::PrefillAttentionScores,
            LineKey::PrefillLogits,
        ] {
            assert_eq!(line(&eager, k).kind, Kind::Computed);
        }
    }

    #[test]
    fn qlora_is_nf4_with_checkpointing_unless_told_otherwise() {
        let (input, errors) = from_pairs([
            ("layers", "2"),
            ("hidden", "256"),
            ("heads", "4"),
            ("kv-heads", "2"),
            ("intermediate", "512"),
            ("vocab", "1000"),
            ("context", "128"),
            ("train", "qlora"),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(input.checkpointing);
        assert_eq!(input.format.map(|f| f.name()).as_deref(), Some("nf4-dq"));
        let est = estimate(&input).unwrap();
        assert!(
            est.assumptions
                .iter()
                .any(|a| a.contains("QLoRA") && a.contains("checkpointing on")),
            "{:?}",
            est.assumptions
        );
        assert!(est.lines.iter().any(|l| l.key == LineKey::TrainingAdapters));
        // prepare_model_for_kbit_training casts what is not 4-bit to fp32: the
        // embeddings are 4 B a value, and the activations follow the fp32 hidden
        // states (computed, saying so).
        let line =
            |est: &Estimate, key: LineKey| est.lines.iter().find(|l| l.key == key).unwrap().clone();
        assert_eq!(line(&est, LineKey::WeightsEmbeddings).bytes, 1000 * 256 * 4);
        let act = line(&est, LineKey::Activations);
        assert_eq!(act.kind, Kind::Computed);
        assert!(
            act.formula.contains("prepare_model_for_kbit_training")
                && act.formula.contains("fp32 hidden states"),
            "{}",
            act.formula
        );
        // Eager attention is derived too (its matmuls keep what their gradients read).
        let mut pairs = crate::params::to_pairs(&input);
        pairs.retain(|(key, _)| *key != "attention");
        pairs.push(("attention", "eager".into()));
        let (eager, errors) = from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        let eager = line(&estimate(&eager).unwrap(), LineKey::Activations);
        assert_eq!(eager.kind, Kind::Computed, "{}", eager.formula);
        assert!(eager.formula.contains("eager_kept"), "{}", eager.formula);
        // Outside what was traced (autocast over the fp32 hidden states; a 16-bit LoRA
        // base with fp32 norms, which PyTorch would not run without autocast) the line
        // stays assumed, saying why.
        for (k, v, why) in [
            ("autocast", "bf16", "under autocast"),
            ("train", "lora", "fp32 embeddings and norms"),
        ] {
            let mut pairs = crate::params::to_pairs(&input);
            pairs.retain(|(key, _)| *key != k);
            pairs.push((k, v.into()));
            let (other, errors) = from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
            assert!(errors.is_empty(), "{errors:?}");
            let act = line(&estimate(&other).unwrap(), LineKey::Activations);
            assert_eq!(act.kind, Kind::Assumed, "{k} {v}");
            assert!(act.formula.contains(why), "{k} {v}: {}", act.formula);
        }
        // A recipe that keeps them in bf16 (torchtune, LitGPT) says so, and the line is
        // computed again.
        let mut bf16 = crate::params::to_pairs(&input);
        bf16.retain(|(k, _)| *k != "keep-format");
        bf16.push(("keep-format", "bf16".into()));
        let (kept, errors) = from_pairs(bf16.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        let est16 = estimate(&kept).unwrap();
        assert_eq!(
            line(&est16, LineKey::WeightsEmbeddings).bytes,
            1000 * 256 * 2
        );
        assert_eq!(line(&est16, LineKey::Activations).kind, Kind::Computed);
        // fp32 hidden states keep more than bf16 ones.
        assert!(act.bytes > line(&est16, LineKey::Activations).bytes);
        let back = crate::params::to_pairs(&kept);
        assert_eq!(
            from_pairs(back.iter().map(|(k, v)| (*k, v.as_str()))).0,
            kept
        );
        // Said off, it stays off, and the pairs carry it back.
        let mut pairs = crate::params::to_pairs(&input);
        pairs.retain(|(k, _)| *k != "checkpointing");
        pairs.push(("checkpointing", "false".into()));
        let (off, errors) = from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        assert!(!off.checkpointing);
        let back = crate::params::to_pairs(&off);
        let (again, _) = from_pairs(back.iter().map(|(k, v)| (*k, v.as_str())));
        assert_eq!(again, off);
        // A 4-bit format given stays.
        let (nf4, _) = from_pairs([("train", "qlora"), ("format", "nf4")]);
        assert_eq!(nf4.format.map(|f| f.name()).as_deref(), Some("nf4"));
    }

    #[test]
    fn the_op_checkpointing_policy_keeps_its_saved_tensors_and_is_refused_where_not_derived() {
        let base = [
            ("context", "8192"),
            ("sequences", "2"),
            ("train", "full"),
            ("attention", "flash"),
            ("checkpointing", "true"),
        ];
        let act = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = base.to_vec();
            pairs.extend_from_slice(extra);
            estimate(&llama_8b(&pairs)).map(|e| {
                e.lines
                    .iter()
                    .find(|l| l.key == LineKey::Activations)
                    .unwrap()
                    .bytes
            })
        };
        let layer = act(&[]).unwrap();
        let op = act(&[("checkpointing-policy", "op")]).unwrap();
        // Per layer and token: q, v, gate, down and the attention's output in bf16, the
        // log-sum-exp in fp32 (55 424 B); less v, output, log-sum-exp and gate in the
        // recomputed layer (39 040 B), at 16 384 tokens.
        assert_eq!(op - layer, 32 * 55_424 * 16_384 - 39_040 * 16_384);
        // The pairs carry the policy back.
        let input = llama_8b(&[("checkpointing-policy", "op")]);
        let back = crate::params::to_pairs(&input);
        assert!(
            back.iter()
                .any(|(k, v)| *k == "checkpointing-policy" && v == "op")
        );
        // Not a way to run without checkpointing, nor with every n-th layer.
        let refused = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![("context", "512"), ("train", "full")];
            pairs.extend_from_slice(extra);
            estimate(&llama_8b(&pairs)).unwrap_err().to_string()
        };
        assert!(refused(&[("checkpointing-policy", "op")]).contains("--checkpointing true"));
        assert!(
            refused(&[
                ("checkpointing", "true"),
                ("checkpointing-every", "2"),
                ("checkpointing-policy", "op")
            ])
            .contains("--checkpointing-every")
        );
        assert!(
            refused(&[
                ("checkpointing", "true"),
                ("attention", "eager"),
                ("checkpointing-policy", "op")
            ])
            .contains("eager")
        );
        assert!(
            refused(&[
                ("checkpointing", "true"),
                ("train", "lora"),
                ("checkpointing-policy", "op")
            ])
            .contains("LoRA")
        );
    }

    #[test]
    fn traced_lines_replace_assumed_ones_and_the_totals_follow() {
        let input = llama_8b(&[("context", "2048"), ("train", "full")]);
        let est = estimate(&input).unwrap();
        let act = est
            .lines
            .iter()
            .find(|l| l.key == LineKey::Activations)
            .unwrap()
            .clone();
        let traced = est
            .clone()
            .with_traced(&[TracedLine {
                key: LineKey::Activations,
                label: "traced activations".into(),
                bytes: act.bytes / 2,
                formula: "traced".into(),
            }])
            .unwrap();
        let line = traced
            .lines
            .iter()
            .find(|l| l.key == LineKey::Activations)
            .unwrap();
        assert_eq!(line.kind, Kind::Traced);
        assert_eq!(line.replaced_bytes, Some(act.bytes));
        assert!(
            line.formula.contains("replaces the computed figure"),
            "{}",
            line.formula
        );
        assert_eq!(line.bytes, act.bytes / 2);
        assert_eq!(
            traced.total_bytes,
            est.total_bytes - (act.bytes - act.bytes / 2)
        );
        assert_eq!(
            traced.transient_bytes,
            est.transient_bytes - (act.bytes - act.bytes / 2)
        );
        assert_eq!(Kind::Traced.name(), "traced");
        let json = serde_json::to_string(line).unwrap();
        assert!(json.contains(r#""kind":"traced""#) && json.contains(r#""replaced_bytes":"#));
    }
}
