//! The traced column of `run`'s table: the same workload traced on the CPU
//! (`crate::trace`, the model's own code on PyTorch's meta device) beside what the
//! estimator computed and what the GPU showed.
//!
//! The workload is the one the probe saw, in the estimator's vocabulary
//! (`compare::workload_pairs`: the model's config.json, the first forward's sequences
//! and tokens, the parameters' dtype, the optimizer, activation checkpointing, the
//! tokens generated), with the user's `--trace-with KEY=VALUE` on top; it runs in the
//! Python that ran the program (`sys.executable`, from the probe's hello), so the same
//! torch and transformers build the model. Each traced figure is read from the trace's
//! phases the way the observed one is read from the run's, so the columns compare like
//! with like. A trace that is not possible is said in one line; it never fails the run.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use gpumem_core::params;
use gpumem_proto::trace::{TraceDocument, TracePhase, TraceWorkload};
use gpumem_proto::workload::{Comparison, RankResult, TraceOutcome, TraceStatus, WorkloadFile};
use serde_json::Value;

use super::compare;
use crate::trace::python;

/// Distinct workloads traced per run (ranks of one job share theirs; each trace takes
/// seconds of CPU).
pub const MAX_TRACES: usize = 4;

/// The `--trace-with` keys: the estimator's workload keys the trace reads.
pub fn check_overrides(pairs: &[(String, String)]) -> Result<(), String> {
    for (k, _) in pairs {
        if !crate::trace::WORKLOAD_KEYS.contains(&k.as_str()) {
            return Err(format!(
                "--trace-with {k}=…: not a workload key (one of {})",
                crate::trace::WORKLOAD_KEYS.join(", ")
            ));
        }
    }
    let (_, errors) = params::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    match errors.first() {
        Some(e) => Err(format!("--trace-with: {e}")),
        None => Ok(()),
    }
}

/// Parses one `--trace-with KEY=VALUE`.
pub fn parse_override(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected KEY=VALUE, e.g. train=lora"))?;
    Ok((k.trim().to_owned(), v.trim().to_owned()))
}

/// What one rank's trace needs.
#[derive(Debug, Clone)]
struct Request {
    python: OsString,
    config: Value,
    workload: TraceWorkload,
    double_quant: bool,
}

impl Request {
    /// Ranks of one job ask for the same trace: one key per distinct request.
    fn key(&self) -> String {
        format!(
            "{}\u{0}{}\u{0}{}\u{0}{}",
            self.python.to_string_lossy(),
            self.config,
            serde_json::to_string(&self.workload).unwrap_or_default(),
            self.double_quant
        )
    }
}

/// The trace request for one rank, or why there can be none.
fn request_for(rank: &RankResult, overrides: &[(String, String)]) -> Result<Request, String> {
    let facts = &rank.facts;
    let model = facts
        .model
        .as_ref()
        .ok_or("no model seen (the probe reports the model at its first forward)")?;
    let text = model.hf_config.as_ref().ok_or(
        "the model has no config.json (not a transformers model, or its config is over 32 KiB)",
    )?;
    let training = compare::is_training(facts, &rank.phases);
    if training && overrides.iter().all(|(k, _)| k != "train") {
        let total: u64 = model.parameters_by_dtype.values().map(|c| c.count).sum();
        if model.trainable_parameters < total {
            return Err(format!(
                "{} of {total} parameters are trainable (LoRA or frozen layers): give the adapter with --trace-with train=lora (or qlora), lora-rank=R, lora-targets=…",
                model.trainable_parameters
            ));
        }
        if let Some(o) = &facts.optimizer
            && compare::optimizer_key(o).is_none()
            && overrides.iter().all(|(k, _)| k != "optimizer")
        {
            return Err(format!(
                "the trace has no layout for {}: give one with --trace-with optimizer=adamw|adamw8bit|sgd|…",
                o.optimizer_class
            ));
        }
    }
    let mut pairs = compare::workload_pairs(facts, training)
        .ok_or("the model has no config.json")?
        .map_err(|e| format!("the workload could not be read: {e}"))?;
    pairs.extend(overrides.iter().cloned());
    let (input, errors) = params::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if let Some(e) = errors.first() {
        return Err(format!("the workload could not be read: {e}"));
    }
    let expandable = rank
        .environment
        .alloc_conf
        .as_deref()
        .is_some_and(python::expandable_in);
    let workload = python::workload_of(&input, expandable).map_err(|e| format!("{e:#}"))?;
    let exe = rank
        .environment
        .python_executable
        .as_deref()
        .filter(|p| Path::new(p).is_absolute())
        .ok_or("the probe did not say which Python ran the program")?;
    let config: Value =
        serde_json::from_str(text).map_err(|e| format!("the model's config.json: {e}"))?;
    Ok(Request {
        python: OsString::from(exe),
        config,
        workload,
        double_quant: python::double_quant(&input),
    })
}

fn not_possible(detail: String) -> TraceOutcome {
    TraceOutcome {
        status: TraceStatus::NotPossible,
        detail,
        wall_time_ms: None,
    }
}

/// Traces every rank's workload (distinct ones once, at most [`MAX_TRACES`]) and fills
/// the traced column; `off` (`--no-trace`) says so instead. Workers are left alone.
pub fn trace_ranks(file: &mut WorkloadFile, overrides: &[(String, String)], off: bool) {
    let mut done: BTreeMap<String, Result<TraceDocument, String>> = BTreeMap::new();
    let mut said = false;
    for rank in file
        .ranks
        .iter_mut()
        .filter(|r| r.worker_of.is_none() && !r.launcher)
    {
        if off {
            rank.comparison.trace = Some(TraceOutcome {
                status: TraceStatus::Off,
                detail: "not traced (--no-trace)".into(),
                wall_time_ms: None,
            });
            continue;
        }
        let request = match request_for(rank, overrides) {
            Ok(r) => r,
            Err(why) => {
                rank.comparison.trace = Some(not_possible(format!("no trace: {why}")));
                continue;
            }
        };
        let key = request.key();
        if !done.contains_key(&key) {
            if done.len() >= MAX_TRACES {
                rank.comparison.trace = Some(not_possible(format!(
                    "no trace: {MAX_TRACES} distinct workloads were traced already"
                )));
                continue;
            }
            if !said {
                crate::out::errln!(
                    "gpumem-agent run: tracing the same workload on the CPU (the model's code on PyTorch's meta device, no GPU; --no-trace skips it)…"
                );
                said = true;
            }
            let got = match python::trace(
                &request.python,
                &request.config,
                &request.workload,
                request.double_quant,
            ) {
                Ok(Ok(doc)) => Ok(doc),
                Ok(Err(f)) => Err(f.to_string()),
                Err(e) => Err(format!("{e:#}")),
            };
            done.insert(key.clone(), got);
        }
        match &done[&key] {
            Ok(doc) => fill(&mut rank.comparison, doc),
            Err(why) => rank.comparison.trace = Some(not_possible(format!("no trace: {why}"))),
        }
    }
}

fn phase<'a>(doc: &'a TraceDocument, name: &str, step: Option<u32>) -> Option<&'a TracePhase> {
    doc.phase(name, step)
}

/// The traced figure of each item, read from the trace as the observed one is read
/// from the run (`compare`'s `observed_how`).
fn traced_item(doc: &TraceDocument, item: &str) -> Option<(u64, String)> {
    match item {
        "weights" => phase(doc, "model_load", None).map(|p| {
            (
                p.allocated_end_bytes,
                "traced: allocated at the end of model_load".into(),
            )
        }),
        "gradients" => {
            let f = phase(doc, "forward", Some(0))?;
            let b = phase(doc, "backward", Some(0))?;
            Some((
                b.allocated_end_bytes.checked_sub(f.allocated_start_bytes)?,
                "traced: allocated at the end of the first backward − at the start of the first forward".into(),
            ))
        }
        "optimizer_states" => match phase(doc, "forward", Some(1)) {
            Some(f) => Some((
                f.at_peak.optimizer_state,
                "traced: optimizer state live in the second step's forward".into(),
            )),
            None => {
                let o = phase(doc, "optimizer_step", Some(0))?;
                Some((
                    o.allocated_end_bytes.checked_sub(o.allocated_start_bytes)?,
                    "traced: allocated after − before the first optimizer step".into(),
                ))
            }
        },
        "activations" => {
            let f = phase(doc, "forward", Some(0))?;
            Some((
                f.allocated_peak_bytes
                    .checked_sub(f.allocated_start_bytes)?,
                "traced: allocated peak − start of the first forward (includes its transients)"
                    .into(),
            ))
        }
        "kv_cache" => {
            let p = phase(doc, "decode", None).or_else(|| phase(doc, "prefill", None))?;
            Some((
                p.at_peak.kv_cache,
                format!(
                    "traced: the KV cache live at the peak of {} (prompt + generated − 1 tokens), each tensor as the allocator rounds it (512 B blocks)",
                    p.name
                ),
            ))
        }
        _ => None,
    }
}

/// Fills the traced column of `c` from `doc`.
pub fn fill(c: &mut Comparison, doc: &TraceDocument) {
    for line in &mut c.lines {
        if let Some((bytes, how)) = traced_item(doc, &line.item) {
            line.traced_bytes = Some(bytes);
            line.traced_how = Some(how);
        }
    }
    let w = &doc.workload;
    let what = w.words();
    c.trace = Some(TraceOutcome {
        status: TraceStatus::Traced,
        detail: format!(
            "traced {} ({}, {} attention): {what}; torch {}, transformers {}; {:.1} s on the CPU, not a GPU measurement",
            doc.model_type,
            w.dtype,
            w.attention,
            doc.versions.torch,
            doc.versions.transformers,
            doc.wall_time_ms as f64 / 1000.0
        ),
        wall_time_ms: Some(doc.wall_time_ms),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_are_workload_keys_with_valid_values() {
        assert!(check_overrides(&[("train".into(), "lora".into())]).is_ok());
        assert!(check_overrides(&[("attention".into(), "flash".into())]).is_ok());
        // A rank's job is a workload: the trace wraps the model as that job does.
        assert!(check_overrides(&[("gpus".into(), "2".into())]).is_ok());
        let e = check_overrides(&[("reserve-gib".into(), "2".into())]).unwrap_err();
        assert!(e.contains("not a workload key"), "{e}");
        assert!(check_overrides(&[("train".into(), "sideways".into())]).is_err());
        assert_eq!(
            parse_override("lora-rank = 8").unwrap(),
            ("lora-rank".into(), "8".into())
        );
        assert!(parse_override("train").is_err());
    }
}
