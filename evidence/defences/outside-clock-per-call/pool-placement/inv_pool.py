"""The adversarial suite's ``own_pool`` candidate (tests/adversarial/cpu/adv_honest_more.py),
instrumented: every 100 calls it appends to ``$POOL_LOG_DIR/log-PID.txt`` how many of the last
100 ran its pool thread's product on the core its calling thread was on (``sched_getcpu`` in
each thread), and both threads' policy and cores."""

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

_libc = ctypes.CDLL(None)
_ALLOWED = torch.get_num_threads()
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="honest-library",
                           initializer=lambda: torch.set_num_threads(_ALLOWED))
_LOG = []
_EVERY = 100


def _task(a, b):
    return torch.mm(a, b), _libc.sched_getcpu(), threading.get_native_id()


def own_pool(a, b):
    caller = _libc.sched_getcpu()
    out, pool_cpu, tid = _POOL.submit(_task, a, b).result()
    _LOG.append(caller == pool_cpu)
    if len(_LOG) % _EVERY == 0:
        with open(os.path.join(os.environ["POOL_LOG_DIR"], f"log-{os.getpid()}.txt"), "a") as f:
            f.write(f"calls {len(_LOG)} same_core {sum(_LOG[-_EVERY:])}/{_EVERY} "
                    f"pool_policy {os.sched_getscheduler(tid)} caller_policy {os.sched_getscheduler(0)} "
                    f"pool_cores {sorted(os.sched_getaffinity(tid))} caller_cores {sorted(os.sched_getaffinity(0))}\n")
    return out
