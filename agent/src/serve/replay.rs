//! `serve --replay FILE`: a saved results file pushed to a paired page as if
//! it were measured now, with a pause between messages, every frame marked
//! `replay: true`.
//!
//! Choice: the replay starts when the page sends `start_measure` (whatever dimensions it
//! asks for, once they pass the bounds; `run_started.request` then carries the recorded
//! ones), exactly as a live run would — so the page has one code path for both. Replays
//! use no GPU, so unlike live runs each paired page gets its own, concurrently (this is
//! what the 50-viewer load test exercises); one at a time per connection.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

use anyhow::{Context, bail};
use gpumem_proto::results::{ENVIRONMENT_SCHEMA, EnvironmentReport, Event, Fact, ResultsFile};
use gpumem_proto::wire::{AgentFrame, AgentMessage, MeasureRequest, RunFailure};
use serde_json::Value;

use super::events::{SessionEvent, frame, unix_nanos};
use super::runner::{RunControl, event_message};

/// Largest results file accepted for replay; a real one is well under a megabyte.
const MAX_REPLAY_BYTES: u64 = 64 * 1024 * 1024;

/// A results file ready to replay.
pub struct Replay {
    /// The file as saved, serialised once (sent unchanged in every `run_finished`).
    raw_json: String,
    /// The same, typed.
    file: ResultsFile,
}

impl Replay {
    /// Reads and checks a results file; a bad file is refused with the reason (the agent
    /// then exits 2 before listening).
    pub fn load(path: &Path) -> anyhow::Result<Replay> {
        let size = fs::metadata(path).context("reading the file")?.len();
        if size > MAX_REPLAY_BYTES {
            bail!("the file is {size} bytes; a results file is at most {MAX_REPLAY_BYTES}");
        }
        let text = crate::private::read_to_string_bounded(path, MAX_REPLAY_BYTES)?;
        Replay::parse(&text)
    }

    /// Checks a results document given as text.
    pub fn parse(text: &str) -> anyhow::Result<Replay> {
        let raw: Value = serde_json::from_str(text).context("the file is not JSON")?;
        let file: ResultsFile = serde_json::from_value(raw.clone())
            .context("the file is not a gpumem results file (gpumem.results/v1)")?;
        file.check_schema()?;
        if file.runs.is_empty() {
            bail!("the results file holds no run to replay");
        }
        Ok(Replay {
            raw_json: raw.to_string(),
            file,
        })
    }

    /// The request that reproduces the recorded run.
    pub fn request(&self) -> MeasureRequest {
        MeasureRequest::from_recorded(&self.file.dimensions, &self.file.protocol)
    }

    /// An environment report built from what the file recorded; facts a results file
    /// does not hold are unknown, with the reason.
    pub fn environment_report(&self) -> EnvironmentReport {
        const NOT_RECORDED: &str = "replay: not recorded in the results file";
        EnvironmentReport {
            schema: ENVIRONMENT_SCHEMA.to_owned(),
            agent_version: self.file.agent_version.clone(),
            os: self
                .file
                .runs
                .first()
                .map(|r| r.environment.os.clone())
                .unwrap_or_default(),
            cuda_driver_library: Fact::unknown(NOT_RECORDED),
            cublas_library: Fact::unknown(NOT_RECORDED),
            device_count: Fact::unknown(NOT_RECORDED),
            devices: self
                .file
                .runs
                .iter()
                .map(|r| r.environment.clone())
                .collect(),
            missing: Vec::new(),
        }
    }

    /// The messages of one replayed run between `run_started` and `run_finished`.
    fn messages(&self, run_id: u64) -> Vec<AgentMessage> {
        self.file
            .events(None)
            .into_iter()
            .filter_map(|event: Event| event_message(run_id, event))
            .collect()
    }
}

/// Starts pushing `replay` to one session on a thread of its own; the returned control
/// cancels it.
pub fn start(
    replay: &Arc<Replay>,
    run_id: u64,
    delay: Duration,
    to_session: Sender<SessionEvent>,
) -> anyhow::Result<Arc<RunControl>> {
    let (wake_tx, wake_rx) = mpsc::channel::<()>();
    let control = Arc::new(RunControl::for_replay(wake_tx));
    let thread_control = Arc::clone(&control);
    let replay = Arc::clone(replay);
    std::thread::Builder::new()
        .name("replay".into())
        .spawn(move || {
            let send =
                |message| to_session.send(SessionEvent::Send(Box::new(frame(true, message))));
            let started = AgentMessage::RunStarted {
                run_id,
                request: replay.request(),
            };
            if send(started).is_err() {
                return;
            }
            // The session forgets the run *before* the page reads how it ended: events
            // are handled in order, so a page that starts again as soon as it sees the
            // last message is never told "busy" by a run that has in fact ended.
            let end = || to_session.send(SessionEvent::RunEnded(run_id));
            let cancelled = || {
                let _ = end();
                send(AgentMessage::RunFailed {
                    run_id,
                    code: RunFailure::Cancelled,
                    message: "the replay was cancelled by the page".into(),
                })
            };
            let mut ended = false;
            for message in replay.messages(run_id) {
                // A cancellable pause: cancel() wakes this at once.
                let _ = wake_rx.recv_timeout(delay);
                if thread_control.is_cancelled() {
                    let _ = cancelled();
                    ended = true;
                    break;
                }
                if send(message).is_err() {
                    return; // the session is gone
                }
            }
            if !ended {
                let _ = wake_rx.recv_timeout(delay);
                if thread_control.is_cancelled() {
                    let _ = cancelled();
                } else {
                    let _ = end();
                    let text = AgentFrame::run_finished_json(
                        true,
                        unix_nanos(),
                        run_id,
                        !replay.file.any_failed(),
                        &replay.raw_json,
                    );
                    let _ = to_session.send(SessionEvent::SendText(text));
                }
            }
        })
        .context("starting the replay thread")?;
    Ok(control)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_are_refused_with_a_reason() {
        let cases = [
            ("not json", "not JSON"),
            (
                r#"{"schema":"gpumem.sheet/v1"}"#,
                "not a gpumem results file",
            ),
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", Replay::parse(text).err().expect(text));
            assert!(err.contains(expected), "{err}");
        }
    }
}
