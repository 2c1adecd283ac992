"""`behave-py`: the behaviour test's step in Python (see ../README.md)."""

import weft


@weft.step(name="behave-py", version="1.0.0", description="The behaviour test's step")
def behave(ctx, input):
    op = input["op"]
    if op == "count":
        count = int(weft.kv.get("count") or "0") + 1
        weft.kv.set("count", str(count))
        return {"count": count}
    if op == "emit":
        return {"id": weft.outbox.emit(input["channel"], {"from": "python", "run": ctx.run_id})}
    if op == "fetch":
        answer = weft.http.get(input["url"])
        return {"status": answer.status, "body": answer.text()}
    if op == "secret":
        value = weft.secrets.get(input["name"])
        ctx.log("info", f"the secret is {value}")
        return {"length": len(value)}
    raise weft.fatal("unknown_op", f"no op `{op}`")


Step = weft.Step
