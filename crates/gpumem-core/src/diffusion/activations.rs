//! What a denoiser call and a VAE decode hold at their peak, beyond the weights, at
//! inference (no autograd), derived from each module's forward in diffusers 0.42.1
//! and checked against a meta-device trace of the real module
//! (`tests/diffusion/oracle.py`, within 2 %).
//!
//! Each class has one *moment*: the point of its forward where the most is live, read
//! from the code (which tensors a Python name still holds, which a call has freed).
//! The unit is one activation of `tokens × width` values in the compute dtype. With
//! SDPA the fused kernels (flash, memory-efficient) keep no score matrix; the eager
//! path adds the scores and their softmax (`batch × heads × q × k`, twice), an
//! assumed upper bound named as such.

/// The shape of one denoiser call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// Samples in the call (the batch, doubled when guidance concatenates).
    pub batch: u64,
    /// Latent height and width (the image's over the VAE's scale factor).
    pub lat_h: u64,
    /// Latent width.
    pub lat_w: u64,
    /// Latent frames (1 for images).
    pub lat_f: u64,
    /// Text tokens the denoiser attends to.
    pub text: u64,
    /// Bytes per value of the compute dtype.
    pub elt: u64,
}

fn m(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

/// `UNet2DConditionModel`'s peak: in the up path, at the first transformer block of
/// the highest-resolution level that has attention, inside its GEGLU feed-forward
/// (attention.py `FeedForward`, activations.py `GEGLU`: the projection to 2 × 4C,
/// `gelu(gate)` and the product, 16 C), while the up block still holds every skip
/// connection not yet consumed (unet_2d_condition.py keeps `down_block_res_samples`
/// and passes each block its tuple), the block's input (`sample`, C of the level
/// below, upsampled), the resnet's output (the transformer's residual), proj_in,
/// the attention output, the hidden state after it and its LayerNorm: 21 C in all
/// besides the skips and the input. Also the first resnet of each up level (its
/// input, the concatenation with the skip, its GroupNorm and SiLU): the larger of
/// the two moments is the peak.
pub fn unet(call: &Call, ch: &[u64], lpb: &[u64], attn: &[bool], inputs: u64) -> u64 {
    let n = ch.len();
    if n == 0 {
        return inputs;
    }
    // Spatial size of each level (a stride-2 3×3 convolution with padding 1: ⌈x/2⌉).
    let mut hw = Vec::with_capacity(n);
    let (mut h, mut w) = (call.lat_h.max(1), call.lat_w.max(1));
    for _ in 0..n {
        hw.push(m(h, w));
        h = h.div_ceil(2);
        w = w.div_ceil(2);
    }
    // The skip list: conv_in, then per level its resnet/attention outputs and the
    // downsampler's (at the next level's size). Values per sample.
    let mut skips: Vec<u64> = vec![m(ch[0], hw[0])];
    for l in 0..n {
        for _ in 0..lpb[l] {
            skips.push(m(ch[l], hw[l]));
        }
        if l + 1 < n {
            skips.push(m(ch[l], hw[l + 1]));
        }
    }
    let bs = m(call.batch, call.elt);
    let mut peak = 0u64;
    for l in (0..n).rev() {
        // Up block of level l consumes lpb[l] + 1 skips; the list then holds the
        // first (l + 1)(lpb + 1) entries (every level's lpb equal in the configs
        // read; the sum below follows the list either way).
        let held_n: usize = (0..=l)
            .map(|i| lpb[i] as usize + 1)
            .sum::<usize>()
            .min(skips.len());
        let held: u64 = skips[..held_n].iter().fold(0, |a, s| a.saturating_add(*s));
        let input_c = if l + 1 < n { ch[l + 1] } else { ch[n - 1] };
        let input = m(input_c, hw[l]);
        let last_skip = skips[held_n.saturating_sub(1)];
        let resnet = held
            .saturating_add(input)
            .saturating_add(m(3, input.saturating_add(last_skip)));
        peak = peak.max(resnet);
        if attn[l] {
            let ff = held
                .saturating_add(input)
                .saturating_add(m(21, m(ch[l], hw[l])));
            peak = peak.max(ff);
        }
    }
    m(peak, bs).saturating_add(inputs)
}

/// `SD3Transformer2DModel`'s peak: inside a joint block's feed-forward
/// (attention.py `JointTransformerBlock.forward`): the block's input, its norm, the
/// gated attention output(s) (one more with a dual-attention layer), the residual
/// sum, the feed-forward's norm, its 4 D projection and GELU (8 D): 13 D of image
/// tokens, 14 with dual attention, plus the context stream's input, norm and
/// attention output (3 D of text tokens).
pub fn sd3(call: &Call, d: u64, patch: u64, dual: bool, inputs: u64) -> u64 {
    let img = m(call.lat_h / patch.max(1), call.lat_w / patch.max(1));
    let units = if dual { 14 } else { 13 };
    let v = m(units, m(img, d)).saturating_add(m(3, m(call.text, d)));
    m(m(v, call.batch), call.elt).saturating_add(inputs)
}

/// `FluxTransformer2DModel`'s peak: in a single-stream block's attention, while the
/// key gets its rotary embedding (transformer_flux.py `FluxSingleTransformerBlock`,
/// embeddings.py `apply_rotary_emb`): the last double block's two streams, their
/// concatenation, its norm, the MLP's GELU (4 D), v, the normed q and k, the rotated
/// half and three fp32 products (6 D): 17 D over image + text tokens, plus the RoPE
/// tables (cos and sin, fp32, `tokens × head_dim`).
pub fn flux(call: &Call, d: u64, head_dim: u64, inputs: u64) -> u64 {
    let img = m(call.lat_h / 2, call.lat_w / 2);
    let s = img.saturating_add(call.text);
    let v = m(m(17, m(s, d)), m(call.batch, call.elt));
    let rope = m(m(2, s), m(head_dim, 4));
    v.saturating_add(rope).saturating_add(inputs)
}

/// `WanTransformer3DModel`'s peak, the larger of two moments of a block
/// (transformer_wan.py `WanTransformerBlock.forward`): inside the feed-forward — the
/// patch-embedded input, the cross-attention output, the residual sum and the fp32
/// norm's cast back (4 D), the FFN's projection and GELU (2 × ffn) — or in the
/// cross-attention, while the query's RMS norm across heads runs in fp32
/// (`WanAttnProcessor.__call__`: the input, the self-attention output, the two norms'
/// casts back, the query, and the norm's fp32 copy and two products: 5 D + 6 D) with
/// the text's key and value; plus the text embedding (`text × D`) and the RoPE
/// tables (cos and sin, fp32). The first moment is the 1.3B's, the second the 14B's
/// (ffn / D = 5.8 against 2.7).
pub fn wan(call: &Call, d: u64, ffn: u64, head_dim: u64, patch: [u64; 3], inputs: u64) -> u64 {
    let tokens = m(
        m(
            call.lat_f.div_ceil(patch[0].max(1)),
            call.lat_h / patch[1].max(1),
        ),
        call.lat_w / patch[2].max(1),
    );
    let ff = m(tokens, m(4, d).saturating_add(m(2, ffn)));
    let cross = m(tokens, m(11, d)).saturating_add(m(2, m(call.text, d)));
    let v = m(ff.max(cross), m(call.batch, call.elt));
    let text = m(m(call.text, d), m(call.batch, call.elt));
    let rope = m(m(2, tokens), m(head_dim, 4));
    v.saturating_add(text)
        .saturating_add(rope)
        .saturating_add(inputs)
}

/// The score matrices an eager attention adds at its moment: scores and softmax,
/// `batch × heads × q × k` each (assumed: the math path's two live products).
pub fn eager_scores(batch: u64, heads: u64, q: u64, k: u64, elt: u64) -> u64 {
    m(m(2, m(batch, heads)), m(m(q, k), elt))
}

/// `AutoencoderKL.decode`'s peak (vae.py `Decoder`): the last up block's first
/// resnet at full resolution, holding its input (the upsampled output of the block
/// before, `block_out_channels[1]` channels), the GroupNorm's output and the SiLU's:
/// 3 × C₁ × H × W per sample.
pub fn vae_kl(batch: u64, h: u64, w: u64, ch: &[u64], elt: u64) -> u64 {
    let c = if ch.len() > 1 {
        ch[1]
    } else {
        ch.first().copied().unwrap_or(0)
    };
    m(m(3, m(c, m(h, w))), m(batch, elt))
}

/// `AutoencoderKLWan.decode`'s peak (autoencoder_kl_wan.py `_decode`): the latent
/// frames are decoded one at a time, each causal convolution keeping `CACHE_T` = 2
/// frames of its input in `feat_cache`. At the last frame: the output so far (3 ×
/// (frames − 4) × H × W), every cache — per up level, each resnet's two convolutions
/// (their input widths), the temporal upsampler's `time_conv`, the mid block's four
/// at the deepest level and `conv_out`'s at the top — and the chunk's four frames at
/// full resolution: the upsampled input, the residual sum, a convolution's output and
/// the RMS norm's fp32 copy and quotient (7 units of 4 × C × H × W); plus the latents
/// and `post_quant_conv`'s output. `dd` are the decoder's widths (`dims` in
/// `WanDecoder3d`, deepest first), `tup` its temporal upsampling per level.
pub fn vae_wan(
    batch: u64,
    frame: (u64, u64, u64),
    z: u64,
    dd: &[u64],
    tup: &[bool],
    nres: u64,
    elt: u64,
) -> u64 {
    let (h, w, frames) = frame;
    let levels = dd.len().saturating_sub(1);
    if levels == 0 {
        return 0;
    }
    let hw = m(h, w);
    let mut caches = 0u64;
    for i in 0..levels {
        let shift = 2 * (levels - 1 - i).min(16) as u32;
        let at = hw >> shift;
        let a = if i == 0 { dd[0] } else { dd[i] / 2 };
        let b = dd[i + 1];
        let mut ch = a.saturating_add(b).saturating_add(m(nres, m(2, b)));
        if tup.get(i).copied().unwrap_or(false) {
            ch = ch.saturating_add(b);
        }
        if i == 0 {
            ch = ch.saturating_add(m(4, dd[0])).saturating_add(z);
        }
        if i + 1 == levels {
            ch = ch.saturating_add(b);
        }
        caches = caches.saturating_add(m(m(2, ch), at));
    }
    let out = m(m(3, frames.saturating_sub(4)), hw);
    let chunk = m(7, m(4, m(dd[levels], hw)));
    let lat = m(m(2, z), m(frames.saturating_sub(1) / 4 + 1, hw >> 6));
    m(
        m(
            out.saturating_add(caches)
                .saturating_add(chunk)
                .saturating_add(lat),
            batch,
        ),
        elt,
    )
}
