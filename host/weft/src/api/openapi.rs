//! The OpenAPI 3.1 document of the API, served at `/v1/openapi.json`.
//! Written by hand, next to the routes; tests check that it names every
//! route and that every operation it names answers.

use axum::Json;
use serde_json::{Value, json};

/// A JSON body with `schema`.
fn body(schema: Value) -> Value {
    json!({ "required": true, "content": { "application/json": { "schema": schema } } })
}

/// A JSON answer described by `description`.
fn answer(description: &str) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": { "type": "object" } } } })
}

/// The error answers every operation may give, with `more`.
fn responses(ok: (&str, &str), more: &[(&str, &str)]) -> Value {
    let mut map = serde_json::Map::new();
    map.insert(ok.0.to_owned(), answer(ok.1));
    for (status, description) in more {
        map.insert(
            (*status).to_owned(),
            json!({ "description": description, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }),
        );
    }
    map.insert(
        "500".to_owned(),
        json!({ "description": "the store failed", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } }),
    );
    map.entry("503").or_insert_with(|| {
        json!({ "description": "unavailable: the host is shutting down", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } })
    });
    Value::Object(map)
}

fn path_param(name: &str, description: &str) -> Value {
    json!({ "name": name, "in": "path", "required": true, "description": description, "schema": { "type": "string" } })
}

fn query_param(name: &str, description: &str, kind: &str) -> Value {
    json!({ "name": name, "in": "query", "required": false, "description": description, "schema": { "type": kind } })
}

/// The document.
pub fn spec() -> Value {
    let run_id = path_param("id", "the run's id");
    let delivery_id = path_param("id", "the delivery's id");
    let mut document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "weft",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The HTTP API of `weft serve`. Every error is `{\"error\": {\"code\", \"message\"}}` with a stable code. Bodies over 4 MiB (64 MiB for `POST /v1/plugins`) get 413 `body_too_large`; malformed JSON, unknown fields and wrong types get 400 `invalid_request` naming the field; a host that is shutting down answers 503 `unavailable`. Every route but `/v1/health` and this document takes `Authorization: Bearer <token>`: required once any token exists in the store (or with `weft serve --auth`); without one, a loopback host serves as an admin of tenant `default`. A token acts in its tenant; an admin may name another with the `Weft-Tenant` header. Another tenant's objects answer 404 as if they did not exist."
        },
        "security": [{ "bearer": [] }],
        "paths": {
            "/v1/health": { "get": { "summary": "Health check", "security": [], "responses": responses(("200", "`{\"status\": \"ok\"}`"), &[("503", "`{\"status\": \"degraded\", \"store\": why}`: the store fails (a full disk) and recovers by itself")]) } },
            "/v1/openapi.json": { "get": { "summary": "This document", "security": [], "responses": responses(("200", "the OpenAPI document"), &[]) } },
            "/v1/workflows": {
                "get": { "summary": "The workflows served, each with its newest revision and digest", "responses": responses(("200", "`{\"workflows\": [...]}`"), &[]) },
                "post": {
                    "summary": "Deploy a workflow definition as the newest version of its id",
                    "description": "The body is the definition's text: YAML, or JSON when the content type says `json`. Every `uses:` must resolve. New runs start on the new version; runs in flight keep the definition they started with. The version is recorded in the store and served again after a restart.",
                    "requestBody": { "required": true, "content": { "application/yaml": { "schema": { "$ref": "#/components/schemas/Workflow" } }, "application/json": { "schema": { "$ref": "#/components/schemas/Workflow" } } } },
                    "responses": {
                        "201": answer("`{\"workflow\": {id, version, revision, digest, steps}}`: a new version"),
                        "200": answer("`{\"workflow\": ..., \"unchanged\": true}`: this text is the version served already"),
                        "400": { "description": "invalid_request (empty, not UTF-8), invalid_workflow (names the line and the problem)" },
                        "413": { "description": "body_too_large" },
                        "422": { "description": "unresolved_plugin (names the step and the plugin), unresolved_subflow (names the step and the workflow)" },
                        "500": { "description": "store" }
                    }
                }
            },
            "/v1/workflows/{id}": {
                "get": {
                    "summary": "A workflow's served version with its text, and every version deployed, each with `unfinished` (its runs not ended), `served`, and `drained` (not served, and no run left)",
                    "parameters": [path_param("id", "the workflow's id"), query_param("revision", "show this version's text instead", "integer")],
                    "responses": responses(("200", "`{\"workflow\": {id, revision, version, digest, source, served, ...}, \"versions\": [...]}`"), &[("400", "invalid_request"), ("404", "unknown_workflow, unknown_revision")])
                }
            },
            "/v1/snapshots": {
                "get": { "summary": "The tenant's snapshot stores, each with its newest revision and how many revisions it keeps", "responses": responses(("200", "`{\"snapshots\": [{store, revision, digest, entries, revisions, ...}]}`"), &[]) }
            },
            "/v1/snapshots/{name}": {
                "get": {
                    "summary": "A snapshot store's revisions, oldest first",
                    "parameters": [path_param("name", "the store")],
                    "responses": responses(("200", "`{\"store\": name, \"revisions\": [...]}`"), &[("404", "unknown_snapshot")])
                },
                "post": {
                    "summary": "Publish a new revision of a snapshot store",
                    "description": "The body is JSON, `{key: value, ...}`, or JSON Lines (content type `application/x-ndjson`, or `?format=jsonl`), one `{\"key\", \"value\", \"ttl\"?}` per line. It is streamed, not held in memory. The revision is sealed: numbered, identified by the digest of its entries, and read by new runs; runs already started keep the revision they pinned.",
                    "parameters": [
                        path_param("name", "the store"),
                        query_param("format", "`json` or `jsonl` (else by the content type)", "string"),
                        query_param("ttl", "the time to live of an entry that gives none, such as `1h`", "string"),
                        query_param("keep", "revisions kept, counting the newest (default 5)", "integer"),
                        query_param("keep_for", "how long a replaced revision is kept, whatever keep says", "string")
                    ],
                    "requestBody": { "required": true, "content": { "application/json": { "schema": { "type": "object" } }, "application/x-ndjson": { "schema": { "type": "string" } } } },
                    "responses": responses(("201", "`{\"snapshot\": {store, revision, digest, entries, ...}}`"), &[("400", "invalid_snapshot (not JSON, naming the line; a bad ttl), duplicate_key, invalid_request"), ("413", "too_large")])
                }
            },
            "/v1/snapshots/{name}/revisions/{revision}": {
                "get": {
                    "summary": "A snapshot revision, with a page of its entries",
                    "parameters": [path_param("name", "the store"), path_param("revision", "the revision"), query_param("prefix", "only keys with this prefix", "string"), query_param("after", "keys after this one", "string"), query_param("limit", "at most this many (default 100, at most 1000)", "integer")],
                    "responses": responses(("200", "`{\"snapshot\": ..., \"entries\": [{key, value, expires_at}], \"next\": key}`"), &[("404", "unknown_snapshot")])
                }
            },
            "/v1/snapshots/{name}/diff": {
                "get": {
                    "summary": "The keys added, removed and changed between two revisions",
                    "parameters": [path_param("name", "the store"), query_param("from", "the revision compared from", "integer"), query_param("to", "the revision compared to", "integer"), query_param("limit", "changes listed, at most (default 1000)", "integer")],
                    "responses": responses(("200", "`{store, from, to, added, removed, changed, changes: [{key, change, from, to}], truncated}`"), &[("404", "unknown_snapshot")])
                }
            },
            "/v1/plugins": {
                "get": { "summary": "Every plugin in the registry (name, version, digest, size, schemas), by name, newest first", "responses": responses(("200", "`{\"plugins\": [...]}`"), &[]) },
                "post": {
                    "summary": "Add a component to the registry",
                    "description": "The body is the component's bytes (at most 64 MiB). It is compiled, linked and described before it is added; new runs that `use` its name pick it up when it is the newest version that satisfies them. Runs in flight keep the digests they are pinned to. A WASI command (a component exporting `wasi:cli/run`, or a preview-1 command module, wrapped first) does not describe itself: `name` and `version` are recorded in it.",
                    "parameters": [
                        query_param("name", "a command's name, recorded in it (with `version`)", "string"),
                        query_param("version", "a command's semantic version (with `name`)", "string"),
                        query_param("description", "a command's description, one line (with `name`)", "string")
                    ],
                    "requestBody": { "required": true, "content": { "application/wasm": { "schema": { "type": "string", "format": "binary" } } } },
                    "responses": {
                        "201": answer("`{\"plugin\": {name, version, digest, ...}}`"),
                        "200": answer("`{\"plugin\": ..., \"existing\": true}`: these bytes were in the registry"),
                        "400": { "description": "invalid_request (empty, a malformed query, `name` without `version`), invalid_component (not a component, a contract this host does not speak, an import weft does not provide, named; a command without a name and version)" },
                        "413": { "description": "body_too_large" },
                        "500": { "description": "store" }
                    }
                }
            },
            "/v1/runs": {
                "get": {
                    "summary": "The newest runs, filtered",
                    "parameters": [
                        query_param("limit", "at most this many (default 20, at most 1000)", "integer"),
                        query_param("workflow", "only runs of this workflow", "string"),
                        query_param("state", "running, succeeded, failed, timed_out, cancelled, or paused (running and paused by an operator)", "string"),
                        query_param("since", "created at or after (RFC 3339, or ms since the epoch)", "string"),
                        query_param("until", "created before (RFC 3339, or ms since the epoch)", "string"),
                        query_param("before", "the next page: runs older than this run id (the `next` of the page before)", "string")
                    ],
                    "responses": responses(("200", "`{\"runs\": [...], \"next\"}`: `next` is the `before` of the next page, null at the end"), &[("400", "invalid_request")])
                },
                "post": {
                    "summary": "Start a run; answers once it is durably recorded",
                    "requestBody": body(json!({ "$ref": "#/components/schemas/StartRequest" })),
                    "responses": {
                        "201": answer("`{\"id\", \"workflow\", \"state\"}`: started"),
                        "200": answer("`{\"id\", \"workflow\", \"state\", \"existing\": true}`: the run this idempotency key started before"),
                        "400": { "description": "invalid_request, invalid_input" },
                        "404": { "description": "unknown_workflow" },
                        "413": { "description": "body_too_large" },
                        "422": { "description": "plugin_unavailable, workflow_unavailable" },
                        "500": { "description": "store" },
                        "503": { "description": "unavailable" }
                    }
                }
            },
            "/v1/runs/{id}": {
                "get": { "summary": "One run and its step records (`steps=false`: the run alone)", "parameters": [run_id, query_param("steps", "false: the run without its step records", "boolean")], "responses": responses(("200", "`{\"run\", \"steps\"}`"), &[("404", "unknown_run")]) },
                "delete": { "summary": "Delete an ended run, with its step records and logs (its messages stay, with their own retention)", "parameters": [run_id], "responses": responses(("200", "`{\"id\", \"deleted\": true}`"), &[("404", "unknown_run"), ("409", "run_not_ended: the run, or its parent, has not ended")]) }
            },
            "/v1/runs/{id}/steps": { "get": { "summary": "A run's step history: each attempt's input, output or error, timing and logs, in commit order. Paged with `after` and `limit`: `next` is the `after` of the next page (null at the end)", "parameters": [run_id, query_param("after", "records after this one (its seq)", "integer"), query_param("limit", "at most this many (default: all without after or failed, else 200; at most 1000)", "integer"), query_param("failed", "only records with an error", "boolean")], "responses": responses(("200", "`{\"steps\": [...], \"next\"}`"), &[("400", "invalid_request"), ("404", "unknown_run")]) } },
            "/v1/runs/{id}/steps/{step}/actions": {
                "post": {
                    "summary": "Answer a waiting `await` step: complete (its output), fail (its error), skip, or cancel the run",
                    "parameters": [run_id, path_param("step", "the step's path, such as `approve` or `each[2]/approve` (its `/` may stay as it is)")],
                    "requestBody": body(json!({ "$ref": "#/components/schemas/Action" })),
                    "responses": responses(("200", "`{\"run\", \"step\", \"action\"}`: durable; the run goes on"), &[("400", "invalid_request"), ("404", "unknown_run"), ("409", "not_waiting (with the step's state), run_ended, run_busy")])
                }
            },
            "/v1/runs/{id}/messages": { "get": { "summary": "The messages a run emitted, with their deliveries", "parameters": [run_id], "responses": responses(("200", "`{\"messages\": [...]}`"), &[("404", "unknown_run")]) } },
            "/v1/runs/{id}/cancel": { "post": { "summary": "Cancel a run", "parameters": [run_id], "responses": responses(("200", "`{\"id\", \"cancelled\": true}`"), &[("404", "unknown_run"), ("409", "run_ended")]) } },
            "/v1/runs/{id}/retry": {
                "post": {
                    "summary": "Retry a failed, timed-out or cancelled run from its failed step (or `from`, a leaf's path): that leaf runs again as its next attempt; every result that stands (outputs, key-value writes, messages) is kept. The run's history gets a `@retry` record naming who asked",
                    "parameters": [run_id],
                    "requestBody": { "required": false, "content": { "application/json": { "schema": { "type": "object", "additionalProperties": false, "properties": { "from": { "type": "string", "description": "the leaf to go on from, as `weft runs show` prints its path" } } } } } },
                    "responses": responses(("200", "`{\"id\", \"retried\": true, \"state\"}`"), &[("400", "bad_request"), ("404", "unknown_run or unknown_step"), ("409", "run_not_ended, not_failed or not_retryable")])
                }
            },
            "/v1/schedules": {
                "get": { "summary": "Every cron trigger, with its next fire", "responses": responses(("200", "`{\"schedules\": [...]}`"), &[]) },
                "post": {
                    "summary": "Add a cron trigger to a served workflow",
                    "requestBody": body(json!({ "type": "object", "required": ["workflow", "schedule"], "additionalProperties": false, "properties": { "workflow": { "type": "string" }, "schedule": { "type": "object", "description": "the fields of `on: schedule:`" } } })),
                    "responses": responses(("201", "`{\"schedule\"}`"), &[("400", "invalid_request, invalid_schedule"), ("404", "unknown_workflow"), ("409", "schedule_exists")])
                }
            },
            "/v1/schedules/{workflow}/{trigger}/{action}": {
                "post": {
                    "summary": "Pause or resume a trigger (`action`: pause or resume)",
                    "parameters": [path_param("workflow", "the workflow"), path_param("trigger", "the trigger's id"), path_param("action", "pause or resume")],
                    "responses": responses(("200", "`{\"schedule\"}`"), &[("404", "unknown_schedule, not_found"), ("409", "conflict: the trigger keeps changing; try again")])
                }
            },
            "/v1/channels/{channel}/events": {
                "get": {
                    "summary": "A consumer's deliveries as Server-Sent Events (`event: message`, `id:` the message's seq, `data:` the delivery); ack each with POST /v1/deliveries/{id}/ack. Unacked deliveries are sent again after the subscription's ack_timeout, and on reconnection (with `Last-Event-ID`, those up to it only after their ack_timeout)",
                    "parameters": [
                        path_param("channel", "the channel"),
                        query_param("consumer", "the consumer's name (default `default`): a subscription made first with POST /v1/subscriptions; a newer connection replaces an older one", "string"),
                        { "name": "Last-Event-ID", "in": "header", "required": false, "schema": { "type": "string" } }
                    ],
                    "responses": {
                        "200": { "description": "an event stream", "content": { "text/event-stream": { "schema": { "$ref": "#/components/schemas/Delivery" } } } },
                        "400": { "description": "invalid_request" },
                        "404": { "description": "unknown_subscription: make it first with POST /v1/subscriptions" },
                        "409": { "description": "conflict: the name is a webhook subscription" },
                        "503": { "description": "too_many_streams: 256 open on the host, or 64 of the caller's tenant" }
                    }
                }
            },
            "/v1/subscriptions": {
                "get": { "summary": "Subscriptions (webhook secrets not shown)", "parameters": [query_param("channel", "only this channel's", "string")], "responses": responses(("200", "`{\"subscriptions\": [...]}`"), &[("400", "invalid_request")]) },
                "post": {
                    "summary": "Subscribe to a channel: an SSE consumer, or a webhook. One with the same key and target is kept",
                    "requestBody": body(json!({ "$ref": "#/components/schemas/Subscription" })),
                    "responses": responses(("201", "`{\"subscription\"}`, with the webhook's secret"), &[("400", "invalid_request"), ("409", "conflict: the key exists with another target")])
                }
            },
            "/v1/subscriptions/{channel}/{name}": {
                "delete": { "summary": "Remove a subscription and its deliveries", "parameters": [path_param("channel", "the channel"), path_param("name", "the subscription's name")], "responses": responses(("200", "`{\"removed\"}`"), &[("404", "unknown_subscription")]) }
            },
            "/v1/deliveries": {
                "get": {
                    "summary": "Deliveries: the newest; `state=error` for dead letters; `subscription=` for one subscription's queue in order",
                    "parameters": [
                        query_param("state", "created, delivered, acked, completed or error", "string"),
                        query_param("subscription", "`<channel>/<name>`", "string"),
                        query_param("limit", "at most this many (default 100)", "integer")
                    ],
                    "responses": responses(("200", "`{\"deliveries\": [...]}`"), &[("400", "invalid_request")])
                }
            },
            "/v1/acks": {
                "post": {
                    "summary": "Ack many deliveries in one durable write (at most 10,000); each answer is its state or its error code",
                    "requestBody": body(json!({ "type": "object", "required": ["deliveries"], "additionalProperties": false, "properties": { "deliveries": { "type": "array", "items": { "type": "string" } } } })),
                    "responses": responses(("200", "`{\"acks\": [{\"id\", \"state\" | \"error\"}]}`"), &[("400", "invalid_request")])
                }
            },
            "/v1/deliveries/{id}": {
                "get": { "summary": "One delivery", "parameters": [delivery_id], "responses": responses(("200", "`{\"delivery\"}`"), &[("404", "unknown_delivery")]) },
                "delete": { "summary": "Clear a dead letter", "parameters": [delivery_id], "responses": responses(("200", "`{\"cleared\"}`"), &[("404", "unknown_delivery"), ("409", "conflict: not a dead letter")]) }
            },
            "/v1/deliveries/{id}/{action}": {
                "post": {
                    "summary": "`ack` a delivery (a late ack changes nothing), or `resend` a dead letter with the same id",
                    "parameters": [delivery_id, path_param("action", "ack or resend")],
                    "responses": responses(("200", "`{\"delivery\"}`"), &[("404", "unknown_delivery, not_found"), ("409", "conflict: not a dead letter (resend)")])
                }
            }
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer", "description": "an API token, `weft_<id>_<secret>`" } },
            "schemas": {
                "Quota": { "type": "object", "additionalProperties": false, "properties": {
                    "starts_per_second": { "type": "integer", "description": "runs started per second over the API; beyond it, 429 quota_exceeded with Retry-After" },
                    "max_plugins": { "type": "integer" }, "max_plugin_bytes": { "type": "integer" }, "max_subscriptions": { "type": "integer" },
                    "max_resident": { "type": "integer", "description": "runs in progress at once on each host; beyond it the tenant's runs are parked, never dropped" },
                    "weight": { "type": "integer", "description": "the tenant's share of each host's turns (default 1)" },
                    "max_step_timeout_ms": { "type": "integer", "description": "the longest a step's call may run, its default included; a deployment asking for longer is 422 quota_exceeded" },
                    "max_step_memory": { "type": "integer", "description": "the most memory of a step's call, in bytes, its default included; a deployment asking for more is 422 quota_exceeded" },
                    "guest_ms_per_minute": { "type": "integer", "description": "guest time the tenant's calls may take per minute on each host; once spent, a step due waits for the next minute (its record says cpu_quota)" },
                    "max_stored_bytes": { "type": "integer", "description": "bytes the tenant's runs may keep in the store (run inputs, step records, key-value values, messages); a start over it is 507 storage_quota, a step result over it fails the step with storage_quota" },
                    "max_timers": { "type": "integer", "description": "timers the tenant's runs may have pending at once (sleeps, await timeouts, retry delays, deadlines); a step that would sleep or wait with a timeout past it fails with timer_quota" },
                    "max_audit_rows": { "type": "integer", "description": "rows of the audit log kept for the tenant; beyond it, its oldest are deleted as new ones are written" },
                    "deploys_per_second": { "type": "integer", "description": "workflow deployments, plugin uploads and snapshot publishes per second, together; beyond it, 429 quota_exceeded with Retry-After" },
                    "max_revisions": { "type": "integer", "description": "workflow revisions the tenant may keep; a deployment past it is 429 quota_exceeded" },
                    "max_snapshot_bytes": { "type": "integer", "description": "bytes of snapshot revisions the tenant may keep; a publish past it is 507 storage_quota" },
                    "egress": { "type": "array", "items": { "type": "string" }, "description": "URL prefixes the tenant's steps and webhooks may send HTTP requests to; unset, the host's policy" },
                    "retain": { "type": "string", "description": "how long the tenant's ended runs and settled messages are kept when their workflow does not say: a duration such as 7d, or forever; unset, the host's --retain" }
                } },
                "Error": { "type": "object", "required": ["error"], "properties": { "error": { "type": "object", "required": ["code", "message"], "properties": { "code": { "type": "string" }, "message": { "type": "string" } } } } },
                "StartRequest": { "type": "object", "required": ["workflow"], "additionalProperties": false, "properties": { "workflow": { "type": "string" }, "input": {}, "idempotency_key": { "type": "string", "minLength": 1, "maxLength": 256 } } },
                "Action": { "type": "object", "required": ["action"], "additionalProperties": false, "properties": {
                    "action": { "enum": ["complete", "fail", "skip", "cancel"] },
                    "output": { "description": "complete: the step's output" },
                    "error": { "type": "object", "required": ["message"], "additionalProperties": false, "properties": { "code": { "type": "string", "default": "rejected" }, "message": { "type": "string" }, "details": {} } }
                } },
                "Subscription": { "type": "object", "required": ["channel"], "additionalProperties": false, "properties": {
                    "channel": { "type": "string" },
                    "name": { "type": "string", "default": "default" },
                    "webhook": { "type": "object", "required": ["url"], "additionalProperties": false, "properties": { "url": { "type": "string" }, "secret": { "type": "string", "description": "HMAC-SHA256 key; default: random, returned once" } } },
                    "max_attempts": { "type": "integer", "default": 10 },
                    "backoff": { "type": "string", "default": "1s" },
                    "max_backoff": { "type": "string", "default": "5m" },
                    "ack_timeout": { "type": "string", "default": "30s" }
                } },
                "Delivery": { "type": "object", "properties": {
                    "delivery": { "type": "string" }, "message": { "type": "string" }, "seq": { "type": "integer" },
                    "channel": { "type": "string" }, "run": { "type": "string" }, "step": { "type": "string" },
                    "attempt": { "type": "integer" }, "payload": {}, "committed_us": { "type": "integer" }
                } }
            }
        }
    });
    for more in [tenancy_paths(), observe_paths(), operate_paths()] {
        if let (Some(paths), Value::Object(more)) = (document["paths"].as_object_mut(), more) {
            paths.extend(more);
        }
    }
    add_body_errors(&mut document);
    add_auth_errors(&mut document);
    add_workflow_schema(&mut document);
    document
}

/// The workflow format's schema (`weft schema workflow`) as component
/// `Workflow`, its definitions beside it as `Workflow<Name>`, the
/// references rewritten to point there.
fn add_workflow_schema(document: &mut Value) {
    fn rewrite(value: &mut Value) {
        match value {
            Value::Object(fields) => {
                if let Some(Value::String(target)) = fields.get_mut("$ref")
                    && let Some(name) = target.strip_prefix("#/$defs/")
                {
                    *target = format!("#/components/schemas/Workflow{name}");
                }
                fields.values_mut().for_each(rewrite);
            }
            Value::Array(items) => items.iter_mut().for_each(rewrite),
            _ => {}
        }
    }
    let mut schema = weft_model::workflow_schema();
    rewrite(&mut schema);
    let Some(fields) = schema.as_object_mut() else {
        return;
    };
    fields.remove("$schema");
    let defs = fields.remove("$defs");
    let schemas = &mut document["components"]["schemas"];
    if let Some(Value::Object(defs)) = defs {
        for (name, def) in defs {
            schemas[format!("Workflow{name}")] = def;
        }
    }
    schemas["Workflow"] = schema;
}

/// Every operation but the open ones may answer 401 (no token, or one
/// that does not work) and 403 (a role without the right, on the
/// tenant's own objects); says so on each of them.
fn add_auth_errors(document: &mut Value) {
    let Some(paths) = document["paths"].as_object_mut() else {
        return;
    };
    for operation in paths.values_mut().filter_map(Value::as_object_mut) {
        for op in operation.values_mut() {
            if op.get("security").is_some() {
                continue;
            }
            let Some(responses) = op["responses"].as_object_mut() else {
                continue;
            };
            let error = |description: &str| json!({ "description": description, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } });
            responses.entry("401").or_insert_with(|| {
                error("missing_token, malformed_token, unknown_token, revoked_token, expired_token")
            });
            responses
                .entry("403")
                .or_insert_with(|| error("forbidden: the token's role lacks the right; cross_origin: a page of another site; not_local: a token-less request from another machine or addressed to a name; forwarded: a token-less request through a proxy"));
        }
    }
}

/// The paths of tenants, tokens and the audit log.
fn tenancy_paths() -> Value {
    json!({
            "/v1/tenants": {
                    "get": { "summary": "Every tenant, with its quota (an admin's)", "responses": responses(("200", "`{\"tenants\": [...]}`"), &[]) },
                    "post": {
                        "summary": "Add a tenant (an admin's)",
                        "requestBody": body(json!({ "type": "object", "required": ["name"], "additionalProperties": false, "properties": { "name": { "type": "string" }, "quota": { "$ref": "#/components/schemas/Quota" } } })),
                        "responses": responses(("201", "`{\"tenant\"}`"), &[("400", "invalid_request"), ("409", "tenant_exists")])
                    }
                },
                "/v1/tenants/{tenant}": {
                    "delete": {
                        "summary": "Remove a tenant (an admin's): refused while it has runs that have not ended, unless `force=true`, which cancels them first; its tokens stop working",
                        "parameters": [path_param("tenant", "the tenant"), query_param("force", "cancel its live runs first", "boolean")],
                        "responses": responses(("200", "`{\"removed\", \"cancelled\"}`"), &[("404", "unknown_tenant"), ("409", "tenant_busy")])
                    }
                },
                "/v1/tenants/{tenant}/quota": {
                    "post": {
                        "summary": "Set a tenant's quota (an admin's); a field left out is no limit",
                        "parameters": [path_param("tenant", "the tenant")],
                        "requestBody": body(json!({ "$ref": "#/components/schemas/Quota" })),
                        "responses": responses(("200", "`{\"tenant\"}`"), &[("400", "invalid_request"), ("404", "unknown_tenant")])
                    }
                },
                "/v1/tenants/{tenant}/usage": {
                    "get": { "summary": "A tenant's quota and what it uses (its owner's, or an admin's)", "parameters": [path_param("tenant", "the tenant")], "responses": responses(("200", "`{\"tenant\", \"quota\", \"usage\"}`"), &[("404", "unknown_tenant")]) }
                },
                "/v1/tokens": {
                    "get": { "summary": "The tenant's API tokens, never their secrets (an owner's)", "responses": responses(("200", "`{\"tokens\": [...]}`"), &[]) },
                    "post": {
                        "summary": "Make an API token; the answer holds it, once (an owner's, up to its own role; an admin's for any tenant)",
                        "requestBody": body(json!({ "type": "object", "required": ["role"], "additionalProperties": false, "properties": { "tenant": { "type": "string" }, "role": { "enum": ["admin", "owner", "deployer", "operator", "reader"] }, "expires": { "type": "string", "description": "such as `30d`" }, "label": { "type": "string" } } })),
                        "responses": responses(("201", "`{\"token\": {id, tenant, role, token, ...}}`"), &[("400", "invalid_request"), ("404", "unknown_tenant")])
                    }
                },
                "/v1/tokens/{id}/revoke": {
                    "post": { "summary": "Revoke a token: it stops working at once, open streams included", "parameters": [path_param("id", "the token's id")], "responses": responses(("200", "`{\"token\"}`"), &[("404", "unknown_token")]) }
                },
                "/v1/secrets": {
                    "get": { "summary": "The tenant's secrets: names and when each was set, never values (an owner's; an admin's for any tenant)", "parameters": [query_param("tenant", "another tenant (an admin's)", "string")], "responses": responses(("200", "`{\"secrets\": [{name, updated_at, grants}]}`"), &[("404", "unknown_tenant")]) }
                },
                "/v1/secrets/reseal": {
                    "post": { "summary": "Seal every secret and webhook signing key sealed under an earlier key (or a signing key kept in the clear) again under the current one, after a key rotation", "parameters": [query_param("tenant", "another tenant (an admin's)", "string")], "responses": responses(("200", "`{\"resealed\", \"secrets\", \"webhooks\"}`"), &[("404", "unknown_tenant"), ("503", "no_secrets_key")]) }
                },
                "/v1/secrets/{name}": {
                    "put": {
                        "summary": "Set a secret, sealed with the host's secrets key; its value is never shown again",
                        "parameters": [path_param("name", "the secret's name"), query_param("tenant", "another tenant (an admin's)", "string")],
                        "requestBody": body(json!({ "type": "object", "required": ["value"], "additionalProperties": false, "properties": { "value": { "type": "string", "minLength": 1 } } })),
                        "responses": responses(("200", "`{\"secret\": {name, updated_at}}`"), &[("400", "invalid_request"), ("404", "unknown_tenant"), ("503", "no_secrets_key")])
                    },
                    "delete": { "summary": "Delete a secret", "parameters": [path_param("name", "the secret's name"), query_param("tenant", "another tenant (an admin's)", "string")], "responses": responses(("200", "`{\"deleted\"}`"), &[("404", "unknown_secret")]) }
                },
                "/v1/secrets/{name}/grants": {
                    "post": {
                        "summary": "Grant a secret to the component a plugin reference resolves to now: only that component's steps read it (an owner's)",
                        "parameters": [path_param("name", "the secret's name"), query_param("tenant", "another tenant (an admin's)", "string")],
                        "requestBody": body(json!({ "type": "object", "required": ["plugin"], "additionalProperties": false, "properties": { "plugin": { "type": "string", "description": "name, name@version or name@sha256:<hex>" } } })),
                        "responses": responses(("200", "`{\"secret\": {name, updated_at, grants}}`"), &[("400", "invalid_request"), ("404", "unknown_secret"), ("422", "unresolved_plugin")])
                    }
                },
                "/v1/secrets/{name}/grants/{plugin}": {
                    "delete": { "summary": "Take back every grant of a secret to a plugin (an owner's)", "parameters": [path_param("name", "the secret's name"), path_param("plugin", "the plugin's name"), query_param("tenant", "another tenant (an admin's)", "string")], "responses": responses(("200", "`{\"secret\": {name, updated_at, grants}}`"), &[("404", "unknown_secret, unknown_grant")]) }
                },
                "/v1/audit": {
                    "get": { "summary": "The tenant's audit log, newest first (an owner's)", "parameters": [query_param("limit", "at most this many (default 100)", "integer")], "responses": responses(("200", "`{\"audit\": [{at, tenant, actor, action, object, detail}]}`"), &[("400", "invalid_request")]) }
                }
    })
}

/// Every operation that reads a JSON body may also answer 413 (too large)
/// and, when JSON is the only type it takes, 415 (not sent as
/// `application/json`); says so on each of them. A body that may come in
/// another type too (a workflow's YAML) is read as raw bytes and never
/// refused for its content type. Every operation with parameters may also
/// answer 400 for one that does not parse.
fn add_body_errors(document: &mut Value) {
    let Some(paths) = document["paths"].as_object_mut() else {
        return;
    };
    for operation in paths.values_mut().filter_map(Value::as_object_mut) {
        for op in operation.values_mut() {
            let content = op["requestBody"]["content"].as_object();
            let json_body = content.is_some_and(|c| c.contains_key("application/json"));
            let json_only = json_body && content.is_some_and(|c| c.len() == 1);
            let parameters = op["parameters"].as_array().is_some_and(|p| !p.is_empty());
            let Some(responses) = op["responses"].as_object_mut() else {
                continue;
            };
            let error = |description: &str| json!({ "description": description, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } });
            if json_body {
                responses
                    .entry("413")
                    .or_insert_with(|| error("body_too_large"));
            }
            if json_only {
                responses.entry("415").or_insert_with(|| {
                    error("unsupported_media_type: the body was not sent as `application/json`")
                });
            }
            // A parameter that does not parse (a query value of the wrong
            // type, a field the route does not take, a path segment that
            // is not UTF-8) is refused before the handler runs.
            if parameters {
                responses.entry("400").or_insert_with(|| {
                    error("invalid_request: a parameter that does not parse, or one the route does not take")
                });
            }
        }
    }
}

pub(super) async fn document() -> Json<Value> {
    Json(spec())
}

/// The routes that operate on runs already started (pausing them, moving
/// them to another revision), and on triggers (removing one).
fn operate_paths() -> Value {
    json!({
            "/v1/schedules/{workflow}/{trigger}": {
                "delete": {
                    "summary": "Remove a trigger added by hand (one declared in its workflow's file is removed there); runs it started go on",
                    "parameters": [path_param("workflow", "the workflow"), path_param("trigger", "the trigger's id")],
                    "responses": responses(("200", "`{\"schedule\"}`: the trigger removed"), &[("404", "unknown_schedule"), ("409", "schedule_declared: declared in the workflow's file; conflict: the trigger keeps changing")])
                }
            },
            "/v1/runs/{id}/pause": {
                "post": {
                    "summary": "Pause a run: it finishes the attempts under way, starts nothing new, and waits out of memory; its timers fire into the store (their records wait for the resume; a workflow `timeout:` still ends it). `pending` when a call is under way here",
                    "parameters": [path_param("id", "the run's id")],
                    "responses": responses(("200", "`{\"id\", \"paused\", \"pending\"}`"), &[("404", "unknown_run"), ("409", "run_ended, run_paused, run_busy (parked, or driven by another host)")])
                }
            },
            "/v1/runs/{id}/resume": {
                "post": {
                    "summary": "Resume a paused run: it goes on, first with what its timers and answers recorded while paused",
                    "parameters": [path_param("id", "the run's id")],
                    "responses": responses(("200", "`{\"id\", \"paused\": false}`"), &[("404", "unknown_run"), ("409", "run_ended, run_not_paused")])
                }
            },
            "/v1/workflows/{id}/migrate": {
                "post": {
                    "summary": "Move every unfinished run of one revision to a newer one, at each run's next step boundary: a run moves when every step it has a record of is a step of the new revision with the same id and kind; each run that cannot move is listed with why. A moved run's record says so (`migrated`)",
                    "parameters": [path_param("id", "the workflow's id")],
                    "requestBody": body(json!({ "type": "object", "required": ["from_revision", "to_revision"], "additionalProperties": false, "properties": {
                        "from_revision": { "type": "integer", "minimum": 1 },
                        "to_revision": { "type": "integer", "minimum": 1, "description": "newer than from_revision" },
                        "dry_run": { "type": "boolean", "description": "check every run, move none" }
                    } })),
                    "responses": responses(("200", "`{\"matched\", \"moved\": [run ids], \"unmoved\": [{run, reason, failed}], \"dry_run\"}`"), &[("400", "bad_request"), ("404", "unknown_workflow, unknown_revision"), ("409", "unreadable_revision")])
                }
            }
    })
}

/// The routes that watch a host: metrics, run events, and what the web
/// UI reads.
fn observe_paths() -> Value {
    json!({
            "/v1/runs/bulk": {
                "post": {
                    "summary": "One action on every run of the tenant a filter matches, up to `limit` (default and most 10,000) a request; `dry_run` counts and changes nothing",
                    "requestBody": body(json!({ "type": "object", "required": ["action"], "additionalProperties": false, "properties": {
                        "action": { "enum": ["cancel", "retry", "pause", "resume"], "description": "`cancel` running runs; `retry` failed, timed-out or cancelled runs from their failed step (a child run is retried through its parent); `pause` running runs; `resume` paused ones" },
                        "filter": { "type": "object", "additionalProperties": false, "properties": {
                            "workflow": { "type": "string" }, "state": { "type": "string" },
                            "since": { "type": "string", "description": "created at or after (RFC 3339, or ms since the epoch)" },
                            "until": { "type": "string", "description": "created before" },
                            "revision": { "type": "integer", "description": "runs following this revision of `workflow`" },
                            "error": { "type": "string", "description": "runs that ended with this error code" }
                        } },
                        "dry_run": { "type": "boolean" },
                        "limit": { "type": "integer" },
                        "before": { "type": "string", "description": "continue after this run: the `next` of the answer before" }
                    } })),
                    "responses": responses(("200", "`{\"action\", \"dry_run\", \"matched\", \"changed\", \"unchanged\": [{run, reason}], \"next\"}`; a dry run: `{\"matched\", \"would_change\"}`"), &[("400", "invalid_request")])
                }
            },
            "/v1/runs/{id}/graph": {
                "get": {
                    "summary": "The workflow the run is pinned to, as a graph: `{workflow, steps: [node], catch: [branch]}`, a node being `{id, kind, label, branches: [{label, steps: [node]}]}` (kind: call, sleep, await, emit, subflow, parallel, switch, foreach, while; a step's catch handlers are branches labelled `catch`)",
                    "parameters": [path_param("id", "the run's id")],
                    "responses": responses(("200", "`{workflow, steps, catch}`"), &[("404", "unknown_run")])
                }
            },
            "/v1/awaits": {
                "get": {
                    "summary": "The `await` steps of the caller's running runs that wait for an answer (of its newest 1,000 running runs): `{awaits: [{run, workflow, path, step_id, since, input}]}`",
                    "responses": responses(("200", "`{\"awaits\": [...]}`"), &[])
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Every metric of the host in the Prometheus text format (OpenMetrics 1.0): runs started and ended, step and guest times, commit batches, ready, resident and parked runs, timers and their lag, deliveries, webhook times, component loads. For an admin: the labels name every tenant",
                    "responses": {
                        "200": { "description": "the exposition", "content": { "application/openmetrics-text": { "schema": { "type": "string" } } } },
                        "403": { "description": "forbidden: not an admin" },
                        "404": { "description": "metrics_off: the host counts nothing" }
                    }
                }
            },
            "/v1/events": {
                "get": {
                    "summary": "What happens to the caller's runs, as Server-Sent Events: `started`, `step_finished`, `waiting`, `resumed`, `ended`; `id:` rises with each event, `data:` the event as JSON (`id`, `event`, `run`, `workflow`, `state`, `at`, `step`). With `Last-Event-ID` (or `after`) the stream resumes after that event; if events since were lost (the host keeps its last 10,000, and starts over when restarted), it starts with `event: reset`. Events are this host's: on a shared store, those of the runs it drives",
                    "parameters": [
                        query_param("workflow", "only this workflow's runs", "string"),
                        query_param("run", "only this run", "string"),
                        query_param("kind", "only these events, comma-separated", "string"),
                        query_param("state", "only events after which the run is in one of these states, comma-separated", "string"),
                        query_param("after", "resume after this event id", "integer"),
                        { "name": "Last-Event-ID", "in": "header", "required": false, "schema": { "type": "string" } }
                    ],
                    "responses": {
                        "200": { "description": "an event stream", "content": { "text/event-stream": { "schema": { "type": "object" } } } },
                        "400": { "description": "invalid_request: an unknown kind or state, or a bad Last-Event-ID" },
                        "503": { "description": "too_many_streams: 256 open on the host, or 64 of the caller's tenant" }
                    }
                }
            }
    })
}
