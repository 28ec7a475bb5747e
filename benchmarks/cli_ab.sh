#!/usr/bin/env bash
# Fresh `expkit run` commands, as a user types them, from two snapshots of the code and with
# the defences on and off, alternating: what a change costs or saves a user's whole command.
#
#   bash benchmarks/cli_ab.sh OLD_TREE [ROUNDS] [MANIFEST] [override ...]
#
# OLD_TREE: a checkout of the other snapshot (`git archive REV | tar -x -C DIR`); "new" is this
# tree. Each run is `python -m expkit run MANIFEST OVERRIDES defences.enabled=...` from its
# tree's root (so `expkit` imports from there), timed from the shell. Prints one line a run:
# round, snapshot, defences, exit status, seconds, verdict. Defaults: 3 rounds, the README's
# example at measure=quick. WAYS (default "true false"): the values of defences.enabled run,
# "true" alone for the defended command a user types.
set -uo pipefail
[ $# -ge 1 ] && [ -d "$1" ] || { echo "usage: bash benchmarks/cli_ab.sh OLD_TREE [ROUNDS] [MANIFEST] [override ...]" >&2; exit 2; }
OLD=$(cd "$1" && pwd); shift
ROUNDS=${1:-3}; shift || true
M=${1:-manifests/examples/cpu/honest-win.yaml}; shift || true
EXTRA=("$@"); [ ${#EXTRA[@]} -eq 0 ] && EXTRA=(measure=quick)
NEW=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
case "$PY" in */*) PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY");; esac  # the runs cd
OUT=$(mktemp -d)
echo "| round | code | defences | exit | seconds | verdict |"
echo "|---|---|---|---|---|---|"
for i in $(seq 1 "$ROUNDS"); do
  for snap in old new; do
    src=$NEW; [ "$snap" = old ] && src=$OLD
    for on in ${WAYS:-true false}; do
      d="$OUT/$snap-$on-$i"
      t0=$(date +%s.%N)
      (cd "$src" && "$PY" -m expkit run "$M" --out "$d" "${EXTRA[@]}" "defences.enabled=$on" --quiet >/dev/null 2>&1)
      rc=$?
      t1=$(date +%s.%N)
      v=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['verdict'])" "$d/result.json" 2>/dev/null)
      echo "| $i | $snap | $on | $rc | $("$PY" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$t0" "$t1") | ${v:-none} |"
    done
  done
done
rm -rf "$OUT"
