"""Which operands each op of a profiled call read: the data the whole-op-tree rule needs.

The forbidden-baseline rule (:mod:`.expectations`) must see every op the baseline ran,
not only its outermost one, without turning every shared inner op into a false alarm
(an honest blocked matrix product calls ``aten::mm`` on sub-blocks, while the
baseline's ``aten::matmul`` calls ``aten::mm`` on the whole operands). What tells the two
apart is what the op read: the baseline's own operands, or values the candidate made.

The profiler records, for every op at every depth (``record_shapes``), each tensor
operand's storage address, sizes and dtype, and (``profile_memory``) every allocation
with its address. Read in time order, that classifies each tensor operand of each op:

``held``
    storage that existed before the call (its inputs, a module's parameters, a cache)
    or a copy of such storage made during the call (``aten::copy_`` from a held
    source: ``clone``, ``contiguous``, ``to``, dtype conversion); views share their
    storage and so are held too;
``made``
    storage allocated during the call and not a copy of held storage (what earlier ops
    computed);
``none``
    no storage (fake and meta tensors: Dynamo tracing a graph computes nothing).

:func:`op_calls` returns one :class:`OpCall` per distinct (op, operands, outermost,
root): plain data, stored in a trace's ``meta["calls"]`` so that it crosses the channel.

Approximations: an address freed and allocated again within the call is ``made`` from
its new allocation on; a copy made by a routine other than ``aten::copy_`` (a
hand-written copy kernel, ``index_select`` of every row) is ``made``; scalar and
non-tensor arguments are not compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

HELD, MADE, NONE = "held", "made", "none"
#: A dispatcher op's name: one namespace and an op (``aten::mm``, ``adv::gemv``). Other
#: names in a trace are labels (``record_function``, Dynamo's and autograd's spans,
#: autograd Functions' class names), which compute nothing themselves.
DISPATCHER_OP = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?$")
_COPY_OPS = ("aten::copy_",)


def is_dispatcher_op(name: str) -> bool:
    return DISPATCHER_OP.match(name) is not None


@dataclass(frozen=True)
class Operand:
    """One tensor operand of an op call: its class (``held``, ``made``, ``none``), sizes, dtype."""

    kind: str
    sizes: Tuple[int, ...]
    dtype: str

    def describe(self) -> str:
        return f"{self.kind} {tuple(self.sizes)} {self.dtype.replace('torch.', '')}"


@dataclass(frozen=True)
class OpCall:
    """A dispatcher op as it was called: its operands, whether it is outermost (no
    dispatcher op around it; labels do not count), the label or op at the root of its
    tree (for messages), how many times it ran, and the dispatcher ops around it."""

    name: str
    operands: Tuple[Operand, ...]
    outermost: bool
    root: str
    count: int = 1
    #: The dispatcher ops around this one, outermost first.
    within: Tuple[str, ...] = ()

    @property
    def signature(self) -> Tuple[str, Tuple[Operand, ...]]:
        return self.name, self.operands

    @property
    def on_held_operands(self) -> bool:
        """Every tensor operand is held (and there is one): the call re-runs work on the call's own operands."""
        return bool(self.operands) and all(o.kind == HELD for o in self.operands)

    @property
    def computes(self) -> bool:
        """False when every tensor operand has no storage (a fake-tensor op while Dynamo traces)."""
        return not self.operands or any(o.kind != NONE for o in self.operands)

    def to_plain(self) -> List[Any]:
        return [self.name, [[o.kind, list(o.sizes), o.dtype] for o in self.operands], self.outermost, self.root,
                self.count, list(self.within)]

    @classmethod
    def from_plain(cls, v: Sequence[Any]) -> "OpCall":
        name, operands, outermost, root, count = v[:5]
        within = tuple(str(w) for w in v[5]) if len(v) > 5 else ()
        return cls(str(name), tuple(Operand(str(k), tuple(int(s) for s in sz), str(dt)) for k, sz, dt in operands),
                   bool(outermost), str(root), int(count), within)


def _tensors(value: Any) -> Iterator[Any]:
    """Tensor metadata inside one recorded input (a tensor, or a list of them)."""
    if hasattr(value, "storage_data_ptr") and hasattr(value, "sizes"):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def _flatten(events: Sequence[Any], skip: Tuple[str, ...]) -> List[Tuple[int, Any, Tuple[Any, ...]]]:
    """(start ns, event, ancestors) for every event of the tree, less the ``skip`` labels' subtrees."""
    out: List[Tuple[int, Any, Tuple[Any, ...]]] = []
    stack: List[Tuple[Any, Tuple[Any, ...]]] = [(e, ()) for e in events]
    while stack:
        e, anc = stack.pop()
        if getattr(e, "name", "") in skip:
            continue
        out.append((int(getattr(e, "start_time_ns", 0)), e, anc))
        stack.extend((c, anc + (e,)) for c in getattr(e, "children", ()))
    out.sort(key=lambda t: (t[0], len(t[2])))
    return out


def op_calls(prof: Any, *, skip: Tuple[str, ...] = ()) -> Optional[List[List[Any]]]:
    """The distinct op calls of a finished ``torch.profiler`` run, as plain lists
    (:meth:`OpCall.to_plain`), or None where this torch does not expose the record.

    The profile must have been taken with ``record_shapes=True`` and
    ``profile_memory=True``; ``skip`` names the labels whose subtrees are the harness's own."""
    try:
        tree = prof.profiler.kineto_results.experimental_event_tree()
    except Exception:
        return None
    made: set = set()
    copied: set = set()  # made storage that holds a copy of held storage
    calls: Dict[Tuple[Any, ...], OpCall] = {}
    for _, e, anc in _flatten(tree, skip):
        tag = str(getattr(e, "tag", ""))
        fields = getattr(e, "extra_fields", None)
        if tag.endswith("Allocation"):
            ptr = getattr(fields, "ptr", None)
            if ptr and getattr(fields, "alloc_size", 0) > 0:
                made.add(ptr)
                copied.discard(ptr)
            continue
        if not tag.endswith("TorchOp") or not is_dispatcher_op(e.name):
            continue
        operands = []
        ptrs = []
        for value in getattr(fields, "inputs", ()) or ():
            for t in _tensors(value):
                ptr = getattr(t, "storage_data_ptr", None)
                device = str(getattr(t, "device", ""))
                if not ptr or device.startswith("meta"):
                    kind = NONE
                elif ptr in made and ptr not in copied:
                    kind = MADE
                else:
                    kind = HELD
                operands.append(Operand(kind, tuple(int(s) for s in (t.sizes or ())), str(t.dtype)))
                ptrs.append(ptr)
        if e.name in _COPY_OPS and len(operands) >= 2 and ptrs[0]:
            if operands[1].kind == HELD:
                copied.add(ptrs[0])
            else:
                copied.discard(ptrs[0])
        within = tuple(a.name for a in anc if is_dispatcher_op(getattr(a, "name", "")))
        root = getattr(anc[0], "name", e.name) if anc else e.name
        call = OpCall(e.name, tuple(operands), not within, root, 1, within)
        key = (call.name, call.operands, call.root, call.within)
        seen = calls.get(key)
        calls[key] = call if seen is None else OpCall(call.name, call.operands, not within, root, seen.count + 1,
                                                      within)
    return [c.to_plain() for c in calls.values()]


def calls_of(meta: Any) -> Optional[Tuple[OpCall, ...]]:
    """A trace's recorded op calls (``meta["calls"]``), or None where none were recorded."""
    raw = meta.get("calls") if hasattr(meta, "get") else None
    if raw is None:
        return None
    return tuple(OpCall.from_plain(v) for v in raw)
