//! gpt-oss (GptOssConfig): biases on the router and every expert projection, one
//! attention-sink logit per head, alternating sliding and full layers from
//! `layer_types`; its MXFP4 experts with attention kept in bf16 come from
//! `quantization_config`.

use crate::import::config::family::{BASE, Family, RouterBias};

/// gpt-oss.
pub(crate) const GPT_OSS: Family = Family {
    types: &["gpt_oss"],
    class: "GptOssConfig",
    mlp_bias: true,
    sinks: true,
    router_bias: RouterBias::Yes,
    ..BASE
};
