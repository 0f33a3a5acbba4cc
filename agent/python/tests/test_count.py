"""The count probe (`gpumem_count.py`): tiny models built on the meta device, their
counts checked against the same models built for real on the CPU (parameters summed,
the cache of a real forward read tensor by tensor).

Run: $GPUMEM_TOOLS/torch-venv/bin/python -m unittest discover -s agent/python/tests -v
"""

import importlib.util
import io
import json
import os
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import gpumem_count as gc  # noqa: E402

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None

TINY = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
}


def _request(config, dtype="float32"):
    return {"config": config, "dtype": dtype}


def _real(config, dtype="float32"):
    """The same model built on the CPU with random weights, and its cache after a real
    forward of `tokens` tokens: [(kv elements, other state elements)] per layer."""
    import torch
    import transformers

    d = dict(config)
    mt = d.pop("model_type")
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(mt, **d), dtype=getattr(torch, dtype)
    ).eval()

    def cache(tokens):
        with torch.no_grad():
            out = model(input_ids=torch.randint(0, 128, (1, tokens)), use_cache=True)
        return [gc._layer_elements(torch, layer) for layer in out.past_key_values.layers]

    return model, cache


@unittest.skipUnless(HAVE_TRANSFORMERS, "transformers is not importable")
class Counts(unittest.TestCase):
    def test_parameters_are_every_parameter_once(self):
        doc = gc.count(_request({"model_type": "llama", **TINY, "tie_word_embeddings": True}))
        model, _ = _real({"model_type": "llama", **TINY, "tie_word_embeddings": True})
        self.assertEqual(doc["parameters"], sum(p.numel() for p in model.parameters()))
        self.assertTrue(doc["tied_embeddings"])
        kinds = {m["kind"] for m in doc["matrices"]}
        self.assertEqual(kinds, {"embeddings", "attention", "mlp"}, "tied: no lm_head row")
        self.assertEqual(
            sum(m["banks"] * m["rows"] * m["cols"] for m in doc["matrices"])
            + sum(v["elements"] for v in doc["vectors"]),
            doc["parameters"],
        )
        # Norms: 2 per layer and the final one, 64 each.
        norms = [v for v in doc["vectors"] if v["kind"] == "norms"]
        self.assertEqual(norms[0]["elements"], (2 * 4 + 1) * 64)
        untied = gc.count(_request({"model_type": "llama", **TINY, "tie_word_embeddings": False}))
        self.assertFalse(untied["tied_embeddings"])
        self.assertEqual(untied["parameters"], doc["parameters"] + 128 * 64)

    def test_matrices_outside_a_linear_are_marked(self):
        # What transformers' bitsandbytes quantizer leaves alone: an MoE's expert banks
        # (3D parameters since transformers 5), not a dense model's linears.
        dense = gc.count(_request({"model_type": "llama", **TINY}))
        self.assertFalse(any(m.get("outside_linear") for m in dense["matrices"]))
        moe = {"model_type": "mixtral", **TINY, "num_local_experts": 4, "num_experts_per_tok": 2}
        doc = gc.count(_request(moe))
        outside = [m for m in doc["matrices"] if m.get("outside_linear")]
        import torch
        import transformers

        d = dict(moe)
        mt = d.pop("model_type")
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(
                transformers.AutoConfig.for_model(mt, **d)
            )
        want = sum(
            p.numel()
            for name, module in model.named_modules()
            if type(module) is not torch.nn.Linear
            and not isinstance(module, torch.nn.Embedding)
            for _, p in module.named_parameters(recurse=False)
            if p.dim() >= 2
        )
        self.assertGreater(want, 4 * 4 * 3 * 64 * 96 - 1, "the experts' banks at least")
        self.assertEqual(sum(m["banks"] * m["rows"] * m["cols"] for m in outside), want)

    def test_the_cache_is_the_models_own(self):
        doc = gc.count(_request({"model_type": "llama", **TINY}))
        _, cache = _real({"model_type": "llama", **TINY})
        real = cache(5)
        self.assertEqual(len(doc["cache_layers"]), 4)
        for row, (kv, state) in zip(doc["cache_layers"], real):
            # fp32: 4 B a value; 2 KV heads × 16 head dim × (K, V) a token.
            self.assertEqual(row["kv_per_token"], [2 * 2 * 16, 2 * 2 * 16 * 4])
            self.assertEqual(row["kv_per_token"][0] * 5, kv[0])
            self.assertEqual(row["kv_fixed"], [0, 0])
            self.assertEqual(row["state"], [0, 0])
            self.assertIsNone(row["window"])

    def test_a_sliding_window_is_read_past_it(self):
        config = {
            "model_type": "gemma3_text",
            **TINY,
            "head_dim": 16,
            "sliding_window": 6,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
        }
        doc = gc.count(_request(config))
        _, cache = _real(config)
        far = cache(20)
        for row, (kv, _) in zip(doc["cache_layers"], far):
            # Between steps a sliding layer keeps window - 1 tokens; a decode step
            # concatenates the new one to them: the window is what it holds then.
            held = row["window"] - 1 if row["window"] is not None else 20
            self.assertEqual(row["kv_per_token"][0] * held + row["kv_fixed"][0], kv[0], row)
        self.assertEqual([r["window"] for r in doc["cache_layers"]], [6, None] * 2)

    def test_a_compressed_cache_is_measured_at_the_lengths_asked(self):
        # DeepSeek-V4's layers keep a window beside entries compressed every 4 or 128
        # tokens and a buffer of the tokens not yet compressed: not per token.
        fixture = os.path.join(HERE, "..", "..", "tests", "configs", "deepseek_v4-small.json")
        with open(fixture) as f:
            config = json.load(f)
        plain = gc.count(_request(config, "bfloat16"))
        self.assertIsNone(plain["cache_layers"])
        self.assertIn("Irregular", plain["cache_error"])
        doc = gc.count({**_request(config, "bfloat16"), "measure_tokens": [300, 310]})
        self.assertIsNone(doc["cache_error"])
        self.assertIsNone(doc["cache_layers"])
        import torch

        model, _ = _real(config, "bfloat16")
        for row in doc["cache_measured"]["lengths"]:
            tokens = row["tokens"]
            with torch.no_grad():
                out = model(input_ids=torch.randint(0, 128, (1, tokens)), use_cache=True)
            kv, other = 0, 0
            for layer in out.past_key_values.layers:
                k, st = gc._layer_elements(torch, layer)
                # A window layer holds `sliding_window` tokens while the next one is
                # decoded: one more than it keeps between steps.
                held = layer.keys.shape[-2]
                self.assertEqual(held, layer.sliding_window - 1)
                kv += k[1] // held * layer.sliding_window
                other += st[1]
            self.assertEqual(row["kv"][1], kv, tokens)
            self.assertEqual(row["other"][1], other, tokens)
        self.assertEqual([r["tokens"] for r in doc["cache_measured"]["lengths"]], [300, 310])
        # Past the model's positions: refused, with the reason.
        past = gc.count({**_request(config, "bfloat16"), "measure_tokens": [5000, 5000]})
        self.assertIsNone(past["cache_measured"])
        self.assertIn("more than the model's 4096 positions", past["cache_error"])

    def test_a_cache_per_token_is_not_measured(self):
        doc = gc.count({**_request({"model_type": "llama", **TINY}), "measure_tokens": [300, 310]})
        self.assertIsNone(doc["cache_measured"])
        self.assertEqual(len(doc["cache_layers"]), 4)

    def test_a_linear_attention_layer_keeps_a_state(self):
        config = {
            "model_type": "qwen3_next",
            **TINY,
            "head_dim": 16,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 32,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        }
        # bf16: the experts' grouped matmul takes no other type.
        doc = gc.count(_request(config, dtype="bfloat16"))
        self.assertIsNone(doc["cache_error"])
        rows = doc["cache_layers"]
        self.assertEqual([r["kv_per_token"][0] > 0 for r in rows], [False, False, False, True])
        self.assertEqual([r["state"][0] > 0 for r in rows], [True, True, True, False])
        _, cache = _real(config, dtype="bfloat16")
        real = cache(3)
        for row, (kv, state) in zip(rows, real):
            self.assertEqual(row["state"], state)
            self.assertEqual(row["kv_per_token"][0] * 3, kv[0])

    def test_a_cache_named_cache_params_is_read(self):
        # Mamba's forward returns its cache as `cache_params`, not `past_key_values`.
        config = {
            "model_type": "falcon_mamba",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "state_size": 8,
            "expand": 2,
            "conv_kernel": 4,
            "vocab_size": 128,
        }
        doc = gc.count(_request(config))
        self.assertIsNone(doc["cache_error"])
        rows = doc["cache_layers"]
        self.assertEqual(len(rows), 2)
        import torch
        import transformers

        d = dict(config)
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(d.pop("model_type"), **d)
        ).eval()
        with torch.no_grad():
            out = model(input_ids=torch.randint(0, 128, (1, 3)), use_cache=True)
        real = [gc._layer_elements(torch, layer) for layer in gc._cache_layers(out.cache_params)]
        for row, (kv, state) in zip(rows, real):
            self.assertEqual(row["kv_per_token"], [0, 0])
            self.assertEqual(row["state"], state)
            # The conv state (128 channels × kernel 4) and the SSM state (128 × 8), fp32.
            self.assertEqual(row["state"][0], 128 * 4 + 128 * 8)

    def test_an_encoder_is_built_bare_with_no_cache(self):
        import torch
        import transformers

        tiny = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128}
        # ELECTRA has a causal-LM head that asks for is_decoder; DeBERTa-v2 none: both
        # are encoders, counted as AutoModel builds them.
        for mt in ("electra", "deberta-v2"):
            doc = gc.count(_request({"model_type": mt, **tiny}))
            self.assertEqual((doc["kind"], doc["auto_class"], doc["cache_layers"]), ("encoder", "AutoModel", []), mt)
            real = transformers.AutoModel.from_config(transformers.AutoConfig.for_model(mt, **tiny))
            self.assertEqual(doc["parameters"], sum(p.numel() for p in real.parameters()), mt)
            with torch.no_grad():
                out = real(input_ids=torch.randint(0, 128, (1, 5)), use_cache=True)
            self.assertIsNone(getattr(out, "past_key_values", None), mt)
        # A decoder whose head sets is_decoder itself (TrOCR, which AutoModel does not
        # build) stays a decoder.
        trocr = transformers.AutoConfig.for_model("trocr", d_model=64, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=96, vocab_size=128)
        self.assertEqual(gc.kind_of(transformers, trocr), "decoder")

    def test_an_encoder_decoders_caches_are_its_own(self):
        import torch
        import transformers

        tiny = {"d_model": 64, "d_kv": 8, "d_ff": 96, "num_layers": 3, "num_decoder_layers": 2, "num_heads": 4, "vocab_size": 128}
        doc = gc.count(_request({"model_type": "t5", **tiny}))
        self.assertEqual((doc["kind"], doc["auto_class"], doc["cache_error"]), ("encdec", "AutoModelForSeq2SeqLM", None))
        real = transformers.AutoModelForSeq2SeqLM.from_config(transformers.AutoConfig.for_model("t5", **tiny)).eval()
        self.assertEqual(doc["parameters"], sum(p.numel() for p in {id(p): p for p in real.parameters()}.values()))
        with torch.no_grad():
            out = real(
                input_ids=torch.randint(0, 128, (1, 11)),
                decoder_input_ids=torch.randint(0, 128, (1, 7)),
                use_cache=True,
            )
        cache = out.past_key_values
        self_layers = [gc._layer_elements(torch, l) for l in gc._cache_layers(cache.self_attention_cache)]
        cross = [gc._layer_elements(torch, l) for l in gc._cache_layers(cache.cross_attention_cache)]
        # The decoder's 2 layers: 7 tokens of K and V; the cross cache over 11 positions.
        self.assertEqual(len(doc["cache_layers"]), 2)
        for row, (kv, _) in zip(doc["cache_layers"], self_layers):
            self.assertEqual(row["kv_per_token"][0] * 7, kv[0])
        cross_elements = sum(kv[0] + st[0] for kv, st in cross)
        got = doc["cross_cache"]
        self.assertEqual(got["per_source_token"][0] * 11, cross_elements)
        self.assertEqual(got["per_source_token"][0], 2 * 2 * 4 * 8)
        self.assertEqual((got["hidden"], got["layers"], got["source_length"]), (64, 2, None))
        self.assertEqual(out.encoder_last_hidden_state.shape[-1], got["hidden"])

    def test_an_audio_encoders_length_is_its_own(self):
        tiny = {
            "d_model": 64,
            "encoder_layers": 1,
            "decoder_layers": 2,
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "encoder_ffn_dim": 96,
            "decoder_ffn_dim": 96,
            "vocab_size": 128,
            "num_mel_bins": 16,
            "max_source_positions": 30,
            "max_target_positions": 40,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "decoder_start_token_id": 1,
        }
        doc = gc.count(_request({"model_type": "whisper", **tiny}))
        self.assertEqual(doc["cache_error"], None)
        # Whisper's encoder always reads 2 × 30 feature frames and gives 30 positions.
        self.assertEqual(doc["cross_cache"]["source_length"], 30)
        self.assertEqual(doc["cross_cache"]["per_source_token"][0], 2 * 2 * 64)

    def _real_encdec(self, model_type, tiny, auto, source, decoder_ids):
        """The model built for real on the CPU (random weights), run as generate runs it
        (the encoder once, then the decoder over its output with the cache on): the
        parameters, the encoder's output shape, the self-attention cache's and the
        cross-attention cache's elements, every tensor of them."""
        import torch
        import transformers

        cfg = transformers.AutoConfig.for_model(model_type, **tiny)
        cfg._attn_implementation = "eager"
        real = getattr(transformers, auto).from_config(cfg).eval()
        name = real.main_input_name
        with torch.no_grad():
            encoded = real.get_encoder()(**{name: source})
            out = real(encoder_outputs=encoded, decoder_input_ids=decoder_ids, use_cache=True)
        cache = out.past_key_values

        def elements(c):
            return sum(kv[0] + st[0] for kv, st in (gc._layer_elements(torch, l) for l in gc._cache_layers(c)))

        params = sum(p.numel() for p in {id(p): p for p in real.parameters()}.values())
        return params, tuple(encoded.last_hidden_state.shape), elements(cache.self_attention_cache), elements(cache.cross_attention_cache)

    def test_an_audio_encoder_of_any_length_is_read_at_the_clip_given(self):
        import numpy as np
        import torch
        import transformers

        # Speech2Text reads filter banks (its extractor's 80 per 10 ms frame), which its
        # two stride-2 convolutions subsample; Moonshine reads raw samples through its
        # strided conv stem.
        cases = {
            "speech_to_text": (
                "Speech2TextFeatureExtractor",
                {"d_model": 64, "encoder_layers": 1, "decoder_layers": 2, "encoder_attention_heads": 4,
                 "decoder_attention_heads": 4, "encoder_ffn_dim": 96, "decoder_ffn_dim": 96, "vocab_size": 128,
                 "conv_channels": 32, "max_source_positions": 400, "max_target_positions": 40},
            ),
            "moonshine": (
                "Wav2Vec2FeatureExtractor",
                {"hidden_size": 64, "intermediate_size": 96, "encoder_num_hidden_layers": 1, "decoder_num_hidden_layers": 2,
                 "encoder_num_attention_heads": 4, "decoder_num_attention_heads": 4, "vocab_size": 128,
                 "max_position_embeddings": 64},
            ),
        }
        seconds = 3.7
        for mt, (extractor, tiny) in cases.items():
            doc = gc.count({**_request({"model_type": mt, **tiny}), "audio_seconds": seconds})
            self.assertEqual(doc["cache_error"], None, mt)
            cross = doc["cross_cache"]
            fe = getattr(transformers, extractor)()
            clip = np.random.default_rng(0).standard_normal(int(seconds * fe.sampling_rate)).astype(np.float32)
            name = "input_features" if mt == "speech_to_text" else "input_values"
            source = torch.from_numpy(fe(clip, sampling_rate=fe.sampling_rate, return_tensors="np")[name])
            params, shape, self_elements, cross_elements = self._real_encdec(
                mt, tiny, "AutoModelForSpeechSeq2Seq", source, torch.randint(0, 128, (1, 7))
            )
            self.assertEqual(doc["parameters"], params, mt)
            self.assertEqual(cross["audio"]["input_shape"], list(source.shape), mt)
            self.assertEqual(cross["source_length"], shape[1], mt)
            self.assertEqual(cross["per_source_token"][0] * shape[1], cross_elements, mt)
            self.assertEqual(sum(r["kv_per_token"][0] for r in doc["cache_layers"]) * 7, self_elements, mt)
            self.assertEqual(cross["hidden"], shape[-1], mt)
        # Speech2Text: 3.7 s give 368 frames of 25 ms every 10 ms, two stride-2
        # convolutions 92 positions.
        self.assertEqual(gc.count({**_request({"model_type": "speech_to_text", **cases["speech_to_text"][1]}), "audio_seconds": seconds})["cross_cache"]["source_length"], 92)
        # Without a clip the cache is per position, its length the user's.
        doc = gc.count(_request({"model_type": "moonshine", **cases["moonshine"][1]}))
        self.assertEqual((doc["cross_cache"]["source_length"], doc["cross_cache"]["audio"]["sampling_rate"]), (None, 16000))
        with self.assertRaises(ValueError):
            gc.count({**_request({"model_type": "moonshine", **cases["moonshine"][1]}), "audio_seconds": gc.MAX_AUDIO_SECONDS + 1})

    def test_led_and_dia_caches_are_their_own(self):
        import torch

        # LED's encoder pads to its attention window and gathers its global positions
        # (none: `any` and `nonzero` agree on meta); Dia's decoder reads a code per
        # codebook a step.
        led = {"d_model": 64, "encoder_layers": 1, "decoder_layers": 2, "encoder_attention_heads": 4,
               "decoder_attention_heads": 4, "encoder_ffn_dim": 96, "decoder_ffn_dim": 96, "vocab_size": 128,
               "attention_window": 16, "max_encoder_position_embeddings": 256, "max_decoder_position_embeddings": 64}
        dia = {"encoder_config": {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 1, "num_attention_heads": 4,
                                  "num_key_value_heads": 4, "head_dim": 16, "vocab_size": 256},
               "decoder_config": {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
                                  "num_key_value_heads": 2, "head_dim": 16, "cross_num_attention_heads": 4, "cross_num_key_value_heads": 4, "cross_head_dim": 16,
                                  "cross_hidden_size": 64, "vocab_size": 64, "num_channels": 3,
                                  "pad_token_id": 61, "eos_token_id": 62, "bos_token_id": 63},
               "delay_pattern": [0, 1, 2]}
        for mt, tiny, auto, dec in (
            ("led", led, "AutoModelForSeq2SeqLM", torch.randint(0, 128, (1, 7))),
            ("dia", dia, "AutoModelForSpeechSeq2Seq", torch.randint(0, 64, (1, 7, 3))),
        ):
            doc = gc.count(_request({"model_type": mt, **tiny}))
            self.assertEqual((doc["kind"], doc["cache_error"]), ("encdec", None), mt)
            params, shape, self_elements, cross_elements = self._real_encdec(mt, tiny, auto, torch.randint(0, 128, (1, 37)), dec)
            self.assertEqual(doc["parameters"], params, mt)
            self.assertEqual(shape[1], 37, mt)
            self.assertEqual(doc["cross_cache"]["per_source_token"][0] * 37, cross_elements, mt)
            self.assertEqual(sum(r["kv_per_token"][0] for r in doc["cache_layers"]) * 7, self_elements, mt)

    def test_any_on_meta_is_false_only_where_nonzero_finds_none(self):
        import torch

        x = torch.zeros((3, 5), device="meta") > 0
        with gc._answer_data_dependent(torch, set(), none_hit=True):
            self.assertFalse(bool(x.any().item()))
            self.assertFalse(bool(x.flatten().any()))
        with gc._answer_data_dependent(torch, set()):
            self.assertTrue(bool(x.any().item()))

    def test_nonzero_on_meta_finds_no_element(self):
        import torch

        notes = set()
        x = torch.zeros((3, 5), device="meta")
        with gc._answer_data_dependent(torch, notes):
            got = torch.nonzero(x)
            hits = (x > 0).nonzero()
        self.assertEqual((tuple(got.shape), tuple(hits.shape)), ((0, 2), (0, 2)))
        self.assertEqual(got.dtype, torch.long)
        self.assertTrue(any("nonzero" in n for n in notes), notes)

    def test_an_unknown_model_type_is_unavailable_and_failures_are_one_line(self):
        def answer(request):
            out = io.StringIO()
            with mock.patch.object(sys, "stdin", io.StringIO(json.dumps(request))), mock.patch.object(
                sys, "stdout", out
            ):
                gc.main()
            return json.loads(out.getvalue())

        got = answer(_request({"model_type": "no_such_family", **TINY}))
        self.assertIn("does not know model_type 'no_such_family'", got["unavailable"])
        got = answer(_request({"model_type": "acme", "auto_map": {"AutoConfig": "x.Y"}, **TINY}))
        self.assertIn("--trust-remote-code", got["unavailable"])
        got = answer(_request({"model_type": "llama", **TINY}, dtype="int8"))
        self.assertIn("error", got)
        self.assertNotIn("\n", got["error"])
        got = answer(_request({**TINY}))
        self.assertEqual(got, {"error": "ValueError: config.json has no model_type"})


if __name__ == "__main__":
    unittest.main()
