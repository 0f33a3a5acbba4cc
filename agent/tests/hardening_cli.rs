//! `trace`, `bisect --plan` / `--resume`, `estimate`, `merge` and `serve --replay`
//! against another local user and against inputs that cost more than they look, through
//! the real (debug) binary. No GPU and no torch needed: a stand-in "python" (a shell
//! script) shows what the agent gives the trace probe.
//!
//! - the trace probe's folder (first on its `sys.path`) is 0700 in the agent's private
//!   base under any umask, and the probe dies with its agent;
//! - a trace that would build more than the bounds allow never starts Python;
//! - `bisect --plan` refuses an output folder others can write, and paths that would
//!   break a script line; `--resume` refuses a plan whose command words it would not
//!   write itself;
//! - llama.cpp's placement and `--override-tensor` are bounded before any tensor is
//!   listed; endless files (`/dev/zero`) are refused; `merge` stays the size of its input.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn agent() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"));
    c.env_remove("XDG_RUNTIME_DIR").stdin(Stdio::null());
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn no_panic(out: &Output) {
    assert!(
        !text(&out.stderr).contains("panicked"),
        "the agent panicked: {}",
        text(&out.stderr)
    );
}

fn config(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/gpumem-core/tests/cases/configs")
        .join(name)
}

/// A temporary folder shaped like /tmp: world-writable and sticky.
fn shared_tmp() -> tempfile::TempDir {
    let t = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    t
}

/// A stand-in for Python: runs `body` (sh) with the agent's arguments (`-u SCRIPT`).
fn fake_python(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("python");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

#[test]
fn the_trace_probes_folder_is_private_under_any_umask() {
    let tmp = shared_tmp();
    let work = tempfile::tempdir().expect("tempdir");
    let seen = work.path().join("seen");
    let uid = std::fs::metadata("/proc/self").expect("self").uid();
    let python = fake_python(
        work.path(),
        &format!(
            "d=$(dirname \"$2\"); stat -c '%a %u' \"$d\" \"$2\" > {seen}; echo \"$d\" >> {seen}; echo '{{\"unavailable\": \"the stand-in\"}}'",
            seen = seen.display()
        ),
    );
    for umask in ["000", "002", "022"] {
        let _ = std::fs::remove_file(&seen);
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("umask {umask}; exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_gpumem-agent"))
            .arg("trace")
            .arg("--config")
            .arg(config("llama-3.2-1b.json"))
            .args(["--context", "64", "--python"])
            .arg(&python)
            .env_remove("XDG_RUNTIME_DIR")
            .env("TMPDIR", tmp.path())
            .output()
            .expect("agent runs");
        no_panic(&out);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("the stand-in"),
            "{}",
            text(&out.stderr)
        );
        let got = std::fs::read_to_string(&seen).expect("the stand-in ran");
        let lines: Vec<&str> = got.lines().collect();
        assert_eq!(lines[0], format!("700 {uid}"), "umask {umask}: the folder");
        assert_eq!(lines[1], format!("600 {uid}"), "umask {umask}: the script");
        let base = tmp
            .path()
            .canonicalize()
            .unwrap()
            .join(format!("gpumem-{uid}"));
        assert!(
            Path::new(lines[2]).starts_with(&base),
            "{} is not in the private base {}",
            lines[2],
            base.display()
        );
        assert!(!Path::new(lines[2]).exists(), "removed after the trace");
    }
}

#[test]
fn the_trace_probe_dies_with_its_agent() {
    let work = tempfile::tempdir().expect("tempdir");
    let pid_file = work.path().join("pid");
    // The stand-in hangs, as a probe building an enormous model would.
    let python = fake_python(
        work.path(),
        &format!("echo $$ > {}; exec sleep 600", pid_file.display()),
    );
    let mut child = agent()
        .arg("trace")
        .arg("--config")
        .arg(config("llama-3.2-1b.json"))
        .args(["--context", "64", "--python"])
        .arg(&python)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("agent runs");
    let t0 = Instant::now();
    while !pid_file.exists() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("the stand-in started")
        .trim()
        .parse()
        .expect("a pid");
    let alive = |pid: i32| Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid);
    assert!(alive(pid));
    // SIGTERM, as a service manager or a Ctrl-C'd shell sends it.
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    let _ = child.wait();
    let t0 = Instant::now();
    while alive(pid) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(pid), "the probe (pid {pid}) outlived its agent");
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

#[test]
fn a_trace_past_its_bounds_never_starts_python() {
    let work = tempfile::tempdir().expect("tempdir");
    let marker = work.path().join("started");
    let python = fake_python(work.path(), &format!("touch {}", marker.display()));
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(config("llama-3.2-1b.json")).expect("read"))
            .expect("json");
    // Within what the estimate takes (arch::MAX_LAYERS), past what a trace builds.
    cfg["num_hidden_layers"] = serde_json::json!(4096u64);
    let huge = work.path().join("config.json");
    std::fs::write(&huge, cfg.to_string()).expect("write");
    let cases: [(&Path, &[&str], &str); 2] = [
        (&huge, &["--context", "64"], "layers a trace builds"),
        (
            &config("llama-3.2-1b.json"),
            &[
                "--context",
                "64",
                "--train",
                "lora",
                "--lora-rank",
                "1099511627776",
            ],
            "--lora-rank",
        ),
    ];
    for (cfg, extra, why) in cases {
        let t0 = Instant::now();
        let out = agent()
            .arg("trace")
            .arg("--config")
            .arg(cfg)
            .args(extra)
            .arg("--python")
            .arg(&python)
            .output()
            .expect("agent runs");
        no_panic(&out);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(why), "{}", text(&out.stderr));
        assert!(!marker.exists(), "Python was started for {why}");
        assert!(t0.elapsed() < Duration::from_secs(20));
    }
}

fn plan(dir: &Path, extra: &[&str]) -> Output {
    let out = agent()
        .args([
            "bisect",
            "--vary",
            "batch",
            "--from",
            "1",
            "--to",
            "64",
            "--plan",
            "slurm",
            "--parallel",
            "4",
            "--output-dir",
        ])
        .arg(dir)
        .args(extra)
        .output()
        .expect("agent runs");
    no_panic(&out);
    out
}

#[test]
fn bisect_plan_refuses_a_folder_others_can_write_and_paths_that_break_a_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Made by someone else, empty and world-writable: its owner could swap round-1/.
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let out = plan(&open, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("mode 777"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_dir(&open).expect("list").count(),
        0,
        "nothing written"
    );
    // Owned by another user (root can hand it over to nobody, as the other user would
    // have made it).
    if std::fs::metadata("/proc/self").expect("self").uid() == 0 {
        let theirs = tmp.path().join("theirs");
        std::fs::create_dir(&theirs).expect("mkdir");
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
        let out = plan(&theirs, &[]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            text(&out.stderr).contains("uid 65534"),
            "{}",
            text(&out.stderr)
        );
    }
    // A line break in the folder's name would end `#SBATCH --output=` and start a
    // command.
    let newline = tmp.path().join("x\ntouch /tmp/pwned #");
    let out = plan(&newline, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("control character"),
        "{}",
        text(&out.stderr)
    );
    assert!(!newline.exists());
    // A space is fine, quoted as sbatch reads it; the folder is made 0700.
    let spaced = tmp.path().join("my runs");
    let out = plan(&spaced, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::metadata(&spaced).expect("made").mode() & 0o777,
        0o700
    );
    let script =
        std::fs::read_to_string(spaced.join("round-1/gpumem-bisect.sbatch")).expect("script");
    let resolved = spaced.canonicalize().expect("canon");
    assert!(
        script.contains(&format!(
            "#SBATCH --output=\"{}/round-1/slurm-%A_%a.out\"\n",
            resolved.display()
        )),
        "{script}"
    );
    let plan_mode = std::fs::metadata(spaced.join("bisect-plan.json"))
        .expect("plan")
        .mode();
    assert_eq!(plan_mode & 0o777, 0o600);
}

#[test]
fn bisect_resume_refuses_a_plan_it_would_not_write() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("plan");
    assert_eq!(plan(&dir, &[]).status.code(), Some(0));
    let plan_path = dir.join("bisect-plan.json");
    let original = std::fs::read_to_string(&plan_path).expect("plan");
    let resume = |extra: &[&str]| {
        let out = agent()
            .args(["bisect", "--resume"])
            .arg(&dir)
            .args(extra)
            .output()
            .expect("agent runs");
        no_panic(&out);
        out
    };
    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_str(&original).expect("json");
        f(&mut v);
        std::fs::write(&plan_path, v.to_string()).expect("write");
        std::fs::set_permissions(&plan_path, std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
    };
    // Trials that finished, so that resuming would write round 2.
    for (v, fail) in [(1, false), (22, false), (43, true), (64, true)] {
        let r: serde_json::Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/measurements/synthetic-seed-dims.json"
        ))
        .expect("fixture");
        let mut r = r;
        if fail {
            r["runs"][0]["status"] = serde_json::json!("failed");
        }
        std::fs::write(
            dir.join(format!("round-1/trial-batch-{v}.json")),
            r.to_string(),
        )
        .expect("write");
    }
    // Another program as the agent.
    edit(&|v| v["agent"] = serde_json::json!("/tmp/payload"));
    let out = resume(&[]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("\"/tmp/payload\""), "{err}");
    assert!(!dir.join("round-2").exists());
    // Given again with --agent, the same program is accepted only if it is the plan's.
    let out = resume(&["--agent", "/opt/other"]);
    assert_eq!(out.status.code(), Some(2));
    // A measure flag that is not one `measure` takes, or a value it refuses.
    for flags in [
        serde_json::json!(["--device", "cuda:0", "--wrap", "x"]),
        serde_json::json!(["--device", "cuda:0;touch /tmp/pwned"]),
    ] {
        edit(&|v| v["measure_flags"] = flags.clone());
        let out = resume(&[]);
        assert_eq!(out.status.code(), Some(2), "{flags}");
        assert!(
            text(&out.stderr).contains("measure flags"),
            "{}",
            text(&out.stderr)
        );
        assert!(!dir.join("round-2").exists());
    }
    // A plan others could have edited is not read at all.
    std::fs::write(&plan_path, &original).expect("write");
    std::fs::set_permissions(&plan_path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = resume(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("mode 666"),
        "{}",
        text(&out.stderr)
    );
    // The plan as written resumes: round 2 between 22 and 43.
    std::fs::set_permissions(&plan_path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let out = resume(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let script =
        std::fs::read_to_string(dir.join("round-2/gpumem-bisect.sbatch")).expect("round 2");
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_gpumem-agent")).expect("exe");
    assert!(script.contains(&exe.display().to_string()), "{script}");
}

#[test]
fn llama_cpp_placement_is_bounded_before_any_tensor_is_listed() {
    let cases: [&[&str]; 3] = [
        &["--layers", "1000000"],
        &["--layers", "100000000"],
        &["--override-tensor", &"blk\\.1\\.=CPU,".repeat(500)],
    ];
    for extra in cases {
        let t0 = Instant::now();
        let out = agent()
            .arg("estimate")
            .arg("--config")
            .arg(config("mixtral-8x7b.json"))
            .args([
                "--engine",
                "llama.cpp",
                "--card",
                "h100-sxm-80gb",
                "--context",
                "4096",
            ])
            .args(extra.iter().map(|a| a.trim_end_matches(',')))
            .output()
            .expect("agent runs");
        no_panic(&out);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains("at most"), "{err}");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "took {:?}",
            t0.elapsed()
        );
    }
}

#[test]
fn endless_files_are_refused_not_read() {
    let runs: [&[&str]; 4] = [
        &["estimate", "--config", "/dev/zero"],
        &["trace", "--config", "/dev/zero", "--context", "8"],
        &[
            "estimate",
            "--parameters",
            "8B",
            "--engine",
            "vllm",
            "--card",
            "h100-sxm-80gb",
            "--speculative-method",
            "draft_model",
            "--draft-config",
            "/dev/zero",
        ],
        &["serve", "--replay", "/dev/zero", "--no-open"],
    ];
    for args in runs {
        let t0 = Instant::now();
        let out = agent().args(args).output().expect("agent runs");
        no_panic(&out);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("larger than"),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(t0.elapsed() < Duration::from_secs(20), "{args:?}");
    }
}

#[test]
fn merge_stays_the_size_of_its_input_whatever_one_field_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut w: serde_json::Value = serde_json::from_str(include_str!(
        "../../tests/fixtures/workloads/synthetic-train_adamw.json"
    ))
    .expect("fixture");
    // A 1 MB host name and 400 phases: the name used to be copied into every phase's
    // worst reading.
    w["context"] =
        serde_json::json!({"run_id": "r", "hostname": "h".repeat(1 << 20), "devices": []});
    let template = w["ranks"][0]["phases"][1].clone();
    let phases: Vec<serde_json::Value> = (0..400)
        .map(|i| {
            let mut p = template.clone();
            p["name"] = serde_json::json!(format!("phase-{i}"));
            p
        })
        .collect();
    w["ranks"][0]["phases"] = serde_json::json!(phases);
    let input = dir.path().join("w.json");
    std::fs::write(&input, w.to_string()).expect("write");
    let size = std::fs::metadata(&input).expect("stat").len();
    let sheet = dir.path().join("fleet.json");
    let out = agent()
        .arg("merge")
        .arg(&input)
        .arg("--output")
        .arg(&sheet)
        .output()
        .expect("agent runs");
    no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let written = std::fs::metadata(&sheet).expect("sheet").len();
    assert!(written < 4 * size, "sheet {written} B from a {size} B file");
    let text = std::fs::read_to_string(&sheet).expect("read");
    assert!(text.contains("hhhh…"), "the cut name is marked");
}
