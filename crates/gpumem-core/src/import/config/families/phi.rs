//! Phi-3 (Phi3Config: the generic decoder, fused qkv and gate/up projections of
//! the same sizes), and Phi-1/2 (PhiConfig: one LayerNorm with bias feeding parallel
//! attention and MLP, a plain MLP, biases everywhere, an lm_head with a bias), and
//! Phi-4-multimodal (Phi-3's decoder, its image embedder).

use serde_json::Value;

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::families::gpt::{activation, dropout, rotary_fraction};
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
    dropout(
        c,
        d,
        &["resid_pdrop", "embd_pdrop", "attention_dropout"],
        0.0,
    );
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&PHI3, &PHI, &PHI4_MULTIMODAL];

/// Phi-4-multimodal (Phi4MultimodalConfig, transformers 5.23
/// `models/phi4_multimodal/modeling_phi4_multimodal.py`): Phi-3's decoder (fused
/// `qkv_proj` and `gate_up_proj`) with its image embedder counted
/// ([`phi4_vision`]); its audio embedder (`Phi4MultimodalAudioModel`, a conformer) is not
/// counted here and is named in a warning.
pub(crate) const PHI4_MULTIMODAL: Family = Family {
    types: "phi4_multimodal",
    class: "Phi4MultimodalConfig",
    tower: Some(phi4_vision),
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
