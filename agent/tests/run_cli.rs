//! `gpumem-agent run` through the real (debug) binary, without a GPU.
//!
//! - The no-GPU gate: exit 2, no file, and the command is **not started**; the same for
//!   bad usage and an existing `--output`.
//! - With the debug-only test switch (`GPUMEM_RUN_SYNTHETIC_FOR_TESTS=1`, everything
//!   labelled SYNTHETIC): the child's stdin/stdout pass through, its exit code and ending
//!   signal are recorded, SIGTERM/SIGINT sent to the agent reach it, and a hostile
//!   "probe" (malformed, oversized, flooding, too many connections) is bounded and never
//!   makes the agent panic.
//! - With PyTorch on CPU (`$GPUMEM_TOOLS/torch-venv`, installed by
//!   scripts/install-tools.sh): the probe's workloads end to end, memory reader replaced
//!   by the recording stand-in. Without that venv the tests skip through
//!   `gpumem_e2e::torch_python` (a tool: under the test script and CI its absence fails).
#![allow(clippy::disallowed_macros)] // the test harness captures test output

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SWITCH: &str = "GPUMEM_RUN_SYNTHETIC_FOR_TESTS";

fn agent() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"));
    c.env_remove(SWITCH).env_remove("PYTHONPATH");
    c
}

fn synthetic() -> Command {
    let mut c = agent();
    c.env(SWITCH, "1");
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn no_panic(out: &Output) {
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "the agent panicked: {err}");
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("result written"))
        .expect("result is JSON")
}

fn gpu_here(test: &str) -> bool {
    gpumem_e2e::gpu_present(test)
}

fn failure_kinds(result: &serde_json::Value) -> Vec<String> {
    result["outcome"]["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| f["kind"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn without_a_gpu_the_command_is_not_started_and_nothing_is_written() {
    if gpu_here("without_a_gpu") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let output = dir.path().join("r.json");
    let out = agent()
        .args(["run", "--output"])
        .arg(&output)
        .args(["--", "sh", "-c"])
        .arg(format!("touch {}", marker.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    no_panic(&out);
    assert!(text(&out.stderr).contains("cannot measure here"));
    assert!(text(&out.stderr).contains("not started"));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!marker.exists(), "the command was started");
    assert!(!output.exists(), "a result was written");
}

#[test]
fn bad_usage_and_an_existing_output_start_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let existing = dir.path().join("exists.json");
    std::fs::write(&existing, "keep me").unwrap();
    let touch = format!("touch {}", marker.display());
    let cases: Vec<Vec<String>> = vec![
        // An existing --output (checked even with the test switch on).
        vec![
            "--output".into(),
            existing.display().to_string(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            touch.clone(),
        ],
        vec![
            "--device".into(),
            "gpu7".into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            touch.clone(),
        ],
        vec![
            "--steps".into(),
            "0".into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            touch.clone(),
        ],
        // No `--` before the command.
        vec!["sh".into(), "-c".into(), touch.clone()],
        // No command at all.
        vec![],
        vec!["--".into(), "/nonexistent/program".into()],
    ];
    for args in cases {
        let out = synthetic().arg("run").args(&args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        no_panic(&out);
        assert!(!marker.exists(), "{args:?} started the command");
    }
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");
}

#[test]
fn stdio_passes_through_and_the_exit_code_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("r.json");
    let mut child = synthetic()
        .args(["run", "--output"])
        .arg(&output)
        .args([
            "--",
            "sh",
            "-c",
            "read x; echo got:$x; echo err:$x >&2; exit 3",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let out = child.wait_with_output().unwrap();
    no_panic(&out);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "got:hello\n");
    assert!(text(&out.stderr).contains("err:hello"));
    let r = read_json(&output);
    assert_eq!(r["schema"], "gpumem.workload/v1");
    assert_eq!(r["synthetic"], true);
    assert_eq!(r["outcome"]["exit_code"], 3);
    assert_eq!(r["outcome"]["status"], "failed");
    assert_eq!(
        failure_kinds(&r),
        ["probe_never_connected".to_owned(), "exit_code".to_owned()]
    );
    assert_eq!(r["command"][0], "sh");
    // The file is refused a second time: never overwritten.
    let again = synthetic()
        .args(["run", "--output"])
        .arg(&output)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
}

/// Starts `sh -c script` under the agent, waits for the script to write its pid file,
/// sends `sig` to the agent, and returns the agent's output and the result.
fn signal_run(script: &str, sig: i32) -> (Output, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("r.json");
    let ready = dir.path().join("ready");
    let child = synthetic()
        .args(["run", "--output"])
        .arg(&output)
        .args(["--", "sh", "-c", script])
        .env("READY", &ready)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !ready.exists() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ready.exists(), "the command never started");
    let pid = child.id().to_string();
    let status = Command::new("kill")
        .args([format!("-{sig}"), pid])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    no_panic(&out);
    let r = read_json(&output);
    (out, r)
}

#[test]
fn sigterm_and_sigint_reach_the_command_and_are_recorded() {
    // The script exits with a code of its own when the signal reaches it.
    let script =
        r#"trap 'exit 42' TERM; trap 'exit 43' INT; touch "$READY"; while :; do sleep 0.05; done"#;
    let (out, r) = signal_run(script, 15);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(r["outcome"]["exit_code"], 42);
    assert_eq!(r["outcome"]["forwarded_signals"], serde_json::json!([15]));
    let (_, r) = signal_run(script, 2);
    assert_eq!(r["outcome"]["exit_code"], 43);
    assert_eq!(r["outcome"]["forwarded_signals"], serde_json::json!([2]));
}

#[test]
fn a_command_killed_by_a_signal_is_recorded_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("r.json");
    let out = synthetic()
        .args(["run", "--output"])
        .arg(&output)
        .args(["--", "sh", "-c", "kill -KILL $$"])
        .output()
        .unwrap();
    no_panic(&out);
    assert_eq!(out.status.code(), Some(1));
    let r = read_json(&output);
    assert_eq!(r["outcome"]["signal"], 9);
    assert!(failure_kinds(&r).contains(&"signal".to_owned()));
}

/// A hostile probe in Python (no torch needed): every kind of bad line, a flood and too
/// many connections, then one well-formed process whose phase must still arrive.
const HOSTILE: &str = r#"
import json, os, socket
path = os.environ["GPUMEM_PROBE_SOCKET"]
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(path); return s
bad = conn()
for line in [b"not json", b"{}", b'{"v":2,"type":"bye"}', b'{"v":1,"type":"nope"}',
             b'{"v":1,"type":"phase","name":"x"}', b"\xff\xfe\x00", b"[" * 60000,
             b'{"v":1,"type":"bye","overhead_ns":-5,"hook_calls":0,"instrumented_ns":0}']:
    bad.sendall(line + b"\n")
bad.sendall(b"x" * 300000 + b"\n")
try:
    bad.sendall(b'{"v":1,"type":"probe_error","message":"x"}\n' * 30000)
except OSError:
    pass
bad.close()
good = conn()
hello = dict(v=1, type="hello", pid=os.getpid(), rank=1, local_rank=1, world_size=2,
             reader="hostile-test", backend="none", torch_version=None, cuda_version=None,
             hip_version=None, cudnn_version=None, allocator_backend=None, alloc_conf=None)
phase = dict(v=1, type="phase", name="forward" * 1000, step=0, first_step=True, manual=False,
             device=None, wall_ns=1, allocated_start_bytes=18446744073709551615,
             allocated_peak_bytes=None, allocated_end_bytes=None, reserved_start_bytes=None,
             reserved_peak_bytes=None, reserved_end_bytes=None, device_free_bytes=None,
             device_total_bytes=None, error=None)
for m in (hello, phase, dict(v=1, type="bye", overhead_ns=1, hook_calls=1, instrumented_ns=2)):
    good.sendall(json.dumps(m).encode() + b"\n")
good.close()
many = []
for _ in range(300):
    try:
        many.append(conn())
    except OSError:
        break
for s in many:
    s.close()
"#;

#[test]
fn a_hostile_probe_is_bounded_and_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("r.json");
    let out = synthetic()
        .args(["run", "--output"])
        .arg(&output)
        .args(["--", "python3", "-c", HOSTILE])
        .output()
        .unwrap();
    no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = read_json(&output);
    let ch = &r["channel"];
    assert!(ch["rejected"].as_u64().unwrap() >= 10, "{ch}");
    assert!(ch["connections_refused"].as_u64().unwrap() > 0, "{ch}");
    assert!(ch["connections"].as_u64().unwrap() <= 256, "{ch}");
    // The one well-formed process is kept, its text clipped, its bytes raw.
    let ranks = r["ranks"].as_array().unwrap();
    let good: Vec<_> = ranks.iter().filter(|k| k["rank"] == 1).collect();
    assert_eq!(good.len(), 1, "{ranks:?}");
    let phase = &good[0]["phases"][0];
    assert!(phase["name"].as_str().unwrap().len() <= 4_010);
    assert_eq!(
        phase["allocator"]["allocated_start_bytes"],
        serde_json::json!(u64::MAX)
    );
    // A reader that is not torch.cuda makes the whole result SYNTHETIC.
    assert_eq!(r["synthetic"], true);
}

// ---- PyTorch on CPU ------------------------------------------------------------------

fn torch_python(test: &str) -> Option<PathBuf> {
    gpumem_e2e::torch_python(test)
}

fn python_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// Runs a probe test workload under the agent with the recording stand-in.
fn torch_run(python: &Path, workload: &str, extra: &[&str]) -> (Output, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("r.json");
    let out = synthetic()
        .arg("run")
        .args(extra)
        .arg("--output")
        .arg(&output)
        .arg("--")
        .arg(python)
        .arg(python_dir().join("tests/workloads").join(workload))
        .env("PYTHONPATH", python_dir().join("tests/standin"))
        .env("GPUMEM_TEST_READER", "recording")
        .output()
        .unwrap();
    no_panic(&out);
    let r = read_json(&output);
    (out, r)
}

fn phase_names(r: &serde_json::Value) -> Vec<String> {
    r["ranks"][0]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let step = p["step"].as_u64().map_or("-".into(), |s| s.to_string());
            format!("{}:{step}", p["name"].as_str().unwrap())
        })
        .collect()
}

#[test]
fn a_training_loop_on_cpu_end_to_end() {
    let Some(py) = torch_python("a_training_loop_on_cpu") else {
        return;
    };
    let (out, r) = torch_run(&py, "train_adamw.py", &["--steps", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(r["synthetic"], true);
    assert!(r["note"].as_str().unwrap().contains("SYNTHETIC"));
    assert!(text(&out.stderr).contains("SYNTHETIC"));
    assert_eq!(
        phase_names(&r),
        [
            "model_load:-",
            "forward:0",
            "backward:0",
            "optimizer_step:0",
            "forward:1",
            "backward:1",
            "optimizer_step:1"
        ]
    );
    let rank = &r["ranks"][0];
    assert_eq!(rank["environment"]["reader"], "recording-standin");
    assert_eq!(rank["ended_cleanly"], true);
    assert!(
        rank["hooks_removed"]
            .as_str()
            .unwrap()
            .contains("after 2 steps")
    );
    assert!(rank["overhead"]["overhead_ns"].as_u64().unwrap() > 0);
    assert_eq!(rank["facts"]["optimizer"]["optimizer_class"], "AdamW");
    let lines = rank["comparison"]["lines"].as_array().unwrap();
    let items: Vec<_> = lines.iter().map(|l| l["item"].as_str().unwrap()).collect();
    assert_eq!(
        items,
        ["weights", "gradients", "optimizer_states", "activations"]
    );
    // 3 × (64·64 + 64) + 64 + 1 fp32 parameters + 64 fp32 buffer values.
    let params = 3 * (64 * 64 + 64) + 64 + 1;
    assert_eq!(lines[0]["computed_bytes"], (params + 64) * 4);
    assert_eq!(lines[2]["computed_bytes"], 2 * params * 4);
}

#[test]
fn a_generation_loop_and_markers_on_cpu_end_to_end() {
    let Some(py) = torch_python("a_generation_loop_on_cpu") else {
        return;
    };
    let (out, r) = torch_run(&py, "generate_kv.py", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        phase_names(&r),
        [
            "model_load:-",
            "prefill:0",
            "decode:0",
            "prefill:1",
            "decode:1"
        ]
    );
    let kv = r["ranks"][0]["comparison"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["item"] == "kv_cache")
        .cloned()
        .expect("a kv_cache line");
    // 2 layers, 4 KV heads × 8, fp32, 2 sequences: the estimator counts prompt +
    // generated (26 tokens); the cache holds 25 (the last token is never fed back).
    assert_eq!(kv["computed_bytes"], 2 * 2 * 4 * 8 * 26 * 2 * 4);
    assert_eq!(kv["observed_bytes"], 2 * 2 * 4 * 8 * 25 * 2 * 4);

    let (out, r) = torch_run(&py, "markers.py", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(phase_names(&r), ["model_load:-", "eval:0", "export:0"]);
}

#[test]
fn oom_crash_and_a_missing_probe_on_cpu_are_recorded_with_exit_1() {
    let Some(py) = torch_python("failures_on_cpu") else {
        return;
    };
    let (out, r) = torch_run(&py, "oom.py", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let failures = r["outcome"]["failures"].as_array().unwrap();
    let oom = failures
        .iter()
        .find(|f| f["kind"] == "out_of_memory")
        .expect("an out_of_memory failure");
    assert_eq!(oom["phase"], "forward");
    assert_eq!(oom["requested_bytes"], 20 * 1024 * 1024);
    assert!(failure_kinds(&r).contains(&"exit_code".to_owned()));

    let (out, r) = torch_run(&py, "crash.py", &[]);
    assert_eq!(out.status.code(), Some(1));
    let crash = &r["outcome"]["failures"][0];
    assert_eq!(crash["kind"], "exception");
    assert_eq!(crash["phase"], "export");
    assert!(
        crash["message"]
            .as_str()
            .unwrap()
            .contains("ValueError: boom")
    );

    let (out, r) = torch_run(&py, "no_torch.py", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(failure_kinds(&r), ["probe_never_connected"]);
    assert!(text(&out.stdout).contains("chained 1"));
}

/// A transformers model's training run gets the traced column: the same workload (the
/// config the probe sent, 2 × 16 tokens, fp32, AdamW) traced on the meta device in the
/// Python that ran it. The traced weights, gradients and optimizer states are the
/// computed ones plus the allocator's rounding of each tensor to 512 B (never less, and
/// at most 512 B per tensor: the tiny Llama has 23 tensors); `--no-trace` says it is off,
/// and a model without a config.json says why there is no trace.
#[test]
fn a_transformers_run_is_traced_beside_computed_and_observed() {
    let Some(py) = torch_python("a_transformers_run_is_traced") else {
        return;
    };
    let (out, r) = torch_run(&py, "train_tiny_llama.py", &["--steps", "2"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("computed vs observed vs traced"), "{err}");
    assert!(err.contains("not a GPU measurement"), "{err}");
    let c = &r["ranks"][0]["comparison"];
    assert_eq!(c["trace"]["status"], "traced", "{}", c["trace"]);
    let detail = c["trace"]["detail"].as_str().unwrap();
    assert!(
        detail.contains(
            "traced llama (float32, sdpa attention): full training, 2 × 16 tokens, adamw"
        ),
        "{detail}"
    );
    let line = |item: &str| {
        c["lines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["item"] == item)
            .unwrap_or_else(|| panic!("no {item} line"))
            .clone()
    };
    let rounding = 512 * 32;
    for item in ["weights", "gradients", "optimizer_states"] {
        let l = line(item);
        let computed = l["computed_bytes"].as_u64().unwrap();
        let traced = l["traced_bytes"].as_u64().expect("a traced figure");
        assert!(
            computed <= traced && traced <= computed + rounding,
            "{item}: computed {computed}, traced {traced}"
        );
        assert!(l["traced_how"].as_str().unwrap().starts_with("traced"));
        assert_eq!(l["basis"], "computed", "the computed basis is kept");
    }
    assert!(line("activations")["traced_bytes"].as_u64().unwrap() > 0);

    let (out, r) = torch_run(&py, "train_tiny_llama.py", &["--steps", "1", "--no-trace"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let c = &r["ranks"][0]["comparison"];
    assert_eq!(c["trace"]["status"], "off");
    assert!(text(&out.stderr).contains("not traced (--no-trace)"));
    assert!(
        c["lines"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l.get("traced_bytes").is_none())
    );

    // The probe's own tiny decoder is no transformers model: no config.json to trace.
    let (out, r) = torch_run(&py, "train_adamw.py", &["--steps", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let t = &r["ranks"][0]["comparison"]["trace"];
    assert_eq!(t["status"], "not_possible");
    assert!(t["detail"].as_str().unwrap().contains("config.json"), "{t}");
    assert!(text(&out.stderr).contains("no trace: "));
}

/// A transformers generation gets the traced KV cache: 2 layers × (K, V) tensors of
/// 2 sequences × 2 KV heads × 15 positions (10 prompt + 6 generated − 1) × 16 × 4 B =
/// 3 840 B each, which the allocator rounds to 4 096 (512 B blocks); observed counts
/// the tensors' own 3 840 B.
#[test]
fn a_transformers_generation_is_traced() {
    let Some(py) = torch_python("a_transformers_generation_is_traced") else {
        return;
    };
    let (out, r) = torch_run(&py, "generate_tiny_llama.py", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let c = &r["ranks"][0]["comparison"];
    assert_eq!(c["trace"]["status"], "traced", "{}", c["trace"]);
    assert!(
        c["trace"]["detail"]
            .as_str()
            .unwrap()
            .contains("inference, 2 × 10 prompt tokens + 6 generated"),
        "{}",
        c["trace"]
    );
    let kv = c["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["item"] == "kv_cache")
        .expect("a kv_cache line");
    let tensor: u64 = 2 * 2 * 15 * 16 * 4;
    assert_eq!(kv["observed_bytes"], 4 * tensor);
    assert_eq!(kv["traced_bytes"], 4 * tensor.div_ceil(512) * 512);
}

/// `--trace-with` takes the estimator's workload keys only, checked before the command
/// starts.
#[test]
fn a_bad_trace_override_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    for bad in ["reserve-gib=2", "train=sideways", "train"] {
        let out = synthetic()
            .args(["run", "--trace-with", bad, "--", "sh", "-c"])
            .arg(format!("touch {}", marker.display()))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out.stderr));
        no_panic(&out);
        assert!(!marker.exists(), "{bad} started the command");
    }
}

#[test]
fn events_stream_one_json_line_per_phase() {
    let Some(py) = torch_python("events_stream") else {
        return;
    };
    let (out, r) = torch_run(&py, "markers.py", &["--events", "jsonl"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The command shares stdout (unbuffered Python writes a print in pieces), so an event
    // line may start after some of its text: find the event's opening.
    let events: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .filter_map(|l| l.find("{\"connection\"").map(|i| &l[i..]))
        .map(|l| serde_json::from_str(l).expect("an event line is JSON"))
        .collect();
    let names: Vec<_> = events
        .iter()
        .map(|e| e["phase"]["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(names, ["model_load", "eval", "export"]);
    assert_eq!(
        events.len(),
        r["ranks"][0]["phases"].as_array().unwrap().len()
    );
}

#[test]
fn serve_without_a_gpu_says_so_at_start_up() {
    if gpu_here("serve_without_a_gpu") {
        return;
    }
    let mut child = agent()
        .args(["serve", "--no-open", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut banner = String::new();
    let mut buf = [0u8; 4096];
    let t0 = Instant::now();
    while !banner.contains("mode:") || !banner.contains("page:") {
        use std::io::Read;
        let n = stdout.read(&mut buf).unwrap_or(0);
        if n == 0 || t0.elapsed() > Duration::from_secs(20) {
            break;
        }
        banner.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(banner.contains("NO GPU here"), "{banner}");
    assert!(banner.contains("--replay"), "{banner}");
    assert!(!banner.contains("live measurements on this machine's GPU"));
}

#[test]
fn every_rank_of_a_multi_process_job_is_kept_apart() {
    let Some(py) = torch_python("multi_process_ranks") else {
        return;
    };
    let (out, r) = torch_run(&py, "two_ranks.py", &["--steps", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let ranks = r["ranks"].as_array().unwrap();
    let mut seen: Vec<(u64, u64, u64)> = ranks
        .iter()
        .map(|k| {
            (
                k["rank"].as_u64().unwrap(),
                k["local_rank"].as_u64().unwrap(),
                k["world_size"].as_u64().unwrap(),
            )
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, [(0, 0, 2), (1, 1, 2)]);
    for k in ranks {
        // Each rank has its own full set of phases: never pooled.
        assert_eq!(k["phases"].as_array().unwrap().len(), 7, "{k}");
    }
    assert_ne!(ranks[0]["pid"], ranks[1]["pid"]);
}

// ---- Launchers: torchrun, accelerate, DeepSpeed ------------------------------------

/// Runs `train_ranks.py` (two ranks over gloo on the CPU, `WRAP` = ddp or fsdp2) under
/// a launcher of the torch venv (`launcher` and its arguments before the script), with
/// the recording stand-in: the counters are SYNTHETIC, the facts (parameters held,
/// optimizer state bytes, the wrapper) are the real CPU tensors'.
fn launched(
    python: &Path,
    launcher: &[&str],
    wrap: &str,
    extra: &[&str],
) -> (Output, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("r.json");
    let bin = python.parent().unwrap();
    let out = synthetic()
        .arg("run")
        .args(extra)
        .arg("--output")
        .arg(&output)
        .arg("--")
        .arg(bin.join(launcher[0]))
        .args(&launcher[1..])
        .arg(python_dir().join("tests/workloads/train_ranks.py"))
        .env("PYTHONPATH", python_dir().join("tests/standin"))
        .env("GPUMEM_TEST_READER", "recording")
        .env("WRAP", wrap)
        .env("OMP_NUM_THREADS", "1")
        .current_dir(dir.path())
        .output()
        .unwrap();
    no_panic(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{launcher:?}: {}",
        text(&out.stderr)
    );
    (out, read_json(&output))
}

/// The ranks of a launched job, rank order, and the launcher processes apart.
fn job_ranks(r: &serde_json::Value) -> (Vec<&serde_json::Value>, usize) {
    let all = r["ranks"].as_array().unwrap();
    let launchers = all.iter().filter(|k| k["launcher"] == true).count();
    let mut ranks: Vec<_> = all
        .iter()
        .filter(|k| k["launcher"] != true && k["worker_of"].is_null())
        .collect();
    ranks.sort_by_key(|k| k["rank"].as_u64());
    (ranks, launchers)
}

fn line<'a>(rank: &'a serde_json::Value, item: &str) -> &'a serde_json::Value {
    rank["comparison"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["item"] == item)
        .unwrap_or_else(|| panic!("no {item} line: {rank}"))
}

/// torchrun with FSDP2: each rank is its own document entry with its own phases, the
/// job it runs (world size, gloo, `fsdp2` full shard read from FSDP2's state) and the
/// estimate of that rank beside it — its optimizer states as the estimate shards
/// them, equal to the bytes its sharded AdamW state really holds on the CPU.
#[test]
fn torchrun_ranks_each_carry_their_own_estimate() {
    let Some(py) = torch_python("torchrun_ranks_each_carry_their_own_estimate") else {
        return;
    };
    let (out, r) = launched(
        &py,
        &["torchrun", "--nproc-per-node", "2"],
        "fsdp2",
        &["--no-trace"],
    );
    assert_eq!(r["synthetic"], true);
    let (ranks, launchers) = job_ranks(&r);
    assert_eq!(
        launchers, 1,
        "torchrun's agent imports torch: {}",
        r["ranks"]
    );
    assert!(text(&out.stderr).contains("launcher process"));
    assert_eq!(ranks.len(), 2);
    for (i, k) in ranks.iter().enumerate() {
        assert_eq!(k["rank"], i as u64);
        assert_eq!(k["world_size"], 2);
        assert_eq!(
            k["phases"].as_array().unwrap().len(),
            7,
            "never pooled: {k}"
        );
        let d = &k["facts"]["model"]["distributed"];
        assert_eq!(d["world_size"], 2, "{d}");
        assert_eq!(d["backend"], "gloo");
        assert_eq!(d["wrapper"], "fsdp2");
        assert_eq!(d["sharding"], "full");
        assert!(
            k["comparison"]["source"]
                .as_str()
                .unwrap()
                .contains("one rank of 2 (fsdp2 full)")
        );
        let states = line(k, "optimizer_states");
        let (computed, observed) = (
            states["computed_bytes"].as_u64().unwrap(),
            states["observed_bytes"].as_u64().unwrap(),
        );
        assert!(
            states["formula"]
                .as_str()
                .unwrap()
                .starts_with("this rank's share")
        );
        // AdamW's `step` scalars (4 bytes per parameter tensor) are all the
        // difference.
        assert!(
            observed >= computed && observed - computed < 200,
            "{computed} vs {observed}"
        );
    }
    // Ranks hold half the model each: the weights line is what the rank holds.
    let w0 = line(ranks[0], "weights")["computed_bytes"]
        .as_u64()
        .unwrap();
    let whole = 2 * (128 * 64) + 2 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 64;
    assert!(w0 < whole * 4 * 6 / 10, "{w0} of {}", whole * 4);
}

/// `accelerate launch` (its multi-process launcher, torch's elastic agent inside) with
/// DDP: two ranks, the launcher apart, each traced as a DDP rank of 2.
#[test]
fn accelerate_launch_ranks_are_kept_apart_and_traced_as_ranks() {
    let Some(py) = torch_python("accelerate_launch_ranks_are_kept_apart") else {
        return;
    };
    let (_, r) = launched(
        &py,
        &[
            "accelerate",
            "launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
        ],
        "ddp",
        &[],
    );
    let (ranks, launchers) = job_ranks(&r);
    assert!(launchers >= 1, "{}", r["ranks"]);
    assert_eq!(ranks.len(), 2);
    for k in &ranks {
        assert_eq!(k["facts"]["model"]["distributed"]["wrapper"], "ddp");
        assert_eq!(k["facts"]["model"]["distributed"]["local_world_size"], 2);
        let trace = &k["comparison"]["trace"];
        assert_eq!(trace["status"], "traced", "{trace}");
        assert!(
            trace["detail"]
                .as_str()
                .unwrap()
                .contains("rank 0 of 2 (ddp)"),
            "{trace}"
        );
    }
}

/// DeepSpeed's launcher (`deepspeed --num_gpus 2`, its CPU accelerator): its runner and
/// `deepspeed.launcher.launch` are launchers, the two ranks are kept apart.
#[test]
fn deepspeed_launcher_ranks_are_kept_apart() {
    let Some(py) = torch_python("deepspeed_launcher_ranks_are_kept_apart") else {
        return;
    };
    let (_, r) = launched(
        &py,
        &["deepspeed", "--num_gpus", "2"],
        "ddp",
        &["--no-trace"],
    );
    let (ranks, launchers) = job_ranks(&r);
    assert!(launchers >= 1, "{}", r["ranks"]);
    assert_eq!(ranks.len(), 2, "{}", r["ranks"]);
    for (i, k) in ranks.iter().enumerate() {
        assert_eq!(k["rank"], i as u64);
        assert_eq!(k["facts"]["model"]["distributed"]["wrapper"], "ddp");
        assert_eq!(k["phases"].as_array().unwrap().len(), 7);
    }
}

// ---- run --memory-history (PyTorch on CPU, the stand-in's SYNTHETIC recorder) --------

/// The stand-in's plan (agent/python/tests/standin/recording_reader.py), in bytes.
const MIB: u64 = 1 << 20;

fn line_bytes(peak: &serde_json::Value, line: &str) -> u64 {
    peak["lines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["line"] == line)
        .unwrap_or_else(|| panic!("no line {line}"))["bytes"]
        .as_u64()
        .unwrap()
}

fn peak_of<'a>(a: &'a serde_json::Value, phase: &str, step: u64) -> &'a serde_json::Value {
    a["peaks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == phase && p["step"] == step)
        .unwrap_or_else(|| panic!("no peak of {phase} {step}"))
}

/// The whole path on CPU: the probe records (the stand-in's plan: PyTorch's recorder
/// needs CUDA), writes its snapshot and history, the agent reads them back, attributes
/// each phase's peak, keeps the history in the document, writes the snapshot beside
/// `--output` (private), and the table names the lines above their estimate with the
/// allocations behind them. Everything labelled SYNTHETIC.
#[test]
fn memory_history_is_recorded_attributed_and_kept() {
    let Some(py) = torch_python("memory_history_is_recorded") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("train.workload.json");
    let out = synthetic()
        .args(["run", "--steps", "2", "--memory-history", "--output"])
        .arg(&output)
        .arg("--")
        .arg(&py)
        .arg(python_dir().join("tests/workloads/train_adamw.py"))
        .env("PYTHONPATH", python_dir().join("tests/standin"))
        .env("GPUMEM_TEST_READER", "recording")
        .output()
        .unwrap();
    no_panic(&out);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let r = read_json(&output);
    let h = &r["ranks"][0]["memory_history"];
    assert_eq!(h["status"], "recorded", "{h}");
    assert!(
        h["detail"].as_str().unwrap().starts_with("SYNTHETIC"),
        "{h}"
    );
    assert_eq!(h["history"]["schema"], "gpumem.history/v1");
    assert_eq!(h["history"]["source"], "synthetic");
    // The snapshot beside --output, private, named in the document.
    let pickle = dir.path().join("train.workload.pickle");
    assert_eq!(h["pickle"], pickle.display().to_string());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&pickle).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Each phase's peak, split as the plan allocated it.
    let a = &h["attribution"];
    let forward = peak_of(a, "forward", 1);
    assert_eq!(line_bytes(forward, "weights"), 16 * MIB);
    assert_eq!(line_bytes(forward, "activations"), 6 * MIB);
    assert_eq!(line_bytes(forward, "gradients"), 16 * MIB);
    assert_eq!(line_bytes(forward, "optimizer_state"), 32 * MIB);
    assert_eq!(line_bytes(forward, "temporaries"), MIB);
    let scopes: Vec<_> = forward["activations_by_scope"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["scope"].as_str().unwrap(), s["bytes"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        scopes,
        [("model.layers.0", 3 * MIB), ("model.layers.1", 3 * MIB)]
    );
    // The attributed column and the lines above their estimate, largest excess first.
    let lines = r["ranks"][0]["comparison"]["lines"].as_array().unwrap();
    let attributed = |item: &str| {
        lines.iter().find(|l| l["item"] == item).unwrap()["attributed_bytes"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(attributed("optimizer_states"), 32 * MIB);
    assert_eq!(attributed("gradients"), 16 * MIB);
    let above: Vec<_> = r["ranks"][0]["comparison"]["differences"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == "line_above_estimate")
        .collect();
    assert_eq!(above[0]["item"], "optimizer_states", "{above:?}");
    assert!(
        above[0]["explanation"]
            .as_str()
            .unwrap()
            .contains("adamw.py:40 _init_group"),
        "{above:?}"
    );
    assert!(err.contains("allocator history: SYNTHETIC"), "{err}");
    assert!(err.contains("LineAboveEstimate"), "{err}");
    // The document still reads as a workload file.
    let _: gpumem_proto::workload::WorkloadFile = serde_json::from_value(r.clone()).unwrap();
}

/// Without CUDA the real reader records nothing and says why; the run is unchanged.
#[test]
fn memory_history_without_cuda_says_why() {
    let Some(py) = torch_python("memory_history_without_cuda") else {
        return;
    };
    if gpu_here("memory_history_without_cuda") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("r.json");
    let out = synthetic()
        .args(["run", "--steps", "1", "--memory-history", "--output"])
        .arg(&output)
        .arg("--")
        .arg(&py)
        .arg(python_dir().join("tests/workloads/train_adamw.py"))
        .output()
        .unwrap();
    no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = read_json(&output);
    let h = &r["ranks"][0]["memory_history"];
    assert_eq!(h["status"], "not_possible", "{h}");
    assert!(
        h["detail"]
            .as_str()
            .unwrap()
            .contains("torch.cuda is not available"),
        "{h}"
    );
    assert!(h.get("attribution").is_none());
    assert!(!dir.path().join("r.pickle").exists());
}

/// An existing snapshot path is refused before the command starts.
#[test]
fn an_existing_memory_history_path_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let existing = dir.path().join("h.pickle");
    std::fs::write(&existing, "keep me").unwrap();
    let out = synthetic()
        .args(["run", "--memory-history"])
        .arg(&existing)
        .args(["--", "sh", "-c"])
        .arg(format!("touch {}", marker.display()))
        .output()
        .unwrap();
    no_panic(&out);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!marker.exists(), "the command was started");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");
}
