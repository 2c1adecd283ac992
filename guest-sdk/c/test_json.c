/* The C helper's JSON reading and writing, on good and hostile input:
 * `cc -I. -o test_json test_json.c weft_json.c && ./test_json`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <assert.h>
#include "weft.h"
int main(void) {
  char *v = weft_json_string("{\"a\": 1, \"b\": {\"x\": \"}\"}, \"op\": \"co\\u00e9\\ud83d\\ude00\\n\"}", "op");
  assert(v && strcmp(v, "co\xc3\xa9\xf0\x9f\x98\x80\n") == 0); free(v);
  assert(weft_json_string("{\"op\": \"\\u1", "op") == NULL);
  assert(weft_json_string("{\"op\": \"abc", "op") == NULL);
  assert(weft_json_string("{\"op\": 3}", "op") == NULL);
  v = weft_json_string("{\"op\": \"a\\\\b\\\"c\"}", "op"); assert(v && strcmp(v, "a\\b\"c") == 0); free(v);
  char *q = weft_json_quote("a\"b\\\n\x01"); assert(strcmp(q, "\"a\\\"b\\\\\\n\\u0001\"") == 0); free(q);
  puts("OK");
}
