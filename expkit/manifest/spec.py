"""Manifest schema v1: the declared claim, the target, the code under test, the cases.

A manifest is the record of a claim; runner settings (how hard to measure) live in
Hydra configuration instead, so that an override on the command line can never change
what is being claimed. Every value here is frozen and checks itself when built.

Schema history (``schema_version``):
  1 -- first version. Optional keys added since, each absent from older manifests,
       which therefore still load unchanged: ``claim.calls_per_day`` and
       ``cases[].calls_per_day`` (what a speedup is worth a day), ``cases[].flops``,
       ``cases[].bytes`` and ``cases[].precision`` (achieved fraction of the device's peak).
       ``kernelbench`` (a KernelBench-style problem/solution pair in place of
       ``baseline``, ``candidate`` and ``inputs``, which became optional).
       ``end_to_end`` (the workload the kernel is for, measured beside the kernel;
       see ``expkit/workload/``).
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import yaml

from ..core.errors import ManifestError
from .schema import SchemaError, build
from .settings import nearest, presets

SCHEMA_VERSION = 1
#: Oracles that compare one call's outputs (checks/oracles.py) and oracles that swap the kernel
#: into a whole model (checks/model_oracles.py). The preflight, the bench's recheck and the
#: workload's output check apply the first kind; the model oracles run once per manifest.
PER_CALL_ORACLE_KINDS = ("rounding", "allclose", "relative_error", "exact", "custom")
MODEL_ORACLE_KINDS = ("perplexity", "kl_divergence")
ORACLE_KINDS = PER_CALL_ORACLE_KINDS + MODEL_ORACLE_KINDS
AGGREGATES = ("all", "any")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class Claim:
    """What somebody said: "candidate is ``speedup`` times faster than baseline"."""

    speedup: float
    tolerance: float = 0.05
    source: str = ""
    claimed_on: Optional[str] = None
    by: str = ""
    date: str = ""
    #: How often each case runs in production, if the claimant says; the report turns
    #: the measured saving per call into a saving per day. A case may give its own.
    calls_per_day: Optional[float] = None

    def __post_init__(self) -> None:
        if self.calls_per_day is not None and self.calls_per_day <= 0:
            raise SchemaError("calls_per_day", f"must be > 0, got {self.calls_per_day}",
                              "calls of one case per day, e.g. 2.0e9, or remove the key")
        if self.speedup <= 0:
            raise SchemaError("speedup", f"must be > 0, got {self.speedup}", "write the claimed factor, e.g. 1.7")
        if not 0 <= self.tolerance < 1:
            raise SchemaError("tolerance", f"must be in [0, 1), got {self.tolerance}",
                              "a fraction of the claim, e.g. 0.05 for 5%")

    def threshold(self, speedup: Optional[float] = None) -> float:
        """The least measured speedup that still counts as holding the claim: S·(1−t)."""
        return (self.speedup if speedup is None else speedup) * (1 - self.tolerance)


@dataclass(frozen=True)
class Limits:
    """Per-block launch limits of the GPU the claim is for (bytes, threads, registers)."""

    shared_memory_per_block: Optional[int] = None
    threads_per_block: Optional[int] = None
    registers_per_thread: Optional[int] = None


@dataclass(frozen=True)
class Target:
    gpu: Optional[str] = None
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True)
class Inputs:
    """``factory(case_params: dict, generator: torch.Generator, device: str) -> tuple``.

    ``free`` names the parameters that may take any size; the oracles add awkward
    sizes for them (1, a prime, 4097, ...)."""

    factory: str
    free: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    """One input shape. ``flops`` and ``bytes`` are the work of one call (floating-point
    operations, and bytes that must cross DRAM at least once); with them the report
    gives the achieved fraction of the device's peak. ``precision`` names the catalog's
    peak rate to compare against (``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp8``)."""

    name: str
    params: Dict[str, Any] = field(default_factory=dict)
    claim: Optional[float] = None
    calls_per_day: Optional[float] = None
    flops: Optional[float] = None
    bytes: Optional[float] = None
    precision: Optional[str] = None

    def __post_init__(self) -> None:
        if self.claim is not None and self.claim <= 0:
            raise SchemaError("claim", f"must be > 0, got {self.claim}")
        for key in ("calls_per_day", "flops", "bytes"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise SchemaError(key, f"must be > 0, got {value}", "give the figure for one call, or remove the key")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise SchemaError("precision", f"unknown precision {self.precision!r}", "one of " + ", ".join(PRECISIONS))


@dataclass(frozen=True)
class LaunchExpect:
    """Launch configuration a candidate kernel matching ``kernel`` must have (GPU only)."""

    kernel: str
    block: Optional[Tuple[int, ...]] = None
    grid: Optional[Tuple[int, ...]] = None
    max_shared_memory: Optional[int] = None
    max_registers: Optional[int] = None


@dataclass(frozen=True)
class Expect:
    """What the candidate must and must not run. Patterns are globs (``attn_*``) or
    regular expressions prefixed with ``re:``; they match op names on CPU and op or
    kernel names on GPU."""

    must_run: Tuple[str, ...] = ()
    must_not_run: Tuple[str, ...] = ()
    forbid_baseline: bool = True
    allow: Tuple[str, ...] = ()
    launch: Tuple[LaunchExpect, ...] = ()
    same_stream: bool = True
    #: The value probe: one correctness trial of the first case with every floating input
    #: the factory drew all >= 0 shifted to take both signs (``checks/preflight.py``,
    #: ``signed_probe``). False when the claim covers non-negative inputs only.
    value_probe: bool = True
    #: A speedup above this (default: the runner's ``defences.max_plausible_speedup``,
    #: 10x) is never ``supported`` without a second look; raise it here to acknowledge
    #: that a larger factor is expected (see docs/threat-model.md, "plausibility").
    max_plausible_speedup: Optional[float] = None

    def __post_init__(self) -> None:
        if self.max_plausible_speedup is not None and self.max_plausible_speedup <= 1:
            raise SchemaError("max_plausible_speedup", f"must be > 1, got {self.max_plausible_speedup}",
                              "the largest speedup you expect, e.g. 50, or remove the key")


_REDUCTION_TERM = re.compile(r"\s*(?:(\d+)|inputs\[(\d+)\]\.shape\[(-?\d+)\])\s*")


def reduction_terms(text: str) -> Tuple[Tuple[Optional[int], Optional[int], Optional[int]], ...]:
    """An oracle's ``reduction`` read as its factors: ``(n, None, None)`` for an integer,
    ``(None, i, d)`` for ``inputs[i].shape[d]``; joined by ``*``. Raises ``ValueError``."""
    terms = []
    for part in text.split("*"):
        m = _REDUCTION_TERM.fullmatch(part)
        if not m:
            raise ValueError(f"cannot read {part.strip()!r}")
        n, i, d = m.groups()
        terms.append((int(n), None, None) if n is not None else (None, int(i), int(d)))
    return tuple(terms)


@dataclass(frozen=True)
class Oracle:
    """One correctness check. Fields other than ``kind`` apply to some kinds only.

    ``rounding`` (the default) holds both sides against a float64 reference: the
    candidate's worst error may be at most ``factor`` times the baseline's plus a bound
    that grows with the square root of the reduction length (``expkit/checks/rounding.py``
    states the rule; ``factor`` and ``bound`` replace its two constants). ``reduction``
    gives that length where the shapes cannot: a
    product of integers and ``inputs[i].shape[d]`` terms, e.g. ``inputs[1].shape[1] * 9``
    for a 3x3 convolution. ``function`` names a reference implementation to call on the
    inputs upcast to float64, for a baseline that cannot run in float64.

    ``perplexity`` and ``kl_divergence`` are model-level: baseline and candidate must be
    drop-in replacements for ``torch.nn.functional.linear(x, weight, bias)``, and every
    linear layer of ``model`` (default: expkit's tiny language model) is swapped for each
    in turn, evaluated on ``tokens`` held-out bytes of ``dataset``."""

    kind: str = "rounding"
    rtol: Optional[float] = None
    atol: Optional[float] = None
    max_error: Optional[float] = None
    function: Optional[str] = None
    max_increase: Optional[float] = None
    model: str = "expkit.zoo.tinylm:load_model"
    dataset: str = "expkit.zoo.corpus:eval_tokens"
    tokens: int = 4096
    #: ``rounding``: how many times the baseline's own error the candidate may make.
    factor: Optional[float] = None
    #: ``rounding``: the constant C of the C x sqrt(K) x u bound (raise it for a naive long sum).
    bound: Optional[float] = None
    #: ``rounding``: the reduction length, where the shapes cannot tell it.
    reduction: Optional[str] = None

    def __post_init__(self) -> None:
        if self.kind not in ORACLE_KINDS:

            near = difflib.get_close_matches(self.kind, ORACLE_KINDS, n=1)
            raise SchemaError("kind", f"unknown oracle kind {self.kind!r}",
                              f"did you mean `{near[0]}`?" if near else "one of " + ", ".join(ORACLE_KINDS))
        if self.kind == "custom" and not self.function:
            raise SchemaError("function", "a custom oracle needs `function: module:function`")
        if self.kind == "rounding":
            for key in ("rtol", "atol", "max_error"):
                if getattr(self, key) is not None:
                    raise SchemaError(key, f"`{key}` does not apply to the default oracle (kind: rounding), which "
                                      "takes its tolerance from the baseline's own error",
                                      f"write `kind: allclose` (or `relative_error`) to use `{key}`, or remove it")
        else:
            for key in ("factor", "bound", "reduction"):
                if getattr(self, key) is not None:
                    raise SchemaError(key, f"`{key}` applies to kind: rounding only", f"remove `{key}`")
        if self.factor is not None and not self.factor >= 1:
            raise SchemaError("factor", f"must be >= 1, got {self.factor}",
                              "how many times the baseline's error the candidate may make, e.g. 4")
        if self.bound is not None and not self.bound > 0:
            raise SchemaError("bound", f"must be > 0, got {self.bound}", "the constant C of the bound, e.g. 2")
        if self.reduction is not None:
            try:
                reduction_terms(self.reduction)
            except ValueError as e:
                raise SchemaError("reduction", f"{e} in {self.reduction!r}",
                                  "a product of integers and inputs[i].shape[d], e.g. `inputs[1].shape[1] * 9`") from None


#: What a manifest without ``oracles:`` gets: the rounding rule (a KernelBench pair gets
#: KernelBench's own ``allclose`` tolerance instead: its contract).
DEFAULT_ORACLES: Tuple[Oracle, ...] = (Oracle(),)


@dataclass(frozen=True)
class Measure:
    """Per-manifest measurement settings; each one left null keeps the preset's value."""

    preset: Optional[str] = None
    target_ci: Optional[float] = None
    max_seconds: Optional[float] = None
    min_rounds: Optional[int] = None
    #: ``kernel`` or ``events`` (``measure.timer``, see ``manifest/settings.py``)
    timer: Optional[str] = None

    def __post_init__(self) -> None:
        if self.timer is not None and self.timer not in ("kernel", "events"):
            raise SchemaError("timer", f"unknown timer {self.timer!r}", "one of kernel, events")
        if self.preset is not None:

            known = presets("measure")
            if self.preset not in known:
                near = nearest(self.preset, known).strip()
                raise SchemaError("preset", f"no preset `{self.preset}`" + (f" ({near})" if near else ""),
                                  "the presets, in conf/measure/: " + ", ".join(known))


#: KernelBench's correctness tolerance per precision, used as both rtol and atol
#: (``get_tolerance_for_precision`` in KernelBench's ``src/kernelbench/eval.py``).
KERNELBENCH_TOLERANCE: Dict[str, float] = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}


@dataclass(frozen=True)
class KernelBench:
    """A KernelBench-style pair instead of ``baseline``/``candidate``/``inputs``.

    ``problem`` is a Python file defining ``Model`` (an ``nn.Module``) and the
    module-level functions ``get_inputs()`` and ``get_init_inputs()``; ``solution``
    defines ``ModelNew``. Paths are relative to the manifest. Both models are built
    from ``get_init_inputs()`` under the same torch seed ``seed`` (KernelBench's
    default is 42), so their parameters match; ``precision`` casts floating inputs
    and parameters and picks KernelBench's tolerance. See ``expkit/manifest/kernelbench.py``.
    """

    problem: str
    solution: str
    precision: str = "fp32"
    seed: int = 42
    #: Integer globals of the problem (``batch_size``) that may take any value; case
    #: params set them while ``get_inputs()`` runs, and the preflight adds awkward sizes.
    free: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.precision not in KERNELBENCH_TOLERANCE:
            raise SchemaError("precision", f"unknown precision {self.precision!r}",
                              "one of " + ", ".join(KERNELBENCH_TOLERANCE))


@dataclass(frozen=True)
class EndToEnd:
    """The workload the kernel is for, measured beside the kernel (``expkit/workload/``).

    ``workload`` names a builder, ``build(op, side, params, generator, device)``, that
    returns an :class:`expkit.Workload` (or a zero-argument callable): a
    whole decode loop or training step that calls ``op`` -- the manifest's baseline,
    then its candidate -- where the kernel goes. ``side`` (``"baseline"`` or
    ``"candidate"``) is there for the integration code a real change brings with it (a
    layout adapter, a compile flag); the workload must still call ``op``, and the
    profile shows whether it did. Both sides are built from the same seed.

    ``replaced`` holds patterns (globs, or ``re:`` regular expressions, as in
    ``expect:``) naming the op or kernels that the candidate replaces in the baseline
    workload's profile; their share of its time turns the micro speedup of ``case``
    into a predicted end-to-end speedup (Amdahl's law). Without them any share from 0
    to 1 is assumed, which still catches a micro win that ends as an end-to-end loss.

    ``claim`` is what the claimant says of the workload itself (``1.0``: "it does not
    slow generation down"; ``1.3``: "generation is 1.3x faster"). Given, the claim
    names the workload: the workload's interval is judged against it like a case, with
    ``tolerance`` (default: the claim's), and a refuted workload refutes the run.
    Without it the end-to-end result is evidence beside the verdict, never part of it.
    """

    workload: str
    name: str = "workload"
    params: Dict[str, Any] = field(default_factory=dict)
    case: Optional[str] = None
    replaced: Tuple[str, ...] = ()
    claim: Optional[float] = None
    tolerance: Optional[float] = None
    oracles: Tuple[Oracle, ...] = (Oracle(kind="relative_error"),)
    #: Profiled runs of each side (the spread of the replaced op's share comes from them).
    profile_runs: int = 3
    #: Seconds each side runs on its own while NVML samples GPU utilisation (GPU only).
    utilisation_seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.claim is not None and self.claim <= 0:
            raise SchemaError("claim", f"must be > 0, got {self.claim}",
                              "the end-to-end speedup claimed, e.g. 1.0 for \"no slower\"")
        if self.tolerance is not None and not 0 <= self.tolerance < 1:
            raise SchemaError("tolerance", f"must be in [0, 1), got {self.tolerance}",
                              "a fraction of the claim, e.g. 0.05 for 5%")
        if self.profile_runs < 1:
            raise SchemaError("profile_runs", f"must be >= 1, got {self.profile_runs}")
        if self.utilisation_seconds < 0:
            raise SchemaError("utilisation_seconds", f"must be >= 0, got {self.utilisation_seconds}")
        if not self.oracles:
            raise SchemaError("oracles", "at least one oracle is needed for the workload's outputs",
                              "add `oracles: [{kind: relative_error}]`")


@dataclass(frozen=True)
class Manifest:
    name: str
    claim: Claim
    cases: Tuple[Case, ...]
    # Required unless ``kernelbench`` is given, which supplies all three.
    baseline: Optional[str] = None
    candidate: Optional[str] = None
    inputs: Optional[Inputs] = None
    kernelbench: Optional[KernelBench] = None
    schema_version: int = SCHEMA_VERSION
    description: str = ""
    target: Target = field(default_factory=Target)
    expect: Expect = field(default_factory=Expect)
    oracles: Tuple[Oracle, ...] = field(default_factory=lambda: DEFAULT_ORACLES)
    measure: Measure = field(default_factory=Measure)
    aggregate: str = "all"
    device: str = "cpu"
    #: The workload the kernel is for; see :class:`EndToEnd`.
    end_to_end: Optional[EndToEnd] = None

    def __post_init__(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise SchemaError("schema_version", f"this expkit reads version {SCHEMA_VERSION}, got {self.schema_version}",
                              "upgrade expkit or set `schema_version: 1`")
        if not self.cases:
            raise SchemaError("cases", "at least one case is needed", "add `cases: [{name: default}]`")
        names = [c.name for c in self.cases]
        if len(set(names)) != len(names):
            raise SchemaError("cases", f"case names must be unique, got {names}")
        if self.aggregate not in AGGREGATES:
            raise SchemaError("aggregate", f"unknown aggregate {self.aggregate!r}", "one of " + ", ".join(AGGREGATES))
        if self.device not in ("cpu", "cuda"):
            raise SchemaError("device", f"unknown device {self.device!r}", "one of cpu, cuda")
        if not self.oracles:
            raise SchemaError("oracles", "at least one oracle is needed", "add `oracles: [{kind: allclose}]`")
        if self.end_to_end is not None and self.end_to_end.case is not None \
                and self.end_to_end.case not in [c.name for c in self.cases]:
            raise SchemaError("end_to_end.case", f"no case named {self.end_to_end.case!r}",
                              "one of " + ", ".join(c.name for c in self.cases))
        if self.kernelbench is not None:
            self._kernelbench_defaults()
        else:
            for key in ("baseline", "candidate", "inputs"):
                if getattr(self, key) is None:
                    raise SchemaError(key, "required key is missing",
                                      f"add `{key}:` (or give a `kernelbench:` pair instead)")

    def _kernelbench_defaults(self) -> None:
        kb = self.kernelbench
        assert kb is not None
        given = [k for k in ("baseline", "candidate", "inputs") if getattr(self, k) is not None]
        if given:
            raise SchemaError(given[0], "a `kernelbench:` pair brings its own baseline, candidate and inputs",
                              f"remove `{given[0]}:` or the `kernelbench:` section")
        # Normalised here so that later stages see one shape of manifest: the input
        # factory is named for messages only (the adapter supplies the function), and
        # an allclose oracle that states no tolerance takes KernelBench's.
        object.__setattr__(self, "inputs", Inputs(factory=f"{kb.problem}:get_inputs", free=kb.free))
        tol = KERNELBENCH_TOLERANCE[kb.precision]
        if self.oracles is DEFAULT_ORACLES:
            object.__setattr__(self, "oracles", (Oracle(kind="allclose"),))
        object.__setattr__(self, "oracles", tuple(
            replace(o, rtol=tol, atol=tol) if o.kind == "allclose" and o.rtol is None and o.atol is None else o
            for o in self.oracles))

    def claimed(self, case: Case) -> float:
        return case.claim if case.claim is not None else self.claim.speedup


@dataclass(frozen=True)
class LoadedManifest:
    """A manifest together with where it came from (for references and provenance)."""

    manifest: Manifest
    path: Path
    sha256: str
    raw: Dict[str, Any]

    @property
    def folder(self) -> Path:
        return self.path.parent


def load(path: str | Path) -> LoadedManifest:
    """Read and validate a manifest, or raise :class:`ManifestError` naming file, key and fix."""
    path = Path(path)
    if not path.is_file():
        raise ManifestError(path, "", "no such file", "check the path")
    text = path.read_bytes()
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ManifestError(path, "", f"malformed YAML: {where}{problem}", "fix the YAML syntax") from None
    if raw is None:
        raise ManifestError(path, "", "the file is empty", "see the manifest reference, docs/manifest.md")
    try:
        manifest = build(Manifest, raw)
    except SchemaError as e:
        raise ManifestError(path, e.key, e.problem, e.fix) from None
    return LoadedManifest(manifest, path.resolve(), hashlib.sha256(text).hexdigest(), raw)
