//! The generic decoder reader: the keys every decoder-only transformer's config
//! shares (transformers' LlamaConfig vocabulary and its usual aliases), read with a
//! family's defaults into a [`Draft`] that the family's hook may then edit.

use serde_json::Value;

use crate::arch::{Architecture, Mla, Moe};
use crate::error::EstimateError;

use super::family::{Family, RouterBias, Sliding};
use super::json::{Cfg, parse};

/// The architecture being read, and what the reader said about it.
#[derive(Debug, Clone)]
pub(crate) struct Draft {
    /// The shape.
    pub arch: Architecture,
    /// The family's class name (for notes on its defaults).
    pub class: &'static str,
    /// The window of the sliding layers, when in use.
    pub window: Option<u64>,
    /// Layers using the window.
    pub sliding_layers: Option<u64>,
    /// `torch_dtype` / `dtype`.
    pub dtype: Option<String>,
    /// Recurrent-state bytes per state layer, when the config fixes them.
    pub state_bytes: Option<u64>,
    /// Defaults assumed.
    pub notes: Vec<String>,
    /// What changes memory and is not modelled.
    pub warnings: Vec<String>,
}

impl Draft {
    /// An integer key with the family's default, listed in `notes` when assumed.
    pub(crate) fn or_default(
        &mut self,
        c: &Cfg,
        key: &str,
        default: u64,
    ) -> Result<u64, EstimateError> {
        c.or_default(key, default, self.class, &mut self.notes)
    }
}

/// Reads the decoder keys of `c` (the text-level config; `root` the whole document)
/// with the family's defaults, then runs the family's hook.
pub(crate) fn read(
    c: &Cfg,
    root: &Cfg,
    mt: &str,
    f: &Family,
    notes: Vec<String>,
) -> Result<Draft, EstimateError> {
    // BloomConfig reads `n_embed` (the published BLOOM configs write it).
    let hidden = c.need(&["hidden_size", "n_embd", "d_model", "n_embed"])?;
    let layers = match c.any(&["num_hidden_layers", "n_layer", "num_layers"])? {
        Some(n) => n,
        // NemotronHConfig (transformers 5.23) writes no num_hidden_layers: one block per
        // entry of layers_block_type.
        None => match c.list("layers_block_type") {
            Some(list) => list.len() as u64,
            None => c.need(&["num_hidden_layers", "n_layer", "num_layers"])?,
        },
    };
    let heads = c.need(&["num_attention_heads", "n_head"])?;
    if heads == 0 {
        return Err(parse("num_attention_heads is 0".into()));
    }
    let mut d = Draft {
        arch: Architecture {
            hidden,
            layers,
            heads,
            kv_heads: heads,
            ..f.arch
        },
        class: f.class,
        window: None,
        sliding_layers: None,
        dtype: None,
        state_bytes: None,
        notes,
        warnings: Vec::new(),
    };
    let a = &mut d.arch;
    a.kv_heads = if f.multi_query && c.flag("multi_query").unwrap_or(true) {
        // FalconConfig and GPTBigCodeConfig default multi_query to true: one K/V head.
        1
    } else {
        match c.any(&["num_key_value_heads", "num_kv_heads"])? {
            Some(k) => k,
            None => {
                d.notes.push(
                    "num_key_value_heads absent: KV heads = attention heads (multi-head attention)"
                        .into(),
                );
                heads
            }
        }
    };
    a.head_dim = match c.any(&["head_dim", "attention_head_dim"])? {
        Some(x) => x,
        None if f.head_dim > 0 => {
            d.notes.push(format!(
                "head_dim absent: {} assumed ({mt}'s default)",
                f.head_dim
            ));
            u64::from(f.head_dim)
        }
        // heads is at least 1 (checked above).
        None => hidden.checked_div(heads).unwrap_or(0),
    };
    a.vocab = c.need(&["vocab_size", "padded_vocab_size"])?;
    a.intermediate = match c.any(&["intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"])? {
        Some(i) => i,
        None => {
            d.notes
                .push("intermediate size absent: 4 × hidden assumed".into());
            // Saturates rather than wraps: an absurd hidden size is then refused.
            hidden.saturating_mul(4)
        }
    };
    // A multimodal config's own tie_word_embeddings decides (transformers ties the
    // composite model's embeddings by it), else the language model's.
    let tied = root
        .flag("tie_word_embeddings")
        .or_else(|| c.flag("tie_word_embeddings"));
    a.tied_embeddings = tied.unwrap_or_else(|| {
        d.notes.push(format!(
            "tie_word_embeddings absent: {} (default for {mt})",
            if f.arch.tied_embeddings {
                "tied"
            } else {
                "untied"
            }
        ));
        f.arch.tied_embeddings
    });
    let attention_bias = c.flag("attention_bias").unwrap_or(false);
    a.qkv_bias |= attention_bias;
    a.o_bias |= attention_bias;
    a.mlp_bias |= c.flag("mlp_bias").unwrap_or(false);
    // A soft-cap the config states decides; absent, the family's default (Gemma2Config
    // and Gemma4TextConfig default to 30.0, others to none).
    if c.get("final_logit_softcapping").is_some() {
        a.logit_softcap = c.present("final_logit_softcapping");
    }
    if f.positions {
        a.learned_positions = c.need(&["n_positions", "max_position_embeddings"])?;
    }
    let experts = c.any(&["num_local_experts", "num_experts", "n_routed_experts"])?;
    if let Some(e) = experts.filter(|e| *e > 1) {
        a.moe = Some(generic_moe(c, f, e, a.intermediate)?);
    }
    d.dtype = c.dtype().or_else(|| root.dtype()).map(str::to_string);
    if let Some(kv_lora_rank) = c.uint("kv_lora_rank")? {
        d.arch.mla = Some(Mla {
            q_lora_rank: c.uint("q_lora_rank")?.unwrap_or(0),
            kv_lora_rank,
            qk_nope_dim: c.need(&["qk_nope_head_dim"])?,
            qk_rope_dim: c.need(&["qk_rope_head_dim"])?,
            v_head_dim: c.need(&["v_head_dim"])?,
        });
    }
    d.arch.mtp_layers = c.uint("num_nextn_predict_layers")?.unwrap_or(0);
    d.window = c
        .uint("sliding_window")?
        .filter(|_| c.flag("use_sliding_window") != Some(false));
    if d.window.is_some() {
        d.sliding_layers = match c.count_of("layer_types", "sliding_attention") {
            Some(n) => Some(n),
            None => sliding_layers(c, f.sliding, layers),
        };
    }
    rope(c, f, &mut d.arch);
    if let Some(hook) = f.hook {
        hook(c, &mut d)?;
    }
    if f.rope_tables > 1
        && let Some(tables) = rope_per_layer_type(c, &d)
    {
        d.arch.rope_tables = tables;
    }
    // After the hook, which may leave out MTP layers it cannot model (and say so).
    if d.arch.mtp_layers > 0 {
        d.notes.push(format!(
            "num_nextn_predict_layers = {}: the multi-token-prediction layer(s) are counted, as the checkpoint stores them",
            d.arch.mtp_layers
        ));
    }
    d.arch
        .validate()
        .map_err(|e| parse(format!("inconsistent shape: {e}")))?;
    Ok(d)
}

/// The layers with a window by the family's pattern.
fn sliding_layers(c: &Cfg, s: Sliding, layers: u64) -> Option<u64> {
    let every = |p: u64| layers.saturating_sub(layers.checked_div(p.max(1)).unwrap_or(0));
    match s {
        Sliding::All => None,
        Sliding::Alternate => Some(layers / 2),
        Sliding::Pattern(p) => Some(every(
            c.uint("sliding_window_pattern")
                .ok()
                .flatten()
                .unwrap_or(u64::from(p)),
        )),
        Sliding::FromMaxWindowLayers => {
            let full = c
                .uint("max_window_layers")
                .ok()
                .flatten()
                .unwrap_or(layers)
                .min(layers);
            Some(layers.saturating_sub(full))
        }
    }
}

/// Routed experts as transformers' Mixtral / Qwen-MoE / DeepSeek configs name them.
fn generic_moe(c: &Cfg, f: &Family, experts: u64, intermediate: u64) -> Result<Moe, EstimateError> {
    let shared_width = c.uint("shared_expert_intermediate_size")?;
    Ok(Moe {
        experts,
        active: c.need(&["num_experts_per_tok", "num_experts_per_token"])?,
        expert_intermediate: c.uint("moe_intermediate_size")?.unwrap_or(intermediate),
        shared_experts: c
            .uint("n_shared_experts")?
            .unwrap_or(u64::from(shared_width.is_some())),
        shared_intermediate: match shared_width {
            Some(w) => w,
            None => c.uint("moe_intermediate_size")?.unwrap_or(intermediate),
        },
        dense_layers: c.uint("first_k_dense_replace")?.unwrap_or(0),
        every: c
            .any(&[
                "interleave_moe_layer_step",
                "decoder_sparse_step",
                "moe_layer_freq",
                "expert_layer_period",
            ])?
            .unwrap_or(u64::from(f.moe_every))
            .max(1),
        router_bias: f.router_bias == RouterBias::Yes,
        correction_bias: f.router_bias == RouterBias::Correction
            || (f.router_bias == RouterBias::NoauxTc && c.str("topk_method") == Some("noaux_tc")),
        shared_gate: f.shared_gate,
        group_limited: c.str("topk_method") == Some("group_limited_greedy"),
        router_casts: f.router_casts,
        router_fp32_logits: f.router_fp32_logits,
        ..Moe::BASE
    })
}

/// The rotary embedding's frequency buffers ([`Architecture::rope_tables`]): the
/// family's tables, over `int(head_dim × partial_rotary_factor)` when only part of the
/// head rotates (transformers 5.23 `modeling_rope_utils.py`,
/// `_compute_default_rope_parameters` and each rope type's init). The factor is the
/// config's (flat, or in a flat `rope_parameters` / `rope_scaling`), else a legacy
/// `rotary_dim` (MiniMaxM2Config turns it into `rotary_dim ÷ head_dim`), else the
/// config class's default (`Family::rotary_fraction`).
fn rope(c: &Cfg, f: &Family, a: &mut Architecture) {
    a.rope_tables = u64::from(f.rope_tables);
    if a.rope_tables == 0 {
        return;
    }
    let flat = ["rope_parameters", "rope_scaling"]
        .into_iter()
        .filter_map(|k| c.get(k).and_then(Value::as_object))
        .find(|o| !o.values().any(Value::is_object));
    let fraction = c
        .get("partial_rotary_factor")
        .and_then(Value::as_f64)
        .or_else(|| flat.and_then(|o| o.get("partial_rotary_factor")?.as_f64()));
    if fraction.is_none()
        && let Some(dims) = c.get("rotary_dim").and_then(Value::as_u64)
    {
        if dims < a.head_dim {
            a.rope_dims = dims;
        }
        return;
    }
    let fraction = fraction.unwrap_or(f.rotary_fraction);
    if fraction > 0.0 && fraction < 1.0 {
        // Python's int() of the product: truncated toward zero.
        a.rope_dims = (a.head_dim as f64 * fraction) as u64;
    }
}

/// A rotary embedding with one table per layer type (`Gemma3RotaryEmbedding`,
/// `Olmo3RotaryEmbedding`, `MellumRotaryEmbedding`, `Gemma4RotaryEmbedding`,
/// transformers 5.23: `for layer_type in sorted(set(config.layer_types))`): the
/// distinct kinds `layer_types` lists, else those the window's layers make (sliding
/// and full ones); `None` without either: the family's own (its record, or its hook).
fn rope_per_layer_type(c: &Cfg, d: &Draft) -> Option<u64> {
    if let Some(types) = c.list("layer_types") {
        let mut kinds: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
        kinds.sort_unstable();
        kinds.dedup();
        return Some(kinds.len() as u64);
    }
    d.window?;
    let layers = d.arch.layers;
    let sliding = d.sliding_layers.unwrap_or(layers);
    Some(u64::from(sliding > 0).saturating_add(u64::from(sliding < layers)))
}
