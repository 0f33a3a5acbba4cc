//! FSDP1's training step as PyTorch's caching allocator sees it, per stream: what
//! `max_memory_reserved` reads on one rank of a `FullyShardedDataParallel` run
//! (`FULL_SHARD`, one flat parameter per wrapped decoder layer and one for the root,
//! `use_orig_params=False`, no mixed precision, `limit_all_gathers=True`,
//! `BackwardPrefetch.BACKWARD_PRE`: the defaults torchtune's recipes of 2024 ran with,
//! torch 2.2 as their README named it).
//!
//! The allocator keeps its free blocks per stream: a block is served again only to an
//! allocation on the stream that made it (c10/cuda/CUDACachingAllocator.cpp, torch
//! 2.2: `BlockComparatorSize` orders the pools by stream first, `get_free_block` finds
//! no block of another stream). FSDP1 allocates on three of them
//! (torch/distributed/fsdp/_runtime_utils.py, 2.2):
//!
//! - the unshard stream: each unit's padded unsharded flat parameter, allocated in
//!   `_unshard` under `state._unshard_stream` (`FlatParamHandle.unshard`,
//!   `_alloc_padded_unsharded_flat_param`) and filled by the all-gather;
//! - the default stream: everything the model computes, the gradients autograd makes —
//!   a flat parameter's gradient is `SplitWithSizesBackward`'s concatenation of its
//!   views' gradients, made once all of them have arrived — the sharded parameters and
//!   the optimizer's states and temporaries;
//! - the post-backward stream: `_reduce_grad` makes the sharded gradient there
//!   (`_get_reduce_scatter_tensors`: `torch.empty_like(chunks[0])`, the reduce-scatter's
//!   output, kept as the shard's gradient until `zero_grad(set_to_none=True)`).
//!
//! A block used on another stream is freed only once that stream has passed the free:
//! `_free_unsharded_flat_param` records the unsharded parameter on the compute stream
//! and `_post_backward_hook` the unsharded gradient on the post-backward stream
//! (`_no_dispatch_record_stream`); ProcessGroupNCCL records a collective's input and
//! output on its NCCL stream (`TORCH_NCCL_AVOID_RECORD_STREAMS` unset). The allocator
//! returns such a block when it finds the stream's event complete (`process_events`,
//! at each allocation). The host learns how far the device has come at the rate
//! limiter (`_FreeEventQueue`, `_max_num_inflight_all_gathers = 2`): before each
//! all-gather `_unshard` synchronises with the free event of the reshard two back
//! (`dequeue_if_needed`, `event.synchronize()`), and where the recipe waits for the
//! device (torchtune's `loss.item()` after each forward on rank 0). The all-gathers and reduce-scatters
//! of one process group share its NCCL stream in the order they were issued, so a
//! reduce-scatter is known complete once the compute stream has used an all-gather
//! issued after it, and the first reshard event after that use has been synchronised.
//! The model takes a deferred block back at the earliest synchronisation that proves
//! its stream done: what a run with the device behind the host (a communication-bound
//! step) holds; a device that keeps up frees earlier, never later.
//!
//! Segments as `crate::allocator::Allocator` makes them (512 B blocks, 2 MiB small-pool
//! segments, 20 MiB segments below 10 MiB, 2 MiB rounding above; `max_split_size`
//! unset), one allocator per stream; reserved never shrinks without `empty_cache`, so
//! the run's reserved peak is the three pools' reserved bytes summed at the end.

// Checked arithmetic only: sizes come from user workloads.
#![deny(clippy::arithmetic_side_effects)]

use crate::allocator::{Allocator, Handle};

/// What one rank's FSDP1 step allocates, in bytes on that rank.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    /// Ranks the flat parameters are sharded over.
    pub world: u64,
    /// Bytes of a parameter and of its gradient (no mixed precision: the same dtype).
    pub value: u64,
    /// Wrapped decoder layers.
    pub layers: u64,
    /// The decoder layers' and the root's flat parameters are frozen: a LoRA recipe
    /// (torchtune's `lora_finetune_distributed`, whose `lora_fsdp_wrap_policy` wraps
    /// every module with a trainable weight, each `lora_a` and `lora_b`, as its own
    /// unit, torchtune 0.1 `utils/_distributed.py`; with `use_orig_params=False` a flat
    /// parameter holds tensors of one `requires_grad` only, torch `_flat_param.py`
    /// `_validate_tensors_to_flatten`). Such a flat parameter has no gradient: no
    /// views' gradients, no flat concatenation, no reduce-scatter, no optimizer state.
    /// Its unsharded parameter is freed in the backward by the hook FSDP1 registers on
    /// the unit's forward inputs (`_register_post_backward_reshard_only_hook`, a
    /// multi-grad hook): on none where no input requires a gradient — the root's token
    /// ids, the first layer's embedding output — so those two stay gathered until the
    /// catch-all reshard at the backward's end (`_catch_all_reshard`).
    pub frozen: bool,
    /// With `frozen`: the adapter units inside each decoder layer, elements each, in
    /// forward order (`lora_a` r × in, `lora_b` out × r per adapted projection). Each
    /// is gathered, used and resharded on its own in the forward and in the backward,
    /// its free event entering the rate limiter's queue like a layer's; its gradient
    /// is reduce-scattered on the post-backward stream and its shard carries the
    /// optimizer's states.
    pub adapters: Vec<u64>,
    /// One decoder layer's parameters (elements), in registration order.
    pub layer_tensors: Vec<u64>,
    /// The root unit's parameters (elements) in registration order: embeddings, final
    /// norm, output projection.
    pub root_tensors: Vec<u64>,
    /// One layer's input (tokens × hidden × value), saved for the backward.
    pub hidden: u64,
    /// One layer's other saved tensors (recomputed in its backward under activation
    /// checkpointing).
    pub layer_saved: Vec<u64>,
    /// Activation checkpointing around every decoder layer.
    pub checkpointing: bool,
    /// The loss's tensors at the backward's start.
    pub logits: Vec<u64>,
    /// Of those, the bytes the training loop keeps bound until the next forward's
    /// logits exist (torchtune 0.1's `logits`).
    pub kept: u64,
    /// Optimizer states per shard element, as tensors of the shard's size (AdamW: 2).
    pub states: u64,
    /// Optimizer step temporaries per shard, as tensors of the shard's size (torch's
    /// foreach AdamW: `_foreach_sqrt` of the second moments, 1).
    pub temporaries: u64,
    /// The host waits for the compute stream after each forward (torchtune's
    /// recipes log `loss.item()` on rank 0 every `log_every_n_steps`, 1 by default):
    /// every free recorded before it, and the previous backward's reduce-scatters
    /// (the compute stream waited for the post-backward stream at the backward's
    /// end, `_post_backward_final_callback`), are then done.
    pub sync_after_forward: bool,
    /// Training iterations simulated (the pools settle after the second).
    pub iterations: u64,
    /// torch's cuBLAS workspace (0: none), one on the default stream for the forward's
    /// thread at its first GEMM and one for the autograd engine's thread at the
    /// backward's, kept for the process's life (`estimate::training`'s
    /// `cublas.workspace` line).
    pub workspace: u64,
}

/// The three pools' reserved bytes and the allocated peak they served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reserved {
    /// Default (compute) stream, unshard stream, post-backward stream.
    pub per_stream: [u64; 3],
    /// Their sum: `max_memory_reserved`.
    pub total: u64,
}

const DEFAULT: usize = 0;
const UNSHARD: usize = 1;
const POST_BACKWARD: usize = 2;

/// A free the allocator cannot act on yet, and what proves its streams done.
#[derive(Debug, Clone, Copy)]
enum Wait {
    /// Recorded on the NCCL stream by a reduce-scatter: done once an all-gather issued
    /// after it has been used by the compute stream (`after_ag`: that all-gather's
    /// number, not known until one is issued), then a reshard event after that.
    AllGatherAfter(Option<u64>),
    /// Done once the host has synchronised on this reshard event.
    Event(u64),
}

struct Sim {
    pools: [Allocator; 3],
    pending: Vec<(Wait, usize, Handle)>,
    /// Reshard events recorded so far (the last one's number).
    events: u64,
    /// The rate limiter's queue of reshard events.
    queue: std::collections::VecDeque<u64>,
    /// All-gathers issued so far.
    gathers: u64,
    /// The device memory the pools may reach together (`None`: room for all).
    capacity: Option<u64>,
    /// The highest total reserved so far.
    peak: u64,
    /// An allocation found no room even after the cache was released.
    failed: bool,
}

fn sum(v: &[u64]) -> u64 {
    v.iter().fold(0u64, |a, b| a.saturating_add(*b))
}

impl Sim {
    fn total(&self) -> u64 {
        self.pools
            .iter()
            .fold(0u64, |a, p| a.saturating_add(p.reserved()))
    }

    fn malloc(&mut self, stream: usize, bytes: u64) -> Handle {
        let Some(cap) = self.capacity else {
            let h = self.pools[stream].malloc(bytes);
            self.peak = self.peak.max(self.total());
            return h;
        };
        let before = self.pools[stream].clone();
        let h = self.pools[stream].malloc(bytes);
        if self.total() > cap {
            // cudaMalloc fails past the device's memory: `release_cached_blocks`
            // waits for every outstanding event (`synchronize_and_free_events`),
            // returns every wholly free segment of every stream, and the
            // allocation is tried again; it fails (out of memory) if still over.
            self.pools[stream] = before;
            self.synchronise_all();
            for p in self.pools.iter_mut() {
                p.empty_cache();
            }
            let h = self.pools[stream].malloc(bytes);
            if self.total() > cap {
                self.failed = true;
            }
            self.peak = self.peak.max(self.total());
            return h;
        }
        self.peak = self.peak.max(self.total());
        h
    }

    fn free(&mut self, stream: usize, h: Handle) {
        self.pools[stream].free(h);
    }

    /// The host has synchronised on reshard event `id`: every deferred block it
    /// proves done goes back to its pool.
    fn synchronise(&mut self, id: u64) {
        let mut keep = Vec::new();
        for (w, s, h) in std::mem::take(&mut self.pending) {
            match w {
                Wait::Event(e) if e <= id => self.pools[s].free(h),
                _ => keep.push((w, s, h)),
            }
        }
        self.pending = keep;
    }

    /// The host waited for every stream: each deferred block is done (the rate
    /// limiter's queue keeps its events, complete by now).
    fn synchronise_all(&mut self) {
        for (_, s, h) in std::mem::take(&mut self.pending) {
            self.pools[s].free(h);
        }
    }

    /// `_unshard`: the rate limiter, then the unsharded flat parameter on the unshard
    /// stream. Returns the block and the all-gather's number.
    fn unshard(&mut self, bytes: u64) -> (Handle, u64) {
        if self.queue.len() >= 2
            && let Some(e) = self.queue.pop_front()
        {
            self.synchronise(e);
        }
        self.gathers = self.gathers.saturating_add(1);
        let n = self.gathers;
        for (w, _, _) in self.pending.iter_mut() {
            if let Wait::AllGatherAfter(None) = w {
                *w = Wait::AllGatherAfter(Some(n));
            }
        }
        (self.malloc(UNSHARD, bytes), n)
    }

    /// The compute stream starts on the unit gathered by all-gather `n`: the
    /// reduce-scatters queued before it are done once the next reshard event is.
    fn compute(&mut self, n: u64) {
        let next = self.events.saturating_add(1);
        for (w, _, _) in self.pending.iter_mut() {
            if let Wait::AllGatherAfter(Some(g)) = *w
                && g <= n
            {
                *w = Wait::Event(next);
            }
        }
    }

    /// `_reshard`: the unsharded flat parameter freed, recorded on the compute stream,
    /// and the free event queued for the rate limiter.
    fn reshard(&mut self, h: Handle) {
        self.events = self.events.saturating_add(1);
        let e = self.events;
        self.queue.push_back(e);
        self.pending.push((Wait::Event(e), UNSHARD, h));
    }

    /// `_post_backward_hook` → `_reduce_grad`: the sharded gradient made on the
    /// post-backward stream (kept, unless a previous one is accumulated into), the
    /// unsharded gradient freed once the reduce-scatter is done.
    ///
    /// A flat gradient whose elements the world size does not divide is first padded
    /// (`_get_reduce_scatter_tensors`: `F.pad`, a copy made on the post-backward
    /// stream, recorded by the collective like the gradient it copies).
    fn reduce(
        &mut self,
        unsharded: Handle,
        padded: Option<u64>,
        shard: u64,
        grads: &mut Vec<Handle>,
    ) {
        if let Some(p) = padded {
            let h = self.malloc(POST_BACKWARD, p);
            self.pending
                .push((Wait::AllGatherAfter(None), POST_BACKWARD, h));
        }
        grads.push(self.malloc(POST_BACKWARD, shard));
        self.pending
            .push((Wait::AllGatherAfter(None), DEFAULT, unsharded));
    }
}

/// Padded unsharded and sharded flat parameter bytes of a unit of `elements`
/// (`FlatParamHandle._get_shard`: padded to a multiple of the world size).
fn flat(elements: u64, world: u64, value: u64) -> (u64, u64) {
    let w = world.max(1);
    let shard = elements.div_ceil(w);
    (
        shard.saturating_mul(w).saturating_mul(value),
        shard.saturating_mul(value),
    )
}

/// Runs `s.iterations` steps of FSDP1 training on one rank and returns what each
/// stream's pool reserved.
pub(crate) fn reserved(s: &Step) -> Reserved {
    run(s, None).0
}

/// The least device memory the pools can run the step in: the smallest capacity at
/// which no allocation fails once the allocator has released its cache.
pub(crate) fn least(s: &Step) -> u64 {
    let room = reserved(s).total;
    let (mut lo, mut hi) = (0u64, room);
    // 2 MiB resolution: the allocator's segments are rounded to it.
    while hi.saturating_sub(lo) > (2 << 20) {
        let mid = lo.saturating_add(hi.saturating_sub(lo) / 2);
        if run(s, Some(mid)).1 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// The pools over a run's batches in order, one iteration each (at least the first
/// step's `iterations`), on a device with room: [`run_batches`].
pub(crate) fn reserved_over(all: &[Step]) -> Reserved {
    run_batches(all, None).0
}

fn run(s: &Step, capacity: Option<u64>) -> (Reserved, bool) {
    run_batches(std::slice::from_ref(s), capacity)
}

/// Runs one iteration per step given (at least `iterations` of the first's, the last
/// one repeated), each with its own batch's activations, loss tensors and kept logits:
/// batches padded to different lengths. The units, shards and optimizer are the
/// first step's.
fn run_batches(all: &[Step], capacity: Option<u64>) -> (Reserved, bool) {
    let Some(s) = all.first() else {
        return (
            Reserved {
                per_stream: [0; 3],
                total: 0,
            },
            false,
        );
    };
    let mut sim = Sim {
        capacity,
        peak: 0,
        failed: false,
        pools: [
            Allocator::new(false),
            Allocator::new(false),
            Allocator::new(false),
        ],
        pending: Vec::new(),
        events: 0,
        queue: Default::default(),
        gathers: 0,
    };
    let v = s.value;
    let (layer_full, layer_shard) = flat(sum(&s.layer_tensors), s.world, v);
    let (root_full, root_shard) = flat(sum(&s.root_tensors), s.world, v);
    let layer_grad = sum(&s.layer_tensors).saturating_mul(v);
    let root_grad = sum(&s.root_tensors).saturating_mul(v);
    let padded = |full: u64, grad: u64| (full > grad).then_some(full);
    let (layer_pad, root_pad) = (padded(layer_full, layer_grad), padded(root_full, root_grad));
    // The sharded flat parameters, made at wrapping (layers first, the root last:
    // `_auto_wrap` wraps the children before the root) and kept; the setup's other
    // segments are returned by torchtune's `cleanup_before_training` (empty_cache).
    // A LoRA recipe's adapter units: wrapped before the layer holding them, and the
    // only shards that carry gradients and optimizer states.
    let adapters: Vec<(u64, u64, Option<u64>, u64)> = if s.frozen {
        s.adapters
            .iter()
            .map(|&n| {
                let (full, shard) = flat(n, s.world, v);
                let grad = n.saturating_mul(v);
                (full, shard, padded(full, grad), grad)
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut shards = Vec::new();
    let mut trained = Vec::new();
    for _ in 0..s.layers {
        for a in &adapters {
            shards.push(a.1);
            trained.push(a.1);
        }
        shards.push(layer_shard);
        if !s.frozen {
            trained.push(layer_shard);
        }
    }
    shards.push(root_shard);
    if !s.frozen {
        trained.push(root_shard);
    }
    for &b in &shards {
        sim.malloc(DEFAULT, b);
    }
    let mut states: Vec<Handle> = Vec::new();
    let mut kept: Vec<Handle> = Vec::new();
    let count = u64::try_from(all.len())
        .unwrap_or(u64::MAX)
        .max(s.iterations);
    for iteration in 0..count {
        let batch = all
            .get(usize::try_from(iteration).unwrap_or(usize::MAX))
            .or(all.last())
            .unwrap_or(s);
        let (hidden, layer_saved, logits, kept_bytes) =
            (batch.hidden, &batch.layer_saved, &batch.logits, batch.kept);
        let first = iteration == 0 && s.workspace > 0;
        // Forward. The root's parameters stay gathered from its forward to its
        // post-backward hook (`_post_forward_reshard`: the root is not resharded).
        let (root, g) = sim.unshard(root_full);
        sim.compute(g);
        if first {
            // The forward thread's cuBLAS workspace, at the first layer's first GEMM.
            sim.malloc(DEFAULT, s.workspace);
        }
        let mut inputs = vec![sim.malloc(DEFAULT, hidden)];
        let mut saved: Vec<Vec<Handle>> = Vec::new();
        for _ in 0..s.layers {
            let (h, g) = sim.unshard(layer_full);
            sim.compute(g);
            // The adapter units, each gathered for its projection and resharded after.
            for a in &adapters {
                let (ah, ag) = sim.unshard(a.0);
                sim.compute(ag);
                sim.reshard(ah);
            }
            let t: Vec<Handle> = layer_saved
                .iter()
                .map(|&b| sim.malloc(DEFAULT, b))
                .collect();
            inputs.push(sim.malloc(DEFAULT, hidden));
            if s.checkpointing {
                // checkpoint_wrapper (non-reentrant): nothing but the input is kept.
                for x in t {
                    sim.free(DEFAULT, x);
                }
                saved.push(Vec::new());
            } else {
                saved.push(t);
            }
            sim.reshard(h);
        }
        // The loss's tensors; the previous iteration's kept logits are unbound only
        // once the new ones exist (`logits = self._model(input_ids)`).
        let mut loss: Vec<Handle> = logits.iter().map(|&b| sim.malloc(DEFAULT, b)).collect();
        for h in kept.drain(..) {
            sim.free(DEFAULT, h);
        }
        if s.sync_after_forward {
            sim.synchronise_all();
        }
        // Backward. The root's pre-backward hook prefetches the last layer; the
        // output projection's and final norm's gradients wait in the root flat
        // parameter's SplitWithSizesBackward until the embedding's arrives.
        let mut next = Some(sim.unshard(layer_full));
        if first {
            // The autograd engine's thread's, at the output projection's backward.
            sim.malloc(DEFAULT, s.workspace);
        }
        let mut root_grads = Vec::new();
        if let Some((&emb, rest)) = s.root_tensors.split_first() {
            if !s.frozen {
                for &t in rest.iter().rev() {
                    root_grads.push(sim.malloc(DEFAULT, t.saturating_mul(v)));
                }
            }
            // The loss's tensors are freed as its backward ends; `kept` stays.
            let mut keep_left = kept_bytes;
            for (h, &b) in loss.drain(..).zip(logits.iter()) {
                if keep_left >= b && b > 0 {
                    keep_left = keep_left.saturating_sub(b);
                    kept.push(h);
                } else {
                    sim.free(DEFAULT, h);
                }
            }
            let mut grad_out = sim.malloc(DEFAULT, hidden);
            let mut sharded = Vec::new();
            let mut first_layer = None;
            for k in (0..s.layers).rev() {
                let Some((h, g)) = next.take() else { break };
                if s.frozen {
                    sim.compute(g);
                    let recomputed: Vec<Handle> = if s.checkpointing {
                        layer_saved
                            .iter()
                            .map(|&b| sim.malloc(DEFAULT, b))
                            .collect()
                    } else {
                        saved.pop().unwrap_or_default()
                    };
                    // The adapters in backward order: each gathered when its output's
                    // gradient arrives (the one before prefetches it, BACKWARD_PRE in
                    // reverse post-forward order), its gradient reduce-scattered.
                    for a in adapters.iter().rev() {
                        let (ah, ag) = sim.unshard(a.0);
                        sim.compute(ag);
                        let grad = sim.malloc(DEFAULT, a.3);
                        sim.reshard(ah);
                        sim.reduce(grad, a.2, a.1, &mut sharded);
                    }
                    // The first adapter's pre-backward hook prefetches the layer below
                    // (the next handle in reverse post-forward order).
                    if k > 0 {
                        next = Some(sim.unshard(layer_full));
                    }
                    let grad_in = sim.malloc(DEFAULT, hidden);
                    sim.free(DEFAULT, grad_out);
                    grad_out = grad_in;
                    for x in recomputed {
                        sim.free(DEFAULT, x);
                    }
                    if let Some(x) = inputs.pop() {
                        sim.free(DEFAULT, x);
                    }
                    // The reshard-only hook on the layer's input: none on the first
                    // layer's (the embedding's output needs no gradient).
                    if k > 0 {
                        sim.reshard(h);
                    } else {
                        first_layer = Some(h);
                    }
                    continue;
                }
                if k > 0 {
                    // BACKWARD_PRE: the next layer in backward order is gathered
                    // before this one computes.
                    next = Some(sim.unshard(layer_full));
                }
                sim.compute(g);
                let recomputed: Vec<Handle> = if s.checkpointing {
                    layer_saved
                        .iter()
                        .map(|&b| sim.malloc(DEFAULT, b))
                        .collect()
                } else {
                    saved.pop().unwrap_or_default()
                };
                // The views' gradients, last registered first, then their flat
                // concatenation (split_with_sizes_backward), then the views' freed.
                let views: Vec<Handle> = s
                    .layer_tensors
                    .iter()
                    .rev()
                    .map(|&t| sim.malloc(DEFAULT, t.saturating_mul(v)))
                    .collect();
                let grad_in = sim.malloc(DEFAULT, hidden);
                sim.free(DEFAULT, grad_out);
                grad_out = grad_in;
                for x in recomputed {
                    sim.free(DEFAULT, x);
                }
                if let Some(x) = inputs.pop() {
                    sim.free(DEFAULT, x);
                }
                let cat = sim.malloc(DEFAULT, layer_grad);
                for x in views {
                    sim.free(DEFAULT, x);
                }
                sim.reshard(h);
                sim.reduce(cat, layer_pad, layer_shard, &mut sharded);
            }
            if s.frozen {
                // The catch-all reshard at the backward's end: the first layer's and
                // the root's unsharded parameters, never freed by a hook.
                sim.free(DEFAULT, grad_out);
                for x in inputs.drain(..) {
                    sim.free(DEFAULT, x);
                }
                if let Some(h) = first_layer {
                    sim.reshard(h);
                }
                sim.reshard(root);
            } else {
                // The embedding's gradient, then the root's flat gradient.
                let e = sim.malloc(DEFAULT, emb.saturating_mul(v));
                let cat = sim.malloc(DEFAULT, root_grad);
                sim.free(DEFAULT, e);
                for x in root_grads.drain(..) {
                    sim.free(DEFAULT, x);
                }
                sim.free(DEFAULT, grad_out);
                for x in inputs.drain(..) {
                    sim.free(DEFAULT, x);
                }
                sim.reshard(root);
                sim.reduce(cat, root_pad, root_shard, &mut sharded);
            }
            // The optimizer step on the default stream: states made at the first
            // step (`zeros_like` per parameter), temporaries per parameter.
            if states.is_empty() {
                for &b in &trained {
                    for _ in 0..s.states {
                        states.push(sim.malloc(DEFAULT, b));
                    }
                }
            }
            let temps: Vec<Handle> = trained
                .iter()
                .flat_map(|&b| std::iter::repeat_n(b, usize::try_from(s.temporaries).unwrap_or(0)))
                .collect::<Vec<u64>>()
                .into_iter()
                .map(|b| sim.malloc(DEFAULT, b))
                .collect();
            for t in temps {
                sim.free(DEFAULT, t);
            }
            // zero_grad(set_to_none=True): the sharded gradients go back to the
            // post-backward stream's pool.
            for x in sharded {
                sim.free(POST_BACKWARD, x);
            }
        }
    }
    let per_stream = [
        sim.pools[DEFAULT].peak_reserved(),
        sim.pools[UNSHARD].peak_reserved(),
        sim.pools[POST_BACKWARD].peak_reserved(),
    ];
    (
        Reserved {
            per_stream,
            total: sim.peak,
        },
        sim.failed,
    )
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Llama-2-7B's units (torchtune's `llama2_7b`: q, k, v, o, the gated MLP's three
    /// matrices and two norms per layer; embeddings, final norm and output at the root)
    /// in bf16, 2 × 512 tokens a rank, checkpointing, AdamW.
    fn llama2_7b(world: u64) -> Step {
        let (h, i, vocab, tokens) = (4096u64, 11008u64, 32000u64, 1024u64);
        Step {
            world,
            value: 2,
            layers: 32,
            frozen: false,
            adapters: Vec::new(),
            layer_tensors: vec![h * h, h * h, h * h, h * h, i * h, i * h, h * i, h, h],
            root_tensors: vec![vocab * h, h, vocab * h],
            hidden: tokens * h * 2,
            layer_saved: vec![tokens * i * 2; 4],
            checkpointing: true,
            logits: vec![tokens * vocab * 4; 4],
            kept: tokens * vocab * 4,
            states: 2,
            temporaries: 1,
            sync_after_forward: true,
            iterations: 3,
            workspace: 0,
        }
    }

    fn segment(bytes: u64) -> u64 {
        bytes.div_ceil(2 * MIB) * 2 * MIB
    }

    /// The post-backward stream makes only the sharded gradients; `zero_grad` gives
    /// them back to its pool and the next backward's reuse them: its segments are the
    /// shards', one each (each over 10 MiB, rounded to 2 MiB), whatever the iterations.
    #[test]
    fn the_post_backward_pool_is_the_sharded_gradients() {
        let s = llama2_7b(4);
        let layer = segment(202_383_360 / 4 * 2);
        let root = segment(262_148_096 / 4 * 2);
        let want = 32 * layer + root;
        assert_eq!(reserved(&s).per_stream[POST_BACKWARD], want);
        let once = Step { iterations: 1, ..s };
        assert_eq!(reserved(&once).per_stream[POST_BACKWARD], want);
    }

    /// torch's two cuBLAS workspaces sit on the default stream only, each a block of
    /// its own from the first iteration on: the default pool holds at least their
    /// bytes more than without them, the other two pools nothing more.
    #[test]
    fn the_cublas_workspaces_reserve_on_the_default_stream() {
        let without = reserved(&llama2_7b(4));
        let with = reserved(&Step {
            workspace: 8_519_680,
            ..llama2_7b(4)
        });
        assert!(
            with.per_stream[DEFAULT] >= without.per_stream[DEFAULT] + 2 * 8_519_680,
            "{with:?} against {without:?}"
        );
        assert_eq!(with.per_stream[UNSHARD], without.per_stream[UNSHARD]);
        assert_eq!(
            with.per_stream[POST_BACKWARD],
            without.per_stream[POST_BACKWARD]
        );
    }

    /// The unshard stream holds the root (gathered from its forward to its
    /// post-backward hook) and the blocks the rate limiter lets stand: at each
    /// backward prefetch the block computing, the one prefetched and the one whose
    /// free the host has not yet synchronised — three, never the 32 a pool shared
    /// with no limiter would.
    #[test]
    fn the_unshard_pool_holds_what_the_rate_limiter_allows() {
        let u = reserved(&llama2_7b(4)).per_stream[UNSHARD];
        let (layer, root) = (segment(202_383_360 * 2), segment(262_148_096 * 2));
        assert!(u >= root + 3 * layer, "{u}");
        assert!(u <= 2 * root + 4 * layer, "{u}");
    }

    /// The least memory the step runs in: the allocator returning its cache lets it
    /// run there, not 4 MiB below; and it lies between the live tensors and what the
    /// pools reserve with room.
    #[test]
    fn the_least_memory_is_where_the_step_stops_failing() {
        let s = llama2_7b(4);
        let least = least(&s);
        let room = reserved(&s).total;
        assert!(least <= room);
        assert!(!run(&s, Some(least)).1);
        assert!(run(&s, Some(least - 4 * MIB)).1);
        // The shards, AdamW's states and its temporary, the sharded gradients: the
        // step's live tensors alone.
        let shards = 32 * (202_383_360 / 4 * 2) + 262_148_096 / 4 * 2;
        assert!(least > 5 * shards, "{least} {shards}");
    }

    /// A world size that does not divide a flat parameter (the root's 262 148 096
    /// elements over 3 ranks) pads its gradient with a copy on the post-backward
    /// stream, which that pool keeps cached beside the shards.
    #[test]
    fn a_padded_gradient_is_copied_on_the_post_backward_stream() {
        let s = llama2_7b(3);
        let shard = |n: u64| segment(n.div_ceil(3) * 2);
        let shards = 32 * shard(202_383_360) + shard(262_148_096);
        let p = reserved(&s).per_stream[POST_BACKWARD];
        assert!(
            p >= shards + segment(262_148_096u64.div_ceil(3) * 3 * 2),
            "{p}"
        );
    }

    /// torchtune's LoRA recipe on Llama-2-7B: the blocks and the root frozen, q's and
    /// v's adapters (rank 8) four units in each block, 2 × 512 tokens without
    /// checkpointing.
    fn lora(world: u64) -> Step {
        let (h, r, tokens) = (4096u64, 8u64, 1024u64);
        Step {
            frozen: true,
            adapters: vec![r * h, h * r, r * h, h * r],
            checkpointing: false,
            layer_saved: vec![tokens * 11008 * 2; 3],
            ..llama2_7b(world)
        }
    }

    /// Frozen flat parameters make no gradient: the post-backward pool holds the
    /// adapters' sharded gradients alone (128 units of 16 384 elements over 2 ranks,
    /// 32 KiB each: two small-pool segments), never one block's 193 MiB.
    #[test]
    fn a_frozen_step_reduces_the_adapters_alone() {
        let p = reserved(&lora(2)).per_stream[POST_BACKWARD];
        assert!(p > 0, "the adapters' gradients are reduce-scattered");
        assert!(p <= 4 * MIB, "{p}");
    }

    /// The frozen blocks are resharded in the backward as their inputs' gradients are
    /// made (the reshard-only hook): the unshard pool holds the root and a few blocks,
    /// not the 32 a backward without that hook would keep to its end.
    #[test]
    fn frozen_blocks_give_their_gathered_parameters_back_in_the_backward() {
        let u = reserved(&lora(2)).per_stream[UNSHARD];
        let (layer, root) = (segment(202_383_360 * 2), segment(262_148_096 * 2));
        assert!(u >= root + layer, "{u}");
        assert!(u <= root + 5 * layer, "{u}");
    }

    /// Batches padded to different lengths change the step's tensors' sizes: blocks
    /// cached at one length are cut for the next, and the default pool reserves more
    /// over a run of rising lengths than over the same steps at the longest alone.
    #[test]
    fn batches_of_rising_lengths_fragment_the_default_pool() {
        let at = |tokens: u64| {
            let s = lora(2);
            Step {
                hidden: tokens * 4096 * 2,
                layer_saved: vec![tokens * 11008 * 2; 3],
                logits: vec![tokens * 32000 * 4; 4],
                kept: tokens * 32000 * 4,
                ..s
            }
        };
        let longest = run_batches(&[at(1024)], None).0;
        let rising: Vec<Step> = (4..=32).map(|k| at(k * 32)).collect();
        let rising = run_batches(&rising, None).0;
        assert!(
            rising.per_stream[DEFAULT] > longest.per_stream[DEFAULT],
            "{rising:?} against {longest:?}"
        );
    }

    /// SGD without momentum keeps no state and makes no temporary: its default
    /// stream reserves less than AdamW's by at least the two states.
    #[test]
    fn adamw_states_reserve_on_the_default_stream() {
        let adamw = llama2_7b(4);
        let sgd = Step {
            states: 0,
            temporaries: 0,
            ..adamw.clone()
        };
        let (a, s) = (
            reserved(&adamw).per_stream[DEFAULT],
            reserved(&sgd).per_stream[DEFAULT],
        );
        let states = 2 * (32 * (202_383_360 / 4 * 2) + 262_148_096 / 4 * 2);
        assert!(a >= s + states, "{a} {s}");
    }
}
