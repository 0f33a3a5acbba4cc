"""Jamba (transformers' JambaForCausalLM): attention every attn_layer_period-th layer,
Mamba with Δ/B/C norms elsewhere, MoE every expert_layer_period-th layer."""
from common import dims, g, mamba_mixer


def jamba(c, config, add):
    h, L, H, V = dims(c)
    # transformers' JambaForCausalLM: model.layers.N.{self_attn | mamba},
    # feed_forward (dense MLP or router + experts), input_layernorm, pre_ff_layernorm.
    KV = c["num_key_value_heads"]; hd = h // H
    d = c["mamba_expand"] * h
    add("model.embed_tokens", (V, h), "vocab")
    for i in range(L):
        p = f"model.layers.{i}"
        if i % c["attn_layer_period"] == c["attn_layer_offset"]:
            for nm, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
                add(f"{p}.self_attn.{nm}_proj", (rows, h), "linear_attn")
            add(f"{p}.self_attn.o_proj", (h, H * hd), "linear_attn")
        else:
            r = c["mamba_dt_rank"]; n = c["mamba_d_state"]
            mamba_mixer(add, f"{p}.mamba", h, d, n, c["mamba_d_conv"], r)
            add(f"{p}.mamba.dt_layernorm", (r,), "kept")
            add(f"{p}.mamba.b_layernorm", (n,), "kept"); add(f"{p}.mamba.c_layernorm", (n,), "kept")
        I = c["intermediate_size"]
        if i % c["expert_layer_period"] == c["expert_layer_offset"]:
            add(f"{p}.feed_forward.router", (c["num_experts"], h), "kept")
            for e in range(c["num_experts"]):
                add(f"{p}.feed_forward.experts.{e}.gate_proj", (I, h), "expert")
                add(f"{p}.feed_forward.experts.{e}.up_proj", (I, h), "expert")
                add(f"{p}.feed_forward.experts.{e}.down_proj", (h, I), "expert")
        else:
            add(f"{p}.feed_forward.gate_proj", (I, h), "linear_mlp")
            add(f"{p}.feed_forward.up_proj", (I, h), "linear_mlp")
            add(f"{p}.feed_forward.down_proj", (h, I), "linear_mlp")
        add(f"{p}.input_layernorm", (h,), "kept"); add(f"{p}.pre_ff_layernorm", (h,), "kept")
    add("model.final_layernorm", (h,), "kept")
    if not c.get("tie_word_embeddings", False):
        add("lm_head", (V, h), "vocab")


def jamba_state(c, nbytes, layout="transformers"):
    L = g(c, "num_hidden_layers", "n_layer")
    d = c["mamba_expand"] * c["hidden_size"]
    n = sum(1 for i in range(L) if i % c["attn_layer_period"] != c["attn_layer_offset"])
    if layout == "transformers":
        # JambaMambaMixer: the whole window, mamba_selective_scan's fp32 state.
        return n * (d * c["mamba_d_conv"] * nbytes + d * c["mamba_d_state"] * 4)
    return n * (d * (c["mamba_d_conv"] - 1) + d * c["mamba_d_state"]) * nbytes


def jamba_kv(c, tokens, nbytes, engine):
    L = c["num_hidden_layers"]
    attn = sum(1 for i in range(L) if i % c["attn_layer_period"] == c["attn_layer_offset"])
    hd = c["hidden_size"] // c["num_attention_heads"]
    return attn * 2 * c["num_key_value_heads"] * hd * tokens * nbytes


TENSORS = {"jamba": jamba}
KV = {"jamba": jamba_kv}
STATE = {"jamba": jamba_state}

REAL = {"jamba-1.5-mini": (None, "model card: 52B total (51.6B), 12B active")}
ROUNDED = {"jamba-1.5-mini": (51.6e9, 3)}

# No rotary embedding: no frequency buffers.
ROPE = {"jamba": None}
