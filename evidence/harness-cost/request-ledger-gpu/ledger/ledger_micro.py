"""One-off: what the request ledger's device readings cost in a CUDA process (median us of 2000)."""
import statistics, time, torch
from expkit.bench.ledger import Ledger

def med(fn, n=2000):
    for _ in range(50):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return statistics.median(out) * 1e6

if __name__ == "__main__":
    x = [torch.empty(1 << 20, device="cuda") for _ in range(8)]
    torch.cuda.synchronize()
    c = torch.cuda
    book = Ledger("cuda")
    def ledger_pair():
        book.start(); book.stop("block")
    def old_reads():
        c.memory_allocated(); c.reset_peak_memory_stats(); c.max_memory_allocated(); c.max_memory_reserved()
    def new_reads():
        c.memory_stats_as_nested_dict(); c.reset_peak_memory_stats(); c.memory_stats_as_nested_dict()
    rows = [("Ledger.start + stop (this commit)", ledger_pair),
            ("the device readings before (memory_allocated, reset, max allocated, max reserved)", old_reads),
            ("the device readings now (nested, reset, nested)", new_reads)]
    for r in range(2):
        for name, fn in rows:
            print(f"| {r + 1} | {name} | {med(fn):.1f} |")
