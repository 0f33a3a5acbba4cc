//! TEI's rule: no KV cache, the warm-up batch's forward, by hand.

#![allow(clippy::arithmetic_side_effects)]

use crate::engine::Outcome;
use crate::engine::tests::*;
use crate::estimate::estimate;

/// BAAI/bge-large-en-v1.5 (BERT-large: hidden 1024, intermediate 4096, 24 layers,
/// 335 141 888 parameters, 670 283 776 B in float16) at TEI's defaults: the warm-up is
/// one batch of 16 384 tokens, 32 requests of the 512-token input. Its forward's peak
/// is 8 hidden rows in the attention, 8 × 16 384 × 1024 × 2 = 268 435 456 B, as the
/// MLP's 4 hidden + 1 intermediate rows (4 × 16 384 × 1024 × 2 + 16 384 × 4096 × 2 =
/// 268 435 456 B). On an L4 (23 034 MiB = 24 152 899 584 B reported) the room left is
/// 24 152 899 584 − 536 870 912 (context) − 670 283 776 − 268 435 456 =
/// 22 677 309 440 B; on an A10 (24 146 608 128 B) 22 671 017 984 B. No KV cache: 0
/// tokens, 32 inputs of 512 in a batch, the batch 16 384 tokens.
#[test]
fn tei_runs_bge_large_at_its_defaults() {
    let input = from_config("bge-large-en-v1.5", &[]);
    assert_eq!(estimate(&input).unwrap().weights_bytes, 670_283_776);
    for (card, room) in [("l4-24gb", 22_677_309_440i64), ("a10-24gb", 22_671_017_984)] {
        let b = run(&input, &[("engine", "tei"), ("card", card)]);
        assert_eq!(b.version, "1.9");
        assert_eq!(bytes_of(&b, "weights"), 670_283_776);
        assert_eq!(bytes_of(&b, "activation_peak"), 268_435_456);
        assert_eq!(b.kv_capacity_bytes, room, "{card}");
        assert_eq!(b.kv_capacity_tokens, 0);
        assert_eq!(b.kv_bytes_per_token, 0);
        assert_eq!(b.batch_tokens, Some(16_384));
        assert_eq!(b.max_model_len, 512);
        assert_eq!(b.max_sequences, 32);
        assert_eq!(b.uncertainty_bytes, (268_435_456 + 536_870_912) / 4);
        assert_eq!(b.outcome, Outcome::Fits);
    }
}

/// BAAI/bge-m3 (XLM-R large: 250 002 tokens, 8194 positions; 567 754 752 parameters,
/// 1 135 509 504 B in float16) at its sentence-transformers length 8192: the warm-up's
/// 16 384 tokens are 2 requests of 8192, the same 268 435 456 B peak as BERT-large
/// (same widths). On an L4 24 152 899 584 − 536 870 912 − 1 135 509 504 − 268 435 456
/// = 22 212 083 712 B; on an A10 22 205 792 256 B.
#[test]
fn tei_runs_bge_m3_at_its_defaults() {
    let input = from_config("bge-m3", &[]);
    for (card, room) in [("l4-24gb", 22_212_083_712i64), ("a10-24gb", 22_205_792_256)] {
        let b = run(
            &input,
            &[("engine", "tei"), ("card", card), ("max-model-len", "8192")],
        );
        assert_eq!(bytes_of(&b, "weights"), 1_135_509_504);
        assert_eq!(bytes_of(&b, "activation_peak"), 268_435_456);
        assert_eq!(b.kv_capacity_bytes, room, "{card}");
        assert_eq!(b.max_sequences, 2);
        assert_eq!(b.outcome, Outcome::Fits);
    }
}

/// The warm-up is `--max-batch-tokens` tokens whatever the card: at 2 097 152 tokens
/// bge-m3's peak is 8 × 2 097 152 × 1024 × 2 = 34 359 738 368 B, more than an L4
/// holds: 24 152 899 584 − 536 870 912 − 1 135 509 504 − 34 359 738 368 =
/// −11 879 219 200 B, beyond the band of ±(34 359 738 368 + 536 870 912) ÷ 4 =
/// 8 724 152 320 B: refused. `--max-batch-requests 4` cuts the
/// warm-up to 4 requests of 8192 (32 768 tokens): 536 870 912 B.
#[test]
fn tei_refuses_a_warm_up_the_card_cannot_hold() {
    let input = from_config("bge-m3", &[]);
    let b = run(
        &input,
        &[
            ("engine", "tei"),
            ("card", "l4-24gb"),
            ("max-model-len", "8192"),
            ("max-batch-tokens", "2097152"),
        ],
    );
    assert_eq!(bytes_of(&b, "activation_peak"), 34_359_738_368);
    assert_eq!(b.kv_capacity_bytes, -11_879_219_200);
    assert_eq!(b.uncertainty_bytes, 8_724_152_320);
    assert_eq!(b.outcome, Outcome::Refused);
    assert_eq!(b.max_sequences, 0);
    assert!(
        b.warnings.iter().any(|w| w.contains("runs out of memory")),
        "{:?}",
        b.warnings
    );
    let b = run(
        &input,
        &[
            ("engine", "tei"),
            ("card", "l4-24gb"),
            ("max-model-len", "8192"),
            ("max-batch-tokens", "2097152"),
            ("max-batch-requests", "4"),
        ],
    );
    assert_eq!(b.batch_tokens, Some(32_768));
    assert_eq!(bytes_of(&b, "activation_peak"), 536_870_912);
    assert_eq!(b.max_sequences, 4);
    assert_eq!(b.outcome, Outcome::Fits);
}

/// An input longer than the batch is truncated to it (TEI's `--auto-truncate`), said.
#[test]
fn tei_truncates_an_input_longer_than_its_batch() {
    let input = from_config("bge-m3", &[]);
    let b = run(
        &input,
        &[
            ("engine", "tei"),
            ("card", "l4-24gb"),
            ("max-model-len", "8192"),
            ("max-batch-tokens", "4096"),
        ],
    );
    assert_eq!(b.batch_tokens, Some(4096));
    assert_eq!(b.max_sequences, 1);
    assert!(b.warnings.iter().any(|w| w.contains("truncates inputs to 4096")));
}

/// ModernBERT's gated MLP (Alibaba-NLP/gte-modernbert-base: hidden 768, intermediate
/// 1152): 4 hidden + 4 intermediate rows, 16 384 × (4 × 768 + 4 × 1152) × 2 =
/// 251 658 240 B, above the attention's 8 × 16 384 × 768 × 2 = 201 326 592 B.
#[test]
fn tei_counts_modernberts_gated_mlp() {
    let input = from_config("gte-modernbert-base", &[]);
    let b = run(&input, &[("engine", "tei"), ("card", "l4-24gb")]);
    assert_eq!(bytes_of(&b, "activation_peak"), 251_658_240);
}

/// What TEI does not serve, or not the way modelled, is an error naming why: a
/// decoder (TEI's decoder embedding models are not modelled), tensor parallelism
/// (one GPU a server), a quantised format, a card where TEI pads its batches, and
/// Turing, where TEI's image is reported out of memory with far more room than this
/// rule needs.
#[test]
fn tei_refuses_what_it_does_not_serve_so() {
    let input = from_config("bge-large-en-v1.5", &[]);
    let est = estimate(&input).unwrap();
    type Case<'a> = (crate::estimate::EstimateInput, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 5] = [
        (
            llama_8b(&[]),
            &[("engine", "tei"), ("card", "l4-24gb"), ("max-model-len", "4096")],
            "encoder-only model only",
        ),
        (
            from_config("bge-large-en-v1.5", &[("tp", "2")]),
            &[("engine", "tei"), ("card", "l4-24gb")],
            "one GPU per server",
        ),
        (
            from_config("bge-large-en-v1.5", &[("format", "awq-4-g128")]),
            &[("engine", "tei"), ("card", "l4-24gb")],
            "quantised format",
        ),
        (
            from_config("bge-large-en-v1.5", &[]),
            &[("engine", "tei"), ("card", "v100-32gb")],
            "pads its batches",
        ),
        (input, &[("engine", "tei"), ("card", "t4-16gb")], "not modelled on Turing"),
    ];
    for (input, pairs, says) in cases {
        let est = estimate(&input).unwrap_or_else(|_| est.clone());
        let err = crate::engine::budget(&input, &est, &engine(pairs)).unwrap_err();
        assert!(err.to_string().contains(says), "{says}: {err}");
    }
}

/// Without a card, every catalogue card TEI's rule is modelled on has its row; the
/// cards it refuses (Turing, Volta, AMD, Apple) have none, and the rows are the
/// single-card budgets.
#[test]
fn tei_on_every_card_skips_the_cards_it_is_not_modelled_on() {
    use crate::catalogue::{Arch, CATALOGUE};
    let input = from_config("bge-large-en-v1.5", &[]);
    let est = estimate(&input).unwrap();
    let rows = crate::engine::budget_per_card(&input, &est, &engine(&[("engine", "tei")]))
        .expect("a row per card TEI runs on");
    let modelled = CATALOGUE
        .iter()
        .filter(|c| {
            matches!(
                c.arch,
                Arch::Ampere | Arch::Ada | Arch::Hopper | Arch::Blackwell | Arch::Unknown
            )
        })
        .count();
    assert_eq!(rows.len(), modelled);
    assert!(rows.iter().all(|r| r.id != "t4-16gb"));
    let l4 = rows.iter().find(|r| r.id == "l4-24gb").expect("an L4 row");
    assert_eq!(l4.kv_capacity_bytes, 22_677_309_440);
}
