//! The header of a GGUF file (versions 2 and 3): magic `GGUF`, version u32, tensor
//! count u64, metadata count u64, the metadata key/values, then one tensor info per
//! tensor (name, dims, ggml type, offset). Layout: ggml's `docs/gguf.md` and
//! `gguf.c`. Every tensor's bytes follow from its ggml type's block layout
//! ([`crate::format::GgufType::block`]).
//!
//! Every length read from the file is checked against the bytes present before it
//! is used, so a garbage or truncated file gives an error, never a panic or an
//! allocation sized by the garbage.

use super::TensorSummary;
use crate::error::EstimateError;
use crate::format::GgufType;

const FORMAT: &str = "gguf";

/// The metadata llama.cpp's `gguf-split` writes into every file of a split model
/// (github.com/ggml-org/llama.cpp `src/llama-arch.cpp`: `LLM_KV_SPLIT_NO`,
/// `LLM_KV_SPLIT_COUNT`, `LLM_KV_SPLIT_TENSORS_COUNT`): this file's index from 0, the
/// number of files, and the tensors of all files together. Kept in
/// [`GgufHeader::numbers`].
pub const SPLIT_NO: &str = "split.no";
/// See [`SPLIT_NO`].
pub const SPLIT_COUNT: &str = "split.count";
/// See [`SPLIT_NO`].
pub const SPLIT_TENSORS_COUNT: &str = "split.tensors.count";
/// GGML_MAX_DIMS.
const MAX_DIMS: u32 = 4;
const MAX_NESTING: u32 = 4;

/// A GGUF header, counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufHeader {
    /// 2 or 3.
    pub version: u32,
    /// Every tensor, counted exactly.
    pub tensors: TensorSummary,
    /// `general.architecture`, when present.
    pub architecture: Option<String>,
    /// A multimodal projector's (`mmproj`) kind for images, when present:
    /// `clip.vision.projector_type` (files with several encoders name each one's), else
    /// `clip.projector_type` (llama.cpp `tools/mtmd/clip-impl.h` `KEY_PROJ_TYPE`).
    pub projector_type: Option<String>,
    /// Integer metadata useful for the architecture mode (`llama.block_count`, …;
    /// `tokenizer.ggml.tokens`: the vocabulary's length).
    pub numbers: Vec<(String, u64)>,
    /// Shape keys present with a value that is no single integer (a per-layer array,
    /// a float): named when the shape is read, never taken for absent.
    pub unread: Vec<String>,
    /// Bytes the header occupies (where the tensor data section starts, before padding).
    pub header_bytes: u64,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64) -> Result<&'a [u8], EstimateError> {
        let end = (self.pos as u64).saturating_add(n);
        if end > self.buf.len() as u64 {
            return Err(EstimateError::Truncated {
                format: FORMAT,
                have: self.buf.len() as u64,
                needed: end,
            });
        }
        let s = &self.buf[self.pos..end as usize];
        self.pos = end as usize;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, EstimateError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self) -> Result<u64, EstimateError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    fn string(&mut self) -> Result<&'a str, EstimateError> {
        let at = self.pos;
        let n = self.u64()?;
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes).map_err(|_| parse(format!("string at byte {at} is not UTF-8")))
    }
    fn remaining(&self) -> u64 {
        // pos never passes the buffer's end (take checks it).
        self.buf.len().saturating_sub(self.pos) as u64
    }
}

fn parse(reason: String) -> EstimateError {
    EstimateError::Parse {
        format: FORMAT,
        reason,
    }
}

/// A metadata value, reduced to what the estimator uses.
enum Value<'a> {
    Int(u64),
    Str(&'a str),
    Other,
}

/// Fixed size of a scalar metadata type, or `None` for strings and arrays.
fn scalar_size(ty: u32) -> Option<u64> {
    match ty {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

fn read_value<'a>(r: &mut Reader<'a>, ty: u32, depth: u32) -> Result<Value<'a>, EstimateError> {
    if let Some(size) = scalar_size(ty) {
        let raw = r.take(size)?;
        return Ok(match ty {
            0 => Value::Int(u64::from(raw[0])),
            2 => Value::Int(u64::from(u16::from_le_bytes([raw[0], raw[1]]))),
            4 => Value::Int(u64::from(u32::from_le_bytes([
                raw[0], raw[1], raw[2], raw[3],
            ]))),
            10 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(raw);
                Value::Int(u64::from_le_bytes(b))
            }
            5 => {
                let v = i32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
                u64::try_from(v).map_or(Value::Other, Value::Int)
            }
            _ => Value::Other,
        });
    }
    match ty {
        8 => Ok(Value::Str(r.string()?)),
        9 => {
            if depth >= MAX_NESTING {
                return Err(parse("metadata arrays nested too deeply".into()));
            }
            let elem = r.u32()?;
            let count = r.u64()?;
            match scalar_size(elem) {
                Some(size) => {
                    r.take(count.saturating_mul(size))?;
                }
                None => {
                    // Strings need 8 bytes each at least: check before looping.
                    if count > r.remaining() / 8 {
                        return Err(EstimateError::Truncated {
                            format: FORMAT,
                            have: r.buf.len() as u64,
                            needed: (r.pos as u64).saturating_add(count.saturating_mul(8)),
                        });
                    }
                    for _ in 0..count {
                        read_value(r, elem, depth.saturating_add(1))?;
                    }
                }
            }
            Ok(Value::Other)
        }
        other => Err(parse(format!(
            "unknown metadata value type {other} at byte {}",
            r.pos
        ))),
    }
}

/// Counts every tensor of a GGUF header. `bytes` must hold the file from its
/// start to at least the end of the tensor infos (a header-only prefix is enough;
/// a shorter one gives [`EstimateError::Truncated`] with the bytes needed so far).
pub fn parse_header(bytes: &[u8]) -> Result<GgufHeader, EstimateError> {
    let mut r = Reader { buf: bytes, pos: 0 };
    if r.take(4)? != b"GGUF" {
        return Err(parse(
            "not a GGUF file (the magic bytes are not \"GGUF\")".into(),
        ));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(parse(format!(
            "version {version} is not supported (versions 2 and 3 are; a huge number means a big-endian file)"
        )));
    }
    let tensor_count = r.u64()?;
    let kv_count = r.u64()?;
    // Each key/value takes at least 12 bytes and each tensor info at least 24.
    const PLAUSIBLE: u64 = 1 << 32;
    if tensor_count > PLAUSIBLE || kv_count > PLAUSIBLE {
        return Err(parse(format!(
            "{tensor_count} tensors / {kv_count} metadata entries is implausible"
        )));
    }
    let mut architecture = None;
    let mut projector_type = None;
    let mut vision_projector_type = None;
    // A list, not a map: a handful of keys, and no map type of its own in the page.
    let mut numbers: Vec<(String, u64)> = Vec::new();
    let mut unread = Vec::new();
    for _ in 0..kv_count {
        let key = r.string()?;
        let ty = r.u32()?;
        if key == TOKENS && ty == 9 {
            // The vocabulary: the token list's length (its strings are skipped below).
            let at = r.pos;
            let _elem = r.u32()?;
            numbers.push((key.to_string(), r.u64()?));
            r.pos = at;
        }
        match read_value(&mut r, ty, 0)? {
            Value::Str(s) if key == "general.architecture" => architecture = Some(s.to_string()),
            Value::Str(s) if key == PROJECTOR_TYPE => projector_type = Some(s.to_string()),
            Value::Str(s) if key == VISION_PROJECTOR_TYPE => {
                vision_projector_type = Some(s.to_string());
            }
            Value::Int(v) if is_useful_number(key) => numbers.push((key.to_string(), v)),
            _ if is_useful_number(key) => unread.push(key.to_string()),
            _ => {}
        }
    }
    let mut tensors = TensorSummary::new(FORMAT);
    for _ in 0..tensor_count {
        let name = r.string()?;
        let n_dims = r.u32()?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(parse(format!(
                "tensor {name:?} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)"
            )));
        }
        let mut dims = [1u64; MAX_DIMS as usize];
        for d in dims.iter_mut().take(n_dims as usize) {
            *d = r.u64()?;
        }
        let type_id = r.u32()?;
        let _offset = r.u64()?;
        let ty = GgufType::from_id(type_id).ok_or_else(|| {
            parse(format!(
                "tensor {name:?} has unknown ggml type id {type_id}"
            ))
        })?;
        let (per_block, block_bytes) = ty.block();
        if !dims[0].is_multiple_of(per_block) {
            return Err(parse(format!(
                "tensor {name:?}: row length {} is not a multiple of {}'s block of {per_block}",
                dims[0],
                ty.name()
            )));
        }
        // Every block type has a non-zero block; two u64 factors fit in u128.
        let mut b = u128::from(dims[0].checked_div(per_block).unwrap_or(0))
            .saturating_mul(u128::from(block_bytes));
        for &d in &dims[1..] {
            b = b
                .checked_mul(u128::from(d))
                .ok_or(EstimateError::Overflow {
                    what: "tensor bytes",
                })?;
        }
        let b = u64::try_from(b).map_err(|_| EstimateError::Overflow {
            what: "tensor bytes",
        })?;
        tensors.add(name, ty.name(), b)?;
    }
    Ok(GgufHeader {
        version,
        tensors,
        architecture,
        projector_type: vision_projector_type.or(projector_type),
        numbers,
        unread,
        header_bytes: r.pos as u64,
    })
}

/// The tokenizer's token list, whose length is the vocabulary.
const TOKENS: &str = "tokenizer.ggml.tokens";
/// A multimodal projector's kind (`mlp` for LLaVA's).
pub const PROJECTOR_TYPE: &str = "clip.projector_type";
/// The image projector's kind in a file with several encoders.
pub const VISION_PROJECTOR_TYPE: &str = "clip.vision.projector_type";

fn is_useful_number(key: &str) -> bool {
    const SUFFIXES: [&str; 14] = [
        ".block_count",
        ".context_length",
        ".embedding_length",
        ".feed_forward_length",
        ".attention.head_count",
        ".attention.head_count_kv",
        ".attention.key_length",
        ".attention.value_length",
        ".attention.sliding_window",
        ".rope.scaling.original_context_length",
        ".expert_count",
        ".expert_used_count",
        // A vision encoder's (`clip.vision.*`, an mmproj file).
        ".image_size",
        ".patch_size",
    ];
    SUFFIXES.iter().any(|s| key.ends_with(s))
        || matches!(
            key,
            "general.alignment" | SPLIT_NO | SPLIT_COUNT | SPLIT_TENSORS_COUNT
        )
}

/// The shape a GGUF header gives the KV line, as `key=value` pairs, with what was
/// assumed and what could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GgufShape {
    /// `layers`, `kv-heads`, `head-dim`, `max-position`, `sliding-window`,
    /// `sliding-layers` as the header says them (the KV line's shape: the weights are
    /// the header's tensors).
    pub pairs: Vec<(&'static str, String)>,
    /// The vocabulary (the token list's length).
    pub vocab: Option<u64>,
    /// Defaults assumed.
    pub notes: Vec<String>,
    /// What the header holds and the shape does not use.
    pub warnings: Vec<String>,
}

impl GgufHeader {
    /// The integer metadata `key`, if kept in [`GgufHeader::numbers`].
    pub fn number(&self, key: &str) -> Option<u64> {
        self.numbers.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// The KV shape from the header's metadata (llama.cpp's `LLM_KV_*` keys,
    /// `src/llama-arch.cpp`: `{arch}.block_count`, `{arch}.attention.head_count_kv`,
    /// `{arch}.attention.key_length`, `{arch}.context_length`,
    /// `{arch}.attention.sliding_window`, the token list's length), so that a GGUF file
    /// alone answers "will it fit at this context?": the weights are the header's
    /// tensors. `None` without `general.architecture` or the block and head counts.
    pub fn shape(&self) -> Option<GgufShape> {
        let arch = self.architecture.as_deref()?;
        let get = |k: &str| self.number(&format!("{arch}.{k}"));
        let layers = get("block_count")?;
        let heads = get("attention.head_count").filter(|h| *h > 0)?;
        let mut out = GgufShape::default();
        for key in &self.unread {
            out.warnings.push(format!(
                "{key} is not a single integer (per-layer or fractional): not used"
            ));
        }
        let kv_heads = get("attention.head_count_kv").unwrap_or_else(|| {
            out.notes.push(format!(
                "{arch}.attention.head_count_kv absent: KV heads = attention heads"
            ));
            heads
        });
        let head_dim = match get("attention.key_length") {
            Some(d) => d,
            None => get("embedding_length")?.checked_div(heads)?,
        };
        if get("attention.value_length").is_some_and(|v| v != head_dim) {
            out.warnings.push(format!(
                "{arch}.attention.value_length differs from key_length: the KV cache is counted with key_length for both"
            ));
        }
        out.pairs.extend([
            ("layers", layers.to_string()),
            ("kv-heads", kv_heads.to_string()),
            ("head-dim", head_dim.to_string()),
        ]);
        out.vocab = self.number(TOKENS);
        if let Some(n) = get("context_length") {
            out.pairs.push(("max-position", n.to_string()));
        }
        if let Some(w) = get("attention.sliding_window").filter(|w| *w > 0) {
            // Which layers use the window is llama.cpp's per-architecture rule
            // (src/llama-model.cpp: hparams.set_swa_pattern), kept in each family's
            // record.
            let sliding = match super::config::gguf_sliding_layers(arch, layers) {
                Some(n) => n,
                None => {
                    out.notes.push(format!(
                        "{arch}.attention.sliding_window: every layer counted as sliding"
                    ));
                    layers
                }
            };
            out.pairs.push(("sliding-window", w.to_string()));
            out.pairs.push(("sliding-layers", sliding.to_string()));
        }
        Some(out)
    }
}

/// Builds a header-only GGUF v3 prefix with one string and one u32 metadata entry
/// and the given `(name, dims, ggml type id)` tensors — for tests and fixtures.
// Fixtures from small known shapes.
#[allow(clippy::arithmetic_side_effects)]
pub fn build_header(arch: &str, tensors: &[(&str, &[u64], u32)]) -> Vec<u8> {
    build_split_header(arch, tensors, None)
}

/// [`build_header`] for one file of a split model: `split` is (`split.no`,
/// `split.count`, `split.tensors.count`), written with the types `gguf-split` gives
/// them (u16, u16, i32) — for tests and fixtures.
pub fn build_split_header(
    arch: &str,
    tensors: &[(&str, &[u64], u32)],
    split: Option<(u16, u16, i32)>,
) -> Vec<u8> {
    build_header_with(arch, &[("block_count", 1)], tensors, split)
}

/// [`build_split_header`] with the architecture's u32 metadata `ints` (keys without
/// the `{arch}.` prefix: `block_count`, `attention.head_count`, …) — for tests and
/// fixtures whose header also gives the model's shape.
pub fn build_header_with(
    arch: &str,
    ints: &[(&str, u32)],
    tensors: &[(&str, &[u64], u32)],
    split: Option<(u16, u16, i32)>,
) -> Vec<u8> {
    build_header_strings(arch, &[], ints, tensors, split)
}

/// [`build_header_with`] with string metadata `strings` (full keys, e.g.
/// `clip.projector_type`) after `general.architecture` — for tests and fixtures of
/// an mmproj file.
#[allow(clippy::arithmetic_side_effects)]
pub fn build_header_strings(
    arch: &str,
    strings: &[(&str, &str)],
    ints: &[(&str, u32)],
    tensors: &[(&str, &[u64], u32)],
    split: Option<(u16, u16, i32)>,
) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    let push_str = |out: &mut Vec<u8>, s: &str| {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    };
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    let kv = 1 + strings.len() as u64 + ints.len() as u64 + if split.is_some() { 3 } else { 0 };
    out.extend_from_slice(&kv.to_le_bytes());
    push_str(&mut out, "general.architecture");
    out.extend_from_slice(&8u32.to_le_bytes());
    push_str(&mut out, arch);
    for (key, v) in strings {
        push_str(&mut out, key);
        out.extend_from_slice(&8u32.to_le_bytes());
        push_str(&mut out, v);
    }
    for (key, v) in ints {
        push_str(&mut out, &format!("{arch}.{key}"));
        out.extend_from_slice(&4u32.to_le_bytes());
        out.extend_from_slice(&v.to_le_bytes());
    }
    if let Some((no, count, total)) = split {
        for (key, v) in [(SPLIT_NO, no), (SPLIT_COUNT, count)] {
            push_str(&mut out, key);
            out.extend_from_slice(&2u32.to_le_bytes());
            out.extend_from_slice(&v.to_le_bytes());
        }
        push_str(&mut out, SPLIT_TENSORS_COUNT);
        out.extend_from_slice(&5u32.to_le_bytes());
        out.extend_from_slice(&total.to_le_bytes());
    }
    let mut offset = 0u64;
    for (name, dims, ty) in tensors {
        push_str(&mut out, name);
        out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in *dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        offset += 1 << 20;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header with the given metadata — (key, u32 value), a string array of `n`
    /// tokens, and a u32 array under `array_key` — and no tensors.
    #[allow(clippy::arithmetic_side_effects)]
    fn with_metadata(arch: &str, ints: &[(&str, u32)], tokens: u64, array_key: &str) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        let push_str = |out: &mut Vec<u8>, s: &str| {
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        };
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        let kv = ints.len() as u64 + 2 + u64::from(!array_key.is_empty());
        out.extend_from_slice(&kv.to_le_bytes());
        push_str(&mut out, "general.architecture");
        out.extend_from_slice(&8u32.to_le_bytes());
        push_str(&mut out, arch);
        for (k, v) in ints {
            push_str(&mut out, &format!("{arch}.{k}"));
            out.extend_from_slice(&4u32.to_le_bytes());
            out.extend_from_slice(&v.to_le_bytes());
        }
        push_str(&mut out, "tokenizer.ggml.tokens");
        out.extend_from_slice(&9u32.to_le_bytes());
        out.extend_from_slice(&8u32.to_le_bytes());
        out.extend_from_slice(&tokens.to_le_bytes());
        for i in 0..tokens {
            push_str(&mut out, &format!("t{i}"));
        }
        if !array_key.is_empty() {
            push_str(&mut out, &format!("{arch}.{array_key}"));
            out.extend_from_slice(&9u32.to_le_bytes());
            out.extend_from_slice(&4u32.to_le_bytes());
            out.extend_from_slice(&2u64.to_le_bytes());
            out.extend_from_slice(&[0u8; 8]);
        }
        out
    }

    #[test]
    fn the_kv_shape_comes_from_the_metadata() {
        // Llama-3.1-8B's metadata (its vocabulary shortened to 300 tokens here).
        let llama = [
            ("block_count", 32),
            ("attention.head_count", 32),
            ("attention.head_count_kv", 8),
            ("embedding_length", 4096),
            ("context_length", 131_072),
        ];
        let g = parse_header(&with_metadata("llama", &llama, 300, "")).unwrap();
        let shape = g.shape().unwrap();
        let want: Vec<(&str, String)> = [
            ("layers", "32"),
            ("kv-heads", "8"),
            ("head-dim", "128"),
            ("max-position", "131072"),
        ]
        .iter()
        .map(|(k, v)| (*k, v.to_string()))
        .collect();
        assert_eq!(shape.pairs, want);
        assert_eq!(shape.vocab, Some(300));
        assert!(shape.warnings.is_empty() && shape.notes.is_empty());
        // The KV line from these alone: 8 heads × 128 × 2 × 32 layers × 8 192 × 2 B = 1 GiB.
        let mut pairs = shape.pairs.clone();
        pairs.extend([("context", "8192".to_string()), ("kv-dtype", "bf16".into())]);
        let (input, errors) =
            crate::params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        let est = crate::estimate::estimate(&input).unwrap();
        assert_eq!(est.kv_cache_bytes, 1 << 30);
        // Gemma-3: the window on five layers in six, an explicit key length.
        let gemma = [
            ("block_count", 26),
            ("attention.head_count", 4),
            ("attention.head_count_kv", 1),
            ("attention.key_length", 256),
            ("embedding_length", 1152),
            ("attention.sliding_window", 512),
        ];
        let s = parse_header(&with_metadata("gemma3", &gemma, 2, ""))
            .unwrap()
            .shape()
            .unwrap();
        assert!(s.pairs.contains(&("head-dim", "256".into())));
        assert!(
            s.pairs
                .contains(&("sliding-layers", (26 - 26 / 6).to_string()))
        );
        // A per-layer KV-head list is named, not taken for absent silently.
        let s = parse_header(&with_metadata(
            "openelm",
            &[llama[0], llama[1], llama[3]],
            2,
            "attention.head_count_kv",
        ))
        .unwrap()
        .shape()
        .unwrap();
        assert!(
            s.warnings.iter().any(|w| w.contains("head_count_kv")),
            "{s:?}"
        );
    }

    #[test]
    fn counts_block_types_exactly() {
        let h = build_header(
            "llama",
            &[
                ("token_embd.weight", &[4096, 32000], 12),    // Q4_K
                ("blk.0.attn_q.weight", &[4096, 4096], 14),   // Q6_K
                ("blk.0.ffn_down.weight", &[11008, 4096], 8), // Q8_0
                ("output_norm.weight", &[4096], 0),           // F32
            ],
        );
        let g = parse_header(&h).unwrap();
        assert_eq!(g.version, 3);
        assert_eq!(g.architecture.as_deref(), Some("llama"));
        assert_eq!(g.number("llama.block_count").unwrap(), 1);
        assert_eq!(
            g.tensors.class_bytes("embeddings"),
            4096 / 256 * 144 * 32000
        );
        assert_eq!(g.tensors.class_bytes("attention"), 4096 / 256 * 210 * 4096);
        assert_eq!(g.tensors.class_bytes("mlp"), 11008 / 32 * 34 * 4096);
        assert_eq!(g.tensors.class_bytes("norms"), 4096 * 4);
        assert_eq!(g.header_bytes, h.len() as u64);
    }

    #[test]
    fn split_metadata_is_kept() {
        let h = build_split_header("llama", &[("a.weight", &[32, 2], 8)], Some((1, 3, 7)));
        let g = parse_header(&h).unwrap();
        assert_eq!(g.number(SPLIT_NO).unwrap(), 1);
        assert_eq!(g.number(SPLIT_COUNT).unwrap(), 3);
        assert_eq!(g.number(SPLIT_TENSORS_COUNT).unwrap(), 7);
        assert_eq!(g.tensors.total.tensors, 1);
    }

    #[test]
    fn truncation_and_garbage_are_errors() {
        let h = build_header("llama", &[("a.weight", &[32, 2], 8)]);
        for cut in 0..h.len() {
            assert!(parse_header(&h[..cut]).is_err(), "cut at {cut}");
        }
        assert!(
            parse_header(b"GGML\x03\0\0\0")
                .unwrap_err()
                .to_string()
                .contains("magic")
        );
        let mut v1 = h.clone();
        v1[4] = 1;
        assert!(
            parse_header(&v1)
                .unwrap_err()
                .to_string()
                .contains("version 1")
        );
        let mut bad_type = h.clone();
        let at = h.len() - 12;
        bad_type[at] = 99;
        assert!(
            parse_header(&bad_type)
                .unwrap_err()
                .to_string()
                .contains("unknown ggml type")
        );
    }
}
