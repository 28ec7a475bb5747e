"""Findings: the outcome of one check, the unit every verdict reason is made of."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional

INVALID = "invalid"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One check's outcome.

    ``check`` names the check ("oracle:allclose", "identity", "inputs", ...), so a
    reason in ``result.json`` always says which check failed. ``severity`` says what
    a failure means for the verdict: ``invalid`` overrides every speed figure, a
    ``warning`` is reported beside it.
    """

    check: str
    ok: bool
    message: str
    case: Optional[str] = None
    severity: str = INVALID
    figure: Optional[float] = None
    threshold: Optional[float] = None

    def __post_init__(self) -> None:
        if self.severity not in (INVALID, WARNING):
            raise ValueError(f"severity must be {INVALID!r} or {WARNING!r}, got {self.severity!r}")

    @property
    def invalidates(self) -> bool:
        return not self.ok and self.severity == INVALID

    def reason(self) -> str:
        where = f" [case {self.case}]" if self.case else ""
        return f"{self.check}{where}: {self.message}"


def finding_from(d: Mapping[str, Any]) -> Finding:
    """A :class:`Finding` back from its ``asdict`` form (as it crosses the worker's channel)."""
    keys = ("check", "ok", "message", "case", "severity", "figure", "threshold")
    return Finding(**{k: d[k] for k in keys if k in d})


def findings_in(reply: Mapping[str, Any]) -> List[Finding]:
    """The findings a worker's reply carries (its ``findings``, each as :func:`finding_from` reads it)."""
    return [finding_from(d) for d in reply.get("findings", ())]
