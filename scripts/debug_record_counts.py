"""Debug: what CUPTI records each kernel-timed block brings, and what collecting them costs (GPU).

A script for the device, not a test. ``scripts/debug_block_split.py`` found a side's worker
spending about 0.25 ms a call more in its sampling span than the same sides in one process,
with the kernel timer only. This runs ``expkit run MANIFEST`` once per variant as a fresh
command with a ``sitecustomize`` module first on its path which, in every process of the
run, wraps the CUPTI recorder's ``stop`` and its buffer callback: each block's stop appends
a line to a log (the process, GPU work records, API records, external correlations, the
seconds the stop took and the seconds spent parsing buffers). Then prints, per variant,
the blocks logged, by how many processes, and the medians per block, and one block's
records counted by kind and API (the middle block the log holds).

    python scripts/debug_record_counts.py MANIFEST OUT_DIR [-- "k=v k=v" ; "k=v" ...]

Base overrides: ``measure=quick measure.max_seconds=2 measure.target_ci=0`` (a pinned budget);
default variants: the defences as shipped, and the same sides in one process
(``defences.isolate=false``).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parent.parent
BASE = ["measure=quick", "measure.max_seconds=2", "measure.target_ci=0"]

HOOK = '''
import os
if os.environ.get("EXPKIT_DEBUG_RECORDS"):
    import time
    from expkit.timing import cupti_recorder as _cr

    _log = os.environ["EXPKIT_DEBUG_RECORDS"]
    _stop, _completed = _cr.CuptiRecorder.stop, _cr.CuptiRecorder._completed

    def _timed_completed(self, activities):
        t0 = time.perf_counter()
        try:
            return _completed(self, activities)
        finally:
            self.__dict__["_dbg_parse"] = self.__dict__.get("_dbg_parse", 0.0) + time.perf_counter() - t0

    def _logged_stop(self):
        raw, api, ext = len(self._raw), len(self._api), len(self._ext)  # before the flush: the early buffers
        t0 = time.perf_counter()
        out = _stop(self)
        took = time.perf_counter() - t0
        parse = self.__dict__.pop("_dbg_parse", 0.0)
        with open(_log, "a") as f:
            f.write(f"{os.getpid()} {len(out.records)} {len(out.tagged)} {raw} {api} {ext} {took:.6f} {parse:.6f}\\n")
        return out

    _parse = _cr.parse
    _kinds = {}

    def _counting_parse(activities, *a, **k):
        activities = list(activities)
        for x in activities:
            key = (int(x.kind), int(getattr(x, "cbid", -1) or -1))
            _kinds[key] = _kinds.get(key, 0) + 1
        return _parse(activities, *a, **k)

    def _logged_kinds(self):
        out = _logged_stop(self)
        top = sorted(_kinds.items(), key=lambda kv: -kv[1])[:12]
        _kinds.clear()
        with open(_log + ".kinds", "a") as f:
            f.write(f"{os.getpid()} " + " ".join(f"{kd}:{cb}={n}" for (kd, cb), n in top) + "\\n")
        return out

    _cr.parse = _counting_parse
    _cr.CuptiRecorder._completed = _timed_completed
    _cr.CuptiRecorder.stop = _logged_kinds
'''


def main(argv: List[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    manifest, out = argv[0], Path(argv[1]).resolve()
    rest = " ".join(argv[argv.index("--") + 1:]) if "--" in argv else "defences.enabled=true;defences.isolate=false"
    variants = [v.split() for v in rest.split(";")]
    hook = out / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    print("| variant | exit | blocks | processes | GPU records | API calls tagged | records before the flush "
          "(work, API, ext) | stop ms | parsing ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, v in enumerate(variants):
        log = out / f"records-{i}.log"
        env = dict(os.environ, EXPKIT_DEBUG_RECORDS=str(log),
                   PYTHONPATH=os.pathsep.join([str(hook), str(REPO), os.environ.get("PYTHONPATH", "")]))
        rc = subprocess.call([sys.executable, "-m", "expkit", "run", manifest, *BASE, *v, "--out", str(out / f"run-{i}"),
                              "--quiet"], env=env)
        rows = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
        med: Dict[int, float] = {}
        for col in range(1, 8):
            vals = [float(r[col]) for r in rows]
            med[col] = statistics.median(vals) if vals else float("nan")
        print(f"| {' '.join(v)} | {rc} | {len(rows)} | {len({r[0] for r in rows})} | {med[1]:.0f} | {med[2]:.0f} | "
              f"{med[3]:.0f}, {med[4]:.0f}, {med[5]:.0f} | {med[6] * 1e3:.2f} | {med[7] * 1e3:.2f} |", flush=True)
        kinds = Path(str(log) + ".kinds")
        if kinds.exists():
            lines = kinds.read_text().splitlines()
            mid = lines[len(lines) // 2] if lines else ""
            print(f"|   one block's records by (kind:cbid), the middle one logged: {_named(mid)} |||||||||")


def _named(line: str) -> str:
    """``kind:cbid=count`` with CUPTI's names where cupti-python has them."""
    try:
        from cupti import cupti
    except Exception:
        return line
    out = []
    for item in line.split()[1:]:
        key, n = item.split("=")
        kd, cb = (int(x) for x in key.split(":"))
        try:
            kind = cupti.ActivityKind(kd).name
        except Exception:
            kind = str(kd)
        name = str(cb)
        for enum in ("RuntimeApiTraceCbid", "DriverApiTraceCbid") if cb >= 0 else ():
            e = getattr(cupti, enum, None)
            if e is not None and kind in ("RUNTIME", "DRIVER") and enum.startswith(kind.title()[:6]):
                try:
                    name = e(cb).name
                except Exception:
                    pass
        out.append(f"{kind}:{name}={n}")
    return " ".join(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
