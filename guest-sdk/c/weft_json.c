/*
 * weft's helper for steps written in C: just enough JSON to read a string
 * member and write a string (see weft.h). Free of the bindings, so plain
 * C can test it (test_json.c).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

static const char *skip_space(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* The value of the four hex digits at `p`, or -1. */
static long hex4(const char *p) {
    long code = 0;
    for (int i = 0; i < 4; i++) {
        char h = p[i];
        int digit = h >= '0' && h <= '9' ? h - '0'
                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                  : -1;
        if (digit < 0) return -1; /* also stops at the NUL */
        code = code * 16 + digit;
    }
    return code;
}

/* Appends `code` as UTF-8. */
static size_t utf8(unsigned long code, char *out) {
    if (code < 0x80) { out[0] = (char)code; return 1; }
    if (code < 0x800) {
        out[0] = (char)(0xC0 | (code >> 6)); out[1] = (char)(0x80 | (code & 0x3F)); return 2;
    }
    if (code < 0x10000) {
        out[0] = (char)(0xE0 | (code >> 12)); out[1] = (char)(0x80 | ((code >> 6) & 0x3F));
        out[2] = (char)(0x80 | (code & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (code >> 18)); out[1] = (char)(0x80 | ((code >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((code >> 6) & 0x3F)); out[3] = (char)(0x80 | (code & 0x3F)); return 4;
}

/* Past the JSON string at `p` (at its opening quote); `out`, if given,
 * gets its unescaped text (from malloc). NULL if it is not one. */
static const char *read_string(const char *p, char **out) {
    if (*p != '"') return NULL;
    p++;
    size_t cap = 16, len = 0;
    char *text = NULL;
    if (out && !(text = malloc(cap))) return NULL;
    while (*p && *p != '"') {
        char bytes[4];
        size_t n = 1;
        char c = *p++;
        bytes[0] = c;
        if (c == '\\') {
            char e = *p++;
            switch (e) {
            case 'n': bytes[0] = '\n'; break;
            case 't': bytes[0] = '\t'; break;
            case 'r': bytes[0] = '\r'; break;
            case 'b': bytes[0] = '\b'; break;
            case 'f': bytes[0] = '\f'; break;
            case '"': case '\\': case '/': bytes[0] = e; break;
            case 'u': {
                long code = hex4(p);
                if (code < 0) { free(text); return NULL; }
                p += 4;
                if (code >= 0xD800 && code <= 0xDBFF && p[0] == '\\' && p[1] == 'u') {
                    long low = hex4(p + 2);
                    if (low >= 0xDC00 && low <= 0xDFFF) {
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                        p += 6;
                    }
                }
                if (code >= 0xD800 && code <= 0xDFFF) code = 0xFFFD; /* a lone surrogate */
                n = utf8((unsigned long)code, bytes);
                break;
            }
            default: free(text); return NULL; /* a bad escape, or the end */
            }
        }
        if (!out) continue;
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            char *grown = realloc(text, cap);
            if (!grown) { free(text); return NULL; }
            text = grown;
        }
        memcpy(text + len, bytes, n);
        len += n;
    }
    if (*p != '"') { free(text); return NULL; }
    if (out) { text[len] = '\0'; *out = text; }
    return p + 1;
}

/* Past the JSON value at `p`, or NULL. */
static const char *skip_value(const char *p) {
    p = skip_space(p);
    if (*p == '"') return read_string(p, NULL);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (*p) {
            if (*p == '"') { p = read_string(p, NULL); if (!p) return NULL; continue; }
            if (*p == '{' || *p == '[') depth++;
            if (*p == '}' || *p == ']') { depth--; if (depth == 0) return p + 1; }
            p++;
        }
        return NULL;
    }
    while (*p && *p != ',' && *p != '}' && *p != ']') p++;
    return p;
}

char *weft_json_string(const char *json, const char *key) {
    const char *p = skip_space(json);
    if (*p != '{') return NULL;
    p = skip_space(p + 1);
    while (*p == '"') {
        char *name = NULL;
        p = read_string(p, &name);
        if (!p) return NULL;
        p = skip_space(p);
        if (*p != ':') { free(name); return NULL; }
        p = skip_space(p + 1);
        bool wanted = strcmp(name, key) == 0;
        free(name);
        if (wanted) {
            char *value = NULL;
            return read_string(p, &value) ? value : NULL;
        }
        p = skip_value(p);
        if (!p) return NULL;
        p = skip_space(p);
        if (*p == ',') p = skip_space(p + 1);
    }
    return NULL;
}

char *weft_json_quote(const char *text) {
    size_t cap = strlen(text) * 6 + 3, len = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[len++] = '"';
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '"' || *p == '\\') { out[len++] = '\\'; out[len++] = (char)*p; }
        else if (*p == '\n') { out[len++] = '\\'; out[len++] = 'n'; }
        else if (*p == '\t') { out[len++] = '\\'; out[len++] = 't'; }
        else if (*p == '\r') { out[len++] = '\\'; out[len++] = 'r'; }
        else if (*p < 0x20) len += (size_t)snprintf(out + len, 7, "\\u%04x", *p);
        else out[len++] = (char)*p;
    }
    out[len++] = '"';
    out[len] = '\0';
    return out;
}

