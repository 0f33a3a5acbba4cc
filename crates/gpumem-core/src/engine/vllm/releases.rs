//! The vLLM releases carried and what differs in each one's accounting ([`Rules`]):
//! `--engine vllm@0.19` picks them, `--engine vllm` the newest.

use serde::{Deserialize, Serialize};

use crate::error::EstimateError;
use crate::estimate::EstimateInput;

/// The vLLM accounting carried, newest first; `--engine vllm` is the newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum VllmVersion {
    /// 0.29 (the default; 0.30 keeps its accounting): Model Runner V2 for every model,
    /// its CUDA-graph estimate taken off the pool.
    #[serde(rename = "0.29")]
    V029,
    /// 0.27: Model Runner V2 for dense, unquantised models (its sampler's fp32 copy, no
    /// CUDA-graph estimate taken off the pool), the V1 runner otherwise (0.19's
    /// profile, the CUDA-graph estimate taken off the pool).
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
    /// 0.6.5 and 0.6.6 (V0 engine; memory measured from after the CUDA context, as 0.7).
    #[serde(rename = "0.6")]
    V06,
    /// 0.6.4 (V0 engine; every byte outside torch on the device counted, the CUDA
    /// context included).
    #[serde(rename = "0.6.4")]
    V064,
}

impl VllmVersion {
    /// Every release carried, in the order of the engine's `releases` (newest first).
    pub const ALL: [VllmVersion; 8] = [
        VllmVersion::V029,
        VllmVersion::V027,
        VllmVersion::V019,
        VllmVersion::V010,
        VllmVersion::V08,
        VllmVersion::V07,
        VllmVersion::V06,
        VllmVersion::V064,
    ];

    /// The release at `release`'s place in [`VllmVersion::ALL`]; the newest when none
    /// was named.
    pub fn of(release: Option<usize>) -> VllmVersion {
        release
            .and_then(|i| VllmVersion::ALL.get(i).copied())
            .unwrap_or(VllmVersion::V029)
    }

    /// Its place in [`VllmVersion::ALL`] (`vllm@…` as the registry keeps it).
    pub fn index(self) -> usize {
        VllmVersion::ALL
            .iter()
            .position(|v| *v == self)
            .unwrap_or(0)
    }

    /// The release as `--engine vllm@…` names it and the version string says it
    /// ("0.29", "0.6", "0.6.4").
    pub fn key(self) -> &'static str {
        match self {
            VllmVersion::V029 => "0.29",
            VllmVersion::V027 => "0.27",
            VllmVersion::V019 => "0.19",
            VllmVersion::V010 => "0.10",
            VllmVersion::V08 => "0.8",
            VllmVersion::V07 => "0.7",
            VllmVersion::V06 => "0.6",
            VllmVersion::V064 => "0.6.4",
        }
    }

    /// Parses "0.30.0", "0.29", "0.27", "0.19.0", "0.10.2", "0.8.5", "0.7.2", "0.6.6", "0.6.4"…: the
    /// minor version picks the rules, and within 0.6 the patch release (0.6.4 counts the
    /// CUDA context outside torch, 0.6.5 and later measure from after it; "0.6" alone is
    /// 0.6.5 onwards). 0.6.0–0.6.3 sized the pool another way, not carried. 0.30 takes
    /// 0.29's rules: its logs print what 0.29 brought (Model Runner V2 for MoE and FP8
    /// models, the CUDA-graph estimate taken off the pool), and what changed after it
    /// in the stored sources (the FULL graphs extrapolated by token count) lies inside
    /// the assumed per-graph cost. 0.28 (where V2's wider rollout began, its graph
    /// estimate not yet there; which models it ran on V2 was not read) is not carried.
    pub fn parse(text: &str) -> Result<VllmVersion, EstimateError> {
        let mut parts = text.trim().trim_start_matches('v').split('.');
        let patch = |p: Option<&str>| -> Option<u64> {
            let digits: String = p?.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        };
        match (parts.next(), parts.next(), parts.next()) {
            (Some("0"), Some("29" | "30"), _) => Ok(VllmVersion::V029),
            (Some("0"), Some("27"), _) => Ok(VllmVersion::V027),
            (Some("0"), Some("19"), _) => Ok(VllmVersion::V019),
            (Some("0"), Some("10"), _) => Ok(VllmVersion::V010),
            (Some("0"), Some("8"), _) => Ok(VllmVersion::V08),
            (Some("0"), Some("7"), _) => Ok(VllmVersion::V07),
            (Some("0"), Some("6"), None) => Ok(VllmVersion::V06),
            (Some("0"), Some("6"), p) => match patch(p) {
                Some(4) => Ok(VllmVersion::V064),
                Some(n) if n >= 5 => Ok(VllmVersion::V06),
                _ => Err(Self::not_carried(text)),
            },
            _ => Err(Self::not_carried(text)),
        }
    }

    fn not_carried(text: &str) -> EstimateError {
        EstimateError::invalid(
            "engine",
            format!(
                "vllm@{text}: the rules carried are vllm@0.29 (the default, 0.29 and 0.30: Model Runner V2 with its CUDA-graph estimate), vllm@0.27 (Model Runner V2 without it, or V1 with it), vllm@0.19, vllm@0.10, vllm@0.8, vllm@0.7, vllm@0.6 (0.6.5 and 0.6.6, V0) and vllm@0.6.4 (V0)"
            ),
        )
    }

    /// The rules of this release for `input`: 0.27 runs Model Runner V2 or V1 by model
    /// (vllm/config/vllm.py `use_v2_model_runner`, `_is_default_v2_model_runner_model`:
    /// not MoE, not quantised; speculative decoding is read in the V1 runner only); 0.29
    /// runs V2 for every model (vLLM 0.29.0's release,
    /// https://github.com/vllm-project/vllm/releases/tag/v0.29.0, as summarised in
    /// https://github.com/blazux/qwen3.8-Flash-DGX/issues/14: "the default runner for all
    /// models"; the 0.30 logs of MoE and FP8 models print `model_runner.py` lines), speculative decoding with the V1 runner's profile
    /// (the drafter read there only).
    pub(super) fn rules(self, input: &EstimateInput, speculative: bool) -> &'static Rules {
        match self {
            VllmVersion::V029 if speculative => &RULES[9],
            VllmVersion::V029 => &RULES[8],
            VllmVersion::V027 if !v2_runs(input) || speculative => &RULES[6],
            VllmVersion::V027 => &RULES[4],
            VllmVersion::V08 => &RULES[5],
            VllmVersion::V019 => &RULES[0],
            VllmVersion::V010 => &RULES[1],
            VllmVersion::V07 => &RULES[2],
            VllmVersion::V06 => &RULES[3],
            VllmVersion::V064 => &RULES[7],
        }
    }
}

impl Rules {
    /// Memory outside torch, MiB, for `tp` × `pp` over `link` GPUs, and what it rests
    /// on. At tp ≥ 2 on PCIe-only GPUs the NVLink boards' communicators are not set up
    /// (vLLM's and NCCL's own gates: [`crate::engine::request::PCIE_COMM_MIB`]), so
    /// what is counted beyond tp 1 is at most what vLLM counts without them.
    pub(in crate::engine) fn non_torch(
        &self,
        tp: u64,
        pp: u64,
        link: (crate::engine::request::Interconnect, String),
    ) -> (u64, String) {
        use crate::engine::request::{Interconnect, PCIE_COMM_MIB};
        if tp >= 2 {
            let nvlink = self.non_torch_mib[1];
            let pcie = self.non_torch_mib[0].saturating_add(PCIE_COMM_MIB);
            match link.0 {
                Interconnect::Pcie if pcie < nvlink => (
                    pcie,
                    format!(
                        "{pcie} MiB: {} MiB at tp 1 ({}) + {PCIE_COMM_MIB} MiB at tp ≥ 2 without NVLink's communicators (vLLM 0.10's on H100s, 0.8's on two PCIe RTX 3090s); {}",
                        self.non_torch_mib[0], self.non_torch_logs, link.1
                    ),
                ),
                Interconnect::Pcie => (
                    nvlink,
                    format!("{nvlink} MiB: {}; {}", self.non_torch_logs, link.1),
                ),
                Interconnect::NvLink => (
                    nvlink,
                    format!("{nvlink} MiB: {}; {}", self.non_torch_logs, link.1),
                ),
            }
        } else if pp >= 2 {
            let nt = self.non_torch_mib[2];
            (nt, format!("{nt} MiB: {}", self.non_torch_logs))
        } else {
            let nt = self.non_torch_mib[0];
            (nt, format!("{nt} MiB: {}", self.non_torch_logs))
        }
    }
}

/// Whether 0.27's Model Runner V2 runs the model: dense and unquantised
/// (`_is_default_v2_model_runner_model` excludes `is_moe` and `is_quantized`; the
/// 0.27.1 logs run Qwen2 and Qwen3 dense models on V2).
pub(super) fn v2_runs(input: &EstimateInput) -> bool {
    let quantised = !matches!(
        input.format,
        None | Some(crate::format::StorageFormat::Dense { .. })
    );
    !quantised && input.arch.is_none_or(|a| a.moe.is_none())
}

/// One version's accounting.
pub(super) struct Rules {
    pub(super) label: &'static str,
    /// requested = ⌈total × utilisation⌉ (0.19) or truncated (earlier).
    pub(super) ceil: bool,
    /// Bytes per (request × vocabulary) element the sampler holds at its peak, and
    /// whether the triton top-k/top-p buffer (one vocabulary row per SM) is added.
    pub(super) sampler_bytes: u64,
    pub(super) triton: bool,
    /// Model Runner V2's sampler: `sampler_bytes` per element at every row count (the
    /// profile skips top-k/top-p), no triton buffer.
    pub(super) v2: bool,
    /// The non-KV figure is the drop in free memory since start-up plus the transient
    /// peak (`vllm/utils/mem_utils.py` `memory_profiling`: `total_consumed`, 0.27 on),
    /// which sees the caching allocator's segments around the weights.
    pub(super) consumed: bool,
    /// Hybrid attention + state models paged as read in this release's source
    /// ([`state_pool`]); the others count their attention layers in 16-token blocks.
    pub(super) state_pages: bool,
    /// The fused-MoE workspace stays allocated after the forward.
    pub(super) workspace_kept: bool,
    /// The CUDA-graph estimate is taken off the pool (0.27's V1 runner).
    pub(super) graphs_subtracted: bool,
    /// V0 defaults (256 sequences, batched tokens = max(max-model-len, 2048)).
    pub(super) v0: bool,
    /// Memory outside torch, MiB: tp = 1 and pp = 1, tp ≥ 2, pp ≥ 2 at tp = 1.
    pub(super) non_torch_mib: [u64; 3],
    pub(super) non_torch_logs: &'static str,
    /// Memory other processes hold on the device counts in the non-KV figure (the
    /// worker takes `mem_get_info`'s total − free − torch's: 0.6.4's V0 worker and
    /// 0.8's V1 worker), so it leaves the pool.
    pub(super) foreign_counted: bool,
    /// The worker counts the CUDA context against the pool (no baseline after it: 0.6.4's
    /// V0 worker, 0.8's V1 worker); `non_torch_mib` is then what the libraries add
    /// beside it, and the context is the card's ([`crate::engine::request::cuda_context`]).
    pub(super) context_counted: bool,
    /// `Worker.init_device` refuses to start when the free memory at its snapshot is
    /// below total × utilisation (the V1 worker's `init_snapshot`, 0.9 onwards).
    pub(super) startup_gate: bool,
}

/// The releases' accounting, by [`VllmVersion::rules`]' index. `sampler_bytes`: vllm
/// v0.19.0 `vllm/v1/sample/sampler.py` + `ops/topk_topp_sampler.py`: the model's
/// logits (model dtype), their fp32 copy, the softmax probabilities and
/// `random_sample`'s exponential draws, 4 B each: 2 + 4 + 4 + 4 = 14 B per element
/// (12 when the model runs in fp32, whose logits are not copied). 0.10 and V0 sorted:
/// the logits (2) and fp32 copy (4), the sorted values (4) and int64 indices (8), and
/// the sort's input copy (4) and its two int64 index buffers (16) = 38 B (the last
/// three, the sort's temporaries, assumed).
pub(super) const RULES: [Rules; 10] = [
    Rules {
        label: "0.19",
        ceil: true,
        sampler_bytes: 14,
        triton: true,
        v2: false,
        consumed: false,
        state_pages: true,
        workspace_kept: true,
        graphs_subtracted: false,
        v0: false,
        non_torch_mib: [256, 2140, 72],
        non_torch_logs: "0.19 H100 logs: 0.24–0.26 GiB at tp 1, 2.06–2.13 at tp 2–4 (NCCL, all-reduce buffers), 0.07 at pp 2–4",
        foreign_counted: false,
        context_counted: false,
        startup_gate: true,
    },
    Rules {
        label: "0.10",
        ceil: false,
        sampler_bytes: 38,
        triton: false,
        v2: false,
        consumed: false,
        state_pages: true,
        workspace_kept: false,
        graphs_subtracted: false,
        v0: false,
        non_torch_mib: [133, 563, 133],
        non_torch_logs: "H100 logs (llm-d-benchmark): 0.13–0.14 GiB at tp 1, 0.55 at tp 2",
        foreign_counted: false,
        context_counted: false,
        startup_gate: true,
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
        consumed: false,
        state_pages: false,
        workspace_kept: false,
        graphs_subtracted: false,
        v0: true,
        non_torch_mib: [80, 2140, 80],
        non_torch_logs: "0.7 V0 logs: 0.01–0.09 GiB at tp 1 (T4, L40, H100), 2.10 at tp 8 (A100-40, NCCL and all-reduce buffers, as 0.19's 2.06–2.13 at tp 2–4)",
        foreign_counted: false,
        context_counted: false,
        startup_gate: false,
    },
    // vllm v0.6.5 and v0.6.6 `vllm/worker/worker.py`: `Worker.init_device` keeps
    // `self.init_gpu_memory = torch.cuda.mem_get_info()[0]` after `torch.cuda.set_device`
    // and `empty_cache` (the CUDA context exists by then) and before
    // `init_worker_distributed_environment` (NCCL and the all-reduce buffers come later);
    // `determine_num_available_blocks` runs `profile_run` inside
    // `memory_profiling(baseline_memory_in_bytes=total_gpu_memory - self.init_gpu_memory,
    // weights_memory_in_bytes=self.model_runner.model_memory_usage)` (`vllm/utils.py`,
    // new in 0.6.5 with vllm-project/vllm PR 10511), whose `non_torch_increase_in_bytes`
    // is the device's use after the profile less that baseline, the weights and torch's
    // increase: what the libraries add after the context, as 0.7's. The pool is
    // total × utilisation − (weights + torch peak increase + non-torch increase). Read in
    // stored copies of that function and of `memory_profiling` (vllm-mindspore's
    // adaptations, the call word for word; the tags were over the fetch limit), whose
    // start-up message ("the current vLLM instance can use total_gpu_memory (…) x
    // gpu_memory_utilization (…)") the 0.6.6 log prints; `init_gpu_memory` as
    // `init_device` sets it in the copy of 0.6.4's file read below (the 0.6.5 function
    // reads the same attribute). A vLLM report of January 2025
    // (https://github.com/vllm-project/vllm/issues/12059, "Memory profiler does not
    // consider CUDA context memory") says the same of this accounting.
    Rules {
        label: "0.6.5 (V0)",
        ceil: false,
        sampler_bytes: 38,
        triton: false,
        v2: false,
        consumed: false,
        state_pages: false,
        workspace_kept: false,
        graphs_subtracted: false,
        v0: true,
        non_torch_mib: [80, 2140, 80],
        non_torch_logs: "0.7's, the same accounting (0.7 V0 logs: 0.01–0.09 GiB at tp 1, 2.10 at tp 8 on A100-40s); a 0.6.6 log on an RTX 3090: 0.10 GiB",
        foreign_counted: false,
        context_counted: false,
        startup_gate: false,
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
        consumed: true,
        state_pages: true,
        workspace_kept: true,
        graphs_subtracted: false,
        v0: false,
        non_torch_mib: [256, 2140, 72],
        non_torch_logs: "0.19's: 0.24–0.26 GiB at tp 1, 2.06–2.13 at tp 2–4, 0.07 at pp 2–4 (H100 logs)",
        foreign_counted: false,
        context_counted: false,
        startup_gate: true,
    },
    // vllm 0.8 `vllm/v1/worker/gpu_worker.py` `determine_available_memory` (read in its
    // copy `vllm/v1/worker/xpu_worker.py`, which keeps that code): the peak is torch's
    // `allocated_bytes.all.peak` plus every byte on the device torch did not allocate
    // (`mem_get_info` total − free − torch's current), the CUDA context included (the
    // card's: `cuda_context`); the profile is 0.10's.
    Rules {
        label: "0.8",
        ceil: false,
        sampler_bytes: 38,
        triton: false,
        v2: false,
        consumed: false,
        state_pages: false,
        workspace_kept: false,
        graphs_subtracted: false,
        v0: false,
        non_torch_mib: [133, 563, 133],
        non_torch_logs: "0.10's library increase (0.13 GiB at tp 1, 0.55 at tp 2, H100 logs), beside the CUDA context",
        foreign_counted: true,
        context_counted: true,
        startup_gate: false,
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
        consumed: true,
        state_pages: true,
        workspace_kept: true,
        graphs_subtracted: true,
        v0: false,
        non_torch_mib: [256, 2140, 72],
        non_torch_logs: "0.19's: 0.24–0.26 GiB at tp 1, 2.06–2.13 at tp 2–4, 0.07 at pp 2–4 (H100 logs)",
        foreign_counted: false,
        context_counted: false,
        startup_gate: true,
    },
    // vllm v0.6.4 `vllm/worker/worker.py` `Worker.determine_num_available_blocks`: the
    // peak is torch's `allocated_bytes.all.peak` over `profile_run` (the weights
    // included), plus, after `torch.cuda.empty_cache()`, every byte in use on the device
    // that torch has not allocated (`mem_get_info` total − free − `allocated_bytes.all.
    // current`: the CUDA context, NCCL, the libraries); the pool is
    // `total_gpu_memory * gpu_memory_utilization - peak_memory`. No baseline is taken:
    // the context counts, as in 0.8's V1 worker. Read in a stored copy of that file (a
    // fork keeping the function; the tag was over the fetch limit) whose one-line
    // "Memory profiling results: total_gpu_memory=… non_torch_memory=…" the 0.6.4 logs
    // print. Memory outside torch: the CUDA context (the card's: `cuda_context`) + what
    // V0's libraries add after it (0.7's figures).
    Rules {
        label: "0.6.4 (V0)",
        ceil: false,
        sampler_bytes: 38,
        triton: false,
        v2: false,
        consumed: false,
        state_pages: false,
        workspace_kept: false,
        graphs_subtracted: false,
        v0: true,
        non_torch_mib: [80, 2140, 80],
        non_torch_logs: "0.7's library increase after the CUDA context (80 MiB at tp 1, 2140 at tp ≥ 2), beside the context; 0.6.4 logs on an RTX 3090: 0.35 GiB in all",
        foreign_counted: true,
        context_counted: true,
        startup_gate: false,
    },
    // vllm 0.29 with Model Runner V2 (every model): 0.27's V2 profile (`profile_run`,
    // the sampler's fp32 copy, top-k/top-p skipped), then the CUDA-graph estimate taken
    // off the pool. `GPUModelRunner.profile_cudagraph_memory` delegates to
    // `vllm/v1/worker/gpu/cudagraph_utils.py` `profile_cudagraph_memory`
    // (https://github.com/vllm-project/vllm/pull/53306, "[Model Runner V2] Reserve CUDA
    // graph memory", merged 2026-08-24, in 0.29.0): it allocates a minimal KV cache (`_init_minimal_kv_cache_for_profiling`),
    // points every graph pool at a throwaway one, runs `capture_model()` with at most
    // `_FULL_GRAPH_PROFILING_SAMPLES` = 2 FULL graphs (the largest) and every PIECEWISE,
    // encoder and speculator graph, and returns the measured free-memory drop with the
    // two FULL samples swapped for `_extrapolate_full_graph_memory`: first + (FULL graphs
    // − 1) × max(second, 1 MiB). `Worker.determine_available_memory` subtracts it
    // (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`, on by default). Read in a stored
    // text of that file of September 2026 (the code the diff of
    // https://github.com/vllm-project/vllm/pull/57865 starts from). The graphs' count is the V1
    // runner's (`capture_counts`: the capture sizes are `compilation_config`'s, and V2's
    // `CudaGraphManager` captures a PIECEWISE graph per size and a FULL decode graph per
    // size up to max_num_seqs × the query length); their cost is the assumed one.
    // Memory outside torch as 0.19's (assumed).
    Rules {
        label: "0.29 (Model Runner V2)",
        ceil: true,
        sampler_bytes: 6,
        triton: false,
        v2: true,
        consumed: true,
        state_pages: true,
        workspace_kept: true,
        graphs_subtracted: true,
        v0: false,
        non_torch_mib: [256, 2140, 72],
        non_torch_logs: "0.19's: 0.24–0.26 GiB at tp 1, 2.06–2.13 at tp 2–4, 0.07 at pp 2–4 (H100 logs)",
        foreign_counted: false,
        context_counted: false,
        startup_gate: true,
    },
    // vllm 0.29 with speculative decoding: Model Runner V2 runs the drafter too, but its
    // drafter's profile was not read; the V1 runner's (0.27's V1 rules: the triton
    // top-k/top-p sampler, 14 B per element, the drafter as read there) is taken, a
    // larger sampler phase than V2's, the safe side. The CUDA-graph estimate leaves the
    // pool, as under V2.
    Rules {
        label: "0.29 (speculative decoding: the V1 runner's profile)",
        ceil: true,
        sampler_bytes: 14,
        triton: true,
        v2: false,
        consumed: true,
        state_pages: true,
        workspace_kept: true,
        graphs_subtracted: true,
        v0: false,
        non_torch_mib: [256, 2140, 72],
        non_torch_logs: "0.19's: 0.24–0.26 GiB at tp 1, 2.06–2.13 at tp 2–4, 0.07 at pp 2–4 (H100 logs)",
        foreign_counted: false,
        context_counted: false,
        startup_gate: true,
    },
];
