//! Gemma (GemmaConfig), Gemma-2 (Gemma2Config: four norms per layer, every other
//! layer sliding) and Gemma-3 (Gemma3TextConfig: per-head q/k norms, five sliding
//! layers in six, sparse published configs, the SigLIP vision tower of
//! Gemma3ForConditionalGeneration). Embeddings are tied unless said.

use crate::import::config::family::{BASE, Family, QkNorm, Sliding, Tower};

/// Gemma.
pub(crate) const GEMMA: Family = Family {
    types: "gemma",
    class: "GemmaConfig",
    tied: true,
    ..BASE
};

/// Gemma-2.
pub(crate) const GEMMA2: Family = Family {
    types: "gemma2",
    class: "Gemma2Config",
    tied: true,
    norms: 4,
    head_dim: 256,
    sliding: Sliding::Alternate,
    ..BASE
};

/// Gemma-3 (text, and the multimodal `gemma3` whose `text_config` it reads).
pub(crate) const GEMMA3: Family = Family {
    types: "gemma3_text gemma3",
    class: "Gemma3TextConfig",
    tied: true,
    norms: 4,
    qk_norm: QkNorm::PerHead,
    head_dim: 256,
    sliding: Sliding::Pattern(6),
    // The published configs are sparse: transformers' Gemma3TextConfig defaults.
    defaults: &[
        ("num_attention_heads", 8),
        ("num_key_value_heads", 4),
        ("head_dim", 256),
        ("vocab_size", 262_208),
        ("max_position_embeddings", 131_072),
        ("sliding_window_pattern", 6),
    ],
    tower: Tower::GemmaSiglip,
    // Image tokens per image and the query scaling constant.
    inert: "mm_tokens_per_image query_pre_attn_scalar",
    ..BASE
};
