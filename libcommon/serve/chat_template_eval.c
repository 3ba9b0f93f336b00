/* chat_template_eval.c: rendering a parsed chat template (chat_template.h) for one request's messages:
 * variables and their scopes, expressions (operators, subscripts, slices), the filters, tests, functions
 * and methods of the subset, and the statements. Values are jansson values (NULL: Jinja2's undefined)
 * with Python's rules (chat_template_value.c); the tree is only read, so threads render one template at
 * once. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/chat_template.h"
#include "serve/chat_template_tree.h"

/* Work of one rendering at most: loop iterations and output bytes. */
#define MAX_STEPS 10000000LL
#define MAX_OUT (16u << 20)

typedef struct ctx {
    json_t **frames;     /* variables, innermost last */
    int n_frames, cap;
    json_t *spaces;      /* the namespace() objects (only they take "set ns.attr") */
    mt_buf *out;
    mt_err *e;
    bool *raised;
    long long steps;
    int failed;
    int jump;            /* 1: break, 2: continue */
} ctx;

static json_t *fail(ctx *c, const ct_node *n, const char *fmt, ...) MT_PRINTF(3, 4);
static json_t *fail(ctx *c, const ct_node *n, const char *fmt, ...)
{
    if (c->failed) return NULL;
    c->failed = 1;
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mt_err_set(c->e, "chat template line %d: %s", n->line, msg);
    return NULL;
}

static void drop(json_t *v)
{
    if (v) json_decref(v);
}

/* ---- variables ---- */

static json_t *lookup(ctx *c, const char *name)
{
    for (int i = c->n_frames - 1; i >= 0; i--) {
        json_t *v = json_object_get(c->frames[i], name);
        if (v) return json_incref(v);
    }
    return NULL;
}

static void push_frame(ctx *c)
{
    if (c->n_frames == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 8;
        c->frames = mt_xrealloc(c->frames, (size_t)c->cap * sizeof *c->frames);
    }
    c->frames[c->n_frames++] = json_object();
}

static void pop_frame(ctx *c)
{
    json_decref(c->frames[--c->n_frames]);
}

static int is_space(ctx *c, const json_t *v)
{
    for (size_t i = 0; v && i < json_array_size(c->spaces); i++)
        if (json_array_get(c->spaces, i) == v) return 1;
    return 0;
}

/* ---- expressions ---- */

static json_t *eval(ctx *c, const ct_node *n);

static json_t *contains(ctx *c, const ct_node *n, const json_t *x, const json_t *in)
{
    if (!in) return json_false();
    if (json_is_string(in)) {
        if (!x || !json_is_string(x))
            return fail(c, n, "'in <string>' requires a string on the left, not %s", ct_type_name(x));
        const char *h = json_string_value(in), *nd = json_string_value(x);
        size_t hn = json_string_length(in), nn = json_string_length(x);
        for (size_t i = 0; i + nn <= hn; i++)
            if (!memcmp(h + i, nd, nn)) return json_true();
        return json_false();
    }
    if (json_is_array(in)) {
        for (size_t i = 0; i < json_array_size(in); i++)
            if (ct_py_eq(x, json_array_get(in, i))) return json_true();
        return json_false();
    }
    if (json_is_object(in))
        return json_boolean(x && json_is_string(x) && json_object_get(in, json_string_value(x)));
    return fail(c, n, "'in' needs a string, a list or a dict on the right, not %s", ct_type_name(in));
}

static long long py_floordiv(long long a, long long b)
{
    long long q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static json_t *repeat(ctx *c, const ct_node *n, const json_t *s, long long k)
{
    size_t unit = json_is_string(s) ? json_string_length(s) : json_array_size(s);
    if (k > 0 && unit * (size_t)k > MAX_OUT) return fail(c, n, "a repetition of more than %u items", MAX_OUT);
    if (json_is_string(s)) {
        mt_buf b = {0};
        for (long long i = 0; i < k; i++) mt_buf_append(&b, json_string_value(s), unit);
        json_t *r = ct_str(b.p, b.n);
        free(b.p);
        return r;
    }
    json_t *r = json_array();
    for (long long i = 0; i < k; i++) json_array_extend(r, (json_t *)s);
    return r;
}

/* str(a) + str(b): ~, and + of two strings */
static json_t *concat(const json_t *a, const json_t *b)
{
    mt_buf s = {0};
    ct_str_of(&s, a);
    ct_str_of(&s, b);
    json_t *r = ct_str(s.p, s.n);
    free(s.p);
    return r;
}

static json_t *binary(ctx *c, const ct_node *n, const json_t *a, const json_t *b)
{
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=",
                                        "in", "not in"};
    switch (n->op) {
    case OP_EQ: return json_boolean(ct_py_eq(a, b));
    case OP_NE: return json_boolean(!ct_py_eq(a, b));
    case OP_LT:
    case OP_GT:
    case OP_LE:
    case OP_GE: {
        int lt = n->op == OP_LT || n->op == OP_GE ? ct_py_lt(a, b) : ct_py_lt(b, a);
        if (lt < 0) break;
        return json_boolean(n->op == OP_LT || n->op == OP_GT ? lt : !lt);
    }
    case OP_IN: return contains(c, n, a, b);
    case OP_NOTIN: {
        json_t *r = contains(c, n, a, b);
        return r ? json_boolean(!json_is_true(r)) : NULL;
    }
    case OP_CONCAT: return concat(a, b);
    case OP_ADD:
        if (a && b && json_is_string(a) && json_is_string(b)) return concat(a, b);
        if (a && b && json_is_array(a) && json_is_array(b)) {
            json_t *r = json_copy((json_t *)a);
            json_array_extend(r, (json_t *)b);
            return r;
        }
        /* fall through */
    default:
        if (n->op == OP_MUL && a && b && (json_is_string(a) || json_is_array(a)) && ct_is_int(b)) return repeat(c, n, a, ct_int_of(b));
        if (n->op == OP_MUL && a && b && (json_is_string(b) || json_is_array(b)) && ct_is_int(a)) return repeat(c, n, b, ct_int_of(a));
        if (!ct_is_num(a) || !ct_is_num(b)) break;
        if (n->op == OP_DIV) {
            if (ct_num_of(b) == 0) return fail(c, n, "division by zero");
            return json_real(ct_num_of(a) / ct_num_of(b));
        }
        if (ct_is_int(a) && ct_is_int(b)) {
            long long x = ct_int_of(a), y = ct_int_of(b);
            if ((n->op == OP_FLOORDIV || n->op == OP_MOD) && !y) return fail(c, n, "division by zero");
            switch (n->op) {
            case OP_ADD: return json_integer(x + y);
            case OP_SUB: return json_integer(x - y);
            case OP_MUL: return json_integer(x * y);
            case OP_FLOORDIV: return json_integer(py_floordiv(x, y));
            default: return json_integer(x - py_floordiv(x, y) * y);
            }
        }
        double x = ct_num_of(a), y = ct_num_of(b);
        if ((n->op == OP_FLOORDIV || n->op == OP_MOD) && !y) return fail(c, n, "division by zero");
        switch (n->op) {
        case OP_ADD: return json_real(x + y);
        case OP_SUB: return json_real(x - y);
        case OP_MUL: return json_real(x * y);
        case OP_FLOORDIV: return json_real(floor(x / y));
        default: return json_real(x - floor(x / y) * y);
        }
    }
    return fail(c, n, "'%s' is not supported between %s and %s", names[n->op], ct_type_name(a), ct_type_name(b));
}

/* Python's indices of a slice [start:stop:step] of a sequence of len items, into idx (count returned). */
static long long slice_indices(const json_t *js, const json_t *jz, long long step, long long len, long long **idx)
{
    long long start, stop;
    if (!js || json_is_null(js)) start = step < 0 ? len - 1 : 0;
    else {
        start = ct_int_of(js);
        if (start < 0) start = start + len < 0 ? (step < 0 ? -1 : 0) : start + len;
        else if (start >= len) start = step < 0 ? len - 1 : len;
    }
    if (!jz || json_is_null(jz)) stop = step < 0 ? -1 : len;
    else {
        stop = ct_int_of(jz);
        if (stop < 0) stop = stop + len < 0 ? (step < 0 ? -1 : 0) : stop + len;
        else if (stop >= len) stop = step < 0 ? len - 1 : len;
    }
    long long k = 0;
    *idx = mt_xmalloc((size_t)(len + 1) * sizeof **idx);
    for (long long i = start; step > 0 ? i < stop : i > stop; i += step) (*idx)[k++] = i;
    return k;
}

static json_t *slice(ctx *c, const ct_node *n, const json_t *v, const json_t *a, const json_t *b, const json_t *s)
{
    for (const json_t *x = a; x; x = x == a ? b : x == b ? s : NULL)
        if (!json_is_null(x) && !ct_is_int(x)) return fail(c, n, "slice indices must be integers, not %s", ct_type_name(x));
    long long step = s && !json_is_null(s) ? ct_int_of(s) : 1, *idx;
    if (!step) return fail(c, n, "a slice step of zero");
    if (!v || (!json_is_string(v) && !json_is_array(v))) return fail(c, n, "cannot slice %s", ct_type_name(v));
    if (json_is_array(v)) {
        long long k = slice_indices(a, b, step, (long long)json_array_size(v), &idx);
        json_t *r = json_array();
        for (long long i = 0; i < k; i++) json_array_append(r, json_array_get(v, (size_t)idx[i]));
        free(idx);
        return r;
    }
    size_t nc, *o = ct_chars_of(json_string_value(v), json_string_length(v), &nc);
    long long k = slice_indices(a, b, step, (long long)nc, &idx);
    mt_buf buf = {0};
    for (long long i = 0; i < k; i++)
        mt_buf_append(&buf, json_string_value(v) + o[idx[i]], o[idx[i] + 1] - o[idx[i]]);
    json_t *r = ct_str(buf.p, buf.n);
    free(buf.p);
    free(idx);
    free(o);
    return r;
}

/* v[k]: a missing key or index is undefined */
static json_t *item(ctx *c, const ct_node *n, const json_t *v, const json_t *k)
{
    if (!v) return fail(c, n, "cannot take an item of an undefined value");
    if (json_is_object(v)) return k && json_is_string(k) ? json_incref(json_object_get(v, json_string_value(k))) : NULL;
    if (!k || !ct_is_int(k) || json_is_boolean(k)) return NULL;
    long long i = ct_int_of(k);
    if (json_is_array(v)) {
        long long len = (long long)json_array_size(v);
        if (i < 0) i += len;
        return i >= 0 && i < len ? json_incref(json_array_get(v, (size_t)i)) : NULL;
    }
    if (json_is_string(v)) {
        size_t nc, *o = ct_chars_of(json_string_value(v), json_string_length(v), &nc);
        if (i < 0) i += (long long)nc;
        json_t *r = i >= 0 && i < (long long)nc ? ct_str(json_string_value(v) + o[i], o[i + 1] - o[i]) : NULL;
        free(o);
        return r;
    }
    return NULL;
}

/* The arguments of a call, filter or test: positional ones in pos[0..], keywords by name in kw. */
typedef struct call_args {
    json_t *pos[4];
    int n_pos;
    json_t *kw;
} call_args;

static void free_args(call_args *a);

/* 0, or -1 (c failed) with nothing left in a */
static int get_args(ctx *c, const ct_node *n, call_args *a)
{
    memset(a, 0, sizeof *a);
    a->kw = json_object();
    for (int i = 0; i < n->n_kids; i++) {
        json_t *v = eval(c, n->kids[i]);
        if (c->failed) {
            free_args(a);
            return -1;
        }
        if (n->names[i]) {
            /* an undefined keyword argument is kept apart from none (arg() gives NULL for it) */
            json_object_set_new(a->kw, n->names[i], v ? v : json_string("\x01undefined"));
        } else if (a->n_pos == 4) {
            drop(v);
            free_args(a);
            fail(c, n, "too many arguments");
            return -1;
        } else {
            a->pos[a->n_pos++] = v;
        }
    }
    return 0;
}

static void free_args(call_args *a)
{
    for (int i = 0; i < a->n_pos; i++) drop(a->pos[i]);
    json_decref(a->kw);
}

/* Argument i (positional) or name (keyword); NULL when absent */
static json_t *arg(const call_args *a, int i, const char *name)
{
    if (i < a->n_pos) return a->pos[i];
    json_t *v = name ? json_object_get(a->kw, name) : NULL;
    if (v && json_is_string(v) && !strcmp(json_string_value(v), "\x01undefined")) return NULL;
    return v;
}

static int check_args(ctx *c, const ct_node *n, const call_args *a, const char *what, int max_pos,
                      const char *const *kws)
{
    if (a->n_pos > max_pos) {
        fail(c, n, "%s takes at most %d argument%s", what, max_pos, max_pos == 1 ? "" : "s");
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach(a->kw, k, v) {
        int ok = 0;
        for (int i = 0; kws && kws[i]; i++) ok |= !strcmp(kws[i], k);
        if (!ok) {
            fail(c, n, "%s has no argument '%s'", what, k);
            return -1;
        }
    }
    return 0;
}

static int need_str(ctx *c, const ct_node *n, const json_t *v, const char *what)
{
    if (v && json_is_string(v)) return 0;
    fail(c, n, "%s needs a string, not %s", what, ct_type_name(v));
    return -1;
}

static json_t *split(ctx *c, const ct_node *n, const json_t *s, const json_t *sep, long long max)
{
    json_t *r = json_array();
    const char *p = json_string_value(s), *end = p + json_string_length(s);
    if (sep && !json_is_null(sep)) {
        if (need_str(c, n, sep, "split") || !json_string_length(sep)) {
            json_decref(r);
            return c->failed ? NULL : fail(c, n, "split by an empty separator");
        }
        const char *d = json_string_value(sep);
        size_t dn = json_string_length(sep);
        for (;;) {
            const char *q = NULL;
            for (const char *x = p; max != 0 && x + dn <= end && !q; x++)
                if (!memcmp(x, d, dn)) q = x;
            if (!q) break;
            json_array_append_new(r, ct_str(p, (size_t)(q - p)));
            p = q + dn;
            max--;
        }
        json_array_append_new(r, ct_str(p, (size_t)(end - p)));
        return r;
    }
    while (p < end) {   /* runs of whitespace */
        while (p < end && strchr(" \t\n\r\f\v", *p)) p++;
        if (p == end) break;
        const char *q = p;
        if (max == 0) q = end;
        else while (q < end && !strchr(" \t\n\r\f\v", *q)) q++;
        if (max == 0) {
            const char *z = end;
            while (z > p && strchr(" \t\n\r\f\v", z[-1])) z--;
            q = z;
        }
        json_array_append_new(r, ct_str(p, (size_t)(q - p)));
        p = q;
        max--;
    }
    return r;
}

static json_t *replace(ctx *c, const ct_node *n, const json_t *s, const json_t *old, const json_t *new, const json_t *count)
{
    if (need_str(c, n, s, "replace") || need_str(c, n, old, "replace") || need_str(c, n, new, "replace")) return NULL;
    if (!json_string_length(old)) return fail(c, n, "replace of an empty string is not supported");
    long long max = count && ct_is_int(count) ? ct_int_of(count) : -1;
    mt_buf b = {0};
    const char *p = json_string_value(s), *end = p + json_string_length(s), *o = json_string_value(old);
    size_t on = json_string_length(old);
    while (p < end) {
        if (max != 0 && p + on <= end && !memcmp(p, o, on)) {
            mt_buf_append(&b, json_string_value(new), json_string_length(new));
            p += on;
            max--;
        } else mt_buf_putc(&b, *p++);
    }
    json_t *r = ct_str(b.p, b.n);
    free(b.p);
    return r;
}

static json_t *join(ctx *c, const ct_node *n, const json_t *list, const json_t *sep, int strict)
{
    if (!list || (!json_is_array(list) && !json_is_string(list))) return fail(c, n, "cannot join %s", ct_type_name(list));
    mt_buf b = {0};
    json_t *items = json_is_string(list) ? NULL : (json_t *)list;
    size_t nc = 0, *o = items ? NULL : ct_chars_of(json_string_value(list), json_string_length(list), &nc);
    size_t count = items ? json_array_size(items) : nc;
    for (size_t i = 0; i < count; i++) {
        if (i && sep) ct_str_of(&b, sep);
        if (!items) {
            mt_buf_append(&b, json_string_value(list) + o[i], o[i + 1] - o[i]);
            continue;
        }
        json_t *x = json_array_get(items, i);
        if (strict && !json_is_string(x)) {
            free(b.p);
            return fail(c, n, "join: item %zu is %s, not a string", i, ct_type_name(x));
        }
        ct_str_of(&b, x);
    }
    free(o);
    json_t *r = ct_str(b.p, b.n);
    free(b.p);
    return r;
}

static json_t *method(ctx *c, const ct_node *n, const json_t *self, const char *name, const call_args *a)
{
    static const char *const none[] = {NULL};
    static const char *const split_kw[] = {"sep", "maxsplit", NULL};
    if (self && json_is_object(self)) {
        if (!strcmp(name, "get")) {
            if (check_args(c, n, a, "get", 2, none)) return NULL;
            if (!a->n_pos) return fail(c, n, "get needs a key");
            json_t *v = json_is_string(a->pos[0]) ? json_object_get(self, json_string_value(a->pos[0])) : NULL;
            return json_incref(v ? v : a->n_pos > 1 && a->pos[1] ? a->pos[1] : json_null());
        }
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
            if (check_args(c, n, a, name, 0, none)) return NULL;
            json_t *r = json_array();
            const char *k;
            json_t *v;
            json_object_foreach((json_t *)self, k, v) {
                if (name[0] == 'i') json_array_append_new(r, json_pack("[sO]", k, v));
                else json_array_append_new(r, name[0] == 'k' ? json_string(k) : json_incref(v));
            }
            return r;
        }
    }
    if (!self || !json_is_string(self)) return fail(c, n, "%s has no method '%s'", ct_type_name(self), name);
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        if (check_args(c, n, a, name, 1, none)) return NULL;
        json_t *chars = a->n_pos && !json_is_null(a->pos[0]) ? a->pos[0] : NULL;
        if (chars && need_str(c, n, chars, name)) return NULL;
        return ct_strip(self, chars, name[0] != 'r', name[0] != 'l');
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        if (check_args(c, n, a, name, 1, none)) return NULL;
        json_t *x = a->n_pos ? a->pos[0] : NULL;
        if (!x || (!json_is_string(x) && !json_is_array(x))) return fail(c, n, "%s needs a string or a tuple of strings", name);
        size_t k = json_is_array(x) ? json_array_size(x) : 1, sn = json_string_length(self);
        for (size_t i = 0; i < k; i++) {
            json_t *p = json_is_array(x) ? json_array_get(x, i) : x;
            if (need_str(c, n, p, name)) return NULL;
            size_t pn = json_string_length(p);
            const char *at = json_string_value(self) + (name[0] == 's' ? 0 : sn - (pn <= sn ? pn : 0));
            if (pn <= sn && !memcmp(at, json_string_value(p), pn)) return json_true();
        }
        return json_false();
    }
    if (!strcmp(name, "split")) {
        if (check_args(c, n, a, "split", 2, split_kw)) return NULL;
        json_t *mx = arg(a, 1, "maxsplit");
        return split(c, n, self, arg(a, 0, "sep"), mx && ct_is_int(mx) ? ct_int_of(mx) : -1);
    }
    if (!strcmp(name, "replace")) {
        if (check_args(c, n, a, "replace", 3, none)) return NULL;
        return replace(c, n, self, arg(a, 0, NULL), arg(a, 1, NULL), arg(a, 2, NULL));
    }
    if (!strcmp(name, "join")) {
        if (check_args(c, n, a, "join", 1, none)) return NULL;
        return join(c, n, arg(a, 0, NULL), self, 1);
    }
    if (check_args(c, n, a, name, 0, none)) return NULL;
    if (!strcmp(name, "upper")) return ct_recase(self, CT_CASE_UPPER);
    if (!strcmp(name, "lower")) return ct_recase(self, CT_CASE_LOWER);
    if (!strcmp(name, "title")) return ct_recase(self, CT_CASE_TITLE);
    if (!strcmp(name, "capitalize")) return ct_recase(self, CT_CASE_CAPITALIZE);
    return fail(c, n, "str has no method '%s'", name);
}

static json_t *function(ctx *c, const ct_node *n, const call_args *a)
{
    if (!strcmp(n->name, "raise_exception")) {
        mt_buf b = {0};
        ct_str_of(&b, arg(a, 0, NULL));
        mt_err_set(c->e, "%.*s", (int)(b.n < 1000 ? b.n : 1000), b.p ? b.p : "");
        free(b.p);
        c->failed = 1;
        *c->raised = true;
        return NULL;
    }
    if (!strcmp(n->name, "namespace")) {
        json_t *ns = json_object();
        if (a->n_pos > 1 || (a->n_pos && !json_is_object(a->pos[0])))
            return drop(ns), fail(c, n, "namespace() takes a dict and keyword arguments");
        if (a->n_pos) json_object_update(ns, a->pos[0]);
        json_object_update(ns, a->kw);
        json_array_append(c->spaces, ns);
        return ns;
    }
    if (!strcmp(n->name, "range")) {
        if (check_args(c, n, a, "range", 3, NULL)) return NULL;
        for (int i = 0; i < a->n_pos; i++)
            if (!ct_is_int(a->pos[i])) return fail(c, n, "range needs integers, not %s", ct_type_name(a->pos[i]));
        if (!a->n_pos) return fail(c, n, "range needs an argument");
        long long lo = a->n_pos > 1 ? ct_int_of(a->pos[0]) : 0, hi = ct_int_of(a->pos[a->n_pos > 1]),
                  step = a->n_pos > 2 ? ct_int_of(a->pos[2]) : 1;
        if (!step) return fail(c, n, "range with a step of zero");
        long long count = step > 0 ? (hi > lo ? (hi - lo + step - 1) / step : 0) : (lo > hi ? (lo - hi - step - 1) / -step : 0);
        if (count > 100000) return fail(c, n, "range of %lld numbers, more than 100000", count);
        json_t *r = json_array();
        for (long long i = 0; i < count; i++) json_array_append_new(r, json_integer(lo + i * step));
        return r;
    }
    /* strftime_now */
    json_t *f = arg(a, 0, NULL);
    if (check_args(c, n, a, "strftime_now", 1, NULL) || need_str(c, n, f, "strftime_now")) return NULL;
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char s[512];
    size_t k = strftime(s, sizeof s, json_string_value(f), &tm);
    return ct_str(s, k);
}

static json_t *to_list(ctx *c, const ct_node *n, const json_t *v)
{
    if (!v) return json_array();
    if (json_is_array(v)) return json_copy((json_t *)v);
    json_t *r = json_array();
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) json_array_append_new(r, json_string(k));
        return r;
    }
    if (json_is_string(v)) {
        size_t nc, *o = ct_chars_of(json_string_value(v), json_string_length(v), &nc);
        for (size_t i = 0; i < nc; i++) json_array_append_new(r, ct_str(json_string_value(v) + o[i], o[i + 1] - o[i]));
        free(o);
        return r;
    }
    json_decref(r);
    return fail(c, n, "'%s' object is not iterable", ct_type_name(v));
}

static json_t *filter(ctx *c, const ct_node *n, json_t *v, const call_args *a)
{
    static const char *const none[] = {NULL};
    static const char *const def_kw[] = {"default_value", "boolean", NULL};
    static const char *const json_kw[] = {"indent", NULL};
    static const char *const trim_kw[] = {"chars", NULL};
    static const char *const join_kw[] = {"d", NULL};
    static const char *const int_kw[] = {"default", "base", NULL};
    static const char *const repl_kw[] = {"count", NULL};
    const char *f = n->name;
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        if (check_args(c, n, a, f, 2, def_kw)) return NULL;
        json_t *b = arg(a, 1, "boolean");
        if (v && !(b && ct_truthy(b) && !ct_truthy(v))) return json_incref(v);
        json_t *d = arg(a, 0, "default_value");
        return d ? json_incref(d) : ct_str("", 0);
    }
    if (!strcmp(f, "tojson")) {
        if (check_args(c, n, a, f, 1, json_kw)) return NULL;
        json_t *ind = arg(a, 0, "indent");
        mt_buf b = {0};
        if (ct_tojson(&b, v, ind && ct_is_int(ind) ? (int)ct_int_of(ind) : -1, 0)) {
            free(b.p);
            return fail(c, n, "tojson of an undefined value");
        }
        json_t *r = ct_str(b.p, b.n);
        free(b.p);
        return r;
    }
    if (!strcmp(f, "join")) {
        if (check_args(c, n, a, f, 1, join_kw)) return NULL;
        return join(c, n, v, arg(a, 0, "d"), 0);
    }
    if (!strcmp(f, "replace")) {
        if (check_args(c, n, a, f, 3, repl_kw)) return NULL;
        json_t *s = v && !json_is_string(v) ? NULL : v;
        mt_buf b = {0};
        if (!s) ct_str_of(&b, v);
        json_t *tmp = s ? NULL : ct_str(b.p, b.n);
        free(b.p);
        json_t *r = replace(c, n, s ? s : tmp, arg(a, 0, NULL), arg(a, 1, NULL), arg(a, 2, "count"));
        drop(tmp);
        return r;
    }
    if (!strcmp(f, "int")) {
        if (check_args(c, n, a, f, 2, int_kw)) return NULL;
        json_t *d = arg(a, 0, "default");
        if (ct_is_int(v)) return json_integer(ct_int_of(v));
        if (v && json_is_real(v)) return json_integer((long long)json_real_value(v));
        if (v && json_is_string(v)) {
            char *end;
            const char *s = json_string_value(v);
            long long x = strtoll(s, &end, 10);
            if (end != s && !*end) return json_integer(x);
            double y = strtod(s, &end);
            if (end != s && !*end && isfinite(y)) return json_integer((long long)y);
        }
        return d ? json_incref(d) : json_integer(0);
    }
    if (!strcmp(f, "trim")) {
        if (check_args(c, n, a, f, 1, trim_kw)) return NULL;
        json_t *chars = arg(a, 0, "chars");
        if (chars && json_is_null(chars)) chars = NULL;
        if (chars && need_str(c, n, chars, "trim")) return NULL;
        mt_buf b = {0};
        ct_str_of(&b, v);
        json_t *s = ct_str(b.p, b.n), *r = ct_strip(s, chars, 1, 1);
        free(b.p);
        json_decref(s);
        return r;
    }
    if (check_args(c, n, a, f, 0, none)) return NULL;
    if (!strcmp(f, "safe")) return v ? json_incref(v) : NULL;
    if (!strcmp(f, "length") || !strcmp(f, "count")) {
        if (!v) return json_integer(0);
        if (json_is_string(v)) return json_integer((json_int_t)ct_n_chars(v));
        if (json_is_array(v)) return json_integer((json_int_t)json_array_size(v));
        if (json_is_object(v)) return json_integer((json_int_t)json_object_size(v));
        return fail(c, n, "object of type '%s' has no len()", ct_type_name(v));
    }
    if (!strcmp(f, "string")) {
        mt_buf b = {0};
        ct_str_of(&b, v);
        json_t *r = ct_str(b.p, b.n);
        free(b.p);
        return r;
    }
    if (!strcmp(f, "list")) return to_list(c, n, v);
    if (!strcmp(f, "first") || !strcmp(f, "last") || !strcmp(f, "reverse")) {
        json_t *l = to_list(c, n, v), *r = NULL;
        if (!l) return NULL;
        size_t k = json_array_size(l);
        if (f[0] == 'f') r = k ? json_incref(json_array_get(l, 0)) : NULL;
        else if (f[1] == 'a') r = k ? json_incref(json_array_get(l, k - 1)) : NULL;
        else {
            json_t *rev = json_array();
            for (size_t i = k; i-- > 0;) json_array_append(rev, json_array_get(l, i));
            r = v && json_is_string(v) ? join(c, n, rev, NULL, 0) : json_incref(rev);
            json_decref(rev);
        }
        json_decref(l);
        return r;
    }
    /* upper, lower, title, capitalize: of the value as a string */
    mt_buf b = {0};
    ct_str_of(&b, v);
    json_t *s = ct_str(b.p, b.n);
    free(b.p);
    json_t *r = ct_recase(s, !strcmp(f, "upper") ? CT_CASE_UPPER : !strcmp(f, "lower") ? CT_CASE_LOWER
                          : !strcmp(f, "title") ? CT_CASE_JINJA_TITLE : CT_CASE_CAPITALIZE);
    json_decref(s);
    return r;
}

static int test(const ct_node *n, const json_t *v)
{
    const char *t = n->name;
    if (!strcmp(t, "defined")) return v != NULL;
    if (!strcmp(t, "undefined")) return v == NULL;
    if (!v) return 0;
    if (!strcmp(t, "none")) return json_is_null(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return ct_is_num(v);
    if (!strcmp(t, "integer")) return json_is_integer(v);
    if (!strcmp(t, "float")) return json_is_real(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "true")) return json_is_true(v);
    if (!strcmp(t, "false")) return json_is_false(v);
    if (!strcmp(t, "mapping")) return json_is_object(v);
    if (!strcmp(t, "sequence") || !strcmp(t, "iterable")) return json_is_string(v) || json_is_array(v) || json_is_object(v);
    if (!strcmp(t, "odd") || !strcmp(t, "even")) return ct_is_int(v) && (ct_int_of(v) % 2 != 0) == (t[0] == 'o');
    /* lower, upper: Python's islower() / isupper(): cased characters, all of one case */
    if (!json_is_string(v)) return 0;
    json_t *same = ct_recase(v, t[0] == 'l' ? CT_CASE_LOWER : CT_CASE_UPPER), *other = ct_recase(v, t[0] == 'l' ? CT_CASE_UPPER : CT_CASE_LOWER);
    int r = json_equal(same, v) && !json_equal(other, v);
    json_decref(same);
    json_decref(other);
    return r;
}

/* What a name or attribute is called in a message about its being undefined. */
static const char *desc(const ct_node *n)
{
    return n->kind == CT_NAME || n->kind == CT_ATTR ? n->name : "the value";
}

static json_t *eval(ctx *c, const ct_node *n)
{
    if (c->failed) return NULL;
    json_t *a = NULL, *b = NULL, *r = NULL;
    call_args args;
    switch (n->kind) {
    case CT_LIT: return json_deep_copy(n->lit);
    case CT_NAME: return lookup(c, n->name);
    case CT_LIST:
    case CT_DICT:
        r = n->kind == CT_LIST ? json_array() : json_object();
        for (int i = 0; i < n->n_kids && !c->failed; i += n->kind == CT_LIST ? 1 : 2) {
            a = eval(c, n->kids[i]);
            if (n->kind == CT_LIST) {
                json_array_append_new(r, a ? a : json_null());
                continue;
            }
            b = eval(c, n->kids[i + 1]);
            if (!c->failed && (!a || !json_is_string(a))) fail(c, n, "dict keys must be strings here");
            else if (!c->failed) json_object_set(r, json_string_value(a), b ? b : json_null());
            drop(a);
            drop(b);
        }
        if (c->failed) drop(r), r = NULL;
        return r;
    case CT_ATTR:
        a = eval(c, n->a);
        if (!c->failed && !a) fail(c, n, "'%s' is undefined, so it has no attribute '%s'", desc(n->a), n->name);
        else if (a && json_is_object(a)) r = json_incref(json_object_get(a, n->name));
        drop(a);
        return r;
    case CT_ITEM:
        a = eval(c, n->a);
        b = eval(c, n->b);
        if (!c->failed && !a) fail(c, n, "'%s' is undefined, so it has no items", desc(n->a));
        else if (!c->failed) r = item(c, n, a, b);
        break;
    case CT_SLICE: {
        json_t *z = NULL, *s = NULL;
        a = eval(c, n->a);
        b = n->b ? eval(c, n->b) : NULL;
        z = n->c ? eval(c, n->c) : NULL;
        s = n->d ? eval(c, n->d) : NULL;
        if (!c->failed) r = slice(c, n, a, b, z, s);
        drop(z);
        drop(s);
        break;
    }
    case CT_CALL:
        if (n->a) a = eval(c, n->a->a);   /* a method's object */
        if (!c->failed && n->a && !a) fail(c, n, "'%s' is undefined, so it has no method '%s'", desc(n->a->a), n->a->name);
        if (c->failed || get_args(c, n, &args)) {
            drop(a);
            return NULL;
        }
        r = n->a ? method(c, n, a, n->a->name, &args) : function(c, n, &args);
        free_args(&args);
        break;
    case CT_FILTER:
        a = eval(c, n->a);
        if (c->failed || get_args(c, n, &args)) break;
        r = filter(c, n, a, &args);
        free_args(&args);
        break;
    case CT_TEST:
        a = eval(c, n->a);
        if (!c->failed) r = json_boolean(test(n, a) != n->negate);
        break;
    case CT_NEG:
        a = eval(c, n->a);
        if (c->failed) break;
        if (!ct_is_num(a)) fail(c, n, "bad operand for unary -: %s", ct_type_name(a));
        else r = json_is_real(a) ? json_real(-json_real_value(a)) : json_integer(-ct_int_of(a));
        break;
    case CT_NOT:
        a = eval(c, n->a);
        if (!c->failed) r = json_boolean(!ct_truthy(a));
        break;
    case CT_AND:
    case CT_OR:
        a = eval(c, n->a);
        if (c->failed) break;
        if (ct_truthy(a) == (n->kind == CT_OR)) return a;
        drop(a);
        return eval(c, n->b);
    case CT_COND:
        a = eval(c, n->a);
        if (c->failed) break;
        r = ct_truthy(a) ? eval(c, n->b) : n->c ? eval(c, n->c) : NULL;
        break;
    case CT_BINARY:
        a = eval(c, n->a);
        b = eval(c, n->b);
        if (!c->failed) r = binary(c, n, a, b);
        break;
    default: fail(c, n, "not an expression");
    }
    drop(a);
    drop(b);
    if (c->failed) {
        drop(r);
        return NULL;
    }
    return r;
}

/* ---- statements ---- */

static void exec(ctx *c, const ct_node *n);

static int step(ctx *c, const ct_node *n)
{
    if (++c->steps > MAX_STEPS || c->out->n > MAX_OUT) {
        fail(c, n, "the template does too much work (more than %lld steps or %u bytes)", MAX_STEPS, MAX_OUT);
        return -1;
    }
    return 0;
}

/* Binds a loop's targets to item in the innermost frame. */
static int bind(ctx *c, const ct_node *n, json_t *item)
{
    json_t *f = c->frames[c->n_frames - 1];
    if (n->n_names == 1) {
        json_object_set(f, n->names[0], item ? item : json_null());
        return 0;
    }
    if (!item || !json_is_array(item) || json_array_size(item) != (size_t)n->n_names) {
        fail(c, n, "cannot unpack %s into %d loop variables", ct_type_name(item), n->n_names);
        return -1;
    }
    for (int i = 0; i < n->n_names; i++) json_object_set(f, n->names[i], json_array_get(item, i));
    return 0;
}

static void for_loop(ctx *c, const ct_node *n)
{
    json_t *it = eval(c, n->a);
    if (c->failed) return;
    json_t *all = to_list(c, n, it);
    drop(it);
    if (!all) return;
    json_t *items = json_array();   /* after the loop's "if" */
    for (size_t i = 0; i < json_array_size(all) && !c->failed; i++) {
        json_t *x = json_array_get(all, i);
        if (!n->d) {
            json_array_append(items, x);
            continue;
        }
        push_frame(c);
        if (!bind(c, n, x)) {
            json_t *keep = eval(c, n->d);
            if (ct_truthy(keep)) json_array_append(items, x);
            drop(keep);
        }
        pop_frame(c);
    }
    json_decref(all);
    size_t len = json_array_size(items);
    for (size_t i = 0; i < len && !c->failed; i++) {
        if (step(c, n)) break;
        push_frame(c);
        json_t *loop = json_pack("{s:I, s:I, s:I, s:I, s:b, s:b, s:I}", "index", (json_int_t)i + 1, "index0", (json_int_t)i,
                                 "revindex", (json_int_t)(len - i), "revindex0", (json_int_t)(len - i - 1), "first", i == 0,
                                 "last", i + 1 == len, "length", (json_int_t)len);
        if (i) json_object_set(loop, "previtem", json_array_get(items, i - 1));
        if (i + 1 < len) json_object_set(loop, "nextitem", json_array_get(items, i + 1));
        json_object_set_new(c->frames[c->n_frames - 1], "loop", loop);
        if (!bind(c, n, json_array_get(items, i))) exec(c, n->b);
        pop_frame(c);
        int jump = c->jump;
        c->jump = 0;
        if (jump == 1) break;
    }
    if (!len && n->c && !c->failed) exec(c, n->c);
    json_decref(items);
}

static void set(ctx *c, const ct_node *n)
{
    json_t *v;
    if (n->a) {
        v = eval(c, n->a);
    } else {   /* {% set x %}...{% endset %}: the body's text */
        mt_buf b = {0}, *out = c->out;
        c->out = &b;
        exec(c, n->b);
        c->out = out;
        v = ct_str(b.p, b.n);
        free(b.p);
    }
    if (c->failed) {
        drop(v);
        return;
    }
    if (n->attr) {
        json_t *ns = lookup(c, n->name);
        if (!is_space(c, ns)) fail(c, n, "cannot set '%s.%s': '%s' is not a namespace()", n->name, n->attr, n->name);
        else json_object_set(ns, n->attr, v ? v : json_null());
        drop(ns);
    } else {
        json_object_set(c->frames[c->n_frames - 1], n->name, v ? v : json_null());
    }
    drop(v);
}

static void exec(ctx *c, const ct_node *n)
{
    if (c->failed || !n) return;
    switch (n->kind) {
    case CT_BODY:
        for (int i = 0; i < n->n_kids && !c->failed && !c->jump; i++) exec(c, n->kids[i]);
        break;
    case CT_TEXT:
        if (!step(c, n)) mt_buf_append(c->out, json_string_value(n->lit), json_string_length(n->lit));
        break;
    case CT_OUTPUT: {
        json_t *v = eval(c, n->a);
        if (!c->failed && !step(c, n)) ct_str_of(c->out, v);
        drop(v);
        break;
    }
    case CT_IF: {
        json_t *v = eval(c, n->a);
        if (!c->failed) exec(c, ct_truthy(v) ? n->b : n->c);
        drop(v);
        break;
    }
    case CT_FOR: for_loop(c, n); break;
    case CT_SET: set(c, n); break;
    case CT_BREAK: c->jump = 1; break;
    case CT_CONTINUE: c->jump = 2; break;
    default: fail(c, n, "not a statement");
    }
}

int mt_chat_template_render(const mt_chat_template *t, const mt_chat_vars *v, mt_buf *out, bool *raised, mt_err *e)
{
    bool r = false;
    ctx c = {.out = out, .e = e, .raised = raised ? raised : &r};
    *c.raised = false;
    c.spaces = json_array();
    push_frame(&c);
    json_t *g = c.frames[0];
    json_object_set(g, "messages", v->messages ? v->messages : json_null());
    json_object_set_new(g, "add_generation_prompt", json_boolean(v->add_generation_prompt));
    json_object_set_new(g, "bos_token", json_string(v->bos_token ? v->bos_token : ""));
    json_object_set_new(g, "eos_token", json_string(v->eos_token ? v->eos_token : ""));
    json_object_set_new(g, "tools", json_null());
    json_object_set_new(g, "documents", json_null());
    exec(&c, t->root);
    while (c.n_frames) pop_frame(&c);
    free(c.frames);
    json_decref(c.spaces);
    return c.failed ? -1 : 0;
}
