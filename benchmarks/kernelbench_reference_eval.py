"""KernelBench's own evaluation of the identity solutions, one process for all problems.

The reference point for expkit's cost (issue 19): for each problem selected, it runs
KernelBench's ``eval_kernel_against_ref`` (from the snapshot copied into the git-ignored
``.kernelbench/src/kernelbench/``) on the same identity solution that
``kernelbench_sweep.py`` writes (the problem file with ``class ModelNew(Model): pass``
appended), as KernelBench's scripts call it: 5 correctness trials, 100 timing trials of
each side (``measure_performance=True``, ``timing_method="cuda_event"``,
``check_for_excessive_speedup=True``, so the reference is timed too), fp32, seed 42.
Everything runs in this one process, one problem after another, as KernelBench's own
single-GPU loop does; the wall time of each call is recorded with its result.

Records go to a JSONL file as each problem ends (the same resume/skip rules as the
sweep), and a markdown table is written at the end: problem, KernelBench commit, kind,
result, KernelBench's runtime (mean ms) of the solution and of the reference, their
ratio, wall seconds, peak GPU memory (NVML device-wide, and torch's
``max_memory_allocated``), error. ``benchmarks/harness_cost.py`` compares the walls per
problem with the sweep's.

KernelBench's package ``__init__`` imports its LLM clients (openai, litellm, dotenv);
this script loads ``kernelbench.eval`` without running that ``__init__``, and stands in
for modules that are not installed with inert stubs (pydantic's ``BaseModel`` by a
plain attribute class; the LLM clients by no-ops). The record lists the stubs used.
Nothing is installed.

Time limits: ``--timeout`` per problem (SIGALRM; it takes effect when Python next gets
control, so a single CUDA call is not cut short) and ``--budget`` for the command.
``--fake-cuda`` runs the whole path on the CPU with torch.cuda's calls stood in for
(events timed on the host), only to test this script without a GPU.

Usage::

    python3 benchmarks/kernelbench_reference_eval.py .kernelbench --level 1 --problems 1,19,23,40 \\
        --budget 540 --results .kernelbench/results/kbeval-l1.jsonl --copy-to $OUT
    python3 benchmarks/kernelbench_reference_eval.py .kernelbench --level 1 \\
        --same-as .kernelbench/results/identity-cuda-l1.jsonl     # the problems a sweep ran
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as _dt
import gc
import importlib
import importlib.util
import io
import os
import signal
import sys
import time
import types
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from kernelbench_common import GIB, MemPoller, kb_commit, kind_of, problem_files, rel_name, shrink_source  # noqa: E402
from kernelbench_sweep import (  # noqa: E402
    IDENTITY_TAIL, _interrupt, append_record, latest, load_records, record_key, select_problems,
)


# --- loading KernelBench's eval ----------------------------------------------------------------


class _BaseModelStub:
    """Stands in for ``pydantic.BaseModel`` where pydantic is not installed: class-level
    annotated defaults (deep-copied per instance) overridden by keyword arguments."""

    def __init__(self, **kwargs: Any) -> None:
        for klass in reversed(type(self).__mro__):
            for name in getattr(klass, "__annotations__", {}):
                if name in klass.__dict__:
                    setattr(self, name, copy.deepcopy(klass.__dict__[name]))
        for k, v in kwargs.items():
            setattr(self, k, v)

    def model_dump(self) -> Dict[str, Any]:
        return dict(vars(self))

    dict = model_dump


class _InertModule(types.ModuleType):
    """A missing optional module: every attribute is a callable doing nothing."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def inert(*a: Any, **k: Any) -> None:
            return None

        return inert


def load_kernelbench_eval(kb_root: Path) -> tuple:
    """``kernelbench.eval`` from ``KB/src/kernelbench`` (its package ``__init__`` not run),
    and the names of the modules stubbed for it."""
    pkg_dir = Path(kb_root) / "src" / "kernelbench"
    if not (pkg_dir / "eval.py").is_file():
        raise SystemExit(f"error: {pkg_dir}/eval.py not found (copy KernelBench's src/kernelbench there)")
    stubbed = []
    for name in ("pydantic", "requests", "dotenv", "openai", "litellm", "tqdm", "datasets"):
        if name in sys.modules or importlib.util.find_spec(name) is not None:
            continue
        mod = _InertModule(name)
        if name == "pydantic":
            mod.BaseModel = _BaseModelStub  # type: ignore[attr-defined]
        if name == "tqdm":
            mod.tqdm = lambda it=None, *a, **k: it  # type: ignore[attr-defined]
        sys.modules[name] = mod
        stubbed.append(name)
    if "kernelbench" not in sys.modules:
        pkg = types.ModuleType("kernelbench")
        pkg.__path__ = [str(pkg_dir)]  # type: ignore[attr-defined]
        pkg.__file__ = str(pkg_dir / "__init__.py")
        sys.modules["kernelbench"] = pkg
    kbeval = importlib.import_module("kernelbench.eval")
    return kbeval, stubbed


# --- a CPU stand-in for torch.cuda (tests of this script only) ----------------------------------


class _HostEvent:
    def __init__(self, enable_timing: bool = False, **_: Any) -> None:
        self.t: Optional[float] = None

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: "_HostEvent") -> float:
        return (end.t - self.t) * 1e3  # type: ignore[operator]

    def synchronize(self) -> None:
        pass


@contextlib.contextmanager
def fake_cuda() -> Any:
    import torch

    names = {
        "is_available": lambda: True,
        "current_device": lambda: 0,
        "set_device": lambda d: None,
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
        "reset_peak_memory_stats": lambda device=None: None,
        "get_device_name": lambda device=None: "NVIDIA stand-in (CPU, --fake-cuda)",
        "device": lambda d: contextlib.nullcontext(),
        "Event": _HostEvent,
        "manual_seed": lambda s: None,
    }
    saved = {k: getattr(torch.cuda, k) for k in names}
    try:
        for k, v in names.items():
            setattr(torch.cuda, k, v)
        yield
    finally:
        for k, v in saved.items():
            setattr(torch.cuda, k, v)


# --- one problem -------------------------------------------------------------------------------------


class ProblemTimeout(BaseException):
    """Raised by SIGALRM; a BaseException so KernelBench's ``except Exception`` lets it through."""


def _alarm(signum: int, frame: Any) -> None:
    raise ProblemTimeout()


def _jsonable(obj: Any, limit: int = 400) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v, limit) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v, limit) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj[:limit] if isinstance(obj, str) else obj
    return str(obj)[:limit]


def eval_one(kbeval: Any, path: Path, args: argparse.Namespace, solution: Optional[Path] = None) -> Dict[str, Any]:
    """KernelBench's eval of ``path`` against the identity solution, or against ``solution``."""
    import torch

    src, changed = shrink_source(path, args.shrink)
    if solution is None:
        custom = src + IDENTITY_TAIL
    else:
        # KernelBench exec()s the solution's text in a fresh dict, where __file__ is not
        # defined; a solution that finds files beside itself (calls_reference_*.py) needs it.
        custom = f"__file__ = {str(solution)!r}\n" + solution.read_text()
    device = torch.device("cpu") if args.fake_cuda else torch.device("cuda", 0)
    log = io.StringIO()
    rec: Dict[str, Any] = {"shrunk_globals": changed}
    # KernelBench's cleanup resets torch's peak-memory counter: read it before each reset.
    peaks: List[int] = []
    restore = None
    if not args.fake_cuda:
        torch.cuda.reset_peak_memory_stats(0)
        original_reset = torch.cuda.reset_peak_memory_stats

        def reset_peak_memory_stats(device: Any = None) -> None:
            try:
                peaks.append(torch.cuda.max_memory_allocated(device))
            finally:
                original_reset(device)

        torch.cuda.reset_peak_memory_stats = reset_peak_memory_stats
        restore = original_reset
    t0 = time.monotonic()
    result, error, timed_out = None, "", False
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, args.timeout)
    try:
        with MemPoller(pid=os.getpid()) as mem, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            result = kbeval.eval_kernel_against_ref(
                original_model_src=src, custom_model_src=custom, seed_num=42,
                num_correct_trials=args.correct_trials, num_perf_trials=args.perf_trials,
                measure_performance=True, timing_method="cuda_event", verbose=False,
                build_dir=None, device=device, backend="cuda", precision=torch.float32,
                check_for_excessive_speedup=True)
    except ProblemTimeout:
        timed_out, error = True, f"timeout: no result in {args.timeout:g} s"
    except BaseException as e:  # noqa: BLE001 -- KeyboardInterrupt included: re-raised below
        if isinstance(e, KeyboardInterrupt):
            signal.setitimer(signal.ITIMER_REAL, 0)
            raise
        error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if restore is not None:
            torch.cuda.reset_peak_memory_stats = restore
    wall = time.monotonic() - t0
    rec["wall_s"] = round(wall, 2)
    rec["peak_gpu_gib"] = None if mem.gpu_peak is None else round(mem.gpu_peak / GIB, 3)
    rec["peak_host_gib"] = None if mem.host_peak is None else round(mem.host_peak / GIB, 3)
    if not args.fake_cuda:
        try:
            rec["torch_peak_alloc_gib"] = round(max(peaks + [torch.cuda.max_memory_allocated(0)]) / GIB, 3)
        except Exception:
            rec["torch_peak_alloc_gib"] = None
    logfile = args.work / "logs" / f"{path.parent.name}_{path.stem}{'' if solution is None else '_' + solution.stem}.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    logfile.write_text(log.getvalue())
    rec["log"] = str(logfile)
    rec["traceback"] = "Traceback (most recent call last)" in log.getvalue()
    if result is None:
        rec.update(result="timeout" if timed_out else "error" if error else "none",
                   error=error or "eval_kernel_against_ref returned None (a lock-file compile error, or a failed load)")
        return rec
    md = getattr(result, "metadata", {}) or {}
    runtime, ref = getattr(result, "runtime", -1.0), getattr(result, "ref_runtime", -1.0)
    rec.update({
        "compiled": getattr(result, "compiled", None),
        "correctness": getattr(result, "correctness", None),
        "runtime_ms": runtime if runtime and runtime > 0 else None,
        "ref_runtime_ms": ref if ref and ref > 0 else None,
        "speedup": (ref / runtime) if runtime and runtime > 0 and ref and ref > 0 else None,
        "runtime_stats": _jsonable(getattr(result, "runtime_stats", {})),
        "ref_runtime_stats": _jsonable(getattr(result, "ref_runtime_stats", {})),
        "metadata": _jsonable(md),
    })
    if not rec["compiled"]:
        rec["result"] = "compile-fail"
    elif not rec["correctness"]:
        rec["result"] = "incorrect"
    else:
        rec["result"] = "correct"
    issue = next((md[k] for k in ("runtime_error", "correctness_issue", "compilation_error",
                                  "error_during_performance") if k in md), None)
    rec["error"] = error or ("" if issue is None else str(issue).splitlines()[0][:300])
    if rec["result"] == "correct" and "error_during_performance" in md:
        rec["result"] = "correct, timing failed"
    return rec


# --- output --------------------------------------------------------------------------------------------


def _f(x: Any, d: int = 3) -> str:
    return "" if x is None else f"{x:.{d}f}"


def render(records: Sequence[Dict[str, Any]], args: argparse.Namespace) -> str:
    rows = sorted(records, key=lambda r: (r.get("level", 0), r.get("number", 0)))
    commits = sorted({r.get("kernelbench_commit", "?") for r in rows})
    counts: Dict[str, int] = {}
    for r in rows:
        counts[r.get("result", "?")] = counts.get(r.get("result", "?"), 0) + 1
    lines = ["# KernelBench's own evaluation of the identity solutions", "",
             f"Written by `benchmarks/kernelbench_reference_eval.py` on {_dt.date.today().isoformat()}: "
             f"`eval_kernel_against_ref` from KernelBench {', '.join(f'`{c}`' for c in commits)}, "
             f"{rows[0].get('correct_trials') if rows else '?'} correctness trials, "
             f"{rows[0].get('perf_trials') if rows else '?'} timing trials of each side, fp32, one process for "
             f"all problems. Device: {', '.join(sorted({str(r.get('device_name')) for r in rows}))}. Results: "
             + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ".", "",
             "`runtime`/`ref ms`: KernelBench's mean of the timing trials (ms), solution and reference; `ratio` =",
             "ref / runtime; `wall s`: the whole `eval_kernel_against_ref` call (input generation on the host,",
             "model builds, checks, timing); `peak GiB`: the GPU's memory in use at its highest less before",
             "(NVML), `torch GiB`: torch's `max_memory_allocated`.", "",
             "| problem | KernelBench commit | kind | result | runtime ms | ref ms | ratio | wall s | peak GiB | torch GiB | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        err = str(r.get("error") or "").replace("|", "/").replace("\n", " ")[:200]
        lines.append(f"| {r['problem']} | {str(r.get('kernelbench_commit', ''))[:7]} | {r.get('kind', '')} | "
                     f"{r.get('result', '')} | {_f(r.get('runtime_ms'), 4)} | {_f(r.get('ref_runtime_ms'), 4)} | "
                     f"{_f(r.get('speedup'))} | {_f(r.get('wall_s'), 1)} | {_f(r.get('peak_gpu_gib'), 2)} | "
                     f"{_f(r.get('torch_peak_alloc_gib'), 2)} | {err} |")
    return "\n".join(lines) + "\n"


def write_md(args: argparse.Namespace) -> None:
    recs = [r for r in latest(load_records([args.results])).values() if r.get("mode") == "kb-eval"]
    if not recs:
        return
    text = render(recs, args)
    for target in [args.results.with_suffix(".md"), *[p.with_suffix(".md") for p in args.copy_results]]:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def print_table(records: Sequence[Dict[str, Any]]) -> None:
    print()
    print(f"{'problem':<62} {'result':<14} {'runtime':>9} {'ref ms':>9} {'ratio':>6} {'wall':>6} {'peakGiB':>7} error")
    for r in sorted(records, key=lambda r: (r.get("level", 0), r.get("number", 0))):
        print(f"{r['problem'][:62]:<62} {r.get('result', ''):<14} {_f(r.get('runtime_ms'), 3):>9} "
              f"{_f(r.get('ref_runtime_ms'), 3):>9} {_f(r.get('speedup'), 3):>6} {_f(r.get('wall_s'), 1):>6} "
              f"{_f(r.get('peak_gpu_gib'), 2):>7} {str(r.get('error') or '')[:60]}")


def wrong_main(args: argparse.Namespace) -> int:
    """KernelBench's eval on each wrong solution: does its own check catch the bug?"""
    import re
    import shutil

    import torch
    import yaml

    if not args.fake_cuda and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device (--fake-cuda tests this script on CPU)")
    kbeval, stubbed = load_kernelbench_eval(args.kb)
    commit = kb_commit(args.kb)
    device_tag = "fakecuda" if args.fake_cuda else "cuda"
    device_name = "CPU (--fake-cuda)" if args.fake_cuda else torch.cuda.get_device_name(0)
    done = latest(load_records([args.results]))
    manifests = sorted(Path(args.wrong_dir).glob("*.yaml"))
    if args.problems:
        manifests = [m for m in manifests if any(w.strip() in m.stem for w in args.problems.split(","))]
    t_start = time.monotonic()
    cm = fake_cuda() if args.fake_cuda else contextlib.nullcontext()
    try:
        with cm:
            for i, mpath in enumerate(manifests):
                data = yaml.safe_load(mpath.read_text())
                kb = data["kernelbench"]
                parts = Path(kb["problem"]).parts
                level = int(next(s for s in parts if re.fullmatch(r"level\d+", s))[5:])
                problem = next((q for q in problem_files(args.kb, level) if q.name == parts[-1]), None)
                rec = {"mode": "kb-eval-wrong", "device": device_tag, "shrink": args.shrink,
                       "problem": f"level{level}/{parts[-1]}", "manifest_name": mpath.stem, "level": level,
                       "kind": kind_of(Path(parts[-1])), "kernelbench_commit": commit, "device_name": device_name,
                       "correct_trials": args.correct_trials, "perf_trials": args.perf_trials,
                       "stubbed_modules": stubbed, "date": _dt.datetime.now().isoformat(timespec="seconds")}
                if record_key(rec) in done and not args.redo:
                    continue
                if time.monotonic() - t_start + args.timeout + 5 > args.budget:
                    print(f"budget: {len(manifests) - i} left for a later command", flush=True)
                    break
                if problem is None:
                    rec.update(result="no-problem", error=f"{rec['problem']} not under {args.kb}")
                else:
                    d = args.work / "wrong" / mpath.stem
                    d.mkdir(parents=True, exist_ok=True)
                    sol = d / Path(kb["solution"]).name
                    shutil.copy2((mpath.parent / kb["solution"]).resolve(), sol)
                    (d / problem.name).write_text(shrink_source(problem, args.shrink)[0])
                    rec.update(eval_one(kbeval, problem, args, solution=sol))
                append_record([args.results, *args.copy_results], rec)
                print(f"{mpath.stem:<28} {rec['problem'][:50]:<50} {rec.get('result', ''):<14} "
                      f"wall={_f(rec.get('wall_s'), 1)}s {str(rec.get('error') or '')[:70]}", flush=True)
                gc.collect()
                if not args.fake_cuda:
                    torch.cuda.empty_cache()
    except KeyboardInterrupt:
        print("interrupted: finished problems are in the results file", file=sys.stderr)
    recs = [r for r in latest(load_records([args.results])).values() if r.get("mode") == "kb-eval-wrong"]
    lines = ["# KernelBench's own evaluation of expkit's wrong solutions", "",
             f"`eval_kernel_against_ref` from KernelBench `{commit}`, {args.correct_trials} correctness trials, "
             f"{args.perf_trials} timing trials; device {device_name}. `correct` means KernelBench's check passed "
             "a solution that is wrong.", "",
             "| manifest | problem | result | wall s | error |", "|---|---|---|---|---|"]
    print()
    for r in sorted(recs, key=lambda r: r["manifest_name"]):
        err = str(r.get("error") or "").replace("|", "/")[:160]
        lines.append(f"| {r['manifest_name']} | {r['problem']} | {r.get('result', '')} | {_f(r.get('wall_s'), 1)} | {err} |")
        print(f"{r['manifest_name']:<28} {r['problem'][:50]:<50} {r.get('result', ''):<14} "
              f"{_f(r.get('wall_s'), 1):>6} {err[:60]}")
    text = "\n".join(lines) + "\n"
    for target in [args.results.with_suffix(".md"), *[p.with_suffix(".md") for p in args.copy_results]]:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    print(f"results: {args.results}  table: {args.results.with_suffix('.md')}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kb", type=Path, help="the KernelBench folder (.kernelbench: KernelBench/levelN/, src/kernelbench/)")
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--select", choices=("all", "kinds"), default="all")
    ap.add_argument("--per-kind", type=int, default=4)
    ap.add_argument("--problems", default=None, help="comma-separated numbers or names")
    ap.add_argument("--order", choices=("number", "small-first"), default="number")
    ap.add_argument("--max-input-gib", type=float, default=None)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--same-as", type=Path, default=None,
                    help="run the problems of this sweep results JSONL (its level's identity records)")
    ap.add_argument("--correct-trials", type=int, default=5)
    ap.add_argument("--perf-trials", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=180.0, help="per problem, s (default 180)")
    ap.add_argument("--budget", type=float, default=float("inf"), help="stop starting problems past this, s")
    ap.add_argument("--shrink", type=int, default=1)
    ap.add_argument("--results", type=Path, default=None)
    ap.add_argument("--copy-to", type=Path, default=None, help="default $OUT if set")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--redo", action="store_true")
    ap.add_argument("--fake-cuda", action="store_true", help="CPU stand-in for torch.cuda: tests this script only")
    ap.add_argument("--wrong", action="store_true",
                    help="evaluate the wrong solutions of manifests/kernelbench-wrong instead (does KernelBench catch them?)")
    ap.add_argument("--wrong-dir", type=Path, default=HERE.parent / "manifests" / "kernelbench-wrong")
    args = ap.parse_args(argv)

    args.kb = args.kb.resolve()
    device_tag = "fakecuda" if args.fake_cuda else "cuda"
    if args.results is None:
        args.results = args.kb / "results" / (f"kbeval-{device_tag}" + (f"-shrink{args.shrink}" if args.shrink != 1
                                                                         else "")
                                              + ("-wrong.jsonl" if args.wrong else f"-l{args.level}.jsonl"))
    args.results = args.results.resolve()
    args.work = (args.work or args.results.parent / (args.results.stem + "-work")).resolve()
    copy_dir = args.copy_to if args.copy_to is not None else (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    args.copy_results = [copy_dir.resolve() / args.results.name] if copy_dir is not None else []
    if args.copy_results and args.results.is_file() and not args.copy_results[0].exists():
        args.copy_results[0].parent.mkdir(parents=True, exist_ok=True)
        args.copy_results[0].write_bytes(args.results.read_bytes())
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)

    if args.wrong:
        return wrong_main(args)
    if args.same_as is not None:
        names = [r["problem"] for r in load_records([args.same_as])
                 if r.get("mode") == "identity" and r.get("level") == args.level]
        args.problems = ",".join(dict.fromkeys(n.split("/")[-1] for n in names)) or None
        if not args.problems:
            raise SystemExit(f"error: --same-as {args.same_as}: no level-{args.level} identity records")
    problems = select_problems(args)

    import torch

    if not args.fake_cuda and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device (KernelBench's eval needs one; --fake-cuda tests this script on CPU)")
    kbeval, stubbed = load_kernelbench_eval(args.kb)
    commit = kb_commit(args.kb)
    done = latest(load_records([args.results]))
    base_key = {"mode": "kb-eval", "device": device_tag, "shrink": args.shrink}
    todo = [p for p in problems if args.redo or record_key({**base_key, "problem": rel_name(p)}) not in done]
    print(f"KernelBench eval, level {args.level}: {len(problems)} selected, {len(problems) - len(todo)} already "
          f"recorded, {len(todo)} to run; stubbed modules: {', '.join(stubbed) or 'none'}", flush=True)
    device_name = "CPU (--fake-cuda)" if args.fake_cuda else torch.cuda.get_device_name(0)
    t_start = time.monotonic()
    cm = fake_cuda() if args.fake_cuda else contextlib.nullcontext()
    try:
        with cm:
            for i, p in enumerate(todo):
                elapsed = time.monotonic() - t_start
                if elapsed + args.timeout + 5 > args.budget:
                    print(f"budget: {elapsed:.0f} s used of {args.budget:g} s; {len(todo) - i} left for a later "
                          f"command (it resumes from {args.results})", flush=True)
                    break
                rec = {**base_key, "problem": rel_name(p), "level": args.level,
                       "number": int(p.name.split("_")[0]) if p.name.split("_")[0].isdigit() else 0,
                       "kind": kind_of(p), "kernelbench_commit": commit, "device_name": device_name,
                       "correct_trials": args.correct_trials, "perf_trials": args.perf_trials,
                       "timeout_s": args.timeout, "stubbed_modules": stubbed,
                       "date": _dt.datetime.now().isoformat(timespec="seconds")}
                rec.update(eval_one(kbeval, p, args))
                append_record([args.results, *args.copy_results], rec)
                print(f"{rec['problem'][:62]:<62} {rec.get('result', ''):<14} ratio={_f(rec.get('speedup'))} "
                      f"wall={_f(rec.get('wall_s'), 1)}s peak={_f(rec.get('peak_gpu_gib'), 2)}GiB "
                      f"{str(rec.get('error') or '')[:80]}", flush=True)
                write_md(args)
                gc.collect()
                if not args.fake_cuda:
                    torch.cuda.empty_cache()
    except KeyboardInterrupt:
        print("interrupted: finished problems are in the results file", file=sys.stderr)
    write_md(args)
    recs = [r for r in latest(load_records([args.results])).values() if r.get("mode") == "kb-eval"]
    print_table(recs)
    print(f"results: {args.results}  table: {args.results.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
