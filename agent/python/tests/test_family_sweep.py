"""The family sweep (`tools/family_sweep.py`): how an answer is classified against the
truth, and the truth's cache bytes read from a model's own cache.

Run: $GPUMEM_TOOLS/torch-venv/bin/python -m unittest discover -s agent/python/tests -v
"""

import importlib.util
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "..", "tools"))

import family_sweep as fs  # noqa: E402

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None

TRUTH = {"parameters": 1000, "stored": 1010, "kv_bytes": 4096}


def _answer(parameters=1000, kv=4096, confidence="exact", warnings=(), mtp=0):
    lines = [{"key": "kv_cache", "bytes": kv}]
    if mtp:
        lines.append({"key": "weights.mtp", "bytes": 2 * mtp, "inputs": {"parameters": str(mtp)}})
    return {
        "answer": {
            "parameters": parameters + mtp,
            "kv_cache_bytes": kv,
            "lines": lines,
            "assumptions": [f"config.json: model_type x, confidence: {confidence}"],
            "warnings": list(warnings),
        }
    }


class Classify(unittest.TestCase):
    def test_equal_figures_are_exact_and_a_persistent_buffer_may_count(self):
        self.assertEqual(fs.classify(TRUTH, _answer())[0], "exact")
        # The reader counts a checkpoint's persistent buffers as parameters.
        self.assertEqual(fs.classify(TRUTH, _answer(parameters=1010))[0], "exact")
        # An MTP layer transformers does not build is left out of the comparison.
        self.assertEqual(fs.classify(TRUTH, _answer(mtp=77))[0], "exact")
        self.assertEqual(fs.classify(TRUTH, _answer(parameters=1001))[0], "SILENT")

    def test_a_wrong_figure_is_flagged_only_when_the_answer_says_so(self):
        cls, why = fs.classify(TRUTH, _answer(kv=4000, confidence="unknown family"))
        self.assertEqual(cls, "flagged")
        self.assertIn("KV 4000 vs 4096", why)
        counted = "counted by transformers 5.23.0 (model built on the meta device)"
        self.assertEqual(fs.classify(TRUTH, _answer(kv=4000, confidence=counted))[0], "SILENT")
        warned = _answer(kv=4000, warnings=["config.json: model_type x is not counted exactly here"])
        self.assertEqual(fs.classify(TRUTH, warned)[0], "flagged")
        # No KV truth (its forward failed): the parameters alone decide.
        self.assertEqual(fs.classify({"parameters": 1000}, _answer(kv=1))[0], "exact")

    def test_a_refusal_keeps_its_reason(self):
        self.assertEqual(fs.classify(TRUTH, {"refused": "gpumem-agent: error: no"}), ("refused", "gpumem-agent: error: no"))

    def test_the_counts_confidence_is_the_one_read(self):
        answer = _answer()["answer"]
        answer["assumptions"].append("config.json: confidence: counted by transformers 5.23.0")
        self.assertEqual(fs.confidence(answer), "counted by transformers 5.23.0")


ENCDEC = {"parameters": 1000, "kv_bytes": 4096, "cross_bytes": 8192, "encoder_output": 600, "encoder_length": 20}


def _encdec_answer(kv=4096, cross=8192, length=20, hidden=30, confidence="exact"):
    a = _answer(kv=kv + cross + 2 * length * hidden, confidence=confidence)
    a["answer"]["lines"] = [
        {"key": "kv_cache", "bytes": kv},
        {"key": "kv_cache.cross", "bytes": cross},
        {"key": "kv_cache.encoder_output", "bytes": 2 * length * hidden, "inputs": {"sequences": "1", "encoder length": str(length), "hidden": str(hidden)}},
    ]
    return a


class ClassifyEncoderDecoder(unittest.TestCase):
    def test_each_cache_line_is_checked_against_its_own_truth(self):
        self.assertEqual(fs.classify(ENCDEC, _encdec_answer())[0], "exact")
        # The self- and cross-attention caches swapped add up the same: still wrong.
        cls, why = fs.classify(ENCDEC, _encdec_answer(kv=8192, cross=4096))
        self.assertEqual(cls, "SILENT")
        self.assertIn("self-attention KV 8192 vs 4096", why)
        self.assertIn("cross-attention KV 4096 vs 8192", why)
        # The encoder output over a shorter source, said not exact: flagged.
        cls, why = fs.classify(ENCDEC, _encdec_answer(length=10, confidence="unknown family"))
        self.assertEqual(cls, "flagged")
        self.assertTrue(why.startswith("encoder output 300 vs 600 values"), why)
        # An answer with no cross-attention line is wrong, not exact.
        bare = _answer(kv=4096)
        self.assertEqual(fs.classify(ENCDEC, bare)[0], "SILENT")

    def test_a_decoders_image_cross_cache_is_apart_from_its_text_alone_truth(self):
        # Mllama's causal-LM class runs text alone: its truth has no cross-attention
        # cache, the answer's one image's beside the self-attention cache.
        a = _answer(kv=4096 + 1000)
        a["answer"]["lines"] = [{"key": "kv_cache", "bytes": 4096}, {"key": "kv_cache.cross", "bytes": 1000}]
        self.assertEqual(fs.classify(TRUTH, a)[0], "exact")
        # The self-attention line is still checked.
        a["answer"]["lines"][0]["bytes"] = 4095
        cls, why = fs.classify(TRUTH, a)
        self.assertEqual(cls, "SILENT")
        self.assertIn("KV 4095 vs 4096", why)


@unittest.skipUnless(HAVE_TRANSFORMERS, "transformers is not importable")
class Kinds(unittest.TestCase):
    def test_the_kind_is_the_class_a_user_loads(self):
        import transformers

        kinds = {t: fs.kind_of(transformers.AutoConfig.for_model(t)) for t in ("llama", "bert", "deberta-v2", "t5", "pegasus", "whisper", "trocr")}
        self.assertEqual(
            kinds,
            {"llama": "causal", "bert": "encoder", "deberta-v2": "encoder", "t5": "encdec", "pegasus": "encdec", "whisper": "encdec", "trocr": "causal"},
        )

    def test_positions_are_read_from_the_config_and_its_sub_configs(self):
        import transformers

        led = transformers.AutoConfig.for_model("led")
        self.assertEqual(fs._limit(led, ("max_encoder_position_embeddings",), 99999), 16384)
        self.assertEqual(fs._limit(led, ("max_decoder_position_embeddings",), 99999), 1024)
        # Dia: the text encoder's positions in encoder_config, the decoder's in its own.
        dia = transformers.AutoConfig.for_model("dia")
        self.assertEqual(fs._limit(dia.encoder_config, ("max_position_embeddings",), 99999), 1024)
        self.assertEqual(fs._limit(dia, ("max_position_embeddings",), 99999), 1024)
        self.assertEqual(fs._limit(led, ("no_such_key",), 7), 7)


@unittest.skipUnless(HAVE_TRANSFORMERS, "transformers is not importable")
class CacheBytes(unittest.TestCase):
    def test_a_sliding_layer_holds_its_window_while_a_token_is_decoded(self):
        import torch
        import transformers

        config = transformers.AutoConfig.for_model(
            "gemma3_text",
            hidden_size=64,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            vocab_size=128,
            sliding_window=6,
            layer_types=["sliding_attention", "full_attention"],
        )
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
        with torch.no_grad():
            out = model(input_ids=torch.randint(0, 128, (1, 20)), use_cache=True)
            cache = out.past_key_values
            per_token = 2 * 2 * 16 * 4  # K and V, 2 heads of 16, fp32
            # The full layer keeps 20 tokens, the sliding one 6 (5 kept + the new one).
            self.assertEqual(fs.cache_bytes(torch, cache, 20), per_token * (20 + 6))
            # A decode step holds exactly that: the 5 kept and the new token.
            layer = cache.layers[0]
            k, _ = layer.update(torch.zeros(1, 2, 1, 16), torch.zeros(1, 2, 1, 16))
            self.assertEqual(k.shape[-2], 6)

    def test_the_states_a_cache_keeps_beside_its_layers_are_counted(self):
        import torch
        import transformers

        config = transformers.AutoConfig.for_model(
            "minimax",
            hidden_size=64,
            intermediate_size=96,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            vocab_size=128,
            num_local_experts=2,
            num_experts_per_tok=1,
            layer_types=["linear_attention", "full_attention"],
            block_size=8,
        )
        model = transformers.AutoModelForCausalLM.from_config(config).eval()
        with torch.no_grad():
            out = model(input_ids=torch.randint(0, 128, (1, 10)), use_cache=True)
        cache = out.past_key_values
        # The full layer's K and V (2 heads of 16, 10 tokens, fp32) and the lightning
        # layer's state, 4 heads x 16 x 16 in fp32, which the cache keeps beside its layers.
        kv = 2 * 2 * 16 * 10 * 4
        self.assertEqual(fs.cache_bytes(torch, cache, 10), kv + 4 * 16 * 16 * 4)


if __name__ == "__main__":
    unittest.main()
