"""Fresh inputs: every timed call gets inputs that no earlier call has seen.

Made before its timed span starts. The default, ``salt``, copies one element of one
floating input over another at a position drawn from a secret RNG: on the CPU about half a
microsecond a call whatever the input size and dtype (evidence/README.md),
bumps the tensor's version counter and changes
its content, so a cache keyed on a pointer, a version or a content hash either misses
(and the candidate pays for the work) or returns a stale answer (which the recheck
catches). Full regeneration by the factory (``regenerate``) costs about as much as a
memory-bound op itself, which is why it is not the default.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.autograd import graph as autograd_graph

from ...checks.preflight import clone_inputs

FRESH_MODES = ("salt", "regenerate", "off")
#: Salt draws made at once per input set: a refill took about 60 us on the 2-core machine, 0.06 us a draw.
SALT_BATCH = 1024
#: A block's first refill of each set draws this many, and each later one twice the last, up to
#: ``SALT_BATCH``, so a block's salts cost in proportion to its calls; the first refills are made
#: as the block begins. The parent's clock credits the harness's work a call, read around the calls
#: (:mod:`.outside_clock`): a fixed cost a block there would count against the side that runs
#: fewer calls a block, an honest candidate slower than its baseline.
SALT_FIRST = 4
#: The integer dtype of each element width, to copy an element's bits whatever it holds.
_INT_OF_WIDTH = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def _writable_elements(t: Any) -> Optional[memoryview]:
    """A one-dimensional memoryview of a contiguous CPU tensor's elements, each read as an
    integer of its width (an element copied through it is copied bit for bit), or None where
    there is none (another device, a strided tensor, an element wider than 8 bytes)."""
    width = t.element_size()
    name = _INT_OF_WIDTH.get(width)
    if t.device.type != "cpu" or not t.is_contiguous() or name is None:
        return None
    try:
        view = memoryview(t.detach().view(getattr(torch, name)).numpy().reshape(-1))
        view[0] = view[0]  # a buffer that cannot be written through this way says so here
    except (TypeError, RuntimeError, ValueError, NotImplementedError):
        return None
    return view


def _version_bump() -> Callable[[Tuple[Any, ...]], None]:
    """What bumps the version counters of a tuple of tensors by one each.

    torch's public ``torch.autograd.graph.increment_version`` wraps a private call that,
    in torch 2.13 (the CPU wheel this project tests with), takes the tuple itself and saves
    the wrapper's checks: a defended GEMV's untimed work a call read 1.32-1.38 us with it and
    1.53-1.56 us with the public call (the 2-core machine,
    evidence/README.md). A private call's signature
    is torch's to change, so it is tried once on a scratch tensor and used only where it
    bumps by exactly one; otherwise the public call, given the tensor."""
    increment_version = autograd_graph.increment_version
    private = getattr(torch._C, "_increment_version", None)
    probe = torch.zeros(2)
    try:
        before = probe._version
        private((probe,))  # type: ignore[misc]
        if probe._version == before + 1:
            return private  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - any failure means: not this way
        pass
    return lambda one: increment_version(one[0])


def _unravel(flat: int, shape: Sequence[int]) -> Tuple[int, ...]:
    out = []
    for d in reversed(shape):
        flat, r = divmod(flat, d)
        out.append(r)
    return tuple(reversed(out))


class FreshInputs:
    """The input sets of one case, made new before every timed call.

    ``sets`` rotate as in the undefended loop (so the working set is the same); before
    each call the set about to be used is refreshed according to ``mode``:

    * ``salt``: one floating tensor of the set (drawn at random) gets one element
      overwritten by another of its own elements, both positions from ``rng``. The
      value stays in the input's own distribution (no out-of-range value for a
      kernel that assumes, say, positive inputs) and integer tensors, which may hold
      indices, are never touched. A set without a floating tensor of two or more
      elements cannot be salted (``salted`` stays False).
    * ``regenerate``: the set is rebuilt by ``rebuild(seed)`` with a fresh seed.
    * ``off``: nothing (the undefended behaviour).

    ``take(keep)`` returns the arguments for the next call, and with ``keep`` a
    pristine copy of them for the recheck.

    **Blocks the baseline's side can replay.** ``begin_block(seed)`` first undoes every
    salt since the sets were made (each salt logs the bits it overwrote), then draws the
    block's salts from ``seed`` alone, starting from the first set. The inputs of the
    ``k``-th take of a block are then a function of the factory's sets, ``seed`` and ``k``:
    :meth:`replay` rebuilds them in another process (the baseline's, which judges), so a
    call's inputs are never taken on the word of the process that ran it.
    """

    def __init__(self, sets: List[Tuple[Any, ...]], mode: str, rng: random.Random,
                 rebuild: Optional[Callable[[int], Tuple[Any, ...]]] = None) -> None:
        if mode not in FRESH_MODES:
            raise ValueError(f"fresh must be one of {FRESH_MODES}, got {mode!r}")
        if not sets:
            raise ValueError("at least one input set is needed")
        self._clone = clone_inputs
        self._bump = _version_bump()
        self.sets = list(sets)
        self.mode = mode
        self.rng = rng
        # Positions come in batches drawn from a generator seeded by ``rng``: as secret as
        # ``rng`` itself (both live in this process's memory), a fraction of the per-call cost.
        self._gen = np.random.default_rng(rng.getrandbits(128))
        self.rebuild = rebuild
        self._next = 0
        self.index = 0
        self._targets = [self._floating(s) for s in self.sets]
        self._draws: List[Iterator[Tuple[int, int, int]]] = [iter(()) for _ in self.sets]
        self._refills = [0] * len(self.sets)  # this block's refills of each set (their sizes double)
        self.salted = mode != "salt" or any(self._targets)
        #: Every salt since the sets were made: (set, target, flat position, old value), undone
        #: by ``begin_block``; the sets the regenerate mode replaced, to put back.
        self._log: List[Tuple[int, int, int, Any]] = []
        self._initial = list(self.sets)

    def begin_block(self, seed: int) -> None:
        """Back to the factory's sets, then this block's salts from ``seed`` (see the class)."""
        for j, which, p, old in reversed(self._log):
            t, flat, one, _ = self._targets[j][which]
            if flat is not None:
                flat[p] = old
                self._bump(one)
            else:
                with torch.no_grad():
                    t[_unravel(p, t.shape)] = old
        self._log.clear()
        if self.mode == "regenerate":
            self.sets = list(self._initial)
            self._targets = [self._floating(s) for s in self.sets]
        self._gen = np.random.default_rng(int(seed) & ((1 << 63) - 1))
        self._draws = [iter(()) for _ in self.sets]
        self._refills = [0] * len(self.sets)
        self._next = 0
        if self.mode == "salt":
            # Each set's first draws now, in the order its first take would make them, so the
            # block's draws are the same; a block's fixed work then falls among its checks
            # (its start), not in the work around its calls (see SALT_FIRST).
            for j, targets in enumerate(self._targets):
                if targets:
                    self._refill(j)

    @classmethod
    def replay(cls, sets: List[Tuple[Any, ...]], mode: str, seed: int, takes: int,
               undo: Sequence[Tuple[int, int, int, Any]] = (),
               rebuild: Optional[Callable[[int], Tuple[Any, ...]]] = None) -> Tuple[Any, ...]:
        """The arguments of take number ``takes`` (1 for the first) of the block seeded
        ``seed``, rebuilt on copies of ``sets`` (``undo``: the salts those sets carry now,
        which ``begin_block`` undoes first). Costs one copy of the sets and ``takes`` salts."""
        copies = [clone_inputs(s) for s in sets]
        twin = cls(copies, mode, random.Random(0), rebuild)
        twin._log = list(undo)
        twin._initial = list(copies)
        twin.begin_block(seed)
        args: Tuple[Any, ...] = ()
        for _ in range(max(1, takes)):
            args, _ = twin.take()
        return args

    @staticmethod
    def _floating(args: Sequence[Any]) -> List[Tuple[Any, Any, Tuple[Any], int]]:
        """(tensor, a writable view of its elements or None, the 1-tuple the version bump
        takes, element count) per salt target.

        On the CPU an element is copied, bit for bit, through a memoryview of the same
        memory read as integers of the element's width (so bfloat16, float8 and complex
        elements take the same path as float32), and the tensor's version counter is bumped
        by hand, with the draws made in batches: 0.55-0.59 us a call against 1.08-1.14 with
        a NumPy view of the floats and three draws from ``random`` a call, and 0.56 against
        8.44-8.55 us for bfloat16, which took torch's own indexing (the 2-core machine,
        evidence/README.md). That
        matters for ops of a few microseconds. The bump: :func:`_version_bump`."""
        out = []
        for t in args:
            if not (isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and t.numel() >= 2):
                continue
            out.append((t, _writable_elements(t), (t,), t.numel()))
        return out

    def _refill(self, j: int) -> Iterator[Tuple[int, int, int]]:
        """The next batch of (target, position, source) draws for set ``j``: the source is
        any position but the target's (a float product can round up to its bound: kept
        below it)."""
        targets = self._targets[j]
        size = min(SALT_BATCH, SALT_FIRST << min(self._refills[j], 16))
        self._refills[j] += 1
        u = self._gen.random((size, 3))
        which = np.minimum((u[:, 0] * len(targets)).astype("int64"), len(targets) - 1)
        n = np.asarray([x[3] for x in targets], dtype="int64")[which]
        p = np.minimum((u[:, 1] * n).astype("int64"), n - 1)
        q = np.minimum((u[:, 2] * (n - 1)).astype("int64"), n - 2)
        q += q >= p
        it = zip(which.tolist(), p.tolist(), q.tolist())
        self._draws[j] = it
        return it

    def refresh(self, j: int) -> None:
        if self.mode == "salt":
            targets = self._targets[j]
            if not targets:
                return
            try:
                which, p, q = next(self._draws[j])
            except StopIteration:
                which, p, q = next(self._refill(j))
            t, flat, one, _ = targets[which]
            if flat is not None:
                self._log.append((j, which, p, flat[p]))
                flat[p] = flat[q]
                self._bump(one)
            else:
                with torch.no_grad():
                    at = _unravel(p, t.shape)
                    self._log.append((j, which, p, t[at].clone()))
                    t[at] = t[_unravel(q, t.shape)]
        elif self.mode == "regenerate" and self.rebuild is not None:
            self.sets[j] = self.rebuild(int(self._gen.integers(1 << 62)))
            self._targets[j] = self._floating(self.sets[j])
            self._draws[j] = iter(())

    def take(self, keep: bool = False) -> Tuple[Tuple[Any, ...], Optional[Tuple[Any, ...]]]:
        j = self._next % len(self.sets)
        self._next += 1
        self.index = j
        self.refresh(j)
        args = self.sets[j]
        return args, (self._clone(args) if keep else None)
