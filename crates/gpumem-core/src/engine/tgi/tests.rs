//! TGI's rule: its warm-up and wiggle room, by hand.

#![allow(clippy::arithmetic_side_effects)]

use crate::engine::tests::*;

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
