"""Each timed call's output, committed before anyone chooses which call to check.

A block keeps every call's output (:meth:`Commitments.keep`, a reference) and, when its
calls are done, digests each one (:meth:`Commitments.seal`); the digests leave the worker
in the block's reply. Only then does the parent draw, from randomness the worker never
held, which calls (if any) the baseline's worker re-checks (:class:`.envelope.RecheckPolicy`).
While the candidate's calls run, the choice does not exist yet, so no frame, object or
thread in its process can tell which call will count; and once the digests are sent, an
output made right afterwards no longer matches its digest (the judge digests what it is
shown, in the baseline's process). Making every output right after the calls is the
honest work moved out of the timed spans, which the parent's clock sees
(:mod:`.outside_clock`). Every call is committed, not a few drawn in the worker: a
candidate that rewrites the harness's objects could choose those few.

The digest (:func:`sampled_digests`) is SHA-256 over each output tensor's shape, dtype
and ``SAMPLE`` of its elements (in runs of ``RUN``) at places drawn from the operating
system's randomness when the block's calls are done (all of them for a smaller tensor), gathered where the tensor lives and copied
to the host in one transfer a block. A full hash of every output cost 86 us a call on
the example matrix chain's 256 KiB outputs on the 2-core machine (SHA-256 reads about
2 GB/s there), 40% of the candidate's call; the sample costs the same whatever the
size, a few microseconds of Python an output (one tensor on the host: :func:`_host_fast`). An output the candidate made wrong during its calls cannot agree with the right
one at positions not drawn yet; one that differs in a fraction ``p`` of its elements is
seen with probability ``1 - (1 - p)^SAMPLE`` where the wrong elements are spread (0.92 at
``p`` = 1%), ``1 - (1 - p)^(SAMPLE / RUN)`` where they lie together (0.56 at 5%, certain
for a third of the rows left undone). What the sample
leaves is in ``docs/threat-model.md``.

**Memory.** Outputs are kept while they fit in ``capacity`` bytes a block (a request's
blocks are all held until the next request: the parent picks after the reply). Past it, a reservoir of as
many as fit is kept, each call's place in it drawn from ``secrets`` once that call has
returned; a reply then says how many calls were kept (``kept`` < ``calls``), and only
those can be picked: the report says so. ``capacity`` 0 (the memory plan has no room)
keeps a reservoir of one. ``fits`` in a reply says how many outputs of the block's size
the capacity holds: the parent holds the candidate's ``held`` against the baseline's
``fits`` (the same output shapes), so a worker that holds fewer than fit is seen.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ...checks.oracles import flatten

#: Bytes of outputs a side keeps for its commitments (its last block request's).
COMMIT_BYTES = 1 << 29
#: Outputs up to this size are copied when their call returns, larger ones held: a copy is a
#: commitment no later write can change, and lets the next call reuse the freed memory.
COPY_BYTES = 1 << 16
#: The operating system's randomness, bound at import (before any code under test).
_SYSTEM_RANDOM = secrets.SystemRandom()
#: Elements of each output tensor a digest reads (all of a smaller one), in runs of ``RUN``
#: consecutive elements at random places: 256 single elements of a block's outputs, cold in
#: the cache by the block's end, cost 45-52 us an output in a worker on the 2-core machine
#: (6 us warm), a miss each; 16 runs of 16 cost a miss or two a run.
SAMPLE = 256
RUN = 16
_WORDS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}
_NP_WORDS = {"uint8": "u1", "int16": "i2", "int32": "i4", "int64": "i8"}


def _positions(n: int, seed: int, drawn: Dict[int, Any]) -> Any:
    """``SAMPLE`` sorted positions below ``n`` from ``seed`` (None: read all ``n``), one
    draw per size in ``drawn``."""
    if n <= SAMPLE:
        return None
    if n not in drawn:  # SHAKE-128 of (seed, n): a NumPy generator's seeding took 100-200 us a draw
        raw = hashlib.shake_128(seed.to_bytes(8, "little") + n.to_bytes(8, "little")).digest(8 * (SAMPLE // RUN))
        starts = np.frombuffer(raw, dtype="<u8") % np.uint64(n - RUN + 1)
        drawn[n] = np.sort((starts.astype(np.int64)[:, None] + np.arange(RUN)).reshape(-1))
    return drawn[n]


def _sample(t: Any, seed: int, drawn: Dict[int, Any], devices: Dict[Any, Any]) -> Tuple[bytes, Any]:
    """(shape and dtype, the sampled elements' bytes) of one tensor: on the host through a
    NumPy view of its bytes (torch's own indexing of 4096 elements took 7 ms on the
    2-core machine, its thread pool contending), on a device gathered there."""
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    head = repr((tuple(t.shape), str(t.dtype))).encode()
    flat = t.reshape(-1) if t.is_contiguous() else t.flatten()
    n, width = flat.numel(), flat.element_size()
    where = _positions(n, seed, drawn)
    word = _WORDS.get(width)
    if word is not None and n:  # elements as integers of their width: NumPy indexes a 1-D view fastest
        rows = flat.view(getattr(torch, word))
    else:
        rows = flat.view(torch.uint8).reshape(n, width) if n else flat.new_empty((0, width), dtype=torch.uint8)
    if rows.device.type == "cpu":
        a = rows.numpy()
        return head, (a if where is None else a[where]).tobytes()
    if where is not None:
        key = (n, rows.device)
        if key not in devices:
            devices[key] = torch.from_numpy(where).to(rows.device)
        rows = rows[devices[key]]
    return head, rows.reshape(-1).view(torch.uint8)


def _host_fast(t: Any, seed: int, drawn: Dict[int, Any], heads: Dict[Any, bytes]) -> Optional[str]:
    """The digest of a one-tensor output on the host in a few calls (a block of a tiny op
    digests hundreds), or None where the general path is needed."""
    if t.device.type != "cpu" or not t.is_contiguous() or t.is_conj() or t.is_neg():
        return None
    word = _WORDS.get(t.element_size())
    if word is None:
        return None
    key = (tuple(t.shape), t.dtype)
    head = heads.get(key)
    if head is None:
        h = repr((tuple(t.shape), str(t.dtype))).encode()
        head = heads[key] = len(h).to_bytes(8, "little") + h
    n = t.numel()
    try:  # NumPy's own views cost a third of torch's (bfloat16 has no NumPy dtype: torch's then)
        a = t.detach().numpy().reshape(-1).view(_NP_WORDS[word])
    except TypeError:
        a = t.detach().reshape(-1).view(getattr(torch, word)).numpy()
    where = _positions(n, seed, drawn)
    data = (a if where is None else a[where]).tobytes()
    mac = hashlib.sha256(seed.to_bytes(8, "little"))
    mac.update(head + len(data).to_bytes(8, "little"))
    mac.update(data)
    return mac.hexdigest()


def sampled_digests(outputs: Sequence[Sequence[Any]], seed: int) -> List[str]:
    """One hex digest per output (a sequence of tensors): SHA-256 over each tensor's shape,
    dtype and elements at positions drawn from ``seed`` (see the module). A device's
    gathered elements reach the host in one copy."""
    drawn: Dict[int, Any] = {}
    heads: Dict[Any, bytes] = {}
    if all(len(o) == 1 for o in outputs):
        fast = [_host_fast(o[0], seed, drawn, heads) for o in outputs]
        if None not in fast:
            return fast  # type: ignore[return-value]
    devices: Dict[Any, Any] = {}
    picked = [(k, *_sample(t, seed, drawn, devices)) for k, tensors in enumerate(outputs) for t in tensors]
    on_device = [i for i, (_, _, v) in enumerate(picked) if not isinstance(v, bytes)]
    if on_device:
        joined = torch.cat([picked[i][2] for i in on_device]).cpu().numpy().tobytes()
        at = 0
        for i in on_device:
            k, head, v = picked[i]
            picked[i] = (k, head, joined[at:at + v.numel()])
            at += v.numel()
    macs = [hashlib.sha256(seed.to_bytes(8, "little")) for _ in outputs]
    for k, head, data in picked:
        macs[k].update(len(head).to_bytes(8, "little") + head + len(data).to_bytes(8, "little"))
        macs[k].update(data)
    return [m.hexdigest() for m in macs]


def _copy(out: Any) -> Any:
    """A copy of an output's tensors in its own structure (a tensor, tuples, lists, dicts)."""
    if hasattr(out, "element_size"):
        return out.detach().clone()
    if isinstance(out, (tuple, list)):
        return type(out)(_copy(o) for o in out)
    if isinstance(out, dict):
        return {k: _copy(v) for k, v in out.items()}
    return out


def nbytes(out: Any) -> int:
    """Bytes of an output's tensors (a tensor, or nested tuples/lists/dicts of them)."""
    if hasattr(out, "element_size"):
        return int(out.numel() * out.element_size())
    if isinstance(out, (tuple, list)):
        return sum(nbytes(o) for o in out)
    if isinstance(out, dict):
        return sum(nbytes(o) for o in out.values())
    return 0


class Commitments:
    """The kept outputs of this side's last block request and their digests (see the module)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.blocks: List[Dict[int, Any]] = []
        self._bytes = 0
        self._calls = 0
        self._slots = 0  # the reservoir's size, once one was needed (0: every call kept)

    def open_request(self) -> None:
        """A new block request: the last one's outputs go (the parent has picked from them)."""
        self.blocks = []
        self._bytes = 0

    def open_block(self) -> None:
        self.blocks.append({})
        self._calls = 0
        self._slots = 0
        self._bytes = 0
        self._each = 0

    def keep(self, call: int, out: Any, copy: bool = True) -> None:
        """Keep call ``call``'s output (a copy where ``copy``), or (past the capacity) give it
        a reservoir place, drawn now that the call has returned. The bench holds the outputs
        themselves: each call then writes to memory no earlier call of its block freed,
        which a copy would avoid at the price of a copy a call (see :meth:`..sides.side.CaseState.commit_pending`)."""
        if copy:
            out = _copy(out)
        kept = self.blocks[-1]
        self._calls += 1
        size = nbytes(out)
        self._each = max(self._each, size)
        if not self._slots and (self._bytes + size <= self.capacity or not kept):
            kept[call] = out
            self._bytes += size
            if self._bytes > self.capacity:
                self._slots = max(1, len(kept))
            return
        if not self._slots:
            self._slots = max(1, len(kept))
        j = _SYSTEM_RANDOM.randrange(self._calls)
        if j < self._slots:
            victim = sorted(kept)[j] if len(kept) >= self._slots else None
            if victim is not None:
                del kept[victim]
            kept[call] = out

    def seal(self) -> Dict[str, Any]:
        """The block's commitment: every held call's digest, under positions drawn from the
        operating system's randomness now that every call has returned; and how many calls
        ran and how many outputs were held (fewer where the capacity made a reservoir)."""
        block = self.blocks[-1]
        calls = sorted(block)
        seed = _SYSTEM_RANDOM.getrandbits(63)
        digests = sampled_digests([flatten(block[i]) for i in calls], seed)
        fits = self.capacity // self._each if self._each else self._calls
        return {"seed": seed, "calls": self._calls, "held": len(calls), "fits": max(1, fits),
                "kept": [[i, d] for i, d in zip(calls, digests)]}

    def output(self, block: int, call: int) -> Optional[Any]:
        if not 0 <= block < len(self.blocks):
            return None
        return self.blocks[block].get(call)


def committed_calls(commits: Optional[Dict[str, Any]]) -> Tuple[int, int, List[int]]:
    """(calls run, outputs held until the block ended, indices of the committed calls) of a
    block reply's ``commits``."""
    if not commits:
        return 0, 0, []
    return (int(commits.get("calls", 0)), int(commits.get("held", 0)),
            [int(i) for i, _ in commits.get("kept", ())])
