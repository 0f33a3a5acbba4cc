#!/usr/bin/env python3
"""Second opinion from transformers: every real case's config.json built as a model on
the meta device (no memory, no weights), its parameters and persistent buffers counted
tensor by tensor and compared with the case's parameter count (the oracle's and the
estimator's, which the Rust test holds equal).

With --forward, traces the encoders' forward instead and compares its peak with the
cases' activation lines.

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

# Encoders are counted as AutoModel builds them (the base model, no task head).
ENCODERS = {"bert", "roberta", "xlm-roberta", "modernbert"}

def build(cfg):
    with torch.device("meta"):
        if cfg.model_type in ENCODERS:
            return transformers.AutoModel.from_config(cfg)
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

if __name__ == "__main__":
    if sys.argv[1:2] == ["--forward"]:
        sys.exit(forwards())
    if sys.argv[1:2] == ["--defaults"]:
        defaults(sys.argv[2:])
        sys.exit(0)
    sys.exit(main())
