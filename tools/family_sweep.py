#!/usr/bin/env python3
"""Every model family the installed transformers builds as a causal LM, answered by
`gpumem-agent estimate` and checked against transformers' own modules.

For each ``model_type`` that maps to a causal-LM class, the config class's defaults are
written as ``save_pretrained`` writes them (config.json), and the model is built from
them on PyTorch's ``meta`` device (no weight, no memory) for the truth:

* parameters: every parameter once (tied ones once), summed from the modules;
* KV cache: the model's own cache after a forward of ``--context`` tokens on meta
  tensors, every tensor it holds (keys, values, recurrent and convolution states),
  in bytes at bfloat16.

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
two shared cores (transformers 5.23, 189 causal-LM types) the truth took about 15
minutes (kept in --out as truth-CONTEXT.jsonl and reused), the agent's answers about 3
minutes without Python and 25 with it (it starts Python only for the families its
reader does not know or refuses); --answers keeps them for a later classification.
Exits 1 when a row is SILENT. The classification and the window's truth are
unit-tested in agent/python/tests/test_family_sweep.py.
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


def causal_types():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) & set(CONFIG_MAPPING.keys()))


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
    # the bare model, an encoder-decoder whole; neither is checked for its cache (no
    # cache, or one over an encoder length a causal forward does not give).
    encdec = bool(getattr(cfg, "is_encoder_decoder", False))
    causal = transformers.AutoModelForCausalLM
    # An encoder's causal-LM head says it wants `is_decoder` (BertLMHeadModel and kin).
    head = causal._model_mapping[type(cfg)]
    encoder = (
        not encdec
        and getattr(cfg, "is_decoder", None) is False
        and "is_decoder" in inspect.getsource(head.__init__)
    )
    with torch.device("meta"):
        if encdec:
            auto = transformers.AutoModelForSeq2SeqLM
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
    if encdec:
        row["kind"] = "encoder-decoder"
        row["kv_error"] = "an encoder-decoder's cache is not checked here"
        return row
    # A recurrent layer's slow path steps token by token: past its time the forward is
    # redone at a shorter context (the agent is then asked at that one).
    # No more tokens than the model has positions for (BERT-style decoders: 512).
    limit = min(
        (v for k in ("max_position_embeddings", "n_positions", "max_seq_len") if isinstance(v := getattr(cfg, k, None), int) and v > 2),
        default=context,
    )
    for tokens in (min(context, limit), min(SHORT_CONTEXT, limit)):
        signal.alarm(forward_timeout)
        try:
            ids = torch.zeros((1, tokens), dtype=torch.long, device="meta")
            with torch.no_grad(), gc._answer_data_dependent(torch, set()):
                out = model(input_ids=ids, use_cache=True)
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


def ask(agent, config, context, python, timeout, answers=None):
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
    if kv is not None and a.get("kv_cache_bytes") != kv:
        diffs.append(f"KV {a.get('kv_cache_bytes')} vs {kv} bytes")
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
    ap.add_argument("types", nargs="*")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import logging

    logging.disable(logging.WARNING)
    out = private_folder(args.out)
    print(f"family sweep: working in {out}", file=sys.stderr)
    types = args.types or causal_types()
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
            truths[t] = r
            f.write(json.dumps(r) + "\n")
            f.flush()
    python = None if args.no_python else args.python
    rows = {}
    todo = [t for t in types if "build_error" not in truths[t]]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {
            pool.submit(ask, args.agent, out / t / "config.json", truths[t].get("context", args.context), python, args.agent_timeout, args.answers): t
            for t in todo
        }
        for fut in concurrent.futures.as_completed(futures):
            t = futures[fut]
            rows[t] = classify(truths[t], fut.result())
    tally = collections.Counter()
    for t in types:
        if "build_error" in truths[t]:
            cls, why = "not built", truths[t]["build_error"]
        else:
            cls, why = rows[t]
            if truths[t].get("kv_error"):
                why += f" [truth's forward failed: {truths[t]['kv_error']}]"
        tally[cls] += 1
        print(f"{t} | {cls} | {why}")
    mode = "config reader alone" if python is None else f"Python {python}"
    print(f"# {mode}, context {args.context}: " + ", ".join(f"{k} {v}" for k, v in tally.most_common()))
    return 1 if tally["SILENT"] else 0


if __name__ == "__main__":
    sys.exit(main())
