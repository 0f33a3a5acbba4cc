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
