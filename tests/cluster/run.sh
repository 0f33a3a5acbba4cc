#!/usr/bin/env bash
# The cluster end to end, with the real components a fleet runs on, on loopback in a
# temporary folder, all stopped at exit:
#   - munge + a single-node Slurm (slurmctld, slurmd; Debian's packages) running a
#     2-round parallel bisect as job arrays (`bisect --plan slurm`, `sbatch --wait`,
#     `bisect --resume`), and an exporting `gpumem-agent run` as a Slurm job;
#   - Prometheus scraping node_exporter's textfile collector and a Pushgateway, queried
#     through its HTTP API: the run's series arrive with DCGM's label names and vanish
#     from the Pushgateway after the run deletes its group;
#   - `gpumem-agent merge` over everything, its fleet sheet checked against its schema;
#   - `bisect --plan k8s`'s manifest validated against Kubernetes' batch/v1 Job schema
#     (kubernetes-validate, PyPI, which carries the OpenAPI-derived JSON schemas).
# There is no GPU here: every agent runs with the debug build's SYNTHETIC test switch
# (measure on the recording stand-in, run with the probe's recording reader), and every
# document and series it writes says SYNTHETIC. Nothing here is a GPU figure.
#
# Usage: tests/cluster/run.sh [AGENT]   (default target/debug/gpumem-agent)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=scripts/env.sh
source "$root/scripts/env.sh"
agent="$(realpath "${1:-$root/target/debug/gpumem-agent}")"
torch_py="$GPUMEM_TOOLS/torch-venv/bin/python"
kv="$GPUMEM_TOOLS/kubernetes-validate/bin"
for tool in munged slurmctld slurmd sbatch squeue scontrol prometheus \
    prometheus-pushgateway prometheus-node-exporter promtool; do
  command -v "$tool" >/dev/null || { echo "FAILED: $tool missing (scripts/install-tools.sh installs it)"; exit 1; }
done
for f in "$agent" "$torch_py" "$kv/kubernetes-validate" "$kv/python"; do
  [ -x "$f" ] || { echo "FAILED: $f missing (build the agent; scripts/install-tools.sh)"; exit 1; }
done

t0=$SECONDS
work="$(mktemp -d /tmp/gpumem-cluster.XXXXXX)"
chmod 700 "$work"
pids=()
cleanup() {
  local rc=$?
  # Only the daemons this script started, by their pids.
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "$rc" -ne 0 ]; then
    echo "--- logs ($work) ---"
    tail -n 20 "$work"/log/* 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
mkdir -p "$work/log"
log() { printf '[cluster %3ss] %s\n' "$((SECONDS - t0))" "$*"; }
fail() { echo "FAILED: $*"; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() { # wait_for SECONDS DESCRIPTION COMMAND…
  local limit=$1 what=$2; shift 2
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || fail "$what (not within ${limit}s)"
    sleep 0.2
  done
}

# ---- munge ---------------------------------------------------------------------------
m="$work/munge"
mkdir -p "$m" && chmod 700 "$m"
head -c 1024 /dev/urandom >"$m/munge.key" && chmod 400 "$m/munge.key"
# --force: root and a temporary folder are fine for a test daemon on loopback.
munged --foreground --force --socket="$m/munge.socket" --key-file="$m/munge.key" \
  --pid-file="$m/munged.pid" --seed-file="$m/munged.seed" --log-file="$work/log/munged.log" \
  >"$work/log/munged.out" 2>&1 &
pids+=($!)
wait_for 10 "munged's socket" test -S "$m/munge.socket"

# ---- Slurm ---------------------------------------------------------------------------
s="$work/slurm"
mkdir -p "$s/state" "$s/spool"
host="$(hostname -s)"
cat >"$s/slurm.conf" <<EOF
ClusterName=gpumemtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(port)
SlurmdPort=$(port)
AuthType=auth/munge
AuthInfo=socket=$m/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MaxArraySize=1001
# The trials are tiny (the stand-in): eight CPUs declared so a round's eight tasks start
# together on a small machine (config_overrides: slurmd takes them as configured), and
# the scheduler looks every second instead of every minute.
SlurmdParameters=config_overrides
SchedulerParameters=sched_interval=1
NodeName=gpumem-node NodeHostname=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=fleet Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$s/slurm.conf"
slurmctld -D -i -f "$SLURM_CONF" >"$work/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N gpumem-node -f "$SLURM_CONF" >"$work/log/slurmd.out" 2>&1 &
pids+=($!)
node_idle() { sinfo -h -N -o '%T' | grep -qE '^idle'; }
wait_for 30 "the Slurm node to come up idle" node_idle
log "Slurm $(sinfo -V | cut -d' ' -f2) up with munge: node gpumem-node idle"

# ---- Prometheus, node_exporter's textfile collector, Pushgateway ----------------------
textfile="$work/textfile"
mkdir -p "$textfile"
p_prom=$(port) p_node=$(port) p_push=$(port)
prometheus-node-exporter --web.listen-address="127.0.0.1:$p_node" \
  --collector.disable-defaults --collector.textfile \
  --collector.textfile.directory="$textfile" >"$work/log/node_exporter.log" 2>&1 &
pids+=($!)
prometheus-pushgateway --web.listen-address="127.0.0.1:$p_push" >"$work/log/pushgateway.log" 2>&1 &
pids+=($!)
# honor_labels: the pushed job="gpumem" and instance labels are kept (Prometheus
# documentation, "Pushing metrics": the Pushgateway's scrape configuration).
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: node
    static_configs: [{targets: ["127.0.0.1:$p_node"]}]
  - job_name: pushgateway
    honor_labels: true
    static_configs: [{targets: ["127.0.0.1:$p_push"]}]
EOF
promtool check config "$work/prometheus.yml" >/dev/null
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prometheus" \
  --web.listen-address="127.0.0.1:$p_prom" --log.level=warn >"$work/log/prometheus.log" 2>&1 &
pids+=($!)
up_both() {
  python3 "$here/promql.py" "http://127.0.0.1:$p_prom" count-up 2
}
wait_for 60 "Prometheus scraping node_exporter and the Pushgateway" up_both
log "Prometheus $(prometheus --version 2>&1 | head -1 | cut -d' ' -f3) scraping node_exporter (textfile) and the Pushgateway"

export GPUMEM_RUN_SYNTHETIC_FOR_TESTS=1

# ---- a 2-round parallel bisect as Slurm arrays ----------------------------------------
b="$work/fleet/bisect"
mkdir -p "$work/fleet"
"$agent" bisect --plan slurm --parallel 8 --vary batch --from 1 --to 64 \
  --context 2048 --warmup 1 --repeats 1 --output-dir "$b" >"$work/log/plan.txt"
for round in 1 2; do
  script="$b/round-$round/gpumem-bisect.sbatch"
  [ -f "$script" ] || fail "round $round was not written: $(cat "$work/log/plan.txt")"
  sbatch --wait --quiet "$script" || fail "round $round's array failed"
  "$agent" bisect --resume "$b" >"$work/log/plan.txt"
  log "$(head -1 "$work/log/plan.txt")"
done
python3 "$here/check.py" bisect "$b"

# ---- an exporting run as a Slurm job ---------------------------------------------------
runs="$work/fleet/runs"
mkdir -p "$runs"
go="$work/go"
cat >"$work/run.sbatch" <<EOF
#!/bin/bash
#SBATCH --job-name=gpumem-run
#SBATCH --output=$work/log/run-%j.out
export PYTHONPATH="$root/agent/python/tests/standin"
export GPUMEM_TEST_READER=recording
exec "$agent" run --textfile-dir "$textfile" --pushgateway "http://127.0.0.1:$p_push" \
  --output "$runs/run.json" -- "$torch_py" "$here/train_then_wait.py" "$go"
EOF
job=$(sbatch --parsable "$work/run.sbatch")
log "exporting run submitted as Slurm job $job"
promql() { python3 "$here/promql.py" "http://127.0.0.1:$p_prom" "$@"; }
wait_for 120 "the run's pushed series in Prometheus" \
  promql has 'gpumem_phase_allocated_peak_bytes{job="gpumem",phase="optimizer_step"}'
promql labels 'gpumem_phase_allocated_peak_bytes{job="gpumem",phase="optimizer_step",step="first"}' \
  "job=gpumem" "instance=$host" "run_id=slurm-$job-0" "Hostname=$host" "hpc_job=$job" \
  "rank=0" "phase=optimizer_step" "step=first" "synthetic=true" >"$work/series.txt"
log "scraped: $(cat "$work/series.txt")"
touch "$go"
job_done() { [ -z "$(squeue -h -j "$job" 2>/dev/null)" ]; }
wait_for 120 "the run's Slurm job to end" job_done
[ -f "$runs/run.json" ] || fail "the run wrote no result: $(cat "$work"/log/run-*.out)"
wait_for 30 "the pushed series to vanish after the run deleted its group" \
  promql none 'gpumem_phase_allocated_peak_bytes{job="gpumem"}'
# The textfile stays: the finished run's record, scraped through node_exporter.
wait_for 30 "the final textfile series through node_exporter" \
  promql has "gpumem_estimate_error_ratio{job=\"node\",run_id=\"slurm-$job-0\",line=\"optimizer_states\"}"
promtool check metrics <"$textfile/gpumem_slurm-$job-0.prom"
"$agent" export "$runs/run.json" | promtool check metrics
"$agent" export "$b/round-1/trial-batch-1.json" | promtool check metrics
log "series gone from the Pushgateway after the delete; the textfile keeps the final record; promtool accepts both texts"

# ---- the fleet sheet --------------------------------------------------------------------
"$agent" merge "$work/fleet" --output "$work/fleet.json" >"$work/fleet.txt"
"$kv/python" "$here/check.py" fleet "$work/fleet.json" "$root/schemas/fleet.v1.schema.json" "$job"
head -n 1 "$work/fleet.txt"
grep -E '^(error|worst)' "$work/fleet.txt"

# ---- the Kubernetes Indexed Job ----------------------------------------------------------
"$agent" bisect --plan k8s --parallel 4 --vary batch --from 1 --to 64 --context 2048 \
  --image registry.example/gpumem-agent:0.1 --claim gpumem-results \
  --output-dir "$work/k8s" >/dev/null
manifest="$work/k8s/round-1/gpumem-bisect-job.json"
"$kv/kubernetes-validate" --strict --kubernetes-version 1.37.0 "$manifest"
python3 "$here/check.py" k8s "$manifest"
log "Kubernetes Indexed Job validated against batch/v1 Job (kubernetes-validate, strict)"
log "cluster checks passed in $((SECONDS - t0))s"
