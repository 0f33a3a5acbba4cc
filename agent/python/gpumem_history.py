"""gpumem_history: PyTorch's memory snapshot as gpumem's history document, bounded.

``torch.cuda.memory._snapshot()`` returns the allocator's segments (what is reserved
now, block by block) and ``device_traces`` (every ``alloc``, ``free_requested``,
``free_completed``, ``segment_alloc`` / ``segment_free`` — ``segment_map`` /
``segment_unmap`` with expandable segments — and ``oom`` since recording began, at most
``max_entries`` of them, each with its Python frames innermost first); see the
``Snapshot`` TypedDict in torch/cuda/memory.py. :func:`from_snapshot` turns one device's
part of it into ``gpumem.history/v1`` (gpumem_proto::history): frames and stacks
interned, at most ``MAX_STACK_DEPTH`` frames per stack (torch's module-call plumbing
left out, and of torch's own frames only the three innermost), the last ``MAX_EVENTS`` events, each tagged with the phase and module scope
the probe set through ``torch.cuda.memory._set_memory_metadata``
(``gpumem:<phase>:<step>[:<scope>]``), or, where an entry carries no metadata, with the
phase whose wall-clock span holds its ``time_us``.

The blocks allocated before the window opened (recording started after the program's
first allocations, or the ring buffer wrapped) are rebuilt from the segments and from
frees of blocks the window never saw allocated, so that a replay starts from the right
state. ``gpumem-agent run`` and ``gpumem-agent trace`` both use this module: the trace
writes the same snapshot shape from the meta device.
"""

import bisect
import json

SCHEMA = "gpumem.history/v1"

# Bounds of gpumem_proto::history (a test checks they agree).
MAX_EVENTS = 200000
MAX_FRAMES = 50000
MAX_STACKS = 100000
MAX_STACK_DEPTH = 12
MAX_NAMES = 10000
MAX_NAME_CHARS = 300
MAX_BEFORE = 200000

_ACTIONS = {
    "alloc": "alloc",
    "free_completed": "free",
    "segment_alloc": "segment_alloc",
    "segment_map": "segment_alloc",
    "segment_free": "segment_free",
    "segment_unmap": "segment_free",
    "oom": "oom",
}

# torch.nn.Module's call plumbing: in every stack, never the answer to "who made it".
_PLUMBING = ("_call_impl", "_wrapped_call_impl")
# torch's own frames kept per stack (the innermost ones).
_FRAMEWORK_FRAMES = 3


def _clip(text):
    text = str(text)
    return text if len(text) <= MAX_NAME_CHARS else text[: MAX_NAME_CHARS - 1] + "…"


class _Interner:
    def __init__(self, limit):
        self.index = {}
        self.items = []
        self.limit = limit

    def get(self, key, item=None):
        i = self.index.get(key)
        if i is None:
            if len(self.items) >= self.limit:
                return None
            i = len(self.items)
            self.index[key] = i
            self.items.append(key if item is None else item)
        return i


def _tag(metadata):
    """(phase name, step, scope) from the probe's ``gpumem:…`` metadata, or None."""
    if not isinstance(metadata, str) or not metadata.startswith("gpumem:"):
        return None
    parts = metadata.split(":", 3)
    if len(parts) < 3:
        return None
    name, step = parts[1], parts[2]
    step = int(step) if step.isdigit() else None
    scope = parts[3] if len(parts) == 4 and parts[3] else None
    return name, step, scope


class _Builder:
    def __init__(self, max_depth):
        self.max_depth = max_depth
        self.frames = _Interner(MAX_FRAMES)
        self.stacks = _Interner(MAX_STACKS)
        self.phases = _Interner(MAX_NAMES)
        self.scopes = _Interner(MAX_NAMES)

    def stack(self, frames):
        if not frames:
            return None
        kept = []
        framework = 0
        for f in frames:
            if len(kept) >= self.max_depth:
                break
            try:
                file, line, name = f.get("filename", ""), int(f.get("line", 0)), f.get("name", "")
            except (AttributeError, TypeError, ValueError):
                continue
            if name in _PLUMBING and str(file).endswith("module.py"):
                continue
            if "/torch/" in str(file):
                # torch's own frames: the innermost few name the operator; the rest
                # (dispatch, optimizer plumbing) would crowd out the program's code.
                framework += 1
                if framework > _FRAMEWORK_FRAMES:
                    continue
            key = (_clip(file), max(0, min(line, 2**32 - 1)), _clip(name))
            i = self.frames.get(key, {"file": key[0], "line": key[1], "name": key[2]})
            if i is None:
                break
            kept.append(i)
        if not kept:
            return None
        return self.stacks.get(tuple(kept), kept)

    def phase(self, name, step):
        return self.phases.get((_clip(name), step), {"name": _clip(name), "step": step})

    def scope(self, scope):
        return None if scope is None else self.scopes.get(_clip(scope))


def _device_trace(snapshot, device):
    traces = snapshot.get("device_traces") or []
    if device is not None and 0 <= device < len(traces):
        return traces[device] or []
    for t in traces:
        if t:
            return t
    return []


def from_snapshot(
    snapshot,
    *,
    source,
    device=None,
    vocab=None,
    torch_version=None,
    marks=(),
    max_events=MAX_EVENTS,
    max_depth=MAX_STACK_DEPTH,
    max_bytes=None,
):
    """The history document of ``snapshot`` for ``device`` (the first device with a
    trace when None). ``marks``: ``(begin_us, end_us, name, step)`` of each phase, for
    entries without the probe's metadata. With ``max_bytes``, the document's JSON is at
    most that long: the oldest events are left out (and counted) until it fits."""
    kwargs = dict(source=source, device=device, vocab=vocab, torch_version=torch_version, marks=marks, max_depth=max_depth)
    doc = _convert(snapshot, max_events=max_events, **kwargs)
    if max_bytes is None:
        return doc
    for _ in range(8):
        size = len(json.dumps(doc, separators=(",", ":")))
        if size <= max_bytes or not doc["events"]:
            break
        # Events dominate the size: keep the share that fits, with a tenth to spare.
        keep = int(len(doc["events"]) * max_bytes / size * 0.9)
        doc = _convert(snapshot, max_events=max(0, min(keep, len(doc["events"]) - 1)), **kwargs)
    else:
        size = len(json.dumps(doc, separators=(",", ":")))
    if size > max_bytes:
        doc["notes"].append("still %d bytes with the oldest events left out (over the cap of %d)" % (size, max_bytes))
    elif doc["dropped_events"]:
        doc["notes"].append("events left out to keep the history within %d bytes" % max_bytes)
    return doc


def _convert(snapshot, *, source, device, vocab, torch_version, marks, max_events, max_depth):
    entries = _device_trace(snapshot, device)
    total = len(entries)
    max_events = max(0, min(int(max_events), MAX_EVENTS))
    dropped = max(0, total - max_events)
    entries = entries[dropped:]
    frees = "free_completed" if any(e.get("action") == "free_completed" for e in entries) else "free_requested"
    actions = dict(_ACTIONS)
    actions[frees] = "free"
    b = _Builder(max(1, min(int(max_depth), MAX_STACK_DEPTH)))
    marks = sorted(m for m in marks if m[0] is not None and m[1] is not None)
    starts = [m[0] for m in marks]
    events = []
    seen_alloc = set()
    live_in_window = {}
    before = {}
    segment_delta = 0
    notes = []
    untagged = 0
    for e in entries:
        action = actions.get(e.get("action"))
        if action is None:
            continue
        addr = int(e.get("addr", 0) or 0)
        size = int(e.get("size", 0) or 0)
        tag = _tag(e.get("user_metadata"))
        phase = scope = None
        if tag is not None:
            phase = b.phase(tag[0], tag[1])
            scope = b.scope(tag[2])
        elif marks and e.get("time_us") is not None:
            t = e["time_us"]
            i = bisect.bisect_right(starts, t) - 1
            if i >= 0 and t <= marks[i][1]:
                phase = b.phase(marks[i][2], marks[i][3])
        else:
            untagged += 1
        ev = {"action": action, "address": addr, "size": size}
        if phase is not None:
            ev["phase"] = phase
        if scope is not None:
            ev["scope"] = scope
        if action == "alloc":
            stack = b.stack(e.get("frames"))
            if stack is not None:
                ev["stack"] = stack
            seen_alloc.add(addr)
            live_in_window[addr] = True
        elif action == "free":
            if addr not in seen_alloc and addr not in before and len(before) < MAX_BEFORE:
                before[addr] = {"address": addr, "size": size}
            live_in_window.pop(addr, None)
        elif action == "segment_alloc":
            segment_delta += size
        elif action == "segment_free":
            segment_delta -= size
        events.append(ev)
    reserved_now = 0
    for seg in snapshot.get("segments") or []:
        if device is not None and seg.get("device", device) != device:
            continue
        reserved_now += int(seg.get("total_size", 0) or 0)
        for blk in seg.get("blocks") or []:
            if blk.get("state") not in ("active_allocated", "active_awaiting_free"):
                continue
            addr = int(blk.get("address", 0) or 0)
            if addr in seen_alloc or addr in before or len(before) >= MAX_BEFORE:
                continue
            size = int(blk.get("requested_size", blk.get("size", 0)) or 0)
            entry = {"address": addr, "size": size}
            stack = b.stack(blk.get("frames"))
            if stack is not None:
                entry["stack"] = stack
            before[addr] = entry
    if untagged:
        notes.append("%d event(s) carried no phase" % untagged)
    if dropped:
        notes.append("the first %d of %d events were left out (the bounds on events and bytes)" % (dropped, total))
    doc = {
        "schema": SCHEMA,
        "source": source,
        "phases": b.phases.items,
        "scopes": b.scopes.items,
        "frames": b.frames.items,
        "stacks": b.stacks.items,
        "before": sorted(before.values(), key=lambda x: x["address"]),
        "reserved_before_bytes": max(0, reserved_now - segment_delta),
        "events": events,
        "dropped_events": dropped,
        "notes": notes,
    }
    if torch_version is not None:
        doc["torch_version"] = str(torch_version)
    if device is not None:
        doc["device"] = int(device)
    if vocab:
        doc["vocab"] = int(vocab)
    return doc
