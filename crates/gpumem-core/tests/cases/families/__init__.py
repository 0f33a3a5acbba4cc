"""One module per model family: its checkpoint layout, KV cache and recurrent state where
they are its own, its Llama-style decoder options otherwise, and its real configs'
published totals. The oracle (../oracle.py) reads every module of this folder."""
