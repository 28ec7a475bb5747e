"""Provenance: what ran where, so that a result can be traced and repeated.

Nothing here may fail a run: a probe that cannot answer records why instead.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional

import torch

from ...core.version import __version__
from ...timing import telemetry


def _git(args: list[str], cwd: Path) -> Optional[str]:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def git_state(folder: Path) -> Dict[str, Any]:
    """Commit, dirty flag and a hash of the uncommitted diff of the repo holding ``folder``."""
    top = _git(["rev-parse", "--show-toplevel"], folder)
    if top is None:
        return {"commit": None, "dirty": None, "diff_sha256": None, "note": "not in a git repository"}
    commit = (_git(["rev-parse", "HEAD"], folder) or "").strip() or None
    status = _git(["status", "--porcelain", "--untracked-files=no"], folder) or ""
    diff = _git(["diff", "HEAD"], folder) or ""
    return {
        "commit": commit,
        "dirty": bool(status.strip()),
        "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if diff else None,
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def source_hashes(fns: Iterable[Callable[..., Any]]) -> Dict[str, str]:
    """sha256 of each source file that defines one of ``fns``."""
    out: Dict[str, str] = {}
    for fn in fns:
        try:
            path = inspect.getsourcefile(inspect.unwrap(fn))
        except (TypeError, OSError):
            path = None
        if path and os.path.isfile(path):
            out[os.path.relpath(path) if not os.path.isabs(os.path.relpath(path)) else path] = \
                hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return out


def gpu_info(device: str) -> Dict[str, Any]:
    if device != "cuda" or not torch.cuda.is_available():
        return {"name": None, "note": "CPU run: no GPU used"}
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    info: Dict[str, Any] = {
        "name": props.name,
        "index": idx,
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "cuda_runtime": torch.version.cuda,
    }
    try:
        info.update(telemetry.static_info(idx))
    except Exception as e:  # NVML is optional: say what is missing
        info["nvml"] = f"unavailable: {type(e).__name__}: {e}"
    return info


def capture(manifest_folder: Path, device: str, fns: Iterable[Callable[..., Any]],
            gpu: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Provenance of this process; ``gpu`` as the baseline's worker read it (the parent
    never initialises CUDA itself), else read here."""
    return {
        "expkit": __version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "hostname": platform.node(),
        "device": device,
        "gpu": gpu if gpu is not None else gpu_info(device),
        "git": git_state(manifest_folder),
        "sources": source_hashes(fns),
    }
