//! The engine rules' unit tests: hand derivations, parsing, the searches.

#![allow(clippy::arithmetic_side_effects)]

use super::arith::MIB;
use super::fraction::times_fraction;
pub(crate) use super::*;
pub(crate) use crate::catalogue::CATALOGUE;
use crate::estimate::Kind;
pub(crate) use crate::estimate::{EstimateInput, LineKey, estimate};
use crate::presets;

/// Llama-3.1-8B from its preset, bf16, plus extra pairs.
pub(crate) fn llama_8b(extra: &[(&str, &str)]) -> EstimateInput {
    let preset = presets::find("llama-3.1-8b").expect("preset");
    let pairs = preset.pairs.iter().copied().chain(extra.iter().copied());
    let (input, errors) = crate::params::from_pairs(pairs);
    assert!(errors.is_empty(), "{errors:?}");
    input
}

pub(crate) fn engine(pairs: &[(&str, &str)]) -> EngineParams {
    let (p, errors) = from_pairs(pairs.iter().copied());
    assert!(errors.is_empty(), "{errors:?}");
    p
}

pub(crate) fn run(input: &EstimateInput, pairs: &[(&str, &str)]) -> EngineBudget {
    let est = estimate(input).expect("estimate");
    budget(input, &est, &engine(pairs)).expect("budget")
}

pub(crate) fn bytes_of(b: &EngineBudget, key: &str) -> u64 {
    b.lines
        .iter()
        .find(|l| l.key == key)
        .unwrap_or_else(|| panic!("no line {key}"))
        .bytes
}

pub(crate) const H100: [(&str, &str); 3] = [
    ("card", "h100-sxm-80gb"),
    ("gpu-memory-utilization", "0.9"),
    ("max-model-len", "16000"),
];

pub(crate) fn with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
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
    assert_eq!(p.engine, find("vllm"));
    assert_eq!(VllmVersion::of(p.release), VllmVersion::V010);
    assert_eq!(p.card.map(|c| c.id), Some("h100-sxm-80gb"));
    assert_eq!(p.get("max-num-seqs"), Some(&Value::Count(64)));
    assert_eq!(p.get("gpu-memory-utilization"), None);
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
    assert!(e.is_empty() && auto.max_model_len_auto);
    assert_eq!(auto.get("enforce-eager"), Some(&Value::On(true)));
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

pub(crate) fn need(input: &EstimateInput) -> u64 {
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

/// An input from a config.json of the test cases, in `format`, plus extra pairs.
pub(crate) fn from_config(file: &str, extra: &[(&str, &str)]) -> EstimateInput {
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

pub(crate) fn preset(id: &str, extra: &[(&str, &str)]) -> EstimateInput {
    let p = presets::find(id).expect("preset");
    let (input, errors) =
        crate::params::from_pairs(p.pairs.iter().copied().chain(extra.iter().copied()));
    assert!(errors.is_empty(), "{errors:?}");
    input
}

/// Each release's rules by name: `vllm@0.7` and `vllm@0.6` (V0 from after the CUDA
/// context), `vllm@0.6.4` (V0, the context counted),
/// `vllm@0.8` (the context counted outside torch), `vllm@0.27` (the default: Model Runner V2 for dense
/// unquantised models, V1 with its CUDA-graph estimate otherwise),
/// `tgi@2.0` and `tgi@0.9`; an unknown release names the ones carried.
#[test]
fn releases_pick_their_rules() {
    let p = engine(&[("engine", "vllm@0.7.2")]);
    assert_eq!(VllmVersion::of(p.release), VllmVersion::V07);
    assert_eq!(
        VllmVersion::of(engine(&[("engine", "vllm@0.8.5")]).release),
        VllmVersion::V08
    );
    assert_eq!(
        TgiVersion::of(engine(&[("engine", "tgi@2.0.0")]).release),
        TgiVersion::V2
    );
    assert_eq!(
        TgiVersion::of(engine(&[("engine", "tgi@0.9")]).release),
        TgiVersion::V09
    );
    let (_, errors) = from_pairs([("engine", "vllm@0.12")]);
    assert!(format!("{errors:?}").contains("vllm@0.27"), "{errors:?}");
    // Within 0.6 the patch release picks the rules: 0.6.4 counts the CUDA context
    // outside torch, 0.6.5 on (and `vllm@0.6`) measure from after it; 0.6.0–0.6.3 sized
    // the pool another way and are refused, naming the releases carried.
    for (text, v) in [
        ("vllm@0.6.4", VllmVersion::V064),
        ("vllm@0.6", VllmVersion::V06),
        ("vllm@0.6.5", VllmVersion::V06),
        ("vllm@0.6.6.post1", VllmVersion::V06),
    ] {
        assert_eq!(
            VllmVersion::of(engine(&[("engine", text)]).release),
            v,
            "{text}"
        );
    }
    let (_, errors) = from_pairs([("engine", "vllm@0.6.3")]);
    assert!(format!("{errors:?}").contains("vllm@0.6.4"), "{errors:?}");
    assert_eq!(VllmVersion::parse("0.6.4").unwrap().key(), "0.6.4");
    // The same profile; 0.6.4's memory outside torch is 0.6.5's + the CUDA context
    // (512 MiB assumed), and its pool smaller by as much and by the weights' segments
    // beyond the tensors, which its worker's "not allocated by torch" holds (1 564 672 B
    // for Llama-3.1-8B: the norms' 2 MiB small-pool segment).
    let llama = llama_8b(&[]);
    let v064 = run(&llama, &with(&[("engine", "vllm@0.6.4")]));
    let v065 = run(&llama, &with(&[("engine", "vllm@0.6.5")]));
    assert_eq!(v064.version, "0.6.4 (V0)");
    assert_eq!(v065.version, "0.6.5 (V0)");
    assert_eq!(
        bytes_of(&v064, "non_torch") - bytes_of(&v065, "non_torch"),
        512 * MIB
    );
    assert_eq!(
        bytes_of(&v064, "activation_peak"),
        bytes_of(&v065, "activation_peak")
    );
    assert_eq!(bytes_of(&v064, "load_rounding"), 1_564_672);
    assert!(v065.lines.iter().all(|l| l.key != "load_rounding"));
    assert_eq!(
        v065.kv_capacity_bytes - v064.kv_capacity_bytes,
        512 * MIB as i64 + 1_564_672
    );
    // 0.6.5 is 0.7's accounting, to the byte.
    let v07 = run(&llama, &with(&[("engine", "vllm@0.7")]));
    assert_eq!(v07.kv_capacity_bytes, v065.kv_capacity_bytes);
    // The context those releases count follows the card: its local-memory reservation
    // (SMs × resident threads per SM × 1 KiB of stack) beside the 248 MiB kept from an
    // H100 SXM's 512. An RTX 3090 (GA102, 8.6: 82 × 1 536) 123 MiB → 371 MiB; an A100
    // (8.0: 108 × 2 048) 216 MiB → 464 MiB; a typed capacity keeps the 512 MiB.
    let context = |card: &str, engine: &str| {
        let b = run(
            &llama,
            &[
                ("card", card),
                ("gpu-memory-utilization", "0.9"),
                ("max-model-len", "4096"),
                ("engine", engine),
            ],
        );
        let base = run(
            &llama,
            &[
                ("card", card),
                ("gpu-memory-utilization", "0.9"),
                ("max-model-len", "4096"),
                ("engine", "vllm@0.6.5"),
            ],
        );
        bytes_of(&b, "non_torch") - bytes_of(&base, "non_torch")
    };
    assert_eq!(context("h100-sxm-80gb", "vllm@0.6.4"), 512 * MIB);
    assert_eq!(
        context("rtx-3090", "vllm@0.6.4"),
        248 * MIB + 82 * 1536 * 1024
    );
    assert_eq!(
        context("a100-80gb", "vllm@0.6.4"),
        248 * MIB + 108 * 2048 * 1024
    );
    assert_eq!(
        context("t4-16gb", "vllm@0.6.4"),
        248 * MIB + 40 * 1024 * 1024
    );
    assert_eq!(context("23.58GiB", "vllm@0.6.4"), 512 * MIB);
    // 0.8 counts the same context beside 0.10's library figure (133 MiB at tp 1).
    assert_eq!(
        context("rtx-3090", "vllm@0.8") + 80 * MIB,
        248 * MIB + 82 * 1536 * 1024 + 133 * MIB
    );
    // SGLang mid-2025 on an RTX 5080 (16 303 MiB): (16 303 − 2.9 × 1024) ÷ 16 303 → 0.818.
    assert_eq!(
        SglangVersion::of(engine(&[("engine", "sglang@0.5.0")]).release),
        SglangVersion::V050
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
    // V2's profile samples without top-k/top-p: a smaller sampler phase, a larger pool.
    assert!(v2.kv_capacity_bytes > v019.kv_capacity_bytes);
    let g = v2.lines.iter().find(|l| l.key == "cuda_graphs").unwrap();
    assert!(!g.subtracted);
    // Plain `vllm` is the newest release carried, 0.29 (and 0.30 takes its rules): V2
    // with its CUDA-graph estimate taken off the pool: 0.27's V2 pool less that line,
    // to the byte.
    let newest = run(&dense, &with(&[("engine", "vllm")]));
    assert_eq!(newest.version, "0.29 (Model Runner V2)");
    assert_eq!(run(&dense, &with(&[("engine", "vllm@0.29")])), newest);
    assert_eq!(run(&dense, &with(&[("engine", "vllm@0.30.0")])), newest);
    let g29 = newest
        .lines
        .iter()
        .find(|l| l.key == "cuda_graphs")
        .unwrap();
    assert!(g29.subtracted && g29.kind == Kind::Assumed && g29.bytes > 0);
    assert!(
        g29.source.contains("gpu/cudagraph_utils.py"),
        "{}",
        g29.source
    );
    assert_eq!(
        v2.kv_capacity_bytes - newest.kv_capacity_bytes,
        g29.bytes as i64
    );
    let (_, errors) = from_pairs([("engine", "vllm@0.28")]);
    assert!(format!("{errors:?}").contains("vllm@0.29"), "{errors:?}");
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
    // 0.29 runs the MoE model on V2: the same graph line, V2's smaller sampler phase.
    let v29 = budget(&moe, &est, &p("vllm")).unwrap();
    assert_eq!(v29.version, "0.29 (Model Runner V2)");
    let g29 = v29.lines.iter().find(|l| l.key == "cuda_graphs").unwrap();
    assert!(g29.subtracted);
    assert_eq!(g29.bytes, g.bytes);
    assert!(v29.kv_capacity_bytes > v1.kv_capacity_bytes);
    // A quantised dense model runs V1 under 0.27, V2 under 0.29; --enforce-eager
    // captures no graph.
    let fp8 = llama_8b(&[("format", "fp8")]);
    let q = run(&fp8, &with(&[("engine", "vllm@0.27")]));
    assert_eq!(q.version, "0.27 (Model Runner V1)");
    assert_eq!(
        run(&fp8, &with(&[("engine", "vllm")])).version,
        "0.29 (Model Runner V2)"
    );
    let eager = run(
        &fp8,
        &with(&[("engine", "vllm@0.27"), ("enforce-eager", "true")]),
    );
    assert!(eager.lines.iter().all(|l| l.key != "cuda_graphs"));
    assert!(eager.kv_capacity_bytes > q.kv_capacity_bytes);
}

/// `wired-limit-mb` sets a Mac's capacity whichever flag comes first, and is refused
/// without a card, on a card with memory of its own, and beyond the Mac's RAM.
#[test]
fn the_wired_limit_is_a_macs_capacity() {
    for pairs in [
        [("card", "m3-max-128gb"), ("wired-limit-mb", "114688")],
        [("wired-limit-mb", "114688"), ("card", "m3-max-128gb")],
    ] {
        let (p, errors) = from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        let card = p.card.expect("card");
        assert_eq!(card.capacity().0, 112 << 30);
        assert_eq!(card.system_left(), Some(16 << 30));
    }
    let err = |pairs: &[(&str, &str)]| {
        let (_, e) = from_pairs(pairs.iter().copied());
        assert_eq!(e.len(), 1, "{pairs:?}");
        e[0].to_string()
    };
    assert!(err(&[("wired-limit-mb", "100000")]).contains("--card"));
    assert!(err(&[("card", "rtx-4090"), ("wired-limit-mb", "20000")]).contains("its own"));
    assert!(err(&[("card", "m4-pro-24gb"), ("wired-limit-mb", "30000")]).contains("24576 MiB"));
    // Without the flag, macOS's default: 3/4 of 128 GiB.
    let (p, _) = from_pairs([("card", "m3-max-128gb")]);
    assert_eq!(p.card.unwrap().capacity().0, 96 << 30);
}

/// The engine flags settle what they decide of the estimate: the named engine's cache
/// layout (transformers' own without one) and the card generation (the larger when no
/// catalogue card is named), the same for the command and the page.
#[test]
fn the_flags_settle_the_runtime_and_the_cards_generation() {
    use crate::arch::CacheRuntime;
    let mut input = llama_8b(&[]);
    engine(&[]).settle(&mut input);
    assert_eq!(input.runtime, CacheRuntime::Transformers);
    assert_eq!(input.card_sm90, None);
    engine(&[("engine", "vllm"), ("card", "l4")]).settle(&mut input);
    assert_eq!(input.runtime, CacheRuntime::Serving);
    assert_eq!(input.card_sm90, Some(false));
    engine(&[("engine", "llama.cpp"), ("card", "l4,h100-sxm-80gb")]).settle(&mut input);
    assert_eq!(input.runtime, CacheRuntime::Serving);
    assert_eq!(input.card_sm90, Some(true));
    engine(&[("card", "40GiB")]).settle(&mut input);
    assert_eq!(input.card_sm90, None);
}

/// At tp > 1 the communicators' memory follows the interconnect (`request::interconnect`,
/// `COMM_BUFFERS_MIB`, `PCIE_COMM_MIB`): SGLang takes the CUDA context and 1 884 MiB
/// before loading on NVLink boards, the context and 430 MiB on PCIe-only GPUs; vLLM 0.27
/// counts 2 140 MiB outside torch at tp 2 on NVLink, 256 and 430 MiB on PCIe, and 0.10
/// (563 MiB, already without NVLink's communicators) the same on both. The card's row decides unless `--interconnect`
/// says; a row sold both ways keeps NVLink's figure; tp 1 takes none.
#[test]
fn the_interconnect_decides_what_tensor_parallelism_takes() {
    let tp4 = llama_8b(&[("tp", "4"), ("gpus", "4")]);
    let sglang = |input: &EstimateInput, card: &'static str, link: &'static str| {
        let mut pairs = vec![
            ("engine", "sglang"),
            ("card", card),
            ("max-model-len", "4096"),
            ("mem-fraction-static", "0.8"),
        ];
        if !link.is_empty() {
            pairs.push(("interconnect", link));
        }
        let b = run(input, &pairs);
        (bytes_of(&b, "cuda_context"), b.kv_capacity_bytes)
    };
    let nvlink = (512 + 1884) * MIB;
    let pcie = (512 + 430) * MIB;
    assert_eq!(sglang(&tp4, "h100-sxm-80gb", "").0, nvlink);
    assert_eq!(sglang(&tp4, "h100-sxm-80gb", "pcie").0, pcie);
    let (ctx, pool) = sglang(&tp4, "rtx-4090", "");
    assert_eq!(ctx, pcie);
    let (ctx_nv, pool_nv) = sglang(&tp4, "rtx-4090", "nvlink");
    assert_eq!(ctx_nv, nvlink);
    // The pool is that difference × mem_fraction_static (0.8), rounded as the reserve is.
    let gained = pool - pool_nv;
    let expected = ((1884 - 430) * MIB * 8 / 10) as i64;
    assert!((gained - expected).abs() <= 1, "{gained} {expected}");
    assert_eq!(sglang(&tp4, "a100-80gb", "").0, nvlink);
    assert_eq!(sglang(&tp4, "a100-80gb", "pcie").0, pcie);
    assert_eq!(sglang(&llama_8b(&[]), "rtx-4090", "").0, 512 * MIB);

    let tp2 = llama_8b(&[("tp", "2"), ("gpus", "2")]);
    let vllm = |engine: &'static str, card: &'static str, link: &'static str| {
        let mut pairs = vec![
            ("engine", engine),
            ("card", card),
            ("max-model-len", "4096"),
            ("gpu-memory-utilization", "0.5"),
        ];
        if !link.is_empty() {
            pairs.push(("interconnect", link));
        }
        bytes_of(&run(&tp2, &pairs), "non_torch")
    };
    assert_eq!(vllm("vllm", "rtx-pro-6000", ""), (256 + 430) * MIB);
    assert_eq!(vllm("vllm", "rtx-pro-6000", "nvlink"), 2140 * MIB);
    assert_eq!(vllm("vllm", "h100-sxm-80gb", ""), 2140 * MIB);
    assert_eq!(vllm("vllm@0.19", "a100-80gb", "pcie"), (256 + 430) * MIB);
    assert_eq!(vllm("vllm@0.10", "rtx-pro-6000", ""), 563 * MIB);
    assert_eq!(vllm("vllm@0.10", "h100-sxm-80gb", ""), 563 * MIB);

    let (_, errors) = from_pairs([("engine", "vllm"), ("interconnect", "infiniband")]);
    assert!(
        errors.iter().any(|e| e.to_string().contains("nvlink")),
        "{errors:?}"
    );
}

/// A model that puts tokens ahead of the prompt's ids (GIT's image: prefix-tokens) is
/// refused by every engine's rule, with the reason, rather than sized as if its cache
/// held the prompt alone; without an engine its estimate counts them.
#[test]
fn prefix_tokens_are_refused_by_the_engines() {
    let input = llama_8b(&[("context", "1024"), ("prefix-tokens", "197")]);
    let est = estimate(&input).expect("estimate");
    for name in ["vllm", "sglang", "llama.cpp"] {
        let err = budget(&input, &est, &engine(&with(&[("engine", name)])))
            .expect_err("refused")
            .to_string();
        assert!(err.contains("prefix-tokens"), "{name}: {err}");
    }
    let plain = estimate(&llama_8b(&[("context", "1024")])).expect("estimate");
    // Llama-3.1-8B: 32 layers × 8 KV heads × 128 × K and V × 2 B per token.
    assert_eq!(
        est.kv_cache_bytes - plain.kv_cache_bytes,
        197 * 32 * 8 * 128 * 2 * 2
    );
}
