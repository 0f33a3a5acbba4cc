//! llama.cpp's file types: the mix of ggml types `llama-quantize` writes.
//!
//! A file type such as `Q4_K_M` is not one block type: llama.cpp's quantiser
//! picks each tensor's type from its role, its layer and the model's shape. The
//! rules here are those of `src/llama-quant.cpp` at ggml-org/llama.cpp commit
//! 007dbbf3fd17eefe9b47fee45f48f7ba5e62b714:
//!
//! - `llama_ftype_get_default_type`: the file type's main type (Q4_K for Q4_K_S and
//!   Q4_K_M, Q3_K for Q3_K_S/M/L, Q2_K for Q2_K and Q2_K_S, Q5_K for Q5_K_S/M);
//! - `llama_tensor_get_type_impl`: the per-tensor overrides, for `output.weight`
//!   (and `token_embd.weight` when tied to it), the attn_v-like tensors
//!   (`attn_v`, `attn_qkv`, `attn_kv_b`, counted by `i_attention_wv`),
//!   `attn_k`, `ffn_down` (by layer), `attn_output`; its `use_more_bits`, the
//!   70B rule (`LLM_TYPE_70B`) and the 8-expert rules;
//! - `tensor_type_fallback`: the type used when a row is not a multiple of the
//!   chosen type's block ([`super::GgufType`]'s fallback).
//!
//! Only what an architecture describes is known here: Falcon's own branches
//! (`LLM_ARCH_FALCON`) are not modelled, nor is an importance matrix (it changes
//! no K-quant file type's choice; with one, Q4_0 and Q5_0 files put the first
//! eighth of `ffn_down` in Q4_1 / Q5_1, counted here as without), and `--pure`, `--output-tensor-type`,
//! `--token-embedding-type` and `--tensor-type` overrides are not either.

use serde::{Deserialize, Serialize};

use super::GgufType;

/// A llama.cpp file type (`enum llama_ftype`, `LLAMA_FTYPE_MOSTLY_*`) whose tensors
/// mix several ggml types (Q8_0 and Q6_K files are one type throughout, token
/// embeddings and output included; Q4_0, Q4_1, Q5_0 and Q5_1 files write the output
/// in Q6_K).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // The variant names are llama.cpp's own.
pub enum FileType {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q6K,
    Q2K,
    Q2KS,
    Q3KS,
    Q3KM,
    Q3KL,
    Q4KS,
    Q4KM,
    Q5KS,
    Q5KM,
}

/// The tensor categories of llama-quant.cpp's `tensor_get_category`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorCategory {
    /// `token_embd.weight`.
    TokenEmbd,
    /// `output.weight` (lm_head).
    Output,
    /// `attn_q.weight`.
    AttnQ,
    /// `attn_k.weight`.
    AttnK,
    /// `attn_v.weight`, `attn_qkv.weight` or `attn_kv_b.weight` (`category_is_attn_v`).
    AttnVLike,
    /// `attn_output.weight`.
    AttnOutput,
    /// `ffn_up*` (experts and shared experts included).
    FfnUp,
    /// `ffn_gate*`.
    FfnGate,
    /// `ffn_down*`.
    FfnDown,
    /// Anything else: the main type.
    Other,
}

/// What llama.cpp's quantiser knows of the model when it picks a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MixModel {
    /// `hparams.n_gqa()`: query heads per KV head.
    pub n_gqa: u64,
    /// `hparams.n_expert` (0 for a dense model).
    pub n_expert: u64,
    /// `model.type == LLM_TYPE_70B` (llama-model.cpp: 80 layers and fewer KV heads
    /// than query heads for Llama).
    pub is_70b: bool,
    /// No `output.weight`: the token embeddings are quantised as the output.
    pub tied: bool,
}

/// One tensor to type: its category, its index among its kind (`i_attention_wv` for
/// the attn_v-like tensors, the block for `ffn_down`) out of `n`, and its row length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MixTensor {
    /// The category.
    pub category: TensorCategory,
    /// Index (layer) of the tensor.
    pub index: u64,
    /// How many of them (`n_attention_wv`, `n_layer`).
    pub count: u64,
    /// Row length (`ne[0]`, the input features).
    pub cols: u64,
}

/// llama-quant.cpp's `use_more_bits`: the first and last eighth of the layers, and
/// every third layer in between.
pub const fn use_more_bits(i: u64, n: u64) -> bool {
    let eighth = n / 8;
    // i ≥ n/8 in the third term, so the C++'s signed difference is not negative.
    i < eighth || i >= n.saturating_mul(7) / 8 || i.saturating_sub(eighth) % 3 == 2
}

impl FileType {
    /// Every file type, for parsing and listing.
    pub const ALL: [FileType; 15] = [
        FileType::Q4_0,
        FileType::Q4_1,
        FileType::Q5_0,
        FileType::Q5_1,
        FileType::Q8_0,
        FileType::Q6K,
        FileType::Q2K,
        FileType::Q2KS,
        FileType::Q3KS,
        FileType::Q3KM,
        FileType::Q3KL,
        FileType::Q4KS,
        FileType::Q4KM,
        FileType::Q5KS,
        FileType::Q5KM,
    ];

    /// llama.cpp's name (`llama-quantize`'s argument), lower-case.
    pub const fn name(self) -> &'static str {
        match self {
            FileType::Q4_0 => "q4_0",
            FileType::Q4_1 => "q4_1",
            FileType::Q5_0 => "q5_0",
            FileType::Q5_1 => "q5_1",
            FileType::Q8_0 => "q8_0",
            FileType::Q6K => "q6_k",
            FileType::Q2K => "q2_k",
            FileType::Q2KS => "q2_k_s",
            FileType::Q3KS => "q3_k_s",
            FileType::Q3KM => "q3_k_m",
            FileType::Q3KL => "q3_k_l",
            FileType::Q4KS => "q4_k_s",
            FileType::Q4KM => "q4_k_m",
            FileType::Q5KS => "q5_k_s",
            FileType::Q5KM => "q5_k_m",
        }
    }

    /// `llama_ftype_get_default_type`: the type of every tensor no rule overrides.
    pub const fn main(self) -> GgufType {
        match self {
            FileType::Q4_0 => GgufType::Q4_0,
            FileType::Q4_1 => GgufType::Q4_1,
            FileType::Q5_0 => GgufType::Q5_0,
            FileType::Q5_1 => GgufType::Q5_1,
            FileType::Q8_0 => GgufType::Q8_0,
            FileType::Q6K => GgufType::Q6K,
            FileType::Q2K | FileType::Q2KS => GgufType::Q2K,
            FileType::Q3KS | FileType::Q3KM | FileType::Q3KL => GgufType::Q3K,
            FileType::Q4KS | FileType::Q4KM => GgufType::Q4K,
            FileType::Q5KS | FileType::Q5KM => GgufType::Q5K,
        }
    }

    /// The type `llama_tensor_get_type_impl` picks for `t`, before
    /// `tensor_type_fallback` (which [`super::StorageFormat::matrix_bytes`] applies).
    pub fn tensor_type(self, t: MixTensor, m: MixModel) -> GgufType {
        use FileType::*;
        use GgufType::{Q3K, Q4K, Q5K, Q6K, Q8_0};
        use TensorCategory::*;
        let main = self.main();
        let (i, n) = (t.index, t.count);
        let more = use_more_bits(i, n);
        match t.category {
            // "for arches that share the same tensor between the token embeddings and
            // the output, we quantize the token embeddings with the quantization of
            // the output tensor"
            Output => output_type(main, t.cols),
            TokenEmbd if m.tied => output_type(main, t.cols),
            // No K-quant file type overrides untied token embeddings.
            TokenEmbd => main,
            AttnVLike => {
                let mut ty = match self {
                    Q2K if m.n_gqa >= 4 => Q4K,
                    Q2K => Q3K,
                    Q2KS if m.n_gqa >= 4 => Q4K,
                    Q3KM if i < 2 => Q5K,
                    Q3KM => Q4K,
                    Q3KL => Q5K,
                    Q4KM | Q5KM if more => Q6K,
                    Q4KS if i < 4 => Q5K,
                    _ => main,
                };
                // "In the 70B model we have 8 heads sharing the same attn_v weights"
                if m.is_70b && matches!(ty, Q3K | Q4K) {
                    ty = Q5K;
                }
                if m.n_expert == 8 {
                    ty = Q8_0;
                }
                ty
            }
            AttnK if m.n_expert == 8 => Q8_0,
            FfnDown => match self {
                Q2K => Q3K,
                Q2KS if i < n / 8 => Q4K,
                // Not Falcon: `arch != LLM_ARCH_FALCON || use_more_bits` is true.
                Q3KM if i < n / 16 => Q5K,
                Q3KM => Q4K,
                Q3KL => Q5K,
                Q4KM | Q5KM if more => Q6K,
                Q4KS if i < n / 8 => Q5K,
                _ => main,
            },
            AttnOutput if m.n_expert == 8 => match self {
                Q2K | Q3KS | Q3KM | Q4KS | Q4KM => Q5K,
                _ => main,
            },
            AttnOutput => match self {
                Q2K => Q3K,
                Q3KM => Q4K,
                Q3KL => Q5K,
                _ => main,
            },
            _ => main,
        }
    }
}

/// `output.weight`: Q8_0 when its rows do not fit the main type's block, else Q6_K
/// (unless the main type is Q8_0).
fn output_type(main: GgufType, cols: u64) -> GgufType {
    let block = main.block().0;
    if block == 0 || !cols.is_multiple_of(block) {
        GgufType::Q8_0
    } else if main == GgufType::Q8_0 {
        main
    } else {
        GgufType::Q6K
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::arch::{Architecture, ModuleFormats, ParamClass, WeightBreakdown};
    use crate::format::StorageFormat;

    fn llama_3_1_8b() -> Architecture {
        crate::import::config::parse_config(include_str!(
            "../../tests/cases/configs/llama-3.1-8b.json"
        ))
        .expect("config")
        .arch
    }

    fn weights(a: &Architecture, format: &str) -> WeightBreakdown {
        let f = StorageFormat::parse("format", format).expect("format");
        a.weights(&ModuleFormats {
            linear: f,
            attention: f,
            vocab: f,
            kept: StorageFormat::BF16,
            experts: None,
        })
        .expect("weights")
    }

    /// Bytes of `n` tensors [rows, cols] of a 256-wide K-quant block of `b` bytes.
    fn k(n: u64, rows: u64, cols: u64, b: u64) -> u64 {
        n * rows * (cols / 256) * b
    }

    const Q2: u64 = 84;
    const Q3: u64 = 110;
    const Q4: u64 = 144;
    const Q5: u64 = 176;
    const Q6: u64 = 210;

    /// Llama-3.1-8B (vocab 128256, hidden 4096, 32 layers, 32 heads of 128, 8 KV
    /// heads so n_gqa = 4, MLP 14336, untied): embeddings, attention, MLP, lm_head
    /// for each file type, by llama-quant.cpp's rules. use_more_bits picks 16 of the
    /// 32 layers for attn_v and ffn_down (0-3, 6, 9, …, 27, 28-31); i < n/8 is layers
    /// 0-3, i < n/16 layers 0-1, i_attention_wv < 2 and < 4 the first 2 and 4.
    #[test]
    fn each_file_type_on_llama_3_1_8b_counts_the_types_llama_cpp_picks() {
        let a = llama_3_1_8b();
        let (v, h, kv, i) = (128_256, 4096, 1024, 14_336);
        // attention = 32 × (q + o) [4096, 4096] and 32 × k [1024, 4096] in `main`,
        // plus the v_proj and o_proj the rules move; MLP = 64 gate/up + 32 down.
        let qk = |b| k(64, h, h, b) + k(32, kv, h, b);
        let gate_up = |b| k(64, i, h, b);
        let cases: [(&str, [u64; 4]); 9] = [
            // Q2_K: attn_v Q4_K (n_gqa ≥ 4), ffn_down Q3_K, attn_output Q3_K.
            (
                "q2_k",
                [
                    k(1, v, h, Q2),
                    k(32, h, h, Q2) + k(32, kv, h, Q2) + k(32, kv, h, Q4) + k(32, h, h, Q3),
                    gate_up(Q2) + k(32, h, i, Q3),
                    k(1, v, h, Q6),
                ],
            ),
            // Q2_K_S: attn_v Q4_K (n_gqa ≥ 4), ffn_down Q4_K in layers 0-3.
            (
                "q2_k_s",
                [
                    k(1, v, h, Q2),
                    qk(Q2) + k(32, kv, h, Q4),
                    gate_up(Q2) + k(4, h, i, Q4) + k(28, h, i, Q2),
                    k(1, v, h, Q6),
                ],
            ),
            // Q3_K_S: only the output moves.
            (
                "q3_k_s",
                [
                    k(1, v, h, Q3),
                    qk(Q3) + k(32, kv, h, Q3),
                    gate_up(Q3) + k(32, h, i, Q3),
                    k(1, v, h, Q6),
                ],
            ),
            // Q3_K_M: attn_v Q5_K in the first 2, else Q4_K; attn_output Q4_K;
            // ffn_down Q5_K in layers 0-1, else Q4_K.
            (
                "q3_k_m",
                [
                    k(1, v, h, Q3),
                    k(32, h, h, Q3)
                        + k(32, kv, h, Q3)
                        + k(2, kv, h, Q5)
                        + k(30, kv, h, Q4)
                        + k(32, h, h, Q4),
                    gate_up(Q3) + k(2, h, i, Q5) + k(30, h, i, Q4),
                    k(1, v, h, Q6),
                ],
            ),
            // Q3_K_L: attn_v, attn_output and ffn_down Q5_K.
            (
                "q3_k_l",
                [
                    k(1, v, h, Q3),
                    k(32, h, h, Q3) + k(32, kv, h, Q3) + k(32, kv, h, Q5) + k(32, h, h, Q5),
                    gate_up(Q3) + k(32, h, i, Q5),
                    k(1, v, h, Q6),
                ],
            ),
            // Q4_K_S: attn_v Q5_K in the first 4, ffn_down Q5_K in layers 0-3.
            (
                "q4_k_s",
                [
                    k(1, v, h, Q4),
                    qk(Q4) + k(4, kv, h, Q5) + k(28, kv, h, Q4),
                    gate_up(Q4) + k(4, h, i, Q5) + k(28, h, i, Q4),
                    k(1, v, h, Q6),
                ],
            ),
            // Q4_K_M: attn_v and ffn_down Q6_K where use_more_bits.
            (
                "q4_k_m",
                [
                    k(1, v, h, Q4),
                    qk(Q4) + k(16, kv, h, Q6) + k(16, kv, h, Q4),
                    gate_up(Q4) + k(16, h, i, Q6) + k(16, h, i, Q4),
                    k(1, v, h, Q6),
                ],
            ),
            // Q5_K_S: only the output moves.
            (
                "q5_k_s",
                [
                    k(1, v, h, Q5),
                    qk(Q5) + k(32, kv, h, Q5),
                    gate_up(Q5) + k(32, h, i, Q5),
                    k(1, v, h, Q6),
                ],
            ),
            // Q5_K_M: attn_v and ffn_down Q6_K where use_more_bits.
            (
                "q5_k_m",
                [
                    k(1, v, h, Q5),
                    qk(Q5) + k(16, kv, h, Q6) + k(16, kv, h, Q5),
                    gate_up(Q5) + k(16, h, i, Q6) + k(16, h, i, Q5),
                    k(1, v, h, Q6),
                ],
            ),
        ];
        let totals = [
            3_170_230_272,
            2_979_913_728,
            3_655_598_080,
            4_010_016_768,
            4_313_055_232,
            4_683_767_808,
            4_911_833_088,
            5_590_392_832,
            5_724_086_272,
        ];
        for ((name, want), total) in cases.into_iter().zip(totals) {
            let w = weights(&a, name);
            let got = [
                ParamClass::Embeddings,
                ParamClass::Attention,
                ParamClass::Mlp,
                ParamClass::LmHead,
            ]
            .map(|c| w.class_bytes(c));
            assert_eq!(got, want, "{name}");
            assert_eq!(got.iter().sum::<u64>(), total, "{name}");
            assert!(w.notes.is_empty(), "{name}: {:?}", w.notes);
            for c in &w.classes {
                if c.class != ParamClass::Norms {
                    assert_eq!(c.formats, name, "the format as typed");
                }
            }
        }
    }

    /// The one-type file types quantise the embeddings and the output too: Q8_0 and
    /// Q6_K in their own type, Q4_0 … Q5_1 with the output in Q6_K.
    #[test]
    fn one_type_file_types_on_llama_3_1_8b() {
        let a = llama_3_1_8b();
        let n = 128_256 * 4096;
        let linear = 1_342_177_280 + 5_637_144_576; // attention + MLP parameters
        for (name, per, bytes, out) in [
            ("q8_0", 32, 34, n / 32 * 34),
            ("q6_k", 256, 210, n / 256 * 210),
            ("q4_0", 32, 18, n / 256 * 210),
            ("q5_1", 32, 24, n / 256 * 210),
        ] {
            let w = weights(&a, name);
            let got = [
                ParamClass::Embeddings,
                ParamClass::Attention,
                ParamClass::Mlp,
                ParamClass::LmHead,
            ]
            .map(|c| w.class_bytes(c));
            assert_eq!(got[0], n / per * bytes, "{name}");
            assert_eq!(got[1] + got[2], linear / per * bytes, "{name}");
            assert_eq!(got[3], out, "{name}");
        }
    }

    /// bartowski's Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf, as llama.cpp's loader
    /// lists it (quoted in github.com/mozilla-ai/llamafile/issues/516): "type f32: 66
    /// tensors, type q4_K: 193 tensors, type q6_K: 33 tensors". The f32 ones are the
    /// norms and rope_freqs, counted apart.
    #[test]
    fn q4_k_m_on_llama_3_1_8b_has_the_tensor_types_of_the_published_file() {
        let w = weights(&llama_3_1_8b(), "q4_k_m");
        let count = |ty: GgufType| -> u64 {
            w.classes
                .iter()
                .flat_map(|c| &c.mix)
                .filter(|(t, _)| *t == ty)
                .map(|(_, n)| n)
                .sum()
        };
        assert_eq!(count(GgufType::Q4K), 193);
        assert_eq!(count(GgufType::Q6K), 33);
        assert_eq!(w.classes.iter().flat_map(|c| &c.mix).count(), 6);
    }

    #[test]
    fn a_70b_gives_attn_v_five_bits_where_q4_k_m_would_give_four() {
        let a = crate::import::config::parse_config(include_str!(
            "../../tests/cases/configs/llama-3.1-70b.json"
        ))
        .expect("config")
        .arch;
        let m = a.mix_model();
        assert!(m.is_70b && m.n_gqa == 8);
        let v = |i| {
            FileType::Q4KM.tensor_type(
                MixTensor {
                    category: TensorCategory::AttnVLike,
                    index: i,
                    count: 80,
                    cols: 8192,
                },
                m,
            )
        };
        assert_eq!(
            (v(0), v(10), v(12)),
            (GgufType::Q6K, GgufType::Q5K, GgufType::Q6K)
        );
        let w = weights(&a, "q4_k_m");
        // 40 attn_v in Q6_K, 40 in Q5_K (not Q4_K), 1024 rows of 8192.
        let attn = w.class_bytes(ParamClass::Attention);
        let rest = k(80, 8192, 8192, Q4) * 2 + k(80, 1024, 8192, Q4);
        assert_eq!(attn, rest + k(40, 1024, 8192, Q6) + k(40, 1024, 8192, Q5));
    }

    #[test]
    fn tied_embeddings_take_the_outputs_type_and_experts_their_layers() {
        // Llama-3.2-1B ties token_embd to the output: Q6_K, no lm_head.
        let a = crate::import::config::parse_config(include_str!(
            "../../tests/cases/configs/llama-3.2-1b.json"
        ))
        .expect("config")
        .arch;
        let w = weights(&a, "q4_k_m");
        assert_eq!(
            w.class_bytes(ParamClass::Embeddings),
            k(1, 128_256, 2048, Q6)
        );
        assert_eq!(w.class_bytes(ParamClass::LmHead), 0);
        // Mixtral-8x7B: 8 experts, so attn_v and attn_k in Q8_0, attn_output Q5_K,
        // and each layer's 8 experts' ffn_down in one type by layer.
        let a = crate::import::config::parse_config(include_str!(
            "../../tests/cases/configs/mixtral-8x7b.json"
        ))
        .expect("config")
        .arch;
        let w = weights(&a, "q4_k_m");
        let tally: Vec<(GgufType, u64)> = w
            .classes
            .iter()
            .find(|c| c.class == ParamClass::Mlp)
            .map(|c| c.mix.clone())
            .unwrap_or_default();
        // gate/up: 32 × 8 × 2 in Q4_K, down: 16 layers × 8 in Q6_K, 16 × 8 in Q4_K.
        assert!(tally.contains(&(GgufType::Q6K, 128)), "{tally:?}");
        assert!(tally.contains(&(GgufType::Q4K, 512 + 128)), "{tally:?}");
        let attn = w.classes.iter().find(|c| c.class == ParamClass::Attention);
        let attn = attn.map(|c| c.mix.clone()).unwrap_or_default();
        assert!(attn.contains(&(GgufType::Q8_0, 64)), "{attn:?}");
        assert!(attn.contains(&(GgufType::Q5K, 32)), "{attn:?}");
        assert!(attn.contains(&(GgufType::Q4K, 32)), "{attn:?}");
    }

    #[test]
    fn use_more_bits_picks_the_layers_llama_cpp_picks() {
        // 32 layers (Llama-3.1-8B): 0-3, 28-31 and 6, 9, …, 27.
        let picked: Vec<u64> = (0..32).filter(|&i| use_more_bits(i, 32)).collect();
        assert_eq!(
            picked,
            [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
        // 80 layers: 0-9, 70-79 and 12, 15, …, 69.
        assert_eq!((0..80).filter(|&i| use_more_bits(i, 80)).count(), 20 + 20);
    }
}
