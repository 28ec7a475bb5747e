"""The measurement's replicates (``measure.processes``): one pair of worker processes each.

The loop in :mod:`expkit.timing.measure` asks for replicate ``r`` and, per case, for its
two sides; this module opens the pairs (the preflight's first, then a fresh one per
replicate), keeps NVML's clock log per case and replicate on the GPU, and collects the
findings each pair's workers report when a case or a replicate ends."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ...checks.activity import busiest
from ...checks.code_digest import changed_code
from ...checks.interference import add_summaries
from ...core.findings import Finding
from ...manifest.settings import Settings
from ...manifest.spec import LoadedManifest
from ...timing import measure, telemetry
from ..processes.fork_safety import threads_the_child_never_needs
from .launches import add_launches
from .memory_plan import GiB, HEADROOM
from .pair import Pair, open_pair
from .side import ROLES
from ..defences import outside_clock
from ..defences.tamper import TAMPER

#: Device memory a pair's two workers need to start: until they open (``prepare``), each holds
#: its CUDA context alone. NVML counted 1108-1172 MiB a process on an H100 once a small
#: problem's inputs and library workspaces were added (evidence/README.md).
START_ROOM = 2 * GiB


def _telemetry(device: str, gpu: Optional[Dict[str, Any]]) -> Any:
    """NVML's view of the GPU the baseline's worker reported (its UUID, else its index).

    Never through torch: ``torch.cuda.current_device()`` here would initialise the CUDA
    driver in this process, and every later replicate's workers would then come from the
    fork server (on an H100, its start cost each KernelBench run seconds)."""
    if device != "cuda":
        return None
    gpu = gpu or {}
    with threads_the_child_never_needs("NVML"):
        return telemetry.for_gpu(int(gpu.get("index") or 0), gpu.get("uuid"))


def code_moved(first: Pair, pair: Pair, r: int) -> List[Finding]:
    """A side whose replicate ``r`` imported other code than the first pair's, which the
    preflight checked (``checks.code_digest``): a file it loads was changed during the run.
    Nothing where either side's hello gave no digest (a worker that did not start)."""
    out = []
    for role in ROLES:
        was, now = first.code.get(role), pair.code.get(role)
        moved = changed_code(was, now) if was is not None and now is not None else ()
        if moved:
            out.append(Finding(TAMPER, False, f"the {role}'s code differs between the run's processes: replicate "
                               f"{r} imported other code than the first from {', '.join(moved[:4])} (a file it "
                               "loads, its source or the bytecode beside it, was changed during the run)", None))
    return out


class Replicates:
    """The measurement's replicates (``measure.processes``): the preflight's pair of workers
    first, then a fresh pair per replicate, each started like the first (hello, the
    memory plan's settings), with NVML's clock log per case and replicate (GPU)."""

    def __init__(self, lm: LoadedManifest, settings: Settings, device: str, first: Pair, run_seed: int,
                 memory: Any, out_dir: Path) -> None:
        self.lm, self.settings, self.device, self.first = lm, settings, device, first
        self.run_seed, self.memory, self.out_dir = run_seed, memory, out_dir
        self.findings: List[Finding] = []
        self.tel = _telemetry(device, first.gpu)
        self.logs: Dict[str, List[Any]] = {}
        #: Each case's block requests as the parent's clock saw them, over its processes.
        self.clock: Dict[str, List[Any]] = {}
        #: Whether the first pair closes with its replicate (no end-to-end workload to run).
        self.first_goes_early = first.isolated and lm.manifest.end_to_end is None
        #: A replicate's pair started early (:meth:`start_early`): (replicate, why not forked, pair).
        self._spare: Optional[Tuple[int, Optional[str], Pair]] = None

    def clock_findings(self) -> List[Finding]:
        """The parent's clock against the candidate's own figures, each case over all its
        processes' requests (:mod:`..defences.outside_clock`); its figures go in the evidence."""
        out: List[Finding] = []
        for case, rows in self.clock.items():
            self.first.evidence.setdefault("outside_clock", {})[case] = outside_clock.clock_figures(rows)
            out += outside_clock.clock_findings(case, rows)
        return out

    def open(self, r: int) -> "_Replicate":
        if r == 0:
            return _Replicate(self, self.first, r)
        why, pair = self._take_spare(r) or self._start()
        method = pair.evidence.get("start_method")
        self.first.evidence.setdefault("replicate_start_methods", []).append(
            f"{method} ({why})" if why and method != "fork" else method)
        pair.siblings = [] if self.first_goes_early else [p for p in (self.first.b.pid(), self.first.c.pid()) if p]
        pair.adopt_memory(self.memory)
        pair.launches = self.first.launches  # the first pair's profiled calls (.launches)
        self.findings += pair.findings() + code_moved(self.first, pair, r)
        return _Replicate(self, pair, r)

    def _take_spare(self, r: int) -> Optional[Tuple[Optional[str], Pair]]:
        """Replicate ``r``'s pair started early, greeted; None where there is none, or where its
        workers did not answer (perhaps for want of memory beside the pair that was closing):
        that pair is closed, and the caller starts one now that the other has gone."""
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        why, pair = spare[1], spare[2]
        if spare[0] == r:
            try:
                pair.greet()
            except Exception:  # a pair started now says what fails
                pair.close(None)
                return None
            if pair.b.broken is None and pair.c.broken is None:
                return why, pair
        pair.close(None)
        return None

    def _start(self, greet: bool = True) -> Tuple[Optional[str], Pair]:
        pair = open_pair(self.lm, self.settings, self.device, greet=greet)
        return pair.why_not_forked, pair

    def start_early(self, r: int) -> None:
        """Start replicate ``r``'s pair now, its hello read when it opens: its workers' start
        (on a GPU, a CUDA context each: about 0.3 s) then overlaps the closing of the pair
        before it, when nothing is timed. Not where the memory plan leaves no room for two
        more processes' start beside the pairs still open (on a GPU: :data:`START_ROOM`)."""
        if r >= max(1, self.settings.measure.processes) or self._spare is not None or not self.first.isolated:
            return
        if self.device == "cuda":
            projected, free = getattr(self.memory, "projected_bytes", None), getattr(self.memory, "free_bytes", None)
            if projected is None or not free or projected + START_ROOM > free * HEADROOM:
                return
        why, pair = self._start(greet=False)
        self._spare = (r, why, pair)

    def drop_spare(self) -> None:
        """Close a pair started early that no replicate opened (the loop ended first)."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare[2].close(None)

    def flags(self, name: str, cs: measure.CaseSamples) -> List[bool]:
        """Samples taken at a low SM clock (GPU), each against its own replicate's log."""
        logs = self.logs.get(name) or []
        if self.tel is None or not logs:
            return [False] * len(cs.samples)
        out = []
        for s in cs.samples:
            log = logs[s.replicate] if s.replicate < len(logs) else None
            out.append(bool(log is not None and self.tel.flag(log, [(s.t_start, s.t_end)])[0]))
        return out

    def describe(self, name: str, flags: List[bool]) -> Optional[str]:
        logs = [g for g in (self.logs.get(name) or []) if g is not None]
        return self.tel.describe(logs[0], flags) if self.tel is not None and logs else None


class _Replicate:
    """One replicate as the measurement loop sees it (``timing.measure.Replicate``)."""

    def __init__(self, owner: Replicates, pair: Pair, r: int) -> None:
        self.owner, self.pair, self.r = owner, pair, r
        self._sides: Dict[str, Any] = {}
        self._window: Optional[ExitStack] = None

    def _start_window(self) -> None:
        """Open the case's telemetry window. NVML's sampler thread may start NVML's own
        native thread on any of its calls, not only at ``nvmlInit``; the window is one
        :func:`threads_the_child_never_needs` block, so such a thread does not cost a
        later replicate its fork."""
        o = self.owner
        if o.tel is None:
            return
        self._window = ExitStack()
        self._window.enter_context(threads_the_child_never_needs("NVML"))
        o.tel.start()

    def _stop_window(self) -> Any:
        o = self.owner
        if o.tel is None or self._window is None:
            return None
        window, self._window = self._window, None
        with window:
            return o.tel.stop()

    def sides(self, case: str) -> Any:
        o = self.owner
        self._stop_window()  # a case that raised left its window open
        self._start_window()
        spec = next(c for c in o.lm.manifest.cases if c.name == case)
        self._sides[case] = self.pair.sides(spec, o.run_seed)
        return self._sides[case]

    def closes_after(self, case: str) -> bool:
        """Whether this replicate's pair closes once ``case`` is done: the manifest's last
        case, in a later replicate or a first pair that goes early."""
        o = self.owner
        return case == o.lm.manifest.cases[-1].name and (self.r > 0 or o.first_goes_early)

    def finish(self, case: str) -> None:
        o = self.owner
        sides = self._sides.pop(case)
        o.findings += sides.finish(trim=not self.closes_after(case))
        if sides.clock_judged:  # the parent's clock judges a case over all its processes' requests
            o.clock.setdefault(case, []).extend(sides.clock)
        commits = o.first.evidence.setdefault("commitments", {}).setdefault(case, {})
        for k, v in sides.commit_counts.items():
            commits[k] = commits.get(k, 0) + v
        if self.r > 0:  # the run's evidence is the first pair's: each side's CPU account and watch join it
            mine = self.pair.evidence.get("resources", {}).get(case, {})
            into = o.first.evidence.setdefault("resources", {}).setdefault(case, {})
            for role, rec in mine.items():
                into[role] = busiest(into.get(role), rec)
            add_summaries(o.first.evidence.setdefault("interference", {}).setdefault(case, {}),
                          self.pair.evidence.get("interference", {}).get(case, {}))
            add_launches(o.first.evidence, self.pair.evidence, case)
        log = self._stop_window()
        if log is not None:
            logs = o.logs.setdefault(case, [])
            logs += [None] * (self.r - len(logs))  # a replicate with no log for this case
            logs.append(log)

    def close(self) -> None:
        o = self.owner
        self._stop_window()
        if self.r > 0 or o.first_goes_early:  # this pair closes below: its workers are asked to end first
            self.pair.begin_close()
        try:
            o.start_early(self.r + 1)  # its start overlaps this pair's end
        except Exception:  # this pair still closes; the next replicate's open starts its pair and says what failed
            pass
        if self.r > 0:
            # No evidence files from a later pair: the run folder keeps the first pair's
            # output, the preflight's among it (a later pair's copy would overwrite it).
            o.findings += self.pair.close(None)
            for role, ledger in self.pair.evidence.get("ledger", {}).items():
                o.first.add_ledger(role, ledger)
        elif o.first_goes_early:
            # The first pair is needed again only for an end-to-end workload: without one it
            # goes now, rather than sit beside every later replicate's pair with a CUDA
            # context each on a GPU and, on the host, what its allocator kept.
            o.findings += self.pair.close(o.out_dir)
