"""A byte-level text corpus that every CPython install already carries: its own stdlib source.

Why this corpus: a model-level correctness oracle needs a reference text that is present on
the CI machine, on a rented GPU box and on a laptop, with no download and no licence question.
The pure-Python modules of the standard library are such a text. They are read from the
interpreter's ``stdlib`` directory (``sysconfig.get_path("stdlib")``), never imported, so
reading them has no side effects.

Split: whole files are held out for evaluation (``EVAL_FILES``), the rest is training text.
Holding out whole files, not the tail of each file, means the evaluation text is code the
model has never seen, so perplexity measures generalisation rather than memorisation.

Approximation, stated: the files change a little between Python versions, so the eval text
(and a perplexity measured on it) differs across versions. That is acceptable because the
oracle compares a baseline and a candidate on the same machine, against the same text;
:func:`corpus_fingerprint` lets a report say exactly which bytes were evaluated.
"""

from __future__ import annotations

import hashlib
import sysconfig
from functools import lru_cache
from pathlib import Path
from typing import Optional, Tuple

import torch

# Stable, pure-Python modules present from CPython 3.8 through 3.13 as single files: none of
# them is on the PEP 594 removal list or was turned into a package.
TRAIN_FILES: Tuple[str, ...] = (
    "argparse.py", "difflib.py", "heapq.py", "bisect.py", "calendar.py", "colorsys.py",
    "csv.py", "fnmatch.py", "glob.py", "gettext.py", "ipaddress.py", "pprint.py", "queue.py",
    "statistics.py", "string.py", "tokenize.py", "dataclasses.py", "functools.py",
    "random.py", "contextlib.py", "abc.py", "copy.py", "enum.py", "numbers.py", "operator.py",
    "configparser.py", "base64.py", "quopri.py", "netrc.py", "tabnanny.py", "wave.py",
    "shutil.py", "weakref.py", "stat.py", "keyword.py", "token.py", "secrets.py",
)
EVAL_FILES: Tuple[str, ...] = ("textwrap.py", "shlex.py", "sched.py", "fractions.py")

# A file separator that cannot occur in source text, so the model sees file boundaries.
_SEPARATOR = b"\n\x00\n"

DEFAULT_EVAL_TOKENS = 8192


def stdlib_dir() -> Path:
    """The directory holding this interpreter's pure-Python standard library."""
    return Path(sysconfig.get_path("stdlib"))


def _read(name: str) -> bytes:
    path = stdlib_dir() / name
    try:
        data = path.read_bytes()
    except OSError as exc:  # stripped installs ship only .pyc files
        raise FileNotFoundError(
            f"{path}: the tiny-LM corpus needs CPython's stdlib sources (.py files); "
            f"this interpreter does not ship them ({exc.strerror})"
        ) from exc
    # Windows installs may carry CRLF; normalise so the same version gives the same text.
    return data.replace(b"\r\n", b"\n")


@lru_cache(maxsize=None)
def train_text() -> bytes:
    return _SEPARATOR.join(_read(n) for n in TRAIN_FILES)


@lru_cache(maxsize=None)
def eval_text() -> bytes:
    return _SEPARATOR.join(_read(n) for n in EVAL_FILES)


def _to_tokens(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.long)


def train_tokens() -> torch.Tensor:
    """The whole training text as byte ids (a 1-D ``LongTensor`` of values 0..255)."""
    return _to_tokens(train_text())


def eval_tokens(n_tokens: Optional[int] = DEFAULT_EVAL_TOKENS) -> torch.Tensor:
    """The first ``n_tokens`` bytes of the held-out text (all of it when ``None``)."""
    text = eval_text()
    if n_tokens is not None:
        if n_tokens < 2:
            raise ValueError("n_tokens must be at least 2 (one context byte, one target)")
        if n_tokens > len(text):
            raise ValueError(f"n_tokens={n_tokens} exceeds the eval text ({len(text)} bytes)")
        text = text[:n_tokens]
    return _to_tokens(text)


def corpus_fingerprint(n_tokens: Optional[int] = None) -> str:
    """``sha256:<hex>`` of the eval bytes: the whole eval text, or the prefix
    :func:`eval_tokens` returns for this ``n_tokens``."""
    text = eval_text() if n_tokens is None else eval_text()[:n_tokens]
    return "sha256:" + hashlib.sha256(text).hexdigest()
