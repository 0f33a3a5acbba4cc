//! LFM2 (Lfm2Config; transformers 5.23 `models/lfm2/modeling_lfm2.py`): a hybrid of
//! attention layers and gated short convolutions, one kind per layer by `layer_types`
//! (`"full_attention"` or `"conv"`).
//!
//! | mechanism | transformers (5.23, `modeling_lfm2.py`) | here |
//! |---|---|---|
//! | conv layer: `in_proj` hidden → 3 × hidden, depthwise `conv` of `conv_L_cache` taps, `out_proj`, biases only with `conv_bias` | `Lfm2ShortConv` | mixer `shortconv` over the `"conv"` layers |
//! | attention: q/k/v/out without bias, RMSNorm over each head's q and k | `Lfm2Attention` (`q_layernorm`, `k_layernorm`) | `qk_norm` |
//! | two RMSNorms per layer, whatever its kind | `Lfm2DecoderLayer` (`operator_norm`, `ffn_norm`) | the base's |
//! | gated MLP `w1`, `w3`, `w2`, width `block_multiple_of` × ⌈int(multiplier × int(2/3 × ff)) / multiple⌉ under `block_auto_adjust_ff_dim` | `Lfm2MLP` | `intermediate` |
//! | final RMSNorm (`embedding_norm`), tied embeddings (`tie_embedding`, default true) | `Lfm2Model`, `Lfm2Config` | the base's final norm, `tied_embeddings` |
//! | the conv layers' cache: hidden × `conv_L_cache` values (vLLM: `conv_L_cache − 1`) | `LinearAttentionLayer.conv_states` (`cache_utils.py`) | the state line, vLLM's shape |
//!
//! `intermediate_size` is read through `block_ff_dim` when the config writes it
//! (Lfm2Config pops it into `intermediate_size`).

use serde_json::Value;

use crate::arch::{Architecture, Mixer, MixerKind};
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse, shown};

/// LFM2.
pub(crate) const LFM2: Family = Family {
    types: "lfm2",
    class: "Lfm2Config",
    arch: Architecture {
        qk_norm: true,
        tied_embeddings: true,
        ..Architecture::BASE
    },
    layer_types: "conv",
    // Sizes, initialisation and switches of Liquid's training code that the published
    // configs carry and Lfm2Config stores without reading (the modules are built
    // from hidden_size, num_attention_heads and the keys above).
    inert: "block_dim block_mlp_init_scale block_out_init_scale block_use_swiglu \
            block_use_xavier_init conv_dim conv_dim_out conv_use_xavier_init num_heads use_pos_enc",
    hook: Some(lfm2),
    ..BASE
};

fn lfm2(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let layers = d.arch.layers;
    // Which layers convolve: `layer_types`, else `full_attn_idxs` (the attention
    // layers), else every layer attends (Lfm2Config's `__post_init__`).
    let conv = match c.count_of("layer_types", "conv") {
        Some(n) => {
            c.touch(&["full_attn_idxs"]);
            n
        }
        None => match c.get("full_attn_idxs") {
            Some(Value::Array(list)) => {
                let mut seen: Vec<u64> = Vec::new();
                for x in list {
                    let i = x.as_u64().filter(|i| *i < layers).ok_or_else(|| {
                        parse(format!(
                            "full_attn_idxs: {} is not a layer index below num_hidden_layers ({layers})",
                            shown(x)
                        ))
                    })?;
                    if !seen.contains(&i) {
                        seen.push(i);
                    }
                }
                layers.saturating_sub(seen.len() as u64)
            }
            None | Some(Value::Null) => {
                d.notes.push(
                    "layer_types and full_attn_idxs absent: every layer is an attention layer (Lfm2Config's default)"
                        .into(),
                );
                0
            }
            Some(x) => {
                return Err(parse(format!(
                    "full_attn_idxs should be a list of layer indices, found {}",
                    shown(x)
                )));
            }
        },
    };
    if conv > layers {
        return Err(parse(format!(
            "layer_types: {conv} conv layers of {layers} layers"
        )));
    }
    if let Some(ff) = c.uint("block_ff_dim")? {
        d.arch.intermediate = ff;
        d.notes
            .retain(|n| !n.starts_with("intermediate size absent"));
    }
    d.arch.intermediate = mlp_width(c, d)?;
    if c.flag("conv_bias") == Some(true) {
        d.warnings.push(
            "conv_bias = true is not modelled: the short convolutions are counted without biases"
                .into(),
        );
    }
    // Lfm2Config pops `tie_embedding` over `tie_word_embeddings`.
    if let Some(tied) = c.flag("tie_embedding") {
        d.arch.tied_embeddings = tied;
        d.notes
            .retain(|n| !n.starts_with("tie_word_embeddings absent"));
    }
    if conv > 0 {
        d.arch.mixer = Some(Mixer {
            kind: MixerKind::ShortConv,
            layers: conv,
            inner: d.arch.hidden,
            conv: d.or_default(c, "conv_L_cache", 3)?,
            ..Mixer::BASE
        });
    } else {
        c.touch(&["conv_L_cache"]);
    }
    Ok(())
}

/// `Lfm2MLP`'s width from the config's `intermediate_size`: under
/// `block_auto_adjust_ff_dim` (default true) int(2 × ff / 3), then with
/// `block_ffn_dim_multiplier` (default 1.0; null skips both steps) int(multiplier ×
/// that) rounded up to a multiple of `block_multiple_of` (default 256).
fn mlp_width(c: &Cfg, d: &mut Draft) -> Result<u64, EstimateError> {
    let ff = d.arch.intermediate;
    if c.flag("block_auto_adjust_ff_dim") == Some(false) {
        c.touch(&["block_ffn_dim_multiplier", "block_multiple_of"]);
        return Ok(ff);
    }
    // int(2 * ff / 3): the float quotient truncated, which for sizes below 2^50 is
    // the integer floor.
    let ff = ff.saturating_mul(2) / 3;
    let multiplier = match c.get("block_ffn_dim_multiplier") {
        Some(Value::Null) => {
            c.touch(&["block_multiple_of"]);
            return Ok(ff);
        }
        None => 1.0,
        Some(x) => x
            .as_f64()
            .filter(|m| *m > 0.0 && *m <= 64.0)
            .ok_or_else(|| {
                parse(format!(
                    "block_ffn_dim_multiplier should be a positive number, found {}",
                    shown(x)
                ))
            })?,
    };
    // The width is bounded (at most 2^40 here), so the product is exact enough; the
    // truncation is Python's int().
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let scaled = if ff > 1 << 40 {
        return Err(parse("intermediate_size: absurdly large".into()));
    } else {
        (multiplier * ff as f64) as u64
    };
    let multiple = d.or_default(c, "block_multiple_of", 256)?.max(1);
    Ok(scaled.div_ceil(multiple).saturating_mul(multiple))
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&LFM2];
