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
    // Its own code (trust_remote_code), not transformers': its rotary buffers are not
    // counted here.
    rope_tables: 0,
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
    // KimiLinearConfig's attention layers use no rotary embedding (no buffers).
    rope_tables: 0,
    ..BASE
};

fn kimi_linear(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let layers = d.arch.layers;
    // The published configs nest the KDA layout in linear_attn_config (layers listed
    // 1-based); transformers writes it flat (layer_types, linear_num_heads, …).
    let (kda, heads, head_dim, conv) = match c.get("linear_attn_config").filter(|x| x.is_object()) {
        Some(lin) => {
            let lin = Cfg::new(lin);
            let kda = match (lin.list("kda_layers"), lin.list("full_attn_layers")) {
                (Some(k), _) => k.len() as u64,
                (None, Some(full)) => layers.saturating_sub(full.len() as u64),
                (None, None) => {
                    return Err(parse(
                        "linear_attn_config: kda_layers or full_attn_layers is needed".into(),
                    ));
                }
            };
            let conv = lin.or_default("short_conv_kernel_size", 4, d.class, &mut d.notes)?;
            (
                kda,
                lin.need(&["num_heads"])?,
                lin.need(&["head_dim"])?,
                conv,
            )
        }
        None => (
            c.count_of("layer_types", "linear_attention")
                .ok_or_else(|| {
                    parse("kimi_linear: linear_attn_config or layer_types is needed".into())
                })?,
            c.need(&["linear_num_heads"])?,
            c.need(&["linear_head_dim"])?,
            d.or_default(c, "linear_conv_kernel_dim", 4)?,
        ),
    };
    d.arch.mixer = Some(Mixer {
        kind: MixerKind::Kda,
        layers: kda,
        inner: heads.saturating_mul(head_dim),
        state: head_dim,
        conv,
        heads,
        key_heads: heads,
        ..Mixer::BASE
    });
    let shared = c.uint("num_shared_experts")?.unwrap_or(0);
    // KimiMoEGate's e_score_correction_bias (bf16 in the checkpoint), with the sigmoid
    // router: the published configs name it, transformers' class always builds it.
    let bias = c
        .str("moe_router_activation_func")
        .is_none_or(|f| f == "sigmoid");
    let dense = c.count_of("mlp_layer_types", "dense");
    if let Some(m) = d.arch.moe.as_mut() {
        m.shared_experts = shared;
        m.router_bias = bias;
        if let Some(n) = dense {
            m.dense_layers = n;
        }
    }
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&KIMI_K2, &KIMI_LINEAR];
