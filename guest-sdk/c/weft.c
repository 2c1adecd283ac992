/*
 * weft's helper for steps written in C: the `weft:plugin/step` export over
 * `weft_plugin` and `weft_run`, and the capabilities as plain C calls. See
 * weft.h. Built by `weft plugin build` with the bindings wit-bindgen made
 * for the project's world (WEFT_WORLD_HEADER).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"
#include WEFT_WORLD_HEADER

#ifdef WEFT_WORLD_HTTP_PLUGIN
typedef http_plugin_string_t wstring;
typedef http_plugin_list_string_t wlist;
#define wstring_set http_plugin_string_set
#define wstring_dup http_plugin_string_dup
#define wstring_free http_plugin_string_free
#else
typedef plugin_string_t wstring;
typedef plugin_list_string_t wlist;
#define wstring_set plugin_string_set
#define wstring_dup plugin_string_dup
#define wstring_free plugin_string_free
#endif

/* A NUL-terminated copy of `s`, which it frees. */
static char *take(wstring *s) {
    char *text = malloc(s->len + 1);
    if (text) {
        memcpy(text, s->ptr, s->len);
        text[s->len] = '\0';
    }
    wstring_free(s);
    return text;
}

static char *copy(const char *s) {
    return s ? strdup(s) : NULL;
}

static void set_error(char **error, char *message) {
    if (error) {
        *error = message;
    } else {
        free(message);
    }
}

weft_error weft_fatal(const char *code, const char *message) {
    return (weft_error){.retryable = false, .code = copy(code), .message = copy(message), .details = NULL};
}

weft_error weft_retryable(const char *code, const char *message) {
    return (weft_error){.retryable = true, .code = copy(code), .message = copy(message), .details = NULL};
}

void weft_log(const char *level, const char *message) {
    weft_plugin_log_level_t at = WEFT_PLUGIN_LOG_LEVEL_INFO;
    if (strcmp(level, "trace") == 0) at = WEFT_PLUGIN_LOG_LEVEL_TRACE;
    else if (strcmp(level, "debug") == 0) at = WEFT_PLUGIN_LOG_LEVEL_DEBUG;
    else if (strcmp(level, "warn") == 0) at = WEFT_PLUGIN_LOG_LEVEL_WARN;
    else if (strcmp(level, "error") == 0) at = WEFT_PLUGIN_LOG_LEVEL_ERROR;
    wstring text;
    wstring_set(&text, message);
    weft_plugin_log_log(at, &text);
}

char *weft_kv_get(const char *key) {
    wstring k, value;
    wstring_set(&k, key);
    if (!weft_plugin_kv_get(&k, &value)) return NULL;
    return take(&value);
}

/* `ttl_ms` is NULL for a key that never expires (`none`). */
static bool kv_set(const char *key, const char *value, uint64_t *ttl_ms, char **error) {
    wstring k, v, err;
    wstring_set(&k, key);
    wstring_set(&v, value);
    if (weft_plugin_kv_set(&k, &v, ttl_ms, &err)) return true;
    set_error(error, take(&err));
    return false;
}

bool weft_kv_set(const char *key, const char *value, char **error) {
    return kv_set(key, value, NULL, error);
}

bool weft_kv_set_ttl(const char *key, const char *value, uint64_t ttl_ms, char **error) {
    return kv_set(key, value, &ttl_ms, error);
}

bool weft_kv_delete(const char *key, char **error) {
    wstring k, err;
    wstring_set(&k, key);
    if (weft_plugin_kv_delete(&k, &err)) return true;
    set_error(error, take(&err));
    return false;
}

char *weft_outbox_emit(const char *channel, const char *payload, char **error) {
    wstring c, p, id, err;
    wstring_set(&c, channel);
    wstring_set(&p, payload);
    if (weft_plugin_outbox_emit(&c, &p, &id, &err)) return take(&id);
    set_error(error, take(&err));
    return NULL;
}

char *weft_secret_get(const char *name, char **error) {
    wstring n, value, err;
    wstring_set(&n, name);
    if (weft_plugin_secrets_get(&n, &value, &err)) return take(&value);
    set_error(error, take(&err));
    return NULL;
}

void weft_http_response_free(weft_http_response *response) {
    free(response->body);
    response->body = NULL;
    response->body_len = 0;
}

#ifdef WEFT_WORLD_HTTP_PLUGIN

static char *message(const char *format, const char *a, long b) {
    int n = snprintf(NULL, 0, format, a, b);
    char *text = malloc((size_t)n + 1);
    if (text) snprintf(text, (size_t)n + 1, format, a, b);
    return text;
}

static char *code_message(const char *url, wasi_http_types_error_code_t *code) {
    char *text;
    if (code->tag == WASI_HTTP_TYPES_ERROR_CODE_HTTP_REQUEST_DENIED ||
        code->tag == WASI_HTTP_TYPES_ERROR_CODE_DESTINATION_IP_PROHIBITED) {
        text = message("http_denied: %s: the step is not granted this destination (%ld)", url, code->tag);
    } else {
        text = message("GET %s failed: error code %ld", url, code->tag);
    }
    wasi_http_types_error_code_free(code);
    return text;
}

bool weft_http_get(const char *url, weft_http_response *response, char **error) {
    response->status = 0;
    response->body = NULL;
    response->body_len = 0;
    bool https;
    const char *rest;
    if (strncmp(url, "https://", 8) == 0) {
        https = true;
        rest = url + 8;
    } else if (strncmp(url, "http://", 7) == 0) {
        https = false;
        rest = url + 7;
    } else {
        set_error(error, message("`%s` is not an http:// or https:// URL", url, 0));
        return false;
    }
    size_t host_len = strcspn(rest, "/?");
    if (host_len == 0) {
        set_error(error, message("`%s` names no host", url, 0));
        return false;
    }
    const char *path = rest[host_len] ? rest + host_len : "/";

    wasi_http_types_own_outgoing_request_t request =
        wasi_http_types_constructor_outgoing_request(wasi_http_types_constructor_fields());
    wasi_http_types_borrow_outgoing_request_t borrowed = wasi_http_types_borrow_outgoing_request(request);
    wasi_http_types_method_t method = {.tag = WASI_HTTP_TYPES_METHOD_GET};
    wasi_http_types_scheme_t scheme = {.tag = https ? WASI_HTTP_TYPES_SCHEME_HTTPS : WASI_HTTP_TYPES_SCHEME_HTTP};
    http_plugin_string_t authority, path_with_query;
    http_plugin_string_dup_n(&authority, rest, host_len);
    http_plugin_string_set(&path_with_query, path);
    bool set = wasi_http_types_method_outgoing_request_set_method(borrowed, &method) &&
               wasi_http_types_method_outgoing_request_set_scheme(borrowed, &scheme) &&
               wasi_http_types_method_outgoing_request_set_authority(borrowed, &authority) &&
               wasi_http_types_method_outgoing_request_set_path_with_query(borrowed, &path_with_query);
    http_plugin_string_free(&authority);
    wasi_http_types_own_outgoing_body_t body;
    if (!set || !wasi_http_types_method_outgoing_request_body(borrowed, &body)) {
        wasi_http_types_outgoing_request_drop_own(request);
        set_error(error, message("`%s` is not a request that can be made", url, 0));
        return false;
    }
    wasi_http_outgoing_handler_own_future_incoming_response_t future;
    wasi_http_types_error_code_t code;
    if (!wasi_http_outgoing_handler_handle(request, NULL, &future, &code)) {
        wasi_http_types_outgoing_body_drop_own(body);
        set_error(error, code_message(url, &code));
        return false;
    }
    if (!wasi_http_types_static_outgoing_body_finish(body, NULL, &code)) {
        wasi_http_types_future_incoming_response_drop_own(future);
        set_error(error, code_message(url, &code));
        return false;
    }
    wasi_http_types_borrow_future_incoming_response_t waiting =
        wasi_http_types_borrow_future_incoming_response(future);
    wasi_http_types_result_result_own_incoming_response_error_code_void_t answer;
    while (!wasi_http_types_method_future_incoming_response_get(waiting, &answer)) {
        wasi_http_types_own_pollable_t ready = wasi_http_types_method_future_incoming_response_subscribe(waiting);
        wasi_io_poll_method_pollable_block(wasi_io_poll_borrow_pollable(ready));
        wasi_io_poll_pollable_drop_own(ready);
    }
    wasi_http_types_future_incoming_response_drop_own(future);
    if (answer.is_err) {
        set_error(error, message("GET %s: the answer was taken already", url, 0));
        return false;
    }
    if (answer.val.ok.is_err) {
        set_error(error, code_message(url, &answer.val.ok.val.err));
        return false;
    }
    wasi_http_types_own_incoming_response_t incoming = answer.val.ok.val.ok;
    wasi_http_types_borrow_incoming_response_t got = wasi_http_types_borrow_incoming_response(incoming);
    response->status = wasi_http_types_method_incoming_response_status(got);
    wasi_http_types_own_incoming_body_t incoming_body;
    wasi_http_types_own_input_stream_t stream;
    if (!wasi_http_types_method_incoming_response_consume(got, &incoming_body)) {
        wasi_http_types_incoming_response_drop_own(incoming);
        set_error(error, message("GET %s: the body was taken already", url, 0));
        return false;
    }
    if (!wasi_http_types_method_incoming_body_stream(wasi_http_types_borrow_incoming_body(incoming_body), &stream)) {
        wasi_http_types_incoming_body_drop_own(incoming_body);
        wasi_http_types_incoming_response_drop_own(incoming);
        set_error(error, message("GET %s: the body cannot be read", url, 0));
        return false;
    }
    bool ok = true;
    for (;;) {
        http_plugin_list_u8_t chunk;
        wasi_io_streams_stream_error_t failure;
        if (!wasi_io_streams_method_input_stream_blocking_read(wasi_io_streams_borrow_input_stream(stream), 65536,
                                                               &chunk, &failure)) {
            if (failure.tag != WASI_IO_STREAMS_STREAM_ERROR_CLOSED) {
                wasi_io_streams_stream_error_free(&failure);
                set_error(error, message("GET %s: reading the body failed", url, 0));
                ok = false;
            }
            break;
        }
        char *grown = realloc(response->body, response->body_len + chunk.len + 1);
        if (!grown) {
            http_plugin_list_u8_free(&chunk);
            set_error(error, message("GET %s: out of memory", url, 0));
            ok = false;
            break;
        }
        response->body = grown;
        memcpy(response->body + response->body_len, chunk.ptr, chunk.len);
        response->body_len += chunk.len;
        response->body[response->body_len] = '\0';
        http_plugin_list_u8_free(&chunk);
    }
    wasi_io_streams_input_stream_drop_own(stream);
    wasi_http_types_future_trailers_drop_own(wasi_http_types_static_incoming_body_finish(incoming_body));
    wasi_http_types_incoming_response_drop_own(incoming);
    if (!ok) {
        weft_http_response_free(response);
        return false;
    }
    if (!response->body) response->body = calloc(1, 1);
    return true;
}

#else

bool weft_http_get(const char *url, weft_http_response *response, char **error) {
    (void)url;
    response->status = 0;
    response->body = NULL;
    response->body_len = 0;
    set_error(error, copy("this plugin was built without HTTP: call weft_http_get in its sources"));
    return false;
}

#endif

/* The export. */

static char *owned(const wstring *s) {
    char *text = malloc(s->len + 1);
    if (text) {
        memcpy(text, s->ptr, s->len);
        text[s->len] = '\0';
    }
    return text;
}

static void option_json(weft_plugin_types_option_json_t *out, const char *text) {
    out->is_some = text != NULL;
    if (text) wstring_dup(&out->val, text);
}

void exports_weft_plugin_step_describe(exports_weft_plugin_step_plugin_info_t *ret) {
    wstring_dup(&ret->name, weft_plugin.name ? weft_plugin.name : "");
    wstring_dup(&ret->version, weft_plugin.version ? weft_plugin.version : "0.0.0");
    wstring_dup(&ret->description, weft_plugin.description ? weft_plugin.description : "");
    option_json(&ret->input_schema, weft_plugin.input_schema);
    option_json(&ret->output_schema, weft_plugin.output_schema);
}

static void failure(exports_weft_plugin_step_step_error_t *err, weft_error *error) {
    weft_plugin_types_failure_t *f;
    if (error->retryable) {
        err->tag = WEFT_PLUGIN_TYPES_STEP_ERROR_RETRYABLE;
        f = &err->val.retryable;
    } else {
        err->tag = WEFT_PLUGIN_TYPES_STEP_ERROR_FATAL;
        f = &err->val.fatal;
    }
    wstring_dup(&f->code, error->code ? error->code : "error");
    wstring_dup(&f->message, error->message ? error->message : "");
    option_json(&f->details, error->details);
    free(error->code);
    free(error->message);
    free(error->details);
}

bool exports_weft_plugin_step_run(exports_weft_plugin_step_step_context_t *ctx, exports_weft_plugin_step_json_t *input,
                                  exports_weft_plugin_step_json_t *ret, exports_weft_plugin_step_step_error_t *err) {
    char *tenant = owned(&ctx->tenant), *workflow = owned(&ctx->workflow), *run_id = owned(&ctx->run_id),
         *step_id = owned(&ctx->step_id), *key = owned(&ctx->idempotency_key), *text = owned(input);
    weft_context context = {
        .tenant = tenant, .workflow = workflow, .run_id = run_id,
        .step_id = step_id, .attempt = ctx->attempt, .idempotency_key = key,
    };
    exports_weft_plugin_step_step_context_free(ctx);
    exports_weft_plugin_step_json_free(input);
    weft_error error = {0};
    char *output = weft_run(&context, text, &error);
    free(tenant); free(workflow); free(run_id); free(step_id); free(key); free(text);
    if (!output) {
        if (!error.code) error = weft_fatal("no_output", "the step returned neither output nor an error");
        failure(err, &error);
        return false;
    }
    wstring_dup(ret, output);
    free(output);
    return true;
}
