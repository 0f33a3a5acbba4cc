#!/usr/bin/env python3
"""Cross-checks of `gpumem-agent run` on a GPU (tests/gpu/run.sh): the probe's figures
against the scripts' own torch.cuda counters, and NVML's process-tree timeline against
nvidia-smi. Prints a table; exits 1 when a check that must hold exactly does not.

    compare_run.py WORKLOAD.json STATS.json {train|generate}
"""

import json
import sys


def main():
    workload, stats, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    w = json.load(open(workload))
    s = json.load(open(stats))
    ok = True
    print("== run cross-check: %s (%s)" % (kind, workload))
    if w.get("synthetic"):
        print("  SYNTHETIC result: nothing to cross-check")
        return 1
    rank = w["ranks"][0]
    phases = rank["phases"]
    ends = [p for p in phases if p["name"] == ("optimizer_step" if kind == "train" else "decode")]
    script = s["after_optimizer_step" if kind == "train" else "after_generate"]
    print("  %-22s %18s %18s %6s" % ("checkpoint", "probe allocated", "script allocated", "equal"))
    for p, c in zip(ends, script):
        probe_alloc = p["allocator"]["allocated_end_bytes"]
        equal = c is not None and probe_alloc == c["allocated_bytes"]
        ok &= equal
        print("  %-22s %18s %18s %6s" % ("%s[%s]" % (p["name"], p["step"]), probe_alloc, c and c["allocated_bytes"], equal))
        print("  %-22s %18s %18s" % ("  reserved", p["allocator"]["reserved_end_bytes"], c and c["reserved_bytes"]))
    if len(ends) != len(script):
        print("  phases %d vs script checkpoints %d" % (len(ends), len(script)))
        ok = False
    for line in rank["comparison"]["lines"]:
        print("  %-18s computed %14s observed %14s  (%s)" % (line["item"], line["computed_bytes"], line["observed_bytes"], line["basis"]))
    for d in rank["comparison"]["differences"]:
        print("  difference %-28s %14s" % (d["kind"], d["bytes"]))
    ov = rank.get("overhead") or {}
    if ov.get("instrumented_ns"):
        share = 100.0 * ov["overhead_ns"] / ov["instrumented_ns"]
        print("  probe overhead: %.3f ms in %d hook calls = %.2f%% of %.1f ms instrumented (budget 1 %%)" % (
            ov["overhead_ns"] / 1e6, ov["hook_calls"], share, ov["instrumented_ns"] / 1e6))
        if share > 1.0:
            print("  probe overhead past its 1 % budget")
            ok = False
    else:
        print("  probe overhead: not reported")
        ok = False
    # NVML (agent's timeline, last samples) against nvidia-smi read by the script at its end.
    smi = s.get("nvidia_smi_used_mib_at_end")
    timeline = w["timeline"]
    if timeline.get("reason"):
        print("  NVML timeline: none (%s)" % timeline["reason"])
    else:
        peak = max((d.get("peak_bytes") or 0) for d in timeline["devices"])
        print("  NVML process-tree peak: %d B; nvidia-smi at the script's end: %s MiB" % (peak, smi))
        if smi is not None and peak < smi * 1024 * 1024:
            print("  NVML peak below nvidia-smi's end value: UNEXPECTED")
            ok = False
    print("  verdict:", "ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
