//! transformers' `from_pretrained(…, device_map="auto")` on the GPUs given, with the
//! host's RAM: the `max_memory` transformers computes, the map accelerate's rule
//! builds from it ([`super::accelerate`]), and each device's need and verdict.
//!
//! Read in transformers 5.23.0, `src/transformers/integrations/accelerate.py`:
//! - `_get_device_map`: for `"auto"`, `"balanced"` and `"balanced_low_0"` it calls
//!   transformers' own `get_balanced_memory`, then `infer_auto_device_map` (the same
//!   rule as accelerate 1.16.0's, without its `fallback_allocation`), with the
//!   model's `_no_split_modules` (`LlamaDecoderLayer` for Llama) unsplit.
//! - `get_max_memory`: with no `max_memory`, accelerate's (accelerate 1.16.0,
//!   `utils/modeling.py` `get_max_memory`): each GPU's free memory
//!   (`torch.cuda.mem_get_info` once a tensor made the CUDA context) and the CPU's
//!   `psutil.virtual_memory().available`, then transformers keeps 90 % of the CPU's;
//!   with a `max_memory`, exactly the devices it names (no CPU entry: nothing goes to
//!   the CPU, the rest goes to disk).
//! - `get_balanced_memory`: on one GPU with no `max_memory`, 90 % of it ("10 % for
//!   the buffer to avoid OOM"); on several, every GPU but the last capped at the
//!   model's size ÷ the GPUs plus a buffer of 1.25 × the larger of the largest
//!   no-split block and the largest leaf module (a module holding tensors itself: the
//!   embeddings or the head), the last keeping its figure. (accelerate's own
//!   `get_balanced_memory` takes the mean leaf instead: [`super::accelerate`].)
//!
//! At run time (accelerate's `dispatch_model`), a block mapped to the CPU or disk
//! runs on the first GPU: its weights move there for its forward (the largest such
//! module is what `infer_auto_device_map` keeps free on GPU 0), and so does its KV
//! cache (`DynamicCache` makes each layer's tensors on the device of the keys). So a
//! GPU's need here is its weights, its blocks' KV cache, and — on every GPU, an upper
//! bound since only one computes at a time — the estimate's transients and reserve;
//! GPU 0 adds the largest offloaded module. The host's need is the weights mapped to
//! the CPU (plus the largest disk module, read through RAM when disk is used).

use serde::{Deserialize, Serialize};

use super::accelerate::{self, Device, Module};
use crate::catalogue::GpuCard;
use crate::engine::EngineParams;
use crate::error::EstimateError;
use crate::estimate::{Estimate, EstimateInput};
use crate::fit::{CardFit, fit_card_reserve};
use crate::headline::HostFit;
pub use crate::max_memory::{MAX_MEMORY, MaxMemory, parse_max_memory};
use crate::units::Bytes;

/// The CUDA context a GPU's free memory lacks when transformers reads it, MiB
/// (assumed, as the engines' budgets assume it; `--cuda-context-mib` sets it).
const CUDA_CONTEXT_MIB: u64 = 512;

/// The classes `LlamaForCausalLM` keeps whole (`_no_split_modules`).
const NO_SPLIT: &[&str] = &["LlamaDecoderLayer"];

/// One device's part of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DevicePart {
    /// As accelerate names it: `0`, `cpu`, `disk`.
    pub device: String,
    /// What the map puts there, in short (`model.layers.0–38, model.embed_tokens`).
    pub modules: String,
    /// The weights (and buffers) mapped there, bytes.
    pub weights_bytes: u64,
    /// `max_memory` for it as `infer_auto_device_map` receives it, bytes (`None`:
    /// disk, or a CPU whose RAM is not known).
    pub max_memory_bytes: Option<u64>,
    /// GPUs: the KV cache of the blocks that run there, bytes.
    pub kv_bytes: u64,
    /// GPUs: the need (weights, KV, transients, reserve, the largest offloaded
    /// module on GPU 0) against the card.
    pub fit: Option<CardFit>,
}

/// `device_map="auto"` planned: what to type, where everything goes, each device's
/// verdict and the host RAM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeviceMapPlan {
    /// The call to type.
    pub code: String,
    /// Whether `max_memory` was given (`--max-memory`); otherwise transformers'
    /// defaults.
    pub max_memory_given: bool,
    /// The map, cleaned as accelerate returns it: (module, device).
    pub map: Vec<(String, String)>,
    /// The GPUs in index order, then the CPU and disk when they hold anything.
    pub devices: Vec<DevicePart>,
    /// The host RAM the CPU's part needs, judged against `--ram`.
    pub host: Option<HostFit>,
    /// How the figures were reached.
    pub notes: Vec<String>,
    /// When this map does not fit and `--ram` is given: a `max_memory` that fits
    /// (each GPU less what runs beside its weights), planned the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<Box<DeviceMapPlan>>,
}

impl DeviceMapPlan {
    /// Whether every GPU's verdict is "yes" or borderline and the host fits (or has
    /// no RAM given).
    pub fn fits(&self) -> bool {
        self.devices.iter().all(|d| {
            d.fit
                .as_ref()
                .is_none_or(|f| crate::fit::Verdict::of_fit(f) != crate::fit::Verdict::DoesNotFit)
        }) && self.host.as_ref().is_none_or(|h| h.fits != Some(false))
    }
}

/// transformers 5.23.0's `get_balanced_memory` (`integrations/accelerate.py`) for
/// `gpus` (their `max_memory` in index order): `user_set` when `max_memory` was given
/// (otherwise one GPU keeps 90 %).
pub fn transformers_balanced_memory(
    model: &Module,
    gpus: &[u64],
    no_split: &[&str],
    low_zero: bool,
    user_set: bool,
) -> Vec<u64> {
    let mut out = gpus.to_vec();
    let ids: Vec<usize> = (0..gpus.len())
        .filter(|&i| gpus.get(i).is_some_and(|m| *m > 0))
        .collect();
    let n = u64::try_from(ids.len()).unwrap_or(u64::MAX);
    if n == 0 {
        return out;
    }
    let mut low_zero = low_zero;
    if n == 1 {
        low_zero = false;
        if !user_set && let Some(m) = out.first_mut() {
            // `max_memory[key] *= 0.9` on the first GPU key: a float, compared with
            // whole sizes, so its floor decides the same.
            *m = floor_ninety_percent(*m);
        }
    }
    let per = if low_zero { n.saturating_sub(1) } else { n };
    let mut per_gpu = model.size.checked_div(per).unwrap_or(0);
    let mut block = 0u64;
    let mut leaf = 0u64;
    walk(model, &mut |m| {
        if no_split.contains(&m.class) {
            block = block.max(m.size);
        }
        let own = m
            .params
            .iter()
            .chain(&m.buffers)
            .fold(0u64, |a, p| a.saturating_add(p.1));
        leaf = leaf.max(own);
    });
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let buffer = (1.25 * block.max(leaf) as f64) as u64;
    per_gpu = per_gpu.saturating_add(buffer);
    let first = out.first().copied().unwrap_or(0);
    if let Some((_, rest)) = ids.split_last() {
        for &i in rest {
            let cap = if low_zero && i == 0 { first } else { per_gpu };
            if let Some(m) = out.get_mut(i) {
                *m = cap.min(*m);
            }
        }
    }
    if low_zero {
        let others = (1..ids.len())
            .filter_map(|i| out.get(i))
            .fold(0u64, |a, b| a.saturating_add(*b));
        if let Some(m) = out.get_mut(0) {
            *m = model.size.saturating_sub(others).min(*m);
        }
    }
    out
}

/// `x × 0.9` as Python computes it, floored.
fn floor_ninety_percent(x: u64) -> u64 {
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let v = (x as f64 * 0.9).floor() as u64;
    v
}

fn walk(m: &Module, f: &mut impl FnMut(&Module)) {
    f(m);
    for c in &m.children {
        walk(c, f);
    }
}

/// The bytes under a dotted path of the tree (a module, a parameter or a buffer).
fn size_at(model: &Module, path: &str) -> u64 {
    if path.is_empty() {
        return model.size;
    }
    let mut m = model;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        if let Some(c) = m.children.iter().find(|c| c.name == *p) {
            m = c;
        } else if i.saturating_add(1) == parts.len() {
            return m
                .params
                .iter()
                .chain(&m.buffers)
                .find(|(n, _)| n == p)
                .map_or(0, |t| t.1);
        } else {
            return 0;
        }
    }
    m.size
}

/// The device of `path` in a cleaned map: its entry or the nearest one above it.
fn device_of(map: &[(String, Device)], path: &str) -> Option<Device> {
    map.iter()
        .filter(|(k, _)| k.is_empty() || path == k || path.starts_with(&format!("{k}.")))
        .max_by_key(|(k, _)| k.len())
        .map(|(_, d)| *d)
}

/// The model's Llama tree when it holds the estimate's weights to the byte in one
/// dtype (2 or 4 bytes): `None` for a layout or format it does not hold.
fn tree_of(input: &EstimateInput, est: &Estimate) -> Option<(Module, u64)> {
    let arch = input.arch.as_ref()?;
    [2u64, 4].into_iter().find_map(|d| {
        let t = accelerate::llama(arch, d).ok()?;
        // The tree's rotary buffers are in the estimate's weights when the architecture
        // says the model has them (`rope_tables`).
        let buffers = if arch.rope_tables > 0 {
            0
        } else {
            (arch.head_dim / 2).saturating_mul(4).saturating_mul(2)
        };
        (t.size.saturating_sub(buffers) == est.weights_bytes).then_some((t, d))
    })
}

/// `modules` in short: consecutive blocks as one range.
fn summary(names: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut blocks: Vec<u64> = names
        .iter()
        .filter_map(|n| n.strip_prefix("model.layers.")?.parse().ok())
        .collect();
    blocks.sort_unstable();
    let mut i = 0usize;
    while let Some(&start) = blocks.get(i) {
        let mut end = start;
        while blocks
            .get(i.saturating_add(1))
            .is_some_and(|&b| Some(b) == end.checked_add(1))
        {
            end = end.saturating_add(1);
            i = i.saturating_add(1);
        }
        out.push(if start == end {
            format!("model.layers.{start}")
        } else {
            format!("model.layers.{start}–{end}")
        });
        i = i.saturating_add(1);
    }
    for n in names {
        let is_block = n
            .strip_prefix("model.layers.")
            .is_some_and(|r| r.parse::<u64>().is_ok());
        if !is_block {
            out.push(if n.is_empty() {
                "the whole model".into()
            } else {
                n.clone()
            });
        }
    }
    out.join(", ")
}

/// The size as `max_memory` takes it: whole GiB when exact, else GB, else bytes.
fn size_text(b: u64) -> String {
    if b.is_multiple_of(1 << 30) {
        format!("{}GiB", b >> 30)
    } else if b.is_multiple_of(1 << 20) {
        format!("{}MiB", b >> 20)
    } else {
        b.to_string()
    }
}

/// `device_map="auto"` planned under `--engine transformers` on `card`: `None` when
/// the model's layout or format is not one the map models, or when there is nothing
/// to place (one GPU, no `--max-memory`, and the model fits the card).
pub fn plan(
    input: &EstimateInput,
    est: &Estimate,
    params: &EngineParams,
    card: &GpuCard,
) -> Result<Option<DeviceMapPlan>, EstimateError> {
    let given = match params.text(MAX_MEMORY) {
        Some(t) => Some(parse_max_memory(t).map_err(|e| EstimateError::invalid(MAX_MEMORY, e))?),
        None => None,
    };
    let Some((tree, dtype)) = tree_of(input, est) else {
        if given.is_some() {
            return Err(EstimateError::invalid(
                MAX_MEMORY,
                "accelerate's map is modelled for LlamaForCausalLM's layout in bf16, fp16 or fp32 only (untied, no biases, no q/k norms, dense)",
            ));
        }
        return Ok(None);
    };
    let n = input.gpus.max(1);
    let (capacity, _) = card.capacity();
    if given.is_none() && n == 1 && est.per_device_bytes <= capacity {
        return Ok(None);
    }
    if let Some((gpus, _)) = &given {
        if let Some((i, _)) = gpus.iter().find(|(i, _)| u64::from(*i) >= n) {
            return Err(EstimateError::invalid(
                MAX_MEMORY,
                format!("GPU {i}, but --gpus {n} (GPUs 0–{})", n.saturating_sub(1)),
            ));
        }
        if gpus
            .iter()
            .enumerate()
            .any(|(k, (i, _))| usize::try_from(*i).ok() != Some(k))
        {
            return Err(EstimateError::invalid(
                MAX_MEMORY,
                "name the GPUs from 0 without gaps (0=…,1=…): the map numbers them as accelerate lists them",
            ));
        }
    }
    let mut base = plan_with(input, est, card, &tree, dtype, given.as_ref())?;
    // A max_memory that fits, when the map does not and the RAM is known: each GPU's
    // capacity less what runs beside its weights — the reserve, the transients and the
    // whole KV cache (GPU 0 may run every block) — and 90 % of the RAM for the CPU.
    // GPU 0's largest offloaded module is inside: infer_auto_device_map keeps room
    // for it there.
    if !base.fits()
        && let Some(ram) = input.ram
    {
        let beside = [est.reserve_bytes, est.transient_bytes, est.kv_cache_bytes]
            .into_iter()
            .fold(0u64, u64::saturating_add);
        let per = capacity.saturating_sub(beside) & !((1u64 << 20).saturating_sub(1));
        if per > 0 {
            let gpus: Vec<(u32, u64)> = (0..u32::try_from(n).unwrap_or(u32::MAX).min(4096))
                .map(|i| (i, per))
                .collect();
            let cpu = floor_ninety_percent(ram) & !((1u64 << 20).saturating_sub(1));
            let chosen = plan_with(input, est, card, &tree, dtype, Some(&(gpus, Some(cpu))))?;
            if chosen.fits() {
                base.chosen = Some(Box::new(chosen));
            }
        }
    }
    Ok(Some(base))
}

/// The plan for `given` (`None`: transformers' defaults).
fn plan_with(
    input: &EstimateInput,
    est: &Estimate,
    card: &GpuCard,
    tree: &Module,
    dtype: u64,
    given: Option<&MaxMemory>,
) -> Result<DeviceMapPlan, EstimateError> {
    let tree = tree.clone();
    let n = input.gpus.max(1);
    let (capacity, _) = card.capacity();
    let ctx = input
        .cuda_context_mib
        .unwrap_or(CUDA_CONTEXT_MIB)
        .saturating_mul(1 << 20);
    let mut notes = Vec::new();
    let (gpu_mm, cpu_mm, cpu_known) = match given {
        Some((gpus, cpu)) => {
            // accelerate's infer_auto_device_map walks the devices as max_memory lists
            // them: only the GPUs given, by index.
            (gpus.iter().map(|g| g.1).collect::<Vec<_>>(), *cpu, true)
        }
        None => {
            let free = capacity.saturating_sub(ctx);
            notes.push(format!(
                "max_memory as transformers sets it: each GPU's free memory ({} of {} less a {} MiB CUDA context, assumed), {}",
                Bytes(free).gib_string(2) + " GiB",
                card.name,
                ctx >> 20,
                if input.ram.is_some() {
                    "the CPU's 90 % of the RAM (--ram; available RAM is less on a busy host)"
                } else {
                    "the CPU's 90 % of the available RAM (not known here: --ram SIZE)"
                }
            ));
            let gpus = vec![free; usize::try_from(n).unwrap_or(usize::MAX).min(4096)];
            match input.ram {
                Some(r) => (gpus, Some(floor_ninety_percent(r)), true),
                // Unknown RAM: the CPU takes what the GPUs do not.
                None => (gpus, Some(u64::MAX / 4), false),
            }
        }
    };
    let user_set = given.is_some();
    let balanced = transformers_balanced_memory(&tree, &gpu_mm, NO_SPLIT, false, user_set);
    if !user_set && n == 1 {
        notes.push("one GPU and no max_memory: transformers keeps 90 % of it for the weights, 10 % for the buffers (get_balanced_memory)".into());
    } else if balanced.len() > 1 {
        notes.push(format!(
            "balanced (get_balanced_memory): every GPU but the last capped at the model's size ÷ {} plus 1.25 × its largest block or leaf module",
            balanced.len()
        ));
    }
    let map = accelerate::infer_auto_device_map(&tree, &balanced, cpu_mm, NO_SPLIT);
    let layers = input.arch.as_ref().map_or(0, |a| a.layers);
    let main = map
        .iter()
        .filter_map(|(_, d)| match d {
            Device::Gpu(i) => Some(*i),
            _ => None,
        })
        .min();
    // Blocks by the device they run on: an offloaded block runs on the main GPU.
    let mut runs_on = vec![0u64; balanced.len()];
    for b in 0..layers {
        let d = device_of(&map, &format!("model.layers.{b}"));
        let g = match d {
            Some(Device::Gpu(i)) => Some(i),
            _ => main,
        };
        if let Some(c) = g.and_then(|i| runs_on.get_mut(usize::try_from(i).ok()?)) {
            *c = c.saturating_add(1);
        }
    }
    let kv_of = |blocks: u64| -> u64 {
        let v = u128::from(est.kv_cache_bytes)
            .saturating_mul(u128::from(blocks))
            .checked_div(u128::from(layers))
            .unwrap_or(0);
        u64::try_from(v).unwrap_or(u64::MAX)
    };
    let offloaded_max = map
        .iter()
        .filter(|(_, d)| matches!(d, Device::Cpu | Device::Disk))
        .map(|(k, _)| size_at(&tree, k))
        .max()
        .unwrap_or(0);
    let disk_max = map
        .iter()
        .filter(|(_, d)| *d == Device::Disk)
        .map(|(k, _)| size_at(&tree, k))
        .max()
        .unwrap_or(0);
    let mut devices = Vec::new();
    let names_on = |dev: Device| -> Vec<String> {
        map.iter()
            .filter(|(_, d)| *d == dev)
            .map(|(k, _)| k.clone())
            .collect()
    };
    let bytes_on = |dev: Device| -> u64 {
        map.iter()
            .filter(|(_, d)| *d == dev)
            .fold(0u64, |a, (k, _)| a.saturating_add(size_at(&tree, k)))
    };
    for (i, mm) in balanced.iter().enumerate() {
        let id = u32::try_from(i).unwrap_or(u32::MAX);
        let dev = Device::Gpu(id);
        let weights = bytes_on(dev);
        let kv = kv_of(runs_on.get(i).copied().unwrap_or(0));
        let moved = if main == Some(id) { offloaded_max } else { 0 };
        let need = [weights, kv, est.transient_bytes, est.reserve_bytes, moved]
            .into_iter()
            .try_fold(0u64, u64::checked_add)
            .ok_or(EstimateError::Overflow {
                what: "a device's need",
            })?;
        devices.push(DevicePart {
            device: dev.name(),
            modules: summary(&names_on(dev)),
            weights_bytes: weights,
            max_memory_bytes: Some(*mm),
            kv_bytes: kv,
            fit: Some(fit_card_reserve(card, need, 0, est.reserve_bytes)),
        });
    }
    let cpu_w = bytes_on(Device::Cpu);
    let disk_w = bytes_on(Device::Disk);
    for (dev, w, mm) in [
        (Device::Cpu, cpu_w, cpu_mm.filter(|_| cpu_known)),
        (Device::Disk, disk_w, None),
    ] {
        if w > 0 {
            devices.push(DevicePart {
                device: dev.name(),
                modules: summary(&names_on(dev)),
                weights_bytes: w,
                max_memory_bytes: mm,
                kv_bytes: 0,
                fit: None,
            });
        }
    }
    let host_need = cpu_w.saturating_add(if disk_w > 0 { disk_max } else { 0 });
    let host = HostFit::judge(
        host_need,
        0,
        input.ram,
        Some(card),
        if disk_w > 0 {
            "the weights device_map puts on the CPU, and the largest disk module read through RAM"
        } else {
            "the weights device_map puts on the CPU"
        },
    )
    .filter(|_| host_need > 0 || input.ram.is_some());
    if offloaded_max > 0 {
        notes.push(format!(
            "offloaded modules run on GPU {}: their weights move there for their forward (the largest, {} GiB, counted there) with their KV cache",
            main.map_or_else(|| "-".into(), |m| m.to_string()),
            Bytes(offloaded_max).gib_string(2)
        ));
    }
    let fp16 = input.format.is_some_and(|f| f.name() == "fp16");
    let dtype_name = match dtype {
        4 => "torch.float32",
        _ if fp16 => "torch.float16",
        _ => "torch.bfloat16",
    };
    let code = match given {
        Some((gpus, cpu)) => {
            let mut parts: Vec<String> = gpus
                .iter()
                .map(|(i, b)| format!("{i}: \"{}\"", size_text(*b)))
                .collect();
            if let Some(c) = cpu {
                parts.push(format!("\"cpu\": \"{}\"", size_text(*c)));
            }
            format!(
                "AutoModelForCausalLM.from_pretrained(MODEL, dtype={dtype_name}, device_map=\"auto\", max_memory={{{}}})",
                parts.join(", ")
            )
        }
        None => format!(
            "AutoModelForCausalLM.from_pretrained(MODEL, dtype={dtype_name}, device_map=\"auto\")"
        ),
    };
    Ok(DeviceMapPlan {
        code,
        max_memory_given: user_set,
        map: map.into_iter().map(|(k, d)| (k, d.name())).collect(),
        devices,
        host,
        notes,
        chosen: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_memory_reads_as_users_write_it() {
        let (g, c) = parse_max_memory("0=20GiB, 1:22GB ,cpu=\"64GiB\"").expect("parsed");
        assert_eq!(g, vec![(0, 20 << 30), (1, 22_000_000_000)]);
        assert_eq!(c, Some(64 << 30));
        assert_eq!(
            parse_max_memory("1=1000,0=5MiB").expect("p").0,
            vec![(0, 5 << 20), (1, 1000)]
        );
        assert_eq!(
            parse_max_memory("2=3,0=1,1=2").expect("p").0,
            vec![(0, 1), (1, 2), (2, 3)]
        );
        for bad in [
            "",
            "0",
            "gpu=1GiB",
            "0=lots",
            "0=1GiB,0=2GiB",
            "2=1GiB,0=1GiB,2=3GiB",
            "cpu=1GiB,cpu=1GiB",
        ] {
            assert!(parse_max_memory(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn summary_joins_consecutive_blocks() {
        let names: Vec<String> = [
            "model.embed_tokens",
            "model.layers.0",
            "model.layers.1",
            "model.layers.2",
            "model.layers.5",
            "lm_head",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            summary(&names),
            "model.layers.0–2, model.layers.5, model.embed_tokens, lm_head"
        );
    }

    /// One GPU, no max_memory: 90 % of it; a given one is kept.
    #[test]
    fn one_gpu_keeps_ninety_percent_unless_given() {
        let p = crate::presets::find("llama-3.1-8b").expect("preset");
        let (input, _) = crate::params::from_pairs(p.pairs.iter().copied());
        let tree = accelerate::llama(&input.arch.expect("arch"), 2).expect("tree");
        assert_eq!(
            transformers_balanced_memory(&tree, &[1000], NO_SPLIT, false, false),
            vec![900]
        );
        assert_eq!(
            transformers_balanced_memory(&tree, &[1000], NO_SPLIT, false, true),
            vec![1000]
        );
        // Two roomy GPUs: the first is capped at half the model plus 1.25 × the head
        // (128 256 × 4096 × 2 B, larger than a block).
        let big = tree.size * 2;
        let b = transformers_balanced_memory(&tree, &[big, big], NO_SPLIT, false, false);
        assert_eq!(
            b,
            vec![
                tree.size / 2 + (1.25 * (128_256.0 * 4096.0 * 2.0)) as u64,
                big
            ]
        );
    }

    /// Llama-3.1-70B on two 24 GiB cards with 128 GiB of RAM: transformers' default
    /// map does not fit GPU 0 (its KV for every offloaded block and the reserve beside
    /// 23.49 GiB of max_memory); the max_memory chosen does, on both GPUs, and
    /// typing it back gives that same map.
    #[test]
    fn a_max_memory_is_chosen_when_the_default_does_not_fit() {
        let p = crate::presets::find("llama-3.1-70b").expect("preset");
        let pairs: Vec<(&str, &str)> = p
            .pairs
            .iter()
            .copied()
            .chain([("gpus", "2"), ("context", "4096"), ("ram", "128GiB")])
            .collect();
        let (input, e) = crate::params::from_pairs(pairs.iter().copied());
        assert!(e.is_empty(), "{e:?}");
        let est = crate::estimate::estimate(&input).expect("estimate");
        let engine = |extra: Option<&str>| {
            let mut kv = vec![("engine", "transformers"), ("card", "24GiB")];
            if let Some(m) = extra {
                kv.push(("max-memory", m));
            }
            let (params, e) = crate::engine::from_pairs(kv);
            assert!(e.is_empty(), "{e:?}");
            params
        };
        let params = engine(None);
        let card = params.card.expect("card");
        let base = plan(&input, &est, &params, &card)
            .expect("plan")
            .expect("a map");
        assert!(!base.fits());
        assert!(!base.max_memory_given);
        let chosen = base.chosen.as_ref().expect("a max_memory chosen");
        assert!(chosen.fits());
        let gpus: Vec<&DevicePart> = chosen.devices.iter().filter(|d| d.fit.is_some()).collect();
        assert_eq!(gpus.len(), 2);
        // Fewer weights on the GPUs than the default map put there, the rest on the CPU.
        let on = |p: &DeviceMapPlan, d: &str| {
            p.devices
                .iter()
                .find(|x| x.device == d)
                .map_or(0, |x| x.weights_bytes)
        };
        assert!(on(chosen, "0") < on(&base, "0"));
        assert!(on(chosen, "cpu") > on(&base, "cpu"));
        // Typed back as --max-memory, the same map.
        let typed = chosen
            .code
            .split("max_memory={")
            .nth(1)
            .expect("max_memory in the code")
            .trim_end_matches("})")
            .replace(['"', ' '], "")
            .replace(':', "=");
        let again = plan(&input, &est, &engine(Some(&typed)), &card)
            .expect("plan")
            .expect("a map");
        assert_eq!(again.map, chosen.map);
        assert!(again.max_memory_given);
        // A GPU outside --gpus is refused.
        assert!(plan(&input, &est, &engine(Some("0=1GiB,2=1GiB")), &card).is_err());
    }
}
