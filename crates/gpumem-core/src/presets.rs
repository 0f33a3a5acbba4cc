//! Presets: the published shapes of well-known open models, as `key=value` pairs
//! in the shared vocabulary of [`crate::params`] (the CLI flags without dashes).
//!
//! Every number comes from the model's Hugging Face `config.json`; each preset
//! names that file and the public copy it was checked against, so a reader can
//! verify it. Presets describe the *shape* only: the storage format, workload and
//! split stay whatever the user chose, so picking a preset never silently changes
//! them.
//!
//! A config field the architecture mode cannot express is said in the preset's
//! `note` rather than approximated in silence (e.g. Gemma 2's extra norms).

/// One model's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    /// Stable key used in the page (`?preset=` is never needed: the pairs are the state).
    pub id: &'static str,
    /// The model's name as its publisher writes it.
    pub name: &'static str,
    /// Where the numbers come from.
    pub source: &'static str,
    /// The shape as `key=value` pairs, readable by [`crate::params::from_pairs`].
    pub pairs: &'static [(&'static str, &'static str)],
    /// What the architecture mode leaves out, in words (empty when nothing).
    pub note: &'static str,
}

/// The keys a preset sets (the shape groups of [`crate::fields::FIELDS`]); picking a
/// preset clears the others of these so that no field of a previous model survives
/// (e.g. `experts`).
pub fn shape_keys() -> impl Iterator<Item = &'static str> + Clone {
    crate::fields::FIELDS
        .iter()
        .filter(|f| f.group.is_shape())
        .map(|f| f.key)
}

/// Whether `key` is one of [`shape_keys`].
pub fn is_shape_key(key: &str) -> bool {
    crate::fields::field(key).is_some_and(|f| f.group.is_shape())
}

/// Every preset, smallest family member first within a family.
pub static PRESETS: &[Preset] = &[
    Preset {
        id: "llama-3.1-8b",
        name: "Llama 3.1 8B",
        source: concat!(
            "huggingface.co/meta-llama/Llama-3.1-8B config.json ",
            "(copy: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py \"llama3_1_8b\")"
        ),
        pairs: &[
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("head-dim", "128"),
            ("intermediate", "14336"),
            ("vocab", "128256"),
            ("rope-tables", "1"),
        ],
        note: "",
    },
    Preset {
        id: "llama-3.1-70b",
        name: "Llama 3.1 70B",
        source: concat!(
            "huggingface.co/meta-llama/Llama-3.1-70B config.json ",
            "(copy: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py \"llama3_1_70b\")"
        ),
        pairs: &[
            ("layers", "80"),
            ("hidden", "8192"),
            ("heads", "64"),
            ("kv-heads", "8"),
            ("head-dim", "128"),
            ("intermediate", "28672"),
            ("vocab", "128256"),
            ("rope-tables", "1"),
        ],
        note: "",
    },
    Preset {
        id: "llama-3.2-1b",
        name: "Llama 3.2 1B",
        source: concat!(
            "huggingface.co/meta-llama/Llama-3.2-1B config.json ",
            "(copy: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py \"llama3_2_1b\")"
        ),
        pairs: &[
            ("layers", "16"),
            ("hidden", "2048"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("head-dim", "64"),
            ("intermediate", "8192"),
            ("vocab", "128256"),
            ("tied-embeddings", "true"),
            ("rope-tables", "1"),
        ],
        note: "",
    },
    Preset {
        id: "mistral-7b-v0.3",
        name: "Mistral 7B v0.3",
        source: concat!(
            "huggingface.co/mistralai/Mistral-7B-v0.3 config.json ",
            "(copy: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py \"mistral_7b_v03\"; sliding_window null)"
        ),
        pairs: &[
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("head-dim", "128"),
            ("intermediate", "14336"),
            ("vocab", "32768"),
            ("rope-tables", "1"),
        ],
        note: "",
    },
    Preset {
        id: "mixtral-8x7b",
        name: "Mixtral 8x7B v0.1",
        source: concat!(
            "huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json ",
            "(copy: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py \"Mixtral-8x7B-v0.1\")"
        ),
        pairs: &[
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "8"),
            ("head-dim", "128"),
            ("intermediate", "14336"),
            ("vocab", "32000"),
            ("experts", "8"),
            ("active-experts", "2"),
            ("expert-intermediate", "14336"),
            ("rope-tables", "1"),
        ],
        note: "",
    },
    Preset {
        id: "qwen2.5-7b",
        name: "Qwen2.5 7B",
        source: concat!(
            "huggingface.co/Qwen/Qwen2.5-7B-Instruct config.json ",
            "(hidden 3584, intermediate 18944, 28 layers, 28 heads, 4 KV heads, vocab 152064, ",
            "use_sliding_window false; copy: NVIDIA/TensorRT-LLM tests, Qwen_2_7B_CONFIG)"
        ),
        pairs: &[
            ("layers", "28"),
            ("hidden", "3584"),
            ("heads", "28"),
            ("kv-heads", "4"),
            ("head-dim", "128"),
            ("intermediate", "18944"),
            ("vocab", "152064"),
            ("qkv-bias", "true"),
            ("rope-tables", "1"),
        ],
        note: "",
    },
    Preset {
        id: "qwen2-0.5b",
        name: "Qwen2 0.5B",
        source: concat!(
            "huggingface.co/Qwen/Qwen2-0.5B config.json ",
            "(copy: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py \"qwen2_0_5b\"; ",
            "Qwen2.5-0.5B has the same shape)"
        ),
        pairs: &[
            ("layers", "24"),
            ("hidden", "896"),
            ("heads", "14"),
            ("kv-heads", "2"),
            ("head-dim", "64"),
            ("intermediate", "4864"),
            ("vocab", "151936"),
            ("tied-embeddings", "true"),
            ("qkv-bias", "true"),
            ("rope-tables", "1"),
        ],
        note: "",
    },
    Preset {
        id: "qwen3-0.6b",
        name: "Qwen3 0.6B",
        source: "huggingface.co/Qwen/Qwen3-0.6B config.json (head_dim 128, tie_word_embeddings true, transformers 4.51.0)",
        pairs: &[
            ("layers", "28"),
            ("hidden", "1024"),
            ("heads", "16"),
            ("kv-heads", "8"),
            ("head-dim", "128"),
            ("intermediate", "3072"),
            ("vocab", "151936"),
            ("tied-embeddings", "true"),
            ("qk-norm", "true"),
            ("rope-tables", "1"),
        ],
        note: "",
    },
    Preset {
        id: "qwen1.5-moe-a2.7b",
        name: "Qwen1.5-MoE-A2.7B",
        source: concat!(
            "huggingface.co/Qwen/Qwen1.5-MoE-A2.7B config.json ",
            "(copy: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py \"qwen2moe\": 60 experts, 4 per token, ",
            "moe_intermediate_size 1408, shared_expert_intermediate_size 5632)"
        ),
        pairs: &[
            ("layers", "24"),
            ("hidden", "2048"),
            ("heads", "16"),
            ("kv-heads", "16"),
            ("head-dim", "128"),
            ("intermediate", "5632"),
            ("vocab", "151936"),
            ("qkv-bias", "true"),
            ("experts", "60"),
            ("active-experts", "4"),
            ("expert-intermediate", "1408"),
            ("shared-experts", "1"),
            ("shared-intermediate", "5632"),
            ("shared-gate", "true"),
            ("router-casts", "true"),
            ("rope-tables", "1"),
        ],
        note: "",
    },
    Preset {
        id: "gemma-2-9b",
        name: "Gemma 2 9B",
        source: concat!(
            "huggingface.co/google/gemma-2-9b config.json ",
            "(copy: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py \"gemma2_9b\"; ",
            "sliding_window 4096 on every other layer, the Gemma 2 pattern)"
        ),
        pairs: &[
            ("layers", "42"),
            ("hidden", "3584"),
            ("heads", "16"),
            ("kv-heads", "8"),
            ("head-dim", "256"),
            ("intermediate", "14336"),
            ("vocab", "256000"),
            ("tied-embeddings", "true"),
            ("layer-norms", "4"),
            ("sliding-window", "4096"),
            ("sliding-layers", "21"),
            ("max-position", "8192"),
            ("rope-tables", "1"),
        ],
        note: "",
    },
    Preset {
        id: "gemma-2-27b",
        name: "Gemma 2 27B",
        source: concat!(
            "huggingface.co/google/gemma-2-27b config.json ",
            "(copy: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py \"gemma2_27b\")"
        ),
        pairs: &[
            ("layers", "46"),
            ("hidden", "4608"),
            ("heads", "32"),
            ("kv-heads", "16"),
            ("head-dim", "128"),
            ("intermediate", "36864"),
            ("vocab", "256000"),
            ("tied-embeddings", "true"),
            ("layer-norms", "4"),
            ("sliding-window", "4096"),
            ("sliding-layers", "23"),
            ("max-position", "8192"),
            ("rope-tables", "1"),
        ],
        note: "",
    },
    Preset {
        id: "phi-3-mini-4k",
        name: "Phi-3 mini 4k",
        source: concat!(
            "huggingface.co/microsoft/Phi-3-mini-4k-instruct config.json ",
            "(copy, commented out: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py \"phi-3\")"
        ),
        pairs: &[
            ("layers", "32"),
            ("hidden", "3072"),
            ("heads", "32"),
            ("kv-heads", "32"),
            ("head-dim", "96"),
            ("intermediate", "8192"),
            ("vocab", "32064"),
            ("rope-tables", "1"),
        ],
        note: "the config's sliding_window 2047 is not applied: a default dynamic cache keeps every token",
    },
    Preset {
        id: "falcon-7b",
        name: "Falcon 7B",
        source: "huggingface.co/tiiuae/falcon-7b config.json (multi_query, parallel_attn, bias false)",
        pairs: &[
            ("layers", "32"),
            ("hidden", "4544"),
            ("heads", "71"),
            ("kv-heads", "1"),
            ("head-dim", "64"),
            ("intermediate", "18176"),
            ("vocab", "65024"),
            ("gated-mlp", "false"),
            ("tied-embeddings", "true"),
            ("layernorm-bias", "true"),
            ("layer-norms", "1"),
            ("max-position", "2048"),
            ("rope-tables", "1"),
        ],
        note: "",
    },
    Preset {
        id: "gpt-oss-20b",
        name: "gpt-oss-20b",
        source: "huggingface.co/openai/gpt-oss-20b config.json (layer_types: sliding and full attention alternate)",
        pairs: &[
            ("layers", "24"),
            ("hidden", "2880"),
            ("heads", "64"),
            ("kv-heads", "8"),
            ("head-dim", "64"),
            ("intermediate", "2880"),
            ("vocab", "201088"),
            ("qkv-bias", "true"),
            ("o-bias", "true"),
            ("mlp-bias", "true"),
            ("attn-sinks", "true"),
            ("experts", "32"),
            ("active-experts", "4"),
            ("expert-intermediate", "2880"),
            ("router-bias", "true"),
            ("sliding-window", "128"),
            ("sliding-layers", "12"),
            ("max-position", "131072"),
            ("rope-tables", "1"),
        ],
        note: "shipped with experts in MXFP4 and attention in bf16: set format mxfp4 and attention-format bf16",
    },
    Preset {
        id: "deepseek-v3",
        name: "DeepSeek-V3",
        source: concat!(
            "huggingface.co/deepseek-ai/DeepSeek-V3 config.json ",
            "(copy: AI-Hypercomputer/maxtext convert_deepseek_ckpt.py \"deepseek3-671b\")"
        ),
        pairs: &[
            ("layers", "61"),
            ("hidden", "7168"),
            ("heads", "128"),
            ("intermediate", "18432"),
            ("vocab", "129280"),
            ("q-lora-rank", "1536"),
            ("kv-lora-rank", "512"),
            ("qk-nope-dim", "128"),
            ("qk-rope-dim", "64"),
            ("v-head-dim", "128"),
            ("experts", "256"),
            ("active-experts", "8"),
            ("expert-intermediate", "2048"),
            ("shared-experts", "1"),
            ("shared-intermediate", "2048"),
            ("dense-layers", "3"),
            ("correction-bias", "true"),
            ("mtp-layers", "1"),
            ("max-position", "163840"),
            ("rope-tables", "1"),
        ],
        note: "shipped in fp8 with 128×128 block scales: set format fp8-block",
    },
    Preset {
        id: "llama-4-scout",
        name: "Llama 4 Scout 17B-16E",
        source: "huggingface.co/meta-llama/Llama-4-Scout-17B-16E config.json text_config (chunked attention: 36 of 48 layers keep 8192 tokens)",
        pairs: &[
            ("layers", "48"),
            ("hidden", "5120"),
            ("heads", "40"),
            ("kv-heads", "8"),
            ("head-dim", "128"),
            ("intermediate", "16384"),
            ("vocab", "202048"),
            ("experts", "16"),
            ("active-experts", "1"),
            ("expert-intermediate", "8192"),
            ("shared-experts", "1"),
            ("shared-intermediate", "8192"),
            ("sliding-window", "8192"),
            ("sliding-layers", "36"),
            ("max-position", "262144"),
            // Its vision_config's tower, adapter and projector, as the config reader
            // counts them (equal to transformers 5.23's model on the meta device).
            ("tower-params", "871932416"),
            ("rope-tables", "1"),
        ],
        note: "the vision tower and its projector are counted as tower parameters (16-bit, not active)",
    },
];

/// The preset with this id.
pub fn find(id: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::estimate;
    use crate::import::config::parse_config;
    use crate::params::{field, from_pairs};

    #[test]
    fn every_preset_parses_and_estimates() {
        assert!(PRESETS.len() >= 8);
        for p in PRESETS {
            for (k, _) in p.pairs {
                assert!(field(k).is_some(), "{}: unknown key {k}", p.id);
                assert!(is_shape_key(k), "{}: {k} is not a shape key", p.id);
            }
            let mut pairs = p.pairs.to_vec();
            pairs.push(("context", "4096"));
            let (input, errors) = from_pairs(pairs);
            assert!(errors.is_empty(), "{}: {errors:?}", p.id);
            let e = estimate(&input).unwrap_or_else(|e| panic!("{}: {e}", p.id));
            assert!(e.weights_bytes > 0 && e.kv_cache_bytes > 0, "{}", p.id);
            assert!(!p.source.is_empty() && p.source.contains("config.json"));
            assert_eq!(find(p.id), Some(p));
        }
    }

    #[test]
    fn ids_are_unique() {
        for (i, p) in PRESETS.iter().enumerate() {
            assert!(PRESETS[i + 1..].iter().all(|q| q.id != p.id), "{}", p.id);
        }
    }

    /// Published parameter totals (the model cards' exact counts) for presets
    /// whose every tensor the architecture mode models.
    #[test]
    fn parameter_counts_match_the_published_totals() {
        for (id, published) in [
            ("llama-3.1-8b", 8_030_261_248u64),
            ("llama-3.1-70b", 70_553_706_496),
            ("llama-3.2-1b", 1_235_814_400),
            ("mistral-7b-v0.3", 7_248_023_552),
            ("mixtral-8x7b", 46_702_792_704),
            ("qwen2.5-7b", 7_615_616_512),
            ("qwen2-0.5b", 494_032_768),
            ("qwen3-0.6b", 596_049_920),
            ("gemma-2-9b", 9_241_705_984),
            ("falcon-7b", 6_921_720_704),
            ("gpt-oss-20b", 20_914_757_184),
            // 671 026 419 200 in the main model + the MTP layer the checkpoint stores.
            ("deepseek-v3", 684_489_845_504),
            // 107 769 861 120 in the text model + 871 932 416 in the vision tower.
            ("llama-4-scout", 108_641_793_536),
        ] {
            let p = find(id).unwrap();
            let (input, errors) = from_pairs(p.pairs.iter().copied());
            assert!(errors.is_empty());
            assert_eq!(
                estimate(&input).unwrap().parameters,
                Some(published),
                "{id}"
            );
        }
    }

    /// The preset and the core's own config.json reader agree on the shape.
    #[test]
    fn presets_agree_with_the_config_reader() {
        let llama = r#"{"model_type":"llama","hidden_size":4096,"intermediate_size":14336,
            "num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,
            "tie_word_embeddings":false,"vocab_size":128256}"#;
        let mixtral = r#"{"model_type":"mixtral","hidden_size":4096,"intermediate_size":14336,
            "num_attention_heads":32,"num_hidden_layers":32,"num_key_value_heads":8,
            "num_local_experts":8,"num_experts_per_tok":2,"tie_word_embeddings":false,
            "vocab_size":32000}"#;
        let qwen = r#"{"model_type":"qwen2","hidden_size":3584,"intermediate_size":18944,
            "num_attention_heads":28,"num_hidden_layers":28,"num_key_value_heads":4,
            "max_window_layers":28,"sliding_window":131072,"use_sliding_window":false,
            "tie_word_embeddings":false,"vocab_size":152064}"#;
        for (id, json) in [
            ("llama-3.1-8b", llama),
            ("mixtral-8x7b", mixtral),
            ("qwen2.5-7b", qwen),
        ] {
            let from_config = parse_config(json).unwrap().arch;
            let (input, _) = from_pairs(find(id).unwrap().pairs.iter().copied());
            assert_eq!(input.arch, Some(from_config), "{id}");
        }
    }
}
