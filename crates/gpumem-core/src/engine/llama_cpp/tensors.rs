//! llama.cpp's model buffers, tensor by tensor: every GGUF tensor of the
//! architecture under llama.cpp's name, with its bytes in the estimate's formats,
//! and the device `load_tensors` gives it.
//!
//! Names follow `src/llama-arch.cpp` (`LLM_TENSOR_NAMES`, ggml-org/llama.cpp at
//! b9993–b10964): `token_embd`, `output_norm`, `output`, and per block
//! `blk.N.attn_{norm,q,k,v,output,q_norm,k_norm,sinks}`, MLA's `attn_q_a`,
//! `attn_q_a_norm`, `attn_q_b`, `attn_kv_a_mqa`, `attn_kv_a_norm`, `attn_kv_b`,
//! `ffn_{norm,gate,up,down}`, the router `ffn_gate_inp`, the routed experts merged
//! into one 3-D tensor per projection `ffn_{gate,up,down}_exps`, the shared experts
//! `ffn_{gate,up,down}_shexp` and their gate `ffn_gate_inp_shexp`, the router's
//! correction bias `exp_probs_b`, Gemma's `post_attention_norm` and `post_ffw_norm`;
//! each with its `.weight` or `.bias` suffix. (A file converted with a fused
//! `ffn_gate_up_exps` holds the gate's and the up projection's bytes under one name;
//! `--n-cpu-moe`'s rule and the list treat both alike.)
//!
//! The list is derived from [`Architecture::tensors`], group by group, with the same
//! per-tensor byte count as the estimate's weight lines, so its sum is the estimate's
//! weights to the byte. A group llama.cpp has no name for here (a state-space mixer,
//! Gemma 4's global layers, an indexer) keeps its checkpoint name and is spread
//! evenly over the blocks; MTP layers and towers are listed once, outside the blocks.
//!
//! Placement (`src/llama-model.cpp`, `load_tensors`): the input layer (the token
//! embeddings) always stays on the CPU; with `-ngl k` on a model of `n` blocks,
//! `i_gpu_start = max(n + 1 − k, 0)` and slot `il` (blocks `0..n`, the output layer
//! `n`) goes to the GPU when `il ≥ i_gpu_start`: the output layer first, then the
//! last `k − 1` blocks. A model with tied embeddings loads `token_embd.weight` a
//! second time as its output (`TENSOR_DUPLICATED`, re-classified as the output
//! layer's tensor in `create_tensor`), in the output layer's buffer.

use crate::arch::{Architecture, ModuleFormats, ParamClass, TensorGroup};
use crate::error::EstimateError;

/// Where a tensor belongs in llama.cpp's layer slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The input layer (token and position embeddings): always on the CPU.
    Input,
    /// Repeating block `N` (`blk.N.`).
    Block(u64),
    /// The output layer (`output_norm`, `output`).
    Output,
    /// Counted by the estimate but outside llama.cpp's blocks (MTP layers, a vision
    /// tower, which llama.cpp loads from its own `mmproj` file): placed with the
    /// output layer.
    Extra,
}

/// One GGUF tensor (the routed experts of a block are one tensor per projection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgufTensor {
    /// Its layer slot.
    pub slot: Slot,
    /// The name after `blk.N.` (a block's), or the whole name.
    pub suffix: &'static str,
    /// Stored bytes in the estimate's format for its role.
    pub bytes: u64,
    /// Whether `suffix` is llama.cpp's name (false: the checkpoint's, no llama.cpp
    /// tensor of that name is generated here).
    pub named: bool,
    /// The tied output's second copy of `token_embd.weight` (not in the estimate's
    /// weights: the checkpoint stores it once).
    pub duplicate: bool,
    /// A block's routed experts (`ffn_{gate,up,down}_exps`, weight or bias).
    expert: bool,
    /// The estimate's class of its group.
    pub class: ParamClass,
}

impl GgufTensor {
    /// The name as llama.cpp matches it (`blk.12.ffn_gate_exps.weight`).
    pub fn name(&self) -> String {
        match self.slot {
            Slot::Block(i) => format!("blk.{i}.{}", self.suffix),
            _ => self.suffix.to_string(),
        }
    }

    /// Whether `--n-cpu-moe` / `--cpu-moe` name it: a routed expert's projection or
    /// its bias, `\.ffn_(up|down|gate|gate_up)_(ch|)exps` (`common/common.h`,
    /// `LLM_FFN_EXPS_REGEX`), known from the group without matching the name.
    pub fn is_routed_expert(&self) -> bool {
        self.expert
    }
}

/// Which blocks a group's tensors are in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rule {
    Input,
    Output,
    /// Every block (attention, norms).
    Every,
    /// The MoE blocks.
    Moe,
    /// The blocks with a dense MLP.
    Dense,
}

/// How many checkpoint tensors one GGUF tensor holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Merge {
    One,
    /// A block's routed experts (one 3-D tensor per projection).
    Experts,
    /// A block's shared experts (one wider tensor).
    Shared,
}

/// The architecture's group names ([`Architecture::tensors`]) → llama.cpp's names,
/// their blocks and merge. Data, not a `match`: the page's wasm pays for the text only.
const NAMES: &[(&str, &[&str], Rule, Merge)] = &[
    (
        "embed_tokens",
        &["token_embd.weight"],
        Rule::Input,
        Merge::One,
    ),
    (
        "position embeddings",
        &["position_embd.weight"],
        Rule::Input,
        Merge::One,
    ),
    ("lm_head", &["output.weight"], Rule::Output, Merge::One),
    ("q_proj", &["attn_q.weight"], Rule::Every, Merge::One),
    ("k_proj", &["attn_k.weight"], Rule::Every, Merge::One),
    ("v_proj", &["attn_v.weight"], Rule::Every, Merge::One),
    ("o_proj", &["attn_output.weight"], Rule::Every, Merge::One),
    ("q_proj.bias", &["attn_q.bias"], Rule::Every, Merge::One),
    ("k_proj.bias", &["attn_k.bias"], Rule::Every, Merge::One),
    ("v_proj.bias", &["attn_v.bias"], Rule::Every, Merge::One),
    (
        "o_proj.bias",
        &["attn_output.bias"],
        Rule::Every,
        Merge::One,
    ),
    ("sinks", &["attn_sinks.weight"], Rule::Every, Merge::One),
    ("q_a_proj", &["attn_q_a.weight"], Rule::Every, Merge::One),
    (
        "q_a_layernorm",
        &["attn_q_a_norm.weight"],
        Rule::Every,
        Merge::One,
    ),
    ("q_b_proj", &["attn_q_b.weight"], Rule::Every, Merge::One),
    (
        "kv_a_proj_with_mqa",
        &["attn_kv_a_mqa.weight"],
        Rule::Every,
        Merge::One,
    ),
    (
        "kv_a_layernorm",
        &["attn_kv_a_norm.weight"],
        Rule::Every,
        Merge::One,
    ),
    ("kv_b_proj", &["attn_kv_b.weight"], Rule::Every, Merge::One),
    (
        "q_norm/k_norm",
        &["attn_q_norm.weight", "attn_k_norm.weight"],
        Rule::Every,
        Merge::One,
    ),
    ("q_norm", &["attn_q_norm.weight"], Rule::Every, Merge::One),
    ("k_norm", &["attn_k_norm.weight"], Rule::Every, Merge::One),
    (
        "gate_proj",
        &["ffn_gate.weight", "ffn_gate.bias"],
        Rule::Dense,
        Merge::One,
    ),
    (
        "up_proj",
        &["ffn_up.weight", "ffn_up.bias"],
        Rule::Dense,
        Merge::One,
    ),
    (
        "down_proj",
        &["ffn_down.weight", "ffn_down.bias"],
        Rule::Dense,
        Merge::One,
    ),
    ("router", &["ffn_gate_inp.weight"], Rule::Moe, Merge::One),
    ("router.bias", &["ffn_gate_inp.bias"], Rule::Moe, Merge::One),
    (
        "router.e_score_correction_bias",
        &["exp_probs_b.bias"],
        Rule::Moe,
        Merge::One,
    ),
    (
        "experts.gate_proj",
        &["ffn_gate_exps.weight", "ffn_gate_exps.bias"],
        Rule::Moe,
        Merge::Experts,
    ),
    (
        "experts.up_proj",
        &["ffn_up_exps.weight", "ffn_up_exps.bias"],
        Rule::Moe,
        Merge::Experts,
    ),
    (
        "experts.down_proj",
        &["ffn_down_exps.weight", "ffn_down_exps.bias"],
        Rule::Moe,
        Merge::Experts,
    ),
    (
        "shared.gate_proj",
        &["ffn_gate_shexp.weight", "ffn_gate_shexp.bias"],
        Rule::Moe,
        Merge::Shared,
    ),
    (
        "shared.up_proj",
        &["ffn_up_shexp.weight", "ffn_up_shexp.bias"],
        Rule::Moe,
        Merge::Shared,
    ),
    (
        "shared.down_proj",
        &["ffn_down_shexp.weight", "ffn_down_shexp.bias"],
        Rule::Moe,
        Merge::Shared,
    ),
    (
        "shared_expert_gate",
        &["ffn_gate_inp_shexp.weight"],
        Rule::Moe,
        Merge::Shared,
    ),
];

/// The blocks' norms by (norms per block, LayerNorm bias): Gemma 2/3's four are
/// `attn_norm`, `post_attention_norm`, `ffn_norm`, `post_ffw_norm`.
const NORMS: &[(u64, bool, &[&str])] = &[
    (1, false, &["attn_norm.weight"]),
    (1, true, &["attn_norm.weight", "attn_norm.bias"]),
    (2, false, &["attn_norm.weight", "ffn_norm.weight"]),
    (
        2,
        true,
        &[
            "attn_norm.weight",
            "attn_norm.bias",
            "ffn_norm.weight",
            "ffn_norm.bias",
        ],
    ),
    (
        4,
        false,
        &[
            "attn_norm.weight",
            "post_attention_norm.weight",
            "ffn_norm.weight",
            "post_ffw_norm.weight",
        ],
    ),
];

/// llama.cpp's names for one group of the architecture, the blocks they are in and
/// how many checkpoint tensors one GGUF tensor merges. `prev` is the last named
/// group: an MLP bias follows its projection (`Architecture::push_mlp`), whose
/// table entry lists the bias name second.
fn names_of(
    a: &Architecture,
    tg: &TensorGroup,
    prev: Option<(&'static [&'static str], Rule, Merge)>,
) -> Option<(&'static [&'static str], Rule, Merge)> {
    match tg.name {
        "final norm" => {
            let n: &'static [&'static str] = &["output_norm.weight", "output_norm.bias"];
            let k = usize::try_from(tg.count).ok()?;
            Some((n.get(..k)?, Rule::Output, Merge::One))
        }
        "layer norms" => NORMS
            .iter()
            .find(|x| x.0 == a.layer_norms && x.1 == a.layernorm_bias)
            .map(|x| (x.2, Rule::Every, Merge::One)),
        "mlp bias" => {
            let (n, rule, merge) = prev?;
            Some((n.get(1..2)?, rule, merge))
        }
        name => NAMES
            .iter()
            .find(|x| x.0 == name)
            // A projection's entry also names its bias (listed second).
            .map(|x| {
                let bias = x.1.get(1).is_some_and(|b| b.ends_with(".bias"));
                let names = if bias {
                    x.1.get(..1).unwrap_or(x.1)
                } else {
                    x.1
                };
                (names, x.2, x.3)
            }),
    }
}

/// Every tensor llama.cpp loads for `a` stored in `formats`, in the order the
/// architecture lists its groups, block by block within a group.
pub fn gguf_tensors(
    a: &Architecture,
    formats: &ModuleFormats,
) -> Result<Vec<GgufTensor>, EstimateError> {
    let n = a.layers;
    // The block map is known when every block has attention and an MLP (no mixer,
    // no block pattern); then layer i is MoE when i ≥ dense_layers and
    // (i + 1) % every == 0 (`Moe::moe_layers`). Otherwise groups are spread evenly.
    let plain = a.mixer.is_none()
        && a.attn_layers.is_none()
        && a.mlp_layers.is_none()
        && a.global_attn.is_none();
    let is_moe = |i: u64| {
        a.moe.is_some_and(|m| {
            i >= m.dense_layers
                && i.checked_add(1).and_then(|j| j.checked_rem(m.every.max(1))) == Some(0)
        })
    };
    let mut out = Vec::new();
    let mut prev = None;
    let groups = a.tensors()?;
    // Each tensor's format: a llama.cpp file type types them by role and layer.
    let runs = a.tensor_formats(&groups, formats)?;
    let mut embd = None;
    for (tg, runs) in groups.into_iter().zip(runs) {
        let one_in = |f: crate::format::StorageFormat| -> Result<u64, EstimateError> {
            if tg.cols == 1 {
                f.vector_bytes(tg.rows)
            } else {
                Ok(f.matrix_bytes(tg.rows, tg.cols)?.bytes)
            }
        };
        // Bytes of `n` tensors from the group's `from`-th, in the group's order.
        let bytes_of = |from: u64, n: u64| -> Result<u64, EstimateError> {
            let mut left = n;
            let mut skip = from;
            let mut total = 0u64;
            for &(f, k) in &runs {
                let here = k.saturating_sub(skip).min(left);
                skip = skip.saturating_sub(k);
                if here > 0 {
                    let b = one_in(f)?.checked_mul(here).ok_or(OVERFLOW)?;
                    total = total.checked_add(b).ok_or(OVERFLOW)?;
                    left = left.saturating_sub(here);
                }
            }
            Ok(total)
        };
        if tg.name == "embed_tokens" {
            embd = runs.first().map(|r| r.0);
        }
        if matches!(tg.class, ParamClass::Mtp | ParamClass::Tower) {
            out.push(GgufTensor {
                slot: Slot::Extra,
                suffix: tg.name,
                bytes: bytes_of(0, tg.count)?,
                named: false,
                duplicate: false,
                expert: false,
                class: tg.class,
            });
            continue;
        }
        let merge = |m: Merge| match (m, a.moe) {
            (Merge::Experts, Some(x)) => x.experts,
            (Merge::Shared, Some(x)) => x.shared_experts.max(1),
            _ => 1,
        };
        let found = names_of(a, &tg, prev).filter(|(names, _, m)| {
            let per = (names.len() as u64).saturating_mul(merge(*m));
            per > 0 && tg.count.is_multiple_of(per)
        });
        let (names, rule, m, named, expert): (&[&'static str], Rule, u64, bool, bool) = match found
        {
            Some((names, rule, m)) => {
                if tg.name != "mlp bias" {
                    // The projection's full entry, whose second name is its bias.
                    prev = NAMES
                        .iter()
                        .find(|x| x.0 == tg.name)
                        .map(|x| (x.1, x.2, x.3));
                }
                (names, rule, merge(m), true, m == Merge::Experts)
            }
            None => (std::slice::from_ref(&tg.name), Rule::Every, 1, false, false),
        };
        let per = (names.len() as u64).saturating_mul(m);
        let slots = tg.count.checked_div(per).unwrap_or(0);
        // The k-th slot's tensors, in the group's order.
        let mut k = 0u64;
        let mut failed = None;
        let mut push = |slot: Slot| {
            for (j, &suffix) in names.iter().enumerate() {
                let bytes = k
                    .checked_mul(per)
                    .and_then(|x| x.checked_add((j as u64).checked_mul(m)?))
                    .ok_or(OVERFLOW)
                    .and_then(|from| bytes_of(from, m))
                    .unwrap_or_else(|e| {
                        failed.get_or_insert(e);
                        0
                    });
                out.push(GgufTensor {
                    slot,
                    suffix,
                    bytes,
                    named,
                    duplicate: false,
                    expert,
                    class: tg.class,
                });
            }
            k = k.saturating_add(1);
        };
        match rule {
            Rule::Input | Rule::Output => {
                let slot = if rule == Rule::Input {
                    Slot::Input
                } else {
                    Slot::Output
                };
                for _ in 0..slots {
                    push(slot);
                }
            }
            Rule::Moe | Rule::Dense if plain => {
                let want = rule == Rule::Moe;
                let blocks = (0..n).filter(|&i| is_moe(i) == want);
                if blocks.clone().count() as u64 == slots {
                    blocks.for_each(|i| push(Slot::Block(i)));
                } else {
                    spread(slots, n, &mut push);
                }
            }
            _ => spread(slots, n, &mut push),
        }
        if let Some(e) = failed {
            return Err(e);
        }
    }
    if a.tied_embeddings {
        // The output's copy, in the type the file gives token_embd.
        let one = embd
            .unwrap_or(formats.vocab)
            .matrix_bytes(a.vocab, a.hidden)?
            .bytes;
        out.push(GgufTensor {
            slot: Slot::Output,
            suffix: "token_embd.weight",
            bytes: one,
            named: true,
            duplicate: true,
            expert: false,
            class: ParamClass::Embeddings,
        });
    }
    Ok(out)
}

/// A model file's header gives bytes per class, not per tensor: each tensor takes its
/// class's bytes in proportion to its size in the estimate's format, and what the
/// rounding leaves (and what the header classes as "other") goes with the output
/// layer, so the list still sums to the file's weights (`total`).
pub fn scale_to(
    list: &mut Vec<GgufTensor>,
    file: &crate::summary::TensorSummary,
    total: u64,
) -> Result<(), EstimateError> {
    // Each class's bytes in the list (a handful of classes: no map).
    let mut sums: Vec<(ParamClass, u64)> = Vec::new();
    for t in list.iter().filter(|t| !t.duplicate) {
        match sums.iter_mut().find(|s| s.0 == t.class) {
            Some(s) => s.1 = s.1.checked_add(t.bytes).ok_or(OVERFLOW)?,
            None => sums.push((t.class, t.bytes)),
        }
    }
    for t in list.iter_mut() {
        let from = sums.iter().find(|s| s.0 == t.class).map_or(0, |s| s.1);
        let to = file.class_bytes(t.class.key());
        let b = u128::from(t.bytes)
            .saturating_mul(u128::from(to))
            .checked_div(u128::from(from))
            .unwrap_or(0);
        t.bytes = u64::try_from(b).map_err(|_| OVERFLOW)?;
    }
    let placed = list
        .iter()
        .filter(|t| !t.duplicate)
        .try_fold(0u64, |a, t| a.checked_add(t.bytes))
        .ok_or(OVERFLOW)?;
    list.push(GgufTensor {
        slot: Slot::Output,
        suffix: "(rest of the file)",
        bytes: total.saturating_sub(placed),
        named: false,
        duplicate: false,
        expert: false,
        class: ParamClass::Tower,
    });
    Ok(())
}

const OVERFLOW: EstimateError = EstimateError::Overflow {
    what: "GGUF tensor bytes",
};

/// `slots` spread evenly over `n` blocks: block i gets ⌊(i+1)·s/n⌋ − ⌊i·s/n⌋ (one
/// each when s = n).
fn spread(slots: u64, n: u64, push: &mut impl FnMut(Slot)) {
    let at = |i: u64| {
        u128::from(i)
            .saturating_mul(u128::from(slots))
            .checked_div(u128::from(n))
            .unwrap_or(0)
    };
    for i in 0..n {
        let k = at(i.saturating_add(1)).saturating_sub(at(i));
        for _ in 0..k {
            push(Slot::Block(i));
        }
    }
}
