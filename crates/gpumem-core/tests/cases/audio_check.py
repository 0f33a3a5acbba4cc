#!/usr/bin/env python3
"""Qwen2-Audio's audio tower over its clips, traced on the meta device: transformers
builds `Qwen2AudioForConditionalGeneration` from `tests/cases/configs/`'s
Qwen2-Audio-7B-Instruct config, and the lines of `Qwen2AudioModel.forward` that run
before the language model (the feature lengths, the padding mask, the encoder's
bidirectional mask, `Qwen2AudioEncoder`, `Qwen2AudioMultiModalProjector`) run under
torch.no_grad() as generate's first forward runs them, over the input features as the
processor hands them over (`WhisperFeatureExtractor`: 128 mel bins × 3 000 frames in
fp32, every clip padded to 30 s; the attention mask in int32).

The tracking is `agent/python/gpumem_trace.py`'s (its Tracker with the caching
allocator's 512-byte rounding, its dispatch mode, its SDPA stand-in that runs the
fused kernel CUDA picks). The features and their mask are allocated before the phase
begins, so each figure is the phase's peak beyond them. The encoder's mask is built on
the host by `create_bidirectional_mask` (its skip for an unpadded clip reads the
mask's values) and copied to the meta device inside the phase, as the device holds it.

Gemma 4's audio tower (`gemma4_audio`, the conformer of Gemma 4 E2B and E4B) is traced
alike: `Gemma4ForConditionalGeneration` built from Gemma4Config with Gemma4AudioConfig's
defaults (as google/gemma-4-E2B-it and -E4B-it publish their `audio_config`: 1024 wide,
12 layers of 8 heads, chunks of 12 with 12 frames of left context, clipped linears, an
output of 1536) and a text model 2560 wide (one text layer: the tower's phase does not
read the others), and a variant 4096 wide of one layer whose attention's moment is the
peak rather than the first subsampling convolution's. `Gemma4Model.get_audio_features`
(the tower and `embed_audio`) runs under torch.no_grad() over the input features as
`Gemma4AudioFeatureExtractor` hands them over for one clip of the given seconds (16 kHz,
a hop of 160 samples and windows of 321: 100 · seconds − 1 frames of 128 mel bins in
fp32, the bool mask over them all real). The tower's attention is its own code (the
model refuses sdpa for it: eager's float mask, whichever implementation the text model
runs). One step runs as a shape-equivalent op, the meta device having no values:
`Gemma4Model.forward`'s `audio_features[audio_mask_from_encoder]` (every position real,
one clip a sequence) is CUDA's boolean index, `nonzero`'s int64 [positions, 2] and the
gathered rows, here `torch.empty` of the first and a clone of the rows. On the meta
device `and_masks`'s `q_idx.new_ones(())` (masking_utils.py) and `torch.where`'s scalar
take a block each beyond CUDA's (512 B each where the mask is built): those moments are
never the peak here.

MERGE_CASES carry Qwen2-Audio's transcribed lines on to the merge (the clip's rows,
the prompt's masks, `masked_scatter` over embeddings looked up before the phase), and
GEMMA4_MERGE_CASES run `Gemma4Model.forward` itself up to and with the audio's
`masked_scatter` (its boolean indexes at the known counts): CUDA's scratch of
`masked_scatter` and `nonzero` is not on the meta device, and `src/estimate/audio.rs`
counts it from ATen's code.

Prints one line per case: attention, the clip's seconds, clips, the traced peak in
bytes (for Gemma 4: the config, the seconds, clips, the peak). `src/estimate/audio.rs`'s
tests hold these figures. Run with transformers 5.23
and torch 2.11 (`$GPUMEM_TOOLS/torch-venv/bin/python`).
"""
import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig
from transformers.masking_utils import create_bidirectional_mask

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "agent" / "python"))
import gpumem_trace as gt  # noqa: E402

NAME = "qwen2-audio-7b-instruct"
# (attention, seconds, clips): a whole 30 s clip (no mask: sdpa skips it) and shorter
# ones (the padded frames masked).
CASES = [
    ("sdpa", 30, 1),
    ("sdpa", 10, 1),
    ("sdpa", 30, 2),
    ("sdpa", 10, 2),
    ("eager", 30, 1),
    ("eager", 10, 1),
    ("eager", 30, 2),
]

# (attention, seconds, clips, prompt tokens a sequence).
MERGE_CASES = [
    ("sdpa", 30, 1, 8192),
    ("sdpa", 10, 2, 4096),
]

# (config variant, seconds, clips): Gemma4AudioConfig's defaults at 10 s and 30 s (the
# first subsampling convolution's moment), and one layer 4096 wide (the attention's).
GEMMA4_CASES = [
    ("gemma4-audio", 10, 1),
    ("gemma4-audio", 30, 1),
    ("gemma4-audio", 30, 2),
    ("gemma4-audio", 7, 3),
    ("gemma4-audio-wide", 30, 1),
    ("gemma4-audio-wide", 10, 2),
    ("gemma4-audio-wide", 24, 1),
    ("gemma4-audio-wide-plain", 30, 1),
]
# (config variant, seconds, clips, prompt tokens a sequence): `Gemma4Model.forward`
# up to and with the audio's merge, its whole peak beyond the features.
GEMMA4_MERGE_CASES = [
    ("gemma4-audio", 30, 1, 800),
    ("gemma4-audio", 30, 1, 32768),
]
GEMMA4_VARIANTS = {
    "gemma4-audio": {},
    "gemma4-audio-wide": {"hidden_size": 4096, "num_hidden_layers": 1},
    "gemma4-audio-wide-plain": {"hidden_size": 4096, "num_hidden_layers": 1,
                                "use_clipped_linears": False},
}


def trace_gemma4(variant, seconds, clips):
    from transformers import Gemma4Config
    cfg = Gemma4Config(
        audio_config={"model_type": "gemma4_audio", **GEMMA4_VARIANTS[variant]},
        text_config={"hidden_size": 2560, "num_hidden_layers": 1, "vocab_size": 1024,
                     "layer_types": ["full_attention"],
                     "vocab_size_per_layer_input": 1024})
    dtype = torch.bfloat16
    tr = gt.Tracker(gt.Allocator(False), vocab=-1)
    with gt._dispatch_mode(tr), torch.no_grad():
        with torch.device("meta"):
            model = transformers.Gemma4ForConditionalGeneration._from_config(cfg, dtype=dtype).eval()
        m = model.model
        # Gemma4AudioFeatureExtractor: 16 000 samples a second (a multiple of 128, so
        # no padding), 160 zeros before them, windows of 321 samples a hop of 160.
        samples = min(seconds * 16000, 480000)
        frames = (samples + 160 - 321) // 160 + 1
        feats = torch.zeros(clips, frames, 128, dtype=torch.float32, device="meta")
        fmask = torch.ones(clips, frames, dtype=torch.bool, device="meta")
        tr.begin("forward")
        base = tr.allocated
        out = m.get_audio_features(feats, fmask, return_dict=True)
        features = out.pooler_output
        # `audio_features[audio_mask_from_encoder]`, every position real.
        rows = features.shape[0] * features.shape[1]
        index = torch.empty(rows, 2, dtype=torch.long, device="meta")
        selected = features.reshape(rows, -1).clone()
        del out, features, index, selected
        tr.end()
    return tr.peak - base


class _Merged(Exception):
    """Raised once the forward's `masked_scatter` has run: the merge is traced."""


def _gemma4_merge_mode(rows, width):
    """`Gemma4Model.forward` on the meta device up to and with its `masked_scatter`:
    its two boolean indexes run as ATen runs them (`nonzero`'s int64 [count, dims]
    allocated at the known count: `rows` positions of the encoder's 2-D mask, `rows`
    × `width` values of the expanded 3-D one), then the forward is stopped."""
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is aten.index.Tensor and any(
                    i is not None and i.dtype == torch.bool for i in args[1]):
                src, idx = args
                (mask,) = [i for i in idx if i is not None]
                count = rows if mask.dim() == 2 else rows * width
                nz = torch.empty((count, mask.dim()), dtype=torch.int64, device="meta")
                return func(src, list(nz.unbind(1)))
            out = func(*args, **kwargs)
            if func is aten.masked_scatter.default:
                raise _Merged()
            return out

    return Mode()


def trace_gemma4_merge(variant, seconds, clips, prompt):
    """`Gemma4Model.forward` over a prompt of `prompt` tokens a sequence holding one
    clip's tokens, up to and with the audio's `masked_scatter`: its peak beyond the
    features (the text model is not run)."""
    from transformers import Gemma4Config
    cfg = Gemma4Config(
        audio_config={"model_type": "gemma4_audio", **GEMMA4_VARIANTS[variant]},
        text_config={"hidden_size": 2560, "num_hidden_layers": 1, "vocab_size": 1024,
                     "layer_types": ["full_attention"], "hidden_size_per_layer_input": 0,
                     "vocab_size_per_layer_input": 1024})
    dtype = torch.bfloat16
    tr = gt.Tracker(gt.Allocator(False), vocab=-1)
    with gt._dispatch_mode(tr), torch.no_grad():
        with torch.device("meta"):
            model = transformers.Gemma4ForConditionalGeneration._from_config(cfg, dtype=dtype).eval()
        m = model.model
        samples = min(seconds * 16000, 480000)
        frames = (samples + 160 - 321) // 160 + 1
        tokens = -(-(-(-frames // 2)) // 2)
        feats = torch.zeros(clips, frames, 128, dtype=torch.float32, device="meta")
        fmask = torch.ones(clips, frames, dtype=torch.bool, device="meta")
        ids = torch.zeros(clips, prompt, dtype=torch.long, device="meta")
        tr.begin("forward")
        base = tr.allocated
        try:
            with _gemma4_merge_mode(clips * tokens, cfg.text_config.hidden_size):
                m(input_ids=ids, input_features=feats, input_features_mask=fmask)
        except _Merged:
            pass
        tr.end()
    return tr.peak - base


def trace(attn, seconds, clips, prompt=None):
    c = json.loads((ROOT / "crates" / "gpumem-core" / "tests" / "cases" / "configs" / f"{NAME}.json").read_text())
    c = {k: v for k, v in c.items() if not k.startswith("_")}
    cfg = AutoConfig.for_model(**c)
    cfg.text_config.num_hidden_layers = 1
    dtype = torch.bfloat16
    tr = gt.Tracker(gt.Allocator(False), vocab=-1)
    with gt._dispatch_mode(tr), torch.no_grad():
        with torch.device("meta"):
            model = transformers.Qwen2AudioForConditionalGeneration._from_config(
                cfg, attn_implementation=attn, dtype=dtype).eval()
        m = model.model
        tower = m.audio_tower
        frames = 3000
        # WhisperFeatureExtractor: one frame a hop of 160 samples at 16 kHz.
        real = min(seconds * 100, frames)
        host = torch.zeros(clips, frames, dtype=torch.int32)
        host[:, :real] = 1
        feats = torch.zeros(clips, 128, frames, dtype=torch.float32, device="meta")
        fam = host.to("meta")
        # The encoder's mask, on the host as Qwen2AudioModel.forward builds it.
        _, h_out = tower._get_feat_extract_output_lengths(host.sum(-1))
        h_len = (host.sum(-1) - 1) // 2 + 1
        max_seq_len = (frames - 2) // 2 + 1
        h_range = torch.arange(0, max_seq_len, dtype=h_len.dtype).unsqueeze(0).expand(clips, max_seq_len)
        h_mask2d = (~(h_range >= h_len.unsqueeze(1).expand(clips, max_seq_len))).to(torch.long)
        h_mask = create_bidirectional_mask(
            config=tower.config,
            inputs_embeds=torch.zeros(clips, max_seq_len, 1, dtype=dtype),
            attention_mask=h_mask2d)
        if prompt is not None:
            # The prompt's ids and their embeddings (`get_input_embeddings()(input_ids)`,
            # looked up before the encoder): beside the features, before the phase.
            ids = torch.zeros(clips, prompt, dtype=torch.long, device="meta")
            embeds = m.get_input_embeddings()(ids)
        tr.begin("forward")
        base = tr.allocated
        audio_feat_lengths, audio_output_lengths = tower._get_feat_extract_output_lengths(fam.sum(-1))
        batch_size, _, max_mel_seq_len = feats.shape
        seq_range = (torch.arange(0, max_seq_len, dtype=audio_feat_lengths.dtype, device="meta")
                     .unsqueeze(0).expand(batch_size, max_seq_len))
        lengths_expand = audio_feat_lengths.unsqueeze(1).expand(batch_size, max_seq_len)
        padding_mask = seq_range >= lengths_expand
        mask_2d = (~padding_mask).to(dtype=torch.long)
        dummy = torch.zeros((batch_size, max_seq_len, 1), dtype=dtype, device="meta")
        mask = None if h_mask is None else h_mask.to("meta")
        out = tower(feats, attention_mask=mask)
        selected = out.last_hidden_state
        features = m.multi_modal_projector(selected)
        if prompt is None:
            del out, selected, features, mask, dummy, mask_2d, padding_mask, seq_range, lengths_expand
            tr.end()
            return tr.peak - base
        tr.end()
        # The merge (the non-legacy path): `audio_features_mask`, the clips' rows
        # (`audio_features[audio_features_mask]`: CUDA's boolean index, `nonzero`'s
        # int64 [rows, 2] and the gathered rows, here `torch.empty` of the first and a
        # clone of the rows, the values being absent), `audio_tokens`, the count
        # (`(input_ids == audio_token_id).sum()`, read on the host), the prompt's
        # `special_audio_mask` and `masked_scatter` (CUDA's scratch is not on the meta
        # device).
        tr.begin("merge")
        num, max_tokens, width = features.shape
        fmask = torch.arange(max_tokens, device="meta")[None, :]
        fmask = fmask < audio_output_lengths[:, None]
        tokens = int(h_out.sum())  # the clips' tokens, from the host copy of the mask
        index = torch.empty(tokens, 2, dtype=torch.long, device="meta")
        rows = features[:, :tokens // num].reshape(tokens, width).clone()
        del index
        features = rows
        audio_tokens = ids == cfg.audio_token_id
        count = (ids == cfg.audio_token_id).sum()
        del count
        special = (ids == cfg.audio_token_id).unsqueeze(-1)
        merged = embeds.masked_scatter(special, features)
        tr.end()
        del merged, special, audio_tokens, features, rows, fmask, out, selected
    return tr.peak - base


if __name__ == "__main__":
    gt._patch_sdpa(torch)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for case in CASES:
        print(*case, trace(*case))
    # The merge of the clips' embeddings into a prompt of this many tokens a sequence:
    # the peak beyond the features and the prompt's embeddings, up to and with
    # `masked_scatter`.
    for case in MERGE_CASES:
        print(*case, "merge", trace(*case))
    for case in GEMMA4_MERGE_CASES:
        print(*case, "forward", trace_gemma4_merge(*case))
    for case in GEMMA4_CASES:
        print(*case, trace_gemma4(*case))
