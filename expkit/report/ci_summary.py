"""The verdict table in the GitHub Actions job summary.

GitHub Actions sets ``GITHUB_STEP_SUMMARY`` to the path of a file; markdown appended to it
is shown on the job's summary page. Where that variable is set, ``expkit run``, ``session``
and ``compare`` append their verdict table to it (appending, because several steps of one
job share the file); elsewhere these functions do nothing. A failure to write the summary
never changes a command's exit code: it is a convenience, and the result is already on disk.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from .formatting import cell, template_env
from .session import load_session
from ..verdict.wording import fmt_x

ENV_VAR = "GITHUB_STEP_SUMMARY"


def summary_path(environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    value = (os.environ if environ is None else environ).get(ENV_VAR)
    return Path(value) if value else None


def verdict_table(results: Sequence[Mapping[str, Any]], reports: Sequence[str] = ()) -> str:
    """One row per run: verdict, name, claim, measurement with its interval, devices, report."""

    rows = []
    for i, r in enumerate(results):
        overall = (r.get("measured") or {}).get("overall")
        claim = r.get("claim") or {}
        reasons = r.get("reasons") or []
        rows.append({
            "verdict": r["verdict"].upper(), "name": cell(r.get("name", "?")),
            "claimed": fmt_x(claim.get("speedup")),
            "measured": (f"{fmt_x(overall['speedup'])} [{fmt_x(overall['ci_low'])}, {fmt_x(overall['ci_high'])}]"
                         if overall else "not measured"),
            "claimed_on": cell(claim.get("claimed_on") or "not stated"),
            "measured_on": cell((r.get("environment") or {}).get("where", "?")),
            "why": cell(reasons[0] if reasons else ""),
            "report": cell(reports[i]) if i < len(reports) else "",
        })
    return template_env().get_template("ci_summary.md.j2").render(rows=rows)


def append(markdown: str, environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """Append ``markdown`` to the job summary; the file's path, or None where there is none."""
    path = summary_path(environ)
    if path is None:
        return None
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(markdown if markdown.endswith("\n") else markdown + "\n")
    except OSError:
        return None
    return path


def publish(results: Sequence[Mapping[str, Any]], reports: Sequence[str] = (),
            environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """Append the verdict table of ``results`` to the job summary, if running on GitHub Actions."""
    if summary_path(environ) is None:
        return None
    return append(verdict_table(results, reports), environ)


def publish_session(session_dir: Path, environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """:func:`publish` for every finished run of a session folder (unfinished ones have no verdict)."""
    if summary_path(environ) is None:
        return None

    runs = [r for r in load_session(Path(session_dir)).runs if r.result is not None]
    return publish([r.result for r in runs], [str(r.folder / "report.md") for r in runs], environ)
