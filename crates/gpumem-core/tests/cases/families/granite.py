"""GraniteMoeHybrid (Granite 4.0: transformers' GraniteMoeHybridForCausalLM): Mamba-2 or
attention by layer_types, routed experts beside the always-on shared MLP."""
from common import dims, g, rope_buffers, rope_freqs


def granitemoehybrid(c, config, add):
    h, L, H, V = dims(c)
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


def granitemoehybrid_state(c, nbytes, layout="transformers"):
    L = g(c, "num_hidden_layers", "n_layer")
    # vLLM's GraniteMoeHybridForCausalLM: Mamba-2 shapes, expand x hidden, in the
    # "mamba" layers.
    d = c["mamba_expand"] * c["hidden_size"]
    m = (c.get("layer_types") or ["mamba"] * L).count("mamba")
    ssm = c["mamba_n_heads"] * c["mamba_d_head"] * c["mamba_d_state"]
    if layout == "transformers":
        # transformers' GraniteMoeHybridMambaLayer: the whole window, an fp32 state.
        conv = (d + 2 * c["mamba_n_groups"] * c["mamba_d_state"]) * c["mamba_d_conv"]
        return m * (conv * nbytes + ssm * 4)
    conv = (d + 2 * c["mamba_n_groups"] * c["mamba_d_state"]) * (c["mamba_d_conv"] - 1)
    return m * (conv + ssm) * nbytes


def granitemoehybrid_kv(c, tokens, nbytes, engine):
    hd = c["hidden_size"] // c["num_attention_heads"]
    return (c.get("layer_types") or []).count("attention") * 2 * c["num_key_value_heads"] * hd * tokens * nbytes


TENSORS = {"granitemoehybrid": granitemoehybrid}
KV = {"granitemoehybrid": granitemoehybrid_kv}
STATE = {"granitemoehybrid": granitemoehybrid_state}

REAL = {
    "granite-4.0-h-tiny": (None, "model card and IBM's Granite 4.0 docs: 7B total, 1B active"),
    "granite-4.0-h-small": (None, "32.2B (en.immers.cloud/ai/ibm-granite/granite-4.0-h-small); IBM's Granite 4.0 docs: 32B total, 9B active"),
}
ROUNDED = {"granite-4.0-h-tiny": (7e9, 1), "granite-4.0-h-small": (32.2e9, 3)}

# A rotary embedding only with position_embedding_type "rope" (the configs here: "nope").
ROPE = {"granitemoehybrid": lambda c, add: c.get("position_embedding_type") == "rope" and rope_buffers(add, rope_freqs(c))}
