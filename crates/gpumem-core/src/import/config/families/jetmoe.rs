//! JetMoE (JetMoeConfig; transformers 5.23 `models/jetmoe/modeling_jetmoe.py`): every
//! layer a mixture of attention heads and a mixture of MLP experts.
//!
//! | tensor | transformers | fact |
//! |---|---|---|
//! | `self_attention.experts.input_linear` [experts, kv_heads × kv_channels, hidden], `output_linear` [experts, hidden, kv_heads × kv_channels], `router.layer` [experts, hidden] | `JetMoeMoA` | `attn-experts` |
//! | `self_attention.experts.bias` [hidden] | `JetMoeMoA.bias` | `o-bias` |
//! | `self_attention.kv_proj` [2 × kv_heads × kv_channels, hidden] | `JetMoeAttention` | k and v projections |
//! | `mlp.input_linear` [experts, 2 × intermediate, hidden], `output_linear` [experts, hidden, intermediate], `router.layer` | `JetMoeMoE` | gated experts |
//! | `mlp.bias` [hidden] | `JetMoeMoE.bias` | `moe-output-bias` |
//!
//! `JetMoeConfig.__post_init__` sets `num_attention_heads = num_key_value_heads ×
//! num_experts_per_tok` whatever the config says: each token's queries are its
//! `num_experts_per_tok` attention experts' outputs, each `num_key_value_heads` heads of
//! `kv_channels`, over the one key and value the cache holds (`kv_heads` heads). The
//! published configs were written by the checkpoint's own earlier class
//! (`JetMoEConfig`, github.com/myshell-ai/JetMoE `jetmoe/configuration_jetmoe.py`),
//! whose `ffn_hidden_size`, `moe_num_experts` and `moe_top_k` transformers' class does
//! not read: it builds its own keys' defaults (5632, 8, 2), which is what is counted
//! here, and a differing old key is named.

use crate::arch::{Architecture, Moe};
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// JetMoE.
pub(crate) const JETMOE: Family = Family {
    types: "jetmoe",
    class: "JetMoeConfig",
    arch: Architecture {
        // JetMoeConfig's default tie_word_embeddings.
        tied_embeddings: true,
        // The mixture of attention's output bias.
        o_bias: true,
        ..Architecture::BASE
    },
    // The earlier class's switches, always on in transformers' (biases on both
    // mixtures, a gated MLP); the RoPE base and the positions' old name.
    inert: "activation_function bias glu n_positions",
    hook: Some(jetmoe),
    ..BASE
};

/// The mixtures' sizes as JetMoeConfig reads them, the old keys compared with them.
fn jetmoe(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let experts = d.or_default(c, "num_local_experts", 8)?;
    let top_k = d.or_default(c, "num_experts_per_tok", 2)?;
    d.arch.intermediate = d.or_default(c, "intermediate_size", 5632)?;
    d.arch.head_dim = d.or_default(c, "kv_channels", 128)?;
    d.arch.heads = d.arch.kv_heads.checked_mul(top_k).ok_or_else(|| {
        crate::import::config::json::parse("num_experts_per_tok: absurdly large".into())
    })?;
    // The generic reader's note on an absent intermediate_size (it read the old
    // ffn_hidden_size) no longer holds.
    d.notes
        .retain(|n| !n.starts_with("intermediate size absent"));
    for (old, new, used) in [
        ("ffn_hidden_size", "intermediate_size", d.arch.intermediate),
        ("moe_num_experts", "num_local_experts", experts),
        ("moe_top_k", "num_experts_per_tok", top_k),
    ] {
        if let Some(v) = c.uint(old)?
            && v != used
        {
            d.warnings.push(format!(
                "{old} = {v} is not read by transformers' JetMoeConfig, which builds {new} = {used}: counted as transformers builds it"
            ));
        }
    }
    d.arch.attn_experts = experts;
    d.arch.moe = Some(Moe {
        experts,
        active: top_k,
        expert_intermediate: d.arch.intermediate,
        output_bias: true,
        ..Moe::BASE
    });
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&JETMOE];
