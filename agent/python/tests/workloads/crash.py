"""A crash (an ordinary exception) inside a manual phase, after one training step."""

import gpumem_probe
import torch

model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(2, 8)).sum().backward()
opt.step()
with gpumem_probe.phase("export"):
    raise ValueError("boom")
