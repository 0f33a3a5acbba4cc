//! `gpumem-agent run` against another local user and against its own leftovers, through
//! the real (debug) binary with the test switch (SYNTHETIC, no GPU needed):
//!
//! - the probe folder put first on the child's PYTHONPATH is private (0700, files and
//!   socket 0600) whatever the umask, and once the run is over its path cannot be made
//!   by another user (a process that outlived the run keeps that PYTHONPATH);
//! - the folder of an agent killed by SIGKILL is removed by the next run;
//! - a `run` inside a `run` chains the user's own `sitecustomize` exactly once;
//! - a process still running when the command ended is reported as still running;
//! - the stderr report and the kept messages are bounded.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpumem_e2e::{Missing, skip};

const SWITCH: &str = "GPUMEM_RUN_SYNTHETIC_FOR_TESTS";

/// The agent with the test switch, a temporary folder of the test's own and no runtime
/// folder, so the probe's base is `{tmp}/gpumem-{uid}`.
fn agent(tmp: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"));
    c.env(SWITCH, "1")
        .env_remove("PYTHONPATH")
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", tmp);
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

/// A temporary folder shaped like /tmp: world-writable and sticky.
fn shared_tmp() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    t
}

fn wait_for(path: &Path) {
    let t0 = Instant::now();
    while !path.exists() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(path.exists(), "{} never appeared", path.display());
}

/// What the command saw: `mode uid` of each probe file, then the probe folder.
const STAT_PROBE: &str = r#"d=${PYTHONPATH%%:*}
stat -c '%a %u' "$d" "$d/gpumem_probe" "$d/sitecustomize.py" "$d/gpumem_probe/__init__.py" "$GPUMEM_PROBE_SOCKET" "$(dirname "$d")" > "$OUT"
echo "$d" >> "$OUT""#;

#[test]
fn the_probe_folder_is_private_under_any_umask_and_stays_ours_after_the_run() {
    let tmp = shared_tmp();
    let work = tempfile::tempdir().expect("tempdir");
    let seen = work.path().join("seen");
    let uid = std::fs::metadata("/proc/self").expect("self").uid();
    for umask in ["000", "002", "022"] {
        let _ = std::fs::remove_file(&seen);
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("umask {umask}; exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_gpumem-agent"))
            .args(["run", "--", "sh", "-c", STAT_PROBE])
            .env(SWITCH, "1")
            .env_remove("PYTHONPATH")
            .env_remove("XDG_RUNTIME_DIR")
            .env("TMPDIR", tmp.path())
            .env("OUT", &seen);
        let out = cmd.output().expect("agent");
        no_panic(&out);
        let lines: Vec<String> = std::fs::read_to_string(&seen)
            .expect("the command ran")
            .lines()
            .map(str::to_owned)
            .collect();
        let want = ["700", "700", "600", "600", "600", "700"].map(|m| format!("{m} {uid}"));
        assert_eq!(&lines[..6], &want[..], "umask {umask}: {lines:?}");
        let entry = PathBuf::from(&lines[6]);
        assert!(!entry.exists(), "the probe folder outlived the run");
        // The PYTHONPATH entry a leftover process keeps: its parent is ours and private,
        // and nothing above it lets anyone else swap that parent.
        let parent = entry.parent().expect("parent");
        let meta = std::fs::symlink_metadata(parent).expect("parent stays");
        assert!(meta.is_dir() && !meta.file_type().is_symlink());
        assert_eq!((meta.uid(), meta.mode() & 0o777), (uid, 0o700));
        for up in parent.ancestors().skip(1) {
            let m = std::fs::metadata(up).expect("ancestor");
            assert!(
                m.mode() & 0o022 == 0 || m.mode() & 0o1000 != 0,
                "{} is writable by others and not sticky",
                up.display()
            );
        }
        another_user_cannot_make(&entry);
    }
}

/// As root, tries to make `path` as uid/gid 65534 (nobody): it must fail.
fn another_user_cannot_make(path: &Path) {
    if std::fs::metadata("/proc/self").expect("self").uid() != 0 {
        skip(
            "another_user_cannot_make",
            Missing::Machine,
            "not root: cannot act as another user (the folder's owner and mode are checked above)",
        );
        return;
    }
    let mut mkdir = Command::new("mkdir");
    mkdir.arg(path);
    // SAFETY: setgid/setgroups/setuid between fork and exec, async-signal-safe.
    #[allow(unsafe_code)]
    unsafe {
        mkdir.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let status = mkdir.stderr(Stdio::null()).status().expect("mkdir");
    assert!(
        !status.success() && !path.exists(),
        "another user made {}: a leftover process would import its code",
        path.display()
    );
}

#[test]
fn a_base_folder_planted_by_another_user_is_refused_and_nothing_starts() {
    let tmp = shared_tmp();
    let uid = std::fs::metadata("/proc/self").expect("self").uid();
    let planted = tmp.path().join(format!("gpumem-{uid}"));
    std::fs::create_dir(&planted).expect("mkdir");
    if uid == 0 {
        std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).expect("chown");
    } else {
        // Not root: a link to a folder elsewhere stands for what another user plants.
        std::fs::remove_dir(&planted).expect("rmdir");
        std::os::unix::fs::symlink("/", &planted).expect("symlink");
    }
    let marker = tmp.path().join("started");
    let out = agent(tmp.path())
        .args(["run", "--", "touch"])
        .arg(&marker)
        .output()
        .expect("agent");
    no_panic(&out);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(!marker.exists(), "the command was started");
    assert!(text(&out.stderr).contains(&planted.display().to_string()));
}

#[test]
fn the_folder_of_a_killed_agent_is_removed_by_the_next_run() {
    let tmp = shared_tmp();
    let work = tempfile::tempdir().expect("tempdir");
    let seen = work.path().join("seen");
    let mut first = agent(tmp.path())
        .args(["run", "--", "sh", "-c"])
        .arg(r#"printf '%s\n%s\n' $$ "${PYTHONPATH%%:*}" > "$OUT.part"; mv "$OUT.part" "$OUT"; exec sleep 30"#)
        .env("OUT", &seen)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("agent");
    wait_for(&seen);
    let said = std::fs::read_to_string(&seen).expect("seen");
    let (command_pid, left) = said.trim().split_once('\n').expect("two lines");
    let left = PathBuf::from(left);
    let _ = first.kill();
    let _ = first.wait();
    // The command runs in a process group of its own and outlives the agent: end it.
    let _ = Command::new("kill").args(["-9", command_pid]).status();
    assert!(left.exists(), "nothing was left behind to clean");
    let out = agent(tmp.path())
        .args(["run", "--", "true"])
        .output()
        .expect("agent");
    no_panic(&out);
    assert!(
        !left.exists(),
        "the killed agent's folder {} is still there",
        left.display()
    );
}

fn python3(test: &str) -> bool {
    let here = Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !here {
        skip(test, Missing::Tool, "no python3");
    }
    here
}

#[test]
fn a_run_inside_a_run_chains_the_users_sitecustomize_exactly_once() {
    if !python3("a_run_inside_a_run") {
        return;
    }
    let tmp = shared_tmp();
    let work = tempfile::tempdir().expect("tempdir");
    let user = work.path().join("user");
    std::fs::create_dir(&user).expect("mkdir");
    let count = work.path().join("count");
    std::fs::write(
        user.join("sitecustomize.py"),
        "import os\nwith open(os.environ['COUNT'], 'a') as f:\n    f.write('ran\\n')\n",
    )
    .expect("write");
    let out = agent(tmp.path())
        .args(["run", "--"])
        .arg(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args(["run", "--", "python3", "-c", "print('inner ran')"])
        .env("PYTHONPATH", &user)
        .env("COUNT", &count)
        .output()
        .expect("agent");
    no_panic(&out);
    let err = text(&out.stderr);
    assert!(text(&out.stdout).contains("inner ran"), "{err}");
    assert!(!err.contains("RecursionError"), "{err}");
    assert!(!err.contains("Error in the chained sitecustomize"), "{err}");
    assert!(!err.contains("gpumem_probe: disabled"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&count).unwrap_or_default(),
        "ran\n",
        "{err}"
    );
}

/// A "probe" that says hello, then leaves a process holding its connection, running
/// past the command's end.
const LEFT_RUNNING: &str = r#"
import json, os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(os.environ["GPUMEM_PROBE_SOCKET"])
hello = dict(v=1, type="hello", pid=os.getpid(), rank=None, local_rank=None, world_size=None,
             reader="hostile-test", backend="none", torch_version=None, cuda_version=None,
             hip_version=None, cudnn_version=None, allocator_backend=None, alloc_conf=None)
s.sendall(json.dumps(hello).encode() + b"\n")
open(os.environ["PIDFILE"], "w").write(str(os.getpid()))
time.sleep(float(sys.argv[1]))
"#;

#[test]
fn a_process_left_running_is_reported_as_still_running() {
    if !python3("a_process_left_running") {
        return;
    }
    let tmp = shared_tmp();
    let work = tempfile::tempdir().expect("tempdir");
    let pidfile = work.path().join("pid");
    let output = work.path().join("r.json");
    let script = r#"python3 -c "$LEFT" 8 & while [ ! -s "$PIDFILE" ]; do sleep 0.02; done"#;
    let t0 = Instant::now();
    let out = agent(tmp.path())
        .args(["run", "--output"])
        .arg(&output)
        .args(["--", "sh", "-c", script])
        .env("LEFT", LEFT_RUNNING)
        .env("PIDFILE", &pidfile)
        .stdin(Stdio::null())
        // Not piped: the leftover would hold the pipes open, and the wait with them.
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("agent");
    let took = t0.elapsed();
    assert_eq!(out.code(), Some(1));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .expect("pid")
        .trim()
        .parse()
        .expect("pid");
    let alive = Path::new(&format!("/proc/{pid}")).exists();
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    assert!(alive, "the leftover should still have been running");
    assert!(
        took < Duration::from_secs(7),
        "shutdown waited for the leftover: {took:?}"
    );
    let r = read_json(&output);
    let lost: Vec<&str> = r["outcome"]["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .filter(|f| f["kind"] == "probe_lost")
        .filter_map(|f| f["message"].as_str())
        .collect();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert!(lost[0].contains("still running"), "{}", lost[0]);
    assert!(!lost[0].contains("killed, crashed"), "{}", lost[0]);
}

/// One process with many long phases: the kept bytes and the stderr report are bounded.
const MANY_PHASES: &str = r#"
import json, os, socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(os.environ["GPUMEM_PROBE_SOCKET"])
def send(m): s.sendall(json.dumps(m).encode() + b"\n")
send(dict(v=1, type="hello", pid=os.getpid(), rank=0, local_rank=0, world_size=1,
          reader="hostile-test", backend="none", torch_version=None, cuda_version=None,
          hip_version=None, cudnn_version=None, allocator_backend=None, alloc_conf=None))
pad = "x" * 60000
for i in range(int(os.environ["PHASES"])):
    send(dict(v=1, type="phase", name="forward", step=i, first_step=i == 0, manual=False,
              device=None, wall_ns=1, allocated_start_bytes=1, allocated_peak_bytes=2,
              allocated_end_bytes=1, reserved_start_bytes=None, reserved_peak_bytes=None,
              reserved_end_bytes=None, device_free_bytes=None, device_total_bytes=None,
              error=pad if os.environ.get("PAD") else None))
send(dict(v=1, type="bye", overhead_ns=1, hook_calls=1, instrumented_ns=2))
"#;

#[test]
fn the_report_and_the_kept_messages_are_bounded() {
    if !python3("the_report_and_the_kept_messages_are_bounded") {
        return;
    }
    let tmp = shared_tmp();
    let work = tempfile::tempdir().expect("tempdir");
    // 1 500 short phases (within the channel's burst): all kept in the file, the report
    // on stderr stays short.
    let output = work.path().join("r.json");
    let out = agent(tmp.path())
        .args(["run", "--output"])
        .arg(&output)
        .args(["--", "python3", "-c", MANY_PHASES])
        .env("PHASES", "1500")
        .output()
        .expect("agent");
    no_panic(&out);
    let r = read_json(&output);
    assert_eq!(
        r["ranks"][0]["phases"].as_array().expect("phases").len(),
        1500
    );
    let report = text(&out.stderr);
    assert!(
        report.lines().count() < 100,
        "{} lines",
        report.lines().count()
    );
    assert!(report.contains("1460 more phases"), "{report}");

    // 1 200 phases of 60 kB lines (72 MB): kept until the budget, the rest refused.
    let output = work.path().join("r2.json");
    let out = agent(tmp.path())
        .args(["run", "--output"])
        .arg(&output)
        .args(["--", "python3", "-c", MANY_PHASES])
        .env("PHASES", "1200")
        .env("PAD", "1")
        .output()
        .expect("agent");
    no_panic(&out);
    let r = read_json(&output);
    let kept = r["ranks"][0]["phases"].as_array().expect("phases").len();
    assert!(kept < 1200 && kept > 900, "{kept} phases kept");
    assert!(r["channel"]["rejected"].as_u64().expect("rejected") > 0);
}

/// A "rank" that runs a step, and a helper process it starts that imports torch (says
/// hello with the rank's inherited environment) and is ended without a goodbye, as a
/// DataLoader's spawn worker is.
const RANK_AND_WORKER: &str = r#"
import json, os, socket, subprocess, sys
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(os.environ["GPUMEM_PROBE_SOCKET"]); return s
def hello(s):
    s.sendall(json.dumps(dict(v=1, type="hello", pid=os.getpid(), ppid=os.getppid(), rank=None,
        local_rank=None, world_size=None, reader="hostile-test", backend="none", torch_version=None,
        cuda_version=None, hip_version=None, cudnn_version=None, allocator_backend=None,
        alloc_conf=None)).encode() + b"\n")
def phase(s, name, step):
    s.sendall(json.dumps(dict(v=1, type="phase", name=name, step=step, first_step=step == 0,
        manual=False, device=None, wall_ns=1, allocated_start_bytes=1, allocated_peak_bytes=2,
        allocated_end_bytes=1, reserved_start_bytes=None, reserved_peak_bytes=None,
        reserved_end_bytes=None, device_free_bytes=None, device_total_bytes=None,
        error=None)).encode() + b"\n")
s = conn(); hello(s)
if len(sys.argv) > 1:
    phase(s, "model_load", None)
    s.close()
    os._exit(0)
subprocess.run([sys.executable, "-c", os.environ["SCRIPT"], "worker"], check=True)
phase(s, "forward", 0)
s.sendall(json.dumps(dict(v=1, type="bye", overhead_ns=1, hook_calls=1, instrumented_ns=2)).encode() + b"\n")
"#;

#[test]
fn a_dataloader_style_worker_is_told_apart_from_the_ranks() {
    if !python3("a_dataloader_style_worker") {
        return;
    }
    let tmp = shared_tmp();
    let work = tempfile::tempdir().expect("tempdir");
    let output = work.path().join("r.json");
    let out = agent(tmp.path())
        .args(["run", "--output"])
        .arg(&output)
        .args(["--", "python3", "-c", RANK_AND_WORKER])
        .env("SCRIPT", RANK_AND_WORKER)
        .output()
        .expect("agent");
    no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = read_json(&output);
    let ranks = r["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 2, "{ranks:?}");
    let (workers, real): (Vec<_>, Vec<_>) = ranks.iter().partition(|k| !k["worker_of"].is_null());
    assert_eq!((workers.len(), real.len()), (1, 1), "{ranks:?}");
    assert_eq!(workers[0]["worker_of"], real[0]["pid"]);
    assert_eq!(r["outcome"]["failures"], serde_json::json!([]));
    assert!(
        text(&out.stderr).contains("not a rank"),
        "{}",
        text(&out.stderr)
    );
}

fn torch_python(test: &str) -> Option<PathBuf> {
    let tools = std::env::var_os("GPUMEM_TOOLS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/gpumem-tools")));
    match tools.map(|t| t.join("torch-venv/bin/python")) {
        Some(p) if p.is_file() => Some(p),
        _ => {
            assert!(
                std::env::var_os("GPUMEM_REQUIRE_TORCH").is_none(),
                "{test}: no torch venv (run scripts/install-tools.sh)"
            );
            skip(
                test,
                Missing::Tool,
                "no $GPUMEM_TOOLS/torch-venv (scripts/install-tools.sh installs it)",
            );
            None
        }
    }
}

#[test]
fn dataloader_spawn_workers_are_not_ranks_on_cpu() {
    let Some(py) = torch_python("dataloader_spawn_workers_are_not_ranks_on_cpu") else {
        return;
    };
    let tmp = shared_tmp();
    let work = tempfile::tempdir().expect("tempdir");
    let output = work.path().join("r.json");
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python");
    let out = agent(tmp.path())
        .args(["run", "--steps", "2", "--output"])
        .arg(&output)
        .arg("--")
        .arg(&py)
        .arg(python.join("tests/workloads/dataloader_workers.py"))
        .env("PYTHONPATH", python.join("tests/standin"))
        .env("GPUMEM_TEST_READER", "recording")
        .output()
        .expect("agent");
    no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = read_json(&output);
    let ranks = r["ranks"].as_array().expect("ranks");
    let (workers, real): (Vec<_>, Vec<_>) = ranks.iter().partition(|k| !k["worker_of"].is_null());
    assert_eq!(real.len(), 1, "{ranks:?}");
    // The loader is iterated once: its two workers each said hello.
    assert_eq!(workers.len(), 2, "{ranks:?}");
    for w in &workers {
        assert_eq!(w["worker_of"], real[0]["pid"]);
    }
    assert!(real[0]["phases"].as_array().expect("phases").len() >= 4);
}

/// A probe whose texts carry terminal escapes (title, clipboard, clear screen, bidi
/// override): the report on stderr shows them escaped.
const ESCAPES: &str = r#"
import json, os, socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(os.environ["GPUMEM_PROBE_SOCKET"])
def send(m): s.sendall(json.dumps(m).encode() + b"\n")
send(dict(v=1, type="hello", pid=os.getpid(), rank=0, local_rank=0, world_size=1,
          reader="\x1b]0;pwned\x07", backend="none", torch_version="\x1b]52;c;ZXZpbA==\x07",
          cuda_version=None, hip_version=None, cudnn_version=None, allocator_backend=None,
          alloc_conf=None))
send(dict(v=1, type="phase", name="\x1b[2Jforward\u202e", step=0, first_step=True, manual=False,
          device=None, wall_ns=1, allocated_start_bytes=1, allocated_peak_bytes=2,
          allocated_end_bytes=1, reserved_start_bytes=None, reserved_peak_bytes=None,
          reserved_end_bytes=None, device_free_bytes=None, device_total_bytes=None,
          error="\x9b31mred"))
send(dict(v=1, type="failure", kind="exception", phase="forward", step=0,
          exception_type="E", message="boom \x1b]0;title\x07", last={}))
"#;

#[test]
fn probe_texts_reach_the_terminal_escaped() {
    if !python3("probe_texts_reach_the_terminal_escaped") {
        return;
    }
    let tmp = shared_tmp();
    let out = agent(tmp.path())
        .args(["run", "--", "python3", "-c", ESCAPES])
        .output()
        .expect("agent");
    no_panic(&out);
    let err = text(&out.stderr);
    assert!(err.contains("\\u001b[2Jforward\\u202e"), "{err}");
    assert!(err.contains("boom \\u001b]0;title\\u0007"), "{err}");
    assert!(
        !err.chars()
            .any(|c| (c.is_control() && c != '\n' && c != '\t') || c == '\u{202e}'),
        "raw escapes reached the terminal: {err:?}"
    );
}
