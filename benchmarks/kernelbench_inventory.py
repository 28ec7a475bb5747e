"""Inventory of KernelBench's problems: kind, input, parameter and output sizes. No GPU.

For every problem file of the levels asked for, it imports the file and calls
``get_init_inputs()``, ``get_inputs()``, ``Model(*init)`` and one forward with torch's
default device set to ``meta`` (``with torch.device('meta'):``), so factory calls
such as ``torch.rand(4096, 393216)`` make shape-only tensors: nothing is allocated
and nothing runs. Where a generator does not run on ``meta`` the sizes are read from
the file's integer globals instead (the ``method`` column says which).

Bytes are at the problem's own dtypes (fp32 unless the file says otherwise): what one
plain call needs at the original size, before any harness copies.

Usage::

    python benchmarks/kernelbench_inventory.py .kernelbench [--levels 1 2 3] \
        [--out evidence/kernelbench/inventory.md] [--json FILE]

``.kernelbench`` is the folder the KernelBench snapshot was copied into (with
``KernelBench/level1`` ... and ``COMMIT``); a bare folder with ``level1/`` works too.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernelbench_common import GIB, import_problem, kb_commit, kind_of, meta_sizes, problem_files, rel_name  # noqa: E402


def inventory(kb_root: Path, levels) -> list:
    rows = []
    for level in levels:
        for path in problem_files(kb_root, level):
            row = {"problem": rel_name(path), "level": level}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    mod = import_problem(path, stub_missing=True)
                    row["kind"] = kind_of(path, mod)
                    row.update(meta_sizes(mod))
            except Exception as e:
                row.update(kind=kind_of(path), method="error", note=f"{type(e).__name__}: {str(e)[:100]}",
                           inputs="", input_bytes=None, param_bytes=None, output_bytes=None)
            rows.append(row)
    return rows


def _gib(b) -> str:
    return "?" if b is None else f"{b / GIB:.3f}"


def render(rows, commit: str) -> str:
    def total(r):
        return (r.get("input_bytes") or 0) + (r.get("param_bytes") or 0)

    lines = [
        "# KernelBench problem inventory",
        "",
        f"KernelBench commit `{commit}`. Written by `benchmarks/kernelbench_inventory.py` (no GPU: sizes from",
        "torch's `meta` device). Bytes at the problem's own dtypes, for one plain call at the original size;",
        "`out GiB` is one forward's output (`?` where the forward does not run on `meta`).",
        "",
    ]
    by_kind = {}
    for r in rows:
        by_kind.setdefault((r["level"], r["kind"]), []).append(r)
    big = sorted((r for r in rows if total(r) >= 4 * GIB), key=total, reverse=True)
    lines += ["## Summary", ""]
    lines.append("| level | problems | kinds |")
    lines.append("|---|---|---|")
    for level in sorted({r["level"] for r in rows}):
        kinds = {}
        for r in rows:
            if r["level"] == level:
                kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
        lines.append(f"| {level} | {sum(kinds.values())} | "
                     + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])) + " |")
    lines += ["", f"Problems with inputs + parameters of 4 GiB or more: {len(big)}; of 7.5 GiB or more (the "
              f"'8 GiB' class): {sum(1 for r in big if total(r) >= 7.5 * GIB)}; over 8.0 GiB: "
              f"{sum(1 for r in big if total(r) > 8 * GIB)}. `in+param+out` is what one plain call holds at",
              "least (inputs, weights and its output; intermediates come on top).", ""]
    if big:
        lines.append("| problem | kind | input GiB | param GiB | out GiB | in+param GiB | in+param+out GiB |")
        lines.append("|---|---|---|---|---|---|---|")
        for r in big:
            lines.append(f"| {r['problem']} | {r['kind']} | {_gib(r['input_bytes'])} | {_gib(r['param_bytes'])} | "
                         f"{_gib(r['output_bytes'])} | {total(r) / GIB:.3f} | "
                         f"{(total(r) + (r.get('output_bytes') or 0)) / GIB:.3f} |")
        lines.append("")
    lines += ["## All problems", ""]
    lines.append("| problem | kind | input GiB | param GiB | out GiB | inputs | method | note |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        note = (r.get("note") or "").replace("|", "/")
        inputs = (r.get("inputs") or "").replace("|", "/")
        if len(inputs) > 90:
            inputs = inputs[:87] + "..."
        lines.append(f"| {r['problem']} | {r['kind']} | {_gib(r['input_bytes'])} | {_gib(r['param_bytes'])} | "
                     f"{_gib(r['output_bytes'])} | {inputs} | {r['method']} | {note} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kb", type=Path, help="the KernelBench folder (e.g. .kernelbench)")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "evidence" / "kernelbench" / "inventory.md")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rows = inventory(args.kb, args.levels)
    text = render(rows, kb_commit(args.kb))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if r["method"] != "meta" or r.get("note")]
    print(f"{len(rows)} problems; {len(bad)} with a note; written {args.out}")
    for r in sorted(rows, key=lambda r: -((r.get('input_bytes') or 0) + (r.get('param_bytes') or 0)))[:15]:
        print(f"  {r['problem']:<70} {r['kind']:<10} in {_gib(r['input_bytes']):>7} GiB  "
              f"param {_gib(r['param_bytes']):>7} GiB  out {_gib(r['output_bytes']):>7} GiB")
    for r in bad:
        print(f"  note {r['problem']}: {r['method']} {r.get('note')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
