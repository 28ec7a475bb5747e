"""expkit: hold a kernel speed claim against a measurement.

The public surface, grouped by stage. The CLI (``expkit.cli``) is a thin layer over
these; tests call them directly.
"""

from .errors import ConfigError, ExpkitError, ManifestError
from .manifest import LoadedManifest, Manifest, load as load_manifest
from .settings import Settings, load_settings

__version__ = "0.1.0"

__all__ = [
    "ExpkitError", "ManifestError", "ConfigError",
    "Manifest", "LoadedManifest", "load_manifest",
    "Settings", "load_settings",
    "__version__",
]
