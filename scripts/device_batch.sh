#!/usr/bin/env bash
# One device call: install the wheels the GPU image lacks, run the GPU tests and the GPU
# examples, and pack every output into $OUT/batch.tar.gz (the device returns at most 8 files).
# Usage on the device machine, from the repository root:  bash scripts/device_batch.sh [STEPS...]
# Steps: tests examples bench suite2 kb-audit kb-beside block-profile warm-start audit-ab kb-ab (default: tests examples bench; suite2 needs two GPUs).
# GPU_TESTS narrows the tests step (default: every test marked gpu); GPUS_TESTS picks its GPU;
# TESTS_BESIDE=1 runs it beside the steps after it (give those other GPUs), for at most TESTS_SECONDS
# (default 540). GPU_TESTS_SPLIT="files A;files B" runs group i on the i-th GPU of GPUS_TESTS, side
# by side (logs gpu_tests-<i>.log).
# kb-audit: KernelBench level 1 at original sizes from .kernelbench/ (git-ignored; carry it), an
# identity per problem and, for problems up to KB_FULL (default 10), a torch.compile and a wrong one,
# audited over AUDIT_GPUS for at most KB_AUDIT_SECONDS; the report is written from the records it has.
# KB_SPLIT="GPUS:ARGS;GPUS:ARGS" runs one audit per entry side by side, each on its GPUS with its own extra
# arguments (a setting, --retries ...), into kb-audit-<i>/ (default: one audit on AUDIT_GPUS, default 0).
# KB_FROM (default 1) and KB_TO (default 100): the first and last problems audited (an audit split
# over device calls); KB_ALSO, a comma list of problems audited beside that range.
# KB_RESUME=DIR: finish the audit folder DIR (carry it; a kb-audit folder an earlier call returned) with
# `expkit audit --resume` on AUDIT_GPUS instead of starting one: the run and KernelBench's problems are
# made again at the same absolute paths under /tmp/kb, so its manifests' relative paths still hold
# (leave out its .cache/, the candidates' compile caches, to fit the carry limit: they compile again).
# kb-ab: what a change costs a `quick` identity verdict on KernelBench level 1 at original sizes:
# the problems KB_AB (default 1,40,19) from the tree in .ab-before/ (an older snapshot's expkit/,
# conf/ and pyproject.toml; carry it) and from this one, alternating, AB_ROUNDS (default 3) rounds
# (benchmarks/cli_ab.sh); the problems are spread over AB_GPUS (default 0), one list a GPU.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
rm -rf /tmp/batch /tmp/kb  # a warm machine keeps the last call's files: each call starts afresh
mkdir -p "$OUT" /tmp/batch
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
steps=${*:-tests examples bench}
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} | tee /tmp/batch/device.txt
for step in $steps; do
  case $step in
    tests)
      if [ -n "${GPU_TESTS_SPLIT:-}" ]; then  # groups of test files, one per GPU of GPUS_TESTS, side by side
        IFS=';' read -ra groups <<< "$GPU_TESTS_SPLIT"; IFS=, read -ra tgpus <<< "${GPUS_TESTS:-0}"
        for i in "${!groups[@]}"; do
          CUDA_VISIBLE_DEVICES=${tgpus[$i]} timeout "${TESTS_SECONDS:-540}" python3 -m pytest -m gpu ${groups[$i]} \
            -q -p no:cacheprovider > "/tmp/batch/gpu_tests-$i.log" 2>&1 &
        done
        [ -n "${TESTS_BESIDE:-}" ] || wait
      elif [ -n "${TESTS_BESIDE:-}" ]; then  # beside the steps after it, on its own GPU; joined before packing
        CUDA_VISIBLE_DEVICES=${GPUS_TESTS:-0} timeout "${TESTS_SECONDS:-540}" python3 -m pytest -m gpu ${GPU_TESTS:-tests} \
          -q -p no:cacheprovider > /tmp/batch/gpu_tests.log 2>&1 &
      else
        CUDA_VISIBLE_DEVICES=${GPUS_TESTS:-0} python3 -m pytest -m gpu ${GPU_TESTS:-tests} -q -p no:cacheprovider 2>&1 | tee /tmp/batch/gpu_tests.log
      fi ;;
    kb-audit)
      mkdir -p /tmp/kb && cp -r .kernelbench/KernelBench /tmp/kb/KernelBench  # one absolute path on every call
      python3 benchmarks/kernelbench_generation_run.py .kernelbench --level 1 --out /tmp/kb/runs/own > /tmp/batch/kb-generate.log 2>&1
      for f in /tmp/kb/runs/own/level_1_problem_*_sample_[12]_kernel.py; do
        p=${f##*problem_}; p=${p%%_*}
        [ "$p" -gt "${KB_FULL:-10}" ] && rm "$f"
      done
      for f in /tmp/kb/runs/own/level_1_problem_*_kernel.py; do
        p=${f##*problem_}; p=${p%%_*}
        { [ "$p" -lt "${KB_FROM:-1}" ] || [ "$p" -gt "${KB_TO:-100}" ]; } && ! [[ ",${KB_ALSO:-}," == *",$p,"* ]] && rm "$f"
      done
      if [ -n "${KB_RESUME:-}" ]; then
        cp -r "$KB_RESUME" /tmp/batch/kb-audit
        CUDA_VISIBLE_DEVICES=${AUDIT_GPUS:-0} timeout "${KB_AUDIT_SECONDS:-480}" python3 -m expkit audit \
          --resume /tmp/batch/kb-audit --quiet > /tmp/batch/kb-audit-resume.log 2>&1
        echo "exit code: $?" >> /tmp/batch/kb-audit-resume.log
        cat /tmp/batch/kb-audit-resume.log
        continue
      fi
      IFS=';' read -ra audits <<< "${KB_SPLIT:-${AUDIT_GPUS:-0}:}"
      for i in "${!audits[@]}"; do
        dir=/tmp/batch/kb-audit; [ ${#audits[@]} -gt 1 ] && dir=/tmp/batch/kb-audit-$i
        ( CUDA_VISIBLE_DEVICES=${audits[$i]%%:*} timeout "${KB_AUDIT_SECONDS:-480}" python3 -m expkit audit /tmp/kb/runs/own \
            --problems /tmp/kb/KernelBench --allow-baseline-ops --timeout 180 --out "$dir" --quiet ${audits[$i]#*:} \
            > "$dir.log" 2>&1
          echo "exit code: $?" >> "$dir.log"
          [ -f "$dir/audit.md" ] || python3 -c 'import sys; from pathlib import Path; from expkit.report import audit_report; print(audit_report.write(Path(sys.argv[1])))' "$dir" >> "$dir.log" 2>&1
          cat "$dir.log" ) &
      done
      wait ;;
    kb-beside)
      # The same candidates (identity, torch.compile, wrong) of the problems KB_BESIDE (default 1,40,19)
      # judged by `expkit audit` on GPU 0, then by KernelBench's own batch loop (one spawned process a
      # candidate, benchmarks/kernelbench_batch_eval.py; needs .kernelbench/src/kernelbench), each for
      # at most BESIDE_SECONDS (default 270); BESIDE_KB_FIRST=1 runs KernelBench's first.
      mkdir -p /tmp/kb && cp -r .kernelbench/KernelBench /tmp/kb/KernelBench
      python3 benchmarks/kernelbench_generation_run.py .kernelbench --level 1 --problems "${KB_BESIDE:-1,40,19}" \
        --out /tmp/kb/runs/beside > /tmp/batch/kb-beside-generate.log 2>&1
      beside_expkit() {
        CUDA_VISIBLE_DEVICES=0 timeout "${BESIDE_SECONDS:-270}" python3 -m expkit audit /tmp/kb/runs/beside \
          --problems /tmp/kb/KernelBench --allow-baseline-ops --timeout 180 --out /tmp/batch/beside-audit --quiet \
          > /tmp/batch/beside-audit.log 2>&1
        echo "exit code: $?" >> /tmp/batch/beside-audit.log; cat /tmp/batch/beside-audit.log
      }
      beside_kb() {
        CUDA_VISIBLE_DEVICES=0 timeout "${BESIDE_SECONDS:-270}" python3 benchmarks/kernelbench_batch_eval.py .kernelbench \
          /tmp/kb/runs/beside --problems-dir /tmp/kb/KernelBench --results /tmp/batch/beside-kb.jsonl \
          2>&1 | tee /tmp/batch/beside-kb.log
      }
      if [ -n "${BESIDE_KB_FIRST:-}" ]; then beside_kb; beside_expkit; else beside_expkit; beside_kb; fi
      rm -rf /tmp/batch/beside-kb-work /tmp/batch/beside-audit/.cache  # compile caches, not evidence
      python3 benchmarks/batch_beside.py /tmp/batch/beside-audit /tmp/batch/beside-kb.jsonl \
        --kinds 0=identity,1=torch.compile,2=wrong 2>&1 | tee /tmp/batch/beside.md ;;
    block-profile)
      # Where each worker's timed blocks spend their time, by role (benchmarks/probes/block_profile.py):
      # the identity candidate (sample 0) of each problem of PROFILE_PROBLEMS (default 1,40) at
      # `measure=quick measure.processes=3`; PROFILE_OPS (default block) names the requests profiled,
      # PROFILE_TOP (default 30) how many functions each role's table lists.
      mkdir -p /tmp/kb && cp -r .kernelbench/KernelBench /tmp/kb/KernelBench
      python3 benchmarks/kernelbench_generation_run.py .kernelbench --level 1 --problems "${PROFILE_PROBLEMS:-1,40}" \
        --out /tmp/kb/runs/own > /tmp/batch/kb-generate.log 2>&1
      IFS=, read -ra pps <<< "${PROFILE_PROBLEMS:-1,40}"
      for p in "${pps[@]}"; do
        problem=$(ls /tmp/kb/KernelBench/level1/ | grep "^${p}_")
        printf 'name: profile_%s\ndevice: cuda\nkernelbench:\n  problem: /tmp/kb/KernelBench/level1/%s\n  solution: /tmp/kb/runs/own/level_1_problem_%s_sample_0_kernel.py\n  precision: fp32\nclaim: {speedup: 1.0, tolerance: 0.05}\ncases:\n  - name: default\nexpect: {forbid_baseline: false}\n' \
          "$p" "$problem" "$p" > "/tmp/kb/profile_$p.yaml"
        python3 benchmarks/probes/block_profile.py "/tmp/kb/profile_$p.yaml" "/tmp/kb/profile-$p" --ops "${PROFILE_OPS:-block}" --top "${PROFILE_TOP:-30}" \
          measure=quick measure.processes=3 2>&1 | tee "/tmp/batch/block-profile-$p.md"
      done ;;
    warm-start)
      # A compiled candidate's first call in fresh processes, its cache warm, with and without
      # torch.compile's stack imported first (benchmarks/compiled_warm_start.py): WARM_STACK (default
      # its own), WARM_SIZES (default its own), WARM_TAG names the files (warm-start<TAG>.{md,json}).
      python3 benchmarks/compiled_warm_start.py --device cuda --warm "${WARM_PROCESSES:-4}" \
        ${WARM_STACK:+--stack "$WARM_STACK"} ${WARM_SIZES:+--sizes "$WARM_SIZES"} \
        --out "/tmp/batch/warm-start${WARM_TAG:-}.json" 2>&1 | tee "/tmp/batch/warm-start${WARM_TAG:-}.md" ;;
    audit-ab)
      # `expkit audit` of the same candidates from .ab-before/ (the snapshot before a change; carry
      # it) and from this tree, alternating, AB_ROUNDS (default 2) rounds (benchmarks/audit_ab.py):
      # the problems AUDIT_AB (default 1,40), their samples AUDIT_AB_SAMPLES (default 0,1: identity
      # and torch.compile), on GPU 0, for at most AUDIT_AB_SECONDS (default 500).
      mkdir -p /tmp/kb && cp -r .kernelbench/KernelBench /tmp/kb/KernelBench
      python3 benchmarks/kernelbench_generation_run.py .kernelbench --level 1 --problems "${AUDIT_AB:-1,40}" \
        --out /tmp/kb/runs/audit-ab > /tmp/batch/audit-ab-generate.log 2>&1
      for f in /tmp/kb/runs/audit-ab/*_kernel.py; do
        s=${f##*_sample_}; s=${s%%_*}
        [[ ",${AUDIT_AB_SAMPLES:-0,1}," == *",$s,"* ]] || rm "$f"
      done
      CUDA_VISIBLE_DEVICES=0 timeout "${AUDIT_AB_SECONDS:-500}" python3 benchmarks/audit_ab.py .ab-before /tmp/kb/runs/audit-ab --out /tmp/batch/audit-ab \
        --rounds "${AB_ROUNDS:-2}" -- --problems /tmp/kb/KernelBench --allow-baseline-ops --timeout 180 \
        2>&1 | tee /tmp/batch/audit-ab.md
      find /tmp/batch/audit-ab -name .cache -type d -prune -exec rm -rf {} + ;;
    kb-ab)
      python3 benchmarks/kernelbench_generation_run.py .kernelbench --level 1 --problems "${KB_AB:-1,40,19}" \
        --out /tmp/kb/runs/ab > /tmp/batch/kb-ab-generate.log 2>&1
      rm -f /tmp/kb/runs/ab/*_sample_[12]_kernel.py
      python3 -c 'import sys; from pathlib import Path; from expkit.suites.audit import kernelbench_candidates as k
k(Path(sys.argv[1]), Path(sys.argv[2]), problems=Path(".kernelbench/KernelBench"), allow_baseline_ops=True)' \
        /tmp/kb/runs/ab /tmp/kb/ab-manifests >> /tmp/batch/kb-ab-generate.log 2>&1
      IFS=, read -ra gpus <<< "${AB_GPUS:-0}"; rm -f /tmp/kb/ab-list-*
      i=0
      for m in /tmp/kb/ab-manifests/*.yaml; do echo "$m" >> "/tmp/kb/ab-list-$((i % ${#gpus[@]}))"; i=$((i + 1)); done
      for g in "${!gpus[@]}"; do
        [ -f "/tmp/kb/ab-list-$g" ] || continue
        ( while read -r m; do
            n=$(basename "$m" .yaml)
            CUDA_VISIBLE_DEVICES=${gpus[$g]} WAYS=true bash benchmarks/cli_ab.sh .ab-before "${AB_ROUNDS:-3}" "$m" measure=quick \
              > "/tmp/batch/kb-ab-$n.md" 2>&1
          done < "/tmp/kb/ab-list-$g" ) &
      done
      wait
      (cd .ab-before && python3 -c 'import expkit, sys; print("before tree:", expkit.__file__)') | tee -a /tmp/batch/kb-ab-generate.log ;;
    examples)
      # Each GPU example into one session folder, then the session report.
      for m in manifests/examples/gpu/*.yaml; do
        n=$(basename "$m" .yaml)
        python3 -m expkit run "$m" --session /tmp/batch/gpu-session --quiet 2>&1 | tee "/tmp/batch/$n.log"
        echo "exit code: ${PIPESTATUS[0]}" | tee -a "/tmp/batch/$n.log"
      done
      python3 -m expkit session /tmp/batch/gpu-session ;;
    suite2)
      # Needs two GPUs: the scaling benchmark, then the GPU examples as one suite over both GPUs.
      python3 benchmarks/suite_scaling.py --n 8 --seconds 6 --gpus 0,1 --out /tmp/batch/scaling 2>&1 | tee /tmp/batch/suite_scaling.log
      python3 -m expkit run manifests/examples/gpu/ cost.provider=runpod --out /tmp/batch/gpu-suite 2>&1 | tee /tmp/batch/gpu-suite.log
      echo "exit code: ${PIPESTATUS[0]}" | tee -a /tmp/batch/gpu-suite.log
      python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_suite.py 2>&1 | tee /tmp/batch/suite_gpu_tests.log ;;
    bench)
      for b in benchmarks/defence_overhead.py; do
        [ -f "$b" ] && python3 "$b" --device cuda --out /tmp/batch 2>&1 | tee "/tmp/batch/$(basename "$b" .py).log"
      done ;;
  esac
done
wait
tail -qn1 /tmp/batch/gpu_tests*.log 2>/dev/null
find /tmp/batch \( -path "/tmp/batch/kb-audit*" -o -path "/tmp/batch/beside-audit*" -o -path "/tmp/batch/audit-ab*" \) -name "*.png" -delete  # the records and result.json files are the evidence
tar -czf "$OUT/batch.tar.gz" -C /tmp/batch .
ls -la "$OUT"
