//! vLLM: the pool its worker sizes after a profiling run, version by version.
//!
//! vllm v0.19.0 `vllm/v1/worker/gpu_worker.py` `determine_available_memory`:
//! available KV = requested − (weights + torch peak increase of `profile_run` +
//! non-torch increase), where requested = ⌈total × gpu_memory_utilization⌉
//! (`vllm/v1/worker/utils.py` `request_memory`) and total is what torch reports for
//! the device. The CUDA-graph estimate is subtracted only with
//! `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1` (`vllm/envs.py`, default 0 in 0.19).
//!
//! The profiling run (`gpu_model_runner.py` `profile_run`) is a forward of
//! `max_num_batched_tokens` tokens (`_dummy_run`) and then, on the last pipeline
//! stage, `_dummy_sampler_run` over one row per request, `min(max_num_seqs,
//! max_num_batched_tokens)` rows, while the forward's hidden states are still held.
//! Its torch peak is the larger of the two phases, plus what stays allocated: the
//! fused-MoE workspace (`vllm/v1/worker/workspace.py`, kept across forwards) and
//! torch's cuBLAS workspace.
//!
//! Earlier versions differ where the logs show it: 0.10 (and 0.8) sorted the
//! vocabulary for top-k/top-p (`vllm/v1/sample/ops/topk_topp_sampler.py`
//! `apply_top_k_top_p`) and freed the MoE buffers after each forward; 0.10 paged hybrid
//! attention + state models at one page size ([`state_pool`]); 0.8 counted every byte
//! outside torch on the device, the CUDA context included; V0 profiled 256
//! sequences in eager PyTorch and measured memory outside torch from before the CUDA
//! context existed (0.6) or from just after it (0.7).
//!
//! 0.27 (`vllm@0.27`, the default `vllm`) picks its model runner per model
//! (`vllm/config/vllm.py` `use_v2_model_runner`): Model Runner V2 for dense,
//! unquantised models — its sampler copies the logits to fp32 and the profile skips
//! top-k/top-p, and its `profile_cudagraph_memory` returns 0, so no graph estimate
//! leaves the pool — and the V1 runner otherwise, which since 0.20 profiles its CUDA
//! graphs before the pool is sized and takes the estimate out of it
//! (`GPUModelRunner.profile_cudagraph_memory`, `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`
//! on by default). Its non-KV figure is the drop in free memory since start-up plus
//! the part of the torch peak above what stays allocated (`vllm/utils/mem_utils.py`
//! `memory_profiling`), the same sum as 0.19's three terms.

use super::*;

/// The vLLM accounting carried, newest first; `--engine vllm` is the newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum VllmVersion {
    /// 0.27 (the default): Model Runner V2 for dense, unquantised models (its sampler's
    /// fp32 copy, no CUDA-graph estimate taken off the pool), the V1 runner otherwise
    /// (0.19's profile, the CUDA-graph estimate taken off the pool).
    #[serde(rename = "0.27")]
    V027,
    /// 0.19 (V1 engine; triton top-k/top-p sampler, persistent MoE workspace).
    #[serde(rename = "0.19")]
    V019,
    /// 0.10 (V1 engine; sorting sampler).
    #[serde(rename = "0.10")]
    V010,
    /// 0.8 (V1 engine; 0.10's profile, every byte outside torch on the device counted).
    #[serde(rename = "0.8")]
    V08,
    /// 0.7 (V0 engine; memory measured from after the CUDA context).
    #[serde(rename = "0.7")]
    V07,
    /// 0.6 (V0 engine).
    #[serde(rename = "0.6")]
    V06,
}

impl VllmVersion {
    /// Parses "0.27", "0.19.0", "0.10.2", "0.8.5", "0.7.2", "0.6.5"…: the minor version
    /// picks the rules.
    pub fn parse(text: &str) -> Result<VllmVersion, EstimateError> {
        let mut parts = text.trim().trim_start_matches('v').split('.');
        match (parts.next(), parts.next()) {
            (Some("0"), Some("27")) => Ok(VllmVersion::V027),
            (Some("0"), Some("19")) => Ok(VllmVersion::V019),
            (Some("0"), Some("10")) => Ok(VllmVersion::V010),
            (Some("0"), Some("8")) => Ok(VllmVersion::V08),
            (Some("0"), Some("7")) => Ok(VllmVersion::V07),
            (Some("0"), Some("6")) => Ok(VllmVersion::V06),
            _ => Err(EstimateError::invalid(
                "engine",
                format!(
                    "vllm@{text}: the rules carried are vllm@0.27 (the default: Model Runner V2, or V1 with its CUDA-graph estimate), vllm@0.19, vllm@0.10, vllm@0.8, vllm@0.7 and vllm@0.6 (V0)"
                ),
            )),
        }
    }

    /// The rules of this release for `input`: 0.27 runs Model Runner V2 or V1 by model
    /// (vllm/config/vllm.py `use_v2_model_runner`, `_is_default_v2_model_runner_model`:
    /// not MoE, not quantised; speculative decoding is read in the V1 runner only).
    fn rules(self, input: &EstimateInput, speculative: bool) -> &'static Rules {
        match self {
            VllmVersion::V027 if !v2_runs(input) || speculative => &RULES[6],
            VllmVersion::V027 => &RULES[4],
            VllmVersion::V08 => &RULES[5],
            VllmVersion::V019 => &RULES[0],
            VllmVersion::V010 => &RULES[1],
            VllmVersion::V07 => &RULES[2],
            VllmVersion::V06 => &RULES[3],
        }
    }
}

/// Whether 0.27's Model Runner V2 runs the model: dense and unquantised
/// (`_is_default_v2_model_runner_model` excludes `is_moe` and `is_quantized`; the
/// 0.27.1 logs run Qwen2 and Qwen3 dense models on V2).
fn v2_runs(input: &EstimateInput) -> bool {
    let quantised = !matches!(
        input.format,
        None | Some(crate::format::StorageFormat::Dense { .. })
    );
    !quantised && input.arch.is_none_or(|a| a.moe.is_none())
}

/// One version's accounting.
struct Rules {
    label: &'static str,
    /// requested = ⌈total × utilisation⌉ (0.19) or truncated (earlier).
    ceil: bool,
    /// Bytes per (request × vocabulary) element the sampler holds at its peak, and
    /// whether the triton top-k/top-p buffer (one vocabulary row per SM) is added.
    sampler_bytes: u64,
    triton: bool,
    /// Model Runner V2's sampler: `sampler_bytes` per element at every row count (the
    /// profile skips top-k/top-p), no triton buffer.
    v2: bool,
    /// Hybrid attention + state models paged as read in this release's source
    /// ([`state_pool`]); the others count their attention layers in 16-token blocks.
    state_pages: bool,
    /// The fused-MoE workspace stays allocated after the forward.
    workspace_kept: bool,
    /// The CUDA-graph estimate is taken off the pool (0.27's V1 runner).
    graphs_subtracted: bool,
    /// V0 defaults (256 sequences, batched tokens = max(max-model-len, 2048)).
    v0: bool,
    /// Memory outside torch, MiB: tp = 1 and pp = 1, tp ≥ 2, pp ≥ 2 at tp = 1.
    non_torch_mib: [u64; 3],
    non_torch_logs: &'static str,
}

/// vllm v0.19.0 `vllm/v1/sample/sampler.py` + `ops/topk_topp_sampler.py`: the model's
/// logits (model dtype), their fp32 copy, the softmax probabilities and
/// `random_sample`'s exponential draws, 4 B each: 2 + 4 + 4 + 4 = 14 B per element
/// (12 when the model runs in fp32, whose logits are not copied). 0.10 and V0 sorted:
/// the logits (2) and fp32 copy (4), the sorted values (4) and int64 indices (8), and
/// the sort's input copy (4) and its two int64 index buffers (16) = 38 B (the last
/// three, the sort's temporaries, assumed).
/// Memory outside torch that tensor parallelism adds per GPU in the newest rules
/// (NCCL, the custom all-reduce buffers): tp ≥ 2 less tp 1, MiB. SGLang's rule uses it.
pub(super) const fn comm_buffers_mib() -> u64 {
    RULES[0].non_torch_mib[1].saturating_sub(RULES[0].non_torch_mib[0])
}

const RULES: [Rules; 7] = [
    Rules {
        label: "0.19",
        ceil: true,
        sampler_bytes: 14,
        triton: true,
        v2: false,
        state_pages: true,
        workspace_kept: true,
        graphs_subtracted: false,
        v0: false,
        non_torch_mib: [256, 2140, 72],
        non_torch_logs: "0.19 H100 logs: 0.24–0.26 GiB at tp 1, 2.06–2.13 at tp 2–4 (NCCL, all-reduce buffers), 0.07 at pp 2–4",
    },
    Rules {
        label: "0.10",
        ceil: false,
        sampler_bytes: 38,
        triton: false,
        v2: false,
        state_pages: true,
        workspace_kept: false,
        graphs_subtracted: false,
        v0: false,
        non_torch_mib: [133, 563, 133],
        non_torch_logs: "H100 logs (llm-d-benchmark): 0.13–0.14 GiB at tp 1, 0.55 at tp 2",
    },
    // vllm v0.7.2 `vllm/worker/worker.py`: `Worker.init_device` takes the baseline
    // (`self.baseline_snapshot = MemorySnapshot()`) after `torch.cuda.set_device`, so
    // the CUDA context is not in it, and before `init_worker_distributed_environment`,
    // so NCCL and the custom all-reduce buffers are; `determine_num_available_blocks`
    // then measures `memory_profiling(self.baseline_snapshot, weights_memory)` around
    // `profile_run`: non_torch_increase is what the libraries add after the context.
    // (Read in a stored copy of that file whose start-up message the 0.7.2 logs print
    // word for word; the tag itself was over the fetch limit.)
    Rules {
        label: "0.7 (V0)",
        ceil: false,
        sampler_bytes: 38,
        triton: false,
        v2: false,
        state_pages: false,
        workspace_kept: false,
        graphs_subtracted: false,
        v0: true,
        non_torch_mib: [80, 2140, 80],
        non_torch_logs: "0.7 V0 logs: 0.01–0.09 GiB at tp 1 (T4, L40, H100), 2.10 at tp 8 (A100-40, NCCL and all-reduce buffers, as 0.19's 2.06–2.13 at tp 2–4)",
    },
    Rules {
        label: "0.6 (V0)",
        ceil: false,
        sampler_bytes: 38,
        triton: false,
        v2: false,
        state_pages: false,
        workspace_kept: false,
        graphs_subtracted: false,
        v0: true,
        non_torch_mib: [1833, 3666, 1833],
        non_torch_logs: "0.6.5 logs (vLLM PR 10511): 1.79 GiB at tp 1, 3.58 at tp 2, the CUDA context included",
    },
    // vllm 0.27 with Model Runner V2 (`vllm/v1/worker/gpu/model_runner.py`): `profile_run`
    // is the forward of max_num_batched_tokens and `_dummy_sampler_run`, whose sampler
    // (`vllm/v1/worker/gpu/sample/sampler.py` `Sampler.sample`) copies the logits to a
    // new fp32 tensor, works on it in place and draws with `gumbel_sample`; the profile
    // skips top-k/top-p ("the sampler may skip top_k, top_p, and logprobs"): 2 + 4 B per
    // element. `profile_cudagraph_memory` returns 0 there, so no graph estimate leaves
    // the pool; the pool is requested − (consumed + transient peak), the same sum as
    // 0.19's weights + non-torch + peak. Memory outside torch as 0.19's (assumed: the
    // 0.27 logs at hand are WSL2 at tp 1 and one PCIe pair at tp 2).
    Rules {
        label: "0.27 (Model Runner V2)",
        ceil: true,
        sampler_bytes: 6,
        triton: false,
        v2: true,
        state_pages: true,
        workspace_kept: true,
        graphs_subtracted: false,
        v0: false,
        non_torch_mib: [256, 2140, 72],
        non_torch_logs: "0.19's: 0.24–0.26 GiB at tp 1, 2.06–2.13 at tp 2–4, 0.07 at pp 2–4 (H100 logs)",
    },
    // vllm 0.8 `vllm/v1/worker/gpu_worker.py` `determine_available_memory` (read in its
    // copy `vllm/v1/worker/xpu_worker.py`, which keeps that code): the peak is torch's
    // `allocated_bytes.all.peak` plus every byte on the device torch did not allocate
    // (`mem_get_info` total − free − torch's current), the CUDA context included; the
    // profile is 0.10's.
    Rules {
        label: "0.8",
        ceil: false,
        sampler_bytes: 38,
        triton: false,
        v2: false,
        state_pages: false,
        workspace_kept: false,
        graphs_subtracted: false,
        v0: false,
        non_torch_mib: [645, 1075, 645],
        non_torch_logs: "0.10's library increase (0.13 GiB at tp 1, 0.55 at tp 2, H100 logs) + the CUDA context, 512 MiB assumed as in the SGLang and TGI rules",
    },
    // vllm 0.27 with the V1 runner (`vllm/v1/worker/gpu_model_runner.py`, MoE and
    // quantised models): 0.19's profile (`profile_run`, the triton top-k/top-p sampler,
    // the persistent MoE workspace), then `profile_cudagraph_memory` inside
    // `determine_available_memory`, whose estimate leaves the pool
    // (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` on by default since vllm-project/vllm
    // commit 96a85c57501f, in 0.20; read at upstream 3cb83c95922f, v0.22.0, and in the
    // 0.27.1 logs' line numbers). Memory outside torch as 0.19's (assumed).
    Rules {
        label: "0.27 (Model Runner V1)",
        ceil: true,
        sampler_bytes: 14,
        triton: true,
        v2: false,
        state_pages: true,
        workspace_kept: true,
        graphs_subtracted: true,
        v0: false,
        non_torch_mib: [256, 2140, 72],
        non_torch_logs: "0.19's: 0.24–0.26 GiB at tp 1, 2.06–2.13 at tp 2–4, 0.07 at pp 2–4 (H100 logs)",
    },
];

const SRC_WORKER: &str = "vllm/v1/worker/gpu_worker.py (determine_available_memory)";
const SRC_PROFILE: &str =
    "vllm/v1/worker/gpu_model_runner.py (profile_run: _dummy_run, _dummy_sampler_run)";

pub(super) fn rule(c: &Ctx) -> Result<(Draft, Option<Speculative>), EstimateError> {
    let p = c.params;
    let input = c.input;
    let r = p
        .version
        .unwrap_or(VllmVersion::V027)
        .rules(input, p.speculative_method.is_some());
    let (total, derived) = c.card.torch_total();
    let (sms, sms_assumed) = c.card.sms();
    let sm90 = c.card.sm90();
    let mut assumptions: Vec<String> = Vec::new();
    if sms_assumed && r.triton {
        assumptions.push(format!(
            "{}: SM count unknown: {sms} assumed (the top-k/top-p buffer holds one vocabulary row per SM)",
            c.card.id
        ));
    }
    if c.card.arch == crate::catalogue::Arch::Unknown {
        assumptions.push(format!(
            "{}: generation unknown: cuBLAS's workspace of a card other than sm_90 assumed",
            c.card.id
        ));
    }
    let mut warnings: Vec<String> = Vec::new();
    if r.label == RULES[4].label {
        assumptions.push("Model Runner V2 assumed for this dense, unquantised model (vLLM 0.27.1's logs run Qwen2 and Qwen3 on it; an architecture left on the V1 runner would lose its CUDA-graph estimate from the pool)".into());
    }
    let util = p.gpu_memory_utilization.unwrap_or(ONE / 10 * 9);
    let requested = times_fraction(total, util, r.ceil)?;
    let total_text = format!(
        "{total} B (torch{})",
        if derived { ", derived" } else { "" }
    );
    if derived {
        assumptions.push(format!(
            "{}: torch total derived: the catalogue's less 1 %",
            c.card.id
        ));
    }
    let mut lines = vec![line(
        "budget",
        "vLLM's share: total × gpu_memory_utilization",
        requested,
        Kind::Computed,
        format!("{} total × utilisation", if r.ceil { "⌈" } else { "⌊" }),
        &[
            ("total", total_text),
            ("gpu-memory-utilization", fraction_text(util)),
        ],
        "vllm/v1/worker/utils.py (request_memory)",
    )];
    if derived {
        lines[0].kind = Kind::Assumed;
    }
    // Weights as vLLM loads them: the estimate's, plus the rotary cos/sin cache buffer
    // (`rotary_embedding/base.py`: [max_position, rotary_dim] in the model dtype), one
    // per stage, which "Model loading took" counts. A scaled RoPE's cache reaches as far
    // as its scaling (`linear_scaling_rope.py`, `dynamic_ntk_scaling_rope.py`: positions
    // × factor; `yarn_scaling_rope.py`: original positions × factor), which is
    // `rope-positions` where the config reader derived it.
    let arch = input.arch;
    let b = input.compute_dtype.bytes();
    let rope = match arch {
        Some(a) if a.learned_positions == 0 => {
            let dim = a.mla.map_or(a.head_dim, |m| m.qk_rope_dim);
            let rows = input.rope_positions.or(input.max_position).unwrap_or(0);
            prod(&[rows, dim, b])?
        }
        _ => 0,
    };
    let lora = lora_bytes(c, r)?;
    let pad = mxfp4_padding(input, &c.card)?;
    // The checkpoint's MTP layers are not the main model's: vLLM loads them only as
    // the drafter (the `draft_weights` line), see `speculative`.
    let weights = c.weights.saturating_sub(c.mtp_bytes);
    if c.mtp_bytes > 0 {
        assumptions
            .push("the checkpoint's MTP layers are loaded only by speculative-method mtp".into());
    }
    lines.push(line(
        "weights",
        "Weights on this device (with the rotary cache)",
        sum(&[weights, rope, pad])?,
        Kind::Computed,
        "the estimate's weights − MTP layers + max_position × rotary_dim × dtype + MXFP4 expert padding".into(),
        &[
            ("tp", input.tp.to_string()),
            ("pp", input.pp.to_string()),
            ("rotary-cache", rope.to_string()),
            ("mxfp4-padding", pad.to_string()),
            ("mtp-layers-skipped", c.mtp_bytes.to_string()),
        ],
        "vllm/model_executor/layers/rotary_embedding/base.py (cos_sin_cache)",
    ));
    if lora > 0 {
        lines.push(line(
            "lora",
            "LoRA slots: max_loras × rank × (inputs + outputs) per linear",
            lora,
            Kind::Computed,
            "max-loras × max-lora-rank × Σ layers (7 hidden + (2 q + 2 kv + 3 intermediate) ÷ tp) × dtype".into(),
            &[("max-loras", p.max_loras.unwrap_or(1).to_string()), ("max-lora-rank", p.max_lora_rank.unwrap_or(16).to_string())],
            "vllm/lora/layers/base_linear.py (create_lora_weights)",
        ));
    }
    // vllm/engine/arg_utils.py get_batch_defaults: 8192 / 1024 for `vllm serve` on a
    // card of ≥ 70 GiB (torch total) other than an A100, else 2048 / 256. V0: 256
    // sequences, batched = max(max_model_len, 2048) (vllm 0.6 config.py SchedulerConfig).
    let large = total >= 70 * GIB && !c.card.name.to_ascii_lowercase().contains("a100");
    let seqs = p
        .max_num_seqs
        .unwrap_or(if large && !r.v0 { 1024 } else { 256 });
    let batched = p.max_num_batched_tokens.unwrap_or(if r.v0 {
        c.max_model_len.max(2048)
    } else if large {
        8192
    } else {
        2048
    });
    if p.max_num_seqs.is_none() || p.max_num_batched_tokens.is_none() {
        assumptions.push(format!("vllm serve defaults: max-num-batched-tokens {batched}, max-num-seqs {seqs} (vllm/engine/arg_utils.py get_batch_defaults)"));
    }
    // The drafter (speculative decoding, 0.19 rules only) sits on the last stage.
    // The drafter is read in the V1 runner (0.19's, and 0.27's V1 runner, which runs
    // speculative decoding here).
    let v1_runner = r.label == RULES[0].label || r.label == RULES[6].label;
    let mut spec = if p.speculative_method.is_some() && !v1_runner {
        return Err(EstimateError::invalid(
            "speculative-method",
            "modelled with the vllm@0.27 and vllm@0.19 rules only",
        ));
    } else {
        super::speculative::plan(c, batched)?
    };
    let draft_weights = spec.as_ref().map_or(0, |s| s.info.draft_weights_bytes);
    if let Some(s) = spec.as_mut() {
        assumptions.append(&mut s.assumptions);
        lines.extend(s.line.take());
    }
    // The most loaded device is the last stage: it also runs the sampler.
    let (held, items) = encoder_held(c, batched, seqs)?;
    let (peak, parts) = profile_peak(c, r, batched, seqs, sms, sm90, spec.as_ref(), (held, items))?;
    if held > 0 {
        assumptions.push("encoder: its dummy batch is held through the profile; its own forward assumed below the text's".into());
    }
    lines.push(line(
        "activation_peak",
        "Torch peak of the profiling run (forward, then sampler)",
        peak,
        Kind::Computed,
        "max(forward of the batched tokens, sampler phase) + MoE workspace + cuBLAS workspace"
            .into(),
        &parts,
        SRC_PROFILE,
    ));
    let nt = if input.tp >= 2 {
        r.non_torch_mib[1]
    } else if input.pp >= 2 {
        r.non_torch_mib[2]
    } else {
        r.non_torch_mib[0]
    };
    lines.push(line(
        "non_torch",
        "Memory outside torch since start-up (assumed, by tp/pp)",
        mib(nt),
        Kind::Assumed,
        format!("{nt} MiB: {}", r.non_torch_logs),
        &[("tp", input.tp.to_string()), ("pp", input.pp.to_string())],
        SRC_WORKER,
    ));
    let margin = total.saturating_sub(requested);
    let mut graph_bytes = 0;
    if p.enforce_eager {
        assumptions.push("--enforce-eager: no CUDA graphs are captured".into());
    } else if r.graphs_subtracted {
        let query = sum(&[1, p.num_speculative_tokens.unwrap_or(0)])?;
        let (n_p, n_f) = capture_counts(seqs, batched, query);
        let layers = input.arch.map_or(0, |a| a.layers).div_ceil(input.pp.max(1));
        graph_bytes = prod(&[
            sum(&[n_p, n_f])?,
            sum(&[GRAPH_BASE, prod(&[GRAPH_PER_LAYER, layers])?])?,
        ])?;
        lines.push(line(
            "cuda_graphs",
            "CUDA-graph memory profiled before sizing (assumed per graph)",
            graph_bytes,
            Kind::Assumed,
            format!(
                "(PIECEWISE {n_p} + FULL {n_f} graphs) × ({} MiB + {} KiB × {layers} layers): the per-graph cost assumed from the 'Estimated CUDA graph memory' vLLM 0.19 printed on H100s (0.49–1.82 GiB for 102 graphs at 8–80 layers a device; above all but an MLA model, 1.39 GiB at 27 layers, and one tp 2 run)",
                GRAPH_BASE / MIB,
                GRAPH_PER_LAYER >> 10
            ),
            &[
                ("piecewise-graphs", n_p.to_string()),
                ("full-graphs", n_f.to_string()),
                ("layers", layers.to_string()),
            ],
            "vllm/v1/worker/gpu_model_runner.py (profile_cudagraph_memory)",
        ));
    } else {
        let mut graphs = line(
            "cuda_graphs",
            "CUDA-graph pool (captured after sizing; not subtracted)",
            0,
            Kind::Assumed,
            format!(
                "{}; taken from the {} margin (0.5–1.8 GiB in H100 logs)",
                if r.v2 {
                    "not subtracted: Model Runner V2's profile_cudagraph_memory returns 0"
                } else {
                    "not subtracted unless VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1"
                },
                gib_text(margin)
            ),
            &[],
            "vllm/envs.py (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS)",
        );
        graphs.subtracted = false;
        lines.push(graphs);
        if margin < GIB {
            warnings.push(format!("only {} left beside vLLM's share for CUDA graphs (0.5–1.8 GiB in logs): may run out of memory", gib_text(margin)));
        }
    }
    // The activation line is computed from the source; its residue in the corpus is
    // ±0.05 GiB except fp32 models and vision towers (≤ 0.5 GiB), and the non-torch
    // line spreads ±0.08 GiB: a quarter of both is the band (and of the assumed
    // CUDA-graph estimate where it is subtracted).
    let uncertainty = sum(&[peak, mib(nt), graph_bytes])?
        .checked_div(4)
        .unwrap_or(0);
    let draft_kv = spec.as_ref().map_or((0, 0, 0), |s| {
        (
            s.info.draft_kv_bytes_per_token,
            s.info.draft_kv_layers,
            s.layer_kv_bytes,
        )
    });
    let (group_block_bytes, groups, seq_blocks) = if r.v0 {
        simple_pool(c, 16)?
    } else {
        pool_shape(c, r, batched, draft_kv, &mut assumptions)?
    };
    let block = match (r.v0, draft_kv.1) {
        (false, 0) if r.state_pages => state_pool(c)?.map_or(16, |p| p.block),
        _ => 16,
    };
    let pool = match p.kv_cache_memory_bytes {
        Some(k) => {
            assumptions.push(format!(
                "--kv-cache-memory-bytes {k}: the pool; utilisation ignored"
            ));
            let used = sum(&[weights, draft_weights, rope, lora, peak, mib(nt), k])?;
            if used > total {
                warnings.push(format!(
                    "pool + weights + profile {} > total {}",
                    gib_text(used),
                    gib_text(total)
                ));
            }
            Some(i64::try_from(k).unwrap_or(i64::MAX))
        }
        None => None,
    };
    if input.sliding_window.is_some() && groups > 1 {
        assumptions.push(format!(
            "hybrid KV cache: {groups} groups of equal page size"
        ));
    }
    Ok((
        Draft {
            version: r.label,
            capacity: total,
            capacity_kind: if derived { "torch, derived" } else { "torch" },
            lines,
            block,
            group_block_bytes,
            groups,
            seq_blocks,
            tokens_by_concurrency: r.label.starts_with("0.27"),
            kv_cache_bytes: None,
            pool,
            need: None,
            uncertainty,
            assumptions,
            warnings,
        },
        spec.map(|s| s.info),
    ))
}

/// A line's inputs.
pub(super) type Inputs = Vec<(&'static str, String)>;

/// The torch peak of `profile_run` on the last stage, with its parts as inputs.
#[allow(clippy::too_many_arguments)]
fn profile_peak(
    c: &Ctx,
    r: &Rules,
    batched: u64,
    seqs: u64,
    sms: u64,
    sm90: bool,
    spec: Option<&super::speculative::Plan>,
    (mm, mm_items): (u64, u64),
) -> Result<(u64, Inputs), EstimateError> {
    let input = c.input;
    let b = input.compute_dtype.bytes();
    let (vocab, hidden) = input.arch.map_or((0, 0), |a| (a.vocab, a.hidden));
    // V0 profiles in eager PyTorch, where a tensor lives as long as a Python name holds
    // it: `LlamaMLP.forward` (vllm v0.7.2 `vllm/model_executor/models/llama.py`, and
    // Qwen2MLP alike) keeps `gate_up` while `down_proj` writes its output, and the
    // decoder layer still holds the MLP's normed input and the residual
    // (`LlamaDecoderLayer.forward`), three full-width rows per token beside the three
    // intermediate-width ones `forward_peak` counts (the down output before its
    // all-reduce is full width on every tp rank). V1 runs the profile through
    // torch.compile, whose Inductor graph frees each buffer at its last use.
    let eager = if r.v0 {
        prod(&[3, batched, hidden, b])?
    } else {
        0
    };
    let forward = sum(&[forward_peak(input, batched)?, eager])?;
    let rows = seqs.min(batched);
    // ParallelLMHead pads the vocabulary to a multiple of 64 (vocab_parallel_embedding.py);
    // the logits keep the padded width, the sampler's copies the real one.
    let padded = vocab.div_ceil(64).saturating_mul(64);
    let model_logits = prod(&[rows, padded, b])?;
    let sort_path = !r.v2 && (!r.triton || rows < 8);
    let per_elem = if sort_path { 38 } else { r.sampler_bytes };
    // Past the model's logits (2 B counted above): a model in fp32 has no fp32 copy.
    // (V2 copies into a new fp32 tensor whatever the model's dtype.)
    let extra = per_elem
        .saturating_sub(2)
        .saturating_sub(if b == 4 && !r.v2 { 4 } else { 0 });
    let sampler = prod(&[rows, vocab, extra])?;
    // topk_topp_triton.py: one fp32 vocabulary row per program, min(next_pow2(min(SMs, rows)), SMs).
    let triton = if sort_path || !r.triton {
        0
    } else {
        let n = sms.min(rows).next_power_of_two().min(sms);
        prod(&[n, vocab, 4])?
    };
    // Held while sampling: the forward's hidden states, the last position of each
    // request and its random stand-in (`torch.rand_like`).
    let held = prod(&[sum(&[batched, rows, rows])?, hidden, b])?;
    // With speculative decoding, `_dummy_sampler_run` then runs the rejection
    // sampler (`vllm/v1/sample/rejection_sampler.py` `forward`) over one draft token
    // per request: fresh target logits of 2 rows per request (`torch.randn`, the
    // logits' dtype) are held while it samples the bonus tokens from a copy of one
    // row per request — the sampler phase again, the model's logits replaced by that
    // copy, beside the 2 rows.
    let rejection = if spec.is_some() {
        prod(&[2, rows, vocab, b])?
    } else {
        0
    };
    let sampler_phase = if vocab > 0 {
        sum(&[model_logits, sampler, triton, held, rejection])?
    } else {
        0
    };
    // The drafter's forward (its own MoE intermediates are in the shared workspace).
    let draft_phase = spec.map_or(0, |s| {
        s.info.draft_forward_bytes.saturating_sub(s.workspace)
    });
    let ws = moe_workspace(input, batched)?;
    // torch CublasHandlePool.cpp: 32 MiB of cuBLAS workspace on sm_90, 4096 KiB × 2 +
    // 16 KiB × 8 elsewhere, allocated by the caching allocator at the first GEMM.
    let cublas: u64 = if sm90 { 32 * MIB } else { 8_519_680 };
    // The estimator's forward counts the MoE intermediates, which vLLM allocates as
    // that workspace: kept (0.19), the forward phase holds the rest beside it; freed
    // (earlier), the forward itself is the phase.
    let peak = if r.workspace_kept {
        let ws = ws.max(spec.map_or(0, |s| s.workspace));
        sum(&[
            forward
                .saturating_sub(ws)
                .max(sampler_phase)
                .max(draft_phase),
            ws,
            mm,
            cublas,
        ])?
    } else {
        sum(&[
            forward.max(ws).max(sampler_phase).max(draft_phase),
            mm,
            cublas,
        ])?
    };
    let parts = vec![
        ("forward", forward.to_string()),
        ("forward-eager-rows", eager.to_string()),
        ("sampler-phase", sampler_phase.to_string()),
        ("sampler-rows", rows.to_string()),
        ("moe-workspace", ws.to_string()),
        ("cublas-workspace", cublas.to_string()),
        ("max-num-batched-tokens", batched.to_string()),
    ];
    let mut parts = parts;
    if mm > 0 {
        parts.push(("encoder-items", mm_items.to_string()));
        parts.push(("encoder-held", mm.to_string()));
    }
    if spec.is_some() {
        parts.push(("rejection-logits", rejection.to_string()));
        parts.push(("drafter-phase", draft_phase.to_string()));
    }
    Ok((peak, parts))
}

/// The cost of one captured CUDA graph in 0.27's V1 estimate, assumed (no public
/// figure splits it): a fixed part and a part per layer on the device, set so that
/// (PIECEWISE + FULL graphs) × cost is not below the "Estimated CUDA graph memory"
/// vLLM 0.19 printed in the H100 logs of `tests/calibration/` (0.49 GiB at 8 layers a
/// device, 0.84 at 32, 1.02 at 48, 1.82 at 80, each over 51 + 51 graphs), except the
/// MLA model (1.39 GiB at 27 layers) and one tp 2 run (1.69 at 32): an estimate too
/// large leaves a smaller pool, the safe side.
const GRAPH_BASE: u64 = 4 * MIB;
const GRAPH_PER_LAYER: u64 = 192 << 10;

/// The CUDA graphs 0.27's V1 runner captures (PIECEWISE, FULL): vllm v0.22.0
/// (upstream 3cb83c95922f) `vllm/config/vllm.py` `_set_cudagraph_sizes`: up to
/// min(max_num_seqs × decode query length × 2, 512, max_num_batched_tokens) tokens,
/// sizes 1, 2, 4, every 8 below 256 and every 16 from 256, plus max_num_batched_tokens
/// when it is within; `vllm/v1/cudagraph_dispatcher.py` `initialize_cudagraph_keys`
/// (the default FULL_AND_PIECEWISE mode): a PIECEWISE graph per size, and a FULL
/// decode graph per size from the query length up to max_num_seqs × query length.
pub(super) fn capture_counts(seqs: u64, batched: u64, query: u64) -> (u64, u64) {
    let cap = seqs
        .saturating_mul(query)
        .saturating_mul(2)
        .min(512)
        .min(batched)
        .max(1);
    let small = [1u64, 2, 4].into_iter().filter(|x| *x <= cap);
    let by8 = (8..cap.saturating_add(1).min(256)).step_by(8);
    let by16 = (256..cap.saturating_add(1)).step_by(16);
    let sizes = || small.clone().chain(by8.clone()).chain(by16.clone());
    let extra = u64::from(batched <= cap && !sizes().any(|x| x == batched));
    let decode_max = seqs.saturating_mul(query);
    let full = sizes()
        .chain((extra > 0).then_some(batched))
        .filter(|x| *x <= decode_max && *x >= query)
        .count();
    let n = sizes().count();
    (
        u64::try_from(n).unwrap_or(u64::MAX).saturating_add(extra),
        u64::try_from(full).unwrap_or(u64::MAX),
    )
}

/// What the multimodal encoder's profiling leaves allocated through the text forward
/// and the sampler: vllm v0.19.0 `gpu_model_runner.py` `profile_run` first encodes a
/// dummy batch (`_get_mm_dummy_batch`) of the item with the most tokens and keeps, as
/// locals and in `encoder_cache`, its inputs (in the model dtype:
/// `multimodal/processing/context.py` `_postprocess_output`) and its outputs (one
/// embedding of the text width per token) until the run ends. The batch holds
/// `encoder budget ÷ tokens per item` items (`multimodal/encoder_budget.py`
/// `_get_max_items`; the budget is max(max_num_batched_tokens, tokens per item),
/// `v1/core/encoder_cache_manager.py` `compute_mm_encoder_budget`), at most
/// max_num_seqs × max(1, min(999, max_model_len ÷ tokens)) (999 items per prompt by
/// default, `config/multimodal.py`). Returns the bytes and the items.
fn encoder_held(c: &Ctx, batched: u64, seqs: u64) -> Result<(u64, u64), EstimateError> {
    let input = c.input;
    let (Some(tokens), Some(values), Some(a)) =
        (input.mm_item_tokens, input.mm_item_values, input.arch)
    else {
        return Ok((0, 0));
    };
    if tokens == 0 || a.tower_params == 0 {
        return Ok((0, 0));
    }
    let budget = batched.max(tokens);
    let per_prompt = c
        .max_model_len
        .checked_div(tokens)
        .unwrap_or(0)
        .clamp(1, 999);
    let items = budget
        .checked_div(tokens)
        .unwrap_or(0)
        .min(prod(&[seqs, per_prompt])?)
        .max(1);
    let one = sum(&[values, prod(&[tokens, a.hidden])?])?;
    Ok((prod(&[items, one, input.compute_dtype.bytes()])?, items))
}

/// vllm v0.19.0 `fused_moe/modular_kernel.py` `_allocate_buffers` with the triton
/// experts' `workspace_shapes` (`fused_moe.py`): workspace13 = max(M × top-k ×
/// max(I, H), M × H), workspace2 = M × top-k × max(2 I, H), in the activation dtype,
/// each rounded to 256 B (I: the expert intermediate size per tp rank).
pub(super) fn moe_workspace(input: &EstimateInput, tokens: u64) -> Result<u64, EstimateError> {
    let Some(a) = input.arch else { return Ok(0) };
    let Some(m) = a.moe else { return Ok(0) };
    let i = m.expert_intermediate.div_ceil(input.tp.max(1));
    let h = a.hidden;
    let b = input.compute_dtype.bytes();
    let w13 = prod(&[tokens, m.active, i.max(h)])?.max(prod(&[tokens, h])?);
    let w2 = prod(&[tokens, m.active, prod(&[2, i])?.max(h)])?;
    let up = |e: u64| prod(&[e, b]).map(|x| x.div_ceil(256).saturating_mul(256));
    sum(&[up(w13)?, up(w2)?])
}

/// MXFP4 experts as vLLM 0.19 loads them: `fused_moe/oracle/mxfp4.py`
/// (`select_gpt_oss_mxfp4_moe_backend`, `_get_priority_backends`, read at upstream
/// 799973af4, April 2026) takes FlashInfer's TRT-LLM kernels on sm_100, the triton
/// kernels on sm_90 (supported from 9.0 below 11.0), AITER on ROCm and Marlin on every
/// other NVIDIA card (Ampere, Ada, sm_120 Blackwell), and
/// `mxfp4_round_up_hidden_size_and_intermediate_size` pads each rank's expert sizes for
/// it: triton the intermediate size to 64; Marlin the intermediate to 128 and the
/// hidden size to 256; TRT-LLM and ROCm both to 256 (a card the catalogue does not
/// know: both to 256, the most). gpt-oss-20b's 2880 × 2880 becomes 3072 × 2944 under
/// Marlin. The padding adds 3 × (H' × I' − H × I) values per expert and layer (w13 and
/// w2), 17 B per 32 (MXFP4 + its E8M0 scale), and 2 (I' − I) + (H' − H) bias values
/// (w13, w2 biases in the model dtype, created at the padded sizes).
fn mxfp4_padding(input: &EstimateInput, card: &GpuCard) -> Result<u64, EstimateError> {
    use crate::catalogue::{Arch, Segment, Vendor};
    let (Some(a), Some(crate::format::StorageFormat::Mxfp4)) = (input.arch, input.format) else {
        return Ok(0);
    };
    let Some(m) = a.moe else { return Ok(0) };
    let i = m.expert_intermediate.div_ceil(input.tp.max(1));
    let h = a.hidden;
    let (h_to, i_to) = match (card.vendor, card.arch, card.segment) {
        (_, Arch::Hopper, _) => (1, 64),
        (_, Arch::Blackwell, Segment::DataCentre) | (Vendor::Amd, _, _) | (_, Arch::Unknown, _) => {
            (256, 256)
        }
        _ => (256, 128),
    };
    let up = |x: u64, to: u64| x.div_ceil(to).saturating_mul(to);
    let (hp, ip) = (up(h, h_to), up(i, i_to));
    let layers = m.moe_layers(a.layers).div_ceil(input.pp.max(1));
    let per_expert = prod(&[3, hp, ip])?.saturating_sub(prod(&[3, h, i])?);
    let values = prod(&[per_expert, m.experts, layers])?;
    let bias = sum(&[prod(&[2, ip.saturating_sub(i)])?, hp.saturating_sub(h)])?;
    let bias_bytes = prod(&[bias, m.experts, layers, input.compute_dtype.bytes()])?;
    sum(&[values.div_ceil(32).saturating_mul(17), bias_bytes])
}

/// vLLM's LoRA slots (vllm/lora/layers/base_linear.py `create_lora_weights`): per
/// slot and linear, A = rank × input and B = output × rank for each slice; qkv has 3
/// slices and gate_up 2; column-parallel layers shard B, row-parallel ones A.
fn lora_bytes(c: &Ctx, _r: &Rules) -> Result<u64, EstimateError> {
    let p = c.params;
    let Some(a) = c.input.arch.filter(|_| p.enable_lora) else {
        return Ok(0);
    };
    let tp = c.input.tp.max(1);
    let q = prod(&[a.heads, a.head_dim])?;
    let kv = prod(&[a.kv_heads, a.head_dim])?;
    let sharded =
        sum(&[prod(&[2, q])?, prod(&[2, kv])?, prod(&[3, a.intermediate])?])?.div_ceil(tp);
    let per_layer = sum(&[prod(&[7, a.hidden])?, sharded])?;
    let layers = a.layers.div_ceil(c.input.pp.max(1));
    prod(&[
        p.max_loras.unwrap_or(1),
        p.max_lora_rank.unwrap_or(16),
        per_layer,
        layers,
        c.input.compute_dtype.bytes(),
    ])
}

/// Bytes of one block across one group's layers, the number of groups and the blocks
/// one request of max_model_len takes (`kv_cache_utils.py`
/// `_get_kv_cache_groups_uniform_page_size`, `get_max_concurrency_for_kv_cache_config`;
/// `kv_cache_interface.py` `SlidingWindowSpec.max_memory_usage_bytes`).
///
/// A drafter's full-attention layers `(bytes per token, layers, bytes per token of
/// one)` join the pool: in one group their page adds to the target's
/// (`UniformTypeKVCacheSpecs`); beside sliding layers they are more full-attention
/// layers of the group's page size.
fn pool_shape(
    c: &Ctx,
    r: &Rules,
    batched: u64,
    draft: (u64, u64, u64),
    assumptions: &mut Vec<String>,
) -> Result<(u64, u64, u64), EstimateError> {
    let input = c.input;
    let block = 16u64;
    let mml = c.max_model_len;
    let simple = || -> Result<(u64, u64, u64), EstimateError> {
        Ok((
            prod(&[block, sum(&[c.per_token, draft.0])?])?,
            1,
            mml.div_ceil(block),
        ))
    };
    if draft.1 == 0
        && r.state_pages
        && let Some(p) = state_pool(c)?
    {
        assumptions.push(format!(
            "hybrid KV cache: attention blocks of {} tokens, a page the size of one layer's recurrent state, {} groups",
            p.block, p.groups
        ));
        return Ok((p.group_block, p.groups, p.seq_blocks));
    }
    let (Some(w), Some(a)) = (input.sliding_window, input.arch) else {
        return simple();
    };
    let layers = a.attention_layers();
    let sw = input.sliding_layers.unwrap_or(layers).min(layers);
    let full = layers.saturating_sub(sw);
    if sw == 0 || full == 0 || input.pp > 1 {
        return simple();
    }
    let per_layer = c.per_token.checked_div(layers).unwrap_or(0);
    if draft.1 > 0 && draft.2 != per_layer {
        assumptions.push("the drafter's layers counted at the target's page size".into());
    }
    let target_full = full;
    let full = sum(&[full, draft.1])?;
    // Group size: the smaller layer count, or the larger one when it is < 1.5 × the smaller.
    let (lo, hi) = (sw.min(full), sw.max(full));
    let gs = if hi.saturating_mul(2) < lo.saturating_mul(3) {
        hi
    } else {
        lo
    };
    let (g_full, g_sw) = (full.div_ceil(gs), sw.div_ceil(gs));
    // Pages of one size: where the full layers keep another KV shape (Gemma 4's
    // global layers: fewer heads, wider), the layer with the smaller page gets a
    // block as many times longer (`unify_kv_cache_spec_page_size`: block_size ×
    // max page / its page, when that divides; it raises otherwise).
    let (page, block_full, block_sw) = match layer_tokens(c, &a, sw, target_full)? {
        Some((s, f)) if s != f && s.max(f).checked_rem(s.min(f)) == Some(0) => {
            let max = s.max(f);
            let ratio = |x: u64| max.checked_div(x).unwrap_or(1);
            (
                prod(&[block, max])?,
                prod(&[block, ratio(f)])?,
                prod(&[block, ratio(s)])?,
            )
        }
        _ => (
            prod(&[block, c.per_token.checked_div(layers).unwrap_or(0)])?,
            block,
            block,
        ),
    };
    let group_block = prod(&[page, gs])?;
    let sw_tokens = sum(&[w.saturating_sub(1), batched])?.min(mml);
    let seq = sum(&[
        prod(&[g_full, mml.div_ceil(block_full)])?,
        prod(&[g_sw, sum(&[sw_tokens.div_ceil(block_sw), 1])?])?,
    ])?;
    Ok((group_block, sum(&[g_full, g_sw])?, seq))
}

/// Bytes per token of one sliding layer and one full layer on a device, when the
/// full layers keep another KV shape (`global_attn`): the pool's bytes per token
/// split in the ratio of their values (heads split by TP, a head kept whole), `None`
/// when the shapes agree or the split is not exact.
fn layer_tokens(
    c: &Ctx,
    a: &crate::arch::Architecture,
    sw: u64,
    full: u64,
) -> Result<Option<(u64, u64)>, EstimateError> {
    let Some(g) = a.global_attn.filter(|_| a.mla.is_none()) else {
        return Ok(None);
    };
    let tp = c.input.tp.max(1);
    let s_values = prod(&[2, a.kv_heads.div_ceil(tp).max(1), a.head_dim])?;
    let f_values = prod(&[2, g.kv_heads.div_ceil(tp).max(1), g.head_dim])?;
    let all = sum(&[prod(&[sw, s_values])?, prod(&[full, f_values])?])?;
    let Some(per_value) = c
        .per_token
        .checked_div(all)
        .filter(|v| c.per_token.checked_rem(all) == Some(0) && *v > 0)
    else {
        return Ok(None);
    };
    Ok(Some((
        prod(&[s_values, per_value])?,
        prod(&[f_values, per_value])?,
    )))
}

/// The pool of a model whose attention layers sit beside Mamba or Gated DeltaNet
/// layers, as vLLM's V1 engine pages it.
pub(super) struct StatePool {
    /// Tokens per attention block (raised to fit the state page).
    pub block: u64,
    /// Bytes of one block across one group's layers.
    pub group_block: u64,
    /// Groups of layers (attention groups + state groups).
    pub groups: u64,
    /// Blocks one request of max_model_len takes: its attention blocks, and one page
    /// per state group.
    pub seq_blocks: u64,
}

/// vllm v0.10.2 `vllm/model_executor/models/config.py`
/// `HybridAttentionMambaModelConfig.verify_and_update_config`, moved to
/// `vllm/platforms/interface.py` (`_align_hybrid_block_size`, read at
/// upstream 799973af4 for 0.19 and 3cb83c95922f for 0.22: the same rule without prefix
/// caching, the kernel's block alignment 16): one page size for every layer. The state page is one layer's recurrent state of one sequence (`MambaSpec`:
/// the conv window and the SSM / delta-rule state, sharded by tp, in the KV cache's
/// dtype); the attention block is raised to `16 × ⌈state page ÷ (16 × one token's
/// attention page)⌉` tokens ("Setting attention block size to N tokens") and the state
/// page padded up to that attention page ("Padding mamba page size by x %"). Layers are
/// grouped as for sliding windows (`kv_cache_utils.py`
/// `_get_kv_cache_groups_uniform_page_size`): the attention layers and the state layers
/// in groups of the smaller count; a state layer keeps one page per request
/// (`MambaSpec.max_memory_usage_bytes`). `None` when the model has no state layers or
/// runs pipeline stages (each stage groups its own layers).
pub(super) fn state_pool(c: &Ctx) -> Result<Option<StatePool>, EstimateError> {
    let input = c.input;
    let Some(a) = input.arch else { return Ok(None) };
    let Some(m) = a.mixer.filter(|m| m.layers > 0) else {
        return Ok(None);
    };
    let attn = a.attention_layers();
    if attn == 0 || input.pp > 1 || a.mla.is_some() {
        return Ok(None);
    }
    let tp = input.tp.max(1);
    // One token's attention page on one layer, and the bytes of one cached value.
    let token_page = c.per_token.checked_div(attn).unwrap_or(0);
    let values = prod(&[2, a.kv_heads.div_ceil(tp).max(1), a.head_dim])?;
    let value_bytes = token_page
        .checked_div(values)
        .filter(|b| *b > 0)
        .unwrap_or(input.compute_dtype.bytes());
    let (conv, ssm) = m.state_values()?;
    let state_page = prod(&[sum(&[conv.div_ceil(tp), ssm.div_ceil(tp)])?, value_bytes])?;
    if token_page == 0 {
        return Ok(None);
    }
    let block = prod(&[16, state_page.div_ceil(prod(&[16, token_page])?)])?.max(16);
    let page = prod(&[block, token_page])?;
    let (lo, hi) = (attn.min(m.layers), attn.max(m.layers));
    let gs = if hi.saturating_mul(2) < lo.saturating_mul(3) {
        hi
    } else {
        lo
    };
    let (g_attn, g_state) = (attn.div_ceil(gs), m.layers.div_ceil(gs));
    Ok(Some(StatePool {
        block,
        group_block: prod(&[page, gs])?,
        groups: sum(&[g_attn, g_state])?,
        seq_blocks: sum(&[prod(&[g_attn, c.max_model_len.div_ceil(block)])?, g_state])?,
    }))
}
