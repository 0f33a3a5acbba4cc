//! `serve --replay` with the repository's saved results file, and `serve --dist`: what
//! the page engineer's browser tests will rely on, checked here at the socket level.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

mod serve_support;

use gpumem_proto::results::ResultsFile;
use gpumem_proto::wire::{AgentMessage, ClientMessage, MeasureRequest};
use serde_json::Value;
use serve_support::{Agent, fixture_path, raw_http, recv_frame, send};

#[test]
fn the_saved_results_file_replays_phase_by_phase_and_unchanged() {
    let path = fixture_path();
    let text = std::fs::read_to_string(&path).expect("the replay fixture is in the repository");
    let raw: Value = serde_json::from_str(&text).expect("JSON");
    let file: ResultsFile = serde_json::from_value(raw.clone()).expect("a results file");
    let agent = Agent::start(&[
        "--replay",
        path.to_str().expect("UTF-8"),
        "--replay-delay-ms",
        "1",
    ]);

    let (mut client, hello) = agent.paired_client();
    assert!(hello.replay);
    match recv_frame(&mut client).map(|f| f.message) {
        Some(AgentMessage::Environment { report }) => {
            assert_eq!(report.devices.len(), file.runs.len());
            assert!(
                report.device_count.value.is_none(),
                "not recorded, so not invented"
            );
        }
        other => panic!("expected the environment, got {other:?}"),
    }
    send(
        &mut client,
        &ClientMessage::StartMeasure(MeasureRequest::SEED_EXAMPLE),
    );
    let mut kinds = Vec::new();
    let mut phases = Vec::new();
    let result = loop {
        let frame = recv_frame(&mut client).expect("frame");
        assert!(frame.replay);
        let value = serde_json::to_value(&frame).expect("serialise");
        kinds.push(value["type"].as_str().unwrap_or("?").to_owned());
        match frame.message {
            AgentMessage::Phase { result, .. } => phases.push(*result),
            AgentMessage::RunFinished { ok, result, .. } => {
                assert_eq!(ok, !file.any_failed());
                break result;
            }
            AgentMessage::RunFailed { message, .. } => panic!("replay failed: {message}"),
            _ => {}
        }
    };
    assert_eq!(
        result, raw,
        "the results document reaches the page unchanged"
    );
    let expected: Vec<_> = file.runs.iter().flat_map(|r| r.phases.clone()).collect();
    assert_eq!(phases, expected);
    assert_eq!(kinds.first().map(String::as_str), Some("run_started"));
    assert_eq!(kinds.get(1).map(String::as_str), Some("device_started"));
    println!("replayed message types: {kinds:?}");
}

#[test]
fn dist_override_serves_that_directory_and_nothing_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("index.html"),
        "<!doctype html><title>page</title>",
    )
    .expect("write");
    std::fs::write(dir.path().join("app_bg.wasm"), b"\0asm\x01\0\0\0").expect("write");
    let agent = Agent::start(&["--dist", dir.path().to_str().expect("UTF-8")]);
    let host = agent.host();
    let (status, text) = raw_http(
        agent.port,
        format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
    );
    assert_eq!(status, 200);
    assert!(
        text.ends_with("<!doctype html><title>page</title>"),
        "{text}"
    );
    let (status, text) = raw_http(
        agent.port,
        format!("GET /app_bg.wasm HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
    );
    assert_eq!(status, 200);
    assert!(text.contains("Content-Type: application/wasm"), "{text}");
    let (status, _) = raw_http(
        agent.port,
        format!("HEAD /app_bg.wasm HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
    );
    assert_eq!(status, 200);
    let (status, _) = raw_http(
        agent.port,
        format!("GET /%2e%2e/Cargo.toml HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
    );
    assert_eq!(status, 404);
}
