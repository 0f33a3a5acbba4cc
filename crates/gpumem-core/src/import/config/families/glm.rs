//! Zhipu's GLM dense families (transformers' modeling_glm.py / modeling_glm4.py):
//! - GLM-4-9B in transformers' format (`glm`, GlmConfig): a Llama-style decoder whose
//!   `GlmAttention` has q/k/v biases under `attention_bias` (GlmConfig's default: true)
//!   and none on `o_proj`; `gate_up_proj` fused (the same tensors' count).
//! - GLM-4-0414 (`glm4`, Glm4Config): the same with `post_self_attn_layernorm` and
//!   `post_mlp_layernorm`, four RMSNorms per layer.
//!
//! Zhipu's GLM MoE families, DeepSeek-V3's body with GLM's own choices; their routers
//! always keep an fp32 `e_score_correction_bias` (transformers' `Glm4MoeTopkRouter`
//! registers it as a float32 buffer, which the checkpoints store).
//! - GLM-4.5 / 4.6 / 4.7 (`glm4_moe`, Glm4MoeConfig; vLLM's glm4_moe.py): grouped-query
//!   attention with q/k/v biases under `attention_bias` but none on `o_proj`, per-head
//!   q/k norms under `use_qk_norm`, a DeepSeek-style MTP layer with its own embedding
//!   and head copies.
//! - GLM-4.7-Flash (`glm4_moe_lite`): the same with DeepSeek's MLA.
//! - GLM-5 (`glm_moe_dsa`, GlmMoeDsaForCausalLM): MLA with DeepSeek sparse attention's
//!   indexer, an MTP layer that uses the model's embedding and lm_head, the dense and
//!   sparse MLP layers listed in `mlp_layer_types`.

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family, RouterBias};
use crate::import::config::json::Cfg;

use super::deepseek::{indexer, mlp_layer_types};

/// GLM-4-9B (transformers' format).
pub(crate) const GLM: Family = Family {
    types: "glm",
    class: "GlmConfig",
    hook: Some(glm_dense),
    // GlmConfig's partial_rotary_factor default.
    rotary_fraction: 0.5,
    ..BASE
};

/// GLM-4-0414.
pub(crate) const GLM4: Family = Family {
    types: "glm4",
    class: "Glm4Config",
    arch: Architecture {
        layer_norms: 4,
        ..Architecture::BASE
    },
    hook: Some(glm_dense),
    // Glm4Config's partial_rotary_factor default.
    rotary_fraction: 0.5,
    ..BASE
};

fn glm_dense(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    // GlmAttention / Glm4Attention: bias=config.attention_bias on q, k and v (the
    // config class defaults it to True); o_proj bias=False.
    d.arch.qkv_bias = c.flag("attention_bias").unwrap_or(true);
    d.arch.o_bias = false;
    Ok(())
}

/// GLM-4.5 and later.
pub(crate) const GLM4_MOE: Family = Family {
    types: "glm4_moe",
    class: "Glm4MoeConfig",
    router_bias: RouterBias::Correction,
    hook: Some(glm4_moe),
    // Glm4MoeConfig's partial_rotary_factor default.
    rotary_fraction: 0.5,
    ..BASE
};

/// GLM-4.7-Flash.
pub(crate) const GLM4_MOE_LITE: Family = Family {
    types: "glm4_moe_lite",
    class: "Glm4MoeLiteConfig",
    router_bias: RouterBias::Correction,
    inert: "rope_interleave",
    hook: Some(mlp_layer_types),
    ..BASE
};

/// GLM-5.
pub(crate) const GLM_MOE_DSA: Family = Family {
    types: "glm_moe_dsa",
    class: "GlmMoeDsaConfig",
    router_bias: RouterBias::Correction,
    // RoPE layout switches and qk_head_dim (= qk_nope_head_dim + qk_rope_head_dim).
    inert: "indexer_rope_interleave head_dim",
    layer_types: "indexed_attention",
    hook: Some(glm_moe_dsa),
    ..BASE
};

fn glm4_moe(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    // Glm4MoeAttention: bias=config.attention_bias on q, k and v; o_proj bias=False.
    d.arch.o_bias = false;
    d.arch.qk_norm = c.flag("use_qk_norm") == Some(true);
    Ok(())
}

fn glm_moe_dsa(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    indexer(c, d)?;
    d.arch.mtp_shared_vocab = true;
    mlp_layer_types(c, d)
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&GLM, &GLM4, &GLM4_MOE, &GLM4_MOE_LITE, &GLM_MOE_DSA];
