"""Run KernelBench's own problem files through expkit, each with its reference as the candidate.

Issue 17 asks for KernelBench's level-1/2/3 problems, at their original sizes on a GPU,
with zero false alarms; issue 19 for the harness to cope with their sizes. This script
is the tool for both: for every problem selected it

1. copies the problem file into a work folder (``--shrink F`` divides its size globals by
   F first, for a CPU smoke test) and writes beside it an **identity solution**: the same
   file with ``class ModelNew(Model): pass`` appended, so the candidate *is* the reference;
2. writes the manifests with ``expkit import kernelbench`` (one call for all), claim 1.0
   with tolerance 0.05, then appends ``expect: {forbid_baseline: false}`` to each (the
   importer has no option for it; see the comment written into the manifest);
3. runs ``python -m expkit run MANIFEST measure=quick --out RUNDIR --json`` as a child
   process with a wall-time limit per problem (``--timeout``, default 90 s; the whole
   process group is killed past it), and records the verdict, exit code, speedup and
   interval, wall seconds, peak GPU memory (NVML, the whole device, polled from a thread
   of this process), peak host memory (proportional set size) of expkit's process tree, whether stderr holds a
   Python traceback, and a one-line error.

Every problem's record is appended to a JSONL file as soon as it finishes, so a command
killed at its limit loses nothing; a second run skips what the file already holds
(``--redo`` to run them again, ``--retry-failed`` for those without a verdict). At the
end (and after each problem) it writes a markdown table and prints a short one.

``--wrong`` runs the wrong solutions under ``manifests/kernelbench-wrong/`` instead:
each manifest there names its problem as ``../../.kernelbench/KernelBench/levelN/X.py``
(runnable as it is from a checkout holding ``.kernelbench/``); the sweep rewrites that
path onto the KernelBench folder given (shrunk with ``--shrink``), sets ``device``, and
records whether the verdict and its reasons are what the manifest's
``# expect-verdict:`` and ``# expect-reason:`` comment lines say.

Examples::

    # CPU smoke test on five small level-1 problems, sizes divided by 64
    python benchmarks/kernelbench_sweep.py .kernelbench --level 1 --problems 1,19,23,40,89 \\
        --device cpu --shrink 64 --results /tmp/kb/smoke.jsonl
    # GPU: every kind of level 1, 4 problems each, smallest first, 9 minutes at most
    python3 benchmarks/kernelbench_sweep.py .kernelbench --level 1 --select kinds --per-kind 4 \\
        --budget 540 --results .kernelbench/results/l1.jsonl --copy-to $OUT
    # the wrong solutions
    python3 benchmarks/kernelbench_sweep.py .kernelbench --wrong --results .kernelbench/results/wrong.jsonl

Our own code: nothing in it is KernelBench's. The problem files are read from the
git-ignored folder given as the first argument and copied into ``--work`` only.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from kernelbench_common import (  # noqa: E402
    GIB, KINDS, MemPoller, import_problem, kb_commit, kind_of, meta_sizes, problem_files, rel_name,
    shrink_source,
)

WRONG_DIR = REPO / "manifests" / "kernelbench-wrong"

IDENTITY_TAIL = '''

# --- added by benchmarks/kernelbench_sweep.py -------------------------------------------
# Identity solution: everything above is the problem file, unchanged; ModelNew is its
# Model. The candidate is the reference, so a working harness says `supported` at a
# claimed 1.0x (tolerance 0.05): this tests the harness, not a kernel.
class ModelNew(Model):
    """The reference Model itself."""
'''

EXPECT_BLOCK = '''
# Added by benchmarks/kernelbench_sweep.py. The candidate here is the reference itself (an
# identity solution): this run tests the harness at KernelBench's own sizes, and the
# expected verdict is `supported` at 1.0x. expect.forbid_baseline (on by default) would,
# correctly, flag a candidate that runs the baseline's own ops, and an identity candidate
# runs nothing else, so it is switched off for this purpose only.
expect:
  forbid_baseline: false
'''


# --- records --------------------------------------------------------------------------


def load_records(paths: Sequence[Path]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for p in paths:
        if not p or not Path(p).is_file():
            continue
        for line in Path(p).read_text().splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a kill
    return out


def record_key(r: Dict[str, Any]) -> str:
    return f"{r.get('mode')}|{r.get('device')}|{r.get('shrink')}|{r.get('problem')}|{r.get('manifest_name', '')}"


def latest(records: Sequence[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for r in records:
        out[record_key(r)] = r
    return out


def append_record(paths: Sequence[Path], rec: Dict[str, Any]) -> None:
    line = json.dumps(rec, default=str) + "\n"
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


# --- child process ------------------------------------------------------------------------


EXPKIT_PATH: Optional[Path] = None  # --expkit-path: a folder holding the expkit package to run


def child_env() -> Dict[str, str]:
    env = dict(os.environ)
    first = [str(EXPKIT_PATH)] if EXPKIT_PATH is not None else []
    env["PYTHONPATH"] = os.pathsep.join([p for p in (*first, env.get("PYTHONPATH", ""), str(REPO)) if p])
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("MPLBACKEND", "Agg")
    return env


def run_child(cmd: Sequence[str], *, timeout: float, stdout_path: Path, stderr_path: Path,
              cwd: Path) -> Dict[str, Any]:
    """Run ``cmd`` in its own process group; kill the group past ``timeout`` seconds."""
    t0 = time.monotonic()
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, cwd=str(cwd), env=child_env(),
                                start_new_session=True)
        timed_out = False
        with MemPoller(pid=proc.pid) as mem:
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
                rc = proc.returncode
            except KeyboardInterrupt:
                _kill_group(proc)
                raise
    return {"rc": rc, "timed_out": timed_out, "wall_s": round(time.monotonic() - t0, 2),
            "peak_gpu_bytes": mem.gpu_peak, "peak_host_bytes": mem.host_peak}


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM then SIGKILL to the process group this script started for ``proc``."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            # the group may outlive its leader (a worker): SIGKILL it regardless
            if sig == signal.SIGTERM:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break
        except subprocess.TimeoutExpired:
            continue


def wait_gpu_idle(limit: float = 15.0, slack: int = 512 << 20) -> None:
    """After a run, wait (up to ``limit`` s) until the device's memory is back near where it was."""
    poller = MemPoller()
    start = getattr(wait_gpu_idle, "base", None)
    if start is None:
        wait_gpu_idle.base = poller.gpu_used()  # type: ignore[attr-defined]
        return
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        used = poller.gpu_used()
        if used is None or used <= start + slack:
            return
        time.sleep(0.25)


def expkit_revision() -> str:
    """The git commit of the expkit that runs (``+dirty`` if expkit/ has uncommitted changes)."""
    root = EXPKIT_PATH if EXPKIT_PATH is not None else REPO
    for name in ("REV", "COMMIT"):  # COMMIT: scripts/device_session.sh's snapshot of HEAD (no .git there)
        rev_file = Path(root) / name
        if rev_file.is_file():
            return rev_file.read_text().strip()[:12] + f" ({root})"
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=20).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "expkit", "conf"],
                               capture_output=True, text=True, timeout=20).stdout.strip()
        return (rev or "unknown") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def one_line_error(stdout: str, stderr: str, result: Optional[Dict[str, Any]], rc: Optional[int],
                   timed_out: bool, timeout: float) -> str:
    if timed_out:
        return f"timeout: no verdict in {timeout:g} s (process group killed)"
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    if "Traceback (most recent call last)" in stderr:
        exc = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt|Exit)\b.*", ln)]
        return (exc[-1] if exc else lines[-1])[:300]
    if result is None:
        err = [ln for ln in lines if ln.startswith("error")]
        if err:
            return err[-1][:300]
        if lines:
            return lines[-1][:300]
        return f"no result (exit {rc})"
    if result.get("verdict") not in ("supported",) and result.get("reasons"):
        return str(result["reasons"][0])[:300]
    return ""


def parse_result(stdout: str, run_dir: Path) -> Optional[Dict[str, Any]]:
    try:
        start = stdout.index("{")
        return json.loads(stdout[start:])
    except (ValueError, json.JSONDecodeError):
        pass
    f = run_dir / "result.json"
    if f.is_file():
        try:
            return json.loads(f.read_text())
        except json.JSONDecodeError:
            return None
    return None


def run_manifest(manifest: Path, run_dir: Path, args: argparse.Namespace) -> Dict[str, Any]:
    if run_dir.exists():
        shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    logs = run_dir.parent / (run_dir.name + ".log")
    logs.mkdir(parents=True, exist_ok=True)
    cmd = [args.python, "-m", "expkit", "run", str(manifest), f"measure={args.measure}", *args.override,
           "--out", str(run_dir), "--json"]
    info = run_child(cmd, timeout=args.timeout, stdout_path=logs / "stdout.txt", stderr_path=logs / "stderr.txt",
                     cwd=run_dir.parent)  # not the checkout: `-m` puts the cwd first on sys.path
    stdout = (logs / "stdout.txt").read_text(errors="replace")
    stderr = (logs / "stderr.txt").read_text(errors="replace")
    result = parse_result(stdout, run_dir) if not info["timed_out"] else None
    overall = ((result or {}).get("measured") or {}).get("overall") or {}
    rec: Dict[str, Any] = {
        "verdict": (result or {}).get("verdict") or ("timeout" if info["timed_out"] else "no-result"),
        "exit_code": info["rc"],
        "speedup": overall.get("speedup"),
        "ci_low": overall.get("ci_low"),
        "ci_high": overall.get("ci_high"),
        "wall_s": info["wall_s"],
        "expkit_wall_s": (result or {}).get("wall_seconds"),
        "peak_gpu_gib": None if info["peak_gpu_bytes"] is None else round(info["peak_gpu_bytes"] / GIB, 3),
        "peak_host_gib": None if info["peak_host_bytes"] is None else round(info["peak_host_bytes"] / GIB, 3),
        **_memory_fields(result),
        "traceback": "Traceback (most recent call last)" in stderr,
        "timed_out": info["timed_out"],
        "error": one_line_error(stdout, stderr, result, info["rc"], info["timed_out"], args.timeout),
        "reasons": [str(r)[:400] for r in ((result or {}).get("reasons") or [])[:6]],
        "run_dir": str(run_dir),
        "cmd": " ".join(cmd),
    }
    return rec


def _memory_fields(result: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The run's memory plan's plain-call peak and each worker's largest allocator peak and
    the request it happened in (result.json 4's ``memory.measured``; on the host, the
    resident set)."""
    mem = (result or {}).get("memory") or {}
    out: Dict[str, Any] = {"plain_peak_gib": None if mem.get("plain_peak_bytes") is None
                           else round(mem["plain_peak_bytes"] / GIB, 3), "worker_peaks": None}
    measured = mem.get("measured") or {}
    if measured:
        peaks = {}
        for role, side in measured.items():
            p = (side.get("peaks") or {})
            got = p.get("peak_reserved") or p.get("peak_rss")
            if got:
                peaks[role] = [round(got["bytes"] / GIB, 2), got["request"]]
        out["worker_peaks"] = peaks
    return out


def _worker_peaks(r: Dict[str, Any]) -> str:
    peaks = r.get("worker_peaks") or {}
    return " / ".join(f"{role[0]} {v[0]:.2f} `{v[1]}`" for role, v in sorted(peaks.items()))


# --- identity mode ----------------------------------------------------------------------------


def select_problems(args: argparse.Namespace) -> List[Path]:
    files = problem_files(args.kb, args.level)
    if args.problems:
        wanted = [w.strip() for w in args.problems.split(",") if w.strip()]
        chosen = []
        for w in wanted:
            hits = [p for p in files if (w.isdigit() and p.name.startswith(f"{w}_")) or w in (p.name, p.stem, rel_name(p))]
            if not hits:
                raise SystemExit(f"error: --problems {w}: no level-{args.level} problem of that number or name")
            chosen.extend(h for h in hits if h not in chosen)
        files = chosen
    sizes: Dict[Path, float] = {}
    if args.select == "kinds" or args.order == "small-first" or args.max_input_gib is not None:
        for p in files:
            try:
                m = meta_sizes(import_problem(p, stub_missing=True), forward=False)
                sizes[p] = float((m.get("input_bytes") or 0) + (m.get("param_bytes") or 0))
            except Exception:
                sizes[p] = float("inf")
    if args.max_input_gib is not None:
        files = [p for p in files if sizes[p] <= args.max_input_gib * GIB]
    if args.select == "kinds":
        by_kind: Dict[str, List[Path]] = {}
        for p in files:
            by_kind.setdefault(kind_of(p), []).append(p)
        # Per kind, spread over its sizes: the smallest, the largest, then the rest in between;
        # then round-robin over the kinds, so a command cut short by --budget still covers them all.
        picked: List[List[Path]] = []
        for kind in KINDS:
            group = sorted(by_kind.get(kind, []), key=lambda p: sizes.get(p, 0))
            if not group:
                continue
            picks: List[Path] = []
            order = [group[0], group[-1]] + [group[i] for i in _spread(len(group), args.per_kind)]
            for p in order:
                if p not in picks and len(picks) < args.per_kind:
                    picks.append(p)
            picked.append(picks)
        files = [g[i] for i in range(max((len(g) for g in picked), default=0)) for g in picked if i < len(g)]
    if args.order == "small-first":
        files = sorted(files, key=lambda p: sizes.get(p, 0))
    if args.limit:
        files = files[: args.limit]
    return files


def _spread(n: int, k: int) -> List[int]:
    if k <= 2 or n <= 2:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)}) + list(range(n))


def prepare_identity(problems: Sequence[Path], args: argparse.Namespace) -> Dict[Path, Dict[str, Any]]:
    """Write problem copies and identity solutions, then the manifests; return them per problem."""
    src = args.work / f"level{args.level}" / "src"
    man = args.work / f"level{args.level}" / "manifests"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    man.mkdir(parents=True, exist_ok=True)
    info: Dict[Path, Dict[str, Any]] = {}
    for p in problems:
        text, changed = shrink_source(p, args.shrink)
        (src / p.name).write_text(text)
        (src / f"{p.stem}_identity.py").write_text(text + IDENTITY_TAIL)
        info[p] = {"shrunk": changed, "manifest": man / f"{p.stem}_identity.yaml"}
    cmd = [args.python, "-m", "expkit", "import", "kernelbench", str(src), "--out", str(man),
           "--device", args.device, "--speedup", "1.0", "--tolerance", "0.05", "--overwrite"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), cwd=str(man), timeout=300)
    if proc.returncode != 0:
        print(f"expkit import failed (exit {proc.returncode}):\n{proc.stderr.strip()}", file=sys.stderr)
    for p, d in info.items():
        m: Path = d["manifest"]
        if not m.is_file():
            d["import_error"] = f"expkit import wrote no manifest for {p.name}: {proc.stderr.strip()[-300:]}"
            continue
        text = m.read_text()
        if re.search(r"^expect:", text, re.M):  # a later importer may write its own expect: block
            d["import_error"] = f"{m.name}: the importer wrote an expect: block; merge forbid_baseline: false by hand"
            continue
        m.write_text(text.rstrip("\n") + "\n" + EXPECT_BLOCK)
    return info


def identity_sweep(args: argparse.Namespace) -> List[Dict[str, Any]]:
    problems = select_problems(args)
    if args.dry_run:
        for p in problems:
            print(f"{rel_name(p):<75} {kind_of(p)}")
        print(f"{len(problems)} problems")
        return []
    done = latest(load_records([args.results, *args.prior]))
    commit = kb_commit(args.kb)
    todo = []
    for p in problems:
        key = record_key({"mode": "identity", "device": args.device, "shrink": args.shrink, "problem": rel_name(p)})
        prev = done.get(key)
        if prev is not None and not args.redo and not (args.retry_failed and prev.get("verdict") in
                                                       ("timeout", "no-result", "skipped")):
            continue
        todo.append(p)
    print(f"level {args.level}: {len(problems)} selected, {len(problems) - len(todo)} already recorded, "
          f"{len(todo)} to run (device {args.device}, shrink {args.shrink}, timeout {args.timeout:g} s, "
          f"budget {args.budget:g} s)", flush=True)
    if not todo:
        return [r for r in done.values() if r.get("mode") == "identity"]
    t_start = time.monotonic()
    info = prepare_identity(todo, args)
    wait_gpu_idle()
    for i, p in enumerate(todo):
        elapsed = time.monotonic() - t_start
        if elapsed + args.timeout + 5 > args.budget:
            print(f"budget: {elapsed:.0f} s used of {args.budget:g} s; {len(todo) - i} problems left for a "
                  f"later command (it resumes from {args.results})", flush=True)
            break
        d = info[p]
        base = {"mode": "identity", "problem": rel_name(p), "level": args.level, "kernelbench_commit": commit,
                "kind": kind_of(p), "device": args.device, "shrink": args.shrink, "shrunk_globals": d["shrunk"],
                "measure": args.measure, "timeout_s": args.timeout, "host": os.uname().nodename,
                "expkit_rev": args.expkit_rev,
                "date": _dt.datetime.now().isoformat(timespec="seconds")}
        if "import_error" in d:
            rec = {**base, "verdict": "no-manifest", "exit_code": None, "error": d["import_error"], "wall_s": 0.0}
        else:
            run_dir = args.work / f"level{args.level}" / "runs" / p.stem
            rec = {**base, **run_manifest(d["manifest"], run_dir, args)}
        append_record([args.results, *args.copy_results], rec)
        print(_row_line(rec), flush=True)
        write_markdown(args)
        wait_gpu_idle()
    return [r for r in latest(load_records([args.results, *args.prior])).values() if r.get("mode") == "identity"]


# --- wrong mode --------------------------------------------------------------------------------


def _comment(text: str, key: str) -> Optional[str]:
    m = re.search(rf"^#[ \t]*{re.escape(key)}:[ \t]*(\S.*?)[ \t]*$", text, re.M)
    return m.group(1) if m else None


def wrong_sweep(args: argparse.Namespace) -> List[Dict[str, Any]]:
    import yaml

    manifests = sorted(Path(args.wrong_dir).glob("*.yaml"))
    if args.problems:
        wanted = [w.strip() for w in args.problems.split(",")]
        manifests = [m for m in manifests if any(w in m.stem for w in wanted)]
    done = latest(load_records([args.results, *args.prior]))
    commit = kb_commit(args.kb)
    work = args.work / "wrong"
    work.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    print(f"wrong solutions: {len(manifests)} manifests in {args.wrong_dir} (device {args.device}, shrink "
          f"{args.shrink})", flush=True)
    wait_gpu_idle()
    for i, mpath in enumerate(manifests):
        text = mpath.read_text()
        data = yaml.safe_load(text)
        kb = data.get("kernelbench") or {}
        orig_problem = Path(kb["problem"])
        # Map .../KernelBench/levelN/X.py (or levelN/X.py) onto the folder given.
        parts = orig_problem.parts
        lvl = next((j for j, s in enumerate(parts) if re.fullmatch(r"level\d+", s)), None)
        if lvl is None:
            raise SystemExit(f"error: {mpath}: kernelbench.problem {orig_problem} names no levelN/ folder")
        level = int(parts[lvl][5:])
        problem = next((q for q in problem_files(args.kb, level) if q.name == parts[-1]), None)
        rel = f"level{level}/{parts[-1]}"
        key = record_key({"mode": "wrong", "device": args.device, "shrink": args.shrink, "problem": rel,
                          "manifest_name": mpath.stem})
        if key in done and not args.redo:
            continue
        elapsed = time.monotonic() - t_start
        if elapsed + args.timeout + 5 > args.budget:
            print(f"budget: {elapsed:.0f} s used; {len(manifests) - i} manifests left for a later command", flush=True)
            break
        base = {"mode": "wrong", "problem": rel, "manifest_name": mpath.stem, "manifest": str(mpath.relative_to(REPO))
                if mpath.is_relative_to(REPO) else str(mpath), "level": level, "kernelbench_commit": commit,
                "kind": kind_of(Path(rel)), "device": args.device, "shrink": args.shrink, "measure": args.measure,
                "timeout_s": args.timeout, "expkit_rev": args.expkit_rev, "expect_verdict": _comment(text, "expect-verdict") or "invalid",
                "expect_reason": _comment(text, "expect-reason"), "wrong_how": _comment(text, "wrong"),
                "date": _dt.datetime.now().isoformat(timespec="seconds")}
        if problem is None:
            rec = {**base, "verdict": "no-problem", "error": f"{rel} not under {args.kb}", "wall_s": 0.0}
        else:
            d = work / mpath.stem
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
            ptext, changed = shrink_source(problem, args.shrink)
            (d / problem.name).write_text(ptext)
            sol = (mpath.parent / kb["solution"]).resolve()
            shutil.copy2(sol, d / sol.name)
            data["kernelbench"]["problem"] = str(d / problem.name)
            data["kernelbench"]["solution"] = str(d / sol.name)
            data["device"] = args.device
            (d / mpath.name).write_text(f"# Written by benchmarks/kernelbench_sweep.py --wrong from "
                                        f"{base['manifest']}\n" + yaml.safe_dump(data, sort_keys=False))
            base["shrunk_globals"] = changed
            rec = {**base, **run_manifest(d / mpath.name, d / "run", args)}
            reasons = " ".join(rec.get("reasons") or [])
            rec["caught"] = bool(rec["verdict"] == base["expect_verdict"]
                                 and (not base["expect_reason"] or re.search(base["expect_reason"], reasons)))
        append_record([args.results, *args.copy_results], rec)
        print(_row_line(rec), flush=True)
        write_markdown(args)
        wait_gpu_idle()
    return [r for r in latest(load_records([args.results, *args.prior])).values() if r.get("mode") == "wrong"]


# --- output ---------------------------------------------------------------------------------


def _fmt(x: Any, digits: int = 3) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def _interval(r: Dict[str, Any]) -> str:
    if r.get("ci_low") is None or r.get("ci_high") is None:
        return ""
    return f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]"


def _row_line(r: Dict[str, Any]) -> str:
    peak = r.get("peak_gpu_gib") if r.get("peak_gpu_gib") is not None else r.get("peak_host_gib")
    extra = f"  caught={r['caught']}" if "caught" in r else ""
    err = (r.get("error") or "")[:110]
    name = r["problem"] if r.get("mode") == "identity" else f"{r['manifest_name']} ({r['problem']})"
    return (f"{name[:60]:<60} {r.get('verdict', ''):<12} rc={r.get('exit_code')} sp={_fmt(r.get('speedup'))} "
            f"{_interval(r)} wall={_fmt(r.get('wall_s'), 1)}s peak={_fmt(peak, 2)}GiB "
            f"tb={'Y' if r.get('traceback') else 'n'}{extra} {err}")


def _cell(s: Any) -> str:
    return str("" if s is None else s).replace("|", "/").replace("\n", " ")


def render_markdown(records: Sequence[Dict[str, Any]], mode: str) -> str:
    rows = sorted(records, key=lambda r: (r.get("level", 0), _num(r.get("problem", "")), r.get("manifest_name", "")))
    commits = sorted({r.get("kernelbench_commit", "?") for r in rows})
    devices = sorted({f"{r.get('device')}" + (f", shrink {r.get('shrink')}" if r.get("shrink", 1) != 1 else "")
                      for r in rows})
    counts: Dict[str, int] = {}
    for r in rows:
        counts[r.get("verdict", "?")] = counts.get(r.get("verdict", "?"), 0) + 1
    lines = [f"# KernelBench through expkit: {'identity solutions' if mode == 'identity' else 'wrong solutions'}",
             "",
             f"Written by `benchmarks/kernelbench_sweep.py{' --wrong' if mode == 'wrong' else ''}` on "
             f"{_dt.date.today().isoformat()}. KernelBench commit(s): {', '.join(f'`{c}`' for c in commits)}. "
             f"Device: {'; '.join(devices)}. Verdicts: "
             + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ".", ""]
    if mode == "identity":
        lines += ["Each problem's reference is its own candidate (identity solution), claim 1.0x, tolerance 0.05,",
                  "`measure=quick`: a working harness says `supported` (or, at worst, `inconclusive`). `wall s` is",
                  "the whole `expkit run` command; `peak GiB` is the GPU's memory in use at its highest less",
                  "before the run (NVML; on CPU, the highest proportional set size of expkit's process tree); `tb`: stderr held a",
                  "Python traceback. `plain GiB`: one plain call's peak (the memory plan's probe); `worker peaks`:",
                  "each worker's allocator peak (b baseline, c candidate; resident set on CPU) and the request it",
                  "happened in (result.json's `memory.measured`).", "",
                  "| problem | KernelBench commit | expkit | kind | verdict | speedup | interval | wall s | peak GiB | plain GiB | worker peaks | rc | tb | error |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            peak = r.get("peak_gpu_gib") if r.get("peak_gpu_gib") is not None else r.get("peak_host_gib")
            lines.append(f"| {r['problem']} | {r.get('kernelbench_commit', '')[:7]} | {str(r.get('expkit_rev', ''))[:7]} | "
                         f"{r.get('kind', '')} | "
                         f"{r.get('verdict', '')} | {_fmt(r.get('speedup'))} | {_interval(r)} | "
                         f"{_fmt(r.get('wall_s'), 1)} | {_fmt(peak, 2)} | {_fmt(r.get('plain_peak_gib'), 2)} | "
                         f"{_worker_peaks(r)} | {_cell(r.get('exit_code'))} | "
                         f"{'Y' if r.get('traceback') else ''} | {_cell(r.get('error'))[:200]} |")
    else:
        caught = sum(1 for r in rows if r.get("caught"))
        lines += [f"Each solution is wrong in one way (`wrong`); caught = the verdict is the expected one and a "
                  f"reason matches the expected pattern. Caught: {caught} of {len(rows)}.", "",
                  "| manifest | problem | KernelBench commit | wrong | verdict | expected | caught | wall s | peak GiB | rc | tb | reasons / error |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            peak = r.get("peak_gpu_gib") if r.get("peak_gpu_gib") is not None else r.get("peak_host_gib")
            why = "; ".join(r.get("reasons") or []) or r.get("error") or ""
            lines.append(f"| {r.get('manifest_name')} | {r['problem']} | {r.get('kernelbench_commit', '')[:7]} | "
                         f"{_cell(r.get('wrong_how'))} | {r.get('verdict', '')} | {r.get('expect_verdict')} "
                         f"(`{_cell(r.get('expect_reason'))}`) | {'yes' if r.get('caught') else 'NO'} | "
                         f"{_fmt(r.get('wall_s'), 1)} | {_fmt(peak, 2)} | {_cell(r.get('exit_code'))} | "
                         f"{'Y' if r.get('traceback') else ''} | {_cell(why)[:300]} |")
    return "\n".join(lines) + "\n"


def _num(problem: str) -> int:
    m = re.search(r"/(\d+)_", problem)
    return int(m.group(1)) if m else 0


def write_markdown(args: argparse.Namespace) -> Optional[Path]:
    mode = "wrong" if args.wrong else "identity"
    recs = [r for r in latest(load_records([args.results, *args.prior])).values() if r.get("mode") == mode]
    if not recs:
        return None
    md = args.md or args.results.with_suffix(".md")
    text = render_markdown(recs, mode)
    for target in [md, *[p.with_suffix(".md") for p in args.copy_results]]:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return md


ARCHIVE_NAMES = ("result.json", "report.md", "env.json", "worker-stderr.txt", "worker-stdout.txt", "stdout.txt",
                 "stderr.txt")


def write_archive(args: argparse.Namespace) -> Optional[Path]:
    """A .tar.gz of each run's small files (result.json, report.md, env.json, the logs; none
    over 2 MiB) beside the copied results, so the run folders come back from a device."""
    import tarfile

    target = args.archive_target
    if target is None or not args.archive:
        return None
    root = args.work
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name in ARCHIVE_NAMES
                   and p.stat().st_size <= 2 << 20)
    if not files:
        return None
    tmp = target.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for f in files:
            tar.add(f, arcname=str(f.relative_to(root.parent)))
    tmp.replace(target)
    return target


def print_summary(records: Sequence[Dict[str, Any]], args: argparse.Namespace) -> None:
    counts: Dict[str, int] = {}
    for r in records:
        counts[r.get("verdict", "?")] = counts.get(r.get("verdict", "?"), 0) + 1
    print()
    print(f"{'problem':<62} {'verdict':<12} {'speedup':>8} {'interval':>18} {'wall':>6} {'peakGiB':>7} tb error")
    for r in sorted(records, key=lambda r: (r.get("level", 0), _num(r.get("problem", "")), r.get("manifest_name", ""))):
        name = r["problem"] if r.get("mode") == "identity" else f"{r.get('manifest_name')}"
        peak = r.get("peak_gpu_gib") if r.get("peak_gpu_gib") is not None else r.get("peak_host_gib")
        flag = "" if "caught" not in r else (" caught" if r["caught"] else " NOT-CAUGHT")
        print(f"{name[:62]:<62} {r.get('verdict', ''):<12} {_fmt(r.get('speedup')):>8} {_interval(r):>18} "
              f"{_fmt(r.get('wall_s'), 1):>6} {_fmt(peak, 2):>7} {'Y ' if r.get('traceback') else '  '}"
              f"{(r.get('error') or '')[:70]}{flag}")
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    md = args.md or args.results.with_suffix(".md")
    print(f"results: {args.results}  table: {md}")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("Examples::")[1])
    ap.add_argument("kb", type=Path, help="the KernelBench folder (.kernelbench: KernelBench/levelN/, COMMIT)")
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--select", choices=("all", "kinds"), default="all",
                    help="all problems of the level (default), or --per-kind of each kind")
    ap.add_argument("--per-kind", type=int, default=4, help="with --select kinds: problems per kind (default 4)")
    ap.add_argument("--problems", default=None,
                    help="comma-separated numbers or names (19,23,40_LayerNorm); with --wrong, manifest name parts")
    ap.add_argument("--order", choices=("number", "small-first"), default="number",
                    help="run order: KernelBench's numbering (default) or smallest inputs+params first")
    ap.add_argument("--max-input-gib", type=float, default=None, help="skip problems with more inputs+params")
    ap.add_argument("--limit", type=int, default=0, help="at most this many problems")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--shrink", type=int, default=1, help="divide size globals by this (CPU smoke tests)")
    ap.add_argument("--timeout", type=float, default=90.0, help="wall-time limit of one expkit run, s (default 90)")
    ap.add_argument("--budget", type=float, default=float("inf"),
                    help="stop starting problems when the next could end past this many seconds (e.g. 540)")
    ap.add_argument("--measure", default="quick", help="the measure preset (default quick)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="more runner settings for every run (repeatable)")
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: beside --results)")
    ap.add_argument("--results", type=Path, default=None,
                    help="JSONL appended per problem (default .kernelbench/results/<mode>-<device>-l<level>.jsonl)")
    ap.add_argument("--prior", type=Path, action="append", default=[],
                    help="earlier JSONL results to skip and to include in the table (repeatable)")
    ap.add_argument("--copy-to", type=Path, default=None,
                    help="also append each record to a JSONL (and write the table) in this folder; default $OUT if set")
    ap.add_argument("--md", type=Path, default=None, help="markdown table (default: the results file's .md)")
    ap.add_argument("--dry-run", action="store_true", help="print the problems selected and stop")
    ap.add_argument("--redo", action="store_true", help="run problems already recorded again")
    ap.add_argument("--retry-failed", action="store_true", help="run again those recorded without a verdict")
    ap.add_argument("--wrong", action="store_true", help="run the wrong solutions (manifests/kernelbench-wrong)")
    ap.add_argument("--wrong-dir", type=Path, default=WRONG_DIR)
    ap.add_argument("--no-archive", dest="archive", action="store_false",
                    help="with --copy-to/$OUT: do not write <results>-runs.tar.gz of the run folders' small files")
    ap.add_argument("--python", default=sys.executable, help="interpreter for expkit (default: this one)")
    ap.add_argument("--expkit-path", type=Path, default=None,
                    help="run the expkit package found in this folder (put first on the children's PYTHONPATH), "
                         "e.g. a `git archive` snapshot; default: this checkout")
    args = ap.parse_args(argv)
    global EXPKIT_PATH
    if args.expkit_path is not None:
        EXPKIT_PATH = args.expkit_path.resolve()
        if not (EXPKIT_PATH / "expkit" / "__init__.py").is_file():
            raise SystemExit(f"error: --expkit-path {EXPKIT_PATH}: no expkit/__init__.py there")
    args.expkit_rev = expkit_revision()
    # Ctrl-C and SIGTERM end the run in progress (its whole process group) and keep the records.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)

    args.kb = args.kb.resolve()
    mode = "wrong" if args.wrong else "identity"
    if args.results is None:
        tag = f"{mode}-{args.device}" + (f"-shrink{args.shrink}" if args.shrink != 1 else "") + \
              ("" if args.wrong else f"-l{args.level}")
        args.results = args.kb / "results" / f"{tag}.jsonl"
    args.results = args.results.resolve()
    if args.work is None:
        args.work = args.results.parent / (args.results.stem + "-work")
    args.work = args.work.resolve()
    copy_dir = args.copy_to if args.copy_to is not None else (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    args.copy_results = [copy_dir.resolve() / args.results.name] if copy_dir is not None else []
    # The run folders' archive goes beside the copy, also when the copy is the results file itself.
    args.archive_target = (copy_dir.resolve() / (args.results.stem + "-runs.tar.gz")) if copy_dir is not None else None
    # A copy that is the results file itself (--copy-to its own folder) would record each problem twice.
    args.copy_results = [p for p in args.copy_results if p != args.results]
    if args.copy_results and args.results.is_file() and not args.copy_results[0].exists():
        # The copy starts with what is already recorded, so it alone is a complete record.
        args.copy_results[0].parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(args.results, args.copy_results[0])
    if args.dry_run and not args.wrong:
        identity_sweep(args)
        return 0
    try:
        records = wrong_sweep(args) if args.wrong else identity_sweep(args)
    except KeyboardInterrupt:
        print("interrupted: finished problems are in the results file", file=sys.stderr)
        records = [r for r in latest(load_records([args.results, *args.prior])).values() if r.get("mode") == mode]
    write_markdown(args)
    archive = write_archive(args)
    print_summary(records, args)
    if archive is not None:
        print(f"run folders (small files): {archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
