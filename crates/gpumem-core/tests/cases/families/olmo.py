"""OLMo (transformers' OlmoForCausalLM: OlmoLayerNorm has no weight and no bias, so the
checkpoint stores no norm at all), OLMo-2 and OLMoE (q/k RMSNorms over the whole
projection)."""
from common import Decoder, dims, g, rope_buffers, rope_freqs


def olmo(c, config, add):
    """model.layers.N.self_attn.{q,k,v,o}_proj (biases under attention_bias) and
    mlp.{gate,up,down}_proj; the three kinds of norm hold nothing; lm_head unless tied."""
    h, L, H, V = dims(c)
    hd, KV, I = h // H, g(c, "num_key_value_heads", default=H), c["intermediate_size"]
    add("model.embed_tokens", (V, h), "vocab")
    for i in range(L):
        p = f"model.layers.{i}"
        for n, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
            add(f"{p}.self_attn.{n}_proj", (rows, h), "linear_attn")
            if c.get("attention_bias"):
                add(f"{p}.self_attn.{n}_proj.bias", (rows,), "kept")
        add(f"{p}.self_attn.o_proj", (h, H * hd), "linear_attn")
        if c.get("attention_bias"):
            add(f"{p}.self_attn.o_proj.bias", (h,), "kept")
        add(f"{p}.mlp.gate_proj", (I, h), "linear_mlp"); add(f"{p}.mlp.up_proj", (I, h), "linear_mlp")
        add(f"{p}.mlp.down_proj", (h, I), "linear_mlp")
    if not c.get("tie_word_embeddings", False):
        add("lm_head", (V, h), "vocab")


TENSORS = {"olmo": olmo}
DECODERS = {"olmo2": Decoder(qk_norm="whole"), "olmoe": Decoder(qk_norm="whole")}

REAL = {
    "olmo-1b": (None, "model page of allenai/OLMo-1B-hf: 1.18B parameters (its safetensors' count; transformers 5.23 builds 1 176 764 416 from this config on the meta device)"),
    "olmo-2-7b": (7_298_617_344, "safetensors index"),
}
WARN = {"olmo-1b": ["exceed the 2048 positions"], "olmo-2-7b": ["exceed the 4096 positions"]}
ROUNDED = {"olmo-1b": (1.18e9, 3)}

ROPE = {"olmo": lambda c, add: rope_buffers(add, rope_freqs(c))}
