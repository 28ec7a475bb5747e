"""One-off: every settle() wait in a run's workers (pid, seconds waited), pinned honest-win."""
import os, sys, time, json
from expkit.checks import activity
from expkit.bench import side as side_mod
LOG = sys.argv[-1] + "/settle.txt"
orig = activity.settle
def settle(reader, **k):
    w = orig(reader, **k)
    if w > 0:
        since = time.perf_counter() - activity._WIDE_END[0]
        with open(LOG, "a") as f:
            f.write(f"{os.getpid()} {w:.6f} {since:.6f} {WHO[0]}\n")
    return w
side_mod.settle = settle
_wide = activity.wide_work_ended
WHO = ["?"]
def wide_work_ended():
    f = sys._getframe(1)
    WHO[0] = "<".join(f"{g.f_code.co_name}" for g in (f, f.f_back, f.f_back.f_back if f.f_back else None) if g)
    _wide()
activity.wide_work_ended = wide_work_ended
import expkit.checks.preflight as pf, expkit.bench.blas as bl
for m in (pf, bl):
    if hasattr(m, "wide_work_ended"):
        m.wide_work_ended = wide_work_ended
if __name__ == "__main__":
    from expkit.cli.commands import main
    try:
        main(sys.argv[1:-1] + ["--out", sys.argv[-1]])
    except SystemExit:
        pass
