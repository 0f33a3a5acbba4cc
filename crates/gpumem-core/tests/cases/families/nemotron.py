"""Nemotron-H and Nemotron-3 (NVIDIA's modeling_nemotron_h.py; vLLM's nemotron_h.py):
blocks of one norm and one mixer — Mamba-2, attention, a relu² MLP or an MoE block — by
hybrid_override_pattern, and Nemotron-3's MTP blocks."""
from common import dims, g


def nemotron_h(c, config, add):
    h, L, H, V = dims(c)
    # NVIDIA's modeling_nemotron_h.py: backbone.layers.N.{norm, mixer}; the mixer is
    # Mamba-2 (M), attention (*), a relu^2 MLP up/down (-) or (Nemotron-3) an MoE
    # block (E), per hybrid_override_pattern.
    KV, hd = c["num_key_value_heads"], g(c, "head_dim", "attention_head_dim", default=h // H)
    H2, P, G, n, k = c["mamba_num_heads"], c["mamba_head_dim"], c["n_groups"], c["ssm_state_size"], c["conv_kernel"]
    d = H2 * P; conv_dim = d + 2 * G * n; I = c["intermediate_size"]
    bias = c.get("mlp_bias", False)
    def relu2_mlp(q, width, kind, bias_kind, x=h):
        # up_proj [width, x], down_proj [x, width]; x is the hidden width, or the
        # latent width for Nemotron-3 Super's routed experts.
        add(f"{q}.up_proj.weight", (width, x), kind); add(f"{q}.down_proj.weight", (x, width), kind)
        if bias:
            add(f"{q}.up_proj.bias", (width,), bias_kind); add(f"{q}.down_proj.bias", (x,), bias_kind)
    add("backbone.embeddings", (V, h), "vocab")
    def block_tensors(block, p, kd):
        # kd: the tensor kind, "mtp_"-prefixed inside the MTP blocks.
        if block == "M":
            add(f"{p}.in_proj", (2 * d + 2 * G * n + H2, h), kd("linear_attn"))
            add(f"{p}.conv1d.weight", (conv_dim, 1, k), kd("kept")); add(f"{p}.conv1d.bias", (conv_dim,), kd("kept"))
            add(f"{p}.dt_bias", (H2,), kd("kept")); add(f"{p}.A_log", (H2,), kd("kept")); add(f"{p}.D", (H2,), kd("kept"))
            add(f"{p}.norm", (d,), kd("kept"))
            add(f"{p}.out_proj", (h, d), kd("linear_attn"))
        elif block == "*":
            add(f"{p}.q_proj", (H * hd, h), kd("linear_attn")); add(f"{p}.k_proj", (KV * hd, h), kd("linear_attn"))
            add(f"{p}.v_proj", (KV * hd, h), kd("linear_attn")); add(f"{p}.o_proj", (h, H * hd), kd("linear_attn"))
        elif block == "E":
            # The Nemotron-3 checkpoints' MoE block (transformers' NemotronHMoE,
            # NemotronHTopkRouter and NemotronHMLP; vLLM's NemotronHMoE):
            # gate.weight [experts, hidden] and the router's fp32 buffer
            # gate.e_score_correction_bias [experts]; per expert a non-gated relu^2
            # MLP experts.E.{up,down}_proj; one shared expert
            # moe_shared_expert_intermediate_size x n_shared_experts wide (vLLM).
            # Super's latent MoE (moe_latent_size; vLLM's NemotronHMoE with
            # use_latent_moe): fc1_latent_proj [latent, hidden] and fc2_latent_proj
            # [hidden, latent] (bias = mlp_bias), the routed experts at the latent
            # width; the router and the shared expert (NemotronHMLP with
            # hidden_size = config.hidden_size) stay at the hidden width.
            E, EI = c["n_routed_experts"], c["moe_intermediate_size"]
            X = c.get("moe_latent_size") or h
            add(f"{p}.gate.weight", (E, h), kd("kept"))
            add(f"{p}.gate.e_score_correction_bias", (E,), kd("fp32"))
            if c.get("moe_latent_size"):
                add(f"{p}.fc1_latent_proj.weight", (X, h), kd("linear_mlp"))
                add(f"{p}.fc2_latent_proj.weight", (h, X), kd("linear_mlp"))
                if bias:
                    add(f"{p}.fc1_latent_proj.bias", (X,), kd("kept")); add(f"{p}.fc2_latent_proj.bias", (h,), kd("kept"))
            for e in range(E):
                relu2_mlp(f"{p}.experts.{e}", EI, kd("expert"), kd("expert_kept"), X)
            if c.get("n_shared_experts", 1):
                relu2_mlp(f"{p}.shared_experts", c["moe_shared_expert_intermediate_size"] * c.get("n_shared_experts", 1),
                          kd("linear_mlp"), kd("kept"))
        else:
            assert block == "-"
            relu2_mlp(p, I, kd("linear_mlp"), kd("kept"))
    plain = lambda base: base
    for i, block in enumerate(c["hybrid_override_pattern"]):
        block_tensors(block, f"backbone.layers.{i}.mixer", plain)
        add(f"backbone.layers.{i}.norm", (h,), "kept")
    # Nemotron-3's MTP (vLLM's nemotron_h_mtp.py, NemotronHMultiTokenPredictor):
    # per predicted step the blocks of mtp_hybrid_override_pattern as
    # mtp.layers.N.{norm, mixer}; the step's first block also holds enorm, hnorm and
    # eh_proj [hidden, 2 hidden], its last final_layernorm. The embedding and
    # lm_head are the backbone's (shared from the target model), not copied.
    mtp = lambda base: "mtp_" + base
    pat = c.get("mtp_hybrid_override_pattern", "")
    for step in range(c.get("num_nextn_predict_layers", 0) or 0):
        for j, block in enumerate(pat):
            i = step * len(pat) + j
            q = f"mtp.layers.{i}"
            block_tensors(block, f"{q}.mixer", mtp)
            add(f"{q}.norm", (h,), "mtp_kept")
            if j == 0:
                add(f"{q}.enorm", (h,), "mtp_kept"); add(f"{q}.hnorm", (h,), "mtp_kept")
                add(f"{q}.eh_proj", (h, 2 * h), "mtp_linear_mlp")
            if j == len(pat) - 1:
                add(f"{q}.final_layernorm", (h,), "mtp_kept")
    add("backbone.norm_f", (h,), "kept")
    if not c.get("tie_word_embeddings", False):
        add("lm_head", (V, h), "vocab")


def nemotron_h_state(c, nbytes, layout="transformers"):
    L = g(c, "num_hidden_layers", "n_layer")
    d = c["mamba_num_heads"] * c["mamba_head_dim"]
    conv = (d + 2 * c["n_groups"] * c["ssm_state_size"]) * (c["conv_kernel"] - 1)
    m = c["hybrid_override_pattern"].count("M")
    if layout == "transformers":
        # NemotronHMamba2Mixer: the whole window, the chunked scan's fp32 state,
        # whatever mamba_ssm_cache_dtype says (a key vLLM reads).
        conv = (d + 2 * c["n_groups"] * c["ssm_state_size"]) * c["conv_kernel"]
        return m * (conv * nbytes + d * c["ssm_state_size"] * 4)
    # vLLM's NemotronHForCausalLMConfig hook takes the SSM (temporal) state's dtype
    # from mamba_ssm_cache_dtype; the conv state stays in the model dtype.
    ssm_bytes = 4 if c.get("mamba_ssm_cache_dtype") == "float32" else nbytes
    return m * (conv * nbytes + d * c["ssm_state_size"] * ssm_bytes)


def nemotron_h_kv(c, tokens, nbytes, engine):
    hd = g(c, "head_dim", "attention_head_dim", default=c["hidden_size"] // c["num_attention_heads"])
    return c["hybrid_override_pattern"].count("*") * 2 * c["num_key_value_heads"] * hd * tokens * nbytes


TENSORS = {"nemotron_h": nemotron_h}
KV = {"nemotron_h": nemotron_h_kv}
STATE = {"nemotron_h": nemotron_h_state}

REAL = {
    "nemotron-h-8b": (None, "model name: 8B (model page 8.1B)"),
    "nemotron-3-nano-30b-a3b": (31_577_940_288, "model card: 31.6B total; 31 577 940 288 is llama.cpp's n_params for the GGUF conversion (unsloth/Nemotron-3-Nano-30B-A3B-GGUF), as public llama-bench and llama-server outputs quote it, the router's correction biases included"),
    "nemotron-3-super-120b-a12b": (123_611_033_088, "the BF16 checkpoint's safetensors headers (a public test quotes them: 123 611 033 088 in all, BF16 weights 123 611 012 096 + fp32 routing buffers; MTP 2 942 324 736; inactive backbone experts 107 898 470 400); model card 120B total, 12B active"),
}
ROUNDED = {"nemotron-h-8b": (8.1e9, 2), "nemotron-3-nano-30b-a3b": (31.6e9, 3)}
# Published totals that include the checkpoint's MTP blocks.
PUBLISHED_WITH_MTP = {"nemotron-3-super-120b-a12b"}
SUPER_MTP = 2_942_324_736 + 512  # the headers' BF16 MTP figure + its fp32 correction bias


def super_headers(cfg, params, mtp, active):
    """The headers' other figures: the MTP blocks, and the backbone's inactive experts."""
    assert mtp == SUPER_MTP, ("nemotron-3-super-120b-a12b", mtp)
    assert params - mtp - active == 107_898_470_400, ("nemotron-3-super-120b-a12b", params - mtp - active)


CHECKS = {"nemotron-3-super-120b-a12b": super_headers}

# No rotary embedding: no frequency buffers.
ROPE = {"nemotron_h": None}
