/* torch_pickle.h: the pickles of torch.save (protocol 2) as a tree of plain values, read by a restricted
 * unpickler and written back.
 *
 * The reader runs no code: it knows the opcodes torch.save's pickles use, and builds only the objects of a
 * fixed list of globals (collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch's storage types
 * and dtypes, argparse.Namespace and types.SimpleNamespace, Megatron's enums; numpy arrays and dtypes and
 * io.BytesIO buffers (Transformer Engine's _extra_state) kept unbuilt as opaque values);
 * any other global is refused by name ("pickle global
 * os.system is not allowed"). A tensor becomes a reference to its storage (the archive's "data/<key>"
 * entry) with its dtype, offset, shape and stride. Values live in an arena freed at once, so shared
 * values (the pickle's memo) and even cycles need no ownership; the stack, the memo and the nesting of
 * values walked by the writer are bounded. The writer emits what torch.load reads back: tensors as
 * _rebuild_tensor_v2 over persistent ids ('storage', <type>, key, 'cpu', numel).
 */
#ifndef MT_CKPT_TORCH_PICKLE_H
#define MT_CKPT_TORCH_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"
#include "util/err.h"

#define MT_PK_MAXDIM 16

typedef enum mt_pk_kind {
    MT_PK_NONE, MT_PK_BOOL, MT_PK_INT, MT_PK_BIGINT, MT_PK_FLOAT, MT_PK_STR, MT_PK_BYTES, MT_PK_LIST,
    MT_PK_TUPLE, MT_PK_DICT, MT_PK_TENSOR,
    MT_PK_OBJECT,   /* argparse.Namespace, types.SimpleNamespace: type name s, attributes in the dict obj */
    MT_PK_ENUM,     /* an enum member: class name s, value obj (Megatron's enums) */
    MT_PK_GLOBAL,   /* a global used as a value: name s ("torch.bfloat16") */
    MT_PK_OPAQUE,   /* a numpy array or dtype (a Megatron checkpoint's RNG state) or an io.BytesIO (Transformer
                       Engine's _extra_state), never built: s the function
                       pickle names (numpy's _reconstruct, numpy.dtype), obj a tuple (its arguments, the state
                       BUILD gave it or None); written back the same way */
    MT_PK_STORAGE,  /* internal: a persistent id while unpickling */
} mt_pk_kind;

typedef struct mt_pk_tensor {
    char *key;               /* the storage's entry: "data/<key>" */
    mt_st_dtype dtype;
    int64_t storage_numel;   /* elements of the storage */
    int64_t offset;          /* in elements */
    int ndim;
    int64_t shape[MT_PK_MAXDIM], stride[MT_PK_MAXDIM];
    bool requires_grad;
} mt_pk_tensor;

typedef struct mt_pk mt_pk;
struct mt_pk {
    mt_pk_kind kind;
    bool b;          /* bool; dict: an OrderedDict */
    int64_t i;
    double f;
    char *s;         /* str (UTF-8, NUL-terminated), bytes, bigint (little-endian two's complement), names */
    size_t n;        /* bytes of s */
    mt_pk **items;   /* list, tuple; dict: keys */
    mt_pk **vals;    /* dict: values */
    size_t len, cap;
    mt_pk *obj;      /* object: its attributes (a dict); enum: its value */
    mt_pk_tensor *t;
};

/* Where values live. */
typedef struct mt_pk_arena {
    struct mt_pk_block *head;
} mt_pk_arena;
void mt_pk_arena_free(mt_pk_arena *a);

/* Builders (all in the arena). */
mt_pk *mt_pk_new(mt_pk_arena *a, mt_pk_kind kind);
mt_pk *mt_pk_int(mt_pk_arena *a, int64_t v);
mt_pk *mt_pk_float(mt_pk_arena *a, double v);
mt_pk *mt_pk_bool(mt_pk_arena *a, bool v);
mt_pk *mt_pk_str(mt_pk_arena *a, const char *s);
mt_pk *mt_pk_bytes(mt_pk_arena *a, const void *p, size_t n);   /* a copy of n bytes */
mt_pk *mt_pk_named(mt_pk_arena *a, mt_pk_kind kind, const char *name);
mt_pk *mt_pk_tensor_new(mt_pk_arena *a, const char *key, mt_st_dtype dt, int64_t storage_numel, int64_t offset,
                        int ndim, const int64_t *shape);   /* contiguous strides */
void mt_pk_append(mt_pk_arena *a, mt_pk *list, mt_pk *v);
/* Sets key to v in a dict (replacing the value of an equal key, keeping its place). */
void mt_pk_set(mt_pk_arena *a, mt_pk *dict, mt_pk *key, mt_pk *v);
void mt_pk_sets(mt_pk_arena *a, mt_pk *dict, const char *key, mt_pk *v);
/* The value of the str key in a dict (or an object's attributes), or NULL. */
const mt_pk *mt_pk_get(const mt_pk *dict, const char *key);

/* The value that n bytes of pickle hold; errors name where ("<where>: pickle offset N: ..."). */
int mt_pk_load(mt_pk_arena *a, const void *p, size_t n, const char *where, mt_pk **out, mt_err *e);

/* Protocol-2 pickle bytes of v (malloc'ed into *out, *n). Fails on values nested deeper than 100 or a
 * tree of more than 2^22 nodes (shared values counted each time). */
int mt_pk_dump(const mt_pk *v, unsigned char **out, size_t *n, mt_err *e);

/* The storage type ("FloatStorage") of a dtype and back (-1: none). */
const char *mt_pk_storage_name(mt_st_dtype d);
int mt_pk_storage_dtype(const char *storage_name);

#endif
