"""Bamba (transformers' BambaForCausalLM): attention in attn_layer_indices, BambaMixer
(Mamba-2) elsewhere, a gated MLP in every layer."""
from common import dims, g, rope_buffers, rope_freqs


def bamba(c, config, add):
    h, L, H, V = dims(c)
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


def bamba_state(c, nbytes, layout="transformers"):
    L = g(c, "num_hidden_layers", "n_layer")
    # vLLM's BambaForCausalLM: Mamba-2 shapes, intermediate_size = expand x hidden,
    # in the layers outside attn_layer_indices.
    d = c["mamba_expand"] * c["hidden_size"]
    m = L - len(set(c.get("attn_layer_indices") or []))
    ssm = c["mamba_n_heads"] * c["mamba_d_head"] * c["mamba_d_state"]
    if layout == "transformers":
        # transformers' BambaMixer: the whole mamba_d_conv window, the scan's fp32 state.
        conv = (d + 2 * c["mamba_n_groups"] * c["mamba_d_state"]) * c["mamba_d_conv"]
        return m * (conv * nbytes + ssm * 4)
    conv = (d + 2 * c["mamba_n_groups"] * c["mamba_d_state"]) * (c["mamba_d_conv"] - 1)
    return m * (conv + ssm) * nbytes


def bamba_kv(c, tokens, nbytes, engine):
    hd = c["hidden_size"] // c["num_attention_heads"]
    return len(set(c.get("attn_layer_indices") or [])) * 2 * c["num_key_value_heads"] * hd * tokens * nbytes


TENSORS = {"bamba": bamba}
KV = {"bamba": bamba_kv}
STATE = {"bamba": bamba_state}

REAL = {
    "bamba-9b": (None, "checkpoint name ibm-fms/Bamba-9.8b-2.2T-hf (BambaConfig's docstring: its defaults come from it): 9.8B"),
}
ROUNDED = {"bamba-9b": (9.8e9, 2)}

# BambaConfig sets partial_rotary_factor 0.5 whatever the config says.
ROPE = {"bamba": lambda c, add: rope_buffers(add, rope_freqs({**c, "partial_rotary_factor": 0.5}))}
