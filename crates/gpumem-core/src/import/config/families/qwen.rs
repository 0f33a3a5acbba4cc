//! Qwen2 / Qwen2-MoE (q/k/v biases, sliding layers from `max_window_layers`, the
//! shared expert's sigmoid gate), Qwen3 / Qwen3-MoE (per-head q/k norms) and
//! Qwen3-Next (Gated DeltaNet layers beside gated full attention).

use crate::arch::{Architecture, Mixer, MixerKind};
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family, Sliding};
use crate::import::config::json::Cfg;

/// Qwen2, and Qwen2.5-VL's language model (its vision tower is counted by the
/// tower reader).
pub(crate) const QWEN2: Family = Family {
    types: "qwen2 qwen2_5_vl_text qwen2_5_vl",
    class: "Qwen2Config",
    arch: Architecture {
        qkv_bias: true,
        ..Architecture::BASE
    },
    sliding: Sliding::FromMaxWindowLayers,
    ..BASE
};

/// Qwen2-MoE: Qwen2MoeSparseMoeBlock's `shared_expert_gate`.
pub(crate) const QWEN2_MOE: Family = Family {
    types: "qwen2_moe",
    class: "Qwen2MoeConfig",
    shared_gate: true,
    ..QWEN2
};

/// Qwen3 and Qwen3-MoE, and Qwen3-VL's language models (their vision tower is
/// counted by the tower reader).
pub(crate) const QWEN3: Family = Family {
    types: "qwen3 qwen3_moe qwen3_vl_text qwen3_vl_moe_text qwen3_vl qwen3_vl_moe",
    class: "Qwen3Config",
    arch: Architecture {
        qk_norm: true,
        ..Architecture::BASE
    },
    ..BASE
};

/// Qwen3-Next: Qwen3NextAttention's q_proj yields the queries and a sigmoid output
/// gate; Qwen3NextSparseMoeBlock's `shared_expert_gate`.
pub(crate) const QWEN3_NEXT: Family = Family {
    types: "qwen3_next qwen3_5_text qwen3_5_moe_text",
    class: "Qwen3NextConfig",
    arch: Architecture {
        qk_norm: true,
        attn_gate: true,
        ..Architecture::BASE
    },
    shared_gate: true,
    layer_types: "linear_attention",
    hook: Some(delta_net),
    ..BASE
};

/// Qwen3-Next's Gated DeltaNet layers (transformers' Qwen3NextConfig /
/// Qwen3NextGatedDeltaNet): `layer_types`, else every `full_attention_interval`-th
/// layer is full attention and the others linear attention.
fn delta_net(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let layers = d.arch.layers;
    let linear = match c.count_of("layer_types", "linear_attention") {
        Some(n) => n,
        None => {
            let every = d.or_default(c, "full_attention_interval", 4)?.max(1);
            layers.saturating_sub(layers.checked_div(every).unwrap_or(0))
        }
    };
    let heads = d.or_default(c, "linear_num_value_heads", 32)?;
    let v_dim = d.or_default(c, "linear_value_head_dim", 128)?;
    d.arch.mixer = Some(Mixer {
        kind: MixerKind::DeltaNet,
        layers: linear,
        inner: heads.saturating_mul(v_dim),
        state: d.or_default(c, "linear_key_head_dim", 128)?,
        conv: d.or_default(c, "linear_conv_kernel_dim", 4)?,
        heads,
        key_heads: d.or_default(c, "linear_num_key_heads", 16)?,
        ..Mixer::BASE
    });
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&QWEN2, &QWEN2_MOE, &QWEN3, &QWEN3_NEXT];
