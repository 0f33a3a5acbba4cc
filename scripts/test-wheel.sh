#!/usr/bin/env bash
# Builds the release wheel as it would be published (maturin, bin bindings, linked by
# zig against glibc 2.17: manylinux2014) and checks it the way a user gets it: installed
# into a fresh virtual environment, then run from there —
#   `gpumem-agent --version`, `estimate --json` (the total), `serve` (GET / answers the
#   embedded page), `import gpumem_probe` (a no-op outside `run`), completions, man, and
#   the man pages the wheel installed under share/man/man1 (what `man --dir` renders) —
# and reads the binary's newest glibc symbol version (the floor README states).
# The release build goes to the workspace's target/, so a second run reuses it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
# shellcheck source=scripts/env.sh
source "$here/env.sh"
cd "$root"
command -v maturin >/dev/null || { echo "test-wheel: maturin not found; run scripts/install-tools.sh" >&2; exit 2; }
fail() { echo "test-wheel: FAIL: $*" >&2; exit 1; }

export CARGO_TARGET_DIR="$root/target"
# maturin finds zig as `python -m ziglang`; that python is install-tools.sh's venv.
export CARGO_ZIGBUILD_PYTHON_PATH="$GPUMEM_TOOLS/python/bin/python"
wheels="$root/target/wheels-test"
work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

rm -rf "$wheels"
maturin build --release --locked --zig --compatibility manylinux2014 --out "$wheels" \
    > "$work/maturin.log" 2>&1 \
  || { tail -n 40 "$work/maturin.log" >&2; fail "maturin build"; }
set -- "$wheels"/*.whl
[ "$#" -eq 1 ] && [ -f "$1" ] || fail "expected one wheel in $wheels, found: $*"
wheel="$1"
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
case "$(basename "$wheel")" in
  "gpumem_agent-$version-"*manylinux_2_17_x86_64*.whl) ;;
  *) fail "wheel $(basename "$wheel") is not gpumem_agent-$version for manylinux_2_17" ;;
esac
echo "test-wheel: built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-index "$wheel"
agent="$work/venv/bin/gpumem-agent"
[ -x "$agent" ] || fail "the wheel installed no gpumem-agent command"

# The floor: the newest GLIBC_x.y symbol version the installed binary needs.
floor="$(objdump -T "$agent" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)"
[ "$(printf '%s\nGLIBC_2.17\n' "$floor" | sort -V | tail -n 1)" = GLIBC_2.17 ] \
  || fail "the binary needs $floor, above the manylinux2014 floor GLIBC_2.17"
echo "test-wheel: glibc floor $floor"

out="$("$agent" --version)"
[[ "$out" =~ ^gpumem-agent\ $version\ \(commit\ ([0-9a-f]{4,}|unknown)\)$ ]] || fail "--version printed: $out"
echo "test-wheel: $out"

# 7e9 parameters at 16 bits are 14e9 bytes of weights; the total is the sum of the
# parts the JSON reports, and at least the weights.
"$agent" estimate --parameters 7e9 --bits 16 --json > "$work/estimate.json"
python3 - "$work/estimate.json" <<'PY' || fail "estimate --json"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["weights_bytes"] == 14_000_000_000, r["weights_bytes"]
parts = sum(line["bytes"] for line in r["lines"])
assert r["total_bytes"] == parts and r["total_bytes"] >= r["weights_bytes"], (r["total_bytes"], parts)
print(f"test-wheel: estimate total {r['total_bytes']} bytes")
PY

# serve from the installed binary: GET / is the committed page, and the wasm it names
# is byte for byte the committed one (the wheel carries dist/).
"$agent" serve --port 0 --no-open > "$work/serve.out" 2>&1 &
server=$!
port=""
for _ in $(seq 1 100); do
  port="$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/serve.out")"
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || fail "serve exited: $(cat "$work/serve.out")"
  sleep 0.1
done
[ -n "$port" ] || fail "serve printed no port: $(cat "$work/serve.out")"
python3 - "$port" dist <<'PY' || fail "serve did not answer the page"
import pathlib, re, sys, urllib.request
port, dist = sys.argv[1], pathlib.Path(sys.argv[2])
with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
    assert r.status == 200, r.status
    assert r.headers.get_content_type() == "text/html", r.headers["Content-Type"]
    page = r.read().decode()
assert "<title>gpumem" in page, page[:300]
wasm = re.search(r"/(gpumem-web-[0-9a-f]+_bg\.wasm)", page).group(1)
with urllib.request.urlopen(f"http://127.0.0.1:{port}/{wasm}", timeout=10) as r:
    assert r.status == 200 and r.read() == (dist / wasm).read_bytes(), wasm
print(f"test-wheel: serve answered GET / (200, text/html) and /{wasm} as committed")
PY
kill "$server"; wait "$server" 2>/dev/null || true; server=""

# The probe is importable from the environment (not from this checkout) and is a no-op
# outside `gpumem-agent run`.
(cd "$work" && "$work/venv/bin/python" - <<'PY') || fail "import gpumem_probe"
import sys, gpumem_probe
assert gpumem_probe.__file__.startswith(sys.prefix), gpumem_probe.__file__
with gpumem_probe.phase("eval"):
    x = 1 + 1
print(f"test-wheel: import gpumem_probe ok ({gpumem_probe.__file__})")
PY

for shell in bash zsh fish; do
  script="$("$agent" completions "$shell")"
  # (fish spells a long flag `-l parameters`, the others `--parameters`)
  [ -n "$script" ] && grep -q estimate <<<"$script" && grep -q 'parameters' <<<"$script" \
    || fail "completions $shell: empty or without the estimate subcommand and its flags"
done
bash -n <(printf '%s\n' "$("$agent" completions bash)") || fail "completions bash: not valid bash"
"$agent" man | grep -q '^\.TH' || fail "man: no roff title"
mkdir "$work/man"
"$agent" man --dir "$work/man" >/dev/null
[ -s "$work/man/gpumem-agent-estimate.1" ] || fail "man --dir wrote no gpumem-agent-estimate.1"
# The wheel installed every page under the environment's share/man/man1, identical to
# what the installed binary renders, each with EXAMPLES and EXIT STATUS; man reads them.
installed="$work/venv/share/man/man1"
[ -d "$installed" ] || fail "the wheel installed no man pages under share/man/man1"
diff -r "$work/man" "$installed" >/dev/null \
  || fail "the installed man pages differ from \`gpumem-agent man --dir\`: $(diff -rq "$work/man" "$installed" | head -3)"
for page in "$installed"/*.1; do
  grep -q '^\.SH EXAMPLES$' "$page" && grep -q '^\.SH "EXIT STATUS"$' "$page" \
    || fail "$(basename "$page"): no EXAMPLES or EXIT STATUS section"
done
if command -v man >/dev/null; then
  MANPAGER=cat MANWIDTH=100 man -M "$work/venv/share/man" gpumem-agent-estimate 2>/dev/null | grep -q 'EXIT STATUS' \
    || fail "man -M <venv>/share/man gpumem-agent-estimate did not show the page"
fi
echo "test-wheel: completions (bash, zsh, fish) and man pages ok ($(ls "$installed" | wc -l) pages installed)"
echo "test-wheel: all checks passed"
