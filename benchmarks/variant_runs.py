"""What the variant-by-variant benchmarks share: their variants, and one fresh ``expkit run`` each.

``block_spread.py``, ``stopping_cost.py`` and ``recheck_aftermath.py`` run one manifest as
fresh commands, variants in turn, and read what each run wrote. A variant is
``NAME=OVERRIDE,OVERRIDE`` on their command line; an override ``env:KEY=VALUE`` sets an
environment variable for that run instead of a manifest key.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent


def parse_variants(specs: Sequence[str], default: Mapping[str, List[str]]) -> Dict[str, List[str]]:
    """``NAME=OVERRIDE,OVERRIDE`` specs as {name: overrides}, or ``default`` where none."""
    got = {n: o.split(",") if o else [] for n, _, o in (v.partition("=") for v in specs)}
    return got or dict(default)


def split_overrides(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """(the script's own arguments, the ``key=value`` overrides after ``--``). Split before
    argparse sees them: it would take the first override for an optional MANIFEST."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def require_manifest(path: str, script: str) -> Path:
    """``path`` as a Path, or exit with one line naming it, where no such file is."""
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"{script}: {path}: no such manifest (give a manifest's path, or none for the default)")
    return p


def with_preset(extra: Sequence[str], preset: str) -> List[str]:
    """``extra`` led by ``measure=PRESET`` unless it names a preset itself."""
    return list(extra) if any(e.startswith("measure=") for e in extra) else [f"measure={preset}", *extra]


def run_cli(manifest: Path, overrides: Sequence[str], out: Path, via: str = "") -> None:
    """One fresh ``python -m expkit run MANIFEST OVERRIDES --out OUT --quiet`` from the
    repository's root (``via``: ``python VIA run ...`` instead); ``env:`` overrides go to
    its environment."""
    env = dict(os.environ)
    env.update(o[4:].split("=", 1) for o in overrides if o.startswith("env:"))  # type: ignore[arg-type]
    keys = [o for o in overrides if not o.startswith("env:")]
    cmd = [sys.executable, via] if via else [sys.executable, "-m", "expkit"]
    subprocess.run([*cmd, "run", str(manifest), *keys, "--out", str(out), "--quiet"],
                   cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def run_samples(manifest: Path, overrides: Sequence[str], out: Path, via: str = "") -> List[Dict[str, str]]:
    """:func:`run_cli`, then the rows of the run's ``samples.csv`` (OSError where it wrote none)."""
    run_cli(manifest, overrides, out, via)
    with open(out / "samples.csv", newline="") as f:
        return list(csv.DictReader(f))
