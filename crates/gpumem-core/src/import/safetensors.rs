//! The header of a `.safetensors` file: an 8-byte little-endian length N, then N
//! bytes of JSON mapping each tensor name to `{dtype, shape, data_offsets}` (plus an
//! optional `__metadata__` of strings). Format: huggingface/safetensors,
//! `safetensors/src/tensor.rs` (`Dtype`, `MAX_HEADER_SIZE` = 100 000 000).
//!
//! The JSON is read as a stream — one tensor at a time, names borrowed from the
//! input — so that checkpoints with ~100k tensors are counted in milliseconds.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::TensorSummary;
use crate::error::EstimateError;

/// The largest header the format allows.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

const FORMAT: &str = "safetensors";

/// The JSON header's length, read from the first 8 bytes; the whole header ends at
/// byte `8 + len`. Refuses lengths the format does not allow.
pub fn header_len(prefix: &[u8]) -> Result<u64, EstimateError> {
    let Some(first) = prefix.get(..8) else {
        return Err(EstimateError::Truncated {
            format: FORMAT,
            have: prefix.len() as u64,
            needed: 8,
        });
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(first);
    let n = u64::from_le_bytes(le);
    if n < 2 {
        return Err(parse(format!(
            "header length {n} is too small to hold a JSON object"
        )));
    }
    if n > MAX_HEADER_BYTES {
        return Err(parse(format!(
            "header length {n} exceeds the format's limit of {MAX_HEADER_BYTES} bytes: not a safetensors file?"
        )));
    }
    Ok(n)
}

/// Bits per element of a safetensors dtype name.
fn dtype_bits(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        "I64" | "U64" | "F64" => 64,
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        _ => return None,
    })
}

/// Counts every tensor of a safetensors header. `bytes` must hold at least the
/// first `8 + header_len` bytes of the file (a header-only prefix is enough).
pub fn parse_header(bytes: &[u8]) -> Result<TensorSummary, EstimateError> {
    let n = header_len(bytes)?;
    // Past the address space it cannot be held: reported as truncated below.
    let end = usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_add(8))
        .unwrap_or(usize::MAX);
    let Some(json) = bytes.get(8..end) else {
        return Err(EstimateError::Truncated {
            format: FORMAT,
            have: bytes.len() as u64,
            needed: end as u64,
        });
    };
    let mut summary = TensorSummary::new(FORMAT);
    let mut de = serde_json::Deserializer::from_slice(json);
    HeaderSeed {
        summary: &mut summary,
    }
    .deserialize(&mut de)
    .map_err(|e| parse(format!("header JSON: {e}")))?;
    de.end().map_err(|e| parse(format!("header JSON: {e}")))?;
    Ok(summary)
}

fn parse(reason: String) -> EstimateError {
    EstimateError::Parse {
        format: FORMAT,
        reason,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TensorInfo<'a> {
    #[serde(borrow)]
    dtype: Cow<'a, str>,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

struct HeaderSeed<'s> {
    summary: &'s mut TensorSummary,
}

impl<'de> DeserializeSeed<'de> for HeaderSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object of tensors")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<Cow<'de, str>>()? {
            if name == "__metadata__" {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let info: TensorInfo<'de> = map.next_value()?;
            let bits = dtype_bits(&info.dtype).ok_or_else(|| {
                de::Error::custom(format!("tensor {name:?}: unknown dtype {:?}", info.dtype))
            })?;
            let mut elements: u128 = 1;
            for &d in &info.shape {
                elements = elements.checked_mul(u128::from(d)).ok_or_else(|| {
                    de::Error::custom(format!("tensor {name:?}: shape overflows"))
                })?;
            }
            let bytes = u64::try_from(elements.saturating_mul(u128::from(bits)).div_ceil(8))
                .map_err(|_| de::Error::custom(format!("tensor {name:?}: shape overflows")))?;
            let [start, stop] = info.data_offsets;
            if stop.checked_sub(start) != Some(bytes) {
                return Err(de::Error::custom(format!(
                    "tensor {name:?}: data_offsets [{start}, {stop}] span {} bytes but {} × {:?} needs {bytes}",
                    stop.wrapping_sub(start),
                    info.dtype,
                    info.shape
                )));
            }
            self.summary
                .add(&name, &info.dtype, bytes)
                .map_err(|e| de::Error::custom(e.to_string()))?;
        }
        Ok(())
    }
}

/// Builds a header-only safetensors prefix from `(name, dtype, shape)` triples —
/// for tests, fixtures and the benchmark (offsets laid out contiguously).
// Fixtures from small known shapes.
#[allow(clippy::arithmetic_side_effects)]
pub fn build_header(tensors: &[(&str, &str, &[u64])]) -> Vec<u8> {
    let mut json = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut offset = 0u64;
    for (name, dtype, shape) in tensors {
        let elements: u64 = shape.iter().product();
        let bytes = (elements * dtype_bits(dtype).unwrap_or(8)).div_ceil(8);
        let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
        json.push_str(&format!(
            ",\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{offset},{}]}}",
            dims.join(","),
            offset + bytes
        ));
        offset += bytes;
    }
    json.push('}');
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_header_only_prefix() {
        let h = build_header(&[
            ("model.embed_tokens.weight", "BF16", &[32000, 4096]),
            (
                "model.layers.0.self_attn.q_proj.qweight",
                "I32",
                &[512, 4096],
            ),
            ("model.layers.0.self_attn.q_proj.scales", "F16", &[32, 4096]),
            ("model.norm.weight", "F32", &[4096]),
        ]);
        let s = parse_header(&h).unwrap();
        assert_eq!(s.total.tensors, 4);
        assert_eq!(s.class_bytes("embeddings"), 32000 * 4096 * 2);
        assert_eq!(s.class_bytes("attention"), 512 * 4096 * 4 + 32 * 4096 * 2);
        assert_eq!(s.class_bytes("norms"), 4096 * 4);
        assert_eq!(s.by_dtype["I32"].bytes, 512 * 4096 * 4);
    }

    /// gpt-oss's MXFP4 experts (U8 `_blocks` [E, out, in/32, 16] + U8 `_scales`
    /// [E, out, in/32]) and a compressed-tensors NVFP4 linear (U8 packed, F8_E4M3
    /// scales per 16, two F32 globals) counted from the header equal the format
    /// layouts of `format.rs`.
    #[test]
    fn mxfp4_and_nvfp4_headers_match_the_format_layouts() {
        use crate::format::StorageFormat;
        let h = build_header(&[
            (
                "model.layers.0.mlp.experts.gate_up_proj_blocks",
                "U8",
                &[32, 5760, 90, 16],
            ),
            (
                "model.layers.0.mlp.experts.gate_up_proj_scales",
                "U8",
                &[32, 5760, 90],
            ),
            (
                "model.layers.0.mlp.experts.down_proj_blocks",
                "U8",
                &[32, 2880, 90, 16],
            ),
            (
                "model.layers.0.mlp.experts.down_proj_scales",
                "U8",
                &[32, 2880, 90],
            ),
        ]);
        let s = parse_header(&h).unwrap();
        let mx = |out, inp| StorageFormat::Mxfp4.matrix_bytes(out, inp).unwrap().bytes;
        assert_eq!(
            s.class_bytes("mlp"),
            32 * (2 * mx(2880, 2880) + mx(2880, 2880))
        );
        let h = build_header(&[
            (
                "model.layers.0.mlp.down_proj.weight_packed",
                "U8",
                &[4096, 7168],
            ),
            (
                "model.layers.0.mlp.down_proj.weight_scale",
                "F8_E4M3",
                &[4096, 896],
            ),
            (
                "model.layers.0.mlp.down_proj.weight_global_scale",
                "F32",
                &[1],
            ),
            (
                "model.layers.0.mlp.down_proj.input_global_scale",
                "F32",
                &[1],
            ),
        ]);
        let s = parse_header(&h).unwrap();
        let nv = StorageFormat::Nvfp4 { w4a4: true }
            .matrix_bytes(4096, 14336)
            .unwrap()
            .bytes;
        assert_eq!(s.class_bytes("mlp"), nv);
    }

    #[test]
    fn refuses_garbage_clearly() {
        assert!(matches!(
            parse_header(b"abc"),
            Err(EstimateError::Truncated { .. })
        ));
        let huge = u64::MAX.to_le_bytes();
        assert!(
            parse_header(&huge)
                .unwrap_err()
                .to_string()
                .contains("limit")
        );
        let mut h = build_header(&[("a", "F16", &[2, 2])]);
        h.truncate(h.len() - 3);
        assert!(matches!(
            parse_header(&h),
            Err(EstimateError::Truncated { .. })
        ));
        let bad = b"\x0b\0\0\0\0\0\0\0{\"a\":1234}";
        assert!(parse_header(bad).is_err());
        let json = br#"{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}}"#;
        let mut wrong_span = (json.len() as u64).to_le_bytes().to_vec();
        wrong_span.extend_from_slice(json);
        let e = parse_header(&wrong_span).unwrap_err().to_string();
        assert!(e.contains("needs 4"), "{e}");
    }
}
