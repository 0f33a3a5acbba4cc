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
