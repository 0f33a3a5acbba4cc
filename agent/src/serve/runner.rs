//! Live runs: each `start_measure` becomes one child process
//! `gpumem-agent measure --events jsonl --output <temp file> …` — one process per series,
//! as method §8 asks — whose event lines are forwarded to the page the moment they
//! are read. The child is this same executable, so the page can only reach the built-in
//! measurement, with dimensions the session has already checked.
//!
//! Why a child rather than a thread: a measurement that crashes the driver, leaks device
//! memory or is killed on `cancel` takes nothing of the server with it, and every series
//! starts from a fresh CUDA context.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use gpumem_proto::results::{EnvironmentReport, Event, ResultsFile};
use gpumem_proto::wire::{AgentMessage, MeasureRequest, RunFailure};
use serde_json::Value;

use super::State;
use super::events::{SessionEvent, frame};

/// Longest event line read from the child; a phase with its allocation trace is a few
/// KiB, so anything near this is not our child's output.
const MAX_EVENT_LINE: usize = 4 * 1024 * 1024;

/// How much of the child's stderr is kept for the failure message.
const STDERR_TAIL: usize = 4096;

/// The environment probe gets this long before it is abandoned.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Cancels a run, live or replayed.
pub struct RunControl {
    cancelled: AtomicBool,
    /// The live child, while it runs.
    child: Mutex<Option<Child>>,
    /// Wakes a replay out of its pause.
    wake: Mutex<Option<Sender<()>>>,
}

impl RunControl {
    /// The control of a replay, woken through `wake`.
    pub fn for_replay(wake: Sender<()>) -> RunControl {
        RunControl {
            cancelled: AtomicBool::new(false),
            child: Mutex::new(None),
            wake: Mutex::new(Some(wake)),
        }
    }

    fn for_child(child: Child) -> RunControl {
        RunControl {
            cancelled: AtomicBool::new(false),
            child: Mutex::new(Some(child)),
            wake: Mutex::new(None),
        }
    }

    /// Stops the run: kills the child, or wakes the replay so it notices.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        if let Some(child) = self
            .child
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            let _ = child.kill();
        }
        if let Some(wake) = self.wake.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = wake.send(());
        }
    }

    /// Whether [`RunControl::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}

/// The wire message for one event line of `measure --events jsonl`; `None` for events
/// the page does not need (`saved`: the agent reads the file itself) and for `failed`,
/// which the runner reports as `run_failed` once the child has exited.
pub fn event_message(run_id: u64, event: Event) -> Option<AgentMessage> {
    match event {
        Event::Started {
            device,
            dimensions,
            protocol,
            environment,
            ..
        } => Some(AgentMessage::DeviceStarted {
            run_id,
            device,
            dimensions,
            protocol,
            environment,
        }),
        Event::Phase { device, result } => Some(AgentMessage::Phase {
            run_id,
            device,
            result,
        }),
        Event::Finished {
            device,
            status,
            failed_phase,
            error,
            computed,
            wall_time_ns,
        } => Some(AgentMessage::DeviceFinished {
            run_id,
            device,
            status,
            failed_phase,
            error,
            computed,
            wall_time_ns,
        }),
        Event::Saved { .. } | Event::Failed { .. } => None,
    }
}

/// The `measure` arguments for a checked request: dimensions only, as numbers.
fn measure_args(request: &MeasureRequest) -> Vec<String> {
    let mut args = vec![
        "measure".to_owned(),
        "--device".to_owned(),
        "cuda:0".to_owned(),
        "--batch".to_owned(),
        request.batch.to_string(),
        "--context".to_owned(),
        request.context.to_string(),
        "--width".to_owned(),
        request.width.to_string(),
        "--layers".to_owned(),
        request.layers.to_string(),
        "--dtype".to_owned(),
        request.dtype.as_str().to_owned(),
        "--warmup".to_owned(),
        request.warmup.to_string(),
        "--repeats".to_owned(),
        request.repeats.to_string(),
        "--events".to_owned(),
        "jsonl".to_owned(),
    ];
    if request.trim_between_repeats {
        args.push("--trim-between-repeats".to_owned());
    }
    args
}

/// Starts a live run of `request` (already checked against the limits) for one session.
/// The caller holds the agent's live-run slot; the runner frees it when the child ends.
pub fn start_live(
    state: &Arc<State>,
    run_id: u64,
    request: MeasureRequest,
    to_session: Sender<SessionEvent>,
) -> anyhow::Result<Arc<RunControl>> {
    let exe = std::env::current_exe().context("locating gpumem-agent itself")?;
    // A fresh directory per run: `measure` refuses to overwrite a file (method §9).
    // Private (0700 in the agent's own base, whatever the umask): the results file is
    // read back and sent to the page.
    let dir = crate::private::PrivateDir::in_env_base("serve")
        .context("creating a directory for the results file")?;
    let output = dir.path().join("result.json");
    let mut child = Command::new(exe)
        .args(measure_args(&request))
        .arg("--output")
        .arg(&output)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting gpumem-agent measure")?;
    let stdout = child.stdout.take().context("the child's stdout")?;
    let stderr = child.stderr.take().context("the child's stderr")?;
    let control = Arc::new(RunControl::for_child(child));

    let stderr_tail = Arc::new(Mutex::new(VecDeque::<u8>::new()));
    let tail_writer = Arc::clone(&stderr_tail);
    let stderr_thread = std::thread::Builder::new()
        .name("measure-stderr".into())
        .spawn(move || keep_tail(stderr, &tail_writer))
        .context("starting the stderr reader")?;

    let thread_control = Arc::clone(&control);
    let thread_state = Arc::clone(state);
    std::thread::Builder::new()
        .name("measure-stdout".into())
        .spawn(move || {
            let send =
                |message| to_session.send(SessionEvent::Send(Box::new(frame(false, message))));
            let _ = send(AgentMessage::RunStarted { run_id, request });
            let failed_event = forward_events(stdout, run_id, &send);
            let status = wait_child(&thread_control);
            let _ = stderr_thread.join();
            let stderr = {
                let tail = stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
                String::from_utf8_lossy(&tail.iter().copied().collect::<Vec<u8>>())
                    .trim()
                    .to_owned()
            };
            let outcome = conclude(
                run_id,
                &thread_control,
                status,
                &output,
                failed_event,
                &stderr,
            );
            drop(dir);
            // Free the slot before telling the page, so an immediate new request is not busy.
            {
                let mut live = thread_state
                    .live_run
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if *live == Some(run_id) {
                    *live = None;
                }
            }
            // The session forgets the run before the page reads the outcome (events are
            // handled in order), so a page that starts again at once is not told "busy".
            let _ = to_session.send(SessionEvent::RunEnded(run_id));
            let _ = send(outcome);
        })
        .context("starting the event reader")?;
    Ok(control)
}

/// Forwards every event line until the child closes its stdout; returns the text of a
/// `failed` event, if one came.
fn forward_events(
    stdout: impl Read,
    run_id: u64,
    send: &dyn Fn(AgentMessage) -> Result<(), std::sync::mpsc::SendError<SessionEvent>>,
) -> Option<String> {
    let mut reader = BufReader::new(stdout);
    let mut failed = None;
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_EVENT_LINE as u64)
            .read_until(b'\n', &mut line);
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if !line.ends_with(b"\n") && line.len() >= MAX_EVENT_LINE {
            // Skip the rest of an overlong line instead of misreading its tail.
            let mut sink = Vec::new();
            let _ = reader.read_until(b'\n', &mut sink);
            let _ = send(AgentMessage::Error {
                code: gpumem_proto::wire::ErrorCode::Internal,
                message: "the measurement printed an overlong event line; it was skipped".into(),
            });
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<Event>(text) {
            Ok(Event::Failed { error, .. }) => failed = Some(error),
            Ok(event) => {
                if let Some(message) = event_message(run_id, event) {
                    // The page may have gone; keep draining so the child is not blocked.
                    let _ = send(message);
                }
            }
            Err(e) => {
                let _ = send(AgentMessage::Error {
                    code: gpumem_proto::wire::ErrorCode::Internal,
                    message: format!("the measurement printed a line the agent cannot read: {e}"),
                });
            }
        }
    }
    failed
}

/// Waits for the child to exit and returns its exit code (`None` if killed by a signal).
/// Polls rather than blocking in `wait()` so that `cancel()` can take the lock and kill
/// a child that closed its stdout but does not exit.
fn wait_child(control: &RunControl) -> Option<i32> {
    loop {
        {
            let mut guard = control.child.lock().unwrap_or_else(|p| p.into_inner());
            let child = guard.as_mut()?;
            match child.try_wait() {
                Ok(Some(status)) => {
                    *guard = None;
                    return status.code();
                }
                Ok(None) => {}
                Err(_) => {
                    *guard = None;
                    return None;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The message that ends a live run: the results document when the child wrote one,
/// otherwise why not.
fn conclude(
    run_id: u64,
    control: &RunControl,
    exit_code: Option<i32>,
    output: &std::path::Path,
    failed_event: Option<String>,
    stderr: &str,
) -> AgentMessage {
    if control.is_cancelled() {
        return AgentMessage::RunFailed {
            run_id,
            code: RunFailure::Cancelled,
            message: "the measurement was cancelled by the page; nothing was recorded".into(),
        };
    }
    if let Ok(text) = std::fs::read_to_string(output) {
        return match serde_json::from_str::<Value>(&text).map(|raw| {
            let typed = serde_json::from_value::<ResultsFile>(raw.clone());
            (raw, typed)
        }) {
            Ok((raw, Ok(file))) if file.check_schema().is_ok() => AgentMessage::RunFinished {
                run_id,
                ok: !file.any_failed(),
                result: raw,
            },
            _ => AgentMessage::RunFailed {
                run_id,
                code: RunFailure::Crashed,
                message: "the measurement wrote a results file the agent cannot read".into(),
            },
        };
    }
    let reason = failed_event
        .or_else(|| (!stderr.is_empty()).then(|| telling_line(stderr)))
        .unwrap_or_else(|| "no output".into());
    match exit_code {
        Some(2) => AgentMessage::RunFailed {
            run_id,
            code: RunFailure::Unavailable,
            message: format!("cannot measure on this machine: {reason}"),
        },
        Some(code) => AgentMessage::RunFailed {
            run_id,
            code: RunFailure::Crashed,
            message: format!(
                "the measurement exited with code {code} and wrote no results: {reason}"
            ),
        },
        None => AgentMessage::RunFailed {
            run_id,
            code: RunFailure::Crashed,
            message: format!("the measurement was killed and wrote no results: {reason}"),
        },
    }
}

/// The line of the child's stderr that says what went wrong: the last one mentioning an
/// error (clap and the agent both start theirs with `error:`), else the last one.
fn telling_line(text: &str) -> String {
    let lines = || text.lines().rev().map(str::trim).filter(|l| !l.is_empty());
    lines()
        .find(|l| l.to_ascii_lowercase().contains("error"))
        .or_else(|| lines().next())
        .unwrap_or("")
        .to_owned()
}

/// Reads `from` to the end, keeping only the last [`STDERR_TAIL`] bytes.
fn keep_tail(mut from: impl Read, tail: &Mutex<VecDeque<u8>>) {
    let mut buf = [0u8; 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                tail.extend(&buf[..n]);
                let excess = tail.len().saturating_sub(STDERR_TAIL);
                tail.drain(..excess);
            }
        }
    }
}

/// Runs `gpumem-agent environment --json` once and reads its report (live mode, at
/// start). On a machine without a GPU the report says what is missing; only a report
/// that cannot be produced at all is an error.
pub fn probe_environment() -> Result<EnvironmentReport, String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating gpumem-agent itself: {e}"))?;
    let mut child = Command::new(exe)
        .args(["environment", "--device", "all", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting gpumem-agent environment: {e}"))?;
    let stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stdout) = stdout {
            let _ = stdout
                .by_ref()
                .take(MAX_EVENT_LINE as u64)
                .read_to_string(&mut text);
        }
        text
    });
    let deadline = Instant::now() + PROBE_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("gpumem-agent environment did not answer in time".into());
            }
        }
    }
    let text = reader.join().unwrap_or_default();
    serde_json::from_str::<EnvironmentReport>(text.trim())
        .map_err(|e| format!("gpumem-agent environment --json printed no report ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measure_arguments_are_numbers_and_fixed_flags_only() {
        let request = MeasureRequest {
            trim_between_repeats: true,
            ..MeasureRequest::SEED_EXAMPLE
        };
        let args = measure_args(&request);
        assert_eq!(args[0], "measure");
        assert!(args.windows(2).any(|w| w == ["--batch", "2"]));
        assert!(args.windows(2).any(|w| w == ["--dtype", "float32"]));
        assert!(args.contains(&"--trim-between-repeats".to_owned()));
        assert!(
            !args.iter().any(|a| a.contains('/')),
            "no paths come from the page"
        );
    }

    #[test]
    fn failure_without_results_names_the_reason() {
        let (wake, _rx) = std::sync::mpsc::channel();
        let control = RunControl::for_replay(wake);
        let missing = std::path::Path::new("/nonexistent/gpumem/result.json");
        let message = conclude(
            3,
            &control,
            Some(2),
            missing,
            Some("no CUDA driver".into()),
            "",
        );
        match message {
            AgentMessage::RunFailed { code, message, .. } => {
                assert_eq!(code, RunFailure::Unavailable);
                assert!(message.contains("no CUDA driver"), "{message}");
            }
            other => panic!("expected run_failed, got {other:?}"),
        }
        control.cancel();
        assert!(matches!(
            conclude(3, &control, None, missing, None, ""),
            AgentMessage::RunFailed {
                code: RunFailure::Cancelled,
                ..
            }
        ));
    }
}
