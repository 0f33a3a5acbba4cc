"""Phi-3 (the Llama-style decoder; its fused projections hold the same tensors)."""
from common import LLAMA

DECODERS = {"phi3": LLAMA}

REAL = {"phi-3-mini-4k": (3_821_079_552, "safetensors index")}
WARN = {"phi-3-mini-4k": ["exceed the 4096 positions"]}
