"""Kimi-K2 (DeepSeek-V3's layout) and Kimi-Linear (Kimi-Linear-48B-A3B's checkpoint,
modeling_kimi.py; vLLM's kimi_linear.py): KDA in kda_layers, MLA without q_lora in the
others, DeepSeek-style MoE after first_k_dense_replace."""
from common import LLAMA, decoder_kv, dims, g


def kimi_linear(c, config, add):
    h, L, H, V = dims(c)
    # Kimi-Linear-48B-A3B's checkpoint (modeling_kimi.py; vLLM's kimi_linear.py):
    # KimiDeltaAttention in the kda_layers (1-based), MLA without q_lora in the
    # others, DeepSeek-style MoE (block_sparse_moe) after first_k_dense_replace.
    lc = c["linear_attn_config"]
    Hk, dk, kern = lc["num_heads"], lc["head_dim"], lc["short_conv_kernel_size"]
    P, kda = Hk * dk, {x - 1 for x in lc["kda_layers"]}
    E, EI, I = c["num_experts"], c["moe_intermediate_size"], c["intermediate_size"]
    add("model.embed_tokens", (V, h), "vocab")
    for i in range(L):
        p = f"model.layers.{i}.self_attn"
        if i in kda:
            for n in "qkv":
                add(f"{p}.{n}_proj", (P, h), "linear_attn"); add(f"{p}.{n}_conv1d", (P, 1, kern), "kept")
            for n in "fg":
                add(f"{p}.{n}_a_proj", (dk, h), "linear_attn"); add(f"{p}.{n}_b_proj", (P, dk), "linear_attn")
            add(f"{p}.b_proj", (Hk, h), "linear_attn")
            add(f"{p}.A_log", (1, 1, Hk, 1), "fp32"); add(f"{p}.dt_bias", (P,), "fp32")
            add(f"{p}.o_norm", (dk,), "kept")
            add(f"{p}.o_proj", (h, P), "linear_attn")
        else:
            add(f"{p}.q_proj", (H * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"]), h), "linear_attn")
            add(f"{p}.kv_a_proj_with_mqa", (c["kv_lora_rank"] + c["qk_rope_head_dim"], h), "linear_attn")
            add(f"{p}.kv_a_layernorm", (c["kv_lora_rank"],), "kept")
            add(f"{p}.kv_b_proj", (H * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"]), "linear_attn")
            add(f"{p}.o_proj", (h, H * c["v_head_dim"]), "linear_attn")
        q = f"model.layers.{i}"
        add(f"{q}.input_layernorm", (h,), "kept"); add(f"{q}.post_attention_layernorm", (h,), "kept")
        if i < c["first_k_dense_replace"]:
            add(f"{q}.mlp.gate_proj", (I, h), "linear_mlp"); add(f"{q}.mlp.up_proj", (I, h), "linear_mlp")
            add(f"{q}.mlp.down_proj", (h, I), "linear_mlp")
            continue
        m = f"{q}.block_sparse_moe"
        add(f"{m}.gate.weight", (E, h), "kept")
        add(f"{m}.gate.e_score_correction_bias", (E,), "kept")  # bf16 in this checkpoint
        for e in range(E):
            add(f"{m}.experts.{e}.w1", (EI, h), "expert"); add(f"{m}.experts.{e}.w3", (EI, h), "expert")
            add(f"{m}.experts.{e}.w2", (h, EI), "expert")
        SI = EI * c["num_shared_experts"]
        add(f"{m}.shared_experts.gate_proj", (SI, h), "linear_mlp"); add(f"{m}.shared_experts.up_proj", (SI, h), "linear_mlp")
        add(f"{m}.shared_experts.down_proj", (h, SI), "linear_mlp")
    add("model.norm", (h,), "kept")
    add("lm_head", (V, h), "vocab")


def kimi_linear_state(c, nbytes, layout="transformers"):
    L = g(c, "num_hidden_layers", "n_layer")
    # vLLM's MambaStateShapeCalculator.kda_state_shape: q, k and v conv windows of
    # heads x head_dim x (kernel - 1), recurrent heads x head_dim x head_dim.
    lc = c["linear_attn_config"]
    P = lc["num_heads"] * lc["head_dim"]
    rec = lc["num_heads"] * lc["head_dim"] ** 2
    if layout == "transformers":
        # KimiDeltaAttention: one conv state of q, k and v over the whole kernel, the
        # recurrent state cast to fp32 before the cache keeps it.
        return len(lc["kda_layers"]) * (3 * P * lc["short_conv_kernel_size"] * nbytes + rec * 4)
    per = 3 * P * (lc["short_conv_kernel_size"] - 1) + rec
    return len(lc["kda_layers"]) * per * nbytes


def kimi_linear_kv(c, tokens, nbytes, engine):
    # Only the MLA layers (full_attn_layers) keep KV: the latent and the rope key.
    return decoder_kv(c, tokens, nbytes, engine, LLAMA, layers=len(c["linear_attn_config"]["full_attn_layers"]))


TENSORS = {"kimi_linear": kimi_linear}
KV = {"kimi_linear": kimi_linear_kv}
STATE = {"kimi_linear": kimi_linear_state}

REAL = {
    "kimi-k2-instruct": (1_026_470_731_056, "the FP8 checkpoint's safetensors headers (a public report lists them): 1 026 470 731 056 values, fp32 block scales and 61 rotary inv_freq buffers [56] included; checked as parameters + scales + buffers"),
    "kimi-linear-48b-a3b": (49_122_681_728, "the BF16 checkpoint's safetensors headers (a public report lists them): 49 122 681 728 values; model card: 48B total, 3B active"),
}
# Published totals that are a header count: the fp8 block scales (weight_scale_inv) and
# other stored buffers are in it; the value is what those buffers add.
HEADER_TOTALS = {"kimi-k2-instruct": 61 * 56}

# Kimi-Linear's attention has no rotary embedding; Kimi-K2 runs its own code
# (trust_remote_code), whose rotary buffers are not counted.
ROPE = {"kimi_linear": None, "kimi_k2": None}
