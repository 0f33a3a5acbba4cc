//! GIT (`git`, GitConfig; transformers 5.23 `models/git/modeling_git.py`), the
//! generative image-to-text model of microsoft/git-base: a CLIP-style vision tower
//! whose patch states, projected, go ahead of the text into a BERT-style decoder.
//! `GitForCausalLM` builds
//! - `git.embeddings`: `word_embeddings` [vocab, hidden], `position_embeddings`
//!   [max_position_embeddings, hidden], a `LayerNorm` with bias (and a non-persistent
//!   `position_ids`); no token-type table;
//! - `git.encoder.layer`, `num_hidden_layers` BERT layers (post-norm): `query`, `key`,
//!   `value` and `attention.output.dense` with biases, `attention.output.LayerNorm`,
//!   `intermediate.dense` and `output.dense` with biases, `output.LayerNorm`; no norm
//!   after the last layer (the embeddings' LayerNorm is the one norm outside them);
//! - `output`: `nn.Linear(hidden, vocab)` with its bias, the weight tied to the word
//!   embeddings under `tie_word_embeddings`;
//! - the tower and projection ([`git_vision`]).
//!
//! Its self-attention caches every position of the sequence (`GitSelfAttention`:
//! `past_key_values.update`), the image's tokens ahead of the text included: one
//! image's (image ÷ patch)² + 1 tokens (197 at 224 pixels, patch 16) come before
//! the prompt's ids, which do not hold them (`prefix-tokens`: the estimate adds them
//! to the context).

use serde_json::Value;

use crate::arch::Architecture;
use crate::error::EstimateError;
use crate::import::config::decoder::Draft;
use crate::import::config::family::{BASE, Family, TowerCount};
use crate::import::config::json::{Cfg, parse};
use crate::import::config::tower::{fit, sizes, vit_layer};

/// GIT.
pub(crate) const GIT: Family = Family {
    types: "git",
    class: "GitConfig",
    arch: Architecture {
        gated_mlp: false,
        qkv_bias: true,
        o_bias: true,
        mlp_bias: true,
        layernorm_bias: true,
        lm_head_bias: true,
        ..Architecture::BASE
    },
    positions: true,
    // Dropouts (training only), BERT's leftovers the model does not read.
    inert: "attention_probs_dropout_prob hidden_dropout_prob classifier_dropout",
    hook: Some(git),
    tower: Some(git_vision),
    // Learned or no positions: no rotary buffers.
    rope_tables: 0,
    ..BASE
};

/// The records of this file, for the registry.
pub(crate) const FAMILIES: &[&Family] = &[&GIT];

/// Absolute positions only (transformers 5.x builds no other kind; GitConfig's
/// `tie_word_embeddings` defaults to false, the generic reader's default here), and
/// one image's tokens ahead of every sequence's prompt (`GitModel.forward`:
/// `torch.cat((projected_visual_features, embedding_output), dim=1)`, the frames'
/// features concatenated first), which the text's positions do not cover.
// Sizes at most 2^20 ([`sizes`], [`frames`]): no product overflows a u128.
#[allow(clippy::arithmetic_side_effects)]
fn git(c: &Cfg, d: &mut Draft) -> Result<(), EstimateError> {
    match c.str("position_embedding_type") {
        None | Some("absolute") => {}
        Some(other) => d.warnings.push(format!(
            "position_embedding_type {other}: transformers 4.x added a distance_embedding table per layer, which is not counted (5.x builds absolute positions only)"
        )),
    }
    let tower = c.get("vision_config").filter(|v| v.is_object());
    let [image, patch] = match tower {
        Some(t) => sizes(t, [("image_size", 224), ("patch_size", 16)])?,
        None => [224, 16],
    };
    let side = image.checked_div(patch).unwrap_or(0);
    let frames = frames(c)?.max(1);
    let tokens = (side * side + 1) * frames;
    d.arch.prefix_tokens = fit(tokens)?;
    d.notes.push(format!(
        "one image per sequence: its {tokens} tokens go ahead of the prompt's ids, through the decoder and into its cache (prefix-tokens; 0 for text alone)"
    ));
    Ok(())
}

/// `num_image_with_embedding`: the frames of a video, each its own temporal
/// embedding; 0 when unset (one image, no temporal embedding).
fn frames(c: &Cfg) -> Result<u128, EstimateError> {
    let n = c.uint("num_image_with_embedding")?.unwrap_or(0);
    if n > 1 << 20 {
        return Err(parse("num_image_with_embedding: absurdly large".into()));
    }
    Ok(u128::from(n))
}

/// `git.image_encoder` (`GitVisionModel`, GitVisionConfig's defaults where the config
/// is silent: CLIP ViT-B/16 at 224): the class embedding, a bias-free patch
/// convolution, (patches + 1) learned positions, `pre_layrnorm`, layers of two
/// LayerNorms, q/k/v/out and fc1/fc2 with biases, `post_layernorm`; then
/// `git.visual_projection` (`GitProjection`: a Linear from the tower's width to the
/// text's with its bias, and a LayerNorm) and, under `num_image_with_embedding`, one
/// `img_temporal_embedding` vector of the tower's width per frame. `None` for another
/// tower.
#[allow(clippy::arithmetic_side_effects)]
fn git_vision(
    root: &Cfg,
    tower: &Value,
    text_hidden: u64,
) -> Result<Option<TowerCount>, EstimateError> {
    if tower.get("model_type").and_then(Value::as_str) != Some("git_vision_model") {
        return Ok(None);
    }
    let [h, inter, layers, ch, image, patch] = sizes(
        tower,
        [
            ("hidden_size", 768),
            ("intermediate_size", 3072),
            ("num_hidden_layers", 12),
            ("num_channels", 3),
            ("image_size", 224),
            ("patch_size", 16),
        ],
    )?;
    let side = image.checked_div(patch).unwrap_or(0);
    let embed = h + ch * patch * patch * h + (side * side + 1) * h + 2 * h;
    let t = u128::from(text_hidden);
    let projection = h * t + t + 2 * t;
    let frames = frames(root)?;
    let n = embed + layers * vit_layer(h, inter) + 2 * h + projection + frames * h;
    let images = frames.max(1);
    let item = (
        fit((side * side + 1) * images)?,
        fit(ch * image * image * images)?,
    );
    Ok(Some((fit(n)?, Some(item))))
}

#[cfg(test)]
mod tests {
    use crate::import::config::{ImportedConfig, parse_config};

    fn counted(doc: &str) -> (u64, u64, ImportedConfig) {
        let doc: serde_json::Value = serde_json::from_str(doc).expect("fixture");
        let c = parse_config(&doc["config"].to_string()).expect("config");
        let ours = c
            .arch
            .tensors()
            .expect("tensors")
            .iter()
            .map(|t| t.params().expect("count"))
            .sum();
        let want = doc["parameters"].as_u64().expect("count");
        (ours, want, c)
    }

    /// GitConfig's defaults (microsoft/git-base's sizes: a 6-layer, 768-wide decoder,
    /// CLIP ViT-B/16 at 224, untied `output`), against the model transformers 5.23
    /// builds on the meta device: 176 619 066 parameters, tower and projection
    /// included; one image is 197 tokens, ahead of the prompt.
    #[test]
    fn git_base_counts_its_tower_and_bert_style_decoder() {
        let (ours, want, c) = counted(include_str!(
            "../../../../tests/cases/transformers/git.json"
        ));
        assert_eq!((ours, want), (176_619_066, 176_619_066));
        assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
        assert_eq!(c.mm_item, Some((197, 3 * 224 * 224)));
        assert_eq!(c.arch.prefix_tokens, 197);
    }

    /// A video variant (six frames, each its own temporal embedding), a tied `output`
    /// (its bias still its own), a smaller tower: equal to transformers'; the six
    /// frames' tokens go ahead of the prompt.
    #[test]
    fn git_video_counts_the_temporal_embeddings() {
        let (ours, want, c) = counted(include_str!(
            "../../../../tests/cases/transformers/git-video.json"
        ));
        assert_eq!(ours, want);
        assert_eq!(c.confidence, "exact", "{:?}", c.warnings);
        assert_eq!(c.mm_item, Some((6 * 145, 6 * 3 * 96 * 96)));
        assert_eq!(c.arch.prefix_tokens, 6 * 145);
    }

    /// git-base's 1 024 text positions hold a 1 024-token prompt: the cache and the
    /// activations cover the image's 197 tokens beside it (6 layers × K and V × 768 ×
    /// 1 221 tokens × 2 B), no position warning, and an assumption says why; with
    /// prefix-tokens 0 (text alone) the cache is the prompt's.
    #[test]
    fn the_image_tokens_join_the_prompt_in_the_estimate() {
        let (_, _, c) = counted(include_str!(
            "../../../../tests/cases/transformers/git.json"
        ));
        let run = |extra: &[(&'static str, &'static str)]| {
            let mut pairs: Vec<(&str, String)> = c.pairs();
            for (k, v) in [("context", "1024"), ("kv-dtype", "bf16")]
                .iter()
                .chain(extra)
            {
                pairs.push((k, (*v).to_string()));
            }
            let (input, errors) =
                crate::params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())));
            assert!(errors.is_empty(), "{errors:?}");
            crate::estimate::estimate(&input).expect("estimate")
        };
        let e = run(&[]);
        assert_eq!(e.kv_cache_bytes, 6 * 2 * 768 * 1221 * 2);
        assert!(
            e.assumptions
                .iter()
                .any(|a| a.contains("1221 tokens per sequence")),
            "{:?}",
            e.assumptions
        );
        assert!(
            !e.warnings.iter().any(|w| w.contains("positions")),
            "{:?}",
            e.warnings
        );
        assert_eq!(
            run(&[("prefix-tokens", "0")]).kv_cache_bytes,
            6 * 2 * 768 * 1024 * 2
        );
    }
}
