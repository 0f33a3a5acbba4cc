//! What lit-gpt's own GPT keeps for the backward of a LoRA or QLoRA step, derived from
//! its code at commit 8641822 (October 2023: `lit_gpt/model.py`, `lit_gpt/lora.py`,
//! `lit_gpt/rmsnorm.py`, run by `finetune/lora.py` under Lightning Fabric at commit
//! 71aed751 with bitsandbytes 0.41.1 and PyTorch 2.1). It is not transformers' decoder:
//! one fused `qkv` linear whose output stays alive, a LoRA branch over the fused
//! output, RMSNorm in the compute dtype, the attention output copied before its
//! projection. Checked against a meta-device trace of that code (see
//! `docs/fine-tuning.md`).
//!
//! Two block shapes of lit-gpt's configs are covered: Llama's (`RMSNorm`, `LLaMAMLP`,
//! sequential residual: `x = x + attn(norm_1(x)); x = x + mlp(norm_2(x))`) and
//! phi-1.5's (`LayerNorm`, `GptNeoxMLP`, one norm shared by the parallel attention and
//! MLP: `x = x + attn(n_1) + mlp(n_1)`), with multi-head or grouped-query attention.

// Checked arithmetic only: every dimension is user input (products saturate, and a
// saturated figure is caught by the caller).
#![deny(clippy::arithmetic_side_effects)]

use super::{Activations, Adapters, add, block, mul};
use crate::arch::Architecture;

/// Why an architecture is outside this derivation (`None`: covered).
fn not_derived(a: &Architecture, ad: &Adapters, value: u64) -> Option<&'static str> {
    let llama = a.gated_mlp && !a.layernorm_bias && a.layer_norms == 2;
    let phi = !a.gated_mlp && a.layernorm_bias && a.layer_norms == 1;
    if a.moe.is_some() || a.mla.is_some() || a.mixer.is_some() || a.tower_params > 0 {
        Some("lit-gpt's derivation covers dense decoders only")
    } else if !(llama || phi) || a.qk_norm || a.qk_norm_whole || a.attn_gate || a.attn_sinks {
        Some(
            "lit-gpt's derivation covers Llama's block (RMSNorm, LLaMAMLP) and phi-1.5's (one LayerNorm, parallel GptNeoxMLP)",
        )
    } else if a.kv_heads == 1 && a.heads > 1 {
        Some("lit-gpt's multi-query attention keeps one K/V head un-expanded: not in the derivation")
    } else if ad.value != value {
        Some("lit-gpt's adapters are in the model's dtype")
    } else {
        None
    }
}

/// lit-gpt 8641822's LoRA `GPT` with a frozen base: `(kept at the forward's end, with
/// one block recomputed under checkpointing, formula, why not derived)`. Per token
/// (`v` bytes per value, every tensor in the caching allocator's 512 B blocks), a
/// block keeps what each operator's backward needs (autograd saves an operand only for
/// the gradient that needs it):
/// - `RMSNorm.forward` runs in the compute dtype (`x * x`, `x * rsqrt(...)`, then the
///   frozen weight): its input `x` and the `rsqrt` per token; `nn.LayerNorm` its input
///   and an fp32 mean and rstd per token. The inputs are the residual stream: the
///   block's input, and with Llama's sequential residual `x + h` too;
/// - `LoRAQKVLinear.forward`: `lora_A` over `lora_dropout(x)` — the dropped-out input
///   and its boolean mask (or `x` itself without dropout), once for q, k and v —, its
///   output (r per enabled projection) kept by `conv1d`, and `zero_pad`'s
///   `index_copy` keeps its source, the enabled projections' LoRA output
///   (`derivatives.yaml`: `grad.index_select(dim, index).expand_as(source)`), unless
///   q, k and v are all enabled;
/// - `CausalSelfAttention.forward`: q and k after RoPE (`torch.cat`, every query head),
///   and v: with as many K/V groups as heads `v` is a view of the fused `qkv` output,
///   which SDPA's saved `value` keeps whole, (a + 2k)·d; with grouped queries K/V are
///   expanded and reshaped to every head (copies), a·d; SDPA's flash kernel keeps its
///   output and an fp32 log-sum-exp per head;
/// - the flash output comes back in (B, heads, T, d) order (PyTorch 2.1,
///   `_scaled_dot_product_flash_attention`: `output.transpose(1, 2)` of an output laid
///   out like the transposed query), so `y.transpose(1, 2).reshape(B, T, C)` copies it:
///   the copy is kept only by what reads it for a gradient (the 4-bit projection,
///   an adapter on it);
/// - `LLaMAMLP`: `fc_1`'s output (SiLU's input), SiLU's output and `fc_2`'s output;
///   `GptNeoxMLP`: `fc`'s output (GELU's input);
/// - `LoRALinear` (proj, MLP, lm_head): its dropped-out input and mask (or the input)
///   and `lora_A`'s output;
/// - a 4-bit linear of bitsandbytes 0.41.1 keeps its input A whenever A needs a
///   gradient (`MatMul4Bit.forward`: `ctx.tensors = (A, B)`): `norm_1`'s output, the
///   attention output's copy, `norm_2`'s output, the MLP's product (GELU's output),
///   and once `ln_f`'s output (Lightning's `BitsandbytesPrecision` replaces every
///   `nn.Linear`, the output projection's too);
/// - once: `ln_f` (its input and statistics), RoPE's cos and sin, the input ids and
///   targets (int64).
///
/// The first block's input, the frozen embedding's output, needs no gradient: nothing
/// before its first adapter is recorded. With checkpointing each block's input is kept
/// and one block recomputed.
pub(crate) fn activations(
    a: &Architecture,
    seq: u64,
    batch: u64,
    value: u64,
    checkpointing: bool,
    ad: &Adapters,
) -> Activations {
    let tokens = seq.saturating_mul(batch);
    let (h, i, d) = (a.hidden, a.intermediate, a.head_dim);
    let c = a.heads.saturating_mul(d);
    let kvw = a.kv_heads.saturating_mul(d);
    let llama = a.gated_mlp;
    let mha = a.kv_heads == a.heads;
    let t = ad.targets;
    let base = ad.base_keeps_inputs;
    let hidden = block(&[tokens, value, h]);
    let stats = if llama {
        block(&[tokens, value])
    } else {
        mul(&[2, block(&[tokens, 4])])
    };
    // A norm whose input needs a gradient keeps that input (the residual stream).
    let norm = |grad: bool| if grad { add(&[hidden, stats]) } else { 0 };
    // What an adapter's lora_A keeps of an input of `width` values: the dropped-out
    // copy and, when the input needs a gradient, the dropout's mask; else the input
    // itself (`shared`, counted once per tensor by the caller).
    let lora_input = |width: u64, input_grad: bool| {
        if ad.dropout {
            add(&[
                block(&[tokens, value, width]),
                if input_grad {
                    block(&[tokens, width])
                } else {
                    0
                },
            ])
        } else {
            0
        }
    };
    let after_a = |n: u64| block(&[tokens, value, ad.rank, n]);
    let layer = |input_grad: bool| {
        let qkv_lora = t.q || t.k || t.v;
        let enabled = [(t.q, c), (t.k, kvw), (t.v, kvw)];
        let n_enabled = enabled.iter().filter(|(on, _)| *on).count() as u64;
        let enabled_width = add(&enabled.map(|(on, w)| if on { w } else { 0 }));
        // The fused qkv output needs a gradient.
        let qkv_grad = input_grad || qkv_lora;
        // norm_1's output is kept whole when lora_A reads it without dropout or a
        // 4-bit qkv keeps it.
        let n1_kept = (qkv_lora && !ad.dropout) || (base && input_grad);
        let attention = if qkv_grad {
            add(&[
                mul(&[2, block(&[tokens, value, c])]),
                if mha {
                    block(&[tokens, value, add(&[c, kvw, kvw])])
                } else {
                    block(&[tokens, value, c])
                },
                block(&[tokens, value, c]),
                block(&[batch, a.heads, seq, 4]),
            ])
        } else {
            0
        };
        let qkv_adapter = if qkv_lora {
            add(&[
                lora_input(h, input_grad),
                after_a(n_enabled),
                if n_enabled < 3 {
                    block(&[tokens, value, enabled_width])
                } else {
                    0
                },
            ])
        } else {
            0
        };
        // The attention output's copy, read by proj.
        let y_kept = qkv_grad && ((t.o && !ad.dropout) || base);
        let proj_adapter = if t.o {
            add(&[lora_input(c, qkv_grad), after_a(1)])
        } else {
            0
        };
        // The MLP's input: norm_2's output (sequential) or norm_1's (parallel).
        let mlp_in_grad = if llama {
            qkv_grad || t.o
        } else {
            input_grad
        };
        let up_lora = [t.gate && llama, t.up];
        let mlp_in_kept = up_lora.iter().any(|on| *on && !ad.dropout) || (base && mlp_in_grad);
        let mlp_adapters = add(&up_lora.map(|on| {
            if on {
                add(&[lora_input(h, mlp_in_grad), after_a(1)])
            } else {
                0
            }
        }));
        let fc_grad = mlp_in_grad || t.gate || t.up;
        let inter = block(&[tokens, value, i]);
        let mlp = if llama {
            let kept = if mlp_in_grad {
                3
            } else {
                add(&[u64::from(t.gate), u64::from(t.gate), u64::from(t.up)])
            };
            mul(&[kept, inter])
        } else if fc_grad {
            inter
        } else {
            0
        };
        let product_kept = fc_grad && ((t.down && !ad.dropout) || base);
        let down_adapter = if t.down {
            add(&[lora_input(i, fc_grad), after_a(1)])
        } else {
            0
        };
        add(&[
            norm(input_grad),
            if n1_kept { hidden } else { 0 },
            qkv_adapter,
            attention,
            if y_kept {
                block(&[tokens, value, c])
            } else {
                0
            },
            proj_adapter,
            if llama { norm(mlp_in_grad) } else { 0 },
            if llama && mlp_in_kept { hidden } else { 0 },
            if !llama && mlp_in_kept && !n1_kept {
                hidden
            } else {
                0
            },
            mlp_adapters,
            mlp,
            if product_kept { inter } else { 0 },
            down_adapter,
        ])
    };
    let once = add(&[
        norm(true),
        if base || (t.lm_head && !ad.dropout) {
            hidden
        } else {
            0
        },
        if t.lm_head {
            add(&[lora_input(h, true), after_a(1)])
        } else {
            0
        },
        mul(&[2, block(&[seq, value, d])]),
        mul(&[2, block(&[tokens, 8])]),
    ]);
    let layers = a.layers;
    let (kept, bytes, shape) = if checkpointing {
        let kept = add(&[mul(&[layers, hidden]), once]);
        (
            kept,
            add(&[kept, layer(true)]),
            "L × v·h (checkpointed block inputs) + one block recomputed",
        )
    } else {
        let kept = add(&[
            layer(false),
            mul(&[layers.saturating_sub(1), layer(true)]),
            once,
        ]);
        (
            kept,
            kept,
            "L × per-block (the first block keeps nothing before its first adapter)",
        )
    };
    let formula = format!(
        "{shape}; lit-gpt 8641822's LoRA GPT with a frozen base, per block and token: the residual stream kept by its {} (v·h each) and their statistics; lora_A over the {} fused qkv input ({}), its output and zero_pad's index_copy source v·(enabled q/k/v widths); q and k after RoPE 2·v·a·d, {}, SDPA's output v·a·d and fp32 log-sum-exp; {}{}; once: ln_f, RoPE cos/sin, input ids and targets (every tensor in 512 B blocks)",
        if llama {
            "two RMSNorms (compute dtype)"
        } else {
            "shared LayerNorm"
        },
        if ad.dropout { "dropped-out" } else { "un-dropped" },
        if ad.dropout {
            "v·h and a 1 B mask"
        } else {
            "the norm's output"
        },
        if mha {
            "v as a view of the whole fused qkv output v·(a + 2k)·d"
        } else {
            "v expanded to every head v·a·d"
        },
        if llama {
            "LLaMAMLP's fc_1, SiLU and fc_2 outputs 3·v·i"
        } else {
            "GptNeoxMLP's fc output v·i"
        },
        if base {
            "; each 4-bit linear's input (bitsandbytes 0.41.1 MatMul4Bit keeps A): norm outputs v·h, the attention output's copy v·a·d, the MLP product v·i, ln_f's output once"
        } else {
            ""
        }
    );
    Activations {
        bytes,
        kept,
        formula,
        assumed_because: not_derived(a, ad, value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::training::{LoraTargets, ModulesToSave};

    fn arch(pairs: &[(&str, &str)]) -> Architecture {
        let (input, errors) = crate::params::from_pairs(pairs.iter().copied());
        assert!(errors.is_empty(), "{errors:?}");
        input.arch.unwrap()
    }

    /// lit-gpt 8641822's own `lit_gpt/model.py` and `lit_gpt/lora.py` run on PyTorch's
    /// meta device (torch 2.11; SDPA as the flash kernel, dropout as CUDA's
    /// `native_dropout` with a boolean mask, the 4-bit linear as bitsandbytes 0.41.1's
    /// `MatMul4Bit` keeps its input): the bytes the forward left alive beside the
    /// parameters, less the loss's fp32 chunks, for the resource tables' rows (LoRA r 8
    /// on q and v, dropout 0.05, bf16, one sequence of the longest Alpaca sample). The
    /// derivation adds the input ids and targets and RoPE's cos and sin (module buffers
    /// in the trace); the rest agrees to the byte.
    #[test]
    fn the_derivation_matches_lit_gpts_own_code_traced() {
        let llama2_7b = arch(&[
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "32"),
            ("head-dim", "128"),
            ("intermediate", "11008"),
            ("vocab", "32000"),
        ]);
        let phi15 = arch(&[
            ("layers", "24"),
            ("hidden", "2048"),
            ("heads", "32"),
            ("kv-heads", "32"),
            ("head-dim", "64"),
            ("intermediate", "8192"),
            ("vocab", "51200"),
            ("gated-mlp", "false"),
            ("layernorm-bias", "true"),
            ("layer-norms", "1"),
        ]);
        let mut ad = Adapters {
            targets: LoraTargets::parse("lora-targets", "q,v").unwrap(),
            rank: 8,
            value: 2,
            dropout: true,
            base_keeps_inputs: false,
            modules: ModulesToSave::default(),
        };
        let extra = |seq: u64, d: u64| 2 * (seq * 8).div_ceil(512) * 512 + 2 * (seq * 2 * d).div_ceil(512) * 512;
        let cases: [(&Architecture, u64, u64, bool, u64); 3] = [
            (&llama2_7b, 1304, 128, false, 6_688_702_464),
            (&llama2_7b, 1304, 128, true, 8_632_893_440),
            (&phi15, 1044, 64, false, 1_473_122_304),
        ];
        for (a, seq, d, base, traced) in cases {
            ad.base_keeps_inputs = base;
            let x = activations(a, seq, 1, 2, false, &ad);
            assert_eq!(x.assumed_because, None);
            assert_eq!(x.bytes - extra(seq, d), traced);
        }
    }
}
