#!/usr/bin/env python3
"""Independent oracle for the estimator's fixture cases.

Writes one JSON case per file: the inputs (CLI flags / URL keys) and the bytes each
line must have. The figures are derived here, in Python, straight from the formats'
published layouts and the models' published config.json numbers -- a second
implementation, so the Rust estimator is checked against arithmetic it did not do.

The real configs' checkpoint layouts are one module per family (families/*.py, read
all; what they share is common.py). Run it after changing a case; `--check` (run by
scripts/test.sh) writes nothing and fails when a committed case differs from what it
computes, or when a case it does not write is committed: the cases cannot drift.
"""
import importlib, json, pathlib, pkgutil, sys

import families
from common import LLAMA, cdiv, is_buffer, rope_buffers, rope_freqs, decoder_kv, decoder_tensors, g, linear_bytes, numel, tensor_bytes

HERE = pathlib.Path(__file__).parent
GIB = 1 << 30

# Every case this run computes: file name -> its text.
OUT = {}

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
    OUT[f"{name}.json"] = json.dumps(case, indent=2) + "\n"

def arch_inputs(c):
    keys = ["layers", "hidden", "heads", "kv-heads", "head-dim", "intermediate", "vocab", "experts", "active-experts", "expert-intermediate"]
    d = {k: c[k] for k in keys if k in c}
    for flag in ["qkv-bias", "tied-embeddings"]:
        if c.get(flag): d[flag] = "true"
    return d

# Method §2: 7e9 parameters x 2 B, + 4 GiB reserve.
write("seed-s2-7b-bf16", "method §2 / §9: estimate --parameters 7000000000 --bits 16 --reserve-gib 4",
      {"parameters": 7000000000, "bits": 16, "reserve-gib": 4},
      {"weights_bytes": 14_000_000_000, "kv_cache_bytes": 0, "reserve_bytes": 4 * GIB,
       "total_bytes": 14_000_000_000 + 4 * GIB, "lines": {"weights": 14_000_000_000, "reserve": 4 * GIB}},
      {"display": {"weights": ["14.00", "13.04"], "total": ["18.29", "17.04"]}})

# Method §4: 32 layers, 8 KV heads, dim 128, 8192 tokens, 2 B, 1 and 4 sequences.
seed4 = {"layers": 32, "hidden": 4096, "heads": 32, "kv-heads": 8, "head-dim": 128, "intermediate": 14336, "vocab": 128256}
for seqs in (1, 4):
    w = model_lines(seed4)
    write(f"seed-s4-kv-{seqs}seq", "method §4 worked example (Llama-3.1-8B shape)",
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

# Quantised formats on Llama-3.1-8B: linear layers quantised, the rest bf16; a
# llama.cpp file type (q8_0) quantises token_embd and output too.
c = MODELS["llama-3.1-8b"][0]
for fmt in ["gptq-4-g128", "awq-4-g128", "nf4", "nf4-dq", "q4_k", "q8_0", "fp8", "fp8-block", "int8"]:
    lines = model_lines(c, fmt)
    if fmt == "q8_0":
        lines["weights.embeddings"] = lines["weights.lm_head"] = linear_bytes(fmt, c["vocab"], c["hidden"])
    write(f"llama-3.1-8b-{fmt}", "meta-llama/Llama-3.1-8B config.json; layouts in gpumem-core/src/format.rs docs",
          {**arch_inputs(c), "format": fmt, "reserve-gib": 0},
          {"weights_bytes": sum(lines.values()), "lines": lines})

# llama.cpp's Q4_K_M file type (src/llama-quant.cpp, llama_tensor_get_type_impl):
# output.weight in Q6_K, attn_v and ffn_down in Q6_K in the blocks use_more_bits
# picks, every other matrix in Q4_K; norms counted in bf16 as above.
def q4_k_m_lines(c):
    h, L, V = c["hidden"], c["layers"], c["vocab"]
    q, kv, inter = c["heads"] * c["head-dim"], c["kv-heads"] * c["head-dim"], c["intermediate"]
    q4 = lambda o, i: o * (i // 256) * 144
    q6 = lambda o, i: o * (i // 256) * 210
    more = lambda i: i < L // 8 or i >= 7 * L // 8 or (i - L // 8) % 3 == 2
    v = lambda i: (q6 if more(i) else q4)(kv, h)
    down = lambda i: (q6 if more(i) else q4)(h, inter)
    return {
        "weights.embeddings": q4(V, h),
        "weights.attention": sum(q4(q, h) + q4(kv, h) + v(i) + q4(h, q) for i in range(L)),
        "weights.mlp": sum(2 * q4(inter, h) + down(i) for i in range(L)),
        "weights.norms": 2 * (2 * L * h + h),
        "weights.lm_head": q6(V, h),
    }

lines = q4_k_m_lines(c)
write("llama-3.1-8b-q4_k_m", "meta-llama/Llama-3.1-8B config.json; llama.cpp src/llama-quant.cpp (ggml-org/llama.cpp 007dbbf3fd17eefe9b47fee45f48f7ba5e62b714)",
      {**arch_inputs(c), "format": "q4_k_m", "reserve-gib": 0},
      {"weights_bytes": sum(lines.values()), "lines": lines})

# Mistral sliding window: 32 layers x window 4096 at 16k tokens, 2 sequences, under
# transformers' own cache: the prefill's update keeps a view of the whole prompt's keys
# and values (transformers 5.23 cache_utils.py DynamicSlidingWindowLayer.update slices
# `full_key_states[:, :, -sliding_window + 1:, :]`), so every layer holds the 12 288
# prompt tokens until the first decode step; at the end of generation the window's.
# The counted cache is the larger of the two.
c = MODELS["mistral-7b-v0.1"][0]
prefill_kv = kv(c, 12288, 2)
end_kv = kv(c, 16384, 2, window=4096)
write("mistral-7b-sliding-window", "Mistral-7B-v0.1 sliding_window 4096",
      {**arch_inputs(c), "context": 12288, "generate": 4096, "sequences": 2, "sliding-window": 4096, "reserve-gib": 0},
      {"kv_cache_bytes": max(prefill_kv, end_kv),
       "lines": {"kv_cache": max(prefill_kv, end_kv), "kv_cache.prefill": prefill_kv}})

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

# ---------------------------------------------------------------------------
# Real published config.json files.
#
# Each model is a copy of the fields of its Hugging Face config.json that matter for
# memory (plus a few that must be ignored), with the URL it comes from and, where one
# exists, the copy in a public repository it was checked against. Each family's module
# enumerates the tensors as its checkpoints store them (names as in the safetensors
# index), independently of the Rust reader; the totals are asserted against the
# published parameter counts.
# ---------------------------------------------------------------------------

MODULES = [importlib.import_module(f"families.{m.name}") for m in pkgutil.iter_modules(families.__path__)]


def merged(attr, empty):
    """One family attribute over every module (dicts merged, sets joined, lists added)."""
    out = empty
    for m in MODULES:
        part = getattr(m, attr, None)
        if part is None:
            continue
        if isinstance(out, dict):
            assert not set(out) & set(part), (attr, m.__name__, set(out) & set(part))
            out = {**out, **part}
        elif isinstance(out, set):
            out = out | part
        else:
            out = out + part
    return out


TENSORS = merged("TENSORS", {})        # model_type -> its own checkpoint layout
DECODERS = merged("DECODERS", {})      # model_type -> its Llama-style decoder options
KV = merged("KV", {})                  # model_type -> its own KV cache
STATE = merged("STATE", {})            # model_type -> its recurrent state
TOWERS = merged("TOWERS", {})          # root model_type -> its vision tower
# model_type -> its rotary embedding's frequency buffers: fn(c, add), or None (none).
# A Llama-style decoder absent here has one rotary embedding over its rotary width.
ROPE = merged("ROPE", {})
# model_type -> the language model's other buffers beside its rotary tables (Gemma's
# embedding scale): fn(c, add).
BUFFERS = merged("BUFFERS", {})
DEFAULTS = merged("DEFAULTS", {})      # text model_type -> its config class's defaults
# name -> (published total parameters or None, published source of that total)
REAL = merged("REAL", {})
# Warnings a reader must see: substrings of the estimate's or the config reader's warnings.
WARN = merged("WARN", {})
# The config reader's confidence where it is not exact, and why.
CONFIDENCE = merged("CONFIDENCE", {})
# Published totals given only rounded: (value, significant digits it is rounded to).
ROUNDED = merged("ROUNDED", {})
# Published totals that include the checkpoint's MTP blocks.
PUBLISHED_WITH_MTP = merged("PUBLISHED_WITH_MTP", set())
# Published totals that are a header count: the fp8 block scales (weight_scale_inv) and
# other stored buffers are in it; the value is what those buffers add.
HEADER_TOTALS = merged("HEADER_TOTALS", {})
# Further assertions on a case's figures: name -> fn(cfg, params, mtp, active).
CHECKS = merged("CHECKS", {})
# More cases of a real config at another length: (name, config, tokens).
EXTRA = merged("EXTRA", [])
# More inputs of a case (name with its "@" suffix -> {key: value}): the batch, the
# attention kernel.
INPUTS = merged("INPUTS", {})
# Further lines a case must have: base name -> fn(cfg, tokens, inputs) -> {line: bytes}.
LINES = merged("LINES", {})


def text_config(config):
    """The language model's config, with its config class's defaults filled in."""
    c = dict(config.get("text_config", config))
    for k, v in DEFAULTS.get(c.get("model_type"), {}).items():
        c.setdefault(k, v)
    return c


def checkpoint_tensors(config):
    """[(name, shape, kind)] with kind in linear_attn / linear_mlp / vocab / kept / mtp_*.

    Per-layer tensors are listed once per layer, as checkpoints store them."""
    c = text_config(config)
    mt = c.get("model_type", config.get("model_type"))
    T = []
    add = lambda name, shape, kind: T.append((name, tuple(shape), kind))
    tower = TOWERS.get(config.get("model_type"))
    if tower:
        tower(config, c, add)
    if mt in TENSORS:
        TENSORS[mt](c, config, add)
    else:
        decoder_tensors(c, config, add, DECODERS.get(mt, LLAMA))
    # The rotary embedding's fp32 buffers (non-persistent: on the device, not in the
    # checkpoint); a family with its own layout says what it has.
    if mt in ROPE:
        if ROPE[mt] is not None:
            ROPE[mt](c, add)
    else:
        assert mt not in TENSORS, f"{mt}: its own layout, and no ROPE entry"
        rope_buffers(add, rope_freqs(c, DECODERS.get(mt, LLAMA)))
    if mt in BUFFERS:
        BUFFERS[mt](c, add)
    return T


def state_bytes(config, nbytes=2, layout="transformers"):
    """Constant per-sequence state of the state-space / linear-attention layers; 0
    without such layers. layout "transformers" (what an estimate without an engine
    counts): as transformers' own cache holds it, the whole convolution window in the
    model dtype and the recurrent state in fp32 (each family's mixer hands its final
    state to cache_utils.py's LinearAttentionLayer). layout "vllm": as vLLM allocates
    it (vllm/model_executor/layers/mamba/mamba_utils.py, MambaStateShapeCalculator),
    the window less one input, everything in the model dtype ("auto")."""
    c = text_config(config)
    state = STATE.get(c.get("model_type"))
    return state(c, nbytes, layout) if state else 0


def kv_bytes(config, tokens, engine="latent", nbytes=2, whole_prompt=False):
    """KV cache of one sequence at `tokens` tokens (attention layers only).
    `whole_prompt`: at the prefill under transformers' own cache, where every sliding
    (or chunked) layer still holds the whole prompt: transformers 5.23 cache_utils.py
    DynamicSlidingWindowLayer.update (also the chunked layers' class) concatenates the
    prompt's keys and values and keeps the view `[:, :, -sliding_window + 1:, :]` of
    that storage until the first decode step; no window cuts the prompt then."""
    c = text_config(config)
    if whole_prompt:
        c = {k: (10**18 if k in ("sliding_window", "attention_chunk_size") and v else v) for k, v in c.items()}
    mt = c.get("model_type", config.get("model_type"))
    if mt in KV:
        return KV[mt](c, tokens, nbytes, engine)
    return decoder_kv(c, tokens, nbytes, engine, DECODERS.get(mt, LLAMA))


def indexer_bytes(config, tokens, nbytes=2, layout="transformers"):
    """The sparse-attention indexer's key cache. layout "transformers": cache_utils.py's
    DynamicIndexedLayer keeps the indexer's keys as computed, index_head_dim values in
    the model dtype per attention layer and token. layout "vllm": its
    DeepseekV32IndexerCache, index_head_dim fp8 values and one fp32 scale per 128
    (head_dim + head_dim // 128 * 4 bytes, uint8)."""
    c = text_config(config)
    if "index_n_heads" not in c:
        return 0
    d = c["index_head_dim"]
    if layout == "transformers":
        return c["num_hidden_layers"] * tokens * d * nbytes
    return c["num_hidden_layers"] * tokens * (d + d // 128 * 4)


def fp8_scales(config):
    """fp32 weight_scale_inv elements of an fp8 128x128-block checkpoint: one per block
    of every quantised linear (not eh_proj, the routers, weights_proj: bf16)."""
    return sum(cdiv(s[0], 128) * cdiv(s[1], 128) for n, s, k in checkpoint_tensors(config)
               if len(s) == 2 and k.replace("mtp_", "") in ("linear_attn", "linear_mlp", "expert") and not n.endswith("eh_proj"))


def summarise(config, fmt="bf16", attn_fmt=None):
    T = checkpoint_tensors(config)
    # Buffers (CTRL's position table) are bytes, not parameters.
    params = sum(numel(s) for _, s, k in T if not is_buffer(k))
    c = text_config(config)
    experts = g(c, "num_local_experts", "num_experts", "n_routed_experts", default=0)
    active_k = g(c, "num_experts_per_tok", "num_experts_per_token", default=0)
    expert_params = sum(numel(s) for _, s, k in T if k in ("expert", "expert_kept"))
    mtp = sum(numel(s) for _, s, k in T if k.startswith("mtp_"))
    tower = sum(numel(s) for _, s, k in T if k == "tower")
    active = params - mtp - tower - (expert_params - (expert_params * active_k // experts if experts else 0))
    wbytes = sum(tensor_bytes(s, k, fmt, attn_fmt or fmt) for _, s, k in T)
    return params, active, wbytes, mtp


def load(name):
    return json.loads((HERE / "configs" / f"{name}.json").read_text())


# Compressed-tensors checkpoints of Llama-3.1-8B (RedHatAI model cards), their
# quantization_config blocks copied; the shape is Llama-3.1-8B's.
CT = {
    "llama-3.1-8b-ct-fp8-dynamic": ("https://huggingface.co/RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic/blob/main/config.json",
        {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
         "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False},
                                       "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}}},
        "fp8-channel"),
    "llama-3.1-8b-ct-w4a16": ("https://huggingface.co/RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16/blob/main/config.json",
        {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
         "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True, "dynamic": False},
                                       "input_activations": None}}},
        "w4a16-g128"),
    "llama-3.1-8b-ct-nvfp4": ("quantization_config as llm-compressor writes its NVFP4 scheme (compressed-tensors nvfp4-pack-quantized, W4A4; e.g. the RedHatAI NVFP4 checkpoints)",
        {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
         "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": True, "dynamic": False},
                                       "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": True, "dynamic": "local"}}}},
        "nvfp4"),
    "llama-3.1-8b-ct-nvfp4a16": ("quantization_config as llm-compressor writes its NVFP4A16 scheme (weights only: input_activations null)",
        {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "ignore": ["lm_head"],
         "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": True, "dynamic": False},
                                       "input_activations": None}}},
        "nvfp4a16"),
}

def config_format(cfg):
    """(linear format, attention format) the checkpoint's quantization_config names."""
    q = cfg.get("quantization_config")
    if not q: return "bf16", "bf16"
    if q["quant_method"] == "mxfp4":
        keep = any("self_attn" in m for m in q.get("modules_to_not_convert", []))
        return "mxfp4", ("bf16" if keep else "mxfp4")
    if q["quant_method"] == "fp8": return "fp8-block", "fp8-block"
    raise ValueError(q)


def write_real(name, cfg, source, tokens, fmt, attn_fmt, published):
    params, active, wbytes, mtp = summarise(cfg, fmt, attn_fmt)
    # Prefill only, under transformers' own cache: the whole prompt in every layer.
    kvb = kv_bytes(cfg, tokens, whole_prompt=True)
    state = state_bytes(cfg)
    index = indexer_bytes(cfg, tokens)
    expect = {"parameters": params, "active_parameters": active, "weights_bytes": wbytes, "kv_cache_bytes": kvb + state + index}
    # Buffers in the weights (bytes, no parameters): what meta_check.py compares with the
    # non-persistent buffers transformers builds.
    buffers = sum(tensor_bytes(s, k, fmt, attn_fmt or fmt) for _, s, k in checkpoint_tensors(cfg) if is_buffer(k))
    lines = {}
    if state:
        lines.update({"kv_cache": kvb, "kv_cache.state": state})
    if "kv_lora_rank" in cfg.get("text_config", cfg):
        lines["kv_cache.decompressed"] = kv_bytes(cfg, tokens, engine="decompressed")
    if index:
        lines.update({"kv_cache": kvb, "kv_cache.indexer": index})
    if lines:
        expect["lines"] = lines
    inputs = {"context": str(tokens), "kv-dtype": "bf16", "reserve-gib": "0", **INPUTS.get(name, {})}
    if name.split("@")[0] in LINES:
        extra = LINES[name.split("@")[0]](cfg, tokens, inputs)
        expect.setdefault("lines", {}).update(extra)
        if "kv_cache.cross" in extra:
            # An encoder-decoder's generation: every cache line it keeps is added
            # (the prefill's is shown, not added).
            expect["kv_cache_bytes"] = sum(v for k, v in extra.items() if k.startswith("kv_cache") and k != "kv_cache.prefill")
    case = {"name": name, "source": source,
            "published_parameters": published,
            "buffer_bytes": buffers,
            "config": {k: v for k, v in cfg.items() if not k.startswith("_")},
            "input": inputs,
            "expect": expect}
    warn = name if name in WARN else name.split("@")[0]
    if warn in WARN:
        case["warnings"] = WARN[warn]
    # What the config reader must say of its own reading: exact unless it names why not.
    case["confidence"] = CONFIDENCE.get(name.split("@")[0], "exact")
    OUT[f"real-{name.replace('@', '-')}.json"] = json.dumps(case, indent=1) + "\n"
    return params, mtp, kvb + state + index

TABLE = []
for name, (published, how) in REAL.items():
    cfg = load(name)
    fmt, attn = config_format(cfg)
    params, mtp, kvb = write_real(name, cfg, cfg["_source"] + (f" (checked against {cfg['_checked_against']})" if "_checked_against" in cfg else ""),
                                  8192, fmt, attn, published)
    if published is not None:
        counted = params if name in PUBLISHED_WITH_MTP else params - mtp
        if name in HEADER_TOTALS:
            counted += fp8_scales(cfg) + HEADER_TOTALS[name]
        assert counted == published, (name, counted, published)
    if name in CHECKS:
        _, active, _, _ = summarise(cfg)
        CHECKS[name](cfg, params, mtp, active)
    if name in ROUNDED:
        value, digits = ROUNDED[name]
        assert float(f"{params:.{digits}g}") == value, (name, params, value)
    TABLE.append((name, published, how, params, kvb))
for name, of, tokens in EXTRA:
    cfg = load(of)
    write_real(name, cfg, cfg["_source"], tokens, "bf16", "bf16", None)
base = load("llama-3.1-8b")
for name, (src, q, fmt) in CT.items():
    cfg = dict(base); cfg["quantization_config"] = q
    # No engine: transformers, where compressed-tensors decompresses the linears on the
    # first forward (common.ct_decompressed_bytes); a serving engine keeps `fmt`.
    ct = f"ct-decompressed:{fmt}"
    WARN[name] = [f"{fmt} (compressed-tensors) under transformers: compressed-tensors decompresses the linears to bf16"]
    write_real(name, cfg, src + " (quantization_config; shape of meta-llama/Llama-3.1-8B)", 8192, ct, ct, None)


# The Rust test's list of case files (tests/cases.rs includes it), sorted.
OUT["list.rs"] = ("// Written by oracle.py with the cases it computes: every case file, embedded so the\n"
                  "// wasm build of tests/cases.rs needs no file system.\n&[\n"
                  + "".join(f'    ("{n[:-5]}", include_str!("{n}")),\n' for n in sorted(OUT) if n.endswith(".json"))
                  + "]\n")


def check():
    """Compares every computed case with the committed one; every committed case must be
    computed. Returns the differences."""
    problems = []
    for name, text in sorted(OUT.items()):
        path = HERE / name
        if not path.exists():
            problems.append(f"{name}: computed, not committed")
        elif path.read_text() != text:
            problems.append(f"{name}: the committed case differs from what the oracle computes")
    for path in sorted(HERE.glob("*.json")):
        if path.name not in OUT:
            problems.append(f"{path.name}: committed, but no oracle rule writes it")
    return problems


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        problems = check()
        for p in problems:
            print(f"oracle --check: {p}", file=sys.stderr)
        cases = sum(1 for n in OUT if n.endswith(".json"))
        print(f"oracle --check: {cases} cases and their list computed, {len(problems)} differ")
        sys.exit(1 if problems else 0)
    if sys.argv[1:]:
        sys.exit("usage: oracle.py [--check]")
    for name, text in OUT.items():
        (HERE / name).write_text(text)
    print("| model | published | oracle parameters | KV at 8k (bf16, 1 seq) |")
    for name, published, how, params, kvb in TABLE:
        print(f"| {name} | {published if published else how} | {params} | {kvb} |")
