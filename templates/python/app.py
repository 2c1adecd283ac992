"""`{{name}}`: a weft step in Python. Build it with `weft plugin build`,
test its logic with `python3 -m unittest`."""

import weft
from greet import greeting


@weft.step(
    name="{{name}}",
    version="0.1.0",
    description="A weft step",
    input_schema={
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}},
    },
)
def run(ctx, input):
    text = greeting(input["name"])
    if text is None:
        raise weft.fatal("empty_name", "name must not be empty")
    ctx.log("info", text)
    # Key-value writes commit with the step's result, exactly once.
    greetings = int(weft.kv.get("greetings") or "0") + 1
    weft.kv.set("greetings", str(greetings))
    # HTTP calls go to destinations the workflow grants (`allow: {http:
    # [...]}`); see "Outgoing HTTP" in docs/steps.md. The build imports
    # wasi:http only for a project that makes them.
    return {"greeting": text, "greetings": greetings}


Step = weft.Step  # the export componentize-py looks for
