"""Encoder-decoders, as transformers 5.23 builds their generation classes
(AutoModelForSeq2SeqLM / WhisperForConditionalGeneration) and what their generate()
keeps:

- T5 / mT5 / UMT5 (modeling_t5.py, modeling_mt5.py, modeling_umt5.py): `shared`; per
  stack block.i.layer.0.SelfAttention.{q,k,v,o} (no bias), relative_attention_bias in
  block 0 (every block in UMT5), layer_norm; in the decoder layer.1.EncDecAttention and
  its layer_norm; the DenseReluDense wi / wo (or wi_0, wi_1, wo when gated) and its
  layer_norm; final_layer_norm per stack; lm_head tied to `shared`.
- BART / mBART (modeling_bart.py, modeling_mbart.py): `shared`; per stack
  embed_positions (max_position_embeddings + 2 rows), layernorm_embedding; per layer
  self_attn.{k,v,q,out}_proj with biases, self_attn_layer_norm, the decoder's
  encoder_attn and encoder_attn_layer_norm, fc1, fc2 with biases, final_layer_norm;
  mBART's layer_norm per stack; the final_logits_bias buffer.
- Whisper (modeling_whisper.py): encoder conv1, conv2 with biases, embed_positions
  [max_source_positions, d]; the decoder's embed_tokens, embed_positions
  [max_target_positions, d]; attention k_proj without bias; fc1, fc2; LayerNorms with
  bias; layer_norm per stack; proj_out tied.

Generation (transformers 5.23, generation/utils.py and cache_utils.py's
EncoderDecoderCache): the decoder's self-attention DynamicCache, K and V of
[batch, heads, tokens, head_dim] per decoder layer; the cross-attention cache, K and V
of [batch, heads, encoder length, head_dim] per decoder layer, written at the first
step; the encoder's last hidden state [batch, encoder length, d_model] kept in
model_kwargs to the end. `meta_check.py --encdec` runs the models on the meta device
and reads these shapes from the cache itself.
"""
from common import g


def t5(c, config, add):
    V, d, dkv, ff, H = c["vocab_size"], c["d_model"], c["d_kv"], c["d_ff"], c["num_heads"]
    Le = c["num_layers"]
    Ld = g(c, "num_decoder_layers", default=Le)
    umt5 = c["model_type"] == "umt5"
    gated = c["feed_forward_proj"].startswith("gated-")
    inner = H * dkv
    add("shared.weight", (V, d), "vocab")

    def attn(p, first):
        for n in ("q", "k", "v"):
            add(f"{p}.{n}.weight", (inner, d), "linear_attn")
        add(f"{p}.o.weight", (d, inner), "linear_attn")
        if first:
            add(f"{p}.relative_attention_bias.weight", (c["relative_attention_num_buckets"], H), "kept")

    def mlp(p):
        for n in (("wi_0", "wi_1") if gated else ("wi",)):
            add(f"{p}.{n}.weight", (ff, d), "linear_mlp")
        add(f"{p}.wo.weight", (d, ff), "linear_mlp")

    for stack, L in (("encoder", Le), ("decoder", Ld)):
        for i in range(L):
            p = f"{stack}.block.{i}.layer"
            attn(f"{p}.0.SelfAttention", umt5 or i == 0)
            add(f"{p}.0.layer_norm.weight", (d,), "kept")
            k = 1
            if stack == "decoder":
                attn(f"{p}.1.EncDecAttention", umt5)
                add(f"{p}.1.layer_norm.weight", (d,), "kept")
                k = 2
            mlp(f"{p}.{k}.DenseReluDense")
            add(f"{p}.{k}.layer_norm.weight", (d,), "kept")
        add(f"{stack}.final_layer_norm.weight", (d,), "kept")


def bart(c, config, add):
    V, d = c["vocab_size"], c["d_model"]
    mbart = c["model_type"] == "mbart"
    add("model.shared.weight", (V, d), "vocab")

    def ln(n):
        add(f"{n}.weight", (d,), "kept"); add(f"{n}.bias", (d,), "kept")

    def attn(p):
        for n in ("k_proj", "v_proj", "q_proj", "out_proj"):
            add(f"{p}.{n}.weight", (d, d), "linear_attn"); add(f"{p}.{n}.bias", (d,), "kept")

    for stack in ("encoder", "decoder"):
        L, ff = c[f"{stack}_layers"], c[f"{stack}_ffn_dim"]
        s = f"model.{stack}"
        add(f"{s}.embed_positions.weight", (c["max_position_embeddings"] + 2, d), "vocab")
        ln(f"{s}.layernorm_embedding")
        for i in range(L):
            p = f"{s}.layers.{i}"
            attn(f"{p}.self_attn"); ln(f"{p}.self_attn_layer_norm")
            if stack == "decoder":
                attn(f"{p}.encoder_attn"); ln(f"{p}.encoder_attn_layer_norm")
            add(f"{p}.fc1.weight", (ff, d), "linear_mlp"); add(f"{p}.fc1.bias", (ff,), "kept")
            add(f"{p}.fc2.weight", (d, ff), "linear_mlp"); add(f"{p}.fc2.bias", (d,), "kept")
            ln(f"{p}.final_layer_norm")
        if mbart:
            ln(f"{s}.layer_norm")
    add("final_logits_bias", (1, V), "kept")


def whisper(c, config, add):
    V, d, mels = c["vocab_size"], c["d_model"], c["num_mel_bins"]

    def ln(n):
        add(f"{n}.weight", (d,), "kept"); add(f"{n}.bias", (d,), "kept")

    def attn(p):
        add(f"{p}.k_proj.weight", (d, d), "linear_attn")
        for n in ("v_proj", "q_proj", "out_proj"):
            add(f"{p}.{n}.weight", (d, d), "linear_attn"); add(f"{p}.{n}.bias", (d,), "kept")

    add("model.encoder.conv1.weight", (d, mels, 3), "kept"); add("model.encoder.conv1.bias", (d,), "kept")
    add("model.encoder.conv2.weight", (d, d, 3), "kept"); add("model.encoder.conv2.bias", (d,), "kept")
    add("model.encoder.embed_positions.weight", (c["max_source_positions"], d), "vocab")
    add("model.decoder.embed_tokens.weight", (V, d), "vocab")
    add("model.decoder.embed_positions.weight", (c["max_target_positions"], d), "vocab")
    for stack in ("encoder", "decoder"):
        L, ff = c[f"{stack}_layers"], c[f"{stack}_ffn_dim"]
        for i in range(L):
            p = f"model.{stack}.layers.{i}"
            attn(f"{p}.self_attn"); ln(f"{p}.self_attn_layer_norm")
            if stack == "decoder":
                attn(f"{p}.encoder_attn"); ln(f"{p}.encoder_attn_layer_norm")
            add(f"{p}.fc1.weight", (ff, d), "linear_mlp"); add(f"{p}.fc1.bias", (ff,), "kept")
            add(f"{p}.fc2.weight", (d, ff), "linear_mlp"); add(f"{p}.fc2.bias", (d,), "kept")
            ln(f"{p}.final_layer_norm")
        ln(f"model.{stack}.layer_norm")


def decoder_shape(c):
    """(decoder layers, heads, head_dim, d_model, encoder length or None)."""
    if c["model_type"] in ("t5", "mt5", "umt5"):
        return g(c, "num_decoder_layers", default=c["num_layers"]), c["num_heads"], c["d_kv"], c["d_model"], None
    H = c["decoder_attention_heads"]
    src = c["max_source_positions"] if c["model_type"] == "whisper" else None
    return c["decoder_layers"], H, c["d_model"] // H, c["d_model"], src


def self_kv(c, tokens, nbytes, engine):
    """One sequence's decoder self-attention cache at `tokens` (K and V per layer)."""
    L, H, hd, _, _ = decoder_shape(c)
    return L * 2 * H * hd * tokens * nbytes


V = {"bf16": 2, "fp16": 2, "fp32": 4}


def generation(cfg, tokens, inputs):
    """The lines of one generate(): self-attention at prompt + generated tokens, the
    cross-attention cache and the encoder output over the encoder's length (Whisper's
    max_source_positions, else `encoder-length`, else the context)."""
    L, H, hd, d, src = decoder_shape(cfg)
    b = int(inputs.get("sequences", 1))
    kvb = V[inputs.get("kv-dtype", "bf16")]
    v = V[inputs.get("compute-dtype", "bf16")]
    n = int(inputs.get("encoder-length", src or tokens))
    end = tokens + int(inputs.get("generate", 0))
    return {
        "kv_cache.prefill": b * self_kv(cfg, tokens, kvb, None),
        "kv_cache": b * self_kv(cfg, end, kvb, None),
        "kv_cache.cross": b * L * 2 * H * hd * n * kvb,
        "kv_cache.encoder_output": b * n * d * v,
    }


TENSORS = {"t5": t5, "mt5": t5, "umt5": t5, "bart": bart, "mbart": bart, "whisper": whisper}
KV = {k: self_kv for k in TENSORS}

REAL = {
    "t5-small": (60_506_624, "transformers 5.23.0 T5ForConditionalGeneration built from this config on the meta device (lm_head tied)"),
    "flan-t5-base": (222_903_552, "transformers 5.23.0 T5ForConditionalGeneration built from this config on the meta device (5.23 ties lm_head; the checkpoint's own head makes 247 577 856)"),
    "mt5-small": (172_119_424, "transformers 5.23.0 MT5ForConditionalGeneration built from this config on the meta device (5.23 ties lm_head; the checkpoint's own head makes 300 176 768)"),
    "bart-base": (139_470_681, "transformers 5.23.0 BartForConditionalGeneration built from this config on the meta device (final_logits_bias included)"),
    "mbart-large-50": (611_129_542, "transformers 5.23.0 MBartForConditionalGeneration built from this config on the meta device (final_logits_bias included)"),
    "whisper-small": (241_734_912, "transformers 5.23.0 WhisperForConditionalGeneration built from this config on the meta device"),
    "whisper-large-v3": (1_543_490_560, "transformers 5.23.0 WhisperForConditionalGeneration built from this config on the meta device"),
}
_ACTS = "forward activations"
WARN = {
    "t5-small": [_ACTS], "flan-t5-base": [_ACTS],
    "bart-base": [_ACTS, "exceed the 1024 positions"], "mt5-small": [_ACTS],
    "mbart-large-50": [_ACTS, "exceed the 1024 positions"],
    "mt5-small@1024x2-gen64": [_ACTS], "mbart-large-50@512x4-gen128": [_ACTS],
    "whisper-small": [_ACTS, "exceed the 448 positions"],
    "whisper-large-v3": [_ACTS, "exceed the 448 positions"],
    "t5-small@512x8-gen128": [_ACTS], "flan-t5-base@1x4-src2048": [_ACTS],
    "bart-base@1x16-gen256": [_ACTS],
    "whisper-small@4x16-gen224": [_ACTS], "whisper-large-v3@4x1-gen444": [_ACTS],
}
LINES = {k: generation for k in REAL}
# Generation as users run it: T5 summarising 8 sources of 512 tokens into 128 (the
# decoder's prompt is its start token), flan-t5 over a 2048-token source, BART with a
# 16-token prompt generating 256, Whisper transcribing 16 and 4 clips of 30 s (the
# decoder's prompt: start, language, task, no-timestamps).
EXTRA = [
    ("t5-small@512x8-gen128", "t5-small", 1),
    ("flan-t5-base@1x4-src2048", "flan-t5-base", 1),
    ("bart-base@1x16-gen256", "bart-base", 16),
    ("mt5-small@1024x2-gen64", "mt5-small", 1),
    ("mbart-large-50@512x4-gen128", "mbart-large-50", 2),
    ("whisper-small@4x16-gen224", "whisper-small", 4),
    ("whisper-large-v3@4x1-gen444", "whisper-large-v3", 4),
]
INPUTS = {
    "t5-small@512x8-gen128": {"sequences": "8", "encoder-length": "512", "generate": "128"},
    "flan-t5-base@1x4-src2048": {"sequences": "4", "encoder-length": "2048", "generate": "256"},
    "bart-base@1x16-gen256": {"sequences": "16", "encoder-length": "1024", "generate": "256"},
    "whisper-small@4x16-gen224": {"sequences": "16", "generate": "224"},
    "mt5-small@1024x2-gen64": {"sequences": "2", "encoder-length": "1024", "generate": "64"},
    "mbart-large-50@512x4-gen128": {"sequences": "4", "encoder-length": "512", "generate": "128"},
    "whisper-large-v3@4x1-gen444": {"generate": "444"},
}
# The config classes' defaults (transformers 5.23 T5Config, MT5Config, UMT5Config) for
# keys a published config leaves out (t5-small names neither).
DEFAULTS = {
    "t5": {"feed_forward_proj": "relu", "relative_attention_num_buckets": 32},
    "mt5": {"feed_forward_proj": "gated-gelu", "relative_attention_num_buckets": 32},
    "umt5": {"feed_forward_proj": "gated-gelu", "relative_attention_num_buckets": 32},
}

# No rotary embedding: no frequency buffers.
ROPE = {k: None for k in TENSORS}
