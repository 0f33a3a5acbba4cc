//! How vLLM's V1 engine cuts its pool: one group of full-attention blocks, or the
//! hybrid allocator's groups of one page size (sliding windows beside full attention,
//! a drafter's layers, attention beside Mamba or Gated DeltaNet state pages).

use super::releases::Rules;
use crate::engine::arith::{prod, sum};
use crate::engine::request::Ctx;
use crate::error::EstimateError;

/// Bytes of one block across one group's layers, the number of groups and the blocks
/// one request of max_model_len takes (`kv_cache_utils.py`
/// `_get_kv_cache_groups_uniform_page_size`, `get_max_concurrency_for_kv_cache_config`;
/// `kv_cache_interface.py` `SlidingWindowSpec.max_memory_usage_bytes`).
///
/// A drafter's full-attention layers `(bytes per token, layers, bytes per token of
/// one)` join the pool: in one group their page adds to the target's
/// (`UniformTypeKVCacheSpecs`); beside sliding layers they are more full-attention
/// layers of the group's page size.
pub(super) fn pool_shape(
    c: &Ctx,
    r: &Rules,
    batched: u64,
    draft: (u64, u64, u64),
    assumptions: &mut Vec<String>,
) -> Result<(u64, u64, u64), EstimateError> {
    let input = c.input;
    let block = 16u64;
    let mml = c.max_model_len;
    if input.is_encoder_decoder() {
        return encoder_decoder(c, batched, assumptions);
    }
    let simple = || -> Result<(u64, u64, u64), EstimateError> {
        Ok((
            prod(&[block, sum(&[c.per_token, draft.0])?])?,
            1,
            mml.div_ceil(block),
        ))
    };
    if draft.1 == 0
        && r.state_pages
        && let Some(p) = state_pool(c)?
    {
        assumptions.push(format!(
            "hybrid KV cache: attention blocks of {} tokens, a page the size of one layer's recurrent state, {} groups",
            p.block, p.groups
        ));
        return Ok((p.group_block, p.groups, p.seq_blocks));
    }
    let (Some(w), Some(a)) = (input.sliding_window, input.arch) else {
        return simple();
    };
    // KV-shared layers (Gemma 4) have no cache of their own: vLLM gives a layer that
    // shares (`kv_sharing_target_layer_name`) no KV cache spec.
    let layers = a.cached_attention_layers();
    let sw = input
        .sliding_layers
        .map(|s| s.saturating_sub(a.kv_shared().0))
        .unwrap_or(layers)
        .min(layers);
    let full = layers.saturating_sub(sw);
    if sw == 0 || full == 0 || input.pp > 1 {
        return simple();
    }
    let per_layer = c.per_token.checked_div(layers).unwrap_or(0);
    if draft.1 > 0 && draft.2 != per_layer {
        assumptions.push("the drafter's layers counted at the target's page size".into());
    }
    let target_full = full;
    let full = sum(&[full, draft.1])?;
    // Group size: the smaller layer count, or the larger one when it is < 1.5 × the smaller.
    let (lo, hi) = (sw.min(full), sw.max(full));
    let gs = if hi.saturating_mul(2) < lo.saturating_mul(3) {
        hi
    } else {
        lo
    };
    let (g_full, g_sw) = (full.div_ceil(gs), sw.div_ceil(gs));
    // Pages of one size: where the full layers keep another KV shape (Gemma 4's
    // global layers: fewer heads, wider), the layer with the smaller page gets a
    // block as many times longer (`unify_kv_cache_spec_page_size`: block_size ×
    // max page / its page, when that divides; it raises otherwise).
    let (page, block_full, block_sw) = match layer_tokens(c, &a, sw, target_full)? {
        Some((s, f)) if s != f && s.max(f).checked_rem(s.min(f)) == Some(0) => {
            let max = s.max(f);
            let ratio = |x: u64| max.checked_div(x).unwrap_or(1);
            (
                prod(&[block, max])?,
                prod(&[block, ratio(f)])?,
                prod(&[block, ratio(s)])?,
            )
        }
        _ => (
            prod(&[block, c.per_token.checked_div(layers).unwrap_or(0)])?,
            block,
            block,
        ),
    };
    let group_block = prod(&[page, gs])?;
    let sw_tokens = sum(&[w.saturating_sub(1), batched])?.min(mml);
    let seq = sum(&[
        prod(&[g_full, mml.div_ceil(block_full)])?,
        prod(&[g_sw, sum(&[sw_tokens.div_ceil(block_sw), 1])?])?,
    ])?;
    Ok((group_block, sum(&[g_full, g_sw])?, seq))
}

/// Whisper's pool (read in vllm v0.19.0 and v0.27.1, the same code in both): its
/// decoder's self-attention layers (`FullAttentionSpec`) and cross-attention layers
/// (`CrossAttentionSpec`) are not one spec (`kv_cache_utils.py`
/// `is_kv_cache_spec_uniform`, `UniformTypeKVCacheSpecs.is_uniform_type`), but share
/// one page size, so `_get_kv_cache_groups_uniform_page_size` makes two groups of
/// the decoder's layers each, and `get_kv_cache_config_from_groups` cuts the pool into
/// `available // page // layers` blocks, each tensor shared by one layer of either
/// group: a block costs one group's layers (16 × the self-attention's bytes per
/// token). One request of max_model_len, as vLLM counts it
/// (`get_max_concurrency_for_kv_cache_config`, from each spec's
/// `max_memory_usage_bytes`): ⌈max_model_len ÷ 16⌉ blocks of the first group and
/// ⌈max_num_encoder_input_tokens ÷ 16⌉ of the second (`CrossAttentionSpec`), where
/// `config/scheduler.py` `SchedulerConfig.__post_init__` sets
/// max_num_encoder_input_tokens to max_num_batched_tokens. The start-up check
/// (`_check_enough_kv_cache_memory`) and the "Maximum concurrency" it prints use that
/// sum; a running request holds ⌈encoder positions ÷ 16⌉ cross-attention blocks
/// (`scheduler.py` `schedule`: `num_encoder_tokens`, 1500 for a 30 s clip), said in an
/// assumption. Returns (bytes of one block, groups, blocks one request takes).
fn encoder_decoder(
    c: &Ctx,
    batched: u64,
    assumptions: &mut Vec<String>,
) -> Result<(u64, u64, u64), EstimateError> {
    let block = 16u64;
    let text = c.max_model_len.div_ceil(block);
    let counted = sum(&[text, batched.div_ceil(block)])?;
    let held = sum(&[text, c.encoder_tokens.div_ceil(block)])?;
    let tenths = counted
        .saturating_mul(10)
        .checked_div(held)
        .unwrap_or(0);
    assumptions.push(format!(
        "Whisper: vLLM counts a request as {text} self-attention + {} cross-attention blocks (max_num_encoder_input_tokens = max_num_batched_tokens {batched}), so its start-up check and the maximum concurrency it prints use {counted} blocks; a running request of one clip holds {held} ({text} + {}): the pool holds about {}.{} times the requests printed",
        batched.div_ceil(block),
        c.encoder_tokens.div_ceil(block),
        tenths / 10,
        tenths % 10
    ));
    Ok((prod(&[block, c.per_token])?, 2, counted))
}

/// Bytes per token of one sliding layer and one full layer on a device, when the
/// full layers keep another KV shape (`global_attn`): the pool's bytes per token
/// split in the ratio of their values (heads split by TP, a head kept whole), `None`
/// when the shapes agree or the split is not exact.
fn layer_tokens(
    c: &Ctx,
    a: &crate::arch::Architecture,
    sw: u64,
    full: u64,
) -> Result<Option<(u64, u64)>, EstimateError> {
    let Some(g) = a.global_attn.filter(|_| a.mla.is_none()) else {
        return Ok(None);
    };
    let tp = c.input.tp.max(1);
    let s_values = prod(&[2, a.kv_heads.div_ceil(tp).max(1), a.head_dim])?;
    let f_values = prod(&[2, g.kv_heads.div_ceil(tp).max(1), g.head_dim])?;
    let all = sum(&[prod(&[sw, s_values])?, prod(&[full, f_values])?])?;
    let Some(per_value) = c
        .per_token
        .checked_div(all)
        .filter(|v| c.per_token.checked_rem(all) == Some(0) && *v > 0)
    else {
        return Ok(None);
    };
    Ok(Some((
        prod(&[s_values, per_value])?,
        prod(&[f_values, per_value])?,
    )))
}

/// The pool of a model whose attention layers sit beside Mamba or Gated DeltaNet
/// layers, as vLLM's V1 engine pages it.
pub(super) struct StatePool {
    /// Tokens per attention block (raised to fit the state page).
    pub block: u64,
    /// Bytes of one block across one group's layers.
    pub group_block: u64,
    /// Groups of layers (attention groups + state groups).
    pub groups: u64,
    /// Blocks one request of max_model_len takes: its attention blocks, and one page
    /// per state group.
    pub seq_blocks: u64,
}

/// vllm v0.10.2 `vllm/model_executor/models/config.py`
/// `HybridAttentionMambaModelConfig.verify_and_update_config`, moved to
/// `vllm/platforms/interface.py` (`_align_hybrid_block_size`, read at
/// upstream 799973af4 for 0.19 and 3cb83c95922f for 0.22: the same rule without prefix
/// caching, the kernel's block alignment 16): one page size for every layer. The state page is one layer's recurrent state of one sequence (`MambaSpec`:
/// the conv window and the SSM / delta-rule state, sharded by tp, in the KV cache's
/// dtype); the attention block is raised to `16 × ⌈state page ÷ (16 × one token's
/// attention page)⌉` tokens ("Setting attention block size to N tokens") and the state
/// page padded up to that attention page ("Padding mamba page size by x %"). Layers are
/// grouped as for sliding windows (`kv_cache_utils.py`
/// `_get_kv_cache_groups_uniform_page_size`): the attention layers and the state layers
/// in groups of the smaller count; a state layer keeps one page per request
/// (`MambaSpec.max_memory_usage_bytes`). `None` when the model has no state layers or
/// runs pipeline stages (each stage groups its own layers).
pub(super) fn state_pool(c: &Ctx) -> Result<Option<StatePool>, EstimateError> {
    let input = c.input;
    let Some(a) = input.arch else { return Ok(None) };
    let Some(m) = a.mixer.filter(|m| m.layers > 0) else {
        return Ok(None);
    };
    let attn = a.attention_layers();
    if attn == 0 || input.pp > 1 || a.mla.is_some() {
        return Ok(None);
    }
    let tp = input.tp.max(1);
    // One token's attention page on one layer, and the bytes of one cached value.
    let token_page = c.per_token.checked_div(attn).unwrap_or(0);
    let values = prod(&[2, a.kv_heads.div_ceil(tp).max(1), a.head_dim])?;
    let value_bytes = token_page
        .checked_div(values)
        .filter(|b| *b > 0)
        .unwrap_or(input.compute_dtype.bytes());
    let (conv, ssm) = m.state_values()?;
    let state_page = prod(&[sum(&[conv.div_ceil(tp), ssm.div_ceil(tp)])?, value_bytes])?;
    if token_page == 0 {
        return Ok(None);
    }
    let block = prod(&[16, state_page.div_ceil(prod(&[16, token_page])?)])?.max(16);
    let page = prod(&[block, token_page])?;
    let (lo, hi) = (attn.min(m.layers), attn.max(m.layers));
    let gs = if hi.saturating_mul(2) < lo.saturating_mul(3) {
        hi
    } else {
        lo
    };
    let (g_attn, g_state) = (attn.div_ceil(gs), m.layers.div_ceil(gs));
    Ok(Some(StatePool {
        block,
        group_block: prod(&[page, gs])?,
        groups: sum(&[g_attn, g_state])?,
        seq_blocks: sum(&[prod(&[g_attn, c.max_model_len.div_ceil(block)])?, g_state])?,
    }))
}
