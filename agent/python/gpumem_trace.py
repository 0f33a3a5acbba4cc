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

import contextlib
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
    "collectives",
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
    __slots__ = ("index", "bytes", "address", "phase", "logits", "ref", "what", "requested", "frames", "collective")

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
        self.collective = None


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
        # When tracing a rank: a callable naming the data-parallel framework's buffer
        # an allocation is (`all_gather`, `reduce_scatter`, `buckets`), or None for the
        # model's own; and the live bytes of each kind, with their peak in the phase.
        self.framework_site = None
        self.kind_live = {}
        self.kind_peak = {}

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
        self.kind_peak = dict(self.kind_live)
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
        tensor = _local(tensor)
        if not _is_meta(tensor):
            return None
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None
        record = self.live.get(id(storage))
        if record is not None:
            return record
        logits = tensor.dim() >= 2 and tensor.shape[-1] == self.vocab
        return self._allocate(storage, logits, what)

    def resized(self, storage):
        """A storage resized in place (FSDP2 frees and re-allocates its all-gather
        outputs with ``untyped_storage().resize_``, ``alloc_storage`` / ``free_storage``
        in ``_fsdp_param.py``): the old block is freed, a new one allocated."""
        key = id(storage)
        if key in self.live:
            self._freed(key)
        if storage.device.type == "meta" and storage.nbytes() > 0:
            self._allocate(storage, False, "resize_")

    def _allocate(self, storage, logits, what):
        key = id(storage)
        nbytes = storage.nbytes()
        if nbytes == 0:
            return None
        size = round_size(nbytes)
        record = _Record(self.count, size, self.allocator.malloc(size), self.phase, logits, what)
        record.requested = nbytes
        if self.framework_site is not None:
            self._kind(record, self.framework_site())
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
        if record.collective is not None:
            self.kind_live[record.collective] -= record.bytes
        if self.history is not None:
            self.history.add("free_completed", record.address, record.requested)
        self.allocator.release(record.address)

    def _kind(self, record, kind):
        """Moves a record's bytes to the framework buffer ``kind`` (None: the model's)."""
        old = record.collective
        if old == kind:
            return
        if old is not None:
            self.kind_live[old] -= record.bytes
        record.collective = kind
        if kind is not None:
            live = self.kind_live.get(kind, 0) + record.bytes
            self.kind_live[kind] = live
            self.kind_peak[kind] = max(self.kind_peak.get(kind, 0), live)

    def reclassify(self, tensor, kind):
        """Names a live tensor one of the framework's buffers (FSDP2's unsharded
        gradients once its reduce-scatter takes them)."""
        record = self.record_of(tensor)
        if record is not None:
            self._kind(record, kind)

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
        tensor = _local(tensor)
        if tensor is None or not _is_meta(tensor):
            return None
        return self.live.get(id(tensor.untyped_storage()))


def _is_meta(t):
    import torch

    return isinstance(t, torch.Tensor) and t.device.type == "meta"


def _local(t):
    """A DTensor's local shard (what its rank's memory holds), else ``t``."""
    local = getattr(t, "_local_tensor", None)
    return t if local is None else local


_HOST_OUTPUTS = {
    "_scaled_dot_product_flash_attention": (6, 7),
    "_scaled_dot_product_efficient_attention": (2, 3),
}


# DeepSpeed's checks for inf / NaN gradients before its optimizer step (file, function):
# deepspeed/runtime/utils.py, deepspeed/runtime/zero/stage_1_and_2.py and stage3.py,
# 0.19.8.
_FINITE_CHECKS = (
    ("deepspeed/runtime/utils.py", "is_invalid_grad_norm"),
    ("deepspeed/runtime/utils.py", "has_overflow"),
    ("deepspeed/runtime/zero/stage_1_and_2.py", "has_overflow"),
    ("deepspeed/runtime/zero/stage3.py", "has_overflow"),
)


def _asks_finite_gradients():
    """Whether the scalar being read is DeepSpeed asking whether its gradients are
    finite (a caller among ``_FINITE_CHECKS``)."""
    import os

    f = sys._getframe(2)
    depth = 0
    while f is not None and depth < 16:
        name = f.f_code.co_filename.replace(os.sep, "/")
        if any(name.endswith(path) and f.f_code.co_name == fn for path, fn in _FINITE_CHECKS):
            return True
        f = f.f_back
        depth += 1
    return False


def _is_meta_device(device):
    import torch

    return device is not None and torch.device(device).type == "meta"


def _asked_for_meta_by_name():
    """Whether the code that asked for this allocation names the meta device itself
    (``device="meta"`` in its source line): DeepSpeed's bookkeeping of shapes, which
    is a meta tensor on a GPU too, as against the device DeepSpeed's accelerator
    names (``get_accelerator().current_device_name()``), meta only in this trace."""
    import linecache
    import os

    f = sys._getframe(2)
    depth = 0
    while f is not None and depth < 64:
        name = f.f_code.co_filename.replace(os.sep, "/")
        if name != __file__ and not any(p in name for p in _PLUMBING[1:]):
            if "/deepspeed/" not in name:
                return False
            line = linecache.getline(f.f_code.co_filename, f.f_lineno)
            return 'device="meta"' in line or "device='meta'" in line
        f = f.f_back
        depth += 1
    return False


def _dispatch_mode(tracker, compiled=False):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    scalar = torch.ops.aten._local_scalar_dense.default

    class Watch(TorchDispatchMode):
        @classmethod
        def ignore_compile_internals(cls):
            # Under torch.compile the mode is off while Dynamo and AOTAutograd trace
            # and on again while the compiled graphs run (torch 2.11
            # utils/_python_dispatch.py, `TorchDispatchMode.ignore_compile_internals`):
            # it sees the partitioned graphs' operators, as a GPU runs them.
            return compiled

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is scalar and _is_meta(args[0]):
                t = args[0]
                if _asks_finite_gradients():
                    # DeepSpeed's question "is a gradient (or their norm) inf or
                    # NaN?" before its step (`has_overflow`, `is_invalid_grad_norm`):
                    # a meta tensor has no values; the answer a healthy step gets,
                    # "finite", so the step is taken as on every step that counts.
                    _NOTES.add("DeepSpeed's overflow and gradient-norm checks answered as for finite gradients")
                    return False if t.dtype == torch.bool else (0.0 if t.dtype.is_floating_point else 0)
                # A data-dependent check (`.item()`, `if t.all():`) on a meta tensor
                # has no value to read. transformers asks such questions of the
                # inputs only ("no packed sequences?", "no padding?"); a batch of
                # whole, unpadded sequences answers yes.
                _NOTES.add(
                    "data-dependent checks answered as for whole, unpadded sequences"
                )
                if t.dtype == torch.bool:
                    return True
                return 0.0 if t.dtype.is_floating_point else 0
            out = func(*args, **(kwargs or {}))
            if kwargs and _is_meta_device(kwargs.get("device")) and _asked_for_meta_by_name():
                # A framework's own meta tensor (DeepSpeed keeps its parameters'
                # shapes as `torch.zeros_like(p, device="meta")`, stage_1_and_2.py):
                # on the meta device on every machine, it holds no memory there.
                return out
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
        if kind == "flash" and query.dtype == torch.float32:
            # fp32 q, k, v (PEFT's prepare_model_for_kbit_training leaves the embeddings
            # and norms in fp32) are cast to a dtype flash-attn runs, as transformers'
            # `flash_attention_forward` does (`get_target_dtype`, then
            # `fa_peft_integration_check`: the autocast dtype, a quantised model's
            # `config.dtype`, or the first linear's weight dtype; transformers 5.23
            # integrations/flash_attention.py, modeling_flash_attention_utils.py).
            if _autocast_enabled():
                target = torch.get_autocast_dtype("cpu")
            elif hasattr(module.config, "_is_quantized"):
                target = module.config.dtype
            else:
                target = next(m for m in module.modules() if isinstance(m, torch.nn.Linear)).weight.dtype
            query, key, value = query.to(target), key.to(target), value.to(target)
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


def _patch_grouped_mm(torch):
    """Gives ``aten._grouped_mm`` on meta tensors the dtypes CUDA takes.

    torch 2.11's meta kernel (``torch/_meta_registrations.py``,
    ``_meta_grouped_mm_common``) accepts bf16 operands only, while CUDA's
    ``_grouped_mm_cuda`` validates fp32, bf16 and fp16
    (``aten/src/ATen/native/GroupedMMUtils.h``, ``_grouped_mm_validate_inputs``) and
    runs any but bf16 through ``_grouped_mm_fallback``, a loop of ``mm`` over the
    groups, into an output of the operands' dtype laid out as the bf16 one (rows padded
    to 16 bytes). A QLoRA base prepared by PEFT casts an MoE's stacked experts to fp32,
    so its experts run that path. The autograd formula (``derivatives.yaml``) is the
    same whatever the kernel, so what the backward keeps is unchanged."""
    meta = torch._meta_registrations
    original = meta._meta_grouped_mm_common

    def common(mat_a, mat_b, scale_a, scale_b, offs=None, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
        if (
            scale_a is None
            and scale_b is None
            and mat_a.dtype == mat_b.dtype
            and mat_a.dtype in (torch.float32, torch.float16)
            and out_dtype in (None, mat_a.dtype)
        ):
            torch._check(mat_a.dim() in [2, 3] and mat_b.dim() in [2, 3], lambda: "mat_a and mat_b have to be 2 or 3d")
            if mat_a.dim() == 3 or mat_b.dim() == 3:
                torch._check(mat_a.size(-1) == mat_b.size(-2), lambda: "contraction dimension of mat_a and mat_b must match")
            return meta._create_grouped_mm_output_tensor(mat_a, mat_b, offs, mat_a.dtype)
        return original(mat_a, mat_b, scale_a, scale_b, offs, bias, scale_result, out_dtype, use_fast_accum)

    meta._meta_grouped_mm_common = common


def _patch_meta_autocast(torch):
    """Reads ``torch.autocast(device_type="meta")`` as the CPU's autocast, the one the
    probe's stand-in follows (``_autocast_enabled``).

    PEFT's adapters on parameters (``target_parameters``, and ``all-linear`` over an
    MoE's stacked experts: ``ParamWrapper``) fold ``W + scaling · lhs @ rhs`` in
    ``_LoraFactorsProxy.forward`` under ``torch.autocast(device_type=W.device.type,
    enabled=False)`` (peft 0.21.2 ``peft/tuners/lora/layer.py``), which on CUDA turns the
    step's autocast off around the ``baddbmm``. torch refuses a meta device type
    (``get_autocast_dtype``: "unsupported scalarType"), so a meta trace could not run
    it; read as the CPU's, an autocast turned off is off for the stand-in too, and one
    turned on casts as it would."""
    cls = torch.amp.autocast_mode.autocast
    if getattr(cls, "_gpumem_meta", False):
        return
    original = cls.__init__

    def init(self, device_type, *args, **kwargs):
        original(self, "cpu" if device_type == "meta" else device_type, *args, **kwargs)

    cls.__init__ = init
    cls._gpumem_meta = True


def _patch_dropout(torch):
    """Runs ``torch.nn.functional.dropout`` on meta tensors as it runs on CUDA.

    ``aten::dropout`` calls the fused ``native_dropout`` where
    ``is_fused_kernel_acceptable`` holds (a CUDA tensor, 0 < p < 1: PyTorch
    aten/src/ATen/native/Dropout.cpp), whose backward keeps a boolean mask (1 byte a
    value); on any other device it multiplies by a noise tensor of the input's dtype,
    which the product keeps (2 bytes a value in 16 bits). The meta device takes that
    second path, so without this a trace would keep twice the mask a GPU keeps.
    """
    functional = torch.nn.functional
    if getattr(functional.dropout, "_gpumem", False):
        return
    original = functional.dropout

    def dropout(input, p=0.5, training=True, inplace=False):
        if _is_meta(input) and training and 0.0 < p < 1.0 and not inplace and input.numel() > 0:
            return torch.native_dropout(input, p, True)[0]
        return original(input, p, training, inplace)

    dropout._gpumem = True
    functional.dropout = dropout


_NOTES = set()


# ---------------------------------------------------------------------------------------
# Mixed-precision autocast on meta tensors.

# torch.autocast's cast policies, by the ATen operator each Python entry point reaches
# (PyTorch aten/src/ATen/autocast_mode.cpp and autocast_mode.h, `TORCH_LIBRARY_IMPL(aten,
# AutocastCUDA, m)` and `(aten, AutocastCPU, m)`, as of torch 2.11): `lower` casts every
# floating input to the autocast dtype, `fp32` to float32, `fp32_set_opt_dtype` passes
# `dtype=torch.float32` where the caller gave none and the first input is eligible,
# `promote` casts every floating input to the widest among them. The CUDA lists are what
# a GPU step runs under; the CPU lists are there to check the stand-in against the real
# CPU autocast (agent/python/tests/test_autocast_standin.py).
_AUTOCAST_LOWER = {
    "cuda": (
        "conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d "
        "convolution _convolution prelu addmm addmv addr matmul einsum mm mv linear addbmm "
        "baddbmm bmm chain_matmul linalg_multi_dot lstm_cell gru_cell rnn_tanh_cell "
        "rnn_relu_cell _scaled_dot_product_flash_attention scaled_dot_product_attention "
        "linalg_vecdot"
    ),
    "cpu": (
        "conv1d conv2d conv3d bmm mm linalg_vecdot baddbmm addmm addbmm linear _convolution "
        "matmul conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d prelu "
        "scaled_dot_product_attention"
    ),
}
_AUTOCAST_FP32 = {
    "cuda": (
        "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow "
        "softplus layer_norm native_layer_norm group_norm frobenius_norm nuclear_norm "
        "cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d "
        "hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss "
        "margin_ranking_loss multilabel_margin_loss soft_margin_loss triplet_margin_loss "
        "multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp"
    ),
    "cpu": (
        "avg_pool3d binary_cross_entropy grid_sampler polar prod quantile nanquantile stft "
        "cdist trace view_as_complex cholesky cholesky_inverse cholesky_solve inverse "
        "lu_solve orgqr ormqr pinverse max_pool3d max_unpool2d max_unpool3d "
        "adaptive_avg_pool3d reflection_pad1d reflection_pad2d replication_pad1d "
        "replication_pad2d replication_pad3d mse_loss cosine_embedding_loss nll_loss "
        "nll_loss2d hinge_embedding_loss poisson_nll_loss smooth_l1_loss cross_entropy_loss "
        "l1_loss huber_loss margin_ranking_loss soft_margin_loss triplet_margin_loss "
        "multi_margin_loss ctc_loss kl_div multilabel_margin_loss "
        "binary_cross_entropy_with_logits"
    ),
}
_AUTOCAST_FP32_OPT_DTYPE = {
    "cuda": "prod softmax log_softmax cumprod cumsum linalg_vector_norm linalg_matrix_norm sum",
    "cpu": "",
}
_AUTOCAST_PROMOTE = {
    "cuda": "addcdiv addcmul atan2 bilinear cross dot grid_sampler index_put tensordot scatter_add",
    "cpu": "stack cat index_copy",
}
# Python entry points whose ATen operator has another name.
_ATEN_NAME = {
    "cross_entropy": "cross_entropy_loss",
    "multi_dot": "linalg_multi_dot",
    "vecdot": "linalg_vecdot",
    "vector_norm": "linalg_vector_norm",
    "matrix_norm": "linalg_matrix_norm",
    "__matmul__": "matmul",
    "__rmatmul__": "matmul",
    "__pow__": "pow",
    "__rpow__": "pow",
    "__ipow__": "pow_",
}


def _autocast_enabled():
    """Whether the step is in its autocast region: the stand-in follows the CPU autocast
    flag, which ``torch.autocast("cpu")`` sets and meta tensors ignore (they carry no
    autocast dispatch key), so that torch.utils.checkpoint, which re-enters the forward's
    CPU autocast state when it recomputes a layer, re-enters the stand-in's too."""
    import torch

    return torch.is_autocast_enabled("cpu")


class _AutocastStandIn:
    """``torch.autocast`` for meta tensors, which the real one does not cast (it
    dispatches on the tensors' autocast key, which meta tensors lack).

    A ``TorchFunctionMode`` that, while ``torch.autocast("cpu")`` is entered, applies
    autocast's cast policy (``policy``: ``cuda`` for what a GPU step runs, ``cpu`` to
    check against the CPU's) to the eligible inputs (floating meta tensors other than
    float64) of the operators in the lists above, as the ``Autocast`` dispatch key does:
    above autograd, so each cast is recorded (``ToCopyBackward``) and the operator saves
    the cast copy for its backward. A lower-precision cast of an fp32 leaf that requires
    a gradient (not a view) is cached while ``torch.is_autocast_cache_enabled()`` until
    the outermost autocast exits (``cached_cast`` in autocast_mode.cpp, cleared by
    ``torch.clear_autocast_cache`` in ``torch.autocast.__exit__``): each trainable fp32
    weight is cast once per autocast region and the copy kept while the cache or a saved
    tensor holds it."""

    def __init__(self, torch, policy="cuda"):
        from torch.overrides import TorchFunctionMode

        self.torch = torch
        lists = {}
        for kind, table in (
            ("lower", _AUTOCAST_LOWER),
            ("fp32", _AUTOCAST_FP32),
            ("fp32_set_opt_dtype", _AUTOCAST_FP32_OPT_DTYPE),
            ("promote", _AUTOCAST_PROMOTE),
        ):
            for name in table[policy].split():
                lists[name] = kind
        self.policy = lists
        self.cache = {}
        stand_in = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                return stand_in.call(func, args, kwargs or {})

        self.mode = Mode()

    def __enter__(self):
        """Installs the stand-in: from here each ``torch.autocast("cpu")`` entered (the
        harness's around the forward, and the one torch.utils.checkpoint enters to
        recompute a layer in the backward, where a mode pushed earlier is not active)
        pushes the mode for its region."""
        torch = self.torch
        self.saved = (torch.clear_autocast_cache, torch.autocast, torch.amp.autocast)
        clear, cache, mode = self.saved[0], self.cache, self.mode
        from torch.overrides import _get_current_function_mode_stack

        def clear_autocast_cache():
            clear()
            cache.clear()

        class autocast(torch.autocast):
            def __enter__(self):
                out = super().__enter__()
                self._gpumem_pushed = self.device == "cpu" and mode not in _get_current_function_mode_stack()
                if self._gpumem_pushed:
                    mode.__enter__()
                return out

            def __exit__(self, *exc):
                if getattr(self, "_gpumem_pushed", False):
                    mode.__exit__(*exc)
                return super().__exit__(*exc)

        torch.clear_autocast_cache = clear_autocast_cache
        torch.autocast = torch.amp.autocast = autocast
        return self

    def __exit__(self, *exc):
        torch = self.torch
        torch.clear_autocast_cache, torch.autocast, torch.amp.autocast = self.saved
        self.cache.clear()
        return False

    def _eligible(self, t):
        torch = self.torch
        return (
            isinstance(t, torch.Tensor)
            and t.device.type == "meta"
            and t.is_floating_point()
            and t.dtype != torch.float64
        )

    def _cast(self, t, dtype, lower):
        torch = self.torch
        if not self._eligible(t) or t.dtype == dtype:
            return t
        cache = (
            lower
            and t.dtype == torch.float32
            and t.requires_grad
            and t.is_leaf
            and not t._is_view()
            and torch.is_autocast_cache_enabled()
        )
        if cache:
            hit = self.cache.get(id(t))
            if hit is not None and hit[0] is t:
                return hit[1]
        out = t.to(dtype)
        if cache:
            self.cache[id(t)] = (t, out)
        return out

    def _map(self, x, f):
        if isinstance(x, (list, tuple)):
            return type(x)(f(y) for y in x)
        return f(x)

    def call(self, func, args, kwargs):
        torch = self.torch
        name = getattr(func, "__name__", "")
        kind = self.policy.get(_ATEN_NAME.get(name, name)) if _autocast_enabled() else None
        if kind is None:
            return func(*args, **kwargs)
        dtype = torch.get_autocast_dtype("cpu")
        if kind in ("lower", "fp32"):
            to = dtype if kind == "lower" else torch.float32

            def f(t):
                return self._cast(t, to, kind == "lower")

            args = tuple(self._map(a, f) for a in args)
            kwargs = {k: self._map(v, f) for k, v in kwargs.items()}
        elif kind == "fp32_set_opt_dtype":
            given = kwargs.get("dtype") is not None or any(isinstance(a, torch.dtype) for a in args)
            if args and self._eligible(args[0]) and not given:
                kwargs = dict(kwargs, dtype=torch.float32)
        else:
            found = [t for a in list(args) + list(kwargs.values()) for t in (a if isinstance(a, (list, tuple)) else [a]) if self._eligible(t)]
            if found:
                widest = found[0].dtype
                for t in found[1:]:
                    widest = torch.promote_types(widest, t.dtype)

                def f(t):
                    return self._cast(t, widest, False)

                args = tuple(self._map(a, f) for a in args)
                kwargs = {k: self._map(v, f) for k, v in kwargs.items()}
        return func(*args, **kwargs)


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

    ``Linear4bit.forward`` runs the matmul in its compute dtype: the input cast to it
    (``x.to(self.compute_dtype)``) and the output cast back to the input's dtype
    (``.to(inp_dtype)``), both no-ops for an input already in the compute dtype. The
    compute dtype is ``bnb_4bit_compute_dtype`` as transformers passes it
    (``integrations/bitsandbytes.py``), here the model's dtype: from bitsandbytes 0.47.0
    a given compute dtype is kept (``compute_type_is_set = compute_dtype is not
    None``); 0.46 and earlier switched to a first input in fp32 or bf16
    (``set_compute_type``). bitsandbytes 0.47.0 - 0.50.1 ``bitsandbytes/nn/modules.py``.
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
        _gpumem_nf4 = True

        def __init__(self, linear, double_quant):
            nn.Module.__init__(self)
            self.in_features = linear.in_features
            self.out_features = linear.out_features
            n = self.in_features * self.out_features
            blocks = (n + 63) // 64
            dev = linear.weight.device
            self.weight = nn.Parameter(torch.empty((n + 1) // 2, 1, dtype=torch.uint8, device=dev), requires_grad=False)
            self.bias = linear.bias
            self.compute_dtype = linear.weight.dtype
            self.register_buffer("code", torch.empty(16, dtype=torch.float32, device=dev))
            if double_quant:
                self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8, device=dev))
                self.register_buffer("nested_absmax", torch.empty((blocks + 255) // 256, dtype=torch.float32, device=dev))
                self.register_buffer("nested_code", torch.empty(256, dtype=torch.float32, device=dev))
            else:
                self.register_buffer("absmax", torch.empty(blocks, dtype=torch.float32, device=dev))

        def forward(self, x):
            inp_dtype = x.dtype
            x = x.to(self.compute_dtype)
            out = _MatMul4Bit.apply(x, self.weight, self.out_features, self.in_features)
            if self.bias is not None:
                out = out + self.bias.to(self.compute_dtype)
            return out.to(inp_dtype)

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


def _prepare_kbit(model):
    """PEFT's ``prepare_model_for_kbit_training`` over the NF4 stand-in: every frozen
    fp16/bf16 parameter that is not a 4-bit weight (the embeddings, the norms, the
    output projection) cast to fp32, as the QLoRA recipes run it (peft 0.21.2
    ``peft/utils/other.py``). Its checkpointing half (``gradient_checkpointing_enable``
    and ``enable_input_require_grads``) is the probe's own, under the workload's
    ``checkpointing``."""
    peft = _import("peft")
    peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    _NOTES.add("QLoRA prepared by peft's prepare_model_for_kbit_training (embeddings, norms and lm_head in fp32)")


def _qlora_layers(torch, model):
    """PEFT's LoRA over the NF4 stand-in as over bitsandbytes' ``Linear4bit``.

    The stand-in is an ``nn.Linear``, which PEFT wraps as ``lora.Linear``; a real QLoRA
    base is a ``bnb.nn.Linear4bit``, which PEFT wraps as ``lora.bnb.Linear4bit``
    (``dispatch_bnb_4bit``). Their forwards differ in what the adapters keep under
    autocast: ``lora.Linear`` always casts the input to the adapters' dtype, the bnb
    layer only outside autocast (``requires_conversion = not
    torch.is_autocast_enabled()``, CUDA's autocast, the one the Trainer enters; here the
    stand-in's), and it clones the base's output first. Each wrapped stand-in runs that
    forward (peft 0.21.2 ``peft/tuners/lora/bnb.py``, ``Linear4bit.forward``, the vanilla
    LoRA path the trace builds: no variants, no mixed adapter batches, not merged)."""
    from peft.tuners.lora import Linear as LoraLinear

    class Nf4LoraLinear(LoraLinear):
        def forward(self, x, *args, **kwargs):
            self._check_forward_args(x, *args, **kwargs)
            if self.disable_adapters or self.merged or kwargs.get("adapter_names") is not None:
                raise RuntimeError("the trace's QLoRA layer runs its adapters, unmerged")
            result = self.base_layer(x, *args, **kwargs)
            # "As per Tim Dettmers, for 4bit, we need to defensively clone here."
            result = result.clone()
            for active_adapter in self.active_adapters:
                if active_adapter not in self.lora_A.keys():
                    continue
                lora_A = self.lora_A[active_adapter]
                lora_B = self.lora_B[active_adapter]
                dropout = self.lora_dropout[active_adapter]
                scaling = self.scaling[active_adapter]
                requires_conversion = not _autocast_enabled()
                if requires_conversion:
                    expected_dtype = result.dtype
                    x = self._cast_input_dtype(x, lora_A.weight.dtype)
                output = lora_B(lora_A(dropout(x))) * scaling
                if requires_conversion:
                    output = output.to(expected_dtype)
                result = result + output
            return result

    n = 0
    for module in model.modules():
        if type(module) is LoraLinear and getattr(module.base_layer, "_gpumem_nf4", False):
            module.__class__ = Nf4LoraLinear
            n += 1
    return n


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


def _adamw32_class(torch):
    """bitsandbytes' 32-bit AdamW (``PagedAdamW``): two fp32 states per parameter
    (``Optimizer2State.init_state``), updated in place by one kernel."""

    class AdamW32(torch.optim.Optimizer):
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
                        state["state1"] = torch.zeros_like(p, dtype=torch.float32)
                        state["state2"] = torch.zeros_like(p, dtype=torch.float32)

    return AdamW32


# ---------------------------------------------------------------------------------------
# One data-parallel rank, without a GPU and without its peers.


# The frames an allocation is attributed through to the code that asked for it: the
# dispatch machinery, DTensor's and this file's own (never the caller).
_PLUMBING = (
    __file__,
    "torch/utils/_python_dispatch.py",
    "torch/_ops.py",
    "torch/_tensor.py",
    "torch/overrides.py",
    "torch/utils/_contextlib.py",
    "torch/autograd/grad_mode.py",
    "torch/distributed/tensor/",
    "torch/_refs/",
    "torch/_prims/",
    "torch/_decomp/",
    "torch/_meta_registrations.py",
    "torch/_dynamo/",
    "torch/_compile.py",
)
# The data-parallel frameworks' own code: an allocation whose nearest caller is here is
# one of their buffers (FSDP2's all-gather outputs and reduce-scatter buffers, DDP's
# gradient buckets), not the model's.
_FRAMEWORKS = (
    "torch/distributed/fsdp/",
    "torch/nn/parallel/distributed.py",
    "torch/distributed/distributed_c10d.py",
)


def _framework_site():
    """The framework buffer the allocation being made is, from its nearest caller
    outside the dispatch plumbing: FSDP2's reduce-scatter (``foreach_reduce``) or
    all-gather (the rest of ``torch/distributed/fsdp``), DDP's gradient buckets; None
    for the model's own tensors."""
    import os

    f = sys._getframe(2)
    depth = 0
    while f is not None and depth < 64:
        name = f.f_code.co_filename.replace(os.sep, "/")
        if name != __file__ and not any(p in name for p in _PLUMBING[1:]):
            if "/deepspeed/" in name:
                if name.endswith("deepspeed/utils/nvtx.py"):
                    # DeepSpeed's range decorator around its functions.
                    f = f.f_back
                    depth += 1
                    continue
                return _deepspeed_site(f, name)
            if not any(p in name for p in _FRAMEWORKS):
                return None
            if name.endswith("nn/parallel/distributed.py"):
                return "buckets"
            while f is not None and depth < 64:
                if f.f_code.co_name == "foreach_reduce":
                    return "reduce_scatter"
                f = f.f_back
                depth += 1
            return "all_gather"
        f = f.f_back
        depth += 1
    return None


def _deepspeed_site(frame, name):
    """DeepSpeed ZeRO's buffers: the contiguous gradient bucket, an allocation of
    ``reduce_bucket_size`` elements (stage_1_and_2.py `setup_buckets`, stage3.py
    `_setup_for_real_optimizer`); stage 3's gathered parameters (partition_parameters.py,
    its all-gather functions and their handles' `wait`) and its gradients' reduce-scatter
    (stage3.py `__avg_scatter_grads`, comm/coalesced_collectives.py). Its other
    allocations are model states (named after the step) or temporaries."""
    import linecache

    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    function = frame.f_code.co_name
    if "reduce_bucket_size" in line:
        return "buckets"
    if name.endswith("zero/partition_parameters.py") and ("all_gather" in function or function == "wait"):
        return "all_gather"
    if name.endswith("comm/coalesced_collectives.py") or "scatter" in function:
        return "reduce_scatter"
    return None


class _resize_hook:
    """Sees every in-place storage resize while the trace runs (FSDP2's way of freeing
    and re-allocating its all-gather outputs), through ``UntypedStorage.resize_``."""

    def __init__(self, torch, tracker):
        self.cls = torch.UntypedStorage
        self.tracker = tracker

    def __enter__(self):
        cls, tracker = self.cls, self.tracker
        self.own = "resize_" in cls.__dict__
        self.original = cls.resize_
        original = self.original

        def resize_(storage, size):
            out = original(storage, size)
            tracker.resized(storage)
            return out

        cls.resize_ = resize_
        return self

    def __exit__(self, *exc):
        if self.own:
            self.cls.resize_ = self.original
        else:
            del self.cls.resize_
        return False


def _decoder_blocks(torch, model):
    """The decoder's blocks: the children of the model's largest ``nn.ModuleList``
    (what torchtitan and torchtune wrap one by one)."""
    best, size = None, -1
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList):
            n = sum(p.numel() for p in module.parameters())
            if n > size:
                best, size = module, n
    return list(best) if best is not None else []


class _RankGroup:
    """One rank's process group and how the model is wrapped on it."""

    def __init__(self, torch, request):
        self.torch = torch
        self.world = int(request["world_size"])
        self.rank = int(request["rank"])
        self.nodes = int(request.get("nodes", 1))
        self.scheme = request["scheme"]
        self.reshard = request.get("reshard_after_forward", True)
        self.hybrid = bool(request.get("hybrid", False))
        self.reduce_dtype = request.get("reduce_dtype")
        self.bucket_view = bool(request.get("gradient_as_bucket_view", False))
        self.zero = int(request.get("zero_stage", 0)) if self.scheme == "zero" else 0
        self.dtype = None
        self.masters_sharded = False
        self.tracker = None

    def shard(self, model):
        """FSDP2: ``fully_shard`` on every decoder block, then on the root (the
        recipe of torchtitan's ``apply_fsdp`` and torchtune's ``shard_model``)."""
        torch = self.torch
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if self.hybrid:
            per_node = self.world // self.nodes
            mesh = DeviceMesh(
                "meta",
                torch.arange(self.world).view(self.nodes, per_node),
                mesh_dim_names=("replicate", "shard"),
            )
        else:
            mesh = DeviceMesh("meta", list(range(self.world)))
        reduce = getattr(torch, self.reduce_dtype) if self.reduce_dtype else None
        mp = MixedPrecisionPolicy(param_dtype=self.dtype, reduce_dtype=reduce)
        # Full shard: fully_shard's default (None): the blocks reshard after forward,
        # the root does not (`_auto_reshard_after_forward`, FSDPState._lazy_init);
        # grad-op: none does.
        reshard = None if self.reshard else False
        for block in _decoder_blocks(torch, model):
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)

    def replicate(self, model):
        """DDP with its defaults (``bucket_cap_mb`` 25, ``gradient_as_bucket_view``
        as asked)."""
        import torch.nn.parallel.distributed as ddp

        # DDP first checks that every rank holds the same parameters
        # (`_verify_param_shape_across_processes`): an exchange of shapes whose answer
        # the fake group cannot give. One process has no peer to disagree with.
        verify = ddp._verify_param_shape_across_processes
        ddp._verify_param_shape_across_processes = lambda *_a, **_k: None
        try:
            wrapped = ddp.DistributedDataParallel(model, gradient_as_bucket_view=self.bucket_view)
        finally:
            ddp._verify_param_shape_across_processes = verify
        torch, world = self.torch, self.world

        def allreduce_in_place(_state, bucket):
            # DDP's built-in hook all-reduces each bucket in place and hands the
            # bucket back (c10d `AllReduceCommHook`); the fake group's futures carry
            # no tensor, so the bucket is handed back here, as that hook's would be.
            buffer = bucket.buffer()
            buffer.div_(world)
            torch.distributed.all_reduce(buffer)
            done = torch.futures.Future()
            done.set_result(buffer)
            return done

        wrapped.register_comm_hook(None, allreduce_in_place)
        wrapped.reducer = _NoBucketRebuild(wrapped.reducer)
        return wrapped


    def deepspeed(self, model, optimizer, w):
        """DeepSpeed ZeRO stage 1, 2 or 3 over the client optimizer (``torch.optim``:
        no op is built), with DeepSpeed's defaults for everything the workload does
        not say (``reduce_bucket_size``, ``contiguous_gradients``, ``overlap_comm``,
        stage 3's prefetch and live-parameter limits: DeepSpeedZeroConfig,
        deepspeed/runtime/zero/config.py), bf16 as DeepSpeed's mixed precision (an
        fp32 partition of the master weights beside the 16-bit model)."""
        import deepspeed

        config = {
            "train_micro_batch_size_per_gpu": int(w["sequences"]),
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": self.zero},
        }
        config["bf16"] = {"enabled": True}
        engine, ds_optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        return engine, ds_optimizer


class _NoBucketRebuild:
    """DDP's reducer, except that it keeps its first buckets: DDP rebuilds them once,
    in the second step's forward, in the order the gradients became ready
    (``Reducer::rebuild_buckets``), after taking rank 0's order through a broadcast it
    reads back from the device (``sync_bucket_indices``), which meta tensors cannot
    give. The rebuilt buckets hold the same gradients under the same size cap, so
    their bytes are the first buckets' bytes."""

    def __init__(self, reducer):
        self._reducer = reducer

    def _rebuild_buckets(self):
        return False

    def __getattr__(self, name):
        return getattr(self._reducer, name)


def _meta_accelerator(torch):
    """DeepSpeed's accelerator for PyTorch's ``meta`` device, modelled on its CPU
    accelerator (``deepspeed/accelerator/cpu_accelerator.py``): every tensor DeepSpeed
    places on "the accelerator" (``get_accelerator().current_device_name()``) is a meta
    tensor the trace counts. It answers as a synchronous device (no streams: the
    allocations are the same, only their ordering against a side stream differs), with
    no op to build (the meta device runs no kernel: ``create_op_builder`` returns None,
    as for an op the CPU accelerator lacks), and with room for what DeepSpeed asks
    (``available_memory``: ZeRO flattens its parameter groups on the device when the
    flat copy fits, as on a card with room, stage_1_and_2.py ``__init__``)."""
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    class MetaAccelerator(CPU_Accelerator):
        def __init__(self):
            super().__init__()
            self._name = "meta"
            self._communication_backend_name = "fake"

        def device_name(self, device_index=None):
            return "meta"

        def current_device_name(self):
            return "meta"

        def device(self, device_index=None):
            return torch.device("meta")

        def current_device(self):
            return 0

        def device_count(self):
            return 1

        def on_accelerator(self, tensor):
            return tensor.device.type == "meta"

        def is_available(self):
            return True

        def available_memory(self, device_index=None):
            return 1 << 62

        def total_memory(self, device_index=None):
            return 1 << 62

        def is_bf16_supported(self):
            return True

        def create_op_builder(self, op_name):
            return None

        def get_op_builder(self, class_name):
            return None

    return MetaAccelerator()


def _defragment_on_meta(torch, original):
    """ZeRO-3's ``defragment`` (deepspeed/runtime/zero/utils.py) moves the parameters'
    partitions through a host buffer into one flat device buffer: each partition copied
    to the host and freed, then the host buffer copied back to the device. A meta
    tensor has no values to copy to the host; on meta the host buffer is left out and
    the device does what it does on a GPU: the partitions freed, then one flat buffer
    of them all, each partition a view into it."""

    def defragment(tensors):
        if not tensors or tensors[0].device.type != "meta":
            return original(tensors)
        dtype, device = tensors[0].dtype, tensors[0].device
        infos = []
        offset = 0
        for t in tensors:
            infos.append((t, offset, t.numel()))
            offset += t.numel()
        for t, _, _ in infos:
            t.data = torch.empty(0, dtype=dtype, device=device)
        buffer = torch.empty(offset, dtype=dtype, device=device)
        for t, start, n in infos:
            t.data = buffer.narrow(0, start, n)
        return buffer

    return defragment


class _rank_group:
    """torch.distributed's fake process group (``FakeStore`` and the ``fake`` backend:
    collectives that move no data) as rank ``rank`` of ``world_size``, in this one
    process, with PyTorch's ``meta`` device given a device handle.

    FSDP2 takes its device from its DeviceMesh (``_get_device_from_mesh``,
    ``_fully_shard/_fsdp_init.py``): on a CPU mesh its all-gather and reduce-scatter
    buffers would be CPU tensors beside meta parameters. A mesh on ``meta`` makes meta
    the device, so every buffer FSDP2 allocates is a meta tensor, counted like the
    model's. A device mesh needs a device handle (``torch.<type>``: ``current_device``,
    streams and events); ``torch.meta`` is given torch.cpu's stream and event
    stand-ins, which FSDP2 already runs with on a CPU mesh. FSDP2's check that no
    parameter is left on meta before training (``FSDPParamGroup._validate_no_meta_params``)
    is skipped for groups whose device is meta, where meta parameters are on the device.
    Everything is undone on exit.
    """

    def __init__(self, torch, request):
        self.torch = torch
        self.request = request

    def __enter__(self):
        import types

        torch = self.torch
        import torch.distributed as dist
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
        from torch.testing._internal.distributed.fake_pg import FakeStore

        group = _RankGroup(torch, self.request)
        if not 2 <= group.world or not 0 <= group.rank < group.world:
            raise ValueError("a rank's trace needs world_size ≥ 2 and 0 ≤ rank < world_size")
        if dist.is_initialized():
            raise RuntimeError("a process group is already initialised in this process")
        class Stream(torch.cpu.Stream):
            # FSDP2 asserts that its streams' events exist off the CPU
            # (`post_backward`, HSDP's all-reduce): an event that is always done.
            def record_event(self, event=None):
                return event if event is not None else torch.cpu.Event()

        handle = types.SimpleNamespace(
            **{k: getattr(torch.cpu, k) for k in ("Event", "stream", "current_stream", "synchronize")}
        )
        handle.Stream = Stream
        handle.current_device = lambda: 0
        handle.device_count = lambda: 1
        handle.is_initialized = lambda: True
        self.had_meta = hasattr(torch, "meta")
        self.old_meta = getattr(torch, "meta", None)
        torch.meta = handle
        self.validate = FSDPParamGroup._validate_no_meta_params
        validate = self.validate

        def no_meta_check_on_meta(param_group):
            if param_group.device.type != "meta":
                validate(param_group)

        FSDPParamGroup._validate_no_meta_params = no_meta_check_on_meta
        self.group_cls = FSDPParamGroup
        # The unsharded gradients a reduce-scatter takes are part of its buffers
        # (``foreach_reduce`` copies them into its input, then frees them).
        import torch.distributed.fsdp._fully_shard._fsdp_param_group as param_group

        self.param_group = param_group
        self.reduce = param_group.foreach_reduce
        reduce = self.reduce

        def foreach_reduce(fsdp_params, unsharded_grads, *args, **kwargs):
            if group.tracker is not None:
                for g in unsharded_grads:
                    group.tracker.reclassify(g, "reduce_scatter")
            out = reduce(fsdp_params, unsharded_grads, *args, **kwargs)
            if group.tracker is not None:
                # Its output is now the sharded gradients: the model's state.
                for p in fsdp_params:
                    group.tracker.reclassify(p.sharded_param.grad, None)
            return out

        param_group.foreach_reduce = foreach_reduce
        self.environ = None
        self.accelerator = None
        if group.scheme == "zero":
            # DeepSpeed reads its rank from the launcher's variables (the engine
            # asserts LOCAL_RANK) and its device from its accelerator: both set for
            # this rank, both undone on exit.
            import os

            try:
                import deepspeed.accelerator.real_accelerator as real_accelerator
            except ImportError as e:
                raise Unavailable(f"deepspeed is not importable by {sys.executable} ({e})") from e
            names = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
            self.environ = {k: os.environ.get(k) for k in names}
            per_node = group.world // max(group.nodes, 1)
            os.environ.update(
                LOCAL_RANK=str(group.rank % per_node),
                RANK=str(group.rank),
                WORLD_SIZE=str(group.world),
                LOCAL_WORLD_SIZE=str(per_node),
            )
            self.real_accelerator = real_accelerator
            self.accelerator = real_accelerator.ds_accelerator
            real_accelerator.set_accelerator(_meta_accelerator(torch))
            import deepspeed.runtime.zero.stage3 as stage3

            self.stage3 = stage3
            self.defragment = stage3.defragment
            stage3.defragment = _defragment_on_meta(torch, self.defragment)
            # ZeRO-3 checks that every rank saw the same modules and parameters in
            # the same order (`assert_ints_same_as_other_ranks`: a broadcast of rank
            # 0's list, read back on the host): one process has no peer to disagree
            # with, and a meta tensor has no list to read back.
            import importlib

            self.same_as_other_ranks = []
            for module_name in (
                "deepspeed.runtime.zero.utils",
                "deepspeed.runtime.zero.partition_parameters",
                "deepspeed.runtime.zero.partitioned_param_coordinator",
                "deepspeed.runtime.zero.stage3",
            ):
                module = importlib.import_module(module_name)
                if hasattr(module, "assert_ints_same_as_other_ranks"):
                    self.same_as_other_ranks.append((module, module.assert_ints_same_as_other_ranks))
                    module.assert_ints_same_as_other_ranks = lambda *_a, **_k: None
            # ZeRO-3's memory-efficient linear asks autocast about its device
            # (zero/linear.py `_get_autocast_dtype`, `_is_autocast_enabled`); torch
            # has no autocast state for meta: it is off, as for a bf16 engine's step.
            import deepspeed.runtime.zero.linear as zero_linear

            self.zero_linear = zero_linear
            self.autocast = (zero_linear._get_autocast_dtype, zero_linear._is_autocast_enabled)
            dtype_of, enabled = self.autocast
            zero_linear._get_autocast_dtype = lambda d: None if d == "meta" else dtype_of(d)
            zero_linear._is_autocast_enabled = lambda d: False if d == "meta" else enabled(d)
            # Its backward re-enters autocast as the forward had it (off):
            # `torch.autocast(device_type="meta", enabled=False)`, which torch refuses
            # for a device without autocast; off is no autocast at all.
            self.torch_autocast = torch.autocast
            autocast = self.torch_autocast

            def autocast_off_on_meta(device_type, *args, **kwargs):
                if device_type == "meta" and not kwargs.get("enabled", True):
                    return contextlib.nullcontext()
                return autocast(device_type, *args, **kwargs)

            torch.autocast = autocast_off_on_meta
        dist.init_process_group("fake", store=FakeStore(), rank=group.rank, world_size=group.world)
        return group

    def __exit__(self, *exc):
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        if self.environ is not None:
            import os

            for k, v in self.environ.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            self.real_accelerator.ds_accelerator = self.accelerator
            # DeepSpeed's module-level state made on this group (its communication
            # backend, its world and data-parallel groups): gone with the group, so
            # the next trace in this process builds its own.
            import deepspeed.comm.comm as ds_comm
            import deepspeed.utils.groups as ds_groups

            ds_comm.cdb = None
            self.stage3.defragment = self.defragment
            for module, check in self.same_as_other_ranks:
                module.assert_ints_same_as_other_ranks = check
            self.zero_linear._get_autocast_dtype, self.zero_linear._is_autocast_enabled = self.autocast
            self.torch.autocast = self.torch_autocast
            for name, value in list(vars(ds_groups).items()):
                if name.startswith("_") and name.isupper() and name.endswith(("GROUP", "GROUP_RANKS")):
                    setattr(ds_groups, name, {} if isinstance(value, dict) else None)
                elif name.startswith("_MPU_"):
                    setattr(ds_groups, name, None)
            ds_groups.mpu = None
        self.group_cls._validate_no_meta_params = self.validate
        self.param_group.foreach_reduce = self.reduce
        if self.had_meta:
            self.torch.meta = self.old_meta
        else:
            del self.torch.meta
        return False


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


def _checkpoint_kwargs(torch, w):
    """torch.utils.checkpoint's arguments for the layers: non-reentrant, and with
    ``checkpointing_policy`` "op" torchtitan's selective op policy
    (torchtitan/parallelisms/parallelize_llama.py at 3f20451, ``_apply_ac_to_transformer_block``
    with ``selective_ac_option = "op"``): the outputs of the matmuls are saved but every
    second one's (counted per layer and per pass), and the fused attention kernels' and
    the reduce-scatter's; everything else is recomputed in the backward."""
    kwargs = {"use_reentrant": False}
    policy = w.get("checkpointing_policy", "layer")
    if policy == "layer":
        return kwargs
    if policy != "op":
        raise ValueError(f"checkpointing_policy {policy!r}: layer or op")
    from collections import defaultdict

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    ops = torch.ops
    save = {
        ops.aten.mm.default,
        ops.aten._scaled_dot_product_efficient_attention.default,
        ops.aten._scaled_dot_product_flash_attention.default,
        ops._c10d_functional.reduce_scatter_tensor.default,
        ops.aten.abs.default,
        ops.aten.max.default,
    }

    def context_fn():
        meta = defaultdict(int)

        def policy_fn(ctx, func, *args, **kwargs):
            key = "recompute_mm_count" if ctx.is_recompute else "forward_mm_count"
            if func == ops.aten.mm.default:
                meta[key] += 1
            keep = func in save and not (func == ops.aten.mm.default and meta[key] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy_fn)

    kwargs["context_fn"] = context_fn
    return kwargs


def _compiled(torch, model):
    """``torch.compile(model)`` through Inductor's own front half, run without its code
    generation, so the step runs on the meta device.

    The backend is ``torch._inductor.compile_fx.compile_fx`` (torch 2.11), as the
    default ``torch.compile`` backend calls it: AOTAutograd traces the joint forward and
    backward graph, applies Inductor's decompositions, and ``compile_fx.partition_fn``
    runs Inductor's joint-graph passes then
    ``torch._functorch.partitioners.min_cut_rematerialization_partition(...,
    compiler="inductor")``, which chooses what the forward saves for the backward and
    what the backward recomputes. Only ``inner_compile`` (``compile_fx_inner``: Inductor's
    lowering, fusion, code generation and memory planning) is replaced: each
    partitioned graph runs op by op through ``torch.fx.Interpreter.boxed_run``, which,
    like Inductor's generated code, takes its inputs in a list it clears and frees each
    value after its last use. What a generated kernel keeps inside itself (fused
    intermediates never allocated, buffers reused by its memory planning) is not seen.

    One Inductor setting differs: ``joint_graph_constant_folding`` is off, because its
    pass (``fx_passes/joint_graph.py``, ``constant_fold_uniform_value`` then
    ``remove_no_ops``) replaces every graph output on the meta device with an empty
    tensor, taking the meta device for "no data"; it folds only tensors of one uniform
    value (``full``, ``zeros``, ``ones``)."""
    import torch._dynamo
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx

    def inner_compile(gm, example_inputs, **kwargs):
        interpreter = torch.fx.Interpreter(gm, garbage_collect_values=True)

        def run(args):
            try:
                return interpreter.boxed_run(args)
            finally:
                # The interpreter keeps the output node's value in its environment
                # after returning it: dropped, so the caller alone holds the outputs.
                interpreter.env = {}

        run._boxed_call = True
        return run

    def backend(gm, example_inputs):
        with inductor_config.patch(joint_graph_constant_folding=False):
            return compile_fx(gm, example_inputs, inner_compile=inner_compile)

    torch._dynamo.reset()
    blocks = _decoder_blocks(torch, model)
    if not blocks:
        raise ValueError("torch.compile is traced for a decoder's layers: this model has no layer list")
    for block in blocks:
        block.compile(backend=backend, fullgraph=True)
    _NOTES.add(
        "torch.compile: the step as AOTAutograd and Inductor's partitioner split it "
        "(min_cut_rematerialization_partition), each graph run op by op without Inductor's "
        "code generation (its fused kernels' internal buffers and memory planning are not counted)"
    )
    return model


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
    _patch_dropout(torch)
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
            model = _from_config(transformers, config, dtype, impl)
    except KeyError:
        # Falcon and a few others pick their attention class from a table of their own.
        model = None
    except ValueError as e:
        # A model that refuses SDPA (`_supports_sdpa = False`: Gemma 2, gpt-oss) runs
        # eager, as transformers runs it when no implementation is named
        # (modeling_utils.py `get_correct_attn_implementation`).
        if impl != "sdpa" or "scaled_dot_product_attention" not in str(e):
            raise
        _NOTES.add(f"{model_type} refuses SDPA: traced eager, which transformers runs when none is named")
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(
                config, dtype=dtype, attn_implementation="eager"
            )
    if impl.startswith("gpumem_") and not getattr(model, "_supports_attention_backend", False):
        # A family with attention code of its own (no AttentionInterface): run its
        # SDPA path, with SDPA mapped to the fused kernel CUDA would pick.
        _NOTES.add(
            f"{model_type} has its own attention code: traced through its SDPA path, "
            "with the kernel CUDA would choose"
        )
        _patch_sdpa(torch)
        with torch.device("meta"):
            model = _from_config(transformers, config, dtype, "sdpa")
    return model, config


def _from_config(transformers, config, dtype, impl):
    """The causal language model of ``config``; for a vision-language model that
    AutoModelForCausalLM does not map (Qwen2.5-VL, Qwen3-VL), the whole model
    ``generate`` runs (AutoModelForImageTextToText: its tower, projector and language
    model), traced over a text prompt."""
    try:
        return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=impl)
    except ValueError:
        if type(config) not in transformers.AutoModelForImageTextToText._model_mapping:
            raise
        return transformers.AutoModelForImageTextToText.from_config(config, dtype=dtype, attn_implementation=impl)


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
        seen.setdefault(id(_local(t).untyped_storage()), t)
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
        elif r.collective:
            c = "collectives"
        elif r.logits:
            c = "logits"
        elif i in activations:
            c = "activations"
        else:
            c = "temporaries"
        out[c] += r.bytes
    return out


def trace(w):
    """Traces one workload; with ``w["ranks"]``, one data-parallel rank's step under
    torch.distributed's fake process group (:func:`_rank_group`)."""
    ranks = w.get("ranks")
    if not ranks:
        return _trace(w, None)
    torch = _import("torch")
    if ranks.get("scheme") != "zero":
        with _rank_group(torch, ranks) as group:
            return _trace(w, group)
    # DeepSpeed logs and prints to stdout, where the probe answers: to stderr here.
    import contextlib

    with contextlib.redirect_stdout(sys.stderr), _deepspeed_logs_to_stderr():
        with _rank_group(torch, ranks) as group:
            return _trace(w, group)


@contextlib.contextmanager
def _deepspeed_logs_to_stderr():
    """DeepSpeed's logger writes to the stdout it saw at import: its handlers are
    pointed at stderr while the trace runs."""
    try:
        from deepspeed.utils.logging import logger
    except ImportError as e:
        raise Unavailable(f"deepspeed is not importable by {sys.executable} ({e})") from e
    old = [(h, h.setStream(sys.stderr)) for h in logger.handlers if hasattr(h, "setStream")]
    try:
        yield
    finally:
        for h, stream in old:
            if stream is not None:
                h.setStream(stream)


def _trace(w, group):
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
    train = w["train"]
    build = w
    zero = group is not None and group.scheme == "zero"
    if zero:
        if train != "full":
            raise ValueError("a DeepSpeed ZeRO rank's step is traced for full training")
        if w["dtype"] != "bfloat16":
            raise ValueError("a DeepSpeed ZeRO rank is traced in bf16, with its fp32 master partition")
        if not w["master_weights"]:
            raise ValueError(
                "DeepSpeed's bf16 keeps an fp32 partition of the master weights: trace it with master weights on"
            )
        versions["deepspeed"] = _import("deepspeed").__version__
    if group is not None:
        if train not in ("full", "lora"):
            raise ValueError("a rank's step is traced for full and LoRA training")
        if group.scheme == "fsdp" and train == "full" and w["master_weights"] and w["dtype"] != "float32":
            # FSDP2's mixed precision: the sharded parameters are the fp32 master
            # copy, gathered in the compute dtype (MixedPrecisionPolicy.param_dtype),
            # as torchtitan trains.
            build = dict(w, dtype="float32")
            group.dtype = getattr(torch, DTYPES[w["dtype"]])
            group.masters_sharded = True
    if w.get("compile"):
        # torch.compile as torchtitan applies it (each decoder block compiled on its
        # own with fullgraph=True: torchtitan/models/llama3/infra/parallelize.py,
        # `apply_compile`), for a plain step: full or LoRA training, one device,
        # no checkpointing, no autocast.
        if train not in ("full", "lora"):
            raise ValueError("torch.compile is traced for full and LoRA training")
        if group is not None or w["checkpointing"] or w.get("autocast"):
            raise ValueError("torch.compile is traced for one device's step, without checkpointing or autocast")
        if w.get("memory_history"):
            # The history's scope hooks would run inside the compiled blocks.
            raise ValueError("torch.compile is traced without the memory history")
    model, config = _build(torch, transformers, build)
    nf4_layers = 0
    if train == "qlora":
        nf4_layers = _quantise_nf4(torch, model, w.get("double_quant", True))
        # What transformers' quantiser marks on a quantised model's config
        # (quantizers/base.py, `HfQuantizer.preprocess_model`).
        model.config._is_quantized = True
        if w.get("kbit_prepared"):
            _prepare_kbit(model)
            _patch_grouped_mm(torch)
    if train in ("lora", "qlora"):
        model, versions["peft"] = _lora(torch, model, w)
        _patch_meta_autocast(torch)
    if train == "qlora":
        _qlora_layers(torch, model)
    autocast = w.get("autocast")
    if autocast:
        # Mixed-precision autocast as transformers' Trainer runs it (bf16=True or
        # fp16=True: accelerate's `Accelerator.prepare_model` wraps the model's forward,
        # the loss included, in `torch.autocast`; the backward runs outside it), on the
        # meta device through the stand-in (`_AutocastStandIn`).
        if train not in ("lora", "qlora"):
            raise ValueError("autocast is traced for LoRA and QLoRA")
        if autocast != w["dtype"]:
            raise ValueError(f"autocast in {autocast} over a {w['dtype']} model is not traced")
        if group is not None:
            raise ValueError("a rank's step is traced without autocast")
        autocast_dtype = getattr(torch, DTYPES[autocast])
        _NOTES.add(f"forward and loss under torch.autocast({autocast}), on the meta device through its cast policy's stand-in")
    vocab = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else config.vocab_size
    parameters = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    trainable = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values() if p.requires_grad)
    if train == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        trainable = parameters
    if group is not None:
        if train != "none" and w["checkpointing"]:
            # Before wrapping, as torchtitan and torchtune apply checkpointing first.
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=_checkpoint_kwargs(torch, w))
            if train in ("lora", "qlora"):
                model.enable_input_require_grads()
        if group.scheme == "fsdp":
            group.shard(model)

    allocator = Allocator(w.get("expandable_segments", False))
    tracker = Tracker(allocator, vocab)
    if group is not None:
        tracker.framework_site = _framework_site
        group.tracker = tracker
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
        if group is not None:
            phase["collectives_peak_bytes"] = {k: v for k, v in sorted(tracker.kind_peak.items()) if v}
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
    mode = _dispatch_mode(tracker, compiled=bool(w.get("compile")))
    step_model = model
    with mode, _resize_hook(torch, tracker):
        if group is not None and group.scheme == "ddp":
            # Under the mode: DDP's reducer allocates its buckets as it is built.
            step_model = group.replicate(model)
        ds_optimizer = None
        if zero:
            # Under the mode: DeepSpeed's optimizer flattens the 16-bit parameters,
            # makes the fp32 partition and the optimizer states on the device as it is
            # built (its engine and optimizer wrap the torch optimizer's groups).
            for p in model.parameters():
                p.requires_grad_(True)
            client = _optimizer(torch, w["optimizer"], list(model.parameters()))
            step_model, ds_optimizer = group.deepspeed(model, client, w)
            _zero_states(tracker, model, ds_optimizer, sets)
        if train == "full" and w["master_weights"] and w["dtype"] != "float32" and not (group and (group.masters_sharded or zero)):
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
        if w["checkpointing"] and group is None:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=_checkpoint_kwargs(torch, w))
            if train in ("lora", "qlora"):
                model.enable_input_require_grads()
        if zero:
            optimizer = None
        else:
            opt_params = [m for _, m in masters] if masters else [p for p in model.parameters() if p.requires_grad]
            optimizer = _optimizer(torch, w["optimizer"], opt_params)
        if w.get("compile"):
            step_model = _compiled(torch, step_model)
        by_op = None
        for step in (0, 1):
            if optimizer is not None:
                optimizer.zero_grad(set_to_none=True)
            if not zero:
                for p in model.parameters():
                    p.grad = None
            stand_in = _AutocastStandIn(torch) if autocast else contextlib.nullcontext()
            with mode, _resize_hook(torch, tracker), stand_in:
                tracker.begin("forward", step)
                if step == 1:
                    tracker.by_op = by_op = []
                if autocast:
                    with torch.autocast("cpu", dtype=autocast_dtype):
                        loss = step_model(input_ids=ids, labels=ids).loss
                else:
                    loss = step_model(input_ids=ids, labels=ids).loss
                tracker.by_op = None
                live_end = set(r.index for r in tracker.live.values() if r.phase == "forward")
                activations.clear()
                activations.update(live_end)
                close("forward", step)
                tracker.begin("backward", step)
                if zero:
                    step_model.backward(loss)
                else:
                    loss.backward()
                del loss
                for p in model.parameters():
                    r = tracker.record_of(p.grad)
                    if r is not None:
                        sets["gradients"].add(r.index)
                if zero:
                    _zero_states(tracker, model, ds_optimizer, sets)
                close("backward", step)
                tracker.begin("optimizer_step", step)
                if zero:
                    step_model.step()
                    _zero_states(tracker, model, ds_optimizer, sets)
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
            # generate() always hands the prefill an attention mask: the caller's, else an
            # int64 one of ones over the prompt (`_prepare_attention_mask_for_generation`,
            # generation/utils.py, transformers 5.23), held through the forward; SDPA's
            # materialised masks take it in (`padding_mask_function`, masking_utils.py).
            mask = torch.ones(ids.shape, dtype=torch.long, device=ids.device)
            tracker.begin("prefill", 0)
            out = model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=0 if keep_all else 1)
            cache = out.past_key_values
            # generate(): the next token's scores are an fp32 copy of the last logits.
            scores = out.logits[:, -1, :].to(dtype=torch.float32, copy=True)
            token = scores.argmax(dim=-1, keepdim=True)
            del out, scores, mask
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


def _zero_states(tracker, model, ds_optimizer, sets):
    """Names the model states a DeepSpeed ZeRO optimizer holds: the 16-bit parameters
    (stage 1 and 2: views of its flat buffer ``bit16_groups_flat``; stage 3: each
    parameter's partition ``ds_tensor``), its fp32 partition of the master weights
    (``single_partition_of_fp32_groups``; stage 3 ``fp32_partitioned_groups_flat``),
    the wrapped optimizer's states, and the gradient partition it reduces into
    (stage 2 ``grads_in_partition``; stage 3 ``grad_partitions_flat_buffer``)."""

    def add(kind, t):
        r = tracker.record_of(t)
        if r is not None:
            sets[kind].add(r.index)

    for t in getattr(ds_optimizer, "bit16_groups_flat", []) or []:
        add("parameters", t)
    for p in model.parameters():
        add("parameters", getattr(p, "ds_tensor", None) if hasattr(p, "ds_tensor") else p)
    for name in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):
        for t in getattr(ds_optimizer, name, []) or []:
            add("master_weights", t)
    inner = getattr(ds_optimizer, "optimizer", None)
    for st in getattr(inner, "state", {}).values():
        for v in st.values():
            if _is_meta(v):
                add("optimizer_state", v)
    for name in ("grads_in_partition", "grad_partitions_flat_buffer"):
        t = getattr(ds_optimizer, name, None)
        if t is not None:
            add("gradients", t)
    # The partition's gradients as the step takes them (`averaged_gradients`, from the
    # parameters' gradients at stage 1).
    for ts in (getattr(ds_optimizer, "averaged_gradients", None) or {}).values():
        for t in ts or []:
            add("gradients", t)


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
    if name in ("adamw8bit", "paged-adamw8bit"):
        # Paged states live in CUDA unified memory on a GPU; here they are counted as
        # the optimizer state they are (the estimate keeps them out of the device's need).
        return _adamw8bit_class(torch)(params)
    if name == "paged-adamw":
        # bitsandbytes' 32-bit optimizer: two fp32 states whatever the parameter's dtype,
        # updated in place by its kernel.
        return _adamw32_class(torch)(params)
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
        if r.index not in activations or r.logits or r.collective:
            continue
        g = groups.setdefault(r.what, [0, 0])
        g[0] += 1
        g[1] += r.bytes
    rows = [{"op": k, "tensors": v[0], "bytes": v[1]} for k, v in groups.items()]
    rows.sort(key=lambda x: (-x["bytes"], x["op"]))
    return rows


def _watchdog(deadline_s, parent_pid):
    """The shared watchdog (`gpumem_watchdog.py`, written beside this probe)."""
    import gpumem_watchdog

    gpumem_watchdog.watchdog(deadline_s, parent_pid)


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
