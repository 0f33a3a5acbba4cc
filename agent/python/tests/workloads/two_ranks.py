"""A torchrun-like launcher: two worker processes with RANK/LOCAL_RANK/WORLD_SIZE set,
each running the training loop (the launcher itself never imports torch)."""

import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
workers = []
for rank in range(2):
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", STEPS="2")
    workers.append(subprocess.Popen([sys.executable, os.path.join(here, "train_adamw.py")], env=env))
sys.exit(max(w.wait() for w in workers))
