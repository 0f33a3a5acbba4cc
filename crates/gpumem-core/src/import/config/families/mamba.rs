//! Mamba (MambaConfig), Mamba-2 (Mamba2Config) and Falcon-Mamba (FalconMambaConfig):
//! every layer a norm and a mixer, no attention, no MLP — read whole, not by the
//! decoder. (The mixer readers the hybrids share are in `config::mixers`.)

use crate::arch::{Architecture, Mixer, MixerKind};
use crate::error::EstimateError;
use crate::import::config::ImportedConfig;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};
use crate::import::config::mixers::{dt_rank, mixer_biases};
use crate::import::config::quant;

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
pub(crate) const FAMILIES: &[&Family] = &[&MAMBA];
