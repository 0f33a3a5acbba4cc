"""Falcon (FalconForCausalLM): multi-query attention unless new_decoder_architecture
(grouped K/V heads), one LayerNorm feeding parallel attention and MLP (or ln_attn and
ln_mlp), biases under `bias`."""
from common import LLAMA, decoder_kv, dims, g, rope_buffers, rope_freqs


def falcon(c, config, add):
    h, L, H, V = dims(c)
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


def falcon_kv(c, tokens, nbytes, engine):
    H = g(c, "num_attention_heads", "n_head")
    kv = c.get("num_kv_heads", H) if c.get("new_decoder_architecture") else (1 if c.get("multi_query", True) else H)
    return decoder_kv(c, tokens, nbytes, engine, LLAMA, kv_heads=kv)


TENSORS = {"falcon": falcon}
KV = {"falcon": falcon_kv}

REAL = {
    "falcon-7b": (6_921_720_704, "safetensors index"),
    "falcon-40b": (None, "model card: 40B (41.3B counted; no exact published total found)"),
}

# FalconRotaryEmbedding, unless ALiBi.
ROPE = {"falcon": lambda c, add: None if c.get("alibi") else rope_buffers(add, rope_freqs(c), "transformer.rotary_emb")}
