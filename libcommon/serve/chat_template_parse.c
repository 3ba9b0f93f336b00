/* chat_template_parse.c: a chat template's text into its tree (chat_template.h's subset): the lexer, with
 * Jinja2's whitespace rules as transformers sets them (trim_blocks, lstrip_blocks, '-' and '+' markers),
 * and a recursive-descent parser with Jinja2's precedence. What the subset lacks is refused here, naming
 * the line, so that a template mt cannot render is known when the server starts. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/chat_template.h"
#include "serve/chat_template_tree.h"
#include "tok/bpe.h"

enum tk { TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END, TK_NAME, TK_STR, TK_INT, TK_FLOAT,
          TK_OP, TK_EOF };

typedef struct token {
    enum tk t;
    int line;
    char *s;        /* data, name, operator, string (decoded) */
    size_t n;
    long long i;
    double f;
} token;

typedef struct parser {
    token *v;
    size_t n, cap, at;
    int loops;      /* for-loops around the statement being parsed */
    mt_err *e;
    int failed;
} parser;

static const char *const filters[] = {"trim", "length", "count", "upper", "lower", "title", "capitalize", "tojson",
                                      "default", "d", "string", "first", "last", "join", "replace", "reverse",
                                      "list", "int", "safe", NULL};
static const char *const tests[] = {"defined", "undefined", "none", "string", "number", "integer", "float",
                                    "boolean", "mapping", "sequence", "iterable", "true", "false", "odd", "even",
                                    "lower", "upper", NULL};
static const char *const functions[] = {"namespace", "raise_exception", "range", "strftime_now", NULL};
static const char *const methods[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "split", "title",
                                      "upper", "lower", "capitalize", "replace", "join", "get", "items", "keys",
                                      "values", NULL};

static int in_list(const char *const *l, const char *s)
{
    for (; *l; l++)
        if (!strcmp(*l, s)) return 1;
    return 0;
}

/* The first error wins; returns NULL for "return fail(...)" in node builders. */
static void *fail(parser *p, int line, const char *fmt, ...) MT_PRINTF(3, 4);
static void *fail(parser *p, int line, const char *fmt, ...)
{
    if (p->failed) return NULL;
    p->failed = 1;
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mt_err_set(p->e, "chat template line %d: %s", line, msg);
    return NULL;
}

/* ---- the lexer ---- */

static token *push(parser *p, enum tk t, int line, const char *s, size_t n)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->v = mt_xrealloc(p->v, p->cap * sizeof *p->v);
    }
    token *k = &p->v[p->n++];
    *k = (token){t, line, NULL, n, 0, 0};
    if (s) {
        k->s = mt_xmalloc(n + 1);
        memcpy(k->s, s, n);
        k->s[n] = 0;
    }
    return k;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int lines_in(const char *s, size_t a, size_t b)
{
    int n = 0;
    for (size_t i = a; i < b; i++) n += s[i] == '\n';
    return n;
}

/* A string literal at s[*pos] (a quote): decoded with Python's escapes into a token. */
static int lex_string(parser *p, const char *s, size_t n, size_t *pos, int *line)
{
    char q = s[*pos];
    size_t i = *pos + 1;
    int line0 = *line;
    mt_buf b = {0};
    for (; i < n && s[i] != q; i++) {
        char c = s[i];
        if (c == '\n') (*line)++;
        if (c != '\\' || i + 1 >= n) {
            mt_buf_putc(&b, c);
            continue;
        }
        c = s[++i];
        unsigned cp = 0;
        int hex = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        switch (c) {
        case 'n': mt_buf_putc(&b, '\n'); break;
        case 't': mt_buf_putc(&b, '\t'); break;
        case 'r': mt_buf_putc(&b, '\r'); break;
        case '0': mt_buf_putc(&b, '\0'); break;
        case '\\': case '\'': case '"': mt_buf_putc(&b, c); break;
        case '\n': (*line)++; break;   /* a line continuation */
        default:
            if (!hex) {   /* an unknown escape stays as it is */
                mt_buf_putc(&b, '\\');
                mt_buf_putc(&b, c);
                break;
            }
            for (int k = 0; k < hex; k++) {
                char h = i + 1 < n ? s[++i] : 0;
                if (!isxdigit((unsigned char)h)) {
                    free(b.p);
                    fail(p, *line, "a bad \\%c escape in a string", c);
                    return -1;
                }
                cp = cp * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) {
                free(b.p);
                fail(p, *line, "a string escape of U+%X, which is not a character", cp);
                return -1;
            }
            char u[4];
            size_t un = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (un == 1) u[0] = (char)cp;
            else if (un == 2) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63));
            else if (un == 3) u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 63)), u[2] = (char)(0x80 | (cp & 63));
            else u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 63)), u[2] = (char)(0x80 | ((cp >> 6) & 63)), u[3] = (char)(0x80 | (cp & 63));
            mt_buf_append(&b, u, un);
        }
    }
    if (i >= n) {
        free(b.p);
        fail(p, line0, "a string that never ends");
        return -1;
    }
    push(p, TK_STR, line0, b.p ? b.p : "", b.n);
    free(b.p);
    *pos = i + 1;
    return 0;
}

/* The inside of a {{ }} or {% %} tag from s[*pos] to its end marker, which is consumed with the whitespace
 * the rules take after it. */
static int lex_tag(parser *p, const char *s, size_t n, size_t *pos, int *line, int block)
{
    static const char *const ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                      "(", ")", "{", "}", "<", ">", "=", ".", ":", "|", ",", ";", NULL};
    int depth = 0, line0 = *line;
    size_t i = *pos;
    for (;;) {
        while (i < n && is_ws(s[i])) *line += s[i++] == '\n';
        if (i >= n) {
            fail(p, line0, "a %s that never ends", block ? "{% tag" : "{{ expression");
            return -1;
        }
        if (!depth) {   /* the end marker: '-' strips all whitespace after it, '+' keeps it */
            const char *end = block ? "%}" : "}}";
            char sign = (s[i] == '-' || (block && s[i] == '+')) && i + 2 < n + 1 && !strncmp(s + i + 1, end, 2) ? s[i] : 0;
            if (sign || !strncmp(s + i, end, 2)) {
                push(p, block ? TK_BLOCK_END : TK_VAR_END, *line, NULL, 0);
                i += sign ? 3 : 2;
                if (sign == '-') while (i < n && is_ws(s[i])) *line += s[i++] == '\n';
                else if (block && !sign && i < n && s[i] == '\n') i++, (*line)++;   /* trim_blocks */
                *pos = i;
                return 0;
            }
        }
        char c = s[i];
        if (isalpha((unsigned char)c) || c == '_') {
            size_t j = i;
            while (j < n && (isalnum((unsigned char)s[j]) || s[j] == '_')) j++;
            push(p, TK_NAME, *line, s + i, j - i);
            i = j;
        } else if (isdigit((unsigned char)c)) {
            size_t j = i;
            int real = 0;
            while (j < n && (isdigit((unsigned char)s[j]) || s[j] == '_')) j++;
            if (j + 1 < n && s[j] == '.' && isdigit((unsigned char)s[j + 1])) {
                real = 1;
                for (j++; j < n && isdigit((unsigned char)s[j]); j++) {}
            }
            if (j < n && (s[j] == 'e' || s[j] == 'E')) {
                size_t k = j + 1 + (j + 1 < n && (s[j + 1] == '+' || s[j + 1] == '-'));
                if (k < n && isdigit((unsigned char)s[k])) {
                    real = 1;
                    for (j = k; j < n && isdigit((unsigned char)s[j]); j++) {}
                }
            }
            char num[64];
            size_t m = 0;
            for (size_t k = i; k < j && m + 1 < sizeof num; k++)
                if (s[k] != '_') num[m++] = s[k];
            num[m] = 0;
            token *k = push(p, real ? TK_FLOAT : TK_INT, *line, num, m);
            if (real) k->f = strtod(num, NULL);
            else k->i = strtoll(num, NULL, 10);
            i = j;
        } else if (c == '\'' || c == '"') {
            if (lex_string(p, s, n, &i, line)) return -1;
        } else {
            int k = 0;
            while (ops[k] && strncmp(s + i, ops[k], strlen(ops[k]))) k++;
            if (!ops[k]) {
                fail(p, *line, "unexpected character '%c'", c);
                return -1;
            }
            if (strchr("([{", c)) depth++;
            else if (strchr(")]}", c) && depth) depth--;
            push(p, TK_OP, *line, ops[k], strlen(ops[k]));
            i += strlen(ops[k]);
        }
    }
}

static int lex(parser *p, const char *src, size_t len)
{
    /* newlines as "\n", one at the end dropped (keep_trailing_newline=False) */
    mt_buf b = {0};
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            mt_buf_putc(&b, '\n');
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else mt_buf_putc(&b, src[i]);
    }
    if (b.n && b.p[b.n - 1] == '\n') b.n--;
    mt_buf_putc(&b, 0);   /* a terminator past the text, for the look-aheads (the text may hold NULs) */
    b.n--;
    const char *s = b.p;
    size_t n = b.n, pos = 0;
    int line = 1, line_starting = 1, rc = 0;
    while (pos < n && !rc) {
        size_t q = pos;
        while (q + 1 < n && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#'))) q++;
        if (q + 1 >= n) {
            push(p, TK_DATA, line, s + pos, n - pos);
            break;
        }
        char kind = s[q + 1], sign = q + 2 < n && (s[q + 2] == '-' || s[q + 2] == '+') ? s[q + 2] : 0;
        size_t end = q;
        if (sign == '-') {
            while (end > pos && is_ws(s[end - 1])) end--;
        } else if (sign != '+' && kind != '{') {   /* lstrip_blocks: a block or comment alone on its line */
            size_t l = end;
            while (l > pos && s[l - 1] != '\n') l--;
            int ws = l < end;
            for (size_t k = l; k < end; k++) ws &= is_ws(s[k]);
            if ((l > pos || line_starting) && ws) end = l;
        }
        if (end > pos) push(p, TK_DATA, line, s + pos, end - pos);
        line += lines_in(s, pos, q);
        pos = q + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            const char *ce = memmem(s + pos, n - pos, "#}", 2);
            if (!ce) {
                fail(p, line, "a {# comment that never ends");
                rc = -1;
                break;
            }
            size_t c = (size_t)(ce - s);
            char csign = c > pos && (s[c - 1] == '-' || s[c - 1] == '+') ? s[c - 1] : 0;
            line += lines_in(s, pos, c);
            pos = c + 2;
            if (csign == '-') while (pos < n && is_ws(s[pos])) line += s[pos++] == '\n';
            else if (!csign && pos < n && s[pos] == '\n') pos++, line++;
        } else {
            push(p, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, line, NULL, 0);
            rc = lex_tag(p, s, n, &pos, &line, kind == '%');
        }
        line_starting = pos > 0 && s[pos - 1] == '\n';
    }
    push(p, TK_EOF, line, NULL, 0);
    free(b.p);
    return rc;
}

/* ---- the parser ---- */

static token *cur(parser *p)
{
    return &p->v[p->at];
}

static int is_op(parser *p, const char *op)
{
    return cur(p)->t == TK_OP && !strcmp(cur(p)->s, op);
}

static int is_name(parser *p, const char *name)
{
    return cur(p)->t == TK_NAME && !strcmp(cur(p)->s, name);
}

static int accept_op(parser *p, const char *op)
{
    if (!is_op(p, op)) return 0;
    p->at++;
    return 1;
}

static int accept_name(parser *p, const char *name)
{
    if (!is_name(p, name)) return 0;
    p->at++;
    return 1;
}

static const char *what(const token *k)
{
    switch (k->t) {
    case TK_DATA: return "text";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_STR: return "a string";
    case TK_INT:
    case TK_FLOAT: return "a number";
    case TK_EOF: return "the end of the template";
    default: return k->s;
    }
}

static int expect_op(parser *p, const char *op)
{
    if (accept_op(p, op)) return 0;
    fail(p, cur(p)->line, "expected '%s', found %s%s%s", op, cur(p)->t == TK_NAME || cur(p)->t == TK_OP ? "'" : "",
         what(cur(p)), cur(p)->t == TK_NAME || cur(p)->t == TK_OP ? "'" : "");
    return -1;
}

static int expect(parser *p, enum tk t, const char *desc)
{
    if (cur(p)->t == t) {
        p->at++;
        return 0;
    }
    fail(p, cur(p)->line, "expected %s, found %s%s%s", desc, cur(p)->t == TK_NAME || cur(p)->t == TK_OP ? "'" : "",
         what(cur(p)), cur(p)->t == TK_NAME || cur(p)->t == TK_OP ? "'" : "");
    return -1;
}

static ct_node *node(enum ct_kind kind, int line)
{
    ct_node *n = mt_xcalloc(1, sizeof *n);
    n->kind = kind;
    n->line = line;
    return n;
}

static void add_kid(ct_node *n, ct_node *k, const char *name)
{
    n->kids = mt_xrealloc(n->kids, (size_t)(n->n_kids + 1) * sizeof *n->kids);
    n->names = mt_xrealloc(n->names, (size_t)(n->n_kids + 1) * sizeof *n->names);
    n->kids[n->n_kids] = k;
    n->names[n->n_kids] = name ? mt_xstrdup(name) : NULL;
    n->n_kids++;
}

void ct_node_free(ct_node *n)
{
    if (!n) return;
    ct_node_free(n->a);
    ct_node_free(n->b);
    ct_node_free(n->c);
    ct_node_free(n->d);
    for (int i = 0; i < n->n_kids; i++) {
        ct_node_free(n->kids[i]);
        if (n->names) free(n->names[i]);
    }
    for (int i = 0; n->kind == CT_FOR && i < n->n_names; i++) free(n->names[i]);
    free(n->kids);
    free(n->names);
    free(n->name);
    free(n->attr);
    if (n->lit) json_decref(n->lit);
    free(n);
}

static ct_node *expr(parser *p);
static ct_node *or_expr(parser *p);
static ct_node *unary(parser *p, int with_filters);

/* "(" already read: arguments up to ")", into n's kids (keyword ones named). */
static int args(parser *p, ct_node *n)
{
    while (!p->failed && !accept_op(p, ")")) {
        if (n->n_kids && expect_op(p, ",")) return -1;
        if (accept_op(p, ")")) break;
        char *kw = NULL;
        if (cur(p)->t == TK_NAME && p->v[p->at + 1].t == TK_OP && !strcmp(p->v[p->at + 1].s, "=")) {
            kw = cur(p)->s;
            p->at += 2;
        }
        ct_node *a = expr(p);
        if (!a) return -1;
        add_kid(n, a, kw);
    }
    return p->failed ? -1 : 0;
}

static ct_node *lit(json_t *v, int line)
{
    ct_node *n = node(CT_LIT, line);
    n->lit = v;
    return n;
}

/* A list, a tuple (as a list) or a dict, its opening bracket read, up to close. */
static ct_node *sequence(parser *p, ct_node *n, const char *close, int dict)
{
    while (!p->failed && !accept_op(p, close)) {
        if (n->n_kids && expect_op(p, ",")) break;
        if (accept_op(p, close)) return n;
        ct_node *k = expr(p);
        if (!k) break;
        add_kid(n, k, NULL);
        if (dict) {
            if (expect_op(p, ":")) break;
            if (!(k = expr(p))) break;
            add_kid(n, k, NULL);
        }
    }
    if (p->failed) {
        ct_node_free(n);
        return NULL;
    }
    return n;
}

static ct_node *primary(parser *p)
{
    token *k = cur(p);
    int line = k->line;
    if (k->t == TK_NAME) {
        p->at++;
        if (!strcmp(k->s, "true") || !strcmp(k->s, "True")) return lit(json_true(), line);
        if (!strcmp(k->s, "false") || !strcmp(k->s, "False")) return lit(json_false(), line);
        if (!strcmp(k->s, "none") || !strcmp(k->s, "None")) return lit(json_null(), line);
        ct_node *n = node(CT_NAME, line);
        n->name = mt_xstrdup(k->s);
        return n;
    }
    if (k->t == TK_STR) {   /* adjacent strings are one */
        mt_buf b = {0};
        while (cur(p)->t == TK_STR) {
            mt_buf_append(&b, cur(p)->s, cur(p)->n);
            p->at++;
        }
        ct_node *n = lit(json_stringn_nocheck(b.p ? b.p : "", b.n), line);
        free(b.p);
        return n;
    }
    if (k->t == TK_INT) {
        p->at++;
        return lit(json_integer(k->i), line);
    }
    if (k->t == TK_FLOAT) {
        p->at++;
        return lit(json_real(k->f), line);
    }
    if (accept_op(p, "(")) {
        ct_node *first = expr(p);
        if (!first) return NULL;
        if (accept_op(p, ")")) return first;
        if (!is_op(p, ",")) {
            ct_node_free(first);
            return fail(p, cur(p)->line, "expected ')' or ',', found '%s'", what(cur(p)));
        }
        ct_node *n = node(CT_LIST, line);
        add_kid(n, first, NULL);
        return sequence(p, n, ")", 0);
    }
    if (accept_op(p, "[")) return sequence(p, node(CT_LIST, line), "]", 0);
    if (accept_op(p, "{")) return sequence(p, node(CT_DICT, line), "}", 1);
    return fail(p, line, "expected an expression, found %s%s%s", k->t == TK_OP ? "'" : "", what(k), k->t == TK_OP ? "'" : "");
}

/* A call of n: a function by name or a method (n an attribute). */
static ct_node *call(parser *p, ct_node *callee)
{
    int line = cur(p)->line;
    ct_node *n = node(CT_CALL, line);
    p->at++;   /* "(" */
    if (callee->kind == CT_NAME) {
        n->name = mt_xstrdup(callee->name);
        ct_node_free(callee);
        if (!in_list(functions, n->name)) {
            fail(p, line, "function '%s' is not supported", n->name);
            ct_node_free(n);
            return NULL;
        }
    } else if (callee->kind == CT_ATTR) {
        n->a = callee;
        if (!in_list(methods, callee->name)) {
            fail(p, line, "method '%s' is not supported", callee->name);
            ct_node_free(n);
            return NULL;
        }
    } else {
        ct_node_free(callee);
        ct_node_free(n);
        return fail(p, line, "only functions and methods can be called");
    }
    if (args(p, n)) {
        ct_node_free(n);
        return NULL;
    }
    return n;
}

static ct_node *postfix(parser *p, ct_node *n)
{
    while (n && !p->failed) {
        int line = cur(p)->line;
        if (accept_op(p, ".")) {
            if (cur(p)->t != TK_NAME && cur(p)->t != TK_INT) {
                ct_node_free(n);
                return fail(p, line, "expected a name after '.'");
            }
            ct_node *a = node(cur(p)->t == TK_NAME ? CT_ATTR : CT_ITEM, line);
            a->a = n;
            if (cur(p)->t == TK_NAME) a->name = mt_xstrdup(cur(p)->s);
            else a->b = lit(json_integer(cur(p)->i), line);
            p->at++;
            n = a;
        } else if (accept_op(p, "[")) {
            ct_node *parts[3] = {NULL, NULL, NULL};
            int colons = 0;
            for (;;) {
                if (!is_op(p, ":") && !is_op(p, "]") && !(parts[colons] = expr(p))) break;
                if (colons < 2 && accept_op(p, ":")) colons++;
                else break;
            }
            if (p->failed || expect_op(p, "]")) {
                for (int i = 0; i < 3; i++) ct_node_free(parts[i]);
                ct_node_free(n);
                return NULL;
            }
            if (!colons && !parts[0]) {
                ct_node_free(n);
                return fail(p, line, "an empty subscript []");
            }
            ct_node *a = node(colons ? CT_SLICE : CT_ITEM, line);
            a->a = n;
            a->b = parts[0];
            a->c = parts[1];
            a->d = parts[2];
            n = a;
        } else if (is_op(p, "(")) {
            n = call(p, n);
        } else {
            break;
        }
    }
    return n;
}

/* Filters (x | f(args)) and tests (x is [not] t) after an operand. */
static ct_node *filters_and_tests(parser *p, ct_node *n)
{
    while (n && !p->failed) {
        int line = cur(p)->line;
        if (accept_op(p, "|")) {
            if (cur(p)->t != TK_NAME) {
                ct_node_free(n);
                return fail(p, line, "expected a filter's name after '|'");
            }
            const char *name = cur(p)->s;
            p->at++;
            if (!in_list(filters, name)) {
                ct_node_free(n);
                return fail(p, line, "filter '%s' is not supported", name);
            }
            ct_node *f = node(CT_FILTER, line);
            f->name = mt_xstrdup(name);
            f->a = n;
            n = f;
            if (accept_op(p, "(") && args(p, f)) {
                ct_node_free(n);
                return NULL;
            }
        } else if (accept_name(p, "is")) {
            ct_node *t = node(CT_TEST, line);
            t->negate = accept_name(p, "not");
            t->a = n;
            n = t;
            if (cur(p)->t != TK_NAME) {
                ct_node_free(n);
                return fail(p, line, "expected a test's name after 'is'");
            }
            t->name = mt_xstrdup(cur(p)->s);
            p->at++;
            if (!in_list(tests, t->name)) {
                fail(p, line, "test '%s' is not supported", t->name);
                ct_node_free(n);
                return NULL;
            }
            if (is_op(p, "(") || cur(p)->t == TK_STR || cur(p)->t == TK_INT || cur(p)->t == TK_FLOAT) {
                fail(p, line, "test '%s' takes no argument", t->name);
                ct_node_free(n);
                return NULL;
            }
        } else if (is_op(p, "(")) {
            n = call(p, n);
        } else {
            break;
        }
    }
    return n;
}

static ct_node *unary(parser *p, int with_filters)
{
    int line = cur(p)->line;
    ct_node *n;
    if (accept_op(p, "-")) {
        ct_node *a = unary(p, 0);
        if (!a) return NULL;
        n = node(CT_NEG, line);
        n->a = a;
    } else if (accept_op(p, "+")) {
        n = unary(p, 0);
    } else {
        n = primary(p);
    }
    n = postfix(p, n);
    return with_filters ? filters_and_tests(p, n) : n;
}

static ct_node *binary(enum ct_op op, ct_node *a, ct_node *b, int line)
{
    ct_node *n = node(CT_BINARY, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

/* One level of left-associative operators: ops[i] gives codes[i]. */
static ct_node *level(parser *p, ct_node *(*next)(parser *), const char *const *ops, const enum ct_op *codes)
{
    ct_node *n = next(p);
    while (n && !p->failed) {
        int i = 0;
        while (ops[i] && !is_op(p, ops[i])) i++;
        if (!ops[i]) break;
        int line = cur(p)->line;
        p->at++;
        ct_node *b = next(p);
        if (!b) {
            ct_node_free(n);
            return NULL;
        }
        n = binary(codes[i], n, b, line);
    }
    return n;
}

static ct_node *unary_f(parser *p)
{
    return unary(p, 1);
}

static ct_node *math2(parser *p)
{
    if (is_op(p, "**")) return fail(p, cur(p)->line, "the operator '**' is not supported");
    static const char *const ops[] = {"*", "/", "//", "%", NULL};
    static const enum ct_op codes[] = {OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD};
    ct_node *n = level(p, unary_f, ops, codes);
    if (n && is_op(p, "**")) {
        ct_node_free(n);
        return fail(p, cur(p)->line, "the operator '**' is not supported");
    }
    return n;
}

static ct_node *concat(parser *p)
{
    static const char *const ops[] = {"~", NULL};
    static const enum ct_op codes[] = {OP_CONCAT};
    return level(p, math2, ops, codes);
}

static ct_node *math1(parser *p)
{
    static const char *const ops[] = {"+", "-", NULL};
    static const enum ct_op codes[] = {OP_ADD, OP_SUB};
    return level(p, concat, ops, codes);
}

static ct_node *compare(parser *p)
{
    static const char *const ops[] = {"==", "!=", "<", ">", "<=", ">=", NULL};
    static const enum ct_op codes[] = {OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE};
    ct_node *n = math1(p);
    int chained = 0;
    while (n && !p->failed) {
        int line = cur(p)->line, i = 0;
        enum ct_op op;
        while (ops[i] && !is_op(p, ops[i])) i++;
        if (ops[i]) {
            op = codes[i];
            p->at++;
        } else if (accept_name(p, "in")) {
            op = OP_IN;
        } else if (is_name(p, "not") && p->v[p->at + 1].t == TK_NAME && !strcmp(p->v[p->at + 1].s, "in")) {
            p->at += 2;
            op = OP_NOTIN;
        } else {
            break;
        }
        if (chained++) {
            ct_node_free(n);
            return fail(p, line, "chained comparisons are not supported");
        }
        ct_node *b = math1(p);
        if (!b) {
            ct_node_free(n);
            return NULL;
        }
        n = binary(op, n, b, line);
    }
    return n;
}

static ct_node *not_expr(parser *p)
{
    int line = cur(p)->line;
    if (accept_name(p, "not")) {
        ct_node *a = not_expr(p);
        if (!a) return NULL;
        ct_node *n = node(CT_NOT, line);
        n->a = a;
        return n;
    }
    return compare(p);
}

static ct_node *logic(parser *p, ct_node *(*next)(parser *), const char *word, enum ct_kind kind)
{
    ct_node *n = next(p);
    while (n && !p->failed && is_name(p, word)) {
        int line = cur(p)->line;
        p->at++;
        ct_node *b = next(p);
        if (!b) {
            ct_node_free(n);
            return NULL;
        }
        ct_node *m = node(kind, line);
        m->a = n;
        m->b = b;
        n = m;
    }
    return n;
}

static ct_node *and_expr(parser *p)
{
    return logic(p, not_expr, "and", CT_AND);
}

static ct_node *or_expr(parser *p)
{
    return logic(p, and_expr, "or", CT_OR);
}

/* The conditional expression: "x if c else y". */
static ct_node *expr(parser *p)
{
    ct_node *n = or_expr(p);
    while (n && !p->failed && is_name(p, "if")) {
        int line = cur(p)->line;
        p->at++;
        ct_node *c = node(CT_COND, line);
        c->b = n;
        n = c;
        if (!(c->a = or_expr(p))) break;
        if (accept_name(p, "else") && !(c->c = expr(p))) break;
    }
    if (p->failed) {
        ct_node_free(n);
        return NULL;
    }
    return n;
}

/* ---- statements ---- */

static ct_node *body(parser *p, const char *const *ends, const char **end, int open_line, const char *open);

static int block_end(parser *p)
{
    return expect(p, TK_BLOCK_END, "'%}'");
}

static ct_node *if_stmt(parser *p, int line)
{
    ct_node *n = node(CT_IF, line);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const endif[] = {"endif", NULL};
    const char *end = NULL;
    if (!(n->a = expr(p)) || block_end(p) || !(n->b = body(p, ends, &end, line, "if"))) goto bad;
    if (!strcmp(end, "elif")) {
        if (!(n->c = if_stmt(p, p->v[p->at - 1].line))) goto bad;
        return n;
    }
    if (!strcmp(end, "else") && (block_end(p) || !(n->c = body(p, endif, &end, line, "if")))) goto bad;
    if (block_end(p)) goto bad;
    return n;
bad:
    ct_node_free(n);
    return NULL;
}

static ct_node *for_stmt(parser *p, int line)
{
    ct_node *n = node(CT_FOR, line);
    static const char *const ends[] = {"else", "endfor", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    const char *end = NULL;
    do {
        if (cur(p)->t != TK_NAME) {
            fail(p, cur(p)->line, "expected a loop variable's name after 'for'");
            goto bad;
        }
        n->names = mt_xrealloc(n->names, (size_t)(n->n_names + 1) * sizeof *n->names);
        n->names[n->n_names++] = mt_xstrdup(cur(p)->s);
        p->at++;
    } while (accept_op(p, ","));
    if (!accept_name(p, "in")) {
        fail(p, cur(p)->line, "expected 'in' in the for loop");
        goto bad;
    }
    if (!(n->a = or_expr(p))) goto bad;
    if (accept_name(p, "if") && !(n->d = or_expr(p))) goto bad;
    if (is_name(p, "recursive")) {
        fail(p, cur(p)->line, "recursive loops are not supported");
        goto bad;
    }
    if (block_end(p)) goto bad;
    p->loops++;
    n->b = body(p, ends, &end, line, "for");
    p->loops--;
    if (!n->b) goto bad;
    if (!strcmp(end, "else") && (block_end(p) || !(n->c = body(p, endfor, &end, line, "for")))) goto bad;
    if (block_end(p)) goto bad;
    return n;
bad:
    ct_node_free(n);
    return NULL;
}

static ct_node *set_stmt(parser *p, int line)
{
    if (cur(p)->t != TK_NAME) return fail(p, line, "expected a variable's name after 'set'");
    ct_node *n = node(CT_SET, line);
    n->name = mt_xstrdup(cur(p)->s);
    p->at++;
    if (accept_op(p, ".")) {
        if (cur(p)->t != TK_NAME) {
            fail(p, line, "expected an attribute's name after '%s.'", n->name);
            goto bad;
        }
        n->attr = mt_xstrdup(cur(p)->s);
        p->at++;
    }
    if (is_op(p, ",")) {
        fail(p, line, "assigning several variables at once is not supported");
        goto bad;
    }
    if (accept_op(p, "=")) {
        if (!(n->a = expr(p)) || block_end(p)) goto bad;
        return n;
    }
    static const char *const endset[] = {"endset", NULL};
    const char *end;
    if (n->attr) {
        fail(p, line, "expected '=' after 'set %s.%s'", n->name, n->attr);
        goto bad;
    }
    if (block_end(p) || !(n->b = body(p, endset, &end, line, "set")) || block_end(p)) goto bad;
    return n;
bad:
    ct_node_free(n);
    return NULL;
}

/* The statement after "{%", its name read: n, or NULL (failed) */
static ct_node *stmt(parser *p, const char *name, int line)
{
    if (!strcmp(name, "if")) return if_stmt(p, line);
    if (!strcmp(name, "for")) return for_stmt(p, line);
    if (!strcmp(name, "set")) return set_stmt(p, line);
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (!p->loops) return fail(p, line, "'%s' outside a for loop", name);
        if (block_end(p)) return NULL;
        return node(name[0] == 'b' ? CT_BREAK : CT_CONTINUE, line);
    }
    static const char *const ends[] = {"elif", "else", "endif", "endfor", "endset", NULL};
    if (in_list(ends, name)) return fail(p, line, "unexpected '%s'", name);
    return fail(p, line, "tag '%s' is not supported", name);
}

/* Statements up to one of the tags ends (NULL: the end of the template); *end is the tag found, its name
 * read. */
static ct_node *body(parser *p, const char *const *ends, const char **end, int open_line, const char *open)
{
    ct_node *b = node(CT_BODY, cur(p)->line);
    while (!p->failed) {
        token *k = cur(p);
        ct_node *s = NULL;
        if (k->t == TK_EOF) {
            if (!ends) return b;
            fail(p, open_line, "the '%s' of this line has no '%s'", open, ends[0] && !strcmp(ends[0], "elif") ? "endif" : ends[ends[1] ? 1 : 0]);
            break;
        } else if (k->t == TK_DATA) {
            s = node(CT_TEXT, k->line);
            s->lit = json_stringn_nocheck(k->s, k->n);
            p->at++;
        } else if (k->t == TK_VAR_BEGIN) {
            p->at++;
            ct_node *x = expr(p);
            if (!x || expect(p, TK_VAR_END, "'}}'")) {
                ct_node_free(x);
                break;
            }
            s = node(CT_OUTPUT, k->line);
            s->a = x;
        } else if (k->t == TK_BLOCK_BEGIN) {
            p->at++;
            token *nm = cur(p);
            if (nm->t != TK_NAME) {
                fail(p, nm->line, "expected a tag's name after '{%%'");
                break;
            }
            p->at++;
            for (int i = 0; ends && ends[i]; i++)
                if (!strcmp(nm->s, ends[i])) {
                    *end = ends[i];
                    return b;
                }
            if (!(s = stmt(p, nm->s, nm->line))) break;
        } else {
            fail(p, k->line, "unexpected %s", what(k));
            break;
        }
        add_kid(b, s, NULL);
    }
    ct_node_free(b);
    return NULL;
}

mt_chat_template *mt_chat_template_parse(const char *src, size_t len, mt_err *e)
{
    size_t bad = mt_utf8_check(src, len);
    if (bad < len) {
        mt_err_set(e, "chat template line %d: not valid UTF-8", 1 + lines_in(src, 0, bad));
        return NULL;
    }
    parser p = {.e = e};
    ct_node *root = NULL;
    if (!lex(&p, src, len)) root = body(&p, NULL, NULL, 1, NULL);
    for (size_t i = 0; i < p.n; i++) free(p.v[i].s);
    free(p.v);
    if (!root) return NULL;
    mt_chat_template *t = mt_xcalloc(1, sizeof *t);
    t->root = root;
    return t;
}

void mt_chat_template_free(mt_chat_template *t)
{
    if (!t) return;
    ct_node_free(t->root);
    free(t);
}
