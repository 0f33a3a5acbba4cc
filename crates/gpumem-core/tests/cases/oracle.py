#!/usr/bin/env python3
"""Independent oracle for the estimator's fixture cases.

Writes one JSON case per file: the inputs (CLI flags / URL keys) and the bytes each
line must have. The figures are derived here, in Python, straight from the formats'
published layouts and the models' published config.json numbers -- a second
implementation, so the Rust estimator is checked against arithmetic it did not do.
Run it by hand after changing a case; the Rust test only reads the JSON files.
"""
import json, math, pathlib

HERE = pathlib.Path(__file__).parent
GIB = 1 << 30

def cdiv(a, b): return -(-a // b)

def linear_bytes(fmt, out, inp):
    n = out * inp
    if fmt == "bf16": return 2 * n
    if fmt == "fp32": return 4 * n
    if fmt.startswith("gptq-4-g"):
        g = int(fmt.split("-g")[1]); b = 4; groups = cdiv(inp, g)
        return cdiv(inp * b, 32) * out * 4 + groups * cdiv(out * b, 32) * 4 + groups * out * 2 + inp * 4
    if fmt.startswith("awq-4-g"):
        g = int(fmt.split("-g")[1]); groups = cdiv(inp, g)
        return inp * cdiv(out * 4, 32) * 4 + groups * cdiv(out * 4, 32) * 4 + groups * out * 2
    if fmt == "nf4":
        return cdiv(n, 2) + cdiv(n, 64) * 4 + 64
    if fmt == "nf4-dq":
        blocks = cdiv(n, 64)
        return cdiv(n, 2) + blocks + 64 + cdiv(blocks, 256) * 4 + 1024
    if fmt == "q4_k": return out * (inp // 256) * 144
    if fmt == "q8_0": return out * (inp // 32) * 34
    if fmt == "fp8": return n + 4
    if fmt == "fp8-block": return n + cdiv(out, 128) * cdiv(inp, 128) * 4
    if fmt == "int8": return n + out * 4
    raise ValueError(fmt)

def model_lines(c, fmt="bf16"):
    """Bytes per class for a decoder-only transformer (16-bit non-linear parts)."""
    h, L, q, kv = c["hidden"], c["layers"], c["heads"] * c["head-dim"], c["kv-heads"] * c["head-dim"]
    lines = {}
    lines["weights.embeddings"] = 2 * c["vocab"] * h
    attn = linear_bytes(fmt, q, h) + 2 * linear_bytes(fmt, kv, h) + linear_bytes(fmt, h, q)
    if c.get("qkv-bias"): attn += 2 * (q + 2 * kv)
    lines["weights.attention"] = L * attn
    def mlp(inter, count):
        return count * (2 * linear_bytes(fmt, inter, h) + linear_bytes(fmt, h, inter))
    if "experts" in c:
        e, ei = c["experts"], c["expert-intermediate"]
        lines["weights.mlp"] = mlp(ei, L * e) + L * 2 * e * h
    else:
        lines["weights.mlp"] = mlp(c["intermediate"], L)
    lines["weights.norms"] = 2 * (2 * L * h + h)
    if not c.get("tied-embeddings"):
        lines["weights.lm_head"] = 2 * c["vocab"] * h
    return lines

def kv(c, tokens, seqs=1, nbytes=2, window=None, sliding_layers=None):
    per_layer = lambda t: 2 * c["kv-heads"] * c["head-dim"] * t * nbytes
    L = c["layers"]
    s = 0 if window is None else (L if sliding_layers is None else sliding_layers)
    kept = tokens if window is None else min(tokens, window)
    return seqs * (per_layer(tokens) * (L - s) + per_layer(kept) * s)

def write(name, source, inputs, expect, extra=None):
    case = {"name": name, "source": source, "input": {k: str(v) for k, v in inputs.items()}, "expect": expect}
    if extra: case.update(extra)
    (HERE / f"{name}.json").write_text(json.dumps(case, indent=2) + "\n")

def arch_inputs(c):
    keys = ["layers", "hidden", "heads", "kv-heads", "head-dim", "intermediate", "vocab", "experts", "active-experts", "expert-intermediate"]
    d = {k: c[k] for k in keys if k in c}
    for flag in ["qkv-bias", "tied-embeddings"]:
        if c.get(flag): d[flag] = "true"
    return d

# Seed §2: 7e9 parameters x 2 B, + 4 GiB reserve.
write("seed-s2-7b-bf16", "seed §2 / §9: estimate --parameters 7000000000 --bits 16 --reserve-gib 4",
      {"parameters": 7000000000, "bits": 16, "reserve-gib": 4},
      {"weights_bytes": 14_000_000_000, "kv_cache_bytes": 0, "reserve_bytes": 4 * GIB,
       "total_bytes": 14_000_000_000 + 4 * GIB, "lines": {"weights": 14_000_000_000, "reserve": 4 * GIB}},
      {"display": {"weights": ["14.00", "13.04"], "total": ["18.29", "17.04"]}})

# Seed §4: 32 layers, 8 KV heads, dim 128, 8192 tokens, 2 B, 1 and 4 sequences.
seed4 = {"layers": 32, "hidden": 4096, "heads": 32, "kv-heads": 8, "head-dim": 128, "intermediate": 14336, "vocab": 128256}
for seqs in (1, 4):
    w = model_lines(seed4)
    write(f"seed-s4-kv-{seqs}seq", "seed §4 worked example (Llama-3.1-8B shape)",
          {**arch_inputs(seed4), "context": 8192, "sequences": seqs, "kv-dtype": "fp16", "reserve-gib": 0},
          {"kv_cache_bytes": seqs * GIB, "lines": {"kv_cache": seqs * GIB}})

MODELS = {
    # huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
    "llama-3.1-8b": ({"layers": 32, "hidden": 4096, "heads": 32, "kv-heads": 8, "head-dim": 128, "intermediate": 14336, "vocab": 128256},
                     "meta-llama/Llama-3.1-8B config.json", 8_030_261_248),
    # huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json
    "qwen2.5-7b": ({"layers": 28, "hidden": 3584, "heads": 28, "kv-heads": 4, "head-dim": 128, "intermediate": 18944, "vocab": 152064, "qkv-bias": True},
                   "Qwen/Qwen2.5-7B config.json", 7_615_616_512),
    # huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json
    "qwen2.5-0.5b": ({"layers": 24, "hidden": 896, "heads": 14, "kv-heads": 2, "head-dim": 64, "intermediate": 4864, "vocab": 151936, "qkv-bias": True, "tied-embeddings": True},
                     "Qwen/Qwen2.5-0.5B config.json", 494_032_768),
    # huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json (sliding_window 4096)
    "mistral-7b-v0.1": ({"layers": 32, "hidden": 4096, "heads": 32, "kv-heads": 8, "head-dim": 128, "intermediate": 14336, "vocab": 32000},
                        "mistralai/Mistral-7B-v0.1 config.json", 7_241_732_096),
    # huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
    "mixtral-8x7b": ({"layers": 32, "hidden": 4096, "heads": 32, "kv-heads": 8, "head-dim": 128, "intermediate": 14336, "vocab": 32000,
                      "experts": 8, "active-experts": 2, "expert-intermediate": 14336},
                     "mistralai/Mixtral-8x7B-v0.1 config.json", 46_702_792_704),
}

def active_params(c):
    """Parameters used per token: MoE layers count only the routed experts."""
    if "experts" not in c:
        return sum(model_lines(c).values()) // 2
    dense = dict(c); del dense["experts"]; dense["intermediate"] = c["expert-intermediate"]
    per_expert_mlp = 3 * c["expert-intermediate"] * c["hidden"]
    base = sum(model_lines(dense).values()) // 2 - c["layers"] * per_expert_mlp
    return base + c["layers"] * (c["active-experts"] * per_expert_mlp + c["experts"] * c["hidden"])

for name, (c, src, params) in MODELS.items():
    lines = model_lines(c)
    assert sum(lines.values()) == 2 * params, (name, sum(lines.values()) // 2, params)
    write(f"{name}-bf16", src + f" (published parameter count {params})",
          {**arch_inputs(c), "reserve-gib": 4},
          {"weights_bytes": 2 * params, "parameters": params, "active_parameters": active_params(c),
           "lines": lines, "total_bytes": 2 * params + 4 * GIB})

# Quantised formats on Llama-3.1-8B: linear layers quantised, the rest bf16.
c = MODELS["llama-3.1-8b"][0]
for fmt in ["gptq-4-g128", "awq-4-g128", "nf4", "nf4-dq", "q4_k", "q8_0", "fp8", "fp8-block", "int8"]:
    lines = model_lines(c, fmt)
    write(f"llama-3.1-8b-{fmt}", "meta-llama/Llama-3.1-8B config.json; layouts in gpumem-core/src/format.rs docs",
          {**arch_inputs(c), "format": fmt, "reserve-gib": 0},
          {"weights_bytes": sum(lines.values()), "lines": lines})

# Mistral sliding window: 32 layers x window 4096 at 16k tokens, 2 sequences.
c = MODELS["mistral-7b-v0.1"][0]
write("mistral-7b-sliding-window", "Mistral-7B-v0.1 sliding_window 4096",
      {**arch_inputs(c), "context": 12288, "generate": 4096, "sequences": 2, "sliding-window": 4096, "reserve-gib": 0},
      {"kv_cache_bytes": kv(c, 16384, 2, window=4096),
       "lines": {"kv_cache": kv(c, 16384, 2, window=4096), "kv_cache.prefill": kv(c, 12288, 2, window=4096)}})

# Qwen2.5-7B, 4 sequences of 32k with an fp8 cache, tp=2 on 2 GPUs.
c = MODELS["qwen2.5-7b"][0]
write("qwen2.5-7b-kv-fp8-tp2", "Qwen/Qwen2.5-7B config.json",
      {**arch_inputs(c), "context": 32768, "sequences": 4, "kv-dtype": "fp8", "gpus": 2, "tp": 2, "reserve-gib": 4},
      {"kv_cache_bytes": kv(c, 32768, 4, nbytes=1), "lines": {"kv_cache": kv(c, 32768, 4, nbytes=1)},
       "device_lines": {"kv_cache": kv(c, 32768, 4, nbytes=1) // 2, "reserve": 4 * GIB}})

# Full fine-tuning of Qwen2.5-0.5B with AdamW and fp32 master weights (mixed precision).
c = MODELS["qwen2.5-0.5b"][0]; p = MODELS["qwen2.5-0.5b"][2]
write("qwen2.5-0.5b-full-adamw", "Qwen/Qwen2.5-0.5B; AdamW 2 x fp32 states, bf16 grads, fp32 master",
      {**arch_inputs(c), "train": "full", "reserve-gib": 0},
      {"training_bytes": p * (2 + 8 + 4),
       "lines": {"training.gradients": 2 * p, "training.optimizer": 8 * p, "training.master_weights": 4 * p}})

# LoRA r=16 on q,k,v,o of Llama-3.1-8B: r x (in + out) per projection per layer.
c = MODELS["llama-3.1-8b"][0]
lora = 16 * 32 * ((4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096))
write("llama-3.1-8b-lora-r16", "LoRA: r x (in + out) per projection (PEFT), adapters fp32, AdamW fp32",
      {**arch_inputs(c), "train": "lora", "lora-rank": 16, "lora-targets": "q,k,v,o", "reserve-gib": 0},
      {"lines": {"training.adapters": 4 * lora, "training.gradients": 4 * lora, "training.optimizer": 8 * lora}})
print("cases written")
