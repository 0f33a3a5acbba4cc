#!/usr/bin/env bash
# The repository stands alone: no code, page, CLI text or document points at texts a
# reader of the repository cannot follow — the planning notes it was written from
# ("seed §N", "the seed's …", requirement ids "R-EST-…", paths under shared/), or the
# tracker's numbers ("issue 10", "(issue: …)"). The method those notes held is
# docs/method.md, whose sections the code cites as "method §N".
#   scripts/references.sh          fail, listing each line that has such a reference
#   scripts/references.sh --fix    rewrite the known phrasings in place (then regenerate
#                                  the committed outputs: schemas, man pages, snapshots —
#                                  the printed commands — and review the diff)
# The check covers every tracked text file except dist/ (built; its staleness is
# check-dist.sh's) and this script.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python3 - "${1:-}" <<'PY'
import re, subprocess, sys

mode = sys.argv[1]
listed = subprocess.run(["git", "ls-files", "-z", "--", ".", ":!dist", ":!scripts/references.sh"],
                        check=True, capture_output=True).stdout.decode()
files = [f for f in listed.split("\0") if f]

# What may not appear. "issue" is allowed in a URL (an upstream tracker cited as a
# source) and as a plain word ("an issue"), not with a number or as a citation.
BAD = re.compile(
    r"[Ss]eed( text)?('s)? ?(§|\\u00a7)|\bseed's\b|\bthe seed\b(?! of\b)|\bseed (text|script)\b|"
    r"§ ?\d|"
    r"\bR-(EST|AGENT|PAIR|WEB|SHEET)\b|\bshared/(SPEC|STYLE|seed|calibration|hooks)\b|"
    r"\b[Ii]ssues? #?\d+|\([Ii]ssue[:)]|\b[Ii]ssue: |\bthe issue('s)?\b(?! (of|with|here)\b)"
)

# Phrasings users see (CLI help and messages, page text, labels): the reference is
# dropped, the rule stays in words. Applied everywhere the exact text occurs, so the
# snapshots, fixtures and man pages that copy these strings change with them.
EXACT = [
    ("Reserve (preparation hypothesis, not proof — seed §2)", "Reserve (preparation hypothesis, not proof)"),
    ("a preparation hypothesis, not proof (seed §2).", "a preparation hypothesis, not proof."),
    ("Measure the dense test network phase by phase on a GPU (seed §7–§8)", "Measure the dense test network phase by phase on a GPU"),
    ("a tensor dimension, not an LLM context (seed §9)", "a tensor dimension, not an LLM context"),
    ("recorded, since it changes the conditions, seed §10)", "recorded, since it changes the conditions)"),
    ("Bits per parameter as in the seed's script: ", "Bits per parameter: "),
    ("Bits per parameter as in the seed\\*(Aqs script: ", "Bits per parameter: "),
    ("(each series gets a new folder, seed §9)", "(each series gets a new folder)"),
    ("choose a new file name for each series (seed §9)", "choose a new file name for each series"),
    ("never as the difference of two peaks (seed §6);", "never as the difference of two peaks;"),
    ("the states it created (seed §3)", "the states it created"),
    ("memory is never pooled across GPUs, seed §12)", "memory is never pooled across GPUs)"),
    ("It checks the method on this GPU, not your model (seed §9); one \\\n             passing input does not validate the maximum load (seed §11).",
     "It checks the method on this GPU, not your model; one \\\n             passing input does not validate the maximum load."),
    ("synthetic input (seed §9). It checks", "synthetic input. It checks"),
    ("describes no moment at all (seed §6). ", "describes no moment at all. "),
    ("never added to the pool figures (seed §5). — means", "never added to the pool figures. — means"),
    ("with the agent's raw results attached (seed §12).", "with the agent's raw results attached."),
    ("Allocator counters (torch.cuda, seed §7) and", "Allocator counters (torch.cuda) and"),
    ("gpumem-core network::predict (R-EST-10)", "gpumem-core network::predict"),
    ("for the seed's dimensions", "for the default dimensions (batch 2, context 128, width 1024)"),
]

# Citations in comments and documents: the planning notes' sections are the method's
# (docs/method.md keeps their numbering), requirement ids become nothing or words,
# tracker numbers go.
RULES = [
    # the seed's sections → the method's
    (r"the seed's phase protocol \(§7–§8\)", "the phase protocol of method §7–§8"),
    (r"the seed's phase protocol", "the phase protocol (method §7)"),
    (r"the seed's §(\d+) (protocol|order)", r"the \2 of method §\1"),
    (r"the seed's order \(§(\d+)\)", r"the order of method §\1"),
    (r"as the seed asks \(§(\d+)\)", r"as method §\1 asks"),
    (r"the seed \(§(\d+)\)", r"method §\1"),
    (r"the seed's own worked example \(§(\d+)\)", r"the worked example of method §\1"),
    (r"Seed §(\d+) exactly as the seed types it", r"Method §\1's example exactly as typed"),
    (r"seed §(\d+)'s `estimate", r"the classic `estimate"),
    (r"[Tt]he seed script's `--bits`", "the classic `--bits`"),
    (r"the seed's command", "the classic first command"),
    (r"([Tt])he seed's dimensions", r"\1he default test dimensions"),
    (r"([Tt])he seed's defaults", r"\1he default dimensions"),
    (r"([Tt])he seed's\s+example series \(§9\)", r"\1he default series"),
    (r"the seed's\n(\S*\s*)", r"the default\n\1"),
    (r"at the seed's\s", "at the default "),
    (r"with the seed's\s", "with the default "),
    (r"([Tt])he seed's protocol", r"\1he phase protocol (method §7)"),
    (r"the seed's peak is", "a peak counter is"),
    (r"\bSeed §", "Method §"),
    (r"\b([Ss])eed \\u00a7", lambda m: ("M" if m.group(1) == "S" else "m") + "ethod \\u00a7"),
    (r"\bseed §", "method §"),
    (r"the §(\d+) (protocol|call order)", r"the \2 of method §\1"),
    (r"---- the §7 protocol -", "---- the method §7 protocol"),
    (r"present at the start \(§5\)", "present at the start (method §5)"),
    (r"with its §7 readings", "with its readings (method §7)"),
    # requirement ids: a parenthetical of ids alone goes (at the start of a comment line,
    # its punctuation moves up to the line before); an id before another citation goes;
    # what is left becomes words
    (r"\s*\(requirement R-[A-Z]+(-\d+)?\)", ""),
    (r"(\S)\n([ \t]*(?://[/!]?|#)) \((?:R-[A-Z]+(?:-\d+)?(?:, |; )?)+\)([.,:;]?) ?(.*)\n",
     lambda m: f"{m.group(1)}{m.group(3)}\n" + (f"{m.group(2)} {m.group(4)}\n" if m.group(4) else "")),
    (r"\s*\(R-[A-Z]+(?:-\d+)?,\s*\n([ \t]*(?://[/!]?|#)) (.*?)\)", r"\n\1 (\2)"),
    (r"\bR-(EST|AGENT|PAIR|WEB|SHEET)(-\d+)?[,;] ?(?=\S)", ""),
    (r" ?\((?:R-(?:EST|AGENT|PAIR|WEB|SHEET)(?:-\d+)?(?:, |; )?)+(?:; issue \d+)?\)", ""),
    (r"every R-EST input", "every estimator input"),
    (r"\bR-EST-10\b", "the agent's test network"),
    (r"\bR-AGENT-2 facts", "The environment facts"),
    # tracker numbers
    (r" ?\(issue #\d+, items? [\d, and]+\)", ""),
    (r" ?\(issue \d+(, deliverable \d+)?\)", ""),
    (r"\(issue \d+: ", "("),
    (r"\(issue: ", "("),
    (r"\bIssue \d+ against the real", "Hardening, against the real"),
    (r"\bIssue \d+ in headless Chromium", "The page's hardening in headless Chromium"),
    (r"\bIssue \d+: ", "Regression: "),
    (r"The issue's figure", "The worked figure"),
    (r"every refusal the issue lists", "every refusal the security rules list"),
    (r"note the figures in the issue", "note the figures with the results"),
]

def fix(text):
    for old, new in EXACT:
        text = text.replace(old, new)
    for pat, rep in RULES:
        text = re.sub(pat, rep, text)
    return text

# "method §N" cites docs/method.md; a standard's section (RFC 4648 §5) cites a public text.
ALLOWED = re.compile(r"(?:[Mm]ethod|\b[A-Z]{2,}[ -]?\d+)\s+§\d+(?:\s*(?:–|-|,|and|/|&)\s*§\d+)*(?:'s)?")

def blank(m):
    return re.sub(r"[^\n]", " ", m.group(0))

def offences(text):
    prev = ""
    for n, line in enumerate(text.splitlines(), 1):
        # A citation may wrap ("RFC 3986" / "§3.1"): the previous line's last words
        # are read with this line, and what an allowed citation covers is blanked.
        marker = re.compile(r"^\s*(//[/!]?|#|\*)?\s*")
        tail = " ".join(marker.sub("", prev).split()[-2:])
        prev = line
        seen = ALLOWED.sub(blank, tail + "\n" + marker.sub("", line)).split("\n", 1)[1]
        for m in BAD.finditer(seen):
            if "github.com/" in line or "/issues/" in line:
                continue
            yield n, line.strip()
            break

found = 0
changed = []
for path in files:
    try:
        text = open(path, encoding="utf-8").read()
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        continue
    if mode == "--fix":
        new = fix(text)
        if new != text:
            open(path, "w", encoding="utf-8").write(new)
            changed.append(path)
            text = new
    for n, line in offences(text):
        found += 1
        print(f"{path}:{n}: {line[:160]}")
if mode == "--fix":
    print(f"references: rewrote {len(changed)} file(s); now regenerate the committed outputs:")
    for cmd in [
        "GPUMEM_BLESS=1 cargo test -p gpumem-proto --features schema published_schema",
        "GPUMEM_BLESS=1 cargo test -p gpumem-agent --test serve_sheet_schema --test run_workload_schema",
        "GPUMEM_BLESS=1 cargo test -p gpumem-agent --bin gpumem-agent -- manual synthetic_fixture",
        "GPUMEM_BLESS=1 cargo test -p gpumem-proto --features schema fleet_schema",
        "UPDATE_SNAPSHOTS=1 cargo test -p gpumem-agent --test estimate_cli table_and_json_match_their_snapshots",
        "scripts/readme-example.sh --write",
    ]:
        print("  " + cmd)
if found:
    print(f"references: {found} line(s) cite texts outside the repository (planning notes, "
          "requirement ids, tracker numbers); say the rule in words or cite docs/method.md "
          "as \"method §N\" (scripts/references.sh --fix rewrites the known phrasings)",
          file=sys.stderr)
    sys.exit(1)
print("references: no citation of texts outside the repository")
PY
