#!/usr/bin/env python3
"""PyTorch cross-check of gpumem-agent's measurement network (tests/gpu/run.sh).

Builds the same network as the agent (layers x Linear(width, width) with bias, ReLU in
place, input [batch*context, width], one dtype), runs the same phases with the default
protocol (synchronize; read start; reset peaks; run; synchronize; read peaks and end),
and prints one JSON document with torch.cuda.memory_allocated / memory_reserved and
their max_ variants per phase. Run it with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
so both sides use a CUDA stream-ordered pool.
"""
import argparse
import json
import sys
import time

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0x5EED)
    a = ap.parse_args()

    dev = torch.device(a.device)
    dt = DTYPES[a.dtype]
    torch.cuda.set_device(dev)
    torch.manual_seed(a.seed)
    rows = a.batch * a.context
    state = {"layers": [], "x": None, "out": None}
    phases = []

    def read():
        return torch.cuda.memory_allocated(dev), torch.cuda.memory_reserved(dev)

    def phase(name, fn, repeat=None, iterations=0):
        torch.cuda.synchronize(dev)
        a0, r0 = read()
        torch.cuda.reset_peak_memory_stats(dev)
        t0 = time.perf_counter_ns()
        status, error = "ok", None
        try:
            fn()
        except torch.cuda.OutOfMemoryError as e:  # noqa: PERF203
            status, error = "failed", str(e)
        torch.cuda.synchronize(dev)
        wall = time.perf_counter_ns() - t0
        a1, r1 = read()
        phases.append({
            "phase": name, "repeat": repeat, "iterations": iterations,
            "status": status, "error": error,
            "allocated_start_bytes": a0, "reserved_start_bytes": r0,
            "allocated_peak_bytes": torch.cuda.max_memory_allocated(dev),
            "reserved_peak_bytes": torch.cuda.max_memory_reserved(dev),
            "allocated_end_bytes": a1, "reserved_end_bytes": r1,
            "wall_time_ns": wall,
        })
        return status == "ok"

    def model_load():
        # Weight then bias per layer, as the agent allocates them; init in place.
        for _ in range(a.layers):
            lin = torch.nn.Linear(a.width, a.width, bias=True, device=dev, dtype=dt)
            state["layers"].append(lin)

    def inputs():
        state["x"] = torch.empty(rows, a.width, device=dev, dtype=dt).uniform_(-1.0, 1.0)

    def forward():
        h = state["x"]
        for lin in state["layers"]:
            # lin(h) allocates act{l}; rebinding h frees act{l-1} (never the input).
            h = torch.relu_(lin(h))
        # The previous output is freed only after the new one exists (out = model(x)).
        state["out"] = h

    def passes(n):
        def run():
            for _ in range(n):
                forward()
        return run

    with torch.no_grad():
        ok = phase("model_load", model_load)
        ok = ok and phase("inputs", inputs)
        ok = ok and phase("cold_forward", passes(1), iterations=1)
        ok = ok and phase("warmup", passes(a.warmup), iterations=a.warmup)
        for r in range(a.repeats):
            if not ok:
                break
            ok = phase("warm_forward", passes(1), repeat=r, iterations=1)

    json.dump({
        "tool": "tests/gpu/torch_crosscheck.py",
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "allocator_backend": torch.cuda.get_allocator_backend(),
        "device": a.device,
        "gpu_name": torch.cuda.get_device_name(dev),
        "dimensions": {"batch": a.batch, "context": a.context, "width": a.width,
                       "layers": a.layers, "dtype": a.dtype},
        "warmup_iterations": a.warmup, "warm_repeats": a.repeats,
        "phases": phases,
    }, sys.stdout, indent=2)
    print()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
