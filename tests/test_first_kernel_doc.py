"""docs/first-kernel.md, the walkthrough to a first claim of one's own: its commands run as
shown on a CPU, and the manifest it shows is the example's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "first-kernel.md"
EXAMPLE = ROOT / "manifests" / "examples" / "cpu" / "your-first-kernel.yaml"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


def _commands() -> list[str]:
    """The walkthrough's shell commands, one per entry (continued lines joined), the
    install line left out (it is the README's, which the suite's own setup runs)."""
    out = []
    for block in _blocks("bash"):
        for cmd in block.replace("\\\n", " ").splitlines():
            if cmd.strip() and "pip install" not in cmd:
                out.append(" ".join(cmd.split()))
    return out


def test_the_manifest_it_shows_is_the_examples_own_lines_in_order():
    shown = [ln for ln in _blocks("yaml")[0].splitlines() if ln.strip()]
    lines = EXAMPLE.read_text().splitlines()
    at = 0
    for ln in shown:
        assert ln in lines[at:], f"{ln!r} is not in {EXAMPLE.name} (after line {at})"
        at = lines.index(ln, at) + 1


def test_the_example_validates_and_names_what_must_run():
    import yaml

    from expkit.manifest import load

    m = load(EXAMPLE).manifest
    assert m.expect.must_run == ("aten::sum",) and m.expect.max_plausible_speedup == 2000
    assert "oracles" not in yaml.safe_load(EXAMPLE.read_text())  # the default oracle, as the walkthrough says


@pytest.mark.slow
def test_the_walkthroughs_commands_run_as_shown_on_a_cpu(tmp_path):
    """Each command in a copy of the repository's layout, `.venv/bin/expkit` being this
    interpreter's expkit; the CPU run reaches a verdict, the GPU run stops with exit 2."""
    (tmp_path / "manifests" / "examples" / "cpu").mkdir(parents=True)
    for name in ("your-first-kernel.yaml", "first_kernel.py"):
        shutil.copy(EXAMPLE.parent / name, tmp_path / "manifests" / "examples" / "cpu" / name)
    codes = {}
    for cmd in _commands():
        shell = cmd.replace(".venv/bin/expkit", f"{sys.executable} -m expkit")
        proc = subprocess.run(shell, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        codes[cmd] = (proc.returncode, proc.stdout + proc.stderr)
    assert all(code == 0 for c, (code, _) in codes.items() if "validate" in c or "doctor" in c or "cp " in c
               or c.startswith(("mkdir", "sed"))), codes
    gpu = next(v for c, v in codes.items() if "run" in c.split() and "gpu" in c)
    assert gpu[0] == 2 and "device: the manifest needs a CUDA GPU and none is visible" in gpu[1], gpu
    assert not (tmp_path / "my-claim" / "run-gpu").exists()
    cpu_code, out = next(v for c, v in codes.items() if "run" in c.split() and "gpu" not in c)
    result = json.loads((tmp_path / "my-claim" / "run" / "result.json").read_text())
    if cpu_code == 3 and all("oracle:rounding" in r for r in result["reasons"]):
        pytest.xfail("the default oracle's allowance under cancellation (issue 51, branch w51n): "
                     + result["reasons"][0][:300])
    assert cpu_code in (0, 1, 4) and result["verdict"] != "invalid", out
    assert not [c for c in result["checks"] if c["check"] == "identity" and c["message"].startswith("not checked")]
    assert (tmp_path / "my-claim" / "run" / "report.md").is_file()
