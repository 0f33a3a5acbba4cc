//! RecurrentGemma (RecurrentGemmaConfig; transformers 5.23
//! `models/recurrent_gemma/modeling_recurrent_gemma.py`): Griffin's residual blocks,
//! each a temporal block — Griffin's recurrent block or local attention, by
//! `block_types` repeated over the layers — and a gated MLP.
//!
//! | mechanism | transformers (5.23, `modeling_recurrent_gemma.py`) | here |
//! |---|---|---|
//! | `"recurrent"` blocks: `linear_x`, `linear_y` (hidden → `lru_width`), depthwise `conv_1d` of `conv1d_width`, the RG-LRU's block-diagonal gates (`num_attention_heads` blocks) and `recurrent_param`, `linear_out`, every one with a bias | `RecurrentGemmaRecurrentBlock`, `RecurrentGemmaRglru` | mixer `rglru` |
//! | their state: the conv's last `conv1d_width − 1` inputs and one LRU value per channel (fp32 in transformers) | `RecurrentGemmaRecurrentBlock._setup_cache` | the state line |
//! | `"attention"` blocks: q/k/v (bias under `attention_bias`), `o_proj` with bias, local attention over `attention_window_size` tokens | `RecurrentGemmaSdpaAttention`, `create_sliding_window_causal_mask` | attention layers, all windowed |
//! | the MLP: gate, up, down with biases, `intermediate_size / 2` wide | `RecurrentGemmaMlp` | `intermediate`, `mlp_bias` |
//! | two RMSNorms per block, a final one; tied embeddings; logits soft-capped | `RecurrentGemmaDecoderLayer`, `RecurrentGemmaModel`, `logits_soft_cap` | the base's norms, `tied_embeddings`, `logit_softcap` |

use serde_json::Value;

use crate::arch::{Architecture, Mixer, MixerKind};
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse, shown};

use super::gpt::rotary_fraction;

/// RecurrentGemma (2B, 9B).
pub(crate) const RECURRENT_GEMMA: Family = Family {
    types: "recurrent_gemma",
    class: "RecurrentGemmaConfig",
    arch: Architecture {
        tied_embeddings: true,
        o_bias: true,
        mlp_bias: true,
        logit_softcap: true,
        ..Architecture::BASE
    },
    // The initialisation's variances.
    inert: "w_init_variance_scale final_w_init_variance_scale",
    hook: Some(recurrent_gemma),
    // RecurrentGemmaConfig's partial_rotary_factor default; one rotary embedding per
    // attention block (the hook).
    rotary_fraction: 0.5,
    ..BASE
};

fn recurrent_gemma(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let layers = d.arch.layers;
    // Layer i's temporal block is block_types[i % len] (`layers_block_type`).
    let kinds: Vec<&str> = match c.get("block_types") {
        None | Some(Value::Null) => {
            d.notes.push(
                "block_types absent: recurrent, recurrent, attention repeated (RecurrentGemmaConfig's default)"
                    .into(),
            );
            vec!["recurrent", "recurrent", "attention"]
        }
        Some(Value::Array(l)) if !l.is_empty() => {
            let mut out = Vec::new();
            for x in l {
                match x.as_str() {
                    Some(k @ ("recurrent" | "attention")) => out.push(k),
                    _ => {
                        return Err(parse(format!(
                            "block_types: {} is neither \"recurrent\" nor \"attention\"",
                            shown(x)
                        )));
                    }
                }
            }
            out
        }
        Some(x) => {
            return Err(parse(format!(
                "block_types should be a list of block kinds, found {}",
                shown(x)
            )));
        }
    };
    let n = kinds.len() as u64;
    let recurrent_in_period = kinds.iter().filter(|k| **k == "recurrent").count() as u64;
    let whole = layers.checked_div(n).unwrap_or(0);
    let rest = layers.checked_rem(n).unwrap_or(0);
    let rest_recurrent = kinds
        .iter()
        .take(usize::try_from(rest).unwrap_or(0))
        .filter(|k| **k == "recurrent")
        .count() as u64;
    let recurrent = whole
        .saturating_mul(recurrent_in_period)
        .saturating_add(rest_recurrent);
    // RecurrentGemmaMlp: intermediate_size // 2.
    d.arch.intermediate /= 2;
    // Every attention block attends locally.
    let window = d.or_default(c, "attention_window_size", 2048)?;
    d.window = Some(window);
    d.sliding_layers = Some(layers.saturating_sub(recurrent));
    // RecurrentGemmaSdpaAttention builds its own RecurrentGemmaRotaryEmbedding: one
    // pair of frequency buffers per attention block.
    d.arch.rope_tables = layers.saturating_sub(recurrent);
    // The soft cap of the logits: on unless the config says null.
    if c.get("logits_soft_cap").is_some_and(Value::is_null) {
        d.arch.logit_softcap = false;
    }
    rotary_fraction(c, d, "partial_rotary_factor", 0.5)?;
    let lru = d.or_default(c, "lru_width", d.arch.hidden)?;
    d.arch.mixer = Some(Mixer {
        kind: MixerKind::RgLru,
        layers: recurrent,
        inner: lru,
        conv: d.or_default(c, "conv1d_width", 4)?,
        heads: d.arch.heads,
        ..Mixer::BASE
    })
    .filter(|_| recurrent > 0);
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&RECURRENT_GEMMA];
