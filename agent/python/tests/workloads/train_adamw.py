"""A real training loop on CPU: an MLP, AdamW, STEPS steps (default 5)."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny import Mlp  # noqa: E402

torch.manual_seed(0)
model = Mlp()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(8, 64)
y = torch.randn(8, 1)
for _ in range(int(os.environ.get("STEPS", "5"))):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
print("trained", float(loss) >= 0)
