"""Where expkit's shipped data lives, in a checkout and in an installed wheel.

The repository keeps Hydra configuration in the top-level ``conf/`` folder (the
design card's layout); ``pyproject.toml`` maps that folder into the wheel as the
package ``expkit.conf``. Both resolve to a real directory on disk, which is what
Hydra's ``initialize_config_dir`` needs.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_CHECKOUT_CONF = Path(__file__).resolve().parent.parent / "conf"


def conf_dir() -> Path:
    """The absolute path of the configuration folder (presets, GPU catalog, prices)."""
    try:
        packaged = Path(str(resources.files("expkit.conf")))
        if (packaged / "expkit.yaml").is_file():
            return packaged
    except ModuleNotFoundError:
        pass
    return _CHECKOUT_CONF


def templates_dir() -> Path:
    return Path(__file__).resolve().parent / "templates"
