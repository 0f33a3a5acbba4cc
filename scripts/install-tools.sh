#!/usr/bin/env bash
# Installs every tool the checks need, idempotently: each step is skipped when the
# tool is already present at the pinned version. Tools live under one cache folder
# ($GPUMEM_TOOLS, default ~/.cache/gpumem-tools) that scripts/env.sh puts on PATH.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=scripts/env.sh
source "$here/env.sh"

TRUNK_VERSION=0.21.14
BINARYEN_VERSION=132
CARGO_FUZZ_VERSION=0.13.2
# wasm-bindgen-cli must match the wasm-bindgen in Cargo.lock exactly.
WASM_BINDGEN_VERSION="$(grep -A1 '^name = "wasm-bindgen"$' "$here/../Cargo.lock" | sed -n 's/^version = "\(.*\)"/\1/p')"

log() { printf '[install-tools] %s\n' "$*"; }
mkdir -p "$GPUMEM_TOOLS/bin"

rustup target list --installed | grep -qx wasm32-unknown-unknown \
  || rustup target add wasm32-unknown-unknown

if [ "$(trunk --version 2>/dev/null)" != "trunk $TRUNK_VERSION" ]; then
  log "installing trunk $TRUNK_VERSION (several minutes)"
  cargo install trunk --version "$TRUNK_VERSION" --locked --root "$GPUMEM_TOOLS" --quiet
fi

if [ "$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $WASM_BINDGEN_VERSION" ]; then
  log "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION"
  # Without --locked: a crate pinned in its lockfile is no longer on the registry.
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --root "$GPUMEM_TOOLS" --quiet --force
fi

if ! wasm-opt --version 2>/dev/null | grep -q "version $BINARYEN_VERSION"; then
  log "installing binaryen@$BINARYEN_VERSION (wasm-opt) from npm"
  # Debian's binaryen 108 emits a wasm that Chromium rejects; 132 is known good.
  npm install --silent --prefix "$GPUMEM_TOOLS/npm" "binaryen@$BINARYEN_VERSION" >/dev/null
  ln -sf "$GPUMEM_TOOLS/npm/node_modules/.bin/wasm-opt" "$GPUMEM_TOOLS/bin/wasm-opt"
fi

if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  log "installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --root "$GPUMEM_TOOLS" --quiet
fi

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  log "installing Debian chromium + chromium-driver"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
# PyTorch (CPU use only; the PyPI wheel imports without a GPU) in its own venv, for the
# `run` probe tests (agent/python). 2.11 is the version the GPU machine carries.
TORCH_VERSION=2.11.0
torch_py="$GPUMEM_TOOLS/torch-venv/bin/python"
if [ "$("$torch_py" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)" != "$TORCH_VERSION" ]; then
  log "installing torch $TORCH_VERSION into $GPUMEM_TOOLS/torch-venv (about 5 GB, a few minutes)"
  python3 -m venv "$GPUMEM_TOOLS/torch-venv"
  "$torch_py" -m pip install --quiet --disable-pip-version-check "torch==$TORCH_VERSION" numpy
fi
log "tools ready in $GPUMEM_TOOLS"
