#!/usr/bin/env python3
"""Every model family the installed transformers builds as a causal LM, a masked LM
(an encoder) or a sequence-to-sequence model (an encoder-decoder), answered by
`gpumem-agent estimate` and checked against transformers' own modules.

For each ``model_type`` that maps to one of those classes, the config class's defaults
are written as ``save_pretrained`` writes them (config.json), and the model is built
from them on PyTorch's ``meta`` device (no weight, no memory) for the truth — a
decoder as its causal LM, an encoder bare (``AutoModel``), an encoder-decoder whole
(its sequence-to-sequence class), as ``gpumem_count.kind_of`` tells them apart:

* parameters: every parameter once (tied ones once), summed from the modules;
* KV cache: a decoder's own cache after a forward of ``--context`` tokens on meta
  tensors, every tensor it holds (keys, values, recurrent and convolution states),
  in bytes at bfloat16; an encoder's none; an encoder-decoder's after one forward of
  ``--context`` source tokens (Whisper: its 1 500 frames) and a third of them into the
  decoder: the self-attention cache and the cross-attention cache apart (their
  lines in the answer, ``kv_cache`` and ``kv_cache.cross``), and the values of the
  encoder's output (``kv_cache.encoder_output``); the agent is asked with
  ``--encoder-length`` the source's length. An audio encoder of any length
  (Speech2Text, SpeechT5, Moonshine, Canary) reads 30 s of audio made into its input
  by its own feature extractor, and the agent is asked with ``--audio-seconds 30``;
  the source is held to the encoder's positions (LED: ``--context 16384``).

The agent is then asked the same (``estimate --config … --context N --kv-dtype bf16
--json``), with its count probe in ``--python`` (the default here: this interpreter) or
with the config reader alone (``--no-python``), and each family lands in one row:

* ``exact``: the parameters and the KV bytes are the truth's;
* ``flagged``: a figure differs, and the answer says it is not exact (its confidence is
  not ``exact`` nor ``counted by …``, or a warning says it is not counted exactly);
* ``refused``: the agent declined, with its reason (its last line of stderr);
* ``SILENT``: a figure differs and the answer claims to be exact (a bug);
* ``not built``: transformers itself builds no model from its own defaults.

Run with the torch venv (scripts/install-tools.sh):

    source scripts/env.sh
    $GPUMEM_TOOLS/torch-venv/bin/python tools/family_sweep.py \
        --agent target/debug/gpumem-agent --out ~/family-sweep [--no-python] [TYPE …]

Without --out the sweep works in a fresh private folder (mkdtemp, 0700) and says
which; --out is created 0700 and must not be a symbolic link.

Bounded: every build and forward is stopped after --build-timeout / --forward-timeout
seconds, every agent run after --agent-timeout, and agent runs go --jobs at a time. On
two shared cores (transformers 5.23, the 189 causal-LM types, 158 of them decoders) the
truth took about 15 minutes (kept in --out as truth-CONTEXT.jsonl and reused), the
agent's answers about 3 minutes without Python and 25 with it (it starts Python only
for the families its reader does not know or refuses); the 84 encoder and
encoder-decoder types (``--kinds encoder,encdec``) under a minute for the truth and
14 minutes for the answers with Python. --answers keeps them for a later
classification. Exits 1 when a row is SILENT. The classification, the kinds and the
window's truth are unit-tested in agent/python/tests/test_family_sweep.py.
"""

import argparse
import collections
import concurrent.futures
import inspect
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import warnings

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "agent" / "python"))

#: Confidence labels of an answer whose figures are claimed exact.
EXACT_LABELS = ("exact", "counted by ")

#: The context a forward is redone at when the long one runs past its time.
SHORT_CONTEXT = 300


class Timeout(Exception):
    pass


def _alarm(*_):
    raise Timeout()


#: The kinds of families swept: what the config of a type's defaults is.
KINDS = ("causal", "encoder", "encdec")

#: Composite configs transformers builds from two named sub-models only (no defaults).
COMPOSITE = {"encoder-decoder", "speech-encoder-decoder", "vision-encoder-decoder"}


def causal_types():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) & set(CONFIG_MAPPING.keys()))


def all_types():
    """The causal-LM, masked-LM (BERT and kin) and sequence-to-sequence (text and
    speech) types, less the composite ones."""
    from transformers.models.auto import modeling_auto as m
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    names = set(m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) | set(m.MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    names |= set(m.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES) | set(m.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES)
    return sorted((names & set(CONFIG_MAPPING.keys())) - COMPOSITE)


def kind_of(cfg):
    """``encdec``, ``encoder`` or ``causal``, as the count probe tells them apart
    (``gpumem_count.kind_of``: the class a user loads for the config); None for a type
    none of the three builds (an audio LM mapped to speech-to-text only: Qwen2-Audio,
    Voxtral)."""
    import transformers

    import gpumem_count as gc

    kind = gc.kind_of(transformers, cfg)
    if kind != "decoder":
        return kind
    return "causal" if type(cfg) in transformers.AutoModelForCausalLM._model_mapping else None


def sweep_types(kinds):
    """Every type whose defaults are of one of the kinds asked, with its kind (a
    causal-LM type whose config cannot be made from its defaults is swept, its truth
    saying why)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    out = {}
    causal = set(causal_types())
    for t in all_types():
        try:
            kind = kind_of(CONFIG_MAPPING[t]())
        except Exception:  # noqa: BLE001 - recorded as not built by the sweep itself
            kind = None
        # A causal-LM type is swept whatever its defaults say (its truth says why not).
        if kind is None and t in causal:
            kind = "causal"
        if kind in kinds:
            out[t] = kind
    return out


def cache_bytes(torch, cache, tokens):
    """Bytes of every tensor a cache holds (0-d counters left out), each once (the
    states a cache keeps beside its layers too: MiniMax's ``linear_cache``); a
    sliding-window layer with the token a decode step adds (transformers keeps
    ``sliding_window - 1`` tokens between steps and concatenates the new one:
    cache_utils.py, DynamicSlidingWindowLayer.update)."""
    import gpumem_count as gc

    total = 0
    for layer in gc._cache_layers(cache):
        kv, state = gc._layer_elements(torch, layer)
        w = getattr(layer, "sliding_window", None)
        keys = getattr(layer, "keys", None)
        if isinstance(w, int) and isinstance(keys, torch.Tensor) and keys.dim() >= 2:
            held = keys.shape[-2]
            if 0 < held < tokens:
                kv[1] += kv[1] // held * (min(tokens, w) - held)
        total += kv[1] + state[1]
    # MiniMax keeps its lightning layers' states beside the layers
    # (models/minimax/modeling_minimax.py, MiniMaxCache.linear_cache).
    for t in getattr(cache, "linear_cache", None) or []:
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            total += t.numel() * t.element_size()
    return total


def _first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:160] if text else ''}"


#: Seconds of audio an audio encoder (Speech2Text, SpeechT5, Moonshine, Canary) is run
#: over; the agent is asked with --audio-seconds.
AUDIO_SECONDS = 30


def _limit(cfg, keys, default):
    """The smallest of the config's (or its encoder's/decoder's) positions named `keys`."""
    found = []
    for c in (cfg, getattr(cfg, "encoder_config", None), getattr(cfg, "decoder_config", None)):
        for k in keys:
            v = getattr(c, k, None) if c is not None else None
            if isinstance(v, int) and v > 2:
                found.append(v)
    return min(found, default=default)


def encdec_truth(torch, model, cfg, tokens, forward_timeout):
    """An encoder-decoder's caches after one forward on meta tensors: the encoder reads
    ``tokens`` positions (Whisper: the frames its 30 s of features give; another audio
    encoder: the input its own feature extractor makes of ``AUDIO_SECONDS`` of audio),
    the decoder ``tokens // 3`` (apart, so that a cache sized over the wrong length
    shows; no more than its positions); the bytes of the decoder's self-attention
    cache, of the cross-attention cache, and the values of the encoder's output
    (``encoder_last_hidden_state``, which generate keeps)."""
    import transformers

    import gpumem_count as gc

    target = _limit(cfg, ("max_target_positions", "max_decoder_position_embeddings"), tokens)
    if getattr(cfg, "decoder_config", None) is not None:
        target = min(target, _limit(cfg.decoder_config, ("max_position_embeddings",), tokens))
    decoder = max(1, min(tokens // 3, target))
    name = getattr(model, "main_input_name", "input_ids")
    row = {}
    try:
        if name == "input_ids":
            source = torch.zeros((1, tokens), dtype=torch.long, device="meta")
        else:
            audio = gc.AudioInput(transformers, model, cfg, name, None)
            source = audio.tensor(torch, AUDIO_SECONDS)
            if audio.fixed is None:
                row["audio_seconds"] = AUDIO_SECONDS
    except Exception as e:  # noqa: BLE001 - the parameters stand without the caches
        return {"kv_error": f"the encoder's input {name} is not built here ({_first_line(e)})"}
    signal.alarm(forward_timeout)
    try:
        # As generate runs it: the encoder once, then the decoder over its output.
        encoded = gc._encode(torch, model, name, source, set())
        with torch.no_grad(), gc._answer_data_dependent(torch, set()):
            out = model(
                encoder_outputs=encoded,
                decoder_input_ids=gc._decoder_ids(torch, cfg, decoder),
                use_cache=True,
            )
        cache = out.past_key_values
        enc = encoded.last_hidden_state
        source = enc.shape[1]
        return {
            **row,
            "context": decoder,
            "encoder_length": source,
            "kv_bytes": cache_bytes(torch, cache.self_attention_cache, decoder),
            "cross_bytes": cache_bytes(torch, cache.cross_attention_cache, source),
            "encoder_output": enc.numel(),
        }
    except Timeout:
        return {"kv_error": f"the forward of {tokens} + {decoder} tokens ran past {forward_timeout} s"}
    except Exception as e:  # noqa: BLE001 - the parameters stand without the caches
        return {"kv_error": _first_line(e)}
    finally:
        signal.alarm(0)


def image_inputs(torch, cfg):
    """The image a family's forward takes beside the prompt's ids when the reader
    counts its tokens in every sequence: GIT's (``GitModel.forward`` concatenates the
    projected image ahead of the text's embeddings, into the same cache; the reader's
    ``prefix-tokens``), one image or a frame per temporal embedding
    (``num_image_with_embedding``). Empty for every other family."""
    if cfg.model_type != "git":
        return {}
    v, frames = cfg.vision_config, cfg.num_image_with_embedding
    shape = (1,) + ((frames,) if frames else ()) + (v.num_channels, v.image_size, v.image_size)
    return {"pixel_values": torch.zeros(shape, dtype=torch.bfloat16, device="meta")}


def truth(model_type, context, out_dir, forward_timeout):
    """The truth for one family's defaults, and its config.json written under out_dir."""
    import torch
    import transformers

    import gpumem_count as gc

    cfg = transformers.AutoConfig.for_model(model_type)
    path = out_dir / model_type
    path.mkdir(parents=True, exist_ok=True)
    cfg.save_pretrained(path)
    cfg._attn_implementation = "eager"
    # An encoder (BERT and its kin map a decoder-configured head here) is counted as
    # the bare model (no cache), an encoder-decoder whole with its two caches.
    kind = kind_of(cfg)
    encdec, encoder = kind == "encdec", kind == "encoder"
    causal = transformers.AutoModelForCausalLM
    with torch.device("meta"):
        if encdec:
            auto = next(
                (a for a in (transformers.AutoModelForSeq2SeqLM, transformers.AutoModelForSpeechSeq2Seq) if type(cfg) in a._model_mapping),
                transformers.AutoModelForSeq2SeqLM,
            )
            if model_type == "whisper":
                auto = transformers.WhisperForConditionalGeneration
        elif encoder:
            auto = transformers.AutoModel
        elif getattr(cfg, "vision_config", None) is not None and type(cfg) in transformers.AutoModelForImageTextToText._model_mapping:
            # A config with a vision tower is counted whole, as the reader counts it.
            auto = transformers.AutoModelForImageTextToText
        else:
            auto = causal
        if hasattr(auto, "from_config"):
            model = auto.from_config(cfg, dtype=torch.bfloat16)
        else:
            model = auto._from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    seen, params = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            params += p.numel()
    # Persistent buffers are stored in the checkpoint beside the parameters (a router's
    # score-correction bias): the config reader counts them as parameters.
    persistent = set(model.state_dict().keys())
    stored = params + sum(b.numel() for n, b in model.named_buffers() if n in persistent)
    row = {"parameters": params, "stored": stored, "class": type(model).__name__}
    if encoder:
        row["kv_bytes"] = 0
        row["kind"] = "encoder"
        return row
    # No more tokens than the model has positions for (BERT-style decoders: 512).
    limit = min(
        (v for k in ("max_position_embeddings", "n_positions", "max_seq_len") if isinstance(v := getattr(cfg, k, None), int) and v > 2),
        default=context,
    )
    if encdec:
        row["kind"] = "encdec"
        # No more source tokens than the encoder's positions (LED: 16 384; Dia's text
        # encoder: its encoder_config's 1 024).
        encoder = getattr(cfg, "encoder_config", None)
        limit = min(limit, _limit(cfg, ("max_encoder_position_embeddings",), limit))
        if encoder is not None:
            limit = min(limit, _limit(encoder, ("max_position_embeddings",), limit))
        row.update(encdec_truth(torch, model, cfg, min(context, limit), forward_timeout))
        return row
    # A recurrent layer's slow path steps token by token: past its time the forward is
    # redone at a shorter context (the agent is then asked at that one).
    for tokens in (min(context, limit), min(SHORT_CONTEXT, limit)):
        signal.alarm(forward_timeout)
        try:
            ids = torch.zeros((1, tokens), dtype=torch.long, device="meta")
            with torch.no_grad(), gc._answer_data_dependent(torch, set()):
                out = model(input_ids=ids, use_cache=True, **image_inputs(torch, cfg))
            cache = gc.model_cache(out)
            row["kv_bytes"] = None if cache is None else cache_bytes(torch, cache, tokens)
            row["context"] = tokens
            row.pop("kv_error", None)
            break
        except Timeout:
            row["kv_error"] = f"the forward of {tokens} tokens ran past {forward_timeout} s"
        except Exception as e:  # noqa: BLE001 - the parameters stand without the cache
            row["kv_error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"
            break
        finally:
            signal.alarm(0)
    return row


def ask(agent, config, context, python, timeout, answers=None, encoder_length=None, audio_seconds=None):
    """The agent's answer: its JSON, or its refusal. With `answers` (a folder), the
    agent's stdout and stderr are kept there as TYPE.CONTEXT.out/.err and read back
    instead of asking again (to classify an earlier build's answers anew)."""
    saved = None if answers is None else pathlib.Path(answers) / f"{config.parent.name}.{context}"
    out, err = (None, None) if saved is None else (saved.parent / (saved.name + ".out"), saved.parent / (saved.name + ".err"))
    if out is not None and out.exists():
        stdout = out.read_text()
        stderr = err.read_text() if err.exists() else ""
        code = "?"
    else:
        cmd = [agent, "estimate", "--config", str(config), "--context", str(context), "--kv-dtype", "bf16", "--json"]
        if audio_seconds is not None:
            cmd += ["--audio-seconds", str(audio_seconds)]
        elif encoder_length is not None:
            cmd += ["--encoder-length", str(encoder_length)]
        cmd += ["--python", python] if python else ["--count-with", "reader"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"refused": f"the agent ran past {timeout} s"}
        stdout, stderr, code = p.stdout, p.stderr, p.returncode
        if saved is not None:
            saved.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(stdout)
            err.write_text(stderr)
    try:
        return {"answer": json.loads(stdout)}
    except ValueError:
        lines = [l for l in stderr.strip().splitlines() if l.strip()]
        return {"refused": (lines[-1] if lines else f"exit {code}, no output")[:400]}


def confidence(answer):
    """The config reader's or the count's confidence, as the answer states it."""
    found = None
    for a in answer.get("assumptions", []):
        if a.startswith("config.json:") and "confidence: " in a:
            found = a.split("confidence: ", 1)[1]
    return found or answer.get("confidence") or "?"


def _values(line, names):
    """The product of a line's named inputs (None when it or one of them is absent)."""
    if not line:
        return None
    n = 1
    for k in names:
        v = line.get("inputs", {}).get(k)
        if v is None or not str(v).isdigit():
            return None
        n *= int(v)
    return n


def classify(truth_row, got):
    """(class, reason) of one family: exact, flagged, refused or SILENT."""
    if "refused" in got:
        return "refused", got["refused"]
    a = got["answer"]
    conf = confidence(a)
    said_exact = conf.startswith(EXACT_LABELS) and not any("not counted exactly" in w for w in a.get("warnings", []))
    diffs = []
    # transformers builds no multi-token-prediction layer; the checkpoints store it and
    # the reader counts it on a line of its own.
    mtp = sum(int(l.get("inputs", {}).get("parameters", 0)) for l in a.get("lines", []) if l.get("key") == "weights.mtp")
    params = (a.get("parameters") or 0) - mtp
    if params not in (truth_row["parameters"], truth_row.get("stored")):
        diffs.append(f"parameters {params} vs {truth_row['parameters']}")
    kv = truth_row.get("kv_bytes")
    if "cross_bytes" in truth_row:
        # An encoder-decoder: each of its cache's lines against its own truth.
        lines = {l.get("key"): l for l in a.get("lines", [])}
        self_kv = lines.get("kv_cache", {}).get("bytes")
        if self_kv != kv:
            diffs.append(f"self-attention KV {self_kv} vs {kv} bytes")
        cross = lines.get("kv_cache.cross", {}).get("bytes")
        if cross != truth_row["cross_bytes"]:
            diffs.append(f"cross-attention KV {cross} vs {truth_row['cross_bytes']} bytes")
        out = _values(lines.get("kv_cache.encoder_output"), ("sequences", "encoder length", "hidden"))
        if out != truth_row["encoder_output"]:
            diffs.append(f"encoder output {out} vs {truth_row['encoder_output']} values")
    elif kv is not None:
        lines = {l.get("key"): l for l in a.get("lines", [])}
        if "kv_cache.cross" in lines:
            # A decoder with cross-attention over an image (Mllama): its causal-LM class
            # runs text alone, so the truth holds the self-attention cache only; the
            # answer's cross-attention line is over one image's tokens, which this
            # sweep's text-only truth cannot check (the family's own tests do).
            got_kv = lines.get("kv_cache", {}).get("bytes")
        else:
            got_kv = a.get("kv_cache_bytes")
        if got_kv != kv:
            diffs.append(f"KV {got_kv} vs {kv} bytes")
    if not diffs:
        return "exact", conf[:160]
    return ("SILENT" if said_exact else "flagged"), "; ".join(diffs) + f" (confidence: {conf[:160]})"


def private_folder(given):
    """The sweep's folder: a fresh private one (``tempfile.mkdtemp``: 0700, made new,
    so no other local user made it first), or ``given``, made 0700 when absent and
    refused when it is a symbolic link or another user's."""
    if given is None:
        return pathlib.Path(tempfile.mkdtemp(prefix="family-sweep-"))
    out = pathlib.Path(given).expanduser()
    if out.is_symlink():
        raise SystemExit(f"--out {out}: a symbolic link; give the folder itself")
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    if out.stat().st_uid != os.getuid():
        raise SystemExit(f"--out {out}: owned by another user")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agent", required=True)
    ap.add_argument("--out", help="the folder kept between runs (default: a fresh private one)")
    ap.add_argument("--python", default=sys.executable, help="the Python the agent counts with")
    ap.add_argument("--no-python", action="store_true", help="the config reader alone")
    ap.add_argument("--context", type=int, default=4500)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--build-timeout", type=int, default=120)
    ap.add_argument("--forward-timeout", type=int, default=60)
    ap.add_argument("--agent-timeout", type=int, default=400)
    ap.add_argument("--answers", help="a folder keeping the agent's answers, read back when there")
    ap.add_argument("--kinds", default=",".join(KINDS), help="the kinds swept: causal, encoder, encdec (comma-separated)")
    ap.add_argument("types", nargs="*")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)
    out = private_folder(args.out)
    print(f"family sweep: working in {out}", file=sys.stderr)
    kinds = {k.strip() for k in args.kinds.split(",") if k.strip()}
    if kinds - set(KINDS):
        raise SystemExit(f"--kinds: {', '.join(sorted(kinds - set(KINDS)))}: not among {', '.join(KINDS)}")
    swept = sweep_types(kinds) if not args.types else {}
    types = args.types or list(swept)
    signal.signal(signal.SIGALRM, _alarm)
    truths = {}
    cached = out / f"truth-{args.context}.jsonl"
    if cached.exists():
        for line in cached.read_text().splitlines():
            r = json.loads(line)
            truths[r["model_type"]] = r
    with cached.open("a") as f:
        for t in types:
            if t in truths:
                continue
            signal.alarm(args.build_timeout)
            try:
                r = truth(t, args.context, out, args.forward_timeout)
            except Timeout:
                r = {"build_error": f"not built within {args.build_timeout} s"}
            except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
                r = {"build_error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"}
            finally:
                signal.alarm(0)
            r["model_type"] = t
            r.setdefault("kind", swept.get(t, "causal"))
            truths[t] = r
            f.write(json.dumps(r) + "\n")
            f.flush()
    python = None if args.no_python else args.python
    rows = {}
    todo = [t for t in types if "build_error" not in truths[t]]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {
            pool.submit(
                ask,
                args.agent,
                out / t / "config.json",
                truths[t].get("context", args.context),
                python,
                args.agent_timeout,
                args.answers,
                truths[t].get("encoder_length"),
                truths[t].get("audio_seconds"),
            ): t
            for t in todo
        }
        for fut in concurrent.futures.as_completed(futures):
            t = futures[fut]
            rows[t] = classify(truths[t], fut.result())
    tally = collections.Counter()
    by_kind = collections.defaultdict(collections.Counter)
    for t in types:
        kind = truths[t].get("kind", "causal")
        if "build_error" in truths[t]:
            cls, why = "not built", truths[t]["build_error"]
        else:
            cls, why = rows[t]
            if truths[t].get("kv_error"):
                why += f" [truth's forward failed: {truths[t]['kv_error']}]"
        tally[cls] += 1
        by_kind[kind][cls] += 1
        print(f"{t} | {kind} | {cls} | {why}")
    mode = "config reader alone" if python is None else f"Python {python}"
    for kind, counts in sorted(by_kind.items()):
        print(f"# {kind}: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    print(f"# {mode}, context {args.context}: " + ", ".join(f"{k} {v}" for k, v in tally.most_common()))
    return 1 if tally["SILENT"] else 0


if __name__ == "__main__":
    sys.exit(main())
