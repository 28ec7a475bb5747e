"""The shell scripts the GPU evidence is made with parse, and each step the device batch's
header names has a branch (they run only on the device machine, so this is what CPU CI can hold)."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted([*(ROOT / "scripts").glob("*.sh"), *(ROOT / "benchmarks").glob("*.sh")])


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_shell_script_parses(script):
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_step_the_device_batch_names_has_a_branch():
    text = (ROOT / "scripts" / "device_batch.sh").read_text()
    named = re.search(r"^# Steps: ([a-z0-9 -]+?) \(", text, re.M).group(1).split()
    branches = set(re.findall(r"^    ([a-z0-9-]+)\)$", text, re.M))
    assert named and set(named) == branches, (named, branches)
