"""A real transformers generation on CPU: a tiny Llama built from its config (no weights
downloaded), 2 prompts of 10 tokens, 6 new tokens. `run` traces the same generation
from the config the probe sends."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
model = LlamaForCausalLM(config).eval()
prompt = torch.randint(1, 128, (2, 10))
with torch.no_grad():
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
print("generated", tuple(out.shape))
