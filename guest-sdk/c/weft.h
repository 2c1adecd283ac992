/*
 * weft's helper for steps written in C (built with clang, wasi-libc,
 * wit-bindgen's C generator and wasm-tools by `weft plugin build`).
 *
 * A plugin defines `weft_plugin` (what it says about itself) and
 * `weft_run` (the step); the helper turns them into the `weft:plugin/step`
 * export and gives the host's capabilities as plain C calls:
 *
 *     #include "weft.h"
 *
 *     const weft_info weft_plugin = { .name = "greet", .version = "1.0.0" };
 *
 *     char *weft_run(const weft_context *ctx, const char *input, weft_error *error) {
 *         char *name = weft_json_string(input, "name");
 *         if (!name || !*name) {
 *             free(name);
 *             *error = weft_fatal("empty_name", "name must not be empty");
 *             return NULL;
 *         }
 *         ...
 *     }
 *
 * Strings the helper returns are the caller's, from malloc; free them.
 * A project whose sources call `weft_http_` is built against the
 * `http-plugin` world (its steps then need a grant); others cannot make
 * requests.
 */
#ifndef WEFT_H
#define WEFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where a call comes from (see `step-context` in the WIT). */
typedef struct weft_context {
    const char *tenant;
    const char *workflow;
    const char *run_id;
    const char *step_id;
    uint32_t attempt;
    const char *idempotency_key;
} weft_context;

/* What the plugin says about itself; the schemas are JSON text, or NULL. */
typedef struct weft_info {
    const char *name;
    const char *version;
    const char *description;
    const char *input_schema;
    const char *output_schema;
} weft_info;

/* An error the step understood; its strings are from malloc. */
typedef struct weft_error {
    bool retryable;
    char *code;
    char *message;
    char *details; /* JSON text, or NULL */
} weft_error;

/* Defined by the plugin. */
extern const weft_info weft_plugin;

/* Defined by the plugin: runs the step on `input` (JSON text). Returns the
 * output as JSON text from malloc (the helper frees it), or NULL after
 * setting `*error`. */
char *weft_run(const weft_context *ctx, const char *input, weft_error *error);

/* An error that trying again cannot fix. */
weft_error weft_fatal(const char *code, const char *message);
/* An error that may go away: the step's retry policy applies. */
weft_error weft_retryable(const char *code, const char *message);

/* Appends a line to the run's log; `level` is trace, debug, info, warn or
 * error. */
void weft_log(const char *level, const char *message);

/* The workflow's durable key-value space: writes commit with the step's
 * result, only if it succeeds. `weft_kv_get` answers NULL for no value.
 * On failure the others answer false and set `*error` (from malloc).
 * `weft_kv_set_ttl` sets a key that expires `ttl_ms` milliseconds (1 or
 * more) after the call and then reads as absent; `weft_kv_set`'s never
 * expire. */
char *weft_kv_get(const char *key);
bool weft_kv_set(const char *key, const char *value, char **error);
bool weft_kv_set_ttl(const char *key, const char *value, uint64_t ttl_ms, char **error);
bool weft_kv_delete(const char *key, char **error);

/* Emits `payload` (JSON text) on `channel`: its id, or NULL with `*error`. */
char *weft_outbox_emit(const char *channel, const char *payload, char **error);

/* The secret `name` the workflow grants the step, or NULL with `*error`. */
char *weft_secret_get(const char *name, char **error);

/* An answer to an HTTP request. */
typedef struct weft_http_response {
    uint16_t status;
    char *body; /* body_len bytes, and a NUL after them */
    size_t body_len;
} weft_http_response;

/* GETs `url` (http:// or https://) and reads the whole answer; false with
 * `*error` if none came (a refused request also fails the attempt with
 * `http_denied`). Only in the `http-plugin` world. */
bool weft_http_get(const char *url, weft_http_response *response, char **error);
void weft_http_response_free(weft_http_response *response);

/* The string member `key` of the JSON object `json` (top level only),
 * unescaped, or NULL if there is none or it is not a string. */
char *weft_json_string(const char *json, const char *key);
/* `text` as a JSON string, quotes and escapes included. */
char *weft_json_quote(const char *text);

#endif
