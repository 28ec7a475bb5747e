"""expkit: hold a kernel speed claim against a measurement.

The public surface, grouped by stage. The CLI (``expkit.cli``) is a thin layer over
these; tests call them directly.
"""

from .core.errors import ConfigError, ExpkitError, ManifestError
from .core.version import __version__
from .manifest.spec import LoadedManifest, Manifest, load as load_manifest
from .manifest.settings import Settings, load_settings

__all__ = [
    "ExpkitError", "ManifestError", "ConfigError",
    "Manifest", "LoadedManifest", "load_manifest",
    "Settings", "load_settings",
    "Workload",
    "run", "load", "Result", "audit",
    "__version__",
]


def __getattr__(name: str) -> object:
    # ``Workload`` (what an ``end_to_end.workload`` builder returns) is imported on first
    # use, so that ``import expkit`` stays as light as the manifest and settings it needs.
    if name == "Workload":
        # lazy: `import expkit` loads no torch; the names that need it resolve on first use
        from .workload.collect import Workload

        return Workload
    # The Python API (expkit/api/): ``expkit.run``, ``expkit.load`` and their ``Result``,
    # imported on first use for the same reason (the runner brings torch).
    if name in ("run", "load", "Result", "audit"):
        # lazy: `import expkit` loads no torch; the names that need it resolve on first use
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'expkit' has no attribute {name!r}")
