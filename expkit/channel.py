"""The worker process and its private, authenticated channel to the parent.

With ``defences.isolate`` (the default) the parent -- the process that computes the
verdict -- never imports the manifest's code. It starts a worker process, and the
worker loads the manifest, imports baseline, candidate and input factory, and runs
the preflight and the timed blocks on request (``defences.Bench``). The parent keeps:

* the measurement loop, its random order and its stopping rule (``measure.py``),
  with a timer that asks the worker for one block at a time and times each request
  on the parent's own clock (``defences.SessionTimer``, the *envelope* check);
* the statistics and the verdict, computed from the raw samples and findings the
  worker sends back, never from anything the worker concludes;
* the worker's stdout and stderr, captured to files before any candidate code runs
  and kept as evidence (``worker-stdout.txt``, ``worker-stderr.txt`` beside
  ``result.json``), never parsed.

How the channel is private
--------------------------
Two pipes, one each way, created by the parent and handed to the worker through
``multiprocessing`` (file descriptors that Python opens non-inheritable, so a
program the candidate starts with ``subprocess`` or ``exec`` does not get them).
Before the worker imports anything of the manifest's, it reads a fresh 32-byte key
from the request pipe -- the parent's first message, which only the parent can
write. Every later message either way is a frame::

    MAGIC "EXK1" | body length (u32) | sequence number (u64) | JSON body | HMAC-SHA256

Bodies are JSON, never pickle, so a forged frame cannot run code in the parent. The
parent rejects a frame with the wrong magic, an oversized length, a bad MAC or an
out-of-order sequence number, and from then on trusts nothing on the channel: the
run is ``invalid`` with a ``channel`` reason. Reads have deadlines and notice a dead
worker, so garbage or silence cannot hang the parent.

Limits, stated plainly: the candidate runs in the worker, so it *can* write to the
worker's end of the result pipe (it is an open descriptor of its own process), and
code that walks the worker's memory can find the key and the bench and forge
authenticated messages. What the channel guarantees is that nothing *outside* the
worker's Python process (a child it spawned, stdout) can speak for it, and that a
candidate which writes to whatever descriptor it finds is caught, not believed. A
forged account of a timed block must still agree with the parent's clock.

Start methods (``defences.start_method``): ``forkserver`` (default) forks each worker
from a server process that imported torch (and what the profiler imports on first
use) once: 0.1-0.2 s a worker on the 2-core CI machine once the server is up, where
starting the server costs seconds, once per parent process. ``spawn`` starts a fresh
interpreter per worker (seconds each). ``fork`` forks the parent itself, in
milliseconds; it is for a parent known to have run no torch op yet (a suite's own
worker process), because a fork copies one thread and a process with an OpenMP pool
or a CUDA context must not be forked. With ``forkserver`` and ``spawn``, a script that
calls ``run_manifest`` needs the usual ``if __name__ == "__main__":`` guard: the
worker re-imports the script's module (without running the guarded part).
"""

from __future__ import annotations

import hmac
import json
import multiprocessing
import os
import secrets
import select
import shutil
import struct
import sys
import tempfile
import time
import traceback
import weakref
from dataclasses import asdict
from hashlib import sha256
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .errors import ExpkitError, ManifestError
from .findings import Finding

MAGIC = b"EXK1"
HEADER = struct.Struct("!4sIQ")
MAC_LEN = 32
KEY_LEN = 32
MAX_BODY = 64 << 20
STDOUT, STDERR = "worker-stdout.txt", "worker-stderr.txt"

CHANNEL, WORKER = "channel", "worker"


class ChannelError(Exception):
    """The channel can no longer be trusted (``check`` is ``channel`` or ``worker``)."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check, self.message = check, message


class RemoteError(RuntimeError):
    """An exception raised in the worker (the candidate's, or the harness's there)."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: Optional[float], alive: Optional[Callable[[], bool]]) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelError(WORKER, "the worker did not answer in time (defences.timeout_seconds): "
                                   "the code under test hung, or is far slower than expected")
            wait = min(left, 0.5)
        else:
            wait = 0.5
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            if alive is not None and not alive():
                raise ChannelError(WORKER, "the worker process died without closing the channel")
            continue
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise ChannelError(WORKER, "the worker closed the channel: it exited or crashed")
        buf += chunk
    return bytes(buf)


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return str(obj)


class Channel:
    """Framed, authenticated JSON messages over a pair of pipe descriptors."""

    def __init__(self, rfd: int, wfd: int, key: bytes) -> None:
        if len(key) != KEY_LEN:
            raise ValueError("key must be 32 bytes")
        self._r, self._w, self._key = rfd, wfd, key
        self._sent = 0
        self._received = 0

    def _mac(self, head: bytes, body: bytes) -> bytes:
        return hmac.new(self._key, head + body, sha256).digest()

    def send(self, obj: Mapping[str, Any]) -> None:
        body = json.dumps(obj, default=_jsonable).encode()
        head = HEADER.pack(MAGIC, len(body), self._sent)
        _write_all(self._w, head + body + self._mac(head, body))
        self._sent += 1

    def recv(self, timeout: Optional[float] = None, alive: Optional[Callable[[], bool]] = None) -> Dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        head = _read_exact(self._r, HEADER.size, deadline, alive)
        magic, n, seq = HEADER.unpack(head)
        if magic != MAGIC:
            raise ChannelError(CHANNEL, f"bytes the harness did not write arrived on the result channel "
                               f"(starting {head[:16]!r}): something in the worker wrote to its descriptor; "
                               "nothing on the channel is trusted from here on")
        if n > MAX_BODY:
            raise ChannelError(CHANNEL, f"a message on the result channel claims {n} bytes, over the "
                               f"{MAX_BODY}-byte limit: forged or corrupted")
        rest = _read_exact(self._r, n + MAC_LEN, deadline, alive)
        body, mac = rest[:n], rest[n:]
        if not hmac.compare_digest(mac, self._mac(head, body)):
            raise ChannelError(CHANNEL, "a message on the result channel failed authentication: it was forged "
                               "or altered by something other than the harness")
        if seq != self._received:
            raise ChannelError(CHANNEL, f"message {seq} arrived where {self._received} was due: replayed or "
                               "injected")
        self._received += 1
        try:
            return json.loads(body)
        except ValueError as e:
            raise ChannelError(CHANNEL, f"an authenticated message is not JSON ({e})") from None


# --- the worker -------------------------------------------------------------------


def _redirect(fd: int, path: str) -> None:
    new = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(new, fd)
    os.close(new)


def release_forkserver_pipe() -> None:
    """Close this process's copy of the fork server's liveness pipe (CPython's private
    attribute, 3.8 to 3.13; where it is missing nothing is closed). See the callers for
    why each needs it closed."""
    try:
        from multiprocessing import forkserver

        fd = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
        if fd is not None:
            os.close(fd)
            forkserver._forkserver._forkserver_alive_fd = None
    except (AttributeError, OSError):
        pass


def _release_inherited() -> None:
    """Close the descriptors a worker inherits from ``multiprocessing`` and does not need.

    A forkserver child holds the server's liveness pipe (data written to it makes the
    server stop) and the resource tracker's pipe; code under test that writes to
    every descriptor it finds would break them for the workers after it. Closing
    them leaves the channel's two pipes and stdio. Both attributes are CPython's
    (3.8 to 3.13); where they are missing nothing is closed. A candidate that asks
    for a resource tracker later gets a fresh one."""
    release_forkserver_pipe()
    try:
        from multiprocessing import resource_tracker

        tracker = resource_tracker._resource_tracker
        fd = getattr(tracker, "_fd", None)
        if fd is not None:
            os.close(fd)
            tracker._fd = None
            tracker._pid = None
    except (AttributeError, OSError):
        pass


def _error_reply(e: BaseException) -> Dict[str, Any]:
    if isinstance(e, ManifestError):
        return {"error": {"type": "ManifestError", "path": e.path, "key": e.key, "problem": e.problem,
                          "fix": e.fix}}
    if isinstance(e, ExpkitError):
        return {"error": {"type": "ExpkitError", "message": str(e)}}
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
    return {"error": {"type": "error", "message": f"{type(e).__name__}: {e}{where}"}}


def _preflight_dict(pre: Any) -> Dict[str, Any]:
    return {"findings": [asdict(f) for f in pre.findings], "cases_checked": list(pre.cases_checked),
            "identity": [asdict(i) for i in pre.identity], "stdout": pre.stdout}


def worker_main(req: Any, rep: Any, manifest_path: str, settings: Any, device: str,
                stdout_path: str, stderr_path: str, parent_ends: Tuple[Any, ...] = ()) -> None:
    """The worker process: capture output, take the key, load the code, serve requests.

    Order matters: stdout and stderr go to the evidence files and the key is read
    before the manifest's modules are imported (inside ``defences.Bench``). A forked
    worker also holds the parent's ends of the pipes (``parent_ends``); it closes them
    first, so that it sees the parent go and cannot write the parent's side."""
    for conn in parent_ends:
        conn.close()
    _release_inherited()
    sys.stdout.flush()
    sys.stderr.flush()
    _redirect(1, stdout_path)
    _redirect(2, stderr_path)
    rfd, wfd = req.fileno(), rep.fileno()
    head = _read_exact(rfd, HEADER.size, None, None)
    magic, n, _ = HEADER.unpack(head)
    if magic != MAGIC or n != KEY_LEN:
        os._exit(70)
    ch = Channel(rfd, wfd, _read_exact(rfd, n, None, None))
    from . import defences
    from .manifest import load

    bench: Any = None
    startup: Optional[BaseException] = None
    try:
        bench = defences.Bench(load(manifest_path), settings, device)
    except BaseException as e:  # reported on the first request, then the worker ends
        startup = e
    while True:
        try:
            msg = ch.recv()
        except ChannelError:
            break
        op = msg.get("op")
        try:
            if startup is not None:
                reply = _error_reply(startup)
            elif op == "hello":
                reply = {"findings": [asdict(f) for f in bench.session_findings], "sources": bench.sources(),
                         "pid": os.getpid()}
            elif op == "preflight":
                reply = _preflight_dict(bench.preflight(int(msg["run_seed"])))
            elif op == "model_oracles":
                reply = {"findings": [asdict(f) for f in bench.model_oracles()]}
            elif op == "end_to_end":
                reply = bench.end_to_end(int(msg["run_seed"]))
            elif op == "prepare":
                bench.prepare(msg["case"], int(msg["run_seed"]), int(msg["salt_seed"]))
                reply = {}
            elif op == "warm_up":
                bench.warm_up(msg["side"], float(msg["seconds"]))
                reply = {}
            elif op == "call":
                bench.call(msg["side"])
                reply = {}
            elif op == "blocks":
                reply = bench.blocks([(r[0], int(r[1]), r[2]) for r in msg["requests"]])
            elif op == "finish_case":
                reply = {"findings": [asdict(f) for f in bench.finish_case()]}
            elif op == "close":
                ch.send({"bye": True})
                break
            else:
                reply = {"error": {"type": "error", "message": f"unknown request {op!r}"}}
        except BaseException as e:
            reply = _error_reply(e)
        try:
            ch.send(reply)
        except OSError:
            break
        if startup is not None:
            break
    sys.stdout.flush()
    sys.stderr.flush()


# --- the parent's side ----------------------------------------------------------------

#: Imported once by the fork server. ``torch._dynamo`` and ``torch.profiler`` are here
#: because the first profiled call of a process imports them (about 1.3 s of a 2-core
#: machine's time per worker otherwise, measured for this module); importing them
#: starts no thread.
_PRELOAD = ["torch", "torch._dynamo", "torch.profiler", "torch._inductor.standalone_compile", "expkit.defences",
            "expkit.preflight", "expkit.measure", "expkit.oracles", "expkit.channel", "expkit.manifest",
            "expkit.runner", "expkit.trace", "expkit.expectations"]
_forkserver_ready = False


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    try:
        return torch is not None and bool(torch.cuda.is_initialized())
    except Exception:
        return True


def _context(method: str, device: str = "cpu") -> Any:
    global _forkserver_ready
    if method == "fork" and device == "cuda":
        # Asking whether a GPU is there (the runner does, first) may already have
        # initialised the driver, and CUDA in a forked child of such a process fails.
        method = "forkserver"
    if method == "fork":
        # For a process known to be fresh (a suite's worker that has run no torch op):
        # a fork copies one thread, so a process with an OpenMP pool or a CUDA context
        # must not be forked. CUDA can only be checked.
        if _cuda_initialised() or "fork" not in multiprocessing.get_all_start_methods():
            raise ExpkitError("defences.start_method=fork: this process has initialised CUDA (or cannot fork); "
                              "use forkserver or spawn")
        return multiprocessing.get_context("fork")
    if method == "forkserver" and "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        if not _forkserver_ready:
            ctx.set_forkserver_preload(_PRELOAD)
            _forkserver_ready = True
        return ctx
    if method not in ("forkserver", "spawn"):
        raise ExpkitError(f"defences.start_method: expected forkserver, spawn or fork, got {method!r}")
    return multiprocessing.get_context("spawn")


def _stop(proc: Any) -> None:
    if proc.is_alive():
        proc.terminate()
        proc.join(2)
    if proc.is_alive():
        proc.kill()
        proc.join(2)


def _remote_error(err: Mapping[str, Any]) -> Exception:
    if err.get("type") == "ManifestError":
        return ManifestError(err["path"], err["key"], err["problem"], err.get("fix", ""))
    if err.get("type") == "ExpkitError":
        return ExpkitError(err["message"])
    return RemoteError(err.get("message", "the worker reported an error"))


class WorkerSession:
    """The parent's handle on one worker; the same interface as ``defences.LocalSession``."""

    isolated = True

    def __init__(self, lm: Any, settings: Any, device: str) -> None:
        self.lm, self.settings, self.device = lm, settings, device
        self.d = settings.defences
        self._dir = tempfile.mkdtemp(prefix="expkit-worker-")
        self.stdout_path = os.path.join(self._dir, STDOUT)
        self.stderr_path = os.path.join(self._dir, STDERR)
        ctx = _context(self.d.start_method, device)
        req_r, req_w = ctx.Pipe(duplex=False)
        rep_r, rep_w = ctx.Pipe(duplex=False)
        forked = ctx.get_start_method() == "fork"
        self.proc = ctx.Process(target=worker_main, name="expkit-worker", daemon=True,
                                args=(req_r, rep_w, str(lm.path), settings, device, self.stdout_path,
                                      self.stderr_path, (req_w, rep_r) if forked else ()))
        self.proc.start()
        req_r.close()
        rep_w.close()
        self._pipes = (req_w, rep_r)
        self._finalizer = weakref.finalize(self, _stop, self.proc)
        key = secrets.token_bytes(KEY_LEN)
        _write_all(req_w.fileno(), HEADER.pack(MAGIC, KEY_LEN, 0) + key)
        self.ch = Channel(rep_r.fileno(), req_w.fileno(), key)
        del key
        self.broken: Optional[ChannelError] = None
        self._told = False
        self._closed = False
        self.evidence: Dict[str, Any] = {"isolated": True, "start_method": ctx.get_start_method()}
        try:
            hello = self._request("hello")
        except ChannelError as e:
            self._session_findings = self._tell(e, "while the worker loaded the code")
            self._sources: Dict[str, str] = {}
        except ExpkitError:
            self.close()
            raise
        else:
            from .defences import finding_from

            self._session_findings = [finding_from(f) for f in hello["findings"]]
            self._sources = dict(hello["sources"])
            self.evidence["worker_pid"] = hello.get("pid")

    def _tell(self, e: ChannelError, when: str) -> List[Finding]:
        """The finding for a broken channel, once per session (later calls get none)."""
        if self._told:
            return []
        self._told = True
        message = f"{e.message} ({when})"
        if e.check == WORKER:
            cause = self._death_cause()
            if cause:
                message += f": {cause}"
        return [Finding(e.check, False, message)]

    def _death_cause(self) -> str:
        """Why the worker died (signal, exit status, CUDA error text), from its exit code and
        the end of its stderr; empty while it is still alive (a timeout, say)."""
        self.proc.join(timeout=2.0)
        code = self.proc.exitcode
        if code is None or code == 0:
            return ""
        from .worker import diagnose

        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 8192))
                tail = f.read().decode(errors="replace")
        except OSError:
            tail = ""
        return diagnose(code, timed_out=False, timeout=0.0, tail=tail)

    def _request(self, op: str, **payload: Any) -> Dict[str, Any]:
        if self.broken is not None:
            raise self.broken
        try:
            self.ch.send({"op": op, **payload})
            reply = self.ch.recv(self.d.timeout_seconds, alive=self.proc.is_alive)
        except ChannelError as e:
            self.broken = e
            raise
        except OSError as e:  # the worker's end is gone (EPIPE)
            self.broken = ChannelError(WORKER, f"the channel to the worker failed: {e}")
            raise self.broken from None
        if "error" in reply:
            raise _remote_error(reply["error"])
        return reply

    def sources(self) -> Dict[str, str]:
        return self._sources

    def findings(self) -> List[Finding]:
        return list(self._session_findings)

    def preflight(self, run_seed: int) -> Any:
        from .defences import finding_from
        from .preflight import IdentitySummary, PreflightResult

        try:
            rep = self._request("preflight", run_seed=run_seed)
        except ChannelError as e:
            return PreflightResult(tuple(self._tell(e, "during the preflight")), ())
        ids = tuple(IdentitySummary(i["case"], tuple(i["candidate_ops"]), tuple(i["baseline_ops"]),
                                    tuple(i.get("candidate_kernels", ())), tuple(i.get("baseline_kernels", ())))
                    for i in rep["identity"])
        return PreflightResult(tuple(finding_from(f) for f in rep["findings"]), tuple(rep["cases_checked"]), ids,
                               rep.get("stdout", ""))

    def model_oracles(self) -> List[Finding]:
        from .defences import finding_from

        try:
            return [finding_from(f) for f in self._request("model_oracles")["findings"]]
        except ChannelError as e:
            return self._tell(e, "during the model oracles")

    def end_to_end(self, run_seed: int) -> Dict[str, Any]:
        """The workload's raw data from the worker (``end_to_end.collect``); judged by the parent."""
        try:
            return self._request("end_to_end", run_seed=run_seed)
        except ChannelError as e:
            return {"skipped": "the channel to the worker failed", "evidence": {},
                    "findings": [asdict(f) for f in self._tell(e, "during the end-to-end workload")]}

    def measure_case(self, case: Any, run_seed: int, *, rng: Any, progress: Any = None) -> Tuple[Any, List[Finding]]:
        from . import measure
        from .defences import SessionTimer, SideFn, envelope_counts, envelope_findings, finding_from

        self._request("prepare", case=case.name, run_seed=run_seed, salt_seed=secrets.randbits(62))
        timer = SessionTimer(lambda reqs: self._request("blocks", requests=reqs), self.d, envelope=True)
        warm = lambda side, seconds: self._request("warm_up", side=side, seconds=seconds)  # noqa: E731
        call = lambda side: self._request("call", side=side)  # noqa: E731
        cs = measure.measure_case(case.name, SideFn("baseline", warm, call), SideFn("candidate", warm, call), timer,
                                  self.settings.measure, rng=rng, progress=progress)
        done = [finding_from(f) for f in self._request("finish_case")["findings"]]
        self.evidence.setdefault("envelope", {})[case.name] = envelope_counts(timer.accounts, self.d)
        return cs, timer.findings + envelope_findings(case.name, timer.accounts, self.d) + done

    def close(self, out_dir: Optional[Path] = None) -> List[Finding]:
        """End the worker; keep its output as evidence in ``out_dir``; late findings."""
        out: List[Finding] = []
        if self._closed:
            return out
        self._closed = True
        if self.broken is None and self.proc.is_alive():
            try:
                self.ch.send({"op": "close"})
                self.ch.recv(10.0, alive=self.proc.is_alive)
                self.proc.join(5)
            except (ChannelError, OSError):
                pass
        _stop(self.proc)
        code = self.proc.exitcode
        self.evidence["exitcode"] = code
        if self.broken is not None and not self._told:
            out.append(Finding(self.broken.check, False, self.broken.message))
        for p in self._pipes:
            p.close()
        if out_dir is not None:
            out_dir = Path(out_dir)
            for name, src in ((STDOUT, self.stdout_path), (STDERR, self.stderr_path)):
                if os.path.exists(src):
                    shutil.copyfile(src, out_dir / name)
                    self.evidence[name.split("-")[1].split(".")[0]] = name
        shutil.rmtree(self._dir, ignore_errors=True)
        return out
