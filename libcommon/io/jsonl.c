/* jsonl.c: one JSON-lines record -> the string values of the requested keys (see jsonl.h). */
#include "io/jsonl.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/utf8.h"

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

/* --- fast path: a validating scanner for the records that need nothing of jansson ------------------ *
 * It accepts only what jansson accepts and decodes strings as it does, and leaves the line to jansson
 * (returns -1) at anything else: a syntax error, invalid UTF-8, a control character in a string, an
 * escape in a key, a \u escape of a lone surrogate, a number that might overflow jansson's int64 or double,
 * nesting deeper than FAST_DEPTH, a top level that is not an object, a requested key missing or not a
 * string. jansson then parses the line as before, with its messages. */
#define FAST_DEPTH 32

typedef struct fast {
    const unsigned char *p, *end;
    mt_buf *out; /* decoded string values of the requested keys, each NUL-terminated */
} fast;

static void fast_ws(fast *f)
{
    while (f->p < f->end && (*f->p == ' ' || *f->p == '\t' || *f->p == '\n' || *f->p == '\r')) f->p++;
}

/* The string after its opening quote; decoded to f->out when keep (escapes allowed), else only checked
 * (escapes allowed when esc_ok). 0, or -1. */
static int fast_string(fast *f, bool keep, bool esc_ok)
{
    const unsigned char *p = f->p, *end = f->end, *run = p;
    for (;;) {
        /* 8 bytes at a time while none is a quote, a backslash, a control character or non-ASCII */
        const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
        while (end - p >= 8) {
            uint64_t v, q, b;
            memcpy(&v, p, 8);
            q = v ^ (ones * '"');
            b = v ^ (ones * '\\');
            if ((v | ((v - ones * 0x20) & ~v) | ((q - ones) & ~q) | ((b - ones) & ~b)) & highs) break;
            p += 8;
        }
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
        if (p >= end || *p < 0x20) return -1;
        if (*p >= 0x80) {
            uint32_t cp;
            int n = mt_utf8_decode(p, (size_t)(end - p), &cp);
            if (n < 2) return -1;
            p += n;
            continue;
        }
        if (keep) mt_buf_append(f->out, (const char *)run, (size_t)(p - run));
        if (*p == '"') {
            f->p = p + 1;
            if (keep) mt_buf_putc(f->out, 0);
            return 0;
        }
        /* an escape */
        if (!esc_ok || p + 1 >= end) return -1;
        char c;
        switch (p[1]) {
        case '"': c = '"'; break;
        case '\\': c = '\\'; break;
        case '/': c = '/'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
            long u = escape_at((const char *)p, (size_t)(end - p), 0), lo = -1;
            if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return -1;
            if (u >= 0xD800 && u <= 0xDBFF) { /* a pair, or left to jansson and the repair */
                lo = escape_at((const char *)p, (size_t)(end - p), 6);
                if (lo < 0xDC00 || lo > 0xDFFF) return -1;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (keep) {
                unsigned char b[4];
                size_t n = 0;
                if (u < 0x80) {
                    b[n++] = (unsigned char)u;
                } else if (u < 0x800) {
                    b[n++] = (unsigned char)(0xC0 | u >> 6);
                } else if (u < 0x10000) {
                    b[n++] = (unsigned char)(0xE0 | u >> 12);
                    b[n++] = (unsigned char)(0x80 | (u >> 6 & 0x3F));
                } else {
                    b[n++] = (unsigned char)(0xF0 | u >> 18);
                    b[n++] = (unsigned char)(0x80 | (u >> 12 & 0x3F));
                    b[n++] = (unsigned char)(0x80 | (u >> 6 & 0x3F));
                }
                if (u >= 0x80) b[n++] = (unsigned char)(0x80 | (u & 0x3F));
                mt_buf_append(f->out, (const char *)b, n);
            }
            p += lo >= 0 ? 12 : 6;
            run = p;
            continue;
        }
        default: return -1;
        }
        if (keep) mt_buf_putc(f->out, c);
        p += 2;
        run = p;
    }
}

/* A number as JSON writes it, short enough that jansson can neither overflow an int64 nor a double. */
static int fast_number(fast *f)
{
    const unsigned char *p = f->p, *end = f->end, *start;
    if (p < end && *p == '-') p++;
    start = p;
    if (p < end && *p == '0') p++;
    else if (p < end && *p >= '1' && *p <= '9')
        while (p < end && *p >= '0' && *p <= '9') p++;
    else return -1;
    int digits = (int)(p - start);
    if (p < end && *p == '.') {
        const unsigned char *d = ++p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == d) return -1;
        digits += (int)(p - d);
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const unsigned char *d = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == d || p - d > 2) return -1;
    }
    if (digits > 18) return -1;
    f->p = p;
    return 0;
}

static int fast_value(fast *f, int depth);

/* An object after its '{'; at depth 0 the values of keys[] are decoded, off[k] (or SIZE_MAX when the
 * last value of the key is not a string) set for each key seen. */
static int fast_object(fast *f, int depth, const char *const *keys, int n_keys, size_t *off, size_t *len)
{
    fast_ws(f);
    if (f->p < f->end && *f->p == '}') {
        f->p++;
        return 0;
    }
    for (;;) {
        if (f->p >= f->end || *f->p != '"') return -1;
        const unsigned char *k0 = ++f->p;
        if (fast_string(f, false, false)) return -1;
        size_t klen = (size_t)(f->p - 1 - k0);
        fast_ws(f);
        if (f->p >= f->end || *f->p != ':') return -1;
        f->p++;
        fast_ws(f);
        int want = -1;
        for (int k = 0; depth == 0 && k < n_keys; k++)
            if (strlen(keys[k]) == klen && !memcmp(keys[k], k0, klen)) want = k;
        if (want >= 0 && f->p < f->end && *f->p == '"') {
            size_t o = f->out->n;
            f->p++;
            if (fast_string(f, true, true)) return -1;
            off[want] = o;
            len[want] = f->out->n - o - 1;
        } else {
            if (want >= 0) off[want] = SIZE_MAX;
            if (fast_value(f, depth + 1)) return -1;
        }
        fast_ws(f);
        if (f->p >= f->end) return -1;
        if (*f->p == '}') {
            f->p++;
            return 0;
        }
        if (*f->p != ',') return -1;
        f->p++;
        fast_ws(f);
    }
}

static int fast_value(fast *f, int depth)
{
    if (depth > FAST_DEPTH || f->p >= f->end) return -1;
    const unsigned char *p = f->p;
    size_t left = (size_t)(f->end - p);
    switch (*p) {
    case '"':
        f->p++;
        return fast_string(f, false, true);
    case '{': f->p++; return fast_object(f, depth, NULL, 0, NULL, NULL);
    case '[':
        f->p++;
        fast_ws(f);
        if (f->p < f->end && *f->p == ']') {
            f->p++;
            return 0;
        }
        for (;;) {
            if (fast_value(f, depth + 1)) return -1;
            fast_ws(f);
            if (f->p >= f->end) return -1;
            if (*f->p == ']') {
                f->p++;
                return 0;
            }
            if (*f->p != ',') return -1;
            f->p++;
            fast_ws(f);
        }
    case 't': f->p += 4; return left >= 4 && !memcmp(p, "true", 4) ? 0 : -1;
    case 'f': f->p += 5; return left >= 5 && !memcmp(p, "false", 5) ? 0 : -1;
    case 'n': f->p += 4; return left >= 4 && !memcmp(p, "null", 4) ? 0 : -1;
    default: return fast_number(f);
    }
}

/* The whole record by the fast path: 0 with fields set, or -1 to leave it to jansson. */
static int fast_extract(mt_jsonl *st, const char *line, size_t len, const char *const *keys, int n_keys,
                        mt_jsonl_field *fields)
{
    enum { MAX_FAST_KEYS = 16 };
    size_t off[MAX_FAST_KEYS], vlen[MAX_FAST_KEYS];
    if (n_keys > MAX_FAST_KEYS) return -1;
    for (int k = 0; k < n_keys; k++) off[k] = SIZE_MAX - 1; /* not seen */
    st->values.n = 0;
    fast f = {(const unsigned char *)line, (const unsigned char *)line + len, &st->values};
    fast_ws(&f);
    if (f.p >= f.end || *f.p != '{') return -1;
    f.p++;
    if (fast_object(&f, 0, keys, n_keys, off, vlen)) return -1;
    fast_ws(&f);
    if (f.p != f.end) return -1;
    for (int k = 0; k < n_keys; k++)
        if (off[k] >= SIZE_MAX - 1) return -1;
    for (int k = 0; k < n_keys; k++) {
        fields[k].text = st->values.p + off[k];
        fields[k].len = vlen[k];
    }
    return 0;
}

int mt_jsonl_extract(mt_jsonl *st, const char *line, size_t len, const char *const *keys, int n_keys,
                     mt_jsonl_field *fields, mt_err *e)
{
    if (st->doc) {
        json_decref(st->doc);
        st->doc = NULL;
    }
    if (!fast_extract(st, line, len, keys, n_keys, fields)) return 0;
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
    mt_buf_free(&st->values);
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
