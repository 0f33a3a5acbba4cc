//! Gemma (GemmaConfig), Gemma-2 (Gemma2Config: four norms per layer, every other
//! layer sliding), Gemma-3 (Gemma3TextConfig: per-head q/k norms, five sliding
//! layers in six, sparse published configs, the SigLIP vision tower of
//! Gemma3ForConditionalGeneration) and Gemma 4 (Gemma4TextConfig, transformers'
//! modeling_gemma4.py: its full-attention layers have their own KV heads and head
//! size and, with `attention_k_eq_v`, no `v_proj`; a `layer_scalar` per layer; `v_norm`
//! has no weight). Embeddings are tied unless said.

use crate::arch::{Architecture, GlobalAttn};
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family, Sliding};
use crate::import::config::json::Cfg;

/// Gemma.
pub(crate) const GEMMA: Family = Family {
    types: "gemma",
    class: "GemmaConfig",
    arch: Architecture {
        tied_embeddings: true,
        ..Architecture::BASE
    },
    ..BASE
};

/// Gemma-2.
pub(crate) const GEMMA2: Family = Family {
    types: "gemma2",
    class: "Gemma2Config",
    arch: Architecture {
        tied_embeddings: true,
        layer_norms: 4,
        ..Architecture::BASE
    },
    head_dim: 256,
    sliding: Sliding::Alternate,
    ..BASE
};

/// Gemma-3 (text, and the multimodal `gemma3` whose `text_config` it reads).
pub(crate) const GEMMA3: Family = Family {
    types: "gemma3_text gemma3",
    class: "Gemma3TextConfig",
    arch: Architecture {
        tied_embeddings: true,
        layer_norms: 4,
        qk_norm: true,
        ..Architecture::BASE
    },
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
    // Image tokens per image and the query scaling constant.
    inert: "mm_tokens_per_image query_pre_attn_scalar",
    ..BASE
};

/// Gemma 4 (text; the multimodal `gemma4` whose `text_config` it reads). Its
/// mixture-of-experts block (`enable_moe_block`), per-layer input embeddings
/// (`hidden_size_per_layer_input`), KV sharing (`num_kv_shared_layers`) and its
/// `gemma4_vision` tower are not read: set, they are named in warnings.
pub(crate) const GEMMA4: Family = Family {
    types: "gemma4_text gemma4",
    class: "Gemma4TextConfig",
    arch: Architecture {
        tied_embeddings: true,
        layer_norms: 4,
        qk_norm: true,
        layer_scalars: 1,
        ..Architecture::BASE
    },
    head_dim: 256,
    sliding: Sliding::Pattern(6),
    // The per-layer vocabulary only matters with per-layer inputs (warned about);
    // bidirectional attention over images changes the mask, not the tensors.
    // transformers writes the global layers' overrides as per_layer_config (read
    // from the global keys).
    inert: "vocab_size_per_layer_input use_bidirectional_attention per_layer_config",
    hook: Some(gemma4),
    ..BASE
};

fn gemma4(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let layers = d.arch.layers;
    // The full-attention layers: those layer_types lists, else every sixth
    // (Gemma4TextConfig's default pattern).
    let global = match c.count_of("layer_types", "full_attention") {
        Some(n) => n,
        None => layers.checked_div(6).unwrap_or(0),
    };
    // Gemma4TextAttention: global_head_dim (Gemma4TextConfig's default 512) on the
    // full layers; with attention_k_eq_v their KV heads are num_global_key_value_heads
    // and there is no v_proj, else the model's KV heads.
    let k_eq_v = c.flag("attention_k_eq_v") == Some(true);
    let head_dim = d.or_default(c, "global_head_dim", 512)?;
    let kv_heads = match c.uint("num_global_key_value_heads")? {
        Some(k) if k_eq_v => k,
        _ => d.arch.kv_heads,
    };
    // Gemma4TextConfig's window when the config leaves it out; the other layers
    // slide.
    if d.window.is_none() {
        d.window = Some(d.or_default(c, "sliding_window", 512)?);
    }
    d.sliding_layers = Some(layers.saturating_sub(global));
    d.arch.global_attn = Some(GlobalAttn {
        layers: global,
        kv_heads,
        head_dim,
        k_eq_v,
    });
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&GEMMA, &GEMMA2, &GEMMA3, &GEMMA4];
