//! DeepSeek-V2 and V3 (DeepseekV2Config / DeepseekV3Config): multi-head latent
//! attention (`kv_lora_rank`, `q_lora_rank`, the per-head widths), leading dense
//! layers (`first_k_dense_replace`), shared experts, V3's router correction bias
//! (fp32; transformers 5.23 `models/deepseek_v3/modeling_deepseek_v3.py`
//! `DeepseekV3TopkRouter` builds it whatever `topk_method` says, V2 under `noaux_tc`
//! only), and V3's multi-token-prediction layer with its own
//! embedding and head copies — all read by the generic decoder; and DeepSeek-V3.2,
//! whose attention layers add the sparse-attention indexer (`index_n_heads`,
//! `index_head_dim`; `index_topk` only chooses which keys are attended).

use crate::arch::Indexer;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family, RouterBias};
use crate::import::config::json::Cfg;

/// DeepSeek-V3 (and the records built on it).
pub(crate) const DEEPSEEK: Family = Family {
    types: "deepseek_v3",
    class: "DeepseekV3Config",
    // DeepseekV3TopkRouter's fp32 bias, built whatever topk_method says (which only
    // chooses the routing; the configs transformers writes have none).
    router_bias: RouterBias::Correction,
    inert: "aux_loss_alpha seq_aux ep_size topk_method",
    ..BASE
};

/// DeepSeek-V2: its router keeps the correction bias only under `noaux_tc`.
pub(crate) const DEEPSEEK_V2: Family = Family {
    types: "deepseek_v2",
    class: "DeepseekV2Config",
    router_bias: RouterBias::NoauxTc,
    inert: "aux_loss_alpha seq_aux ep_size",
    ..DEEPSEEK
};

/// DeepSeek-V3.2 (`DeepseekV32ForCausalLM`): DeepSeek-V3 with the indexer.
pub(crate) const DEEPSEEK_V32: Family = Family {
    types: "deepseek_v32",
    inert: "aux_loss_alpha seq_aux ep_size topk_method",
    // transformers writes its attention layers as "indexed_attention".
    layer_types: "indexed_attention",
    hook: Some(v32),
    ..DEEPSEEK
};

fn v32(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    indexer(c, d)?;
    mlp_layer_types(c, d)
}

/// The dense MLP layers `mlp_layer_types` lists (the others sparse), as transformers
/// writes them beside `first_k_dense_replace`.
pub(crate) fn mlp_layer_types(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    if let (Some(n), Some(m)) = (c.count_of("mlp_layer_types", "dense"), d.arch.moe.as_mut()) {
        m.dense_layers = n;
    }
    Ok(())
}

/// The lightning indexer of DeepSeek sparse attention, beside MLA in every
/// attention layer (and the MTP layer). GLM-5.2's `indexer_types` may let layers
/// share another's indexer ("shared"): not modelled, named.
pub(crate) fn indexer(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    c.touch(&["index_topk"]);
    let layers = d.arch.layers;
    if let Some(full) = c.count_of("indexer_types", "full")
        && full != layers
    {
        d.warnings.push(format!(
            "indexer_types: {} of {layers} layers share another layer's indexer; counted with an indexer each (its weights and key cache are overcounted)",
            layers.saturating_sub(full)
        ));
    }
    d.arch.indexer = Some(Indexer {
        heads: c.need(&["index_n_heads"])?,
        head_dim: c.need(&["index_head_dim"])?,
    });
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&DEEPSEEK, &DEEPSEEK_V2, &DEEPSEEK_V32];
