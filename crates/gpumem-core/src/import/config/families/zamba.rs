//! Zamba2 (Zamba2Config; transformers 5.23 `models/zamba2/modeling_zamba2.py`): a
//! Mamba-2 mixer in every layer and, in the `hybrid` layers, a shared transformer
//! block before it, the blocks' weights shared in turn.
//!
//! | mechanism | transformers (5.23, `modeling_zamba2.py`) | here |
//! |---|---|---|
//! | every layer: RMSNorm and a Mamba-2 mixer (`expand × hidden` wide, `n_mamba_heads` heads, grouped B/C, conv with bias under `use_conv_bias`, gated norm, no projection bias unless `add_bias_linear`) | `Zamba2MambaDecoderLayer`, `Zamba2MambaMixer` | mixer `mamba2` over every layer, one norm per layer, no MLP of their own |
//! | `hybrid` layers (`layers_block_type`): a shared block, then the layer's own `linear` hidden × hidden, then its Mamba layer | `Zamba2HybridLayer`, `Zamba2Model.get_layers` | `shared-uses`, the KV cache's `attention-layers` |
//! | `num_mem_blocks` distinct blocks, used in turn (tied weights) | `Zamba2Model.get_layers` (`_tied_weights_keys`) | `shared-blocks` |
//! | a block: attention over [hidden, original embeddings] (2 × hidden): q/k/v from 2 × hidden, head dim 2 × hidden / heads, o_proj to hidden, RMSNorm over 2 × hidden, RMSNorm over hidden, gated MLP `gate_up_proj`/`down_proj` | `Zamba2AttentionDecoderLayer`, `Zamba2Attention`, `Zamba2MLP` | `shared-width`, `head-dim` |
//! | per use: an adapter of rank `adapter_rank` on `gate_up_proj`, always; on q, k and v with `use_shared_attention_adapter` | `Zamba2MLP.gate_up_proj_adapter_list`, `Zamba2Attention.linear_q/k/v_adapter_list` | `shared-mlp-adapter-rank`, `shared-attn-adapter-rank` |
//! | the cache: each hybrid layer's K and V; every layer's conv window and SSM state | `DynamicCache` (`LinearAttentionAndFullAttentionLayer`, `LinearAttentionLayer`) | KV over the uses, the state line over every layer |
//!
//! Zamba2Config derives `attention_hidden_size` (2 × hidden), `attention_head_dim`
//! (2 × hidden / heads) and `mamba_headdim` whatever the config writes; they are
//! derived here the same way.
//!
//! Zamba (ZambaConfig; transformers 5.23 `models/zamba/modeling_zamba.py`) is the same
//! plan with one shared block (`ZambaHybridLayer`: `shared_transf`, its own `linear`, its
//! Mamba layer), no adapters, and a multi-head Mamba-1 mixer (`ZambaMambaMixer`:
//! `x_proj_weight`, `dt_proj_weight`, `dt_proj_bias`, `A_log`, `D` split over
//! `n_mamba_heads`, the same sizes in all as Mamba's); its hybrid layers are the third
//! and, after it, every `attn_layer_period`-th from `attn_layer_offset`
//! (`ZambaConfig.__post_init__`) when `layers_block_type` is not written.

use serde_json::Value;

use crate::arch::{Architecture, Mixer, MixerKind, SharedAttn};
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family};
use crate::import::config::json::{Cfg, parse};
use crate::import::config::mixers::{dt_rank, mixer_biases};

/// Zamba2.
pub(crate) const ZAMBA2: Family = Family {
    types: "zamba2",
    class: "Zamba2Config",
    arch: Architecture {
        tied_embeddings: true,
        layer_norms: 1,
        ..Architecture::BASE
    },
    // Derived by Zamba2Config from the sizes read (kv_channels, num_query_groups,
    // attention_head_dim, attention_hidden_size, mamba_headdim, hybrid_layer_ids), the
    // rotary positions' switch and its long-context variant (positions only), the
    // Mamba kernels' memory-efficient path.
    inert: "kv_channels num_query_groups attention_head_dim attention_hidden_size \
            mamba_headdim hybrid_layer_ids use_mem_rope use_long_context use_mem_eff_path",
    hook: Some(zamba2),
    // Without use_mem_rope (Zamba2Config's default) no rotary buffers; with it, not
    // counted here.
    rope_tables: 0,
    ..BASE
};

fn zamba2(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let (hidden, layers, heads) = (d.arch.hidden, d.arch.layers, d.arch.heads);
    let uses = listed_hybrid_layers(c, layers)?.ok_or_else(|| {
        parse(
            "layers_block_type absent: which layers run the shared blocks is not known (Zamba2Config's default is for 54 layers)"
                .into(),
        )
    })?;
    // Zamba2Config: attention over 2 × hidden, head dim 2 × hidden / heads.
    let width = hidden.saturating_mul(2);
    d.arch.head_dim = width.checked_div(heads).unwrap_or(0);
    // Zamba2Config: `intermediate_size or 4 × hidden`.
    if d.arch.intermediate == 0 {
        d.arch.intermediate = hidden.saturating_mul(4);
    }
    let blocks = d.or_default(c, "num_mem_blocks", 1)?;
    let rank = d.or_default(c, "adapter_rank", 128)?;
    let attn_adapters = c.flag("use_shared_attention_adapter").unwrap_or(false);
    d.arch.shared_attn = Some(SharedAttn {
        blocks,
        uses,
        width,
        mlp_adapter_rank: rank,
        attn_adapter_rank: if attn_adapters { rank } else { 0 },
    });
    d.arch.attn_layers = Some(uses);
    d.arch.mlp_layers = Some(0);
    if c.flag("add_bias_linear") == Some(true) {
        d.warnings.push(
            "add_bias_linear = true is not modelled: the Mamba and MLP projections are counted without biases"
                .into(),
        );
    }
    if c.flag("use_conv_bias") == Some(false) {
        d.warnings.push(
            "use_conv_bias = false is not modelled: the Mamba convolutions are counted with their bias"
                .into(),
        );
    }
    let expand = d.or_default(c, "mamba_expand", 2)?;
    let inner = expand.saturating_mul(hidden);
    let mamba_heads = d.or_default(c, "n_mamba_heads", 8)?;
    if mamba_heads == 0 || !inner.is_multiple_of(mamba_heads) {
        return Err(parse(format!(
            "n_mamba_heads ({mamba_heads}) does not divide mamba_expand × hidden ({inner})"
        )));
    }
    d.arch.mixer = Some(Mixer {
        kind: MixerKind::Mamba2,
        layers,
        inner,
        state: d.or_default(c, "mamba_d_state", 64)?,
        conv: d.or_default(c, "mamba_d_conv", 4)?,
        heads: mamba_heads,
        key_heads: d.or_default(c, "mamba_ngroups", 1)?,
        gated_norm: true,
        ..Mixer::BASE
    });
    Ok(())
}

/// Zamba (Zamba-7B-v1).
pub(crate) const ZAMBA: Family = Family {
    types: "zamba",
    class: "ZambaConfig",
    // The Mamba mixer's heads split its tensors without changing their sizes.
    inert: "n_mamba_heads",
    hook: Some(zamba),
    // Learned or no positions: no rotary buffers.
    rope_tables: 0,
    ..ZAMBA2
};

fn zamba(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    let (hidden, layers, heads) = (d.arch.hidden, d.arch.layers, d.arch.heads);
    let uses = match listed_hybrid_layers(c, layers)? {
        Some(uses) => {
            c.touch(&["attn_layer_period", "attn_layer_offset"]);
            uses
        }
        None => {
            // The third layer, then i % period == offset over the other layers − 3.
            let period = d.or_default(c, "attn_layer_period", 6)?.max(1);
            let offset = d.or_default(c, "attn_layer_offset", 4)?;
            let rest = layers.saturating_sub(3);
            let later = rest
                .saturating_add(period)
                .saturating_sub(offset.saturating_add(1))
                .checked_div(period)
                .unwrap_or(0)
                .min(rest);
            u64::from(layers >= 3).saturating_add(later)
        }
    };
    let width = match c.uint("attention_hidden_size")? {
        Some(w) => w,
        None => hidden.saturating_mul(2),
    };
    if !c.present("attention_head_dim") && !c.present("head_dim") {
        // ZambaConfig: 2 × hidden / heads.
        d.arch.head_dim = hidden.saturating_mul(2).checked_div(heads).unwrap_or(0);
    }
    d.arch.shared_attn = Some(SharedAttn {
        blocks: 1,
        uses,
        width,
        mlp_adapter_rank: 0,
        attn_adapter_rank: 0,
    });
    d.arch.attn_layers = Some(uses);
    d.arch.mlp_layers = Some(0);
    mixer_biases(c, "mamba_proj_bias", "mamba_conv_bias", &mut d.warnings);
    let expand = d.or_default(c, "mamba_expand", 2)?;
    d.arch.mixer = Some(Mixer {
        kind: MixerKind::Mamba,
        layers,
        inner: expand.saturating_mul(hidden),
        state: d.or_default(c, "mamba_d_state", 16)?,
        conv: d.or_default(c, "mamba_d_conv", 4)?,
        dt_rank: dt_rank(c, "mamba_dt_rank", hidden, d.class, &mut d.notes)?,
        ..Mixer::BASE
    });
    Ok(())
}

/// The layers `layers_block_type` marks "hybrid" (those that run a shared block), when
/// it lists them; a list of another length than the layers is refused.
fn listed_hybrid_layers(c: &Cfg, layers: u64) -> Result<Option<u64>, EstimateError> {
    let Some(Value::Array(list)) = c.get("layers_block_type") else {
        return Ok(None);
    };
    if list.len() as u64 != layers {
        return Err(parse(format!(
            "layers_block_type lists {} layers, num_hidden_layers is {layers}",
            list.len()
        )));
    }
    Ok(Some(
        list.iter().filter(|x| x.as_str() == Some("hybrid")).count() as u64,
    ))
}

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&ZAMBA2, &ZAMBA];
