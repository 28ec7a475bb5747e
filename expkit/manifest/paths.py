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


#: libyaml's safe loader where PyYAML was built with it, else the pure-Python one; both build
#: the same plain data from these files (tests/test_catalog.py compares them). A GPU run's
#: baseline worker reads the GPU catalog as it starts, in every fresh process: the pure-Python
#: parse cost several times libyaml's (evidence/README.md).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_versioned_yaml(path: Path, *, schema_version: int, what: str, error: type) -> dict:
    """A configuration data file (catalog, price list) as a dict, checked for its schema
    version; any problem is raised as ``error`` naming the file and what it is."""

    try:
        data = yaml.load(Path(path).read_text(), Loader=SAFE_LOADER)
    except OSError as e:
        raise error(f"{path}: cannot read the {what} ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML ({e})") from None
    if not isinstance(data, dict) or data.get("schema_version") != schema_version:
        got = data.get("schema_version") if isinstance(data, dict) else data
        raise error(f"{path}: schema_version: expected {schema_version}, got {got!r}")
    return data
