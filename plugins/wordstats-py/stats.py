"""The step's logic, free of weft, so plain Python can test it."""

import re
from collections import Counter


def word_stats(text, top=3):
    """Words, distinct words, and the `top` most frequent (ties in order of
    first appearance)."""
    words = re.findall(r"[a-z0-9']+", text.lower())
    counts = Counter(words)
    return {
        "words": len(words),
        "unique": len(counts),
        # sorted() is stable: ties keep their order of first appearance.
        # (Counter.most_common imports heapq lazily, and componentize-py
        # bundles only the modules imported while the component is built.)
        "top": [word for word, _ in sorted(counts.items(), key=lambda kv: -kv[1])[:top]],
    }
