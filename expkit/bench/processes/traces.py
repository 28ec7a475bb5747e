"""Profiler traces as plain data, so that each side's trace can cross the channel.

Each side is profiled in its own process (:mod:`..sides.side`); the identity check compares
the two in the parent (:mod:`..sides.pair`). The trace's dataclasses are turned into dicts
field by field, whatever fields they have, and back; JSON's lists become tuples
again on the way in, as the dataclasses declare them.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, Dict, Mapping

from ...checks.trace import KernelEvent, OpEvent, Trace


def _tuples(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_tuples(x) for x in v)
    return v


def _event(cls: type, d: Mapping[str, Any]) -> Any:
    names = {f.name for f in fields(cls)}
    return cls(**{k: _tuples(v) for k, v in d.items() if k in names})


def trace_to_dict(tr: Trace) -> Dict[str, Any]:
    return {"ops": [asdict(o) for o in tr.ops], "kernels": [asdict(k) for k in tr.kernels],
            "device_properties": [dict(p) for p in tr.device_properties], "meta": dict(tr.meta)}


def trace_from_dict(d: Mapping[str, Any]) -> Trace:
    return Trace(tuple(_event(OpEvent, o) for o in d.get("ops", ())),
                 tuple(_event(KernelEvent, k) for k in d.get("kernels", ())),
                 tuple(dict(p) for p in d.get("device_properties", ())), dict(d.get("meta", {})))
