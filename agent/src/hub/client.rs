//! HTTP for the Hub lookup: the Hub's URL and token conventions, redirects followed by
//! hand (so the token never leaves the Hub's own origin), bounded retries of 429 and
//! 5xx, and reads that are always bounded (a text file by [`TEXT_LIMIT`], a ranged read
//! by the range asked for).
//!
//! Conventions followed (those of `huggingface_hub`, the Hub's own client library —
//! github.com/huggingface/huggingface_hub `src/huggingface_hub/constants.py` and
//! `file_download.py`): `HF_ENDPOINT` (default `https://huggingface.co`), files at
//! `{endpoint}/{repo}/resolve/{revision}/{file}` with the revision percent-encoded,
//! the token from `HF_TOKEN`, else the file `HF_TOKEN_PATH`, else `$HF_HOME/token`
//! (default `~/.cache/huggingface/token`), sent as `Authorization: Bearer`, and the
//! commit a revision resolved to in the `X-Repo-Commit` response header. The Hub
//! names its refusals in `X-Error-Code` (`GatedRepo`, `RepositoryNotFound`,
//! `RevisionNotFound`, `EntryNotFound`); they are used when present.

use std::io::Read;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use gpumem_core::import::hub::{self, same_origin};

/// The Hub used when `HF_ENDPOINT` is not set.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// Largest `config.json`, `model.safetensors.index.json` or file listing read: the
/// core's bound for the JSON it parses. The index of the largest checkpoints (hundreds
/// of shards, tens of thousands of tensors) is a few MB.
pub const TEXT_LIMIT: u64 = gpumem_core::import::hub::MAX_LISTING_BYTES as u64;
/// Attempts per request when the Hub answers 429 or 5xx, or the connection fails.
const ATTEMPTS: u32 = 5;
/// Attempts when the connection itself fails (no network, a name that does not resolve).
const UNREACHABLE_ATTEMPTS: u32 = 2;
/// First pause before a retry; doubled each time, capped by [`BACKOFF_CAP`].
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// Longest pause between two attempts, `Retry-After` included (a Hub asking for
/// minutes is better answered by an error the user can act on).
const BACKOFF_CAP: Duration = Duration::from_secs(20);
/// Redirects followed for one request (resolve → CDN is one; renamed repos add one).
const MAX_REDIRECTS: u32 = 5;

/// A response that ended well.
#[derive(Debug)]
pub struct Fetched {
    /// The body (bounded by what was asked for).
    pub body: Vec<u8>,
    /// The file's full size, from `Content-Range` (or `Content-Length` of a 200).
    pub total: Option<u64>,
    /// `X-Repo-Commit` seen on the way (the Hub's resolve answer carries it).
    pub commit: Option<String>,
    /// The URL that finally answered (the CDN's, after a redirect).
    pub final_url: String,
    /// The `Link` header (the file listing's next page).
    pub link: Option<String>,
}

/// One Hub: endpoint, token and a shared connection pool; counts its requests.
pub struct Client {
    agent: ureq::Agent,
    endpoint: String,
    token: Option<String>,
    requests: AtomicU64,
}

impl Client {
    /// The Hub named by the environment (`HF_ENDPOINT`, `HF_TOKEN`, the token file).
    pub fn from_env() -> Self {
        let endpoint = std::env::var("HF_ENDPOINT")
            .ok()
            .map(|e| e.trim().trim_end_matches('/').to_string())
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        Client::new(endpoint, token_from_env())
    }

    /// A client for `endpoint` (no trailing slash) with an optional token.
    pub fn new(endpoint: String, token: Option<String>) -> Self {
        let config = ureq::Agent::config_builder()
            // Redirects by hand: the token must go only to the endpoint's origin.
            .max_redirects(0)
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(15)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            // A 100 MB safetensors header at a slow 1 MB/s still ends in time.
            .timeout_global(Some(Duration::from_secs(300)))
            .user_agent(concat!("gpumem-agent/", env!("CARGO_PKG_VERSION")))
            .build();
        Client {
            agent: config.new_agent(),
            endpoint,
            token,
            requests: AtomicU64::new(0),
        }
    }

    /// HTTP requests sent so far (each redirect hop and retry counts).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// `{endpoint}/{repo}/resolve/{revision}/{file}`, encoded as `huggingface_hub`
    /// does ([`gpumem_core::import::hub::resolve_url`]).
    pub fn resolve_url(&self, repo: &str, revision: &str, file: &str) -> String {
        gpumem_core::import::hub::resolve_url(&self.endpoint, repo, revision, file)
    }

    /// `{endpoint}/api/models/{repo}/tree/{revision}?recursive=true…`: the first page
    /// of the whole file listing.
    pub fn tree_url(&self, repo: &str, revision: &str) -> String {
        gpumem_core::import::hub::tree_url(&self.endpoint, repo, revision)
    }

    /// The Hub's endpoint (scheme://host[:port], no trailing slash).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A whole small file (config.json, the shard index), at most [`TEXT_LIMIT`] bytes.
    pub fn get_text(&self, url: &str, what: &str) -> Result<Fetched> {
        self.get(url, None, what)
    }

    /// Bytes `range` of a file (at most its length are read, whatever the server sends).
    pub fn get_range(&self, url: &str, range: Range<u64>, what: &str) -> Result<Fetched> {
        if range.is_empty() {
            bail!("{what}: empty read asked for");
        }
        self.get(url, Some(range), what)
    }

    fn get(&self, url: &str, range: Option<Range<u64>>, what: &str) -> Result<Fetched> {
        let mut attempt: u32 = 0;
        loop {
            attempt = attempt.saturating_add(1);
            let pause = match self.once(url, range.clone(), what)? {
                Attempt::Done(f) => return Ok(f),
                Attempt::Retry {
                    pause,
                    reason,
                    unreachable,
                } => {
                    // An unreachable host (offline, DNS) is given fewer chances than
                    // a Hub that answers "later".
                    let limit = if unreachable {
                        UNREACHABLE_ATTEMPTS
                    } else {
                        ATTEMPTS
                    };
                    if attempt >= limit {
                        if unreachable {
                            bail!(
                                "{what}: could not reach {} ({reason}) after {limit} attempts: check the network, or set HF_ENDPOINT to a mirror",
                                self.endpoint
                            );
                        }
                        bail!("{what}: {reason}, still after {limit} attempts");
                    }
                    pause.unwrap_or_else(|| {
                        BACKOFF_BASE.saturating_mul(1u32 << (attempt.saturating_sub(1)).min(8))
                    })
                }
            };
            std::thread::sleep(pause.min(BACKOFF_CAP));
        }
    }

    /// One request with its redirects.
    fn once(&self, url: &str, range: Option<Range<u64>>, what: &str) -> Result<Attempt> {
        let mut current = url.to_string();
        let mut commit: Option<String> = None;
        for _ in 0..=MAX_REDIRECTS {
            let mut req = self.agent.get(&current);
            if let Some(r) = &range {
                // HTTP ranges are inclusive; `r` is not empty (checked above).
                req = req.header("Range", format!("bytes={}-{}", r.start, r.end - 1));
            }
            if let Some(t) = &self.token
                && same_origin(&current, &self.endpoint)
            {
                req = req.header("Authorization", format!("Bearer {t}"));
            }
            self.requests.fetch_add(1, Ordering::Relaxed);
            let mut resp = match req.call() {
                Ok(r) => r,
                // A server that accepted the request but did not answer in time is
                // reachable: said as a timeout, not as "could not reach".
                Err(ureq::Error::Timeout(t)) => {
                    return Ok(Attempt::Retry {
                        pause: None,
                        reason: timeout_words(t),
                        unreachable: matches!(t, ureq::Timeout::Connect | ureq::Timeout::Resolve),
                    });
                }
                Err(e @ (ureq::Error::Io(_) | ureq::Error::ConnectionFailed)) => {
                    return Ok(Attempt::Retry {
                        pause: None,
                        reason: format!("{e}"),
                        unreachable: true,
                    });
                }
                Err(e) => return Err(anyhow!(e).context(format!("{what}: request failed"))),
            };
            let header = |name: &str| {
                resp.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            if commit.is_none() {
                commit = header("x-repo-commit").filter(|c| is_commit(c));
            }
            let status = resp.status().as_u16();
            match status {
                301 | 302 | 303 | 307 | 308 => {
                    let location = header("location")
                        .ok_or_else(|| anyhow!("{what}: redirect ({status}) without a Location"))?;
                    current = join_location(&current, &location)
                        .with_context(|| format!("{what}: redirect to {location:?}"))?;
                }
                200 | 206 => {
                    let limit = match &range {
                        Some(r) => r.end - r.start,
                        None => TEXT_LIMIT,
                    };
                    let total = match (&range, status) {
                        (Some(r), 206) => {
                            let cr = header("content-range")
                                .ok_or_else(|| anyhow!("{what}: 206 without Content-Range"))?;
                            let (start, total) = hub::parse_content_range(&cr)
                                .ok_or_else(|| anyhow!("{what}: bad Content-Range {cr:?}"))?;
                            if start != r.start {
                                bail!("{what}: asked for bytes from {}, got from {start}", r.start);
                            }
                            Some(total)
                        }
                        // A server that ignores Range sends the file from its start:
                        // fine for a first read, which is all that is kept.
                        (Some(r), _) if r.start != 0 => {
                            bail!("{what}: the server ignored the Range header")
                        }
                        _ => header("content-length").and_then(|l| l.parse().ok()),
                    };
                    let link = header("link");
                    // A ranged read's buffer at once (no doubling growth past the range).
                    let mut body = match &range {
                        Some(_) => Vec::with_capacity(
                            usize::try_from(limit.saturating_add(1)).unwrap_or(0),
                        ),
                        None => Vec::new(),
                    };
                    resp.body_mut()
                        .as_reader()
                        .take(limit.saturating_add(1))
                        .read_to_end(&mut body)
                        .with_context(|| format!("{what}: reading the response"))?;
                    if body.len() as u64 > limit {
                        if range.is_some() {
                            body.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
                        } else {
                            bail!(
                                "{what}: larger than the {} MiB read at most",
                                TEXT_LIMIT >> 20
                            );
                        }
                    }
                    return Ok(Attempt::Done(Fetched {
                        body,
                        total,
                        commit,
                        final_url: current,
                        link,
                    }));
                }
                // From the CDN, a refusal is of its signed address (expired), not of the user.
                401 | 403 if !same_origin(&current, &self.endpoint) => {
                    bail!("{what}: the download host refused the signed address (HTTP {status})")
                }
                401 | 403 | 404 => {
                    let repo = what.split('@').next().unwrap_or(what);
                    let words = hub::refusal(
                        status,
                        header("x-error-code").as_deref(),
                        what,
                        &format!("{}/{repo}", self.endpoint),
                        self.token.is_some(),
                        "set HF_TOKEN (or run `huggingface-cli login`)",
                    )
                    .unwrap_or_else(|| format!("{what}: HTTP {status}"));
                    if status == 404 {
                        return Err(NotFound(words).into());
                    }
                    bail!(words);
                }
                429 | 500..=599 => {
                    let pause = header("retry-after")
                        .and_then(|s| s.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    return Ok(Attempt::Retry {
                        pause,
                        reason: format!("HTTP {status}"),
                        unreachable: false,
                    });
                }
                other => bail!("{what}: unexpected HTTP {other}"),
            }
        }
        bail!("{what}: more than {MAX_REDIRECTS} redirects")
    }
}

/// A 404: the caller may treat it as "absent" (the shard index of a single-file model).
#[derive(Debug)]
pub struct NotFound(pub String);

impl std::fmt::Display for NotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotFound {}

enum Attempt {
    Done(Fetched),
    Retry {
        pause: Option<Duration>,
        reason: String,
        unreachable: bool,
    },
}

/// The token `huggingface_hub` would use: `HF_TOKEN`, else the token file.
fn token_from_env() -> Option<String> {
    let clean = |s: String| Some(s.trim().to_string()).filter(|t| !t.is_empty());
    if let Some(t) = std::env::var("HF_TOKEN").ok().and_then(clean) {
        return Some(t);
    }
    let path = match std::env::var_os("HF_TOKEN_PATH") {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let home = match std::env::var_os("HF_HOME") {
                Some(h) => std::path::PathBuf::from(h),
                None => {
                    std::path::PathBuf::from(std::env::var_os("HOME")?).join(".cache/huggingface")
                }
            };
            home.join("token")
        }
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    clean(text)
}

/// What timed out, in words (ureq's timeouts: connect, the answer's head, the whole
/// request).
fn timeout_words(t: ureq::Timeout) -> String {
    let what = match t {
        ureq::Timeout::Connect => "connecting",
        ureq::Timeout::Resolve => "resolving the host name",
        ureq::Timeout::RecvResponse => "waiting for the answer's headers",
        ureq::Timeout::Global => "the whole request",
        _ => "the request",
    };
    format!("timed out ({what}: {})", t)
}

/// A `Location` made absolute against the URL that sent it (absolute or root-relative;
/// the Hub sends one or the other). The scheme is matched in any case (RFC 3986
/// §3.1: schemes are case-insensitive), so `HTTP://` is followed as `http://` is.
fn join_location(current: &str, location: &str) -> Result<String> {
    if hub::origin(location).is_some() {
        return Ok(location.to_string());
    }
    if location.starts_with('/') && !location.starts_with("//") {
        let (scheme, host, port) =
            hub::origin(current).ok_or_else(|| anyhow!("bad URL {current}"))?;
        return Ok(format!("{scheme}://{host}:{port}{location}"));
    }
    bail!("unsupported redirect target")
}

/// A 40-hex commit id.
pub fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_joined() {
        assert_eq!(
            join_location("https://h.co/a/b", "/api/x").unwrap(),
            "https://h.co:443/api/x"
        );
        assert_eq!(
            join_location("https://h.co/a", "http://c:9/z").unwrap(),
            "http://c:9/z"
        );
        assert!(join_location("https://h.co/a", "//evil/x").is_err());
        // Schemes in any case (an upper-case redirect was refused).
        assert_eq!(
            join_location("https://h.co/a", "HTTP://c:9/z").unwrap(),
            "HTTP://c:9/z"
        );
        assert_eq!(
            join_location("https://h.co/a", "Https://cdn.h.co/z").unwrap(),
            "Https://cdn.h.co/z"
        );
        assert!(join_location("https://h.co/a", "ftp://h.co/z").is_err());
    }

    #[test]
    fn a_timeout_is_worded_as_a_timeout() {
        let words = timeout_words(ureq::Timeout::RecvResponse);
        assert!(words.starts_with("timed out"), "{words}");
        assert!(words.contains("headers"), "{words}");
    }
}
