"""An out-of-memory error raised inside a forward, as torch raises it on a GPU."""

import torch


class Greedy(torch.nn.Module):
    def forward(self, x):
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.11 GiB"
        )


Greedy()(torch.zeros(1))
