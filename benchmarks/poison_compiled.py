"""Does the preflight's poison (deterministic mode + fill_uninitialized_memory) reach code
torch.compile generates? (docs/threat-model.md, "Poisoned allocations and compiled code")

Usage::

    python benchmarks/poison_compiled.py   # about a minute on a 2-core CPU: inductor compiles C++

A function that allocates one element more than it writes is compiled with inductor and
called with the mode on, then with it off. Printed: the unwritten element eagerly and
compiled, each way, and whether inductor's generated source writes a NaN itself.
"""

from __future__ import annotations

import glob
import os
import tempfile

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="expkit-poison-"))

import torch  # noqa: E402
import torch.utils.deterministic as det  # noqa: E402


def unwritten_tail(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[0] + 1)
    out[:-1] = x * 2
    return out


def main() -> int:
    compiled = torch.compile(unwritten_tail)
    x = torch.randn(1000)
    was = (torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    print(f"torch {torch.__version__}")
    print(f"mode on:  eager tail {float(unwritten_tail(x)[-1])}, compiled tail {float(compiled(x)[-1])}")
    torch.use_deterministic_algorithms(False)
    print(f"mode off: eager tail {float(unwritten_tail(x)[-1])}, compiled tail {float(compiled(x)[-1])}")
    torch.use_deterministic_algorithms(*was[:1], warn_only=False)
    det.fill_uninitialized_memory = was[1]
    sources = glob.glob(os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "**", "*.py"), recursive=True)
    writes_nan = any("quiet_NaN" in open(p).read() for p in sources)
    print(f"inductor's generated code writes a NaN itself: {writes_nan} ({len(sources)} generated files)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
