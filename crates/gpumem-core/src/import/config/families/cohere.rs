//! Cohere (`cohere`, CohereConfig: Command-R, Command-R+; transformers'
//! modeling_cohere.py) and Cohere2 (`cohere2`, Cohere2Config: Command-R7B, Command-A): one LayerNorm without
//! bias feeding parallel attention and MLP, tied embeddings; checked against the model
//! transformers builds from the class's defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family, Sliding};
use crate::import::config::json::{Cfg, parse};

/// Cohere (Command-R v1, Command-R+): one LayerNorm without bias feeding parallel
/// attention and MLP, tied embeddings; under `use_qk_norm`, CohereAttention's q_norm
/// [heads, head_dim] and k_norm [kv_heads, head_dim] (a LayerNorm without bias over the
/// whole projection).
pub(crate) const COHERE: Family = Family {
    types: "cohere",
    class: "CohereConfig",
    arch: Architecture {
        tied_embeddings: true,
        layer_norms: 1,
        ..Architecture::BASE
    },
    inert: "logit_scale",
    hook: Some(|c, d| {
        d.arch.qk_norm_whole = c.flag("use_qk_norm") == Some(true);
        Ok(())
    }),
    ..BASE
};

/// Cohere2.
pub(crate) const COHERE2: Family = Family {
    types: "cohere2",
    class: "Cohere2Config",
    arch: Architecture {
        tied_embeddings: true,
        layer_norms: 1,
        ..Architecture::BASE
    },
    // The logits' scale is a constant.
    inert: "logit_scale",
    sliding: Sliding::Pattern(4),
    gguf: "cohere2",
    ..BASE
};

/// Cohere2-MoE (Cohere2MoeConfig, transformers 5.23 `models/cohere2_moe/`): Cohere2's
/// layer (one norm feeding parallel attention and MLP) whose MLP is a sparse block of
/// `num_experts` gated experts of `intermediate_size` and a router without bias, and
/// `num_shared_experts` folded into one gated MLP `intermediate_size × n` wide; the
/// layers `mlp_layer_types` lists as dense (or the first `first_k_dense_replace`) hold a
/// gated MLP of `prefix_dense_intermediate_size`.
pub(crate) const COHERE2_MOE: Family = Family {
    types: "cohere2_moe",
    class: "Cohere2MoeConfig",
    // The logits' scale; how the shared expert's output is combined; the router's
    // choice function.
    inert: "logit_scale shared_expert_combination_strategy expert_selection_fn",
    hook: Some(cohere2_moe),
    // llama.cpp's `cohere2` architecture is the dense Cohere2 above.
    gguf: "",
    ..COHERE2
};

fn cohere2_moe(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let shared = c.uint("num_shared_experts")?.unwrap_or(0);
    let width = d.arch.intermediate;
    let first_k = c.uint("first_k_dense_replace")?.unwrap_or(0);
    let dense = c.count_of("mlp_layer_types", "dense").unwrap_or(first_k);
    let prefix = c.uint("prefix_dense_intermediate_size")?;
    let pattern = c
        .uint("prefix_dense_sliding_window_pattern")?
        .unwrap_or(1)
        .max(1);
    // Cohere2MoeConfig's default 4 (layer_types, when given, spells it out).
    let every = c.uint("sliding_window_pattern")?.unwrap_or(4).max(1);
    if let Some(m) = d.arch.moe.as_mut() {
        if shared > 0 {
            m.shared_experts = 1;
            m.shared_intermediate = width
                .checked_mul(shared)
                .ok_or_else(|| parse("num_shared_experts: absurdly large".into()))?;
        }
        m.dense_layers = dense;
        if dense > 0 {
            d.arch.intermediate = prefix.unwrap_or(width);
        }
    }
    // Without layer_types, Cohere2MoeConfig windows the first_k_dense_replace layers by
    // prefix_dense_sliding_window_pattern and the rest by sliding_window_pattern.
    if d.window.is_some() && c.get("layer_types").is_none() && first_k > 0 {
        let windowed = |n: u64, p: u64| n.saturating_sub(n.checked_div(p).unwrap_or(0));
        let k = first_k.min(d.arch.layers);
        d.sliding_layers = Some(
            windowed(k, pattern).saturating_add(windowed(d.arch.layers.saturating_sub(k), every)),
        );
    }
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&COHERE, &COHERE2, &COHERE2_MOE];
