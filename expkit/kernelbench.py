"""KernelBench-style problem files as expkit claims.

KernelBench (ScalingIntelligence/KernelBench) states a problem as one Python file
defining ``Model`` (an ``nn.Module``), ``get_inputs()`` (the forward arguments) and
``get_init_inputs()`` (the constructor arguments); a solution is a file defining
``ModelNew`` with the same constructor and forward. A manifest names such a pair::

    kernelbench: {problem: 19_ReLU.py, solution: 19_ReLU_new.py, precision: fp32}
    claim: {speedup: 1.0}
    cases: [{name: default}]

and this module turns it into the three callables the runner needs:

* **baseline** ``Model(*get_init_inputs())`` and **candidate** ``ModelNew(*get_init_inputs())``,
  each built on its first call (so a ``ModelNew`` whose constructor fails, e.g. an
  inline extension that does not compile, is a failed candidate, not a usage error).
  Both are built under the same torch seed (``kernelbench.seed``, 42 by default,
  KernelBench's own), with ``get_init_inputs()`` called under that seed too, so a
  ``ModelNew`` that creates the same parameters in the same order gets the same
  values -- this is how KernelBench matches weights, and its limit: a solution
  that creates its parameters in another order gets other values and fails the
  oracle, as it would in KernelBench. Both are moved to the manifest's device and
  cast to ``precision``; forward calls run under ``torch.no_grad()``.
* **inputs** ``get_inputs()`` called under a seed drawn from the preflight's
  per-trial generator, inside ``torch.random.fork_rng`` so the global RNG is left
  as it was. Each preflight trial therefore gets fresh inputs, where KernelBench
  uses seed 42 for the first trial. Floating tensors are cast to ``precision``;
  integer tensors (indices, labels) keep their dtype -- KernelBench casts every
  tensor, which would turn an index tensor into floats.
* **oracle** ``allclose`` with KernelBench's tolerance as both ``rtol`` and
  ``atol``: 1e-4 for fp32, 1e-2 for fp16 and bf16 (``get_tolerance_for_precision``
  in KernelBench's ``src/kernelbench/eval.py``), filled in by the manifest when
  its allclose oracle states no tolerance.

expkit's own defences apply on top, unchanged: NaN-poisoned allocations, input
hashing, storage-aliasing checks, null-candidate calibration of the tolerance,
several trials with fresh inputs, the profiler identity check (``expect:``; by
default a candidate that runs the baseline's own ops is invalid -- list ops it
may legitimately reuse under ``expect.allow``), interleaved timing and a verdict
with an interval. Case ``params`` override the problem module's globals while
``get_inputs()`` runs, so ``kernelbench.free: [batch_size]`` with
``params: {batch_size: 16}`` also runs the awkward sizes of the preflight.

A problem file that does not import, or lacks ``Model``/``get_inputs``/
``get_init_inputs``, is a manifest error (exit 2): the reference is broken, not the
claim. A solution that does not import or lacks ``ModelNew`` fails as a candidate.

``expkit import kernelbench DIR`` writes one manifest per problem/solution pair
found in ``DIR`` (see :func:`find_pairs` for how files are paired).
"""

from __future__ import annotations

import ast
import contextlib
import datetime as _dt
import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from .errors import ExpkitError, ManifestError

PRECISION_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _dtype(precision: str) -> Any:
    import torch

    return getattr(torch, PRECISION_DTYPES[precision])


def load_file(path: Path) -> Any:
    """Import ``path`` as a fresh module under a name unique to its path and content.

    Its folder is on ``sys.path`` during the import only, so a problem may import a
    helper beside it. The module stays in ``sys.modules`` (some JIT compilers, e.g.
    ``triton.jit``, look their module up there)."""
    data = path.read_bytes()
    digest = hashlib.sha256(str(path).encode() + data).hexdigest()[:12]
    name = f"_expkit_kb_{''.join(c if c.isalnum() else '_' for c in path.stem)}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.path.remove(str(path.parent))
    return module


@contextlib.contextmanager
def seeded(seed: int, device: str) -> Iterator[None]:
    """Run the block under ``torch.manual_seed(seed)`` and restore the RNG state after."""
    import torch

    devices = [torch.cuda.current_device()] if device == "cuda" and torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def cast(values: Sequence[Any], device: str, dtype: Any) -> Tuple[Any, ...]:
    """Move tensors to ``device``; floating ones also to ``dtype``; leave the rest."""
    import torch

    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            v = v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device=device)
        out.append(v)
    return tuple(out)


@contextlib.contextmanager
def _globals(module: Any, params: Mapping[str, Any], where: str) -> Iterator[None]:
    """Set the problem module's globals named in ``params`` for the block's duration."""
    missing = [k for k in params if not hasattr(module, k)]
    if missing:
        raise ValueError(f"case params {missing} name no global of {where} "
                         f"(its globals: {', '.join(k for k in vars(module) if not k.startswith('_'))})")
    saved = {k: getattr(module, k) for k in params}
    try:
        for k, v in params.items():
            setattr(module, k, v)
        yield
    finally:
        for k, v in saved.items():
            setattr(module, k, v)


class ModelSide:
    """A model class as a baseline or candidate callable, built on its first call."""

    def __init__(self, label: str, cls: Optional[type], init_inputs: Optional[Callable[[], Sequence[Any]]],
                 *, seed: int, device: str, precision: str, error: Optional[str] = None) -> None:
        self.label, self.cls, self.init_inputs = label, cls, init_inputs
        self.seed, self.device, self.precision, self.error = seed, device, precision, error
        self.model: Any = None
        if cls is not None:
            # environment.source_hashes follows __wrapped__ to the file defining forward.
            self.__wrapped__ = getattr(cls, "forward", cls)

    def build(self) -> Any:
        if self.model is None:
            if self.error is not None:
                raise RuntimeError(self.error)
            assert self.cls is not None and self.init_inputs is not None
            dtype = _dtype(self.precision)
            with seeded(self.seed, self.device):
                init = cast(list(self.init_inputs()), self.device, dtype)
            with seeded(self.seed, self.device):
                model = self.cls(*init)
            self.model = model.to(device=self.device, dtype=dtype)
        return self.model

    def __call__(self, *args: Any) -> Any:
        import torch

        model = self.build()
        with torch.no_grad():
            return model(*args)

    def __repr__(self) -> str:
        return f"<{self.label}>"


class InputFactory:
    """``get_inputs()`` as an expkit input factory ``(params, generator, device) -> tuple``."""

    def __init__(self, module: Any, where: str, precision: str) -> None:
        self.module, self.where, self.precision = module, where, precision
        self.__wrapped__ = module.get_inputs

    def __call__(self, params: Mapping[str, Any], gen: Any, device: str) -> Tuple[Any, ...]:
        # One draw from the trial's generator seeds get_inputs(): the trial's seed, not
        # the global RNG's state, decides the inputs.
        seed = int(gen.initial_seed())
        with _globals(self.module, params, self.where), seeded(seed, device):
            got = self.module.get_inputs()
        if not isinstance(got, (list, tuple)):
            got = [got]
        return cast(list(got), device, _dtype(self.precision))


def sides(lm: Any) -> Tuple[ModelSide, ModelSide, InputFactory]:
    """Baseline, candidate and input factory for a manifest with a ``kernelbench:`` pair."""
    m = lm.manifest
    kb = m.kernelbench
    assert kb is not None
    problem_path = (lm.folder / kb.problem).resolve()
    solution_path = (lm.folder / kb.solution).resolve()
    for key, p in (("kernelbench.problem", problem_path), ("kernelbench.solution", solution_path)):
        if not p.is_file():
            raise ManifestError(lm.path, key, f"no such file: {p}", "give the path relative to the manifest")
    try:
        problem = load_file(problem_path)
    except Exception as e:
        raise ManifestError(lm.path, "kernelbench.problem", f"importing {problem_path.name} raised "
                            f"{type(e).__name__}: {e}", "fix the problem file so that it imports") from None
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(problem, attr):
            raise ManifestError(lm.path, "kernelbench.problem", f"{problem_path.name} defines no `{attr}`",
                                "a KernelBench problem defines Model, get_inputs() and get_init_inputs()")
    error, new_cls = None, None
    try:
        solution = load_file(solution_path)
        new_cls = getattr(solution, "ModelNew", None)
        if new_cls is None:
            error = f"solution {solution_path.name} defines no `ModelNew`"
    except Exception as e:  # a solution that does not compile is a failed candidate
        error = f"solution {solution_path.name} failed to import: {type(e).__name__}: {e}"
    init = problem.get_init_inputs
    common = dict(seed=kb.seed, device=m.device, precision=kb.precision)
    baseline = ModelSide(f"{problem_path.name}:Model", problem.Model, init, **common)
    candidate = ModelSide(f"{solution_path.name}:ModelNew", new_cls, init, error=error, **common)
    return baseline, candidate, InputFactory(problem, problem_path.name, kb.precision)


# --- expkit import kernelbench DIR ------------------------------------------------


@dataclass(frozen=True)
class Pair:
    problem: Path
    solution: Path

    @property
    def name(self) -> str:
        return self.solution.stem if self.solution.stem != self.problem.stem else \
            f"{self.problem.stem}-{self.solution.parent.name}"


def classify(path: Path) -> Optional[str]:
    """``"solution"`` (defines ``class ModelNew``), ``"problem"`` (``class Model`` and
    ``get_inputs``) or None, read from the file's syntax tree without importing it."""
    try:
        text = path.read_text()
    except (UnicodeDecodeError, OSError):
        return None
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError:
        # A solution that does not parse still gets its manifest: it fails as a candidate.
        return "solution" if "class ModelNew" in text else None
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    if "ModelNew" in names:
        return "solution"
    if {"Model", "get_inputs", "get_init_inputs"} <= names:
        return "problem"
    return None


def find_pairs(root: Path) -> Tuple[List[Pair], List[Path]]:
    """Problem/solution pairs under ``root`` (searched recursively) and unpaired solutions.

    Files are told apart by what they define (:func:`classify`). A solution pairs
    with the problem whose file stem is the longest prefix of its own stem, so
    ``19_ReLU.py`` pairs with ``19_ReLU_new.py`` beside it and with
    ``solutions/19_ReLU.py`` in another folder; ``1_Conv.py`` never claims
    ``11_Conv_new.py``, because a prefix must end at the stem or at ``_``/``-``/``.``.
    Several solutions may share a problem (one manifest each).
    """
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    kinds = {p: classify(p) for p in files}
    problems = [p for p, k in kinds.items() if k == "problem"]
    pairs, orphans = [], []
    for sol in (p for p, k in kinds.items() if k == "solution"):
        best = None
        for prob in problems:
            s, q = sol.stem, prob.stem
            if s == q or (s.startswith(q) and s[len(q)] in "_-."):
                if best is None or len(q) > len(best.stem) or (len(q) == len(best.stem) and prob.parent == sol.parent):
                    best = prob
        if best is None:
            orphans.append(sol)
        else:
            pairs.append(Pair(best, sol))
    return pairs, orphans


_MANIFEST = """\
# Written by `expkit import kernelbench {root}` on {date}.
# The claim below is the importer's default ({speedup:g}x with tolerance {tolerance:g}: "correct and
# at least as fast", KernelBench's fast_1 bar less the tolerance); replace it with what was claimed.
# A candidate that runs the baseline's own ops is invalid by default (expect.forbid_baseline);
# list ops it may legitimately reuse under `expect: {{allow: [...]}}`.
name: {name}
description: KernelBench-style pair, problem {problem_name}, solution {solution_name}.
kernelbench:
  problem: {problem}
  solution: {solution}
  precision: {precision}
{free}claim:
  speedup: {speedup}
  tolerance: {tolerance}
  source: "expkit import kernelbench"
device: {device}
cases:
  - name: default
{params}"""


def _int_global(path: Path, name: str) -> Optional[int]:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
                return int(node.value.value)
    return None


def write_manifests(root: Path, out: Optional[Path] = None, *, device: str = "cuda", precision: str = "fp32",
                    speedup: float = 1.0, tolerance: float = 0.05, free: Sequence[str] = (),
                    overwrite: bool = False) -> Tuple[List[Path], List[Path]]:
    """Write one manifest per pair found under ``root`` into ``out`` (default ``root``).

    Returns the manifests written and the solutions that found no problem. Each
    name in ``free`` (``batch_size``, say) that a problem defines as an integer
    global goes into its case's params and its ``kernelbench.free``; a name that no
    problem defines is an error (a typo, most likely).
    """
    root = Path(root)
    if not root.is_dir():
        raise ExpkitError(f"{root}: not a folder (expkit import kernelbench takes a folder of problem files)")
    if precision not in PRECISION_DTYPES:
        raise ExpkitError(f"--precision {precision!r}: one of {', '.join(PRECISION_DTYPES)}")
    out = Path(out) if out is not None else root
    out.mkdir(parents=True, exist_ok=True)
    pairs, orphans = find_pairs(root)
    missing = [g for g in free if not any(_int_global(p.problem, g) is not None for p in pairs)]
    if missing:
        raise ExpkitError(f"--free {', '.join(missing)}: no problem under {root} has an integer global of that name")
    written: List[Path] = []
    used: Dict[str, int] = {}
    found: Dict[str, int] = {}
    for pair in pairs:
        name = pair.name
        used[name] = used.get(name, 0) + 1
        if used[name] > 1:
            name = f"{name}-{used[name]}"
        target = out / f"{name}.yaml"
        if target.exists() and not overwrite:
            raise ExpkitError(f"{target}: already exists (pass --overwrite to replace it)")
        params = {g: v for g in free if (v := _int_global(pair.problem, g)) is not None}
        found.update(params)
        text = _MANIFEST.format(
            root=root, date=_dt.date.today().isoformat(), name=name, speedup=speedup, tolerance=tolerance,
            problem_name=pair.problem.name, solution_name=pair.solution.name,
            problem=os.path.relpath(pair.problem, out), solution=os.path.relpath(pair.solution, out),
            precision=precision, device=device,
            free=f"  free: [{', '.join(params)}]\n" if params else "",
            params=("    params: {" + ", ".join(f"{k}: {v}" for k, v in params.items()) + "}\n") if params else "",
        )
        from .store import atomic_write

        atomic_write(target, text)
        written.append(target)
    return written, orphans
