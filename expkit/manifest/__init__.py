"""The manifest stage: what a claim says, and what a run is configured with.

* :mod:`.spec` -- the typed, frozen manifest (schema v1) and :func:`load`; re-exported
  here, so ``from expkit.manifest import load`` names the loader.
* :mod:`.schema` -- builds frozen dataclasses from YAML data, naming the key at fault.
* :mod:`.refs` -- ``module:function`` references, resolved beside the manifest first.
* :mod:`.settings` -- the runner's settings (Hydra), never the claim.
* :mod:`.catalog`, :mod:`.prices` -- the GPU catalog and the dated price lists of ``conf/``.
* :mod:`.paths` -- where ``conf/`` lives, in a checkout and in a wheel.

Everything here is read before anything runs; it imports only :mod:`expkit.core`.
"""

from .spec import (AGGREGATES, KERNELBENCH_TOLERANCE, MODEL_ORACLE_KINDS, ORACLE_KINDS, PER_CALL_ORACLE_KINDS, PRECISIONS,
                   SCHEMA_VERSION, Case, Claim, EndToEnd, Expect, Inputs, KernelBench, LaunchExpect, Limits,
                   LoadedManifest, Manifest, Measure, Oracle, Target, load)

__all__ = [
    "SCHEMA_VERSION", "ORACLE_KINDS", "PER_CALL_ORACLE_KINDS", "MODEL_ORACLE_KINDS", "AGGREGATES", "PRECISIONS", "KERNELBENCH_TOLERANCE",
    "Claim", "Limits", "Target", "Inputs", "Case", "LaunchExpect", "Expect", "Oracle", "Measure", "KernelBench",
    "EndToEnd", "Manifest", "LoadedManifest", "load",
]
