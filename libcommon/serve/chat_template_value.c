/* chat_template_value.c: the values of a rendering (chat_template_tree.h's ct_ functions): Python's
 * rules for truth, equality and order, str() and repr(), transformers' tojson, and strings as code points
 * (case, strip). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "serve/chat_template_tree.h"

const char *ct_type_name(const json_t *v)
{
    if (!v) return "undefined";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "dict";
    case JSON_ARRAY: return "list";
    case JSON_STRING: return "str";
    case JSON_INTEGER: return "int";
    case JSON_REAL: return "float";
    case JSON_TRUE:
    case JSON_FALSE: return "bool";
    default: return "NoneType";
    }
}

int ct_truthy(const json_t *v)
{
    if (!v) return 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: return json_object_size(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return 1;
    default: return 0;
    }
}

int ct_is_num(const json_t *v)
{
    return v && (json_is_number(v) || json_is_boolean(v));
}

int ct_is_int(const json_t *v)
{
    return v && (json_is_integer(v) || json_is_boolean(v));
}

long long ct_int_of(const json_t *v)
{
    return json_is_integer(v) ? json_integer_value(v) : json_is_true(v);
}

double ct_num_of(const json_t *v)
{
    return json_is_real(v) ? json_real_value(v) : (double)ct_int_of(v);
}

json_t *ct_str(const char *s, size_t n)
{
    return json_stringn_nocheck(s ? s : "", n);
}

/* ---- printing: Python's ct_str() and repr() ---- */

static void put(mt_buf *b, const char *s)
{
    mt_buf_append(b, s, strlen(s));
}

static void put_float(mt_buf *b, double x)
{
    char s[40];
    if (isnan(x)) snprintf(s, sizeof s, "nan");
    else if (isinf(x)) snprintf(s, sizeof s, x < 0 ? "-inf" : "inf");
    else {
        for (int p = 1; p <= 17; p++) {   /* the shortest that reads back, as Python's repr */
            snprintf(s, sizeof s, "%.*g", p, x);
            if (strtod(s, NULL) == x) break;
        }
        if (!strpbrk(s, ".e")) strcat(s, ".0");
    }
    put(b, s);
}

static void repr(mt_buf *b, const json_t *v);

void ct_str_of(mt_buf *b, const json_t *v)
{
    if (!v) return;
    char s[32];
    switch (json_typeof(v)) {
    case JSON_STRING: mt_buf_append(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER: snprintf(s, sizeof s, "%lld", (long long)json_integer_value(v)); put(b, s); break;
    case JSON_REAL: put_float(b, json_real_value(v)); break;
    case JSON_TRUE: put(b, "True"); break;
    case JSON_FALSE: put(b, "False"); break;
    case JSON_NULL: put(b, "None"); break;
    default: repr(b, v);
    }
}

static void repr_str(mt_buf *b, const char *s, size_t n)
{
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    mt_buf_putc(b, q);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char x[8];
        if (c == '\\' || c == (unsigned char)q) mt_buf_putc(b, '\\'), mt_buf_putc(b, (char)c);
        else if (c == '\n') put(b, "\\n");
        else if (c == '\r') put(b, "\\r");
        else if (c == '\t') put(b, "\\t");
        else if (c < 0x20 || c == 0x7f) snprintf(x, sizeof x, "\\x%02x", c), put(b, x);
        else mt_buf_putc(b, (char)c);
    }
    mt_buf_putc(b, q);
}

static void repr(mt_buf *b, const json_t *v)
{
    if (v && json_is_string(v)) {
        repr_str(b, json_string_value(v), json_string_length(v));
    } else if (v && json_is_array(v)) {
        mt_buf_putc(b, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) put(b, ", ");
            repr(b, json_array_get(v, i));
        }
        mt_buf_putc(b, ']');
    } else if (v && json_is_object(v)) {
        const char *k;
        json_t *x;
        int first = 1;
        mt_buf_putc(b, '{');
        json_object_foreach((json_t *)v, k, x) {
            if (!first) put(b, ", ");
            first = 0;
            repr_str(b, k, strlen(k));
            put(b, ": ");
            repr(b, x);
        }
        mt_buf_putc(b, '}');
    } else {
        ct_str_of(b, v);
    }
}

/* transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent) */
int ct_tojson(mt_buf *b, const json_t *v, int indent, int depth)
{
    if (!v) return -1;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        mt_buf_putc(b, '"');
        for (size_t i = 0; i < json_string_length(v); i++) {
            unsigned char c = (unsigned char)s[i];
            char x[8];
            if (c == '"' || c == '\\') mt_buf_putc(b, '\\'), mt_buf_putc(b, (char)c);
            else if (c == '\n') put(b, "\\n");
            else if (c == '\r') put(b, "\\r");
            else if (c == '\t') put(b, "\\t");
            else if (c == '\b') put(b, "\\b");
            else if (c == '\f') put(b, "\\f");
            else if (c < 0x20) snprintf(x, sizeof x, "\\u%04x", c), put(b, x);
            else mt_buf_putc(b, (char)c);
        }
        mt_buf_putc(b, '"');
        return 0;
    }
    if (json_is_true(v) || json_is_false(v) || json_is_null(v)) {
        put(b, json_is_true(v) ? "true" : json_is_false(v) ? "false" : "null");
        return 0;
    }
    if (json_is_number(v)) {
        ct_str_of(b, v);
        return 0;
    }
    size_t n = json_is_array(v) ? json_array_size(v) : json_object_size(v);
    mt_buf_putc(b, json_is_array(v) ? '[' : '{');
    const char *k;
    json_t *x;
    size_t i = 0;
    void *it = json_is_object(v) ? json_object_iter((json_t *)v) : NULL;
    for (i = 0; i < n; i++) {
        if (i) put(b, indent >= 0 ? "," : ", ");
        if (indent >= 0) {
            mt_buf_putc(b, '\n');
            for (int s = 0; s < indent * (depth + 1); s++) mt_buf_putc(b, ' ');
        }
        if (json_is_array(v)) {
            x = json_array_get(v, i);
        } else {
            k = json_object_iter_key(it);
            x = json_object_iter_value(it);
            it = json_object_iter_next((json_t *)v, it);
            json_t *key = json_string(k);
            ct_tojson(b, key, indent, depth + 1);
            json_decref(key);
            put(b, ": ");
        }
        if (ct_tojson(b, x, indent, depth + 1)) return -1;
    }
    if (indent >= 0 && n) {
        mt_buf_putc(b, '\n');
        for (int s = 0; s < indent * depth; s++) mt_buf_putc(b, ' ');
    }
    mt_buf_putc(b, json_is_array(v) ? ']' : '}');
    return 0;
}

/* ---- strings as code points ---- */

/* The byte offsets of s's characters, and n (the count) at [n]. */
size_t *ct_chars_of(const char *s, size_t len, size_t *n)
{
    size_t *o = mt_xmalloc((len + 1) * sizeof *o), k = 0;
    for (size_t i = 0; i < len; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) o[k++] = i;
    o[k] = len;
    *n = k;
    return o;
}

size_t ct_n_chars(const json_t *s)
{
    size_t k = 0;
    const char *p = json_string_value(s);
    for (size_t i = 0; i < json_string_length(s); i++) k += ((unsigned char)p[i] & 0xC0) != 0x80;
    return k;
}

static int is_ws_cp(int32_t c)
{
    return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 ||
           utf8proc_category(c) == UTF8PROC_CATEGORY_ZS || c == 0x2028 || c == 0x2029;
}

static int is_cased(int32_t c)
{
    return utf8proc_toupper(c) != c || utf8proc_tolower(c) != c;
}

/* upper(), lower(), Python's title() and capitalize(), Jinja2's title filter (words split at whitespace,
 * '-' and opening brackets) */
json_t *ct_recase(const json_t *v, int how)
{
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    mt_buf b = {0};
    int prev_cased = 0, word_start = 1;
    for (size_t i = 0; i < len;) {
        int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &c);
        if (k <= 0) break;
        i += (size_t)k;
        int32_t r = c;
        switch (how) {
        case CT_CASE_UPPER: r = utf8proc_toupper(c); break;
        case CT_CASE_LOWER: r = utf8proc_tolower(c); break;
        case CT_CASE_TITLE: r = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c); prev_cased = is_cased(c); break;
        case CT_CASE_CAPITALIZE: r = i == (size_t)k ? utf8proc_totitle(c) : utf8proc_tolower(c); break;
        default: {
            int sep = is_ws_cp(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
            r = word_start && !sep ? utf8proc_totitle(c) : word_start ? c : utf8proc_tolower(c);
            if (sep && !word_start) r = c;
            word_start = sep;
        }
        }
        utf8proc_uint8_t u[4];
        utf8proc_ssize_t m = utf8proc_encode_char(r, u);
        mt_buf_append(&b, u, (size_t)m);
    }
    json_t *out = ct_str(b.p, b.n);
    free(b.p);
    return out;
}

/* strip / lstrip / rstrip: chars NULL strips whitespace */
json_t *ct_strip(const json_t *v, const json_t *chars, int left, int right)
{
    const char *s = json_string_value(v);
    size_t n, *o = ct_chars_of(s, json_string_length(v), &n), a = 0, z = n;
    size_t cn = 0, *co = chars ? ct_chars_of(json_string_value(chars), json_string_length(chars), &cn) : NULL;
    for (int side = 0; side < 2; side++) {
        if (!(side ? right : left)) continue;
        while (a < z) {
            size_t i = side ? z - 1 : a;
            int32_t c;
            utf8proc_iterate((const utf8proc_uint8_t *)s + o[i], (utf8proc_ssize_t)(o[i + 1] - o[i]), &c);
            int hit = 0;
            if (!chars) hit = is_ws_cp(c);
            for (size_t j = 0; chars && j < cn && !hit; j++)
                hit = co[j + 1] - co[j] == o[i + 1] - o[i] &&
                      !memcmp(json_string_value(chars) + co[j], s + o[i], o[i + 1] - o[i]);
            if (!hit) break;
            if (side) z--;
            else a++;
        }
    }
    json_t *r = ct_str(s + o[a], o[z] - o[a]);
    free(o);
    free(co);
    return r;
}

int ct_py_eq(const json_t *a, const json_t *b)
{
    if (!a || !b) return !a && !b;
    if (ct_is_num(a) && ct_is_num(b)) {
        if (ct_is_int(a) && ct_is_int(b)) return ct_int_of(a) == ct_int_of(b);
        return ct_num_of(a) == ct_num_of(b);
    }
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!ct_py_eq(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

/* a < b (-1 when they cannot be ordered) */
int ct_py_lt(const json_t *a, const json_t *b)
{
    if (ct_is_num(a) && ct_is_num(b)) return ct_is_int(a) && ct_is_int(b) ? ct_int_of(a) < ct_int_of(b) : ct_num_of(a) < ct_num_of(b);
    if (a && b && json_is_string(a) && json_is_string(b)) {
        size_t la = json_string_length(a), lb = json_string_length(b);
        int r = memcmp(json_string_value(a), json_string_value(b), la < lb ? la : lb);
        return r < 0 || (r == 0 && la < lb);
    }
    return -1;
}
