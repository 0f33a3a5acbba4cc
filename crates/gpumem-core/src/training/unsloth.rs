//! What unsloth's own code adds on the device beside the tensors a transformers +
//! PEFT step keeps, read in unslothai/unsloth at 6dad5dd (2024-04-15, the
//! `2024.4` release LLaMA-Factory's `use_unsloth` ran in April 2024) and at its
//! current tree where it differs.
//!
//! - **RoPE caches, one per layer** (`unsloth/models/llama.py`,
//!   `LlamaRotaryEmbedding._set_cos_sin_cache` at 6dad5dd): unsloth replaces
//!   transformers' `LlamaRotaryEmbedding` with a class that registers `cos_cached` and
//!   `sin_cached`, each `[positions, head_dim]`, built at construction in the default
//!   dtype (the load's) and cast to the weights' dtype by `FastLlamaModel.post_patch`.
//!   The transformers of April 2024 (4.39, 4.40) build one rotary embedding per
//!   attention layer (`LlamaAttention._init_rope`), and `FastLlamaModel.from_pretrained` sets
//!   `max_position_embeddings = max(max_seq_length, config.max_position_embeddings)`:
//!   2 × positions × head_dim values per layer. (unsloth since late 2024 shares one
//!   rotary embedding across layers, `current_rope_size` at most 32 768: not this.)
//! - **The dequantised 4-bit weight** (`unsloth/kernels/utils.py`, `fast_dequantize`):
//!   each 4-bit projection is dequantised into a fresh `torch.empty(shape, dtype)` in
//!   the compute dtype, its double-quantised block scales into an fp32 `out_absmax`
//!   of one value per 64-value block (bitsandbytes' `quantize_4bit` blocksize). In
//!   `LoRA_MLP.backward` (`unsloth/kernels/fast_lora.py`) the up and gate weights are
//!   dequantised while the layer's saved `X`, `e`, `g` and the down projection's
//!   gradient `DW` are alive: one MLP weight (the layer's largest) at the backward's
//!   peak. Today's `fast_dequantize` can keep it in a global `WEIGHT_BUFFERS` entry
//!   instead: the same bytes.
//! - **The logits at the forward's end, and their fp32 copy** (2024.4 only).
//!   `CausalLM_fast_forward` (`unsloth/models/llama.py` at 6dad5dd) returns the
//!   logits in the model's dtype (`logits.to(self.config.torch_dtype)`), the tensor
//!   `Fast_CrossEntropyLoss` saves and writes its gradient into
//!   (`unsloth/kernels/cross_entropy_loss.py`). The Trainer runs the model through
//!   accelerate's `prepare_model` (transformers 4.39 `Trainer._inner_training_loop`,
//!   `self.accelerator.prepare(self.model, ...)`; `TrainingArguments.__post_init__`
//!   sets `ACCELERATE_MIXED_PRECISION` from `bf16`/`fp16`, which unsloth's notebooks
//!   and LLaMA-Factory's runs pass), which under fp16 or bf16 mixed
//!   precision wraps `forward` in `convert_outputs_to_fp32` (huggingface/accelerate
//!   v0.29.2, `accelerator.py` `Accelerator.prepare_model` and
//!   `utils/operations.py` `convert_to_fp32`: `tensor.float()` for every 16-bit
//!   output): the returned logits are copied to fp32 while the 16-bit ones are still
//!   saved. Both live from the end of the forward until `compute_loss` drops the
//!   outputs, before the backward; the offloaded checkpointing keeps no layer's
//!   activations on the device then, only its layer inputs in flight. transformers'
//!   own `LlamaForCausalLM` returns fp32 logits, which `convert_to_fp32` leaves
//!   alone; unsloth since late 2024 returns no logits when it computes the loss.

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::units::checked_product;

/// bitsandbytes' NF4 block size (`quantize_4bit`, `blocksize=64`, the one
/// transformers' `Linear4bit` uses).
const NF4_BLOCK: u64 = 64;

/// The positions unsloth's RoPE caches hold: `max(max_seq_length, the config's
/// max_position_embeddings)` (`FastLlamaModel.from_pretrained`), with the run's
/// context as `max_seq_length` (LLaMA-Factory passes `cutoff_len`).
pub(crate) fn rope_positions(context: u64, max_position: Option<u64>) -> u64 {
    context.max(max_position.unwrap_or(0))
}

/// unsloth 2024.4's RoPE caches: `(tensors, bytes each)` — a `cos_cached` and a
/// `sin_cached` of `positions × head_dim` values in the weights' dtype per layer.
pub(crate) fn rope_caches(
    a: &Architecture,
    positions: u64,
    value: u64,
) -> Result<(u64, u64), EstimateError> {
    let each = checked_product(&[positions, a.head_dim, value], "RoPE caches")?;
    let tensors = checked_product(&[2, a.layers], "RoPE caches")?;
    Ok((tensors, each))
}

/// unsloth 2024.4's logits at the forward's end, bytes: for `tokens` (sequences ×
/// tokens) rows of a `vocab`-wide output, the logits in the compute dtype (`value`
/// bytes, the ones `Fast_CrossEntropyLoss` keeps), accelerate's fp32 copy of them
/// (`convert_outputs_to_fp32`; none when the compute dtype is already fp32) and the
/// loss's fp32 log-sum-exp and loss per row, each tensor in the caching allocator's
/// 512 B blocks.
pub(crate) fn forward_end_logits(
    tokens: u64,
    vocab: u64,
    value: u64,
) -> Result<u64, EstimateError> {
    let block = |xs: &[u64]| -> Result<u64, EstimateError> {
        let n = checked_product(xs, "logits at the forward's end")?;
        n.max(1)
            .div_ceil(512)
            .checked_mul(512)
            .ok_or(EstimateError::Overflow {
                what: "logits at the forward's end",
            })
    };
    let logits = block(&[tokens, vocab, value])?;
    let copy = if value < 4 {
        block(&[tokens, vocab, 4])?
    } else {
        0
    };
    let per_row = block(&[tokens, 4])?;
    [copy, per_row, per_row]
        .iter()
        .try_fold(logits, |acc, x| acc.checked_add(*x))
        .ok_or(EstimateError::Overflow {
            what: "logits at the forward's end",
        })
}

/// `fast_dequantize`'s output at `LoRA_MLP.backward`: the largest 4-bit projection
/// of a layer in the compute dtype plus its fp32 block scales, bytes.
pub(crate) fn dequantised_weight(a: &Architecture, value: u64) -> Result<u64, EstimateError> {
    let mlp = checked_product(&[a.hidden, a.intermediate], "dequantised weight")?;
    let q = checked_product(&[a.hidden, a.heads, a.head_dim], "dequantised weight")?;
    let n = mlp.max(q);
    let weight = checked_product(&[n, value], "dequantised weight")?;
    let absmax = checked_product(&[n.div_ceil(NF4_BLOCK), 4], "dequantised weight")?;
    weight.checked_add(absmax).ok_or(EstimateError::Overflow {
        what: "dequantised weight",
    })
}

/// One allocation or release of unsloth 2024.4's step, in program order: `Malloc(id,
/// bytes)` and `Free(id)` of the tensor `Malloc` numbered `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Malloc(usize, u64),
    Free(usize),
}

/// unsloth 2024.4's step beyond the persistent tensors (weights, adapters, their
/// gradients and optimizer states, the RoPE caches): the allocations and releases of
/// its offloaded checkpointing's forward, the forward's end and the last layer's
/// backward, in program order. `forward_end` and `backward` are the indices of the
/// first op of those phases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub ops: Vec<Op>,
    pub forward_end: usize,
    pub backward: usize,
}

/// The sizes of one step's tensors, bytes.
struct Sizes {
    /// tokens × hidden × v: a layer's input, a norm's output, the residual sums.
    th: u64,
    /// tokens × query width (heads × head_dim) × v: Q and the attention output.
    tq: u64,
    /// tokens × key/value width × v: K and V.
    tk: u64,
    /// tokens × intermediate × v: the MLP's `e`, `g`, `h` and `DW`.
    ti: u64,
    /// tokens × rank × v: `X @ A` of a LoRA update.
    tr: u64,
    /// tokens × 4 B: an RMSNorm's fp32 rstd, the loss's log-sum-exp and loss per row.
    row4: u64,
    /// heads × tokens × 4 B: flash-attn's fp32 `softmax_lse`.
    lse: u64,
    /// tokens × vocab × v: the logits.
    logits: u64,
    /// tokens × vocab × 4 B: accelerate's fp32 copy of them (0 in fp32 compute).
    logits_fp32: u64,
}

struct Seq {
    ops: Vec<Op>,
    next: usize,
    s: Sizes,
    hidden: u64,
    q_width: u64,
    kv_width: u64,
    intermediate: u64,
    value: u64,
    /// A 4-bit base: `fast_dequantize` allocates the weight and its fp32 scales.
    qlora: bool,
}

impl Seq {
    fn m(&mut self, bytes: u64) -> usize {
        let id = self.next;
        self.next = self.next.saturating_add(1);
        self.ops.push(Op::Malloc(id, bytes));
        id
    }

    fn f(&mut self, id: usize) {
        self.ops.push(Op::Free(id));
    }

    /// `fast_dequantize` (unsloth/kernels/utils.py at 6dad5dd) of an `n_in × n_out`
    /// 4-bit weight: `out = torch.empty(shape, dtype)` in the compute dtype, then
    /// `out_absmax`, an fp32 value per 64-value block, released when it returns. A
    /// 16-bit base (LoRA) is returned as it is: nothing allocated.
    fn dequantize(&mut self, n_in: u64, n_out: u64) -> Option<usize> {
        if !self.qlora {
            return None;
        }
        let n = n_in.saturating_mul(n_out);
        let w = self.m(n.saturating_mul(self.value));
        let absmax = self.m(n.div_ceil(NF4_BLOCK).saturating_mul(4));
        self.f(absmax);
        Some(w)
    }

    /// `matmul_lora(X, W, W_quant, A, B, s)` (kernels/utils.py at 6dad5dd): the
    /// dequantised weight, `out = torch.matmul(X, W)`, `del W`, then
    /// `out += (X @ A) @ (s * B)` — a tokens × rank and a tokens × out temporary.
    /// (`A.to(dtype)` and `s * B`, rank × width each, are left out: kilobytes.)
    fn matmul_lora(&mut self, n_in: u64, n_out: u64, out_bytes: u64) -> usize {
        let w = self.dequantize(n_in, n_out);
        let out = self.m(out_bytes);
        if let Some(w) = w {
            self.f(w);
        }
        let xa = self.m(self.s.tr);
        let t = self.m(out_bytes);
        self.f(t);
        self.f(xa);
        out
    }

    /// One `LlamaDecoderLayer_fast_forward` (models/llama.py at 6dad5dd) on the
    /// layer input already allocated, returning its output. `grad`: under autograd
    /// (the recomputation in `Unsloth_Offloaded_Gradient_Checkpointer.backward`),
    /// what the kernels save stays: the norms' rstd (`Fast_RMS_Layernorm`), `X` of
    /// `LoRA_QKV` (the first norm's output), flash-attn's Q, K, V, output and
    /// log-sum-exp (`LoRA_W` saves that same output), the residual sum the second
    /// norm saves, and `LoRA_MLP`'s `X`, `e`, `g` (not `h`, which its backward
    /// recomputes). Under `no_grad` (the checkpointer's forward) each is released as
    /// its last reference goes. Returns the output and the saved tensors.
    fn layer(&mut self, grad: bool) -> (usize, Vec<usize>) {
        let (h, q, kv, i) = (self.hidden, self.q_width, self.kv_width, self.intermediate);
        let (th, tq, tk, ti) = (self.s.th, self.s.tq, self.s.tk, self.s.ti);
        let mut saved = Vec::new();
        // residual = hidden_states; fast_rms_layernorm(input_layernorm)
        let y1 = self.m(th);
        let r1 = self.m(self.s.row4);
        if !grad {
            self.f(r1);
        }
        // LoRA_QKV.forward: Q, K, V, each through matmul_lora.
        let qq = self.matmul_lora(h, q, tq);
        let kk = self.matmul_lora(h, kv, tk);
        let vv = self.matmul_lora(h, kv, tk);
        // fast_rope_embedding works in place; flash_attn_func's output and lse.
        let attn = self.m(tq);
        let lse = self.m(self.s.lse);
        if !grad {
            // flash_attn_func returns the output alone.
            self.f(lse);
        }
        // LoRA_W.forward (o_proj) on the attention output.
        let o = self.matmul_lora(q, h, th);
        if grad {
            saved.extend([r1, y1, qq, kk, vv, attn, lse]);
        } else {
            // The attention's locals, then the norm's output, go as self_attn returns.
            for t in [qq, kk, vv, attn, y1] {
                self.f(t);
            }
        }
        // hidden_states = residual + hidden_states
        let x1 = self.m(th);
        self.f(o);
        let y2 = self.m(th);
        let r2 = self.m(self.s.row4);
        if !grad {
            self.f(r2);
        }
        // LoRA_MLP.forward: e = X @ G, g = X @ U, h = swiglu(e, g), i = h @ W.
        let e = self.matmul_lora(h, i, ti);
        let g = self.matmul_lora(h, i, ti);
        let hh = self.m(ti);
        let down = self.matmul_lora(i, h, th);
        self.f(hh);
        if grad {
            saved.extend([x1, r2, y2, e, g]);
        } else {
            for t in [e, g, y2] {
                self.f(t);
            }
        }
        let x2 = self.m(th);
        self.f(down);
        if !grad {
            self.f(x1);
        }
        (x2, saved)
    }
}

/// unsloth 2024.4's step for a Llama-style decoder (gated MLP, every linear adapted,
/// LoRA without dropout, `use_gradient_checkpointing = "unsloth"`), read in
/// unslothai/unsloth at 6dad5dd:
///
/// - **forward** (`models/_utils.py`, `Unsloth_Offloaded_Gradient_Checkpointer`):
///   each layer's input is copied to the host (`hidden_states.to("cpu", non_blocking
///   = True)`, pinned host memory) and the layer runs under `torch.no_grad()`: its
///   temporaries come and go, and the caching allocator keeps their blocks. Two
///   layers are run, the second reusing the first's blocks. The embedding's output,
///   a leaf that requires grad (`enable_input_require_grads`), stays to the end.
/// - **the forward's end** (`models/llama.py`, `CausalLM_fast_forward`): the final
///   norm (under autograd: its input and rstd kept), `lm_head`'s logits in the compute
///   dtype, `Fast_CrossEntropyLoss`'s fp32 log-sum-exp and loss per row; the model
///   returns, its normed hidden state goes, and accelerate's `convert_outputs_to_fp32`
///   copies the logits to fp32, released when the Trainer keeps only the loss.
/// - **the backward**: `Fast_CrossEntropyLoss.backward` writes the gradient into the
///   logits, `lm_head`'s backward makes the normed state's gradient and the logits go;
///   `Fast_RMS_Layernorm.backward` writes in place. The last layer's checkpointer
///   copies its input back and recomputes the layer under autograd (what the kernels
///   save, [`Seq::layer`]), then `LoRA_MLP.backward` (`kernels/fast_lora.py`): `DW`
///   through `matmul_lora` with the down weight dequantised, the SwiGLU backward in
///   place into `DW`, `e`, `g`, then the up and gate weights dequantised one at a
///   time, `dX` written into the saved `X` and each LoRA term a tokens × hidden
///   temporary. The attention's backward that follows holds less (the MLP's saved
///   tensors gone), and so does every earlier layer's.
pub(crate) fn step_2024(
    a: &Architecture,
    tokens: u64,
    rank: u64,
    value: u64,
    qlora: bool,
) -> Result<Step, EstimateError> {
    let what = "unsloth's step";
    let q_width = checked_product(&[a.heads, a.head_dim], what)?;
    let kv_width = checked_product(&[a.kv_heads, a.head_dim], what)?;
    let s = Sizes {
        th: checked_product(&[tokens, a.hidden, value], what)?,
        tq: checked_product(&[tokens, q_width, value], what)?,
        tk: checked_product(&[tokens, kv_width, value], what)?,
        ti: checked_product(&[tokens, a.intermediate, value], what)?,
        tr: checked_product(&[tokens, rank, value], what)?,
        row4: checked_product(&[tokens, 4], what)?,
        lse: checked_product(&[a.heads, tokens, 4], what)?,
        logits: checked_product(&[tokens, a.vocab, value], what)?,
        logits_fp32: if value < 4 {
            checked_product(&[tokens, a.vocab, 4], what)?
        } else {
            0
        },
    };
    // The largest weight a layer dequantises, bounded like the tensors above.
    checked_product(&[a.hidden, a.intermediate.max(q_width), value], what)?;
    let mut q = Seq {
        ops: Vec::new(),
        next: 0,
        s,
        hidden: a.hidden,
        q_width,
        kv_width,
        intermediate: a.intermediate,
        value,
        qlora,
    };
    // The forward: the embedding's output, then two layers under no_grad. The
    // embedding's output is a leaf that requires grad (the forward hook of
    // `enable_input_require_grads`, transformers 4.39.3 modeling_utils.py, which
    // unsloth's `prepare_model_for_kbit_training` (models/_utils.py, use_reentrant
    // True) and LLaMA-Factory's `_prepare_model_for_training` (model/patcher.py at
    // 19adfb8 and efa8080) install, so that the checkpointer's output requires grad):
    // the first checkpointer's node reaches it through its `AccumulateGrad`, which
    // holds the tensor until the graph is released after the backward. The later
    // layers' inputs have a `grad_fn` and go as the next layer's input replaces them.
    let embedded = q.m(q.s.th);
    let mut x = embedded;
    for _ in 0..2 {
        let (out, _) = q.layer(false);
        if x != embedded {
            q.f(x);
        }
        x = out;
    }
    // The forward's end.
    let forward_end = q.ops.len();
    let normed = q.m(q.s.th);
    let rstd = q.m(q.s.row4);
    let logits = q.m(q.s.logits);
    let lse = q.m(q.s.row4);
    let loss = q.m(q.s.row4);
    q.f(normed);
    if q.s.logits_fp32 > 0 {
        let copy = q.m(q.s.logits_fp32);
        q.f(copy);
    }
    // The backward: lm_head's, the final norm's (in place), then the last layer.
    let backward = q.ops.len();
    let dy = q.m(q.s.th);
    for t in [logits, lse, loss, rstd, x] {
        q.f(t);
    }
    let _input = q.m(q.s.th);
    let (_out, _saved) = q.layer(true);
    // LoRA_MLP.backward: DW = matmul_lora(dY, downW.t(), ..., downB, downA, downS).
    let (h, i, ti, th) = (a.hidden, a.intermediate, q.s.ti, q.s.th);
    let dw = q.matmul_lora(h, i, ti);
    // upW dequantised, dX = df @ upW.t() into X, then the LoRA term; the gate's alike.
    for gate in [false, true] {
        let w = q.dequantize(i, h);
        if gate {
            // dX += de @ gateW.t(): a temporary beside the weight (the up
            // projection's product is written into X itself).
            let t = q.m(th);
            q.f(t);
        }
        if let Some(w) = w {
            q.f(w);
        }
        let xb = q.m(q.s.tr);
        let t = q.m(th);
        q.f(t);
        q.f(xb);
    }
    q.f(dw);
    q.f(dy);
    q.f(embedded);
    Ok(Step {
        ops: q.ops,
        forward_end,
        backward,
    })
}

/// The allocated peaks of a step's phases, bytes (each block rounded as the caching
/// allocator rounds it): `(forward, backward)` — the most alive at once from the
/// start to the backward, and in the backward.
pub(crate) fn phase_peaks(step: &Step) -> (u64, u64) {
    let mut live: Vec<(usize, u64)> = Vec::new();
    let (mut now, mut forward, mut backward) = (0u64, 0u64, 0u64);
    for (n, op) in step.ops.iter().enumerate() {
        match *op {
            Op::Malloc(id, bytes) => {
                let b = crate::allocator::round_size(bytes);
                live.push((id, b));
                now = now.saturating_add(b);
            }
            Op::Free(id) => {
                if let Some(k) = live.iter().position(|(i, _)| *i == id) {
                    now = now.saturating_sub(live.swap_remove(k).1);
                }
            }
        }
        if n < step.backward {
            forward = forward.max(now);
        } else {
            backward = backward.max(now);
        }
    }
    (forward, backward)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama2_7b() -> Architecture {
        Architecture {
            vocab: 32000,
            hidden: 4096,
            layers: 32,
            heads: 32,
            kv_heads: 32,
            head_dim: 128,
            intermediate: 11008,
            gated_mlp: true,
            ..Architecture::default()
        }
    }

    #[test]
    fn rope_caches_count_a_cos_and_a_sin_per_layer() {
        let a = llama2_7b();
        // A 2 048-token run keeps the config's 4 096 positions; a 100 000-token one
        // extends them to its length.
        assert_eq!(rope_positions(2048, Some(4096)), 4096);
        assert_eq!(rope_positions(100_000, Some(4096)), 100_000);
        assert_eq!(rope_positions(2048, None), 2048);
        // By hand: 32 layers × (cos + sin) × 4096 × 128 × 2 B = 64 MiB.
        let (n, each) = rope_caches(&a, 4096, 2).unwrap();
        assert_eq!((n, each), (64, 4096 * 128 * 2));
        assert_eq!(n * each, 64 << 20);
        // 100 000 positions: 32 × 2 × 100 000 × 128 × 2 = 1 638 400 000 B.
        let (n, each) = rope_caches(&a, 100_000, 2).unwrap();
        assert_eq!(n * each, 1_638_400_000);
    }

    #[test]
    fn the_dequantised_weight_is_the_mlp_projection_and_its_scales() {
        let a = llama2_7b();
        // 11008 × 4096 values in bf16 = 90 177 536 B, plus 704 512 blocks of 64
        // values × 4 B of fp32 absmax = 2 818 048 B.
        assert_eq!(dequantised_weight(&a, 2).unwrap(), 90_177_536 + 2_818_048);
        // A model whose query projection is wider than its MLP: the query's.
        let wide = Architecture {
            heads: 128,
            intermediate: 1024,
            ..llama2_7b()
        };
        let n = 4096 * 128 * 128;
        assert_eq!(dequantised_weight(&wide, 2).unwrap(), n * 2 + n / 64 * 4);
    }

    #[test]
    fn the_forward_end_holds_the_logits_and_their_fp32_copy() {
        // Llama-2-7B's 32 000-entry vocabulary, 2 048 tokens in bf16: 2048 × 32000 × 2
        // = 131 072 000 B of logits, 262 144 000 B of fp32 copy, and 2 × 8 192 B of
        // log-sum-exp and loss (2048 × 4 B each, already whole 512 B blocks).
        assert_eq!(
            forward_end_logits(2048, 32000, 2).unwrap(),
            131_072_000 + 262_144_000 + 2 * 8192
        );
        // fp32 compute: convert_to_fp32 copies no fp32 tensor.
        assert_eq!(
            forward_end_logits(2048, 32000, 4).unwrap(),
            262_144_000 + 2 * 8192
        );
        // Three rows: each tensor rounded up to a 512 B block.
        assert_eq!(
            forward_end_logits(3, 100, 2).unwrap(),
            1024 + 1536 + 512 + 512
        );
        assert!(forward_end_logits(u64::MAX, 2, 2).is_err());
    }

    #[test]
    fn unsloth_2024s_step_by_hand() {
        let a = llama2_7b();
        // Llama-2-7B at 2 048 tokens in bf16, every size a whole number of 512 B
        // blocks: th = 2048 × 4096 × 2 = 16 777 216 (Q, K, V and the attention output
        // alike: 32 heads of 128), ti = 2048 × 11008 × 2 = 45 088 768, a norm's rstd
        // and a loss row 2048 × 4 = 8 192, flash-attn's lse 32 × 2048 × 4 = 262 144.
        let (th, ti, row, lse) = (16_777_216u64, 45_088_768u64, 8192u64, 262_144u64);
        let w = 4096 * 11008 * 2; // one dequantised MLP weight: 90 177 536
        // The embedding's output, a leaf the graph holds through the step: th.
        // The forward's end: beside it the last layer's output and the final norm's
        // rstd, the bf16 logits, the loss's log-sum-exp and loss, and the fp32 copy
        // once the normed state is gone: 2 th + 3 rows + 2048 × 32000 × (2 + 4).
        let forward = 2 * th + 3 * row + 2048 * 32000 * 6;
        // The last layer's backward: the embedding's output, the recomputed layer's
        // saved tensors (its input, Y1, Q, K, V, the attention output, X1, Y2 and the
        // output: 9 th; e and g; two rstd; the lse) and the incoming gradient (th),
        // then at the gate's `dX += de @ gateW.t()`: DW, the dequantised gate weight
        // and a th product.
        let saved = 10 * th + 2 * ti + 2 * row + lse;
        let backward = th + saved + ti + w + th;
        let step = step_2024(&a, 2048, 8, 2, true).unwrap();
        assert_eq!(phase_peaks(&step), (forward, backward));
        assert_eq!((forward, backward), (426_795_008, 427_048_960));
        // LoRA (a 16-bit base, nothing dequantised): the peak is DW beside matmul_lora's
        // tokens × intermediate LoRA term and its tokens × rank factor (2048 × 8 × 2).
        let step = step_2024(&a, 2048, 8, 2, false).unwrap();
        assert_eq!(phase_peaks(&step).1, th + saved + 2 * ti + 32_768);
        // Every tensor allocated is released at most once and only after it exists.
        let mut live = std::collections::BTreeSet::new();
        for op in &step.ops {
            match *op {
                Op::Malloc(id, _) => assert!(live.insert(id)),
                Op::Free(id) => assert!(live.remove(&id), "{id} freed twice or early"),
            }
        }
        // The logits and accelerate's fp32 copy; in fp32 compute, the logits alone.
        let vocab_sized = |v: u64| {
            let step = step_2024(&a, 2048, 8, v, true).unwrap();
            let mut sizes: Vec<u64> = step
                .ops
                .iter()
                .filter_map(|op| match *op {
                    Op::Malloc(_, b) if b.is_multiple_of(2048 * 32000) => Some(b),
                    _ => None,
                })
                .collect();
            sizes.sort_unstable();
            sizes
        };
        assert_eq!(vocab_sized(2), vec![2048 * 32000 * 2, 2048 * 32000 * 4]);
        assert_eq!(vocab_sized(4), vec![2048 * 32000 * 4]);
        assert!(step_2024(&a, u64::MAX, 8, 2, true).is_err());
    }

    #[test]
    fn overflow_is_an_error() {
        let a = Architecture {
            head_dim: u64::MAX,
            ..llama2_7b()
        };
        assert!(rope_caches(&a, 4096, 2).is_err());
        let b = Architecture {
            hidden: u64::MAX,
            ..llama2_7b()
        };
        assert!(dequantised_weight(&b, 2).is_err());
    }
}
