"""CTRL (transformers' CTRLLMHeadModel, models/ctrl/modeling_ctrl.py): w (the token
embedding), h.N with multi_head_attention.Wq / Wk / Wv / dense and ffn.0 / ffn.2 (all
with biases), layernorm1 and layernorm2 with biases, the final layernorm, the lm_head
tied to w with its own bias; and pos_encoding, an fp32 sinusoidal table [n_positions,
n_embd] built with the model and never saved (a buffer: bytes, no parameters)."""
from common import dims


def ctrl(c, config, add):
    h, L, H, V = dims(c)
    F = c["dff"]
    add("transformer.w.weight", (V, h), "vocab")
    for i in range(L):
        p = f"transformer.h.{i}"
        for n in ("Wq", "Wk", "Wv", "dense"):
            add(f"{p}.multi_head_attention.{n}.weight", (h, h), "linear_attn")
            add(f"{p}.multi_head_attention.{n}.bias", (h,), "kept")
        add(f"{p}.ffn.0.weight", (F, h), "linear_mlp"); add(f"{p}.ffn.0.bias", (F,), "kept")
        add(f"{p}.ffn.2.weight", (h, F), "linear_mlp"); add(f"{p}.ffn.2.bias", (h,), "kept")
        for ln in ("layernorm1", "layernorm2"):
            add(f"{p}.{ln}.weight", (h,), "kept"); add(f"{p}.{ln}.bias", (h,), "kept")
    add("transformer.layernorm.weight", (h,), "kept"); add("transformer.layernorm.bias", (h,), "kept")
    add("lm_head.bias", (V,), "kept")
    add("transformer.pos_encoding", (c["n_positions"], h), "buffer_fp32")


TENSORS = {"ctrl": ctrl}
REAL = {"ctrl": (None, "transformers 5.23 builds 1 637 964 550 parameters from this config on the meta device, and a 256 000 000-byte fp32 pos_encoding buffer")}

# No rotary embedding: no frequency buffers.
ROPE = {"ctrl": None}
