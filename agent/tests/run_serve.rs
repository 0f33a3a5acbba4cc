//! Workloads on the page, at the socket level: `serve --replay` of a `gpumem.workload/v1`
//! fixture pushes every phase and the whole document; `run --serve` (debug test switch,
//! no GPU: everything SYNTHETIC) pushes each phase of a running command the moment its
//! probe reports it, while the command's stdout and exit code stay its own. In both
//! modes the page can start nothing: `start_measure` is refused.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

mod serve_support;

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpumem_proto::wire::{
    AgentFrame, AgentMessage, ClientMessage, ErrorCode, MeasureRequest, PROTOCOL_VERSION,
};
use gpumem_proto::workload::WorkloadFile;
use serde_json::Value;
use serve_support::{Agent, Client, recv_frame, send};
use tungstenite::client::IntoClientRequest;
use tungstenite::http::HeaderValue;
use tungstenite::stream::MaybeTlsStream;

fn workload_fixture() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/workloads/synthetic-train_adamw.json")
}

/// Reads frames until `workload_finished`, returning the phases' names and the document.
fn read_workload(client: &mut Client, replay: bool) -> (Vec<(String, Option<u32>)>, Value) {
    let mut phases = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let frame = recv_frame(client).expect("a frame before workload_finished");
        assert_eq!(frame.replay, replay, "{frame:?}");
        match frame.message {
            AgentMessage::WorkloadPhase { phase, .. } => phases.push((phase.name, phase.step)),
            AgentMessage::WorkloadFinished { result, .. } => return (phases, result),
            _ => {}
        }
    }
    panic!("no workload_finished within 60 s");
}

fn refuses_start_measure(client: &mut Client) {
    send(
        client,
        &ClientMessage::StartMeasure(MeasureRequest::SEED_EXAMPLE),
    );
    loop {
        let frame = recv_frame(client).expect("an answer to start_measure");
        match frame.message {
            AgentMessage::Error { code, message } => {
                assert_eq!(code, ErrorCode::Busy, "{message}");
                assert!(message.contains("measures nothing on request"), "{message}");
                return;
            }
            AgentMessage::RunStarted { .. } => panic!("the page started a run"),
            _ => {}
        }
    }
}

#[test]
fn serve_replay_of_a_workload_file_pushes_every_phase_and_the_document() {
    let path = workload_fixture();
    let raw: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("JSON");
    let file: WorkloadFile = serde_json::from_value(raw.clone()).expect("a workload file");
    let agent = Agent::start(&[
        "--replay",
        path.to_str().expect("UTF-8"),
        "--replay-delay-ms",
        "1",
    ]);
    let (mut client, hello) = agent.paired_client();
    assert!(hello.replay, "a replayed workload is labelled replay");
    let (phases, result) = read_workload(&mut client, true);
    let expected: Vec<_> = file.ranks[0]
        .phases
        .iter()
        .map(|p| (p.name.clone(), p.step))
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(phases, expected);
    assert_eq!(result, raw, "the document reaches the page unchanged");
    refuses_start_measure(&mut client);

    // A second page, paired after the end, gets the whole workload from the history.
    let (mut late, _) = agent.paired_client();
    let (late_phases, _) = read_workload(&mut late, true);
    assert_eq!(late_phases, expected);
}

/// A command that is not PyTorch but speaks the probe's protocol itself (as the manual
/// markers would): hello, then — once the test has paired — three phases and goodbye.
const MARKED: &str = r#"
import json, os, socket, sys, time
print("stdout of the command", flush=True)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(os.environ["GPUMEM_PROBE_SOCKET"])
def say(**m):
    m["v"] = 1
    s.sendall(json.dumps(m).encode() + b"\n")
say(type="hello", pid=os.getpid(), rank=None, local_rank=None, world_size=None,
    reader="recording-standin", backend="none", torch_version=None, cuda_version=None,
    hip_version=None, cudnn_version=None, allocator_backend=None, alloc_conf=None)
go = sys.argv[1]
deadline = time.time() + 60
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.05)
def phase(name, step, first, manual, peak):
    say(type="phase", name=name, step=step, first_step=first, manual=manual, device=0,
        wall_ns=1000, allocated_start_bytes=100, allocated_peak_bytes=peak,
        allocated_end_bytes=100, reserved_start_bytes=2097152, reserved_peak_bytes=4194304,
        reserved_end_bytes=2097152, device_free_bytes=None, device_total_bytes=None, error=None)
phase("model_load", None, False, False, 1000)
phase("forward", 0, True, False, 123456789)
phase("eval", None, False, True, 4242)
say(type="bye", overhead_ns=1, hook_calls=3, instrumented_ns=2)
s.close()
sys.exit(3)
"#;

/// A running `gpumem-agent run --serve` with a paired client.
struct RunServe {
    child: std::process::Child,
    stderr: mpsc::Receiver<String>,
    client: Client,
}

impl Drop for RunServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `run --serve` (test switch on) with `command`, pairs a client from the URL
/// printed on stderr and waits for `workload_started` (the command then runs).
fn start_run_serve(command: &[&std::ffi::OsStr], env: &[(&str, &std::ffi::OsStr)]) -> RunServe {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"));
    cmd.env("GPUMEM_RUN_SYNTHETIC_FOR_TESTS", "1")
        .env_remove("PYTHONPATH")
        .args(["run", "--serve", "--no-open", "--port", "0", "--"])
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start gpumem-agent run --serve");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let url = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no pairing URL on stderr: {seen:?}"));
        if let Some(at) = line
            .find("http://127.0.0.1:")
            .filter(|_| line.contains("#token="))
        {
            break line[at..].trim().to_owned();
        }
        seen.push(line);
    };
    let (address, token) = url
        .strip_prefix("http://127.0.0.1:")
        .and_then(|r| r.split_once("/#token="))
        .expect("pairing URL");
    let port: u16 = address.parse().expect("port");

    // The same checks as serve: a wrong token is refused.
    assert!(connect(port, "token=wrong").is_err());
    let mut client = connect(port, &format!("token={token}")).expect("paired");
    send(
        &mut client,
        &ClientMessage::Hello {
            version: PROTOCOL_VERSION,
            client: Some("test".into()),
        },
    );
    let hello = recv_frame(&mut client).expect("hello");
    assert!(!hello.replay, "a live run is not labelled replay");
    loop {
        let frame: AgentFrame = recv_frame(&mut client).expect("workload_started");
        if let AgentMessage::WorkloadStarted {
            command, synthetic, ..
        } = frame.message
        {
            assert!(!command.is_empty());
            assert!(synthetic);
            break;
        }
    }
    RunServe {
        child,
        stderr: rx,
        client,
    }
}

impl RunServe {
    /// Waits for the agent to exit; returns its exit code and stdout.
    fn finish(&mut self) -> (Option<i32>, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the agent did not exit");
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stdout = String::new();
        if let Some(mut out) = self.child.stdout.take() {
            out.read_to_string(&mut stdout).unwrap();
        }
        let errors: Vec<String> = self.stderr.try_iter().collect();
        assert!(!errors.iter().any(|l| l.contains("panicked")), "{errors:?}");
        (status.code(), stdout)
    }
}

#[test]
fn run_serve_pushes_each_phase_as_it_happens() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let mut run = start_run_serve(
        &[
            "python3".as_ref(),
            "-c".as_ref(),
            MARKED.as_ref(),
            go.as_os_str(),
        ],
        &[],
    );
    // The command has started and waits for us: the page can still start nothing.
    refuses_start_measure(&mut run.client);
    std::fs::write(&go, "").unwrap();
    let (phases, result) = read_workload(&mut run.client, false);
    assert_eq!(
        phases,
        [
            ("model_load".to_owned(), None),
            ("forward".to_owned(), Some(0)),
            ("eval".to_owned(), None)
        ]
    );
    let file: WorkloadFile = serde_json::from_value(result).expect("the workload document");
    assert_eq!(
        file.ranks[0].phases[1].allocator.allocated_peak_bytes,
        Some(123_456_789)
    );
    assert!(file.synthetic);
    // The command's own output and exit code are unchanged: it exited 3, recorded, and
    // the agent exits 1 as it does without --serve.
    let (code, stdout) = run.finish();
    assert_eq!(stdout, "stdout of the command\n");
    assert_eq!(code, Some(1));
    assert_eq!(file.outcome.exit_code, Some(3));
}

fn torch_python(test: &str) -> Option<std::path::PathBuf> {
    gpumem_e2e::torch_python(test)
}

/// Waits for the file in argv[1], then runs the script in argv[2] as `__main__`.
const AFTER_GO: &str = r#"
import os, runpy, sys, time
go, script = sys.argv[1], sys.argv[2]
deadline = time.time() + 60
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.05)
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
"#;

#[test]
fn run_serve_with_pytorch_on_cpu_pushes_the_probes_phases() {
    let Some(python) = torch_python("run_serve_with_pytorch_on_cpu") else {
        return;
    };
    let python_dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python");
    let script = python_dir.join("tests/workloads/markers.py");
    let standin = python_dir.join("tests/standin");
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let mut run = start_run_serve(
        &[
            python.as_os_str(),
            "-c".as_ref(),
            AFTER_GO.as_ref(),
            go.as_os_str(),
            script.as_os_str(),
        ],
        &[
            ("PYTHONPATH", standin.as_os_str()),
            ("GPUMEM_TEST_READER", "recording".as_ref()),
        ],
    );
    std::fs::write(&go, "").unwrap();
    let (phases, result) = read_workload(&mut run.client, false);
    let names: Vec<&str> = phases.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["model_load", "eval", "export"]);
    let file: WorkloadFile = serde_json::from_value(result).expect("the workload document");
    let kept: Vec<&str> = file.ranks[0]
        .phases
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(kept, names, "pushed live = recorded in the document");
    assert_eq!(file.ranks[0].environment.reader, "recording-standin");
    let (code, stdout) = run.finish();
    assert_eq!(code, Some(0));
    assert!(stdout.contains("markers 2"), "{stdout}");
}

fn connect(port: u16, query: &str) -> Result<Client, String> {
    let mut request = format!("ws://127.0.0.1:{port}/ws?{query}")
        .into_client_request()
        .expect("URL");
    request.headers_mut().insert(
        "origin",
        HeaderValue::from_str(&format!("http://127.0.0.1:{port}")).expect("header"),
    );
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    tungstenite::client::client(request, MaybeTlsStream::Plain(stream))
        .map(|(c, _)| c)
        .map_err(|e| e.to_string())
}
