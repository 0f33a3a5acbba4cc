//! llama.cpp's flags, named as `llama-server` names them.

use super::{CacheType, override_rules};
use crate::engine::flags::{Flag, Value, count, field, switch};
use crate::error::EstimateError;
use crate::fields::FieldKind;

/// llama.cpp's KV cache types (`--cache-type-k/-v`), with their block sizes.
const CACHE_TYPES: &[(&str, &str)] = &[
    ("f16", "f16"),
    ("bf16", "bf16"),
    ("f32", "f32"),
    ("q8_0", "q8_0: 34 B/32"),
    ("q5_1", "q5_1: 24 B/32"),
    ("q5_0", "q5_0: 22 B/32"),
    ("q4_1", "q4_1: 20 B/32"),
    ("q4_0", "q4_0: 18 B/32"),
    ("iq4_nl", "iq4_nl: 18 B/32"),
];

/// `--override-tensor` examples: every routed expert, those of blocks 10–29.
const OVERRIDES: &[(&str, &str)] = &[
    ("\\.ffn_.*_exps\\.=CPU", "experts on the host"),
    (
        "blk\\.(1[0-9]|2[0-9])\\.ffn_.*_exps\\.=CPU",
        "blocks 10–29's experts",
    ),
];

/// `--cache-type-k`.
pub(super) const CACHE_TYPE_K: Flag = Flag::new(
    field(
        "cache-type-k",
        FieldKind::Text,
        "llama.cpp K cache type",
        "f16",
        "llama.cpp: K cache type",
    )
    .choices(CACHE_TYPES),
    cache_type,
);

/// `--cache-type-v`.
pub(super) const CACHE_TYPE_V: Flag = Flag::new(
    field(
        "cache-type-v",
        FieldKind::Text,
        "llama.cpp V cache type",
        "f16",
        "llama.cpp: V cache type",
    )
    .choices(CACHE_TYPES),
    cache_type,
);

/// `--kv-unified`: one KV stream shared by every slot (llama-server's `-np auto` turns
/// it on).
pub(super) const KV_UNIFIED: Flag = Flag::new(
    field(
        "kv-unified",
        FieldKind::Bool(false),
        "llama.cpp unified KV cache",
        "",
        "llama.cpp --kv-unified: one cache stream for every slot (llama-server's -np auto sets it)",
    ),
    switch,
);

/// `--swa-full`: the sliding-window layers' cache as large as the full layers'
/// (`src/llama-kv-cache-iswa.cpp`: `size_swa = size_base`).
pub(super) const SWA_FULL: Flag = Flag::new(
    field(
        "swa-full",
        FieldKind::Bool(false),
        "llama.cpp full-size SWA cache",
        "",
        "llama.cpp --swa-full: the sliding-window layers keep every cell of the context, not the window's",
    ),
    switch,
);

/// `--n-gpu-layers` (all when absent).
pub(super) const N_GPU_LAYERS: Flag = Flag::new(
    field(
        "n-gpu-layers",
        FieldKind::Count,
        "llama.cpp GPU layers",
        "all",
        "llama.cpp: layers on the GPU",
    ),
    count,
);

/// `--n-cpu-moe`: MoE layers whose experts stay in host memory.
pub(super) const N_CPU_MOE: Flag = Flag::new(
    field(
        "n-cpu-moe",
        FieldKind::Count,
        "llama.cpp CPU MoE layers",
        "0",
        "llama.cpp: MoE layers with experts on the host",
    ),
    count,
);

/// `--override-tensor` (`-ot`) as typed: `<pattern>=<buffer type>,…`, split and checked
/// here ([`override_rules`]: so whatever reads the flags links no regular-expression
/// engine), the patterns compiled where the placement is ([`super::parse_overrides`]).
pub(super) const OVERRIDE_TENSOR: Flag = Flag::new(
    field(
        "override-tensor",
        FieldKind::Text,
        "llama.cpp tensor overrides (-ot)",
        "",
        "llama.cpp -ot: <regex>=<CPU|CUDA0>,…",
    )
    .choices(OVERRIDES),
    overrides,
);

/// A cache type as llama.cpp names it ([`CacheType::parse`]).
fn cache_type(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    CacheType::parse(key, text).map(|t| Value::Text(t.name().to_string()))
}

/// `-ot`'s rules, checked, kept as typed.
fn overrides(_: &'static str, text: &str) -> Result<Value, EstimateError> {
    override_rules(text).map(|_| Value::Text(text.to_string()))
}
