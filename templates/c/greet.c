#define _GNU_SOURCE
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "greet.h"

char *greeting(const char *name) {
    const char *p = name;
    while (*p && isspace((unsigned char)*p)) p++;
    if (!*p) return NULL;
    char *text = NULL;
    return asprintf(&text, "Hello, %s!", name) < 0 ? NULL : text;
}
