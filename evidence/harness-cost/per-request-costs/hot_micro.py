"""One-off: the per-block hot tamper check as a worker sees it (medians of 3,000 after 50
discarded), warm, and right after three 512x512 matrix products; run from each snapshot's
folder with PYTHONPATH set to it (README.md here)."""
import statistics, time, torch
import expkit.bench.side, expkit.bench.judge, expkit.timing.cuda_timer, expkit.checks.oracles  # what a worker imports
from expkit.bench.tamper import FunctionSnapshot, torch_callables_for
from expkit.checks.global_state import snapshot_state
s = FunctionSnapshot.take()
s.watch(torch_callables_for(["aten::mm", "aten::matmul", "aten::addmm"]))
s.changed(hot_only=True)
hot = s.__dict__["_hot"]
print("entries", len(s.entries), "hot", len(hot.names), "slow", len(hot.slow))

def med(fn, n=3000):
    for _ in range(50): fn()
    out=[]
    for _ in range(n):
        t=time.perf_counter(); fn(); out.append(time.perf_counter()-t)
    return statistics.median(out)*1e6
print("hot check us", med(lambda: s.changed(hot_only=True)))
print("snapshot_state us", med(lambda: snapshot_state(cuda=False)))
a = torch.randn(512, 512); b = torch.randn(512, 512)
def cold():
    for _ in range(3): a @ b
    t=time.perf_counter(); s.changed(hot_only=True); return time.perf_counter()-t
print("hot check after matmuls us", statistics.median([cold() for _ in range(300)])*1e6)
