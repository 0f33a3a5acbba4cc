//! The measuring commands through the real binary on a machine without a GPU: exit 2
//! with a clear message, nothing written, never a panic; an existing result is never
//! overwritten; bad flags are refused before any GPU call.
//!
//! Tests of the no-driver path check first whether a driver is present (via
//! `environment --json`); on a GPU machine, where `tests/gpu/run.sh` covers the real
//! path, they are skipped through [`gpumem_e2e::skip`] — a visible `SKIPPED` line the
//! test script counts as skipped, never a silent pass.

use std::path::Path;
use std::process::{Command, Output};

fn agent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
        .args(args)
        .output()
        .expect("the agent binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn assert_no_panic(out: &Output) {
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "the agent panicked: {err}");
}

/// True (after reporting the skip) when a CUDA driver library is loadable here.
fn driver_present(test: &str) -> bool {
    let out = agent(&["environment", "--json"]);
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("environment --json prints JSON");
    let present = !report["cuda_driver_library"]["value"].is_null();
    if present {
        gpumem_e2e::skip(
            test,
            gpumem_e2e::Missing::Machine,
            "a CUDA driver is present; this test checks the no-driver path",
        );
    }
    present
}

#[test]
fn environment_without_driver_says_what_is_missing_and_exits_2() {
    if driver_present("environment_without_driver_says_what_is_missing_and_exits_2") {
        return;
    }
    let out = agent(&["environment", "--device", "cuda:0"]);
    assert_eq!(out.status.code(), Some(2));
    assert_no_panic(&out);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("no CUDA driver library (libcuda.so) found"),
        "{stdout}"
    );
    assert!(stdout.contains("measure cannot run here"), "{stdout}");

    let out = agent(&["environment", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["schema"], "gpumem.environment/v1");
    assert!(report["device_count"]["value"].is_null());
    assert!(
        report["device_count"]["reason"].is_string(),
        "unknown facts carry a reason"
    );
    assert_eq!(report["missing"].as_array().map(Vec::len), Some(1));
}

#[test]
fn measure_without_driver_exits_2_and_writes_nothing() {
    if driver_present("measure_without_driver_exits_2_and_writes_nothing") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesures.json");
    let out = agent(&[
        "measure",
        "--device",
        "cuda:0",
        "--batch",
        "2",
        "--context",
        "128",
        "--width",
        "1024",
        "--dtype",
        "float32",
        "--warmup",
        "3",
        "--repeats",
        "5",
        "--output",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_no_panic(&out);
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "gpumem-agent: error: no CUDA driver library (libcuda.so) found: cannot measure here"
        ),
        "{err}"
    );
    assert!(!path.exists(), "no GPU, no number: nothing may be written");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "not even a temporary file"
    );
}

#[test]
fn measure_events_without_driver_print_one_failed_line() {
    if driver_present("measure_events_without_driver_print_one_failed_line") {
        return;
    }
    let out = agent(&["measure", "--events", "jsonl", "--device", "all"]);
    assert_eq!(out.status.code(), Some(2));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let event: gpumem_proto::results::Event = serde_json::from_str(lines[0]).unwrap();
    match event {
        gpumem_proto::results::Event::Failed { device, error } => {
            assert_eq!(device, None);
            assert!(error.contains("libcuda.so"), "{error}");
        }
        other => panic!("expected a failed event, got {other:?}"),
    }
}

#[test]
fn an_existing_output_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesures.json");
    std::fs::write(&path, "earlier series").unwrap();
    let out = agent(&["measure", "--output", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_no_panic(&out);
    let err = text(&out.stderr);
    assert!(err.contains("refusing to overwrite"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "earlier series");
}

#[test]
fn bad_flags_are_refused_with_clear_messages_before_any_gpu_call() {
    let cases: [(&[&str], &str); 6] = [
        (&["measure", "--dtype", "float64"], "float64"),
        (&["measure", "--width", "0"], "--width"),
        (&["measure", "--batch=-1"], "--batch"),
        (
            &[
                "measure",
                "--batch",
                "4294967296",
                "--context",
                "4294967296",
            ],
            "overflow",
        ),
        (
            &["measure", "--batch", "65536", "--context", "65536"],
            "rows",
        ),
        (&["measure", "--device", "gpu0"], "cuda:N"),
    ];
    for (args, needle) in cases {
        let out = agent(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_no_panic(&out);
        let err = text(&out.stderr);
        assert!(
            err.contains(needle),
            "{args:?}: expected {needle:?} in {err}"
        );
        assert!(
            !err.contains("libcuda"),
            "{args:?}: flags are checked before the GPU: {err}"
        );
    }
    let out = agent(&["measure", "--output", "/nonexistent-dir/r.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("does not exist"));
}

#[test]
fn bisect_without_driver_stops_after_the_first_trial_with_exit_2() {
    if driver_present("bisect_without_driver_stops_after_the_first_trial_with_exit_2") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trials = dir.path().join("trials");
    let out = agent(&[
        "bisect",
        "--vary",
        "width",
        "--from",
        "64",
        "--to",
        "4096",
        "--output-dir",
        trials.to_str().unwrap(),
        "--layers",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_no_panic(&out);
    let err = text(&out.stderr);
    assert!(err.contains("could not measure (exit 2)"), "{err}");
    let mut names: Vec<String> = std::fs::read_dir(&trials)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // One trial was tried (its log kept), no result written, and the summary says why.
    assert_eq!(names, ["bisect-summary.json", "trial-width-64.log"]);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trials.join("bisect-summary.json")).unwrap())
            .unwrap();
    assert!(summary["largest_passing"].is_null());
    assert!(summary["stopped"].as_str().unwrap().contains("libcuda"));
}

#[test]
fn bisect_refuses_bad_ranges_and_used_folders() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = agent(&[
        "bisect",
        "--vary",
        "batch",
        "--from",
        "8",
        "--to",
        "8",
        "--output-dir",
        d,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("must be larger"));
    std::fs::write(Path::new(d).join("old.json"), "{}").unwrap();
    let out = agent(&[
        "bisect",
        "--vary",
        "batch",
        "--from",
        "1",
        "--to",
        "8",
        "--output-dir",
        d,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not empty"));
    let out = agent(&[
        "bisect",
        "--vary",
        "depth",
        "--from",
        "1",
        "--to",
        "8",
        "--output-dir",
        d,
    ]);
    assert_eq!(out.status.code(), Some(2));
    let out = agent(&[
        "bisect",
        "--vary",
        "width",
        "--from",
        "1",
        "--to",
        "8",
        "--device",
        "all",
        "--output-dir",
        d,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("one device at a time"));
}

#[test]
fn bisect_plans_check_their_flags_and_resume_names_the_trials_still_missing() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("plan");
    let d = out_dir.to_str().unwrap();
    let base = ["bisect", "--vary", "batch", "--from", "1", "--to", "64"];
    let run = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        let out = agent(&a);
        assert_no_panic(&out);
        out
    };
    // Kubernetes needs an image and a claim; --parallel needs --plan; K ≥ 2.
    let out = run(&["--plan", "k8s", "--parallel", "4", "--output-dir", d]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--image"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["--parallel", "4", "--output-dir", d]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["--plan", "slurm", "--parallel", "1", "--output-dir", d]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!out_dir.exists(), "nothing is written for a refused plan");
    // A valid plan writes round 1 and submits nothing.
    let out = run(&["--plan", "slurm", "--parallel", "4", "--output-dir", d]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let script = std::fs::read_to_string(out_dir.join("round-1/gpumem-bisect.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --array=0-3"), "{script}");
    assert!(script.contains("values=(1 22 43 64)"), "{script}");
    assert!(text(&out.stdout).contains("sbatch "));
    // Resuming before the array ran names every missing trial and writes nothing.
    let out = agent(&["bisect", "--resume", d]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("4 of 4 trials have no result yet (--batch 1, 22, 43, 64)"),
        "{err}"
    );
    assert!(!out_dir.join("round-2").exists());
    // --resume takes no search flags, and a folder without a plan is refused.
    let out = agent(&["bisect", "--resume", d, "--vary", "batch"]);
    assert_eq!(out.status.code(), Some(2));
    let out = agent(&["bisect", "--resume", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("bisect-plan.json"));
}
