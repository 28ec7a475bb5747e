"""The private, authenticated channel between the parent and its worker process.

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
"""

from __future__ import annotations

import hmac
import json
import os
import select
import struct
import time
from hashlib import sha256
from typing import Any, Callable, Dict, Mapping, Optional

MAGIC = b"EXK1"
HEADER = struct.Struct("!4sIQ")
MAC_LEN = 32
KEY_LEN = 32
MAX_BODY = 64 << 20

CHANNEL, WORKER = "channel", "worker"


class ChannelError(Exception):
    """The channel can no longer be trusted (``check`` is ``channel`` or ``worker``)."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check, self.message = check, message


class RemoteError(RuntimeError):
    """An exception raised in the worker (the candidate's, or the harness's there)."""


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd`` (a pipe may take it in parts)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_exact(fd: int, n: int, deadline: Optional[float], alive: Optional[Callable[[], bool]]) -> bytes:
    """Exactly ``n`` bytes from ``fd``; :class:`ChannelError` past ``deadline`` (monotonic
    seconds), on a closed pipe, or once ``alive()`` says the worker is gone."""
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
        write_all(self._w, head + body + self._mac(head, body))
        self._sent += 1

    def recv(self, timeout: Optional[float] = None, alive: Optional[Callable[[], bool]] = None) -> Dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        head = read_exact(self._r, HEADER.size, deadline, alive)
        magic, n, seq = HEADER.unpack(head)
        if magic != MAGIC:
            raise ChannelError(CHANNEL, f"bytes the harness did not write arrived on the result channel "
                               f"(starting {head[:16]!r}): something in the worker wrote to its descriptor; "
                               "nothing on the channel is trusted from here on")
        if n > MAX_BODY:
            raise ChannelError(CHANNEL, f"a message on the result channel claims {n} bytes, over the "
                               f"{MAX_BODY}-byte limit: forged or corrupted")
        rest = read_exact(self._r, n + MAC_LEN, deadline, alive)
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
