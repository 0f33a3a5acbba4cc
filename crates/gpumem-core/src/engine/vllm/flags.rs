//! vLLM's flags, named as `vllm serve` names them (`--speculative-config`'s keys as
//! flags of their own), and what vLLM says of each.

use crate::engine::drafter::SpecMethod;
use crate::engine::flags::{Flag, Value, bytes, field, fraction, positive, switch};
use crate::error::EstimateError;
use crate::fields::{FieldKind, Unit};

/// `--gpu-memory-utilization`: the share of the card's total the instance may use.
pub(super) const GPU_MEMORY_UTILIZATION: Flag = Flag::new(
    field(
        "gpu-memory-utilization",
        FieldKind::Fraction,
        "vLLM memory utilization",
        "0.9",
        "vLLM: fraction of the card the instance may use",
    ),
    fraction,
);

/// `--max-num-seqs`: the sequences scheduled at once (the sampler's profiled rows).
pub(super) const MAX_NUM_SEQS: Flag = Flag::new(
    field(
        "max-num-seqs",
        FieldKind::Count,
        "vLLM max sequences",
        "1024 or 256",
        "vLLM: sequences at once (1024 on ≥ 70 GiB cards but A100s)",
    ),
    positive,
);

/// `--kv-cache-memory-bytes`: an absolute pool, no profiling subtraction.
pub(super) const KV_CACHE_MEMORY_BYTES: Flag = Flag::new(
    field(
        "kv-cache-memory-bytes",
        FieldKind::Count,
        "vLLM KV cache bytes",
        "",
        "vLLM: an absolute KV pool",
    )
    .unit(Unit::Bytes),
    bytes,
);

/// `--enforce-eager`: no CUDA graphs.
pub(super) const ENFORCE_EAGER: Flag = Flag::new(
    field(
        "enforce-eager",
        FieldKind::Bool(false),
        "vLLM enforce eager",
        "",
        "vLLM: no CUDA graphs",
    ),
    switch,
);

/// `--enable-lora`: LoRA adapter slots on the GPU.
pub(super) const ENABLE_LORA: Flag = Flag::new(
    field(
        "enable-lora",
        FieldKind::Bool(false),
        "vLLM LoRA",
        "",
        "vLLM: LoRA adapter slots",
    ),
    switch,
);

/// `--max-loras` (slots on the GPU, default 1).
pub(super) const MAX_LORAS: Flag = Flag::new(
    field(
        "max-loras",
        FieldKind::Count,
        "vLLM max LoRAs",
        "1",
        "vLLM: LoRA slots",
    ),
    positive,
);

/// `--max-lora-rank` (default 16).
pub(super) const MAX_LORA_RANK: Flag = Flag::new(
    field(
        "max-lora-rank",
        FieldKind::Count,
        "vLLM max LoRA rank",
        "16",
        "vLLM: slot rank",
    ),
    positive,
);

/// `--data-parallel-size`: engine cores, each with its own GPUs (tp × pp of them) and
/// its own KV pool; a MoE model's expert layers span all of them.
pub(super) const DATA_PARALLEL_SIZE: Flag = Flag::new(
    field(
        "data-parallel-size",
        FieldKind::Count,
        "vLLM data-parallel size",
        "1",
        "vLLM: data-parallel ranks, each its own engine core and KV pool (GPUs: tp × pp × dp)",
    ),
    positive,
)
.unread("--data-parallel-size is modelled for vLLM only: ignored");

/// `--enable-expert-parallel`: a MoE layer's experts split whole over the tp × dp
/// ranks instead of each expert over the tp ranks.
pub(super) const ENABLE_EXPERT_PARALLEL: Flag = Flag::new(
    field(
        "enable-expert-parallel",
        FieldKind::Bool(false),
        "vLLM expert parallelism",
        "",
        "vLLM: each rank holds whole experts (ep = tp × dp) instead of a tp slice of every expert",
    ),
    switch,
)
.unread("--enable-expert-parallel is modelled for vLLM only: ignored");

/// `--speculative-config` `method`.
pub(super) const SPECULATIVE_METHOD: Flag = Flag::new(
    field(
        "speculative-method",
        FieldKind::Choice,
        "vLLM speculative method",
        "",
        "vLLM --speculative-config method",
    )
    .choices(&[
        ("", "none"),
        ("ngram", "ngram"),
        ("eagle", "EAGLE"),
        ("eagle3", "EAGLE-3"),
        ("mtp", "MTP layers"),
        ("draft_model", "draft model"),
    ]),
    method,
)
.unread("speculative decoding is modelled for vLLM only: ignored");

/// `--speculative-config` `num_speculative_tokens`.
pub(super) const NUM_SPECULATIVE_TOKENS: Flag = Flag::new(
    field(
        "num-speculative-tokens",
        FieldKind::Count,
        "vLLM speculative tokens",
        "mtp: its layers",
        "vLLM: tokens proposed per step",
    ),
    positive,
);

/// `--speculative-config` `model`: the draft or EAGLE head, as a preset id or its
/// shape in `key=value` pairs ([`super::parse_draft`], read with the rest of the rule).
pub(super) const DRAFT_MODEL: Flag = Flag::new(
    field(
        "draft-model",
        FieldKind::Text,
        "vLLM draft model",
        "eagle: one target layer",
        "vLLM: the draft or EAGLE head, a preset id or key=value shape pairs",
    )
    .choices(&[("llama-3.2-1b", "llama-3.2-1b")]),
    text,
);

/// `VLLM_PP_LAYER_PARTITION`: the decoder layers of each pipeline stage, in stage
/// order (`20,12`); vLLM's own split (`get_pp_indices`) otherwise.
pub(super) const PP_LAYER_PARTITION: Flag = Flag::new(
    field(
        "pp-layer-partition",
        FieldKind::Text,
        "vLLM layers per stage (VLLM_PP_LAYER_PARTITION)",
        "even",
        "vLLM: VLLM_PP_LAYER_PARTITION, each pipeline stage's decoder layers (20,12); default: vLLM's even split",
    )
    .choices(&[("20,12", "20, 12")]),
    layer_partition,
);

/// The partition as vLLM reads it (`vllm/distributed/utils.py` `get_pp_indices`:
/// integers separated by commas); its sum and length are checked against the model
/// and `--pp` where both are known.
fn layer_partition(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    let mut out = Vec::new();
    for item in text.split(',') {
        let n: u64 = item.trim().parse().map_err(|_| {
            EstimateError::invalid(
                key,
                format!("{text:?}: each stage's layers as whole numbers separated by commas (20,12)"),
            )
        })?;
        out.push(n.to_string());
        if out.len() > 64 {
            return Err(EstimateError::invalid(key, "at most 64 stages"));
        }
    }
    Ok(Value::Text(out.join(",")))
}

/// `--cpu-offload-gb`: GiB of each GPU's decoder-layer weights kept in pinned host
/// memory (a decimal number, as vLLM's `OffloadConfig.cpu_offload_gb` takes it).
pub(super) const CPU_OFFLOAD_GB: Flag = Flag::new(
    field(
        "cpu-offload-gb",
        FieldKind::Text,
        "vLLM CPU offload GiB",
        "0",
        "vLLM: GiB of weights per GPU kept in pinned host memory (whole parameters, from the first layer)",
    )
    .choices(&[("4", "4 GiB"), ("10.5", "10.5 GiB")]),
    offload_gb,
)
.unread("--cpu-offload-gb is modelled for vLLM only: ignored");

/// `--cpu-offload-gb` in bytes, as vLLM makes it: `int(cpu_offload_gb * 1024**3)`
/// (decimals beyond the ninth dropped); `None` when the text is not a number.
pub(crate) fn offload_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    if t.is_empty() || t.starts_with('.') || t.ends_with('.') {
        return None;
    }
    crate::catalogue::parse_capacity(&format!("{t}GiB"))
}

/// Reads `--cpu-offload-gb`, kept as typed (the page's URL keeps the text).
fn offload_gb(key: &'static str, text: &str) -> Result<Value, EstimateError> {
    offload_bytes(text)
        .map(|_| Value::Text(text.trim().to_string()))
        .ok_or_else(|| {
            EstimateError::invalid(key, format!("{text:?} is not a number of GiB, e.g. 4 or 10.5"))
        })
}

/// A method as vLLM names it ([`SpecMethod::parse`]).
fn method(_: &'static str, text: &str) -> Result<Value, EstimateError> {
    SpecMethod::parse(text).map(|m| Value::Text(m.name().to_string()))
}

/// The text as given, trimmed.
fn text(_: &'static str, text: &str) -> Result<Value, EstimateError> {
    Ok(Value::Text(text.trim().to_string()))
}
