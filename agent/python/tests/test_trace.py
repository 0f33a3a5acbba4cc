"""The trace probe (`gpumem_trace.py`): its model of the CUDA caching allocator (pure
Python, no torch needed) and, when transformers is importable, a tiny Llama traced end
to end with figures derived here tensor by tensor.

Run: $GPUMEM_TOOLS/torch-venv/bin/python -m unittest discover -s agent/python/tests -v
"""

import importlib.util
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import gpumem_trace as gt  # noqa: E402

MIB = 1 << 20


class AllocatorModel(unittest.TestCase):
    def test_requests_round_to_512_bytes(self):
        self.assertEqual(gt.round_size(1), 512)
        self.assertEqual(gt.round_size(512), 512)
        self.assertEqual(gt.round_size(513), 1024)
        self.assertEqual(gt.round_size(0), 512)

    def test_small_requests_share_a_2_mib_segment(self):
        a = gt.Allocator(expandable=False)
        blocks = [a.malloc(512 * 1024) for _ in range(5)]
        self.assertEqual(a.reserved, 2 * (2 * MIB), "four fill one segment, the fifth opens another")
        self.assertEqual(len(set(blocks)), 5)
        # A freed block is reused before a new segment is made.
        a.release(blocks[0])
        a.malloc(512 * 1024)
        a.malloc(512 * 1024)
        a.malloc(512 * 1024)
        self.assertEqual(a.reserved, 4 * MIB)

    def test_mid_sized_requests_get_a_20_mib_segment_and_split_it(self):
        a = gt.Allocator(expandable=False)
        x = a.malloc(5 * MIB)
        self.assertEqual(a.reserved, 20 * MIB)
        y = a.malloc(5 * MIB)
        self.assertEqual(a.reserved, 20 * MIB, "the 15 MiB remainder serves the second")
        self.assertEqual(y, x + 5 * MIB)
        a.release(x)
        a.release(y)
        # Both merged back into one 20 MiB free block: a 19 MiB request fits.
        a.malloc(19 * MIB)
        self.assertEqual(a.reserved, 20 * MIB)

    def test_large_requests_round_their_segment_to_2_mib(self):
        a = gt.Allocator(expandable=False)
        a.malloc(11 * MIB + 512)
        self.assertEqual(a.reserved, 12 * MIB)

    def test_a_large_remainder_of_at_most_1_mib_is_not_split(self):
        a = gt.Allocator(expandable=False)
        x = a.malloc(12 * MIB)
        a.release(x)
        # 12 MiB free block, 11.5 MiB request: the 0.5 MiB remainder stays with it.
        a.malloc(11 * MIB + 512 * 1024)
        a.malloc(2 * MIB)  # cannot use the remainder: a new 20 MiB segment
        self.assertEqual(a.reserved, 12 * MIB + 20 * MIB)

    def test_expandable_segments_grow_one_range(self):
        a = gt.Allocator(expandable=True)
        x = a.malloc(11 * MIB)
        self.assertEqual(a.reserved, 20 * MIB)
        a.malloc(11 * MIB)
        self.assertEqual(a.reserved, 40 * MIB)
        a.release(x)
        # The hole at the start is reused: no growth.
        a.malloc(10 * MIB)
        self.assertEqual(a.reserved, 40 * MIB)


HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
# Under the test script transformers is a required tool (scripts/install-tools.sh).
if not HAVE_TRANSFORMERS and os.environ.get("GPUMEM_REQUIRE_TOOLS", "") not in ("", "0", "false"):
    raise RuntimeError("transformers is not importable: run scripts/install-tools.sh")


def tiny_llama(**over):
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 512,
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-5,
    }
    config.update(over)
    return config


def workload(**over):
    w = {
        "train": "full",
        "sequences": 2,
        "context": 128,
        "generate": 0,
        "dtype": "bfloat16",
        "attention": "flash",
        "optimizer": "adamw",
        "master_weights": False,
        "checkpointing": False,
        "lora_rank": 8,
        "lora_targets": ["q_proj", "v_proj"],
        "logits": "last",
        "expandable_segments": False,
    }
    w.update(over)
    return w


@unittest.skipUnless(HAVE_TRANSFORMERS, "transformers is not importable")
class TinyLlama(unittest.TestCase):
    def run_trace(self, config=None, **over):
        w = workload(**over)
        w["config"] = config or tiny_llama()
        return gt.trace(w)

    def test_parameters_and_model_load(self):
        doc = self.run_trace()
        h, i, v, layers, kv = 64, 256, 1000, 2, 2 * 16
        per_layer = 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h
        expected = 2 * v * h + layers * per_layer + h
        self.assertEqual(doc["parameters"], expected)
        load = doc["phases"][0]
        self.assertEqual(load["name"], "model_load")
        self.assertEqual(load["at_peak"]["parameters"] + 2048, load["allocated_end_bytes"],
                         "parameters plus the input ids (2 × 128 int64)")

    def test_the_forward_keeps_what_the_backward_needs_tensor_by_tensor(self):
        doc = self.run_trace()
        forward = [p for p in doc["phases"] if p["name"] == "forward" and p["step"] == 1][0]
        tokens, h, i = 2 * 128, 64, 256
        norm = tokens * (4 + 2 + 2) * h  # fp32 upcast, normalised, scaled output
        rsqrt = 512  # (2, 128, 1) fp32 = 1 KiB? no: 1024 B, two blocks
        rsqrt = gt.round_size(2 * 128 * 4)
        attention = tokens * 2 * (64 + 32 + 32) + tokens * 2 * 64 + 2 * 4 * 128 * 4
        mlp = 4 * tokens * 2 * i  # gate, SiLU, up, product
        rotary = 2 * (128 * 16 * 2)  # cos and sin, (1, 128, 16) bf16
        labels = 2 * 127 * 8 + 0  # shifted labels, int64, kept by the loss
        loss = 2 * 512  # the loss and nll_loss's total weight
        expected = 2 * (2 * (norm + rsqrt) + attention + mlp) + norm + rsqrt + rotary
        expected += gt.round_size(2 * 128 * 8) + loss
        self.assertEqual(forward["at_peak"]["activations"], expected)
        # Logits at the forward's peak: bf16 logits, their fp32 copy, log-softmax.
        self.assertEqual(forward["at_peak"]["logits"], tokens * 1000 * (2 + 4 + 4))

    def test_training_phases_and_categories(self):
        doc = self.run_trace()
        names = [(p["name"], p["step"]) for p in doc["phases"]]
        self.assertEqual(names, [("model_load", None)] + [
            (n, s) for s in (0, 1) for n in ("forward", "backward", "optimizer_step")
        ])
        for p in doc["phases"]:
            self.assertEqual(sum(p["at_peak"].values()), p["allocated_peak_bytes"], p["name"])
            self.assertGreaterEqual(p["reserved_peak_bytes"], p["allocated_peak_bytes"])
        step1 = {p["name"]: p for p in doc["phases"] if p["step"] == 1}
        self.assertGreater(step1["forward"]["at_peak"]["activations"], 0)
        self.assertGreater(step1["optimizer_step"]["at_peak"]["optimizer_state"], 0)

    def test_checkpointing_keeps_less(self):
        full = self.run_trace()
        ckpt = self.run_trace(checkpointing=True)
        act = lambda d: [p for p in d["phases"] if p["name"] == "forward" and p["step"] == 1][0]["allocated_end_bytes"]
        self.assertLess(act(ckpt), act(full))

    def test_compiled_step_keeps_what_the_partitioner_saves(self):
        eager = self.run_trace()
        compiled = self.run_trace(compile=True)
        forward = lambda d: [p for p in d["phases"] if p["name"] == "forward" and p["step"] == 1][0]
        ops = lambda d: {r["op"]: r["bytes"] for r in d["activations_by_op"]}
        self.assertLess(forward(compiled)["at_peak"]["activations"], forward(eager)["at_peak"]["activations"])
        # The partitioner recomputes SiLU and the RMSNorm's fp32 upcast in the backward:
        # eager keeps SiLU's output (2 layers × 2 × 128 × 256 bf16) and the upcasts.
        self.assertEqual(ops(eager)["silu"], 2 * 2 * 128 * 256 * 2)
        self.assertNotIn("silu", ops(compiled))
        self.assertLess(ops(compiled)["_to_copy"], ops(eager)["_to_copy"])
        # The flash kernel's output and log-sum-exp are kept either way.
        key = "_scaled_dot_product_flash_attention"
        self.assertEqual(ops(compiled)[key], ops(eager)[key])
        self.assertTrue(any("min_cut_rematerialization_partition" in n for n in compiled["notes"]))
        for p in compiled["phases"]:
            self.assertEqual(sum(p["at_peak"].values()), p["allocated_peak_bytes"], p["name"])

    def test_compiled_step_per_layer_is_what_the_partition_saves(self):
        # Per decoder layer the partition saves (bf16 unless said): the layer input,
        # each RMSNorm's fp32 rsqrt and scaled output, V, the rotated Q and K, the
        # flash output and its fp32 log-sum-exp, the output projection's result, and
        # the MLP's gate, up and gate-up product. The rest (final norm, rotary tables,
        # shifted labels, loss) runs eagerly, as in the eager step.
        doc = self.run_trace(compile=True)
        forward = [p for p in doc["phases"] if p["name"] == "forward" and p["step"] == 1][0]
        tokens, h, q, kv, i = 2 * 128, 64, 64, 32, 256
        layer = 2 * tokens * (4 * h + 2 * q + 2 * kv) + 2 * tokens * 3 * i
        layer += 2 * gt.round_size(tokens * 4) + 2 * 4 * 128 * 4
        final_norm = tokens * (4 + 2 + 2) * h + gt.round_size(tokens * 4)
        rotary, labels, loss = 2 * (128 * 16 * 2), gt.round_size(2 * 128 * 8), 2 * 512
        self.assertEqual(forward["at_peak"]["activations"], 2 * layer + final_norm + rotary + labels + loss)

    def test_compiled_lora_step_keeps_less(self):
        eager = self.run_trace(train="lora")
        compiled = self.run_trace(train="lora", compile=True)
        act = lambda d: [p for p in d["phases"] if p["name"] == "forward" and p["step"] == 1][0]["at_peak"]["activations"]
        self.assertLess(act(compiled), act(eager))

    def test_compile_is_refused_with_checkpointing(self):
        with self.assertRaises(ValueError):
            self.run_trace(compile=True, checkpointing=True)
        with self.assertRaises(ValueError):
            self.run_trace(compile=True, memory_history={"max_entries": 1000})

    def test_inference_has_prefill_decode_and_a_kv_cache(self):
        doc = self.run_trace(train="none", generate=4)
        names = [p["name"] for p in doc["phases"]]
        self.assertEqual(names, ["model_load", "prefill", "decode"])
        prefill, decode = doc["phases"][1], doc["phases"][2]
        # bf16 K and V of 2 layers, 2 sequences × 2 KV heads × 16 dims × 128 tokens.
        self.assertEqual(prefill["at_peak"]["kv_cache"], 2 * 2 * (2 * 2 * 128 * 16 * 2))
        # After 3 decode steps 131 tokens (each tensor rounded to 512 B); at the peak
        # one layer may hold its old and its new K/V at once.
        final = 2 * 2 * gt.round_size(2 * 2 * 131 * 16 * 2)
        kv = decode["at_peak"]["kv_cache"]
        self.assertGreaterEqual(kv, final - 2 * gt.round_size(2 * 2 * 131 * 16 * 2))
        self.assertLessEqual(kv, final + 2 * gt.round_size(2 * 2 * 130 * 16 * 2))

    def test_an_unknown_model_type_is_unavailable(self):
        with self.assertRaises(gt.Unavailable):
            self.run_trace(config={"model_type": "no-such-family"})

    @unittest.skipUnless(importlib.util.find_spec("peft"), "peft is not importable")
    def test_lora_adapters_are_built_on_the_meta_device(self):
        # A rank whose adapters would be 2 × 64 × 2^20 × 4 B = 1 GiB per layer on the
        # CPU: on the meta device they cost nothing, and the count is still exact.
        import resource

        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        doc = self.run_trace(train="lora", lora_rank=1 << 20, lora_targets=["q_proj"])
        grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        self.assertLess(grown_kib, 256 * 1024, "the adapters were allocated on the CPU")
        # q_proj of 2 layers: A (rank × 64) and B (64 × rank).
        self.assertEqual(doc["trainable_parameters"], 2 * 2 * 64 * (1 << 20))


class Watchdog(unittest.TestCase):
    """The probe ends on its own: at its deadline, or once its parent is gone."""

    def run_child(self, code):
        import subprocess
        import time

        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONPATH": os.path.dirname(HERE)},
            timeout=60,
        )
        return proc.returncode, time.monotonic() - t0

    def test_the_deadline_ends_the_probe(self):
        rc, took = self.run_child(
            "import os, time, gpumem_trace as g\n"
            "g._watchdog(0.5, os.getppid())\n"
            "time.sleep(30)\n"
        )
        self.assertEqual(rc, 124)
        self.assertLess(took, 20)

    def test_a_gone_parent_ends_the_probe(self):
        # A parent pid that is not this process's parent: as after re-parenting.
        rc, took = self.run_child(
            "import os, time, gpumem_trace as g\n"
            "g._watchdog(None, os.getppid() + 1)\n"
            "time.sleep(30)\n"
        )
        self.assertEqual(rc, 125)
        self.assertLess(took, 20)


if __name__ == "__main__":
    unittest.main()
