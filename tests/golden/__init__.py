"""Golden files: rendered artefacts compared byte for byte with the files in this folder.

A test calls ``check("name.md", text)``. To accept a deliberate change of a template or its
wording, regenerate with ``EXPKIT_UPDATE_GOLDEN=1 pytest tests/...`` and review the diff
before committing it; without that variable (the default) a golden is only ever read.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
UPDATE_VAR = "EXPKIT_UPDATE_GOLDEN"


def check(name: str, text: str) -> None:
    path = HERE / name
    if os.environ.get(UPDATE_VAR) == "1":
        path.write_text(text)
        return
    assert path.is_file(), f"no golden file {path}; create it with {UPDATE_VAR}=1 and review it"
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"golden/{name}", "rendered", n=2))
        raise AssertionError(f"{name} differs from its golden file ({UPDATE_VAR}=1 to accept):\n{diff}")
