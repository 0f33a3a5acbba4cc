//! What a weight file's header says, summed by class: every tensor's bytes as stored
//! (`TensorSummary`, `Tally`), which the readers of `crate::import` produce and the
//! estimate's weights lines consume. Its own module, below both, so the estimate does
//! not depend on the readers.

// Checked arithmetic only: the numbers come from files.
#![deny(clippy::arithmetic_side_effects)]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::arch::ParamClass;
use crate::error::EstimateError;

/// Count and bytes of a set of tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Tally {
    /// Number of tensors.
    pub tensors: u64,
    /// Stored bytes.
    pub bytes: u64,
}

/// Every tensor of one or more files, counted exactly from their headers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TensorSummary {
    /// "safetensors" or "gguf".
    pub source: String,
    /// Files read.
    pub files: u64,
    /// All tensors.
    pub total: Tally,
    /// By parameter class ("embeddings", "attention", "mlp", "norms", "lm_head", "other").
    pub by_class: BTreeMap<String, Tally>,
    /// By stored dtype or ggml type ("BF16", "I32", "Q4_K", …).
    pub by_dtype: BTreeMap<String, Tally>,
}

// Denied here item by item: an inner attribute would also cover the format parsers
// below this module.
#[deny(clippy::arithmetic_side_effects)]
impl TensorSummary {
    pub(crate) fn new(source: &str) -> Self {
        TensorSummary {
            source: source.to_string(),
            files: 1,
            ..TensorSummary::default()
        }
    }

    pub(crate) fn add(&mut self, name: &str, dtype: &str, bytes: u64) -> Result<(), EstimateError> {
        let over = || EstimateError::Overflow {
            what: "tensor bytes",
        };
        let bump = |t: &mut Tally| -> Result<(), EstimateError> {
            t.tensors = t.tensors.checked_add(1).ok_or_else(over)?;
            t.bytes = t.bytes.checked_add(bytes).ok_or_else(over)?;
            Ok(())
        };
        bump(&mut self.total)?;
        bump(self.by_class.entry(classify(name).to_string()).or_default())?;
        match self.by_dtype.get_mut(dtype) {
            Some(t) => bump(t)?,
            None => {
                self.by_dtype
                    .insert(dtype.to_string(), Tally { tensors: 1, bytes });
            }
        }
        Ok(())
    }

    /// The summaries of several files (the shards of one checkpoint) merged into one;
    /// `None` when there is none.
    pub fn merge_all(
        parts: impl IntoIterator<Item = TensorSummary>,
    ) -> Result<Option<TensorSummary>, EstimateError> {
        let mut merged: Option<TensorSummary> = None;
        for part in parts {
            match merged.as_mut() {
                Some(m) => m.merge(&part)?,
                None => merged = Some(part),
            }
        }
        Ok(merged)
    }

    /// Merges another file's summary (shards of one checkpoint).
    pub fn merge(&mut self, other: &TensorSummary) -> Result<(), EstimateError> {
        let over = || EstimateError::Overflow {
            what: "tensor bytes",
        };
        let join = |a: &mut Tally, b: &Tally| -> Result<(), EstimateError> {
            a.tensors = a.tensors.checked_add(b.tensors).ok_or_else(over)?;
            a.bytes = a.bytes.checked_add(b.bytes).ok_or_else(over)?;
            Ok(())
        };
        self.files = self.files.checked_add(other.files).ok_or_else(over)?;
        join(&mut self.total, &other.total)?;
        for (k, v) in &other.by_class {
            join(self.by_class.entry(k.clone()).or_default(), v)?;
        }
        for (k, v) in &other.by_dtype {
            join(self.by_dtype.entry(k.clone()).or_default(), v)?;
        }
        Ok(())
    }

    /// Bytes of one class.
    pub fn class_bytes(&self, class: &str) -> u64 {
        self.by_class.get(class).map_or(0, |t| t.bytes)
    }
}

/// The parameter class a tensor name belongs to, from the naming conventions of
/// Hugging Face checkpoints and of llama.cpp's GGUF files; "other" when unknown
/// (vision towers, projectors…).
#[deny(clippy::arithmetic_side_effects)]
pub(crate) fn classify(name: &str) -> &'static str {
    let n = name.to_ascii_lowercase();
    let has = |s: &str| n.contains(s);
    if has("lm_head") || n == "output.weight" || n.starts_with("output.") {
        return ParamClass::LmHead.key();
    }
    if has("embed") || has("wte") || has("token_embd") || has("tok_embeddings") || has("wpe") {
        return ParamClass::Embeddings.key();
    }
    if has("norm") || has(".ln_") || n.starts_with("ln_") {
        return ParamClass::Norms.key();
    }
    if has("attn")
        || has("attention")
        || has("q_proj")
        || has("k_proj")
        || has("v_proj")
        || has("o_proj")
    {
        return ParamClass::Attention.key();
    }
    if has("mlp")
        || has("ffn")
        || has("feed_forward")
        || has("expert")
        || has("gate")
        || has("up_proj")
        || has("down_proj")
    {
        return ParamClass::Mlp.key();
    }
    "other"
}

#[cfg(test)]
mod tests {
    use super::classify;

    #[test]
    fn classifies_common_names() {
        assert_eq!(classify("model.embed_tokens.weight"), "embeddings");
        assert_eq!(
            classify("model.layers.0.self_attn.q_proj.qweight"),
            "attention"
        );
        assert_eq!(classify("model.layers.0.mlp.down_proj.scales"), "mlp");
        assert_eq!(classify("model.layers.0.input_layernorm.weight"), "norms");
        assert_eq!(classify("lm_head.weight"), "lm_head");
        assert_eq!(classify("token_embd.weight"), "embeddings");
        assert_eq!(classify("blk.3.attn_k.weight"), "attention");
        assert_eq!(classify("blk.3.ffn_gate_exps.weight"), "mlp");
        assert_eq!(classify("output_norm.weight"), "norms");
        assert_eq!(classify("output.weight"), "lm_head");
        assert_eq!(classify("vision_tower.patch.weight"), "other");
    }
}
