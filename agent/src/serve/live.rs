//! Workload runs on the page: `gpumem-agent run --serve` (live) and `serve --replay` of a
//! `gpumem.workload/v1` file (replay) push a user's workload to every paired page.
//!
//! Unlike a measurement, a workload is not asked for by the page: the agent runs (or
//! replays) it whatever the page does, so its messages go into a [`Feed`] — a bounded
//! history plus the paired sessions — and a page that pairs late first receives the
//! history, then each new message as it happens. The listener, the request checks, the
//! token and the session code are `serve`'s own ([`super::accept`]): security is
//! unchanged, and a session in this mode refuses `start_measure`, so the page can start
//! nothing at all.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use gpumem_proto::results::{ENVIRONMENT_SCHEMA, EnvironmentReport, Fact, Status};
use gpumem_proto::wire::{AgentMessage, MeasureLimits};
use gpumem_proto::workload::{WORKLOAD_SCHEMA, WorkloadFile};
use serde_json::Value;

use super::assets::Assets;
use super::events::{SessionEvent, frame};
use super::pending::{MAX_PENDING, Pending};
use super::security::{OriginPolicy, Token};
use super::{EnvironmentCell, Mode, State};

/// The run id of the one workload an agent shows.
pub const WORKLOAD_RUN_ID: u64 = 1;

/// Most frames kept for pages that pair late; beyond it phases and samples are counted,
/// not kept (the final document, which holds them all, is always kept).
const MAX_HISTORY_FRAMES: usize = 20_000;

/// Most bytes of history kept, for the same reason.
const MAX_HISTORY_BYTES: usize = 64 * 1024 * 1024;

/// Largest workload file accepted for replay (the timeline bound makes a real one a few
/// tens of megabytes at most).
const MAX_WORKLOAD_BYTES: u64 = 256 * 1024 * 1024;

/// Samples per `workload_samples` message when a timeline is replayed.
const REPLAY_SAMPLES_PER_MESSAGE: usize = 500;

/// The workload's messages so far and the sessions to push new ones to.
pub struct Feed {
    replay: bool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    history: Vec<String>,
    history_bytes: usize,
    /// Frames not kept in the history (over its bounds).
    dropped: u64,
    subscribers: Vec<Sender<SessionEvent>>,
}

impl Feed {
    /// An empty feed; `replay` marks every frame it sends.
    pub fn new(replay: bool) -> Arc<Feed> {
        Arc::new(Feed {
            replay,
            inner: Mutex::new(Inner::default()),
        })
    }

    /// Whether the frames are marked replay.
    pub fn is_replay(&self) -> bool {
        self.replay
    }

    /// Stamps `message` now, keeps it for late pages and pushes it to every paired one.
    pub fn push(&self, message: AgentMessage) {
        let last = matches!(message, AgentMessage::WorkloadFinished { .. });
        let text = frame(self.replay, message).to_json();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .subscribers
            .retain(|s| s.send(SessionEvent::SendText(text.clone())).is_ok());
        let fits = inner.history.len() < MAX_HISTORY_FRAMES
            && inner.history_bytes.saturating_add(text.len()) <= MAX_HISTORY_BYTES;
        if fits || last {
            inner.history_bytes = inner.history_bytes.saturating_add(text.len());
            inner.history.push(text);
        } else {
            inner.dropped = inner.dropped.saturating_add(1);
        }
    }

    /// Sends the history to a newly paired session and pushes it what follows.
    pub fn subscribe(&self, to: Sender<SessionEvent>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for text in &inner.history {
            if to.send(SessionEvent::SendText(text.clone())).is_err() {
                return;
            }
        }
        inner.subscribers.push(to);
    }

    /// Paired sessions still listening.
    pub fn subscribers(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .subscribers
            .len()
    }
}

/// Whether a replay file is a workload document (by its `schema` field) rather than a
/// measurement results file.
pub fn is_workload_file(path: &Path) -> anyhow::Result<bool> {
    let size = std::fs::metadata(path).context("reading the file")?.len();
    if size > MAX_WORKLOAD_BYTES {
        bail!("the file is {size} bytes; a replayed file is at most {MAX_WORKLOAD_BYTES}");
    }
    let text = crate::private::read_to_string_bounded(path, MAX_WORKLOAD_BYTES)?;
    Ok(schema_of(&text).as_deref() == Some(WORKLOAD_SCHEMA))
}

fn schema_of(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Head {
        schema: Option<String>,
    }
    serde_json::from_str::<Head>(text).ok()?.schema
}

/// A workload file ready to replay.
pub struct WorkloadReplay {
    raw: Value,
    file: WorkloadFile,
}

impl WorkloadReplay {
    /// Reads and checks a workload file.
    pub fn load(path: &Path) -> anyhow::Result<WorkloadReplay> {
        let text = crate::private::read_to_string_bounded(path, MAX_WORKLOAD_BYTES)?;
        WorkloadReplay::parse(&text)
    }

    /// Checks a workload document given as text.
    pub fn parse(text: &str) -> anyhow::Result<WorkloadReplay> {
        let raw: Value = serde_json::from_str(text).context("the file is not JSON")?;
        let file: WorkloadFile = serde_json::from_value(raw.clone())
            .context("the file is not a gpumem workload file (gpumem.workload/v1)")?;
        file.check_schema()?;
        Ok(WorkloadReplay { raw, file })
    }

    /// The messages of the replayed workload, in order: started, every phase of every
    /// rank, the timeline in batches, finished.
    pub fn messages(&self) -> Vec<AgentMessage> {
        let run_id = WORKLOAD_RUN_ID;
        let f = &self.file;
        let mut out = vec![AgentMessage::WorkloadStarted {
            run_id,
            command: f.command.clone(),
            synthetic: f.synthetic,
            steps_instrumented: f.steps_instrumented,
        }];
        for (process, rank) in (0u64..).zip(&f.ranks) {
            for phase in &rank.phases {
                out.push(AgentMessage::WorkloadPhase {
                    run_id,
                    process,
                    rank: rank.rank,
                    phase: Box::new(phase.clone()),
                });
            }
        }
        for device in &f.timeline.devices {
            for chunk in device.samples.chunks(REPLAY_SAMPLES_PER_MESSAGE) {
                out.push(AgentMessage::WorkloadSamples {
                    run_id,
                    device: device.index,
                    samples: chunk.to_vec(),
                });
            }
        }
        // The page draws the histories' attribution; their events stay in the file.
        let mut result = self.raw.clone();
        gpumem_proto::workload::strip_history_events(&mut result);
        out.push(AgentMessage::WorkloadFinished {
            run_id,
            ok: f.outcome.status == Status::Ok,
            result,
        });
        out
    }

    /// An environment report for the page: a workload file records no device report,
    /// so every fact is unknown with the reason.
    pub fn environment_report(&self) -> EnvironmentReport {
        const NOT_RECORDED: &str = "replay: not recorded in the workload file";
        EnvironmentReport {
            schema: ENVIRONMENT_SCHEMA.to_owned(),
            agent_version: self.file.agent_version.clone(),
            os: NOT_RECORDED.to_owned(),
            cuda_driver_library: Fact::unknown(NOT_RECORDED),
            cublas_library: Fact::unknown(NOT_RECORDED),
            device_count: Fact::unknown(NOT_RECORDED),
            devices: Vec::new(),
            missing: Vec::new(),
        }
    }
}

/// The environment report `run --serve` sends: nothing probed, with the reason.
fn unprobed_environment() -> EnvironmentReport {
    const NOT_PROBED: &str = "not probed by run --serve (a probe would use the device beside \
                              the command); see the workload's own environment per rank";
    EnvironmentReport {
        schema: ENVIRONMENT_SCHEMA.to_owned(),
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        cuda_driver_library: Fact::unknown(NOT_PROBED),
        cublas_library: Fact::unknown(NOT_PROBED),
        device_count: Fact::unknown(NOT_PROBED),
        devices: Vec::new(),
        missing: Vec::new(),
    }
}

/// Pushes a replayed workload into `feed` on a thread of its own, `delay` apart.
pub fn start_replay(
    replay: WorkloadReplay,
    feed: Arc<Feed>,
    delay: Duration,
) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("workload-replay".into())
        .spawn(move || {
            for message in replay.messages() {
                std::thread::sleep(delay);
                feed.push(message);
            }
        })
        .context("starting the workload replay")?;
    Ok(())
}

/// The shared state of an agent showing a workload.
pub(super) fn state(
    port: u16,
    extra_origins: &[String],
    assets: Assets,
    feed: Arc<Feed>,
) -> anyhow::Result<Arc<State>> {
    Ok(Arc::new(State {
        token: Token::generate()?,
        policy: OriginPolicy::new(port, extra_origins),
        assets,
        mode: Mode::Workload(feed),
        limits: MeasureLimits::DEFAULT,
        live_run: Mutex::new(None),
        next_run_id: AtomicU64::new(WORKLOAD_RUN_ID + 1),
        pending: Pending::new(MAX_PENDING),
        sessions: Arc::new(AtomicUsize::new(0)),
        environment: EnvironmentCell::new(),
        tracer: Arc::new(super::tracer::Tracer::new("python3".into())),
    }))
}

/// Starts serving the page for `gpumem-agent run --serve` in the background: the same
/// listener, checks and sessions as `serve`, in workload mode. The banner goes to stderr
/// (stdout belongs to the command). Returns once the port is bound.
pub fn start_for_run(port: u16, no_open: bool, feed: Arc<Feed>) -> anyhow::Result<()> {
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        .with_context(|| format!("cannot listen on 127.0.0.1:{port}"))?;
    let port = listener
        .local_addr()
        .context("reading the bound port")?
        .port();
    let state = state(port, &[], Assets::embedded(), feed)?;
    // No `environment` child here (serve runs one): it would open a CUDA context on the
    // device beside the user's command, and the probe reports the command's own
    // environment anyway.
    state.environment.set(Ok(unprobed_environment()));
    let url = format!("http://127.0.0.1:{port}/#token={}", state.token.as_str());
    crate::out::errln!(
        "gpumem-agent run: serving the page on 127.0.0.1:{port} (loopback only); phases are \
         pushed as they happen\n  page: {}\nOpen this URL to pair the page (it holds the secret \
         token; do not share it):\n  {url}",
        state.assets.describe()
    );
    if !no_open {
        super::open_browser(&url);
    }
    let thread_state = Arc::clone(&state);
    std::thread::Builder::new()
        .name("run-serve".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                super::accept(&thread_state, stream);
            }
        })
        .context("starting the page server")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_fixtures_replay_every_phase_then_the_document() {
        let text = include_str!("../../../tests/fixtures/workloads/synthetic-train_adamw.json");
        let replay = WorkloadReplay::parse(text).expect("fixture reads");
        let messages = replay.messages();
        let phases = messages
            .iter()
            .filter(|m| matches!(m, AgentMessage::WorkloadPhase { .. }))
            .count();
        let expected: usize = replay.file.ranks.iter().map(|r| r.phases.len()).sum();
        assert!(expected > 0);
        assert_eq!(phases, expected);
        assert!(matches!(
            messages.first(),
            Some(AgentMessage::WorkloadStarted { .. })
        ));
        assert!(matches!(
            messages.last(),
            Some(AgentMessage::WorkloadFinished { .. })
        ));
        assert_eq!(schema_of(text).as_deref(), Some(WORKLOAD_SCHEMA));
        assert_eq!(schema_of("[1]"), None);
        assert!(WorkloadReplay::parse(r#"{"schema":"gpumem.workload/v9"}"#).is_err());
    }

    #[test]
    fn late_subscribers_get_the_history_and_then_new_frames() {
        let feed = Feed::new(true);
        feed.push(AgentMessage::Pong { nonce: 1 });
        let (tx, rx) = std::sync::mpsc::channel();
        feed.subscribe(tx);
        feed.push(AgentMessage::Pong { nonce: 2 });
        let texts: Vec<String> = rx
            .try_iter()
            .filter_map(|e| match e {
                SessionEvent::SendText(t) => Some(t),
                _ => None,
            })
            .collect();
        assert_eq!(texts.len(), 2);
        assert!(texts[0].contains("\"nonce\":1") && texts[1].contains("\"nonce\":2"));
        assert!(texts.iter().all(|t| t.contains("\"replay\":true")));
        assert_eq!(feed.subscribers(), 1);
    }

    #[test]
    fn the_history_is_bounded_but_keeps_the_final_document() {
        let feed = Feed::new(false);
        for nonce in 0..(MAX_HISTORY_FRAMES as u64 + 5) {
            feed.push(AgentMessage::Pong { nonce });
        }
        feed.push(AgentMessage::WorkloadFinished {
            run_id: WORKLOAD_RUN_ID,
            ok: true,
            result: Value::Null,
        });
        let (tx, rx) = std::sync::mpsc::channel();
        feed.subscribe(tx);
        let texts: Vec<String> = rx
            .try_iter()
            .filter_map(|e| match e {
                SessionEvent::SendText(t) => Some(t),
                _ => None,
            })
            .collect();
        assert_eq!(texts.len(), MAX_HISTORY_FRAMES + 1);
        assert!(
            texts
                .last()
                .is_some_and(|t| t.contains("workload_finished"))
        );
        let dropped = feed.inner.lock().map(|i| i.dropped).unwrap_or(0);
        assert_eq!(dropped, 5);
        // A session that went away is dropped from the subscribers at the next push.
        drop(rx);
        feed.push(AgentMessage::Pong { nonce: 0 });
        assert_eq!(feed.subscribers(), 0);
    }
}
