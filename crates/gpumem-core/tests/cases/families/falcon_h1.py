"""Falcon-H1 (transformers' FalconH1ForCausalLM): attention and a Mamba-2 mixer side by
side in every layer, a gated MLP."""
from common import dims, g, rope_buffers, rope_freqs


def falcon_h1(c, config, add):
    h, L, H, V = dims(c)
    # transformers' FalconH1ForCausalLM (modeling_falcon_h1.py): every layer holds a
    # LlamaAttention (self_attn), a FalconH1Mixer (mamba) beside it, a gated MLP
    # (feed_forward), input_layernorm and pre_ff_layernorm. The mixer is mamba_d_ssm
    # wide (expand x hidden only when that is null); in_proj yields z, x, B, C, dt;
    # its gated norm exists only with mamba_rms_norm; the muP multipliers are not
    # stored, mup_vector (compute_mup_vector: torch.ones(1, 1, in_proj's width),
    # registered non-persistent on every layer's mixer by FalconH1Model.__init__) is
    # a buffer in the model's dtype.
    KV, hd = c["num_key_value_heads"], c.get("head_dim") or h // H
    d = c.get("mamba_d_ssm", 1024)
    if d is None:
        d = c["mamba_expand"] * h
    H2, G, n, k = c["mamba_n_heads"], c["mamba_n_groups"], c["mamba_d_state"], c["mamba_d_conv"]
    P = d // H2 if c.get("mamba_d_head", "auto") == "auto" else c["mamba_d_head"]
    assert H2 * P == d
    conv_dim = d + 2 * G * n
    I = c["intermediate_size"]
    add("model.embed_tokens", (V, h), "vocab")
    for i in range(L):
        p = f"model.layers.{i}"
        for nm, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
            add(f"{p}.self_attn.{nm}_proj", (rows, h), "linear_attn")
            if c.get("attention_bias"):
                add(f"{p}.self_attn.{nm}_proj.bias", (rows,), "kept")
        add(f"{p}.self_attn.o_proj", (h, H * hd), "linear_attn")
        if c.get("attention_bias"):
            add(f"{p}.self_attn.o_proj.bias", (h,), "kept")
        m = f"{p}.mamba"
        add(f"{m}.in_proj", (d + conv_dim + H2, h), "linear_attn")
        if c.get("mamba_proj_bias", False):
            add(f"{m}.in_proj.bias", (d + conv_dim + H2,), "kept")
        add(f"{m}.conv1d.weight", (conv_dim, 1, k), "kept")
        if c.get("mamba_conv_bias", True):
            add(f"{m}.conv1d.bias", (conv_dim,), "kept")
        add(f"{m}.dt_bias", (H2,), "kept"); add(f"{m}.A_log", (H2,), "kept"); add(f"{m}.D", (H2,), "kept")
        if c.get("mamba_rms_norm", False):
            add(f"{m}.norm", (d,), "kept")
        add(f"{m}.out_proj", (h, d), "linear_attn")
        add(f"{m}.mup_vector", (1, 1, 2 * d + 2 * G * n + H2), "buffer")
        if c.get("projectors_bias", False):
            add(f"{m}.out_proj.bias", (h,), "kept")
        for nm in ("gate", "up"):
            add(f"{p}.feed_forward.{nm}_proj", (I, h), "linear_mlp")
        add(f"{p}.feed_forward.down_proj", (h, I), "linear_mlp")
        if c.get("mlp_bias"):
            add(f"{p}.feed_forward.gate_proj.bias", (I,), "kept"); add(f"{p}.feed_forward.up_proj.bias", (I,), "kept")
            add(f"{p}.feed_forward.down_proj.bias", (h,), "kept")
        add(f"{p}.input_layernorm", (h,), "kept"); add(f"{p}.pre_ff_layernorm", (h,), "kept")
    add("model.final_layernorm", (h,), "kept")
    if not c.get("tie_word_embeddings", False):
        add("lm_head", (V, h), "vocab")


def falcon_h1_state(c, nbytes, layout="transformers"):
    L = g(c, "num_hidden_layers", "n_layer")
    # vLLM's FalconH1ForCausalLM.get_mamba_state_shape_from_config: Mamba-2 shapes
    # with intermediate_size = mamba_d_ssm, in every layer (beside the KV cache).
    d = c["mamba_d_ssm"] if c.get("mamba_d_ssm") is not None else c["mamba_expand"] * c["hidden_size"]
    ssm = c["mamba_n_heads"] * c["mamba_d_head"] * c["mamba_d_state"]
    if layout == "transformers":
        # transformers' FalconH1Mixer: the whole mamba_d_conv window, an fp32 state.
        conv = (d + 2 * c["mamba_n_groups"] * c["mamba_d_state"]) * c["mamba_d_conv"]
        return L * (conv * nbytes + ssm * 4)
    conv = (d + 2 * c["mamba_n_groups"] * c["mamba_d_state"]) * (c["mamba_d_conv"] - 1)
    return L * (conv + ssm) * nbytes


def falcon_h1_kv(c, tokens, nbytes, engine):
    # Attention in every layer, beside the mixer.
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * hd * tokens * nbytes


TENSORS = {"falcon_h1": falcon_h1}
KV = {"falcon_h1": falcon_h1_kv}
STATE = {"falcon_h1": falcon_h1_state}

REAL = {
    "falcon-h1-0.5b-instruct": (None, "model size 521M (the Hugging Face safetensors count, as llmrun.dev/model/tiiuae-falcon-h1-0-5b-instruct shows it: 521M parameters, a 1.04 GB BF16 file)"),
}
ROUNDED = {"falcon-h1-0.5b-instruct": (521e6, 3)}

ROPE = {"falcon_h1": lambda c, add: rope_buffers(add, rope_freqs(c))}
