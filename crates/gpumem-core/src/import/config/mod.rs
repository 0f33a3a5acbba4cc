//! A Hugging Face `config.json` read into the architecture mode.
//!
//! The generic decoder reader ([`decoder`]) reads the keys every decoder shares
//! (transformers' LlamaConfig vocabulary and its aliases); each model family is one
//! [`family::Family`] record in `families/` — its defaults and the hooks where its
//! layers differ — found by `model_type` in the registry (`families::REGISTRY`: one row per family file).
//! Quantisation (`quant`) and vision towers (`tower`) have their own files.
//! Multimodal configs nest the language model under `text_config`, which is read
//! when present.
//!
//! Never silently wrong: every default assumed is listed in `notes`; every key of
//! the config is either read, listed by its family (or for all families) as changing
//! nothing in memory, or named in `warnings`; an unknown `model_type` says what it
//! was read as; and [`ImportedConfig::confidence`] sums it up.

mod decoder;
mod encdec;
mod families;
mod family;
mod json;
mod mixers;
mod quant;
mod rope;
mod tower;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::params::arch_pairs;

use family::{Family, GENERIC};
use json::{Cfg, parse};

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
    /// The positions the config's RoPE scaling reaches, as vLLM derives its longest
    /// `max_model_len`, when that differs from `max_position`.
    pub rope_positions: Option<u64>,
    /// One image as the vision tower takes it: prompt tokens and pixel values (from
    /// the family's tower counter), where the tower is one counted here.
    pub mm_item: Option<(u64, u64)>,
    /// `torch_dtype` / `dtype`.
    pub dtype: Option<String>,
    /// The storage format named by `quantization_config`, in this crate's vocabulary.
    pub format: Option<String>,
    /// The attention projections' format when the quantiser left them out
    /// (`modules_to_not_convert`, compressed-tensors `ignore`).
    pub attention_format: Option<String>,
    /// Whether `format` comes from `"quant_method": "compressed-tensors"` (the same
    /// format names also come from other quantisers: `fp8-block` from `"fp8"`).
    pub compressed_tensors: bool,
    /// Recurrent-state bytes per state layer when the config fixes them beyond the
    /// mixer's shape in the compute dtype (Nemotron-3's `mamba_ssm_cache_dtype`).
    pub state_bytes: Option<u64>,
    /// How far the shape can be trusted: `exact` (a known family, every key
    /// accounted for), `approximate: <why>` (the first warning), or `unknown family`.
    pub confidence: String,
    /// Defaults that were assumed because the config did not say.
    pub notes: Vec<String>,
    /// Fields that change memory and are not modelled, and other soft problems.
    pub warnings: Vec<String>,
}

impl ImportedConfig {
    /// The `key=value` pairs the config stands for (explicit flags given later
    /// override them) — shared by the agent's `--config` and the page's import.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        // Only the keys a config sets, written directly: `params::to_pairs` would
        // bring every other key's writer into the page's lookup module.
        let mut out = Vec::new();
        let mut put = |k: &'static str, v: String| out.push((k, v));
        arch_pairs(&self.arch, &mut put);
        let state_layers = self.arch.mixer.map_or(0, |m| m.layers);
        for (k, v) in [
            ("max-position", self.max_position),
            ("rope-positions", self.rope_positions),
            ("mm-item-tokens", self.mm_item.map(|m| m.0)),
            ("mm-item-values", self.mm_item.map(|m| m.1)),
            ("sliding-window", self.sliding_window),
            (
                "sliding-layers",
                self.sliding_layers
                    .filter(|_| self.sliding_window.is_some()),
            ),
            ("state-layers", Some(state_layers).filter(|n| *n > 0)),
            ("state-bytes", self.state_bytes.filter(|n| *n > 0)),
        ] {
            if let Some(v) = v {
                put(k, v.to_string());
            }
        }
        if let Some(f) = &self.format {
            put("format", f.clone());
        }
        if let Some(f) = &self.attention_format {
            put("attention-format", f.clone());
        }
        if self.compressed_tensors && self.format.is_some() {
            put("compressed-tensors", "true".into());
        }
        out
    }
}

/// Keys (space-separated) that change nothing in memory in any family: token ids, initialisation,
/// dropout, activations and norm epsilons, RoPE frequencies and rotary fractions,
/// how routers weigh and normalise their choice (not their tensors), kernel chunk
/// sizes, keys that only matter where a family reads them (`max_window_layers`
/// beside a disabled window), bookkeeping. (A family's own are listed in its record.)
const INERT: &str = concat!(
    "architectures auto_map chunk_size id2label initializer_range return_dict vision_feature_layer ",
    "label2id mamba_chunk_size max_window_layers model_type n_group norm_topk_prob ",
    "num_logits_to_keep original_max_position_embeddings partial_rotary_factor ",
    "pretraining_tp qk_head_dim residual_in_fp32 rotary_pct routed_scaling_factor scoring_func ",
    "tie_word_embeddings topk_group torch_dtype dtype transformers_version use_cache ",
    // Attention's query scale, a router's training noise, gpt-oss's SwiGLU slope, the
    // slow Mamba path's scan and the fused Mamba kernels' switches, a loss coefficient.
    "query_pre_attn_scalar router_jitter_noise swiglu_alpha use_associative_scan use_mamba_kernels ",
    "z_loss_coefficient",
);

/// Key endings and beginnings that change nothing in memory in any family (token
/// ids, dropout, norm epsilons, activation names, muP multipliers, soft-caps, loss
/// coefficients; transformers' private bookkeeping (`_name_or_path`, `_commit_hash`,
/// …), RoPE's parameters, Mamba's Δ initialisation, what a forward pass outputs,
/// GPT-2's sequence-summary head).
const INERT_ENDS: &str = concat!(
    "_token_id _token_ids _token_index _dropout _pdrop _eps _epsilon _act _activation ",
    "_multiplier _multipliers _softcapping _coef",
);
const INERT_STARTS: &str = "_ rope_ time_step_ output_ summary_";

/// Whether `key` is known to change nothing in memory, for every family or `f`.
fn inert(key: &str, f: &Family) -> bool {
    let listed = |list: &str| list.split(' ').any(|k| k == key);
    listed(INERT)
        || listed(f.inert)
        || INERT_ENDS.split(' ').any(|e| key.ends_with(e))
        || INERT_STARTS.split(' ').any(|b| key.starts_with(b))
}

/// Config fields that change memory and that no family reading them models: the
/// reason named when one is set and unread.
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

/// Multimodal towers: counted where the family knows them, else named.
const TOWERS: &[(&str, &str)] = &[
    ("vision_config", "vision tower"),
    ("audio_config", "audio tower"),
    ("speech_config", "speech tower"),
    ("vision_tower", "vision tower"),
    ("perceiver_config", "perceiver resampler"),
];

/// Longest `config.json` read (the largest published ones, with per-layer tables, are
/// well under 1 MiB); the agent refuses a longer file before reading past it.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// How many of `layers` keep the window in a GGUF model of llama.cpp's architecture
/// `arch`, by the family record that names it (`None`: no record does).
pub(crate) fn gguf_sliding_layers(arch: &str, layers: u64) -> Option<u64> {
    Family::gguf_sliding_layers(arch, layers)
}

/// `text` with the bare `Infinity`, `-Infinity` and `NaN` that Python's json module
/// writes (outside strings) turned into the strings `"Infinity"`, `"-Infinity"`,
/// `"NaN"`: a key the reader reads then says it is no number rather than being taken
/// as absent, and any other is named like every unread key. `None` when there is none.
fn python_floats(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len().saturating_add(16));
    let (mut in_string, mut escaped, mut changed) = (false, false, false);
    let mut rest = text;
    loop {
        if !in_string
            && let Some((word, after)) = ["-Infinity", "Infinity", "NaN"]
                .into_iter()
                .find_map(|w| rest.strip_prefix(w).map(|r| (w, r)))
        {
            out.push('"');
            out.push_str(word);
            out.push('"');
            rest = after;
            changed = true;
            continue;
        }
        let mut chars = rest.chars();
        let Some(ch) = chars.next() else { break };
        rest = chars.as_str();
        out.push(ch);
        if in_string {
            match ch {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else {
            in_string = ch == '"';
        }
    }
    changed.then_some(out)
}

/// A `config.json`'s JSON, as Python's json module (which transformers'
/// `save_pretrained` uses) writes it: bare `Infinity` and `NaN` (Mamba-2's
/// `time_step_limit: [0.0, Infinity]`) read as the strings `"Infinity"`, `"NaN"`.
pub fn config_json(text: &str) -> Result<Value, EstimateError> {
    // From bytes, like the safetensors header: one JSON reader in the page's wasm.
    match serde_json::from_slice(text.as_bytes()) {
        Ok(doc) => Ok(doc),
        Err(e) => python_floats(text)
            .and_then(|t| serde_json::from_slice(t.as_bytes()).ok())
            .ok_or_else(|| parse(format!("not valid JSON: {e}"))),
    }
}

/// Reads a `config.json` document.
pub fn parse_config(text: &str) -> Result<ImportedConfig, EstimateError> {
    let doc = config_json(text)?;
    if !doc.is_object() {
        return Err(parse("expected a JSON object".into()));
    }
    // A diffusers pipeline or model (`model_index.json`, a UNet's or a transformer's
    // config) names its class, not a model_type: not a language model.
    if doc.get("_class_name").is_some() && doc.get("model_type").is_none() {
        return Err(parse(
            "a diffusers pipeline or model (it names _class_name, not model_type): image and video diffusion is not what this estimator counts"
                .into(),
        ));
    }
    let root = Cfg::new(&doc);
    let nested = root.get("text_config").filter(|t| t.is_object());
    let text = nested.unwrap_or(&doc);
    let root_type = root.str("model_type");
    let mt = text
        .get("model_type")
        .and_then(Value::as_str)
        .or(root_type)
        .unwrap_or("unknown")
        .to_string();
    let root_type = root_type.unwrap_or(&mt);
    // T5, BART, Whisper: counted and shaped by their own reader.
    if let Some(read) = encdec::imported(&root, &mt)? {
        return Ok(read);
    }
    if let Some(reason) = families::refused(&mt).or_else(|| families::refused(root_type)) {
        // An encoder-decoder's weights are counted even so: the number for --parameters.
        return Err(parse(match encdec::described(&root, &mt)? {
            Some(count) => format!("model_type {mt}: {reason}: {count}"),
            None => format!("model_type {mt}: {reason}"),
        }));
    }
    let known = Family::find(&mt).or_else(|| Family::find(root_type));
    let f = known.unwrap_or(&GENERIC);
    let mut notes = Vec::new();
    // Sparse published configs (Gemma-3's): the class's defaults fill the rest, each
    // one listed.
    let filled;
    let text = if f.defaults.is_empty() {
        text
    } else {
        let mut t = text.clone();
        for (key, default) in f.defaults {
            if t.get(*key).is_none_or(Value::is_null)
                && let Some(o) = t.as_object_mut()
            {
                o.insert((*key).into(), (*default).into());
                notes.push(format!(
                    "{key} absent: {default} assumed ({}'s default)",
                    f.class
                ));
            }
        }
        filled = t;
        &filled
    };
    let c = Cfg::new(text);
    let mut out = match f.whole {
        Some(whole) => whole(&c, &mt, notes)?,
        None => read_decoder(&c, &root, &mt, f, notes)?,
    };
    if known.is_none() {
        out.warnings.push(format!(
            "model_type {mt} is read with the generic decoder rules (a Llama-style decoder: gated MLP, RMSNorm, no biases, tied embeddings unless said): tensors it adds beyond them are not counted; gpumem-agent counts it exactly, weights and KV cache, with transformers' own code (`gpumem-agent estimate --config config.json`, given a Python with torch and transformers)"
        ));
    } else if !f.modelled {
        out.warnings.push(format!(
            "model_type {mt} is read with the generic decoder rules: tensors it adds beyond them are not counted; gpumem-agent counts it exactly, weights and KV cache, with transformers' own code (`gpumem-agent estimate --config config.json`, given a Python with torch and transformers)"
        ));
    }
    // Every key set and never read is named: with its known effect, or as unknown.
    // Without `text_config` both views are of the same object: a key read through
    // either is read.
    let mut warn = |key: &str| {
        if inert(key, f) {
            return;
        }
        let w = match NOT_MODELLED.iter().find(|(k, _)| *k == key) {
            Some((_, what)) => format!("{key} is not modelled: {what}"),
            None => format!(
                "{key} is not read: the {mt} reader does not know whether it changes memory"
            ),
        };
        if !out.warnings.contains(&w) {
            out.warnings.push(w);
        }
    };
    match nested {
        Some(_) => {
            c.each_unread(None, &mut warn);
            root.each_unread(None, &mut warn);
        }
        None => c.each_unread(Some(&root), &mut warn),
    }
    out.confidence = if known.is_none() {
        "unknown family".into()
    } else {
        match out.warnings.first() {
            Some(w) => format!("approximate: {w}"),
            None => "exact".into(),
        }
    };
    Ok(out)
}

/// A decoder with attention layers (and perhaps a mixer in some of them).
fn read_decoder(
    c: &Cfg,
    root: &Cfg,
    mt: &str,
    f: &Family,
    notes: Vec<String>,
) -> Result<ImportedConfig, EstimateError> {
    if let Some(kind) = c.list("layer_types").and_then(|t| {
        t.iter().filter_map(Value::as_str).find(|t| {
            !matches!(*t, "sliding_attention" | "full_attention")
                && !f.layer_types.split(' ').any(|k| k == *t)
        })
    }) {
        return Err(parse(format!(
            "layer_types has {kind:?} layers, a kind the {mt} reader does not count (a constant state instead of a KV cache, a compressed or indexed cache): give parameters, the KV shape and state-layers / state-bytes by hand"
        )));
    }
    let mut d = decoder::read(c, root, mt, f, notes)?;
    let mut mm_item = None;
    // A tower is counted by the record of the root's model_type (the multimodal
    // wrapper's), when it has a counter.
    let record = Family::find(root.str("model_type").unwrap_or(mt));
    if let Some(hook) = record.and_then(|r| r.root_hook) {
        hook(root, &mut d)?;
    }
    for (key, what) in TOWERS {
        let Some(t) = root.get(key).filter(|x| !x.is_null()) else {
            continue;
        };
        let counter = match *key {
            "vision_config" => record.and_then(|r| r.tower),
            "audio_config" => record.and_then(|r| r.audio),
            _ => None,
        };
        let counted = match counter {
            Some(count) => count(root, t, d.arch.hidden)?,
            None => None,
        };
        match counted {
            Some((n, item)) => {
                // A vision and an audio tower add up.
                d.arch.tower_params = d
                    .arch
                    .tower_params
                    .checked_add(n)
                    .ok_or_else(|| parse(format!("{key}: absurdly large")))?;
                if item.is_some() {
                    mm_item = item;
                }
                if let Some(rope) = record
                    .and_then(|r| r.tower_rope)
                    .filter(|_| *key == "vision_config")
                {
                    d.arch.tower_rope_bytes = rope(t)?;
                }
                if let Some(shape) = record
                    .and_then(|r| r.vision)
                    .filter(|_| *key == "vision_config")
                {
                    d.arch.vision = shape(root, t)?;
                }
                if let Some(shape) = record
                    .and_then(|r| r.audio_shape)
                    .filter(|_| *key == "audio_config")
                {
                    d.arch.audio = shape(t)?;
                }
                d.notes.push(format!(
                    "{key}: the {what} and its projector are counted ({n} parameters, 16-bit)"
                ));
            }
            None => d.warnings.push(format!(
                "{key}: the {what} is not counted; its weights add to the total"
            )),
        }
    }
    if let Some(count) = record.and_then(|r| r.patches) {
        let n = count(root, d.arch.hidden)?;
        d.arch.tower_params = d
            .arch
            .tower_params
            .checked_add(n)
            .ok_or_else(|| parse("patch embedding: absurdly large".into()))?;
        d.notes.push(format!(
            "the image patches' linear embedding is counted ({n} parameters, 16-bit)"
        ));
    }
    let max_position = c.any(&[
        "max_position_embeddings",
        "n_positions",
        "max_seq_len",
        "model_max_length",
    ])?;
    let rope_positions = rope::positions(c, f.scaled_positions, max_position, &mut d.notes);
    // mlx-lm writes `quantization` (and, since it mirrors it, `quantization_config`).
    let quantization = root
        .get("quantization_config")
        .or_else(|| root.get("quantization"));
    let (format, attention_format) = quant::read(quantization, &mut d);
    let compressed_tensors = format.is_some() && quant::is_compressed_tensors(quantization);
    Ok(ImportedConfig {
        model_type: mt.to_string(),
        arch: d.arch,
        sliding_window: d.window,
        sliding_layers: d.sliding_layers,
        max_position,
        rope_positions,
        mm_item,
        dtype: d.dtype,
        format,
        attention_format,
        compressed_tensors,
        state_bytes: d.state_bytes,
        confidence: String::new(),
        notes: d.notes,
        warnings: d.warnings,
    })
}

#[cfg(test)]
mod tests;
