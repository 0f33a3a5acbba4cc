//! The multimodal projector `llama-server --mmproj FILE` loads beside the model (a
//! LLaVA-style `mmproj-*.gguf`: a CLIP or SigLIP vision encoder and its projector),
//! through llama.cpp's `libmtmd`.
//!
//! Read in ggml-org/llama.cpp, `tools/mtmd/clip.cpp` at commit
//! 3679b65db16ebaabba95a893c62eb6c4840e832c:
//! - `clip_ctx::clip_ctx`: with `use_gpu` the encoder's backend is the first GPU device
//!   (`ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_GPU)`), otherwise the CPU;
//!   llama-server sets `use_gpu` from `--mmproj-offload` (on by default,
//!   `--no-mmproj-offload` clears it: `tools/server/server-context.cpp` `load_model`,
//!   `mparams.use_gpu = params_base.mmproj_use_gpu`).
//! - `clip_model_loader::load_tensors`: each tensor the projector asks for is created in
//!   one context and allocated in one buffer of that backend's default type
//!   (`ggml_backend_alloc_ctx_tensors_from_buft`), `ggml_nbytes` each — the bytes the
//!   file header gives. A tensor of the file the projector does not ask for is not
//!   loaded, so every tensor of the header is at least what is loaded.
//! - `clip_model_loader::load_hparams`: the warm-up image is `warmup_image_size` ×
//!   `warmup_image_size`, `clip.vision.image_size` by default (Pixtral, Qwen2-VL and
//!   Qwen2.5-VL warm up at `patch_size × 8`, smaller).
//! - `clip_model_loader::alloc_compute_meta`: the graph of one warm-up image is built and
//!   `ggml_backend_sched_reserve`d; each backend's compute buffer is what that graph
//!   needs at its peak (logged as "compute buffer size").
//!
//! The compute buffer is a bound (assumed), from the encoder's tensors of the warm-up
//! image, f32: `n_pos` = (image ÷ patch)² patches + 1 class embedding; one layer's
//! attention holds the scores of every head, `heads × n_pos²` (the softmax reuses them
//! in place: `ggml/src/ggml-alloc.c` `ggml_op_can_inplace` lists `GGML_OP_SOFT_MAX`,
//! commit 5bc7a7409fc39d2801b3eeddc9e22fdd4bda718d), beside ten `n_pos × hidden`
//! tensors (the residual, the normed input, Q, K and V and their permuted copies, the
//! attention's output and its merge); its MLP holds `2 × n_pos × ffn` beside two; the
//! image itself (3 channels) and the patch convolution's `im2col` come on top. Flash
//! attention (llama-server's `--flash-attn auto` passes to the encoder) never
//! materialises the scores, so with it the buffer is smaller than this bound. Checked
//! against a published log: LLaVA-1.5/1.6's `mmproj-model-f16.gguf` (CLIP ViT-L/14 at
//! 336 px) logged a compute buffer of 32.89 MB (https://github.com/ollama/ollama/issues/2706); the bound
//! gives 45.4 MiB. Gemma 3's projector (SigLIP at 896 px, 4096 patches) measured 1132
//! MiB without flash attention and 121 MiB with it (https://github.com/gpustack/gguf-parser-go/issues/44,
//! llama.cpp's own `[mtmd]` report); the bound gives 1223 MiB.

use super::super::arith::{prod, sum};
use crate::error::EstimateError;
use crate::import::gguf::GgufHeader;

/// The key of the engine flag.
pub(super) const KEY: &str = "mmproj";

/// What the budget needs of an mmproj file: its tensors' bytes and the vision
/// encoder's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projector {
    /// Every tensor of the file, `ggml_nbytes` each.
    pub bytes: u64,
    /// Its tensors.
    pub tensors: u64,
    /// `clip.projector_type` (`mlp` when absent: LLaVA's files predate the key).
    pub projector: String,
    /// `clip.vision.image_size`.
    pub image_size: u64,
    /// `clip.vision.patch_size`.
    pub patch_size: u64,
    /// `clip.vision.embedding_length`.
    pub hidden: u64,
    /// `clip.vision.feed_forward_length`.
    pub ffn: u64,
    /// `clip.vision.attention.head_count`.
    pub heads: u64,
    /// `clip.vision.block_count`.
    pub layers: u64,
}

/// The pairs' keys, in the order they are written, with the header key each comes from.
const KEYS: [(&str, &str); 8] = [
    ("bytes", "the tensors' bytes"),
    ("tensors", "the tensor count"),
    ("image-size", "clip.vision.image_size"),
    ("patch-size", "clip.vision.patch_size"),
    ("hidden", "clip.vision.embedding_length"),
    ("ffn", "clip.vision.feed_forward_length"),
    ("heads", "clip.vision.attention.head_count"),
    ("layers", "clip.vision.block_count"),
];

/// The projector types whose warm-up image is `clip.vision.image_size`, the size every
/// image is resized to (LLaVA's `mlp` and `mlp_norm`, MobileVLM's `ldp` and `ldpv2`,
/// Gemma 3's `gemma3`). Dynamic-resolution projectors (Qwen2/2.5/3-VL's mergers,
/// Pixtral, …) set their warm-up image by their own rule, which has changed between
/// releases, and a larger image re-reserves a larger buffer when it is encoded
/// (ggml-org/llama.cpp pull request 17695): their compute buffer is not bounded here,
/// so they are refused rather than answered low.
pub const FIXED_RESOLUTION: [&str; 5] = ["mlp", "mlp_norm", "ldp", "ldpv2", "gemma3"];

/// Longest projector type kept (llama.cpp's names are a word or two).
const MAX_PROJECTOR_NAME: usize = 64;
/// Largest image side taken (llama.cpp caps its dynamic-resolution encoders far below).
const MAX_IMAGE_SIDE: u64 = 1 << 16;

fn bad(why: String) -> EstimateError {
    EstimateError::invalid(KEY, why)
}

impl Projector {
    /// The projector of an mmproj file's header: `general.architecture` `clip` with a
    /// vision encoder (`clip.vision.*`).
    pub fn from_header(h: &GgufHeader) -> Result<Projector, EstimateError> {
        if h.architecture.as_deref() != Some("clip") {
            return Err(bad(format!(
                "general.architecture is {:?}, not \"clip\": not an mmproj file",
                h.architecture.as_deref().unwrap_or("absent")
            )));
        }
        // An audio encoder beside (clip.audio.*) loads into a context of its own with its
        // own warm-up (clip.cpp clip_init): not modelled.
        if h.number("clip.audio.block_count").is_some() {
            return Err(bad(
                "the file also holds an audio encoder (clip.audio.*), whose compute buffer is not modelled".into(),
            ));
        }
        let get = |k: &str| {
            h.number(&format!("clip.vision.{k}")).ok_or_else(|| {
                bad(format!(
                    "clip.vision.{k} is absent: no vision encoder (an audio-only projector is not modelled)"
                ))
            })
        };
        let p = Projector {
            bytes: h.tensors.total.bytes,
            tensors: h.tensors.total.tensors,
            projector: h
                .projector_type
                .clone()
                .unwrap_or_else(|| "mlp".to_string()),
            image_size: get("image_size")?,
            patch_size: get("patch_size")?,
            hidden: get("embedding_length")?,
            ffn: get("feed_forward_length")?,
            heads: get("attention.head_count")?,
            layers: get("block_count")?,
        };
        p.check()?;
        Ok(p)
    }

    /// The value of the `mmproj` key: `key=value` pairs separated by commas (what the
    /// agent writes from the file's header, and the page's URL keeps).
    pub fn to_text(&self) -> String {
        let values = [
            self.bytes,
            self.tensors,
            self.image_size,
            self.patch_size,
            self.hidden,
            self.ffn,
            self.heads,
            self.layers,
        ];
        let mut out: Vec<String> = KEYS
            .iter()
            .zip(values)
            .map(|((k, _), v)| format!("{k}={v}"))
            .collect();
        out.push(format!("projector={}", self.projector));
        out.join(",")
    }

    /// Reads [`Projector::to_text`]'s pairs back, every key required.
    pub fn parse(text: &str) -> Result<Projector, EstimateError> {
        let mut values = [None::<u64>; 8];
        let mut projector = None;
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                bad(format!(
                    "{part:?}: give the mmproj file (the agent reads its header) or its key=value pairs (bytes=…,image-size=…,…)"
                ))
            })?;
            let (k, v) = (k.trim(), v.trim());
            if k == "projector" {
                if v.is_empty()
                    || v.len() > MAX_PROJECTOR_NAME
                    || !v
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
                {
                    return Err(bad(format!("projector {v:?} is not a projector type")));
                }
                projector = Some(v.to_string());
                continue;
            }
            let Some(i) = KEYS.iter().position(|(key, _)| *key == k) else {
                return Err(bad(format!(
                    "unknown key {k:?} (bytes, tensors, image-size, patch-size, hidden, ffn, heads, layers, projector)"
                )));
            };
            let n = crate::params::parse_count(KEY, v)?;
            if let Some(slot) = values.get_mut(i) {
                *slot = Some(n);
            }
        }
        let mut got = [0u64; 8];
        for (i, ((k, from), v)) in KEYS.iter().zip(values).enumerate() {
            let v = v.ok_or_else(|| bad(format!("{k} ({from}) is missing")))?;
            if let Some(slot) = got.get_mut(i) {
                *slot = v;
            }
        }
        let [bytes, tensors, image_size, patch_size, hidden, ffn, heads, layers] = got;
        let p = Projector {
            bytes,
            tensors,
            projector: projector.unwrap_or_else(|| "mlp".to_string()),
            image_size,
            patch_size,
            hidden,
            ffn,
            heads,
            layers,
        };
        p.check()?;
        Ok(p)
    }

    /// The bounds every figure keeps, so that the products below cannot overflow
    /// silently (they are checked anyway).
    fn check(&self) -> Result<(), EstimateError> {
        if !FIXED_RESOLUTION.contains(&self.projector.as_str()) {
            return Err(bad(format!(
                "the {} projector warms up at an image size of its own rule (dynamic resolution, clip.cpp load_hparams) and re-reserves for larger images: its encoder's compute buffer is not bounded here, so it is not answered (fixed-resolution projectors are: {})",
                self.projector,
                FIXED_RESOLUTION.join(", ")
            )));
        }
        if self.patch_size == 0 || self.heads == 0 || self.hidden == 0 {
            return Err(bad("patch-size, heads and hidden must be at least 1".into()));
        }
        if self.image_size < self.patch_size || self.image_size > MAX_IMAGE_SIDE {
            return Err(bad(format!(
                "image-size {} must hold one patch of {} and be at most {MAX_IMAGE_SIDE}",
                self.image_size, self.patch_size
            )));
        }
        for (k, v) in [
            ("hidden", self.hidden),
            ("ffn", self.ffn),
            ("heads", self.heads),
            ("layers", self.layers),
        ] {
            if v > crate::arch::MAX_DIM {
                return Err(bad(format!("{k} {v} is absurdly large")));
            }
        }
        Ok(())
    }

    /// The patches of the warm-up image (`clip.vision.image_size` square).
    pub fn patches(&self) -> Result<u64, EstimateError> {
        let side = self.image_size.checked_div(self.patch_size).unwrap_or(0);
        prod(&[side, side])
    }

    /// The vision encoder's compute buffer for the warm-up image: the bound of the
    /// module's documentation, and its formula in words.
    pub fn compute_bound(&self) -> Result<(u64, String), EstimateError> {
        let patches = self.patches()?;
        let pos = sum(&[patches, 1])?;
        let attention = sum(&[
            prod(&[self.heads, pos, pos, 4])?,
            prod(&[10, pos, self.hidden, 4])?,
        ])?;
        let mlp = sum(&[
            prod(&[2, pos, self.ffn, 4])?,
            prod(&[2, pos, self.hidden, 4])?,
        ])?;
        let inputs = sum(&[
            prod(&[3, self.image_size, self.image_size, 4])?,
            prod(&[patches, self.patch_size, self.patch_size, 3, 4])?,
        ])?;
        let bytes = sum(&[attention.max(mlp), inputs])?;
        let s = self.image_size;
        Ok((
            bytes,
            format!(
                "{s}×{s} warm-up image, n_pos {pos}: max(attention {heads} × n_pos² + 10 n_pos × {hidden}, MLP 2 n_pos × {ffn} + 2 n_pos × {hidden}) × 4 B + the image and its im2col; without flash attention's saving",
                heads = self.heads,
                hidden = self.hidden,
                ffn = self.ffn
            ),
        ))
    }

    /// The tokens one image takes in the context, where the projector's rule is known,
    /// and that rule in words: `clip_n_output_tokens` (clip.cpp) — every patch for
    /// LLaVA's `mlp` and `mlp_norm`, a quarter for MobileVLM's `ldp` and `ldpv2`, the
    /// patches pooled by 4 per side for `gemma3` (its default
    /// `proj_scale_factor`; only test models set `clip.vision.projector.scale_factor`).
    pub fn image_tokens(&self) -> Option<(u64, &'static str)> {
        let patches = self.patches().ok()?;
        let side = self.image_size.checked_div(self.patch_size)?;
        match self.projector.as_str() {
            "mlp" | "mlp_norm" => Some((patches, "one token per patch")),
            "ldp" | "ldpv2" => Some((patches / 4, "one token per 4 patches")),
            "gemma3" => {
                let pooled = side / 4;
                Some((pooled.saturating_mul(pooled), "the patches pooled by 4 per side"))
            }
            _ => None,
        }
    }
}

/// LLaVA-1.5-7B's `mmproj-model-f16.gguf` header as llama.cpp's converter writes it:
/// CLIP ViT-L/14-336 less its last layer (23 of 24), no post-norm, and the two-layer MLP
/// projector 1024 → 4096 → 4096; weights f16 (type 1), biases, norms and the class
/// embedding f32 (type 0); `with_type`: with `clip.projector_type` (older files lack
/// it) — for tests and fixtures.
#[allow(clippy::arithmetic_side_effects)]
pub fn llava_15_header(with_type: bool) -> Vec<u8> {
    use crate::import::gguf::{PROJECTOR_TYPE, build_header_strings};
    let mut names: Vec<(String, Vec<u64>, u32)> = vec![
        ("v.class_embd".into(), vec![1024], 0),
        ("v.patch_embd.weight".into(), vec![14, 14, 3, 1024], 1),
        ("v.position_embd.weight".into(), vec![1024, 577], 1),
        ("v.pre_ln.weight".into(), vec![1024], 0),
        ("v.pre_ln.bias".into(), vec![1024], 0),
        ("mm.0.weight".into(), vec![1024, 4096], 1),
        ("mm.0.bias".into(), vec![4096], 0),
        ("mm.2.weight".into(), vec![4096, 4096], 1),
        ("mm.2.bias".into(), vec![4096], 0),
    ];
    for il in 0..23 {
        for t in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            names.push((format!("v.blk.{il}.{t}.weight"), vec![1024, 1024], 1));
            names.push((format!("v.blk.{il}.{t}.bias"), vec![1024], 0));
        }
        for t in ["ln1", "ln2"] {
            names.push((format!("v.blk.{il}.{t}.weight"), vec![1024], 0));
            names.push((format!("v.blk.{il}.{t}.bias"), vec![1024], 0));
        }
        names.push((format!("v.blk.{il}.ffn_up.weight"), vec![1024, 4096], 1));
        names.push((format!("v.blk.{il}.ffn_up.bias"), vec![4096], 0));
        names.push((format!("v.blk.{il}.ffn_down.weight"), vec![4096, 1024], 1));
        names.push((format!("v.blk.{il}.ffn_down.bias"), vec![1024], 0));
    }
    let list: Vec<(&str, &[u64], u32)> = names
        .iter()
        .map(|(n, d, t)| (n.as_str(), d.as_slice(), *t))
        .collect();
    let strings: &[(&str, &str)] = if with_type {
        &[(PROJECTOR_TYPE, "mlp")]
    } else {
        &[]
    };
    build_header_strings(
        "clip",
        strings,
        &[
            ("vision.image_size", 336),
            ("vision.patch_size", 14),
            ("vision.embedding_length", 1024),
            ("vision.feed_forward_length", 4096),
            ("vision.attention.head_count", 16),
            ("vision.block_count", 23),
            ("vision.projection_dim", 768),
        ],
        &list,
        None,
    )
}


#[cfg(test)]
mod tests {
    #![allow(clippy::arithmetic_side_effects)]

    use super::*;
    use crate::import::gguf::{build_header_strings, parse_header};

    /// The header's tensors give the size llama.cpp logs for this file: 377 tensors
    /// (235 f32, 142 f16), "model size: 595.49 MB" (MiB: clip.cpp divides by 1024²;
    /// https://github.com/ollama/ollama/issues/2706 and
    /// https://github.com/janhq/jan/issues/2391 list the same 377 tensors).
    #[test]
    fn the_llava_projector_is_counted_from_its_header() {
        let p = Projector::from_header(&parse_header(&llava_15_header(true)).unwrap()).unwrap();
        assert_eq!(p.tensors, 377);
        // 23 layers × (6 f16 matrices, 10 f32 vectors) + embeddings, pre-norm, projector.
        let layer = 4 * 1024 * 1024 * 2 + 2 * 1024 * 4096 * 2 + (9 * 1024 + 4096) * 4;
        let rest = 14 * 14 * 3 * 1024 * 2
            + 1024 * 577 * 2
            + 3 * 1024 * 4
            + 1024 * 4096 * 2
            + 4096 * 4096 * 2
            + 2 * 4096 * 4;
        assert_eq!(p.bytes, 23 * layer + rest);
        assert_eq!(p.bytes, 624_412_672);
        // 595.49 MiB, as logged.
        assert_eq!(p.bytes * 100 / (1 << 20), 59_548);
        assert_eq!(p.projector, "mlp");
        assert_eq!(p.patches().unwrap(), 576);
        assert_eq!(p.image_tokens().map(|t| t.0), Some(576));
        // The legacy file without clip.projector_type reads as LLaVA's mlp.
        let q = Projector::from_header(&parse_header(&llava_15_header(false)).unwrap()).unwrap();
        assert_eq!(q, p);
        // Written and read back as the key's value.
        assert_eq!(Projector::parse(&p.to_text()).unwrap(), p);
    }

    /// The bound for ViT-L/14 at 336 px: 577 positions, 16 heads; above the 32.89 MB
    /// llama.cpp logged for it (https://github.com/ollama/ollama/issues/2706), as a bound must be.
    #[test]
    fn the_encoder_compute_bound_is_above_the_logged_buffer() {
        let p = Projector::from_header(&parse_header(&llava_15_header(true)).unwrap()).unwrap();
        let (bytes, formula) = p.compute_bound().unwrap();
        let attention = 16 * 577 * 577 * 4 + 10 * 577 * 1024 * 4;
        let inputs = 3 * 336 * 336 * 4 + 576 * 14 * 14 * 3 * 4;
        assert_eq!(bytes, attention + inputs);
        assert!(bytes > 3289 * (1 << 20) / 100, "{bytes}");
        assert!(formula.contains("n_pos 577"), "{formula}");
    }

    /// Gemma 3's projector (SigLIP so400m at 896 px, patch 14: 4096 patches, 16 heads,
    /// hidden 1152, MLP 4304, 27 layers): above the 1132 MiB measured without flash
    /// attention (https://github.com/gpustack/gguf-parser-go/issues/44).
    #[test]
    fn the_gemma3_bound_is_above_the_measured_buffer() {
        let p = Projector::parse(
            "bytes=1,tensors=1,image-size=896,patch-size=14,hidden=1152,ffn=4304,heads=16,layers=27,projector=gemma3",
        )
        .unwrap();
        let (bytes, _) = p.compute_bound().unwrap();
        assert_eq!(
            bytes,
            16 * 4097 * 4097 * 4 + 10 * 4097 * 1152 * 4 + 2 * 3 * 896 * 896 * 4
        );
        assert!(bytes > 1132 << 20, "{bytes}");
        assert_eq!(bytes >> 20, 1222);
        // 64 patches a side pooled by 4: 256 tokens an image (vLLM's Gemma 3 figure too).
        assert_eq!(p.image_tokens().map(|t| t.0), Some(256));
    }

    #[test]
    fn bad_values_and_files_are_refused() {
        for text in [
            "",
            "bytes=1",
            "bytes=1,tensors=1,image-size=336,patch-size=0,hidden=1,ffn=1,heads=1,layers=1",
            "bytes=1,tensors=1,image-size=10,patch-size=14,hidden=1,ffn=1,heads=1,layers=1",
            "bytes=1,tensors=1,image-size=336,patch-size=14,hidden=1,ffn=1,heads=1,layers=1,size=3",
            "bytes=-1,tensors=1,image-size=336,patch-size=14,hidden=1,ffn=1,heads=1,layers=1",
            "bytes=1,tensors=1,image-size=336,patch-size=14,hidden=1,ffn=1,heads=1,layers=1,projector=a b",
            "./mmproj.gguf",
            "bytes=1,tensors=1,image-size=336,patch-size=14,hidden=1,ffn=1,heads=1,layers=1,projector=qwen2.5vl_merger",
        ] {
            let e = Projector::parse(text).unwrap_err();
            assert!(e.to_string().starts_with("mmproj"), "{text}: {e}");
        }
        // The vision projector's own key wins over the general one; an audio encoder
        // beside is refused.
        let both = build_header_strings(
            "clip",
            &[
                ("clip.projector_type", "mlp"),
                ("clip.vision.projector_type", "qwen2.5vl_merger"),
            ],
            &[("vision.image_size", 336), ("vision.patch_size", 14)],
            &[("v.patch_embd.weight", &[14, 14, 3, 1024], 1)],
            None,
        );
        let h = parse_header(&both).unwrap();
        assert_eq!(h.projector_type.as_deref(), Some("qwen2.5vl_merger"));
        let audio = build_header_strings(
            "clip",
            &[],
            &[
                ("vision.image_size", 336),
                ("vision.patch_size", 14),
                ("vision.embedding_length", 1024),
                ("vision.feed_forward_length", 4096),
                ("vision.attention.head_count", 16),
                ("vision.block_count", 23),
                ("audio.block_count", 32),
            ],
            &[("v.patch_embd.weight", &[14, 14, 3, 1024], 1)],
            None,
        );
        let e = Projector::from_header(&parse_header(&audio).unwrap()).unwrap_err();
        assert!(e.to_string().contains("audio encoder"), "{e}");
        // A model file, not a projector.
        let h = parse_header(&crate::import::gguf::build_header(
            "llama",
            &[("blk.0.attn_q.weight", &[32, 32], 0)],
        ))
        .unwrap();
        assert!(Projector::from_header(&h).is_err());
    }
}
