//! The `device_map` accelerate's `infer_auto_device_map` builds for a transformers
//! model, given `max_memory` per GPU and for the CPU: what `from_pretrained(…,
//! device_map="auto", max_memory=…)` places where.
//!
//! Followed line by line from accelerate 1.16.0, `src/accelerate/utils/modeling.py`:
//! `infer_auto_device_map`, `get_max_layer_size`, `compute_module_sizes` and
//! `clean_device_map`, and `get_balanced_memory` ([`balanced_memory`]). The modules
//! are taken in order (a module's own parameters, then its children, then its own
//! buffers); each goes on the current device when its size fits beside what is there,
//! the main devices (the first GPU and the CPU) keeping room for the largest layer
//! still to place (a module without children or of a class in
//! `no_split_module_classes`); otherwise a module with children is split into its
//! parameters and children, and one that cannot be split moves the placement to the
//! next device (its reserve then counted as used). Disk takes whatever is left. The
//! map is then cleaned: a module whose every entry is on one device becomes one entry.
//!
//! What is modelled: the module tree of transformers' `LlamaForCausalLM` ([`llama`]),
//! untied, parameters in one dtype and the rotary embedding's two float32 buffers
//! (`inv_freq`, `original_inv_freq`), with `LlamaDecoderLayer` as its
//! `_no_split_modules` or no class unsplittable. Not modelled: tied parameters (the
//! ties' branch), `fallback_allocation`, `offload_buffers`, `special_dtypes`, a `dtype`
//! argument that differs from the model's, an `mps` device.

use crate::arch::Architecture;
use crate::error::EstimateError;

/// One module of the tree: its own parameters and buffers and its children, in the
/// order torch lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// Its name in its parent (`q_proj`, `0`).
    pub name: String,
    /// Its class name (`LlamaDecoderLayer`).
    pub class: &'static str,
    /// Its own parameters: name and bytes.
    pub params: Vec<(&'static str, u64)>,
    /// Its own buffers: name and bytes.
    pub buffers: Vec<(&'static str, u64)>,
    /// Its child modules.
    pub children: Vec<Module>,
    /// Bytes of everything in it (`compute_module_sizes`).
    pub size: u64,
}

impl Module {
    fn new(
        name: impl Into<String>,
        class: &'static str,
        params: Vec<(&'static str, u64)>,
        children: Vec<Module>,
    ) -> Module {
        let mut m = Module {
            name: name.into(),
            class,
            params,
            buffers: Vec::new(),
            children,
            size: 0,
        };
        m.size = m.total();
        m
    }

    fn total(&self) -> u64 {
        self.params
            .iter()
            .chain(&self.buffers)
            .map(|p| p.1)
            .chain(self.children.iter().map(|c| c.size))
            .fold(0u64, u64::saturating_add)
    }
}

/// A device of `max_memory`, in accelerate's order: the GPUs by index, the CPU, disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Device {
    /// GPU `i`.
    Gpu(u32),
    /// Host memory.
    Cpu,
    /// Offloaded to disk.
    Disk,
}

impl Device {
    /// As accelerate writes it: `0`, `"cpu"`, `"disk"`.
    pub fn name(self) -> String {
        match self {
            Device::Gpu(i) => i.to_string(),
            Device::Cpu => "cpu".into(),
            Device::Disk => "disk".into(),
        }
    }
}

/// The tree of transformers' `LlamaForCausalLM` for `a` with parameters of
/// `dtype_bytes` each: `model` (`embed_tokens`, `layers.0…`, `norm`, `rotary_emb`)
/// and `lm_head`, as `modeling_llama.py` builds it. A shape this layout does not hold
/// (tied embeddings, biases, q/k norms, MoE, MLA, other mixers) is refused.
pub fn llama(a: &Architecture, dtype_bytes: u64) -> Result<Module, EstimateError> {
    let plain = a.gated_mlp
        && !a.tied_embeddings
        && !a.qkv_bias
        && !a.o_bias
        && !a.mlp_bias
        && !a.qk_norm
        && !a.fused_qkv
        && !a.layernorm_bias
        && !a.nonparametric_norms
        && a.layer_norms == 2
        && a.learned_positions == 0
        && !a.attn_sinks
        && !a.attn_gate
        && a.mixer.is_none()
        && a.attn_layers.is_none()
        && a.mlp_layers.is_none()
        && a.mla.is_none()
        && a.indexer.is_none()
        && a.global_attn.is_none()
        && a.layer_scalars == 0
        && a.moe.is_none()
        && a.mtp_layers == 0
        && a.tower_params == 0;
    if !plain {
        return Err(EstimateError::invalid(
            "device-map",
            "accelerate's map is modelled for LlamaForCausalLM's layout only (untied, no biases, no q/k norms, dense)",
        ));
    }
    let b = |n: &[u64]| -> Result<u64, EstimateError> {
        n.iter()
            .chain([&dtype_bytes])
            .try_fold(1u64, |acc, &x| acc.checked_mul(x))
            .ok_or(EstimateError::Overflow {
                what: "module bytes",
            })
    };
    let linear = |name: &str, out: u64, inp: u64| -> Result<Module, EstimateError> {
        Ok(Module::new(
            name,
            "Linear",
            vec![("weight", b(&[out, inp])?)],
            vec![],
        ))
    };
    let norm = |name: &str| -> Result<Module, EstimateError> {
        Ok(Module::new(
            name,
            "LlamaRMSNorm",
            vec![("weight", b(&[a.hidden])?)],
            vec![],
        ))
    };
    let (h, q, kv) = (
        a.hidden,
        a.heads.saturating_mul(a.head_dim),
        a.kv_heads.saturating_mul(a.head_dim),
    );
    let mut layers = Vec::new();
    for i in 0..a.layers {
        let attn = Module::new(
            "self_attn",
            "LlamaAttention",
            vec![],
            vec![
                linear("q_proj", q, h)?,
                linear("k_proj", kv, h)?,
                linear("v_proj", kv, h)?,
                linear("o_proj", h, q)?,
            ],
        );
        let mlp = Module::new(
            "mlp",
            "LlamaMLP",
            vec![],
            vec![
                linear("gate_proj", a.intermediate, h)?,
                linear("up_proj", a.intermediate, h)?,
                linear("down_proj", h, a.intermediate)?,
                Module::new("act_fn", "SiLUActivation", vec![], vec![]),
            ],
        );
        layers.push(Module::new(
            i.to_string(),
            "LlamaDecoderLayer",
            vec![],
            vec![
                attn,
                mlp,
                norm("input_layernorm")?,
                norm("post_attention_layernorm")?,
            ],
        ));
    }
    // `LlamaRotaryEmbedding`: `inv_freq` and `original_inv_freq`, head_dim ÷ 2 float32
    // values each, registered as (non-persistent) buffers.
    let mut rotary = Module::new("rotary_emb", "LlamaRotaryEmbedding", vec![], vec![]);
    let half = (a.head_dim / 2).saturating_mul(4);
    rotary.buffers = vec![("inv_freq", half), ("original_inv_freq", half)];
    rotary.size = rotary.total();
    let model = Module::new(
        "model",
        "LlamaModel",
        vec![],
        vec![
            Module::new(
                "embed_tokens",
                "Embedding",
                vec![("weight", b(&[a.vocab, h])?)],
                vec![],
            ),
            Module::new("layers", "ModuleList", vec![], layers),
            norm("norm")?,
            rotary,
        ],
    );
    Ok(Module::new(
        "",
        "LlamaForCausalLM",
        vec![],
        vec![model, linear("lm_head", a.vocab, h)?],
    ))
}

/// An entry of `modules_to_treat`: a parameter or buffer (never split) or a module.
#[derive(Clone, Copy)]
enum Item<'a> {
    Tensor(u64),
    Module(&'a Module),
}

impl Item<'_> {
    fn size(self) -> u64 {
        match self {
            Item::Tensor(s) => s,
            Item::Module(m) => m.size,
        }
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// A module's entries as `infer_auto_device_map` lists them: its own parameters, its
/// children, then (at the top only) its own buffers.
fn entries<'a>(prefix: &str, m: &'a Module, buffers: bool) -> Vec<(String, Item<'a>)> {
    let mut v: Vec<(String, Item<'a>)> = m
        .params
        .iter()
        .map(|(n, s)| (join(prefix, n), Item::Tensor(*s)))
        .collect();
    v.extend(
        m.children
            .iter()
            .map(|c| (join(prefix, &c.name), Item::Module(c))),
    );
    if buffers {
        v.extend(
            m.buffers
                .iter()
                .map(|(n, s)| (join(prefix, n), Item::Tensor(*s))),
        );
    }
    v
}

/// `get_max_layer_size`: the largest module without children or of a class that is
/// not split, and the names that reach it.
fn max_layer(items: &[(String, Item<'_>)], no_split: &[&str]) -> (u64, Vec<String>) {
    let mut max = 0u64;
    let mut names = Vec::new();
    let mut queue: Vec<(String, Item<'_>)> = items.to_vec();
    queue.reverse();
    while let Some((name, item)) = queue.pop() {
        let children: &[Module] = match item {
            Item::Module(m) if !no_split.contains(&m.class) => &m.children,
            _ => &[],
        };
        if children.is_empty() {
            let size = item.size();
            if size > max {
                max = size;
                names = vec![name];
            } else if size == max {
                names.push(name);
            }
        } else {
            // Children go first, in order: pushed in reverse onto the stack's top.
            for c in children.iter().rev() {
                queue.push((join(&name, &c.name), Item::Module(c)));
            }
        }
    }
    (max, names)
}

/// The device map `infer_auto_device_map(model, max_memory, no_split_module_classes)`
/// returns (cleaned), as (module name, device) in name order. `gpus` are the GPUs'
/// `max_memory` in index order, `cpu` the CPU's (`None`: not in `max_memory`).
pub fn infer_auto_device_map(
    model: &Module,
    gpus: &[u64],
    cpu: Option<u64>,
    no_split: &[&str],
) -> Vec<(String, Device)> {
    let mut devices: Vec<(Device, Option<u64>)> = gpus
        .iter()
        .enumerate()
        .map(|(i, m)| (Device::Gpu(u32::try_from(i).unwrap_or(u32::MAX)), Some(*m)))
        .collect();
    if let Some(c) = cpu {
        devices.push((Device::Cpu, Some(c)));
    }
    devices.push((Device::Disk, None));
    let main: Vec<Device> = match devices.first() {
        Some((Device::Gpu(i), _)) => vec![Device::Gpu(*i), Device::Cpu],
        _ => vec![Device::Cpu],
    };
    let mut used = vec![0i128; devices.len()];
    let mut current = 0usize;
    let mut map: Vec<(String, Device)> = Vec::new();
    let mut queue = entries("", model, true);
    let (mut max_size, mut max_names) = max_layer(&queue, no_split);
    while !queue.is_empty() {
        let (name, item) = queue.remove(0);
        let dotted = format!("{name}.");
        max_names.retain(|n| *n != name && !n.starts_with(&dotted));
        if max_names.is_empty() {
            let modules: Vec<(String, Item<'_>)> = queue
                .iter()
                .filter(|(_, i)| matches!(i, Item::Module(_)))
                .cloned()
                .collect();
            (max_size, max_names) = max_layer(&modules, no_split);
        }
        let size = i128::from(item.size());
        let Some(&(device, limit)) = devices.get(current) else {
            break;
        };
        let mut reserved = 0i128;
        let limit = limit.map(|l| {
            if main.contains(&device) {
                reserved = i128::from(max_size);
                i128::from(l).saturating_sub(reserved)
            } else {
                i128::from(l)
            }
        });
        let here = used.get(current).copied().unwrap_or(0);
        if limit.is_none_or(|l| here.saturating_add(size) <= l) {
            if let Some(u) = used.get_mut(current) {
                *u = here.saturating_add(size);
            }
            map.push((name, device));
            continue;
        }
        // It does not fit: split a module with children (not of a no-split class)
        // into its own parameters and children, or go on to the next device.
        if let Item::Module(m) = item
            && !m.children.is_empty()
            && !no_split.contains(&m.class)
        {
            let mut parts = entries(&name, m, false);
            parts.append(&mut queue);
            queue = parts;
            let modules: Vec<(String, Item<'_>)> = queue
                .iter()
                .filter(|(_, i)| matches!(i, Item::Module(_)))
                .cloned()
                .collect();
            (max_size, max_names) = max_layer(&modules, no_split);
            continue;
        }
        if let Some(u) = used.get_mut(current) {
            *u = here.saturating_add(reserved);
        }
        current = current.saturating_add(1);
        queue.insert(0, (name, item));
    }
    clean(&mut map, "");
    map.sort();
    map
}

/// Whether a module holds a tensor anywhere (whether `compute_module_sizes` names it).
fn has_tensors(m: &Module) -> bool {
    !m.params.is_empty() || !m.buffers.is_empty() || m.children.iter().any(has_tensors)
}

/// The modules `get_module_leaves` finds once the tensors are removed: those holding
/// tensors of their own and no child that holds any; their sizes are pushed.
fn final_modules(m: &Module, out: &mut Vec<u64>) {
    if !has_tensors(m) {
        return;
    }
    if m.children.iter().any(has_tensors) {
        for c in &m.children {
            final_modules(c, out);
        }
    } else {
        out.push(m.size);
    }
}

/// The first module of `class` depth first (torch's order), if any.
fn first_of<'a>(m: &'a Module, class: &str) -> Option<&'a Module> {
    if m.class == class {
        return Some(m);
    }
    m.children.iter().find_map(|c| first_of(c, class))
}

/// `get_balanced_memory(model, max_memory, no_split_module_classes, low_zero)`: the
/// `max_memory` that spreads the model evenly over the GPUs (what transformers'
/// `device_map="auto"` and `"balanced"` hand `infer_auto_device_map`). Each GPU but
/// the last is capped at the model's size ÷ the GPUs plus a buffer, 1.25 × the larger
/// of a no-split block and the mean of the final modules; the last keeps its own
/// figure. `low_zero` (`"balanced_low_0"`) leaves GPU 0 only what the others cannot
/// hold. GPUs of 0 bytes are not counted; one GPU keeps its figure.
pub fn balanced_memory(
    model: &Module,
    gpus: &[u64],
    no_split: &[&str],
    low_zero: bool,
) -> Vec<u64> {
    let mut out = gpus.to_vec();
    let ids: Vec<usize> = (0..gpus.len())
        .filter(|&i| gpus.get(i).is_some_and(|m| *m > 0))
        .collect();
    let n = u64::try_from(ids.len()).unwrap_or(u64::MAX);
    if n <= 1 {
        return out;
    }
    let per = if low_zero { n.saturating_sub(1) } else { n };
    let mut per_gpu = model.size.checked_div(per).unwrap_or(0);
    let block = no_split
        .iter()
        .filter_map(|c| first_of(model, c).map(|m| m.size))
        .max()
        .unwrap_or(0);
    let mut finals = Vec::new();
    final_modules(model, &mut finals);
    // Python's `int(sum / len)` and `int(1.25 * buffer)`: float64, truncated.
    let sum = finals.iter().fold(0u64, |a, b| a.saturating_add(*b));
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let buffer = {
        let mean = (sum as f64 / finals.len().max(1) as f64) as u64;
        (1.25 * block.max(mean) as f64) as u64
    };
    per_gpu = per_gpu.saturating_add(buffer);
    let first = gpus.first().copied().unwrap_or(0);
    if let Some((_, rest)) = ids.split_last() {
        for &i in rest {
            let cap = if low_zero && i == 0 { first } else { per_gpu };
            if let Some(m) = out.get_mut(i) {
                *m = cap.min(*m);
            }
        }
    }
    if low_zero {
        let others = ids
            .iter()
            .skip(1)
            .filter_map(|&i| out.get(i))
            .fold(0u64, |a, b| a.saturating_add(*b));
        let min_zero = model.size.saturating_sub(others);
        if let Some(m) = out.get_mut(0) {
            *m = min_zero.min(*m);
        }
    }
    out
}

/// `clean_device_map`: every entry under `module` on one device (and more than one)
/// becomes `module`'s entry; then each child in turn.
fn clean(map: &mut Vec<(String, Device)>, module: &str) {
    let prefix = if module.is_empty() {
        String::new()
    } else {
        format!("{module}.")
    };
    let under: Vec<Device> = map
        .iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .map(|(_, d)| *d)
        .collect();
    if under.len() > 1 && under.iter().all(|d| Some(d) == under.first()) {
        let d = under[0];
        map.retain(|(k, _)| !k.starts_with(&prefix));
        map.push((module.to_string(), d));
    }
    let depth = if module.is_empty() {
        1
    } else {
        module.split('.').count().saturating_add(1)
    };
    let mut children: Vec<String> = map
        .iter()
        .filter(|(k, _)| k.starts_with(&prefix) && k.len() > module.len())
        .map(|(k, _)| k.split('.').take(depth).collect::<Vec<_>>().join("."))
        .collect();
    children.sort();
    children.dedup();
    for c in children {
        clean(map, &c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree holds the estimate's weights of Llama-3.1-8B in bf16 to the byte, the
    /// two rotary buffers (64 float32 values each) included; a block is one no-split
    /// layer.
    #[test]
    fn the_llama_tree_holds_the_estimates_weights() {
        let p = crate::presets::find("llama-3.1-8b").expect("preset");
        let (input, e) = crate::params::from_pairs(p.pairs.iter().copied());
        assert!(e.is_empty(), "{e:?}");
        let est = crate::estimate::estimate(&input).expect("estimate");
        let tree = llama(&input.arch.expect("arch"), 2).expect("tree");
        assert_eq!(tree.size, est.weights_bytes);
        let block = 2 * (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14_336 * 4096 + 2 * 4096);
        assert_eq!(tree.children[0].children[1].children[5].size, block);
        let (max, names) = max_layer(&entries("", &tree, true), &["LlamaDecoderLayer"]);
        // The embeddings and the head (128 256 × 4096 × 2) outweigh a block.
        assert_eq!(max, 128_256 * 4096 * 2);
        assert_eq!(names, ["model.embed_tokens", "lm_head"]);
        // Tied embeddings are not modelled.
        let tied = crate::presets::find("llama-3.2-1b").expect("preset");
        let (i, _) = crate::params::from_pairs(tied.pairs.iter().copied());
        assert!(llama(&i.arch.expect("arch"), 2).is_err());
    }

    /// `clean_device_map`: entries under one module on one device become the module's.
    #[test]
    fn cleaning_groups_a_module_on_one_device() {
        let mut m = vec![
            ("a.x".to_string(), Device::Gpu(0)),
            ("a.y".to_string(), Device::Gpu(0)),
            ("b.x".to_string(), Device::Gpu(0)),
            ("b.y".to_string(), Device::Cpu),
            ("b.yz".to_string(), Device::Cpu),
        ];
        clean(&mut m, "");
        m.sort();
        assert_eq!(
            m,
            vec![
                ("a".to_string(), Device::Gpu(0)),
                ("b.x".to_string(), Device::Gpu(0)),
                ("b.y".to_string(), Device::Cpu),
                ("b.yz".to_string(), Device::Cpu),
            ]
        );
    }
}
