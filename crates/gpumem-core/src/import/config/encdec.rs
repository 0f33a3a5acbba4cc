//! Encoder-decoder models' parameters, counted as transformers 5.23 builds their
//! generation classes (`AutoModelForSeq2SeqLM` / `AutoModelForSpeechSeq2Seq`: the
//! parameters and the persistent buffers), and the decoder's shape their caches take
//! (`imported`): its layers, heads and head width — the self-attention cache per
//! token and the cross-attention's over the encoder's length — and, for Whisper, that
//! length (`max_source_positions`, 1500 frames for 30 s of audio).
//!
//! - T5 / mT5 / UMT5 (modeling_t5.py, modeling_mt5.py, modeling_umt5.py): one `shared`
//!   embedding; per stack its layers' q, k, v [heads · d_kv, d_model] and o, no bias;
//!   a `relative_attention_bias` [buckets, heads] in the first layer of each stack
//!   (every layer in UMT5); the decoder's cross-attention q, k, v, o; the MLP `wi`,
//!   `wo` (`feed_forward_proj` "relu"), or `wi_0`, `wi_1`, `wo` ("gated-…"); RMS
//!   layer norms (2 per encoder layer, 3 per decoder layer, one final per stack);
//!   `lm_head` tied to `shared` always in 5.23 (4.x kept its own where
//!   `tie_word_embeddings` is false: flan-t5, T5 v1.1, mT5).
//! - BART / mBART (modeling_bart.py, modeling_mbart.py): `shared` [vocab, d_model]
//!   tied to both stacks and `lm_head`; learned positions of `max_position_embeddings
//!   + 2` rows per stack (the offset 2); `layernorm_embedding` per stack; per layer
//!   q, k, v, out projections with biases (the decoder's cross-attention too), `fc1`,
//!   `fc2` with biases, a LayerNorm (weight and bias) after each block; mBART's final
//!   `layer_norm` per stack; the `final_logits_bias` buffer [1, vocab].
//! - Whisper (modeling_whisper.py): `conv1` [d_model, num_mel_bins, 3] and `conv2`
//!   [d_model, d_model, 3] with biases, the encoder's `embed_positions`
//!   [max_source_positions, d_model] (a parameter, frozen), the decoder's
//!   [max_target_positions, d_model] and `embed_tokens`; attention q, v, out with
//!   biases and k without; `fc1`, `fc2` with biases; LayerNorms with bias; a final
//!   `layer_norm` per stack; `proj_out` tied to `embed_tokens`.

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::units::checked_product;

use super::ImportedConfig;
use super::json::Cfg;

/// An encoder-decoder config read: the count as one figure (`encdec_params`) and the
/// decoder's shape. `None` where `mt` is not a counted family or a key is missing (the
/// caller refuses it, naming why).
pub(crate) fn imported(c: &Cfg, mt: &str) -> Result<Option<ImportedConfig>, EstimateError> {
    // A quantised checkpoint's stacks are not counted tensor by tensor: refused.
    if c.get("quantization_config").is_some() {
        return Ok(None);
    }
    let Some(n) = parameters(c, mt)? else {
        return Ok(None);
    };
    let d = c.uint("d_model")?.unwrap_or(0);
    // The decoder: its layers, the heads of its self- and cross-attention (the same
    // in every counted family) and their width.
    let (layers, heads, head_dim, ffn, max_position, encoder_length) = match mt {
        "t5" | "mt5" | "umt5" => {
            let le = c.uint("num_layers")?.unwrap_or(0);
            let h = c.uint("num_heads")?.unwrap_or(0);
            (
                c.uint("num_decoder_layers")?.unwrap_or(le),
                h,
                c.uint("d_kv")?.unwrap_or(0),
                c.uint("d_ff")?.unwrap_or(0),
                // Relative position buckets: no table ends the decoder's length.
                None,
                0,
            )
        }
        _ => {
            let Some(h) = c.uint("decoder_attention_heads")? else {
                return Ok(None);
            };
            // The head width: d_model ÷ heads, whole (BartAttention and
            // WhisperAttention refuse any other split).
            let Some(head_dim) = d.checked_div(h).filter(|w| w.checked_mul(h) == Some(d)) else {
                return Ok(None);
            };
            let whisper = mt == "whisper";
            (
                c.uint("decoder_layers")?.unwrap_or(0),
                h,
                head_dim,
                c.uint("decoder_ffn_dim")?.unwrap_or(0),
                if whisper {
                    c.uint("max_target_positions")?
                } else {
                    c.uint("max_position_embeddings")?
                },
                if whisper {
                    c.uint("max_source_positions")?.unwrap_or(0)
                } else {
                    0
                },
            )
        }
    };
    if layers == 0 || heads == 0 || head_dim == 0 {
        return Ok(None);
    }
    let (encdec_whole, encdec_split) = match mt {
        "whisper" => whisper_placement(c)?.unwrap_or((0, 0)),
        _ => (0, 0),
    };
    let mut notes = Vec::new();
    if let Some(s) = described(c, mt)?.filter(|s| s.contains("4.x")) {
        notes.push(s);
    }
    if encoder_length > 0 {
        notes.push(format!(
            "the encoder reads {encoder_length} frames (max_source_positions: 30 s of audio); the cross-attention cache is over them"
        ));
    }
    Ok(Some(ImportedConfig {
        model_type: mt.to_string(),
        arch: Architecture {
            vocab: c.uint("vocab_size")?.unwrap_or(0),
            hidden: d,
            layers,
            heads,
            kv_heads: heads,
            head_dim,
            intermediate: ffn,
            tied_embeddings: true,
            encdec_params: n,
            encoder_length,
            encdec_whole,
            encdec_split,
            ..Architecture::BASE
        },
        sliding_window: None,
        sliding_layers: None,
        max_position,
        rope_positions: None,
        mm_item: None,
        dtype: c.dtype().map(str::to_string),
        format: None,
        attention_format: None,
        compressed_tensors: false,
        state_bytes: None,
        confidence: "exact".into(),
        notes,
        warnings: Vec::new(),
    }))
}

fn sum(parts: &[u64]) -> Result<u64, EstimateError> {
    parts
        .iter()
        .try_fold(0u64, |s, x| s.checked_add(*x))
        .ok_or(EstimateError::Overflow { what: "parameters" })
}

fn p(factors: &[u64]) -> Result<u64, EstimateError> {
    checked_product(factors, "parameters")
}

/// The parameters transformers builds for `model_type` `mt` from `c`, when it is one
/// of the counted families and every key the count needs is in the config.
pub(crate) fn parameters(c: &Cfg, mt: &str) -> Result<Option<u64>, EstimateError> {
    match mt {
        "t5" | "mt5" | "umt5" => t5(c, mt),
        "bart" | "mbart" => bart(c, mt == "mbart"),
        "whisper" => whisper(c),
        _ => Ok(None),
    }
}

/// The count in words, for the refusal: what transformers 5.23 builds, and for a T5
/// whose config unties `lm_head`, what 4.x built.
pub(crate) fn described(c: &Cfg, mt: &str) -> Result<Option<String>, EstimateError> {
    let Some(n) = parameters(c, mt)? else {
        return Ok(None);
    };
    let mut s = format!("transformers 5.23 builds {n} parameters from this config");
    if matches!(mt, "t5" | "mt5" | "umt5") && c.flag("tie_word_embeddings") == Some(false) {
        let (v, d) = (
            c.uint("vocab_size")?.unwrap_or(0),
            c.uint("d_model")?.unwrap_or(0),
        );
        let untied = sum(&[n, p(&[v, d])?])?;
        s.push_str(&format!(
            " (its lm_head tied to the shared embedding; transformers 4.x keeps the checkpoint's own: {untied})"
        ));
    }
    Ok(Some(s))
}

fn keys(c: &Cfg, names: &[&str]) -> Result<Option<Vec<u64>>, EstimateError> {
    let mut out = Vec::with_capacity(names.len());
    for k in names {
        match c.uint(k)? {
            Some(v) => out.push(v),
            None => return Ok(None),
        }
    }
    Ok(Some(out))
}

fn t5(c: &Cfg, mt: &str) -> Result<Option<u64>, EstimateError> {
    let Some(k) = keys(
        c,
        &[
            "vocab_size",
            "d_model",
            "d_kv",
            "d_ff",
            "num_layers",
            "num_heads",
        ],
    )?
    else {
        return Ok(None);
    };
    let (v, d, dkv, ff, le, h) = (k[0], k[1], k[2], k[3], k[4], k[5]);
    let ld = c.uint("num_decoder_layers")?.unwrap_or(le);
    // The config classes' defaults where a published config leaves them out (t5-small
    // names neither): 32 buckets; "relu" in T5Config, "gated-gelu" in MT5Config and
    // UMT5Config (transformers 5.23).
    let buckets = c.uint("relative_attention_num_buckets")?.unwrap_or(32);
    let proj = c
        .str("feed_forward_proj")
        .unwrap_or(if mt == "t5" { "relu" } else { "gated-gelu" });
    let inner = p(&[h, dkv])?;
    let attn = p(&[4, d, inner])?;
    let mlp = p(&[if proj.starts_with("gated-") { 3 } else { 2 }, d, ff])?;
    let bias = p(&[buckets, h])?;
    // UMT5: every layer has its own relative attention bias; T5 / mT5: the first.
    let (bias_e, bias_d) = if mt == "umt5" { (le, ld) } else { (1, 1) };
    // transformers 5.23 ties `lm_head` to `shared` in every T5-family model whatever
    // the config says (configuration_t5.py / _mt5.py / _umt5.py: "we tie weights always
    // and force it to be `True`"); `described` names 4.x's untied head.
    let encoder = sum(&[
        p(&[le, sum(&[attn, mlp, p(&[2, d])?])?])?,
        p(&[bias_e, bias])?,
        d,
    ])?;
    let decoder = sum(&[
        p(&[ld, sum(&[attn, attn, mlp, p(&[3, d])?])?])?,
        p(&[bias_d, bias])?,
        d,
    ])?;
    Ok(Some(sum(&[p(&[v, d])?, encoder, decoder])?))
}

fn bart(c: &Cfg, mbart: bool) -> Result<Option<u64>, EstimateError> {
    let Some(k) = keys(
        c,
        &[
            "vocab_size",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "max_position_embeddings",
        ],
    )?
    else {
        return Ok(None);
    };
    let (v, d, le, ld, ffe, ffd, pos) = (k[0], k[1], k[2], k[3], k[4], k[5], k[6]);
    let attn = p(&[4, sum(&[p(&[d, d])?, d])?])?;
    let norm = p(&[2, d])?;
    let mlp = |ff: u64| sum(&[p(&[2, d, ff])?, ff, d]);
    // learned positions (offset 2) + layernorm_embedding (+ mBART's final layer_norm).
    let stack_extra = sum(&[
        p(&[sum(&[pos, 2])?, d])?,
        norm,
        if mbart { norm } else { 0 },
    ])?;
    let encoder = sum(&[
        p(&[le, sum(&[attn, mlp(ffe)?, p(&[2, norm])?])?])?,
        stack_extra,
    ])?;
    let decoder = sum(&[
        p(&[ld, sum(&[attn, attn, mlp(ffd)?, p(&[3, norm])?])?])?,
        stack_extra,
    ])?;
    let tied = c.flag("tie_word_embeddings").unwrap_or(true);
    let head = if tied { 0 } else { p(&[v, d])? };
    // shared + final_logits_bias [1, vocab] (a persistent buffer).
    Ok(Some(sum(&[p(&[v, d])?, encoder, decoder, head, v])?))
}

fn whisper(c: &Cfg) -> Result<Option<u64>, EstimateError> {
    let Some(k) = keys(
        c,
        &[
            "vocab_size",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "num_mel_bins",
            "max_source_positions",
            "max_target_positions",
        ],
    )?
    else {
        return Ok(None);
    };
    let (v, d, le, ld, ffe, ffd, mels, src, tgt) =
        (k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8]);
    // q, v and out with biases, k without.
    let attn = sum(&[p(&[4, d, d])?, p(&[3, d])?])?;
    let norm = p(&[2, d])?;
    let mlp = |ff: u64| sum(&[p(&[2, d, ff])?, ff, d]);
    let convs = sum(&[p(&[d, mels, 3])?, d, p(&[d, d, 3])?, d])?;
    let encoder = sum(&[
        convs,
        p(&[src, d])?,
        p(&[le, sum(&[attn, mlp(ffe)?, p(&[2, norm])?])?])?,
        norm,
    ])?;
    let decoder = sum(&[
        p(&[v, d])?,
        p(&[tgt, d])?,
        p(&[ld, sum(&[attn, attn, mlp(ffd)?, p(&[3, norm])?])?])?,
        norm,
    ])?;
    let tied = c.flag("tie_word_embeddings").unwrap_or(true);
    let head = if tied { 0 } else { p(&[v, d])? };
    Ok(Some(sum(&[encoder, decoder, head])?))
}

/// Whisper's stacks as vLLM places them over tensor-parallel ranks
/// (vllm-project/vllm d1a2e94651cf, `vllm/model_executor/models/whisper.py`), as
/// (kept whole on every rank, split over the ranks), in parameters:
/// - `WhisperAttention`: `qkv_proj` a `QKVParallelLinear` with a bias over q, k and v
///   (column-parallel: weight and bias split; the checkpoint has no k bias, and
///   `_create_fake_bias_for_k_proj` loads zeros into the one vLLM allocates), `out_proj`
///   a `RowParallelLinear` (its weight split, its bias whole on every rank);
///   `WhisperCrossAttention`: `q_proj` a `ColumnParallelLinear`, `kv_proj` a
///   column-parallel linear over k and v with a bias (k's zero again), the same
///   `out_proj`;
/// - `WhisperMLP`: `fc1` a `ColumnParallelLinear` (weight and bias split), `fc2` a
///   `RowParallelLinear` (its bias whole);
/// - whole on every rank: every `nn.LayerNorm` (weight and bias), `conv1` and `conv2`
///   (`nn.Conv1d`), the encoder's and the decoder's position tables (`nn.Embedding`);
///   the decoder's `embed_tokens` is an `nn.Embedding` too (whole; not counted here:
///   it is the shared embedding, outside the stacks) and `proj_out` is tied to it
///   (`ParallelLMHead.tie_weights`), so a config's untied head is counted whole.
///
/// `None` where the encoder's heads differ from the decoder's (no published Whisper
/// does; the tensor-parallel refusal would then need both).
fn whisper_placement(c: &Cfg) -> Result<Option<(u64, u64)>, EstimateError> {
    let Some(k) = keys(
        c,
        &[
            "vocab_size",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "num_mel_bins",
            "max_source_positions",
            "max_target_positions",
            "encoder_attention_heads",
            "decoder_attention_heads",
        ],
    )?
    else {
        return Ok(None);
    };
    let (v, d, le, ld, ffe, ffd, mels, src, tgt, he, hd) = (
        k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9], k[10],
    );
    if he != hd {
        return Ok(None);
    }
    let norm = p(&[2, d])?;
    // Split: q, k, v with their biases (k's added), out's weight; fc1 with its bias,
    // fc2's weight. The decoder's layers hold two such attentions.
    let attn_split = sum(&[p(&[4, d, d])?, p(&[3, d])?])?;
    let mlp_split = |ff: u64| sum(&[p(&[2, d, ff])?, ff]);
    let split = sum(&[
        p(&[le, sum(&[attn_split, mlp_split(ffe)?])?])?,
        p(&[ld, sum(&[attn_split, attn_split, mlp_split(ffd)?])?])?,
    ])?;
    // Whole: out's bias per attention, fc2's bias, the LayerNorms, the convolutions and
    // the position tables.
    let convs = sum(&[p(&[d, mels, 3])?, d, p(&[d, d, 3])?, d])?;
    let tied = c.flag("tie_word_embeddings").unwrap_or(true);
    let whole = sum(&[
        convs,
        p(&[src, d])?,
        p(&[le, sum(&[d, d, p(&[2, norm])?])?])?,
        norm,
        p(&[tgt, d])?,
        p(&[ld, sum(&[d, d, d, p(&[3, norm])?])?])?,
        norm,
        if tied { 0 } else { p(&[v, d])? },
    ])?;
    Ok(Some((whole, split)))
}
