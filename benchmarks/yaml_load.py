"""What parsing expkit's shipped data files costs with each of PyYAML's safe loaders.

A probe that prints a table, not a test. A GPU run's baseline worker reads the GPU catalog
as it starts (``checks.target.catalog_mismatches``), once in every fresh process, so the
parse is paid per process of a measurement. Each file is parsed ``--repeat`` times with the
pure-Python ``SafeLoader`` and with libyaml's ``CSafeLoader`` (where PyYAML has it),
alternating, and the median of each is printed with their ratio.

    python3 benchmarks/yaml_load.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import yaml

from expkit.manifest import catalog, prices


def _once(text: str, loader: type) -> float:
    t0 = time.perf_counter()
    yaml.load(text, Loader=loader)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    loaders = [yaml.SafeLoader] + ([yaml.CSafeLoader] if hasattr(yaml, "CSafeLoader") else [])
    print("| file | bytes | " + " | ".join(f"{L.__name__} (median ms)" for L in loaders) + " | ratio |")
    print("|---|---:|" + "---:|" * len(loaders) + "---:|")
    for path in (catalog.default_catalog_path(), prices.default_prices_path()):
        text = path.read_text()
        times = {L: [] for L in loaders}
        for _ in range(args.repeat):
            for L in loaders:
                times[L].append(_once(text, L))
        med = [statistics.median(times[L]) * 1e3 for L in loaders]
        ratio = f"{med[0] / med[-1]:.1f}x" if len(med) > 1 else "-"
        print(f"| {path.name} | {len(text.encode())} | " + " | ".join(f"{m:.2f}" for m in med) + f" | {ratio} |")


if __name__ == "__main__":
    main()
