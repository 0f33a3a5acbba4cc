//! The vision tower's forward over the prompt's images under transformers' runtime
//! (inference, no grad): its peak while it encodes them, derived moment by moment from
//! transformers 5.23's own tower code, and what outlives it into the text forward
//! (the pixel values the caller holds; the tower's last hidden state, the image
//! embeddings and Qwen3-VL's deepstack features `generate` keeps, and the copies the
//! language model's forward makes of them). The tower's phase is the larger of its
//! own peak and the model forward's merge of the image embeddings into the prompt's
//! (`masked_scatter` over the whole prompt, [`merge`]: with CUDA's scratch over the
//! embeddings' shape, read from ATen's code, it is the phase's peak for a long
//! prompt). The prefill's peak is the larger of the two phases; the line
//! adds to the text prefill's lines what the tower's phase needs beyond them, so that
//! the lines' sum stays a peak, never below either phase.
//!
//! Derived for Gemma 3's SigLIP tower with its pooling projector, PaliGemma's with its
//! linear one, Gemma 4's tower with its soft-token pooler (images padded to the
//! processor's patch budget; the padding's attention mask read from the code under
//! sdpa; with or without clipped linears and grouped key/value heads), Qwen2-VL's,
//! Qwen2.5-VL's, Qwen3-VL's and Qwen3.5's towers
//! and Llama 4's tiled tower ([`VisionTower`], read from the config); another tower's
//! forward is not counted, and a warning says so where an image is given.

use super::*;
use crate::allocator::round_size;
use crate::arch::VisionTower;

const WHAT: &str = "vision tower forward";

fn overflow() -> EstimateError {
    EstimateError::Overflow { what: WHAT }
}

/// The caching allocator's block for one tensor of `n` bytes (a tensor of none takes
/// none): every tensor below is one request, rounded as the allocator rounds it.
pub(super) fn r(n: u64) -> u64 {
    if n == 0 { 0 } else { round_size(n) }
}

/// `r` of a product of sizes.
pub(super) fn t(sizes: &[u64]) -> Result<u64, EstimateError> {
    Ok(r(checked_product(sizes, WHAT)?))
}

pub(super) fn sum(parts: &[u64]) -> Result<u64, EstimateError> {
    parts
        .iter()
        .try_fold(0u64, |s, x| s.checked_add(*x))
        .ok_or_else(overflow)
}

/// The tower's phase, beyond the weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Phase {
    /// The pixel values as the processor hands them over (fp32), held by the caller
    /// for the whole generation.
    pub pixels: u64,
    /// The tower's peak beyond them: its inputs' cast, its index tensors and the
    /// moment's activations.
    pub peak: u64,
    /// Which moment the peak is.
    pub moment: &'static str,
    /// What the text forward still holds of the tower's outputs: transformers 5.23's
    /// `generate` encodes the images before the prefill
    /// (`generation/utils.py` `_prepare_multimodal_encoder_kwargs_for_generation`)
    /// and keeps the whole output in `model_kwargs["mm_encoder_outputs"]` — the
    /// tower's last hidden state, the projected embeddings (Qwen3-VL's deepstack
    /// features too) — and the model's forward concatenates Qwen's into copies it
    /// holds while the language model runs.
    pub outputs: u64,
    /// What of `outputs` the model's forward already holds when it merges the image
    /// embeddings into the prompt's (Qwen3-VL's deepstack copies come after it).
    pub at_merge: u64,
    /// The prompt tokens of one image.
    pub tokens: u64,
    /// Patches of one image.
    pub patches: u64,
    /// Why the figure is assumed rather than computed, if it is.
    pub assumed: Option<&'static str>,
}

/// The tower's forward over `images` images of `tokens` prompt tokens (or `values`
/// pixel values: channels × height × width) each, in values `value` bytes wide, with
/// the text model `text_hidden` wide.
pub(super) fn phase(
    tower: &VisionTower,
    images: u64,
    (tokens, values): (Option<u64>, Option<u64>),
    text_hidden: u64,
    value: u64,
    attention: AttentionImpl,
) -> Result<Phase, EstimateError> {
    if tower.pool > 0 {
        gemma4(
            tower,
            images,
            (tokens, values),
            text_hidden,
            value,
            attention,
        )
    } else if tower.merge == 0 {
        siglip(tower, images, tokens, text_hidden, value, attention)
    } else if tower.image > 0 {
        llama4(
            tower,
            images,
            (tokens, values),
            text_hidden,
            value,
            attention,
        )
    } else {
        qwen(tower, images, (tokens, values), value, attention)
    }
}

/// Llama 4's tower: transformers 5.23 `models/llama4/modeling_llama4.py`
/// `Llama4Model.get_image_features` runs `Llama4VisionModel` over every tile of every
/// image at once. The processor (`image_processing_llama4.py`) cuts an image into tiles
/// `image` square (a global tile beside them when there are several) and hands them
/// over in bf16 (`rescale_and_normalize`); each tile is (image ÷ patch)² patches and a
/// class token, m rows, and gives (image ÷ patch)² ÷ merge² prompt tokens after
/// `Llama4VisionPixelShuffleMLP`'s pixel shuffle (`pixel_shuffle_ratio` 0.5: merge 2).
/// The tiles of an image are its tokens ÷ a tile's (the special tokens beside them are
/// fewer than a tile's), or its pixel values ÷ channels × image². T = tiles × m rows
/// of the tower's width h, in the compute dtype (v bytes):
/// - `Llama4VisionModel.forward` keeps its embeddings (`hidden_state`) through the
///   encoder, and `Llama4VisionEncoder.forward` the layer's input beside them;
/// - the rotary's moment (`vision_apply_rotary_emb`, every layer; the peak under
///   sdpa): `input_layernorm`'s output, q, k and v, q and k in fp32 (`.float()`), their
///   complex products with `freqs_ci` (fp32 pairs) and the two rotated back to v
///   (`type_as`): T × (8v · h + 4 · 4h) with the two kept;
/// - the attention's under eager (`vision_eager_attention_forward`: softmax in the
///   values' dtype, no fp32 copy): the scores and their scaled copy, tiles × heads ×
///   m² × v each, beside the normed input, v and the rotated q and k; the
///   probabilities outlive the attention into the MLP's moment
///   (`hidden_state, attn_weights = self.self_attn(…)`); under sdpa its fused output
///   and log-sum-exp stay below the rotary's;
/// - the MLP's (the residual sum, `post_attention_layernorm`'s output, `fc1`'s output
///   and GELU's), the patch embedding's (`Llama4UnfoldConvolution`: the unfolded
///   values, their contiguous copy for the linear, its output) and the adapter's
///   (`layernorm_post`, the pixel shuffle's two copies, `fc1` and GELU beside the
///   encoder's output) stay below these.
fn llama4(
    tw: &VisionTower,
    images: u64,
    (tokens, values): (Option<u64>, Option<u64>),
    text_hidden: u64,
    v: u64,
    attention: AttentionImpl,
) -> Result<Phase, EstimateError> {
    let side = tw.image.checked_div(tw.patch).unwrap_or(0);
    let patches = checked_product(&[side, side], WHAT)?;
    let merged = checked_product(&[tw.merge, tw.merge], WHAT)?;
    let per_tile = patches.checked_div(merged).unwrap_or(0);
    let tile_values = checked_product(&[tw.channels, tw.image, tw.image], WHAT)?;
    let tiles = match (tokens, values) {
        (Some(k), _) => k.checked_div(per_tile).unwrap_or(0).max(u64::from(k > 0)),
        (None, Some(vals)) => vals.checked_div(tile_values).unwrap_or(0),
        (None, None) => 0,
    };
    let batch = checked_product(&[images, tiles], WHAT)?;
    let m = patches.checked_add(1).ok_or_else(overflow)?;
    let rows = checked_product(&[batch, m], WHAT)?;
    let (h, heads) = (tw.hidden, tw.heads);
    let x = t(&[rows, h, v])?;
    let f32 = t(&[rows, h, 4])?;
    let cast = v != 4;
    let kept: u64 = if tw.layers >= 2 { 2 } else { 1 };
    // The normed input, q, k, v; q and k in fp32 (aliases in fp32) and their complex
    // products; the rotated pair back in v (aliases in fp32).
    let rotary = sum(&[
        checked_product(&[x, kept.saturating_add(4)], WHAT)?,
        checked_product(&[f32, if cast { 4 } else { 2 }], WHAT)?,
        if cast {
            checked_product(&[x, 2], WHAT)?
        } else {
            0
        },
    ])?;
    let eager = attention == AttentionImpl::Eager;
    let scores = t(&[batch, heads, m, m, v])?;
    let attn = if eager {
        sum(&[
            checked_product(&[x, kept.saturating_add(4)], WHAT)?,
            checked_product(&[scores, 2], WHAT)?,
        ])?
    } else {
        sum(&[
            checked_product(&[x, kept.saturating_add(6)], WHAT)?,
            t(&[batch, heads, m, 4])?,
        ])?
    };
    let mlp = sum(&[
        checked_product(&[x, kept.saturating_add(2)], WHAT)?,
        checked_product(&[t(&[rows, tw.intermediate, v])?, 2], WHAT)?,
        if eager { scores } else { 0 },
    ])?;
    let unfolded = t(&[batch, patches, tw.channels, tw.patch, tw.patch, v])?;
    let conv = sum(&[
        checked_product(&[unfolded, 2], WHAT)?,
        t(&[batch, patches, h, v])?,
    ])?;
    let shuffled = t(&[batch, patches, h, v])?;
    let tokens_all = checked_product(&[batch, per_tile], WHAT)?;
    let adapter = sum(&[
        checked_product(&[x, 2], WHAT)?,
        checked_product(&[shuffled, 2], WHAT)?,
        checked_product(&[t(&[tokens_all, tw.intermediate, v])?, 2], WHAT)?,
    ])?;
    let (moment, peak) = highest(&[
        ("the rotary's", rotary),
        ("the attention's", attn),
        ("the MLP's", mlp),
        ("the patch embedding's", conv),
        ("the adapter's", adapter),
    ]);
    Ok(Phase {
        // The tiles in bf16, as the processor hands them over.
        pixels: t(&[batch, tile_values, 2])?,
        peak,
        moment,
        // `last_hidden_state` (the adapter's output, `projector_output_dim` wide) in
        // `mm_encoder_outputs`, and `Llama4ForConditionalGeneration.forward`'s
        // `projected_vision_flat` (the text width) held while the language model runs.
        outputs: sum(&[
            t(&[tokens_all, tw.out, v])?,
            t(&[tokens_all, text_hidden, v])?,
        ])?,
        // Both are held at the merge (`projected_vision_flat` is its source).
        at_merge: sum(&[
            t(&[tokens_all, tw.out, v])?,
            t(&[tokens_all, text_hidden, v])?,
        ])?,
        tokens: checked_product(&[tiles, per_tile], WHAT)?,
        patches: checked_product(&[tiles, patches], WHAT)?,
        assumed: assumed(attention, v),
    })
}

/// Gemma 4's image processor's patch budgets (`max_soft_tokens`, transformers 5.23
/// `models/gemma4/image_processing_gemma4.py` `_SUPPORTED_SOFT_TOKENS`) and its default.
const GEMMA4_BUDGETS: [u64; 5] = [70, 140, 280, 560, 1120];
const GEMMA4_DEFAULT_BUDGET: u64 = 280;

/// Gemma 4's tower: transformers 5.23 `models/gemma4/modeling_gemma4.py`
/// `Gemma4Model.get_image_features` runs `Gemma4VisionModel` over all images at once,
/// then `Gemma4MultimodalEmbedder`. The processor (`image_processing_gemma4.py`
/// `Gemma4ImageProcessor._preprocess`) resizes an image to at most `max_soft_tokens`
/// × k² patches (k: `pooling_kernel_size`), patchifies it into rows of 3 · patch² fp32
/// values and pads every image to that budget, n = budget × k² rows, with (x, y)
/// positions (int64; −1 on padding) the caller holds beside them. The budget is the
/// processor's default (280 soft tokens), or the smallest supported one that holds
/// the image's tokens beyond it. T = images × n rows of the tower's width h, in the
/// compute dtype (v bytes); q is heads × head_dim wide, k and v key/value heads ×
/// head_dim (`num_key_value_heads`, a divisor of the heads):
/// - held through the encoder: `padding_positions` and the `~padding_positions` the
///   encoder takes (bool, T each), the rotary's cos and sin
///   (`Gemma4VisionRotaryEmbedding.forward`: T × 4 · ⌈head_dim ÷ 4⌉ in v), the
///   embeddings (`inputs_embeds`, kept by `Gemma4VisionModel.forward`) and from the
///   second layer on the layer's input beside them;
/// - the MLP's moment (`Gemma4VisionEncoderLayer.forward`, `Gemma4VisionMLP`): the
///   residual sum, `pre_feedforward_layernorm`'s output and three intermediate-wide
///   tensors (GELU of `gate_proj`, `up_proj`'s output, their product);
/// - the norms' (`Gemma4RMSNorm`: the fp32 copy, the mean square plus eps and its
///   power −0.5 (a row each, per head for `q_norm`, `k_norm`, `v_norm`) and the fp32
///   product): `q_norm`'s beside `input_layernorm`'s output and `q_proj`'s; `v_norm`'s
///   beside it, q and k rotated and `v_proj`'s output; `post_feedforward_layernorm`'s
///   beside the residual sum and `down_proj`'s output;
/// - the rotary's (`apply_multidimensional_rope`: per half, x · cos, `rotate_half`'s
///   concatenation times sin and their sum; the halves concatenated), over q, then
///   over k beside q;
/// - the attention's: under sdpa (flash: no mask where no patch is padding) its
///   output and fp32 log-sum-exp, then `o_proj`'s output beside q, k and v; under eager
///   (`eager_attention_forward`, scaling 1.0) `matmul(q, kᵀ) · scaling` (v), softmax's
///   fp32 copy and fp32 output, T · heads · n × (v + 8), and its probabilities (v)
///   outlive the attention into the MLP's moment (`hidden_states, _ =
///   self.self_attn(…)`). With fewer key/value heads, `repeat_kv` copies k and v to
///   the heads' width (`expand`, `reshape`) under eager, held until
///   `eager_attention_forward` returns (through its output's contiguous copy); sdpa
///   without a mask passes `enable_gqa` (`integrations/sdpa_attention.py`
///   `use_gqa_in_sdpa`) and flash reads the grouped k and v, no copy; with a mask it
///   repeats them too;
/// - with `use_clipped_linears`, each `Gemma4ClippableLinear` (q, k, v, o and the
///   MLP's three) clamps its input into a new tensor beside which the linear's output
///   is made, then clamps that output into another (its bounds are 0-d buffers, so
///   both stay in v); each pair lives only within the projection's call. The
///   projections' moments are counted with them; in the traced shapes they stay below
///   a norm's or the MLP's moment, so the peak is the one without them;
/// - the patch embedding's (`Gemma4VisionPatchEmbedder`: `2 · (pixel_values − 0.5)`
///   in fp32, its cast to v, `input_proj`'s output and the position embeddings: the
///   clamped positions (int64), the x and y lookups, their sum and `torch.where`'s
///   copy);
/// - the pooler's (`Gemma4VisionPooler._avg_pool_by_positions`, beside the embeddings,
///   the encoder's output and `masked_fill`'s copy): the clamped positions, the
///   kernel indices (int64), `F.one_hot`'s int64 T × budget and its fp32 copy, or the
///   fp32 weights, the hidden states in fp32 and the pooled fp32 output;
/// - the rest (`hidden_states[pooler_mask]`, the standardisation, the embedder over
///   the images' soft tokens) holds rows of the soft tokens only, below these.
///
/// An image of fewer tokens than its budget has padding patches: the encoder then
/// builds an attention mask (`masking_utils.py` `create_bidirectional_mask`). Under
/// eager it is `eager_mask`'s images × n² in v, held through the encoder and added to
/// the scores (traced). Under sdpa transformers hands over a boolean images × 1 × 1 × n
/// broadcast, and CUDA (ATen `scaled_dot_product_attention`) converts it to a full
/// additive mask in v (`convert_boolean_attn_mask`: its `logical_not` and `where`),
/// copies it for the memory-efficient kernel's alignment where needed
/// (`preprocess_mask`; counted always) and runs that kernel in flash's place (its
/// log-sum-exp over 32-row blocks): read from the code, not traced, so the figure is
/// assumed there.
fn gemma4(
    tw: &VisionTower,
    images: u64,
    (tokens, values): (Option<u64>, Option<u64>),
    text_hidden: u64,
    v: u64,
    attention: AttentionImpl,
) -> Result<Phase, EstimateError> {
    let k = tw.pool;
    let k2 = checked_product(&[k, k], WHAT)?;
    let per_patch = checked_product(&[3, tw.patch, tw.patch], WHAT)?;
    let tokens = match (tokens, values) {
        (Some(t), _) => t,
        (None, Some(vals)) => vals
            .checked_div(per_patch)
            .and_then(|p| p.checked_div(k2))
            .unwrap_or(0),
        (None, None) => 0,
    };
    // No image (no tokens): no patches, no line.
    let budget = if tokens == 0 {
        0
    } else if tokens <= GEMMA4_DEFAULT_BUDGET {
        GEMMA4_DEFAULT_BUDGET
    } else {
        GEMMA4_BUDGETS
            .into_iter()
            .find(|b| *b >= tokens)
            .unwrap_or(tokens)
    };
    gemma4_over(tw, images, tokens, budget, text_hidden, v, attention)
}

/// Gemma 4's tower over `images` images of `tokens` soft tokens each, padded to
/// `budget` soft tokens' patches.
fn gemma4_over(
    tw: &VisionTower,
    images: u64,
    tokens: u64,
    budget: u64,
    text_hidden: u64,
    v: u64,
    attention: AttentionImpl,
) -> Result<Phase, EstimateError> {
    let k = tw.pool;
    let k2 = checked_product(&[k, k], WHAT)?;
    let per_patch = checked_product(&[3, tw.patch, tw.patch], WHAT)?;
    let padded = tokens < budget;
    let n = checked_product(&[budget, k2], WHAT)?;
    let rows = checked_product(&[images, n], WHAT)?;
    let (h, heads) = (tw.hidden, tw.heads);
    let hd = if tw.head_dim > 0 {
        tw.head_dim
    } else {
        h.checked_div(heads).unwrap_or(0)
    };
    let qw = checked_product(&[heads, hd], WHAT)?;
    // Key/value heads (`num_key_value_heads`; the family reads only those that divide
    // the heads).
    let kvh = if tw.kv_heads > 0 { tw.kv_heads } else { heads };
    let kw = checked_product(&[kvh, hd], WHAT)?;
    let x = t(&[rows, h, v])?;
    let f = t(&[rows, h, 4])?;
    let s1 = t(&[rows, 4])?;
    let xq = t(&[rows, qw, v])?;
    let fq = t(&[rows, qw, 4])?;
    let sq = t(&[rows, heads, 4])?;
    let xk = t(&[rows, kw, v])?;
    let fk = t(&[rows, kw, 4])?;
    let sk = t(&[rows, kvh, 4])?;
    // `apply_multidimensional_rope`: two halves of 2 · (head_dim ÷ 4) channels.
    let rotated = checked_product(&[2, hd / 4], WHAT)?;
    let half = t(&[rows, heads, rotated, v])?;
    let half_k = t(&[rows, kvh, rotated, v])?;
    // `repeat_kv`'s copies of k and v at the heads' width (`expand` then `reshape`),
    // made where the key/value heads are fewer: by `eager_attention_forward`, and by
    // `sdpa_attention_forward` where a mask is given (`use_gqa_in_sdpa`: without one
    // sdpa takes `enable_gqa` and flash reads the grouped k and v as they are). Both
    // keep them until they return.
    let reps = if kvh < heads {
        checked_product(&[xq, 2], WHAT)?
    } else {
        0
    };
    let kv = checked_product(&[xk, 2], WHAT)?;
    let clip = tw.clipped;
    let inter = t(&[rows, tw.intermediate, v])?;
    let eager = attention == AttentionImpl::Eager;
    let mask = t(&[rows])?;
    let rope_width = checked_product(&[4, (hd / 2).div_ceil(2)], WHAT)?;
    let cos = t(&[rows, rope_width, v])?;
    let kept: u64 = if tw.layers >= 2 { 2 } else { 1 };
    // The padding's mask held through the encoder: eager's in v, sdpa's boolean
    // images × 1 × 1 × n (`padding_mask_function`'s broadcast).
    let pad_mask = match (padded, eager) {
        (false, _) => 0,
        (true, true) => t(&[images, n, n, v])?,
        (true, false) => t(&[images, n])?,
    };
    let held = sum(&[
        checked_product(&[mask, 2], WHAT)?,
        checked_product(&[cos, 2], WHAT)?,
        checked_product(&[x, kept], WHAT)?,
        pad_mask,
    ])?;
    let norm = |fp: u64, s: u64| {
        sum(&[
            checked_product(&[fp, 2], WHAT)?,
            checked_product(&[s, 2], WHAT)?,
        ])
    };
    let probs = if eager {
        t(&[images, heads, n, n, v])?
    } else {
        0
    };
    let fp32_scores = t(&[images, heads, n, n, 4])?;
    let attn = if eager {
        sum(&[
            held,
            x,
            xq,
            kv,
            reps,
            probs,
            checked_product(&[fp32_scores, 2], WHAT)?,
        ])?
    } else if padded {
        let n16 = n.div_ceil(16).saturating_mul(16);
        let n32 = n.div_ceil(32).saturating_mul(32);
        sum(&[
            held,
            x,
            checked_product(&[xq, 2], WHAT)?,
            kv,
            reps,
            t(&[images, heads, n32, 4])?,
            t(&[images, n, n])?,
            t(&[images, n, n, v])?,
            t(&[images, n, n16, v])?,
        ])?
    } else {
        sum(&[
            held,
            x,
            checked_product(&[xq, 2], WHAT)?,
            kv,
            t(&[images, heads, n, 4])?,
        ])?
    };
    // A `Gemma4ClippableLinear` of input `i` and output `o` bytes: the linear's output
    // beside the clamped input (`torch.clamp`, a new tensor; its bounds are 0-d
    // buffers, so it keeps the input's dtype), then the clamped output beside the
    // linear's; without clipping, the output alone.
    let proj = |i: u64, o: u64| -> Result<u64, EstimateError> {
        if clip {
            Ok(sum(&[i, o])?.max(checked_product(&[o, 2], WHAT)?))
        } else {
            Ok(o)
        }
    };
    // `o_proj`'s output beside q, k, v and the attention's output; under eager the
    // output's contiguous copy beside `matmul(probs, v)` before it (and beside
    // `repeat_kv`'s copies, still held).
    let o_out = proj(xq, x)?;
    let o_proj = sum(&[
        held,
        x,
        xq,
        kv,
        xq,
        probs,
        if eager {
            o_out.max(sum(&[xq, reps])?)
        } else {
            o_out
        },
    ])?;
    // The rotary's over q (beside `input_layernorm`'s output), then over k (beside q).
    let rotary = |w: u64, half: u64| -> Result<u64, EstimateError> {
        Ok(checked_product(&[half, 4], WHAT)?.max(sum(&[w, checked_product(&[half, 2], WHAT)?])?))
    };
    let rope =
        sum(&[held, x, xq, rotary(xq, half)?])?.max(sum(&[held, x, xq, xk, rotary(xk, half_k)?])?);
    // `q_norm`'s beside `q_proj`'s output; `v_norm`'s beside q, k and `v_proj`'s
    // output (`k_norm`'s, beside less, is below it).
    let q_norm = sum(&[held, x, xq, norm(fq, sq)?])?;
    let v_norm = sum(&[held, x, xq, kv, norm(fk, sk)?])?;
    // The projections' clamps: `q_proj`'s beside `input_layernorm`'s output, `k_proj`'s
    // beside q, `v_proj`'s beside q and k.
    let clamps = if clip {
        sum(&[held, x, proj(x, xq)?])?
            .max(sum(&[held, x, xq, proj(x, xk)?])?)
            .max(sum(&[held, x, xq, xk, proj(x, xk)?])?)
    } else {
        0
    };
    let in_norm = sum(&[held, norm(f, s1)?])?;
    let post_ff = sum(&[held, probs, checked_product(&[x, 2], WHAT)?, norm(f, s1)?])?;
    // The MLP beside the residual sum and `pre_feedforward_layernorm`'s output: GELU of
    // `gate_proj`'s output beside `up_proj`'s and their product; clipped, also
    // `up_proj`'s linear beside GELU's output and the clamped input, and `down_proj`'s
    // beside the product (the caller's argument) and its clamped copy.
    let mlp_inner = checked_product(&[inter, 3], WHAT)?;
    let mlp_inner = if clip {
        mlp_inner
            .max(sum(&[inter, proj(x, inter)?])?)
            .max(sum(&[inter, proj(inter, x)?])?)
    } else {
        mlp_inner
    };
    let mlp = sum(&[held, probs, checked_product(&[x, 2], WHAT)?, mlp_inner])?;
    // The patch embedding, beside `padding_positions`.
    let p4 = t(&[rows, per_patch, 4])?;
    let p2 = t(&[rows, per_patch, v])?;
    let positions = t(&[rows, 2, 8])?;
    let embed = sum(&[
        mask,
        checked_product(&[p4, 2], WHAT)?.max(sum(&[
            p2,
            positions,
            checked_product(&[x, 5], WHAT)?,
        ])?),
    ])?;
    // The pooler, beside `padding_positions`, the embeddings, the encoder's output and
    // `masked_fill`'s copy, the clamped positions, `max_x` and the kernel indices.
    let pool_held = sum(&[
        mask,
        checked_product(&[x, 3], WHAT)?,
        positions,
        t(&[images, 8])?,
        t(&[rows, 8])?,
    ])?;
    let weights = t(&[rows, budget, 4])?;
    let pooler = sum(&[
        pool_held,
        t(&[rows, budget, 8])?
            .checked_add(weights)
            .ok_or_else(overflow)?
            .max(sum(&[weights, f, t(&[images, budget, h, 4])?])?),
    ])?;
    let (moment, peak) = highest(&[
        ("the MLP's", mlp),
        ("the attention's", attn),
        ("o_proj's", o_proj),
        ("the rotary's", rope),
        ("q_norm's", q_norm),
        ("v_norm's", v_norm),
        ("the projections' clamps", clamps),
        ("input_layernorm's", in_norm),
        ("post_feedforward_layernorm's", post_ff),
        ("the patch embedding's", embed),
        ("the pooler's", pooler),
    ]);
    let soft = checked_product(&[images, tokens], WHAT)?;
    Ok(Phase {
        // The patches (fp32) and their positions (int64), as the processor hands
        // them over.
        pixels: sum(&[t(&[rows, per_patch, 4])?, positions])?,
        peak,
        moment,
        // `last_hidden_state` (the images' soft tokens, h wide) and the embedder's
        // output (`pooler_output`, split per image: views) in `mm_encoder_outputs`,
        // and `Gemma4Model.forward`'s `torch.cat` of it (`image_features`), held while
        // the language model runs.
        outputs: sum(&[
            t(&[soft, h, v])?,
            checked_product(&[t(&[soft, text_hidden, v])?, 2], WHAT)?,
        ])?,
        at_merge: sum(&[
            t(&[soft, h, v])?,
            checked_product(&[t(&[soft, text_hidden, v])?, 2], WHAT)?,
        ])?,
        tokens,
        patches: n,
        assumed: assumed(attention, v).or((padded && !eager).then_some(
            "the image does not fill its patch budget: under sdpa the attention mask over its padding patches (CUDA's conversion, the memory-efficient kernel) is read from ATen's code, not traced",
        )),
    })
}

/// Gemma 3's tower and PaliGemma's: transformers 5.23 `models/gemma3/modeling_gemma3.py`
/// `Gemma3Model.get_image_features` and `models/paligemma/modeling_paligemma.py`
/// `PaliGemmaModel.get_image_features` run `SiglipVisionModel`
/// (`models/siglip/modeling_siglip.py`) over all images at once, then
/// `Gemma3MultiModalProjector` (pooled to the prompt's tokens) or
/// `PaliGemmaMultiModalProjector` (`out` > 0: a linear over every patch). Each image is resized to `image` square, (image ÷
/// patch)² = n patches; T = images × n rows of the tower's width h, in the compute
/// dtype (v bytes):
/// - `SiglipVisionModel.forward` keeps the embeddings (`hidden_states`) through the
///   encoder, and `SiglipEncoder.forward` the layer's input beside them from the
///   second layer on;
/// - the MLP's moment (`SiglipEncoderLayer.forward`, `SiglipMLP.forward`): the
///   attention's residual sum, `layer_norm2`'s output, `fc1`'s output and GELU's,
///   T × (4h + 2 · intermediate) · v with the two kept;
/// - the attention's moment (`SiglipAttention.forward`): `layer_norm1`'s output, q, k,
///   v and under sdpa the fused kernel's output with its fp32 log-sum-exp (images ×
///   heads × n); under eager (`eager_attention_forward`) `matmul(q, kᵀ) · scaling`
///   (v), softmax's fp32 copy of it and its fp32 output (bf16 is not CUDA's
///   `half_to_float` path: ATen `softmax` converts first), images × heads × n² ×
///   (v + 8), and its probabilities (v) outlive the attention
///   (`hidden_states, _ = self.self_attn(…)`) into the MLP's moment;
/// - the patch convolution's moment (the pixel values cast to v, its output) and the
///   projector's (the encoder's output, `post_layernorm`'s, the projector's
///   contiguous copy beside the embeddings) stay below these.
fn siglip(
    tw: &VisionTower,
    images: u64,
    tokens: Option<u64>,
    text_hidden: u64,
    v: u64,
    attention: AttentionImpl,
) -> Result<Phase, EstimateError> {
    let side = tw.image.checked_div(tw.patch).unwrap_or(0);
    let n = checked_product(&[side, side], WHAT)?;
    let rows = checked_product(&[images, n], WHAT)?;
    let (h, heads) = (tw.hidden, tw.heads);
    let x = t(&[rows, h, v])?;
    // The embeddings, and from the second layer on the layer's input beside them.
    let kept: u64 = if tw.layers >= 2 { 2 } else { 1 };
    let mlp = sum(&[
        checked_product(&[x, kept.saturating_add(2)], WHAT)?,
        checked_product(&[t(&[rows, tw.intermediate, v])?, 2], WHAT)?,
    ])?;
    let eager = attention == AttentionImpl::Eager;
    let (attn, probs) = if eager {
        let probs = t(&[images, heads, n, n, v])?;
        let fp32 = t(&[images, heads, n, n, 4])?;
        (
            sum(&[
                checked_product(&[x, kept.saturating_add(4)], WHAT)?,
                probs,
                checked_product(&[fp32, 2], WHAT)?,
            ])?,
            probs,
        )
    } else {
        (
            sum(&[
                checked_product(&[x, kept.saturating_add(5)], WHAT)?,
                t(&[images, heads, n, 4])?,
            ])?,
            0,
        )
    };
    let mlp = sum(&[mlp, probs])?;
    let conv = sum(&[
        if v == 4 {
            0
        } else {
            t(&[images, tw.channels, tw.image, tw.image, v])?
        },
        x,
    ])?;
    // PaliGemma's projector (`out` > 0) runs after the tower has returned: its
    // output beside `last_hidden_state`, below the embeddings, the encoder's output
    // and `post_layernorm`'s the tower's return holds together.
    let tail = if tw.out > 0 {
        sum(&[checked_product(&[x, 3], WHAT)?, t(&[rows, tw.out, v])?])?
    } else {
        checked_product(&[x, 4], WHAT)?
    };
    let (moment, peak) = highest(&[
        ("the MLP's", mlp),
        ("the attention's", attn),
        ("the patch convolution's", conv),
        ("the projector's", tail),
    ]);
    let tokens = tokens.unwrap_or(n);
    let outputs = sum(&[
        x,
        if tw.out > 0 {
            t(&[rows, tw.out, v])?
        } else {
            t(&[images, tokens, text_hidden, v])?
        },
    ])?;
    Ok(Phase {
        pixels: t(&[images, tw.channels, tw.image, tw.image, 4])?,
        peak,
        moment,
        // `last_hidden_state` (`post_layernorm`'s output) and the projector's output
        // (`Gemma3Model.forward` and `PaliGemmaModel.forward` take it as it is: `.to`
        // the same dtype and device): Gemma 3's pooled to the prompt's tokens of the
        // text width, PaliGemma's every patch of `projection_dim`.
        outputs,
        at_merge: outputs,
        // PaliGemma's image is a token a patch.
        tokens: if tw.out > 0 { n } else { tokens },
        patches: n,
        assumed: assumed(attention, v),
    })
}

/// Why a tower's figure is assumed under this attention and value width: flash
/// attention's path (transformers' `flash_attention_2`, varlen over `cu_seqlens`) and
/// the memory-efficient kernel called directly are not traced, nor fp32 compute
/// (whose casts are aliases); under them the attention's moment is still counted
/// with its output and log-sum-exp, as sdpa's fused kernel holds them.
pub(super) fn assumed(attention: AttentionImpl, v: u64) -> Option<&'static str> {
    match attention {
        AttentionImpl::Flash | AttentionImpl::Efficient => {
            Some("the flash and memory-efficient paths are taken as sdpa's fused kernel")
        }
        _ if v == 4 => Some("fp32 compute is not traced"),
        _ => None,
    }
}

/// Qwen2.5-VL's tower (transformers 5.23 `models/qwen2_5_vl/modeling_qwen2_5_vl.py`,
/// `Qwen2_5_VisionTransformerPretrainedModel`), Qwen2-VL's
/// (`models/qwen2_vl/modeling_qwen2_vl.py`, `Qwen2VisionTransformerPretrainedModel`:
/// no window, every block over the whole image) and Qwen3-VL's
/// (`models/qwen3_vl/modeling_qwen3_vl.py`, `Qwen3VLVisionModel`), over the patches of
/// all images at once: an image of n patches (tokens × merge²) is n rows of
/// `channels × temporal × patch²` pixel values, N = images × n rows in all, h wide.
/// Held through the forward: the pixel values cast to the model's dtype
/// (`get_image_features`: `pixel_values.type(self.visual.dtype)`), the index tensors
/// `vision_utils.py` builds from `grid_thw` (`get_vision_position_ids`: N × 2 int64;
/// `get_vision_cu_seqlens`: images + 1 int32; Qwen2.5-VL's `get_vision_window_index`:
/// N ÷ merge² int64 and one int32 boundary a window; Qwen3-VL's
/// `get_vision_interpolation_indices_and_weights`: N × 4 int64 and N × 4 fp32), the
/// rotary tables (`Qwen2_5_VLVisionRotaryEmbedding.forward`, cos and sin N × head dim
/// in fp32), Qwen3-VL's interpolated positions (`pos_embeds`, N × h in fp32: the bf16
/// table rows times fp32 weights promote) and, in the blocks after them, its deepstack
/// mergers' outputs (N ÷ merge² × out each). The moments:
/// - the rotary's (`apply_rotary_pos_emb_vision`, every block, the last one with every
///   deepstack output): the block's input and `norm1`'s output, `qkv`'s output (3h),
///   q and k cast to fp32, and while k turns (`(k·cos) + (rotate_half(k)·sin)`) the
///   rotated q, k·cos, `rotate_half`'s concatenation and its product with sin in
///   fp32: N × (5v · h + 2 · 4h + 4 · 4h), the peak at every image size under
///   sdpa;
/// - the attention's: the same inputs, the rotated q and k in v, and under sdpa
///   (flash for 16-bit values and head dims ≤ 256, a multiple of 8) each window's
///   output and their concatenation with one call's log-sum-exp; under eager, for
///   each image in turn over a full-attention block (every Qwen2-VL and Qwen3-VL block, Qwen2.5-VL's
///   `fullatt_block_indexes`), heads × n² × (v + 8) of scores (as Gemma's above) and
///   the earlier images' outputs; a window's scores where no block attends over the
///   whole image;
/// - the MLP's: the input, the residual sum, `norm2`'s output and three intermediate-
///   wide tensors (Qwen2.5-VL's gated MLP; Qwen2-VL's `VisionMlp` under its
///   default quick_gelu, `activations.py` `QuickGELUActivation`:
///   `input * torch.sigmoid(1.702 * input)` beside `fc1`'s output, then the product
///   beside the sigmoid; Qwen3-VL's holds two, and Qwen2-VL's under a one-kernel
///   activation: an upper bound);
/// - Qwen3-VL's positions: the patch embedding, the table rows (N × 4 × h in v) and
///   their fp32 product with the weights;
/// - the mergers (`ln_q` or a LayerNorm, two linears over N ÷ merge² rows of
///   merge² · h) stay below the MLP's.
fn qwen(
    tw: &VisionTower,
    images: u64,
    (tokens, values): (Option<u64>, Option<u64>),
    v: u64,
    attention: AttentionImpl,
) -> Result<Phase, EstimateError> {
    let merged = checked_product(&[tw.merge, tw.merge], WHAT)?;
    let n = match (tokens, values) {
        (Some(k), _) => checked_product(&[k, merged], WHAT)?,
        (None, Some(vals)) => vals
            .checked_div(checked_product(&[tw.channels, tw.patch, tw.patch], WHAT)?)
            .unwrap_or(0),
        (None, None) => 0,
    };
    let rows = checked_product(&[images, n], WHAT)?;
    let tokens_all = rows.checked_div(merged).unwrap_or(0);
    let (h, heads) = (tw.hidden, tw.heads);
    let head = h.checked_div(heads).unwrap_or(0);
    // `compute_axial_rope_parameters`: arange(0, head ÷ 2, 2) frequencies, each taken
    // for height and width, the pair twice: 4 · ⌈(head ÷ 2) ÷ 2⌉ columns.
    let rope_width = checked_product(&[4, (head / 2).div_ceil(2)], WHAT)?;
    let per_patch = checked_product(&[tw.channels, tw.temporal, tw.patch, tw.patch], WHAT)?;
    let cast = v != 4;
    let pixels16 = if cast { t(&[rows, per_patch, v])? } else { 0 };
    // Qwen2.5-VL's windows: `get_vision_window_index` cuts an image's merged grid (a ×
    // b units, a · b = n ÷ merge²) into windows of u = window ÷ merge ÷ patch units a
    // side, ⌈a ÷ u⌉ · ⌈b ÷ u⌉ of them, one int32 boundary each. The image's aspect is
    // not an input: the grid with the most windows is counted.
    let windows = if tw.window > 0 {
        let units = n.checked_div(merged).unwrap_or(0);
        let u = tw
            .window
            .checked_div(tw.merge)
            .and_then(|w| w.checked_div(tw.patch))
            .unwrap_or(0)
            .max(1);
        checked_product(&[images, most_windows(units, u)], WHAT)?
    } else {
        0
    };
    let window_index = if tw.window > 0 {
        sum(&[
            t(&[tokens_all, 8])?,
            t(&[windows.checked_add(1).ok_or_else(overflow)?, 4])?,
        ])?
    } else {
        0
    };
    let positions = if tw.pos_taps > 0 {
        sum(&[t(&[rows, tw.pos_taps, 8])?, t(&[rows, tw.pos_taps, 4])?])?
    } else {
        0
    };
    let indices = sum(&[
        pixels16,
        t(&[rows, 2, 8])?,
        t(&[images.checked_add(1).ok_or_else(overflow)?, 4])?,
        window_index,
        positions,
    ])?;
    let pos_embeds = if tw.pos_taps > 0 {
        t(&[rows, h, 4])?
    } else {
        0
    };
    let rope = checked_product(&[t(&[rows, rope_width, 4])?, 2], WHAT)?;
    let deep = checked_product(&[tw.deepstack, t(&[tokens_all, tw.out, v])?], WHAT)?;
    let held = sum(&[indices, pos_embeds, rope, deep])?;
    let x = t(&[rows, h, v])?;
    let qkv = t(&[rows, 3, h, v])?;
    let f32 = t(&[rows, h, 4])?;
    let rotary = sum(&[
        held,
        checked_product(&[x, 2], WHAT)?,
        qkv,
        checked_product(&[f32, if cast { 6 } else { 4 }], WHAT)?,
    ])?;
    let inputs = sum(&[held, checked_product(&[x, 4], WHAT)?, qkv])?;
    let full = tw.window == 0 || tw.full_layers > 0;
    let attn = match attention {
        AttentionImpl::Eager => {
            let over = if full {
                n
            } else {
                let side = tw.window.checked_div(tw.patch).unwrap_or(0);
                checked_product(&[side, side], WHAT)?.min(n)
            };
            let earlier = if full {
                checked_product(&[images.saturating_sub(1), t(&[n, h, v])?], WHAT)?
            } else {
                x
            };
            sum(&[
                inputs,
                earlier,
                t(&[heads, over, over, v])?,
                checked_product(&[t(&[heads, over, over, 4])?, 2], WHAT)?,
            ])?
        }
        _ => sum(&[inputs, checked_product(&[x, 2], WHAT)?, t(&[heads, n, 4])?])?,
    };
    let mlp = sum(&[
        held,
        checked_product(&[x, 3], WHAT)?,
        checked_product(&[t(&[rows, tw.intermediate, v])?, 3], WHAT)?,
    ])?;
    let interpolation = if tw.pos_taps > 0 {
        sum(&[
            indices,
            x,
            t(&[rows, tw.pos_taps, h, v])?,
            t(&[rows, tw.pos_taps, h, 4])?,
        ])?
    } else {
        0
    };
    let (moment, peak) = highest(&[
        ("the rotary's", rotary),
        ("the attention's", attn),
        ("the MLP's", mlp),
        ("the positions' interpolation", interpolation),
    ]);
    Ok(Phase {
        pixels: t(&[rows, per_patch, 4])?,
        peak,
        moment,
        // `last_hidden_state` (the last block's output) and, twice, the merged
        // embeddings and the deepstack features: in `mm_encoder_outputs`, and the
        // `torch.cat` copies `Qwen2VLModel.forward` / `Qwen2_5_VLModel.forward` /
        // `Qwen3VLModel.forward` make of
        // them (`image_embeds`, `deepstack_visual_embeds`).
        outputs: sum(&[
            x,
            checked_product(&[t(&[tokens_all, tw.out, v])?, 2], WHAT)?,
            checked_product(&[deep, 2], WHAT)?,
        ])?,
        // At the merge the deepstack features are not yet concatenated
        // (`Qwen3VLModel.forward` makes `deepstack_visual_embeds` after
        // `masked_scatter`).
        at_merge: sum(&[
            x,
            checked_product(&[t(&[tokens_all, tw.out, v])?, 2], WHAT)?,
            deep,
        ])?,
        tokens: n.checked_div(merged).unwrap_or(0),
        patches: n,
        assumed: assumed(attention, v),
    })
}

/// The text prefill's lines in the total (whole model, one device).
pub(super) fn text_prefill(lines: &[Line]) -> Result<(u64, u64), EstimateError> {
    lines
        .iter()
        .filter(|l| {
            l.in_total
                && matches!(
                    l.key,
                    LineKey::PrefillMlp
                        | LineKey::PrefillAttentionScores
                        | LineKey::PrefillLogits
                        | LineKey::PrefillQuantizedMatmul
                )
        })
        .try_fold((0u64, 0u64), |(s, d), l| {
            Some((s.checked_add(l.bytes)?, d.checked_add(l.device_bytes)?))
        })
        .ok_or_else(overflow)
}

/// The line over text prefill lines `prefill` (whole, one device): what the tower's
/// phase needs beyond them, at least what the text forward holds of the tower.
pub(super) fn top_up(tower_phase: u64, held: u64, prefill: (u64, u64)) -> (u64, u64) {
    let line = |text: u64| tower_phase.saturating_sub(text).max(held);
    (line(prefill.0), line(prefill.1))
}

/// After traced figures replace the text prefill's lines, the towers' lines (vision
/// and audio) are topped up again over them (each one's tower phase and what the
/// text forward holds are its inputs), so the lines' sum stays the larger phase.
pub(super) fn retop(lines: &mut [Line]) -> Result<(), EstimateError> {
    let prefill = text_prefill(lines)?;
    for l in lines.iter_mut().filter(|l| {
        matches!(
            l.key,
            LineKey::PrefillVisionTower | LineKey::PrefillAudioTower
        )
    }) {
        let number = |k: &str| l.inputs.get(k).and_then(|v| v.parse::<u64>().ok());
        let (Some(tower_phase), Some(held)) = (number("tower-phase"), number("held")) else {
            continue;
        };
        retop_line(l, tower_phase, held, prefill);
    }
    Ok(())
}

/// Tops line `l` up again over the traced prefill lines `prefill` (whole, one device):
/// its phase `phase` beyond them, at least `held`; the formula says so when it moved.
pub(super) fn retop_line(l: &mut Line, phase: u64, held: u64, prefill: (u64, u64)) {
    let (bytes, device) = top_up(phase, held, prefill);
    if (bytes, device) != (l.bytes, l.device_bytes) {
        l.bytes = bytes;
        l.device_bytes = device;
        l.formula = format!(
            "{}; over the traced prefill lines ({} B): {bytes} B",
            l.formula, prefill.0
        );
    }
}

/// The highest of a phase's moments, with its name (the first of equals).
pub(super) fn highest(moments: &[(&'static str, u64)]) -> (&'static str, u64) {
    moments
        .iter()
        .copied()
        .fold(("", 0), |m, c| if c.1 > m.1 { c } else { m })
}

/// The prompt a tower's outputs are merged into: its sequences, its tokens a sequence
/// (at least the item's own) and the text model's width; Gemma 4's per-layer inputs
/// (layers × width; 0: none).
#[derive(Debug, Clone, Copy)]
pub(super) struct Prompt {
    pub rows: u64,
    pub tokens: u64,
    pub hidden: u64,
    pub per_layer: u64,
}

/// `inputs_embeds.masked_scatter(mask, features)` over `rows` × `s` × `h` embeddings
/// in values `v` bytes wide, with a mask one a token (`[rows, s, 1]`, or one already
/// expanded to the embeddings' shape): what it allocates beyond its inputs. The
/// out-of-place op (pytorch/pytorch `aten/src/ATen/native/TensorAdvancedIndexing.cpp`
/// `masked_scatter`) expands the mask (a view) and clones the embeddings
/// (`clone(at::MemoryFormat::Contiguous)`, traced on the meta device); CUDA's in-place
/// kernel on the clone (`aten/src/ATen/native/cuda/IndexKernel.cpp`
/// `masked_scatter__cuda`) allocates `maskPrefixSum`, int64 over the embeddings'
/// whole shape, and `launch_masked_scatter_kernel` (`cuda/IndexKernel.cu`) makes the
/// expanded mask contiguous (`mask.contiguous()`: bool, one a value; the mask is
/// never contiguous there, its last dimension broadcast) for cub's
/// `mask_exclusive_sum`; the features are contiguous (their `contiguous()` an
/// alias). These sources were read on pytorch/pytorch's main branch of 2026
/// (`IndexKernel.cu` at 01c6eca, `Nonzero.cu` at 0358b9e), not at the v2.11.0 tag
/// the trace runs. The scratch is read from ATen's code, not traced (the meta kernel
/// allocates none of it); cub's scan temp storage (its tile states, a few bytes a
/// tile of thousands of values) is not counted.
pub(super) fn scatter(rows: u64, s: u64, h: u64, v: u64) -> Result<u64, EstimateError> {
    let n = checked_product(&[rows, s, h], WHAT)?;
    sum(&[t(&[n, v])?, t(&[n, 8])?, t(&[n])?])
}

/// A boolean index of the embeddings by a mask expanded to their shape (Gemma 4's
/// `inputs_embeds[image_mask].numel()` check), `count` values selected: ATen turns
/// the mask into `mask.nonzero()` (`expandTensors`), whose CUDA kernel
/// (pytorch/pytorch `aten/src/ATen/native/cuda/Nonzero.cu` `nonzero_cuda_out_impl`)
/// makes the expanded mask contiguous (`self.contiguous()`, bool over the
/// embeddings' shape) beside its count (an int) and its int64 output (3 × count);
/// the gathered values (count × v) are made beside that output once the copy is let
/// go. cub's reduce and select temp storage is not counted.
pub(super) fn bool_index(
    rows: u64,
    s: u64,
    h: u64,
    v: u64,
    count: u64,
) -> Result<u64, EstimateError> {
    let nz = t(&[count, 3, 8])?;
    Ok(sum(&[t(&[rows, s, h])?, r(4), nz])?.max(sum(&[nz, t(&[count, v])?])?))
}

/// The merge of the image embeddings into the prompt's (transformers 5.23), beyond
/// the pixel values: what the model's forward holds then (`at_merge` of the tower's
/// outputs; `inputs_embeds`, `get_input_embeddings()(input_ids)`; its placeholder
/// masks) and the merge's own allocations ([`scatter`], Gemma 4's [`bool_index`]).
/// - Gemma 3 and PaliGemma (`Gemma3Model.forward`, `PaliGemmaModel.forward`):
///   `get_placeholder_mask`'s `input_ids == image_token_id` (bool, one a token;
///   `unsqueeze(-1)` and `.to` the same device are views), PaliGemma's
///   `position_ids` (int64, one a token) made before it, then `masked_scatter`;
/// - Llama 4 (`Llama4ForConditionalGeneration.forward`): the one mask, then
///   `masked_scatter`;
/// - Qwen2.5-VL, Qwen3-VL, Qwen3.5 (`get_placeholder_mask` returns the image's and
///   the video's masks, both held: `image_mask, _ = …`), then `masked_scatter`;
/// - Gemma 4 (`Gemma4Model.forward`): the image, video and audio masks and their
///   union, `llm_input_ids` (int64), `inputs_embeds`, with per-layer inputs
///   `llm_inputs_embeds` and `get_per_layer_inputs`' output, `n_image_tokens`;
///   the mask `expand_as(inputs_embeds)` (a view; `.to` the same device: no copy),
///   then `inputs_embeds[image_mask].numel()` (a boolean index) and
///   `masked_scatter`.
fn merge(tw: &VisionTower, p: &Phase, prompt: Prompt, v: u64) -> Result<u64, EstimateError> {
    let (b, h) = (prompt.rows, prompt.hidden);
    let s = prompt.tokens.max(p.tokens);
    let e = t(&[b, s, h, v])?;
    let mask = t(&[b, s])?;
    let held = if tw.pool > 0 {
        let ple = if prompt.per_layer > 0 {
            sum(&[e, t(&[b, s, prompt.per_layer, v])?])?
        } else {
            0
        };
        sum(&[
            checked_product(&[mask, 4], WHAT)?,
            t(&[b, s, 8])?,
            e,
            ple,
            r(8),
        ])?
    } else if tw.merge == 0 {
        sum(&[e, mask, if tw.out > 0 { t(&[s, 8])? } else { 0 }])?
    } else if tw.image > 0 {
        sum(&[e, mask])?
    } else {
        sum(&[e, checked_product(&[mask, 2], WHAT)?])?
    };
    let step = scatter(b, s, h, v)?;
    let step = if tw.pool > 0 {
        let count = checked_product(&[b, p.tokens, h], WHAT)?;
        step.max(bool_index(b, s, h, v, count)?)
    } else {
        step
    };
    sum(&[p.at_merge, held, step])
}

/// The most windows of u × u units any grid of `units` merged units is cut into:
/// ⌈a ÷ u⌉ · ⌈b ÷ u⌉ over a · b = units (a grid one unit tall when nothing else has
/// more); beyond 2^40 units, one a unit (a bound).
fn most_windows(units: u64, u: u64) -> u64 {
    if units > 1 << 40 {
        return units;
    }
    (1..=units.isqrt())
        .filter(|a| units.is_multiple_of(*a))
        .map(|a| {
            a.div_ceil(u)
                .saturating_mul(units.checked_div(a).unwrap_or(0).div_ceil(u))
        })
        .max()
        .unwrap_or(0)
}

/// The "vision tower forward" line under transformers' runtime (no engine, or
/// `--engine transformers`), where the prompt holds an image (`mm-item-tokens` or
/// `mm-item-values` given, or read from the config): inference only, one image a
/// sequence. transformers 5.23's `generate` runs the tower before the prefill, over
/// the pixel values the caller keeps on the device; the text prefill's lines
/// `prefill` (whole model, one device) are already counted, and the line is what the
/// tower's phase needs beyond them, at least what the text forward holds of it.
pub(super) fn vision_tower(input: &EstimateInput, b: &mut Builder) -> Result<(), EstimateError> {
    // A serving engine encodes its images by its own rule (vLLM's encoder profile,
    // llama.cpp's projector buffer), not through transformers' tower.
    if input.train != TrainMode::None
        || input.runtime != crate::arch::CacheRuntime::Transformers
        || (input.mm_item_tokens.is_none() && input.mm_item_values.is_none())
    {
        return Ok(());
    }
    let Some(a) = input.arch else {
        return Ok(());
    };
    if a.encoder || a.encdec_params > 0 {
        return Ok(());
    }
    let Some(tower) = a.vision else {
        b.warnings.push(
            "the vision tower's forward over the prompt's image is not counted: it is derived for Gemma 3's and PaliGemma's SigLIP towers, Gemma 4's, Qwen2-VL's, Qwen2.5-VL's, Qwen3-VL's, Qwen3.5's and Llama 4's (transformers), not this model's: add it to --reserve-gib".into(),
        );
        return Ok(());
    };
    // Beam search: generate encodes each sequence's image once and repeats its outputs
    // for the beams (`_expand_multimodal_outputs`); the tower is counted over
    // sequences × beams images, an upper bound.
    let images = checked_product(&[input.sequences, input.beams], WHAT)?;
    let value = input.compute_dtype.bytes();
    let p = phase(
        &tower,
        images,
        (input.mm_item_tokens, input.mm_item_values),
        a.hidden,
        value,
        input.attention,
    )?;
    if p.patches == 0 {
        return Ok(());
    }
    let assumed = p.assumed.or((input.beams > 1).then_some(
        "beam search: the tower is counted over sequences × beams images, an upper bound (generate encodes each sequence's image once)",
    ));
    // The model's forward holds the prompt's placeholder mask while its language model
    // runs (`get_placeholder_mask`: `input_ids == image_token_id`, a byte a token of
    // every sequence; `unsqueeze(-1)` and `.to` the same device are views), a local of
    // `Gemma3Model.forward`, `PaliGemmaModel.forward`,
    // `Llama4ForConditionalGeneration.forward`, `Qwen2_5_VLModel.forward` and
    // `Qwen3VLModel.forward` (Qwen3-VL's `visual_pos_masks` a view of it;
    // `Qwen2VLModel.forward` the same), transformers 5.23. Gemma 3 and PaliGemma also
    // hold the image's bidirectional attention: `block_sequence_ids` (int64, a value a
    // token: `get_block_sequence_ids_for_mask`'s `torch.where`, PaliGemma's
    // `torch.where(token_type_ids == 0, 0, -1)`) and, under SDPA, the boolean masks it
    // makes (`training::image_prompt_masks`). The text prefill's lines are its
    // language model's over the whole prompt (`decoder_prefill`), and the deepstack
    // sums in Qwen3-VL's first layers (`_deepstack_process`: a clone of the hidden
    // states and two image-token-sized tensors) stay below their MLP's moment.
    // Gemma 4's placeholder masks are its merge's (`merge`); its forward holds the
    // image's token count (`n_image_tokens = image_mask.sum()`, an int64 scalar)
    // through the language model, and with `use_bidirectional_attention: "vision"` the
    // image's block ids (`get_block_sequence_ids_for_mask`: `torch.where(is_vision,
    // vision_group_ids, -1)`, int64 a token) and, under SDPA, the sliding mask they
    // overlay (`Gemma4Model.forward`, `create_masks_for_vision_model`,
    // modeling_gemma4.py, transformers 5.23).
    let tokens = input.context.unwrap_or(0);
    let mask = if tower.pool == 0 {
        t(&[images, tokens])?
    } else {
        0
    };
    let bidirectional = if tower.pool == 0 && tower.merge == 0 {
        sum(&[
            t(&[images, tokens, 8])?,
            crate::training::image_prompt_masks(
                &a,
                tokens,
                images,
                input.attention,
                input.sliding_window,
            ),
        ])?
    } else if tower.pool > 0 && a.vision_bidirectional {
        sum(&[
            r(8),
            t(&[images, tokens, 8])?,
            crate::training::image_prompt_masks(
                &a,
                tokens,
                images,
                input.attention,
                input.sliding_window,
            ),
        ])?
    } else if tower.pool > 0 {
        r(8)
    } else {
        0
    };
    let prompt = Prompt {
        rows: images,
        tokens: input.context.unwrap_or(0),
        hidden: a.hidden,
        per_layer: a
            .per_layer_input
            .map_or(0, |l| l.width.saturating_mul(a.layers)),
    };
    let merged = merge(&tower, &p, prompt, value)?;
    let tower_phase = p
        .pixels
        .checked_add(p.peak.max(merged))
        .ok_or_else(overflow)?;
    let held = sum(&[p.pixels, p.outputs, mask, bidirectional])?;
    let prefill = text_prefill(&b.lines)?;
    let (bytes, device) = top_up(tower_phase, held, prefill);
    b.assumptions.push(format!(
        "each of the {images} sequence(s) holds one image of {} patches, encoded by the vision tower before the prefill (generate keeps its outputs through the generation) (a text-only prompt does not run it: the line is then above the need)",
        p.patches
    ));
    b.line(
        LineKey::PrefillVisionTower,
        match assumed {
            None => "Vision tower forward beyond the text prefill",
            Some(_) => "Vision tower forward beyond the text prefill (assumed)",
        },
        bytes,
        device,
        if assumed.is_some() { Kind::Assumed } else { Kind::Computed },
        true,
        format!(
            "max(pixel values {} B + max(the tower's peak at {} moment {} B, the merge into the prompt's embeddings {merged} B: the embeddings, the image embeddings, the placeholder masks and masked_scatter's copy, with CUDA's int64 prefix sum and contiguous mask over the embeddings' shape as read from ATen's code) − the text prefill's lines {} B, the pixel values and image embeddings the text forward holds{} {held} B){}",
            p.pixels,
            p.moment,
            p.peak,
            prefill.0,
            match (mask, bidirectional) {
                (0, _) => String::new(),
                (_, 0) => format!(" with the placeholder mask ({mask} B)"),
                _ => format!(
                    " with the placeholder mask ({mask} B) and the image's bidirectional attention, its int64 block ids and SDPA's sequences × tokens² boolean masks beyond the text prompt's ({bidirectional} B)"
                ),
            },
            assumed.map(|w| format!(" (assumed: {w})")).unwrap_or_default()
        ),
        &[
            ("images", images.to_string()),
            ("patches-per-image", p.patches.to_string()),
            ("attention", input.attention.name().into()),
            ("tower-phase", tower_phase.to_string()),
            ("held", held.to_string()),
        ],
    );
    Ok(())
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    /// Gemma-3-4B's tower (`google/gemma-3-4b-it`'s `vision_config`).
    const GEMMA3_4B: VisionTower = VisionTower {
        hidden: 1152,
        layers: 27,
        heads: 16,
        intermediate: 4304,
        patch: 14,
        image: 896,
        ..VisionTower::BASE
    };

    /// Qwen2.5-VL-7B's tower (`Qwen/Qwen2.5-VL-7B-Instruct`'s `vision_config`).
    const QWEN2_5_VL_7B: VisionTower = VisionTower {
        hidden: 1280,
        layers: 32,
        heads: 16,
        intermediate: 3420,
        patch: 14,
        temporal: 2,
        merge: 2,
        window: 112,
        full_layers: 4,
        out: 3584,
        ..VisionTower::BASE
    };

    /// Qwen2-VL-7B's tower (`Qwen/Qwen2-VL-7B-Instruct`'s `vision_config`: embed_dim
    /// 1280, mlp_ratio 4, the merger to hidden_size 3584).
    const QWEN2_VL_7B: VisionTower = VisionTower {
        hidden: 1280,
        layers: 32,
        heads: 16,
        intermediate: 5120,
        patch: 14,
        temporal: 2,
        merge: 2,
        out: 3584,
        ..VisionTower::BASE
    };
    /// Its MLP twice as wide (`mlp_ratio` 8; not a published config), where the MLP's
    /// moment peaks.
    const QWEN2_VL_WIDE_MLP: VisionTower = VisionTower {
        intermediate: 10240,
        ..QWEN2_VL_7B
    };

    /// Qwen3-VL-8B's tower (`Qwen/Qwen3-VL-8B-Instruct`'s `vision_config`).
    const QWEN3_VL_8B: VisionTower = VisionTower {
        hidden: 1152,
        layers: 27,
        heads: 16,
        intermediate: 4304,
        patch: 16,
        temporal: 2,
        merge: 2,
        deepstack: 3,
        out: 4096,
        pos_taps: 4,
        ..VisionTower::BASE
    };

    /// Qwen3-VL-2B's tower and Qwen3-VL-30B-A3B's (`qwen3_vl_moe`: the same tower, a
    /// narrower merger).
    const QWEN3_VL_2B: VisionTower = VisionTower {
        hidden: 1024,
        layers: 24,
        intermediate: 4096,
        out: 2048,
        ..QWEN3_VL_8B
    };
    const QWEN3_VL_30B_A3B: VisionTower = VisionTower {
        out: 2048,
        ..QWEN3_VL_8B
    };

    /// PaliGemma 2's towers at 448 and 896 pixels and PaliGemma's at 224
    /// (`google/paligemma2-3b-pt-448`, `google/paligemma2-10b-pt-896`,
    /// `google/paligemma-3b-pt-224`: SigLIP So400m/14, `projection_dim`).
    const PALIGEMMA2_3B_448: VisionTower = VisionTower {
        image: 448,
        out: 2304,
        ..GEMMA3_4B
    };
    const PALIGEMMA2_10B_896: VisionTower = VisionTower {
        image: 896,
        out: 3584,
        ..GEMMA3_4B
    };
    const PALIGEMMA_3B_224: VisionTower = VisionTower {
        image: 224,
        out: 2048,
        ..GEMMA3_4B
    };

    /// Qwen3.5-9B's tower and Qwen3.5-35B-A3B's: Qwen3-VL-8B's without the deepstack
    /// mergers.
    const QWEN3_5_9B: VisionTower = VisionTower {
        deepstack: 0,
        ..QWEN3_VL_8B
    };
    const QWEN3_5_35B_A3B: VisionTower = VisionTower {
        out: 2048,
        ..QWEN3_5_9B
    };

    /// Llama-4-Scout's tower (its published `vision_config`) and Maverick's (the
    /// same).
    const LLAMA4_SCOUT: VisionTower = VisionTower {
        hidden: 1408,
        layers: 34,
        heads: 16,
        intermediate: 5632,
        patch: 14,
        merge: 2,
        image: 336,
        out: 4096,
        ..VisionTower::BASE
    };

    /// Gemma-4-31B's tower as `tests/cases/configs/gemma-4-31b.json` has it
    /// (Gemma4VisionConfig's defaults), and two variants of it that are not published
    /// configs (`tower_check.py`'s): an MLP as narrow as the tower, and a tower 1152
    /// wide of 16 heads of 72.
    const GEMMA4_31B: VisionTower = VisionTower {
        hidden: 768,
        layers: 16,
        heads: 12,
        intermediate: 3072,
        patch: 16,
        pool: 3,
        head_dim: 64,
        ..VisionTower::BASE
    };
    const GEMMA4_NARROW_MLP: VisionTower = VisionTower {
        intermediate: 768,
        ..GEMMA4_31B
    };
    const GEMMA4_WIDE: VisionTower = VisionTower {
        hidden: 1152,
        layers: 27,
        heads: 16,
        intermediate: 4304,
        head_dim: 72,
        ..GEMMA4_31B
    };
    const GEMMA4_E4B: VisionTower = VisionTower {
        clipped: true,
        ..GEMMA4_31B
    };
    const GEMMA4_GQA: VisionTower = VisionTower {
        kv_heads: 4,
        ..GEMMA4_31B
    };
    const GEMMA4_E4B_NARROW_MLP: VisionTower = VisionTower {
        intermediate: 768,
        ..GEMMA4_E4B
    };
    const GEMMA4_GQA_NARROW_MLP: VisionTower = VisionTower {
        intermediate: 768,
        ..GEMMA4_GQA
    };
    const GEMMA4_CLIPPED_GQA_NARROW_MLP: VisionTower = VisionTower {
        clipped: true,
        ..GEMMA4_GQA_NARROW_MLP
    };

    fn peak(tw: &VisionTower, images: u64, side: (u64, u64), attention: AttentionImpl) -> Phase {
        let patches = (side.0 / tw.patch) * (side.1 / tw.patch);
        let tokens = if tw.pool > 0 {
            // Gemma 4: an image that fills the processor's budget, set to its tokens.
            let tokens = patches / (tw.pool * tw.pool);
            return gemma4_over(tw, images, tokens, tokens, 2560, 2, attention).unwrap();
        } else if tw.merge == 0 {
            256
        } else if tw.image > 0 {
            // Llama 4: `side.0` is the tile side, `images` counts tiles of one image.
            return phase(tw, 1, (Some(images * 144 + 3), None), 5120, 2, attention).unwrap();
        } else {
            patches / (tw.merge * tw.merge)
        };
        phase(tw, images, (Some(tokens), None), 2560, 2, attention).unwrap()
    }

    /// The peaks `tests/cases/tower_check.py` traces of transformers 5.23's own
    /// towers built from these configs on the meta device (the trace's tracker, its
    /// sdpa as CUDA runs it), beyond the fp32 pixel values: equal to the byte. Qwen2.5-VL's
    /// images one merged unit (28 px) tall have the most windows of their patches.
    #[test]
    fn the_towers_peaks_are_the_traced_ones() {
        use AttentionImpl::{Eager, Sdpa};
        let cases = [
            (&GEMMA3_4B, 1, (896, 896), Sdpa, 108_265_472),
            (&GEMMA3_4B, 1, (896, 896), Eager, 2_740_977_664),
            (&GEMMA3_4B, 2, (896, 896), Sdpa, 216_530_944),
            (&GEMMA3_4B, 2, (896, 896), Eager, 5_481_955_328),
            (&QWEN2_5_VL_7B, 1, (448, 448), Sdpa, 47_647_744),
            (&QWEN2_5_VL_7B, 1, (28, 36_288), Sdpa, 241_213_952),
            (&QWEN2_5_VL_7B, 1, (28, 114_688), Sdpa, 762_352_640),
            (&QWEN2_5_VL_7B, 1, (448, 448), Eager, 189_205_504),
            (&QWEN2_5_VL_7B, 1, (28, 36_288), Eager, 4_408_320_512),
            (&QWEN2_VL_7B, 1, (448, 448), Sdpa, 47_645_184),
            (&QWEN2_VL_7B, 1, (1792, 1792), Sdpa, 762_315_264),
            (&QWEN2_VL_7B, 2, (896, 448), Sdpa, 190_579_200),
            (&QWEN2_VL_7B, 1, (448, 448), Eager, 189_202_944),
            (&QWEN2_VL_7B, 2, (896, 448), Eager, 762_053_120),
            (&QWEN2_VL_WIDE_MLP, 1, (448, 448), Sdpa, 73_859_584),
            (&QWEN3_VL_8B, 1, (512, 512), Sdpa, 54_919_680),
            (&QWEN3_VL_8B, 1, (1792, 1792), Sdpa, 672_760_320),
            (&QWEN3_VL_8B, 2, (1024, 512), Sdpa, 219_677_184),
            (&QWEN3_VL_8B, 1, (512, 512), Eager, 199_098_880),
            (&QWEN3_VL_2B, 1, (512, 512), Sdpa, 46_727_680),
            (&QWEN3_VL_30B_A3B, 1, (512, 512), Sdpa, 51_773_952),
            (&PALIGEMMA2_3B_448, 1, (448, 448), Sdpa, 27_066_368),
            (&PALIGEMMA2_3B_448, 1, (448, 448), Eager, 181_927_936),
            (&PALIGEMMA2_3B_448, 2, (448, 448), Sdpa, 54_132_736),
            (&PALIGEMMA2_10B_896, 1, (896, 896), Sdpa, 108_265_472),
            (&PALIGEMMA_3B_224, 1, (224, 224), Sdpa, 6_766_592),
            (&PALIGEMMA_3B_224, 1, (224, 224), Eager, 14_024_704),
            (&QWEN3_5_9B, 1, (512, 512), Sdpa, 48_628_224),
            (&QWEN3_5_9B, 1, (1792, 1792), Sdpa, 595_689_984),
            (&QWEN3_5_9B, 2, (1024, 512), Sdpa, 194_511_360),
            (&QWEN3_5_9B, 1, (512, 512), Eager, 192_807_424),
            (&QWEN3_5_35B_A3B, 1, (512, 512), Sdpa, 48_628_224),
            (&LLAMA4_SCOUT, 1, (336, 336), Sdpa, 25_999_360),
            (&LLAMA4_SCOUT, 5, (336, 336), Sdpa, 129_988_608),
            (&LLAMA4_SCOUT, 17, (336, 336), Sdpa, 441_956_352),
            (&LLAMA4_SCOUT, 1, (336, 336), Eager, 31_058_944),
            (&LLAMA4_SCOUT, 5, (336, 336), Eager, 155_284_480),
            (&GEMMA4_31B, 1, (672, 960), Sdpa, 62_581_760),
            (&GEMMA4_31B, 1, (672, 960), Eager, 785_922_560),
            (&GEMMA4_31B, 2, (672, 960), Sdpa, 125_163_520),
            (&GEMMA4_31B, 2, (672, 960), Eager, 1_571_845_120),
            (&GEMMA4_31B, 1, (336, 480), Sdpa, 15_646_720),
            (&GEMMA4_31B, 3, (336, 480), Sdpa, 46_937_088),
            (&GEMMA4_31B, 1, (1344, 1920), Sdpa, 250_327_040),
            (&GEMMA4_NARROW_MLP, 1, (672, 960), Sdpa, 39_600_128),
            (&GEMMA4_NARROW_MLP, 1, (672, 960), Eager, 785_922_560),
            (&GEMMA4_NARROW_MLP, 1, (1344, 1920), Sdpa, 182_176_768),
            (&GEMMA4_WIDE, 1, (672, 960), Sdpa, 89_032_704),
            (&GEMMA4_WIDE, 1, (672, 960), Eager, 1_051_631_616),
            (&GEMMA4_31B, 1, (1344, 1920), Eager, 12_288_266_240),
            (&GEMMA4_E4B, 1, (672, 960), Sdpa, 62_581_760),
            (&GEMMA4_E4B, 1, (672, 960), Eager, 785_922_560),
            (&GEMMA4_E4B, 1, (1344, 1920), Sdpa, 250_327_040),
            (&GEMMA4_E4B, 1, (1344, 1920), Eager, 12_288_266_240),
            (&GEMMA4_GQA, 1, (672, 960), Sdpa, 62_581_760),
            (&GEMMA4_GQA, 1, (672, 960), Eager, 788_503_040),
            (&GEMMA4_GQA, 1, (1344, 1920), Sdpa, 250_327_040),
            (&GEMMA4_GQA, 1, (1344, 1920), Eager, 12_298_588_160),
            (&GEMMA4_E4B_NARROW_MLP, 1, (672, 960), Sdpa, 39_600_128),
            (&GEMMA4_E4B_NARROW_MLP, 1, (672, 960), Eager, 785_922_560),
            (&GEMMA4_GQA_NARROW_MLP, 1, (672, 960), Sdpa, 31_858_688),
            (&GEMMA4_GQA_NARROW_MLP, 1, (672, 960), Eager, 788_503_040),
            (
                &GEMMA4_CLIPPED_GQA_NARROW_MLP,
                1,
                (672, 960),
                Sdpa,
                31_858_688,
            ),
            (
                &GEMMA4_CLIPPED_GQA_NARROW_MLP,
                1,
                (672, 960),
                Eager,
                788_503_040,
            ),
        ];
        for (tw, images, side, attention, traced) in cases {
            let p = peak(tw, images, side, attention);
            assert_eq!(
                p.peak, traced,
                "{side:?} × {images} {attention:?}: {}",
                p.moment
            );
            assert_eq!(p.assumed, None);
        }
    }

    /// Gemma 4's images are padded to the processor's patch budget: the default 280
    /// soft tokens (2 520 patches) for up to 280 tokens, else the smallest supported
    /// budget that holds them; an image that fills its budget is computed, one with
    /// padding patches under sdpa assumed (its attention mask there is not traced) and
    /// above it. An
    /// image by its pixel values (3 × height × width) is its 16-px patches ÷ 9.
    #[test]
    fn gemma4_pads_to_its_budget() {
        let sdpa = AttentionImpl::Sdpa;
        let at = |tokens| phase(&GEMMA4_31B, 1, (Some(tokens), None), 5376, 2, sdpa).unwrap();
        let full = at(280);
        assert_eq!(
            (full.patches, full.assumed, full.peak),
            (2520, None, 62_581_760)
        );
        let square = at(256);
        assert_eq!(square.patches, 2520);
        assert!(square.assumed.is_some());
        assert!(square.peak > full.peak);
        assert!(square.outputs < full.outputs);
        assert_eq!(at(70).patches, 2520);
        assert_eq!(at(0).patches, 0);
        // Under eager the padding's mask is traced (`tower_check.py`, a 768 × 768
        // image: 256 tokens in the 280 budget).
        for (images, traced) in [(1, 798_623_744), (2, 1_597_246_976)] {
            let eager = phase(
                &GEMMA4_31B,
                images,
                (Some(256), None),
                5376,
                2,
                AttentionImpl::Eager,
            )
            .unwrap();
            assert_eq!((eager.peak, eager.assumed), (traced, None));
        }
        assert_eq!(at(600).patches, 1120 * 9);
        assert_eq!(at(1120).assumed, None);
        let by_values = phase(&GEMMA4_31B, 1, (None, Some(3 * 672 * 960)), 5376, 2, sdpa).unwrap();
        assert_eq!(by_values, full);
    }

    /// The tower's phase and its merge into a prompt of `prompt` tokens a sequence
    /// (one image a sequence; `tokens`: the image's), bf16, sdpa.
    fn merged(tw: &VisionTower, tokens: u64, prompt: u64, hidden: u64) -> (Phase, u64) {
        let p = phase(tw, 1, (Some(tokens), None), hidden, 2, AttentionImpl::Sdpa).unwrap();
        let prompt = Prompt {
            rows: 1,
            tokens: prompt,
            hidden,
            per_layer: 0,
        };
        let m = merge(tw, &p, prompt, 2).unwrap();
        (p, m)
    }

    /// The merge of each family, beside the figure `tower_check.py --merge` traces
    /// of transformers 5.23's own forward up to and with its `masked_scatter` on the
    /// meta device (the tower's outputs held then included): equal to the byte once
    /// CUDA's scratch, which the meta kernel does not allocate, is taken off — the
    /// int64 prefix sum and the contiguous bool mask over the embeddings' shape
    /// (`masked_scatter__cuda`, `launch_masked_scatter_kernel`).
    #[test]
    fn the_merges_are_the_traced_ones_beside_cudas_scratch() {
        let cases = [
            (&GEMMA3_4B, 256, 32_768, 2560, 346_324_992),
            (&PALIGEMMA2_3B_448, 1024, 4096, 2304, 44_863_488),
            (&QWEN2_5_VL_7B, 256, 32_768, 3584, 476_119_040),
            (&QWEN3_VL_8B, 256, 32_768, 4096, 549_781_504),
            (&QWEN3_5_9B, 256, 32_768, 4096, 543_490_048),
            // Five 336-px tiles of one image: 720 tokens.
            (&LLAMA4_SCOUT, 720, 8192, 5120, 181_051_392),
            (&GEMMA4_31B, 280, 32_768, 5376, 711_488_000),
        ];
        for (tw, tokens, prompt, hidden, traced) in cases {
            let (_, m) = merged(tw, tokens, prompt, hidden);
            let n = prompt * hidden;
            assert_eq!(m - n * 8 - n, traced, "{tw:?}");
        }
    }

    /// One case a family, derived by hand from the code (bf16; E = the prompt's
    /// embeddings, s × h × 2 B; n = s × h values):
    /// - Gemma 3 (Gemma-3-4B's tower, 256 tokens, a 2 560-wide text model, s = 32 768):
    ///   the tower's outputs 4 096 × 1 152 × 2 + 256 × 2 560 × 2 = 10 747 904, E
    ///   167 772 160, the placeholder mask 32 768, `masked_scatter`'s clone
    ///   167 772 160, CUDA's prefix sum 8n = 671 088 640 and contiguous mask n =
    ///   83 886 080: 1 101 299 712;
    /// - PaliGemma 2 (448 px, 1 024 tokens, 2 304 wide, s = 4 096): outputs 1 024 ×
    ///   1 152 × 2 + 1 024 × 2 304 × 2 = 7 077 888, E and the clone 18 874 368 each,
    ///   the mask 4 096, `position_ids` 32 768, 8n 75 497 472, n 9 437 184:
    ///   129 798 144;
    /// - Qwen2.5-VL-7B (256 tokens, 3 584 wide, s = 32 768): outputs 1 024 × 1 280 ×
    ///   2 + 2 × 256 × 3 584 × 2 = 6 291 456, E and the clone 234 881 024 each, the
    ///   image's and the video's masks 2 × 32 768, 8n 939 524 096, n 117 440 512:
    ///   1 533 083 648;
    /// - Qwen3-VL-8B (256 tokens, 4 096 wide): outputs at the merge 1 024 × 1 152 ×
    ///   2, plus 2 × 256 × 4 096 × 2, plus 3 deepstack × 256 × 4 096 × 2: 12 845 056
    ///   (the deepstack copies come after), E and the clone 268 435 456 each, two masks
    ///   65 536, 8n 1 073 741 824, n 134 217 728: 1 757 741 056;
    /// - Llama-4-Scout (5 tiles, 720 tokens, 5 120 wide, s = 8 192): outputs 720 ×
    ///   4 096 × 2 + 720 × 5 120 × 2 = 13 271 040, E and the clone 83 886 080 each,
    ///   the mask 8 192, 8n 335 544 320, n 41 943 040: 558 538 752;
    /// - Gemma-4-31B (280 soft tokens, 5 376 wide, s = 32 768): outputs 280 × 768 ×
    ///   2 + 2 × 280 × 5 376 × 2 = 6 451 200, four masks 131 072, `llm_input_ids`
    ///   262 144, E 352 321 536, `n_image_tokens` 512, then `masked_scatter`'s
    ///   clone 352 321 536, 8n 1 409 286 144 and n 176 160 768 (above the boolean
    ///   index's n + 512 + 280 × 5 376 × 3 × 8 = 212 288 000): 2 296 934 912.
    #[test]
    fn the_merge_is_derived_from_the_code() {
        let cases = [
            (&GEMMA3_4B, 256, 32_768, 2560, 1_101_299_712),
            (&PALIGEMMA2_3B_448, 1024, 4096, 2304, 129_798_144),
            (&QWEN2_5_VL_7B, 256, 32_768, 3584, 1_533_083_648),
            (&QWEN3_VL_8B, 256, 32_768, 4096, 1_757_741_056),
            (&LLAMA4_SCOUT, 720, 8192, 5120, 558_538_752),
            (&GEMMA4_31B, 280, 32_768, 5376, 2_296_934_912),
        ];
        for (tw, tokens, prompt, hidden, derived) in cases {
            assert_eq!(merged(tw, tokens, prompt, hidden).1, derived, "{tw:?}");
        }
        // Gemma 4's boolean index: a prompt of the image's tokens alone selects all
        // of it, and the index's int64 rows (24 B a value) pass the scatter's 11.
        let (p, m) = merged(&GEMMA4_31B, 280, 280, 5376);
        let n = 280 * 5376;
        let held = p.at_merge + 4 * 512 + r(280 * 8) + n * 2 + 512;
        assert_eq!(m - held, bool_index(1, 280, 5376, 2, n).unwrap());
        assert!(m - held > scatter(1, 280, 5376, 2).unwrap());
    }

    /// A short prompt leaves the tower's own peak the phase's; a long one makes the
    /// merge its peak, and the line covers it.
    #[test]
    fn a_long_prompt_makes_the_merge_the_peak() {
        let (p, m) = merged(&GEMMA3_4B, 256, 300, 5376);
        assert!(m < p.peak);
        let (p, m) = merged(&GEMMA3_4B, 256, 32_768, 5376);
        assert!(m > p.peak, "{m} {}", p.peak);
        let input = qwen2_5_vl_7b(&[("mm-item-tokens", "1024"), ("context", "32768")]);
        let e = estimate(&input).unwrap();
        let l = e
            .lines
            .iter()
            .find(|l| l.key == LineKey::PrefillVisionTower)
            .unwrap();
        let (p, m) = merged(&QWEN2_5_VL_7B, 1024, 32_768, 3584);
        assert!(m > p.peak);
        assert_eq!(l.inputs["tower-phase"], (p.pixels + m).to_string());
        assert!(l.formula.contains("the merge into the prompt's embeddings"));
    }

    /// What a prompt with an image holds through the language model beyond a text
    /// prompt of as many tokens, beside the figures `tower_check.py --prefill` traces
    /// of the whole models' first forward (transformers 5.23, bf16): the line's held
    /// part less the pixel values and the tower's outputs is the placeholder mask (a
    /// byte a token), and for Gemma 3 and PaliGemma the image's bidirectional
    /// attention, its int64 block ids and, under SDPA, a boolean sequences × tokens²
    /// mask for each of the masks the model builds less the text prompt's (Gemma-3-4B:
    /// two, beyond the text prompt's sequences × tokens² mask from its 1 024-token window
    /// on; PaliGemma's Gemma:
    /// one; PaliGemma 2's Gemma 2 runs eager, whose masks are the text prompt's size).
    /// Llama 4's traced figure also holds the projected image embeddings
    /// (`projected_vision_flat`, 720 × 5 120 × 2 B), which the tower's outputs count.
    #[test]
    fn the_image_prompts_masks_are_the_traced_ones() {
        let paligemma = |text: &str, side: u64, hidden: u64| {
            serde_json::json!({
                "model_type": "paligemma", "projection_dim": hidden, "hidden_size": hidden,
                "image_token_index": 257152,
                "text_config": serde_json::from_str::<serde_json::Value>(text).unwrap(),
                "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152,
                    "intermediate_size": 4304, "num_hidden_layers": 27,
                    "num_attention_heads": 16, "patch_size": 14, "image_size": side,
                    "projection_dim": hidden, "vision_use_head": false}
            })
            .to_string()
        };
        // google/paligemma-3b-pt-224's and google/paligemma2-3b-pt-448's text models.
        let pg1 = paligemma(
            r#"{"model_type": "gemma", "hidden_size": 2048, "num_hidden_layers": 18,
                "intermediate_size": 16384, "num_attention_heads": 8,
                "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 257216}"#,
            224,
            2048,
        );
        let pg2 = paligemma(
            r#"{"model_type": "gemma2", "hidden_size": 2304, "num_hidden_layers": 26,
                "intermediate_size": 9216, "num_attention_heads": 8,
                "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 257216}"#,
            448,
            2304,
        );
        let gemma3 = include_str!("../../tests/cases/configs/gemma-3-4b.json");
        let scout = include_str!("../../tests/cases/configs/llama-4-scout.json");
        let projected = 720 * 5120 * 2;
        let gemma4 = include_str!("../../tests/cases/configs/gemma-4-31b.json");
        // Gemma 4's `torch.cat` of the image's embeddings, which the tower's outputs
        // count (280 soft tokens × 5 376 × 2 B).
        let features = 280 * 5376 * 2;
        let cases: [(&str, &str, &str, &str, &str, u64); 13] = [
            (gemma3, "sdpa", "1", "512", "", 528_896),
            // The text prompt's own sliding mask is one per sequence (`generate`'s
            // attention mask, which both traces pass): 12 619 776 B before the text
            // prompt had it.
            (gemma3, "sdpa", "2", "2048", "", 8_425_472),
            (gemma3, "eager", "1", "2048", "", 18_432),
            (gemma3, "eager", "2", "1024", "", 18_432),
            (&pg1, "sdpa", "1", "2048", "", 4_212_736),
            (&pg1, "eager", "2", "1024", "", 18_432),
            (&pg2, "eager", "1", "2048", "", 18_432),
            (scout, "sdpa", "1", "2048", "720", 7_374_848 - projected),
            (scout, "eager", "1", "1024", "720", 7_373_824 - projected),
            (scout, "sdpa", "1", "9000", "720", 7_382_016 - projected),
            // The block ids (8 B a token) and the token count (512 B); under SDPA a
            // prompt within the window builds the sliding mask only with the image
            // (512² B).
            (gemma4, "sdpa", "1", "2048", "280", 3_027_456 - features),
            (gemma4, "sdpa", "1", "512", "280", 3_277_312 - features),
            (gemma4, "eager", "1", "2048", "280", 3_027_456 - features),
        ];
        for (config, attention, sequences, context, tokens, traced) in cases {
            let c = crate::import::config::parse_config(config).unwrap();
            let mut pairs: Vec<(String, String)> = c
                .pairs()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            for (k, v) in [
                ("attention", attention),
                ("sequences", sequences),
                ("context", context),
                ("mm-item-tokens", tokens),
            ] {
                if !v.is_empty() {
                    pairs.push((k.into(), v.into()));
                }
            }
            let (input, errors) =
                crate::params::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            assert!(errors.is_empty(), "{errors:?}");
            let a = input.arch.unwrap();
            let p = phase(
                &a.vision.unwrap(),
                input.sequences,
                (input.mm_item_tokens, input.mm_item_values),
                a.hidden,
                2,
                input.attention,
            )
            .unwrap();
            let e = estimate(&input).unwrap();
            let l = e
                .lines
                .iter()
                .find(|l| l.key == LineKey::PrefillVisionTower)
                .unwrap();
            let held: u64 = l.inputs["held"].parse().unwrap();
            assert_eq!(
                held - p.pixels - p.outputs,
                traced,
                "{} {attention} {sequences} × {context}",
                c.arch.vision.map_or(0, |v| v.image)
            );
        }
    }

    /// A square image of as many patches has fewer window boundaries than the grid
    /// counted (1792²: 256 windows against 1 024, 1 536 B against 4 608 in the
    /// allocator's blocks); its traced peak is below the figure by that alone.
    #[test]
    fn a_square_images_windows_are_fewer() {
        let p = peak(&QWEN2_5_VL_7B, 1, (1792, 1792), AttentionImpl::Sdpa);
        assert_eq!(p.peak - 762_349_568, 4_608 - 1_536);
        let p = peak(&QWEN2_5_VL_7B, 1, (1008, 1008), AttentionImpl::Sdpa);
        assert_eq!(p.peak - 241_212_928, 1_536 - 512);
    }

    fn qwen2_5_vl_7b(extra: &[(&str, &str)]) -> EstimateInput {
        let pairs = [
            ("layers", "28"),
            ("hidden", "3584"),
            ("heads", "28"),
            ("kv-heads", "4"),
            ("intermediate", "18944"),
            ("vocab", "152064"),
            ("qkv-bias", "true"),
            ("tower-params", "676550144"),
            ("tower-hidden", "1280"),
            ("tower-layers", "32"),
            ("tower-heads", "16"),
            ("tower-intermediate", "3420"),
            ("tower-patch", "14"),
            ("tower-temporal", "2"),
            ("tower-channels", "3"),
            ("tower-merge", "2"),
            ("tower-window", "112"),
            ("tower-full-layers", "4"),
            ("tower-out", "3584"),
            ("context", "4608"),
        ];
        let (input, errors) = crate::params::from_pairs(pairs.iter().chain(extra).copied());
        assert!(errors.is_empty(), "{errors:?}");
        input
    }

    fn line(input: &EstimateInput) -> Option<(u64, Kind)> {
        let e = estimate(input).unwrap();
        e.lines
            .iter()
            .find(|l| l.key == LineKey::PrefillVisionTower)
            .map(|l| (l.bytes, l.kind))
    }

    /// The prefill's peak is the larger phase: the lines' sum is never below the
    /// tower's phase (pixel values and the larger of the tower's peak and the
    /// merge into the prompt's embeddings) nor below the text prefill with what it
    /// holds of the tower (pixel values, image embeddings) and the prompt's
    /// placeholder mask (a byte a token); without an image there is no line.
    #[test]
    fn the_prefill_is_the_larger_phase() {
        assert_eq!(line(&qwen2_5_vl_7b(&[])), None);
        for tokens in ["64", "1024", "4096"] {
            let input = qwen2_5_vl_7b(&[("mm-item-tokens", tokens)]);
            let e = estimate(&input).unwrap();
            let prefill: u64 = e
                .lines
                .iter()
                .filter(|l| {
                    l.key.as_str().starts_with("prefill.") && l.key != LineKey::PrefillVisionTower
                })
                .map(|l| l.bytes)
                .sum();
            let (bytes, kind) = line(&input).unwrap();
            let tower = phase(
                &QWEN2_5_VL_7B,
                1,
                (Some(tokens.parse().unwrap()), None),
                3584,
                2,
                AttentionImpl::Sdpa,
            )
            .unwrap();
            let merged = merge(
                &QWEN2_5_VL_7B,
                &tower,
                Prompt {
                    rows: 1,
                    tokens: 4608,
                    hidden: 3584,
                    per_layer: 0,
                },
                2,
            )
            .unwrap();
            let mask = round_size(input.context.unwrap());
            let held = tower.pixels + tower.outputs + mask;
            assert!(prefill + bytes >= tower.pixels + tower.peak, "{tokens}");
            assert!(prefill + bytes >= tower.pixels + merged, "{tokens}");
            assert!(bytes >= held, "{tokens}");
            assert_eq!(
                prefill + bytes,
                (tower.pixels + tower.peak.max(merged)).max(prefill + held)
            );
            assert_eq!(kind, Kind::Computed);
        }
    }

    /// One image given by its pixel values (channels × height × width) is the image
    /// of as many patches given by its tokens.
    #[test]
    fn an_image_by_its_values_is_its_patches() {
        let by_tokens = line(&qwen2_5_vl_7b(&[("mm-item-tokens", "4096")]));
        let by_values = line(&qwen2_5_vl_7b(&[("mm-item-values", "9633792")]));
        assert!(by_tokens.is_some());
        assert_eq!(by_tokens, by_values);
        // Under a serving engine's runtime the engine's own rule stands.
        let mut served = qwen2_5_vl_7b(&[("mm-item-tokens", "4096")]);
        served.runtime = crate::arch::CacheRuntime::Serving;
        assert_eq!(line(&served), None);
    }

    /// A trace that replaces the text prefill's lines moves the tower's line with
    /// them: the sum stays the larger phase.
    #[test]
    fn a_traced_prefill_retops_the_towers_line() {
        let input = qwen2_5_vl_7b(&[("mm-item-tokens", "4096")]);
        let e = estimate(&input).unwrap();
        let (before, _) = line(&input).unwrap();
        let mlp = e
            .lines
            .iter()
            .find(|l| l.key == LineKey::PrefillMlp)
            .unwrap()
            .bytes;
        let traced = e
            .with_traced(&[TracedLine {
                key: LineKey::PrefillMlp,
                label: "traced".into(),
                bytes: mlp / 2,
                formula: "a trace".into(),
            }])
            .unwrap();
        let after = traced
            .lines
            .iter()
            .find(|l| l.key == LineKey::PrefillVisionTower)
            .unwrap()
            .bytes;
        assert_eq!(after, before + (mlp - mlp / 2));
    }

    /// A tower whose forward is not derived says so where an image is given.
    #[test]
    fn an_underived_tower_is_warned_about() {
        let pairs = [
            ("layers", "2"),
            ("hidden", "64"),
            ("heads", "4"),
            ("intermediate", "128"),
            ("vocab", "100"),
            ("tower-params", "1000"),
            ("context", "16"),
            ("mm-item-tokens", "16"),
        ];
        let (input, errors) = crate::params::from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        let e = estimate(&input).unwrap();
        assert!(e.lines.iter().all(|l| l.key != LineKey::PrefillVisionTower));
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("vision tower's forward")),
            "{:?}",
            e.warnings
        );
    }
}
