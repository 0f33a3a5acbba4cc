"""A real generation loop with a KV cache on CPU: two generate calls of 16 tokens."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny import TinyDecoder  # noqa: E402

torch.manual_seed(0)
model = TinyDecoder().eval()
prompt = torch.randint(0, 97, (2, 10))
for _ in range(2):
    out = model.generate(prompt, max_new_tokens=16)
print("generated", tuple(out.shape))
