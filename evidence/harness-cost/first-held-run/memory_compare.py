"""Peak device memory of the identity candidates, before the rehearsal and with it.

Reads the committed records of ../../batch-audit/kernelbench-l1-gpu/: the identity audits of
all 100 level-1 problems (before the rehearsal) and the every-fourth-problem audit (with it),
and prints, per problem both judged, one plain call's peak and the larger side's reserved
peak in each. Run from this folder: python3 memory_compare.py
"""

import gzip
import json
from pathlib import Path

RUNS = Path(__file__).resolve().parents[2] / "batch-audit" / "kernelbench-l1-gpu"
GiB = 2 ** 30


def identities(name: str) -> dict:
    out = {}
    for line in gzip.open(RUNS / name, "rt"):
        r = json.loads(line)
        if r.get("final") and r.get("sample") == 0 and r.get("memory") and r["memory"].get("plain_peak_bytes"):
            sides = r["memory"]["sides"].values()
            out[r["problem"]] = (r["memory"]["plain_peak_bytes"], max(s.get("peak_reserved") or 0 for s in sides))
    return out


def main() -> None:
    before = {**identities("h200-identity-1-50-candidates.jsonl.gz"),
              **identities("h200-identity-51-100-candidates.jsonl.gz")}
    after = identities("h200-every4th-candidates.jsonl.gz")
    print("| problem | plain call (GiB) | peak before (GiB) | peak with the rehearsal (GiB) | difference (GiB) |")
    print("|---:|---:|---:|---:|---:|")
    rows = [(p, after[p][0], before[p][1], after[p][1]) for p in sorted(after) if p in before]
    for p, plain, old, new in rows:
        print(f"| {p} | {plain / GiB:.2f} | {old / GiB:.2f} | {new / GiB:.2f} | {(new - old) / GiB:+.3f} |")
    within = sum(new <= 2 * plain + GiB for _, plain, _, new in rows)
    print(f"\n{len(rows)} problems; largest difference {max(n - o for _, _, o, n in rows) / GiB:+.3f} GiB; "
          f"within 2x + 1 GiB with the rehearsal: {within} of {len(rows)}")


if __name__ == "__main__":
    main()
