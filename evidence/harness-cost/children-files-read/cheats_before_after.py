import json, sys, tempfile
from pathlib import Path
root = Path(sys.argv[1])
sys.path.insert(0, str(root)); sys.path.insert(0, str(root / "tests/adversarial"))
from test_adversarial import run
import expkit
assert str(root) in expkit.__file__, expkit.__file__
for name in sys.argv[3:]:
    for i in range(3):
        out = run(name, Path(tempfile.mkdtemp()))
        est = out.result["cases"]["c"]["speedup"] if "c" in out.result.get("cases", {}) else None
        acc = ((out.result.get("defences") or {}).get("resources") or {}).get("c", {}).get("candidate", {})
        print(f"| {sys.argv[2]} | {name} | {i + 1} | {out.verdict} | {acc.get('peak_cores')} | {acc.get('threads_ran')} | {out.result['reasons'][0][:110]} |")
