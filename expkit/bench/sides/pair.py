"""The two sides of a claim, each in its own process, driven from the parent.

:class:`Pair` holds two endpoints (:mod:`.endpoint`): the baseline's and the
candidate's. It never runs code under test itself; it asks each side for plain data
and hands what one side exported to the other (the candidate's outputs go to the
baseline's process, which judges: :mod:`.judge`). The phases:

1. **hello**: both workers start at once; each reports what its import changed.
2. **memory plan**: the baseline's worker makes one plain call; :func:`.memory_plan.plan`
   decides what the harness may hold (:meth:`Pair.plan_memory`).
3. **preflight** (:meth:`Pair.preflight`): for every case and every added awkward
   size, correctness trials (:mod:`.preflight_run`) on fresh inputs from the run's secret seed -- the
   candidate builds its inputs and exports them, the baseline builds the same ones and
   its expected output, the candidate runs once under poisoned allocations (odd trials
   before the baseline does), and the baseline's worker judges: input digests (the
   two sides got the same inputs; the candidate did not write to them), the oracles,
   the null-output calibration, the ``uninitialised`` diagnosis; one trial, the value
   probe, on inputs shifted to both signs. Then one profiled call
   per side, one side after the other, checked against ``expect:`` and the target.
4. **measurement** (:meth:`Pair.sides`): the measurement loop's two sides and a timer
   that sends each block to its side's worker, in the loop's order, and a kept call's
   output to the baseline's worker for the recheck.

A side that runs out of memory is an outcome: the candidate where the baseline fits
is ``invalid`` with both figures; the baseline that cannot make even its plain call
raises :class:`~expkit.core.errors.OutOfMemoryPlan` (exit 5).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ...checks import gpu_processes, preflight
from ...checks.model_oracles import specs
from ...checks.preflight import CaseRun, PreflightResult
from ...core.errors import ConfigError, ExpkitError, OutOfMemoryPlan
from ...core.findings import Finding, finding_from, findings_in as _findings
from ...manifest.settings import Settings
from ...timing.timer import TimerInfo
from ..defences.fresh import FRESH_MODES
from ..processes import cores
from .case_sides import CaseSides
from ..processes.channel import ChannelError
from .endpoint import LocalEndpoint, WorkerEndpoint, start_context
from ..processes.fork_safety import threads_the_child_never_needs
from .ledger import merge as merge_ledgers
from .memory_plan import GiB, MemoryPlan, plan
from .model_side import locate
from .side import BASELINE, CANDIDATE
from .preflight_run import run_preflight
from .workload_pair import collect_pair

MEMORY = "memory"


def _gib(n: Optional[int]) -> str:
    return "?" if n is None else f"{n / GiB:.2f} GiB"


class Pair:
    """Both sides of one run (see the module docstring)."""

    def __init__(self, lm: Any, settings: Settings, device: str, *,
                 sides: Optional[Mapping[str, Tuple[Callable[..., Any], Callable[..., Any]]]] = None,
                 greet: bool = True, baseline_first: bool = False) -> None:
        self.lm, self.settings, self.device = lm, settings, device
        d = settings.defences
        self.isolated = d.enabled and d.isolate and sides is None
        #: Why ``defences.start_method=auto`` started these workers otherwise than by a fork; None if forked.
        self.why_not_forked: Optional[str] = None
        #: ``frozen``: the other side's worker stopped while a side's blocks are timed (.freeze).
        self.evidence: Dict[str, Any] = {"isolated": self.isolated, "separate_sides": self.isolated,
                                         "frozen": self.isolated and d.freeze}
        self._told: set = set()
        #: The baseline's hello, read before the candidate's worker started (``baseline_first``).
        self._hb: Any = None
        if self.isolated:
            # Both workers start before either is waited for: their imports and CUDA
            # start-up overlap. ``baseline_first`` (the run's first pair): the candidate's
            # worker starts once the baseline's has imported its code, so that what the
            # preflight checks, and every later replicate is compared with
            # (``replicates.code_moved``), is the code as it was before any of the
            # candidate's ran: it can write the baseline's files.
            ctx, self.why_not_forked = start_context(d.start_method, device)
            self.b: Any = WorkerEndpoint(lm, settings, device, BASELINE, ctx)
            if baseline_first:
                self._hb = self._early_hello()
            self.c: Any = WorkerEndpoint(lm, settings, device, CANDIDATE, ctx)
        else:
            fns = sides or {}
            self.b = LocalEndpoint(lm, settings, device, BASELINE, *fns.get(BASELINE, (None, None)))
            self.c = LocalEndpoint(lm, settings, device, CANDIDATE, *fns.get(CANDIDATE, (None, None)))
        self.evidence["start_method"] = self.c.start_method
        self.session_findings: List[Finding] = []
        self._sources: Dict[str, str] = {}
        self.gpu: Optional[Dict[str, Any]] = None
        self.catalog: List[Finding] = []
        self.memory: Optional[MemoryPlan] = None
        #: The run's other pairs' workers (the first, where it stays open beside each replicate's).
        self.siblings: List[int] = []
        #: Each side's imported code, by module (``checks.code_digest``), from its hello; None until then.
        self.code: Dict[str, Optional[Dict[str, str]]] = {BASELINE: None, CANDIDATE: None}
        self.closed = False
        self._greeted = False
        #: The candidate's profiled call's kernel launches by case (a GPU run's preflight), which
        #: each timed call must match (.launches); a later replicate's pair takes the first's.
        self.launches: Dict[str, Tuple[Any, ...]] = {}
        try:
            if self._hb is None:
                self.b.send("hello", environment=True)
            self.c.send("hello", environment=False)
        except ChannelError as e:
            self.session_findings += self.tell(e, "while the workers loaded the code")
            self._greeted = True
        if greet:
            self.greet()

    def greet(self) -> None:
        """Read both workers' hello (sent as they started): what their imports changed, the
        GPU. Apart from the start so that a replicate's pair can start while the one before
        it closes (:class:`~expkit.bench.sides.replicates.Replicates`); a second call does nothing."""
        if self._greeted:
            return
        self._greeted = True
        try:
            if isinstance(self._hb, Exception):
                raise self._hb
            hb = self._hb if self._hb is not None else self.b.receive()
            hc = self.c.receive()
        except ChannelError as e:
            self.session_findings += self.tell(e, "while the workers loaded the code")
            return
        except ExpkitError:
            self.close(None)
            raise
        self.session_findings += _findings(hb) + _findings(hc)
        self.catalog = [finding_from(f) for f in hb.get("catalog", ())]
        self._sources = {**hb["sources"], **hc["sources"]}
        self.gpu = hb.get("gpu")
        if self.isolated:  # in one process a later replicate finds the modules imported already
            self.code = {BASELINE: hb.get("code"), CANDIDATE: hc.get("code")}
        self.evidence.update(baseline_pid=hb.get("pid"), worker_pid=hc.get("pid"), allocator=hc.get("allocator"),
                             startup={BASELINE: hb.get("startup"), CANDIDATE: hc.get("startup")},
                             confinement=hc.get("confinement"))

    def _early_hello(self) -> Any:
        """The baseline's hello, or what it raised (:meth:`greet` raises it where it would
        have been read)."""
        try:
            self.b.send("hello", environment=True)
            return self.b.receive()
        except (ChannelError, ExpkitError) as e:
            return e

    # -- plumbing -----------------------------------------------------------------------------
    def tell(self, e: ChannelError, when: str) -> List[Finding]:
        """The finding for a broken channel, once per endpoint."""
        out = []
        for ep in (self.b, self.c):
            if ep.broken is not None and not ep.told:
                ep.told = True
                message = f"{ep.broken.message} ({when})"
                cause = ep.death_cause()
                if cause:
                    message += f": {cause}"
                out.append(Finding(ep.broken.check, False, message))
        if not out and str(e) not in self._told:
            self._told.add(str(e))
            out.append(Finding(e.check, False, f"{e.message} ({when})"))
        return out

    def sources(self) -> Dict[str, str]:
        return dict(self._sources)

    def findings(self) -> List[Finding]:
        """What each side's import changed, and the device against its catalog entry."""
        return list(self.session_findings) + list(self.catalog)

    # -- the memory plan -------------------------------------------------------------------------
    def plan_memory(self, run_seed: int) -> MemoryPlan:
        """One plain call of the baseline on the first case, and the plan from it."""
        case = self.lm.manifest.cases[0]
        probe = self.b.request("probe", params=dict(case.params), seed=preflight.derive_seed(run_seed, case.name,
                                                                                            "probe"))
        self.evidence["probe"] = {k: v for k, v in probe.items() if k != "raised"}
        if probe.get("oom"):
            raise OutOfMemoryPlan(f"{self.lm.path} [case {case.name}]", self.device,
                                  int(probe.get("needed_bytes") or 0), int(probe.get("free") or 0),
                                  f"the baseline's own call raised {probe.get('raised', 'out of memory')}: run it on "
                                  "a device with more memory, free the device of other work, or declare a smaller case")
        if "raised" in probe:
            raise ExpkitError(f"{self.lm.path}: the baseline raised {probe['raised']} on its own inputs for case "
                              f"{case.name!r} (params {dict(case.params)}) in its first plain call: the reference must "
                              "run on the cases it declares; fix the baseline or the case")
        self.adopt_memory(plan(probe, input_sets=self.settings.measure.input_sets, l2_bytes=probe.get("l2_bytes")))
        assert self.memory is not None
        return self.memory

    def neighbours(self, case: Optional[str]) -> List[Finding]:
        """Other processes on the run's GPU (checks.gpu_processes.gpu_neighbours): one the run
        started (the candidate's daemon) is invalid; another job a warning."""
        pids = [p for p in (self.b.pid(), self.c.pid()) if p]
        if not pids:
            return []
        index = int((self.gpu or {}).get("index") or 0)
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        if visible and index < len(visible) and visible[index].strip().isdigit():
            index = int(visible[index])
        with threads_the_child_never_needs("NVML"):
            return list(gpu_processes.gpu_neighbours(index, [os.getpid(), *pids, *self.siblings], min(pids), case=case))

    def adopt_memory(self, memory: Optional[MemoryPlan]) -> None:
        """This pair's workers take a memory plan: the first pair's own, or, in a later
        replicate's pair, the first pair's (measured once per run)."""
        self.memory = memory
        if memory is not None:
            for ep in (self.b, self.c):
                ep.request("configure", clone_for_baseline=memory.clone_for_baseline, reference=memory.reference,
                           hold_previous=memory.hold_previous)

    # -- the preflight ----------------------------------------------------------------------------
    def preflight(self, run_seed: int, *, identity: bool = True) -> PreflightResult:
        """The preflight between the two workers (:func:`.preflight_run.run_preflight`); a broken
        channel ends it with that finding."""
        try:
            return run_preflight(self, run_seed, identity)
        except ChannelError as e:
            return PreflightResult(tuple(self.tell(e, "during the preflight")), ())

    def oom_finding(self, run: CaseRun, error: str) -> Finding:
        """The candidate's out-of-memory, with the baseline's plain call's figures beside it."""
        probe = self.evidence.get("probe", {})
        return Finding(MEMORY, False, f"the candidate ran out of memory at params {dict(run.params)} ({error}) where "
                       f"the baseline's plain call peaked at {_gib(probe.get('peak_bytes'))} with "
                       f"{_gib(probe.get('free'))} free", run.name, figure=probe.get("peak_bytes"),
                       threshold=probe.get("free"))

    # -- model-level oracles ---------------------------------------------------------------------
    def model_oracles(self) -> List[Finding]:
        """Each side's model logits in its own process, judged in the baseline's; a failure's
        location found by the candidate's process replaying the baseline's record."""
        if not specs(self.lm):
            return []
        try:
            self.b.send("model_oracles", step="logits")
            self.c.send("model_oracles", step="logits")
            self.b.receive()
            theirs = self.c.receive()
            j = self.b.request("model_oracles", step="judge", keys=theirs["keys"])
            out = []
            located: Dict[str, str] = {}
            for f, key in zip(_findings(j), j["keys"]):
                if not f.ok and key:
                    if key not in located:
                        located[key] = locate(self, key)
                    f = Finding(f.check, f.ok, f"{f.message}; {located[key]}", f.case, figure=f.figure,
                                threshold=f.threshold)
                out.append(f)
            self.c.request("model_oracles", step="release")
            return out
        except ChannelError as e:
            return self.tell(e, "during the model oracles")

    # -- the workload ---------------------------------------------------------------------------
    def end_to_end(self, run_seed: int) -> Dict[str, Any]:
        """The workload's raw data from both sides (:func:`.workload_pair.collect_pair`)."""
        try:
            return collect_pair(self, run_seed)
        except ChannelError as e:
            return {"skipped": "the channel to a worker failed", "evidence": {},
                    "findings": [asdict(f) for f in self.tell(e, "during the end-to-end workload")]}

    # -- measurement ---------------------------------------------------------------------------
    def sides(self, case: Any, run_seed: int) -> "CaseSides":
        """The measurement loop's two sides of ``case`` and the timer between them."""
        mem = self.memory or MemoryPlan(self.settings.measure.input_sets)
        pinned = self.isolated and self.device == "cpu" and self.settings.defences.pin_cores
        share = cores.share_for(self.settings.measure.cpu_threads) if pinned else None
        for ep in (self.b, self.c):  # both at once, each building on half the host cores
            ep.send("prepare", case=case.name, run_seed=run_seed, salt_seed=secrets.randbits(62),
                    input_sets=mem.input_sets, keep_pristine=mem.keep_pristine, share=2,
                    cores=sorted(share) if share else None)
        rb, rc = self.b.receive(), self.c.receive()
        sides = CaseSides(self, case.name, share)
        # The timer's account: the candidate's, unless the baseline's fell back (then a
        # figure the two sides do not share would be compared; the case is judged on the
        # figure both have, timing.figures.judged).
        infos = [i for i in (rc.get("info"), rb.get("info")) if i]
        fell = [i for i in infos if i.get("fallback")]
        sides.timer.info = _timer_info((fell or infos or [None])[0])
        return sides

    def begin_close(self) -> None:
        """Ask both workers to end, waiting on neither (:meth:`close` does): they end at once."""
        for ep in (self.c, self.b):
            ep.begin_close()

    def close(self, out_dir: Optional[Path] = None) -> List[Finding]:
        """End both workers, their evidence into ``out_dir``; a second call does nothing
        (the first pair may close with its replicate, before the run closes it)."""
        out: List[Finding] = []
        if self.closed:
            return out
        self.closed = True
        self.begin_close()
        for ep in (self.c, self.b):
            out += ep.close(out_dir, self.evidence)
            self.add_ledger(ep.role, ep.ledger)
        return out

    def add_ledger(self, role: str, ledger: Optional[Mapping[str, Any]]) -> None:
        """A side's request ledger (:mod:`.ledger`) joins the run's: this pair's own, or a
        later replicate's pair's when it closes."""
        if ledger:
            book = self.evidence.setdefault("ledger", {})
            book[role] = merge_ledgers(book.get(role), ledger)


def _timer_info(d: Optional[Mapping[str, Any]]) -> Any:
    if not d:
        return None
    return TimerInfo.coerce(d)


def open_pair(lm: Any, settings: Settings, device: str, *, greet: bool = True, baseline_first: bool = False) -> Pair:
    """The two sides of this run: worker processes when the defences isolate, else in-process;
    ``greet=False``: started, their hello not yet read (:meth:`Pair.greet`); ``baseline_first``:
    the candidate's worker starts once the baseline's has imported its code (the first pair)."""
    d = settings.defences
    if d.fresh not in FRESH_MODES:
        raise ConfigError(f"defences.fresh: expected one of {', '.join(FRESH_MODES)}, got {d.fresh!r}")
    return Pair(lm, settings, device, greet=greet, baseline_first=baseline_first)
