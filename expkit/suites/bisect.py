"""``expkit bisect GOOD BAD MANIFEST``: ``git bisect`` with expkit as the oracle.

Each step runs the manifest, as it stands in the checked-out commit, in a fresh
process (``python -m expkit.suites.bisect step ...``) and maps the verdict to what
``git bisect run`` expects:

=============  =========  =====================================================
verdict        exit code  why
=============  =========  =====================================================
supported      0 (good)   the claim holds at this commit
refuted        1 (bad)    slower than claimed
invalid        1 (bad)    wrong answers, wrong kernel, crash: the usual target
inconclusive   125 (skip) the evidence cannot say; guessing would mislead
usage error    125 (skip) the commit does not build or import: cannot test
=============  =========  =====================================================

Each step's verdict is appended to a log, so the result names the first bad
commit together with the verdict and reasons that made it bad.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ..core.errors import ExpkitError
from ..manifest.settings import check_override

GOOD, BAD, SKIP = 0, 1, 125
VERDICT_TO_BISECT = {"supported": GOOD, "refuted": BAD, "invalid": BAD, "inconclusive": SKIP}


@dataclass(frozen=True)
class Step:
    commit: str
    verdict: str
    reasons: Tuple[str, ...]


@dataclass(frozen=True)
class BisectResult:
    first_bad: Optional[str]
    verdict: Optional[str]
    reasons: Tuple[str, ...]
    steps: Tuple[Step, ...] = field(default_factory=tuple)
    log: str = ""


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise ExpkitError(f"git {' '.join(args)} failed in {repo}: {out.stderr.strip() or out.stdout.strip()}")
    return out


def bisect(good: str, bad: str, manifest: str | Path, overrides: Sequence[str] = ("measure=quick",),
           repo: Optional[Path] = None) -> BisectResult:
    """Find the first commit between ``good`` and ``bad`` where the manifest stops being supported."""

    given = manifest
    manifest = Path(manifest).resolve()
    if not manifest.is_file():  # else every step is skipped, and the bisect finds nothing, slowly
        raise ExpkitError(f"{given}: no such file (the manifest that judges each commit; it must be in the "
                          "repository's work tree)")
    for o in overrides:  # a misspelt setting would skip every step the same way
        if "=" not in o:
            raise ExpkitError(f"override {o!r}: expected key=value, e.g. measure=quick")
        check_override(o)
    repo = Path(repo) if repo else manifest.parent
    top = _git(repo, "rev-parse", "--show-toplevel").stdout.strip()
    repo = Path(top)
    try:
        rel = manifest.relative_to(repo)
    except ValueError:
        raise ExpkitError(f"{given}: not inside the repository being bisected ({repo}); give a manifest in its work "
                          "tree") from None
    if _git(repo, "status", "--porcelain", "--untracked-files=no").stdout.strip():
        raise ExpkitError(f"{repo}: the work tree has uncommitted changes; commit or stash them before bisecting")
    good_sha = _git(repo, "rev-parse", "--verify", f"{good}^{{commit}}").stdout.strip()
    bad_sha = _git(repo, "rev-parse", "--verify", f"{bad}^{{commit}}").stdout.strip()
    fd, log_path = tempfile.mkstemp(prefix="expkit-bisect-", suffix=".jsonl")
    os.close(fd)
    step_cmd = [sys.executable, "-m", "expkit.suites.bisect", "step", "--log", log_path, str(rel), *overrides]
    try:
        _git(repo, "bisect", "start", bad_sha, good_sha)
        run = _git(repo, "bisect", "run", *step_cmd, check=False)
    finally:
        _git(repo, "bisect", "reset", check=False)
    steps = tuple(Step(d["commit"], d["verdict"], tuple(d["reasons"]))
                  for d in (json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()))
    os.unlink(log_path)
    first = None
    for line in run.stdout.splitlines():
        if line.endswith("is the first bad commit"):
            first = line.split()[0]
    hit = next((s for s in steps if first and s.commit == first), None)
    return BisectResult(first, hit.verdict if hit else None, hit.reasons if hit else (), steps, run.stdout)


def step(manifest: str, overrides: Sequence[str], log: Optional[str]) -> int:
    """One bisect step: run the manifest at the checked-out commit, map the verdict."""
    # lazy: the supervisor loads no torch (tests/test_start_method.py); the runner loads where a run is made
    from ..runner import run_manifest

    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="expkit-bisect-run-") as out:
        try:
            outcome = run_manifest(manifest, overrides, Path(out))
            verdict, reasons = outcome.verdict, list(outcome.result["reasons"])
        except ExpkitError as e:  # does not load or import at this commit: cannot test it
            verdict, reasons = "error", [str(e)]
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"commit": commit, "verdict": verdict, "reasons": reasons}) + "\n")
    print(f"expkit bisect: {commit[:12]} {verdict}" + (f": {reasons[0]}" if reasons else ""))
    return VERDICT_TO_BISECT.get(verdict, SKIP)


def main(argv: Optional[List[str]] = None) -> int:

    p = argparse.ArgumentParser(prog="python -m expkit.suites.bisect")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("step")
    s.add_argument("--log")
    s.add_argument("manifest")
    s.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    return step(args.manifest, args.overrides, args.log)


if __name__ == "__main__":
    sys.exit(main())
