"""fresh-py: keeps state in its module, in another module and on a class,
and fails `stale` if a call finds any left by another. The tests call it
many times: each call must start from the build's snapshot, with nothing
of the calls before.

It warms up on one input at build time (`warmup=`), so the snapshot holds
what that call left: every call must find exactly that, and nothing more
(`not_warmed` if the warm-up left nothing)."""

import json

import weft

_seen = []


@weft.step(
    name="fresh-py",
    version="1.0.0",
    description="Fails if a call sees what another call left",
    warmup=[{"n": -1}],
)
def run(ctx, input):
    before = list(_seen)
    marks = [
        m
        for m in (getattr(json, "weft_mark", None), getattr(Marks, "weft_mark", None))
        if m is not None
    ]
    # The warm-up call (attempt 0, at build time) finds nothing; every
    # other call finds what it left, and only that.
    warming = ctx.attempt == 0
    if not warming and before == [] and marks == []:
        raise weft.fatal("not_warmed", "the build-time warm-up left nothing")
    if (before, marks) != (([], []) if warming else ([-1], [-1, -1])):
        raise weft.fatal("stale", f"seen {before}, marks {marks}")
    _seen.append(input["n"])
    json.weft_mark = input["n"]
    Marks.weft_mark = input["n"]
    ctx.log("info", "a warm-up's log line goes nowhere; a call's is kept")
    return {"n": input["n"], "fresh": True, "warmed": not warming}


# Defined below the step on purpose: the warm-up call is made when the
# module reads `weft.Step`, at its end, so it finds this class.
class Marks:
    pass


Step = weft.Step
