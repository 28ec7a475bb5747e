"""Debug: where each timed-block request's time goes, across the parent and both workers.

A script for the device (or the CPU), not a test. ``benchmarks/request_times.py`` found the
parent of the GPU example's defended run waiting 4.1 ms a ``block`` request beyond the
baseline worker's own account of it and 1.4 ms beyond the candidate's; the baseline's
blocks also have a tail inside the CUDA timer's sample. This runs ``expkit run MANIFEST``
as fresh commands with a ``sitecustomize`` module first on the path which, in every process
of the run, logs on the system's monotonic clock (``time.perf_counter``, the same in every
process): the parent's send and receive of each request (per worker role), a worker's
receive (entered, header read, decoded), ``Server.handle`` (the ledger's span) and its
reply's send, each ``CudaTimer.sample`` or ``sample`` of the CPU timer, and every garbage
collection (generation, start, end). Each process writes its own file; nothing of the
harness is changed but the wrappers' own cost (a ``perf_counter`` and a buffered list
append each).

Then, per worker role, for the ``block`` requests: medians and means (ms) of the parent's
send to the worker's header read (delivery and wake-up), the header to the decoded
message, the handle, the handle's end to the reply's send, the send's start to the
parent's receive returning (encoding, delivery, wake-up, decoding: the send's own end is
not used, since a worker that shares a core with the parent is often preempted inside its
write), the collections' time inside each segment in either process, and the named
harness functions' time inside the handle (the ledger and its readings, the checks, the
pin's hand-overs, CUPTI's parsing). Segments are cut by stamps from two processes, so each
is a difference of one clock's readings. ``--per-process`` prints medians per worker
process: its role, whether it served the preflight, the synchronise after each sample,
the ledger's stop, the handle, and the CPUs its main thread ran on.

    python benchmarks/request_split.py MANIFEST OUT_DIR [--rounds 1] [override ...]
    python benchmarks/request_split.py --per-process OUT_DIR/logs-1

Base overrides: ``measure=quick measure.max_seconds=2 measure.target_ci=0`` (a pinned
budget). Debug variants, by environment variable:

* ``EXPKIT_DEBUG_SWITCH=S``: every process's GIL switch interval S seconds (Python's 0.005);
* ``EXPKIT_DEBUG_SYNC_LEDGER=1``: the device synchronised (timed) before each ledger reading;
* ``EXPKIT_DEBUG_SYNC_SAMPLE=1``: the same after each sample of the timer (``sync after
  sample``; with it, the ``cpu`` rows);
* ``EXPKIT_DEBUG_KINDS_OFF=1``: CUPTI's activity kinds disabled after every block;
* ``EXPKIT_DEBUG_SCHED=F``: each worker's primary CUDA context's scheduling flags set to F
  before the context exists (2 yield, 4 blocking sync; CUDA's default spins);
* ``EXPKIT_DEBUG_PREALLOC=N``: CUPTI's pre-allocated device buffers set to N at each
  interpreter's start (it hung a GPU run: ``evidence/harness-cost/gpu-request-wait``);
* ``EXPKIT_DEBUG_PROFILER_FIRST=N``: in each GPU worker before its first case, a
  torch.profiler session (CUDA activity) of N tiny kernels; ``=capture``: one tiny kernel
  through the preflight's own ``checks.recording.capture`` (CPU and CUDA activity, shapes,
  memory); ``=float64``: a float64 product and sum over 64M elements, then ``empty_cache``.

CUPTI's buffers are counted by record kind as they are parsed (``cupti`` rows), and each
process's CUPTI device-buffer attributes logged at its first sample (``cupti_attrs``).
"""

from __future__ import annotations

import bisect
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

REPO = Path(__file__).resolve().parent.parent
BASE = ["measure=quick", "measure.max_seconds=2", "measure.target_ci=0"]

HOOK = '''
import os
if os.environ.get("EXPKIT_DEBUG_REQUESTS"):
    import atexit, gc, json, time

    _dir = os.environ["EXPKIT_DEBUG_REQUESTS"]
    if os.environ.get("EXPKIT_DEBUG_SWITCH"):  # a debug variant: the interpreter's GIL switch interval, s
        import sys

        sys.setswitchinterval(float(os.environ["EXPKIT_DEBUG_SWITCH"]))
    _pc = time.perf_counter
    _log = {"pid": None, "rows": []}

    def _rows():
        if _log["pid"] != os.getpid():  # a forked process starts its own log
            _log["pid"], _log["rows"] = os.getpid(), []
        return _log["rows"]

    def _flush():
        rows = _rows()
        if rows:
            with open(os.path.join(_dir, f"{os.getpid()}.jsonl"), "a") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\\n")
            rows.clear()

    atexit.register(_flush)
    _gc_t = [0.0]

    def _gc(phase, info):
        if phase == "start":
            _gc_t[0] = _pc()
        else:
            _rows().append(["gc", info["generation"], _gc_t[0], _pc()])

    gc.callbacks.append(_gc)

    from expkit.bench.processes import channel as _ch
    from expkit.bench.sides import endpoint as _ep, serve as _sv

    _recv, _send = _ch.Channel.recv, _ch.Channel.send
    _read_exact = _ch.read_exact
    _marks = {}

    def _marked_read_exact(fd, n, deadline, alive):
        out = _read_exact(fd, n, deadline, alive)
        _marks.setdefault(fd, _pc())  # the first read of a message: its header
        return out

    _ch.read_exact = _marked_read_exact

    def _logged_recv(self, *a, **k):
        t0 = _pc()
        _marks.pop(self._r, None)
        msg = _recv(self, *a, **k)
        _rows().append(["recv", self._r, msg.get("op") if isinstance(msg, dict) else None, t0,
                        _marks.pop(self._r, t0), _pc()])
        return msg

    def _logged_send(self, obj):
        t0 = _pc()
        _send(self, obj)
        _rows().append(["send", self._w, obj.get("op") if isinstance(obj, dict) else None, t0, _pc()])

    _ch.Channel.recv, _ch.Channel.send = _logged_recv, _logged_send

    _ep_send, _ep_receive = _ep.WorkerEndpoint.send, _ep.WorkerEndpoint.receive

    def _p_send(self, op, **payload):
        t0 = _pc()
        try:
            return _ep_send(self, op, **payload)
        finally:
            _rows().append(["p_send", self.role, op, t0, _pc()])

    def _p_receive(self):
        t0 = _pc()
        try:
            return _ep_receive(self)
        finally:
            _rows().append(["p_recv", self.role, None, t0, _pc()])

    _ep.WorkerEndpoint.send, _ep.WorkerEndpoint.receive = _p_send, _p_receive

    _handle, _init = _sv.Server.handle, _sv.Server.__init__

    def _s_init(self, side, **kw):
        _init(self, side, **kw)
        _rows().append(["role", side.role])

    def _s_handle(self, msg):
        t0 = _pc()
        try:
            return _handle(self, msg)
        finally:
            t1 = _pc()
            rows = _rows()
            rows.append(["handle", msg.get("op"), t0, t1])
            if msg.get("op") == "finish_case":  # a worker ends without atexit: its rows go out here
                import threading

                tasks = []
                for tid in os.listdir("/proc/self/task"):
                    try:
                        with open(f"/proc/self/task/{tid}/stat") as f:
                            st = f.read()
                        comm = st[st.index("(") + 1:st.rindex(")")]
                        fields = st[st.rindex(")") + 2:].split()
                        tasks.append([int(tid), comm, int(fields[11]), int(fields[12])])  # utime, stime (ticks)
                    except (OSError, ValueError, IndexError):
                        pass
                rows.append(["threads", [t.name for t in threading.enumerate()], tasks])
                _flush()

    _sv.Server.__init__, _sv.Server.handle = _s_init, _s_handle

    def _wrap_sample(cls):
        orig = cls.sample

        def sample(self, fn, number):
            if not _attrs_done.get(os.getpid()):
                _attrs_done[os.getpid()] = True
                _rows().append(["cupti_attrs", _cupti_attrs()])
            t0 = _pc()
            try:
                return orig(self, fn, number)
            finally:
                _rows().append(["sample", number, t0, _pc()])
                if _sync_sample and _torch_mod is not None and _torch_mod.cuda.is_initialized():
                    t1 = _pc()
                    _torch_mod.cuda.synchronize()
                    _rows().append(["fn", "sync after sample", t1, _pc()])
                    try:  # the CPU the main thread ran on (/proc stat's "processor")
                        with open("/proc/thread-self/stat") as f:
                            _rows().append(["cpu", int(f.read().rsplit(")", 1)[1].split()[36]), t1])
                    except (OSError, ValueError, IndexError):
                        pass

        cls.sample = sample

    def _wrap_fn(owner, attr, name):
        orig = getattr(owner, attr)

        def timed(*a, **k):
            t0 = _pc()
            try:
                return orig(*a, **k)
            finally:
                _rows().append(["fn", name, t0, _pc()])

        setattr(owner, attr, timed)

    from expkit.bench.processes import cores as _co
    from expkit.bench.sides import ledger as _lg, side as _sd

    # Parts of a block request inside the worker (names as the table's last column prints them).
    for _owner, _attr, _name in ((_lg.Ledger, "start", "ledger.start"), (_lg.Ledger, "stop", "ledger.stop"),
                                 (_sd, "after_block", "after_block"), (_sd, "opening", "opening"),
                                 (_sd.SideBench, "tamper_findings", "tamper_findings"),
                                 (_sd.SideBench, "block", "block"), (_sd.CaseState, "begin", "case.begin"),
                                 (_sv, "opening", "serve.opening"), (_lg, "host_rss", "host_rss"),
                                 (_lg, "host_peak_reset", "host_peak_reset"), (_co.Relay, "work", "relay.work"),
                                 (_sd, "snapshot_state", "snapshot_state"), (_sd, "state_changes", "state_changes"),
                                 (_sd.FunctionSnapshot, "changed", "FunctionSnapshot.changed"),
                                 (_co.Relay, "wait", "relay.wait")):
        _wrap_fn(_owner, _attr, _name)
    try:
        import torch as _torch

        for _attr in ("memory_stats_as_nested_dict", "reset_peak_memory_stats", "is_initialized", "current_device"):
            _wrap_fn(_torch.cuda, _attr, "cuda." + _attr)
        _wrap_fn(_torch._C, "_cuda_memoryStats", "C._cuda_memoryStats")
        if os.environ.get("EXPKIT_DEBUG_SYNC_LEDGER"):  # a debug variant: the device synchronised first
            _stop = _lg.Ledger.stop

            def _synced_stop(self, op):
                if _torch.cuda.is_initialized():
                    t0 = _pc()
                    _torch.cuda.synchronize()
                    _rows().append(["fn", "sync before ledger.stop", t0, _pc()])
                return _stop(self, op)

            _lg.Ledger.stop = _synced_stop
    except Exception:
        pass

    _sync_sample = bool(os.environ.get("EXPKIT_DEBUG_SYNC_SAMPLE"))
    if os.environ.get("EXPKIT_DEBUG_PREALLOC"):  # a debug variant: CUPTI's device buffers pre-allocated
        try:
            import ctypes

            from cupti import cupti as _c0

            _v, _size = ctypes.c_size_t(int(os.environ["EXPKIT_DEBUG_PREALLOC"])), ctypes.c_size_t(8)
            _c0.activity_set_attribute(int(_c0.ActivityAttribute.ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE),
                                       ctypes.addressof(_size), ctypes.addressof(_v))
        except Exception as _e:
            print("EXPKIT_DEBUG_PREALLOC failed:", repr(_e))
    _attrs_done = {}

    def _cupti_attrs():
        """CUPTI's activity attributes of device buffers and semaphores, as this process has them."""
        try:
            import ctypes

            from cupti import cupti as _c
        except Exception as e:
            return {"error": repr(e)[:100]}
        out = {}
        for name in ("ATTR_DEVICE_BUFFER_SIZE", "ATTR_DEVICE_BUFFER_POOL_LIMIT", "ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE",
                     "ATTR_PROFILING_SEMAPHORE_POOL_SIZE", "ATTR_PROFILING_SEMAPHORE_POOL_LIMIT",
                     "ATTR_PROFILING_SEMAPHORE_PRE_ALLOCATE_VALUE"):
            v, size = ctypes.c_size_t(0), ctypes.c_size_t(8)
            try:
                _c.activity_get_attribute(int(getattr(_c.ActivityAttribute, name)), ctypes.addressof(size),
                                          ctypes.addressof(v))
                out[name] = v.value
            except Exception as e:
                out[name] = repr(e)[:80]
        return out

    if os.environ.get("EXPKIT_DEBUG_SCHED"):  # a debug variant: each worker's CUDA context flags (2 yield, 4 blocking)
        from expkit.bench.sides import side as _sd1

        _sb_init = _sd1.SideBench.__init__

        def _sched_init(self, *a, **k):
            import ctypes

            try:
                cu = ctypes.CDLL("libcuda.so.1")
                dev = ctypes.c_int()
                got = (cu.cuInit(0), cu.cuDeviceGet(ctypes.byref(dev), 0),
                       cu.cuDevicePrimaryCtxSetFlags_v2(dev, int(os.environ["EXPKIT_DEBUG_SCHED"])))
            except (OSError, AttributeError) as e:
                got = repr(e)
            _rows().append(["sched_flags", str(got)])
            return _sb_init(self, *a, **k)

        _sd1.SideBench.__init__ = _sched_init

    if os.environ.get("EXPKIT_DEBUG_PROFILER_FIRST"):  # a debug variant: torch.profiler once before a case
        from expkit.bench.sides import side as _sd0

        _prep = _sd0.SideBench.prepare

        def _profiled_prepare(self, *a, **k):
            if self.device == "cuda" and not _attrs_done.get(("prof", os.getpid())):
                _attrs_done[("prof", os.getpid())] = True
                import torch
                from torch.profiler import ProfilerActivity, profile

                t0 = _pc()
                x = torch.ones(4, device="cuda")
                if os.environ["EXPKIT_DEBUG_PROFILER_FIRST"] == "float64":  # as the preflight's judge: a wide reference
                    y = torch.randn(1 << 26, device="cuda").double()
                    (y * y).sum().item()
                    del y
                    torch.cuda.empty_cache()
                elif os.environ["EXPKIT_DEBUG_PROFILER_FIRST"] == "capture":  # as the preflight's profile request
                    from expkit.checks import recording

                    recording.capture(lambda: x.add_(1), cuda=True)
                else:
                    with profile(activities=[ProfilerActivity.CUDA]):
                        for _ in range(int(os.environ["EXPKIT_DEBUG_PROFILER_FIRST"])):
                            x.add_(1)
                        torch.cuda.synchronize()
                _rows().append(["fn", "profiler first", t0, _pc()])
                _rows().append(["cupti_attrs_after_profiler", _cupti_attrs()])
            return _prep(self, *a, **k)

        _sd0.SideBench.prepare = _profiled_prepare
    try:
        import torch as _torch_mod
    except Exception:
        _torch_mod = None
    try:
        from expkit.timing import cupti_recorder as _cr

        _parse = _cr.parse

        def _counted_parse(activities, *a, **k):
            t0 = _pc()
            acts = list(activities)
            kinds = {}
            for x in acts:
                kinds[str(x.kind)] = kinds.get(str(x.kind), 0) + 1
            try:
                return _parse(acts, *a, **k)
            finally:
                rows = _rows()
                rows.append(["fn", "cupti.parse", t0, _pc()])
                rows.append(["cupti", kinds, t0])

        _cr.parse = _counted_parse
        if os.environ.get("EXPKIT_DEBUG_KINDS_OFF"):  # a debug variant: kinds disabled after every block
            _rstop = _cr.CuptiRecorder.stop

            def _stop_off(self):
                self.keep_enabled = False
                return _rstop(self)

            _cr.CuptiRecorder.stop = _stop_off
    except Exception:
        pass
    from expkit.timing import per_call as _pcl, timer as _tm

    for _mod in (_tm, _pcl):
        for _name in dir(_mod):
            _obj = getattr(_mod, _name)
            if isinstance(_obj, type) and "sample" in vars(_obj) and _obj.__module__ == _mod.__name__:
                _wrap_sample(_obj)
    try:
        from expkit.timing import cuda_timer as _ct

        _wrap_sample(_ct.CudaTimer)
    except Exception:
        pass
'''


def _load(folder: Path) -> Dict[int, Dict[str, Any]]:
    """Each process's log: its role (a worker's) and its rows."""
    procs: Dict[int, Dict[str, Any]] = {}
    for f in folder.glob("*.jsonl"):
        rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        role = next((r[1] for r in rows if r[0] == "role"), None)
        procs[int(f.stem)] = {"role": role or "parent", "rows": rows}
    return procs


def _gc_inside(gcs: List[Tuple[float, float]], a: float, b: float) -> float:
    return sum(max(0.0, min(e, b) - max(s, a)) for s, e in gcs)


def split(folder: Path) -> List[str]:
    """The table's rows for one run's logs (see the module docstring)."""
    procs = _load(folder)
    parent = next((p for p in procs.values() if p["role"] == "parent" and any(r[0] == "p_send" for r in p["rows"])),
                  None)
    if parent is None:
        return ["(no parent log)"]
    pgc = [(r[2], r[3]) for r in parent["rows"] if r[0] == "gc"]
    out = []
    for role in ("baseline", "candidate"):
        workers = [p for p in procs.values() if p["role"] == role]
        # Worker requests in order: recv, handle, send, joined to the parent's by order of
        # time (one request at a time per worker): each block request's parent send falls
        # just before its worker's header read.
        wreq = []
        for w in workers:
            rows = w["rows"]
            wgc = [(r[2], r[3]) for r in rows if r[0] == "gc"]
            recvs = [r for r in rows if r[0] == "recv"]
            handles = [r for r in rows if r[0] == "handle"]
            sends = [r for r in rows if r[0] == "send"]
            samples = [(r[2], r[3]) for r in rows if r[0] == "sample"]
            for rv in recvs:
                if rv[2] != "block":
                    continue
                h = next((x for x in handles if x[2] >= rv[5]), None)
                s = next((x for x in sends if h is not None and x[3] >= h[3]), None)
                if h is None or s is None:
                    continue
                inside = sum(e - b for b, e in samples if b >= h[2] and e <= h[3])
                wreq.append({"head": rv[4], "decoded": rv[5], "h0": h[2], "h1": h[3], "sent": s[3],
                             "sample": inside, "wgc": wgc})
        wreq.sort(key=lambda x: x["head"])
        heads = [x["head"] for x in wreq]
        psends = [r for r in parent["rows"] if r[0] == "p_send" and r[1] == role and r[2] == "block"]
        precvs = [r for r in parent["rows"] if r[0] == "p_recv" and r[1] == role]
        seg: Dict[str, List[float]] = {k: [] for k in ("deliver", "decode", "handle", "sample", "reply", "return",
                                                        "parent wait", "gc worker", "gc parent")}
        for ps in psends:
            i = bisect.bisect_left(heads, ps[3])
            q = wreq[i] if i < len(wreq) and heads[i] - ps[3] < 1.0 else None
            pr = next((x for x in precvs if x[3] >= ps[4]), None)
            if q is None or pr is None:
                continue
            seg["deliver"].append(q["head"] - ps[3])
            seg["decode"].append(q["decoded"] - q["head"])
            seg["handle"].append(q["h1"] - q["h0"])
            seg["sample"].append(q["sample"])
            seg["reply"].append(q["sent"] - q["h1"])
            seg["return"].append(pr[4] - q["sent"])
            seg["parent wait"].append(pr[4] - ps[3])
            seg["gc worker"].append(_gc_inside(q["wgc"], ps[3], pr[4]))
            seg["gc parent"].append(_gc_inside(pgc, ps[3], pr[4]))
        parts: Dict[str, List[float]] = {}
        for w in workers:
            rows = w["rows"]
            fns = [r for r in rows if r[0] == "fn"]
            for h in (r for r in rows if r[0] == "handle" and r[1] == "block"):
                for r in fns:
                    if r[2] >= h[2] and r[3] <= h[3]:
                        parts.setdefault(r[1], []).append(0.0)
                        parts[r[1]][-1] += r[3] - r[2]
        nh = max(1, sum(1 for w in workers for r in w["rows"] if r[0] == "handle" and r[1] == "block"))
        part_cells = ", ".join(f"{k} {sum(v) / nh * 1e3:.3f}" for k, v in sorted(parts.items()))
        n = len(seg["deliver"])
        if not n:
            out.append(f"| {role} | 0 |")
            continue
        cells = " | ".join(f"{statistics.median(v) * 1e3:.3f} / {statistics.fmean(v) * 1e3:.3f}" for v in seg.values())
        out.append(f"| {role} | {n} | {cells} | {part_cells} |")
    return out


def per_process(folder: Path) -> List[str]:
    """Per worker process: its role, whether it served the preflight (the run's first pair)
    and medians (ms) of the parts that differ most between processes."""
    out = ["| pid | role | pair | block requests | sync after sample | ledger.stop | handle | CPUs after the sync |",
           "|---|---|---|---|---|---|---|---|"]
    for pid, p in sorted(_load(folder).items()):
        if p["role"] == "parent":
            continue
        rows = p["rows"]
        ops = {r[1] for r in rows if r[0] == "handle"}

        def med(name: str) -> str:
            v = [(r[3] - r[2]) * 1e3 for r in rows if r[0] == "fn" and r[1] == name]
            return f"{statistics.median(v):.2f}" if v else "-"

        hs = [(r[3] - r[2]) * 1e3 for r in rows if r[0] == "handle" and r[1] == "block"]
        first = "first (preflight)" if ops & {"judge", "trial_call"} else "later"
        cpus = sorted({r[1] for r in rows if r[0] == "cpu"})
        out.append(f"| {pid} | {p['role']} | {first} | {len(hs)} | {med('sync after sample')} | {med('ledger.stop')} | "
                   f"{statistics.median(hs) if hs else 0:.2f} | {','.join(map(str, cpus)) or '-'} |")
    return out


def main(argv: List[str]) -> int:
    if argv[:1] == ["--per-process"]:
        print("\n".join(per_process(Path(argv[1]))))
        return 0
    if len(argv) < 2:
        print(__doc__)
        return 2
    manifest, out = argv[0], Path(argv[1]).resolve()
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 1
    overrides = [a for a in argv[2:] if "=" in a]
    hook = out / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    print("| round | side | block requests | deliver | decode | handle | in samples | reply | return | parent wait "
          "| gc in workers | gc in parent | parts of a block request, ms a request |  (ms, median / mean)")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in range(1, rounds + 1):
        logs = out / f"logs-{r}"
        logs.mkdir(exist_ok=True)
        env = dict(os.environ, EXPKIT_DEBUG_REQUESTS=str(logs),
                   PYTHONPATH=os.pathsep.join([str(hook), str(REPO), os.environ.get("PYTHONPATH", "")]))
        rc = subprocess.call([sys.executable, "-m", "expkit", "run", manifest, *BASE, *overrides, "--out",
                              str(out / f"run-{r}"), "--quiet"], env=env)
        for row in split(logs):
            print(f"| {r} (exit {rc}) {row[1:]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
