"""gpumem_probe: phases a PyTorch program's GPU memory for `gpumem-agent run`.

`gpumem-agent run -- COMMAND` puts this package and a `sitecustomize` first on the
child's PYTHONPATH. Nothing happens until `torch` is imported (an import hook watches
for it; the probe never imports torch itself). Then PyTorch's public hooks mark phases:

- ``model_load``: from torch's import to the first top-level forward (or first marker);
- per step ``forward``, ``backward``, ``optimizer_step`` (a step ends with the optimizer
  step; step 0 is the first step, kept apart: method §3 and §8);
- inside a ``generate`` method of any ``nn.Module`` subclass (HF's included):
  ``prefill`` = the first top-level forward, ``decode`` = the rest (method §4);
- manual markers: ``with gpumem_probe.phase("eval"): ...`` (a no-op when not under run).

Each phase follows the protocol of method §7 through a *memory reader*: synchronise, read
allocated/reserved current, reset the peaks, run, synchronise, read peaks and end levels,
plus the device's free/total memory. Only one phase is open at a time; a boundary met
while another phase is open is ignored (nested forwards, recomputation inside backward).
After the first ``GPUMEM_PROBE_STEPS`` steps (default 3) every hook is removed.

With ``gpumem-agent run --memory-history`` (``GPUMEM_PROBE_HISTORY_ENTRIES`` set) the
probe also turns on PyTorch's allocator history (``_History``): recording starts when the
program initialises CUDA, every event carries the phase's tag, the events are taken out of
the allocator's ring buffer after each phase (so a later phase cannot push a peak's
events out), and at the end the snapshot is written, bounded, beside the socket for the
agent to read back.

Messages go to the agent as JSON lines (protocol version 1, at most ``MAX_LINE_BYTES``
each) over the unix socket named by ``GPUMEM_PROBE_SOCKET``. The probe never raises into
the user's program: any failure of its own disables it.
"""

import contextlib
import json
import os
import socket
import sys
import threading
import time

__all__ = ["phase", "PROTOCOL_VERSION", "MAX_LINE_BYTES"]

# The limits are the agent's (gpumem_proto::probe, schemas/probe.v1.schema.json); this
# block is generated from them and a test fails when it is stale.
# BEGIN generated limits
#: Version of the JSON lines sent to the agent (the agent refuses other versions).
PROTOCOL_VERSION = 1
#: Longest line the probe sends; the agent drops longer ones.
MAX_LINE_BYTES = 65536
#: Most messages one process sends; the agent enforces the same bound.
MAX_MESSAGES = 10000
#: Longest text kept from a string field.
MAX_TEXT = 4000
#: Longest config.json sent with the model's facts.
MAX_CONFIG_BYTES = 32768
# END generated limits
_MAX_NAME = 64
_MAX_TEXT = MAX_TEXT
_MAX_SHAPES = 16
_WALK_LIMIT = 20000

# The transformer dimensions the estimator needs, read from a `config` attribute (HF
# models carry one) when the model has it.
_CONFIG_KEYS = (
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "head_dim",
    "vocab_size",
)

_ENV_SOCKET = "GPUMEM_PROBE_SOCKET"
_ENV_STEPS = "GPUMEM_PROBE_STEPS"
# Set by `run --memory-history`: the most events PyTorch's recorder keeps (its ring
# buffer, and what the probe accumulates), and the byte cap of the converted history.
_ENV_HISTORY_ENTRIES = "GPUMEM_PROBE_HISTORY_ENTRIES"
_ENV_HISTORY_BYTES = "GPUMEM_PROBE_HISTORY_BYTES"
#: Frames kept per event in the written snapshot, innermost first (the history document
#: keeps fewer: gpumem_history.MAX_STACK_DEPTH).
HISTORY_PICKLE_FRAMES = 32
#: Largest snapshot pickle written (the agent refuses larger ones).
HISTORY_MAX_PICKLE_BYTES = 256 << 20

_PROBE = None
_PENDING_READER = None


def _now():
    return time.perf_counter_ns()


def _env_int(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


class _Channel:
    """The JSON-lines connection to the agent; closes itself on the first error."""

    def __init__(self, path):
        self._lock = threading.Lock()
        self._sent = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)

    def send(self, msg_type, **fields):
        msg = {"v": PROTOCOL_VERSION, "type": msg_type}
        msg.update(fields)
        line = json.dumps(msg, separators=(",", ":"), default=str).encode("utf-8", "replace")
        if len(line) + 1 > MAX_LINE_BYTES:
            line = json.dumps(
                {"v": PROTOCOL_VERSION, "type": "truncated", "original_type": msg_type}
            ).encode()
        with self._lock:
            if self._sock is None or self._sent >= MAX_MESSAGES:
                return
            self._sent += 1
            try:
                self._sock.sendall(line + b"\n")
            except OSError:
                self._close()

    def _close(self):
        try:
            self._sock.close()
        except OSError:
            pass
        self._sock = None


class CudaReader:
    """Reads the caching allocator's counters through ``torch.cuda`` (CUDA or ROCm/HIP).

    Returns ``None`` for every value until the program itself initialised CUDA: the probe
    must not create a context (and its memory) the program would not have created.
    """

    kind = "torch.cuda"

    def __init__(self, torch):
        self._torch = torch

    def _ready(self):
        cuda = self._torch.cuda
        return cuda.is_available() and cuda.is_initialized()

    def device(self):
        """The current device index, or None."""
        return self._torch.cuda.current_device() if self._ready() else None

    def synchronize(self):
        if self._ready():
            self._torch.cuda.synchronize()

    def current(self):
        """(allocated, reserved) now, in bytes."""
        if not self._ready():
            return None, None
        cuda = self._torch.cuda
        return cuda.memory_allocated(), cuda.memory_reserved()

    def reset_peaks(self):
        if self._ready():
            self._torch.cuda.reset_peak_memory_stats()

    def peaks(self):
        """(allocated peak, reserved peak) since the last reset, in bytes."""
        if not self._ready():
            return None, None
        cuda = self._torch.cuda
        return cuda.max_memory_allocated(), cuda.max_memory_reserved()

    def device_memory(self):
        """(free, total) bytes of the device per the driver (cudaMemGetInfo)."""
        if not self._ready():
            return None, None
        free, total = self._torch.cuda.mem_get_info()
        return int(free), int(total)

    def tag(self, text):
        """Tags later allocations in memory snapshots with the phase (private API)."""
        setter = getattr(self._torch.cuda.memory, "_set_memory_metadata", None)
        if setter is not None and self._ready():
            setter(text)

    # ---- the allocator's history (run --memory-history) ---------------------------
    history_source = "cuda"

    def history_unavailable(self):
        """Why PyTorch's allocator history cannot be recorded here, or None."""
        cuda = self._torch.cuda
        memory = getattr(cuda, "memory", None)
        missing = [
            n for n in ("_record_memory_history", "_snapshot", "_set_memory_metadata") if not hasattr(memory, n)
        ]
        if missing:
            return "torch %s has no torch.cuda.memory.%s" % (self._torch.__version__, missing[0])
        if not cuda.is_available():
            return (
                "torch.cuda is not available in this process (no CUDA or ROCm device, or a CPU-only "
                "torch): the allocator history is the CUDA caching allocator's, so nothing was recorded"
            )
        return None

    def when_initialised(self, fn):
        """Calls ``fn`` once the program has initialised CUDA: now if it has, else from
        torch's own lazy initialisation (``torch.cuda._lazy_call``, the queue that
        ``manual_seed`` uses), so the probe never creates a context itself."""
        cuda = self._torch.cuda
        if cuda.is_initialized():
            fn()
            return True
        lazy = getattr(cuda, "_lazy_call", None)
        if lazy is None:
            return False
        lazy(fn)
        return True

    def record_history(self, max_entries, clear=False):
        """Turns the recorder on with Python stacks (``stacks="python"``: C++ frames
        would cost every allocation a native unwind), keeping ``max_entries`` events;
        ``clear`` empties its ring buffer."""
        record = self._torch.cuda.memory._record_memory_history
        kwargs = dict(enabled="all", context="all", stacks="python", max_entries=max_entries, clear_history=clear)
        try:
            # A free is recorded twice (requested, then completed when its stream is
            # done); the converter reads the completed one, so the other is not kept.
            record(skip_actions=["free_requested"], **kwargs)
        except TypeError:  # torch before skip_actions
            record(**kwargs)

    def stop_history(self):
        self._torch.cuda.memory._record_memory_history(enabled=None)

    def snapshot(self):
        return self._torch.cuda.memory._snapshot()

    def set_metadata(self, text):
        """As ``tag``, without the readiness check: called from inside torch's lazy
        initialisation, when CUDA is up but not yet marked initialised."""
        self._torch.cuda.memory._set_memory_metadata(text)


def _set_reader(reader):
    """Replaces the memory reader (tests only: the recording stand-in on CPU).

    May be called before torch is imported (the reader is then used from the start).
    """
    global _PENDING_READER
    if _PROBE is not None:
        _PROBE.reader = reader
        _PROBE.send_hello()
    else:
        _PENDING_READER = reader


def _clip(text, limit=_MAX_TEXT):
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "…"


def _checkpointing(module):
    """transformers' ``is_gradient_checkpointing`` (a property of ``PreTrainedModel``),
    or None for a model without it."""
    try:
        value = getattr(module, "is_gradient_checkpointing", None)
    except Exception:  # noqa: BLE001 - a property that raises is left out
        return None
    return value if isinstance(value, bool) else None


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _local(t):
    """What this rank holds of a tensor: a DTensor's local shard (FSDP2), a ZeRO-3
    parameter's partition (DeepSpeed's ``ds_tensor``), else the tensor itself."""
    local = getattr(t, "_local_tensor", None)
    if local is not None:
        return local
    part = getattr(t, "ds_tensor", None)
    return part if part is not None else t


def _distributed_facts(torch, module):
    """The rank's data-parallel job: world size, ranks per node, backend, and how the
    model of the first forward is wrapped (None when the process runs no job)."""
    world = _env_int("WORLD_SIZE")
    backend = None
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            world = int(dist.get_world_size())
            backend = str(dist.get_backend())
    except Exception:  # noqa: BLE001 - a broken or absent torch.distributed
        pass
    if not world or world < 1:
        return None
    wrapper, sharding, bucket_view = "none", None, None
    name = type(module).__name__
    try:
        from torch.nn.parallel import DistributedDataParallel

        fsdp_module = getattr(getattr(torch.distributed, "fsdp", None), "FSDPModule", None)
        if isinstance(module, DistributedDataParallel):
            wrapper = "ddp"
            bucket_view = bool(getattr(module, "gradient_as_bucket_view", False))
        elif hasattr(module, "zero_optimization_stage"):
            wrapper = "deepspeed"
            sharding = str(int(module.zero_optimization_stage()))
        elif name == "FullyShardedDataParallel":
            wrapper = "fsdp1"
            strategy = str(getattr(module, "sharding_strategy", "")).rsplit(".", 1)[-1]
            sharding = {
                "FULL_SHARD": "full",
                "SHARD_GRAD_OP": "grad-op",
                "HYBRID_SHARD": "hybrid",
                "_HYBRID_SHARD_ZERO2": "hybrid",
                "NO_SHARD": "none",
            }.get(strategy)
        elif fsdp_module is not None and isinstance(module, fsdp_module):
            wrapper = "fsdp2"
            sharding = _fsdp2_sharding(fsdp_module, module)
    except Exception:  # noqa: BLE001 - a wrapper the probe cannot read is left unnamed
        pass
    return {
        "world_size": world,
        "local_world_size": _env_int("LOCAL_WORLD_SIZE"),
        "backend": backend,
        "wrapper": wrapper,
        "sharding": sharding,
        "gradient_as_bucket_view": bucket_view,
    }


def _fsdp2_sharding(fsdp_module, root):
    """FSDP2's sharding from its own state: a 2-D mesh is hybrid (HSDP); a block that
    keeps its parameters after the forward (no post-forward mesh) is grad-op."""
    for m in root.modules():
        if m is root or not isinstance(m, fsdp_module):
            continue
        group = m._get_fsdp_state()._fsdp_param_group
        if group is None:
            continue
        if group.mesh_info.mesh.ndim == 2:
            return "hybrid"
        return "full" if group.post_forward_mesh_info is not None else "grad-op"
    return "full"


def _storage_key_and_bytes(t):
    t = _local(t)
    try:
        st = t.untyped_storage()
        return (st.data_ptr(), st.nbytes()), st.nbytes()
    except Exception:  # noqa: BLE001 - meta or exotic tensors
        return id(t), t.numel() * t.element_size()


def _walk_tensors(torch, obj, seen, out, depth=0):
    """Collects distinct storages of tensors reachable from obj (bounded)."""
    if len(seen) > _WALK_LIMIT or depth > 5:
        return
    if isinstance(obj, torch.Tensor):
        key, nbytes = _storage_key_and_bytes(obj)
        if key not in seen:
            seen.add(key)
            out.append((_local(obj), nbytes))
        return
    if isinstance(obj, (list, tuple)):
        items = obj
    elif isinstance(obj, dict):
        items = list(obj.values())
    elif hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.nn.Module)):
        items = list(vars(obj).values())
    else:
        return
    for item in items[:_WALK_LIMIT]:
        _walk_tensors(torch, item, seen, out, depth + 1)


def _by_dtype(tensors):
    groups = {}
    for t, nbytes in tensors:
        g = groups.setdefault(_dtype_name(t.dtype), {"count": 0, "bytes": 0})
        g["count"] += int(t.numel())
        g["bytes"] += int(nbytes)
    return groups


class _History:
    """PyTorch's allocator history for ``run --memory-history``, bounded.

    The recorder (``torch.cuda.memory._record_memory_history``) keeps at most
    ``max_entries`` events in a ring buffer. After each phase the probe takes a snapshot,
    moves its events into its own list (at most ``max_entries`` in all: the oldest go
    first, counted) and clears the buffer, so a phase's peak stays in the record however
    long the later phases are; each event keeps at most ``HISTORY_PICKLE_FRAMES`` frames,
    identical frames shared. At the end the last snapshot's segments and every event kept
    are written as ``history-<pid>.pickle`` (the shape of ``_snapshot()``, which PyTorch's
    memory_viz reads) and converted by ``gpumem_history`` into ``history-<pid>.json``
    (``max_bytes`` at most), both new files of mode 0600 in the probe's folder.
    """

    def __init__(self, probe, max_entries, max_bytes, folder):
        self.probe = probe
        self.max_entries = max(1, min(int(max_entries), 1000000))
        self.max_bytes = max(1 << 16, min(int(max_bytes), 64 << 20))
        self.folder = folder
        self.traces = {}  # device index -> events kept, oldest first
        self.kept = 0
        self.total = 0
        self.dropped = 0
        self.snapshots = 0
        self.segments = []
        self.filled = []  # phases in which the recorder's buffer filled up
        self.frames = {}
        self.recording = False
        self.unavailable = None
        self.done = False
        self.device = None
        # A forked child inherits this object: only the process that armed it records.
        self.pid = os.getpid()

    def arm(self):
        reader = self.probe.reader
        why = reader.history_unavailable()
        if why is not None:
            self.unavailable = why
            return
        if not reader.when_initialised(self._start):
            self.unavailable = "this torch has no torch.cuda._lazy_call, and the program had not initialised CUDA"

    def _start(self):
        # Runs inside torch's lazy initialisation or at once; never raises into it.
        try:
            r = self.probe.reader
            r.record_history(self.max_entries)
            self.recording = True
            active = self.probe.active
            if active is not None:
                r.set_metadata("gpumem:%s:%s" % (active["name"], active["step"]))
        except Exception as e:  # noqa: BLE001 - never break the program's CUDA start
            self.unavailable = "starting the recorder failed: %s" % _clip(e, 300)

    def _frames(self, frames):
        out = []
        for f in (frames or [])[:HISTORY_PICKLE_FRAMES]:
            try:
                key = (f["filename"], f["line"], f["name"])
            except (KeyError, TypeError):
                continue
            out.append(self.frames.setdefault(key, {"filename": key[0], "line": key[1], "name": key[2]}))
        return out

    def collect(self, where):
        """Moves the recorder's events into the probe's list (after a phase, at the end)."""
        if not self.recording or self.done or self.pid != os.getpid():
            return
        r = self.probe.reader
        snap = r.snapshot()
        r.record_history(self.max_entries, clear=True)
        self.snapshots += 1
        self.segments = snap.get("segments") or []
        for device, events in enumerate(snap.get("device_traces") or []):
            if not events:
                continue
            if len(events) >= self.max_entries:
                self.filled.append(where)
            kept = self.traces.setdefault(device, [])
            for e in events:
                e = dict(e)
                e["frames"] = self._frames(e.get("frames"))
                kept.append(e)
            self.total += len(events)
            self.kept += len(events)
        # The oldest go first when the list is over its bound.
        while self.kept > self.max_entries:
            device = max(self.traces, key=lambda d: len(self.traces[d]))
            over = min(self.kept - self.max_entries, len(self.traces[device]))
            del self.traces[device][:over]
            self.kept -= over
            self.dropped += over

    def finish(self):
        """Writes the history (once); returns the message fields for the agent."""
        if self.done:
            return None
        if self.unavailable is not None:
            self.done = True
            return {"status": "not_possible", "detail": self.unavailable}
        if not self.recording:
            self.done = True
            return {
                "status": "not_possible",
                "detail": "the program did not initialise CUDA while the probe ran: nothing was allocated on a device to record",
            }
        r = self.probe.reader
        self.collect("the end")
        self.done = True
        try:
            r.stop_history()
        except Exception:  # noqa: BLE001 - a device left unusable (after an OOM)
            pass
        device = self.device if self.device is not None else r.device()
        n = max(self.traces) + 1 if self.traces else 1
        traces = [self.traces.get(d, []) for d in range(n)]
        snapshot = {"segments": self.segments, "device_traces": traces}
        pickle_path = self._write_pickle(snapshot)
        converter = _converter()
        doc = converter.from_snapshot(
            snapshot,
            source=getattr(r, "history_source", "cuda"),
            device=device,
            vocab=self.probe.vocab,
            torch_version=getattr(self.probe.torch, "__version__", None),
            max_events=min(self.max_entries, converter.MAX_EVENTS),
            max_bytes=self.max_bytes,
        )
        doc["dropped_events"] = int(doc.get("dropped_events", 0)) + self.dropped
        if self.filled:
            doc["notes"].append(
                "the recorder's buffer (%d events) filled during %s: its earliest events there were lost"
                % (self.max_entries, ", ".join(self.filled[:8]))
            )
        _write_new(os.path.join(self.folder, "history-%d.json" % os.getpid()), json.dumps(doc).encode())
        detail = "%d allocator events recorded in %d snapshots (%d kept in the snapshot%s)" % (
            self.total,
            self.snapshots,
            sum(len(t) for t in traces),
            "" if pickle_path else ", which was too large to write",
        )
        return {
            "status": "recorded",
            "detail": detail,
            "entries": self.total,
            "dropped": int(doc["dropped_events"]),
            "snapshots": self.snapshots,
        }

    def _write_pickle(self, snapshot):
        """The snapshot as PyTorch pickles it (``_dump_snapshot``), halved from the
        oldest events until it is at most ``HISTORY_MAX_PICKLE_BYTES``."""
        import pickle

        while True:
            data = pickle.dumps(snapshot)
            if len(data) <= HISTORY_MAX_PICKLE_BYTES:
                break
            traces = snapshot["device_traces"]
            if not any(traces):
                return None
            snapshot = dict(snapshot, device_traces=[t[len(t) // 2 :] for t in traces])
        _write_new(os.path.join(self.folder, "history-%d.pickle" % os.getpid()), data)
        return True


def _converter():
    """gpumem_history, shipped inside this package by the agent (beside it in tests)."""
    try:
        from gpumem_probe import history
    except ImportError:
        import gpumem_history as history
    return history


def _write_new(path, data):
    """A new file of mode 0600 (never through a link), written whole and then renamed
    into place, so the agent sees either no file or the complete one."""
    tmp = path + ".part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.rename(tmp, path)


class _Probe:
    """Phase state of one process; every public hook body runs under ``_guard``."""

    def __init__(self, torch, channel, reader, max_steps):
        self.torch = torch
        self.channel = channel
        self.reader = reader
        self.max_steps = max_steps
        self.active = None
        self.token = 0
        self.step = 0
        self.forward_index = 0
        self.depth = 0
        self.first_forward = True
        self.first_module = None
        self.generate_depth = 0
        self.generate_calls = 0
        self.gen_forwards = 0
        self.kv = None
        self.handles = []
        self.restores = []
        self.installed = False
        self.pending_uninstall = False
        self.last_failed = None
        self.overhead_ns = 0
        self.hook_calls = 0
        self.phases_sent = 0
        self.started_ns = _now()
        self.removed_ns = None
        self.lock = threading.RLock()
        self.history = None
        self.vocab = None

    # ---- reporting -------------------------------------------------------------
    def send_hello(self):
        torch = self.torch
        version = getattr(torch, "version", None)
        hip = getattr(version, "hip", None)
        cuda = getattr(version, "cuda", None)
        backend = "rocm" if hip else ("cuda" if cuda else "none")
        try:
            cudnn = torch.backends.cudnn.version() if backend != "none" else None
        except Exception:  # noqa: BLE001 - cuDNN absent
            cudnn = None
        try:
            allocator = torch.cuda.get_allocator_backend() if backend != "none" else None
        except Exception:  # noqa: BLE001 - older torch
            allocator = None
        self.channel.send(
            "hello",
            pid=os.getpid(),
            ppid=os.getppid(),
            rank=_env_int("RANK"),
            local_rank=_env_int("LOCAL_RANK"),
            world_size=_env_int("WORLD_SIZE"),
            reader=getattr(self.reader, "kind", "unknown"),
            backend=backend,
            device_available=bool(backend != "none" and torch.cuda.is_available()),
            torch_version=str(torch.__version__),
            cuda_version=cuda,
            hip_version=hip,
            cudnn_version=cudnn,
            allocator_backend=allocator,
            alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
            or os.environ.get("PYTORCH_HIP_ALLOC_CONF"),
            max_steps=self.max_steps,
            python_executable=_clip(sys.executable) if sys.executable else None,
        )

    # ---- the protocol of method §7 -------------------------------------------------------
    def begin(self, name, manual=False):
        """Opens a phase; returns its token, or None when another phase is open."""
        with self.lock:
            if self.active is not None:
                if self.active["name"] == "model_load":
                    self.end(self.active["token"])
                else:
                    return None
            if self.phases_sent >= MAX_MESSAGES // 2:
                return None
            r = self.reader
            r.synchronize()
            a0, r0 = r.current()
            r.reset_peaks()
            self.token += 1
            step = None if name == "model_load" else self._step_for(name)
            r.tag("gpumem:%s:%s" % (name, step))
            self.active = {
                "token": self.token,
                "name": name,
                "manual": manual,
                "step": step,
                "a0": a0,
                "r0": r0,
                "t0": _now(),
            }
            return self.token

    def _step_for(self, name):
        if name in ("prefill", "decode"):
            return self.generate_calls
        return self.step

    def end(self, token, error=None):
        """Closes the phase with this token (ignored for any other token)."""
        with self.lock:
            ph = self.active
            if ph is None or token is None or ph["token"] != token:
                return
            self.active = None
            if error is not None:
                self.last_failed = ph
            wall = _now() - ph["t0"]
            r = self.reader
            try:
                r.synchronize()
                ap, rp = r.peaks()
                a1, r1 = r.current()
                free, total = r.device_memory()
                device = r.device()
            except Exception as e:  # noqa: BLE001 - the device may be unusable after an OOM
                ap = rp = a1 = r1 = free = total = device = None
                error = error or "reading the counters failed: %s" % _clip(e, 200)
            r.tag("")
            self.phases_sent += 1
            self.channel.send(
                "phase",
                name=ph["name"],
                step=ph["step"],
                first_step=ph["step"] == 0,
                manual=ph["manual"],
                device=device,
                wall_ns=wall,
                allocated_start_bytes=ph["a0"],
                allocated_peak_bytes=ap,
                allocated_end_bytes=a1,
                reserved_start_bytes=ph["r0"],
                reserved_peak_bytes=rp,
                reserved_end_bytes=r1,
                device_free_bytes=free,
                device_total_bytes=total,
                error=error,
            )
            if self.history is not None:
                if device is not None and self.history.device is None:
                    self.history.device = device
                self._history_step(self.history.collect, "%s of step %s" % (ph["name"], ph["step"]))

    # ---- hooks -----------------------------------------------------------------
    def _guard(self, fn, *args):
        """Runs a hook body, counts its cost, and disables the probe on a bug of its own."""
        t0 = _now()
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - never break the user's program
            self.channel.send("probe_error", message=_clip("%s: %s" % (type(e).__name__, e)))
            self.uninstall("probe error")
            return None
        finally:
            self.hook_calls += 1
            self.overhead_ns += _now() - t0

    def _pre_forward(self, module, args):
        if self.pending_uninstall:
            self.uninstall("after %d steps" % self.max_steps)
            return
        self.depth += 1
        if self.depth != 1:
            return
        if self.first_forward:
            self.first_forward = False
            self.first_module = module
        if self.generate_depth:
            self.gen_forwards += 1
            if self.gen_forwards == 1:
                self.gen_token = self.begin("prefill")
            elif self.gen_forwards == 2:
                self.gen_token = self.begin("decode")
        else:
            self.forward_token = self.begin("forward")

    def _post_forward(self, module, args, output, kwargs=None):
        self.depth = max(0, self.depth - 1)
        if self.depth != 0:
            return
        # With always_call, torch also calls this hook while a forward's exception is
        # being handled: the phase then ends as failed, with the exception's text.
        exc = sys.exc_info()[1]
        error = _clip("%s: %s" % (type(exc).__name__, exc)) if exc is not None else None
        if self.generate_depth:
            if error is None:
                self._kv_facts(output)
            if self.gen_forwards == 1 or error is not None:
                self.end(getattr(self, "gen_token", None), error)
        else:
            self.end(getattr(self, "forward_token", None), error)
        # After the phase ended, so its reading costs the phase nothing.
        if self.first_module is not None and module is self.first_module:
            self.first_module = None
            self._model_facts(module, list(args) + list((kwargs or {}).values()))

    def _model_facts(self, module, args):
        torch = self.torch
        params, seen = [], set()
        trainable = 0
        for p in module.parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            # What this rank holds (its shard under FSDP2 or ZeRO-3); the trainable
            # count stays the model's (ZeRO-3's `ds_numel`, a DTensor's global numel).
            local = _local(p)
            params.append((local, int(local.numel()) * local.element_size()))
            if p.requires_grad:
                trainable += int(getattr(p, "ds_numel", None) or p.numel())
        buffers = [(_local(b), int(_local(b).numel()) * _local(b).element_size()) for b in module.buffers()]
        shapes = []
        for a in list(args)[:_MAX_SHAPES]:
            if isinstance(a, torch.Tensor):
                shapes.append({"shape": [int(s) for s in a.shape[:8]], "dtype": _dtype_name(a.dtype)})
        config = {}
        # A data-parallel wrapper (DDP, FSDP1, DeepSpeed's engine) holds the model
        # as `.module`: its config is the model's.
        inner = module
        for _ in range(3):
            if getattr(inner, "config", None) is not None or not isinstance(
                getattr(inner, "module", None), torch.nn.Module
            ):
                break
            inner = inner.module
        cfg = getattr(inner, "config", None)
        hf_config = None
        try:
            text = cfg.to_json_string() if cfg is not None and hasattr(cfg, "to_json_string") else None
            if text is not None and len(text.encode("utf-8")) <= MAX_CONFIG_BYTES:
                hf_config = text
        except Exception:  # noqa: BLE001 - a config that cannot be written is left out
            hf_config = None
        for key in _CONFIG_KEYS:
            value = getattr(cfg, key, None)
            if isinstance(value, int) and not isinstance(value, bool):
                config[key] = value
        self.vocab = config.get("vocab_size")
        self.channel.send(
            "model",
            module=_clip(type(module).__name__, _MAX_NAME),
            config=config,
            hf_config=hf_config,
            gradient_checkpointing=_checkpointing(inner),
            parameters_by_dtype=_by_dtype(params),
            buffers_by_dtype=_by_dtype(buffers),
            trainable_parameters=trainable,
            input_shapes=shapes,
            distributed=_distributed_facts(torch, module),
        )

    def _kv_facts(self, output):
        torch = self.torch
        if hasattr(output, "past_key_values"):
            cache = output.past_key_values
        elif isinstance(output, dict) and "past_key_values" in output:
            cache = output["past_key_values"]
        elif isinstance(output, (tuple, list)) and len(output) > 1:
            cache = list(output[1:])
        else:
            return
        found = []
        _walk_tensors(torch, cache, set(), found)
        self.kv = (sum(n for _, n in found), len(found), _by_dtype(found))

    def _wrap_backward(self, original):
        probe = self

        def backward(*args, **kwargs):
            token = probe._guard(probe.begin, "backward")
            try:
                return original(*args, **kwargs)
            except BaseException as e:
                probe._guard(probe.end, token, _clip("%s: %s" % (type(e).__name__, e)))
                raise
            finally:
                probe._guard(probe.end, token)

        backward._gpumem_wrapped = True
        return backward

    def _wrap_generate(self, original):
        probe = self

        def generate(*args, **kwargs):
            if not probe.installed:
                return original(*args, **kwargs)
            outer = probe.generate_depth == 0
            probe.generate_depth += 1
            if outer:
                probe.gen_forwards = 0
                probe.kv = None
            try:
                result = original(*args, **kwargs)
            except BaseException as e:
                if outer and probe.active and probe.active["name"] in ("prefill", "decode"):
                    probe._guard(probe.end, probe.active["token"], _clip("%s: %s" % (type(e).__name__, e)))
                raise
            finally:
                probe.generate_depth -= 1
            if outer:
                probe._guard(probe._generate_done, result)
            return result

        generate._gpumem_wrapped = True
        return generate

    def _generate_done(self, result):
        if self.active is not None and self.active["name"] == "decode":
            self.end(self.active["token"])
        shape = None
        if isinstance(result, self.torch.Tensor):
            shape = [int(s) for s in result.shape[:8]]
        kv_bytes, kv_tensors, kv_dtypes = self.kv or (None, None, {})
        self.channel.send(
            "generation",
            call=self.generate_calls,
            forwards=self.gen_forwards,
            output_shape=shape,
            kv_bytes=kv_bytes,
            kv_tensors=kv_tensors,
            kv_by_dtype=kv_dtypes,
        )
        self.generate_calls += 1
        self._maybe_done()

    def _opt_pre(self, optimizer, args, kwargs):
        self.opt_token = self.begin("optimizer_step")

    def _opt_post(self, optimizer, args, kwargs):
        self.end(getattr(self, "opt_token", None))
        if self.step == 0:
            found = []
            _walk_tensors(self.torch, list(optimizer.state.values()), set(), found)
            covered = 0
            for group in optimizer.param_groups:
                covered += sum(int(p.numel()) for p in group.get("params", []))
            self.channel.send(
                "optimizer",
                optimizer_class=_clip(type(optimizer).__name__, _MAX_NAME),
                state_bytes=sum(n for _, n in found),
                state_by_dtype=_by_dtype(found),
                parameters_covered=covered,
            )
        self.step += 1
        # torch is iterating its optimizer hook dict right now: removing a hook here would
        # break that loop, so the removal waits for the next forward (or the exit).
        if self.step >= self.max_steps:
            self.pending_uninstall = True

    def _maybe_done(self):
        if max(self.step, self.generate_calls) >= self.max_steps:
            self.uninstall("after %d steps" % self.max_steps)

    def _init_subclass(self, cls):
        gen = getattr(cls, "generate", None)
        if callable(gen) and not getattr(gen, "_gpumem_wrapped", False) and hasattr(gen, "__code__"):
            own = "generate" in cls.__dict__
            cls.generate = self._wrap_generate(gen)
            self.restores.append((cls, "generate", gen if own else None))

    # ---- install / uninstall ---------------------------------------------------
    def install(self):
        torch = self.torch
        from torch.nn.modules import module as mm

        g = self._guard
        self.handles.append(mm.register_module_forward_pre_hook(lambda m, a: g(self._pre_forward, m, a)))
        # with_kwargs: HF models are called with keyword tensors (input_ids=...), and the
        # global pre-hook does not see keywords; the first forward's shapes are read here.
        post = lambda m, a, k, o: g(self._post_forward, m, a, o, k)  # noqa: E731
        try:
            self.handles.append(mm.register_module_forward_hook(post, with_kwargs=True, always_call=True))
        except TypeError:  # torch < 2.1: no always_call
            self.handles.append(mm.register_module_forward_hook(post, with_kwargs=True))
        from torch.optim import optimizer as om

        if hasattr(om, "register_optimizer_step_pre_hook"):
            self.handles.append(om.register_optimizer_step_pre_hook(lambda o, a, k: g(self._opt_pre, o, a, k)))
            self.handles.append(om.register_optimizer_step_post_hook(lambda o, a, k: g(self._opt_post, o, a, k)))
        for owner, name in ((torch.Tensor, "backward"), (torch.autograd, "backward")):
            original = getattr(owner, name)
            setattr(owner, name, self._wrap_backward(original))
            self.restores.append((owner, name, original))
        module_cls = torch.nn.Module
        had = module_cls.__dict__.get("__init_subclass__")
        probe = self

        def init_subclass(cls, **kwargs):
            super(module_cls, cls).__init_subclass__(**kwargs)
            g(probe._init_subclass, cls)

        module_cls.__init_subclass__ = classmethod(init_subclass)
        self.restores.append((module_cls, "__init_subclass__", had))
        self.installed = True
        self.begin("model_load")

    def uninstall(self, why):
        """Removes every hook and wrapper; the rest of the program runs untouched."""
        if not self.installed:
            return
        self.installed = False
        for h in self.handles:
            h.remove()
        self.handles = []
        for owner, name, original in reversed(self.restores):
            try:
                if original is None:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)
            except (AttributeError, TypeError):
                pass
        self.restores = []
        self.removed_ns = _now()
        self.channel.send("hooks_removed", reason=why, steps=self.step, generate_calls=self.generate_calls)
        self.finish_history()

    def _history_step(self, fn, *args):
        """Runs a step of the history; a failure of its own ends the history (said to
        the agent), never the phases."""
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - never break the user's program
            h = self.history
            self.history = None
            if h is not None and not h.done:
                h.done = True
                try:
                    h.probe.reader.stop_history()
                except Exception:  # noqa: BLE001
                    pass
                self.channel.send(
                    "memory_history",
                    status="not_possible",
                    detail=_clip("recording the allocator history failed: %s: %s" % (type(e).__name__, e)),
                )
            return None

    def finish_history(self):
        """Writes the allocator history and tells the agent (once)."""
        h = self.history
        if h is None or h.done or h.pid != os.getpid():
            return
        fields = self._history_step(h.finish)
        if fields is not None:
            self.channel.send("memory_history", **fields)

    def failure(self, exc):
        """Records an uncaught exception: an OOM with its phase, or a crash."""
        torch = self.torch
        oom_type = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
        text = "%s: %s" % (type(exc).__name__, exc)
        is_oom = (oom_type is not None and isinstance(exc, oom_type)) or "out of memory" in str(exc).lower()
        ph = self.active or self.last_failed
        last = {}
        try:
            a, r = self.reader.current()
            ap, rp = self.reader.peaks()
            last = {"allocated_bytes": a, "reserved_bytes": r, "allocated_peak_bytes": ap, "reserved_peak_bytes": rp}
        except Exception:  # noqa: BLE001 - the device may be unusable
            pass
        self.channel.send(
            "failure",
            kind="oom" if is_oom else "exception",
            phase=ph["name"] if ph else None,
            step=ph["step"] if ph else None,
            exception_type=_clip(type(exc).__name__, _MAX_NAME),
            message=_clip(text),
            last=last,
        )
        if self.active is not None:
            self.end(self.active["token"], _clip(text, 500))
        # An out-of-memory error is where the history matters most: written now.
        self.finish_history()

    def bye(self):
        if self.active is not None:
            self.end(self.active["token"])
        if self.pending_uninstall:
            self.uninstall("after %d steps" % self.max_steps)
        self.finish_history()
        end = self.removed_ns or _now()
        self.channel.send(
            "bye",
            overhead_ns=self.overhead_ns,
            hook_calls=self.hook_calls,
            instrumented_ns=end - self.started_ns,
            steps=self.step,
            generate_calls=self.generate_calls,
        )


@contextlib.contextmanager
def phase(name):
    """Measures the enclosed block as a phase named ``name`` (e.g. "eval", "export").

    A no-op when the program does not run under ``gpumem-agent run``.
    """
    probe = _PROBE
    if probe is None:
        yield
        return
    label = "".join(c for c in str(name) if c.isalnum() or c in "_-.")[:_MAX_NAME] or "manual"
    token = probe._guard(probe.begin, label, True)
    try:
        yield
    except BaseException as e:
        probe._guard(probe.end, token, _clip("%s: %s" % (type(e).__name__, e)))
        raise
    probe._guard(probe.end, token)


def _on_torch_imported(torch):
    """Starts the probe once torch is importable (called by the import hook)."""
    global _PROBE
    if _PROBE is not None:
        return
    path = os.environ.get(_ENV_SOCKET)
    if not path:
        return
    steps = _env_int(_ENV_STEPS)
    steps = 3 if steps is None or steps < 1 else min(steps, 1000)
    try:
        channel = _Channel(path)
    except OSError as e:
        sys.stderr.write("gpumem_probe: cannot reach the agent (%s); not measuring\n" % e)
        return
    reader = _PENDING_READER or CudaReader(torch)
    probe = _Probe(torch, channel, reader, steps)
    probe.send_hello()
    entries = _env_int(_ENV_HISTORY_ENTRIES)
    if entries is not None and entries > 0:
        probe.history = _History(
            probe, entries, _env_int(_ENV_HISTORY_BYTES) or (8 << 20), os.path.dirname(os.path.abspath(path))
        )
        probe._history_step(probe.history.arm)
        if probe.history is not None and probe.history.unavailable is not None:
            probe.finish_history()
    probe.install()
    _PROBE = probe

    previous = sys.excepthook

    def excepthook(kind, value, tb):
        probe._guard(probe.failure, value)
        previous(kind, value, tb)

    sys.excepthook = excepthook
    import atexit

    atexit.register(lambda: probe._guard(probe.bye))


class _TorchLoader:
    """Wraps a watched module's loader so ``then`` runs right after its import finished."""

    def __init__(self, inner, then):
        self._inner = inner
        self._then = then

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        try:
            self._then(module)
        except Exception as e:  # noqa: BLE001 - never break the user's import
            sys.stderr.write("gpumem_probe: disabled (%s: %s)\n" % (type(e).__name__, e))

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _on_generation_utils_imported(module):
    """Wraps HF's ``GenerationMixin.generate`` (models inherit it without redefining it)."""
    probe = _PROBE
    mixin = getattr(module, "GenerationMixin", None)
    gen = getattr(mixin, "generate", None)
    if probe is None or not probe.installed or gen is None or getattr(gen, "_gpumem_wrapped", False):
        return
    mixin.generate = probe._wrap_generate(gen)
    probe.restores.append((mixin, "generate", gen))


class _TorchFinder:
    """A ``sys.meta_path`` finder that only reacts to two imports: ``torch`` (starts the
    probe) and HF's ``transformers.generation.utils`` (wraps ``generate``)."""

    _WATCHED = {"torch": "_on_torch_imported", "transformers.generation.utils": "_on_generation_utils_imported"}

    def __init__(self):
        self._busy = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self._WATCHED or fullname in self._busy:
            return None
        import importlib.util

        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _TorchLoader(spec.loader, globals()[self._WATCHED[fullname]])
        return spec


def _activate_from_env():
    """Called by the shipped sitecustomize: arms the import hook when under run."""
    if not os.environ.get(_ENV_SOCKET):
        return
    if "torch" in sys.modules:
        _on_torch_imported(sys.modules["torch"])
    sys.meta_path.insert(0, _TorchFinder())
