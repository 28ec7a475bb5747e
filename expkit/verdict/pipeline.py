"""The run's verdict as one ordered list of rules, each a pure function of what was found.

:func:`judge` starts from nothing and hands each rule of :data:`RULES` the verdict so far;
a rule returns the verdict it leaves and the findings it added (the host-load and
plausibility warnings, the identity note), which the run's result lists after the ones
it was given. The order is the contract:

1. ``decide``: the claim against each case's interval, after every failed check
   (:func:`.rules.decide`; an unmeasured case is ``inconclusive``, never dropped).
2. ``load``: a case timed while the host held its cores, whose verdict the wait could
   explain, becomes ``inconclusive`` (:mod:`.load`).
3. ``share``: a candidate on more threads than allowed, timed on a busy host, makes a
   ``supported`` verdict ``inconclusive`` (the ``share`` warnings).
4. ``plausibility``: a factor above the plausible or a time beyond the device's peak
   makes ``supported`` ``inconclusive`` (:mod:`.plausibility`; a run with the defences
   off skips it).
5. ``end_to_end``: a claim that names the workload is judged on it too, the worse of
   the two verdicts standing (:func:`end_to_end`).
6. ``identity``: a manifest that names no intended kernel gets the note that it was
   never identified (:func:`.rules.noted`); the verdict stands.

Nothing here runs code under test or reads a clock: the rules read :class:`Evidence`,
which the runner fills from the measurement and the checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, List, Mapping, Optional, Sequence, Tuple

from ..core.findings import Finding
from .load import apply_load, load_findings
from .plausibility import apply_plausibility, plausibility
from .rules import INCONCLUSIVE, INVALID, REFUTED, SUPPORTED, Verdict, decide, inconclusive_when, noted


@dataclass(frozen=True)
class Evidence:
    """What the verdict's rules read, filled once by the runner.

    ``findings``: every check's, in the order they were made; ``estimates``: each measured
    case's :class:`~.stats.Estimate`; ``claims``: each case's claimed factor;
    ``budget``: each case's whether its time budget ran out; ``unmeasured``: each
    declared case no estimate could be made for, with why; ``resources``: each case's
    per-side account of CPU waits (``checks.contention``); ``busy``: the cases timed
    while other work held the cores; ``shared``: the warnings that leave the times standing
    but make ``supported`` ``inconclusive`` (the ``share`` rule's, and the parent's clock's
    where it could not confirm most of a candidate's requests on a loaded host); ``manifest``,
    ``gpu_name`` and ``defences`` feed the plausibility rule (``defences`` None: the
    defences are off and it is skipped); ``end_to_end``: the workload's result, with
    ``judged`` (a case verdict) where the claim names it; ``unidentified``: the identity
    note of a manifest that names no intended kernel."""

    findings: Tuple[Finding, ...]
    estimates: Mapping[str, Any]
    claims: Mapping[str, float]
    tolerance: float
    aggregate: str = "all"
    budget: Mapping[str, bool] = field(default_factory=dict)
    unmeasured: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)
    busy: Collection[str] = frozenset()
    shared: Tuple[Finding, ...] = ()
    manifest: Any = None
    gpu_name: Optional[str] = None
    defences: Any = None
    end_to_end: Any = None
    unidentified: Optional[Finding] = None


#: A rule: (what was found, the verdict so far) -> (the verdict it leaves, findings it added).
Rule = Callable[[Evidence, Optional[Verdict]], Tuple[Verdict, Tuple[Finding, ...]]]


def _decided(ev: Evidence, _: Optional[Verdict]) -> Tuple[Verdict, Tuple[Finding, ...]]:
    return decide(list(ev.findings), ev.estimates, ev.claims, ev.tolerance, ev.budget, ev.aggregate,
                  ev.unmeasured), ()


def _host_load(ev: Evidence, v: Optional[Verdict]) -> Tuple[Verdict, Tuple[Finding, ...]]:
    assert v is not None
    loaded = load_findings(v, ev.estimates, ev.resources, busy=ev.busy)
    return apply_load(v, loaded, ev.aggregate), tuple(loaded)


def _shared(ev: Evidence, v: Optional[Verdict]) -> Tuple[Verdict, Tuple[Finding, ...]]:
    assert v is not None
    return inconclusive_when(v, ev.shared), ()


def _plausible(ev: Evidence, v: Optional[Verdict]) -> Tuple[Verdict, Tuple[Finding, ...]]:
    assert v is not None
    if ev.defences is None or ev.manifest is None:
        return v, ()
    found = plausibility(ev.manifest, ev.estimates, ev.gpu_name, ev.defences, busy=ev.busy)
    return apply_plausibility(v, found), tuple(found)


def _workload(ev: Evidence, v: Optional[Verdict]) -> Tuple[Verdict, Tuple[Finding, ...]]:
    assert v is not None
    return (end_to_end(v, ev.end_to_end) if ev.end_to_end is not None else v), ()


def _identity(ev: Evidence, v: Optional[Verdict]) -> Tuple[Verdict, Tuple[Finding, ...]]:
    assert v is not None
    if ev.unidentified is None:
        return v, ()
    return noted(v, [ev.unidentified]), (ev.unidentified,)


#: The verdict's rules, in the order they apply (the module docstring says why each is where it is).
RULES: Tuple[Tuple[str, Rule], ...] = (
    ("decide", _decided),
    ("load", _host_load),
    ("share", _shared),
    ("plausibility", _plausible),
    ("end_to_end", _workload),
    ("identity", _identity),
)


def judge(ev: Evidence, rules: Sequence[Tuple[str, Rule]] = RULES) -> Tuple[Verdict, Tuple[Finding, ...]]:
    """The run's verdict after every rule, and the findings the rules added, in order."""
    v: Optional[Verdict] = None
    added: List[Finding] = []
    for _, rule in rules:
        v, new = rule(ev, v)
        added.extend(new)
    assert v is not None
    return v, tuple(added)


def end_to_end(verdict: Verdict, result: Any) -> Verdict:
    """The run's verdict once the workload is held against a claim that names it.

    Invalid stays invalid. Otherwise the worse of the kernel's verdict and the
    workload's (refuted > inconclusive > supported), the workload's reason first where
    it decided or shares the outcome. Without a claim on the workload (``result.judged``
    None): unchanged. ``result``: the workload's result (``workload.assess.EndToEndResult``)."""
    if verdict.verdict == INVALID or result.judged is None:
        return verdict
    words = (verdict.verdict, result.judged.verdict)
    overall = REFUTED if REFUTED in words else INCONCLUSIVE if INCONCLUSIVE in words else SUPPORTED
    label = f" ({result.agreement.label})" if result.agreement is not None and result.agreement.short else ""
    mine = f"end_to_end [workload {result.name}]{label}: {result.judged.reason}"
    if result.judged.verdict == overall:
        reasons = (mine,) + tuple(verdict.reasons)
    else:
        reasons = tuple(verdict.reasons) + (mine,)
    return Verdict(overall, reasons, verdict.cases)
