"""Runner settings as keyword arguments, turned into Hydra override strings.

``measure="quick"`` is ``measure=quick``; a double underscore is a dot
(``measure__target_ci=0.02`` is ``measure.target_ci=0.02``); a dict nests
(``defences={"isolate": False}`` is ``defences.isolate=false``). Python values are written
in Hydra's syntax (``True`` -> ``true``, ``None`` -> ``null``, a list -> ``[a,b]``), and a
string Hydra would misread is quoted. A top-level key the settings do not have is a
:class:`~expkit.ConfigError` naming the nearest; deeper keys are checked by Hydra when the
run composes them.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any, List, Mapping

from ..core.errors import ConfigError
from ..manifest.settings import Settings

__all__ = ["settings_overrides"]


_PLAIN = re.compile(r"[A-Za-z0-9_./:+-]+")


def _value(v: Any) -> str:
    """A Python value in Hydra's override syntax."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    s = str(v)
    if _PLAIN.fullmatch(s):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def settings_overrides(settings: Mapping[str, Any]) -> List[str]:
    """Keyword settings as Hydra override strings (see the module docstring).

    Raises :class:`ConfigError` for a top-level key the runner's settings do not have,
    naming the nearest one; deeper keys are checked by Hydra when the run composes them.
    """

    known = [f.name for f in dataclasses.fields(Settings) if f.name != "overrides"]
    out: List[str] = []

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, Mapping):
            for k, sub in v.items():
                walk(f"{prefix}.{k}", sub)
        else:
            out.append(f"{prefix}={_value(v)}")

    for key, v in settings.items():
        dotted = key.replace("__", ".")
        top = dotted.split(".", 1)[0]
        if top not in known:
            near = difflib.get_close_matches(top, known, n=1)
            hint = f"did you mean `{near[0]}`?" if near else "settings: " + ", ".join(known)
            raise ConfigError(f"expkit.run({key}=...): unknown setting `{top}` ({hint}; "
                              "the claim itself belongs in the manifest)")
        walk(dotted, v)
    return out
