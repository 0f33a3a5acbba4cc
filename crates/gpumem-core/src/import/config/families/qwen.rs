//! Qwen2 / Qwen2-MoE (q/k/v biases, sliding layers from `max_window_layers`, the
//! shared expert's sigmoid gate), Qwen3 / Qwen3-MoE (per-head q/k norms) and
//! Qwen3-Next (Gated DeltaNet layers beside gated full attention); the vision towers
//! of Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5, and Qwen2-Audio's encoder.

use serde_json::Value;

use crate::arch::{Architecture, Mixer, MixerKind, VisionTower};
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family, Sliding};
use crate::import::config::json::{Cfg, parse};
use crate::import::config::tower::{axial_rope_bytes, fit, head_width, sizes};

/// Qwen2, and Qwen2-VL's and Qwen2.5-VL's language models (their vision towers are
/// counted by the tower reader).
pub(crate) const QWEN2: Family = Family {
    types: "qwen2 qwen2_vl_text qwen2_5_vl_text",
    class: "Qwen2Config",
    arch: Architecture {
        qkv_bias: true,
        ..Architecture::BASE
    },
    sliding: Sliding::FromMaxWindowLayers,
    ..BASE
};

/// Qwen2-VL: Qwen2's language model (its `text_config`, or the root without one:
/// transformers 5.23 `Qwen2VLConfig.__post_init__` moves the root's text keys into
/// `Qwen2VLTextConfig`) and the vision tower and merger of its root.
pub(crate) const QWEN2_VL: Family = Family {
    types: "qwen2_vl",
    tower: Some(|_, tower, _| Ok(Some((qwen2_vl(tower)?, None)))),
    // Qwen2VisionTransformerPretrainedModel.rotary_pos_emb
    // (`models/qwen2_vl/modeling_qwen2_vl.py`, `Qwen2VLVisionRotaryEmbedding.
    // compute_axial_rope_parameters`: head = `head_dim` or `embed_dim // num_heads`,
    // over `spatial_dim = head // 2`), Qwen2VLVisionConfig's embed_dim 1280, num_heads 16.
    tower_rope: Some(|t| {
        let [embed, heads, given] =
            sizes(t, [("embed_dim", 1280), ("num_heads", 16), ("head_dim", 0)])?;
        let head = if given > 0 {
            given
        } else {
            embed.checked_div(heads).unwrap_or(0)
        };
        Ok(axial_rope_bytes(fit(head)? / 2))
    }),
    vision: Some(|_, tower| qwen_vision(tower, QwenTower::V2).map(Some)),
    ..QWEN2
};

/// Qwen2.5-VL: Qwen2's language model (its `text_config`, or the root without one) and
/// the vision tower and merger of its root.
pub(crate) const QWEN2_5_VL: Family = Family {
    types: "qwen2_5_vl",
    tower: Some(|_, tower, _| Ok(Some((qwen2_5_vl(tower)?, None)))),
    // Qwen2_5_VisionTransformerPretrainedModel.rotary_pos_emb
    // (`models/qwen2_5_vl/modeling_qwen2_5_vl.py`, `compute_axial_rope_parameters`:
    // `spatial_dim = dim // 2`), Qwen2_5_VLVisionConfig's hidden_size 3584, num_heads 16.
    tower_rope: Some(|t| Ok(axial_rope_bytes(head_width(t, 3584, "num_heads", 16)? / 2))),
    vision: Some(|_, tower| qwen_vision(tower, QwenTower::V2_5).map(Some)),
    ..QWEN2
};

/// Qwen2-Audio: Qwen2's language model of its `text_config` and the audio encoder and
/// projector of its root.
pub(crate) const QWEN2_AUDIO: Family = Family {
    types: "qwen2_audio",
    class: "Qwen2AudioConfig",
    audio: Some(|root, tower, hidden| {
        // The root's `vocab_size` (written by transformers 4.45's Qwen2AudioConfig) is a
        // copy of the text config's, which sizes the embeddings.
        root.touch(&["vocab_size"]);
        Ok(qwen2_audio(tower, hidden)?.map(|n| (n, None)))
    }),
    audio_shape: Some(qwen2_audio_shape),
    ..QWEN2
};

/// Qwen2-MoE: Qwen2MoeSparseMoeBlock's `shared_expert_gate`; q/k/v biases under
/// `qkv_bias` (transformers 5.23 `Qwen2MoeAttention`; Qwen2MoeConfig's default true).
pub(crate) const QWEN2_MOE: Family = Family {
    types: "qwen2_moe",
    class: "Qwen2MoeConfig",
    shared_gate: true,
    // Qwen2MoeTopKRouter.forward: `router_top_value.to(router_logits.dtype)`.
    router_casts: true,
    hook: Some(|c, d| {
        d.arch.qkv_bias = c.flag("qkv_bias").unwrap_or(true);
        d.arch.o_bias = false;
        Ok(())
    }),
    ..QWEN2
};

/// Qwen3 and Qwen3-MoE, and Qwen3-VL's language models (their vision tower is
/// counted by the tower reader).
pub(crate) const QWEN3: Family = Family {
    types: "qwen3 qwen3_moe qwen3_vl_text qwen3_vl_moe_text",
    class: "Qwen3Config",
    arch: Architecture {
        qk_norm: true,
        ..Architecture::BASE
    },
    // Qwen3MoeTopKRouter.forward (and Qwen3-VL-MoE's): `router_top_value.to(router_logits.dtype)`.
    router_casts: true,
    ..BASE
};

/// Qwen3-VL and Qwen3-VL-MoE: Qwen3's language models and the vision tower of their
/// root.
pub(crate) const QWEN3_VL: Family = Family {
    types: "qwen3_vl qwen3_vl_moe",
    tower: Some(|_, tower, _| Ok(Some((qwen3_vl(tower, 3)?, None)))),
    // Qwen3VLVisionModel.rotary_pos_emb (`models/qwen3_vl/modeling_qwen3_vl.py`,
    // `Qwen3VLVisionRotaryEmbedding`: over head // 2), Qwen3VLVisionConfig's
    // hidden_size 1152, num_heads 16; Qwen3.5's tower the same
    // (`models/qwen3_5/modeling_qwen3_5.py`, `Qwen3_5VisionRotaryEmbedding`).
    tower_rope: Some(|t| Ok(axial_rope_bytes(head_width(t, 1152, "num_heads", 16)? / 2))),
    vision: Some(|_, tower| qwen_vision(tower, QwenTower::V3).map(Some)),
    ..QWEN3
};

/// Qwen3.5 and Qwen3.5-MoE: Qwen3-Next-style language models (their `text_config`)
/// and the vision tower of their root, Qwen3-VL's without its deepstack mergers
/// (transformers 5.23 `models/qwen3_5/modeling_qwen3_5.py`, `Qwen3_5VisionModel`).
pub(crate) const QWEN3_5: Family = Family {
    types: "qwen3_5 qwen3_5_moe",
    tower: Some(|_, tower, _| {
        if tower
            .get("model_type")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.starts_with("qwen3_5"))
        {
            return Ok(None);
        }
        Ok(Some((qwen3_vl(tower, 0)?, None)))
    }),
    tower_rope: QWEN3_VL.tower_rope,
    // `Qwen3_5VisionModel.forward` is `Qwen3VLVisionModel.forward` without the
    // deepstack mergers (`Qwen3_5VisionConfig` has no `deepstack_visual_indexes`; a
    // config's list is not read), the same defaults.
    vision: Some(|_, tower| {
        if tower
            .get("model_type")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.starts_with("qwen3_5"))
        {
            return Ok(None);
        }
        qwen_vision(tower, QwenTower::V3).map(|v| Some(VisionTower { deepstack: 0, ..v }))
    }),
    ..QWEN3_NEXT
};

/// Qwen3-Next: Qwen3NextAttention's q_proj yields the queries and a sigmoid output
/// gate; Qwen3NextSparseMoeBlock's `shared_expert_gate`.
pub(crate) const QWEN3_NEXT: Family = Family {
    types: "qwen3_next qwen3_5_text qwen3_5_moe_text",
    class: "Qwen3NextConfig",
    arch: Architecture {
        qk_norm: true,
        attn_gate: true,
        ..Architecture::BASE
    },
    shared_gate: true,
    // Qwen3NextTopKRouter.forward: `router_top_value.to(router_logits.dtype)`.
    router_casts: true,
    layer_types: "linear_attention",
    hook: Some(delta_net),
    ..BASE
};

/// Qwen3-Next's Gated DeltaNet layers (transformers' Qwen3NextConfig /
/// Qwen3NextGatedDeltaNet): `layer_types`, else every `full_attention_interval`-th
/// layer is full attention and the others linear attention.
fn delta_net(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let layers = d.arch.layers;
    let linear = match c.count_of("layer_types", "linear_attention") {
        Some(n) => n,
        None => {
            let every = d.or_default(c, "full_attention_interval", 4)?.max(1);
            layers.saturating_sub(layers.checked_div(every).unwrap_or(0))
        }
    };
    let heads = d.or_default(c, "linear_num_value_heads", 32)?;
    let v_dim = d.or_default(c, "linear_value_head_dim", 128)?;
    d.arch.mixer = Some(Mixer {
        kind: MixerKind::DeltaNet,
        layers: linear,
        inner: heads.saturating_mul(v_dim),
        state: d.or_default(c, "linear_key_head_dim", 128)?,
        conv: d.or_default(c, "linear_conv_kernel_dim", 4)?,
        heads,
        key_heads: d.or_default(c, "linear_num_key_heads", 16)?,
        ..Mixer::BASE
    });
    Ok(())
}

/// Qwen2-Audio's encoder and projector (transformers 5.23
/// `models/qwen2_audio/modeling_qwen2_audio.py`): `Qwen2AudioEncoder`'s two
/// convolutions over `num_mel_bins` (kernel 3, with biases), its position table of
/// `max_source_positions` rows (frozen, stored), layers of q/v/out with biases and a
/// bias-free k, two LayerNorms and fc1/fc2 with biases, the final LayerNorm; the
/// average pooler holds nothing; `Qwen2AudioMultiModalProjector`'s linear with its bias
/// to the text width. `None` for another encoder.
#[allow(clippy::arithmetic_side_effects)]
fn qwen2_audio(tower: &Value, text_hidden: u64) -> Result<Option<u64>, EstimateError> {
    if tower.get("model_type").and_then(Value::as_str) != Some("qwen2_audio_encoder") {
        return Ok(None);
    }
    // Qwen2AudioConfig's encoder defaults where the config is silent.
    let [d, ffn, layers, mels, positions] = sizes(
        tower,
        [
            ("d_model", 1280),
            ("encoder_ffn_dim", 5120),
            ("encoder_layers", 32),
            ("num_mel_bins", 128),
            ("max_source_positions", 1500),
        ],
    )?;
    let text = u128::from(text_hidden);
    let convs = mels * d * 3 + d + d * d * 3 + d;
    let layer = 4 * d * d + 3 * d + 4 * d + 2 * d * ffn + ffn + d;
    fit(convs + positions * d + layers * layer + 2 * d + d * text + text).map(Some)
}

/// Qwen2-Audio's encoder shape, where the estimate derives its forward over a clip
/// (`estimate::audio`): the same keys and Qwen2AudioEncoderConfig defaults as
/// [`qwen2_audio`] counts with, and its heads (`encoder_attention_heads`, 20). `None`
/// for another encoder.
fn qwen2_audio_shape(tower: &Value) -> Result<Option<crate::arch::AudioTower>, EstimateError> {
    if tower.get("model_type").and_then(Value::as_str) != Some("qwen2_audio_encoder") {
        return Ok(None);
    }
    let [hidden, intermediate, layers, mels, positions, heads] = sizes(
        tower,
        [
            ("d_model", 1280),
            ("encoder_ffn_dim", 5120),
            ("encoder_layers", 32),
            ("num_mel_bins", 128),
            ("max_source_positions", 1500),
            ("encoder_attention_heads", 20),
        ],
    )?;
    let n = fit;
    Ok(Some(crate::arch::AudioTower {
        hidden: n(hidden)?,
        layers: n(layers)?,
        heads: n(heads)?,
        intermediate: n(intermediate)?,
        mels: n(mels)?,
        positions: n(positions)?,
        ..crate::arch::AudioTower::BASE
    }))
}

/// Parameters of Qwen2-VL's vision tower and merger, counted as transformers 5.23
/// builds `Qwen2VisionTransformerPretrainedModel` (`models/qwen2_vl/modeling_qwen2_vl.py`):
/// `PatchEmbed`'s bias-free Conv3d of `in_channels × temporal_patch_size × patch_size²`
/// per output to `embed_dim`; `depth` `Qwen2VLVisionBlock`s of two LayerNorms (weight
/// and bias), `VisionAttention`'s fused `qkv` and `proj` with biases and `VisionMlp`'s
/// `fc1`/`fc2` with biases over `int(embed_dim × mlp_ratio)`; `PatchMerger`'s `ln_q`
/// (a LayerNorm over one patch) and two linears with biases over `spatial_merge_size²`
/// patches concatenated, to `hidden_size` (the text width). The rotary's frequencies
/// are buffers. Missing sizes are Qwen2VLVisionConfig's defaults (embed 1280, depth 32,
/// mlp_ratio 4, 3 channels, patch 14, temporal 2, merge 2, hidden 3584).
// Factors at most 2^20 (see `sizes`): the u128 products stay below 2^100.
#[allow(clippy::arithmetic_side_effects)]
fn qwen2_vl(tower: &Value) -> Result<u64, EstimateError> {
    let [e, ratio, depth, ch, patch, temporal, merge, out] = sizes(
        tower,
        [
            ("embed_dim", 1280),
            ("mlp_ratio", 4),
            ("depth", 32),
            ("in_channels", 3),
            ("patch_size", 14),
            ("temporal_patch_size", 2),
            ("spatial_merge_size", 2),
            ("hidden_size", 3584),
        ],
    )?;
    let inter = e * ratio;
    let embed = e * ch * temporal * patch * patch;
    let block = 4 * e + (3 * e * e + 3 * e) + (e * e + e) + (inter * e + inter) + (e * inter + e);
    let wide = e * merge * merge;
    let merger = 2 * e + (wide * wide + wide) + (out * wide + out);
    fit(embed + depth * block + merger)
}

/// Parameters of Qwen2.5-VL's vision tower and merger, counted as transformers'
/// `Qwen2_5_VisionTransformerPretrainedModel` stores them: the patch embedding (a
/// bias-free Conv3d of `in_channels × temporal_patch_size × patch_size²` per output),
/// `depth` blocks of two RMSNorms, `qkv` and `proj` with biases and a gated MLP with
/// biases, and the merger (`ln_q`, then `spatial_merge_size²` patches concatenated
/// through two linears with biases to `out_hidden_size`).
// Every factor is at most 2^20 (checked below): the u128 products stay below 2^100.
#[allow(clippy::arithmetic_side_effects)]
fn qwen2_5_vl(tower: &Value) -> Result<u64, EstimateError> {
    let t = Cfg::new(tower);
    // Qwen2_5_VLVisionConfig's defaults where the config is silent.
    let get = |k: &str, d: u64| t.uint(k).map(|x| x.unwrap_or(d));
    let dims = [
        get("hidden_size", 3584)?,
        get("intermediate_size", 3420)?,
        get("depth", 32)?,
        get("in_channels", 3)?,
        get("patch_size", 14)?,
        get("temporal_patch_size", 2)?,
        get("spatial_merge_size", 2)?,
        get("out_hidden_size", 3584)?,
    ];
    if dims.iter().any(|v| *v > 1 << 20) {
        return Err(parse("vision_config: absurdly large".into()));
    }
    let [h, inter, depth, ch, patch, temporal, merge, out] = dims.map(u128::from);
    let embed = h * ch * temporal * patch * patch;
    let block = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * (inter * h + inter) + h * inter + h;
    let wide = h * merge * merge;
    let merger = h + (wide * wide + wide) + (out * wide + out);
    u64::try_from(embed + depth * block + merger)
        .map_err(|_| parse("vision_config: absurdly large".into()))
}

/// Qwen3-VL's vision tower (transformers' `Qwen3VLVisionModel`): a Conv3d patch
/// embedding with bias, a learned position table of `num_position_embeddings`,
/// `depth` blocks of two LayerNorms, `qkv` and `proj` with biases and a two-layer MLP
/// with biases, the merger (a LayerNorm over one patch, then `spatial_merge_size²`
/// patches through two linears with biases to `out_hidden_size`), and one such merger
/// per `deepstack_visual_indexes` entry normed over the merged patches.
/// `deepstack_default`: the mergers when the config does not list them (Qwen3-VL 3,
/// Qwen3.5 none).
// Factors at most 2^20 (see `sizes`): the u128 products stay below 2^100.
#[allow(clippy::arithmetic_side_effects)]
fn qwen3_vl(tower: &Value, deepstack_default: usize) -> Result<u64, EstimateError> {
    let [h, inter, depth, ch, patch, temporal, merge, out, positions] = sizes(
        tower,
        [
            ("hidden_size", 1152),
            ("intermediate_size", 4304),
            ("depth", 27),
            ("in_channels", 3),
            ("patch_size", 16),
            ("temporal_patch_size", 2),
            ("spatial_merge_size", 2),
            ("out_hidden_size", 3584),
            ("num_position_embeddings", 2304),
        ],
    )?;
    let deepstack = Cfg::new(tower)
        .list("deepstack_visual_indexes")
        .map_or(deepstack_default, |l| l.len()) as u128;
    let embed = h * ch * temporal * patch * patch + h + positions * h;
    let block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (inter * h + inter) + (h * inter + h);
    let wide = h * merge * merge;
    let mlp = (wide * wide + wide) + (out * wide + out);
    let merger = 2 * h + mlp;
    let deep = deepstack * (2 * wide + mlp);
    fit(embed + depth * block + merger + deep)
}

/// Which of Qwen's towers a config holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum QwenTower {
    /// Qwen2-VL's (`Qwen2VLVisionConfig`): every block over the whole image, LayerNorms
    /// and a plain MLP (`VisionMlp`: fc1, quick_gelu, fc2), no learned positions.
    V2,
    /// Qwen2.5-VL's (`Qwen2_5_VLVisionConfig`): window attention beside
    /// `fullatt_block_indexes`.
    V2_5,
    /// Qwen3-VL's (`Qwen3VLVisionConfig`): interpolated learned positions and deepstack
    /// mergers.
    V3,
}

/// Qwen2.5-VL's or Qwen3-VL's tower as its forward is derived (`estimate::tower`), its
/// missing sizes the config class's defaults (transformers 5.23
/// `Qwen2_5_VLVisionConfig`: hidden 3584, depth 32, 16 heads, intermediate 3420,
/// patch 14, window 112, full-attention blocks [7, 15, 23, 31], out 3584;
/// `Qwen3VLVisionConfig`: hidden 1152, depth 27, 16 heads, intermediate 4304, patch
/// 16, out 3584, deepstack [8, 16, 24]; both 3 channels, temporal patch 2, merge 2).
/// Qwen3-VL's positions are interpolated bilinearly (`Qwen3VLVisionModel`:
/// `interpolation_mode = "bilinear"`): four table rows a patch.
///
/// Qwen2-VL's keys differ: its width is `embed_dim` (1280), its MLP
/// `int(embed_dim × mlp_ratio)` (4) wide (`Qwen2VLVisionBlock`), and `hidden_size`
/// (3584) is the merger's output (`PatchMerger(dim=config.hidden_size, …)`); depth 32,
/// 16 heads, patch 14, no window, no deepstack, no learned positions.
fn qwen_vision(tower: &Value, which: QwenTower) -> Result<VisionTower, EstimateError> {
    if which == QwenTower::V2 {
        let [
            hidden,
            ratio,
            layers,
            heads,
            patch,
            temporal,
            channels,
            merge,
            out,
        ] = sizes(
            tower,
            [
                ("embed_dim", 1280),
                ("mlp_ratio", 4),
                ("depth", 32),
                ("num_heads", 16),
                ("patch_size", 14),
                ("temporal_patch_size", 2),
                ("in_channels", 3),
                ("spatial_merge_size", 2),
                ("hidden_size", 3584),
            ],
        )?;
        return Ok(VisionTower {
            hidden: fit(hidden)?,
            layers: fit(layers)?,
            heads: fit(heads)?,
            intermediate: fit(hidden.saturating_mul(ratio))?,
            patch: fit(patch)?,
            temporal: fit(temporal)?,
            channels: fit(channels)?,
            merge: fit(merge)?,
            out: fit(out)?,
            ..VisionTower::BASE
        });
    }
    let v3 = which == QwenTower::V3;
    let [
        hidden,
        layers,
        heads,
        intermediate,
        patch,
        temporal,
        channels,
        merge,
        out,
        window,
    ] = sizes(
        tower,
        [
            ("hidden_size", if v3 { 1152 } else { 3584 }),
            ("depth", if v3 { 27 } else { 32 }),
            ("num_heads", 16),
            ("intermediate_size", if v3 { 4304 } else { 3420 }),
            ("patch_size", if v3 { 16 } else { 14 }),
            ("temporal_patch_size", 2),
            ("in_channels", 3),
            ("spatial_merge_size", 2),
            ("out_hidden_size", 3584),
            ("window_size", if v3 { 0 } else { 112 }),
        ],
    )?
    .map(fit);
    let listed = |key: &str, default: u64| {
        Cfg::new(tower)
            .list(key)
            .map_or(default, |l| u64::try_from(l.len()).unwrap_or(u64::MAX))
    };
    Ok(VisionTower {
        hidden: hidden?,
        layers: layers?,
        heads: heads?,
        intermediate: intermediate?,
        patch: patch?,
        temporal: temporal?,
        channels: channels?,
        merge: merge?,
        image: 0,
        window: if v3 { 0 } else { window? },
        full_layers: if v3 {
            0
        } else {
            listed("fullatt_block_indexes", 4)
        },
        deepstack: if v3 {
            listed("deepstack_visual_indexes", 3)
        } else {
            0
        },
        out: out?,
        pos_taps: if v3 { 4 } else { 0 },
        ..VisionTower::BASE
    })
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[
    &QWEN2_AUDIO,
    &QWEN2,
    &QWEN2_VL,
    &QWEN2_5_VL,
    &QWEN2_MOE,
    &QWEN3,
    &QWEN3_VL,
    &QWEN3_NEXT,
    &QWEN3_5,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen2.5-VL-7B's and Qwen3-VL-8B's `vision_config` (their published configs) read
    /// as the tower forward's shape: the window and full-attention blocks, the
    /// deepstack mergers and the bilinear positions.
    #[test]
    fn qwen_towers_shapes_are_read() {
        let v25 = serde_json::json!({"depth": 32, "hidden_act": "silu", "hidden_size": 1280,
            "intermediate_size": 3420, "num_heads": 16, "in_chans": 3, "out_hidden_size": 3584,
            "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14,
            "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31],
            "tokens_per_second": 2, "temporal_patch_size": 2});
        let t = qwen_vision(&v25, QwenTower::V2_5).unwrap();
        assert_eq!(
            (
                t.hidden,
                t.layers,
                t.heads,
                t.intermediate,
                t.patch,
                t.temporal,
                t.merge
            ),
            (1280, 32, 16, 3420, 14, 2, 2)
        );
        assert_eq!(
            (t.window, t.full_layers, t.deepstack, t.out, t.pos_taps),
            (112, 4, 0, 3584, 0)
        );
        let v3 = serde_json::json!({"deepstack_visual_indexes": [8, 16, 24], "depth": 27,
            "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1152, "in_channels": 3,
            "intermediate_size": 4304, "model_type": "qwen3_vl", "num_heads": 16,
            "num_position_embeddings": 2304, "out_hidden_size": 4096, "patch_size": 16,
            "spatial_merge_size": 2, "temporal_patch_size": 2});
        let t = qwen_vision(&v3, QwenTower::V3).unwrap();
        assert_eq!(
            (t.hidden, t.layers, t.intermediate, t.patch),
            (1152, 27, 4304, 16)
        );
        assert_eq!(
            (t.window, t.full_layers, t.deepstack, t.out, t.pos_taps),
            (0, 0, 3, 4096, 4)
        );
        // Qwen3.5's: Qwen3-VL's without deepstack mergers, another tower not read.
        let root = serde_json::json!({"model_type": "qwen3_5"});
        let shape = QWEN3_5.vision.unwrap();
        let v35 = serde_json::json!({"deepstack_visual_indexes": [], "depth": 27,
            "hidden_size": 1152, "intermediate_size": 4304, "model_type": "qwen3_5",
            "num_heads": 16, "out_hidden_size": 4096, "patch_size": 16});
        let t = shape(&Cfg::new(&root), &v35).unwrap().unwrap();
        assert_eq!((t.deepstack, t.out, t.pos_taps, t.patch), (0, 4096, 4, 16));
        assert_eq!(shape(&Cfg::new(&root), &v3).unwrap(), None);
    }

    /// Qwen2-VL-7B's `vision_config` (`Qwen/Qwen2-VL-7B-Instruct`'s published config):
    /// the tower and merger against transformers 5.23's
    /// `Qwen2VLForConditionalGeneration` on the meta device (`model.visual`,
    /// 675 759 104 parameters), its rotary tables (20 fp32 frequencies, twice) and the
    /// shape its forward is derived over.
    #[test]
    fn qwen2_vl_tower_is_read() {
        let v2 = serde_json::json!({"depth": 32, "embed_dim": 1280, "mlp_ratio": 4,
            "num_heads": 16, "in_chans": 3, "hidden_size": 3584, "patch_size": 14,
            "spatial_merge_size": 2, "spatial_patch_size": 14, "temporal_patch_size": 2});
        assert_eq!(qwen2_vl(&v2).unwrap(), 675_759_104);
        assert_eq!((QWEN2_VL.tower_rope.unwrap())(&v2).unwrap(), 160);
        let t = qwen_vision(&v2, QwenTower::V2).unwrap();
        assert_eq!(
            (t.hidden, t.layers, t.heads, t.intermediate, t.out),
            (1280, 32, 16, 5120, 3584)
        );
        assert_eq!((t.patch, t.temporal, t.merge, t.channels), (14, 2, 2, 3));
        assert_eq!(
            (
                t.window,
                t.full_layers,
                t.deepstack,
                t.pos_taps,
                t.image,
                t.pool
            ),
            (0, 0, 0, 0, 0, 0)
        );
        // Another width and ratio move both.
        let narrow = serde_json::json!({"embed_dim": 640, "mlp_ratio": 2, "depth": 2});
        assert_eq!(
            qwen_vision(&narrow, QwenTower::V2).unwrap().intermediate,
            1280
        );
        assert_ne!(qwen2_vl(&narrow).unwrap(), qwen2_vl(&v2).unwrap());
    }

    /// Qwen2-Audio-7B's encoder (Qwen2AudioConfig's defaults: Whisper-large-v3's
    /// encoder over 128 mel bins) and its projector into a 4096-wide Qwen2, against
    /// transformers 5.23's `Qwen2AudioForConditionalGeneration` on the meta device:
    /// `audio_tower` 636 968 960 and `multi_modal_projector` 5 246 976.
    #[test]
    fn qwen2_audio_counts_the_encoder_and_projector() {
        let tower = serde_json::json!({"model_type": "qwen2_audio_encoder"});
        assert_eq!(
            qwen2_audio(&tower, 4096).unwrap(),
            Some(636_968_960 + 5_246_976)
        );
        let other = serde_json::json!({"model_type": "whisper"});
        assert_eq!(qwen2_audio(&other, 4096).unwrap(), None);
    }
}
