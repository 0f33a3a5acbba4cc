"""What PEFT's LoRA adapters keep of their inputs under mixed-precision autocast, the
mechanism the estimate's `--autocast` follows, checked on the CPU against the installed
PyTorch, transformers and PEFT: a two-layer bf16 Llama with fp32 adapters on every
linear, one forward recorded through saved-tensor hooks with and without
``torch.autocast("cpu", dtype=torch.bfloat16)``.

Without autocast each adapter's ``lora_A`` keeps the fp32 copy ``Linear.forward`` makes
of its input (``_cast_input_dtype``); under autocast ``F.linear`` casts that copy, and
the adapter's weight, to bf16 and keeps the bf16 copies instead: ``lora_A``'s and
``lora_B``'s saved bytes halve. With dropout the dropout's own saved tensors do not
depend on autocast.

Run: $GPUMEM_TOOLS/torch-venv/bin/python -m unittest discover -s agent/python/tests -v
"""

import collections
import importlib.util
import unittest

HAVE_PEFT = (
    importlib.util.find_spec("peft") is not None
    and importlib.util.find_spec("transformers") is not None
)


def _saved(autocast, dropout):
    """Bytes and dtypes each adapter part saves for the backward, by part."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=1000,
        max_position_embeddings=128,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    lora = LoraConfig(r=8, target_modules="all-linear", lora_dropout=dropout)
    model = get_peft_model(model, lora)
    model.train()
    stack = []
    for name, module in model.named_modules():
        part = name.split(".")[-2] if "." in name else ""
        if part in ("lora_A", "lora_B", "lora_dropout") and name.endswith(".default"):
            module.register_forward_pre_hook(lambda m, a, p=part: stack.append(p))
            module.register_forward_hook(lambda m, a, o: stack.pop() and None)
    seen = {}

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen[key] = (stack[-1] if stack else "", t.dtype, t.untyped_storage().nbytes())
        return t

    ids = torch.randint(0, 1000, (1, 64))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(input_ids=ids, labels=ids)
        else:
            out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    by_part = collections.defaultdict(int)
    dtypes = collections.defaultdict(set)
    for part, dtype, nbytes in seen.values():
        by_part[part] += nbytes
        dtypes[part].add(dtype)
    return by_part, dtypes


@unittest.skipUnless(HAVE_PEFT, "needs transformers and peft")
class AutocastAdapters(unittest.TestCase):
    def test_autocast_keeps_16_bit_copies_of_the_adapters_inputs(self):
        import torch

        plain, plain_dtypes = _saved(False, 0.0)
        mixed, mixed_dtypes = _saved(True, 0.0)
        for part in ("lora_A", "lora_B"):
            self.assertEqual(plain_dtypes[part], {torch.float32}, part)
            self.assertEqual(mixed_dtypes[part], {torch.bfloat16}, part)
            self.assertGreater(plain[part], 0, part)
            self.assertEqual(plain[part], 2 * mixed[part], part)
        # lora_A's inputs, 64 tokens × (6 projections of 256 inputs + down's 688) in two
        # layers: 4 B each without autocast, 2 B under it (the rest is the weights,
        # fp32 parameters or their bf16 copies).
        inputs = 64 * (6 * 256 + 688) * 2
        self.assertGreaterEqual(plain["lora_A"], 4 * inputs)
        self.assertLess(mixed["lora_A"], 4 * inputs)

    def test_the_dropout_keeps_the_same_under_autocast(self):
        plain, _ = _saved(False, 0.05)
        mixed, _ = _saved(True, 0.05)
        self.assertGreater(plain["lora_dropout"], 0)
        self.assertEqual(plain["lora_dropout"], mixed["lora_dropout"])
        self.assertEqual(plain["lora_A"], 2 * mixed["lora_A"])


if __name__ == "__main__":
    unittest.main()
