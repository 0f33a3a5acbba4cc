//! DeepSeek-V2 and V3 (DeepseekV2Config / DeepseekV3Config): multi-head latent
//! attention (`kv_lora_rank`, `q_lora_rank`, the per-head widths), leading dense
//! layers (`first_k_dense_replace`), shared experts, V3's `noaux_tc` router
//! correction bias, and V3's multi-token-prediction layer with its own embedding
//! and head copies. All of it is read by the generic decoder.

use crate::import::config::family::{BASE, Family, RouterBias};

/// DeepSeek-V2 / V3.
pub(crate) const DEEPSEEK: Family = Family {
    types: &["deepseek_v2", "deepseek_v3"],
    class: "DeepseekV3Config",
    router_bias: RouterBias::NoauxTc,
    ..BASE
};
