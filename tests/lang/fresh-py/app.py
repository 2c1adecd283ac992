"""fresh-py: keeps state in its module, in another module and on a class,
and fails `stale` if a call finds any left by another. The tests call it
many times: each call must start from the build's snapshot, with nothing
of the calls before."""

import json

import weft

_seen = []


class Marks:
    pass


@weft.step(
    name="fresh-py",
    version="1.0.0",
    description="Fails if a call sees what another call left",
)
def run(ctx, input):
    _seen.append(input["n"])
    marks = [
        m
        for m in (getattr(json, "weft_mark", None), getattr(Marks, "weft_mark", None))
        if m is not None
    ]
    if len(_seen) != 1 or marks:
        raise weft.fatal("stale", f"seen {_seen}, marks {marks}")
    json.weft_mark = input["n"]
    Marks.weft_mark = input["n"]
    return {"n": input["n"], "fresh": True}


Step = weft.Step
