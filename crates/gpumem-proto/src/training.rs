//! What the dimensioner and its lazily loaded estimators say to each other: the
//! training module (`web/training`, crate `gpumem-training`), where the training
//! estimate — the training state, the ranks' plan and the caching allocator's peaks —
//! lives, and the engine module (`web/engine`), which estimates inference; the page's
//! first module estimates nothing itself.
//!
//! The page asks with a [`crate::rules::RulesRequest`] (a workload's pairs, the page's
//! card pairs, the imported tensors) and hears back an [`Estimate`] or why there is
//! none ([`write_estimate`], [`read_estimate`]), or the answer as
//! [`crate::rules::write_answer`] writes it. Both cross as the tab-separated text
//! documents of [`crate::lookup::text`]: the dimensioner carries no JSON reader.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::BTreeMap;

use gpumem_core::EstimateError;
use gpumem_core::estimate::{Estimate, Kind, Line as EstimateLine, LineKey};

use crate::lookup::text::{Line, Writer, lines};

/// First line of an estimate document: an [`Estimate`], or why there is none.
pub const ESTIMATE: &str = "gpumem.training-estimate 1";

fn opt(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// Writes `e`: the estimate, or the error that refused it (its variant and fields).
pub fn write_estimate(e: &Result<Estimate, EstimateError>) -> String {
    let mut w = Writer::new(ESTIMATE);
    let e = match e {
        Ok(e) => e,
        Err(err) => {
            match err {
                EstimateError::Invalid { field, reason } => w.record("invalid", &[field, reason]),
                EstimateError::Overflow { what } => w.record("overflow", &[what]),
                EstimateError::Parse { format, reason } => w.record("parse", &[format, reason]),
                EstimateError::Truncated {
                    format,
                    have,
                    needed,
                } => w.record(
                    "truncated",
                    &[format, &have.to_string(), &needed.to_string()],
                ),
                // A variant this document does not know yet: its words, whole.
                other => w.record("invalid", &["input", &other.to_string()]),
            }
            return w.0;
        }
    };
    let figures = [
        e.weights_bytes,
        e.kv_cache_bytes,
        e.training_bytes,
        e.transient_bytes,
        e.reserve_bytes,
        e.host_bytes,
        e.total_bytes,
        e.per_device_bytes,
    ]
    .map(|v| v.to_string());
    let mut head: Vec<&str> = figures.iter().map(String::as_str).collect();
    let (p, a) = (opt(e.parameters), opt(e.active_parameters));
    head.extend([p.as_str(), a.as_str()]);
    w.record("estimate", &head);
    for l in &e.lines {
        w.record(
            "line",
            &[
                l.key.as_str(),
                &l.label,
                &l.bytes.to_string(),
                &l.device_bytes.to_string(),
                l.kind.name(),
                &opt(l.replaced_bytes),
                if l.in_total { "1" } else { "0" },
                &l.formula,
            ],
        );
        for (k, v) in &l.inputs {
            w.record("input", &[k, v]);
        }
    }
    for a in &e.assumptions {
        w.record("assumption", &[a]);
    }
    for warning in &e.warnings {
        w.record("warning", &[warning]);
    }
    w.0
}

thread_local! {
    /// The field and format names read back so far, each kept once for the program's
    /// life: [`EstimateError`] names them as `&'static str`, and they are the core's
    /// few field names, so this holds at most that many.
    static NAMES: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
}

/// `text` as a `&'static str` (one copy per distinct name).
fn name(text: &str) -> &'static str {
    NAMES.with(|names| {
        let mut names = names.borrow_mut();
        if let Some(n) = names.iter().find(|n| **n == text) {
            return *n;
        }
        let n: &'static str = Box::leak(text.to_string().into_boxed_str());
        names.push(n);
        n
    })
}

fn optional(line: &Line, text: &str) -> Result<Option<u64>, String> {
    if text.is_empty() {
        Ok(None)
    } else {
        line.number(text).map(Some)
    }
}

/// One record of an estimate document's head: the refusal, or the estimate's figures
/// (without its lines and words); `None` for any other record.
fn head(line: &Line) -> Result<Option<Result<Estimate, EstimateError>>, String> {
    let refused = match line.kind {
        "invalid" => {
            let f = line.fields(2)?;
            EstimateError::invalid(name(&f[0]), f[1].clone())
        }
        "overflow" => EstimateError::Overflow {
            what: name(&line.fields(1)?[0]),
        },
        "parse" => {
            let f = line.fields(2)?;
            EstimateError::Parse {
                format: name(&f[0]),
                reason: f[1].clone(),
            }
        }
        "truncated" => {
            let f = line.fields(3)?;
            EstimateError::Truncated {
                format: name(&f[0]),
                have: line.number(&f[1])?,
                needed: line.number(&f[2])?,
            }
        }
        "estimate" => {
            let f = line.fields(10)?;
            let n = |i: usize| line.number(&f[i]);
            return Ok(Some(Ok(Estimate {
                weights_bytes: n(0)?,
                kv_cache_bytes: n(1)?,
                training_bytes: n(2)?,
                transient_bytes: n(3)?,
                reserve_bytes: n(4)?,
                host_bytes: n(5)?,
                total_bytes: n(6)?,
                per_device_bytes: n(7)?,
                parameters: optional(line, &f[8])?,
                active_parameters: optional(line, &f[9])?,
                lines: Vec::new(),
                assumptions: Vec::new(),
                warnings: Vec::new(),
            })));
        }
        _ => return Ok(None),
    };
    Ok(Some(Err(refused)))
}

/// Reads the head of a document written by [`write_estimate`]: the estimate's figures
/// (its lines, assumptions and warnings left empty and unread), or why there is none.
/// The dimensioner's first module reads no more (its estimator's module draws the
/// lines from the document itself), so it links no reader of the lines.
pub fn read_figures(text: &str) -> Result<Result<Estimate, EstimateError>, String> {
    let mut e: Option<Estimate> = None;
    for line in lines(text, ESTIMATE)? {
        match head(&line)? {
            Some(Err(err)) => return Ok(Err(err)),
            Some(Ok(figures)) => e = Some(figures),
            None => {}
        }
    }
    e.map(Ok)
        .ok_or_else(|| "an estimate document without its estimate".to_string())
}

/// Reads a document written by [`write_estimate`]: the estimate, or why there is none.
pub fn read_estimate(text: &str) -> Result<Result<Estimate, EstimateError>, String> {
    let mut e: Option<Estimate> = None;
    for line in lines(text, ESTIMATE)? {
        match head(&line)? {
            Some(Err(err)) => return Ok(Err(err)),
            Some(Ok(figures)) => {
                e = Some(figures);
                continue;
            }
            None => {}
        }
        let e = e
            .as_mut()
            .ok_or_else(|| line.error("before the estimate record"))?;
        match line.kind {
            "line" => {
                let f = line.fields(8)?;
                let key = LineKey::parse(&f[0]).ok_or_else(|| line.error("an unknown line key"))?;
                let kind = [Kind::Computed, Kind::Assumed, Kind::Traced]
                    .into_iter()
                    .find(|k| k.name() == f[4])
                    .ok_or_else(|| line.error("an unknown kind"))?;
                e.lines.push(EstimateLine {
                    key,
                    label: Cow::Owned(f[1].clone()),
                    bytes: line.number(&f[2])?,
                    device_bytes: line.number(&f[3])?,
                    kind,
                    replaced_bytes: optional(&line, &f[5])?,
                    group: key.group(),
                    in_total: f[6] == "1",
                    formula: f[7].clone(),
                    inputs: BTreeMap::new(),
                });
            }
            "input" => {
                let f = line.fields(2)?;
                e.lines
                    .last_mut()
                    .ok_or_else(|| line.error("before a line record"))?
                    .inputs
                    .insert(Cow::Owned(f[0].clone()), f[1].clone());
            }
            "assumption" => e.assumptions.push(line.fields(1)?[0].clone()),
            "warning" => e.warnings.push(line.fields(1)?[0].clone()),
            _ => return Err(line.error("an unknown record")),
        }
    }
    e.map(Ok)
        .ok_or_else(|| "an estimate document without its estimate".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumem_core::estimate::estimate;
    use gpumem_core::params::from_pairs;

    fn input(pairs: &[(&str, &str)]) -> gpumem_core::estimate::EstimateInput {
        let (i, errors) = from_pairs(pairs.iter().copied());
        assert!(errors.is_empty(), "{errors:?}");
        i
    }

    /// Every line, figure and word of a training estimate comes back equal (full,
    /// LoRA, QLoRA, sharded and offloaded runs; escapes in the words), and so does a
    /// refusal with its field.
    #[test]
    fn an_estimate_crosses_whole() {
        let llama = [
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("intermediate", "14336"),
            ("vocab", "128256"),
            ("context", "2048"),
        ];
        for extra in [
            &[("train", "full")][..],
            &[("train", "lora"), ("checkpointing", "true")],
            &[("train", "qlora"), ("framework", "unsloth")],
            &[
                ("train", "full"),
                ("gpus", "8"),
                ("zero", "3"),
                ("offload-optimizer", "cpu"),
            ],
            &[("train", "full"), ("gpus", "4"), ("fsdp", "full")],
            &[("parameters", "7e9")],
        ] {
            let mut pairs = llama.to_vec();
            pairs.extend_from_slice(extra);
            let mut e = estimate(&input(&pairs)).unwrap();
            e.warnings.push("a\ttab, a\nline and a \\ back".into());
            let text = write_estimate(&Ok(e.clone()));
            assert_eq!(read_estimate(&text), Ok(Ok(e)), "{extra:?}");
        }
        let refused = estimate(&input(&[("train", "full"), ("context", "2048")]));
        assert!(refused.is_err());
        let back = read_estimate(&write_estimate(&refused)).unwrap();
        assert_eq!(back, refused);
        for err in [
            EstimateError::Overflow { what: "weights" },
            EstimateError::Truncated {
                format: "gguf",
                have: 3,
                needed: 9,
            },
        ] {
            let back = read_estimate(&write_estimate(&Err(err.clone()))).unwrap();
            assert_eq!(back, Err(err));
        }
        // The figures alone: the same figures, no lines or words.
        let e = estimate(&input(&llama)).unwrap();
        let figures = read_figures(&write_estimate(&Ok(e.clone())))
            .unwrap()
            .unwrap();
        assert!(!e.lines.is_empty() && figures.lines.is_empty() && figures.warnings.is_empty());
        assert_eq!(
            (
                figures.total_bytes,
                figures.per_device_bytes,
                figures.parameters
            ),
            (e.total_bytes, e.per_device_bytes, e.parameters)
        );
        assert_eq!(read_figures(&write_estimate(&refused)).unwrap(), refused);
        assert!(read_figures(ESTIMATE).is_err());
        assert!(read_estimate("not an estimate").is_err());
        assert!(read_estimate(ESTIMATE).is_err());
        assert!(read_estimate(&format!("{ESTIMATE}\nline\tkv_cache")).is_err());
    }
}
