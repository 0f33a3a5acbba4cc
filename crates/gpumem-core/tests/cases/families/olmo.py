"""OLMo-2 and OLMoE (q/k RMSNorms over the whole projection)."""
from common import Decoder

DECODERS = {"olmo2": Decoder(qk_norm="whole"), "olmoe": Decoder(qk_norm="whole")}

REAL = {"olmo-2-7b": (7_298_617_344, "safetensors index")}
WARN = {"olmo-2-7b": ["exceed the 4096 positions"]}
