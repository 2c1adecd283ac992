"""The step's logic, free of weft, so plain Python can test it."""


def greeting(name):
    """The greeting for `name`, or None when there is no name."""
    if not name.strip():
        return None
    return f"Hello, {name}!"
