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

Bound before the code under test. The channel's encoding (JSON), signing (HMAC-SHA256),
framing (``struct``) and I/O (``os.read``, ``os.write``, ``select.select``,
``time.monotonic``) are bound when this module is imported, which in a worker is before
its side's code is: the C functions themselves (``_json``'s encoder and scanner,
``_hashlib.hmac_digest``, the compare, the header's bound ``pack``/``unpack``), held as
default arguments, so that neither a replaced module attribute (``json.dumps``,
``hmac.new``, ``os.write``) nor a replaced name in this module reaches a message. The
worker's loop holds its channel's ``send`` and ``recv`` from before the import too
(:mod:`..sides.worker`). This is hygiene: a candidate that wrapped ``json.dumps`` to shrink the
times in its block replies, or ``json.loads`` to run half the calls asked, no longer
sits in the path (tests/adversarial/cpu/adv_stdlib.py); the tamper check reports the
replacement, and the parent's own clock stays the defence against a forged account.

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

#: The primitives every message goes through, bound now (module docstring).
_pack, _unpack = HEADER.pack, HEADER.unpack
_read, _write, _select, _monotonic = os.read, os.write, select.select, time.monotonic
_compare = hmac.compare_digest

CHANNEL, WORKER = "channel", "worker"


class ChannelError(Exception):
    """The channel can no longer be trusted (``check`` is ``channel`` or ``worker``)."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check, self.message = check, message


class RemoteError(RuntimeError):
    """An exception raised in the worker (the candidate's, or the harness's there)."""


def write_all(fd: int, data: bytes, _write: Callable[[int, Any], int] = _write) -> None:
    """All of ``data`` to ``fd`` (a pipe may take it in parts)."""
    view = memoryview(data)
    while view:
        n = _write(fd, view)
        view = view[n:]


def read_exact(fd: int, n: int, deadline: Optional[float], alive: Optional[Callable[[], bool]],
               _read: Callable[[int, int], bytes] = _read, _select: Any = _select,
               _monotonic: Callable[[], float] = _monotonic) -> bytes:
    """Exactly ``n`` bytes from ``fd``; :class:`ChannelError` past ``deadline`` (monotonic
    seconds), on a closed pipe, or once ``alive()`` says the worker is gone."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - _monotonic()
            if left <= 0:
                raise ChannelError(WORKER, "the worker did not answer in time (defences.timeout_seconds): "
                                   "the code under test hung, or is far slower than expected")
            wait = min(left, 0.5)
        else:
            wait = 0.5
        ready, _, _ = _select([fd], [], [], wait)
        if not ready:
            if alive is not None and not alive():
                raise ChannelError(WORKER, "the worker process died without closing the channel")
            continue
        chunk = _read(fd, n - len(buf))
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


def _bound_codec() -> tuple:
    """(encode, decode, sign): ``json.dumps(obj, default=_jsonable)``, ``json.loads`` and
    HMAC-SHA256 as the C functions behind them, made now (the module docstring); where an
    interpreter lacks those C modules, the Python functions as they are now."""
    dumps, loads, digest = json.dumps, json.loads, hmac.digest
    try:
        # lazy: CPython's C modules, which another interpreter may lack (the fallback below)
        import _hashlib
        import _json

        enc = _json.make_encoder(None, _jsonable, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True)
        scan = _json.make_scanner(json.JSONDecoder())
        mac = _hashlib.hmac_digest

        def encode(obj: Any, _enc: Any = enc, _join: Any = "".join) -> str:
            return _join(_enc(obj, 0))

        def decode(text: Any, _scan: Any = scan) -> Any:
            if isinstance(text, (bytes, bytearray)):
                text = bytes(text).decode("utf-8")
            try:
                obj, end = _scan(text, 0)
            except StopIteration as e:
                raise ValueError(f"not JSON at character {e.value}") from None
            if end != len(text):
                raise ValueError(f"extra data at character {end}")
            return obj

        def sign(key: bytes, msg: bytes, _mac: Any = mac) -> bytes:
            return _mac(key, msg, "sha256")

        return encode, decode, sign
    except (ImportError, AttributeError, TypeError):
        return ((lambda obj: dumps(obj, default=_jsonable)), loads, (lambda key, msg: digest(key, msg, sha256)))


_encode, _decode, _sign = _bound_codec()


class Channel:
    """Framed, authenticated JSON messages over a pair of pipe descriptors."""

    def __init__(self, rfd: int, wfd: int, key: bytes) -> None:
        if len(key) != KEY_LEN:
            raise ValueError("key must be 32 bytes")
        self._r, self._w, self._key = rfd, wfd, key
        self._sent = 0
        self._received = 0

    def _mac(self, head: bytes, body: bytes, _sign: Callable[[bytes, bytes], bytes] = _sign) -> bytes:
        return _sign(self._key, head + body)

    def send(self, obj: Mapping[str, Any], _encode: Callable[[Any], str] = _encode, _pack: Any = _pack,
             _write_all: Callable[[int, bytes], None] = write_all) -> None:
        body = _encode(obj).encode()
        head = _pack(MAGIC, len(body), self._sent)
        _write_all(self._w, head + body + self._mac(head, body))
        self._sent += 1

    def recv(self, timeout: Optional[float] = None, alive: Optional[Callable[[], bool]] = None,
             _decode: Callable[[Any], Any] = _decode, _unpack: Any = _unpack, _read_exact: Any = read_exact,
             _compare: Callable[[bytes, bytes], bool] = _compare, _monotonic: Callable[[], float] = _monotonic
             ) -> Dict[str, Any]:
        deadline = None if timeout is None else _monotonic() + timeout
        head = _read_exact(self._r, HEADER.size, deadline, alive)
        magic, n, seq = _unpack(head)
        if magic != MAGIC:
            raise ChannelError(CHANNEL, f"bytes the harness did not write arrived on the result channel "
                               f"(starting {head[:16]!r}): something in the worker wrote to its descriptor; "
                               "nothing on the channel is trusted from here on")
        if n > MAX_BODY:
            raise ChannelError(CHANNEL, f"a message on the result channel claims {n} bytes, over the "
                               f"{MAX_BODY}-byte limit: forged or corrupted")
        rest = _read_exact(self._r, n + MAC_LEN, deadline, alive)
        body, mac = rest[:n], rest[n:]
        if not _compare(mac, self._mac(head, body)):
            raise ChannelError(CHANNEL, "a message on the result channel failed authentication: it was forged "
                               "or altered by something other than the harness")
        if seq != self._received:
            raise ChannelError(CHANNEL, f"message {seq} arrived where {self._received} was due: replayed or "
                               "injected")
        self._received += 1
        try:
            return _decode(body)
        except ValueError as e:
            raise ChannelError(CHANNEL, f"an authenticated message is not JSON ({e})") from None
