"""The figures README.md and docs/*.md state, each with the evidence files its passage cites.

A passage is a paragraph, a list item or a table row. A figure is a number or a range of numbers
with a unit (x, %, s, ms, us, GiB, times, ...: "3.9-5.3 s") or a test count ("1201 passed"). Its
sources are the paths into ``evidence/`` the passage names, in links or in prose, links into
``reports/examples/`` (each example's report is the output of the real run that measured it), and
old ``benchmarks/results/`` paths mapped to where they are now (``scripts/moved_paths.py``). A passage
with figures and no source is listed as unsourced: a figure to back with a measurement file, or to
drop.

    python scripts/evidence_index.py README.md docs/*.md            # the tables, markdown
    python scripts/evidence_index.py --write evidence/README.md FILES  # between the index's markers,
                                                                       # with the studies' titles
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import List, NamedTuple, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- figures:start -->", "<!-- figures:end -->"
STUDIES_START, STUDIES_END = "<!-- studies:start -->", "<!-- studies:end -->"
FIGURE = re.compile(
    r"(?<![\w.:/-])[-+]?\d[\d,]*(?:\.\d+)?(?:[-–]\d[\d,]*(?:\.\d+)?)?"
    r"(?:\s?(?:x|×|%|ms|us|µs|ns|s|min|minutes|GiB|MiB|GB|MB|KB|TB/s|GB/s|"
    r"TFLOP/s|cores?|threads|times)(?!\w)|\s(?:passed|failed|skipped)\b)|\b\d+ of (?:the )?\d+\b")
EVIDENCE = re.compile(r"evidence/[\w./:-]*[\w/]")
LINK = re.compile(r"\]\(([^)\s]+)\)")


class Passage(NamedTuple):
    doc: str
    line: int
    section: str
    figures: Tuple[str, ...]
    sources: Tuple[str, ...]


def _moved():
    spec = importlib.util.spec_from_file_location("moved_paths", Path(__file__).resolve().parent / "moved_paths.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def passages(doc: str, text: str) -> List[Tuple[int, str, str]]:
    """(first line, section heading, text) of each paragraph, list item or table row."""
    out, buf, start, section, fenced = [], [], 0, "", False

    def flush():
        if buf:
            out.append((start, section, " ".join(buf)))
            buf.clear()

    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("```"):
            fenced = not fenced
            flush()
            continue
        if fenced:
            continue
        if s.startswith("#"):
            flush()
            section = s.lstrip("#").strip()
            continue
        if not s or s.startswith("|") or re.match(r"([-*]|\d+\.)\s", s):
            flush()
            if s.startswith("|"):
                out.append((i, section, s))
                continue
            if not s:
                continue
        if not buf:
            start = i
        buf.append(s)
    flush()
    return out


def sources(doc: str, text: str, moved) -> Tuple[str, ...]:
    """The evidence paths a passage names (example reports linked to included), old results paths mapped to new ones."""
    text = moved.rewrite(text, doc)
    here = os.path.dirname(doc)
    found = []
    for target in LINK.findall(text):
        full = os.path.normpath(os.path.join(here, target.split("#")[0]))
        if full.startswith(("evidence/", "reports/examples/")):
            found.append(full)
    found += EVIDENCE.findall(text)
    return tuple(dict.fromkeys(p.rstrip(".:") for p in found))


def index(docs: Sequence[str]) -> List[Passage]:
    moved = _moved()
    rows = []
    for doc in docs:
        text = (ROOT / doc).read_text()
        for line, section, body in passages(doc, text):
            figures = tuple(dict.fromkeys(m.group(0).strip() for m in FIGURE.finditer(body)))
            if figures:
                rows.append(Passage(doc, line, section, figures, sources(doc, body, moved)))
    return rows


def _title(path: Path) -> str:
    """A markdown file's first heading, or its first line."""
    lines = [l for l in path.read_text().splitlines() if l.strip()]
    head = next((l for l in lines if l.startswith("#")), lines[0] if lines else path.name)
    return head.lstrip("#").strip()


def studies(evidence: Path) -> str:
    """Each topic's studies and loose files, with their titles, as markdown lists (links relative to ``evidence``)."""
    out = []
    for topic in sorted(p for p in evidence.iterdir() if p.is_dir()):
        out += ["", f"**{topic.name}/**", ""]
        for item in sorted(topic.iterdir()):
            rel = item.relative_to(evidence).as_posix()
            if item.is_dir() and (item / "README.md").exists():
                out.append(f"- [{item.name}/]({rel}/README.md): {_title(item / 'README.md')}")
            elif item.is_dir():
                out.append(f"- [{item.name}/]({rel}/)")
            elif item.suffix == ".md":
                out.append(f"- [{item.name}]({rel}): {_title(item)}")
            else:
                out.append(f"- [{item.name}]({rel})")
    return "\n".join(out[1:]) + "\n"


def _replace(text: str, start: str, end: str, body: str) -> str:
    i, j = text.index(start) + len(start), text.index(end)
    return text[:i] + "\n" + body + text[j:]


def _short(items: Sequence[str], n: int) -> str:
    return ", ".join(items[:n]) + (f" (+{len(items) - n})" if len(items) > n else "")


def _from_index(path: str) -> str:
    """A source's path as the index (``evidence/README.md``) links to it."""
    return path[len("evidence/"):] if path.startswith("evidence/") else f"../{path}"


def render(rows: Sequence[Passage], docs: Sequence[str]) -> str:
    sourced = [r for r in rows if r.sources]
    unsourced = [r for r in rows if not r.sources]
    out = [f"Generated by `python scripts/evidence_index.py` from {', '.join(docs)}: "
           f"{len(rows)} passages state figures, {len(sourced)} cite evidence, {len(unsourced)} do not.", "",
           "### Figures and the files that measured them", "",
           "| where | figures | evidence |", "|---|---|---|"]
    for r in sourced:
        ev = ", ".join(f"[{_from_index(p)}]({_from_index(p).split(':')[0]})" for p in r.sources[:4])
        more = f" (+{len(r.sources) - 4})" if len(r.sources) > 4 else ""
        out.append(f"| {r.doc}:{r.line} ({r.section[:40]}) | {_short(r.figures, 5)} | {ev}{more} |")
    out += ["", "### Unsourced: figures whose passage cites no evidence file", "",
            "Some are settings or definitions rather than measurements; the rest need a file or go.", "",
            "| where | figures |", "|---|---|"]
    for r in unsourced:
        out.append(f"| {r.doc}:{r.line} ({r.section[:40]}) | {_short(r.figures, 6)} |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("docs", nargs="+")
    ap.add_argument("--write", metavar="INDEX", help="replace the text between the markers in INDEX")
    a = ap.parse_args(argv)
    docs = [os.path.relpath(Path(d).resolve(), ROOT) for d in a.docs]
    table = render(index(docs), docs)
    if not a.write:
        print(table, end="")
        return 0
    path = Path(a.write)
    text = _replace(path.read_text(), START, END, table)
    text = _replace(text, STUDIES_START, STUDIES_END, studies(path.resolve().parent))
    path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
