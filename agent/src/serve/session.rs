//! One paired page: the WebSocket handshake, then the protocol of
//! `gpumem_proto::wire` until either side leaves.
//!
//! Threads: the session thread owns the WebSocket and does all its reading and writing;
//! a small *watcher* thread blocks in `peek` on a clone of the socket and, when bytes
//! arrive, posts [`SessionEvent::Readable`] to the session's channel — the same channel
//! that runs post outgoing frames to. So the session wakes the moment either happens:
//! pushes are not delayed by a read timeout (push latency is what the page shows live),
//! and reads do not wait behind pushes. While the session reads, the socket is switched
//! to non-blocking and the watcher waits for an acknowledgement, so the two never touch
//! the socket at the same time and a half-sent frame cannot stall the session.
//!
//! Bounds: message and frame size (tungstenite refuses larger ones before reading them),
//! messages per second, a deadline for `hello`, pings and an idle limit, a write timeout
//! for a page that stops reading. Any bad input gets an `error` message or a close frame
//! with its reason; nothing here panics on what the network sends.

use std::io::{self, Read};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use gpumem_proto::wire::{
    AgentFrame, AgentMessage, ClientMessage, ErrorCode, PROTOCOL_VERSION, RunFailure, check_version,
};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

use super::events::SessionEvent;
use super::http::{self, RequestHead};
use super::runner::{self, RunControl};
use super::{Mode, Slot, State, replay};

/// Largest message (and frame) accepted from a page; protocol messages are < 1 KiB.
pub const MAX_CLIENT_MESSAGE: usize = 64 * 1024;

/// Largest amount of outgoing data buffered for one slow page.
const MAX_WRITE_BUFFER: usize = 96 * 1024 * 1024;

/// A page must say hello within this time after connecting.
const HELLO_DEADLINE: Duration = Duration::from_secs(10);

/// The agent pings a quiet page this often (browsers answer pings by themselves)…
const PING_EVERY: Duration = Duration::from_secs(20);

/// …and gives up on one it has not heard from for this long.
const IDLE_LIMIT: Duration = Duration::from_secs(60);

/// A write that cannot complete in this time means the page stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Messages per second a page may send on average…
const RATE_PER_SECOND: f64 = 20.0;

/// …with bursts up to this many.
const RATE_BURST: f64 = 40.0;

/// A page that keeps sending after this many dropped messages in a row is closed.
const MAX_DROPPED_IN_A_ROW: u32 = 200;

/// Messages read per wake-up before the session turns to its other work.
const READ_BATCH: usize = 64;

/// Why the session ends, and the close frame to send, if any.
struct End(Option<CloseFrame>);

impl End {
    fn quietly() -> End {
        End(None)
    }

    fn with(code: CloseCode, reason: &str) -> End {
        End(Some(CloseFrame {
            code,
            reason: reason.to_owned().into(),
        }))
    }
}

/// Completes the WebSocket handshake for an already-checked request and runs the
/// session until it ends. `slot` is held for the session's whole life.
pub fn run(state: &Arc<State>, mut stream: TcpStream, head: RequestHead, peer: &str, slot: Slot) {
    if let Err(reason) = handshake(&mut stream, &head) {
        let _ = http::respond_text(&mut stream, 400, &reason);
        return;
    }
    let _ = stream.set_read_timeout(None);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    // Small frames must leave at once; Nagle's delay would show as push latency.
    let _ = stream.set_nodelay(true);
    let Ok(watched) = stream.try_clone() else {
        return;
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_CLIENT_MESSAGE))
        .max_frame_size(Some(MAX_CLIENT_MESSAGE))
        .max_write_buffer_size(MAX_WRITE_BUFFER);
    let ws = WebSocket::from_partially_read(stream, head.leftover, Role::Server, Some(config));

    let (events_tx, events_rx) = mpsc::channel();
    let (ack_tx, ack_rx) = mpsc::channel::<()>();
    let watcher_tx = events_tx.clone();
    if std::thread::Builder::new()
        .name("ws-watcher".into())
        .spawn(move || watch(&watched, &watcher_tx, &ack_rx))
        .is_err()
    {
        return;
    }
    let mut session = Session {
        state: Arc::clone(state),
        peer: peer.to_owned(),
        ws,
        events_tx,
        ack_tx,
        paired: false,
        run: None,
        connected: Instant::now(),
        last_heard: Instant::now(),
        last_ping: Instant::now(),
        bucket: RATE_BURST,
        bucket_at: Instant::now(),
        dropped_in_a_row: 0,
        told_rate_limited: None,
    };
    let end = session.serve(&events_rx);
    session.finish(end);
    drop(slot);
}

/// Validates the upgrade headers with tungstenite and writes the 101 answer.
fn handshake(stream: &mut TcpStream, head: &RequestHead) -> Result<(), String> {
    if head.method != "GET" || head.minor_version < 1 {
        return Err("a WebSocket handshake is a GET over HTTP/1.1".into());
    }
    let mut builder = tungstenite::http::Request::builder()
        .method("GET")
        .uri(head.path.as_str())
        .version(tungstenite::http::Version::HTTP_11);
    for (name, value) in &head.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let request = builder
        .body(())
        .map_err(|e| format!("unreadable WebSocket request: {e}"))?;
    let response = tungstenite::handshake::server::create_response(&request)
        .map_err(|e| format!("not a valid WebSocket handshake: {e}"))?;
    tungstenite::handshake::server::write_response(&mut *stream, &response)
        .map_err(|e| format!("writing the handshake answer: {e}"))
}

/// The watcher: blocks until the socket has bytes (or is closed), tells the session,
/// and waits for the session to have read them before looking again.
fn watch(stream: &TcpStream, events: &Sender<SessionEvent>, ack: &Receiver<()>) {
    let mut byte = [0u8; 1];
    loop {
        let open = matches!(stream.peek(&mut byte), Ok(n) if n > 0);
        if events.send(SessionEvent::Readable).is_err() || ack.recv().is_err() || !open {
            // Session gone, or the socket closed/failed: the session's read sees why.
            return;
        }
    }
}

struct Session {
    state: Arc<State>,
    /// The page's address, for the agent's log.
    peer: String,
    ws: WebSocket<TcpStream>,
    /// Handed to runs so they can post frames.
    events_tx: Sender<SessionEvent>,
    ack_tx: Sender<()>,
    paired: bool,
    run: Option<(u64, Arc<RunControl>)>,
    connected: Instant,
    last_heard: Instant,
    last_ping: Instant,
    bucket: f64,
    bucket_at: Instant,
    dropped_in_a_row: u32,
    told_rate_limited: Option<Instant>,
}

impl Session {
    fn serve(&mut self, events: &Receiver<SessionEvent>) -> End {
        loop {
            match events.recv_timeout(Duration::from_secs(1)) {
                Ok(SessionEvent::Send(frame)) => {
                    if let Err(end) = self.send(&frame) {
                        return end;
                    }
                }
                Ok(SessionEvent::SendText(text)) => {
                    if self.ws.send(Message::text(text)).is_err() {
                        return End::quietly();
                    }
                }
                Ok(SessionEvent::RunEnded(run_id)) => {
                    if self.run.as_ref().is_some_and(|(id, _)| *id == run_id) {
                        self.run = None;
                    }
                }
                Ok(SessionEvent::Readable) => {
                    let outcome = self.read_available();
                    // Let the watcher look again (it exits if the socket closed).
                    let _ = self.ack_tx.send(());
                    if let Err(end) = outcome {
                        return end;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(end) = self.tick() {
                        return end;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return End::quietly(),
            }
        }
    }

    /// Deadlines: hello, idle, pings.
    fn tick(&mut self) -> Result<(), End> {
        let now = Instant::now();
        if !self.paired && now.duration_since(self.connected) > HELLO_DEADLINE {
            return Err(End::with(CloseCode::Policy, "no hello within 10 s"));
        }
        if now.duration_since(self.last_heard) > IDLE_LIMIT {
            return Err(End::with(CloseCode::Away, "no answer to pings for 60 s"));
        }
        if now.duration_since(self.last_ping) > PING_EVERY {
            self.last_ping = now;
            self.ws
                .send(Message::Ping(Vec::new().into()))
                .map_err(|_| End::quietly())?;
        }
        Ok(())
    }

    /// Reads every complete message available now, without blocking, and handles them.
    fn read_available(&mut self) -> Result<(), End> {
        loop {
            let mut batch = Vec::new();
            let mut fatal = None;
            if self.ws.get_ref().set_nonblocking(true).is_err() {
                return Err(End::quietly());
            }
            while batch.len() < READ_BATCH {
                match self.ws.read() {
                    Ok(message) => batch.push(message),
                    Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                        break;
                    }
                    Err(e) => {
                        fatal = Some(end_for(e));
                        break;
                    }
                }
            }
            let full = batch.len() == READ_BATCH;
            if self.ws.get_ref().set_nonblocking(false).is_err() {
                return Err(End::quietly());
            }
            // Answers to pings (and to a close) queued while reading go out now.
            let _ = self.ws.flush();
            for message in batch {
                self.handle(message)?;
            }
            if let Some(end) = fatal {
                return Err(end);
            }
            if !full {
                return Ok(());
            }
        }
    }

    fn handle(&mut self, message: Message) -> Result<(), End> {
        self.last_heard = Instant::now();
        if let Message::Close(_) = message {
            return Err(End::quietly());
        }
        if !self.take_token()? {
            return Ok(());
        }
        match message {
            Message::Text(text) => self.handle_text(text.as_str()),
            Message::Binary(_) => self.error(
                ErrorCode::Binary,
                "binary messages are not part of the protocol; send JSON text",
            ),
            // tungstenite answers pings itself; pongs only prove the page is alive.
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) | Message::Close(_) => Ok(()),
        }
    }

    /// The per-connection rate limit: a token bucket. `Ok(false)` drops the message.
    fn take_token(&mut self) -> Result<bool, End> {
        let now = Instant::now();
        let elapsed = now.duration_since(self.bucket_at).as_secs_f64();
        self.bucket = (self.bucket + elapsed * RATE_PER_SECOND).min(RATE_BURST);
        self.bucket_at = now;
        if self.bucket >= 1.0 {
            self.bucket -= 1.0;
            self.dropped_in_a_row = 0;
            return Ok(true);
        }
        self.dropped_in_a_row += 1;
        if self.dropped_in_a_row > MAX_DROPPED_IN_A_ROW {
            return Err(End::with(CloseCode::Policy, "too many messages; slow down"));
        }
        // Say so at most once a second, so the refusals are not a flood of their own.
        if self
            .told_rate_limited
            .is_none_or(|t| now.duration_since(t) > Duration::from_secs(1))
        {
            self.told_rate_limited = Some(now);
            self.error(
                ErrorCode::RateLimited,
                &format!("more than {RATE_PER_SECOND} messages per second; messages were dropped"),
            )?;
        }
        Ok(false)
    }

    fn handle_text(&mut self, text: &str) -> Result<(), End> {
        let message = match ClientMessage::parse(text) {
            Ok(message) => message,
            Err(e) => return self.error(e.code, &e.message),
        };
        match message {
            ClientMessage::Hello { version, .. } => self.hello(version),
            _ if !self.paired => self.error(
                ErrorCode::HelloFirst,
                "send hello with the protocol version first",
            ),
            ClientMessage::Ping { nonce } => self.reply(AgentMessage::Pong { nonce }),
            ClientMessage::Cancel => match &self.run {
                Some((_, control)) => {
                    // The run itself reports run_failed (cancelled) when it has stopped.
                    control.cancel();
                    Ok(())
                }
                None => self.error(ErrorCode::NoRun, "there is no run in progress to cancel"),
            },
            ClientMessage::StartMeasure(request) => self.start(request),
            ClientMessage::TraceEstimate(request) => {
                super::tracer::start(&self.state.tracer, request, self.events_tx.clone());
                Ok(())
            }
        }
    }

    fn hello(&mut self, version: u32) -> Result<(), End> {
        if let Err(words) = check_version(version) {
            self.error(ErrorCode::VersionMismatch, &words)?;
            return Err(End::with(CloseCode::Policy, "protocol version mismatch"));
        }
        let first = !self.paired;
        if first {
            crate::out::errln!("gpumem-agent serve: paired with a page at {}", self.peer);
        }
        self.paired = true;
        self.reply(AgentMessage::Hello {
            version: PROTOCOL_VERSION,
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            limits: self.state.limits,
        })?;
        match self.state.environment.get(Duration::from_secs(3)) {
            Some(Ok(report)) => self.reply(AgentMessage::Environment { report }),
            Some(Err(reason)) => self.error(
                ErrorCode::Internal,
                &format!("the agent could not read its GPU environment: {reason}"),
            ),
            None => Ok(()),
        }?;
        // A workload is pushed, not asked for: the history, then each new message.
        if let (true, Mode::Workload(feed)) = (first, &self.state.mode) {
            feed.subscribe(self.events_tx.clone());
        }
        Ok(())
    }

    fn start(&mut self, request: gpumem_proto::wire::MeasureRequest) -> Result<(), End> {
        if let Some((run_id, _)) = &self.run {
            let words = format!("run {run_id} is still in progress on this page; cancel it first");
            return self.error(ErrorCode::Busy, &words);
        }
        if let Err(words) = request.validate(&self.state.limits) {
            return self.error(ErrorCode::OutOfBounds, &words);
        }
        let run_id = self
            .state
            .next_run_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let to_session = self.events_tx.clone();
        let started = match &self.state.mode {
            Mode::Replay { replay, delay } => replay::start(replay, run_id, *delay, to_session),
            Mode::Workload(_) => {
                return self.error(
                    ErrorCode::Busy,
                    "this agent shows a workload run (gpumem-agent run --serve, or a replayed \
                     workload file); it measures nothing on request",
                );
            }
            Mode::Live => {
                {
                    let mut live = self
                        .state
                        .live_run
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    if let Some(other) = *live {
                        drop(live);
                        let words = format!(
                            "the GPU is busy with run {other} for another page; one measurement runs at a time"
                        );
                        return self.error(ErrorCode::Busy, &words);
                    }
                    *live = Some(run_id);
                }
                let started = runner::start_live(&self.state, run_id, request, to_session);
                if started.is_err() {
                    let mut live = self
                        .state
                        .live_run
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    if *live == Some(run_id) {
                        *live = None;
                    }
                }
                started
            }
        };
        match started {
            Ok(control) => {
                self.run = Some((run_id, control));
                Ok(())
            }
            Err(e) => self.reply(AgentMessage::RunFailed {
                run_id,
                code: RunFailure::Crashed,
                message: format!("the agent could not start the run: {e:#}"),
            }),
        }
    }

    fn error(&mut self, code: ErrorCode, message: &str) -> Result<(), End> {
        self.reply(AgentMessage::Error {
            code,
            message: message.to_owned(),
        })
    }

    fn reply(&mut self, message: AgentMessage) -> Result<(), End> {
        let frame = self.state.frame(message);
        self.send(&frame)
    }

    fn send(&mut self, frame: &AgentFrame) -> Result<(), End> {
        self.ws
            .send(Message::text(frame.to_json()))
            .map_err(|_| End::quietly())
    }

    /// Stops this page's run, says goodbye with the reason, and closes the socket
    /// gently: draining what the page is still sending lets it read the close frame
    /// instead of a connection reset.
    fn finish(mut self, end: End) {
        if let Some((_, control)) = self.run.take() {
            control.cancel();
        }
        if let Some(frame) = end.0 {
            let _ = self.ws.close(Some(frame));
            let _ = self.ws.flush();
        }
        let stream = self.ws.get_mut();
        let _ = stream.set_nonblocking(false);
        let _ = stream.shutdown(Shutdown::Write);
        let _ = stream.set_read_timeout(Some(Duration::from_millis(250)));
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut sink = [0u8; 16 * 1024];
        let mut drained = 0usize;
        while Instant::now() < deadline && drained < 8 * 1024 * 1024 {
            match stream.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
        let _ = stream.shutdown(Shutdown::Both);
    }
}

/// The close frame for a read error: the reason in words where the page deserves one.
fn end_for(error: tungstenite::Error) -> End {
    match error {
        tungstenite::Error::Capacity(e) => End::with(
            CloseCode::Size,
            &format!("message too large (limit {MAX_CLIENT_MESSAGE} bytes): {e}"),
        ),
        tungstenite::Error::Protocol(e) => End::with(CloseCode::Protocol, &format!("{e}")),
        tungstenite::Error::Utf8(_) => End::with(CloseCode::Invalid, "text message is not UTF-8"),
        _ => End::quietly(),
    }
}
