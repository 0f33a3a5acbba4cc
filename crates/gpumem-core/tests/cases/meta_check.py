#!/usr/bin/env python3
"""Second opinion from transformers: every real case's config.json built as a model on
the meta device (no memory, no weights), its parameters and persistent buffers counted
tensor by tensor and compared with the case's parameter count (the oracle's and the
estimator's, which the Rust test holds equal).

With --defaults TYPE…, writes transformers/TYPE.json instead: the config class's
defaults and the count of the model built from them, which the Rust test
`transformers_defaults` reads (no transformers needed there).

Run with the torch venv (scripts/install-tools.sh): it needs torch and transformers,
and prints one row per case: the case's count, transformers' count, and the result —
`same`, a difference named by the tensors behind it, or why transformers cannot
build the model (a model_type it does not know). Exits 1 on an unexplained difference.
"""
import json, pathlib, sys, warnings

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

def build(cfg):
    with torch.device("meta"):
        for auto in (transformers.AutoModelForCausalLM, transformers.AutoModelForImageTextToText):
            try:
                return auto.from_config(cfg, trust_remote_code=False)
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
    return 1 if bad else 0

def defaults(types):
    """Writes transformers/<model_type>.json: the config class's defaults as
    transformers writes them (`to_dict`) and the parameters and persistent buffers of
    the model it builds from them, for the Rust test `transformers_defaults`."""
    out = HERE / "transformers"
    out.mkdir(exist_ok=True)
    for mt in types:
        cfg = AutoConfig.for_model(mt)
        n = count(build(cfg))
        doc = {"model_type": mt, "transformers": transformers.__version__, "parameters": n,
               "config": json.loads(json.dumps(cfg.to_dict(), default=str))}
        (out / f"{mt}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(mt, n)

if __name__ == "__main__":
    if sys.argv[1:2] == ["--defaults"]:
        defaults(sys.argv[2:])
        sys.exit(0)
    sys.exit(main())
