//! MiniCPM3 (`minicpm3`, MiniCPM3Config: MiniCPM3-4B; transformers 5.23
//! `models/minicpm3/modeling_minicpm3.py`): DeepSeek-V2's multi-head latent attention
//! (`q_lora_rank`, `kv_lora_rank`, the per-head widths; biases on the
//! down-projections and `o_proj` under `attention_bias`) in a dense Llama-style
//! decoder, embeddings tied unless said, muP scales (`scale_emb`, `scale_depth`,
//! `dim_model_base`: no tensors); checked against the model transformers builds from
//! the class's defaults (`tests/cases/transformers`).

use crate::arch::Architecture;
use crate::import::config::family::{BASE, Family};

/// MiniCPM3.
pub(crate) const MINICPM3: Family = Family {
    types: "minicpm3",
    class: "MiniCPM3Config",
    arch: Architecture {
        tied_embeddings: true,
        ..Architecture::BASE
    },
    inert: "scale_emb scale_depth dim_model_base",
    ..BASE
};

/// Youtu-LLM (`youtu`, YoutuConfig; `models/youtu/modeling_youtu.py`): the same
/// latent attention in a dense decoder, tied unless said, its RoPE layout switch and
/// the embeddings' initialiser inert.
pub(crate) const YOUTU: Family = Family {
    types: "youtu",
    class: "YoutuConfig",
    inert: "rope_interleave embedding_initializer_range",
    ..MINICPM3
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&MINICPM3, &YOUTU];
