"""Qwen2 / Qwen2-MoE (q/k/v biases), Qwen3 / Qwen3-MoE (per-head q/k norms), and
Qwen3-Next (transformers' Qwen3NextForCausalLM: Gated DeltaNet layers beside gated full
attention, the shared expert's gate)."""
from common import Decoder, cdiv, dims, g, rope_buffers, rope_freqs


def qwen2_vl_tower(config, c, add):
    """transformers' Qwen2VisionTransformerPretrainedModel (models/qwen2_vl/
    modeling_qwen2_vl.py): PatchEmbed's bias-free Conv3d, blocks of two LayerNorms,
    VisionAttention's fused qkv and proj, VisionMlp's fc1/fc2 (embed_dim * mlp_ratio),
    PatchMerger's ln_q and two linears to hidden_size (the text width)."""
    vc = config.get("vision_config")
    if config.get("model_type") != "qwen2_vl" or not vc:
        return
    # Qwen2VLVisionConfig's defaults.
    d = {"embed_dim": 1280, "depth": 32, "hidden_size": 3584, "mlp_ratio": 4, "num_heads": 16,
         "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}
    v = {k: vc.get(k, x) for k, x in d.items()}
    e, p, t, m = v["embed_dim"], v["patch_size"], v["temporal_patch_size"], v["spatial_merge_size"]
    i = int(e * v["mlp_ratio"])
    add("model.visual.patch_embed.proj.weight", (e, v["in_channels"], t, p, p), "tower")
    for n in range(v["depth"]):
        q = f"model.visual.blocks.{n}"
        for nm in ("norm1", "norm2"):
            add(f"{q}.{nm}.weight", (e,), "tower"); add(f"{q}.{nm}.bias", (e,), "tower")
        add(f"{q}.attn.qkv.weight", (3 * e, e), "tower"); add(f"{q}.attn.qkv.bias", (3 * e,), "tower")
        add(f"{q}.attn.proj.weight", (e, e), "tower"); add(f"{q}.attn.proj.bias", (e,), "tower")
        add(f"{q}.mlp.fc1.weight", (i, e), "tower"); add(f"{q}.mlp.fc1.bias", (i,), "tower")
        add(f"{q}.mlp.fc2.weight", (e, i), "tower"); add(f"{q}.mlp.fc2.bias", (e,), "tower")
    w = e * m * m
    add("model.visual.merger.ln_q.weight", (e,), "tower"); add("model.visual.merger.ln_q.bias", (e,), "tower")
    add("model.visual.merger.mlp.0.weight", (w, w), "tower"); add("model.visual.merger.mlp.0.bias", (w,), "tower")
    add("model.visual.merger.mlp.2.weight", (v["hidden_size"], w), "tower")
    add("model.visual.merger.mlp.2.bias", (v["hidden_size"],), "tower")
    # Qwen2VLVisionRotaryEmbedding: inv_freq and original_inv_freq (fp32,
    # non-persistent) over head // 2, torch.arange(0, head // 2, 2).
    rope_buffers(add, cdiv(e // v["num_heads"] // 2, 2), "model.visual.rotary_pos_emb")


def qwen3_next(c, config, add):
    h, L, H, V = dims(c)
    # transformers' Qwen3NextForCausalLM: model.layers.N.{self_attn | linear_attn},
    # mlp (router `gate`, experts, shared_expert, shared_expert_gate), two norms.
    KV = c["num_key_value_heads"]; hd = c["head_dim"]
    hk, hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv, kern = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
    types = c.get("layer_types") or ["linear_attention" if (i + 1) % c["full_attention_interval"] else "full_attention" for i in range(L)]
    add("model.embed_tokens", (V, h), "vocab")
    for i in range(L):
        p = f"model.layers.{i}"
        if types[i] == "full_attention":
            add(f"{p}.self_attn.q_proj", (2 * H * hd, h), "linear_attn")  # queries + output gate
            add(f"{p}.self_attn.k_proj", (KV * hd, h), "linear_attn")
            add(f"{p}.self_attn.v_proj", (KV * hd, h), "linear_attn")
            add(f"{p}.self_attn.o_proj", (h, H * hd), "linear_attn")
            add(f"{p}.self_attn.q_norm", (hd,), "kept"); add(f"{p}.self_attn.k_norm", (hd,), "kept")
        else:
            key, val = hk * dk, hv * dv
            add(f"{p}.linear_attn.in_proj_qkvz", (2 * key + 2 * val, h), "linear_attn")
            add(f"{p}.linear_attn.in_proj_ba", (2 * hv, h), "linear_attn")
            add(f"{p}.linear_attn.conv1d", (2 * key + val, 1, kern), "kept")
            add(f"{p}.linear_attn.dt_bias", (hv,), "kept"); add(f"{p}.linear_attn.A_log", (hv,), "kept")
            add(f"{p}.linear_attn.norm", (dv,), "kept")
            add(f"{p}.linear_attn.out_proj", (h, val), "linear_attn")
        E, EI, SI = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
        add(f"{p}.mlp.gate", (E, h), "kept")
        for e in range(E):
            add(f"{p}.mlp.experts.{e}.gate_proj", (EI, h), "expert")
            add(f"{p}.mlp.experts.{e}.up_proj", (EI, h), "expert")
            add(f"{p}.mlp.experts.{e}.down_proj", (h, EI), "expert")
        add(f"{p}.mlp.shared_expert.gate_proj", (SI, h), "linear_mlp")
        add(f"{p}.mlp.shared_expert.up_proj", (SI, h), "linear_mlp")
        add(f"{p}.mlp.shared_expert.down_proj", (h, SI), "linear_mlp")
        add(f"{p}.mlp.shared_expert_gate", (1, h), "kept")
        add(f"{p}.input_layernorm", (h,), "kept"); add(f"{p}.post_attention_layernorm", (h,), "kept")
    add("model.norm", (h,), "kept")
    if not c.get("tie_word_embeddings", False):
        add("lm_head", (V, h), "vocab")


def qwen3_next_state(c, nbytes, layout="transformers"):
    L = g(c, "num_hidden_layers", "n_layer")
    n = sum(1 for i in range(L) if (i + 1) % c["full_attention_interval"])
    key, val = c["linear_num_key_heads"] * c["linear_key_head_dim"], c["linear_num_value_heads"] * c["linear_value_head_dim"]
    rec = c["linear_num_value_heads"] * c["linear_key_head_dim"] * c["linear_value_head_dim"]
    if layout == "transformers":
        # Qwen3NextGatedDeltaNet: the whole kernel of q, k and v; the delta rule's
        # state in fp32 (torch_chunk_gated_delta_rule computes in fp32).
        return n * ((2 * key + val) * c["linear_conv_kernel_dim"] * nbytes + rec * 4)
    conv = (2 * key + val) * (c["linear_conv_kernel_dim"] - 1)
    return n * (conv + rec) * nbytes


def qwen3_next_kv(c, tokens, nbytes, engine):
    L = c["num_hidden_layers"]
    attn = sum(1 for i in range(L) if (i + 1) % c["full_attention_interval"] == 0)
    return attn * 2 * c["num_key_value_heads"] * c["head_dim"] * tokens * nbytes


DECODERS = {
    "qwen2": Decoder(qkv_bias=True),
    "qwen2_moe": Decoder(qkv_bias=True),
    "qwen2_vl": Decoder(qkv_bias=True),
    "qwen3": Decoder(qk_norm="head"),
    "qwen3_moe": Decoder(qk_norm="head"),
}
TENSORS = {"qwen3_next": qwen3_next}
KV = {"qwen3_next": qwen3_next_kv}
STATE = {"qwen3_next": qwen3_next_state}
TOWERS = {"qwen2_vl": qwen2_vl_tower}

REAL = {
    "qwen2.5-0.5b": (494_032_768, "model card"),
    "qwen2.5-7b": (7_615_616_512, "model card"),
    "qwen2.5-72b": (72_706_203_648, "model card"),
    "qwen2-vl-7b-instruct": (None, "model card: 8.29B params (transformers 5.23 builds 8 291 375 616 from this config on the meta device)"),
    "qwen3-0.6b": (596_049_920, "safetensors index"),
    "qwen3-30b-a3b": (30_532_122_624, "safetensors index"),
    "qwen3-next-80b-a3b": (79_674_391_296, "80B (model card); 79 674 391 296 published for Qwen3-Coder-Next, the same shape, without the MTP module"),
}

ROUNDED = {"qwen2-vl-7b-instruct": (8.29e9, 3)}
WARN = {"qwen2-vl-7b-instruct": []}

# Qwen3NextRotaryEmbedding over partial_rotary_factor of the head.
ROPE = {"qwen3_next": lambda c, add: rope_buffers(add, rope_freqs(c))}
