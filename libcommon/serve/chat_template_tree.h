/* chat_template_tree.h: the tree a chat template is parsed into (chat_template_parse.c builds it,
 * chat_template_eval.c renders it) and the value functions rendering uses (chat_template_value.c);
 * private to those files. Values are jansson values, NULL standing for Jinja2's undefined. */
#ifndef MT_SERVE_CHAT_TEMPLATE_TREE_H
#define MT_SERVE_CHAT_TEMPLATE_TREE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/vec.h"

enum ct_kind {
    /* statements */
    CT_BODY,      /* kids: the statements in order */
    CT_TEXT,      /* lit: the text */
    CT_OUTPUT,    /* a: the expression printed */
    CT_IF,        /* a: condition, b: body, c: the else part (a body, or another CT_IF for elif), or NULL */
    CT_FOR,       /* names: targets; a: the iterable, b: body, c: else body or NULL, d: filter or NULL */
    CT_SET,       /* name: variable; attr: NULL, or the namespace's attribute; a: value (or b: a body) */
    CT_BREAK,
    CT_CONTINUE,
    /* expressions */
    CT_LIT,       /* lit */
    CT_NAME,      /* name */
    CT_LIST,      /* kids */
    CT_DICT,      /* kids: key, value, key, value, ... */
    CT_ATTR,      /* a.name */
    CT_ITEM,      /* a[b] */
    CT_SLICE,     /* a[b:c:d], each of b, c, d may be NULL */
    CT_CALL,      /* name (a function) or a (a CT_ATTR: a method); kids: arguments, names[i] a keyword or NULL */
    CT_FILTER,    /* a | name(kids) */
    CT_TEST,      /* a is [not] name(kids); negate */
    CT_NEG,       /* -a */
    CT_NOT,       /* not a */
    CT_AND,       /* a and b */
    CT_OR,        /* a or b */
    CT_COND,      /* b if a else c (c may be NULL) */
    CT_BINARY,    /* a op b: op one of + - * / // % ~ == != < > <= >= in notin */
};

enum ct_op { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_CONCAT, OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE,
             OP_GE, OP_IN, OP_NOTIN };

typedef struct ct_node {
    enum ct_kind kind;
    int line;
    enum ct_op op;
    bool negate;
    char *name, *attr;
    json_t *lit;
    struct ct_node *a, *b, *c, *d;
    struct ct_node **kids;
    char **names;            /* CT_FOR: n_names targets; CT_CALL / CT_FILTER / CT_TEST: n_kids keywords */
    int n_kids, n_names;
} ct_node;

struct mt_chat_template {
    ct_node *root;
};

void ct_node_free(ct_node *n);

/* ---- values (chat_template_value.c) ---- */
const char *ct_type_name(const json_t *v);   /* Python's: "str", "int", "NoneType", ..., "undefined" */
int ct_truthy(const json_t *v);
int ct_is_num(const json_t *v);              /* an int, float or bool */
int ct_is_int(const json_t *v);              /* an int or bool */
long long ct_int_of(const json_t *v);        /* of an int or bool */
double ct_num_of(const json_t *v);
json_t *ct_str(const char *s, size_t n);     /* a new string of valid UTF-8 s[0..n) */
void ct_str_of(mt_buf *b, const json_t *v);  /* appends Python's str(v) ("" for undefined) */
/* appends transformers' tojson (json.dumps, ensure_ascii=False; indent < 0: none); -1 for undefined */
int ct_tojson(mt_buf *b, const json_t *v, int indent, int depth);
size_t *ct_chars_of(const char *s, size_t len, size_t *n);   /* byte offsets of the characters, [n] = len */
size_t ct_n_chars(const json_t *s);
enum { CT_CASE_UPPER, CT_CASE_LOWER, CT_CASE_TITLE, CT_CASE_CAPITALIZE, CT_CASE_JINJA_TITLE };
json_t *ct_recase(const json_t *v, int how);   /* upper(), lower(), title(), capitalize(), Jinja2's title */
json_t *ct_strip(const json_t *v, const json_t *chars, int left, int right);   /* chars NULL: whitespace */
int ct_py_eq(const json_t *a, const json_t *b);   /* Python's == */
int ct_py_lt(const json_t *a, const json_t *b);   /* Python's <, -1 when they do not order */

#endif
