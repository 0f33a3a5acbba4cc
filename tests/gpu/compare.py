#!/usr/bin/env python3
"""Summarises a tests/gpu/run.sh folder: computed vs observed per phase, the agent vs
PyTorch cross-check, the protocol's overhead budget, and the induced failures.
Standard library only. Usage: compare.py OUTDIR"""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def label(p):
    return p["phase"] if p.get("repeat") is None else f'{p["phase"]}[{p["repeat"]}]'


def main(out):
    f32 = load(os.path.join(out, "measure-f32.json"))
    if not f32:
        print("compare: no measure-f32.json")
        return 1
    run = f32["runs"][0]
    comp = {c["phase"]: c for c in (run.get("computed") or {}).get("phases", [])}
    print("\n== computed (gpumem-core) vs observed allocated, float32 seed dims ==")
    print(f'{"phase":<16}{"computed peak":>16}{"observed peak":>16}{"diff":>12}{"reserved peak":>16}{"device used end":>18}')
    for p in run["phases"]:
        c = comp.get(p["phase"], {})
        o = p["pool"]["allocated_peak_bytes"]
        cp = c.get("allocated_peak_bytes")
        diff = (o - cp) if (o is not None and cp is not None) else None
        print(f'{label(p):<16}{cp!s:>16}{o!s:>16}{diff!s:>12}{p["pool"]["reserved_peak_bytes"]!s:>16}{p["device_level"]["used_end_bytes"]!s:>18}')

    torch = load(os.path.join(out, "torch-f32.json"))
    if torch:
        print(f'\n== agent vs PyTorch {torch["torch_version"]} ({torch["allocator_backend"]}) ==')
        print(f'{"phase":<16}{"agent alloc peak":>18}{"torch alloc peak":>18}{"agent resv peak":>18}{"torch resv peak":>18}')
        tp = {label(p): p for p in torch["phases"]}
        for p in run["phases"]:
            t = tp.get(label(p), {})
            print(f'{label(p):<16}{p["pool"]["allocated_peak_bytes"]!s:>18}{t.get("allocated_peak_bytes")!s:>18}'
                  f'{p["pool"]["reserved_peak_bytes"]!s:>18}{t.get("reserved_peak_bytes")!s:>18}')

    warm = [p for p in run["phases"] if p["phase"] == "warm_forward" and p.get("wall_time_ns")]
    over = [p["protocol_overhead_ns"] for p in run["phases"] if p.get("protocol_overhead_ns") is not None]
    if warm and over:
        wf = sorted(p["wall_time_ns"] for p in warm)[len(warm) // 2]
        ov = sorted(over)[len(over) // 2]
        print(f"\n== budget: protocol overhead per phase (median) {ov} ns vs warm forward (median) {wf} ns = {100.0 * ov / wf:.2f} % (aim < 1 %) ==")

    for name in ("oom-model-load", "oom-forward"):
        r = load(os.path.join(out, f"{name}.json"))
        if not r:
            print(f"{name}: no result")
            continue
        x = r["runs"][0]
        last = x["phases"][-1] if x["phases"] else {}
        print(f'{name}: status {x["status"]}, failed phase {x["failed_phase"]}, error {str(x["error"])[:120]!r}, '
              f'last allocated peak {last.get("pool", {}).get("allocated_peak_bytes")}')
    bis = load(os.path.join(out, "bisect-width", "bisect-summary.json"))
    if bis:
        print(f'bisect width: largest passing {bis["largest_passing"]}, smallest failing {bis["smallest_failing"]}, {len(bis["trials"])} trials')
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "gpu-results"))
