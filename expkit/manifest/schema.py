"""Build frozen dataclasses from plain YAML data, with errors that name the key path.

OmegaConf's structured configs check types too, but lose the key path inside lists
and suggest nothing for a misspelt key. Manifests are the user's most-edited file, so
they get this small loader instead: it walks the dataclass's type hints (str, int,
float, bool, Optional, tuple/list, dict, nested dataclasses) and reports the first
problem as ``(key path, problem, fix)``. Runner settings still go through Hydra.

Numbers: every number in a manifest must be finite. YAML writes NaN and infinity as
``.nan`` and ``.inf``, and a claim of ``.nan`` would otherwise validate and compare
false with every measurement; they are rejected wherever they appear, in a typed field
or in a case's free-form ``params``. PyYAML follows YAML 1.1, which reads ``1.1e12``
(no sign after the ``e``, no ``.0``) as a string: a field the schema types as a float
reads such a string as the number it spells (:data:`FLOAT_TEXT`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from typing import Any, Union

MISSING = dataclasses.MISSING
#: A decimal number as YAML 1.2 writes one (``1.1e12``, ``-3``, ``.5``, ``2.E-3``); PyYAML
#: (YAML 1.1) reads some of them as strings.
FLOAT_TEXT = r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$"
_FLOAT_TEXT = re.compile(FLOAT_TEXT)
NOT_FINITE_FIX = "write a finite number (.nan and .inf are not figures), or remove the key"


class SchemaError(Exception):
    def __init__(self, key: str, problem: str, fix: str = "") -> None:
        super().__init__(f"{key}: {problem}")
        self.key, self.problem, self.fix = key, problem, fix


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_type_name(a) for a in args) + " (or null)"
    if origin in (tuple, list):
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "mapping"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def _join(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def build(cls: type, data: Any, path: str = "") -> Any:
    """Return ``cls`` built from ``data`` or raise :class:`SchemaError`."""
    return _convert(cls, data, path)


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        errors = []
        for arg in non_none:
            try:
                return _convert(arg, value, path)
            except SchemaError as e:
                errors.append(e)
        raise errors[0] if len(non_none) == 1 else SchemaError(
            path, f"expected {_type_name(tp)}, got {value!r}"
        )
    if value is None:
        raise SchemaError(path, f"expected {_type_name(tp)}, got null", "give a value or remove the key")
    if dataclasses.is_dataclass(tp):
        return _build_dataclass(tp, value, path)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise SchemaError(path, f"expected a list, got {type(value).__name__} {value!r}", "write it as a YAML list")
        (item,) = typing.get_args(tp)[:1]
        return tuple(_convert(item, v, _join(path, i)) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise SchemaError(path, f"expected a mapping, got {value!r}", "write it as `key: value` lines")
        key_t, val_t = typing.get_args(tp)
        return {str(k): _convert(val_t, v, _join(path, k)) for k, v in value.items()}
    if tp is Any:
        _finite_everywhere(value, path)
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise SchemaError(path, f"expected true or false, got {value!r}")
    if tp is float:
        if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
            value = float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise SchemaError(path, f"must be a finite number, got {value!r}", NOT_FINITE_FIX)
            return float(value)
        raise SchemaError(path, f"expected a number, got {value!r}", "write a plain number such as 1.5")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise SchemaError(path, f"expected an integer, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise SchemaError(path, f"expected a string, got {value!r}")
    raise TypeError(f"schema: unsupported type {tp!r} at {path}")  # a bug in expkit, not user input


def _finite_everywhere(value: Any, path: str) -> None:
    """Reject NaN and infinity anywhere inside free-form data (a case's ``params``)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise SchemaError(path, f"must be a finite number, got {value!r}", NOT_FINITE_FIX)
    if isinstance(value, dict):
        for k, v in value.items():
            _finite_everywhere(v, _join(path, k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _finite_everywhere(v, _join(path, i))


def _build_dataclass(cls: type, value: Any, path: str) -> Any:
    if not isinstance(value, dict):
        raise SchemaError(path or "(top level)", f"expected a mapping, got {type(value).__name__} {value!r}",
                          "write it as `key: value` lines")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in value:
        if key not in fields:
            near = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            fix = f"did you mean `{near[0]}`?" if near else "valid keys: " + ", ".join(fields)
            raise SchemaError(_join(path, key), "unknown key", fix)
    kwargs = {}
    for name, f in fields.items():
        if name in value:
            kwargs[name] = _convert(hints[name], value[name], _join(path, name))
        elif f.default is MISSING and f.default_factory is MISSING:  # type: ignore[misc]
            raise SchemaError(_join(path, name), "required key is missing",
                              f"add `{name}:` ({_type_name(hints[name])})")
    try:
        return cls(**kwargs)
    except (ValueError, SchemaError) as e:
        if isinstance(e, SchemaError):
            raise SchemaError(_join(path, e.key), e.problem, e.fix) from None
        raise SchemaError(path or "(top level)", str(e)) from None


def field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]
