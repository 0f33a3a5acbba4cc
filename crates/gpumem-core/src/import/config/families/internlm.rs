//! InternLM3 (`internlm3`, InternLM3Config, a LlamaConfig whose `attribute_map` names
//! `qkv_bias` as `attention_bias` and `bias` as `mlp_bias`; transformers 5.23
//! `models/internlm3/modular_internlm3.py` builds Llama's modules): the generic decoder,
//! with the two published names read as their Llama ones; checked against the model
//! transformers builds from the class's defaults (`tests/cases/transformers`).

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// InternLM3.
pub(crate) const INTERNLM3: Family = Family {
    types: "internlm3",
    class: "InternLM3Config",
    hook: Some(internlm3),
    ..BASE
};

/// `qkv_bias` (Llama's `attention_bias`: q, k, v and o) and `bias` (`mlp_bias`).
fn internlm3(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    if c.flag("qkv_bias") == Some(true) {
        d.arch.qkv_bias = true;
        d.arch.o_bias = true;
    }
    if c.flag("bias") == Some(true) {
        d.arch.mlp_bias = true;
    }
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&INTERNLM3];
