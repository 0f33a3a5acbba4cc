"""Queries Prometheus' HTTP API (GET /api/v1/query) for tests/cluster/run.sh.

usage: promql.py URL count-up N          every one of N scrape targets is up
       promql.py URL has QUERY           the instant query returns a series
       promql.py URL none QUERY          the instant query returns no series
       promql.py URL labels QUERY K=V…   one series has these labels; prints it as text
Exits 1 (with the reason on stderr) when the condition does not hold.
"""

import json
import sys
import urllib.parse
import urllib.request


def query(url, q):
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': q})}", timeout=5) as r:
        body = json.load(r)
    if body.get("status") != "success":
        sys.exit(f"query {q!r}: {body}")
    return body["data"]["result"]


def main():
    url, cmd, arg = sys.argv[1], sys.argv[2], sys.argv[3]
    if cmd == "count-up":
        up = [s for s in query(url, "up") if s["value"][1] == "1"]
        if len(up) != int(arg):
            sys.exit(f"{len(up)} targets up, expected {arg}")
    elif cmd == "has":
        if not query(url, arg):
            sys.exit(f"no series for {arg}")
    elif cmd == "none":
        found = query(url, arg)
        if found:
            sys.exit(f"{len(found)} series still there for {arg}")
    elif cmd == "labels":
        want = dict(kv.split("=", 1) for kv in sys.argv[4:])
        for s in query(url, arg):
            m = s["metric"]
            if all(m.get(k) == v for k, v in want.items()):
                name = m.pop("__name__")
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(m.items()))
                print(f"{name}{{{labels}}} {s['value'][1]}")
                return
        sys.exit(f"no series of {arg} has {want}")
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
