"""Replaces standard-library functions the worker's channel uses (issue #49), from expkit's source.

``install(name, transform)`` swaps a module attribute (``json.dumps``, ``hmac.new``,
``os.write``, ...) for a wrapper that counts the calls the harness's channel makes
through it (callers in ``expkit.bench``) and may change what passes through. Each
candidate module beside this one registers its set at import; they are installed at
its first call inside a timed block (found on the stack: ``SideBench.block``), after
the import's and the preflight's tamper checks, so that the run is measured and the
effect, if any, shows in the figure. The candidate computes the baseline's product
honestly: its honest figure is 1.00x, so any speedup it reads is the wrapper's. ``told()`` writes the counts to stderr (the worker's evidence file) as
``adv_stdlib: reach {...}``, when they change.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Dict, Optional

import torch

import adv_kernels  # noqa: F401  (the custom ops)

REACH: Dict[str, int] = {}
_ARMED: list = []
_last = [0.0]
_clock = time.perf_counter


def install(*args: Any, **kwargs: Any) -> None:
    """Register :func:`install_now` for the first call inside a timed block."""
    _ARMED.append((args, kwargs))


def _in_block() -> bool:
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "block" and f.f_globals.get("__name__") == "expkit.bench.sides.side":
            return True
        f = f.f_back
    return False


def install_now(module: Any, name: str, transform: Optional[Callable[[Any], Any]] = None, *,
            on_args: Optional[Callable[[tuple], tuple]] = None) -> None:
    """Replace ``module.name`` by a wrapper that counts the harness's calls through it;
    ``on_args`` may rewrite their arguments, ``transform`` their result."""
    real = getattr(module, name)
    key = f"{getattr(module, '__name__', module)}.{name}"
    REACH.setdefault(key, 0)

    def fake(*args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        ours = caller.startswith("expkit.bench.")
        if ours:
            REACH[key] += 1
            if on_args is not None:
                args = on_args(args)
        out = real(*args, **kwargs)
        return transform(out) if ours and transform is not None else out

    setattr(module, name, fake)


_said: list = [None]


def told() -> None:
    """The counts to stderr when they changed, at most twenty times a second."""
    now, counts = _clock(), dict(sorted(REACH.items()))
    if counts != _said[0] and now - _last[0] > 0.05:
        _last[0], _said[0] = now, counts
        print(f"adv_stdlib: reach {counts}", file=sys.stderr, flush=True)


def scale(x: torch.Tensor) -> torch.Tensor:
    if _ARMED and _in_block():
        for args, kwargs in _ARMED:
            install_now(*args, **kwargs)
        _ARMED.clear()
        _last[0] = 0.0
    told()
    return torch.ops.adv.scale(x)
