"""One-off: each worker's tracked objects at its first timed block and its garbage collections
while blocks ran (count and seconds per generation), in a fresh `expkit run` (fork start)."""
import gc, os, sys, time, json
from expkit.bench import side as side_mod
OUT = sys.argv[-1]
state = {"first": None, "gc": {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}, "t": 0.0, "on": False, "role": None, "blocks": 0}
def cb(phase, info):
    if not state["on"]:
        return
    if phase == "start":
        state["t"] = time.perf_counter()
    else:
        g = state["gc"][info["generation"]]
        g[0] += 1
        g[1] += time.perf_counter() - state["t"]
gc.callbacks.append(cb)
orig = side_mod.SideBench.block
def block(self, *a, **k):
    if state["first"] is None:
        state["first"] = len(gc.get_objects())
        state["role"] = self.role
    state["on"] = True
    state["blocks"] += 1
    return orig(self, *a, **k)
side_mod.SideBench.block = block
orig_close = side_mod.SideBench.close
def close(self):
    if state["first"] is not None:
        with open(os.path.join(OUT, f"gc-{os.getpid()}.json"), "w") as f:
            json.dump({"role": state["role"], "objects_at_first_block": state["first"], "blocks": state["blocks"],
                       "gc": state["gc"], "objects_at_close": len(gc.get_objects())}, f)
    return orig_close(self)
side_mod.SideBench.close = close
if __name__ == "__main__":
    from expkit.cli.commands import main
    try:
        main(sys.argv[1:-1] + ["--out", OUT])
    except SystemExit:
        pass
