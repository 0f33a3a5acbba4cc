#!/usr/bin/env bash
# The one test command (README, CI): installs what is missing, then runs every
# check. Each step prints its name and duration; the first failure stops the run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

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
step "clippy (native)" cargo clippy --workspace --all-targets --quiet -- -D warnings
step "clippy (page, wasm32)" cargo clippy -p gpumem-web --target wasm32-unknown-unknown --quiet -- -D warnings
step "core builds for wasm32" cargo build -p gpumem-core --target wasm32-unknown-unknown --quiet
if [ -x scripts/check-dist.sh ]; then
  step "dist/ is up to date" ./scripts/check-dist.sh
fi
# The end-to-end tests drive the real agent binary (which embeds dist/).
step "build the agent" cargo build -p gpumem-agent --quiet
step "native tests (unit, CLI, sockets, browser end to end)" cargo test --workspace --quiet
# The wheel a user pip-installs: built by maturin (release, manylinux2014 via zig; cold
# about 1.5 min of CPU — 5.6 min wall on a 2-core machine shared five ways — and about
# 15 s when target/ is warm), installed into a fresh venv and run from there
# (estimate, serve, import gpumem_probe, completions, man).
step "wheel: build, install in a fresh venv, run" ./scripts/test-wheel.sh
step "core cases under wasm32 in headless Chromium" \
  env CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner CHROMEDRIVER=/usr/bin/chromedriver \
  cargo test -p gpumem-core --target wasm32-unknown-unknown --test cases
step "fuzz the header parsers (bounded: ${GPUMEM_FUZZ_SECONDS:-30}s)" \
  env RUSTC_BOOTSTRAP=1 bash -c 'set -o pipefail; cd fuzz && cargo fuzz run headers --sanitizer none -- -max_total_time="${GPUMEM_FUZZ_SECONDS:-30}" -rss_limit_mb=2048 2>&1 | tail -n 3'
# One closing line over every test runner above (cargo's libtest and wasm-bindgen-test).
passed=$(grep -Eo 'test result: ok\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
printf '\nall checks passed\ntests: %s passed, 0 failed\n' "$passed"
