"""A training loop fed by a DataLoader with two spawn workers: each worker is a fresh
interpreter that imports torch (so the probe says hello from it, with the rank's
environment), but runs no model step. The agent must keep them apart from the rank."""

import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny import Mlp  # noqa: E402


def main():
    torch.manual_seed(0)
    model = Mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(32, 64), torch.randn(32, 1))
    loader = DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context="spawn")
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    print("trained", float(loss) >= 0)


if __name__ == "__main__":
    main()
