"""``python -m expkit.cli``, as ``expkit`` (``python -m expkit`` does the same)."""

from .commands import entry

entry()
