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
# The wasm must not carry this machine's paths (home, cargo registry, checkout) in its
# panic locations: remap them to neutral prefixes (rustc applies the last rule that
# matches, so the most specific comes last).
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
flags="$flags --remap-path-prefix=$HOME=~ --remap-path-prefix=$cargo_home=/cargo --remap-path-prefix=$cargo_home/registry/src=/crates --remap-path-prefix=$root=/gpumem"
# The agent page first, into a scratch directory (trunk empties its --dist), then the
# dimensioner into dist/, then the agent page copied under dist/agent/.
stage="$root/target/web-agent-dist"
rm -rf "$stage"
(cd web && RUSTFLAGS="$flags" trunk build agent.html --release --html-output index.html --public-url /agent/ --dist "$stage")
(cd web && RUSTFLAGS="$flags" trunk build --release)
mkdir -p dist/agent
cp -R "$stage"/. dist/agent/
rm -rf "$stage"
# Content-Security-Policy: the one policy is the meta tag of web/index.html. Add the
# sha256 of every inline script of both built pages to its script-src (trunk's
# bootstrap and the #token= forwarder; no 'unsafe-inline') and write it, as a plain
# <meta http-equiv="Content-Security-Policy" content="…">, into both built pages.
python3 - web/index.html dist/index.html dist/agent/index.html <<'PY'
import base64, hashlib, re, sys
source, *pages = sys.argv[1:]
meta = re.compile(r'<meta\b[^>]*http-equiv\s*=\s*"?content-security-policy"?[^>]*>', re.I)
found = meta.search(open(source, encoding="utf-8").read())
if not found:
    sys.exit(f"build-web: no Content-Security-Policy meta tag in {source}")
content = re.search(r'content\s*=\s*"([^"]*)"', found.group(0))
base = [d.strip() for d in content.group(1).split(";") if d.strip()]
if any("unsafe-inline" in d for d in base if d.startswith("script-src")):
    sys.exit("build-web: script-src must not allow 'unsafe-inline'")
inline = re.compile(r"<script\b(?![^>]*\bsrc\s*=)[^>]*>(.*?)</script>", re.S | re.I)
texts = {p: open(p, encoding="utf-8").read() for p in pages}
hashes = sorted({"'sha256-" + base64.b64encode(hashlib.sha256(m.encode()).digest()).decode() + "'"
                 for text in texts.values() for m in inline.findall(text)})
policy = "; ".join(d + "".join(" " + h for h in hashes) if d.startswith("script-src") else d for d in base)
tag = f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
for page, text in texts.items():
    text, n = meta.subn(lambda _: tag, text)
    if n == 0:
        text, n = re.subn(r"<meta\s+charset[^>]*>", lambda m: m.group(0) + tag, text, count=1, flags=re.I)
    if n != 1:
        sys.exit(f"build-web: cannot place the policy in {page}")
    open(page, "w", encoding="utf-8").write(text)
print(f"build-web: Content-Security-Policy with {len(hashes)} inline-script hash(es)")
PY
"$here/check-dist.sh" --wasm-paths
"$here/check-dist.sh" --stamp
echo "build-web: dist/ written"
"$here/web-budgets.sh" --size-only
