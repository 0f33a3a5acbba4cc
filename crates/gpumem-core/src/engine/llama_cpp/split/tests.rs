//! llama.cpp over several cards: the split of the layers, each device's share worked
//! by hand from the rules, the sums equal to the one-card figures, and bad input.

#![allow(clippy::arithmetic_side_effects)]

use crate::engine::tests::*;
use super::tensor_split_layers;
use crate::headline::{Basis, headline};

/// Llama-3.1-8B bf16 (llama_cpp_allocates_its_cache_in_block_formats): a block's
/// tensors 436 224 000 B, the output layer (norm and output matrix) 1 050 681 344 B,
/// the token embeddings 1 050 673 152 B (on the host); f16 KV 4096 B per cell and
/// layer; the one-card compute buffer (3 × 14 336 + 2 × 4096) × 512 × 4 = 104 857 600.
const BLOCK: u64 = 436_224_000;
const OUTPUT: u64 = 1_050_681_344;
const EMBED: u64 = 1_050_673_152;
const CELL: u64 = 4096;
const COMPUTE: u64 = 104_857_600;
const CTX: u64 = 512 << 20;
const FIT: u64 = 1 << 30;

fn split(cards: &str, extra: &[(&str, &str)]) -> EngineBudget {
    let mut pairs = vec![
        ("engine", "llama.cpp"),
        ("card", cards),
        ("max-model-len", "8192"),
    ];
    pairs.extend_from_slice(extra);
    run(&llama_8b(&[]), &pairs)
}

/// Pipeline parallelism's 3 more copies of one device's inputs at 8192 cells and a
/// 512-token ubatch: the hidden state 512 × 4096 × 4 and the KQ mask 8192 × 512 × 4.
const COPIES: u64 = 3 * (512 * 4096 * 4 + 8192 * 512 * 4);

/// 24 GiB + 12 GiB, the default split: each card's free memory (capacity less the
/// 512 MiB context), 25 232 932 864 : 12 348 030 976, puts the split point at
/// 0.6714; slot il goes to GPU 0 while il ÷ 33 is below it: blocks 0–22 (22 ÷ 33 =
/// 0.667), and blocks 23–31 and the output layer (slot 32) on GPU 1.
#[test]
fn the_default_split_follows_free_memory() {
    let b = split("24GiB,12GiB", &[]);
    let d = &b.devices;
    assert_eq!(d.len(), 2);
    assert_eq!((d[0].blocks, d[0].output_layer), (23, false));
    assert_eq!((d[1].blocks, d[1].output_layer), (9, true));
    assert_eq!(d[0].layers, "blocks 0–22");
    assert_eq!(d[1].layers, "blocks 23–31 and the output layer");
    assert_eq!(d[0].weights_bytes, 23 * BLOCK);
    assert_eq!(d[1].weights_bytes, 9 * BLOCK + OUTPUT);
    assert_eq!(d[0].kv_bytes, 8192 * CELL * 23);
    assert_eq!(d[1].kv_bytes, 8192 * CELL * 9);
    for x in d {
        assert_eq!(x.compute_bytes, COMPUTE + COPIES);
        assert_eq!(x.context_bytes, CTX);
        assert_eq!(x.fit_margin_bytes, FIT);
    }
    // 536 870 912 + 10 033 152 000 + 180 355 072 + 1 073 741 824 + 771 751 936.
    assert_eq!(d[0].need_bytes, 12_595_871_744);
    assert_eq!(d[0].headroom_bytes, 25_769_803_776 - 12_595_871_744);
    // 536 870 912 + 4 976 697 344 + 180 355 072 + 1 073 741 824 + 301 989 888.
    assert_eq!(d[1].need_bytes, 7_069_655_040);
    assert_eq!(d[1].headroom_bytes, 12_884_901_888 - 7_069_655_040);
    // The 12 GiB card has the least headroom: the budget is its.
    assert!(d[1].most_loaded && !d[0].most_loaded);
    assert_eq!(b.capacity_bytes, 12_884_901_888);
    assert_eq!(b.kv_cache_bytes, Some(d[1].kv_bytes));
    assert_eq!(b.margin_bytes, d[1].headroom_bytes);
    assert_eq!(b.outcome, Outcome::Fits);
    assert_eq!(b.host_weights_bytes, Some(EMBED));
}

/// The sums over the devices are the one-card figures: every tensor once, every
/// layer's cache once; the host holds the token embeddings either way.
#[test]
fn the_devices_add_up_to_one_card() {
    for extra in [&[][..], &[("tensor-split", "3,1")][..]] {
        for (cards, input) in [
            ("rtx-4090,rtx-3090", llama_8b(&[])),
            ("rtx-4090,rtx-3090", llama_8b(&[("format", "q4_k_m")])),
            ("24GiB,12GiB,8GiB", llama_8b(&[("format", "q4_k_m")])),
        ] {
            let mut pairs = vec![
                ("engine", "llama.cpp"),
                ("card", cards),
                ("max-model-len", "8192"),
            ];
            pairs.extend_from_slice(extra);
            let many = run(&input, &pairs);
            let one = run(
                &input,
                &[
                    ("engine", "llama.cpp"),
                    ("card", "96GiB"),
                    ("max-model-len", "8192"),
                ],
            );
            let total = |f: fn(&DeviceShare) -> u64| many.devices.iter().map(f).sum::<u64>();
            assert_eq!(total(|d| d.weights_bytes), bytes_of(&one, "weights"));
            assert_eq!(total(|d| d.kv_bytes), one.kv_cache_bytes.unwrap());
            assert_eq!(total(|d| d.blocks), 32);
            assert_eq!(many.devices.iter().filter(|d| d.output_layer).count(), 1);
            assert_eq!(many.host_weights_bytes, one.host_weights_bytes);
            assert_eq!(many.devices.iter().filter(|d| d.most_loaded).count(), 1);
        }
    }
}

/// A 4090 and a 3090 at --tensor-split 3,1: split points 0.75 and 1; slot il goes
/// to GPU 0 while il ÷ 33 < 0.75: blocks 0–24 (24 ÷ 33 = 0.727), and blocks 25–31 and
/// the output layer on the 3090. By default (free memory 25 220 349 952 : 25 232 932 864,
/// point 0.49988) blocks 0–16 (16 ÷ 33 = 0.485) on the 4090, 17–31 and the output on
/// the 3090. Llama-3.1-8B bf16, 8192 cells.
#[test]
fn a_4090_and_a_3090_by_default_and_at_3_to_1() {
    let at = split("rtx-4090,rtx-3090", &[("tensor-split", "3,1")]);
    let d = &at.devices;
    assert_eq!(d[0].layers, "blocks 0–24");
    assert_eq!(d[0].weights_bytes, 25 * BLOCK);
    assert_eq!(d[1].weights_bytes, 7 * BLOCK + OUTPUT);
    assert_eq!(d[0].kv_bytes, 8192 * CELL * 25);
    // GPU 0: 536 870 912 + 10 905 600 000 + 180 355 072 + 1 073 741 824 + 838 860 800
    // = 13 535 428 608 on 25 757 220 864 (the 4090's reported total).
    assert_eq!(d[0].need_bytes, 13_535_428_608);
    assert_eq!(d[0].headroom_bytes, 25_757_220_864 - 13_535_428_608);
    assert_eq!(d[0].split, "3");
    assert!(d[0].most_loaded);
    assert_eq!(at.card, "rtx-4090");
    let default = split("rtx-4090,rtx-3090", &[]);
    let d = &default.devices;
    assert_eq!((d[0].blocks, d[1].blocks), (17, 15));
    assert_eq!(d[0].weights_bytes, 17 * BLOCK);
    assert_eq!(d[1].weights_bytes, 15 * BLOCK + OUTPUT);
    // GPU 1: 536 870 912 + 7 594 041 344 + 180 355 072 + 1 073 741 824 + 503 316 480.
    assert_eq!(d[1].need_bytes, 9_888_325_632);
    assert_eq!(d[1].headroom_bytes, 25_769_803_776 - 9_888_325_632);
    // GPU 0: 17 blocks, 7 415 808 000 B + 570 425 344 B of cache: 9 777 201 152, on
    // 25 757 220 864; the 3090's output layer leaves it the least headroom
    // (15 881 478 144 against 15 980 019 712): the most loaded.
    assert_eq!(d[0].need_bytes, 536_870_912 + 7_415_808_000 + 180_355_072 + FIT + 570_425_344);
    assert_eq!(d[0].headroom_bytes, 15_980_019_712);
    assert!(d[1].most_loaded && !d[0].most_loaded);
    assert_eq!(default.card, "rtx-3090");
}

/// A split where one device does not fit: the answer does not, naming that device,
/// even though the other has room to spare; the headline agrees.
#[test]
fn one_short_device_refuses_the_whole() {
    // 24 GiB + 8 GiB at 1,1: 16 blocks each, the output layer on the 8 GiB card:
    // 536 870 912 + 16 × 436 224 000 + 1 050 681 344 + … > 8 GiB.
    let b = split("24GiB,8GiB", &[("tensor-split", "1,1")]);
    assert_eq!(b.devices[0].outcome, Outcome::Fits);
    assert_eq!(b.devices[1].outcome, Outcome::Refused);
    assert!(b.devices[1].most_loaded);
    assert_eq!(b.outcome, Outcome::Refused);
    assert_eq!(b.capacity_bytes, 8 << 30);
    let input = llama_8b(&[]);
    let est = estimate(&input).unwrap();
    let p = engine(&[
        ("engine", "llama.cpp"),
        ("card", "24GiB,8GiB"),
        ("tensor-split", "1,1"),
        ("max-model-len", "8192"),
    ]);
    let h = headline(&input, &est, p.card.as_ref(), &Basis::Engine(Box::new(p.clone()))).unwrap();
    assert_eq!(h.verdict, "no");
    assert_eq!(h.card.capacity_bytes, 8 << 30);
    assert_eq!(h.card.headroom_bytes, b.devices[1].headroom_bytes);
    assert!(h.cards.is_none());
    // The default split (by free memory) puts fewer layers on the small card: it fits.
    let fine = split("24GiB,8GiB", &[]);
    assert_eq!(fine.outcome, Outcome::Fits);
    assert!(fine.devices[1].blocks < 16);
}

/// More cards than shares: the rest get 0, as common/arg.cpp fills them; a card with
/// no share holds no layer, and needs only its CUDA context and the --fit margin.
#[test]
fn a_card_without_a_share_holds_nothing() {
    let b = split("24GiB,24GiB,12GiB", &[("tensor-split", "1,1")]);
    let d = &b.devices[2];
    assert_eq!((d.blocks, d.output_layer, d.layers.as_str()), (0, false, "none"));
    assert_eq!(d.weights_bytes + d.kv_bytes + d.compute_bytes, 0);
    assert_eq!(d.need_bytes, CTX + FIT);
    assert_eq!(d.split, "0");
}

/// -ngl below every layer: the first blocks on the host, the rest split; no
/// pipeline parallelism (not every layer offloaded), so no extra input copies.
#[test]
fn ngl_leaves_the_first_blocks_on_the_host() {
    let b = split("24GiB,24GiB", &[("tensor-split", "1,1"), ("n-gpu-layers", "21")]);
    let d = &b.devices;
    // i_gpu_start = 33 − 21 = 12; slots 12–32 over 21: 12 + k for k ÷ 21 < 0.5.
    assert_eq!(d[0].layers, "blocks 12–22");
    assert_eq!(d[1].layers, "blocks 23–31 and the output layer");
    assert_eq!(d[0].compute_bytes, COMPUTE);
    assert_eq!(b.host_weights_bytes, Some(EMBED + 12 * BLOCK));
    assert_eq!(d[0].kv_bytes + d[1].kv_bytes, 8192 * CELL * 20);
}

fn error(pairs: &[(&str, &str)]) -> String {
    let (p, errors) = from_pairs(pairs.iter().copied());
    if let Some(e) = errors.first() {
        return e.to_string();
    }
    let input = llama_8b(&[]);
    let est = estimate(&input).unwrap();
    budget(&input, &est, &p).expect_err("refused").to_string()
}

/// Bad input is an error naming the flag, never a panic.
#[test]
fn bad_cards_and_splits_are_clear_errors() {
    let ll = |card: &'static str, extra: &[(&'static str, &'static str)]| {
        let mut v = vec![("engine", "llama.cpp"), ("card", card), ("max-model-len", "8192")];
        v.extend_from_slice(extra);
        error(&v)
    };
    let e = ll("rtx-4090,rtx-9999x", &[]);
    assert!(e.starts_with("card:") && e.contains("card 1"), "{e}");
    let e = ll("rtx-4090,,rtx-3090", &[]);
    assert!(e.contains("empty"), "{e}");
    let seventeen = ["24GiB"; 17].join(",");
    let e = error(&[("engine", "llama.cpp"), ("card", &seventeen)]);
    assert!(e.contains("at most 16"), "{e}");
    let e = ll("rtx-4090,m3-max-128gb", &[]);
    assert!(e.contains("Mac"), "{e}");
    for (split, what) in [
        ("0,0", "every share is 0"),
        ("-1,1", "finite share of 0 or more"),
        ("NaN,1", "finite share"),
        ("inf,1", "finite share"),
        ("3,x", "not a number"),
        ("3,,1", "not a number"),
        ("1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1", "fewer than 16"),
    ] {
        let e = ll("rtx-4090,rtx-3090", &[("tensor-split", split)]);
        assert!(e.starts_with("tensor-split:") && e.contains(what), "{split}: {e}");
    }
    let e = ll("rtx-4090,rtx-3090", &[("main-gpu", "2")]);
    assert!(e.starts_with("main-gpu:") && e.contains("0 to 1"), "{e}");
    let e = ll("rtx-4090,rtx-3090", &[("tensor-split", "3,1,1")]);
    assert!(e.contains("3 shares for 2 cards"), "{e}");
    for (mode, what) in [("row", "not modelled"), ("none", "one card"), ("tensor", "not modelled"), ("rows", "not a llama.cpp split mode")] {
        let e = ll("rtx-4090,rtx-3090", &[("split-mode", mode)]);
        assert!(e.starts_with("split-mode:") && e.contains(what), "{mode}: {e}");
    }
    let e = error(&[("engine", "tgi"), ("card", "rtx-4090,rtx-3090")]);
    assert!(e.contains("under --engine llama.cpp"), "{e}");
    let e = error(&[("card", "rtx-4090,rtx-3090")]);
    assert!(e.contains("under --engine llama.cpp"), "{e}");
    // --gpus with a list of cards.
    let (p, errors) = from_pairs([("engine", "llama.cpp"), ("card", "rtx-4090,rtx-3090"), ("max-model-len", "8192")]);
    assert!(errors.is_empty());
    let input = llama_8b(&[("gpus", "2"), ("tp", "2")]);
    let est = estimate(&input).unwrap();
    let e = budget(&input, &est, &p).expect_err("gpus").to_string();
    assert!(e.starts_with("gpus:"), "{e}");
}

/// `--split-mode layer` is the default: giving it changes nothing; one card in the
/// list is the one-card answer.
#[test]
fn layer_mode_and_a_single_card_are_as_before() {
    let a = split("rtx-4090,rtx-3090", &[]);
    let b = split("rtx-4090,rtx-3090", &[("split-mode", "layer")]);
    assert_eq!(a, b);
    // --main-gpu places nothing under layer: the same devices, one more assumption.
    let c = split("rtx-4090,rtx-3090", &[("main-gpu", "1")]);
    assert_eq!(a.devices, c.devices);
    assert!(c.assumptions.iter().any(|s| s.starts_with("--main-gpu 1")));
    let one = engine(&[("engine", "llama.cpp"), ("card", "rtx-4090")]);
    assert!(one.devices.is_empty());
    assert_eq!(one.card.map(|c| c.id), Some("rtx-4090"));
    let two = engine(&[("engine", "llama.cpp"), ("card", " 4090 , 3090 ")]);
    assert_eq!(two.devices.iter().map(|c| c.id).collect::<Vec<_>>(), ["rtx-4090", "rtx-3090"]);
}

/// The largest context over a split is where every device still holds its layers'
/// cache: one token more and the most loaded one is short.
#[test]
fn the_largest_context_is_the_splits() {
    let input = llama_8b(&[("context", "8192")]);
    let p = engine(&[("engine", "llama.cpp"), ("card", "rtx-4090,rtx-3060")]);
    let l = largest(&input, &p.card.unwrap(), &p);
    assert_eq!(l.card, "rtx-4090,rtx-3060-12gb");
    let lc = l.largest_context.expect("some context fits");
    let est = estimate(&input).unwrap();
    let at = |m: u64| {
        let q = EngineParams {
            max_model_len: Some(m),
            ..p.clone()
        };
        budget(&input, &est, &q).unwrap()
    };
    assert!(at(lc).fits_one_sequence);
    assert!(!at(lc + 1).fits_one_sequence);
    assert!(at(lc).devices.iter().all(|d| d.headroom_bytes >= 0));
    assert!(at(lc + 1).devices.iter().any(|d| d.headroom_bytes < 0));
    // The 12 GB card alone holds less than the split.
    let alone = engine(&[("engine", "llama.cpp"), ("card", "rtx-3060")]);
    let one = largest(&input, &alone.card.unwrap(), &alone);
    assert!(one.largest_context.unwrap_or(0) < lc);
}

/// The answer is the most loaded card's row: its verdict (with what a label capacity
/// may lack, the 3060's), capacity and headroom; it fits only if every row does.
#[test]
fn the_answer_is_the_most_loaded_row() {
    // Fits up to 98 304 tokens, borderline at 131 072 (the 3060's label), no with two
    // slots of 131 072.
    let mut seen = Vec::new();
    for (ctx, seqs) in [
        ("4096", "1"),
        ("32768", "1"),
        ("98304", "1"),
        ("131072", "1"),
        ("131072", "2"),
    ] {
        let input = llama_8b(&[("context", ctx), ("sequences", seqs)]);
        let est = estimate(&input).unwrap();
        let p = engine(&[("engine", "llama.cpp"), ("card", "rtx-4090,rtx-3060")]);
        let b = budget(&input, &est, &p).unwrap();
        let h = headline(&input, &est, p.card.as_ref(), &Basis::Engine(Box::new(p.clone())))
            .unwrap();
        let row = b.devices.iter().find(|d| d.most_loaded).unwrap();
        let word = match row.outcome {
            Outcome::Fits => "yes",
            Outcome::Borderline => "borderline",
            Outcome::Refused => "no",
        };
        assert_eq!(h.verdict, word, "{ctx}");
        assert_eq!(h.card.id, row.card, "{ctx}");
        assert_eq!(h.card.headroom_bytes, row.headroom_bytes, "{ctx}");
        let all_fit = b.devices.iter().all(|d| d.outcome == Outcome::Fits);
        assert_eq!(h.verdict == "yes", all_fit, "{ctx}");
        seen.push(h.verdict);
    }
    assert_eq!(seen, ["yes", "yes", "yes", "borderline", "no"]);
}

/// `--tensor-split` by hand, llama.cpp's rule: 32 blocks and the output layer, every
/// layer on the GPUs (`-ngl 33`).
/// - `3,1`: split points 0.75, 1; layer il goes to GPU 0 while il ÷ 33 < 0.75, il ≤ 24:
///   25 blocks there, blocks 25–31 and the output layer on GPU 1.
/// - `1,1`: il ÷ 33 < 0.5, il ≤ 16: 17 blocks on GPU 0, 15 and the output on GPU 1.
/// - `-ngl 20` with `1,1`: i_gpu_start 13, 20 active; (il − 13) ÷ 20 < 0.5 → blocks
///   13–22 on GPU 0, 23–31 and the output on GPU 1, blocks 0–12 on the CPU.
/// - A zero share: that GPU gets nothing (its split point equals the one before).
#[test]
fn tensor_split_follows_llama_cpps_split_points() {
    let count = |v: &[Option<usize>], d: Option<usize>| v.iter().filter(|x| **x == d).count();
    let uneven = tensor_split_layers(32, 33, &[3.0, 1.0]);
    assert_eq!(uneven.len(), 33);
    assert_eq!((count(&uneven, Some(0)), count(&uneven, Some(1))), (25, 8));
    assert_eq!(uneven[24], Some(0));
    assert_eq!(uneven[25], Some(1));
    assert_eq!(uneven[32], Some(1), "the output layer");
    let even = tensor_split_layers(32, 33, &[1.0, 1.0]);
    assert_eq!((count(&even, Some(0)), count(&even, Some(1))), (17, 16));
    let part = tensor_split_layers(32, 20, &[1.0, 1.0]);
    assert_eq!(count(&part, None), 13);
    assert_eq!(part[12], None);
    assert_eq!(part[13], Some(0));
    assert_eq!(part[22], Some(0));
    assert_eq!(part[23], Some(1));
    assert_eq!(part[32], Some(1));
    let gap = tensor_split_layers(32, 33, &[1.0, 0.0, 1.0]);
    assert_eq!(count(&gap, Some(1)), 0);
    assert_eq!((count(&gap, Some(0)), count(&gap, Some(2))), (17, 16));
    // More -ngl than layers is every layer; no positive share, no split.
    assert_eq!(tensor_split_layers(32, 99, &[1.0]), vec![Some(0); 33]);
    assert!(tensor_split_layers(32, 33, &[0.0, 0.0]).is_empty());
    // Free memory as the default shares: a 24 GiB card beside a 12 GiB one (2 : 1).
    let by_free = tensor_split_layers(80, 81, &[24.0 * 1024.0, 12.0 * 1024.0]);
    assert_eq!(count(&by_free, Some(0)), 54); // il ÷ 81 < 2/3: il ≤ 53
}

/// The flag reads `--tensor-split` by its text alone (no float conversion); the rule
/// converts it as llama.cpp's `std::stof` does. Both agree on what they refuse, and
/// only the conversion can see a share past `f32::MAX` or every share below its
/// smallest step.
#[test]
fn the_flag_checks_the_shares_text_as_the_rule_reads_it() {
    use crate::engine::llama_cpp::flags::{parse_tensor_split, tensor_split_shares};
    for text in [
        "3,1", "3/1", " 0.75 , 0.25", "+1,0", "1e2,5E-1", ".5,2.", "-0,1", "0,1", "1,0",
    ] {
        let shares = tensor_split_shares(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let floats = parse_tensor_split(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(shares.len(), floats.len(), "{text}");
        for (s, f) in shares.iter().zip(&floats) {
            assert_eq!(s.parse::<f32>().ok(), Some(*f), "{text}");
        }
    }
    assert_eq!(tensor_split_shares("3/ 1").unwrap(), ["3", "1"]);
    for (text, what) in [
        ("0,0", "every share is 0"),
        ("0e9,-0.0", "every share is 0"),
        ("-1,1", "finite share of 0 or more"),
        ("-0.5,1", "finite share of 0 or more"),
        ("NaN,1", "finite share"),
        ("inf,1", "finite share"),
        ("-Infinity,1", "finite share"),
        ("3,x", "not a number"),
        ("3,,1", "not a number"),
        ("1.2.3,1", "not a number"),
        ("e5,1", "not a number"),
        ("1e,1", "not a number"),
        ("1e+,1", "not a number"),
        (".,1", "not a number"),
        ("0x10,1", "not a number"),
        ("1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1", "fewer than 16"),
    ] {
        let e = tensor_split_shares(text).expect_err(text).to_string();
        assert!(e.starts_with("tensor-split:") && e.contains(what), "{text}: {e}");
        let e = parse_tensor_split(text).expect_err(text).to_string();
        assert!(e.contains(what), "{text}: {e}");
        // Rust's own parser refuses the same texts as numbers.
        if what == "not a number" {
            assert!(text.split([',', '/']).any(|s| s.trim().parse::<f32>().is_err()), "{text}");
        }
    }
    // Only the conversion sees these: a share past f32::MAX, every share below its
    // smallest step.
    assert!(tensor_split_shares("1e39,1").is_ok());
    let e = parse_tensor_split("1e39,1").unwrap_err().to_string();
    assert!(e.contains("finite share of 0 or more"), "{e}");
    assert!(tensor_split_shares("1e-50").is_ok());
    let e = parse_tensor_split("1e-50").unwrap_err().to_string();
    assert!(e.contains("every share is 0"), "{e}");
}
