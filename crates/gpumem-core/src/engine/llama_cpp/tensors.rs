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
//! each with its `.weight` or `.bias` suffix.
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
}

impl GgufTensor {
    /// The name as llama.cpp matches it (`blk.12.ffn_gate_exps.weight`).
    pub fn name(&self) -> String {
        match self.slot {
            Slot::Block(i) => format!("blk.{i}.{}", self.suffix),
            _ => self.suffix.to_string(),
        }
    }

    /// Whether `--n-cpu-moe` / `--cpu-moe` name it: a routed expert's projection,
    /// `\.ffn_(up|down|gate|gate_up)_(ch|)exps` (`common/common.h`,
    /// `LLM_FFN_EXPS_REGEX`), matched here without a regular expression.
    pub fn is_routed_expert(&self) -> bool {
        self.named
            && ["ffn_up_", "ffn_down_", "ffn_gate_", "ffn_gate_up_"]
                .iter()
                .filter_map(|p| self.suffix.strip_prefix(p))
                .any(|rest| rest.starts_with("exps") || rest.starts_with("chexps"))
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

/// llama.cpp's names for one group of the architecture, the blocks they are in and
/// how many checkpoint tensors one GGUF tensor merges (the routed experts).
fn names_of(
    a: &Architecture,
    tg: &TensorGroup,
    prev: &'static [&'static str],
) -> Option<(&'static [&'static str], Rule, u64)> {
    let experts = a.moe.map_or(1, |m| m.experts);
    let shared = a.moe.map_or(1, |m| m.shared_experts.max(1));
    let one = |n: &'static [&'static str], r: Rule| Some((n, r, 1));
    match tg.name {
        "embed_tokens" => one(&["token_embd.weight"], Rule::Input),
        "position embeddings" => one(&["position_embd.weight"], Rule::Input),
        "final norm" if tg.count == 1 => one(&["output_norm.weight"], Rule::Output),
        "final norm" => one(&["output_norm.weight", "output_norm.bias"], Rule::Output),
        "lm_head" => one(&["output.weight"], Rule::Output),
        "q_proj" => one(&["attn_q.weight"], Rule::Every),
        "k_proj" => one(&["attn_k.weight"], Rule::Every),
        "v_proj" => one(&["attn_v.weight"], Rule::Every),
        "o_proj" => one(&["attn_output.weight"], Rule::Every),
        "q_proj.bias" => one(&["attn_q.bias"], Rule::Every),
        "k_proj.bias" => one(&["attn_k.bias"], Rule::Every),
        "v_proj.bias" => one(&["attn_v.bias"], Rule::Every),
        "o_proj.bias" => one(&["attn_output.bias"], Rule::Every),
        "sinks" => one(&["attn_sinks.weight"], Rule::Every),
        "q_a_proj" => one(&["attn_q_a.weight"], Rule::Every),
        "q_a_layernorm" => one(&["attn_q_a_norm.weight"], Rule::Every),
        "q_b_proj" => one(&["attn_q_b.weight"], Rule::Every),
        "kv_a_proj_with_mqa" => one(&["attn_kv_a_mqa.weight"], Rule::Every),
        "kv_a_layernorm" => one(&["attn_kv_a_norm.weight"], Rule::Every),
        "kv_b_proj" => one(&["attn_kv_b.weight"], Rule::Every),
        "q_norm/k_norm" => one(&["attn_q_norm.weight", "attn_k_norm.weight"], Rule::Every),
        "q_norm" => one(&["attn_q_norm.weight"], Rule::Every),
        "k_norm" => one(&["attn_k_norm.weight"], Rule::Every),
        "layer norms" => match (a.layer_norms, a.layernorm_bias) {
            (1, false) => one(&["attn_norm.weight"], Rule::Every),
            (1, true) => one(&["attn_norm.weight", "attn_norm.bias"], Rule::Every),
            (2, false) => one(&["attn_norm.weight", "ffn_norm.weight"], Rule::Every),
            (2, true) => one(
                &[
                    "attn_norm.weight",
                    "attn_norm.bias",
                    "ffn_norm.weight",
                    "ffn_norm.bias",
                ],
                Rule::Every,
            ),
            (4, false) => one(
                &[
                    "attn_norm.weight",
                    "post_attention_norm.weight",
                    "ffn_norm.weight",
                    "post_ffw_norm.weight",
                ],
                Rule::Every,
            ),
            _ => None,
        },
        "gate_proj" => one(&["ffn_gate.weight"], Rule::Dense),
        "up_proj" => one(&["ffn_up.weight"], Rule::Dense),
        "down_proj" => one(&["ffn_down.weight"], Rule::Dense),
        "router" => one(&["ffn_gate_inp.weight"], Rule::Moe),
        "router.bias" => one(&["ffn_gate_inp.bias"], Rule::Moe),
        "router.e_score_correction_bias" => one(&["exp_probs_b.bias"], Rule::Moe),
        "experts.gate_proj" => Some((&["ffn_gate_exps.weight"], Rule::Moe, experts)),
        "experts.up_proj" => Some((&["ffn_up_exps.weight"], Rule::Moe, experts)),
        "experts.down_proj" => Some((&["ffn_down_exps.weight"], Rule::Moe, experts)),
        "shared.gate_proj" => Some((&["ffn_gate_shexp.weight"], Rule::Moe, shared)),
        "shared.up_proj" => Some((&["ffn_up_shexp.weight"], Rule::Moe, shared)),
        "shared.down_proj" => Some((&["ffn_down_shexp.weight"], Rule::Moe, shared)),
        "shared_expert_gate" => Some((&["ffn_gate_inp_shexp.weight"], Rule::Moe, shared)),
        // A bias follows its projection's group (`Architecture::push_mlp`).
        "mlp bias" => {
            let bias: &'static [&'static str] = match prev.first().copied() {
                Some("ffn_gate.weight") => &["ffn_gate.bias"],
                Some("ffn_up.weight") => &["ffn_up.bias"],
                Some("ffn_down.weight") => &["ffn_down.bias"],
                Some("ffn_gate_exps.weight") => &["ffn_gate_exps.bias"],
                Some("ffn_up_exps.weight") => &["ffn_up_exps.bias"],
                Some("ffn_down_exps.weight") => &["ffn_down_exps.bias"],
                Some("ffn_gate_shexp.weight") => &["ffn_gate_shexp.bias"],
                Some("ffn_up_shexp.weight") => &["ffn_up_shexp.bias"],
                Some("ffn_down_shexp.weight") => &["ffn_down_shexp.bias"],
                _ => return None,
            };
            Some(match bias.first().copied().unwrap_or("") {
                b if b.ends_with("_exps.bias") => (bias, Rule::Moe, experts),
                b if b.ends_with("_shexp.bias") => (bias, Rule::Moe, shared),
                _ => (bias, Rule::Dense, 1),
            })
        }
        _ => None,
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
    let mut prev: &'static [&'static str] = &[];
    for tg in a.tensors()? {
        let fmt = formats.for_role(tg.role);
        let one = if tg.cols == 1 {
            fmt.vector_bytes(tg.rows)?
        } else {
            fmt.matrix_bytes(tg.rows, tg.cols)?.bytes
        };
        if matches!(tg.class, ParamClass::Mtp | ParamClass::Tower) {
            out.push(GgufTensor {
                slot: Slot::Extra,
                suffix: tg.name,
                bytes: one.checked_mul(tg.count).ok_or(OVERFLOW)?,
                named: false,
                duplicate: false,
            });
            continue;
        }
        let found = names_of(a, &tg, prev).filter(|(names, _, m)| {
            let per = (names.len() as u64).saturating_mul(*m);
            per > 0 && tg.count.is_multiple_of(per)
        });
        let (names, rule, m, named): (&[&'static str], Rule, u64, bool) = match found {
            Some((names, rule, m)) => {
                prev = names;
                (names, rule, m, true)
            }
            None => (std::slice::from_ref(&tg.name), Rule::Every, 1, false),
        };
        let per = (names.len() as u64).saturating_mul(m);
        let slots = tg.count.checked_div(per).unwrap_or(0);
        let bytes = one.checked_mul(m).ok_or(OVERFLOW)?;
        let mut push = |slot: Slot| {
            for &suffix in names {
                out.push(GgufTensor {
                    slot,
                    suffix,
                    bytes,
                    named,
                    duplicate: false,
                });
            }
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
                let blocks: Vec<u64> = (0..n).filter(|&i| is_moe(i) == want).collect();
                if blocks.len() as u64 == slots {
                    blocks.into_iter().for_each(|i| push(Slot::Block(i)));
                } else {
                    spread(slots, n, &mut push);
                }
            }
            _ => spread(slots, n, &mut push),
        }
    }
    if a.tied_embeddings {
        let one = formats.vocab.matrix_bytes(a.vocab, a.hidden)?.bytes;
        out.push(GgufTensor {
            slot: Slot::Output,
            suffix: "token_embd.weight",
            bytes: one,
            named: true,
            duplicate: true,
        });
    }
    Ok(out)
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
