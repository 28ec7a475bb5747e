"""The floor under a block's round trip: what one request and reply between two Python
processes cost on this machine, with nothing of the harness's checks in them.

Usage::

    python benchmarks/channel_floor.py [--rounds 3000] [--busy-us 2000] [--pinned]

A parent and a forked child exchange one request and one reply per round, through two
pipes, three ways: bare bytes (``os.write`` / ``os.read``), and expkit's authenticated
:class:`~expkit.bench.processes.channel.Channel` with a block request and a reply the size of a
block's (JSON, HMAC-SHA256). ``--busy-us`` makes the child spin that long between
request and reply (a timed block's length; 0 for none), so that the round trip is read
as the harness sees it: the parent asleep in ``read`` while the child works, then woken.
The table gives the median and the 90th percentile of the round trip less the child's
spin, and that median as a share of the spin: the part of a block's wall time that a
parent-worker round trip alone costs, before any check. Issue 13's cost target (5% of
``honest-win``'s 2 ms blocks at ``quick``) is to be read against it. ``--pinned`` puts both
processes on one core (the highest-numbered), as a CPU run's relay does
(``defences.pin_cores``, ``bench/processes/cores.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: A reply like a CPU block's (``SideBench.block``), its floats as they come.
REPLY = {"seconds": 0.000412345, "number": 4, "timed": 0.00164938, "untimed": 0.0000512, "recheck": 0.0,
         "checks": 0.000291, "wall": 0.00201, "t0": 12345.6789, "t1": 12345.6809, "method": "perf_counter",
         "timing": None, "findings": [], "kept": None}
REQUEST = {"op": "block", "number": 4, "recheck": None}


def spin(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def _pin(pinned: bool) -> object:
    """This process on the highest-numbered of its cores, through the relay's own
    :func:`expkit.bench.processes.cores.pin`; what :func:`_unpin` needs to give them back."""
    from expkit.bench.processes import cores

    had = cores.current() if pinned else None
    return cores.pin(frozenset({max(had)})) if had else None


def _unpin(had: object) -> None:
    from expkit.bench.processes import cores

    cores.unpin(had)  # type: ignore[arg-type]


def bare(rounds: int, busy_us: float, pinned: bool = False) -> list:
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    body_req, body_rep = json.dumps(REQUEST).encode(), json.dumps(REPLY).encode()
    pid = os.fork()
    if pid == 0:
        _pin(pinned)
        for _ in range(rounds):
            os.read(req_r, 4096)
            spin(busy_us)
            os.write(rep_w, body_rep)
        os._exit(0)
    wide = _pin(pinned)
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        os.write(req_w, body_req)
        os.read(rep_r, 4096)
        out.append(time.perf_counter() - t0)
    os.waitpid(pid, 0)
    _unpin(wide)
    for fd in (req_r, req_w, rep_r, rep_w):
        os.close(fd)
    return out


def framed(rounds: int, busy_us: float, pinned: bool = False) -> list:
    from expkit.bench.processes.channel import Channel

    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    key = os.urandom(32)
    pid = os.fork()
    if pid == 0:
        _pin(pinned)
        ch = Channel(req_r, rep_w, key)
        for _ in range(rounds):
            ch.recv()
            spin(busy_us)
            ch.send(REPLY)
        os._exit(0)
    wide = _pin(pinned)
    ch = Channel(rep_r, req_w, key)
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        ch.send(REQUEST)
        ch.recv(timeout=10.0)
        out.append(time.perf_counter() - t0)
    os.waitpid(pid, 0)
    _unpin(wide)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3000)
    p.add_argument("--busy-us", type=float, nargs="*", default=[0.0, 2000.0])
    p.add_argument("--pinned", action="store_true", help="both processes on one core, as a CPU run's relay")
    a = p.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, Python {sys.version.split()[0]}"
          f"{', both processes on one core' if a.pinned else ''}\n")
    print("| channel | child's spin (us) | rounds | round trip less spin: median us | p90 us | median / spin |")
    print("|---|---|---|---|---|---|")
    for busy in a.busy_us:
        for name, fn in (("bare pipes", bare), ("expkit Channel (JSON + HMAC)", framed)):
            got = sorted((t * 1e6 - busy) for t in fn(a.rounds, busy, a.pinned)[a.rounds // 10:])
            med, p90 = statistics.median(got), got[int(0.9 * len(got))]
            share = f"{med / busy:.1%}" if busy else "-"
            print(f"| {name} | {busy:.0f} | {a.rounds} | {med:.1f} | {p90:.1f} | {share} |")


if __name__ == "__main__":
    main()
