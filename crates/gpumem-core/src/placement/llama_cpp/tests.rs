//! The placement chosen: a dense model's `-ngl` and a MoE model's `--n-cpu-moe`, each
//! derived by hand from the engine's lines, and the boundary (one block more on the
//! card is not "fits").

#![allow(clippy::arithmetic_side_effects)]

use super::*;
use crate::engine::from_pairs;
use crate::estimate::estimate;

fn input(preset: &str) -> EstimateInput {
    let p = crate::presets::find(preset).expect("preset");
    let (i, e) = crate::params::from_pairs(p.pairs.iter().copied());
    assert!(e.is_empty(), "{e:?}");
    i
}

fn params(pairs: &[(&str, &str)]) -> EngineParams {
    let (p, e) = from_pairs(pairs.iter().copied());
    assert!(e.is_empty(), "{e:?}");
    p
}

fn chosen(input: &EstimateInput, pairs: &[(&str, &str)]) -> Option<LlamaPlacement> {
    let est = estimate(input).expect("estimate");
    let p = params(pairs);
    choose(input, &est, &p, &p.card.expect("card")).expect("choose")
}

fn verdict(input: &EstimateInput, pairs: &[(&str, &str)]) -> String {
    let est = estimate(input).expect("estimate");
    let p = params(pairs);
    judge(HOST_LLAMA, input, &est, &p.card.expect("card"), &p)
        .expect("judge")
        .0
        .verdict
}

/// Llama-3.1-8B in bf16 on 12 GiB at -c 8192: every layer needs ~17 GiB. On the card
/// with `-ngl k`: the CUDA context (512 MiB), the compute buffer (100 MiB), the 1 GiB
/// --fit margin, the output layer (1 050 681 344 B) and k − 1 blocks of
/// 436 224 000 B weights + 8192 cells × 4096 B of KV; fits while the headroom is at
/// least the uncertainty, (512 + 100 MiB) ÷ 4.
#[test]
fn a_dense_model_gets_the_largest_ngl_that_fits() {
    let llama = input("llama-3.1-8b");
    let pairs = [
        ("engine", "llama.cpp"),
        ("card", "12GiB"),
        ("max-model-len", "8192"),
    ];
    let p = chosen(&llama, &pairs).expect("every layer does not fit 12 GiB");
    let capacity = 12u64 << 30;
    let fixed = (512u64 << 20) + 104_857_600 + (1 << 30) + 1_050_681_344;
    let margin = ((512u64 << 20) + 104_857_600) / 4;
    let per_block = 436_224_000 + 8192 * 4096;
    let k = 1 + (capacity - fixed - margin) / per_block;
    assert_eq!(k, 22);
    assert_eq!(p.n_gpu_layers, Some(k));
    assert_eq!(p.n_cpu_moe, None);
    assert_eq!(p.flags, "--n-gpu-layers 22");
    assert_eq!(p.blocks, 32);
    assert_eq!(p.fit.verdict, "yes");
    assert_eq!(p.fit.margin_bytes, margin);
    assert_eq!(
        p.fit.headroom_bytes,
        (capacity - fixed - (k - 1) * per_block) as i64
    );
    // One more layer does not fit: the next's verdict, and the budget's own.
    assert_ne!(p.next.verdict, "yes");
    let at = |ngl: &str| {
        let mut with = pairs.to_vec();
        with.push(("n-gpu-layers", ngl));
        verdict(&llama, &with)
    };
    assert_eq!(at("22"), "yes");
    assert_ne!(at("23"), "yes");
    // The host holds the token embeddings and the 33 − 22 = 11 blocks below.
    let host = p.host.expect("host");
    assert_eq!(host.need_bytes, 1_050_673_152 + 11 * 436_224_000);
    assert_eq!(host.fits, None);
    // Every layer fits a larger card: nothing to choose; a placement given is the user's.
    let h100 = [
        ("engine", "llama.cpp"),
        ("card", "80GiB"),
        ("max-model-len", "8192"),
    ];
    assert_eq!(chosen(&llama, &h100), None);
    let mut given = pairs.to_vec();
    given.push(("n-gpu-layers", "10"));
    assert_eq!(chosen(&llama, &given), None);
}

/// Mixtral-8x7B in bf16 (93 GB) on 80 GiB: `--n-cpu-moe k` takes k blocks' experts,
/// 3 × 8 × 14 336 × 4096 × 2 B each, off the card; the smallest k that leaves the
/// margin, from the headroom with every layer on the card. Checked against `--ram`.
#[test]
fn a_moe_model_gets_the_smallest_n_cpu_moe_that_fits() {
    let mut mixtral = input("mixtral-8x7b");
    let pairs = [
        ("engine", "llama.cpp"),
        ("card", "80GiB"),
        ("max-model-len", "16384"),
    ];
    let full = {
        let est = estimate(&mixtral).expect("estimate");
        let p = params(&pairs);
        judge(HOST_LLAMA, &mixtral, &est, &p.card.expect("card"), &p)
            .expect("judge")
            .0
    };
    assert!(full.headroom_bytes < 0, "{full:?}");
    let experts = 3 * 8 * 14_336 * 4096 * 2u64;
    let short = (full.margin_bytes as i64 - full.headroom_bytes) as u64;
    let k = short.div_ceil(experts);
    let p = chosen(&mixtral, &pairs).expect("a placement");
    assert_eq!(p.n_cpu_moe, Some(k));
    assert_eq!(p.n_gpu_layers, None);
    assert_eq!(p.flags, format!("--n-cpu-moe {k}"));
    assert_eq!(p.fit.verdict, "yes");
    assert_eq!(
        p.fit.headroom_bytes,
        full.headroom_bytes + (k * experts) as i64
    );
    assert_ne!(p.next.verdict, "yes");
    let at = |ncm: u64| {
        let n = ncm.to_string();
        let mut with = pairs.to_vec();
        with.push(("n-cpu-moe", n.as_str()));
        verdict(&mixtral, &with)
    };
    assert_eq!(at(k), "yes");
    assert_ne!(at(k - 1), "yes");
    // The host: the token embeddings and k blocks' experts; judged against --ram.
    let host = p.host.as_ref().expect("host").need_bytes;
    assert_eq!(host, 32_000 * 4096 * 2 + k * experts);
    mixtral.ram = Some(host - 1);
    let p = chosen(&mixtral, &pairs).expect("a placement");
    assert_eq!(p.host.as_ref().and_then(|h| h.fits), Some(false));
    mixtral.ram = Some(host);
    let p = chosen(&mixtral, &pairs).expect("a placement");
    assert_eq!(p.host.as_ref().and_then(|h| h.fits), Some(true));
}

/// When even every block's experts on the host leave too much on the card, the
/// experts stay there and `-ngl` drops whole layers: Mixtral on 4 GiB.
#[test]
fn a_moe_model_too_large_even_without_experts_drops_layers() {
    let mixtral = input("mixtral-8x7b");
    let pairs = [
        ("engine", "llama.cpp"),
        ("card", "4GiB"),
        ("max-model-len", "4096"),
    ];
    let p = chosen(&mixtral, &pairs).expect("a placement");
    assert_eq!(p.n_cpu_moe, Some(32));
    let g = p.n_gpu_layers.expect("-ngl");
    assert!(g > 0 && g < 33, "{g}");
    assert_eq!(p.flags, format!("--n-cpu-moe 32 --n-gpu-layers {g}"));
    assert_eq!(p.fit.verdict, "yes");
    assert_ne!(p.next.verdict, "yes");
    let at = |ngl: u64| {
        let n = ngl.to_string();
        let mut with = pairs.to_vec();
        with.extend([("n-cpu-moe", "32"), ("n-gpu-layers", n.as_str())]);
        verdict(&mixtral, &with)
    };
    assert_eq!(at(g), "yes");
    assert_ne!(at(g + 1), "yes");
    // Not even -ngl 0 fits 1 GiB (the context, compute buffer and margin are more).
    let tiny = [
        ("engine", "llama.cpp"),
        ("card", "1GiB"),
        ("max-model-len", "4096"),
    ];
    let p = chosen(&input("llama-3.1-8b"), &tiny).expect("an answer");
    assert_eq!(p.n_gpu_layers, Some(0));
    assert_eq!(p.fit.verdict, "no");
}

/// The bisection finds the boundary of any monotone predicate, and says when none holds.
#[test]
fn smallest_is_the_boundary() {
    for b in 0..=10 {
        assert_eq!(smallest(0, 10, |k| k >= b), Some(b));
    }
    assert_eq!(smallest(0, 10, |_| false), None);
    assert_eq!(smallest(3, 2, |_| true), None);
    for b in 0..=10 {
        // largest g with g ≤ b
        assert_eq!(largest_ngl(10, |g| g <= b), b);
    }
    assert_eq!(largest_ngl(10, |_| false), 0);
}
