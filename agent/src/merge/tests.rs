//! A fleet made of the committed fixtures, given contexts of two hosts: rows, the error
//! distribution, the worst entry named, refusals listed, other JSON passed over.

use super::*;
use gpumem_proto::context::SlurmContext;

fn results() -> ResultsFile {
    serde_json::from_str(include_str!(
        "../../../tests/fixtures/measurements/synthetic-seed-dims.json"
    ))
    .unwrap()
}

fn workload() -> WorkloadFile {
    serde_json::from_str(include_str!(
        "../../../tests/fixtures/workloads/synthetic-train_adamw.json"
    ))
    .unwrap()
}

fn ctx(host: &str, job: &str) -> RunContext {
    RunContext {
        run_id: format!("slurm-{job}-0"),
        hostname: Some(host.into()),
        slurm: Some(SlurmContext {
            job_id: job.into(),
            procid: Some(0),
            ..SlurmContext::default()
        }),
        ..RunContext::default()
    }
}

fn write(dir: &Path, name: &str, value: &impl serde::Serialize) {
    std::fs::write(dir.join(name), serde_json::to_string(value).unwrap()).unwrap();
}

#[test]
fn a_fleet_of_two_hosts_merges_into_rows_with_errors_and_the_worst_named() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("round-1");
    std::fs::create_dir(&nested).unwrap();
    let mut a = results();
    a.context = Some(ctx("node-a", "100"));
    write(dir.path(), "a.json", &a);
    // The same configuration on another host, 1 MiB above the prediction in cold_forward.
    let mut b = results();
    b.context = Some(ctx("node-b", "101"));
    let cold = b.runs[0]
        .phases
        .iter_mut()
        .find(|p| p.phase == PhaseName::ColdForward)
        .unwrap();
    let predicted = cold.pool.allocated_peak_bytes.unwrap();
    cold.pool.allocated_peak_bytes = Some(predicted + (1 << 20));
    write(&nested, "b.json", &b);
    let mut w = workload();
    w.context = Some(ctx("node-a", "102"));
    write(&nested, "w.json", &w);
    std::fs::write(
        dir.path().join("bisect-summary.json"),
        r#"{"vary":"batch"}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("broken.json"),
        r#"{"schema":"gpumem.results/v1","runs":7}"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not json").unwrap();

    let sheet = merge(&[dir.path().to_path_buf()]).unwrap();
    sheet.check_schema().unwrap();
    assert_eq!(sheet.sources.len(), 3);
    assert!(sheet.synthetic && sheet.note.as_deref().unwrap().starts_with("SYNTHETIC"));
    assert_eq!(sheet.refused.len(), 1);
    assert!(sheet.refused[0].path.ends_with("broken.json"));
    assert_eq!(sheet.rows.len(), 2, "one network row, one workload row");
    let net = &sheet.rows[0];
    assert_eq!(net.kind, DocumentKind::Results);
    assert_eq!(net.card, "SYNTHETIC");
    assert_eq!((net.documents, net.entries, net.failed), (2, 2, 0));
    let cf = net
        .phases
        .iter()
        .find(|p| p.phase == "cold_forward")
        .unwrap();
    assert_eq!(cf.allocated_peak_bytes, Some(predicted + (1 << 20)));
    assert_eq!(cf.allocated_peak_min_bytes, Some(predicted));
    assert_eq!(cf.computed_bytes, Some(predicted));
    assert_eq!(cf.error_bytes, Some(1 << 20));
    assert_eq!(
        cf.peak_at.as_ref().unwrap().hostname.as_deref(),
        Some("node-b")
    );
    let work = &sheet.rows[1];
    assert_eq!(work.kind, DocumentKind::Workload);
    // The first step is kept apart from the later ones.
    assert!(
        work.phases
            .iter()
            .any(|p| p.phase == "forward" && p.first_step)
    );
    assert!(
        work.phases
            .iter()
            .any(|p| p.phase == "forward" && !p.first_step)
    );
    assert!(work.lines.iter().any(|l| l.item == "optimizer_states"));
    // Errors: the network's phases of both documents and the workload's lines with
    // both sides.
    let network_phases = 2 * net.phases.len() as u64;
    let workload_lines = w.ranks[0]
        .comparison
        .lines
        .iter()
        .filter(|l| l.observed_bytes.is_some() && l.computed_bytes.is_some())
        .count() as u64;
    assert_eq!(sheet.errors.count, network_phases + workload_lines);
    let worst = sheet.worst.as_ref().unwrap();
    // The workload's gradients line is furthest above (3 145 728 against 50 180).
    assert_eq!(worst.what, "gradients");
    assert_eq!(worst.at.run_id.as_deref(), Some("slurm-102-0"));
    assert_eq!(worst.at.hostname.as_deref(), Some("node-a"));
    let text = summary(&sheet);
    assert!(text.contains("worst: "), "{text}");
    assert!(text.contains("SYNTHETIC"));
    // The sheet round-trips through its own types.
    let back: FleetSheet = serde_json::from_str(&serde_json::to_string(&sheet).unwrap()).unwrap();
    assert_eq!(back, sheet);
}

#[test]
fn results_rows_sort_by_their_dimensions_not_their_text() {
    let dir = tempfile::tempdir().unwrap();
    for batch in [10, 2, 1] {
        let mut f = results();
        f.dimensions.batch = batch;
        write(dir.path(), &format!("t{batch}.json"), &f);
    }
    let sheet = merge(&[dir.path().to_path_buf()]).unwrap();
    let batches: Vec<&str> = sheet
        .rows
        .iter()
        .map(|r| r.configuration.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(batches, ["batch=1", "batch=2", "batch=10"]);
}

#[test]
fn a_missing_input_is_an_error_not_an_empty_sheet() {
    let err = merge(&[PathBuf::from("/nonexistent/gpumem-fleet")])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("cannot read"), "{err}");
}
