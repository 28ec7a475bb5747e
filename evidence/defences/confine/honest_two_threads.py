"""Honest candidates at measure.cpu_threads=2: python honest_two_threads.py NAME... (from the repository's root)."""
import sys, tempfile
from pathlib import Path
sys.path.insert(0, str(Path.cwd() / 'tests/adversarial'))
from test_adversarial import FAST
from expkit.runner import run_manifest
for name in sys.argv[1:]:
    d = Path(tempfile.mkdtemp())
    out = run_manifest(Path(f'tests/adversarial/cpu/{name}.yaml'), FAST + ("measure.cpu_threads=2",), out_dir=d)
    w = out.result['defences'].get('interference', {})
    print(name, out.verdict, out.result['reasons'][:1], {c: {s: (round(v['other_cpu_ms'],1), round(v['timed_ms'],1)) for s, v in per.items()} for c, per in w.items()})
