"""A data-parallel training job on CPU, one process per rank (started by torchrun,
accelerate or DeepSpeed's launcher): torch.distributed over gloo, a tiny Llama built
from its config (no weights downloaded) wrapped by DistributedDataParallel or FSDP2's
``fully_shard`` (``WRAP=ddp|fsdp2``, default ddp), AdamW, two steps of 2 × 16 tokens."""

import os

import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

dist.init_process_group("gloo")
torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
model = LlamaForCausalLM(config)
if os.environ.get("WRAP", "ddp") == "fsdp2":
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
else:
    model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 128, (2, 16))
for _ in range(2):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
print("rank", dist.get_rank(), "trained", float(loss))
dist.destroy_process_group()
