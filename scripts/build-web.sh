#!/usr/bin/env bash
# Builds the site into dist/: two pages, two wasm binaries of the web crate —
#   dist/index.html        the dimensioner (web/index.html, bin gpumem-web);
#   dist/agent/index.html  the agent & sheet page (web/agent.html, bin gpumem-web-agent),
#                          served at /agent/ (index.html forwards #token=… there).
# dist/ is the committed release build; this also stamps it with
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
# (Only for the trunk builds: check-dist.sh's `cargo tree` must not see it.)
flags="--cfg erase_components"
# The agent page first, into a scratch directory (trunk empties its --dist), then the
# dimensioner into dist/, then the agent page copied under dist/agent/.
stage="$root/target/web-agent-dist"
rm -rf "$stage"
(cd web && RUSTFLAGS="$flags" trunk build agent.html --release --html-output index.html --public-url /agent/ --dist "$stage")
(cd web && RUSTFLAGS="$flags" trunk build --release)
mkdir -p dist/agent
cp -R "$stage"/. dist/agent/
rm -rf "$stage"
"$here/check-dist.sh" --stamp
echo "build-web: dist/ written"
"$here/web-budgets.sh" --size-only
