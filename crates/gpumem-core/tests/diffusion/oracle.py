#!/usr/bin/env python3
"""Independent oracle for the diffusion cases (`tests/diffusion.rs`).

Every figure here comes from diffusers' and transformers' own modules, built from the
pipelines' real config.json files (`pipelines/`, each folder's source in SOURCES.md) on
PyTorch's meta device -- no weights, no memory:

- weights: every parameter and buffer of each component, with the dtype
  `from_pretrained(torch_dtype=...)` gives it (diffusers' `_keep_in_fp32_modules`
  matched on name components, `model_loading_utils.load_model_dict_into_meta`;
  transformers' T5 `wo` in fp32 under float16 only), and every `nn.Linear` weight in
  the case's storage format by the layouts `../cases/oracle.py` implements;
- activations: the denoiser's forward and the VAE's decode traced under a
  TorchDispatchMode that counts storages as `agent/python/gpumem_trace.py` does
  (its `Tracker`, `Allocator` and SDPA stand-in: the fused kernels' outputs only);
  the figure is the peak of allocated bytes beyond the weights.

- group offloading: each component's parameter and buffer bytes resident at once
  under group offloading while the pipeline calls it (the denoiser's forward, a text
  encoder's forward, the VAE's decode), observed through diffusers' own hooks
  (`group_offload`).

Run by hand with the torch venv (scripts/install-tools.sh: torch, transformers,
diffusers) after changing a case: `python oracle.py` rewrites cases/*.json,
`python oracle.py group` rewrites group_offload.json (`group-components`: its
`components` alone).
"""
import json, os, pathlib, sys, time, warnings
warnings.filterwarnings("ignore")
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[3] / "agent" / "python"))
sys.path.insert(0, str(HERE.parent / "cases"))
import torch, diffusers, transformers
import gpumem_trace as gt
from oracle import linear_bytes  # the formats' layouts, as the LLM cases use them
from diffusers.pipelines.stable_diffusion.safety_checker import StableDiffusionSafetyChecker

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def keep_fp32(cls):
    return list(getattr(cls, "_keep_in_fp32_modules", None) or [])


def build(folder, lib, cls, dtype, layerwise=False):
    """The component on meta, in the dtypes from_pretrained(torch_dtype=dtype) gives;
    `layerwise`: then `enable_layerwise_casting` (fp8 storage, `dtype` compute)."""
    with torch.device("meta"):
        if cls == "StableDiffusionSafetyChecker":
            m = StableDiffusionSafetyChecker(transformers.CLIPConfig.from_pretrained(str(folder)))
        elif lib == "diffusers":
            C = getattr(diffusers, cls)
            m = C.from_config(C.load_config(str(folder)))
        else:
            C = getattr(transformers, cls)
            m = C(C.config_class.from_pretrained(str(folder)))
    keep = keep_fp32(type(m))
    if lib == "diffusers" and keep:
        # diffusers keeps the named modules in fp32 and does not cast the rest with
        # .to(): the parameters it loads take the dtype, non-persistent buffers stay.
        persistent = set(m.state_dict().keys())
        for name, p in m.named_parameters():
            p.data = p.data.to(torch.float32 if any(k in name.split(".") for k in keep) else dtype)
        for mod_name, mod in m.named_modules():
            for bname, b in list(mod._buffers.items()):
                full = (mod_name + "." if mod_name else "") + bname
                if b is not None and b.is_floating_point() and full in persistent:
                    mod._buffers[bname] = b.to(dtype)
    else:
        m = m.to(dtype)
        if lib == "transformers" and dtype == torch.float16:
            for name, p in m.named_parameters():
                if any(k in name.split(".") for k in keep):
                    p.data = p.data.to(torch.float32)
    if layerwise:
        m.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=dtype)
    return m.eval()


def weights(m, fmt):
    """Parameters, and bytes with every nn.Linear weight in `fmt` (None: its dtype)."""
    linear = {id(mod.weight) for mod in m.modules() if isinstance(mod, torch.nn.Linear)}
    params = 0
    nbytes = 0
    for name, p in m.named_parameters():
        params += p.numel()
        if fmt and id(p) in linear and p.dtype != torch.float32:
            nbytes += linear_bytes(fmt, p.shape[0], p.shape[1])
        else:
            nbytes += p.numel() * p.element_size()
    for _, b in m.named_buffers():
        nbytes += b.numel() * b.element_size()
    return params, nbytes

DUMP = int(__import__('os').environ.get('DUMP', '0'))
def trace_call(make, fn, sdpa=True):
    alloc = gt.Allocator(False)
    tr = gt.Tracker(alloc, vocab=-1)
    if sdpa: gt._patch_sdpa(torch)
    mode = gt._dispatch_mode(tr)
    if DUMP: tr.history = gt.History(10)
    tr.begin("model_load")
    with mode, torch.no_grad():
        m = make()
        tr.end()
        base = tr.allocated; n0 = tr.count
        tr.begin("forward")
        out = fn(m)
        del out
        live = tr.end()
    if DUMP:
        rows = [r for r in live if r.index >= n0]
        for r in sorted(rows, key=lambda r: r.index):
            if r.bytes < DUMP: continue
            fr = [f for f in (r.frames or []) if "site-packages/diffusers" in f["filename"]][:2]
            print("%12d %-28s %s" % (r.bytes, r.what, " <- ".join("%s:%d %s" % (f["filename"].split("diffusers/")[-1], f["line"], f["name"]) for f in fr)))
    return tr.peak - base, base

def denoiser(pipe, name, H, W, F=1, B=1, dtype=torch.bfloat16, sdpa=True, text=None, layerwise=False):
    lib, cls, fn = denoiser_call(pipe, name, H, W, F, B, dtype, text)
    t = time.time()
    p, base = trace_call(lambda: build(pipe / name, lib, cls, dtype, layerwise), fn, sdpa)
    return p, base, time.time() - t


def denoiser_call(pipe, name, H, W, F=1, B=1, dtype=torch.bfloat16, text=None):
    """The denoiser's library and class, and its call on meta inputs of the shape."""
    idx = json.loads((pipe / "model_index.json").read_text())
    lib, cls = idx[name]
    cfg = getattr(diffusers, cls).load_config(str(pipe / name))
    cfg = type("C", (), {**{k: None for k in ("addition_embed_type",)}, **cfg})
    dev = "meta"
    def e(*s, dt=dtype): return torch.empty(*s, dtype=dt, device=dev)
    if cls == "UNet2DConditionModel":
        def fn(m):
            kw = {}
            if cfg.addition_embed_type == "text_time":
                kw["added_cond_kwargs"] = {"text_embeds": e(B, 1280), "time_ids": e(B, 6)}
            return m(e(B, cfg.in_channels, H // 8, W // 8), e(B), e(B, text or 77, cfg.cross_attention_dim), **kw)
    elif cls == "SD3Transformer2DModel":
        def fn(m):
            return m(hidden_states=e(B, 16, H // 8, W // 8), encoder_hidden_states=e(B, text or 333, cfg.joint_attention_dim),
                     pooled_projections=e(B, cfg.pooled_projection_dim), timestep=e(B))
    elif cls == "FluxTransformer2DModel":
        L = (H // 16) * (W // 16); T = text or 512
        def fn(m):
            return m(hidden_states=e(B, L, cfg.in_channels), encoder_hidden_states=e(B, T, cfg.joint_attention_dim),
                     pooled_projections=e(B, cfg.pooled_projection_dim), timestep=e(B), img_ids=e(L, 3), txt_ids=e(T, 3),
                     guidance=e(B) if cfg.guidance_embeds else None)
    elif cls == "WanTransformer3DModel":
        lf = (F - 1) // 4 + 1
        def fn(m):
            return m(hidden_states=e(B, cfg.in_channels, lf, H // 8, W // 8), timestep=e(B), encoder_hidden_states=e(B, text or 512, cfg.text_dim))
    return lib, cls, fn



def vae(pipe, H, W, F=1, B=1, dtype=torch.bfloat16, tiling=False, slicing=False):
    idx = json.loads((pipe / "model_index.json").read_text())
    lib, cls = idx["vae"]
    cfg = getattr(diffusers, cls).load_config(str(pipe / "vae"))
    def make():
        m = build(pipe / "vae", lib, cls, dtype)
        if tiling: m.enable_tiling()
        if slicing: m.enable_slicing()
        return m
    if cls == "AutoencoderKL":
        z = cfg["latent_channels"]
        fn = lambda m: m.decode(torch.empty(B, z, H // 8, W // 8, dtype=dtype, device="meta")).sample
    else:
        z = cfg["z_dim"]; lf = (F - 1) // 4 + 1
        fn = lambda m: m.decode(torch.empty(B, z, lf, H // 8, W // 8, dtype=dtype, device="meta")).sample
    t = time.time()
    p, base = trace_call(make, fn, True)
    return p, base, time.time() - t


# Each case: a pipeline folder, the workload (the CLI's flags), and what guidance does
# to the denoiser's batch in that pipeline's __call__ (diffusers 0.42.1): SD, SDXL and
# SD3 concatenate (`torch.cat([latents] * 2)`), Wan calls twice, FLUX.1-dev runs none.
CASES = [
    ("sd15-512", "stable-diffusion-v1-5", dict(height=512, width=512, dtype="fp16"), 2),
    ("sd15-768-b4", "stable-diffusion-v1-5", dict(height=768, width=768, batch=4, dtype="fp16"), 2),
    ("sdxl-1024", "stable-diffusion-xl-base-1.0", dict(height=1024, width=1024, dtype="fp16"), 2),
    ("sdxl-1024-layerwise", "stable-diffusion-xl-base-1.0", dict(height=1024, width=1024, dtype="bf16", layerwise="true"), 2),
    ("sdxl-1024-bf16", "stable-diffusion-xl-base-1.0", dict(height=1024, width=1024, dtype="bf16"), 2),
    ("sd35-medium-1024", "stable-diffusion-3.5-medium", dict(height=1024, width=1024, dtype="bf16"), 2),
    ("sd35-medium-1024-layerwise", "stable-diffusion-3.5-medium", dict(height=1024, width=1024, dtype="bf16", layerwise="true"), 2),
    ("sd35-large-1024-nf4", "stable-diffusion-3.5-large", dict(height=1024, width=1024, dtype="bf16", format="nf4"), 2),
    ("flux-dev-1024", "FLUX.1-dev", dict(height=1024, width=1024, dtype="bf16"), 1),
    ("flux-dev-768x1360-b2", "FLUX.1-dev", dict(height=768, width=1360, batch=2, dtype="bf16"), 1),
    ("flux-dev-1024-nf4", "FLUX.1-dev", dict(height=1024, width=1024, dtype="bf16", format="nf4"), 1),
    ("flux-dev-1024-layerwise", "FLUX.1-dev", dict(height=1024, width=1024, dtype="bf16", layerwise="true"), 1),
    ("wan21-1.3b-480p-81", "Wan2.1-T2V-1.3B-Diffusers", dict(height=480, width=832, frames=81, dtype="bf16"), 1),
    ("wan21-1.3b-480p-81-layerwise", "Wan2.1-T2V-1.3B-Diffusers", dict(height=480, width=832, frames=81, dtype="bf16", layerwise="true"), 1),
    ("wan21-14b-720p-81", "Wan2.1-T2V-14B-Diffusers", dict(height=720, width=1280, frames=81, dtype="bf16"), 1),
    ("wan22-a14b-480p-81", "Wan2.2-T2V-A14B-Diffusers", dict(height=480, width=832, frames=81, dtype="bf16"), 1),
]


def case(name, folder, w, cfg_batch):
    pipe = HERE / "pipelines" / folder
    idx = json.loads((pipe / "model_index.json").read_text())
    dtype = DTYPES[w["dtype"]]
    comps = {}
    den = None
    for k, v in idx.items():
        if not isinstance(v, list) or v[0] is None or not (pipe / k / "config.json").exists():
            continue
        is_den = v[1].endswith(("Transformer2DModel", "Transformer3DModel", "UNet2DConditionModel"))
        m = build(pipe / k, v[0], v[1], dtype, layerwise=is_den and w.get("layerwise") == "true")
        fmt = w.get("format") if is_den else None
        params, nbytes = weights(m, fmt)
        comps[k] = {"class": v[1], "parameters": params, "bytes": nbytes}
        if fmt is None and den is None and v[1].endswith(("Transformer2DModel", "Transformer3DModel", "UNet2DConditionModel")):
            den = k
        if den is None and fmt:
            den = k
        del m
    H, W, F, B = w["height"], w["width"], w.get("frames", 1), w.get("batch", 1)
    act, _, t1 = denoiser(pipe, den, H, W, F, B * cfg_batch, dtype=dtype, layerwise=w.get("layerwise") == "true")
    # SDXL's pipeline decodes an fp16 VAE in fp32 (force_upcast).
    vdtype = torch.float32 if (w["dtype"] == "fp16" and folder.startswith("stable-diffusion-xl")) else dtype
    dec, _, t2 = vae(pipe, H, W, F, B, dtype=vdtype)
    inputs = {k: str(v) for k, v in w.items()}
    out = {"name": name, "pipeline": folder, "input": inputs,
           "expect": {"components": comps, "denoiser_activations": act, "vae_decode": dec},
           "traced_with": "torch %s, diffusers %s, transformers %s" % (torch.__version__.split("+")[0], diffusers.__version__, transformers.__version__)}
    (HERE / "cases").mkdir(exist_ok=True)
    (HERE / "cases" / (name + ".json")).write_text(json.dumps(out, indent=1) + "\n")
    print(name, "denoiser", act, "vae", dec, "%.1f+%.1f s" % (t1, t2))


def component_call(pipe, name, dtype):
    """A component's library and class, and the call the pipeline makes of it on meta
    inputs: the denoiser's forward, the VAE's `decode`, a text encoder's forward over
    77 tokens."""
    idx = json.loads((pipe / "model_index.json").read_text())
    lib, cls = idx[name]
    wan = "Wan" in pipe.name
    if cls.endswith(("Transformer2DModel", "Transformer3DModel", "UNet2DConditionModel")):
        return denoiser_call(pipe, name, 256, 256, 5 if wan else 1, dtype=dtype)
    if cls.startswith("AutoencoderKL"):
        cfg = getattr(diffusers, cls).load_config(str(pipe / name))
        if cls == "AutoencoderKL":
            z = torch.empty(1, cfg["latent_channels"], 32, 32, dtype=dtype, device="meta")
        else:
            z = torch.empty(1, cfg["z_dim"], 2, 32, 32, dtype=dtype, device="meta")
        return lib, cls, lambda m: m.decode(z).sample
    ids = torch.zeros(1, 77, dtype=torch.long, device="meta")
    return lib, cls, lambda m: m(input_ids=ids)[0]


def group_offload(pipe, name, dtype, offload_type, blocks, stream):
    """The largest sum of parameter and buffer bytes diffusers' group offloading holds
    on the onload device at once, over two calls of the component (the second is the one
    a stream prefetches in). The groups' own `onload_` and `offload_`
    (hooks/group_offloading.py `ModuleGroup`) are wrapped to keep the set of onloaded
    groups; the model lives on meta and both devices are meta, so nothing moves.

    With `use_stream=True` diffusers wants an accelerator's stream and pinned host
    copies: the backend is replaced by one whose stream does nothing and the host
    copies (`_to_cpu`, `_pinned_memory_tensors`) keep the tensors as they are. Only when
    each group is onloaded and offloaded is observed, as diffusers' hooks decide it;
    what a real stream's timing or `record_stream` does to the allocator is not."""
    import contextlib
    from diffusers.hooks import group_offloading as G
    resident, peak = {}, [0]

    def nbytes(g):
        ts = [t for m in g.modules for t in list(m.parameters()) + list(m.buffers())]
        ts += list(g.parameters) + list(g.buffers)
        return sum({id(t): t.numel() * t.element_size() for t in ts}.values())

    on0, off0 = G.ModuleGroup.onload_, G.ModuleGroup.offload_
    saved = (on0, off0, G.TorchDeviceBackend, G.ModuleGroup._to_cpu, G.ModuleGroup._pinned_memory_tensors)

    def onload(self):
        resident[id(self)] = nbytes(self)
        peak[0] = max(peak[0], sum(resident.values()))
        return on0(self)

    def offload(self):
        resident.pop(id(self), None)
        return off0(self)

    class Stream:
        def synchronize(self): pass

    class Backend:
        def __init__(self, device): pass
        def stream(self, s): return contextlib.nullcontext()
        def current_stream(self): return Stream()
    Backend.Stream = Stream

    @contextlib.contextmanager
    def pinned(self):
        yield self.cpu_param_dict

    G.ModuleGroup.onload_, G.ModuleGroup.offload_ = onload, offload
    G.TorchDeviceBackend = Backend
    G.ModuleGroup._to_cpu = staticmethod(lambda t, low: t.data)
    G.ModuleGroup._pinned_memory_tensors = pinned
    try:
        lib, cls, fn = component_call(pipe, name, dtype)
        m = build(pipe / name, lib, cls, dtype)
        meta = torch.device("meta")
        kw = dict(onload_device=meta, offload_device=meta, offload_type=offload_type,
                  num_blocks_per_group=blocks, use_stream=stream)
        # What `DiffusionPipeline.enable_group_offload` does to each component
        # (pipelines/pipeline_utils.py): the model's own `enable_group_offload` where it
        # has one (diffusers' models), `apply_group_offloading` otherwise (transformers').
        if hasattr(m, "enable_group_offload"):
            m.enable_group_offload(**kw)
        else:
            G.apply_group_offloading(m, **kw)
        with torch.no_grad():
            fn(m)
            first = peak[0]
            peak[0] = 0
            fn(m)
        return max(first, peak[0]) if not stream else peak[0]
    finally:
        (G.ModuleGroup.onload_, G.ModuleGroup.offload_, G.TorchDeviceBackend,
         G.ModuleGroup._to_cpu, G.ModuleGroup._pinned_memory_tensors) = saved


# Group offloading of each denoiser: (pipeline, dtype, offload_type, num_blocks_per_group, use_stream).
GROUP_PIPES = [("stable-diffusion-v1-5", "fp16"), ("stable-diffusion-xl-base-1.0", "fp16"),
               ("stable-diffusion-3.5-medium", "bf16"), ("stable-diffusion-3.5-large", "bf16"),
               ("FLUX.1-dev", "bf16"), ("Wan2.1-T2V-1.3B-Diffusers", "bf16"), ("Wan2.1-T2V-14B-Diffusers", "bf16")]
GROUP_MODES = [("block_level", 1, False), ("block_level", 2, False), ("block_level", 1, True),
               ("leaf_level", None, False), ("leaf_level", None, True)]


def group_cases():
    rows = []
    for folder, dt in GROUP_PIPES:
        pipe = HERE / "pipelines" / folder
        idx = json.loads((pipe / "model_index.json").read_text())
        name = next(k for k, v in idx.items() if isinstance(v, list) and v[1] and
                    v[1].endswith(("Transformer2DModel", "Transformer3DModel", "UNet2DConditionModel")))
        for kind, n, stream in GROUP_MODES:
            b = group_offload(pipe, name, DTYPES[dt], kind, n, stream)
            rows.append({"pipeline": folder, "dtype": dt, "offload_type": kind, "num_blocks_per_group": n,
                         "use_stream": stream, "resident_bytes": b})
            print(folder, kind, n, stream, b)
    doc = json.loads((HERE / "group_offload.json").read_text())
    doc.update({"traced_with": "torch %s, diffusers %s, transformers %s" % (torch.__version__.split("+")[0], diffusers.__version__, transformers.__version__),
                "cases": rows})
    (HERE / "group_offload.json").write_text(json.dumps(doc, indent=1) + "\n")


def group_component_cases():
    """`pipe.enable_group_offload(...)` reaches every component: the text encoders
    and the VAE of each pipeline, in each mode, while the pipeline calls them (a text
    encoder's forward, the VAE's decode), as `components` of group_offload.json."""
    rows = []
    for folder, dt in GROUP_PIPES:
        pipe = HERE / "pipelines" / folder
        idx = json.loads((pipe / "model_index.json").read_text())
        for name, v in idx.items():
            if not isinstance(v, list) or not v[1] or not (name.startswith("text_encoder") or name == "vae"):
                continue
            for kind, n, stream in GROUP_MODES:
                b = group_offload(pipe, name, DTYPES[dt], kind, n, stream)
                rows.append({"pipeline": folder, "component": name, "dtype": dt, "offload_type": kind,
                             "num_blocks_per_group": n, "use_stream": stream, "resident_bytes": b})
                print(folder, name, kind, n, stream, b, flush=True)
    doc = json.loads((HERE / "group_offload.json").read_text())
    doc["components"] = rows
    (HERE / "group_offload.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    only = sys.argv[1:]
    if only == ["group"]:
        group_cases()
        group_component_cases()
        sys.exit(0)
    if only == ["group-components"]:
        group_component_cases()
        sys.exit(0)
    for c in CASES:
        if not only or c[0] in only:
            case(*c)
