/* torch_ckpt.h: a torch.save file (.pt, e.g. Megatron-LM's model_optim_rng.pt) loaded into the value
 * tree of torch_pickle.h over its archive (torch_zip.h), the bytes of its tensors, and the writing of a
 * value tree with the storages its tensors refer to.
 */
#ifndef MT_CKPT_TORCH_CKPT_H
#define MT_CKPT_TORCH_CKPT_H

#include "ckpt/torch_pickle.h"
#include "ckpt/torch_zip.h"

typedef struct mt_tckpt {
    mt_tzip zip;
    mt_pk_arena arena;
    mt_pk *root;
} mt_tckpt;

/* Opens path (a file), or size bytes at p the caller keeps (path names them), and unpickles data.pkl. */
int mt_tckpt_load(mt_tckpt *c, const char *path, mt_err *e);
int mt_tckpt_load_buf(mt_tckpt *c, const char *path, const void *p, size_t size, mt_err *e);
void mt_tckpt_close(mt_tckpt *c);

/* The bytes of a tensor of the tree (*p NULL when it has no elements): its storage entry found, of the
 * size its element count says, the tensor contiguous and inside it. */
int mt_tckpt_tensor_bytes(mt_tckpt *c, const mt_pk_tensor *t, const unsigned char **p, size_t *n, mt_err *e);
/* The elements of a tensor of the tree, contiguous or not (a view of a larger storage, e.g. a transposed
 * slice), copied in row-major order into dst (numel elements of its dtype): sizes and strides checked to
 * stay inside its storage entry. */
int mt_tckpt_tensor_read(mt_tckpt *c, const mt_pk_tensor *t, void *dst, mt_err *e);
/* Elements of a tensor (1 for a scalar). */
int64_t mt_tckpt_numel(const mt_pk_tensor *t);

/* One storage to write: "data/<key>" holding numel elements of dtype. */
typedef struct mt_tckpt_storage {
    const char *key;
    mt_st_dtype dtype;
    int64_t numel;
    const void *data;
} mt_tckpt_storage;

/* Writes root as path's data.pkl under the archive name prefix ("archive"), with the storages and the
 * records torch.save writes (version 3, byteorder little). Every tensor of root must refer to one of the
 * storages, with its dtype and inside its elements; every storage must be used. */
int mt_tckpt_save(const char *path, const char *prefix, const mt_pk *root, const mt_tckpt_storage *st, int nst,
                  mt_err *e);

#endif
