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
# The wheel (scripts/test-wheel.sh): maturin, and zig for the manylinux2014 link.
MATURIN_VERSION=1.16.0
ZIGLANG_VERSION=0.17.0
# wasm-bindgen-cli must match the wasm-bindgen in Cargo.lock exactly.
WASM_BINDGEN_VERSION="$(grep -A1 '^name = "wasm-bindgen"$' "$here/../Cargo.lock" | sed -n 's/^version = "\(.*\)"/\1/p')"

log() { printf '[install-tools] %s\n' "$*"; }
mkdir -p "$GPUMEM_TOOLS/bin"

rustup target list --installed | grep -qx wasm32-unknown-unknown \
  || rustup target add wasm32-unknown-unknown
# std's sources: scripts/build-web.sh rebuilds std for the pages' wasm.
rustup component list --installed | grep -qx rust-src \
  || rustup component add rust-src

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

# maturin and ziglang from PyPI into their own virtual environment; only maturin goes
# on PATH (the venv's python must not shadow the system's), and test-wheel.sh points
# maturin's zig lookup at this venv's python (CARGO_ZIGBUILD_PYTHON_PATH).
py="$GPUMEM_TOOLS/python"
if [ "$("$py/bin/maturin" --version 2>/dev/null)" != "maturin $MATURIN_VERSION" ] \
    || [ "$("$py/bin/python" -m ziglang version 2>/dev/null)" != "$ZIGLANG_VERSION" ]; then
  log "installing maturin $MATURIN_VERSION and ziglang $ZIGLANG_VERSION from PyPI"
  python3 -m venv "$py"
  "$py/bin/pip" install --quiet --disable-pip-version-check \
    "maturin==$MATURIN_VERSION" "ziglang==$ZIGLANG_VERSION"
fi
ln -sf "$py/bin/maturin" "$GPUMEM_TOOLS/bin/maturin"

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  log "installing Debian chromium + chromium-driver"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
# PyTorch (CPU use only; the PyPI wheel imports without a GPU) in its own venv, for the
# `run` probe tests (agent/python). 2.11 is the version the GPU machine carries.
TORCH_VERSION=2.11.0
torch_py="$GPUMEM_TOOLS/torch-venv/bin/python"
# A distribution's installed version in that venv, read from its metadata: importing
# torch, transformers, deepspeed, accelerate and diffusers only to ask took about 20 s of
# every run.
pkg_version() {
  "$torch_py" -c 'import sys
from importlib.metadata import version
try:
    print(version(sys.argv[1]).split("+")[0])
except Exception:
    pass' "$1" 2>/dev/null || true
}
if [ "$(pkg_version torch)" != "$TORCH_VERSION" ]; then
  log "installing torch $TORCH_VERSION into $GPUMEM_TOOLS/torch-venv (about 5 GB, a few minutes)"
  python3 -m venv "$GPUMEM_TOOLS/torch-venv"
  "$torch_py" -m pip install --quiet --disable-pip-version-check "torch==$TORCH_VERSION" numpy
fi
# transformers and peft beside torch, for `gpumem-agent trace` and its tests (models
# built from config.json on the meta device; nothing downloaded at run time). Pinned,
# installed without touching torch (--no-deps would miss their small dependencies, so
# torch is pinned in the same command instead).
TRANSFORMERS_VERSION=5.23.0
PEFT_VERSION=0.21.2
if [ "$(pkg_version transformers) $(pkg_version peft)" != "$TRANSFORMERS_VERSION $PEFT_VERSION" ]; then
  log "installing transformers $TRANSFORMERS_VERSION and peft $PEFT_VERSION into $GPUMEM_TOOLS/torch-venv"
  "$torch_py" -m pip install --quiet --disable-pip-version-check \
    "torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION" "peft==$PEFT_VERSION"
fi
# DeepSpeed beside torch, for the test that checks the per-rank model states against
# its own estimator (`estimate_zero2_model_states_mem_needs`, `..._zero3_...`: plain
# arithmetic, no GPU). A source distribution whose setup.py imports torch, hence no build
# isolation; DS_BUILD_OPS=0 compiles no kernel (none is needed on CPU).
DEEPSPEED_VERSION=0.19.8
if [ "$(pkg_version deepspeed)" != "$DEEPSPEED_VERSION" ]; then
  log "installing deepspeed $DEEPSPEED_VERSION into $GPUMEM_TOOLS/torch-venv (DS_BUILD_OPS=0)"
  "$torch_py" -m pip install --quiet --disable-pip-version-check setuptools wheel
  DS_BUILD_OPS=0 "$torch_py" -m pip install --quiet --disable-pip-version-check \
    --no-build-isolation "torch==$TORCH_VERSION" "deepspeed==$DEEPSPEED_VERSION"
fi
# accelerate beside torch, for the test that runs a job under `accelerate launch`
# (agent/tests/run_cli.rs: its multi-process launcher with gloo on the CPU).
ACCELERATE_VERSION=1.16.0
if [ "$(pkg_version accelerate)" != "$ACCELERATE_VERSION" ]; then
  log "installing accelerate $ACCELERATE_VERSION into $GPUMEM_TOOLS/torch-venv"
  "$torch_py" -m pip install --quiet --disable-pip-version-check \
    "torch==$TORCH_VERSION" "accelerate==$ACCELERATE_VERSION"
fi
# diffusers beside torch, for the diffusion cases' oracle (crates/gpumem-core/tests/
# diffusion/oracle.py: pipelines' components built on the meta device and traced).
DIFFUSERS_VERSION=0.42.1
if [ "$(pkg_version diffusers)" != "$DIFFUSERS_VERSION" ]; then
  log "installing diffusers $DIFFUSERS_VERSION into $GPUMEM_TOOLS/torch-venv"
  "$torch_py" -m pip install --quiet --disable-pip-version-check \
    "torch==$TORCH_VERSION" "diffusers==$DIFFUSERS_VERSION"
fi
# The cluster tests (tests/cluster/run.sh): a single-node Slurm with munge, Prometheus,
# its Pushgateway and node_exporter, from Debian (bookworm: Slurm 22.05, Prometheus 2.42).
cluster_missing=()
for pair in munged:munge slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client \
    prometheus:prometheus prometheus-pushgateway:prometheus-pushgateway \
    prometheus-node-exporter:prometheus-node-exporter; do
  command -v "${pair%%:*}" >/dev/null || cluster_missing+=("${pair#*:}")
done
if [ "${#cluster_missing[@]}" -gt 0 ]; then
  log "installing Debian ${cluster_missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${cluster_missing[@]}" >/dev/null
fi
# kubernetes-validate (PyPI) carries Kubernetes' JSON schemas (batch/v1 Job among them)
# and validates the manifests `bisect --plan k8s` writes.
KUBERNETES_VALIDATE_VERSION=1.37.0
kv="$GPUMEM_TOOLS/kubernetes-validate"
if [ "$("$kv/bin/kubernetes-validate" --version 2>/dev/null | awk '{print $NF}')" != "$KUBERNETES_VALIDATE_VERSION" ]; then
  log "installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION from PyPI"
  python3 -m venv "$kv"
  "$kv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi
log "tools ready in $GPUMEM_TOOLS"
