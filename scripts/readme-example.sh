#!/usr/bin/env bash
# The README's example is the real output of the command it shows. This runs the
# command with the built agent (target/debug/gpumem-agent, or $GPUMEM_AGENT) and
# compares its output with the block between the README's readme-example markers:
#   scripts/readme-example.sh           fail when the README's block is stale
#   scripts/readme-example.sh --write   rewrite the block from the command's output
# The command names a model of the bundled catalogue (agent/models), so it needs no network.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
agent="${GPUMEM_AGENT:-target/debug/gpumem-agent}"
[ -x "$agent" ] || { echo "readme-example: $agent not built (cargo build -p gpumem-agent)" >&2; exit 2; }
shown="gpumem-agent estimate --model meta-llama/Llama-3.1-8B --context 8192 --sequences 4 --card l40s-48gb"
# shellcheck disable=SC2086 # the shown command's words
output="$("$agent" ${shown#gpumem-agent })"
block="$(printf '    $ %s\n' "$shown"; printf '%s\n' "$output" | sed 's/^/    /; s/[[:space:]]*$//')"
python3 - README.md "$block" "${1:-}" <<'PY'
import re, sys
path, block, mode = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(path, encoding="utf-8").read()
begin = re.search(r"<!-- readme-example: begin[^>]*-->\n", text)
end = re.search(r"<!-- readme-example: end -->", text)
if not begin or not end or end.start() < begin.end():
    sys.exit("readme-example: README.md lacks the readme-example begin/end markers")
current = text[begin.end():end.start()]
wanted = "\n" + block + "\n\n"
if mode == "--write":
    open(path, "w", encoding="utf-8").write(text[:begin.end()] + wanted + text[end.start():])
    print("readme-example: README.md's example rewritten")
elif current != wanted:
    sys.exit("readme-example: README.md's example differs from the command's output; "
             "run scripts/readme-example.sh --write")
else:
    print("readme-example: README.md's example is the command's output")
PY
