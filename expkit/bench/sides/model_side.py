"""Model-level oracles across the two sides' processes (the worker's half of each step).

The steps, each answered by one side (:mod:`expkit.checks.model_oracles` has the
algorithm): ``logits`` (both: the model with every linear layer swapped for this
side's callable, its logits over the held-out tokens; the candidate exports them),
``judge`` (the baseline: the oracles on the two sides' logits), ``record`` (the
baseline: its model's module calls on the probe batch, exported) and ``replay`` (the
candidate: its model against that record, for the divergence's location).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Dict, List, Mapping, Optional

from ...checks import model_oracles as mo
from ...checks.divergence import replay
from ...core.findings import Finding
from .side import CANDIDATE, SideBench
from ..processes.transport import Importer, pack, unpack


def model_request(side: SideBench, judge: Any, msg: Mapping[str, Any]) -> Dict[str, Any]:
    step = msg.get("step")
    state: Dict[str, Any] = side.__dict__.setdefault("_models", {})
    if step == "logits":
        state.clear()
        state.update(mo.side_logits(side.lm, side.fn, side.device))
        out: Dict[str, Any] = {}
        for key, got in state.items():
            if "error" in got:
                out[key] = {"error": got["error"]}
            elif side.role == CANDIDATE:
                out[key] = {"logits": side.exporter.export([got["logits"]])[0]}
            else:
                out[key] = {}
        return {"keys": out}
    if step == "judge":
        return _judge(side, state, msg["keys"])
    if step == "record":
        got = state[msg["key"]]
        ins, outs = mo.record_probe(got["model"], got["tokens"])
        skeleton, tensors = pack({"ins": [[k[0], k[1], v] for k, v in ins.items()],
                                  "outs": [[k[0], k[1], v] for k, v in outs.items()]})
        return {"skeleton": skeleton, "tensors": side.exporter.export([t.contiguous() for t in tensors])}
    if step == "replay":
        imp = Importer()
        try:
            rec = unpack(msg["skeleton"], imp.open(msg["tensors"]))
            ins = {(n, c): v for n, c, v in rec["ins"]}
            outs = {(n, c): v for n, c, v in rec["outs"]}
            got = state[msg["key"]]
            origins = replay(got["model"], (mo.probe_batch(got["model"], got["tokens"]),), ins, outs,
                             mo.PROBE_RTOL, mo.PROBE_ATOL)
            return {"where": mo.describe(origins)}
        finally:
            imp.close()
    if step == "release":
        side.exporter.release_exports()
        return {}
    raise ValueError(f"unknown model-oracle step {step!r}")


def _judge(side: SideBench, state: Mapping[str, Any], theirs: Mapping[str, Any]) -> Dict[str, Any]:
    imp = Importer()
    findings: List[Finding] = []
    keys: List[str] = []
    try:
        for i, spec in mo.specs(side.lm):
            key = mo.key_of(spec)
            mine, cand = state[key], theirs.get(key, {})
            if "error" in mine:
                f = Finding("baseline", False, f"model-level oracle: the baseline raised {mine['error']} inside "
                            f"{spec.model}")
            elif "error" in cand:
                f = Finding("crash", False, f"model-level oracle: candidate raised {cand['error']} inside {spec.model}")
            else:
                f = mo.judge_logits(spec, mine["tokens"], mine["logits"], imp.open([cand["logits"]])[0])
            findings.append(f)
            keys.append(key if f.check.startswith("oracle:") else "")
    finally:
        imp.close()
    return {"findings": [asdict(f) for f in findings], "keys": keys}


def locate(pair: Any, key: str) -> Optional[str]:
    """The parent's part of the divergence diagnosis: the baseline records, the candidate replays."""
    rec = pair.b.request("model_oracles", step="record", key=key)
    try:
        return pair.c.request("model_oracles", step="replay", key=key, skeleton=rec["skeleton"],
                              tensors=rec["tensors"])["where"]
    finally:
        pair.b.request("model_oracles", step="release")
