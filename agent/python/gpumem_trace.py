"""gpumem_trace: one training step or one generation traced without a GPU.

`gpumem-agent trace` runs this file in the user's Python with the workload as JSON on
standard input and reads one JSON document from standard output. The model is built by
transformers (and peft for LoRA/QLoRA) from its config.json on PyTorch's ``meta``
device: every operator runs its real code and produces tensors with their real shapes
and dtypes, but no memory is allocated and no weight is read or downloaded. A
``TorchDispatchMode`` sees every tensor an operator returns; each new storage on the
meta device is an allocation the CUDA caching allocator would serve, and a weak
reference on the storage tells when it is freed. That gives allocated bytes phase by
phase, and :class:`Allocator` (a model of the caching allocator) gives reserved bytes.

Phases (the names ``gpumem-agent run`` uses): ``model_load``; per training step
``forward``, ``backward``, ``optimizer_step`` (the step is run twice: step 0 creates the
optimizer state, step 1 is the steady state); for inference ``prefill`` and ``decode``.
At each phase's peak the live bytes are split into categories: parameters, master
weights, gradients, optimizer state, activations (kept from the forward for the
backward), logits (every tensor whose last dimension is the vocabulary), KV cache and
temporaries (everything else).

Output: ``{"ok": TRACE}``, ``{"unavailable": TEXT}`` (a package is missing: the agent
exits 2 and says what to install) or ``{"error": TEXT}``. This file never touches a GPU.
"""

import json
import sys
import time
import weakref

# The request on standard input is a config and a workload: a few kilobytes (the agent
# sends its config.json, itself at most 16 MiB).
MAX_REQUEST_CHARS = 32 << 20

#: The document's schema name (the agent checks it).
SCHEMA = "gpumem.trace/v1"

# CUDA caching allocator constants, c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.11):
# kMinBlockSize = 512 (every request is rounded up to a multiple), kSmallSize = 1 MiB
# (largest request served from the small pool), kSmallBuffer = 2 MiB (a small-pool
# segment), kMinLargeAlloc = 10 MiB (requests below it get a kLargeBuffer = 20 MiB
# segment), kRoundLarge = 2 MiB (larger segments are rounded to it).
MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
MIN_LARGE_ALLOC = 10 << 20
LARGE_BUFFER = 20 << 20
ROUND_LARGE = 2 << 20

CATEGORIES = (
    "parameters",
    "master_weights",
    "gradients",
    "optimizer_state",
    "activations",
    "logits",
    "kv_cache",
    "temporaries",
)


def round_size(n):
    """The allocator's block size for a request of ``n`` bytes (``round_size``)."""
    if n < MIN_BLOCK:
        return MIN_BLOCK
    return (n + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK


class Allocator:
    """The CUDA caching allocator's bookkeeping, without memory.

    Two pools (small: blocks of at most 1 MiB, in 2 MiB segments; large: the rest),
    best fit by (size, address), splitting a free block when the remainder is at least
    512 B (small pool) or more than 1 MiB (large pool), merging a freed block with free
    neighbours of its segment, and never returning a segment (no ``empty_cache``, no
    out-of-memory retry): reserved only grows, as on a device with room to spare. With
    ``expandable_segments`` each pool is one segment that grows at its end in 2 MiB
    (small) or 20 MiB (large) steps, so freed space anywhere is reused and reserved is
    the pool's high-water mark rounded to the step.
    """

    def __init__(self, expandable):
        self.expandable = expandable
        self.history = None  # when recording: the History the segment events go to
        self.reserved = 0
        self.next_address = 0
        # Per pool: free blocks as {(size, address)} plus a segment table.
        self.free = {True: [], False: []}
        self.blocks = {}  # address -> [size, is_free, segment, is_small]
        self.segment_end = {}  # segment id -> end address
        self.expand_top = {True: None, False: None}  # expandable: (segment, mapped end)

    def _pool_of(self, size):
        return size <= SMALL_SIZE

    def _segment_size(self, size, small):
        if small:
            return SMALL_BUFFER
        if size < MIN_LARGE_ALLOC:
            return LARGE_BUFFER
        return (size + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE

    def _take_free(self, small, size):
        free = self.free[small]
        best = None
        for i, (bsize, addr) in enumerate(free):
            if bsize >= size and (best is None or (bsize, addr) < free[best]):
                best = i
        if best is None:
            return None
        return free.pop(best)

    def _new_segment(self, small, size):
        if self.expandable:
            return self._grow(small, size)
        seg_size = self._segment_size(size, small)
        addr = self.next_address
        self.next_address += seg_size
        self.reserved += seg_size
        if self.history is not None:
            self.history.segment(addr, seg_size)
        self.segment_end[addr] = addr + seg_size
        self.blocks[addr] = [seg_size, True, addr, small]
        return (seg_size, addr)

    def _grow(self, small, size):
        step = SMALL_BUFFER if small else LARGE_BUFFER
        top = self.expand_top[small]
        if top is None:
            seg = self.next_address
            # Each expandable pool has its own address range (never adjacent to another).
            self.next_address += 1 << 50
            top = (seg, seg)
            self.segment_end[seg] = seg
        seg, end = top
        # The free block touching the mapped end, if any, grows with the mapping.
        tail = None
        for i, (bsize, addr) in enumerate(self.free[small]):
            if addr + bsize == end:
                tail = self.free[small].pop(i)
                break
        start = tail[1] if tail else end
        have = tail[0] if tail else 0
        need = size - have
        grow = (need + step - 1) // step * step
        self.reserved += grow
        if self.history is not None:
            # An expandable segment maps more pages at its end (`segment_map`).
            self.history.segment(end, grow, "segment_map")
        new_end = end + grow
        self.expand_top[small] = (seg, new_end)
        self.segment_end[seg] = new_end
        self.blocks[start] = [have + grow, True, seg, small]
        return (have + grow, start)

    def malloc(self, size):
        """Serves a request of ``size`` (already rounded) bytes; returns its address."""
        small = self._pool_of(size)
        block = self._take_free(small, size) or self._new_segment(small, size)
        bsize, addr = block
        rest = bsize - size
        split = rest >= MIN_BLOCK if small else rest > SMALL_SIZE
        entry = self.blocks[addr]
        if split:
            entry[0] = size
            self.blocks[addr + size] = [rest, True, entry[2], small]
            self.free[small].append((rest, addr + size))
        entry[1] = False
        return addr

    def segments(self, requested):
        """The segments and their blocks as ``torch.cuda.memory._snapshot()`` gives
        them; ``requested``: address -> (bytes requested, frames) of live blocks."""
        by_segment = {}
        for addr, (size, free, seg, small) in sorted(self.blocks.items()):
            by_segment.setdefault(seg, (small, []))[1].append((addr, size, free))
        out = []
        for seg, (small, blocks) in sorted(by_segment.items()):
            rows = []
            allocated = 0
            for addr, size, free in blocks:
                req, frames = requested.get(addr, (size, []))
                if not free:
                    allocated += size
                rows.append(
                    {
                        "address": addr,
                        "size": size,
                        "requested_size": 0 if free else req,
                        "state": "inactive" if free else "active_allocated",
                        "frames": [] if free else frames,
                    }
                )
            total = self.segment_end[seg] - seg
            out.append(
                {
                    "device": 0,
                    "address": seg,
                    "total_size": total,
                    "stream": 0,
                    "segment_type": "small" if small else "large",
                    "allocated_size": allocated,
                    "active_size": allocated,
                    "requested_size": sum(r["requested_size"] for r in rows),
                    "blocks": rows,
                }
            )
        return out

    def release(self, addr):
        """Frees the block at ``addr``, merging it with free neighbours."""
        entry = self.blocks[addr]
        size, _, seg, small = entry
        entry[1] = True
        # Merge with the next block of the same segment.
        nxt = addr + size
        if nxt < self.segment_end[seg] and nxt in self.blocks and self.blocks[nxt][1]:
            nsize = self.blocks[nxt][0]
            self.free[small].remove((nsize, nxt))
            del self.blocks[nxt]
            size += nsize
        # Merge with the previous one.
        prev = None
        if addr != seg:
            for paddr, (psize, pfree, pseg, _) in self.blocks.items():
                if pseg == seg and paddr + psize == addr:
                    prev = (paddr, psize, pfree)
                    break
        if prev and prev[2]:
            paddr, psize, _ = prev
            self.free[small].remove((psize, paddr))
            del self.blocks[addr]
            addr, size = paddr, psize + size
        self.blocks[addr][0] = size
        self.blocks[addr][1] = True
        self.free[small].append((size, addr))


class History:
    """The trace's ``device_traces``: what ``torch.cuda.memory._record_memory_history``
    would record on a GPU (``alloc``, ``free_completed``, ``segment_alloc`` or, with
    expandable segments, ``segment_map``), each with the Python frames innermost first
    and the probe's metadata (``gpumem:<phase>:<step>[:<scope>]``); the last
    ``max_entries`` kept, as the allocator's ring buffer keeps them."""

    # This file's own frames between an operator and the allocation.
    _OWN = ("track", "__torch_dispatch__", "_freed")

    def __init__(self, max_entries):
        import collections

        self.entries = collections.deque(maxlen=max_entries)
        self.total = 0
        self.metadata = ""

    def frames(self):
        out = []
        f = sys._getframe(2)
        while f is not None and len(out) < 64:
            code = f.f_code
            if not (code.co_filename == __file__ and code.co_name in self._OWN):
                out.append({"filename": code.co_filename, "line": f.f_lineno, "name": code.co_name})
            f = f.f_back
        return out

    def add(self, action, addr, size, frames=None):
        self.total += 1
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "frames": frames or []}
        if self.metadata:
            e["user_metadata"] = self.metadata
        self.entries.append(e)

    def segment(self, addr, size, action="segment_alloc"):
        self.add(action, addr, size)


class _Record:
    __slots__ = ("index", "bytes", "address", "phase", "logits", "ref", "what", "requested", "frames")

    def __init__(self, index, nbytes, address, phase, logits, what):
        self.index = index
        self.bytes = nbytes
        self.address = address
        self.phase = phase
        self.logits = logits
        self.what = what
        self.ref = None
        self.requested = nbytes
        self.frames = None


class Tracker:
    """Live storages, allocated bytes, per-phase peaks and what was live at each peak."""

    def __init__(self, allocator, vocab):
        self.allocator = allocator
        self.vocab = vocab
        self.live = {}  # id(storage) -> _Record
        self.allocated = 0
        self.count = 0
        self.phase = None
        self.step = None
        self.peak = 0
        self.start = 0
        self.logits = 0
        self.logits_peak = 0
        self.reserved_peak = 0
        self.peak_dirty = False
        self.peak_live = []
        self.by_op = None  # when set: op name -> records allocated by it
        self.history = None  # when set: the History every allocation and free goes to
        self.scopes = []  # module paths entered (forward hooks), innermost last

    def tag(self, phase, step):
        if self.history is not None:
            text = "gpumem:%s:%s" % (phase, step) if phase else ""
            if text and self.scopes:
                text += ":" + self.scopes[-1]
            self.history.metadata = text

    def begin(self, phase, step=None):
        self.step = step
        self.tag(phase, step)
        self.phase = phase
        self.start = self.allocated
        self.peak = self.allocated
        self.logits_peak = self.logits
        self.reserved_peak = self.allocator.reserved
        self.peak_live = list(self.live.values())
        self.peak_dirty = False

    def end(self):
        if self.peak_dirty:
            self.peak_live = list(self.live.values())
            self.peak_dirty = False
        self.phase = None
        self.tag(None, None)
        return self.peak_live

    def track(self, tensor, what):
        if not _is_meta(tensor):
            return None
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None
        key = id(storage)
        record = self.live.get(key)
        if record is not None:
            return record
        nbytes = storage.nbytes()
        if nbytes == 0:
            return None
        size = round_size(nbytes)
        logits = tensor.dim() >= 2 and tensor.shape[-1] == self.vocab
        record = _Record(self.count, size, self.allocator.malloc(size), self.phase, logits, what)
        record.requested = nbytes
        if self.history is not None:
            record.frames = self.history.frames()
            self.history.add("alloc", record.address, nbytes, record.frames)
        self.count += 1
        record.ref = weakref.ref(storage, lambda _r, key=key: self._freed(key))
        self.live[key] = record
        self.allocated += size
        if logits:
            self.logits += size
            self.logits_peak = max(self.logits_peak, self.logits)
        if self.allocated > self.peak:
            self.peak = self.allocated
            self.peak_dirty = True
        if self.allocator.reserved > self.reserved_peak:
            self.reserved_peak = self.allocator.reserved
        if self.by_op is not None:
            self.by_op.append(record)
        return record

    def _freed(self, key):
        record = self.live.get(key)
        if record is None:
            return
        if self.peak_dirty:
            # The first free after a new peak: what is live now is what was live then.
            self.peak_live = list(self.live.values())
            self.peak_dirty = False
        del self.live[key]
        self.allocated -= record.bytes
        if record.logits:
            self.logits -= record.bytes
        if self.history is not None:
            self.history.add("free_completed", record.address, record.requested)
        self.allocator.release(record.address)

    def push_scope(self, name):
        self.scopes.append(name)
        self.tag(self.phase, self.step)

    def pop_scope(self):
        if self.scopes:
            self.scopes.pop()
        self.tag(self.phase, self.step)

    def snapshot(self):
        """The trace as ``torch.cuda.memory._snapshot()`` shapes it."""
        requested = {r.address: (r.requested, r.frames or []) for r in self.live.values()}
        return {
            "segments": self.allocator.segments(requested),
            "device_traces": [list(self.history.entries)],
        }

    def record_of(self, tensor):
        if tensor is None or not _is_meta(tensor):
            return None
        return self.live.get(id(tensor.untyped_storage()))


def _is_meta(t):
    import torch

    return isinstance(t, torch.Tensor) and t.device.type == "meta"


_HOST_OUTPUTS = {
    "_scaled_dot_product_flash_attention": (6, 7),
    "_scaled_dot_product_efficient_attention": (2, 3),
}


def _dispatch_mode(tracker):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    scalar = torch.ops.aten._local_scalar_dense.default

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is scalar and _is_meta(args[0]):
                # A data-dependent check (`.item()`, `if t.all():`) on a meta tensor
                # has no value to read. transformers asks such questions of the
                # inputs only ("no packed sequences?", "no padding?"); a batch of
                # whole, unpadded sequences answers yes.
                _NOTES.add(
                    "data-dependent checks answered as for whole, unpadded sequences"
                )
                t = args[0]
                if t.dtype == torch.bool:
                    return True
                return 0.0 if t.dtype.is_floating_point else 0
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            leaves = tree_leaves(out)
            # The fused kernels' RNG seed and offset (outputs 6, 7 of flash, 2, 3 of
            # memory-efficient) are CPU tensors on CUDA when there is no dropout
            # (flash_api.cpp `mha_fwd`): nothing on the device.
            skip = _HOST_OUTPUTS.get(name, ())
            for i, t in enumerate(leaves):
                if isinstance(t, torch.Tensor) and i not in skip:
                    tracker.track(t, name)
            return out

    return Watch()


# ---------------------------------------------------------------------------------------
# Attention kernels on meta tensors.


def _attention_functions(torch, kind):
    """The attention function registered with transformers for ``kind``.

    On a GPU, flash and memory-efficient attention are single fused operators that keep
    only the output and a log-sum-exp for the backward; PyTorch's ``meta`` kernels of
    those operators (``aten::_scaled_dot_product_flash_attention`` and
    ``_efficient_attention``, forward and backward) return tensors of exactly those
    shapes. ``flash`` follows transformers' ``flash_attention_2`` (FlashAttention-2
    takes grouped-query K/V as they are); ``efficient`` repeats K/V to every query head
    first, as PyTorch's memory-efficient kernel needs.
    """
    aten = torch.ops.aten

    def repeat_kv(x, n_rep):
        if n_rep == 1:
            return x
        b, h, s, d = x.shape
        return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        if attention_mask is not None:
            raise RuntimeError("an attention mask reached the fused kernel (padding is not traced)")
        causal = bool(getattr(module, "is_causal", True)) and query.shape[2] > 1
        sliding = kwargs.get("sliding_window")
        if sliding is not None and sliding < key.shape[2]:
            _NOTES.add(
                "sliding-window layers traced with full causal attention: the fused kernels' "
                "memory does not depend on the window"
            )
        if kind == "flash":
            # FlashAttention-2 needs one head size for Q, K and V: where the values
            # are narrower (DeepSeek-V2's MLA: 192 against 128) transformers pads them
            # with zeros and cuts the output back (modeling_deepseek_v2.py).
            v_dim = value.shape[-1]
            if v_dim != query.shape[-1]:
                value = torch.nn.functional.pad(value, [0, query.shape[-1] - v_dim])
            out = aten._scaled_dot_product_flash_attention(
                query, key, value, dropout, causal, False, scale=scaling
            )[0]
            if out.shape[-1] != v_dim:
                out = out[..., :v_dim]
        else:
            n_rep = query.shape[1] // key.shape[1]
            key, value = repeat_kv(key, n_rep), repeat_kv(value, n_rep)
            out = aten._scaled_dot_product_efficient_attention(
                query, key, value, None, torch.is_grad_enabled(), dropout, causal, scale=scaling
            )[0]
        return out.transpose(1, 2), None

    return attention


def _patch_sdpa(torch):
    """Runs ``torch.nn.functional.scaled_dot_product_attention`` as CUDA would choose.

    On meta tensors PyTorch's backend choice falls back to the math kernel, which
    materialises the score matrix; on a GPU with 16-bit inputs, no mask and a head
    dimension up to 256 it picks FlashAttention (grouped K/V allowed through
    ``enable_gqa``), otherwise the memory-efficient kernel (sdp_utils.cpp,
    ``select_sdp_backend``).
    """
    aten = torch.ops.aten
    original = torch.nn.functional.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if not _is_meta(query):
            return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        # sdp_utils.cpp check_head_dim_size_flash: one head size for Q, K and V.
        flash = (
            attn_mask is None
            and query.dtype in (torch.float16, torch.bfloat16)
            and query.shape[-1] <= 256
            and query.shape[-1] % 8 == 0
            and key.shape[-1] == query.shape[-1] == value.shape[-1]
        )
        if flash:
            return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False, scale=scale)[0]
        if enable_gqa and key.shape[1] != query.shape[1]:
            n_rep = query.shape[1] // key.shape[1]
            key = key.repeat_interleave(n_rep, dim=1)
            value = value.repeat_interleave(n_rep, dim=1)
        return aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, torch.is_grad_enabled(), dropout_p, is_causal, scale=scale
        )[0]

    torch.nn.functional.scaled_dot_product_attention = sdpa


_NOTES = set()


# ---------------------------------------------------------------------------------------
# NF4 (QLoRA) and 8-bit AdamW stand-ins with bitsandbytes' memory layout.


def _nf4_linear_class(torch):
    """An ``nn.Linear`` whose weight is stored as bitsandbytes' NF4 (QLoRA).

    bitsandbytes ``Params4bit`` keeps the packed values (two per byte) and a
    ``QuantState``: one absmax per block of 64 values (fp32, or uint8 with double
    quantisation, which adds an fp32 absmax per 256 blocks and a 256-entry fp32 code)
    and the 16-entry fp32 NF4 code. ``MatMul4Bit`` dequantises the weight to the
    input's dtype for the matmul (a transient of out × in values) and again in the
    backward for the input's gradient; it keeps no activation of its own
    (bitsandbytes/autograd/_functions.py, ``MatMul4Bit``).
    """
    nn = torch.nn

    class _MatMul4Bit(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, packed, out_features, in_features):
            weight = torch.empty((out_features, in_features), dtype=x.dtype, device=x.device)
            ctx.shape = (out_features, in_features)
            ctx.save_for_backward(packed)
            return torch.nn.functional.linear(x, weight)

        @staticmethod
        def backward(ctx, grad):
            weight = torch.empty(ctx.shape, dtype=grad.dtype, device=grad.device)
            return grad @ weight, None, None, None

    class Nf4Linear(nn.Linear):
        def __init__(self, linear, double_quant):
            nn.Module.__init__(self)
            self.in_features = linear.in_features
            self.out_features = linear.out_features
            n = self.in_features * self.out_features
            blocks = (n + 63) // 64
            dev = linear.weight.device
            self.weight = nn.Parameter(torch.empty((n + 1) // 2, 1, dtype=torch.uint8, device=dev), requires_grad=False)
            self.bias = linear.bias
            self.register_buffer("code", torch.empty(16, dtype=torch.float32, device=dev))
            if double_quant:
                self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8, device=dev))
                self.register_buffer("nested_absmax", torch.empty((blocks + 255) // 256, dtype=torch.float32, device=dev))
                self.register_buffer("nested_code", torch.empty(256, dtype=torch.float32, device=dev))
            else:
                self.register_buffer("absmax", torch.empty(blocks, dtype=torch.float32, device=dev))

        def forward(self, x):
            out = _MatMul4Bit.apply(x, self.weight, self.out_features, self.in_features)
            if self.bias is not None:
                out = out + self.bias
            return out

    return Nf4Linear


def _quantise_nf4(torch, model, double_quant):
    """Replaces every linear layer of the decoder blocks (not lm_head) by an NF4 one,
    as ``BitsAndBytesConfig(load_in_4bit=True)`` does (lm_head is skipped by default)."""
    cls = _nf4_linear_class(torch)
    head = model.get_output_embeddings()
    targets = []
    for name, module in model.named_modules():
        for child_name, child in module.named_children():
            if type(child) is torch.nn.Linear and child is not head:
                targets.append((module, child_name, child))
    for parent, child_name, child in targets:
        setattr(parent, child_name, cls(child, double_quant))
    return len(targets)


def _adamw_fused_class(torch):
    """``torch.optim.AdamW(fused=True)`` as memory sees it: the same two states as the
    parameter, updated in place by one CUDA kernel that allocates nothing at the step
    (the fused kernel itself runs on CUDA tensors only, so the trace stands in for it;
    the values on the meta device are never read)."""

    class AdamWFused(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {})

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg"].lerp_(p.grad, 0.1)
                    state["exp_avg_sq"].mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
                    p.addcdiv_(state["exp_avg"], state["exp_avg_sq"], value=-1e-5)

    return AdamWFused


def _adamw8bit_class(torch):
    """bitsandbytes ``AdamW8bit``'s state: two uint8 states plus one fp32 absmax per
    block of 256 values each (blockwise quantisation); tensors under 4096 values keep
    fp32 states (``min_8bit_size``). The CUDA kernel updates in place: no temporaries
    (bitsandbytes/optim/optimizer.py, ``Optimizer8bit.init_state``)."""

    class AdamW8bit(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {})

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        if p.numel() < 4096:
                            state["state1"] = torch.zeros_like(p, dtype=torch.float32)
                            state["state2"] = torch.zeros_like(p, dtype=torch.float32)
                        else:
                            blocks = (p.numel() + 255) // 256
                            state["state1"] = torch.zeros_like(p, dtype=torch.uint8)
                            state["state2"] = torch.zeros_like(p, dtype=torch.uint8)
                            state["absmax1"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                            state["absmax2"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)

    return AdamW8bit


# ---------------------------------------------------------------------------------------
# The trace.


class Unavailable(Exception):
    """A package the trace needs is missing or too old."""


def _import(name):
    try:
        return __import__(name)
    except ImportError as e:
        raise Unavailable(f"{name} is not importable by {sys.executable} ({e})") from e


DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


def _build(torch, transformers, w):
    config_dict = dict(w["config"])
    model_type = config_dict.pop("model_type", None)
    if not model_type:
        raise ValueError("config.json has no model_type")
    # A quantised checkpoint's settings are for loading weights; the trace builds the
    # model's computation in the workload's dtype (QLoRA's NF4 is applied below).
    config_dict.pop("quantization_config", None)
    try:
        config = transformers.AutoConfig.for_model(model_type, **config_dict)
    except (ValueError, KeyError) as e:
        raise Unavailable(
            f"transformers {transformers.__version__} does not know model_type {model_type!r} ({e})"
        ) from e
    dtype = getattr(torch, DTYPES[w["dtype"]])
    attention = w["attention"]
    if attention in ("flash", "efficient"):
        # (A name with "flash" in it would send transformers looking for a flash-attn
        # package.)
        impl = {"flash": "gpumem_fa2", "efficient": "gpumem_mem_efficient"}[attention]
        transformers.AttentionInterface.register(impl, _attention_functions(torch, attention))
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

        ALL_MASK_ATTENTION_FUNCTIONS.register(impl, ALL_MASK_ATTENTION_FUNCTIONS["flash_attention_2"])
    elif attention == "sdpa":
        impl = "sdpa"
        _patch_sdpa(torch)
    else:
        impl = "eager"
    if getattr(config, "use_cache", None) is not None and w["train"] != "none":
        config.use_cache = False
    try:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(
                config, dtype=dtype, attn_implementation=impl
            )
    except KeyError:
        # Falcon and a few others pick their attention class from a table of their own.
        model = None
    if impl.startswith("gpumem_") and not getattr(model, "_supports_attention_backend", False):
        # A family with attention code of its own (no AttentionInterface): run its
        # SDPA path, with SDPA mapped to the fused kernel CUDA would pick.
        _NOTES.add(
            f"{model_type} has its own attention code: traced through its SDPA path, "
            "with the kernel CUDA would choose"
        )
        _patch_sdpa(torch)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(
                config, dtype=dtype, attn_implementation="sdpa"
            )
    return model, config


def _lora(torch, model, w):
    peft = _import("peft")
    targets = w["lora_targets"]
    config = peft.LoraConfig(
        r=w["lora_rank"],
        lora_alpha=2 * w["lora_rank"],
        lora_dropout=0.0,
        target_modules="all-linear" if targets == ["all"] else targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    # The adapters on the meta device too: built elsewhere, each would be a real
    # in_features × rank matrix on the CPU before peft moves it beside its base layer.
    with torch.device("meta"):
        model = peft.get_peft_model(model, config)
    return model, peft.__version__


def _parameter_storages(model):
    seen = {}
    for t in list(model.parameters()) + list(model.buffers()):
        seen.setdefault(id(t.untyped_storage()), t)
    return list(seen.values())


def _categorise(records, sets, activations):
    out = dict.fromkeys(CATEGORIES, 0)
    for r in records:
        i = r.index
        if i in sets["parameters"]:
            c = "parameters"
        elif i in sets["master_weights"]:
            c = "master_weights"
        elif i in sets["optimizer_state"]:
            c = "optimizer_state"
        elif i in sets["gradients"]:
            c = "gradients"
        elif i in sets["kv_cache"]:
            c = "kv_cache"
        elif r.logits:
            c = "logits"
        elif i in activations:
            c = "activations"
        else:
            c = "temporaries"
        out[c] += r.bytes
    return out


def trace(w):
    started = time.perf_counter()
    torch = _import("torch")
    transformers = _import("transformers")
    if not hasattr(transformers, "AttentionInterface"):
        raise Unavailable(f"transformers {transformers.__version__} is too old (AttentionInterface is missing)")
    versions = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    model, config = _build(torch, transformers, w)
    train = w["train"]
    nf4_layers = 0
    if train == "qlora":
        nf4_layers = _quantise_nf4(torch, model, w.get("double_quant", True))
    if train in ("lora", "qlora"):
        model, versions["peft"] = _lora(torch, model, w)
    vocab = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else config.vocab_size
    parameters = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    trainable = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values() if p.requires_grad)
    if train == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        trainable = parameters

    allocator = Allocator(w.get("expandable_segments", False))
    tracker = Tracker(allocator, vocab)
    history_request = w.get("memory_history")
    if history_request:
        tracker.history = allocator.history = History(int(history_request.get("max_entries", 200000)))
        _scope_hooks(model, tracker)
    sets = {k: set() for k in ("parameters", "master_weights", "gradients", "optimizer_state", "kv_cache")}
    phases = []
    activations = set()

    def close(name, step):
        live = tracker.end()
        phase = {
            "name": name,
            "step": step,
            "allocated_start_bytes": tracker.start,
            "allocated_end_bytes": tracker.allocated,
            "allocated_peak_bytes": tracker.peak,
            "reserved_end_bytes": allocator.reserved,
            "reserved_peak_bytes": tracker.reserved_peak,
            "logits_peak_bytes": tracker.logits_peak,
            "_live": live,
        }
        phases.append(phase)
        return phase

    # model_load: every parameter and buffer on the device, one allocation each (tied
    # weights share one storage).
    tracker.begin("model_load")
    for t in _parameter_storages(model):
        r = tracker.track(t, "parameter")
        if r is not None:
            sets["parameters"].add(r.index)
    masters = []
    b, s = w["sequences"], w["context"]
    mode = _dispatch_mode(tracker)
    with mode:
        if train == "full" and w["master_weights"] and w["dtype"] != "float32":
            # Mixed precision as the estimator counts it: 16-bit weights and gradients,
            # an fp32 master copy that the optimizer updates (Megatron-LM, DeepSpeed).
            for p in model.parameters():
                m = _master_weight(torch, p)
                masters.append((p, m))
                sets["master_weights"].add(tracker.record_of(m).index)
        ids = torch.zeros((b, s), dtype=torch.long, device="meta")
    close("model_load", None)

    if train != "none":
        model.train()
        if w["checkpointing"]:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if train in ("lora", "qlora"):
                model.enable_input_require_grads()
        opt_params = [m for _, m in masters] if masters else [p for p in model.parameters() if p.requires_grad]
        optimizer = _optimizer(torch, w["optimizer"], opt_params)
        by_op = None
        for step in (0, 1):
            if optimizer is not None:
                optimizer.zero_grad(set_to_none=True)
            for p in model.parameters():
                p.grad = None
            with mode:
                tracker.begin("forward", step)
                if step == 1:
                    tracker.by_op = by_op = []
                loss = model(input_ids=ids, labels=ids).loss
                tracker.by_op = None
                live_end = set(r.index for r in tracker.live.values() if r.phase == "forward")
                activations.clear()
                activations.update(live_end)
                close("forward", step)
                tracker.begin("backward", step)
                loss.backward()
                del loss
                for p in model.parameters():
                    r = tracker.record_of(p.grad)
                    if r is not None:
                        sets["gradients"].add(r.index)
                close("backward", step)
                tracker.begin("optimizer_step", step)
                if masters:
                    for p, m in masters:
                        if p.grad is not None:
                            m.grad = p.grad.to(torch.float32)
                if optimizer is not None:
                    optimizer.step()
                    for st in optimizer.state.values():
                        for v in st.values():
                            r = tracker.record_of(v) if _is_meta(v) else None
                            if r is not None:
                                sets["optimizer_state"].add(r.index)
                if masters:
                    for p, m in masters:
                        p.data.copy_(m.data)
                        m.grad = None
                close("optimizer_step", step)
            # Categorise each phase's peak with what the step has shown.
            for ph in phases[-3:]:
                ph["at_peak"] = _categorise(ph.pop("_live"), sets, activations if ph["name"] != "optimizer_step" else set())
        saved = _saved_by_op(by_op, activations)
    else:
        model.eval()
        saved = None
        generate = max(w.get("generate", 0), 1)
        keep_all = w.get("logits") == "all"
        with torch.no_grad(), mode:
            tracker.begin("prefill", 0)
            out = model(input_ids=ids, use_cache=True, logits_to_keep=0 if keep_all else 1)
            cache = out.past_key_values
            # generate(): the next token's scores are an fp32 copy of the last logits.
            scores = out.logits[:, -1, :].to(dtype=torch.float32, copy=True)
            token = scores.argmax(dim=-1, keepdim=True)
            del out, scores
            _mark_cache(tracker, cache, sets)
            close("prefill", None)
            tracker.begin("decode", 0)
            for _ in range(generate - 1):
                out = model(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache = out.past_key_values
                # A dynamic cache grows by concatenation: each step's tensors are new.
                _mark_cache(tracker, cache, sets)
                scores = out.logits[:, -1, :].to(dtype=torch.float32, copy=True)
                token = scores.argmax(dim=-1, keepdim=True)
                del out, scores
            _mark_cache(tracker, cache, sets)
            close("decode", None)
        for ph in phases:
            if "_live" in ph:
                ph["at_peak"] = _categorise(ph.pop("_live"), sets, set())
    for ph in phases:
        if "_live" in ph:
            ph["at_peak"] = _categorise(ph.pop("_live"), sets, set())

    doc = {
        "schema": SCHEMA,
        "model_type": config.model_type,
        "parameters": parameters,
        "trainable_parameters": trainable if train != "none" else 0,
        "vocab": vocab,
        "phases": phases,
        "versions": versions,
        "expandable_segments": allocator.expandable,
        "notes": sorted(_NOTES),
        "wall_time_ms": int((time.perf_counter() - started) * 1000),
    }
    if nf4_layers:
        doc["notes"].append(f"{nf4_layers} linear layers stored as NF4 (bitsandbytes layout)")
    if saved is not None:
        doc["activations_by_op"] = saved
    if tracker.history is not None:
        _write_history(tracker, history_request, doc, torch, vocab)
    return doc


def _master_weight(torch, p):
    """The fp32 master copy of a 16-bit parameter (its own function: the history's
    frames name it)."""
    return p.detach().to(torch.float32).requires_grad_(True)


def _scope_hooks(model, tracker):
    """Names each allocation's module: every child of an ``nn.ModuleList`` (the
    decoder layers) pushes its path on entry and pops it on exit (recomputation under
    checkpointing re-enters it in the backward)."""
    import torch

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList):
            for child_name, child in module.named_children():
                path = "%s.%s" % (name, child_name) if name else child_name
                child.register_forward_pre_hook(lambda _m, _a, path=path: tracker.push_scope(path))
                child.register_forward_hook(lambda _m, _a, _o: tracker.pop_scope(), always_call=True)


def _write_history(tracker, request, doc, torch, vocab):
    """The snapshot pickled where the agent asked (a new file in its private folder),
    and its history document in the trace."""
    import os
    import pickle

    import gpumem_history

    snap = tracker.snapshot()
    path = request.get("pickle_path")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            pickle.dump(snap, f)
    doc["history"] = gpumem_history.from_snapshot(
        snap,
        source="meta",
        vocab=vocab,
        torch_version=torch.__version__,
        max_events=int(request.get("max_entries", gpumem_history.MAX_EVENTS)),
    )
    if tracker.history.total > len(tracker.history.entries):
        doc["history"]["dropped_events"] += tracker.history.total - len(tracker.history.entries)


def _optimizer(torch, name, params):
    if name == "none" or not params:
        return None
    # foreach=True: what PyTorch picks by default on CUDA tensors (meta tensors would
    # otherwise get the per-tensor loop, whose temporaries differ).
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-5, foreach=True)
    if name == "adamw-fused":
        return _adamw_fused_class(torch)(params)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-5, momentum=0.9, foreach=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-5, foreach=True)
    if name == "adamw8bit":
        return _adamw8bit_class(torch)(params)
    raise ValueError(f"unknown optimizer {name!r}")


def _mark_cache(tracker, cache, sets):
    """Marks the storages the cache object holds as KV cache. Iterative on purpose: a
    recursive closure would be a reference cycle keeping the tensors it saw alive until
    the garbage collector runs, and the trace would count them as live."""
    import torch

    stack = [(cache, 0)]
    while stack:
        x, depth = stack.pop()
        if isinstance(x, torch.Tensor):
            r = tracker.record_of(x)
            if r is not None:
                sets["kv_cache"].add(r.index)
        elif depth < 4 and isinstance(x, (list, tuple)):
            stack.extend((y, depth + 1) for y in x)
        elif depth < 4 and hasattr(x, "__dict__") and not isinstance(x, type):
            stack.extend((y, depth + 1) for y in vars(x).values())


def _saved_by_op(records, activations):
    """What the forward of the last step kept for the backward, by producing operator,
    largest first (the tensor-by-tensor explanation of the activations line)."""
    if records is None:
        return None
    groups = {}
    for r in records:
        if r.index not in activations or r.logits:
            continue
        g = groups.setdefault(r.what, [0, 0])
        g[0] += 1
        g[1] += r.bytes
    rows = [{"op": k, "tensors": v[0], "bytes": v[1]} for k, v in groups.items()]
    rows.sort(key=lambda x: (-x["bytes"], x["op"]))
    return rows


def _watchdog(deadline_s, parent_pid):
    """Ends this process at its deadline, or as soon as the agent that started it is
    gone (re-parented: its parent pid changes), whatever the trace is doing: a probe
    never outlives its agent, even where the kernel's parent-death signal is missing."""
    import os
    import threading

    started = time.monotonic()

    def watch():
        while True:
            time.sleep(0.25)
            if deadline_s is not None and time.monotonic() - started > deadline_s:
                os._exit(124)
            if parent_pid is not None and os.getppid() != parent_pid:
                os._exit(125)

    threading.Thread(target=watch, name="gpumem-watchdog", daemon=True).start()


def main():
    try:
        workload = json.loads(sys.stdin.read(MAX_REQUEST_CHARS))
        _watchdog(workload.get("deadline_s"), workload.get("parent_pid"))
        result = {"ok": trace(workload)}
    except Unavailable as e:
        result = {"unavailable": str(e)}
    except Exception as e:  # noqa: BLE001 - every failure is reported, none raised
        result = {"error": f"{type(e).__name__}: {e}"}
    sys.stdout.write(json.dumps(result))
    sys.stdout.write("\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
