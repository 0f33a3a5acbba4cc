#!/usr/bin/env python3
"""The vision towers' forward over an image, traced on the meta device: Gemma 3's and
PaliGemma's SigLIP towers with their projectors, Gemma 4's tower with its embedder,
Qwen2-VL's, Qwen2.5-VL's, Qwen3-VL's and Qwen3.5's towers with their mergers and Llama
4's tiled tower with its adapter, built by transformers from the configs in
`agent/models/` (Qwen2-VL's, Llama 4's and Gemma 4's from `tests/cases/configs/`,
PaliGemma's, Gemma 4 E4B's tower, Gemma 4 variants and a Qwen2-VL variant written out
below), run under torch.no_grad() through the model's own
`get_image_features` as generate's first forward runs it, with the pixel values as
the processors hand them over (fp32; Llama 4's tiles bf16; Gemma 4's patches padded
to the processor's budget, with their int64 positions).

Gemma 4's tower has two data-dependent steps the meta device cannot run, whose
answers a given image fixes (its soft tokens, the patches it fills):
`Gemma4VisionModel.forward`'s `hidden_states[pooler_mask]` is run as ATen runs a
boolean index (`expandTensors` in TensorAdvancedIndexing.cpp: the mask's
`nonzero()`, int64 rows of the mask's dims, then `index` with its columns), with
the nonzero's output allocated here at the known count (the images' soft tokens);
and `get_image_features`' `.tolist()` of each image's soft tokens, a host read,
answers that count. Both allocate on the meta device what they allocate on CUDA; the
index's output is the same request. The encoder asks one question of the data, "no
padding?" (`_ignore_bidirectional_mask_sdpa`: `padding_mask.all()`); the tracker's
answer, yes, is the true one for images that fill the budget, so no attention mask
is built, as on CUDA; for a padded image (fewer soft tokens than the budget) it is
answered no here, and transformers builds its mask (`create_bidirectional_mask`) as
on CUDA. A padded image is traced under eager only: under sdpa CUDA converts the
boolean mask and runs the memory-efficient kernel (ATen `scaled_dot_product_attention`,
`convert_boolean_attn_mask`, `preprocess_mask`), which the trace's SDPA stand-in does
not follow. `F.one_hot` in the pooler runs on meta as an int64 tensor of the same size
CUDA's `zeros` + `scatter_` gives.

The tracking is `agent/python/gpumem_trace.py`'s (its Tracker with the caching
allocator's 512-byte rounding, its dispatch mode, its SDPA stand-in that runs the
fused kernel CUDA picks); the pixel values are allocated before the phase begins, so
each figure is the tower's peak beyond them. The index tensors transformers builds
from `grid_thw` (`vision_utils.py`) are built here on the host and handed to the
tower the way its kwargs take precomputed ones, the ones it keeps on the device
copied to the meta device inside the phase; `cu_seqlens` and Qwen2.5-VL's
`cu_window_seqlens` stay on the host (the split reads their values), with a meta
stand-in of their size beside them as the device holds them.

With `--merge`, each of MERGE_CASES runs on: the model's own forward, handed the
tower's output as generate hands it over (`mm_encoder_outputs`), over a prompt of the
given tokens, up to and with its `masked_scatter` (the text model is not run), and the
line's figure is the merge's peak beyond the pixel values, the tower's outputs held then
included. CUDA's scratch of `masked_scatter` (its int64 prefix sum and contiguous mask)
and of `nonzero` (its contiguous mask) is not on the meta device; `src/estimate/tower.rs`
counts it from ATen's code. Gemma 4's `inputs_embeds[image_mask]` is run as its pooler's
boolean index is, at the known count (the image's tokens x the text width).

With `--prefill`, each of PREFILL_CASES runs the whole model's first forward
(`AutoModelForImageTextToText`, its text config cut to the given layers, the layer
types kept in their pattern) twice on the meta device: over a prompt holding the
image, handed the tower's output as generate hands it over (`mm_encoder_outputs`)
with the processor's `attention_mask` and (Gemma 3, PaliGemma) `token_type_ids` (Gemma
4: `mm_token_type_ids`), and over a text prompt as `gpumem-agent trace` runs it (with
`generate`'s attention mask of ones); the line is the first's peak less
the second's, what the image's prompt holds through the language model beyond a text
prompt's (the placeholder mask, the bidirectional attention's block ids and masks,
Llama 4's projected image embeddings), which `src/estimate/tower.rs` counts.

Prints one line per case: model, attention, image (height x width, images; Llama 4:
the tile's side and the tiles), the traced peak in bytes; arguments keep the cases
whose model names contain one of them. `src/estimate/tower.rs`'s test holds these figures. Run with
transformers 5.23 and torch 2.11 (`$GPUMEM_TOOLS/torch-venv/bin/python`).
"""
import contextlib
import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig
from transformers import vision_utils as vu

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "agent" / "python"))
import gpumem_trace as gt  # noqa: E402

# (model, attention, height, width, images). Qwen2.5-VL's images one merged unit
# tall (28 px) have the most windows of any image of as many patches.
CASES = [
    ("google--gemma-3-4b-it", "sdpa", 896, 896, 1),
    ("google--gemma-3-4b-it", "eager", 896, 896, 1),
    ("google--gemma-3-4b-it", "sdpa", 896, 896, 2),
    ("google--gemma-3-4b-it", "eager", 896, 896, 2),
    ("Qwen--Qwen2.5-VL-7B-Instruct", "sdpa", 448, 448, 1),
    ("Qwen--Qwen2.5-VL-7B-Instruct", "sdpa", 28, 36288, 1),
    ("Qwen--Qwen2.5-VL-7B-Instruct", "sdpa", 28, 114688, 1),
    ("Qwen--Qwen2.5-VL-7B-Instruct", "sdpa", 1792, 1792, 1),
    ("Qwen--Qwen2.5-VL-7B-Instruct", "eager", 448, 448, 1),
    ("Qwen--Qwen2.5-VL-7B-Instruct", "eager", 28, 36288, 1),
    ("Qwen--Qwen3-VL-8B-Instruct", "sdpa", 512, 512, 1),
    ("Qwen--Qwen3-VL-8B-Instruct", "sdpa", 1792, 1792, 1),
    ("Qwen--Qwen3-VL-8B-Instruct", "sdpa", 1024, 512, 2),
    ("Qwen--Qwen3-VL-8B-Instruct", "eager", 512, 512, 1),
    ("Qwen--Qwen3-VL-2B-Instruct", "sdpa", 512, 512, 1),
    ("Qwen--Qwen3-VL-30B-A3B-Instruct", "sdpa", 512, 512, 1),
    ("qwen2-vl-7b-instruct", "sdpa", 448, 448, 1),
    ("qwen2-vl-7b-instruct", "sdpa", 1792, 1792, 1),
    ("qwen2-vl-7b-instruct", "sdpa", 896, 448, 2),
    ("qwen2-vl-7b-instruct", "eager", 448, 448, 1),
    ("qwen2-vl-7b-instruct", "eager", 896, 448, 2),
    # Qwen2-VL's tower with an MLP twice as wide (not a published config), where the
    # MLP's moment (quick_gelu's `1.702 * x` and its sigmoid beside fc1's output) peaks.
    ("qwen2-vl-7b-wide-mlp", "sdpa", 448, 448, 1),
    ("paligemma2-3b-pt-448", "sdpa", 448, 448, 1),
    ("paligemma2-3b-pt-448", "eager", 448, 448, 1),
    ("paligemma2-3b-pt-448", "sdpa", 448, 448, 2),
    ("paligemma2-10b-pt-896", "sdpa", 896, 896, 1),
    ("paligemma-3b-pt-224", "sdpa", 224, 224, 1),
    ("paligemma-3b-pt-224", "eager", 224, 224, 1),
    ("Qwen--Qwen3.5-9B", "sdpa", 512, 512, 1),
    ("Qwen--Qwen3.5-9B", "sdpa", 1792, 1792, 1),
    ("Qwen--Qwen3.5-9B", "sdpa", 1024, 512, 2),
    ("Qwen--Qwen3.5-9B", "eager", 512, 512, 1),
    ("Qwen--Qwen3.5-35B-A3B", "sdpa", 512, 512, 1),
    # Llama 4: 336-pixel tiles (the last field counts tiles: one, a 2 x 2 grid and its
    # global tile, the processor's 16 and a global one).
    ("llama-4-scout", "sdpa", 336, 336, 1),
    ("llama-4-scout", "sdpa", 336, 336, 5),
    ("llama-4-scout", "sdpa", 336, 336, 17),
    ("llama-4-scout", "eager", 336, 336, 1),
    ("llama-4-scout", "eager", 336, 336, 5),
    ("llama-4-maverick", "sdpa", 336, 336, 5),
    # Gemma 4: images that fill the processor's patch budget (`max_soft_tokens` x
    # pooling_kernel_size^2 patches of 16 px: 280 soft tokens are 42 x 60 patches,
    # 70 are 21 x 30, 1120 are 84 x 120), so that no patch is padding.
    ("gemma-4-31b", "sdpa", 672, 960, 1),
    ("gemma-4-31b", "eager", 672, 960, 1),
    ("gemma-4-31b", "sdpa", 672, 960, 2),
    ("gemma-4-31b", "eager", 672, 960, 2),
    ("gemma-4-31b", "sdpa", 336, 480, 1),
    ("gemma-4-31b", "sdpa", 336, 480, 3),
    ("gemma-4-31b", "sdpa", 1344, 1920, 1),
    ("gemma-4-31b-narrow-mlp", "sdpa", 672, 960, 1),
    ("gemma-4-31b-narrow-mlp", "eager", 672, 960, 1),
    ("gemma-4-31b-narrow-mlp", "sdpa", 1344, 1920, 1),
    ("gemma-4-31b-wide", "sdpa", 672, 960, 1),
    ("gemma-4-31b-wide", "eager", 672, 960, 1),
    # A square image (48 x 48 patches, 256 soft tokens) padded to the default budget
    # of 280: eager only (see above).
    ("gemma-4-31b", "eager", 768, 768, 1),
    ("gemma-4-31b", "eager", 768, 768, 2),
    ("gemma-4-31b", "eager", 1344, 1920, 1),
    # Gemma 4's tower with clipped linears (google/gemma-4-E4B-it's) and with grouped
    # key/value heads, at 280 and 1 120 soft tokens; with a narrow MLP, where the norms'
    # moments (`v_norm`'s, `q_norm`'s with grouped heads) are the peak.
    ("gemma-4-e4b", "sdpa", 672, 960, 1),
    ("gemma-4-e4b", "eager", 672, 960, 1),
    ("gemma-4-e4b", "sdpa", 1344, 1920, 1),
    ("gemma-4-e4b", "eager", 1344, 1920, 1),
    ("gemma-4-31b-gqa", "sdpa", 672, 960, 1),
    ("gemma-4-31b-gqa", "eager", 672, 960, 1),
    ("gemma-4-31b-gqa", "sdpa", 1344, 1920, 1),
    ("gemma-4-31b-gqa", "eager", 1344, 1920, 1),
    ("gemma-4-e4b-narrow-mlp", "sdpa", 672, 960, 1),
    ("gemma-4-e4b-narrow-mlp", "eager", 672, 960, 1),
    ("gemma-4-31b-gqa-narrow-mlp", "sdpa", 672, 960, 1),
    ("gemma-4-31b-gqa-narrow-mlp", "eager", 672, 960, 1),
    ("gemma-4-e4b-gqa-narrow-mlp", "sdpa", 672, 960, 1),
    ("gemma-4-e4b-gqa-narrow-mlp", "eager", 672, 960, 1),
]

# Gemma 4's tower as `configs/gemma-4-31b.json` has it (Gemma4VisionConfig's defaults)
# and two variants of it, not published configs, that move the peak to other moments
# of the same code: an MLP as narrow as the tower (the attention's and the pooler's
# moments), and a tower 1152 wide of 16 heads of 72 (head_dim not a power of two).
# "gemma-4-e4b" is the tower of google/gemma-4-E4B-it
# (https://huggingface.co/google/gemma-4-E4B-it/blob/main/config.json, as public
# copies quote its `vision_config`: Gemma4VisionConfig's defaults with
# `use_clipped_linears: true` and `standardize: false`), beside the 31B's text model,
# which the tower's peak does not read; the grouped-KV ones (4 key/value heads for 12)
# are not published configs.
GEMMA4_VARIANTS = {
    "gemma-4-31b-narrow-mlp": {"intermediate_size": 768},
    "gemma-4-31b-wide": {"hidden_size": 1152, "num_attention_heads": 16,
        "num_key_value_heads": 16, "head_dim": 72, "intermediate_size": 4304,
        "num_hidden_layers": 27},
    "gemma-4-e4b": {"use_clipped_linears": True, "standardize": False},
    "gemma-4-31b-gqa": {"num_key_value_heads": 4},
    "gemma-4-e4b-narrow-mlp": {"use_clipped_linears": True, "intermediate_size": 768},
    "gemma-4-31b-gqa-narrow-mlp": {"num_key_value_heads": 4, "intermediate_size": 768},
    "gemma-4-e4b-gqa-narrow-mlp": {"use_clipped_linears": True, "num_key_value_heads": 4,
        "intermediate_size": 768},
}
# The processor's patch budgets (`image_processing_gemma4.py` `_SUPPORTED_SOFT_TOKENS`)
# and its default (`Gemma4ImageProcessor.max_soft_tokens`).
GEMMA4_BUDGETS = (70, 140, 280, 560, 1120)
GEMMA4_DEFAULT_BUDGET = 280

# PaliGemma's configs are not bundled: the towers of google/paligemma-3b-pt-224,
# google/paligemma2-3b-pt-448 and google/paligemma2-10b-pt-896 (their
# `vision_config`, `projection_dim`; the language model only sizes the projector).
PALIGEMMA = {
    "paligemma-3b-pt-224": (224, 2048, {"model_type": "gemma", "hidden_size": 2048,
        "num_hidden_layers": 1, "intermediate_size": 16384, "num_attention_heads": 8,
        "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 257216}),
    "paligemma2-3b-pt-448": (448, 2304, {"model_type": "gemma2", "hidden_size": 2304,
        "num_hidden_layers": 1, "intermediate_size": 9216, "num_attention_heads": 8,
        "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 257216}),
    "paligemma2-10b-pt-896": (896, 3584, {"model_type": "gemma2", "hidden_size": 3584,
        "num_hidden_layers": 1, "intermediate_size": 14336, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 257216}),
}


def config(name):
    if name == "qwen2-vl-7b-wide-mlp":
        c = config("qwen2-vl-7b-instruct")
        c["vision_config"] = {**c["vision_config"], "mlp_ratio": 8}
        return c
    if name in GEMMA4_VARIANTS:
        c = config("gemma-4-31b")
        c["vision_config"] = {**c["vision_config"], **GEMMA4_VARIANTS[name]}
        return c
    if name in PALIGEMMA:
        side, proj, text = PALIGEMMA[name]
        return {"model_type": "paligemma", "projection_dim": proj, "hidden_size": proj,
                "text_config": text,
                "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152,
                    "intermediate_size": 4304, "num_hidden_layers": 27,
                    "num_attention_heads": 16, "patch_size": 14, "image_size": side,
                    "projection_dim": proj, "vision_use_head": False}}
    cases = ROOT / "crates" / "gpumem-core" / "tests" / "cases" / "configs" / f"{name}.json"
    if cases.exists():
        c = json.loads(cases.read_text())
        return {k: v for k, v in c.items() if not k.startswith("_")}
    return json.loads((ROOT / "agent" / "models" / f"{name}.json").read_text())["config"]


def _gemma4_mask_mode(count, images, padded):
    """The data-dependent steps of Gemma 4's tower on the meta device, as CUDA runs
    them for images of `count` soft tokens in all (`padded`: fewer than the budget's)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten

    class Mask(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if (padded and func is aten._local_scalar_dense.default
                    and args[0].dtype == torch.bool):
                # The encoder's one question, "no padding?"
                # (`_ignore_bidirectional_mask_sdpa`: `padding_mask.all()`): no.
                return False
            if func is aten.index.Tensor and any(
                    i is not None and i.dtype == torch.bool for i in args[1]):
                # `Gemma4VisionModel.forward`: `hidden_states[pooler_mask]`. ATen's
                # `index` turns a boolean index into `mask.nonzero()` (int64, count x
                # the mask's dims; TensorAdvancedIndexing.cpp `expandTensors`) and
                # gathers with its columns: the same here, the count given.
                src, idx = args
                (mask,) = [i for i in idx if i is not None]
                nz = torch.empty((count, mask.dim()), dtype=torch.int64, device="meta")
                return func(src, list(nz.unbind(1)))
            if (func is aten._to_copy.default and _is_meta(args[0])
                    and kwargs.get("device") == torch.device("cpu")):
                # `Gemma4Model.get_image_features`: `.tolist()` of each image's soft
                # tokens, read on the host (nothing on the device).
                return torch.full(args[0].shape, count // images, dtype=args[0].dtype)
            return func(*args, **kwargs)

    return Mask()


def _is_meta(t):
    return isinstance(t, torch.Tensor) and t.device.type == "meta"


class _Merged(Exception):
    """Raised once the forward's `masked_scatter` has run: the merge is traced."""


def _merge_mode(count):
    """The merge step of the model's forward on the meta device: a boolean index
    (Gemma 4's `inputs_embeds[image_mask].numel()`) run as ATen runs it, its
    `nonzero()` allocated at the known count (`count` selected values); the forward
    stopped after `masked_scatter` (the text model is not run)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is aten.index.Tensor and any(
                    i is not None and i.dtype == torch.bool for i in args[1]):
                src, idx = args
                (mask,) = [i for i in idx if i is not None]
                nz = torch.empty((count, mask.dim()), dtype=torch.int64, device="meta")
                return func(src, list(nz.unbind(1)))
            out = func(*args, **kwargs)
            if func is aten.masked_scatter.default:
                raise _Merged()
            return out

    return Mode()


def _index_mode(count):
    """Gemma 4's boolean index of the embeddings (`inputs_embeds[image_mask].numel()`)
    run as ATen runs it, its `nonzero()` allocated at the known count, through the
    whole forward."""
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is aten.index.Tensor and any(
                    i is not None and i.dtype == torch.bool for i in args[1]):
                src, idx = args
                (mask,) = [i for i in idx if i is not None]
                nz = torch.empty((count, mask.dim()), dtype=torch.int64, device="meta")
                return func(src, list(nz.unbind(1)))
            return func(*args, **kwargs)

    return Mode()


def trace_merge(tr, model, mt, cfg, out, images, soft, prompt):
    """The forward's merge of the image embeddings `out` (get_image_features' output,
    as generate hands it over in `mm_encoder_outputs`) into a prompt of `prompt`
    tokens a sequence, `soft` of them an image's: its peak beyond what was live before
    it (the tower's outputs)."""
    tc = cfg.get_text_config()
    image_token = getattr(cfg, "image_token_id", None)
    if image_token is None:
        image_token = cfg.image_token_index
    # Llama 4's "images" are one image's tiles: one sequence.
    rows = 1 if mt == "llama4" else images
    ids = torch.zeros(rows, prompt, dtype=torch.int64, device="meta")
    kw = {"input_ids": ids, "mm_encoder_outputs": {"image": out}}
    if mt.startswith(("qwen", )):
        kw["image_grid_thw"] = torch.tensor([[1, 2, 2]] * images)
    tr.begin("merge")
    start = tr.allocated
    try:
        with _merge_mode(rows * soft * tc.hidden_size):
            model(**kw)
    except _Merged:
        pass
    tr.end()
    del kw, ids
    return tr.peak - start


def trace(name, attn, height, width, images, prompt=None):
    c = config(name)
    cfg = AutoConfig.for_model(**c)
    mt = c["model_type"]
    dtype = torch.bfloat16
    tr = gt.Tracker(gt.Allocator(False), vocab=-1)
    with gt._dispatch_mode(tr), torch.no_grad():
        with torch.device("meta"):
            # Gemma 2 has no sdpa path: PaliGemma 2's language model (not run) is eager.
            impl = {"vision_config": attn, "text_config": "eager", "": "eager"} if mt == "paligemma" else attn
            if mt in ("llama4", "gemma4"):
                cfg.text_config.num_hidden_layers = 1
            model = transformers.AutoModel.from_config(cfg, attn_implementation=impl, dtype=dtype).eval()
        keep = []
        if mt == "gemma4":
            # The processor's output for images filling the budget
            # (`Gemma4ImageProcessor._preprocess`): patches of 3 x p^2 fp32 values and
            # their (x, y) positions, none of them padding.
            vc = cfg.vision_config
            p, k = vc.patch_size, vc.pooling_kernel_size
            patches = (height // p) * (width // p)
            soft = patches // (k * k)
            assert soft * k * k == patches
            # The budget: the image's tokens where they are a supported budget (the
            # processor set to it), else the default or the smallest that holds them.
            budget = soft if soft in GEMMA4_BUDGETS else min(
                b for b in GEMMA4_BUDGETS if b >= max(soft, GEMMA4_DEFAULT_BUDGET))
            padded = soft < budget
            assert attn == "eager" or not padded
            n = budget * k * k
            px = torch.zeros(images, n, 3 * p * p, dtype=torch.float32, device="meta")
            pos = torch.zeros(images, n, 2, dtype=torch.int64, device="meta")
            tr.begin("forward")
            base = tr.allocated
            with _gemma4_mask_mode(images * soft, images, padded):
                out = model.get_image_features(pixel_values=px, image_position_ids=pos)
        elif mt in ("gemma3", "paligemma", "llama4"):
            # Llama 4's processor hands its tiles over in bf16
            # (`Llama4ImageProcessor.rescale_and_normalize`).
            pdt = torch.bfloat16 if mt == "llama4" else torch.float32
            px = torch.zeros(images, 3, height, width, dtype=pdt, device="meta")
            tr.begin("forward")
            base = tr.allocated
            out = model.get_image_features(pixel_values=px)
        else:
            vc = cfg.vision_config
            p, tp, m = vc.patch_size, vc.temporal_patch_size, vc.spatial_merge_size
            gh, gw = height // p, width // p
            px = torch.zeros(images * gh * gw, 3 * tp * p * p, dtype=torch.float32, device="meta")
            grid = torch.tensor([[1, gh, gw]] * images)
            pos = vu.get_vision_position_ids(grid, m)
            cu = vu.get_vision_cu_seqlens(grid)
            kw = {"cu_seqlens": cu}
            if mt == "qwen2_5_vl":
                wi, cuw = vu.get_vision_window_index(grid, m, vc.window_size, p)
            if mt.startswith(("qwen3_vl", "qwen3_5")):
                ii, iw = vu.get_vision_interpolation_indices_and_weights(
                    grid, num_grid_per_side=int(vc.num_position_embeddings**0.5),
                    mode="bilinear", align_corners=True, spatial_merge_size=m)
            tr.begin("forward")
            base = tr.allocated
            kw["position_ids"] = pos.to("meta")
            keep.append(torch.empty(len(cu), dtype=torch.int32, device="meta"))
            if mt == "qwen2_5_vl":
                kw["window_index"] = wi.to("meta")
                kw["cu_window_seqlens"] = cuw
                keep.append(torch.empty(len(cuw), dtype=torch.int32, device="meta"))
            if mt.startswith(("qwen3_vl", "qwen3_5")):
                kw["interp_indices"] = ii.to("meta")
                kw["interp_weights"] = iw.to("meta")
            out = model.get_image_features(px, grid, **kw)
        tr.end()
        tower = tr.peak - base
        if prompt is None:
            del out
            return tower
        # The index tensors built here for the tower (`kw`, `keep`) are the tower's
        # own: let go before the forward, as `get_image_features` lets them go.
        if mt not in ("gemma4", "gemma3", "paligemma", "llama4"):
            del kw
        keep.clear()
        held = tr.allocated - base
        if mt == "gemma4":
            tokens = soft
        elif mt in ("gemma3",):
            tokens = cfg.mm_tokens_per_image
        elif mt == "paligemma":
            tokens = (height // cfg.vision_config.patch_size) ** 2
        elif mt == "llama4":
            tokens = out.last_hidden_state.shape[0] * out.last_hidden_state.shape[1]
        else:
            tokens = sum(o.shape[0] for o in out.pooler_output) // images
        merge = trace_merge(tr, model, mt, cfg, out, images, tokens, prompt)
        del out
    return tower, held + merge


def _prefill_peak(name, attn, height, width, images, prompt, layers, image):
    """The first forward's peak beyond what was live before it, over a prompt of
    `prompt` tokens a sequence (one image a sequence; Llama 4's `images` one image's
    tiles), with the image or without it."""
    c = config(name)
    cfg = AutoConfig.for_model(**c)
    mt = c["model_type"]
    tc = cfg.get_text_config()
    tc.num_hidden_layers = layers
    if getattr(tc, "layer_types", None):
        types = list(tc.layer_types)
        while len(types) < layers:
            types += ["sliding_attention", "full_attention"]
        tc.layer_types = types[:layers]
    rows = 1 if mt == "llama4" else images
    tr = gt.Tracker(gt.Allocator(False), vocab=tc.vocab_size)
    with gt._dispatch_mode(tr), torch.no_grad():
        with torch.device("meta"):
            model = transformers.AutoModelForImageTextToText.from_config(
                cfg, attn_implementation=attn, dtype=torch.bfloat16).eval()
        ids = torch.zeros(rows, prompt, dtype=torch.int64, device="meta")
        # generate hands either prompt an attention mask (ones where the caller gives
        # none: `_prepare_attention_mask_for_generation`, generation/utils.py).
        kw = {"input_ids": ids, "use_cache": True, "logits_to_keep": 1,
              "attention_mask": torch.ones(rows, prompt, dtype=torch.int64, device="meta")}
        index = contextlib.nullcontext()
        if image and mt == "gemma4":
            # Images filling their budget (as `trace` runs them), and the processor's
            # `mm_token_type_ids`, which generate passes to the prefill.
            vc = cfg.vision_config
            p, k = vc.patch_size, vc.pooling_kernel_size
            soft = (height // p) * (width // p) // (k * k)
            assert soft in GEMMA4_BUDGETS
            px = torch.zeros(images, soft * k * k, 3 * p * p, dtype=torch.float32, device="meta")
            pos = torch.zeros(images, soft * k * k, 2, dtype=torch.int64, device="meta")
            with _gemma4_mask_mode(images * soft, images, False):
                out = model.model.get_image_features(pixel_values=px, image_position_ids=pos)
            del px, pos
            kw["mm_encoder_outputs"] = {"image": out}
            kw["mm_token_type_ids"] = torch.zeros(rows, prompt, dtype=torch.int64, device="meta")
            index = _index_mode(rows * soft * tc.hidden_size)
        elif image:
            pdt = torch.bfloat16 if mt == "llama4" else torch.float32
            px = torch.zeros(images, 3, height, width, dtype=pdt, device="meta")
            out = getattr(model, "model", model).get_image_features(pixel_values=px)
            del px
            kw["mm_encoder_outputs"] = {"image": out}
            if mt in ("gemma3", "paligemma"):
                kw["token_type_ids"] = torch.zeros(rows, prompt, dtype=torch.int64, device="meta")
        tr.begin("prefill")
        start = tr.allocated
        with index:
            logits = model(**kw).logits
        # generate(): the next token's scores are an fp32 copy of the last logits.
        scores = logits[:, -1, :].to(dtype=torch.float32, copy=True)
        tr.end()
        del logits, scores, kw
    return tr.peak - start


def trace_prefill(name, attn, height, width, images, prompt, layers):
    """What the prompt with the image holds at the first forward's peak beyond a text
    prompt of as many tokens."""
    return (_prefill_peak(name, attn, height, width, images, prompt, layers, True)
            - _prefill_peak(name, attn, height, width, images, prompt, layers, False))


# The merge of one image's embeddings into a prompt of this many tokens (model,
# attention, height, width, images, prompt): the forward's own step after
# get_image_features, traced up to and with `masked_scatter`, beyond the pixel
# values (the tower's outputs held then included). CUDA's scratch of
# `masked_scatter` and `nonzero` is not on the meta device (see
# `src/estimate/tower.rs` `scatter`).
MERGE_CASES = [
    ("google--gemma-3-4b-it", "sdpa", 896, 896, 1, 32768),
    ("paligemma2-3b-pt-448", "sdpa", 448, 448, 1, 4096),
    ("Qwen--Qwen2.5-VL-7B-Instruct", "sdpa", 448, 448, 1, 32768),
    ("Qwen--Qwen3-VL-8B-Instruct", "sdpa", 512, 512, 1, 32768),
    ("Qwen--Qwen3.5-9B", "sdpa", 512, 512, 1, 32768),
    ("llama-4-scout", "sdpa", 336, 336, 5, 8192),
    ("gemma-4-31b", "sdpa", 672, 960, 1, 32768),
]


# What the prompt with an image holds through the language model beyond a text prompt
# (model, attention, height, width, images, prompt, text layers): Gemma-3-4B over its
# first six layers (five sliding, one full), SDPA below and beyond its 1 024-token
# window; PaliGemma's Gemma and Gemma 2 (which runs eager); Llama-4-Scout's five tiles.
PREFILL_CASES = [
    ("google--gemma-3-4b-it", "sdpa", 896, 896, 1, 512, 6),
    ("google--gemma-3-4b-it", "sdpa", 896, 896, 2, 2048, 6),
    ("google--gemma-3-4b-it", "eager", 896, 896, 1, 2048, 6),
    ("google--gemma-3-4b-it", "eager", 896, 896, 2, 1024, 6),
    ("paligemma-3b-pt-224", "sdpa", 224, 224, 1, 2048, 2),
    ("paligemma-3b-pt-224", "eager", 224, 224, 2, 1024, 2),
    ("paligemma2-3b-pt-448", "eager", 448, 448, 1, 2048, 2),
    ("gemma-4-31b", "sdpa", 672, 960, 1, 2048, 6),
    ("gemma-4-31b", "sdpa", 672, 960, 1, 512, 6),
    ("gemma-4-31b", "eager", 672, 960, 1, 2048, 6),
    ("llama-4-scout", "sdpa", 336, 336, 5, 2048, 2),
    ("llama-4-scout", "eager", 336, 336, 5, 1024, 2),
    ("llama-4-scout", "sdpa", 336, 336, 5, 9000, 4),
]


if __name__ == "__main__":
    gt._patch_sdpa(torch)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    only = [a for a in sys.argv[1:] if a not in ("--merge", "--prefill")]
    if "--prefill" in sys.argv[1:]:
        for case in PREFILL_CASES:
            if only and not any(o in case[0] for o in only):
                continue
            print(*case, "prefill", trace_prefill(*case))
        sys.exit(0)
    if "--merge" in sys.argv[1:]:
        for case in MERGE_CASES:
            if only and not any(o in case[0] for o in only):
                continue
            print(*case, "merge", trace(*case)[1])
        sys.exit(0)
    for case in CASES:
        if only and not any(o in case[0] for o in only):
            continue
        print(*case, trace(*case))
