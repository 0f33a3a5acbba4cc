"""JetMoE (transformers' JetMoeForCausalLM, models/jetmoe/modeling_jetmoe.py): per layer
a mixture of attention heads (self_attention.experts: input_linear and output_linear
banks of kv_heads x kv_channels, a router and one bias; a shared kv_proj) and a mixture
of gated MLP experts (mlp: input_linear [2 x intermediate], output_linear, a router and
one bias); the published config's own keys (ffn_hidden_size, moe_num_experts,
moe_top_k) are not JetMoeConfig's, which builds its defaults."""
from common import decoder_kv, LLAMA, rope_buffers, rope_freqs


def jetmoe(c, config, add):
    h, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    E, KV, D, I = c["num_local_experts"], c["num_key_value_heads"], c["kv_channels"], c["intermediate_size"]
    add("model.embed_tokens", (V, h), "vocab")
    for i in range(L):
        p = f"model.layers.{i}"
        a = f"{p}.self_attention"
        for e in range(E):
            # One bank [E, out, in] in the checkpoint; expert by expert here.
            add(f"{a}.experts.input_linear.{e}", (KV * D, h), "expert")
            add(f"{a}.experts.output_linear.{e}", (h, KV * D), "expert")
        add(f"{a}.experts.router.layer", (E, h), "kept")
        add(f"{a}.experts.bias", (h,), "kept")
        add(f"{a}.kv_proj", (2 * KV * D, h), "linear_attn")
        for e in range(E):
            add(f"{p}.mlp.input_linear.{e}", (2 * I, h), "expert")
            add(f"{p}.mlp.output_linear.{e}", (h, I), "expert")
        add(f"{p}.mlp.router.layer", (E, h), "kept")
        add(f"{p}.mlp.bias", (h,), "kept")
        add(f"{p}.input_layernorm", (h,), "kept")
        add(f"{p}.post_attention_layernorm", (h,), "kept")
    add("model.norm", (h,), "kept")
    if not c.get("tie_word_embeddings", True):
        add("lm_head", (V, h), "vocab")


def jetmoe_kv(c, tokens, nbytes, engine):
    # The cache holds num_key_value_heads heads of kv_channels (JetMoeAttention's
    # kv_proj), before the keys are repeated for the top-k experts' queries.
    return decoder_kv({**c, "head_dim": c["kv_channels"]}, tokens, nbytes, engine, LLAMA)


TENSORS = {"jetmoe": jetmoe}
KV = {"jetmoe": jetmoe_kv}
# JetMoeConfig's defaults for the keys the published config names otherwise.
DEFAULTS = {"jetmoe": {"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 5632}}
REAL = {"jetmoe-8b": (None, "transformers docs (model_doc/jetmoe): an 8B mixture of experts (transformers 5.23 builds 8 522 237 952 from this config on the meta device)")}
WARN = {"jetmoe-8b": ["exceed the 4096 positions"]}

# JetMoeRotaryEmbedding over kv_channels.
ROPE = {"jetmoe": lambda c, add: rope_buffers(add, rope_freqs(c))}
