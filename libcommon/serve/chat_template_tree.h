/* chat_template_tree.h: the tree a chat template is parsed into (chat_template_parse.c builds it,
 * chat_template_eval.c renders it); private to those two files. */
#ifndef MT_SERVE_CHAT_TEMPLATE_TREE_H
#define MT_SERVE_CHAT_TEMPLATE_TREE_H

#include <jansson.h>
#include <stdbool.h>

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

#endif
