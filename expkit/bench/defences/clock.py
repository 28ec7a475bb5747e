"""The harness's clock, bound when expkit is imported, before any candidate code runs.

Every defended timing -- the per-call timer, the parent's envelope around each request,
the worker's account of a block -- reads :data:`CLOCK`. A candidate that later patches
``time.perf_counter`` changes the module attribute, not this binding (and the tamper
check reports that it tried). Modules that use it bind it at their own import, which is
also before any candidate code.
"""

from __future__ import annotations

import time

CLOCK = time.perf_counter
