"""The trace's stand-in for ``torch.autocast`` on the meta device, checked against the
real CPU autocast of the installed PyTorch: the same tiny transformers model, built once
on the CPU (run under ``torch.autocast("cpu", dtype=torch.bfloat16)``) and once on the
meta device (run under the stand-in with the CPU's cast policy, ``_AutocastStandIn(torch,
"cpu")``, which the real autocast leaves alone: meta tensors carry no autocast key),
must save the same tensors for the backward, one by one (dtype, shape, and which of them
share a storage: autocast's cache of its weight casts), and run the same floating-point
operators in the same dtypes through the backward, the checkpointed layers' recompute
included.

The trace itself runs the stand-in with the CUDA policy (a GPU step's); the two policies
share the mechanism checked here (where the casts sit, above autograd; the cache; the
recompute under the forward's autocast) and differ only in their operator lists, which
are PyTorch's own (aten/src/ATen/autocast_mode.cpp).

Run: $GPUMEM_TOOLS/torch-venv/bin/python -m unittest discover -s agent/python/tests -v
"""

import collections
import contextlib
import importlib.util
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

HAVE_PEFT = (
    importlib.util.find_spec("peft") is not None
    and importlib.util.find_spec("transformers") is not None
)


def _config():
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
        attn_implementation="eager",
    )


def _model(device, dtype, lora, checkpointing):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(_config()).to(dtype)
        if lora:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear"))
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora:
            model.enable_input_require_grads()
    return model


def _step(device, dtype, lora, checkpointing):
    """One forward (under autocast) and backward (outside it): the forward's saved
    tensors in order, as (dtype, shape, index of its storage in order of appearance), and
    every operator with a floating output, forward and backward, as (name, dtypes)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    import gpumem_trace as gt

    model = _model(device, dtype, lora, checkpointing)
    ops = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
                # transformers' data-dependent checks of the inputs: whole sequences.
                return True if args[0].dtype == torch.bool else 0
            out = func(*args, **(kwargs or {}))
            outs = out if isinstance(out, (list, tuple)) else [out]
            dtypes = tuple(str(t.dtype) for t in outs if isinstance(t, torch.Tensor) and t.is_floating_point())
            if dtypes:
                ops.append((func.overloadpacket.__name__, dtypes))
            return out

    saved, storages = [], {}

    def pack(t):
        key = t.untyped_storage()._cdata
        saved.append((t.dtype, tuple(t.shape), storages.setdefault(key, len(storages))))
        return t

    ids = torch.randint(0, 128, (2, 16)).to(device)
    stand_in = gt._AutocastStandIn(torch, "cpu") if device == "meta" else contextlib.nullcontext()
    with stand_in, Log():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    return saved, ops


def _casts(ops):
    return sum(1 for name, _ in ops if name == "_to_copy")


@unittest.skipUnless(HAVE_PEFT, "needs transformers and peft")
class AutocastStandIn(unittest.TestCase):
    def check(self, dtype, lora, checkpointing):
        import torch

        real = _step("cpu", dtype, lora, checkpointing)
        meta = _step("meta", dtype, lora, checkpointing)
        self.assertEqual(real[0], meta[0], "the forward's saved tensors")
        # As multisets: the recompute's operators interleave with the backward's a little
        # differently on the two devices; `lift_fresh` wraps a constant the CPU makes
        # from a Python number (the attention mask's fill), which the meta run does not.
        counts = [collections.Counter(op for op in ops if op[0] != "lift_fresh") for ops in (real[1], meta[1])]
        self.assertEqual(counts[0], counts[1], "the operators' dtypes, forward and backward")
        # Not vacuous: autocast cast something, and kept 16-bit copies.
        self.assertGreater(_casts(real[1]), 0)
        self.assertIn(torch.bfloat16, {d for d, _, _ in real[0]})
        return real

    def test_lora_on_a_bf16_model(self):
        # PEFT's fp32 adapters: their inputs and weights cast, the copies kept.
        import torch

        saved, _ = self.check(torch.bfloat16, True, False)
        self.assertNotIn(torch.float32, {d for d, s, _ in saved if len(s) == 2 and 4 in s})

    def test_a_full_fp32_model(self):
        # Every linear and the attention's matmuls cast, the trainable weights' casts
        # cached; the loss in fp32 (cross_entropy_loss on the CPU's fp32 list).
        import torch

        self.check(torch.float32, False, False)

    def test_the_cache_casts_a_trainable_weight_once(self):
        # A trainable fp32 weight applied twice in one autocast region is cast once
        # (the copy cached, both uses save the same storage); a frozen one is cast at
        # each use (autocast caches leaves that require a gradient only).
        import torch

        def saved(device):
            torch.manual_seed(0)
            trained = torch.nn.Linear(8, 8, device=device)
            frozen = torch.nn.Linear(8, 8, device=device).requires_grad_(False)
            x = torch.randn(4, 8).to(device).requires_grad_(True)
            out, storages = [], {}

            def pack(t):
                key = t.untyped_storage()._cdata
                out.append((t.dtype, tuple(t.shape), storages.setdefault(key, len(storages))))
                return t

            stand_in = gt._AutocastStandIn(torch, "cpu") if device == "meta" else contextlib.nullcontext()
            with stand_in, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    y = frozen(frozen(trained(trained(x))))
            y.sum().backward()
            return out

        import gpumem_trace as gt

        real, meta = saved("cpu"), saved("meta")
        self.assertEqual(real, meta)
        weights = [i for d, s, i in real if s == (8, 8)]
        # trained's copy saved twice (one storage), frozen's two copies one each.
        self.assertEqual(len(weights), 4)
        self.assertEqual(weights[0], weights[1])
        self.assertNotEqual(weights[2], weights[3])
        self.assertEqual({d for d, s, _ in real if s == (8, 8)}, {torch.bfloat16})

    def test_lora_with_checkpointing_recomputes_under_autocast(self):
        import torch

        self.check(torch.bfloat16, True, True)


if __name__ == "__main__":
    unittest.main()
