"""gpt-oss (attention sinks, biases on the router and every expert projection)."""
from common import Decoder

DECODERS = {"gpt_oss": Decoder(sinks=True, router_bias=True, expert_bias=True, expert_width="intermediate_size")}

REAL = {
    "gpt-oss-20b": (20_914_757_184, "model card: 20.9B (21B)"),
    "gpt-oss-120b": (116_829_156_672, "model card: 116.8B (117B)"),
}
