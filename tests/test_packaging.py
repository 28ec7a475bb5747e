"""conf/ ships inside the wheel as expkit.conf, and an installed expkit finds it there."""

import glob
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_carries_conf_templates_and_weights_and_finds_them(tmp_path):
    pytest.importorskip("setuptools")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "whl"), str(ROOT)], capture_output=True, text=True)
    if build.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {build.stderr.strip()[-200:]}")
    wheel = glob.glob(str(tmp_path / "whl" / "expkit-*.whl"))[0]
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("expkit/conf/expkit.yaml", "expkit/conf/measure/quick.yaml", "expkit/conf/catalog/gpus.yaml",
                   "expkit/conf/prices/default.yaml", "expkit/conf/launcher/slurm.yaml",
                   "expkit/report/templates/report.md.j2", "expkit/zoo/tinylm.pt", "expkit/manifest/manifest.schema.json"):
        assert needed in names, needed
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), wheel],
                   check=True, capture_output=True)
    probe = ("import expkit.manifest.paths as p; from expkit.manifest.settings import load_settings; "
             "print(p.conf_dir()); print(load_settings(['measure=rigorous']).measure.name)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}, check=True).stdout.split()
    assert out == [str(target / "expkit" / "conf"), "rigorous"]
