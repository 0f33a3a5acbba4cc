//! The audio tower's forward over the prompt's clips under transformers' runtime
//! (inference, no grad): its peak while it encodes them, derived moment by moment from
//! transformers 5.23's own encoder code, and what outlives it into the text forward.
//! As for the vision towers (`estimate::tower`), the prefill's peak is the larger of the
//! two phases; the line adds to the text prefill's lines what the tower's phase needs
//! beyond them, at least what the text forward holds of the tower.
//!
//! Derived for Qwen2-Audio's Whisper-style encoder ([`AudioTower`], read from the
//! config's `audio_config`). Unlike the vision towers, `generate` does not encode the
//! clips beforehand (`_prepare_multimodal_encoder_kwargs_for_generation` runs only
//! `get_image_features` and `get_video_features`): `Qwen2AudioModel.forward` runs the
//! encoder inside the first forward, before the language model, and its locals hold
//! the encoder's output and its masks through that forward only. Another audio tower's
//! forward (Gemma 4's conformer) is not counted, and a warning says so where a clip is
//! given.

use super::tower::{assumed, highest, r, sum, t, text_prefill, top_up};
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
    /// (fp32 and int32), held by the caller for the whole generation.
    pub features: u64,
    /// The prompt's token embeddings: `Qwen2AudioModel.forward` looks them up
    /// (`get_input_embeddings()(input_ids)`, sequences × prompt × text width) before
    /// it runs the encoder, and holds them through it.
    pub embeds: u64,
    /// The phase's peak beyond them: the masks `Qwen2AudioModel.forward` builds, the
    /// features' cast and the moment's activations.
    pub peak: u64,
    /// Which moment the peak is.
    pub moment: &'static str,
    /// What `Qwen2AudioModel.forward` still holds while the language model runs.
    pub outputs: u64,
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
///   T ÷ 2 rows after `avg_pooler`) stay below these.
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
    Ok(Phase {
        features: sum(&[t(&[clips, tw.mels, frames, 4])?, t(&[clips, frames, 4])?])?,
        embeds: t(&[clips, prompt, text_hidden, v])?,
        peak,
        moment,
        // `Qwen2AudioModel.forward`'s locals through the language model: the index
        // tensors and masks above, `audio_outputs.last_hidden_state`,
        // `audio_features_mask` (bool, clips × T ÷ 2), the projected features of the
        // clips' tokens (`audio_features[audio_features_mask]`: the projector's whole
        // output is let go), and the prompt's `audio_tokens` and `special_audio_mask`
        // (bool, one a token).
        outputs: sum(&[
            index,
            last,
            t(&[clips, pooled])?,
            t(&[clips, tokens, text_hidden, v])?,
            checked_product(&[t(&[clips, prompt])?, 2], WHAT)?,
        ])?,
        tokens,
        assumed: assumed(attention, v),
    })
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
        b.warnings.push(
            "--mm-audio-seconds is read for inference only: the audio tower's forward in training is not counted".into(),
        );
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
            "the audio tower's forward over the prompt's clip is not counted: it is derived for Qwen2-Audio's encoder (transformers), not this model's (Gemma 4's conformer, an encoder-decoder's encoder: see encoder-length): add it to --reserve-gib".into(),
        );
        return Ok(());
    };
    // Beam search: `_expand_inputs_for_generation` repeats the features for the beams
    // (`generation/utils.py`), and the first forward encodes every copy.
    let clips = checked_product(&[input.sequences, input.beams], WHAT)?;
    let p = qwen2_audio(
        &tower,
        clips,
        seconds,
        (a.hidden, input.context.unwrap_or(0)),
        input.compute_dtype.bytes(),
        input.attention,
    )?;
    // Under beam search the caller's own features stay beside generate's repeated
    // ones (`repeat_interleave`, a copy).
    let caller = if input.beams > 1 {
        qwen2_audio(
            &tower,
            input.sequences,
            seconds,
            (a.hidden, 0),
            input.compute_dtype.bytes(),
            input.attention,
        )?
        .features
    } else {
        0
    };
    let tower_phase = sum(&[caller, p.features, p.embeds, p.peak])?;
    let held = sum(&[caller, p.features, p.outputs])?;
    let prefill = text_prefill(&b.lines)?;
    let (bytes, device) = top_up(tower_phase, held, prefill);
    b.assumptions.push(format!(
        "each of the {clips} sequence(s) holds one audio clip of {seconds} s ({} prompt tokens, part of the context), padded to 30 s and encoded by the audio tower in the first forward (a text-only prompt does not run it: the line is then above the need)",
        p.tokens
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
            "max(input features {} B + the prompt's embeddings {} B + the tower's peak at {} moment {} B − the text prefill's lines {} B, the features and encoder outputs the text forward holds {held} B){}",
            p.features,
            p.embeds,
            p.moment,
            p.peak,
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
