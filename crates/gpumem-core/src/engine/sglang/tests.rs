//! SGLang's rule: its default fraction by card and tp, by hand.

#![allow(clippy::arithmetic_side_effects)]

use super::*;
use crate::engine::arith::GIB;
use crate::engine::tests::*;

/// SGLang's own default on an H100 at tp 1: reserved = 512 + 8192 × 1.5 + 1 ÷ 8 ×
/// 1024 + 256 × 2 = 13 440 MiB; fraction = round((81 559 − 13 440) ÷ 81 559, 3) = 0.835.
/// pre_model_load_memory = torch's 85 027 979 264 − 512 MiB = 84 491 108 352; KV =
/// 84 491 108 352 − 16 060 522 496 − ⌊84 491 108 352 × 0.165⌋ (13 941 032 878) −
/// 1 564 672 (the load's rounding: every matrix of Llama-3.1-8B and its rotary cache is
/// a whole number of 2 MiB, but its 65 norms of 8 KiB share one 2 MiB small-pool
/// segment, 2 097 152 − 532 480) = 54 487 988 306 B → ÷ 131 072 = 415 710 tokens.
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
    assert_eq!(bytes_of(&b, "load_rounding"), 1_564_672);
    assert_eq!(b.kv_capacity_bytes, 54_487_988_306);
    assert_eq!(b.kv_capacity_tokens, 415_710);
    assert!(b.assumptions.iter().any(|a| a.contains("0.835")));
    let given = run(
        &llama_8b(&[]),
        &with(&[("engine", "sglang"), ("mem-fraction-static", "0.88")]),
    );
    assert_eq!(bytes_of(&given, "reserved"), 10_138_933_002);
}

/// `--memory-in-use` leaves pre_model_load_memory: on the H100 of the test above at
/// 0.88, 2 GiB held elsewhere costs the pool 0.88 × 2 GiB (rounded as the reserve is),
/// and the line says what was given; `1.5`, `800MiB` and `2GB` read as sizes.
#[test]
fn sglang_sizes_from_what_other_processes_leave_free() {
    let base = [("engine", "sglang"), ("mem-fraction-static", "0.88")];
    let bare = run(&llama_8b(&[]), &with(&base));
    let mut flags = base.to_vec();
    flags.push(("memory-in-use", "2"));
    let b = run(&llama_8b(&[]), &with(&flags));
    assert_eq!(bytes_of(&b, "memory_in_use"), 2 * GIB);
    let lost = bare.kv_capacity_bytes - b.kv_capacity_bytes;
    let expected = (2 * GIB * 88 / 100) as i64;
    assert!((lost - expected).abs() <= 1, "{lost} {expected}");
    assert!(bare.lines.iter().all(|l| l.key != "memory_in_use"));
    use crate::engine::flags::memory_in_use_bytes as size;
    assert_eq!(size("1.5"), Some(3 * GIB / 2));
    assert_eq!(size("800MiB"), Some(800 * MIB));
    assert_eq!(size("2GB"), Some(2_000_000_000));
    assert_eq!(size("0"), Some(0));
    for bad in ["", "-1", "1.", ".5", "lots", "1.5 apples"] {
        assert_eq!(size(bad), None, "{bad}");
    }
}

/// SGLang's load takes the rotary cache beside the checkpoint, in fp32 on CUDA:
/// Llama-3.1-8B at 131 072 positions × head dim 128 × 4 B = 67 108 864 B more weights,
/// and as much less pool.
#[test]
fn sglang_loads_an_fp32_rotary_cache() {
    let flags = with(&[("engine", "sglang"), ("mem-fraction-static", "0.88")]);
    let none = run(&llama_8b(&[("max-position", "0")]), &flags);
    let full = run(&llama_8b(&[("max-position", "131072")]), &flags);
    assert_eq!(
        bytes_of(&full, "weights") - bytes_of(&none, "weights"),
        67_108_864
    );
    assert_eq!(
        none.kv_capacity_bytes - full.kv_capacity_bytes,
        67_108_864
    );
}

/// What SGLang's load reserves beyond the tensors, by hand (torch's caching allocator:
/// a request between 1 and 10 MiB takes a block of a 20 MiB segment, a larger one a
/// segment rounded up to 2 MiB). Qwen3-0.6B in bf16 at tp 1: per layer the fused qkv
/// (32 × 128 rows × 1024 = 8 MiB) opens a 20 MiB segment, o_proj (4 MiB) and down_proj
/// (6 MiB) share it, 2 MiB left; gate/up (12 MiB) takes a 12 MiB segment: 2 MiB a
/// layer, 28 layers. The embedding (151 936 × 1024 × 2 = 296.75 MiB; 151 936 is
/// 64 × 2 374, nothing padded) takes 298 MiB: 1.25 MiB more. The rotary cache (40 960
/// × 128 × 4 = 20 MiB) is a segment of its own. The 114 norms (2 KiB and 256 B) fit
/// one 2 MiB small-pool segment. A quantised checkpoint gets no line.
#[test]
fn sglang_load_reserves_whole_segments() {
    let shape = [
        ("layers", "28"),
        ("hidden", "1024"),
        ("heads", "16"),
        ("kv-heads", "8"),
        ("head-dim", "128"),
        ("intermediate", "3072"),
        ("vocab", "151936"),
        ("tied-embeddings", "true"),
        ("qk-norm", "true"),
        ("max-position", "40960"),
    ];
    let read = |extra: &[(&'static str, &'static str)]| {
        let (input, errors) =
            crate::params::from_pairs(shape.iter().chain(extra.iter()).copied());
        assert!(errors.is_empty(), "{errors:?}");
        input
    };
    let b = run(&read(&[]), &with(&[("engine", "sglang")]));
    let norms = 28 * (2 * 256 + 2 * 2048) + 2048;
    let expected = 28 * 2 * MIB + 5 * MIB / 4 + (2 * MIB - norms);
    assert_eq!(bytes_of(&b, "load_rounding"), expected);
    let q = run(&read(&[("format", "awq-4-g128")]), &with(&[("engine", "sglang")]));
    assert!(q.lines.iter().all(|l| l.key != "load_rounding"));
}
