//! Jamba (JambaConfig / JambaMambaMixer): every layer is attention when
//! `i % attn_layer_period == attn_layer_offset`, Mamba otherwise (with Δ/B/C
//! RMSNorms); every second layer is MoE by default.

use crate::arch::{Mixer, MixerKind};
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

use crate::import::config::mixers::{dt_rank, mixer_biases};

/// Jamba.
pub(crate) const JAMBA: Family = Family {
    types: "jamba",
    class: "JambaConfig",
    moe_every: 2,
    hook: Some(jamba),
    // Learned or no positions: no rotary buffers.
    rope_tables: 0,
    ..BASE
};

fn jamba(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let (hidden, layers) = (d.arch.hidden, d.arch.layers);
    let period = d.or_default(c, "attn_layer_period", 8)?.max(1);
    let offset = d.or_default(c, "attn_layer_offset", 4)?;
    // Layers i < layers with i % period == offset.
    let attention = layers
        .saturating_add(period)
        .saturating_sub(offset.saturating_add(1))
        .checked_div(period)
        .unwrap_or(0)
        .min(layers);
    if let Some(m) = d.arch.moe {
        let e_period = m.every;
        let e_offset = d.or_default(c, "expert_layer_offset", 1)?;
        let counted = m.moe_layers(layers);
        let actual = layers
            .saturating_add(e_period)
            .saturating_sub(e_offset.saturating_add(1))
            .checked_div(e_period)
            .unwrap_or(0);
        if counted != actual {
            d.warnings.push(format!(
                "expert_layer_offset {e_offset}: {actual} MoE layers, counted as {counted} (every {e_period}-th layer)"
            ));
        }
    }
    let expand = d.or_default(c, "mamba_expand", 2)?;
    mixer_biases(c, "mamba_proj_bias", "mamba_conv_bias", &mut d.warnings);
    d.arch.mixer = Some(Mixer {
        kind: MixerKind::Mamba,
        layers: layers.saturating_sub(attention),
        inner: expand.saturating_mul(hidden),
        state: d.or_default(c, "mamba_d_state", 16)?,
        conv: d.or_default(c, "mamba_d_conv", 4)?,
        dt_rank: dt_rank(c, "mamba_dt_rank", hidden, d.class, &mut d.notes)?,
        norms: true,
        ..Mixer::BASE
    });
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&JAMBA];
