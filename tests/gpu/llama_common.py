"""A tiny Llama built from a config by transformers: random initialisation, nothing
downloaded. Shared by llama_train.py and llama_generate.py (tests/gpu/run.sh runs both
under `gpumem-agent run`)."""

import json
import os
import subprocess

import torch


# The tiny Llama's shape; `python3 llama_common.py config.json` writes it as a config.json
# (with every default transformers fills in) for `gpumem-agent trace` and `estimate`.
SHAPE = dict(
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1376,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=2048,
)


def tiny_llama(device, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**SHAPE)).to(device=device, dtype=dtype)


def counters(device):
    """The script's own view: torch.cuda counters right now (None on CPU)."""
    if not str(device).startswith("cuda"):
        return None
    torch.cuda.synchronize(device)
    stats = torch.cuda.memory_stats(device)
    return {
        "allocated_bytes": torch.cuda.memory_allocated(device),
        "reserved_bytes": torch.cuda.memory_reserved(device),
        "allocated_bytes.all.current": stats.get("allocated_bytes.all.current"),
        "reserved_bytes.all.current": stats.get("reserved_bytes.all.current"),
    }


def nvidia_smi_used_mib():
    """This process's used memory per nvidia-smi (MiB), or None."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(os.getpid()):
            return int(parts[1])
    return None


def write_stats(path, stats):
    with open(path, "w") as f:
        json.dump(stats, f, indent=2)


if __name__ == "__main__":
    import sys

    from transformers import LlamaConfig

    config = LlamaConfig(**SHAPE).to_dict()
    # The scripts run the model in bfloat16 on a GPU.
    config["torch_dtype"] = "bfloat16"
    with open(sys.argv[1], "w") as f:
        json.dump(config, f, indent=2)
