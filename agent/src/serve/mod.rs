//! `gpumem-agent serve`: serves the page and pairs with it over a local WebSocket.
//!
//! One port on 127.0.0.1 answers both plain HTTP GETs for the page's files and the
//! WebSocket at `/ws`. Every connection gets its own thread, bounded in number, and
//! the connection waiting longest for its head gives way to a newcomer when all are
//! taken ([`pending`]), so dripping connections cannot lock a page out; each
//! request head is read in full under size and time bounds ([`http`]) and passes the
//! security checks ([`security`]) before it is routed. A paired page then talks the
//! versioned protocol of `gpumem_proto::wire` ([`session`]); a measurement it asks for
//! runs as a child `gpumem-agent measure --events jsonl` process ([`runner`]), or, with
//! `--replay FILE`, a saved results file is pushed as if live ([`replay`]). A workload
//! (`gpumem-agent run --serve`, or `--replay` of a `gpumem.workload/v1` file) is pushed
//! to every paired page without being asked for ([`live`]).
//!
//! **Architecture Invariant:** the page can only ask for the built-in bounded
//! measurement: a `start_measure` carries dimensions, never a command, a path or a file
//! name, and the agent checks them against `MeasureLimits` before running anything.

mod assets;
mod content_type;
mod csp;
mod events;
mod http;
pub(crate) mod live;
mod pending;
mod replay;
mod runner;
mod security;
mod session;
mod tracer;

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use anyhow::Context;
use gpumem_proto::results::EnvironmentReport;
use gpumem_proto::wire::{AgentFrame, AgentMessage, MeasureLimits};

use crate::exit::Exit;

use self::assets::Assets;
use self::events::frame;
use self::http::{HeadError, RequestHead};
use self::pending::{MAX_PENDING, Pending, Ticket};
use self::replay::Replay;
use self::security::{OriginPolicy, Token};

/// Paired WebSocket sessions at once (each holds two threads).
const MAX_SESSIONS: usize = 64;

/// Longest `--replay-delay-ms`.
const MAX_REPLAY_DELAY_MS: u64 = 10_000;

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Port on 127.0.0.1 to listen on; 0 picks a free one (printed at start).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Another origin allowed to pair (a page hosted elsewhere), e.g.
    /// https://gpumem.example; repeatable. The agent's own origin is always allowed.
    #[arg(long = "allow-origin", value_name = "URL")]
    pub allow_origin: Vec<String>,
    /// Push this saved results file to paired pages instead of measuring (labelled
    /// *replay* everywhere); for demos and for machines without a GPU.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Pause between two replayed messages, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 150)]
    pub replay_delay_ms: u64,
    /// Do not try to open the pairing URL in a browser.
    #[arg(long)]
    pub no_open: bool,
    /// Serve the page from this directory instead of the copy embedded at build time
    /// (for page development: rebuild with trunk, reload, no agent rebuild).
    #[arg(long, value_name = "DIR")]
    pub dist: Option<PathBuf>,
    /// Python with torch and transformers that runs a paired page's "trace this
    /// workload" (on the CPU, no GPU needed) [default: python3]
    #[arg(long, value_name = "PATH")]
    pub python: Option<std::ffi::OsString>,
}

/// What a paired page gets when it asks for a measurement.
pub(crate) enum Mode {
    /// A child `gpumem-agent measure` process per run, on the GPU.
    Live,
    /// The saved file, pushed with a pause between messages.
    Replay {
        replay: Arc<Replay>,
        delay: Duration,
    },
    /// A workload, live or replayed, pushed to every paired page; nothing is measured on
    /// request.
    Workload(Arc<live::Feed>),
}

/// Everything the connection threads share.
pub(crate) struct State {
    pub token: Token,
    pub policy: OriginPolicy,
    pub assets: Assets,
    pub mode: Mode,
    pub limits: MeasureLimits,
    /// The live run in progress, if any: one GPU measurement at a time per agent.
    pub live_run: Mutex<Option<u64>>,
    pub next_run_id: AtomicU64,
    pub pending: Arc<Pending>,
    pub sessions: Arc<AtomicUsize>,
    pub environment: EnvironmentCell,
    /// A paired page's traces: one at a time per agent.
    pub tracer: Arc<tracer::Tracer>,
}

impl State {
    pub fn is_replay(&self) -> bool {
        match &self.mode {
            Mode::Live => false,
            Mode::Replay { .. } => true,
            Mode::Workload(feed) => feed.is_replay(),
        }
    }

    /// Wraps a message into a frame stamped now, marked replay in replay mode.
    pub fn frame(&self, message: AgentMessage) -> AgentFrame {
        frame(self.is_replay(), message)
    }
}

/// The environment report, filled in once (at start, by a background probe in live
/// mode; from the file in replay mode) and read by every session after hello.
pub(crate) struct EnvironmentCell {
    value: Mutex<Option<Result<EnvironmentReport, String>>>,
    ready: Condvar,
}

impl EnvironmentCell {
    fn new() -> EnvironmentCell {
        EnvironmentCell {
            value: Mutex::new(None),
            ready: Condvar::new(),
        }
    }

    pub fn set(&self, value: Result<EnvironmentReport, String>) {
        let mut guard = self.value.lock().unwrap_or_else(|p| p.into_inner());
        *guard = Some(value);
        self.ready.notify_all();
    }

    /// The report, waiting up to `wait` for the probe to finish; `None` if it has not.
    pub fn get(&self, wait: Duration) -> Option<Result<EnvironmentReport, String>> {
        let guard = self.value.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) = self
            .ready
            .wait_timeout_while(guard, wait, |v| v.is_none())
            .unwrap_or_else(|p| p.into_inner());
        guard.clone()
    }
}

/// Decrements a connection counter when the connection's thread ends, however it ends
/// (including a thread that never started: the closure holding the slot is dropped).
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// Takes a slot if fewer than `max` are taken.
    pub fn take(counter: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(Arc::clone(counter)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs `serve` until the process is stopped.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    // Validate everything before touching the network (parse, then act).
    if args.replay_delay_ms > MAX_REPLAY_DELAY_MS {
        anyhow::bail!("--replay-delay-ms must be at most {MAX_REPLAY_DELAY_MS}");
    }
    let extra_origins = args
        .allow_origin
        .iter()
        .map(|o| security::normalise_origin(o))
        .collect::<anyhow::Result<Vec<_>>>()
        .context("checking --allow-origin")?;
    // A workload document is told apart from a results file by its `schema` field.
    let workload = match &args.replay {
        Some(path) if live::is_workload_file(path).with_context(|| replay_error(path))? => {
            Some(live::WorkloadReplay::load(path).with_context(|| replay_error(path))?)
        }
        _ => None,
    };
    let replay = match &args.replay {
        Some(_) if workload.is_some() => None,
        Some(path) => {
            Some(Arc::new(Replay::load(path).with_context(|| {
                format!("cannot replay {}", path.display())
            })?))
        }
        None => None,
    };
    let assets = match &args.dist {
        Some(dir) => Assets::from_dir(dir)?,
        None => Assets::embedded(),
    };
    // The page's model lookup asks the agent's Hub (a mirror, or a test stand-in).
    let assets = match std::env::var("HF_ENDPOINT")
        .ok()
        .filter(|e| !e.trim().is_empty())
    {
        Some(endpoint) => assets.with_hub(&endpoint)?,
        None => assets,
    };
    let token = Token::generate()?;

    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, args.port)))
        .with_context(|| format!("cannot listen on 127.0.0.1:{}", args.port))?;
    let port = listener
        .local_addr()
        .context("reading the bound port")?
        .port();

    let environment = EnvironmentCell::new();
    let mode = match (replay, workload) {
        (_, Some(workload)) => {
            environment.set(Ok(workload.environment_report()));
            let feed = live::Feed::new(true);
            live::start_replay(
                workload,
                Arc::clone(&feed),
                Duration::from_millis(args.replay_delay_ms),
            )?;
            Mode::Workload(feed)
        }
        (Some(replay), None) => {
            environment.set(Ok(replay.environment_report()));
            Mode::Replay {
                replay,
                delay: Duration::from_millis(args.replay_delay_ms),
            }
        }
        (None, None) => Mode::Live,
    };
    let state = Arc::new(State {
        token,
        policy: OriginPolicy::new(port, &extra_origins),
        assets,
        mode,
        limits: MeasureLimits::DEFAULT,
        live_run: Mutex::new(None),
        next_run_id: AtomicU64::new(1),
        pending: Pending::new(MAX_PENDING),
        sessions: Arc::new(AtomicUsize::new(0)),
        environment,
        tracer: Arc::new(tracer::Tracer::new(
            args.python.clone().unwrap_or_else(|| "python3".into()),
        )),
    });
    if !state.is_replay() {
        let probe_state = Arc::clone(&state);
        std::thread::Builder::new()
            .name("environment-probe".into())
            .spawn(move || probe_state.environment.set(runner::probe_environment()))
            .context("starting the environment probe")?;
    }

    let url = format!("http://127.0.0.1:{port}/#token={}", state.token.as_str());
    print_banner(&state, &args, port, &url);
    if !args.no_open {
        open_browser(&url);
    }

    for connection in listener.incoming() {
        match connection {
            Ok(stream) => accept(&state, stream),
            Err(e) => {
                // Typically out of file descriptors: back off instead of spinning.
                crate::out::errln!("gpumem-agent serve: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    Ok(Exit::Ok)
}

fn replay_error(path: &std::path::Path) -> String {
    format!("cannot replay {}", path.display())
}

fn print_banner(state: &State, args: &Args, port: u16, url: &str) {
    let mode = match &args.replay {
        Some(path) => format!("REPLAY of {} (no GPU is used)", path.display()),
        None if crate::gpu::libraries().0 => "live measurements on this machine's GPU".to_owned(),
        // Say so at start-up rather than when the page's first run fails.
        None => "NO GPU here (no CUDA driver library, libcuda.so): live measurements will fail; \
                 use --replay FILE to show a saved result"
            .to_owned(),
    };
    let banner = format!(
        "gpumem-agent serve: listening on 127.0.0.1:{port} (loopback only)\n  mode: {mode}\n  \
         page: {}\n  allowed origins: {}\n\
         Open this URL to pair the page (it holds the secret token; do not share it):\n  {url}\n",
        state.assets.describe(),
        state.policy.allowed().join(", "),
    );
    // A closed stdout (e.g. piped into `head`) must not stop the server.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(banner.as_bytes());
    let _ = stdout.flush();
}

/// Opens the pairing URL in the desktop's browser; failing (no desktop, no opener) is
/// fine, the URL is printed. The opener is handed a private file that redirects to the
/// URL, not the URL itself: a command line is readable by every local user (`ps`), and
/// on a shared GPU machine the token must stay the paired user's.
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let page = format!(
        "<!doctype html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\">\
         <title>gpumem: pairing…</title><p><a href=\"{url}\">Open the gpumem page</a></p>\n"
    );
    // tempfile creates the file readable by its owner only.
    let Ok(mut file) = tempfile::Builder::new()
        .prefix("gpumem-pair-")
        .suffix(".html")
        .tempfile()
    else {
        return;
    };
    if file
        .write_all(page.as_bytes())
        .and_then(|()| file.flush())
        .is_err()
    {
        return;
    }
    let spawned = std::process::Command::new(opener)
        .arg(file.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Ok(mut child) = spawned {
        // Reap the opener, and delete the file once the browser has surely read it.
        let _ = std::thread::Builder::new()
            .name("opener".into())
            .spawn(move || {
                let _ = child.wait();
                std::thread::sleep(Duration::from_secs(60));
                drop(file);
            });
    }
}

/// Starts a thread for one connection (evicting the oldest head still being read when
/// every slot is taken, see [`pending`]), or refuses it at once if every slot is busy
/// answering.
fn accept(state: &Arc<State>, mut stream: TcpStream) {
    // Answers to stuck peers must not block the accept loop or a connection thread.
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let Some(slot) = state.pending.admit(&stream) else {
        let _ = stream.set_nonblocking(true);
        let _ = http::respond_text(
            &mut stream,
            503,
            "too many connections at once; retry shortly",
        );
        return;
    };
    let thread_state = Arc::clone(state);
    // If the thread cannot start, the closure is dropped with its stream and slot.
    let _ = std::thread::Builder::new()
        .name("connection".into())
        .spawn(move || handle_connection(&thread_state, stream, slot));
}

/// Reads the request head, checks it and routes it to a file or to the WebSocket.
fn handle_connection(state: &Arc<State>, mut stream: TcpStream, pending: Ticket) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let head = match http::read_head(&mut stream) {
        // Evicted while its head was complete but not yet marked: the socket is closed.
        Ok(_) if !pending.head_read() => return,
        Ok(head) => head,
        Err(HeadError::Closed) | Err(HeadError::Failed) => return,
        Err(HeadError::Timeout) => {
            let _ = http::respond_text(&mut stream, 408, "the request head did not arrive in time");
            return;
        }
        Err(HeadError::TooLarge) => {
            let _ = http::respond_text(&mut stream, 431, "the request head is too large");
            return;
        }
        Err(HeadError::Malformed(e)) => {
            let _ = http::respond_text(&mut stream, 400, &format!("not an HTTP request ({e})"));
            return;
        }
    };
    if let Err(refusal) = check_common(state, &head) {
        // Everything but the peer address comes from the client: escaped, so control
        // characters and bidirectional overrides cannot reach the terminal.
        crate::out::errln!(
            "gpumem-agent serve: refused {peer} {} {}: {}",
            escape_for_log(&head.method),
            escape_for_log(&head.path),
            escape_for_log(&refusal.0)
        );
        let _ = http::respond_text(&mut stream, 403, &refusal.0);
        return;
    }
    if head.path == "/ws" {
        if let Err(refusal) = state
            .policy
            .check_origin(head.header("origin"), true)
            .and_then(|()| security::check_token(&state.token, head.query.as_deref()))
        {
            crate::out::errln!(
                "gpumem-agent serve: refused WebSocket from {peer}: {}",
                escape_for_log(&refusal.0)
            );
            let _ = http::respond_text(&mut stream, 403, &refusal.0);
            return;
        }
        let Some(session_slot) = Slot::take(&state.sessions, MAX_SESSIONS) else {
            let _ = http::respond_text(&mut stream, 503, "too many paired pages at once");
            return;
        };
        // From here the connection counts as a session, not as pending.
        drop(pending);
        session::run(state, stream, head, &peer, session_slot);
        return;
    }
    serve_file(state, &mut stream, &head);
}

/// `text` with everything but printable ASCII escaped (`\\`, `\u{..}`): a log line
/// that names what a client sent must not carry terminal escapes, control characters
/// or bidirectional overrides (U+202E would make the line read backwards).
fn escape_for_log(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            _ => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
        }
    }
    out
}

/// Checks shared by every request: method, duplicated headers, Host and (when present)
/// Origin.
fn check_common(state: &State, head: &RequestHead) -> Result<(), security::Refusal> {
    if head.count("host") > 1 || head.count("origin") > 1 {
        return Err(security::Refusal("duplicated Host or Origin header".into()));
    }
    state.policy.check_host(head.header("host"))?;
    state.policy.check_origin(head.header("origin"), false)
}

fn serve_file(state: &State, stream: &mut TcpStream, head: &RequestHead) {
    let send_body = match head.method.as_str() {
        "GET" => true,
        "HEAD" => false,
        _ => {
            let _ = http::respond_text(stream, 405, "only GET and HEAD are served");
            return;
        }
    };
    match state.assets.get(&head.path) {
        Some((content_type, body)) => {
            let _ = http::respond(
                stream,
                200,
                content_type,
                body,
                send_body,
                state.assets.policy(),
            );
        }
        None => {
            let _ = http::respond_text(stream, 404, "no such file in the page");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::escape_for_log;

    #[test]
    fn log_escaping_keeps_printable_ascii_and_escapes_the_rest() {
        assert_eq!(escape_for_log("/a b?c=1"), "/a b?c=1");
        assert_eq!(
            escape_for_log("/\u{1b}[31mred\u{7}\u{202e}gpj.exe\\"),
            "/\\u{1b}[31mred\\u{7}\\u{202e}gpj.exe\\\\"
        );
        assert_eq!(escape_for_log("é\n"), "\\u{e9}\\u{a}");
    }
}
