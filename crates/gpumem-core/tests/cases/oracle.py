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

# ---------------------------------------------------------------------------
# Real published config.json files.
#
# Each model below is a copy of the fields of its Hugging Face config.json that
# matter for memory (plus a few that must be ignored), with the URL it comes from
# and, where one exists, the copy in a public repository it was checked against.
# `checkpoint_tensors` enumerates the tensors the way each family's checkpoint
# stores them (names as in the safetensors index), independently of the Rust
# reader; the totals are asserted against the published parameter counts.
# ---------------------------------------------------------------------------

def g(cfg, *keys, default=None):
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default

GEMMA3_TEXT_DEFAULTS = {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
                        "max_position_embeddings": 131072, "sliding_window_pattern": 6}

def text_config(config):
    """The language model's config, with transformers' Gemma3TextConfig defaults filled in."""
    c = dict(config.get("text_config", config))
    if c.get("model_type") == "gemma3_text":
        for k, v in GEMMA3_TEXT_DEFAULTS.items():
            c.setdefault(k, v)
    return c

def mamba_mixer(add, p, h, d, n, k, r):
    """One Mamba(-1) mixer as MambaMixer / JambaMambaMixer store it (use_bias false, conv bias)."""
    add(f"{p}.in_proj", (2 * d, h), "linear_attn")
    add(f"{p}.conv1d.weight", (d, 1, k), "kept"); add(f"{p}.conv1d.bias", (d,), "kept")
    add(f"{p}.x_proj", (r + 2 * n, d), "linear_attn")
    add(f"{p}.dt_proj.weight", (d, r), "linear_attn"); add(f"{p}.dt_proj.bias", (d,), "kept")
    add(f"{p}.A_log", (d, n), "kept"); add(f"{p}.D", (d,), "kept")
    add(f"{p}.out_proj", (h, d), "linear_attn")

def checkpoint_tensors(config):
    """[(name, shape, kind)] with kind in linear_attn / linear_mlp / vocab / kept / mtp_*.

    Per-layer tensors are listed once per layer, as checkpoints store them."""
    c = text_config(config)
    mt = c.get("model_type", config.get("model_type"))
    h = g(c, "hidden_size", "n_embd")
    L = g(c, "num_hidden_layers", "n_layer")
    H = g(c, "num_attention_heads", "n_head")
    V = c["vocab_size"]
    T = []
    vc = config.get("vision_config")
    if config.get("model_type") == "gemma3" and vc and vc.get("model_type") == "siglip_vision_model":
        # transformers' SiglipVisionModel (no pooling head) + Gemma3MultiModalProjector.
        vh, vi, vl = vc["hidden_size"], vc["intermediate_size"], vc["num_hidden_layers"]
        p, ch, n = vc["patch_size"], vc.get("num_channels", 3), (vc["image_size"] // vc["patch_size"]) ** 2
        T.append(("vision.patch_embedding.weight", (vh, ch, p, p), "tower"))
        T.append(("vision.patch_embedding.bias", (vh,), "tower"))
        T.append(("vision.position_embedding", (n, vh), "tower"))
        for i in range(vl):
            for nm in ("layer_norm1", "layer_norm2"):
                T.append((f"vision.layers.{i}.{nm}.weight", (vh,), "tower")); T.append((f"vision.layers.{i}.{nm}.bias", (vh,), "tower"))
            for nm in ("q_proj", "k_proj", "v_proj", "out_proj"):
                T.append((f"vision.layers.{i}.{nm}.weight", (vh, vh), "tower")); T.append((f"vision.layers.{i}.{nm}.bias", (vh,), "tower"))
            T.append((f"vision.layers.{i}.fc1.weight", (vi, vh), "tower")); T.append((f"vision.layers.{i}.fc1.bias", (vi,), "tower"))
            T.append((f"vision.layers.{i}.fc2.weight", (vh, vi), "tower")); T.append((f"vision.layers.{i}.fc2.bias", (vh,), "tower"))
        T.append(("vision.post_layernorm.weight", (vh,), "tower")); T.append(("vision.post_layernorm.bias", (vh,), "tower"))
        T.append(("multi_modal_projector.mm_input_projection_weight", (vh, h), "tower"))
        T.append(("multi_modal_projector.mm_soft_emb_norm.weight", (vh,), "tower"))
    add = lambda name, shape, kind: T.append((name, tuple(shape), kind))
    if mt in ("gpt2",):
        inner = g(c, "n_inner", default=4 * h)
        add("wte", (V, h), "vocab"); add("wpe", (c["n_positions"], h), "vocab")
        for i in range(L):
            p = f"h.{i}"
            for ln in ("ln_1", "ln_2"):
                add(f"{p}.{ln}.weight", (h,), "kept"); add(f"{p}.{ln}.bias", (h,), "kept")
            add(f"{p}.attn.c_attn.weight", (3 * h, h), "linear_attn"); add(f"{p}.attn.c_attn.bias", (3 * h,), "kept")
            add(f"{p}.attn.c_proj.weight", (h, h), "linear_attn"); add(f"{p}.attn.c_proj.bias", (h,), "kept")
            add(f"{p}.mlp.c_fc.weight", (inner, h), "linear_mlp"); add(f"{p}.mlp.c_fc.bias", (inner,), "kept")
            add(f"{p}.mlp.c_proj.weight", (h, inner), "linear_mlp"); add(f"{p}.mlp.c_proj.bias", (h,), "kept")
        add("ln_f.weight", (h,), "kept"); add("ln_f.bias", (h,), "kept")
        return T
    if mt == "gpt_neox":
        I = c["intermediate_size"]
        add("gpt_neox.embed_in", (V, h), "vocab")
        for i in range(L):
            p = f"layers.{i}"
            for ln in ("input_layernorm", "post_attention_layernorm"):
                add(f"{p}.{ln}.weight", (h,), "kept"); add(f"{p}.{ln}.bias", (h,), "kept")
            add(f"{p}.attention.query_key_value.weight", (3 * h, h), "linear_attn"); add(f"{p}.attention.query_key_value.bias", (3 * h,), "kept")
            add(f"{p}.attention.dense.weight", (h, h), "linear_attn"); add(f"{p}.attention.dense.bias", (h,), "kept")
            add(f"{p}.mlp.dense_h_to_4h.weight", (I, h), "linear_mlp"); add(f"{p}.mlp.dense_h_to_4h.bias", (I,), "kept")
            add(f"{p}.mlp.dense_4h_to_h.weight", (h, I), "linear_mlp"); add(f"{p}.mlp.dense_4h_to_h.bias", (h,), "kept")
        add("final_layer_norm.weight", (h,), "kept"); add("final_layer_norm.bias", (h,), "kept")
        add("embed_out", (V, h), "vocab")
        return T
    if mt == "falcon":
        hd = h // H
        new = c.get("new_decoder_architecture", False)
        kv = c.get("num_kv_heads", H) if new else (1 if c.get("multi_query", True) else H)
        I = g(c, "ffn_hidden_size", default=4 * h)
        bias = c.get("bias", False)
        add("word_embeddings", (V, h), "vocab")
        for i in range(L):
            p = f"h.{i}"
            lns = ("ln_attn", "ln_mlp") if new else (("input_layernorm",) if c.get("parallel_attn", True) else ("input_layernorm", "post_attention_layernorm"))
            for ln in lns:
                add(f"{p}.{ln}.weight", (h,), "kept"); add(f"{p}.{ln}.bias", (h,), "kept")
            add(f"{p}.self_attention.query_key_value.weight", ((H + 2 * kv) * hd, h), "linear_attn")
            add(f"{p}.self_attention.dense.weight", (h, H * hd), "linear_attn")
            add(f"{p}.mlp.dense_h_to_4h.weight", (I, h), "linear_mlp")
            add(f"{p}.mlp.dense_4h_to_h.weight", (h, I), "linear_mlp")
            if bias:
                add(f"{p}.self_attention.query_key_value.bias", ((H + 2 * kv) * hd,), "kept")
                add(f"{p}.self_attention.dense.bias", (h,), "kept")
                add(f"{p}.mlp.dense_h_to_4h.bias", (I,), "kept"); add(f"{p}.mlp.dense_4h_to_h.bias", (h,), "kept")
        add("ln_f.weight", (h,), "kept"); add("ln_f.bias", (h,), "kept")
        if c.get("tie_word_embeddings") is False:
            add("lm_head", (V, h), "vocab")
        return T
    if mt in ("mamba", "falcon_mamba"):
        # transformers' MambaForCausalLM / FalconMambaForCausalLM checkpoints:
        # backbone.layers.N.{norm, mixer.*}; Falcon-Mamba's b_c_rms / dt_rms are
        # non-persistent buffers (not stored).
        d, n, k, r = c["intermediate_size"], c["state_size"], c["conv_kernel"], c["time_step_rank"]
        add("backbone.embeddings", (V, h), "vocab")
        for i in range(L):
            mamba_mixer(add, f"backbone.layers.{i}.mixer", h, d, n, k, r)
            add(f"backbone.layers.{i}.norm", (h,), "kept")
        add("backbone.norm_f", (h,), "kept")
        if c.get("tie_word_embeddings", True) is False:
            add("lm_head", (V, h), "vocab")
        return T
    if mt == "mamba2":
        # transformers' Mamba2ForCausalLM: backbone.layers.N.{norm, mixer.*}; the mixer's
        # in_proj yields z, x (d_inner each), B, C (groups x d_state each) and dt (heads).
        d = c["expand"] * h
        H2, G, n, k = c["num_heads"], c["n_groups"], c["state_size"], c["conv_kernel"]
        assert H2 * c["head_dim"] == d
        conv_dim = d + 2 * G * n
        add("backbone.embeddings", (V, h), "vocab")
        for i in range(L):
            p = f"backbone.layers.{i}.mixer"
            add(f"{p}.in_proj", (2 * d + 2 * G * n + H2, h), "linear_attn")
            add(f"{p}.conv1d.weight", (conv_dim, 1, k), "kept"); add(f"{p}.conv1d.bias", (conv_dim,), "kept")
            add(f"{p}.dt_bias", (H2,), "kept"); add(f"{p}.A_log", (H2,), "kept"); add(f"{p}.D", (H2,), "kept")
            add(f"{p}.norm", (d,), "kept")
            add(f"{p}.out_proj", (h, d), "linear_attn")
            add(f"backbone.layers.{i}.norm", (h,), "kept")
        add("backbone.norm_f", (h,), "kept")
        if not c.get("tie_word_embeddings", False):
            add("lm_head", (V, h), "vocab")
        return T
    if mt == "nemotron_h":
        # NVIDIA's modeling_nemotron_h.py: backbone.layers.N.{norm, mixer}; the mixer is
        # Mamba-2 (M), attention (*), a relu^2 MLP up/down (-) or (Nemotron-3) an MoE
        # block (E), per hybrid_override_pattern.
        KV, hd = c["num_key_value_heads"], g(c, "head_dim", "attention_head_dim", default=h // H)
        H2, P, G, n, k = c["mamba_num_heads"], c["mamba_head_dim"], c["n_groups"], c["ssm_state_size"], c["conv_kernel"]
        d = H2 * P; conv_dim = d + 2 * G * n; I = c["intermediate_size"]
        bias = c.get("mlp_bias", False)
        def relu2_mlp(q, width, kind, bias_kind, x=h):
            # up_proj [width, x], down_proj [x, width]; x is the hidden width, or the
            # latent width for Nemotron-3 Super's routed experts.
            add(f"{q}.up_proj.weight", (width, x), kind); add(f"{q}.down_proj.weight", (x, width), kind)
            if bias:
                add(f"{q}.up_proj.bias", (width,), bias_kind); add(f"{q}.down_proj.bias", (x,), bias_kind)
        add("backbone.embeddings", (V, h), "vocab")
        def block_tensors(block, p, kd):
            # kd: the tensor kind, "mtp_"-prefixed inside the MTP blocks.
            if block == "M":
                add(f"{p}.in_proj", (2 * d + 2 * G * n + H2, h), kd("linear_attn"))
                add(f"{p}.conv1d.weight", (conv_dim, 1, k), kd("kept")); add(f"{p}.conv1d.bias", (conv_dim,), kd("kept"))
                add(f"{p}.dt_bias", (H2,), kd("kept")); add(f"{p}.A_log", (H2,), kd("kept")); add(f"{p}.D", (H2,), kd("kept"))
                add(f"{p}.norm", (d,), kd("kept"))
                add(f"{p}.out_proj", (h, d), kd("linear_attn"))
            elif block == "*":
                add(f"{p}.q_proj", (H * hd, h), kd("linear_attn")); add(f"{p}.k_proj", (KV * hd, h), kd("linear_attn"))
                add(f"{p}.v_proj", (KV * hd, h), kd("linear_attn")); add(f"{p}.o_proj", (h, H * hd), kd("linear_attn"))
            elif block == "E":
                # The Nemotron-3 checkpoints' MoE block (transformers' NemotronHMoE,
                # NemotronHTopkRouter and NemotronHMLP; vLLM's NemotronHMoE):
                # gate.weight [experts, hidden] and the router's fp32 buffer
                # gate.e_score_correction_bias [experts]; per expert a non-gated relu^2
                # MLP experts.E.{up,down}_proj; one shared expert
                # moe_shared_expert_intermediate_size x n_shared_experts wide (vLLM).
                # Super's latent MoE (moe_latent_size; vLLM's NemotronHMoE with
                # use_latent_moe): fc1_latent_proj [latent, hidden] and fc2_latent_proj
                # [hidden, latent] (bias = mlp_bias), the routed experts at the latent
                # width; the router and the shared expert (NemotronHMLP with
                # hidden_size = config.hidden_size) stay at the hidden width.
                E, EI = c["n_routed_experts"], c["moe_intermediate_size"]
                X = c.get("moe_latent_size") or h
                add(f"{p}.gate.weight", (E, h), kd("kept"))
                add(f"{p}.gate.e_score_correction_bias", (E,), kd("fp32"))
                if c.get("moe_latent_size"):
                    add(f"{p}.fc1_latent_proj.weight", (X, h), kd("linear_mlp"))
                    add(f"{p}.fc2_latent_proj.weight", (h, X), kd("linear_mlp"))
                    if bias:
                        add(f"{p}.fc1_latent_proj.bias", (X,), kd("kept")); add(f"{p}.fc2_latent_proj.bias", (h,), kd("kept"))
                for e in range(E):
                    relu2_mlp(f"{p}.experts.{e}", EI, kd("expert"), kd("expert_kept"), X)
                if c.get("n_shared_experts", 1):
                    relu2_mlp(f"{p}.shared_experts", c["moe_shared_expert_intermediate_size"] * c.get("n_shared_experts", 1),
                              kd("linear_mlp"), kd("kept"))
            else:
                assert block == "-"
                relu2_mlp(p, I, kd("linear_mlp"), kd("kept"))
        plain = lambda base: base
        for i, block in enumerate(c["hybrid_override_pattern"]):
            block_tensors(block, f"backbone.layers.{i}.mixer", plain)
            add(f"backbone.layers.{i}.norm", (h,), "kept")
        # Nemotron-3's MTP (vLLM's nemotron_h_mtp.py, NemotronHMultiTokenPredictor):
        # per predicted step the blocks of mtp_hybrid_override_pattern as
        # mtp.layers.N.{norm, mixer}; the step's first block also holds enorm, hnorm and
        # eh_proj [hidden, 2 hidden], its last final_layernorm. The embedding and
        # lm_head are the backbone's (shared from the target model), not copied.
        mtp = lambda base: "mtp_" + base
        pat = c.get("mtp_hybrid_override_pattern", "")
        for step in range(c.get("num_nextn_predict_layers", 0) or 0):
            for j, block in enumerate(pat):
                i = step * len(pat) + j
                q = f"mtp.layers.{i}"
                block_tensors(block, f"{q}.mixer", mtp)
                add(f"{q}.norm", (h,), "mtp_kept")
                if j == 0:
                    add(f"{q}.enorm", (h,), "mtp_kept"); add(f"{q}.hnorm", (h,), "mtp_kept")
                    add(f"{q}.eh_proj", (h, 2 * h), "mtp_linear_mlp")
                if j == len(pat) - 1:
                    add(f"{q}.final_layernorm", (h,), "mtp_kept")
        add("backbone.norm_f", (h,), "kept")
        if not c.get("tie_word_embeddings", False):
            add("lm_head", (V, h), "vocab")
        return T
    if mt == "falcon_h1":
        # transformers' FalconH1ForCausalLM (modeling_falcon_h1.py): every layer holds a
        # LlamaAttention (self_attn), a FalconH1Mixer (mamba) beside it, a gated MLP
        # (feed_forward), input_layernorm and pre_ff_layernorm. The mixer is mamba_d_ssm
        # wide (expand x hidden only when that is null); in_proj yields z, x, B, C, dt;
        # its gated norm exists only with mamba_rms_norm; the muP multipliers and
        # mup_vector (a non-persistent buffer) are not stored.
        KV, hd = c["num_key_value_heads"], c.get("head_dim") or h // H
        d = c.get("mamba_d_ssm", 1024)
        if d is None:
            d = c["mamba_expand"] * h
        H2, G, n, k = c["mamba_n_heads"], c["mamba_n_groups"], c["mamba_d_state"], c["mamba_d_conv"]
        P = d // H2 if c.get("mamba_d_head", "auto") == "auto" else c["mamba_d_head"]
        assert H2 * P == d
        conv_dim = d + 2 * G * n
        I = c["intermediate_size"]
        add("model.embed_tokens", (V, h), "vocab")
        for i in range(L):
            p = f"model.layers.{i}"
            for nm, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
                add(f"{p}.self_attn.{nm}_proj", (rows, h), "linear_attn")
                if c.get("attention_bias"):
                    add(f"{p}.self_attn.{nm}_proj.bias", (rows,), "kept")
            add(f"{p}.self_attn.o_proj", (h, H * hd), "linear_attn")
            if c.get("attention_bias"):
                add(f"{p}.self_attn.o_proj.bias", (h,), "kept")
            m = f"{p}.mamba"
            add(f"{m}.in_proj", (d + conv_dim + H2, h), "linear_attn")
            if c.get("mamba_proj_bias", False):
                add(f"{m}.in_proj.bias", (d + conv_dim + H2,), "kept")
            add(f"{m}.conv1d.weight", (conv_dim, 1, k), "kept")
            if c.get("mamba_conv_bias", True):
                add(f"{m}.conv1d.bias", (conv_dim,), "kept")
            add(f"{m}.dt_bias", (H2,), "kept"); add(f"{m}.A_log", (H2,), "kept"); add(f"{m}.D", (H2,), "kept")
            if c.get("mamba_rms_norm", False):
                add(f"{m}.norm", (d,), "kept")
            add(f"{m}.out_proj", (h, d), "linear_attn")
            if c.get("projectors_bias", False):
                add(f"{m}.out_proj.bias", (h,), "kept")
            for nm in ("gate", "up"):
                add(f"{p}.feed_forward.{nm}_proj", (I, h), "linear_mlp")
            add(f"{p}.feed_forward.down_proj", (h, I), "linear_mlp")
            if c.get("mlp_bias"):
                add(f"{p}.feed_forward.gate_proj.bias", (I,), "kept"); add(f"{p}.feed_forward.up_proj.bias", (I,), "kept")
                add(f"{p}.feed_forward.down_proj.bias", (h,), "kept")
            add(f"{p}.input_layernorm", (h,), "kept"); add(f"{p}.pre_ff_layernorm", (h,), "kept")
        add("model.final_layernorm", (h,), "kept")
        if not c.get("tie_word_embeddings", False):
            add("lm_head", (V, h), "vocab")
        return T
    if mt == "bamba":
        # transformers' BambaForCausalLM (modeling_bamba.py): model.layers.N.{self_attn |
        # mamba}, feed_forward (gated MLP), input_layernorm, pre_ff_layernorm; the layers in
        # attn_layer_indices are attention, the rest BambaMixer (Mamba-2, expand x hidden
        # wide, always with its gated norm `mamba.norm`).
        KV, hd = c["num_key_value_heads"], h // H
        d = c["mamba_expand"] * h
        H2, G, n, k = c["mamba_n_heads"], c["mamba_n_groups"], c["mamba_d_state"], c["mamba_d_conv"]
        assert H2 * c["mamba_d_head"] == d
        conv_dim = d + 2 * G * n
        I = c["intermediate_size"]
        add("model.embed_tokens", (V, h), "vocab")
        for i in range(L):
            p = f"model.layers.{i}"
            if i in (c.get("attn_layer_indices") or []):
                for nm, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
                    add(f"{p}.self_attn.{nm}_proj", (rows, h), "linear_attn")
                add(f"{p}.self_attn.o_proj", (h, H * hd), "linear_attn")
            else:
                m = f"{p}.mamba"
                add(f"{m}.in_proj", (d + conv_dim + H2, h), "linear_attn")
                add(f"{m}.conv1d.weight", (conv_dim, 1, k), "kept"); add(f"{m}.conv1d.bias", (conv_dim,), "kept")
                add(f"{m}.dt_bias", (H2,), "kept"); add(f"{m}.A_log", (H2,), "kept"); add(f"{m}.D", (H2,), "kept")
                add(f"{m}.norm", (d,), "kept")
                add(f"{m}.out_proj", (h, d), "linear_attn")
            for nm in ("gate", "up"):
                add(f"{p}.feed_forward.{nm}_proj", (I, h), "linear_mlp")
            add(f"{p}.feed_forward.down_proj", (h, I), "linear_mlp")
            add(f"{p}.input_layernorm", (h,), "kept"); add(f"{p}.pre_ff_layernorm", (h,), "kept")
        add("model.final_layernorm", (h,), "kept")
        if not c.get("tie_word_embeddings", False):
            add("lm_head", (V, h), "vocab")
        return T
    if mt == "granitemoehybrid":
        # transformers' GraniteMoeHybridForCausalLM (modular_granitemoehybrid.py): per layer
        # input_layernorm, post_attention_layernorm, a BambaMixer (`mamba`, expand x hidden,
        # gated norm) or attention (`self_attn`, head dim hidden / heads) by layer_types, the
        # routed experts when num_local_experts > 0 (block_sparse_moe: router.layer [E, h],
        # input_linear [E, 2I, h], output_linear [E, h, I]) and the always-on shared_mlp
        # (input_linear [2S, h], output_linear [h, S]); the multipliers hold no parameters.
        KV, hd = c["num_key_value_heads"], h // H
        d = c["mamba_expand"] * h
        H2, G, n, k = c["mamba_n_heads"], c["mamba_n_groups"], c["mamba_d_state"], c["mamba_d_conv"]
        assert H2 * c["mamba_d_head"] == d
        conv_dim = d + 2 * G * n
        E, I, S = c["num_local_experts"], c["intermediate_size"], c["shared_intermediate_size"]
        types = c.get("layer_types") or ["mamba"] * L
        add("model.embed_tokens", (V, h), "vocab")
        for i in range(L):
            p = f"model.layers.{i}"
            if types[i] == "attention":
                for nm, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
                    add(f"{p}.self_attn.{nm}_proj", (rows, h), "linear_attn")
                    if c.get("attention_bias"):
                        add(f"{p}.self_attn.{nm}_proj.bias", (rows,), "kept")
                add(f"{p}.self_attn.o_proj", (h, H * hd), "linear_attn")
                if c.get("attention_bias"):
                    add(f"{p}.self_attn.o_proj.bias", (h,), "kept")
            else:
                m = f"{p}.mamba"
                add(f"{m}.in_proj", (d + conv_dim + H2, h), "linear_attn")
                add(f"{m}.conv1d.weight", (conv_dim, 1, k), "kept"); add(f"{m}.conv1d.bias", (conv_dim,), "kept")
                add(f"{m}.dt_bias", (H2,), "kept"); add(f"{m}.A_log", (H2,), "kept"); add(f"{m}.D", (H2,), "kept")
                add(f"{m}.norm", (d,), "kept")
                add(f"{m}.out_proj", (h, d), "linear_attn")
            if E > 0:
                add(f"{p}.block_sparse_moe.router.layer", (E, h), "kept")
                add(f"{p}.block_sparse_moe.input_linear", (E, 2 * I, h), "expert")
                add(f"{p}.block_sparse_moe.output_linear", (E, h, I), "expert")
            add(f"{p}.shared_mlp.input_linear", (2 * S, h), "linear_mlp")
            add(f"{p}.shared_mlp.output_linear", (h, S), "linear_mlp")
            add(f"{p}.input_layernorm", (h,), "kept"); add(f"{p}.post_attention_layernorm", (h,), "kept")
        add("model.norm", (h,), "kept")
        if not c.get("tie_word_embeddings", False):
            add("lm_head", (V, h), "vocab")
        return T
    if mt == "jamba":
        # transformers' JambaForCausalLM: model.layers.N.{self_attn | mamba},
        # feed_forward (dense MLP or router + experts), input_layernorm, pre_ff_layernorm.
        KV = c["num_key_value_heads"]; hd = h // H
        d = c["mamba_expand"] * h
        add("model.embed_tokens", (V, h), "vocab")
        for i in range(L):
            p = f"model.layers.{i}"
            if i % c["attn_layer_period"] == c["attn_layer_offset"]:
                for nm, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
                    add(f"{p}.self_attn.{nm}_proj", (rows, h), "linear_attn")
                add(f"{p}.self_attn.o_proj", (h, H * hd), "linear_attn")
            else:
                r = c["mamba_dt_rank"]; n = c["mamba_d_state"]
                mamba_mixer(add, f"{p}.mamba", h, d, n, c["mamba_d_conv"], r)
                add(f"{p}.mamba.dt_layernorm", (r,), "kept")
                add(f"{p}.mamba.b_layernorm", (n,), "kept"); add(f"{p}.mamba.c_layernorm", (n,), "kept")
            I = c["intermediate_size"]
            if i % c["expert_layer_period"] == c["expert_layer_offset"]:
                add(f"{p}.feed_forward.router", (c["num_experts"], h), "kept")
                for e in range(c["num_experts"]):
                    add(f"{p}.feed_forward.experts.{e}.gate_proj", (I, h), "expert")
                    add(f"{p}.feed_forward.experts.{e}.up_proj", (I, h), "expert")
                    add(f"{p}.feed_forward.experts.{e}.down_proj", (h, I), "expert")
            else:
                add(f"{p}.feed_forward.gate_proj", (I, h), "linear_mlp")
                add(f"{p}.feed_forward.up_proj", (I, h), "linear_mlp")
                add(f"{p}.feed_forward.down_proj", (h, I), "linear_mlp")
            add(f"{p}.input_layernorm", (h,), "kept"); add(f"{p}.pre_ff_layernorm", (h,), "kept")
        add("model.final_layernorm", (h,), "kept")
        if not c.get("tie_word_embeddings", False):
            add("lm_head", (V, h), "vocab")
        return T
    if mt == "qwen3_next":
        # transformers' Qwen3NextForCausalLM: model.layers.N.{self_attn | linear_attn},
        # mlp (router `gate`, experts, shared_expert, shared_expert_gate), two norms.
        KV = c["num_key_value_heads"]; hd = c["head_dim"]
        hk, hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        dk, dv, kern = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
        types = c.get("layer_types") or ["linear_attention" if (i + 1) % c["full_attention_interval"] else "full_attention" for i in range(L)]
        add("model.embed_tokens", (V, h), "vocab")
        for i in range(L):
            p = f"model.layers.{i}"
            if types[i] == "full_attention":
                add(f"{p}.self_attn.q_proj", (2 * H * hd, h), "linear_attn")  # queries + output gate
                add(f"{p}.self_attn.k_proj", (KV * hd, h), "linear_attn")
                add(f"{p}.self_attn.v_proj", (KV * hd, h), "linear_attn")
                add(f"{p}.self_attn.o_proj", (h, H * hd), "linear_attn")
                add(f"{p}.self_attn.q_norm", (hd,), "kept"); add(f"{p}.self_attn.k_norm", (hd,), "kept")
            else:
                key, val = hk * dk, hv * dv
                add(f"{p}.linear_attn.in_proj_qkvz", (2 * key + 2 * val, h), "linear_attn")
                add(f"{p}.linear_attn.in_proj_ba", (2 * hv, h), "linear_attn")
                add(f"{p}.linear_attn.conv1d", (2 * key + val, 1, kern), "kept")
                add(f"{p}.linear_attn.dt_bias", (hv,), "kept"); add(f"{p}.linear_attn.A_log", (hv,), "kept")
                add(f"{p}.linear_attn.norm", (dv,), "kept")
                add(f"{p}.linear_attn.out_proj", (h, val), "linear_attn")
            E, EI, SI = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
            add(f"{p}.mlp.gate", (E, h), "kept")
            for e in range(E):
                add(f"{p}.mlp.experts.{e}.gate_proj", (EI, h), "expert")
                add(f"{p}.mlp.experts.{e}.up_proj", (EI, h), "expert")
                add(f"{p}.mlp.experts.{e}.down_proj", (h, EI), "expert")
            add(f"{p}.mlp.shared_expert.gate_proj", (SI, h), "linear_mlp")
            add(f"{p}.mlp.shared_expert.up_proj", (SI, h), "linear_mlp")
            add(f"{p}.mlp.shared_expert.down_proj", (h, SI), "linear_mlp")
            add(f"{p}.mlp.shared_expert_gate", (1, h), "kept")
            add(f"{p}.input_layernorm", (h,), "kept"); add(f"{p}.post_attention_layernorm", (h,), "kept")
        add("model.norm", (h,), "kept")
        if not c.get("tie_word_embeddings", False):
            add("lm_head", (V, h), "vocab")
        return T
    if mt == "kimi_linear":
        # Kimi-Linear-48B-A3B's checkpoint (modeling_kimi.py; vLLM's kimi_linear.py):
        # KimiDeltaAttention in the kda_layers (1-based), MLA without q_lora in the
        # others, DeepSeek-style MoE (block_sparse_moe) after first_k_dense_replace.
        lc = c["linear_attn_config"]
        Hk, dk, kern = lc["num_heads"], lc["head_dim"], lc["short_conv_kernel_size"]
        P, kda = Hk * dk, {x - 1 for x in lc["kda_layers"]}
        E, EI, I = c["num_experts"], c["moe_intermediate_size"], c["intermediate_size"]
        add("model.embed_tokens", (V, h), "vocab")
        for i in range(L):
            p = f"model.layers.{i}.self_attn"
            if i in kda:
                for n in "qkv":
                    add(f"{p}.{n}_proj", (P, h), "linear_attn"); add(f"{p}.{n}_conv1d", (P, 1, kern), "kept")
                for n in "fg":
                    add(f"{p}.{n}_a_proj", (dk, h), "linear_attn"); add(f"{p}.{n}_b_proj", (P, dk), "linear_attn")
                add(f"{p}.b_proj", (Hk, h), "linear_attn")
                add(f"{p}.A_log", (1, 1, Hk, 1), "fp32"); add(f"{p}.dt_bias", (P,), "fp32")
                add(f"{p}.o_norm", (dk,), "kept")
                add(f"{p}.o_proj", (h, P), "linear_attn")
            else:
                add(f"{p}.q_proj", (H * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"]), h), "linear_attn")
                add(f"{p}.kv_a_proj_with_mqa", (c["kv_lora_rank"] + c["qk_rope_head_dim"], h), "linear_attn")
                add(f"{p}.kv_a_layernorm", (c["kv_lora_rank"],), "kept")
                add(f"{p}.kv_b_proj", (H * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"]), "linear_attn")
                add(f"{p}.o_proj", (h, H * c["v_head_dim"]), "linear_attn")
            q = f"model.layers.{i}"
            add(f"{q}.input_layernorm", (h,), "kept"); add(f"{q}.post_attention_layernorm", (h,), "kept")
            if i < c["first_k_dense_replace"]:
                add(f"{q}.mlp.gate_proj", (I, h), "linear_mlp"); add(f"{q}.mlp.up_proj", (I, h), "linear_mlp")
                add(f"{q}.mlp.down_proj", (h, I), "linear_mlp")
                continue
            m = f"{q}.block_sparse_moe"
            add(f"{m}.gate.weight", (E, h), "kept")
            add(f"{m}.gate.e_score_correction_bias", (E,), "kept")  # bf16 in this checkpoint
            for e in range(E):
                add(f"{m}.experts.{e}.w1", (EI, h), "expert"); add(f"{m}.experts.{e}.w3", (EI, h), "expert")
                add(f"{m}.experts.{e}.w2", (h, EI), "expert")
            SI = EI * c["num_shared_experts"]
            add(f"{m}.shared_experts.gate_proj", (SI, h), "linear_mlp"); add(f"{m}.shared_experts.up_proj", (SI, h), "linear_mlp")
            add(f"{m}.shared_experts.down_proj", (h, SI), "linear_mlp")
        add("model.norm", (h,), "kept")
        add("lm_head", (V, h), "vocab")
        return T
    if mt == "gemma4_text":
        # transformers' modeling_gemma4.py (Gemma4TextDecoderLayer, Gemma4TextAttention):
        # the full-attention layers use global_head_dim and, with attention_k_eq_v,
        # num_global_key_value_heads and no v_proj; q_norm and k_norm per head, v_norm
        # without weight; four norms and the layer_scalar buffer per layer; a GeGLU MLP.
        hd, KV, I = c["head_dim"], c["num_key_value_heads"], c["intermediate_size"]
        add("model.language_model.embed_tokens", (V, h), "vocab")
        for i, kind in enumerate(c["layer_types"]):
            p = f"model.language_model.layers.{i}"
            glob = kind == "full_attention"
            d = c["global_head_dim"] if glob else hd
            kv = c["num_global_key_value_heads"] if glob and c["attention_k_eq_v"] else KV
            add(f"{p}.self_attn.q_proj", (H * d, h), "linear_attn")
            add(f"{p}.self_attn.k_proj", (kv * d, h), "linear_attn")
            if not (glob and c["attention_k_eq_v"]):
                add(f"{p}.self_attn.v_proj", (kv * d, h), "linear_attn")
            add(f"{p}.self_attn.o_proj", (h, H * d), "linear_attn")
            add(f"{p}.self_attn.q_norm", (d,), "kept"); add(f"{p}.self_attn.k_norm", (d,), "kept")
            for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
                add(f"{p}.{n}", (h,), "kept")
            add(f"{p}.layer_scalar", (1,), "kept")
            add(f"{p}.mlp.gate_proj", (I, h), "linear_mlp"); add(f"{p}.mlp.up_proj", (I, h), "linear_mlp")
            add(f"{p}.mlp.down_proj", (h, I), "linear_mlp")
        add("model.language_model.norm", (h,), "kept")
        return T
    # Llama-style decoders (model.layers.N.self_attn / mlp), with the families' extras.
    hd = g(c, "head_dim", default=(256 if mt in ("gemma2", "gemma3", "gemma3_text") else h // H))
    KV = g(c, "num_key_value_heads", default=H)
    I = c.get("intermediate_size_mlp") if mt == "llama4_text" else c.get("intermediate_size")
    add("model.embed_tokens", (V, h), "vocab")
    experts = g(c, "num_local_experts", "num_experts", "n_routed_experts", default=0)
    def layer(i, prefix, mtp=False):
        k = (lambda base: "mtp_" + base) if mtp else (lambda base: base)
        p = f"{prefix}.{i}"
        if "kv_lora_rank" in c:
            qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
            if c.get("q_lora_rank"):
                add(f"{p}.self_attn.q_a_proj", (c["q_lora_rank"], h), k("linear_attn"))
                add(f"{p}.self_attn.q_a_layernorm", (c["q_lora_rank"],), k("kept"))
                add(f"{p}.self_attn.q_b_proj", (H * qk, c["q_lora_rank"]), k("linear_attn"))
            else:
                add(f"{p}.self_attn.q_proj", (H * qk, h), k("linear_attn"))
            add(f"{p}.self_attn.kv_a_proj_with_mqa", (c["kv_lora_rank"] + c["qk_rope_head_dim"], h), k("linear_attn"))
            add(f"{p}.self_attn.kv_a_layernorm", (c["kv_lora_rank"],), k("kept"))
            add(f"{p}.self_attn.kv_b_proj", (H * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"]), k("linear_attn"))
            add(f"{p}.self_attn.o_proj", (h, H * c["v_head_dim"]), k("linear_attn"))
            if "index_n_heads" in c:
                # DeepSeek-V3.2's Indexer (inference/model.py): wq_b, wk, k_norm (a
                # LayerNorm with bias), weights_proj (bf16 in the fp8 checkpoint).
                Hi, Di = c["index_n_heads"], c["index_head_dim"]
                add(f"{p}.self_attn.indexer.wq_b", (Hi * Di, c["q_lora_rank"]), k("linear_attn"))
                add(f"{p}.self_attn.indexer.wk", (Di, h), k("linear_attn"))
                add(f"{p}.self_attn.indexer.k_norm.weight", (Di,), k("kept"))
                add(f"{p}.self_attn.indexer.k_norm.bias", (Di,), k("kept"))
                add(f"{p}.self_attn.indexer.weights_proj", (Hi, h), k("kept"))
        else:
            for n, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
                add(f"{p}.self_attn.{n}_proj", (rows, h), k("linear_attn"))
                if c.get("attention_bias") or mt in ("qwen2", "qwen2_moe"):
                    add(f"{p}.self_attn.{n}_proj.bias", (rows,), k("kept"))
            add(f"{p}.self_attn.o_proj", (h, H * hd), k("linear_attn"))
            if c.get("attention_bias"):
                add(f"{p}.self_attn.o_proj.bias", (h,), k("kept"))
        if mt == "gpt_oss":
            add(f"{p}.self_attn.sinks", (H,), k("kept"))
        norms = {"gemma2": 4, "gemma3": 4, "gemma3_text": 4}.get(mt, 2)
        for n in range(norms):
            add(f"{p}.norm{n}", (h,), k("kept"))
        if mt in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text"):
            add(f"{p}.self_attn.q_norm", (hd,), k("kept")); add(f"{p}.self_attn.k_norm", (hd,), k("kept"))
        if mt in ("olmo2", "olmoe", "minimax_m2"):
            # Whole-projection q/k RMSNorms (OLMo-2, OLMoE; MiniMax-M2's "per_layer").
            add(f"{p}.self_attn.q_norm", (H * hd,), k("kept")); add(f"{p}.self_attn.k_norm", (KV * hd,), k("kept"))
        step = g(c, "interleave_moe_layer_step", "decoder_sparse_step", "moe_layer_freq", default=1)
        is_moe = experts > 1 and i >= c.get("first_k_dense_replace", 0) and (i + 1) % step == 0
        if not is_moe:
            for n in ("gate", "up"):
                add(f"{p}.mlp.{n}_proj", (I, h), k("linear_mlp"))
            add(f"{p}.mlp.down_proj", (h, I), k("linear_mlp"))
            return
        EI = c["intermediate_size"] if mt in ("llama4_text", "mixtral", "gpt_oss", "minimax_m2") else c["moe_intermediate_size"]
        add(f"{p}.mlp.router", (experts, h), k("kept"))
        if mt == "gpt_oss":
            add(f"{p}.mlp.router.bias", (experts,), k("kept"))
        if c.get("topk_method") == "noaux_tc" or c.get("use_routing_bias"):
            # DeepSeek's Gate: an fp32 parameter in the checkpoints (inference/model.py;
            # the headers list it as F32).
            add(f"{p}.mlp.gate.e_score_correction_bias", (experts,), k("fp32"))
        for e in range(experts):
            for n in ("gate", "up"):
                add(f"{p}.mlp.experts.{e}.{n}_proj", (EI, h), k("expert"))
                if mt == "gpt_oss":
                    add(f"{p}.mlp.experts.{e}.{n}_proj.bias", (EI,), k("expert_kept"))
            add(f"{p}.mlp.experts.{e}.down_proj", (h, EI), k("expert"))
            if mt == "gpt_oss":
                add(f"{p}.mlp.experts.{e}.down_proj.bias", (h,), k("expert_kept"))
        shared = 1 if mt == "llama4_text" else c.get("n_shared_experts", 1 if c.get("shared_expert_intermediate_size") else 0)
        SI = c["intermediate_size"] if mt == "llama4_text" else g(c, "shared_expert_intermediate_size", "moe_intermediate_size")
        for s in range(shared or 0):
            for n in ("gate", "up"):
                add(f"{p}.mlp.shared_experts.{s}.{n}_proj", (SI, h), k("linear_mlp"))
            add(f"{p}.mlp.shared_experts.{s}.down_proj", (h, SI), k("linear_mlp"))
    for i in range(L):
        layer(i, "model.layers")
    add("model.norm", (h,), "kept")
    tied = c.get("tie_word_embeddings", config.get("tie_word_embeddings"))
    if tied is None:
        tied = mt in ("gemma", "gemma2", "gemma3", "gemma3_text", "qwen2") and False or mt in ("gemma", "gemma2", "gemma3", "gemma3_text")
    if not tied:
        add("lm_head", (V, h), "vocab")
    for m in range(c.get("num_nextn_predict_layers", 0)):
        # DeepSeek-V3's checkpoint layer 61: a full MoE layer plus its extras.
        layer(L + m, "model.layers", mtp=True)
        for n in ("enorm", "hnorm", "shared_head.norm"):
            add(f"model.layers.{L + m}.{n}", (h,), "mtp_kept")
        add(f"model.layers.{L + m}.eh_proj", (h, 2 * h), "mtp_linear_mlp")
        add(f"model.layers.{L + m}.embed_tokens", (V, h), "mtp_vocab")
        add(f"model.layers.{L + m}.shared_head.head", (V, h), "mtp_vocab")
    return T

def numel(shape):
    n = 1
    for d in shape: n *= d
    return n

def tensor_bytes(shape, kind, fmt, attn_fmt):
    """Bytes of one tensor: linear weights in their format, the rest bf16."""
    base = kind.replace("mtp_", "")
    if base == "fp32":
        return 4 * numel(shape)
    if len(shape) != 2 or base in ("kept", "expert_kept", "vocab", "tower"):
        return 2 * numel(shape)
    f = attn_fmt if base == "linear_attn" else fmt
    out, inp = shape
    if f == "mxfp4": return out * cdiv(inp, 32) * 17
    if f == "nvfp4": return out * cdiv(inp, 2) + out * cdiv(inp, 16) + 8
    if f == "nvfp4a16": return out * cdiv(inp, 2) + out * cdiv(inp, 16) + 4
    if f == "fp8-channel": return out * inp + 2 * out
    if f.startswith("w4a16-g"):
        gs = int(f.split("-g")[1]); return out * cdiv(inp, 8) * 4 + out * cdiv(inp, gs) * 2 + 8
    return linear_bytes(f, out, inp)

def state_bytes(config, nbytes=2):
    """Constant per-sequence state of the state-space / linear-attention layers, as vLLM
    allocates it (vllm/model_executor/layers/mamba/mamba_utils.py,
    MambaStateShapeCalculator): Mamba-1 conv (d_inner, d_conv - 1) + SSM (d_inner,
    d_state); Gated DeltaNet conv (conv_kernel - 1, 2 key dim + value dim) + recurrent
    (value heads, key head dim, value head dim); in the model dtype ("auto")."""
    c = text_config(config)
    mt = c.get("model_type")
    L = g(c, "num_hidden_layers", "n_layer")
    if mt in ("mamba", "falcon_mamba"):
        d = c["intermediate_size"]
        return L * (d * (c["conv_kernel"] - 1) + d * c["state_size"]) * nbytes
    if mt == "mamba2":
        d = c["expand"] * c["hidden_size"]
        conv = (d + 2 * c["n_groups"] * c["state_size"]) * (c["conv_kernel"] - 1)
        return L * (conv + c["num_heads"] * c["head_dim"] * c["state_size"]) * nbytes
    if mt == "nemotron_h":
        d = c["mamba_num_heads"] * c["mamba_head_dim"]
        conv = (d + 2 * c["n_groups"] * c["ssm_state_size"]) * (c["conv_kernel"] - 1)
        m = c["hybrid_override_pattern"].count("M")
        # vLLM's NemotronHForCausalLMConfig hook takes the SSM (temporal) state's dtype
        # from mamba_ssm_cache_dtype; the conv state stays in the model dtype.
        ssm_bytes = 4 if c.get("mamba_ssm_cache_dtype") == "float32" else nbytes
        return m * (conv * nbytes + d * c["ssm_state_size"] * ssm_bytes)
    if mt == "granitemoehybrid":
        # vLLM's GraniteMoeHybridForCausalLM: Mamba-2 shapes, expand x hidden, in the
        # "mamba" layers.
        d = c["mamba_expand"] * c["hidden_size"]
        m = (c.get("layer_types") or ["mamba"] * L).count("mamba")
        conv = (d + 2 * c["mamba_n_groups"] * c["mamba_d_state"]) * (c["mamba_d_conv"] - 1)
        return m * (conv + c["mamba_n_heads"] * c["mamba_d_head"] * c["mamba_d_state"]) * nbytes
    if mt == "bamba":
        # vLLM's BambaForCausalLM: Mamba-2 shapes, intermediate_size = expand x hidden,
        # in the layers outside attn_layer_indices.
        d = c["mamba_expand"] * c["hidden_size"]
        m = L - len(set(c.get("attn_layer_indices") or []))
        conv = (d + 2 * c["mamba_n_groups"] * c["mamba_d_state"]) * (c["mamba_d_conv"] - 1)
        return m * (conv + c["mamba_n_heads"] * c["mamba_d_head"] * c["mamba_d_state"]) * nbytes
    if mt == "falcon_h1":
        # vLLM's FalconH1ForCausalLM.get_mamba_state_shape_from_config: Mamba-2 shapes
        # with intermediate_size = mamba_d_ssm, in every layer (beside the KV cache).
        d = c["mamba_d_ssm"] if c.get("mamba_d_ssm") is not None else c["mamba_expand"] * c["hidden_size"]
        conv = (d + 2 * c["mamba_n_groups"] * c["mamba_d_state"]) * (c["mamba_d_conv"] - 1)
        return L * (conv + c["mamba_n_heads"] * c["mamba_d_head"] * c["mamba_d_state"]) * nbytes
    if mt == "jamba":
        d = c["mamba_expand"] * c["hidden_size"]
        n = sum(1 for i in range(L) if i % c["attn_layer_period"] != c["attn_layer_offset"])
        return n * (d * (c["mamba_d_conv"] - 1) + d * c["mamba_d_state"]) * nbytes
    if mt == "kimi_linear":
        # vLLM's MambaStateShapeCalculator.kda_state_shape: q, k and v conv windows of
        # heads x head_dim x (kernel - 1), recurrent heads x head_dim x head_dim.
        lc = c["linear_attn_config"]
        P = lc["num_heads"] * lc["head_dim"]
        per = 3 * P * (lc["short_conv_kernel_size"] - 1) + lc["num_heads"] * lc["head_dim"] ** 2
        return len(lc["kda_layers"]) * per * nbytes
    if mt == "qwen3_next":
        n = sum(1 for i in range(L) if (i + 1) % c["full_attention_interval"])
        key, val = c["linear_num_key_heads"] * c["linear_key_head_dim"], c["linear_num_value_heads"] * c["linear_value_head_dim"]
        conv = (2 * key + val) * (c["linear_conv_kernel_dim"] - 1)
        rec = c["linear_num_value_heads"] * c["linear_key_head_dim"] * c["linear_value_head_dim"]
        return n * (conv + rec) * nbytes
    return 0

def kv_bytes(config, tokens, engine="latent", nbytes=2):
    """KV cache of one sequence at `tokens` tokens (attention layers only)."""
    c = text_config(config)
    mt = c.get("model_type", config.get("model_type"))
    if mt in ("mamba", "falcon_mamba", "mamba2"):
        return 0
    if mt == "granitemoehybrid":
        hd = c["hidden_size"] // c["num_attention_heads"]
        return (c.get("layer_types") or []).count("attention") * 2 * c["num_key_value_heads"] * hd * tokens * nbytes
    if mt == "bamba":
        hd = c["hidden_size"] // c["num_attention_heads"]
        return len(set(c.get("attn_layer_indices") or [])) * 2 * c["num_key_value_heads"] * hd * tokens * nbytes
    if mt == "falcon_h1":
        # Attention in every layer, beside the mixer.
        hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        return c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * hd * tokens * nbytes
    if mt == "nemotron_h":
        hd = g(c, "head_dim", "attention_head_dim", default=c["hidden_size"] // c["num_attention_heads"])
        return c["hybrid_override_pattern"].count("*") * 2 * c["num_key_value_heads"] * hd * tokens * nbytes
    if mt == "jamba":
        L = c["num_hidden_layers"]
        attn = sum(1 for i in range(L) if i % c["attn_layer_period"] == c["attn_layer_offset"])
        hd = c["hidden_size"] // c["num_attention_heads"]
        return attn * 2 * c["num_key_value_heads"] * hd * tokens * nbytes
    if mt == "qwen3_next":
        L = c["num_hidden_layers"]
        attn = sum(1 for i in range(L) if (i + 1) % c["full_attention_interval"] == 0)
        return attn * 2 * c["num_key_value_heads"] * c["head_dim"] * tokens * nbytes
    L = g(c, "num_hidden_layers", "n_layer"); H = g(c, "num_attention_heads", "n_head")
    h = g(c, "hidden_size", "n_embd")
    if mt == "gemma4_text":
        # Sliding layers keep the window with their KV heads x head_dim; the global
        # layers all tokens with theirs (K and V both cached, also with k = v).
        total = 0
        for kind in c["layer_types"]:
            if kind == "full_attention":
                kv = c["num_global_key_value_heads"] if c["attention_k_eq_v"] else c["num_key_value_heads"]
                total += 2 * kv * c["global_head_dim"] * tokens * nbytes
            else:
                total += 2 * c["num_key_value_heads"] * c["head_dim"] * min(tokens, c["sliding_window"]) * nbytes
        return total
    if mt == "kimi_linear":
        # Only the MLA layers (full_attn_layers) keep KV: the latent and the rope key.
        L = len(c["linear_attn_config"]["full_attn_layers"])
    if "kv_lora_rank" in c:
        per = (c["kv_lora_rank"] + c["qk_rope_head_dim"]) if engine == "latent" else H * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"] + c["v_head_dim"])
        return L * per * tokens * nbytes
    hd = g(c, "head_dim", default=(256 if mt in ("gemma2", "gemma3", "gemma3_text") else h // H))
    if mt == "falcon":
        kv = c.get("num_kv_heads", H) if c.get("new_decoder_architecture") else (1 if c.get("multi_query", True) else H)
    else:
        kv = g(c, "num_key_value_heads", default=H)
    kept = [tokens] * L
    if mt == "llama4_text" and c.get("attention_chunk_size"):
        rope = c.get("no_rope_layers") or [0 if (i + 1) % 4 == 0 else 1 for i in range(L)]
        kept = [min(tokens, c["attention_chunk_size"]) if r else tokens for r in rope]
    elif c.get("sliding_window") and c.get("use_sliding_window", True):
        w = c["sliding_window"]
        if "layer_types" in c:
            kept = [min(tokens, w) if t == "sliding_attention" else tokens for t in c["layer_types"]]
        elif mt == "gemma2":
            kept = [min(tokens, w) if i % 2 == 0 else tokens for i in range(L)]
        elif mt in ("gemma3", "gemma3_text"):
            p = c.get("sliding_window_pattern", 6)
            kept = [tokens if (i + 1) % p == 0 else min(tokens, w) for i in range(L)]
        else:
            kept = [min(tokens, w)] * L
    return sum(2 * kv * hd * k * nbytes for k in kept)

def indexer_bytes(config, tokens):
    """vLLM's DeepseekV32IndexerCache: per attention layer and token, index_head_dim fp8
    values and one fp32 scale per 128 (head_dim + head_dim // 128 * 4 bytes, uint8)."""
    c = text_config(config)
    if "index_n_heads" not in c:
        return 0
    d = c["index_head_dim"]
    return c["num_hidden_layers"] * tokens * (d + d // 128 * 4)

def fp8_scales(config):
    """fp32 weight_scale_inv elements of an fp8 128x128-block checkpoint: one per block
    of every quantised linear (not eh_proj, the routers, weights_proj: bf16)."""
    return sum(cdiv(s[0], 128) * cdiv(s[1], 128) for n, s, k in checkpoint_tensors(config)
               if len(s) == 2 and k.replace("mtp_", "") in ("linear_attn", "linear_mlp", "expert") and not n.endswith("eh_proj"))

def summarise(config, fmt="bf16", attn_fmt=None):
    T = checkpoint_tensors(config)
    params = sum(numel(s) for _, s, _ in T)
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

# name -> (published total parameters or None, published source of that total)
REAL = {
    "llama-3.1-8b": (8_030_261_248, "model card / safetensors index"),
    "llama-3.1-70b": (70_553_706_496, "model card / safetensors index"),
    "llama-3.2-1b": (1_235_814_400, "model card / safetensors index"),
    "qwen2.5-0.5b": (494_032_768, "model card"),
    "qwen2.5-7b": (7_615_616_512, "model card"),
    "qwen2.5-72b": (72_706_203_648, "model card"),
    "qwen3-0.6b": (596_049_920, "safetensors index"),
    "qwen3-30b-a3b": (30_532_122_624, "safetensors index"),
    "mistral-7b-v0.1": (7_241_732_096, "safetensors index"),
    "mixtral-8x7b": (46_702_792_704, "safetensors index"),
    "phi-3-mini-4k": (3_821_079_552, "safetensors index"),
    "gemma-2-2b": (2_614_341_888, "safetensors index"),
    "gemma-2-9b": (9_241_705_984, "safetensors index"),
    "gemma-3-1b": (999_885_952, "safetensors index"),
    "gemma-3-4b": (4_300_079_472, "safetensors index (text 3 880 263 168 + SigLIP tower and projector)"),
    "olmo-2-7b": (7_298_617_344, "safetensors index"),
    "falcon-7b": (6_921_720_704, "safetensors index"),
    "falcon-40b": (None, "model card: 40B (41.3B counted; no exact published total found)"),
    "gpt2": (124_439_808, "safetensors index"),
    "gpt2-medium": (354_823_168, "safetensors index"),
    "pythia-160m": (162_322_944, "safetensors index"),
    "deepseek-v2-lite": (15_706_484_224, "safetensors index"),
    "deepseek-v3": (671_026_419_200, "671B main model (model card: 671B + 14B MTP module = 685B); checked without the MTP layer"),
    "gpt-oss-20b": (20_914_757_184, "model card: 20.9B (21B)"),
    "gpt-oss-120b": (116_829_156_672, "model card: 116.8B (117B)"),
    "llama-4-scout": (None, "model card: 109B total with the vision tower, 17B active"),
    "llama-4-maverick": (None, "model card: 400B total with the vision tower, 17B active"),
    "mamba-2.8b": (None, "model page: 2.77B"),
    "falcon-mamba-7b": (None, "model page: 7.27B"),
    "mamba-codestral-7b": (None, "model page: 7.29B"),
    "nemotron-h-8b": (None, "model name: 8B (model page 8.1B)"),
    "nemotron-3-nano-30b-a3b": (31_577_940_288, "model card: 31.6B total; 31 577 940 288 is llama.cpp's n_params for the GGUF conversion (unsloth/Nemotron-3-Nano-30B-A3B-GGUF), as public llama-bench and llama-server outputs quote it, the router's correction biases included"),
    "nemotron-3-super-120b-a12b": (123_611_033_088, "the BF16 checkpoint's safetensors headers (a public test quotes them: 123 611 033 088 in all, BF16 weights 123 611 012 096 + fp32 routing buffers; MTP 2 942 324 736; inactive backbone experts 107 898 470 400); model card 120B total, 12B active"),
    "jamba-1.5-mini": (None, "model card: 52B total (51.6B), 12B active"),
    "falcon-h1-0.5b-instruct": (None, "model size 521M (the Hugging Face safetensors count, as llmrun.dev/model/tiiuae-falcon-h1-0-5b-instruct shows it: 521M parameters, a 1.04 GB BF16 file)"),
    "bamba-9b": (None, "checkpoint name ibm-fms/Bamba-9.8b-2.2T-hf (BambaConfig's docstring: its defaults come from it): 9.8B"),
    "granite-4.0-h-tiny": (None, "model card and IBM's Granite 4.0 docs: 7B total, 1B active"),
    "granite-4.0-h-small": (None, "32.2B (en.immers.cloud/ai/ibm-granite/granite-4.0-h-small); IBM's Granite 4.0 docs: 32B total, 9B active"),
    "deepseek-v3.2": (685_396_921_376, "the FP8 checkpoint's safetensors headers (a public report lists them): 685 396 921 376 values, the MTP layer and the fp32 block scales included; checked as parameters + scales"),
    "kimi-k2-instruct": (1_026_470_731_056, "the FP8 checkpoint's safetensors headers (a public report lists them): 1 026 470 731 056 values, fp32 block scales and 61 rotary inv_freq buffers [56] included; checked as parameters + scales + buffers"),
    "kimi-linear-48b-a3b": (49_122_681_728, "the BF16 checkpoint's safetensors headers (a public report lists them): 49 122 681 728 values; model card: 48B total, 3B active"),
    "gemma-4-31b": (None, "model card: 31B, the gemma4_vision tower included; the text model counted here is 30 697 345 340, the tower is not counted (see confidence)"),
    "minimax-m2": (None, "model card: 230B total parameters, 10B active"),
    "qwen3-next-80b-a3b": (79_674_391_296, "80B (model card); 79 674 391 296 published for Qwen3-Coder-Next, the same shape, without the MTP module"),
}

# Published totals that include the checkpoint's MTP blocks.
PUBLISHED_WITH_MTP = {"nemotron-3-super-120b-a12b", "deepseek-v3.2"}
# Published totals that are a header count: the fp8 block scales (weight_scale_inv) and
# other stored buffers are in it; the value is what those buffers add.
HEADER_TOTALS = {"deepseek-v3.2": 0, "kimi-k2-instruct": 61 * 56}
SUPER_MTP = 2_942_324_736 + 512  # the headers' BF16 MTP figure + its fp32 correction bias

# Published totals given only rounded: (value, significant digits it is rounded to).
ROUNDED = {"minimax-m2": (230e9, 2), "gemma-4-31b": (31e9, 2), "granite-4.0-h-tiny": (7e9, 1), "granite-4.0-h-small": (32.2e9, 3), "bamba-9b": (9.8e9, 2), "falcon-h1-0.5b-instruct": (521e6, 3), "mamba-2.8b": (2.77e9, 3), "mamba-codestral-7b": (7.29e9, 3), "nemotron-h-8b": (8.1e9, 2), "nemotron-3-nano-30b-a3b": (31.6e9, 3), "falcon-mamba-7b": (7.27e9, 3), "jamba-1.5-mini": (51.6e9, 3)}

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

# Warnings a reader must see (deliverable 5): substrings of the estimate's or the
# config reader's warnings.
WARN = {
    "gemma-4-31b": ["vision tower is not counted"],
    "gpt2": ["exceed the 1024 positions"],
    "gpt2-medium": ["exceed the 1024 positions"],
    "llama-4-scout": ["vision tower is not counted"],
    "gemma-3-4b": [],
    "llama-4-maverick": ["vision tower is not counted"],
    "olmo-2-7b": ["exceed the 4096 positions"],
    "phi-3-mini-4k": ["exceed the 4096 positions"],
}

# The config reader's confidence where it is not exact, and why.
TOWER_NOT_COUNTED = "approximate: vision_config: the vision tower is not counted; its weights add to the total"
CONFIDENCE = {"llama-4-scout": TOWER_NOT_COUNTED, "llama-4-maverick": TOWER_NOT_COUNTED, "gemma-4-31b": TOWER_NOT_COUNTED}

def write_real(name, cfg, source, tokens, fmt, attn_fmt, published):
    params, active, wbytes, mtp = summarise(cfg, fmt, attn_fmt)
    kvb = kv_bytes(cfg, tokens)
    state = state_bytes(cfg)
    index = indexer_bytes(cfg, tokens)
    expect = {"parameters": params, "active_parameters": active, "weights_bytes": wbytes, "kv_cache_bytes": kvb + state + index}
    lines = {}
    if state:
        lines.update({"kv_cache": kvb, "kv_cache.state": state})
    if "kv_lora_rank" in cfg.get("text_config", cfg):
        lines["kv_cache.decompressed"] = kv_bytes(cfg, tokens, engine="decompressed")
    if index:
        lines.update({"kv_cache": kvb, "kv_cache.indexer": index})
    if lines:
        expect["lines"] = lines
    case = {"name": name, "source": source,
            "published_parameters": published,
            "config": {k: v for k, v in cfg.items() if not k.startswith("_")},
            "input": {"context": str(tokens), "kv-dtype": "bf16", "reserve-gib": "0"},
            "expect": expect}
    if name.split("@")[0] in WARN:
        case["warnings"] = WARN[name.split("@")[0]]
    # What the config reader must say of its own reading: exact unless it names why not.
    case["confidence"] = CONFIDENCE.get(name.split("@")[0], "exact")
    (HERE / f"real-{name.replace('@', '-')}.json").write_text(json.dumps(case, indent=1) + "\n")
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
    if name == "nemotron-3-super-120b-a12b":
        # The headers' other figures: the MTP blocks, and the backbone's inactive experts.
        assert mtp == SUPER_MTP, (name, mtp)
        _, active, _, _ = summarise(cfg)
        assert params - mtp - active == 107_898_470_400, (name, params - mtp - active)
    if name in ROUNDED:
        value, digits = ROUNDED[name]
        assert float(f"{params:.{digits}g}") == value, (name, params, value)
    TABLE.append((name, published, how, params, kvb))
# Llama-4's chunked attention matters beyond one chunk: 64k tokens.
cfg = load("llama-4-scout")
write_real("llama-4-scout@64k", cfg, cfg["_source"], 65536, "bf16", "bf16", None)
base = load("llama-3.1-8b")
for name, (src, q, fmt) in CT.items():
    cfg = dict(base); cfg["quantization_config"] = q
    write_real(name, cfg, src + " (quantization_config; shape of meta-llama/Llama-3.1-8B)", 8192, fmt, fmt, None)

if __name__ == "__main__":
    print("| model | published | oracle parameters | KV at 8k (bf16, 1 seq) |")
    for name, published, how, params, kvb in TABLE:
        print(f"| {name} | {published if published else how} | {params} | {kvb} |")
