//! The human report of a workload document, printed on stderr (stdout belongs to the
//! command).

use super::*;

/// "… n more" when a list was cut at `shown` in the report.
pub(super) fn more(s: &mut String, total: usize, shown: usize, what: &str) {
    if total > shown {
        let _ = writeln!(
            s,
            "  … {} more {what} (every one is in --output)",
            total - shown
        );
    }
}

pub(super) fn b(v: Option<u64>) -> String {
    v.map(group_digits).unwrap_or_else(|| "null".to_owned())
}

/// The human report (on stderr: stdout belongs to the command).
pub fn report(file: &WorkloadFile) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\ngpumem-agent run — {}", file.command.join(" "));
    if file.synthetic {
        let _ = writeln!(
            s,
            "SYNTHETIC — {}",
            file.note.as_deref().unwrap_or("not a GPU measurement")
        );
    }
    let o = &file.outcome;
    let _ = writeln!(
        s,
        "outcome: {:?} · exit code {} · signal {} · {} ms",
        o.status,
        o.exit_code.map_or("none".into(), |c| c.to_string()),
        o.signal.map_or("none".into(), |c| c.to_string()),
        o.wall_time_ns / 1_000_000
    );
    for f in o.failures.iter().take(REPORT_FAILURES) {
        let _ = writeln!(
            s,
            "  failure {:?}{}{}{}: {}",
            f.kind,
            f.rank.map_or(String::new(), |r| format!(" rank {r}")),
            f.phase
                .as_ref()
                .map_or(String::new(), |p| format!(" in {p}")),
            f.requested_bytes.map_or(String::new(), |r| format!(
                " (requested {})",
                Bytes(r).describe()
            )),
            f.message
        );
    }
    more(&mut s, o.failures.len(), REPORT_FAILURES, "failures");
    for r in file.ranks.iter().take(REPORT_RANKS) {
        if r.launcher {
            let _ = writeln!(
                s,
                "\nlauncher process {} (started the ranks: it imports torch but runs no step; not a rank)",
                r.pid
            );
            continue;
        }
        if let Some(parent) = r.worker_of {
            let _ = writeln!(
                s,
                "\nworker process {} of pid {parent} (a DataLoader worker or another helper, not a rank) · {} phases",
                r.pid,
                r.phases.len()
            );
            continue;
        }
        let _ = writeln!(
            s,
            "\nrank {} · local rank {} · pid {} · {} · backend {} · reader {} · torch {}",
            r.rank.map_or("-".into(), |v| v.to_string()),
            r.local_rank.map_or("-".into(), |v| v.to_string()),
            r.pid,
            r.device.as_deref().unwrap_or("device not read"),
            r.environment.backend,
            r.environment.reader,
            r.environment.torch_version.as_deref().unwrap_or("?"),
        );
        let _ = writeln!(
            s,
            "  {:<16} {:>5} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16} {:>10}",
            "phase",
            "step",
            "alloc start",
            "alloc peak",
            "alloc end",
            "resv start",
            "resv peak",
            "resv end",
            "wall ms"
        );
        // The first phases, then the last one (where a failing run stopped).
        let shown = r.phases.len().min(REPORT_PHASES);
        let last = r.phases.len().saturating_sub(1);
        for (i, p) in r.phases.iter().enumerate() {
            if i >= shown.saturating_sub(1) && i != last {
                if i == shown.saturating_sub(1) {
                    let _ = writeln!(
                        s,
                        "  … {} more phases (every one is in --output)",
                        r.phases.len() - shown
                    );
                }
                continue;
            }
            let a = &p.allocator;
            let _ = writeln!(
                s,
                "  {:<16} {:>5} {:>16} {:>16} {:>16} {:>16} {:>16} {:>16} {:>10.3}{}{}",
                p.name,
                p.step.map_or("-".into(), |v| v.to_string()),
                b(a.allocated_start_bytes),
                b(a.allocated_peak_bytes),
                b(a.allocated_end_bytes),
                b(a.reserved_start_bytes),
                b(a.reserved_peak_bytes),
                b(a.reserved_end_bytes),
                p.wall_time_ns as f64 / 1e6,
                if p.first_step { "  (first step)" } else { "" },
                p.error
                    .as_ref()
                    .map_or(String::new(), |e| format!("  FAILED: {e}")),
            );
        }
        if !r.comparison.lines.is_empty() {
            let traced = r.comparison.lines.iter().any(|l| l.traced_bytes.is_some());
            let attributed = r
                .comparison
                .lines
                .iter()
                .any(|l| l.attributed_bytes.is_some());
            let _ = writeln!(
                s,
                "  computed vs observed{}{} (bytes):",
                if traced { " vs traced" } else { "" },
                if attributed {
                    " vs the allocator's history"
                } else {
                    ""
                }
            );
            for l in &r.comparison.lines {
                let _ = writeln!(
                    s,
                    "    {:<18} {:>16} ({:?}) · observed {:>16}{}{} — {}{}",
                    l.item,
                    b(l.computed_bytes),
                    l.basis,
                    b(l.observed_bytes),
                    if traced {
                        format!(" · traced {:>16}", b(l.traced_bytes))
                    } else {
                        String::new()
                    },
                    if attributed {
                        format!(" · history {:>16}", b(l.attributed_bytes))
                    } else {
                        String::new()
                    },
                    l.observed_how,
                    l.why.as_ref().map_or(String::new(), |w| format!(" [{w}]")),
                );
            }
            for d in &r.comparison.differences {
                let _ = writeln!(
                    s,
                    "    difference {:?}: {} — {}",
                    d.kind,
                    d.bytes
                        .map_or("null".into(), |v| group_digits(v.unsigned_abs())
                            + if v < 0 { " (negative)" } else { "" }),
                    d.explanation
                );
            }
        }
        if let Some(t) = &r.comparison.trace {
            let _ = writeln!(s, "  {}", t.detail);
        }
        if let Some(h) = &r.memory_history {
            let _ = writeln!(s, "  allocator history: {}", h.detail);
            if let Some(p) = &h.pickle {
                let _ = writeln!(
                    s,
                    "  its raw snapshot: {p} (pytorch.org/memory_viz reads it)"
                );
            }
            if let Some(a) = &h.attribution {
                let text = crate::trace::render_attribution(a);
                let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
                for line in lines.iter().take(REPORT_PHASES + 10) {
                    let _ = writeln!(s, "  {line}");
                }
                more(
                    &mut s,
                    lines.len(),
                    REPORT_PHASES + 10,
                    "lines of the attribution",
                );
            }
        }
        if let Some(ov) = r.overhead {
            let _ = writeln!(
                s,
                "  probe overhead: {:.3} ms in {} hook calls over {:.3} ms instrumented",
                ov.overhead_ns as f64 / 1e6,
                ov.hook_calls,
                ov.instrumented_ns as f64 / 1e6
            );
        }
    }
    more(&mut s, file.ranks.len(), REPORT_RANKS, "ranks");
    match &file.timeline.reason {
        Some(reason) => {
            let _ = writeln!(s, "\ndevice-level timeline: none ({reason})");
        }
        None => {
            for d in &file.timeline.devices {
                let _ = writeln!(
                    s,
                    "\ndevice-level (NVML, process tree) on device {}: peak {} in {} samples",
                    d.index,
                    d.peak_bytes.map_or("null".into(), |p| Bytes(p).describe()),
                    d.samples.len()
                );
            }
        }
    }
    s
}
