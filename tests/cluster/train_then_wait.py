"""A tiny CPU training loop (the probe instruments its first steps), then a wait for a
file, so that tests/cluster/run.sh can query Prometheus while the run is still going."""

import os
import sys
import time

import torch
from torch import nn

go = sys.argv[1]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(16, 64), torch.randn(16, 1)
for _ in range(4):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
deadline = time.monotonic() + 120
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("nobody touched the go file within 120 s")
    time.sleep(0.1)
