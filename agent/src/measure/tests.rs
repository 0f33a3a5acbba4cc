//! The phase protocol against the recording stand-in: order of calls, warm-up policy,
//! computed = observed for the agent's own allocations, and failure bookkeeping.

use gpumem_proto::results::{PhaseName, ResultsFile, Status, TraceOp};

use super::*;
use crate::device::standin::StandIn;

fn args(layers: u64, warmup: u32, repeats: u32) -> NetworkArgs {
    NetworkArgs {
        device: "cuda:0".into(),
        batch: 2,
        context: 128,
        width: 1024,
        layers,
        dtype: DtypeArg::Float32,
        warmup,
        repeats,
        trim_between_repeats: false,
        seed: 1,
    }
}

fn plan(net: NetworkArgs, output: Option<PathBuf>) -> Plan {
    Args {
        net,
        output,
        events: None,
        export: Default::default(),
    }
    .validate()
    .unwrap()
}

fn quiet() -> Events {
    Events {
        enabled: false,
        export: None,
    }
}

fn env() -> Environment {
    gpu::base_environment(0)
}

const GIB: u64 = 1 << 30;

#[test]
fn each_phase_syncs_reads_start_resets_runs_syncs_then_reads_peaks_and_end() {
    let p = plan(args(1, 0, 0), None);
    let mut dev = StandIn::new(GIB);
    let out = protocol::run(&mut dev, p.run.clone(), &mut |_| {}).unwrap();
    assert_eq!(out.status, Status::Ok);
    // model_load of one layer: weight 4 MiB, bias 4 KiB.
    let model_load: Vec<&str> = dev.log.iter().take(12).map(String::as_str).collect();
    assert_eq!(
        model_load,
        [
            "sync",
            "read_pool",
            "device_level",
            "reset_peaks",
            "alloc 4194304",
            "fill 4194304",
            "alloc 4096",
            "fill 4096",
            "sync",
            "read_pool",
            "device_level",
            // the next phase starts with its own boundary
            "sync",
        ]
    );
}

#[test]
fn warmup_runs_n_passes_in_one_phase_and_every_warm_repeat_is_kept() {
    let p = plan(args(3, 4, 5), None);
    let mut dev = StandIn::new(GIB);
    let mut seen = Vec::new();
    let out = protocol::run(&mut dev, p.run.clone(), &mut |ph| {
        seen.push((ph.phase, ph.repeat))
    })
    .unwrap();
    let names: Vec<PhaseName> = out.phases.iter().map(|p| p.phase).collect();
    assert_eq!(names, protocol::phase_order(5));
    assert_eq!(
        seen.len(),
        4 + 5,
        "one callback per phase, as soon as it is read"
    );
    assert_eq!(out.phases[3].iterations, 4);
    let repeats: Vec<Option<u32>> = out.phases[4..].iter().map(|p| p.repeat).collect();
    assert_eq!(repeats, [Some(0), Some(1), Some(2), Some(3), Some(4)]);
    // 3 layers × (1 cold + 4 warm-up + 5 repeats) GEMM + activation calls.
    assert_eq!(dev.log.iter().filter(|l| *l == "linear").count(), 3 * 10);
    // Each phase resets peaks exactly once.
    assert_eq!(dev.log.iter().filter(|l| *l == "reset_peaks").count(), 9);
}

#[test]
fn observed_allocated_equals_gpumem_core_prediction_for_every_phase() {
    for (layers, warmup, dtype) in [
        (1, 0, DtypeArg::Float32),
        (2, 1, DtypeArg::Float16),
        (4, 3, DtypeArg::Bfloat16),
    ] {
        let mut a = args(layers, warmup, 2);
        a.dtype = dtype;
        let p = plan(a, None);
        let computed = computed(&p).unwrap();
        let mut dev = StandIn::new(GIB);
        let out = protocol::run(&mut dev, p.run.clone(), &mut |_| {}).unwrap();
        for ph in &out.phases {
            let c = computed
                .phases
                .iter()
                .find(|c| c.phase == ph.phase)
                .unwrap();
            let what = format!("{} layers={layers} warmup={warmup}", ph.phase);
            assert_eq!(
                ph.pool.allocated_start_bytes,
                Some(c.allocated_start_bytes),
                "{what}"
            );
            assert_eq!(
                ph.pool.allocated_peak_bytes,
                Some(c.allocated_peak_bytes),
                "{what}"
            );
            assert_eq!(
                ph.pool.allocated_end_bytes,
                Some(c.allocated_end_bytes),
                "{what}"
            );
            // Reserved is held at a 2 MiB granularity: never below allocated.
            assert!(
                ph.pool.reserved_end_bytes >= ph.pool.allocated_end_bytes,
                "{what}"
            );
        }
    }
}

#[test]
fn trace_names_every_allocation_and_free_in_order() {
    let p = plan(args(2, 0, 1), None);
    let mut dev = StandIn::new(GIB);
    let out = protocol::run(&mut dev, p.run.clone(), &mut |_| {}).unwrap();
    let cold = &out.phases[2];
    let ops: Vec<(TraceOp, &str)> = cold
        .trace
        .iter()
        .map(|t| (t.op, t.tensor.as_str()))
        .collect();
    assert_eq!(
        ops,
        [
            (TraceOp::Alloc, "act0"),
            (TraceOp::Alloc, "act1"),
            (TraceOp::Free, "act0")
        ]
    );
    let warm = &out.phases[4];
    let ops: Vec<(TraceOp, &str)> = warm
        .trace
        .iter()
        .map(|t| (t.op, t.tensor.as_str()))
        .collect();
    // The previous output (act1 of the cold pass) is freed after the new one exists.
    assert_eq!(
        ops,
        [
            (TraceOp::Alloc, "act0"),
            (TraceOp::Alloc, "act1"),
            (TraceOp::Free, "act0"),
            (TraceOp::Free, "act1")
        ]
    );
    let seqs: Vec<u64> = out
        .phases
        .iter()
        .flat_map(|p| p.trace.iter().map(|t| t.seq))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "sequence numbers run on: {seqs:?}"
    );
}

#[test]
fn trim_happens_before_each_warm_repeat_outside_its_window_and_is_recorded() {
    let mut a = args(2, 1, 3);
    a.trim_between_repeats = true;
    let p = plan(a, None);
    let mut dev = StandIn::new(GIB);
    let out = protocol::run(&mut dev, p.run.clone(), &mut |_| {}).unwrap();
    assert_eq!(dev.log.iter().filter(|l| *l == "trim").count(), 3);
    for ph in &out.phases {
        assert_eq!(
            ph.trimmed_before,
            ph.phase == PhaseName::WarmForward,
            "{}",
            ph.phase
        );
    }
    // The trim precedes the phase's own sync → read → reset sequence.
    let i = dev.log.iter().position(|l| l == "trim").unwrap();
    assert_eq!(
        &dev.log[i + 1..i + 5],
        ["sync", "read_pool", "device_level", "reset_peaks"]
    );
    assert!(p.run.trim_between_repeats);
    assert!(protocol_record(&p).trim_between_repeats);
}

#[test]
fn out_of_memory_stops_the_run_records_the_phase_error_and_last_values() {
    // Room for the model (16 793 600) and the input (1 048 576) and one activation,
    // but not the second activation of the cold pass.
    let p = plan(args(4, 3, 5), None);
    let capacity = 16_793_600 + 2 * 1_048_576 + 1000;
    let mut dev = StandIn::new(capacity);
    let out = protocol::run(&mut dev, p.run.clone(), &mut |_| {}).unwrap();
    assert_eq!(out.status, Status::Failed);
    assert_eq!(out.failed_phase, Some(PhaseName::ColdForward));
    assert_eq!(
        out.phases.len(),
        3,
        "phases after the failure are absent, not zero"
    );
    let failed = &out.phases[2];
    assert_eq!(failed.status, Status::Failed);
    let err = failed.error.as_deref().unwrap();
    assert!(
        err.contains("out of memory") && err.contains("act1"),
        "{err}"
    );
    assert_eq!(
        failed.trace.last().map(|t| t.op),
        Some(TraceOp::AllocFailed)
    );
    // Last values read: the peak before saturation, and the end after act0 went back.
    assert_eq!(
        failed.pool.allocated_start_bytes,
        Some(16_793_600 + 1_048_576)
    );
    assert_eq!(
        failed.pool.allocated_peak_bytes,
        Some(16_793_600 + 2 * 1_048_576)
    );
    assert_eq!(
        failed.pool.allocated_end_bytes,
        Some(16_793_600 + 1_048_576)
    );
    assert!(failed.wall_time_ns.is_some());
    assert_eq!(
        dev.used(),
        0,
        "every buffer goes back to the pool when the run ends"
    );
}

#[test]
fn a_sticky_error_leaves_unread_values_null_never_zero() {
    let p = plan(args(1, 0, 1), None);
    let mut dev = StandIn::new(1_000_000); // not even one 4 MiB weight
    dev.sticky_after_oom = true;
    let out = protocol::run(&mut dev, p.run.clone(), &mut |_| {}).unwrap();
    assert_eq!(out.failed_phase, Some(PhaseName::ModelLoad));
    let ph = &out.phases[0];
    assert_eq!(ph.pool.allocated_start_bytes, Some(0));
    assert_eq!(ph.pool.reserved_start_bytes, Some(0));
    assert_eq!(ph.pool.allocated_peak_bytes, None);
    assert_eq!(ph.pool.reserved_peak_bytes, None);
    assert_eq!(ph.pool.allocated_end_bytes, None);
    assert_eq!(ph.pool.reserved_end_bytes, None);
    let json = serde_json::to_value(ph).unwrap();
    assert!(json["pool"]["allocated_peak_bytes"].is_null());
}

#[test]
fn a_failed_run_is_still_written_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("oom.json");
    let p = plan(args(4, 3, 5), Some(path.clone()));
    let mut dev = StandIn::new(16_793_600 + 1_048_576 + 1);
    let run = measure_one(&p, &mut dev, env(), &quiet());
    let exit = finish(&p, vec![run], &quiet(), None, false).unwrap();
    assert_eq!(exit, Exit::MeasureFailed);
    let file: ResultsFile = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    file.check_schema().unwrap();
    assert!(!file.synthetic);
    assert_eq!(
        file.dimensions.width, 1024,
        "requested dimensions are recorded"
    );
    let run = &file.runs[0];
    assert_eq!(run.status, Status::Failed);
    assert_eq!(run.failed_phase, Some(PhaseName::ColdForward));
    assert!(run.error.as_deref().unwrap().contains("out of memory"));
    assert!(run.computed.is_some());
    // The device-level figures are kept in their own columns, with their reason.
    let dl = &run.phases[0].device_level;
    assert!(dl.used_start_bytes.is_some());
    assert_eq!(dl.process_used_start_bytes, None);
    assert_eq!(dl.process_used_reason.as_deref(), Some("stand-in: no NVML"));
}

#[test]
fn two_devices_are_kept_apart_and_a_passing_run_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.json");
    let mut a = args(2, 1, 1);
    a.device = "all".into();
    let p = plan(a, Some(path.clone()));
    assert_eq!(p.devices, DeviceSel::All);
    let mut runs = Vec::new();
    for i in 0..2 {
        let mut dev = StandIn::new(GIB);
        runs.push(measure_one(
            &p,
            &mut dev,
            gpu::base_environment(i),
            &quiet(),
        ));
    }
    assert_eq!(finish(&p, runs, &quiet(), None, false).unwrap(), Exit::Ok);
    let file: ResultsFile = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let devices: Vec<&str> = file.runs.iter().map(|r| r.device.as_str()).collect();
    assert_eq!(devices, ["cuda:0", "cuda:1"]);
    assert_eq!(file.requested_device, "all");
    // A second write to the same path is refused.
    let again = finish(&p, file.runs.clone(), &quiet(), None, false)
        .unwrap_err()
        .to_string();
    assert!(again.contains("refusing to overwrite"), "{again}");
}

#[test]
fn validation_bounds_every_dimension_before_any_gpu_call() {
    let mut a = args(1, 0, 0);
    a.width = 1 << 21; // 2^42-element weight
    assert!(a.validate().unwrap_err().to_string().contains("2^40"));
    let mut a = args(1, 0, 0);
    a.batch = 1 << 20;
    a.context = 1 << 20;
    assert!(a.validate().unwrap_err().to_string().contains("rows"));
    let mut a = args(1, 0, 0);
    a.layers = MAX_LAYERS + 1;
    assert!(a.validate().is_err());
    let mut a = args(1, 0, 0);
    a.device = "gpu0".into();
    assert!(a.validate().unwrap_err().to_string().contains("cuda:N"));
    assert_eq!(parse_device("cuda:3").unwrap(), DeviceSel::One(3));
}

/// The synthetic fixture for the page and replay tests, made from the stand-in (whose
/// allocated figures equal gpumem-core's prediction) and labelled as not a measurement.
/// Regenerate with `GPUMEM_BLESS=1 cargo test -p gpumem-agent synthetic_fixture`.
#[test]
fn synthetic_fixture_is_labelled_and_matches_the_prediction() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/measurements/synthetic-seed-dims.json");
    if std::env::var_os("GPUMEM_BLESS").is_some() {
        let p = plan(
            NetworkArgs {
                seed: 0x5EED,
                layers: 4,
                ..args(4, 3, 5)
            },
            None,
        );
        let mut dev = StandIn::new(80 * GIB);
        let mut env = gpu::base_environment(0);
        env.gpu_name = gpumem_proto::results::Fact::unknown("SYNTHETIC: no GPU was used");
        env.os_release = gpumem_proto::results::Fact::unknown("SYNTHETIC");
        let mut run = measure_one(&p, &mut dev, env, &quiet());
        run.wall_time_ns = None;
        for ph in &mut run.phases {
            ph.wall_time_ns = None;
            ph.protocol_overhead_ns = None;
        }
        let mut file = results_file(&p, vec![run]);
        file.synthetic = true;
        file.created_unix_s = None;
        file.note = Some(
            "SYNTHETIC — not a GPU measurement. Produced without a GPU by the agent's test stand-in: allocated figures equal gpumem-core's prediction for the default dimensions (batch 2, context 128, width 1024); reserved uses a simulated 2 MiB granularity; device-level figures are invented (80 GiB device, 500 MiB context); wall times are null. For page and replay tests only.".to_owned(),
        );
        let _ = std::fs::remove_file(&path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_string_pretty(&file).unwrap() + "\n").unwrap();
    }
    let text = std::fs::read_to_string(&path).expect("fixture exists (GPUMEM_BLESS=1 to create)");
    let file: ResultsFile = serde_json::from_str(&text).unwrap();
    file.check_schema().unwrap();
    assert!(file.synthetic, "the fixture must say it is synthetic");
    assert!(file.note.as_deref().unwrap().starts_with("SYNTHETIC"));
    let run = &file.runs[0];
    assert_eq!(run.status, Status::Ok);
    let computed = run.computed.as_ref().unwrap();
    for ph in &run.phases {
        let c = computed
            .phases
            .iter()
            .find(|c| c.phase == ph.phase)
            .unwrap();
        assert_eq!(ph.pool.allocated_peak_bytes, Some(c.allocated_peak_bytes));
        assert_eq!(ph.wall_time_ns, None, "no invented timings");
    }
    // Round trip without loss.
    let again: ResultsFile = serde_json::from_str(&serde_json::to_string(&file).unwrap()).unwrap();
    assert_eq!(again, file);
}
