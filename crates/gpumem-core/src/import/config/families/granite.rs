//! Granite (GraniteConfig: the generic decoder; its muP multipliers hold no
//! parameters), GraniteMoE (GraniteMoeConfig: the generic decoder's MoE, checked
//! against the model transformers builds from the class's defaults) and
//! GraniteMoeHybrid (Granite 4.0: Mamba-2 layers among attention
//! layers by `layer_types`, routed experts beside an always-on shared MLP, or that
//! shared MLP alone when there are no experts).

use serde_json::Value;

use crate::arch::{Architecture, Moe};
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};

use crate::import::config::mixers::expand_mamba2;

/// Granite.
pub(crate) const GRANITE: Family = Family {
    types: "granite",
    class: "GraniteConfig",
    arch: Architecture {
        tied_embeddings: true,
        ..Architecture::BASE
    },
    // The logits scale (a constant; the muP multipliers are inert for every family).
    inert: "logits_scaling",
    ..BASE
};

/// GraniteMoE.
pub(crate) const GRANITEMOE: Family = Family {
    types: "granitemoe",
    class: "GraniteMoeConfig",
    // GraniteMoeTopKRouter.forward (transformers 5.23): fp32 logits, top-k weights cast
    // back to the hidden states' dtype.
    router_casts: true,
    router_fp32_logits: true,
    // The logits scale (a constant).
    inert: "logits_scaling",
    ..BASE
};

/// GraniteMoeShared (GraniteMoeSharedConfig): GraniteMoE with an always-on shared MLP
/// of `shared_intermediate_size` (gated, bias-free: transformers 5.23
/// `GraniteMoeSharedMLP`) when that is above 0.
pub(crate) const GRANITEMOE_SHARED: Family = Family {
    types: "granitemoeshared",
    class: "GraniteMoeSharedConfig",
    hook: Some(granite_shared),
    ..GRANITEMOE
};

/// Granite with sliding-window layers (`granite_swa`, GraniteSWAConfig; transformers
/// 5.23 `models/granite_swa/modeling_granite_swa.py`): one learned sink logit per head
/// in every attention layer (`GraniteSWAAttention.sinks`), the windowed layers listed in
/// `layer_types`, a RoPE base per layer (`layer_rope_theta`, no tensor).
pub(crate) const GRANITE_SWA: Family = Family {
    types: "granite_swa",
    class: "GraniteSWAConfig",
    arch: Architecture {
        tied_embeddings: true,
        attn_sinks: true,
        ..Architecture::BASE
    },
    inert: "logits_scaling layer_rope_theta",
    hook: Some(swa_rope),
    ..BASE
};

/// GraniteMoE with sliding-window layers (`granitemoe_swa`, GraniteMoeSWAConfig;
/// `models/granitemoe_swa/modeling_granitemoe_swa.py`): GraniteMoE's experts, the
/// shared MLP of GraniteMoeShared, and GraniteSWA's sinks and windows.
pub(crate) const GRANITEMOE_SWA: Family = Family {
    types: "granitemoe_swa",
    class: "GraniteMoeSWAConfig",
    arch: Architecture {
        attn_sinks: true,
        ..Architecture::BASE
    },
    inert: "logits_scaling layer_rope_theta",
    hook: Some(|c, d| {
        granite_shared(c, d)?;
        swa_rope(c, d)
    }),
    ..BASE
};

/// GraniteSWAModel and GraniteMoeSWAModel (transformers 5.23
/// `models/granite_swa/modeling_granite_swa.py`, `GraniteSWAModel.__init__`): the
/// parent's `rotary_emb` at the global theta, left in place, and one more rotary
/// embedding per distinct non-zero theta of `layer_rope_theta` (0: a NoPE layer);
/// absent, the config class gives every layer the global theta.
fn swa_rope(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let thetas = match c.list("layer_rope_theta") {
        Some(l) => {
            let mut t: Vec<f64> = l
                .iter()
                .filter_map(Value::as_f64)
                .filter(|t| *t != 0.0)
                .collect();
            t.sort_by(f64::total_cmp);
            t.dedup();
            t.len() as u64
        }
        None => 1,
    };
    d.arch.rope_tables = thetas.saturating_add(1);
    Ok(())
}

/// The shared MLP beside the experts, `shared_intermediate_size` wide when above 0.
fn granite_shared(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let width = c.uint("shared_intermediate_size")?.unwrap_or(0);
    if width == 0 {
        return Ok(());
    }
    match d.arch.moe.as_mut() {
        Some(m) => {
            m.shared_experts = 1;
            m.shared_intermediate = width;
        }
        None => d.warnings.push(
            "shared_intermediate_size: the shared MLP of a model without experts is not counted"
                .into(),
        ),
    }
    Ok(())
}

/// GraniteMoeHybrid.
pub(crate) const GRANITE_MOE_HYBRID: Family = Family {
    types: "granitemoehybrid",
    class: "GraniteMoeHybridConfig",
    // transformers 5.23 writes the Mamba-2 layers as linear_attention.
    layer_types: "mamba attention linear_attention",
    hook: Some(granite_hybrid),
    // The logits scale and the position scheme (RoPE or none: no tensors).
    inert: "logits_scaling position_embedding_type",
    // position_embedding_type "nope" (GraniteMoeHybridConfig's default): no rotary
    // embedding; "rope" gives one (the hook).
    rope_tables: 0,
    ..BASE
};

fn granite_hybrid(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    // GraniteMoeHybridModel builds its rotary embedding only for
    // position_embedding_type "rope".
    if c.str("position_embedding_type") == Some("rope") {
        d.arch.rope_tables = 1;
    }
    let experts = d.or_default(c, "num_local_experts", 8)?;
    let shared = d.or_default(c, "shared_intermediate_size", 1024)?;
    d.arch.moe = if experts == 0 {
        d.arch.intermediate = shared;
        None
    } else {
        Some(Moe {
            experts,
            active: c.need(&["num_experts_per_tok", "num_experts_per_token"])?,
            expert_intermediate: c
                .uint("moe_intermediate_size")?
                .unwrap_or(d.arch.intermediate),
            shared_experts: 1,
            shared_intermediate: shared,
            dense_layers: c.uint("first_k_dense_replace")?.unwrap_or(0),
            every: c
                .any(&[
                    "interleave_moe_layer_step",
                    "decoder_sparse_step",
                    "moe_layer_freq",
                    "expert_layer_period",
                ])?
                .unwrap_or(1)
                .max(1),
            ..Moe::BASE
        })
    };
    // The Mamba-2 layers: the "mamba" entries of layer_types (one per layer), or
    // every layer when the key is absent (GraniteMoeHybridConfig's layers_block_type).
    let layers = d.arch.layers;
    let mamba = match c.list("layer_types") {
        Some(types) => {
            if types.len() as u64 != layers {
                return Err(parse(format!(
                    "layer_types has {} entries, num_hidden_layers {layers}",
                    types.len()
                )));
            }
            types
                .iter()
                .filter(|t| matches!(t.as_str(), Some("mamba" | "linear_attention")))
                .count() as u64
        }
        None => {
            d.notes.push(
                "layer_types absent: every layer is a Mamba-2 layer (GraniteMoeHybridConfig's default)"
                    .into(),
            );
            layers
        }
    };
    d.arch.mixer = Some(expand_mamba2(c, d, mamba)?);
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[
    &GRANITE,
    &GRANITEMOE,
    &GRANITEMOE_SHARED,
    &GRANITE_SWA,
    &GRANITEMOE_SWA,
    &GRANITE_MOE_HYBRID,
];
