"""Generates NEW tokens with a tiny Llama (random init) and HF `generate` (KV cache),
twice, printing after each call the script's own torch.cuda counters, to set beside the
probe's `decode` end values (equal: the probe's decode ends when generate returns)."""

import argparse

import torch

from llama_common import counters, nvidia_smi_used_mib, tiny_llama, write_stats

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cuda:0")
ap.add_argument("--new", type=int, default=64)
ap.add_argument("--batch", type=int, default=2)
ap.add_argument("--prompt", type=int, default=128)
ap.add_argument("--stats", required=True)
args = ap.parse_args()

dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
model = tiny_llama(args.device, dtype).eval()
prompt = torch.randint(0, 32000, (args.batch, args.prompt), device=args.device)
after_calls = []
for _ in range(2):
    with torch.no_grad():
        out = model.generate(
            prompt, max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False, pad_token_id=0
        )
    after_calls.append(counters(args.device))
write_stats(args.stats, {"after_generate": after_calls, "output_shape": list(out.shape),
                         "nvidia_smi_used_mib_at_end": nvidia_smi_used_mib()})
print("generated", tuple(out.shape))
