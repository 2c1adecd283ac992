/* `behave-c`: the behaviour test's step in C (see ../README.md). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

const weft_info weft_plugin = {
    .name = "behave-c",
    .version = "1.0.0",
    .description = "The behaviour test's step",
};

static char *fail(weft_error *error, const char *code, char *message) {
    *error = weft_fatal(code, message ? message : "failed");
    free(message);
    return NULL;
}

char *weft_run(const weft_context *ctx, const char *input, weft_error *error) {
    char *op = weft_json_string(input, "op");
    char *out = NULL, *problem = NULL;
    if (!op) return fail(error, "invalid_input", strdup("no `op`"));
    if (strcmp(op, "count") == 0) {
        char *seen = weft_kv_get("count");
        long count = (seen ? strtol(seen, NULL, 10) : 0) + 1;
        free(seen);
        char text[32];
        snprintf(text, sizeof text, "%ld", count);
        if (!weft_kv_set("count", text, &problem)) out = fail(error, "kv", problem);
        else if (asprintf(&out, "{\"count\":%ld}", count) < 0) out = NULL;
    } else if (strcmp(op, "emit") == 0) {
        char *channel = weft_json_string(input, "channel");
        char *run = weft_json_quote(ctx->run_id), *payload = NULL;
        if (asprintf(&payload, "{\"from\":\"c\",\"run\":%s}", run) < 0) payload = NULL;
        char *id = channel && payload ? weft_outbox_emit(channel, payload, &problem) : NULL;
        if (!id) out = fail(error, "emit", problem);
        else if (asprintf(&out, "{\"id\":\"%s\"}", id) < 0) out = NULL;
        free(channel); free(run); free(payload); free(id);
    } else if (strcmp(op, "fetch") == 0) {
        char *url = weft_json_string(input, "url");
        weft_http_response answer;
        if (!url || !weft_http_get(url, &answer, &problem)) {
            *error = weft_retryable("http", problem ? problem : "no url");
            free(problem);
        } else {
            char *body = weft_json_quote(answer.body);
            if (asprintf(&out, "{\"status\":%u,\"body\":%s}", answer.status, body) < 0) out = NULL;
            free(body);
            weft_http_response_free(&answer);
        }
        free(url);
    } else if (strcmp(op, "secret") == 0) {
        char *name = weft_json_string(input, "name");
        char *value = name ? weft_secret_get(name, &problem) : NULL;
        if (!value) {
            out = fail(error, "secret", problem);
        } else {
            char *line = NULL;
            if (asprintf(&line, "the secret is %s", value) >= 0) weft_log("info", line);
            free(line);
            if (asprintf(&out, "{\"length\":%zu}", strlen(value)) < 0) out = NULL;
            free(value);
        }
        free(name);
    } else {
        out = fail(error, "unknown_op", strdup(op));
    }
    free(op);
    return out;
}
