"""The run result: one typed, immutable value per run, the value ``result.json`` stores.

:class:`RunResult` is built once, from the whole document: at the end of a run
(``runner``), or from a stored file of any version (:func:`.store.load_result`, which
upgrades it first). The report, the API and the command line read this value. The fields
a reader needs by name are typed (verdict, reasons, exit code, the cases with their
times); the whole document stays readable as a mapping (``result["measured"]["cases"]``),
frozen all the way down: a stage that tries to edit a result another has read gets a
``TypeError``, and a change is a new value. ``to_json`` gives the plain document back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, NoReturn, Optional, Tuple

from ..verdict.rules import EXIT_CODES

#: The version of ``result.json`` this expkit writes; ``store.py`` holds the history and the upgraders.
RESULT_SCHEMA_VERSION = 5

__all__ = ["RESULT_SCHEMA_VERSION", "FrozenDict", "FrozenList", "freeze", "thaw", "SideTime", "CaseResult", "Overall", "RunResult"]


def _refuse(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(f"a run result is immutable: build a new one (report.result.RunResult.of), "
                    f"not {type(self).__name__} edited in place")


class FrozenDict(Dict[str, Any]):
    """A ``dict`` that refuses every edit: JSON, ``isinstance(x, dict)``, ``dict(x)`` and
    ``{**x}`` (which make a mutable copy) work as on any dict."""

    __slots__ = ()
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> Any:  # copy and pickle rebuild it whole, never item by item
        return (FrozenDict, (dict(self),))


class FrozenList(List[Any]):
    """A ``list`` that refuses every edit; compares equal to a list of the same items."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = clear = \
        sort = reverse = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        return (FrozenList, (list(self),))


def freeze(value: Any) -> Any:
    """``value`` with every mapping a :class:`FrozenDict` and every list or tuple a
    :class:`FrozenList`, all the way down; other values as they are."""
    if isinstance(value, FrozenDict) or isinstance(value, FrozenList):
        return value
    if isinstance(value, Mapping):
        return FrozenDict((str(k), freeze(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return FrozenList(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The plain, mutable copy of a frozen value (dicts and lists all the way down)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class SideTime:
    """One side's time per call in one case: the median with its interval, and the sample count."""

    median_s: float
    ci_low_s: float
    ci_high_s: float
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError(f"SideTime: n must be >= 0, got {self.n}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SideTime":
        return cls(float(d["median"]), float(d["ci_low"]), float(d["ci_high"]), int(d["n"]))


@dataclass(frozen=True)
class CaseResult:
    """One case: the speedup's estimate and interval against the claim, and both sides' times.

    ``baseline`` and ``candidate`` are the figure the verdict was judged on, with their
    intervals: ``judged_on`` says which -- ``kernel`` (the GPU's own record of each
    call's kernels, ``measure.timer=kernel``) or ``call`` (the whole call: CUDA events on
    a GPU, the host's clock on a CPU). Beside it, each side's median **kernel time** and
    **call time**, ``None`` where the run did not measure that figure (no kernel time on
    a CPU, with ``measure.timer=events`` or without cupti-python), and the speedup in
    each figure (``result.json``'s ``timing.cases``, see ``timing/figures.py``).
    """

    name: str
    verdict: Optional[str]
    speedup: float
    ci_low: float
    ci_high: float
    confidence: float
    claimed: float
    threshold: Optional[float]
    baseline: SideTime
    candidate: SideTime
    judged_on: str = "call"
    baseline_kernel_s: Optional[float] = None
    candidate_kernel_s: Optional[float] = None
    baseline_call_s: Optional[float] = None
    candidate_call_s: Optional[float] = None
    kernel_speedup: Optional[float] = None
    call_speedup: Optional[float] = None
    warnings: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.ci_low <= self.ci_high:
            raise ValueError(f"CaseResult {self.name}: ci_low {self.ci_low} > ci_high {self.ci_high}")
        if self.judged_on not in ("kernel", "call"):
            raise ValueError(f"CaseResult {self.name}: judged_on must be kernel or call, got {self.judged_on!r}")

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any], figures: Optional[Mapping[str, Any]] = None) -> "CaseResult":
        """From ``result.json``'s ``measured.cases[name]`` and, where stored, ``timing.cases[name]``."""
        f = figures or {}
        judged = "kernel" if f.get("judged_on") == "kernel" else "call"
        baseline, candidate = SideTime.from_dict(d["baseline"]), SideTime.from_dict(d["candidate"])

        def side(key: str, name_: str, own: SideTime) -> Optional[float]:
            v = (f.get(name_) or {}).get(key)
            if v is None and key == "call_median" and judged == "call":
                return own.median_s  # the verdict's figure is the call time
            return None if v is None else float(v)

        def ratio(b: Optional[float], c: Optional[float]) -> Optional[float]:
            return b / c if b is not None and c else None

        bk, ck = side("kernel_median", "baseline", baseline), side("kernel_median", "candidate", candidate)
        bc, cc = side("call_median", "baseline", baseline), side("call_median", "candidate", candidate)
        return cls(
            name=name, verdict=d.get("verdict"), speedup=float(d["speedup"]), ci_low=float(d["ci_low"]),
            ci_high=float(d["ci_high"]), confidence=float(d["confidence"]), claimed=float(d["claimed"]),
            threshold=None if d.get("threshold") is None else float(d["threshold"]),
            baseline=baseline, candidate=candidate, judged_on=judged,
            baseline_kernel_s=bk, candidate_kernel_s=ck, baseline_call_s=bc, candidate_call_s=cc,
            kernel_speedup=ratio(bk, ck), call_speedup=ratio(bc, cc), warnings=tuple(d.get("warnings") or ()),
        )


@dataclass(frozen=True)
class Overall:
    """Geometric mean of the cases' speedups, with their bounds combined the same way."""

    speedup: float
    ci_low: float
    ci_high: float
    confidence: float
    cases: int




@dataclass(frozen=True, eq=False)
class RunResult(Mapping[str, Any]):
    """One run's result: typed where read by name, and the whole stored document beside.

    ``exit_code`` is what ``expkit run`` exits with for the verdict (0 supported,
    1 refuted, 3 invalid, 4 inconclusive). ``cases`` holds the measured cases in the
    manifest's order (none for a run its preflight stopped); ``unmeasured``, each declared
    case with no estimate and why. As a mapping it reads the document (read-only); two
    results are equal when their documents are."""

    document: FrozenDict = field(repr=False)
    name: str
    verdict: str
    reasons: Tuple[str, ...]
    exit_code: int
    cases: Tuple[CaseResult, ...]
    overall: Optional[Overall]
    unmeasured: Mapping[str, str]
    wall_seconds: Optional[float]
    seed: Optional[int]
    schema_version: int

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> "RunResult":
        """The value of a current-version ``result.json`` document (an older one goes
        through :func:`.store.load_result`, which upgrades it)."""
        if isinstance(document, RunResult):
            return document
        doc = freeze(document)
        version = int(doc.get("schema_version", 0))
        if version != RESULT_SCHEMA_VERSION:
            raise ValueError(f"RunResult: schema_version {version}, this expkit builds {RESULT_SCHEMA_VERSION} "
                             "(read older files through report.store.load_result, which upgrades them)")
        if doc.get("verdict") not in EXIT_CODES:
            raise ValueError(f"RunResult: unknown verdict {doc.get('verdict')!r} (one of {', '.join(EXIT_CODES)})")
        measured = doc.get("measured") or {}
        figures = (doc.get("timing") or {}).get("cases") or {}
        cases = tuple(CaseResult.from_dict(n, d, figures.get(n)) for n, d in (measured.get("cases") or {}).items())
        o = measured.get("overall")
        overall = Overall(float(o["speedup"]), float(o["ci_low"]), float(o["ci_high"]), float(o["confidence"]),
                          int(o["cases"])) if o else None
        return cls(document=doc, name=str(doc["name"]), verdict=str(doc["verdict"]),
                   reasons=tuple(doc.get("reasons") or ()), exit_code=EXIT_CODES[doc["verdict"]], cases=cases,
                   overall=overall, unmeasured=FrozenDict(measured.get("unmeasured") or {}),
                   wall_seconds=doc.get("wall_seconds"), seed=doc.get("seed"), schema_version=version)

    def to_json(self) -> Dict[str, Any]:
        """The document as plain JSON data (what ``result.json`` holds)."""
        return thaw(self.document)

    @property
    def ok(self) -> bool:
        """True when the claim is supported."""
        return self.verdict == "supported"

    def case(self, name: str) -> CaseResult:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(f"{self.name}: no measured case {name!r} (measured: {', '.join(c.name for c in self.cases)})")

    # -- the document, read-only -------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self.document[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.document)

    def __len__(self) -> int:
        return len(self.document)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RunResult):
            return self.document == other.document
        return self.document == other if isinstance(other, Mapping) else NotImplemented

    __hash__ = None  # type: ignore[assignment]
