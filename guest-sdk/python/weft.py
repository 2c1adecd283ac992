"""weft's helper for steps written in Python (built with componentize-py).

It turns a plain function over JSON values into the `weft:plugin/step`
export: the input is parsed, the return value serialised, and errors are
typed. `weft plugin build` puts this module on the path; a plugin does not
copy it.

    import weft

    @weft.step(name="greet", version="1.0.0",
               input_schema={"type": "object", "required": ["name"]})
    def greet(ctx, input):
        if not input["name"]:
            raise weft.fatal("empty_name", "name must not be empty")
        ctx.log("info", f"greeting {input['name']}")
        return {"greeting": f"Hello, {input['name']}!"}

    Step = weft.Step  # the export componentize-py looks for

An uncaught exception fails the attempt as retryable (`exception`, with the
traceback in the details), as a panic does in Rust; raise `weft.fatal(...)`
for an error that trying again cannot fix.
"""

import json
import traceback

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import log as _log
from wit_world.imports import types

__all__ = ["Context", "StepError", "fatal", "retryable", "step", "Step"]

_LEVELS = {
    "trace": _log.Level.TRACE,
    "debug": _log.Level.DEBUG,
    "info": _log.Level.INFO,
    "warn": _log.Level.WARN,
    "error": _log.Level.ERROR,
}


class StepError(Exception):
    """An error the step understood: a code, a message, optional details."""

    def __init__(self, code, message, details=None, retryable=False):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details
        self.retryable = retryable


def fatal(code, message, details=None):
    """An error that trying again cannot fix: the step fails at once."""
    return StepError(code, message, details, retryable=False)


def retryable(code, message, details=None):
    """An error that may go away: the step's retry policy applies."""
    return StepError(code, message, details, retryable=True)


class Context:
    """Where a call comes from, and the run's log."""

    def __init__(self, ctx):
        self.tenant = ctx.tenant
        self.workflow = ctx.workflow
        self.run_id = ctx.run_id
        self.step_id = ctx.step_id
        self.attempt = ctx.attempt
        self.idempotency_key = ctx.idempotency_key

    def log(self, level, message):
        """Appends a line to the run's log; `level` is trace, debug, info,
        warn or error."""
        _log.log(_LEVELS.get(level, _log.Level.INFO), str(message))


_registered = None


def step(name, version, description="", input_schema=None, output_schema=None):
    """Registers the decorated function `(ctx, input) -> output` as the
    plugin's step. The schemas are JSON Schema, as Python values."""

    def register(function):
        global _registered
        _registered = (
            types.PluginInfo(
                name=name,
                version=version,
                description=description,
                input_schema=None if input_schema is None else json.dumps(input_schema),
                output_schema=None if output_schema is None else json.dumps(output_schema),
            ),
            function,
        )
        return function

    return register


def _failure(error):
    details = None if error.details is None else json.dumps(error.details)
    failure = types.Failure(code=error.code, message=error.message, details=details)
    if error.retryable:
        return types.StepError_Retryable(failure)
    return types.StepError_Fatal(failure)


class Step(exports.Step):
    def describe(self):
        if _registered is None:
            raise RuntimeError("no function is registered with @weft.step")
        return _registered[0]

    def run(self, ctx, input):
        if _registered is None:
            raise Err(_failure(fatal("no_step", "no function is registered with @weft.step")))
        try:
            value = json.loads(input)
        except ValueError as e:
            raise Err(_failure(fatal("invalid_input", f"the input is not JSON: {e}")))
        try:
            output = _registered[1](Context(ctx), value)
        except StepError as e:
            raise Err(_failure(e))
        except Exception as e:  # a bug in the step: like a panic, retryable
            raise Err(
                _failure(
                    retryable(
                        "exception",
                        f"{type(e).__name__}: {e}",
                        {"traceback": traceback.format_exc()},
                    )
                )
            )
        try:
            return json.dumps(output)
        except (TypeError, ValueError) as e:
            raise Err(_failure(fatal("invalid_output", f"the output is not JSON: {e}")))
