/* fuzz_torch_ckpt.c: a torch.save file (a Megatron-LM model_optim_rng.pt) as the C reader opens it: the
 * zip archive checked, data.pkl unpickled, then every tensor of the tree read through its storage entry.
 * An input that is not an archive is unpickled as it is (the CRC-32 of an archive's data.pkl stops most
 * mutations of its pickle); views (sizes and strides) are read element by element. A tree the writer accepts must load back from the writer's pickle and write
 * the same bytes again. */
#include "fuzz.h"

#include "ckpt/torch_ckpt.h"

static size_t budget;

static void walk(mt_tckpt *c, const mt_pk *v, int depth, unsigned *sum)
{
    if (depth > 100 || !budget) return;
    budget--;
    const unsigned char *p;
    size_t n;
    mt_err e;
    switch (v->kind) {
    case MT_PK_TENSOR: {
        /* any tensor, a view (strides) or not, of a size worth copying */
        int64_t numel = mt_tckpt_numel(v->t);
        size_t es = (size_t)mt_st_dtype_bits(v->t->dtype) / 8;
        if (numel >= 0 && numel <= (1 << 18) && es) {
            unsigned char *b = malloc((size_t)(numel ? numel : 1) * es);
            if (mt_tckpt_tensor_read(c, v->t, b, &e)) fz_refused(&e);
            else
                for (size_t i = 0; i < (size_t)numel * es; i++) *sum += b[i];
            free(b);
        }
        if (mt_tckpt_tensor_bytes(c, v->t, &p, &n, &e)) {
            fz_refused(&e);
            return;
        }
        for (size_t i = 0; i < n; i++) *sum += p[i];
        return;
    }
    case MT_PK_DICT:
        for (size_t i = 0; i < v->len; i++) {
            walk(c, v->items[i], depth + 1, sum);
            walk(c, v->vals[i], depth + 1, sum);
        }
        if (v->obj) walk(c, v->obj, depth + 1, sum);
        return;
    case MT_PK_LIST: case MT_PK_TUPLE:
        for (size_t i = 0; i < v->len; i++) walk(c, v->items[i], depth + 1, sum);
        return;
    case MT_PK_OBJECT: case MT_PK_ENUM: case MT_PK_OPAQUE:
        if (v->obj) walk(c, v->obj, depth + 1, sum);
        return;
    default: return;
    }
}

static void roundtrip(const mt_pk *root)
{
    unsigned char *pk;
    size_t n;
    mt_err e;
    if (mt_pk_dump(root, &pk, &n, &e)) {
        fz_refused(&e);
        return;
    }
    mt_pk_arena a = {0};
    mt_pk *v;
    unsigned char *pk2;
    size_t n2;
    if (mt_pk_load(&a, pk, n, "dump", &v, &e) || mt_pk_dump(v, &pk2, &n2, &e)) {
        fprintf(stderr, "the writer's pickle does not load back: %s\n", e.msg);
        abort();
    }
    if (n2 != n || memcmp(pk, pk2, n)) {
        fprintf(stderr, "the writer's pickle loads back to another tree\n");
        abort();
    }
    free(pk2);
    mt_pk_arena_free(&a);
    free(pk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mt_tckpt c;
    mt_err e;
    if (size >= 2 && data[0] == 0x80) {   /* a bare pickle */
        mt_pk_arena a = {0};
        mt_pk *v;
        if (mt_pk_load(&a, data, size, "fuzz.pkl", &v, &e)) fz_refused(&e);
        else roundtrip(v);
        mt_pk_arena_free(&a);
        return 0;
    }
    if (mt_tckpt_load_buf(&c, "fuzz.pt", data, size, &e)) return fz_refused(&e);
    unsigned sum = 0;
    budget = 1u << 20;
    walk(&c, c.root, 0, &sum);
    roundtrip(c.root);
    mt_tckpt_close(&c);
    return sum == 0xdeadbeef;   /* keeps the reads */
}
