//! Mamba (MambaConfig), Mamba-2 (Mamba2Config) and Falcon-Mamba (FalconMambaConfig):
//! every layer a norm and a mixer, no attention, no MLP — read whole, not by the
//! decoder. Also the Mamba-family mixer readers the hybrids share (Jamba, Bamba,
//! GraniteMoeHybrid, Falcon-H1).

use crate::arch::{Architecture, Mixer, MixerKind};
use crate::error::EstimateError;
use crate::import::config::ImportedConfig;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};
use crate::import::config::quant;

use serde_json::Value;

/// Mamba, Mamba-2, Falcon-Mamba.
pub(crate) const MAMBA: Family = Family {
    types: "mamba mamba2 falcon_mamba",
    class: "MambaConfig",
    whole: Some(mamba),
    // Widths given by intermediate_size / num_heads × head_dim, n_layer beside num_hidden_layers, vocab_size already padded, initialisation and kernel choices; Mamba2Mixer has no Δ projection (time_step_rank unused).
    inert: concat!(
        "expand fused_add_norm n_layer norm_before_gate ",
        "pad_vocab_size_multiple use_mambapy",
    ),
    ..BASE
};

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

/// A Mamba(-1), Mamba-2 or Falcon-Mamba config. Falcon-Mamba's Δ/B/C RMSNorms have
/// no weights (non-persistent buffers): the tensors are Mamba's.
fn mamba(c: &Cfg, mt: &str, mut notes: Vec<String>) -> Result<ImportedConfig, EstimateError> {
    let class = match mt {
        "mamba" => "MambaConfig",
        "mamba2" => "Mamba2Config",
        _ => "FalconMambaConfig",
    };
    let mut warnings = Vec::new();
    let hidden = c.need(&["hidden_size", "d_model"])?;
    let layers = c.need(&["num_hidden_layers", "n_layer"])?;
    let vocab = c.need(&["vocab_size"])?;
    let mamba2 = mt == "mamba2";
    // Mamba2Mixer: intermediate_size = expand × hidden (there is no config key).
    let width = if mamba2 {
        None
    } else {
        c.uint("intermediate_size")?
    };
    let inner = match width {
        Some(i) => i,
        None => {
            let expand = c.or_default("expand", 2, class, &mut notes)?;
            notes.push("intermediate_size absent: d_inner = expand × hidden".into());
            expand.saturating_mul(hidden)
        }
    };
    let state = c.or_default(
        "state_size",
        if mamba2 { 128 } else { 16 },
        class,
        &mut notes,
    )?;
    let conv = c.or_default("conv_kernel", 4, class, &mut notes)?;
    let (kind, rank, heads, groups) = if mamba2 {
        let heads = c.or_default("num_heads", 128, class, &mut notes)?;
        let head_dim = c.or_default("head_dim", 64, class, &mut notes)?;
        if heads.checked_mul(head_dim) != Some(inner) {
            return Err(parse(format!(
                "num_heads × head_dim ({heads} × {head_dim}) is not expand × hidden ({inner})"
            )));
        }
        let groups = c.or_default("n_groups", 8, class, &mut notes)?;
        (MixerKind::Mamba2, 0, heads, groups)
    } else {
        let rank = dt_rank(c, "time_step_rank", hidden, class, &mut notes)?;
        (MixerKind::Mamba, rank, 0, 0)
    };
    mixer_biases(c, "use_bias", "use_conv_bias", &mut warnings);
    if c.flag("rms_norm") == Some(false) {
        warnings.push(
            "rms_norm = false is not modelled: the norms are counted as RMSNorm (a LayerNorm adds a bias)"
                .into(),
        );
    }
    let tied_embeddings = match c.flag("tie_word_embeddings") {
        Some(t) => t,
        None => {
            // Mamba2Config defaults to untied, MambaConfig to tied.
            notes.push(format!(
                "tie_word_embeddings absent: {} ({class}'s default)",
                if mamba2 { "untied" } else { "tied" }
            ));
            !mamba2
        }
    };
    let arch = Architecture {
        vocab,
        hidden,
        layers,
        tied_embeddings,
        layer_norms: 1,
        mixer: Some(Mixer {
            kind,
            layers,
            inner,
            state,
            conv,
            dt_rank: rank,
            heads,
            key_heads: groups,
            ..Mixer::BASE
        }),
        ..Architecture::BASE
    };
    arch.validate()
        .map_err(|e| parse(format!("inconsistent shape: {e}")))?;
    let dtype = c.dtype().map(str::to_string);
    let q = quant::format(c.get("quantization_config"), &mut warnings);
    Ok(ImportedConfig {
        mm_item: None,
        model_type: mt.to_string(),
        arch,
        sliding_window: None,
        sliding_layers: None,
        max_position: None,
        rope_positions: None,
        dtype,
        format: q.map(|(f, _)| f),
        attention_format: None,
        state_bytes: None,
        confidence: String::new(),
        notes,
        warnings,
    })
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
        dt_rank: 0,
        heads,
        key_heads: d.or_default(c, "mamba_n_groups", 1)?,
        norms: false,
        gated_norm: true,
    })
}
