//! llama.cpp's placement chosen for a card ([`choose`]): `--n-gpu-layers` for a dense
//! model, `--n-cpu-moe` for a MoE model, searched with the engine's own budget.

use serde::{Deserialize, Serialize};

use super::{fits, judge};
use crate::catalogue::GpuCard;
use crate::engine::{EngineParams, Value};
use crate::error::EstimateError;
use crate::estimate::{Estimate, EstimateInput};
use crate::fit::CardFit;
use crate::headline::{HOST_LLAMA, HostFit};

/// The flags that choose a placement; given any of them, the placement is the user's.
pub const PLACEMENT_FLAGS: [&str; 3] = ["n-gpu-layers", "n-cpu-moe", "override-tensor"];

/// A placement chosen for the card: the flags to type and what they leave where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LlamaPlacement {
    /// The flags to add to `llama-server`, as typed (`--n-gpu-layers 27`).
    pub flags: String,
    /// `--n-gpu-layers` (`None`: all, the default).
    pub n_gpu_layers: Option<u64>,
    /// `--n-cpu-moe` (`None`: not given).
    pub n_cpu_moe: Option<u64>,
    /// The model's repeating blocks (`-ngl` counts one more: the output layer).
    pub blocks: u64,
    /// The card's fit with these flags (its verdict "yes", or "no" when not even
    /// `--n-gpu-layers 0` fits: the card's fixed buffers alone exceed it).
    pub fit: CardFit,
    /// The card's fit with one block more on the card (`-ngl` + 1, `--n-cpu-moe` − 1):
    /// not "yes", which is why the search stopped.
    pub next: CardFit,
    /// The host memory these flags need and its verdict against `--ram`.
    pub host: Option<HostFit>,
    /// What llama.cpp's own `--fit` would choose, beside this.
    pub fit_note: String,
}

impl LlamaPlacement {
    /// What the flags leave on the card, in words ("the output layer and 21 of 32
    /// blocks on the card").
    pub fn what(&self) -> String {
        let n = self.blocks;
        let layers = match self.n_gpu_layers {
            None => "every layer on the card".to_string(),
            Some(0) => "no layer on the card".to_string(),
            Some(1) => "the output layer on the card, every block in host memory".to_string(),
            Some(g) => format!(
                "the output layer and the last {} of {n} blocks on the card",
                g.saturating_sub(1).min(n)
            ),
        };
        match self.n_cpu_moe {
            Some(m) if m >= n => format!("every block's routed experts in host memory, {layers}"),
            Some(1) => format!("the routed experts of block 0 in host memory, {layers}"),
            Some(m) => format!(
                "the routed experts of blocks 0–{} in host memory, {layers}",
                m.saturating_sub(1)
            ),
            None => layers,
        }
    }
}

/// What llama.cpp's `--fit` does for a dense model (`common/fit.cpp`,
/// `common_params_fit_impl`, step 3).
const FIT_DENSE: &str = "llama.cpp's own --fit (on by default when -ngl is not given) fills whole layers back to front to the largest count that leaves 1024 MiB free: the same -ngl by its measurement";
/// What it does for a MoE model (steps 3 and 4).
const FIT_MOE: &str = "llama.cpp's own --fit (on by default when -ngl and -ot are not given) keeps the experts of the last blocks on the host, not the first, and may put part of one more block's FFN on the card: about as many blocks' experts by its measurement";

/// `params` with `--n-gpu-layers` and `--n-cpu-moe` set (`None`: not given).
fn with(params: &EngineParams, ngl: Option<u64>, ncm: Option<u64>) -> EngineParams {
    let mut p = params.clone();
    p.set("n-gpu-layers", ngl.map(Value::Count));
    p.set("n-cpu-moe", ncm.map(Value::Count));
    p
}

/// The smallest `k` in `lo..=hi` for which `ok(k)` holds (`ok` never false past a
/// true), or `None` when none does; errors count as false.
fn smallest(lo: u64, hi: u64, mut ok: impl FnMut(u64) -> bool) -> Option<u64> {
    if lo > hi || !ok(hi) {
        return None;
    }
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo.saturating_add(hi.saturating_sub(lo) / 2);
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid.saturating_add(1);
        }
    }
    Some(lo)
}

/// The placement to choose on `card` for the workload under llama.cpp with `params`,
/// when every layer on the card does not fit; `None` when it does, when the user
/// gave a placement flag ([`PLACEMENT_FLAGS`]: theirs is the answer, as `--fit` then
/// stands aside), or when the model's blocks are unknown.
///
/// Dense: the largest `-ngl` in `0..=n` whose verdict is "fits" (`n + 1`, every block
/// and the output layer, did not). MoE: the smallest `--n-cpu-moe` in `1..=n` that
/// fits with every layer on the card; when even `n` does not, `--n-cpu-moe n` and the
/// largest `-ngl` that fits beside it. Each step's need grows with the blocks on the
/// card, so a bisection finds the boundary exactly: one block more does not fit.
/// When not even `-ngl 0` fits, that is the answer, with its verdict "no".
pub fn choose(
    input: &EstimateInput,
    est: &Estimate,
    params: &EngineParams,
    card: &GpuCard,
) -> Result<Option<LlamaPlacement>, EstimateError> {
    // Over several cards the split is the user's; choosing one is not modelled.
    if PLACEMENT_FLAGS.iter().any(|k| params.get(k).is_some()) || !params.devices.is_empty() {
        return Ok(None);
    }
    let Some(n) = input
        .arch
        .map(|a| a.layers)
        .or(input.kv_only.map(|k| k.layers))
    else {
        return Ok(None);
    };
    let (full, _) = judge(HOST_LLAMA, input, est, card, params)?;
    if fits(&full) {
        return Ok(None);
    }
    let ok = |ngl: Option<u64>, ncm: Option<u64>| {
        judge(HOST_LLAMA, input, est, card, &with(params, ngl, ncm)).is_ok_and(|(f, _)| fits(&f))
    };
    let moe = input.arch.is_some_and(|a| a.moe.is_some());
    // (ngl, ncm) and one block more on the card.
    let (ngl, ncm, next) = if moe {
        match smallest(1, n, |k| ok(None, Some(k))) {
            Some(k) => (None, Some(k), (None, Some(k.saturating_sub(1)))),
            None => {
                let ngl = largest_ngl(n, |g| ok(Some(g), Some(n)));
                (Some(ngl), Some(n), (Some(ngl.saturating_add(1)), Some(n)))
            }
        }
    } else {
        let ngl = largest_ngl(n, |g| ok(Some(g), None));
        (Some(ngl), None, (Some(ngl.saturating_add(1)), None))
    };
    let (fit, host) = judge(HOST_LLAMA, input, est, card, &with(params, ngl, ncm))?;
    // `-ngl n + 1` is every layer on the card, as is `--n-cpu-moe 0`.
    let (g, m) = next;
    let next = judge(
        HOST_LLAMA,
        input,
        est,
        card,
        &with(params, g.filter(|g| *g <= n), m.filter(|m| *m > 0)),
    )?
    .0;
    let mut flags = Vec::new();
    if let Some(m) = ncm {
        flags.push(format!("--n-cpu-moe {m}"));
    }
    if let Some(g) = ngl {
        flags.push(format!("--n-gpu-layers {g}"));
    }
    Ok(Some(LlamaPlacement {
        flags: flags.join(" "),
        n_gpu_layers: ngl,
        n_cpu_moe: ncm,
        blocks: n,
        fit,
        next,
        host,
        fit_note: if moe { FIT_MOE } else { FIT_DENSE }.into(),
    }))
}

/// The largest `-ngl` in `0..=n` that `ok` takes, else 0 (nothing fits: the answer
/// says so with its verdict).
fn largest_ngl(n: u64, ok: impl Fn(u64) -> bool) -> u64 {
    // ok(g) is true up to the boundary: the smallest g whose g + 1 is refused.
    smallest(0, n, |g| g == n || !ok(g.saturating_add(1))).unwrap_or(0)
}

#[cfg(test)]
mod tests;
