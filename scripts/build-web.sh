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
# Panics as immediate aborts, with the standard library rebuilt for the page. On
# wasm32-unknown-unknown a panic already ends the page's wasm in an `unreachable` trap
# with no message (there is no stderr and no panic hook that shows one), so aborting at
# once changes nothing a user sees; what it removes is the code and data that format
# panic messages and their locations, which nothing could show. With the wasm-opt
# passes below, the build went from 217 761 to 201 117 B gzip (dimensioner), 280 197 to
# 261 391 (agent page) and 139 749 to 121 354 (lookup module); wasm-opt's share alone
# is about 2.5, 3.1 and 8.3 KB. Both need unstable options of the pinned compiler
# (`-Zbuild-std`, `-Cpanic=immediate-abort`), enabled here only, for these builds only,
# with RUSTC_BOOTSTRAP: the compiler is the same pinned stable one (rust-toolchain.toml,
# which lists rust-src for std's sources); a toolchain bump that changes these options
# fails this build loudly, never silently. GPUMEM_PAGE_STABLE_ONLY=1 builds without
# them (the pages are then 14–16 KB gzip heavier: the dimensioner near its budget again).
page_env=()
if [ "${GPUMEM_PAGE_STABLE_ONLY:-}" != 1 ]; then
  flags="$flags -Zunstable-options -Cpanic=immediate-abort"
  page_env=(RUSTC_BOOTSTRAP=1 CARGO_UNSTABLE_BUILD_STD=std,panic_abort)
fi
# The lookup module (web/lookup: the file and Hub readers) first, as a plain
# wasm-bindgen ES module that the dimensioner imports on the first import or lookup;
# its folder is named by its content's hash, which the dimensioner is compiled with
# (GPUMEM_LOOKUP_JS), so a browser never pairs a page with a stale module. The same
# RUSTFLAGS as the trunk builds keep the shared crates' build cache warm.
wasm_features="--enable-bulk-memory --enable-multivalue --enable-mutable-globals --enable-nontrapping-float-to-int --enable-reference-types --enable-sign-ext"
# wasm-opt -Oz without two of its passes, the same for the pages (web/*.html's
# data-wasm-opt-params): its inlining and local CSE shrink the raw wasm but cost more in
# gzip than they save (measured on the three modules: dimensioner −2.5 KB gzip, agent
# page −3.1 KB, lookup module −8.3 KB against plain -Oz); the rest of -Oz is kept, and
# run until it changes nothing more (--converge: dimensioner −0.27 KB gzip).
wasm_opt_skip="--converge --skip-pass=inlining-optimizing --skip-pass=local-cse"
# lazy_module NAME: builds crate gpumem-NAME into target/web-NAME-dist/ (wasm-bindgen,
# then wasm-opt) and prints the folder it goes to under dist/, NAME-<content hash>.
lazy_module() {
  local name="$1" stage="$root/target/web-$1-dist"
  rm -rf "$stage"
  mkdir -p "$stage"
  env "${page_env[@]}" RUSTFLAGS="$flags" cargo build --locked --release --quiet --target wasm32-unknown-unknown -p "gpumem-$name"
  wasm-bindgen --target web --no-typescript --out-dir "$stage" --out-name "gpumem_$name" \
    "$root/target/wasm32-unknown-unknown/release/gpumem_$name.wasm"
  # shellcheck disable=SC2086 # the feature flags are separate words
  wasm-opt -Oz $wasm_opt_skip $wasm_features "$stage/gpumem_${name}_bg.wasm" -o "$stage/gpumem_${name}_bg.wasm"
  echo "$name-$(cat "$stage/gpumem_$name.js" "$stage/gpumem_${name}_bg.wasm" | sha256sum | cut -c1-16)"
}
lookup_stage="$root/target/web-lookup-dist"
lookup_dir="$(lazy_module lookup)"
export GPUMEM_LOOKUP_JS="/$lookup_dir/gpumem_lookup.js"
# The engine module (web/engine: the serving engines' rules) the same way: the
# dimensioner loads it once its first screen is up (GPUMEM_ENGINE_JS).
engine_stage="$root/target/web-engine-dist"
engine_dir="$(lazy_module engine)"
export GPUMEM_ENGINE_JS="/$engine_dir/gpumem_engine.js"
# The training module (web/training: the training estimator) the same way: the
# dimensioner loads it when a training run is first asked about (GPUMEM_TRAINING_JS).
training_stage="$root/target/web-training-dist"
training_dir="$(lazy_module training)"
export GPUMEM_TRAINING_JS="/$training_dir/gpumem_training.js"
# The diffusion module (web/diffusion: a diffusers pipeline's answer) the same way: the
# dimensioner loads it when a pipeline is first read (GPUMEM_DIFFUSION_JS).
diffusion_stage="$root/target/web-diffusion-dist"
diffusion_dir="$(lazy_module diffusion)"
export GPUMEM_DIFFUSION_JS="/$diffusion_dir/gpumem_diffusion.js"
# The agent page next, into a scratch directory (trunk empties its --dist), then the
# dimensioner into dist/, then the agent page copied under dist/agent/ and the lazily
# loaded modules under dist/lookup-<hash>/, dist/engine-<hash>/, dist/training-<hash>/
# and dist/diffusion-<hash>/.
stage="$root/target/web-agent-dist"
rm -rf "$stage"
(cd web && env "${page_env[@]}" RUSTFLAGS="$flags" trunk build agent.html --release --html-output index.html --public-url /agent/ --dist "$stage")
(cd web && env "${page_env[@]}" RUSTFLAGS="$flags" trunk build --release)
mkdir -p dist/agent "dist/$lookup_dir" "dist/$engine_dir" "dist/$training_dir" "dist/$diffusion_dir"
cp -R "$stage"/. dist/agent/
cp -R "$lookup_stage"/. "dist/$lookup_dir/"
cp -R "$engine_stage"/. "dist/$engine_dir/"
cp -R "$training_stage"/. "dist/$training_dir/"
cp -R "$diffusion_stage"/. "dist/$diffusion_dir/"
rm -rf "$stage" "$lookup_stage" "$engine_stage" "$training_stage" "$diffusion_stage"
# The bundled catalogue beside the page (agent/models/*.json, the agent's named models):
# each model's config.json as models/<owner>--<name>.json, and models/index.txt with one
# line per model (id, day read, source; tab-separated): the lookup module offers them
# in the model search and reads one when the Hub cannot be reached
# (web/lookup/src/bundled.rs).
python3 - agent/models dist/models <<'PY'
import json, os, sys
src, out = sys.argv[1:]
os.makedirs(out)
rows = []
for name in sorted(os.listdir(src)):
    if name.startswith(".") or not name.endswith(".json"):
        continue
    with open(os.path.join(src, name), encoding="utf-8") as f:
        model = json.load(f)
    if name != model["id"].replace("/", "--") + ".json":
        sys.exit(f"build-web: {src}/{name} holds {model['id']!r}: its file is named after it")
    fields = [model["id"], model["read"], model["source"]]
    if any(c in v for v in fields for c in "\t\n\r"):
        sys.exit(f"build-web: {src}/{name}: a tab or line break in its id, day or source")
    rows.append("\t".join(fields))
    with open(os.path.join(out, name), "w", encoding="utf-8") as f:
        json.dump(model["config"], f, ensure_ascii=False, separators=(",", ":"))
with open(os.path.join(out, "index.txt"), "w", encoding="utf-8") as f:
    f.write("".join(r + "\n" for r in sorted(rows, key=str.lower)))
PY
# The dimensioner's figures come from the engine module (it estimates): start loading it
# with the page, beside the first module rather than after it, by an inline script
# before trunk's bootstrap (its hash joins the policy below). src/lazy.js takes the
# started load over (globalThis.gpumemEarly), so the module loads once.
python3 - dist/index.html "$GPUMEM_ENGINE_JS" <<'PY'
import json, sys
page, url = sys.argv[1:]
text = open(page, encoding="utf-8").read()
early = ("<script>globalThis.gpumemEarly={" + json.dumps(url)
         + ":import(" + json.dumps(url) + ").then(async m=>{await m.default();return m})}</script>")
at = text.find("<script type=module>")
if at < 0:
    sys.exit("build-web: no module script (trunk's bootstrap) in dist/index.html")
open(page, "w", encoding="utf-8").write(text[:at] + early + text[at:])
PY
# Content-Security-Policy: the one policy is the meta tag of web/index.html. Add the
# sha256 of every inline script of both built pages to its script-src (trunk's
# bootstrap and the #token= forwarder; no 'unsafe-inline') and write it, as a plain
# <meta http-equiv="Content-Security-Policy" content="…">, into both built pages.
# The Hub the dimensioner's model lookup asks: https://huggingface.co (whose hosts the
# policy's connect-src names), or a mirror given as GPUMEM_HUB_ENDPOINT, which is then
# added to connect-src (its host, any port). The dimensioner reads it from
# <meta name="gpumem-hub" content="…">, written here; `gpumem-agent serve` rewrites
# both for its own HF_ENDPOINT.
python3 - web/index.html dist/index.html dist/agent/index.html <<'PY'
import base64, hashlib, os, re, sys
source, *pages = sys.argv[1:]
hub = os.environ.get("GPUMEM_HUB_ENDPOINT", "https://huggingface.co").strip().rstrip("/")
hub_match = re.fullmatch(r"(https?)://([A-Za-z0-9.-]+)(:[0-9]{1,5})?", hub)
if not hub_match:
    sys.exit(f"build-web: GPUMEM_HUB_ENDPOINT must be scheme://host[:port], not {hub!r}")
meta = re.compile(r'<meta\b[^>]*http-equiv\s*=\s*"?content-security-policy"?[^>]*>', re.I)
found = meta.search(open(source, encoding="utf-8").read())
if not found:
    sys.exit(f"build-web: no Content-Security-Policy meta tag in {source}")
content = re.search(r'content\s*=\s*"([^"]*)"', found.group(0))
base = [d.strip() for d in content.group(1).split(";") if d.strip()]
if any("unsafe-inline" in d for d in base if d.startswith(("script-src", "style-src", "default-src"))):
    sys.exit("build-web: neither script-src nor style-src may allow 'unsafe-inline'")
inline = re.compile(r"<script\b(?![^>]*\bsrc\s*=)[^>]*>(.*?)</script>", re.S | re.I)
texts = {p: open(p, encoding="utf-8").read() for p in pages}
hashes = sorted({"'sha256-" + base64.b64encode(hashlib.sha256(m.encode()).digest()).decode() + "'"
                 for text in texts.values() for m in inline.findall(text)})
if hub != "https://huggingface.co":
    base = [d + f" {hub_match.group(1)}://{hub_match.group(2)}:*" if d.startswith("connect-src") else d for d in base]
policy = "; ".join(d + "".join(" " + h for h in hashes) if d.startswith("script-src") else d for d in base)
tag = f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
for page, text in texts.items():
    if page == pages[0]:
        # The dimensioner only: it holds the model lookup.
        tag_here = tag + f'<meta name="gpumem-hub" content="{hub}">'
    else:
        tag_here = tag
    text, n = meta.subn(lambda _: tag_here, text)
    if n == 0:
        text, n = re.subn(r"<meta\s+charset[^>]*>", lambda m: m.group(0) + tag_here, text, count=1, flags=re.I)
    if n != 1:
        sys.exit(f"build-web: cannot place the policy in {page}")
    open(page, "w", encoding="utf-8").write(text)
print(f"build-web: Content-Security-Policy with {len(hashes)} inline-script hash(es)")
PY
"$here/check-dist.sh" --wasm-paths
# dist/_headers (Netlify / Cloudflare Pages format): each page's CSP as a real header,
# taken from the built page's own meta tag, so it can never drift from it. One rule
# per spelling of each page's path (no wildcard: overlapping rules would merge).
python3 - dist <<'PY'
import html.parser, pathlib, sys

class Csp(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.policies = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "meta" and (a.get("http-equiv") or "").lower() == "content-security-policy":
            self.policies.append(a.get("content") or "")

dist = pathlib.Path(sys.argv[1])
out = ["# Generated by scripts/build-web.sh from the pages' CSP meta tags; do not edit."]
for page, paths in (("index.html", ["/", "/index.html"]),
                    ("agent/index.html", ["/agent", "/agent/", "/agent/index.html"])):
    parser = Csp()
    parser.feed((dist / page).read_text(encoding="utf-8"))
    if len(parser.policies) != 1 or not parser.policies[0].strip():
        sys.exit(f"build-web: {page} must carry exactly one non-empty CSP meta tag")
    policy = " ".join(parser.policies[0].split())  # a header value is one line
    for path in paths:
        out += [path, f"  Content-Security-Policy: {policy}"]
(dist / "_headers").write_text("\n".join(out) + "\n", encoding="utf-8")
PY
"$here/check-dist.sh" --stamp
echo "build-web: dist/ written"
"$here/web-budgets.sh" --size-only
