//! mlx-lm's rule worked by hand.

#![allow(clippy::arithmetic_side_effects)]

use super::super::tests::{bytes_of, llama_8b, run};
use super::*;
use crate::engine::Outcome;

/// Llama-3.1-8B in MLX's 4-bit format (group 64), fp16, as mlx-community ships it.
fn llama_8b_4bit(prompt: &str, generate: &str) -> crate::estimate::EstimateInput {
    llama_8b(&[
        ("format", "mlx-4-g64"),
        ("compute-dtype", "fp16"),
        ("keep-format", "fp16"),
        ("context", prompt),
        ("generate", generate),
    ])
}

const MAC: [(&str, &str); 2] = [("engine", "mlx"), ("card", "m2-ultra-192gb")];

fn with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    MAC.iter().copied().chain(extra.iter().copied()).collect()
}

/// The weights of Llama-3.1-8B at 4 bits, group 64, by hand: a row of 4096 inputs
/// packs 512 uint32 words (2048 B) with 64 fp16 scales and 64 biases (256 B): 2304 B;
/// a row of 14336 inputs (down_proj) 7168 + 896 = 8064 B. Per layer: q and o 4096
/// rows, k and v 1024 rows of 2304 B (23 592 960 B); gate and up 14336 rows of 2304 B
/// and down 4096 rows of 8064 B (99 090 432 B); two fp16 norms of 4096 (16 384 B):
/// 122 699 776 B × 32 = 3 926 392 832 B. The embeddings and lm_head, quantised too:
/// 128 256 rows of 2304 B each (295 501 824 B), and the final norm (8 192 B).
const LLAMA_8B_4BIT_WEIGHTS: u64 = 3_926_392_832 + 2 * 295_501_824 + 8_192;

#[test]
fn weights_are_the_mlx_format_to_the_byte() {
    let b = run(&llama_8b_4bit("1929", "256"), &with(&[]));
    assert_eq!(bytes_of(&b, "weights"), LLAMA_8B_4BIT_WEIGHTS);
    assert_eq!(b.engine.name(), "mlx");
}

/// A prompt of 1929 tokens and 256 generated (mlx-examples PR 1122's request) under
/// 0.27+: the first 1928 tokens are one chunk (`n_to_process = min(2048, 1928)`), the
/// cache allocates ceil(1928 ÷ 256) × 256 = 2048 tokens; the last prompt token fits;
/// generation grows it to 2304 at token 2048. KV per token: 32 layers × 8 heads × 128
/// × 2 (K, V) × 2 B = 131 072 B.
///
/// The chunk's moment: the cache at 2048 tokens (268 435 456 B); one layer's new
/// buffer being concatenated onto nothing (2048 × 4096 B = 8 388 608 B); the
/// activations, 1928 × (2 × 4096 + max(2 × 32 × 128 + 2 × 8 × 128, 3 × 14336)) × 2 B
/// = 197 427 200 B; head dim 128 takes MLX's fused kernel: no scores. Total
/// 474 251 264 B, above the last growth's moment (2304 × 131 072 + one layer's
/// 2048 + 256 tokens + one token's logits: 301 989 888 + 9 437 184 + 128 256 × 6).
#[test]
fn the_peak_is_the_prefill_chunk_with_the_cache_at_its_256_step() {
    let b = run(&llama_8b_4bit("1929", "256"), &with(&[]));
    assert_eq!(bytes_of(&b, "kv_cache"), 2048 * 131_072);
    assert_eq!(bytes_of(&b, "kv_growth"), 2048 * 4096);
    assert_eq!(bytes_of(&b, "activations"), 197_427_200);
    assert!(b.lines.iter().all(|l| l.key != "attention_scores"));
    let peak = LLAMA_8B_4BIT_WEIGHTS + 268_435_456 + 8_388_608 + 197_427_200;
    assert_eq!(bytes_of(&b, "peak"), peak);
    assert_eq!(peak, 4_991_655_936);
    assert_eq!(b.outcome, Outcome::Fits);
    assert_eq!(b.version, "0.32");
}

/// The prompt's last chunk under mlx-lm 0.22.2–0.26 (`mlx@0.26`): 33 898 tokens are 16
/// chunks of 2048 (32 768 tokens) and 1130 through `_step` with their logits. The
/// cache: 32 768 + ceil(1130 ÷ 256) × 256 = 34 048 tokens; one layer's old buffer and
/// its zeros, (32 768 + 1280) × 4096 B. The last chunk's layer activations,
/// 1130 × (8192 + 43 008) × 2 B = 115 712 000 B, are above its logits, 1130 ×
/// (32 768 + 4096) × 2 B = 83 312 640 B; the 2048-token chunks' activations
/// (209 715 200 B) come with a smaller cache (32 768 tokens and a 2048-token step).
#[test]
fn mlx_0_26_runs_the_last_chunk_through_the_lm_head() {
    let mistral = {
        let preset = crate::presets::find("mistral-7b-v0.3").expect("preset");
        let pairs = preset.pairs.iter().copied().chain([
            ("format", "mlx-4-g64"),
            ("compute-dtype", "fp16"),
            ("keep-format", "fp16"),
            ("context", "33898"),
            ("generate", "100"),
        ]);
        let (input, errors) = crate::params::from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        input
    };
    let b = run(&mistral, &[("engine", "mlx@0.26"), ("card", "m2-ultra-192gb")]);
    assert_eq!(b.version, "0.26");
    let last = 34_048 * 131_072 + 34_048 * 4096 + 115_712_000;
    let chunk = 32_768 * 131_072 + 32_768 * 4096 + 209_715_200;
    assert!(last > chunk);
    assert_eq!(
        bytes_of(&b, "peak") - bytes_of(&b, "weights"),
        last,
        "the last chunk's moment"
    );
    // Under 0.27+ the 1130 tokens' chunk is 1129 and the last token alone; the same
    // capacity, the chunk's activations one token smaller.
    let now = run(&mistral, &[("engine", "mlx"), ("card", "m2-ultra-192gb")]);
    assert_eq!(
        bytes_of(&now, "peak") - bytes_of(&now, "weights"),
        34_048 * 131_072 + 34_048 * 4096 + 1129 * 51_200 * 2
    );
}

/// Head dim 256 (Gemma's) with more than 8 queries takes MLX's unfused attention:
/// the scores [heads, chunk, keys] in the model's dtype and the causal mask, 1 B per
/// query × key. A 4097-token prompt: chunks of 2048 and 2048, then the last token; at
/// the second chunk 16 heads × 2048 × 4096 keys × 2 B + 2048 × 4096.
#[test]
fn head_dims_192_and_256_materialise_the_scores() {
    let input = llama_8b(&[
        ("format", "mlx-4-g64"),
        ("heads", "16"),
        ("head-dim", "256"),
        ("context", "4097"),
        ("generate", "1"),
    ]);
    let b = run(&input, &with(&[]));
    assert_eq!(
        bytes_of(&b, "attention_scores"),
        16 * 2048 * 4096 * 2 + 2048 * 4096
    );
    // Head dim 128: fused, no scores.
    let fused = run(&llama_8b_4bit("4097", "1"), &with(&[]));
    assert!(fused.lines.iter().all(|l| l.key != "attention_scores"));
    // Head dim 96 is fused; 112 is not in the fused kernel's list.
    for (d, unfused) in [("96", false), ("112", true), ("192", true)] {
        let i = llama_8b(&[("head-dim", d), ("context", "4097"), ("generate", "1")]);
        let b = run(&i, &with(&[]));
        assert_eq!(
            b.lines.iter().any(|l| l.key == "attention_scores"),
            unfused,
            "head dim {d}"
        );
    }
}

#[test]
fn a_card_that_is_not_a_mac_is_refused_with_the_reason() {
    let b = run(
        &llama_8b_4bit("1000", "100"),
        &[("engine", "mlx"), ("card", "h100-sxm-80gb")],
    );
    assert_eq!(b.outcome, Outcome::Refused);
    assert!(
        b.warnings.iter().any(|w| w.contains("not a Mac")),
        "{:?}",
        b.warnings
    );
    // GPTQ is not a format mlx-lm loads.
    let gptq = llama_8b(&[("format", "gptq-4-g128"), ("context", "100")]);
    let b = run(&gptq, &with(&[]));
    assert_eq!(b.outcome, Outcome::Refused);
    assert!(b.warnings.iter().any(|w| w.contains("mlx_lm.convert")));
}

/// 128 000 tokens of a 16-bit Llama-3.1-8B on an M1 Pro 16 GB: refused; on an M3
/// Ultra 512 GB: fits. mlx-lm's own warning fires past 90 % of the working set.
#[test]
fn the_verdict_is_against_the_working_set_and_mlx_lm_warns_at_90_percent() {
    let long = llama_8b(&[("compute-dtype", "fp16"), ("context", "128000")]);
    let small = run(&long, &[("engine", "mlx"), ("card", "m1-pro-16gb")]);
    assert_eq!(small.outcome, Outcome::Refused);
    assert!(
        small.warnings.iter().any(|w| w.contains("mlx-lm warns")),
        "{:?}",
        small.warnings
    );
    let big = run(&long, &[("engine", "mlx"), ("card", "m3-ultra-512gb")]);
    assert_eq!(big.outcome, Outcome::Fits);
    assert!(big.warnings.iter().all(|w| !w.contains("mlx-lm warns")));
    // The room is the working set less the weights and the transients.
    let room = big.capacity_bytes as i64
        - (bytes_of(&big, "weights")
            + bytes_of(&big, "kv_growth")
            + bytes_of(&big, "activations")) as i64;
    assert_eq!(big.kv_capacity_bytes, room);
}

/// `--kv-bits 4 --kv-group-size 64`: per layer and KV head, K and V each 128 × 4 ÷ 8 =
/// 64 B and 2 groups × (scale + bias) × 2 B = 8 B: 32 × 8 × 2 × 72 = 36 864 B per
/// token. From 0 tokens (`--quantized-kv-start 0`) the cache is quantised after the
/// first chunk: 2048 tokens of 131 072 B beside their copy; the last chunk's attention
/// then runs over the quantised keys, its scores materialised.
#[test]
fn a_quantised_cache_is_smaller_and_its_attention_unfused() {
    let input = llama_8b_4bit("30001", "0");
    let q = run(
        &input,
        &with(&[("kv-bits", "4"), ("quantized-kv-start", "0")]),
    );
    let plain = run(&input, &with(&[]));
    assert!(bytes_of(&q, "kv_cache") < bytes_of(&plain, "kv_cache"));
    // 30 000 tokens in chunks of 2048: 14 of 2048 and one of 1328. The 14th chunk's
    // moment is the peak (its scores over 28 672 keys, the cache at 28 672 tokens of
    // 36 864 B), above the last chunk's (1328 queries over 30 000 keys).
    assert_eq!(bytes_of(&q, "kv_cache"), 28_672 * 36_864);
    assert_eq!(
        bytes_of(&q, "attention_scores"),
        32 * 2048 * 28_672 * 2 + 2048 * 28_672
    );
    // The combination mlx-lm cannot make is refused.
    let both = run(&input, &with(&[("kv-bits", "4"), ("max-kv-size", "4096")]));
    assert_eq!(both.outcome, Outcome::Refused);
    assert!(both.warnings.iter().any(|w| w.contains("NYI")));
}

/// `--max-kv-size 4096`: a chunk is appended after the last 4095 tokens, so the cache
/// holds 4095 + 2048 = 6143 during the prefill, and is trimmed to 4096 one token at a
/// time.
#[test]
fn a_rotating_cache_holds_max_size_minus_one_plus_a_chunk() {
    let input = llama_8b_4bit("20001", "500");
    let b = run(&input, &with(&[("max-kv-size", "4096")]));
    assert_eq!(bytes_of(&b, "kv_cache"), 6143 * 131_072);
    // Its old buffer (the 6143 tokens before the chunk) beside the new one.
    assert_eq!(bytes_of(&b, "kv_growth"), 6143 * 4096);
}

/// A prompt shorter than `--max-kv-size`: the 999-token chunk is concatenated as it is
/// (no step), then one token at a time the cache grows by min(256, max − offset):
/// 1255, 1511 … 4071, then 25 more to 4096, where it stops and rotates. The last
/// growth is the peak: 4096 tokens, and one layer's 4071 + 25 beside them.
#[test]
fn a_rotating_cache_grows_to_its_size_and_stops() {
    let input = llama_8b_4bit("1000", "5000");
    let b = run(&input, &with(&[("max-kv-size", "4096")]));
    assert_eq!(bytes_of(&b, "kv_cache"), 4096 * 131_072);
    assert_eq!(bytes_of(&b, "kv_growth"), 4096 * 4096);
}

#[test]
fn releases_parse_and_older_ones_are_named_not_carried() {
    for (text, place) in [("0.32.0", 0), ("0.27", 0), ("0.26.4", 1), ("0.22.2", 1)] {
        assert_eq!(parse_release(text).ok(), Some(place), "{text}");
    }
    for text in ["0.22.1", "0.21", "0.33", "1.0"] {
        assert!(parse_release(text).is_err(), "{text}");
    }
}
