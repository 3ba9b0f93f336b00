/* torch_pickle.c: the restricted unpickler and the protocol-2 writer of torch_pickle.h. The opcodes'
 * meanings are those of Python's pickle format (Lib/pickletools.py documents each). */
#include "ckpt/torch_pickle.h"

#include <stdlib.h>
#include <string.h>

#define MAX_STACK (1u << 22)
#define MAX_MEMO (1u << 22)
#define MAX_DICT (1u << 16)
#define MAX_NAME 256
#define MAX_DEPTH 100
#define MAX_NODES (1u << 22)

/* ---- the arena ---- */

struct mt_pk_block {
    struct mt_pk_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};

static void *alloc(mt_pk_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct mt_pk_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = mt_xmalloc(sizeof *b + cap);
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->mem + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void mt_pk_arena_free(mt_pk_arena *a)
{
    for (struct mt_pk_block *b = a->head, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    a->head = NULL;
}

mt_pk *mt_pk_new(mt_pk_arena *a, mt_pk_kind kind)
{
    mt_pk *v = alloc(a, sizeof *v);
    v->kind = kind;
    return v;
}
mt_pk *mt_pk_int(mt_pk_arena *a, int64_t x)
{
    mt_pk *v = mt_pk_new(a, MT_PK_INT);
    v->i = x;
    return v;
}
mt_pk *mt_pk_float(mt_pk_arena *a, double x)
{
    mt_pk *v = mt_pk_new(a, MT_PK_FLOAT);
    v->f = x;
    return v;
}
mt_pk *mt_pk_bool(mt_pk_arena *a, bool x)
{
    mt_pk *v = mt_pk_new(a, MT_PK_BOOL);
    v->b = x;
    return v;
}
static mt_pk *bytes_val(mt_pk_arena *a, mt_pk_kind kind, const void *p, size_t n)
{
    mt_pk *v = mt_pk_new(a, kind);
    v->s = alloc(a, n + 1);
    if (n) memcpy(v->s, p, n);
    v->n = n;
    return v;
}
mt_pk *mt_pk_str(mt_pk_arena *a, const char *s)
{
    return bytes_val(a, MT_PK_STR, s, strlen(s));
}
mt_pk *mt_pk_bytes(mt_pk_arena *a, const void *p, size_t n)
{
    return bytes_val(a, MT_PK_BYTES, p, n);
}
mt_pk *mt_pk_named(mt_pk_arena *a, mt_pk_kind kind, const char *name)
{
    return bytes_val(a, kind, name, strlen(name));
}

mt_pk *mt_pk_tensor_new(mt_pk_arena *a, const char *key, mt_st_dtype dt, int64_t storage_numel, int64_t offset,
                        int ndim, const int64_t *shape)
{
    mt_pk *v = mt_pk_new(a, MT_PK_TENSOR);
    mt_pk_tensor *t = v->t = alloc(a, sizeof *t);
    t->key = alloc(a, strlen(key) + 1);
    strcpy(t->key, key);
    t->dtype = dt;
    t->storage_numel = storage_numel;
    t->offset = offset;
    t->ndim = ndim;
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t->shape[d] = shape[d];
        t->stride[d] = st;
        st *= shape[d] ? shape[d] : 1;
    }
    return v;
}

static void grow(mt_pk_arena *a, mt_pk *c)
{
    if (c->len < c->cap) return;
    size_t cap = c->cap ? 2 * c->cap : 4;
    mt_pk **it = alloc(a, cap * sizeof *it);
    if (c->len) memcpy(it, c->items, c->len * sizeof *it);
    c->items = it;
    if (c->kind == MT_PK_DICT) {
        mt_pk **vs = alloc(a, cap * sizeof *vs);
        if (c->len) memcpy(vs, c->vals, c->len * sizeof *vs);
        c->vals = vs;
    }
    c->cap = cap;
}

void mt_pk_append(mt_pk_arena *a, mt_pk *list, mt_pk *v)
{
    grow(a, list);
    list->items[list->len++] = v;
}

/* Equal keys: the same kind and value (tuples item by item, to a bounded depth). */
static bool key_eq(const mt_pk *x, const mt_pk *y, int depth)
{
    if (x == y) return true;
    if (x->kind != y->kind || depth > MAX_DEPTH) return false;
    switch (x->kind) {
    case MT_PK_NONE: return true;
    case MT_PK_BOOL: return x->b == y->b;
    case MT_PK_INT: return x->i == y->i;
    case MT_PK_FLOAT: return x->f == y->f;
    case MT_PK_STR: case MT_PK_BYTES: case MT_PK_BIGINT: case MT_PK_GLOBAL:
        return x->n == y->n && !memcmp(x->s, y->s, x->n);
    case MT_PK_ENUM: return !strcmp(x->s, y->s) && key_eq(x->obj, y->obj, depth + 1);
    case MT_PK_TUPLE:
        if (x->len != y->len) return false;
        for (size_t i = 0; i < x->len; i++)
            if (!key_eq(x->items[i], y->items[i], depth + 1)) return false;
        return true;
    default: return false;   /* unhashable in Python: never equal to another object */
    }
}

void mt_pk_set(mt_pk_arena *a, mt_pk *dict, mt_pk *key, mt_pk *v)
{
    for (size_t i = 0; i < dict->len; i++)
        if (key_eq(dict->items[i], key, 0)) {
            dict->vals[i] = v;
            return;
        }
    grow(a, dict);
    dict->items[dict->len] = key;
    dict->vals[dict->len++] = v;
}

void mt_pk_sets(mt_pk_arena *a, mt_pk *dict, const char *key, mt_pk *v)
{
    mt_pk_set(a, dict, mt_pk_str(a, key), v);
}

const mt_pk *mt_pk_get(const mt_pk *d, const char *key)
{
    if (d && d->kind == MT_PK_OBJECT) d = d->obj;
    if (!d || d->kind != MT_PK_DICT) return NULL;
    size_t n = strlen(key);
    for (size_t i = 0; i < d->len; i++)
        if (d->items[i]->kind == MT_PK_STR && d->items[i]->n == n && !memcmp(d->items[i]->s, key, n)) return d->vals[i];
    return NULL;
}

/* ---- storage types and the allowed globals ---- */

static const struct {
    const char *name;
    mt_st_dtype dt;
} storages[] = {
    {"FloatStorage", MT_ST_F32}, {"DoubleStorage", MT_ST_F64}, {"HalfStorage", MT_ST_F16},
    {"BFloat16Storage", MT_ST_BF16}, {"LongStorage", MT_ST_I64}, {"IntStorage", MT_ST_I32},
    {"ShortStorage", MT_ST_I16}, {"CharStorage", MT_ST_I8}, {"ByteStorage", MT_ST_U8}, {"BoolStorage", MT_ST_BOOL},
};
#define NSTORAGES (int)(sizeof storages / sizeof storages[0])

const char *mt_pk_storage_name(mt_st_dtype d)
{
    for (int i = 0; i < NSTORAGES; i++)
        if (storages[i].dt == d) return storages[i].name;
    return NULL;
}
int mt_pk_storage_dtype(const char *s)
{
    for (int i = 0; i < NSTORAGES; i++)
        if (!strcmp(storages[i].name, s)) return (int)storages[i].dt;
    return -1;
}

static const char *const plain_globals[] = {
    "collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
    "argparse.Namespace", "types.SimpleNamespace", "torch.float32", "torch.float", "torch.float64", "torch.double", "torch.float16",
    "torch.half", "torch.bfloat16", "torch.int64", "torch.long", "torch.int32", "torch.int", "torch.int16",
    "torch.short", "torch.int8", "torch.uint8", "torch.bool",
    /* usable only as Python >= 3.11 pickles an enum member, getattr(<enum class>, '<member>'), and as
     * protocol 2 pickles bytes, _codecs.encode('<latin-1 text>', 'latin1') */
    "__builtin__.getattr", "builtins.getattr", "_codecs.encode",
    /* numpy arrays (Megatron's np_rng_state) as numpy pickles them, _reconstruct(ndarray, (0,), b'b') then
     * BUILD, and their dtypes, dtype('u4', False, True) then BUILD: kept as opaque values, nothing built */
    "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype",
    /* Transformer Engine's _extra_state (FP8 metadata torch.save'd into a buffer): io.BytesIO() then BUILD
     * with its (bytes, position, dict) state, kept opaque, never built */
    "_io.BytesIO",
};
/* Modules whose classes are Megatron's enums: a member is REDUCE(class, (value,)). */
static const char *const enum_modules[] = {
    "megatron.core.enums", "megatron.core.transformer.enums", "megatron.model.enums",
    "megatron.legacy.model.enums",
};

static bool is_enum_class(const char *name)
{
    for (size_t i = 0; i < sizeof enum_modules / sizeof *enum_modules; i++) {
        size_t l = strlen(enum_modules[i]);
        if (strncmp(name, enum_modules[i], l) || name[l] != '.' || !name[l + 1]) continue;
        for (const char *c = name + l + 1; *c; c++)
            if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
                return false;
        return true;
    }
    return false;
}

static bool allowed(const char *name)
{
    for (size_t i = 0; i < sizeof plain_globals / sizeof *plain_globals; i++)
        if (!strcmp(name, plain_globals[i])) return true;
    if (!strncmp(name, "torch.", 6) && mt_pk_storage_dtype(name + 6) >= 0) return true;
    return is_enum_class(name);
}

/* ---- the unpickler ---- */

typedef struct up {
    mt_pk_arena *a;
    const unsigned char *p;
    size_t n, pos, op;   /* op: the offset of the opcode being run */
    const char *where;
    mt_err *e;
    mt_pk **st;
    size_t sn, scap;
    size_t *marks;
    size_t mn, mcap;
    mt_pk **memo;
    size_t memon, memo_count;   /* slots, and slots set (MEMOIZE's next index) */
} up;

#define FAIL(...) (mt_err_set(u->e, __VA_ARGS__), mt_err_prefix(u->e, "%s: pickle offset %zu", u->where, u->op))

static int take(up *u, size_t k, const unsigned char **q)
{
    if (k > u->n - u->pos) return FAIL("truncated (%zu bytes wanted, %zu left)", k, u->n - u->pos);
    *q = u->p + u->pos;
    u->pos += k;
    return 0;
}
static int uint_le(up *u, int k, uint64_t *v)
{
    const unsigned char *q;
    if (take(u, (size_t)k, &q)) return -1;
    *v = 0;
    for (int i = k - 1; i >= 0; i--) *v = *v << 8 | q[i];
    return 0;
}

static int push(up *u, mt_pk *v)
{
    if (u->sn == u->scap) {
        if (u->scap >= MAX_STACK) return FAIL("stack deeper than %u", MAX_STACK);
        u->scap = u->scap ? 2 * u->scap : 64;
        u->st = mt_xrealloc(u->st, u->scap * sizeof *u->st);
    }
    u->st[u->sn++] = v;
    return 0;
}
static int pop(up *u, mt_pk **v)
{
    size_t floor = u->mn ? u->marks[u->mn - 1] : 0;
    if (u->sn <= floor) return FAIL("stack underflow");
    *v = u->st[--u->sn];
    return 0;
}
static int top(up *u, mt_pk **v)
{
    size_t floor = u->mn ? u->marks[u->mn - 1] : 0;
    if (u->sn <= floor) return FAIL("stack underflow");
    *v = u->st[u->sn - 1];
    return 0;
}
/* The items since the last mark: st[*k .. sn). The mark is removed. */
static int pop_mark(up *u, size_t *k)
{
    if (!u->mn) return FAIL("no mark on the stack");
    *k = u->marks[--u->mn];
    return 0;
}

static int memo_put(up *u, uint64_t idx)
{
    mt_pk *v;
    if (top(u, &v)) return -1;
    if (idx >= MAX_MEMO) return FAIL("memo index %llu over the limit %u", (unsigned long long)idx, MAX_MEMO);
    if (idx >= u->memon) {
        size_t m = u->memon ? u->memon : 64;
        while (m <= idx) m *= 2;
        u->memo = mt_xrealloc(u->memo, m * sizeof *u->memo);
        memset(u->memo + u->memon, 0, (m - u->memon) * sizeof *u->memo);
        u->memon = m;
    }
    if (!u->memo[idx]) u->memo_count++;
    u->memo[idx] = v;
    return 0;
}
static int memo_get(up *u, uint64_t idx)
{
    if (idx >= u->memon || !u->memo[idx]) return FAIL("memo index %llu was never set", (unsigned long long)idx);
    return push(u, u->memo[idx]);
}

static mt_pk *tuple_of(up *u, size_t k)
{
    mt_pk *t = mt_pk_new(u->a, MT_PK_TUPLE);
    size_t n = u->sn - k;
    if (n) {
        t->items = alloc(u->a, n * sizeof *t->items);
        memcpy(t->items, u->st + k, n * sizeof *t->items);
    }
    t->len = t->cap = n;
    u->sn = k;
    return t;
}

static int check_dict(up *u, mt_pk *d, const char *op)
{
    if (d->kind != MT_PK_DICT) return FAIL("%s on a value that is not a dict", op);
    if (d->len >= MAX_DICT) return FAIL("dict of more than %u entries", MAX_DICT);
    return 0;
}

static bool is_str(const mt_pk *v, const char *s)
{
    return v->kind == MT_PK_STR && v->n == strlen(s) && !memcmp(v->s, s, v->n);
}

/* BINPERSID: ('storage', torch.<T>Storage, key, location, numel) */
static int persistent(up *u)
{
    mt_pk *pid;
    if (pop(u, &pid)) return -1;
    if (pid->kind != MT_PK_TUPLE || pid->len != 5 || !is_str(pid->items[0], "storage"))
        return FAIL("persistent id is not ('storage', type, key, location, numel)");
    mt_pk **x = pid->items;
    int dt = x[1]->kind == MT_PK_GLOBAL && !strncmp(x[1]->s, "torch.", 6) ? mt_pk_storage_dtype(x[1]->s + 6) : -1;
    if (dt < 0) return FAIL("persistent id's storage type is not a torch storage type");
    if (x[2]->kind != MT_PK_STR || !x[2]->n || memchr(x[2]->s, 0, x[2]->n) || x[3]->kind != MT_PK_STR)
        return FAIL("persistent id's key or location is not a string");
    if (x[4]->kind != MT_PK_INT || x[4]->i < 0) return FAIL("persistent id's element count is not an integer >= 0");
    mt_pk *s = mt_pk_new(u->a, MT_PK_STORAGE);
    s->t = alloc(u->a, sizeof *s->t);
    s->t->key = x[2]->s;
    s->t->dtype = (mt_st_dtype)dt;
    s->t->storage_numel = x[4]->i;
    return push(u, s);
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) */
static int rebuild_tensor(up *u, mt_pk *args)
{
    mt_pk **x = args->items;
    if (args->len < 6 || args->len > 7 || x[0]->kind != MT_PK_STORAGE || x[1]->kind != MT_PK_INT ||
        x[2]->kind != MT_PK_TUPLE || x[3]->kind != MT_PK_TUPLE || x[4]->kind != MT_PK_BOOL ||
        x[5]->kind != MT_PK_DICT)
        return FAIL("_rebuild_tensor_v2 arguments are not (storage, offset, size, stride, requires_grad, hooks)");
    if (x[5]->len) return FAIL("tensor with backward hooks");
    if (x[2]->len != x[3]->len || x[2]->len > MT_PK_MAXDIM)
        return FAIL("tensor size and stride of %zu and %zu dimensions (at most %d)", x[2]->len, x[3]->len, MT_PK_MAXDIM);
    mt_pk *v = mt_pk_new(u->a, MT_PK_TENSOR);
    mt_pk_tensor *t = v->t = alloc(u->a, sizeof *t);
    *t = *x[0]->t;
    t->offset = x[1]->i;
    t->ndim = (int)x[2]->len;
    t->requires_grad = x[4]->b;
    /* the last element reached: offset + sum (size - 1) * stride, inside the storage */
    int64_t last = t->offset, numel = 1;
    bool empty = false, ovf = t->offset < 0;
    for (int d = 0; d < t->ndim; d++) {
        mt_pk *sz = x[2]->items[d], *sd = x[3]->items[d];
        if (sz->kind != MT_PK_INT || sd->kind != MT_PK_INT || sz->i < 0 || sd->i < 0)
            return FAIL("tensor size or stride is not a list of integers >= 0");
        t->shape[d] = sz->i;
        t->stride[d] = sd->i;
        int64_t r;
        if (!sz->i) empty = true;
        else if (__builtin_mul_overflow(sz->i - 1, sd->i, &r) || __builtin_add_overflow(last, r, &last)) ovf = true;
        if (__builtin_mul_overflow(numel, sz->i, &numel)) ovf = true;
    }
    if (!empty && (ovf || last >= t->storage_numel))
        return FAIL("tensor of storage '%s' reaches past its %lld elements", t->key, (long long)t->storage_numel);
    return push(u, v);
}

static bool ident(const mt_pk *v)
{
    if (!v->n) return false;
    for (size_t i = 0; i < v->n; i++) {
        char c = v->s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
    }
    return true;
}

/* The bytes whose Latin-1 text s is (code points below 256, UTF-8 encoded). */
static int latin1(up *u, const mt_pk *s)
{
    mt_pk *b = bytes_val(u->a, MT_PK_BYTES, "", 0);
    b->s = alloc(u->a, s->n + 1);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->s[i];
        if (c < 0x80) {
            b->s[k++] = (char)c;
        } else if ((c == 0xc2 || c == 0xc3) && i + 1 < s->n && ((unsigned char)s->s[i + 1] & 0xc0) == 0x80) {
            b->s[k++] = (char)(((c & 3) << 6) | ((unsigned char)s->s[++i] & 0x3f));
        } else {
            return FAIL("_codecs.encode of text that is not Latin-1");
        }
    }
    b->n = k;
    return push(u, b);
}

/* A numpy value: the function and its arguments, with room for the state a BUILD gives it. */
static mt_pk *opaque(up *u, const char *name, mt_pk *args)
{
    mt_pk *v = mt_pk_named(u->a, MT_PK_OPAQUE, name), *t = mt_pk_new(u->a, MT_PK_TUPLE);
    mt_pk_append(u->a, t, args);
    mt_pk_append(u->a, t, mt_pk_new(u->a, MT_PK_NONE));
    v->obj = t;
    return v;
}

static int reduce(up *u, bool newobj)
{
    mt_pk *args, *f;
    if (pop(u, &args) || pop(u, &f)) return -1;
    if (f->kind != MT_PK_GLOBAL) return FAIL("%s of a value that is not an allowed global", newobj ? "NEWOBJ" : "REDUCE");
    if (args->kind != MT_PK_TUPLE) return FAIL("%s arguments are not a tuple", newobj ? "NEWOBJ" : "REDUCE");
    const char *name = f->s;
    if (!strcmp(name, "collections.OrderedDict") && !args->len) {
        mt_pk *d = mt_pk_new(u->a, MT_PK_DICT);
        d->b = true;
        return push(u, d);
    }
    /* transformers' converter toward Megatron stores the args as a types.SimpleNamespace */
    if ((!strcmp(name, "argparse.Namespace") || !strcmp(name, "types.SimpleNamespace")) && !args->len) {
        mt_pk *o = mt_pk_named(u->a, MT_PK_OBJECT, name);
        o->obj = mt_pk_new(u->a, MT_PK_DICT);
        return push(u, o);
    }
    if (!newobj && !strcmp(name, "torch._utils._rebuild_tensor_v2")) return rebuild_tensor(u, args);
    if (!newobj && !strcmp(name, "torch._utils._rebuild_parameter")) {
        if (args->len != 3 || args->items[0]->kind != MT_PK_TENSOR || args->items[1]->kind != MT_PK_BOOL)
            return FAIL("_rebuild_parameter arguments are not (tensor, requires_grad, hooks)");
        mt_pk *v = mt_pk_new(u->a, MT_PK_TENSOR);
        v->t = alloc(u->a, sizeof *v->t);
        *v->t = *args->items[0]->t;
        v->t->requires_grad = args->items[1]->b;
        return push(u, v);
    }
    if (!newobj && is_enum_class(name) && args->len == 1 &&
        (args->items[0]->kind == MT_PK_INT || args->items[0]->kind == MT_PK_STR)) {
        mt_pk *v = mt_pk_named(u->a, MT_PK_ENUM, name);
        v->obj = args->items[0];
        return push(u, v);
    }
    if (!newobj && strstr(name, ".getattr") && args->len == 2 && args->items[0]->kind == MT_PK_GLOBAL &&
        is_enum_class(args->items[0]->s) && args->items[1]->kind == MT_PK_STR && ident(args->items[1])) {
        mt_pk *v = mt_pk_named(u->a, MT_PK_ENUM, args->items[0]->s);
        v->obj = args->items[1];
        return push(u, v);
    }
    if (!strcmp(name, "_io.BytesIO") && !args->len) return push(u, opaque(u, name, args));
    if (!newobj && strstr(name, "multiarray._reconstruct") && args->len == 3 && args->items[0]->kind == MT_PK_GLOBAL &&
        !strcmp(args->items[0]->s, "numpy.ndarray") && args->items[1]->kind == MT_PK_TUPLE &&
        args->items[2]->kind == MT_PK_BYTES)
        return push(u, opaque(u, name, args));
    if (!newobj && !strcmp(name, "numpy.dtype") && args->len == 3 && args->items[0]->kind == MT_PK_STR &&
        args->items[1]->kind == MT_PK_BOOL && args->items[2]->kind == MT_PK_BOOL)
        return push(u, opaque(u, name, args));
    if (!newobj && !strcmp(name, "_codecs.encode") && args->len == 2 && args->items[0]->kind == MT_PK_STR &&
        is_str(args->items[1], "latin1"))
        return latin1(u, args->items[0]);
    return FAIL("%s of %s with these arguments is not supported", newobj ? "NEWOBJ" : "REDUCE", name);
}

static int build(up *u)
{
    mt_pk *state, *o;
    if (pop(u, &state) || top(u, &o)) return -1;
    if (o->kind == MT_PK_OPAQUE) {   /* numpy's state tuple, kept once */
        if (state->kind != MT_PK_TUPLE || o->obj->items[1]->kind != MT_PK_NONE)
            return FAIL("BUILD of %s with a state that is not one tuple", o->s);
        o->obj->items[1] = state;
        return 0;
    }
    if (state->kind != MT_PK_DICT) return FAIL("BUILD with a state that is not a dict");
    if (o->kind == MT_PK_DICT && o->b) {   /* an OrderedDict's attributes (a state_dict's _metadata) */
        if (!o->obj) o->obj = mt_pk_new(u->a, MT_PK_DICT);
    } else if (o->kind != MT_PK_OBJECT) {
        return FAIL("BUILD of a value that is not an object");
    }
    for (size_t i = 0; i < state->len; i++) {
        if (o->obj->len >= MAX_DICT) return FAIL("object of more than %u attributes", MAX_DICT);
        mt_pk_set(u->a, o->obj, state->items[i], state->vals[i]);
    }
    return 0;
}

static int global(up *u, const char *mod, size_t ml, const char *nm, size_t nl)
{
    if (ml + nl + 2 > MAX_NAME) return FAIL("global name longer than %d bytes", MAX_NAME);
    char name[MAX_NAME];
    snprintf(name, sizeof name, "%.*s.%.*s", (int)ml, mod, (int)nl, nm);
    if (strlen(name) != ml + nl + 1 || !allowed(name)) {
        for (char *c = name; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        return FAIL("pickle global %s is not allowed", name);
    }
    return push(u, mt_pk_named(u->a, MT_PK_GLOBAL, name));
}

static int line(up *u, const char **s, size_t *l)
{
    const unsigned char *q = u->p + u->pos, *nl = memchr(q, '\n', u->n - u->pos);
    if (!nl) return FAIL("GLOBAL name without an end of line");
    *s = (const char *)q;
    *l = (size_t)(nl - q);
    u->pos += *l + 1;
    return 0;
}

static int long_val(up *u, size_t k)
{
    const unsigned char *q;
    if (take(u, k, &q)) return -1;
    /* drop redundant sign bytes; what fits 8 bytes is an int64 */
    while (k > 1 && ((q[k - 1] == 0 && !(q[k - 2] & 0x80)) || (q[k - 1] == 0xff && (q[k - 2] & 0x80)))) k--;
    if (k <= 8) {
        uint64_t v = k && (q[k - 1] & 0x80) ? ~(uint64_t)0 : 0;
        for (size_t i = k; i-- > 0;) v = v << 8 | q[i];
        return push(u, mt_pk_int(u->a, (int64_t)v));
    }
    return push(u, bytes_val(u->a, MT_PK_BIGINT, q, k));
}

static int run(up *u, mt_pk **out)
{
    for (;;) {
        u->op = u->pos;
        const unsigned char *q;
        uint64_t v;
        size_t k;
        mt_pk *x, *y, *c;
        if (take(u, 1, &q)) return -1;
        int rc = 0;
        switch (*q) {
        case 0x80: /* PROTO */
            if (uint_le(u, 1, &v)) return -1;
            if (v > 5) return FAIL("pickle protocol %llu", (unsigned long long)v);
            break;
        case 0x95: /* FRAME: frames are transparent here */
            rc = uint_le(u, 8, &v);
            break;
        case '.': /* STOP */
            if (pop(u, out)) return -1;
            return 0;
        case '(': /* MARK */
            if (u->mn == u->mcap) {
                if (u->mcap >= MAX_STACK) return FAIL("more than %u marks", MAX_STACK);
                u->mcap = u->mcap ? 2 * u->mcap : 16;
                u->marks = mt_xrealloc(u->marks, u->mcap * sizeof *u->marks);
            }
            u->marks[u->mn++] = u->sn;
            break;
        case '}': rc = push(u, mt_pk_new(u->a, MT_PK_DICT)); break;
        case ']': rc = push(u, mt_pk_new(u->a, MT_PK_LIST)); break;
        case ')': rc = push(u, mt_pk_new(u->a, MT_PK_TUPLE)); break;
        case 'N': rc = push(u, mt_pk_new(u->a, MT_PK_NONE)); break;
        case 0x88: rc = push(u, mt_pk_bool(u->a, true)); break;
        case 0x89: rc = push(u, mt_pk_bool(u->a, false)); break;
        case 'K': rc = uint_le(u, 1, &v) || push(u, mt_pk_int(u->a, (int64_t)v)); break;
        case 'M': rc = uint_le(u, 2, &v) || push(u, mt_pk_int(u->a, (int64_t)v)); break;
        case 'J': rc = uint_le(u, 4, &v) || push(u, mt_pk_int(u->a, (int32_t)(uint32_t)v)); break;
        case 0x8a: rc = uint_le(u, 1, &v) || long_val(u, (size_t)v); break;
        case 0x8b: /* LONG4 */
            if (uint_le(u, 4, &v)) return -1;
            if (v & 0x80000000u) return FAIL("LONG4 of negative length");
            rc = long_val(u, (size_t)v);
            break;
        case 'G': {
            if (take(u, 8, &q)) return -1;
            uint64_t bits = 0;
            for (int i = 0; i < 8; i++) bits = bits << 8 | q[i];
            double d;
            memcpy(&d, &bits, 8);
            rc = push(u, mt_pk_float(u->a, d));
            break;
        }
        case 'X': case 0x8c: case 0x8d: case 'B': case 'C': case 0x8e: {
            int w = *q == 0x8c || *q == 'C' ? 1 : *q == 0x8d || *q == 0x8e ? 8 : 4;
            mt_pk_kind kind = *q == 'X' || *q == 0x8c || *q == 0x8d ? MT_PK_STR : MT_PK_BYTES;
            if (uint_le(u, w, &v)) return -1;
            if (v > u->n - u->pos) return FAIL("string of %llu bytes runs past the end", (unsigned long long)v);
            rc = take(u, (size_t)v, &q) || push(u, bytes_val(u->a, kind, q, (size_t)v));
            break;
        }
        case 'q': rc = uint_le(u, 1, &v) || memo_put(u, v); break;
        case 'r': rc = uint_le(u, 4, &v) || memo_put(u, v); break;
        case 0x94: rc = memo_put(u, u->memo_count); break;
        case 'h': rc = uint_le(u, 1, &v) || memo_get(u, v); break;
        case 'j': rc = uint_le(u, 4, &v) || memo_get(u, v); break;
        case 't': rc = pop_mark(u, &k) || push(u, tuple_of(u, k)); break;
        case 0x85: case 0x86: case 0x87: {
            size_t m = (size_t)(*q - 0x84), floor = u->mn ? u->marks[u->mn - 1] : 0;
            if (u->sn - floor < m) return FAIL("stack underflow");
            rc = push(u, tuple_of(u, u->sn - m));
            break;
        }
        case 'l': case 'd': {   /* LIST, DICT from the items since the mark */
            if (pop_mark(u, &k)) return -1;
            mt_pk *t = tuple_of(u, k);
            c = mt_pk_new(u->a, *q == 'l' ? MT_PK_LIST : MT_PK_DICT);
            if (*q == 'd' && t->len % 2) return FAIL("DICT of an odd number of items");
            for (size_t i = 0; i < t->len && !rc; i += *q == 'l' ? 1 : 2) {
                if (*q == 'l') mt_pk_append(u->a, c, t->items[i]);
                else if (!(rc = check_dict(u, c, "DICT"))) mt_pk_set(u->a, c, t->items[i], t->items[i + 1]);
            }
            rc = rc || push(u, c);
            break;
        }
        case 'a': /* APPEND */
            if (pop(u, &x) || top(u, &c)) return -1;
            if (c->kind != MT_PK_LIST) return FAIL("APPEND to a value that is not a list");
            mt_pk_append(u->a, c, x);
            break;
        case 'e': /* APPENDS */
            if (pop_mark(u, &k)) return -1;
            if (k == 0 || (u->mn && u->marks[u->mn - 1] >= k)) return FAIL("APPENDS without a list");
            c = u->st[k - 1];
            if (c->kind != MT_PK_LIST) return FAIL("APPENDS to a value that is not a list");
            for (size_t i = k; i < u->sn; i++) mt_pk_append(u->a, c, u->st[i]);
            u->sn = k;
            break;
        case 's': /* SETITEM */
            if (pop(u, &y) || pop(u, &x) || top(u, &c) || check_dict(u, c, "SETITEM")) return -1;
            mt_pk_set(u->a, c, x, y);
            break;
        case 'u': /* SETITEMS */
            if (pop_mark(u, &k)) return -1;
            if (k == 0 || (u->mn && u->marks[u->mn - 1] >= k)) return FAIL("SETITEMS without a dict");
            if ((u->sn - k) % 2) return FAIL("SETITEMS of an odd number of items");
            c = u->st[k - 1];
            for (size_t i = k; i < u->sn; i += 2) {
                if (check_dict(u, c, "SETITEMS")) return -1;
                mt_pk_set(u->a, c, u->st[i], u->st[i + 1]);
            }
            u->sn = k;
            break;
        case '0': rc = pop(u, &x); break;
        case '1': rc = pop_mark(u, &k); if (!rc) u->sn = k; break;
        case '2': rc = top(u, &x) || push(u, x); break;
        case 'c': { /* GLOBAL "module\nname\n" */
            const char *m, *nm;
            size_t ml, nl;
            rc = line(u, &m, &ml) || line(u, &nm, &nl) || global(u, m, ml, nm, nl);
            break;
        }
        case 0x93: /* STACK_GLOBAL */
            if (pop(u, &y) || pop(u, &x)) return -1;
            if (x->kind != MT_PK_STR || y->kind != MT_PK_STR) return FAIL("STACK_GLOBAL of values that are not strings");
            rc = global(u, x->s, x->n, y->s, y->n);
            break;
        case 'R': rc = reduce(u, false); break;
        case 0x81: rc = reduce(u, true); break;
        case 'b': rc = build(u); break;
        case 'Q': rc = persistent(u); break;
        default: return FAIL("opcode 0x%02x is not supported", *q);
        }
        if (rc) return -1;
    }
}

int mt_pk_load(mt_pk_arena *a, const void *p, size_t n, const char *where, mt_pk **out, mt_err *e)
{
    up u = {.a = a, .p = p, .n = n, .where = where, .e = e};
    *out = NULL;
    int rc = run(&u, out);
    free(u.st);
    free(u.marks);
    free(u.memo);
    if (rc) *out = NULL;
    return rc;
}

/* ---- the writer ---- */

typedef struct wb {
    unsigned char *p;
    size_t n, cap;
    size_t nodes;
    mt_err *e;
} wb;

static void emit(wb *w, const void *p, size_t n)
{
    if (w->n + n > w->cap) {
        while (w->n + n > w->cap) w->cap = w->cap ? 2 * w->cap : 256;
        w->p = mt_xrealloc(w->p, w->cap);
    }
    memcpy(w->p + w->n, p, n);
    w->n += n;
}
static void op(wb *w, unsigned char c)
{
    emit(w, &c, 1);
}
static void le(wb *w, uint64_t v, int k)
{
    unsigned char b[8];
    for (int i = 0; i < k; i++) b[i] = (unsigned char)(v >> (8 * i));
    emit(w, b, (size_t)k);
}
static void w_str(wb *w, const char *s, size_t n)
{
    op(w, 'X');
    le(w, n, 4);
    emit(w, s, n);
}
static void w_int(wb *w, int64_t v)
{
    if (v >= 0 && v < 256) {
        op(w, 'K');
        le(w, (uint64_t)v, 1);
    } else if (v >= 0 && v < 65536) {
        op(w, 'M');
        le(w, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        op(w, 'J');
        le(w, (uint64_t)v, 4);
    } else {
        int k = 8;
        uint64_t u = (uint64_t)v;
        while (k > 1 && (((u >> (8 * (k - 1))) & 0xff) == (v < 0 ? 0xff : 0)) &&
               (((u >> (8 * (k - 2))) & 0x80) != 0) == (v < 0))
            k--;
        op(w, 0x8a);
        le(w, (uint64_t)k, 1);
        le(w, u, k);
    }
}
/* GLOBAL "module\nname\n" of a dotted name (the name after the last dot). */
static void w_global(wb *w, const char *name)
{
    const char *d = strrchr(name, '.');
    size_t ml = d ? (size_t)(d - name) : 0;
    op(w, 'c');
    emit(w, name, ml);
    op(w, '\n');
    emit(w, d ? d + 1 : name, strlen(d ? d + 1 : name));
    op(w, '\n');
}

static int w_val(wb *w, const mt_pk *v, int depth);

static int w_items(wb *w, const mt_pk *d, int depth)
{
    if (!d->len) return 0;
    op(w, '(');
    for (size_t i = 0; i < d->len; i++)
        if (w_val(w, d->items[i], depth + 1) || w_val(w, d->vals[i], depth + 1)) return -1;
    op(w, 'u');
    return 0;
}

static int w_val(wb *w, const mt_pk *v, int depth)
{
    if (depth > MAX_DEPTH) return mt_err_set(w->e, "pickle: values nested deeper than %d", MAX_DEPTH);
    if (++w->nodes > MAX_NODES) return mt_err_set(w->e, "pickle: more than %u values", MAX_NODES);
    switch (v->kind) {
    case MT_PK_NONE: op(w, 'N'); return 0;
    case MT_PK_BOOL: op(w, v->b ? 0x88 : 0x89); return 0;
    case MT_PK_INT: w_int(w, v->i); return 0;
    case MT_PK_BIGINT:
        if (v->n < 256) {
            op(w, 0x8a);
            le(w, v->n, 1);
        } else {
            op(w, 0x8b);
            le(w, v->n, 4);
        }
        emit(w, v->s, v->n);
        return 0;
    case MT_PK_FLOAT: {
        uint64_t bits;
        memcpy(&bits, &v->f, 8);
        unsigned char b[9] = {'G'};
        for (int i = 0; i < 8; i++) b[1 + i] = (unsigned char)(bits >> (56 - 8 * i));
        emit(w, b, 9);
        return 0;
    }
    case MT_PK_STR: w_str(w, v->s, v->n); return 0;
    case MT_PK_BYTES:   /* BINBYTES: a protocol-3 opcode, which Python's unpickler reads in any pickle */
        op(w, 'B');
        le(w, v->n, 4);
        emit(w, v->s, v->n);
        return 0;
    case MT_PK_LIST:
        op(w, ']');
        if (v->len) {
            op(w, '(');
            for (size_t i = 0; i < v->len; i++)
                if (w_val(w, v->items[i], depth + 1)) return -1;
            op(w, 'e');
        }
        return 0;
    case MT_PK_TUPLE:
        if (v->len > 3) op(w, '(');
        for (size_t i = 0; i < v->len; i++)
            if (w_val(w, v->items[i], depth + 1)) return -1;
        op(w, v->len == 0 ? ')' : v->len <= 3 ? (unsigned char)(0x84 + v->len) : 't');
        return 0;
    case MT_PK_DICT:
        if (v->b) {
            w_global(w, "collections.OrderedDict");
            op(w, ')');
            op(w, 'R');
        } else {
            op(w, '}');
        }
        if (w_items(w, v, depth)) return -1;
        if (v->b && v->obj && v->obj->kind == MT_PK_DICT && v->obj->len) {
            op(w, '}');
            if (w_items(w, v->obj, depth)) return -1;
            op(w, 'b');
        }
        return 0;
    case MT_PK_TENSOR: {
        const mt_pk_tensor *t = v->t;
        const char *sn = mt_pk_storage_name(t->dtype);
        if (!sn) return mt_err_set(w->e, "pickle: tensor '%s' of dtype %s, which torch has no storage type for",
                                   t->key, mt_st_dtype_name(t->dtype) ? mt_st_dtype_name(t->dtype) : "?");
        if (t->ndim < 0 || t->ndim > MT_PK_MAXDIM) return mt_err_set(w->e, "pickle: tensor '%s' of %d dimensions", t->key, t->ndim);
        w_global(w, "torch._utils._rebuild_tensor_v2");
        op(w, '(');
        op(w, '(');
        w_str(w, "storage", 7);
        char g[64];
        snprintf(g, sizeof g, "torch.%s", sn);
        w_global(w, g);
        w_str(w, t->key, strlen(t->key));
        w_str(w, "cpu", 3);
        w_int(w, t->storage_numel);
        op(w, 't');
        op(w, 'Q');
        w_int(w, t->offset);
        for (int s = 0; s < 2; s++) {
            op(w, '(');
            for (int d = 0; d < t->ndim; d++) w_int(w, s ? t->stride[d] : t->shape[d]);
            op(w, 't');
        }
        op(w, t->requires_grad ? 0x88 : 0x89);
        w_global(w, "collections.OrderedDict");
        op(w, ')');
        op(w, 'R');
        op(w, 't');
        op(w, 'R');
        return 0;
    }
    case MT_PK_OBJECT:
        w_global(w, v->s);
        op(w, ')');
        op(w, 0x81);
        if (v->obj && v->obj->kind == MT_PK_DICT) {
            op(w, '}');
            if (w_items(w, v->obj, depth)) return -1;
            op(w, 'b');
        }
        return 0;
    case MT_PK_ENUM:   /* a member by name as Python >= 3.11 writes it, getattr(class, name); else class(value) */
        if (!v->obj) return mt_err_set(w->e, "pickle: enum %s without a value", v->s);
        if (v->obj->kind == MT_PK_STR) w_global(w, "__builtin__.getattr");
        w_global(w, v->s);
        if (w_val(w, v->obj, depth + 1)) return -1;
        op(w, v->obj->kind == MT_PK_STR ? 0x86 : 0x85);
        op(w, 'R');
        return 0;
    case MT_PK_GLOBAL: w_global(w, v->s); return 0;
    case MT_PK_OPAQUE:   /* function(*args), then BUILD with the state it had */
        if (!v->obj || v->obj->kind != MT_PK_TUPLE || v->obj->len != 2)
            return mt_err_set(w->e, "pickle: %s without its arguments", v->s);
        w_global(w, v->s);
        if (w_val(w, v->obj->items[0], depth + 1)) return -1;
        op(w, 'R');
        if (v->obj->items[1]->kind != MT_PK_NONE) {
            if (w_val(w, v->obj->items[1], depth + 1)) return -1;
            op(w, 'b');
        }
        return 0;
    default: return mt_err_set(w->e, "pickle: a value of kind %d cannot be written", (int)v->kind);
    }
}

int mt_pk_dump(const mt_pk *v, unsigned char **out, size_t *n, mt_err *e)
{
    wb w = {.e = e};
    unsigned char proto[2] = {0x80, 2};
    emit(&w, proto, 2);
    if (w_val(&w, v, 0)) {
        free(w.p);
        *out = NULL;
        *n = 0;
        return -1;
    }
    op(&w, '.');
    *out = w.p;
    *n = w.n;
    return 0;
}
