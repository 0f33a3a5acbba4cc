//! LMDeploy's TurboMind engine (`lmdeploy serve api_server`, its default backend): the
//! KV cache is a share of what is free once the model is loaded, cut into blocks.
//!
//! Read at InternLM/lmdeploy tag v0.14.0:
//! - `src/turbomind/models/llama/BlockManager.cc` `BlockManager::BlockManager` and
//!   `GetBlockCount`: with `cache_max_block_count` < 1 (the Python
//!   `cache_max_entry_count`, `lmdeploy/turbomind/turbomind.py` `_from_hf`), the block
//!   count is `static_cast<size_t>(free × ratio) ÷ block_size`, where free is
//!   `cudaMemGetInfo`'s, the smallest over the tensor-parallel group
//!   (`src/turbomind/engine/engine.cc` `Engine::Impl::CreateSequenceManager`);
//! - `src/turbomind/kernels/attention/block.h` `Layout::block_size`: a block holds
//!   `cache_block_seq_len` (64) tokens of K and V for every layer, so in the model's
//!   dtype it is 64 × the KV bytes of one token;
//! - `src/turbomind/engine/engine.cc`: max cached tokens = blocks × block length, and a
//!   `session_len` above them is truncated ("`session_len` truncated to … due to
//!   limited KV cache memory");
//! - what is allocated before free memory is read: the weights (`turbomind.py` runs
//!   `_process_weights` before `_create_engine`), the CUDA context and communicators
//!   (`turbomind.cc` `CreateContext`), the GEMM workspace
//!   (`src/turbomind/models/llama/LlamaLinear.cu` `LlamaLinear::Impl`: barriers 1 MiB,
//!   partials 32 MiB, and the tensor maps allocated at the partials' size), then, in
//!   `turbomind.cc` `CreateEngine`, the language model built before its engine: the
//!   generation's token ids (`src/turbomind/generation/generation.cc`: int32,
//!   max_batch_size × session_len), the attention layer's workspaces
//!   (`src/turbomind/models/llama/unified_attention_layer.cc`, "Eagerly initialize
//!   workspace buffers": fp32 partial outputs of 4096 tokens, their max/sum, split
//!   counts, an output buffer of max_forward_token_num rows for MoE models, the block
//!   pointers of each phase) and, at tp > 1, the symmetric communication buffer
//!   (`src/turbomind/models/language_model.cc`);
//! - the defaults (`lmdeploy/messages.py` `TurbomindEngineConfig`): 0.8 of the free
//!   memory, blocks of 64 tokens, 8192 prefill tokens; `max_batch_size` by card
//!   (`lmdeploy/utils.py` `get_max_batch_size`: 1024 on H100, H200, H800 and L20Y, 384 on
//!   A100 and A800, 128 on the others); max_forward_token_num = prefill tokens +
//!   max_batch_size (`turbomind.cc` `TurboMind::Impl::Impl`).
//!
//! What the forward, the sampler and the GEMM tuning allocate later comes out of the
//! share the pool leaves (1 − the fraction); a budget whose leftover share is below
//! the assumed peak of one forward says so. From 0.15 TurboMind sizes one cache region
//! for KV blocks and recurrent states before building the model, which this rule does
//! not follow.

use super::arith::{gib_text, mib, prod, sum};
use super::contract::{Engine, Info};
use super::flags::{Flag, MAX_MODEL_LEN, field, fraction, positive};
use super::fraction::{ONE, fraction_text, times_fraction};
use super::outcome::line;
use super::pool::{Draft, simple_pool};
use super::request::{COMM_BUFFERS_MIB, Ctx, forward_peak};
use crate::error::EstimateError;
use crate::estimate::Kind;
use crate::fields::FieldKind;
use crate::format::Dtype;
use crate::kv::KvDtype;

/// `--cache-max-entry-count`: the share of the free memory after loading the KV cache
/// takes.
const CACHE_MAX_ENTRY_COUNT: Flag = Flag::new(
    field(
        "cache-max-entry-count",
        FieldKind::Fraction,
        "LMDeploy KV cache share",
        "0.8",
        "LMDeploy: share of the memory free after loading for the KV cache (below 1)",
    ),
    fraction,
);

/// `--max-batch-size`: the sequences served at once.
const MAX_BATCH_SIZE: Flag = Flag::new(
    field(
        "max-batch-size",
        FieldKind::Count,
        "LMDeploy max batch size",
        "by card",
        "LMDeploy: sequences at once (by card: H100/H200 1024, A100 384, else 128)",
    ),
    positive,
);

/// LMDeploy's TurboMind engine.
pub struct Lmdeploy;

impl Engine for Lmdeploy {
    const INFO: Info = Info {
        name: "lmdeploy",
        aliases: &["turbomind", "lmdeploy-turbomind"],
        summary: "LMDeploy's TurboMind engine (`lmdeploy serve api_server`).",
        releases: &[("lmdeploy", "LMDeploy 0.14 (TurboMind)")],
        release: None,
        hint: "lmdeploy",
        // `max-model-len` is its `--session-len`.
        flags: &[&MAX_MODEL_LEN, &CACHE_MAX_ENTRY_COUNT, &MAX_BATCH_SIZE],
        formats: &["bf16", "fp8-block", "awq-4-g128"],
        windows: false,
        shared_context: false,
        // TurboMind is CUDA only.
        metal: false,
        refusal: None,
    };

    fn budget(c: &Ctx) -> Result<Draft, EstimateError> {
        rule(c)
    }
}

/// The CUDA context before loading, MiB (assumed, as for SGLang and TGI).
const CONTEXT_MIB: u64 = 512;

/// `LlamaLinear::Impl`: barriers (`Gemm::kBarriersSize`, 1 MiB), partials
/// (`kPartialsSize`, 32 MiB), the tensor maps (allocated at the partials' size) and a
/// 4-byte flag.
const GEMM_WORKSPACE: u64 = (1 + 32 + 32) * (1 << 20) + 4;

/// `UnifiedAttentionLayer::kMaxWorkspaceTokens`.
const WORKSPACE_TOKENS: u64 = 4096;

/// Phases of the engine's loop (`async_` is on by default: 2).
const PHASES: u64 = 2;

/// Tokens per KV block (`cache_block_seq_len`, 64 by default).
const BLOCK_TOKENS: u64 = 64;

/// Tokens of one prefill iteration (`max_prefill_token_num`, 8192 by default).
const PREFILL_TOKENS: u64 = 8192;

const SRC_BLOCKS: &str = "src/turbomind/models/llama/BlockManager.cc (GetBlockCount)";

fn rule(c: &Ctx) -> Result<Draft, EstimateError> {
    let p = c.params;
    let input = c.input;
    // TurboMind runs fp16 or bf16 and caches K and V in that dtype (or int8/int4 with
    // quant_policy, whose per-token scales this rule does not count).
    if input.compute_dtype == Dtype::F32 || input.compute_dtype == Dtype::Fp8 {
        return Err(EstimateError::invalid(
            "compute-dtype",
            "TurboMind runs in fp16 or bf16",
        ));
    }
    match input.kv_dtype {
        None
        | Some(KvDtype::Dense {
            dtype: Dtype::F16 | Dtype::Bf16,
        }) => {}
        Some(_) => {
            return Err(EstimateError::invalid(
                "kv-dtype",
                "TurboMind caches K and V in the model's dtype, or int8/int4 with a scale and zero per token and head (quant_policy), which this rule does not count; it has no fp8 cache",
            ));
        }
    }
    let Some(a) = input.arch.filter(|a| a.mla.is_none()) else {
        return Err(EstimateError::invalid(
            "engine",
            "lmdeploy: give the architecture (a preset, a config.json or the shape keys); TurboMind's MLA cache is not modelled",
        ));
    };
    let mut assumptions = Vec::new();
    let mut warnings = Vec::new();
    let (total, derived) = c.card.torch_total();
    let ratio = p
        .fraction(CACHE_MAX_ENTRY_COUNT.key())
        .unwrap_or(ONE / 10 * 8);
    // `BlockManager`: a value of 1 or more is a number of blocks, not a share.
    if ratio >= ONE {
        return Err(EstimateError::invalid(
            CACHE_MAX_ENTRY_COUNT.key(),
            "give a fraction below 1 (TurboMind reads 1 or more as a number of blocks)",
        ));
    }
    let name = c.card.name.to_ascii_lowercase();
    let by_card = if ["h100", "h800", "l20y", "h200"]
        .iter()
        .any(|n| name.contains(n))
    {
        1024
    } else if ["a100", "a800"].iter().any(|n| name.contains(n)) {
        384
    } else {
        128
    };
    let batch = p.count(MAX_BATCH_SIZE.key()).unwrap_or(by_card);
    if p.count(MAX_BATCH_SIZE.key()).is_none() {
        assumptions.push(format!(
            "max-batch-size {batch} by LMDeploy's rule for this card (lmdeploy/utils.py get_max_batch_size)"
        ));
    }
    // `--cache-block-seq-len` and `--max-prefill-token-num` at their defaults.
    let (block, prefill) = (BLOCK_TOKENS, PREFILL_TOKENS);
    let tp = input.tp.max(1);
    let forward_tokens = sum(&[prefill, batch])?.div_ceil(tp).saturating_mul(tp);
    let session = c.max_model_len;
    let multi = tp.saturating_mul(input.pp.max(1)) > 1;
    let ctx_mib = if multi {
        CONTEXT_MIB.saturating_add(COMM_BUFFERS_MIB)
    } else {
        CONTEXT_MIB
    };
    let b = input.compute_dtype.bytes();
    let heads = a.heads.div_ceil(tp);
    let token_ids = prod(&[batch, session, 4])?;
    let attention = sum(&[
        prod(&[WORKSPACE_TOKENS, heads, a.head_dim, 4])?,
        prod(&[WORKSPACE_TOKENS, heads, 2, 4])?,
        prod(&[WORKSPACE_TOKENS, 4])?,
        if a.moe.is_some() {
            prod(&[forward_tokens, heads, a.head_dim, b])?
        } else {
            0
        },
        prod(&[
            PHASES,
            sum(&[prod(&[batch, session.div_ceil(block.max(1))])?, 16])?,
            8,
        ])?,
    ])?;
    let symmetric = if tp > 1 {
        prod(&[forward_tokens, a.hidden, b])?.max(prod(&[batch, a.vocab, b])?)
    } else {
        0
    };
    let buffers = sum(&[token_ids, attention, symmetric])?;
    let used = sum(&[mib(ctx_mib), c.weights, GEMM_WORKSPACE, buffers])?;
    let free = total.saturating_sub(used);
    let pool = times_fraction(free, ratio, false)?;
    let left = free.saturating_sub(pool);
    assumptions.push("free memory read right after the language model is built: what loading the weights left in TurboMind's allocator is not counted; blocks of 64 tokens and prefills of 8192 (the defaults of --cache-block-seq-len and --max-prefill-token-num)".into());
    let lines = vec![
        line(
            "budget",
            "Card total (cudaMemGetInfo)",
            total,
            if derived {
                Kind::Assumed
            } else {
                Kind::Computed
            },
            "the total cudaMemGetInfo reports, as torch does".into(),
            &[(
                "total",
                format!("{total} B (torch{})", if derived { ", derived" } else { "" }),
            )],
            "src/turbomind/engine/engine.cc (CreateSequenceManager: cudaMemGetInfo)",
        ),
        line(
            "cuda_context",
            if multi {
                "CUDA context and communicators before loading (assumed)"
            } else {
                "CUDA context before loading (assumed)"
            },
            mib(ctx_mib),
            Kind::Assumed,
            if multi {
                format!(
                    "{CONTEXT_MIB} MiB context + {COMM_BUFFERS_MIB} MiB at tp × pp > 1 (vLLM 0.19's tp ≥ 2 start-ups on H100s)"
                )
            } else {
                format!("{CONTEXT_MIB} MiB")
            },
            &[("tp", input.tp.to_string()), ("pp", input.pp.to_string())],
            "src/turbomind/turbomind.cc (CreateContext)",
        ),
        line(
            "weights",
            "Weights on this device",
            c.weights,
            Kind::Computed,
            "the estimate's weight lines, most loaded device".into(),
            &[("tp", input.tp.to_string())],
            "the estimator",
        ),
        line(
            "gemm_workspace",
            "GEMM workspace",
            GEMM_WORKSPACE,
            Kind::Computed,
            "barriers 1 MiB + partials 32 MiB + tensor maps at the partials' size + 4 B".into(),
            &[],
            "src/turbomind/models/llama/LlamaLinear.cu (LlamaLinear::Impl)",
        ),
        line(
            "runtime_buffers",
            "Buffers the model allocates before the pool is sized",
            buffers,
            Kind::Computed,
            "token ids (int32, max-batch-size × session) + attention workspaces (fp32, 4096 tokens) + block pointers + symmetric buffer at tp > 1".into(),
            &[
                ("token-ids", token_ids.to_string()),
                ("attention", attention.to_string()),
                ("symmetric", symmetric.to_string()),
                ("max-batch-size", batch.to_string()),
                ("max-forward-tokens", forward_tokens.to_string()),
            ],
            "src/turbomind/generation/generation.cc, models/llama/unified_attention_layer.cc, models/language_model.cc",
        ),
        line(
            "reserved",
            "Left free: what is free × (1 − cache_max_entry_count)",
            left,
            Kind::Computed,
            "free − ⌊free × cache_max_entry_count⌋".into(),
            &[
                ("free", format!("{free} B")),
                ("cache-max-entry-count", fraction_text(ratio)),
            ],
            SRC_BLOCKS,
        ),
    ];
    // The forward, the sampler and the GEMM tuning take their memory from what the
    // pool leaves.
    let forward = forward_peak(input, forward_tokens)?;
    if left < forward {
        warnings.push(format!(
            "only {} left beside the KV cache for a forward of {forward_tokens} tokens (about {}, assumed): TurboMind may run out of memory at warm-up (lower cache-max-entry-count)",
            gib_text(left),
            gib_text(forward)
        ));
    }
    let (group_block_bytes, groups, seq_blocks) = simple_pool(c, block)?;
    let tokens = pool
        .checked_div(group_block_bytes)
        .unwrap_or(0)
        .saturating_mul(block);
    if tokens < session {
        warnings.push(format!(
            "TurboMind truncates session_len to {tokens} tokens (\"`session_len` truncated to {tokens} due to limited KV cache memory\")"
        ));
    }
    Ok(Draft {
        version: "0.14 (TurboMind)",
        capacity: total,
        capacity_kind: if derived { "torch, derived" } else { "torch" },
        lines,
        block,
        group_block_bytes,
        groups,
        seq_blocks,
        tokens_by_concurrency: false,
        kv_cache_bytes: None,
        pool: None,
        need: None,
        uncertainty: mib(ctx_mib).checked_div(2).unwrap_or(0),
        speculative: None,
        assumptions,
        warnings,
        refused: None,
        devices: Vec::new(),
    })
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    //! Hand derivations of TurboMind's pool, on Llama-3.1-8B in bf16.

    use crate::engine::tests::{bytes_of, engine, llama_8b, run, with};
    use crate::engine::{Outcome, budget};
    use crate::estimate::estimate;

    /// Llama-3.1-8B, bf16, H100 SXM 80GB, session 16 000, the defaults (0.8, blocks of
    /// 64 tokens, 1024 sequences on an H100, 8192 prefill tokens), by hand:
    /// - total 85 027 979 264 B (torch's), context 536 870 912, weights 16 060 522 496,
    ///   GEMM workspace 65 MiB + 4 = 68 157 444;
    /// - buffers: token ids 1024 × 16 000 × 4 = 65 536 000; attention 4096 × 32 × 128 ×
    ///   4 = 67 108 864 + 4096 × 32 × 2 × 4 = 1 048 576 + 4096 × 4 = 16 384, block
    ///   pointers 2 × (1024 × 250 + 16) × 8 = 4 096 256: 137 806 080;
    /// - free 68 224 622 332; pool ⌊× 0.8⌋ = 54 579 697 865; left 13 644 924 467;
    /// - blocks of 64 × 131 072 B: 6 506 → 416 384 tokens; 250 blocks a sequence: 26.
    #[test]
    fn lmdeploy_llama_8b_on_h100_matches_the_hand_derivation() {
        let b = run(&llama_8b(&[]), &with(&[("engine", "lmdeploy")]));
        assert_eq!(b.version, "0.14 (TurboMind)");
        assert_eq!(b.capacity_bytes, 85_027_979_264);
        assert_eq!(bytes_of(&b, "gemm_workspace"), 68_157_444);
        assert_eq!(bytes_of(&b, "runtime_buffers"), 137_806_080);
        assert_eq!(bytes_of(&b, "reserved"), 13_644_924_467);
        assert_eq!(b.kv_capacity_bytes, 54_579_697_865);
        assert_eq!(b.block_size, 64);
        assert_eq!(b.kv_capacity_tokens, 416_384);
        assert_eq!(b.max_sequences, 26);
        assert_eq!(b.outcome, Outcome::Fits);
        assert!(b.warnings.is_empty(), "{:?}", b.warnings);
        assert!(
            b.assumptions
                .iter()
                .any(|a| a.contains("max-batch-size 1024"))
        );
        // A smaller share: the pool scales with it, what is free does not move.
        let half = run(
            &llama_8b(&[]),
            &with(&[("engine", "lmdeploy"), ("cache-max-entry-count", "0.5")]),
        );
        assert_eq!(half.kv_capacity_bytes, 68_224_622_332 / 2);
        // An A100 serves 384 sequences by default: fewer token ids and block pointers.
        let a100 = run(
            &llama_8b(&[]),
            &[
                ("engine", "turbomind"),
                ("card", "a100-80gb"),
                ("max-model-len", "16000"),
            ],
        );
        assert!(
            a100.assumptions
                .iter()
                .any(|a| a.contains("max-batch-size 384"))
        );
        assert_eq!(
            bytes_of(&a100, "runtime_buffers"),
            384 * 16_000 * 4 + 67_108_864 + 1_048_576 + 16_384 + 2 * (384 * 250 + 16) * 8
        );
    }

    /// A pool too small for the session: TurboMind starts, with a shorter session.
    #[test]
    fn lmdeploy_truncates_the_session_to_the_pool() {
        let b = run(
            &llama_8b(&[]),
            &[
                ("engine", "lmdeploy"),
                ("card", "24GiB"),
                ("max-model-len", "131072"),
                ("max-batch-size", "8"),
            ],
        );
        assert_eq!(b.outcome, Outcome::Refused);
        assert!(
            b.warnings
                .iter()
                .any(|w| w.contains(&format!("session_len to {} tokens", b.kv_capacity_tokens))),
            "{:?}",
            b.warnings
        );
        // A share that leaves less than one forward's activations is said to.
        let tight = run(
            &llama_8b(&[]),
            &with(&[("engine", "lmdeploy"), ("cache-max-entry-count", "0.999")]),
        );
        assert!(
            tight.warnings.iter().any(|w| w.contains("warm-up")),
            "{:?}",
            tight.warnings
        );
    }

    #[test]
    fn lmdeploy_refuses_what_turbomind_does_not_run() {
        let input = llama_8b(&[]);
        let est = estimate(&input).unwrap();
        let one = engine(&with(&[("engine", "lmdeploy"), ("cache-max-entry-count", "1")]));
        let e = budget(&input, &est, &one).unwrap_err();
        assert!(e.to_string().starts_with("cache-max-entry-count:"), "{e}");
        let input = llama_8b(&[("kv-dtype", "fp8")]);
        let est = estimate(&input).unwrap();
        let e = budget(&input, &est, &engine(&with(&[("engine", "lmdeploy")]))).unwrap_err();
        assert!(e.to_string().starts_with("kv-dtype:"), "{e}");
        let input = llama_8b(&[("compute-dtype", "fp32")]);
        let est = estimate(&input).unwrap();
        let e = budget(&input, &est, &engine(&with(&[("engine", "lmdeploy")]))).unwrap_err();
        assert!(e.to_string().starts_with("compute-dtype:"), "{e}");
    }

    /// At tp 2 each device keeps half the heads' workspaces and the communication
    /// buffers: the symmetric buffer holds the larger of a forward's hidden rows and a
    /// batch of logits.
    #[test]
    fn lmdeploy_at_tp_2_adds_the_communicators() {
        let b = run(
            &llama_8b(&[("tp", "2"), ("gpus", "2")]),
            &with(&[("engine", "lmdeploy")]),
        );
        assert_eq!(bytes_of(&b, "cuda_context"), (512 + 1884) << 20);
        let symmetric: u64 = b
            .lines
            .iter()
            .find(|l| l.key == "runtime_buffers")
            .unwrap()
            .inputs["symmetric"]
            .parse()
            .unwrap();
        // A batch of logits, 1024 × 128 256 × 2 B, is larger than a forward's hidden
        // rows, (8192 + 1024) × 4096 × 2 B; with 8 sequences the hidden rows are.
        assert_eq!(symmetric, 1024 * 128_256 * 2);
        let few = run(
            &llama_8b(&[("tp", "2"), ("gpus", "2")]),
            &with(&[("engine", "lmdeploy"), ("max-batch-size", "8")]),
        );
        let l = few.lines.iter().find(|l| l.key == "runtime_buffers").unwrap();
        assert_eq!(l.inputs["symmetric"], (8200 * 4096 * 2).to_string());
    }
}
