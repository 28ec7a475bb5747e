import os
def _ls():
    return {f for f in os.listdir("/dev/shm") if f.startswith("expkit-")}
_before = None
def pytest_runtest_setup(item):
    global _before
    _before = _ls()
def pytest_runtest_teardown(item, nextitem):
    new = _ls() - (_before or set())
    if new:
        with open("/tmp/leakp/log.txt", "a") as f:
            f.write(f"{item.nodeid}\t{len(new)}\t{sorted(new)[:4]}\n")
