//! Gemma (GemmaConfig), Gemma-2 (Gemma2Config: four norms per layer, every other
//! layer sliding), Gemma-3 (Gemma3TextConfig: per-head q/k norms, five sliding
//! layers in six, sparse published configs, the SigLIP vision tower of
//! Gemma3ForConditionalGeneration) and Gemma 4 (Gemma4TextConfig, transformers'
//! modeling_gemma4.py: its full-attention layers have their own KV heads and head
//! size and, with `attention_k_eq_v`, no `v_proj`; a `layer_scalar` per layer; `v_norm`
//! has no weight). Embeddings are tied unless said.

use serde_json::Value;

use crate::arch::{Architecture, GlobalAttn, KvShare, PerLayerInput, VisionTower};
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family, Sliding, TowerCount};
use crate::import::config::json::{Cfg, parse};
use crate::import::config::tower::{axial_rope_bytes, fit, siglip, sizes};

/// Gemma.
pub(crate) const GEMMA: Family = Family {
    types: "gemma",
    class: "GemmaConfig",
    arch: Architecture {
        tied_embeddings: true,
        // GemmaTextScaledWordEmbedding's `embed_scale` (transformers 5.23
        // `models/gemma/modeling_gemma.py`): `nn.Buffer(torch.tensor(embed_scale),
        // persistent=False)`, a scalar in the default dtype the model is built under.
        // Gemma 2's, VaultGemma's and Gemma 3's embeddings are its copies.
        embed_scales: 1,
        ..Architecture::BASE
    },
    inert: PALIGEMMA_TEXT,
    ..BASE
};

/// What PaliGemma writes into its Gemma and Gemma 2 text configs
/// (`PaliGemmaConfig.__post_init__`): the image prefix's bidirectional mask and its
/// token count, no tensor.
const PALIGEMMA_TEXT: &str = "use_bidirectional_attention num_image_tokens";

/// Gemma-2.
pub(crate) const GEMMA2: Family = Family {
    types: "gemma2",
    class: "Gemma2Config",
    arch: Architecture {
        tied_embeddings: true,
        // Gemma2TextScaledWordEmbedding's `embed_scale` (`models/gemma2/modeling_gemma2.py`).
        embed_scales: 1,
        layer_norms: 4,
        // Gemma2Config's final_logit_softcapping defaults to 30.0.
        logit_softcap: true,
        ..Architecture::BASE
    },
    head_dim: 256,
    sliding: Sliding::Alternate,
    gguf: "gemma2",
    inert: PALIGEMMA_TEXT,
    ..BASE
};

/// VaultGemma (`vaultgemma`, VaultGemmaConfig; transformers 5.23
/// `models/vaultgemma/modeling_vaultgemma.py`): Gemma-2's decoder with two norms per
/// layer (`input_layernorm`, `pre_feedforward_layernorm`); every other layer sliding
/// from the first when `layer_types` does not list them.
pub(crate) const VAULTGEMMA: Family = Family {
    types: "vaultgemma",
    class: "VaultGemmaConfig",
    arch: Architecture {
        layer_norms: 2,
        ..GEMMA2.arch
    },
    gguf: "",
    ..GEMMA2
};

/// Gemma-3 (text, and the multimodal `gemma3` whose `text_config` it reads).
pub(crate) const GEMMA3: Family = Family {
    types: "gemma3_text gemma3",
    class: "Gemma3TextConfig",
    arch: Architecture {
        tied_embeddings: true,
        // Gemma3TextScaledWordEmbedding's `embed_scale` (`models/gemma3/modeling_gemma3.py`).
        embed_scales: 1,
        layer_norms: 4,
        qk_norm: true,
        ..Architecture::BASE
    },
    head_dim: 256,
    sliding: Sliding::Pattern(6),
    // The published configs are sparse: transformers' Gemma3TextConfig defaults.
    defaults: &[
        ("num_attention_heads", 8),
        ("num_key_value_heads", 4),
        ("head_dim", 256),
        ("vocab_size", 262_208),
        ("max_position_embeddings", 131_072),
        ("sliding_window_pattern", 6),
    ],
    // Image tokens per image; the pattern beside layer_types, which decides (it is
    // read when layer_types is absent).
    inert: "mm_tokens_per_image sliding_window_pattern",
    gguf: "gemma3 gemma3n",
    scaled_positions: true,
    tower: Some(gemma3_tower),
    vision: Some(gemma3_vision),
    // Gemma3RotaryEmbedding: one table per layer type.
    rope_tables: 2,
    ..BASE
};

/// Gemma 4 (text; the multimodal `gemma4` whose `text_config` it reads, with its
/// `gemma4_vision` tower, its per-layer input embeddings and its KV sharing counted).
/// Its audio tower (`gemma4_audio`, Gemma 4 E2B and E4B) is counted too. Its
/// mixture-of-experts block (`enable_moe_block`) is not read: set, it is named in
/// warnings.
pub(crate) const GEMMA4: Family = Family {
    types: "gemma4_text gemma4",
    class: "Gemma4TextConfig",
    arch: Architecture {
        tied_embeddings: true,
        // Gemma4TextScaledWordEmbedding's `embed_scale` (`models/gemma4/modeling_gemma4.py`);
        // `embed_tokens_per_layer`, one more (the hook).
        embed_scales: 1,
        layer_norms: 4,
        qk_norm: true,
        layer_scalars: 1,
        ..Architecture::BASE
    },
    head_dim: 256,
    sliding: Sliding::Pattern(6),
    // transformers writes the global layers' overrides as per_layer_config (read
    // from the global keys).
    inert: "per_layer_config",
    hook: Some(gemma4),
    tower: Some(|root, tower, hidden| Ok(gemma4_vision(root, tower, hidden)?.map(|n| (n, None)))),
    tower_rope: Some(gemma4_vision_rope),
    vision: Some(gemma4_vision_shape),
    audio: Some(|root, tower, hidden| Ok(gemma4_audio(root, tower, hidden)?.map(|n| (n, None)))),
    audio_shape: Some(gemma4_audio_shape),
    // Gemma4RotaryEmbedding: one table per layer type.
    rope_tables: 2,
    ..BASE
};

/// Bytes of the `gemma4_vision` tower's rotary table (transformers 5.23
/// `models/gemma4/modeling_gemma4.py`, `Gemma4VisionRotaryEmbedding`: `inv_freq` and
/// `original_inv_freq` over `head_dim // 2`; Gemma4VisionConfig's head_dim 64, else
/// hidden ÷ heads when it is 0).
fn gemma4_vision_rope(tower: &Value) -> Result<u64, EstimateError> {
    let [head, h, heads] = sizes(
        tower,
        [
            ("head_dim", 64),
            ("hidden_size", 768),
            ("num_attention_heads", 12),
        ],
    )?;
    let head = if head > 0 {
        head
    } else {
        h.checked_div(heads).unwrap_or(0)
    };
    Ok(axial_rope_bytes(fit(head)? / 2))
}

fn gemma4(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let layers = d.arch.layers;
    // `use_bidirectional_attention: "vision"`: an image prompt's block ids and its
    // sliding mask built with them (`Gemma4Model.forward`, modeling_gemma4.py,
    // transformers 5.23); "all" makes every layer bidirectional, its sliding window
    // halved (`Gemma4TextConfig.__post_init__`), which no fact describes.
    d.arch.vision_bidirectional = c.str("use_bidirectional_attention") == Some("vision");
    // Per-layer input embeddings (Gemma4TextModel's `embed_tokens_per_layer`, with
    // Gemma4TextConfig's `vocab_size_per_layer_input` default 262 144).
    let per_layer = c.uint("hidden_size_per_layer_input")?.unwrap_or(0);
    if per_layer > 0 {
        // A second Gemma4TextScaledWordEmbedding, with its own `embed_scale`
        // (`hidden_size_per_layer_input ** 0.5`).
        d.arch.embed_scales = 2;
        d.arch.per_layer_input = Some(PerLayerInput {
            width: per_layer,
            vocab: d.or_default(c, "vocab_size_per_layer_input", 262_144)?,
        });
    } else {
        // Read by no tensor without per-layer inputs.
        c.touch(&["vocab_size_per_layer_input"]);
    }
    // Which layers are full-attention (global) ones: those layer_types lists, else
    // every sixth (Gemma4TextConfig's default pattern); the last one always is
    // (Gemma4TextConfig.__post_init__ forces it).
    let full = full_layers(c, layers);
    let global = full.iter().filter(|f| **f).count() as u64;
    // KV sharing (`num_kv_shared_layers`, `kv_sharing_modes`): the last layers reuse
    // the K and V of the last earlier layer of their type; with `use_double_wide_mlp`
    // their MLP is twice as wide.
    let shared = c.uint("num_kv_shared_layers")?.unwrap_or(0);
    let double_wide_mlp = c.flag("use_double_wide_mlp") == Some(true);
    if shared > 0 {
        if shared >= layers {
            return Err(parse(format!(
                "num_kv_shared_layers {shared} leaves none of the {layers} layers its own cache"
            )));
        }
        let from = usize::try_from(layers.saturating_sub(shared)).unwrap_or(usize::MAX);
        let shared_global = full.iter().skip(from).filter(|f| **f).count() as u64;
        // transformers refuses a config whose shared layers have a type no earlier
        // layer produces (`kv_sharing_modes`).
        let kinds_before = |want: bool| full.iter().take(from).any(|f| *f == want);
        if (shared_global > 0 && !kinds_before(true))
            || (shared > shared_global && !kinds_before(false))
        {
            return Err(parse(
                "num_kv_shared_layers: a shared layer's type has no earlier layer producing its cache (transformers refuses it)"
                    .into(),
            ));
        }
        d.arch.kv_share = Some(KvShare {
            layers: shared,
            global: shared_global,
            double_wide_mlp,
        });
    }
    // Gemma4TextAttention: global_head_dim (Gemma4TextConfig's default 512) on the
    // full layers; with attention_k_eq_v their KV heads are num_global_key_value_heads
    // and there is no v_proj, else the model's KV heads.
    let k_eq_v = c.flag("attention_k_eq_v") == Some(true);
    let head_dim = d.or_default(c, "global_head_dim", 512)?;
    let kv_heads = match c.uint("num_global_key_value_heads")? {
        Some(k) if k_eq_v => k,
        _ => d.arch.kv_heads,
    };
    // Gemma4TextConfig's window when the config leaves it out; the other layers
    // slide.
    if d.window.is_none() {
        d.window = Some(d.or_default(c, "sliding_window", 512)?);
    }
    d.sliding_layers = Some(layers.saturating_sub(global));
    d.arch.global_attn = Some(GlobalAttn {
        layers: global,
        kv_heads,
        head_dim,
        k_eq_v,
    });
    Ok(())
}

/// Whether each layer is a full-attention one, as Gemma4TextConfig types them:
/// `layer_types` where given, else every sixth; the last layer is full either way.
fn full_layers(c: &Cfg, layers: u64) -> Vec<bool> {
    let n = usize::try_from(layers).unwrap_or(0).min(1 << 20);
    let mut full: Vec<bool> = match c.list("layer_types") {
        Some(l) if l.len() == n => l
            .iter()
            .map(|x| x.as_str() == Some("full_attention"))
            .collect(),
        _ => (1..=n).map(|i| i % 6 == 0).collect(),
    };
    if let Some(last) = full.last_mut() {
        *last = true;
    }
    full
}

/// Gemma-3's tower (`Family::tower`): the SigLIP tower and its projector, and one
/// image as its processor takes it.
fn gemma3_tower(
    root: &Cfg,
    tower: &Value,
    text_hidden: u64,
) -> Result<Option<TowerCount>, EstimateError> {
    Ok(match gemma3_siglip(root, tower, text_hidden)? {
        Some(n) => Some((n, gemma3_item(root, tower)?)),
        None => None,
    })
}

/// Gemma-3's SigLIP tower as its forward is derived (`estimate::tower`), read by
/// [`siglip_vision`].
fn gemma3_vision(root: &Cfg, tower: &Value) -> Result<Option<VisionTower>, EstimateError> {
    if root.str("model_type") != Some("gemma3") {
        return Ok(None);
    }
    siglip_vision(tower)
}

/// A SigLIP tower as its forward is derived (`estimate::tower`): transformers 5.23
/// `SiglipVisionModel` without the pooling head (`vision_use_head`: false, as Gemma 3's
/// and PaliGemma's configs have it; a head is not derived), every image resized to
/// `image_size` square. Missing sizes are SiglipVisionConfig's defaults.
pub(crate) fn siglip_vision(tower: &Value) -> Result<Option<VisionTower>, EstimateError> {
    let tower_type = tower.get("model_type").and_then(Value::as_str);
    if tower_type != Some("siglip_vision_model")
        || tower.get("vision_use_head").and_then(Value::as_bool) != Some(false)
    {
        return Ok(None);
    }
    let [hidden, intermediate, layers, heads, channels, image, patch] = sizes(
        tower,
        [
            ("hidden_size", 768),
            ("intermediate_size", 3072),
            ("num_hidden_layers", 12),
            ("num_attention_heads", 12),
            ("num_channels", 3),
            ("image_size", 224),
            ("patch_size", 16),
        ],
    )?
    .map(fit);
    Ok(Some(VisionTower {
        hidden: hidden?,
        layers: layers?,
        heads: heads?,
        intermediate: intermediate?,
        patch: patch?,
        channels: channels?,
        image: image?,
        ..VisionTower::BASE
    }))
}

/// Parameters of Gemma-3's SigLIP vision tower and its projector, counted as the
/// checkpoint stores them (transformers' SiglipVisionModel without the pooling
/// head, and Gemma3MultiModalProjector: `mm_input_projection_weight`
/// [vision, text hidden] + `mm_soft_emb_norm` [vision]); `None` for other towers.
// The tower's sizes are at most 2^20 (checked by `siglip`) but the text hidden size
// (a u64): the u128 products stay below 2^90.
#[allow(clippy::arithmetic_side_effects)]
fn gemma3_siglip(
    root: &Cfg,
    tower: &Value,
    text_hidden: u64,
) -> Result<Option<u64>, EstimateError> {
    let tower_type = tower.get("model_type").and_then(Value::as_str);
    if root.str("model_type") != Some("gemma3") || tower_type != Some("siglip_vision_model") {
        return Ok(None);
    }
    // The projector: `mm_input_projection_weight` and `mm_soft_emb_norm`.
    let h = u128::from(Cfg::new(tower).uint("hidden_size")?.unwrap_or(768));
    let total = siglip(tower)? + h * u128::from(text_hidden) + h;
    u64::try_from(total)
        .map(Some)
        .map_err(|_| parse("vision_config: absurdly large".into()))
}

/// Parameters (and persistent buffers) of Gemma 4's vision tower and its projector,
/// as transformers 5.23 builds them (`models/gemma4/modeling_gemma4.py`):
/// `Gemma4VisionPatchEmbedder` (a bias-free `input_proj` over 3 × patch² values and a
/// [2, position_embedding_size, hidden] position table), per `Gemma4VisionEncoderLayer`
/// bias-free q/k/v/o (`num_attention_heads` and `num_key_value_heads` × `head_dim`),
/// per-head `q_norm` and `k_norm` (`v_norm` has no weight), four RMSNorms and a gated
/// MLP; `Gemma4ClippableLinear` adds four scalar buffers to each of the seven linears
/// under `use_clipped_linears`, `standardize` two vectors; the pooler and the rotary
/// table hold nothing stored. `Gemma4MultimodalEmbedder` projects the tower's width
/// (`output_proj_dims` where the tower has it) to the text width, bias-free, after
/// an RMSNorm without weight. `None` for another tower.
#[allow(clippy::arithmetic_side_effects)]
fn gemma4_vision(
    root: &Cfg,
    tower: &Value,
    text_hidden: u64,
) -> Result<Option<u64>, EstimateError> {
    if root.str("model_type") != Some("gemma4")
        || tower.get("model_type").and_then(Value::as_str) != Some("gemma4_vision")
    {
        return Ok(None);
    }
    // Gemma4VisionConfig's defaults where the config is silent.
    let [h, inter, layers, heads, kv_heads, patch, positions] = sizes(
        tower,
        [
            ("hidden_size", 768),
            ("intermediate_size", 3072),
            ("num_hidden_layers", 16),
            ("num_attention_heads", 12),
            ("num_key_value_heads", 12),
            ("patch_size", 16),
            ("position_embedding_size", 10_240),
        ],
    )?;
    let [head_dim, out] = sizes(
        tower,
        [
            ("head_dim", 64),
            ("output_proj_dims", u64::try_from(h).unwrap_or(0)),
        ],
    )?;
    let t = Cfg::new(tower);
    let clipped = u128::from(t.flag("use_clipped_linears") == Some(true));
    let standardize = u128::from(t.flag("standardize") == Some(true));
    let embed = 3 * patch * patch * h + 2 * positions * h;
    let layer = 2 * h * heads * head_dim
        + 2 * h * kv_heads * head_dim
        + 2 * head_dim
        + 3 * h * inter
        + 4 * h
        + clipped * 7 * 4;
    let projector = out * u128::from(text_hidden);
    fit(embed + layers * layer + standardize * 2 * h + projector).map(Some)
}

/// Gemma 4's tower as its forward is derived (`estimate::tower`): transformers 5.23
/// `Gemma4VisionModel` (`models/gemma4/modeling_gemma4.py`) with Gemma4VisionConfig's
/// defaults where the config is silent: with or without clipped linears
/// (`use_clipped_linears`: every `Gemma4ClippableLinear` clamps its input and output
/// into new tensors), key/value heads that divide the heads
/// (`Gemma4VisionAttention`'s `num_key_value_groups`), head sizes a multiple of 4
/// (`apply_multidimensional_rope` splits each head in two halves of
/// 2 · (head_dim ÷ 4)); `None` otherwise, and for another tower.
fn gemma4_vision_shape(root: &Cfg, tower: &Value) -> Result<Option<VisionTower>, EstimateError> {
    if root.str("model_type") != Some("gemma4")
        || tower.get("model_type").and_then(Value::as_str) != Some("gemma4_vision")
    {
        return Ok(None);
    }
    let [
        hidden,
        intermediate,
        layers,
        heads,
        kv_heads,
        head_dim,
        patch,
        pool,
    ] = sizes(
        tower,
        [
            ("hidden_size", 768),
            ("intermediate_size", 3072),
            ("num_hidden_layers", 16),
            ("num_attention_heads", 12),
            ("num_key_value_heads", 12),
            ("head_dim", 64),
            ("patch_size", 16),
            ("pooling_kernel_size", 3),
        ],
    )?
    .map(fit);
    let (heads, kv_heads, head_dim) = (heads?, kv_heads?, head_dim?);
    if heads.checked_rem(kv_heads) != Some(0) || head_dim % 4 != 0 || head_dim == 0 {
        return Ok(None);
    }
    Ok(Some(VisionTower {
        hidden: hidden?,
        layers: layers?,
        heads,
        intermediate: intermediate?,
        patch: patch?,
        pool: pool?,
        head_dim,
        kv_heads,
        clipped: Cfg::new(tower).flag("use_clipped_linears") == Some(true),
        ..VisionTower::BASE
    }))
}

/// One image as the tower takes it: (prompt tokens, pixel values), for the towers whose
/// processor fixes both; `None` otherwise. Gemma 3 without pan-and-scan (vLLM v0.19.0
/// `model_executor/models/gemma3_mm.py` `get_num_image_tokens`: (crops + 1) ×
/// `mm_tokens_per_image`, no crops by default) resizes every image to `image_size`
/// square over `num_channels`.
fn gemma3_item(root: &Cfg, tower: &Value) -> Result<Option<(u64, u64)>, EstimateError> {
    if root.str("model_type") != Some("gemma3") {
        return Ok(None);
    }
    let t = Cfg::new(tower);
    let tokens = root.uint("mm_tokens_per_image")?.unwrap_or(256);
    let side = t.uint("image_size")?.unwrap_or(224);
    let channels = t.uint("num_channels")?.unwrap_or(3);
    let values = channels
        .checked_mul(side)
        .and_then(|v| v.checked_mul(side))
        .ok_or_else(|| parse("vision_config: absurdly large".into()))?;
    Ok(Some((tokens, values)))
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&GEMMA, &GEMMA2, &VAULTGEMMA, &GEMMA3, &GEMMA4];

/// Gemma 4's audio tower (transformers 5.23 `Gemma4AudioModel`,
/// `models/gemma4/modeling_gemma4.py`) and its `embed_audio`:
///
/// | part | transformers | parameters |
/// |---|---|---|
/// | two 3×3 convolutions without bias, each with a LayerNorm without bias, then `input_proj_linear` from (channels₀ / 4) × channels₁ | `Gemma4AudioSubSampleConvProjection` | c₀·9 + c₀ + c₁·c₀·9 + c₁ + h·(c₀/4)·c₁ |
/// | per conformer layer: two feed-forwards (4h wide, pre and post RMSNorm) | `Gemma4AudioFeedForward` | 2·(8h² + 2h) |
/// | attention: q, k, v and `post` (h × h), `relative_k_proj`, `per_dim_scale` over one head | `Gemma4AudioAttention` | 5h² + h / heads |
/// | light conv: `linear_start` (h → 2h), depthwise conv of `conv_kernel_size`, `linear_end`, two RMSNorms | `Gemma4AudioLightConv1d` | 3h² + h·k + 2h |
/// | three RMSNorms | `Gemma4AudioLayer` | 3h |
/// | four scalar buffers on each of the ten clippable linears under `use_clipped_linears` | `Gemma4ClippableLinear` | 40 |
/// | `output_proj` to `output_proj_dims` with bias | `Gemma4AudioModel` | P·h + P |
/// | `embed_audio`: P → text hidden, no bias (its RMSNorm has no weight) | `Gemma4MultimodalEmbedder` | P·T |
///
/// `None` for another tower.
#[allow(clippy::arithmetic_side_effects)]
fn gemma4_audio(root: &Cfg, tower: &Value, text_hidden: u64) -> Result<Option<u64>, EstimateError> {
    if root.str("model_type") != Some("gemma4")
        || tower.get("model_type").and_then(Value::as_str) != Some("gemma4_audio")
    {
        return Ok(None);
    }
    let [h, layers, heads, k, out] = sizes(
        tower,
        [
            ("hidden_size", 1024),
            ("num_hidden_layers", 12),
            ("num_attention_heads", 8),
            ("conv_kernel_size", 5),
            ("output_proj_dims", 1536),
        ],
    )?;
    let (c0, c1) = match tower.get("subsampling_conv_channels") {
        None | Some(Value::Null) => (128, 32),
        Some(Value::Array(l)) if l.len() == 2 => match (l[0].as_u64(), l[1].as_u64()) {
            (Some(a), Some(b)) if a <= 1 << 20 && b <= 1 << 20 => (u128::from(a), u128::from(b)),
            _ => {
                return Err(parse(
                    "audio_config.subsampling_conv_channels: not two sizes".into(),
                ));
            }
        },
        Some(_) => {
            return Err(parse(
                "audio_config.subsampling_conv_channels should be two channel counts".into(),
            ));
        }
    };
    let clipped = tower.get("use_clipped_linears").and_then(Value::as_bool) != Some(false);
    let subsample = c0 * 9 + c0 + c1 * c0 * 9 + c1 + h * (c0 / 4) * c1;
    let ffw = 2 * (8 * h * h + 2 * h);
    let attention = 5 * h * h + h.checked_div(heads).unwrap_or(0);
    let lconv = 3 * h * h + h * k + 2 * h;
    let layer = ffw + attention + lconv + 3 * h + if clipped { 40 } else { 0 };
    let t = u128::from(text_hidden);
    let n = subsample + layers * layer + out * h + out + out * t;
    Ok(Some(fit(n)?))
}

/// Gemma 4's audio tower shape, where the estimate derives its forward over a clip
/// (`estimate::audio`): Gemma4AudioConfig's keys and defaults (transformers 5.23
/// `models/gemma4/configuration_gemma4.py`), the feed-forward 4 × `hidden_size` wide
/// (`Gemma4AudioFeedForward`), 128 mel bins (`Gemma4AudioFeatureExtractor`'s
/// `feature_size`) and at most 750 soft tokens a clip (`Gemma4Processor`'s
/// `audio_seq_length`). `None` for another tower.
fn gemma4_audio_shape(tower: &Value) -> Result<Option<crate::arch::AudioTower>, EstimateError> {
    if tower.get("model_type").and_then(Value::as_str) != Some("gemma4_audio") {
        return Ok(None);
    }
    let [h, layers, heads, kernel, out, chunk, left, right] = sizes(
        tower,
        [
            ("hidden_size", 1024),
            ("num_hidden_layers", 12),
            ("num_attention_heads", 8),
            ("conv_kernel_size", 5),
            ("output_proj_dims", 1536),
            ("attention_chunk_size", 12),
            ("attention_context_left", 13),
            ("attention_context_right", 0),
        ],
    )?;
    let channels = match tower.get("subsampling_conv_channels") {
        None | Some(Value::Null) => [128, 32],
        Some(Value::Array(l)) if l.len() == 2 => match (l[0].as_u64(), l[1].as_u64()) {
            (Some(a), Some(b)) => [a, b],
            _ => {
                return Err(parse(
                    "audio_config.subsampling_conv_channels: not two sizes".into(),
                ));
            }
        },
        Some(_) => {
            return Err(parse(
                "audio_config.subsampling_conv_channels should be two channel counts".into(),
            ));
        }
    };
    let n = fit;
    if chunk == 0 {
        return Err(parse("audio_config.attention_chunk_size: 0".into()));
    }
    Ok(Some(crate::arch::AudioTower {
        hidden: n(h)?,
        layers: n(layers)?,
        heads: n(heads)?,
        intermediate: n(h.saturating_mul(4))?,
        mels: 128,
        positions: 750,
        chunk: n(chunk)?,
        context_left: n(left)?,
        context_right: n(right)?,
        conv_channels: n(u128::from(channels[0]))?,
        conv_out: n(u128::from(channels[1]))?,
        kernel: n(kernel)?,
        output: n(out)?,
        clipped: tower.get("use_clipped_linears").and_then(Value::as_bool) != Some(false),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gemma-3-4B's SigLIP tower (its published `vision_config`) read as the tower
    /// forward's shape; a tower keeping SigLIP's pooling head is not derived.
    #[test]
    fn gemma3_towers_shape_is_read() {
        let root = serde_json::json!({"model_type": "gemma3"});
        let mut tower = serde_json::json!({"hidden_size": 1152, "image_size": 896,
            "intermediate_size": 4304, "model_type": "siglip_vision_model",
            "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14,
            "vision_use_head": false});
        let t = gemma3_vision(&Cfg::new(&root), &tower).unwrap().unwrap();
        assert_eq!(
            (
                t.hidden,
                t.layers,
                t.heads,
                t.intermediate,
                t.patch,
                t.image,
                t.channels,
                t.merge
            ),
            (1152, 27, 16, 4304, 14, 896, 3, 0)
        );
        tower["vision_use_head"] = serde_json::json!(true);
        assert_eq!(gemma3_vision(&Cfg::new(&root), &tower).unwrap(), None);
    }

    /// A tower with every option on, against the model transformers 5.23 builds from it
    /// on the meta device (parameters and persistent buffers of `model.vision_tower`
    /// and `model.embed_vision`: 519 356 196 + 6 193 152).
    #[test]
    fn gemma4_vision_counts_clipped_linears_and_standardisation() {
        let root: Value = serde_json::json!({"model_type": "gemma4"});
        let tower = serde_json::json!({"model_type": "gemma4_vision", "hidden_size": 1152,
            "intermediate_size": 4304, "num_hidden_layers": 27, "num_attention_heads": 16,
            "num_key_value_heads": 8, "head_dim": 72, "patch_size": 14,
            "position_embedding_size": 4096, "use_clipped_linears": true, "standardize": true});
        let n = gemma4_vision(&Cfg::new(&root), &tower, 5376).unwrap();
        assert_eq!(n, Some(525_549_348));
        let other = serde_json::json!({"model_type": "siglip_vision_model"});
        assert_eq!(gemma4_vision(&Cfg::new(&root), &other, 5376).unwrap(), None);
    }

    /// Gemma 4's tower as its forward is derived: Gemma4VisionConfig's defaults where
    /// the config names only its type (Gemma-4-31B's), with clipped linears (Gemma 4
    /// E4B's tower), with key/value heads that divide the heads, not with others.
    #[test]
    fn gemma4_vision_shape_reads_the_defaults() {
        let root: Value = serde_json::json!({"model_type": "gemma4"});
        let tower = serde_json::json!({"model_type": "gemma4_vision"});
        let t = gemma4_vision_shape(&Cfg::new(&root), &tower)
            .unwrap()
            .unwrap();
        assert_eq!(
            t,
            VisionTower {
                hidden: 768,
                layers: 16,
                heads: 12,
                intermediate: 3072,
                patch: 16,
                pool: 3,
                head_dim: 64,
                kv_heads: 12,
                ..VisionTower::BASE
            }
        );
        let read = |tower: Value| gemma4_vision_shape(&Cfg::new(&root), &tower).unwrap();
        let clipped =
            serde_json::json!({"model_type": "gemma4_vision", "use_clipped_linears": true});
        assert_eq!(read(clipped).map(|t| t.clipped), Some(true));
        let grouped = serde_json::json!({"model_type": "gemma4_vision", "num_key_value_heads": 4});
        assert_eq!(read(grouped).map(|t| t.kv_heads), Some(4));
        for other in [
            serde_json::json!({"model_type": "gemma4_vision", "num_key_value_heads": 5}),
            serde_json::json!({"model_type": "gemma4_vision", "num_key_value_heads": 0}),
            serde_json::json!({"model_type": "siglip_vision_model"}),
        ] {
            assert_eq!(gemma4_vision_shape(&Cfg::new(&root), &other).unwrap(), None);
        }
    }

    #[test]
    fn gemma4_audio_shape_is_read() {
        // Gemma4AudioConfig's defaults, as google/gemma-4-E2B-it and -E4B-it publish
        // their `audio_config`.
        let tower = serde_json::json!({"model_type": "gemma4_audio"});
        let t = gemma4_audio_shape(&tower).unwrap().unwrap();
        assert_eq!(
            (
                t.hidden,
                t.layers,
                t.heads,
                t.intermediate,
                t.mels,
                t.positions
            ),
            (1024, 12, 8, 4096, 128, 750)
        );
        assert_eq!(
            (
                t.chunk,
                t.context_left,
                t.context_right,
                t.conv_channels,
                t.conv_out
            ),
            (12, 13, 0, 128, 32)
        );
        assert_eq!((t.kernel, t.output, t.clipped), (5, 1536, true));
        let plain = serde_json::json!({"model_type": "gemma4_audio", "use_clipped_linears": false,
            "hidden_size": 512, "attention_chunk_size": 16});
        let t = gemma4_audio_shape(&plain).unwrap().unwrap();
        assert_eq!(
            (t.hidden, t.intermediate, t.chunk, t.clipped),
            (512, 2048, 16, false)
        );
        let other = serde_json::json!({"model_type": "gemma3n_audio"});
        assert_eq!(gemma4_audio_shape(&other).unwrap(), None);
        let none = serde_json::json!({"model_type": "gemma4_audio", "attention_chunk_size": 0});
        assert!(gemma4_audio_shape(&none).is_err());
    }

    /// Gemma4AudioConfig's defaults beside a 2304-wide text model, against the model
    /// transformers 5.23 builds on the meta device (`AutoConfig.for_model("gemma4",
    /// audio_config={})`: parameters and persistent buffers of `model.audio_tower`
    /// and `model.embed_audio`, 308 364 032), and without the clipped linears' buffers
    /// (12 layers × 40 fewer).
    #[test]
    fn gemma4_audio_counts_the_conformer_and_its_embedder() {
        let root: Value = serde_json::json!({"model_type": "gemma4"});
        let tower = serde_json::json!({"model_type": "gemma4_audio"});
        let n = gemma4_audio(&Cfg::new(&root), &tower, 2304).unwrap();
        assert_eq!(n, Some(308_364_032));
        let plain = serde_json::json!({"model_type": "gemma4_audio", "use_clipped_linears": false});
        let n = gemma4_audio(&Cfg::new(&root), &plain, 2304).unwrap();
        assert_eq!(n, Some(308_364_032 - 12 * 40));
        let other = serde_json::json!({"model_type": "gemma3n_audio"});
        assert_eq!(gemma4_audio(&Cfg::new(&root), &other, 2304).unwrap(), None);
    }
}
