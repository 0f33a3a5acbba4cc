//! The field table: every input key once — its group, label, help, what an empty
//! value means, its choices, unit and kind ([`Field`]). [`FIELDS`] holds the estimate's
//! keys; the engine group is the serving engines' registry's ([`crate::engine::FIELDS`]:
//! each engine's flags, declared in its folder); [`crate::inputs`] reads both as one
//! table.
//!
//! A key is the CLI flag without its dashes and the page's URL key (`reserve-gib`,
//! `kv-heads`, `gpu-memory-utilization`). Everything that presents a key is generated
//! from [`FIELDS`]: the agent's `estimate` flags (help, value name, possible values),
//! the page's form (label, hint, placeholder, choices, default of a switch) and its
//! URL keys. The architecture's keys are its facts: rows of [`crate::arch`]'s tables
//! ([`crate::arch::DECODER_FACTS`], [`crate::arch::VARIANT_FACTS`]), each with its
//! accessor, spliced in here, so a fact is one row. Parsing stays where the types are
//! ([`crate::params::from_pairs`] for the estimate's keys, reading the facts through
//! their accessors; [`crate::engine::from_pairs`] for the engine's); a unit test
//! checks that each parser accepts every key and every choice of this table.
//!
//! The table is plain `&'static str` data, spliced at compile time (no allocation, no
//! sorting), so the page pays only for the text.

use crate::arch::{DECODER_FACTS, Fact, VARIANT_FACTS};
use crate::field::f;
pub use crate::field::{Field, FieldGroup, FieldKind, Unit};

/// Storage formats offered as suggestions (any name [`crate::format::StorageFormat::parse`]
/// accepts may be typed).
const FORMATS: &[(&str, &str)] = &[
    ("bf16", "bf16"),
    ("mxfp4", "mxfp4"),
    ("nvfp4", "nvfp4"),
    ("nvfp4a16", "nvfp4a16"),
    ("fp8-channel", "fp8-channel"),
    ("w4a16-g128", "w4a16-g128"),
    ("fp16", "fp16"),
    ("fp32", "fp32"),
    ("fp8", "fp8"),
    ("fp8-block", "fp8-block"),
    ("int8", "int8"),
    ("gptq-4-g128", "gptq-4-g128"),
    ("gptq-8-g128", "gptq-8-g128"),
    ("gptq-3-g128", "gptq-3-g128"),
    ("gptq-4-g32", "gptq-4-g32"),
    ("awq-4-g128", "awq-4-g128"),
    ("mlx-4-g64", "mlx-4-g64"),
    ("mlx-8-g64", "mlx-8-g64"),
    ("nf4", "nf4"),
    ("nf4-dq", "nf4-dq"),
    ("fp4", "fp4"),
    ("q4_0", "q4_0"),
    ("q4_k", "q4_k"),
    ("q5_k", "q5_k"),
    ("q6_k", "q6_k"),
    ("q8_0", "q8_0"),
];
const KEEP_FORMATS: &[(&str, &str)] = &[
    ("bf16", "bf16"),
    ("fp16", "fp16"),
    ("fp32", "fp32"),
    ("fp8", "fp8"),
    ("int8", "int8"),
];
const DTYPES: &[(&str, &str)] = &[
    ("bf16", "bf16"),
    ("fp16", "fp16"),
    ("fp32", "fp32"),
    ("fp8", "fp8"),
];
const KV_DTYPES: &[(&str, &str)] = &[
    ("bf16", "bf16"),
    ("fp16", "fp16"),
    ("fp32", "fp32"),
    ("fp8", "fp8"),
    ("int8", "int8"),
    ("int4", "int4"),
    ("int2", "int2"),
];

use FieldGroup as G;
use FieldKind as K;

/// Every input key, in the order the page and `--help` present them: the estimate's
/// keys ([`crate::params`]), the architecture's facts among them (rows of
/// [`crate::arch`]'s tables, spliced in); the engine's ([`crate::engine::FIELDS`])
/// follow them there.
pub static FIELDS: &[Field] = &TABLE;

/// The table: [`LEAD`], the decoder's facts, [`POSITIONS`], the variants' facts, [`TAIL`].
static TABLE: [Field; TABLE_LEN] = splice();

const TABLE_LEN: usize =
    LEAD.len() + DECODER_FACTS.len() + POSITIONS.len() + VARIANT_FACTS.len() + TAIL.len();

/// Copies the five parts into one table (at compile time: the page carries the
/// table, not the code that builds it).
const fn splice() -> [Field; TABLE_LEN] {
    let mut out = [LEAD[0]; TABLE_LEN];
    let mut i = 0;
    let mut part = 0;
    while part < 5 {
        let (fields, facts): (&[Field], &[Fact]) = match part {
            0 => (LEAD, &[]),
            1 => (&[], DECODER_FACTS),
            2 => (POSITIONS, &[]),
            3 => (&[], VARIANT_FACTS),
            _ => (TAIL, &[]),
        };
        let mut j = 0;
        while j < fields.len() {
            out[i] = fields[j];
            i += 1;
            j += 1;
        }
        let mut j = 0;
        while j < facts.len() {
            out[i] = facts[j].field;
            i += 1;
            j += 1;
        }
        part += 1;
    }
    out
}

/// The model-count and format keys, before the architecture's.
#[rustfmt::skip]
const LEAD: &[Field] = &[
    f("parameters", G::Model, K::Count, "Parameters", "",
        "Total parameters (parameter-count mode), e.g. 7e9"),
    f("bits", G::Model, K::Count, "Bits per parameter", "16",
        "Bits per parameter: 32, 16, 8, 4, 3 or 2 (mapped to fp32, bf16, int8, gptq-N-g128)"),
    f("format", G::Format, K::Text, "Storage (linear layers)", "bf16",
        "Storage format of the linear layers")
        .choices(FORMATS),
    f("keep-format", G::Format, K::Text, "Kept modules", "bf16",
        "Format of embeddings, lm_head, norms and biases")
        .choices(KEEP_FORMATS),
    f("attention-format", G::Format, K::Text, "Attention projections", "= format",
        "Format of the attention projections (gpt-oss's MXFP4 checkpoint keeps them in bf16)")
        .choices(FORMATS),
    f("compressed-tensors", G::Format, K::Bool(false), "compressed-tensors checkpoint", "",
        "The quantised formats come from a compressed-tensors checkpoint (transformers decompresses it to the model's dtype at the first forward)"),
    f("compute-dtype", G::Format, K::Text, "Compute dtype", "bf16",
        "Compute/activation dtype")
        .choices(DTYPES),
];

/// Positions and one image's size: the cache's shape keys shown between the
/// decoder's facts and the variants'.
#[rustfmt::skip]
const POSITIONS: &[Field] = &[
    f("max-position", G::CacheShape, K::Count, "Trained positions", "unknown",
        "Positions the model was trained for; a longer context is warned about"),
    f("rope-positions", G::CacheShape, K::Count, "Positions with RoPE scaling", "as trained",
        "Positions the config's RoPE scaling reaches"),
    f("mm-item-tokens", G::CacheShape, K::Count, "Tokens per image", "no encoder",
        "Prompt tokens per image (Gemma 3: 256)"),
    f("mm-item-values", G::CacheShape, K::Count, "Pixel values per image", "",
        "Pixel values of one image: channels × height × width"),
    f("mm-audio-seconds", G::CacheShape, K::Count, "Seconds of audio per sequence", "no clip",
        "Seconds of the one audio clip each sequence's prompt holds, encoded by a decoder's audio tower under transformers (Qwen2-Audio pads every clip to 30 s and cuts a longer one there); an encoder-decoder's clip is --audio-seconds"),
];

/// The workload, cache, transients, training and devices keys.
#[rustfmt::skip]
const TAIL: &[Field] = &[
    f("sequences", G::Workload, K::Count, "Sequences together", "1",
        "Sequences processed together (batch / concurrent requests)"),
    f("beams", G::Workload, K::Count, "Beams per sequence", "1",
        "Beam search's beams per sequence (generate's num_beams): caches kept once per beam"),
    f("context", G::Workload, K::Count, "Prompt tokens", "none",
        "Prompt tokens per sequence (training: sequence length)"),
    f("generate", G::Workload, K::Count, "Generated tokens", "0", "Tokens generated per sequence"),
    f("kv-dtype", G::Cache, K::Text, "KV cache dtype", "= compute",
        "KV-cache dtype (int8/int4/int2: quantised, scales included)")
        .choices(KV_DTYPES),
    f("sliding-window", G::CacheShape, K::Count, "Sliding window", "none",
        "Sliding-window size of windowed layers"),
    f("sliding-layers", G::CacheShape, K::Count, "Sliding layers", "all",
        "How many layers use the window"),
    f("static-cache", G::Cache, K::Count, "Static cache length", "dynamic",
        "Static cache length pre-allocated per sequence"),
    f("state-layers", G::CacheShape, K::Count, "State layers (Mamba / linear)", "0",
        "Layers keeping a constant per-sequence state instead of KV (the mixer's layers)"),
    f("state-bytes", G::CacheShape, K::Count, "State bytes per layer", "from mixer",
        "State bytes per such layer and sequence (default: from the mixer's shape)")
        .unit(Unit::Bytes),
    f("attention", G::Transients, K::Choice, "Attention kernel", "",
        "Attention implementation (eager keeps a tokens² matrix)")
        .choices(&[
            ("", "sdpa"),
            ("flash", "flash"),
            ("efficient", "memory-efficient"),
            ("eager", "eager — tokens² scores"),
        ]),
    f("logits", G::Transients, K::Choice, "Logits kept", "",
        "Logits kept in prefill")
        .choices(&[("", "last position"), ("all", "all positions")]),
    f("cuda-context-mib", G::Transients, K::Count, "CUDA context", "in reserve",
        "CUDA context + library workspaces per device (assumed)")
        .unit(Unit::Mib),
    f("train", G::Training, K::Choice, "Mode", "", "Training (none: inference)")
        .choices(&[
            ("", "inference"),
            ("full", "full fine-tuning"),
            ("lora", "LoRA"),
            ("qlora", "QLoRA — NF4 base, checkpointing on"),
        ]),
    f("optimizer", G::Training, K::Choice, "Optimizer", "",
        "Optimizer whose states training keeps (also read: adam, adamw_torch, adamw_torch_fused, adam8bit, adamw_8bit, adamw_bnb_8bit, paged_adamw_8bit, sgdm)")
        .choices(&[
            ("", "AdamW"),
            ("adamw-fused", "AdamW, fused kernel"),
            ("adamw8bit", "AdamW 8-bit"),
            ("paged-adamw", "PagedAdamW — states in unified memory"),
            ("paged-adamw8bit", "PagedAdamW 8-bit"),
            ("sgd-momentum", "SGD + momentum"),
            ("sgd", "SGD"),
            ("none", "none"),
        ]),
    f("grad-dtype", G::Training, K::Text, "Gradient dtype", "= compute",
        "Gradient dtype")
        .choices(DTYPES),
    f("master-weights", G::Training, K::Bool(true), "fp32 master weights", "",
        "Keep fp32 master weights"),
    f("lora-rank", G::Training, K::Count, "LoRA rank", "16", "LoRA rank r"),
    f("lora-targets", G::Training, K::Text, "LoRA targets", "q,k,v,o",
        "LoRA target projections: q,k,v,o,gate,up,down,lm_head or all (every decoder linear)"),
    f("lora-dtype", G::Training, K::Text, "LoRA adapter dtype", "fp32",
        "Adapters' dtype: fp32 as PEFT keeps them, bf16 as torchtune and LitGPT do")
        .choices(&[("fp32", "fp32"), ("bf16", "bf16"), ("fp16", "fp16")]),
    f("lora-dropout", G::Training, K::Bool(false), "LoRA dropout", "",
        "A dropout before each adapter (lora_dropout > 0): each keeps its dropped input and mask"),
    f("autocast", G::Training, K::Choice, "Mixed-precision autocast", "",
        "The step runs under torch.autocast in the compute dtype (transformers' Trainer with bf16 or fp16): each adapter keeps a 16-bit copy of its input, not one in its own dtype")
        .choices(&[("", "off"), ("bf16", "bf16"), ("fp16", "fp16")]),
    f("qlora-kernel", G::Training, K::Choice, "QLoRA 4-bit kernel", "",
        "The base's 4-bit linear: bitsandbytes 0.43.1 or earlier keeps each linear's input")
        .choices(&[
            ("", "bitsandbytes ≥ 0.43.2, torchao"),
            ("bnb@0.43.1", "bitsandbytes ≤ 0.43.1"),
        ]),
    f("checkpointing", G::Training, K::Bool(false), "Activation checkpointing", "",
        "Full activation checkpointing (on by default with qlora, as its recipes run)"),
    f("checkpointing-policy", G::Training, K::Choice, "Checkpointing policy", "",
        "What a checkpointed layer saves: its input only, or torchtitan's selective op policy (matmul outputs but every second, the attention's)")
        .choices(&[
            ("", "layer — the input; the rest recomputed"),
            ("op", "op — torchtitan's selective op policy"),
        ]),
    f("zero", G::Training, K::Choice, "DeepSpeed ZeRO", "",
        "ZeRO stage over the data-parallel ranks: what each rank keeps only its part of")
        .choices(&[
            ("", "off"),
            ("1", "stage 1 — optimizer states"),
            ("2", "stage 2 — + gradients"),
            ("3", "stage 3 — + parameters"),
        ]),
    f("fsdp", G::Training, K::Choice, "FSDP", "",
        "FSDP sharding of parameters, gradients and optimizer states (FSDP2 fully_shard, FSDP1 ShardingStrategy)")
        .choices(&[
            ("", "off"),
            ("full", "full shard — reshard_after_forward=True"),
            ("hybrid", "hybrid shard — full shard within a node"),
            ("grad-op", "grad-op — reshard_after_forward=False"),
        ]),
    f("offload-optimizer", G::Training, K::Choice, "Offload optimizer", "",
        "DeepSpeed offload_optimizer: states, master weights and fp32 gradients leave the GPU")
        .choices(&[("", "on the GPU"), ("cpu", "CPU"), ("nvme", "NVMe")]),
    f("offload-param", G::Training, K::Choice, "Offload parameters", "",
        "ZeRO-3 offload_param, or FSDP's CPUOffloadPolicy (cpu: parameters, gradients and the optimizer step)")
        .choices(&[("", "on the GPU"), ("cpu", "CPU"), ("nvme", "NVMe")]),
    f("reduce-dtype", G::Training, K::Text, "Reduce dtype", "= gradients",
        "The dtype gradients are reduce-scattered in (FSDP2 MixedPrecisionPolicy reduce_dtype)")
        .choices(&[("fp32", "fp32"), ("bf16", "bf16")]),
    f("ddp-bucket-view", G::Training, K::Bool(false), "DDP gradient_as_bucket_view", "",
        "DDP's gradients as views of its all-reduce buckets (saves a gradients-sized copy)"),
    f("framework", G::Training, K::Choice, "Framework", "",
        "The recipe that runs the step: its defaults (checkpointing, optimizer, adapters, loss, model loading) for the keys not given")
        .choices(&[
            ("", "none named — transformers + PEFT code paths"),
            ("transformers", "transformers Trainer + PEFT"),
            ("transformers@4.39", "transformers 4.39 (April 2024): its Llama loss, a RoPE cache per layer"),
            ("trl", "TRL SFTTrainer"),
            ("torchtune", "torchtune 0.6"),
            ("torchtune@0.1", "torchtune 0.1"),
            ("litgpt", "LitGPT"),
            ("litgpt@2023", "lit-gpt 8641822 (Oct 2023), its own GPT"),
            ("unsloth", "unsloth"),
            ("unsloth@2024.4", "unsloth 2024.4 (April 2024), a RoPE cache per layer"),
            ("axolotl", "axolotl"),
        ]),
    f("loss", G::Training, K::Text, "Loss", "full",
        "How the loss meets the logits: full (transformers), float-sliced (torchtune 0.1), float-shifted (transformers 4.39's Llama), chunked[:N] (torchtune's N output chunks), chunked-compute[:C] (chunks in the compute dtype), chunked-fabric[:C] (LitGPT: chunks in fp32 as Fabric returns them), checkpointed[:C] (TRL's chunked_nll), fused (unsloth)")
        .choices(&[
            ("full", "full — every position's fp32 log-softmax"),
            ("chunked", "chunked — torchtune, 8 chunks"),
            ("checkpointed", "checkpointed — TRL chunked_nll"),
            ("fused", "fused — unsloth"),
        ]),
    f("optimizer-in-backward", G::Training, K::Bool(false), "Optimizer in the backward", "",
        "Each parameter stepped as soon as its gradient is ready, which is then freed (torchtune optimizer_in_bwd)"),
    f("checkpointing-every", G::Training, K::Count, "Checkpoint every n-th layer", "1",
        "With checkpointing: every n-th layer checkpointed, the others keep their activations (torchtune's selective ac_option)"),
    f("offload-activations", G::Training, K::Bool(false), "Offload activations", "",
        "Saved activations moved to pinned host memory and back for the backward (torchtune, unsloth)"),
    f("modules-to-save", G::Training, K::Text, "Modules trained beside LoRA", "none",
        "PEFT modules_to_save: embed, lm_head (a trainable copy beside the frozen original)")
        .choices(&[("embed", "embed"), ("lm_head", "lm_head"), ("embed,lm_head", "embed, lm_head")]),
    f("expandable-segments", G::Training, K::Bool(false), "Expandable segments", "",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the caching allocator grows one segment per pool"),
    f("reserve-gib", G::Devices, K::Count, "Reserve", "4",
        "Reserve per device: a preparation hypothesis, not proof")
        .unit(Unit::Gib),
    f("reserve-bytes", G::Devices, K::Count, "…or reserve", "",
        "Overrides reserve-gib, e.g. with the agent's observed overhead")
        .unit(Unit::Bytes),
    f("ram", G::Devices, K::Text, "Host RAM", "",
        "The host's RAM per node (64GiB, 128GB; a Mac's is its unified memory): the verdict on what is put in host memory")
        .choices(&[("32GiB", "32 GiB"), ("64GiB", "64 GiB"), ("128GiB", "128 GiB"), ("256GiB", "256 GiB")]),
    f("gpus", G::Devices, K::Count, "GPUs", "1", "GPUs in total"),
    f("tp", G::Devices, K::Count, "Tensor parallel", "1", "Tensor-parallel degree"),
    f("pp", G::Devices, K::Count, "Pipeline stages", "1", "Devices a layer stack is cut into"),
    f("sp", G::Devices, K::Bool(false), "Sequence parallel", "",
        "Megatron's sequence parallelism with tp: the activations split over the tp ranks as well"),
    f("cp", G::Devices, K::Count, "Context parallel", "1",
        "Training: each sequence split over this many ranks (torch context_parallel, Megatron CP), taken from the data-parallel ranks"),
    f("ep", G::Devices, K::Count, "Expert parallel", "1",
        "Training a MoE: the routed experts split over this many ranks, taken from the data-parallel ranks"),
    f("pipeline", G::Devices, K::Choice, "Pipeline schedule", "",
        "Training's pipeline schedule: how many micro-batches the first stage holds in flight")
        .choices(&[("", "1F1B"), ("gpipe", "GPipe — every micro-batch in flight")]),
    f("micro-batches", G::Devices, K::Count, "Micro-batches", "≥ pp",
        "Micro-batches per optimizer step (gradient accumulation) through the pipeline"),
    f("nodes", G::Devices, K::Count, "Nodes", "1",
        "Nodes the GPUs are spread over (host memory is counted per node)"),
];

/// The field of a key, if it is one.
pub fn field(key: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.key == key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::sample;
    use crate::params::{from_pairs, keys, to_pairs};

    fn parse_errors(f: &Field, value: &str) -> Vec<String> {
        let errors = if f.is_engine() {
            crate::engine::from_pairs([(f.key, value)]).1
        } else {
            from_pairs([(f.key, value)]).1
        };
        errors
            .into_iter()
            .map(|e| e.to_string())
            // A lone shape key is a parse of the key that then needs the rest of the shape.
            .filter(|e| !e.contains("needed"))
            .collect()
    }

    #[test]
    fn every_field_is_described_once_and_parses() {
        for (i, f) in FIELDS.iter().enumerate() {
            assert!(
                FIELDS[..i].iter().all(|g| g.key != f.key),
                "{} twice",
                f.key
            );
            assert!(!f.label.trim().is_empty(), "{}: no label", f.key);
            assert!(!f.help.trim().is_empty(), "{}: no help", f.key);
            assert_eq!(field(f.key), Some(f));
            let v = sample(f);
            assert!(!v.is_empty(), "{}: no sample value", f.key);
            assert_eq!(parse_errors(f, v), Vec::<String>::new(), "{}={v}", f.key);
            // Every offered value is one the parser takes ("" is the default: no key).
            for (value, label) in f.choices {
                assert!(!label.is_empty(), "{}: a choice without a label", f.key);
                if !value.is_empty() {
                    assert_eq!(
                        parse_errors(f, value),
                        Vec::<String>::new(),
                        "{}={value}",
                        f.key
                    );
                }
            }
            match f.kind {
                FieldKind::Choice => assert!(
                    f.choices.iter().any(|c| c.0.is_empty()) && f.choices.len() > 1,
                    "{}: a choice field needs its default and alternatives",
                    f.key
                ),
                FieldKind::Count | FieldKind::Bool(_) | FieldKind::Fraction | FieldKind::Card => {
                    assert!(f.choices.is_empty(), "{}", f.key)
                }
                FieldKind::Text => {}
            }
            // Not a value of the field's kind: the parser says so, naming the key.
            if !matches!(f.kind, FieldKind::Text) {
                let bad = parse_errors(f, "x?");
                assert!(
                    bad.iter().any(|e| e.starts_with(&format!("{}:", f.key))),
                    "{}: {bad:?}",
                    f.key
                );
            }
        }
    }

    #[test]
    fn a_bool_default_is_what_an_absent_key_means() {
        // Writing a switch's default back must be a no-op: `to_pairs` omits it.
        for f in FIELDS
            .iter()
            .filter(|f| matches!(f.kind, FieldKind::Bool(_)))
        {
            let FieldKind::Bool(d) = f.kind else { continue };
            if f.is_engine() {
                let (p, errors) = crate::engine::from_pairs([(f.key, d.to_string().as_str())]);
                assert!(errors.is_empty() && p.is_empty(), "{}: {errors:?}", f.key);
                continue;
            }
            let base = [
                ("layers", "2"),
                ("hidden", "64"),
                ("heads", "4"),
                ("intermediate", "128"),
                ("vocab", "100"),
            ];
            let d = d.to_string();
            let (with, errors) = from_pairs(base.iter().copied().chain([(f.key, d.as_str())]));
            assert!(errors.is_empty(), "{}: {errors:?}", f.key);
            let (without, _) = from_pairs(base);
            assert_eq!(
                with, without,
                "{}: default {d} is not the absent value",
                f.key
            );
        }
    }

    #[test]
    fn the_table_is_the_keys_and_pairs_round_trip_through_it() {
        // The estimate's keys are the table; the engine's are the registry's, apart.
        let params: Vec<&str> = keys().collect();
        let engine: Vec<&str> = crate::engine::engine_keys().collect();
        assert_eq!(params.len(), FIELDS.len());
        assert!(engine.iter().all(|k| !params.contains(k)));
        for f in FIELDS {
            assert_eq!(params.contains(&f.key), !f.is_engine());
            assert_eq!(engine.contains(&f.key), f.is_engine());
        }
        // Every key `to_pairs` writes is in the table, and reading them back gives the
        // same input, with every non-engine field set to a non-default value.
        let mut pairs: Vec<(&str, &str)> = vec![
            ("layers", "4"),
            ("hidden", "1024"),
            ("heads", "8"),
            ("kv-heads", "2"),
            ("head-dim", "64"),
            ("intermediate", "2048"),
            ("vocab", "1000"),
            ("experts", "8"),
            ("active-experts", "2"),
            ("expert-intermediate", "512"),
            ("shared-experts", "1"),
            ("shared-intermediate", "512"),
            ("dense-layers", "1"),
            ("kv-lora-rank", "512"),
            ("qk-nope-dim", "128"),
            ("qk-rope-dim", "64"),
            ("v-head-dim", "128"),
            ("q-lora-rank", "256"),
            // Fewer than the 3 attention layers the samples give, one of them global.
            ("kv-shared-layers", "2"),
            ("kv-shared-global", "1"),
            // At least the heads ÷ kv-heads each token runs.
            ("attn-experts", "4"),
        ];
        let fixed: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
        for f in FIELDS
            .iter()
            .filter(|f| !f.is_engine() && f.key != "parameters")
        {
            if !fixed.contains(&f.key) {
                pairs.push((f.key, sample(f)));
            }
        }
        let (input, errors) = from_pairs(pairs.iter().copied());
        assert!(errors.is_empty(), "{errors:?}");
        let back = to_pairs(&input);
        for (k, _) in &back {
            assert!(
                field(k).is_some_and(|f| !f.is_engine()),
                "{k} not in the table"
            );
        }
        let written: Vec<&str> = back.iter().map(|(k, _)| *k).collect();
        for f in FIELDS
            .iter()
            .filter(|f| !f.is_engine() && f.key != "parameters")
        {
            assert!(written.contains(&f.key), "to_pairs drops {}", f.key);
        }
        let (again, errors) = from_pairs(back.iter().map(|(k, v)| (*k, v.as_str())));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(again, input);
        // The count mode's key as well.
        let (count, _) = from_pairs([("parameters", "7e9")]);
        assert_eq!(
            to_pairs(&count),
            vec![("parameters", "7000000000".to_string())]
        );
    }
}
