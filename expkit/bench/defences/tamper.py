"""The tamper check: functions the harness relies on, found unchanged later (check ``tamper``).

Its clocks (``time.perf_counter``, CUDA events, ``torch.cuda.synchronize``), every
function and method of expkit's own modules (the oracles, the timers, the bench) and
the torch callables and ``Tensor`` methods the harness's own work in a side calls
(:data:`HARNESS_TORCH`: fresh inputs, pristine copies, exports, digests, oracles) are
snapshotted, object and code, before the candidate's module is imported
(:class:`FunctionSnapshot`), and compared after the import, after the preflight, after
each case and -- the *hot* subset, the clocks, torch and what the recheck calls --
after every batch of timed blocks (``changed(hot_only=True)``, on a CPU run without the
GPU timing's own functions; its cost per check is in
evidence/README.md).

The torch callables the *baseline* uses are known only once its trace is: its op names
map to the public names that reach them (:func:`torch_callables_for`: ``aten::softmax``
to ``torch.softmax``, ``torch.nn.functional.softmax``, ``Tensor.softmax``).
:meth:`FunctionSnapshot.watch` adds them to a snapshot taken earlier; since the
candidate may have replaced one before that, each is also checked for being torch's
own (:func:`foreign`: a builtin of ``torch._C``, or Python code in torch's own files).
With each side in its own process a patch in the candidate's process cannot reach the
baseline; the audit matters where both share one (``defences.isolate=false``), and for
the harness's own work beside the candidate.
"""

from __future__ import annotations

import operator
import os
import sys
import types
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Dict, Iterable, List, Tuple

import torch

TAMPER = "tamper"
#: Functions outside expkit that the harness's timing and checking rely on, and where expkit binds
#: one of them to a name of its own (``thread_count``: a builtin, which the sweep of expkit's
#: modules in :meth:`FunctionSnapshot.take` does not record), that name.
WATCHED: Tuple[str, ...] = (
    "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.monotonic_ns", "time.time",
    "time.time_ns", "time.process_time", "time.sleep", "threading.active_count", "threading.enumerate",
    "_thread._count", "expkit.checks.activity.thread_count", "expkit.bench.sides.side.thread_count",
    "gc.disable", "gc.enable", "gc.isenabled", "os.write", "os.read",
    # the channel's encoding, signing, framing and waiting (bound in bench.processes.channel before any
    # code under test: a replacement reaches no message, and is reported here)
    "json.dumps", "json.loads", "json.JSONEncoder.encode", "json.JSONDecoder.decode", "hmac.new", "hmac.digest",
    "hmac.compare_digest", "struct.pack", "struct.unpack", "struct.Struct", "select.select",
    "torch.cuda.synchronize", "torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.query", "torch.cuda.Event.synchronize", "torch.cuda.current_stream", "torch.cuda._sleep",
    "torch.Tensor.clone", "torch.Tensor.copy_", "torch.Tensor.to", "torch.Tensor.abs", "torch.Tensor.max",
    "torch.Tensor.__getitem__", "torch.Tensor.__setitem__", "torch.Tensor.untyped_storage",
    "torch.Tensor.detach", "torch.equal", "torch.isnan", "torch.where", "torch.linalg.vector_norm",
)
#: torch callables and ``Tensor`` methods the harness's own work in a side process calls
#: (fresh inputs, pristine copies, transport, digests, the oracles, the poisoned
#: allocations), always watched.
HARNESS_TORCH: Tuple[str, ...] = (
    "torch.empty", "torch.empty_like", "torch.zeros", "torch.zeros_like", "torch.full_like", "torch.ones_like",
    "torch.frombuffer", "torch.as_strided", "torch.randint", "torch.isfinite", "torch.isinf", "torch.nan_to_num",
    "torch.get_num_threads", "torch.set_num_threads", "torch.use_deterministic_algorithms",
    "torch.are_deterministic_algorithms_enabled", "torch.is_grad_enabled", "torch.no_grad",
    "torch.Tensor.numel", "torch.Tensor.view", "torch.Tensor.reshape", "torch.Tensor.flatten",
    "torch.Tensor.contiguous", "torch.Tensor.sum", "torch.Tensor.add", "torch.Tensor.stride",
    "torch.Tensor.storage_offset", "torch.Tensor.data_ptr", "torch.Tensor.element_size",
    "torch.Tensor.is_contiguous", "torch.Tensor.nonzero", "torch.Tensor.zero_", "torch.Tensor.fill_",
    "torch.Tensor.double", "torch.Tensor.float", "torch.Tensor.cpu", "torch.Tensor.__sub__", "torch.Tensor.__eq__",
    "torch.Tensor.__ne__", "torch.Tensor.__mul__", "torch.Tensor.__truediv__", "torch.Tensor.__torch_function__",
    "torch.Tensor.__torch_dispatch__", "torch.Tensor.isnan", "torch.Tensor.any", "torch.Tensor.all",
    "torch.Tensor.min", "torch.Tensor.sub", "torch.Tensor.mul",
    "torch.profiler.profile", "torch.profiler.record_function",
)

#: The subset checked after every timed block: the clocks and what the recheck calls.
HOT_PREFIXES = ("time.", "torch.", "gc.", "threading.", "_thread.", "expkit.checks.activity.thread_count",
                "expkit.bench.sides.side.thread_count", "expkit.timing.timer.", "expkit.timing.cuda_timer.",
                "expkit.checks.oracles.", "expkit.timing.per_call.", "expkit.timing.kernel_time.",
                "expkit.timing.cupti_recorder.", "expkit.bench.defences.fresh.FreshInputs",
                "expkit.bench.sides.side.CaseState", "expkit.bench.sides.judge.Judge.recheck")


#: Of the hot subset, what only a GPU block's timing calls (the CUDA timer, the kernel-time
#: recorder, ``torch.cuda``): a CPU block's check leaves these to the case's checkpoints,
#: which read every entry, as its state check leaves CUDA's settings (96 of 228 entries; a
#: check 12.3 against 21.7 us warm: evidence/README.md).
GPU_ONLY_PREFIXES = ("torch.cuda.", "expkit.timing.cuda_timer.", "expkit.timing.kernel_time.",
                     "expkit.timing.cupti_recorder.")


def _resolve_dotted(name: str) -> Tuple[Any, str, Any]:
    """(container, attribute, current object) for ``a.b.C.m``; raises if absent."""
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        modname = ".".join(parts[:i])
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        obj: Any = mod
        for p in parts[i:-1]:
            obj = getattr(obj, p)
        # A class's own attribute as stored (a classmethod, not a new bound method each time),
        # as :meth:`FunctionSnapshot.changed` reads it back.
        raw = vars(obj).get(parts[-1]) if isinstance(obj, (type, types.ModuleType)) else None
        return obj, parts[-1], raw if raw is not None else getattr(obj, parts[-1])
    raise LookupError(name)


def _code_of(obj: Any) -> Any:
    fn = getattr(obj, "__func__", obj)
    if isinstance(fn, property):
        fn = fn.fget
    return getattr(fn, "__code__", None)


@dataclass
class FunctionSnapshot:
    """Objects (and their code) the harness relies on, to be found unchanged later.

    Holding the objects themselves (not their ``id``) keeps an id from being reused
    by a replacement. A function whose ``__code__`` was swapped in place keeps its
    identity, so the code object is compared too."""

    entries: Dict[str, Tuple[Any, str, Any, Any]] = field(default_factory=dict)

    @classmethod
    def take(cls) -> "FunctionSnapshot":
        snap = cls()
        for name in WATCHED + HARNESS_TORCH:
            try:
                container, attr, obj = _resolve_dotted(name)
            except Exception:
                continue
            snap.entries[name] = (container, attr, obj, _code_of(obj))
        for modname, mod in list(sys.modules.items()):
            if mod is None or not (modname == "expkit" or modname.startswith("expkit.")):
                continue
            for attr, obj in list(vars(mod).items()):
                if isinstance(obj, types.FunctionType) and obj.__module__ == modname:
                    snap.entries[f"{modname}.{attr}"] = (mod, attr, obj, obj.__code__)
                elif isinstance(obj, type) and obj.__module__ == modname:
                    for a, v in list(vars(obj).items()):
                        if isinstance(v, (types.FunctionType, staticmethod, classmethod, property)):
                            snap.entries[f"{modname}.{attr}.{a}"] = (obj, a, v, _code_of(v))
        return snap

    def watch(self, names: Iterable[str]) -> List[str]:
        """Add ``names`` (dotted, e.g. from :func:`torch_callables_for`) as they are now; return
        those already not torch's own (:func:`foreign`), each as ``name (not torch's own)``."""
        added = []
        for name in names:
            if name in self.entries:
                continue
            try:
                container, attr, obj = _resolve_dotted(name)
            except Exception:
                continue
            self.entries[name] = (container, attr, obj, _code_of(obj))
            added.append(name)
        self.__dict__.pop("_hot", None)
        self.__dict__.pop("_hot_cpu", None)
        return [f"{n} (not torch's own)" for n in foreign(added)]

    def changed(self, *, hot_only: bool = False, gpu: bool = True) -> List[str]:
        """Entries changed since the snapshot; ``hot_only``: the hot subset only, and with
        ``gpu=False`` (a CPU block) without :data:`GPU_ONLY_PREFIXES`."""
        if not hot_only:
            return _changed(self.entries.items())
        key = "_hot" if gpu else "_hot_cpu"
        hot = self.__dict__.get(key)
        if hot is None:
            hot = self.__dict__[key] = _Hot([(n, e) for n, e in self.entries.items() if n.startswith(HOT_PREFIXES)
                                             and (gpu or not n.startswith(GPU_ONLY_PREFIXES))])
        return hot.changed()


def _now(container: Any, attr: str) -> Any:
    now = vars(container).get(attr) if isinstance(container, (type, types.ModuleType)) else None
    return now if now is not None else getattr(container, attr)


def _changed(entries: Iterable[Tuple[str, Tuple[Any, str, Any, Any]]]) -> List[str]:
    out = []
    for name, (container, attr, obj, code) in entries:
        try:
            now = _now(container, attr)
        except Exception:
            out.append(f"{name} (removed)")
            continue
        if now is not obj:
            out.append(f"{name} (replaced)")
        elif code is not None and _code_of(now) is not code:
            out.append(f"{name} (code swapped)")
    return out


class _Hot:
    """The hot subset, checked after every timed block, read the fast way: each entry's
    namespace (a module's ``__dict__``, or for a class the ``__dict__`` of the class in
    its MRO that defines the attribute; both stay live) and its function object are
    looked up once, and each check is three passes that run in C (``map`` of
    ``operator`` functions under ``any``): every entry's object read back from its
    namespace and tested for identity, every function's ``__code__`` for identity, and
    every class before the defining one in an inherited attribute's MRO (``torch.Tensor.clone``
    lives on ``TensorBase``) for holding the attribute, where an assignment to
    ``torch.Tensor.clone`` would put it. A difference found that way is re-read by
    :func:`_changed`, which gives the reason; entries whose container is neither module
    nor class take the slow way every time."""

    def __init__(self, entries: List[Tuple[str, Tuple[Any, str, Any, Any]]]) -> None:
        self.slow: List[Tuple[str, Tuple[Any, str, Any, Any]]] = []
        self.names: List[Tuple[str, Tuple[Any, str, Any, Any]]] = []
        spaces: List[Any] = []
        attrs: List[str] = []
        objs: List[Any] = []
        fns: List[Any] = []
        codes: List[Any] = []
        shadows: List[Any] = []
        shadowed: List[str] = []
        for name, e in entries:
            container, attr, obj, code = e
            found = _defining(container, attr)
            if found is None or found[1].get(attr) is not obj:
                self.slow.append((name, e))
                continue
            before, ns = found
            spaces.append(ns)
            attrs.append(attr)
            objs.append(obj)
            if code is not None:
                fn = getattr(obj, "__func__", obj)
                fns.append(fn.fget if isinstance(fn, property) else fn)
                codes.append(code)
            shadows.extend(before)
            shadowed.extend([attr] * len(before))
            self.names.append((name, e))
        self._read = (tuple(spaces), tuple(attrs), tuple(objs))
        self._code = (tuple(fns), tuple(codes))
        self._shadow = (tuple(shadows), tuple(shadowed))

    def _moved(self) -> bool:
        spaces, attrs, objs = self._read
        fns, codes = self._code
        shadows, shadowed = self._shadow
        try:
            return (any(map(operator.is_not, map(operator.getitem, spaces, attrs), objs))
                    or any(map(operator.is_not, map(getattr, fns, repeat("__code__")), codes))
                    or any(map(operator.contains, shadows, shadowed)))
        except Exception:  # an entry removed from its namespace (KeyError), or stranger: the slow way says
            return True

    def changed(self) -> List[str]:
        if self._moved():
            return _changed(self.names) + _changed(self.slow)
        return _changed(self.slow) if self.slow else []


def _defining(container: Any, attr: str) -> Any:
    """(namespaces that must not hold ``attr``, the namespace that does) for a module or
    a class, else None."""
    if isinstance(container, types.ModuleType):
        return (), vars(container)
    if not isinstance(container, type):
        return None
    before = []
    for k in container.__mro__:
        ns = vars(k)
        if attr in ns:
            return tuple(before), ns
        before.append(ns)
    return None


#: Where the public names of an aten op live, tried for each op of a trace.
_NAMESPACES = ("torch", "torch.nn.functional", "torch.Tensor", "torch.special", "torch.linalg", "torch.fft")


def torch_callables_for(op_names: Iterable[str]) -> Tuple[str, ...]:
    """The public torch names that reach the trace's ``aten::`` ops and exist in this torch.

    ``aten::softmax`` gives ``torch.softmax``, ``torch.nn.functional.softmax`` and
    ``torch.Tensor.softmax``; ``aten::_softmax`` (private) gives nothing; an overload
    suffix is dropped; in-place ops keep their underscore (``torch.Tensor.add_``). A
    name is a guess from the op's name, so a public function that reaches an op under
    another name (``torch.nn.functional.linear`` reaches ``aten::addmm``) is found only
    where the trace also has the outer op (``aten::linear``), as it usually does."""
    out: Dict[str, None] = {}
    for op in op_names:
        if not op.startswith("aten::"):
            continue
        base = op[len("aten::"):].split(".")[0]
        if not base or base.startswith("_"):
            continue
        for ns in _NAMESPACES:
            name = f"{ns}.{base}"
            try:
                _resolve_dotted(name)
            except Exception:
                continue
            out[name] = None
    return tuple(out)


def _torch_dir() -> str:
    return os.path.dirname(os.path.realpath(torch.__file__))


def foreign(names: Iterable[str]) -> List[str]:
    """The names among ``names`` whose current object is not torch's own: neither a builtin
    (function, method or slot) defined by torch's C extension nor Python code in torch's
    own files. A patch installed before a snapshot was taken shows up here."""
    root = _torch_dir()
    out = []
    for name in names:
        try:
            _, _, obj = _resolve_dotted(name)
        except Exception:
            continue
        fn = getattr(obj, "__func__", obj)
        code = getattr(fn, "__code__", None)
        if code is not None:
            if not os.path.realpath(code.co_filename).startswith(root):
                out.append(name)
        elif isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodDescriptorType,
                             types.WrapperDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType,
                             types.GetSetDescriptorType, type)):
            continue
        elif callable(fn) and not (getattr(type(fn), "__module__", "") or "").startswith("torch"):
            out.append(name)
    return out
