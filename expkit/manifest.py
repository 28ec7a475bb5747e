"""Manifest schema v1: the declared claim, the target, the code under test, the cases.

A manifest is the record of a claim; runner settings (how hard to measure) live in
Hydra configuration instead, so that an override on the command line can never change
what is being claimed. Every value here is frozen and checks itself when built.

Schema history (``schema_version``):
  1 -- first version.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import yaml

from .errors import ManifestError
from .schema import SchemaError, build

SCHEMA_VERSION = 1
ORACLE_KINDS = ("allclose", "relative_error", "exact", "custom", "perplexity", "kl_divergence")
AGGREGATES = ("all", "any")


@dataclass(frozen=True)
class Claim:
    """What somebody said: "candidate is ``speedup`` times faster than baseline"."""

    speedup: float
    tolerance: float = 0.05
    source: str = ""
    claimed_on: Optional[str] = None
    by: str = ""
    date: str = ""

    def __post_init__(self) -> None:
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
    name: str
    params: Dict[str, Any] = field(default_factory=dict)
    claim: Optional[float] = None

    def __post_init__(self) -> None:
        if self.claim is not None and self.claim <= 0:
            raise SchemaError("claim", f"must be > 0, got {self.claim}")


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


@dataclass(frozen=True)
class Oracle:
    """One correctness check. Fields other than ``kind`` apply to some kinds only."""

    kind: str = "allclose"
    rtol: Optional[float] = None
    atol: Optional[float] = None
    max_error: Optional[float] = None
    function: Optional[str] = None
    max_increase: Optional[float] = None

    def __post_init__(self) -> None:
        if self.kind not in ORACLE_KINDS:
            import difflib

            near = difflib.get_close_matches(self.kind, ORACLE_KINDS, n=1)
            raise SchemaError("kind", f"unknown oracle kind {self.kind!r}",
                              f"did you mean `{near[0]}`?" if near else "one of " + ", ".join(ORACLE_KINDS))
        if self.kind == "custom" and not self.function:
            raise SchemaError("function", "a custom oracle needs `function: module:function`")


@dataclass(frozen=True)
class Measure:
    """Per-manifest measurement settings; each one left null keeps the preset's value."""

    preset: Optional[str] = None
    target_ci: Optional[float] = None
    max_seconds: Optional[float] = None
    min_rounds: Optional[int] = None


@dataclass(frozen=True)
class Manifest:
    name: str
    baseline: str
    candidate: str
    inputs: Inputs
    claim: Claim
    cases: Tuple[Case, ...]
    schema_version: int = SCHEMA_VERSION
    description: str = ""
    target: Target = field(default_factory=Target)
    expect: Expect = field(default_factory=Expect)
    oracles: Tuple[Oracle, ...] = (Oracle(),)
    measure: Measure = field(default_factory=Measure)
    aggregate: str = "all"
    device: str = "cpu"

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
        raise ManifestError(path, "", "the file is empty", "see the manifest reference in the README")
    try:
        manifest = build(Manifest, raw)
    except SchemaError as e:
        raise ManifestError(path, e.key, e.problem, e.fix) from None
    return LoadedManifest(manifest, path.resolve(), hashlib.sha256(text).hexdigest(), raw)
