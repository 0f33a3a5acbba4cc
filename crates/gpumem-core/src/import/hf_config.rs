//! A Hugging Face `config.json` read into the architecture mode.
//!
//! Key names follow `transformers`' configuration classes (LlamaConfig,
//! MistralConfig, Qwen2Config, Qwen3Config, MixtralConfig, Gemma2Config,
//! DeepseekV3Config, …). Multimodal configs nest the language model under
//! `text_config`, which is used when present.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::arch::{Architecture, Moe};
use crate::error::EstimateError;

const FORMAT: &str = "config.json";

/// What a `config.json` says, beyond the shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportedConfig {
    /// `model_type`.
    pub model_type: String,
    /// The shape.
    pub arch: Architecture,
    /// `sliding_window`, when sliding attention is in use.
    pub sliding_window: Option<u64>,
    /// Layers using the window (from `layer_types` or the model family's pattern).
    pub sliding_layers: Option<u64>,
    /// `max_position_embeddings`.
    pub max_position: Option<u64>,
    /// `torch_dtype` / `dtype`.
    pub dtype: Option<String>,
    /// The storage format named by `quantization_config`, in this crate's vocabulary.
    pub format: Option<String>,
    /// Defaults that were assumed because the config did not say.
    pub notes: Vec<String>,
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
        Some(x) => x
            .as_u64()
            .map(Some)
            .ok_or_else(|| parse(format!("{key} should be a non-negative integer, found {x}"))),
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

/// Reads a `config.json` document.
pub fn parse_config(text: &str) -> Result<ImportedConfig, EstimateError> {
    let root: Value =
        serde_json::from_str(text).map_err(|e| parse(format!("not valid JSON: {e}")))?;
    if !root.is_object() {
        return Err(parse("expected a JSON object".into()));
    }
    let v = match root.get("text_config") {
        Some(t) if t.is_object() => t,
        _ => &root,
    };
    let model_type = v
        .get("model_type")
        .or_else(|| root.get("model_type"))
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_string();
    let mut notes = Vec::new();
    let hidden = need(v, &["hidden_size", "n_embd", "d_model"])?;
    let layers = need(v, &["num_hidden_layers", "n_layer", "num_layers"])?;
    let heads = need(v, &["num_attention_heads", "n_head"])?;
    let kv_heads = match uint(v, "num_key_value_heads")? {
        Some(k) => k,
        None => {
            notes.push(
                "num_key_value_heads absent: KV heads = attention heads (multi-head attention)"
                    .into(),
            );
            heads
        }
    };
    if heads == 0 {
        return Err(parse("num_attention_heads is 0".into()));
    }
    let head_dim = match uint(v, "head_dim")? {
        Some(d) => d,
        None => hidden / heads,
    };
    let vocab = need(v, &["vocab_size"])?;
    let gpt2_like = matches!(
        model_type.as_str(),
        "gpt2" | "gpt_neox" | "gptj" | "opt" | "bloom" | "falcon"
    );
    let intermediate = match uint(v, "intermediate_size")?
        .or(uint(v, "n_inner")?)
        .or(uint(v, "ffn_dim")?)
    {
        Some(i) => i,
        None => {
            notes.push("intermediate size absent: 4 × hidden assumed".into());
            4 * hidden
        }
    };
    let tied = flag(v, "tie_word_embeddings").or_else(|| flag(&root, "tie_word_embeddings"));
    let tied_embeddings = tied.unwrap_or_else(|| {
        // transformers' PretrainedConfig defaults to tied; Llama/Mistral/Qwen2/Mixtral
        // override the default to untied.
        let untied = matches!(
            model_type.as_str(),
            "llama"
                | "mistral"
                | "mixtral"
                | "qwen2"
                | "qwen2_moe"
                | "qwen3"
                | "qwen3_moe"
                | "deepseek_v3"
                | "phi3"
        );
        notes.push(format!(
            "tie_word_embeddings absent: {} (default for {model_type})",
            if untied { "untied" } else { "tied" }
        ));
        !untied
    });
    let qkv_bias = flag(v, "attention_bias").unwrap_or(false)
        || matches!(model_type.as_str(), "qwen2" | "qwen2_moe");
    let o_bias = flag(v, "attention_bias").unwrap_or(false) || gpt2_like;
    let mlp_bias = flag(v, "mlp_bias").unwrap_or(false) || gpt2_like;
    let experts = uint(v, "num_local_experts")?
        .or(uint(v, "num_experts")?)
        .or(uint(v, "n_routed_experts")?);
    let moe = match experts {
        Some(e) if e > 1 => Some(Moe {
            experts: e,
            active: need(v, &["num_experts_per_tok", "num_experts_per_token"])?,
            expert_intermediate: uint(v, "moe_intermediate_size")?.unwrap_or(intermediate),
            shared_experts: uint(v, "n_shared_experts")?.unwrap_or(u64::from(
                uint(v, "shared_expert_intermediate_size")?.is_some(),
            )),
            shared_intermediate: uint(v, "shared_expert_intermediate_size")?
                .or(uint(v, "moe_intermediate_size")?)
                .unwrap_or(intermediate),
            dense_layers: uint(v, "first_k_dense_replace")?.unwrap_or(0),
        }),
        _ => None,
    };
    let arch = Architecture {
        vocab,
        hidden,
        layers,
        heads,
        kv_heads,
        head_dim,
        intermediate,
        gated_mlp: !gpt2_like,
        tied_embeddings,
        qkv_bias,
        o_bias,
        mlp_bias,
        qk_norm: matches!(
            model_type.as_str(),
            "qwen3" | "qwen3_moe" | "gemma3" | "gemma3_text" | "olmo2"
        ),
        layernorm_bias: gpt2_like,
        moe,
    };
    arch.validate()
        .map_err(|e| parse(format!("inconsistent shape: {e}")))?;
    let window =
        uint(v, "sliding_window")?.filter(|_| flag(v, "use_sliding_window") != Some(false));
    let sliding_layers = window.and_then(|_| {
        if let Some(types) = v.get("layer_types").and_then(Value::as_array) {
            return Some(
                types
                    .iter()
                    .filter(|t| t.as_str() == Some("sliding_attention"))
                    .count() as u64,
            );
        }
        match model_type.as_str() {
            "gemma2" => Some(layers / 2),
            "gemma3" | "gemma3_text" => {
                let p = uint(v, "sliding_window_pattern")
                    .ok()
                    .flatten()
                    .unwrap_or(6)
                    .max(1);
                Some(layers - layers / p)
            }
            "qwen2" | "qwen2_moe" => {
                let full = uint(v, "max_window_layers")
                    .ok()
                    .flatten()
                    .unwrap_or(layers)
                    .min(layers);
                Some(layers - full)
            }
            _ => None,
        }
    });
    let format = quant_format(root.get("quantization_config"));
    Ok(ImportedConfig {
        model_type,
        arch,
        sliding_window: window,
        sliding_layers,
        max_position: uint(v, "max_position_embeddings")?,
        dtype: v
            .get("torch_dtype")
            .or_else(|| v.get("dtype"))
            .or_else(|| root.get("torch_dtype"))
            .and_then(Value::as_str)
            .map(str::to_string),
        format,
        notes,
    })
}

/// The storage-format name for a `quantization_config`, when recognised.
fn quant_format(q: Option<&Value>) -> Option<String> {
    let q = q?;
    let method = q
        .get("quant_method")
        .and_then(Value::as_str)?
        .to_ascii_lowercase();
    let bits = q.get("bits").and_then(Value::as_u64).unwrap_or(4);
    let group = q.get("group_size").and_then(Value::as_i64).unwrap_or(128);
    match method.as_str() {
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
        "bitsandbytes" => {
            if q.get("load_in_8bit").and_then(Value::as_bool) == Some(true) {
                return Some("int8".into());
            }
            let ty = q
                .get("bnb_4bit_quant_type")
                .and_then(Value::as_str)
                .unwrap_or("fp4");
            let dq = q.get("bnb_4bit_use_double_quant").and_then(Value::as_bool) == Some(true);
            Some(format!("{ty}{}", if dq { "-dq" } else { "" }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
