/* gpt_index.c: GPTDataset epochs, document/sample/shuffle index construction (see gpt_index.h). */
#include "data/gpt_index.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int64_t mt_gpt_sample_count(int64_t num_epochs, int64_t tokens_per_epoch, int32_t seq_length, int E, bool drop_last)
{
    int64_t tokens = num_epochs * tokens_per_epoch - E;
    if (drop_last) return tokens / seq_length; /* C++ integer division */
    volatile float f = (float)tokens;          /* helpers.cpp: ceil(float(...) / seq_length) */
    volatile float q = f / (float)seq_length;
    return (int64_t)ceilf(q);
}

static int64_t floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b) && ((a < 0) != (b < 0))) q--;
    return q;
}

int mt_gpt_plan_make(const int32_t *sizes, size_t n_seq, int64_t lo, int64_t hi, const mt_gpt_index_params *p,
                     mt_gpt_plan *plan, mt_err *e)
{
    memset(plan, 0, sizeof *plan);
    if (n_seq > (size_t)INT32_MAX) return mt_err_set(e, "dataset has %zu sequences, more than int32 ids allow", n_seq);
    if (lo < 0 || hi < lo || (uint64_t)hi > n_seq)
        return mt_err_set(e, "split range [%lld, %lld) is outside the %zu sequences", (long long)lo, (long long)hi,
                          n_seq);
    if (p->seq_length < 1) return mt_err_set(e, "sequence length must be positive");
    if (p->add_extra_token != 0 && p->add_extra_token != 1) return mt_err_set(e, "add_extra_token must be 0 or 1");
    const int64_t L = p->seq_length, E = p->add_extra_token;
    int64_t T = 0;
    int32_t max_size = 0;
    for (size_t i = 0; i < n_seq; i++) {
        if (sizes[i] < 0) return mt_err_set(e, "sequence %zu has negative length %d", i, sizes[i]);
        if (sizes[i] > max_size) max_size = sizes[i];
    }
    for (int64_t i = lo; i < hi; i++) T += sizes[i];
    plan->tokens_per_epoch = T;

    int64_t epochs = 1;
    if (p->num_samples >= 0) {
        int64_t need;
        if (__builtin_mul_overflow(p->num_samples, L, &need) || __builtin_add_overflow(need, E, &need))
            return mt_err_set(e, "%lld samples of %lld tokens overflow a 64-bit token count",
                              (long long)p->num_samples, (long long)L);
        if (need > T) {
            if (T == 0)
                return mt_err_set(e, "sequences [%lld, %lld) have no tokens but %lld samples were requested "
                                     "(give the split more weight in --split, or more data)",
                                  (long long)lo, (long long)hi, (long long)p->num_samples);
            epochs = need / T + (need % T != 0);
        }
    }
    int64_t total_tokens;
    if (__builtin_mul_overflow(epochs, T, &total_tokens) || __builtin_mul_overflow(epochs, hi - lo, &plan->doc_index_len))
        return mt_err_set(e, "%lld epochs overflow a 64-bit count", (long long)epochs);
    plan->num_epochs = epochs;
    if (epochs > 1) {
        int64_t before = floordiv((epochs - 1) * T - E, L);
        int64_t last = p->num_samples - before;
        int64_t per_epoch = floordiv(T - E, L);
        if (last < 0 || last > per_epoch + 1)
            return mt_err_set(e, "inconsistent epoch arithmetic (%lld samples from the final epoch, %lld per epoch)",
                              (long long)last, (long long)per_epoch);
        plan->num_samples_sans_final_epoch = before;
        plan->num_samples_per_epoch = per_epoch;
        plan->separate_final_epoch = last < (int64_t)(0.80 * (double)per_epoch);
    } else {
        plan->num_samples_per_epoch = floordiv(T - E, L);
    }
    plan->num_samples = mt_gpt_sample_count(epochs, T, p->seq_length, (int)E, p->drop_last);
    if (plan->num_samples < 0) plan->num_samples = 0;
    int64_t m = plan->doc_index_len > max_size ? plan->doc_index_len : max_size;
    plan->sample_idx_64 = m > INT32_MAX;
    plan->shuffle_idx_64 = plan->num_samples >= (int64_t)UINT32_MAX - 1;
    return 0;
}

void mt_gpt_build_doc_index(int64_t lo, int64_t hi, int64_t num_epochs, bool separate, mt_rs *rs, int32_t *out)
{
    int64_t n = hi - lo, k = 0;
    for (int64_t ep = 0; ep < num_epochs; ep++)
        for (int64_t d = lo; d < hi; d++) out[k++] = (int32_t)d;
    if (!separate || num_epochs == 1) {
        mt_rs_shuffle_i32(rs, out, (size_t)k);
    } else {
        mt_rs_shuffle_i32(rs, out, (size_t)((num_epochs - 1) * n));
        mt_rs_shuffle_i32(rs, out + (num_epochs - 1) * n, (size_t)n);
    }
}

#define SAMPLE_LOOP(T)                                                                                       \
    do {                                                                                                     \
        T *row = out;                                                                                        \
        int64_t di = 0, off = 0;                                                                             \
        row[0] = 0;                                                                                          \
        row[1] = 0;                                                                                          \
        for (int64_t k = 1; k <= num_samples; k++) {                                                         \
            int64_t need = (int64_t)seq_length + E;                                                          \
            while (need != 0) {                                                                              \
                int64_t len_here = (int64_t)sizes[doc_idx[di]] - off;                                        \
                need -= len_here;                                                                            \
                if (need <= 0) {                                                                             \
                    off += need + len_here - E;                                                              \
                    need = 0;                                                                                \
                } else {                                                                                     \
                    if (di == doc_idx_len - 1) {                                                             \
                        if (k != num_samples)                                                                \
                            return mt_err_set(e, "data runs out at sample %lld of %lld", (long long)k,        \
                                              (long long)num_samples);                                        \
                        off = (int64_t)sizes[doc_idx[di]] - E;                                               \
                        break;                                                                               \
                    }                                                                                        \
                    di++;                                                                                    \
                    off = 0;                                                                                 \
                }                                                                                            \
            }                                                                                                \
            row[2 * k] = (T)di;                                                                              \
            row[2 * k + 1] = (T)off;                                                                         \
        }                                                                                                    \
    } while (0)

int mt_gpt_build_sample_index(const int32_t *sizes, const int32_t *doc_idx, int64_t doc_idx_len, int32_t seq_length,
                              int E, int64_t num_samples, bool is64, void *out, mt_err *e)
{
    if (num_samples > 0 && doc_idx_len == 0) return mt_err_set(e, "no documents to draw %lld samples from", (long long)num_samples);
    if (is64) SAMPLE_LOOP(int64_t);
    else SAMPLE_LOOP(int32_t);
    return 0;
}

void mt_gpt_build_shuffle_index(int64_t n_first, int64_t total, bool is64, mt_rs *rs, void *out)
{
    if (is64) {
        int64_t *a = out;
        for (int64_t i = 0; i < total; i++) a[i] = i;
        mt_rs_shuffle_i64(rs, a, (size_t)n_first);
        if (n_first != total) mt_rs_shuffle_i64(rs, a + n_first, (size_t)(total - n_first));
    } else {
        uint32_t *a = out;
        for (int64_t i = 0; i < total; i++) a[i] = (uint32_t)i;
        mt_rs_shuffle_u32(rs, a, (size_t)n_first);
        if (n_first != total) mt_rs_shuffle_u32(rs, a + n_first, (size_t)(total - n_first));
    }
}

static void *xalloc_bytes(int64_t count, size_t item, mt_err *e, const char *what)
{
    uint64_t bytes;
    if (__builtin_mul_overflow((uint64_t)count, (uint64_t)item, &bytes) || bytes > SIZE_MAX) {
        mt_err_set(e, "%s: %lld entries do not fit in memory", what, (long long)count);
        return NULL;
    }
    void *p = malloc(bytes ? (size_t)bytes : 1);
    if (!p) mt_err_set(e, "%s: cannot allocate %llu bytes", what, (unsigned long long)bytes);
    return p;
}

int mt_gpt_index_build(const int32_t *sizes, size_t n_seq, int64_t lo, int64_t hi, const mt_gpt_index_params *p,
                       mt_gpt_index *out, mt_err *e)
{
    memset(out, 0, sizeof *out);
    out->own = true;
    mt_gpt_plan *pl = &out->plan;
    if (mt_gpt_plan_make(sizes, n_seq, lo, hi, p, pl, e)) return -1;
    mt_rs rs;
    mt_rs_seed(&rs, p->seed);
    out->doc_idx = xalloc_bytes(pl->doc_index_len, sizeof(int32_t), e, "document index");
    if (!out->doc_idx) goto fail;
    mt_gpt_build_doc_index(lo, hi, pl->num_epochs, pl->separate_final_epoch, &rs, out->doc_idx);
    out->sample_idx = xalloc_bytes(2 * (pl->num_samples + 1), pl->sample_idx_64 ? 8 : 4, e, "sample index");
    if (!out->sample_idx) goto fail;
    if (mt_gpt_build_sample_index(sizes, out->doc_idx, pl->doc_index_len, p->seq_length, p->add_extra_token,
                                  pl->num_samples, pl->sample_idx_64, out->sample_idx, e))
        goto fail;
    out->shuffle_idx = xalloc_bytes(pl->num_samples, pl->shuffle_idx_64 ? 8 : 4, e, "shuffle index");
    if (!out->shuffle_idx) goto fail;
    int64_t first = pl->separate_final_epoch ? pl->num_samples_sans_final_epoch : pl->num_samples;
    mt_gpt_build_shuffle_index(first, pl->num_samples, pl->shuffle_idx_64, &rs, out->shuffle_idx);
    return 0;
fail:
    mt_gpt_index_free(out);
    return -1;
}

void mt_gpt_index_free(mt_gpt_index *ix)
{
    if (ix->own) {
        free(ix->doc_idx);
        free(ix->sample_idx);
        free(ix->shuffle_idx);
    } else {
        for (int i = 0; i < 3; i++) mt_npy_close(&ix->npy[i]);
    }
    ix->doc_idx = NULL;
    ix->sample_idx = ix->shuffle_idx = NULL;
}

int mt_gpt_index_check(const mt_gpt_index *ix, const int32_t *sizes, int64_t lo, int64_t hi,
                       const char *const paths[3], mt_err *e)
{
    const mt_gpt_plan *p = &ix->plan;
    for (int64_t i = 0; i < p->doc_index_len; i++)
        if (ix->doc_idx[i] < lo || ix->doc_idx[i] >= hi)
            return mt_err_set(e, "%s: entry %lld is sequence %d, outside this split's sequences [%lld, %lld)", paths[0],
                              (long long)i, ix->doc_idx[i], (long long)lo, (long long)hi);
    int64_t pd = -1, po = 0;
    for (int64_t i = 0; i <= p->num_samples; i++) {
        int64_t d, o;
        mt_gpt_sample_row(ix, i, &d, &o);
        /* (an empty split's single row is (0, 0) with no document behind it) */
        bool end = d == p->doc_index_len && o == 0;
        if (!end && (d < 0 || d >= p->doc_index_len || o < 0 || o > sizes[ix->doc_idx[d]]))
            return mt_err_set(e, "%s: row %lld (%lld, %lld) lies outside the document index or its document", paths[1],
                              (long long)i, (long long)d, (long long)o);
        if (d < pd || (d == pd && o <= po))
            return mt_err_set(e, "%s: row %lld (%lld, %lld) does not advance past row %lld (%lld, %lld)", paths[1],
                              (long long)i, (long long)d, (long long)o, (long long)(i - 1), (long long)pd, (long long)po);
        pd = d, po = o;
    }
    uint64_t *seen = calloc((size_t)(p->num_samples / 64 + 1), sizeof *seen);
    if (!seen) return mt_err_set(e, "%s: out of memory checking it", paths[2]);
    int rc = 0;
    for (int64_t i = 0; i < p->num_samples && !rc; i++) {
        int64_t v = mt_gpt_shuffle_at(ix, i);
        if (v < 0 || v >= p->num_samples)
            rc = mt_err_set(e, "%s: entry %lld is %lld, outside [0, %lld)", paths[2], (long long)i, (long long)v,
                            (long long)p->num_samples);
        else if (seen[v / 64] >> (v % 64) & 1)
            rc = mt_err_set(e, "%s: entry %lld repeats sample %lld (not a permutation)", paths[2], (long long)i, (long long)v);
        else
            seen[v / 64] |= 1ull << (v % 64);
    }
    free(seen);
    return rc;
}
