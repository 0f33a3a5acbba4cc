//! Writing results without ever overwriting one, and the human report printed beside it.
//!
//! A result is written to a temporary file of a random name in the target's folder
//! (created exclusively, mode 0600), flushed to disk, then moved to the target name only
//! if nothing is there (`crate::private::write_atomically`), so a result that appeared
//! meanwhile is never replaced. Readers therefore see either no file or the complete
//! file.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use gpumem_core::units::group_digits;
use gpumem_proto::results::{MeasurementResult, PhaseResult, ResultsFile, Status};

/// Refuses a path that exists (file, folder or dangling link) or whose folder does not.
pub fn check_new_path(path: &Path) -> Result<()> {
    if path.symlink_metadata().is_ok() {
        bail!(
            "refusing to overwrite {}: it exists; choose a new file name for each series",
            path.display()
        );
    }
    let parent = parent_dir(path);
    if !parent.is_dir() {
        bail!(
            "cannot write {}: folder {} does not exist",
            path.display(),
            parent.display()
        );
    }
    Ok(())
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Writes `bytes` to `path` atomically, mode 0600; fails, leaving any existing file
/// untouched, if `path` exists (`crate::private::write_atomically`).
pub fn write_new_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    check_new_path(path)?;
    crate::private::write_atomically(path, bytes, crate::private::Existing::Refuse)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_an_existing_file_and_leaves_it_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(&path, "precious").unwrap();
        let err = write_new_atomically(&path, b"new").unwrap_err().to_string();
        assert!(err.contains("refusing to overwrite"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
    }

    #[test]
    fn writes_a_new_file_completely_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        write_new_atomically(&path, b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("r.json")]);
    }

    #[test]
    fn refuses_a_missing_folder() {
        let dir = tempfile::tempdir().unwrap();
        let err = check_new_path(&dir.path().join("no/such/r.json"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not exist"), "{err}");
    }
}
