//! The exposition text of the committed fixtures: names, DCGM's labels, bounded label
//! sets, the synthetic label, escaping and one series per label set.

use super::*;
use gpumem_proto::context::{DeviceIdentity, SlurmContext};

fn workload() -> WorkloadFile {
    serde_json::from_str(include_str!(
        "../../../tests/fixtures/workloads/synthetic-train_adamw.json"
    ))
    .unwrap()
}

fn results() -> ResultsFile {
    serde_json::from_str(include_str!(
        "../../../tests/fixtures/measurements/synthetic-seed-dims.json"
    ))
    .unwrap()
}

fn slurm_context() -> RunContext {
    RunContext {
        run_id: "slurm-77-1".into(),
        hostname: Some("gpu-node-3".into()),
        slurm: Some(SlurmContext {
            job_id: "77".into(),
            procid: Some(1),
            ..SlurmContext::default()
        }),
        devices: vec![DeviceIdentity {
            index: 2,
            cuda_ordinal: Some(0),
            uuid: "GPU-0b1c2d3e-aaaa-bbbb-cccc-000000000002".into(),
            pci_bus_id: Some("00000000:41:00.0".into()),
            name: Some("NVIDIA H100 80GB HBM3".into()),
        }],
        ..RunContext::default()
    }
}

/// Every sample line as (name, labels text, value).
fn samples(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            (name.to_owned(), labels.to_owned(), value.to_owned())
        })
        .collect()
}

#[test]
fn a_workload_exports_phase_peaks_per_rank_without_step_numbers() {
    let mut f = workload();
    f.context = Some(slurm_context());
    // The fixture ran on CPU: say it ran on cuda:0 so the device labels are exercised.
    f.ranks[0].device = Some("cuda:0".into());
    let text = from_workload(&f).render();
    let s = samples(&text);
    let forward: Vec<_> = s
        .iter()
        .filter(|(n, l, _)| {
            n == "gpumem_phase_allocated_peak_bytes" && l.contains("phase=\"forward\"")
        })
        .collect();
    // Three forward steps → "first" and "later", never 0, 1, 2.
    assert_eq!(forward.len(), 2, "{text}");
    for (_, labels, _) in &forward {
        for want in [
            "run_id=\"slurm-77-1\"",
            "Hostname=\"gpu-node-3\"",
            "hpc_job=\"77\"",
            "rank=\"1\"",
            "gpu=\"2\"",
            "UUID=\"GPU-0b1c2d3e-aaaa-bbbb-cccc-000000000002\"",
            "modelName=\"NVIDIA H100 80GB HBM3\"",
            "synthetic=\"true\"",
        ] {
            assert!(labels.contains(want), "{want} missing in {labels}");
        }
        assert!(labels.contains("step=\"first\"") || labels.contains("step=\"later\""));
    }
    // The later steps keep the largest of their peaks.
    let later_max = f.ranks[0]
        .phases
        .iter()
        .filter(|p| p.name == "forward" && !p.first_step)
        .filter_map(|p| p.allocator.allocated_peak_bytes)
        .max()
        .unwrap();
    assert!(
        forward
            .iter()
            .any(|(_, l, v)| l.contains("later") && v == &later_max.to_string())
    );
    // Estimate lines: bytes, basis, and the error ratio where both sides exist.
    assert!(text.contains("gpumem_estimate_bytes{"));
    let ratio = s
        .iter()
        .find(|(n, l, _)| {
            n == "gpumem_estimate_error_ratio" && l.contains("line=\"optimizer_states\"")
        })
        .unwrap();
    // 100 392 observed against 100 360 computed: +32 / 100 360 = 0.000318 (ppm floor).
    assert_eq!(ratio.2, "0.000318");
    assert!(
        !s.iter()
            .any(|(n, l, _)| n == "gpumem_estimate_error_ratio" && l.contains("activations")),
        "no ratio for an assumption without a computed figure"
    );
    let info = s.iter().find(|(n, _, _)| n == "gpumem_run_info").unwrap();
    assert_eq!(info.2, "1");
    assert!(info.1.contains("kind=\"workload\""));
    assert!(info.1.contains("engine=\""), "{}", info.1);
    // One sample per label set.
    let mut keys: Vec<_> = s.iter().map(|(n, l, _)| (n, l)).collect();
    let all = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), all, "a series appears twice");
}

#[test]
fn a_results_file_exports_its_phases_and_the_prediction_beside_them() {
    let f = results();
    let text = from_results(&f).render();
    let s = samples(&text);
    let cold = s
        .iter()
        .find(|(n, l, _)| n == "gpumem_phase_allocated_peak_bytes" && l.contains("cold_forward"))
        .unwrap();
    let computed = f.runs[0].computed.as_ref().unwrap();
    let predicted = computed
        .phases
        .iter()
        .find(|p| p.phase.as_str() == "cold_forward")
        .unwrap()
        .allocated_peak_bytes;
    assert_eq!(cold.2, predicted.to_string());
    assert!(cold.1.contains("synthetic=\"true\""));
    let ratio = s
        .iter()
        .find(|(n, l, _)| n == "gpumem_estimate_error_ratio" && l.contains("cold_forward"))
        .unwrap();
    assert_eq!(
        ratio.2, "0",
        "the stand-in allocates exactly the prediction"
    );
    assert!(text.contains("# TYPE gpumem_phase_reserved_peak_bytes gauge"));
    // Without a context there is no run_id, Hostname or UUID to invent.
    assert!(!text.contains("run_id="));
    assert!(!text.contains("UUID="));
}

#[test]
fn label_values_are_escaped_and_phase_names_bounded() {
    let mut f = workload();
    let template = f.ranks[0].phases[1].clone();
    f.ranks[0].phases.clear();
    for i in 0..(MAX_PHASE_NAMES + 10) {
        let mut p = template.clone();
        p.name = format!("marker \"{i}\"\\\n");
        p.manual = true;
        f.ranks[0].phases.push(p);
    }
    let text = from_workload(&f).render();
    assert!(text.contains(r#"phase="marker \"0\"\\\n""#), "{text}");
    assert!(text.contains("phase=\"other\""));
    let phases = samples(&text)
        .into_iter()
        .filter(|(n, _, _)| n == "gpumem_phase_allocated_peak_bytes")
        .count();
    // 64 names + other, each first and later at most.
    assert!(phases <= 2 * (MAX_PHASE_NAMES + 1), "{phases}");
    assert!(escape(&"é".repeat(200)).len() <= MAX_LABEL_VALUE);
}

#[test]
fn export_reads_both_kinds_and_refuses_others() {
    let w = serde_json::to_string(&workload()).unwrap();
    assert!(
        from_text(&w)
            .unwrap()
            .render()
            .contains("kind=\"workload\"")
    );
    let r = serde_json::to_string(&results()).unwrap();
    assert!(from_text(&r).unwrap().render().contains("kind=\"results\""));
    let err = from_text(r#"{"schema":"gpumem.sheet/v1"}"#)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("gpumem.sheet/v1"), "{err}");
    assert!(from_text("not json").is_err());
}

/// The engine label names the serving engine a command starts, from its argv only;
/// anything else is a PyTorch program (what the probe observes).
#[test]
fn the_engine_label_comes_from_the_command() {
    let cmd = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
    for (line, engine) in [
        ("vllm serve meta-llama/Llama-3.1-8B", "vllm"),
        (
            "/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model x",
            "vllm",
        ),
        ("python -u -m sglang.launch_server --model-path x", "sglang"),
        (
            "text-generation-launcher --model-id x",
            "text-generation-inference",
        ),
        ("/opt/llama.cpp/llama-server -m x.gguf", "llama.cpp"),
        ("torchrun --nproc-per-node 8 train.py", "pytorch"),
        ("python3 train.py --vllm", "pytorch"),
        ("", "pytorch"),
    ] {
        assert_eq!(super::engine_of(&cmd(line)), engine, "{line}");
    }
}

#[test]
fn control_characters_never_reach_the_text_and_it_survives_the_terminal_filter() {
    let mut f = workload();
    let mut c = slurm_context();
    c.hostname = Some("node\r7\u{1b}]0;pwned\u{7}\u{202e}".into());
    f.context = Some(c);
    let text = from_workload(&f).render();
    assert!(
        text.contains("Hostname=\"node\u{fffd}7\u{fffd}]0;pwned\u{fffd}\u{fffd}\""),
        "{text}"
    );
    // What `export FILE` prints on stdout is the same text: nothing for the terminal
    // filter to rewrite into `\uXXXX`, which the exposition format does not have.
    assert_eq!(crate::out::terminal_safe(&text), text.as_str());
    assert!(!text.chars().any(|ch| ch.is_control() && ch != '\n'));
}

#[test]
fn rank_and_line_labels_are_bounded_whatever_the_file_holds() {
    let mut f = workload();
    let template = f.ranks[0].clone();
    let line = template.comparison.lines[0].clone();
    f.ranks.clear();
    for r in 0..500u32 {
        let mut rank = template.clone();
        rank.rank = Some(r);
        rank.pid = r + 1;
        rank.comparison.lines = (0..200)
            .map(|i| {
                let mut l = line.clone();
                l.item = format!("line-{i}");
                l
            })
            .collect();
        f.ranks.push(rank);
    }
    let text = from_workload(&f).render();
    let all = samples(&text);
    let estimate = all
        .iter()
        .filter(|(n, _, _)| n == "gpumem_estimate_bytes")
        .count();
    // 64 ranks and 64 lines (each with `other`), one basis each.
    assert!(estimate <= 65 * 65, "{estimate} series");
    assert!(all.iter().any(|(_, l, _)| l.contains("rank=\"other\"")));
    assert!(all.iter().any(|(_, l, _)| l.contains("line=\"other\"")));
    assert!(all.len() < 50_000, "{} series", all.len());
}
