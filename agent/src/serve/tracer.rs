//! A paired page's "trace this workload": the dimensioner's inputs traced on this
//! machine's CPU (`crate::trace`: the model's code on PyTorch's meta device, no GPU, no
//! weights), answered with the estimate's lines as traced.
//!
//! Bounded: one trace at a time per agent (a second request is told `busy`), a time
//! limit ([`DEADLINE`]), inputs checked by the core's parser before Python starts, and
//! a Python without torch or transformers answered with what to install. A producer like
//! `runner`: it posts its answer as a [`SessionEvent`] and never imports the session.

use std::ffi::OsString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use std::collections::BTreeMap;

use gpumem_core::EstimateError;
use gpumem_core::params;
use gpumem_proto::wire::{AgentMessage, TraceFailure, TraceRequest, TracedFigure};

use super::events::{SessionEvent, frame};
use crate::trace::{python, shape};

/// Longest a page's trace may run (a 1B model takes about 10 s on two cores).
pub const DEADLINE: Duration = Duration::from_secs(300);

/// What the traces of one agent share.
pub struct Tracer {
    /// The Python that runs the probe (`serve --python`, default `python3`).
    pub python: OsString,
    busy: AtomicBool,
}

impl Tracer {
    /// A tracer running the probe in `python`.
    pub fn new(python: OsString) -> Tracer {
        Tracer {
            python,
            busy: AtomicBool::new(false),
        }
    }
}

/// Clears the busy flag when the trace's thread ends, however it ends.
struct Slot(Arc<Tracer>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::SeqCst);
    }
}

fn failed(id: u64, code: TraceFailure, message: String) -> AgentMessage {
    AgentMessage::TraceFailed { id, code, message }
}

/// Starts the trace of `request` on a thread of its own, or answers at once why not.
/// The answer goes to `to_session`; it is never marked replay (the trace runs now,
/// whatever the agent replays).
pub fn start(tracer: &Arc<Tracer>, request: TraceRequest, to_session: Sender<SessionEvent>) {
    let send = move |message: AgentMessage| {
        let _ = to_session.send(SessionEvent::Send(Box::new(frame(false, message))));
    };
    let id = request.id;
    if let Err(why) = request.validate() {
        return send(failed(id, TraceFailure::BadInputs, why));
    }
    if tracer.busy.swap(true, Ordering::SeqCst) {
        return send(failed(
            id,
            TraceFailure::Busy,
            "a trace is already running on this agent; one runs at a time".into(),
        ));
    }
    let slot = Slot(Arc::clone(tracer));
    let spawned = std::thread::Builder::new()
        .name("page-trace".into())
        .spawn({
            let send = send.clone();
            move || {
                let message = answer(&slot.0.python, &request);
                // Free before answering: a page may ask again as soon as it reads this.
                drop(slot);
                send(message);
            }
        });
    if let Err(e) = spawned {
        send(failed(
            id,
            TraceFailure::Failed,
            format!("the agent could not start the trace: {e}"),
        ));
    }
}

/// The page's keys read as `estimate` reads its flags (`crate::estimate::read_input`):
/// the estimator's fields, and the engine's among them (the page's engine and card
/// decide what they decide for the command: the estimate beside each traced line is
/// the one `estimate --json` gives for the same keys). Page-only keys such as the Hub
/// lookup's `model` are not read: nothing is fetched on a page's behalf.
fn read_page(
    inputs: &BTreeMap<String, String>,
) -> (gpumem_core::estimate::EstimateInput, Vec<EstimateError>) {
    let entries = || inputs.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    crate::estimate::read_input(
        entries().filter(|(k, _)| params::keys().any(|p| p == *k)),
        entries(),
    )
}

/// Runs one trace and words its answer.
fn answer(python_exe: &OsString, request: &TraceRequest) -> AgentMessage {
    let id = request.id;
    let (input, errors) = read_page(&request.inputs);
    if let Some(e) = errors.first() {
        return failed(id, TraceFailure::BadInputs, format!("invalid input: {e}"));
    }
    let config = match shape::config_for(&input) {
        Ok(c) => c,
        Err(why) => return failed(id, TraceFailure::BadInputs, why),
    };
    let workload = match python::workload_of(&input, python::expandable_from_env()) {
        Ok(w) => w,
        Err(e) => return failed(id, TraceFailure::BadInputs, format!("{e:#}")),
    };
    let doc = match python::trace_within(
        python_exe,
        &config,
        &workload,
        python::double_quant(&input),
        DEADLINE,
        false,
    ) {
        Ok(Ok((doc, _))) => doc,
        Ok(Err(f @ python::Failure::Unavailable(_))) => {
            return failed(id, TraceFailure::Unavailable, f.to_string());
        }
        Ok(Err(f @ python::Failure::Refused(_))) => {
            return failed(id, TraceFailure::BadInputs, f.to_string());
        }
        Ok(Err(f)) => return failed(id, TraceFailure::Failed, f.to_string()),
        Err(e) => return failed(id, TraceFailure::Failed, format!("{e:#}")),
    };
    let peak = doc.peak_phase();
    // The estimate's line beside each traced one: the same inputs through the same core
    // as the page's, so the page shows the agent's figures without recomputing them.
    let estimated = gpumem_core::estimate::estimate(&input).ok();
    let lines = crate::trace::traced_lines(&doc, input.train)
        .into_iter()
        .map(|l| {
            let line = estimated
                .as_ref()
                .and_then(|e| e.lines.iter().find(|x| x.key == l.key));
            TracedFigure {
                key: l.key.as_str().to_owned(),
                label: l.label,
                bytes: l.bytes,
                formula: l.formula,
                estimate_bytes: line.map(|x| x.bytes),
                estimate_basis: line.map(|x| x.kind.name().to_owned()),
            }
        })
        .collect();
    let w = &doc.workload;
    let what = w.words();
    AgentMessage::Traced {
        id,
        lines,
        peak_allocated_bytes: peak.map_or(0, |p| p.allocated_peak_bytes),
        peak_reserved_bytes: peak.map_or(0, |p| p.reserved_peak_bytes),
        detail: format!(
            "traced {} ({}, {} attention): {what}; {} parameters; torch {}, transformers {}; {:.1} s on the agent's CPU, not a GPU measurement",
            doc.model_type,
            w.dtype,
            w.attention,
            doc.parameters,
            doc.versions.torch,
            doc.versions.transformers,
            doc.wall_time_ms as f64 / 1000.0
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(tracer: &Arc<Tracer>, inputs: &[(&str, &str)]) -> AgentMessage {
        let (tx, rx) = std::sync::mpsc::channel();
        start(
            tracer,
            TraceRequest {
                id: 7,
                inputs: inputs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            },
            tx,
        );
        match rx.recv_timeout(Duration::from_secs(30)).expect("an answer") {
            SessionEvent::Send(f) => f.message,
            _ => panic!("not a frame"),
        }
    }

    fn code(m: &AgentMessage) -> (TraceFailure, String) {
        match m {
            AgentMessage::TraceFailed {
                id: 7,
                code,
                message,
            } => (*code, message.clone()),
            other => panic!("{other:?}"),
        }
    }

    /// The estimate beside the traced lines reads the page's keys as `estimate` reads
    /// its flags: the page's engine and card decide what `--engine` and `--card`
    /// decide (a hybrid model's state line in vLLM's layout on the page's vLLM), and a
    /// page-only key is not read.
    #[test]
    fn the_pages_engine_and_card_settle_the_estimate_beside_the_trace() {
        #[allow(clippy::disallowed_methods)] // a test's fixture
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../crates/gpumem-core/tests/cases/configs/qwen3-next-80b-a3b.json"
        ))
        .unwrap();
        let mut pairs: Vec<(String, String)> = gpumem_core::import::config::parse_config(&text)
            .unwrap()
            .pairs()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        pairs.push(("context".into(), "4096".into()));
        let engine = [("engine", "vllm"), ("card", "l4")];
        let mut page: BTreeMap<String, String> = pairs.iter().cloned().collect();
        page.extend(
            engine
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        page.insert("model".into(), "Qwen/Qwen3-Next-80B-A3B-Instruct".into());
        let (input, errors) = read_page(&page);
        assert!(errors.is_empty(), "{errors:?}");
        let (command, errors) = crate::estimate::read_input(
            pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            engine,
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(input, command);
        let est = gpumem_core::estimate::estimate(&input).unwrap();
        assert_eq!(est, gpumem_core::estimate::estimate(&command).unwrap());
        // The page without them: transformers' own layout, a larger state line.
        page.retain(|k, _| k != "engine" && k != "card");
        let (alone, _) = read_page(&page);
        let state = |e: &gpumem_core::estimate::Estimate| {
            e.lines
                .iter()
                .find(|l| l.key == gpumem_core::estimate::LineKey::KvCacheState)
                .map(|l| l.bytes)
        };
        let alone = gpumem_core::estimate::estimate(&alone).unwrap();
        assert!(
            state(&est) < state(&alone),
            "{:?} {:?}",
            state(&est),
            state(&alone)
        );
    }

    /// Every refusal is an answer with words (never a panic), and the busy flag is
    /// free again after each.
    #[test]
    fn refusals_are_answers() {
        let tracer = Arc::new(Tracer::new(OsString::from("/nonexistent/python3")));
        let (c, m) = code(&ask(&tracer, &[("layers", "zero")]));
        assert_eq!(c, TraceFailure::BadInputs, "{m}");
        let (c, m) = code(&ask(&tracer, &[("parameters", "7000000000")]));
        assert_eq!(c, TraceFailure::BadInputs);
        assert!(m.contains("shape"), "{m}");
        let shape = [
            ("layers", "2"),
            ("hidden", "64"),
            ("heads", "4"),
            ("kv-heads", "2"),
            ("intermediate", "128"),
            ("vocab", "128"),
            ("context", "16"),
        ];
        let (c, m) = code(&ask(&tracer, &shape));
        assert_eq!(c, TraceFailure::Unavailable, "{m}");
        assert!(m.contains("pip install"), "{m}");
        // Past the trace's bounds: refused before Python starts (a missing Python would
        // answer Unavailable instead).
        let mut deep = shape;
        deep[0] = ("layers", "4096");
        let (c, m) = code(&ask(&tracer, &deep));
        assert_eq!(c, TraceFailure::BadInputs, "{m}");
        assert!(m.contains("layers a trace builds"), "{m}");
        let mut lora = shape.to_vec();
        lora.extend([("train", "lora"), ("lora-rank", "1099511627776")]);
        let (c, m) = code(&ask(&tracer, &lora));
        assert_eq!(c, TraceFailure::BadInputs, "{m}");
        assert!(m.contains("--lora-rank"), "{m}");
        tracer.busy.store(true, Ordering::SeqCst);
        let (c, _) = code(&ask(&tracer, &shape));
        assert_eq!(c, TraceFailure::Busy);
    }
}
