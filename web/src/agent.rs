//! The page's side of pairing, without I/O: where to connect (the pairing URL
//! the agent prints, or the one a user pastes), and what the page knows after each
//! message from the agent ([`Received::apply`]). The WebSocket itself lives in
//! [`crate::agent_panel`], which feeds every frame through here, so the whole protocol
//! logic is plain Rust, tested natively.
//!
//! **Invariant:** what was received is never thrown away by a disconnection: when the
//! agent goes away, runs in progress are marked interrupted and everything else stays.

pub use crate::run_state::RunState;
use gpumem_core::network::{self, NetworkSpec, PhasePrediction};
use gpumem_proto::results::{Dtype, EnvironmentReport, PhaseName, Status};
use gpumem_proto::sheet::{ObservationSource, ObservedPhase, ObservedRun};
use gpumem_proto::wire::{
    AgentFrame, AgentMessage, ErrorCode, MeasureLimits, MeasureRequest, TracedFigure,
};
use serde_json::Value;

/// Where to pair: the agent's `host:port` on loopback and its one-time token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairTarget {
    /// `127.0.0.1:PORT` or `localhost:PORT`.
    pub host: String,
    /// The token from the pairing URL's fragment.
    pub token: String,
}

impl PairTarget {
    /// The WebSocket address (the agent serves it on the same port as the page).
    pub fn ws_url(&self) -> String {
        format!("ws://{}/ws?token={}", self.host, self.token)
    }
}

/// A token as the agent prints it: ≥ 128 bits as hex or URL-safe base64 (≥ 22
/// characters), nothing that could break out of the query string.
fn valid_token(token: &str) -> bool {
    (22..=256).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The token in a URL fragment (`#token=…`, possibly among other `&` pairs).
pub fn token_from_fragment(fragment: &str) -> Option<String> {
    fragment
        .trim_start_matches('#')
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
        .filter(|t| valid_token(t))
        .map(str::to_owned)
}

/// Reads a pasted pairing URL (`http://127.0.0.1:PORT/#token=…`). The agent listens on
/// loopback only, so any other host is refused here with the reason.
pub fn parse_pairing_url(text: &str) -> Result<PairTarget, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("paste the URL that gpumem-agent serve printed".into());
    }
    let rest = match text.split_once("://") {
        Some(("http", rest)) => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "the agent serves plain http on loopback; this URL uses {scheme:?}"
            ));
        }
        None => text,
    };
    let (before, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let host = before.split(['/', '?']).next().unwrap_or_default();
    let (name, port) = host
        .rsplit_once(':')
        .ok_or_else(|| format!("{host:?} has no port; the pairing URL names one"))?;
    if name != "127.0.0.1" && name != "localhost" {
        return Err(format!(
            "{name:?} is not this machine: the agent listens on 127.0.0.1 only \
             (forward the port over SSH to pair with a remote GPU machine)"
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => {}
        _ => return Err(format!("{port:?} is not a port number")),
    }
    let token = token_from_fragment(fragment)
        .ok_or("the URL has no #token=… (copy the whole line the agent printed)")?;
    Ok(PairTarget {
        host: host.to_owned(),
        token,
    })
}

/// The state of the link with the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// No agent yet.
    NotPaired,
    /// The WebSocket is opening, or hello is on its way.
    Connecting {
        /// `host:port`.
        host: String,
    },
    /// The agent answered hello with our protocol version.
    Paired {
        /// `host:port`.
        host: String,
        /// `gpumem-agent`'s version.
        agent_version: String,
        /// The agent replays a saved file instead of measuring.
        replay: bool,
    },
    /// The agent speaks another protocol version (or refused us for another reason
    /// it could say in words).
    Refused {
        /// Why, in words.
        message: String,
    },
    /// The connection ended.
    Gone {
        /// Why, in words.
        message: String,
    },
}

impl Link {
    /// A short word for the state (CSS class and test hook).
    pub fn key(&self) -> &'static str {
        match self {
            Link::NotPaired => "not-paired",
            Link::Connecting { .. } => "connecting",
            Link::Paired { replay: false, .. } => "paired",
            Link::Paired { replay: true, .. } => "replay",
            Link::Refused { .. } => "refused",
            Link::Gone { .. } => "disconnected",
        }
    }

    /// The state in words, as the page shows it.
    pub fn describe(&self) -> String {
        match self {
            Link::NotPaired => "Not paired with an agent.".into(),
            Link::Connecting { host } => format!("Connecting to the agent at {host}…"),
            Link::Paired {
                host,
                agent_version,
                replay: false,
            } => format!("Paired to gpumem-agent v{agent_version} at {host}."),
            Link::Paired {
                host,
                agent_version,
                replay: true,
            } => format!(
                "Paired to gpumem-agent v{agent_version} at {host} in replay mode: it pushes a \
                 saved file, nothing is measured now."
            ),
            Link::Refused { message } => format!("The agent refused this page: {message}"),
            Link::Gone { message } => message.clone(),
        }
    }
}

/// One run as the page holds it: the sheet's view of it plus where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// The agent's id for it (`None` for an imported run).
    pub run_id: Option<u64>,
    /// Where it stands.
    pub state: RunState,
    /// Phases, raw results and outcome, exactly as the sheet will carry them.
    pub run: ObservedRun,
}

/// Everything the page received from the agent (or imported from a sheet).
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// The link's state.
    pub link: Link,
    /// The bounds from the agent's hello.
    pub limits: Option<MeasureLimits>,
    /// The agent's version, kept after it goes away (for the sheet's provenance).
    pub agent_version: Option<String>,
    /// The GPU environment the agent reported.
    pub environment: Option<EnvironmentReport>,
    /// The same, exactly as it arrived (the sheet attaches it unchanged).
    pub environment_raw: Option<Value>,
    /// Every run, oldest first.
    pub runs: Vec<RunRecord>,
    /// The user's workloads the agent pushed (`run --serve`, or a replayed workload
    /// file), oldest first.
    pub workloads: Vec<crate::workload::WorkloadRecord>,
    /// The agent's last complaint (`error` message), or a frame the page could not read.
    pub notice: Option<String>,
    /// The trace of the dimensioner's workload the page asked for.
    pub trace: TraceView,
}

/// The page's trace of the dimensioner's workload: asked (with the request's id), its
/// answer, or why there is none.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum TraceView {
    /// Not asked.
    #[default]
    None,
    /// Asked; the answer carries this id.
    Asked(u64),
    /// The agent's answer: the traced lines, the peak (allocated, reserved) and what
    /// was traced, in words (the fields of [`AgentMessage::Traced`]).
    Traced(Vec<TracedFigure>, u64, u64, String),
    /// Why there is no trace, in words.
    Failed(String),
}

impl Default for Received {
    fn default() -> Self {
        Received {
            link: Link::NotPaired,
            limits: None,
            agent_version: None,
            environment: None,
            environment_raw: None,
            runs: Vec::new(),
            workloads: Vec::new(),
            notice: None,
            trace: TraceView::None,
        }
    }
}

/// What the caller must do after [`Received::apply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// Nothing.
    Continue,
    /// Close the connection (the versions disagree).
    Close,
}

impl Received {
    /// Whether the agent replays a saved file.
    pub fn replay(&self) -> bool {
        matches!(self.link, Link::Paired { replay: true, .. })
    }

    /// Whether the paired agent can measure: `Some(false)` when its environment
    /// names what is missing (no GPU, no driver), `None` until it is known or when
    /// nothing is measured now (replay mode).
    pub fn can_measure(&self) -> Option<bool> {
        if !matches!(self.link, Link::Paired { replay: false, .. }) {
            return None;
        }
        self.environment.as_ref().map(|e| e.missing.is_empty())
    }

    /// The run in progress, if any.
    pub fn running(&self) -> Option<&RunRecord> {
        self.runs.iter().find(|r| r.state == RunState::Running)
    }

    fn run_mut(&mut self, run_id: u64) -> Option<&mut RunRecord> {
        self.runs.iter_mut().find(|r| r.run_id == Some(run_id))
    }

    /// Reads one text message from the agent with the proto's reader and takes it in;
    /// a message the page cannot read is kept as the notice, and changes nothing else.
    pub fn apply_text(&mut self, text: &str, host: &str) -> After {
        // From bytes, like every other JSON the page reads: one text reader in the wasm.
        let frame = serde_json::from_slice::<Value>(text.as_bytes())
            .map_err(|e| format!("the agent sent a message this page cannot read: {e}"))
            .and_then(|value| {
                // Kept as it came, before the typed reading takes it apart.
                let raw = (value["type"] == "environment").then(|| value["report"].clone());
                // Per-device messages are not shown: recognised, not read (None).
                AgentFrame::from_value_shown(value)
                    .map(|f| (f, raw))
                    .map_err(|e| e.message)
            });
        match frame {
            Ok((None, _)) => After::Continue,
            Ok((Some(frame), raw)) => {
                if raw.is_some() {
                    self.environment_raw = raw;
                }
                self.apply(frame, host)
            }
            Err(e) => {
                self.notice = Some(e);
                After::Continue
            }
        }
    }

    /// Takes one frame from the agent into the page's state.
    pub fn apply(&mut self, frame: AgentFrame, host: &str) -> After {
        let source = if frame.replay {
            ObservationSource::Replay
        } else {
            ObservationSource::Live
        };
        match frame.message {
            AgentMessage::Hello {
                version,
                agent_version,
                limits,
            } => {
                if let Err(words) = gpumem_proto::wire::check_version(version) {
                    self.link = Link::Refused { message: words };
                    return After::Close;
                }
                self.link = Link::Paired {
                    host: host.to_owned(),
                    agent_version: agent_version.clone(),
                    replay: frame.replay,
                };
                self.agent_version = Some(agent_version);
                self.limits = Some(limits);
                self.notice = None;
            }
            AgentMessage::Environment { report } => self.environment = Some(report),
            AgentMessage::RunStarted { run_id, request } => {
                self.notice = None;
                self.runs.push(RunRecord {
                    run_id: Some(run_id),
                    state: RunState::Running,
                    run: ObservedRun {
                        source,
                        workload: None,
                        request,
                        phases: Vec::new(),
                        ok: false,
                        raw: None,
                        failure: None,
                    },
                });
            }
            AgentMessage::Phase {
                run_id,
                device,
                result,
            } => {
                if let Some(r) = self.run_mut(run_id) {
                    r.run
                        .phases
                        .push(ObservedPhase::from_result(&device, &result));
                }
            }
            AgentMessage::RunFinished { run_id, ok, result } => {
                if let Some(r) = self.run_mut(run_id) {
                    r.state = RunState::Finished;
                    // A sheet marks a run ok only when no phase it holds failed.
                    r.run.ok = ok && r.run.phases.iter().all(|p| p.status == Status::Ok);
                    r.run.raw = Some(result);
                }
            }
            AgentMessage::RunFailed {
                run_id, message, ..
            } => {
                if let Some(r) = self.run_mut(run_id) {
                    r.state = RunState::Failed;
                    r.run.ok = false;
                    r.run.failure = Some(message);
                }
            }
            AgentMessage::Error { code, message } => {
                if code == ErrorCode::VersionMismatch {
                    self.link = Link::Refused { message };
                    return After::Close;
                }
                self.notice = Some(message);
            }
            message @ (AgentMessage::WorkloadStarted { .. }
            | AgentMessage::WorkloadPhase { .. }
            | AgentMessage::WorkloadSamples { .. }
            | AgentMessage::WorkloadFinished { .. }) => {
                crate::workload::apply(&mut self.workloads, source, message);
            }
            // Only the answer to the request in flight counts (an older one is stale).
            AgentMessage::Traced { id, .. } | AgentMessage::TraceFailed { id, .. } if !matches!(self.trace, TraceView::Asked(a) if a == id) =>
                {}
            AgentMessage::Traced {
                lines,
                peak_allocated_bytes,
                peak_reserved_bytes,
                detail,
                ..
            } => {
                self.trace =
                    TraceView::Traced(lines, peak_allocated_bytes, peak_reserved_bytes, detail);
            }
            AgentMessage::TraceFailed { message, .. } => self.trace = TraceView::Failed(message),
            AgentMessage::DeviceStarted { .. }
            | AgentMessage::DeviceFinished { .. }
            | AgentMessage::Pong { .. } => {}
        }
        After::Continue
    }

    /// The connection closed. A page that was paired says the agent went away and keeps
    /// everything; runs in progress become interrupted (with the reason, for the sheet).
    pub fn went_away(&mut self, detail: &str) {
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!(" ({detail})")
        };
        self.link = match &self.link {
            Link::Paired { .. } => Link::Gone {
                message: format!(
                    "Disconnected: the agent went away{detail}; everything received is kept."
                ),
            },
            Link::Connecting { host } => Link::Gone {
                message: format!(
                    "Could not pair with {host}{detail}: the agent is not running there, the \
                     token is not the one it printed, or this page's origin is not allowed \
                     (start it with --allow-origin)."
                ),
            },
            other => other.clone(),
        };
        crate::workload::went_away(&mut self.workloads);
        if matches!(self.trace, TraceView::Asked(_)) {
            self.trace = TraceView::Failed("the agent went away before the trace ended".into());
        }
        for r in &mut self.runs {
            if r.state == RunState::Running {
                r.state = RunState::Interrupted;
                r.run.failure = Some(format!(
                    "interrupted: the agent went away after {} phase(s); no results document",
                    r.run.phases.len()
                ));
            }
        }
    }
}

/// The network the agent measures, as gpumem-core describes it.
pub fn network_spec(request: &MeasureRequest) -> NetworkSpec {
    NetworkSpec {
        batch: request.batch,
        context: request.context,
        width: request.width,
        layers: request.layers,
        dtype: match request.dtype {
            Dtype::Float32 => network::Dtype::Float32,
            Dtype::Float16 => network::Dtype::Float16,
            Dtype::Bfloat16 => network::Dtype::Bfloat16,
        },
    }
}

/// gpumem-core's prediction for the requested network, one entry per phase
/// name; `None` when the dimensions do not compute (overflow).
pub fn predictions(request: &MeasureRequest) -> Option<Vec<PhasePrediction>> {
    let warmup = u32::try_from(request.warmup).ok()?;
    network::predict(&network_spec(request), warmup).ok()
}

/// The prediction for one observed phase.
pub fn prediction_for(predicted: &[PhasePrediction], phase: PhaseName) -> Option<PhasePrediction> {
    let want = match phase {
        PhaseName::ModelLoad => network::Phase::ModelLoad,
        PhaseName::Inputs => network::Phase::Inputs,
        PhaseName::ColdForward => network::Phase::ColdForward,
        PhaseName::Warmup => network::Phase::Warmup,
        PhaseName::WarmForward => network::Phase::WarmForward,
    };
    predicted.iter().find(|p| p.phase == want).copied()
}

/// Device memory outside the pool, as observed: the device-level figure minus the pool's
/// reserved bytes read at the *same* checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overhead {
    /// The largest such difference over every checkpoint of the run.
    pub bytes: u64,
    /// Where it was read.
    pub phase: PhaseName,
    /// `"start"` or `"end"`.
    pub checkpoint: &'static str,
    /// `true` when the figure is this process's (NVML); `false` when it is the whole
    /// device's (cuMemGetInfo: other processes included).
    pub per_process: bool,
}

/// The observed CUDA context / non-pool overhead of a run: at each checkpoint
/// (start and end of every phase), device memory used minus pool reserved, both read
/// there; the largest is what a reserve must at least hold. This process's figure
/// (NVML) is preferred; the whole device's (cuMemGetInfo) is used where NVML is absent.
pub fn observed_overhead(phases: &[ObservedPhase]) -> Option<Overhead> {
    let mut best: Option<Overhead> = None;
    for p in phases {
        let d = &p.device_level;
        let checkpoints = [
            (
                "start",
                p.pool.reserved_start_bytes,
                d.process_used_start_bytes,
                d.used_start_bytes,
            ),
            (
                "end",
                p.pool.reserved_end_bytes,
                d.process_used_end_bytes,
                d.used_end_bytes,
            ),
        ];
        for (checkpoint, reserved, process, device) in checkpoints {
            let Some(reserved) = reserved else { continue };
            let (used, per_process) = match (process, device) {
                (Some(p), _) => (p, true),
                (None, Some(d)) => (d, false),
                (None, None) => continue,
            };
            let Some(bytes) = used.checked_sub(reserved) else {
                continue;
            };
            if best.is_none_or(|b| bytes > b.bytes) {
                best = Some(Overhead {
                    bytes,
                    phase: p.phase,
                    checkpoint,
                    per_process,
                });
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumem_proto::results::{DeviceLevel, PoolCounters};
    use gpumem_proto::wire::PROTOCOL_VERSION;

    const TOKEN: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    /// Only the answer to the trace in flight is taken; a stale one changes nothing,
    /// and an agent that goes away mid-trace leaves words, not a spinner.
    #[test]
    fn a_trace_answer_is_taken_only_for_the_request_in_flight() {
        let frame = |message| AgentFrame {
            replay: false,
            sent_unix_ns: 1,
            message,
        };
        let traced = |id| AgentMessage::Traced {
            id,
            lines: Vec::new(),
            peak_allocated_bytes: 1,
            peak_reserved_bytes: 2,
            detail: "traced llama".into(),
        };
        let mut r = Received::default();
        r.apply(frame(traced(1)), "h");
        assert_eq!(r.trace, TraceView::None);
        r.trace = TraceView::Asked(2);
        r.apply(frame(traced(1)), "h");
        assert_eq!(r.trace, TraceView::Asked(2));
        r.apply(frame(traced(2)), "h");
        assert_eq!(
            r.trace,
            TraceView::Traced(Vec::new(), 1, 2, "traced llama".into())
        );
        r.trace = TraceView::Asked(3);
        r.apply(
            frame(AgentMessage::TraceFailed {
                id: 3,
                code: gpumem_proto::wire::TraceFailure::Unavailable,
                message: "pip install torch".into(),
            }),
            "h",
        );
        assert_eq!(r.trace, TraceView::Failed("pip install torch".into()));
        r.trace = TraceView::Asked(4);
        r.went_away("");
        assert!(matches!(r.trace, TraceView::Failed(ref w) if w.contains("went away")));
    }

    #[test]
    fn pairing_urls_are_read_or_refused_in_words() {
        let t = parse_pairing_url(&format!("http://127.0.0.1:8765/#token={TOKEN}")).unwrap();
        assert_eq!(t.host, "127.0.0.1:8765");
        assert_eq!(t.ws_url(), format!("ws://127.0.0.1:8765/ws?token={TOKEN}"));
        assert!(parse_pairing_url(&format!(" localhost:9/#token={TOKEN} ")).is_ok());
        for (bad, why) in [
            ("", "paste"),
            (&format!("https://127.0.0.1:1/#token={TOKEN}"), "plain http"),
            (
                &format!("http://evil.example:80/#token={TOKEN}"),
                "not this machine",
            ),
            (&format!("http://127.0.0.1/#token={TOKEN}"), "no port"),
            (&format!("http://127.0.0.1:0/#token={TOKEN}"), "port number"),
            ("http://127.0.0.1:80/", "no #token"),
            ("http://127.0.0.1:80/#token=short", "no #token"),
            (
                "http://127.0.0.1:80/#token=aaaaaaaaaaaaaaaaaaaaaaaa%3C",
                "no #token",
            ),
        ] {
            let err = parse_pairing_url(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert_eq!(
            token_from_fragment(&format!("#a=1&token={TOKEN}")),
            Some(TOKEN.into())
        );
        assert_eq!(token_from_fragment("#token=<script>"), None);
    }

    fn frame(replay: bool, message: AgentMessage) -> AgentFrame {
        AgentFrame {
            replay,
            sent_unix_ns: 0,
            message,
        }
    }

    #[test]
    fn a_version_mismatch_is_refused_in_words_and_closes() {
        let mut r = Received::default();
        let after = r.apply(
            frame(
                false,
                AgentMessage::Hello {
                    version: PROTOCOL_VERSION + 1,
                    agent_version: "9".into(),
                    limits: MeasureLimits::DEFAULT,
                },
            ),
            "h",
        );
        assert_eq!(after, After::Close);
        assert!(r.link.describe().contains("version mismatch"));
    }

    #[test]
    fn phases_accumulate_and_survive_the_agent_going_away() {
        let mut r = Received {
            link: Link::Connecting { host: "h".into() },
            ..Received::default()
        };
        r.apply(
            frame(
                true,
                AgentMessage::Hello {
                    version: PROTOCOL_VERSION,
                    agent_version: "0.1.0".into(),
                    limits: MeasureLimits::DEFAULT,
                },
            ),
            "h",
        );
        assert!(r.replay());
        r.apply(
            frame(
                true,
                AgentMessage::RunStarted {
                    run_id: 4,
                    request: MeasureRequest::SEED_EXAMPLE,
                },
            ),
            "h",
        );
        assert_eq!(
            r.running().map(|x| x.run.source),
            Some(ObservationSource::Replay)
        );
        r.went_away("");
        assert!(matches!(&r.link, Link::Gone { message } if message.contains("went away")));
        assert_eq!(r.runs[0].state, RunState::Interrupted);
        assert!(r.runs[0].run.failure.is_some());
        assert_eq!(r.agent_version.as_deref(), Some("0.1.0"));
    }

    #[test]
    fn overhead_is_read_at_one_checkpoint_never_across_peaks() {
        let phase = |reserved_start, used_start, reserved_end, used_end| ObservedPhase {
            device: "cuda:0".into(),
            phase: PhaseName::Inputs,
            repeat: None,
            status: Status::Ok,
            error: None,
            pool: PoolCounters {
                reserved_start_bytes: Some(reserved_start),
                reserved_end_bytes: Some(reserved_end),
                // A huge peak must not enter the figure.
                reserved_peak_bytes: Some(u64::MAX / 2),
                ..PoolCounters::default()
            },
            device_level: DeviceLevel {
                used_start_bytes: Some(used_start),
                used_end_bytes: Some(used_end),
                ..DeviceLevel::default()
            },
        };
        let o = observed_overhead(&[phase(0, 500, 100, 650), phase(100, 640, 200, 700)]).unwrap();
        assert_eq!((o.bytes, o.checkpoint, o.per_process), (550, "end", false));
        assert_eq!(observed_overhead(&[]), None);
    }

    #[test]
    fn predictions_are_gpumem_cores() {
        let p = predictions(&MeasureRequest::SEED_EXAMPLE).unwrap();
        let warm = prediction_for(&p, PhaseName::WarmForward).unwrap();
        // The default test dimensions, four float32 layers: M + 4A (network.rs, by hand).
        assert_eq!(warm.peak.get(), 20_987_904);
    }
}
