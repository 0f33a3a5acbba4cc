//! Training state (R-EST-6, seed §3): gradients, optimizer states, fp32 master
//! weights, LoRA adapters — computed from the layout each optimizer really keeps —
//! and activations, which have no universal constant and are therefore an
//! *assumption* with its formula shown.

// Checked arithmetic only: every operand here is user input.
#![deny(clippy::arithmetic_side_effects)]

use serde::{Deserialize, Serialize};

use crate::error::EstimateError;
use crate::format::Dtype;
use crate::units::checked_product;

/// The optimizer and the states it creates at its first step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// torch.optim.AdamW: `exp_avg` and `exp_avg_sq`, each like the parameter.
    Adamw,
    /// bitsandbytes AdamW8bit: two uint8 states + one fp32 absmax per 256 values each
    /// (blockwise quantisation, `bnb.optim.Optimizer8bit`).
    Adamw8bit,
    /// torch.optim.SGD with momentum: one `momentum_buffer` like the parameter.
    SgdMomentum,
    /// Plain SGD: no state.
    Sgd,
    /// No optimizer (e.g. gradients only).
    None,
}

impl Optimizer {
    /// Parses `adamw`, `adamw8bit`, `sgd-momentum`, `sgd`, `none`.
    pub fn parse(field: &'static str, t: &str) -> Result<Optimizer, EstimateError> {
        match t.trim().to_ascii_lowercase().as_str() {
            // Hugging Face `TrainingArguments.optim` names too (training_args.py,
            // `OptimizerNames`): the torch AdamW variants keep the same two states.
            "adamw" | "adam" | "adamw_torch" | "adamw_torch_fused" | "adamw_hf" => {
                Ok(Optimizer::Adamw)
            }
            "adamw8bit" | "adam8bit" | "adamw-8bit" | "adamw_8bit" | "adamw_bnb_8bit"
            | "paged_adamw_8bit" => Ok(Optimizer::Adamw8bit),
            "sgd-momentum" | "sgdm" => Ok(Optimizer::SgdMomentum),
            "sgd" => Ok(Optimizer::Sgd),
            "none" => Ok(Optimizer::None),
            other => Err(EstimateError::invalid(
                field,
                format!(
                    "unknown optimizer {other:?}; use adamw, adamw8bit, sgd-momentum, sgd or none"
                ),
            )),
        }
    }

    /// Canonical name.
    pub const fn name(self) -> &'static str {
        match self {
            Optimizer::Adamw => "adamw",
            Optimizer::Adamw8bit => "adamw8bit",
            Optimizer::SgdMomentum => "sgd-momentum",
            Optimizer::Sgd => "sgd",
            Optimizer::None => "none",
        }
    }

    /// Bytes of the optimizer state for `n` trainable values whose full-precision
    /// state type is `state`.
    pub fn state_bytes(self, n: u64, state: Dtype) -> Result<u64, EstimateError> {
        match self {
            Optimizer::Adamw => checked_product(&[2, n, state.bytes()], "optimizer states"),
            Optimizer::Adamw8bit => {
                let one = n
                    .checked_add(checked_product(&[n.div_ceil(256), 4], "optimizer absmax")?)
                    .ok_or(EstimateError::Overflow {
                        what: "optimizer states",
                    })?;
                checked_product(&[2, one], "optimizer states")
            }
            Optimizer::SgdMomentum => checked_product(&[n, state.bytes()], "optimizer states"),
            Optimizer::Sgd | Optimizer::None => Ok(0),
        }
    }
}

/// Which attention kernel runs: it decides whether a tokens² score matrix exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionImpl {
    /// Eager attention: the batch × heads × tokens² score matrix is materialised.
    Eager,
    /// PyTorch SDPA (memory-efficient / flash backends): no score matrix kept.
    Sdpa,
    /// FlashAttention: no score matrix kept.
    Flash,
    /// The memory-efficient kernel (xFormers' cutlass kernel in PyTorch): no score
    /// matrix kept; grouped K/V are repeated to every query head first.
    Efficient,
}

impl AttentionImpl {
    /// Parses `eager`, `sdpa`, `flash`.
    pub fn parse(field: &'static str, t: &str) -> Result<AttentionImpl, EstimateError> {
        match t.trim().to_ascii_lowercase().as_str() {
            "eager" => Ok(AttentionImpl::Eager),
            "sdpa" => Ok(AttentionImpl::Sdpa),
            "flash" | "flash_attention_2" | "flash-attention" => Ok(AttentionImpl::Flash),
            "efficient" | "mem-efficient" | "memory-efficient" => Ok(AttentionImpl::Efficient),
            other => Err(EstimateError::invalid(
                field,
                format!("unknown attention {other:?}; use eager, sdpa, flash or efficient"),
            )),
        }
    }

    /// Canonical name.
    pub const fn name(self) -> &'static str {
        match self {
            AttentionImpl::Eager => "eager",
            AttentionImpl::Sdpa => "sdpa",
            AttentionImpl::Flash => "flash",
            AttentionImpl::Efficient => "efficient",
        }
    }
}

/// Activation memory kept for the backward pass, after Korthikanti et al. 2022
/// ("Reducing Activation Recomputation in Large Transformer Models", eq. 1–2): per
/// layer `s·b·h·(34 + 5·a·s/h)` bytes with 16-bit activations and eager attention;
/// the `5·a·s²·b` score term vanishes with flash/SDPA kernels; full activation
/// checkpointing keeps only each layer's 16-bit input (`2·s·b·h`) plus one layer
/// recomputed at a time. Returns the bytes and the formula as text.
pub fn activation_bytes(
    layers: u64,
    hidden: u64,
    heads: u64,
    seq: u64,
    micro_batch: u64,
    checkpointing: bool,
    attention: AttentionImpl,
) -> Result<(u64, String), EstimateError> {
    let sbh = checked_product(&[seq, micro_batch, hidden], "activations")?;
    let scores = match attention {
        AttentionImpl::Eager => checked_product(&[5, heads, seq, seq, micro_batch], "activations")?,
        _ => 0,
    };
    let one_layer = checked_product(&[34, sbh], "activations")?
        .checked_add(scores)
        .ok_or(EstimateError::Overflow {
            what: "activations",
        })?;
    let score_text = if scores > 0 { " + 5·a·s²·b" } else { "" };
    if checkpointing {
        let kept = checked_product(&[2, sbh, layers], "activations")?;
        let bytes = kept.checked_add(one_layer).ok_or(EstimateError::Overflow {
            what: "activations",
        })?;
        Ok((
            bytes,
            format!(
                "2·s·b·h × L (checkpointed inputs) + one layer recomputed (34·s·b·h{score_text})"
            ),
        ))
    } else {
        let bytes = checked_product(&[one_layer, layers], "activations")?;
        Ok((bytes, format!("L × (34·s·b·h{score_text})")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adamw_is_two_states_of_the_state_type() {
        assert_eq!(
            Optimizer::Adamw.state_bytes(1000, Dtype::F32).unwrap(),
            8000
        );
        assert_eq!(
            Optimizer::Adamw.state_bytes(1000, Dtype::Bf16).unwrap(),
            4000
        );
    }

    #[test]
    fn adamw8bit_counts_block_scales() {
        // 1024 values: 1024 B + 4 blocks × 4 B per state, two states.
        assert_eq!(
            Optimizer::Adamw8bit.state_bytes(1024, Dtype::F32).unwrap(),
            2 * (1024 + 16)
        );
    }

    #[test]
    fn flash_attention_drops_the_score_term() {
        let (eager, _) =
            activation_bytes(1, 4096, 32, 2048, 1, false, AttentionImpl::Eager).unwrap();
        let (flash, f) =
            activation_bytes(1, 4096, 32, 2048, 1, false, AttentionImpl::Flash).unwrap();
        assert_eq!(flash, 34 * 2048 * 4096);
        assert_eq!(eager - flash, 5 * 32 * 2048 * 2048);
        assert!(!f.contains("s²"));
    }
}
