//! Llama 3.2 Vision's (Mllama's) cross-attention layers under each serving engine: what
//! one token of the pool costs and what a request holds beside its text. The estimate's
//! own lines keep K and V of the self-attention layers per token (`kv_cache`) and of the
//! cross-attention layers over one image's vision tokens (`kv_cache.cross`); the engines
//! lay them out by their own rules, read in their source:
//!
//! - vLLM's V0 engine (0.6.4 to 0.7; `vllm/worker/cache_engine.py`
//!   `CacheEngine.get_cache_block_size`): a block spans the model's layers
//!   (`model_config.get_num_layers`, the text config's `num_hidden_layers`, the
//!   cross-attention layers included), and the block manager (`vllm/core/
//!   block_manager.py` `SelfAttnBlockSpaceManager.can_allocate` / `allocate`) takes a
//!   request's `cross_block_table` from the same pool, one block per 16 of its encoder's
//!   tokens (`vllm/model_executor/models/mllama.py` `input_processor_for_mllama`, added
//!   in 0.6.2: tiles × ((image_size ÷ 14)² + 1), the `cross-tokens` fact). So every
//!   token of the pool costs all the layers, and a request holds its encoder's tokens
//!   beside its text.
//! - vLLM 0.8 to 0.10 run Mllama on the V0 engine (`vllm/engine/arg_utils.py`'s V1
//!   support check logs "['MllamaForConditionalGeneration'] is not supported by the V1
//!   Engine. Falling back to V0", as 0.9.2 does), whose accounting in those releases is
//!   not carried here; from 0.11 on the model is gone
//!   (`vllm/model_executor/models/registry.py` `_PREVIOUSLY_SUPPORTED_MODELS`:
//!   `"MllamaForConditionalGeneration": "0.10.2"`, "encoder-decoder models except
//!   whisper have been removed for V0 deprecation").
//! - SGLang (`python/sglang/srt/models/mllama.py` at sgl-project/sglang 013902a8,
//!   `MllamaForConditionalGeneration.pad_input_ids`): the image's `num_image_tokens`
//!   (images × tiles × ((image_size ÷ patch)² + 1)) are padded ahead of the prompt and
//!   take slots of the one token pool (`managers/schedule_batch.py`
//!   `prepare_encoder_info_extend`: `encoder_out_cache_loc`), whose cells span the text
//!   config's `num_hidden_layers` (`MHATokenToKVPool`'s `layer_num`); the request's
//!   length counts them.
//! - TGI (v2.3.1 on; `server/text_generation_server/models/flash_causal_lm.py`
//!   `FlashCausalLM.__init__`: `num_layers = text_config.num_hidden_layers`, at v3.3.7):
//!   a cache for every layer, the cross-attention layers' unused; their K and V are
//!   projected at every step from the batch's `cross_attention_states`
//!   (`models/mllama_causal_lm.py` `MllamaCausalLMBatch`), held outside the pool.
//! - transformers' `generate`: the cross layers' cache is the estimate's
//!   `kv_cache.cross` line, one image's tokens per sequence beside the text's cache.

use super::flags::{EngineId, EngineParams};
use crate::error::EstimateError;
use crate::estimate::EstimateInput;

/// How an engine lays out the cross-attention layers' cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cross {
    /// KV bytes of one token of the pool, on the device.
    pub per_token: u64,
    /// Tokens of the pool one request holds beside its text's (its encoder's).
    pub encoder_tokens: u64,
    /// Tokens the request's length counts beyond its text (SGLang's padded image).
    pub length_tokens: u64,
    /// What the figure rests on.
    pub assumption: String,
}

/// A model's cross-attention layers as an engine's rule reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrossLayers {
    /// The self-attention layers' KV bytes per token on the device.
    pub per_token: u64,
    /// One token's KV bytes over every attention layer, the cross-attention ones'
    /// included (the layers share one KV shape).
    pub all: u64,
    /// The encoder's (one image's) tokens.
    pub tokens: u64,
    /// Every attention layer.
    pub layers: u64,
    /// The cross-attention layers among them.
    pub cross: u64,
    /// The self-attention layers.
    pub own: u64,
    /// An encoder-decoder read as Whisper from its config: its encoder's frames
    /// (`max_source_positions`) and its stacks placed as vLLM shards them
    /// (`Architecture::encdec_split`). T5, BART, or an encoder-decoder counted by
    /// transformers are not.
    pub whisper: bool,
}

impl CrossLayers {
    /// An engine whose handling was not read refuses the model, naming where it was.
    pub fn not_read(engine: &str) -> EstimateError {
        EstimateError::invalid(
            "engine",
            format!(
                "{engine}: how it serves Llama 3.2 Vision's cross-attention layers was not read (read for vllm@0.7 and earlier V0 releases, sglang, tgi and transformers)"
            ),
        )
    }

    /// An engine whose handling of an encoder-decoder was not read refuses it.
    pub fn encoder_decoder_not_read(engine: &str) -> EstimateError {
        EstimateError::invalid(
            "engine",
            format!(
                "{engine}: how it serves an encoder-decoder (its cross-attention cache and its encoder) was not read (read for vLLM's V1 engine, vllm and vllm@0.19, serving Whisper): leave out --engine for transformers' generate (Whisper at --tp N: its weights and caches per rank as vLLM shards them), or name vllm for Whisper"
            ),
        )
    }
}

/// The cross-attention layers of `input` under `engine` (its rule,
/// [`super::Engine::cross_attention`]): `None` without them; an error where the engine
/// does not serve the model or its handling was not read. `per_token` is the
/// self-attention layers' bytes per token on the device.
pub(super) fn layout(
    engine: EngineId,
    params: &EngineParams,
    input: &EstimateInput,
    per_token: u64,
) -> Result<Option<Cross>, EstimateError> {
    if input.is_encoder_decoder() {
        return encoder_decoder(engine, params, input, per_token).map(Some);
    }
    let Some(a) = input.arch.filter(|a| a.cross_layers > 0) else {
        return Ok(None);
    };
    // The self-attention layers share one KV shape with the cross-attention layers
    // (Mllama's are both the text config's heads and head size): a layer's bytes per
    // token, exactly.
    let own = a.attention_layers().saturating_sub(a.cross_layers);
    let per_layer = match per_token.checked_div(own) {
        Some(b) if b.checked_mul(own) == Some(per_token) => b,
        _ => {
            return Err(EstimateError::invalid(
                "engine",
                format!(
                    "{own} self-attention layers do not share {per_token} B per token evenly: the cross-attention layers' bytes per token are unknown"
                ),
            ));
        }
    };
    let all = per_layer
        .checked_mul(a.attention_layers())
        .ok_or(EstimateError::Overflow {
            what: "KV bytes per token",
        })?;
    let x = CrossLayers {
        per_token,
        all,
        tokens: a.cross_tokens,
        layers: a.attention_layers(),
        cross: a.cross_layers,
        own,
        whisper: false,
    };
    super::cross_rule_of(engine, &x, params).map(Some)
}

/// An encoder-decoder's decoder under `engine` (its rule,
/// [`super::Engine::encoder_decoder`]): every decoder layer has a self-attention and a
/// cross-attention of one KV shape (`WhisperDecoderLayer`'s `self_attn` and
/// `encoder_attn`, both over the decoder's heads), so the cross-attention layers cost
/// per token what the self-attention layers do, over the encoder's positions.
fn encoder_decoder(
    engine: EngineId,
    params: &EngineParams,
    input: &EstimateInput,
    per_token: u64,
) -> Result<Cross, EstimateError> {
    let a = input.arch.filter(|a| a.encdec_params > 0);
    let layers = a.map_or(0, |a| a.layers);
    let whisper = a.is_some_and(|a| a.encdec_split > 0 && a.encoder_length > 0)
        && input.tensors.is_none()
        && input.counted.is_none();
    let x = CrossLayers {
        per_token,
        all: per_token.checked_mul(2).ok_or(EstimateError::Overflow {
            what: "KV bytes per token",
        })?,
        tokens: a.map_or(0, |a| a.encoder_length),
        layers: layers.saturating_mul(2),
        cross: layers,
        own: layers,
        whisper,
    };
    super::encdec_rule_of(engine, &x, params)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::arithmetic_side_effects)]

    use super::super::tests::{engine, estimate};
    use super::super::{EngineBudget, budget};
    use crate::estimate::EstimateInput;

    /// Llama-3.2-11B-Vision's layout (transformers 5.23's MllamaConfig with the 11B
    /// sizes: 40 text layers, 8 of them cross-attention, 8 KV heads of 128, one image
    /// of 4 tiles × 1 601 vision tokens), bf16, a 1 000-token prompt and 24 new tokens.
    fn vision_11b(extra: &[(&str, &str)]) -> EstimateInput {
        let doc: serde_json::Value = serde_json::from_str(include_str!(
            "../../tests/cases/transformers/mllama-11b-layout.json"
        ))
        .expect("fixture");
        let cfg = crate::import::config::parse_config(&doc["config"].to_string()).expect("config");
        let pairs = cfg.pairs();
        let base = [
            ("context", "1000"),
            ("generate", "24"),
            ("compute-dtype", "bf16"),
        ];
        let (input, errors) = crate::params::from_pairs(
            pairs
                .iter()
                .map(|(k, v)| (*k, v.as_str()))
                .chain(base)
                .chain(extra.iter().copied()),
        );
        assert!(errors.is_empty(), "{errors:?}");
        input
    }

    fn try_run(input: &EstimateInput, pairs: &[(&str, &str)]) -> Result<EngineBudget, String> {
        let est = estimate(input).expect("estimate");
        budget(input, &est, &engine(pairs)).map_err(|e| e.to_string())
    }

    /// What one sequence takes from the pool: the pool less the margin.
    fn need(b: &EngineBudget) -> u64 {
        u64::try_from(b.kv_capacity_bytes - b.margin_bytes).expect("need")
    }

    /// One layer's K and V of one token: 2 × 8 heads × 128 × 2 B.
    const LAYER: u64 = 4096;
    const CARD: (&str, &str) = ("card", "h100-sxm-80gb");

    /// The estimate's self-attention cache is 32 layers; the cross line 8 layers over
    /// 6 404 tokens (transformers' own figures for this layout).
    #[test]
    fn the_estimate_keeps_the_cross_layers_apart() {
        let input = vision_11b(&[]);
        let est = estimate(&input).expect("estimate");
        let line = |k: &str| {
            est.lines
                .iter()
                .find(|l| l.key.as_str() == k)
                .map(|l| l.bytes)
        };
        assert_eq!(line("kv_cache"), Some(32 * LAYER * 1024));
        assert_eq!(line("kv_cache.cross"), Some(209_846_272));
        assert_eq!(8 * LAYER * 6404, 209_846_272);
    }

    /// Under tensor parallelism the cross line is split head by head as the
    /// self-attention cache is (vLLM's `MllamaTextCrossAttention`: `num_key_value_heads
    /// // tensor_parallel_size` a rank): 8 KV heads at tp 2 keep 4 a device, half the
    /// line, at tp 16 one head's copy, an eighth; the whole line is unchanged. (An
    /// encoder-decoder's cross cache follows the same rule: see the Whisper test below.)
    #[test]
    fn the_cross_line_is_split_over_tp_as_the_self_attention_cache() {
        let line = |input: &EstimateInput, k: &str| {
            let est = estimate(input).expect("estimate");
            let l = est
                .lines
                .iter()
                .find(|l| l.key.as_str() == k)
                .expect("line");
            (l.bytes, l.device_bytes)
        };
        let whole = 209_846_272;
        assert_eq!(line(&vision_11b(&[]), "kv_cache.cross"), (whole, whole));
        for (tp, heads_here) in [("2", 4), ("4", 2), ("16", 1)] {
            let input = vision_11b(&[("tp", tp), ("gpus", tp)]);
            assert_eq!(
                line(&input, "kv_cache.cross"),
                (whole, whole / 8 * heads_here),
                "tp {tp}"
            );
            let own = line(&input, "kv_cache");
            assert_eq!(own.1 * 8, own.0 * heads_here, "tp {tp}");
        }
    }

    fn whisper_large_v3(pairs: &[(&str, &str)]) -> EstimateInput {
        #[allow(clippy::disallowed_methods)] // a test's fixture
        let text = std::fs::read_to_string(format!(
            "{}/tests/cases/configs/whisper-large-v3.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("config");
        let cfg = crate::import::config::parse_config(&text).expect("config");
        let own = cfg.pairs();
        crate::params::from_pairs(
            own.iter()
                .map(|(k, v)| (*k, v.as_str()))
                .chain([("context", "448")])
                .chain(pairs.iter().copied()),
        )
        .0
    }

    /// Whisper large-v3 over tp 1, 2 and 4, placed as vLLM shards it (whisper.py at
    /// vllm-project/vllm d1a2e94651cf): the stacks' parallel linears split (with the
    /// zero k biases vLLM adds: (32 + 2 × 32) × 1280), their norms, row-parallel
    /// biases, convolutions and position tables whole (8 522 240 parameters), the
    /// token embedding whole; the self- and cross-attention caches split by heads
    /// (20 ÷ tp); the encoder's output whole on every rank (all-reduced).
    #[test]
    fn whisper_over_tp_keeps_its_share_of_the_stacks_and_of_the_caches() {
        let lines = |tp: &str| {
            let est = estimate(&whisper_large_v3(&[("tp", tp), ("gpus", tp)])).expect("estimate");
            let device = |k: &str| {
                est.lines
                    .iter()
                    .find(|l| l.key.as_str() == k)
                    .map(|l| (l.bytes, l.device_bytes))
                    .expect("line")
            };
            [
                device("weights.embeddings"),
                device("weights.encoder_decoder"),
                device("kv_cache"),
                device("kv_cache.cross"),
                device("kv_cache.encoder_output"),
            ]
        };
        let (whole, split) = (8_522_240_u64, 1_468_702_720_u64);
        let stacks = 1_543_490_560 - 51_866 * 1280;
        assert_eq!(whole + split, stacks + (32 + 2 * 32) * 1280);
        let embed = 51_866 * 1280 * 2;
        // Self-attention: 32 layers × 2 × 1280 values × 448 tokens × 2 B; cross: the
        // same over 1500 frames; the encoder's output: 1500 × 1280 × 2 B.
        let (kv, cross, out) = (
            32 * 2 * 1280 * 448 * 2,
            32 * 2 * 1280 * 1500 * 2,
            1500 * 1280 * 2,
        );
        assert_eq!(
            lines("1"),
            [
                (embed, embed),
                (stacks * 2, stacks * 2),
                (kv, kv),
                (cross, cross),
                (out, out)
            ]
        );
        for (tp, n) in [("2", 2), ("4", 4)] {
            assert_eq!(
                lines(tp),
                [
                    (embed, embed),
                    (stacks * 2, (whole + split / n) * 2),
                    (kv, kv / n),
                    (cross, cross / n),
                    (out, out)
                ],
                "tp {tp}"
            );
        }
        assert_eq!((whole + split / 2) * 2, 1_485_747_200);
        // 20 heads do not split over 3 ranks (WhisperAttention asserts it); the
        // pipeline's stages are not placed; a split part that leaves some of the
        // stacks on no rank is not a placement.
        let refused: [(&[(&str, &str)], &str); 3] = [
            (&[("tp", "3"), ("gpus", "3")], "20 attention heads"),
            (&[("pp", "2"), ("gpus", "2")], "pipeline"),
            (
                &[
                    ("tp", "2"),
                    ("gpus", "2"),
                    ("encoder-decoder-split", "1000"),
                ],
                "do not place",
            ),
        ];
        for (pairs, says) in refused {
            let e = estimate(&whisper_large_v3(pairs)).expect_err("refused");
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    /// An encoder-decoder without a placement over ranks (BART, T5, or an encoder-
    /// decoder given by its facts alone) stays refused at tp > 1.
    #[test]
    fn an_encoder_decoder_without_a_placement_is_refused_over_tp() {
        let text = r#"{"vocab_size": 50265, "max_position_embeddings": 1024, "encoder_layers": 6, "encoder_ffn_dim": 3072, "decoder_layers": 6, "decoder_ffn_dim": 3072, "d_model": 768, "decoder_attention_heads": 12, "model_type": "bart"}"#;
        let cfg = crate::import::config::parse_config(text).expect("config");
        let own = cfg.pairs();
        let input = crate::params::from_pairs(own.iter().map(|(k, v)| (*k, v.as_str())).chain([
            ("context", "128"),
            ("tp", "2"),
            ("gpus", "2"),
        ]))
        .0;
        let e = estimate(&input).expect_err("refused");
        assert!(
            e.to_string()
                .contains("placement over ranks is not derived"),
            "{e}"
        );
    }

    /// vLLM's V0 engine: blocks of all 40 layers, and each request's 6 404 encoder
    /// tokens in 401 blocks of its own beside its text's.
    #[test]
    fn vllm_v0_blocks_span_every_layer_and_hold_the_encoder() {
        let input = vision_11b(&[]);
        let b = try_run(
            &input,
            &[("engine", "vllm@0.7"), CARD, ("max-model-len", "4096")],
        )
        .expect("budget");
        assert_eq!(b.kv_bytes_per_token, 40 * LAYER);
        assert_eq!(
            need(&b),
            (4096 / 16 + 6404_u64.div_ceil(16)) * 16 * 40 * LAYER
        );
        let blocks = u64::try_from(b.kv_capacity_bytes).expect("pool") / (16 * 40 * LAYER);
        assert_eq!(b.max_sequences, blocks / (256 + 401));
        assert!(
            b.assumptions
                .iter()
                .any(|a| a.contains("cross block table")),
            "{:?}",
            b.assumptions
        );
        // 0.6.4 and 0.6 alike.
        for e in ["vllm@0.6.4", "vllm@0.6"] {
            let b = try_run(&input, &[("engine", e), CARD, ("max-model-len", "4096")]).expect(e);
            assert_eq!(need(&b), 657 * 16 * 40 * LAYER, "{e}");
        }
    }

    /// vLLM 0.11 on no longer serves it; 0.8 to 0.10 fall back to V0, not carried.
    #[test]
    fn vllm_v1_releases_refuse_it_naming_why() {
        let input = vision_11b(&[]);
        for e in ["vllm", "vllm@0.19"] {
            let err = try_run(&input, &[("engine", e), CARD]).expect_err(e);
            assert!(err.contains("0.10.2"), "{err}");
        }
        for e in ["vllm@0.10", "vllm@0.8"] {
            let err = try_run(&input, &[("engine", e), CARD]).expect_err(e);
            assert!(err.contains("V0 engine"), "{err}");
        }
    }

    /// SGLang: cells of all 40 layers, the image's tokens padded into the request's
    /// length (1 024 text tokens + 6 404 when the length is the workload's; a length
    /// given holds them).
    #[test]
    fn sglang_counts_the_image_in_the_length_and_every_layer() {
        let input = vision_11b(&[]);
        let b = try_run(&input, &[("engine", "sglang"), CARD]).expect("budget");
        assert_eq!(b.kv_bytes_per_token, 40 * LAYER);
        assert_eq!(b.max_model_len, 1024 + 6404);
        assert_eq!(need(&b), (1024 + 6404) * 40 * LAYER);
        let b = try_run(
            &input,
            &[("engine", "sglang"), CARD, ("max-model-len", "8192")],
        )
        .expect("budget");
        assert_eq!(need(&b), 8192 * 40 * LAYER);
    }

    /// TGI 3: a cache for all 40 layers, the vision states outside it; 2.0 and 0.9
    /// predate its Mllama.
    #[test]
    fn tgi_caches_every_layer_and_older_releases_refuse() {
        let input = vision_11b(&[]);
        let b = try_run(
            &input,
            &[("engine", "tgi"), CARD, ("max-model-len", "4096")],
        )
        .expect("budget");
        assert_eq!(b.kv_bytes_per_token, 40 * LAYER);
        assert_eq!(need(&b), 4096 * 40 * LAYER);
        for e in ["tgi@2.0", "tgi@0.9"] {
            let err = try_run(&input, &[("engine", e), CARD]).expect_err(e);
            assert!(err.contains("2.3.1"), "{err}");
        }
    }

    /// transformers' generate: the text's 32 layers per token and the cross line per
    /// sequence (209 846 272 B = 1 601 tokens of the text's 131 072 B).
    #[test]
    fn transformers_holds_the_cross_line_per_sequence() {
        let input = vision_11b(&[]);
        let b = try_run(
            &input,
            &[("engine", "transformers"), CARD, ("max-model-len", "4096")],
        )
        .expect("budget");
        assert_eq!(b.kv_bytes_per_token, 32 * LAYER);
        assert_eq!(need(&b), 4096 * 32 * LAYER + 209_846_272);
    }

    /// The engines whose handling was not read say so; a model without cross-attention
    /// layers is untouched.
    #[test]
    fn other_engines_refuse_and_plain_models_are_untouched() {
        let input = vision_11b(&[]);
        for e in ["llama.cpp", "lmdeploy"] {
            let err = try_run(&input, &[("engine", e), CARD]).expect_err(e);
            assert!(err.contains("not read"), "{err}");
        }
        let plain = super::super::tests::llama_8b(&[("context", "1000")]);
        let p = engine(&[("engine", "vllm@0.7"), CARD]);
        assert_eq!(
            super::layout(p.engine.expect("engine"), &p, &plain, 131_072),
            Ok(None)
        );
    }
}
