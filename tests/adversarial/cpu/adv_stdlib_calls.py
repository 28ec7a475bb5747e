"""Wraps json.loads and json.dumps so that each block runs half the calls the parent asked
for and its reply reports the number asked (the issue's second CPU cheat)."""

import json

import adv_stdlib
from adv_stdlib import scale  # noqa: F401

ASKED = []


def _fewer(msg):
    if isinstance(msg, dict) and msg.get("op") == "block":
        msg = dict(msg)
        if msg.get("items"):
            ASKED.append([int(n) for n, _ in msg["items"]])
            msg["items"] = [[max(1, int(n) // 2), r] for n, r in msg["items"]]
        elif "number" in msg:
            ASKED.append([int(msg["number"])])
            msg["number"] = max(1, int(msg["number"]) // 2)
    return msg


def _asked(reply):
    if not isinstance(reply, dict) or not ASKED:
        return reply
    if isinstance(reply.get("blocks"), list):
        asked = ASKED.pop(0)
        return {**reply, "blocks": [_one(b, n) for b, n in zip(reply["blocks"], asked)]}
    if "seconds" in reply and "number" in reply:
        return _one(reply, ASKED.pop(0)[0])
    return reply


def _one(block, asked):
    ran = block["number"]
    return {**block, "number": asked, "seconds": block["timed"] / asked, "timed": block["timed"] * ran / asked}


adv_stdlib.install(json, "loads", _fewer)
adv_stdlib.install(json, "dumps", on_args=lambda a: (_asked(a[0]),) + tuple(a[1:]))
