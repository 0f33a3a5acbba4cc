//! CTRL (CTRLConfig; transformers 5.23 `models/ctrl/modeling_ctrl.py`,
//! `CTRLLMHeadModel`): `w` the token embedding; per layer `Wq`, `Wk`, `Wv` and `dense`
//! with biases, an MLP of two linears with biases (`dff` wide, ReLU, no gate) and two
//! LayerNorms with bias; a final LayerNorm; the lm_head tied to `w` with a bias of its
//! own. Its positions are a sinusoidal table `[n_positions, n_embd]` computed in fp32
//! when the model is built (`positional_encoding(..., torch.float)`, a non-persistent
//! buffer): no checkpoint tensor, but bytes on the GPU beside the weights.

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::families::gpt::dropout;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::Cfg;

/// CTRL.
pub(crate) const CTRL: Family = Family {
    types: "ctrl",
    class: "CTRLConfig",
    arch: Architecture {
        tied_embeddings: true,
        gated_mlp: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        layernorm_bias: true,
        lm_head_bias: true,
        // eager_attention_forward (BERT's): softmax in the compute dtype.
        softmax_in_dtype: true,
        ..Architecture::BASE
    },
    // n_ctx repeats n_positions (which is read); the old TF-conversion switch.
    inert: "n_ctx from_tf",
    hook: Some(ctrl),
    // Sinusoidal positions (`sinusoid_positions`): no rotary buffers.
    rope_tables: 0,
    ..BASE
};

/// CTRL's MLP width (`dff`), its position table and its dropouts, with CTRLConfig's
/// defaults (dff 8192, n_positions 256, resid/embd_pdrop 0.1).
fn ctrl(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    d.arch.intermediate = d.or_default(c, "dff", 8192)?;
    d.notes
        .retain(|n| !n.starts_with("intermediate size absent"));
    d.arch.sinusoid_positions = d.or_default(c, "n_positions", 256)?;
    dropout(c, d, &["embd_pdrop", "resid_pdrop"], 0.1);
    // The MLP's nn.ReLU (modeling_ctrl.py `point_wise_feed_forward_network`).
    d.arch.gelu_new = false;
    d.arch.relu = true;
    Ok(())
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&CTRL];
