#!/usr/bin/env bash
# The README's picture of the page: the committed dist/ served on loopback and taken in
# headless Chromium (scripts/install-tools.sh installs it) into docs/images/page.png.
#   scripts/screenshot.sh [QUERY] [WIDTHxHEIGHT]   e.g. "context=8192&sequences=4" 1400x1000
# Rerun it after the page changes (the lead does, at merge) and commit the PNG.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
# shellcheck source=scripts/env.sh
source "$here/env.sh"
cd "$root"
query="${1:-}"
size="${2:-1400x1000}"
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
[ -n "$browser" ] || { echo "screenshot: no Chromium; run scripts/install-tools.sh" >&2; exit 2; }
out="$root/docs/images/page.png"
mkdir -p "$(dirname "$out")"
work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
python3 -m http.server --bind 127.0.0.1 --directory dist 0 > "$work/http.log" 2>&1 &
server=$!
port=""
for _ in $(seq 1 100); do
  port="$(sed -n 's/.*port \([0-9]*\).*/\1/p' "$work/http.log" | head -1)"
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "screenshot: the static server did not start: $(cat "$work/http.log")" >&2; exit 1; }
# A fresh profile (no stored state from an earlier visit); virtual time lets the wasm
# load and render before the picture is taken.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$work/profile" \
  --window-size="${size/x/,}" --virtual-time-budget=10000 --screenshot="$out" \
  "http://127.0.0.1:$port/${query:+?$query}" > "$work/chromium.log" 2>&1 \
  || { cat "$work/chromium.log" >&2; exit 1; }
[ -s "$out" ] || { echo "screenshot: Chromium wrote no picture" >&2; exit 1; }
echo "screenshot: $(basename "$out") written ($(stat -c %s "$out") bytes, $size)"
