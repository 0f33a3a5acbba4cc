//! `gpumem-agent estimate --model` against a hostile Hub on loopback (a mirror that
//! sends no `X-Repo-Commit`, whose listing and files are made to cost): the work stays
//! bounded and nothing it sends reaches the terminal raw.
//!
//! - a listing of 160 000 one-part GGUF split sets: grouped in linear time, the
//!   "several GGUF models" message names 20 and counts the rest;
//! - eight legal 70 MB safetensors headers: at most `HEADER_BYTES_AT_ONCE` plus one
//!   header are asked for at once (the server counts what is outstanding), and the
//!   agent's peak memory stays under 700 MB (1.25 GB for 8 × 100 MB before);
//! - terminal escapes in listed paths and in `config.json` are shown escaped.
//!
//! Each test prints its wall time and the agent's peak resident memory (GNU time's
//! `%M`, else `wait4`'s `ru_maxrss`) with `--nocapture`.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A part of a served file.
#[derive(Clone)]
enum Segment {
    Bytes(Vec<u8>),
    /// This many spaces (JSON whitespace), never held in memory.
    Spaces(u64),
}

impl Segment {
    fn len(&self) -> u64 {
        match self {
            Segment::Bytes(b) => b.len() as u64,
            Segment::Spaces(n) => *n,
        }
    }
}

/// What a path answers: a status, headers and a body of segments.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<Segment>,
}

type Route = dyn Fn(&str) -> Option<Vec<Segment>> + Send + Sync;

/// A Hub that answers `route(path)` (200, or 206 for a `Range`), 404 otherwise, with
/// no `X-Repo-Commit`, and counts the bytes it is asked for and has not yet sent.
struct HostileHub {
    port: u16,
    outstanding: Arc<AtomicU64>,
    most_outstanding: Arc<AtomicU64>,
}

impl HostileHub {
    fn start(route: Box<Route>) -> HostileHub {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let outstanding = Arc::new(AtomicU64::new(0));
        let most_outstanding = Arc::new(AtomicU64::new(0));
        let route: Arc<Route> = Arc::from(route);
        let (o, m) = (Arc::clone(&outstanding), Arc::clone(&most_outstanding));
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (route, o, m) = (Arc::clone(&route), Arc::clone(&o), Arc::clone(&m));
                std::thread::spawn(move || serve(conn, &*route, &o, &m));
            }
        });
        HostileHub {
            port,
            outstanding,
            most_outstanding,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

fn serve(mut conn: TcpStream, route: &Route, outstanding: &AtomicU64, most: &AtomicU64) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
        match conn.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let path = head.split(' ').nth(1).unwrap_or("").to_string();
    let range = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        let (a, b) = k
            .eq_ignore_ascii_case("range")
            .then_some(v.trim().strip_prefix("bytes=")?)?
            .split_once('-')?;
        Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
    });
    let reply = match route(&path) {
        None => Reply {
            status: 404,
            headers: vec![("X-Error-Code".into(), "EntryNotFound".into())],
            body: vec![],
        },
        Some(body) => {
            let total: u64 = body.iter().map(Segment::len).sum();
            match range {
                Some((a, b)) if a < total => {
                    let b = b.min(total - 1);
                    Reply {
                        status: 206,
                        headers: vec![("Content-Range".into(), format!("bytes {a}-{b}/{total}"))],
                        body: slice(&body, a, b + 1),
                    }
                }
                _ => Reply {
                    status: 200,
                    headers: vec![],
                    body,
                },
            }
        }
    };
    let len: u64 = reply.body.iter().map(Segment::len).sum();
    let now = outstanding.fetch_add(len, Ordering::SeqCst) + len;
    most.fetch_max(now, Ordering::SeqCst);
    let mut text = format!(
        "HTTP/1.1 {} X\r\nContent-Length: {len}\r\nConnection: close\r\n",
        reply.status
    );
    for (k, v) in &reply.headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("\r\n");
    let spaces = vec![b' '; 1 << 16];
    let mut ok = conn.write_all(text.as_bytes()).is_ok();
    for s in &reply.body {
        match s {
            Segment::Bytes(b) => ok = ok && conn.write_all(b).is_ok(),
            Segment::Spaces(n) => {
                let mut left = *n;
                while ok && left > 0 {
                    let k = left.min(spaces.len() as u64) as usize;
                    ok = conn.write_all(&spaces[..k]).is_ok();
                    left -= k as u64;
                }
            }
        }
    }
    outstanding.fetch_sub(len, Ordering::SeqCst);
}

/// Bytes `a..b` of a body of segments.
fn slice(body: &[Segment], a: u64, b: u64) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut at = 0u64;
    for s in body {
        let (start, end) = (at, at + s.len());
        at = end;
        let (lo, hi) = (a.max(start), b.min(end));
        if lo >= hi {
            continue;
        }
        out.push(match s {
            Segment::Bytes(v) => {
                Segment::Bytes(v[(lo - start) as usize..(hi - start) as usize].to_vec())
            }
            Segment::Spaces(_) => Segment::Spaces(hi - lo),
        });
    }
    out
}

const CONFIG: &str = r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
"num_key_value_heads":2,"intermediate_size":128,"vocab_size":256,"torch_dtype":"bfloat16"}"#;

/// What one agent run did: exit code, stderr, wall time, peak resident memory (kB).
struct Measured {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
    max_rss_kb: i64,
}

/// Runs `estimate` with `args` against `hub`, killed past `limit`.
fn estimate(hub: &HostileHub, home: &Path, args: &[&str], limit: Duration) -> Measured {
    let err_path = home.join("stderr");
    let out_path = home.join("stdout");
    let time_path = home.join("time");
    // Linux carries the forking process's resident peak into its child's `ru_maxrss`
    // across exec, so the agent's own peak is read by GNU time (small itself) where it
    // is installed; otherwise wait4's figure, an upper bound, is used.
    let gnu_time = Path::new("/usr/bin/time").is_file();
    let mut cmd = if gnu_time {
        let mut c = Command::new("/usr/bin/time");
        c.args(["-f", "%M", "-o"])
            .arg(&time_path)
            .arg(env!("CARGO_BIN_EXE_gpumem-agent"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
    };
    cmd.arg("estimate")
        .args(args)
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HOME", home)
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("HF_HOME", home.join("hf"))
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"));
    for v in [
        "HF_TOKEN",
        "HF_TOKEN_PATH",
        "http_proxy",
        "HTTP_PROXY",
        "ALL_PROXY",
    ] {
        cmd.env_remove(v);
    }
    // A group of its own, so that a run past the limit is killed whole (time and agent).
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let t0 = Instant::now();
    // Reaped by wait4 below (which also gives its peak memory), not by Child::wait.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().expect("agent");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    #[allow(unsafe_code)]
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 on our own child with valid pointers.
        #[allow(unsafe_code)]
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        if t0.elapsed() > limit {
            // SAFETY: signals our own child.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::wait4(pid, &mut status, 0, &mut usage);
            }
            panic!("the agent still ran after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = t0.elapsed();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let max_rss_kb = if gnu_time {
        std::fs::read_to_string(&time_path)
            .ok()
            .and_then(|t| t.lines().last()?.trim().parse::<i64>().ok())
            .unwrap_or(usage.ru_maxrss)
    } else {
        usage.ru_maxrss
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    println!(
        "{args:?}: {took:.2?}, peak {} MB resident",
        max_rss_kb / 1000
    );
    Measured {
        code,
        stdout,
        stderr,
        took,
        max_rss_kb,
    }
}

fn listing(paths: impl Iterator<Item = String>) -> Vec<Segment> {
    let entries: Vec<serde_json::Value> = paths
        .map(|p| serde_json::json!({"type": "file", "path": p, "size": 1, "oid": "0"}))
        .collect();
    vec![Segment::Bytes(serde_json::to_vec(&entries).expect("json"))]
}

fn no_raw_escapes(stderr: &str) {
    assert!(
        !stderr
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "a control character reached the terminal: {stderr:?}"
    );
}

#[test]
fn a_listing_of_160_000_split_sets_is_answered_quickly_and_briefly() {
    let home = tempfile::tempdir().expect("tempdir");
    let tree = listing(
        (0..160_000)
            .map(|i| format!("m{i}-00001-of-00002.gguf"))
            .chain(["\u{1b}]0;pwned\u{7}-00001-of-00002.gguf".to_string()]),
    );
    let hub = HostileHub::start(Box::new(move |path: &str| {
        if path.starts_with("/api/models/org/m/tree/main") {
            Some(tree.clone())
        } else if path == "/org/m/resolve/main/config.json" {
            Some(vec![Segment::Bytes(CONFIG.as_bytes().to_vec())])
        } else {
            None
        }
    }));
    let m = estimate(
        &hub,
        home.path(),
        &["--model", "org/m"],
        Duration::from_secs(120),
    );
    assert_eq!(m.code, Some(2), "{}", m.stderr);
    assert!(m.stderr.contains("160001 GGUF models"), "{}", m.stderr);
    assert!(m.stderr.contains("and 159981 more"), "{}", m.stderr);
    assert!(
        m.stderr.len() < 8_000,
        "{} bytes of message",
        m.stderr.len()
    );
    assert!(m.stderr.contains("\\u001b]0;pwned\\u0007"), "{}", m.stderr);
    no_raw_escapes(&m.stderr);
    assert!(m.took < Duration::from_secs(30), "{:?}", m.took);
}

#[test]
fn sets_claiming_a_thousand_parts_cost_what_is_listed() {
    // 20 000 sets "of-01000" with one part each (a ~1.2 MB page): every missing part's
    // name was made (20 million names, 1.43 GB); now counted, 20 named per set.
    let home = tempfile::tempdir().expect("tempdir");
    let tree = listing((0..20_000).map(|i| format!("m{i}-00001-of-01000.gguf")));
    let hub = HostileHub::start(Box::new(move |path: &str| {
        if path.starts_with("/api/models/org/m/tree/main") {
            Some(tree.clone())
        } else if path == "/org/m/resolve/main/config.json" {
            Some(vec![Segment::Bytes(CONFIG.as_bytes().to_vec())])
        } else {
            None
        }
    }));
    let m = estimate(
        &hub,
        home.path(),
        &["--model", "org/m"],
        Duration::from_secs(120),
    );
    assert_eq!(m.code, Some(2), "{}", m.stderr);
    assert!(
        m.stderr
            .contains("incomplete: 999 of its 1000 split files missing"),
        "{}",
        m.stderr
    );
    assert!(m.max_rss_kb < 400_000, "peak {} kB", m.max_rss_kb);
}

#[test]
fn paths_and_config_fields_reach_the_terminal_escaped() {
    let home = tempfile::tempdir().expect("tempdir");
    let hostile_config = CONFIG.replace("\"llama\"", "\"\\u001b]52;c;ZXZpbA==\\u0007\\u001b[2J\"");
    let hub = HostileHub::start(Box::new(move |path: &str| {
        if path.starts_with("/api/models/org/m/tree/main") {
            Some(listing(
                [
                    "READ\u{1b}[2JME.md".to_string(),
                    "x\u{202e}gpj.txt".to_string(),
                ]
                .into_iter(),
            ))
        } else if path == "/org/m/resolve/main/config.json" {
            Some(vec![Segment::Bytes(hostile_config.as_bytes().to_vec())])
        } else {
            None
        }
    }));
    let m = estimate(
        &hub,
        home.path(),
        &["--model", "org/m"],
        Duration::from_secs(60),
    );
    assert_eq!(m.code, Some(2), "{}", m.stderr);
    assert!(m.stderr.contains("no weights found"), "{}", m.stderr);
    assert!(m.stderr.contains("READ\\u001b[2JME.md"), "{}", m.stderr);
    assert!(m.stderr.contains("x\\u202egpj.txt"), "{}", m.stderr);
    no_raw_escapes(&m.stderr);
    assert!(!m.stderr.contains('\u{202e}'));

    // The same config beside a weight file: its model_type is named in the table's
    // warnings (stdout), escaped too.
    let home = tempfile::tempdir().expect("tempdir");
    let hostile_config = CONFIG.replace("\"llama\"", "\"\\u001b]52;c;ZXZpbA==\\u0007\"");
    let hub = HostileHub::start(Box::new(move |path: &str| {
        let file = path.strip_prefix("/org/w/resolve/main/");
        if path.starts_with("/api/models/org/w/tree/main") {
            Some(listing(
                ["config.json", "model.safetensors"]
                    .map(String::from)
                    .into_iter(),
            ))
        } else if file == Some("config.json") {
            Some(vec![Segment::Bytes(hostile_config.as_bytes().to_vec())])
        } else if file == Some("model.safetensors") {
            Some(padded_safetensors("model.embed_tokens.weight", 0))
        } else {
            None
        }
    }));
    let m = estimate(
        &hub,
        home.path(),
        &["--model", "org/w"],
        Duration::from_secs(60),
    );
    assert_eq!(m.code, Some(0), "{}", m.stderr);
    assert!(
        m.stdout.contains("\\u001b]52;c;ZXZpbA==\\u0007"),
        "{}",
        m.stdout
    );
    no_raw_escapes(&m.stdout);
    no_raw_escapes(&m.stderr);
}

/// A safetensors file of one BF16 tensor whose header is padded to `pad` bytes with
/// spaces (legal: JSON whitespace), served without being held in memory.
fn padded_safetensors(name: &str, pad: u64) -> Vec<Segment> {
    let tail = format!(r#""{name}":{{"dtype":"BF16","shape":[64,64],"data_offsets":[0,8192]}}}}"#);
    let n = 1 + pad + tail.len() as u64;
    vec![
        Segment::Bytes(n.to_le_bytes().to_vec()),
        Segment::Bytes(b"{".to_vec()),
        Segment::Spaces(pad),
        Segment::Bytes(tail.into_bytes()),
        Segment::Spaces(8192),
    ]
}

#[test]
fn eight_70_mb_headers_are_read_within_the_header_budget() {
    const FILES: usize = 8;
    const PAD: u64 = 70_000_000;
    let home = tempfile::tempdir().expect("tempdir");
    let names: Vec<String> = (1..=FILES)
        .map(|i| format!("model-{i:05}-of-{FILES:05}.safetensors"))
        .collect();
    let index = serde_json::json!({
        "metadata": {},
        "weight_map": names.iter().enumerate()
            .map(|(i, n)| (format!("model.layers.{i}.mlp.up_proj.weight"), serde_json::json!(n)))
            .collect::<serde_json::Map<_, _>>(),
    })
    .to_string();
    let tree = listing(names.iter().cloned().chain(["config.json".into()]));
    let hub = HostileHub::start(Box::new(move |path: &str| {
        let file = path.strip_prefix("/org/m/resolve/main/");
        if path.starts_with("/api/models/org/m/tree/main") {
            Some(tree.clone())
        } else if file == Some("config.json") {
            Some(vec![Segment::Bytes(CONFIG.as_bytes().to_vec())])
        } else if file == Some("model.safetensors.index.json") {
            Some(vec![Segment::Bytes(index.as_bytes().to_vec())])
        } else {
            let file = file?;
            let i: usize = file.get(6..11)?.parse().ok()?;
            Some(padded_safetensors(
                &format!("model.layers.{}.mlp.up_proj.weight", i - 1),
                PAD,
            ))
        }
    }));
    let m = estimate(
        &hub,
        home.path(),
        &["--model", "org/m", "--json"],
        Duration::from_secs(300),
    );
    assert_eq!(m.code, Some(0), "{}", m.stderr);
    let most = hub.most_outstanding.load(Ordering::SeqCst);
    println!("most header bytes asked for at once: {most}");
    assert_eq!(hub.outstanding.load(Ordering::SeqCst), 0);
    // The budget (256 MiB) plus the one file that may always finish.
    assert!(
        most <= (256 << 20) + PAD + 1_000,
        "{most} bytes asked for at once"
    );
    assert!(m.max_rss_kb < 700_000, "peak {} kB", m.max_rss_kb);
    // The cache keeps what was read, within its budget (512 MiB): a second lookup is
    // answered without reading the headers again only for what fits.
    let cached: u64 = walk_sizes(&home.path().join("cache"));
    assert!(cached <= 512 << 20, "{cached} bytes cached");
}

fn walk_sizes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            total += if p.is_dir() {
                walk_sizes(&p)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            };
        }
    }
    total
}
