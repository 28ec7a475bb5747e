#!/usr/bin/env bash
# One device call of this session's GPU work, from a committed snapshot of the repository.
#
# Why a snapshot: the device machine receives the whole working tree, other engineers'
# unfinished edits included; `git archive HEAD` into .device-src/ (ignored, carried)
# runs exactly what is committed. Prepare it here with
#     rm -rf .device-src && mkdir .device-src && git archive HEAD | tar -x -C .device-src
# and call the device with carry [".device-src", ".whl", ".kernelbench"] and the command
#     bash .device-src/scripts/device_session.sh STEP...
# Every step writes under /tmp/batch, and everything is packed into $OUT/batch.tar.gz at
# the end (the device returns at most 8 files), also when a step fails or times out.
#
# (write the commit into .device-src/COMMIT: git rev-parse HEAD > .device-src/COMMIT).
# Set DEADLINE=560 (see below) when the device call's own limit is 600 s.
# Steps (each with its own time limit, so one slow step cannot take the others' time):
#   info       device, driver, torch; `expkit doctor`
#   tests      python -m pytest -m gpu (540 s at most; the whole suite took 426 s on the H100 on 2026-11-24,
#              521 s at ad4b631 on 2026-11-25, where the wrong-kernel example took 65 s against 3.4 s before,
#              and ran past the step's limit at 573 s on an H100 on 2026-11-27: split it over two device
#              calls of tests:P,Q steps, as evidence/ci/gpu-suite/README.md describes)
#   tests:P,Q  python -m pytest -m gpu P Q (TESTS_LIMIT seconds, 300 by default; the whole GPU
#              suite takes ~7 min, so split it over several such steps)
#   examples   the GPU examples at measure=quick, one session
#   kb:LIST    KernelBench level-1 problems LIST (comma-separated numbers) through the sweep
#   kb2:LIST, kb3:LIST  the same for levels 2 and 3
#   kbeval:LIST  KernelBench's own evaluation (benchmarks/kernelbench_reference_eval.py) of level-1
#              problems LIST, one process for all, and that command's wall
#   cprofile:LIST  after kb:LIST: one CLI run of each under cProfile (prof-N.txt: where the command's wall goes)
#   teardown:LIST  after kb:LIST: benchmarks/command_teardown.py on each (TEARDOWN_REPEATS runs each way, 3)
#   rerun      issue 15's reruns: benchmarks/rerun/{aa,pair}.yaml, 5 fresh invocations each
#              (RERUN_GROUPS "aa pair", RERUN_N 5, RERUN_LIMIT 150 s a run)
#   cost:LIST  benchmarks/harness_cost.py on the manifests kb:LIST wrote
#   honest     the honest GPU example, 3 runs with each timer (kernel, events)
#   advgpu     the GPU adversarial manifests through the CLI, with their reasons
#   kbwrong    the wrong KernelBench solutions
#   audits:GLOB  audit manifests matching GLOB (under manifests/audits/), one session
#              (AUDIT_ARGS: extra overrides, e.g. measure.timer=events; AUDIT_SESSION: its folder)
#   adv:NAMES  the named GPU adversarial manifests, each run folder kept whole (result.json, report)
#   l2         the L2-resident adversarial pair warm and cold, with each timer: its figures side by side
#   pyc        whether torch's bytecode is cached on the device, and import times with a cache
#   timeline:LIST  benchmarks/request_times.py on the manifests kb:LIST wrote (where a run's wall goes)
#   pycache    from here on, Python writes and reads bytecode caches (under /tmp/pyc), as a
#              user's Python does: this device's sets PYTHONDONTWRITEBYTECODE=1 and ships
#              torch without them, so every process compiles torch's modules afresh
#   overhead:LIST  benchmarks/defence_overhead.py on the manifests LIST (comma-separated paths),
#              OVERHEAD_ROUNDS rounds (2) of one run each way; where .device-src-old is carried, each
#              round runs the old snapshot's script too, alternating (overhead-{new,old}-ROUND.{md,json})
#   pinab:LIST  benchmarks/defence_overhead.py on the manifests LIST with defences.pin_cores on and off,
#              alternating, OVERHEAD_ROUNDS rounds (2) of one run each way (pinned-ROUND, free-ROUND .{md,json})
#   requests:LIST  benchmarks/request_times.py on the manifests LIST (comma-separated paths), measure=quick
#   floor      benchmarks/channel_floor.py: a bare pipe's and expkit's channel's round trip (floor.txt)
#   fidelity   benchmarks/timing_fidelity.py --quick
#   fidelity-full  benchmarks/timing_fidelity.py
#   advcpu     the CPU adversarial suite and the tests of the defences between processes (confinement,
#              code digest, interference, freeze) on this host (adv_cpu.log)
#   probe:LIST  the manifests benchmarks/probes/LIST.yaml (comma-separated DIR/NAME), REPEATS CLI runs each
set -uo pipefail
export PYTHONUNBUFFERED=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REPO=$(cd "$ROOT/.." && pwd)
OUT=${OUT:-/tmp/out}
B=/tmp/batch
rm -rf "$B"; mkdir -p "$OUT" "$B"  # a warm machine keeps /tmp: start every call from an empty batch
shopt -s nullglob  # .whl/audits/ is there only when audits run; an unmatched glob would stop pip
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$REPO"/.whl/*.whl "$REPO"/.whl/audits/*.whl 2>&1 | tail -2
shopt -u nullglob
export PYTHONPATH=/tmp/site:$ROOT
cd "$ROOT"
[ -e .kernelbench ] || ln -s "$REPO/.kernelbench" .kernelbench  # the audits name ../../.kernelbench
pack() { tar -czf "$OUT/batch.tar.gz" -C "$B" . 2>/dev/null; }
trap pack EXIT
# DEADLINE (seconds from the start of this script, e.g. 560 under the device's 600 s limit):
# each step's own limit is cut to what is left, and steps that would start with under 30 s
# left are skipped, so the batch is always packed before the device call itself times out.
left() { echo $(( ${DEADLINE:-100000} - SECONDS )); }
step_limit() {
  local t=$1; shift
  local l=$(( $(left) - 15 )); (( l < t )) && t=$l
  (( t < 5 )) && { echo "skipped (deadline): $*" | tee -a "$B/steps.log"; return 124; }
  timeout --kill-after=10 "$t" "$@"
}
for step in "$@"; do
  if (( $(left) < 30 )); then echo "=== $step skipped: deadline" | tee -a "$B/steps.log"; continue; fi
  echo "=== $step $(date -u +%H:%M:%S)" | tee -a "$B/steps.log"
  case $step in
    info)
      { date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
        python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
        cat "$ROOT/COMMIT" 2>/dev/null || true; } | tee "$B/device.txt"
      step_limit 60 python3 -m expkit doctor > "$B/doctor.txt" 2>&1; tail -5 "$B/doctor.txt" ;;
    tests)
      step_limit 570 python3 -m pytest -m gpu tests -q -p no:cacheprovider --no-header -rf --durations=15 2>&1 \
        | tee "$B/gpu_tests.log" | tail -25 ;;
    tests:*)  # some GPU tests only: tests:PATH,PATH (each such step its own log: gpu_tests_part1.log, ...)
      part=$(( ${part:-0} + 1 ))
      step_limit ${TESTS_LIMIT:-300} python3 -m pytest -m gpu $(echo "${step#tests:}" | tr , ' ') -q -p no:cacheprovider \
        --no-header -rf --durations=8 2>&1 | tee "$B/gpu_tests_part$part.log" | tail -15 ;;
    examples)
      for m in manifests/examples/gpu/*.yaml; do
        n=$(basename "$m" .yaml)
        step_limit 150 python3 -m expkit run "$m" measure=quick --session "$B/gpu-session" --quiet > "$B/ex-$n.log" 2>&1
        echo "$n exit $?" | tee -a "$B/steps.log"
      done
      python3 -m expkit session "$B/gpu-session" > /dev/null 2>&1 ;;
    kb:*|kb2:*|kb3:*)  # kb:LIST level 1, kb2:LIST level 2, kb3:LIST level 3
      lv=${step%%:*}; lv=${lv#kb}; lv=${lv:-1}
      step_limit 540 python3 benchmarks/kernelbench_sweep.py "$REPO/.kernelbench" --level "$lv" --problems "${step#*:}" \
        --timeout 100 --budget $(( $(left) - 40 )) --results "$B/kb-l$lv.jsonl" --work /tmp/kb-work --copy-to "$B" \
        2>&1 | tail -30 ;;
    kbeval:*)  # KernelBench's own evaluation of level-1 problems LIST, one process for them all (issue 19's reference)
      t0=$(date +%s%N)
      step_limit 540 python3 benchmarks/kernelbench_reference_eval.py "$REPO/.kernelbench" --level 1 --problems "${step#*:}" \
        --timeout 120 --budget $(( $(left) - 40 )) --results /tmp/kbeval/kbeval-l1.jsonl --copy-to "$B" 2>&1 | tail -30
      echo "kbeval ${step#*:}: command wall $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$B/steps.log" ;;
    cprofile:*)  # after kb:LIST: the CLI's own process under cProfile for each run (where the command's wall goes)
      for n in $(echo "${step#cprofile:}" | tr , ' '); do
        for m in /tmp/kb-work/level1/manifests/${n}_*.yaml; do
          t0=$(date +%s%N)
          step_limit 120 python3 -m cProfile -o "$B/prof-$n.out" -m expkit run "$m" measure=quick --out "/tmp/prof-$n" \
            --json > /dev/null 2>&1
          echo "cprofile $n: exit $?, command wall $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$B/steps.log"
          python3 -c "import pstats, sys; pstats.Stats(sys.argv[1]).sort_stats('cumulative').print_stats(60)" \
            "$B/prof-$n.out" > "$B/prof-$n.txt" 2>&1
          cp "/tmp/prof-$n/result.json" "$B/prof-$n-result.json" 2>/dev/null
        done
      done ;;
    teardown:*)  # after kb:LIST: benchmarks/command_teardown.py on each (the command's end with and without teardown)
      for n in $(echo "${step#teardown:}" | tr , ' '); do
        for m in /tmp/kb-work/level1/manifests/${n}_*.yaml; do
          step_limit 300 python3 benchmarks/command_teardown.py "$m" --repeats ${TEARDOWN_REPEATS:-3} > "$B/teardown-$n.md" \
            2> "$B/teardown-$n.log"; echo "teardown $n exit $?" | tee -a "$B/steps.log"; tail -3 "$B/teardown-$n.md"
        done
      done ;;
    rerun)  # issue 15: five fresh invocations each of an A/A and an honest pair, then their agreement
      for g in ${RERUN_GROUPS:-aa pair}; do
        for i in $(seq 1 ${RERUN_N:-5}); do
          step_limit ${RERUN_LIMIT:-150} python3 -m expkit run benchmarks/rerun/$g.yaml --out "$B/rerun/$g/run-$i" --quiet \
            > "$B/rerun-$g-$i.log" 2>&1
          echo "rerun $g $i exit $?" | tee -a "$B/steps.log"
        done
      done
      python3 benchmarks/rerun_agreement.py $(for g in ${RERUN_GROUPS:-aa pair}; do echo "$B/rerun/$g"; done) --out "$B/rerun" \
        2>&1 | tail -20 ;;
    cost:*)  # after kb:LIST: the harness's cost against one plain call, on the sweep's manifests
      ms=()
      for n in $(echo "${step#cost:}" | tr , ' '); do ms+=( /tmp/kb-work/level1/manifests/${n}_*.yaml ); done
      step_limit 300 python3 benchmarks/harness_cost.py "${ms[@]}" --device cuda --out "$B/cost" 2>&1 | tail -20 ;;
    honest)  # the honest GPU example, three runs with each timer: speedups and rechecks side by side
      mkdir -p "$B/honest"
      for t in ${HONEST_TIMERS:-kernel events kernel events kernel events}; do
        n=$((${n:-0}+1)); d="$B/honest/$n-$t"
        step_limit 120 python3 -m expkit run manifests/examples/gpu/honest.yaml measure=quick measure.timer=$t \
          --out "$d" --quiet > "$d.log" 2>&1
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], r['verdict'], {k: round(c.get('speedup') or 0, 3) for k, c in r['measured']['cases'].items()}, r['timing'].get('method'), r['reasons'][:2])" "$d/result.json" "$t" 2>&1 | tee -a "$B/honest.txt"
      done ;;
    advgpu)  # the GPU adversarial manifests through the CLI, with their reasons
      mkdir -p "$B/adv"
      for m in tests/adversarial/gpu/*.yaml; do
        n=$(basename "$m" .yaml)
        ( cd tests/adversarial/gpu && PYTHONPATH=$PYTHONPATH:. step_limit 120 python3 -m expkit run "$n.yaml" measure=quick \
            measure.max_seconds=0.3 measure.min_seconds=0.1 --out "$B/adv/$n" --quiet > "$B/adv-$n.log" 2>&1 )
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], r['verdict'], r['reasons'][:3])" "$B/adv/$n/result.json" "$n" 2>&1 | tee -a "$B/adv.txt"
      done ;;
    kbwrong)
      step_limit 300 python3 benchmarks/kernelbench_sweep.py "$REPO/.kernelbench" --wrong --timeout 120 --budget 280 \
        --results "$B/kb-wrong.jsonl" --copy-to "$B" 2>&1 | tail -20 ;;
    audits:*)
      for m in manifests/audits/${step#audits:}.yaml; do
        n=$(basename "$m" .yaml)
        step_limit 200 python3 -m expkit run "$m" measure=quick ${AUDIT_ARGS:-} --session "$B/${AUDIT_SESSION:-audit-session}" \
          --quiet > "$B/au-$n${AUDIT_ARGS:+-alt}.log" 2>&1
        echo "$n exit $?" | tee -a "$B/steps.log"; tail -3 "$B/au-$n.log"
      done ;;
    pycache)
      unset PYTHONDONTWRITEBYTECODE; export PYTHONPYCACHEPREFIX=/tmp/pyc
      mods="torch, torch._dynamo, torch.profiler, torch._inductor.standalone_compile, scipy.stats, pandas, jinja2, expkit.api, expkit.bench.sides.endpoint, expkit.cli"
      TIMEFORMAT="%R s"
      for i in 1 2 3; do echo "import of the preload, run $i (caches $( ((i == 1)) && echo written || echo read)):"
        { time python3 -c "import $mods"; } 2>&1; done | tee "$B/pycache.txt" ;;
    adv:*)
      for n in $(echo "${step#adv:}" | tr , ' '); do
        ( cd tests/adversarial/gpu && PYTHONPATH=$PYTHONPATH:. step_limit 120 python3 -m expkit run "$n.yaml" measure=quick \
            measure.max_seconds=0.3 measure.min_seconds=0.1 --out "$B/adv/$n" --quiet > "$B/adv-$n.log" 2>&1 )
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], r['verdict'], r['reasons'][:3]); print(json.dumps(r.get('identity'))[:3000])" "$B/adv/$n/result.json" "$n" 2>&1 | tee -a "$B/adv.txt"
      done ;;
    l2)  # why the L2-resident pair read 0.85x warm and 2.89x cold (gpu_tests_all_5f465b3.log)
      mkdir -p "$B/l2"
      for t in kernel events; do for c in true false; do
        d="$B/l2/$t-cold-$c"
        ( cd tests/adversarial/gpu && step_limit 90 python3 -m expkit run l2_resident.yaml measure=quick measure.timer=$t \
            measure.cold=$c --out "$d" --quiet > "$d.log" 2>&1 )
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); c=r['measured']['cases']['c']; print(sys.argv[2], r['verdict'], r['timing'].get('method'), {k: v for k, v in c.items() if not isinstance(v, (list, dict))})" "$d/result.json" "$t cold=$c" 2>&1 | tee -a "$B/l2.txt"
      done; done ;;
    pyc)  # whether the device's Python finds compiled bytecode for torch, and what importing costs without and with a cache
      { python3 - <<'PY'
import os, torch
d = os.path.dirname(torch.__file__)
print("torch at", d, "writable", os.access(d, os.W_OK), "| _dynamo/__pycache__ exists",
      os.path.isdir(os.path.join(d, "_dynamo", "__pycache__")), "| PYTHONDONTWRITEBYTECODE", os.environ.get("PYTHONDONTWRITEBYTECODE"))
PY
        for env in "" "PYTHONPYCACHEPREFIX=/tmp/pyc" "PYTHONPYCACHEPREFIX=/tmp/pyc"; do
          TIMEFORMAT="import torch._dynamo, ${env:-no cache prefix}: %R s"
          time env $env python3 -c "import torch._dynamo"
        done; } 2>&1 | tee "$B/pyc.txt" ;;
    timeline:*)  # after kb:LIST: each run's wall time request by request
      for n in $(echo "${step#timeline:}" | tr , ' '); do
        for m in /tmp/kb-work/level1/manifests/${n}_*.yaml; do
          step_limit 120 python3 benchmarks/request_times.py "$m" > "$B/timeline-$n.txt" 2>&1
          echo "timeline $n exit $?" | tee -a "$B/steps.log"; tail -22 "$B/timeline-$n.txt"
        done
      done ;;
    overhead:*)
      ms=$(echo "${step#overhead:}" | tr , ' ')
      for i in $(seq "${OVERHEAD_ROUNDS:-2}"); do
        for tree in new old; do
          src=$ROOT; [ $tree = old ] && src=$REPO/.device-src-old
          [ -d "$src" ] || continue
          PYTHONPATH=/tmp/site:$src step_limit 280 python3 "$src/benchmarks/defence_overhead.py" $ms --repeats 1 \
            --max-seconds 2 --json "$B/overhead-$tree-$i.json" > "$B/overhead-$tree-$i.md" 2>&1
          echo "overhead $tree $i exit $?" | tee -a "$B/steps.log"; grep '^|' "$B/overhead-$tree-$i.md" | tail -4
        done
      done ;;
    pinab:*)
      ms=$(echo "${step#pinab:}" | tr , ' ')
      for i in $(seq "${OVERHEAD_ROUNDS:-2}"); do
        for arm in pinned free; do
          v=true; [ $arm = free ] && v=false
          step_limit 280 python3 benchmarks/defence_overhead.py $ms --repeats 1 --max-seconds 2 \
            --json "$B/$arm-$i.json" -- defences.pin_cores=$v > "$B/$arm-$i.md" 2>&1
          echo "pinab $arm $i exit $?" | tee -a "$B/steps.log"; grep '^|' "$B/$arm-$i.md" | tail -4
        done
      done ;;
    requests:*)
      for m in $(echo "${step#requests:}" | tr , ' '); do
        n=$(basename "$m" .yaml)
        step_limit 150 python3 benchmarks/request_times.py "$m" "$B/requests-$n" measure=quick > "$B/requests-$n.txt" 2>&1
        echo "requests $n exit $?" | tee -a "$B/steps.log"; tail -25 "$B/requests-$n.txt"
      done ;;
    floor)
      step_limit 120 python3 benchmarks/channel_floor.py --rounds 3000 > "$B/floor.txt" 2>&1
      echo "floor exit $?" | tee -a "$B/steps.log"; cat "$B/floor.txt" ;;
    fidelity)
      step_limit 240 python3 benchmarks/timing_fidelity.py --quick --out "$B/fidelity-quick" 2>&1 | tail -40 ;;
    fidelity-full)
      step_limit 540 python3 benchmarks/timing_fidelity.py --out "$B/fidelity" 2>&1 | tail -60 ;;
    advcpu)  # the CPU adversarial suite and the tests of the defences that act between processes, on this host
      step_limit ${TESTS_LIMIT:-300} python3 -m pytest -m "not gpu" tests/adversarial tests/test_confine.py \
        tests/test_code_digest.py tests/test_interference.py tests/test_freeze.py -q -p no:cacheprovider --no-header -rfs --durations=8 2>&1 \
        | tee "$B/adv_cpu.log" | tail -15 ;;
    probe:*)  # the probes of a limit under benchmarks/probes/ (probe:DIR/NAME,...), REPEATS (2) CLI runs each
      for m in $(echo "${step#probe:}" | tr , ' '); do
        n=$(basename "$m")
        for i in $(seq 1 "${REPEATS:-2}"); do
          step_limit 150 python3 -m expkit run "benchmarks/probes/$m.yaml" measure=quick --out "$B/probe/$n-$i" --quiet \
            > "$B/probe-$n-$i.log" 2>&1
          python3 -c "import json,sys; r=json.load(open(sys.argv[1])); c=r['measured']['cases']; print(sys.argv[2], r['verdict'], {k: (round(v['speedup'], 3), round(v['ci_low'], 3), round(v['ci_high'], 3)) for k, v in c.items() if v.get('speedup')}, r['reasons'][:2])" \
            "$B/probe/$n-$i/result.json" "$n-$i" 2>&1 | tee -a "$B/probe.txt"
        done
      done ;;
    *) echo "unknown step $step" ;;
  esac
done
