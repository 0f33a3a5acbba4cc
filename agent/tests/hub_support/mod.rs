//! A local stand-in for the Hugging Face Hub (the real one is unreachable in tests).
//!
//! Two loopback servers on plain HTTP: the "Hub", which answers
//! `/{org}/{name}/resolve/{revision}/{file}` the way huggingface.co does — small files
//! with a 200, large (LFS) files with a 302 to the "CDN" on another port, refusals
//! named in `X-Error-Code`, the commit in `X-Repo-Commit` — and the CDN, which serves
//! `Range` requests with 206 and `Content-Range`. Weight files are header-only: the
//! CDN knows the header bytes and the full size the file claims; bytes past the header
//! are zeros (served only up to 4 MiB a request, so a client that reads the body is
//! caught by the log, not fed gigabytes). Every request is logged with its range and
//! its `Authorization`, and every response can be delayed to stand for a slow link.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A file of a repository.
#[derive(Clone)]
pub enum Blob {
    /// Served whole by the Hub (config.json, the shard index).
    Text(Vec<u8>),
    /// A large file served by the CDN: its first bytes and the size it claims.
    Head {
        /// The header bytes (from the file's start).
        head: Vec<u8>,
        /// The full size announced in `Content-Range`.
        size: u64,
    },
}

/// A repository.
#[derive(Clone, Default)]
pub struct Repo {
    /// Files by path.
    pub files: BTreeMap<String, Blob>,
    /// When set, the repository is gated: this token is needed.
    pub token: Option<String>,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Logged {
    /// "hub" or "cdn".
    pub server: &'static str,
    /// The request target.
    pub path: String,
    /// The inclusive byte range asked for.
    pub range: Option<(u64, u64)>,
    /// The `Authorization` header.
    pub auth: Option<String>,
    /// The status answered.
    pub status: u16,
}

struct State {
    repos: BTreeMap<String, Repo>,
    commit: String,
    cdn_port: u16,
    delay: Duration,
    fail_once: Mutex<BTreeSet<String>>,
    log: Mutex<Vec<Logged>>,
}

/// The running stand-in.
pub struct StandIn {
    state: Arc<State>,
    hub_port: u16,
}

/// The commit every repository is at.
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

impl StandIn {
    /// Starts both servers. `fail_once`: `org/name/file` answered 429 (with
    /// `Retry-After: 1`) once, or 503 once when written `503 org/name/file`.
    pub fn start(repos: BTreeMap<String, Repo>, delay: Duration, fail_once: &[&str]) -> StandIn {
        let hub = TcpListener::bind("127.0.0.1:0").expect("bind hub");
        let cdn = TcpListener::bind("127.0.0.1:0").expect("bind cdn");
        let state = Arc::new(State {
            repos,
            commit: COMMIT.to_string(),
            cdn_port: cdn.local_addr().expect("addr").port(),
            delay,
            fail_once: Mutex::new(fail_once.iter().map(|s| s.to_string()).collect()),
            log: Mutex::new(Vec::new()),
        });
        let hub_port = hub.local_addr().expect("addr").port();
        for (listener, server) in [(hub, "hub"), (cdn, "cdn")] {
            let state = state.clone();
            std::thread::spawn(move || {
                for conn in listener.incoming().flatten() {
                    let state = state.clone();
                    std::thread::spawn(move || handle(&state, server, conn));
                }
            });
        }
        StandIn { state, hub_port }
    }

    /// `HF_ENDPOINT` for this stand-in.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.hub_port)
    }

    /// Every request so far.
    pub fn log(&self) -> Vec<Logged> {
        self.state.log.lock().expect("log").clone()
    }

    /// Forgets the requests so far.
    pub fn clear(&self) {
        self.state.log.lock().expect("log").clear();
    }
}

fn handle(state: &State, server: &'static str, mut conn: TcpStream) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 65536 {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8_lossy(&buf).to_string();
    let mut lines = text.split("\r\n");
    let target = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("")
        .to_string();
    let mut headers = BTreeMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let range = headers.get("range").and_then(|r| {
        let (a, b) = r.strip_prefix("bytes=")?.split_once('-')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    });
    let auth = headers.get("authorization").cloned();
    let (status, extra, body) = match server {
        "hub" => hub(state, &target, auth.as_deref()),
        _ => cdn(state, &target, range),
    };
    state.log.lock().expect("log").push(Logged {
        server,
        path: target,
        range,
        auth,
        status,
    });
    std::thread::sleep(state.delay);
    let reason = match status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(&body);
}

type Answer = (u16, Vec<(&'static str, String)>, Vec<u8>);

fn hub(state: &State, target: &str, auth: Option<&str>) -> Answer {
    let parts: Vec<&str> = target.trim_start_matches('/').splitn(5, '/').collect();
    let [org, name, "resolve", rev, file] = parts.as_slice() else {
        return (404, vec![], b"bad path".to_vec());
    };
    let repo_id = format!("{org}/{name}");
    let Some(repo) = state.repos.get(&repo_id) else {
        return (
            404,
            vec![("X-Error-Code", "RepositoryNotFound".into())],
            vec![],
        );
    };
    if let Some(token) = &repo.token
        && auth != Some(format!("Bearer {token}").as_str())
    {
        return (401, vec![("X-Error-Code", "GatedRepo".into())], vec![]);
    }
    if *rev != "main" && *rev != state.commit {
        return (
            404,
            vec![("X-Error-Code", "RevisionNotFound".into())],
            vec![],
        );
    }
    let commit = ("X-Repo-Commit", state.commit.clone());
    {
        let mut fail = state.fail_once.lock().expect("fail_once");
        if fail.remove(&format!("{repo_id}/{file}")) {
            return (429, vec![("Retry-After", "1".into())], vec![]);
        }
        if fail.remove(&format!("503 {repo_id}/{file}")) {
            return (503, vec![], vec![]);
        }
    }
    match repo.files.get(*file) {
        None => (
            404,
            vec![("X-Error-Code", "EntryNotFound".into()), commit],
            vec![],
        ),
        Some(Blob::Text(t)) => (200, vec![commit], t.clone()),
        Some(Blob::Head { size, .. }) => (
            302,
            vec![
                (
                    "Location",
                    format!(
                        "http://127.0.0.1:{}/cdn/{repo_id}/{}/{file}?signature=stand-in",
                        state.cdn_port, state.commit
                    ),
                ),
                ("X-Linked-Size", size.to_string()),
                commit,
            ],
            vec![],
        ),
    }
}

fn cdn(state: &State, target: &str, range: Option<(u64, u64)>) -> Answer {
    let path = target.split('?').next().unwrap_or("");
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    let ["cdn", org, name, _commit, file] = parts.as_slice() else {
        return (404, vec![], vec![]);
    };
    let Some(Blob::Head { head, size }) = state
        .repos
        .get(&format!("{org}/{name}"))
        .and_then(|r| r.files.get(*file))
    else {
        return (404, vec![], vec![]);
    };
    let Some((a, b)) = range else {
        // A client that asks for the whole file is a failure of the test.
        return (500, vec![], b"whole file asked for".to_vec());
    };
    if a >= *size || b < a {
        return (
            416,
            vec![("Content-Range", format!("bytes */{size}"))],
            vec![],
        );
    }
    let b = b.min(size - 1);
    if b - a >= 4 << 20 {
        return (500, vec![], b"range too large for a header read".to_vec());
    }
    let body: Vec<u8> = (a..=b)
        .map(|i| head.get(i as usize).copied().unwrap_or(0))
        .collect();
    (
        206,
        vec![("Content-Range", format!("bytes {a}-{b}/{size}"))],
        body,
    )
}
