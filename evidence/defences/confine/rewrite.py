"""The code digest's figures: ``tests/adversarial/cpu/baseline_rewrite.yaml``, before and after.

Usage: python rewrite.py before|after REPEATS   (from the repository's root)

Runs a fresh copy of the manifest and its two modules (the cheat rewrites the baseline's
module in its folder) at the adversarial suite's settings. ``before`` replaces
``bench.replicates.code_moved`` by a function that finds nothing (the comparison this
commit adds); the first pair's baseline still imports first. Prints a markdown row a run:
the verdict, the speedup and its interval, each process's speedup, the first reason.
"""
import shutil, sys, tempfile
from pathlib import Path
sys.path.insert(0, str(Path.cwd() / 'tests/adversarial'))
from test_adversarial import FAST
from expkit.runner import run_manifest
import expkit.bench.replicates as R
HERE = Path.cwd() / 'tests/adversarial/cpu'
mode = sys.argv[1]
if mode == 'before':
    R.code_moved = lambda *a: []
for i in range(int(sys.argv[2])):
    d = Path(tempfile.mkdtemp())
    for f in ('baseline_rewrite.yaml', 'adv_rewrite_base.py', 'adv_baseline_rewrite.py'):
        shutil.copy(HERE / f, d / f)
    out = run_manifest(d / 'baseline_rewrite.yaml', FAST, out_dir=d / 'out')
    c = out.result['measured']['cases']['c']
    per = [round(p['speedup'], 2) for p in c.get('per_process', [])]
    print(f"| {mode} | {i+1} | {out.verdict} | {c['speedup']:.2f} [{c['ci_low']:.2f}, {c['ci_high']:.2f}] | {per} | {(out.result['reasons'] or ['-'])[0][:150]} |", flush=True)
