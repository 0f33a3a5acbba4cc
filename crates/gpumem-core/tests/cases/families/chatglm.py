"""ChatGLM2 / ChatGLM3 (remote code modeling_chatglm.py, ChatGLMForConditionalGeneration):
fused query_key_value over heads + 2 x multi_query_group_num heads of kv_channels (bias
under add_qkv_bias), dense, the SwiGLU dense_h_to_4h [2 x ffn_hidden_size] and
dense_4h_to_h (biases under add_bias_linear), RMSNorms, an untied output_layer of
padded_vocab_size rows."""
from common import g


def _kv_heads(c):
    return c.get("multi_query_group_num", 1) if c.get("multi_query_attention") else c["num_attention_heads"]


def chatglm(c, config, add):
    h, L, H, V = c["hidden_size"], g(c, "num_layers", "num_hidden_layers"), c["num_attention_heads"], c["padded_vocab_size"]
    hd, kv, I = g(c, "kv_channels", default=h // H), _kv_heads(c), c["ffn_hidden_size"]
    linear = c.get("add_bias_linear", False)
    add("transformer.embedding.word_embeddings.weight", (V, h), "vocab")
    for i in range(L):
        p = f"transformer.encoder.layers.{i}"
        add(f"{p}.input_layernorm.weight", (h,), "kept")
        add(f"{p}.self_attention.query_key_value.weight", ((H + 2 * kv) * hd, h), "linear_attn")
        if linear or c.get("add_qkv_bias", False):
            add(f"{p}.self_attention.query_key_value.bias", ((H + 2 * kv) * hd,), "kept")
        add(f"{p}.self_attention.dense.weight", (h, H * hd), "linear_attn")
        add(f"{p}.post_attention_layernorm.weight", (h,), "kept")
        add(f"{p}.mlp.dense_h_to_4h.weight", (2 * I, h), "linear_mlp")
        add(f"{p}.mlp.dense_4h_to_h.weight", (h, I), "linear_mlp")
        if linear:
            add(f"{p}.self_attention.dense.bias", (h,), "kept")
            add(f"{p}.mlp.dense_h_to_4h.bias", (2 * I,), "kept"); add(f"{p}.mlp.dense_4h_to_h.bias", (h,), "kept")
    add("transformer.encoder.final_layernorm.weight", (h,), "kept")
    add("transformer.output_layer.weight", (V, h), "vocab")


def chatglm_kv(c, tokens, nbytes, engine):
    L = g(c, "num_layers", "num_hidden_layers")
    hd = g(c, "kv_channels", default=c["hidden_size"] // c["num_attention_heads"])
    return L * 2 * _kv_heads(c) * hd * tokens * nbytes


TENSORS = {"chatglm": chatglm}
KV = {"chatglm": chatglm_kv}

REAL = {
    "chatglm3-6b": (None, "model card of THUDM/chatglm3-6b: 6B"),
}
ROUNDED = {"chatglm3-6b": (6e9, 1)}

# Its own code (trust_remote_code): its rotary buffers are not counted.
ROPE = {"chatglm": None}
