"""The examples the README shows run as written (examples/), and the README shows them verbatim."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_readme_shows_the_notebook_example_verbatim():
    notebook = (EXAMPLES / "notebook.py").read_text()
    assert notebook in _python_blocks((ROOT / "README.md").read_text()), (
        "README.md's Python API section must include examples/notebook.py verbatim (copy the file into it)")


@pytest.mark.slow
def test_the_notebook_example_runs_as_a_notebook_would(tmp_path):
    """Cells run in `__main__` with no file, as in Jupyter: `python -c` with the folder as working directory."""
    for name in ("notebook.py", "matrix_chain.py"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    proc = subprocess.run([sys.executable, "-c", (tmp_path / "notebook.py").read_text()], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    words = proc.stdout.split()
    assert words[0] == "supported" and Path(tmp_path / words[-1]).is_file(), proc.stdout
    (run,) = (tmp_path / "reports").iterdir()
    written = (run / "manifest.yaml").read_text()
    assert all(f"matrix_chain:{f}" in written for f in ("chain_left", "chain_right", "chain_inputs"))


def test_the_example_manifest_matches_the_notebooks_claim():
    import yaml

    from expkit.api import manifest_dict

    sys.path.insert(0, str(EXAMPLES))
    try:
        namespace: dict = {}
        code = (EXAMPLES / "notebook.py").read_text().split("# %% Run it")[0]
        exec(compile(code, "notebook.py", "exec"), namespace)
        data = manifest_dict(namespace["claim"])
    finally:
        sys.path.remove(str(EXAMPLES))
    assert data == yaml.safe_load((EXAMPLES / "matrix-chain.yaml").read_text())
