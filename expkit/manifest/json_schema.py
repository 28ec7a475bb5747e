"""The manifest's JSON Schema, generated from the schema v1 dataclasses of :mod:`.spec`.

Editors read it (the YAML language server, through the modeline
``# yaml-language-server: $schema=<path or URL>`` at the top of a manifest) to complete
keys and flag mistakes while a manifest is written. ``expkit schema`` prints it; the
package ships the generated file, ``manifest.schema.json`` beside this module, and a test
keeps that file equal to a fresh generation and checks every shipped manifest against it.

How it is made: :func:`generate` walks each dataclass's type hints as the loader
(:mod:`.schema`) does -- ``str``, ``int``, ``float``, ``bool``, ``Optional``, tuples,
``Dict[str, Any]``, ``Any`` and nested dataclasses -- and writes one definition per
dataclass, with ``additionalProperties: false`` (the loader rejects unknown keys), the
fields without a default as ``required``, and each field's default. Descriptions come
from the class docstrings and from the ``#:`` comments above fields. What the
dataclasses check in ``__post_init__`` (enumerations, bounds, "baseline, candidate and
inputs unless kernelbench", "a custom oracle needs a function") is added from
:data:`CONSTRAINTS` and :func:`_manifest_rules`, which name the constants of ``spec``
they come from, so a new oracle kind reaches the schema on the next generation.

Approximations, stated once: the schema is the editor's guide, the loader is the
authority. Every manifest the loader accepts is valid under the schema (the tests check
this over every YAML file in the repository), with one exception: a reference that is
not ``module:function`` fails the schema at once, where the loader reads it and
resolving it (``expkit validate``, or the run) rejects it. The schema is looser in places: a
``str`` field also takes a number (the loader turns it into a string), a ``float`` field
a string that spells a number (PyYAML reads ``1.1e12`` as one), ``integer``
admits ``1.0``, JSON has no NaN or infinity to reject (the loader rejects them), and cross-field rules beyond the two above (unique case names,
``end_to_end.case`` naming a case) are left to the loader.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple, Union

from . import spec
from .schema import FLOAT_TEXT

#: The file the package ships (``expkit schema --out`` writes the same text).
SCHEMA_FILE = Path(__file__).with_name("manifest.schema.json")
DRAFT = "http://json-schema.org/draft-07/schema#"
#: A ``module:function`` reference.
REFERENCE = {"type": "string", "pattern": "^[^:\\s]+:[^:\\s]+$",
             "description": "`module:function`, looked up beside the manifest first, then on the import path."}

#: Checks the dataclasses make in ``__post_init__``, as JSON Schema keywords per (class, field).
CONSTRAINTS: Dict[Tuple[str, str], Dict[str, Any]] = {
    ("Manifest", "schema_version"): {"const": spec.SCHEMA_VERSION},
    ("Manifest", "device"): {"enum": ["cpu", "cuda"]},
    ("Manifest", "aggregate"): {"enum": list(spec.AGGREGATES)},
    ("Manifest", "cases"): {"minItems": 1},
    ("Manifest", "oracles"): {"minItems": 1},
    ("Manifest", "baseline"): REFERENCE,
    ("Manifest", "candidate"): REFERENCE,
    ("Inputs", "factory"): REFERENCE,
    ("Oracle", "kind"): {"enum": list(spec.ORACLE_KINDS)},
    ("Oracle", "function"): REFERENCE,
    ("Oracle", "model"): REFERENCE,
    ("Oracle", "dataset"): REFERENCE,
    ("EndToEnd", "workload"): REFERENCE,
    ("EndToEnd", "oracles"): {"minItems": 1},
    ("EndToEnd", "claim"): {"exclusiveMinimum": 0},
    ("EndToEnd", "tolerance"): {"minimum": 0, "exclusiveMaximum": 1},
    ("EndToEnd", "profile_runs"): {"minimum": 1},
    ("EndToEnd", "utilisation_seconds"): {"minimum": 0},
    ("Claim", "speedup"): {"exclusiveMinimum": 0},
    ("Claim", "tolerance"): {"minimum": 0, "exclusiveMaximum": 1},
    ("Claim", "calls_per_day"): {"exclusiveMinimum": 0},
    ("Case", "claim"): {"exclusiveMinimum": 0},
    ("Case", "calls_per_day"): {"exclusiveMinimum": 0},
    ("Case", "flops"): {"exclusiveMinimum": 0},
    ("Case", "bytes"): {"exclusiveMinimum": 0},
    ("Case", "precision"): {"enum": list(spec.PRECISIONS)},
    ("Expect", "max_plausible_speedup"): {"exclusiveMinimum": 1},
    ("KernelBench", "precision"): {"enum": list(spec.KERNELBENCH_TOLERANCE)},
}


def _field_comments(cls: type) -> Dict[str, str]:
    """The ``#:`` comment lines directly above each field of ``cls``, joined."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    out: Dict[str, str] = {}
    pending: List[str] = []
    for line in lines[1:]:
        s = line.strip()
        if s.startswith("#:"):
            pending.append(s[2:].strip())
            continue
        m = re.match(r"(\w+)\s*:", s)
        if m and pending:
            out[m.group(1)] = " ".join(pending)
        pending = []
    return out


def _doc(cls: type) -> str:
    doc = cls.__dict__.get("__doc__")
    if not doc or doc.startswith(cls.__name__ + "("):  # the dataclass's generated signature
        return ""
    return re.sub(r"\s*\n\s*", " ", inspect.cleandoc(doc).replace("\n\n", "\0")).replace("\0", "\n\n")


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _json_default(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {k: _json_default(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_json_default(v) for v in value]
    return value


class _Generator:
    def __init__(self) -> None:
        self.definitions: Dict[str, Dict[str, Any]] = {}

    def type_schema(self, tp: Any) -> Dict[str, Any]:
        origin = typing.get_origin(tp)
        if origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            nullable = len(args) < len(typing.get_args(tp))
            inner = self.type_schema(args[0]) if len(args) == 1 else {"anyOf": [self.type_schema(a) for a in args]}
            if not nullable:
                return inner
            if "type" in inner and "$ref" not in inner:
                t = inner["type"]
                return {**inner, "type": (t if isinstance(t, list) else [t]) + ["null"]}
            return {"anyOf": [inner, {"type": "null"}]}
        if dataclasses.is_dataclass(tp):
            self.define(tp)
            return {"$ref": f"#/definitions/{tp.__name__}"}
        if origin in (tuple, list):
            return {"type": "array", "items": self.type_schema(typing.get_args(tp)[0])}
        if origin is dict:
            return {"type": "object"}
        if tp is Any:
            return {}
        if tp is float:  # a number, or the string PyYAML makes of `1.1e12` (schema.FLOAT_TEXT)
            return {"anyOf": [{"type": "number"}, {"type": "string", "pattern": FLOAT_TEXT}]}
        simple = {bool: {"type": "boolean"}, int: {"type": "integer"}, str: {"type": ["string", "number"]}}
        if tp in simple:
            return dict(simple[tp])
        raise TypeError(f"json_schema: unsupported type {tp!r}")  # a new type in spec.py: teach the generator

    def object_schema(self, cls: type) -> Dict[str, Any]:
        hints = typing.get_type_hints(cls)
        comments = _field_comments(cls)
        props: Dict[str, Any] = {}
        required: List[str] = []
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            s = self.type_schema(hints[f.name])
            extra = CONSTRAINTS.get((cls.__name__, f.name), {})
            s = {**s, **extra, **({"type": s["type"]} if "type" in s else {})}
            if isinstance(s.get("type"), list) and "number" in s["type"] and ("enum" in s or "pattern" in s):
                # A reference or a word from a list: a string, never a number.
                s["type"] = ["string", "null"] if "null" in s["type"] else "string"
            if f.name in comments:
                s["description"] = comments[f.name]
            if f.default is not dataclasses.MISSING:
                s["default"] = _json_default(f.default)
            elif f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
                required.append(f.name)
            props[f.name] = s
        out: Dict[str, Any] = {"type": "object"}
        doc = _doc(cls)
        if doc:
            out["description"] = doc
        out["properties"] = props
        if required:
            out["required"] = required
        out["additionalProperties"] = False
        return out

    def define(self, cls: type) -> None:
        if cls.__name__ in self.definitions:
            return
        self.definitions[cls.__name__] = {}  # placeholder: recursion stops here
        body = self.object_schema(cls)
        if cls is spec.Oracle:
            body["if"] = {"properties": {"kind": {"const": "custom"}}, "required": ["kind"]}
            body["then"] = {"required": ["function"]}
        self.definitions[cls.__name__] = body


def _manifest_rules() -> Dict[str, Any]:
    """``baseline``, ``candidate`` and ``inputs`` unless a ``kernelbench`` pair brings them (``Manifest.__post_init__``)."""
    sides = ["baseline", "candidate", "inputs"]
    return {"anyOf": [
        {"required": sides, "not": {"required": ["kernelbench"]}},
        {"required": ["kernelbench"], "not": {"anyOf": [{"required": [k]} for k in sides]}},
    ]}


def generate() -> Dict[str, Any]:
    """The manifest's JSON Schema (draft-07) as a dict."""
    g = _Generator()
    top = g.object_schema(spec.Manifest)
    top.update(_manifest_rules())
    definitions = {k: g.definitions[k] for k in sorted(g.definitions)}
    return {"$schema": DRAFT, "title": f"expkit manifest (schema v{spec.SCHEMA_VERSION})",
            **top, "definitions": definitions}


def render(schema: Mapping[str, Any] | None = None) -> str:
    """The schema as the text of ``manifest.schema.json`` (stable key order, two-space indent)."""
    return json.dumps(generate() if schema is None else schema, indent=2, ensure_ascii=False) + "\n"


def shipped() -> str:
    """The text of the schema file the package ships."""
    return SCHEMA_FILE.read_text(encoding="utf-8")
