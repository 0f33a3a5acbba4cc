//! The human report printed beside a results file (which
//! `crate::private::write_new_atomically` writes without ever overwriting one).

use std::fmt::Write as _;

use gpumem_core::units::group_digits;
use gpumem_proto::results::{MeasurementResult, PhaseResult, ResultsFile, Status};

fn b(v: Option<u64>) -> String {
    v.map(group_digits).unwrap_or_else(|| "null".to_owned())
}

fn phase_label(p: &PhaseResult) -> String {
    match p.repeat {
        Some(r) => format!("{}[{r}]", p.phase),
        None => p.phase.to_string(),
    }
}

/// The report printed after a measurement: per device, the four pool counters, the
/// device-level columns, and the computed figures beside the observed ones.
pub fn human_report(file: &ResultsFile) -> String {
    let mut s = String::new();
    let d = &file.dimensions;
    let _ = writeln!(
        s,
        "gpumem-agent measure — batch {} · context {} · width {} · layers {} · {} · warm-up {} · repeats {}{}",
        d.batch,
        d.context,
        d.width,
        d.layers,
        d.dtype,
        file.protocol.warmup_iterations,
        file.protocol.warm_repeats,
        if file.protocol.trim_between_repeats {
            " · pool trimmed before each warm repeat"
        } else {
            ""
        }
    );
    for run in &file.runs {
        device_report(&mut s, run);
    }
    s
}

fn device_report(s: &mut String, run: &MeasurementResult) {
    let env = &run.environment;
    let _ = writeln!(
        s,
        "\n{} — {} (compute {}, {} B total) · allocator {} (release threshold {} B)",
        run.device,
        env.gpu_name.value.as_deref().unwrap_or("unknown GPU"),
        env.compute_capability.value.as_deref().unwrap_or("?"),
        b(env.total_memory_bytes.value),
        env.allocator.backend,
        group_digits(env.allocator.release_threshold_bytes),
    );
    let _ = writeln!(
        s,
        "{:<16} {:<6} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15} {:>10}",
        "phase",
        "status",
        "alloc start B",
        "alloc peak B",
        "alloc end B",
        "reserv start B",
        "reserv peak B",
        "reserv end B",
        "device used B",
        "process B",
        "wall ms"
    );
    for p in &run.phases {
        let _ = writeln!(
            s,
            "{:<16} {:<6} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15} {:>10}",
            phase_label(p),
            if p.status == Status::Ok {
                "ok"
            } else {
                "FAILED"
            },
            b(p.pool.allocated_start_bytes),
            b(p.pool.allocated_peak_bytes),
            b(p.pool.allocated_end_bytes),
            b(p.pool.reserved_start_bytes),
            b(p.pool.reserved_peak_bytes),
            b(p.pool.reserved_end_bytes),
            b(p.device_level.used_end_bytes),
            b(p.device_level.process_used_end_bytes),
            p.wall_time_ns
                .map(|ns| format!("{:.3}", ns as f64 / 1e6))
                .unwrap_or_else(|| "null".to_owned()),
        );
    }
    if let Some(computed) = &run.computed {
        let _ = writeln!(
            s,
            "\ncomputed (gpumem-core, requested bytes) beside observed allocated (pool):"
        );
        let _ = writeln!(
            s,
            "{:<16} {:>15} {:>15} {:>15} {:>15} {:>15}",
            "phase",
            "computed peak B",
            "observed peak B",
            "difference B",
            "computed end B",
            "observed end B"
        );
        for p in &run.phases {
            let Some(c) = computed.phases.iter().find(|c| c.phase == p.phase) else {
                continue;
            };
            let diff = p
                .pool
                .allocated_peak_bytes
                .map(|o| format!("{:+}", i128::from(o) - i128::from(c.allocated_peak_bytes)))
                .unwrap_or_else(|| "null".to_owned());
            let _ = writeln!(
                s,
                "{:<16} {:>15} {:>15} {:>15} {:>15} {:>15}",
                phase_label(p),
                group_digits(c.allocated_peak_bytes),
                b(p.pool.allocated_peak_bytes),
                diff,
                group_digits(c.allocated_end_bytes),
                b(p.pool.allocated_end_bytes),
            );
        }
        let _ = writeln!(s, "known causes of a difference:");
        for k in &computed.known_differences {
            let _ = writeln!(s, "  - {k}");
        }
    }
    let _ = writeln!(
        s,
        "note: reserved − allocated is meaningful only at one checkpoint (start or end), never as the difference of two peaks; device-level and process columns have a broader scope and are never added to the pool figures (method §5)."
    );
    match run.status {
        Status::Ok => {
            let _ = writeln!(s, "{}: every phase passed", run.device);
        }
        Status::Failed => {
            let _ = writeln!(
                s,
                "{}: FAILED in {} — {}",
                run.device,
                run.failed_phase
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "setup".to_owned()),
                run.error.as_deref().unwrap_or("no error text")
            );
        }
    }
}
