"""gpumem_count: a model's parameters, buffers and KV cache counted by its own code.

`gpumem-agent estimate` runs this file in the user's Python when a config.json names a
``model_type`` its own reader does not know (or when asked with ``--count-with
transformers``). The request (JSON on standard input) carries the config; transformers
builds the model from it on PyTorch's ``meta`` device, so no weight is read, downloaded
or allocated, and no code beyond the installed transformers runs unless the user passed
``--trust-remote-code``.

What comes back (one JSON document on standard output):

* every parameter, once (tied weights are one tensor), by the kind of module that holds
  it (embeddings, attention, mlp, norms, lm_head, other): matrices by shape, vectors by
  elements; every buffer by dtype (persistent or not: all are moved to the device with
  the model);
* the model's own cache after a forward of 1 and of 2 tokens (and, when a layer keeps a
  sliding window, of window + 2 tokens), read layer by layer from the cache object
  transformers returns (``DynamicCache`` and its layers: full, sliding-window,
  linear-attention and hybrid): each layer's elements that grow with the tokens, those
  that do not (a recurrent state), and where the growth stops (a sliding window); a
  cache that grows otherwise (DeepSeek-V4's compressed caches) measured instead at the
  lengths the request names (``measure_tokens``: the prompt, and the prompt with the
  generated tokens), one forward of each, as ``cache_measured``;
* what the config is (``kind``): a decoder; an encoder (BERT and kin, built bare as
  AutoModel builds it, with no cache); or an encoder-decoder (T5, BART, Whisper and
  kin, built whole by their generation class), whose decoder's self-attention cache is
  read as a decoder's, and whose cross-attention cache (``cross_cache``: elements per
  encoder position, over all layers) and encoder output (values per position) are
  read from forwards over two source lengths (an audio encoder: its own length).

Output: ``{"ok": COUNT}``, ``{"unavailable": TEXT}`` (a package is missing, or
transformers does not know the model_type) or ``{"error": TEXT}`` (one line).
This file never touches a GPU.
"""

import json
import sys
import time

MAX_REQUEST_CHARS = 32 << 20

#: The document's schema name (the agent checks it).
SCHEMA = "gpumem.count/v1"

#: Tokens of the forward that checks each cache layer's growth (past a compressed
#: cache's blocks).
CHECK_TOKENS = 300

#: Deepest nesting followed inside a cache layer (its tensors sit in attributes, dicts of
#: them, or lists).
MAX_CACHE_DEPTH = 4

DTYPES = {"bfloat16", "float16", "float32"}


class Irregular(Exception):
    """A cache that does not grow by the same elements each token, nor stop at a window."""


class Unavailable(Exception):
    """A package the count needs is missing, or transformers cannot build the family."""


def _import(name):
    try:
        return __import__(name)
    except ImportError as e:
        raise Unavailable(f"{name} is not importable by {sys.executable} ({e})") from e


def _config(transformers, request):
    if "config_text" in request:
        # The file's text: json reads the bare Infinity and NaN transformers writes.
        config_dict = json.loads(request["config_text"])
        if not isinstance(config_dict, dict):
            raise ValueError("config.json is not a JSON object")
    else:
        config_dict = dict(request["config"])
    trust = bool(request.get("trust_remote_code"))
    model_type = config_dict.get("model_type")
    if not model_type:
        raise ValueError("config.json has no model_type")
    # A quantised checkpoint's settings say how its weights are stored, not what the
    # model holds; the count is of the model's tensors (the agent applies the format).
    config_dict.pop("quantization_config", None)
    if config_dict.get("auto_map") and not trust:
        known = model_type in transformers.models.auto.configuration_auto.CONFIG_MAPPING
        if not known:
            raise Unavailable(
                f"model_type {model_type!r} needs its repository's own code (auto_map); "
                "pass --trust-remote-code to run it"
            )
    if trust and request.get("config_dir"):
        return transformers.AutoConfig.from_pretrained(
            request["config_dir"], trust_remote_code=True
        )
    config_dict.pop("model_type")
    try:
        return transformers.AutoConfig.for_model(model_type, **config_dict)
    except (ValueError, KeyError) as e:
        raise Unavailable(
            f"transformers {transformers.__version__} does not know model_type {model_type!r}"
        ) from e


def kind_of(transformers, config):
    """What a config describes: ``encdec`` (it says ``is_encoder_decoder`` and a
    sequence-to-sequence class, text or speech, builds it: T5, BART, Whisper and kin,
    built whole), ``encoder`` (a bare model AutoModel builds, whose family has no
    causal-LM class or one that asks for ``is_decoder`` where the config says it is not
    one: BertLMHeadModel and kin; served bare) or ``decoder``."""
    seq2seq = (transformers.AutoModelForSeq2SeqLM, transformers.AutoModelForSpeechSeq2Seq)
    if getattr(config, "is_encoder_decoder", False) and any(type(config) in a._model_mapping for a in seq2seq):
        return "encdec"
    if type(config) not in transformers.AutoModel._model_mapping:
        return "decoder"
    causal = transformers.AutoModelForCausalLM._model_mapping
    head = causal[type(config)] if type(config) in causal else None
    if head is None:
        masked = transformers.AutoModelForMaskedLM._model_mapping
        return "encoder" if type(config) in masked else "decoder"
    import inspect

    try:
        asks = "is_decoder" in inspect.getsource(head.__init__)
    except (OSError, TypeError):
        asks = False
    return "encoder" if asks and getattr(config, "is_decoder", None) is False else "decoder"


def build(torch, transformers, request):
    """The model on the meta device: an encoder-decoder whole (its generation class), an
    encoder bare (AutoModel), else with its towers where the config has them, else a
    causal LM where the family has one, else the bare model; which one is said in the
    answer."""
    config = _config(transformers, request)
    dtype = getattr(torch, request["dtype"])
    trust = bool(request.get("trust_remote_code"))
    last = None
    kind = kind_of(transformers, config)
    autos = ("AutoModelForCausalLM", "AutoModel")
    # A config with a vision or audio tower is the whole model a user loads: its towers
    # and projector are built with the language model, as the config reader counts them.
    if any(getattr(config, k, None) is not None for k in ("vision_config", "audio_config")):
        autos = ("AutoModelForImageTextToText",) + autos
    if kind == "encdec":
        autos = ("AutoModelForSeq2SeqLM", "AutoModelForSpeechSeq2Seq")
    elif kind == "encoder":
        autos = ("AutoModel",)
    for auto in autos:
        try:
            with torch.device("meta"):
                model = getattr(transformers, auto).from_config(
                    config, dtype=dtype, trust_remote_code=trust
                )
            return model, config, auto, kind
        except ValueError as e:
            # "Unrecognized configuration class … for this kind of AutoModel".
            last = e
    raise Unavailable(f"transformers builds no model from this config ({last})")


def _kind(module_name, module, output_embeddings):
    """The kind of module a parameter belongs to, from the module itself."""
    import torch

    if output_embeddings is not None and module is output_embeddings:
        return "lm_head"
    if isinstance(module, torch.nn.Embedding):
        return "embeddings"
    cls = type(module).__name__.lower()
    if "norm" in cls:
        return "norms"
    parts = module_name.lower().split(".")
    if any("attn" in p or "attention" in p or p in ("mixer", "linear_attn") for p in parts):
        return "attention"
    if any(p.isdigit() for p in parts):
        return "mlp"
    return "other"


def _embeddings(model, getter):
    """The model's input or output embeddings, None where it has none to give (Dia's
    decoder embeds codebooks: its DiaModel raises NotImplementedError for them)."""
    try:
        return getattr(model, getter)() if hasattr(model, getter) else None
    except NotImplementedError:
        return None


def count_tensors(model):
    """Every parameter once (shared ones are one tensor) and every buffer, by kind and
    dtype."""
    import torch

    output_embeddings = _embeddings(model, "get_output_embeddings")
    input_embeddings = _embeddings(model, "get_input_embeddings")
    seen = set()
    matrices = {}
    vectors = {}
    total = 0
    for mod_name, module in model.named_modules():
        for _, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            kind = _kind(mod_name, module, output_embeddings)
            n = p.numel()
            total += n
            # Matrices by shape apart from vectors (biases, norms' scales): a quantised
            # format stores each matrix with its scales and keeps vectors in 16 bits.
            if p.dim() >= 2:
                banks = n // (p.shape[-2] * p.shape[-1]) if p.shape[-2] * p.shape[-1] else 0
                # transformers' bitsandbytes quantizer converts nn.Linear and Conv1D
                # modules only (integrations/bitsandbytes.py replace_with_bnb_linear):
                # an expert bank held as a 3D parameter, a convolution's kernel, stay.
                outside = kind not in ("embeddings", "lm_head") and not (
                    type(module) is torch.nn.Linear or type(module).__name__ == "Conv1D"
                )
                row = matrices.setdefault((kind, p.shape[-2], p.shape[-1], outside), [0])
                row[0] += banks
            else:
                row = vectors.setdefault(kind, [0, 0])
                row[0] += 1
                row[1] += n
    buffers = {}
    for _, b in model.named_buffers(remove_duplicate=True):
        key = str(b.dtype).replace("torch.", "")
        row = buffers.setdefault(key, [0, 0, 0])
        row[0] += 1
        row[1] += b.numel()
        row[2] += b.numel() * b.element_size()
    tied = (
        output_embeddings is not None
        and input_embeddings is not None
        and getattr(output_embeddings, "weight", None) is not None
        and output_embeddings.weight is getattr(input_embeddings, "weight", None)
    )
    return {
        "parameters": total,
        "matrices": [
            dict({"kind": k, "banks": v[0], "rows": r, "cols": c},
                 **({"outside_linear": True} if o else {}))
            for (k, r, c, o), v in sorted(matrices.items())
        ],
        "vectors": [
            {"kind": k, "tensors": v[0], "elements": v[1]} for k, v in sorted(vectors.items())
        ],
        "buffers": [
            {"dtype": d, "tensors": v[0], "elements": v[1], "bytes": v[2]}
            for d, v in sorted(buffers.items())
        ],
        "tied_embeddings": bool(tied),
    }


def _answer_data_dependent(torch, notes, none_hit=False):
    """A dispatch mode for the forward on meta tensors: a value read back from a meta
    tensor (``.item()``, ``.tolist()``, a copy to the CPU) has none, so it is answered
    with zeros, a split whose sizes were such an answer (an MoE's tokens per expert)
    gives every row to its first part, and ``nonzero`` finds no element. Only the routing of tokens among
    experts depends on these answers; the cache's shapes do not. With ``none_hit`` (an
    encoder-decoder's encoder), ``any`` read back is False as well, as ``nonzero``
    finding no element says: LED's encoder asks ``is_index_global_attn.flatten().any()
    .item()`` (models/led/modeling_led.py, LEDEncoder.forward, transformers 5.23) and
    its self-attention then gathers the global positions ``nonzero`` found
    (LEDEncoderSelfAttention._get_global_attn_indices); answered True with none found,
    its windowed attention's shapes do not meet."""
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    scalar = aten._local_scalar_dense.default
    splits = (aten.split_with_sizes.default, aten.split_with_sizes_copy.default)
    nonzero = aten.nonzero.default
    anys = {aten.any.default, aten.any.dim, aten.any.dims} if none_hit else set()
    # The tensors `any` returned (by id, with the tensor kept so the id stays its own).
    answered_any = {}

    def meta(t):
        return isinstance(t, torch.Tensor) and t.device.type == "meta"

    class Answer(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            first = args[0] if args else None
            if meta(first):
                if func is scalar and id(first) in answered_any:
                    notes.add("torch.any on meta tensors answered False, as nonzero finds no element (masks only)")
                    return False
                if func is scalar:
                    notes.add("values read back from meta tensors answered as zeros (routing only)")
                    if first.dtype == torch.bool:
                        return True
                    return 0.0 if first.dtype.is_floating_point else 0
                device = kwargs.get("device")
                if func is aten._to_copy.default and device is not None and torch.device(device).type != "meta":
                    notes.add("values read back from meta tensors answered as zeros (routing only)")
                    return torch.zeros(first.shape, dtype=kwargs.get("dtype") or first.dtype, device=device)
                if func is nonzero:
                    # Which elements are non-zero has no answer on meta: none (no
                    # expert hit by a token, no global position in LED's encoder), as
                    # an index tensor of torch's shape. Only the routing and such masks
                    # depend on it; the caches' shapes do not.
                    notes.add("torch.nonzero on meta tensors answered as no element (routing and masks only)")
                    return torch.empty((0, first.dim()), dtype=torch.long, device="meta")
                if func in splits:
                    sizes = list(args[1])
                    dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
                    if sum(sizes) != first.shape[dim]:
                        notes.add("tokens routed to the first expert on meta (the cache does not depend on it)")
                        return func(first, [first.shape[dim]] + [0] * (len(sizes) - 1), dim)
                if func in anys:
                    out = func(*args, **kwargs)
                    answered_any[id(out)] = out
                    return out
            return func(*args, **kwargs)

    return Answer()


def _cache_layers(cache):
    """The per-layer objects of a cache transformers returned."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return list(layers)
    if isinstance(cache, (list, tuple)):
        return list(cache)
    raise ValueError(f"the model returned a cache of type {type(cache).__name__} with no layers")


def _layer_elements(torch, layer):
    """What a cache layer holds: [elements, bytes] of its key/value tensors and of its
    other states, walking its attributes, dicts and lists; 0-d tensors (counters) are left
    out."""
    kv = [0, 0]
    state = [0, 0]
    stack = [(None, layer, 0)]
    seen = set()
    while stack:
        name, x, depth = stack.pop()
        if isinstance(x, torch.Tensor):
            if x.dim() == 0 or id(x) in seen:
                continue
            seen.add(id(x))
            slot = kv if name in ("keys", "values", "key_cache", "value_cache") else state
            slot[0] += x.numel()
            slot[1] += x.numel() * x.element_size()
        elif depth < MAX_CACHE_DEPTH:
            if isinstance(x, dict):
                stack.extend((name, v, depth + 1) for v in x.values())
            elif isinstance(x, (list, tuple)):
                stack.extend((name, v, depth + 1) for v in x)
            elif hasattr(x, "__dict__") and not isinstance(x, type):
                stack.extend((k, v, depth + 1) for k, v in vars(x).items())
    return kv, state


def model_cache(out):
    """The cache a forward returned: ``past_key_values``, or ``cache_params`` where the
    model names it so (Mamba and its kin: FalconMamba, Mamba-2)."""
    cache = getattr(out, "past_key_values", None)
    if cache is None:
        cache = getattr(out, "cache_params", None)
    return cache


def _forward_cache(torch, model, tokens, notes):
    ids = torch.zeros((1, tokens), dtype=torch.long, device="meta")
    with torch.no_grad(), _answer_data_dependent(torch, notes):
        out = model(input_ids=ids, use_cache=True)
    cache = model_cache(out)
    if cache is None:
        return None, []
    layers = _cache_layers(cache)
    windows = [getattr(layer, "sliding_window", None) for layer in layers]
    return [_layer_elements(torch, layer) for layer in layers], windows


def _position_limit(config):
    """The positions the model has (``max_position_embeddings`` and kin), or None."""
    positions = [getattr(config, k, None) for k in ("max_position_embeddings", "n_positions", "max_target_positions")]
    return min((p for p in positions if isinstance(p, int) and p > 2), default=None)


#: Longest forward a measured cache is read from (meta tensors allocate nothing, but
#: the model's Python runs once per forward; its own positions bound it first).
MAX_MEASURED_TOKENS = 1 << 20


def _forward_batch(torch, model, tokens, batch, notes):
    """The cache's total [elements, bytes] of keys/values and of other tensors after one
    forward of `tokens` tokens in `batch` sequences."""
    ids = torch.zeros((batch, tokens), dtype=torch.long, device="meta")
    with torch.no_grad(), _answer_data_dependent(torch, notes):
        out = model(input_ids=ids, use_cache=True)
    cache = model_cache(out)
    if cache is None:
        raise Irregular(f"the forward of {tokens} tokens returned no cache")
    kv, other = [0, 0], [0, 0]
    for layer in _cache_layers(cache):
        k, st = _layer_elements(torch, layer)
        # A window layer keeps `sliding_window - 1` tokens between steps and holds
        # `sliding_window` while the next token is decoded (cache_utils.py,
        # DynamicSlidingWindowLayer.update, transformers 5.23; DeepSeek-V4's
        # DeepseekV4HCACache.update likewise: models/deepseek_v4/modeling_deepseek_v4.py):
        # counted at `sliding_window`, as a per-token window layer is.
        w = getattr(layer, "sliding_window", None)
        keys = getattr(layer, "keys", None)
        if isinstance(w, int) and w > 1 and isinstance(keys, torch.Tensor) and keys.dim() >= 2:
            held = keys.shape[-2]
            if held == w - 1 and k[0] % held == 0 and k[1] % held == 0:
                k = [x // held * w for x in k]
        kv = [a + b for a, b in zip(kv, k)]
        other = [a + b for a, b in zip(other, st)]
    return kv, other


def measure_cache(torch, model, config, notes, lengths, why):
    """A cache that does not grow by the same elements each token (`why`: what the
    per-token check found), read where the estimate needs it: one forward on meta of
    each of `lengths` tokens (the prompt; the prompt and the generated tokens), one
    sequence; the first length again in two sequences, whose cache must be twice one
    sequence's (then sequences scale it). Refused past the model's positions."""
    if getattr(config, "use_cache", True) is False:
        config.use_cache = True
    limit = _position_limit(config)
    rows = []
    for tokens in dict.fromkeys(lengths):
        if not (isinstance(tokens, int) and 0 < tokens <= MAX_MEASURED_TOKENS):
            raise Irregular(f"{why}; and {tokens!r} tokens is not a length the count measures (1 to {MAX_MEASURED_TOKENS})")
        if limit is not None and tokens > limit:
            raise Irregular(f"{why}; and {tokens} tokens are more than the model's {limit} positions: not measured")
        kv, other = _forward_batch(torch, model, tokens, 1, notes)
        rows.append({"tokens": tokens, "kv": kv, "other": other})
    kv2, other2 = _forward_batch(torch, model, lengths[0], 2, notes)
    first = rows[0]
    if kv2 != [2 * x for x in first["kv"]] or other2 != [2 * x for x in first["other"]]:
        raise Irregular(
            f"{why}; and the cache of two sequences of {lengths[0]} tokens is not twice one's "
            f"({kv2[0] + other2[0]} elements, not 2 × {first['kv'][0] + first['other'][0]})"
        )
    return {"why": why, "lengths": rows}


def count_cache(torch, model, config, notes, forward=None):
    """The cache per layer: elements per token (keys and values), elements that stay
    (states), and the tokens after which a layer stops growing (its window). `forward`
    (tokens → the layers' elements and windows) reads another cache than a causal
    forward's (an encoder-decoder's self-attention cache)."""
    if getattr(config, "use_cache", True) is False:
        config.use_cache = True
    if forward is None:

        def forward(tokens):
            return _forward_cache(torch, model, tokens, notes)

    one, windows = forward(1)
    if one is None:
        return None
    two, _ = forward(2)
    layers = []
    for (kv1, st1), (kv2, st2) in zip(one, two):
        # Each figure as [elements, bytes]: what one more token adds, and what is there
        # before the first (a state, or a fixed part).
        kv_grow = [b - a for a, b in zip(kv1, kv2)]
        st_grow = [b - a for a, b in zip(st1, st2)]
        layers.append(
            {
                "kv_per_token": kv_grow,
                "kv_fixed": [a - g for a, g in zip(kv1, kv_grow)],
                "state_per_token": st_grow,
                "state": [a - g for a, g in zip(st1, st_grow)],
                "window": None,
            }
        )
    widest = max((w for w in windows if isinstance(w, int) and w > 0), default=0)
    # Past the widest window (a capped layer shows where it stops) and past a few
    # hundred tokens (a cache that compresses its tokens in blocks, or grows otherwise
    # than one token at a time, shows it): each layer's growth from 1 and 2 tokens is
    # checked there.
    tokens = max(widest + 2, CHECK_TOKENS)
    # No more than the model has positions for (a window wider than them never fills).
    limit = _position_limit(config)
    tokens = min(tokens, limit if limit is not None else tokens)
    far, _ = forward(tokens)
    for row, (kvf, stf), w in zip(layers, far, windows):
        if stf[0] != row["state"][0] + row["state_per_token"][0] * tokens:
            raise Irregular(
                f"a cache layer's other tensors hold {stf[0]} elements after {tokens} tokens, "
                f"not the {row['state'][0]} + {row['state_per_token'][0]} a token its first tokens showed"
            )
        grown = kvf[0] - row["kv_fixed"][0]
        per = row["kv_per_token"][0]
        if grown == per * tokens:
            continue
        held = grown // per if per else 0
        # transformers' DynamicSlidingWindowLayer keeps `sliding_window - 1` tokens
        # between steps, and each step's update concatenates the new token to them
        # (cache_utils.py, DynamicSlidingWindowLayer.update, transformers 5.23):
        # `sliding_window` tokens are held while a token is decoded, as an engine's
        # window holds them.
        if isinstance(w, int) and per and grown == per * held and held in (w - 1, w):
            row["window"] = w
            continue
        raise Irregular(
            f"a cache layer holds {kvf[0]} key/value elements after {tokens} tokens, not the "
            f"{row['kv_fixed'][0]} + {per} a token its first tokens showed, nor a sliding window "
            "(a cache that compresses or selects its tokens): not extrapolated"
        )
    return layers


#: Source lengths an encoder-decoder's cross-attention cache is read at (its growth per
#: encoder position, and its part that does not grow, from the two).
SOURCE_TOKENS = (8, 16)

#: Seconds of audio an audio encoder's cross-attention cache is read at (its elements
#: per encoder position, from the two).
SOURCE_SECONDS = (1, 2)

#: The longest audio the probe turns into its encoder's input (the feature extractor
#: runs on that many samples of silence: about 5 s and a few hundred MB for 10 minutes
#: of Speech2Text's filter banks, so an hour stays within the probe's deadline).
MAX_AUDIO_SECONDS = 3600


class AudioInput:
    """How an audio encoder's input is made from seconds of audio: the family's own
    feature extractor (transformers' ``FEATURE_EXTRACTOR_MAPPING_NAMES``; its
    preprocessor_config.json when the request carries it, else the class's defaults)
    run on that many samples of silence at its sampling rate, as a pipeline runs it on
    a clip; the features' shape, on the meta device in the model's dtype, is the
    encoder's input. Whisper's kin, whose encoder takes 2 × ``max_source_positions``
    frames and nothing else, are read at that length."""

    def __init__(self, transformers, model, config, name, preprocessor):
        from transformers.models.auto.feature_extraction_auto import FEATURE_EXTRACTOR_MAPPING_NAMES

        self.name = name
        frames = getattr(config, "max_source_positions", None)
        mels = getattr(config, "num_mel_bins", None)
        self.fixed = None
        if name == "input_features" and isinstance(frames, int) and isinstance(mels, int):
            self.fixed = (1, mels, 2 * frames)
        cls_name = FEATURE_EXTRACTOR_MAPPING_NAMES.get(getattr(config, "model_type", ""))
        self.extractor = None
        if cls_name is not None and self.fixed is None:
            cls = getattr(transformers, cls_name, None)
            if cls is None:
                raise Irregular(f"transformers has no {cls_name} (the encoder's feature extractor)")
            fields = dict(preprocessor or {})
            fields.pop("feature_extractor_type", None)
            fields.pop("processor_class", None)
            # Without the repository's preprocessor_config.json, the features are as
            # many per frame as the encoder takes (Canary's FastConformer: its
            # encoder_config's 128 mel bins, where ParakeetFeatureExtractor's default is
            # 80); the frames a clip gives do not depend on it.
            encoder_config = getattr(config, "encoder_config", None)
            bins = getattr(encoder_config, "num_mel_bins", None) if encoder_config is not None else mels
            if name == "input_features" and not fields and isinstance(bins, int) and bins > 0:
                fields["feature_size"] = bins
            try:
                self.extractor = cls(**fields)
            except Exception as e:  # noqa: BLE001 - said as the reason
                raise Irregular(f"{cls_name} not made from preprocessor_config.json ({_one_line(e)})") from e
        if self.fixed is None and self.extractor is None:
            raise Irregular(f"the encoder reads {name} and transformers names no feature extractor for it")
        self.sampling_rate = getattr(self.extractor, "sampling_rate", None)
        if self.fixed is None and not (isinstance(self.sampling_rate, int) and self.sampling_rate > 0):
            raise Irregular(f"{type(self.extractor).__name__} has no sampling rate")
        self.dtype = model.dtype

    def describe(self):
        return type(self.extractor).__name__ if self.extractor is not None else None

    def shape(self, seconds):
        """The encoder's input shape for `seconds` of audio (Whisper's kin: their one)."""
        if self.fixed is not None:
            return self.fixed
        import numpy as np

        if not (0 < seconds <= MAX_AUDIO_SECONDS):
            raise ValueError(f"audio of {seconds} s: the count reads between 0 and {MAX_AUDIO_SECONDS} s")
        samples = int(round(seconds * self.sampling_rate))
        if samples < 1:
            raise ValueError(f"audio of {seconds} s is no sample at {self.sampling_rate} Hz")
        out = self.extractor(
            np.zeros(samples, dtype=np.float32), sampling_rate=self.sampling_rate, return_tensors="np"
        )
        if self.name not in out:
            raise Irregular(f"{self.describe()} gives no {self.name}")
        return tuple(out[self.name].shape)

    def tensor(self, torch, seconds):
        return torch.zeros(self.shape(seconds), dtype=self.dtype, device="meta")


def _decoder_ids(torch, config, tokens):
    """The decoder's input of `tokens` steps: token ids, or for a decoder of audio
    codebooks (Dia: ``decoder_config.num_channels`` codes a step, the decoder's input
    ``[batch, steps, channels]``: models/dia/modeling_dia.py, DiaModel.forward) one id
    per codebook a step."""
    channels = getattr(getattr(config, "decoder_config", None), "num_channels", None)
    if isinstance(channels, int) and channels > 1:
        return torch.zeros((1, tokens, channels), dtype=torch.long, device="meta")
    return torch.zeros((1, tokens), dtype=torch.long, device="meta")


def _source(torch, model, audio, source):
    """The encoder's input: `source` token ids, or (an audio encoder) `source` seconds of
    audio made into its features or samples."""
    name = getattr(model, "main_input_name", "input_ids")
    if name == "input_ids":
        return name, torch.zeros((1, source), dtype=torch.long, device="meta")
    if audio is None:
        raise Irregular(f"the encoder reads {name}, whose length the count does not know")
    return name, audio.tensor(torch, source)


def _encode(torch, model, name, source_input, notes):
    """The encoder once, as generate runs it (generation/utils.py,
    _prepare_encoder_decoder_kwargs_for_generation): without the cache switch (Switch
    Transformers' encoder stack refuses use_cache)."""
    with torch.no_grad(), _answer_data_dependent(torch, notes, none_hit=True):
        return model.get_encoder()(**{name: source_input})


def _encdec_forward(torch, model, config, source, tokens, notes, audio=None):
    """One forward of an encoder-decoder on meta tensors: ``source`` positions into the
    encoder (token ids; or, for an audio encoder, ``source`` seconds of audio made into
    its input by ``audio``), ``tokens`` into the decoder. Its ``EncoderDecoderCache``'s
    two halves, layer by layer, and the encoder's output shape."""
    name, source_input = _source(torch, model, audio, source)
    encoded = _encode(torch, model, name, source_input, notes)
    # Then the decoder over the encoder's output, as generate's steps run it.
    with torch.no_grad(), _answer_data_dependent(torch, notes):
        out = model(
            encoder_outputs=encoded,
            decoder_input_ids=_decoder_ids(torch, config, tokens),
            use_cache=True,
        )
    cache = getattr(out, "past_key_values", None)
    self_cache = getattr(cache, "self_attention_cache", None)
    cross_cache = getattr(cache, "cross_attention_cache", None)
    encoder = getattr(out, "encoder_last_hidden_state", None)
    if encoder is None:
        encoder = getattr(encoded, "last_hidden_state", None)
    if self_cache is None or cross_cache is None or encoder is None:
        raise Irregular(
            f"the forward returned no self- and cross-attention caches ({type(cache).__name__}) or no encoder output"
        )
    self_layers = _cache_layers(self_cache)
    windows = [getattr(layer, "sliding_window", None) for layer in self_layers]
    cross = [_layer_elements(torch, layer) for layer in _cache_layers(cross_cache)]
    return (
        [_layer_elements(torch, layer) for layer in self_layers],
        windows,
        cross,
        tuple(encoder.shape),
        name == "input_ids",
    )


def count_encdec(torch, model, config, notes, audio=None, audio_seconds=None):
    """An encoder-decoder's caches: the decoder's self-attention cache per layer (as a
    decoder's, from forwards of 1, 2 and more decoder tokens), and what does not grow
    with them: the cross-attention cache, written at the first step over the encoder's
    output (elements per encoder position and fixed, from two source lengths: tokens,
    or seconds of audio; Whisper's kin: their one length), and the encoder's output
    generate keeps (values per position). An audio encoder's positions for
    `audio_seconds` (the user's clip) are its own output's length for that input."""
    if getattr(config, "use_cache", True) is False:
        config.use_cache = True
    by_audio = audio is not None and getattr(model, "main_input_name", "input_ids") != "input_ids"
    lengths = SOURCE_SECONDS if by_audio else SOURCE_TOKENS
    source = lengths[0]

    def forward(tokens):
        self_layers, windows, _, _, _ = _encdec_forward(torch, model, config, source, tokens, notes, audio)
        return self_layers, windows

    layers = count_cache(torch, model, config, notes, forward)
    _, _, cross1, shape1, by_tokens = _encdec_forward(torch, model, config, lengths[0], 1, notes, audio)
    total1 = [sum(kv[i] + st[i] for kv, st in cross1) for i in (0, 1)]
    extra = {}
    if by_audio and audio.fixed is not None:
        # An audio encoder of one length: its cross cache and output at that length.
        length = shape1[1]
        if length <= 0 or total1[0] % length or total1[1] % length:
            raise Irregular(f"the cross-attention cache's {total1[0]} elements are not whole over {length} encoder positions")
        per = [total1[0] // length, total1[1] // length]
    else:
        _, _, cross2, shape2, _ = _encdec_forward(torch, model, config, lengths[1], 1, notes, audio)
        total2 = [sum(kv[i] + st[i] for kv, st in cross2) for i in (0, 1)]
        if by_tokens:
            for n, tokens in ((shape1[1], lengths[0]), (shape2[1], lengths[1])):
                if n != tokens:
                    raise Irregular(f"the encoder's output holds {n} positions for {tokens} tokens (it pools or pads its input)")
        span = shape2[1] - shape1[1]
        grown = [b - a for a, b in zip(total1, total2)]
        if span <= 0 or grown[0] % span or grown[1] % span:
            raise Irregular("the cross-attention cache does not grow by whole elements per encoder position")
        per = [g // span for g in grown]
        fixed = [a - p * shape1[1] for a, p in zip(total1, per)]
        if fixed[0] != 0:
            raise Irregular(f"the cross-attention cache holds {fixed[0]} elements that do not grow with the source")
        length = None
        if by_audio:
            extra["audio"] = {
                "input": getattr(model, "main_input_name", ""),
                "feature_extractor": audio.describe(),
                "sampling_rate": audio.sampling_rate,
                "seconds": audio_seconds,
                "input_shape": None,
                "positions": None,
            }
            if audio_seconds is not None:
                # The clip's own input through the encoder's own subsampling (its
                # convolutions, its prenet): the positions its output holds.
                name, source_input = _source(torch, model, audio, audio_seconds)
                encoded = _encode(torch, model, name, source_input, notes)
                length = int(encoded.last_hidden_state.shape[1])
                extra["audio"]["input_shape"] = list(source_input.shape)
                extra["audio"]["positions"] = length
    return layers, {
        "per_source_token": per,
        "hidden": shape1[-1],
        "source_length": length,
        "layers": len(cross1),
        **extra,
    }


def count(request):
    torch = _import("torch")
    transformers = _import("transformers")
    if request.get("dtype") not in DTYPES:
        raise ValueError(f"dtype {request.get('dtype')!r}: bfloat16, float16 or float32")
    seconds = request.get("audio_seconds")
    if seconds is not None and not (isinstance(seconds, (int, float)) and 0 < seconds <= MAX_AUDIO_SECONDS):
        raise ValueError(f"audio_seconds {seconds!r}: more than 0 and at most {MAX_AUDIO_SECONDS}")
    started = time.monotonic()
    notes = set()
    model, config, auto, kind = build(torch, transformers, request)
    model.eval()
    doc = {
        "schema": SCHEMA,
        "versions": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__},
        "model_class": type(model).__name__,
        "auto_class": auto,
        "model_type": getattr(config, "model_type", ""),
        "kind": kind,
    }
    doc.update(count_tensors(model))
    cache_error = None
    layers = None
    cross = None
    measured = None
    try:
        if kind == "encoder":
            # An encoder keeps no cache: it reads the whole input in one forward and
            # generates nothing (BertModel and kin use no cache unless is_decoder).
            layers = []
        elif kind == "encdec":
            name = getattr(model, "main_input_name", "input_ids")
            audio = None
            if name in ("input_features", "input_values"):
                audio = AudioInput(transformers, model, config, name, request.get("preprocessor"))
            layers, cross = count_encdec(torch, model, config, notes, audio, seconds)
        else:
            try:
                layers = count_cache(torch, model, config, notes)
            except Irregular as e:
                # Not per token: read at the lengths the estimate needs, when it
                # gave them.
                lengths = request.get("measure_tokens")
                if not lengths:
                    raise
                measured = measure_cache(torch, model, config, notes, list(lengths), str(e))
    except Exception as e:  # noqa: BLE001 - the count stands without the cache
        cache_error = _one_line(e)
        layers, cross, measured = None, None, None
    doc["cache_layers"] = layers
    doc["cross_cache"] = cross
    doc["cache_measured"] = measured
    doc["cache_error"] = cache_error
    doc["notes"] = sorted(notes)
    doc["wall_time_ms"] = int((time.monotonic() - started) * 1000)
    return doc


def _one_line(e):
    text = f"{type(e).__name__}: {e}".splitlines()
    return (text[0] if text else type(e).__name__)[:400]


def _watchdog(deadline_s, parent_pid):
    """The shared watchdog (`gpumem_watchdog.py`, written beside this probe)."""
    import gpumem_watchdog

    gpumem_watchdog.watchdog(deadline_s, parent_pid)


def main():
    try:
        request = json.loads(sys.stdin.read(MAX_REQUEST_CHARS))
        _watchdog(request.get("deadline_s"), request.get("parent_pid"))
        result = {"ok": count(request)}
    except Unavailable as e:
        result = {"unavailable": str(e)}
    except Exception as e:  # noqa: BLE001 - every failure is reported, none raised
        result = {"error": _one_line(e)}
    sys.stdout.write(json.dumps(result))
    sys.stdout.write("\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
