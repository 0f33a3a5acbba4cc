#!/usr/bin/env python3
"""Checks `gpumem-agent run --memory-history` on a GPU (tests/gpu/run.sh): PyTorch's
allocator history of a real run, attributed to the estimate's lines.

For every phase the probe measured, the attribution's replayed allocated bytes at that
phase's peak must cover at least 95 % (and at most 105 %) of the allocator's own peak
counter for the phase
(`torch.cuda.max_memory_allocated`, the probe's `allocated_peak_bytes`): the history
counts each request rounded up to 512 B, the counter counts whole blocks (a large block
the allocator did not split keeps up to 1 MiB more), so the two agree within that, and
a history that missed allocations (a window opened late, a ring buffer that wrapped)
falls short. It also prints each line's bytes at the highest peak beside the estimate's,
and checks that PyTorch's own viewer (`torch.cuda._memory_viz`) reads the snapshot.

    compare_history.py WORKLOAD.json SNAPSHOT.pickle
"""

import json
import pickle
import sys

COVERAGE = 0.95
# The history cannot hold more than the allocator allocated: past this, the replay is
# wrong (a block counted twice, a free it missed).
ABOVE = 1.05


def main():
    workload, snapshot = sys.argv[1], sys.argv[2]
    w = json.load(open(workload))
    ok = True
    print("== memory history: %s" % workload)
    if w.get("synthetic"):
        print("  SYNTHETIC result: not a GPU recording")
        return 1
    rank = w["ranks"][0]
    h = rank.get("memory_history") or {}
    print("  %s" % h.get("detail"))
    if h.get("status") != "recorded" or not h.get("attribution"):
        print("  no history recorded: FAILED")
        return 1
    a = h["attribution"]
    peaks = {(p["phase"], p["step"]): p for p in a["peaks"]}
    print("  %-24s %16s %16s %8s" % ("phase", "counter peak", "attributed", "cover"))
    worst = None
    for ph in rank["phases"]:
        counter = ph["allocator"]["allocated_peak_bytes"]
        p = peaks.get((ph["name"], ph["step"]))
        if counter is None or p is None or counter == 0:
            print("  %-24s %16s %16s %8s" % ("%s[%s]" % (ph["name"], ph["step"]), counter, p and p["allocated_bytes"], "-"))
            if p is None:
                print("  the history has no peak for this phase: FAILED")
                ok = False
            continue
        cover = p["allocated_bytes"] / counter
        worst = cover if worst is None else min(worst, cover)
        good = COVERAGE <= cover <= ABOVE
        flag = "" if good else "  OUTSIDE %.0f-%.0f %%" % (100 * COVERAGE, 100 * ABOVE)
        print("  %-24s %16d %16d %7.2f%%%s" % ("%s[%s]" % (ph["name"], ph["step"]), counter, p["allocated_bytes"], 100 * cover, flag))
        ok &= good
    if worst is None:
        print("  no phase to compare: FAILED")
        ok = False
    else:
        print("  lowest coverage: %.2f %% (needs %.0f %%)" % (100 * worst, 100 * COVERAGE))
    top = max(a["peaks"], key=lambda p: p["allocated_bytes"])
    computed = {l["item"]: l for l in rank["comparison"]["lines"]}
    items = {"weights": "weights", "gradients": "gradients", "optimizer_state": "optimizer_states",
             "activations": "activations", "kv_cache": "kv_cache"}
    print("  at the highest peak (%s[%s]), by line:" % (top["phase"], top["step"]))
    named = 0
    for line in top["lines"]:
        c = computed.get(items.get(line["line"], ""))
        est = c and c.get("computed_bytes")
        if line["line"] != "temporaries":
            named += line["bytes"]
        print("    %-16s %16d  estimate %16s" % (line["line"], line["bytes"], est))
    if top["allocated_bytes"]:
        print("  in the estimate's named lines (not temporaries): %.2f %%" % (100.0 * named / top["allocated_bytes"]))
    for d in rank["comparison"]["differences"]:
        if d["kind"] == "line_above_estimate":
            print("  above its estimate: %s" % d["explanation"])
    try:
        from torch.cuda import _memory_viz as viz

        snap = pickle.load(open(snapshot, "rb"))
        html = viz.trace_plot(snap)
        print("  memory_viz read the snapshot: %d trace entries, %d bytes of HTML" % (
            sum(len(t) for t in snap["device_traces"]), len(html)))
    except Exception as e:  # noqa: BLE001 - reported as a failure
        print("  memory_viz could not read the snapshot: %s: %s" % (type(e).__name__, e))
        ok = False
    print("  verdict:", "ok" if ok else "PAST TOLERANCE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
