//! Shared helpers for the `serve_*` tests: start the real `gpumem-agent serve` binary on
//! a free loopback port, read its pairing URL, and talk to it over real sockets — raw
//! HTTP for the refusals, tungstenite as the WebSocket client.
//!
//! Every helper is bounded in time; a test never waits on the agent forever.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpumem_proto::results::ResultsFile;
use gpumem_proto::wire::{AgentFrame, ClientMessage, PROTOCOL_VERSION};
use tungstenite::client::IntoClientRequest;
use tungstenite::http::HeaderValue;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

/// A WebSocket client connected to the agent.
pub type Client = WebSocket<MaybeTlsStream<TcpStream>>;

/// A running `gpumem-agent serve`; killed when dropped.
pub struct Agent {
    child: Child,
    /// The port it listens on.
    pub port: u16,
    /// The pairing token from its URL.
    pub token: String,
    /// Its standard error, collected in the background.
    stderr: mpsc::Receiver<String>,
}

impl Agent {
    /// Starts `gpumem-agent serve --port 0 --no-open` with `extra` arguments and waits for
    /// the pairing URL.
    pub fn start(extra: &[&str]) -> Agent {
        Agent::start_with(extra, false)
    }

    /// Like [`Agent::start`], but both of the agent's output pipes are closed as soon as
    /// the pairing URL is read (`gpumem-agent serve 2>&1 | head`, or a service manager
    /// that closed the log): every later line it prints meets a closed pipe.
    pub fn start_with_closed_output(extra: &[&str]) -> Agent {
        Agent::start_with(extra, true)
    }

    fn start_with(extra: &[&str], close_output: bool) -> Agent {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
            .args(["serve", "--port", "0", "--no-open"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpumem-agent serve");
        let stdout = child.stdout.take().expect("stdout piped");
        let stderr = child.stderr.take().expect("stderr piped");
        let (url_tx, url_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(at) = line
                    .find("http://127.0.0.1:")
                    .filter(|_| line.contains("/#token="))
                {
                    let url = line[at..].trim().to_owned();
                    if close_output {
                        // Close the pipe's read end before the test goes on.
                        drop(lines);
                        let _ = url_tx.send(url);
                        return;
                    }
                    let _ = url_tx.send(url);
                }
            }
        });
        let (err_tx, err_rx) = mpsc::channel();
        if close_output {
            drop(stderr);
        } else {
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let _ = err_tx.send(line);
                }
            });
        }
        let url = match url_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                let errors: Vec<String> = err_rx.try_iter().collect();
                panic!("the agent printed no pairing URL; stderr: {errors:?}");
            }
        };
        let (address, token) = url
            .strip_prefix("http://127.0.0.1:")
            .and_then(|rest| rest.split_once("/#token="))
            .expect("URL of the form http://127.0.0.1:PORT/#token=TOKEN");
        let port = address.parse().expect("numeric port");
        Agent {
            child,
            port,
            token: token.to_owned(),
            stderr: err_rx,
        }
    }

    /// `Origin` of the agent's own page.
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `Host` naming the agent.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Everything the agent wrote to stderr so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.try_iter().collect()
    }

    /// Opens a paired, hello'd client with the right token, Host and Origin, and returns
    /// it with the agent's `hello` frame.
    pub fn paired_client(&self) -> (Client, AgentFrame) {
        let mut client = self
            .connect(&format!("token={}", self.token), Some(&self.origin()), None)
            .unwrap_or_else(|(status, body)| panic!("good client refused: {status} {body}"));
        send(
            &mut client,
            &ClientMessage::Hello {
                version: PROTOCOL_VERSION,
                client: Some("test".into()),
            },
        );
        let hello = recv_frame(&mut client).expect("agent hello");
        (client, hello)
    }

    /// A WebSocket connection attempt to `/ws?<query>` with the given `Origin` (none if
    /// `None`) and `Host` (the agent's own if `None`). A refusal comes back as status and
    /// body.
    pub fn connect(
        &self,
        query: &str,
        origin: Option<&str>,
        host: Option<&str>,
    ) -> Result<Client, (u16, String)> {
        let url = format!("ws://127.0.0.1:{}/ws?{query}", self.port);
        let mut request = url.into_client_request().expect("valid URL");
        let headers = request.headers_mut();
        headers.remove("origin");
        if let Some(origin) = origin {
            headers.insert(
                "origin",
                HeaderValue::from_str(origin).expect("header value"),
            );
        }
        if let Some(host) = host {
            headers.insert("host", HeaderValue::from_str(host).expect("header value"));
        }
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        match tungstenite::client::client(request, MaybeTlsStream::Plain(stream)) {
            Ok((client, _)) => Ok(client),
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
                let body = response
                    .body()
                    .as_deref()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                Err((response.status().as_u16(), body.into_owned()))
            }
            Err(e) => Err((0, format!("{e}"))),
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends a raw HTTP request and returns the status code and the whole answer.
pub fn raw_http(port: u16, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request).expect("write request");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// Sends one protocol message.
pub fn send(client: &mut Client, message: &ClientMessage) {
    client.send(Message::text(message.to_json())).expect("send");
}

/// Sends raw text.
pub fn send_text(client: &mut Client, text: &str) {
    client.send(Message::text(text.to_owned())).expect("send");
}

/// Receives the next protocol frame (skipping pings), or `None` if the connection
/// ended. Panics on a frame that does not parse: the agent must only send valid ones.
pub fn recv_frame(client: &mut Client) -> Option<AgentFrame> {
    let (text, _) = recv_text_at(client)?;
    let frame = AgentFrame::parse(&text)
        .unwrap_or_else(|e| panic!("agent sent an unreadable frame: {e}: {text}"));
    Some(frame)
}

/// The next text message and the wall-clock time (Unix ns) it was read, unparsed.
pub fn recv_text_at(client: &mut Client) -> Option<(String, u64)> {
    loop {
        match client.read() {
            Ok(Message::Text(text)) => return Some((text.as_str().to_owned(), unix_nanos())),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Reads until the connection closes and returns the close code and reason, if the
/// agent sent a close frame.
pub fn recv_close(client: &mut Client) -> Option<(u16, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match client.read() {
            Ok(Message::Close(Some(frame))) => {
                return Some((u16::from(frame.code), frame.reason.to_string()));
            }
            Ok(Message::Close(None)) => return Some((1005, String::new())),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// Wall-clock nanoseconds since the Unix epoch.
pub fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The repository's replayable results file (seed dimensions; synthetic until a real
/// GPU recording replaces it — the tests read their expectations from it either way).
pub fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/measurements/synthetic-seed-dims.json")
}

/// The fixture, typed.
pub fn fixture_results() -> ResultsFile {
    let text =
        std::fs::read_to_string(fixture_path()).expect("the replay fixture is in the repository");
    serde_json::from_str(&text).expect("the fixture is a results file")
}

/// Copies the fixture into `dir` (so a test owns its file) and returns the copy's path.
pub fn write_synthetic(dir: &Path) -> PathBuf {
    let path = dir.join("synthetic.json");
    std::fs::copy(fixture_path(), &path).expect("copy the replay fixture");
    path
}
