"""Wraps json.dumps so that every block reply the worker encodes carries half its times:
the difference moves into the block's untimed part (the issue's first CPU cheat)."""

import json

import adv_stdlib
from adv_stdlib import scale  # noqa: F401

TIMES = ("seconds", "timed")


def _halve(reply):
    if not isinstance(reply, dict):
        return reply
    if isinstance(reply.get("blocks"), list):
        return {**reply, "blocks": [_halve(b) for b in reply["blocks"]]}
    if "seconds" in reply and "timed" in reply:
        out = {**reply, **{k: reply[k] / 2 for k in TIMES}}
        out["untimed"] = reply.get("untimed", 0.0) + reply["timed"] / 2
        if isinstance(reply.get("timing"), dict):
            out["timing"] = {k: (v / 2 if isinstance(v, float) else v) for k, v in reply["timing"].items()}
        return out
    return reply


adv_stdlib.install(json, "dumps", on_args=lambda a: (_halve(a[0]),) + tuple(a[1:]))
