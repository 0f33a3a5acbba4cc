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


DECODERS = {
    "llama": LLAMA,
    "mistral": LLAMA,
    "mixtral": Decoder(expert_width="intermediate_size"),
    "llama4_text": LLAMA4,
}
KV = {"llama4_text": llama4_kv}

TOWER_NOT_COUNTED = "approximate: vision_config: the vision tower is not counted; its weights add to the total"
REAL = {
    "llama-3.1-8b": (8_030_261_248, "model card / safetensors index"),
    "llama-3.1-70b": (70_553_706_496, "model card / safetensors index"),
    "llama-3.2-1b": (1_235_814_400, "model card / safetensors index"),
    "mistral-7b-v0.1": (7_241_732_096, "safetensors index"),
    "mixtral-8x7b": (46_702_792_704, "safetensors index"),
    "llama-4-scout": (None, "model card: 109B total with the vision tower, 17B active"),
    "llama-4-maverick": (None, "model card: 400B total with the vision tower, 17B active"),
}
WARN = {"llama-4-scout": ["vision tower is not counted"], "llama-4-maverick": ["vision tower is not counted"]}
CONFIDENCE = {"llama-4-scout": TOWER_NOT_COUNTED, "llama-4-maverick": TOWER_NOT_COUNTED}
# Llama-4's chunked attention matters beyond one chunk: 64k tokens.
EXTRA = [("llama-4-scout@64k", "llama-4-scout", 65536)]
