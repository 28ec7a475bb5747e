"""Work per call, from the GPU's record: each timed call launches what the profiled call launched (check ``launches``).

The preflight profiles one call of the candidate under ``torch.profiler``; the identity
check and ``expect:`` judge that call's kernels. A candidate that can tell the profiled
call from the timed ones (``torch.autograd._profiler_enabled()``, the caller's frames)
could launch the full work there and less when timed. So on a GPU with the kernel-time
recorder (CUPTI), every timed call's own kernels -- attributed to it by the recorder's
tags, harness work (the hold, the L2 flush, the bench's hook) under tags of its own and
never among them -- come back with its block (:func:`expkit.timing.kernel_time.call_launches`),
and the parent, which holds the profiled call's list, compares them here. The
comparison runs in the parent: the list a timed call must match never enters the
candidate's process.

The rule. A kernel is ``(name, grid, block)``, names in the profiler's (demangled)
spelling. Each kernel of the profiled call must be matched by one of the timed call's:
the same name (or the same unqualified name, :func:`~expkit.checks.trace.kernel_short_name`)
with the same grid and block, or else with at least as many threads. A profiled kernel
left unmatched is work the timed call did not launch, or launched smaller: the run is
``invalid``, with the call and both lists in the reason. More kernels, or larger ones,
than profiled are not a finding (slower is the candidate's own loss).

What it rests on: cuBLAS, cuDNN and torch choose kernels and launch shapes
deterministically for a shape, dtype and device, and the profiled and timed calls share
all three (the factory's inputs for the same case). A library that chooses by timing
(``torch.backends.cudnn.benchmark``) is a setting the global-state check already reports.
Launch shapes that follow from the input's values (``nonzero``, data-dependent sizes)
would vary honestly; expkit has met none among the suites it checks, and the reason
names the call so that such a case can be read.

What it does not cover: a GPU run timed with CUDA events alone (no cupti-python, or
``measure.timer=events``) has no per-call record, and the check is reported as not
available (an ``ok`` finding naming why). A recorder whose own callbacks or record
containers were replaced reports it (``altered``): ``invalid`` under ``tamper``. A
candidate block that brings no record of the timer's own hold, where the baseline's
blocks of the same case all did, means something stopped the recorder: ``invalid``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ...checks.trace import kernel_short_name
from ...core.findings import Finding
from .side import BASELINE, CANDIDATE
from ..defences.tamper import TAMPER

LAUNCHES = "launches"

#: One launch: (name, grid, block).
Launch = Tuple[str, Tuple[int, ...], Tuple[int, ...]]


def as_launches(rows: Sequence[Any]) -> Tuple[Launch, ...]:
    """Launches from rows as ``result.json``'s identity block stores kernels (``kernel_row``)
    or as a block's summary lists them (``[name, grid, block]``)."""
    out = []
    for r in rows:
        if isinstance(r, Mapping):
            out.append((str(r.get("name", "")), _dims(r.get("grid")), _dims(r.get("block"))))
        else:
            out.append((str(r[0]), _dims(r[1]), _dims(r[2])))
    return tuple(out)


def _dims(v: Any) -> Tuple[int, ...]:
    t = tuple(int(x) for x in (v or ()))
    return t + (1,) * (3 - len(t)) if 0 < len(t) < 3 else t


def _threads(k: Launch) -> int:
    n = 1
    for x in k[1] + k[2]:
        n *= max(int(x), 1)
    return n


def _same_name(a: str, b: str) -> bool:
    return a == b or kernel_short_name(a) == kernel_short_name(b)


def missing(profiled: Sequence[Launch], timed: Sequence[Launch]) -> List[Launch]:
    """The profiled launches no launch of ``timed`` matches (module docstring): same name
    and shape first, then a launch of the same name with at least as many threads."""
    left = list(timed)
    unmatched = []
    for k in profiled:
        i = next((j for j, t in enumerate(left) if t[1:] == k[1:] and _same_name(t[0], k[0])), None)
        if i is None:
            unmatched.append(k)
        else:
            left.pop(i)
    out = []
    for k in unmatched:
        i = next((j for j, t in enumerate(left) if _same_name(t[0], k[0]) and _threads(t) >= _threads(k)), None)
        if i is None:
            out.append(k)
        else:
            left.pop(i)
    return out


def one(k: Launch) -> str:
    """``name grid [x, y, z] block [x, y, z]``, the name unqualified."""
    return f"{kernel_short_name(k[0])} grid {list(k[1])} block {list(k[2])}"


def describe(launches: Sequence[Launch], most: int = 4) -> str:
    """``n kernel(s): name grid block, ...`` (names unqualified), at most ``most`` listed."""
    if not launches:
        return "no kernel"
    parts = [one(k) for k in launches[:most]]
    more = f" and {len(launches) - most} more" if len(launches) > most else ""
    return f"{len(launches)} kernel(s): " + ", ".join(parts) + more


@dataclass
class LaunchCheck:
    """One case's per-call launch check in the parent (module docstring).

    ``profiled``: the candidate's profiled call's launches (None: no profile on a GPU,
    so no check). ``block(side, launches)`` judges one block's summary as
    :func:`expkit.timing.kernel_time.launch_summary` made it; ``findings()`` at the end
    of the case adds what only the whole case shows; ``evidence()`` the counts."""

    case: str
    profiled: Optional[Tuple[Launch, ...]]
    calls: int = 0
    short: int = 0
    blocks: Dict[str, int] = field(default_factory=lambda: {BASELINE: 0, CANDIDATE: 0})
    unrecorded: Dict[str, int] = field(default_factory=lambda: {BASELINE: 0, CANDIDATE: 0})
    told: set = field(default_factory=set)

    def block(self, side: str, launches: Optional[Mapping[str, Any]]) -> List[Finding]:
        if self.profiled is None or launches is None:
            return []
        self.blocks[side] = self.blocks.get(side, 0) + 1
        out: List[Finding] = []
        if side == CANDIDATE and launches.get("altered") and TAMPER not in self.told:
            self.told.add(TAMPER)
            out.append(Finding(TAMPER, False, "the kernel-time recorder of the candidate's worker was altered while it "
                               f"was timed ({launches['altered']}): the record of its kernels cannot be trusted",
                               self.case))
        if "calls" not in launches:
            self.unrecorded[side] = self.unrecorded.get(side, 0) + 1
            return out
        if side != CANDIDATE:
            return out
        kernels = as_launches(launches.get("kernels", ()))
        seqs = [tuple(kernels[i] for i in s) for s in launches.get("sequences", ())]
        gaps = {i: missing(self.profiled, s) for i, s in enumerate(seqs)}
        for n, i in enumerate(launches["calls"]):
            self.calls += 1
            if not gaps.get(i):
                continue
            self.short += 1
            if LAUNCHES in self.told:
                continue
            self.told.add(LAUNCHES)
            out.append(Finding(LAUNCHES, False, (
                f"timed call {n + 1} of a block launched {describe(seqs[i])}, where the profiled call launched "
                f"{describe(self.profiled)}: {len(gaps[i])} of the profiled launches missing or smaller (first: "
                f"{describe(gaps[i][:1])[len('1 kernel(s): '):]}); a timed call did less than the call the "
                "identity check saw"), self.case, figure=float(len(seqs[i])), threshold=float(len(self.profiled))))
        return out

    def findings(self) -> List[Finding]:
        """The recorder stopped in the candidate's blocks where the baseline's all had it."""
        gone, base = self.unrecorded.get(CANDIDATE, 0), self.unrecorded.get(BASELINE, 0)
        if self.profiled is None or not gone or base or not self.blocks.get(BASELINE):
            return []
        return [Finding(LAUNCHES, False, f"{gone} of the candidate's {self.blocks[CANDIDATE]} timed blocks brought no "
                        "record of the timer's own hold kernel, where every one of the baseline's "
                        f"{self.blocks[BASELINE]} did: something in the candidate's worker stopped the kernel "
                        "recorder, and its calls' launches could not be checked", self.case)]

    def evidence(self) -> Dict[str, Any]:
        return {"profiled": len(self.profiled) if self.profiled is not None else None, "calls": self.calls,
                "short": self.short, "blocks": dict(self.blocks), "unrecorded": dict(self.unrecorded)}


def unavailable(case: str, why: str) -> Finding:
    """The check could not be made for ``case``: an ``ok`` finding that says so (no verdict changes)."""
    return Finding(LAUNCHES, True, f"per-call launch check not available: {why}", case)


def launch_findings(check: LaunchCheck, side: str, rep: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A block reply's launches (taken out of ``rep``) judged, as the reply's findings are (dicts)."""
    return [asdict(f) for f in check.block(side, rep.pop("launches", None))]


def launches_at_end(check: LaunchCheck, pair: Any) -> List[Finding]:
    """The case's end: what only the whole case shows, the counts into ``pair.evidence``,
    and, on a GPU, a note where the check could not be made."""
    if pair.device != "cuda":
        return []
    pair.evidence.setdefault(LAUNCHES, {})[check.case] = check.evidence()
    if check.profiled is None:
        return [unavailable(check.case, "no profiled call of the candidate for this case (the identity check did "
                            "not run)")]
    if not check.blocks.get(CANDIDATE):
        return [unavailable(check.case, "the candidate's timed calls were timed with CUDA events alone, which "
                            "record no kernel (cupti-python missing, or measure.timer=events)")]
    return check.findings()


def add_launches(into: Dict[str, Any], other: Mapping[str, Any], case: str) -> None:
    """A later replicate's launch counts for ``case`` added to the run's (the first pair's
    evidence), as the other per-case accounts are."""
    mine = other.get(LAUNCHES, {}).get(case)
    if not mine:
        return
    was = into.setdefault(LAUNCHES, {}).setdefault(case, dict(mine, calls=0, short=0, blocks={}, unrecorded={}))
    for k in ("calls", "short"):
        was[k] = was.get(k, 0) + mine.get(k, 0)
    for k in ("blocks", "unrecorded"):
        for role, n in mine.get(k, {}).items():
            was[k][role] = was[k].get(role, 0) + n
