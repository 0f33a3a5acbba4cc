"""Encoders, as transformers' AutoModel builds them (the base model an embedding or
reranking server loads; no lm_head, no KV cache):

- BERT, RoBERTa, XLM-RoBERTa (transformers 5.23 modeling_bert.py, modeling_roberta.py,
  modeling_xlm_roberta.py): word, position and token-type embeddings, the embeddings'
  LayerNorm with its bias; per layer query/key/value/output dense with biases, the
  attention's LayerNorm, the intermediate and output dense with biases, the output
  LayerNorm; BertPooler's dense with its bias.
- ModernBERT (modeling_modernbert.py): tok_embeddings and its norm; per layer attn_norm
  (an Identity in layer 0), Wqkv, Wo, mlp_norm, Wi [2 x intermediate, hidden] (input and
  gate), Wo; final_norm; no biases where attention_bias / mlp_bias / norm_bias are false.

The published totals below are what transformers 5.23.0 builds from each config on the
meta device (parameters and persistent buffers; `meta_check.py`, which also traces the
forward of the BERT-style ones against `encoder_forward` here).
"""
from common import g, rope_buffers, rope_freqs, layer_kinds


def bert(c, config, add):
    h, L, V, I = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
    add("embeddings.word_embeddings.weight", (V, h), "vocab")
    add("embeddings.position_embeddings.weight", (c["max_position_embeddings"], h), "vocab")
    add("embeddings.token_type_embeddings.weight", (g(c, "type_vocab_size", default=2), h), "vocab")
    add("embeddings.LayerNorm.weight", (h,), "kept"); add("embeddings.LayerNorm.bias", (h,), "kept")
    for i in range(L):
        p = f"encoder.layer.{i}"
        for n in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            add(f"{p}.{n}.weight", (h, h), "linear_attn"); add(f"{p}.{n}.bias", (h,), "kept")
        add(f"{p}.intermediate.dense.weight", (I, h), "linear_mlp"); add(f"{p}.intermediate.dense.bias", (I,), "kept")
        add(f"{p}.output.dense.weight", (h, I), "linear_mlp"); add(f"{p}.output.dense.bias", (h,), "kept")
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            add(f"{p}.{ln}.weight", (h,), "kept"); add(f"{p}.{ln}.bias", (h,), "kept")
    add("pooler.dense.weight", (h, h), "linear_mlp"); add("pooler.dense.bias", (h,), "kept")


def modernbert(c, config, add):
    h, L, V, I = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
    ab, mb, nb = c.get("attention_bias", False), c.get("mlp_bias", False), c.get("norm_bias", False)
    def norm(name):
        add(f"{name}.weight", (h,), "kept")
        if nb: add(f"{name}.bias", (h,), "kept")
    add("embeddings.tok_embeddings.weight", (V, h), "vocab")
    norm("embeddings.norm")
    for i in range(L):
        p = f"layers.{i}"
        if i > 0:
            norm(f"{p}.attn_norm")
        add(f"{p}.attn.Wqkv.weight", (3 * h, h), "linear_attn")
        if ab: add(f"{p}.attn.Wqkv.bias", (3 * h,), "kept")
        add(f"{p}.attn.Wo.weight", (h, h), "linear_attn")
        if ab: add(f"{p}.attn.Wo.bias", (h,), "kept")
        norm(f"{p}.mlp_norm")
        add(f"{p}.mlp.Wi.weight", (2 * I, h), "linear_mlp")
        if mb: add(f"{p}.mlp.Wi.bias", (2 * I,), "kept")
        add(f"{p}.mlp.Wo.weight", (h, I), "linear_mlp")
        if mb: add(f"{p}.mlp.Wo.bias", (h,), "kept")
    norm("final_norm")


def no_kv(c, tokens, nbytes, engine):
    """An encoder attends over its whole input in one forward: no KV cache."""
    return 0


V = {"bf16": 2, "fp16": 2, "fp32": 4}


def encoder_forward(cfg, tokens, inputs):
    """BertModel's forward at its peak beyond the weights, in the compute dtype, under
    torch.no_grad() (modeling_bert.py, transformers 5.23; every tensor freed with its
    last reference), for a padded batch of `sequences` x `tokens`:
    kept: `embedding_output` (held by BertModel.forward) and, from layer 1 on, the
    layer's input; the MLP's moment: the attention's output, the intermediate dense's
    output and GELU's; the attention's moment: q, k, v and, under eager, matmul(q, k^T)
    and its scaled copy (2 x batch x heads x tokens^2), under sdpa the fused kernel's
    output; under eager, softmax's output (batch x heads x tokens^2) through the MLP
    too (BertLayer.forward: `self_attention_output, _ = self.attention(...)`); the padded batch's mask held through the encoder (eager: float, sdpa: bool)."""
    h, I, H, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    b, s, v = int(inputs.get("sequences", 1)), tokens, V[inputs.get("compute-dtype", "bf16")]
    eager = inputs.get("attention", "sdpa") == "eager"
    T = b * s
    kept = (2 if L >= 2 else 1) * T * h * v
    mlp = T * (h + 2 * I) * v
    probs = b * H * s * s * v if eager else 0  # softmax's output, held by BertLayer (`_`)
    scores = 2 * probs
    attention = 3 * T * h * v + (scores if eager else T * h * v)
    mask = b * s * s * (v if eager else 1)
    if attention > mlp + probs:
        return {"prefill.mlp": kept + attention - scores, "prefill.attention_scores": scores + mask, "kv_cache": 0}
    return {"prefill.mlp": kept + mlp, "prefill.attention_scores": probs + mask, "kv_cache": 0}


TENSORS = {"bert": bert, "roberta": bert, "xlm-roberta": bert, "modernbert": modernbert}
KV = {"bert": no_kv, "roberta": no_kv, "xlm-roberta": no_kv, "modernbert": no_kv}

REAL = {
    "bge-large-en-v1.5": (335_141_888, "transformers 5.23.0 BertModel built from this config on the meta device (the model card's 335M)"),
    "all-distilroberta-v1": (82_118_400, "transformers 5.23.0 RobertaModel built from this config on the meta device"),
    "bge-m3": (567_754_752, "transformers 5.23.0 XLMRobertaModel built from this config on the meta device (the model card's 568M)"),
    "gte-modernbert-base": (149_014_272, "transformers 5.23.0 ModernBertModel built from this config on the meta device (the model card's 149M)"),
}
WARN = {
    "bge-large-en-v1.5": ["exceed the encoder's 512 positions"],
    "all-distilroberta-v1": ["exceed the encoder's 514 positions"],
    "gte-modernbert-base": ["forward activations are not counted"],
    # Within the position table: nothing to say.
    "bge-large-en-v1.5@512x32": [], "bge-large-en-v1.5@512x8-eager": [],
    "all-distilroberta-v1@128x64-eager": [],
}
LINES = {
    "bge-large-en-v1.5": encoder_forward,
    "all-distilroberta-v1": encoder_forward,
    "bge-m3": encoder_forward,
    "gte-modernbert-base": lambda cfg, tokens, inputs: {"kv_cache": 0},
}
# Batches of embedding requests: 32 texts of 512 tokens (sdpa), 8 of 512 under eager
# attention, bge-m3's long inputs (8192 tokens) four at a time.
EXTRA = [
    ("bge-large-en-v1.5@512x32", "bge-large-en-v1.5", 512),
    ("bge-large-en-v1.5@512x8-eager", "bge-large-en-v1.5", 512),
    ("all-distilroberta-v1@128x64-eager", "all-distilroberta-v1", 128),
    ("bge-m3@8192x4", "bge-m3", 8192),
]
INPUTS = {
    "bge-large-en-v1.5@512x32": {"sequences": "32"},
    "bge-large-en-v1.5@512x8-eager": {"sequences": "8", "attention": "eager"},
    "all-distilroberta-v1@128x64-eager": {"sequences": "64", "attention": "eager"},
    "bge-m3@8192x4": {"sequences": "4"},
}

# ModernBertRotaryEmbedding: one table per layer type (a full layer every
# global_attn_every_n_layers, ModernBertConfig's default 3); the others none.
ROPE = {"bert": None, "roberta": None, "xlm-roberta": None,
        "modernbert": lambda c, add: rope_buffers(add, rope_freqs(c), "rotary_emb",
                                                  layer_kinds(c, c.get("global_attn_every_n_layers", 3)))}
