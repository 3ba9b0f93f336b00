/* torch_ckpt.c: torch.save files as value trees with their tensors' bytes (torch_ckpt.h). */
#include "ckpt/torch_ckpt.h"

#include <stdlib.h>
#include <string.h>

static int load(mt_tckpt *c, mt_err *e)
{
    const mt_tzip_entry *pk = mt_tzip_find(&c->zip, "data.pkl");
    if (!pk) return mt_err_set(e, "%s: no data.pkl in the archive (not a torch.save file)", c->zip.path);
    const unsigned char *p;
    if (mt_tzip_get(&c->zip, pk, &p, e)) return -1;
    char where[1200];
    snprintf(where, sizeof where, "%s: %s", c->zip.path, pk->name);
    return mt_pk_load(&c->arena, p, (size_t)pk->size, where, &c->root, e);
}

int mt_tckpt_load(mt_tckpt *c, const char *path, mt_err *e)
{
    memset(c, 0, sizeof *c);
    if (mt_tzip_open(&c->zip, path, e)) return -1;
    if (load(c, e)) {
        mt_tckpt_close(c);
        return -1;
    }
    return 0;
}

int mt_tckpt_load_buf(mt_tckpt *c, const char *path, const void *p, size_t size, mt_err *e)
{
    memset(c, 0, sizeof *c);
    if (mt_tzip_open_buf(&c->zip, path, p, size, e)) return -1;
    if (load(c, e)) {
        mt_tckpt_close(c);
        return -1;
    }
    return 0;
}

void mt_tckpt_close(mt_tckpt *c)
{
    mt_tzip_close(&c->zip);
    mt_pk_arena_free(&c->arena);
    c->root = NULL;
}

int64_t mt_tckpt_numel(const mt_pk_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];   /* bounded by the storage when loaded */
    return n;
}

int mt_tckpt_tensor_bytes(mt_tckpt *c, const mt_pk_tensor *t, const unsigned char **p, size_t *n, mt_err *e)
{
    char name[600];
    snprintf(name, sizeof name, "data/%s", t->key);
    const mt_tzip_entry *en = mt_tzip_find(&c->zip, name);
    if (!en) return mt_err_set(e, "%s: tensor storage '%s' is not in the archive", c->zip.path, name);
    int bits = mt_st_dtype_bits(t->dtype);
    uint64_t want;
    if (t->storage_numel < 0 || __builtin_mul_overflow((uint64_t)t->storage_numel, (uint64_t)bits / 8, &want) ||
        want != en->size)
        return mt_err_set(e, "%s: entry '%s' holds %llu bytes, not %lld elements of %s", c->zip.path, en->name,
                          (unsigned long long)en->size, (long long)t->storage_numel, mt_st_dtype_name(t->dtype));
    /* contiguous: each stride the product of the sizes after it (any stride where the size is 1) */
    int64_t numel = 1, expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] < 0 || (t->shape[d] != 1 && t->stride[d] != expect))
            return mt_err_set(e, "%s: tensor of storage '%s' is not contiguous (dimension %d: size %lld stride %lld)",
                              c->zip.path, t->key, d, (long long)t->shape[d], (long long)t->stride[d]);
        if (__builtin_mul_overflow(expect, t->shape[d], &expect) || __builtin_mul_overflow(numel, t->shape[d], &numel))
            return mt_err_set(e, "%s: tensor of storage '%s' has too many elements", c->zip.path, t->key);
    }
    if (t->offset < 0 || t->offset > t->storage_numel || numel > t->storage_numel - t->offset)
        return mt_err_set(e, "%s: tensor of %lld elements at offset %lld runs past storage '%s' of %lld", c->zip.path,
                          (long long)numel, (long long)t->offset, t->key, (long long)t->storage_numel);
    const unsigned char *base;
    if (mt_tzip_get(&c->zip, en, &base, e)) return -1;
    *n = (size_t)numel * (size_t)(bits / 8);
    *p = *n ? base + (size_t)t->offset * (size_t)(bits / 8) : NULL;
    return 0;
}

int mt_tckpt_tensor_read(mt_tckpt *c, const mt_pk_tensor *t, void *dst, mt_err *e)
{
    char name[600];
    snprintf(name, sizeof name, "data/%s", t->key);
    const mt_tzip_entry *en = mt_tzip_find(&c->zip, name);
    if (!en) return mt_err_set(e, "%s: tensor storage '%s' is not in the archive", c->zip.path, name);
    size_t es = (size_t)mt_st_dtype_bits(t->dtype) / 8;
    uint64_t want;
    if (t->storage_numel < 0 || __builtin_mul_overflow((uint64_t)t->storage_numel, (uint64_t)es, &want) ||
        want != en->size)
        return mt_err_set(e, "%s: entry '%s' holds %llu bytes, not %lld elements of %s", c->zip.path, en->name,
                          (unsigned long long)en->size, (long long)t->storage_numel, mt_st_dtype_name(t->dtype));
    /* the last element the sizes and strides reach, inside the storage */
    int64_t last = t->offset, numel = 1, step;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || t->stride[d] < 0)
            return mt_err_set(e, "%s: tensor of storage '%s' has a negative size or stride", c->zip.path, t->key);
        if (__builtin_mul_overflow(numel, t->shape[d], &numel) ||
            (t->shape[d] && (__builtin_mul_overflow(t->shape[d] - 1, t->stride[d], &step) ||
                             __builtin_add_overflow(last, step, &last))))
            return mt_err_set(e, "%s: tensor of storage '%s' has too many elements", c->zip.path, t->key);
    }
    if (!numel) return 0;
    if (t->offset < 0 || last >= t->storage_numel)
        return mt_err_set(e, "%s: tensor at offset %lld reaches element %lld of storage '%s' of %lld", c->zip.path,
                          (long long)t->offset, (long long)last, t->key, (long long)t->storage_numel);
    const unsigned char *base;
    if (mt_tzip_get(&c->zip, en, &base, e)) return -1;
    /* row-major over the sizes, the source by the strides */
    int64_t idx[MT_PK_MAXDIM] = {0}, at = t->offset;
    unsigned char *out = dst;
    for (int64_t i = 0; i < numel; i++) {
        memcpy(out + (size_t)i * es, base + (size_t)at * es, es);
        for (int d = t->ndim - 1; d >= 0; d--) {
            at += t->stride[d];
            if (++idx[d] < t->shape[d]) break;
            at -= t->stride[d] * t->shape[d];
            idx[d] = 0;
        }
    }
    return 0;
}

/* Every tensor of the tree refers to a storage of st (marking it used), with its dtype, inside it. */
static int check_tensors(const mt_pk *v, const mt_tckpt_storage *st, int nst, char *used, int depth, const char *path,
                         mt_err *e)
{
    if (depth > 100) return mt_err_set(e, "%s: values nested deeper than 100", path);
    switch (v->kind) {
    case MT_PK_TENSOR: {
        const mt_pk_tensor *t = v->t;
        for (int i = 0; i < nst; i++) {
            if (strcmp(st[i].key, t->key)) continue;
            if (st[i].dtype != t->dtype || st[i].numel != t->storage_numel)
                return mt_err_set(e, "%s: a tensor of storage '%s' says %s x %lld, the storage is %s x %lld", path,
                                  t->key, mt_st_dtype_name(t->dtype), (long long)t->storage_numel,
                                  mt_st_dtype_name(st[i].dtype), (long long)st[i].numel);
            int64_t last = t->offset;
            bool empty = false;
            for (int d = 0; d < t->ndim; d++) {
                if (t->shape[d] < 0 || t->stride[d] < 0)
                    return mt_err_set(e, "%s: a tensor of storage '%s' has a negative size or stride", path, t->key);
                if (!t->shape[d]) empty = true;
                else last += (t->shape[d] - 1) * t->stride[d];
            }
            if (t->offset < 0 || (!empty && last >= t->storage_numel))
                return mt_err_set(e, "%s: a tensor reaches past storage '%s'", path, t->key);
            used[i] = 1;
            return 0;
        }
        return mt_err_set(e, "%s: a tensor refers to storage '%s', which is not given", path, t->key);
    }
    case MT_PK_DICT:
        for (size_t i = 0; i < v->len; i++)
            if (check_tensors(v->items[i], st, nst, used, depth + 1, path, e) ||
                check_tensors(v->vals[i], st, nst, used, depth + 1, path, e))
                return -1;
        return v->obj ? check_tensors(v->obj, st, nst, used, depth + 1, path, e) : 0;
    case MT_PK_LIST: case MT_PK_TUPLE:
        for (size_t i = 0; i < v->len; i++)
            if (check_tensors(v->items[i], st, nst, used, depth + 1, path, e)) return -1;
        return 0;
    case MT_PK_OBJECT: case MT_PK_ENUM: case MT_PK_OPAQUE:
        return v->obj ? check_tensors(v->obj, st, nst, used, depth + 1, path, e) : 0;
    default: return 0;
    }
}

int mt_tckpt_save(const char *path, const char *prefix, const mt_pk *root, const mt_tckpt_storage *st, int nst,
                  mt_err *e)
{
    char *used = mt_xcalloc((size_t)(nst > 0 ? nst : 1), 1);
    int rc = check_tensors(root, st, nst, used, 0, path, e);
    for (int i = 0; i < nst && !rc; i++) {
        if (!used[i]) rc = mt_err_set(e, "%s: storage '%s' is used by no tensor", path, st[i].key);
        for (int j = 0; j < i && !rc; j++)
            if (!strcmp(st[i].key, st[j].key)) rc = mt_err_set(e, "%s: storage '%s' given twice", path, st[i].key);
    }
    free(used);
    if (rc) return -1;
    unsigned char *pk;
    size_t pn;
    if (mt_pk_dump(root, &pk, &pn, e)) return mt_err_prefix(e, "%s", path);
    mt_tzip_writer w;
    if (mt_tzip_writer_open(&w, path, prefix, e)) {
        free(pk);
        return -1;
    }
    rc = mt_tzip_writer_add(&w, "data.pkl", pk, pn, e) || mt_tzip_writer_add(&w, "byteorder", "little", 6, e);
    free(pk);
    for (int i = 0; i < nst && !rc; i++) {
        char name[600];
        snprintf(name, sizeof name, "data/%s", st[i].key);
        rc = mt_tzip_writer_add(&w, name, st[i].data, (uint64_t)st[i].numel * (uint64_t)(mt_st_dtype_bits(st[i].dtype) / 8), e);
    }
    rc = rc || mt_tzip_writer_add(&w, "version", "3\n", 2, e) || mt_tzip_writer_commit(&w, e);
    if (rc) {
        mt_tzip_writer_abort(&w);
        return -1;
    }
    return 0;
}
