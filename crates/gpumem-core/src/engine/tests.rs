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
    assert!(from_pairs([("engine", "sglang@0.3")]).1.len() == 1);
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
    let b = run(&llama_8b(&[]), &with(&[("engine", "vllm@0.19")]));
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
        &with(&[("engine", "vllm@0.19"), ("enforce-eager", "true")]),
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
        &with(&[("engine", "vllm@0.19"), ("max-model-len", "8192")]),
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
    // -ngl: llama_cpp_ngl_places_the_output_layer_first.
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
    let p = engine(&[("engine", "vllm@0.19"), ("max-model-len", "16000")]);
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
/// values = 212 336 640, at 17 B per 32 = 112 803 840 B, and the w13 biases' 2 × 32
/// values × 32 × 24 in bf16 = 98 304 B more than the checkpoint's share. On an A100
/// (Marlin) at tp 1, 2880 × 2880 pads to 3072 × 2944: 3 × (3072 × 2944 − 2880²) × 32 ×
/// 24 = 1 727 004 672 values → 917 471 232 B, and (2 × 64 + 192) × 32 × 24 bias values
/// in bf16 = 491 520 B.
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
    assert_eq!(w.inputs["mxfp4-padding"], "112902144");
    let (tp1, _) = crate::params::from_pairs(
        pairs
            .iter()
            .copied()
            .filter(|(k, _)| *k != "tp" && *k != "gpus"),
    );
    let b = run(&tp1, &with(&[("engine", "vllm")]));
    let w = b.lines.iter().find(|l| l.key == "weights").unwrap();
    assert_eq!(w.inputs["mxfp4-padding"], "0");
    let b = run(
        &tp1,
        &[
            ("engine", "vllm@0.19"),
            ("card", "a100-80gb"),
            ("max-model-len", "16000"),
        ],
    );
    let w = b.lines.iter().find(|l| l.key == "weights").unwrap();
    assert_eq!(w.inputs["mxfp4-padding"], "917962752");
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

/// An input from a config.json of the test cases, in `format`, plus extra pairs.
fn from_config(file: &str, extra: &[(&str, &str)]) -> EstimateInput {
    let path = format!(
        "{}/tests/cases/configs/{file}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    #[allow(clippy::disallowed_methods)] // a test's fixture, not the core's I/O
    let text = std::fs::read_to_string(path).expect("config");
    let cfg = crate::import::config::parse_config(&text).expect("config");
    let pairs = cfg.pairs();
    let (input, errors) = crate::params::from_pairs(
        pairs
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .chain(extra.iter().copied()),
    );
    assert!(errors.is_empty(), "{errors:?}");
    input
}

fn preset(id: &str, extra: &[(&str, &str)]) -> EstimateInput {
    let p = presets::find(id).expect("preset");
    let (input, errors) =
        crate::params::from_pairs(p.pairs.iter().copied().chain(extra.iter().copied()));
    assert!(errors.is_empty(), "{errors:?}");
    input
}

fn gguf_list(input: &EstimateInput) -> Vec<tensors::GgufTensor> {
    let formats = crate::estimate::module_formats(input).expect("formats");
    tensors::gguf_tensors(&input.arch.expect("arch"), &formats).expect("tensors")
}

/// The tensor list holds the estimate's weights to the byte, whatever the family
/// (dense, MoE with shared experts and leading dense blocks, MLA and MTP, hybrids,
/// biases and sinks, Gemma's four norms, tied embeddings), in bf16 and in a block format.
#[test]
fn gguf_tensors_sum_to_the_estimates_weights() {
    let mut inputs: Vec<(String, EstimateInput)> = Vec::new();
    for id in [
        "llama-3.1-8b",
        "llama-3.2-1b",
        "mixtral-8x7b",
        "qwen1.5-moe-a2.7b",
        "gemma-2-9b",
        "falcon-7b",
        "gpt-oss-20b",
        "deepseek-v3",
        "llama-4-scout",
    ] {
        for format in ["bf16", "q4_k", "q4_k_m", "q3_k_m"] {
            inputs.push((format!("{id} {format}"), preset(id, &[("format", format)])));
        }
    }
    for file in [
        "qwen3-30b-a3b",
        "qwen3-next-80b-a3b",
        "jamba-1.5-mini",
        "nemotron-3-nano-30b-a3b",
        "gemma-4-31b",
        "deepseek-v3.2",
    ] {
        inputs.push((file.to_string(), from_config(file, &[])));
    }
    for (what, input) in &inputs {
        let est = estimate(input).expect("estimate");
        let list = gguf_list(input);
        let sum: u64 = list.iter().filter(|t| !t.duplicate).map(|t| t.bytes).sum();
        assert_eq!(sum, est.weights_bytes, "{what}");
    }
}

/// Names and sizes as llama.cpp loads them: Llama-3.1-8B (dense, 9 tensors a block),
/// Mixtral-8x7B (the 8 experts of a projection in one 3-D tensor) and Qwen3-30B-A3B
/// (q/k norms, 128 experts), in bf16.
#[test]
fn gguf_tensor_names_and_bytes() {
    let llama = gguf_list(&llama_8b(&[]));
    assert_eq!(llama.len(), 1 + 32 * 9 + 2);
    let names: Vec<String> = llama.iter().take(12).map(|t| t.name()).collect();
    assert_eq!(names[0], "token_embd.weight");
    assert!(
        names.contains(&"blk.0.attn_q.weight".to_string()),
        "{names:?}"
    );
    let find = |l: &[tensors::GgufTensor], n: &str| {
        l.iter()
            .find(|t| t.name() == n)
            .unwrap_or_else(|| panic!("no {n}"))
            .bytes
    };
    assert_eq!(find(&llama, "blk.31.ffn_down.weight"), 14_336 * 4096 * 2);
    assert_eq!(find(&llama, "blk.7.attn_k.weight"), 1024 * 4096 * 2);
    assert_eq!(find(&llama, "output.weight"), 128_256 * 4096 * 2);
    assert_eq!(find(&llama, "output_norm.weight"), 4096 * 2);

    // Q4_K_M: attn_v and ffn_down in Q6_K where llama-quant.cpp's use_more_bits
    // picks the block (0-3, 6, 9, …, 27, 28-31), else Q4_K; output in Q6_K.
    let q = gguf_list(&llama_8b(&[("format", "q4_k_m")]));
    let q4 = |r: u64, c: u64| r * c / 256 * 144;
    let q6 = |r: u64, c: u64| r * c / 256 * 210;
    assert_eq!(find(&q, "blk.3.attn_v.weight"), q6(1024, 4096));
    assert_eq!(find(&q, "blk.4.attn_v.weight"), q4(1024, 4096));
    assert_eq!(find(&q, "blk.6.ffn_down.weight"), q6(4096, 14_336));
    assert_eq!(find(&q, "blk.7.ffn_down.weight"), q4(4096, 14_336));
    assert_eq!(find(&q, "blk.7.attn_q.weight"), q4(4096, 4096));
    assert_eq!(find(&q, "output.weight"), q6(128_256, 4096));
    assert_eq!(find(&q, "token_embd.weight"), q4(128_256, 4096));

    let mixtral = gguf_list(&preset("mixtral-8x7b", &[]));
    assert_eq!(mixtral.len(), 3 + 32 * 10);
    assert_eq!(
        find(&mixtral, "blk.0.ffn_gate_exps.weight"),
        8 * 14_336 * 4096 * 2
    );
    assert_eq!(find(&mixtral, "blk.31.ffn_gate_inp.weight"), 8 * 4096 * 2);
    assert_eq!(mixtral.iter().filter(|t| t.is_routed_expert()).count(), 96);

    let qwen = gguf_list(&from_config("qwen3-30b-a3b", &[]));
    assert_eq!(qwen.len(), 3 + 48 * 12);
    assert_eq!(
        find(&qwen, "blk.47.ffn_down_exps.weight"),
        128 * 2048 * 768 * 2
    );
    assert_eq!(find(&qwen, "blk.3.attn_k_norm.weight"), 128 * 2);

    // gpt-oss: biases on every projection (the experts' merged too), the router's
    // bias and the attention sinks.
    let oss = gguf_list(&preset("gpt-oss-20b", &[]));
    for n in [
        "blk.0.attn_sinks.weight",
        "blk.0.attn_q.bias",
        "blk.0.attn_output.bias",
        "blk.0.ffn_gate_inp.bias",
        "blk.23.ffn_down_exps.bias",
    ] {
        find(&oss, n);
    }
    assert_eq!(find(&oss, "blk.1.ffn_up_exps.bias"), 32 * 2880 * 2);
    // DeepSeek-V3: MLA, three dense blocks before the MoE ones, a shared expert, the
    // router's fp32 correction bias; its MTP layer is counted outside the blocks.
    let ds = gguf_list(&preset("deepseek-v3", &[]));
    find(&ds, "blk.2.ffn_gate.weight");
    find(&ds, "blk.3.ffn_gate_shexp.weight");
    find(&ds, "blk.60.attn_kv_a_mqa.weight");
    assert_eq!(find(&ds, "blk.3.exp_probs_b.bias"), 256 * 4);
    assert!(!ds.iter().any(|t| t.name() == "blk.2.ffn_gate_exps.weight"));
    assert!(ds.iter().all(|t| t.named || t.slot == tensors::Slot::Extra));
}

/// The model buffer in llama.cpp's placement, derived by hand for Llama-3.1-8B in
/// bf16: a block is q, o 4096² + k, v 1024 × 4096 + gate, up, down 14 336 × 4096 +
/// two norms, × 2 B = 436 224 000 B; the output layer 128 256 × 4096 × 2 + 4096 × 2 =
/// 1 050 681 344 B; the token embeddings 1 050 673 152 B stay on the host.
/// `-ngl 16` (i_gpu_start = 33 − 16 = 17): the output layer and blocks 17–31.
#[test]
fn llama_cpp_ngl_places_the_output_layer_first() {
    let block = 436_224_000u64;
    let out = 1_050_681_344u64;
    let embd = 1_050_673_152u64;
    let full = run(&llama_8b(&[]), &with(&[("engine", "llama.cpp")]));
    assert_eq!(bytes_of(&full, "weights"), 32 * block + out);
    assert_eq!(full.host_weights_bytes, Some(embd));
    let part = run(
        &llama_8b(&[]),
        &with(&[("engine", "llama.cpp"), ("n-gpu-layers", "16")]),
    );
    assert_eq!(bytes_of(&part, "weights"), 15 * block + out);
    assert_eq!(part.host_weights_bytes, Some(embd + 17 * block));
    assert_eq!(part.kv_cache_bytes, Some(16_128 * 15 * 4096));
    // -ngl 32 = n leaves block 0 on the host; 33 = n + 1 is full offload.
    let n = run(
        &llama_8b(&[]),
        &with(&[("engine", "llama.cpp"), ("n-gpu-layers", "32")]),
    );
    assert_eq!(bytes_of(&n, "weights"), 31 * block + out);
    let n1 = run(
        &llama_8b(&[]),
        &with(&[("engine", "llama.cpp"), ("n-gpu-layers", "33")]),
    );
    assert_eq!(bytes_of(&n1, "weights"), bytes_of(&full, "weights"));
}

/// Tied embeddings (Llama-3.2-1B): llama.cpp loads `token_embd.weight` again as the
/// output, in the output layer's buffer on the card; the host keeps the original.
#[test]
fn llama_cpp_tied_output_is_a_second_copy_on_the_card() {
    let input = preset("llama-3.2-1b", &[]);
    let est = estimate(&input).expect("estimate");
    let embd = 128_256 * 2048 * 2;
    let b = run(&input, &with(&[("engine", "llama.cpp")]));
    assert_eq!(bytes_of(&b, "weights"), est.weights_bytes);
    assert_eq!(b.host_weights_bytes, Some(embd));
}

/// `-ot "\.ffn_.*_exps\.=CPU"` is `--cpu-moe` (every block's routed experts; llama.cpp
/// implements it as the one rule `\.ffn_(up|down|gate|gate_up)_(ch|)exps` → CPU, which
/// `--n-cpu-moe` at the block count equals); a block-range pattern is `--n-cpu-moe N`
/// (llama.cpp's own rules `blk\.i\.ffn_…_exps` for i < N); Mixtral's experts in
/// bf16 are 3 × 939 524 096 B a block.
#[test]
fn llama_cpp_override_tensor_equals_cpu_moe_and_n_cpu_moe() {
    let input = preset("mixtral-8x7b", &[]);
    let per_block = 3 * 939_524_096u64;
    let llama = |extra: &[(&str, &str)]| {
        let mut pairs = with(&[("engine", "llama.cpp")]);
        pairs.extend_from_slice(extra);
        run(&input, &pairs)
    };
    let plain = llama(&[]);
    let all_ot = llama(&[("override-tensor", "\\.ffn_.*_exps\\.=CPU")]);
    let all_ncm = llama(&[("n-cpu-moe", "32")]);
    let stock = llama(&[(
        "override-tensor",
        "\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU",
    )]);
    for b in [&all_ot, &stock] {
        assert_eq!(b.lines, all_ncm.lines);
        assert_eq!(b.host_weights_bytes, all_ncm.host_weights_bytes);
    }
    assert_eq!(
        bytes_of(&plain, "weights") - bytes_of(&all_ot, "weights"),
        32 * per_block
    );
    assert_eq!(
        all_ot.host_weights_bytes.unwrap() - plain.host_weights_bytes.unwrap(),
        32 * per_block
    );
    let range_ot = llama(&[(
        "override-tensor",
        "blk\\.([0-9]|1[0-9])\\.ffn_.*_exps\\.=CPU",
    )]);
    let range_ncm = llama(&[("n-cpu-moe", "20")]);
    assert_eq!(range_ot.lines, range_ncm.lines);
    assert_eq!(
        bytes_of(&plain, "weights") - bytes_of(&range_ot, "weights"),
        20 * per_block
    );
    // The first rule that matches wins: block 0's up projection stays on the card.
    let first = llama(&[(
        "override-tensor",
        "blk\\.0\\.ffn_up_exps=CUDA0,\\.ffn_.*_exps\\.=CPU",
    )]);
    assert_eq!(
        bytes_of(&first, "weights"),
        bytes_of(&all_ot, "weights") + per_block / 3
    );
    // A rule to the card brings a block -ngl left on the host back.
    let back = llama(&[
        ("n-gpu-layers", "1"),
        ("override-tensor", "blk\\.5\\.=CUDA0"),
    ]);
    let one = llama(&[("n-gpu-layers", "1")]);
    assert!(bytes_of(&back, "weights") > bytes_of(&one, "weights"));
}

/// Bad `--override-tensor` values: one clear error, never a panic. The rules' form is
/// checked where the engine keys are read; the patterns where they are compiled, for
/// the placement — what std::regex takes and regex-lite refuses (look-around,
/// backreferences) is named.
#[test]
fn llama_cpp_override_tensor_errors_are_clear() {
    for (value, says) in [
        ("\\.ffn_.*_exps\\.", "<pattern>=<buffer type>"),
        ("exps=GPU", "one card"),
        ("exps=cpu", "names it CPU"),
        ("exps=CUDA1", "one card"),
    ] {
        let errors = from_pairs([("override-tensor", value)]).1;
        assert_eq!(errors.len(), 1, "{value}");
        let e = errors[0].to_string();
        assert!(
            e.starts_with("override-tensor:") && e.contains(says),
            "{value}: {e}"
        );
    }
    let input = llama_8b(&[]);
    let est = estimate(&input).expect("estimate");
    for (value, says) in [
        ("ffn_(up=CPU", "not a regular expression"),
        ("blk\\.(?!0\\.)=CPU", "look-around"),
        ("(a)\\1=CPU", "backreferences"),
    ] {
        let p = engine(&[
            ("engine", "llama.cpp"),
            ("card", "h100-sxm-80gb"),
            ("max-model-len", "4096"),
            ("override-tensor", value),
        ]);
        let e = budget(&input, &est, &p).unwrap_err().to_string();
        assert!(
            e.starts_with("override-tensor:") && e.contains(says),
            "{value}: {e}"
        );
    }
    // Without an architecture (a parameter count and the KV shape) no tensor is named.
    let (input, errors) = crate::params::from_pairs([
        ("parameters", "8e9"),
        ("layers", "32"),
        ("kv-heads", "8"),
        ("head-dim", "128"),
    ]);
    assert!(errors.is_empty(), "{errors:?}");
    let est = estimate(&input).expect("estimate");
    let p = engine(&with(&[
        ("engine", "llama.cpp"),
        ("override-tensor", "exps=CPU"),
    ]));
    let e = budget(&input, &est, &p).unwrap_err().to_string();
    assert!(e.contains("needs the architecture"), "{e}");
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
        &with(&[("engine", "vllm@0.19"), ("max-model-len", "8192")]),
    );
    assert_eq!(b.kv_bytes_per_token, 50 * 16_384 + 10 * 8_192);
    let group_block = 16 * 16_384 * 10;
    let blocks = u64::try_from(b.kv_capacity_bytes).unwrap() / group_block;
    assert_eq!(b.kv_capacity_tokens, blocks / 6 * 16);
    let per_request = 256 + 5 * (512 + 1);
    assert_eq!(b.max_sequences, blocks / per_request);
    assert!(b.assumptions.iter().any(|a| a.contains("6 groups")));
    // 0.27 reports max concurrency × max_model_len (vllm v0.22.0 `_report_kv_cache_config`):
    // the sliding groups' capped blocks no longer count as 16 tokens each.
    let b = run(
        &input,
        &with(&[("engine", "vllm"), ("max-model-len", "8192")]),
    );
    let blocks = u64::try_from(b.kv_capacity_bytes).unwrap() / group_block;
    assert_eq!(b.kv_capacity_tokens, blocks * 8192 / per_request);
    assert_eq!(b.max_sequences, blocks / per_request);
}

/// Gemma-3-12B's vision encoder profiling on an H100 (the calibration record's
/// settings): 8 192 ÷ 256 = 32 images of 3 × 896 × 896 bf16 pixel values and their
/// 32 × 256 embeddings of 3 840 stay allocated through the text forward and the
/// sampler, 217 055 232 B on top of the profile's peak.
#[test]
fn vllm_holds_the_encoders_dummy_batch_through_the_profile() {
    let imported = crate::import::config::parse_config(include_str!(
        "../../tests/calibration/configs/gemma-3-12b.json"
    ))
    .expect("config");
    let pairs = imported.pairs();
    assert!(pairs.contains(&("mm-item-tokens", "256".to_string())));
    assert!(pairs.contains(&("mm-item-values", (3 * 896 * 896).to_string())));
    let read = |skip: bool| {
        let (input, errors) = crate::params::from_pairs(
            pairs
                .iter()
                .filter(|(k, _)| !skip || !k.starts_with("mm-item"))
                .map(|(k, v)| (*k, v.as_str())),
        );
        assert!(errors.is_empty(), "{errors:?}");
        input
    };
    let settings = [
        ("engine", "vllm"),
        ("card", "h100-sxm-80gb"),
        ("gpu-memory-utilization", "0.95"),
        ("max-model-len", "8192"),
    ];
    let with = run(&read(false), &settings);
    let without = run(&read(true), &settings);
    let held = 32 * (3 * 896 * 896 + 256 * 3840) * 2;
    assert_eq!(held, 217_055_232);
    let inputs = &with
        .lines
        .iter()
        .find(|l| l.key == "activation_peak")
        .unwrap()
        .inputs;
    assert_eq!(inputs["encoder-items"], "32");
    assert_eq!(inputs["encoder-held"], held.to_string());
    assert_eq!(
        bytes_of(&with, "activation_peak"),
        bytes_of(&without, "activation_peak") + held
    );
    // Four sequences of up to 32 images each (8 192 ÷ 256) would take 128: the
    // encoder budget's 32 still bounds the batch.
    let few = run(
        &read(false),
        &[settings.as_slice(), &[("max-num-seqs", "4")]].concat(),
    );
    let inputs = &few
        .lines
        .iter()
        .find(|l| l.key == "activation_peak")
        .unwrap()
        .inputs;
    assert_eq!(inputs["encoder-items"], "32");
    // A length shorter than one image still profiles one image per sequence.
    let short = run(
        &read(false),
        &[
            ("engine", "vllm"),
            ("card", "h100-sxm-80gb"),
            ("max-model-len", "200"),
            ("max-num-seqs", "4"),
        ],
    );
    let inputs = &short
        .lines
        .iter()
        .find(|l| l.key == "activation_peak")
        .unwrap()
        .inputs;
    assert_eq!(inputs["encoder-items"], "4");
}

/// A scaled RoPE's cos/sin cache covers the positions its scaling reaches (yarn ×4
/// over 32 768 trained: 131 072 rows of 128 bf16 values), not only the trained ones.
#[test]
fn vllm_rotary_cache_reaches_as_far_as_the_scaling() {
    let plain = run(
        &llama_8b(&[("max-position", "32768")]),
        &with(&[("engine", "vllm")]),
    );
    let scaled = run(
        &llama_8b(&[("max-position", "32768"), ("rope-positions", "131072")]),
        &with(&[("engine", "vllm")]),
    );
    let cache = |b: &EngineBudget| {
        b.lines.iter().find(|l| l.key == "weights").unwrap().inputs["rotary-cache"].clone()
    };
    assert_eq!(cache(&plain), (32_768u64 * 128 * 2).to_string());
    assert_eq!(cache(&scaled), (131_072u64 * 128 * 2).to_string());
    assert_eq!(
        bytes_of(&scaled, "weights") - bytes_of(&plain, "weights"),
        (131_072 - 32_768) * 128 * 2
    );
}

/// With the weights from a model file's header (bytes per class), the tensors take
/// their class's bytes in proportion: Llama-3.1-8B with a Q4_K_M-like file. The
/// token embeddings are the one tensor of their class, so the host holds exactly the
/// file's embeddings; everything else, the rounding's bytes and the header's "other"
/// tensors included, is on the card; `-ot` works on the shares.
#[test]
fn llama_cpp_places_a_model_files_class_totals() {
    let mut file = crate::import::TensorSummary::new("gguf");
    for (name, bytes) in [
        ("token_embd.weight", 295_501_824u64),
        ("output.weight", 430_964_736),
        ("output_norm.weight", 16_384),
        ("rope_freqs.weight", 256),
    ] {
        file.add(name, "Q4_K", bytes).expect("add");
    }
    for i in 0..32 {
        for (name, bytes) in [
            ("attn_q.weight", 9_437_184u64),
            ("attn_k.weight", 2_359_296),
            ("attn_v.weight", 3_440_640),
            ("attn_output.weight", 9_437_184),
            ("ffn_gate.weight", 33_030_144),
            ("ffn_up.weight", 33_030_144),
            ("ffn_down.weight", 48_168_960),
            ("attn_norm.weight", 16_384),
            ("ffn_norm.weight", 16_384),
        ] {
            file.add(&format!("blk.{i}.{name}"), "Q4_K", bytes)
                .expect("add");
        }
    }
    let mut input = llama_8b(&[]);
    input.tensors = Some(file.clone());
    let est = estimate(&input).expect("estimate");
    assert_eq!(est.weights_bytes, file.total.bytes);
    let b = run(&input, &with(&[("engine", "llama.cpp")]));
    assert_eq!(b.host_weights_bytes, Some(295_501_824));
    assert_eq!(bytes_of(&b, "weights"), file.total.bytes - 295_501_824);
    assert!(b.assumptions.iter().any(|a| a.contains("class totals")));
    // Block 0 to the host: its share of attention, MLP and norms (÷ 32, rounded down
    // per tensor).
    let moved = run(
        &input,
        &with(&[
            ("engine", "llama.cpp"),
            ("override-tensor", "blk\\.0\\.=CPU"),
        ]),
    );
    let block = 9_437_184 * 2 + 2_359_296 + 3_440_640 + 33_030_144 * 2 + 48_168_960 + 32_768;
    let host = moved.host_weights_bytes.unwrap() - 295_501_824;
    assert!(host <= block && block - host < 16, "{host} vs {block}");
    assert_eq!(
        bytes_of(&moved, "weights") + moved.host_weights_bytes.unwrap(),
        file.total.bytes
    );
}

/// llama.cpp's placement lists every tensor of every block (and a largest-context
/// search places the model at every step): past its bounds it is refused before any
/// tensor is listed, naming the bound, and the largest search answers nothing rather
/// than run for minutes.
#[test]
fn llama_cpp_placement_is_bounded() {
    let deep = preset("mixtral-8x7b", &[("layers", "1000000")]);
    let est = estimate(&deep).expect("the estimate itself is cheap");
    let p = engine(&with(&[("engine", "llama.cpp")]));
    let e = budget(&deep, &est, &p).unwrap_err().to_string();
    assert!(
        e.starts_with("layers:") && e.contains("at most 1024"),
        "{e}"
    );
    // At the bound it still answers.
    let at = preset("mixtral-8x7b", &[("layers", "1024")]);
    let est = estimate(&at).expect("estimate");
    budget(&at, &est, &p).expect("1 024 blocks are placed");
    // Rules × blocks.
    let input = preset("mixtral-8x7b", &[]);
    let est = estimate(&input).expect("estimate");
    let many: Vec<String> = (0..200).map(|i| format!("blk\\.{i}\\.=CPU")).collect();
    let (_, errors) = from_pairs([("override-tensor", many.join(",").as_str())]);
    assert!(
        errors[0].to_string().contains("at most 64 rules"),
        "{errors:?}"
    );
    let some: Vec<String> = (0..64).map(|i| format!("blk\\.{i}\\.=CPU")).collect();
    let p = engine(&with(&[
        ("engine", "llama.cpp"),
        ("override-tensor", some.join(",").as_str()),
    ]));
    budget(&input, &est, &p).expect("32 blocks × 64 rules");
    let e = budget(&at, &estimate(&at).expect("estimate"), &p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rule × block matches"), "{e}");
    let long = format!("{}=CPU", "a".repeat(600));
    let (_, errors) = from_pairs([("override-tensor", long.as_str())]);
    assert!(errors[0].to_string().contains("at most 512"), "{errors:?}");
}

/// Each release's rules by name: `vllm@0.7` (V0 from after the CUDA context),
/// `vllm@0.8` (the context counted outside torch), `vllm@0.27` (the default: Model Runner V2 for dense
/// unquantised models, V1 with its CUDA-graph estimate otherwise),
/// `tgi@2.0` and `tgi@0.9`; an unknown release names the ones carried.
#[test]
fn releases_pick_their_rules() {
    let p = engine(&[("engine", "vllm@0.7.2")]);
    assert_eq!(p.version, Some(VllmVersion::V07));
    assert_eq!(
        engine(&[("engine", "vllm@0.8.5")]).version,
        Some(VllmVersion::V08)
    );
    assert_eq!(
        engine(&[("engine", "tgi@2.0.0")]).tgi_version,
        Some(TgiVersion::V2)
    );
    assert_eq!(
        engine(&[("engine", "tgi@0.9")]).tgi_version,
        Some(TgiVersion::V09)
    );
    let (_, errors) = from_pairs([("engine", "vllm@0.12")]);
    assert!(format!("{errors:?}").contains("vllm@0.27"), "{errors:?}");
    // SGLang mid-2025 on an RTX 5080 (16 303 MiB): (16 303 − 2.9 × 1024) ÷ 16 303 → 0.818.
    assert_eq!(
        engine(&[("engine", "sglang@0.5.0")]).sglang_version,
        Some(SglangVersion::V050)
    );
    assert_eq!(
        sglang::fraction_050(16_303, 1, 1, None),
        (818 * (ONE / 1000), 2048)
    );
    let (_, errors) = from_pairs([("engine", "tgi@1.4")]);
    assert!(format!("{errors:?}").contains("tgi@2.0"), "{errors:?}");

    let dense = llama_8b(&[]);
    let v2 = run(&dense, &with(&[("engine", "vllm@0.27")]));
    let v019 = run(&dense, &with(&[("engine", "vllm@0.19")]));
    assert_eq!(v2.version, "0.27 (Model Runner V2)");
    // Plain `vllm` is the newest release carried.
    assert_eq!(run(&dense, &with(&[("engine", "vllm")])), v2);
    // V2's profile samples without top-k/top-p: a smaller sampler phase, a larger pool.
    assert!(v2.kv_capacity_bytes > v019.kv_capacity_bytes);
    let g = v2.lines.iter().find(|l| l.key == "cuda_graphs").unwrap();
    assert!(!g.subtracted);
    // MoE models run the V1 runner, which takes its CUDA-graph estimate off the pool:
    // 0.19's pool less that line, to the byte.
    let preset = presets::find("mixtral-8x7b").expect("preset");
    let (moe, errors) = crate::params::from_pairs(preset.pairs.iter().copied());
    assert!(errors.is_empty());
    let est = estimate(&moe).unwrap();
    let p = |e: &str| EngineParams {
        card: find_card("h100-sxm-80gb"),
        max_model_len: Some(8192),
        ..engine(&[("engine", e)])
    };
    let v1 = budget(&moe, &est, &p("vllm@0.27")).unwrap();
    let old = budget(&moe, &est, &p("vllm@0.19")).unwrap();
    assert_eq!(v1.version, "0.27 (Model Runner V1)");
    let g = v1.lines.iter().find(|l| l.key == "cuda_graphs").unwrap();
    assert!(g.subtracted && g.kind == Kind::Assumed);
    assert_eq!(old.kv_capacity_bytes - v1.kv_capacity_bytes, g.bytes as i64);
    // 1024 sequences and 8192 batched tokens on an H100: 51 PIECEWISE and 51 FULL
    // graphs of (4 MiB + 192 KiB × 32 layers) each.
    assert_eq!(g.bytes, 102 * (4 * MIB + 32 * (192 << 10)));
    // A quantised dense model runs V1 too; --enforce-eager captures no graph.
    let fp8 = llama_8b(&[("format", "fp8")]);
    let q = run(&fp8, &with(&[("engine", "vllm")]));
    assert_eq!(q.version, "0.27 (Model Runner V1)");
    let eager = run(
        &fp8,
        &with(&[("engine", "vllm"), ("enforce-eager", "true")]),
    );
    assert!(eager.lines.iter().all(|l| l.key != "cuda_graphs"));
    assert!(eager.kv_capacity_bytes > q.kv_capacity_bytes);
}

/// vllm v0.22.0 `_set_cudagraph_sizes` and `initialize_cudagraph_keys`: the graphs
/// 0.27's V1 runner captures, by max_num_seqs, max_num_batched_tokens and the decode
/// query length (1 + speculative tokens).
#[test]
fn vllm_capture_sizes_follow_the_config() {
    // 1, 2, 4, 8…248 (31), 256…512 (17): 51 sizes; FULL decode sizes ≤ max_num_seqs.
    assert_eq!(vllm::capture_counts(1024, 8192, 1), (51, 51));
    assert_eq!(vllm::capture_counts(256, 2048, 1), (51, 35));
    // 8 sequences: sizes up to 16 (1, 2, 4, 8, 16); FULL up to 8.
    assert_eq!(vllm::capture_counts(8, 8192, 1), (5, 4));
    // max_num_batched_tokens within the cap is captured too: 100 → 1, 2, 4, 8…96, 100.
    assert_eq!(vllm::capture_counts(1024, 100, 1), (16, 16));
    // Two speculative tokens: decode query length 3, sizes up to 4 × 3 × 2 = 24 (1, 2,
    // 4, 8, 16, 24); FULL from 3 up to 3 × 4 = 12 (4, 8).
    assert_eq!(vllm::capture_counts(4, 8192, 3), (6, 2));
}

/// llama-server's `--kv-unified`: one stream of n_ctx cells for every slot, and one SWA
/// cache of n_swa × slots + n_ubatch cells (gpt-oss-120b at -c 65536, 4 slots: 1024).
#[test]
fn a_unified_cache_is_one_stream() {
    let input = llama_8b(&[("sequences", "4")]);
    let pairs = [
        ("engine", "llama.cpp"),
        ("card", "rtx-4090"),
        ("max-model-len", "8192"),
    ];
    let split = run(&input, &pairs);
    let mut unified = pairs.to_vec();
    unified.push(("kv-unified", "true"));
    let one = run(&input, &unified);
    // Llama has no window: 4 streams of 2048 cells hold what one stream of 8192 does.
    assert_eq!(split.kv_cache_bytes, one.kv_cache_bytes);
    assert!(engine(&unified).kv_unified);
}

/// Qwen3-Next (Gated DeltaNet beside attention) under the default rules: 0.27 pages it
/// as 0.10 did (`_align_hybrid_block_size`: attention blocks raised to the state page,
/// groups of the smaller layer count), and reports max concurrency × max_model_len.
#[test]
fn vllm_pages_hybrid_state_models_in_every_v1_release() {
    let input = from_config("qwen3-next-80b-a3b", &[("tp", "2"), ("gpus", "2")]);
    let pairs = [("card", "h200-141gb"), ("max-model-len", "262144")];
    let with_engine = |e: &'static str| {
        let mut p = pairs.to_vec();
        p.push(("engine", e));
        run(&input, &p)
    };
    let old = with_engine("vllm@0.10");
    let new = with_engine("vllm");
    assert_eq!(new.version, "0.27 (Model Runner V1)");
    assert!(old.block_size > 16, "{}", old.block_size);
    assert_eq!(new.block_size, old.block_size);
    assert_eq!(with_engine("vllm@0.19").block_size, old.block_size);
    assert!(
        new.assumptions
            .iter()
            .any(|a| a.contains("hybrid KV cache"))
    );
    // Tokens: ⌊blocks × max_model_len ÷ blocks per request⌋, not whole blocks per group.
    assert!(new.max_sequences >= 1);
    let tokens = new.kv_capacity_tokens;
    assert!(tokens >= new.max_sequences * 262_144, "{tokens}");
    assert!(tokens < (new.max_sequences + 1) * 262_144, "{tokens}");
}

/// llama.cpp's `--swa-full` (`src/llama-kv-cache-iswa.cpp`: `size_swa = size_base`): the
/// sliding layers keep every cell, so a windowed model's cache is the cache it would
/// have without the window (f16 cells); without the flag it is smaller.
#[test]
fn llama_cpp_swa_full_keeps_every_cell() {
    let shape = [
        ("layers", "42"),
        ("hidden", "3584"),
        ("heads", "16"),
        ("kv-heads", "8"),
        ("head-dim", "256"),
        ("intermediate", "14336"),
        ("vocab", "256000"),
    ];
    let windowed: Vec<(&str, &str)> = shape
        .iter()
        .copied()
        .chain([("sliding-window", "4096"), ("sliding-layers", "21")])
        .collect();
    let (w, e) = crate::params::from_pairs(windowed.iter().copied());
    assert!(e.is_empty(), "{e:?}");
    let (full, e) = crate::params::from_pairs(shape.iter().copied());
    assert!(e.is_empty(), "{e:?}");
    let pairs = [
        ("engine", "llama.cpp"),
        ("card", "rtx-4090"),
        ("max-model-len", "32768"),
    ];
    let mut swa_full = pairs.to_vec();
    swa_full.push(("swa-full", "true"));
    assert!(engine(&swa_full).swa_full);
    let compact = run(&w, &pairs).kv_cache_bytes.unwrap();
    let all = run(&w, &swa_full).kv_cache_bytes.unwrap();
    let no_window = run(&full, &pairs).kv_cache_bytes.unwrap();
    assert_eq!(all, no_window);
    // 32 768 cells × 42 layers × 2 × 8 × 256 × 2 B; compact: 21 layers at 4096 + 512
    // (the ubatch) cells.
    assert_eq!(all, 32_768 * 42 * 8192);
    assert_eq!(compact, 32_768 * 21 * 8192 + 4608 * 21 * 8192);
}
