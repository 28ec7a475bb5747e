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


def test_top_lists_a_warm_first_calls_heaviest_functions_below_the_table(tmp_path):
    """On the CPU, a 64x64 matmul: the cold compile, then one warm process whose first call's
    functions of at least 0.05 s cumulative are listed, the whole compiled call among them."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compiled_warm_start.py"), "--device", "cpu",
                          "--warm", "1", "--sizes", "matmul=64", "--top", "0.05", "--out", str(tmp_path / "w.json")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    table, _, listed = out.stdout.partition("\nmatmul, warm 1, without the stack: the first call's functions of at "
                                            "least 0.05 s cumulative\n")
    assert "| matmul | cold |" in table and "| matmul | warm 1, without the stack |" in table
    rows = [line.split() for line in listed.strip().splitlines()]
    assert rows and all(r[1] == "s" and float(r[0]) >= 0.05 for r in rows)
    assert [float(r[0]) for r in rows] == sorted((float(r[0]) for r in rows), reverse=True)
    assert any(r[-1] == "compile_wrapper" for r in rows)
