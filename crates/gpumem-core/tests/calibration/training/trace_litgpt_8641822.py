"""Bytes lit-gpt 8641822's LoRA GPT keeps for the backward, traced on the CPU.

Runs lit-gpt's own lit_gpt/model.py, lit_gpt/lora.py, lit_gpt/config.py and
lit_gpt/rmsnorm.py at commit 8641822 (read out of a clone of Lightning-AI/litgpt with
`git show`; lit_gpt/utils.py is replaced by the two helpers those files import, and
lightning_utilities by a stub saying flash-attn is absent) and records, with
torch.autograd.graph.saved_tensors_hooks, the storage of every tensor autograd saves
during the forward, less the parameters. Where the CPU differs from the GPU run the
resource tables measured (PyTorch 2.1 on an A100), the GPU's behaviour is put back:
- dropout as CUDA's fused kernel, torch.native_dropout with a boolean mask (the CPU's
  own dropout keeps a mask in the input's dtype);
- the flash kernel's output laid out like the query, (B, heads, T, d) (CUDA's
  flash-attention 2 in PyTorch 2.1 allocates it with empty_like of the transposed
  query; the CPU kernel allocates (B, T, heads, d));
- with --qlora each base linear as bitsandbytes 0.41.1's MatMul4Bit, which keeps its
  input whenever it needs a gradient (bitsandbytes/autograd/_functions.py).
Not put back: the CPU's LayerNorm keeps its mean and rstd in bf16, CUDA's in fp32.
The model is built in bf16 as fabric.init_module does, and its RoPE cache rebuilt in
the default dtype by `model.max_seq_length = T` as finetune/lora.py's train() does.
Prints the bytes kept; each saved storage on stderr.

Usage: python trace_litgpt_8641822.py LITGPT_CLONE [--qlora] [--gqa] [--phi]
(checked by training::litgpt's unit tests; torch 2.11, CPU)
"""
import sys

import os
import subprocess
import tempfile

clone = sys.argv[1]
lit_dir = tempfile.mkdtemp()
os.makedirs(os.path.join(lit_dir, "lit_gpt"))
for name in ("model", "lora", "config", "rmsnorm"):
    text = subprocess.run(
        ["git", "-C", clone, "show", f"8641822:lit_gpt/{name}.py"],
        check=True, capture_output=True, text=True,
    ).stdout
    with open(os.path.join(lit_dir, "lit_gpt", f"{name}.py"), "w") as f:
        f.write(text)
with open(os.path.join(lit_dir, "lit_gpt", "__init__.py"), "w") as f:
    f.write("from lit_gpt.model import GPT\nfrom lit_gpt.config import Config\n")
with open(os.path.join(lit_dir, "lit_gpt", "utils.py"), "w") as f:
    f.write(
        "from typing import Dict, Mapping\n\n\n"
        "def find_multiple(n: int, k: int) -> int:\n"
        "    assert k > 0\n"
        "    if n % k == 0:\n"
        "        return n\n"
        "    return n + k - (n % k)\n\n\n"
        "def map_old_state_dict_weights(state_dict: Dict, mapping: Mapping, prefix: str) -> Dict:\n"
        "    for checkpoint_name, attribute_name in mapping.items():\n"
        "        full_checkpoint_name = prefix + checkpoint_name\n"
        "        if full_checkpoint_name in state_dict:\n"
        "            full_attribute_name = prefix + attribute_name\n"
        "            state_dict[full_attribute_name] = state_dict.pop(full_checkpoint_name)\n"
        "    return state_dict\n"
    )
os.makedirs(os.path.join(lit_dir, "lightning_utilities", "core"))
for init in ("lightning_utilities/__init__.py", "lightning_utilities/core/__init__.py"):
    open(os.path.join(lit_dir, init), "w").close()
with open(os.path.join(lit_dir, "lightning_utilities", "core", "imports.py"), "w") as f:
    f.write(
        "class RequirementCache:\n"
        "    def __init__(self, *a, **k):\n"
        "        pass\n\n"
        "    def __bool__(self):\n"
        "        return False\n"
    )
sys.path.insert(0, lit_dir)
import torch
import torch.nn.functional as F

from lit_gpt.lora import GPT, Config, LoRALinear, LoRAQKVLinear, mark_only_lora_as_trainable
import lit_gpt.model as M

qlora = "--qlora" in sys.argv
gqa = "--gqa" in sys.argv
phi = "--phi" in sys.argv


def dropout(input, p=0.5, training=True, inplace=False):
    if not training or p == 0.0:
        return input
    return torch.native_dropout(input, p, True)[0]


F.dropout = dropout
_sdpa = F.scaled_dot_product_attention


def sdpa(*args, **kwargs):
    return _sdpa(*args, **kwargs).contiguous()


F.scaled_dot_product_attention = sdpa
M.torch.nn.functional.scaled_dot_product_attention = sdpa


class MatMul4Bit(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, W, bias):
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(A)
        return F.linear(A, W, bias)

    @staticmethod
    def backward(ctx, g):
        raise NotImplementedError


T, B = 256, 1
common = dict(
    block_size=512, vocab_size=1024, padded_vocab_size=1024, n_layer=3, n_embd=256,
    n_head=4, r=8, alpha=16, dropout=0.05, to_query=True, to_value=True,
)
if phi:
    cfg = Config(**common, n_query_groups=4, rotary_percentage=1.0, parallel_residual=True,
                 shared_attention_norm=True, bias=True, lm_head_bias=True,
                 _norm_class="LayerNorm", _mlp_class="GptNeoxMLP", intermediate_size=1024)
else:
    cfg = Config(**common, n_query_groups=2 if gqa else 4, rotary_percentage=1.0,
                 parallel_residual=False, bias=False, _norm_class="RMSNorm",
                 _mlp_class="LLaMAMLP", intermediate_size=512, norm_eps=1e-5)
torch.set_default_dtype(torch.bfloat16)
model = GPT(cfg)
torch.set_default_dtype(torch.float32)
model.max_seq_length = T
mark_only_lora_as_trainable(model)
model.train()
if qlora:
    for m in model.modules():
        if isinstance(m, (LoRALinear, LoRAQKVLinear)):
            lin = m.linear
            lin.forward = (lambda lin: lambda x: MatMul4Bit.apply(x, lin.weight, lin.bias))(lin)
params = {p.untyped_storage().data_ptr() for p in model.parameters()}
seen = {}


def pack(t):
    s = t.untyped_storage()
    if s.data_ptr() not in params:
        seen[s.data_ptr()] = (s.nbytes(), t.dtype, tuple(t.shape), t)
    return t


x = torch.randint(0, 1024, (B, T))
with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    out = model(x, lm_head_chunk_size=128)
total = sum(v[0] for v in seen.values())
for ptr, (n, dt, shape, _) in sorted(seen.items(), key=lambda kv: -kv[1][0]):
    print(f"  {n:>10} {str(dt):<16} {shape}", file=sys.stderr)
print(total)
