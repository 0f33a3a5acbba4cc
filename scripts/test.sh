#!/usr/bin/env bash
# The one test command (README, CI): installs what is missing, then runs every
# check. Each step prints its name and duration; the first failure stops the run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
# Under this script a test whose tool is missing fails instead of skipping
# (tests/src/lib.rs: gpumem_e2e::skip); only wrong-machine checks may skip.
export GPUMEM_REQUIRE_TOOLS=1

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
step() {
  local name=$1; shift
  local t0=$SECONDS
  printf '\n==> %s\n' "$name"
  "$@" 2>&1 | tee -a "$log"
  printf '<== %s (%ss)\n' "$name" "$((SECONDS - t0))"
}

step "install tools (idempotent)" ./scripts/install-tools.sh
step "fetch crates" cargo fetch --quiet
step "format" cargo fmt --all --check
# The family files are declared by the core's build script (a new family is its file
# alone), so `cargo fmt` does not reach them through a `mod` line: checked by name.
step "format (family files)" bash -c 'rustfmt --check --edition 2024 crates/gpumem-core/src/import/config/families/*.rs'
# The repository stands alone: no citation of planning notes, requirement ids or tracker
# numbers in code, CLI, pages or docs (a grep, under a second).
step "no citation of texts outside the repository" ./scripts/references.sh
# The estimator's fixture cases are what the independent oracle computes (every family's
# checkpoint layout in tests/cases/families/): regenerated in memory and compared, so a
# case cannot drift from its derivation (a few seconds, standard library only).
step "fixture cases are the oracle's" python3 crates/gpumem-core/tests/cases/oracle.py --check
step "clippy (native)" cargo clippy --workspace --all-targets --quiet -- -D warnings
step "clippy (pages, lookup, engine, training and diffusion modules, wasm32)" cargo clippy -p gpumem-web -p gpumem-lookup -p gpumem-engine -p gpumem-training -p gpumem-diffusion --target wasm32-unknown-unknown --quiet -- -D warnings
step "core builds for wasm32" cargo build -p gpumem-core --target wasm32-unknown-unknown --quiet
if [ -x scripts/check-dist.sh ]; then
  step "dist/ is up to date" ./scripts/check-dist.sh
fi
# The committed pages' wasm against their gzip budgets (the timings run with the browser
# tests below).
step "page sizes within budget" ./scripts/web-budgets.sh --size-only
# The end-to-end tests drive the real agent binary (which embeds dist/).
step "build the agent" cargo build -p gpumem-agent --quiet
step "README's example is the command's output" ./scripts/readme-example.sh
# The `run` probe against real PyTorch on CPU (memory reader replaced by the recording
# stand-in). The torch venv is a tool: with GPUMEM_REQUIRE_TOOLS the tests that need it fail
# without it (gpumem_e2e::torch_python).
step "run probe against PyTorch on CPU" "$GPUMEM_TOOLS/torch-venv/bin/python" -m unittest discover -s agent/python/tests
step "native tests (unit, CLI, sockets, browser end to end)" cargo test --workspace --quiet
# Past one machine, with the real components (tests/cluster/run.sh): a single-node Slurm
# with munge, Prometheus scraping node_exporter's textfile collector and a Pushgateway,
# all on loopback in a temporary folder: a 2-round parallel bisect as Slurm arrays, an
# exporting run as a Slurm job (series queried through Prometheus' HTTP API, gone after
# the delete), the merged fleet sheet, the Kubernetes manifest against batch/v1 Job.
# SYNTHETIC figures (the debug build's test stand-in): no GPU here. About 1 min.
step "cluster: Slurm, Prometheus, fleet sheet (tests/cluster/run.sh)" tests/cluster/run.sh target/debug/gpumem-agent
# The wheel a user pip-installs: built by maturin (release, manylinux2014 via zig; cold
# about 1.5 min of CPU — 5.6 min wall on a 2-core machine shared five ways — and about
# 15 s when target/ is warm), installed into a fresh venv and run from there
# (estimate, serve, import gpumem_probe, completions, man).
step "wheel: build, install in a fresh venv, run" ./scripts/test-wheel.sh
step "core cases under wasm32 in headless Chromium" \
  env CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner CHROMEDRIVER=/usr/bin/chromedriver \
  cargo test -p gpumem-core --target wasm32-unknown-unknown --test cases
# Three targets, bounded together to 60 s by default (20 s each); fuzz/seeds/<target>
# (valid documents, when present) starts the fuzzer past the JSON syntax.
for target in headers sheet wire; do
  step "fuzz the $target reader (bounded: ${GPUMEM_FUZZ_SECONDS:-20}s)" \
    env RUSTC_BOOTSTRAP=1 TARGET="$target" bash -c 'set -o pipefail; cd fuzz && mkdir -p "corpus/$TARGET" && seeds=() && { [ ! -d "seeds/$TARGET" ] || seeds=("corpus/$TARGET" "seeds/$TARGET"); } && cargo fuzz run "$TARGET" "${seeds[@]}" --sanitizer none -- -max_total_time="${GPUMEM_FUZZ_SECONDS:-20}" -rss_limit_mb=2048 2>&1 | tail -n 3'
done
# GPU-only: the real device path (tests/gpu/README.md). On a machine without a CUDA
# driver it is counted as skipped, never as passed.
script_skips=0
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so'; then
  gpu_out="$(mktemp -d)"
  step "GPU validation (tests/gpu/run.sh)" \
    bash -c 'cargo build --release -q -p gpumem-agent && tests/gpu/run.sh target/release/gpumem-agent "$0"' "$gpu_out"
else
  printf '\n==> GPU validation (tests/gpu/run.sh)\n'
  echo "SKIPPED: GPU validation (tests/gpu/run.sh): no CUDA driver (libcuda.so) on this machine" | tee -a "$log"
  script_skips=$((script_skips + 1))
fi
# One closing line over every test runner above (cargo's libtest and wasm-bindgen-test).
# A test that could not run here printed `SKIPPED: <test>: <reason>` (gpumem_e2e::skip)
# and returned, which libtest counts as passed: those are moved to "skipped", as are
# tests libtest ignored and the script's own skipped steps.
passed=$({ grep -Eo 'test result: ok\. [0-9]+ passed' "$log" || true; } | awk '{s += $4} END {print s + 0}')
# Python's unittest (the run probe): "Ran N tests" then "OK" or "OK (skipped=K)".
py_ran=$({ grep -Eo '^Ran [0-9]+ tests?' "$log" || true; } | awk '{s += $2} END {print s + 0}')
py_skipped=$({ grep -Eo '^OK \(skipped=[0-9]+\)' "$log" || true; } | { grep -Eo '[0-9]+' || true; } | awk '{s += $1} END {print s + 0}')
passed=$((passed + py_ran - py_skipped))
ignored=$({ grep -E 'test result: ok\.' "$log" || true; } | { grep -Eo '[0-9]+ ignored' || true; } | awk '{s += $1} END {print s + 0}')
skip_lines=$(grep -c '^SKIPPED: ' "$log" || true)
test_skips=$((skip_lines - script_skips))
printf '\nall checks passed\n'
grep '^SKIPPED: ' "$log" || true
printf 'tests: %s passed, 0 failed, %s skipped\n' "$((passed - test_skips))" "$((test_skips + ignored + script_skips + py_skipped))"
