//! The engine rules' unit tests: hand derivations, parsing, the searches.

#![allow(clippy::arithmetic_side_effects)]

use super::*;
use crate::presets;

/// Llama-3.1-8B from its preset, bf16, plus extra pairs.
fn llama_8b(extra: &[(&str, &str)]) -> EstimateInput {
    let preset = presets::find("llama-3.1-8b").expect("preset");
    let pairs = preset.pairs.iter().copied().chain(extra.iter().copied());
    let (input, errors) = crate::params::from_pairs(pairs);
    assert!(errors.is_empty(), "{errors:?}");
    input
}

fn engine(pairs: &[(&str, &str)]) -> EngineParams {
    let (p, errors) = from_pairs(pairs.iter().copied());
    assert!(errors.is_empty(), "{errors:?}");
    p
}

fn run(input: &EstimateInput, pairs: &[(&str, &str)]) -> EngineBudget {
    let est = estimate(input).expect("estimate");
    budget(input, &est, &engine(pairs)).expect("budget")
}

fn bytes_of(b: &EngineBudget, key: &str) -> u64 {
    b.lines
        .iter()
        .find(|l| l.key == key)
        .unwrap_or_else(|| panic!("no line {key}"))
        .bytes
}

const H100: [(&str, &str); 3] = [
    ("card", "h100-sxm-80gb"),
    ("gpu-memory-utilization", "0.9"),
    ("max-model-len", "16000"),
];

fn with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    H100.iter().copied().chain(extra.iter().copied()).collect()
}

#[test]
fn fractions_parse_exactly_in_parts_per_10_18() {
    assert_eq!(parse_fraction("f", "0.9"), Ok(900_000_000_000_000_000));
    assert_eq!(parse_fraction("f", ".9"), Ok(900_000_000_000_000_000));
    assert_eq!(parse_fraction("f", "1"), Ok(ONE));
    assert_eq!(parse_fraction("f", "1.0"), Ok(ONE));
    // What vLLM accepts (a float64 printed in full) parses, exactly.
    assert_eq!(
        parse_fraction("f", "0.8938626454842437"),
        Ok(893_862_645_484_243_700)
    );
    assert_eq!(
        parse_fraction("f", "0.123456789012345678"),
        Ok(123_456_789_012_345_678)
    );
    for bad in [
        "0",
        "0.0",
        "1.5",
        "2",
        "0.1234567890123456789",
        "-0.5",
        "abc",
        "",
        ".",
        "0.9x",
        "10",
        "1.000000000000000001",
    ] {
        assert!(parse_fraction("f", bad).is_err(), "{bad:?} accepted");
    }
    assert_eq!(fraction_text(900_000_000_000_000_000), "0.9");
    assert_eq!(fraction_text(ONE), "1");
    assert_eq!(fraction_text(893_862_645_484_243_700), "0.8938626454842437");
    // ⌈x⌉ and ⌊x⌋ of a product with such a fraction.
    assert_eq!(times_fraction(10, 333_333_333_333_333_333, true), Ok(4));
    assert_eq!(times_fraction(10, 333_333_333_333_333_333, false), Ok(3));
}

#[test]
fn engine_pairs_collect_one_error_per_bad_field() {
    let (p, errors) = from_pairs([
        ("engine", "vllm@0.10.2"),
        ("card", "H100-SXM-80GB"),
        ("gpu-memory-utilization", "1.2"),
        ("max-model-len", "0"),
        ("max-num-seqs", "64"),
        ("cache-type-k", "q9_0"),
        ("card2", "x"),
    ]);
    assert_eq!(p.engine, Some(Engine::Vllm));
    assert_eq!(p.version, Some(VllmVersion::V010));
    assert_eq!(p.card.map(|c| c.id), Some("h100-sxm-80gb"));
    assert_eq!(p.max_num_seqs, Some(64));
    assert_eq!(p.gpu_memory_utilization, None);
    assert_eq!(errors.len(), 4, "{errors:?}");
    assert!(
        from_pairs([("engine", "ollama")]).1[0]
            .to_string()
            .contains("not an engine")
    );
    assert!(
        from_pairs([("engine", "vllm@0.12")]).1[0]
            .to_string()
            .contains("vllm@0.19")
    );
    assert!(from_pairs([("engine", "sglang@0.4")]).1.len() == 1);
    assert!(
        from_pairs([("card", "h100x")]).1[0]
            .to_string()
            .starts_with("card:")
    );
    let (auto, e) = from_pairs([("max-model-len", "auto"), ("enforce-eager", "true")]);
    assert!(e.is_empty() && auto.max_model_len_auto && auto.enforce_eager);
    assert_eq!(
        find_card("nvidia h100 sxm 80gb").map(|c| c.id),
        Some("h100-sxm-80gb")
    );
    for k in engine_keys() {
        assert!(is_engine_key(k));
        assert!(
            !crate::params::keys().any(|p| p == k),
            "{k} collides with a params key"
        );
    }
}

/// Llama-3.1-8B, bf16, H100 SXM 80GB, vLLM 0.19 at 0.9, max-model-len 16 000, by hand:
/// - total as torch reports it: 81 089 MiB = 85 027 979 264 B;
/// - requested: ⌈85 027 979 264 × 0.9⌉ = 76 525 181 338 B;
/// - weights: 8 030 261 248 × 2 B = 16 060 522 496 B (no max-position in the preset:
///   no rotary cache);
/// - profiling: forward of 8192 tokens 705 156 096 B (the estimator's); sampler phase
///   over 1024 rows: logits 1024 × 128 256 × 2 = 262 668 288, fp32 copy + probs + draws
///   1024 × 128 256 × 12 = 1 576 009 728, triton rows 132 × 128 256 × 4 = 67 719 168,
///   held hidden states (8192 + 2 × 1024) × 4096 × 2 = 83 886 080: 1 990 283 264;
///   + cuBLAS 32 MiB = 2 023 837 696 B;
/// - outside torch: 256 MiB = 268 435 456 B;
/// - KV = 76 525 181 338 − 16 060 522 496 − 2 023 837 696 − 268 435 456 = 58 172 385 690 B;
/// - blocks of 16 × 131 072 B: 27 738 → 443 808 tokens; 1000 blocks a sequence: 27.
#[test]
fn vllm_llama_8b_on_h100_matches_the_hand_derivation() {
    let b = run(&llama_8b(&[]), &with(&[("engine", "vllm")]));
    assert_eq!(b.version, "0.19");
    assert_eq!(b.capacity_bytes, 85_027_979_264);
    assert_eq!(b.capacity_kind, "torch");
    assert_eq!(bytes_of(&b, "budget"), 76_525_181_338);
    assert_eq!(bytes_of(&b, "weights"), 16_060_522_496);
    assert_eq!(bytes_of(&b, "activation_peak"), 2_023_837_696);
    assert_eq!(bytes_of(&b, "non_torch"), 268_435_456);
    assert_eq!(b.kv_capacity_bytes, 58_172_385_690);
    assert_eq!(b.kv_bytes_per_token, 131_072);
    assert_eq!(b.kv_capacity_tokens, 443_808);
    assert_eq!(b.max_sequences, 27);
    assert_eq!(b.outcome, Outcome::Fits);
    // The CUDA-graph line is shown, not subtracted, in 0.19; gone with --enforce-eager.
    let g = b.lines.iter().find(|l| l.key == "cuda_graphs").unwrap();
    assert!(!g.subtracted);
    let eager = run(
        &llama_8b(&[]),
        &with(&[("engine", "vllm"), ("enforce-eager", "true")]),
    );
    assert!(eager.lines.iter().all(|l| l.key != "cuda_graphs"));
    assert_eq!(eager.kv_capacity_bytes, b.kv_capacity_bytes);
    for l in &b.lines {
        assert!(!l.source.is_empty(), "{}", l.key);
    }
    // 0.10 sorts the vocabulary (38 B a row element) and truncates the share.
    let old = run(&llama_8b(&[]), &with(&[("engine", "vllm@0.10")]));
    assert_eq!(old.version, "0.10");
    assert_eq!(bytes_of(&old, "budget"), 76_525_181_337);
    let sort = 1024 * 128_256 * 2 + 1024 * 128_256 * 36 + (8192 + 2048) * 4096 * 2;
    assert_eq!(bytes_of(&old, "activation_peak"), sort + 32 * MIB);
}

#[test]
fn vllm_without_room_is_refused_and_near_zero_is_borderline() {
    // 0.2 × 85 027 979 264 = 17 005 595 853 B < weights + profile + outside torch.
    let b = run(
        &llama_8b(&[]),
        &with(&[("engine", "vllm"), ("gpu-memory-utilization", "0.2")]),
    );
    assert!(b.kv_capacity_bytes < 0);
    assert_eq!((b.kv_capacity_tokens, b.max_sequences), (0, 0));
    assert_eq!(b.outcome, Outcome::Refused);
    assert!(b.warnings.iter().any(|w| w.contains("No available memory")));
    // Find the utilisation at which one 16 000-token sequence just fits: within the
    // band it is borderline, never "fits".
    let need = 1000 * 2_097_152i64;
    let mut seen = false;
    for u in 2200..=2600 {
        let f = format!("0.{u:04}");
        let b = run(
            &llama_8b(&[]),
            &with(&[("engine", "vllm"), ("gpu-memory-utilization", &f)]),
        );
        let m = b.kv_capacity_bytes - need;
        assert_eq!(b.margin_bytes, m);
        let unc = b.uncertainty_bytes as i64;
        let want = if b.kv_capacity_bytes <= 0 || m < -unc {
            Outcome::Refused
        } else if m <= unc {
            Outcome::Borderline
        } else {
            Outcome::Fits
        };
        assert_eq!(b.outcome, want, "{f}");
        seen |= want == Outcome::Borderline;
    }
    assert!(seen);
}

/// Gemma-3's layout: 8 full and 40 sliding layers → 6 groups of 8 layers; "GPU KV
/// cache size" = ⌊⌊pool ÷ (16 × per-layer × 8)⌋ ÷ 6⌋ × 16 (kv_cache_utils.py).
#[test]
fn vllm_hybrid_groups_follow_the_allocator() {
    let pairs = [
        ("layers", "48"),
        ("hidden", "3840"),
        ("heads", "16"),
        ("kv-heads", "8"),
        ("head-dim", "256"),
        ("intermediate", "15360"),
        ("vocab", "262208"),
        ("sliding-window", "1024"),
        ("sliding-layers", "40"),
    ];
    let (input, e) = crate::params::from_pairs(pairs);
    assert!(e.is_empty(), "{e:?}");
    let b = run(
        &input,
        &with(&[("engine", "vllm"), ("max-model-len", "8192")]),
    );
    let page = 16 * 8192u64 * 8;
    let blocks = b.kv_capacity_bytes as u64 / page;
    assert_eq!(b.kv_capacity_tokens, blocks / 6 * 16);
    // A request: 1 full group × 512 blocks + 5 sliding groups × (⌈(1023 + 8192) ÷ 16⌉ + 1).
    assert_eq!(
        b.max_sequences,
        blocks / (512 + 5 * (8192u64.div_ceil(16) + 1))
    );
}

/// SGLang's own default on an H100 at tp 1: reserved = 512 + 8192 × 1.5 + 1 ÷ 8 ×
/// 1024 + 256 × 2 = 13 440 MiB; fraction = round((81 559 − 13 440) ÷ 81 559, 3) = 0.835.
/// pre_model_load_memory = torch's 85 027 979 264 − 512 MiB = 84 491 108 352; KV =
/// 84 491 108 352 − 16 060 522 496 − ⌊84 491 108 352 × 0.165⌋ (13 941 032 878) =
/// 54 489 552 978 B → ÷ 131 072 = 415 722 tokens.
#[test]
fn sglang_defaults_its_fraction_by_card_and_tp() {
    assert_eq!(
        sglang::default_fraction(81_559, 1, 1, None),
        (835 * (ONE / 1000), 8192)
    );
    assert_eq!(
        sglang::default_fraction(81_559, 4, 1, None).0,
        824 * (ONE / 1000)
    );
    let b = run(&llama_8b(&[]), &with(&[("engine", "sglang")]));
    assert_eq!(bytes_of(&b, "reserved"), 13_941_032_878);
    assert_eq!(b.kv_capacity_bytes, 54_489_552_978);
    assert_eq!(b.kv_capacity_tokens, 415_722);
    assert!(b.assumptions.iter().any(|a| a.contains("0.835")));
    let given = run(
        &llama_8b(&[]),
        &with(&[("engine", "sglang"), ("mem-fraction-static", "0.88")]),
    );
    assert_eq!(bytes_of(&given, "reserved"), 10_138_933_002);
}

/// TGI: wiggle room ⌊total × 0.1⌋ = 8 552 080 998 B; warmup of 4096 tokens
/// 352 834 560 B; KV = 85 520 809 984 − 536 870 912 − 16 060 522 496 − 352 834 560
/// − 8 552 080 998 = 60 018 501 018 B → 28 619 blocks of 16 → 457 904 tokens, 28 sequences.
#[test]
fn tgi_keeps_its_wiggle_room() {
    let b = run(&llama_8b(&[]), &with(&[("engine", "tgi")]));
    assert_eq!(bytes_of(&b, "wiggle_room"), 8_552_080_998);
    assert_eq!(b.kv_capacity_bytes, 60_018_501_018);
    assert_eq!(b.kv_capacity_tokens, 457_904);
    assert_eq!(b.max_sequences, 28);
}

/// llama.cpp: 16 000 cells pad to 16 128; per layer and cell K + V of 1024 values:
/// f16 4096 B, q8_0 2 × 32 × 34 = 2176 B, q4_0 2 × 32 × 18 = 1152 B; × 32 layers.
/// Model buffer: weights less the token embeddings (128 256 × 4096 × 2): 15 009 849 344;
/// compute buffer (3 × 14 336 + 2 × 4096) × 512 × 4 = 104 857 600 (100 MiB).
#[test]
fn llama_cpp_allocates_its_cache_in_block_formats() {
    for (t, cell) in [
        ("f16", 4096u64),
        ("q8_0", 2176),
        ("q4_0", 1152),
        ("q5_1", 1536),
        ("iq4_nl", 1152),
    ] {
        let b = run(
            &llama_8b(&[]),
            &with(&[
                ("engine", "llama.cpp"),
                ("cache-type-k", t),
                ("cache-type-v", t),
            ]),
        );
        assert_eq!(b.kv_cache_bytes, Some(16_128 * 32 * cell), "{t}");
        assert_eq!(bytes_of(&b, "weights"), 15_009_849_344);
        assert_eq!(bytes_of(&b, "compute_buffer"), 104_857_600);
        let room = 85_520_809_984i64 - 536_870_912 - 15_009_849_344 - 104_857_600 - 1_073_741_824;
        assert_eq!(b.kv_capacity_bytes, room);
        assert_eq!(b.outcome, Outcome::Fits);
    }
    // Half the layers on the GPU: half the model buffer and half the cache.
    let half = run(
        &llama_8b(&[]),
        &with(&[("engine", "llama.cpp"), ("n-gpu-layers", "16")]),
    );
    assert_eq!(half.kv_cache_bytes, Some(16_128 * 16 * 4096));
    assert_eq!(bytes_of(&half, "weights"), 15_009_849_344 / 2);
    assert!(CacheType::Q8_0.row_bytes(100).is_err());
}

/// Phi-3's window is on every layer: llama.cpp runs it without SWA (a full cache);
/// Gemma-2's alternates: its sliding layers keep ⌈(4096 + 512) ÷ 256⌉ × 256 cells.
#[test]
fn llama_cpp_swa_only_where_windows_alternate() {
    let base = [
        ("layers", "42"),
        ("hidden", "3584"),
        ("heads", "16"),
        ("kv-heads", "8"),
        ("head-dim", "256"),
        ("intermediate", "14336"),
        ("vocab", "256000"),
        ("sliding-window", "4096"),
    ];
    let gemma: Vec<_> = base
        .iter()
        .copied()
        .chain([("sliding-layers", "21")])
        .collect();
    let (g, _) = crate::params::from_pairs(gemma);
    let b = run(
        &g,
        &with(&[("engine", "llama.cpp"), ("max-model-len", "32768")]),
    );
    let cell = 2 * 8 * 256 * 2u64;
    assert_eq!(
        b.kv_cache_bytes,
        Some(32_768 * 21 * cell + 4608 * 21 * cell)
    );
    // Two slots: 16 384 cells each, and each slot's sliding cache 4096 + 512 → 4608.
    let mut two = g.clone();
    two.sequences = 2;
    let b = run(
        &two,
        &with(&[("engine", "llama.cpp"), ("max-model-len", "32768")]),
    );
    assert_eq!(
        b.kv_cache_bytes,
        Some(2 * 16_384 * 21 * cell + 2 * 4608 * 21 * cell)
    );
    // Quantised types: the sliding layers' cells stay f16 (llama.cpp PR 21277).
    let b = run(
        &g,
        &with(&[
            ("engine", "llama.cpp"),
            ("max-model-len", "32768"),
            ("cache-type-k", "q8_0"),
            ("cache-type-v", "q8_0"),
        ]),
    );
    assert_eq!(
        b.kv_cache_bytes,
        Some(32_768 * 21 * (2 * 64 * 34) + 4608 * 21 * cell)
    );
    let (all, _) = crate::params::from_pairs(base);
    let b = run(
        &all,
        &with(&[("engine", "llama.cpp"), ("max-model-len", "32768")]),
    );
    assert_eq!(b.kv_cache_bytes, Some(32_768 * 42 * cell));
}

#[test]
fn budget_needs_a_card_a_length_and_a_kv_shape() {
    let input = llama_8b(&[]);
    let est = estimate(&input).unwrap();
    let e = budget(&input, &est, &engine(&[("engine", "vllm")])).unwrap_err();
    assert!(e.to_string().starts_with("card:"), "{e}");
    let e = budget(
        &input,
        &est,
        &engine(&[("engine", "vllm"), ("card", "h100-sxm-80gb")]),
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("max-model-len:"), "{e}");
    let (no_shape, _) = crate::params::from_pairs([("parameters", "8e9")]);
    let est = estimate(&no_shape).unwrap();
    let e = budget(
        &no_shape,
        &est,
        &engine(&[
            ("engine", "vllm"),
            ("card", "h100-sxm-80gb"),
            ("max-model-len", "100"),
        ]),
    )
    .unwrap_err();
    assert!(e.to_string().contains("KV cache's shape"), "{e}");
}

#[test]
fn per_card_rows_match_single_card_budgets() {
    let input = llama_8b(&[]);
    let est = estimate(&input).unwrap();
    let p = engine(&[("engine", "vllm"), ("max-model-len", "16000")]);
    let rows = budget_per_card(&input, &est, &p).unwrap();
    assert_eq!(rows.len(), CATALOGUE.len());
    let h100 = rows.iter().find(|r| r.id == "h100-sxm-80gb").unwrap();
    assert_eq!(h100.kv_capacity_bytes, 58_172_385_690);
    let t4 = rows.iter().find(|r| r.id == "t4-16gb").unwrap();
    assert!(t4.kv_capacity_bytes < 0 && t4.max_sequences == 0 && t4.outcome == Outcome::Refused);
}

/// vLLM's A100 exception: 2048 batched tokens and 256 sequences, and torch's A100
/// 80GB total (85 093 777 408 B); a card without a public torch total is derived.
#[test]
fn vllm_defaults_and_card_totals() {
    let b = run(
        &llama_8b(&[]),
        &[
            ("engine", "vllm"),
            ("card", "a100-80gb"),
            ("max-model-len", "4096"),
        ],
    );
    assert_eq!(b.capacity_bytes, 85_093_777_408);
    assert!(b.assumptions.iter().any(|a| a.contains("max-num-seqs 256")));
    let d = run(
        &llama_8b(&[]),
        &[
            ("engine", "vllm"),
            ("card", "h100-pcie-80gb"),
            ("max-model-len", "4096"),
        ],
    );
    assert_eq!(d.capacity_kind, "torch, derived");
    assert!(d.capacity_bytes < find_card("h100-pcie-80gb").unwrap().capacity().0);
}

/// --kv-cache-memory-bytes is the pool; --enable-lora adds max_loras × rank × per-layer
/// widths: 32 layers × 16 × (7 × 4096 + 2 × 4096 + 2 × 1024 + 3 × 14 336) × 2 B.
#[test]
fn vllm_knobs() {
    let b = run(
        &llama_8b(&[]),
        &with(&[("engine", "vllm"), ("kv-cache-memory-bytes", "10000000000")]),
    );
    assert_eq!(b.kv_capacity_bytes, 10_000_000_000);
    let l = run(
        &llama_8b(&[]),
        &with(&[("engine", "vllm"), ("enable-lora", "true")]),
    );
    assert_eq!(
        bytes_of(&l, "lora"),
        32 * 16 * (7 * 4096 + 2 * 4096 + 2 * 1024 + 3 * 14_336) * 2
    );
    let plain = run(&llama_8b(&[]), &with(&[("engine", "vllm")]));
    assert_eq!(
        plain.kv_capacity_bytes - l.kv_capacity_bytes,
        bytes_of(&l, "lora") as i64
    );
}

fn need(input: &EstimateInput) -> u64 {
    estimate(input).unwrap().per_device_bytes
}

#[test]
fn largest_context_is_exact_to_the_token() {
    let card = &find_card("h100-sxm-80gb").unwrap();
    let cap = card.capacity().0;
    for seqs in ["1", "8", "64"] {
        let input = llama_8b(&[("sequences", seqs), ("generate", "100")]);
        let n = largest_context(&input, card).expect("fits");
        let at = |c: u64| {
            let mut i = input.clone();
            i.context = Some(c);
            need(&i)
        };
        assert!(at(n) <= cap, "{seqs}: {n} should fit");
        assert!(at(n + 1) > cap, "{seqs}: {} should not fit", n + 1);
    }
}

#[test]
fn most_sequences_is_exact_and_none_when_nothing_fits() {
    let card = &find_card("h100-sxm-80gb").unwrap();
    let cap = card.capacity().0;
    let input = llama_8b(&[("context", "16000")]);
    let n = most_sequences(&input, card).expect("fits");
    let at = |s: u64| {
        let mut i = input.clone();
        i.sequences = s;
        need(&i)
    };
    assert!(at(n) <= cap && at(n + 1) > cap, "{n}");
    assert_eq!(most_sequences(&llama_8b(&[]), card), None);
    let t4 = &find_card("t4-16gb").unwrap();
    assert_eq!(largest_context(&input, t4), None);
    let l = largest(&input, card, &EngineParams::default());
    assert_eq!((l.basis.as_str(), l.most_sequences), ("estimate", Some(n)));
}

/// With an engine, one answer: its pool's sequences, and the longest max-model-len
/// one sequence of which it serves, capped at the trained positions.
#[test]
fn largest_with_an_engine_is_the_engines_answer() {
    let card = &find_card("h100-sxm-80gb").unwrap();
    let input = llama_8b(&[("context", "16000"), ("max-position", "131072")]);
    let p = engine(&[("engine", "vllm"), ("gpu-memory-utilization", "0.9")]);
    let l = largest(&input, card, &p);
    assert_eq!(l.basis, "vllm");
    let est = estimate(&input).unwrap();
    let b = budget(
        &input,
        &est,
        &EngineParams {
            card: Some(*card),
            ..p.clone()
        },
    )
    .unwrap();
    assert_eq!(l.most_sequences, Some(b.max_sequences));
    assert_eq!(l.largest_context, Some(131_072));
    assert!(!l.beyond_trained);
    // At 0.25 the pool is short: the longest served is where one sequence's blocks fit.
    let p = engine(&[("engine", "vllm"), ("gpu-memory-utilization", "0.25")]);
    let l = largest(&input, card, &p);
    let m = l.largest_context.expect("some length fits");
    let at = |m: u64| {
        budget(
            &input,
            &est,
            &EngineParams {
                card: Some(*card),
                max_model_len: Some(m),
                ..p.clone()
            },
        )
        .unwrap()
    };
    assert!(
        at(m).fits_one_sequence && !at(m + 1).fits_one_sequence,
        "{m}"
    );
    // Without an engine, a context past the trained positions is flagged.
    let small = llama_8b(&[("max-position", "4096")]);
    let l = largest(&small, card, &EngineParams::default());
    assert!(l.beyond_trained);
    assert!(
        l.positions_note()
            .unwrap()
            .contains("declares no RoPE scaling")
    );
}

/// A config's RoPE scaling (yarn ×4 over 32 768, as Qwen2.5's card adds) lets vLLM
/// derive a longer max-model-len: the engine's search and `auto` go that far, and a
/// context within it is not flagged.
#[test]
fn rope_scaling_extends_what_an_engine_serves() {
    let card = &find_card("h100-sxm-80gb").unwrap();
    let trained = llama_8b(&[("context", "1000"), ("max-position", "32768")]);
    let scaled = llama_8b(&[
        ("context", "1000"),
        ("max-position", "32768"),
        ("rope-positions", "131072"),
    ]);
    let p = engine(&[("engine", "vllm")]);
    let l = largest(&trained, card, &p);
    assert_eq!(l.largest_context, Some(32_768));
    assert!(
        l.positions_note()
            .unwrap()
            .starts_with("capped at the 32 768 positions it was trained")
    );
    let l = largest(&scaled, card, &p);
    assert_eq!(l.largest_context, Some(131_072));
    assert!(
        l.positions_note()
            .unwrap()
            .contains("131 072 positions its RoPE scaling reaches")
    );
    let auto = engine(&[("engine", "vllm"), ("max-model-len", "auto")]);
    let est = estimate(&scaled).unwrap();
    let at = |i: &EstimateInput| {
        budget(
            i,
            &est,
            &EngineParams {
                card: Some(*card),
                ..auto.clone()
            },
        )
        .unwrap()
        .max_model_len
    };
    assert_eq!((at(&trained), at(&scaled)), (32_768, 131_072));
    // Without an engine: past 32 768 within the scaling is said, not flagged.
    let l40s = &find_card("l40s-48gb").unwrap();
    let none = largest(&scaled, l40s, &EngineParams::default());
    assert!(!none.beyond_trained);
    assert!(
        none.positions_note()
            .unwrap()
            .starts_with("past the 32 768 trained positions")
    );
    let mut long = scaled.clone();
    long.context = Some(100_000);
    let e = estimate(&long).unwrap();
    assert!(e.warnings.iter().all(|w| !w.contains("positions")));
    long.context = Some(140_000);
    let e = estimate(&long).unwrap();
    assert!(
        e.warnings
            .iter()
            .any(|w| w.contains("131072 positions the config's RoPE scaling reaches"))
    );
}

/// gpt-oss-20b's experts in MXFP4 at tp 2: each rank's 1440 intermediate pads to 1472
/// (vLLM's triton MXFP4 backend on Hopper): 3 × 2880 × 32 × 32 experts × 24 layers
/// values = 212 336 640, at 17 B per 32 = 112 803 840 B more than the checkpoint's share.
#[test]
fn vllm_pads_mxfp4_experts_per_rank() {
    let pairs = [
        ("layers", "24"),
        ("hidden", "2880"),
        ("heads", "64"),
        ("kv-heads", "8"),
        ("head-dim", "64"),
        ("intermediate", "2880"),
        ("vocab", "201088"),
        ("experts", "32"),
        ("active-experts", "4"),
        ("format", "mxfp4"),
        ("tp", "2"),
        ("gpus", "2"),
    ];
    let (input, e) = crate::params::from_pairs(pairs);
    assert!(e.is_empty(), "{e:?}");
    let b = run(&input, &with(&[("engine", "vllm")]));
    let w = b.lines.iter().find(|l| l.key == "weights").unwrap();
    assert_eq!(w.inputs["mxfp4-padding"], "112803840");
    let (tp1, _) = crate::params::from_pairs(
        pairs
            .iter()
            .copied()
            .filter(|(k, _)| *k != "tp" && *k != "gpus"),
    );
    let b = run(&tp1, &with(&[("engine", "vllm")]));
    let w = b.lines.iter().find(|l| l.key == "weights").unwrap();
    assert_eq!(w.inputs["mxfp4-padding"], "0");
}

#[test]
fn a_sparse_attention_models_indexer_keys_take_pool_room_per_token() {
    // DeepSeek-V3.2 (tests/cases): each token in vLLM's pool holds the MLA latent and
    // the indexer's key (DeepseekV32IndexerCache), so the pool's tokens are fewer than
    // the latent alone would give.
    let imported = crate::import::config::parse_config(include_str!(
        "../../tests/cases/configs/deepseek-v3.2.json"
    ))
    .expect("config");
    let pairs: Vec<(&str, String)> = imported.pairs();
    let extra = [("tp", "8"), ("gpus", "8"), ("context", "8192")];
    let all = pairs
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .chain(extra.iter().copied());
    let (input, errors) = crate::params::from_pairs(all);
    assert!(errors.is_empty(), "{errors:?}");
    let one = estimate(&EstimateInput {
        context: Some(1),
        ..input.clone()
    })
    .expect("estimate");
    let of = |key: LineKey| {
        one.lines
            .iter()
            .find(|l| l.key == key)
            .map(|l| l.device_bytes)
            .unwrap_or(0)
    };
    let (latent, indexer) = (of(LineKey::KvCache), of(LineKey::KvCacheIndexer));
    assert!(
        latent > 0 && indexer > 0,
        "latent {latent}, indexer {indexer}"
    );
    let b = run(&input, &[("engine", "vllm"), ("card", "h200-141gb")]);
    assert_eq!(b.kv_bytes_per_token, latent + indexer);
}

/// Gemma-4-31B's shape: 50 sliding layers (16 KV heads × 256) and 10 global ones
/// (4 KV heads × 512). vLLM unifies the page sizes (`unify_kv_cache_spec_page_size`):
/// a sliding page is 16 tokens × 16 384 B, a global layer's 8 192 B per token take
/// 32-token blocks of the same 262 144 B. Six groups of ten layers; one request of
/// 8 192 tokens takes 8 192 / 32 = 256 global blocks and 5 × (8 192 / 16 + 1) sliding
/// ones; the pool reports 16 tokens per block of every group.
#[test]
fn vllm_unifies_the_page_of_layers_with_another_kv_shape() {
    let pairs = [
        ("layers", "60"),
        ("hidden", "5376"),
        ("heads", "32"),
        ("kv-heads", "16"),
        ("head-dim", "256"),
        ("intermediate", "21504"),
        ("vocab", "262144"),
        ("sliding-window", "1024"),
        ("sliding-layers", "50"),
        ("global-layers", "10"),
        ("global-kv-heads", "4"),
        ("global-head-dim", "512"),
        ("global-k-eq-v", "true"),
        ("tied-embeddings", "true"),
    ];
    let (input, errors) = crate::params::from_pairs(pairs.iter().copied());
    assert!(errors.is_empty(), "{errors:?}");
    let b = run(
        &input,
        &with(&[("engine", "vllm"), ("max-model-len", "8192")]),
    );
    assert_eq!(b.kv_bytes_per_token, 50 * 16_384 + 10 * 8_192);
    let group_block = 16 * 16_384 * 10;
    let blocks = u64::try_from(b.kv_capacity_bytes).unwrap() / group_block;
    assert_eq!(b.kv_capacity_tokens, blocks / 6 * 16);
    let per_request = 256 + 5 * (512 + 1);
    assert_eq!(b.max_sequences, blocks / per_request);
    assert!(b.assumptions.iter().any(|a| a.contains("6 groups")));
}
