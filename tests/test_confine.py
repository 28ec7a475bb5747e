"""The candidate's confinement (``expkit/bench/defences/confine.py``): what it asks of the kernel, and
what it refuses on this machine's kernel."""

from __future__ import annotations

import os
import signal
import struct
import time

import pytest

from expkit.bench.defences import confine as C


class FakeLibc:
    """libc's ``syscall`` and ``prctl`` as Landlock of ABI ``abi`` answers them; records calls."""

    def __init__(self, abi: int, fail: str = "") -> None:
        self.abi, self.fail, self.calls = abi, fail, []

    def syscall(self, number, *args):
        self.calls.append((number, args))
        if number == 444 and args[2] == 1:  # the version query
            return self.abi if self.abi else -1
        if number == 444:
            return -1 if self.fail == "create" else os.open(os.devnull, os.O_RDONLY)
        if number == 445:
            return -1 if self.fail == "rule" else 0
        if number == 446:
            return -1 if self.fail == "restrict" else 0
        raise AssertionError(number)

    def prctl(self, option, *args):
        self.calls.append(("prctl", option, args))
        return -1 if self.fail == "prctl" else 0


def _ruleset(libc: FakeLibc):
    (_, (attr, size, flags)), = [c for c in libc.calls if c[0] == 444 and c[1][2] == 0]
    return struct.unpack("QQQ", attr.raw[:size].ljust(24, b"\0")), size


@pytest.mark.parametrize("abi", [0, 1])
def test_no_landlock_or_abi_1_says_so_and_restricts_nothing(abi):
    """ABI 1 cannot allow a rename into another directory, which compilers' caches do."""
    libc = FakeLibc(abi)
    got = C.confine(libc)
    assert got["trace"] is False and got["signals"] is False and "Landlock" in got["why"]
    assert len(libc.calls) == 1


def test_abi_2_to_5_handle_only_renames_allow_them_everywhere_and_scope_no_signals():
    libc = FakeLibc(5)
    got = C.confine(libc)
    assert got == {"landlock_abi": 5, "trace": True, "signals": False, "why": got["why"]} and "signals" in got["why"]
    (fs, net, scoped), size = _ruleset(libc)
    assert size == 16 and fs == 1 << 13 and net == 0 and scoped == 0  # REFER only
    (_, (ruleset, kind, rule, flags)), = [c for c in libc.calls if c[0] == 445]
    allowed, parent = struct.unpack("=Qi", rule.raw)
    assert kind == 1 and allowed == 1 << 13  # a path-beneath rule allowing REFER
    assert ("prctl", 38, (1, 0, 0, 0)) in libc.calls  # no new privileges before restricting


def test_abi_6_and_later_handle_no_file_right_and_scope_signals():
    libc = FakeLibc(7)
    assert C.confine(libc) == {"landlock_abi": 7, "trace": True, "signals": True}
    (fs, net, scoped), size = _ruleset(libc)
    assert size == 24 and fs == 0 and scoped == 1 << 1
    assert not [c for c in libc.calls if c[0] == 445]  # no rule
    assert libc.calls[-1][0] == 446  # restrict_self last


@pytest.mark.parametrize("abi,fail,call", [(7, "create", "landlock_create_ruleset"),
                                           (7, "prctl", "PR_SET_NO_NEW_PRIVS"),
                                           (7, "restrict", "landlock_restrict_self"), (4, "rule", "landlock_add_rule")])
def test_a_failed_step_leaves_the_worker_unconfined_and_names_it(abi, fail, call):
    got = C.confine(FakeLibc(abi, fail))
    assert got["trace"] is False and call in got["why"]


def _in_child(fn) -> str:
    """Run ``fn`` in a forked child; return what it wrote (its answer or its exception)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            msg = str(fn())
        except BaseException as e:  # pragma: no cover -- reported to the parent
            msg = f"error: {e!r}"
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


@pytest.mark.parametrize("abi", [2, 6])
def test_a_confined_process_can_still_move_a_file_into_another_directory(abi, tmp_path):
    """Triton's cache writes each kernel in a folder of its own and moves it into place: a
    domain that handled a file-system right and not renames made honest Triton candidates
    crash with EXDEV on an H100 (evidence/defences/confine-gpu/README.md)."""
    if C.landlock_abi() < abi:
        pytest.skip(f"this kernel's Landlock ABI is {C.landlock_abi()}")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()

    def attempt() -> str:
        assert C.confine(abi=abi)["trace"]
        (tmp_path / "a" / "f").write_text("x")
        os.replace(tmp_path / "a" / "f", tmp_path / "b" / "f")
        os.link(tmp_path / "b" / "f", tmp_path / "a" / "g")
        return (tmp_path / "b" / "f").read_text() + (tmp_path / "a" / "g").read_text()
    assert _in_child(attempt) == "xx"


@pytest.mark.parametrize("abi", [2, 6])
def test_a_confined_process_cannot_trace_or_open_the_memory_of_another(abi):
    import ctypes

    if C.landlock_abi() < abi:
        pytest.skip(f"this kernel's Landlock ABI is {C.landlock_abi()}")
    sleeper = os.fork()
    if sleeper == 0:
        time.sleep(30)
        os._exit(0)
    try:
        def attempt() -> str:
            got = C.confine(abi=abi)
            assert got["trace"], got
            libc = ctypes.CDLL(None, use_errno=True)
            libc.ptrace.restype = ctypes.c_long
            libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
            seize = libc.ptrace(0x4206, sleeper, None, None)
            errno = ctypes.get_errno()
            try:
                open(f"/proc/{sleeper}/mem", "rb").close()
                mem = "opened"
            except OSError as e:
                mem = type(e).__name__
            # Its own child it may still signal and wait for.
            own = os.fork()
            if own == 0:
                time.sleep(30)
                os._exit(0)
            os.kill(own, signal.SIGKILL)
            os.waitpid(own, 0)
            return f"{seize} {errno} {mem}"
        assert _in_child(attempt) == "-1 1 PermissionError"  # EPERM from ptrace; no handle on its memory
    finally:
        os.kill(sleeper, signal.SIGKILL)
        os.waitpid(sleeper, 0)


@pytest.mark.skipif(C.landlock_abi() < 6, reason="this kernel's Landlock scopes no signals (ABI 6, Linux 6.12)")
def test_a_confined_process_cannot_signal_another():
    def attempt() -> str:
        C.confine()
        try:
            os.kill(os.getppid(), 0)
            return "sent"
        except PermissionError:
            return "refused"
    assert _in_child(attempt) == "refused"
    os.kill(os.getpid(), 0)  # this process, outside the domain, is unchanged
