#!/usr/bin/env bash
# GPU validation of gpumem-agent: runs a PREPARED release binary through every command
# on a real GPU and writes every output to one folder. It builds nothing.
#
#   tests/gpu/run.sh [BINARY] [OUTDIR]
#     BINARY  default target/release/gpumem-agent  (cargo build --release -p gpumem-agent)
#     OUTDIR  default $OUT, else ./gpu-results     (must be new or empty)
#
# Exit status: 0 when every step ended with the exit code it expects, 1 otherwise.
# Steps and expected exits are listed in OUTDIR/summary.txt; see tests/gpu/README.md.
set -u

BIN=${1:-target/release/gpumem-agent}
OUTDIR=${2:-${OUT:-gpu-results}}
HERE=$(cd "$(dirname "$0")" && pwd)

if [ ! -x "$BIN" ]; then
  echo "run.sh: no executable at $BIN (build it first: cargo build --release -p gpumem-agent)" >&2
  exit 2
fi
mkdir -p "$OUTDIR"
if [ -n "$(ls -A "$OUTDIR" 2>/dev/null)" ]; then
  echo "run.sh: $OUTDIR is not empty; give a new folder" >&2
  exit 2
fi
SUMMARY="$OUTDIR/summary.txt"
FAILED=0

# cuBLAS is often not on the loader path on GPU machines: look for the CUDA toolkit's
# lib64 or PyTorch's pip wheels (nvidia/cu13/lib, nvidia/cublas/lib).
find_cublas_dir() {
  if ldconfig -p 2>/dev/null | grep -q 'libcublas\.so'; then return 0; fi
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    if ls "$d"/libcublas.so* >/dev/null 2>&1; then echo "$d"; return 0; fi
  done
  if command -v python3 >/dev/null; then
    d=$(python3 - <<'PY' 2>/dev/null
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
for r in roots:
    for hit in sorted(glob.glob(os.path.join(r, "**", "libcublas.so*"), recursive=True)):
        print(os.path.dirname(hit)); raise SystemExit
PY
)
    if [ -n "$d" ]; then echo "$d"; return 0; fi
  fi
  d=$(find / -name 'libcublas.so*' -not -path '/proc/*' 2>/dev/null | head -n 1)
  [ -n "$d" ] && dirname "$d"
}
CUBLAS_DIR=$(find_cublas_dir)
if [ -n "$CUBLAS_DIR" ]; then
  export LD_LIBRARY_PATH="$CUBLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
{
  echo "gpumem-agent GPU validation"
  echo "binary: $BIN ($("$BIN" --version 2>&1))"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "LD_LIBRARY_PATH: ${LD_LIBRARY_PATH:-}"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv 2>&1 || true
  echo
} > "$SUMMARY"

# step NAME EXPECTED_EXIT ARGS...: runs the agent, keeps stdout/stderr, records the exit.
step() {
  local name=$1 expect=$2; shift 2
  local t0 t1 rc
  t0=$(date +%s%N)
  "$BIN" "$@" > "$OUTDIR/$name.stdout" 2> "$OUTDIR/$name.stderr"
  rc=$?
  t1=$(date +%s%N)
  local verdict=ok
  if [ "$rc" != "$expect" ]; then verdict=UNEXPECTED; FAILED=1; fi
  printf '%-28s exit %s (expected %s) %8.1f ms  %s\n' "$name" "$rc" "$expect" \
    "$(( (t1 - t0) / 1000 ))e-3" "$verdict" >> "$SUMMARY"
  echo "$name: exit $rc ($verdict)"
}

SEED=(--batch 2 --context 128 --width 1024 --dtype float32 --warmup 3 --repeats 5)

step environment            0 environment --device cuda:0
step environment-json       0 environment --device all --json
# Start-to-exit budget of `environment`: best of 5.
best=""
for _ in 1 2 3 4 5; do
  t0=$(date +%s%N); "$BIN" environment --json > /dev/null 2>&1; t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
done
echo "environment start-to-exit, best of 5: ${best} ms" >> "$SUMMARY"

step measure-f32            0 measure --device cuda:0 "${SEED[@]}" --output "$OUTDIR/measure-f32.json"
step measure-f32-events     0 measure --device cuda:0 "${SEED[@]}" --events jsonl --output "$OUTDIR/measure-f32-events.json"
step measure-f16            0 measure --device cuda:0 --batch 2 --context 128 --width 1024 --dtype float16 --warmup 3 --repeats 5 --output "$OUTDIR/measure-f16.json"
step measure-bf16           0 measure --device cuda:0 --batch 2 --context 128 --width 1024 --dtype bfloat16 --warmup 3 --repeats 5 --output "$OUTDIR/measure-bf16.json"
step measure-trim           0 measure --device cuda:0 "${SEED[@]}" --trim-between-repeats --output "$OUTDIR/measure-f32-trim.json"
step measure-all            0 measure --device all "${SEED[@]}" --output "$OUTDIR/measure-all.json"
step measure-large          0 measure --device cuda:0 --batch 8 --context 1024 --width 4096 --layers 8 --dtype bfloat16 --warmup 3 --repeats 5 --output "$OUTDIR/measure-large-bf16.json"
# Induced out-of-memory: a 2^40-element weight (4 TiB) fails in model_load ...
step oom-model-load         1 measure --device cuda:0 --batch 1 --context 1 --width 1048576 --layers 1 --warmup 0 --repeats 1 --output "$OUTDIR/oom-model-load.json"
# ... and activations of ~52 GB each fail inside cold_forward on a 141 GB H200.
step oom-forward            1 measure --device cuda:0 --batch 1600 --context 1000 --width 8192 --layers 2 --warmup 0 --repeats 1 --output "$OUTDIR/oom-forward.json"
step refuse-overwrite       2 measure --device cuda:0 "${SEED[@]}" --output "$OUTDIR/measure-f32.json"
step bisect-width           0 bisect --vary width --from 1024 --to 262144 --batch 1 --context 1 --layers 1 --warmup 0 --repeats 1 --device cuda:0 --output-dir "$OUTDIR/bisect-width"

for f in oom-model-load oom-forward; do
  [ -f "$OUTDIR/$f.json" ] || { echo "$f: no result written (expected a failed result)" >> "$SUMMARY"; FAILED=1; }
done

# PyTorch cross-check on the same shapes with the cudaMallocAsync backend.
if command -v python3 >/dev/null && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 "$HERE/torch_crosscheck.py" \
    --device cuda:0 --batch 2 --context 128 --width 1024 --layers 4 --dtype float32 --warmup 3 --repeats 5 \
    > "$OUTDIR/torch-f32.json" 2> "$OUTDIR/torch-f32.stderr" \
    && echo "torch cross-check: written" >> "$SUMMARY" \
    || { echo "torch cross-check: FAILED (see torch-f32.stderr)" >> "$SUMMARY"; FAILED=1; }
else
  echo "torch cross-check: SKIPPED (no python3 with CUDA-enabled torch)" >> "$SUMMARY"
fi

# `run`: the user's-own-workload path, on a tiny Llama from a config (random init, no
# download), training 3 steps with AdamW and generating 64 tokens; each script prints its
# own torch.cuda counters, and compare_run.py sets them beside the probe's figures and
# NVML's timeline beside nvidia-smi.
if command -v python3 >/dev/null && python3 -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
  step run-llama-train     0 run --device cuda:0 --output "$OUTDIR/gpu-run-llama-train.json" -- \
    python3 "$HERE/llama_train.py" --device cuda:0 --steps 3 --stats "$OUTDIR/gpu-run-llama-train.stats.json"
  step run-llama-generate  0 run --device cuda:0 --output "$OUTDIR/gpu-run-llama-generate.json" -- \
    python3 "$HERE/llama_generate.py" --device cuda:0 --new 64 --stats "$OUTDIR/gpu-run-llama-generate.stats.json"
  step run-refuse-overwrite 2 run --output "$OUTDIR/gpu-run-llama-train.json" -- python3 -c 'print(1)'
  # `run --memory-history`: PyTorch's allocator history of the same training, each
  # phase's peak attributed to the estimate's lines; compare_history.py checks that the
  # attribution covers at least 95 % of each phase's allocated peak and that
  # torch.cuda._memory_viz reads the snapshot.
  step run-llama-history   0 run --device cuda:0 --memory-history "$OUTDIR/gpu-run-llama-history.pickle" \
    --output "$OUTDIR/gpu-run-llama-history.json" -- \
    python3 "$HERE/llama_train.py" --device cuda:0 --steps 3 --stats "$OUTDIR/gpu-run-llama-history.stats.json"
  if [ -f "$OUTDIR/gpu-run-llama-history.json" ] && [ -f "$OUTDIR/gpu-run-llama-history.pickle" ]; then
    python3 "$HERE/compare_history.py" "$OUTDIR/gpu-run-llama-history.json" "$OUTDIR/gpu-run-llama-history.pickle" >> "$SUMMARY" 2>&1 \
      || { echo "compare_history.py: PAST TOLERANCE" >> "$SUMMARY"; FAILED=1; }
  else
    echo "run --memory-history: no result or snapshot written" >> "$SUMMARY"; FAILED=1
  fi
  # The same two workloads traced on the CPU (meta device) and estimated; compare_trace.py
  # sets traced, computed and observed side by side and fails past its stated tolerances.
  (cd "$HERE" && python3 llama_common.py "$OUTDIR/tiny-llama-config.json")
  TRAIN_FLAGS=(--config "$OUTDIR/tiny-llama-config.json" --train full --master-weights false --optimizer adamw --sequences 4 --context 256 --attention sdpa)
  GEN_FLAGS=(--config "$OUTDIR/tiny-llama-config.json" --sequences 2 --context 128 --generate 64 --attention sdpa)
  "$BIN" trace "${TRAIN_FLAGS[@]}" --python python3 --json > "$OUTDIR/trace-llama-train.json" 2>> "$SUMMARY" || FAILED=1
  "$BIN" trace "${GEN_FLAGS[@]}" --python python3 --json > "$OUTDIR/trace-llama-generate.json" 2>> "$SUMMARY" || FAILED=1
  "$BIN" estimate "${TRAIN_FLAGS[@]}" --trace --python python3 --json > "$OUTDIR/estimate-llama-train.json" 2>> "$SUMMARY" || FAILED=1
  "$BIN" estimate "${GEN_FLAGS[@]}" --trace --python python3 --json > "$OUTDIR/estimate-llama-generate.json" 2>> "$SUMMARY" || FAILED=1
  for k in train generate; do
    python3 "$HERE/compare_trace.py" "$OUTDIR/trace-llama-$k.json" "$OUTDIR/estimate-llama-$k.json" \
      "$OUTDIR/gpu-run-llama-$k.json" "$k" >> "$SUMMARY" 2>&1 \
      || { echo "compare_trace.py $k: PAST TOLERANCE" >> "$SUMMARY"; FAILED=1; }
  done
  for k in train generate; do
    if [ -f "$OUTDIR/gpu-run-llama-$k.json" ] && [ -f "$OUTDIR/gpu-run-llama-$k.stats.json" ]; then
      python3 "$HERE/compare_run.py" "$OUTDIR/gpu-run-llama-$k.json" "$OUTDIR/gpu-run-llama-$k.stats.json" "$k" >> "$SUMMARY" 2>&1 \
        || { echo "compare_run.py $k: MISMATCH" >> "$SUMMARY"; FAILED=1; }
    else
      echo "run llama $k: no result or stats written" >> "$SUMMARY"; FAILED=1
    fi
  done
else
  echo "run (tiny Llama): SKIPPED (no python3 with CUDA-enabled torch and transformers)" >> "$SUMMARY"
fi

# Comparison and budgets (needs python3 only, no torch).
if command -v python3 >/dev/null; then
  python3 "$HERE/compare.py" "$OUTDIR" >> "$SUMMARY" 2>&1 || { echo "compare.py failed" >> "$SUMMARY"; FAILED=1; }
fi

echo >> "$SUMMARY"
if [ "$FAILED" = 0 ]; then echo "ALL STEPS AS EXPECTED" >> "$SUMMARY"; else echo "SOME STEPS UNEXPECTED" >> "$SUMMARY"; fi
cat "$SUMMARY"
exit "$FAILED"
