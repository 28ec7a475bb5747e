"""Native libraries already loaded in this process: find one by name in the memory map, and
open it without loading anything new (``RTLD_NOLOAD``).

The fork check asks the CUDA driver whether it was initialised (:mod:`..sides.endpoint`), and a
worker gives scipy's OpenBLAS its thread count back (:mod:`.blas`): both talk to a library
only where this process has it already, so neither can load a driver or start a pool.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Optional


def mapped_library(name: bytes, *, unless: Optional[bytes] = None, maps: str = "/proc/self/maps") -> Optional[str]:
    """The path of the first library mapped here whose line holds ``name`` (and not
    ``unless``), or None; None too where the map cannot be read (not Linux)."""
    try:
        with open(maps, "rb") as f:
            for line in f:
                if name in line and (unless is None or unless not in line):
                    return line.split(None, 5)[-1].strip().decode(errors="replace")
    except OSError:
        return None
    return None


def open_loaded(path: str) -> Any:
    """The library at ``path`` if this process has it loaded; raises ``OSError`` if not."""
    return ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
