//! The JSON Schema of fields whose Rust type says less, or more, than the
//! parser checks: values read as any JSON and checked by hand, and text
//! fields where YAML may write a plain scalar (a plain `true`, `0` or `429`
//! is read as the text `true`, `0`, `429`). Each schema accepts everything
//! the parser accepts; `crate::workflow_schema` is built with them.

use schemars::{Schema, SchemaGenerator, json_schema};

use super::step::MAX_MEMORY_LIMIT;

/// An id, as `check_id` takes it: a letter or `_`, then letters, digits,
/// `_` and `-`, 128 characters at most.
pub(crate) const ID: &str = "^[A-Za-z_][A-Za-z0-9_-]{0,127}$";

/// A `uses:` reference: a plugin name (an id), then nothing, or `@` and a
/// version (checked by the parser, not here).
pub(super) const USES: &str = "^[A-Za-z_][A-Za-z0-9_-]{0,127}(@|$)";

/// The scheme of an HTTP rule, `http://` or `https://`, in any case.
const HTTP_URL: &str = "^[Hh][Tt][Tt][Pp][Ss]?://";

/// `inputs:` and `outputs_schema:`: a JSON Schema, an object or a boolean
/// (the parser checks it against its meta-schema).
pub(super) fn user_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": ["object", "boolean", "null"] })
}

/// `if:` and `while:`: an expression, which YAML may write as a plain
/// `true` or `1`.
pub(super) fn condition(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": ["string", "boolean", "number", "null"] })
}

/// `emit:`: a channel name that is not the host's.
pub(super) fn channel(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": ["string", "null"],
        "pattern": "^[A-Za-z0-9_.-]{1,128}$",
        "not": { "type": "string", "pattern": "^weft\\." }
    })
}

/// `memory_limit:`: a size such as `64MiB`, or (YAML's plain number) bytes.
pub(super) fn memory_limit(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [
            { "type": ["string", "null"] },
            { "type": "integer", "minimum": 1_u64 << 20, "maximum": MAX_MEMORY_LIMIT }
        ]
    })
}

/// A duration that may be zero: text such as `1s`, or YAML's plain `0`.
pub(crate) fn duration_or_zero(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "anyOf": [{ "type": ["string", "null"] }, { "const": 0 }] })
}

/// `retry_on:`: error codes, which YAML may write as plain numbers.
pub(crate) fn codes(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": ["array", "null"],
        "minItems": 1,
        "items": { "type": ["string", "number"] }
    })
}

/// `allow: http:`: rules, each a URL prefix or `{url, methods}`.
pub(super) fn http_rules(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "anyOf": [
                {
                    "type": "string",
                    "pattern": HTTP_URL,
                    "description": "A URL prefix, `scheme://host[:port][/path]`, such as `https://api.example.com/v2`."
                },
                {
                    "type": "object",
                    "required": ["url", "methods"],
                    "properties": {
                        "url": {
                            "type": "string",
                            "pattern": HTTP_URL,
                            "description": "A URL prefix, `scheme://host[:port][/path]`."
                        },
                        "methods": {
                            "type": "array",
                            "minItems": 1,
                            "items": { "type": "string", "pattern": "^[A-Za-z]+$" },
                            "description": "The HTTP methods allowed, such as `[GET, POST]`; at least one."
                        }
                    },
                    "description": "A URL prefix and the methods allowed to it."
                }
            ]
        }
    })
}

/// `snapshots:`: stores, each a name or `{name, revision}`.
pub(super) fn snapshots(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "uniqueItems": true,
        "items": {
            "anyOf": [
                {
                    "type": "string",
                    "pattern": ID,
                    "description": "A store's name; a run reads the revision that was newest at its start."
                },
                {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": false,
                    "properties": {
                        "name": {
                            "type": "string",
                            "pattern": ID,
                            "description": "The store's name."
                        },
                        "revision": {
                            "enum": ["latest", "pinned", null],
                            "description": "`latest`: each call reads the newest revision. `pinned` (the default): a run reads the revision that was newest at its start."
                        }
                    }
                }
            ]
        }
    })
}
