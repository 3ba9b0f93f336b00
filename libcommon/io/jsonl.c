/* jsonl.c: one JSON-lines record -> the string values of the requested keys (see jsonl.h). */
#include "io/jsonl.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Code unit of a "\uXXXX" escape starting at s[i] (s[i] == '\\'), or -1. */
static long escape_at(const char *s, size_t len, size_t i)
{
    if (i + 6 > len || s[i] != '\\' || s[i + 1] != 'u') return -1;
    long v = 0;
    for (int k = 2; k < 6; k++) {
        int h = hexval(s[i + k]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Copies line to out, replacing \u escapes of unpaired surrogates by \uFFFD. Returns replacements. */
static int repair_surrogates(const char *s, size_t len, mt_buf *out)
{
    int fixed = 0;
    out->n = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!in_str) {
            if (c == '"') in_str = true;
            mt_buf_putc(out, c);
            continue;
        }
        if (c == '"') {
            in_str = false;
            mt_buf_putc(out, c);
            continue;
        }
        if (c != '\\' || i + 1 >= len) {
            mt_buf_putc(out, c);
            continue;
        }
        long u = escape_at(s, len, i);
        if (u < 0) { /* another escape: copy both characters */
            mt_buf_append(out, s + i, 2);
            i++;
            continue;
        }
        if (u >= 0xD800 && u <= 0xDBFF) {
            long lo = escape_at(s, len, i + 6);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                mt_buf_append(out, s + i, 12);
                i += 11;
                continue;
            }
        }
        if (u >= 0xD800 && u <= 0xDFFF) {
            mt_buf_append(out, "\\uFFFD", 6);
            fixed++;
        } else {
            mt_buf_append(out, s + i, 6);
        }
        i += 5;
    }
    return fixed;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

bool mt_jsonl_blank(const char *line, size_t len)
{
    for (size_t k = 0; k < len; k++)
        if (line[k] != ' ' && line[k] != '\t' && line[k] != '\r') return false;
    return true;
}

int mt_jsonl_extract(mt_jsonl *st, const char *line, size_t len, const char *const *keys, int n_keys,
                     mt_jsonl_field *fields, mt_err *e)
{
    if (st->doc) {
        json_decref(st->doc);
        st->doc = NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(line, len, JSON_ALLOW_NUL, &je);
    if (!j && strstr(je.text, "invalid Unicode '\\u") && repair_surrogates(line, len, &st->repair) > 0)
        j = json_loadb(st->repair.p, st->repair.n, JSON_ALLOW_NUL, &je);
    if (!j) return mt_err_set(e, "column %d: malformed JSON: %s", je.column, je.text);
    st->doc = j;
    if (!json_is_object(j)) return mt_err_set(e, "expected a JSON object, found %s", type_name(j));
    for (int k = 0; k < n_keys; k++) {
        json_t *v = json_object_get(j, keys[k]);
        if (!v) return mt_err_set(e, "missing key '%s'", keys[k]);
        if (!json_is_string(v)) return mt_err_set(e, "key '%s' is %s, expected a string", keys[k], type_name(v));
        fields[k].text = json_string_value(v);
        fields[k].len = json_string_length(v);
    }
    return 0;
}

void mt_jsonl_free(mt_jsonl *st)
{
    if (st->doc) json_decref(st->doc);
    st->doc = NULL;
    mt_buf_free(&st->repair);
}

void mt_json_quote(mt_buf *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    mt_buf_reserve(out, n + 2);
    mt_buf_putc(out, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': mt_buf_append(out, "\\\"", 2); break;
        case '\\': mt_buf_append(out, "\\\\", 2); break;
        case '\n': mt_buf_append(out, "\\n", 2); break;
        case '\r': mt_buf_append(out, "\\r", 2); break;
        case '\t': mt_buf_append(out, "\\t", 2); break;
        default:
            if (c < 0x20) {
                char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
                mt_buf_append(out, u, 6);
            } else {
                mt_buf_putc(out, (char)c);
            }
        }
    }
    mt_buf_putc(out, '"');
}
