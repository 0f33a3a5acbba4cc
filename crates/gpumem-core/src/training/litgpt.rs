//! What lit-gpt's own GPT keeps for the backward of a LoRA or QLoRA step, derived from
//! its code at commit 8641822 (October 2023: `lit_gpt/model.py`, `lit_gpt/lora.py`,
//! `lit_gpt/rmsnorm.py`, run by `finetune/lora.py` under Lightning Fabric at commit
//! 71aed751 with bitsandbytes 0.41.1 and PyTorch 2.1). It is not transformers' decoder:
//! one fused `qkv` linear whose output stays alive, a LoRA branch over the fused
//! output, RMSNorm in the compute dtype, the attention output copied before its
//! projection. Derived by reading that code (each rule below names the operator whose
//! autograd node keeps the tensor) and checked against a CPU trace of it with the GPU's
//! dropout, flash-attention layout and 4-bit linear put back
//! (`tests/calibration/training/trace_litgpt_8641822.py`; see `docs/fine-tuning.md`).
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
        Some(
            "lit-gpt's multi-query attention keeps one K/V head un-expanded: not in the derivation",
        )
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
///   (`derivatives.yaml`: `grad.index_select(dim, index).expand_as(source)`), and its
///   int64 index (one per enabled output feature, made by `torch.tensor(lora_ind)` at
///   each forward), unless q, k and v are all enabled;
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
/// - once: `ln_f` (its input and statistics), RoPE's cos and sin in fp32 (`train`
///   sets `model.max_seq_length` to the longest sample outside `fabric.init_module`,
///   so `GPT.rope_cache` rebuilds them with `torch.get_default_dtype()`; full head
///   width counted, phi-1.5 rotates half of it), the input ids and targets (int64).
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
                    add(&[
                        block(&[tokens, value, enabled_width]),
                        block(&[enabled_width, 8]),
                    ])
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
        let mlp_in_grad = if llama { qkv_grad || t.o } else { input_grad };
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
        mul(&[2, block(&[seq, 4, d])]),
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
        "{shape}; lit-gpt 8641822's LoRA GPT with a frozen base, per block and token: the residual stream kept by its {} (v·h each) and their statistics; lora_A over the {} fused qkv input ({}), its output and zero_pad's index_copy source v·(enabled q/k/v widths) and its int64 index; q and k after RoPE 2·v·a·d, {}, SDPA's output v·a·d and fp32 log-sum-exp; {}{}; once: ln_f, RoPE's fp32 cos/sin, input ids and targets (every tensor in 512 B blocks)",
        if llama {
            "two RMSNorms (compute dtype)"
        } else {
            "shared LayerNorm"
        },
        if ad.dropout {
            "dropped-out"
        } else {
            "un-dropped"
        },
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

// The tests' figures are small constants: plain arithmetic.
#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::training::{LoraTargets, ModulesToSave};

    fn arch(pairs: &[(&str, &str)]) -> Architecture {
        let (input, errors) = crate::params::from_pairs(pairs.iter().copied());
        assert!(errors.is_empty(), "{errors:?}");
        input.arch.unwrap()
    }

    fn llama2_7b() -> Architecture {
        arch(&[
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "32"),
            ("head-dim", "128"),
            ("intermediate", "11008"),
            ("vocab", "32000"),
        ])
    }

    fn qv_dropout(base_keeps_inputs: bool) -> Adapters {
        Adapters {
            targets: LoraTargets::parse("lora-targets", "q,v").unwrap(),
            rank: 8,
            value: 2,
            dropout: true,
            base_keeps_inputs,
            base_4bit: false,
            fp32_hidden: false,
            autocast: false,
            weight_copies: 0,
            modules: ModulesToSave::default(),
        }
    }

    /// A tensor of `n` bytes in the caching allocator's 512 B blocks.
    fn blk(n: u64) -> u64 {
        n.div_ceil(512) * 512
    }

    /// The resource tables' Llama-2-7B LoRA row (r 8 on q and v, dropout 0.05, bf16,
    /// one sequence of 1304 tokens), counted by hand tensor by tensor from lit-gpt
    /// 8641822's forward, independently of the function's own grouping.
    #[test]
    fn llama2_7b_lora_qv_is_the_hand_count_of_lit_gpts_forward() {
        let (t, h, i, a, d, r) = (1304u64, 4096u64, 11008u64, 32u64, 128u64, 8u64);
        let norm = blk(t * 2 * h) + blk(t * 2); // RMSNorm: its input and rsqrt per token
        let dropped = blk(t * 2 * h); // lora_dropout(x), kept by F.linear(·, lora_A)
        let mask = blk(t * h); // native_dropout's boolean mask (input needs a gradient)
        let after_a = blk(t * 2 * r * 2); // lora_A's output for q and v, kept by conv1d
        let source = blk(t * 2 * 2 * h) + blk(2 * h * 8); // index_copy's source and index
        let q_k = 2 * blk(t * 2 * h); // q and k after RoPE's torch.cat
        let qkv = blk(t * 2 * 3 * h); // v is a view of the fused qkv output
        let sdpa = blk(t * 2 * h) + blk(a * t * 4); // flash output + fp32 log-sum-exp
        let mlp = 3 * blk(t * 2 * i); // fc_1 out (SiLU in), SiLU out, fc_2 out
        let block = norm + dropped + mask + after_a + source + q_k + qkv + sdpa + norm + mlp;
        // Block 0's input is the frozen embedding's output: no norm_1 kept, no mask.
        let first = dropped + after_a + source + q_k + qkv + sdpa + norm + mlp;
        let once = norm + 2 * blk(t * 4 * d) + 2 * blk(t * 8); // ln_f, cos/sin, ids/targets
        assert_eq!(block, 209_254_400);
        let expected = first + 31 * block + once;
        let x = activations(&llama2_7b(), t, 1, 2, false, &qv_dropout(false));
        assert_eq!(x.assumed_because, None);
        assert_eq!(x.bytes, expected);
        assert_eq!(x.kept, expected);
        assert_eq!(expected, 6_692_156_416);
    }

    /// QLoRA adds what bitsandbytes 0.41.1's `MatMul4Bit` keeps (`ctx.tensors = (A, B)`
    /// when A needs a gradient): norm_1's output (not in block 0, whose input needs
    /// none), the attention output's copy, norm_2's output and the MLP's product in
    /// every block, and ln_f's output once for the 4-bit lm_head.
    #[test]
    fn a_4bit_base_adds_each_linears_input() {
        let (t, h, i) = (1304u64, 4096u64, 11008u64);
        let a = llama2_7b();
        let lora = activations(&a, t, 1, 2, false, &qv_dropout(false));
        let qlora = activations(&a, t, 1, 2, false, &qv_dropout(true));
        let hidden = blk(t * 2 * h);
        let product = blk(t * 2 * i);
        let first = 2 * hidden + product; // y's copy, norm_2's output, the product
        let block = 3 * hidden + product;
        assert_eq!(qlora.bytes - lora.bytes, first + 31 * block + hidden);
    }

    /// Grouped-query attention expands K and V to every head (copies), so SDPA keeps v
    /// as a·d per token, not the whole fused output; a block that keeps more than one
    /// sequence scales with the batch.
    #[test]
    fn grouped_queries_keep_expanded_copies_and_batches_scale() {
        let pairs = |kv: &'static str| {
            arch(&[
                ("layers", "2"),
                ("hidden", "1024"),
                ("heads", "16"),
                ("kv-heads", kv),
                ("head-dim", "64"),
                ("intermediate", "2816"),
                ("vocab", "32000"),
            ])
        };
        let ad = qv_dropout(false);
        let t = 512u64;
        let mha = activations(&pairs("16"), t, 1, 2, false, &ad);
        let gqa = activations(&pairs("4"), t, 1, 2, false, &ad);
        // Per block: v 3·1024 → 1024 wide (−2048), index_copy's source and index
        // q + v 1024 + 256 instead of 2048 (−768).
        let per_block = blk(t * 2 * 3 * 1024) - blk(t * 2 * 1024) + blk(t * 2 * 2048)
            - blk(t * 2 * 1280)
            + blk(2048 * 8)
            - blk(1280 * 8);
        assert_eq!(mha.bytes - gqa.bytes, 2 * per_block);
        let two = activations(&pairs("16"), t, 2, 2, false, &ad);
        assert!(two.bytes > mha.bytes && two.bytes < 2 * mha.bytes);
    }

    #[test]
    fn outside_the_derivation_is_said() {
        let mut ad = qv_dropout(false);
        ad.value = 4;
        let x = activations(&llama2_7b(), 128, 1, 2, false, &ad);
        assert!(x.assumed_because.is_some());
        let mqa = arch(&[
            ("layers", "2"),
            ("hidden", "1024"),
            ("heads", "16"),
            ("kv-heads", "1"),
            ("head-dim", "64"),
            ("intermediate", "2816"),
            ("vocab", "32000"),
        ]);
        let x = activations(&mqa, 128, 1, 2, false, &qv_dropout(false));
        assert!(x.assumed_because.is_some());
    }

    /// LitGPT's loss under Fabric for the 7B QLoRA row: 1304 tokens in ten 128-token
    /// chunks and one of 24, cast to fp32 by `convert_output`. At the log-softmax's
    /// backward: every fp32 chunk and its fp32 log-softmax, one chunk's two fp32
    /// gradients. At the 4-bit lm_head's backward: the fp32 chunks, every chunk's bf16
    /// gradient and the dequantised 32000 × 4096 bf16 weight — the higher here.
    #[test]
    fn fabrics_fp32_chunks_and_the_4bit_heads_backward() {
        use crate::training::{Loss, loss_peak};
        let (t, v) = (1304u64, 32000u64);
        let fp32 = 10 * blk(128 * v * 4) + blk(24 * v * 4);
        let bf16 = 10 * blk(128 * v * 2) + blk(24 * v * 2);
        let at_loss = 2 * fp32 + 2 * blk(128 * v * 4);
        let head = v * 4096 * 2;
        let at_head = fp32 + bf16 + head;
        let (bytes, formula) =
            loss_peak(Loss::ChunkedFabric(128), t, 1, v, 2, head, false).unwrap();
        assert!(at_head > at_loss);
        assert_eq!(bytes, at_head);
        assert!(formula.contains("dequantised"), "{formula}");
        // A 16-bit head: the loss's side is the higher.
        let (bytes, _) = loss_peak(Loss::ChunkedFabric(128), t, 1, v, 2, 0, false).unwrap();
        assert_eq!(bytes, at_loss);
        // Two sequences: each chunk holds 128 tokens of both.
        let (two, _) = loss_peak(Loss::ChunkedFabric(128), t, 2, v, 2, 0, false).unwrap();
        assert_eq!(
            two,
            2 * (10 * blk(256 * v * 4) + blk(48 * v * 4)) + 2 * blk(256 * v * 4)
        );
    }

    /// The resource tables' QLoRA row through the whole estimate: PagedAdamW's states
    /// of LoRA's small tensors (each under 1e5 values) are on the device, in the
    /// allocator; a rank whose adapters reach 1e5 values has them paged. The output
    /// projection is 4-bit (Lightning replaces every `nn.Linear`).
    #[test]
    fn the_qlora_row_through_the_estimate() {
        use crate::estimate::{LineKey, estimate};
        let run = |rank: &'static str| {
            let (input, errors) = crate::params::from_pairs([
                ("layers", "32"),
                ("hidden", "4096"),
                ("heads", "32"),
                ("kv-heads", "32"),
                ("head-dim", "128"),
                ("intermediate", "11008"),
                ("vocab", "32000"),
                ("tied-embeddings", "false"),
                ("framework", "litgpt@2023"),
                ("train", "qlora"),
                ("format", "nf4"),
                ("lora-rank", rank),
                ("lora-targets", "q,v"),
                ("sequences", "1"),
                ("context", "1304"),
            ]);
            assert!(errors.is_empty(), "{errors:?}");
            estimate(&input).unwrap()
        };
        let line = |e: &crate::estimate::Estimate, k: LineKey| {
            e.lines.iter().find(|l| l.key == k).map(|l| l.bytes)
        };
        // r 8: lora_A 16 × 4096, lora_B 8192 × 8 (65,536 values each) in 32 blocks.
        let e = run("8");
        let trainable = 32 * 2 * 65_536u64;
        assert_eq!(
            line(&e, LineKey::TrainingOptimizer),
            Some(2 * 4 * trainable)
        );
        assert_eq!(line(&e, LineKey::HostPaged), None);
        // nf4 lm_head: 4 bits per value and one fp32 absmax per 64 values.
        let head = line(&e, LineKey::WeightsLmHead).unwrap();
        assert!(head >= 32_000 * 4096 / 2, "{head}");
        assert!(
            head < 32_000 * 4096 / 2 + 32_000 * 4096 / 64 * 4 + 4096,
            "{head}"
        );
        // r 16: lora_A 32 × 4096 = 131,072 values, paged; lora_B 8192 × 16 too.
        let e = run("16");
        assert_eq!(line(&e, LineKey::TrainingOptimizer), None);
        assert_eq!(line(&e, LineKey::HostPaged), Some(2 * 4 * 2 * trainable));
    }

    /// `tests/calibration/training/trace_litgpt_8641822.py` runs lit-gpt 8641822's own
    /// model code on the CPU (torch 2.11) with CUDA's dropout, PyTorch 2.1's
    /// flash-attention output layout and bitsandbytes 0.41.1's `MatMul4Bit` put back,
    /// and sums the storages autograd saved in the forward, less the parameters: three
    /// blocks, 256 tokens, hidden 256, 4 heads of 64, LoRA r 8 on q and v with dropout.
    /// The derivation adds the input ids and targets, which no operator saves; phi-1.5's
    /// LayerNorm keeps its mean and rstd in fp32 on CUDA, in bf16 on the CPU (3 norms
    /// with a gradient × 256 tokens × 2 × 2 B more in the derivation).
    #[test]
    fn the_derivation_equals_a_trace_of_lit_gpts_code() {
        let tiny = |kv: &'static str, phi: bool| {
            let mut p = vec![
                ("layers", "3"),
                ("hidden", "256"),
                ("heads", "4"),
                ("kv-heads", kv),
                ("head-dim", "64"),
                ("vocab", "1024"),
            ];
            if phi {
                p.extend([
                    ("intermediate", "1024"),
                    ("gated-mlp", "false"),
                    ("layernorm-bias", "true"),
                    ("layer-norms", "1"),
                ]);
            } else {
                p.push(("intermediate", "512"));
            }
            arch(&p)
        };
        let ids = 2 * blk(256 * 8);
        // (architecture, 4-bit base, traced bytes, CPU-only difference)
        let cases = [
            (tiny("4", false), false, 6_999_040u64, 0u64),
            (tiny("4", false), true, 8_965_120, 0),
            (tiny("2", false), false, 6_012_928, 0),
            (tiny("2", false), true, 7_979_008, 0),
            (tiny("4", true), false, 5_295_104, 3 * 256 * 2 * 2),
        ];
        for (a, base, traced, cpu) in cases {
            let x = activations(&a, 256, 1, 2, false, &qv_dropout(base));
            assert_eq!(x.assumed_because, None);
            assert_eq!(
                x.bytes - ids,
                traced + cpu,
                "base {base}, kv {}",
                a.kv_heads
            );
        }
    }
}
