/* `{{name}}`: a weft step in C. Build it with `weft plugin build`, test its
 * logic with `make test`. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include "greet.h"
#include "weft.h"

const weft_info weft_plugin = {
    .name = "{{name}}",
    .version = "0.1.0",
    .description = "A weft step",
    .input_schema = "{\"type\": \"object\", \"required\": [\"name\"],"
                    " \"properties\": {\"name\": {\"type\": \"string\"}}}",
};

char *weft_run(const weft_context *ctx, const char *input, weft_error *error) {
    (void)ctx;
    char *name = weft_json_string(input, "name");
    char *text = name ? greeting(name) : NULL;
    free(name);
    if (!text) {
        *error = weft_fatal("empty_name", "name must not be empty");
        return NULL;
    }
    weft_log("info", text);

    /* Key-value writes commit with the step's result, exactly once. */
    char *seen = weft_kv_get("greetings");
    long greetings = (seen ? strtol(seen, NULL, 10) : 0) + 1;
    free(seen);
    char count[32], *problem = NULL;
    snprintf(count, sizeof count, "%ld", greetings);
    if (!weft_kv_set("greetings", count, &problem)) {
        *error = weft_fatal("kv", problem);
        free(problem);
        free(text);
        return NULL;
    }

    /* HTTP calls go to destinations the workflow grants (`allow: {http:
     * [...]}`); see "Outgoing HTTP" in docs/steps.md. The build imports
     * wasi:http only for a project that makes them. */
    char *quoted = weft_json_quote(text), *output = NULL;
    free(text);
    int made = asprintf(&output, "{\"greeting\":%s,\"greetings\":%ld}", quoted, greetings);
    free(quoted);
    return made < 0 ? NULL : output;
}
