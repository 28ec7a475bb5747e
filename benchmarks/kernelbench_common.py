"""Helpers shared by the KernelBench benchmark scripts (inventory, sweep, reference eval).

Our own code: nothing here is copied from KernelBench. The problem files themselves
live only in the git-ignored ``.kernelbench/`` folder (see ``kernelbench_sweep.py``).

* :func:`problem_files` -- the problem files of a level, in KernelBench's numeric order.
* :func:`import_problem` -- import one problem file as a fresh module (a missing optional
  import such as ``einops`` is stubbed when asked, so the inventory runs anywhere).
* :func:`kind_of` -- the kind of a problem (activation, reduction, norm, softmax, matmul,
  conv, pooling, loss, scan, other), from its file name, then from its modules.
* :func:`meta_sizes` -- input, parameter and output bytes, computed with torch's default
  device set to ``meta`` (no memory, no GPU), falling back to the globals when a
  generator does not run on ``meta``.
* :func:`shrink_globals` -- integer globals divided down for a CPU smoke test.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

GIB = float(1 << 30)

KINDS = ("activation", "reduction", "norm", "softmax", "matmul", "conv", "pooling", "loss", "scan", "other")


# --- files --------------------------------------------------------------------------


def level_dir(kb_root: Path, level: int) -> Path:
    """``KB/KernelBench/levelN`` (the repository layout) or ``KB/levelN``."""
    kb_root = Path(kb_root)
    for cand in (kb_root / "KernelBench" / f"level{level}", kb_root / f"level{level}"):
        if cand.is_dir():
            return cand
    raise SystemExit(f"error: no level{level}/ under {kb_root} (nor under {kb_root}/KernelBench)")


def _number(path: Path) -> int:
    m = re.match(r"(\d+)_", path.name)
    return int(m.group(1)) if m else 10**9


def problem_files(kb_root: Path, level: int) -> List[Path]:
    return sorted(level_dir(kb_root, level).glob("*.py"), key=lambda p: (_number(p), p.name))


def rel_name(path: Path) -> str:
    """``level1/19_ReLU.py``: the problem's path as KernelBench names it."""
    return f"{path.parent.name}/{path.name}"


def kb_commit(kb_root: Path) -> str:
    f = Path(kb_root) / "COMMIT"
    return f.read_text().strip() if f.is_file() else "unknown"


# --- import -------------------------------------------------------------------------


class _Stub(types.ModuleType):
    """A stand-in for an optional module that is not installed (e.g. ``einops``)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def missing(*a: Any, **k: Any) -> Any:
            raise ModuleNotFoundError(f"{self.__name__}.{name}: module {self.__name__} is not installed (stubbed)")

        return missing


def import_problem(path: Path, *, stub_missing: bool = False) -> Any:
    """Import ``path`` as a module of its own name (its folder on sys.path meanwhile)."""
    path = Path(path).resolve()
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    name = f"_kbprob_{re.sub(r'[^0-9A-Za-z]', '_', path.stem)}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    for _ in range(5):
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.parent))
        try:
            spec.loader.exec_module(module)
            return module
        except ModuleNotFoundError as e:
            sys.modules.pop(name, None)
            if not stub_missing or not e.name or e.name in sys.modules:
                raise
            sys.modules[e.name] = _Stub(e.name)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        finally:
            sys.path.remove(str(path.parent))
    raise RuntimeError(f"{path}: too many missing modules")


# --- kind ---------------------------------------------------------------------------

# Checked in this order on the lower-cased file name, split into words. A level-2 or
# level-3 name lists several ops (``Conv2d_BatchNorm_ReLU``): the first rule that
# matches names the dominant one (a convolution outweighs the norm after it).
_NAME_RULES: Sequence[Tuple[str, str]] = (
    ("scan", r"cumsum|cumprod"),
    ("loss", r"loss"),
    ("conv", r"conv|resnet|vgg|alexnet|lenet|densenet|mobilenet|efficientnet|squeezenet|googlenet|inception|regnet|shufflenet|unet|convnext|swin|vit|visiontransformer"),
    ("matmul", r"matmul|matrix_multiplication|matrix_vector|gemm|bmm|linear|mlp|dense"),
    ("other", r"attention|lstm|gru|rnn|mamba|transformer|minigpt|gpt"),
    ("pooling", r"pool"),
    ("softmax", r"softmax"),
    ("norm", r"norm"),
    ("reduction", r"reduction|argmax|argmin|sum_|mean_|max_|min_|_sum|_mean|_max|_min|logsumexp"),
    ("activation", r"relu|sigmoid|tanh|swish|gelu|selu|elu|softplus|softsign|hardtanh|hardswish|mish|silu|activation"),
)


def kind_of(path: Path, module: Any = None) -> str:
    """The problem's kind: see :data:`KINDS`."""
    stem = re.sub(r"^\d+_", "", Path(path).stem).lower()
    if "newgelu" in stem:
        return "activation"  # MinGPT's tanh-approximated GELU
    if stem.startswith("matrix_scalar"):
        return "other"  # an elementwise multiply by a scalar
    if "matmul" in stem or "matrix_multiplication" in stem or "matrix_vector" in stem:
        return "matmul"
    padded = f"_{stem}_"
    for kind, pattern in _NAME_RULES:
        if re.search(pattern, padded):
            return kind
    if module is not None:
        return _kind_from_modules(module)
    return "other"


def _kind_from_modules(module: Any) -> str:
    """From the layer types the model's ``__init__`` names (read from the source)."""
    try:
        src = Path(module.__file__).read_text()
    except Exception:
        return "other"
    if re.search(r"nn\.Conv|F\.conv", src):
        return "conv"
    if re.search(r"nn\.Linear|torch\.matmul|torch\.bmm|@", src):
        return "matmul"
    if re.search(r"Pool", src):
        return "pooling"
    if re.search(r"softmax", src, re.I):
        return "softmax"
    if re.search(r"Norm", src):
        return "norm"
    return "other"


# --- sizes --------------------------------------------------------------------------


def _tensors(obj: Any) -> Iterable[Any]:
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


def _nbytes(objs: Any) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(objs))


def _describe(objs: Any) -> str:
    import torch

    parts = []
    for o in objs if isinstance(objs, (list, tuple)) else [objs]:
        if isinstance(o, torch.Tensor):
            parts.append(f"{str(o.dtype).replace('torch.', '')}{list(o.shape)}")
        else:
            parts.append(repr(o) if len(repr(o)) < 24 else type(o).__name__)
    return ", ".join(parts)


def _param_bytes(model: Any) -> int:
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def meta_sizes(module: Any, *, forward: bool = True) -> Dict[str, Any]:
    """Sizes of one problem, computed on torch's ``meta`` device (no data is made).

    ``get_init_inputs()``, ``get_inputs()``, ``Model(*init)`` and one forward all run
    under ``with torch.device('meta')`` (factory calls such as ``torch.rand`` then make
    meta tensors). Fields: ``inputs`` (a description), ``input_bytes``, ``param_bytes``
    (parameters and buffers), ``output_bytes`` (None if the forward does not run on
    meta), ``method`` (``meta``, or ``globals`` when a generator failed on meta and the
    sizes were read from the file's integer globals instead), ``note``."""
    import torch

    out: Dict[str, Any] = {"inputs": "", "input_bytes": None, "param_bytes": None, "output_bytes": None,
                           "method": "meta", "note": ""}
    with torch.device("meta"):
        try:
            init = list(module.get_init_inputs())
            inputs = module.get_inputs()
            if not isinstance(inputs, (list, tuple)):
                inputs = [inputs]
        except Exception as e:
            out.update(method="globals", note=f"get_inputs on meta: {type(e).__name__}: {str(e)[:80]}")
            out.update(_sizes_from_globals(module))
            return out
        out["inputs"] = _describe(inputs)
        out["input_bytes"] = _nbytes(inputs)
        # Tensors among the init inputs count as parameters (they are usually made into them).
        try:
            model = module.Model(*init)
            out["param_bytes"] = _param_bytes(model)
        except Exception as e:
            # Some constructors read a value back (``torch.linspace(...).item()`` in Swin):
            # build on the host instead (level-3 models are small); sizes only.
            out["note"] = f"Model built on cpu (meta: {type(e).__name__})"
            try:
                with torch.device("cpu"):
                    model = module.Model(*init)
                out["param_bytes"] = _param_bytes(model)
            except Exception as e2:
                out["note"] = f"Model on meta and cpu: {type(e2).__name__}: {str(e2)[:80]}"
                out["param_bytes"] = _nbytes(init)
            return out
        if not forward:  # sizes of inputs and parameters only (a recurrent forward on meta is slow)
            return out
        try:
            with torch.no_grad():
                y = model(*inputs)
            out["output_bytes"] = _nbytes(y)
        except Exception as e:
            out["note"] = f"forward on meta: {type(e).__name__}: {str(e)[:60]}"
    return out


def int_globals(path: Path) -> Dict[str, int]:
    """The file's module-level ``NAME = <int>`` assignments (also ``a = b = 3``, ``2 * 1024``)."""
    tree = ast.parse(Path(path).read_text())
    found: Dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            try:
                value = eval(compile(ast.Expression(node.value), "<g>", "eval"), {"__builtins__": {}}, dict(found))
            except Exception:
                continue
            if isinstance(value, int) and not isinstance(value, bool):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        found[t.id] = value
    return found


def _sizes_from_globals(module: Any) -> Dict[str, Any]:
    """A rough upper bound when ``get_inputs`` does not run on meta: the product of the
    integer globals that look like dimensions, as one fp32 tensor."""
    g = int_globals(Path(module.__file__))
    dims = [v for k, v in g.items() if v > 1 and not re.search(r"kernel|stride|pad|dilat|group|dim$|axis", k)]
    n = 1
    for d in dims:
        n *= d
    return {"inputs": f"~fp32[{'x'.join(map(str, dims))}] (from globals)", "input_bytes": 4 * n if dims else None}


# --- shrink (CPU smoke tests) ---------------------------------------------------------

# Globals never divided: they are not sizes (or dividing them changes the problem).
_KEEP = re.compile(r"kernel|stride|pad|dilat|group|axis|reduce|classes|eps|margin|scale|factor|multiplier|"
                   r"slope|^p$|prob|bias|heads|^dim$|_dim$|top", re.I)


def shrink_globals(path: Path, factor: int, *, floor: int = 32, batch_floor: int = 2) -> Dict[str, int]:
    """Integer globals of ``path`` divided by ``factor``, for a smoke test.

    Sizes (``batch_size``, ``in_channels``, ``dim1``, ``N``, ...) are divided, to at least
    ``floor`` (``batch_floor`` for a batch size), never below what a kernel of the file
    needs; kernel sizes, strides, paddings, dilations, groups, reduction axes and
    constants are kept. ``dim`` alone is ambiguous (a reduction axis in some problems,
    a feature size in others): it is divided only when it is larger than 8. Channels
    stay divisible by ``groups``/``num_groups`` where the file has them."""
    g = int_globals(path)
    out: Dict[str, int] = {}
    groups = max(g.get("groups", 1), g.get("num_groups", 1))
    for k, v in g.items():
        if k == "dim" and v > 8:
            pass
        elif _KEEP.search(k):
            continue
        low = batch_floor if "batch" in k.lower() else floor
        if v <= low:
            continue
        nv = max(low, v // factor)
        if groups > 1 and v % groups == 0:
            # Channels, features: divisible by the groups, and not down to one per group (a
            # group norm of single elements is all zeros, which no oracle can check).
            nv = max(groups * max(1, min(4, v // groups)), (nv // groups) * groups)
        if nv != v:
            out[k] = nv
    return out


def rewrite_globals(text: str, values: Dict[str, int]) -> str:
    """``text`` with the values of the module-level assignments named in ``values`` replaced.

    Only the value's own source span is rewritten, so ``depth = 32; height = width = 128``
    keeps its other statements; a chained ``height = width = 128`` is rewritten when both
    names get the same new value. Tuple targets (``D, H, W = 24, 32, 32``) are left alone."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    edits = []
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and node.lineno == node.end_lineno):
            continue
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if len(names) != len(node.targets) or not all(n in values for n in names):
            continue
        new = {values[n] for n in names}
        if len(new) != 1:
            continue
        edits.append((node.value.lineno - 1, node.value.col_offset, node.value.end_col_offset, str(new.pop())))
    # Right to left within a line, so earlier offsets stay valid (offsets are in UTF-8 bytes).
    for i, a, b, val in sorted(edits, key=lambda e: (e[0], -e[1])):
        raw = lines[i].encode()
        lines[i] = (raw[:a] + val.encode() + raw[b:]).decode()
    return "".join(lines)


def shrink_source(path: Path, factor: int) -> Tuple[str, Dict[str, int]]:
    """The problem's source with its size globals divided by ``factor`` (see
    :func:`shrink_globals`), and the values that were changed."""
    text = Path(path).read_text()
    if factor <= 1:
        return text, {}
    values = shrink_globals(path, factor)
    return rewrite_globals(text, values), values


# --- memory polling --------------------------------------------------------------------


class MemPoller:
    """Peak GPU memory used (NVML, the whole device) and peak host memory (PSS) of a process tree,
    sampled from a thread of this process while ``with`` is open.

    ``gpu_peak`` is the device's ``memory.used`` at its highest less what was used when
    polling began (None without NVML or a GPU); ``host_peak`` the highest sum of proportional
    set sizes over the process ``pid`` and all its descendants (None if ``pid`` is None)."""

    def __init__(self, pid: Optional[int] = None, interval: float = 0.05, gpu_index: int = 0) -> None:
        import threading

        self.pid, self.interval = pid, interval
        self.gpu_start = self.gpu_max = None
        self.host_max: Optional[int] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._nvml = None
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            self._nvml = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(gpu_index))
        except Exception:
            self._nvml = None

    def gpu_used(self) -> Optional[int]:
        if self._nvml is None:
            return None
        try:
            nv, h = self._nvml
            return int(nv.nvmlDeviceGetMemoryInfo(h).used)
        except Exception:
            return None

    @staticmethod
    def proportional_rss(pid: int) -> int:
        """``pid``'s proportional set size (Linux ``smaps_rollup``: a page shared by n
        processes counts 1/n in each, so a forked worker's inherited pages are not counted
        twice), else its resident set (``statm``)."""
        import os

        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    @staticmethod
    def tree_rss(pid: int) -> int:
        """Sum of the proportional set sizes of ``pid`` and its descendants (from /proc; 0 if
        gone): see :meth:`proportional_rss`."""
        import os

        children: Dict[int, List[int]] = {}
        rss: Dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                rss[int(entry)] = MemPoller.proportional_rss(int(entry))
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
        total, todo = 0, [pid]
        while todo:
            p = todo.pop()
            total += rss.get(p, 0)
            todo.extend(children.get(p, []))
        return total

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            used = self.gpu_used()
            if used is not None:
                self.gpu_max = used if self.gpu_max is None else max(self.gpu_max, used)
            if self.pid is not None and n % 5 == 0:  # /proc walks cost more: every 5th sample
                r = self.tree_rss(self.pid)
                self.host_max = r if self.host_max is None else max(self.host_max, r)
            n += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> "MemPoller":
        self.gpu_start = self.gpu_used()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    @property
    def gpu_peak(self) -> Optional[int]:
        if self.gpu_max is None or self.gpu_start is None:
            return None
        return max(0, self.gpu_max - self.gpu_start)

    @property
    def host_peak(self) -> Optional[int]:
        return self.host_max


def fmt_gib(b: Optional[float], digits: int = 2) -> str:
    return "" if b is None else f"{b / GIB:.{digits}f}"
