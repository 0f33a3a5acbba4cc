//! llama.cpp's rule: its cache in block formats and sliding windows, and the placement of its model buffer tensor by tensor.

#![allow(clippy::arithmetic_side_effects)]

use super::*;
use crate::engine::tests::*;

/// llama.cpp: 16 000 cells pad to 16 128; per layer and cell K + V of 1024 values:
/// f16 4096 B, q8_0 2 × 32 × 34 = 2176 B, q4_0 2 × 32 × 18 = 1152 B; × 32 layers.
/// Model buffer: weights less the token embeddings (128 256 × 4096 × 2): 15 009 849 344;
/// compute buffer (3 × 14 336 + 2 × 4096) × 512 × 4 = 104 857 600 (100 MiB).
#[test]
fn llama_cpp_allocates_its_cache_in_block_formats() {
    for (t, cell) in [
        ("f16", 4096u64),
        ("q8_0", 2176),
        ("q4_0", 1152),
        ("q5_1", 1536),
        ("iq4_nl", 1152),
    ] {
        let b = run(
            &llama_8b(&[]),
            &with(&[
                ("engine", "llama.cpp"),
                ("cache-type-k", t),
                ("cache-type-v", t),
            ]),
        );
        assert_eq!(b.kv_cache_bytes, Some(16_128 * 32 * cell), "{t}");
        assert_eq!(bytes_of(&b, "weights"), 15_009_849_344);
        assert_eq!(bytes_of(&b, "compute_buffer"), 104_857_600);
        let room = 85_520_809_984i64 - 536_870_912 - 15_009_849_344 - 104_857_600 - 1_073_741_824;
        assert_eq!(b.kv_capacity_bytes, room);
        assert_eq!(b.outcome, Outcome::Fits);
    }
    // -ngl: llama_cpp_ngl_places_the_output_layer_first.
    assert!(CacheType::Q8_0.row_bytes(100).is_err());
}

/// Phi-3's window is on every layer: llama.cpp runs it without SWA (a full cache);
/// Gemma-2's alternates: its sliding layers keep ⌈(4096 + 512) ÷ 256⌉ × 256 cells.
#[test]
fn llama_cpp_swa_only_where_windows_alternate() {
    let base = [
        ("layers", "42"),
        ("hidden", "3584"),
        ("heads", "16"),
        ("kv-heads", "8"),
        ("head-dim", "256"),
        ("intermediate", "14336"),
        ("vocab", "256000"),
        ("sliding-window", "4096"),
    ];
    let gemma: Vec<_> = base
        .iter()
        .copied()
        .chain([("sliding-layers", "21")])
        .collect();
    let (g, _) = crate::params::from_pairs(gemma);
    let b = run(
        &g,
        &with(&[("engine", "llama.cpp"), ("max-model-len", "32768")]),
    );
    let cell = 2 * 8 * 256 * 2u64;
    assert_eq!(
        b.kv_cache_bytes,
        Some(32_768 * 21 * cell + 4608 * 21 * cell)
    );
    // Two slots: 16 384 cells each, and each slot's sliding cache 4096 + 512 → 4608.
    let mut two = g.clone();
    two.sequences = 2;
    let b = run(
        &two,
        &with(&[("engine", "llama.cpp"), ("max-model-len", "32768")]),
    );
    assert_eq!(
        b.kv_cache_bytes,
        Some(2 * 16_384 * 21 * cell + 2 * 4608 * 21 * cell)
    );
    // Quantised types: the sliding layers' cells stay f16 (llama.cpp PR 21277).
    let b = run(
        &g,
        &with(&[
            ("engine", "llama.cpp"),
            ("max-model-len", "32768"),
            ("cache-type-k", "q8_0"),
            ("cache-type-v", "q8_0"),
        ]),
    );
    assert_eq!(
        b.kv_cache_bytes,
        Some(32_768 * 21 * (2 * 64 * 34) + 4608 * 21 * cell)
    );
    let (all, _) = crate::params::from_pairs(base);
    let b = run(
        &all,
        &with(&[("engine", "llama.cpp"), ("max-model-len", "32768")]),
    );
    assert_eq!(b.kv_cache_bytes, Some(32_768 * 42 * cell));
}

fn gguf_list(input: &EstimateInput) -> Vec<tensors::GgufTensor> {
    let formats = crate::estimate::module_formats(input).expect("formats");
    tensors::gguf_tensors(&input.arch.expect("arch"), &formats).expect("tensors")
}

/// The tensor list holds the estimate's weights (less the buffers no checkpoint
/// stores) to the byte, whatever the family
/// (dense, MoE with shared experts and leading dense blocks, MLA and MTP, hybrids,
/// biases and sinks, Gemma's four norms, tied embeddings), in bf16 and in a block format.
#[test]
fn gguf_tensors_sum_to_the_estimates_weights() {
    let mut inputs: Vec<(String, EstimateInput)> = Vec::new();
    for id in [
        "llama-3.1-8b",
        "llama-3.2-1b",
        "mixtral-8x7b",
        "qwen1.5-moe-a2.7b",
        "gemma-2-9b",
        "falcon-7b",
        "gpt-oss-20b",
        "deepseek-v3",
        "llama-4-scout",
    ] {
        for format in ["bf16", "q4_k", "q4_k_m", "q3_k_m"] {
            inputs.push((format!("{id} {format}"), preset(id, &[("format", format)])));
        }
    }
    for file in [
        "qwen3-30b-a3b",
        "qwen3-next-80b-a3b",
        "jamba-1.5-mini",
        "nemotron-3-nano-30b-a3b",
        "gemma-4-31b",
        "deepseek-v3.2",
    ] {
        inputs.push((file.to_string(), from_config(file, &[])));
    }
    for (what, input) in &inputs {
        let est = estimate(input).expect("estimate");
        let list = gguf_list(input);
        let sum: u64 = list.iter().filter(|t| !t.duplicate).map(|t| t.bytes).sum();
        // The buffers transformers builds beside the weights (the rotary tables) are no
        // GGUF tensor.
        let buffers: u64 = est
            .lines
            .iter()
            .filter(|l| l.label.starts_with("Weights: buffers"))
            .map(|l| l.bytes)
            .sum();
        assert_eq!(sum + buffers, est.weights_bytes, "{what}");
    }
}

/// Names and sizes as llama.cpp loads them: Llama-3.1-8B (dense, 9 tensors a block),
/// Mixtral-8x7B (the 8 experts of a projection in one 3-D tensor) and Qwen3-30B-A3B
/// (q/k norms, 128 experts), in bf16.
#[test]
fn gguf_tensor_names_and_bytes() {
    let llama = gguf_list(&llama_8b(&[]));
    assert_eq!(llama.len(), 1 + 32 * 9 + 2);
    let names: Vec<String> = llama.iter().take(12).map(|t| t.name()).collect();
    assert_eq!(names[0], "token_embd.weight");
    assert!(
        names.contains(&"blk.0.attn_q.weight".to_string()),
        "{names:?}"
    );
    let find = |l: &[tensors::GgufTensor], n: &str| {
        l.iter()
            .find(|t| t.name() == n)
            .unwrap_or_else(|| panic!("no {n}"))
            .bytes
    };
    assert_eq!(find(&llama, "blk.31.ffn_down.weight"), 14_336 * 4096 * 2);
    assert_eq!(find(&llama, "blk.7.attn_k.weight"), 1024 * 4096 * 2);
    assert_eq!(find(&llama, "output.weight"), 128_256 * 4096 * 2);
    assert_eq!(find(&llama, "output_norm.weight"), 4096 * 2);

    // Q4_K_M: attn_v and ffn_down in Q6_K where llama-quant.cpp's use_more_bits
    // picks the block (0-3, 6, 9, …, 27, 28-31), else Q4_K; output in Q6_K.
    let q = gguf_list(&llama_8b(&[("format", "q4_k_m")]));
    let q4 = |r: u64, c: u64| r * c / 256 * 144;
    let q6 = |r: u64, c: u64| r * c / 256 * 210;
    assert_eq!(find(&q, "blk.3.attn_v.weight"), q6(1024, 4096));
    assert_eq!(find(&q, "blk.4.attn_v.weight"), q4(1024, 4096));
    assert_eq!(find(&q, "blk.6.ffn_down.weight"), q6(4096, 14_336));
    assert_eq!(find(&q, "blk.7.ffn_down.weight"), q4(4096, 14_336));
    assert_eq!(find(&q, "blk.7.attn_q.weight"), q4(4096, 4096));
    assert_eq!(find(&q, "output.weight"), q6(128_256, 4096));
    assert_eq!(find(&q, "token_embd.weight"), q4(128_256, 4096));

    let mixtral = gguf_list(&preset("mixtral-8x7b", &[]));
    assert_eq!(mixtral.len(), 3 + 32 * 10);
    assert_eq!(
        find(&mixtral, "blk.0.ffn_gate_exps.weight"),
        8 * 14_336 * 4096 * 2
    );
    assert_eq!(find(&mixtral, "blk.31.ffn_gate_inp.weight"), 8 * 4096 * 2);
    assert_eq!(mixtral.iter().filter(|t| t.is_routed_expert()).count(), 96);

    let qwen = gguf_list(&from_config("qwen3-30b-a3b", &[]));
    assert_eq!(qwen.len(), 3 + 48 * 12);
    assert_eq!(
        find(&qwen, "blk.47.ffn_down_exps.weight"),
        128 * 2048 * 768 * 2
    );
    assert_eq!(find(&qwen, "blk.3.attn_k_norm.weight"), 128 * 2);

    // gpt-oss: biases on every projection (the experts' merged too), the router's
    // bias and the attention sinks.
    let oss = gguf_list(&preset("gpt-oss-20b", &[]));
    for n in [
        "blk.0.attn_sinks.weight",
        "blk.0.attn_q.bias",
        "blk.0.attn_output.bias",
        "blk.0.ffn_gate_inp.bias",
        "blk.23.ffn_down_exps.bias",
    ] {
        find(&oss, n);
    }
    assert_eq!(find(&oss, "blk.1.ffn_up_exps.bias"), 32 * 2880 * 2);
    // DeepSeek-V3: MLA, three dense blocks before the MoE ones, a shared expert, the
    // router's fp32 correction bias; its MTP layer is counted outside the blocks.
    let ds = gguf_list(&preset("deepseek-v3", &[]));
    find(&ds, "blk.2.ffn_gate.weight");
    find(&ds, "blk.3.ffn_gate_shexp.weight");
    find(&ds, "blk.60.attn_kv_a_mqa.weight");
    assert_eq!(find(&ds, "blk.3.exp_probs_b.bias"), 256 * 4);
    assert!(!ds.iter().any(|t| t.name() == "blk.2.ffn_gate_exps.weight"));
    assert!(ds.iter().all(|t| t.named || t.slot == tensors::Slot::Extra));
}

/// The model buffer in llama.cpp's placement, derived by hand for Llama-3.1-8B in
/// bf16: a block is q, o 4096² + k, v 1024 × 4096 + gate, up, down 14 336 × 4096 +
/// two norms, × 2 B = 436 224 000 B; the output layer 128 256 × 4096 × 2 + 4096 × 2 =
/// 1 050 681 344 B; the token embeddings 1 050 673 152 B stay on the host.
/// `-ngl 16` (i_gpu_start = 33 − 16 = 17): the output layer and blocks 17–31.
#[test]
fn llama_cpp_ngl_places_the_output_layer_first() {
    let block = 436_224_000u64;
    let out = 1_050_681_344u64;
    let embd = 1_050_673_152u64;
    let full = run(&llama_8b(&[]), &with(&[("engine", "llama.cpp")]));
    assert_eq!(bytes_of(&full, "weights"), 32 * block + out);
    assert_eq!(full.host_weights_bytes, Some(embd));
    let part = run(
        &llama_8b(&[]),
        &with(&[("engine", "llama.cpp"), ("n-gpu-layers", "16")]),
    );
    assert_eq!(bytes_of(&part, "weights"), 15 * block + out);
    assert_eq!(part.host_weights_bytes, Some(embd + 17 * block));
    assert_eq!(part.kv_cache_bytes, Some(16_128 * 15 * 4096));
    // -ngl 32 = n leaves block 0 on the host; 33 = n + 1 is full offload.
    let n = run(
        &llama_8b(&[]),
        &with(&[("engine", "llama.cpp"), ("n-gpu-layers", "32")]),
    );
    assert_eq!(bytes_of(&n, "weights"), 31 * block + out);
    let n1 = run(
        &llama_8b(&[]),
        &with(&[("engine", "llama.cpp"), ("n-gpu-layers", "33")]),
    );
    assert_eq!(bytes_of(&n1, "weights"), bytes_of(&full, "weights"));
}

/// Tied embeddings (Llama-3.2-1B): llama.cpp loads `token_embd.weight` again as the
/// output, in the output layer's buffer on the card; the host keeps the original.
#[test]
fn llama_cpp_tied_output_is_a_second_copy_on_the_card() {
    let input = preset("llama-3.2-1b", &[]);
    let est = estimate(&input).expect("estimate");
    let embd = 128_256 * 2048 * 2;
    let b = run(&input, &with(&[("engine", "llama.cpp")]));
    // The estimate's weights less transformers' rotary buffers (two of 32 fp32
    // values), which llama.cpp does not build.
    assert_eq!(bytes_of(&b, "weights"), est.weights_bytes - 2 * 32 * 4);
    assert_eq!(b.host_weights_bytes, Some(embd));
}

/// `-ot "\.ffn_.*_exps\.=CPU"` is `--cpu-moe` (every block's routed experts; llama.cpp
/// implements it as the one rule `\.ffn_(up|down|gate|gate_up)_(ch|)exps` → CPU, which
/// `--n-cpu-moe` at the block count equals); a block-range pattern is `--n-cpu-moe N`
/// (llama.cpp's own rules `blk\.i\.ffn_…_exps` for i < N); Mixtral's experts in
/// bf16 are 3 × 939 524 096 B a block.
#[test]
fn llama_cpp_override_tensor_equals_cpu_moe_and_n_cpu_moe() {
    let input = preset("mixtral-8x7b", &[]);
    let per_block = 3 * 939_524_096u64;
    let llama = |extra: &[(&str, &str)]| {
        let mut pairs = with(&[("engine", "llama.cpp")]);
        pairs.extend_from_slice(extra);
        run(&input, &pairs)
    };
    let plain = llama(&[]);
    let all_ot = llama(&[("override-tensor", "\\.ffn_.*_exps\\.=CPU")]);
    let all_ncm = llama(&[("n-cpu-moe", "32")]);
    let stock = llama(&[(
        "override-tensor",
        "\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU",
    )]);
    for b in [&all_ot, &stock] {
        assert_eq!(b.lines, all_ncm.lines);
        assert_eq!(b.host_weights_bytes, all_ncm.host_weights_bytes);
    }
    assert_eq!(
        bytes_of(&plain, "weights") - bytes_of(&all_ot, "weights"),
        32 * per_block
    );
    assert_eq!(
        all_ot.host_weights_bytes.unwrap() - plain.host_weights_bytes.unwrap(),
        32 * per_block
    );
    let range_ot = llama(&[(
        "override-tensor",
        "blk\\.([0-9]|1[0-9])\\.ffn_.*_exps\\.=CPU",
    )]);
    let range_ncm = llama(&[("n-cpu-moe", "20")]);
    assert_eq!(range_ot.lines, range_ncm.lines);
    assert_eq!(
        bytes_of(&plain, "weights") - bytes_of(&range_ot, "weights"),
        20 * per_block
    );
    // The first rule that matches wins: block 0's up projection stays on the card.
    let first = llama(&[(
        "override-tensor",
        "blk\\.0\\.ffn_up_exps=CUDA0,\\.ffn_.*_exps\\.=CPU",
    )]);
    assert_eq!(
        bytes_of(&first, "weights"),
        bytes_of(&all_ot, "weights") + per_block / 3
    );
    // A rule to the card brings a block -ngl left on the host back.
    let back = llama(&[
        ("n-gpu-layers", "1"),
        ("override-tensor", "blk\\.5\\.=CUDA0"),
    ]);
    let one = llama(&[("n-gpu-layers", "1")]);
    assert!(bytes_of(&back, "weights") > bytes_of(&one, "weights"));
}

/// Bad `--override-tensor` values: one clear error, never a panic. The rules' form is
/// checked where the engine keys are read; the patterns where they are compiled, for
/// the placement — what std::regex takes and regex-lite refuses (look-around,
/// backreferences) is named.
#[test]
fn llama_cpp_override_tensor_errors_are_clear() {
    for (value, says) in [
        ("\\.ffn_.*_exps\\.", "<pattern>=<buffer type>"),
        ("exps=GPU", "one card"),
        ("exps=cpu", "names it CPU"),
        ("exps=CUDA1", "one card"),
    ] {
        let errors = from_pairs([("override-tensor", value)]).1;
        assert_eq!(errors.len(), 1, "{value}");
        let e = errors[0].to_string();
        assert!(
            e.starts_with("override-tensor:") && e.contains(says),
            "{value}: {e}"
        );
    }
    let input = llama_8b(&[]);
    let est = estimate(&input).expect("estimate");
    for (value, says) in [
        ("ffn_(up=CPU", "not a regular expression"),
        ("blk\\.(?!0\\.)=CPU", "look-around"),
        ("(a)\\1=CPU", "backreferences"),
    ] {
        let p = engine(&[
            ("engine", "llama.cpp"),
            ("card", "h100-sxm-80gb"),
            ("max-model-len", "4096"),
            ("override-tensor", value),
        ]);
        let e = budget(&input, &est, &p).unwrap_err().to_string();
        assert!(
            e.starts_with("override-tensor:") && e.contains(says),
            "{value}: {e}"
        );
    }
    // Without an architecture (a parameter count and the KV shape) no tensor is named.
    let (input, errors) = crate::params::from_pairs([
        ("parameters", "8e9"),
        ("layers", "32"),
        ("kv-heads", "8"),
        ("head-dim", "128"),
    ]);
    assert!(errors.is_empty(), "{errors:?}");
    let est = estimate(&input).expect("estimate");
    let p = engine(&with(&[
        ("engine", "llama.cpp"),
        ("override-tensor", "exps=CPU"),
    ]));
    let e = budget(&input, &est, &p).unwrap_err().to_string();
    assert!(e.contains("needs the architecture"), "{e}");
}

/// With the weights from a model file's header (bytes per class), the tensors take
/// their class's bytes in proportion: Llama-3.1-8B with a Q4_K_M-like file. The
/// token embeddings are the one tensor of their class, so the host holds exactly the
/// file's embeddings; everything else, the rounding's bytes and the header's "other"
/// tensors included, is on the card; `-ot` works on the shares.
#[test]
fn llama_cpp_places_a_model_files_class_totals() {
    let mut file = crate::import::TensorSummary::new("gguf");
    for (name, bytes) in [
        ("token_embd.weight", 295_501_824u64),
        ("output.weight", 430_964_736),
        ("output_norm.weight", 16_384),
        ("rope_freqs.weight", 256),
    ] {
        file.add(name, "Q4_K", bytes).expect("add");
    }
    for i in 0..32 {
        for (name, bytes) in [
            ("attn_q.weight", 9_437_184u64),
            ("attn_k.weight", 2_359_296),
            ("attn_v.weight", 3_440_640),
            ("attn_output.weight", 9_437_184),
            ("ffn_gate.weight", 33_030_144),
            ("ffn_up.weight", 33_030_144),
            ("ffn_down.weight", 48_168_960),
            ("attn_norm.weight", 16_384),
            ("ffn_norm.weight", 16_384),
        ] {
            file.add(&format!("blk.{i}.{name}"), "Q4_K", bytes)
                .expect("add");
        }
    }
    let mut input = llama_8b(&[]);
    input.tensors = Some(file.clone());
    let est = estimate(&input).expect("estimate");
    assert_eq!(est.weights_bytes, file.total.bytes);
    let b = run(&input, &with(&[("engine", "llama.cpp")]));
    assert_eq!(b.host_weights_bytes, Some(295_501_824));
    assert_eq!(bytes_of(&b, "weights"), file.total.bytes - 295_501_824);
    assert!(b.assumptions.iter().any(|a| a.contains("class totals")));
    // Block 0 to the host: its share of attention, MLP and norms (÷ 32, rounded down
    // per tensor).
    let moved = run(
        &input,
        &with(&[
            ("engine", "llama.cpp"),
            ("override-tensor", "blk\\.0\\.=CPU"),
        ]),
    );
    let block = 9_437_184 * 2 + 2_359_296 + 3_440_640 + 33_030_144 * 2 + 48_168_960 + 32_768;
    let host = moved.host_weights_bytes.unwrap() - 295_501_824;
    assert!(host <= block && block - host < 16, "{host} vs {block}");
    assert_eq!(
        bytes_of(&moved, "weights") + moved.host_weights_bytes.unwrap(),
        file.total.bytes
    );
}

/// llama.cpp's placement lists every tensor of every block (and a largest-context
/// search places the model at every step): past its bounds it is refused before any
/// tensor is listed, naming the bound, and the largest search answers nothing rather
/// than run for minutes.
#[test]
fn llama_cpp_placement_is_bounded() {
    // Beyond any decoder the estimate itself refuses (arch::MAX_LAYERS); below that,
    // llama.cpp's placement has its own, lower bound.
    let p = crate::presets::find("mixtral-8x7b").expect("preset");
    let (_, errors) =
        crate::params::from_pairs(p.pairs.iter().copied().chain([("layers", "1000000")]));
    assert!(
        errors.iter().any(|e| e.to_string().contains("at most 4096")),
        "{errors:?}"
    );
    let deep = preset("mixtral-8x7b", &[("layers", "4096")]);
    let est = estimate(&deep).expect("the estimate itself is cheap");
    let p = engine(&with(&[("engine", "llama.cpp")]));
    let e = budget(&deep, &est, &p).unwrap_err().to_string();
    assert!(
        e.starts_with("layers:") && e.contains("at most 1024"),
        "{e}"
    );
    // At the bound it still answers.
    let at = preset("mixtral-8x7b", &[("layers", "1024")]);
    let est = estimate(&at).expect("estimate");
    budget(&at, &est, &p).expect("1 024 blocks are placed");
    // Rules × blocks.
    let input = preset("mixtral-8x7b", &[]);
    let est = estimate(&input).expect("estimate");
    let many: Vec<String> = (0..200).map(|i| format!("blk\\.{i}\\.=CPU")).collect();
    let (_, errors) = from_pairs([("override-tensor", many.join(",").as_str())]);
    assert!(
        errors[0].to_string().contains("at most 64 rules"),
        "{errors:?}"
    );
    let some: Vec<String> = (0..64).map(|i| format!("blk\\.{i}\\.=CPU")).collect();
    let p = engine(&with(&[
        ("engine", "llama.cpp"),
        ("override-tensor", some.join(",").as_str()),
    ]));
    budget(&input, &est, &p).expect("32 blocks × 64 rules");
    let e = budget(&at, &estimate(&at).expect("estimate"), &p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rule × block matches"), "{e}");
    let long = format!("{}=CPU", "a".repeat(600));
    let (_, errors) = from_pairs([("override-tensor", long.as_str())]);
    assert!(errors[0].to_string().contains("at most 512"), "{errors:?}");
}

/// llama-server's `--kv-unified`: one stream of n_ctx cells for every slot, and one SWA
/// cache of n_swa × slots + n_ubatch cells (gpt-oss-120b at -c 65536, 4 slots: 1024).
#[test]
fn a_unified_cache_is_one_stream() {
    let input = llama_8b(&[("sequences", "4")]);
    let pairs = [
        ("engine", "llama.cpp"),
        ("card", "rtx-4090"),
        ("max-model-len", "8192"),
    ];
    let split = run(&input, &pairs);
    let mut unified = pairs.to_vec();
    unified.push(("kv-unified", "true"));
    let one = run(&input, &unified);
    // Llama has no window: 4 streams of 2048 cells hold what one stream of 8192 does.
    assert_eq!(split.kv_cache_bytes, one.kv_cache_bytes);
    assert!(engine(&unified).on(KV_UNIFIED.key()));
}

/// llama.cpp's `--swa-full` (`src/llama-kv-cache-iswa.cpp`: `size_swa = size_base`): the
/// sliding layers keep every cell, so a windowed model's cache is the cache it would
/// have without the window (f16 cells); without the flag it is smaller.
#[test]
fn llama_cpp_swa_full_keeps_every_cell() {
    let shape = [
        ("layers", "42"),
        ("hidden", "3584"),
        ("heads", "16"),
        ("kv-heads", "8"),
        ("head-dim", "256"),
        ("intermediate", "14336"),
        ("vocab", "256000"),
    ];
    let windowed: Vec<(&str, &str)> = shape
        .iter()
        .copied()
        .chain([("sliding-window", "4096"), ("sliding-layers", "21")])
        .collect();
    let (w, e) = crate::params::from_pairs(windowed.iter().copied());
    assert!(e.is_empty(), "{e:?}");
    let (full, e) = crate::params::from_pairs(shape.iter().copied());
    assert!(e.is_empty(), "{e:?}");
    let pairs = [
        ("engine", "llama.cpp"),
        ("card", "rtx-4090"),
        ("max-model-len", "32768"),
    ];
    let mut swa_full = pairs.to_vec();
    swa_full.push(("swa-full", "true"));
    assert!(engine(&swa_full).on(SWA_FULL.key()));
    let compact = run(&w, &pairs).kv_cache_bytes.unwrap();
    let all = run(&w, &swa_full).kv_cache_bytes.unwrap();
    let no_window = run(&full, &pairs).kv_cache_bytes.unwrap();
    assert_eq!(all, no_window);
    // 32 768 cells × 42 layers × 2 × 8 × 256 × 2 B; compact: 21 layers at 4096 + 512
    // (the ubatch) cells.
    assert_eq!(all, 32_768 * 42 * 8192);
    assert_eq!(compact, 32_768 * 21 * 8192 + 4608 * 21 * 8192);
}

/// LLaVA-1.5's `mmproj-model-f16.gguf` as the agent writes it from the header (see
/// `mmproj`'s tests: 377 tensors, 624 412 672 B).
const LLAVA_MMPROJ: &str = "bytes=624412672,tensors=377,image-size=336,patch-size=14,hidden=1024,ffn=4096,heads=16,layers=23,projector=mlp";

/// `--mmproj`: the projector's weights and its encoder's compute buffer come off the
/// card's room beside the model; `--no-mmproj-offload` moves both to the host line and
/// leaves the card's room as without a projector.
#[test]
fn the_projector_sits_on_the_card_unless_kept_on_the_cpu() {
    let input = llama_8b(&[]);
    let base = [
        ("engine", "llama.cpp"),
        ("card", "rtx-4090"),
        ("max-model-len", "8192"),
    ];
    let plain = run(&input, &base);
    let mut with_mm = base.to_vec();
    with_mm.push(("mmproj", LLAVA_MMPROJ));
    let on = run(&input, &with_mm);
    let enc = 16 * 577 * 577 * 4 + 10 * 577 * 1024 * 4 + 2 * 3 * 336 * 336 * 4;
    assert_eq!(bytes_of(&on, "mmproj_weights"), 624_412_672);
    assert_eq!(bytes_of(&on, "mmproj_compute"), enc);
    assert_eq!(
        plain.kv_capacity_bytes - on.kv_capacity_bytes,
        624_412_672 + enc as i64
    );
    assert_eq!(on.host_weights_bytes, plain.host_weights_bytes);
    assert!(on.uncertainty_bytes > plain.uncertainty_bytes);
    assert!(
        on.assumptions
            .iter()
            .any(|a| a.contains("each image takes 576 of the context's cells")),
        "{:?}",
        on.assumptions
    );
    // On the CPU: the host line grows by both, the card keeps its room.
    with_mm.push(("no-mmproj-offload", "true"));
    let off = run(&input, &with_mm);
    assert!(off.lines.iter().all(|l| !l.key.starts_with("mmproj")));
    assert_eq!(off.kv_capacity_bytes, plain.kv_capacity_bytes);
    assert_eq!(
        off.host_weights_bytes.unwrap() - plain.host_weights_bytes.unwrap(),
        624_412_672 + enc
    );
    // A bad value is refused naming the key.
    let (_, errors) = crate::engine::from_pairs([("engine", "llama.cpp"), ("mmproj", "bytes=1")]);
    assert!(errors.iter().any(|e| e.to_string().starts_with("mmproj")), "{errors:?}");
}

/// Over several cards the projector lands on device 0 (the first GPU), after the model's
/// layers were split by free memory: device 0 needs it more, device 1 is unchanged, and
/// the split of the layers is the same.
#[test]
fn over_several_cards_the_projector_is_on_the_first() {
    let input = llama_8b(&[]);
    let two = [
        ("engine", "llama.cpp"),
        ("card", "rtx-4090,rtx-3090"),
        ("max-model-len", "8192"),
    ];
    let plain = run(&input, &two);
    let mut with_mm = two.to_vec();
    with_mm.push(("mmproj", LLAVA_MMPROJ));
    let on = run(&input, &with_mm);
    let enc = 16 * 577 * 577 * 4 + 10 * 577 * 1024 * 4 + 2 * 3 * 336 * 336 * 4;
    let (p, o) = (&plain.devices, &on.devices);
    assert_eq!(o[0].mmproj_bytes, 624_412_672 + enc);
    assert_eq!(o[1].mmproj_bytes, 0);
    assert_eq!(o[0].layers, p[0].layers);
    assert_eq!(o[0].need_bytes - p[0].need_bytes, 624_412_672 + enc);
    assert_eq!(o[1].need_bytes, p[1].need_bytes);
    assert_eq!(
        o[0].need_bytes,
        o[0].context_bytes
            + o[0].weights_bytes
            + o[0].compute_bytes
            + o[0].fit_margin_bytes
            + o[0].kv_bytes
            + o[0].mmproj_bytes
    );
    // With --no-mmproj-offload it goes to the host line instead.
    with_mm.push(("no-mmproj-offload", "true"));
    let off = run(&input, &with_mm);
    assert_eq!(off.devices[0].need_bytes, p[0].need_bytes);
    assert_eq!(
        off.host_weights_bytes.unwrap() - plain.host_weights_bytes.unwrap(),
        624_412_672 + enc
    );
}
