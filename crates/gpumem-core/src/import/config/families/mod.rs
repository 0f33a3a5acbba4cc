//! The registry: one row per family record, found by `model_type`. A family's rules
//! live in its own file; adding a family is one file, one row here, one config
//! fixture and one oracle row (`tests/cases`).

use super::family::Family;

mod bamba;
mod deepseek;
mod falcon;
mod falcon_h1;
mod gemma;
mod glm;
mod gpt;
mod gpt_oss;
mod granite;
mod jamba;
mod kimi;
mod llama;
mod mamba;
mod minimax;
mod more;
mod nemotron;
mod olmo;
mod phi;
mod qwen;
mod seed;
mod smollm;
mod starcoder;

/// Every family, by `model_type` (text-level first, then the root's).
pub(crate) const REGISTRY: &[&Family] = &[
    &llama::LLAMA,
    &llama::LLAMA4,
    &qwen::QWEN2,
    &qwen::QWEN2_MOE,
    &qwen::QWEN3,
    &qwen::QWEN3_NEXT,
    &gemma::GEMMA,
    &gemma::GEMMA2,
    &gemma::GEMMA3,
    &gemma::GEMMA4,
    &deepseek::DEEPSEEK,
    &deepseek::DEEPSEEK_V32,
    &kimi::KIMI_K2,
    &glm::GLM4_MOE,
    &glm::GLM4_MOE_LITE,
    &glm::GLM_MOE_DSA,
    &kimi::KIMI_LINEAR,
    &gpt_oss::GPT_OSS,
    &minimax::MINIMAX_M2,
    &more::COHERE2,
    &more::EXAONE4,
    &more::PHIMOE,
    &more::APERTUS,
    &more::ERNIE_GRANITEMOE,
    &olmo::OLMO2,
    &olmo::OLMOE,
    &phi::PHI3,
    &phi::PHI,
    &falcon::FALCON,
    &gpt::GPT2,
    &gpt::GPT_BIGCODE,
    &gpt::GPT_NEOX,
    &gpt::GPTJ,
    &gpt::OPT_BLOOM,
    &starcoder::STARCODER2,
    &seed::SEED_OSS,
    &smollm::SMOLLM3,
    &granite::GRANITE,
    &granite::GRANITE_MOE_HYBRID,
    &mamba::MAMBA,
    &jamba::JAMBA,
    &nemotron::NEMOTRON_H,
    &falcon_h1::FALCON_H1,
    &bamba::BAMBA,
];

/// Families whose layers keep a constant state instead of (some) KV in a way no
/// record reads yet: refused with a reason rather than counted as attention.
const REFUSED: &[&str] = &[
    "zamba",
    "zamba2",
    "lfm2",
    "rwkv",
    "recurrent_gemma",
    "minimax",
];

/// Why `model_type` is refused, if it is.
pub(crate) fn refused(model_type: &str) -> Option<&'static str> {
    REFUSED.contains(&model_type).then_some(
        "state-space / linear-attention layers keep a constant per-sequence state instead of a KV cache, and their tensors differ from attention layers; the config reader does not count them yet: give parameters, the attention layers' KV shape and state-layers / state-bytes by hand",
    )
}
