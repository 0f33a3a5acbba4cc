//! RWKV-4 (RwkvConfig; transformers 5.23 `models/rwkv/modeling_rwkv.py`): every layer
//! a time mixing and a channel mixing, no attention heads — read whole, not by the
//! decoder.
//!
//! | mechanism | transformers (5.23, `modeling_rwkv.py`) | here |
//! |---|---|---|
//! | time mixing: key, value, receptance (hidden → `attention_hidden_size`), output, no biases; `time_decay`, `time_first`; three token-shift mixes | `RwkvSelfAttention` | mixer `rwkv` |
//! | channel mixing: key (hidden → `intermediate_size`) and value back, no biases | `RwkvFeedForward.key`, `.value` | a plain MLP (`gated-mlp` false) |
//! | its receptance (hidden × hidden) and two token-shift mixes | `RwkvFeedForward.receptance`, `time_mix_*` | mixer `rwkv` |
//! | LayerNorms with bias: `ln1`, `ln2` per block, `pre_ln` in the first, `ln_out` | `RwkvBlock`, `RwkvModel` | `layernorm-bias`, `embedding-norm` |
//! | `head`, untied unless said | `RwkvForCausalLM` | `tied-embeddings` |
//! | the state: five hidden-wide tensors per layer, the last token's two inputs in the model's dtype, the WKV numerator, denominator and maximum in fp32 | `RwkvModel.forward` | the state line |

use crate::arch::{Architecture, Mixer, MixerKind};
use crate::error::EstimateError;
use crate::import::config::ImportedConfig;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};
use crate::import::config::quant;

/// RWKV-4 (the RWKV/rwkv-4-* and rwkv-raven checkpoints).
pub(crate) const RWKV: Family = Family {
    types: "rwkv",
    class: "RwkvConfig",
    whole: Some(rwkv),
    // The inference's rescaling of the activations every few layers (no tensor).
    inert: "rescale_every",
    ..BASE
};

fn rwkv(c: &Cfg, mt: &str, mut notes: Vec<String>) -> Result<ImportedConfig, EstimateError> {
    let class = "RwkvConfig";
    let hidden = c.need(&["hidden_size"])?;
    let layers = c.need(&["num_hidden_layers"])?;
    let vocab = c.need(&["vocab_size"])?;
    // RwkvConfig: attention_hidden_size or hidden, intermediate_size or 4 × hidden.
    let attention = match c.uint("attention_hidden_size")? {
        Some(a) => a,
        None => {
            notes.push(format!(
                "attention_hidden_size absent: hidden assumed ({class}'s default)"
            ));
            hidden
        }
    };
    if attention != hidden {
        return Err(parse(format!(
            "attention_hidden_size {attention} differs from hidden_size {hidden}: RwkvModel's state is hidden wide, its time mixing attention_hidden_size wide"
        )));
    }
    let intermediate = match c.uint("intermediate_size")? {
        Some(i) => i,
        None => {
            notes.push(format!(
                "intermediate_size absent: 4 × hidden assumed ({class}'s default)"
            ));
            hidden.saturating_mul(4)
        }
    };
    let tied_embeddings = match c.flag("tie_word_embeddings") {
        Some(t) => t,
        None => {
            notes.push(format!(
                "tie_word_embeddings absent: untied ({class}'s default)"
            ));
            false
        }
    };
    let arch = Architecture {
        vocab,
        hidden,
        layers,
        intermediate,
        gated_mlp: false,
        tied_embeddings,
        layernorm_bias: true,
        embedding_norm: true,
        mixer: Some(Mixer {
            kind: MixerKind::Rwkv,
            layers,
            inner: attention,
            ..Mixer::BASE
        }),
        ..Architecture::BASE
    };
    arch.validate()
        .map_err(|e| parse(format!("inconsistent shape: {e}")))?;
    // The training context: RWKV has no position table, nothing in memory depends on it.
    c.touch(&["context_length"]);
    let mut warnings = Vec::new();
    let q = quant::format(c.get("quantization_config"), &mut warnings);
    Ok(ImportedConfig {
        mm_item: None,
        model_type: mt.to_string(),
        arch,
        sliding_window: None,
        sliding_layers: None,
        max_position: None,
        rope_positions: None,
        dtype: c.dtype().map(str::to_string),
        compressed_tensors: q.is_some()
            && quant::is_compressed_tensors(c.get("quantization_config")),
        format: q.map(|(f, _)| f),
        attention_format: None,
        state_bytes: None,
        confidence: String::new(),
        notes,
        warnings,
    })
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&RWKV];
