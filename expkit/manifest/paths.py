"""Where expkit's shipped data lives, in a checkout and in an installed wheel.

The repository keeps Hydra configuration in the top-level ``conf/`` folder (the
design card's layout); ``pyproject.toml`` maps that folder into the wheel as the
package ``expkit.conf``. Both resolve to a real directory on disk, which is what
Hydra's ``initialize_config_dir`` needs.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

_CHECKOUT_CONF = Path(__file__).resolve().parents[2] / "conf"  # expkit/manifest/paths.py -> the checkout


def conf_dir() -> Path:
    """The absolute path of the configuration folder (presets, GPU catalog, prices)."""
    try:
        packaged = Path(str(resources.files("expkit.conf")))
        if (packaged / "expkit.yaml").is_file():
            return packaged
    except ModuleNotFoundError:
        pass
    return _CHECKOUT_CONF


def read_versioned_yaml(path: Path, *, schema_version: int, what: str, error: type) -> dict:
    """A configuration data file (catalog, price list) as a dict, checked for its schema
    version; any problem is raised as ``error`` naming the file and what it is."""

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise error(f"{path}: cannot read the {what} ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML ({e})") from None
    if not isinstance(data, dict) or data.get("schema_version") != schema_version:
        got = data.get("schema_version") if isinstance(data, dict) else data
        raise error(f"{path}: schema_version: expected {schema_version}, got {got!r}")
    return data
