//! Load test of `gpumem-agent serve` ("50 paired viewers receiving a replay at
//! once"): 50 WebSocket clients pair with one agent, start a replay at the same moment,
//! and measure the push latency of every message they receive.
//!
//! Latency is the client's wall clock when the message was read minus the agent's
//! `sent_unix_ns` stamp, which the agent sets when it *produces* the message (in the
//! replay thread), so it covers the channel hop, the session thread, serialisation, the
//! socket and the client's read. Both clocks are the same machine's. The target is a p99
//! under 5 ms on loopback; the assertion is looser (250 ms) so a loaded two-core CI box
//! does not flake, and the real figures are printed.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

mod serve_support;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use gpumem_proto::wire::{AgentFrame, AgentMessage, ClientMessage, MeasureRequest};
use serve_support::{Agent, fixture_results, recv_frame, recv_text_at, send, write_synthetic};

const VIEWERS: usize = 50;

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[test]
fn fifty_viewers_receive_a_replay_at_once_with_low_push_latency() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write_synthetic(dir.path());
    let recorded = fixture_results();
    let phases_per_run: usize = recorded.runs.iter().map(|r| r.phases.len()).sum();
    // run_started, then per device: device_started, its phases, device_finished; run_finished.
    let messages_per_run = 2 + recorded.runs.len() * 2 + phases_per_run;
    let agent = Agent::start(&[
        "--replay",
        file.to_str().expect("UTF-8"),
        "--replay-delay-ms",
        "20",
    ]);

    // Pair everyone first (connection set-up is not what is measured).
    let mut clients = Vec::new();
    for _ in 0..VIEWERS {
        let (mut client, _) = agent.paired_client();
        let environment = recv_frame(&mut client).map(|f| f.message);
        assert!(
            matches!(environment, Some(AgentMessage::Environment { .. })),
            "{environment:?}"
        );
        clients.push(client);
    }

    let barrier = Arc::new(Barrier::new(VIEWERS));
    // Nobody parses until everyone has received everything (see below).
    let all_received = Arc::new(Barrier::new(VIEWERS));
    let started = Instant::now();
    let handles: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            let barrier = Arc::clone(&barrier);
            let all_received = Arc::clone(&all_received);
            std::thread::spawn(move || {
                barrier.wait();
                send(
                    &mut client,
                    &ClientMessage::StartMeasure(MeasureRequest::SEED_EXAMPLE),
                );
                // Read first, parse once every viewer has everything: parsing a 25 KB
                // results document in 50 client threads would compete for the same
                // cores as the agent and show up as the agent's latency.
                let mut received = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    assert!(Instant::now() < deadline, "replay did not finish in time");
                    let (text, at) = recv_text_at(&mut client).expect("frame");
                    let last = ["run_finished", "run_failed", "error"]
                        .iter()
                        .any(|t| text.contains(&format!("\"type\":\"{t}\"")));
                    received.push((text, at));
                    if last {
                        break;
                    }
                }
                all_received.wait();
                let mut latencies = Vec::new();
                let mut phases = 0;
                for (text, at) in received {
                    let frame = AgentFrame::parse(&text).expect("valid frame");
                    assert!(frame.replay);
                    let latency = at.saturating_sub(frame.sent_unix_ns);
                    match frame.message {
                        AgentMessage::Phase { .. } => {
                            phases += 1;
                            latencies.push(("phase", latency));
                        }
                        AgentMessage::RunFinished { .. } => {
                            latencies.push(("run_finished", latency))
                        }
                        AgentMessage::RunFailed { message, .. } => panic!("run failed: {message}"),
                        AgentMessage::Error { message, .. } => panic!("error: {message}"),
                        _ => latencies.push(("other", latency)),
                    }
                }
                (latencies, phases)
            })
        })
        .collect();

    let mut all = Vec::new();
    let mut by_kind = std::collections::BTreeMap::<&str, Vec<u64>>::new();
    for handle in handles {
        let (latencies, phases) = handle.join().expect("viewer thread");
        assert_eq!(phases, phases_per_run, "every viewer got every phase");
        for (kind, latency) in latencies {
            by_kind.entry(kind).or_default().push(latency);
            all.push(latency);
        }
    }
    let elapsed = started.elapsed();
    all.sort_unstable();
    let ms = |ns: u64| ns as f64 / 1e6;
    let (p50, p99, max) = (
        percentile(&all, 50.0),
        percentile(&all, 99.0),
        all.last().copied().unwrap_or(0),
    );
    println!(
        "load: {VIEWERS} viewers, {} messages in {elapsed:.2?}; push latency p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        all.len(),
        ms(p50),
        ms(p99),
        ms(max)
    );
    for (kind, mut latencies) in by_kind {
        latencies.sort_unstable();
        println!(
            "load:   {kind:>12}: {} messages, p50 {:.3} ms, p99 {:.3} ms",
            latencies.len(),
            ms(percentile(&latencies, 50.0)),
            ms(percentile(&latencies, 99.0))
        );
    }
    assert_eq!(
        all.len(),
        VIEWERS * messages_per_run,
        "every message reached every viewer"
    );
    assert!(p99 < 250_000_000, "p99 push latency {:.3} ms", ms(p99));
}
