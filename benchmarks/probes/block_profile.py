"""Where a worker's requests spend their time, by role: cProfile around each request of ``--ops``.

A probe that prints, not a test. It runs ``expkit run MANIFEST`` as a fresh command with a
``sitecustomize`` module first on the path which, in every worker process of the run, profiles
each ``Server.handle`` of the named requests (``block`` by default) and writes the profile when
the worker ends its case. Then, per role (baseline, candidate), it prints the functions with
the most cumulative seconds over every such request of every process; then, per worker
process in order, each held run of the GPU timer (calls, the hold asked and held, the host's
queuing, the GPU's span, the run's wall). The profiler slows what it watches, both sides alike: read
the roles against each other, not the seconds against a run without it.

    python3 benchmarks/probes/block_profile.py MANIFEST OUT_DIR [--ops block,prepare] [--top 30] [override ...]
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

from expkit.verdict.rules import EXIT_CODES

ROOT = Path(__file__).resolve().parents[2]

HOOK = '''
import os
if os.environ.get("EXPKIT_DEBUG_PROFILE"):
    import cProfile

    _dir = os.environ["EXPKIT_DEBUG_PROFILE"]
    _ops = set(os.environ.get("EXPKIT_DEBUG_PROFILE_OPS", "block").split(","))
    _state = {"pid": None, "prof": None, "role": "?"}

    from expkit.bench.sides import serve as _sv

    _handle, _init = _sv.Server.handle, _sv.Server.__init__

    def _prof():
        if _state["pid"] != os.getpid():  # a forked worker starts its own profile
            _state["pid"], _state["prof"] = os.getpid(), cProfile.Profile()
        return _state["prof"]

    def _s_init(self, side, **kw):
        _init(self, side, **kw)
        _prof()
        _state["role"] = side.role

    def _s_handle(self, msg):
        op = msg.get("op")
        if op not in _ops:
            out = _handle(self, msg)
        else:
            p = _prof()
            p.enable()
            try:
                out = _handle(self, msg)
            finally:
                p.disable()
        if op == "finish_case":  # a worker ends without atexit: its profile goes out here
            _prof().dump_stats(os.path.join(_dir, f"{_state['role']}-{os.getpid()}.pstats"))
        return out

    _sv.Server.__init__, _sv.Server.handle = _s_init, _s_handle

    import json, time
    from expkit.timing import cuda_timer as _ct

    _held = _ct.CudaTimer._run_held

    def _run_held(self, fn, n, hold_s):
        t0 = time.perf_counter()
        obs = _held(self, fn, n, hold_s)
        row = {"role": _state["role"], "n": n, "hold_s": hold_s, "held_s": obs["held_s"],
               "queue_s": obs["queue_s"], "span_s": obs["span_s"], "ok": obs["ok"],
               "wall_s": time.perf_counter() - t0}
        with open(os.path.join(_dir, f"held-{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\\n")
        return obs

    _ct.CudaTimer._run_held = _run_held
'''


def run(manifest: Path, out: Path, ops: str, overrides: List[str]) -> Path:
    hook, profiles = out / "hook", out / "profiles"
    hook.mkdir(parents=True, exist_ok=True)
    profiles.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    env = dict(os.environ, EXPKIT_DEBUG_PROFILE=str(profiles), EXPKIT_DEBUG_PROFILE_OPS=ops,
               PYTHONPATH=os.pathsep.join([str(hook), str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, "-m", "expkit", "run", str(manifest), "--out", str(out / "run"),
                           *overrides], env=env, cwd=str(ROOT), text=True, capture_output=True)
    print(f"expkit run: exit code {proc.returncode}")
    if proc.returncode not in EXIT_CODES.values():  # no verdict: the run's own words say why
        print(proc.stdout[-2000:], proc.stderr[-2000:], sep="\n")
    return profiles


def report(profiles: Path, top: int) -> None:
    by_role: Dict[str, List[Path]] = {}
    for f in sorted(profiles.glob("*.pstats")):
        by_role.setdefault(f.name.split("-")[0], []).append(f)
    for role, files in sorted(by_role.items()):
        stats = pstats.Stats(*[str(f) for f in files])
        print(f"\n## {role}: {len(files)} worker process(es), cumulative seconds under the profiler\n")
        print("| function | calls | own s | cumulative s |\n|---|---:|---:|---:|")
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][3])[:top]  # type: ignore[attr-defined]
        for (file, line, name), (_, calls, own, cum, _) in rows:
            where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
            print(f"| {name} ({where}) | {calls} | {own:.3f} | {cum:.3f} |")


def held_runs(profiles: Path) -> None:
    """Each held run of the GPU timer (a hold spin, then the calls), in order, per process."""
    for f in sorted(profiles.glob("held-*.jsonl")):
        runs = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        if not runs:
            continue
        print(f"\n{runs[0]['role']} {f.stem}: n, hold asked (ms), held (ms), queued (ms), span (ms), wall (ms), ok")
        for r in runs:
            print(f"  {r['n']}, {1e3 * r['hold_s']:.1f}, {1e3 * r['held_s']:.1f}, {1e3 * r['queue_s']:.1f}, "
                  f"{1e3 * r['span_s']:.1f}, {1e3 * r['wall_s']:.1f}, {r['ok']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("manifest", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--ops", default="block", help="requests to profile, comma-separated")
    ap.add_argument("--top", type=int, default=30)
    a, overrides = ap.parse_known_args()
    profiles = run(a.manifest.resolve(), a.out.resolve(), a.ops, overrides or ["measure=quick"])
    report(profiles, a.top)
    held_runs(profiles)


if __name__ == "__main__":
    main()
