"""Fresh inputs: every timed call gets inputs that no earlier call has seen.

Made before its timed span starts. The default, ``salt``, copies one element of one
floating input over another at a position drawn from a secret RNG: it costs a few
microseconds whatever the input size, bumps the tensor's version counter and changes
its content, so a cache keyed on a pointer, a version or a content hash either misses
(and the candidate pays for the work) or returns a stale answer (which the recheck
catches). Full regeneration by the factory (``regenerate``) costs about as much as a
memory-bound op itself, which is why it is not the default.
"""

from __future__ import annotations

import random
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ..checks.preflight import clone_inputs

FRESH_MODES = ("salt", "regenerate", "off")


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
    """

    def __init__(self, sets: List[Tuple[Any, ...]], mode: str, rng: random.Random,
                 rebuild: Optional[Callable[[int], Tuple[Any, ...]]] = None) -> None:
        if mode not in FRESH_MODES:
            raise ValueError(f"fresh must be one of {FRESH_MODES}, got {mode!r}")
        if not sets:
            raise ValueError("at least one input set is needed")
        from torch.autograd.graph import increment_version

        self._clone = clone_inputs
        self._bump = increment_version
        self.sets = list(sets)
        self.mode = mode
        self.rng = rng
        self._rand = rng.random
        self.rebuild = rebuild
        self._next = 0
        self.index = 0
        self._targets = [self._floating(s) for s in self.sets]
        self.salted = mode != "salt" or any(self._targets)

    @staticmethod
    def _floating(args: Sequence[Any]) -> List[Tuple[Any, Any, int]]:
        """(tensor, a NumPy view of its elements or None, element count) per salt target.

        On the CPU the element is written through a NumPy view of the same memory and
        the tensor's version counter bumped by hand: 0.4 us a call where torch's own
        indexing takes about 6 (both measured on the 2-core CI machine), which matters
        for ops of a few microseconds."""
        import torch

        out = []
        for t in args:
            if not (isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and t.numel() >= 2):
                continue
            flat = None
            if t.device.type == "cpu" and t.is_contiguous() and t.dtype not in (torch.bfloat16, torch.float8_e4m3fn,
                                                                                 torch.float8_e5m2):
                try:
                    flat = t.detach().numpy().reshape(-1)
                except (TypeError, RuntimeError):
                    flat = None
            out.append((t, flat, t.numel()))
        return out

    def refresh(self, j: int) -> None:
        if self.mode == "salt":
            targets = self._targets[j]
            if not targets:
                return
            rand = self._rand
            t, flat, n = targets[int(rand() * len(targets))] if len(targets) > 1 else targets[0]
            p = int(rand() * n)
            q = int(rand() * (n - 1))
            q += q >= p
            if flat is not None:
                flat[p] = flat[q]
                self._bump(t)
            else:
                import torch

                with torch.no_grad():
                    t[_unravel(p, t.shape)] = t[_unravel(q, t.shape)]
        elif self.mode == "regenerate" and self.rebuild is not None:
            self.sets[j] = self.rebuild(self.rng.getrandbits(62))
            self._targets[j] = self._floating(self.sets[j])

    def take(self, keep: bool = False) -> Tuple[Tuple[Any, ...], Optional[Tuple[Any, ...]]]:
        j = self._next % len(self.sets)
        self._next += 1
        self.index = j
        self.refresh(j)
        args = self.sets[j]
        return args, (self._clone(args) if keep else None)
