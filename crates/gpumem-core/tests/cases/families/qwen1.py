"""Qwen-1 (remote code modeling_qwen.py, QWenLMHeadModel): fused c_attn with bias,
c_proj and the MLP's w1, w2, c_proj biased unless no_bias, the MLP intermediate_size // 2
wide, RMSNorms ln_1, ln_2, ln_f, an untied lm_head; K and V per head, kv_channels wide."""
from common import LLAMA, decoder_kv, dims, g


def qwen(c, config, add):
    h, L, H, V = dims(c)
    hd = g(c, "kv_channels", default=h // H)
    I = c["intermediate_size"] // 2
    bias = not c.get("no_bias", True)
    add("transformer.wte.weight", (V, h), "vocab")
    for i in range(L):
        p = f"transformer.h.{i}"
        add(f"{p}.ln_1.weight", (h,), "kept")
        add(f"{p}.attn.c_attn.weight", (3 * H * hd, h), "linear_attn")
        add(f"{p}.attn.c_attn.bias", (3 * H * hd,), "kept")
        add(f"{p}.attn.c_proj.weight", (h, H * hd), "linear_attn")
        add(f"{p}.ln_2.weight", (h,), "kept")
        add(f"{p}.mlp.w1.weight", (I, h), "linear_mlp"); add(f"{p}.mlp.w2.weight", (I, h), "linear_mlp")
        add(f"{p}.mlp.c_proj.weight", (h, I), "linear_mlp")
        if bias:
            add(f"{p}.attn.c_proj.bias", (h,), "kept")
            add(f"{p}.mlp.w1.bias", (I,), "kept"); add(f"{p}.mlp.w2.bias", (I,), "kept")
            add(f"{p}.mlp.c_proj.bias", (h,), "kept")
    add("transformer.ln_f.weight", (h,), "kept")
    add("lm_head.weight", (V, h), "vocab")


def qwen_kv(c, tokens, nbytes, engine):
    h, L, H, _ = dims(c)
    return L * 2 * H * g(c, "kv_channels", default=h // H) * tokens * nbytes


TENSORS = {"qwen": qwen}
KV = {"qwen": qwen_kv}

REAL = {
    "qwen-7b-chat": (7_721_324_544, "Qwen-7B's model.safetensors.index.json total_size 15 442 649 088 bytes (bf16) / 2"),
}

# Its own code (trust_remote_code): its rotary buffers are not counted.
ROPE = {"qwen": None}
