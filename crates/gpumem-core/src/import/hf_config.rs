//! A Hugging Face `config.json` read into the architecture mode.
//!
//! Key names follow `transformers`' configuration classes (LlamaConfig,
//! MistralConfig, Qwen2Config, Qwen3Config, MixtralConfig, Gemma2Config,
//! DeepseekV3Config, GptOssConfig, Llama4TextConfig, FalconConfig, GPT2Config, …).
//! Multimodal configs nest the language model under `text_config`, which is used
//! when present; their towers are named in a warning, never dropped silently.
//! Every default assumed is listed in `notes`; every field that changes memory and
//! is not modelled is named in `warnings`. Mamba(-1), Mamba-2, Falcon-Mamba, Jamba,
//! Qwen3-Next, Nemotron-H, Falcon-H1, Bamba and GraniteMoeHybrid are read with their
//! state-space /
//! linear-attention mixer (layers that keep a constant per-sequence state instead of
//! KV, or beside it in Falcon-H1's parallel layers); the other state-space and hybrid
//! families are refused with a reason.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::arch::{Architecture, Mixer, MixerKind, Mla, Moe};
use crate::error::EstimateError;
use crate::estimate::EstimateInput;
use crate::params::to_pairs;

const FORMAT: &str = "config.json";

/// What a `config.json` says, beyond the shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportedConfig {
    /// `model_type`.
    pub model_type: String,
    /// The shape.
    pub arch: Architecture,
    /// `sliding_window` (or Llama-4's `attention_chunk_size`), when in use.
    pub sliding_window: Option<u64>,
    /// Layers using the window (from `layer_types` or the model family's pattern).
    pub sliding_layers: Option<u64>,
    /// `max_position_embeddings` / `n_positions`.
    pub max_position: Option<u64>,
    /// `torch_dtype` / `dtype`.
    pub dtype: Option<String>,
    /// The storage format named by `quantization_config`, in this crate's vocabulary.
    pub format: Option<String>,
    /// The attention projections' format when the quantiser left them out
    /// (`modules_to_not_convert`, compressed-tensors `ignore`).
    pub attention_format: Option<String>,
    /// Recurrent-state bytes per state layer when the config fixes them beyond the
    /// mixer's shape in the compute dtype (Nemotron-3's `mamba_ssm_cache_dtype`).
    pub state_bytes: Option<u64>,
    /// Defaults that were assumed because the config did not say.
    pub notes: Vec<String>,
    /// Fields that change memory and are not modelled, and other soft problems.
    pub warnings: Vec<String>,
}

impl ImportedConfig {
    /// The `key=value` pairs the config stands for (explicit flags given later
    /// override them) — shared by the agent's `--config` and the page's import.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let input = EstimateInput {
            arch: Some(self.arch),
            sliding_window: self.sliding_window,
            sliding_layers: self
                .sliding_layers
                .filter(|_| self.sliding_window.is_some()),
            max_position: self.max_position,
            state_layers: self.arch.mixer.map_or(0, |m| m.layers),
            state_bytes: self.state_bytes.unwrap_or(0),
            ..EstimateInput::default()
        };
        let mut out = to_pairs(&input);
        if let Some(f) = &self.format {
            out.push(("format", f.clone()));
        }
        if let Some(f) = &self.attention_format {
            out.push(("attention-format", f.clone()));
        }
        out
    }
}

fn parse(reason: String) -> EstimateError {
    EstimateError::Parse {
        format: FORMAT,
        reason,
    }
}

fn uint(v: &Value, key: &str) -> Result<Option<u64>, EstimateError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x.as_u64().map(Some).ok_or_else(|| {
            parse(format!(
                "{key} should be a non-negative integer, found {}",
                shown(x)
            ))
        }),
    }
}

/// A scalar as the config wrote it, a container by its kind: without `Value`'s
/// `Display`, which would bring a JSON writer into the page's wasm.
fn shown(x: &Value) -> String {
    match x {
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn need(v: &Value, keys: &[&str]) -> Result<u64, EstimateError> {
    for k in keys {
        if let Some(x) = uint(v, k)? {
            return Ok(x);
        }
    }
    Err(parse(format!("missing {}", keys.join(" / "))))
}

fn flag(v: &Value, key: &str) -> Option<bool> {
    v.get(key).and_then(Value::as_bool)
}

/// True when `key` holds something other than null, false, 0 or an empty list.
/// The checkpoint's dtype as the config names it (`torch_dtype`, or `dtype` in newer
/// transformers).
fn torch_dtype(v: &Value) -> Option<&str> {
    v.get("torch_dtype")
        .or_else(|| v.get("dtype"))
        .and_then(Value::as_str)
}

fn present(v: &Value, key: &str) -> bool {
    match v.get(key) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Number(n)) => n.as_u64() != Some(0),
        Some(_) => true,
    }
}

/// Model types whose every tensor the architecture mode models.
const MODELLED: &[&str] = &[
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "olmo2",
    "phi3",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
    "llama4",
    "llama4_text",
    "falcon",
    "gpt2",
    "gpt_bigcode",
    "gpt_neox",
    "starcoder2",
    "granite",
    "mamba",
    "mamba2",
    "falcon_mamba",
    "jamba",
    "nemotron_h",
    "qwen3_next",
    "falcon_h1",
    "bamba",
    "granitemoehybrid",
];

/// Families whose layers keep a constant state instead of (some) KV: not expressible.
/// (Mamba, Mamba-2, Falcon-Mamba, Jamba, Qwen3-Next, Nemotron-H, Falcon-H1, Bamba and
/// GraniteMoeHybrid are read: see [`mamba`] and the mixer.)
const STATE_SPACE: &[&str] = &[
    "zamba",
    "zamba2",
    "lfm2",
    "rwkv",
    "recurrent_gemma",
    "minimax",
];

/// Config fields that change memory and that the architecture mode does not model.
const NOT_MODELLED: &[(&str, &str)] = &[
    (
        "mlp_only_layers",
        "dense layers among MoE layers are counted as MoE",
    ),
    (
        "cross_attention_layers",
        "cross-attention layers are not counted",
    ),
    ("is_encoder_decoder", "the encoder is not counted"),
    ("encoder_layers", "the encoder is not counted"),
    ("altup_num_inputs", "AltUp projections are not counted"),
    ("laurel_rank", "LAuReL blocks are not counted"),
    (
        "hidden_size_per_layer_input",
        "per-layer input embeddings are not counted",
    ),
    (
        "num_kv_shared_layers",
        "KV sharing across layers is not modelled (the KV cache is overcounted)",
    ),
    (
        "word_embed_proj_dim",
        "embedding projections are not counted",
    ),
    (
        "shared_expert_gate",
        "the shared expert's gate is not counted",
    ),
    (
        "layers_block_type",
        "non-attention layers are counted as attention layers",
    ),
    (
        "hybrid_override_pattern",
        "non-attention layers are counted as attention layers",
    ),
];

/// Multimodal towers: named, never silently dropped.
const TOWERS: &[(&str, &str)] = &[
    ("vision_config", "vision tower"),
    ("audio_config", "audio tower"),
    ("speech_config", "speech tower"),
    ("vision_tower", "vision tower"),
    ("perceiver_config", "perceiver resampler"),
];

/// Reads a `config.json` document.
pub fn parse_config(text: &str) -> Result<ImportedConfig, EstimateError> {
    // From bytes, like the safetensors header: one JSON reader in the page's wasm.
    let root: Value = serde_json::from_slice(text.as_bytes())
        .map_err(|e| parse(format!("not valid JSON: {e}")))?;
    if !root.is_object() {
        return Err(parse("expected a JSON object".into()));
    }
    let v = match root.get("text_config") {
        Some(t) if t.is_object() => t,
        _ => &root,
    };
    let mut notes = Vec::new();
    // Gemma-3's published configs are sparse: transformers' Gemma3TextConfig
    // defaults fill the rest, so they are filled here too, each one listed.
    let filled;
    let v = if v.get("model_type").and_then(Value::as_str) == Some("gemma3_text") {
        let mut t = v.clone();
        for (key, default) in [
            ("num_attention_heads", 8u64),
            ("num_key_value_heads", 4),
            ("head_dim", 256),
            ("vocab_size", 262_208),
            ("max_position_embeddings", 131_072),
            ("sliding_window_pattern", 6),
        ] {
            if t.get(key).is_none_or(Value::is_null)
                && let Some(o) = t.as_object_mut()
            {
                o.insert(key.into(), default.into());
                notes.push(format!(
                    "{key} absent: {default} assumed (Gemma3TextConfig's default)"
                ));
            }
        }
        filled = t;
        &filled
    } else {
        v
    };
    let model_type = v
        .get("model_type")
        .or_else(|| root.get("model_type"))
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_string();
    let mt = model_type.as_str();
    let root_type = root.get("model_type").and_then(Value::as_str).unwrap_or(mt);
    if STATE_SPACE.contains(&mt) || STATE_SPACE.contains(&root_type) {
        return Err(parse(format!(
            "model_type {mt}: state-space / linear-attention layers keep a constant per-sequence state instead of a KV cache, and their tensors differ from attention layers; the config reader does not count them yet: give parameters, the attention layers' KV shape and state-layers / state-bytes by hand"
        )));
    }
    if matches!(mt, "mamba" | "mamba2" | "falcon_mamba") {
        return mamba(v, mt, notes);
    }
    let other_layer = v
        .get("layer_types")
        .and_then(Value::as_array)
        .and_then(|t| {
            t.iter().filter_map(Value::as_str).find(|t| {
                let known = matches!(*t, "sliding_attention" | "full_attention")
                    || (mt == "qwen3_next" && *t == "linear_attention")
                    || (mt == "granitemoehybrid" && matches!(*t, "mamba" | "attention"));
                !known
            })
        });
    if let Some(kind) = other_layer {
        return Err(parse(format!(
            "layer_types has {kind:?} layers: layers that keep a constant state instead of a KV cache are not read from a config yet (give parameters, the KV shape and state-layers / state-bytes by hand)"
        )));
    }
    let mut warnings = Vec::new();
    if !MODELLED.contains(&mt) {
        warnings.push(format!(
            "model_type {mt} is read with the generic decoder rules: tensors it adds beyond them are not counted"
        ));
    }
    let hidden = need(v, &["hidden_size", "n_embd", "d_model"])?;
    let mut tower_params = 0;
    for (key, what) in TOWERS {
        let Some(tower) = root.get(*key).filter(|x| !x.is_null()) else {
            continue;
        };
        match gemma3_siglip(&root, tower, hidden)? {
            Some(n) => {
                tower_params = n;
                notes.push(format!(
                    "{key}: the SigLIP {what} and Gemma-3's projector are counted ({n} parameters, 16-bit)"
                ));
            }
            None => warnings.push(format!(
                "{key}: the {what} is not counted; its weights add to the total"
            )),
        }
    }
    for (key, what) in NOT_MODELLED {
        // Nemotron-H's pattern is read (see `nemotron_blocks`).
        let read =
            mt == "nemotron_h" && matches!(*key, "hybrid_override_pattern" | "layers_block_type");
        if present(v, key) && !read {
            warnings.push(format!("{key} is not modelled: {what}"));
        }
    }
    let layers = need(v, &["num_hidden_layers", "n_layer", "num_layers"])?;
    let heads = need(v, &["num_attention_heads", "n_head"])?;
    if heads == 0 {
        return Err(parse("num_attention_heads is 0".into()));
    }
    let falcon_new = mt == "falcon" && flag(v, "new_decoder_architecture") == Some(true);
    if mt == "falcon" {
        // FalconConfig's defaults, listed when the config leaves them out.
        for (key, default) in [
            ("multi_query", "true"),
            ("parallel_attn", "true"),
            ("bias", "false"),
        ] {
            if flag(v, key).is_none() {
                notes.push(format!(
                    "{key} absent: {default} assumed (FalconConfig's default)"
                ));
            }
        }
    }
    let kv_heads = if falcon_new {
        uint(v, "num_kv_heads")?.unwrap_or(heads)
    } else if matches!(mt, "falcon" | "gpt_bigcode") && flag(v, "multi_query").unwrap_or(true) {
        // FalconConfig and GPTBigCodeConfig default multi_query to true: one K/V head.
        1
    } else {
        match uint(v, "num_key_value_heads")?.or(uint(v, "num_kv_heads")?) {
            Some(k) => k,
            None => {
                notes.push(
                    "num_key_value_heads absent: KV heads = attention heads (multi-head attention)"
                        .into(),
                );
                heads
            }
        }
    };
    let head_dim = match uint(v, "head_dim")?.or(uint(v, "attention_head_dim")?) {
        Some(d) => d,
        None if matches!(mt, "gemma2" | "gemma3" | "gemma3_text") => {
            notes.push(format!("head_dim absent: 256 assumed ({mt}'s default)"));
            256
        }
        // heads is at least 1 (checked above).
        None => hidden.checked_div(heads).unwrap_or(0),
    };
    let vocab = need(v, &["vocab_size"])?;
    let non_gated = matches!(
        mt,
        "gpt2"
            | "gpt_neox"
            | "gptj"
            | "opt"
            | "bloom"
            | "falcon"
            | "gpt_bigcode"
            | "phi"
            | "starcoder2"
            | "nemotron_h"
    );
    let dense_key = if mt == "llama4" || mt == "llama4_text" {
        "intermediate_size_mlp"
    } else {
        "intermediate_size"
    };
    let intermediate = match uint(v, dense_key)?
        .or(uint(v, "n_inner")?)
        .or(uint(v, "ffn_dim")?)
        .or(uint(v, "ffn_hidden_size")?)
    {
        Some(i) => i,
        None => {
            notes.push("intermediate size absent: 4 × hidden assumed".into());
            // Saturates rather than wraps: an absurd hidden size is then refused.
            hidden.saturating_mul(4)
        }
    };
    let tied = flag(v, "tie_word_embeddings").or_else(|| flag(&root, "tie_word_embeddings"));
    let tied_embeddings = tied.unwrap_or_else(|| {
        // transformers' PretrainedConfig defaults to tied; these classes override
        // the default to untied.
        let untied = matches!(
            mt,
            "llama"
                | "mistral"
                | "mixtral"
                | "qwen2"
                | "qwen2_moe"
                | "qwen3"
                | "qwen3_moe"
                | "deepseek_v2"
                | "deepseek_v3"
                | "phi3"
                | "gpt_oss"
                | "llama4"
                | "llama4_text"
                | "olmo2"
                | "gpt_neox"
                | "gptj"
                | "jamba"
                | "qwen3_next"
                | "nemotron_h"
                | "falcon_h1"
                | "bamba"
                | "granitemoehybrid"
        );
        notes.push(format!(
            "tie_word_embeddings absent: {} (default for {mt})",
            if untied { "untied" } else { "tied" }
        ));
        !untied
    });
    let attention_bias = flag(v, "attention_bias").unwrap_or(false);
    // Falcon's `bias` and Starcoder2's `use_bias` put biases on every linear layer.
    let all_bias = match mt {
        "falcon" => flag(v, "bias").unwrap_or(false),
        "starcoder2" => flag(v, "use_bias").unwrap_or(true),
        "gpt2" | "gpt_bigcode" | "gpt_neox" => true,
        _ => false,
    };
    let qkv_bias = attention_bias || all_bias || matches!(mt, "qwen2" | "qwen2_moe");
    let o_bias = attention_bias || all_bias;
    let mlp_bias = flag(v, "mlp_bias").unwrap_or(false) || all_bias || mt == "gpt_oss";
    let layernorm_bias = matches!(
        mt,
        "gpt2"
            | "gpt_neox"
            | "gptj"
            | "opt"
            | "bloom"
            | "falcon"
            | "gpt_bigcode"
            | "phi"
            | "starcoder2"
    );
    let layer_norms = match mt {
        "gemma2" | "gemma3" | "gemma3_text" => 4,
        "falcon" if falcon_new => uint(v, "num_ln_in_parallel_attn")?.unwrap_or(2),
        "falcon" if flag(v, "parallel_attn").unwrap_or(true) => 1,
        "gptj" | "phi" | "nemotron_h" => 1,
        _ => 2,
    };
    let learned_positions = match mt {
        "gpt2" | "gpt_bigcode" => need(v, &["n_positions", "max_position_embeddings"])?,
        _ => 0,
    };
    // GraniteMoeHybrid: routed experts (GraniteMoeHybridConfig's default 8) beside an
    // always-on shared MLP, or that shared MLP alone when there are no experts.
    let granite = mt == "granitemoehybrid";
    let experts = if granite {
        Some(or_default(
            v,
            "num_local_experts",
            8,
            "GraniteMoeHybridConfig",
            &mut notes,
        )?)
    } else {
        uint(v, "num_local_experts")?
            .or(uint(v, "num_experts")?)
            .or(uint(v, "n_routed_experts")?)
    };
    let granite_shared = if granite {
        or_default(
            v,
            "shared_intermediate_size",
            1024,
            "GraniteMoeHybridConfig",
            &mut notes,
        )?
    } else {
        0
    };
    let intermediate = if granite && experts == Some(0) {
        granite_shared
    } else {
        intermediate
    };
    let llama4 = mt == "llama4" || mt == "llama4_text";
    let nemotron = if mt == "nemotron_h" {
        Some(nemotron_blocks(v, layers, &mut warnings)?)
    } else {
        None
    };
    let nemotron_experts = match nemotron.filter(|b| b.moe > 0) {
        Some(blocks) => Some(nemotron_moe(v, blocks, &mut notes)?),
        None => None,
    };
    let moe = match experts.filter(|_| nemotron.is_none()) {
        Some(e) if e > 1 || (granite && e == 1) => Some(Moe {
            experts: e,
            active: need(v, &["num_experts_per_tok", "num_experts_per_token"])?,
            expert_intermediate: if llama4 {
                need(v, &["intermediate_size"])?
            } else {
                uint(v, "moe_intermediate_size")?.unwrap_or(intermediate)
            },
            shared_experts: if llama4 || granite {
                1
            } else {
                uint(v, "n_shared_experts")?.unwrap_or(u64::from(
                    uint(v, "shared_expert_intermediate_size")?.is_some(),
                ))
            },
            shared_intermediate: if llama4 {
                need(v, &["intermediate_size"])?
            } else if granite {
                granite_shared
            } else {
                uint(v, "shared_expert_intermediate_size")?
                    .or(uint(v, "moe_intermediate_size")?)
                    .unwrap_or(intermediate)
            },
            dense_layers: uint(v, "first_k_dense_replace")?.unwrap_or(0),
            every: uint(v, "interleave_moe_layer_step")?
                .or(uint(v, "decoder_sparse_step")?)
                .or(uint(v, "moe_layer_freq")?)
                .or(uint(v, "expert_layer_period")?)
                .unwrap_or(if mt == "jamba" { 2 } else { 1 })
                .max(1),
            router_bias: mt == "gpt_oss"
                || (mt == "deepseek_v3"
                    && v.get("topk_method").and_then(Value::as_str) == Some("noaux_tc")),
            // Qwen2MoeSparseMoeBlock / Qwen3NextSparseMoeBlock: `shared_expert_gate`.
            shared_gate: matches!(mt, "qwen2_moe" | "qwen3_next"),
            latent: 0,
        }),
        _ => nemotron_experts,
    };
    let mixer = match mt {
        "jamba" => Some(jamba_mixer(
            v,
            hidden,
            layers,
            moe,
            &mut notes,
            &mut warnings,
        )?),
        "qwen3_next" => Some(delta_net(v, layers, &mut notes)?),
        "bamba" => {
            let attention = bamba_attention_layers(v, layers, &mut notes)?;
            Some(expand_mamba2(
                v,
                hidden,
                layers.saturating_sub(attention),
                "BambaConfig",
                &mut notes,
                &mut warnings,
            )?)
        }
        "granitemoehybrid" => {
            let mamba = granite_mamba_layers(v, layers, &mut notes)?;
            Some(expand_mamba2(
                v,
                hidden,
                mamba,
                "GraniteMoeHybridConfig",
                &mut notes,
                &mut warnings,
            )?)
        }
        "falcon_h1" => Some(falcon_h1_mixer(
            v,
            hidden,
            layers,
            &mut notes,
            &mut warnings,
        )?),
        "nemotron_h" => {
            let mamba = nemotron.unwrap_or_default().mamba;
            Some(nemotron_mixer(v, mamba, &mut notes)?)
        }
        _ => None,
    };
    let dtype = torch_dtype(v)
        .or_else(|| torch_dtype(&root))
        .map(str::to_string);
    let mut state_bytes = None;
    if let Some(m) = mixer.filter(|_| nemotron.is_some())
        && v.get("mamba_ssm_cache_dtype").and_then(Value::as_str) == Some("float32")
    {
        // vLLM's NemotronHForCausalLMConfig hook (model_executor/models/config.py)
        // sets cache_config.mamba_ssm_cache_dtype from this key; the conv state keeps
        // mamba_cache_dtype "auto", the model's dtype (mamba_utils.py,
        // MambaStateDtypeCalculator.mamba2_state_dtype). Per layer: the conv window
        // (inner + 2 × groups × d_state) × (kernel − 1) in the model dtype and the
        // SSM state inner × d_state in 4 bytes (`Mixer::state_values`' shapes).
        let (conv, ssm) = m
            .state_values()
            .map_err(|e| parse(format!("inconsistent shape: {e}")))?;
        let conv_bytes = if dtype.as_deref() == Some("float32") {
            4
        } else {
            2
        };
        let per_layer = conv
            .saturating_mul(conv_bytes)
            .saturating_add(ssm.saturating_mul(4));
        notes.push(format!(
            "mamba_ssm_cache_dtype float32: state-bytes {per_layer} (SSM state in fp32, conv in the model dtype, as vLLM)"
        ));
        state_bytes = Some(per_layer);
    }
    let mla = match uint(v, "kv_lora_rank")? {
        Some(kv_lora_rank) => Some(Mla {
            q_lora_rank: uint(v, "q_lora_rank")?.unwrap_or(0),
            kv_lora_rank,
            qk_nope_dim: need(v, &["qk_nope_head_dim"])?,
            qk_rope_dim: need(v, &["qk_rope_head_dim"])?,
            v_head_dim: need(v, &["v_head_dim"])?,
        }),
        None => None,
    };
    let mut mtp_layers = uint(v, "num_nextn_predict_layers")?.unwrap_or(0);
    let mtp_pattern = v.get("mtp_hybrid_override_pattern").and_then(Value::as_str);
    if mtp_layers > 0 && nemotron.is_some() && mtp_pattern != Some("*E") {
        // Nemotron-3's MTP blocks are counted for the "*E" pattern (an attention
        // block, then the MoE block) only; another pattern is named, not miscounted.
        warnings.push(format!(
            "num_nextn_predict_layers: MTP pattern {mtp_pattern:?} is not modelled (only \"*E\"): the MTP blocks are not counted"
        ));
        mtp_layers = 0;
    } else if mtp_layers > 0 && nemotron.is_some_and(|b| b.moe == 0) {
        warnings.push(
            "num_nextn_predict_layers: MTP blocks without MoE blocks are not modelled: not counted"
                .into(),
        );
        mtp_layers = 0;
    } else if mtp_layers > 0 {
        notes.push(format!(
            "num_nextn_predict_layers = {mtp_layers}: the multi-token-prediction layer(s) are counted, as the checkpoint stores them"
        ));
    }
    let arch = Architecture {
        vocab,
        hidden,
        layers,
        heads,
        kv_heads,
        head_dim,
        intermediate,
        gated_mlp: !non_gated,
        tied_embeddings,
        qkv_bias,
        o_bias,
        mlp_bias,
        qk_norm: matches!(
            mt,
            "qwen3" | "qwen3_moe" | "gemma3" | "gemma3_text" | "qwen3_next"
        ),
        qk_norm_whole: mt == "olmo2",
        layernorm_bias,
        layer_norms,
        learned_positions,
        attn_sinks: mt == "gpt_oss",
        // Qwen3NextAttention: q_proj yields the queries and a sigmoid output gate.
        attn_gate: mt == "qwen3_next",
        mixer,
        // Falcon-H1: attention runs beside the mixer in every layer.
        attn_layers: nemotron
            .map(|b| b.attention)
            .or((mt == "falcon_h1").then_some(layers)),
        mlp_layers: nemotron.map(|b| b.mlp.saturating_add(b.moe)),
        mla,
        moe,
        mtp_layers,
        tower_params,
    };
    arch.validate()
        .map_err(|e| parse(format!("inconsistent shape: {e}")))?;
    let (window, sliding_layers) = if let Some(chunk) =
        uint(v, "attention_chunk_size")?.filter(|_| llama4)
    {
        // Llama-4: RoPE layers attend within chunks (each keeps at most one chunk of
        // tokens); every `no_rope_layer_interval`-th layer is a global NoPE layer.
        let rope_layers = match v.get("no_rope_layers").and_then(Value::as_array) {
            Some(l) if !l.is_empty() => l.iter().filter(|x| x.as_u64() == Some(1)).count() as u64,
            _ => {
                let every = uint(v, "no_rope_layer_interval")?.unwrap_or(4).max(1);
                layers.saturating_sub(layers.checked_div(every).unwrap_or(0))
            }
        };
        notes.push(format!(
            "attention_chunk_size = {chunk}: {rope_layers} chunked-attention layers keep at most {chunk} tokens (counted as a window)"
        ));
        (Some(chunk), Some(rope_layers))
    } else {
        let window =
            uint(v, "sliding_window")?.filter(|_| flag(v, "use_sliding_window") != Some(false));
        let sliding = window.and_then(|_| {
            if let Some(types) = v.get("layer_types").and_then(Value::as_array) {
                return Some(
                    types
                        .iter()
                        .filter(|t| t.as_str() == Some("sliding_attention"))
                        .count() as u64,
                );
            }
            match mt {
                "gemma2" => Some(layers / 2),
                "gemma3" | "gemma3_text" => {
                    let p = uint(v, "sliding_window_pattern")
                        .ok()
                        .flatten()
                        .unwrap_or(6)
                        .max(1);
                    Some(layers.saturating_sub(layers.checked_div(p).unwrap_or(0)))
                }
                "qwen2" | "qwen2_moe" => {
                    let full = uint(v, "max_window_layers")
                        .ok()
                        .flatten()
                        .unwrap_or(layers)
                        .min(layers);
                    Some(layers.saturating_sub(full))
                }
                _ => None,
            }
        });
        (window, sliding)
    };
    let max_position = uint(v, "max_position_embeddings")?
        .or(uint(v, "n_positions")?)
        .or(uint(v, "max_seq_len")?);
    if let Some(r) = v.get("rope_scaling").filter(|r| r.is_object()) {
        let kind = r
            .get("rope_type")
            .or_else(|| r.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("?");
        let factor = r.get("factor").map(Value::to_string).unwrap_or_default();
        notes.push(format!(
            "rope_scaling {kind} (factor {factor}): max-position is the config's max_position_embeddings"
        ));
    }
    let q = quant_format(root.get("quantization_config"), &mut warnings);
    let (format, attention_format) = match q {
        Some((f, keep_attention)) => {
            let kept = keep_attention.then(|| match dtype.as_deref() {
                Some("float16") => "fp16".to_string(),
                Some("float32") => "fp32".to_string(),
                _ => "bf16".to_string(),
            });
            notes.push(format!(
                "quantization_config: linear layers {f}{}; embeddings, lm_head, norms, biases and routers kept in 16 bits",
                kept.as_ref()
                    .map(|k| format!(", attention projections kept in {k} (not converted)"))
                    .unwrap_or_default()
            ));
            (Some(f), kept)
        }
        None => (None, None),
    };
    Ok(ImportedConfig {
        model_type,
        arch,
        sliding_window: window,
        sliding_layers,
        max_position,
        dtype,
        format,
        attention_format,
        state_bytes,
        notes,
        warnings,
    })
}

/// An integer key with the family's default, the default listed in `notes` when assumed.
fn or_default(
    v: &Value,
    key: &str,
    default: u64,
    class: &str,
    notes: &mut Vec<String>,
) -> Result<u64, EstimateError> {
    match uint(v, key)? {
        Some(x) => Ok(x),
        None => {
            notes.push(format!(
                "{key} absent: {default} assumed ({class}'s default)"
            ));
            Ok(default)
        }
    }
}

/// The mixers are counted with a conv bias and without in/out projection biases, as
/// every published Mamba-family checkpoint has them; the other choice is named.
fn mixer_biases(v: &Value, proj: &str, conv: &str, warnings: &mut Vec<String>) {
    for (key, on) in [(proj, true), (conv, false)] {
        if flag(v, key) == Some(on) {
            let w = format!(
                "{key} = {on} is not modelled: the mixer's biases are counted as in Mamba (a conv bias, no projection bias)"
            );
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
    }
}

/// Mamba's Δ rank: a number, or "auto" = ⌈hidden / 16⌉ (MambaConfig, JambaConfig).
fn dt_rank(
    v: &Value,
    key: &str,
    hidden: u64,
    class: &str,
    notes: &mut Vec<String>,
) -> Result<u64, EstimateError> {
    match v.get(key) {
        Some(Value::String(s)) if s == "auto" => Ok(hidden.div_ceil(16)),
        Some(Value::Null) | None => {
            notes.push(format!(
                "{key} absent: \"auto\" = ⌈hidden / 16⌉ assumed ({class}'s default)"
            ));
            Ok(hidden.div_ceil(16))
        }
        Some(_) => uint(v, key)?.ok_or_else(|| parse(format!("{key}: not a rank"))),
    }
}

/// A Mamba(-1), Mamba-2 or Falcon-Mamba config (transformers' MambaConfig /
/// Mamba2Config / FalconMambaConfig): every layer a norm and a mixer, no attention,
/// no MLP. Falcon-Mamba's Δ/B/C RMSNorms have no weights (non-persistent buffers):
/// the tensors are Mamba's.
fn mamba(v: &Value, mt: &str, mut notes: Vec<String>) -> Result<ImportedConfig, EstimateError> {
    let class = match mt {
        "mamba" => "MambaConfig",
        "mamba2" => "Mamba2Config",
        _ => "FalconMambaConfig",
    };
    let mut warnings = Vec::new();
    let hidden = need(v, &["hidden_size", "d_model"])?;
    let layers = need(v, &["num_hidden_layers", "n_layer"])?;
    let vocab = need(v, &["vocab_size"])?;
    let mamba2 = mt == "mamba2";
    // Mamba2Mixer: intermediate_size = expand × hidden (there is no config key).
    let inner = match uint(v, "intermediate_size")?.filter(|_| !mamba2) {
        Some(i) => i,
        None => {
            let expand = or_default(v, "expand", 2, class, &mut notes)?;
            notes.push("intermediate_size absent: d_inner = expand × hidden".into());
            expand.saturating_mul(hidden)
        }
    };
    let state = or_default(
        v,
        "state_size",
        if mamba2 { 128 } else { 16 },
        class,
        &mut notes,
    )?;
    let conv = or_default(v, "conv_kernel", 4, class, &mut notes)?;
    let (kind, rank, heads, groups) = if mamba2 {
        let heads = or_default(v, "num_heads", 128, class, &mut notes)?;
        let head_dim = or_default(v, "head_dim", 64, class, &mut notes)?;
        if heads.checked_mul(head_dim) != Some(inner) {
            return Err(parse(format!(
                "num_heads × head_dim ({heads} × {head_dim}) is not expand × hidden ({inner})"
            )));
        }
        let groups = or_default(v, "n_groups", 8, class, &mut notes)?;
        (MixerKind::Mamba2, 0, heads, groups)
    } else {
        let rank = dt_rank(v, "time_step_rank", hidden, class, &mut notes)?;
        (MixerKind::Mamba, rank, 0, 0)
    };
    mixer_biases(v, "use_bias", "use_conv_bias", &mut warnings);
    let tied_embeddings = match flag(v, "tie_word_embeddings") {
        Some(t) => t,
        None => {
            // Mamba2Config defaults to untied, MambaConfig to tied.
            notes.push(format!(
                "tie_word_embeddings absent: {} ({class}'s default)",
                if mamba2 { "untied" } else { "tied" }
            ));
            !mamba2
        }
    };
    let arch = Architecture {
        vocab,
        hidden,
        layers,
        heads: 0,
        kv_heads: 0,
        head_dim: 0,
        intermediate: 0,
        gated_mlp: true,
        tied_embeddings,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        qk_norm: false,
        qk_norm_whole: false,
        layernorm_bias: false,
        layer_norms: 1,
        learned_positions: 0,
        attn_sinks: false,
        attn_gate: false,
        attn_layers: None,
        mlp_layers: None,
        mixer: Some(Mixer {
            kind,
            layers,
            inner,
            state,
            conv,
            dt_rank: rank,
            heads,
            key_heads: groups,
            norms: false,
            gated_norm: true,
        }),
        mla: None,
        moe: None,
        mtp_layers: 0,
        tower_params: 0,
    };
    arch.validate()
        .map_err(|e| parse(format!("inconsistent shape: {e}")))?;
    let dtype = torch_dtype(v).map(str::to_string);
    let q = quant_format(v.get("quantization_config"), &mut warnings);
    Ok(ImportedConfig {
        model_type: mt.to_string(),
        arch,
        sliding_window: None,
        sliding_layers: None,
        max_position: None,
        dtype,
        format: q.map(|(f, _)| f),
        attention_format: None,
        state_bytes: None,
        notes,
        warnings,
    })
}

/// Jamba's Mamba layers (transformers' JambaConfig / JambaMambaMixer): every layer
/// is attention when `i % attn_layer_period == attn_layer_offset`, Mamba otherwise.
fn jamba_mixer(
    v: &Value,
    hidden: u64,
    layers: u64,
    moe: Option<Moe>,
    notes: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<Mixer, EstimateError> {
    let class = "JambaConfig";
    let period = or_default(v, "attn_layer_period", 8, class, notes)?.max(1);
    let offset = or_default(v, "attn_layer_offset", 4, class, notes)?;
    // Layers i < layers with i % period == offset.
    let attention = layers
        .saturating_add(period)
        .saturating_sub(offset.saturating_add(1))
        .checked_div(period)
        .unwrap_or(0)
        .min(layers);
    if let Some(m) = moe {
        let e_period = m.every;
        let e_offset = or_default(v, "expert_layer_offset", 1, class, notes)?;
        let counted = m.moe_layers(layers);
        let actual = layers
            .saturating_add(e_period)
            .saturating_sub(e_offset.saturating_add(1))
            .checked_div(e_period)
            .unwrap_or(0);
        if counted != actual {
            warnings.push(format!(
                "expert_layer_offset {e_offset}: {actual} MoE layers, counted as {counted} (every {e_period}-th layer)"
            ));
        }
    }
    let expand = or_default(v, "mamba_expand", 2, class, notes)?;
    mixer_biases(v, "mamba_proj_bias", "mamba_conv_bias", warnings);
    Ok(Mixer {
        kind: MixerKind::Mamba,
        layers: layers.saturating_sub(attention),
        inner: expand.saturating_mul(hidden),
        state: or_default(v, "mamba_d_state", 16, class, notes)?,
        conv: or_default(v, "mamba_d_conv", 4, class, notes)?,
        dt_rank: dt_rank(v, "mamba_dt_rank", hidden, class, notes)?,
        heads: 0,
        key_heads: 0,
        norms: true,
        gated_norm: true,
    })
}

/// The block counts of a Nemotron-H block pattern.
#[derive(Debug, Clone, Copy, Default)]
struct NemotronBlocks {
    /// Mamba-2 mixers (`M`).
    mamba: u64,
    /// Attention (`*`).
    attention: u64,
    /// Dense relu² MLPs (`-`).
    mlp: u64,
    /// MoE blocks (`E`, Nemotron-3).
    moe: u64,
}

/// Nemotron-H's blocks from `hybrid_override_pattern` (or `layers_block_type`):
/// Mamba-2 `M`, attention `*`, MLP `-` and (Nemotron-3) MoE `E`; each block is one
/// norm and one of them (NVIDIA's modeling_nemotron_h.py; transformers'
/// `NemotronHBlock`, whose `MIXER_TYPES` are mamba, attention, mlp and moe).
fn nemotron_blocks(
    v: &Value,
    layers: u64,
    warnings: &mut Vec<String>,
) -> Result<NemotronBlocks, EstimateError> {
    // Newer configs (transformers' NemotronHConfig) list the blocks by name in
    // `layers_block_type` instead: the same four kinds (an unknown name becomes '?',
    // refused below).
    let mut listed = String::new();
    if !present(v, "hybrid_override_pattern")
        && let Some(list) = v.get("layers_block_type").and_then(Value::as_array)
    {
        for x in list {
            listed.push(match x.as_str() {
                Some("mamba") => 'M',
                Some("attention") => '*',
                Some("mlp") => '-',
                Some("moe") => 'E',
                _ => '?',
            });
        }
    }
    let pattern = if listed.is_empty() {
        v.get("hybrid_override_pattern")
            .and_then(Value::as_str)
            .ok_or_else(|| {
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
    mixer_biases(v, "use_bias", "use_conv_bias", warnings);
    mixer_biases(v, "mamba_proj_bias", "use_conv_bias", warnings);
    Ok(NemotronBlocks {
        mamba: count('M'),
        attention: count('*'),
        mlp: count('-'),
        moe: count('E'),
    })
}

/// Nemotron-3's MoE blocks (`E`), as transformers' `NemotronHMoE` and vLLM's
/// `NemotronHMoE` (vllm/model_executor/models/nemotron_h.py) store them: a router
/// `gate.weight` [n_routed_experts, hidden] with its `gate.e_score_correction_bias`
/// [n_routed_experts], `n_routed_experts` non-gated relu² experts (up_proj, down_proj,
/// `moe_intermediate_size` wide; the caller counts them non-gated) and one shared
/// `NemotronHMLP` `moe_shared_expert_intermediate_size × n_shared_experts` wide (vLLM;
/// none when n_shared_experts is 0). The `-` blocks among the MLP blocks keep the
/// dense MLP (`Moe::dense_layers`). With `moe_latent_size` (Nemotron-3 Super) the
/// routed experts work at that width between `fc1_latent_proj` and `fc2_latent_proj`
/// (vLLM's NemotronHMoE; the shared expert and the router stay at hidden width).
fn nemotron_moe(
    v: &Value,
    blocks: NemotronBlocks,
    notes: &mut Vec<String>,
) -> Result<Moe, EstimateError> {
    let experts = need(v, &["n_routed_experts"])?;
    if experts < 2 {
        return Err(parse("n_routed_experts: at least 2 needed".into()));
    }
    let shared = match uint(v, "n_shared_experts")? {
        Some(n) => n,
        None => {
            notes.push("n_shared_experts absent: 1 assumed (transformers' NemotronHMoE)".into());
            1
        }
    };
    let shared_width = need(v, &["moe_shared_expert_intermediate_size"])?;
    notes.push("gate.e_score_correction_bias: counted in 16 bits (stored in fp32)".into());
    Ok(Moe {
        experts,
        active: need(v, &["num_experts_per_tok"])?,
        expert_intermediate: need(v, &["moe_intermediate_size"])?,
        // vLLM builds the n shared experts as one MLP n times as wide.
        shared_experts: u64::from(shared > 0),
        shared_intermediate: if shared > 0 {
            shared_width.saturating_mul(shared)
        } else {
            0
        },
        // The MLP blocks are the `-` and `E` blocks; the `-` ones stay dense (their
        // order does not change the count).
        dense_layers: blocks.mlp,
        every: 1,
        router_bias: true,
        shared_gate: false,
        // Nemotron-3 Super: fc1_latent_proj [latent, hidden] and fc2_latent_proj
        // [hidden, latent] around routed experts that work at the latent width.
        latent: uint(v, "moe_latent_size")?.unwrap_or(0),
    })
}

/// Nemotron-H's Mamba-2 mixer (NemotronHConfig: `mamba_num_heads` × `mamba_head_dim`,
/// `ssm_state_size`, `n_groups`, `conv_kernel`).
fn nemotron_mixer(v: &Value, layers: u64, notes: &mut Vec<String>) -> Result<Mixer, EstimateError> {
    let class = "NemotronHConfig";
    let heads = or_default(v, "mamba_num_heads", 128, class, notes)?;
    let head_dim = or_default(v, "mamba_head_dim", 64, class, notes)?;
    Ok(Mixer {
        kind: MixerKind::Mamba2,
        layers,
        inner: heads.saturating_mul(head_dim),
        state: or_default(v, "ssm_state_size", 128, class, notes)?,
        conv: or_default(v, "conv_kernel", 4, class, notes)?,
        dt_rank: 0,
        heads,
        key_heads: or_default(v, "n_groups", 8, class, notes)?,
        norms: false,
        gated_norm: true,
    })
}

/// Bamba's attention layers: those in `attn_layer_indices` (BambaConfig); none when
/// the key is absent.
fn bamba_attention_layers(
    v: &Value,
    layers: u64,
    notes: &mut Vec<String>,
) -> Result<u64, EstimateError> {
    let mut attention: Vec<u64> = Vec::new();
    match v.get("attn_layer_indices") {
        None | Some(Value::Null) => notes.push(
            "attn_layer_indices absent: every layer is a Mamba-2 layer (BambaConfig's default)"
                .into(),
        ),
        Some(Value::Array(list)) => {
            for x in list {
                let i = x.as_u64().filter(|i| *i < layers).ok_or_else(|| {
                    parse(format!(
                        "attn_layer_indices: {} is not a layer index below num_hidden_layers ({layers})",
                        shown(x)
                    ))
                })?;
                if !attention.contains(&i) {
                    attention.push(i);
                }
            }
        }
        Some(x) => {
            return Err(parse(format!(
                "attn_layer_indices should be a list of layer indices, found {}",
                shown(x)
            )));
        }
    }
    Ok(attention.len() as u64)
}

/// GraniteMoeHybrid's Mamba-2 layers: the `"mamba"` entries of `layer_types` (one per
/// layer), or every layer when the key is absent (GraniteMoeHybridConfig's
/// `layers_block_type`).
fn granite_mamba_layers(
    v: &Value,
    layers: u64,
    notes: &mut Vec<String>,
) -> Result<u64, EstimateError> {
    match v.get("layer_types").and_then(Value::as_array) {
        Some(types) => {
            if types.len() as u64 != layers {
                return Err(parse(format!(
                    "layer_types has {} entries, num_hidden_layers {layers}",
                    types.len()
                )));
            }
            Ok(types.iter().filter(|t| t.as_str() == Some("mamba")).count() as u64)
        }
        None => {
            notes.push(
                "layer_types absent: every layer is a Mamba-2 layer (GraniteMoeHybridConfig's default)"
                    .into(),
            );
            Ok(layers)
        }
    }
}

/// The Mamba-2 mixer of Bamba and GraniteMoeHybrid (transformers' BambaMixer, which
/// GraniteMoeHybridMambaLayer reuses): `mamba_expand` × hidden wide, always with the
/// gated norm.
fn expand_mamba2(
    v: &Value,
    hidden: u64,
    layers: u64,
    class: &str,
    notes: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<Mixer, EstimateError> {
    let expand = or_default(v, "mamba_expand", 2, class, notes)?;
    let inner = expand.saturating_mul(hidden);
    mamba2_mixer(
        v,
        inner,
        "mamba_expand × hidden",
        layers,
        class,
        notes,
        warnings,
    )
}

/// A Mamba-2 mixer `inner` wide (`width` names where that comes from) read from the
/// `mamba_*` keys Bamba, GraniteMoeHybrid and Falcon-H1 share: `mamba_d_head` "auto"
/// is the width over `mamba_n_heads`, and heads × head dim must be the width, as
/// their config classes require.
fn mamba2_mixer(
    v: &Value,
    inner: u64,
    width: &str,
    layers: u64,
    class: &str,
    notes: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<Mixer, EstimateError> {
    let heads = or_default(v, "mamba_n_heads", 128, class, notes)?;
    let head_dim = match v.get("mamba_d_head") {
        Some(Value::String(s)) if s == "auto" => inner.checked_div(heads).unwrap_or(0),
        Some(Value::Null) | None => {
            notes.push(format!(
                "mamba_d_head absent: \"auto\" = {width} / mamba_n_heads assumed ({class}'s default)"
            ));
            inner.checked_div(heads).unwrap_or(0)
        }
        Some(_) => need(v, &["mamba_d_head"])?,
    };
    if heads.checked_mul(head_dim) != Some(inner) {
        return Err(parse(format!(
            "mamba_n_heads × mamba_d_head ({heads} × {head_dim}) is not {width} ({inner})"
        )));
    }
    mixer_biases(v, "mamba_proj_bias", "mamba_conv_bias", warnings);
    Ok(Mixer {
        kind: MixerKind::Mamba2,
        layers,
        inner,
        state: or_default(v, "mamba_d_state", 256, class, notes)?,
        conv: or_default(v, "mamba_d_conv", 4, class, notes)?,
        dt_rank: 0,
        heads,
        key_heads: or_default(v, "mamba_n_groups", 1, class, notes)?,
        norms: false,
        gated_norm: true,
    })
}

/// Falcon-H1's Mamba-2 mixer (transformers' FalconH1Config / FalconH1Mixer), which
/// runs beside attention in every layer: its width is `mamba_d_ssm` (not expand ×
/// hidden unless that is null), its gated RMSNorm exists only with `mamba_rms_norm`,
/// and `in_proj` / `conv1d` / `out_proj` take their biases from `mamba_proj_bias`,
/// `mamba_conv_bias` and `projectors_bias`. The muP multipliers scale activations
/// and hold no parameters.
fn falcon_h1_mixer(
    v: &Value,
    hidden: u64,
    layers: u64,
    notes: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<Mixer, EstimateError> {
    let class = "FalconH1Config";
    let inner = match v.get("mamba_d_ssm") {
        // An explicit null: FalconH1Mixer falls back to expand × hidden.
        Some(Value::Null) => {
            let expand = or_default(v, "mamba_expand", 2, class, notes)?;
            notes.push("mamba_d_ssm null: the mixer is mamba_expand × hidden wide".into());
            expand.saturating_mul(hidden)
        }
        _ => or_default(v, "mamba_d_ssm", 1024, class, notes)?,
    };
    let mut mixer = mamba2_mixer(v, inner, "mamba_d_ssm", layers, class, notes, warnings)?;
    if flag(v, "projectors_bias") == Some(true) {
        warnings.push(
            "projectors_bias = true is not modelled: the mixer's out_proj is counted without a bias"
                .into(),
        );
    }
    if flag(v, "mamba_use_mlp") == Some(false) {
        warnings.push(
            "mamba_use_mlp = false is not modelled: every layer is counted with its MLP, as transformers' FalconH1DecoderLayer builds it"
                .into(),
        );
    }
    mixer.gated_norm = match flag(v, "mamba_rms_norm") {
        Some(on) => on,
        None => {
            notes.push(format!(
                "mamba_rms_norm absent: false assumed ({class}'s default; no gated norm in the mixer)"
            ));
            false
        }
    };
    Ok(mixer)
}

/// Qwen3-Next's Gated DeltaNet layers (transformers' Qwen3NextConfig /
/// Qwen3NextGatedDeltaNet): `layer_types`, else every `full_attention_interval`-th
/// layer is full attention and the others linear attention.
fn delta_net(v: &Value, layers: u64, notes: &mut Vec<String>) -> Result<Mixer, EstimateError> {
    let class = "Qwen3NextConfig";
    let linear = match v.get("layer_types").and_then(Value::as_array) {
        Some(t) => t
            .iter()
            .filter(|x| x.as_str() == Some("linear_attention"))
            .count() as u64,
        None => {
            let every = or_default(v, "full_attention_interval", 4, class, notes)?.max(1);
            layers.saturating_sub(layers.checked_div(every).unwrap_or(0))
        }
    };
    let heads = or_default(v, "linear_num_value_heads", 32, class, notes)?;
    let v_dim = or_default(v, "linear_value_head_dim", 128, class, notes)?;
    Ok(Mixer {
        kind: MixerKind::DeltaNet,
        layers: linear,
        inner: heads.saturating_mul(v_dim),
        state: or_default(v, "linear_key_head_dim", 128, class, notes)?,
        conv: or_default(v, "linear_conv_kernel_dim", 4, class, notes)?,
        dt_rank: 0,
        heads,
        key_heads: or_default(v, "linear_num_key_heads", 16, class, notes)?,
        norms: false,
        gated_norm: true,
    })
}

/// Parameters of Gemma-3's SigLIP vision tower and its projector, counted as the
/// checkpoint stores them (transformers' SiglipVisionModel without the pooling
/// head, and Gemma3MultiModalProjector: `mm_input_projection_weight`
/// [vision, text hidden] + `mm_soft_emb_norm` [vision]); `None` for other towers.
// Every factor is at most 2^20 (checked below) but the text hidden size (a u64):
// the u128 products stay below 2^90.
#[allow(clippy::arithmetic_side_effects)]
fn gemma3_siglip(
    root: &Value,
    tower: &Value,
    text_hidden: u64,
) -> Result<Option<u64>, EstimateError> {
    let is = |v: &Value, t: &str| v.get("model_type").and_then(Value::as_str) == Some(t);
    if !is(root, "gemma3")
        || !is(tower, "siglip_vision_model")
        || flag(tower, "vision_use_head") != Some(false)
    {
        return Ok(None);
    }
    // SiglipVisionConfig's defaults where the config is silent.
    let get = |k: &str, d: u64| uint(tower, k).map(|x| x.unwrap_or(d));
    let (h, inter, layers) = (
        get("hidden_size", 768)?,
        get("intermediate_size", 3072)?,
        get("num_hidden_layers", 12)?,
    );
    let (channels, image, patch) = (
        get("num_channels", 3)?,
        get("image_size", 224)?,
        get("patch_size", 16)?.max(1),
    );
    // Far above any real tower; keeps every product below in u128.
    if [h, inter, layers, channels, image, patch]
        .into_iter()
        .any(|v| v > 1 << 20)
    {
        return Err(parse("vision_config: absurdly large".into()));
    }
    let [h, inter, layers, channels, side, patch, text] = [
        h,
        inter,
        layers,
        channels,
        image.checked_div(patch).unwrap_or(0),
        patch,
        text_hidden,
    ]
    .map(u128::from);
    // Patch embedding (conv weight + bias), positions, post-layernorm.
    let embed = h * channels * patch * patch + h + side * side * h + 2 * h;
    // Per layer: two LayerNorms, q/k/v/out with biases, fc1 and fc2 with biases.
    let layer = 4 * h + 4 * (h * h + h) + 2 * h * inter + inter + h;
    let projector = h * text + h;
    let total = embed + layers * layer + projector;
    u64::try_from(total)
        .map(Some)
        .map_err(|_| parse("vision_config: absurdly large".into()))
}

/// Whether a module-name list (`modules_to_not_convert`, `ignore`) keeps the
/// attention projections out of quantisation.
fn keeps_attention(list: Option<&Value>) -> bool {
    list.and_then(Value::as_array).is_some_and(|l| {
        l.iter()
            .filter_map(Value::as_str)
            .any(|m| m.contains("self_attn") || m.ends_with(".attn") || m.contains("attention"))
    })
}

/// The storage-format name for a `quantization_config`, and whether it leaves the
/// attention projections unquantised; an unrecognised method is warned about.
fn quant_format(q: Option<&Value>, warnings: &mut Vec<String>) -> Option<(String, bool)> {
    let q = q?;
    let method = q
        .get("quant_method")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_ascii_lowercase();
    let bits = q.get("bits").and_then(Value::as_u64).unwrap_or(4);
    let group = q.get("group_size").and_then(Value::as_i64).unwrap_or(128);
    let skip = keeps_attention(q.get("modules_to_not_convert"));
    let name = match method.as_str() {
        "gptq" if group > 0 => Some(format!("gptq-{bits}-g{group}")),
        "awq" if group > 0 => Some(format!("awq-{bits}-g{group}")),
        "fp8" => Some(
            if q.get("weight_block_size").is_some() {
                "fp8-block"
            } else {
                "fp8"
            }
            .into(),
        ),
        "mxfp4" => Some("mxfp4".into()),
        "bitsandbytes" => {
            if q.get("load_in_8bit").and_then(Value::as_bool) == Some(true) {
                Some("int8".into())
            } else {
                let ty = q
                    .get("bnb_4bit_quant_type")
                    .and_then(Value::as_str)
                    .unwrap_or("fp4");
                let dq = q.get("bnb_4bit_use_double_quant").and_then(Value::as_bool) == Some(true);
                Some(format!("{ty}{}", if dq { "-dq" } else { "" }))
            }
        }
        "compressed-tensors" => {
            let f = compressed_tensors(q);
            let ignore = keeps_attention(q.get("ignore"));
            return match f {
                Some(f) => Some((f, ignore)),
                None => {
                    warnings.push("quantization_config: this compressed-tensors scheme is not modelled; weights are counted in bf16".into());
                    None
                }
            };
        }
        _ => None,
    };
    if name.is_none() {
        warnings.push(format!(
            "quantization_config (quant_method {method:?}) is not modelled: weights are counted in the format you give (bf16 by default)"
        ));
    }
    name.map(|n| (n, skip))
}

/// compressed-tensors `config_groups`: the first group's weight scheme.
fn compressed_tensors(q: &Value) -> Option<String> {
    let groups = q.get("config_groups")?.as_object()?;
    if groups.len() != 1 {
        return None;
    }
    let group = groups.values().next()?;
    let w = group.get("weights")?;
    let activations = group.get("input_activations").is_some_and(|a| !a.is_null());
    let bits = w.get("num_bits")?.as_u64()?;
    let ty = w.get("type").and_then(Value::as_str).unwrap_or("int");
    let strategy = w
        .get("strategy")
        .and_then(Value::as_str)
        .unwrap_or("tensor");
    match (bits, ty, strategy) {
        (4, "float", "tensor_group") => Some(if activations { "nvfp4" } else { "nvfp4a16" }.into()),
        (8, "float", "channel") => Some("fp8-channel".into()),
        (8, "float", "block") => Some("fp8-block".into()),
        (4, "int", "group") if w.get("symmetric").and_then(Value::as_bool) != Some(false) => {
            let g = w.get("group_size")?.as_u64()?;
            Some(format!("w4a16-g{g}"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_of_the_wrong_type_is_named_with_what_was_found() {
        let base = r#""hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100"#;
        for (value, found) in [
            ("-1", "found -1"),
            ("2.5", "found 2.5"),
            (r#""32""#, r#"found "32""#),
            ("true", "found true"),
            ("[32]", "found an array"),
        ] {
            let text = format!(r#"{{{base}, "num_hidden_layers": {value}}}"#);
            let e = parse_config(&text).unwrap_err().to_string();
            assert!(
                e.contains("num_hidden_layers should be a non-negative integer")
                    && e.contains(found),
                "{value}: {e}"
            );
        }
    }

    #[test]
    fn qwen2_has_qkv_bias_and_sliding_layers() {
        let c = parse_config(
            r#"{"model_type":"qwen2","hidden_size":896,"num_hidden_layers":24,"num_attention_heads":14,
            "num_key_value_heads":2,"intermediate_size":4864,"vocab_size":151936,"tie_word_embeddings":true,
            "sliding_window":32768,"use_sliding_window":false,"max_window_layers":21}"#,
        )
        .unwrap();
        assert!(c.arch.qkv_bias);
        assert_eq!(c.arch.head_dim, 64);
        assert_eq!(c.sliding_window, None);
    }

    #[test]
    fn quantization_config_names_a_format() {
        let c = parse_config(
            r#"{"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,
            "num_key_value_heads":8,"intermediate_size":14336,"vocab_size":128256,
            "quantization_config":{"quant_method":"gptq","bits":4,"group_size":128}}"#,
        )
        .unwrap();
        assert_eq!(c.format.as_deref(), Some("gptq-4-g128"));
        assert!(!c.arch.tied_embeddings);
    }

    fn field<'a>(c: &'a ImportedConfig, key: &str) -> Option<&'a str> {
        c.warnings
            .iter()
            .chain(&c.notes)
            .find(|w| w.contains(key))
            .map(String::as_str)
    }

    #[test]
    fn falcon_multi_query_has_one_kv_head_and_one_norm() {
        let c = parse_config(
            r#"{"model_type":"falcon","hidden_size":4544,"num_attention_heads":71,"num_hidden_layers":32,
            "vocab_size":65024,"multi_query":true,"parallel_attn":true,"bias":false}"#,
        )
        .unwrap();
        assert_eq!((c.arch.kv_heads, c.arch.layer_norms), (1, 1));
        assert!(c.arch.layernorm_bias && !c.arch.qkv_bias && !c.arch.gated_mlp);
        assert!(c.arch.tied_embeddings);
    }

    #[test]
    fn gpt_oss_keeps_attention_in_bf16_and_counts_sinks_and_biases() {
        let c = parse_config(
            r#"{"model_type":"gpt_oss","hidden_size":2880,"num_hidden_layers":2,"num_attention_heads":64,
            "num_key_value_heads":8,"head_dim":64,"intermediate_size":2880,"vocab_size":201088,
            "num_local_experts":32,"num_experts_per_tok":4,"attention_bias":true,"tie_word_embeddings":false,
            "sliding_window":128,"layer_types":["sliding_attention","full_attention"],
            "quantization_config":{"quant_method":"mxfp4","modules_to_not_convert":["model.layers.*.self_attn"]}}"#,
        )
        .unwrap();
        assert_eq!(c.format.as_deref(), Some("mxfp4"));
        assert_eq!(c.attention_format.as_deref(), Some("bf16"));
        assert!(c.arch.attn_sinks && c.arch.mlp_bias && c.arch.moe.unwrap().router_bias);
        assert_eq!((c.sliding_window, c.sliding_layers), (Some(128), Some(1)));
    }

    #[test]
    fn unknown_memory_fields_towers_and_quantisers_are_named() {
        let c = parse_config(
            r#"{"model_type":"mystery","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
            "vocab_size":100,"intermediate_size":128,"vision_config":{"hidden_size":32},
            "mlp_only_layers":[1],"quantization_config":{"quant_method":"hqq"}}"#,
        )
        .unwrap();
        for key in ["mystery", "vision tower", "mlp_only_layers", "hqq"] {
            assert!(
                c.warnings.iter().any(|w| w.contains(key)),
                "{key}: {:?}",
                c.warnings
            );
        }
        assert!(field(&c, "num_key_value_heads absent").is_some());
        assert!(field(&c, "tie_word_embeddings absent").is_some());
    }

    #[test]
    fn state_space_models_are_refused_with_a_reason() {
        for mt in ["lfm2", "minimax", "zamba2"] {
            let e =
                parse_config(&format!(r#"{{"model_type":"{mt}","hidden_size":64}}"#)).unwrap_err();
            assert!(e.to_string().contains("constant per-sequence state"), "{e}");
        }
        let e = parse_config(
            r#"{"model_type":"new","layer_types":["linear_attention","full_attention"]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("linear_attention"), "{e}");
    }

    /// The total of a shape given as `key=value` pairs, through the flags' parser.
    fn total(pairs: &[(&str, String)]) -> u64 {
        let (input, errors) =
            crate::params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        let a = input.arch.expect("an architecture");
        a.weights(&crate::arch::ModuleFormats {
            linear: crate::format::StorageFormat::parse("f", "bf16").unwrap(),
            attention: crate::format::StorageFormat::parse("f", "bf16").unwrap(),
            vocab: crate::format::StorageFormat::parse("f", "bf16").unwrap(),
            kept: crate::format::StorageFormat::parse("f", "bf16").unwrap(),
        })
        .unwrap()
        .params()
    }

    #[test]
    fn mamba_from_a_config_lists_its_defaults_and_matches_the_same_shape_typed_as_flags() {
        // A sparse Mamba config: MambaConfig's defaults are assumed and listed.
        let c = parse_config(
            r#"{"model_type":"mamba","hidden_size":768,"num_hidden_layers":24,"vocab_size":50280}"#,
        )
        .unwrap();
        let m = c.arch.mixer.unwrap();
        assert_eq!(
            (m.layers, m.inner, m.state, m.conv, m.dt_rank),
            (24, 1536, 16, 4, 48)
        );
        for key in [
            "state_size",
            "conv_kernel",
            "time_step_rank",
            "expand",
            "tie_word_embeddings",
        ] {
            assert!(field(&c, key).is_some(), "{key}: {:?}", c.notes);
        }
        // mamba-130m as typed on the command line: 129 135 360 parameters
        // (the published mamba-130m-hf total).
        let flags: Vec<(&str, String)> = [
            ("layers", "24"),
            ("hidden", "768"),
            ("vocab", "50280"),
            ("tied-embeddings", "true"),
            ("layer-norms", "1"),
            ("mixer", "mamba"),
            ("state-layers", "24"),
            ("mixer-inner", "1536"),
            ("mixer-state", "16"),
            ("mixer-dt-rank", "48"),
        ]
        .iter()
        .map(|(k, v)| (*k, v.to_string()))
        .collect();
        assert_eq!(total(&flags), 129_135_360);
        // A mixer without its layer count is refused, naming the key.
        let (_, errors) = crate::params::from_pairs(
            flags
                .iter()
                .filter(|(k, _)| *k != "state-layers")
                .map(|(k, v)| (*k, v.as_str())),
        );
        assert!(
            errors
                .iter()
                .any(|e| e.to_string().starts_with("state-layers:")),
            "{errors:?}"
        );
        assert_eq!(total(&c.pairs()), 129_135_360);
    }

    #[test]
    fn mamba2_reads_heads_and_groups_and_refuses_an_inconsistent_width() {
        let c = parse_config(
            r#"{"model_type":"mamba2","hidden_size":1536,"num_hidden_layers":48,"vocab_size":50288,
            "num_heads":48,"head_dim":64,"state_size":128,"n_groups":1,"tie_word_embeddings":true}"#,
        )
        .unwrap();
        let m = c.arch.mixer.unwrap();
        assert_eq!((m.inner, m.heads, m.key_heads, m.state), (3072, 48, 1, 128));
        assert!(field(&c, "expand absent").is_some());
        // conv (3072 + 2·128) × 3 + SSM 48 × 64 × 128 values per layer (vLLM's shapes).
        assert_eq!(m.state_values().unwrap(), (3328 * 3, 48 * 64 * 128));
        // Through the flags: the same shape, 780 161 280 parameters (mamba2-780m's
        // layout, which its model page rounds to 780M).
        let (input, errors) =
            crate::params::from_pairs(c.pairs().iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(input.arch, Some(c.arch));
        assert_eq!(total(&c.pairs()), 780_161_280);
        let e = parse_config(
            r#"{"model_type":"mamba2","hidden_size":1536,"num_hidden_layers":2,"vocab_size":10,"num_heads":40,"head_dim":64}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("num_heads × head_dim"), "{e}");
    }

    #[test]
    fn nemotron_h_blocks_come_from_the_pattern_and_unknown_blocks_are_refused() {
        let base = r#""model_type":"nemotron_h","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,
            "intermediate_size":128,"vocab_size":100,"mamba_num_heads":4,"mamba_head_dim":16,"ssm_state_size":8,"n_groups":2"#;
        let c = parse_config(&format!(
            r#"{{{base},"num_hidden_layers":6,"hybrid_override_pattern":"M-M*-M"}}"#
        ))
        .unwrap();
        assert_eq!(c.arch.mixer.unwrap().layers, 3);
        assert_eq!(
            (c.arch.attention_layers(), c.arch.mlp_layer_count()),
            (1, 2)
        );
        assert!(!c.arch.gated_mlp && c.arch.layer_norms == 1 && !c.arch.tied_embeddings);
        assert!(c.arch.moe.is_none());
        assert!(
            c.warnings
                .iter()
                .all(|w| !w.contains("hybrid_override_pattern"))
        );
        let e = parse_config(&format!(
            r#"{{{base},"num_hidden_layers":4,"hybrid_override_pattern":"MXM*"}}"#
        ))
        .unwrap_err();
        assert!(e.to_string().contains("'X'"), "{e}");
        assert!(e.to_string().contains("E/moe"), "{e}");
        let e = parse_config(&format!(
            r#"{{{base},"num_hidden_layers":5,"hybrid_override_pattern":"M-M*"}}"#
        ))
        .unwrap_err();
        assert!(e.to_string().contains("4 blocks"), "{e}");
    }

    /// Parameters and active parameters of an architecture, from its tensors.
    fn counts(a: &Architecture) -> (u64, u64) {
        let tensors = a.tensors().unwrap();
        let all = tensors.iter().map(|t| t.params().unwrap()).sum();
        let active = tensors
            .iter()
            .map(|t| crate::units::checked_product(&[t.rows, t.cols, t.active], "test").unwrap())
            .sum();
        (all, active)
    }

    #[test]
    fn nemotron_3_moe_blocks_hold_a_router_with_its_bias_non_gated_experts_and_a_shared_expert() {
        let base = r#""model_type":"nemotron_h","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,
            "intermediate_size":128,"vocab_size":100,"mamba_num_heads":4,"mamba_head_dim":16,"ssm_state_size":8,
            "n_groups":2,"num_hidden_layers":5,"hybrid_override_pattern":"ME*-E","n_routed_experts":4,
            "num_experts_per_tok":2,"moe_intermediate_size":32,"moe_shared_expert_intermediate_size":48"#;
        let c = parse_config(&format!(r#"{{{base},"n_shared_experts":1}}"#)).unwrap();
        let m = c.arch.moe.expect("the E blocks are MoE");
        assert_eq!((m.experts, m.active, m.expert_intermediate), (4, 2, 32));
        assert_eq!((m.shared_experts, m.shared_intermediate), (1, 48));
        assert!(m.router_bias && !m.shared_gate);
        // Two E blocks and one `-` block carry an MLP; the `-` one stays dense.
        assert_eq!(c.arch.mlp_layer_count(), 3);
        assert_eq!(m.moe_layers(c.arch.mlp_layer_count()), 2);
        // By hand, as modeling_nemotron_h.py stores the tensors:
        //   embeddings + lm_head 2 × 100 × 64 = 12 800; 5 block norms + norm_f 6 × 64 = 384;
        //   M: in_proj (2·64 + 2·2·8 + 4) × 64 = 10 496, conv1d 96 × 4 + 96 = 480,
        //      dt_bias/A_log/D 12, norm 64, out_proj 4 096: 15 148;
        //   *: q 4 096 + k 2 048 + v 2 048 + o 4 096 = 12 288;
        //   -: up + down 2 × 128 × 64 = 16 384;
        //   E: gate 4 × 64 + correction bias 4 = 260, experts 4 × 2 × 32 × 64 = 16 384,
        //      shared 2 × 48 × 64 = 6 144: 22 788, twice: 45 576.
        // Active: 2 of the 4 experts in each E block (− 2 × 2 × 4 096).
        assert_eq!(counts(&c.arch), (102_580, 102_580 - 16_384));
        // The same shape typed as keys gives the same count.
        assert_eq!(total(&c.pairs()), 102_580);
        let (input, errors) =
            crate::params::from_pairs(c.pairs().iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(input.arch, Some(c.arch));
        // Absent n_shared_experts: one shared expert, named in the notes; 0: none;
        // 2: one MLP twice as wide (vLLM's NemotronHMoE).
        let c = parse_config(&format!("{{{base}}}")).unwrap();
        assert_eq!(c.arch.moe.unwrap().shared_experts, 1);
        assert!(
            field(&c, "n_shared_experts absent").is_some(),
            "{:?}",
            c.notes
        );
        let c = parse_config(&format!(r#"{{{base},"n_shared_experts":0}}"#)).unwrap();
        assert_eq!(counts(&c.arch).0, 102_580 - 2 * 6_144);
        let c = parse_config(&format!(r#"{{{base},"n_shared_experts":2}}"#)).unwrap();
        let m = c.arch.moe.unwrap();
        assert_eq!((m.shared_experts, m.shared_intermediate), (1, 96));
        // A latent MoE (Nemotron-3 Super): fc1_latent_proj [16, 64] and fc2_latent_proj
        // [64, 16] per E block, the routed experts at width 16 (4 × 2 × 32 × 16 = 4 096
        // instead of 16 384), the router and the shared expert at 64: each E block
        // 260 + 2 × 1 024 + 4 096 + 6 144 = 12 548 instead of 22 788.
        let c = parse_config(&format!(r#"{{{base},"moe_latent_size":16}}"#)).unwrap();
        assert_eq!(c.arch.moe.unwrap().latent, 16);
        let latent_total = 102_580 - 2 * (22_788 - 12_548);
        assert_eq!(
            counts(&c.arch),
            (latent_total, latent_total - 2 * 2 * 2 * 32 * 16)
        );
        assert_eq!(total(&c.pairs()), latent_total);
        // MTP "*E" (vLLM's nemotron_h_mtp.py): an attention block (12 288) and an E
        // block (22 788), each with its norm, enorm + hnorm + final_layernorm, eh_proj
        // 64 × 128; no embedding or lm_head copies; none of it active.
        let mtp = r#""num_nextn_predict_layers":1,"mtp_hybrid_override_pattern":"*E""#;
        let c = parse_config(&format!("{{{base},{mtp}}}")).unwrap();
        assert_eq!(c.arch.mtp_layers, 1);
        let with_mtp = 102_580 + 12_288 + 22_788 + 5 * 64 + 64 * 128;
        assert_eq!(counts(&c.arch), (with_mtp, 102_580 - 16_384));
        assert_eq!(total(&c.pairs()), with_mtp);
        // Another (or no) MTP pattern is named and left out, not miscounted.
        let c = parse_config(&format!(r#"{{{base},"num_nextn_predict_layers":1}}"#)).unwrap();
        assert_eq!(c.arch.mtp_layers, 0);
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("num_nextn_predict_layers")),
            "{:?}",
            c.warnings
        );
        // A float32 SSM cache (vLLM reads the key) sets the per-layer state bytes:
        // conv (64 + 2·2·8) × 3 values in the model's 16 bits + SSM 4 × 16 × 8 in 32.
        let c = parse_config(&format!(r#"{{{base},"mamba_ssm_cache_dtype":"float32"}}"#)).unwrap();
        let bytes = 96 * 3 * 2 + 64 * 8 * 4;
        assert_eq!(c.state_bytes, Some(bytes));
        assert!(
            field(&c, "mamba_ssm_cache_dtype").is_some(),
            "{:?}",
            c.notes
        );
        assert!(c.pairs().contains(&("state-bytes", bytes.to_string())));
        let c = parse_config(&format!(
            r#"{{{base},"mamba_ssm_cache_dtype":"float32","torch_dtype":"float32"}}"#
        ))
        .unwrap();
        assert_eq!(c.state_bytes, Some(96 * 3 * 4 + 64 * 8 * 4));
        let c = parse_config(&format!("{{{base}}}")).unwrap();
        assert_eq!(c.state_bytes, None);
        // The blocks listed by name (newer configs) read the same.
        let named = format!("{{{base}}}").replace(
            r#""hybrid_override_pattern":"ME*-E""#,
            r#""layers_block_type":["mamba","moe","attention","mlp","moe"]"#,
        );
        let c = parse_config(&named).unwrap();
        assert_eq!(counts(&c.arch).0, 102_580);
        assert!(c.warnings.iter().all(|w| !w.contains("layers_block_type")));
        let e = parse_config(&named.replace(r#""mlp""#, r#""hybrid""#)).unwrap_err();
        assert!(e.to_string().contains("unknown block"), "{e}");
        // An E block needs its experts.
        let e = parse_config(&format!("{{{base}}}").replace(r#""n_routed_experts":4,"#, ""))
            .unwrap_err();
        assert!(e.to_string().contains("n_routed_experts"), "{e}");
    }

    #[test]
    fn bamba_has_attention_at_its_indices_and_mamba2_elsewhere() {
        let base = r#""model_type":"bamba","hidden_size":64,"num_hidden_layers":6,"num_attention_heads":4,
            "num_key_value_heads":2,"intermediate_size":128,"vocab_size":100,"mamba_n_heads":8,
            "mamba_d_state":16,"mamba_n_groups":1"#;
        let c = parse_config(&format!(r#"{{{base},"attn_layer_indices":[1,4,4]}}"#)).unwrap();
        let m = c.arch.mixer.unwrap();
        // expand (2, BambaConfig's default) × hidden, heads of 16 ("auto").
        assert_eq!((m.layers, m.inner, m.heads), (4, 128, 8));
        assert!(m.gated_norm && c.arch.gated_mlp && !c.arch.tied_embeddings);
        assert_eq!(
            (c.arch.attention_layers(), c.arch.mlp_layer_count()),
            (2, 6)
        );
        assert!(field(&c, "mamba_expand absent").is_some());
        let (input, errors) =
            crate::params::from_pairs(c.pairs().iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(input.arch, Some(c.arch));
        let e = parse_config(&format!(r#"{{{base},"attn_layer_indices":[6]}}"#)).unwrap_err();
        assert!(e.to_string().contains("below num_hidden_layers (6)"), "{e}");
        let e = parse_config(&format!(
            r#"{{{base},"attn_layer_indices":[1],"mamba_d_head":10}}"#
        ))
        .unwrap_err();
        assert!(e.to_string().contains("8 × 10"), "{e}");
    }

    #[test]
    fn granite_moe_hybrid_reads_layer_types_experts_and_the_shared_mlp() {
        let base = r#""model_type":"granitemoehybrid","hidden_size":64,"num_hidden_layers":4,
            "num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":32,"vocab_size":100,
            "mamba_n_heads":8,"mamba_d_head":16,"mamba_d_state":16,"shared_intermediate_size":48,
            "layer_types":["mamba","attention","mamba","mamba"],"embedding_multiplier":12,
            "attention_multiplier":0.015625,"residual_multiplier":0.22,"logits_scaling":6"#;
        let c = parse_config(&format!(
            r#"{{{base},"num_local_experts":4,"num_experts_per_tok":2}}"#
        ))
        .unwrap();
        let m = c.arch.mixer.unwrap();
        assert_eq!((m.layers, m.inner, m.heads), (3, 128, 8));
        assert_eq!(c.arch.attention_layers(), 1);
        let moe = c.arch.moe.unwrap();
        assert_eq!(
            (moe.experts, moe.active, moe.expert_intermediate),
            (4, 2, 32)
        );
        assert_eq!((moe.shared_experts, moe.shared_intermediate), (1, 48));
        assert!(!moe.router_bias && !c.arch.tied_embeddings);
        // The muP multipliers hold no parameters: no warning.
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let (input, errors) =
            crate::params::from_pairs(c.pairs().iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(input.arch, Some(c.arch));
        // No experts: the shared MLP is the layer's dense MLP.
        let d = parse_config(&format!(r#"{{{base},"num_local_experts":0}}"#)).unwrap();
        assert_eq!((d.arch.moe, d.arch.intermediate), (None, 48));
        // Absent, GraniteMoeHybridConfig's 8 experts are assumed and said.
        let dflt = parse_config(&format!(r#"{{{base},"num_experts_per_tok":2}}"#)).unwrap();
        assert_eq!(dflt.arch.moe.unwrap().experts, 8);
        assert!(field(&dflt, "num_local_experts absent").is_some());
        let e = parse_config(&format!(
            r#"{{{base},"num_local_experts":0,"num_hidden_layers":5}}"#
        ))
        .unwrap_err();
        assert!(e.to_string().contains("4 entries"), "{e}");
    }

    #[test]
    fn falcon_h1_runs_attention_beside_the_mixer_in_every_layer() {
        let base = r#""model_type":"falcon_h1","hidden_size":64,"num_hidden_layers":3,"num_attention_heads":4,
            "num_key_value_heads":2,"head_dim":8,"intermediate_size":128,"vocab_size":100,"mamba_n_heads":4,
            "mamba_d_state":8,"mamba_n_groups":1,"mamba_d_conv":4,"ssm_multipliers":[1,1,1,1,1],"key_multiplier":0.5"#;
        let c = parse_config(&format!(
            r#"{{{base},"mamba_d_ssm":96,"mamba_d_head":24,"mamba_rms_norm":true}}"#
        ))
        .unwrap();
        let m = c.arch.mixer.unwrap();
        // mamba_d_ssm (96), not expand × hidden (128), is the mixer's width.
        assert_eq!((m.layers, m.inner, m.heads, m.key_heads), (3, 96, 4, 1));
        assert!(m.gated_norm && c.arch.gated_mlp && !c.arch.tied_embeddings);
        assert_eq!((c.arch.attention_layers(), c.arch.layer_norms), (3, 2));
        // The multipliers are no tensors and need no warning.
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        // What --config hands the flags reads back to the same architecture.
        let (input, errors) =
            crate::params::from_pairs(c.pairs().iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(input.arch, Some(c.arch));
        // Without mamba_rms_norm (FalconH1Config's default) there is no gated norm,
        // and mamba_d_head "auto" is the width over the heads.
        let plain = parse_config(&format!(
            r#"{{{base},"mamba_d_ssm":96,"mamba_d_head":"auto"}}"#
        ))
        .unwrap();
        assert!(!plain.arch.mixer.unwrap().gated_norm);
        assert!(field(&plain, "mamba_rms_norm absent").is_some());
        assert_eq!(total(&c.pairs()) - total(&plain.pairs()), 3 * 96);
        // Biases that are not counted are named.
        let b = parse_config(&format!(
            r#"{{{base},"mamba_d_ssm":96,"projectors_bias":true,"mamba_proj_bias":true}}"#
        ))
        .unwrap();
        assert!(field(&b, "projectors_bias").is_some() && field(&b, "mamba_proj_bias").is_some());
        // FalconH1Config's own check: heads × head dim must be the width (here the
        // default mamba_d_ssm 1024 against 4 × 24).
        let e = parse_config(&format!(r#"{{{base},"mamba_d_head":24}}"#)).unwrap_err();
        assert!(e.to_string().contains("mamba_d_ssm (1024)"), "{e}");
    }

    #[test]
    fn jamba_and_qwen3_next_split_layers_between_attention_and_the_mixer() {
        let j = parse_config(
            r#"{"model_type":"jamba","hidden_size":64,"num_hidden_layers":16,"num_attention_heads":4,
            "num_key_value_heads":2,"intermediate_size":128,"vocab_size":100,"num_experts":4,"num_experts_per_tok":2}"#,
        )
        .unwrap();
        // JambaConfig's defaults: attention at i % 8 == 4 (layers 4 and 12).
        assert_eq!(j.arch.mixer.unwrap().layers, 14);
        assert_eq!(j.arch.attention_layers(), 2);
        assert!(field(&j, "attn_layer_period absent").is_some());
        assert!(field(&j, "mamba_dt_rank absent").is_some());
        let q = parse_config(
            r#"{"model_type":"qwen3_next","hidden_size":64,"num_hidden_layers":8,"num_attention_heads":4,
            "num_key_value_heads":2,"head_dim":16,"intermediate_size":128,"vocab_size":100,"num_experts":4,
            "num_experts_per_tok":2,"moe_intermediate_size":32,"shared_expert_intermediate_size":32,
            "linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":8,"linear_value_head_dim":8,
            "layer_types":["linear_attention","linear_attention","linear_attention","full_attention",
            "linear_attention","linear_attention","linear_attention","full_attention"]}"#,
        )
        .unwrap();
        let m = q.arch.mixer.unwrap();
        assert_eq!((m.layers, m.heads, m.key_heads, m.inner), (6, 4, 2, 32));
        assert!(q.arch.attn_gate && q.arch.qk_norm && q.arch.moe.unwrap().shared_gate);
        assert!(field(&q, "linear_conv_kernel_dim absent").is_some());
        // The pairs read back give the same architecture (what --config hands the flags).
        let (input, errors) =
            crate::params::from_pairs(q.pairs().iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(input.arch, Some(q.arch));
        assert_eq!(input.state_layers, 6);
    }

    #[test]
    fn gemma3_nests_text_config_and_defaults_head_dim() {
        let c = parse_config(
            r#"{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","hidden_size":2560,
            "num_hidden_layers":34,"num_attention_heads":8,"num_key_value_heads":4,"intermediate_size":10240,
            "vocab_size":262208,"sliding_window":1024},"vision_config":{"hidden_size":1152}}"#,
        )
        .unwrap();
        assert_eq!((c.arch.head_dim, c.arch.layer_norms), (256, 4));
        assert!(c.arch.qk_norm && c.arch.tied_embeddings);
        assert_eq!(c.sliding_layers, Some(34 - 34 / 6));
        assert!(field(&c, "head_dim absent").is_some());
        assert!(field(&c, "vision tower").is_some());
    }

    #[test]
    fn garbage_is_refused() {
        assert!(parse_config("[]").is_err());
        assert!(parse_config("{").is_err());
        assert!(parse_config(r#"{"hidden_size":-1}"#).is_err());
        assert!(
            parse_config(r#"{"hidden_size":4096}"#)
                .unwrap_err()
                .to_string()
                .contains("missing")
        );
    }
}
