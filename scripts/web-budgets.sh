#!/usr/bin/env bash
# Prints the page's budgets (issue: web dimensioner):
#   wasm size, raw and gzip -9 (budget ≤ 250 KB gzip, aim ≤ 150 KB);
#   first results rendered after navigation and recompute time, measured in
#   headless Chromium by the browser test `web_budgets` (tests/tests/web_page.rs),
#   which this script runs unless --size-only is given.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
wasm="$(ls dist/*.wasm 2>/dev/null | head -1 || true)"
[ -n "$wasm" ] || { echo "web-budgets: no .wasm in dist/; run scripts/build-web.sh" >&2; exit 1; }
raw=$(stat -c %s "$wasm")
gz=$(gzip -9 -c "$wasm" | wc -c)
js="$(ls dist/*.js | head -1)"
jsgz=$(gzip -9 -c "$js" | wc -c)
printf 'web-budgets: wasm %s: %d B raw, %d B gzip (%.1f KB; budget 250 KB, aim 150 KB)\n' \
  "$(basename "$wasm")" "$raw" "$gz" "$(echo "$gz / 1000" | bc -l)"
printf 'web-budgets: js glue: %d B gzip\n' "$jsgz"
if [ "$gz" -gt 250000 ]; then echo "web-budgets: FAIL wasm over 250 KB gzip" >&2; exit 1; fi
[ "${1:-}" = "--size-only" ] && exit 0
# Timings need the browser: the test prints them (and fails over budget).
cargo test -q -p gpumem-e2e --test web_page web_budgets -- --nocapture 2>&1 | grep -E 'web-budgets|SKIPPED|test result|panicked' || true
