"""GPT-1 (transformers' OpenAIGPTLMHeadModel, models/openai/modeling_openai.py):
tokens_embed, positions_embed, h.N with attn.c_attn / c_proj and mlp.c_fc / c_proj
(Conv1D with biases, the MLP 4 x n_embd), ln_1 and ln_2 with biases, no final norm,
the lm_head tied. Its KV here is the K and V its attention computes per token
(transformers' class keeps no cache and recomputes them; a cache would hold these).
Its buffers, never saved: each block's causal mask [n_positions, n_positions] in the
model's dtype and the model's int64 position ids."""
from common import dims


def openai_gpt(c, config, add):
    h, L, H, V = dims(c)
    add("tokens_embed", (V, h), "vocab"); add("positions_embed", (c["n_positions"], h), "vocab")
    for i in range(L):
        p = f"h.{i}"
        add(f"{p}.attn.c_attn.weight", (3 * h, h), "linear_attn"); add(f"{p}.attn.c_attn.bias", (3 * h,), "kept")
        add(f"{p}.attn.c_proj.weight", (h, h), "linear_attn"); add(f"{p}.attn.c_proj.bias", (h,), "kept")
        add(f"{p}.mlp.c_fc.weight", (4 * h, h), "linear_mlp"); add(f"{p}.mlp.c_fc.bias", (4 * h,), "kept")
        add(f"{p}.mlp.c_proj.weight", (h, 4 * h), "linear_mlp"); add(f"{p}.mlp.c_proj.bias", (h,), "kept")
        for ln in ("ln_1", "ln_2"):
            add(f"{p}.{ln}.weight", (h,), "kept"); add(f"{p}.{ln}.bias", (h,), "kept")
        # Attention.bias: the causal mask, a buffer in the model's dtype (never saved).
        add(f"{p}.attn.bias", (c["n_positions"], c["n_positions"]), "buffer")
    # OpenAIGPTModel.position_ids: an int64 buffer (never saved).
    add("position_ids", (c["n_positions"],), "buffer_int64")


TENSORS = {"openai-gpt": openai_gpt}
REAL = {"openai-gpt": (None, "transformers 5.23 builds 116 534 784 parameters from this config on the meta device, and 6 295 552 bytes of buffers in bf16")}
WARN = {"openai-gpt": ["exceed the 512 positions"]}

# No rotary embedding: no frequency buffers.
ROPE = {"openai-gpt": None}
