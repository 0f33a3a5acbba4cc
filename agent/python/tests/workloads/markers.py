"""Manual markers around evaluation and export (a no-op when not under run)."""

import gpumem_probe
import torch

model = torch.nn.Linear(16, 16)
with gpumem_probe.phase("eval"):
    with torch.no_grad():
        model(torch.randn(4, 16))
with gpumem_probe.phase("export"):
    state = {k: v.clone() for k, v in model.state_dict().items()}
print("markers", len(state))
