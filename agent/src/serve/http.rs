//! The HTTP side of `serve`: reading one request head under strict bounds, and writing
//! the few answers the agent gives (static files, refusals, errors).
//!
//! The agent speaks just enough HTTP/1.1 for a browser to load the page and open the
//! WebSocket: one request per connection (`Connection: close`), GET and HEAD only. The
//! head is read in full before anything is decided, bounded in size
//! ([`MAX_HEAD_BYTES`]) and in *total* time ([`HEAD_DEADLINE`]) — a per-read timeout
//! alone would let a client that drips one byte a second hold a thread forever.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Largest request head accepted; browsers send well under 2 KiB to this origin.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;

/// Time a client has to send its whole request head, from accept.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(3);

/// Most headers parsed in one head.
const MAX_HEADERS: usize = 48;

/// A parsed request head.
#[derive(Debug)]
pub struct RequestHead {
    /// `GET`, `HEAD`, …
    pub method: String,
    /// The minor version of HTTP/1.x.
    pub minor_version: u8,
    /// The path, without the query.
    pub path: String,
    /// The query string after `?`, if any.
    pub query: Option<String>,
    /// Header names (lower case) and values, in order; values that are not UTF-8 are
    /// kept lossily (they will fail every check that reads them).
    pub headers: Vec<(String, String)>,
    /// Bytes read after the head (a WebSocket client may pipeline its first frame).
    pub leftover: Vec<u8>,
}

impl RequestHead {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// How many times header `name` appears; a duplicated `Host` or `Origin` is refused
    /// rather than guessed at.
    pub fn count(&self, name: &str) -> usize {
        self.headers.iter().filter(|(n, _)| n == name).count()
    }
}

/// Why no request head could be read.
#[derive(Debug)]
pub enum HeadError {
    /// The client closed before sending a complete head; nothing to answer.
    Closed,
    /// The head did not arrive within [`HEAD_DEADLINE`].
    Timeout,
    /// The head is larger than [`MAX_HEAD_BYTES`].
    TooLarge,
    /// The bytes are not an HTTP/1.x request head.
    Malformed(String),
    /// The socket failed; nothing can be answered.
    Failed,
}

/// Reads one request head from `stream`, within the size and time bounds.
pub fn read_head(stream: &mut TcpStream) -> Result<RequestHead, HeadError> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut buf = vec![0u8; MAX_HEAD_BYTES];
    let mut len = 0;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(HeadError::Timeout);
        }
        stream
            .set_read_timeout(Some(remaining))
            .map_err(|_| HeadError::Failed)?;
        let n = match stream.read(&mut buf[len..]) {
            Ok(0) => return Err(HeadError::Closed),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HeadError::Timeout);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Err(HeadError::Closed),
            Err(_) => return Err(HeadError::Failed),
        };
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(head_len)) => {
                let target = request.path.unwrap_or("/");
                let (path, query) = match target.split_once('?') {
                    Some((path, query)) => (path.to_owned(), Some(query.to_owned())),
                    None => (target.to_owned(), None),
                };
                return Ok(RequestHead {
                    method: request.method.unwrap_or("").to_owned(),
                    minor_version: request.version.unwrap_or(0),
                    path,
                    query,
                    headers: request
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_ascii_lowercase(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect(),
                    leftover: buf[head_len..len].to_vec(),
                });
            }
            Ok(httparse::Status::Partial) if len == MAX_HEAD_BYTES => {
                return Err(HeadError::TooLarge);
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
            Err(e) => return Err(HeadError::Malformed(e.to_string())),
        }
    }
}

/// Security headers sent with every answer: no framing (clickjacking), no MIME
/// sniffing, no referrer. The Content-Security-Policy is per answer (see [`respond`]).
const COMMON_HEADERS: &str = "X-Content-Type-Options: nosniff\r\n\
     X-Frame-Options: DENY\r\n\
     Referrer-Policy: no-referrer\r\n\
     Connection: close\r\n";

/// Writes a complete answer under `policy` (a Content-Security-Policy, sent as a header
/// with `frame-ancestors 'none'` appended) and flushes it. `body` is omitted for HEAD
/// requests by the caller passing `send_body = false`.
pub fn respond(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
    send_body: bool,
    policy: &str,
) -> io::Result<()> {
    let policy = policy.trim_end_matches([';', ' ']);
    let frame_ancestors = if policy.contains("frame-ancestors") {
        ""
    } else {
        "; frame-ancestors 'none'"
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\n\
         Cache-Control: no-cache\r\nContent-Security-Policy: {policy}{frame_ancestors}\r\n\
         {COMMON_HEADERS}\r\n",
        reason = reason_phrase(status),
        len = body.len(),
    );
    // One write for head and body: a client that reads the answer as soon as the head
    // arrives (tungstenite does, on a refused handshake) then sees the reason too.
    let mut answer = head.into_bytes();
    if send_body {
        answer.extend_from_slice(body);
    }
    stream.write_all(&answer)?;
    stream.flush()
}

/// Writes a short plain-text answer: a refusal or an error, with its reason.
pub fn respond_text(stream: &mut TcpStream, status: u16, reason: &str) -> io::Result<()> {
    let body = format!("{status} {}: {reason}\n", reason_phrase(status));
    respond(
        stream,
        status,
        "text/plain; charset=utf-8",
        body.as_bytes(),
        true,
        super::csp::STRICT,
    )
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        (client, server)
    }

    #[test]
    fn reads_a_head_split_across_writes_and_keeps_leftover() {
        let (mut client, mut server) = pair();
        let writer = std::thread::spawn(move || {
            client
                .write_all(b"GET /ws?token=abc HTTP/1.1\r\nHo")
                .expect("write");
            std::thread::sleep(Duration::from_millis(30));
            client
                .write_all(b"st: 127.0.0.1:1\r\nOrigin: x\r\n\r\nEXTRA")
                .expect("write");
            client
        });
        let head = read_head(&mut server).expect("head");
        assert_eq!(head.method, "GET");
        assert_eq!(head.path, "/ws");
        assert_eq!(head.query.as_deref(), Some("token=abc"));
        assert_eq!(head.header("host"), Some("127.0.0.1:1"));
        assert_eq!(head.leftover, b"EXTRA");
        drop(writer.join());
    }

    #[test]
    fn oversized_and_malformed_heads_are_refused() {
        let (mut client, mut server) = pair();
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(MAX_HEAD_BYTES));
        let writer = std::thread::spawn(move || {
            let _ = client.write_all(big.as_bytes());
            client
        });
        assert!(matches!(read_head(&mut server), Err(HeadError::TooLarge)));
        drop(writer.join());

        let (mut client, mut server) = pair();
        client
            .write_all(b"\x16\x03\x01 not http\r\n\r\n")
            .expect("write");
        assert!(matches!(
            read_head(&mut server),
            Err(HeadError::Malformed(_))
        ));
    }
}
