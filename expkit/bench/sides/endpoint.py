"""The parent's handle on one side: a worker process behind the channel, or the side in-process.

With ``defences.isolate`` (the default) the parent -- the process that computes the
verdict -- never imports the manifest's code. It starts one worker process per side
(:mod:`.worker`); each loads the manifest and imports its own side's code only, and
answers requests (:mod:`.serve`) with plain data. :class:`WorkerEndpoint` is the
parent's handle on one of them; :class:`LocalEndpoint` answers the same requests in
this process (``defences.isolate=false``, and the undefended harness), so the pair that
drives both (:mod:`.pair`) cannot tell them apart.

What the parent keeps, whichever endpoint: the measurement loop, its random order and
its stopping rule, with a timer that times each request on the parent's own clock (the
*envelope* check, :mod:`..defences.envelope`); the statistics and the verdict, from raw samples
and findings, never from anything a worker concludes; each worker's stdout and stderr,
captured to files before any of its code runs and kept as evidence beside
``result.json`` (the candidate's as ``worker-stdout.txt``/``worker-stderr.txt``, the
baseline's as ``baseline-stdout.txt``/``baseline-stderr.txt``), never parsed.

Start methods (``defences.start_method``): ``auto`` (default) forks the parent itself, in
milliseconds, when that is safe (:func:`..processes.fork_safety.fork_is_safe`: no thread but torch's
own, no CUDA context; the runner runs no torch op), else uses the fork server.
``forkserver`` forks each worker from a server process that imported torch (and what the
profiler imports on first use) once: 0.1-0.2 s a worker on the 2-core CI machine once the
server is up, where starting the server costs seconds (9.4 s on an H100 machine, cold
caches), once per parent process; :func:`warm_up_forkserver`
starts it early, while the parent still loads the manifest. ``spawn`` starts a fresh
interpreter per worker (seconds each). ``fork`` forks the parent unconditionally (a process
with an OpenMP pool, other threads or a CUDA context must not be forked). With
``forkserver`` and ``spawn``, a script that calls ``run_manifest`` needs the usual ``if
__name__ == "__main__":`` guard: the worker re-imports the script's module (without running
the guarded part).
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import os
import secrets
import shutil
import signal
import tempfile
import time
import weakref
from multiprocessing import forkserver
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ...checks.children import descendants
from ...core.errors import ExpkitError, ManifestError
from ...core.findings import Finding
from ..processes.channel import HEADER, KEY_LEN, MAGIC, WORKER, Channel, ChannelError, RemoteError, write_all
from ..processes.diagnose import WORKER_OUTPUT_ENV, diagnose
from ..processes.fork_safety import cuda_initialised, fork_is_safe, fork_unsafe_reason
from ..processes.shm_files import PID_FILE, remove_files_of
from .preload import preload_for
from .serve import Server
from .side import SideBench
from .worker import error_reply, worker_main

#: Evidence file names per side (the candidate's keep the names they always had).
EVIDENCE = {"candidate": ("worker-stdout.txt", "worker-stderr.txt"),
            "baseline": ("baseline-stdout.txt", "baseline-stderr.txt")}

_forkserver_ready = False


class OutOfMemory(RemoteError):
    """The worker ran out of memory (``torch.OutOfMemoryError`` there)."""


def _context(method: str, device: str = "cpu") -> Any:
    return start_context(method, device)[0]


def start_context(method: str, device: str = "cpu") -> Tuple[Any, Optional[str]]:
    """(the multiprocessing context a worker starts with, why ``auto`` did not fork or None).

    A pair resolves it once for both its workers: each answer reads the process's memory
    map (:func:`~..processes.fork_safety.cuda_initialised`), 2.6 ms on the 2-core CPU machine with
    torch loaded, and a pair had asked five times: 26 reads and 67 ms of one ``quick``
    run of the README's example, 7 reads and 18 ms since
    (evidence/README.md)."""
    why: Optional[str] = None
    if method == "auto":
        why = fork_unsafe_reason()
        if why is None:  # it checked CUDA's driver too
            return multiprocessing.get_context("fork"), None
        method = "forkserver"
    return _resolved(method, device), why


def _resolved(method: str, device: str) -> Any:
    global _forkserver_ready
    if method == "fork":
        # For a process known to be fresh (a suite's worker that has run no torch op):
        # a fork copies one thread, so a process with an OpenMP pool or a CUDA context
        # must not be forked. CUDA can only be checked.
        if cuda_initialised() or "fork" not in multiprocessing.get_all_start_methods():
            raise ExpkitError("defences.start_method=fork: this process has initialised CUDA (or cannot fork); "
                              "use forkserver or spawn")
        return multiprocessing.get_context("fork")
    if method == "forkserver" and "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        if not _forkserver_ready:
            ctx.set_forkserver_preload(preload_for(device))
            _forkserver_ready = True
        return ctx
    if method not in ("forkserver", "spawn"):
        raise ExpkitError(f"defences.start_method: expected auto, forkserver, spawn or fork, got {method!r}")
    return multiprocessing.get_context("spawn")


def warm_up_forkserver(method: str, device: str = "cpu") -> None:
    """Start the fork server now (it imports torch: seconds), so that the workers started
    later fork from it at once. Where a plain fork will do (``auto`` in a fresh process,
    or ``fork``), import :data:`.preload.PRELOAD` here instead, so that every forked worker
    inherits it: each of honest-win's ten workers (five processes a side) otherwise
    spent 0.83-0.94 s of its first call importing ``torch._dynamo`` and what it pulls in
    (822 modules) on this project's 2-core machine. Importing them starts no thread, so
    the process stays safe to fork; where an import made it unsafe after all (a library
    that loads the CUDA driver as it imports, say), the fork server starts here instead."""
    if method == "fork" or (method == "auto" and fork_is_safe()):
        for name in preload_for(device):
            importlib.import_module(name)
        if method == "fork" or fork_is_safe():
            return
    if method not in ("forkserver", "auto") or "forkserver" not in multiprocessing.get_all_start_methods():
        return
    _context(method, device)
    try:
        forkserver.ensure_running()
    except Exception:  # the worker's own start will report it
        pass


def wait_exit(proc: Any, timeout: float) -> bool:
    """Whether ``proc`` has exited within ``timeout`` seconds, by polling.

    Not ``proc.join(timeout)``: for a forked worker, ``join`` waits on a pipe the worker
    holds open, then reaps with a *blocking* ``waitpid``; code under test that writes to
    or closes every descriptor it finds (see the adversarial ``report_forger``) makes that
    pipe look closed while the worker lives on, and ``join`` then blocks for ever."""
    deadline = time.monotonic() + timeout
    while proc.is_alive():  # a non-blocking waitpid
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _kill(pids: List[int]) -> List[int]:
    """SIGKILL each process of ``pids`` still alive (their own children go with the worker's
    session or were listed too); the pids it reached."""
    done = []
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
            done.append(p)
        except OSError:
            continue
    for p in done:
        try:
            os.waitpid(p, os.WNOHANG)  # reap those that were our own children
        except OSError:
            pass
    return done


def _stop(proc: Any) -> None:
    if proc.is_alive():
        proc.terminate()
        wait_exit(proc, 2)
    if proc.is_alive():
        proc.kill()
        wait_exit(proc, 2)


def _remove_files(proc: Any, stray: Sequence[int] = ()) -> None:
    """Remove the shared files that the ended worker, or a process it left, made and could not
    remove itself (it crashed or was killed: :mod:`..processes.shm_files`)."""
    if proc.pid is not None and not proc.is_alive():
        remove_files_of([proc.pid, *stray])


def _end(proc: Any) -> None:
    """The finalizer of a worker never closed: stop it, then remove its files."""
    _stop(proc)
    _remove_files(proc)


def remote_error(err: Mapping[str, Any]) -> Exception:
    if err.get("type") == "ManifestError":
        return ManifestError(err["path"], err["key"], err["problem"], err.get("fix", ""))
    if err.get("type") == "ExpkitError":
        return ExpkitError(err["message"])
    if err.get("type") == "oom":
        return OutOfMemory(err.get("message", "out of memory"))
    return RemoteError(err.get("message", "the worker reported an error"))


class WorkerEndpoint:
    """One side's worker process, from the parent (see the module docstring).

    Requests can be sent and answered in two steps (:meth:`send`, :meth:`receive`) so
    that the two sides work at the same time where a step needs no answer from the
    other (building inputs, the profiled calls); :meth:`request` does both."""

    isolated = True

    def __init__(self, lm: Any, settings: Any, device: str, role: str, ctx: Any = None) -> None:
        self.lm, self.settings, self.device, self.role = lm, settings, device, role
        self.d = settings.defences
        self._dir = tempfile.mkdtemp(prefix=f"expkit-{role}-", dir=os.environ.get(WORKER_OUTPUT_ENV) or None)
        out_name, err_name = EVIDENCE[role]
        self.stdout_path = os.path.join(self._dir, out_name)
        self.stderr_path = os.path.join(self._dir, err_name)
        ctx = ctx if ctx is not None else _context(self.d.start_method, device)
        req_r, req_w = ctx.Pipe(duplex=False)
        rep_r, rep_w = ctx.Pipe(duplex=False)
        forked = ctx.get_start_method() == "fork"
        self.proc = ctx.Process(target=worker_main, name=f"expkit-{role}", daemon=True,
                                args=(req_r, rep_w, str(lm.path), settings, device, role, self.stdout_path,
                                      self.stderr_path, (req_w, rep_r) if forked else ()))
        if forked:
            # The child inherits every object; a cycle among them that its collector
            # frees runs finalizers there, and one that imports a module while the
            # child is compiling another (CPython 3.11's AST converter is not
            # re-entrant) broke the worker's start. Frozen objects are never collected.
            gc.freeze()
        try:
            self.proc.start()
        finally:
            if forked:
                gc.unfreeze()
        req_r.close()
        rep_w.close()
        # Where a suite's supervisor finds the worker if this process dies before closing
        # it: the worker's shared files are named for this pid (..processes.shm_files).
        Path(self._dir, PID_FILE).write_text(str(self.proc.pid))
        self._pipes = (req_w, rep_r)
        self._finalizer = weakref.finalize(self, _end, self.proc)
        key = secrets.token_bytes(KEY_LEN)
        write_all(req_w.fileno(), HEADER.pack(MAGIC, KEY_LEN, 0) + key)
        self.ch = Channel(rep_r.fileno(), req_w.fileno(), key)
        del key
        self.broken: Optional[ChannelError] = None
        self.told = False
        self._closed = False
        self._ending: Optional[Tuple[List[int], bool]] = None
        self.start_method = ctx.get_start_method()
        #: The worker's request ledger (:mod:`.ledger`), from its goodbye; None until then.
        self.ledger: Optional[Dict[str, Any]] = None

    def pid(self) -> Optional[int]:
        return self.proc.pid

    def send(self, op: str, **payload: Any) -> None:
        if self.broken is not None:
            raise self.broken
        try:
            self.ch.send({"op": op, **payload})
        except OSError as e:  # the worker's end is gone (EPIPE)
            self.broken = ChannelError(WORKER, f"the channel to the {self.role}'s worker failed: {e}")
            raise self.broken from None

    def receive(self) -> Dict[str, Any]:
        if self.broken is not None:
            raise self.broken
        try:
            reply = self.ch.recv(self.d.timeout_seconds, alive=self.proc.is_alive)
        except ChannelError as e:
            self.broken = ChannelError(e.check, f"{self.role}'s worker: {e.message}")
            raise self.broken from None
        if "error" in reply:
            raise remote_error(reply["error"])
        return reply

    def request(self, op: str, **payload: Any) -> Dict[str, Any]:
        self.send(op, **payload)
        return self.receive()

    def death_cause(self) -> str:
        """Why the worker died (signal, exit status, CUDA error text), from its exit code and
        the end of its stderr; empty while it is still alive (a timeout, say)."""
        wait_exit(self.proc, 2.0)
        code = self.proc.exitcode
        if code is None or code == 0:
            return ""
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 8192))
                tail = f.read().decode(errors="replace")
        except OSError:
            tail = ""
        return diagnose(code, timed_out=False, timeout=0.0, tail=tail)

    def begin_close(self) -> Tuple[List[int], bool]:
        """Ask the worker to end, without waiting (:meth:`close` reads its goodbye), so that
        both workers of a pair end at once. Returns the processes it had started, found
        before it ends, and whether it was asked; a second call returns the first's."""
        if self._ending is None:
            # What the side's code left running (a daemon on the GPU, a pool of its own)
            # must not outlive the run and share the machine with the next one: the worker
            # is a child subreaper (worker.py), so even a process that double-forked is found.
            stray = descendants(self.proc.pid) if self.proc.pid is not None else []
            asked = False
            if self.broken is None and self.proc.is_alive():
                try:
                    self.ch.send({"op": "close"})
                    asked = True
                except OSError:
                    pass
            self._ending = (stray, asked)
        return self._ending

    def close(self, out_dir: Optional[Path], evidence: Dict[str, Any]) -> List[Finding]:
        """End the worker; keep its output as evidence in ``out_dir``; late findings."""
        out: List[Finding] = []
        if self._closed:
            return out
        self._closed = True
        stray, asked = self.begin_close()
        if asked:
            try:
                bye = self.ch.recv(10.0, alive=self.proc.is_alive)
                self.ledger = bye.get("ledger")
                wait_exit(self.proc, 5)
            except (ChannelError, OSError):
                pass
        _stop(self.proc)
        killed = _kill(stray)
        if killed:
            evidence[f"{self.role}_stray_processes_killed"] = killed
        _remove_files(self.proc, stray)
        evidence[f"{self.role}_exitcode"] = self.proc.exitcode
        if self.broken is not None and not self.told:
            out.append(Finding(self.broken.check, False, self.broken.message))
        for p in self._pipes:
            p.close()
        if out_dir is not None:
            for path in (self.stdout_path, self.stderr_path):
                if os.path.exists(path):
                    name = os.path.basename(path)
                    shutil.copyfile(path, Path(out_dir) / name)
                    key = ("stdout" if "stdout" in name else "stderr")
                    evidence[key if self.role == "candidate" else f"baseline_{key}"] = name
        shutil.rmtree(self._dir, ignore_errors=True)
        return out


class LocalEndpoint:
    """One side answered in this process (same requests, same plain data)."""

    isolated = False

    def __init__(self, lm: Any, settings: Any, device: str, role: str, fn: Any = None, factory: Any = None) -> None:
        self.role, self.device = role, device
        self.broken: Optional[ChannelError] = None
        self.told = False
        self.start_method = "in-process"
        self.server = Server(SideBench(lm, settings, device, role, fn=fn, factory=factory, local=True))
        self._pending: Optional[Dict[str, Any]] = None

    def pid(self) -> int:
        return os.getpid()

    def send(self, op: str, **payload: Any) -> None:
        try:
            self._pending = self.server.handle({"op": op, **payload})
        except BaseException as e:
            self._pending = error_reply(e)

    def receive(self) -> Dict[str, Any]:
        reply, self._pending = self._pending or {}, None
        if "error" in reply:
            raise remote_error(reply["error"])
        return reply

    def request(self, op: str, **payload: Any) -> Dict[str, Any]:
        self.send(op, **payload)
        return self.receive()

    def death_cause(self) -> str:
        return ""

    @property
    def ledger(self) -> Dict[str, Any]:
        return self.server.ledger.to_dict()

    def begin_close(self) -> Tuple[List[int], bool]:
        return [], False

    def close(self, out_dir: Optional[Path], evidence: Dict[str, Any]) -> List[Finding]:
        self.server.side.close()
        return []
