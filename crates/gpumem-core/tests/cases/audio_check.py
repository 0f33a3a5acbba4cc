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

Prints one line per case: attention, the clip's seconds, clips, the traced peak in
bytes. `src/estimate/audio.rs`'s test holds these figures. Run with transformers 5.23
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


def trace(attn, seconds, clips):
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
        del out, selected, features, mask, dummy, mask_2d, padding_mask, seq_range, lengths_expand
        tr.end()
    return tr.peak - base


if __name__ == "__main__":
    gt._patch_sdpa(torch)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for case in CASES:
        print(*case, trace(*case))
