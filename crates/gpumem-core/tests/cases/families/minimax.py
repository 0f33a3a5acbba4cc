"""MiniMax-M2 (q/k RMSNorms over the whole projection, experts intermediate_size wide,
the routing bias in fp32)."""
from common import Decoder

DECODERS = {"minimax_m2": Decoder(qk_norm="whole", expert_width="intermediate_size")}

REAL = {"minimax-m2": (None, "model card: 230B total parameters, 10B active")}
ROUNDED = {"minimax-m2": (230e9, 2)}
