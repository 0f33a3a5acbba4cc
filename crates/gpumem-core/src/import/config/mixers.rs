//! The mixer readers the Mamba-family hybrids share (Jamba, Bamba, GraniteMoeHybrid,
//! Falcon-H1, Nemotron-H, and Mamba itself): Mamba's Δ rank, the Mamba-2 mixer of the
//! `mamba_*` keys, and the biases every published checkpoint of theirs has.

use serde_json::Value;

use crate::arch::{Mixer, MixerKind};
use crate::error::EstimateError;

use super::decoder::Draft;
use super::json::{Cfg, parse};

/// The mixers are counted with a conv bias and without in/out projection biases, as
/// every published Mamba-family checkpoint has them; the other choice is named.
pub(crate) fn mixer_biases(c: &Cfg, proj: &str, conv: &str, warnings: &mut Vec<String>) {
    for (key, on) in [(proj, true), (conv, false)] {
        if c.flag(key) == Some(on) {
            let w = format!(
                "{key} = {on} is not modelled: the mixer's biases are counted as in Mamba (a conv bias, no projection bias)"
            );
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
    }
}

/// Mamba's Δ rank: a number, or "auto" = ⌈hidden / 16⌉ (MambaConfig, JambaConfig).
pub(crate) fn dt_rank(
    c: &Cfg,
    key: &str,
    hidden: u64,
    class: &str,
    notes: &mut Vec<String>,
) -> Result<u64, EstimateError> {
    match c.get(key) {
        Some(Value::String(s)) if s == "auto" => Ok(hidden.div_ceil(16)),
        Some(Value::Null) | None => {
            notes.push(format!(
                "{key} absent: \"auto\" = ⌈hidden / 16⌉ assumed ({class}'s default)"
            ));
            Ok(hidden.div_ceil(16))
        }
        Some(_) => c
            .uint(key)?
            .ok_or_else(|| parse(format!("{key}: not a rank"))),
    }
}

/// The Mamba-2 mixer of Bamba and GraniteMoeHybrid (transformers' BambaMixer, which
/// GraniteMoeHybridMambaLayer reuses): `mamba_expand` × hidden wide, always with the
/// gated norm.
pub(crate) fn expand_mamba2(c: &Cfg, d: &mut Draft, layers: u64) -> Result<Mixer, EstimateError> {
    let expand = d.or_default(c, "mamba_expand", 2)?;
    let inner = expand.saturating_mul(d.arch.hidden);
    mamba2_mixer(c, d, inner, "mamba_expand × hidden", layers)
}

/// A Mamba-2 mixer `inner` wide (`width` names where that comes from) read from the
/// `mamba_*` keys Bamba, GraniteMoeHybrid and Falcon-H1 share: `mamba_d_head` "auto"
/// is the width over `mamba_n_heads`, and heads × head dim must be the width, as
/// their config classes require.
pub(crate) fn mamba2_mixer(
    c: &Cfg,
    d: &mut Draft,
    inner: u64,
    width: &str,
    layers: u64,
) -> Result<Mixer, EstimateError> {
    let heads = d.or_default(c, "mamba_n_heads", 128)?;
    let head_dim = match c.get("mamba_d_head") {
        Some(Value::String(s)) if s == "auto" => inner.checked_div(heads).unwrap_or(0),
        Some(Value::Null) | None => {
            d.notes.push(format!(
                "mamba_d_head absent: \"auto\" = {width} / mamba_n_heads assumed ({}'s default)",
                d.class
            ));
            inner.checked_div(heads).unwrap_or(0)
        }
        Some(_) => c.need(&["mamba_d_head"])?,
    };
    if heads.checked_mul(head_dim) != Some(inner) {
        return Err(parse(format!(
            "mamba_n_heads × mamba_d_head ({heads} × {head_dim}) is not {width} ({inner})"
        )));
    }
    mixer_biases(c, "mamba_proj_bias", "mamba_conv_bias", &mut d.warnings);
    Ok(Mixer {
        kind: MixerKind::Mamba2,
        layers,
        inner,
        state: d.or_default(c, "mamba_d_state", 256)?,
        conv: d.or_default(c, "mamba_d_conv", 4)?,
        heads,
        key_heads: d.or_default(c, "mamba_n_groups", 1)?,
        ..Mixer::BASE
    })
}
