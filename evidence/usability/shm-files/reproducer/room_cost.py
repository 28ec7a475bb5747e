"""What the room check adds to placing one input set: ``Exporter.place`` of a float32 tensor of
each size, against ``check_room`` alone (an ``isdir`` and a ``statvfs``). Prints a table.

    python evidence/usability/shm-files/reproducer/room_cost.py
"""

import time

import torch

from expkit.bench.processes.shm_files import check_room
from expkit.bench.processes.transport import Exporter

print("| tensor | place, median of 5 (ms) | check_room, median of 10000 (us) | check over place |")
print("|---|---:|---:|---:|")
for mib in (1, 64, 1024):
    t = torch.randn(mib << 18)
    places = []
    for _ in range(5):
        e = Exporter()
        t0 = time.perf_counter()
        e.place(t)
        places.append(time.perf_counter() - t0)
        e.release()
    checks = []
    for _ in range(10000):
        t0 = time.perf_counter()
        check_room(mib << 20)
        checks.append(time.perf_counter() - t0)
    p, c = sorted(places)[2], sorted(checks)[5000]
    print(f"| {mib} MiB | {p * 1e3:.2f} | {c * 1e6:.2f} | {c / p:.2e} |")
