//! Falcon-H1 (FalconH1Config / FalconH1Mixer): a Mamba-2 mixer runs beside attention
//! in every layer; its width is `mamba_d_ssm` (not expand × hidden unless that is
//! null), its gated RMSNorm exists only with `mamba_rms_norm`, and `in_proj` /
//! `conv1d` / `out_proj` take their biases from `mamba_proj_bias`, `mamba_conv_bias`
//! and `projectors_bias`. The muP multipliers scale activations and hold no
//! parameters.

use serde_json::Value;

use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

use crate::import::config::mixers::mamba2_mixer;

/// Falcon-H1.
pub(crate) const FALCON_H1: Family = Family {
    types: "falcon_h1",
    class: "FalconH1Config",
    hook: Some(falcon_h1),
    // mamba_expand beside mamba_d_ssm, which sets the width (the muP multipliers are
    // inert for every family: they set mup_vector's values, not its width).
    // mamba_norm_before_gate orders the gated norm's two steps (no tensor).
    inert: "mamba_expand mamba_norm_before_gate",
    ..BASE
};

fn falcon_h1(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let layers = d.arch.layers;
    let inner = match c.get("mamba_d_ssm") {
        // An explicit null: FalconH1Mixer falls back to expand × hidden.
        Some(Value::Null) => {
            let expand = d.or_default(c, "mamba_expand", 2)?;
            d.notes
                .push("mamba_d_ssm null: the mixer is mamba_expand × hidden wide".into());
            expand.saturating_mul(d.arch.hidden)
        }
        _ => d.or_default(c, "mamba_d_ssm", 1024)?,
    };
    let mut mixer = mamba2_mixer(c, d, inner, "mamba_d_ssm", layers)?;
    if c.flag("projectors_bias") == Some(true) {
        d.warnings.push(
            "projectors_bias = true is not modelled: the mixer's out_proj is counted without a bias"
                .into(),
        );
    }
    if c.flag("mamba_use_mlp") == Some(false) {
        d.warnings.push(
            "mamba_use_mlp = false is not modelled: every layer is counted with its MLP, as transformers' FalconH1DecoderLayer builds it"
                .into(),
        );
    }
    mixer.gated_norm = match c.flag("mamba_rms_norm") {
        Some(on) => on,
        None => {
            d.notes.push(
                "mamba_rms_norm absent: false assumed (FalconH1Config's default; no gated norm in the mixer)"
                    .into(),
            );
            false
        }
    };
    d.arch.mixer = Some(mixer);
    // FalconH1Model.__init__ registers `compute_mup_vector(config)` on every
    // `layer.mamba` as a non-persistent buffer (transformers 5.23
    // `models/falcon_h1/modeling_falcon_h1.py`): `torch.ones(1, 1, 2 × d_ssm + 2 ×
    // groups × d_state + heads)`, in the default dtype the model is built under.
    d.arch.mup_vectors = true;
    // Attention runs beside the mixer in every layer.
    d.arch.attn_layers = Some(layers);
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&FALCON_H1];
