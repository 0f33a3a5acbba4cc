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

/// Encoder-only families (transformers' model types): embedding, reranking and
/// classification models. They keep no KV cache and generate nothing, so a decoder's
/// estimate would be wrong (a KV cache of gigabytes where there is none).
const ENCODERS: &[&str] = &[
    "bert",
    "roberta",
    "xlm-roberta",
    "xlm_roberta",
    "distilbert",
    "albert",
    "electra",
    "deberta",
    "deberta-v2",
    "modernbert",
    "nomic_bert",
    "camembert",
    "mpnet",
    "ernie",
    "jina_bert",
];

/// Encoder-decoder families (an encoder's states cross-attended by a decoder: two KV
/// shapes the decoder reader does not count).
const ENCODER_DECODERS: &[&str] = &[
    "t5",
    "mt5",
    "umt5",
    "bart",
    "mbart",
    "pegasus",
    "marian",
    "whisper",
    "m2m_100",
    "nllb-moe",
    "longt5",
    "switch_transformers",
];

/// Why `model_type` is refused, if it is.
pub(crate) fn refused(model_type: &str) -> Option<&'static str> {
    if ENCODERS.contains(&model_type) {
        return Some(
            "an encoder-only model (embeddings, reranking, classification): it keeps no KV cache and generates nothing, which this estimator of decoders does not cover; give --parameters for the weights alone",
        );
    }
    if ENCODER_DECODERS.contains(&model_type) {
        return Some(
            "an encoder-decoder model: its decoder's self- and cross-attention caches are not counted by the decoder reader; give --parameters for the weights alone",
        );
    }
    REFUSED.contains(&model_type).then_some(
        "state-space / linear-attention layers keep a constant per-sequence state instead of a KV cache, and their tensors differ from attention layers; the config reader does not count them yet: give parameters, the attention layers' KV shape and state-layers / state-bytes by hand",
    )
}
