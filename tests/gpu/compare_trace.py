#!/usr/bin/env python3
"""Traced, computed and observed side by side for the tiny Llama (tests/gpu/run.sh):
`gpumem-agent trace --json` (the model's code on the meta device, no GPU), the
estimator's lines (`estimate --json`) and what `gpumem-agent run` observed on the GPU
for the same workload. Prints a table; exits 1 when a figure is past its tolerance.

    compare_trace.py TRACE.json ESTIMATE.json WORKLOAD.json {train|generate}

Tolerances (what the trace leaves out on a real device, and why each is this size):

- model_load, allocated at its end: EXACT. Parameters, buffers and the input ids are
  each one allocation rounded to 512 B on both sides; nothing else exists yet.
- Each phase of the steady step (training step 1; generation: prefill and decode of the
  first generate call), allocated peak minus allocated start (the phase's own growth)
  and end minus start: within max(3 %, 4 MiB). The trace has no kernel workspaces:
  cuBLAS/cuBLASLt workspaces (allocated once, in step 0, so they cancel in step 1's
  differences) and FlashAttention's backward scratch (dq accumulator and softmax sums in
  fp32: for 4 × 256 tokens × 8 heads × 64 dims, 2 MiB), which the 4 MiB floor covers.
- Reserved peak of the whole run: within max(10 %, 64 MiB) of the observed one (the
  allocator model has no CUDA graphs pools, no stream-ordered frees and no workspaces).
- Computed (estimator) against traced: weights, gradients and optimizer states within
  0.5 % (the trace rounds every tensor to 512 B; the estimator counts values).
"""

import json
import sys

MIB = 1 << 20


def within(traced, observed, rel, floor):
    return abs(traced - observed) <= max(rel * max(abs(observed), 1), floor)


def main():
    trace_path, estimate_path, workload_path, kind = sys.argv[1:5]
    trace = json.load(open(trace_path))
    est = json.load(open(estimate_path))
    work = json.load(open(workload_path))
    ok = True
    print("== traced / computed / observed: tiny Llama %s" % kind)
    if work.get("synthetic"):
        print("  SYNTHETIC workload result: nothing to compare")
        return 1
    phases = work["ranks"][0]["phases"]

    def observed(name, step):
        for p in phases:
            if p["name"] == name and p.get("step") == step and not p.get("error"):
                return p["allocator"]
        return None

    def row(label, t, o, good, tol):
        nonlocal ok
        ok &= good
        print("  %-34s traced %14s observed %14s  %-9s %s" % (label, t, o, "ok" if good else "PAST TOL", tol))

    # model_load: exact.
    t_load = trace["phases"][0]
    o_load = observed("model_load", None) or observed("model_load", 0)
    if o_load is None:
        print("  model_load: not observed")
        ok = False
    else:
        row("model_load allocated end", t_load["allocated_end_bytes"], o_load["allocated_end_bytes"],
            t_load["allocated_end_bytes"] == o_load["allocated_end_bytes"], "exact")

    if kind == "train":
        steady = [("forward", 1), ("backward", 1), ("optimizer_step", 1)]
        t_steps = {(p["name"], p["step"]): p for p in trace["phases"]}
    else:
        steady = [("prefill", 0), ("decode", 0)]
        t_steps = {(p["name"], 0): p for p in trace["phases"] if p["name"] in ("prefill", "decode")}
    for name, step in steady:
        t = t_steps.get((name, step))
        o = observed(name, step)
        if t is None or o is None:
            print("  %s[%s]: missing (traced %s, observed %s)" % (name, step, t is not None, o is not None))
            ok = False
            continue
        t_growth = t["allocated_peak_bytes"] - t["allocated_start_bytes"]
        o_growth = o["allocated_peak_bytes"] - o["allocated_start_bytes"]
        row("%s[%s] peak - start" % (name, step), t_growth, o_growth,
            within(t_growth, o_growth, 0.03, 4 * MIB), "max(3 %, 4 MiB)")
        t_net = t["allocated_end_bytes"] - t["allocated_start_bytes"]
        o_net = o["allocated_end_bytes"] - o["allocated_start_bytes"]
        row("%s[%s] end - start" % (name, step), t_net, o_net,
            within(t_net, o_net, 0.03, 4 * MIB), "max(3 %, 4 MiB)")

    t_res = max(p["reserved_peak_bytes"] for p in trace["phases"])
    o_res = max((p["allocator"].get("reserved_peak_bytes") or 0) for p in phases)
    row("reserved peak (whole run)", t_res, o_res, within(t_res, o_res, 0.10, 64 * MIB), "max(10 %, 64 MiB)")

    # Computed against traced, per category, at the end of the steady step.
    lines = {l["key"]: l["bytes"] for l in est["lines"]}
    weights = sum(b for k, b in lines.items() if k.startswith("weights"))
    end = trace["phases"][-1]["at_peak"]
    pairs = [("weights", weights, end["parameters"])]
    if kind == "train":
        pairs += [("gradients", lines.get("training.gradients", 0), end["gradients"]),
                  ("optimizer states", lines.get("training.optimizer", 0), end["optimizer_state"])]
    for label, c, t in pairs:
        good = within(t, c, 0.005, 0)
        ok &= good
        print("  %-34s computed %14s traced %14s  %-9s 0.5 %%" % (label, c, t, "ok" if good else "PAST TOL"))
    for k in ("activations", "logits", "prefill.mlp", "prefill.logits"):
        if k in lines:
            print("  %-34s estimate %14s  (%s)" % (k, lines[k], "traced" if any(
                l["key"] == k and l["kind"] == "traced" for l in est["lines"]) else "assumed"))
    print("  verdict:", "ok" if ok else "PAST TOLERANCE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
