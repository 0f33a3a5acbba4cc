"""The recording stand-in for the probe's memory reader (tests only, on CPU).

It records every call so tests can check the order of method §7 (synchronise → current →
reset peaks … synchronise → peaks → current → device memory) and returns SYNTHETIC,
deterministic counters: they are not memory of anything and must never be read as GPU
figures (the probe reports its reader as "recording-standin", and the agent then labels
the whole result SYNTHETIC). Its allocator history (below) is SYNTHETIC in the same way.
"""

MIB = 1 << 20


class RecordingReader:
    kind = "recording-standin"

    def __init__(self):
        self.calls = []
        self.tick = 0

    def _note(self, name):
        if len(self.calls) < 100000:
            self.calls.append(name)

    def device(self):
        return None

    def synchronize(self):
        self._note("synchronize")

    def current(self):
        self._note("current")
        self.tick += 1
        return self.tick * MIB, self.tick * 2 * MIB

    def reset_peaks(self):
        self._note("reset_peaks")

    def peaks(self):
        self._note("peaks")
        return (self.tick + 1) * MIB, (self.tick + 1) * 2 * MIB

    def device_memory(self):
        self._note("device_memory")
        return None, None

    def tag(self, text):
        self._note("tag")
        if getattr(self, "_h", None) is not None:
            # A phase's own frees carry its tag: the plan runs before the tag is cleared.
            if text:
                self._h["meta"] = text
            self._synthetic_phase(text)
            self._h["meta"] = text

    # ---- a SYNTHETIC allocator history (run --memory-history on CPU) -------------
    # Not PyTorch's recorder: a fixed plan of allocations driven by the probe's phase tags
    # (weights at model_load, activations kept from each forward to its backward,
    # gradients made once in a backward, optimizer state once in an optimizer step, a KV
    # cache growing over prefill and decode, a temporary in every phase), in the shape
    # `torch.cuda.memory._snapshot()` returns, so that the probe's bounds, the converter,
    # the agent's attribution, the document and the page are exercised without a GPU.
    # Its sizes are not memory of anything.
    history_source = "synthetic"

    SEGMENT = 256 * MIB
    PLAN = {
        "weights": (4, 4 * MIB),
        "activations": (2, 3 * MIB),
        "gradients": (4, 4 * MIB),
        "optimizer_state": (8, 4 * MIB),
    }

    def _history_init(self):
        if getattr(self, "_h", None) is None:
            self._h = {
                "recording": False,
                "meta": "",
                "trace": [],
                "time": 0,
                "segments": [],  # [address, size]
                "top": 0,
                "live": {},  # address -> (size, frames)
                "kept": {k: [] for k in ("weights", "activations", "gradients", "optimizer_state", "kv")},
                "temps": [],
                "phase": None,
            }
        return self._h

    def history_unavailable(self):
        return None

    def when_initialised(self, fn):
        fn()
        return True

    def record_history(self, max_entries, clear=False):
        h = self._history_init()
        h["recording"] = True
        h["max"] = max_entries
        if clear:
            h["trace"] = []

    def stop_history(self):
        self._history_init()["recording"] = False

    def set_metadata(self, text):
        self._history_init()["meta"] = text

    def _event(self, action, addr, size, frames=()):
        h = self._history_init()
        h["time"] += 1
        if not h["recording"]:
            return
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": h["time"], "frames": list(frames)}
        if h["meta"]:
            e["user_metadata"] = h["meta"]
        h["trace"].append(e)
        if len(h["trace"]) > h["max"]:
            del h["trace"][0]

    def _alloc(self, size, name, line, file="<synthetic>/train.py"):
        h = self._history_init()
        last = h["segments"][-1] if h["segments"] else None
        if last is None or h["top"] + size > last[0] + last[1]:
            base = (len(h["segments"]) + 1) << 36
            h["segments"].append([base, self.SEGMENT])
            h["top"] = base
            self._event("segment_alloc", base, self.SEGMENT)
        addr = h["top"]
        h["top"] += size
        frames = [{"filename": file, "line": line, "name": name}]
        h["live"][addr] = (size, frames)
        self._event("alloc", addr, size, frames)
        return addr

    def _free(self, addr):
        h = self._history_init()
        size, _ = h["live"].pop(addr)
        self._event("free_requested", addr, size)
        self._event("free_completed", addr, size)

    def _synthetic_phase(self, text):
        h = self._history_init()
        kept = h["kept"]
        if not text:
            # The phase ended: its temporaries go, and a backward frees the activations.
            for a in h["temps"]:
                self._free(a)
            h["temps"] = []
            if h["phase"] == "backward":
                for a in kept["activations"]:
                    self._free(a)
                kept["activations"] = []
            h["phase"] = None
            return
        parts = text.split(":")
        name = parts[1] if len(parts) > 1 else "manual"
        h["phase"] = name
        plan = self.PLAN
        if name == "model_load":
            n, size = plan["weights"]
            kept["weights"] += [self._alloc(size, "__init__", 10 + i, "<synthetic>/model.py") for i in range(n)]
            return
        if name == "forward":
            n, size = plan["activations"]
            for i in range(n):
                h["meta"] = text + ":model.layers.%d" % i
                kept["activations"].append(self._alloc(size, "forward", 20 + i, "<synthetic>/model.py"))
            h["meta"] = text
        elif name == "backward" and not kept["gradients"]:
            n, size = plan["gradients"]
            kept["gradients"] = [self._alloc(size, "backward", 30 + i) for i in range(n)]
        elif name == "optimizer_step" and not kept["optimizer_state"]:
            n, size = plan["optimizer_state"]
            kept["optimizer_state"] = [self._alloc(size, "_init_group", 40 + i, "<synthetic>/adamw.py") for i in range(n)]
        elif name == "prefill":
            for a in kept["kv"]:
                self._free(a)
            kept["kv"] = [self._alloc(2 * MIB, "update", 50, "<synthetic>/cache_utils.py")]
        elif name == "decode":
            kept["kv"].append(self._alloc(MIB, "update", 51, "<synthetic>/cache_utils.py"))
        h["temps"].append(self._alloc(MIB, "forward", 60))

    def snapshot(self):
        h = self._history_init()
        segments = []
        for base, size in h["segments"]:
            blocks = []
            allocated = 0
            at = base

            def gap(to):
                # The segment's free space between live blocks, as the allocator lists it.
                if to > at:
                    blocks.append({"address": at, "size": to - at, "requested_size": 0, "state": "inactive", "frames": []})

            for addr in sorted(a for a in h["live"] if base <= a < base + size):
                n, frames = h["live"][addr]
                gap(addr)
                allocated += n
                blocks.append(
                    {"address": addr, "size": n, "requested_size": n, "state": "active_allocated", "frames": frames}
                )
                at = addr + n
            gap(base + size)
            segments.append(
                {
                    "device": 0,
                    "address": base,
                    "total_size": size,
                    "stream": 0,
                    "segment_type": "large",
                    "allocated_size": allocated,
                    "active_size": allocated,
                    "requested_size": allocated,
                    "blocks": blocks,
                }
            )
        return {"segments": segments, "device_traces": [list(h["trace"])]}
