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

A step may name inputs to warm up on: `@weft.step(..., warmup=[{...}])`
calls it once on each while the plugin is built, so that what its first
call does in a fresh interpreter (compiling its regular expressions,
filling the interpreter's caches, specialising its bytecode) is done
once, in the snapshot every call starts from. The calls are made when the
module reads `weft.Step` (the line `Step = weft.Step` at its end), so
everything the module defines is there; a warm-up named after that read
would never be made, and fails the build. A warm-up call sees
`ctx.attempt == 0` (and empty ids, its step id `warmup`), its log lines go
nowhere, and `weft.kv`, `.outbox`, `.secrets`, `.snapshot` and `.http`
fail it: the host is not there at build time (reaching one fails the
warm-up even if the step catches the error). What it leaves in the
module's state, every call finds, as with code at the module's top
level. If it fails, so does the build.

An uncaught exception fails the attempt as retryable (`exception`, with the
traceback in the details), as a panic does in Rust; raise `weft.fatal(...)`
for an error that trying again cannot fix.

The host's capabilities, the same in every language:

- `weft.kv.get(key)`, `.set(key, value, ttl=None)`, `.delete(key)`,
  `.keys(prefix, limit)`: the workflow's durable key-value space (writes
  commit with the step's result; with `ttl`, in seconds, a key expires
  that long after the call);
- `weft.outbox.emit(channel, payload)`: a message, sent once if the step
  succeeds;
- `weft.secrets.get(name)`: a secret the workflow grants the step;
- `weft.snapshot.get(store, key)`, `.keys(store, prefix, limit)`:
  read-only reference data in the snapshot stores the workflow names
  (`snapshots:`);
- `weft.http.get(url)`, `weft.http.post_json(url, value)`,
  `weft.http.request(method, url, headers=, body=, timeout=)`: outgoing
  HTTP to the hosts the workflow grants (`allow: {http: [...]}`). A plugin
  whose sources mention `weft.http` is built against the `http-plugin`
  world; others cannot make requests.
"""

import json
import traceback

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import kv as _kv
from wit_world.imports import log as _log
from wit_world.imports import outbox as _outbox
from wit_world.imports import secrets as _secrets
from wit_world.imports import snapshot as _snapshot
from wit_world.imports import weft_types as types

try:  # only in the `http-plugin` world
    from wit_world.imports import outgoing_handler as _outgoing
    from wit_world.imports import streams as _streams
    from wit_world.imports import types as _http
except ImportError:
    _outgoing = None

__all__ = [
    "Context",
    "StepError",
    "HttpError",
    "fatal",
    "retryable",
    "step",
    "Step",
    "kv",
    "outbox",
    "secrets",
    "snapshot",
    "http",
]

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
        if _warming:
            return
        _log.log(_LEVELS.get(level, _log.Level.INFO), str(message))


class _Kv:
    """The workflow's durable key-value space."""

    @staticmethod
    def get(key):
        """The value of `key` (a string), or None."""
        _not_warming("weft.kv")
        return _kv.get(key)

    @staticmethod
    def set(key, value, ttl=None):
        """Sets `key` to `value` (a string); committed with the step's result.
        With `ttl` (seconds, a number or a `timedelta`), the key expires that
        long after the call and then reads as absent; without, never."""
        _not_warming("weft.kv")
        try:
            _kv.set(key, value, _ttl_ms(ttl))
        except Err as e:
            raise fatal("kv", e.value)

    @staticmethod
    def delete(key):
        """Removes `key`; committed with the step's result."""
        _not_warming("weft.kv")
        try:
            _kv.delete(key)
        except Err as e:
            raise fatal("kv", e.value)

    @staticmethod
    def keys(prefix="", limit=1000):
        """Up to `limit` keys that start with `prefix`, in byte order."""
        _not_warming("weft.kv")
        return _kv.keys(prefix, limit)


_U64_MAX = 2**64 - 1

# True only while a warm-up call runs, at build time (`step(warmup=...)`),
# and the error of the first host call such a call made, if it made one.
_warming = False
_reached = None


def _not_warming(what):
    """Fails a warm-up call that reaches the host: at build time it is not
    there. Noted too, so that the warm-up fails even if the step catches
    the error."""
    global _reached
    if _warming:
        error = fatal("warmup", f"{what} is not available to a warm-up call, at build time")
        _reached = _reached or error
        raise error


def _ttl_ms(ttl):
    """`ttl` (seconds) as the whole milliseconds `kv.set` takes, at least 1;
    None for no expiry."""
    if ttl is None:
        return None
    if hasattr(ttl, "total_seconds"):  # a datetime.timedelta
        ttl = ttl.total_seconds()
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise fatal("kv", f"ttl must be a number of seconds, not {ttl!r}")
    if not ttl > 0:
        raise fatal("kv", f"ttl must be more than 0 seconds, not {ttl!r}")
    ms = ttl * 1000
    if ms >= _U64_MAX:
        return _U64_MAX
    return max(1, round(ms))


class _Outbox:
    """Messages out of the run."""

    @staticmethod
    def emit(channel, payload):
        """Emits `payload` (a JSON value) on `channel`; returns its id. Sent
        once, if the step succeeds."""
        _not_warming("weft.outbox")
        try:
            return _outbox.emit(channel, json.dumps(payload))
        except Err as e:
            raise fatal("emit", e.value)


class _Secrets:
    """The tenant's secrets that the workflow grants the step."""

    @staticmethod
    def get(name):
        """The value of secret `name`; a StepError `secret` if it is not
        granted or not set."""
        _not_warming("weft.secrets")
        try:
            return _secrets.get(name)
        except Err as e:
            raise fatal("secret", e.value)


class _Snapshot:
    """Read-only reference data: the snapshot stores the workflow names in
    `snapshots:`. A run reads the revision pinned at its start (unless the
    workflow asks for `revision: latest`); an expired entry reads as
    absent."""

    @staticmethod
    def get(store, key, default=None):
        """The value of `key` in `store` (a JSON value), or `default` if it
        has none; a StepError `snapshot` if the workflow does not name
        `store`."""
        _not_warming("weft.snapshot")
        try:
            text = _snapshot.get(store, key)
        except Err as e:
            raise fatal("snapshot", e.value)
        if text is None:
            return default
        return json.loads(text)

    @staticmethod
    def keys(store, prefix="", limit=1000):
        """Up to `limit` keys of `store` that start with `prefix`, in byte
        order; a StepError `snapshot` as for `get`."""
        _not_warming("weft.snapshot")
        try:
            return _snapshot.keys(store, prefix, limit)
        except Err as e:
            raise fatal("snapshot", e.value)


class HttpError(StepError):
    """A request that got no answer (retryable). A refused request fails
    the attempt as `http_denied` whatever the step does."""

    def __init__(self, message):
        super().__init__("http", message, retryable=True)


class Response:
    """An answer: `status`, `headers` [(name, bytes)], `body` (bytes)."""

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def text(self):
        return self.body.decode("utf-8")

    def json(self):
        return json.loads(self.body)

    def header(self, name):
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value.decode("utf-8", "replace")
        return None


class _Http:
    """Outgoing HTTP over `wasi:http`, blocking, no redirects followed."""

    @staticmethod
    def get(url, headers=None, timeout=None):
        return _Http.request("GET", url, headers=headers, timeout=timeout)

    @staticmethod
    def post_json(url, value, headers=None, timeout=None):
        merged = {"content-type": "application/json"}
        merged.update(headers or {})
        return _Http.request("POST", url, headers=merged, body=json.dumps(value), timeout=timeout)

    @staticmethod
    def request(method, url, headers=None, body=None, timeout=None):
        """Sends a request and reads the whole answer. `body` is bytes or
        str; `timeout` (seconds) bounds the wait for the first byte."""
        _not_warming("weft.http")
        if _outgoing is None:
            raise HttpError(
                "this plugin was built without HTTP: mention `weft.http` in its sources"
            )
        scheme, authority, path = _split(url)
        if isinstance(body, str):
            body = body.encode("utf-8")
        entries = [(k.lower(), str(v).encode("utf-8")) for k, v in (headers or {}).items()]
        if body and not any(k == "content-length" for k, _ in entries):
            entries.append(("content-length", str(len(body)).encode()))
        try:
            request = _http.OutgoingRequest(_http.Fields.from_list(entries))
            request.set_method(_method(method))
            request.set_scheme(_http.Scheme_Https() if scheme == "https" else _http.Scheme_Http())
            request.set_authority(authority)
            request.set_path_with_query(path)
            outgoing = request.body()
            options = None
            if timeout is not None:
                options = _http.RequestOptions()
                options.set_first_byte_timeout(int(timeout * 1_000_000_000))
            future = _outgoing.handle(request, options)
            stream = outgoing.write()
            data = body or b""
            for at in range(0, len(data), 4096):
                stream.blocking_write_and_flush(data[at : at + 4096])
            stream.__exit__(None, None, None)
            _http.OutgoingBody.finish(outgoing, None)
            while True:
                answer = future.get()
                if answer is not None:
                    break
                pollable = future.subscribe()
                pollable.block()
                pollable.__exit__(None, None, None)
            response = answer.value.value
            status = response.status()
            fields = response.headers()
            headers = fields.entries()
            fields.__exit__(None, None, None)
            incoming = response.consume()
            stream = incoming.stream()
            chunks = []
            while True:
                try:
                    chunks.append(stream.blocking_read(65536))
                except Err as e:
                    if isinstance(e.value, _streams.StreamError_Closed):
                        break
                    raise
            stream.__exit__(None, None, None)
            _http.IncomingBody.finish(incoming)
            return Response(status, headers, b"".join(chunks))
        except Err as e:
            raise HttpError(f"{method} {url} failed: {_describe(e.value)}")


def _describe(value):
    name = type(value).__name__
    if name in ("ErrorCode_HttpRequestDenied", "ErrorCode_DestinationIpProhibited"):
        return "http_denied: the step is not granted this destination"
    return name


def _split(url):
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise HttpError(f"`{url}` is not an http:// or https:// URL")
    cut = len(rest)
    for mark in "/?":
        at = rest.find(mark)
        if at != -1:
            cut = min(cut, at)
    authority, path = rest[:cut], rest[cut:] or "/"
    if not authority:
        raise HttpError(f"`{url}` names no host")
    return scheme.lower(), authority, path


def _method(name):
    name = name.upper()
    known = {
        "GET": "Method_Get",
        "HEAD": "Method_Head",
        "POST": "Method_Post",
        "PUT": "Method_Put",
        "DELETE": "Method_Delete",
        "CONNECT": "Method_Connect",
        "OPTIONS": "Method_Options",
        "TRACE": "Method_Trace",
        "PATCH": "Method_Patch",
    }
    if name in known:
        return getattr(_http, known[name])()
    return _http.Method_Other(name)


kv = _Kv()
outbox = _Outbox()
secrets = _Secrets()
snapshot = _Snapshot()
http = _Http()

_registered = None


def step(name, version, description="", input_schema=None, output_schema=None, warmup=()):
    """Registers the decorated function `(ctx, input) -> output` as the
    plugin's step. The schemas are JSON Schema, as Python values. `warmup`
    is a list of inputs the step is called on once each, at build time
    (see the module's documentation)."""
    if isinstance(warmup, (str, bytes, bytearray, dict)) or not hasattr(warmup or (), "__iter__"):
        raise TypeError("weft.step: `warmup` is a list of inputs, not one input")
    warmup = list(warmup or ())

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
        # Made when the module reads `weft.Step`, at its end (`__getattr__`).
        if warmup and _step_read:
            raise TypeError(
                f"weft.step: the warm-up of step `{name}` would never run: the module read "
                "`weft.Step` before it; read it at the module's end (`Step = weft.Step`)"
            )
        _warmups.extend((name, function, index, value) for index, value in enumerate(warmup))
        return function

    return register


# The warm-up calls not yet made: (step name, function, index, input); and
# whether the module has read `weft.Step`, after which a warm-up would never
# be made.
_warmups = []
_step_read = False


def __getattr__(name):
    """`weft.Step`, the export: read at the end of the step's module (`Step
    = weft.Step`), so the warm-up calls are made there, with everything the
    module defines in place. A call that fails stays queued."""
    global _step_read
    if name == "Step":
        _step_read = True
        while _warmups:
            _warm_up(*_warmups[0])
            _warmups.pop(0)
        return _Step
    raise AttributeError(f"module 'weft' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"Step"})


def _warm_up(name, function, index, value):
    """Calls the step on `value` as `Step.run` would, at build time: the
    snapshot the plugin's calls start from holds what the call leaves
    (compiled patterns, filled caches, specialised bytecode)."""
    global _warming, _reached
    _warming, _reached = True, None
    try:
        context = types.StepContext(
            tenant="",
            workflow="",
            run_id="",
            step_id="warmup",
            attempt=0,
            idempotency_key="",
        )
        output = function(Context(context), json.loads(json.dumps(value)))
        if _reached is not None:
            raise _reached
        json.dumps(output)
    except Exception as e:
        raise RuntimeError(
            f"the warm-up of step `{name}` failed on input {index} ({repr(value)[:200]}): "
            f"{type(e).__name__}: {e}"
        ) from e
    finally:
        _warming = False


def _failure(error):
    details = None if error.details is None else json.dumps(error.details)
    failure = types.Failure(code=error.code, message=error.message, details=details)
    if error.retryable:
        return types.StepError_Retryable(failure)
    return types.StepError_Fatal(failure)


class _Step(exports.Step):
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
