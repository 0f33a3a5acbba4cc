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
