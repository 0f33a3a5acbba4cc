//! Property tests: monotonicity of the estimate, and no panic / no overflow on
//! extreme or random inputs (the parsers included).
#![cfg(not(target_arch = "wasm32"))]

use gpumem_core::estimate::estimate;
use gpumem_core::import::{config, gguf, safetensors};
use gpumem_core::params::{from_pairs, keys};
use proptest::prelude::*;

fn arch_pairs(layers: u64, kv: u64, context: u64, seqs: u64) -> Vec<(String, String)> {
    vec![
        ("layers".into(), layers.to_string()),
        ("hidden".into(), "4096".into()),
        ("heads".into(), "32".into()),
        ("kv-heads".into(), kv.to_string()),
        ("intermediate".into(), "14336".into()),
        ("vocab".into(), "32000".into()),
        ("context".into(), context.to_string()),
        ("sequences".into(), seqs.to_string()),
    ]
}

fn run(pairs: &[(String, String)]) -> Option<gpumem_core::estimate::Estimate> {
    let (input, errors) = from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if !errors.is_empty() {
        return None;
    }
    estimate(&input).ok()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn more_context_never_shrinks_kv_or_total(layers in 1u64..128, kv in prop::sample::select(vec![1u64, 2, 4, 8, 16, 32]),
                                              ctx in 1u64..1_000_000, extra in 0u64..1_000_000, seqs in 1u64..64) {
        let a = run(&arch_pairs(layers, kv, ctx, seqs)).expect("valid");
        let b = run(&arch_pairs(layers, kv, ctx + extra, seqs)).expect("valid");
        prop_assert!(b.kv_cache_bytes >= a.kv_cache_bytes);
        prop_assert!(b.total_bytes >= a.total_bytes);
    }

    #[test]
    fn more_sequences_never_shrink_the_total(ctx in 1u64..100_000, seqs in 1u64..256, more in 0u64..256) {
        let a = run(&arch_pairs(32, 8, ctx, seqs)).expect("valid");
        let b = run(&arch_pairs(32, 8, ctx, seqs + more)).expect("valid");
        prop_assert!(b.total_bytes >= a.total_bytes);
    }

    #[test]
    fn more_parameters_never_weigh_less(p in 1u64..u64::MAX / 64, extra in 0u64..1_000_000_000_000,
                                        fmt in prop::sample::select(vec!["fp32", "bf16", "fp8", "int8", "gptq-4-g128", "awq-4-g128", "nf4", "nf4-dq", "q4_k", "q8_0"])) {
        let pairs = |n: u64| vec![("parameters".to_string(), n.to_string()), ("format".to_string(), fmt.to_string())];
        if let (Some(a), Some(b)) = (run(&pairs(p)), run(&pairs(p.saturating_add(extra)))) {
            prop_assert!(b.weights_bytes >= a.weights_bytes);
            // A quantised format is never cheaper than its packed bits alone.
            prop_assert!(a.weights_bytes >= p / 2);
        }
    }

    #[test]
    fn any_pairs_give_a_result_or_an_error_never_a_panic(
        pairs in prop::collection::vec((prop::sample::select(keys().collect::<Vec<_>>()),
            prop_oneof![Just("0".to_string()), Just("18446744073709551615".to_string()), Just("1e30".to_string()),
                        Just("-1".to_string()), Just("true".to_string()), Just("q4_k".to_string()),
                        "[0-9]{1,20}", ".{0,8}"]), 0..24)) {
        let (input, _errors) = from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
        let _ = estimate(&input);
    }

    #[test]
    fn header_parsers_never_panic_on_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = safetensors::parse_header(&bytes);
        let _ = gguf::parse_header(&bytes);
        let mut g = b"GGUF\x03\0\0\0".to_vec();
        g.extend_from_slice(&bytes);
        let _ = gguf::parse_header(&g);
        let _ = config::parse_config(&String::from_utf8_lossy(&bytes));
    }
}
