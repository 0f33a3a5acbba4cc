//! Storage formats of weights, with the bytes each one really takes.
//!
//! "4-bit = parameters / 2" is what method §2 warns against: every quantised
//! format stores scales, zero-points or indices beside the packed values. Each
//! format here counts those from the layout its reference implementation writes:
//!
//! - **fp8** per-tensor: e4m3 values + one fp32 `weight_scale` per tensor
//!   (vLLM / llm-compressor "FP8" checkpoints); 128×128 blocks: one fp32
//!   `weight_scale_inv` per 128×128 tile (DeepSeek-V3 checkpoint layout).
//! - **int8**: bitsandbytes LLM.int8(): int8 `CB` [out, in] + fp32 `SCB` [out]
//!   (one scale per output channel).
//! - **GPTQ** (AutoGPTQ/GPTQModel): `qweight` int32 [in·bits/32, out], `qzeros`
//!   int32 [in/g, out·bits/32], `scales` fp16 [in/g, out], `g_idx` int32 [in].
//!   At in = out = 4096, 4-bit, g = 128: 4 + 1/32 + 1/8 + 1/128 ≈ 4.164 bits/weight.
//! - **AWQ** (AutoAWQ GEMM): `qweight` int32 [in, out·bits/32], `qzeros` int32
//!   [in/g, out·bits/32], `scales` fp16 [in/g, out]: ≈ 4.156 bits/weight at g = 128.
//! - **bitsandbytes NF4/FP4**: 4-bit codes packed two per byte, fp32 `absmax` per
//!   block of 64, a 16-entry fp32 `quant_map`: 4.5 bits/weight. With double
//!   quantisation the absmax becomes uint8 per block of 64, plus fp32
//!   `nested_absmax` per 256 blocks and a 256-entry fp32 `nested_quant_map`:
//!   ≈ 4.127 bits/weight. (bitsandbytes also saves a small packed-JSON tensor per
//!   weight whose length varies; it is not counted here, but an imported
//!   safetensors header counts it exactly.)
//! - **GGUF** block types: bytes per block from ggml's `block_*` structs
//!   (ggml-common.h): Q4_0 18 B / 32, Q4_K 144 B / 256 (4.5 bits), Q5_K 176 B / 256,
//!   Q6_K 210 B / 256 (6.5625 bits), Q8_0 34 B / 32 (8.5 bits), and the rest in
//!   [`GgufType`].
//! - **MXFP4** (OCP microscaling; gpt-oss `*_blocks` u8 [.., in/32, 16] + `*_scales`
//!   u8 [.., in/32]): 16 B of E2M1 pairs + one E8M0 scale byte per 32 values, 4.25
//!   bits/weight; ggml's `block_mxfp4` (ggml-common.h) is the same 17 B per 32.
//! - **NVFP4** (compressed-tensors `nvfp4-pack-quantized`, ModelOpt NVFP4): E2M1
//!   packed two per byte, one FP8 E4M3 scale per 16 values, and two fp32 per-tensor
//!   scales (`weight_global_scale` + `input_global_scale`): 4.5 bits/weight + 8 B;
//!   `nvfp4a16` (weights only) stores no input scale: + 4 B.
//! - **compressed-tensors FP8 per channel** (`fp8-channel`, llm-compressor's
//!   FP8_DYNAMIC): e4m3 values + a 16-bit `weight_scale` [out, 1] (the scale keeps the
//!   original dtype).
//! - **compressed-tensors W4A16** (`w4a16-g128`, `pack-quantized`): `weight_packed`
//!   int32 [out, ⌈in/8⌉], 16-bit `weight_scale` [out, ⌈in/g⌉], `weight_shape` int32
//!   [2] (compressed_tensors/compressors/quantized_compressors/pack_quantized.py);
//!   symmetric, so no zero-point.

// Checked arithmetic only: every dimension here comes from user input.
#![deny(clippy::arithmetic_side_effects)]

use serde::{Deserialize, Serialize};

use crate::error::EstimateError;
use crate::units::checked_product;

mod mix;
pub use mix::{FileType, MixModel, MixTensor, TensorCategory, use_more_bits};

/// A numeric type used for computing, activations, gradients or the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// IEEE single precision, 4 bytes.
    F32,
    /// bfloat16, 2 bytes.
    Bf16,
    /// IEEE half precision, 2 bytes.
    F16,
    /// 8-bit floating point (e4m3 / e5m2), 1 byte.
    Fp8,
}

impl Dtype {
    /// Bytes per value.
    pub const fn bytes(self) -> u64 {
        match self {
            Dtype::F32 => 4,
            Dtype::Bf16 | Dtype::F16 => 2,
            Dtype::Fp8 => 1,
        }
    }

    /// The canonical name (also accepted by [`Dtype::parse`]).
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "fp32",
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "fp16",
            Dtype::Fp8 => "fp8",
        }
    }

    /// Parses `fp32|f32|float32`, `bf16|bfloat16`, `fp16|f16|float16`, `fp8`.
    pub fn parse(field: &'static str, text: &str) -> Result<Dtype, EstimateError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "fp32" | "f32" | "float32" | "float" => Ok(Dtype::F32),
            "bf16" | "bfloat16" => Ok(Dtype::Bf16),
            "fp16" | "f16" | "float16" | "half" => Ok(Dtype::F16),
            "fp8" | "f8" | "float8" | "fp8_e4m3" | "fp8_e5m2" => Ok(Dtype::Fp8),
            other => Err(EstimateError::invalid(
                field,
                format!("unknown dtype {other:?}; use fp32, bf16, fp16 or fp8"),
            )),
        }
    }
}

/// Where an fp8 checkpoint keeps its scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fp8Scales {
    /// One fp32 scale for the whole tensor.
    PerTensor,
    /// One fp32 scale per 128×128 tile.
    Block128,
}

/// bitsandbytes 4-bit code book.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bnb4 {
    /// NormalFloat-4.
    Nf4,
    /// 4-bit float.
    Fp4,
}

/// ggml tensor types that can appear in a GGUF file, with their block layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)] // The variant names are ggml's own.
pub enum GgufType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    Iq2Xxs,
    Iq2Xs,
    Iq3Xxs,
    Iq1S,
    Iq4Nl,
    Iq3S,
    Iq2S,
    Iq4Xs,
    I8,
    I16,
    I32,
    I64,
    F64,
    Iq1M,
    Bf16,
    Tq1_0,
    Tq2_0,
    Mxfp4,
}

impl GgufType {
    /// The type for a ggml type id (`enum ggml_type` in ggml.h), if known.
    pub const fn from_id(id: u32) -> Option<GgufType> {
        use GgufType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2K,
            11 => Q3K,
            12 => Q4K,
            13 => Q5K,
            14 => Q6K,
            15 => Q8K,
            16 => Iq2Xxs,
            17 => Iq2Xs,
            18 => Iq3Xxs,
            19 => Iq1S,
            20 => Iq4Nl,
            21 => Iq3S,
            22 => Iq2S,
            23 => Iq4Xs,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => Iq1M,
            30 => Bf16,
            34 => Tq1_0,
            35 => Tq2_0,
            39 => Mxfp4,
            _ => return None,
        })
    }

    /// (elements per block, bytes per block), from the `block_*` structs of ggml-common.h.
    pub const fn block(self) -> (u64, u64) {
        use GgufType::*;
        match self {
            F32 | I32 => (1, 4),
            F16 | Bf16 | I16 => (1, 2),
            I8 => (1, 1),
            I64 | F64 => (1, 8),
            Q4_0 => (32, 18),  // fp16 d + 16 B of nibbles
            Q4_1 => (32, 20),  // fp16 d, m + 16 B
            Q5_0 => (32, 22),  // fp16 d + 4 B high bits + 16 B
            Q5_1 => (32, 24),  // fp16 d, m + 4 B + 16 B
            Q8_0 => (32, 34),  // fp16 d + 32 B
            Q8_1 => (32, 36),  // fp16 d, s + 32 B
            Q2K => (256, 84),  // scales[16] + qs[64] + fp16 d, dmin
            Q3K => (256, 110), // hmask[32] + qs[64] + scales[12] + fp16 d
            Q4K => (256, 144), // fp16 d, dmin + scales[12] + qs[128]
            Q5K => (256, 176), // fp16 d, dmin + scales[12] + qh[32] + qs[128]
            Q6K => (256, 210), // ql[128] + qh[64] + scales[16] + fp16 d
            Q8K => (256, 292), // f32 d + qs[256] + i16 bsums[16]
            Iq2Xxs => (256, 66),
            Iq2Xs => (256, 74),
            Iq3Xxs => (256, 98),
            Iq1S => (256, 50),
            Iq4Nl => (32, 18),
            Iq3S => (256, 110),
            Iq2S => (256, 82),
            Iq4Xs => (256, 136),
            Iq1M => (256, 56),
            Tq1_0 => (256, 54),
            Tq2_0 => (256, 66),
            Mxfp4 => (32, 17), // e8m0 scale + 16 B
        }
    }

    /// ggml's name for the type ("Q4_K", "F16", …).
    pub const fn name(self) -> &'static str {
        use GgufType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2K => "Q2_K",
            Q3K => "Q3_K",
            Q4K => "Q4_K",
            Q5K => "Q5_K",
            Q6K => "Q6_K",
            Q8K => "Q8_K",
            Iq2Xxs => "IQ2_XXS",
            Iq2Xs => "IQ2_XS",
            Iq3Xxs => "IQ3_XXS",
            Iq1S => "IQ1_S",
            Iq4Nl => "IQ4_NL",
            Iq3S => "IQ3_S",
            Iq2S => "IQ2_S",
            Iq4Xs => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            Iq1M => "IQ1_M",
            Bf16 => "BF16",
            Tq1_0 => "TQ1_0",
            Tq2_0 => "TQ2_0",
            Mxfp4 => "MXFP4",
        }
    }

    /// The type llama.cpp's quantiser falls back to when a row's length is not a
    /// multiple of this type's block (llama-quant.cpp's `tensor_type_fallback`,
    /// ggml-org/llama.cpp 007dbbf3fd17eefe9b47fee45f48f7ba5e62b714), F16 when that
    /// does not fit either.
    const fn fallback(self) -> GgufType {
        use GgufType::*;
        match self {
            Iq2Xxs | Iq2Xs | Iq2S | Iq3Xxs | Iq3S | Iq1S | Iq1M | Iq4Xs => Iq4Nl,
            Q2K | Q3K | Tq1_0 | Tq2_0 => Q4_0,
            Q4K => Q5_0,
            Q5K => Q5_1,
            Q6K => Q8_0,
            _ => F16,
        }
    }
}

/// How a weight tensor is stored in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StorageFormat {
    /// A plain dense type.
    Dense {
        /// The element type.
        dtype: Dtype,
    },
    /// fp8 values with fp32 scales.
    Fp8 {
        /// Scale granularity.
        scales: Fp8Scales,
    },
    /// bitsandbytes LLM.int8().
    Int8,
    /// GPTQ packed integers.
    Gptq {
        /// 2, 3, 4 or 8.
        bits: u8,
        /// Group size along the input dimension.
        group: u32,
        /// Whether the `g_idx` permutation tensor is stored.
        g_idx: bool,
    },
    /// AWQ packed integers (GEMM layout).
    Awq {
        /// Always 4 in AutoAWQ.
        bits: u8,
        /// Group size along the input dimension.
        group: u32,
    },
    /// bitsandbytes 4-bit.
    Bnb4 {
        /// NF4 or FP4 code book.
        code: Bnb4,
        /// Double quantisation of the absmax.
        double_quant: bool,
    },
    /// OCP MXFP4: E2M1 values + an E8M0 scale per 32.
    Mxfp4,
    /// NVIDIA NVFP4: E2M1 values + an FP8 scale per 16 + an fp32 per-tensor weight
    /// scale, and an fp32 input scale when activations are FP4 too (W4A4).
    Nvfp4 {
        /// Activations quantised too (`input_global_scale` stored); false for NVFP4A16.
        w4a4: bool,
    },
    /// compressed-tensors FP8 with one 16-bit scale per output channel.
    Fp8Channel,
    /// compressed-tensors W4A16 `pack-quantized`, symmetric, one 16-bit scale per group.
    W4a16 {
        /// Group size along the input dimension.
        group: u32,
    },
    /// MLX's affine quantisation (`mx.quantize`, mode "affine"; mlx-lm's checkpoints):
    /// `bits` per value packed in uint32 words, a scale and a bias per group of the
    /// input dimension in the model's 16-bit dtype.
    Mlx {
        /// 2, 3, 4, 5, 6 or 8.
        bits: u8,
        /// 32, 64 or 128.
        group: u32,
    },
    /// A GGUF/ggml block type, or a llama.cpp file type mixing several.
    Gguf {
        /// The ggml type (a file type's main type, `llama_ftype_get_default_type`).
        ty: GgufType,
        /// The llama.cpp file type (`Q4_K_M`, …) whose rules pick each tensor's type
        /// around `ty`; none for one type throughout.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mix: Option<FileType>,
    },
}

/// The byte count of one stored tensor, with any warning about how it was counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorBytes {
    /// Bytes, scales and indices included.
    pub bytes: u64,
    /// Set when a format had to fall back (e.g. GGUF row not a multiple of the block).
    pub note: Option<String>,
}

impl StorageFormat {
    /// bf16, the usual format of 16-bit checkpoints.
    pub const BF16: StorageFormat = StorageFormat::Dense { dtype: Dtype::Bf16 };

    /// The llama.cpp file type whose rules type each tensor, if any.
    pub const fn file_type(self) -> Option<FileType> {
        match self {
            StorageFormat::Gguf { mix, .. } => mix,
            _ => None,
        }
    }

    /// True for any format other than a plain dense type.
    pub const fn is_quantised(self) -> bool {
        !matches!(self, StorageFormat::Dense { .. })
    }

    /// Parses the names the CLI and the URL use: `fp32`, `bf16`, `fp16`, `fp8`,
    /// `fp8-block`, `int8`, `gptq-4-g128` (`-nogidx` to drop `g_idx`),
    /// `awq-4-g128`, `nf4`, `nf4-dq`, `fp4`, `fp4-dq`, and GGUF types such as
    /// `q4_k`, `q6_k`, `q8_0`, `iq4_xs` in any case, and llama.cpp's file types
    /// (`Q4_K_M`, `Q5_K_S`, `Q3_K_L`, `Q2_K`, …) as the mix of types they write.
    pub fn parse(field: &'static str, text: &str) -> Result<StorageFormat, EstimateError> {
        let t = text.trim().to_ascii_lowercase();
        let bad = |why: &str| EstimateError::invalid(field, format!("{text:?}: {why}"));
        match t.as_str() {
            "fp8" | "fp8-tensor" => {
                return Ok(StorageFormat::Fp8 {
                    scales: Fp8Scales::PerTensor,
                });
            }
            "fp8-block" | "fp8-block128" => {
                return Ok(StorageFormat::Fp8 {
                    scales: Fp8Scales::Block128,
                });
            }
            "int8" | "llm-int8" => return Ok(StorageFormat::Int8),
            "mxfp4" => return Ok(StorageFormat::Mxfp4),
            "nvfp4" => return Ok(StorageFormat::Nvfp4 { w4a4: true }),
            "nvfp4a16" => return Ok(StorageFormat::Nvfp4 { w4a4: false }),
            "fp8-channel" | "fp8-dynamic" => return Ok(StorageFormat::Fp8Channel),
            "nf4" => {
                return Ok(StorageFormat::Bnb4 {
                    code: Bnb4::Nf4,
                    double_quant: false,
                });
            }
            "nf4-dq" => {
                return Ok(StorageFormat::Bnb4 {
                    code: Bnb4::Nf4,
                    double_quant: true,
                });
            }
            "fp4" => {
                return Ok(StorageFormat::Bnb4 {
                    code: Bnb4::Fp4,
                    double_quant: false,
                });
            }
            "fp4-dq" => {
                return Ok(StorageFormat::Bnb4 {
                    code: Bnb4::Fp4,
                    double_quant: true,
                });
            }
            _ => {}
        }
        if let Ok(dtype) = Dtype::parse(field, &t)
            && dtype != Dtype::Fp8
        {
            return Ok(StorageFormat::Dense { dtype });
        }
        if let Some(rest) = t.strip_prefix("gptq-").or_else(|| t.strip_prefix("awq-")) {
            let awq = t.starts_with("awq-");
            let (rest, g_idx) = match rest.strip_suffix("-nogidx") {
                Some(r) => (r, false),
                None => (rest, !awq),
            };
            let (bits, group) = rest
                .split_once("-g")
                .ok_or_else(|| bad("expected e.g. gptq-4-g128 or awq-4-g128"))?;
            let bits: u8 = bits
                .parse()
                .map_err(|_| bad("the bit width is not a number"))?;
            let group: u32 = group
                .parse()
                .map_err(|_| bad("the group size is not a number"))?;
            if group == 0 || group > 1 << 20 {
                return Err(bad("the group size must be between 1 and 1048576"));
            }
            return if awq {
                if bits != 4 {
                    return Err(bad("AWQ stores 4-bit weights only"));
                }
                Ok(StorageFormat::Awq { bits, group })
            } else {
                if !matches!(bits, 2 | 3 | 4 | 8) {
                    return Err(bad("GPTQ bit widths are 2, 3, 4 or 8"));
                }
                Ok(StorageFormat::Gptq { bits, group, g_idx })
            };
        }
        if let Some(rest) = t.strip_prefix("mlx-") {
            // ml-explore/mlx 846d17622 `mlx/ops.cpp` `affine_quantize`: group sizes 32,
            // 64 and 128; bits 2, 3, 4, 5, 6 and 8.
            let (bits, group) = rest
                .split_once("-g")
                .ok_or_else(|| bad("expected e.g. mlx-4-g64"))?;
            let bits: u8 = bits
                .parse()
                .map_err(|_| bad("the bit width is not a number"))?;
            let group: u32 = group
                .parse()
                .map_err(|_| bad("the group size is not a number"))?;
            if !matches!(bits, 2..=6 | 8) {
                return Err(bad("MLX's affine bit widths are 2, 3, 4, 5, 6 or 8"));
            }
            if !matches!(group, 32 | 64 | 128) {
                return Err(bad("MLX's affine group sizes are 32, 64 or 128"));
            }
            return Ok(StorageFormat::Mlx { bits, group });
        }
        if let Some(g) = t.strip_prefix("w4a16-g") {
            let group: u32 = g
                .parse()
                .map_err(|_| bad("the group size is not a number"))?;
            if group == 0 || group > 1 << 20 {
                return Err(bad("the group size must be between 1 and 1048576"));
            }
            return Ok(StorageFormat::W4a16 { group });
        }
        // llama.cpp's file types (Q4_K_M is Q4_K with some tensors in Q6_K): each
        // tensor in the type llama-quant.cpp picks for it (format/mix.rs).
        if let Some(&ft) = FileType::ALL.iter().find(|f| f.name() == t) {
            return Ok(StorageFormat::Gguf {
                ty: ft.main(),
                mix: Some(ft),
            });
        }
        let upper = t.to_ascii_uppercase();
        for id in 0..64 {
            if let Some(ty) = GgufType::from_id(id)
                && ty.name() == upper
                && !matches!(ty, GgufType::F32 | GgufType::F16 | GgufType::Bf16)
            {
                return Ok(StorageFormat::Gguf { ty, mix: None });
            }
        }
        Err(bad(
            "unknown format; use fp32, bf16, fp16, fp8, fp8-block, int8, gptq-4-g128, awq-4-g128, mlx-4-g64, nf4, nf4-dq, fp4, q4_0, q4_k, q5_k, q6_k, q8_0 …",
        ))
    }

    /// The canonical name, which [`StorageFormat::parse`] reads back.
    pub fn name(self) -> String {
        match self {
            StorageFormat::Dense { dtype } => dtype.name().to_string(),
            StorageFormat::Fp8 {
                scales: Fp8Scales::PerTensor,
            } => "fp8".into(),
            StorageFormat::Fp8 {
                scales: Fp8Scales::Block128,
            } => "fp8-block".into(),
            StorageFormat::Int8 => "int8".into(),
            StorageFormat::Gptq { bits, group, g_idx } => {
                format!("gptq-{bits}-g{group}{}", if g_idx { "" } else { "-nogidx" })
            }
            StorageFormat::Awq { bits, group } => format!("awq-{bits}-g{group}"),
            StorageFormat::Bnb4 { code, double_quant } => format!(
                "{}{}",
                if code == Bnb4::Nf4 { "nf4" } else { "fp4" },
                if double_quant { "-dq" } else { "" }
            ),
            StorageFormat::Mxfp4 => "mxfp4".into(),
            StorageFormat::Nvfp4 { w4a4 } => if w4a4 { "nvfp4" } else { "nvfp4a16" }.into(),
            StorageFormat::Fp8Channel => "fp8-channel".into(),
            StorageFormat::W4a16 { group } => format!("w4a16-g{group}"),
            StorageFormat::Mlx { bits, group } => format!("mlx-{bits}-g{group}"),
            StorageFormat::Gguf { mix: Some(ft), .. } => ft.name().into(),
            StorageFormat::Gguf { ty, mix: None } => ty.name().to_ascii_lowercase(),
        }
    }

    /// Bytes of a 1-D tensor (norm weights, biases) of `n` elements. Quantised
    /// formats keep 1-D tensors in 16 bits in every implementation named above, so
    /// they count 2 bytes per element here.
    pub fn vector_bytes(self, n: u64) -> Result<u64, EstimateError> {
        let per = match self {
            StorageFormat::Dense { dtype } => dtype.bytes(),
            _ => 2,
        };
        checked_product(&[n, per], "vector bytes")
    }

    /// Bytes of a linear weight with `out` rows and `inp` columns (PyTorch's
    /// `[out_features, in_features]`), every scale, zero-point and index included.
    pub fn matrix_bytes(self, out: u64, inp: u64) -> Result<TensorBytes, EstimateError> {
        let n = checked_product(&[out, inp], "matrix elements")?;
        let plain = |bytes: u64| Ok(TensorBytes { bytes, note: None });
        let sum = |parts: &[u64]| -> Result<u64, EstimateError> {
            parts
                .iter()
                .try_fold(0u64, |a, &b| a.checked_add(b))
                .ok_or(EstimateError::Overflow {
                    what: "matrix bytes",
                })
        };
        match self {
            StorageFormat::Dense { dtype } => {
                plain(checked_product(&[n, dtype.bytes()], "matrix bytes")?)
            }
            StorageFormat::Fp8 {
                scales: Fp8Scales::PerTensor,
            } => plain(sum(&[n, 4])?),
            StorageFormat::Fp8 {
                scales: Fp8Scales::Block128,
            } => {
                let tiles = checked_product(
                    &[out.div_ceil(128), inp.div_ceil(128), 4],
                    "fp8 block scales",
                )?;
                plain(sum(&[n, tiles])?)
            }
            StorageFormat::Int8 => plain(sum(&[n, checked_product(&[out, 4], "int8 scales")?])?),
            StorageFormat::Gptq { bits, group, g_idx } => {
                let b = u64::from(bits);
                let groups = inp.div_ceil(u64::from(group));
                let qweight = checked_product(
                    &[
                        checked_product(&[inp, b], "GPTQ qweight")?.div_ceil(32),
                        out,
                        4,
                    ],
                    "GPTQ qweight",
                )?;
                let qzeros = checked_product(
                    &[
                        groups,
                        checked_product(&[out, b], "GPTQ qzeros")?.div_ceil(32),
                        4,
                    ],
                    "GPTQ qzeros",
                )?;
                let scales = checked_product(&[groups, out, 2], "GPTQ scales")?;
                let gidx = if g_idx {
                    checked_product(&[inp, 4], "GPTQ g_idx")?
                } else {
                    0
                };
                plain(sum(&[qweight, qzeros, scales, gidx])?)
            }
            StorageFormat::Awq { bits, group } => {
                let b = u64::from(bits);
                let groups = inp.div_ceil(u64::from(group));
                let packed_cols = checked_product(&[out, b], "AWQ qweight")?.div_ceil(32);
                let qweight = checked_product(&[inp, packed_cols, 4], "AWQ qweight")?;
                let qzeros = checked_product(&[groups, packed_cols, 4], "AWQ qzeros")?;
                let scales = checked_product(&[groups, out, 2], "AWQ scales")?;
                plain(sum(&[qweight, qzeros, scales])?)
            }
            StorageFormat::Bnb4 { double_quant, .. } => {
                let packed = n.div_ceil(2);
                let blocks = n.div_ceil(64);
                let quant_map = 16 * 4;
                if double_quant {
                    let nested_absmax =
                        checked_product(&[blocks.div_ceil(256), 4], "nested absmax")?;
                    let nested_quant_map = 256 * 4;
                    plain(sum(&[
                        packed,
                        blocks,
                        quant_map,
                        nested_absmax,
                        nested_quant_map,
                    ])?)
                } else {
                    plain(sum(&[
                        packed,
                        checked_product(&[blocks, 4], "bnb absmax")?,
                        quant_map,
                    ])?)
                }
            }
            StorageFormat::Mxfp4 => plain(checked_product(
                &[out, inp.div_ceil(32), 17],
                "MXFP4 blocks and scales",
            )?),
            StorageFormat::Nvfp4 { w4a4 } => {
                let packed = checked_product(&[out, inp.div_ceil(2)], "NVFP4 values")?;
                let scales = checked_product(&[out, inp.div_ceil(16)], "NVFP4 scales")?;
                plain(sum(&[packed, scales, if w4a4 { 8 } else { 4 }])?)
            }
            StorageFormat::Fp8Channel => {
                plain(sum(&[n, checked_product(&[out, 2], "fp8 scales")?])?)
            }
            StorageFormat::W4a16 { group } => {
                let packed = checked_product(&[out, inp.div_ceil(8), 4], "W4A16 weight_packed")?;
                let scales = checked_product(
                    &[out, inp.div_ceil(u64::from(group)), 2],
                    "W4A16 weight_scale",
                )?;
                plain(sum(&[packed, scales, 8])?)
            }
            StorageFormat::Mlx { bits, group } => mlx_matrix_bytes(bits, group, out, inp),
            // A file type's tensors outside an architecture: its main type.
            StorageFormat::Gguf { ty, .. } => gguf_matrix_bytes(ty, out, inp),
        }
    }
}

/// Bytes of an MLX affine-quantised matrix (ml-explore/mlx 846d17622 `mlx/ops.cpp`
/// `affine_quantize`): the packed weight `[out, inp × bits ÷ 32]` in uint32 and the
/// scales and biases `[out, inp ÷ group]` in the weight's dtype (16 bits in mlx-lm's
/// checkpoints). mlx-lm quantises a layer only when its input dimension is a multiple
/// of the group (ml-explore/mlx-lm d78bf58e `mlx_lm/utils.py` `quantize_model`,
/// `wrapped_predicate`): any other stays in 16 bits, said in the note.
fn mlx_matrix_bytes(
    bits: u8,
    group: u32,
    out: u64,
    inp: u64,
) -> Result<TensorBytes, EstimateError> {
    let group = u64::from(group);
    if group == 0 || !inp.is_multiple_of(group) {
        return Ok(TensorBytes {
            bytes: checked_product(&[out, inp, 2], "matrix bytes")?,
            note: Some(format!(
                "rows of {inp} are not a multiple of MLX's group of {group}: mlx-lm leaves the layer unquantised (16 bits)"
            )),
        });
    }
    // inp is a multiple of the group (≥ 32), so inp × bits is a multiple of 32.
    let words = checked_product(&[inp, u64::from(bits)], "MLX packed weight")?.div_ceil(32);
    let packed = checked_product(&[out, words, 4], "MLX packed weight")?;
    let scales_biases = checked_product(
        &[out, inp.checked_div(group).unwrap_or(0), 2, 2],
        "MLX scales and biases",
    )?;
    let bytes = packed
        .checked_add(scales_biases)
        .ok_or(EstimateError::Overflow {
            what: "matrix bytes",
        })?;
    Ok(TensorBytes { bytes, note: None })
}

/// Bytes of a ggml tensor whose rows (length `inp`) are quantised block by block;
/// falls back as llama.cpp does when `inp` is not a multiple of the block.
fn gguf_matrix_bytes(ty: GgufType, out: u64, inp: u64) -> Result<TensorBytes, EstimateError> {
    let mut used = ty;
    let mut note = None;
    while !inp.is_multiple_of(used.block().0) {
        let next = used.fallback();
        note = Some(format!(
            "rows of {inp} are not a multiple of {}'s block of {}: counted as {} as llama.cpp's quantiser does",
            ty.name(),
            ty.block().0,
            next.name()
        ));
        used = next;
    }
    let (per_block, block_bytes) = used.block();
    // Every block type has a non-zero row block.
    let blocks = inp.checked_div(per_block).unwrap_or(0);
    let bytes = checked_product(&[out, blocks, block_bytes], "GGUF tensor bytes")?;
    Ok(TensorBytes { bytes, note })
}

// Test arithmetic on known small numbers.
#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    fn bits_per_weight_x1000(f: &str, out: u64, inp: u64) -> u64 {
        let fmt = StorageFormat::parse("format", f).unwrap();
        let b = fmt.matrix_bytes(out, inp).unwrap().bytes;
        (b * 8 * 1000 + out * inp / 2) / (out * inp)
    }

    #[test]
    fn reference_bits_per_weight() {
        assert_eq!(bits_per_weight_x1000("gptq-4-g128", 4096, 4096), 4164);
        assert_eq!(bits_per_weight_x1000("awq-4-g128", 4096, 4096), 4156);
        assert_eq!(bits_per_weight_x1000("nf4", 4096, 4096), 4500);
        assert_eq!(bits_per_weight_x1000("nf4-dq", 4096, 4096), 4127);
        assert_eq!(bits_per_weight_x1000("q4_k", 4096, 4096), 4500);
        assert_eq!(bits_per_weight_x1000("q6_k", 4096, 4096), 6563);
        assert_eq!(bits_per_weight_x1000("q8_0", 4096, 4096), 8500);
        assert_eq!(bits_per_weight_x1000("q4_0", 4096, 4096), 4500);
        assert_eq!(bits_per_weight_x1000("q5_k", 4096, 4096), 5500);
        assert_eq!(bits_per_weight_x1000("mxfp4", 4096, 4096), 4250);
        assert_eq!(bits_per_weight_x1000("nvfp4", 4096, 4096), 4500);
        assert_eq!(bits_per_weight_x1000("w4a16-g128", 4096, 4096), 4125);
        // MLX affine: bits + 2 × 16 ÷ group (mlx-lm prints 4.5 for 4 bits, group 64).
        assert_eq!(bits_per_weight_x1000("mlx-4-g64", 4096, 4096), 4500);
        assert_eq!(bits_per_weight_x1000("mlx-8-g64", 4096, 4096), 8500);
        assert_eq!(bits_per_weight_x1000("mlx-3-g32", 4096, 4096), 4000);
        assert_eq!(bits_per_weight_x1000("mlx-6-g128", 4096, 4096), 6250);
    }

    #[test]
    fn mlx_affine_bytes_by_hand() {
        // Llama-3.1-8B's gate_proj [14336, 4096] at 4 bits, group 64: 14336 rows of
        // 4096 × 4 ÷ 32 = 512 uint32 words (2048 B), and 4096 ÷ 64 = 64 fp16 scales and
        // 64 biases (256 B): 14336 × 2304 = 33 030 144 B.
        let f = StorageFormat::parse("format", "mlx-4-g64").unwrap();
        let t = f.matrix_bytes(14336, 4096).unwrap();
        assert_eq!(t.bytes, 33_030_144);
        assert!(t.note.is_none());
        // A row not a multiple of the group stays in 16 bits, said.
        let odd = f.matrix_bytes(10, 100).unwrap();
        assert_eq!(odd.bytes, 2000);
        assert!(odd.note.is_some());
        for bad in ["mlx-7-g64", "mlx-4-g16", "mlx-4", "mlx-x-g64"] {
            assert!(StorageFormat::parse("format", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_round_trip() {
        for name in [
            "fp32",
            "bf16",
            "fp16",
            "fp8",
            "fp8-block",
            "int8",
            "gptq-4-g128",
            "gptq-3-g64-nogidx",
            "awq-4-g128",
            "nf4",
            "nf4-dq",
            "fp4",
            "fp4-dq",
            "q4_0",
            "q4_k",
            "q5_k",
            "q6_k",
            "q8_0",
            "iq4_xs",
            "mxfp4",
            "nvfp4",
            "nvfp4a16",
            "fp8-channel",
            "w4a16-g128",
            "mlx-4-g64",
            "mlx-8-g32",
        ] {
            let f = StorageFormat::parse("format", name).unwrap();
            assert_eq!(f.name(), name);
        }
    }

    #[test]
    fn llama_cpp_file_types_read_in_any_case_and_print_as_typed() {
        for (name, main, typed) in [
            ("Q4_K_M", GgufType::Q4K, "q4_k_m"),
            ("q4_k_s", GgufType::Q4K, "q4_k_s"),
            ("Q5_K_M", GgufType::Q5K, "q5_k_m"),
            ("Q3_K_L", GgufType::Q3K, "q3_k_l"),
            ("Q2_K", GgufType::Q2K, "q2_k"),
            ("Q8_0", GgufType::Q8_0, "q8_0"),
            ("q6_k", GgufType::Q6K, "q6_k"),
            ("Q4_0", GgufType::Q4_0, "q4_0"),
        ] {
            let f = StorageFormat::parse("format", name).unwrap();
            assert_eq!(f.name(), typed, "{name}");
            assert!(matches!(f, StorageFormat::Gguf { ty, mix: Some(_) } if ty == main));
            assert_eq!(StorageFormat::parse("format", &f.name()).unwrap(), f);
        }
        for (name, want) in [("IQ4_XS", "iq4_xs"), ("Q4_K", "q4_k"), ("q3_k", "q3_k")] {
            let f = StorageFormat::parse("format", name).unwrap();
            assert_eq!((f.name().as_str(), f.file_type()), (want, None), "{name}");
        }
        assert!(StorageFormat::parse("format", "Q8_0_M").is_err());
        assert!(StorageFormat::parse("format", "q4_k_xl").is_err());
    }

    #[test]
    fn bad_names_are_refused_with_a_reason() {
        for bad in [
            "",
            "gptq-5-g128",
            "awq-8-g128",
            "gptq-4-g0",
            "gptq-x",
            "q9_k",
        ] {
            let err = StorageFormat::parse("format", bad).unwrap_err();
            assert!(err.to_string().starts_with("format: "), "{err}");
        }
    }

    #[test]
    fn gguf_falls_back_when_rows_do_not_fit_the_block() {
        let f = StorageFormat::Gguf {
            ty: GgufType::Q4K,
            mix: None,
        };
        let t = f.matrix_bytes(896, 896).unwrap();
        // 896 is not a multiple of 256: Q5_0 (22 B per 32) as llama.cpp does.
        assert_eq!(t.bytes, 896 * (896 / 32) * 22);
        assert!(t.note.unwrap().contains("Q5_0"));
    }
}
