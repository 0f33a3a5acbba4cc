//! The probe channel: a unix socket in a private folder, one connection per process that
//! loaded the probe (every rank of a torchrun job), read on threads of their own.
//!
//! Everything is bounded because the other end is the user's program: line length
//! ([`MAX_LINE_BYTES`]), messages per connection, connections, and a per-connection
//! rate. Over a bound, lines are dropped and counted ([`ChannelStats::rejected`]); the
//! reader never allocates more than one line and never panics. The queue to the
//! collector holds at most [`EVENT_QUEUE`] messages (a reader waits when it is full),
//! the socket is made 0600, and closing drains what is queued for at most
//! [`DRAIN_LIMIT`]: a leftover process that keeps connecting cannot hold the agent.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::messages::{MAX_LINE_BYTES, ProbeMessage, parse_line};

/// Most connections accepted (a torchrun job on one node has a handful).
pub const MAX_CONNECTIONS: u64 = 256;
/// Most lines read on one connection.
pub const MAX_MESSAGES_PER_CONNECTION: u64 = super::messages::MAX_MESSAGES;
/// Most lines per second on one connection, sustained (a burst of the same size is fine).
pub const MAX_RATE_PER_SECOND: f64 = 2_000.0;
/// Messages waiting for the collector at most (each at most one line, 64 KiB): the
/// readers' memory does not grow with a collector that falls behind.
pub const EVENT_QUEUE: usize = 256;
/// After `close`, how long connections already queued are still accepted and read.
pub const DRAIN_LIMIT: Duration = Duration::from_millis(500);
/// Stack of each reader thread (the JSON parser's depth is bounded by serde_json's
/// recursion limit of 128).
const READER_STACK: usize = 1 << 20;

/// What the reader threads report.
#[derive(Debug)]
pub enum ChannelEvent {
    /// A connection was accepted.
    Connected(u64),
    /// A valid message on a connection, with its line's length in bytes.
    Message(u64, Box<ProbeMessage>, usize),
    /// A line was refused (too long, malformed, over a bound).
    Rejected,
    /// A connection was refused (too many).
    ConnectionRefused,
    /// A connection ended.
    Closed,
}

/// The listening side.
pub struct Channel {
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<UnixStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl Channel {
    /// Listens on `path` and reports to `events`.
    pub fn listen(path: &Path, events: SyncSender<ChannelEvent>) -> Result<Channel> {
        let listener =
            UnixListener::bind(path).with_context(|| format!("listening on {}", path.display()))?;
        // bind() takes the umask; the folder is private already, the socket is too.
        std::fs::set_permissions(
            path,
            std::os::unix::fs::PermissionsExt::from_mode(super::probe::FILE_MODE),
        )
        .with_context(|| format!("setting the mode of {}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let stop = Arc::clone(&stop);
            let streams = Arc::clone(&streams);
            std::thread::Builder::new()
                .name("probe-accept".into())
                .spawn(move || accept_loop(&listener, &stop, &streams, &events))
                .context("starting the probe channel")?
        };
        Ok(Channel {
            stop,
            streams,
            accept: Some(accept),
        })
    }

    /// Stops accepting and closes every connection (readers then see end of file).
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        if let Ok(streams) = self.streams.lock() {
            for s in streams.iter() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        if self.accept.is_some() {
            self.shutdown();
        }
    }
}

/// How long the accept loop sleeps when no connection is waiting.
const ACCEPT_POLL: std::time::Duration = std::time::Duration::from_millis(5);

/// Accepts until told to stop, then drains what is still queued: a process that connected,
/// wrote and exited just before the command ended is read and counted, not dropped. The
/// drain ends after [`DRAIN_LIMIT`] even when processes keep connecting.
fn accept_loop(
    listener: &UnixListener,
    stop: &AtomicBool,
    streams: &Mutex<Vec<UnixStream>>,
    events: &SyncSender<ChannelEvent>,
) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let mut next_id = 0u64;
    let mut draining_since: Option<Instant> = None;
    loop {
        if draining_since.is_none() && stop.load(Ordering::SeqCst) {
            draining_since = Some(Instant::now());
        }
        if draining_since.is_some_and(|t| t.elapsed() >= DRAIN_LIMIT) {
            break;
        }
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            // Nothing queued (or out of descriptors): stop once told to, else wait a little.
            Err(_) => {
                if draining_since.is_some() {
                    break;
                }
                std::thread::sleep(ACCEPT_POLL);
                continue;
            }
        };
        if next_id >= MAX_CONNECTIONS {
            let _ = events.send(ChannelEvent::ConnectionRefused);
            continue;
        }
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        let id = next_id;
        next_id += 1;
        if let (Ok(mut list), Ok(clone)) = (streams.lock(), stream.try_clone()) {
            list.push(clone);
        }
        let _ = events.send(ChannelEvent::Connected(id));
        let reader_events = events.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("probe-{id}"))
            .stack_size(READER_STACK)
            .spawn(move || {
                read_connection(&stream, |item| {
                    let event = match item {
                        Some(Ok((m, len))) => ChannelEvent::Message(id, Box::new(m), len),
                        _ => ChannelEvent::Rejected,
                    };
                    reader_events.send(event).is_ok()
                });
                // Past a bound the peer may still be writing: shut the socket (the clone
                // kept for `close` holds it open) so its writes fail instead of blocking.
                let _ = stream.shutdown(std::net::Shutdown::Both);
                let _ = reader_events.send(ChannelEvent::Closed);
            });
        if spawned.is_err() {
            // Never read: say it ended, so the wait for open connections does not hang.
            let _ = events.send(ChannelEvent::Closed);
        }
    }
}

/// A token bucket: at most `MAX_RATE_PER_SECOND` lines per second, bursts of as many.
struct Rate {
    tokens: f64,
    last: Instant,
}

impl Rate {
    fn new() -> Rate {
        Rate {
            tokens: MAX_RATE_PER_SECOND,
            last: Instant::now(),
        }
    }

    fn allow(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.last).as_secs_f64() * MAX_RATE_PER_SECOND;
        self.tokens = (self.tokens + refill).min(MAX_RATE_PER_SECOND);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Reads bounded lines from `source` and hands each to `on_item`: `Some(Ok((message,
/// line length)))`, `Some(Err(()))` for a refused line, `None` for a line over a bound.
/// Stops at end of file, on a read error, at the message bound, or when `on_item`
/// returns false.
pub fn read_connection<R: Read>(
    source: R,
    mut on_item: impl FnMut(Option<Result<(ProbeMessage, usize), ()>>) -> bool,
) {
    let mut reader = BufReader::with_capacity(16 * 1024, source);
    let mut line: Vec<u8> = Vec::new();
    let mut discarding = false;
    let mut count = 0u64;
    let mut rate = Rate::new();
    let mut deliver = |bytes: Option<&[u8]>, count: &mut u64, rate: &mut Rate| -> bool {
        *count += 1;
        if *count > MAX_MESSAGES_PER_CONNECTION {
            return false;
        }
        if !rate.allow() {
            return on_item(None);
        }
        match bytes {
            Some(b) => on_item(Some(parse_line(b).map(|m| (m, b.len())).map_err(|_| ()))),
            None => on_item(Some(Err(()))),
        }
    };
    loop {
        let available = match reader.fill_buf() {
            Ok([]) => break,
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        match available.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let go_on = if discarding || line.len() + i >= MAX_LINE_BYTES {
                    deliver(None, &mut count, &mut rate)
                } else {
                    line.extend_from_slice(&available[..i]);
                    deliver(Some(&line), &mut count, &mut rate)
                };
                line.clear();
                discarding = false;
                reader.consume(i + 1);
                if !go_on {
                    return;
                }
            }
            None => {
                let n = available.len();
                if !discarding {
                    if line.len() + n >= MAX_LINE_BYTES {
                        discarding = true;
                        line = Vec::new();
                    } else {
                        line.extend_from_slice(available);
                    }
                }
                reader.consume(n);
            }
        }
    }
    if discarding || !line.is_empty() {
        // A last line without its newline: refused (the probe always ends lines).
        deliver(None, &mut count, &mut rate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(input: &[u8]) -> (Vec<ProbeMessage>, usize) {
        let mut ok = Vec::new();
        let mut refused = 0;
        read_connection(input, |item| {
            match item {
                Some(Ok((m, _))) => ok.push(m),
                _ => refused += 1,
            }
            true
        });
        (ok, refused)
    }

    const BYE: &str = r#"{"v":1,"type":"bye","overhead_ns":5,"hook_calls":2,"instrumented_ns":9}"#;

    #[test]
    fn good_lines_pass_and_bad_ones_are_counted() {
        let input = format!("{BYE}\nnot json\n\n{{\"v\":1}}\n{BYE}\n");
        let (ok, refused) = collect(input.as_bytes());
        assert_eq!(ok.len(), 2);
        assert_eq!(refused, 3);
    }

    #[test]
    fn an_oversized_line_is_dropped_whole_and_reading_goes_on() {
        let mut input = vec![b'{'; MAX_LINE_BYTES * 3];
        input.push(b'\n');
        input.extend_from_slice(BYE.as_bytes());
        input.push(b'\n');
        let (ok, refused) = collect(&input);
        assert_eq!((ok.len(), refused), (1, 1));
        // Endless garbage without a newline: one refusal at the end, bounded memory.
        let (ok, refused) = collect(&vec![b'x'; MAX_LINE_BYTES * 4]);
        assert_eq!((ok.len(), refused), (0, 1));
    }

    #[test]
    fn a_flood_is_cut_at_the_bounds() {
        let input = format!("{BYE}\n").repeat(MAX_MESSAGES_PER_CONNECTION as usize + 500);
        let t0 = Instant::now();
        let (ok, refused) = collect(input.as_bytes());
        // The rate bound refuses what exceeds a burst plus the sustained rate over the
        // time the reading took, and nothing past the message bound is even looked at.
        let allowed = MAX_RATE_PER_SECOND * (1.0 + t0.elapsed().as_secs_f64()) + 1.0;
        assert!((ok.len() as f64) <= allowed, "{} > {allowed}", ok.len());
        assert!(ok.len() + refused <= MAX_MESSAGES_PER_CONNECTION as usize);
        assert!(refused > 0);
    }

    #[test]
    fn a_real_socket_reports_connections_messages_and_closes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("probe.sock");
        let (tx, rx) = std::sync::mpsc::sync_channel(EVENT_QUEUE);
        let channel = Channel::listen(&path, tx).expect("listen");
        {
            use std::io::Write;
            let mut s = UnixStream::connect(&path).expect("connect");
            writeln!(s, "{BYE}").expect("write");
            writeln!(s, "garbage").expect("write");
        }
        let mut seen = Vec::new();
        while let Ok(e) = rx.recv_timeout(std::time::Duration::from_secs(5)) {
            let closed = matches!(e, ChannelEvent::Closed);
            seen.push(e);
            if closed {
                break;
            }
        }
        channel.close();
        assert!(matches!(seen[0], ChannelEvent::Connected(0)));
        assert!(matches!(seen[1], ChannelEvent::Message(0, ..)));
        assert!(matches!(seen[2], ChannelEvent::Rejected));
        assert!(matches!(seen[3], ChannelEvent::Closed));
    }

    #[test]
    fn close_ends_while_leftover_processes_keep_connecting() {
        use std::sync::atomic::AtomicBool;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("probe.sock");
        let (tx, rx) = std::sync::mpsc::sync_channel(EVENT_QUEUE);
        let channel = Channel::listen(&path, tx).expect("listen");
        let consumer = std::thread::spawn(move || rx.into_iter().count());
        let stop = Arc::new(AtomicBool::new(false));
        let connector = {
            let (stop, path) = (Arc::clone(&stop), path.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(mut s) = UnixStream::connect(&path) {
                        use std::io::Write;
                        let _ = writeln!(s, "{BYE}");
                    }
                }
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let t0 = Instant::now();
        std::thread::spawn(move || {
            channel.close();
            let _ = done_tx.send(());
        });
        let ended = done_rx.recv_timeout(DRAIN_LIMIT * 10).is_ok();
        let took = t0.elapsed();
        stop.store(true, Ordering::SeqCst);
        connector.join().expect("connector");
        assert!(ended, "close still waiting after {took:?}");
        assert!(consumer.join().expect("consumer") > 0);
    }

    #[test]
    fn the_socket_is_0600_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("probe.sock");
        let (tx, _rx) = std::sync::mpsc::sync_channel(EVENT_QUEUE);
        let channel = Channel::listen(&path, tx).expect("listen");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        channel.close();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn connections_still_queued_at_close_are_read_and_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("probe.sock");
        let (tx, rx) = std::sync::mpsc::sync_channel(EVENT_QUEUE);
        let channel = Channel::listen(&path, tx).expect("listen");
        // Processes that connect, write and exit just before the command ends: closed at
        // once, so whatever is still queued must be drained, read, and counted.
        let total = MAX_CONNECTIONS + 20;
        for _ in 0..total {
            use std::io::Write;
            let mut s = UnixStream::connect(&path).expect("connect");
            writeln!(s, "{BYE}").expect("write");
        }
        // The collector runs beside the channel, as in `run` (the queue is bounded).
        let counter = std::thread::spawn(move || {
            let (mut connected, mut refused, mut messages) = (0u64, 0u64, 0u64);
            // Every sender is gone once the readers end: the loop ends by itself.
            for e in rx {
                match e {
                    ChannelEvent::Connected(_) => connected += 1,
                    ChannelEvent::ConnectionRefused => refused += 1,
                    ChannelEvent::Message(..) => messages += 1,
                    _ => {}
                }
            }
            (connected, refused, messages)
        });
        channel.close();
        let (connected, refused, messages) = counter.join().expect("counter");
        assert_eq!((connected, refused), (MAX_CONNECTIONS, 20));
        assert_eq!(messages, MAX_CONNECTIONS);
    }
}
