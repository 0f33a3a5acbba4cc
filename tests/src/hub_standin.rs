//! A local stand-in for the Hugging Face Hub (the real one is unreachable in tests),
//! shared by the agent's lookup tests and the page's browser tests.
//!
//! Two loopback servers on plain HTTP: the "Hub", which answers
//! `/{org}/{name}/resolve/{revision}/{file}` the way huggingface.co does — small files
//! with a 200, large (LFS) files with a 302 to the "CDN" on another port, refusals
//! named in `X-Error-Code`, the commit in `X-Repo-Commit` — and
//! `/api/models/{org}/{name}/tree/{revision}`, the file listing (small files with
//! their size, large ones with `lfs: {size}`, folders as `directory`; the top level,
//! or with `?recursive=true` every file and folder; in pages of [`Repo::page_size`]
//! entries when set, each naming the next in a `Link: <…>; rel="next"` header, as the
//! Hub pages its listings); and the CDN, which serves `Range` requests with 206 and `Content-Range`. Weight files are
//! header-only: the CDN knows the header bytes and the full size the file claims;
//! bytes past the header are zeros (served only up to 4 MiB a request, so a client
//! that reads the body is caught by the log, not fed gigabytes).
//!
//! For a page on another loopback origin, every answer of both servers carries
//! `Access-Control-Allow-Origin: *` and exposes the headers a lookup reads, and
//! `OPTIONS` preflights are answered 204. Every request (preflights included) is
//! logged with its method, range and `Authorization`, and every response can be
//! delayed to stand for a slow link, so a test can count round trips.
//!
//! [`fixture_repos`] is a ready-made set of repositories (a single-file checkpoint, a
//! 61-shard one, a gated one, GGUF repositories with one and with three files, and one
//! whose listing spans pages with a split GGUF model in a folder), each
//! with a Llama-style `config.json`; [`expected_bytes`] gives the exact weight bytes
//! each holds, computed from the tensor shapes and dtypes written, not typed in.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpumem_core::import::{gguf, safetensors};

/// A file of a repository.
#[derive(Clone, Debug)]
pub enum Blob {
    /// Served whole by the Hub (config.json, the shard index).
    Text(Vec<u8>),
    /// A large file served by the CDN: its first bytes and the size it claims.
    Head {
        /// The header bytes (from the file's start).
        head: Vec<u8>,
        /// The full size announced in `Content-Range` and in the listing.
        size: u64,
    },
}

/// A repository.
#[derive(Clone, Default, Debug)]
pub struct Repo {
    /// Files by path.
    pub files: BTreeMap<String, Blob>,
    /// When set, the repository is gated: this token is needed.
    pub token: Option<String>,
    /// When set, the listing is served in pages of this many entries.
    pub page_size: Option<usize>,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Logged {
    /// "hub" or "cdn".
    pub server: &'static str,
    /// `GET`, `HEAD`, `OPTIONS`, …
    pub method: String,
    /// The request target.
    pub path: String,
    /// The inclusive byte range asked for.
    pub range: Option<(u64, u64)>,
    /// The `Authorization` header.
    pub auth: Option<String>,
    /// The status answered.
    pub status: u16,
    /// When the request arrived (before the answer's delay): requests of one round
    /// arrive together, a later round at least one delay later.
    pub at: Instant,
}

impl Logged {
    /// Rounds of sequential answers the log spans at `delay` per answer: the time
    /// from the first request's arrival to the last one's, in delays, plus one.
    pub fn rounds(log: &[Logged], delay: Duration) -> f64 {
        let (Some(first), Some(last)) = (
            log.iter().map(|l| l.at).min(),
            log.iter().map(|l| l.at).max(),
        ) else {
            return 0.0;
        };
        (last - first).as_secs_f64() / delay.as_secs_f64().max(1e-9) + 1.0
    }
}

struct State {
    repos: BTreeMap<String, Repo>,
    commit: String,
    hub_port: u16,
    cdn_port: u16,
    delay: Duration,
    fail_once: Mutex<BTreeSet<String>>,
    log: Mutex<Vec<Logged>>,
    /// Whether `/api/models/…/tree/…` is served (a plain mirror may serve files only).
    listing: AtomicBool,
}

/// The running stand-in.
pub struct StandIn {
    state: Arc<State>,
    hub_port: u16,
}

/// The commit every repository is at.
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// Headers a cross-origin page may read from the answers.
pub const EXPOSED_HEADERS: &str = "Content-Range, X-Repo-Commit, X-Error-Code, X-Linked-Size, Link";

impl StandIn {
    /// Starts both servers. `fail_once`: `org/name/file` (or `org/name/@tree` for the
    /// listing) answered 429 (with `Retry-After: 1`) once, or 503 once when written
    /// `503 org/name/file`.
    pub fn start(repos: BTreeMap<String, Repo>, delay: Duration, fail_once: &[&str]) -> StandIn {
        let hub = TcpListener::bind("127.0.0.1:0").expect("bind hub");
        let cdn = TcpListener::bind("127.0.0.1:0").expect("bind cdn");
        let state = Arc::new(State {
            repos,
            commit: COMMIT.to_string(),
            hub_port: hub.local_addr().expect("addr").port(),
            cdn_port: cdn.local_addr().expect("addr").port(),
            delay,
            fail_once: Mutex::new(fail_once.iter().map(|s| s.to_string()).collect()),
            log: Mutex::new(Vec::new()),
            listing: AtomicBool::new(true),
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

    /// The CDN's origin (`http://127.0.0.1:PORT`), for a page's CSP.
    pub fn cdn_origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.state.cdn_port)
    }

    /// Every request so far.
    pub fn log(&self) -> Vec<Logged> {
        self.state.log.lock().expect("log").clone()
    }

    /// Serves the file listing API, or (off) answers it 404 without an error code,
    /// like a mirror that serves files only.
    pub fn serve_listing(&self, on: bool) {
        self.state.listing.store(on, Ordering::Relaxed);
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
    let arrived = Instant::now();
    let text = String::from_utf8_lossy(&buf).to_string();
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next().unwrap_or("").split(' ');
    let method = request_line.next().unwrap_or("").to_string();
    let target = request_line.next().unwrap_or("").to_string();
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
    let (status, mut extra, body) = match (method.as_str(), server) {
        // A CORS preflight: what a page on another origin may send.
        ("OPTIONS", _) => (
            204,
            vec![
                (
                    "Access-Control-Allow-Headers",
                    "Authorization, Range".into(),
                ),
                ("Access-Control-Allow-Methods", "GET, HEAD".into()),
                ("Access-Control-Max-Age", "0".into()),
            ],
            vec![],
        ),
        ("GET" | "HEAD", "hub") => hub(state, &target, auth.as_deref()),
        ("GET" | "HEAD", _) => cdn(state, &target, range),
        _ => (405, vec![("Allow", "GET, HEAD, OPTIONS".into())], vec![]),
    };
    extra.push(("Access-Control-Allow-Origin", "*".into()));
    extra.push(("Access-Control-Expose-Headers", EXPOSED_HEADERS.into()));
    state.log.lock().expect("log").push(Logged {
        server,
        method: method.clone(),
        path: target,
        range,
        auth,
        status,
        at: arrived,
    });
    std::thread::sleep(state.delay);
    let reason = match status {
        200 => "OK",
        204 => "No Content",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
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
    if method != "HEAD" {
        let _ = conn.write_all(&body);
    }
}

type Answer = (u16, Vec<(&'static str, String)>, Vec<u8>);

/// `%XX` sequences decoded (a client encodes revisions and file names).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).to_string()
}

/// The repository, after the gate and the revision check, or the refusal.
fn open_repo<'a>(
    state: &'a State,
    repo_id: &str,
    rev: &str,
    auth: Option<&str>,
) -> Result<&'a Repo, Answer> {
    let Some(repo) = state.repos.get(repo_id) else {
        return Err((
            404,
            vec![("X-Error-Code", "RepositoryNotFound".into())],
            vec![],
        ));
    };
    if let Some(token) = &repo.token
        && auth != Some(format!("Bearer {token}").as_str())
    {
        return Err((401, vec![("X-Error-Code", "GatedRepo".into())], vec![]));
    }
    if rev != "main" && rev != state.commit {
        return Err((
            404,
            vec![("X-Error-Code", "RevisionNotFound".into())],
            vec![],
        ));
    }
    Ok(repo)
}

/// A 429 or 503 the test asked for, once per key.
fn injected_failure(state: &State, key: &str) -> Option<Answer> {
    let mut fail = state.fail_once.lock().expect("fail_once");
    if fail.remove(key) {
        return Some((429, vec![("Retry-After", "1".into())], vec![]));
    }
    if fail.remove(&format!("503 {key}")) {
        return Some((503, vec![], vec![]));
    }
    None
}

/// `GET /api/models?search=Q&…`: the ids of the repositories whose id contains Q
/// (case-insensitive), in id order, each as `{"id": …}` like the Hub's answer.
fn search(state: &State, target: &str) -> Answer {
    let query = target
        .split_once('?')
        .map(|(_, q)| q)
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("search="))
        .map(percent_decode)
        .unwrap_or_default()
        .to_ascii_lowercase();
    let found: Vec<serde_json::Value> = state
        .repos
        .keys()
        .filter(|id| id.to_ascii_lowercase().contains(&query))
        .map(|id| serde_json::json!({ "id": id, "downloads": 0 }))
        .collect();
    (
        200,
        vec![("Content-Type", "application/json".into())],
        serde_json::to_vec(&found).unwrap_or_default(),
    )
}

fn hub(state: &State, target: &str, auth: Option<&str>) -> Answer {
    let path = target.split('?').next().unwrap_or("");
    if path == "/api/models" {
        return search(state, target);
    }
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(6, '/').collect();
    if let ["api", "models", org, name, "tree", rev @ ..] = parts.as_slice() {
        if !state.listing.load(Ordering::Relaxed) {
            return (404, vec![], b"no such route".to_vec());
        }
        // `tree/{rev}` or `tree/{rev}/{path}`: listed from the top here.
        let raw_rev = rev.first().copied().unwrap_or("");
        let query = target.split_once('?').map_or("", |(_, q)| q);
        return tree(state, &format!("{org}/{name}"), raw_rev, query, auth);
    }
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    let [org, name, "resolve", rev, file] = parts.as_slice() else {
        return (404, vec![], b"bad path".to_vec());
    };
    let repo_id = format!("{org}/{name}");
    let (rev, file) = (percent_decode(rev), percent_decode(file));
    let repo = match open_repo(state, &repo_id, &rev, auth) {
        Ok(r) => r,
        Err(refusal) => return refusal,
    };
    if let Some(failure) = injected_failure(state, &format!("{repo_id}/{file}")) {
        return failure;
    }
    let commit = ("X-Repo-Commit", state.commit.clone());
    match repo.files.get(&file) {
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

/// A stable fake object id (the listing carries one; nothing here checks it).
fn oid(path: &str, width: usize) -> String {
    let h = path.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{h:016x}").repeat(4)[..width].to_string()
}

/// The listing, shaped like the Hub's (see `gpumem_core::import::hub`): the top
/// level, or everything with `recursive=true`; one page of it from `cursor=N` when
/// the repository has a page size.
fn tree(state: &State, repo_id: &str, raw_rev: &str, query: &str, auth: Option<&str>) -> Answer {
    let rev = percent_decode(raw_rev);
    let repo = match open_repo(state, repo_id, &rev, auth) {
        Ok(r) => r,
        Err(refusal) => return refusal,
    };
    if let Some(failure) = injected_failure(state, &format!("{repo_id}/@tree")) {
        return failure;
    }
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    };
    let recursive = param("recursive") == Some("true");
    let mut entries = Vec::new();
    let mut folders = BTreeSet::new();
    for (path, blob) in &repo.files {
        // Every folder above the file (only the top one without `recursive`).
        let mut at = 0;
        while let Some(i) = path[at..].find('/') {
            let folder = &path[..at + i];
            if folders.insert(folder.to_string()) && (recursive || !folder.contains('/')) {
                entries.push(serde_json::json!({
                    "type": "directory", "oid": oid(folder, 40), "size": 0, "path": folder,
                }));
            }
            at += i + 1;
        }
        if path.contains('/') && !recursive {
            continue;
        }
        entries.push(match blob {
            Blob::Text(t) => serde_json::json!({
                "type": "file", "oid": oid(path, 40), "size": t.len(), "path": path,
            }),
            Blob::Head { size, .. } => serde_json::json!({
                "type": "file", "oid": oid(path, 40), "size": size,
                "lfs": {"oid": oid(path, 64), "size": size, "pointerSize": 135},
                "path": path,
            }),
        });
    }
    let mut headers = vec![("Content-Type", "application/json".into())];
    if let Some(size) = repo.page_size {
        let from: usize = param("cursor").and_then(|c| c.parse().ok()).unwrap_or(0);
        let to = (from + size).min(entries.len());
        if to < entries.len() {
            headers.push((
                "Link",
                format!(
                    "<http://127.0.0.1:{}/api/models/{repo_id}/tree/{raw_rev}?recursive={recursive}&expand=false&cursor={to}>; rel=\"next\"",
                    state.hub_port
                ),
            ));
        }
        entries = entries.get(from..to).unwrap_or_default().to_vec();
    }
    let body = serde_json::to_vec(&entries).expect("JSON");
    (200, headers, body)
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
        .and_then(|r| r.files.get(&percent_decode(file)))
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

// ---------------------------------------------------------------------------------
// Fixtures.

/// The single-file checkpoint (`model.safetensors`, 2 layers).
pub const SINGLE: &str = "tiny-org/llama-single";
/// The sharded checkpoint: [`SHARDS`] files and `model.safetensors.index.json`.
pub const SHARDED: &str = "tiny-org/llama-61-shards";
/// A gated copy of [`SINGLE`]: needs [`TEST_TOKEN`].
pub const GATED: &str = "tiny-org/llama-gated";
/// A GGUF repository with one `.gguf` file (Q4_K_M).
pub const ONE_GGUF: &str = "tiny-org/llama-GGUF";
/// A GGUF repository with three `.gguf` files ([`MANY_GGUF_FILES`]).
pub const MANY_GGUF: &str = "tiny-org/llama-multi-GGUF";
/// The file of [`ONE_GGUF`].
pub const ONE_GGUF_FILE: &str = "llama-tiny-Q4_K_M.gguf";
/// A GGUF repository without a config.json: its one file's header also holds the
/// model's shape (block count, heads, KV heads, context length), as llama.cpp's
/// converter writes it.
pub const GGUF_ONLY: &str = "tiny-org/llama-GGUF-only";
/// The metadata [`GGUF_ONLY`]'s header gives: 2 layers, 4 heads of 64 (256 wide), 2
/// KV heads, 2 048 trained positions.
pub const GGUF_ONLY_SHAPE: [(&str, u32); 5] = [
    ("block_count", 2),
    ("embedding_length", 256),
    ("attention.head_count", 4),
    ("attention.head_count_kv", 2),
    ("context_length", 2048),
];
/// A repository whose listing spans pages (of 2 entries) with a GGUF model split in
/// three in a folder ([`SPLIT_GGUF_FILES`], unsloth's layout) beside a single file
/// ([`SPLIT_GGUF_SINGLE`]).
pub const SPLIT_GGUF: &str = "tiny-org/llama-split-GGUF";
/// The split set of [`SPLIT_GGUF`], in split order: the Q4_K_M tensors of
/// [`MANY_GGUF`]'s first file spread over three headers.
pub const SPLIT_GGUF_FILES: [&str; 3] = [
    "Q4_K_M/llama-tiny-Q4_K_M-00001-of-00003.gguf",
    "Q4_K_M/llama-tiny-Q4_K_M-00002-of-00003.gguf",
    "Q4_K_M/llama-tiny-Q4_K_M-00003-of-00003.gguf",
];
/// The single file of [`SPLIT_GGUF`].
pub const SPLIT_GGUF_SINGLE: &str = "llama-tiny-Q8_0.gguf";
/// The page size of [`SPLIT_GGUF`]'s listing.
pub const SPLIT_GGUF_PAGE: usize = 2;
/// The files of [`MANY_GGUF`], in name order.
pub const MANY_GGUF_FILES: [&str; 3] = [
    "llama-tiny-Q4_K_M.gguf",
    "llama-tiny-Q6_K.gguf",
    "llama-tiny-Q8_0.gguf",
];
/// The token [`GATED`] asks for.
pub const TEST_TOKEN: &str = "hf_test_token";
/// Shards of [`SHARDED`] (one layer each).
pub const SHARDS: usize = 61;

/// A Llama-shaped model small enough to build in a test.
#[derive(Clone, Copy)]
struct Shape {
    hidden: u64,
    intermediate: u64,
    heads: u64,
    kv_heads: u64,
    layers: u64,
    vocab: u64,
}

/// The safetensors checkpoints' shape (tiny, any row length).
const ST_SHAPE: Shape = Shape {
    hidden: 64,
    intermediate: 128,
    heads: 4,
    kv_heads: 2,
    layers: 2,
    vocab: 256,
};

/// The GGUF files' shape: every row a multiple of 256, the K-quants' block.
const GGUF_SHAPE: Shape = Shape {
    hidden: 256,
    intermediate: 512,
    heads: 4,
    kv_heads: 2,
    layers: 2,
    vocab: 512,
};

/// A `config.json` as `transformers` writes one for a Llama model (keys as in
/// meta-llama/Llama-3.2-1B's), with this shape.
fn llama_config(s: Shape) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": false,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": s.hidden / s.heads,
        "hidden_act": "silu",
        "hidden_size": s.hidden,
        "initializer_range": 0.02,
        "intermediate_size": s.intermediate,
        "max_position_embeddings": 2048,
        "mlp_bias": false,
        "model_type": "llama",
        "num_attention_heads": s.heads,
        "num_hidden_layers": s.layers,
        "num_key_value_heads": s.kv_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": null,
        "rope_theta": 500000.0,
        "tie_word_embeddings": false,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0",
        "use_cache": true,
        "vocab_size": s.vocab,
    }))
    .expect("JSON")
}

/// A safetensors tensor: name, dtype, shape.
pub type StTensor = (String, &'static str, Vec<u64>);

/// Bytes of safetensors tensors from dtype × shape, computed here (not by the parser).
pub fn safetensors_bytes(tensors: &[StTensor]) -> u64 {
    tensors
        .iter()
        .map(|(_, dtype, shape)| {
            let width = match *dtype {
                "F64" | "I64" | "U64" => 8,
                "F32" | "I32" | "U32" => 4,
                "BF16" | "F16" | "I16" | "U16" => 2,
                "I8" | "U8" | "F8_E4M3" | "F8_E5M2" => 1,
                other => panic!("width of {other}"),
            };
            shape.iter().product::<u64>() * width
        })
        .sum()
}

/// A header-only safetensors file: its header and the size it claims (header plus
/// the tensors' bytes), and those bytes.
pub fn safetensors_blob(tensors: &[StTensor]) -> (Blob, u64) {
    let refs: Vec<(&str, &str, &[u64])> = tensors
        .iter()
        .map(|(n, d, s)| (n.as_str(), *d, s.as_slice()))
        .collect();
    let head = safetensors::build_header(&refs);
    let bytes = safetensors_bytes(tensors);
    let size = head.len() as u64 + bytes;
    (Blob::Head { head, size }, bytes)
}

/// One decoder layer's tensors, `transformers`' Llama names, BF16.
fn layer_tensors(s: Shape, i: u64) -> Vec<StTensor> {
    let head_dim = s.hidden / s.heads;
    let kv = s.kv_heads * head_dim;
    let p = format!("model.layers.{i}");
    vec![
        (
            format!("{p}.self_attn.q_proj.weight"),
            "BF16",
            vec![s.hidden, s.hidden],
        ),
        (
            format!("{p}.self_attn.k_proj.weight"),
            "BF16",
            vec![kv, s.hidden],
        ),
        (
            format!("{p}.self_attn.v_proj.weight"),
            "BF16",
            vec![kv, s.hidden],
        ),
        (
            format!("{p}.self_attn.o_proj.weight"),
            "BF16",
            vec![s.hidden, s.hidden],
        ),
        (
            format!("{p}.mlp.gate_proj.weight"),
            "BF16",
            vec![s.intermediate, s.hidden],
        ),
        (
            format!("{p}.mlp.up_proj.weight"),
            "BF16",
            vec![s.intermediate, s.hidden],
        ),
        (
            format!("{p}.mlp.down_proj.weight"),
            "BF16",
            vec![s.hidden, s.intermediate],
        ),
        (
            format!("{p}.input_layernorm.weight"),
            "BF16",
            vec![s.hidden],
        ),
        (
            format!("{p}.post_attention_layernorm.weight"),
            "BF16",
            vec![s.hidden],
        ),
    ]
}

fn embed(s: Shape) -> StTensor {
    (
        "model.embed_tokens.weight".into(),
        "BF16",
        vec![s.vocab, s.hidden],
    )
}

fn head_tensors(s: Shape) -> Vec<StTensor> {
    vec![
        ("model.norm.weight".into(), "BF16", vec![s.hidden]),
        ("lm_head.weight".into(), "BF16", vec![s.vocab, s.hidden]),
    ]
}

fn text(s: &str) -> Blob {
    Blob::Text(s.as_bytes().to_vec())
}

/// A single-file checkpoint and its weight bytes.
fn single_file_repo() -> (Repo, u64) {
    let mut tensors = vec![embed(ST_SHAPE)];
    for i in 0..ST_SHAPE.layers {
        tensors.extend(layer_tensors(ST_SHAPE, i));
    }
    tensors.extend(head_tensors(ST_SHAPE));
    let (blob, bytes) = safetensors_blob(&tensors);
    let mut files = BTreeMap::new();
    files.insert("config.json".to_string(), text(&llama_config(ST_SHAPE)));
    files.insert("model.safetensors".to_string(), blob);
    files.insert("README.md".to_string(), text("# llama-tiny\n"));
    (
        Repo {
            files,
            token: None,
            page_size: None,
        },
        bytes,
    )
}

/// A checkpoint of [`SHARDS`] layers, one shard each (the embeddings in the first,
/// the final norm and head in the last), with its index.
fn sharded_repo() -> (Repo, u64) {
    let shape = Shape {
        layers: SHARDS as u64,
        ..ST_SHAPE
    };
    let mut files = BTreeMap::new();
    let mut weight_map = serde_json::Map::new();
    let mut total = 0u64;
    for i in 0..SHARDS {
        let file = format!("model-{:05}-of-{SHARDS:05}.safetensors", i + 1);
        let mut tensors = Vec::new();
        if i == 0 {
            tensors.push(embed(shape));
        }
        tensors.extend(layer_tensors(shape, i as u64));
        if i + 1 == SHARDS {
            tensors.extend(head_tensors(shape));
        }
        for (name, _, _) in &tensors {
            weight_map.insert(name.clone(), serde_json::Value::String(file.clone()));
        }
        let (blob, bytes) = safetensors_blob(&tensors);
        total += bytes;
        files.insert(file, blob);
    }
    let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    files.insert(
        "model.safetensors.index.json".to_string(),
        text(&serde_json::to_string_pretty(&index).expect("JSON")),
    );
    files.insert("config.json".to_string(), text(&llama_config(shape)));
    (
        Repo {
            files,
            token: None,
            page_size: None,
        },
        total,
    )
}

/// ggml type ids and block layouts (elements per block, bytes per block), from
/// ggml's `type_traits` table (github.com/ggml-org/ggml `src/ggml.c`) — computed
/// here independently of the core's table.
const GGML_F32: u32 = 0;
const GGML_Q8_0: u32 = 8;
const GGML_Q4_K: u32 = 12;
const GGML_Q6_K: u32 = 14;

fn ggml_block(ty: u32) -> (u64, u64) {
    match ty {
        GGML_F32 => (1, 4),
        GGML_Q8_0 => (32, 34),
        GGML_Q4_K => (256, 144),
        GGML_Q6_K => (256, 210),
        other => panic!("block of ggml type {other}"),
    }
}

/// A GGUF tensor: name, dims (innermost first), ggml type.
type GgufTensor = (String, Vec<u64>, u32);

/// A Llama GGUF file's tensors (llama.cpp's names), matrices in `matrix`, the
/// attention's V and the FFN's down projection in `sensitive` (as llama.cpp's
/// Q4_K_M keeps those in Q6_K), norms in F32.
fn gguf_tensors(s: Shape, matrix: u32, sensitive: u32) -> Vec<GgufTensor> {
    let kv = s.kv_heads * (s.hidden / s.heads);
    let mut t: Vec<GgufTensor> =
        vec![("token_embd.weight".into(), vec![s.hidden, s.vocab], matrix)];
    for i in 0..s.layers {
        let p = format!("blk.{i}");
        t.extend([
            (format!("{p}.attn_norm.weight"), vec![s.hidden], GGML_F32),
            (
                format!("{p}.attn_q.weight"),
                vec![s.hidden, s.hidden],
                matrix,
            ),
            (format!("{p}.attn_k.weight"), vec![s.hidden, kv], matrix),
            (format!("{p}.attn_v.weight"), vec![s.hidden, kv], sensitive),
            (
                format!("{p}.attn_output.weight"),
                vec![s.hidden, s.hidden],
                matrix,
            ),
            (format!("{p}.ffn_norm.weight"), vec![s.hidden], GGML_F32),
            (
                format!("{p}.ffn_gate.weight"),
                vec![s.hidden, s.intermediate],
                matrix,
            ),
            (
                format!("{p}.ffn_up.weight"),
                vec![s.hidden, s.intermediate],
                matrix,
            ),
            (
                format!("{p}.ffn_down.weight"),
                vec![s.intermediate, s.hidden],
                sensitive,
            ),
        ]);
    }
    t.push(("output_norm.weight".into(), vec![s.hidden], GGML_F32));
    t.push(("output.weight".into(), vec![s.hidden, s.vocab], sensitive));
    t
}

/// A header-only GGUF file and its tensor bytes (rows × blocks per row × block bytes).
fn gguf_blob(tensors: &[GgufTensor]) -> (Blob, u64) {
    gguf_split_blob(tensors, None)
}

/// [`gguf_blob`] for one file of a split model: (`split.no`, `split.count`,
/// `split.tensors.count`) in its header.
fn gguf_split_blob(tensors: &[GgufTensor], split: Option<(u16, u16, i32)>) -> (Blob, u64) {
    let bytes: u64 = tensors
        .iter()
        .map(|(_, dims, ty)| {
            let (per_block, block_bytes) = ggml_block(*ty);
            assert_eq!(dims[0] % per_block, 0, "row of {dims:?}");
            let rows: u64 = dims[1..].iter().product();
            rows * (dims[0] / per_block) * block_bytes
        })
        .sum();
    let refs: Vec<(&str, &[u64], u32)> = tensors
        .iter()
        .map(|(n, d, t)| (n.as_str(), d.as_slice(), *t))
        .collect();
    let head = gguf::build_split_header("llama", &refs, split);
    let size = head.len() as u64 + bytes;
    (Blob::Head { head, size }, bytes)
}

/// [`GGUF_ONLY`]: a README and the Q4_K_M file, its header with the model's shape.
fn gguf_only_repo() -> Repo {
    let tensors = gguf_tensors(GGUF_SHAPE, GGML_Q4_K, GGML_Q6_K);
    let refs: Vec<(&str, &[u64], u32)> = tensors
        .iter()
        .map(|(n, d, t)| (n.as_str(), d.as_slice(), *t))
        .collect();
    let (_, bytes) = gguf_blob(&tensors);
    let head = gguf::build_header_with("llama", &GGUF_ONLY_SHAPE, &refs, None);
    let size = head.len() as u64 + bytes;
    Repo {
        files: BTreeMap::from([
            (
                "README.md".to_string(),
                text("# llama-tiny GGUF, no config\n"),
            ),
            (ONE_GGUF_FILE.to_string(), Blob::Head { head, size }),
        ]),
        token: None,
        page_size: None,
    }
}

/// The GGUF quantisations built, by file name.
fn gguf_files() -> BTreeMap<&'static str, (Blob, u64)> {
    let [q4, q6, q8] = MANY_GGUF_FILES;
    BTreeMap::from([
        (
            q4,
            gguf_blob(&gguf_tensors(GGUF_SHAPE, GGML_Q4_K, GGML_Q6_K)),
        ),
        (
            q6,
            gguf_blob(&gguf_tensors(GGUF_SHAPE, GGML_Q6_K, GGML_Q6_K)),
        ),
        (
            q8,
            gguf_blob(&gguf_tensors(GGUF_SHAPE, GGML_Q8_0, GGML_Q8_0)),
        ),
    ])
}

/// The three files of [`SPLIT_GGUF_FILES`]: the Q4_K_M tensors cut in three runs
/// (the embeddings and layer 0; layer 1; the output), each file with its share.
fn split_files() -> Vec<(&'static str, (Blob, u64))> {
    let tensors = gguf_tensors(GGUF_SHAPE, GGML_Q4_K, GGML_Q6_K);
    let per_layer = 9;
    let cuts = [0, 1 + per_layer, 1 + 2 * per_layer, tensors.len()];
    let total = i32::try_from(tensors.len()).expect("few tensors");
    SPLIT_GGUF_FILES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let part = &tensors[cuts[i]..cuts[i + 1]];
            (*name, gguf_split_blob(part, Some((i as u16, 3, total))))
        })
        .collect()
}

fn split_gguf_repo() -> Repo {
    let mut files = BTreeMap::new();
    files.insert("config.json".to_string(), text(&llama_config(GGUF_SHAPE)));
    files.insert("README.md".to_string(), text("# llama-tiny split GGUF\n"));
    for (name, (blob, _)) in split_files() {
        files.insert(name.to_string(), blob);
    }
    files.insert(
        SPLIT_GGUF_SINGLE.to_string(),
        gguf_files()[SPLIT_GGUF_SINGLE].0.clone(),
    );
    Repo {
        files,
        token: None,
        page_size: Some(SPLIT_GGUF_PAGE),
    }
}

fn gguf_repo(names: &[&str]) -> Repo {
    let all = gguf_files();
    let mut files = BTreeMap::new();
    files.insert("config.json".to_string(), text(&llama_config(GGUF_SHAPE)));
    files.insert("README.md".to_string(), text("# llama-tiny GGUF\n"));
    for n in names {
        files.insert(n.to_string(), all[n].0.clone());
    }
    Repo {
        files,
        token: None,
        page_size: None,
    }
}

/// The fixture repositories by id ([`SINGLE`], [`SHARDED`], [`GATED`], [`ONE_GGUF`],
/// [`MANY_GGUF`]).
pub fn fixture_repos() -> BTreeMap<String, Repo> {
    let (single, _) = single_file_repo();
    let mut gated = single.clone();
    gated.token = Some(TEST_TOKEN.to_string());
    BTreeMap::from([
        (SINGLE.to_string(), single),
        (SHARDED.to_string(), sharded_repo().0),
        (GATED.to_string(), gated),
        (ONE_GGUF.to_string(), gguf_repo(&[ONE_GGUF_FILE])),
        (MANY_GGUF.to_string(), gguf_repo(&MANY_GGUF_FILES)),
        (SPLIT_GGUF.to_string(), split_gguf_repo()),
        (GGUF_ONLY.to_string(), gguf_only_repo()),
    ])
}

/// The exact weight bytes a lookup of fixture `repo` must report (its default
/// choice), computed from the tensors written. Panics for [`MANY_GGUF`], which has
/// no default choice: see [`expected_file_bytes`].
pub fn expected_bytes(repo: &str) -> u64 {
    match repo {
        SINGLE | GATED => single_file_repo().1,
        SHARDED => sharded_repo().1,
        ONE_GGUF | GGUF_ONLY => expected_file_bytes(ONE_GGUF, ONE_GGUF_FILE),
        other => panic!("{other}: no single expected figure (name a file)"),
    }
}

/// The exact weight bytes of one GGUF file of a fixture repository (of the whole set
/// for a file of [`SPLIT_GGUF_FILES`]: the sum of what the three headers were written
/// with).
pub fn expected_file_bytes(repo: &str, file: &str) -> u64 {
    if repo == SPLIT_GGUF && SPLIT_GGUF_FILES.contains(&file) {
        return split_files().iter().map(|(_, (_, bytes))| bytes).sum();
    }
    if (repo, file) == (SPLIT_GGUF, SPLIT_GGUF_SINGLE) {
        return gguf_files()[file].1;
    }
    let names: &[&str] = match repo {
        ONE_GGUF => &[ONE_GGUF_FILE],
        MANY_GGUF => &MANY_GGUF_FILES,
        other => panic!("{other}: not a GGUF fixture"),
    };
    assert!(names.contains(&file), "{repo} has no {file}");
    gguf_files()[file].1
}

/// `bin` (the agent) isolated for a Hub test: `HF_ENDPOINT` set to `endpoint`, a fresh
/// home and cache under `home`, no token from the environment (`token` when given),
/// no proxy.
pub fn isolated_agent(
    bin: &std::path::Path,
    endpoint: &str,
    home: &std::path::Path,
    token: Option<&str>,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin);
    cmd.env("HF_ENDPOINT", endpoint)
        .env("HOME", home)
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("HF_HOME", home.join("hf"));
    for v in [
        "HF_TOKEN",
        "HF_TOKEN_PATH",
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env_remove(v);
    }
    if let Some(t) = token {
        cmd.env("HF_TOKEN", t);
    }
    cmd
}

/// A diffusers pipeline's repository, as the Hub serves one: a folder's
/// `model_index.json` and each component's `config.json` (the files a pipeline lookup
/// reads), gated behind `token` when given.
pub fn pipeline_repo(dir: &std::path::Path, token: Option<&str>) -> Repo {
    let mut files = BTreeMap::new();
    files.insert(
        "model_index.json".to_string(),
        Blob::Text(std::fs::read(dir.join("model_index.json")).expect("model_index.json")),
    );
    for entry in std::fs::read_dir(dir).expect("pipeline folder") {
        let path = entry.expect("entry").path();
        let config = path.join("config.json");
        if config.is_file() {
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .to_string();
            files.insert(
                format!("{name}/config.json"),
                Blob::Text(std::fs::read(&config).expect("config.json")),
            );
        }
    }
    Repo {
        files,
        token: token.map(str::to_string),
        ..Repo::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumem_core::import::hub::{TreePages, WeightFiles, choose_weights, parse_tree};

    /// The stand-in's listing, read by the core's parser, leads to the fixture's files.
    #[test]
    fn the_listing_reads_back_through_the_core() {
        let repos = fixture_repos();
        let state = State {
            repos,
            commit: COMMIT.into(),
            hub_port: 2,
            cdn_port: 1,
            delay: Duration::ZERO,
            fail_once: Mutex::new(BTreeSet::new()),
            log: Mutex::new(Vec::new()),
            listing: AtomicBool::new(true),
        };
        let (status, _, body) = tree(&state, SHARDED, "main", "", None);
        assert_eq!(status, 200);
        let files = parse_tree(&body).expect("listing");
        let Some(Blob::Text(index)) = state.repos[SHARDED]
            .files
            .get("model.safetensors.index.json")
        else {
            panic!("index")
        };
        match choose_weights(&files, Some(index), None).expect("choice") {
            WeightFiles::Safetensors(shards) => assert_eq!(shards.len(), SHARDS),
            other => panic!("{other:?}"),
        }
        let (status, _, body) = tree(&state, MANY_GGUF, "main", "", None);
        assert_eq!(status, 200);
        let files = parse_tree(&body).expect("listing");
        assert!(choose_weights(&files, None, None).is_err());
        assert_eq!(tree(&state, GATED, "main", "", None).0, 401);
        // The paged repository: top level only without `recursive`, in pages.
        let (_, headers, body) = tree(&state, SPLIT_GGUF, "main", "", None);
        let top: Vec<String> = parse_tree(&body)
            .expect("page")
            .into_iter()
            .map(|f| f.path)
            .collect();
        assert_eq!(top, vec!["README.md".to_string()], "{headers:?}");
        // Recursively, page by page through the Link headers, every file once.
        let mut pages = TreePages::new("http://127.0.0.1:2");
        let mut query = "recursive=true&expand=false".to_string();
        loop {
            let (status, headers, body) = tree(&state, SPLIT_GGUF, "main", &query, None);
            assert_eq!(status, 200);
            let link = headers
                .iter()
                .find(|(k, _)| *k == "Link")
                .map(|(_, v)| v.as_str());
            match pages.add(&body, link).expect("page") {
                Some(next) => query = next.split_once('?').expect("query").1.to_string(),
                None => break,
            }
        }
        assert_eq!(pages.pages(), 4);
        let mut all: Vec<String> = pages.into_files().into_iter().map(|f| f.path).collect();
        all.sort();
        let mut want: Vec<String> = state.repos[SPLIT_GGUF].files.keys().cloned().collect();
        want.sort();
        assert_eq!(all, want);
        assert_eq!(tree(&state, SINGLE, "v9", "", None).0, 404);
        assert_eq!(tree(&state, "no/such", "main", "", None).0, 404);
    }

    #[test]
    fn expected_bytes_follow_the_shapes() {
        // One layer of the tiny safetensors Llama: 2·64·64 (q, o) + 2·32·64 (k, v),
        // 3·128·64 (MLP), 2·64 (norms), in BF16.
        let layer = (2 * 64 * 64 + 2 * 32 * 64 + 3 * 128 * 64 + 2 * 64) * 2;
        let ends = (256 * 64 * 2 + 64) * 2;
        assert_eq!(expected_bytes(SINGLE), 2 * layer + ends);
        assert_eq!(expected_bytes(SHARDED), 61 * layer + ends);
        let q8 = expected_file_bytes(MANY_GGUF, "llama-tiny-Q8_0.gguf");
        let q4 = expected_file_bytes(MANY_GGUF, "llama-tiny-Q4_K_M.gguf");
        assert!(q4 < q8, "{q4} {q8}");
        assert_eq!(expected_bytes(ONE_GGUF), q4);
        // The split set holds the Q4_K_M file's tensors, so their bytes add up to its.
        for f in SPLIT_GGUF_FILES {
            assert_eq!(expected_file_bytes(SPLIT_GGUF, f), q4);
        }
        let parts: Vec<u64> = split_files().iter().map(|(_, (_, b))| *b).collect();
        assert!(parts.iter().all(|&b| b > 0 && b < q4), "{parts:?}");
    }

    /// One raw HTTP/1.1 exchange: the status line and headers of the answer.
    fn exchange(origin: &str, request: &str) -> String {
        let addr = origin.trim_start_matches("http://");
        let mut conn = TcpStream::connect(addr).expect("connect");
        conn.write_all(request.as_bytes()).expect("write");
        let mut answer = String::new();
        conn.read_to_string(&mut answer).expect("read");
        answer
    }

    #[test]
    fn a_page_on_another_origin_may_ask_and_read() {
        let hub = StandIn::start(fixture_repos(), Duration::ZERO, &[]);
        for origin in [hub.endpoint(), hub.cdn_origin()] {
            let a = exchange(
                &origin,
                "OPTIONS /x HTTP/1.1\r\nOrigin: http://127.0.0.1:1\r\n\
                 Access-Control-Request-Headers: authorization, range\r\n\r\n",
            );
            assert!(a.starts_with("HTTP/1.1 204"), "{a}");
            for h in [
                "Access-Control-Allow-Origin: *",
                "Access-Control-Allow-Headers: Authorization, Range",
                "Access-Control-Allow-Methods: GET, HEAD",
            ] {
                assert!(a.contains(h), "{h}: {a}");
            }
        }
        let a = exchange(
            &hub.endpoint(),
            &format!("GET /api/models/{ONE_GGUF}/tree/main HTTP/1.1\r\n\r\n"),
        );
        assert!(a.starts_with("HTTP/1.1 200"), "{a}");
        assert!(a.contains("Access-Control-Allow-Origin: *"), "{a}");
        assert!(
            a.contains(&format!("Access-Control-Expose-Headers: {EXPOSED_HEADERS}")),
            "{a}"
        );
        assert!(a.contains(ONE_GGUF_FILE), "{a}");
        let log = hub.log();
        let preflights: Vec<_> = log.iter().filter(|l| l.method == "OPTIONS").collect();
        assert_eq!(preflights.len(), 2, "{log:?}");
        assert!(preflights.iter().all(|l| l.status == 204));
        assert_eq!(
            [preflights[0].server, preflights[1].server],
            ["hub", "cdn"],
            "{log:?}"
        );
    }

    #[test]
    fn percent_escapes_are_decoded() {
        assert_eq!(percent_decode("refs%2Fpr%2F1"), "refs/pr/1");
        assert_eq!(percent_decode("a%2Bb.gguf"), "a+b.gguf");
        assert_eq!(percent_decode("100%"), "100%");
    }
}
