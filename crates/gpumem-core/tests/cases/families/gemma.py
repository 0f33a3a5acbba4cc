"""Gemma-2 (four norms per layer, every other layer sliding), Gemma-3 (per-head q/k
norms, five sliding layers in six, sparse published configs, the SigLIP tower of
Gemma3ForConditionalGeneration) and Gemma 4 (transformers' modeling_gemma4.py: global
layers with their own KV shape, k = v, a layer scalar per layer). Tied embeddings."""
from common import Decoder, cdiv, dims, g, rope_buffers, rope_freqs, layer_kinds


def gemma4_text(c, config, add):
    h, L, H, V = dims(c)
    # transformers' modeling_gemma4.py (Gemma4TextDecoderLayer, Gemma4TextAttention):
    # the full-attention layers use global_head_dim and, with attention_k_eq_v,
    # num_global_key_value_heads and no v_proj; q_norm and k_norm per head, v_norm
    # without weight; four norms and the layer_scalar buffer per layer; a GeGLU MLP.
    hd, KV, I = c["head_dim"], c["num_key_value_heads"], c["intermediate_size"]
    add("model.language_model.embed_tokens", (V, h), "vocab")
    # KV sharing (num_kv_shared_layers): the last layers reuse an earlier layer's K
    # and V and hold no k_proj, v_proj or k_norm; with use_double_wide_mlp their MLP
    # is twice as wide.
    first_shared = L - (c.get("num_kv_shared_layers") or 0)
    for i, kind in enumerate(c["layer_types"]):
        p = f"model.language_model.layers.{i}"
        glob = kind == "full_attention"
        shared = i >= first_shared
        d = c["global_head_dim"] if glob else hd
        kv = c["num_global_key_value_heads"] if glob and c["attention_k_eq_v"] else KV
        add(f"{p}.self_attn.q_proj", (H * d, h), "linear_attn")
        if not shared:
            add(f"{p}.self_attn.k_proj", (kv * d, h), "linear_attn")
            if not (glob and c["attention_k_eq_v"]):
                add(f"{p}.self_attn.v_proj", (kv * d, h), "linear_attn")
        add(f"{p}.self_attn.o_proj", (h, H * d), "linear_attn")
        add(f"{p}.self_attn.q_norm", (d,), "kept")
        if not shared:
            add(f"{p}.self_attn.k_norm", (d,), "kept")
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            add(f"{p}.{n}", (h,), "kept")
        add(f"{p}.layer_scalar", (1,), "kept")
        w_i = I * (2 if shared and c.get("use_double_wide_mlp") else 1)
        add(f"{p}.mlp.gate_proj", (w_i, h), "linear_mlp"); add(f"{p}.mlp.up_proj", (w_i, h), "linear_mlp")
        add(f"{p}.mlp.down_proj", (h, w_i), "linear_mlp")
    add("model.language_model.norm", (h,), "kept")
    # Per-layer input embeddings (Gemma4TextModel, Gemma4TextDecoderLayer).
    w = c.get("hidden_size_per_layer_input") or 0
    if w:
        add("model.language_model.embed_tokens_per_layer", (c.get("vocab_size_per_layer_input", 262144), L * w), "vocab")
        add("model.language_model.per_layer_model_projection", (L * w, h), "kept")
        add("model.language_model.per_layer_projection_norm", (w,), "kept")
        for i in range(L):
            p = f"model.language_model.layers.{i}"
            add(f"{p}.per_layer_input_gate", (w, h), "kept"); add(f"{p}.per_layer_projection", (h, w), "kept")
            add(f"{p}.post_per_layer_input_norm", (h,), "kept")


def gemma4_text_kv(c, tokens, nbytes, engine):
    # Sliding layers keep the window with their KV heads x head_dim; the global
    # layers all tokens with theirs (K and V both cached, also with k = v).
    total = 0
    first_shared = len(c["layer_types"]) - (c.get("num_kv_shared_layers") or 0)
    for i, kind in enumerate(c["layer_types"]):
        if i >= first_shared:
            continue  # a KV-shared layer keeps no cache
        if kind == "full_attention":
            kv = c["num_global_key_value_heads"] if c["attention_k_eq_v"] else c["num_key_value_heads"]
            total += 2 * kv * c["global_head_dim"] * tokens * nbytes
        else:
            total += 2 * c["num_key_value_heads"] * c["head_dim"] * min(tokens, c["sliding_window"]) * nbytes
    return total


def siglip_tower(config, c, add):
    """transformers' SiglipVisionModel (no pooling head) + Gemma3MultiModalProjector."""
    vc = config.get("vision_config")
    if not (vc and vc.get("model_type") == "siglip_vision_model"):
        return
    h = g(c, "hidden_size", "n_embd")
    vh, vi, vl = vc["hidden_size"], vc["intermediate_size"], vc["num_hidden_layers"]
    p, ch, n = vc["patch_size"], vc.get("num_channels", 3), (vc["image_size"] // vc["patch_size"]) ** 2
    add("vision.patch_embedding.weight", (vh, ch, p, p), "tower")
    add("vision.patch_embedding.bias", (vh,), "tower")
    add("vision.position_embedding", (n, vh), "tower")
    for i in range(vl):
        for nm in ("layer_norm1", "layer_norm2"):
            add(f"vision.layers.{i}.{nm}.weight", (vh,), "tower"); add(f"vision.layers.{i}.{nm}.bias", (vh,), "tower")
        for nm in ("q_proj", "k_proj", "v_proj", "out_proj"):
            add(f"vision.layers.{i}.{nm}.weight", (vh, vh), "tower"); add(f"vision.layers.{i}.{nm}.bias", (vh,), "tower")
        add(f"vision.layers.{i}.fc1.weight", (vi, vh), "tower"); add(f"vision.layers.{i}.fc1.bias", (vi,), "tower")
        add(f"vision.layers.{i}.fc2.weight", (vh, vi), "tower"); add(f"vision.layers.{i}.fc2.bias", (vh,), "tower")
    add("vision.post_layernorm.weight", (vh,), "tower"); add("vision.post_layernorm.bias", (vh,), "tower")
    add("multi_modal_projector.mm_input_projection_weight", (vh, h), "tower")
    add("multi_modal_projector.mm_soft_emb_norm.weight", (vh,), "tower")


def gemma4_vision(config, c, add):
    """transformers' Gemma4VisionModel + Gemma4MultimodalEmbedder (modeling_gemma4.py)."""
    vc = config.get("vision_config")
    if not (vc and vc.get("model_type") == "gemma4_vision"):
        return
    h = g(c, "hidden_size", "n_embd")
    # Gemma4VisionConfig's defaults.
    d = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 16, "num_attention_heads": 12,
         "num_key_value_heads": 12, "head_dim": 64, "patch_size": 16, "position_embedding_size": 10240}
    v = {k: vc.get(k, x) for k, x in d.items()}
    vh, hd, p = v["hidden_size"], v["head_dim"], v["patch_size"]
    add("vision_tower.patch_embedder.input_proj.weight", (vh, 3 * p * p), "tower")
    add("vision_tower.patch_embedder.position_embedding_table", (2, v["position_embedding_size"], vh), "tower")
    linears = {"self_attn.q_proj": (v["num_attention_heads"] * hd, vh), "self_attn.k_proj": (v["num_key_value_heads"] * hd, vh),
               "self_attn.v_proj": (v["num_key_value_heads"] * hd, vh), "self_attn.o_proj": (vh, v["num_attention_heads"] * hd),
               "mlp.gate_proj": (v["intermediate_size"], vh), "mlp.up_proj": (v["intermediate_size"], vh),
               "mlp.down_proj": (vh, v["intermediate_size"])}
    for i in range(v["num_hidden_layers"]):
        q = f"vision_tower.encoder.layers.{i}"
        for nm, shape in linears.items():
            add(f"{q}.{nm}.linear.weight", shape, "tower")
            if vc.get("use_clipped_linears"):
                for b in ("input_min", "input_max", "output_min", "output_max"):
                    add(f"{q}.{nm}.{b}", (), "tower")
        add(f"{q}.self_attn.q_norm.weight", (hd,), "tower"); add(f"{q}.self_attn.k_norm.weight", (hd,), "tower")
        for nm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            add(f"{q}.{nm}.weight", (vh,), "tower")
    if vc.get("standardize"):
        add("vision_tower.std_bias", (vh,), "tower"); add("vision_tower.std_scale", (vh,), "tower")
    add("embed_vision.embedding_projection.weight", (h, vc.get("output_proj_dims", vh)), "tower")
    # Gemma4VisionRotaryEmbedding: inv_freq and original_inv_freq (fp32, non-persistent)
    # over head_dim // 2, torch.arange(0, dim, 2).
    rope_buffers(add, cdiv(hd // 2, 2), "vision_tower.encoder.rotary_emb")


GEMMA3 = Decoder(head_dim=256, norms=4, qk_norm="head", tied=True, sliding="pattern")
DECODERS = {
    "gemma": Decoder(tied=True),
    "gemma2": Decoder(head_dim=256, norms=4, tied=True, sliding=2),
    "gemma3": GEMMA3,
    "gemma3_text": GEMMA3,
}
TENSORS = {"gemma4_text": gemma4_text}
KV = {"gemma4_text": gemma4_text_kv}
TOWERS = {"gemma3": siglip_tower, "gemma4": gemma4_vision}
# transformers' Gemma3TextConfig defaults, which the sparse published configs rely on.
DEFAULTS = {"gemma3_text": {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
                            "max_position_embeddings": 131072, "sliding_window_pattern": 6}}

REAL = {
    "gemma-2-2b": (2_614_341_888, "safetensors index"),
    "gemma-2-9b": (9_241_705_984, "safetensors index"),
    "gemma-3-1b": (999_885_952, "safetensors index"),
    "gemma-3-4b": (4_300_079_472, "safetensors index (text 3 880 263 168 + SigLIP tower and projector)"),
    "gemma-4-31b": (None, "model card: 31B, the gemma4_vision tower included (text 30 697 345 340 + tower and projector 171 493 376 with Gemma4VisionConfig's defaults)"),
}
WARN = {"gemma-4-31b": [], "gemma-3-4b": []}
CONFIDENCE = {}
ROUNDED = {"gemma-4-31b": (31e9, 2)}

def gemma4_rope(c, add):
    """Gemma4RotaryEmbedding: one table per layer type, the full layers' over
    global_head_dim (their "proportional" rope keeps the whole width, the unrotated
    part at frequency 0: _compute_proportional_rope_parameters)."""
    kinds = layer_kinds(c, 6)
    widths = [cdiv(c.get("global_head_dim", 512), 2) if k == "full_attention" else rope_freqs(c) for k in kinds]
    rope_buffers(add, widths, names=kinds)


# Gemma3RotaryEmbedding: one table per layer type (five sliding layers in six).
ROPE = {"gemma3_text": lambda c, add: rope_buffers(add, rope_freqs(c, DECODERS["gemma3_text"]), names=layer_kinds(c, c.get("sliding_window_pattern", 6))),
        "gemma4_text": gemma4_rope}


def embed_scale(add, names=("model.embed_tokens",)):
    """GemmaTextScaledWordEmbedding's embed_scale (transformers 5.23
    models/gemma/modeling_gemma.py, and its copies in Gemma 2, VaultGemma, Gemma 3 and
    Gemma 4): nn.Buffer(torch.tensor(embed_scale), persistent=False), a scalar in the
    dtype the model is built in, one per scaled embedding."""
    for n in names:
        add(f"{n}.embed_scale", (), "buffer")


# Gemma 4's per-layer input embeddings (hidden_size_per_layer_input) are a second
# scaled embedding.
BUFFERS = {"gemma": lambda c, add: embed_scale(add), "gemma2": lambda c, add: embed_scale(add),
           "vaultgemma": lambda c, add: embed_scale(add), "gemma3_text": lambda c, add: embed_scale(add),
           "gemma4_text": lambda c, add: embed_scale(add, ("model.embed_tokens",) + (
               ("model.embed_tokens_per_layer",) if c.get("hidden_size_per_layer_input") else ()))}
