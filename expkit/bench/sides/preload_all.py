"""A preload module: importing it imports everything :func:`.preload.preload_for` names for a
GPU run. For a process that others fork from and that cannot call code, only import modules:
a suite's fork server (``suites/manifest_process.py``), whose manifest processes then fork
their workers with all of it imported once."""

from __future__ import annotations

import importlib

from .preload import preload_for

for _name in preload_for("cuda"):
    importlib.import_module(_name)
