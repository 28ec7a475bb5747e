"""KernelBench-style problem files as expkit claims.

A KernelBench problem is one Python file defining ``Model``, ``get_inputs()`` and
``get_init_inputs()``; a solution defines ``ModelNew`` with the same constructor and forward.
A manifest names such a pair (``kernelbench: {problem: 19_ReLU.py, solution: 19_ReLU_new.py,
precision: fp32}``) and this module turns it into the runner's three callables:

* **baseline** ``Model(*get_init_inputs())`` and **candidate** ``ModelNew(...)``, each built on
  its first call (a constructor that fails is a failed candidate, not a usage error), both under
  the same torch seed (``kernelbench.seed``, 42), moved to the device, cast to ``precision`` and
  called under ``torch.no_grad()``;
* **inputs** ``get_inputs()`` under a seed drawn from the preflight's per-trial generator,
  inside ``torch.random.fork_rng`` and with the manifest's device as torch's default device:
  fresh inputs each trial; floating tensors cast to ``precision``, integer tensors kept;
* **oracle** ``allclose`` with KernelBench's tolerance (1e-4 fp32, 1e-2 fp16 and bf16) where
  the manifest's allclose oracle states none.

expkit's own defences apply on top, unchanged. Case ``params`` override the problem module's
globals while ``get_inputs()`` runs, so ``kernelbench.free: [batch_size]`` also runs the
preflight's awkward sizes. A problem file that does not import or lacks its names is a manifest
error (exit 2); a solution that does not import or lacks ``ModelNew`` fails as a candidate.
``expkit import kernelbench DIR`` writes one manifest per pair (:mod:`expkit.suites.kernelbench_import`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Tuple

from ..core.errors import ManifestError

PRECISION_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _dtype(precision: str) -> Any:
    # lazy: the manifest stage reads manifests without torch (a suite's supervisor does)
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
    # lazy: the manifest stage reads manifests without torch (a suite's supervisor does)
    import torch

    devices = [torch.cuda.current_device()] if device == "cuda" and torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _default_device(device: str) -> Any:
    """``torch.device(device)`` as a context (torch's factories then create there), or a
    no-op for the host."""
    # lazy: the manifest stage reads manifests without torch (a suite's supervisor does)
    import torch

    return torch.device(device) if device != "cpu" else contextlib.nullcontext()


def cast(values: Sequence[Any], device: str, dtype: Any) -> Tuple[Any, ...]:
    """Move tensors to ``device``; floating ones also to ``dtype``; leave the rest."""
    # lazy: the manifest stage reads manifests without torch (a suite's supervisor does)
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
            # lazy: the manifest stage reads manifests without torch (a suite's supervisor does)
            import torch

            dtype = _dtype(self.precision)
            # Built where it runs, with every host core: a model of gigabytes of
            # parameters initialised on one host thread takes tens of seconds. Both
            # sides build the same way, so the same seed gives the same weights.
            threads = torch.get_num_threads()
            torch.set_num_threads(max(1, os.cpu_count() or 1))
            try:
                with _default_device(self.device):
                    with seeded(self.seed, self.device):
                        init = cast(list(self.init_inputs()), self.device, dtype)
                    with seeded(self.seed, self.device):
                        model = self.cls(*init)
            finally:
                torch.set_num_threads(threads)
            self.model = model.to(device=self.device, dtype=dtype)
        return self.model

    def __call__(self, *args: Any) -> Any:
        # lazy: the manifest stage reads manifests without torch (a suite's supervisor does)
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
        # the global RNG's state, decides the inputs. The caller, ``preflight.build_inputs``,
        # runs this with the run's device as torch's default device.
        seed = int(gen.initial_seed())
        with _globals(self.module, params, self.where), seeded(seed, device):
            got = self.module.get_inputs()
        if not isinstance(got, (list, tuple)):
            got = [got]
        return cast(list(got), device, _dtype(self.precision))


def _problem(lm: Any) -> Tuple[Any, Path]:
    m = lm.manifest
    kb = m.kernelbench
    assert kb is not None
    problem_path = (lm.folder / kb.problem).resolve()
    if not problem_path.is_file():
        raise ManifestError(lm.path, "kernelbench.problem", f"no such file: {problem_path}",
                            "give the path relative to the manifest")
    try:
        problem = load_file(problem_path)
    except Exception as e:
        raise ManifestError(lm.path, "kernelbench.problem", f"importing {problem_path.name} raised "
                            f"{type(e).__name__}: {e}", "fix the problem file so that it imports") from None
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(problem, attr):
            raise ManifestError(lm.path, "kernelbench.problem", f"{problem_path.name} defines no `{attr}`",
                                "a KernelBench problem defines Model, get_inputs() and get_init_inputs()")
    return problem, problem_path


def _solution(lm: Any) -> Tuple[Optional[type], Optional[str], Path]:
    solution_path = (lm.folder / lm.manifest.kernelbench.solution).resolve()
    if not solution_path.is_file():
        raise ManifestError(lm.path, "kernelbench.solution", f"no such file: {solution_path}",
                            "give the path relative to the manifest")
    error, new_cls = None, None
    try:
        solution = load_file(solution_path)
        new_cls = getattr(solution, "ModelNew", None)
        if new_cls is None:
            error = f"solution {solution_path.name} defines no `ModelNew`"
    except Exception as e:  # a solution that does not compile is a failed candidate
        error = f"solution {solution_path.name} failed to import: {type(e).__name__}: {e}"
    return new_cls, error, solution_path


def side(lm: Any, role: str) -> Tuple[ModelSide, InputFactory]:
    """One side's callable and the input factory, importing only what that side needs.

    The baseline's process imports the problem file alone; the candidate's imports the
    solution too (and the problem file, for its inputs and constructor arguments)."""
    m = lm.manifest
    kb = m.kernelbench
    problem, problem_path = _problem(lm)
    common = dict(seed=kb.seed, device=m.device, precision=kb.precision)
    factory = InputFactory(problem, problem_path.name, kb.precision)
    if role == "baseline":
        return ModelSide(f"{problem_path.name}:Model", problem.Model, problem.get_init_inputs, **common), factory
    new_cls, error, solution_path = _solution(lm)
    return (ModelSide(f"{solution_path.name}:ModelNew", new_cls, problem.get_init_inputs, error=error, **common),
            factory)


def sides(lm: Any) -> Tuple[ModelSide, ModelSide, InputFactory]:
    """Baseline, candidate and input factory for a manifest with a ``kernelbench:`` pair (both in one process)."""
    baseline, factory = side(lm, "baseline")
    candidate, _ = side(lm, "candidate")
    return baseline, candidate, factory
