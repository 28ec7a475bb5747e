#!/usr/bin/env bash
# Six three-process runs of inv_pool.yaml at the adversarial suite's fast settings; prints, per
# run, its verdict, each process's speedup and the share of each worker's calls whose pool
# thread ran on its caller's core. Run from the repository root.
set -euo pipefail
here=evidence/defences/outside-clock-per-call/pool-placement
scratch=$(mktemp -d)
for i in 1 2 3 4 5 6; do
  mkdir -p "$scratch/logs$i"
  POOL_LOG_DIR="$scratch/logs$i" PYTHONPATH=tests/adversarial/cpu python -m expkit run "$here/inv_pool.yaml" \
    measure=quick measure.min_seconds=0.05 measure.max_seconds=0.3 measure.warmup_seconds=0.01 oracle.trials=2 \
    measure.processes=3 --out "$scratch/out$i" > /dev/null || true
  python3 - "$scratch" "$i" <<'PY'
import glob, json, os, sys
scratch, i = sys.argv[1], sys.argv[2]
r = json.load(open(f"{scratch}/out{i}/result.json"))
speedups = [round(p["speedup"], 3) for p in r["measured"]["cases"]["c"]["per_process"]]
shares = []
for f in sorted(glob.glob(f"{scratch}/logs{i}/log-*.txt"), key=os.path.getmtime):  # a worker's log, in start order
    same = [int(line.split()[3].split("/")[0]) for line in open(f) if line.strip()]
    shares.append(round(sum(same) / (100 * len(same)), 2) if same else None)
print(f"run {i}\t{r['verdict']}\tprocess speedups {speedups}\tsame-core share by worker {shares}")
PY
done
