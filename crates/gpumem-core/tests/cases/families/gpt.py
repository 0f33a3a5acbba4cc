"""GPT-2 (transformers' GPT2LMHeadModel: wte, wpe, h.N with c_attn / c_proj / c_fc,
biases everywhere, LayerNorms with bias) and GPT-NeoX (Pythia: fused query_key_value,
untied embed_out)."""
from common import dims, g, rope_buffers, rope_freqs


def gpt2(c, config, add):
    h, L, H, V = dims(c)
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


def gpt_neox(c, config, add):
    h, L, H, V = dims(c)
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


TENSORS = {"gpt2": gpt2, "gpt_neox": gpt_neox}

# name -> (published total parameters or None, published source of that total)
REAL = {
    "gpt2": (124_439_808, "safetensors index"),
    "gpt2-medium": (354_823_168, "safetensors index"),
    "pythia-160m": (162_322_944, "safetensors index"),
}
WARN = {"gpt2": ["exceed the 1024 positions"], "gpt2-medium": ["exceed the 1024 positions"]}

# GPT-2: learned positions; GPT-NeoX: GPTNeoXRotaryEmbedding over rotary_pct of the head.
ROPE = {"gpt2": None, "gpt_neox": lambda c, add: rope_buffers(add, rope_freqs(c), "gpt_neox.rotary_emb")}
