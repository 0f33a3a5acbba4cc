//! Phi-3 (Phi3Config: the generic decoder, fused qkv and gate/up projections of
//! the same sizes), and Phi-1/2 (PhiConfig: one LayerNorm with bias feeding parallel
//! attention and MLP, a plain MLP, biases everywhere, an lm_head with a bias), and
//! Phi-4-multimodal (Phi-3's decoder, its image and audio embedders).

use serde_json::Value;

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::families::gpt::{activation, dropouts, rotary_fraction};
use crate::import::config::family::{BASE, Family, TowerCount};
use crate::import::config::json::{Cfg, parse};
use crate::import::config::tower::{fit, siglip, sizes};

/// Phi-3.
pub(crate) const PHI3: Family = Family {
    types: "phi3",
    class: "Phi3Config",
    arch: Architecture {
        fused_qkv: true,
        ..Architecture::BASE
    },
    ..BASE
};

/// Phi-1 / Phi-1.5 / Phi-2 (PhiConfig, transformers 5.23 `models/phi/modeling_phi.py`):
/// `PhiDecoderLayer` is one `input_layernorm` (LayerNorm with bias) feeding attention
/// (q, k, v and `dense`, all with bias) and `PhiMLP` (fc1, fc2 with bias) in parallel;
/// `final_layernorm` with bias; `lm_head` is `nn.Linear(hidden, vocab, bias=True)`.
pub(crate) const PHI: Family = Family {
    types: "phi",
    class: "PhiConfig",
    // PhiConfig's tie_word_embeddings defaults to false (PhiForCausalLM's lm_head has
    // its own weight and bias).
    arch: Architecture {
        gated_mlp: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        layernorm_bias: true,
        layer_norms: 1,
        lm_head_bias: true,
        ..Architecture::BASE
    },
    hook: Some(phi),
    // PhiConfig's partial_rotary_factor default.
    rotary_fraction: 0.5,
    ..BASE
};

/// Phi's optional q/k LayerNorms, rotary width, activation and dropouts, with
/// PhiConfig's defaults (qk_layernorm false, partial_rotary_factor 0.5, hidden_act
/// "gelu_new", resid/embd_pdrop and attention_dropout 0).
fn phi(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    if c.flag("qk_layernorm") == Some(true) {
        // PhiAttention: q_layernorm and k_layernorm, each an nn.LayerNorm(head_dim) with
        // weight and bias shared by the heads: 4 × head_dim values a layer.
        d.arch.layer_scalars = d
            .arch
            .head_dim
            .checked_mul(4)
            .ok_or_else(|| parse("head_dim: absurdly large".into()))?;
    }
    rotary_fraction(c, d, "partial_rotary_factor", 0.5)?;
    activation(c, d, "hidden_act", "gelu_new");
    dropouts(
        c,
        d,
        ["resid_pdrop", "embd_pdrop", "attention_dropout"],
        0.0,
    );
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&PHI3, &PHI, &PHI4_MULTIMODAL];

/// Phi-4-multimodal (Phi4MultimodalConfig, transformers 5.23
/// `models/phi4_multimodal/modeling_phi4_multimodal.py`): Phi-3's decoder (fused
/// `qkv_proj` and `gate_up_proj`) with its image embedder ([`phi4_vision`]) and its
/// audio embedder ([`phi4_audio`]: the conformer and its projections) counted.
pub(crate) const PHI4_MULTIMODAL: Family = Family {
    types: "phi4_multimodal",
    class: "Phi4MultimodalConfig",
    tower: Some(phi4_vision),
    audio: Some(phi4_audio),
    ..PHI3
};

/// `Phi4MultimodalImageEmbedding`: the SigLIP tower `img_processor` with its
/// attention-pooling head (`Phi4MultimodalVisionModel`, SiglipVisionConfig's layout),
/// the two feature extensors (one vector each), `img_projection_up` (vision → text
/// hidden, with bias) and `img_projection_down` (text hidden → text hidden, with
/// bias). `None` for another tower.
#[allow(clippy::arithmetic_side_effects)]
fn phi4_vision(
    _root: &Cfg,
    tower: &Value,
    text_hidden: u64,
) -> Result<Option<TowerCount>, EstimateError> {
    if tower.get("model_type").and_then(Value::as_str) != Some("phi4_multimodal_vision") {
        return Ok(None);
    }
    let [h] = sizes(tower, [("hidden_size", 1152)])?;
    let t = u128::from(text_hidden);
    let n = siglip(tower)? + 2 * h + (t * h + t) + (t * t + t);
    Ok(Some((fit(n)?, None)))
}

/// `Phi4MultimodalAudioEmbedding` (transformers 5.23, `modeling_phi4_multimodal.py`):
/// the conformer `encoder` (`Phi4MultimodalAudioModel`) and its four projections.
/// - `encoder_embedding`: `global_mean` and `global_invstd`, persistent buffers of
///   `input_size` values each;
/// - `embed` (`Phi4MultimodalAudioNemoConvSubsampling`): a `Conv2d(1, C, 3)`, then
///   log2(`time_reduction`) − 1 times a depthwise `Conv2d(C, C, 3, groups=C)` and a
///   pointwise `Conv2d(C, C, 1)`, every one with its bias (C = `nemo_conv_channels`),
///   and `out`, a Linear from C × the mel bins left after as many halvings of
///   `input_size` (`nemo_final_size`, as `Phi4MultimodalAudioConfig.__post_init__`
///   derives it) to `hidden_size`, with bias;
/// - `relative_attention_bias_layer.bias_values`: an Embedding of `bias_max_distance`
///   buckets (twice as many unless `bias_symmetric`) × heads;
/// - `num_blocks` conformer layers (`Phi4MultimodalAudioConformerEncoderLayer`): two
///   MLPs (`feed_forward_in` / `_out`: a LayerNorm, `gate_up_proj` [2 × intermediate,
///   hidden] and `down_proj`, with biases), attention (q, k, v, o, hidden wide, with
///   biases), the conv module (a LayerNorm; the GLU's pointwise `Conv1d(hidden, 2 ×
///   ext_pw_out_channel, 1)` with bias and its `b1`, `b2`; the depthwise `Conv1d(hidden,
///   hidden × depthwise_multiplier, kernel_size, groups=hidden)` and pointwise
///   `Conv1d(…, depthwise_separable_out_channel, 1)`, with biases; `ext_pw_conv_1d`
///   `Conv1d(hidden, ext_pw_out_channel, 1)` with bias), `layer_norm_att`, `layer_norm`;
/// - `up_proj_for_speech` and `up_proj_for_vision_speech` (hidden × `downsample_rate`
///   → the text's hidden), `down_proj_for_speech` and `down_proj_for_vision_speech`
///   (text hidden → text hidden), all with biases.
///
/// Missing sizes are Phi4MultimodalAudioConfig's defaults. `None` for another tower.
#[allow(clippy::arithmetic_side_effects)]
fn phi4_audio(
    _root: &Cfg,
    tower: &Value,
    text_hidden: u64,
) -> Result<Option<TowerCount>, EstimateError> {
    if tower.get("model_type").and_then(Value::as_str) != Some("phi4_multimodal_audio") {
        return Ok(None);
    }
    let [
        h,
        inter,
        blocks,
        heads,
        ext,
        dsep,
        dm,
        k,
        input,
        reduction,
        distance,
        c,
        down,
    ] = sizes(
        tower,
        [
            ("hidden_size", 1024),
            ("intermediate_size", 1536),
            ("num_blocks", 24),
            ("num_attention_heads", 16),
            ("ext_pw_out_channel", 1024),
            ("depthwise_separable_out_channel", 1024),
            ("depthwise_multiplier", 1),
            ("kernel_size", 3),
            ("input_size", 80),
            ("time_reduction", 8),
            ("bias_max_distance", 1000),
            ("nemo_conv_channels", 1024),
            ("downsample_rate", 1),
        ],
    )?;
    // `int(math.log2(time_reduction))` halvings (the config requires an even
    // reduction: at least one).
    if reduction < 2 {
        return Err(parse(
            "audio_config.time_reduction should be a multiple of 2".into(),
        ));
    }
    let halvings = u128::from(127 - reduction.leading_zeros());
    // floor((n − 1) / 2 + 1) = ceil(n / 2), each halving.
    let mut bins = input;
    for _ in 0..halvings {
        bins = bins.div_ceil(2);
    }
    let symmetric = tower.get("bias_symmetric").and_then(Value::as_bool) == Some(true);
    let buckets = if symmetric { distance } else { 2 * distance };
    let norm = 2 * h;
    let mlp = norm + (h * 2 * inter + 2 * inter) + (inter * h + h);
    let attention = 4 * (h * h + h);
    let wide = h * dm;
    let conv = norm
        + (h * 2 * ext + 2 * ext)
        + 2 * ext
        + (wide * k + wide)
        + (wide * dsep + dsep)
        + (h * ext + ext);
    let layer = 2 * mlp + attention + conv + 2 * norm;
    let subsample = (c * 9 + c) + (halvings - 1) * ((c * 9 + c) + (c * c + c)) + (c * bins * h + h);
    let t = u128::from(text_hidden);
    let projections = 2 * (h * down * t + t) + 2 * (t * t + t);
    let n = 2 * input + subsample + buckets * heads + blocks * layer + projections;
    Ok(Some((fit(n)?, None)))
}
