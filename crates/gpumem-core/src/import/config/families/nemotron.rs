//! Nemotron-H and Nemotron-3 (NemotronHConfig; NVIDIA's modeling_nemotron_h.py,
//! transformers' `NemotronHBlock`, vLLM's nemotron_h.py): blocks of one norm and one
//! mixer each — Mamba-2 `M`, attention `*`, a non-gated relu² MLP `-` and (Nemotron-3)
//! an MoE block `E` — from `hybrid_override_pattern` (or `layers_block_type`);
//! Nemotron-3's MTP step "*E" without vocabulary copies, and its fp32 SSM cache.

use crate::arch::{Architecture, Mixer, MixerKind, Moe};
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};

use crate::import::config::mixers::mixer_biases;

/// Nemotron-H / Nemotron-3.
pub(crate) const NEMOTRON_H: Family = Family {
    types: "nemotron_h",
    class: "NemotronHConfig",
    arch: Architecture {
        gated_mlp: false,
        layer_norms: 1,
        ..Architecture::BASE
    },
    hook: Some(nemotron),
    // The mixer's width is mamba_num_heads × mamba_head_dim (expand unused); activations, initialisation and kernel choice;
    // whether the shared expert's compute overlaps the routed experts' (transformers 5.23 reads it nowhere).
    inert: "expand rescale_prenorm_residual use_mamba_kernels moe_shared_expert_overlap",
    // Learned or no positions: no rotary buffers.
    rope_tables: 0,
    ..BASE
};

/// The block counts of a Nemotron-H block pattern.
#[derive(Debug, Clone, Copy, Default)]
struct Blocks {
    /// Mamba-2 mixers (`M`).
    mamba: u64,
    /// Attention (`*`).
    attention: u64,
    /// Dense relu² MLPs (`-`).
    mlp: u64,
    /// MoE blocks (`E`, Nemotron-3).
    moe: u64,
}

fn nemotron(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let b = blocks(c, d.arch.layers, &mut d.warnings)?;
    d.arch.moe = if b.moe > 0 {
        Some(moe(c, b, &mut d.notes)?)
    } else {
        None
    };
    let mixer = mixer(c, d, b.mamba)?;
    d.arch.mixer = Some(mixer);
    d.arch.attn_layers = Some(b.attention);
    d.arch.mlp_layers = Some(b.mlp.saturating_add(b.moe));
    if c.str("mamba_ssm_cache_dtype") == Some("float32") {
        // vLLM's NemotronHForCausalLMConfig hook (model_executor/models/config.py)
        // sets cache_config.mamba_ssm_cache_dtype from this key; the conv state keeps
        // mamba_cache_dtype "auto", the model's dtype (mamba_utils.py,
        // MambaStateDtypeCalculator.mamba2_state_dtype). Per layer: the conv window
        // (inner + 2 × groups × d_state) × (kernel − 1) in the model dtype and the
        // SSM state inner × d_state in 4 bytes (`Mixer::state_values`' shapes).
        let (conv, ssm) = mixer
            .state_values()
            .map_err(|e| parse(format!("inconsistent shape: {e}")))?;
        let conv_bytes = if d.dtype.as_deref() == Some("float32") {
            4
        } else {
            2
        };
        let per_layer = conv
            .saturating_mul(conv_bytes)
            .saturating_add(ssm.saturating_mul(4));
        d.notes.push(format!(
            "mamba_ssm_cache_dtype float32: state-bytes {per_layer} (SSM state in fp32, conv in the model dtype, as vLLM keeps it; transformers' own cache holds its whole conv window beside the fp32 state, which an estimate without an engine counts)"
        ));
        d.state_bytes = Some(per_layer);
    }
    if d.arch.mtp_layers == 0 {
        // The MTP blocks' layout, without MTP blocks.
        c.touch(&["mtp_layers_block_type", "mtp_hybrid_override_pattern"]);
    } else {
        // Or transformers 5.23's mtp_layers_block_type, by the same names.
        let listed: Option<String> = c.list("mtp_layers_block_type").map(|l| {
            l.iter()
                .map(|x| match x.as_str() {
                    Some("attention" | "full_attention") => '*',
                    Some("moe") => 'E',
                    _ => '?',
                })
                .collect()
        });
        let pattern = c.str("mtp_hybrid_override_pattern").or(listed.as_deref());
        let skip = if pattern != Some("*E") {
            // Nemotron-3's MTP blocks are counted for the "*E" pattern (an attention
            // block, then the MoE block) only; another pattern is named, not miscounted.
            Some(format!(
                "num_nextn_predict_layers: MTP pattern {pattern:?} is not modelled (only \"*E\"): the MTP blocks are not counted"
            ))
        } else if b.moe == 0 {
            Some(
                "num_nextn_predict_layers: MTP blocks without MoE blocks are not modelled: not counted"
                    .into(),
            )
        } else {
            None
        };
        if let Some(w) = skip {
            d.warnings.push(w);
            d.arch.mtp_layers = 0;
        }
    }
    Ok(())
}

/// The blocks from `hybrid_override_pattern`, or (newer configs, transformers'
/// NemotronHConfig) `layers_block_type`, which lists the same four kinds by name.
fn blocks(c: &Cfg, layers: u64, warnings: &mut Vec<String>) -> Result<Blocks, EstimateError> {
    // An unknown name becomes '?', refused below.
    let mut listed = String::new();
    if !c.present("hybrid_override_pattern")
        && let Some(list) = c.list("layers_block_type")
    {
        for x in list {
            // transformers 5.23 writes linear_attention and full_attention.
            listed.push(match x.as_str() {
                Some("mamba" | "linear_attention") => 'M',
                Some("attention" | "full_attention") => '*',
                Some("mlp") => '-',
                Some("moe") => 'E',
                _ => '?',
            });
        }
    }
    let pattern = if listed.is_empty() {
        c.str("hybrid_override_pattern").ok_or_else(|| {
            parse("nemotron_h: hybrid_override_pattern (or layers_block_type) is needed".into())
        })?
    } else {
        listed.as_str()
    };
    let count = |c: char| pattern.chars().filter(|x| *x == c).count() as u64;
    if let Some(other) = pattern
        .chars()
        .find(|c| !matches!(c, 'M' | '*' | '-' | 'E'))
    {
        return Err(parse(format!(
            "unknown block {other:?} in the block pattern (read: M/mamba, */attention, -/mlp, E/moe): give the shape by hand"
        )));
    }
    if pattern.chars().count() as u64 != layers {
        return Err(parse(format!(
            "hybrid_override_pattern has {} blocks, num_hidden_layers {layers}",
            pattern.chars().count()
        )));
    }
    c.touch(&["layers_block_type"]);
    mixer_biases(c, "use_bias", "use_conv_bias", warnings);
    mixer_biases(c, "mamba_proj_bias", "use_conv_bias", warnings);
    Ok(Blocks {
        mamba: count('M'),
        attention: count('*'),
        mlp: count('-'),
        moe: count('E'),
    })
}

/// Nemotron-3's MoE blocks (`E`), as transformers' `NemotronHMoE` and vLLM's
/// `NemotronHMoE` store them: a router `gate.weight` [n_routed_experts, hidden] with
/// its `gate.e_score_correction_bias` [n_routed_experts], `n_routed_experts`
/// non-gated relu² experts (up_proj, down_proj, `moe_intermediate_size` wide) and one
/// shared `NemotronHMLP` `moe_shared_expert_intermediate_size × n_shared_experts`
/// wide (vLLM; none when n_shared_experts is 0). The `-` blocks among the MLP blocks
/// keep the dense MLP (`Moe::dense_layers`). With `moe_latent_size` (Nemotron-3
/// Super) the routed experts work at that width between `fc1_latent_proj` and
/// `fc2_latent_proj` (vLLM's NemotronHMoE; the shared expert and the router stay at
/// hidden width).
fn moe(c: &Cfg, b: Blocks, notes: &mut Vec<String>) -> Result<Moe, EstimateError> {
    let experts = c.need(&["n_routed_experts"])?;
    if experts < 2 {
        return Err(parse("n_routed_experts: at least 2 needed".into()));
    }
    let shared = match c.uint("n_shared_experts")? {
        Some(n) => n,
        None => {
            notes.push("n_shared_experts absent: 1 assumed (transformers' NemotronHMoE)".into());
            1
        }
    };
    let shared_width = c.need(&["moe_shared_expert_intermediate_size"])?;
    Ok(Moe {
        experts,
        active: c.need(&["num_experts_per_tok"])?,
        expert_intermediate: c.need(&["moe_intermediate_size"])?,
        // vLLM builds the n shared experts as one MLP n times as wide.
        shared_experts: u64::from(shared > 0),
        shared_intermediate: if shared > 0 {
            shared_width.saturating_mul(shared)
        } else {
            0
        },
        // The MLP blocks are the `-` and `E` blocks; the `-` ones stay dense (their
        // order does not change the count).
        dense_layers: b.mlp,
        // gate.e_score_correction_bias, an fp32 buffer in the checkpoints.
        correction_bias: true,
        // Nemotron-3 Super: fc1_latent_proj [latent, hidden] and fc2_latent_proj
        // [hidden, latent] around routed experts that work at the latent width.
        latent: c.uint("moe_latent_size")?.unwrap_or(0),
        ..Moe::BASE
    })
}

/// Nemotron-H's Mamba-2 mixer (`mamba_num_heads` × `mamba_head_dim`,
/// `ssm_state_size`, `n_groups`, `conv_kernel`).
fn mixer(c: &Cfg, d: &mut Draft, layers: u64) -> Result<Mixer, EstimateError> {
    let heads = d.or_default(c, "mamba_num_heads", 128)?;
    let head_dim = d.or_default(c, "mamba_head_dim", 64)?;
    Ok(Mixer {
        kind: MixerKind::Mamba2,
        layers,
        inner: heads.saturating_mul(head_dim),
        state: d.or_default(c, "ssm_state_size", 128)?,
        conv: d.or_default(c, "conv_kernel", 4)?,
        heads,
        key_heads: d.or_default(c, "n_groups", 8)?,
        ..Mixer::BASE
    })
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&NEMOTRON_H];
