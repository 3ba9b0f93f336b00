/* train_args_desc.c: the description of a run's flags and files that its ranks compare (train_args_desc.h). */
#include "config/train_args_desc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/gpt_dataset.h"
#include "io/fileid.h"

typedef struct desc {
    char *buf;
    size_t n, cap;
} desc;

static void put(const char *flag, const char *value, void *ctx)
{
    desc *d = ctx;
    size_t a = strlen(flag) + 1, b = strlen(value) + 1;
    if (d->n + a + b > d->cap) {
        d->cap = 2 * (d->n + a + b);
        d->buf = mt_xrealloc(d->buf, d->cap);
    }
    memcpy(d->buf + d->n, flag, a);
    memcpy(d->buf + d->n + a, value, b);
    d->n += a + b;
}

/* the entry "flag" "path: identity" */
static void put_file(desc *d, const char *flag, const char *path, const char *suffix)
{
    char id[128];
    size_t n = strlen(path) + strlen(suffix) + 1;
    char *p = mt_xmalloc(n), *v = mt_xmalloc(n + sizeof id + 2);
    snprintf(p, n, "%s%s", path, suffix);
    mt_file_identity(p, id, sizeof id);
    snprintf(v, n + sizeof id + 2, "%s: %s", p, id);
    put(flag, v, d);
    free(v);
    free(p);
}

char *mt_train_args_describe(const mt_train_args *a, size_t *n)
{
    desc d = {NULL, 0, 0};
    mt_train_args_each(a, put, &d);
    char **prefixes;
    double *weights;
    int count;
    mt_err ignore;   /* bad --data-path words: the dataset's open reports them, the same on every rank */
    if (a->data_path.n && !mt_data_path_parse(a->data_path.n, (char *const *)a->data_path.v, &prefixes, &weights,
                                              &count, &ignore)) {
        for (int i = 0; i < count; i++) {
            put_file(&d, "--data-path", prefixes[i], ".idx");
            put_file(&d, "--data-path", prefixes[i], ".bin");
        }
        free(prefixes);
        free(weights);
    }
    if (a->vocab_file) put_file(&d, "--vocab-file", a->vocab_file, "");
    if (a->merge_file) put_file(&d, "--merge-file", a->merge_file, "");
    struct stat st;
    if (a->tokenizer_model)
        put_file(&d, "--tokenizer-model", a->tokenizer_model,
                 !stat(a->tokenizer_model, &st) && S_ISDIR(st.st_mode) ? "/tokenizer.json" : "");
    *n = d.n;
    return d.buf;
}
