//! gpt-oss (GptOssConfig): biases on the router and every expert projection, one
//! attention-sink logit per head, alternating sliding and full layers from
//! `layer_types`; its MXFP4 experts with attention kept in bf16 come from
//! `quantization_config`.

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family, RouterBias, Sliding};

/// gpt-oss.
pub(crate) const GPT_OSS: Family = Family {
    types: "gpt_oss",
    class: "GptOssConfig",
    arch: Architecture {
        mlp_bias: true,
        attn_sinks: true,
        ..Architecture::BASE
    },
    router_bias: RouterBias::Yes,
    // An alias of num_experts_per_tok, the pre-extension context, the SwiGLU clamp.
    inert: "experts_per_token initial_context_length swiglu_limit",
    sliding: Sliding::Alternate,
    gguf: "gpt-oss",
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&GPT_OSS];
