"""What every family of the oracle shares: the formats' published byte layouts, the
dimension helpers, the Mamba mixer as its checkpoints store it, and the Llama-style
decoder layout (model.layers.N.self_attn / mlp) with the options its families vary.

A family module (families/NAME.py) says what is its own: its checkpoint layout when it
is no Llama-style decoder, its decoder options when it is one, its KV cache and
recurrent state when they differ, and the published totals of its real configs.
"""


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


def is_buffer(kind):
    """A buffer the model builds beside its weights and never saves (kinds "buffer" in
    the model's 16-bit dtype, "buffer_fp32", "buffer_int64", "buffer_complex64"): bytes on the device, no
    parameters."""
    return kind.startswith("buffer")


def numel(shape):
    n = 1
    for d in shape: n *= d
    return n


def tensor_bytes(shape, kind, fmt, attn_fmt):
    """Bytes of one tensor: linear weights in their format, the rest bf16."""
    base = kind.replace("mtp_", "")
    if base in ("fp32", "buffer_fp32"):
        return 4 * numel(shape)
    if base in ("buffer_int64", "buffer_complex64"):
        return 8 * numel(shape)
    if len(shape) != 2 or base in ("kept", "expert_kept", "vocab", "tower", "buffer"):
        return 2 * numel(shape)
    f = attn_fmt if base == "linear_attn" else fmt
    out, inp = shape
    if f.startswith("ct-decompressed:"):
        return ct_decompressed_bytes(f.split(":", 1)[1], out, inp)
    if f == "mxfp4": return out * cdiv(inp, 32) * 17
    if f == "nvfp4": return out * cdiv(inp, 2) + out * cdiv(inp, 16) + 8
    if f == "nvfp4a16": return out * cdiv(inp, 2) + out * cdiv(inp, 16) + 4
    if f == "fp8-channel": return out * inp + 2 * out
    if f.startswith("w4a16-g"):
        gs = int(f.split("-g")[1]); return out * cdiv(inp, 8) * 4 + out * cdiv(inp, gs) * 2 + 8
    return linear_bytes(f, out, inp)


def ct_decompressed_bytes(f, out, inp):
    """A compressed-tensors linear as transformers holds it after the first forward:
    compressed-tensors 0.20.1 (compressors/model_compressors/model_compressor.py
    add_decompress_hook -> decompress_model -> decompress_module) replaces the
    quantised values with a bf16 `weight` and keeps what `decompress` does not pop:
    fp8 `weight_scale` (bf16, one per row); W4A16 `weight_scale` (bf16, one per group)
    and `weight_shape`; NVFP4 `weight_scale` turned to bf16 (nvfp4/base.py
    `scale.to(unpacked.dtype)`) and the fp32 global scale(s)."""
    w = 2 * out * inp
    if f == "fp8-channel": return w + 2 * out
    if f == "fp8-block": return w + cdiv(out, 128) * cdiv(inp, 128) * 4
    if f.startswith("w4a16-g"):
        gs = int(f.split("-g")[1]); return w + out * cdiv(inp, gs) * 2 + 8
    if f == "nvfp4": return w + out * cdiv(inp, 16) * 2 + 8
    if f == "nvfp4a16": return w + out * cdiv(inp, 16) * 2 + 4
    raise ValueError(f)


def ct_decompress_excess(f, out, inp):
    """What compressed-tensors 0.20.1 holds at the peak of one linear's decompression
    beyond the state it leaves (ct_decompressed_bytes): the stored bytes it replaces
    and the temporaries beside the output (compressors/base.py decompress_module keeps
    the compressed state dict until it returns). FP8 (naive_quantized decompress ->
    _dequantize): the bf16 cast and the product; FP8-block pads to 128 x 128 tiles
    first (_process_block, a padded fp8 copy); W4A16 (pack_quantized decompress):
    the int8 values unpack_from_int32 returns, the cast and the product; NVFP4
    (unpack_fp4_from_uint8): 23 B a value (nibbles 1/2 + 1/2, stack 1, bool 1,
    int64 8, three fp32 4 + 4 + 4) and the device copy of the 8-entry fp32 table."""
    v = out * inp
    if f == "fp8-channel": t = 2 * 2 * v
    elif f == "fp8-block":
        p = cdiv(out, 128) * cdiv(inp, 128) * 128 * 128
        t = (p if p != v else 0) + 2 * 2 * p
    elif f.startswith("w4a16-g"): t = v + 2 * 2 * v
    elif f in ("nvfp4", "nvfp4a16"): t = 23 * v + 32
    else: raise ValueError(f)
    return tensor_bytes((out, inp), "linear_mlp", f, f) + t - ct_decompressed_bytes(f, out, inp)


def g(cfg, *keys, default=None):
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def dims(c):
    """(hidden, layers, heads, vocab) under their usual names."""
    return g(c, "hidden_size", "n_embd"), g(c, "num_hidden_layers", "n_layer"), g(c, "num_attention_heads", "n_head"), c["vocab_size"]


def mamba_mixer(add, p, h, d, n, k, r):
    """One Mamba(-1) mixer as MambaMixer / JambaMambaMixer store it (use_bias false, conv bias)."""
    add(f"{p}.in_proj", (2 * d, h), "linear_attn")
    add(f"{p}.conv1d.weight", (d, 1, k), "kept"); add(f"{p}.conv1d.bias", (d,), "kept")
    add(f"{p}.x_proj", (r + 2 * n, d), "linear_attn")
    add(f"{p}.dt_proj.weight", (d, r), "linear_attn"); add(f"{p}.dt_proj.bias", (d,), "kept")
    add(f"{p}.A_log", (d, n), "kept"); add(f"{p}.D", (d,), "kept")
    add(f"{p}.out_proj", (h, d), "linear_attn")


class Decoder:
    """How a Llama-style family's checkpoint departs from Llama's (the defaults)."""

    def __init__(self, head_dim=None, dense_width="intermediate_size", qkv_bias=False, sinks=False,
                 norms=2, qk_norm=None, router_bias=False, expert_bias=False,
                 expert_width="moe_intermediate_size", shared=None, tied=False, sliding=None):
        self.head_dim = head_dim          # head_dim when absent (None: hidden / heads)
        self.dense_width = dense_width    # the dense MLP's width key
        self.qkv_bias = qkv_bias          # biases on q, k, v always
        self.sinks = sinks                # one attention-sink logit per head
        self.norms = norms                # norms per layer
        self.qk_norm = qk_norm            # None, "head" (per head) or "whole" (over the projection)
        self.router_bias = router_bias    # a 16-bit router bias
        self.expert_bias = expert_bias    # biases on every expert projection
        self.expert_width = expert_width  # the routed experts' width key
        self.shared = shared              # (shared experts, width key) fixed, or None: from the config
        self.tied = tied                  # tie_word_embeddings when absent
        self.sliding = sliding            # layers with a window without layer_types: None (all), 2 (alternate), "pattern"


LLAMA = Decoder()


def decoder_tensors(c, config, add, d):
    """A Llama-style decoder's checkpoint tensors (model.layers.N.self_attn / mlp), MLA and
    its indexer, routed and shared experts and MTP layers as DeepSeek stores them."""
    h, L, H, V = dims(c)
    hd = g(c, "head_dim", default=d.head_dim or h // H)
    KV = g(c, "num_key_value_heads", default=H)
    I = c.get(d.dense_width)
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
                if c.get("attention_bias") or d.qkv_bias:
                    add(f"{p}.self_attn.{n}_proj.bias", (rows,), k("kept"))
            add(f"{p}.self_attn.o_proj", (h, H * hd), k("linear_attn"))
            if c.get("attention_bias"):
                add(f"{p}.self_attn.o_proj.bias", (h,), k("kept"))
        if d.sinks:
            add(f"{p}.self_attn.sinks", (H,), k("kept"))
        for n in range(d.norms):
            add(f"{p}.norm{n}", (h,), k("kept"))
        if d.qk_norm == "head":
            add(f"{p}.self_attn.q_norm", (hd,), k("kept")); add(f"{p}.self_attn.k_norm", (hd,), k("kept"))
        if d.qk_norm == "whole":
            add(f"{p}.self_attn.q_norm", (H * hd,), k("kept")); add(f"{p}.self_attn.k_norm", (KV * hd,), k("kept"))
        step = g(c, "interleave_moe_layer_step", "decoder_sparse_step", "moe_layer_freq", default=1)
        is_moe = experts > 1 and i >= c.get("first_k_dense_replace", 0) and (i + 1) % step == 0
        if not is_moe:
            for n in ("gate", "up"):
                add(f"{p}.mlp.{n}_proj", (I, h), k("linear_mlp"))
            add(f"{p}.mlp.down_proj", (h, I), k("linear_mlp"))
            return
        EI = c[d.expert_width]
        add(f"{p}.mlp.router", (experts, h), k("kept"))
        if d.router_bias:
            add(f"{p}.mlp.router.bias", (experts,), k("kept"))
        if c.get("topk_method") == "noaux_tc" or c.get("use_routing_bias"):
            # DeepSeek's Gate: an fp32 parameter in the checkpoints (inference/model.py;
            # the headers list it as F32).
            add(f"{p}.mlp.gate.e_score_correction_bias", (experts,), k("fp32"))
        for e in range(experts):
            for n in ("gate", "up"):
                add(f"{p}.mlp.experts.{e}.{n}_proj", (EI, h), k("expert"))
                if d.expert_bias:
                    add(f"{p}.mlp.experts.{e}.{n}_proj.bias", (EI,), k("expert_kept"))
            add(f"{p}.mlp.experts.{e}.down_proj", (h, EI), k("expert"))
            if d.expert_bias:
                add(f"{p}.mlp.experts.{e}.down_proj.bias", (h,), k("expert_kept"))
        if d.shared:
            shared, SI = d.shared[0], c[d.shared[1]]
        else:
            shared = c.get("n_shared_experts", 1 if c.get("shared_expert_intermediate_size") else 0)
            SI = g(c, "shared_expert_intermediate_size", "moe_intermediate_size")
        for s in range(shared or 0):
            for n in ("gate", "up"):
                add(f"{p}.mlp.shared_experts.{s}.{n}_proj", (SI, h), k("linear_mlp"))
            add(f"{p}.mlp.shared_experts.{s}.down_proj", (h, SI), k("linear_mlp"))
    for i in range(L):
        layer(i, "model.layers")
    add("model.norm", (h,), "kept")
    tied = c.get("tie_word_embeddings", config.get("tie_word_embeddings"))
    if tied is None:
        tied = d.tied
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


def decoder_kv(c, tokens, nbytes, engine, d, kv_heads=None, layers=None, kept=None):
    """A Llama-style decoder's KV cache of one sequence at `tokens` tokens: MLA's latent
    (or, `engine="decompressed"`, its K and V per head), else K and V per layer, the
    sliding layers keeping their window."""
    h, L, H, _ = dims(c)
    L = layers if layers is not None else L
    if "kv_lora_rank" in c:
        per = (c["kv_lora_rank"] + c["qk_rope_head_dim"]) if engine == "latent" else H * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"] + c["v_head_dim"])
        return L * per * tokens * nbytes
    hd = g(c, "head_dim", default=d.head_dim or h // H)
    kv = kv_heads if kv_heads is not None else g(c, "num_key_value_heads", default=H)
    if kept is None:
        kept = [tokens] * L
        if c.get("sliding_window") and c.get("use_sliding_window", True):
            w = c["sliding_window"]
            if "layer_types" in c:
                kept = [min(tokens, w) if t == "sliding_attention" else tokens for t in c["layer_types"]]
            elif d.sliding == 2:
                kept = [min(tokens, w) if i % 2 == 0 else tokens for i in range(L)]
            elif d.sliding == "pattern":
                p = c.get("sliding_window_pattern", 6)
                kept = [tokens if (i + 1) % p == 0 else min(tokens, w) for i in range(L)]
            else:
                kept = [min(tokens, w)] * L
    return sum(2 * kv * hd * k * nbytes for k in kept)


def rope_freqs(c, d=LLAMA):
    """Values of one rotary embedding's inv_freq: torch.arange(0, dim, 2) over the
    rotary width dim (transformers 5.23 modeling_rope_utils.py,
    _compute_default_rope_parameters and every rope type's init, which change the
    values, never the length): MLA's qk_rope_head_dim; else the head width times the
    rotary fraction (partial_rotary_factor, flat or in a flat rope_parameters /
    rope_scaling; GPT-NeoX's rotary_pct; MiniMax-M2's legacy rotary_dim, which its
    config turns into rotary_dim / head_dim), int() of the product."""
    if c.get("qk_rope_head_dim"):
        return cdiv(c["qk_rope_head_dim"], 2)
    h, _, H, _ = dims(c)
    hd = g(c, "head_dim", "kv_channels", default=d.head_dim or h // H)
    rp = c.get("rope_parameters") or c.get("rope_scaling") or {}
    flat = rp if not any(isinstance(v, dict) for v in rp.values()) else {}
    if c.get("rotary_dim") and g(c, "partial_rotary_factor") is None:
        dim = c["rotary_dim"]
    else:
        dim = int(hd * g(c, "partial_rotary_factor", "rotary_pct", default=flat.get("partial_rotary_factor", 1.0)))
    return cdiv(dim, 2)


def rope_buffers(add, freqs, prefix="model.rotary_emb", names=("",)):
    """A rotary embedding's two fp32 buffers per table, never saved: inv_freq and
    original_inv_freq (LlamaRotaryEmbedding.__init__, transformers 5.23
    models/llama/modeling_llama.py, nn.Buffer(..., persistent=False)); a per-layer-type
    embedding (Gemma3RotaryEmbedding) names them {layer_type}_inv_freq and
    {layer_type}_original_inv_freq. `freqs` is one length or one per name."""
    lengths = freqs if isinstance(freqs, (list, tuple)) else [freqs] * len(names)
    for n, f in zip(names, lengths):
        p = f"{n}_" if n else ""
        add(f"{prefix}.{p}inv_freq", (f,), "buffer_fp32")
        add(f"{prefix}.{p}original_inv_freq", (f,), "buffer_fp32")


def layer_kinds(c, sliding_pattern=None):
    """The distinct layer types a per-layer-type rotary embedding makes tables for
    (sorted(set(config.layer_types))): layer_types where the config lists them, else
    the config class's pattern (`sliding_pattern`: every how many layers one is full)."""
    if c.get("layer_types"):
        return sorted(set(c["layer_types"]))
    L = dims(c)[1]
    if sliding_pattern and L >= sliding_pattern:
        return ["full_attention", "sliding_attention"]
    return ["full_attention"] if not sliding_pattern else ["sliding_attention"]
