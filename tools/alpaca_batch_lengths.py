#!/usr/bin/env python3
"""The padded lengths of rank 0's batches in torchtune's April 2024 Llama-2-7B LoRA
recipe (`lora_finetune_distributed`, config `llama2/7B_lora.yaml`) on 2 GPUs, one
epoch, from the data set and the tokenizer the recipe loaded.

Read at pytorch/torchtune fef3ed10dc9efe9e35b118e4397e84c680c0a737 (the commit of the
README row the ranks corpus replays, `torchtune-2024-04-llama2-7b-lora-2x4090`):

* `recipes/configs/llama2/7B_lora.yaml`: `torchtune.datasets.alpaca_cleaned_dataset`
  with `train_on_input: True`, `shuffle: True`, `batch_size: 2`, `epochs: 1`,
  `max_steps_per_epoch: null`, tokenizer `llama2_tokenizer` (Llama 2's
  `tokenizer.model`, `pad_id` 0).
* `torchtune/datasets/_alpaca.py`: `alpaca_cleaned_dataset` is `alpaca_dataset` with
  `source="yahma/alpaca-cleaned"` (`load_dataset(source, split="train")`), the
  `AlpacaInstructTemplate`, `max_seq_len` 512.
* `torchtune/datasets/_instruct.py` `InstructDataset._prepare_sample`: the prompt
  (the template, with the input's paragraph only where `input` is non-empty) as a
  user message, the output as the assistant's, `tokenize_messages(max_seq_len=512)`.
* `torchtune/modules/tokenizer.py` `Tokenizer.tokenize_messages`: BOS, the prompt
  (`rstrip(" ")`, no BOS/EOS), the output with its leading whitespace trimmed (the
  vocabulary encodes whitespace and the prompt does not end with a space: encoded
  after a "\\n" prefix whose pieces are dropped), EOS; a break once 512 tokens are
  reached, then `truncate` (`torchtune/data/_utils.py`): the first 512, the last one
  made EOS.
* `recipes/lora_finetune_distributed.py` `_setup_data`:
  `DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=0)`
  and `DataLoader(batch_size=2, sampler=sampler, collate_fn=padded_collate)`
  (drop_last False); `train`: `self._sampler.set_epoch(curr_epoch)` from epoch 0.
* `torchtune/utils/collate.py` `padded_collate`: every batch padded to its longest
  sample.

torch's `DistributedSampler.__iter__` (torch/utils/data/distributed.py, 2.2 and
since): `g.manual_seed(self.seed + self.epoch)`, `torch.randperm(len(dataset),
generator=g)`, padded to a multiple of the world size by repeating its head, then
`indices[rank:total_size:num_replicas]`. ATen's `randperm_cpu`
(aten/src/ATen/native/TensorFactories.cpp) draws `generator->random() % (n - i)` in a
Fisher-Yates loop; later versions keep that loop for `n < UINT32_MAX / 20` ("for
small n, preserve old behavior") and use a 64-bit draw only above it, so for this
data set's 51 760 rows the order is the same under torch 2.2 and the torch this runs.

Inputs (neither is in this repository; neither can be fetched by this script):

* `--data`: `alpaca_data_cleaned.json` of the Hugging Face data set
  `yahma/alpaca-cleaned` (its only data file; `load_dataset` keeps its row order).
  Expected: 44 566 362 bytes, sha256 4ad43a23d4ed6b84010e1896be5dde182b994ca9c259270725950678b1083718
  (the Git LFS pointer of a copy of that file,
  ntesh21/nlp-assignment-a8-text-generation `data/alpaca_data_cleaned.json`, commit
  e9b0b1bbf437d0878ccf4fa8199fd45c1bfc3f51), 51 760 rows.
* `--tokenizer`: Llama 2's `tokenizer.model`, 499 723 bytes, sha256
  9e556afd44213b6bd1be2b850ebbbd98f5481437a8021afaf58ee7fb1818d347 (karpathy/llama2.c
  `tokenizer.model`; the size and digest meta-llama's Llama-2 repositories publish).

Needs `torch` and `sentencepiece` (a one-off generation tool, not a test dependency).

    python3 tools/alpaca_batch_lengths.py --data alpaca_data_cleaned.json \\
        --tokenizer tokenizer.model \\
        --out crates/gpumem-core/tests/calibration/ranks/batches/torchtune-2024-04-llama2-7b-lora-2x4090.txt

`--order N` prints rank 0's first N batches' row numbers and needs neither input.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

DATA_SHA256 = "4ad43a23d4ed6b84010e1896be5dde182b994ca9c259270725950678b1083718"
DATA_BYTES = 44_566_362
DATA_ROWS = 51_760
TOKENIZER_SHA256 = "9e556afd44213b6bd1be2b850ebbbd98f5481437a8021afaf58ee7fb1818d347"
TOKENIZER_BYTES = 499_723

PROMPT_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
)
PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. "
    "Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:\n"
)
WHITESPACE_CHARS = [" ", "\n", "\t", "\r", "\v"]


def sha256(path: str) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            n += len(chunk)
    return h.hexdigest(), n


def rank_order(n: int, world: int, rank: int, seed: int, epoch: int) -> list[int]:
    """`DistributedSampler(shuffle=True, drop_last=False).__iter__`."""
    import torch

    g = torch.Generator()
    g.manual_seed(seed + epoch)
    indices = torch.randperm(n, generator=g).tolist()
    total = -(-n // world) * world
    pad = total - len(indices)
    if pad > 0:
        reps = -(-pad // len(indices))
        indices += (indices * reps)[:pad]
    return indices[rank:total:world]


class Llama2Tokenizer:
    """torchtune fef3ed10 `Tokenizer` (encode, tokenize_messages) over sentencepiece."""

    def __init__(self, path: str):
        import sentencepiece

        self.spm = sentencepiece.SentencePieceProcessor(model_file=path)
        self.bos_id = self.spm.bos_id()
        self.eos_id = self.spm.eos_id()
        self.encodes_whitespace = any(self.spm.encode(c) for c in WHITESPACE_CHARS)
        self.encoded_prefix = self.spm.encode("\n", add_bos=False, add_eos=False)

    def encode(self, text: str, trim_leading_whitespace: bool) -> list[int]:
        if trim_leading_whitespace:
            return self.spm.encode("\n" + text, add_bos=False, add_eos=False, out_type=int)[
                len(self.encoded_prefix) :
            ]
        return self.spm.encode(text, add_bos=False, add_eos=False, out_type=int)

    def tokenize_messages(self, messages: list[tuple[str, str]], max_seq_len: int) -> list[int]:
        start_of_turn = True
        prev_ends_with_space = False
        tokens: list[int] = []
        for role, content in messages:
            end_of_turn = role == "assistant"
            if start_of_turn:
                tokens.append(self.bos_id)
            trim = (not start_of_turn) and self.encodes_whitespace and not prev_ends_with_space
            tokens.extend(self.encode(content.rstrip(" "), trim))
            prev_ends_with_space = content.endswith(" ")
            if end_of_turn:
                tokens.append(self.eos_id)
                start_of_turn = True
            else:
                start_of_turn = False
            if max_seq_len and len(tokens) >= max_seq_len:
                break
        if max_seq_len:
            tokens = tokens[:max_seq_len]
            if tokens[-1] != self.eos_id:
                tokens[-1] = self.eos_id
        return tokens


def sample_length(tok: Llama2Tokenizer, row: dict, max_seq_len: int) -> int:
    if row.get("input"):
        prompt = PROMPT_INPUT.format(instruction=row["instruction"], input=row["input"])
    else:
        prompt = PROMPT_NO_INPUT.format(instruction=row["instruction"])
    messages = [("user", prompt), ("assistant", row["output"])]
    return len(tok.tokenize_messages(messages, max_seq_len))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="yahma/alpaca-cleaned alpaca_data_cleaned.json")
    p.add_argument("--tokenizer", help="Llama 2 tokenizer.model")
    p.add_argument("--out", help="where the lengths go (default: standard output)")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epoch", type=int, default=0)
    p.add_argument("--max-seq-len", type=int, default=512)
    p.add_argument("--order", type=int, metavar="N", help="print rank 0's first N batches' rows and stop")
    p.add_argument(
        "--other-data",
        action="store_true",
        help="accept a data file of another digest (the output says so)",
    )
    a = p.parse_args()

    if a.order is not None:
        order = rank_order(DATA_ROWS, a.world, a.rank, a.seed, a.epoch)
        for k in range(a.order):
            print(k, order[k * a.batch : (k + 1) * a.batch])
        return 0
    if not (a.data and a.tokenizer):
        p.error("--data and --tokenizer are needed (or --order N)")

    digest, size = sha256(a.tokenizer)
    if (digest, size) != (TOKENIZER_SHA256, TOKENIZER_BYTES):
        sys.exit(f"{a.tokenizer}: sha256 {digest}, {size} bytes: not Llama 2's tokenizer.model")
    data_digest, data_size = sha256(a.data)
    same = (data_digest, data_size) == (DATA_SHA256, DATA_BYTES)
    if not same and not a.other_data:
        sys.exit(
            f"{a.data}: sha256 {data_digest}, {data_size} bytes, not the expected "
            f"{DATA_SHA256} ({DATA_BYTES} bytes; --other-data to go on)"
        )
    with open(a.data, encoding="utf-8") as f:
        rows = json.load(f)
    tok = Llama2Tokenizer(a.tokenizer)
    order = rank_order(len(rows), a.world, a.rank, a.seed, a.epoch)
    lengths: dict[int, int] = {}
    padded = []
    for start in range(0, len(order), a.batch):
        batch = order[start : start + a.batch]
        for i in batch:
            if i not in lengths:
                lengths[i] = sample_length(tok, rows[i], a.max_seq_len)
        padded.append(max(lengths[i] for i in batch))

    head = [
        "# Padded lengths (tokens) of rank 0's batches, in order, one epoch: torchtune",
        "# fef3ed10 lora_finetune_distributed, llama2/7B_lora.yaml, 2 GPUs, batch_size 2,",
        f"# DistributedSampler(shuffle=True, seed={a.seed}) epoch {a.epoch}, max_seq_len {a.max_seq_len}.",
        f"# data: {a.data.rsplit('/', 1)[-1]} sha256 {data_digest} ({data_size} bytes, {len(rows)} rows)"
        + ("" if same else f" -- not the expected {DATA_SHA256}"),
        f"# tokenizer: tokenizer.model sha256 {TOKENIZER_SHA256}",
        "# Made by tools/alpaca_batch_lengths.py.",
    ]
    body = [" ".join(str(n) for n in padded[k : k + 20]) for k in range(0, len(padded), 20)]
    text = "\n".join(head + body) + "\n"
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    print(
        f"{len(padded)} batches, longest {max(padded)}, shortest {min(padded)}, "
        f"mean {sum(padded) / len(padded):.1f}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
