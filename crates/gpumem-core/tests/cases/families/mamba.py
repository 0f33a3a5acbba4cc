"""Mamba, Falcon-Mamba and Mamba-2 (transformers' MambaForCausalLM,
FalconMambaForCausalLM, Mamba2ForCausalLM): every layer a norm and a mixer, no KV cache."""
from common import dims, g, mamba_mixer


def mamba(c, config, add):
    h, L, H, V = dims(c)
    # transformers' MambaForCausalLM / FalconMambaForCausalLM checkpoints:
    # backbone.layers.N.{norm, mixer.*}; Falcon-Mamba's b_c_rms / dt_rms are
    # non-persistent buffers (not stored).
    d, n, k, r = c["intermediate_size"], c["state_size"], c["conv_kernel"], c["time_step_rank"]
    add("backbone.embeddings", (V, h), "vocab")
    for i in range(L):
        mamba_mixer(add, f"backbone.layers.{i}.mixer", h, d, n, k, r)
        add(f"backbone.layers.{i}.norm", (h,), "kept")
    add("backbone.norm_f", (h,), "kept")
    if c.get("tie_word_embeddings", True) is False:
        add("lm_head", (V, h), "vocab")


def mamba2(c, config, add):
    h, L, H, V = dims(c)
    # transformers' Mamba2ForCausalLM: backbone.layers.N.{norm, mixer.*}; the mixer's
    # in_proj yields z, x (d_inner each), B, C (groups x d_state each) and dt (heads).
    d = c["expand"] * h
    H2, G, n, k = c["num_heads"], c["n_groups"], c["state_size"], c["conv_kernel"]
    assert H2 * c["head_dim"] == d
    conv_dim = d + 2 * G * n
    add("backbone.embeddings", (V, h), "vocab")
    for i in range(L):
        p = f"backbone.layers.{i}.mixer"
        add(f"{p}.in_proj", (2 * d + 2 * G * n + H2, h), "linear_attn")
        add(f"{p}.conv1d.weight", (conv_dim, 1, k), "kept"); add(f"{p}.conv1d.bias", (conv_dim,), "kept")
        add(f"{p}.dt_bias", (H2,), "kept"); add(f"{p}.A_log", (H2,), "kept"); add(f"{p}.D", (H2,), "kept")
        add(f"{p}.norm", (d,), "kept")
        add(f"{p}.out_proj", (h, d), "linear_attn")
        add(f"backbone.layers.{i}.norm", (h,), "kept")
    add("backbone.norm_f", (h,), "kept")
    if not c.get("tie_word_embeddings", False):
        add("lm_head", (V, h), "vocab")


def mamba_state(c, nbytes, layout="transformers"):
    L = g(c, "num_hidden_layers", "n_layer")
    d = c["intermediate_size"]
    # transformers' MambaMixer hands the cache the whole conv_kernel window and the
    # scan's fp32 final state; vLLM keeps conv_kernel - 1 inputs, all in the model dtype.
    if layout == "transformers":
        return L * (d * c["conv_kernel"] * nbytes + d * c["state_size"] * 4)
    return L * (d * (c["conv_kernel"] - 1) + d * c["state_size"]) * nbytes


def mamba2_state(c, nbytes, layout="transformers"):
    L = g(c, "num_hidden_layers", "n_layer")
    d = c["expand"] * c["hidden_size"]
    ssm = c["num_heads"] * c["head_dim"] * c["state_size"]
    if layout == "transformers":
        # Mamba2Mixer: the whole kernel of x, B and C; mamba2_chunk_scan's fp32 state.
        conv = (d + 2 * c["n_groups"] * c["state_size"]) * c["conv_kernel"]
        return L * (conv * nbytes + ssm * 4)
    conv = (d + 2 * c["n_groups"] * c["state_size"]) * (c["conv_kernel"] - 1)
    return L * (conv + ssm) * nbytes


TENSORS = {"mamba": mamba, "falcon_mamba": mamba, "mamba2": mamba2}
KV = {t: (lambda c, tokens, nbytes, engine: 0) for t in TENSORS}
STATE = {"mamba": mamba_state, "falcon_mamba": mamba_state, "mamba2": mamba2_state}

REAL = {
    "mamba-2.8b": (None, "model page: 2.77B"),
    "falcon-mamba-7b": (None, "model page: 7.27B"),
    "mamba-codestral-7b": (None, "model page: 7.29B"),
}
ROUNDED = {"mamba-2.8b": (2.77e9, 3), "mamba-codestral-7b": (7.29e9, 3), "falcon-mamba-7b": (7.27e9, 3)}

# No rotary embedding: no frequency buffers.
ROPE = {t: None for t in TENSORS}
