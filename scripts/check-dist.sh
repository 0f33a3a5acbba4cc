#!/usr/bin/env bash
# dist/ is committed (the site is hosted from the repository and embedded in the
# agent), so it must match its sources. The build writes dist/.inputs-hash: a hash
# of every input of the pages — the files of web/ (the lookup module web/lookup too), gpumem-core's and gpumem-proto's sources and
# manifest, rust-toolchain.toml, scripts/build-web.sh (its flags), the release profile, and the page's resolved
# dependency graph (crate versions and features, from `cargo tree`, so a Cargo.lock
# change that only touches the agent does not mark dist/ stale). This script
# recomputes it and fails when dist/ is stale.
#   check-dist.sh          check (exit 1 when stale or missing)
#   check-dist.sh --stamp  write the hash (called by build-web.sh after a build)
#   check-dist.sh --print  print the hashed inputs, one per line
#   check-dist.sh --wasm-paths  only check that no dist/**/*.wasm names a build-machine
#                          path (/root/, /home/, .cargo/registry); the plain check does too
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
inputs() {
  # Tracked and untracked-but-not-ignored files, so a new source file counts too.
  {
    git ls-files -co --exclude-standard -- web crates/gpumem-core/src crates/gpumem-core/Cargo.toml \
      crates/gpumem-proto/src crates/gpumem-proto/Cargo.toml agent/models
    echo rust-toolchain.toml
    echo scripts/build-web.sh
  } | LC_ALL=C sort -u | while read -r f; do
    [ -f "$f" ] && printf 'file %s %s\n' "$(sha256sum < "$f" | cut -d' ' -f1)" "$f"
  done
  # The [profile.release] section of the workspace manifest.
  awk '/^\[/{p = ($0 == "[profile.release]")} p' Cargo.toml | sed 's/^/profile /'
  # Resolved dependencies of the page, without checkout-specific paths.
  cargo tree --offline --locked -q -p gpumem-web -p gpumem-lookup -p gpumem-engine -p gpumem-training -p gpumem-diffusion --target wasm32-unknown-unknown \
      -e normal,features --prefix none 2>/dev/null \
    | sed -e 's/ ([^)]*)//g' | LC_ALL=C sort -u | sed 's/^/dep /'
}
inputs_hash() { inputs | sha256sum | cut -d' ' -f1; }
# The built wasm must not name the build machine's paths (build-web.sh remaps them).
wasm_paths() {
  local bad=0 f
  while IFS= read -r -d '' f; do
    if grep -a -q -F -e '/root/' -e '.cargo/registry' -e '/home/' "$f"; then
      echo "check-dist: $f carries build-machine paths:" >&2
      grep -a -o -E '(/root/|/home/|\.cargo/registry)[[:alnum:]/._-]{0,60}' "$f" | sort -u | head -5 >&2
      bad=1
    fi
  done < <(find dist -name '*.wasm' -print0)
  return "$bad"
}
case "${1:-}" in
  --wasm-paths) wasm_paths && echo "check-dist: no build-machine paths in dist/**/*.wasm";;
  --stamp) inputs_hash > dist/.inputs-hash; echo "check-dist: stamped $(cat dist/.inputs-hash)";;
  --print) inputs;;
  "")
    if [ ! -f dist/.inputs-hash ] || [ ! -f dist/index.html ]; then
      echo "check-dist: dist/ has no build stamp; run scripts/build-web.sh" >&2; exit 1
    fi
    want="$(inputs_hash)"; have="$(cat dist/.inputs-hash)"
    if [ "$want" != "$have" ]; then
      echo "check-dist: dist/ is stale (built from $have, sources are $want); run scripts/build-web.sh and commit dist/" >&2
      exit 1
    fi
    echo "check-dist: dist/ matches its sources ($want)"
    wasm_paths;;
  *) echo "usage: $0 [--stamp|--print]" >&2; exit 2;;
esac
