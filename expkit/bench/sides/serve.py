"""Requests to one side, answered with plain data: the same code in a worker or in-process.

:class:`Server` wraps a :class:`~.side.SideBench` (and, on the baseline's side, its
:class:`~.judge.Judge`) and answers the parent's requests by name. The worker process
(:mod:`.worker`) feeds it messages from the channel; the in-process pair
(:class:`~.endpoint.LocalEndpoint`) calls it directly. Either way nothing but JSON-able
data comes back, so the parent cannot tell the two apart.
"""

from __future__ import annotations

import gc
import os
from dataclasses import asdict
from typing import Any, Callable, Dict, Mapping, Optional

import torch

from ..processes import allocator
from ...checks.interference import INTERFERENCE, continues_taken
from ...checks.target import catalog_mismatches
from ...core.findings import Finding
from ..defences.block_checks import opening
from ..processes.cores import Relay
from ..processes.environment import gpu_info, source_hashes
from ..processes.transport import collect_sent
from .judge import Judge
from .ledger import Ledger
from .memory_plan import host_last_level_cache
from .model_side import model_request
from .side import BASELINE, SideBench
from .workload_side import workload_request


class UnknownRequest(Exception):
    pass


class Server:
    """One side's answers to the parent (see the module docstring)."""

    def __init__(self, side: SideBench, confinement: Optional[Dict[str, Any]] = None, guard: Any = None) -> None:
        self.side = side
        #: What the worker's confinement holds (:func:`..defences.confine.confine`); None where it has none.
        self.confinement = confinement
        #: The baseline's threads kept on its cores (:class:`..defences.affinity_guard.AffinityGuard`), a CPU run's.
        self.guard = guard
        #: What each request cost this side (:mod:`.ledger`), sent with the worker's goodbye.
        self.ledger = Ledger(side.device)
        self.judge: Optional[Judge] = Judge(side) if side.role == BASELINE else None
        #: The cores this worker waits on between a case's requests (``defences.pin_cores``).
        self.relay = Relay()
        self._ops: Dict[str, Callable[[Mapping[str, Any]], Dict[str, Any]]] = {
            "hello": self._hello, "ping": lambda m: {}, "probe": self._probe, "configure": self._configure,
            "trial_inputs": lambda m: self.side.trial_inputs(m["params"], int(m["seed"]), bool(m.get("probe"))),
            "trial_call": lambda m: self.side.trial_call(m["case"], m["params"], bool(m.get("poison", True))),
            "rerun": lambda m: self.side.rerun(),
            "expect": lambda m: self._judge().expect(m["case"], m["params"], int(m["seed"]), bool(m["first"]),
                                                     m.get("cand_inputs"), bool(m.get("probe"))),
            "judge": lambda m: self._judge().judge(m["case"], m["params"], int(m["trial"]), bool(m["declared"]),
                                                   bool(m["calibrate"]), m["inputs"], m["outputs"], m["where"]),
            "poison_check": lambda m: {"uninitialised": self._judge().poison_check(m["outputs"],
                                                                                   m["first_outputs"])},
            "release": self._release,
            "profile": self._profile,
            "end_trials": self._end_trials,
            "finish_preflight": self._finish_preflight,
            "watch": lambda m: self.side.watch(list(m["names"])),
            "prepare": self._prepare,
            "warm_up": lambda m: self.side.warm_up(float(m["seconds"])) or {},
            "call": lambda m: self.side.call() or {},
            "block": self._block,
            "recheck": self._recheck,
            "reveal": lambda m: self.side.reveal(int(m["block"]), int(m["call"])),
            "finish_case": self._finish_case,
            "model_oracles": self._model_oracles,
            "end_to_end": self._end_to_end,
        }

    def _judge(self) -> Judge:
        if self.judge is None:
            raise UnknownRequest("only the baseline's worker judges")
        return self.judge

    def handle(self, msg: Mapping[str, Any]) -> Dict[str, Any]:
        op = msg.get("op")
        fn = self._ops.get(str(op))
        if fn is None:
            raise UnknownRequest(f"unknown request {op!r}")
        self.ledger.start(str(op))
        self.relay.work()
        try:
            return fn(msg)
        finally:
            self.relay.wait()
            self.ledger.stop(str(op))

    # -- requests with more to them ---------------------------------------------------------
    def _prepare(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        """A case's inputs and timer; ``cores``: where to wait between its requests."""
        reply = self.side.prepare(m["case"], int(m["run_seed"]), int(m["salt_seed"]), int(m["input_sets"]),
                                  bool(m.get("keep_pristine", True)), int(m.get("share", 1)))
        self.relay.share(m.get("cores"))
        if self.guard is not None:
            self.guard.told = False
        return reply

    def _block(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        """One timed block, or with ``items`` ([number, seed] each) several of this side's
        in a row: one round trip, and the checks after the calls once, after the last. The
        outputs the last request committed are dropped first (the parent has picked)."""
        items = m.get("items")
        if self.guard is not None:
            self.guard.restore()
        case = self.side.case
        if case is not None and case.commits is not None:
            case.commits.open_request()
        if items is None:
            seed = m.get("seed")
            return self._guarded(self.side.block(int(m["number"]), None if seed is None else int(seed)))
        opened, last = opening(self.side.defended), len(items) - 1
        blocks = [self.side.block(int(n), None if r is None else int(r), opened=opened, last=i == last)
                  for i, (n, r) in enumerate(items)]
        self._guarded(blocks[-1])
        return {"blocks": blocks}

    def _guarded(self, block: Dict[str, Any]) -> Dict[str, Any]:
        """``block``, with the finding of a thread whose cores were narrowed while it ran (once a case)."""
        moved = self.guard.narrowed() if self.guard is not None and not self.guard.told else []
        if moved:
            self.guard.told = True
            tid, now = moved[0]
            block["findings"].append(asdict(Finding(INTERFERENCE, False, (
                f"the baseline's worker had {len(moved)} thread(s) moved to fewer cores while it was timed (thread "
                f"{tid} on cores {sorted(now)} of {sorted(self.guard.cores)}): another process of this user can "
                "change a worker's affinity, and its threads then share cores it was not timed on"),
                self.side.case.name if self.side.case is not None else None)))
        return block

    def _hello(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        reply = {"findings": [asdict(f) for f in self.side.session_findings],
                 "sources": source_hashes([self.side.fn, self.side.factory]), "code": self.side.code,
                 "pid": os.getpid(), "gpu": None, "catalog": [], "allocator": allocator.STATE,
                 "startup": dict(getattr(self.side, "startup", {})), "confinement": self.confinement}
        if m.get("environment"):
            reply["gpu"] = gpu_info(self.side.device)
            if self.side.device == "cuda" and reply["gpu"].get("name"):
                reply["catalog"] = [asdict(f) for f in catalog_mismatches()]
        return reply

    def _probe(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        got = self.side.probe(m["params"], int(m["seed"]))
        if self.side.device == "cuda":
            got["l2_bytes"] = int(torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)
        else:
            got["l2_bytes"] = host_last_level_cache()
        return got

    def _configure(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        """The memory plan's settings (:class:`~.memory_plan.MemoryPlan`) for this side."""
        self.side.hold_previous = bool(m.get("hold_previous", True))
        if self.judge is not None:
            self.judge.configure(bool(m["clone_for_baseline"]), str(m["reference"]))
        return {}

    def _release(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        if self.judge is not None:
            self.judge.release()
        self.side.release()
        return {}

    def _finish_preflight(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        if self.judge is not None:
            self.judge.finish()
        out = self.side.finish_preflight()
        self._return_cached_memory()
        return out

    def _end_trials(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        if self.judge is not None:
            self.judge.finish()
        self.side.end_trials()
        self._return_cached_memory()
        return {}

    def _profile(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        out = self.side.profile(m["case"], m["params"], int(m["seed"]))
        self._return_cached_memory()
        return out

    def _finish_case(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        """``trim`` (default true): give the device back what the cache holds; false for a
        pair's last case when the pair closes next, where nothing opens beside it first and
        the collection and frees cost about 0.2 s a side on an H200
        (evidence/README.md)."""
        self.relay.share(None)
        out = {"findings": [asdict(f) for f in self.side.finish_case()], "resources": self.side.resources,
               "continued": continues_taken()}  # stops of this worker (checks.interference)
        if m.get("trim", True):
            self._return_cached_memory()
        return out

    def _return_cached_memory(self) -> None:
        """Give the device the memory torch's caching allocator holds and no tensor uses.

        The first pair of workers lives through the whole run, and each later replicate
        starts a pair beside it: what the preflight's trials and float64 references left
        in the first pair's cache (37 GiB a worker on KernelBench's 6 GiB softmax) made
        the next pair's inputs run out of memory on an 80 GB H100. After each side's
        profile too: the other side's profile comes next (:func:`.preflight_run.profiled_identity`)."""
        if self.side.device != "cuda":
            return
        gc.collect()
        collect_sent()  # a sent tensor whose consumer closed after this side dropped it (see collect_sent)
        torch.cuda.empty_cache()

    def _recheck(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        """A picked call of the candidate's, judged on the inputs this worker rebuilds for it
        (the candidate's block seed and the call's place in its block, both the parent's)."""
        case = self.side.case
        if case is None:
            raise UnknownRequest("recheck outside a case")
        args = case.inputs_of(int(m["seed"]), int(m["call"]))
        found = self._judge().recheck(m["case"], m["kept"], args)
        return {"findings": [asdict(f) for f in found]}

    def _model_oracles(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        return model_request(self.side, self.judge, m)

    def _end_to_end(self, m: Mapping[str, Any]) -> Dict[str, Any]:
        return workload_request(self.side, self.judge, m)
