"""Assertions of tests/cluster/run.sh on what the agent wrote (stdlib, plus jsonschema for
`fleet`, run with the kubernetes-validate venv's python, which has it).

usage: check.py bisect DIR                        the Slurm-array search and its trials
       check.py fleet FLEET.json SCHEMA.json JOB  the merged fleet sheet
       check.py k8s MANIFEST.json                 the Indexed Job's shape
"""

import glob
import json
import os
import sys

# The recording stand-in's pool in a SYNTHETIC measure (agent/src/measure: 1 GiB).
STANDIN_CAPACITY = 1 << 30


def load(path):
    with open(path) as f:
        return json.load(f)


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")


def bisect(d):
    plan = load(os.path.join(d, "bisect-plan.json"))
    summary = load(os.path.join(d, "bisect-summary.json"))
    check(summary["rounds"] == 2, f"two rounds, got {summary['rounds']}")
    check(summary["plan"] == "slurm" and summary["parallel"] == 8, "a Slurm plan of 8 per round")
    seen = 0
    for rnd in plan["rounds"]:
        for path in glob.glob(os.path.join(d, f"round-{rnd['round']}", "trial-batch-*.json")):
            f = load(path)
            value = f["dimensions"]["batch"]
            check(f["synthetic"] and f["note"].startswith("SYNTHETIC"), f"{path} says SYNTHETIC")
            c = f["context"]
            s = c["slurm"]
            check(c["hostname"] and s["job_id"] and s["array_job_id"], f"{path}: host and job ids")
            check(
                rnd["values"][s["array_task_id"]] == value,
                f"{path}: array task {s['array_task_id']} ran value {value}",
            )
            check(c["run_id"] == f"slurm-{s['job_id']}-{s['procid']}", f"{path}: run id")
            # Independently of the search: a trial passes exactly when gpumem-core's
            # predicted peak fits the stand-in's pool.
            run = f["runs"][0]
            need = max(p["allocated_peak_bytes"] for p in run["computed"]["phases"])
            check(
                (run["status"] == "ok") == (need <= STANDIN_CAPACITY),
                f"{path}: status {run['status']} with a predicted peak of {need} B",
            )
            seen += 1
    check(seen == sum(len(r["values"]) for r in plan["rounds"]), "every trial wrote its result")
    trials = {t["value"]: t["outcome"] for t in summary["trials"]}
    lo, hi = summary["largest_passing"], summary["smallest_failing"]
    check(hi == lo + 1 and trials[lo] == "pass" and trials[hi] == "fail", f"boundary {lo}/{hi}")
    print(f"bisect: {seen} trials in {len(plan['rounds'])} Slurm arrays; largest passing batch {lo}, smallest failing {hi}")


def fleet(path, schema_path, job):
    import jsonschema

    sheet = load(path)
    schema = load(schema_path)
    jsonschema.validators.validator_for(schema)(schema).validate(sheet)
    check(sheet["schema"] == "gpumem.fleet/v1", "schema id")
    check(sheet["synthetic"] and sheet["note"].startswith("SYNTHETIC"), "the sheet says SYNTHETIC")
    kinds = [s["kind"] for s in sheet["sources"]]
    check(kinds.count("workload") == 1 and kinds.count("results") == 16, f"sources {kinds}")
    check(not sheet["refused"], f"refused {sheet['refused']}")
    rows = {r["configuration"].split()[1] if r["kind"] == "results" else "run": r for r in sheet["rows"]}
    check(len(sheet["rows"]) == 17, f"{len(sheet['rows'])} rows")
    check(rows["batch=31"]["failed"] == 0 and rows["batch=32"]["failed"] == 1, "31 passes, 32 fails")
    for r in sheet["rows"]:
        check(r["synthetic"] and r["card"] == "SYNTHETIC", f"row {r['configuration']} says SYNTHETIC")
    run = rows["run"]
    check(any(p["phase"] == "optimizer_step" and p["first_step"] for p in run["phases"]), "first step apart")
    check(any(l["item"] == "optimizer_states" for l in run["lines"]), "computed lines beside")
    src = [s for s in sheet["sources"] if s["kind"] == "workload"][0]
    check(src["context"]["slurm"]["job_id"] == job, "the run's Slurm job recorded")
    e = sheet["errors"]
    check(e["count"] > 0 and sum(b["count"] for b in e["buckets"]) == e["count"], "error buckets")
    w = sheet["worst"]
    check(w and w["at"]["run_id"].startswith("slurm-") and w["at"]["hostname"], "worst named")
    print(
        f"fleet: {len(sheet['sources'])} documents, {len(sheet['rows'])} rows, "
        f"{e['count']} errors (median {e['p50_ppm']} ppm, max {e['max_ppm']} ppm); "
        f"worst {w['what']} of {w['configuration']} at {w['at']['run_id']} on {w['at']['hostname']}"
    )


def k8s(path):
    m = load(path)
    spec = m["spec"]
    check(m["apiVersion"] == "batch/v1" and m["kind"] == "Job", "a batch/v1 Job")
    check(spec["completionMode"] == "Indexed" and spec["completions"] == 4 == spec["parallelism"], "Indexed, 4")
    c = spec["template"]["spec"]["containers"][0]
    check("JOB_COMPLETION_INDEX" in c["command"][2], "the index selects the value")
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    check(env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}, "downward API")


if __name__ == "__main__":
    mode = sys.argv[1]
    {"bisect": bisect, "fleet": fleet, "k8s": k8s}[mode](*sys.argv[2:])
