//! Hardening, against the real `gpumem-agent serve` over loopback sockets: the agent never
//! dies of a closed output pipe, cannot be locked out by connections that drip or idle
//! on their request head, sends the page's Content-Security-Policy as a header, and
//! logs what a refused client sent escaped.
//!
//! Every test is bounded in time and in connections (200 drippers at most).

#![allow(clippy::disallowed_macros)] // the test harness captures test output

mod serve_support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpumem_proto::wire::AgentMessage;
use serve_support::{Agent, raw_http, recv_frame, write_synthetic};

fn replay_agent(dir: &tempfile::TempDir, closed_output: bool) -> Agent {
    let file = write_synthetic(dir.path());
    let file = file.to_str().expect("UTF-8 temp path");
    let args = ["--replay", file, "--replay-delay-ms", "1"];
    if closed_output {
        Agent::start_with_closed_output(&args)
    } else {
        Agent::start(&args)
    }
}

fn get(agent: &Agent, path: &str) -> (u16, String) {
    raw_http(
        agent.port,
        format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            agent.host()
        )
        .as_bytes(),
    )
}

/// Finding 1: with both output pipes closed, a refused request and a pairing (each of
/// which logs a line to stderr) leave the server running and serving.
#[test]
fn serve_with_closed_stdout_and_stderr_survives_a_refusal_and_a_pairing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut agent = replay_agent(&dir, true);
    // A page on another loopback origin fetching the agent: refused and logged.
    let (status, _) = raw_http(
        agent.port,
        format!(
            "GET / HTTP/1.1\r\nHost: {}\r\nOrigin: http://127.0.0.1:1\r\n\r\n",
            agent.host()
        )
        .as_bytes(),
    );
    assert_eq!(status, 403);
    // A refused WebSocket (wrong token) and a good pairing: each logs a line.
    assert!(
        agent
            .connect("token=wrong", Some(&agent.origin()), None)
            .is_err()
    );
    let (mut client, hello) = agent.paired_client();
    assert!(matches!(hello.message, AgentMessage::Hello { .. }));
    assert!(matches!(
        recv_frame(&mut client).map(|f| f.message),
        Some(AgentMessage::Environment { .. })
    ));
    drop(client);
    std::thread::sleep(Duration::from_millis(200));
    assert!(agent.is_running(), "the agent died on a closed output pipe");
    assert_eq!(get(&agent, "/").0, 200, "still serving after the writes");
}

/// Finding 1, the other subcommands: a closed stdout (and stderr) ends them with their
/// normal exit code, never an abort (134) or a panic (101).
#[test]
fn estimate_environment_and_help_survive_closed_output() {
    let cases: [&[&str]; 4] = [
        &["estimate", "--parameters", "7000000000", "--bits", "16"],
        &["environment"],
        &["--help"],
        &["estimate", "--no-such-flag"],
    ];
    for args in cases {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpumem-agent");
        // Close both read ends before the agent writes anything.
        drop(child.stdout.take());
        drop(child.stderr.take());
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "{args:?} did not end");
            std::thread::sleep(Duration::from_millis(20));
        };
        let code = status.code();
        assert!(
            matches!(code, Some(0..=2)),
            "{args:?} ended with {status:?} on a closed output pipe"
        );
    }
}

/// One attacking connection: either idle (sends nothing) or dripping a request head one
/// byte at a time, never finishing it.
struct Dripper {
    stream: TcpStream,
    drips: bool,
}

/// Finding 2: 200 connections that drip their head or idle must not keep a good client
/// from loading the page or pairing within a second.
#[test]
fn two_hundred_drippers_do_not_lock_out_a_good_client() {
    const DRIPPERS: usize = 200;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut agent = replay_agent(&dir, false);
    let port = agent.port;
    let host = agent.host();

    let open = move |drips: bool| -> Option<Dripper> {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
        if drips {
            let head = format!("GET / HTTP/1.1\r\nHost: {host}\r\nX-Slow: ");
            stream.write_all(head.as_bytes()).ok()?;
        }
        stream.set_nonblocking(true).ok()?;
        Some(Dripper { stream, drips })
    };
    let mut drippers: Vec<Dripper> = (0..DRIPPERS)
        .map(|i| open(i % 2 == 0).expect("connect a dripper"))
        .collect();
    // Keep all 200 in flight for the whole test, as an attacker would: drip a byte per
    // connection every 100 ms, and reconnect any the agent closes (bounded).
    let stop = Arc::new(AtomicBool::new(false));
    let dripping = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut reconnects = 0u32;
            let end = Instant::now() + Duration::from_secs(30);
            while !stop.load(Ordering::Relaxed) && Instant::now() < end {
                for d in &mut drippers {
                    let mut buf = [0u8; 256];
                    let gone = |r: std::io::Result<usize>| match r {
                        Ok(0) => true,
                        Ok(_) => false,
                        Err(e) => e.kind() != ErrorKind::WouldBlock,
                    };
                    let closed = gone(d.stream.read(&mut buf))
                        || (d.drips && gone(d.stream.write(b"a").map(|n| n.max(1))));
                    if closed
                        && reconnects < 5_000
                        && let Some(fresh) = open(d.drips)
                    {
                        *d = fresh;
                        reconnects += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            reconnects
        })
    };
    // Let the agent take every dripper in.
    std::thread::sleep(Duration::from_millis(500));

    let mut worst = Duration::ZERO;
    for round in 0..3 {
        let started = Instant::now();
        for path in ["/", "/agent/"] {
            let (status, answer) = get(&agent, path);
            assert_eq!(
                status, 200,
                "round {round}: GET {path} under 200 drippers: {answer:.200}"
            );
        }
        let (mut client, _) = agent.paired_client();
        assert!(matches!(
            recv_frame(&mut client).map(|f| f.message),
            Some(AgentMessage::Environment { .. })
        ));
        let took = started.elapsed();
        worst = worst.max(took);
        assert!(
            took < Duration::from_secs(1),
            "round {round}: page load and pairing took {took:?} under 200 drippers"
        );
        // Spread the rounds past the 3 s head deadline: the lock-out lasted as long as
        // the drippers kept at it.
        std::thread::sleep(Duration::from_millis(1_200));
    }
    stop.store(true, Ordering::Relaxed);
    let reconnects = dripping.join().expect("dripper thread");
    println!(
        "200 drippers: page load + pairing served in at most {worst:?}; the drippers reconnected {reconnects} time(s)"
    );
    assert!(agent.is_running());
}

/// Finding 3: `serve` sends the page's policy as a header: no 'unsafe-inline' for
/// scripts or styles, no plugins, no <base>, no framing.
#[test]
fn pages_are_served_with_the_content_security_policy_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = replay_agent(&dir, false);
    for path in ["/", "/agent/"] {
        let (status, answer) = get(&agent, path);
        assert_eq!(status, 200);
        let head = answer.split("\r\n\r\n").next().unwrap_or_default();
        let policy = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Security-Policy: "))
            .unwrap_or_else(|| panic!("no CSP header for {path}: {head}"));
        assert_eq!(
            head.matches("Content-Security-Policy:").count(),
            1,
            "one policy header"
        );
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        let script_src = policy
            .split(';')
            .map(str::trim)
            .find(|d| d.starts_with("script-src") || d.starts_with("default-src 'none'"))
            .unwrap_or_else(|| panic!("no script-src in {policy}"));
        assert!(!script_src.contains("unsafe-inline"), "{policy}");
        // Nor for styles: the pages set none inline.
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        if agent_has_page(&answer) {
            assert!(policy.contains("object-src 'none'"), "{policy}");
            assert!(policy.contains("base-uri 'none'"), "{policy}");
            // The header is the page's own meta policy plus frame-ancestors.
            let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
            let meta = body
                .split("<meta http-equiv=\"Content-Security-Policy\" content=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_else(|| panic!("no CSP meta tag in {path}"));
            assert_eq!(policy, format!("{meta}; frame-ancestors 'none'"));
        }
    }
}

/// Whether the answer is the built page (not the "not built" notice of a fresh clone).
fn agent_has_page(answer: &str) -> bool {
    answer.contains("<script")
}

/// Finding 5: what a refused client sent reaches the log escaped — no terminal escape,
/// no bidirectional override, no raw non-ASCII.
#[test]
fn refused_requests_are_logged_escaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = replay_agent(&dir, false);
    // A path with a right-to-left override and a Host with one and an escape-like text.
    let hostile = "GET /\u{202e}gpj.exe HTTP/1.1\r\nHost: evil\u{202e}\u{1b}[2J\r\n\r\n";
    let (status, _) = raw_http(agent.port, hostile.as_bytes());
    // httparse may refuse the raw ESC as malformed (400, not logged); also send one it
    // accepts so a refusal is logged for sure.
    assert!(status == 403 || status == 400, "{status}");
    let (status, _) = raw_http(
        agent.port,
        format!(
            "GET /\u{202e}txt.exe HTTP/1.1\r\nHost: {}\r\nOrigin: http://a\u{202e}b.example\r\n\r\n",
            agent.host()
        )
        .as_bytes(),
    );
    assert_eq!(status, 403);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut lines = Vec::new();
    while Instant::now() < deadline && !lines.iter().any(|l: &String| l.contains("txt.exe")) {
        std::thread::sleep(Duration::from_millis(50));
        lines.extend(agent.stderr_lines());
    }
    let refused: Vec<&String> = lines.iter().filter(|l| l.contains("refused")).collect();
    assert!(
        refused.iter().any(|l| l.contains("\\u{202e}txt.exe")),
        "the refused path is logged escaped: {refused:?}"
    );
    for line in &refused {
        assert!(
            line.chars().all(|c| (' '..='~').contains(&c)),
            "a log line carries a raw control or non-ASCII character: {line:?}"
        );
    }
}
