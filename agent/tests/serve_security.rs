//! Security and robustness of `gpumem-agent serve`, against the real binary
//! over real loopback sockets: every refusal the security rules list, each with its status and
//! reason, and — after all of them — a good client still paired and served.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

mod serve_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use gpumem_proto::results::ResultsFile;
use gpumem_proto::wire::{
    AgentMessage, ClientMessage, ErrorCode, MeasureRequest, PROTOCOL_VERSION, RunFailure,
};
use serde_json::Value;
use serve_support::{
    Agent, Client, raw_http, recv_close, recv_frame, send, send_text, write_synthetic,
};
use tungstenite::Message;

fn replay_agent(dir: &tempfile::TempDir, delay_ms: &str) -> Agent {
    let file = write_synthetic(dir.path());
    let file = file.to_str().expect("UTF-8 temp path");
    Agent::start(&["--replay", file, "--replay-delay-ms", delay_ms])
}

/// The next frame, which must be an `error` with `code`; returns its message.
fn expect_error(client: &mut Client, code: ErrorCode) -> String {
    match recv_frame(client).map(|f| f.message) {
        Some(AgentMessage::Error { code: got, message }) if got == code => message,
        other => panic!("expected error {code:?}, got {other:?}"),
    }
}

/// Ping round trip: proves the connection is still usable.
fn still_usable(client: &mut Client, nonce: u64) {
    send(client, &ClientMessage::Ping { nonce });
    match recv_frame(client).map(|f| f.message) {
        Some(AgentMessage::Pong { nonce: got }) => assert_eq!(got, nonce),
        other => panic!("expected pong {nonce}, got {other:?}"),
    }
}

/// Runs a whole replay on `client` and checks it: run_started, device_started, every
/// phase in order, device_finished, run_finished with the file unchanged — every frame
/// marked replay.
fn full_replay(client: &mut Client, expected: &ResultsFile, raw: &Value) {
    send(
        client,
        &ClientMessage::StartMeasure(MeasureRequest::SEED_EXAMPLE),
    );
    let mut phases = Vec::new();
    let mut saw_started = false;
    let mut saw_device = false;
    loop {
        let frame = recv_frame(client).expect("replay frame");
        assert!(frame.replay, "every replayed frame is marked replay");
        assert!(frame.sent_unix_ns > 0);
        match frame.message {
            AgentMessage::RunStarted { request, .. } => {
                saw_started = true;
                assert_eq!(
                    request,
                    MeasureRequest::from_recorded(&expected.dimensions, &expected.protocol)
                );
            }
            AgentMessage::DeviceStarted { device, .. } => {
                assert!(saw_started);
                saw_device = true;
                assert!(expected.runs.iter().any(|r| r.device == device), "{device}");
            }
            AgentMessage::Phase { result, .. } => phases.push(*result),
            AgentMessage::DeviceFinished { .. } => {}
            AgentMessage::RunFinished { ok, result, .. } => {
                assert_eq!(ok, !expected.any_failed());
                assert_eq!(&result, raw, "the results document is forwarded unchanged");
                break;
            }
            other => panic!("unexpected frame during replay: {other:?}"),
        }
    }
    assert!(saw_device);
    let all: Vec<_> = expected
        .runs
        .iter()
        .flat_map(|r| r.phases.clone())
        .collect();
    assert_eq!(phases, all, "every phase, in order");
}

#[test]
fn every_refusal_is_403_with_a_reason_and_a_good_client_is_still_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = replay_agent(&dir, "5");
    let (port, token, origin) = (agent.port, agent.token.clone(), agent.origin());
    let good_query = format!("token={token}");
    let mut observed = Vec::new();

    // WebSocket handshake refusals: status 403 and the reason in the body.
    // (case, query, Origin, Host, expected reason)
    type Case = (
        &'static str,
        String,
        Option<String>,
        Option<String>,
        &'static str,
    );
    let cases: [Case; 6] = [
        (
            "wrong token",
            format!("token={}", "0".repeat(64)),
            Some(origin.clone()),
            None,
            "wrong token",
        ),
        (
            "missing token",
            String::new(),
            Some(origin.clone()),
            None,
            "missing token",
        ),
        (
            "foreign Origin",
            good_query.clone(),
            Some("http://evil.example".into()),
            None,
            "not allowed",
        ),
        (
            "missing Origin",
            good_query.clone(),
            None,
            None,
            "missing Origin",
        ),
        (
            "foreign Host",
            good_query.clone(),
            Some(origin.clone()),
            Some(format!("evil.example:{port}")),
            "is not this agent",
        ),
        (
            "wrong port in Host",
            good_query.clone(),
            Some(origin.clone()),
            Some(format!("127.0.0.1:{}", port.wrapping_add(1))),
            "is not this agent",
        ),
    ];
    for (name, query, origin_header, host, reason) in cases {
        match agent.connect(&query, origin_header.as_deref(), host.as_deref()) {
            Ok(_) => panic!("{name}: the agent accepted the WebSocket"),
            Err((status, body)) => {
                assert_eq!(status, 403, "{name}: {body}");
                assert!(
                    body.contains(reason),
                    "{name}: reason {reason:?} not in {body:?}"
                );
                observed.push(format!("{name}: {status} {}", body.trim()));
            }
        }
    }

    // localhost is the agent's other name; it is accepted.
    let mut by_name = agent
        .connect(
            &good_query,
            Some(&format!("http://localhost:{port}")),
            Some(&format!("localhost:{port}")),
        )
        .expect("localhost Host and Origin are accepted");
    drop(by_name.close(None));

    // Protocol abuse on a paired connection: error replies, the connection survives.
    let (mut client, hello) = agent.paired_client();
    assert!(hello.replay, "a replaying agent says so in its hello");
    assert!(matches!(
        hello.message,
        AgentMessage::Hello {
            version: PROTOCOL_VERSION,
            ..
        }
    ));
    assert!(matches!(
        recv_frame(&mut client).map(|f| f.message),
        Some(AgentMessage::Environment { .. })
    ));
    send_text(&mut client, "{this is not json");
    observed.push(format!(
        "malformed JSON: error {}",
        expect_error(&mut client, ErrorCode::Malformed)
    ));
    still_usable(&mut client, 1);
    send_text(
        &mut client,
        r#"{"type":"run_command","command":"rm -rf /"}"#,
    );
    observed.push(format!(
        "unknown type: error {}",
        expect_error(&mut client, ErrorCode::UnknownMessage)
    ));
    still_usable(&mut client, 2);
    send_text(&mut client, r#"{"type":"start_measure","batch":"two"}"#);
    expect_error(&mut client, ErrorCode::BadFields);
    let too_big = MeasureRequest {
        width: 1 << 40,
        ..MeasureRequest::SEED_EXAMPLE
    };
    send(&mut client, &ClientMessage::StartMeasure(too_big));
    observed.push(format!(
        "out-of-bounds request: error {}",
        expect_error(&mut client, ErrorCode::OutOfBounds)
    ));
    client
        .send(Message::binary(vec![0u8; 16]))
        .expect("send binary");
    expect_error(&mut client, ErrorCode::Binary);
    send(&mut client, &ClientMessage::Cancel);
    expect_error(&mut client, ErrorCode::NoRun);
    still_usable(&mut client, 3);

    // An oversized frame closes that connection with 1009 and its reason.
    let (mut big, _) = agent.paired_client();
    let _ = recv_frame(&mut big); // environment
    let _ = big.send(Message::text("x".repeat(1024 * 1024)));
    let close = recv_close(&mut big);
    assert!(
        matches!(&close, Some((1009, reason)) if reason.contains("too large")),
        "oversized: {close:?}"
    );
    observed.push(format!("oversized frame (1 MiB): close {close:?}"));

    // A burst of half-open connections: each is answered or closed within the head
    // deadline (3 s) instead of holding a thread; the overflow gets 503 at once.
    let burst_started = Instant::now();
    let mut half_open: Vec<TcpStream> = (0..80)
        .map(|i| {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            if i % 2 == 1 {
                let _ = stream.write_all(
                    format!("GET /ws?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n")
                        .as_bytes(),
                );
            }
            stream
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    for stream in &mut half_open {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer);
        let status = text.get(9..12).unwrap_or("closed").to_owned();
        *statuses.entry(status).or_default() += 1;
    }
    let burst_time = burst_started.elapsed();
    assert!(
        burst_time < Duration::from_secs(8),
        "half-open connections released in {burst_time:?}"
    );
    assert_eq!(statuses.values().sum::<usize>(), 80);
    assert!(
        statuses.get("408").copied().unwrap_or(0) > 0,
        "timed-out heads get 408: {statuses:?}"
    );
    observed.push(format!(
        "80 half-open connections: all released after {burst_time:.1?}: {statuses:?}"
    ));
    drop(half_open);

    // Plain HTTP: Host checked on every request.
    let (status, text) = raw_http(
        port,
        format!("GET / HTTP/1.1\r\nHost: evil.example:{port}\r\n\r\n").as_bytes(),
    );
    assert_eq!(status, 403, "{text}");
    observed.push(format!("GET / with foreign Host: {status}"));

    // After all of that, the first client is still usable and a new good client is
    // served a whole replay.
    still_usable(&mut client, 4);
    let (mut good, _) = agent.paired_client();
    let _ = recv_frame(&mut good); // environment
    let file = dir.path().join("synthetic.json");
    let raw: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    let expected: ResultsFile = serde_json::from_value(raw.clone()).expect("results file");
    full_replay(&mut good, &expected, &raw);
    observed.push("afterwards: a good client paired and received the whole replay".into());

    for line in observed {
        println!("security: {line}");
    }
}

#[test]
fn static_page_and_http_refusals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = replay_agent(&dir, "5");
    let port = agent.port;
    let host = agent.host();

    let (status, text) = raw_http(
        port,
        format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
    );
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("Content-Type: text/html"), "{text}");
    assert!(text.contains("X-Frame-Options: DENY"), "{text}");
    assert!(
        text.contains("<html") || text.contains("<!doctype") || text.contains("<!DOCTYPE"),
        "{text}"
    );

    let refusals: [(&str, String, u16, &str); 7] = [
        (
            "foreign Host",
            format!("GET / HTTP/1.1\r\nHost: evil.example:{port}\r\n\r\n"),
            403,
            "not this agent",
        ),
        (
            "no Host",
            "GET / HTTP/1.0\r\n\r\n".into(),
            403,
            "missing Host",
        ),
        (
            "two Hosts",
            format!("GET / HTTP/1.1\r\nHost: {host}\r\nHost: evil.example\r\n\r\n"),
            403,
            "duplicated",
        ),
        (
            "foreign Origin",
            format!("GET / HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example\r\n\r\n"),
            403,
            "not allowed",
        ),
        (
            "POST",
            format!("POST / HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n"),
            405,
            "GET",
        ),
        (
            "path traversal",
            format!("GET /../../etc/passwd HTTP/1.1\r\nHost: {host}\r\n\r\n"),
            404,
            "no such file",
        ),
        (
            "oversized head",
            format!(
                "GET / HTTP/1.1\r\nHost: {host}\r\nX: {}\r\n\r\n",
                "a".repeat(16 * 1024)
            ),
            431,
            "too large",
        ),
    ];
    for (name, request, expected, reason) in refusals {
        let (status, text) = raw_http(port, request.as_bytes());
        assert_eq!(status, expected, "{name}: {text}");
        assert!(text.contains(reason), "{name}: {reason:?} not in {text}");
        println!("http: {name}: {}", text.lines().next().unwrap_or(""));
    }

    // /ws with the right token but no upgrade headers is not a handshake: 400.
    let request = format!(
        "GET /ws?token={} HTTP/1.1\r\nHost: {host}\r\nOrigin: {}\r\n\r\n",
        agent.token,
        agent.origin()
    );
    let (status, text) = raw_http(port, request.as_bytes());
    assert_eq!(status, 400, "{text}");
}

#[test]
fn version_mismatch_and_hello_first_are_refused_in_words() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = replay_agent(&dir, "5");
    let mut client = agent
        .connect(
            &format!("token={}", agent.token),
            Some(&agent.origin()),
            None,
        )
        .expect("handshake");
    send(
        &mut client,
        &ClientMessage::StartMeasure(MeasureRequest::SEED_EXAMPLE),
    );
    expect_error(&mut client, ErrorCode::HelloFirst);
    send(
        &mut client,
        &ClientMessage::Hello {
            version: PROTOCOL_VERSION + 1,
            client: None,
        },
    );
    let words = expect_error(&mut client, ErrorCode::VersionMismatch);
    assert!(
        words.contains("version mismatch") && words.contains("update gpumem-agent"),
        "{words}"
    );
    let close = recv_close(&mut client);
    assert!(
        matches!(&close, Some((1008, _))),
        "closed after a version mismatch: {close:?}"
    );
}

#[test]
fn runs_are_one_at_a_time_per_page_and_cancel_stops_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = replay_agent(&dir, "200");
    let (mut client, _) = agent.paired_client();
    let _ = recv_frame(&mut client); // environment
    send(
        &mut client,
        &ClientMessage::StartMeasure(MeasureRequest::SEED_EXAMPLE),
    );
    assert!(matches!(
        recv_frame(&mut client).map(|f| f.message),
        Some(AgentMessage::RunStarted { .. })
    ));
    send(
        &mut client,
        &ClientMessage::StartMeasure(MeasureRequest::SEED_EXAMPLE),
    );
    let busy = expect_error(&mut client, ErrorCode::Busy);
    assert!(busy.contains("in progress"), "{busy}");
    send(&mut client, &ClientMessage::Cancel);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "cancel did not end the run");
        match recv_frame(&mut client).map(|f| f.message) {
            Some(AgentMessage::RunFailed { code, message, .. }) => {
                assert_eq!(code, RunFailure::Cancelled, "{message}");
                break;
            }
            Some(AgentMessage::RunFinished { .. }) => panic!("the run finished despite cancel"),
            Some(_) => {}
            None => panic!("connection ended"),
        }
    }
    // The page may start again once the cancelled run has ended.
    send(
        &mut client,
        &ClientMessage::StartMeasure(MeasureRequest::SEED_EXAMPLE),
    );
    assert!(matches!(
        recv_frame(&mut client).map(|f| f.message),
        Some(AgentMessage::RunStarted { .. })
    ));
}

#[test]
fn a_flood_of_messages_is_rate_limited_not_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = replay_agent(&dir, "5");
    let (mut client, _) = agent.paired_client();
    let _ = recv_frame(&mut client); // environment
    for nonce in 0..150 {
        send(&mut client, &ClientMessage::Ping { nonce });
    }
    let mut pongs = 0;
    let mut limited = 0;
    if let tungstenite::stream::MaybeTlsStream::Plain(stream) = client.get_mut() {
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
    }
    while let Some(frame) = recv_frame(&mut client) {
        match frame.message {
            AgentMessage::Pong { .. } => pongs += 1,
            AgentMessage::Error {
                code: ErrorCode::RateLimited,
                ..
            } => limited += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    println!("rate limit: 150 pings sent at once -> {pongs} pongs, {limited} rate_limited errors");
    assert!(limited >= 1, "the page is told it was rate limited");
    assert!(
        (30..150).contains(&pongs),
        "{pongs} pongs: the burst is served, the rest dropped"
    );
}

#[test]
fn a_bad_replay_file_is_refused_with_exit_code_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"schema":"gpumem.results/v9"}"#).expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args(["serve", "--port", "0", "--no-open", "--replay"])
        .arg(&bad)
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot replay") && stderr.contains("bad.json"),
        "{stderr}"
    );

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args(["serve", "--port", "0", "--no-open", "--allow-origin", "*"])
        .output()
        .expect("run");
    assert_eq!(
        output.status.code(),
        Some(2),
        "a wildcard origin is refused"
    );
}

#[test]
fn a_live_run_that_cannot_measure_reports_run_failed_and_the_agent_keeps_serving() {
    // No --replay: the run is a child `gpumem-agent measure`. Without a usable GPU it
    // exits 2 and the page must get a clear run_failed; with one, the run finishes.
    let agent = Agent::start(&[]);
    let (mut client, hello) = agent.paired_client();
    assert!(!hello.replay);
    // Right after hello: what `gpumem-agent environment --json` reports here (on a
    // machine without a GPU it says what is missing, and no device is invented).
    match recv_frame(&mut client).map(|f| f.message) {
        Some(AgentMessage::Environment { report }) => {
            assert!(
                !report.devices.is_empty() || !report.missing.is_empty(),
                "{report:?}"
            );
            println!(
                "live environment here: devices {}, missing {:?}",
                report.devices.len(),
                report.missing
            );
        }
        other => panic!("expected the environment after hello, got {other:?}"),
    }
    let small = MeasureRequest {
        batch: 1,
        context: 16,
        width: 64,
        layers: 1,
        warmup: 1,
        repeats: 2,
        ..MeasureRequest::SEED_EXAMPLE
    };
    send(&mut client, &ClientMessage::StartMeasure(small));
    let deadline = Instant::now() + Duration::from_secs(120);
    let outcome = loop {
        assert!(Instant::now() < deadline, "the live run never ended");
        match recv_frame(&mut client).map(|f| f.message) {
            Some(AgentMessage::RunFailed { code, message, .. }) => {
                break format!("run_failed {code:?}: {message}");
            }
            Some(AgentMessage::RunFinished { ok, .. }) => break format!("run_finished ok={ok}"),
            Some(_) => {}
            None => panic!("connection ended during a live run"),
        }
    };
    println!("live run here: {outcome}");
    assert!(
        !outcome.ends_with(": "),
        "a failure carries its reason: {outcome}"
    );
    still_usable(&mut client, 9);
}
