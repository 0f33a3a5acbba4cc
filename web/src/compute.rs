//! From raw pairs to results: the three workloads, each read and estimated by an
//! [`Estimator`] (the agent page's: [`gpumem_core::params::from_pairs`] and
//! [`gpumem_core::estimate::estimate`] here; on the dimensioner, the engine module's
//! reading and estimate for inference, [`crate::rules`], and the training module's
//! estimate: [`crate::training`]), the answer ([`gpumem_core::headline`], by the same
//! modules) and the engine flags. No formula lives here; this module only routes text
//! to the core and errors back to the field that caused them. It is the pages' pure
//! layer: it imports no component (the components import it).

use std::collections::BTreeMap;

use crate::rules::{Rules, request};
pub use crate::training::Estimator;
use crate::training::{Training, trains};
use gpumem_core::EstimateError;
use gpumem_core::engine::{self, EngineParams};
use gpumem_core::estimate::{Estimate, estimate};
use gpumem_core::import::TensorSummary;
use gpumem_core::params::{from_pairs, parse_count};
use gpumem_core::presets::PRESETS;
use gpumem_proto::rules::Reading;

/// Every stage in this module: [`gpumem_core::estimate::estimate`] (the agent page).
#[derive(Debug, Clone, Copy)]
pub struct Full;

impl Estimator for Full {
    fn read(
        &self,
        pairs: &[(&'static str, String)],
        page: &[(&'static str, String)],
    ) -> Option<Reading> {
        let (_, errors) = from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
        let (settings, page_errors) = engine_settings(page);
        Some(Reading::of(errors, page_errors, &settings, None))
    }

    /// Through the core's one reader (`inputs::read`), the page's engine and card
    /// deciding what they decide for `gpumem-agent estimate`.
    fn estimate(
        &self,
        pairs: &[(&'static str, String)],
        page: &[(&'static str, String)],
        tensors: Option<&TensorSummary>,
    ) -> (Result<Estimate, EstimateError>, String) {
        let mut read = gpumem_core::inputs::read(
            pairs.iter().map(|(k, v)| (*k, v.as_str())),
            page.iter().map(|(k, v)| (*k, v.as_str())),
        );
        read.input.tensors = tensors.cloned();
        (estimate(&read.input), String::new())
    }
}

/// The workloads, in display order: (title, page-key prefix).
pub const WORKLOADS: [(&str, &str); 3] = [
    ("Typical", ""),
    ("Long but expected", "long"),
    ("Near the limit", "limit"),
];

/// The dimensions a workload sets (method §1): the rest of the input is shared.
pub const DIMS: [&str; 3] = ["sequences", "context", "generate"];

/// One workload's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadResult {
    /// The pairs it was computed from (the CLI flags that reproduce it).
    pub pairs: Vec<(&'static str, String)>,
    /// The estimate, or why there is none (on the dimensioner, its figures alone: the
    /// engine module draws its lines from [`WorkloadResult::document`]).
    pub result: Result<Estimate, EstimateError>,
    /// The estimate document it was read from, which the engine module draws (the
    /// dimensioner's; empty on the agent page, which estimates here).
    pub document: String,
}

/// Everything the results panels show.
#[derive(Debug, Clone, PartialEq)]
pub struct Computed {
    /// Typical, long, near-limit.
    pub workloads: Vec<WorkloadResult>,
    /// Field key → message, for every field with a problem.
    pub field_errors: BTreeMap<String, String>,
    /// Problems not tied to one field.
    pub general_errors: Vec<String>,
    /// Milliseconds the three estimates took (performance.now() around them).
    pub elapsed_ms: f64,
}

/// The page key a workload uses for a dimension (`long-context`), or the shared
/// key itself for the typical workload.
pub fn dim_key(prefix: &str, dim: &'static str) -> String {
    if prefix.is_empty() {
        dim.to_string()
    } else {
        format!("{prefix}-{dim}")
    }
}

/// The longer workloads' contexts the page starts with (`long-context`,
/// `limit-context`): inference's.
pub const LONGER_CONTEXTS: [(&str, &str, u64); 2] = [("long", "32768", 2), ("limit", "131072", 4)];

/// The pairs of workload `prefix`: the shared pairs with its own dimensions in
/// place of the typical ones, plus the names of the dimensions it overrides. A
/// training run's longer workloads left at inference's starting contexts
/// ([`LONGER_CONTEXTS`]) follow its own context instead: 2× and 4× the sequence
/// length it trains at.
pub fn workload_pairs(
    cli: &[(&'static str, String)],
    page: &[(&'static str, String)],
    prefix: &str,
) -> (Vec<(&'static str, String)>, Vec<&'static str>) {
    let mut pairs = cli.to_vec();
    let mut overridden = Vec::new();
    if prefix.is_empty() {
        return (pairs, overridden);
    }
    let shared = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.trim().to_string())
    };
    let training = shared("train").is_some_and(|t| !t.is_empty() && t != "none");
    let context: Option<u64> = shared("context").and_then(|c| c.parse().ok());
    for dim in DIMS {
        let key = dim_key(prefix, dim);
        if let Some((_, v)) = page.iter().find(|(k, _)| *k == key) {
            let mut v = v.clone();
            if dim == "context"
                && training
                && let Some((_, _, times)) = LONGER_CONTEXTS
                    .iter()
                    .find(|(p, start, _)| *p == prefix && v.trim() == *start)
                && let Some(c) = context
            {
                v = c.saturating_mul(*times).to_string();
            }
            pairs.retain(|(k, _)| *k != dim);
            pairs.push((dim, v));
            overridden.push(dim);
        }
    }
    (pairs, overridden)
}

/// Computes the three workloads with `estimator`. `now` is a clock in milliseconds
/// (the page passes `performance.now()`; tests pass a constant).
pub fn compute(
    cli: &[(&'static str, String)],
    page: &[(&'static str, String)],
    tensors: Option<&TensorSummary>,
    now: &dyn Fn() -> f64,
    estimator: &dyn Estimator,
) -> Computed {
    let mut field_errors = BTreeMap::new();
    let mut general_errors = Vec::new();
    let t0 = now();
    let mut workloads = Vec::with_capacity(3);
    let mut page_errors = Vec::new();
    for (i, (_, prefix)) in WORKLOADS.iter().enumerate() {
        let (pairs, overridden) = workload_pairs(cli, page, prefix);
        // Route each parse error to the field the user typed it in; a workload's
        // own dimension reports at its own column.
        let at = |field: &str| -> String {
            match DIMS.iter().find(|d| **d == field) {
                Some(d) if overridden.contains(d) => dim_key(prefix, d),
                _ => field.to_string(),
            }
        };
        let reading = estimator.read(&pairs, if i == 0 { page } else { &[] });
        for (field, reason) in reading.iter().flat_map(|r| &r.errors) {
            match field {
                Some(field) => {
                    let key = at(field);
                    if i == 0 || key != *field {
                        field_errors.entry(key).or_insert_with(|| reason.clone());
                    }
                }
                None if i == 0 => general_errors.push(reason.clone()),
                None => {}
            }
        }
        // The engine's keys (page pairs like the workloads' own): their messages go
        // beside their fields too.
        for (field, reason) in reading.iter().flat_map(|r| &r.page_errors) {
            page_errors.push((field.clone(), reason.clone()));
        }
        let (result, document) = estimator.estimate(&pairs, page, tensors);
        if let Err(EstimateError::Invalid { field, reason }) = &result {
            let key = at(field);
            if i == 0 || key != *field {
                field_errors.entry(key).or_insert_with(|| reason.clone());
            }
        }
        workloads.push(WorkloadResult {
            pairs,
            result,
            document,
        });
    }
    for (field, reason) in page_errors {
        field_errors.entry(field).or_insert(reason);
    }
    let elapsed_ms = now() - t0;
    Computed {
        workloads,
        field_errors,
        general_errors,
        elapsed_ms,
    }
}

/// The engine flags among `pairs` (other keys are skipped), parsed by the core.
/// One non-generic entry point, so the page holds one copy of the parser.
#[inline(never)]
pub fn engine_settings(pairs: &[(&'static str, String)]) -> (EngineParams, Vec<EstimateError>) {
    engine::from_pairs_among(pairs.iter().map(|(k, v)| (*k, v.as_str())))
}

/// The preset whose shape `shape` (the shape keys' pairs) describes, if any: as the
/// engine module reads it once it is there (the same architecture once read); until
/// then, the preset whose shape pairs are these very values (the page's own shapes: a
/// preset picked, a link's or the defaults), whose count reads the same.
pub fn preset_index(shape: &[(&'static str, String)], rules: Rules) -> Option<usize> {
    match rules.read(shape, &[]) {
        Ok(r) => r.preset,
        Err(_) => preset_by_text(shape),
    }
}

/// [`preset_index`] before the engine module is there: the preset whose shape pairs
/// are `shape`'s (the same keys; each value the same text, or the same count).
pub fn preset_by_text(shape: &[(&'static str, String)]) -> Option<usize> {
    let count = |k: &'static str, v: &str| parse_count(k, v).ok();
    PRESETS.iter().position(|p| {
        p.pairs.len() == shape.len()
            && shape.iter().all(|(k, v)| {
                p.pairs.iter().any(|(pk, pv)| {
                    pk == k
                        && (pv.trim() == v.trim()
                            || count(k, pv).is_some_and(|n| count(k, v) == Some(n)))
                })
            })
    })
}

/// The answer for one workload (its `pairs`, the imported `tensors`) with the page's
/// engine and card keys (`page`): the core's headline — on the engine's budget when an
/// engine is chosen (on the card, or on each catalogue card for the smallest that
/// serves it; over several cards, with each device's row), on the estimate without
/// one (on the card, or on the smallest card that fits), which the engine module
/// (`rules`) computes, as it estimates inference and reads the pairs. A training run
/// is estimated and answered by the training module (`training`). The answer is the
/// module's document, which the engine module draws (or says holds none). While a
/// module loads, the answer says so. `None` when the workload has no estimate (its
/// error is shown instead).
pub fn answer(
    pairs: &[(&'static str, String)],
    tensors: Option<&TensorSummary>,
    page: &[(&'static str, String)],
    training: Training,
) -> Option<Result<String, String>> {
    // The engine module reads the pairs; while it loads (or could not be loaded), the
    // estimate below says so.
    let reading = training.rules().read(pairs, page);
    if reading.as_ref().is_ok_and(|r| !r.errors.is_empty()) {
        return None;
    }
    match training.estimate_any(pairs, page, tensors) {
        Ok(e) => {
            e.ok()?;
        }
        Err(why) => return Some(Err(why)),
    }
    let reading = match reading {
        Ok(r) => r,
        Err(why) => return Some(Err(why)),
    };
    Some(match reading.engine {
        // Several cards are an engine's split (llama.cpp, vLLM): the estimate judges one card.
        false if reading.devices > 0 => Err(
            "several cards are judged under the llama.cpp engine (its --tensor-split) or vLLM (its pipeline stages); the estimate judges one card".into(),
        ),
        false if trains(pairs) => training.answer(pairs, page, tensors),
        _ => training.rules().answer(&request(pairs, page, tensors)),
    })
}

/// The values a one-dimension sweep visits around `base` (method §11: change one
/// variable at a time): ¼×, ½×, 1×, 2×, 4×, 8×, 16×, at least 1, without repeats.
pub fn sweep_values(base: u64) -> Vec<u64> {
    let mut out: Vec<u64> = [
        base / 4,
        base / 2,
        base,
        base.saturating_mul(2),
        base.saturating_mul(4),
        base.saturating_mul(8),
        base.saturating_mul(16),
    ]
    .into_iter()
    .map(|v| v.max(1))
    .collect();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    #[test]
    fn seed_section_2_through_the_page_path() {
        let c = compute(
            &p(&[
                ("parameters", "7000000000"),
                ("bits", "16"),
                ("reserve-gib", "4"),
            ]),
            &[],
            None,
            &|| 0.0,
            &Full,
        );
        let e = c.workloads[0].result.as_ref().unwrap();
        assert_eq!(e.weights_bytes, 14_000_000_000);
        assert_eq!(e.total_bytes, 14_000_000_000 + 4 * (1 << 30));
        assert!(c.field_errors.is_empty());
    }

    #[test]
    fn a_training_runs_longer_workloads_follow_its_context() {
        let page = p(&[("long-context", "32768"), ("limit-context", "131072")]);
        let at = |cli: &[(&'static str, String)], prefix: &str| {
            let (pairs, _) = workload_pairs(cli, &page, prefix);
            pairs
                .into_iter()
                .find(|(k, _)| *k == "context")
                .map(|(_, v)| v)
        };
        let lora = p(&[("train", "lora"), ("context", "2048")]);
        assert_eq!(at(&lora, "long").as_deref(), Some("4096"));
        assert_eq!(at(&lora, "limit").as_deref(), Some("8192"));
        // Inference keeps the page's starting contexts; a context typed stays.
        let serve = p(&[("context", "2048")]);
        assert_eq!(at(&serve, "long").as_deref(), Some("32768"));
        let typed = p(&[("long-context", "16384")]);
        let (pairs, _) = workload_pairs(&lora, &typed, "long");
        assert!(pairs.contains(&("context", "16384".to_string())));
    }

    #[test]
    fn workload_dimensions_override_and_errors_land_on_their_column() {
        let cli = p(&[
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("intermediate", "14336"),
            ("vocab", "128256"),
            ("context", "8192"),
        ]);
        let page = p(&[("long-context", "16384"), ("limit-context", "-3")]);
        let c = compute(&cli, &page, None, &|| 0.0, &Full);
        let kv = |i: usize| c.workloads[i].result.as_ref().unwrap().kv_cache_bytes;
        // Method §4: 2 × 32 layers × 8 KV heads × 128 × 8192 tokens × 2 B = 1 GiB.
        assert_eq!(kv(0), 1 << 30);
        assert_eq!(kv(1), 2 << 30);
        assert!(c.field_errors["limit-context"].contains("negative"));
        assert!(!c.field_errors.contains_key("context"));
        // An engine key's message lands on its field; a valid one adds none.
        let page = p(&[("gpu-memory-utilization", "1.5"), ("engine", "vllm")]);
        let c = compute(&cli, &page, None, &|| 0.0, &Full);
        assert!(c.field_errors["gpu-memory-utilization"].contains("fraction"));
        assert!(!c.field_errors.contains_key("engine"));
    }

    /// The page's engine and card decide of every workload's estimate what `--engine`
    /// and `--card` decide for `gpumem-agent estimate` (the core's one reader): a
    /// hybrid model's state line in vLLM's layout.
    #[test]
    fn the_pages_engine_settles_each_workloads_estimate() {
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../crates/gpumem-core/tests/cases/configs/qwen3-next-80b-a3b.json"
        ));
        let mut cli = gpumem_core::import::config::parse_config(text)
            .unwrap()
            .pairs();
        cli.push(("context", "4096".into()));
        let page = p(&[("engine", "vllm"), ("card", "l4"), ("long-context", "8192")]);
        let c = compute(&cli, &page, None, &|| 0.0, &Full);
        assert!(c.field_errors.is_empty(), "{:?}", c.field_errors);
        for w in &c.workloads {
            let read = gpumem_core::inputs::read(
                w.pairs.iter().map(|(k, v)| (*k, v.as_str())),
                page.iter().map(|(k, v)| (*k, v.as_str())),
            );
            assert_eq!(w.result, estimate(&read.input));
            let (alone, _) = from_pairs(w.pairs.iter().map(|(k, v)| (*k, v.as_str())));
            assert_ne!(
                w.result,
                estimate(&alone),
                "the engine decides the state line"
            );
        }
    }

    #[test]
    fn a_presets_own_shape_is_that_preset_before_the_engine_module_is_there() {
        for (i, p) in PRESETS.iter().enumerate() {
            let mut shape = p.pairs.to_vec();
            let own: Vec<(&'static str, String)> =
                shape.iter().map(|(k, v)| (*k, format!(" {v} "))).collect();
            assert_eq!(preset_by_text(&own), Some(i), "{}", p.id);
            // One key more, or one value changed, is another shape.
            shape.pop();
            let fewer: Vec<(&'static str, String)> =
                shape.iter().map(|(k, v)| (*k, v.to_string())).collect();
            assert_ne!(preset_by_text(&fewer), Some(i), "{}", p.id);
        }
        assert_eq!(preset_by_text(&[("layers", "7".into())]), None);
    }

    #[test]
    fn sweep_is_monotonic_and_positive() {
        assert_eq!(sweep_values(1), vec![1, 2, 4, 8, 16]);
        assert_eq!(sweep_values(4096)[0], 1024);
    }
}
