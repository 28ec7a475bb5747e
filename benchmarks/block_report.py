"""Debug: the CUDA timer's own account of each block, in workers and in one process (GPU).

A script for the device, not a test. ``60f880e:scripts/debug_block_split.py`` found a side's worker
spending about 0.25 ms a call more in its sampling span than the same sides in one process,
with the kernel timer only. The CUDA timer keeps an account of every block
(:class:`expkit.timing.blocks.BlockReport`): the host's time queuing the calls, the holds'
GPU time, the span from the first hold to the last event, the host's envelope around it,
the attempts (a block whose hold did not outlast the queuing runs again) and the
recorder's host time after the block. This runs ``expkit run MANIFEST`` once per variant
and round as a fresh command with a ``sitecustomize`` module first on its path which, in
every process of the run, wraps ``CudaTimer.sample`` and appends each block's account and
the wall of the whole ``sample`` call to a log, with the recorder's ``start``, the block's
first event record (the first CUDA call after the recorder's start), the first tag pushed
and CUPTI's buffer requests, each timed, and on CUPTI's clock the time from the sample's
start to the block's first GPU record and from its last GPU record to the sample's return
(those two edges compare clocks that CUPTI lines up per process: they disagreed between
processes, read them within one). Then prints, per variant and round, the blocks and
processes logged and the medians per block (the queuing per call).

    python benchmarks/block_report.py MANIFEST OUT_DIR [--rounds 2] [-- "k=v k=v" ; "k=v" ...]

Base overrides: ``measure=quick measure.max_seconds=2 measure.target_ci=0`` (a pinned budget);
default variants: the defences as shipped, and the same sides in one process
(``defences.isolate=false``). Variants alternate within a round. A variant's word
``env:NAME=VALUE`` sets an environment variable instead of an override:
``env:EXPKIT_DEBUG_NO_TELEMETRY=1`` runs without the parent's NVML clock log;
``env:EXPKIT_DEBUG_PRETOUCH=1`` runs one tiny kernel and a sync before each block, outside
its envelope, and logs how long that took (``pretouch ms``; 0 without it);
``env:EXPKIT_DEBUG_KINDS_ON=1`` leaves each recorder's activity kinds enabled after its
first start (never disabled between blocks);
``env:EXPKIT_DEBUG_TIMELINE=DIR`` writes the GPU records of each process's blocks 20, 21,
40 and 41 to ``DIR/PID-N.txt`` (kind, tag, start and end ticks, stream), for
``--timeline DIR`` to summarise.
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
FIELDS = ("calls", "chunks", "attempts", "queue_s", "hold_s", "span_s", "envelope_s", "record_s")

HOOK = '''
import os
if os.environ.get("EXPKIT_DEBUG_BLOCKS"):
    import time
    from expkit.timing import cuda_timer as _ct

    _log = os.environ["EXPKIT_DEBUG_BLOCKS"]
    _sample = _ct.CudaTimer.sample
    _pretouch = bool(os.environ.get("EXPKIT_DEBUG_PRETOUCH"))
    _timeline = os.environ.get("EXPKIT_DEBUG_TIMELINE")  # a folder: some blocks' GPU records, each process
    _count = [0]
    from expkit.timing import cupti_recorder as _cr

    _push, _callbacks = _cr.CuptiRecorder.push, _cr._callbacks  # a recorder binds its callbacks when built
    _start = _cr.CuptiRecorder.start
    _marks = {"first_push": 0, "buffers": 0, "buffer_s": 0.0, "start_s": 0.0, "record_s": 0.0, "records": 0}

    _kinds_on = bool(os.environ.get("EXPKIT_DEBUG_KINDS_ON"))

    def _timed_start(self):
        t = time.perf_counter()
        try:
            return _start(self)
        finally:
            _marks["start_s"] = time.perf_counter() - t
            if _kinds_on:  # a debug variant: kinds enabled by the first start, never disabled
                self._enable = self._disable = lambda kind: None

    import torch as _torch

    _record = _torch.cuda.Event.record

    def _timed_record(self, *a, **k):  # the block's first event record (the lead's), timed
        if _marks["records"]:
            return _record(self, *a, **k)
        t = time.perf_counter()
        try:
            return _record(self, *a, **k)
        finally:
            _marks["records"] += 1
            _marks["record_s"] = time.perf_counter() - t

    _torch.cuda.Event.record = _timed_record
    _cr.CuptiRecorder.start = _timed_start

    def _marked_push(self, tag):
        if not _marks["first_push"]:
            _marks["first_push"] = self._timestamp()
        return _push(self, tag)

    def _counted_callbacks(*args, **kwargs):
        requested, completed = _callbacks(*args, **kwargs)

        def counted():
            t = time.perf_counter()
            try:
                return requested()
            finally:
                _marks["buffers"] += 1
                _marks["buffer_s"] += time.perf_counter() - t

        return counted, completed

    _cr.CuptiRecorder.push = _marked_push
    _cr._callbacks = _counted_callbacks

    def _logged_sample(self, fn, number):
        pre = 0.0
        if _pretouch:  # one tiny kernel and a sync before the block, outside its envelope
            import torch

            p0 = time.perf_counter()
            torch.cuda._sleep(1)
            torch.cuda.synchronize()
            pre = time.perf_counter() - p0
        rec = getattr(self, "_recorder", None)
        _marks.update(first_push=0, buffers=0, buffer_s=0.0, start_s=0.0, record_s=0.0, records=0)
        ts0 = rec._timestamp() if rec is not None else 0
        t0 = time.perf_counter()
        out = _sample(self, fn, number)
        wall = time.perf_counter() - t0
        ts1 = rec._timestamp() if rec is not None else 0
        b = self.last_block
        _count[0] += 1
        got = (getattr(self, "last_attribution", None) or {}).get("recorded")
        # On CUPTI's clock: from the sample's start to its block's first GPU record, and from
        # its last GPU record to the sample's return (the recorder's flush inside it).
        starts = [g.start for g in got.records if g.start] if got is not None else []
        ends = [g.end for g in got.records if g.end] if got is not None else []
        first_us = (min(starts) - ts0) / 1e3 if starts and ts0 else 0.0
        last_us = (ts1 - max(ends)) / 1e3 if ends and ts1 else 0.0
        push_us = (_marks["first_push"] - ts0) / 1e3 if _marks["first_push"] and ts0 else 0.0
        if _timeline and got is not None and _count[0] in (20, 21, 40, 41):
            with open(os.path.join(_timeline, f"{os.getpid()}-{_count[0]}.txt"), "w") as f:
                for g in got.records:
                    f.write(f"{g.kind} {g.tag} {g.start} {g.end} {g.stream}\\n")
        if b is not None:
            with open(_log, "a") as f:
                f.write(f"{os.getpid()} {b.calls} {b.chunks} {b.attempts} {b.queue_s:.7f} {b.hold_s:.7f} "
                        f"{b.span_s:.7f} {b.envelope_s:.7f} {b.record_s:.7f} {wall:.7f} {int(b.hold_ok)} "
                        f"{b.source} {pre:.7f} {first_us:.1f} {last_us:.1f} {push_us:.1f} {_marks['buffers']} "
                        f"{_marks['buffer_s'] * 1e6:.1f} {_marks['start_s'] * 1e6:.1f} {_marks['record_s'] * 1e6:.1f}\\n")
        return out

    _ct.CudaTimer.sample = _logged_sample

if os.environ.get("EXPKIT_DEBUG_NO_TELEMETRY"):  # the parent's NVML clock log off (a debug variant)
    from expkit.timing import telemetry as _tel

    _tel.for_gpu = lambda *a, **k: None
'''


def summarise(rows: List[List[str]]) -> Dict[str, float]:
    """Medians per block (the queuing per call), from the hook's log lines."""
    if not rows:
        return {}
    col = {name: i + 1 for i, name in enumerate(FIELDS)}
    wall_i = len(FIELDS) + 1

    def med(f: object) -> float:
        return statistics.median(f(r) for r in rows)  # type: ignore[operator]

    return {
        "calls": med(lambda r: float(r[col["calls"]])),
        "attempts": med(lambda r: float(r[col["attempts"]])),
        "retried": sum(1 for r in rows if int(r[col["attempts"]]) > int(r[col["chunks"]])) / len(rows),
        "queue us a call": med(lambda r: float(r[col["queue_s"]]) / max(1, int(r[col["calls"]])) * 1e6),
        "hold ms": med(lambda r: float(r[col["hold_s"]]) * 1e3),
        "span ms": med(lambda r: float(r[col["span_s"]]) * 1e3),
        "envelope ms": med(lambda r: float(r[col["envelope_s"]]) * 1e3),
        "record ms": med(lambda r: float(r[col["record_s"]]) * 1e3),
        "sample wall ms": med(lambda r: float(r[wall_i]) * 1e3),
        "beyond envelope and record ms": med(lambda r: (float(r[wall_i]) - float(r[col["envelope_s"]])
                                                        - float(r[col["record_s"]])) * 1e3),
        "hold ok": sum(int(r[wall_i + 1]) for r in rows) / len(rows),
        "pretouch ms": med(lambda r: float(r[wall_i + 3]) * 1e3),
        "start to first record us": med(lambda r: float(r[wall_i + 4])),
        "last record to return us": med(lambda r: float(r[wall_i + 5])),
        "start to first push us": med(lambda r: float(r[wall_i + 6])),
        "buffers asked a block": med(lambda r: float(r[wall_i + 7])),
        "buffer callback us": med(lambda r: float(r[wall_i + 8])),
        "recorder start us": med(lambda r: float(r[wall_i + 9])),
        "first event record us": med(lambda r: float(r[wall_i + 10])),
    }


def timeline(folder: Path) -> None:
    """Per block file (one chunk a block: tag 0 the hold, 1 the harness's lead and flushes,
    2 and up the calls): the median GPU time of the harness's records and of the calls'
    records, the median gap between consecutive records after the hold, and the time from
    the hold's end to the last record's end, in us."""
    print("| file | records | harness record us | call record us | gap us | after the hold us |")
    print("|---|---|---|---|---|---|")
    for f in sorted(folder.glob("*.txt")):
        recs = sorted((int(s), int(e), t) for _, t, s, e, _ in (line.split() for line in f.read_text().splitlines()))
        if not recs:
            continue
        harness = [e - s for s, e, t in recs if t == "1"]
        calls = [e - s for s, e, t in recs if t not in ("None", "0", "1")]
        hold_end = max((e for s, e, t in recs if t == "0"), default=recs[0][0])
        after = [r for r in recs if r[0] >= hold_end]
        gaps = [b[0] - a[1] for a, b in zip(after, after[1:])]

        def med(xs: List[int]) -> str:
            return f"{statistics.median(xs) / 1e3:.1f}" if xs else "-"

        print(f"| {f.name} | {len(recs)} | {med(harness)} | {med(calls)} | {med(gaps)} | "
              f"{(max(e for _, e, _ in recs) - hold_end) / 1e3:.1f} |")


def main(argv: List[str]) -> int:
    if argv[:1] == ["--timeline"]:
        timeline(Path(argv[1]))
        return 0
    if len(argv) < 2:
        print(__doc__)
        return 2
    manifest, out = argv[0], Path(argv[1]).resolve()
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 2
    rest = " ".join(argv[argv.index("--") + 1:]) if "--" in argv else "defences.enabled=true;defences.isolate=false"
    variants = [v.split() for v in rest.split(";")]
    hook = out / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    heads = None
    for r in range(1, rounds + 1):
        for i, v in enumerate(variants):
            log = out / f"blocks-{r}-{i}.log"
            env = dict(os.environ, EXPKIT_DEBUG_BLOCKS=str(log),
                       PYTHONPATH=os.pathsep.join([str(hook), str(REPO), os.environ.get("PYTHONPATH", "")]))
            env.update(w[4:].split("=", 1) for w in v if w.startswith("env:"))
            overrides = [w for w in v if not w.startswith("env:")]
            rc = subprocess.call([sys.executable, "-m", "expkit", "run", manifest, *BASE, *overrides, "--out",
                                  str(out / f"run-{r}-{i}"), "--quiet"], env=env)
            rows = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
            got = summarise(rows)
            if heads is None and got:
                heads = list(got)
                print("| round | variant | exit | blocks | processes | " + " | ".join(heads) + " |")
                print("|---|---|---|---|---|" + "---|" * len(heads))
            cells = " | ".join(f"{got[h]:.3g}" for h in heads or ()) if got else "(no blocks logged)"
            print(f"| {r} | {' '.join(v)} | {rc} | {len(rows)} | {len({x[0] for x in rows})} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
