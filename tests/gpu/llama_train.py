"""Trains a tiny Llama (random init) for STEPS steps with AdamW, printing after each
optimizer step the script's own torch.cuda counters, so tests/gpu/compare_run.py can set
them beside the probe's `optimizer_step` end values (they must be equal: both are read
right after the step, with nothing allocated in between)."""

import argparse

import torch

from llama_common import counters, nvidia_smi_used_mib, tiny_llama, write_stats

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda:0")
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--tokens", type=int, default=256)
ap.add_argument("--stats", required=True)
args = ap.parse_args()

dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
model = tiny_llama(args.device, dtype)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, 32000, (args.batch, args.tokens), device=args.device)
after_steps = []
for _ in range(args.steps):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    after_steps.append(counters(args.device))
    opt.zero_grad(set_to_none=True)
write_stats(args.stats, {"after_optimizer_step": after_steps, "nvidia_smi_used_mib_at_end": nvidia_smi_used_mib()})
print("trained", args.steps, "steps")
