"""Tiny models in plain torch for the probe tests (CPU): an MLP and a decoder with a KV cache."""

from types import SimpleNamespace

import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self, width=64, depth=3):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)])
        self.head = nn.Linear(width, 1)
        self.register_buffer("scale", torch.ones(width))

    def forward(self, x):
        return self.head(self.layers(x * self.scale))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.n1 = nn.LayerNorm(dim)
        self.n2 = nn.LayerNorm(dim)

    def forward(self, x, cache=None):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).split(d, dim=-1)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        causal = cache is None
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.n2(x)), (k, v)


class TinyDecoder(nn.Module):
    """A decoder-only transformer whose forward returns (logits, KV cache)."""

    def __init__(self, vocab=97, dim=32, heads=4, layers=2):
        super().__init__()
        # The dimensions under the names HF configs use, which the probe reports.
        self.config = SimpleNamespace(
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            hidden_size=dim,
            vocab_size=vocab,
        )
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids, cache=None):
        x = self.embed(ids)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if cache is None else cache[i])
            new_cache.append(kv)
        return self.head(x), new_cache

    @torch.no_grad()
    def generate(self, ids, max_new_tokens):
        """Greedy decoding: one prefill over the prompt, then one token per forward."""
        logits, cache = self(ids)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out = [ids, nxt]
        for _ in range(max_new_tokens - 1):
            logits, cache = self(nxt, cache)
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
        return torch.cat(out, dim=1)
