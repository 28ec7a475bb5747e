"""The tracked tree's bytes by role: code, tests and docs against evidence and example reports.

Issue 48's target: code, tests and docs at least 60% of the tracked tree's bytes. Sizes are
the blobs' sizes at a commit (``git ls-tree -r -l``), so any commit can be measured without
checking it out.

    python benchmarks/tree_share.py [REV ...]     # default HEAD; one column per REV
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]

# (role, is code/tests/docs, path prefixes); the first role whose prefix matches wins
ROLES: List[Tuple[str, bool, Tuple[str, ...]]] = [
    ("old results (benchmarks/results, reports/audits)", False, ("benchmarks/results/", "reports/audits/")),
    ("evidence/", False, ("evidence/",)),
    ("reports/examples/ (example reports)", False, ("reports/",)),
    ("expkit/", True, ("expkit/",)),
    ("tests/", True, ("tests/",)),
    ("docs/ and README.md", True, ("docs/", "README.md")),
    ("benchmarks/ (scripts, probes, README)", True, ("benchmarks/",)),
    ("scripts/", True, ("scripts/",)),
    ("manifests/, examples/, conf/", True, ("manifests/", "examples/", "conf/")),
    ("other (pyproject.toml, .ci, ...)", False, ("",)),
]


def blob_sizes(rev: str) -> Dict[str, int]:
    """Path -> size in bytes of every file tracked at ``rev`` (links and submodules left out)."""
    out = subprocess.run(["git", "ls-tree", "-r", "-l", "-z", rev], cwd=ROOT, check=True,
                         capture_output=True).stdout.decode()
    sizes = {}
    for entry in filter(None, out.split("\0")):
        meta, path = entry.split("\t", 1)
        kind, size = meta.split()[1], meta.split()[3]
        if kind == "blob" and size != "-":
            sizes[path] = int(size)
    return sizes


def by_role(sizes: Dict[str, int]) -> Dict[str, int]:
    """Bytes per role name."""
    totals = {name: 0 for name, _, _ in ROLES}
    for path, size in sizes.items():
        name = next(n for n, _, prefixes in ROLES if path.startswith(prefixes))
        totals[name] += size
    return totals


def shares(totals: Dict[str, int]) -> Tuple[float, float]:
    """(code, tests and docs over all; the same counting the example reports as docs)."""
    total = sum(totals.values())
    code = sum(totals[n] for n, is_code, _ in ROLES if is_code)
    examples = totals["reports/examples/ (example reports)"]
    return code / total, (code + examples) / total


def table(revs: Sequence[str]) -> str:
    """A markdown table of bytes per role, one column per revision, and the shares."""
    cols = [(rev, by_role(blob_sizes(rev))) for rev in revs]
    lines = ["| role | " + " | ".join(f"bytes at {r}" for r, _ in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for name, is_code, _ in ROLES:
        mark = " (code, tests, docs)" if is_code else ""
        lines.append(f"| {name}{mark} | " + " | ".join(f"{t[name]:,}" for _, t in cols) + " |")
    lines.append("| **total** | " + " | ".join(f"**{sum(t.values()):,}**" for _, t in cols) + " |")
    lines.append("| **code, tests and docs** | " + " | ".join(f"**{shares(t)[0]:.1%}**" for _, t in cols) + " |")
    lines.append("| the same, example reports counted as docs | "
                 + " | ".join(f"{shares(t)[1]:.1%}" for _, t in cols) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("revs", nargs="*", default=["HEAD"])
    print(table(ap.parse_args(argv).revs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
