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

/// `--tensor-split` (`-ts`): each GPU's share of the layers, in device order, over the
/// cards `--card` names (default: each device's free memory).
pub(super) const TENSOR_SPLIT: Flag = Flag::new(
    field(
        "tensor-split",
        FieldKind::Text,
        "llama.cpp tensor split (-ts)",
        "free memory",
        "llama.cpp -ts: each GPU's share of the layers, in --card's order (3,1); default: each card's free memory",
    )
    .choices(&[("3,1", "3 : 1"), ("1,1", "1 : 1")]),
    tensor_split,
);

/// `--split-mode` (`-sm`): `layer`, llama.cpp's default, is the one modelled.
pub(super) const SPLIT_MODE: Flag = Flag::new(
    field(
        "split-mode",
        FieldKind::Text,
        "llama.cpp split mode (-sm)",
        "layer",
        "llama.cpp -sm over several cards: layer (the default: whole layers per GPU) is modelled; row and tensor are not",
    )
    .choices(&[("layer", "layer — whole layers per GPU")]),
    split_mode,
);

/// `--main-gpu` (`-mg`): the device `--split-mode none` keeps and `row` keeps its KV
/// cache on; under `layer`, the mode modelled, it places nothing (read to check it
/// names one of the cards).
pub(super) const MAIN_GPU: Flag = Flag::new(
    field(
        "main-gpu",
        FieldKind::Count,
        "llama.cpp main GPU (-mg)",
        "0",
        "llama.cpp -mg: the main GPU's index among --card's; under --split-mode layer it places nothing",
    ),
    count,
);

/// `--mmproj`: the multimodal projector's figures as `key=value` pairs
/// ([`super::mmproj::Projector::to_text`]); the agent's `--mmproj FILE` reads them from
/// the file's header.
pub(super) const MMPROJ: Flag = Flag::new(
    field(
        super::mmproj::KEY,
        FieldKind::Text,
        "llama.cpp multimodal projector (--mmproj)",
        "none",
        "llama.cpp --mmproj: the projector GGUF (the agent reads its header; the page takes its bytes=…,tensors=…,image-size=…,patch-size=…,hidden=…,ffn=…,heads=…,layers=…,projector=… pairs): its weights and its vision encoder's compute buffer on the card",
    )
    .choices(&[(
        "bytes=624412672,tensors=377,image-size=336,patch-size=14,hidden=1024,ffn=4096,heads=16,layers=23,projector=mlp",
        "LLaVA-1.5's mmproj-model-f16.gguf",
    )]),
    mmproj,
);

/// `--no-mmproj-offload`: the projector and its encoder on the CPU.
pub(super) const NO_MMPROJ_OFFLOAD: Flag = Flag::new(
    field(
        "no-mmproj-offload",
        FieldKind::Bool(false),
        "llama.cpp projector on the CPU",
        "",
        "llama.cpp --no-mmproj-offload: the projector's weights and its encoder's compute buffer in host memory",
    ),
    switch,
);

/// `--tensor-split` as `common/arg.cpp` reads it: values separated by `,` or `/`
/// (`std::regex("[,/]+")`), each `std::stof`, fewer than `llama_max_devices()` (16),
/// the devices without one at 0. Here each must also be a finite number ≥ 0 (llama.cpp
/// would take a negative or NaN share and split nonsense), and not all 0 (llama.cpp
/// then splits by free memory, as when the flag is absent: leave it out).
///
/// Read in two steps: [`tensor_split_shares`] checks the text (what reading the flag
/// needs), then each share becomes the `float` llama.cpp weighs it as; a share that
/// only the conversion shows out of range (past `f32::MAX`, or every share below its
/// smallest step) is refused here.
pub fn parse_tensor_split(text: &str) -> Result<Vec<f32>, EstimateError> {
    let bad = |why: String| EstimateError::invalid("tensor-split", why);
    let mut out = Vec::new();
    for (i, item) in tensor_split_shares(text)?.into_iter().enumerate() {
        let v: f32 = item
            .parse()
            .map_err(|_| bad(format!("value {i} ({item:?}) is not a number")))?;
        if !v.is_finite() || v < 0.0 {
            return Err(bad(format!(
                "value {i} ({item}) must be a finite share of 0 or more"
            )));
        }
        out.push(v);
    }
    if out.iter().all(|v| *v == 0.0) {
        return Err(bad(ALL_ZERO.into()));
    }
    Ok(out)
}

/// Why every share 0 is refused.
const ALL_ZERO: &str =
    "every share is 0: llama.cpp then splits by free memory, as when --tensor-split is left out";

/// `--tensor-split`'s shares as typed (trimmed), each checked by its text alone: a
/// number as `std::stof` and Rust's `f32` parser read one (an optional sign, digits
/// with at most one `.`, an optional exponent), not negative unless it is 0, not `inf`
/// or `nan`; fewer than 16; not all 0.
pub fn tensor_split_shares(text: &str) -> Result<Vec<&str>, EstimateError> {
    let bad = |why: String| EstimateError::invalid("tensor-split", why);
    let items: Vec<&str> = text.split([',', '/']).map(str::trim).collect();
    if items.len() >= crate::engine::flags::MAX_CARDS {
        return Err(bad(format!(
            "{} values: llama.cpp takes fewer than 16 (\"got {} input configs, but system only has 16 devices\")",
            items.len(),
            items.len()
        )));
    }
    let mut any = false;
    for (i, item) in items.iter().enumerate() {
        match share(item) {
            Share::Zero => {}
            Share::Positive => any = true,
            Share::OutOfRange => {
                return Err(bad(format!(
                    "value {i} ({item}) must be a finite share of 0 or more"
                )));
            }
            Share::NotANumber => {
                return Err(bad(format!(
                    "value {i} ({item:?}) is not a number: one share per card, e.g. 3,1"
                )));
            }
        }
    }
    if !any {
        return Err(bad(ALL_ZERO.into()));
    }
    Ok(items)
}

/// What the text of one share says.
enum Share {
    Zero,
    Positive,
    /// Negative, infinite or not a number (`nan`).
    OutOfRange,
    NotANumber,
}

/// Reads one share's text as Rust's `f32` parser does (`[+-]? (inf | infinity | nan |
/// digits [. digits] | . digits) ([eE] [+-]? digits)?`, the words in any case),
/// without converting it.
fn share(text: &str) -> Share {
    let (negative, t) = match text.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if ["inf", "infinity", "nan"]
        .iter()
        .any(|w| t.eq_ignore_ascii_case(w))
    {
        return Share::OutOfRange;
    }
    let (mantissa, exponent) = match t.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (t, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) || !exponent_ok {
        return Share::NotANumber;
    }
    match (int.bytes().chain(frac.bytes()).any(|c| c != b'0'), negative) {
        (false, _) => Share::Zero,
        (true, false) => Share::Positive,
        (true, true) => Share::OutOfRange,
    }
}

/// `-ts`'s shares, checked by their text, kept as typed (`,`-separated): reading the
/// flag converts no number (the rule does, [`parse_tensor_split`]).
fn tensor_split(_: &'static str, text: &str) -> Result<Value, EstimateError> {
    tensor_split_shares(text).map(|v| Value::Text(v.join(",")))
}

/// `-sm`: `layer` read; `row`, `tensor` and `none` refused with their reason.
fn split_mode(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    match text.trim() {
        "layer" => Ok(Value::Text("layer".into())),
        "row" => Err(EstimateError::invalid(
            key,
            "row splits each weight matrix's rows over the GPUs and keeps the KV cache and intermediate results on --main-gpu (src/llama-model.cpp, ggml's CUDA split buffer): not modelled; layer (the default) is",
        )),
        "tensor" => Err(EstimateError::invalid(
            key,
            "tensor (tensor parallelism) is not modelled; layer (the default) is",
        )),
        "none" => Err(EstimateError::invalid(
            key,
            "none puts everything on --main-gpu: name that one card with --card instead",
        )),
        t => Err(EstimateError::invalid(
            key,
            format!("{t:?} is not a llama.cpp split mode (none, layer, row)"),
        )),
    }
}

/// A cache type as llama.cpp names it ([`CacheType::parse`]).
fn cache_type(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    CacheType::parse(key, text).map(|t| Value::Text(t.name().to_string()))
}

/// The projector's pairs, checked, written back in their order.
fn mmproj(_: &'static str, text: &str) -> Result<Value, EstimateError> {
    super::mmproj::Projector::parse(text).map(|p| Value::Text(p.to_text()))
}

/// `-ot`'s rules, checked, kept as typed.
fn overrides(_: &'static str, text: &str) -> Result<Value, EstimateError> {
    override_rules(text).map(|_| Value::Text(text.to_string()))
}
