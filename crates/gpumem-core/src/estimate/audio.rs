//! The audio tower's forward over the prompt's clips under transformers' runtime
//! (inference, no grad): its peak while it encodes them, derived moment by moment from
//! transformers 5.23's own encoder code, and what outlives it into the text forward.
//! As for the vision towers (`estimate::tower`), the prefill's peak is the larger of the
//! two phases; the line adds to the text prefill's lines what the tower's phase needs
//! beyond them, at least what the text forward holds of the tower.
//!
//! Derived for Qwen2-Audio's Whisper-style encoder and Gemma 4's conformer
//! ([`AudioTower`], read from the config's `audio_config`). Unlike the vision towers,
//! `generate` does not encode the clips beforehand
//! (`_prepare_multimodal_encoder_kwargs_for_generation` runs only `get_image_features`
//! and `get_video_features`): `Qwen2AudioModel.forward` and `Gemma4Model.forward` run
//! the encoder inside the first forward, before the language model, and their locals
//! hold the encoder's output and its masks through that forward only. The phase ends
//! with the merge of the clip's embeddings into the prompt's (`masked_scatter` over
//! the whole prompt, with CUDA's scratch over the embeddings' shape read from ATen's
//! code: `tower::scatter`), the phase's peak for a long prompt. Another audio
//! tower's forward is not counted, and a warning says so where a clip is given.

use super::tower::{assumed, bool_index, highest, r, scatter, sum, t, text_prefill, top_up};
use super::*;
use crate::arch::AudioTower;

const WHAT: &str = "audio tower forward";

/// Feature frames a second: `WhisperFeatureExtractor`'s hop of 160 samples at 16 kHz
/// (transformers 5.23 `models/whisper/feature_extraction_whisper.py`).
const FRAMES_PER_SECOND: u64 = 100;

/// The tower's phase, beyond the weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Phase {
    /// The input features and their attention mask as the processor hands them over
    /// (fp32, and int32 or bool), held by the caller for the whole generation.
    pub features: u64,
    /// The prompt's token embeddings: `Qwen2AudioModel.forward` looks them up
    /// (`get_input_embeddings()(input_ids)`, sequences × prompt × text width) before
    /// it runs the encoder, and holds them through it (`Gemma4Model.forward`: with its
    /// token masks, `llm_input_ids` and per-layer inputs).
    pub embeds: u64,
    /// The phase's peak beyond them: the masks the model's forward builds, the
    /// features' cast and the moment's activations.
    pub peak: u64,
    /// Which moment the peak is.
    pub moment: &'static str,
    /// What the model's forward still holds while the language model runs.
    pub outputs: u64,
    /// The merge of the clip's embeddings into the prompt's, beyond the features and
    /// the embeddings: what the forward holds then and the merge's own allocations
    /// (`tower::scatter`, Gemma 4's `tower::bool_index`).
    pub merge: u64,
    /// Prompt tokens of one clip.
    pub tokens: u64,
    /// Why the figure is assumed rather than computed, if it is.
    pub assumed: Option<&'static str>,
}

/// Qwen2-Audio's encoder (transformers 5.23 `models/qwen2_audio/modeling_qwen2_audio.py`)
/// over `clips` clips of `seconds` each, in values `v` bytes wide, with the text model
/// `text_hidden` wide and `prompt` prompt tokens a sequence.
///
/// The processor (`processing_qwen2_audio.py` `Qwen2AudioProcessor._process_audio`)
/// calls `WhisperFeatureExtractor` with `padding="max_length"` (and its default
/// truncation): every clip is F = 2 × `positions` frames of `mels` mel bins in fp32
/// (30 s: 3 000 × 128), a longer clip cut there, with an int32 attention mask over its
/// L = min(100 · seconds, F) real frames; `Qwen2AudioEncoder.forward` refuses any other
/// length. So the tower's work is the same for every clip of at most 30 s; only its
/// mask and its prompt tokens (((L − 1) ÷ 2 + 1 − 2) ÷ 2 + 1: 750 for 30 s) follow
/// the length. With T = `positions` frames after the second convolution, x = clips × T
/// × d values of the tower's width d, in v bytes:
/// - `Qwen2AudioModel.forward` first builds, and holds until it returns, the feature
///   lengths and output lengths (`_get_feat_extract_output_lengths`: int64, one a
///   clip), `seq_range` (an int64 arange of T), `padding_mask` (bool, clips × T), the
///   2-D mask (int64), `dummy_embeds` (clips × T × 1 in v) and
///   `create_bidirectional_mask`'s mask: none for a clip that fills the 30 s (sdpa's
///   and eager's skip when nothing is padded), otherwise clips × T × T, bool under sdpa
///   and in v under eager (`eager_mask`);
/// - `Qwen2AudioEncoder.forward` keeps the features cast to v (an alias in fp32) and
///   the second convolution's GELU (`inputs_embeds`, a permuted view) through its
///   layers, and the layer's input (`hidden_states`) beside the layer's own;
/// - the MLP's moment (`Qwen2AudioEncoderLayer.forward`): the residual sum,
///   `final_layer_norm`'s output, `fc1`'s output and GELU's (clips × T ×
///   `encoder_ffn_dim` in v); under eager the attention's probabilities outlive it
///   there (`hidden_states, _ = self.self_attn(…)`);
/// - the attention's (`Qwen2AudioAttention.forward`): `self_attn_layer_norm`'s output,
///   q, k and v made contiguous (`_shape`) and under sdpa the fused kernel's output
///   and its fp32 log-sum-exp (clips × heads × T); under eager
///   (`eager_attention_forward`, softmax in v: no fp32 copy) the scaled scores
///   (`matmul(q, kᵀ) * scaling`, the mask added to them) beside softmax's output,
///   clips × heads × T² in v each;
/// - the convolutions' (the cast features, `conv1`'s output and its GELU, clips × d ×
///   F) and the projector's (`layer_norm`'s output and `multi_modal_projector`'s, clips ×
///   T ÷ 2 rows after `avg_pooler`) stay below these;
/// - the merge's (the non-legacy path, after the tower): what the text forward will
///   hold (`outputs`) beside `inputs_embeds.masked_scatter(special_audio_mask,
///   audio_features)`'s clone of the embeddings and CUDA's int64 prefix sum and
///   contiguous mask over their shape (`tower::scatter`), counted apart (`merge`).
pub(super) fn qwen2_audio(
    tw: &AudioTower,
    clips: u64,
    seconds: u64,
    (text_hidden, prompt): (u64, u64),
    v: u64,
    attention: AttentionImpl,
) -> Result<Phase, EstimateError> {
    let positions = tw.positions;
    let frames = checked_product(&[positions, 2], WHAT)?;
    let real = seconds.saturating_mul(FRAMES_PER_SECOND).min(frames);
    // `_get_feat_extract_output_lengths`, as the processor counts the clip's tokens:
    // (L − 1) ÷ 2 + 1 after the convolutions, (that − 2) ÷ 2 + 1 after the pool.
    let after_conv = real.checked_sub(1).map_or(0, |n| (n / 2).saturating_add(1));
    let tokens = after_conv
        .checked_sub(2)
        .map_or(0, |n| (n / 2).saturating_add(1));
    let (d, heads) = (tw.hidden, tw.heads);
    let eager = attention == AttentionImpl::Eager;
    let mask = if after_conv >= positions {
        0
    } else {
        t(&[clips, positions, positions, if eager { v } else { 1 }])?
    };
    let index = sum(&[
        checked_product(&[r(checked_product(&[clips, 8], WHAT)?), 2], WHAT)?,
        t(&[positions, 8])?,
        t(&[clips, positions])?,
        t(&[clips, positions, 8])?,
        t(&[clips, positions, v])?,
        mask,
    ])?;
    let cast = if v == 4 {
        0
    } else {
        t(&[clips, tw.mels, frames, v])?
    };
    let x = t(&[clips, positions, d, v])?;
    // Through the layers: the index tensors, the cast features, `inputs_embeds`.
    let held = sum(&[index, cast, x])?;
    let scores = t(&[clips, heads, positions, positions, v])?;
    let mlp = sum(&[
        held,
        checked_product(&[x, 3], WHAT)?,
        checked_product(&[t(&[clips, positions, tw.intermediate, v])?, 2], WHAT)?,
        if eager { scores } else { 0 },
    ])?;
    let attn = if eager {
        sum(&[
            held,
            checked_product(&[x, 5], WHAT)?,
            checked_product(&[scores, 2], WHAT)?,
        ])?
    } else {
        sum(&[
            held,
            checked_product(&[x, 6], WHAT)?,
            t(&[clips, heads, positions, 4])?,
        ])?
    };
    let conv = sum(&[
        index,
        cast,
        checked_product(&[t(&[clips, d, frames, v])?, 2], WHAT)?,
    ])?;
    let pooled = positions / 2;
    let last = t(&[clips, pooled, d, v])?;
    let projected = t(&[clips, pooled, text_hidden, v])?;
    let projector = sum(&[index, last, projected])?;
    let (moment, peak) = highest(&[
        ("the MLP's", mlp),
        ("the attention's", attn),
        ("the convolutions'", conv),
        ("the projector's", projector),
    ]);
    // `Qwen2AudioModel.forward`'s locals through the language model: the index
    // tensors and masks above, `audio_outputs.last_hidden_state`,
    // `audio_features_mask` (bool, clips × T ÷ 2), the projected features of the
    // clips' tokens (`audio_features[audio_features_mask]`: the projector's whole
    // output is let go), and the prompt's `audio_tokens` and `special_audio_mask`
    // (bool, one a token).
    let outputs = sum(&[
        index,
        last,
        t(&[clips, pooled])?,
        t(&[clips, tokens, text_hidden, v])?,
        checked_product(&[t(&[clips, prompt])?, 2], WHAT)?,
    ])?;
    Ok(Phase {
        features: sum(&[t(&[clips, tw.mels, frames, 4])?, t(&[clips, frames, 4])?])?,
        embeds: t(&[clips, prompt, text_hidden, v])?,
        peak,
        moment,
        outputs,
        // All of them are held at `inputs_embeds.masked_scatter(special_audio_mask,
        // audio_features)` (the features already in v: `.to` is an alias), beside
        // its copy and CUDA's scratch.
        merge: sum(&[outputs, scatter(clips, prompt.max(tokens), text_hidden, v)?])?,
        tokens,
        assumed: assumed(attention, v),
    })
}

/// `Gemma4AudioFeatureExtractor`'s defaults (transformers 5.23
/// `models/gemma4/feature_extraction_gemma4.py`): 16 kHz, a clip cut at `max_length`
/// 480 000 samples (30 s) and padded to a multiple of 128 samples (`pad_to_multiple_of`),
/// 160 zeros before it (`frame_length // 2`, semicausal), windows of `frame_length` +
/// 1 = 321 samples a hop of 160 (`_extract_spectrogram`).
const G4_RATE: u64 = 16_000;
const G4_MAX_SAMPLES: u64 = 480_000;
const G4_MULTIPLE: u64 = 128;
const G4_PAD_LEFT: u64 = 160;
const G4_WINDOW: u64 = 321;
const G4_HOP: u64 = 160;

/// The text model's side of Gemma 4's first forward: its width, the prompt's
/// tokens a sequence, and its per-layer inputs (layers × width; 0: none).
#[derive(Debug, Clone, Copy)]
pub(super) struct Gemma4Text {
    pub hidden: u64,
    pub prompt: u64,
    pub per_layer: u64,
}

/// `Gemma4RMSNorm.forward` (fp32 inside) over a tensor whose fp32 copy is `x32`
/// bytes, `out` bytes in the model's dtype, `s` bytes of its fp32 [.., 1] statistics:
/// its peak beyond its input. `_norm`'s `hidden_states.float()` (none in fp32), its
/// mean square plus eps and `torch.pow(…, -0.5)` beside the product; with a scale,
/// `weight.float()` (`w32`) and the scaled product beside the first; `type_as`'s copy
/// beside the last (none in fp32).
fn rms(x32: u64, out: u64, s: u64, w32: Option<u64>, cast: bool) -> Result<u64, EstimateError> {
    let a = if cast { x32 } else { 0 };
    let stats = sum(&[a, s, s, x32])?;
    let scaled = match w32 {
        Some(w) => sum(&[x32, w, x32])?,
        None => 0,
    };
    let typed = sum(&[x32, if cast { out } else { 0 }])?;
    Ok(stats.max(scaled).max(typed))
}

/// Gemma 4's audio tower (transformers 5.23 `models/gemma4/modeling_gemma4.py`
/// `Gemma4AudioModel`, then `Gemma4MultimodalEmbedder`) over `clips` clips of
/// `seconds` each, values `v` bytes wide, as `Gemma4Model.forward` runs it inside the
/// first forward (`generate` encodes only images and videos beforehand).
///
/// The processor (`processing_gemma4.py`, `Gemma4AudioFeatureExtractor` with its
/// defaults): N = min(16 000 · seconds, 480 000) samples, padded to a multiple of
/// 128, give F = (N + 160 − 321) ÷ 160 + 1 frames of 128 mel bins in fp32 and a bool
/// mask (100 · seconds − 1 for whole seconds), not padded to 30 s; the clip's tokens
/// are the mask after the two stride-2 convolutions, T = ⌈⌈F ÷ 2⌉ ÷ 2⌉, at most
/// `audio_seq_length` (750: 30 s). The tower's own attention (it refuses sdpa) runs
/// whatever the text model's implementation. With H₁ = ⌈F ÷ 2⌉, W₁ = ⌈128 ÷ 2⌉, W₂ =
/// ⌈W₁ ÷ 2⌉, h the tower's width, c₀, c₁ the subsampling channels, C the chunk, P =
/// left − 1 and R the contexts, ctx = C + P + R, nb = ⌈T ÷ C⌉ blocks of C (Tp = nb ·
/// C), n = ctx ÷ 2 + 1 relative positions, every allocation rounded as the caching
/// allocator rounds it, the moments (each beside what is held then):
/// - the subsampling (`Gemma4AudioSubSampleConvProjection(Layer).forward`): the
///   features times their mask (fp32), their cast and `conv`'s output (c₀ × H₁ ×
///   W₁); the LayerNorm's output (with its fp32 mean and rstd), the permuted copy
///   (`contiguous`) and ReLU's beside `conv`'s output; the second layer alike over
///   the first's output (c₁ × T × W₂), then the permuted copy and `input_proj_linear`;
/// - `Gemma4AudioRelPositionalEncoding` (n × h in v, sin and cos of half each) and
///   `create_bidirectional_mask` (eager: `sdpa_mask`'s non-vmap expansion of
///   `and_masks(bidirectional, sliding window, padding)`: the int64 distance
///   `q_idx − kv_idx` and its negation, T × T each, and bool T × T comparisons; then
///   clips × T × T bool and `eager_mask`'s `torch.where` in v), blocked by
///   `_convert_4d_mask_to_blocked_5d` (two pads, the int64 block indices, `gather`:
///   clips × nb × C × ctx in v, held through the layers with the positions);
/// - each `Gemma4AudioLayer`: the feed-forward halves (`Gemma4AudioFeedForward`: the
///   clamp, `pre_layer_norm`, `ffw_layer_1`'s clamped input, output and clamped
///   output 4h wide, SiLU, `ffw_layer_2`'s, the clamp and `post_layer_norm`), the
///   attention (`Gemma4AudioAttention`, fp32: q, k, v cast, scaled, blocked
///   (`_convert_to_block`'s pad) and cut into overlapping contexts
///   (`_extract_block_context`'s pad and copy), `relative_k_proj` cast, `matrix_ac`
///   with matmul's copies of both operands, `matrix_bd` and `_rel_shift`'s pad, the
///   logits' add, soft cap (÷, tanh, ×), `masked_fill` with its bool mask, softmax,
///   the product with the values' copy, its permuted copy, the cut and the cast back,
///   `post`; the probabilities outlive it through the layer (`hidden_states, _ =
///   self.self_attn(…)`)), the light convolution (`Gemma4AudioLightConv1d`:
///   `linear_start` 2h wide, GLU, the causal pad and the depthwise conv, the clamp,
///   `conv_norm`, SiLU, `linear_end`) and the norms; the layer's input, the first
///   half's output (the residual) and the layer's own beside them;
/// - `output_proj` (T × `output_proj_dims`), `embed_audio` (its RMSNorm without scale,
///   fp32, and `embedding_projection` to the text width) and `Gemma4Model.forward`'s
///   `audio_features[audio_mask_from_encoder]` (CUDA's boolean index: `nonzero`'s
///   int64 rows beside the gathered ones);
/// - the merge's, counted apart (`merge`): `inputs_embeds[audio_mask].numel()` over
///   the mask expanded to the embeddings' shape (`tower::bool_index`) and
///   `masked_scatter` (`tower::scatter`).
///
/// Not counted: cuDNN's convolution workspace and `nonzero`'s and cub's scan
/// scratch, as for the other towers.
pub(super) fn gemma4_audio(
    tw: &AudioTower,
    clips: u64,
    seconds: u64,
    text: Gemma4Text,
    v: u64,
) -> Result<Phase, EstimateError> {
    let b = clips;
    let samples = seconds.saturating_mul(G4_RATE).min(G4_MAX_SAMPLES);
    let samples = samples.div_ceil(G4_MULTIPLE).saturating_mul(G4_MULTIPLE);
    // At most 480 128 samples: no overflow.
    let frames = samples
        .saturating_add(G4_PAD_LEFT)
        .checked_sub(G4_WINDOW)
        .map_or(0, |n| (n / G4_HOP).saturating_add(1));
    let half = |n: u64| n.div_ceil(2);
    let (h1, w1) = (half(frames), half(tw.mels));
    let (t_, w2) = (half(h1), half(w1));
    let tokens = t_.min(tw.positions);
    let h = tw.hidden;
    let cast = v != 4;
    let (c0, c1) = (tw.conv_channels, tw.conv_out);
    // The subsampling.
    let p0 = t(&[b, frames, tw.mels, 4])?;
    let c0_cast = if cast {
        t(&[b, frames, tw.mels, v])?
    } else {
        0
    };
    let o0 = t(&[b, c0, h1, w1, v])?;
    let st0 = t(&[b, h1, w1, 4])?;
    let o1 = t(&[b, c1, t_, w2, v])?;
    let st1 = t(&[b, t_, w2, 4])?;
    let xv = t(&[b, t_, h, v])?;
    let x4 = t(&[b, t_, h, 4])?;
    let s4 = t(&[b, t_, 4])?;
    let tri = |x: u64| checked_product(&[x, 3], WHAT);
    let two = |x: u64| checked_product(&[x, 2], WHAT);
    let subsampling = [
        sum(&[p0, c0_cast, o0])?,
        sum(&[two(o0)?, two(st0)?])?,
        tri(o0)?,
        sum(&[two(o0)?, o1])?,
        sum(&[o0, two(o1)?, two(st1)?])?,
        sum(&[o0, tri(o1)?])?,
        two(o1)?,
        sum(&[o1, xv])?,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    // The positions and the mask.
    let (chunk, past, right) = (
        tw.chunk,
        tw.context_left.saturating_sub(1),
        tw.context_right,
    );
    let ctx = sum(&[chunk, past, right])?;
    let n = (ctx / 2).saturating_add(1);
    let halfh = h / 2;
    let pos = t(&[n, halfh, 2, v])?;
    let positions = sum(&[xv, r(n.saturating_mul(8)), tri(t(&[n, halfh, v])?)?, pos])?;
    let aranges = sum(&[t(&[b, 8])?, r(8), two(t(&[t_, 8])?)?])?;
    let tt = t(&[t_, t_])?;
    let tt8 = t(&[t_, t_, 8])?;
    let sliding = sum(&[xv, pos, aranges, r(1), r(t_), two(tt8)?, tri(tt)?])?;
    let btt = t(&[b, t_, t_])?;
    let padded = sum(&[xv, pos, aranges, tt, t(&[b, t_])?, btt])?;
    let m4 = t(&[b, t_, t_, v])?;
    let where_ = sum(&[xv, pos, btt, r(v), m4])?;
    let nb = t_.div_ceil(chunk.max(1));
    let tp = checked_product(&[nb, chunk], WHAT)?;
    let m4p = t(&[b, tp, tp, v])?;
    let m5p = t(&[b, nb, chunk, sum(&[tp, past, right])?, v])?;
    let g = t(&[b, nb, chunk, ctx, v])?;
    let gather = sum(&[
        xv,
        pos,
        m4,
        m4p,
        m5p,
        r(nb.saturating_mul(8)),
        r(ctx.saturating_mul(8)),
        t(&[nb, ctx, 8])?,
        g,
    ])?;
    let mask = sliding.max(padded).max(where_).max(gather);
    // The layers: held through them, the positions and the blocked mask.
    let held = sum(&[pos, g])?;
    let w32 = if cast {
        Some(r(h.saturating_mul(4)))
    } else {
        Some(0)
    };
    let norm = rms(x4, xv, s4, w32, cast)?;
    let wv = t(&[b, t_, tw.intermediate, v])?;
    let cl = tw.clipped;
    // A feed-forward half over its input, `base` held with it.
    let ffn = |base: u64| -> Result<u64, EstimateError> {
        let m = [
            sum(&[xv, norm])?,
            sum(&[if cl { two(xv)? } else { xv }, wv])?,
            if cl { sum(&[xv, two(wv)?])? } else { 0 },
            two(wv)?,
            sum(&[if cl { two(wv)? } else { wv }, xv])?,
            if cl { sum(&[wv, two(xv)?])? } else { 0 },
            two(xv)?,
        ];
        sum(&[base, m.into_iter().max().unwrap_or(0)])
    };
    let ffn1 = ffn(sum(&[held, xv])?)?;
    let pre_attn = sum(&[held, two(xv)?, xv, norm])?;
    // The attention: the layer's input, the first half's output and `norm_pre_attn`'s.
    let base = sum(&[held, tri(xv)?])?;
    let proj = |e: u64| -> Result<u64, EstimateError> {
        let a = if cl { two(xv)? } else { xv };
        let b_ = if cast { sum(&[xv, x4])? } else { xv };
        sum(&[base, e, a.max(b_)])
    };
    let q = proj(0)?;
    let k = proj(x4)?;
    let vv = proj(two(x4)?)?;
    let heads_dim = h.checked_div(tw.heads).unwrap_or(0);
    let sp = t(&[heads_dim, v])?;
    let qb = t(&[b, tp, h, 4])?;
    let kp = t(&[b, sum(&[t_, past, right, chunk])?.saturating_sub(1), h, 4])?;
    let kc = t(&[b, nb, ctx, h, 4])?;
    let rv = t(&[n, h, v])?;
    let r32 = if cast { t(&[n, h, 4])? } else { 0 };
    let sz = t(&[b, tw.heads, nb, chunk, ctx, 4])?;
    let bd0 = t(&[b, tw.heads, tp, n, 4])?;
    let (q2, r2) = if b > 1 {
        (qb, t(&[b, tw.heads, heads_dim, n, 4])?)
    } else {
        (0, 0)
    };
    let bdp = t(&[b, tw.heads, nb, chunk, sum(&[ctx, 1])?, 4])?;
    let mb = t(&[b, nb, chunk, ctx])?;
    let a4 = sum(&[base, qb, two(kc)?, if cast { r32 } else { rv }])?;
    let o2 = if tp != t_ { x4 } else { 0 };
    let ov = if cast { xv } else { 0 };
    let attention = [
        q,
        k,
        vv,
        sum(&[base, tri(x4)?, x4, sp, x4])?,
        sum(&[base, checked_product(&[x4, 4], WHAT)?])?,
        sum(&[base, tri(x4)?, qb])?,
        sum(&[base, qb, two(x4)?, kp, kc])?,
        sum(&[base, qb, two(kc)?, x4, kp])?,
        sum(&[base, qb, two(kc)?, rv, r32])?,
        sum(&[a4, qb, kc, sz])?,
        sum(&[a4, sz, q2, r2, bd0])?,
        sum(&[a4, sz, bd0, bdp])?,
        sum(&[a4, bdp, tri(sz)?, mb])?,
        sum(&[a4, two(sz)?, bdp, kc, qb])?,
        sum(&[a4, two(sz)?, bdp, qb, qb])?,
        sum(&[a4, two(sz)?, bdp, qb, o2])?,
        sum(&[a4, two(sz)?, bdp, x4, ov, if cl { two(xv)? } else { xv }])?,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    // After it: the input, the residual, the probabilities (`_`) and the output.
    let after = sum(&[held, two(xv)?, sz])?;
    let post_attn = sum(&[after, xv, xv.max(norm)])?.max(sum(&[after, two(xv)?])?);
    let sw = t(&[b, t_, h, 2, v])?;
    let lc = sum(&[held, tri(xv)?, sz])?;
    let pd = t(&[b, h, sum(&[t_, tw.kernel])?.saturating_sub(1), v])?;
    let lconv = [
        sum(&[lc, norm])?,
        sum(&[lc, xv, if cl { xv } else { 0 }, sw])?,
        if cl { sum(&[lc, xv, two(sw)?])? } else { 0 },
        sum(&[lc, sw, xv])?,
        sum(&[lc, xv, pd, xv])?,
        sum(&[lc, two(xv)?])?,
        sum(&[lc, xv, norm])?,
        sum(&[lc, xv, if cl { two(xv)? } else { xv }])?,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    let ffn2 = ffn(lc)?;
    let out_norm = sum(&[after, two(xv)?])?.max(sum(&[after, xv, norm])?);
    let layer = [ffn1, pre_attn, attention, post_attn, lconv, ffn2, out_norm]
        .into_iter()
        .max()
        .unwrap_or(0);
    // `output_proj`, `embed_audio` and the selection of the clip's rows.
    let op = t(&[b, t_, tw.output, v])?;
    let o32 = t(&[b, t_, tw.output, 4])?;
    let ev = if cast { t(&[b, t_, tw.output, v])? } else { 0 };
    let e = t(&[b, t_, text.hidden, v])?;
    let rows = checked_product(&[b, tokens], WHAT)?;
    let selected = t(&[rows, text.hidden, v])?;
    let output = [
        sum(&[held, xv, op])?,
        sum(&[op, rms(o32, ev, s4, None, cast)?])?,
        sum(&[op, ev.max(if cast { 0 } else { o32 }), e])?,
        sum(&[op, e, t(&[rows, 2, 8])?, selected])?,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    let (moment, peak) = highest(&[
        ("the subsampling convolutions'", subsampling),
        ("the relative positions'", positions),
        ("the local attention mask's", mask),
        ("a conformer layer's", if tw.layers > 0 { layer } else { 0 }),
        ("the output projection's and embedder's", output),
    ]);
    // `Gemma4Model.forward` before the tower: `get_placeholder_mask`'s three bool
    // masks and their union, `llm_input_ids` (int64), `inputs_embeds`, and with
    // per-layer inputs `llm_inputs_embeds` and `get_per_layer_inputs`'s output.
    let (s, p) = (clips, text.prompt);
    let masks = checked_product(&[t(&[s, p])?, 4], WHAT)?;
    let ids = t(&[s, p, 8])?;
    let embeds = t(&[s, p, text.hidden, v])?;
    let ple = if text.per_layer > 0 {
        sum(&[embeds, t(&[s, p, text.per_layer, v])?])?
    } else {
        0
    };
    Ok(Phase {
        features: sum(&[t(&[b, frames, tw.mels, 4])?, t(&[b, frames])?])?,
        embeds: sum(&[masks, ids, embeds, ple])?,
        peak,
        moment,
        // Through the language model: the masks, `llm_input_ids`, the per-layer
        // inputs, `audio_output` (`output_proj`'s and `embed_audio`'s outputs), the
        // selected rows and `n_audio_tokens`.
        outputs: sum(&[masks, ids, ple, op, e, selected, r(8)])?,
        // The merge (`Gemma4Model.forward`): beside the embeddings above,
        // `audio_output` (`output_proj`'s and `embed_audio`'s outputs; its
        // `attention_mask` is a strided view of the caller's mask,
        // `Gemma4AudioSubSampleConvProjectionLayer`'s `mask[:, ::2]`), the selected
        // rows and `n_audio_tokens`;
        // `audio_mask.unsqueeze(-1).expand_as(inputs_embeds)` (a view), then
        // `inputs_embeds[audio_mask].numel()` (a boolean index of the clips' tokens ×
        // the text width) and `masked_scatter` (the selected rows already in v).
        merge: sum(&[
            op,
            e,
            selected,
            r(8),
            scatter(s, p.max(tokens), text.hidden, v)?.max(bool_index(
                s,
                p.max(tokens),
                text.hidden,
                v,
                checked_product(&[rows, text.hidden], WHAT)?,
            )?),
        ])?,
        tokens,
        assumed: (v == 4).then_some("fp32 compute is not traced"),
    })
}

/// What a training run's estimate says of a clip given: its tower is not counted.
pub(super) fn training_warning(input: &EstimateInput, b: &mut Builder) {
    if input.audio_seconds.is_some_and(|s| s > 0) {
        b.warnings.push(
            "--mm-audio-seconds is read for inference only: the audio tower's forward in training is not counted".into(),
        );
    }
}

/// The "audio tower forward" line under transformers' runtime (no engine, or
/// `--engine transformers`), where the prompt holds a clip (`mm-audio-seconds` given):
/// inference only, one clip a sequence. The text prefill's lines (whole model, one
/// device) are already counted; the line is what the tower's phase needs beyond them,
/// at least what the text forward holds of it.
pub(super) fn audio_tower(input: &EstimateInput, b: &mut Builder) -> Result<(), EstimateError> {
    let Some(seconds) = input.audio_seconds.filter(|s| *s > 0) else {
        return Ok(());
    };
    if input.train != TrainMode::None {
        training_warning(input, b);
        return Ok(());
    }
    if input.runtime != crate::arch::CacheRuntime::Transformers {
        b.warnings.push(
            "--mm-audio-seconds is read under transformers' runtime only: a serving engine sizes its pool on its own dummy clips, not the prompt's (vLLM's rules hold Qwen2-Audio's 30 s clips, see their assumptions; another engine's audio encoder is not counted)".into(),
        );
        return Ok(());
    }
    let Some(a) = input.arch else {
        b.warnings.push(
            "the audio tower's forward over the prompt's clip is not counted: the model's shape (its config) is not given".into(),
        );
        return Ok(());
    };
    let Some(tower) = a.audio.filter(|_| !a.encoder && a.encdec_params == 0) else {
        b.warnings.push(
            "the audio tower's forward over the prompt's clip is not counted: it is derived for Qwen2-Audio's encoder and Gemma 4's conformer (transformers), not this model's (an encoder-decoder's encoder: see encoder-length): add it to --reserve-gib".into(),
        );
        return Ok(());
    };
    let v = input.compute_dtype.bytes();
    let conformer = tower.chunk > 0;
    let phase = |clips: u64, prompt: u64| {
        if conformer {
            gemma4_audio(
                &tower,
                clips,
                seconds,
                Gemma4Text {
                    hidden: a.hidden,
                    prompt,
                    per_layer: a
                        .per_layer_input
                        .map_or(0, |p| p.width.saturating_mul(a.layers)),
                },
                v,
            )
        } else {
            qwen2_audio(
                &tower,
                clips,
                seconds,
                (a.hidden, prompt),
                v,
                input.attention,
            )
        }
    };
    // Beam search: `_expand_inputs_for_generation` repeats the features for the beams
    // (`generation/utils.py`), and the first forward encodes every copy.
    let clips = checked_product(&[input.sequences, input.beams], WHAT)?;
    let p = phase(clips, input.context.unwrap_or(0))?;
    // Under beam search the caller's own features stay beside generate's repeated
    // ones (`repeat_interleave`, a copy).
    let caller = if input.beams > 1 {
        phase(input.sequences, 0)?.features
    } else {
        0
    };
    let tower_phase = sum(&[caller, p.features, p.embeds, p.peak.max(p.merge)])?;
    let held = sum(&[caller, p.features, p.outputs])?;
    let prefill = text_prefill(&b.lines)?;
    let (bytes, device) = top_up(tower_phase, held, prefill);
    b.assumptions.push(format!(
        "each of the {clips} sequence(s) holds one audio clip of {seconds} s ({} prompt tokens, part of the context), {} and encoded by the audio tower in the first forward (a text-only prompt does not run it: the line is then above the need)",
        p.tokens,
        if conformer { "cut at 30 s" } else { "padded to 30 s" }
    ));
    b.line(
        LineKey::PrefillAudioTower,
        match p.assumed {
            None => "Audio tower forward beyond the text prefill",
            Some(_) => "Audio tower forward beyond the text prefill (assumed)",
        },
        bytes,
        device,
        if p.assumed.is_some() {
            Kind::Assumed
        } else {
            Kind::Computed
        },
        true,
        format!(
            "max(input features {} B + the prompt's embeddings {} B + max(the tower's peak at {} moment {} B, the merge into the prompt's embeddings {} B: the clip's embeddings, masked_scatter's copy, with CUDA's int64 prefix sum and contiguous mask over the embeddings' shape as read from ATen's code) − the text prefill's lines {} B, the features and encoder outputs the text forward holds {held} B){}",
            p.features,
            p.embeds,
            p.moment,
            p.peak,
            p.merge,
            prefill.0,
            p.assumed
                .map(|w| format!(" (assumed: {w})"))
                .unwrap_or_default()
        ),
        &[
            ("clips", clips.to_string()),
            ("seconds", seconds.to_string()),
            ("tokens-per-clip", p.tokens.to_string()),
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

    /// Qwen2-Audio-7B's encoder (`tests/cases/configs/qwen2-audio-7b-instruct.json`,
    /// from `Qwen/Qwen2-Audio-7B-Instruct`'s `audio_config`).
    const QWEN2_AUDIO_7B: AudioTower = AudioTower {
        hidden: 1280,
        layers: 32,
        heads: 20,
        intermediate: 5120,
        ..AudioTower::BASE
    };

    /// The peaks `tests/cases/audio_check.py` traces of transformers 5.23's own
    /// encoder and projector built from that config on the meta device (the trace's
    /// tracker, its sdpa as CUDA runs it), beyond the features and their mask: equal
    /// to the byte.
    #[test]
    fn the_towers_peaks_are_the_traced_ones() {
        use AttentionImpl::{Eager, Sdpa};
        let cases = [
            (Sdpa, 30, 1, 46_878_208),
            (Sdpa, 10, 1, 49_128_448),
            (Sdpa, 30, 2, 93_742_592),
            (Sdpa, 10, 2, 98_243_072),
            (Eager, 30, 1, 203_838_976),
            (Eager, 10, 1, 208_339_456),
            (Eager, 30, 2, 407_663_104),
        ];
        for (attention, seconds, clips, traced) in cases {
            let p =
                qwen2_audio(&QWEN2_AUDIO_7B, clips, seconds, (4096, 800), 2, attention).unwrap();
            assert_eq!(
                p.peak, traced,
                "{seconds} s × {clips} {attention:?}: {}",
                p.moment
            );
            assert_eq!(p.assumed, None);
        }
    }

    /// The merge of the clips' embeddings into the prompt's (`Qwen2AudioModel.forward`,
    /// the non-legacy path), beside the figure `audio_check.py` traces of those lines
    /// up to and with `masked_scatter` on the meta device, beyond the features and
    /// the prompt's embeddings: equal to the byte once CUDA's scratch (the int64
    /// prefix sum and the contiguous mask over the embeddings' shape, n = clips ×
    /// prompt × 4 096 values: 9n), which the meta kernel does not allocate, is taken
    /// off. By hand, one 30 s clip in a prompt of 8 192 tokens (bf16): the lengths
    /// 512 + 512, `seq_range` 12 288, `padding_mask` 1 536, the 2-D mask 12 288,
    /// `dummy_embeds` 3 072 (30 208), the encoder's output (after its pooler) 750 ×
    /// 1 280 × 2 = 1 920 000, `audio_features_mask` 1 024 (750 B rounded), the clip's
    /// 750 rows 750 × 4 096 × 2 = 6 144 000, `audio_tokens` and `special_audio_mask`
    /// 8 192 each, `masked_scatter`'s clone 67 108 864, CUDA's prefix sum 268 435 456
    /// and contiguous mask 33 554 432: 377 210 368.
    #[test]
    fn the_merge_is_the_traced_one_beside_cudas_scratch() {
        for (seconds, clips, prompt, traced) in
            [(30, 1, 8192, 75_220_480), (10, 2, 4096, 79_609_856)]
        {
            let p = qwen2_audio(
                &QWEN2_AUDIO_7B,
                clips,
                seconds,
                (4096, prompt),
                2,
                AttentionImpl::Sdpa,
            )
            .unwrap();
            let n = clips * prompt * 4096;
            assert_eq!(p.merge - 9 * n, traced, "{seconds} s × {clips}");
        }
        let p = qwen2_audio(&QWEN2_AUDIO_7B, 1, 30, (4096, 8192), 2, AttentionImpl::Sdpa).unwrap();
        assert_eq!(p.merge, 377_210_368);
        // The tower's own peak is below it: the merge is the phase's peak.
        assert!(p.merge > p.peak);
        let short =
            qwen2_audio(&QWEN2_AUDIO_7B, 1, 30, (4096, 800), 2, AttentionImpl::Sdpa).unwrap();
        assert!(short.merge < short.peak);
    }

    /// Gemma 4's conformer with Gemma4AudioConfig's defaults, as google/gemma-4-E2B-it
    /// and -E4B-it publish their `audio_config`.
    const GEMMA4_AUDIO: AudioTower = AudioTower {
        hidden: 1024,
        layers: 12,
        heads: 8,
        intermediate: 4096,
        mels: 128,
        positions: 750,
        chunk: 12,
        context_left: 13,
        context_right: 0,
        conv_channels: 128,
        conv_out: 32,
        kernel: 5,
        output: 1536,
        clipped: true,
    };

    /// Gemma 4's merge of the clip (`Gemma4Model.forward`), beside the figure
    /// `audio_check.py` traces of the whole forward up to and with the audio's
    /// `masked_scatter` on the meta device (text model 2 560 wide, no per-layer
    /// inputs), beyond the features: the prompt's embeddings and masks, then the
    /// larger of the tower's peak and the merge's, the merge's without CUDA's
    /// scratch (9n over n = prompt × 2 560 values). At 800 tokens the tower's first
    /// subsampling convolution stays the peak; at 32 768 the merge is. By hand
    /// there: `audio_output`'s 750 × 1 536 × 2 = 2 304 000 and 750 × 2 560 × 2 =
    /// 3 840 000, the selected rows 3 840 000 and `n_audio_tokens` 512, then
    /// `masked_scatter`'s clone 167 772 160, CUDA's prefix sum 671 088 640 and
    /// contiguous mask 83 886 080 (above the boolean index's contiguous mask
    /// 83 886 080, count 512 and int64 rows 750 × 2 560 × 24 = 46 080 000): 932 731 392.
    #[test]
    fn gemma4s_merge_is_the_traced_one_beside_cudas_scratch() {
        for (prompt, traced) in [(800, 77_834_752), (32_768, 345_922_048)] {
            let text = Gemma4Text {
                hidden: 2560,
                prompt,
                per_layer: 0,
            };
            let p = gemma4_audio(&GEMMA4_AUDIO, 1, 30, text, 2).unwrap();
            let n = prompt * 2560;
            let meta = p.merge - 9 * n;
            assert_eq!(p.embeds + p.peak.max(meta), traced, "{prompt}");
            if prompt > 800 {
                assert_eq!(p.merge, 932_731_392);
                assert!(p.merge > p.peak);
            } else {
                assert!(p.merge < p.peak);
            }
        }
    }

    /// The peaks `tests/cases/audio_check.py` traces of transformers 5.23's
    /// `Gemma4Model.get_audio_features` (the conformer and `embed_audio`) and the
    /// selection of the clip's rows, on the meta device, beside a text model 2560
    /// wide: equal to the byte. Gemma4AudioConfig's defaults peak at the first
    /// subsampling convolution; one layer 4096 wide at the attention's product with
    /// the values (with clipped linears and without).
    #[test]
    fn gemma4s_peaks_are_the_traced_ones() {
        let wide = AudioTower {
            hidden: 4096,
            layers: 1,
            intermediate: 16384,
            ..GEMMA4_AUDIO
        };
        let plain = AudioTower {
            clipped: false,
            ..wide
        };
        let text = Gemma4Text {
            hidden: 2560,
            prompt: 800,
            per_layer: 0,
        };
        let cases = [
            (GEMMA4_AUDIO, 10, 1, 24_576_000),
            (GEMMA4_AUDIO, 30, 1, 73_728_000),
            (GEMMA4_AUDIO, 30, 2, 147_456_000),
            (GEMMA4_AUDIO, 7, 3, 51_609_600),
            (wide, 30, 1, 119_644_672),
            (wide, 10, 2, 79_869_952),
            (wide, 24, 1, 95_139_328),
            (plain, 30, 1, 119_644_672),
        ];
        for (tower, seconds, clips, traced) in cases {
            let p = gemma4_audio(&tower, clips, seconds, text, 2).unwrap();
            assert_eq!(
                p.peak, traced,
                "{} wide, {seconds} s × {clips}: {}",
                tower.hidden, p.moment
            );
            assert_eq!(p.assumed, None);
        }
    }

    /// A clip's soft tokens are the processor's (`_compute_audio_num_tokens`): 25 a
    /// second, 750 for 30 s and for a longer clip, cut there; its features are not
    /// padded to 30 s.
    #[test]
    fn gemma4s_tokens_are_the_processors() {
        let text = Gemma4Text {
            hidden: 2560,
            prompt: 0,
            per_layer: 0,
        };
        let p = |s| gemma4_audio(&GEMMA4_AUDIO, 1, s, text, 2).unwrap();
        assert_eq!(p(30).tokens, 750);
        assert_eq!(p(60).tokens, 750);
        assert_eq!(p(10).tokens, 250);
        assert_eq!(p(1).tokens, 25);
        // 999 frames of 128 mel bins in fp32 and their bool mask.
        assert_eq!(p(10).features, 511_488 + 1_024);
        assert!(p(10).features < p(30).features);
    }

    /// The config reader takes the conformer's shape from a Gemma 4 config's
    /// `audio_config` (Gemma 4 31B's text model, given E2B's and E4B's audio tower).
    #[test]
    fn a_gemma4_config_gives_the_conformers_shape() {
        let mut cfg: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/cases/configs/gemma-4-31b.json"))
                .unwrap();
        cfg["audio_config"] = serde_json::json!({"model_type": "gemma4_audio"});
        let c = crate::import::config::parse_config(&cfg.to_string()).unwrap();
        assert_eq!(c.arch.audio, Some(GEMMA4_AUDIO));
    }

    /// A Gemma 4 model with its conformer: the line is computed, the tower's phase
    /// holds the prompt's embeddings and per-layer inputs, and it grows with the clip.
    #[test]
    fn gemma4s_line_is_computed() {
        let pairs = [
            ("layers", "35"),
            ("hidden", "1536"),
            ("heads", "8"),
            ("kv-heads", "1"),
            ("intermediate", "6144"),
            ("vocab", "262144"),
            ("tower-params", "300000000"),
            ("per-layer-input", "256"),
            ("per-layer-vocab", "262144"),
            ("audio-hidden", "1024"),
            ("audio-layers", "12"),
            ("audio-heads", "8"),
            ("audio-intermediate", "4096"),
            ("audio-positions", "750"),
            ("audio-chunk", "12"),
            ("audio-context-left", "13"),
            ("audio-conv-channels", "128"),
            ("audio-conv-out", "32"),
            ("audio-kernel", "5"),
            ("audio-out", "1536"),
            ("audio-clipped", "true"),
            ("context", "300"),
        ];
        let with = |s: &'static str| {
            let (input, errors) =
                crate::params::from_pairs(pairs.iter().copied().chain([("mm-audio-seconds", s)]));
            assert!(errors.is_empty(), "{errors:?}");
            input
        };
        // The conformer's facts round-trip through the flat pairs.
        let input = with("30");
        let back = crate::params::to_pairs(&input);
        let (again, errors) = crate::params::from_pairs(back.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            again.arch.and_then(|a| a.audio),
            input.arch.and_then(|a| a.audio)
        );
        assert_eq!(input.arch.and_then(|a| a.audio).map(|t| t.chunk), Some(12));
        let (short, long) = (line(&with("10")).unwrap(), line(&with("30")).unwrap());
        assert_eq!(short.1, Kind::Computed);
        assert!(long.0 > short.0);
        let e = estimate(&with("30")).unwrap();
        let l = e
            .lines
            .iter()
            .find(|l| l.key == LineKey::PrefillAudioTower)
            .unwrap();
        assert_eq!(l.inputs["tokens-per-clip"], "750");
        assert!(l.formula.contains("subsampling"), "{}", l.formula);
    }

    /// The config reader takes the encoder's shape from `audio_config`.
    #[test]
    fn the_config_gives_the_towers_shape() {
        let c = crate::import::config::parse_config(include_str!(
            "../../tests/cases/configs/qwen2-audio-7b-instruct.json"
        ))
        .unwrap();
        assert_eq!(c.arch.audio, Some(QWEN2_AUDIO_7B));
        assert_eq!(c.arch.tower_params, 642_215_936);
        assert_eq!(c.arch.hidden, 4096);
    }

    /// A clip's prompt tokens are the processor's: 750 for 30 s (and for a longer
    /// clip, cut there), 250 for 10 s.
    #[test]
    fn a_clips_tokens_are_the_processors() {
        let tokens = |s| {
            qwen2_audio(&QWEN2_AUDIO_7B, 1, s, (4096, 800), 2, AttentionImpl::Sdpa)
                .unwrap()
                .tokens
        };
        assert_eq!(tokens(30), 750);
        assert_eq!(tokens(60), 750);
        assert_eq!(tokens(10), 250);
        assert_eq!(tokens(1), 25);
    }

    fn qwen2_audio_7b(extra: &[(&str, &str)]) -> EstimateInput {
        let pairs = [
            ("layers", "32"),
            ("hidden", "4096"),
            ("heads", "32"),
            ("kv-heads", "32"),
            ("intermediate", "11008"),
            ("vocab", "156032"),
            ("qkv-bias", "true"),
            ("tower-params", "642215936"),
            ("audio-hidden", "1280"),
            ("audio-layers", "32"),
            ("audio-heads", "20"),
            ("audio-intermediate", "5120"),
            ("context", "800"),
        ];
        let (input, errors) = crate::params::from_pairs(pairs.iter().chain(extra).copied());
        assert!(errors.is_empty(), "{errors:?}");
        input
    }

    fn line(input: &EstimateInput) -> Option<(u64, Kind)> {
        let e = estimate(input).unwrap();
        e.lines
            .iter()
            .find(|l| l.key == LineKey::PrefillAudioTower)
            .map(|l| (l.bytes, l.kind))
    }

    /// The prefill's peak is the larger phase: the lines' sum is never below the
    /// tower's phase nor below the text prefill with what it holds of the tower;
    /// without a clip there is no line.
    #[test]
    fn the_prefill_is_the_larger_phase() {
        assert_eq!(line(&qwen2_audio_7b(&[])), None);
        for (context, seconds) in [("800", "30"), ("300", "10"), ("16000", "30")] {
            let input = qwen2_audio_7b(&[("context", context), ("mm-audio-seconds", seconds)]);
            let e = estimate(&input).unwrap();
            let prefill: u64 = e
                .lines
                .iter()
                .filter(|l| {
                    l.key.as_str().starts_with("prefill.") && l.key != LineKey::PrefillAudioTower
                })
                .map(|l| l.bytes)
                .sum();
            let (bytes, kind) = line(&input).unwrap();
            let p = qwen2_audio(
                &QWEN2_AUDIO_7B,
                1,
                seconds.parse().unwrap(),
                (4096, context.parse().unwrap()),
                2,
                AttentionImpl::Sdpa,
            )
            .unwrap();
            let held = p.features + p.outputs;
            let phase = p.features + p.embeds + p.peak;
            assert!(prefill + bytes >= phase, "{context}");
            assert!(bytes >= held, "{context}");
            assert_eq!(prefill + bytes, phase.max(prefill + held));
            assert_eq!(kind, Kind::Computed);
        }
        // The processor cuts a longer clip at 30 s.
        let whole = line(&qwen2_audio_7b(&[("mm-audio-seconds", "30")]))
            .unwrap()
            .0;
        let longer = line(&qwen2_audio_7b(&[("mm-audio-seconds", "90")]))
            .unwrap()
            .0;
        assert_eq!(whole, longer);
    }

    /// Under beam search every beam's copy of the features is encoded, beside the
    /// caller's own.
    #[test]
    fn beams_encode_every_copy() {
        let one = qwen2_audio_7b(&[("mm-audio-seconds", "30"), ("context", "100")]);
        let two = qwen2_audio_7b(&[
            ("mm-audio-seconds", "30"),
            ("context", "100"),
            ("beams", "2"),
        ]);
        let input = |k: &EstimateInput| {
            let e = estimate(k).unwrap();
            let l = e
                .lines
                .iter()
                .find(|l| l.key == LineKey::PrefillAudioTower)
                .unwrap()
                .clone();
            l.inputs["tower-phase"].parse::<u64>().unwrap()
        };
        let p = |clips| {
            qwen2_audio(
                &QWEN2_AUDIO_7B,
                clips,
                30,
                (4096, 100),
                2,
                AttentionImpl::Sdpa,
            )
            .unwrap()
        };
        let (p1, p2) = (p(1), p(2));
        assert_eq!(input(&one), p1.features + p1.embeds + p1.peak);
        assert_eq!(input(&two), p1.features + p2.features + p2.embeds + p2.peak);
    }

    /// A trace that replaces the text prefill's lines moves the tower's line with
    /// them: the sum stays the larger phase (a short prompt, whose text prefill is
    /// below the tower's phase).
    #[test]
    fn a_traced_prefill_retops_the_towers_line() {
        let input = qwen2_audio_7b(&[("mm-audio-seconds", "5"), ("context", "200")]);
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
            .find(|l| l.key == LineKey::PrefillAudioTower)
            .unwrap()
            .bytes;
        assert_eq!(after, before + (mlp - mlp / 2));
    }

    /// A model whose audio tower's forward is not derived says so where a clip is
    /// given, as does a serving engine's runtime.
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
            ("mm-audio-seconds", "10"),
        ];
        let (input, errors) = crate::params::from_pairs(pairs);
        assert!(errors.is_empty(), "{errors:?}");
        let e = estimate(&input).unwrap();
        assert!(e.lines.iter().all(|l| l.key != LineKey::PrefillAudioTower));
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("audio tower's forward")),
            "{:?}",
            e.warnings
        );
        let mut served = qwen2_audio_7b(&[("mm-audio-seconds", "30")]);
        served.runtime = crate::arch::CacheRuntime::Serving;
        let e = estimate(&served).unwrap();
        assert!(e.lines.iter().all(|l| l.key != LineKey::PrefillAudioTower));
        assert!(e.warnings.iter().any(|w| w.contains("--mm-audio-seconds")));
    }
}
