"""Debug: where chosen worker requests spend their time, inside the workers (cProfile).

A script for the device (or the CPU machine), not a test. Runs ``expkit run MANIFEST
[override ...]`` as a fresh command with a ``sitecustomize`` module first on its path,
which in every Python process of the run (the parent, the fork server, each worker)
wraps ``Server.handle`` so that each request named in OPS is profiled and its stats
written to OUT_DIR. The wrapper is installed before any worker takes its function
snapshot, so the tamper check sees it as the harness's own. Then prints, per op, the
functions with the most cumulative time over every profiled request of that op.

Usage: python scripts/debug_request_profile.py MANIFEST OUT_DIR [OPS] [override ...]
OPS: comma-separated request names (default ``hello,prepare,warm_up``); overrides
default to ``measure=quick``.
"""

from __future__ import annotations

import glob
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

HOOK = '''
import os
if os.environ.get("EXPKIT_DEBUG_PROFILE_OPS"):
    import cProfile, itertools
    from expkit.bench import serve
    _ops = set(os.environ["EXPKIT_DEBUG_PROFILE_OPS"].split(","))
    _dir = os.environ["EXPKIT_DEBUG_PROFILE_DIR"]
    _handle, _n = serve.Server.handle, itertools.count()

    def _profiled(self, msg):
        op = str(msg.get("op"))
        if op not in _ops:
            return _handle(self, msg)
        pr = cProfile.Profile()
        pr.enable()
        try:
            return _handle(self, msg)
        finally:
            pr.disable()
            pr.dump_stats(os.path.join(_dir, f"{op}-{self.side.role}-{os.getpid()}-{next(_n)}.prof"))

    serve.Server.handle = _profiled
'''


def main(argv: list) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    manifest, out = argv[0], Path(argv[1]).resolve()
    rest = argv[2:]
    ops = rest.pop(0) if rest and "=" not in rest[0] else "hello,prepare,warm_up"
    overrides = rest or ["measure=quick"]
    hook = out / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    env = dict(os.environ, EXPKIT_DEBUG_PROFILE_OPS=ops, EXPKIT_DEBUG_PROFILE_DIR=str(out),
               PYTHONPATH=os.pathsep.join([str(hook), str(REPO), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    rc = subprocess.call([sys.executable, "-m", "expkit", "run", manifest, *overrides, "--out", str(out / "run")],
                         env=env)
    print(f"expkit run exit {rc}, {time.perf_counter() - t0:.1f} s\n")
    for op in ops.split(","):
        for role in ("baseline", "candidate"):
            files = sorted(glob.glob(str(out / f"{op}-{role}-*.prof")))
            if not files:
                continue
            st = pstats.Stats(*files, stream=sys.stdout)
            st.files = []  # not one header line per request
            print(f"=== {op}, {role}: {len(files)} requests, {st.total_tt:.3f} s in all")
            st.sort_stats("cumulative").print_stats(25)
    return 0 if rc in (0, 1) else rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
