"""Write a generation run of our own making, in KernelBench's layout, for ``expkit audit``.

Issue 50's GPU test audits KernelBench level 1 with at least three candidates per
problem: an identity, a ``torch.compile`` of the reference, and a wrong one. This script
writes them, for every problem selected, as KernelBench's ``scripts/generate_samples.py``
names generated kernels::

    OUT/level_{L}_problem_{P}_sample_0_kernel.py   identity: class ModelNew(Model): pass
    OUT/level_{L}_problem_{P}_sample_1_kernel.py   torch.compile of the reference's forward
    OUT/level_{L}_problem_{P}_sample_2_kernel.py   wrong: outputs shifted by 0.1 x (mean |out| + 1)

(A 1% scaling is not wrong enough: softmax's outputs of about 1e-4 stay within KernelBench's
absolute tolerance of 1e-4 when scaled by 1.01, and such a candidate passes, rightly.)

Each file is the problem file with the candidate appended (a generated kernel is one
self-contained file), so nothing here is KernelBench's code but the problem it was given.
``--shrink F`` divides the problems' size globals by F in both the problem copies
(written to ``OUT/../KernelBench/level{L}/``, where ``expkit audit`` finds them) and the
candidates, for a CPU smoke test.

Examples::

    python benchmarks/kernelbench_generation_run.py .kernelbench --level 1 --out /tmp/kb/runs/own
    expkit audit /tmp/kb/runs/own --problems .kernelbench/KernelBench --allow-baseline-ops
    # CPU smoke test: five problems, sizes divided by 64
    python benchmarks/kernelbench_generation_run.py .kernelbench --level 1 --problems 1,19,23,40,89 \\
        --shrink 64 --out /tmp/kb/runs/smoke
    expkit audit /tmp/kb/runs/smoke --device cpu --allow-baseline-ops --jobs 2

(``--allow-baseline-ops``: the identity and the compiled reference run the reference's own
ops, which an audit otherwise counts as a cheat.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernelbench_common import problem_files, rewrite_globals, shrink_globals  # noqa: E402

IDENTITY = '''

class ModelNew(Model):
    """Identity candidate: the reference itself."""
'''

COMPILED = '''

class ModelNew(Model):
    """torch.compile of the reference's forward (default mode)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._compiled = torch.compile(super().forward)

    def forward(self, *args):
        return self._compiled(*args)
'''

WRONG = '''

def _expkit_wrong(out):
    if isinstance(out, torch.Tensor):
        if out.is_floating_point():
            return out + 0.1 * (out.abs().mean() + 1)
        return out + 1
    if isinstance(out, (tuple, list)):
        return type(out)(_expkit_wrong(o) for o in out)
    return out


class ModelNew(Model):
    """Wrong candidate: every floating output shifted by a tenth of (its mean magnitude + 1),
    beyond KernelBench's tolerances at every precision (integers off by one)."""

    def forward(self, *args):
        return _expkit_wrong(super().forward(*args))
'''

SAMPLES = (IDENTITY, COMPILED, WRONG)


def _number(path: Path) -> Optional[int]:
    head = path.name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def write_run(kb_root: Path, level: int, out: Path, *, problems: Sequence[int] = (), shrink: int = 1) -> List[Path]:
    """Write the candidates (and, with ``shrink``, the shrunk problems); returns the kernel files."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    copies = out.parent / "KernelBench" / f"level{level}"
    written = []
    for path in problem_files(kb_root, level):
        pid = _number(path)
        if pid is None or (problems and pid not in problems):
            continue
        text = path.read_text()
        if shrink > 1:
            text = rewrite_globals(text, shrink_globals(path, shrink))
            copies.mkdir(parents=True, exist_ok=True)
            (copies / path.name).write_text(text)
        if "import torch\n" not in text:
            text = "import torch\n" + text
        for sample, tail in enumerate(SAMPLES):
            target = out / f"level_{level}_problem_{pid}_sample_{sample}_kernel.py"
            target.write_text(text + tail)
            written.append(target)
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kb_root", type=Path, help="a KernelBench checkout (or its KernelBench/ folder)")
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--out", type=Path, required=True, help="the run folder to write (runs/<name>/)")
    p.add_argument("--problems", default="", help="comma-separated problem ids (default: every one)")
    p.add_argument("--shrink", type=int, default=1, help="divide size globals by this (CPU smoke tests)")
    args = p.parse_args(argv)
    ids = [int(x) for x in args.problems.split(",") if x.strip()]
    written = write_run(args.kb_root, args.level, args.out, problems=ids, shrink=args.shrink)
    print(f"wrote {len(written)} candidate(s) into {args.out}"
          + (f"; shrunk problems in {args.out.parent / 'KernelBench'}" if args.shrink > 1 else ""))
    if args.shrink > 1:
        print(f"audit with: expkit audit {args.out} --device cpu --allow-baseline-ops")
    else:
        print(f"audit with: expkit audit {args.out} --problems {args.kb_root} --allow-baseline-ops")
    return 0 if written else 2


if __name__ == "__main__":
    sys.exit(main())
