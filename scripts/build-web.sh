#!/usr/bin/env bash
# Builds the page into dist/ (the committed release build) and stamps dist/ with
# the hash of its inputs, which scripts/check-dist.sh compares to find a stale dist/.
# Offline: tools come from PATH (scripts/install-tools.sh), crates from `cargo fetch`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
# shellcheck source=scripts/env.sh
source "$here/env.sh"
cd "$root"
for tool in trunk wasm-bindgen wasm-opt; do
  command -v "$tool" >/dev/null || { echo "build-web: $tool not found; run scripts/install-tools.sh" >&2; exit 2; }
done
cargo fetch --locked >/dev/null
rm -rf dist
# erase_components: Leptos type-erases components and reactive closures, which cuts
# monomorphisation (a smaller wasm); it only affects the wasm32 build of the page.
(cd web && RUSTFLAGS="--cfg erase_components" trunk build --release)
"$here/check-dist.sh" --stamp
echo "build-web: dist/ written"
"$here/web-budgets.sh" --size-only
