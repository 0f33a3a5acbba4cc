//! accelerate's own `infer_auto_device_map`, run on a meta model (transformers builds
//! `LlamaForCausalLM` in bf16 from a config under `init_empty_weights`: no weights;
//! its rotary buffers stay float32, as `from_pretrained` leaves them) with the
//! torch venv's accelerate, against gpumem's map of the same model and `max_memory`:
//! equal, entry for entry, with and without `LlamaDecoderLayer` unsplit, over GPUs,
//! the CPU and disk; and `get_balanced_memory`'s `max_memory` (transformers'
//! `device_map="auto"`, `"balanced_low_0"`) equal to gpumem's, byte for byte.
#![allow(clippy::disallowed_macros)] // the test harness captures test output

use std::collections::BTreeMap;
use std::process::Command;

use gpumem_core::placement::accelerate::{Device, balanced_memory, infer_auto_device_map, llama};

/// Builds the model and runs accelerate; prints the map and the model's size.
const SCRIPT: &str = r#"
import json, sys, warnings
import torch
from accelerate import init_empty_weights
from accelerate.utils import compute_module_sizes, get_balanced_memory, infer_auto_device_map
from transformers import AutoModelForCausalLM, LlamaConfig
warnings.filterwarnings("ignore")
req = json.loads(sys.argv[1])
cfg = LlamaConfig(**req["config"])
with init_empty_weights():
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
maps = []
for case in req["cases"]:
    mm = {int(k) if k.isdigit() else k: v for k, v in case["max_memory"].items()}
    balanced = None
    if case["balanced"] is not None:
        mm = get_balanced_memory(model, max_memory=mm, no_split_module_classes=case["no_split"],
                                 low_zero=case["balanced"] == "low_0")
        balanced = [mm[i] for i in sorted(k for k in mm if isinstance(k, int))]
    dm = infer_auto_device_map(model, max_memory=mm, no_split_module_classes=case["no_split"])
    maps.append({"map": {k: str(v) for k, v in dm.items()}, "balanced": balanced})
print(json.dumps({"size": compute_module_sizes(model)[""], "maps": maps}))
"#;

#[test]
fn gpumem_builds_accelerates_device_map() {
    let Some(python) = gpumem_e2e::torch_python("gpumem_builds_accelerates_device_map") else {
        return;
    };
    // A small Llama: 6 blocks of hidden 256.
    let shape = [
        ("layers", 6u64),
        ("hidden", 256),
        ("heads", 4),
        ("kv-heads", 2),
        ("head-dim", 64),
        ("intermediate", 688),
        ("vocab", 1000),
    ];
    let pairs: Vec<(&str, String)> = shape.iter().map(|(k, v)| (*k, v.to_string())).collect();
    let (input, errors) =
        gpumem_core::params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
    assert!(errors.is_empty(), "{errors:?}");
    let arch = input.arch.expect("an architecture");
    let tree = llama(&arch, 2).expect("Llama's layout");
    let config = serde_json::json!({
        "num_hidden_layers": 6, "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 688,
        "vocab_size": 1000, "tie_word_embeddings": false,
    });
    let t = tree.size;
    let mut cases = Vec::new();
    for (gpus, cpu) in [
        (vec![t], Some(t)),
        (vec![t / 3, t / 3], Some(t)),
        (vec![t / 2, t / 4], Some(t / 5)),
        (vec![t / 7, t / 5, t / 4], None),
        (vec![], Some(t / 2)),
        (vec![t / 3 + 12_345], Some(t / 3 - 777)),
    ] {
        for no_split in [vec![], vec!["LlamaDecoderLayer"]] {
            cases.push((gpus.clone(), cpu, no_split, None));
        }
    }
    // transformers' device_map="auto" / "balanced" / "balanced_low_0": get_balanced_memory
    // first. Roomy GPUs, so the balance (not the memory) decides the split.
    for gpus in [vec![t, t], vec![t, t, t], vec![t / 2, t, t / 3]] {
        for no_split in [vec![], vec!["LlamaDecoderLayer"]] {
            for mode in ["balanced", "low_0"] {
                cases.push((gpus.clone(), Some(t), no_split.clone(), Some(mode)));
            }
        }
    }
    let request: Vec<serde_json::Value> = cases
        .iter()
        .map(|(gpus, cpu, no_split, balanced)| {
            let mut mm = serde_json::Map::new();
            for (i, g) in gpus.iter().enumerate() {
                mm.insert(i.to_string(), (*g).into());
            }
            if let Some(c) = cpu {
                mm.insert("cpu".into(), (*c).into());
            }
            serde_json::json!({"max_memory": mm, "no_split": no_split, "balanced": balanced})
        })
        .collect();
    let req = serde_json::json!({"config": config, "cases": request});
    let out = Command::new(&python)
        .arg("-c")
        .arg(SCRIPT)
        .arg(req.to_string())
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(got["size"].as_u64(), Some(t), "the model's size");
    let maps = got["maps"].as_array().expect("maps");
    assert_eq!(maps.len(), cases.len());
    let mut devices = std::collections::BTreeSet::new();
    let mut split_blocks = 0;
    for ((gpus, cpu, no_split, balanced), got) in cases.iter().zip(maps) {
        let gpus = match balanced {
            Some(mode) => {
                let ours = balanced_memory(&tree, gpus, no_split, *mode == "low_0");
                let theirs: Vec<u64> = got["balanced"]
                    .as_array()
                    .expect("balanced")
                    .iter()
                    .map(|v| v.as_u64().expect("bytes"))
                    .collect();
                assert_eq!(ours, theirs, "{mode} over {gpus:?}, no_split {no_split:?}");
                assert_ne!(&ours, gpus, "balancing changed nothing");
                ours
            }
            None => gpus.clone(),
        };
        let gpus = &gpus;
        let theirs: BTreeMap<String, String> = got["map"]
            .as_object()
            .expect("map")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        let ours: BTreeMap<String, String> = infer_auto_device_map(&tree, gpus, *cpu, no_split)
            .into_iter()
            .map(|(k, d)| (k, d.name()))
            .collect();
        assert_eq!(
            ours, theirs,
            "gpus {gpus:?}, cpu {cpu:?}, no_split {no_split:?}"
        );
        if balanced == &Some("balanced") {
            // Spread: the first GPU no longer takes everything.
            assert!(ours.values().any(|d| d == "1"), "{ours:?}");
        }
        devices.extend(ours.values().cloned());
        // Split below a block where the blocks may be split, never where they may not.
        let deep = ours.keys().any(|k| k.split('.').count() > 3);
        if !no_split.is_empty() {
            assert!(!deep, "{ours:?}");
        } else if deep {
            split_blocks += 1;
        }
    }
    assert!(split_blocks > 0, "no case split a block");
    // Every kind of device was used somewhere: GPUs, the CPU and disk.
    for d in ["0", "1", "2", "cpu", "disk"] {
        assert!(devices.contains(d), "{d}: {devices:?}");
    }
    // The whole model on one GPU is one entry.
    assert_eq!(
        infer_auto_device_map(&tree, &[t * 2], None, &[]),
        vec![(String::new(), Device::Gpu(0))]
    );
}

/// transformers' own `_get_device_map(model, "auto", max_memory, None)` (transformers
/// 5.23.0, `integrations/accelerate.py`): with no `max_memory`, accelerate's
/// `get_max_memory` is replaced by the figures a machine with these GPUs and this RAM
/// would report (each GPU's free memory, the available RAM), so transformers' own
/// 90 % rules and `get_balanced_memory` run as they do there. Prints the map and the
/// GPUs' balanced `max_memory`.
const AUTO_SCRIPT: &str = r#"
import json, sys, warnings
import torch
from accelerate import init_empty_weights
import transformers.integrations.accelerate as ta
from transformers import AutoModelForCausalLM, LlamaConfig
warnings.filterwarnings("ignore")
req = json.loads(sys.argv[1])
cfg = LlamaConfig(**req["config"])
with init_empty_weights():
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
out = []
for case in req["cases"]:
    machine = {int(k) if k.isdigit() else k: v for k, v in case["machine"].items()}
    real = ta.accelerate_max_memory
    ta.accelerate_max_memory = lambda mm, machine=machine: dict(machine) if mm is None else real(mm)
    given = case["max_memory"]
    if given is not None:
        given = {int(k) if k.isdigit() else k: v for k, v in given.items()}
    balanced = ta.get_balanced_memory(model, max_memory=None if given is None else dict(given),
                                      no_split_module_classes=model._no_split_modules)
    dm = ta._get_device_map(model, "auto", None if given is None else dict(given), None)
    ta.accelerate_max_memory = real
    out.append({"map": {k: str(v) for k, v in dm.items()},
                "balanced": {str(k): int(v) for k, v in balanced.items()}})
print(json.dumps(out))
"#;

/// The CLI's `device_map` under `--engine transformers` (`--json`), for Llama-3.1-8B
/// on GPUs too small for it and a host RAM, equals transformers' own map and
/// `max_memory`, with transformers' defaults and with a `--max-memory` given.
#[test]
fn the_clis_device_map_is_transformers_own() {
    let Some(python) = gpumem_e2e::torch_python("the_clis_device_map_is_transformers_own") else {
        return;
    };
    let bundled: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/models/meta-llama--Llama-3.1-8B-Instruct.json"
        ))
        .expect("the bundled config"),
    )
    .expect("JSON");
    // (card, GPUs, --ram, --max-memory)
    let cases: [(&str, u64, &str, Option<&str>); 5] = [
        ("12GiB", 1, "16GiB", None),
        ("8GiB", 2, "64GiB", None),
        ("6GiB", 3, "4GiB", None),
        ("24GiB", 2, "64GiB", Some("0=5GiB,1=6GiB,cpu=3GiB")),
        ("24GiB", 2, "64GiB", Some("0=4GiB,1=4500MiB")),
    ];
    let mut request = Vec::new();
    let mut ours = Vec::new();
    for (card, gpus, ram, mm) in cases {
        let mut args = vec![
            "estimate",
            "--json",
            "--model",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--engine",
            "transformers",
            "--context",
            "2048",
            "--card",
            card,
            "--ram",
            ram,
        ];
        let g = gpus.to_string();
        args.extend(["--gpus", &g]);
        if let Some(m) = mm {
            args.extend(["--max-memory", m]);
        }
        let out = Command::new(env!("CARGO_BIN_EXE_gpumem-agent"))
            .args(&args)
            .output()
            .expect("the agent runs");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        let plan = doc["device_map"].clone();
        assert!(plan.is_object(), "{args:?}: no device_map");
        // The machine transformers would see: each GPU's free memory, as the CLI
        // assumed it (the card less the CUDA context), and the RAM available.
        let card_bytes = gpumem_core::catalogue::parse_capacity(card).expect("a size");
        let mut machine = serde_json::Map::new();
        for i in 0..gpus {
            machine.insert(i.to_string(), (card_bytes - (512 << 20)).into());
        }
        machine.insert(
            "cpu".into(),
            gpumem_core::catalogue::parse_capacity(ram)
                .expect("a size")
                .into(),
        );
        let given = mm.map(|m| {
            let (g, c) = gpumem_core::placement::device_map::parse_max_memory(m).expect("parsed");
            let mut o: serde_json::Map<String, serde_json::Value> = g
                .iter()
                .map(|(i, b)| (i.to_string(), (*b).into()))
                .collect();
            if let Some(c) = c {
                o.insert("cpu".into(), c.into());
            }
            o
        });
        request.push(serde_json::json!({"machine": machine, "max_memory": given}));
        ours.push((args.join(" "), plan));
    }
    let req = serde_json::json!({"config": bundled["config"], "cases": request});
    let out = Command::new(&python)
        .arg("-c")
        .arg(AUTO_SCRIPT)
        .arg(req.to_string())
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    let mut devices = std::collections::BTreeSet::new();
    for ((args, plan), t) in ours.iter().zip(&theirs) {
        let our_map: BTreeMap<String, String> = plan["map"]
            .as_array()
            .expect("map")
            .iter()
            .map(|e| {
                (
                    e[0].as_str().expect("name").to_string(),
                    e[1].as_str().expect("device").to_string(),
                )
            })
            .collect();
        let their_map: BTreeMap<String, String> = t["map"]
            .as_object()
            .expect("map")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        assert_eq!(our_map, their_map, "{args}");
        // Each GPU's max_memory after balancing, byte for byte.
        for d in plan["devices"].as_array().expect("devices") {
            let name = d["device"].as_str().expect("device");
            if name.parse::<u32>().is_ok() {
                assert_eq!(
                    d["max_memory_bytes"], t["balanced"][name],
                    "{args}: GPU {name}"
                );
            }
        }
        devices.extend(our_map.values().cloned());
    }
    // The cases reach every kind of device.
    for d in ["0", "1", "2", "cpu", "disk"] {
        assert!(devices.contains(d), "{d}: {devices:?}");
    }
}
