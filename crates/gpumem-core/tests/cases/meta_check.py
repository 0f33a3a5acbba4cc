#!/usr/bin/env python3
"""Second opinion from transformers: every real case's config.json built as a model on
the meta device (no memory, no weights), its parameters and persistent buffers counted
tensor by tensor and compared with the case's parameter count (the oracle's and the
estimator's, which the Rust test holds equal).

With --forward, traces the encoders' forward instead and compares its peak with the
cases' activation lines.

With --encdec, runs each encoder-decoder case's model on the meta device (a forward
with use_cache=True over the case's batch, encoder length and decoder tokens) and
compares the bytes of the EncoderDecoderCache's tensors and of the encoder's last
hidden state with the case's cache lines.

With --beams, builds what bart-base's generate(num_beams=4) keeps (the expanded
encoder output and the cache of a forward over sequences x beams rows) and compares
it with the estimator's beam-search lines.

With --rope, adds `rope_buffer_bytes` and `buffer_bytes` to every transformers/*.json
file from the model its config builds.

With --bnb, adds `bnb_quantised_params` to every MoE transformers/*.json file: the
parameters transformers' bitsandbytes quantizer stores in 4 bits (the weights of the
`nn.Linear` modules it converts; an MoE's routed experts, 3D parameters, are not).

With --gptq-awq, adds `gptq_quantised_params` and `awq_quantised_params` to every MoE
transformers/*.json file: the weights of the modules a pre-quantised GPTQ checkpoint's
loader replaces (optimum's `GPTQQuantizer.convert_model`: `get_layers` under the block
prefix, exact `nn.Linear`, `Conv1D`, `nn.Conv2d`) and an AWQ one's
(`replace_with_awq_linear`: every `nn.Linear`, subclasses included, less the default
skips). It also passes the keys such a checkpoint stores for one routed expert
(`experts.0.gate_proj.qweight`, `.qzeros`, `.scales`, `.g_idx`) through transformers'
own key conversion (`get_model_conversion_mapping`, `rename_source_key`) and exits 1
unless none of them reaches a parameter while the same expert's `.weight` does (the
3D experts then load nothing and are initialised in the model's dtype). It needs
optimum on PYTHONPATH (`pip install --target DIR --no-deps optimum`).

With --defaults TYPE…, writes transformers/TYPE.json instead: the config class's
defaults and the count of the model built from them, which the Rust test
`transformers_defaults` reads (no transformers needed there).

With --variant NAME TYPE OVERRIDES [--no-cache], writes transformers/NAME.json alike from the
defaults with OVERRIDES (a JSON object of config keys) over them — a published
model's layout on the class's defaults — and what the model's own cache holds after a
bf16 forward of one sequence on the meta device (`cache`: the attention layers' keys
and values, the state layers' conv and recurrent states), which the Rust test
`transformers_caches` compares with the KV and state lines.

Each real case's `buffer_bytes` (the buffers its weights hold, never in the
checkpoint: rotary frequency tables, CTRL's position table, GPT-1's masks) is compared
with the non-persistent buffers transformers builds for it in bf16, less those the
estimate does not count, each named (`UNCOUNTED`). The defaults and variant files
carry `rope_buffer_bytes` (the language model's rotary frequency buffers) and
`buffer_bytes` (every buffer the estimate counts, as for the real cases), which the
Rust test `transformers_defaults` compares with the estimate's.

With --compressed-tensors, saves a two-layer Llama as compressed-tensors checkpoints
(fp8-channel as FP8_DYNAMIC writes it, w4a16-g128 as W4A16 packs it), loads each with
transformers on the CPU (default `dequantize=False`, then `dequantize=True`) and
compares every quantised linear's parameter and buffer bytes after the load with the
stored layout (common.tensor_bytes) and after one forward with the decompressed one
(common.ct_decompressed_bytes). It also tracks every CPU storage through that first
forward up to a pre-hook registered after compressed-tensors' decompression hook: the
peak less what is live then is the decompression's moment, the last module's
(common.ct_decompress_excess); and runs one module of each format (fp8-channel,
fp8-block, w4a16-g128, nvfp4) through compressed-tensors' decompress_module, comparing
what it holds at its peak beside the stored tensors with the derivation and checking
that its compressed values are freed when it returns. It needs the compressed-tensors package on PYTHONPATH
(`pip install --target DIR --no-deps compressed-tensors loguru`), which the torch venv
does not carry.

Run with the torch venv (scripts/install-tools.sh): it needs torch and transformers,
and prints one row per case: the case's count, transformers' count, and the result —
`same`, a difference named by the tensors behind it, or why transformers cannot
build the model (a model_type it does not know). Exits 1 on an unexplained difference.
"""
import json, pathlib, re, sys, warnings

import torch
import transformers
from transformers import AutoConfig

HERE = pathlib.Path(__file__).parent
warnings.filterwarnings("ignore")

# Counted by the case but not by transformers' model class, or the other way round,
# with the reason (a difference of exactly this size is explained).
def explained(name, case, cfg):
    c = case["config"].get("text_config", case["config"])
    out = {}
    # transformers' DeepSeek-style classes build no MTP layer; the checkpoints store it.
    if c.get("num_nextn_predict_layers"):
        out["MTP layers (stored in the checkpoint, not built by transformers)"] = None
    if case.get("confidence", "exact") != "exact":
        out["the vision tower (not counted: confidence " + case["confidence"] + ")"] = None
    return out

# Encoders are counted as AutoModel builds them (the base model, no task head);
# ModernVBERT's is ModernVBertModel, its SigLIP tower and connector beside ModernBERT.
ENCODERS = {"bert", "roberta", "xlm-roberta", "modernbert", "modernvbert"}

# Model classes no auto class maps (transformers 5.23).
CLASSES = {"qwen2_audio": "Qwen2AudioForConditionalGeneration"}

def build(cfg, dtype=None):
    """The model on the meta device; with `dtype`, built in it as from_pretrained(dtype=...)
    builds it (from_config otherwise follows the config's own `dtype`)."""
    kw = {"dtype": dtype} if dtype is not None else {}
    with torch.device("meta"):
        if cfg.model_type in ENCODERS:
            return transformers.AutoModel.from_config(cfg, **kw)
        if cfg.model_type == "whisper":
            return transformers.WhisperForConditionalGeneration(cfg)
        if getattr(cfg, "is_encoder_decoder", False):
            return transformers.AutoModelForSeq2SeqLM.from_config(cfg, **kw)
        if cfg.model_type in CLASSES:
            return getattr(transformers, CLASSES[cfg.model_type])(cfg)
        autos = [transformers.AutoModelForCausalLM, transformers.AutoModelForImageTextToText]
        # A config with a tower is built whole (Llama 4's causal-LM class is its text model).
        if getattr(cfg, "vision_config", None) is not None:
            autos.reverse()
        for auto in autos:
            try:
                return auto.from_config(cfg, trust_remote_code=False, **kw)
            except (ValueError, KeyError):
                continue
    raise ValueError("no causal-LM or image-text class for " + cfg.model_type)

def count(model):
    keys = set(model.state_dict().keys())
    seen, total, per = set(), 0, {}
    for n, t in list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if n in keys]:
        if id(t) in seen:
            continue
        seen.add(id(t)); total += t.numel()
    return total

# The rotary embeddings' frequency buffers of the language model (transformers 5.23:
# `inv_freq` and `original_inv_freq`, or `{layer_type}_inv_freq` and its original, fp32,
# non-persistent): those the estimate's buffers line counts. A tower's own (a vision
# encoder's 2-D rotary table) is the tower's, not counted there.
TOWER = re.compile(r"(^|\.)(vision|visual|audio|image|speech)")
# The projector from a tower into the language model (Llava-style, Llama 4).
PROJECTOR = re.compile(r"(^|\.)(multi_modal_projector|mm_projector)\.")

def rope_bytes(model):
    return sum(b.numel() * b.element_size() for n, b in model.named_buffers()
               if n.endswith("inv_freq") and not TOWER.search(n))

# Non-persistent buffers transformers builds that the estimate does not count, by
# name (and dtype where the name does not tell), with why (what is left must be the
# case's buffer_bytes). A counted tower's rotary tables (Qwen2.5-VL's, Qwen3-VL's,
# Pixtral's, Llama 4's) are counted; its int64 position ids are not.
UNCOUNTED = [
    (re.compile(r"(^|\.)embeddings\.(position_ids|token_type_ids)$"), None,
     "an encoder's int64 position and token-type ids"),
    (re.compile(r"(^|\.)(vision|visual|image)\w*\..*position_ids$"), None,
     "a vision tower's int64 position ids"),
    (re.compile(r"audio_tower\.(rel_pos_enc\.inv_timescales|layers\.\d+\.self_attn\.softcap)$"), None,
     "Gemma 4's audio tower's timescales and soft-caps"),
    # MiniCPM3ScaledWordEmbedding: torch.tensor(config.scale_emb), int64 when the
    # config's scale is an integer (MiniCPM3Config's default 1, MiniCPM3-4B's 12).
    (re.compile(r"embed_tokens\.embed_scale$"), torch.int64, "MiniCPM3's int64 embedding scale"),
    # RecurrentGemmaModel: torch.tensor(hidden ** 0.5, dtype=torch.bfloat16), bf16
    # whatever the model's dtype.
    (re.compile(r"^model\.normalizer$"), None, "RecurrentGemma's bf16 normalizer"),
    (re.compile(r"mixer\.(dt|b|c)_layernorm\.weight$"), None, "Falcon-Mamba's weightless norms' constant scales"),
]

def uncounted(name, buf):
    """Why the estimate does not count this non-persistent buffer; None: it does."""
    return next((w for r, dt, w in UNCOUNTED if r.search(name) and (dt is None or buf.dtype == dt)), None)

def build_in(cfg, dtype):
    """The model built as from_pretrained(dtype=...) builds it: under that default
    dtype (a buffer made without a dtype is in it; the rotary tables are made fp32)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return build(cfg, dtype)
    finally:
        torch.set_default_dtype(before)

def counted_buffers(cfg):
    """(the non-persistent buffers transformers builds for `cfg` in bf16 less the
    uncounted ones, the uncounted ones named)."""
    model = build_in(cfg, torch.bfloat16)
    keys = set(model.state_dict().keys())
    got, left = 0, {}
    for n, b in model.named_buffers():
        if n in keys:
            continue
        why = uncounted(n, b)
        nbytes = b.numel() * b.element_size()
        if why:
            left[why] = left.get(why, 0) + nbytes
        else:
            got += nbytes
    return got, left

def buffers_check(case, cfg):
    """(the case's buffer_bytes, the non-persistent buffers transformers builds in
    bf16 less the uncounted ones, the uncounted ones named)."""
    return (case.get("buffer_bytes", 0),) + counted_buffers(cfg)

def main():
    bad = 0
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print("| case | case parameters | transformers (meta) | result |")
    for path in sorted(HERE.glob("real-*.json")):
        case = json.loads(path.read_text())
        if "config" not in case or "@" in case["name"]:
            continue
        name, want = case["name"], case["expect"]["parameters"]
        raw = dict(case["config"])
        try:
            cfg = AutoConfig.for_model(**raw) if "model_type" in raw else None
            model = build(cfg)
        except Exception as e:  # noqa: BLE001 - the reason is the answer here
            print(f"| {name} | {want} | — | not built: {type(e).__name__}: {str(e)[:80]} |")
            continue
        got = count(model)
        if got == want:
            result = "same"
        else:
            why = explained(name, case, cfg)
            result = f"differs by {want - got:+}" + (f" ({'; '.join(why)})" if why else " (unexplained)")
            bad += not why
        print(f"| {name} | {want} | {got} | {result} |")
        bwant, bgot, left = buffers_check(case, cfg)
        if bwant != bgot or left:
            note = "; ".join(f"{w}: {v} B not counted" for w, v in left.items())
            same = "same" if bwant == bgot else f"differs by {bwant - bgot:+} (unexplained)"
            bad += bwant != bgot
            print(f"| {name} | buffers {bwant} B | {bgot} B | {same}" + (f" ({note})" if note else "") + " |")
    return 1 if bad else 0

def finite(x):
    """Python's json writes inf and nan bare (Mamba-2's time_step_limit), which a
    strict JSON reader refuses: written as the strings the config reader reads them as."""
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return {x != x: "NaN", x > 0: "Infinity"}.get(True, "-Infinity")
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x

def cache_bytes(model, tokens, extra, cross=()):
    """The bytes the model's own cache holds after one bf16 forward of `tokens` tokens
    of one sequence (use_cache=True, eager attention), on meta: keys and values of the
    attention layers (those of the layers in `cross`, which attend to an image's
    states, apart), conv and recurrent states of the others (transformers' cache
    layers, `cache_utils.py`), the conv states' width in tokens, and their values
    over the kernel's width − 1 (`conv_window_values`: what the next token's
    convolution reads, and what vLLM keeps)."""
    model = model.to(torch.bfloat16).eval()
    rwkv = extra.pop("__rwkv__", False)
    with torch.no_grad():
        out = model(input_ids=torch.zeros(1, tokens, dtype=torch.long, device="meta"),
                    use_cache=True, **extra)
    kv = cross_kv = conv = rec = conv_n = rec_n = window_n = 0
    columns, rec_dtypes = set(), set()
    # A model that returns no cache keeps it where its caller gave it (RecurrentGemma:
    # the DynamicCache passed in) and its recurrent states in its modules.
    cache = getattr(out, "past_key_values", None) or extra.get("past_key_values")
    if rwkv:
        shift, wkv = out.state[:2], out.state[2:]
        conv_n = window_n = sum(t.numel() for t in shift); conv = sum(tensor_bytes(t) for t in shift)
        rec_n = sum(t.numel() for t in wkv); rec = sum(tensor_bytes(t) for t in wkv)
        rec_dtypes = {str(t.dtype) for t in wkv}; columns = {1}
        cache = transformers.DynamicCache()
    for m in model.modules():
        states = [(getattr(m, "conv1d_state", None), True),
                  (getattr(getattr(m, "rg_lru", None), "recurrent_states", None), False)]
        for t, is_conv in states:
            if isinstance(t, torch.Tensor):
                if is_conv:
                    # The conv's last width − 1 inputs (RecurrentGemma keeps no more).
                    conv += tensor_bytes(t); conv_n += t.numel(); window_n += t.numel()
                    columns.add(t.shape[-1])
                else:
                    rec += tensor_bytes(t); rec_n += t.numel(); rec_dtypes.add(str(t.dtype))
    for i, layer in enumerate(cache.layers):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                if i in cross:
                    cross_kv += tensor_bytes(t)
                else:
                    kv += tensor_bytes(t)
        for t in [t for t in (getattr(layer, "conv_states", None) or {}).values() if t is not None]:
            # The kernel's whole width (LinearAttentionLayer); width − 1 of it is the
            # window the next token's convolution needs.
            conv += tensor_bytes(t); conv_n += t.numel(); columns.add(t.shape[-1])
            window_n += t.numel() // t.shape[-1] * (t.shape[-1] - 1)
        for t in [t for t in (getattr(layer, "recurrent_states", None) or {}).values() if t is not None]:
            rec += tensor_bytes(t); rec_n += t.numel(); rec_dtypes.add(str(t.dtype))
    # MiniMax keeps its lightning layers' states beside the layers (`MiniMaxCache.linear_cache`).
    for t in getattr(cache, "linear_cache", []):
        if isinstance(t, torch.Tensor):
            rec += tensor_bytes(t); rec_n += t.numel(); rec_dtypes.add(str(t.dtype))
    return {"tokens": tokens, "dtype": "bf16", "kv_bytes": kv, "cross_kv_bytes": cross_kv,
            "conv_state_bytes": conv, "conv_state_values": conv_n, "conv_window_values": window_n,
            "recurrent_state_values": rec_n, "recurrent_state_dtype": ",".join(sorted(rec_dtypes)),
            "conv_columns": max(columns, default=0), "recurrent_state_bytes": rec,
            "cache_class": type(cache).__name__}

def variant(name, mt, overrides, *flags):
    """Writes transformers/NAME.json: TYPE's defaults with OVERRIDES, the model's
    parameters and persistent buffers, and its cache after a forward (`cache_bytes`;
    not with `--no-cache`, for a model whose forward cannot run on meta)."""
    cfg = AutoConfig.for_model(mt, **json.loads(overrides))
    cfg._attn_implementation = "eager"
    model = build(cfg)
    n = count(model)
    tokens, extra, cross = 7, {}, ()
    if mt == "mllama":
        # One image of max_num_tiles tiles, every tile used; each text token sees it.
        v = cfg.vision_config
        extra = dict(
            pixel_values=torch.zeros(1, 1, v.max_num_tiles, v.num_channels, v.image_size, v.image_size,
                                     dtype=torch.bfloat16, device="meta"),
            aspect_ratio_ids=torch.zeros(1, 1, dtype=torch.long, device="meta"),
            aspect_ratio_mask=torch.ones(1, 1, v.max_num_tiles, dtype=torch.long, device="meta"),
            cross_attention_mask=torch.ones(1, tokens, 1, v.max_num_tiles, dtype=torch.long, device="meta"))
        cross = set(cfg.text_config.cross_attention_layers)
    if mt == "git":
        # One image (a frame for each temporal embedding under num_image_with_embedding)
        # ahead of the text: GitModel.forward concatenates its projected states ahead of
        # the text's embeddings, and they go into the same cache ("GIT keeps the image
        # tokens in the cache without placeholder tokens in `input_ids`").
        v, frames = cfg.vision_config, cfg.num_image_with_embedding
        shape = (1,) + ((frames,) if frames else ()) + (v.num_channels, v.image_size, v.image_size)
        extra = dict(pixel_values=torch.zeros(*shape, dtype=torch.bfloat16, device="meta"))
    if mt == "rwkv":
        # Its forward returns its state as `state`, five tensors of [batch, hidden,
        # layers]: the token shifts (model dtype) and the WKV numerator, denominator
        # and maximum (fp32).
        extra = {"__rwkv__": True}
    if mt == "recurrent_gemma":
        # Its forward returns no cache: given one, it fills it (the attention blocks);
        # its recurrent blocks set up their states as generate's first call does.
        model.model._setup_cache(cfg, 1, "meta", torch.bfloat16)
        extra = {"past_key_values": transformers.DynamicCache(config=cfg)}
    doc = {"model_type": mt, "transformers": transformers.__version__, "parameters": n,
           "rope_buffer_bytes": rope_bytes(model), "buffer_bytes": counted_buffers(cfg)[0],
           "config": finite(json.loads(json.dumps(cfg.to_dict(), default=str)))}
    if "--no-cache" not in flags:
        doc["cache"] = cache_bytes(model, tokens, extra, cross)
    (HERE / "transformers" / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(name, n, doc.get("cache"))

def defaults(types):
    """Writes transformers/<model_type>.json: the config class's defaults as
    transformers writes them (`to_dict`) and the parameters and persistent buffers of
    the model it builds from them, for the Rust test `transformers_defaults`."""
    out = HERE / "transformers"
    out.mkdir(exist_ok=True)
    for mt in types:
        cfg = AutoConfig.for_model(mt)
        model = build(cfg)
        n = count(model)
        # Python's json writes inf and nan bare (Mamba-2's time_step_limit), which a
        # strict JSON reader refuses: written as the strings the config reader reads
        # them as.
        def finite(x):
            if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
                return {x != x: "NaN", x > 0: "Infinity"}.get(True, "-Infinity")
            if isinstance(x, dict):
                return {k: finite(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return [finite(v) for v in x]
            return x
        doc = {"model_type": mt, "transformers": transformers.__version__, "parameters": n,
               "rope_buffer_bytes": rope_bytes(model), "buffer_bytes": counted_buffers(cfg)[0],
               "config": finite(json.loads(json.dumps(cfg.to_dict(), default=str)))}
        (out / f"{mt}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(mt, n)

def forwards():
    """The encoders' forward traced as `agent/python/gpumem_trace.py` traces a model
    (its Tracker on the meta device, its SDPA stand-in: the fused kernels' outputs
    only) under torch.no_grad(), for each encoder case with its activation lines: the
    peak of allocated bytes beyond the weights and the inputs must be the case's
    `prefill.mlp` + `prefill.attention_scores`. The batch is padded: its mask is given
    as transformers builds it for a padded batch (masking_utils: a float mask under
    eager, a boolean one under sdpa), inside the traced forward."""
    sys.path.insert(0, str(HERE.parents[3] / "agent" / "python"))
    import gpumem_trace as gt
    gt._patch_sdpa(torch)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    bad = 0
    print("| case | oracle forward (B) | traced (B) | result |")
    for path in sorted(HERE.glob("real-*.json")):
        case = json.loads(path.read_text())
        lines = case["expect"].get("lines", {})
        if "prefill.mlp" not in lines or case["config"].get("model_type") not in ENCODERS:
            continue
        want = lines["prefill.mlp"] + lines["prefill.attention_scores"]
        inp = case["input"]
        b, s = int(inp.get("sequences", 1)), int(inp["context"])
        if s > case["config"].get("max_position_embeddings", s):
            print(f"| {case['name']} | {want} | — | not run: {s} tokens exceed the position table |")
            continue
        attn = inp.get("attention", "sdpa")
        dtype = dtypes[inp.get("compute-dtype", "bf16")]
        cfg = AutoConfig.for_model(**case["config"])
        tr = gt.Tracker(gt.Allocator(False), vocab=-1)
        with gt._dispatch_mode(tr), torch.no_grad():
            with torch.device("meta"):
                model = transformers.AutoModel.from_config(cfg, attn_implementation=attn, dtype=dtype).eval()
            ids = torch.zeros(b, s, dtype=torch.long, device="meta")
            tr.begin("forward")
            base = tr.allocated
            if attn == "eager":
                mask = torch.zeros(b, 1, s, s, dtype=dtype, device="meta")
            else:
                mask = torch.ones(b, 1, s, s, dtype=torch.bool, device="meta")
            out = model(input_ids=ids, attention_mask=mask)
            del out
            tr.end()
        got = tr.peak - base
        result = "same" if got == want else f"differs by {want - got:+}"
        bad += got != want
        print(f"| {case['name']} | {want} | {got} | {result} |")
    return 1 if bad else 0

def tensor_bytes(t):
    return t.numel() * t.element_size()

def encdec():
    """Each encoder-decoder case run as generate() holds its state, on the meta device:
    one forward with use_cache=True of `sequences` inputs of the encoder's length
    (Whisper: log-mel features of 2 x max_source_positions frames, which its two
    convolutions bring to max_source_positions) and decoder inputs of the prompt's
    length (the `kv_cache.prefill` line), then of prompt + generated tokens (the
    `kv_cache` line: the cache once every generated token has been fed back). The
    bytes of the EncoderDecoderCache's self- and cross-attention layers' keys and
    values and of `encoder_last_hidden_state` (what generate keeps as
    `encoder_outputs`) must be the case's lines."""
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    bad = 0
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print("| case | line | case (B) | transformers (meta) | result |")
    for path in sorted(HERE.glob("real-*.json")):
        case = json.loads(path.read_text())
        lines = case["expect"].get("lines", {})
        if "kv_cache.cross" not in lines:
            continue
        inp, raw = case["input"], case["config"]
        b, ctx = int(inp.get("sequences", 1)), int(inp["context"])
        end = ctx + int(inp.get("generate", 0))
        dtype = dtypes[inp.get("kv-dtype", "bf16")]
        cfg = AutoConfig.for_model(**raw)
        # Eager attention: the sdpa path asks whether a mask is all ones, which a meta
        # tensor cannot answer; the caches are the same under every kernel.
        cfg._attn_implementation = "eager"
        model = build(cfg).to(dtype).eval()
        whisper = cfg.model_type == "whisper"
        n = int(inp.get("encoder-length", cfg.max_source_positions if whisper else ctx))
        if whisper:
            enc = {"input_features": torch.zeros(b, cfg.num_mel_bins, 2 * n, dtype=dtype, device="meta")}
        else:
            enc = {"input_ids": torch.zeros(b, n, dtype=torch.long, device="meta")}
        got = {}
        with torch.no_grad():
            for key, t in (("kv_cache.prefill", ctx), ("kv_cache", end)):
                # Whisper's decoder positions end at max_target_positions: past them
                # only the cross-attention cache and the encoder output are read.
                past = whisper and t > cfg.max_target_positions
                dec = torch.zeros(b, 1 if past else t, dtype=torch.long, device="meta")
                out = model(**enc, decoder_input_ids=dec, use_cache=True)
                pkv = out.past_key_values
                assert type(pkv).__name__ == "EncoderDecoderCache", type(pkv)
                layers = lambda c: sum(tensor_bytes(l.keys) + tensor_bytes(l.values) for l in c.layers)
                got[key] = None if past else layers(pkv.self_attention_cache)
                got["kv_cache.cross"] = layers(pkv.cross_attention_cache)
                got["kv_cache.encoder_output"] = tensor_bytes(out.encoder_last_hidden_state)
        for key in ("kv_cache.prefill", "kv_cache", "kv_cache.cross", "kv_cache.encoder_output"):
            want, have = lines[key], got.get(key)
            if have is None:
                result = f"not run: past max_target_positions ({cfg.max_target_positions})"
            else:
                result = "same" if have == want else f"differs by {want - have:+}"
                bad += have != want
            print(f"| {case['name']} | {key} | {want} | {have} | {result} |")
    return 1 if bad else 0

def rope_fixtures():
    """Adds `rope_buffer_bytes` and `buffer_bytes` to every transformers/*.json file
    (the defaults' and the variants'), from the model its config builds."""
    for path in sorted((HERE / "transformers").glob("*.json")):
        doc = json.loads(path.read_text())
        def unfinite(x):
            if x in ("Infinity", "-Infinity", "NaN"):
                return float(x)
            if isinstance(x, dict):
                return {k: unfinite(v) for k, v in x.items()}
            if isinstance(x, list):
                return [unfinite(v) for v in x]
            return x
        raw = {k: unfinite(v) for k, v in doc["config"].items() if k != "model_type"}
        try:
            cfg = AutoConfig.for_model(doc["model_type"], **raw)
            doc["rope_buffer_bytes"] = rope_bytes(build(cfg))
            doc["buffer_bytes"] = counted_buffers(cfg)[0]
        except Exception as e:  # noqa: BLE001 - named, and the file left as it is
            print(path.name, "not built:", type(e).__name__, str(e)[:100])
            continue
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(path.name, doc["rope_buffer_bytes"], doc["buffer_bytes"])

def bnb_quantised(model):
    """The parameters transformers' bitsandbytes quantizer stores in 4 bits: the weight
    of every module `replace_with_bnb_linear` converts (`type(module) is nn.Linear` or
    a `Conv1D`, transformers 5.23 integrations/bitsandbytes.py), less the modules
    `get_modules_to_not_convert` keeps (the output embedding, tied weights, the last
    module, `_keep_in_fp32_modules`), as `_process_model_before_weight_loading` asks
    for `load_in_4bit` over a 16-bit checkpoint (a pre-quantised one first has
    Llama 4's experts made per-expert linears: `_convert_model_for_quantization`)."""
    from transformers.integrations.bitsandbytes import should_convert_module
    from transformers.pytorch_utils import Conv1D
    from transformers.quantizers.base import get_keys_to_not_convert
    skip = get_keys_to_not_convert(model) + list(getattr(model, "_keep_in_fp32_modules", None) or [])
    # A vision or audio tower's linears and its projector are converted too; the
    # estimate keeps them in the model's dtype (more bytes, the safe side): the
    # language model's alone.
    return sum(m.weight.numel() for n, m in model.named_modules()
               if (isinstance(m, Conv1D) or type(m) is torch.nn.Linear)
               and should_convert_module(n, skip)
               and not TOWER.search(n) and not PROJECTOR.search(n))

def moe_fixtures():
    """Each MoE transformers/*.json fixture (routed experts) with its model built on
    meta from the config: (path, document, model); one that does not build is named
    and skipped."""
    for path in sorted((HERE / "transformers").glob("*.json")):
        doc = json.loads(path.read_text())
        c = doc["config"].get("text_config", doc["config"])
        if not any(c.get(k) for k in ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")):
            continue
        try:
            fin = lambda v: float(v) if v in ("Infinity", "-Infinity", "NaN") else v
            raw = {k: (tuple(fin(x) for x in v) if k == "time_step_limit" else fin(v))
                   for k, v in doc["config"].items() if k != "model_type"}
            cfg = AutoConfig.for_model(doc["model_type"], **raw)
            model = build(cfg)
        except Exception as e:  # noqa: BLE001 - named, and the file left as it is
            print(path.name, "not built:", type(e).__name__, str(e)[:100])
            continue
        yield path, doc, model

def bnb_fixtures():
    """Adds `bnb_quantised_params` to every MoE transformers/*.json file (routed
    experts): the parameters bitsandbytes stores in 4 bits when transformers loads the
    model with load_in_4bit, which the Rust test `transformers_defaults` compares with
    the estimate's nf4 parameters under transformers."""
    for path, doc, model in moe_fixtures():
        try:
            doc["bnb_quantised_params"] = bnb_quantised(model)
        except Exception as e:  # noqa: BLE001 - named, and the file left as it is
            print(path.name, "not counted:", type(e).__name__, str(e)[:100])
            continue
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(path.name, doc["bnb_quantised_params"], "of", count(model))

def gptq_awq_quantised(model):
    """(GPTQ's, AWQ's) quantised parameters: the weights of the modules optimum's
    `GPTQQuantizer.convert_model` (optimum 2.3.0 optimum/gptq/quantizer.py;
    `get_layers`, optimum/gptq/utils.py: exact `nn.Linear`, `Conv1D`, `nn.Conv2d` under
    `get_block_name_with_pattern`) and transformers 5.23's `replace_with_awq_linear`
    (integrations/awq.py: `isinstance(module, nn.Linear)`, less
    `get_modules_to_not_convert(..., add_default_skips=True)`) replace; an MoE's
    routed experts, 3D parameters, are neither. Towers and projectors are left out as
    in `bnb_quantised`."""
    from optimum.gptq.utils import get_block_name_with_pattern, get_layers
    from transformers.quantizers.base import HfQuantizer
    from transformers.quantizers.quantizers_utils import should_convert_module
    lm = lambda n: not TOWER.search(n) and not PROJECTOR.search(n)
    gptq = sum(m.weight.numel() for n, m in get_layers(model, prefix=get_block_name_with_pattern(model)).items()
               if lm(n))
    skip = HfQuantizer.get_modules_to_not_convert(model, None, model._keep_in_fp32_modules, add_default_skips=True)
    awq = sum(m.weight.numel() for n, m in model.named_modules()
              if isinstance(m, torch.nn.Linear) and should_convert_module(n, skip) and lm(n))
    return gptq, awq

GPTQ_SUFFIXES = ("qweight", "qzeros", "scales", "g_idx")

def expert_keys_dropped(model):
    """Passes one routed expert's keys, as a GPTQ or AWQ checkpoint stores them,
    through transformers' key conversion (transformers 5.23 conversion_mapping.py
    `get_model_conversion_mapping`; `GptqHfQuantizer` and `AwqQuantizer` set no
    `serialized_names`, so `HfQuantizer.update_weight_conversions` adds nothing;
    core_model_loading.py `rename_source_key`). Returns (checked experts' params, the
    quantised keys that reached a parameter, dense keys that did not)."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    mapping = get_model_conversion_mapping(model)
    renamings = [t for t in mapping if isinstance(t, WeightRenaming)]
    converters = [t for t in mapping if isinstance(t, WeightConverter)]
    state = model.state_dict()
    params = {n for n, p in model.named_parameters() if p.dim() == 3 and ".experts." in n and lm_name(n)}
    checked, reached, missed = [], [], []
    for name in sorted(params):
        for conv in converters:
            # A per-expert merge: `mlp.experts.*.gate_proj.weight` into
            # `mlp.experts.gate_up_proj` (Mixtral's `.experts.*.w1.weight` into
            # `.experts.gate_up_proj`); its first source made expert 0's key.
            src = [s for s in conv._original_source_patterns if "*" in s]
            tgt = [t for t in conv._original_target_patterns if name.endswith(t.lstrip("^"))]
            if not src or not tgt or not src[0].endswith(".weight"):
                continue
            prefix = name[: len(name) - len(tgt[0].lstrip("^"))]
            dense = prefix + src[0].lstrip("^").replace("*", "0")
            got, _ = rename_source_key(dense, renamings, converters, model.base_model_prefix, state)
            if got != name:
                missed.append(f"{dense} -> {got}")
                continue
            checked.append(name)
            for suffix in GPTQ_SUFFIXES:
                key = dense[: -len("weight")] + suffix
                got, _ = rename_source_key(key, renamings, converters, model.base_model_prefix, state)
                if got in state:
                    reached.append(f"{key} -> {got}")
            break
    return checked, reached, missed

def lm_name(n):
    return not TOWER.search(n) and not PROJECTOR.search(n)

def gptq_awq_fixtures():
    """See the module doc (--gptq-awq). Returns 1 where an expert's quantised key
    reaches a parameter or no expert could be checked."""
    import optimum.version
    print(f"transformers {transformers.__version__}, optimum {optimum.version.__version__}")
    bad = 0
    for path, doc, model in moe_fixtures():
        try:
            gptq, awq = gptq_awq_quantised(model)
            checked, reached, missed = expert_keys_dropped(model)
        except Exception as e:  # noqa: BLE001 - named, and the file left as it is
            print(path.name, "not counted:", type(e).__name__, str(e)[:100])
            continue
        doc["gptq_quantised_params"], doc["awq_quantised_params"] = gptq, awq
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        three_d = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 3 and lm_name(n))
        verdict = ("quantised keys dropped" if checked and not reached
                   else "no per-expert converter" if not checked else "a quantised key loads")
        bad += bool(reached)
        print(path.name, "gptq", gptq, "awq", awq, "bnb", doc.get("bnb_quantised_params"), "3D", three_d,
              "|", len(checked), "expert params checked:", verdict, *(reached + missed)[:2])
    return 1 if bad else 0

def beams():
    """bart-base under beam search as generate(num_beams=4) holds it, on the meta
    device: generate itself does not run there (its beam scoring reads values back
    with .item()), so the state it keeps is built as it builds it: the encoder's last
    hidden state repeat_interleaved by the beams (`_expand_inputs_for_generation`)
    and the EncoderDecoderCache after a forward of sequences x beams decoder rows of
    prompt + generated tokens, compared with the estimator's lines (the Rust test
    `beams_multiply_an_encoder_decoders_caches`: 1 sequence, 1 024 source tokens, 1 +
    256 decoder tokens, bf16) and one cross-attention layer's K with the copy
    `reorder_cache`'s index_select adds."""
    case = json.loads((HERE / "real-bart-base-1x16-gen256.json").read_text())
    cfg = AutoConfig.for_model(**case["config"])
    cfg._attn_implementation = "eager"
    model = build(cfg).to(torch.bfloat16).eval()
    b, k, source, end = 1, 4, 1024, 257
    want = {"kv_cache less the copy": 25_239_552 - 6_291_456, "kv_cache.cross": 75_497_472,
            "kv_cache.encoder_output": 6_291_456, "reorder_cache copy": 6_291_456}
    with torch.no_grad():
        ids = torch.zeros(b, source, dtype=torch.long, device="meta")
        enc = model.get_encoder()(input_ids=ids).last_hidden_state.repeat_interleave(k, dim=0)
        dec = torch.zeros(b * k, end, dtype=torch.long, device="meta")
        out = model(encoder_outputs=(enc,), decoder_input_ids=dec, use_cache=True)
    pkv = out.past_key_values
    layers = lambda c: sum(tensor_bytes(l.keys) + tensor_bytes(l.values) for l in c.layers)
    got = {"kv_cache less the copy": layers(pkv.self_attention_cache),
           "kv_cache.cross": layers(pkv.cross_attention_cache),
           "kv_cache.encoder_output": tensor_bytes(enc),
           "reorder_cache copy": max(tensor_bytes(l.keys) for c in
                                     (pkv.self_attention_cache, pkv.cross_attention_cache)
                                     for l in c.layers)}
    bad = 0
    print("| line (bart-base, 4 beams) | estimator (B) | transformers (meta) | result |")
    for key, w in want.items():
        bad += got[key] != w
        print(f"| {key} | {w} | {got[key]} | {'same' if got[key] == w else 'differs'} |")
    return 1 if bad else 0

class _LiveStorages:
    """The bytes of live CPU storages: those given at the start and every one an op
    makes while the mode is on (a storage counted once, dropped when freed), with the
    peak."""
    def __init__(self, tensors=()):
        self.live, self.refs, self.now, self.peak = {}, [], 0, 0
        for t in tensors:
            self.add(t)

    def add(self, t):
        import weakref
        st = t.untyped_storage()
        k = id(st)
        if k in self.live or not st.nbytes():
            return
        self.live[k] = st.nbytes()
        self.now += st.nbytes()
        self.peak = max(self.peak, self.now)
        self.refs.append(weakref.ref(st, lambda _r, k=k: self.free(k)))

    def free(self, k):
        self.now -= self.live.pop(k)

    def mode(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        tracker = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in (out if isinstance(out, (tuple, list)) else (out,)):
                    if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                        tracker.add(t)
                return out
        return Mode()


def ct_module_moments():
    """One linear of each format decompressed by compressed-tensors' own
    decompress_module on the CPU, its storages tracked: what it allocates and holds
    at its peak beside the stored tensors (measured: the peak less the module's bytes
    before) against common.ct_decompress_excess less the stored layout
    (common.tensor_bytes) plus the state after (common.ct_decompressed_bytes) — the
    temporaries, free of the layouts' few bytes (FP8-block's scales here bf16, the
    layout's fp32; W4A16's 16 B weight_shape; NVFP4's input global scale) — and its
    compressed values freed on return. FP8-block at 200 x 300 (padded to 256 x 384
    tiles). Returns the differences."""
    from compressed_tensors.compressors.base import decompress_module
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils.helpers import calculate_range
    from common import ct_decompress_excess, ct_decompressed_bytes, cdiv, tensor_bytes
    import weakref
    fp8 = lambda *s: torch.randn(*s).to(torch.float8_e4m3fn)
    cases = [
        ("fp8-channel", 512, 256, "float-quantized", lambda r, c: {"weight": fp8(r, c), "weight_scale": torch.rand(r, 1).to(torch.bfloat16)},
         dict(num_bits=8, type="float", strategy="channel", symmetric=True)),
        ("fp8-block", 200, 300, "float-quantized", lambda r, c: {"weight": fp8(r, c), "weight_scale": torch.rand(cdiv(r, 128), cdiv(c, 128)).to(torch.bfloat16)},
         dict(num_bits=8, type="float", strategy="block", block_structure=[128, 128], symmetric=True)),
        ("w4a16-g128", 512, 256, "pack-quantized", lambda r, c: {"weight_packed": torch.randint(-2**31, 2**31 - 1, (r, c // 8), dtype=torch.int32),
         "weight_scale": torch.rand(r, c // 128).to(torch.bfloat16), "weight_shape": torch.tensor([r, c])},
         dict(num_bits=4, type="int", strategy="group", group_size=128, symmetric=True)),
        ("nvfp4", 512, 256, "nvfp4-pack-quantized", lambda r, c: {"weight_packed": torch.randint(0, 255, (r, c // 2), dtype=torch.uint8),
         "weight_scale": torch.rand(r, c // 16).to(torch.float8_e4m3fn), "weight_global_scale": torch.rand(1)},
         dict(num_bits=4, type="float", strategy="tensor_group", group_size=16, symmetric=True)),
    ]
    print("| format | rows x cols | held at the peak beside the stored tensors | derived | compressed freed | result |")
    bad = 0
    for fmt, rows, cols, ct_format, make, w in cases:
        m = torch.nn.Linear(cols, rows, bias=False)
        del m.weight
        for n, t in make(rows, cols).items():
            m.register_parameter(n, torch.nn.Parameter(t, requires_grad=False))
        m.quantization_scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(**w))
        values = weakref.ref((m.weight if fmt.startswith("fp8") else m.weight_packed).untyped_storage())
        # The quantisation range's scalars, memoised on the first module of a model:
        # made before, as they are for every later module.
        calculate_range(m.quantization_scheme.weights, torch.device("cpu"))
        t = _LiveStorages(list(m.parameters()))
        before = t.now
        with t.mode():
            decompress_module(m, ct_format)
        derived = (ct_decompress_excess(fmt, rows, cols) - tensor_bytes((rows, cols), "linear_mlp", fmt, fmt)
                   + ct_decompressed_bytes(fmt, rows, cols))
        # NVFP4's table copy (32 B) is a device copy: `.to("cpu")` on the CPU copies nothing.
        measured = t.peak - before + (32 if fmt.startswith("nvfp4") else 0)
        freed = values() is None
        same = measured == derived and freed
        bad += not same
        print(f"| {fmt} | {rows} x {cols} | {measured} | {derived} | {'yes' if freed else 'no'} | {'same' if same else 'differs'} |")
    return bad


def compressed_tensors_check():
    """See the module doc (--compressed-tensors). Returns 1 on a difference."""
    import tempfile
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig, LlamaConfig, LlamaForCausalLM
    import compressed_tensors
    from common import ct_decompress_excess, ct_decompressed_bytes, tensor_bytes
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=1000, max_position_embeddings=128)
    sd = {k: v.contiguous() for k, v in LlamaForCausalLM(cfg).to(torch.bfloat16).state_dict().items()}
    linears = [k[:-len(".weight")] for k in sd if k.endswith("proj.weight")]

    def fp8_channel(w):
        s = w.float().abs().amax(1, keepdim=True) / 448.0
        return {"weight": (w.float() / s).to(torch.float8_e4m3fn), "weight_scale": s.to(torch.bfloat16)}

    def w4a16(w):
        o, i = w.shape
        grouped = w.float().reshape(o, i // 128, 128)
        s = grouped.abs().amax(-1) / 7.0
        q = (torch.clamp(torch.round(grouped / s[..., None]), -8, 7).to(torch.int64) + 8).reshape(o, i // 8, 8)
        packed = torch.zeros(o, i // 8, dtype=torch.int64)
        for j in range(8):
            packed |= q[..., j] << (4 * j)
        # pack_to_int32's layout: eight offset nibbles to a word, the first lowest.
        packed = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
        return {"weight_packed": packed, "weight_scale": s.to(torch.bfloat16),
                "weight_shape": torch.tensor([o, i])}

    schemes = {
        "fp8-channel": (fp8_channel, "float-quantized",
                        {"weights": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel", "dynamic": False},
                         "input_activations": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token", "dynamic": True}}),
        "w4a16-g128": (w4a16, "pack-quantized",
                       {"weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128, "dynamic": False}}),
    }
    held = lambda m: sum(t.numel() * t.element_size() for t in list(m.parameters()) + list(m.buffers()))
    print(f"transformers {transformers.__version__}, compressed-tensors {compressed_tensors.__version__}, CPU")
    print("| format | load | when | linears' bytes | expected | result |")
    bad = 0
    for fmt, (compress, ct_format, scheme) in schemes.items():
        tensors = {}
        for k, v in sd.items():
            m = k[:-len(".weight")]
            if m in linears:
                tensors.update({f"{m}.{n}": t.contiguous() for n, t in compress(v).items()})
            else:
                tensors[k] = v
        q = {"quant_method": "compressed-tensors", "format": ct_format, "quantization_status": "compressed",
             "ignore": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"], "format": ct_format, **scheme}}}
        with tempfile.TemporaryDirectory() as d:
            save_file(tensors, f"{d}/model.safetensors", metadata={"format": "pt"})
            c = cfg.to_dict(); c.update(quantization_config=q, architectures=["LlamaForCausalLM"], dtype="bfloat16")
            pathlib.Path(d, "config.json").write_text(json.dumps(c))
            for load, kw in (("default", {}), ("dequantize=True", {"quantization_config": CompressedTensorsConfig(**q, dequantize=True)})):
                model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, **kw)
                mods = [model.get_submodule(m) for m in linears]
                shapes = [tuple(sd[m + ".weight"].shape) for m in linears]
                stored = sum(tensor_bytes(sh, "linear_mlp", fmt, fmt) for sh in shapes)
                dense = sum(ct_decompressed_bytes(fmt, *sh) for sh in shapes)
                # weight_shape is int64 [2] as compressed-tensors writes it (16 B); the
                # W4A16 layout counts 8 B: named, not hidden.
                shape_gap = 8 * len(linears) if fmt.startswith("w4a16") else 0
                loaded = sum(held(m) for m in mods)
                ids = torch.tensor([[1, 2, 3, 4]])
                # compressed-tensors' pre-hook decompresses; a pre-hook registered after
                # it sees the model decompressed, before any activation: the moment is
                # the peak of every storage up to it, against what is live then.
                t = _LiveStorages(list(model.parameters()) + list(model.buffers()))
                after_hook = []
                h = model.register_forward_pre_hook(lambda *_: after_hook.append(t.now) if not after_hook else None)
                with torch.no_grad(), t.mode():
                    model(ids)
                h.remove()
                if load == "default":
                    # The last module decompressed (layers.1.mlp.down_proj) holds the moment.
                    got, want = t.peak - after_hook[0], ct_decompress_excess(fmt, *shapes[-1])
                    bad += got != want
                    print(f"| {fmt} | {load} | decompression moment (excess) | {got} | {want} | {'same' if got == want else 'differs'} |")
                after = sum(held(m) for m in mods)
                # dequantize=True leaves a plain bf16 model: no scale is kept.
                want_load, want_after = ((stored + shape_gap, dense + shape_gap) if load == "default"
                                         else (2 * sum(a * b for a, b in shapes),) * 2)
                for when, got, want in (("loaded", loaded, want_load), ("first forward", after, want_after)):
                    same = got == want
                    bad += not same
                    note = f" (weight_shape: {shape_gap} B beyond the layout's 8 B per matrix)" if shape_gap and load == "default" else ""
                    print(f"| {fmt} | {load} | {when} | {got} | {want} | {'same' if same else 'differs'}{note} |")
    bad += ct_module_moments()
    return 1 if bad else 0

if __name__ == "__main__":
    if sys.argv[1:2] == ["--compressed-tensors"]:
        sys.exit(compressed_tensors_check())
    if sys.argv[1:2] == ["--beams"]:
        sys.exit(beams())
    if sys.argv[1:2] == ["--gptq-awq"]:
        sys.exit(gptq_awq_fixtures())
    if sys.argv[1:2] == ["--bnb"]:
        bnb_fixtures()
        sys.exit(0)
    if sys.argv[1:2] == ["--rope"]:
        rope_fixtures()
        sys.exit(0)
    if sys.argv[1:2] == ["--encdec"]:
        sys.exit(encdec())
    if sys.argv[1:2] == ["--forward"]:
        sys.exit(forwards())
    if sys.argv[1:2] == ["--variant"]:
        variant(*sys.argv[2:])
        sys.exit(0)
    if sys.argv[1:2] == ["--defaults"]:
        defaults(sys.argv[2:])
        sys.exit(0)
    sys.exit(main())
