/* sample.c: sample fetch across sequence boundaries, and sampler id arithmetic (see sample.h). */
#include "data/sample.h"

#include <string.h>

int mt_tokens_itemsize(int dtype)
{
    switch (dtype) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: return 4;
    case 5: return 8;
    default: return 0;
    }
}

int mt_tokens_read(const mt_tokens *t, int64_t seq, int64_t offset, int64_t count, int64_t *out, mt_err *e)
{
    if (seq < 0 || (uint64_t)seq >= t->n_seq) return mt_err_set(e, "sequence %lld out of range", (long long)seq);
    int is = mt_tokens_itemsize(t->dtype);
    if (!is) return mt_err_set(e, "unsupported token dtype code %d", t->dtype);
    int64_t size = t->sizes[seq];
    if (offset < 0 || count < 0 || offset + count > size)
        return mt_err_set(e, "sequence %lld: items [%lld, %lld) outside its %lld items", (long long)seq,
                          (long long)offset, (long long)(offset + count), (long long)size);
    int64_t ptr;
    memcpy(&ptr, (const unsigned char *)t->pointers + 8 * seq, 8);
    uint64_t start = (uint64_t)ptr + (uint64_t)offset * (uint64_t)is;
    if (ptr < 0 || start + (uint64_t)count * (uint64_t)is > t->bin_size)
        return mt_err_set(e, "sequence %lld: bytes [%llu, %llu) lie past the end of the .bin (%llu bytes)",
                          (long long)seq, (unsigned long long)start,
                          (unsigned long long)(start + (uint64_t)count * (uint64_t)is), (unsigned long long)t->bin_size);
    const unsigned char *p = t->bin + start;
    for (int64_t k = 0; k < count; k++, p += is) {
        switch (t->dtype) {
        case 1: out[k] = *p; break;
        case 2: out[k] = (int8_t)*p; break;
        case 3: { int16_t v; memcpy(&v, p, 2); out[k] = v; } break;
        case 8: { uint16_t v; memcpy(&v, p, 2); out[k] = v; } break;
        case 4: { int32_t v; memcpy(&v, p, 4); out[k] = v; } break;
        default: { int64_t v; memcpy(&v, p, 8); out[k] = v; } break;
        }
        /* one rule for every reader of token ids (mt-index --dump too): a negative value is no token */
        if (out[k] < 0)
            return mt_err_set(e, "sequence %lld, token %lld (byte %llu of the .bin): %lld is not a token id",
                              (long long)seq, (long long)(offset + k), (unsigned long long)(start + (uint64_t)k * (uint64_t)is),
                              (long long)out[k]);
    }
    return 0;
}

int64_t mt_gpt_sample_fetch(const mt_tokens *t, const mt_gpt_index *ix, int32_t seq_length, int E, int64_t i,
                            int64_t pad, int64_t *out, mt_err *e)
{
    const mt_gpt_plan *pl = &ix->plan;
    if (i < 0 || i >= pl->num_samples)
        return mt_err_set(e, "sample %lld out of range (the split has %lld)", (long long)i, (long long)pl->num_samples);
    int64_t j = mt_gpt_shuffle_at(ix, i);
    if (j < 0 || j >= pl->num_samples) return mt_err_set(e, "shuffle index entry %lld is %lld: out of range", (long long)i, (long long)j);
    int64_t d0, o0, d1, o1;
    mt_gpt_sample_row(ix, j, &d0, &o0);
    mt_gpt_sample_row(ix, j + 1, &d1, &o1);
    if (d0 < 0 || d1 < d0 || d1 >= pl->doc_index_len)
        return mt_err_set(e, "sample index rows %lld/%lld are inconsistent", (long long)j, (long long)(j + 1));
    const int64_t want = (int64_t)seq_length + E;
    int64_t n = 0;
    for (int64_t d = d0; d <= d1; d++) {
        int64_t seq = ix->doc_idx[d];
        if (seq < 0 || (uint64_t)seq >= t->n_seq) return mt_err_set(e, "document index entry %lld is %lld: out of range", (long long)d, (long long)seq);
        int64_t from = d == d0 ? o0 : 0;
        int64_t to = d == d1 ? o1 + E : t->sizes[seq];
        if (to > t->sizes[seq]) to = t->sizes[seq]; /* end of data without drop_last */
        if (to < from) to = from;
        if (n + (to - from) > want)
            return mt_err_set(e, "sample %lld spans more than %lld tokens: index does not match the data", (long long)i, (long long)want);
        if (mt_tokens_read(t, seq, from, to - from, out + n, e)) return -1;
        n += to - from;
    }
    for (int64_t k = n; k < want; k++) out[k] = pad;
    return n;
}

int mt_sampler_check(const mt_sampler *s, mt_err *e)
{
    if (s->micro_batch_size < 1 || s->data_parallel_size < 1 || s->global_batch_size < 1)
        return mt_err_set(e, "batch sizes must be positive");
    if (s->global_batch_size % (s->micro_batch_size * s->data_parallel_size))
        return mt_err_set(e, "global batch size %lld is not a multiple of micro batch size %lld times data-parallel size %lld",
                          (long long)s->global_batch_size, (long long)s->micro_batch_size, (long long)s->data_parallel_size);
    if (s->consumed_samples < 0 || s->total_samples < 0) return mt_err_set(e, "negative sample count");
    return 0;
}

int64_t mt_sampler_micro_batches(const mt_sampler *s)
{
    return s->global_batch_size / (s->micro_batch_size * s->data_parallel_size);
}

int64_t mt_sampler_first(const mt_sampler *s, int64_t iteration, int64_t micro, int64_t rank)
{
    int64_t chunk = s->micro_batch_size * s->data_parallel_size;
    int64_t start = s->consumed_samples + iteration * s->global_batch_size + micro * chunk;
    if (start + chunk > s->total_samples) return -1;
    return start + rank * s->micro_batch_size;
}
