"""Llama, Mistral and Mixtral (the Llama-style decoder itself) and Llama-4 (its dense
layers intermediate_size_mlp wide, one shared expert beside the routed ones, chunked
attention in its RoPE layers)."""
from common import LLAMA, Decoder, decoder_kv, dims

LLAMA4 = Decoder(dense_width="intermediate_size_mlp", expert_width="intermediate_size", shared=(1, "intermediate_size"))


def llama4_kv(c, tokens, nbytes, engine):
    """The RoPE layers attend within chunks of attention_chunk_size: each keeps at most one
    chunk; every no_rope_layer_interval-th (4th) layer is a global NoPE layer."""
    _, L, _, _ = dims(c)
    kept = None
    if c.get("attention_chunk_size"):
        rope = c.get("no_rope_layers") or [0 if (i + 1) % 4 == 0 else 1 for i in range(L)]
        kept = [min(tokens, c["attention_chunk_size"]) if r else tokens for r in rope]
    return decoder_kv(c, tokens, nbytes, engine, LLAMA4, kept=kept)


def llama4_vision(config, c, add):
    """transformers' Llama4VisionModel (its pixel-shuffle adapter included) and
    Llama4MultiModalProjector (modeling_llama4.py)."""
    vc = config.get("vision_config")
    if not (vc and vc.get("model_type") == "llama4_vision_model"):
        return
    th = c["hidden_size"]
    d = {"hidden_size": 768, "intermediate_size": 5632, "num_hidden_layers": 34, "num_channels": 3, "image_size": 448,
         "num_attention_heads": 16,
         "patch_size": 14, "projector_input_dim": 4096, "projector_output_dim": 4096, "vision_output_dim": 7680}
    v = {k: vc.get(k, x) for k, x in d.items()}
    h, i, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    add("vision_model.patch_embedding.linear.weight", (h, v["num_channels"] * p * p), "tower")
    add("vision_model.class_embedding", (h,), "tower")
    add("vision_model.positional_embedding_vlm", ((v["image_size"] // p) ** 2 + 1, h), "tower")
    for nm in ("layernorm_pre", "layernorm_post"):
        add(f"vision_model.{nm}.weight", (h,), "tower"); add(f"vision_model.{nm}.bias", (h,), "tower")
    for n in range(v["num_hidden_layers"]):
        q = f"vision_model.model.layers.{n}"
        for nm in ("q_proj", "k_proj", "v_proj", "o_proj"):
            add(f"{q}.self_attn.{nm}.weight", (h, h), "tower"); add(f"{q}.self_attn.{nm}.bias", (h,), "tower")
        add(f"{q}.mlp.fc1.weight", (i, h), "tower"); add(f"{q}.mlp.fc1.bias", (i,), "tower")
        add(f"{q}.mlp.fc2.weight", (h, i), "tower"); add(f"{q}.mlp.fc2.bias", (h,), "tower")
        for nm in ("input_layernorm", "post_attention_layernorm"):
            add(f"{q}.{nm}.weight", (h,), "tower"); add(f"{q}.{nm}.bias", (h,), "tower")
    add("vision_model.vision_adapter.mlp.fc1.weight", (v["projector_input_dim"], i), "tower")
    add("vision_model.vision_adapter.mlp.fc2.weight", (v["projector_output_dim"], v["projector_output_dim"]), "tower")
    add("multi_modal_projector.linear_1.weight", (th, v["vision_output_dim"]), "tower")
    # Llama4VisionRotaryEmbedding._compute_freqs_ci: freqs_ci, a non-persistent
    # complex64 buffer [patches + 1, 1, 2 * (f // 2)], f = head // 2.
    f = h // v["num_attention_heads"] // 2
    add("vision_model.rotary_embedding.freqs_ci", ((v["image_size"] // p) ** 2 + 1, 1, 2 * (f // 2)), "buffer_complex64")


DECODERS = {
    "llama": LLAMA,
    "mistral": LLAMA,
    "mixtral": Decoder(expert_width="intermediate_size"),
    "llama4_text": LLAMA4,
}
KV = {"llama4_text": llama4_kv}
TOWERS = {"llama4": llama4_vision}

REAL = {
    "llama-3.1-8b": (8_030_261_248, "model card / safetensors index"),
    "llama-3.1-70b": (70_553_706_496, "model card / safetensors index"),
    "llama-3.2-1b": (1_235_814_400, "model card / safetensors index"),
    "mistral-7b-v0.1": (7_241_732_096, "safetensors index"),
    "mixtral-8x7b": (46_702_792_704, "safetensors index"),
    "llama-4-scout": (None, "model card: 109B total with the vision tower, 17B active (transformers 5.23 builds 108 641 793 536 from this config on the meta device)"),
    "llama-4-maverick": (None, "model card: 400B total with the vision tower, 17B active"),
}
WARN = {"llama-4-scout": [], "llama-4-maverick": []}
ROUNDED = {"llama-4-scout": (109e9, 3), "llama-4-maverick": (400e9, 2)}
# Llama-4's chunked attention matters beyond one chunk: 64k tokens.
EXTRA = [("llama-4-scout@64k", "llama-4-scout", 65536)]
