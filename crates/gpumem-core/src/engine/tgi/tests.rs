//! TGI's rule: its warm-up and wiggle room, by hand.

#![allow(clippy::arithmetic_side_effects)]

use crate::engine::tests::*;

/// TGI: wiggle room ⌊total × 0.1⌋ = 8 552 080 998 B; warm-up of 4096 prompt tokens:
/// MLP rows 4 × 4096 × 14 336 × 2 + 2 × 4096 × 4096 × 2 = 536 870 912 B, and every
/// prompt token's hidden row and logits (log_softmax in place) 4096 × 4096 × 2 +
/// 4096 × 128 256 × 2 = 1 084 227 584 B; KV = 85 520 809 984 − 536 870 912 −
/// 16 060 522 496 − 1 621 098 496 − 8 552 080 998 = 58 750 237 082 B → 28 014 blocks of 16
/// (2 097 152 B) → 448 224 tokens.
#[test]
fn tgi_keeps_its_wiggle_room() {
    let b = run(&llama_8b(&[]), &with(&[("engine", "tgi")]));
    assert_eq!(bytes_of(&b, "wiggle_room"), 8_552_080_998);
    assert_eq!(b.kv_capacity_bytes, 58_750_237_082);
    assert_eq!(b.kv_capacity_tokens, 448_224);
    assert_eq!(b.max_sequences, 28);
}

/// TGI 2.0's warm-up of 4096 prompt tokens (Llama-3.1-8B, bf16): the segments torch's
/// caching allocator reserves, worked by hand in MiB. A hidden row is 4096 × 4096 × 2 =
/// 32, the fused QKV 4096 × 6144 × 2 = 48, an intermediate row 4096 × 14 336 × 2 = 112,
/// `gate_up` 224, the logits 4096 × 128 256 × 2 = 1002. The first layer reserves a
/// segment for each tensor as it comes; from the second on, the freed QKV and
/// intermediate segments are split for the new hidden rows, so four hidden segments,
/// the QKV one, three intermediate and one `gate_up` segment serve every layer:
/// 128 + 48 + 336 + 224 = 736; the logits and their log_softmax fit in none of them:
/// 2 × 1002.
/// In all 2740 MiB, where the tensors alive at once never pass 2 × 1002 (a layer's
/// seven hidden and four intermediate rows are 672).
#[test]
fn tgi_2_0_counts_the_warm_up_segments() {
    let b = run(
        &llama_8b(&[]),
        &with(&[("engine", "tgi@2.0"), ("max-num-batched-tokens", "4096")]),
    );
    assert_eq!(bytes_of(&b, "activation_peak"), 2740 * (1 << 20));
    let line = b.lines.iter().find(|l| l.key == "activation_peak").unwrap();
    let allocated = (2004u64 * (1 << 20)).to_string();
    assert_eq!(line.inputs.get("peak-allocated"), Some(&allocated));
}

/// TGI 2.0 holds at most ⌈window ÷ 16⌉ blocks for a request of a model whose every layer
/// has a sliding window (Mistral-7B-v0.1, 4096): the warm-up's four requests of
/// 32 768 prefill tokens at max-total-tokens 8512 hold 4 × 256 blocks of 2 MiB, not
/// 4 × 532; TGI 0.9 had no such batch.
#[test]
fn tgi_2_0_caps_a_windowed_request_at_its_window() {
    let input = from_config("mistral-7b-v0.1", &[]);
    let b = run(
        &input,
        &[
            ("engine", "tgi@2.0"),
            ("card", "a100-80gb"),
            ("max-model-len", "8512"),
            ("max-num-batched-tokens", "32768"),
        ],
    );
    assert_eq!(bytes_of(&b, "warmup_blocks"), 4 * 256 * 2 * (1 << 20));
}

/// The warm-up's requests are counted in closed form, however many a large
/// `max-num-batched-tokens` over a short `max-model-len` makes: 10^12 prompt tokens in
/// requests of one token answer at once (a loop over them did not end).
#[test]
fn tgi_counts_many_warm_up_requests_in_closed_form() {
    let input = llama_8b(&[]);
    let est = crate::estimate::estimate(&input).unwrap();
    let answer = |batched: &str| {
        let p = engine(&with(&[
            ("engine", "tgi@2.0"),
            ("max-model-len", "2"),
            ("max-num-batched-tokens", batched),
        ]));
        budget(&input, &est, &p).map(|b| b.kv_capacity_tokens)
    };
    // 10^12 requests' blocks leave no pool; 4096 leave one.
    assert_eq!(answer("1000000000000"), Ok(0));
    assert!(answer("4096").is_ok_and(|tokens| tokens > 0));
}

/// TGI under bitsandbytes 4-bit (Llama-3.1-8B, 4096 warm-up tokens): each fused linear
/// dequantises its weight while it writes. TGI 3's closed form: the down projection's
/// moment holds gate_up and the product (3 × 117 440 512), the dequantised down weight
/// 4096 × 14 336 × 2 = 117 440 512, its hidden-row output 33 554 432 and the two
/// residual rows 67 108 864: 570 425 344 B, above the bf16 MLP's 536 870 912 (the
/// gate_up moment, 2 rows + its 234 881 024 B weight + the residual rows, equals it).
/// TGI 2.0's replay reserves more, never less, than in bf16.
#[test]
fn tgi_holds_bitsandbytes_dequantised_weights_in_its_warm_up() {
    let mlp = |extra: &[(&str, &str)], engine: &str| {
        let b = run(&llama_8b(extra), &with(&[("engine", engine)]));
        let l = b.lines.iter().find(|l| l.key == "activation_peak").unwrap();
        (l.inputs.get("mlp-rows").cloned(), l.bytes)
    };
    assert_eq!(mlp(&[], "tgi").0.as_deref(), Some("536870912"));
    assert_eq!(mlp(&[("format", "nf4")], "tgi").0.as_deref(), Some("570425344"));
    let bf16 = mlp(&[], "tgi@2.0").1;
    let nf4 = mlp(&[("format", "nf4")], "tgi@2.0").1;
    assert!(nf4 > bf16, "{nf4} ≤ {bf16}");
}

/// Llama-3.1-8B with `--quantize bitsandbytes` (8-bit), 4096 warm-up tokens: TGI 3's
/// closed form at gate_up's product, by hand: the two residual rows 67 108 864, its
/// bf16 output (2 intermediate rows) 234 881 024, the int8 rows 4096 × 4096 =
/// 16 777 216 and their scales 4096 × 4 = 16 384, the int32 product and its fp16
/// dequantisation 4096 × 28 672 × 6 = 704 643 072: 1 023 426 560 B. In fp16 the
/// dequantisation is the output (4 B a product value): 788 545 536 B. TGI 2.0's replay
/// reserves more than in bf16.
#[test]
fn tgi_holds_the_int8_matmul_scratch_in_its_warm_up() {
    let mlp = |extra: &[(&str, &str)], engine: &str| {
        let b = run(&llama_8b(extra), &with(&[("engine", engine)]));
        let l = b.lines.iter().find(|l| l.key == "activation_peak").unwrap();
        (l.inputs.get("mlp-rows").cloned(), l.bytes, b.assumptions.clone())
    };
    let (rows, _, said) = mlp(&[("format", "int8")], "tgi");
    assert_eq!(rows.as_deref(), Some("1023426560"));
    assert!(said.iter().any(|a| a.contains("outlier columns")), "{said:?}");
    let fp16 = mlp(&[("format", "int8"), ("compute-dtype", "fp16")], "tgi").0;
    assert_eq!(fp16.as_deref(), Some("788545536"));
    let bf16 = mlp(&[], "tgi@2.0").1;
    let (_, int8, said) = mlp(&[("format", "int8")], "tgi@2.0");
    assert!(int8 > bf16, "{int8} ≤ {bf16}");
    assert!(said.iter().any(|a| a.contains("older one")), "{said:?}");
}
