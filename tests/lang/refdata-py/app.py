"""refdata-py: reads a snapshot store and keeps a key that expires; what
the tests use to hold the Python helpers to the contract."""

import weft


@weft.step(
    name="refdata-py",
    version="1.0.0",
    description="Reads reference data and keeps a key with a time to live",
)
def run(ctx, input):
    store = input["store"]
    value = weft.snapshot.get(store, input["key"])
    keys = weft.snapshot.keys(store, input.get("prefix", ""), 10)
    seen = weft.kv.get("seen-py")
    ttl = input.get("ttl")
    if ttl is not None:
        weft.kv.set("seen-py", "yes", ttl=ttl)
    return {"value": value, "keys": keys, "seen": seen}


Step = weft.Step  # the export componentize-py looks for
