"""KernelBench's own batch evaluation of a generation run on one GPU: the cost ``expkit audit`` is held to.

A script that prints a table, not a test. For every candidate of a run folder in KernelBench's
layout (``level_{L}_problem_{P}_sample_{S}_kernel.py``, as ``kernelbench_generation_run.py``
writes it), it does what KernelBench's ``scripts/eval_from_generations.py`` does with one GPU
(``num_gpu_devices=1``, ``eval_mode=local``):

* a pool of one *spawned* process for each candidate (that script's ``mp.Pool(batch_size)``
  per batch, under ``mp.set_start_method("spawn")``), so each candidate pays for a fresh
  interpreter, torch's import and a CUDA context, as there;
* in it, KernelBench's ``eval_kernel_against_ref`` with that script's settings: 5
  correctness trials, 100 timing trials, ``cuda_event`` timing, fp32, seed 42, and the
  function's own default of timing the reference too (its excessive-speedup check);
* the result awaited for at most ``--timeout`` seconds (that script's 180).

A candidate's ``wall_s`` runs from the pool's start to its result (or its timeout), which is
what that loop spends on it; ``eval_s`` is the ``eval_kernel_against_ref`` call alone. Each
candidate gets its own compile caches (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``
under ``WORK/cache/<candidate>``), as ``expkit audit`` gives each of its candidates, so
neither harness's compile of a ``torch.compile`` candidate is a cache hit for the other.

KernelBench's evaluation code is read from ``KB/src/kernelbench`` (a copy of its
repository's ``src/kernelbench`` in the git-ignored ``.kernelbench/``), loaded as
``kernelbench_reference_eval.load_kernelbench_eval`` loads it (its LLM clients stubbed).

One record per candidate is appended to ``--results`` (JSONL) as it ends, and a table
printed at the end. ``benchmarks/batch_beside.py`` sets these records beside an audit's.

    python3 benchmarks/kernelbench_batch_eval.py .kernelbench RUN_DIR --problems-dir KB_PROBLEMS \\
        --results kb-batch.jsonl [--budget 300] [--timeout 180]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import multiprocessing as mp
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from kernelbench_common import level_dir  # noqa: E402

#: KernelBench's ``scripts/eval_from_generations.py`` defaults (``EvalConfig``).
CORRECT_TRIALS, PERF_TRIALS, TIMEOUT_S, SEED = 5, 100, 180.0, 42

CANDIDATE = re.compile(r"level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


def candidates(run: Path) -> List[Path]:
    """The run's candidate files, by problem then sample."""
    found = [p for p in Path(run).iterdir() if CANDIDATE.search(p.name)]
    return sorted(found, key=lambda p: tuple(int(g) for g in CANDIDATE.search(p.name).groups()))  # type: ignore[union-attr]


def problem_file(problems: Path, level: int, number: int) -> Optional[Path]:
    """``{number}_*.py`` in the level's folder (:func:`kernelbench_common.level_dir`: either
    layout): the reference the candidate was generated for."""
    hits = sorted(level_dir(problems, level).glob(f"{number}_*.py"))
    return hits[0] if hits else None


def _evaluate(kb: str, reference: str, kernel: str, cache: str, build: str) -> Dict[str, Any]:
    """In the spawned process: KernelBench's evaluation of one candidate, as plain data."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
    import torch

    from kernelbench_reference_eval import load_kernelbench_eval

    kbeval, stubbed = load_kernelbench_eval(Path(kb))
    t0 = time.monotonic()
    result = kbeval.eval_kernel_against_ref(
        original_model_src=Path(reference).read_text(), custom_model_src=Path(kernel).read_text(),
        seed_num=SEED, num_correct_trials=CORRECT_TRIALS, num_perf_trials=PERF_TRIALS,
        measure_performance=True, timing_method="cuda_event", verbose=False, build_dir=build,
        device=torch.device("cuda", 0), backend="cuda", precision=torch.float32)
    eval_s = time.monotonic() - t0
    if result is None:
        return {"eval_s": eval_s, "stubbed": stubbed, "none": True}
    md = getattr(result, "metadata", {}) or {}
    return {"eval_s": eval_s, "stubbed": stubbed, "compiled": bool(getattr(result, "compiled", False)),
            "correctness": bool(getattr(result, "correctness", False)),
            "runtime_ms": getattr(result, "runtime", None), "ref_runtime_ms": getattr(result, "ref_runtime", None),
            "metadata": {str(k): str(v)[:300] for k, v in md.items()}}


def outcome(reply: Dict[str, Any]) -> str:
    """KernelBench's own reading of its result: compiled, then correct."""
    if reply.get("none"):
        return "none"
    if not reply.get("compiled"):
        return "compile-fail"
    return "correct" if reply.get("correctness") else "incorrect"


def evaluate(kb: Path, reference: Path, kernel: Path, work: Path, timeout: float) -> Dict[str, Any]:
    """One candidate as the batch loop runs it: a spawned pool of one, awaited ``timeout`` s."""
    cache, build = work / "cache" / kernel.stem, work / "build" / kernel.stem
    t0 = time.monotonic()
    rec: Dict[str, Any]
    with mp.get_context("spawn").Pool(1) as pool:
        pending = pool.apply_async(_evaluate, (str(kb), str(reference), str(kernel), str(cache), str(build)))
        try:
            reply = pending.get(timeout=timeout)
            rec = {"result": outcome(reply), **reply}
        except mp.TimeoutError:
            rec = {"result": "timeout", "error": f"no result in {timeout:g} s"}
        except Exception as e:  # the evaluation raised: that script records it and goes on
            rec = {"result": "error", "error": f"{type(e).__name__}: {e}"[:300]}
    rec["wall_s"] = round(time.monotonic() - t0, 3)
    runtime, ref = rec.get("runtime_ms"), rec.get("ref_runtime_ms")
    rec["speedup"] = ref / runtime if runtime and runtime > 0 and ref and ref > 0 else None
    return rec


def run(kb: Path, run_dir: Path, problems: Path, results: Path, *, timeout: float = TIMEOUT_S,
        budget: Optional[float] = None, device_name: str = "") -> List[Dict[str, Any]]:
    """Every candidate of ``run_dir`` in order, each record appended to ``results`` as it ends;
    none is started once ``budget`` seconds have gone."""
    work = results.parent / (results.stem + "-work")
    t_start, out = time.monotonic(), []
    for kernel in candidates(run_dir):
        if budget is not None and time.monotonic() - t_start >= budget:
            break
        level, number, sample = (int(g) for g in CANDIDATE.search(kernel.name).groups())  # type: ignore[union-attr]
        reference = problem_file(problems, level, number)
        rec: Dict[str, Any] = {"candidate": kernel.stem.removesuffix("_kernel"), "level": level, "problem": number,
                               "sample": sample, "device_name": device_name,
                               "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        if reference is None:
            rec.update(result="no-problem", error=f"no level{level}/{number}_*.py under {problems}", wall_s=0.0)
        else:
            rec.update(evaluate(kb, reference, kernel, work, timeout))
        with results.open("a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
        print(f"{rec['candidate']:<32} {rec['result']:<13} wall {rec['wall_s']:7.1f} s  "
              f"{str(rec.get('error') or '')[:60]}", flush=True)
        out.append(rec)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kb", type=Path, help="the folder holding src/kernelbench (KernelBench's evaluation code)")
    ap.add_argument("run", type=Path, help="the generation run: level_L_problem_P_sample_S_kernel.py files")
    ap.add_argument("--problems-dir", type=Path, required=True, help="the folder holding levelN/ problem files")
    ap.add_argument("--results", type=Path, required=True, help="JSONL, one record per candidate (appended)")
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds a candidate (default: KernelBench's 180)")
    ap.add_argument("--budget", type=float, help="start no candidate after this many seconds")
    args = ap.parse_args(argv)
    if not (args.kb / "src" / "kernelbench" / "eval.py").is_file():
        ap.error(f"{args.kb}: no src/kernelbench/eval.py (copy KernelBench's src/kernelbench there)")
    if not args.run.is_dir() or not candidates(args.run):
        ap.error(f"{args.run}: no level_L_problem_P_sample_S_kernel.py files (kernelbench_generation_run.py writes them)")
    import torch

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    args.results.parent.mkdir(parents=True, exist_ok=True)
    recs = run(args.kb, args.run, args.problems_dir, args.results, timeout=args.timeout, budget=args.budget,
               device_name=name)
    counts: Dict[str, int] = {}
    for r in recs:
        counts[r["result"]] = counts.get(r["result"], 0) + 1
    print(f"{len(recs)} candidates, {sum(r['wall_s'] for r in recs):.1f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
