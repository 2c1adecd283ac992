"""wordstats: counts the words of a text and names the most frequent ones.
A weft step in Python, built with `weft plugin build`."""

import weft
from stats import word_stats


@weft.step(
    name="wordstats",
    version="1.0.0",
    description="Counts the words of a text and names the most frequent ones",
    input_schema={
        "type": "object",
        "required": ["text"],
        "properties": {
            "text": {"type": "string"},
            "top": {"type": "integer", "minimum": 1, "maximum": 100},
        },
        "additionalProperties": False,
    },
    # Called once at build time: the pattern is compiled and the
    # interpreter's caches are filled in the snapshot, not in each call.
    warmup=[{"text": "A warm-up: the quick brown fox jumps over the lazy dog.", "top": 2}],
)
def run(ctx, input):
    stats = word_stats(input["text"], input.get("top", 3))
    ctx.log("info", f"{stats['words']} words, {stats['unique']} distinct")
    return stats


Step = weft.Step  # the export componentize-py looks for
