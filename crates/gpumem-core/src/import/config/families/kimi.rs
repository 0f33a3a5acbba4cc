//! Moonshot's Kimi-K2 (`kimi_k2`: a DeepSeek-V3 body, read as DeepSeek-V3 with its
//! fp32 `noaux_tc` correction bias) and Kimi-Linear (`kimi_linear`, its
//! modeling_kimi.py and vLLM's kimi_linear.py): Kimi Delta Attention (KDA) in the
//! layers of `linear_attn_config.kda_layers`, MLA without query compression in its
//! `full_attn_layers`, DeepSeek-style MoE after `first_k_dense_replace` dense layers
//! with `num_shared_experts` shared experts and a 16-bit router correction bias.

use crate::arch::{Mixer, MixerKind};
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};

use super::deepseek::DEEPSEEK;

/// Kimi-K2.
pub(crate) const KIMI_K2: Family = Family {
    types: "kimi_k2",
    ..DEEPSEEK
};

/// Kimi-Linear.
pub(crate) const KIMI_LINEAR: Family = Family {
    types: "kimi_linear",
    class: "KimiLinearConfig",
    // MLA without RoPE on the latent (the tensors are the same), the router's
    // choice of groups and its renormalisation, the pre-extension length.
    // transformers writes the layers as "linear_attention" / "full_attention".
    layer_types: "linear_attention",
    inert: concat!(
        "mla_use_nope moe_renormalize num_expert_group ",
        "use_grouped_topk",
    ),
    hook: Some(kimi_linear),
    ..BASE
};

fn kimi_linear(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let lin = c
        .get("linear_attn_config")
        .filter(|x| x.is_object())
        .ok_or_else(|| parse("kimi_linear: linear_attn_config is needed".into()))?;
    let lin = Cfg::new(lin);
    let layers = d.arch.layers;
    // The KDA layers are listed (1-based), as are the full-attention (MLA) ones.
    let kda = match (lin.list("kda_layers"), lin.list("full_attn_layers")) {
        (Some(k), _) => k.len() as u64,
        (None, Some(full)) => layers.saturating_sub(full.len() as u64),
        (None, None) => {
            return Err(parse(
                "linear_attn_config: kda_layers or full_attn_layers is needed".into(),
            ));
        }
    };
    let heads = lin.need(&["num_heads"])?;
    let head_dim = lin.need(&["head_dim"])?;
    d.arch.mixer = Some(Mixer {
        kind: MixerKind::Kda,
        layers: kda,
        inner: heads.saturating_mul(head_dim),
        state: head_dim,
        conv: lin.or_default("short_conv_kernel_size", 4, d.class, &mut d.notes)?,
        dt_rank: 0,
        heads,
        key_heads: heads,
        norms: false,
        gated_norm: true,
    });
    let shared = c.uint("num_shared_experts")?.unwrap_or(0);
    let sigmoid = c.str("moe_router_activation_func") == Some("sigmoid");
    if let Some(m) = d.arch.moe.as_mut() {
        m.shared_experts = shared;
        // KimiMoEGate's e_score_correction_bias, with the sigmoid router (bf16 in
        // the checkpoint).
        m.router_bias = sigmoid;
    }
    Ok(())
}
