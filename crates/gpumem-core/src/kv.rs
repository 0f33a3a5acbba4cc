//! The KV cache (method §4).
//!
//! bytes = 2 (K and V) × layers × KV heads × head dim × tokens kept × bytes per
//! value × sequences together. KV heads, not query heads: grouped- and multi-query
//! attention fall out of the KV-head count. Multi-head latent attention (DeepSeek)
//! caches one latent vector per token and layer instead: kv_lora_rank +
//! qk_rope_head_dim values (vLLM's and SGLang's MLA cache). Variants: sliding-window layers keep
//! `min(tokens, window)`; a static cache allocates its maximum length up front; a
//! quantised cache stores packed values with per-group scales and zero-points.

// Checked arithmetic only: every operand here is user input.
#![deny(clippy::arithmetic_side_effects)]

use serde::{Deserialize, Serialize};

use crate::error::EstimateError;
use crate::format::Dtype;
use crate::units::checked_product;

/// How cache values are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KvDtype {
    /// Plain values.
    Dense {
        /// The element type.
        dtype: Dtype,
    },
    /// Quantised values (Hugging Face `QuantizedCache` layout): `bits` per value,
    /// an fp16 scale and an fp16 zero-point per `group` values, and the most
    /// recent `residual` tokens kept unquantised in `residual_dtype`.
    Quantised {
        /// 2, 4 or 8.
        bits: u8,
        /// Values per scale/zero-point pair.
        group: u32,
        /// Recent tokens kept in full precision (Hugging Face default 128).
        residual: u64,
        /// Type of the residual tokens.
        residual_dtype: Dtype,
    },
}

impl KvDtype {
    /// Parses `fp16`, `bf16`, `fp32`, `fp8`, `int8`, `int4`, `int2` (quantised
    /// variants with group 64 and 128 residual tokens, Hugging Face's defaults).
    pub fn parse(
        field: &'static str,
        text: &str,
        compute: Dtype,
    ) -> Result<KvDtype, EstimateError> {
        let t = text.trim().to_ascii_lowercase();
        let quant = |bits| KvDtype::Quantised {
            bits,
            group: 64,
            residual: 128,
            residual_dtype: compute,
        };
        match t.as_str() {
            "int8" | "q8" => Ok(quant(8)),
            "int4" | "q4" => Ok(quant(4)),
            "int2" | "q2" => Ok(quant(2)),
            _ => Dtype::parse(field, &t)
                .map(|dtype| KvDtype::Dense { dtype })
                .map_err(|_| EstimateError::invalid(field, format!("unknown KV dtype {text:?}; use fp16, bf16, fp32, fp8, int8, int4 or int2"))),
        }
    }

    /// The canonical name.
    pub fn name(self) -> String {
        match self {
            KvDtype::Dense { dtype } => dtype.name().into(),
            KvDtype::Quantised { bits, .. } => format!("int{bits}"),
        }
    }
}

/// What one cached token of one layer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvLayout {
    /// K and V per KV head: 2 × KV heads × head dim values.
    Heads,
    /// MLA's compressed latent: kv_lora_rank + qk_rope_head_dim values.
    MlaLatent,
    /// MLA decompressed by the engine: heads × (qk_nope + qk_rope + v_head_dim).
    MlaDecompressed,
}

/// Inputs of the KV-cache formula.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvShape {
    /// Attention layers.
    pub layers: u64,
    /// Values one token keeps in one layer, K and V together.
    pub values: u64,
    /// How `values` arises (for the formula in words).
    pub layout: KvLayout,
    /// Value type.
    pub dtype: KvDtype,
    /// Sequences kept at the same time.
    pub sequences: u64,
    /// Window of the sliding-window layers, if any.
    pub sliding_window: Option<u64>,
    /// How many layers use the window (the rest keep every token); `None` = all.
    pub sliding_layers: Option<u64>,
    /// A static cache pre-allocated to this many tokens per sequence.
    pub static_tokens: Option<u64>,
    /// Values per token in the layers without the window when they differ from
    /// `values` (Gemma 4's global layers: their own KV heads and head size).
    #[serde(default)]
    pub full_values: Option<u64>,
}

impl KvShape {
    fn sliding_count(&self) -> u64 {
        match self.sliding_window {
            None => 0,
            Some(_) => self.sliding_layers.unwrap_or(self.layers).min(self.layers),
        }
    }

    /// Bytes one layer keeps for one sequence holding `kept` tokens, K and V together.
    fn layer_bytes(&self, kept: u64) -> Result<u64, EstimateError> {
        self.layer_bytes_of(self.values, kept)
    }

    fn layer_bytes_of(&self, width: u64, kept: u64) -> Result<u64, EstimateError> {
        let values = checked_product(&[width, kept], "KV values")?;
        match self.dtype {
            KvDtype::Dense { dtype } => checked_product(&[values, dtype.bytes()], "KV bytes"),
            KvDtype::Quantised {
                bits,
                group,
                residual,
                residual_dtype,
            } => {
                // K and V are quantised as separate tensors, each with its own scales;
                // MLA's latent is one tensor.
                let (parts, per) = match self.layout {
                    KvLayout::Heads => (2, width / 2),
                    _ => (1, width),
                };
                let full = kept.min(residual);
                let quantised = checked_product(&[per, kept.saturating_sub(full)], "KV values")?;
                let packed = checked_product(&[quantised, u64::from(bits)], "KV bits")?.div_ceil(8);
                let scales = checked_product(
                    &[quantised.div_ceil(u64::from(group.max(1))), 4],
                    "KV scales",
                )?;
                let residual_bytes =
                    checked_product(&[per, full, residual_dtype.bytes()], "KV residual")?;
                let one = packed
                    .checked_add(scales)
                    .and_then(|x| x.checked_add(residual_bytes))
                    .ok_or(EstimateError::Overflow { what: "KV bytes" })?;
                checked_product(&[parts, one], "KV bytes")
            }
        }
    }

    /// Bytes of the whole cache when every sequence holds `tokens` tokens (a static
    /// cache holds its full length whatever `tokens` is).
    pub fn bytes(&self, tokens: u64) -> Result<u64, EstimateError> {
        let tokens = self.static_tokens.unwrap_or(tokens);
        let sliding = self.sliding_count();
        let full_layers = self.layers.saturating_sub(sliding);
        let window_kept = self.sliding_window.map_or(tokens, |w| tokens.min(w));
        let full = self.layer_bytes_of(self.full_values.unwrap_or(self.values), tokens)?;
        let per_seq = checked_product(&[full, full_layers], "KV bytes")?
            .checked_add(checked_product(
                &[self.layer_bytes(window_kept)?, sliding],
                "KV bytes",
            )?)
            .ok_or(EstimateError::Overflow { what: "KV bytes" })?;
        checked_product(&[per_seq, self.sequences], "KV bytes")
    }

    /// Bytes of one layer's cache (K and V) over all sequences, for its widest layer
    /// (a full-attention one where some are windowed) holding `tokens` tokens.
    pub fn largest_layer_bytes(&self, tokens: u64) -> Result<u64, EstimateError> {
        let tokens = self.static_tokens.unwrap_or(tokens);
        let one = self.layer_bytes_of(self.full_values.unwrap_or(self.values), tokens)?;
        checked_product(&[one, self.sequences], "KV bytes")
    }

    /// The formula in words, for the page and the CLI.
    pub fn formula(&self) -> String {
        let per = match self.dtype {
            KvDtype::Dense { dtype } => format!("{} B", dtype.bytes()),
            KvDtype::Quantised {
                bits,
                group,
                residual,
                ..
            } => {
                format!(
                    "{bits} bits + fp16 scale and zero per {group} values, last {residual} tokens unquantised"
                )
            }
        };
        let what = match self.layout {
            KvLayout::Heads => "2 × KV heads × head dim",
            KvLayout::MlaLatent => "(kv_lora_rank + qk_rope_head_dim) latent",
            KvLayout::MlaDecompressed => "heads × (qk_nope + qk_rope + v_head_dim) decompressed",
        };
        let mut f = format!("layers × {what} × tokens kept × {per} × sequences");
        if let Some(w) = self.sliding_window {
            f.push_str(&format!(
                "; {} sliding layers keep min(tokens, {w})",
                self.sliding_count()
            ));
        }
        if let Some(s) = self.static_tokens {
            f.push_str(&format!("; static cache pre-allocated to {s} tokens"));
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed_shape(sequences: u64) -> KvShape {
        KvShape {
            layers: 32,
            values: 2 * 8 * 128,
            layout: KvLayout::Heads,
            dtype: KvDtype::Dense { dtype: Dtype::F16 },
            sequences,
            sliding_window: None,
            sliding_layers: None,
            static_tokens: None,
            full_values: None,
        }
    }

    #[test]
    fn seed_section_4() {
        assert_eq!(seed_shape(1).bytes(8192).unwrap(), 1 << 30);
        assert_eq!(seed_shape(4).bytes(8192).unwrap(), 4 << 30);
    }

    #[test]
    fn sliding_window_caps_only_its_layers() {
        let mut s = seed_shape(1);
        s.sliding_window = Some(4096);
        s.sliding_layers = Some(16);
        // 16 layers at 8192 tokens + 16 layers at 4096 tokens.
        assert_eq!(s.bytes(8192).unwrap(), (1 << 30) / 2 + (1 << 30) / 4);
        // Below the window nothing changes.
        assert_eq!(s.bytes(1024).unwrap(), seed_shape(1).bytes(1024).unwrap());
    }

    #[test]
    fn static_cache_ignores_the_tokens_present() {
        let mut s = seed_shape(1);
        s.static_tokens = Some(8192);
        assert_eq!(s.bytes(1).unwrap(), 1 << 30);
    }

    #[test]
    fn quantised_cache_counts_scales_and_residual() {
        let mut s = seed_shape(1);
        s.dtype = KvDtype::Quantised {
            bits: 4,
            group: 64,
            residual: 0,
            residual_dtype: Dtype::F16,
        };
        // 4 bits per value + 4 B per 64 values = 4.5 bits: 1 GiB × 4.5 / 16.
        assert_eq!(s.bytes(8192).unwrap(), (1u64 << 30) * 9 / 32);
    }
}
