"""On-disk formats of a run: ``result.json``, ``samples.csv``, ``env.json``.

Every file is written to a temporary name and renamed into place, so a run killed
mid-write leaves the previous file or none, never half of one. ``report.md`` is
rendered from these files alone (see ``report.py``), so it can be re-rendered later.

result.json history (``schema_version``):
  1 -- first version: verdict, reasons, claim, measured (per case and overall),
       checks, identity, timing, cost, environment summary, seed.
samples.csv history (column ``schema_version``):
  1 -- case, side, round, position, number, seconds, t_start, t_end, flagged.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Mapping

import pandas as pd

RESULT_SCHEMA_VERSION = 1
SAMPLES_SCHEMA_VERSION = 1
RESULT = "result.json"
SAMPLES = "samples.csv"
ENV = "env.json"
REPORT = "report.md"

# Upgrades from older result.json versions, applied in order on load.
_UPGRADES: Dict[int, Any] = {}


def atomic_write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2, default=_json_default, allow_nan=True) + "\n")


def write_samples(path: Path, rows: list[dict]) -> None:
    cols = ["case", "side", "round", "position", "number", "seconds", "t_start", "t_end", "flagged"]
    df = pd.DataFrame(rows, columns=cols)
    df.insert(0, "schema_version", SAMPLES_SCHEMA_VERSION)
    atomic_write(path, df.to_csv(index=False, float_format="%.9g"))


def read_samples(path: Path) -> pd.DataFrame:
    if not path.is_file():
        return pd.DataFrame(columns=["schema_version", "case", "side", "round", "position", "number", "seconds",
                                     "t_start", "t_end", "flagged"])
    return pd.read_csv(path)


def load_result(path: Path) -> Dict[str, Any]:
    """Read a ``result.json`` of this or any older version, upgraded to the current one."""
    data = json.loads(Path(path).read_text())
    version = int(data.get("schema_version", 0))
    if version > RESULT_SCHEMA_VERSION:
        from .errors import ExpkitError

        raise ExpkitError(f"{path}: schema_version {version} is newer than this expkit reads "
                          f"({RESULT_SCHEMA_VERSION}); upgrade expkit")
    while version < RESULT_SCHEMA_VERSION:
        data = _UPGRADES[version](data)
        version = int(data["schema_version"])
    return data
