"""benchmarks/compiled_warm_start.py: a bad --sizes is one line naming the flag and the fix, before any process starts."""

import subprocess
import sys

import pytest

from repo_scripts import ROOT


@pytest.mark.parametrize("sizes", ["bogus", "matmul=x", "conv=64"])
def test_a_bad_sizes_value_is_one_line_naming_the_flag_and_the_fix(sizes):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compiled_warm_start.py"), "--device", "cpu",
                          "--sizes", sizes], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert f"--sizes {sizes!r}" in last and "matmul=4096,layernorm=256" in last
