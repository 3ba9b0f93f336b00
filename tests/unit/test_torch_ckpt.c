/* test_torch_ckpt.c: torch.save files in C (ckpt/torch_zip.h, torch_pickle.h, torch_ckpt.h): CRC-32, the
 * writer's archive read back (alignment, names, zip64 end records), the unpickler's opcodes and its
 * refusals (globals outside the allowlist, truncation, damaged archives). Two modes for
 * tests/pipeline/torch-ckpt.sh, which compares them with torch itself:
 *   test_torch_ckpt --dump FILE    prints the value tree of a .pt, one line per value, tensors' bytes in hex
 *   test_torch_ckpt --write FILE   writes a fixed Megatron-like checkpoint and prints its tree the same way
 */
#include <inttypes.h>
#include <stdint.h>
#include <unistd.h>

#include "ckpt/torch_ckpt.h"
#include "t.h"

/* ---- the listing (tests/pipeline/torch-ckpt.sh prints the same from torch.load's objects) ---- */

static void esc(FILE *f, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c > 0x20 && c < 0x7f && c != '\\') fputc(c, f);
        else fprintf(f, "\\x%02x", c);
    }
}

/* Python's hex() of an integer given as little-endian two's complement bytes. */
static void hexint(FILE *f, const unsigned char *b, size_t n)
{
    unsigned char m[512];
    if (n > sizeof m) n = sizeof m;
    int neg = n && (b[n - 1] & 0x80);
    unsigned carry = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned v = neg ? (unsigned)(unsigned char)~b[i] + carry : b[i];
        m[i] = (unsigned char)v;
        carry = neg ? v >> 8 : 0;
    }
    size_t k = n;
    while (k > 0 && !m[k - 1]) k--;
    fprintf(f, "%s0x", neg ? "-" : "");
    if (!k) fputc('0', f);
    for (size_t i = k; i-- > 0;) fprintf(f, i == k - 1 ? "%x" : "%02x", m[i]);
}

typedef struct lister {
    FILE *f;
    mt_tckpt *c;                       /* tensors' bytes from the archive, or from the storages: */
    const mt_tckpt_storage *st;
    int nst;
    char keys[64][64];                 /* storage keys in order of first sight */
    int nkeys;
} lister;

static int sid(lister *l, const char *key)
{
    for (int i = 0; i < l->nkeys; i++)
        if (!strcmp(l->keys[i], key)) return i;
    if (l->nkeys == 64) return -1;
    snprintf(l->keys[l->nkeys], sizeof l->keys[0], "%s", key);
    return l->nkeys++;
}

static int list_val(lister *l, const char *path, const mt_pk *v, mt_err *e);

static int list_children(lister *l, const char *path, const mt_pk *d, const char *sep, mt_err *e)
{
    for (size_t i = 0; i < d->len; i++) {
        char *p;
        size_t pn;
        FILE *m = open_memstream(&p, &pn);
        fputs(path, m);
        fputs(sep, m);
        const mt_pk *k = d->items[i];
        if (k->kind == MT_PK_STR) esc(m, k->s, k->n);
        else if (k->kind == MT_PK_INT) fprintf(m, "#%" PRId64, k->i);
        else fputs("?", m);
        fclose(m);
        int rc = list_val(l, p, d->vals[i], e);
        free(p);
        if (rc) return -1;
    }
    return 0;
}

static int list_val(lister *l, const char *path, const mt_pk *v, mt_err *e)
{
    FILE *f = l->f;
    fprintf(f, "%s ", path);
    switch (v->kind) {
    case MT_PK_NONE: fputs("none\n", f); return 0;
    case MT_PK_BOOL: fprintf(f, "bool %d\n", v->b); return 0;
    case MT_PK_INT: {
        unsigned char b[8];
        for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)v->i >> (8 * i));
        fputs("int ", f);
        hexint(f, b, 8);
        fputc('\n', f);
        return 0;
    }
    case MT_PK_BIGINT:
        fputs("int ", f);
        hexint(f, (const unsigned char *)v->s, v->n);
        fputc('\n', f);
        return 0;
    case MT_PK_FLOAT: {
        uint64_t bits;
        memcpy(&bits, &v->f, 8);
        fprintf(f, "float %016" PRIx64 "\n", bits);
        return 0;
    }
    case MT_PK_STR: fputs("str ", f); esc(f, v->s, v->n); fputc('\n', f); return 0;
    case MT_PK_BYTES:
        fputs("bytes ", f);
        for (size_t i = 0; i < v->n; i++) fprintf(f, "%02x", (unsigned char)v->s[i]);
        fputc('\n', f);
        return 0;
    case MT_PK_GLOBAL: fprintf(f, "global %s\n", v->s); return 0;
    case MT_PK_STORAGE: fputs("storage\n", f); return 0;
    case MT_PK_ENUM:
        fprintf(f, "enum %s ", v->s);
        if (v->obj->kind == MT_PK_STR) esc(f, v->obj->s, v->obj->n);
        else fprintf(f, "%" PRId64, v->obj->i);
        fputc('\n', f);
        return 0;
    case MT_PK_LIST: case MT_PK_TUPLE: {
        fprintf(f, "%s %zu\n", v->kind == MT_PK_LIST ? "list" : "tuple", v->len);
        for (size_t i = 0; i < v->len; i++) {
            char p[4096];
            snprintf(p, sizeof p, "%s[%zu]", path, i);
            if (list_val(l, p, v->items[i], e)) return -1;
        }
        return 0;
    }
    case MT_PK_DICT:
        fprintf(f, "%s %zu\n", v->b ? "odict" : "dict", v->len);
        if (list_children(l, path, v, "/", e)) return -1;
        if (v->obj && v->obj->len) {
            char p[4096];
            snprintf(p, sizeof p, "%s@", path);
            return list_val(l, p, v->obj, e);
        }
        return 0;
    case MT_PK_OPAQUE: {   /* the function, its arguments "()" and its state "~" */
        char p[4096];
        fprintf(f, "opaque %s\n", v->s);
        snprintf(p, sizeof p, "%s()", path);
        if (list_val(l, p, v->obj->items[0], e)) return -1;
        snprintf(p, sizeof p, "%s~", path);
        return list_val(l, p, v->obj->items[1], e);
    }
    case MT_PK_OBJECT:
        fprintf(f, "object %s %zu\n", v->s, v->obj->len);
        return list_children(l, path, v->obj, ".", e);
    case MT_PK_TENSOR: {
        const mt_pk_tensor *t = v->t;
        fprintf(f, "tensor %s sid=%d numel=%" PRId64 " off=%" PRId64 " shape=[", mt_st_dtype_name(t->dtype),
                sid(l, t->key), t->storage_numel, t->offset);
        for (int d = 0; d < t->ndim; d++) fprintf(f, "%s%" PRId64, d ? "," : "", t->shape[d]);
        fputs("] stride=[", f);
        for (int d = 0; d < t->ndim; d++) fprintf(f, "%s%" PRId64, d ? "," : "", t->stride[d]);
        fprintf(f, "] rg=%d ", t->requires_grad);
        const unsigned char *p = NULL;
        size_t n = 0;
        if (l->c) {
            if (mt_tckpt_tensor_bytes(l->c, t, &p, &n, e)) return -1;
        } else {
            for (int i = 0; i < l->nst; i++)
                if (!strcmp(l->st[i].key, t->key)) {
                    int es = mt_st_dtype_bits(t->dtype) / 8;
                    p = (const unsigned char *)l->st[i].data + t->offset * es;
                    n = (size_t)(mt_tckpt_numel(t) * es);
                }
        }
        if (!n) fputc('-', f);
        for (size_t i = 0; i < n; i++) fprintf(f, "%02x", p[i]);
        fputc('\n', f);
        return 0;
    }
    }
    return 0;
}

/* ---- the fixed checkpoint of --write ---- */

typedef struct fixed {
    mt_pk_arena a;
    mt_pk *root;
    float w[6];
    uint16_t bf[8], half;
    int64_t ids[3];
    float shared[5];
    mt_tckpt_storage st[5];
} fixed;

static void make_fixed(fixed *x)
{
    memset(x, 0, sizeof *x);
    mt_pk_arena *a = &x->a;
    for (int i = 0; i < 6; i++) x->w[i] = (float)(i - 2) * 0.375f;
    for (int i = 0; i < 8; i++) x->bf[i] = (uint16_t)(0x3f80 + 16 * i);
    x->half = 0x3e00;   /* 1.5 */
    x->ids[0] = -1, x->ids[1] = INT64_MAX, x->ids[2] = (int64_t)1 << 40;
    for (int i = 0; i < 5; i++) x->shared[i] = 1.0f / (float)(i + 3);
    x->st[0] = (mt_tckpt_storage){"0", MT_ST_F32, 6, x->w};
    x->st[1] = (mt_tckpt_storage){"1", MT_ST_BF16, 8, x->bf};
    x->st[2] = (mt_tckpt_storage){"2", MT_ST_F16, 1, &x->half};
    x->st[3] = (mt_tckpt_storage){"3", MT_ST_I64, 3, x->ids};
    x->st[4] = (mt_tckpt_storage){"4", MT_ST_F32, 5, x->shared};
    mt_pk *model = mt_pk_new(a, MT_PK_DICT);
    model->b = true;
    mt_pk_sets(a, model, "language_model.embedding.word_embeddings.weight",
               mt_pk_tensor_new(a, "0", MT_ST_F32, 6, 0, 2, (int64_t[]){2, 3}));
    mt_pk_sets(a, model, "bf16.view", mt_pk_tensor_new(a, "1", MT_ST_BF16, 8, 3, 1, (int64_t[]){4}));
    mt_pk_sets(a, model, "half.scalar", mt_pk_tensor_new(a, "2", MT_ST_F16, 1, 0, 0, NULL));
    mt_pk_sets(a, model, "ids", mt_pk_tensor_new(a, "3", MT_ST_I64, 3, 0, 1, (int64_t[]){3}));
    mt_pk_sets(a, model, "shared.a", mt_pk_tensor_new(a, "4", MT_ST_F32, 5, 0, 1, (int64_t[]){5}));
    mt_pk_sets(a, model, "shared.b", mt_pk_tensor_new(a, "4", MT_ST_F32, 5, 2, 2, (int64_t[]){1, 2}));
    mt_pk_sets(a, model, "empty", mt_pk_tensor_new(a, "4", MT_ST_F32, 5, 5, 2, (int64_t[]){0, 3}));
    mt_pk *meta = mt_pk_new(a, MT_PK_DICT), *ver = mt_pk_new(a, MT_PK_DICT);
    meta->b = true;
    mt_pk_sets(a, ver, "version", mt_pk_int(a, 1));
    mt_pk_sets(a, meta, "", ver);
    model->obj = mt_pk_new(a, MT_PK_DICT);
    mt_pk_sets(a, model->obj, "_metadata", meta);

    mt_pk *args = mt_pk_named(a, MT_PK_OBJECT, "argparse.Namespace");
    args->obj = mt_pk_new(a, MT_PK_DICT);
    mt_pk_sets(a, args->obj, "num_layers", mt_pk_int(a, 24));
    mt_pk_sets(a, args->obj, "lr", mt_pk_float(a, 1.5e-4));
    mt_pk_sets(a, args->obj, "tokenizer_type", mt_pk_str(a, "GPT2BPETokenizer"));
    mt_pk_sets(a, args->obj, "unicode", mt_pk_str(a, "\xc3\xbcn\xc3\xaf" "code \xe2\x9c\x93"));
    mt_pk *split = mt_pk_new(a, MT_PK_LIST);
    mt_pk_append(a, split, mt_pk_int(a, 969));
    mt_pk_append(a, split, mt_pk_int(a, -30));
    mt_pk_append(a, split, mt_pk_new(a, MT_PK_NONE));
    mt_pk_sets(a, args->obj, "split", split);
    mt_pk_sets(a, args->obj, "load", mt_pk_new(a, MT_PK_NONE));
    mt_pk_sets(a, args->obj, "bf16", mt_pk_bool(a, true));
    mt_pk_sets(a, args->obj, "fp16", mt_pk_bool(a, false));
    mt_pk_sets(a, args->obj, "params_dtype", mt_pk_named(a, MT_PK_GLOBAL, "torch.bfloat16"));
    mt_pk *mt = mt_pk_named(a, MT_PK_ENUM, "megatron.core.enums.ModelType");
    mt->obj = mt_pk_str(a, "encoder_or_decoder");
    mt_pk_sets(a, args->obj, "model_type", mt);

    mt_pk *root = x->root = mt_pk_new(a, MT_PK_DICT);
    mt_pk_sets(a, root, "args", args);
    mt_pk_sets(a, root, "checkpoint_version", mt_pk_float(a, 3.0));
    mt_pk_sets(a, root, "iteration", mt_pk_int(a, 2000));
    mt_pk_sets(a, root, "model", model);
    mt_pk *big = mt_pk_new(a, MT_PK_BIGINT);   /* -2**70 + 5 */
    static const char bigb[9] = {5, 0, 0, 0, 0, 0, 0, 0, (char)0xc0};
    big->s = (char *)bigb;
    big->n = 9;
    mt_pk_sets(a, root, "big", big);
    mt_pk_sets(a, root, "min", mt_pk_int(a, INT64_MIN));
    mt_pk *tup = mt_pk_new(a, MT_PK_TUPLE);
    for (int i = 0; i < 5; i++) mt_pk_append(a, tup, mt_pk_int(a, 1000 * i * i - 70000));
    mt_pk *nested = mt_pk_new(a, MT_PK_DICT);
    mt_pk_sets(a, nested, "tuple", tup);
    mt_pk_set(a, nested, mt_pk_int(a, 7), mt_pk_str(a, ""));
    mt_pk *by = mt_pk_new(a, MT_PK_BYTES);
    by->s = "\x00\xffz";
    by->n = 3;
    mt_pk_sets(a, nested, "bytes", by);
    mt_pk_sets(a, root, "nested", nested);
}

static char *listing(mt_tckpt *c, const fixed *x, const mt_pk *root, mt_err *e)
{
    char *p;
    size_t n;
    lister l = {.c = c, .st = x ? x->st : NULL, .nst = x ? 5 : 0};
    l.f = open_memstream(&p, &n);
    int rc = list_val(&l, "$", root, e);
    fclose(l.f);
    if (rc) {
        free(p);
        return NULL;
    }
    return p;
}

/* ---- cases ---- */

TEST(crc32_check_value)
{
    T_EQ_INT(mt_crc32(0, "123456789", 9), 0xCBF43926u);
    T_EQ_INT(mt_crc32(mt_crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
    T_EQ_INT(mt_crc32(0, "", 0), 0);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

TEST(write_then_read_back)
{
    fixed x;
    make_fixed(&x);
    mt_err e = {{0}};
    const char *p = t_path("fixed.pt");
    T_EQ_INT(mt_tckpt_save(p, "fixed", x.root, x.st, 5, &e), 0);
    if (t_failed_case) T_FAILF("%s", e.msg);
    char *want = listing(NULL, &x, x.root, &e);
    mt_tckpt c;
    T_EQ_INT(mt_tckpt_load(&c, p, &e), 0);
    if (t_failed_case) {
        T_FAILF("%s", e.msg);
        free(want);
        mt_pk_arena_free(&x.a);
        return;
    }
    char *got = listing(&c, NULL, c.root, &e);
    T_CHECK(got != NULL);
    if (got) T_EQ_STR(got, want);
    /* entries as torch writes them: names under the prefix, data at multiples of 64 */
    T_EQ_INT(c.zip.n, 8);
    for (int i = 0; i < c.zip.n; i++) {
        T_CHECK(!strncmp(c.zip.e[i].name, "fixed/", 6));
        T_EQ_INT(c.zip.e[i].data % 64, 0);
    }
    T_CHECK(mt_tzip_find(&c.zip, "version") && mt_tzip_find(&c.zip, "data/4") && !mt_tzip_find(&c.zip, "data/5"));
    const mt_pk *sb = mt_pk_get(mt_pk_get(c.root, "model"), "shared.b");
    const unsigned char *b;
    size_t n;
    T_CHECK(sb && sb->kind == MT_PK_TENSOR);
    if (sb) {
        T_EQ_INT(mt_tckpt_tensor_bytes(&c, sb->t, &b, &n, &e), 0);
        T_EQ_INT(n, 8);
        if (n == 8) T_CHECK(!memcmp(b, x.shared + 2, 8));
    }
    T_CHECK(mt_pk_get(mt_pk_get(c.root, "args"), "lr")->f == 1.5e-4);
    free(got);
    free(want);
    mt_tckpt_close(&c);
    mt_pk_arena_free(&x.a);
}

TEST(writer_refuses_bad_trees)
{
    fixed x;
    make_fixed(&x);
    mt_err e = {{0}};
    const char *p = t_path("bad.pt");
    T_EQ_INT(mt_tckpt_save(p, "a", x.root, x.st, 4, &e), -1);   /* storage "4" missing */
    T_CHECK(strstr(e.msg, "storage '4', which is not given") != NULL);
    x.st[4].numel = 4;
    T_EQ_INT(mt_tckpt_save(p, "a", x.root, x.st, 5, &e), -1);
    T_CHECK(strstr(e.msg, "the storage is F32 x 4") != NULL);
    T_CHECK(access(p, F_OK) != 0);
    mt_pk_arena_free(&x.a);
}

static int load_pickle(const char *pk, size_t n, mt_pk_arena *a, mt_pk **v, mt_err *e)
{
    return mt_pk_load(a, pk, n, "p", v, e);
}
#define PK(s) s, sizeof s - 1

TEST(unpickler_refuses_globals)
{
    mt_pk_arena a = {0};
    mt_pk *v;
    mt_err e = {{0}};
    T_EQ_INT(load_pickle(PK("\x80\x02" "cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03."), &a, &v, &e), -1);
    T_EQ_STR(e.msg, "p: pickle offset 2: pickle global os.system is not allowed");
    T_EQ_INT(load_pickle(PK("\x80\x04\x8c\x08" "builtins\x8c\x04" "eval\x93."), &a, &v, &e), -1);
    T_CHECK(strstr(e.msg, "pickle global builtins.eval is not allowed") != NULL);
    T_EQ_INT(load_pickle(PK("cmegatron.core.enums\nModelType.__class__\n."), &a, &v, &e), -1);
    T_CHECK(strstr(e.msg, "is not allowed") != NULL);
    T_EQ_INT(load_pickle(PK("ctorch\nTensor\n."), &a, &v, &e), -1);
    T_EQ_INT(load_pickle(PK("ctorch\nbfloat16\n."), &a, &v, &e), 0);
    T_CHECK(v->kind == MT_PK_GLOBAL && !strcmp(v->s, "torch.bfloat16"));
    /* an allowed global called as something else */
    T_EQ_INT(load_pickle(PK("ccollections\nOrderedDict\nK\x01\x85R."), &a, &v, &e), -1);
    T_CHECK(strstr(e.msg, "REDUCE of collections.OrderedDict with these arguments is not supported") != NULL);
    mt_pk_arena_free(&a);
}

TEST(unpickler_opcodes)
{
    mt_pk_arena a = {0};
    mt_pk *v;
    mt_err e = {{0}};
    /* ints of every width, LONG1 that fits and one that does not, floats, the memo */
    T_EQ_INT(load_pickle(PK("\x80\x02](K\xffM\x01\x01J\xfe\xff\xff\xff\x8a\x01\xff\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01"
                            "\x8a\x00G\x3f\xf8\x00\x00\x00\x00\x00\x00q\x05h\x05\x88\x89Ne."), &a, &v, &e), 0);
    if (t_failed_case) T_FAILF("%s", e.msg);
    T_CHECK(v->kind == MT_PK_LIST && v->len == 11);
    if (v->kind == MT_PK_LIST && v->len == 11) {
        T_EQ_INT(v->items[0]->i, 255);
        T_EQ_INT(v->items[1]->i, 257);
        T_EQ_INT(v->items[2]->i, -2);
        T_EQ_INT(v->items[3]->i, -1);
        T_CHECK(v->items[4]->kind == MT_PK_BIGINT && v->items[4]->n == 9);
        T_CHECK(v->items[5]->kind == MT_PK_INT && v->items[5]->i == 0);
        T_CHECK(v->items[6]->f == 1.5 && v->items[7] == v->items[6]);
        T_CHECK(v->items[8]->b && !v->items[9]->b && v->items[10]->kind == MT_PK_NONE);
    }
    /* dicts keep their order and replace equal keys in place; tuples of each size */
    T_EQ_INT(load_pickle(PK("}(X\x01\x00\x00\x00" "bK\x01X\x01\x00\x00\x00" "aK\x02X\x01\x00\x00\x00" "bK\x03u"
                            "X\x01\x00\x00\x00t(K\x01K\x02K\x03K\x04tK\x09\x86s."), &a, &v, &e), 0);
    if (t_failed_case) T_FAILF("%s", e.msg);
    T_CHECK(v && v->kind == MT_PK_DICT && v->len == 3);
    if (v && v->len == 3) {
        T_CHECK(!strcmp(v->items[0]->s, "b") && v->vals[0]->i == 3 && !strcmp(v->items[1]->s, "a"));
        T_CHECK(v->vals[2]->kind == MT_PK_TUPLE && v->vals[2]->len == 2 && v->vals[2]->items[0]->len == 4);
    }
    /* refusals: each names what is wrong */
    static const struct { const char *pk; size_t n; const char *want; } bad[] = {
        {PK("h\x03."), "memo index 3 was never set"},
        {PK("K\x01K\x02s."), "stack underflow"},
        {PK("]K\x01K\x02s."), "SETITEM on a value that is not a dict"},
        {PK("X\xff\xff\x00\x00" "ab."), "runs past the end"},
        {PK("K\x01r\x00\x00\x00\x80."), "memo index 2147483648 over the limit"},
        {PK("(K\x01."), "pickle offset 3"},
        {PK("\xffN."), "opcode 0xff is not supported"},
        {PK("K\x01"), "truncated"},
        {PK("ctorch\nFloatStorage\n."), ""},   /* allowed as a value */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = load_pickle(bad[i].pk, bad[i].n, &a, &v, &e);
        if (!*bad[i].want) {
            if (rc) T_FAILF("case %zu: %s", i, e.msg);
        } else if (!rc && strcmp(bad[i].want, "pickle offset 3")) {
            T_FAILF("case %zu: accepted", i);
        } else if (!rc ? 0 : !strstr(e.msg, bad[i].want)) {
            T_FAILF("case %zu: \"%s\" lacks \"%s\"", i, e.msg, bad[i].want);
        }
    }
    mt_pk_arena_free(&a);
}

/* A tensor's persistent id and arguments: (storage 'k' of FloatStorage x numel, offset, shape, stride). */
TEST(tensor_bounds)
{
    mt_pk_arena a = {0};
    mt_pk *v;
    mt_err e = {{0}};
    /* shape (2,3) stride (3,1) at offset 1 in a storage of 6: reaches element 6 */
    const char pk[] = "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
                      "X\x01\x00\x00\x00kX\x03\x00\x00\x00" "cpuK\x06tQK\x01K\x02K\x03\x86K\x03K\x01\x86\x89}tR.";
    T_EQ_INT(load_pickle(pk, sizeof pk - 1, &a, &v, &e), -1);
    T_CHECK(strstr(e.msg, "reaches past its 6 elements") != NULL);
    char ok[sizeof pk];
    memcpy(ok, pk, sizeof pk);
    char *q = memmem(ok, sizeof pk - 1, "QK\x01", 3);
    T_CHECK(q != NULL);
    if (q) q[2] = 0;   /* offset 0 */
    T_EQ_INT(load_pickle(ok, sizeof pk - 1, &a, &v, &e), 0);
    T_CHECK(v && v->kind == MT_PK_TENSOR && v->t->ndim == 2 && v->t->stride[0] == 3 && !strcmp(v->t->key, "k"));
    /* every prefix of a valid pickle is refused, none read past its end (ASan builds check) */
    for (size_t n = 0; n + 1 < sizeof pk - 1; n++) {
        char *cut = malloc(n ? n : 1);
        memcpy(cut, ok, n);
        if (!load_pickle(cut, n, &a, &v, &e)) T_FAILF("prefix of %zu bytes accepted", n);
        free(cut);
    }
    mt_pk_arena_free(&a);
}

TEST(damaged_archives)
{
    fixed x;
    make_fixed(&x);
    mt_err e = {{0}};
    const char *p = t_path("d.pt");
    T_EQ_INT(mt_tckpt_save(p, "d", x.root, x.st, 5, &e), 0);
    size_t n = 0;
    unsigned char *b = slurp(p, &n);
    if (!b || n < 100) {
        T_FAILF("cannot read %s back", p);
        return;
    }
    mt_tckpt c;
    /* every cut refused with the name first */
    for (size_t k = 0; k < n; k += 7) {
        if (!mt_tckpt_load_buf(&c, "cut.pt", b, k, &e)) {
            T_FAILF("cut at %zu accepted", k);
            mt_tckpt_close(&c);
        } else if (strncmp(e.msg, "cut.pt: ", 8) || strchr(e.msg, '\n')) {
            T_FAILF("cut at %zu: %s", k, e.msg);
        }
    }
    /* a data byte flipped: the CRC-32 of its entry */
    const char *mark = memmem(b, n, "GPT2BPE", 7);
    T_CHECK(mark != NULL);
    b[mark - (char *)b] ^= 1;
    T_EQ_INT(mt_tckpt_load_buf(&c, "flip.pt", b, n, &e), -1);
    T_CHECK(strstr(e.msg, "flip.pt: offset ") && strstr(e.msg, "CRC-32"));
    b[mark - (char *)b] ^= 1;
    /* a method of 8 in the central directory */
    unsigned char *cd = memmem(b, n, "PK\x01\x02", 4);
    T_CHECK(cd != NULL);
    cd[10] = 8;
    T_EQ_INT(mt_tckpt_load_buf(&c, "z.pt", b, n, &e), -1);
    T_CHECK(strstr(e.msg, "is compressed (method 8)") != NULL);
    cd[10] = 0;
    T_EQ_INT(mt_tckpt_load_buf(&c, "z.pt", b, n, &e), 0);
    mt_tckpt_close(&c);
    /* the central directory's offset past the end */
    b[n - 3] = 0xff;
    T_EQ_INT(mt_tckpt_load_buf(&c, "z.pt", b, n, &e), -1);
    T_CHECK(strstr(e.msg, "central directory") != NULL);
    free(b);
    mt_pk_arena_free(&x.a);
}

TEST(zip64_end_records)
{
    /* 65536 entries: more than the end record counts, so the writer adds the zip64 records */
    mt_tzip_writer w;
    mt_err e = {{0}};
    const char *p = t_path("many.zip");
    T_EQ_INT(mt_tzip_writer_open(&w, p, "m", &e), 0);
    for (int i = 0; i < 65536 && !t_failed_case; i++) {
        char name[32];
        snprintf(name, sizeof name, "%d", i);
        T_EQ_INT(mt_tzip_writer_add(&w, name, name, strlen(name), &e), 0);
    }
    T_EQ_INT(mt_tzip_writer_commit(&w, &e), 0);
    mt_tzip z;
    T_EQ_INT(mt_tzip_open(&z, p, &e), 0);
    if (t_failed_case) {
        T_FAILF("%s", e.msg);
        return;
    }
    T_EQ_INT(z.n, 65536);
    const mt_tzip_entry *en = mt_tzip_find(&z, "65535");
    const unsigned char *d;
    T_CHECK(en && !mt_tzip_get(&z, en, &d, &e) && en->size == 5 && !memcmp(d, "65535", 5));
    mt_tzip_close(&z);
}

TEST(tensor_bytes_contiguous_only)
{
    fixed x;
    make_fixed(&x);
    mt_err e = {{0}};
    const char *p = t_path("nc.pt");
    mt_pk *t = (mt_pk *)mt_pk_get(mt_pk_get(x.root, "model"), "language_model.embedding.word_embeddings.weight");
    t->t->stride[0] = 1, t->t->stride[1] = 2;   /* a transpose */
    T_EQ_INT(mt_tckpt_save(p, "nc", x.root, x.st, 5, &e), 0);
    mt_tckpt c;
    T_EQ_INT(mt_tckpt_load(&c, p, &e), 0);
    const unsigned char *b;
    size_t n;
    const mt_pk *ct = mt_pk_get(mt_pk_get(c.root, "model"), "language_model.embedding.word_embeddings.weight");
    T_EQ_INT(mt_tckpt_tensor_bytes(&c, ct->t, &b, &n, &e), -1);
    T_CHECK(strstr(e.msg, "is not contiguous (dimension 1: size 3 stride 2)") != NULL);
    mt_tckpt_close(&c);
    mt_pk_arena_free(&x.a);
}

int main(int argc, char **argv)
{
    if (argc == 3 && (!strcmp(argv[1], "--dump") || !strcmp(argv[1], "--write"))) {
        mt_err e = {{0}};
        char *text;
        if (!strcmp(argv[1], "--dump")) {
            mt_tckpt c;
            if (mt_tckpt_load(&c, argv[2], &e) || !(text = listing(&c, NULL, c.root, &e))) {
                if (c.root) mt_tckpt_close(&c);
                fprintf(stderr, "test_torch_ckpt: %s\n", e.msg);
                return 1;
            }
            mt_tckpt_close(&c);
        } else {
            fixed x;
            make_fixed(&x);
            if (mt_tckpt_save(argv[2], "fixed", x.root, x.st, 5, &e) || !(text = listing(NULL, &x, x.root, &e))) {
                fprintf(stderr, "test_torch_ckpt: %s\n", e.msg);
                return 1;
            }
            mt_pk_arena_free(&x.a);
        }
        fputs(text, stdout);
        free(text);
        return 0;
    }
    t_bin = "test_torch_ckpt";
    t_tmpdir();
    RUN(crc32_check_value);
    RUN(write_then_read_back);
    RUN(writer_refuses_bad_trees);
    RUN(unpickler_refuses_globals);
    RUN(unpickler_opcodes);
    RUN(tensor_bounds);
    RUN(damaged_archives);
    RUN(zip64_end_records);
    RUN(tensor_bytes_contiguous_only);
    t_tmpdir_remove();
    return t_total_failed ? 1 : 0;
}
