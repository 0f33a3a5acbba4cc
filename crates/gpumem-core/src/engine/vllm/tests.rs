//! vLLM's rule: hand derivations of its pool, release by release, and its knobs.

#![allow(clippy::arithmetic_side_effects)]

use super::*;
use crate::engine::tests::*;

/// Llama-3.1-8B, bf16, H100 SXM 80GB, vLLM 0.19 at 0.9, max-model-len 16 000, by hand:
/// - total as torch reports it: 81 089 MiB = 85 027 979 264 B;
/// - requested: ⌈85 027 979 264 × 0.9⌉ = 76 525 181 338 B;
/// - weights: 8 030 261 248 × 2 B = 16 060 522 496 B (no max-position in the preset:
///   no rotary cache);
/// - profiling: forward of 8192 tokens 705 156 096 B (the estimator's); sampler phase
///   over 1024 rows: logits 1024 × 128 256 × 2 = 262 668 288, fp32 copy + probs + draws
///   1024 × 128 256 × 12 = 1 576 009 728, triton rows 132 × 128 256 × 4 = 67 719 168,
///   held hidden states (8192 + 2 × 1024) × 4096 × 2 = 83 886 080: 1 990 283 264;
///   + cuBLAS 32 MiB = 2 023 837 696 B;
/// - outside torch: 256 MiB = 268 435 456 B;
/// - KV = 76 525 181 338 − 16 060 522 496 − 2 023 837 696 − 268 435 456 = 58 172 385 690 B;
/// - blocks of 16 × 131 072 B: 27 738 → 443 808 tokens; 1000 blocks a sequence: 27.
#[test]
fn vllm_llama_8b_on_h100_matches_the_hand_derivation() {
    let b = run(&llama_8b(&[]), &with(&[("engine", "vllm@0.19")]));
    assert_eq!(b.version, "0.19");
    assert_eq!(b.capacity_bytes, 85_027_979_264);
    assert_eq!(b.capacity_kind, "torch");
    assert_eq!(bytes_of(&b, "budget"), 76_525_181_338);
    assert_eq!(bytes_of(&b, "weights"), 16_060_522_496);
    assert_eq!(bytes_of(&b, "activation_peak"), 2_023_837_696);
    assert_eq!(bytes_of(&b, "non_torch"), 268_435_456);
    assert_eq!(b.kv_capacity_bytes, 58_172_385_690);
    assert_eq!(b.kv_bytes_per_token, 131_072);
    assert_eq!(b.kv_capacity_tokens, 443_808);
    assert_eq!(b.max_sequences, 27);
    assert_eq!(b.outcome, Outcome::Fits);
    // The CUDA-graph line is shown, not subtracted, in 0.19; gone with --enforce-eager.
    let g = b.lines.iter().find(|l| l.key == "cuda_graphs").unwrap();
    assert!(!g.subtracted);
    let eager = run(
        &llama_8b(&[]),
        &with(&[("engine", "vllm@0.19"), ("enforce-eager", "true")]),
    );
    assert!(eager.lines.iter().all(|l| l.key != "cuda_graphs"));
    assert_eq!(eager.kv_capacity_bytes, b.kv_capacity_bytes);
    for l in &b.lines {
        assert!(!l.source.is_empty(), "{}", l.key);
    }
    // 0.10 sorts the vocabulary (38 B a row element) and truncates the share.
    let old = run(&llama_8b(&[]), &with(&[("engine", "vllm@0.10")]));
    assert_eq!(old.version, "0.10");
    assert_eq!(bytes_of(&old, "budget"), 76_525_181_337);
    let sort = 1024 * 128_256 * 2 + 1024 * 128_256 * 36 + (8192 + 2048) * 4096 * 2;
    assert_eq!(bytes_of(&old, "activation_peak"), sort + 32 * MIB);
}

#[test]
fn vllm_without_room_is_refused_and_near_zero_is_borderline() {
    // 0.2 × 85 027 979 264 = 17 005 595 853 B < weights + profile + outside torch.
    let b = run(
        &llama_8b(&[]),
        &with(&[("engine", "vllm"), ("gpu-memory-utilization", "0.2")]),
    );
    assert!(b.kv_capacity_bytes < 0);
    assert_eq!((b.kv_capacity_tokens, b.max_sequences), (0, 0));
    assert_eq!(b.outcome, Outcome::Refused);
    assert!(b.warnings.iter().any(|w| w.contains("No available memory")));
    // Find the utilisation at which one 16 000-token sequence just fits: within the
    // band it is borderline, never "fits".
    let need = 1000 * 2_097_152i64;
    let mut seen = false;
    for u in 2200..=2600 {
        let f = format!("0.{u:04}");
        let b = run(
            &llama_8b(&[]),
            &with(&[("engine", "vllm"), ("gpu-memory-utilization", &f)]),
        );
        let m = b.kv_capacity_bytes - need;
        assert_eq!(b.margin_bytes, m);
        let unc = b.uncertainty_bytes as i64;
        let want = if b.kv_capacity_bytes <= 0 || m < -unc {
            Outcome::Refused
        } else if m <= unc {
            Outcome::Borderline
        } else {
            Outcome::Fits
        };
        assert_eq!(b.outcome, want, "{f}");
        seen |= want == Outcome::Borderline;
    }
    assert!(seen);
}

/// Gemma-3's layout: 8 full and 40 sliding layers → 6 groups of 8 layers; "GPU KV
/// cache size" = ⌊⌊pool ÷ (16 × per-layer × 8)⌋ ÷ 6⌋ × 16 (kv_cache_utils.py).
#[test]
fn vllm_hybrid_groups_follow_the_allocator() {
    let pairs = [
        ("layers", "48"),
        ("hidden", "3840"),
        ("heads", "16"),
        ("kv-heads", "8"),
        ("head-dim", "256"),
        ("intermediate", "15360"),
        ("vocab", "262208"),
        ("sliding-window", "1024"),
        ("sliding-layers", "40"),
    ];
    let (input, e) = crate::params::from_pairs(pairs);
    assert!(e.is_empty(), "{e:?}");
    let b = run(
        &input,
        &with(&[("engine", "vllm@0.19"), ("max-model-len", "8192")]),
    );
    let page = 16 * 8192u64 * 8;
    let blocks = b.kv_capacity_bytes as u64 / page;
    assert_eq!(b.kv_capacity_tokens, blocks / 6 * 16);
    // A request: 1 full group × 512 blocks + 5 sliding groups × (⌈(1023 + 8192) ÷ 16⌉ + 1).
    assert_eq!(
        b.max_sequences,
        blocks / (512 + 5 * (8192u64.div_ceil(16) + 1))
    );
}

/// vLLM's A100 exception: 2048 batched tokens and 256 sequences, and torch's A100
/// 80GB total (85 093 777 408 B); a card without a public torch total is derived.
#[test]
fn vllm_defaults_and_card_totals() {
    let b = run(
        &llama_8b(&[]),
        &[
            ("engine", "vllm"),
            ("card", "a100-80gb"),
            ("max-model-len", "4096"),
        ],
    );
    assert_eq!(b.capacity_bytes, 85_093_777_408);
    assert!(b.assumptions.iter().any(|a| a.contains("max-num-seqs 256")));
    let d = run(
        &llama_8b(&[]),
        &[
            ("engine", "vllm"),
            ("card", "h100-pcie-80gb"),
            ("max-model-len", "4096"),
        ],
    );
    assert_eq!(d.capacity_kind, "torch, derived");
    assert!(d.capacity_bytes < find_card("h100-pcie-80gb").unwrap().capacity().0);
}

/// --kv-cache-memory-bytes is the pool; --enable-lora adds max_loras × rank × per-layer
/// widths: 32 layers × 16 × (7 × 4096 + 2 × 4096 + 2 × 1024 + 3 × 14 336) × 2 B.
#[test]
fn vllm_knobs() {
    let b = run(
        &llama_8b(&[]),
        &with(&[("engine", "vllm"), ("kv-cache-memory-bytes", "10000000000")]),
    );
    assert_eq!(b.kv_capacity_bytes, 10_000_000_000);
    let l = run(
        &llama_8b(&[]),
        &with(&[("engine", "vllm"), ("enable-lora", "true")]),
    );
    assert_eq!(
        bytes_of(&l, "lora"),
        32 * 16 * (7 * 4096 + 2 * 4096 + 2 * 1024 + 3 * 14_336) * 2
    );
    let plain = run(&llama_8b(&[]), &with(&[("engine", "vllm")]));
    assert_eq!(
        plain.kv_capacity_bytes - l.kv_capacity_bytes,
        bytes_of(&l, "lora") as i64
    );
}

/// gpt-oss-20b's experts in MXFP4 at tp 2: each rank's 1440 intermediate pads to 1472
/// (vLLM's triton MXFP4 backend on Hopper): 3 × 2880 × 32 × 32 experts × 24 layers
/// values = 212 336 640, at 17 B per 32 = 112 803 840 B, and the w13 biases' 2 × 32
/// values × 32 × 24 in bf16 = 98 304 B more than the checkpoint's share. On an A100
/// (Marlin) at tp 1, 2880 × 2880 pads to 3072 × 2944: 3 × (3072 × 2944 − 2880²) × 32 ×
/// 24 = 1 727 004 672 values → 917 471 232 B, and (2 × 64 + 192) × 32 × 24 bias values
/// in bf16 = 491 520 B.
#[test]
fn vllm_pads_mxfp4_experts_per_rank() {
    let pairs = [
        ("layers", "24"),
        ("hidden", "2880"),
        ("heads", "64"),
        ("kv-heads", "8"),
        ("head-dim", "64"),
        ("intermediate", "2880"),
        ("vocab", "201088"),
        ("experts", "32"),
        ("active-experts", "4"),
        ("format", "mxfp4"),
        ("tp", "2"),
        ("gpus", "2"),
    ];
    let (input, e) = crate::params::from_pairs(pairs);
    assert!(e.is_empty(), "{e:?}");
    let b = run(&input, &with(&[("engine", "vllm")]));
    let w = b.lines.iter().find(|l| l.key == "weights").unwrap();
    assert_eq!(w.inputs["mxfp4-padding"], "112902144");
    // Under expert parallelism a rank's experts keep their whole 2880, already a
    // multiple of 64: no padding; under dp 2 without it each expert is halved as at
    // tp 2, and padded alike.
    let b = run(
        &input,
        &with(&[("engine", "vllm"), ("enable-expert-parallel", "true")]),
    );
    let w = b.lines.iter().find(|l| l.key == "weights").unwrap();
    assert_eq!(w.inputs["mxfp4-padding"], "0");
    let (tp1, _) = crate::params::from_pairs(
        pairs
            .iter()
            .copied()
            .filter(|(k, _)| *k != "tp" && *k != "gpus"),
    );
    let b = run(&tp1, &with(&[("engine", "vllm")]));
    let w = b.lines.iter().find(|l| l.key == "weights").unwrap();
    assert_eq!(w.inputs["mxfp4-padding"], "0");
    let b = run(&tp1, &with(&[("engine", "vllm"), ("data-parallel-size", "2")]));
    let w = b.lines.iter().find(|l| l.key == "weights").unwrap();
    assert_eq!(w.inputs["mxfp4-padding"], "112902144");
    let b = run(
        &tp1,
        &[
            ("engine", "vllm@0.19"),
            ("card", "a100-80gb"),
            ("max-model-len", "16000"),
        ],
    );
    let w = b.lines.iter().find(|l| l.key == "weights").unwrap();
    assert_eq!(w.inputs["mxfp4-padding"], "917962752");
}

#[test]
fn a_sparse_attention_models_indexer_keys_take_pool_room_per_token() {
    // DeepSeek-V3.2 (tests/cases): each token in vLLM's pool holds the MLA latent and
    // the indexer's key (DeepseekV32IndexerCache), so the pool's tokens are fewer than
    // the latent alone would give.
    let imported = crate::import::config::parse_config(include_str!(
        "../../../tests/cases/configs/deepseek-v3.2.json"
    ))
    .expect("config");
    let pairs: Vec<(&str, String)> = imported.pairs();
    let extra = [("tp", "8"), ("gpus", "8"), ("context", "8192")];
    let all = pairs
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .chain(extra.iter().copied());
    let (input, errors) = crate::params::from_pairs(all);
    assert!(errors.is_empty(), "{errors:?}");
    // The estimate in vLLM's layout (fp8 indexer keys); transformers' own (bf16 keys,
    // the estimate's default) is wider, and the pool does not take it.
    let one = estimate(&EstimateInput {
        context: Some(1),
        runtime: crate::arch::CacheRuntime::Serving,
        ..input.clone()
    })
    .expect("estimate");
    let held = estimate(&EstimateInput {
        context: Some(1),
        ..input.clone()
    })
    .expect("estimate");
    let of = |key: LineKey| {
        one.lines
            .iter()
            .find(|l| l.key == key)
            .map(|l| l.device_bytes)
            .unwrap_or(0)
    };
    let (latent, indexer) = (of(LineKey::KvCache), of(LineKey::KvCacheIndexer));
    assert!(
        latent > 0 && indexer > 0,
        "latent {latent}, indexer {indexer}"
    );
    let b = run(&input, &[("engine", "vllm"), ("card", "h200-141gb")]);
    assert_eq!(b.kv_bytes_per_token, latent + indexer);
    let wide = held
        .lines
        .iter()
        .find(|l| l.key == LineKey::KvCacheIndexer)
        .map_or(0, |l| l.device_bytes);
    // 61 layers × 128 × 2 B against 61 × 132 B per token.
    assert_eq!((wide, indexer), (61 * 256, 61 * 132));
}

/// Gemma-4-31B's shape: 50 sliding layers (16 KV heads × 256) and 10 global ones
/// (4 KV heads × 512). vLLM unifies the page sizes (`unify_kv_cache_spec_page_size`):
/// a sliding page is 16 tokens × 16 384 B, a global layer's 8 192 B per token take
/// 32-token blocks of the same 262 144 B. Six groups of ten layers; one request of
/// 8 192 tokens takes 8 192 / 32 = 256 global blocks and 5 × (8 192 / 16 + 1) sliding
/// ones; the pool reports 16 tokens per block of every group.
#[test]
fn vllm_unifies_the_page_of_layers_with_another_kv_shape() {
    let pairs = [
        ("layers", "60"),
        ("hidden", "5376"),
        ("heads", "32"),
        ("kv-heads", "16"),
        ("head-dim", "256"),
        ("intermediate", "21504"),
        ("vocab", "262144"),
        ("sliding-window", "1024"),
        ("sliding-layers", "50"),
        ("global-layers", "10"),
        ("global-kv-heads", "4"),
        ("global-head-dim", "512"),
        ("global-k-eq-v", "true"),
        ("tied-embeddings", "true"),
    ];
    let (input, errors) = crate::params::from_pairs(pairs.iter().copied());
    assert!(errors.is_empty(), "{errors:?}");
    let b = run(
        &input,
        &with(&[("engine", "vllm@0.19"), ("max-model-len", "8192")]),
    );
    assert_eq!(b.kv_bytes_per_token, 50 * 16_384 + 10 * 8_192);
    let group_block = 16 * 16_384 * 10;
    let blocks = u64::try_from(b.kv_capacity_bytes).unwrap() / group_block;
    assert_eq!(b.kv_capacity_tokens, blocks / 6 * 16);
    let per_request = 256 + 5 * (512 + 1);
    assert_eq!(b.max_sequences, blocks / per_request);
    assert!(b.assumptions.iter().any(|a| a.contains("6 groups")));
    // 0.27 reports max concurrency × max_model_len (vllm v0.22.0 `_report_kv_cache_config`):
    // the sliding groups' capped blocks no longer count as 16 tokens each.
    let b = run(
        &input,
        &with(&[("engine", "vllm"), ("max-model-len", "8192")]),
    );
    let blocks = u64::try_from(b.kv_capacity_bytes).unwrap() / group_block;
    assert_eq!(b.kv_capacity_tokens, blocks * 8192 / per_request);
    assert_eq!(b.max_sequences, blocks / per_request);
}

/// Gemma-3-12B's vision encoder profiling on an H100 (the calibration record's
/// settings): 8 192 ÷ 256 = 32 images of 3 × 896 × 896 bf16 pixel values and their
/// 32 × 256 embeddings of 3 840 stay allocated through the text forward and the
/// sampler, 217 055 232 B on top of the profile's peak.
#[test]
fn vllm_holds_the_encoders_dummy_batch_through_the_profile() {
    let imported = crate::import::config::parse_config(include_str!(
        "../../../tests/calibration/configs/gemma-3-12b.json"
    ))
    .expect("config");
    let pairs = imported.pairs();
    assert!(pairs.contains(&("mm-item-tokens", "256".to_string())));
    assert!(pairs.contains(&("mm-item-values", (3 * 896 * 896).to_string())));
    let read = |skip: bool| {
        let (input, errors) = crate::params::from_pairs(
            pairs
                .iter()
                .filter(|(k, _)| !skip || !k.starts_with("mm-item"))
                .map(|(k, v)| (*k, v.as_str())),
        );
        assert!(errors.is_empty(), "{errors:?}");
        input
    };
    let settings = [
        ("engine", "vllm"),
        ("card", "h100-sxm-80gb"),
        ("gpu-memory-utilization", "0.95"),
        ("max-model-len", "8192"),
    ];
    let with = run(&read(false), &settings);
    let without = run(&read(true), &settings);
    let held = 32 * (3 * 896 * 896 + 256 * 3840) * 2;
    assert_eq!(held, 217_055_232);
    let inputs = &with
        .lines
        .iter()
        .find(|l| l.key == "activation_peak")
        .unwrap()
        .inputs;
    assert_eq!(inputs["encoder-items"], "32");
    assert_eq!(inputs["encoder-held"], held.to_string());
    assert_eq!(
        bytes_of(&with, "activation_peak"),
        bytes_of(&without, "activation_peak") + held
    );
    // Four sequences of up to 32 images each (8 192 ÷ 256) would take 128: the
    // encoder budget's 32 still bounds the batch.
    let few = run(
        &read(false),
        &[settings.as_slice(), &[("max-num-seqs", "4")]].concat(),
    );
    let inputs = &few
        .lines
        .iter()
        .find(|l| l.key == "activation_peak")
        .unwrap()
        .inputs;
    assert_eq!(inputs["encoder-items"], "32");
    // A length shorter than one image still profiles one image per sequence (the
    // batched count given: by default vLLM caps it at 4 × 200 = 800 tokens, an encoder
    // budget of 3 images).
    let short = run(
        &read(false),
        &[
            ("engine", "vllm"),
            ("card", "h100-sxm-80gb"),
            ("max-model-len", "200"),
            ("max-num-seqs", "4"),
            ("max-num-batched-tokens", "8192"),
        ],
    );
    let inputs = &short
        .lines
        .iter()
        .find(|l| l.key == "activation_peak")
        .unwrap()
        .inputs;
    assert_eq!(inputs["encoder-items"], "4");
    let capped = run(
        &read(false),
        &[
            ("engine", "vllm"),
            ("card", "h100-sxm-80gb"),
            ("max-model-len", "200"),
            ("max-num-seqs", "4"),
        ],
    );
    let inputs = &capped
        .lines
        .iter()
        .find(|l| l.key == "activation_peak")
        .unwrap()
        .inputs;
    assert_eq!(inputs["max-num-batched-tokens"], "800");
    assert_eq!(inputs["encoder-items"], "3");
}

/// Qwen2-Audio-7B-Instruct (bf16) on one H100 SXM at `vllm serve`'s defaults (8192
/// batched tokens, 1024 sequences) with max-model-len 4096, by hand: a 30 s dummy clip
/// is 3000 feature frames and ((3000 − 1) ÷ 2 + 1 − 2) ÷ 2 + 1 = 750 tokens; the batch
/// holds min(8192 ÷ 750, 1024 × min(999, 4096 ÷ 750)) = min(10, 5120) = 10 clips.
/// - vLLM 0.19 (V1 runner): each clip's 128 × 3000 bf16 features (768 000 B), its
///   int32 mask (12 000 B) and its 750 × 4096 bf16 embeddings (6 144 000 B):
///   10 × 6 924 000 = 69 240 000 B, the pool 57 023 758 746 → 56 954 518 746 B;
/// - vLLM 0.27 (Model Runner V2, which frees the device batch once encoded): the
///   embeddings only, 61 440 000 B, the pool 58 384 357 786 → 58 322 917 786 B.
#[test]
fn vllm_holds_qwen2_audios_dummy_clips_through_the_profile() {
    let input = from_config("qwen2-audio-7b-instruct", &[("context", "4096")]);
    assert!(input.arch.is_some_and(|a| a.audio.is_some()));
    let mut bare = input.clone();
    if let Some(a) = bare.arch.as_mut() {
        a.audio = None;
    }
    assert_eq!(profile::qwen2_audio_tokens(profile::QWEN2_AUDIO_FRAMES), 750);
    let card = ("card", "h100-sxm-80gb");
    for (engine, version, held, before, after) in [
        (
            "vllm@0.19",
            "0.19",
            10 * (128 * 3000 * 2 + 3000 * 4 + 750 * 4096 * 2),
            57_023_758_746u64,
            56_954_518_746u64,
        ),
        (
            "vllm@0.27",
            "0.27 (Model Runner V2)",
            10 * 750 * 4096 * 2,
            58_384_357_786,
            58_322_917_786,
        ),
    ] {
        let with = run(&input, &[("engine", engine), card]);
        let without = run(&bare, &[("engine", engine), card]);
        assert_eq!(with.version, version);
        assert_eq!(input_of(&with, "activation_peak", "encoder-items"), "10");
        assert_eq!(input_of(&with, "activation_peak", "encoder-held"), held.to_string());
        assert_eq!(
            bytes_of(&with, "activation_peak"),
            bytes_of(&without, "activation_peak") + held,
            "{engine}"
        );
        assert_eq!(without.kv_capacity_bytes, before as i64, "{engine}");
        assert_eq!(with.kv_capacity_bytes, after as i64, "{engine}");
        assert_eq!(before - after, held);
        assert!(
            with.assumptions.iter().any(|a| a.contains("10 dummy clips of 30 s")),
            "{:?}",
            with.assumptions
        );
    }
    assert_eq!(69_240_000, 10 * (768_000 + 12_000 + 6_144_000));
    // A length shorter than one clip: one clip a sequence, the default batched count
    // capped at 4 × 600 = 2400 tokens (3 clips' budget).
    let short = run(
        &input,
        &[
            ("engine", "vllm@0.19"),
            card,
            ("max-model-len", "600"),
            ("max-num-seqs", "4"),
        ],
    );
    assert_eq!(input_of(&short, "activation_peak", "max-num-batched-tokens"), "2400");
    assert_eq!(input_of(&short, "activation_peak", "encoder-items"), "3");
    // The prompt's clip does not change what vLLM profiles; the rules say so.
    let given = run(
        &from_config(
            "qwen2-audio-7b-instruct",
            &[("context", "4096"), ("mm-audio-seconds", "5")],
        ),
        &[("engine", "vllm@0.19"), card],
    );
    assert_eq!(input_of(&given, "activation_peak", "encoder-items"), "10");
    assert!(
        given
            .assumptions
            .iter()
            .any(|a| a.contains("--mm-audio-seconds 5) is not read")),
        "{:?}",
        given.assumptions
    );
}

/// A scaled RoPE's cos/sin cache covers the positions its scaling reaches (yarn ×4
/// over 32 768 trained: 131 072 rows of 128 bf16 values), not only the trained ones.
#[test]
fn vllm_rotary_cache_reaches_as_far_as_the_scaling() {
    let plain = run(
        &llama_8b(&[("max-position", "32768")]),
        &with(&[("engine", "vllm")]),
    );
    let scaled = run(
        &llama_8b(&[("max-position", "32768"), ("rope-positions", "131072")]),
        &with(&[("engine", "vllm")]),
    );
    let cache = |b: &EngineBudget| {
        b.lines.iter().find(|l| l.key == "weights").unwrap().inputs["rotary-cache"].clone()
    };
    assert_eq!(cache(&plain), (32_768u64 * 128 * 2).to_string());
    assert_eq!(cache(&scaled), (131_072u64 * 128 * 2).to_string());
    assert_eq!(
        bytes_of(&scaled, "weights") - bytes_of(&plain, "weights"),
        (131_072 - 32_768) * 128 * 2
    );
}

/// vllm v0.22.0 `_set_cudagraph_sizes` and `initialize_cudagraph_keys`: the graphs
/// 0.27's V1 runner captures, by max_num_seqs, max_num_batched_tokens and the decode
/// query length (1 + speculative tokens).
#[test]
fn vllm_capture_sizes_follow_the_config() {
    // 1, 2, 4, 8…248 (31), 256…512 (17): 51 sizes; FULL decode sizes ≤ max_num_seqs.
    assert_eq!(vllm::capture_counts(1024, 8192, 1), (51, 51));
    assert_eq!(vllm::capture_counts(256, 2048, 1), (51, 35));
    // 8 sequences: sizes up to 16 (1, 2, 4, 8, 16); FULL up to 8.
    assert_eq!(vllm::capture_counts(8, 8192, 1), (5, 4));
    // max_num_batched_tokens within the cap is captured too: 100 → 1, 2, 4, 8…96, 100.
    assert_eq!(vllm::capture_counts(1024, 100, 1), (16, 16));
    // Two speculative tokens: decode query length 3, sizes up to 4 × 3 × 2 = 24 (1, 2,
    // 4, 8, 16, 24); FULL from 3 up to 3 × 4 = 12 (4, 8).
    assert_eq!(vllm::capture_counts(4, 8192, 3), (6, 2));
}

/// Qwen3-Next (Gated DeltaNet beside attention) under the default rules: 0.27 pages it
/// as 0.10 did (`_align_hybrid_block_size`: attention blocks raised to the state page,
/// groups of the smaller layer count), and reports max concurrency × max_model_len.
#[test]
fn vllm_pages_hybrid_state_models_in_every_v1_release() {
    let input = from_config("qwen3-next-80b-a3b", &[("tp", "2"), ("gpus", "2")]);
    let pairs = [("card", "h200-141gb"), ("max-model-len", "262144")];
    let with_engine = |e: &'static str| {
        let mut p = pairs.to_vec();
        p.push(("engine", e));
        run(&input, &p)
    };
    let old = with_engine("vllm@0.10");
    let new = with_engine("vllm@0.27");
    assert_eq!(new.version, "0.27 (Model Runner V1)");
    // 0.29 runs it on Model Runner V2, paged alike.
    let newest = with_engine("vllm");
    assert_eq!(newest.version, "0.29 (Model Runner V2)");
    assert_eq!(newest.block_size, old.block_size);
    assert!(old.block_size > 16, "{}", old.block_size);
    assert_eq!(new.block_size, old.block_size);
    assert_eq!(with_engine("vllm@0.19").block_size, old.block_size);
    assert!(
        new.assumptions
            .iter()
            .any(|a| a.contains("hybrid KV cache"))
    );
    // Tokens: ⌊blocks × max_model_len ÷ blocks per request⌋, not whole blocks per group.
    assert!(new.max_sequences >= 1);
    let tokens = new.kv_capacity_tokens;
    assert!(tokens >= new.max_sequences * 262_144, "{tokens}");
    assert!(tokens < (new.max_sequences + 1) * 262_144, "{tokens}");
}

/// The buffers tensor parallelism adds outside torch, which SGLang's rule assumes too
/// (`request::COMM_BUFFERS_MIB`), are this table's tp ≥ 2 less tp 1 of the 0.19 rules.
#[test]
fn the_shared_communication_buffers_are_the_019_tables() {
    let r = &releases::RULES[0];
    assert_eq!(r.label, "0.19");
    assert_eq!(
        r.non_torch_mib[1] - r.non_torch_mib[0],
        crate::engine::request::COMM_BUFFERS_MIB
    );
}

/// `--cpu-offload-gb 3` on Llama-3.1-8B bf16, by hand: a layer's parameters in
/// vLLM's order are qkv_proj 6144 × 4096 × 2 = 50 331 648, o_proj 33 554 432,
/// gate_up_proj 2 × 14 336 × 4096 × 2 = 234 881 024, down_proj 117 440 512 and two
/// norms of 8192: 436 224 000 B. The budget int(3 × 1024³) = 3 221 225 472 B: 7
/// layers (3 053 568 000), then qkv and o of layer 7 (3 137 454 080, still below),
/// then its gate_up, which passes it: 3 372 335 104 B offloaded, whole parameters.
#[test]
fn vllm_cpu_offload_takes_whole_parameters_from_the_first_layer() {
    let base = run(&llama_8b(&[]), &with(&[("engine", "vllm@0.19")]));
    let off = run(
        &llama_8b(&[]),
        &with(&[("engine", "vllm@0.19"), ("cpu-offload-gb", "3")]),
    );
    let moved = 7 * 436_224_000 + 50_331_648 + 33_554_432 + 234_881_024;
    assert_eq!(moved, 3_372_335_104);
    assert_eq!(bytes_of(&base, "weights") - bytes_of(&off, "weights"), moved);
    assert_eq!(bytes_of(&off, "host_weights"), moved);
    assert_eq!(off.host_weights_bytes, Some(moved));
    assert_eq!(off.kv_capacity_bytes, base.kv_capacity_bytes + moved as i64);
    // Under tp 2 each GPU offloads its own shard's parameters up to the budget, and
    // the node holds both GPUs'.
    let tp = run(
        &llama_8b(&[("tp", "2"), ("gpus", "2")]),
        &with(&[("engine", "vllm@0.19"), ("cpu-offload-gb", "3")]),
    );
    let shard = 436_224_000 / 2 + 8192; // the norms are not sharded
    let per_gpu = bytes_of(&tp, "host_weights") / 2;
    assert!(per_gpu >= 3 << 30 && per_gpu < (3 << 30) + shard, "{per_gpu}");
    // More than the layers hold: every layer's parameters, never the embeddings or head.
    let all = run(
        &llama_8b(&[]),
        &with(&[("engine", "vllm@0.19"), ("cpu-offload-gb", "100")]),
    );
    assert_eq!(bytes_of(&all, "host_weights"), 32 * 436_224_000);
    // A budget that is not a number is refused naming the flag.
    assert!(
        crate::engine::from_pairs([("engine", "vllm"), ("cpu-offload-gb", "lots")])
            .1
            .iter()
            .any(|e| e.to_string().contains("cpu-offload-gb"))
    );
}

/// `--memory-in-use` release by release on the H100 above (85 027 979 264 B at 0.9:
/// 76 525 181 338 B requested): 0.19 sizes from the card's total, so 6 GiB elsewhere
/// leaves the pool alone (free at start-up 85 027 979 264 − 512 MiB − 6 GiB =
/// 78 047 543 296 B ≥ the share) and 8 GiB refuses the start (75 900 092 416 B free);
/// 0.8 counts it outside torch, byte for byte; 0.7 starts, and runs out of memory
/// allocating the cache once context + memory in use + share − the freed peak pass
/// the total.
#[test]
fn vllm_treats_memory_in_use_as_each_release_does() {
    let b = |engine: &str, gib: &str| {
        let mut f = vec![("engine", engine)];
        if !gib.is_empty() {
            f.push(("memory-in-use", gib));
        }
        run(&llama_8b(&[]), &with(&f))
    };
    let bare = b("vllm@0.19", "");
    let six = b("vllm@0.19", "6");
    assert_eq!(six.kv_capacity_bytes, bare.kv_capacity_bytes);
    assert_ne!(six.outcome, Outcome::Refused);
    let l = six.lines.iter().find(|l| l.key == "memory_in_use").unwrap();
    assert!(!l.subtracted && l.bytes == 6 * GIB);
    let eight = b("vllm@0.19", "8");
    assert_eq!(eight.outcome, Outcome::Refused);
    assert_eq!(eight.kv_capacity_bytes, 0);
    assert!(
        eight.warnings.iter().any(|w| w.contains("Free memory on device (70.69 GiB/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB)") && w.contains("0.89 at most")),
        "{:?}",
        eight.warnings
    );
    assert_eq!(b("vllm", "8").outcome, Outcome::Refused);
    let v08 = b("vllm@0.8", "6");
    assert_eq!(
        b("vllm@0.8", "").kv_capacity_bytes - v08.kv_capacity_bytes,
        (6 * GIB) as i64
    );
    let v07 = b("vllm@0.7", "6");
    assert_eq!(v07.kv_capacity_bytes, b("vllm@0.7", "").kv_capacity_bytes);
    assert_ne!(v07.outcome, Outcome::Refused);
    let v07 = b("vllm@0.7", "12");
    assert_eq!(v07.outcome, Outcome::Refused);
    assert!(v07.warnings.iter().any(|w| w.contains("CUDA out of memory allocating the KV cache")));
}

/// vLLM's pooling runner on an encoder (`vllm serve BAAI/bge-large-en-v1.5 --runner
/// pooling`): no KV cache and no profile, so the rule is the card's torch total less
/// what the process holds at its largest batch. On an L4 (torch total derived:
/// 23 910 678 528 B): `vllm serve`'s 2048 batched tokens (max(2048, 512), ≤ 256 × 512),
/// 256 sequences. The forward: attention 2 × 2048 × 1024 × 2 + 4 × 2048 × 1024 × 2 =
/// 25 165 824 B, MLP 2 × 2048 × 1024 × 2 + 2 × 2048 × 4096 × 2 = 41 943 040 B, + the
/// cuBLAS workspace 8 519 680 B = 50 462 720 B; 256 MiB outside torch; 86 CUDA graphs
/// (51 PIECEWISE, 35 FULL) × (4 MiB + 192 KiB × 24) = 766 509 056 B. Room:
/// 23 910 678 528 − 536 870 912 − 670 283 776 − 50 462 720 − 268 435 456 −
/// 766 509 056 = 21 618 116 608 B, 4 sequences of 512 in a batch. The share
/// ⌈0.9 × total⌉ is only the start-up check (not subtracted).
#[test]
fn vllm_pooling_runner_serves_bge_large_without_a_pool() {
    let input = from_config("bge-large-en-v1.5", &[]);
    for (card, total) in [("l4-24gb", 23_910_678_528i64), ("a10-24gb", 23_904_387_072)] {
        let b = run(&input, &[("engine", "vllm"), ("card", card)]);
        assert_eq!(b.capacity_bytes as i64, total);
        assert_eq!(bytes_of(&b, "activation_peak"), 50_462_720);
        assert_eq!(bytes_of(&b, "cuda_graphs"), 766_509_056);
        assert_eq!(
            b.kv_capacity_bytes,
            total - 536_870_912 - 670_283_776 - 50_462_720 - 268_435_456 - 766_509_056,
            "{card}"
        );
        assert_eq!(b.batch_tokens, Some(2048));
        assert_eq!(b.max_sequences, 4);
        assert_eq!(b.kv_capacity_tokens, 0);
        assert_eq!(b.outcome, Outcome::Fits);
        let share = b.lines.iter().find(|l| l.key == "requested").expect("share");
        assert!(!share.subtracted);
    }
    assert_eq!(
        run(&input, &[("engine", "vllm"), ("card", "l4-24gb")]).kv_capacity_bytes,
        21_618_116_608
    );
}

/// bge-m3 at 8192 tokens: an encoder cannot chunk its prefill, so vLLM raises the
/// batched tokens to max-model-len (8192); the forward 2 × 8192 × 1024 × 2 + 2 × 8192 ×
/// 4096 × 2 + 8 519 680 = 176 291 840 B; on an L4 23 910 678 528 − 536 870 912 −
/// 1 135 509 504 − 176 291 840 − 268 435 456 − 766 509 056 = 21 027 061 760 B, one
/// sequence a batch. A batch below max-model-len is vLLM's own refusal
/// (`verify_max_model_len`), and so is an encoder under a release whose encoder
/// support was not read; the decoder's pool flags are said to be ignored.
#[test]
fn vllm_pooling_runner_batches_bge_m3_at_its_length() {
    let input = from_config("bge-m3", &[]);
    let b = run(
        &input,
        &[("engine", "vllm"), ("card", "l4-24gb"), ("max-model-len", "8192")],
    );
    assert_eq!(b.batch_tokens, Some(8192));
    assert_eq!(bytes_of(&b, "activation_peak"), 176_291_840);
    assert_eq!(b.kv_capacity_bytes, 21_027_061_760);
    assert_eq!(b.max_sequences, 1);
    let b = run(
        &input,
        &[
            ("engine", "vllm"),
            ("card", "l4-24gb"),
            ("max-model-len", "8192"),
            ("max-num-batched-tokens", "4096"),
            ("kv-cache-memory-bytes", "1000000000"),
        ],
    );
    assert_eq!(b.outcome, Outcome::Refused);
    assert!(b.warnings.iter().any(|w| w.contains("smaller than max-model-len")));
    assert!(
        b.warnings
            .iter()
            .any(|w| w.contains("--kv-cache-memory-bytes is ignored"))
    );
    let est = crate::estimate::estimate(&input).unwrap();
    let err = crate::engine::budget(
        &input,
        &est,
        &engine(&[("engine", "vllm@0.10"), ("card", "l4-24gb")]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("vllm@0.27 and vllm@0.19 only"), "{err}");
    // An engine that sizes a decoder's pool refuses an encoder, naming those that serve it.
    let err = crate::engine::budget(
        &input,
        &est,
        &engine(&[("engine", "sglang"), ("card", "l4-24gb")]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("name vllm or tei"), "{err}");
}

/// vLLM over two unequal cards (`--pp 2`), Llama-3.1-8B bf16 at 0.9, by hand:
/// - stages of 16 layers (`get_pp_indices`); GPU 0 (A100 80GB) loads the embeddings and
///   layers 0–15, GPU 1 (A100 40GB) layers 16–31, the final norm and the head:
///   8 030 261 248 B each, the one-card weights 16 060 522 496 between them;
/// - GPU 0 profiles the forward only (2 048 tokens on an A100: 176 673 792 B + cuBLAS's
///   8 519 680); GPU 1 also samples (544 567 296 B in all) and keeps the received
///   activations' buffers, 2 × 2 048 × 4 096 × 2 = 33 554 432 B;
/// - GPU 1: ⌈42 505 076 736 × 0.9⌉ = 38 254 569 063 − 8 030 261 248 − 544 567 296
///   − 33 554 432 − 72 MiB outside torch = 29 570 688 615 B, blocks of 16 × 65 536 B
///   (its 16 layers' half of 131 072 B a token): 28 200, fewer than GPU 0's, so the
///   engine's 28 200 blocks = 451 200 tokens, 28 sequences of 16 000.
#[test]
fn vllm_pipeline_stages_over_unequal_cards_keep_the_fewest_blocks() {
    let input = llama_8b(&[("pp", "2"), ("gpus", "2")]);
    let pairs = [
        ("engine", "vllm@0.19"),
        ("card", "a100-80gb,a100-40gb"),
        ("max-model-len", "16000"),
    ];
    let b = run(&input, &pairs);
    assert_eq!(b.devices.len(), 2);
    let (d0, d1) = (&b.devices[0], &b.devices[1]);
    assert_eq!(d0.layers, "layers 0–15 + embeddings");
    assert_eq!(d1.layers, "layers 16–31 and the output layer");
    assert_eq!(d0.weights_bytes, 8_030_261_248);
    assert_eq!(d0.weights_bytes + d1.weights_bytes, 16_060_522_496);
    assert_eq!(d0.compute_bytes, 176_673_792 + 8_519_680);
    assert_eq!(d0.kv_bytes, 1000 * 16 * 65_536);
    assert!(d1.most_loaded && !d0.most_loaded);
    assert_eq!(b.card, "a100-40gb");
    assert_eq!(bytes_of(&b, "budget"), 38_254_569_063);
    assert_eq!(bytes_of(&b, "activation_peak"), 544_567_296);
    assert_eq!(bytes_of(&b, "pp_buffers"), 33_554_432);
    assert_eq!(b.kv_capacity_bytes, 29_570_688_615);
    assert_eq!(b.kv_capacity_tokens, 451_200);
    assert_eq!(b.max_sequences, 28);
    assert_eq!(d1.headroom_bytes, 29_570_688_615 - 1_048_576_000);
    assert!(b.assumptions[0].contains("16, 16"), "{:?}", b.assumptions);

    // The smaller card first: it binds, without the sampler or the buffers.
    let swapped = run(
        &input,
        &[
            ("engine", "vllm@0.19"),
            ("card", "a100-40gb,a100-80gb"),
            ("max-model-len", "16000"),
        ],
    );
    assert!(swapped.devices[0].most_loaded);
    assert_eq!(
        swapped.kv_capacity_bytes,
        38_254_569_063 - 8_030_261_248 - (176_673_792 + 8_519_680) - 75_497_472
    );
    assert_eq!(swapped.kv_capacity_tokens, 28_575 * 16);

    // VLLM_PP_LAYER_PARTITION moves layers to the larger card.
    let moved = run(
        &input,
        &[
            ("engine", "vllm@0.19"),
            ("card", "a100-80gb,a100-40gb"),
            ("max-model-len", "16000"),
            ("pp-layer-partition", "24,8"),
        ],
    );
    assert_eq!(moved.devices[0].layers, "layers 0–23 + embeddings");
    assert!(moved.kv_capacity_tokens > b.kv_capacity_tokens);
    // The 80 GB card now binds: the pool's bytes per token are its 24 layers'.
    assert!(moved.devices[0].most_loaded);
    assert_eq!(moved.kv_bytes_per_token, 131_072 / 4 * 3);
    assert_eq!(b.kv_bytes_per_token, 65_536);
}

/// On equal cards the stage rule's binding GPU is the one-card rule's device under
/// `--pp`: the last stage, which samples and keeps the buffers for the received
/// activations (2 × 8 192 tokens × 4 096 × 2 B on an H100).
#[test]
fn vllm_stages_on_equal_cards_are_the_one_card_rule_under_pp() {
    let input = llama_8b(&[("pp", "2"), ("gpus", "2")]);
    let one = run(&input, &with(&[("engine", "vllm@0.19")]));
    let two = run(
        &input,
        &[
            ("engine", "vllm@0.19"),
            ("card", "h100-sxm-80gb,h100-sxm-80gb"),
            ("gpu-memory-utilization", "0.9"),
            ("max-model-len", "16000"),
        ],
    );
    assert!(two.devices[1].most_loaded);
    assert_eq!(bytes_of(&one, "pp_buffers"), 2 * 8192 * 4096 * 2);
    assert_eq!(two.kv_capacity_bytes, one.kv_capacity_bytes);
    assert_eq!(two.kv_capacity_tokens, one.kv_capacity_tokens);
}

#[test]
fn vllm_over_several_cards_needs_one_card_per_gpu_of_its_stages() {
    let est_err = |extra: &[(&str, &str)], pairs: &[(&str, &str)]| {
        let input = llama_8b(extra);
        let est = estimate(&input).expect("estimate");
        budget(&input, &est, &engine(pairs)).unwrap_err().to_string()
    };
    let cards = [
        ("engine", "vllm"),
        ("card", "a100-80gb,a100-40gb"),
        ("max-model-len", "4096"),
    ];
    let e = est_err(&[("gpus", "2"), ("tp", "2")], &cards);
    assert!(e.contains("--pp 1") || e.contains("give --pp"), "{e}");
    let e = est_err(
        &[("gpus", "4"), ("pp", "4")],
        &cards,
    );
    assert!(e.contains("2 cards for tp 1 × pp 4"), "{e}");
    let (_, errors) = from_pairs([("engine", "tgi"), ("card", "a100-80gb,a100-40gb")]);
    assert!(errors.iter().any(|e| e.to_string().contains("--engine vllm")), "{errors:?}");
}

/// 0.27 takes what stays allocated as a drop in free memory, which sees the caching
/// allocator's segments around the weights: Llama-3.1-8B's matrices and its bf16
/// rotary cache (131 072 × 128 × 2 = 32 MiB) are whole multiples of 2 MiB, its 65 norms
/// of 8 KiB share one 2 MiB small-pool segment: 2 097 152 − 532 480 = 1 564 672 B,
/// taken off the pool. 0.19 sums torch's allocated bytes: no such line.
#[test]
fn vllm_027_counts_the_weights_segments() {
    let now = run(&llama_8b(&[]), &with(&[("engine", "vllm@0.27")]));
    assert_eq!(bytes_of(&now, "load_rounding"), 1_564_672);
    let before = run(&llama_8b(&[]), &with(&[("engine", "vllm@0.19")]));
    assert!(before.lines.iter().all(|l| l.key != "load_rounding"));
    let offloaded = run(
        &llama_8b(&[]),
        &with(&[("engine", "vllm@0.27"), ("cpu-offload-gb", "4")]),
    );
    assert!(offloaded.lines.iter().all(|l| l.key != "load_rounding"));
}

/// bitsandbytes 4-bit under vLLM's profile, by hand (A100: 2 048 batched tokens).
/// Llama-3.1-8B in bf16: the widest phase is gate_up's gate shard, its dequantised
/// weight 14 336 × 4 096 × 2 = 117 440 512 B beside its output 2 048 × 14 336 × 2 =
/// 58 720 256 B: 176 160 768 B. In fp16 the input's bf16 copy and the dequantised
/// weight's cast add: down_proj holds 2 048 × 14 336 × 2 = 58 720 256 B of bf16 input
/// and two copies of its weight, 234 881 024 B: 293 601 280 B. Mixtral's shape at tp 2
/// (nf4-dq): every expert's gate-up 8 × 2 × 7 168 × 4 096 × 2 = 939 524 096 B, down
/// 469 762 048 B and down's fp32 absmax 8 × 7 168 × 4 096 ÷ 64 × 4 = 14 680 064 B.
#[test]
fn vllm_bitsandbytes_profile_holds_the_dequantised_weights() {
    let on = |extra: &[(&str, &str)], engine: &str| {
        let b = run(
            &llama_8b(extra),
            &with(&[("engine", engine), ("card", "a100-80gb")]),
        );
        let l = b.lines.iter().find(|l| l.key == "activation_peak").unwrap();
        (
            l.inputs["bnb-dequantised"].parse::<u64>().unwrap(),
            l.inputs["forward"].parse::<u64>().unwrap(),
            l.source.clone(),
        )
    };
    let (bf16, fwd, _) = on(&[], "vllm@0.19");
    assert_eq!(bf16, 0);
    let (nf4, fwd_nf4, src) = on(&[("format", "nf4")], "vllm@0.19");
    assert_eq!(nf4, 176_160_768);
    assert_eq!(fwd_nf4, fwd + nf4);
    assert!(src.contains("bitsandbytes.py"));
    let (fp16, _, _) = on(&[("format", "nf4"), ("compute-dtype", "fp16")], "vllm@0.19");
    assert_eq!(fp16, 293_601_280);
    let preset = crate::presets::find("mixtral-8x7b").expect("preset");
    let mixtral = preset.pairs.iter().copied().chain([
        ("format", "nf4-dq"),
        ("tp", "2"),
        ("gpus", "2"),
    ]);
    let (input, e) = crate::params::from_pairs(mixtral);
    assert!(e.is_empty(), "{e:?}");
    let b = run(&input, &with(&[("engine", "vllm"), ("card", "a100-80gb")]));
    let l = b.lines.iter().find(|l| l.key == "activation_peak").unwrap();
    assert_eq!(
        l.inputs["bnb-dequantised"],
        (939_524_096u64 + 469_762_048 + 14_680_064).to_string()
    );
    // Before 0.10 vLLM has no bitsandbytes MoE method: refused, naming the release.
    let est = estimate(&input).unwrap();
    let old = budget(
        &input,
        &est,
        &engine(&[
            ("engine", "vllm@0.8"),
            ("card", "a100-80gb"),
            ("max-model-len", "4096"),
        ]),
    );
    let err = old.expect_err("refused").to_string();
    assert!(err.contains("0.10"), "{err}");
}

/// whisper-large-v3 (fp16) on one H100 SXM at `vllm serve`'s defaults (0.9, 8192
/// batched tokens, 1024 sequences; max-model-len 448, its `max_target_positions`),
/// by hand, vLLM 0.19:
/// - requested ⌈85 027 979 264 × 0.9⌉ = 76 525 181 338 B; weights 3 087 226 880 B as
///   vLLM places them (with its 122 880 zero k biases; no rotary cache: learned
///   positions);
/// - profile: the sampler phase over 1024 rows of 51 866 (logits padded to 51 904 × 2
///   B = 106 299 392, 12 B a row element = 637 329 408, triton rows 132 × 51 866 × 4
///   = 27 385 248, hidden states (8192 + 2048) × 1280 × 2 = 26 214 400: 797 228 448)
///   above the decoder's forward, + 5 clips held (8192 ÷ 1500) × (128 × 3000 + 1500 ×
///   1280) × 2 B = 23 040 000, + cuBLAS 32 MiB = 853 822 880 B; outside torch 256 MiB;
/// - KV = 76 525 181 338 − 3 087 226 880 − 853 822 880 − 268 435 456 = 72 315 696 122
///   B; a block is 16 tokens × 32 layers × 2 × 20 heads × 64 × 2 B = 2 621 440 B
///   (one group's layers): 27 586 blocks, "GPU KV cache size" 27 586 ÷ 2 groups × 16
///   = 220 688 tokens; a request counted as ⌈448 ÷ 16⌉ + ⌈8192 ÷ 16⌉ = 28 + 512 = 540
///   blocks: concurrency 51 (51.09×).
///
/// At tp 2 each rank keeps 1 618 524 160 B of weights and 10 heads (a block of
/// 1 310 720 B), NCCL's 2140 MiB outside torch: 71 808 881 658 B, 54 785 blocks,
/// 438 272 tokens, 101 requests. vLLM 0.27 (Model Runner V2, the allocator's segments
/// counted) prints max concurrency × 448 as its tokens.
#[test]
fn vllm_whisper_large_v3_on_h100_matches_the_hand_derivation() {
    let whisper = |tp: &str| from_config("whisper-large-v3", &[("tp", tp), ("gpus", tp)]);
    let card = ("card", "h100-sxm-80gb");
    let b = run(&whisper("1"), &[("engine", "vllm@0.19"), card]);
    assert_eq!(b.max_model_len, 448);
    assert_eq!(bytes_of(&b, "budget"), 76_525_181_338);
    // The estimate's 3 086 981 120 B and vLLM's zero k biases, (32 + 2 × 32) × 1280 × 2
    // B (vLLM 0.15.1 printed "Model loading took 2.88 GiB" for it).
    assert_eq!(bytes_of(&b, "weights"), 3_086_981_120 + 245_760);
    let sampler = 1024 * 51_904 * 2 + 1024 * 51_866 * 12 + 132 * 51_866 * 4 + 10_240 * 1280 * 2;
    assert_eq!(sampler, 797_228_448);
    let held = 5 * (128 * 3000 + 1500 * 1280) * 2;
    assert_eq!(bytes_of(&b, "activation_peak"), sampler + held + 32 * MIB);
    assert_eq!(bytes_of(&b, "non_torch"), 256 * MIB);
    let pool = 76_525_181_338 - 3_087_226_880 - (sampler + held + 32 * MIB) - 256 * MIB;
    assert_eq!(b.kv_capacity_bytes, pool as i64);
    assert_eq!(pool, 72_315_696_122);
    let block = 16 * 32 * 2 * 20 * 64 * 2;
    assert_eq!(b.kv_bytes_per_token * 16, block);
    let blocks = pool / block;
    assert_eq!(blocks, 27_586);
    assert_eq!(b.kv_capacity_tokens, blocks / 2 * 16);
    assert_eq!(b.kv_capacity_tokens, 220_688);
    assert_eq!(b.max_sequences, blocks / (28 + 512));
    assert_eq!(b.max_sequences, 51);
    // One request as vLLM counts it: 540 blocks; the margin is the pool less them.
    assert_eq!(b.margin_bytes, (pool - 540 * block) as i64);
    assert_eq!(b.outcome, Outcome::Fits);
    assert!(b.assumptions.iter().any(|a| a.contains("holds 122")), "{:?}", b.assumptions);

    let b2 = run(&whisper("2"), &[("engine", "vllm@0.19"), card]);
    assert_eq!(bytes_of(&b2, "weights"), 1_618_524_160);
    assert_eq!(bytes_of(&b2, "non_torch"), 2140 * MIB);
    let pool2 = 76_525_181_338 - 1_618_524_160 - (sampler + held + 32 * MIB) - 2140 * MIB;
    assert_eq!(b2.kv_capacity_bytes, pool2 as i64);
    let blocks2 = pool2 / (block / 2);
    assert_eq!((blocks2, b2.kv_capacity_tokens, b2.max_sequences), (54_785, 438_272, 101));

    // 0.27: the same cut; its weights measured by the allocator's segments (the
    // replay's tensors are the weights, vLLM's zero k biases and proj_out's own head,
    // dropped by tie_weights), its tokens max concurrency × 448.
    for (tp, tensors) in [("1", 3_220_101_120u64), ("2", 1_684_961_280)] {
        let b = run(&whisper(tp), &[("engine", "vllm@0.27"), card]);
        assert_eq!(b.version, "0.27 (Model Runner V2)");
        let l = b.lines.iter().find(|l| l.key == "load_rounding").expect("rounding");
        assert!(l.formula.contains(&format!("for {tensors} B of parameters")), "{}", l.formula);
        assert!(l.formula.contains("32 encoder layers, 128 mel bins"), "{}", l.formula);
        let blocks = u64::try_from(b.kv_capacity_bytes).expect("pool") / (b.kv_bytes_per_token * 16);
        assert_eq!(b.kv_capacity_tokens, blocks * 448 / 540, "tp {tp}");
        assert_eq!(b.max_sequences, blocks / 540, "tp {tp}");
    }
    let (k1, k2) = (3_086_981_120u64, 1_618_524_160u64);
    assert_eq!(3_220_101_120 - k1, 122_880 * 2 + 51_904 * 1280 * 2);
    // Over tp the placement already holds the zero biases.
    assert_eq!(1_684_961_280 - k2, 25_952 * 1280 * 2);
}

/// Whisper on an H100 at max-num-batched-tokens 2048 (a smaller card's default): one
/// clip profiled, and a request counted as 28 + 128 blocks, as vLLM 0.15.1 printed
/// for whisper-large-v3 on a 24 GB card (10.14 GiB: "GPU KV cache size: 33,216
/// tokens", "Maximum concurrency for 448 tokens per request: 26.62x", that is 4153
/// blocks ÷ 156).
#[test]
fn vllm_whisper_counts_the_batched_tokens_as_its_cross_attention_blocks() {
    let input = from_config("whisper-large-v3", &[]);
    let b = run(
        &input,
        &[("engine", "vllm@0.19"), ("card", "h100-sxm-80gb"), ("max-num-batched-tokens", "2048")],
    );
    let l = b.lines.iter().find(|l| l.key == "activation_peak").expect("peak");
    assert!(l.inputs.iter().any(|(k, v)| k == "encoder-items" && v == "1"), "{:?}", l.inputs);
    let blocks = u64::try_from(b.kv_capacity_bytes).expect("pool") / 2_621_440;
    assert_eq!(b.max_sequences, blocks / 156);
    assert_eq!(4153 / 2 * 16, 33_216);
    // With --max-num-seqs 4 and no batched count given, vLLM's default batched count is
    // at most 4 × 448 = 1792 (`_set_default_max_num_seqs_and_batched_tokens_args`): a
    // request counted as 28 + 112 blocks.
    let b = run(
        &input,
        &[
            ("engine", "vllm"),
            ("card", "h100-sxm-80gb"),
            ("max-num-seqs", "4"),
        ],
    );
    let blocks = u64::try_from(b.kv_capacity_bytes).expect("pool") / 2_621_440;
    assert_eq!(b.max_sequences, blocks / 140);
    assert_eq!(b.kv_capacity_tokens, blocks * 448 / 140);
    // At 3 sequences the default is 1344 tokens, below one clip's 1500: vLLM refuses
    // to start (its encoder budget runs without chunked multimodal input).
    let b = run(
        &input,
        &[
            ("engine", "vllm"),
            ("card", "h100-sxm-80gb"),
            ("max-num-seqs", "3"),
        ],
    );
    assert_eq!(b.outcome, Outcome::Refused);
    assert!(
        b.warnings.iter().any(|w| w.contains("(1344)")),
        "{:?}",
        b.warnings
    );
    // A length past the decoder's 448 positions: vLLM refuses to start.
    let b = run(
        &input,
        &[
            ("engine", "vllm@0.19"),
            ("card", "h100-sxm-80gb"),
            ("max-model-len", "1000"),
        ],
    );
    assert_eq!(b.outcome, Outcome::Refused);
    assert!(
        b.warnings
            .iter()
            .any(|w| w.contains("max_target_positions=448")),
        "{:?}",
        b.warnings
    );
}

/// Other encoder-decoders, other releases and other engines stay refused, naming why.
#[test]
fn vllm_serves_whisper_only_and_only_from_0_19() {
    let card = ("card", "h100-sxm-80gb");
    let whisper = from_config("whisper-large-v3", &[]);
    let err = |input: &EstimateInput, pairs: &[(&str, &str)]| {
        let est = estimate(input).expect("estimate");
        budget(input, &est, &engine(pairs)).expect_err("refused").to_string()
    };
    for e in ["vllm@0.10", "vllm@0.8", "vllm@0.7", "vllm@0.6.4"] {
        let m = err(&whisper, &[("engine", e), card]);
        assert!(m.contains("was not read") && m.contains("vllm@0.19"), "{e}: {m}");
    }
    for e in ["sglang", "tgi", "llama.cpp", "transformers", "lmdeploy"] {
        let m = err(&whisper, &[("engine", e), card]);
        assert!(m.contains("encoder-decoder") && m.contains("not read"), "{e}: {m}");
    }
    let m = err(
        &whisper,
        &[("engine", "vllm"), card, ("speculative-method", "ngram"), ("num-speculative-tokens", "2")],
    );
    assert!(m.contains("over Whisper") && m.contains("not modelled"), "{m}");
    let bart = r#"{"vocab_size": 50265, "max_position_embeddings": 1024, "encoder_layers": 6, "encoder_ffn_dim": 3072, "decoder_layers": 6, "decoder_ffn_dim": 3072, "d_model": 768, "decoder_attention_heads": 12, "model_type": "bart"}"#;
    let cfg = crate::import::config::parse_config(bart).expect("config");
    let own = cfg.pairs();
    let bart = crate::params::from_pairs(
        own.iter().map(|(k, v)| (*k, v.as_str())).chain([("context", "128")]),
    )
    .0;
    for e in ["vllm", "vllm@0.19"] {
        let m = err(&bart, &[("engine", e), card]);
        assert!(m.contains("no other encoder-decoder"), "{e}: {m}");
    }
}

/// The budget of `input` under `pairs` on the H100, or its refusal.
fn try_run(input: &EstimateInput, pairs: &[(&str, &str)]) -> Result<EngineBudget, EstimateError> {
    let est = estimate(input).expect("estimate");
    budget(input, &est, &engine(&with(pairs)))
}

fn input_of<'a>(b: &'a EngineBudget, line: &str, key: &str) -> &'a str {
    let l = b.lines.iter().find(|l| l.key == line).expect("line");
    l.inputs.get(key).map_or("", |v| v.as_str())
}

/// DeepSeek-V2-Lite (bf16, 27 layers, the first dense, 64 routed experts of
/// 2048 × 1408, top-6) at dp 2 / tp 1 on an H100, vLLM 0.19, by hand:
/// - routed experts: 26 × 64 × 3 × 2048 × 1408 × 2 B = 28 789 702 656 B, all on the
///   rank at dp 1; at dp 2 each expert is split over tp × dp = 2 ranks, and with
///   expert parallelism each rank holds 32 experts whole: 14 394 851 328 B either way;
/// - fused-MoE workspace (triton experts, M × top-k × max(I, H) + M × top-k ×
///   max(2 I, H), 2 B): at dp 1 M = 8192, I = 1408: 201 326 592 + 276 824 064 =
///   478 150 656; at dp 2 the layer sees both ranks' 8192 tokens, M = 16 384: without
///   EP I = 704: 402 653 184 + 402 653 184 = 805 306 368; with EP I = 1408:
///   402 653 184 + 553 648 128 = 956 301 312;
/// - the all-gather: 2 × 16 384 × 2048 × 2 + 16 384 × 64 × 4 + 16 384 × 6 × 8 =
///   139 198 464 B;
/// - outside torch: 256 MiB + 2 × 1884 MiB (the DP and EP groups' communicators,
///   each assumed as tp ≥ 2's step on NVLink) = 4 219 469 824 B.
#[test]
fn vllm_data_and_expert_parallel_split_deepseek_v2_lite_per_rank() {
    let m = from_config("deepseek-v2-lite", &[]);
    let one = run(&m, &with(&[("engine", "vllm@0.19")]));
    assert_eq!(input_of(&one, "activation_peak", "moe-workspace"), "478150656");
    let dp = run(
        &m,
        &with(&[("engine", "vllm@0.19"), ("data-parallel-size", "2")]),
    );
    let ep = run(
        &m,
        &with(&[
            ("engine", "vllm@0.19"),
            ("data-parallel-size", "2"),
            ("enable-expert-parallel", "true"),
        ]),
    );
    for (b, ws, local, moe_tp) in [(&dp, "805306368", "64", "2"), (&ep, "956301312", "32", "1")] {
        assert_eq!(
            bytes_of(&one, "weights") - bytes_of(b, "weights"),
            14_394_851_328
        );
        assert_eq!(input_of(b, "weights", "experts-as-estimated"), "28789702656");
        assert_eq!(input_of(b, "weights", "experts-on-this-rank"), "14394851328");
        assert_eq!(input_of(b, "weights", "local-experts"), local);
        assert_eq!(input_of(b, "weights", "moe-tp"), moe_tp);
        assert_eq!(input_of(b, "activation_peak", "moe-workspace"), ws);
        assert_eq!(input_of(b, "activation_peak", "moe-rows"), "16384");
        assert_eq!(input_of(b, "activation_peak", "dp-gathered"), "139198464");
        assert_eq!(bytes_of(b, "non_torch"), 4_219_469_824);
        // The peak: the forward (its MoE intermediates at dp 1 taken out, the
        // all-gather in) or the sampler phase, then the workspace and cuBLAS's.
        let n = |k: &str| input_of(b, "activation_peak", k).parse::<u64>().unwrap();
        let forward = n("forward") - 478_150_656;
        assert_eq!(
            bytes_of(b, "activation_peak"),
            forward.max(n("sampler-phase")) + n("moe-workspace") + 32 * MIB
        );
        // One DP rank's pool, from its own share.
        let kv = bytes_of(b, "budget") as i64
            - (bytes_of(b, "weights") + bytes_of(b, "activation_peak") + bytes_of(b, "non_torch"))
                as i64;
        assert_eq!(b.kv_capacity_bytes, kv);
        assert!(b.kv_capacity_bytes > one.kv_capacity_bytes);
        assert!(b.assumptions.iter().any(|a| a.contains("2 GPUs in all")));
    }
    // A --gpus that is not tp × pp × dp is said.
    let (four, e) = crate::params::from_pairs(
        std::iter::once(("gpus", "4")).chain(
            [("tp", "1")].iter().copied(),
        ),
    );
    assert!(e.is_empty());
    let mut m4 = m.clone();
    m4.gpus = four.gpus;
    let b = run(
        &m4,
        &with(&[("engine", "vllm@0.19"), ("data-parallel-size", "2")]),
    );
    assert!(b.warnings.iter().any(|w| w.contains("runs on 2 GPUs")));
}

/// Qwen3-30B-A3B (128 experts, 48 layers of 2048 × 768 experts, bf16) at dp 3 with
/// expert parallelism: `determine_expert_map` gives 43, 43 and 42 experts; the most
/// loaded rank holds 57 982 058 496 × 43 ÷ 128 = 19 478 347 776 B of experts, and its
/// MoE layer sees 3 × 8192 rows (workspace 24 576 × 8 × 2048 × 2 × 2 = 1 610 612 736).
/// At dp 2 (64 experts a rank, or each expert halved) the weights lose 28 991 029 248 B.
#[test]
fn vllm_expert_parallel_holds_the_most_loaded_ranks_experts() {
    let q = from_config("qwen3-30b-a3b", &[]);
    for engine in ["vllm@0.19", "vllm"] {
        let one = run(&q, &with(&[("engine", engine)]));
        let b = run(
            &q,
            &with(&[
                ("engine", engine),
                ("data-parallel-size", "3"),
                ("enable-expert-parallel", "true"),
            ]),
        );
        assert_eq!(input_of(&b, "weights", "local-experts"), "43");
        assert_eq!(input_of(&b, "weights", "ep"), "3");
        assert_eq!(
            bytes_of(&one, "weights") - bytes_of(&b, "weights"),
            57_982_058_496 - 19_478_347_776
        );
        assert_eq!(input_of(&b, "activation_peak", "moe-workspace"), "1610612736");
        let two = run(
            &q,
            &with(&[("engine", engine), ("data-parallel-size", "2")]),
        );
        assert_eq!(
            bytes_of(&one, "weights") - bytes_of(&two, "weights"),
            28_991_029_248
        );
    }
    // tp 2 with expert parallelism, one DP rank: ep 2, the layer sees the rank's own
    // 8192 tokens, no DP groups outside torch.
    let t2 = from_config("qwen3-30b-a3b", &[("tp", "2"), ("gpus", "2")]);
    let tp = run(&t2, &with(&[("engine", "vllm@0.19")]));
    let b = run(
        &t2,
        &with(&[("engine", "vllm@0.19"), ("enable-expert-parallel", "true")]),
    );
    assert_eq!(input_of(&b, "weights", "local-experts"), "64");
    assert_eq!(input_of(&b, "activation_peak", "moe-rows"), "8192");
    assert_eq!(input_of(&b, "activation_peak", "dp-gathered"), "0");
    assert_eq!(bytes_of(&b, "non_torch"), bytes_of(&tp, "non_torch"));
    assert_eq!(bytes_of(&b, "weights"), bytes_of(&tp, "weights"));
    // The workspace at the whole intermediate (768): M × 8 × max(768, 2048) and
    // M × 8 × max(1536, 2048), both as at tp 2.
    assert_eq!(
        input_of(&b, "activation_peak", "moe-workspace"),
        input_of(&tp, "activation_peak", "moe-workspace")
    );
}

/// What vLLM refuses or ignores, and what is not read: expert parallelism on a dense
/// model is refused (`_verify_with_expert_parallelism`); on one rank it is off; data
/// parallelism of a dense model changes a rank's figures only outside torch;
/// releases before 0.19 are refused.
#[test]
fn vllm_data_and_expert_parallel_refusals() {
    let dense = llama_8b(&[]);
    let e = try_run(
        &dense,
        &[("engine", "vllm"), ("enable-expert-parallel", "true"), ("data-parallel-size", "2")],
    )
    .unwrap_err();
    assert!(e.to_string().contains("Number of experts"), "{e}");
    let one = run(&dense, &with(&[("engine", "vllm@0.19")]));
    let dp = run(
        &dense,
        &with(&[("engine", "vllm@0.19"), ("data-parallel-size", "2")]),
    );
    assert_eq!(bytes_of(&dp, "weights"), bytes_of(&one, "weights"));
    assert_eq!(bytes_of(&dp, "activation_peak"), bytes_of(&one, "activation_peak"));
    assert_eq!(
        bytes_of(&dp, "non_torch") - bytes_of(&one, "non_torch"),
        1884 * MIB
    );
    let m = from_config("deepseek-v2-lite", &[]);
    let plain = run(&m, &with(&[("engine", "vllm@0.19")]));
    let solo = run(
        &m,
        &with(&[("engine", "vllm@0.19"), ("enable-expert-parallel", "true")]),
    );
    assert_eq!(solo.kv_capacity_bytes, plain.kv_capacity_bytes);
    assert!(solo.assumptions.iter().any(|a| a.contains("leaves expert parallelism off")));
    for old in ["vllm@0.10", "vllm@0.8", "vllm@0.7"] {
        let e = try_run(&m, &[("engine", old), ("data-parallel-size", "2")]).unwrap_err();
        assert!(e.to_string().contains("0.19 and 0.27 only"), "{e}");
    }
    let e = try_run(
        &m,
        &[
            ("engine", "vllm"),
            ("data-parallel-size", "2"),
            ("cpu-offload-gb", "4"),
        ],
    )
    .unwrap_err();
    assert!(e.to_string().contains("not modelled"), "{e}");
    let bge = from_config("bge-large-en-v1.5", &[]);
    let e = try_run(&bge, &[("engine", "vllm"), ("data-parallel-size", "2")]).unwrap_err();
    assert!(e.to_string().contains("pooling runner"), "{e}");
}

/// bitsandbytes 8-bit (LLM.int8()) under vLLM's profile, by hand (A100: 2 048 batched
/// tokens). Llama-3.1-8B in bf16, gate_up's gate shard (4 096 in, 14 336 out): the
/// int8 rows 2 048 × 4 096 = 8 388 608 B, their fp32 scales 2 048 × 4 = 8 192 B, the
/// product's int32, fp16 and bf16 copies 2 048 × 14 336 × 8 = 234 881 024 B:
/// 243 277 824 B, above the copy of `out` back to bf16 (2 048 × 28 672 × 2 =
/// 117 440 512 B). In fp16 the gate shard also holds the input's bf16 copy 2 048 ×
/// 4 096 × 2 = 16 777 216 B: 260 055 040 B (no copy back: `out` is fp16), above
/// down_proj's (14 336 in): its input's bf16 copy 58 720 256 B beside its
/// quantisation, 2 048 × 14 336 × 6 + 8 192 = 176 168 960 B, 234 889 216 B. An 8-bit
/// MoE does not start in any release.
#[test]
fn vllm_bitsandbytes_int8_profile_holds_the_matmul_scratch() {
    let on = |extra: &[(&str, &str)]| {
        let b = run(
            &llama_8b(extra),
            &with(&[("engine", "vllm@0.27"), ("card", "a100-80gb")]),
        );
        let l = b.lines.iter().find(|l| l.key == "activation_peak").unwrap();
        (
            l.inputs.get("bnb-int8-scratch").map(|v| v.parse::<u64>().unwrap()),
            l.inputs["forward"].parse::<u64>().unwrap(),
        )
    };
    let (none, fwd) = on(&[]);
    assert_eq!(none, None);
    let (bf16, fwd_int8) = on(&[("format", "int8")]);
    assert_eq!(bf16, Some(243_277_824));
    assert_eq!(fwd_int8, fwd + 243_277_824);
    let (fp16, _) = on(&[("format", "int8"), ("compute-dtype", "fp16")]);
    assert_eq!(fp16, Some(260_055_040));
    let preset = crate::presets::find("mixtral-8x7b").expect("preset");
    let mixtral = preset.pairs.iter().copied().chain([("format", "int8")]);
    let (input, e) = crate::params::from_pairs(mixtral);
    assert!(e.is_empty(), "{e:?}");
    let est = estimate(&input).unwrap();
    let err = budget(
        &input,
        &est,
        &engine(&[
            ("engine", "vllm@0.27"),
            ("card", "h100-sxm-80gb"),
            ("max-model-len", "4096"),
        ]),
    )
    .expect_err("refused")
    .to_string();
    assert!(err.contains("NotImplementedError"), "{err}");
}

/// vLLM on ROCm pads every fp8 linear whose rows are a multiple of 512 bytes by 256
/// bytes a row (`_maybe_pad_fp8_weight`). Llama-3.1-8B's linears all qualify (inputs
/// 4 096 and 14 336 = 28 × 512): per layer q 4 096 + k 1 024 + v 1 024 + o 4 096 +
/// gate 14 336 + up 14 336 + down 4 096 = 43 008 rows, × 256 B × 32 layers =
/// 352 321 536 B at tp 1; at tp 2 each rank's column-parallel slices halve their rows
/// and o and down halve their inputs (2 048 and 7 168, still multiples of 512):
/// 25 600 rows, 209 715 200 B. Per-tensor and block scales alike; none on an NVIDIA
/// card, nor for per-channel scales.
#[test]
fn vllm_pads_fp8_rows_on_rocm() {
    let pad = |format: &str, card: &str, tp: &str| {
        let input = llama_8b(&[("format", format), ("tp", tp), ("gpus", tp)]);
        let b = run(
            &input,
            &[
                ("engine", "vllm"),
                ("card", card),
                ("max-model-len", "4096"),
            ],
        );
        let w = b.lines.iter().find(|l| l.key == "weights").unwrap();
        w.inputs["rocm-fp8-padding"].parse::<u64>().unwrap()
    };
    assert_eq!(pad("fp8", "mi300x", "1"), 352_321_536);
    assert_eq!(pad("fp8-block", "mi300x", "1"), 352_321_536);
    assert_eq!(pad("fp8-block", "mi300x", "2"), 209_715_200);
    assert_eq!(pad("fp8", "h100-sxm-80gb", "1"), 0);
    assert_eq!(pad("fp8-channel", "mi300x", "1"), 0);
    assert_eq!(pad("bf16", "mi300x", "1"), 0);
}
