//! The per-rank model states of `--zero 2|3` against DeepSpeed's own estimator, the
//! real `deepspeed` package (0.19.8, pinned by `scripts/install-tools.sh` in the torch
//! venv) run on the CPU: `estimate_zero2_model_states_mem_needs` and
//! `estimate_zero3_model_states_mem_needs` (deepspeed/runtime/zero/stage_1_and_2.py and
//! stage3.py), the plain arithmetic forms its `…_all_cold` printers call, with the
//! parameter counts gpumem counts for real configs and for the count mode.
//!
//! The two agree once each difference is named; every comparison below is DeepSpeed's
//! figure = gpumem's model-state lines + the named differences, to the rounding of
//! DeepSpeed's floats. The differences:
//!
//! - the fp32 gradient partition (4 B per parameter / N): DeepSpeed counts it among
//!   the model states; gpumem at the optimizer step (`optimizer_step`, the step's
//!   temporaries beyond the freed activations), where it lives (stage_1_and_2.py sets
//!   `single_partition_of_fp32_groups[i].grad` in `step`);
//! - ZeRO-3's 16-bit gradient partition (2 B / N, `grad_partitions_flat_buffer` in
//!   stage3.py, on the offload device when the optimizer is offloaded): gpumem counts
//!   it, DeepSpeed's estimator leaves it out (its 18 B are 16-bit params, fp32 grads,
//!   fp32 params and two fp32 states);
//! - the norms: below `stage3_param_persistence_threshold` (1e5 elements) they stay
//!   whole on every rank; DeepSpeed's estimator partitions every parameter;
//! - ZeRO-3's `largest_layer_memory` (4 B × the largest layer: its gathered 16-bit
//!   parameters and gradients) stands for what gpumem counts as
//!   `collectives.all_gather` (the live parameters up to `stage3_max_live_parameters`,
//!   not a model state): added to gpumem's side as DeepSpeed defines it;
//! - host memory: DeepSpeed multiplies by `additional_buffer_factor` (1.5), and at
//!   ZeRO-2 adds 4 B × parameters per GPU beyond 16 B (each process's fp32 copy of the
//!   model when it is loaded) and does not divide by the nodes; gpumem counts what each
//!   node's ranks hold once partitioned.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use gpumem_core::estimate::{Estimate, Group, LineKey, estimate};
use gpumem_core::import::config as hf_config;
use gpumem_core::params;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Calls DeepSpeed's estimators, one JSON request per line, one JSON answer per line.
const DRIVER: &str = r#"
import json, sys
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
import deepspeed
for line in sys.stdin:
    r = json.loads(line)
    if r["stage"] == 2:
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            r["params"], r["per_node"], r["nodes"], cpu_offload=r["offload_optimizer"])
    else:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            r["params"], r["largest"], r["per_node"], r["nodes"],
            cpu_offload=r["offload_optimizer"], cpu_offload_params=r["offload_param"],
            zero_init=True)
    print(json.dumps({"cpu": cpu, "gpu": gpu, "version": deepspeed.__version__}), flush=True)
"#;

/// DeepSpeed's answers to `requests`, or `None` after a skip when it is not installed.
fn deepspeed(test: &str, requests: &[serde_json::Value]) -> Option<Vec<serde_json::Value>> {
    let python = gpumem_e2e::torch_python(test)?;
    let mut child = Command::new(&python)
        .arg("-c")
        .arg(DRIVER)
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("DS_ACCELERATOR", "cpu")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    let text: String = requests.iter().map(|r| format!("{r}\n")).collect();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("No module named 'deepspeed'") {
        gpumem_e2e::skip(
            test,
            gpumem_e2e::Missing::Tool,
            "deepspeed is not installed in the torch venv (scripts/install-tools.sh installs it)",
        );
        return None;
    }
    assert!(
        out.status.success(),
        "deepspeed's estimator failed: {stderr}"
    );
    let answers: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), requests.len(), "{stderr}");
    for a in &answers {
        assert_eq!(a["version"], "0.19.8", "the pinned DeepSpeed");
    }
    Some(answers)
}

/// One workload: the model (a config of the cases, or a parameter count), the GPUs,
/// the nodes, the stage and what is offloaded.
struct Case {
    model: Model,
    gpus: u64,
    nodes: u64,
    stage: u8,
    offload_optimizer: bool,
    offload_param: bool,
}

#[derive(Clone, Copy)]
enum Model {
    Config(&'static str),
    Count(u64),
}

fn gpumem(c: &Case) -> Estimate {
    let mut all: Vec<(String, String)> = match c.model {
        Model::Config(name) => {
            let text = std::fs::read_to_string(
                root()
                    .join("crates/gpumem-core/tests/cases/configs")
                    .join(name),
            )
            .unwrap();
            hf_config::parse_config(&text)
                .unwrap()
                .pairs()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect()
        }
        Model::Count(p) => vec![("parameters".into(), p.to_string())],
    };
    for (k, v) in [
        ("train", "full".to_string()),
        ("gpus", c.gpus.to_string()),
        ("nodes", c.nodes.to_string()),
        ("zero", c.stage.to_string()),
    ] {
        all.push((k.into(), v));
    }
    if c.offload_optimizer {
        all.push(("offload-optimizer".into(), "cpu".into()));
    }
    if c.offload_param {
        all.push(("offload-param".into(), "cpu".into()));
    }
    let (input, errors) = params::from_pairs(all.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    estimate(&input).unwrap()
}

/// The largest layer as DeepSpeed's `model_to_params` finds it (the module with the
/// most parameters of its own): for these decoders the embedding table.
fn largest_layer(c: &Case, e: &Estimate) -> u64 {
    match c.model {
        Model::Config(_) => e
            .lines
            .iter()
            .filter(|l| matches!(l.key, LineKey::WeightsEmbeddings | LineKey::WeightsLmHead))
            .map(|l| l.inputs["parameters"].parse::<u64>().unwrap())
            .max()
            .unwrap(),
        Model::Count(_) => 0,
    }
}

const CASES: &[Case] = &[
    Case {
        model: Model::Count(7_000_000_000),
        gpus: 8,
        nodes: 1,
        stage: 2,
        offload_optimizer: false,
        offload_param: false,
    },
    Case {
        model: Model::Count(7_000_000_000),
        gpus: 8,
        nodes: 1,
        stage: 2,
        offload_optimizer: true,
        offload_param: false,
    },
    Case {
        model: Model::Count(70_000_000_000),
        gpus: 16,
        nodes: 2,
        stage: 2,
        offload_optimizer: false,
        offload_param: false,
    },
    Case {
        model: Model::Count(13_000_000_000),
        gpus: 2,
        nodes: 1,
        stage: 2,
        offload_optimizer: true,
        offload_param: false,
    },
    Case {
        model: Model::Config("llama-3.2-1b.json"),
        gpus: 4,
        nodes: 1,
        stage: 2,
        offload_optimizer: false,
        offload_param: false,
    },
    Case {
        model: Model::Config("llama-3.1-8b.json"),
        gpus: 8,
        nodes: 1,
        stage: 3,
        offload_optimizer: false,
        offload_param: false,
    },
    Case {
        model: Model::Config("llama-3.1-8b.json"),
        gpus: 8,
        nodes: 1,
        stage: 3,
        offload_optimizer: true,
        offload_param: false,
    },
    Case {
        model: Model::Config("llama-3.1-8b.json"),
        gpus: 8,
        nodes: 1,
        stage: 3,
        offload_optimizer: true,
        offload_param: true,
    },
    Case {
        model: Model::Config("llama-3.1-70b.json"),
        gpus: 16,
        nodes: 2,
        stage: 3,
        offload_optimizer: false,
        offload_param: false,
    },
    Case {
        model: Model::Config("qwen2.5-72b.json"),
        gpus: 32,
        nodes: 4,
        stage: 3,
        offload_optimizer: true,
        offload_param: true,
    },
    Case {
        model: Model::Config("qwen2.5-0.5b.json"),
        gpus: 2,
        nodes: 1,
        stage: 3,
        offload_optimizer: true,
        offload_param: false,
    },
];

#[test]
fn zero_model_states_equal_deepspeeds_estimator_once_each_difference_is_named() {
    let test = "zero_model_states_equal_deepspeeds_estimator_once_each_difference_is_named";
    let estimates: Vec<Estimate> = CASES.iter().map(gpumem).collect();
    let requests: Vec<serde_json::Value> = CASES
        .iter()
        .zip(&estimates)
        .map(|(c, e)| {
            serde_json::json!({
                "stage": c.stage,
                "params": e.parameters.unwrap(),
                "largest": largest_layer(c, e),
                "per_node": c.gpus / c.nodes,
                "nodes": c.nodes,
                "offload_optimizer": c.offload_optimizer,
                "offload_param": c.offload_param,
            })
        })
        .collect();
    let Some(answers) = deepspeed(test, &requests) else {
        return;
    };
    let mut report = Vec::new();
    for ((c, e), ds) in CASES.iter().zip(&estimates).zip(&answers) {
        let n = c.gpus;
        let per_node = c.gpus / c.nodes;
        let p = e.parameters.unwrap();
        let dev = |k: LineKey| {
            e.lines
                .iter()
                .find(|l| l.key == k)
                .map_or(0, |l| l.device_bytes)
        };
        // DeepSpeed counts parameters: the buffers transformers builds beside them
        // (the rotary tables, whole on every GPU) are named and left out.
        let weights: u64 = e
            .lines
            .iter()
            .filter(|l| {
                l.group == Group::Weights && l.label != gpumem_core::estimate::BUFFERS_LABEL
            })
            .map(|l| l.device_bytes)
            .sum();
        let states = weights
            + dev(LineKey::TrainingGradients)
            + dev(LineKey::TrainingOptimizer)
            + dev(LineKey::TrainingMasterWeights);
        let norms = dev(LineKey::WeightsNorms);
        let fp32_grads = (p * 4).div_ceil(n);
        let grads16 = (p * 2).div_ceil(n);
        let largest = 4 * largest_layer(c, e);
        // gpumem's device lines + the named differences, term by term.
        let (gpu, gpu_terms) = match (c.stage, c.offload_optimizer, c.offload_param) {
            (2, false, _) => (states + fp32_grads, "+ fp32 gradient partition"),
            (2, true, _) => (states, "equal"),
            (3, false, _) => (
                states + fp32_grads - dev(LineKey::TrainingGradients) - norms
                    + norms.div_ceil(n)
                    + largest,
                "+ fp32 gradient partition − 16-bit gradient partition − persistent norms + largest layer × 4",
            ),
            (3, true, false) => (
                states - norms + norms.div_ceil(n) + largest,
                "− persistent norms + largest layer × 4",
            ),
            _ => (
                states - norms + largest,
                "− persistent norms + largest layer × 4",
            ),
        };
        let ds_gpu = ds["gpu"].as_u64().unwrap();
        // DeepSpeed truncates one float; gpumem rounds each line up.
        assert!(
            gpu.abs_diff(ds_gpu) <= 8,
            "{}: gpu: deepspeed {ds_gpu}, gpumem {gpu} ({gpu_terms})",
            c.gpus
        );
        let host = e.host_bytes;
        let ds_cpu = ds["cpu"].as_u64().unwrap();
        let cpu = match (c.stage, c.offload_optimizer, c.offload_param) {
            // Without offloading DeepSpeed's CPU figure is what loading the model
            // takes before it is partitioned, which gpumem does not count (a peak of
            // start-up, not of the step): no comparison.
            (_, false, _) => None,
            (2, true, _) => Some((
                (host * c.nodes + (4 * n).saturating_sub(16) * p) * 3 / 2,
                "× 1.5, × nodes, + 4 B per GPU beyond 16 B",
            )),
            (3, true, false) => Some((
                (host - per_node * grads16) * 3 / 2,
                "− 16-bit gradient partition, × 1.5",
            )),
            _ => Some((
                (host - per_node * grads16 + per_node * norms.div_ceil(n)) * 3 / 2,
                "− 16-bit gradient partition + the norms' partition, × 1.5",
            )),
        };
        if let Some((cpu, terms)) = cpu {
            // Each rank's lines round up: at most a few bytes per rank and line.
            assert!(
                cpu.abs_diff(ds_cpu) <= 8 * per_node * 3,
                "{} GPUs stage {}: cpu: deepspeed {ds_cpu}, gpumem {cpu} ({terms})",
                c.gpus,
                c.stage
            );
        }
        report.push(format!(
            "stage {} {} GPUs/{} nodes offload {}/{}: gpu deepspeed {ds_gpu} gpumem {gpu}; cpu deepspeed {ds_cpu} gpumem host {host}",
            c.stage, c.gpus, c.nodes, c.offload_optimizer, c.offload_param
        ));
    }
    eprintln!("{}", report.join("\n"));
}
