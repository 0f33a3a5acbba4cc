//! The computed-vs-observed table: gpumem-core's lines for the workload the probe saw
//! (parameters by dtype, trainable parameters, optimizer, input and generation shapes)
//! beside what the phases observed, and each difference named.
//!
//! This is the answer to "why did my peak exceed the estimate?": weights, gradients,
//! optimizer states and the KV cache are computed from the probe's facts with the
//! estimator's own formulas (`gpumem_core::training`, `gpumem_core::kv`); activations are
//! the estimator's *assumption*; the differences name what the estimate leaves out
//! (allocator caching, memory outside the allocator, first-step state, activations above
//! the assumption).

use gpumem_core::estimate::{Kind, LineKey, estimate};
use gpumem_core::format::Dtype;
use gpumem_core::import::config as hf_config;
use gpumem_core::kv::{KvDtype, KvLayout, KvShape};
use gpumem_core::training::{AttentionImpl, Optimizer, activation_bytes};
use gpumem_core::units::checked_product;
use gpumem_proto::history::{Attribution, HistoryLine, LARGEST_PER_LINE, MIN_BLOCK};
use gpumem_proto::workload::{
    Basis, Comparison, ComparisonLine, Difference, DifferenceKind, ModelFacts, OptimizerFacts,
    ProbeFacts, WorkloadPhase,
};

/// The estimator's dtype for a torch dtype name.
fn core_dtype(name: &str) -> Option<Dtype> {
    match name {
        "float32" => Some(Dtype::F32),
        "bfloat16" => Some(Dtype::Bf16),
        "float16" => Some(Dtype::F16),
        n if n.starts_with("float8") => Some(Dtype::Fp8),
        _ => None,
    }
}

/// The estimator's optimizer for a torch optimizer class name (momentum of SGD is not
/// reported by the probe, so SGD is taken as plain SGD).
fn core_optimizer(class: &str) -> Option<Optimizer> {
    match class {
        "AdamW" | "Adam" => Some(Optimizer::Adamw),
        "AdamW8bit" | "Adam8bit" | "PagedAdamW8bit" => Some(Optimizer::Adamw8bit),
        "SGD" => Some(Optimizer::Sgd),
        _ => None,
    }
}

fn first<'a>(phases: &'a [WorkloadPhase], name: &str, step: u32) -> Option<&'a WorkloadPhase> {
    phases
        .iter()
        .find(|p| p.name == name && p.step == Some(step) && p.error.is_none())
}

fn diff(a: Option<u64>, b: Option<u64>) -> Option<i64> {
    let d = i128::from(a?) - i128::from(b?);
    i64::try_from(d).ok()
}

fn nonneg(d: Option<i64>) -> Option<u64> {
    d.and_then(|v| u64::try_from(v).ok())
}

struct Line {
    item: &'static str,
    computed: Result<u64, String>,
    basis: Basis,
    formula: String,
    observed: Result<u64, String>,
    observed_how: &'static str,
}

impl Line {
    fn done(self) -> ComparisonLine {
        let why = [&self.computed, &self.observed]
            .iter()
            .filter_map(|r| r.as_ref().err().cloned())
            .collect::<Vec<_>>();
        ComparisonLine {
            item: self.item.to_owned(),
            computed_bytes: self.computed.ok(),
            basis: self.basis,
            formula: self.formula,
            observed_bytes: self.observed.ok(),
            observed_how: self.observed_how.to_owned(),
            traced_bytes: None,
            traced_how: None,
            attributed_bytes: None,
            attributed_how: None,
            why: (!why.is_empty()).then(|| why.join("; ")),
        }
    }
}

/// The dominant parameter dtype: the one holding the most bytes.
pub(crate) fn main_dtype(model: &ModelFacts) -> Option<(String, Dtype)> {
    model
        .parameters_by_dtype
        .iter()
        .max_by_key(|(_, c)| c.bytes)
        .and_then(|(name, _)| core_dtype(name).map(|d| (name.clone(), d)))
}

/// Whether the rank trained: an optimizer stepped or a backward ran.
pub(crate) fn is_training(facts: &ProbeFacts, phases: &[WorkloadPhase]) -> bool {
    facts.optimizer.is_some() || phases.iter().any(|p| p.name == "backward")
}

/// The estimator's name for the optimizer the probe saw (SGD with state is SGD with
/// momentum: plain SGD keeps none).
pub(crate) fn optimizer_key(opt: &OptimizerFacts) -> Option<&'static str> {
    match core_optimizer(&opt.optimizer_class)? {
        Optimizer::Sgd if opt.state_bytes > 0 => Some(Optimizer::SgdMomentum.name()),
        o => Some(o.name()),
    }
}

/// The workload the probe saw as the estimator's `key=value` pairs (the same
/// vocabulary as `gpumem-agent estimate`'s flags): the config.json's pairs, then
/// sequences and tokens of the first forward, the parameters' dtype, and for training
/// a full fine-tune of those parameters (no master copies: the optimizer steps what the
/// model holds), the optimizer and activation checkpointing when the probe saw them; for
/// generation, the tokens generated. `None` without a config.json.
pub(crate) fn workload_pairs(
    facts: &ProbeFacts,
    training: bool,
) -> Option<Result<Vec<(String, String)>, String>> {
    let model = facts.model.as_ref()?;
    let text = model.hf_config.as_ref()?;
    let run = || -> Result<Vec<(String, String)>, String> {
        let c = hf_config::parse_config(text).map_err(|e| format!("config.json: {e}"))?;
        let mut pairs: Vec<(String, String)> = c
            .pairs()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let (b, s) = model
            .input_shapes
            .first()
            .and_then(|x| Some((*x.shape.first()?, *x.shape.get(1)?)))
            .ok_or("no input shape (batch, tokens) seen")?;
        pairs.push(("sequences".into(), b.to_string()));
        pairs.push(("context".into(), s.to_string()));
        if let Some((_, d)) = main_dtype(model) {
            pairs.push(("compute-dtype".into(), d.name().to_string()));
            pairs.push(("format".into(), d.name().to_string()));
        }
        if training {
            pairs.push(("train".into(), "full".into()));
            pairs.push(("master-weights".into(), "false".into()));
            if let Some(o) = facts.optimizer.as_ref().and_then(optimizer_key) {
                pairs.push(("optimizer".into(), o.into()));
            }
            if let Some(on) = model.gradient_checkpointing {
                pairs.push(("checkpointing".into(), on.to_string()));
            }
        } else if let Some(total) = facts
            .generations
            .last()
            .and_then(|g| g.output_shape.as_ref()?.get(1).copied())
        {
            pairs.push(("generate".into(), total.saturating_sub(s).to_string()));
        }
        if training {
            pairs.extend(rank_pairs(model));
        }
        Ok(pairs)
    };
    Some(run())
}

/// The rank's job in the estimator's vocabulary: `gpus` (the world size), `nodes`
/// (world size ÷ ranks per node), and the sharding the probe found on the model's
/// wrapper (`fsdp`, `zero`, `ddp-bucket-view`), so that each rank's computed lines are
/// what that rank holds. Nothing for one process.
pub(crate) fn rank_pairs(model: &ModelFacts) -> Vec<(String, String)> {
    let Some(d) = model.distributed.as_ref().filter(|d| d.world_size > 1) else {
        return Vec::new();
    };
    let mut pairs = vec![("gpus".to_string(), d.world_size.to_string())];
    if let Some(local) = d.local_world_size
        && local > 0
        && d.world_size.is_multiple_of(local)
        && d.world_size > local
    {
        pairs.push(("nodes".into(), (d.world_size / local).to_string()));
    }
    match (d.wrapper.as_str(), d.sharding.as_deref()) {
        ("fsdp1" | "fsdp2", Some(s @ ("full" | "hybrid" | "grad-op"))) => {
            pairs.push(("fsdp".into(), s.into()));
        }
        ("fsdp1" | "fsdp2", None) => pairs.push(("fsdp".into(), "full".into())),
        ("deepspeed", Some(stage @ ("1" | "2" | "3"))) => {
            pairs.push(("zero".into(), stage.into()));
        }
        ("ddp", _) if d.gradient_as_bucket_view == Some(true) => {
            pairs.push(("ddp-bucket-view".into(), "true".into()));
        }
        _ => {}
    }
    pairs
}

/// The estimator's own answer for the workload the probe saw, from the model's
/// config.json (`hf_config::parse_config` → the one reader, `estimate::read_input` →
/// `estimate`, the path `gpumem-agent estimate --config` takes, with no engine flag:
/// the program ran transformers' own cache, and the card it ran on is not named, so
/// the larger cuBLAS workspaces are counted as `estimate` counts them without
/// `--card`), when the probe sent the config.
fn estimate_from_config(
    facts: &ProbeFacts,
    training: bool,
) -> Option<Result<gpumem_core::estimate::Estimate, String>> {
    let pairs = workload_pairs(facts, training)?;
    Some(pairs.and_then(|pairs| {
        let (input, errors) =
            crate::estimate::read_input(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())), []);
        if let Some(e) = errors.first() {
            return Err(e.to_string());
        }
        estimate(&input).map_err(|e| e.to_string())
    }))
}

/// Builds the table for one rank.
pub fn compare(facts: &ProbeFacts, phases: &[WorkloadPhase]) -> Comparison {
    let mut lines: Vec<Line> = Vec::new();
    let mut differences = Vec::new();
    let Some(model) = &facts.model else {
        return Comparison {
            source: "no model seen: the probe reports the model at its first forward".into(),
            lines: Vec::new(),
            differences,
            trace: None,
        };
    };
    let main_dtype = main_dtype(model);
    let no_dtype = || {
        format!(
            "no parameter dtype the estimator knows ({:?})",
            model.parameters_by_dtype.keys().collect::<Vec<_>>()
        )
    };

    // Weights: every parameter and buffer at its dtype's size.
    let weights: Result<u64, String> = model
        .parameters_by_dtype
        .iter()
        .chain(model.buffers_by_dtype.iter())
        .try_fold(0u64, |acc, (name, c)| {
            let per = core_dtype(name)
                .map(Dtype::bytes)
                .or_else(|| (c.count > 0).then(|| c.bytes / c.count))
                .unwrap_or(0);
            checked_product(&[c.count, per], "weights")
                .ok()
                .and_then(|b| acc.checked_add(b))
                .ok_or_else(|| "overflow".to_owned())
        });
    let load = phases.iter().find(|p| p.name == "model_load");
    lines.push(Line {
        item: "weights",
        computed: weights,
        basis: Basis::Computed,
        formula: "Σ parameters and buffers × bytes of their dtype".into(),
        observed: load
            .and_then(|p| p.allocator.allocated_end_bytes)
            .ok_or_else(|| "no allocated figure at the end of model_load".into()),
        observed_how: "allocated at the end of model_load (everything allocated before the first forward)",
    });

    let training = is_training(facts, phases);
    // A rank of a sharded job (FSDP, ZeRO): its gradients and optimizer states are its
    // shards, which the estimate for its job gives (the probe's counts are the model's).
    let sharded = model.distributed.as_ref().is_some_and(|d| {
        d.world_size > 1 && matches!(d.wrapper.as_str(), "fsdp1" | "fsdp2" | "deepspeed")
    });
    let per_rank = if sharded {
        estimate_from_config(facts, training).and_then(Result::ok)
    } else {
        None
    };
    let rank_line = |key: LineKey| -> Option<(u64, String)> {
        let e = per_rank.as_ref()?;
        let l = e.lines.iter().find(|l| l.key == key)?;
        Some((
            l.device_bytes,
            format!(
                "this rank's share in the estimate of its job ({}): {}",
                model
                    .distributed
                    .as_ref()
                    .map(|d| format!(
                        "{} ranks, {}{}",
                        d.world_size,
                        d.wrapper,
                        d.sharding
                            .as_ref()
                            .map(|s| format!(" {s}"))
                            .unwrap_or_default()
                    ))
                    .unwrap_or_default(),
                l.formula
            ),
        ))
    };
    if training {
        let trainable = model.trainable_parameters;
        let (grad_computed, grad_formula) = match rank_line(LineKey::TrainingGradients) {
            Some((b, f)) => (Ok(b), f),
            None => (
                main_dtype.as_ref().ok_or_else(no_dtype).and_then(|(_, d)| {
                    checked_product(&[trainable, d.bytes()], "gradients").map_err(|e| e.to_string())
                }),
                match &main_dtype {
                    Some((n, d)) => format!("trainable parameters × {} B ({n})", d.bytes()),
                    None => "trainable parameters × bytes of their dtype".into(),
                },
            ),
        };
        lines.push(Line {
            item: "gradients",
            computed: grad_computed,
            basis: Basis::Computed,
            formula: grad_formula,
            observed: nonneg(diff(
                first(phases, "backward", 0).and_then(|p| p.allocator.allocated_end_bytes),
                first(phases, "forward", 0).and_then(|p| p.allocator.allocated_start_bytes),
            ))
            .ok_or_else(|| "no first forward and backward with allocated figures".into()),
            observed_how: "allocated at the end of the first backward − at the start of the first forward",
        });
        if let Some(opt) = &facts.optimizer {
            let sharded_states = rank_line(LineKey::TrainingOptimizer);
            let computed = match (core_optimizer(&opt.optimizer_class), &main_dtype) {
                _ if sharded_states.is_some() => Ok(sharded_states.as_ref().map_or(0, |(b, _)| *b)),
                (Some(o), Some((_, d))) => o
                    .state_bytes(model.trainable_parameters, *d)
                    .map_err(|e| e.to_string()),
                (None, _) => Err(format!(
                    "the estimator has no layout for {}",
                    opt.optimizer_class
                )),
                (_, None) => Err(no_dtype()),
            };
            lines.push(Line {
                item: "optimizer_states",
                computed,
                basis: Basis::Computed,
                formula: match sharded_states {
                    Some((_, f)) => f,
                    None => format!(
                        "{} states for the trainable parameters (gpumem-core Optimizer::state_bytes)",
                        opt.optimizer_class
                    ),
                },
                observed: Ok(opt.state_bytes),
                observed_how: "bytes of the tensors in optimizer.state after the first step",
            });
        }
    }

    let config = |k: &str| model.config.get(k).copied();
    let layers = config("num_hidden_layers");
    let heads = config("num_attention_heads");
    let hidden = config("hidden_size");
    let batch_tokens = model
        .input_shapes
        .first()
        .and_then(|s| Some((*s.shape.first()?, *s.shape.get(1)?)));

    let estimated = estimate_from_config(facts, training);
    let line_of = |key: LineKey| -> Option<Result<(u64, Kind, String), String>> {
        match estimated.as_ref()? {
            Ok(est) => est
                .lines
                .iter()
                .find(|l| l.key == key)
                .map(|l| Ok((l.device_bytes, l.kind, l.formula.clone()))),
            Err(e) => Some(Err(e.clone())),
        }
    };

    if let Some(generation) = facts.generations.last() {
        let kv_heads = config("num_key_value_heads").or(heads);
        let head_dim = config("head_dim").or_else(|| Some(hidden? / heads?.max(1)));
        let tokens = generation
            .output_shape
            .as_ref()
            .and_then(|s| s.get(1).copied());
        let computed = match (
            layers,
            kv_heads,
            head_dim,
            &main_dtype,
            batch_tokens,
            tokens,
        ) {
            (Some(l), Some(k), Some(h), Some((_, d)), Some((b, _)), Some(t)) => k
                .checked_mul(h)
                .and_then(|v| v.checked_mul(2))
                .ok_or_else(|| "KV heads × head dim overflows".to_string())
                .and_then(|values| {
                    KvShape {
                        layers: l,
                        values,
                        layout: KvLayout::Heads,
                        dtype: KvDtype::Dense { dtype: *d },
                        sequences: b,
                        sliding_window: None,
                        sliding_layers: None,
                        static_tokens: None,
                        full_values: None,
                    }
                    .bytes(t)
                    .map_err(|e| e.to_string())
                }),
            _ => Err("the model has no config with layers, KV heads and head size".into()),
        };
        let (computed, formula) = match estimated.as_ref() {
            Some(Ok(est)) => (
                Ok(est.kv_cache_bytes),
                "the estimator's KV cache for the model's config.json, prompt + generated tokens and sequences (gpumem-core estimate, as `estimate --config`)".to_string(),
            ),
            Some(Err(e)) => (Err(e.clone()), "the estimator's KV cache (config.json could not be read)".into()),
            None => (
                computed,
                "2 × layers × KV heads × head dim × (prompt + generated tokens) × sequences × bytes (no config.json from the probe: the plain formula)".into(),
            ),
        };
        lines.push(Line {
            item: "kv_cache",
            computed,
            basis: Basis::Computed,
            formula,
            observed: generation
                .kv_bytes
                .ok_or_else(|| "no cache found in the last forward's output".into()),
            observed_how: "bytes of the distinct tensors in the cache returned by the last forward of the last generate call",
        });
    }

    if training {
        let from_estimate = line_of(LineKey::Activations);
        let assumed = match (layers, hidden, heads, batch_tokens) {
            (Some(l), Some(h), Some(a), Some((b, s))) => {
                activation_bytes(l, h, a, s, b, false, AttentionImpl::Sdpa)
                    .map(|(bytes, _)| bytes)
                    .map_err(|e| e.to_string())
            }
            _ => Err("the model has no config with layers, hidden size and heads".into()),
        };
        let observed = nonneg(diff(
            first(phases, "forward", 0).and_then(|p| p.allocator.allocated_peak_bytes),
            first(phases, "forward", 0).and_then(|p| p.allocator.allocated_start_bytes),
        ));
        if let (Ok(a), Some(o)) = (&assumed, observed) {
            differences.push(Difference {
                kind: DifferenceKind::ActivationsAboveAssumption,
                bytes: diff(Some(o), Some(*a)),
                explanation: "observed activations of the first forward − the estimator's assumption (Korthikanti et al., 16-bit, SDPA)".into(),
                item: None,
            });
        }
        let (computed, basis, formula) = match from_estimate {
            Some(Ok((bytes, kind, formula))) => (
                Ok(bytes),
                match kind {
                    Kind::Computed => Basis::Computed,
                    Kind::Traced => Basis::Traced,
                    Kind::Assumed => Basis::Assumed,
                },
                format!("the estimator's activations for the model's config.json: {formula}"),
            ),
            Some(Err(e)) => (Err(e), Basis::Assumed, "the estimator's activations".into()),
            None => (
                assumed,
                Basis::Assumed,
                "L × 34·s·b·h (Korthikanti et al. 2022, 16-bit activations, SDPA; no config.json from the probe)".into(),
            ),
        };
        lines.push(Line {
            item: "activations",
            computed,
            basis,
            formula,
            observed: observed.ok_or_else(|| "no first forward with allocated figures".into()),
            observed_how: "allocated peak − start of the first forward (includes its transients)",
        });
    }

    // Allocator caching at one checkpoint (method §6): the phase that reserved the most.
    if let Some(p) = phases
        .iter()
        .filter(|p| p.allocator.reserved_end_bytes.is_some())
        .max_by_key(|p| p.allocator.reserved_peak_bytes.unwrap_or(0))
    {
        differences.push(Difference {
            kind: DifferenceKind::AllocatorCaching,
            bytes: diff(p.allocator.reserved_end_bytes, p.allocator.allocated_end_bytes),
            explanation: format!(
                "reserved − allocated at the end of {}{}, read at the same checkpoint: rounding and caching of the allocator",
                p.name,
                p.step.map_or(String::new(), |s| format!(" (step {s})"))
            ),
            item: None,
        });
    }
    // Outside the allocator: the NVML process-tree peak over a phase − its reserved peak.
    let outside = phases
        .iter()
        .filter_map(|p| diff(p.process_tree_peak_bytes, p.allocator.reserved_peak_bytes))
        .max();
    differences.push(Difference {
        kind: DifferenceKind::OutsideAllocator,
        bytes: outside,
        explanation: if outside.is_some() {
            "NVML process-tree peak − reserved peak of the same phase (largest): CUDA context, cuBLAS/cuDNN workspaces, NCCL".into()
        } else {
            "not available: no NVML timeline to set beside the allocator's figures".into()
        },
        item: None,
    });
    if let Some(p) = first(phases, "optimizer_step", 0) {
        differences.push(Difference {
            kind: DifferenceKind::FirstStepState,
            bytes: diff(
                p.allocator.allocated_end_bytes,
                p.allocator.allocated_start_bytes,
            ),
            explanation: "allocated after − before the first optimizer step: the states it created"
                .into(),
            item: None,
        });
    }

    Comparison {
        source: match model.distributed.as_ref().filter(|d| d.world_size > 1) {
            Some(d) => format!(
                "gpumem-core formulas applied to this rank's facts (parameters it holds by dtype, trainable parameters, optimizer, input and generation shapes, model config), estimated as one rank of {} ({}{})",
                d.world_size,
                d.wrapper,
                d.sharding.as_ref().map(|s| format!(" {s}")).unwrap_or_default()
            ),
            None => "gpumem-core formulas applied to the probe's facts (parameters by dtype, trainable parameters, optimizer, input and generation shapes, model config)".into(),
        },
        lines: lines.into_iter().map(Line::done).collect(),
        differences,
        trace: None,
    }
}

/// The estimate's line of the allocator history that stands beside a comparison item.
fn history_line(item: &str) -> Option<HistoryLine> {
    Some(match item {
        "weights" => HistoryLine::Weights,
        "gradients" => HistoryLine::Gradients,
        "optimizer_states" => HistoryLine::OptimizerState,
        "activations" => HistoryLine::Activations,
        "kv_cache" => HistoryLine::KvCache,
        _ => return None,
    })
}

fn phase_words(phase: &str, step: Option<u32>) -> String {
    match step {
        Some(s) => format!("{phase} of step {s}"),
        None => phase.to_owned(),
    }
}

/// Sets the attributed column from the allocator's history (`run --memory-history`):
/// each item's most bytes live at any phase's peak; and names each line that exceeded
/// its computed figure — beyond the allocator's 512 B rounding of that line's blocks,
/// which the estimate does not count — with the largest allocations behind it, the
/// largest excess first.
pub fn attribute_lines(c: &mut Comparison, a: &Attribution) {
    let mut above = Vec::new();
    for l in &mut c.lines {
        let Some(line) = history_line(&l.item) else {
            continue;
        };
        // The peak where the line held the most (the first of equals).
        let Some(peak) = a.peaks.iter().fold(
            None,
            |best: Option<&gpumem_proto::history::PeakAttribution>, p| match best {
                Some(b) if b.bytes(line) >= p.bytes(line) => Some(b),
                _ => Some(p),
            },
        ) else {
            continue;
        };
        let bytes = peak.bytes(line);
        let blocks = peak
            .lines
            .iter()
            .find(|x| x.line == line)
            .map_or(0, |x| x.blocks);
        let at = phase_words(&peak.phase, peak.step);
        l.attributed_bytes = Some(bytes);
        l.attributed_how = Some(format!(
            "the allocator's history: {} live at the peak of {at} ({blocks} blocks, each rounded up to 512 B as the allocator does), its most at any phase's peak",
            line.label()
        ));
        let Some(computed) = l.computed_bytes else {
            continue;
        };
        let rounding = blocks.saturating_mul(MIN_BLOCK);
        if bytes > computed.saturating_add(rounding) {
            let excess = bytes - computed;
            let named: Vec<String> = peak
                .largest
                .iter()
                .filter(|b| b.line == line)
                .take(LARGEST_PER_LINE)
                .map(|b| {
                    let mut s = format!("{} B", gpumem_core::units::group_digits(b.bytes));
                    if !b.site.is_empty() {
                        s.push_str(&format!(" from {}", b.site));
                    }
                    if !b.scope.is_empty() {
                        s.push_str(&format!(" [{}]", b.scope));
                    }
                    s
                })
                .collect();
            above.push(Difference {
                kind: DifferenceKind::LineAboveEstimate,
                bytes: i64::try_from(excess).ok(),
                explanation: format!(
                    "{}: {} B live at the peak of {at} in the allocator's history, {} B computed ({} blocks' rounding allowed){}",
                    l.item,
                    gpumem_core::units::group_digits(bytes),
                    gpumem_core::units::group_digits(computed),
                    blocks,
                    if named.is_empty() {
                        String::new()
                    } else {
                        format!("; the largest allocations: {}", named.join(", "))
                    }
                ),
                item: Some(l.item.clone()),
            });
        }
    }
    above.sort_by_key(|d| std::cmp::Reverse(d.bytes));
    c.differences.extend(above);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use gpumem_proto::workload::{
        AllocatorCounters, DtypeCount, GenerationFacts, InputShape, ModelFacts, OptimizerFacts,
    };

    use super::*;

    fn phase(name: &str, step: Option<u32>, start: u64, peak: u64, end: u64) -> WorkloadPhase {
        WorkloadPhase {
            name: name.into(),
            step,
            first_step: step == Some(0),
            manual: false,
            device: Some(0),
            allocator: AllocatorCounters {
                allocated_start_bytes: Some(start),
                allocated_peak_bytes: Some(peak),
                allocated_end_bytes: Some(end),
                reserved_start_bytes: Some(start + 100),
                reserved_peak_bytes: Some(peak + 300),
                reserved_end_bytes: Some(end + 200),
            },
            device_free_end_bytes: None,
            device_total_bytes: None,
            process_tree_peak_bytes: Some(peak + 1000),
            wall_time_ns: 1,
            error: None,
        }
    }

    fn model(config: BTreeMap<String, u64>) -> ModelFacts {
        ModelFacts {
            module: "M".into(),
            parameters_by_dtype: [(
                "bfloat16".to_owned(),
                DtypeCount {
                    count: 1000,
                    bytes: 2000,
                },
            )]
            .into(),
            buffers_by_dtype: BTreeMap::new(),
            trainable_parameters: 1000,
            input_shapes: vec![InputShape {
                shape: vec![2, 8],
                dtype: "int64".into(),
            }],
            config,
            hf_config: None,
            gradient_checkpointing: None,
            distributed: None,
        }
    }

    /// A rank's job becomes the estimator's keys: the world size, the nodes (ranks
    /// per node), and the sharding read from its wrapper.
    #[test]
    fn a_ranks_job_is_said_in_the_estimators_keys() {
        use gpumem_proto::workload::DistributedFacts;
        let job = |wrapper: &str, sharding: Option<&str>, local: Option<u64>| {
            let mut m = model(BTreeMap::new());
            m.distributed = Some(DistributedFacts {
                world_size: 16,
                local_world_size: local,
                backend: Some("nccl".into()),
                wrapper: wrapper.into(),
                sharding: sharding.map(Into::into),
                gradient_as_bucket_view: None,
            });
            rank_pairs(&m)
        };
        let kv = |pairs: Vec<(String, String)>| {
            pairs
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            kv(job("fsdp2", Some("hybrid"), Some(8))),
            "gpus=16 nodes=2 fsdp=hybrid"
        );
        assert_eq!(kv(job("deepspeed", Some("3"), None)), "gpus=16 zero=3");
        assert_eq!(kv(job("deepspeed", Some("0"), None)), "gpus=16");
        assert_eq!(kv(job("ddp", None, Some(16))), "gpus=16");
        // One process is no job.
        assert!(rank_pairs(&model(BTreeMap::new())).is_empty());
    }

    fn get<'a>(c: &'a Comparison, item: &str) -> &'a ComparisonLine {
        c.lines.iter().find(|l| l.item == item).expect(item)
    }

    #[test]
    fn training_lines_come_from_the_estimator_and_the_phases() {
        let facts = ProbeFacts {
            model: Some(model(BTreeMap::new())),
            optimizer: Some(OptimizerFacts {
                optimizer_class: "AdamW".into(),
                state_bytes: 4100,
                state_by_dtype: BTreeMap::new(),
                parameters_covered: 1000,
            }),
            generations: Vec::new(),
        };
        let phases = vec![
            phase("model_load", None, 0, 2000, 2000),
            phase("forward", Some(0), 2000, 9000, 5000),
            phase("backward", Some(0), 5000, 8000, 4000),
            phase("optimizer_step", Some(0), 4000, 8200, 8100),
        ];
        let c = compare(&facts, &phases);
        assert_eq!(get(&c, "weights").computed_bytes, Some(2000));
        assert_eq!(get(&c, "weights").observed_bytes, Some(2000));
        assert_eq!(get(&c, "gradients").computed_bytes, Some(2000));
        assert_eq!(get(&c, "gradients").observed_bytes, Some(2000));
        // AdamW: two bf16 states per trainable parameter, from gpumem-core.
        assert_eq!(get(&c, "optimizer_states").computed_bytes, Some(4000));
        assert_eq!(get(&c, "optimizer_states").observed_bytes, Some(4100));
        let act = get(&c, "activations");
        assert_eq!(act.basis, Basis::Assumed);
        assert_eq!(act.computed_bytes, None);
        assert!(act.why.as_deref().unwrap_or("").contains("config"));
        assert_eq!(act.observed_bytes, Some(7000));
        let kinds: Vec<_> = c.differences.iter().map(|d| (d.kind, d.bytes)).collect();
        assert!(kinds.contains(&(DifferenceKind::FirstStepState, Some(4100))));
        assert!(kinds.contains(&(DifferenceKind::OutsideAllocator, Some(700))));
        // The phase with the largest reserved peak is the forward: 5200 − 5000.
        assert!(kinds.contains(&(DifferenceKind::AllocatorCaching, Some(200))));
    }

    #[test]
    fn the_kv_cache_is_computed_from_the_config() {
        let config: BTreeMap<String, u64> = [
            ("num_hidden_layers", 2),
            ("num_attention_heads", 4),
            ("num_key_value_heads", 2),
            ("hidden_size", 32),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let facts = ProbeFacts {
            model: Some(model(config)),
            optimizer: None,
            generations: vec![GenerationFacts {
                forwards: 4,
                output_shape: Some(vec![2, 12]),
                kv_bytes: Some(1234),
                kv_tensors: Some(4),
            }],
        };
        let c = compare(&facts, &[phase("model_load", None, 0, 1, 1)]);
        // 2 (K,V) × 2 layers × 2 KV heads × 8 head dim × 12 tokens × 2 sequences × 2 B.
        assert_eq!(
            get(&c, "kv_cache").computed_bytes,
            Some(2 * 2 * 2 * 8 * 12 * 2 * 2)
        );
        assert_eq!(get(&c, "kv_cache").observed_bytes, Some(1234));
        assert!(c.lines.iter().all(|l| l.item != "gradients"));
    }

    /// With the model's config.json, the KV cache and the activations are the
    /// estimator's own figures for that config — Gemma-3's sliding-window layers
    /// included, which the plain formula would count at full length.
    #[test]
    fn with_the_config_the_lines_are_the_estimators() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../crates/gpumem-core/tests/cases/configs/gemma-3-1b.json"
        ))
        .unwrap();
        let mut m = model(BTreeMap::new());
        m.hf_config = Some(text.clone());
        m.input_shapes[0].shape = vec![2, 2048];
        let facts = ProbeFacts {
            model: Some(m),
            optimizer: None,
            generations: vec![GenerationFacts {
                forwards: 4,
                output_shape: Some(vec![2, 2048 + 64]),
                kv_bytes: Some(1),
                kv_tensors: Some(4),
            }],
        };
        let c = compare(&facts, &[phase("model_load", None, 0, 1, 1)]);
        let (input, errors) = {
            let cfg = hf_config::parse_config(&text).unwrap();
            let mut pairs: Vec<(String, String)> = cfg
                .pairs()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            for (k, v) in [
                ("sequences", "2"),
                ("context", "2048"),
                ("compute-dtype", "bf16"),
                ("format", "bf16"),
                ("generate", "64"),
            ] {
                pairs.push((k.into(), v.into()));
            }
            crate::estimate::read_input(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())), [])
        };
        assert!(errors.is_empty(), "{errors:?}");
        let est = estimate(&input).unwrap();
        let kv = get(&c, "kv_cache");
        assert_eq!(kv.computed_bytes, Some(est.kv_cache_bytes));
        assert!(kv.formula.contains("config.json"), "{}", kv.formula);
        // Sliding layers keep 512 positions: less than every layer at 2112 tokens.
        let a = input.arch.unwrap();
        let full = 2 * a.layers * a.kv_heads * a.head_dim * 2112 * 2 * 2;
        assert!(
            est.kv_cache_bytes < full,
            "{} vs {full}",
            est.kv_cache_bytes
        );
    }

    /// The attributed column is each item's most at any peak; a line above its
    /// estimate only beyond the allocator's rounding of its blocks is named, with its
    /// largest allocations.
    #[test]
    fn the_history_names_the_line_above_its_estimate() {
        use gpumem_proto::history::{
            HISTORY_SCHEMA, HistoryAction as A, HistoryEvent, HistoryFrame, HistoryPhase,
            MemoryHistory, attribute,
        };
        let ev = |action, address, size, phase, stack| HistoryEvent {
            action,
            address,
            size,
            phase: Some(phase),
            scope: None,
            stack,
        };
        let h = MemoryHistory {
            schema: HISTORY_SCHEMA.into(),
            source: "synthetic".into(),
            torch_version: None,
            device: None,
            vocab: None,
            phases: ["model_load", "forward", "backward", "optimizer_step"]
                .iter()
                .map(|n| HistoryPhase {
                    name: (*n).into(),
                    step: (*n != "model_load").then_some(0),
                })
                .collect(),
            scopes: vec![],
            frames: vec![HistoryFrame {
                file: "/x/train.py".into(),
                line: 7,
                name: "init_state".into(),
            }],
            stacks: vec![vec![0]],
            before: vec![],
            reserved_before_bytes: 0,
            events: vec![
                // 1000 B of weights: 2 blocks of 512 B, as computed.
                ev(A::Alloc, 0, 500, 0, None),
                ev(A::Alloc, 512, 500, 0, None),
                ev(A::Alloc, 1 << 20, 1000, 1, None),
                ev(A::Free, 1 << 20, 1000, 2, None),
                // The optimizer's state: 8 KiB against 4 KiB computed.
                ev(A::Alloc, 2 << 20, 8192, 3, Some(0)),
            ],
            dropped_events: 0,
            notes: vec![],
        };
        h.validate().unwrap();
        let a = attribute(&h);
        let line = |item: &str, computed: u64| ComparisonLine {
            item: item.into(),
            computed_bytes: Some(computed),
            basis: Basis::Computed,
            formula: String::new(),
            observed_bytes: None,
            observed_how: String::new(),
            traced_bytes: None,
            traced_how: None,
            attributed_bytes: None,
            attributed_how: None,
            why: None,
        };
        let mut c = Comparison {
            source: String::new(),
            lines: vec![line("weights", 1000), line("optimizer_states", 4096)],
            differences: vec![],
            trace: None,
        };
        attribute_lines(&mut c, &a);
        assert_eq!(get(&c, "weights").attributed_bytes, Some(1024));
        assert_eq!(get(&c, "optimizer_states").attributed_bytes, Some(8192));
        let above: Vec<_> = c
            .differences
            .iter()
            .filter(|d| d.kind == DifferenceKind::LineAboveEstimate)
            .collect();
        // The weights' 24 B are the rounding of their two blocks: not named.
        assert_eq!(above.len(), 1, "{above:?}");
        assert_eq!(above[0].item.as_deref(), Some("optimizer_states"));
        assert_eq!(above[0].bytes, Some(4096));
        assert!(
            above[0]
                .explanation
                .contains("8 192 B from x/train.py:7 init_state"),
            "{}",
            above[0].explanation
        );
        assert!(above[0].explanation.contains("optimizer_step of step 0"));
    }

    #[test]
    fn no_model_no_lines() {
        let c = compare(&ProbeFacts::default(), &[]);
        assert!(c.lines.is_empty());
    }
}
