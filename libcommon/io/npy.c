/* npy.c: .npy header formatting identical to numpy 1.24, atomic writer, validating reader (see npy.h). */
#include "io/npy.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "io/atomic.h"

static const unsigned char MAGIC[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

int mt_npy_itemsize(const char *d)
{
    static const struct {
        const char *s;
        int n;
    } t[] = {{"|u1", 1}, {"|i1", 1}, {"|b1", 1}, {"<i2", 2}, {"<u2", 2}, {"<i4", 4}, {"<u4", 4},
             {"<f4", 4}, {"<i8", 8}, {"<u8", 8}, {"<f8", 8}, {"<f2", 2}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(d, t[i].s)) return t[i].n;
    return 0;
}

size_t mt_npy_header(char *buf, size_t cap, const char *descr, const int64_t *shape, int ndim)
{
    char dict[512], sh[400];
    int n = 0;
    sh[0] = 0;
    n += snprintf(sh + n, sizeof sh - (size_t)n, "(");
    for (int i = 0; i < ndim; i++)
        n += snprintf(sh + n, sizeof sh - (size_t)n, i ? ", %lld" : "%lld", (long long)shape[i]);
    snprintf(sh + n, sizeof sh - (size_t)n, ndim == 1 ? ",)" : ")");
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, sh);
    /* numpy leaves room for the first axis to grow to 21 digits. */
    if (ndim > 0) {
        char first[32];
        int fl = snprintf(first, sizeof first, "%lld", (long long)shape[0]);
        for (int i = fl; i < 21; i++) dict[dl++] = ' ';
        dict[dl] = 0;
    }
    size_t hlen = (size_t)dl + 1;
    size_t pad = 64 - ((10 + hlen) % 64);
    size_t total = 10 + hlen + pad;
    if (total > cap || hlen + pad > 65535) return 0;
    memcpy(buf, MAGIC, 6);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (char)((hlen + pad) & 0xff);
    buf[9] = (char)((hlen + pad) >> 8);
    memcpy(buf + 10, dict, (size_t)dl);
    memset(buf + 10 + dl, ' ', pad);
    buf[total - 1] = '\n';
    return total;
}

int mt_npy_write(const char *path, const char *descr, const int64_t *shape, int ndim, const void *data,
                 size_t nbytes, mt_err *e)
{
    int is = mt_npy_itemsize(descr);
    if (!is) return mt_err_set(e, "%s: unsupported npy dtype '%s'", path, descr);
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) count *= (uint64_t)shape[i];
    if (count * (uint64_t)is != nbytes) return mt_err_set(e, "%s: npy data size does not match shape", path);
    char hdr[1024];
    size_t hl = mt_npy_header(hdr, sizeof hdr, descr, shape, ndim);
    if (!hl) return mt_err_set(e, "%s: npy header too long", path);
    mt_out o;
    if (mt_out_open(&o, path, e)) return -1;
    if (mt_out_write(&o, hdr, hl, e)) goto fail;
    /* Large arrays: write in chunks so a failure is reported promptly. */
    const char *p = data;
    for (size_t off = 0; off < nbytes;) {
        size_t k = nbytes - off < ((size_t)64 << 20) ? nbytes - off : ((size_t)64 << 20);
        if (mt_out_write(&o, p + off, k, e)) goto fail;
        off += k;
    }
    return mt_out_commit(&o, e);
fail:
    mt_out_abort(&o);
    return -1;
}

/* A tiny parser for the header's Python dict literal. */
typedef struct {
    const char *s, *end, *path;
    size_t base; /* file offset of s's start */
    const char *start;
    mt_err *e;
} hp;

static int hp_err(hp *h, const char *what)
{
    return mt_err_set(h->e, "%s: offset %zu: bad .npy header: %s", h->path, h->base + (size_t)(h->s - h->start), what);
}
static void hp_ws(hp *h)
{
    while (h->s < h->end && (*h->s == ' ' || *h->s == '\t')) h->s++;
}
static int hp_lit(hp *h, char c)
{
    hp_ws(h);
    if (h->s >= h->end || *h->s != c) {
        char m[32];
        snprintf(m, sizeof m, "expected '%c'", c);
        return hp_err(h, m);
    }
    h->s++;
    return 0;
}
static int hp_str(hp *h, char *out, size_t cap)
{
    hp_ws(h);
    if (h->s >= h->end || (*h->s != '\'' && *h->s != '"')) return hp_err(h, "expected a string");
    char q = *h->s++;
    size_t n = 0;
    while (h->s < h->end && *h->s != q) {
        if (n + 1 >= cap) return hp_err(h, "string too long");
        out[n++] = *h->s++;
    }
    if (h->s >= h->end) return hp_err(h, "unterminated string");
    h->s++;
    out[n] = 0;
    return 0;
}

int mt_npy_open(mt_npy *v, const char *path, mt_err *e)
{
    memset(v, 0, sizeof *v);
    if (mt_map_open(&v->map, path, e)) return -1;
    const unsigned char *d = v->map.data;
    size_t sz = v->map.size;
    if (sz < 10 || memcmp(d, MAGIC, 6)) {
        mt_npy_close(v);
        return mt_err_set(e, "%s: offset 0: not a .npy file (bad magic)", path);
    }
    size_t hlen, hstart;
    if (d[6] == 1 && d[7] == 0) {
        hlen = (size_t)d[8] | (size_t)d[9] << 8;
        hstart = 10;
    } else if ((d[6] == 2 || d[6] == 3) && d[7] == 0 && sz >= 12) {
        hlen = (size_t)d[8] | (size_t)d[9] << 8 | (size_t)d[10] << 16 | (size_t)d[11] << 24;
        hstart = 12;
    } else {
        unsigned major = d[6], minor = d[7]; /* read before the unmap */
        mt_npy_close(v);
        return mt_err_set(e, "%s: offset 6: unsupported .npy version %u.%u", path, major, minor);
    }
    if (hlen > sz - hstart) {
        mt_npy_close(v);
        return mt_err_set(e, "%s: offset 8: header length %zu runs past the end of the file (%zu bytes)", path,
                          hlen, sz);
    }
    hp h = {(const char *)d + hstart, (const char *)d + hstart + hlen, path, hstart, (const char *)d + hstart, e};
    if (hlen == 0 || h.end[-1] != '\n') {
        mt_npy_close(v);
        return mt_err_set(e, "%s: offset %zu: .npy header does not end with a newline", path, hstart + hlen);
    }
    h.end--;
    bool got_d = false, got_f = false, got_s = false, fortran = false;
    if (hp_lit(&h, '{')) goto bad;
    for (;;) {
        hp_ws(&h);
        if (h.s < h.end && *h.s == '}') {
            h.s++;
            break;
        }
        char key[32];
        if (hp_str(&h, key, sizeof key) || hp_lit(&h, ':')) goto bad;
        hp_ws(&h);
        if (!strcmp(key, "descr")) {
            if (hp_str(&h, v->descr, sizeof v->descr)) goto bad;
            got_d = true;
        } else if (!strcmp(key, "fortran_order")) {
            if (h.end - h.s >= 4 && !memcmp(h.s, "True", 4)) fortran = true, h.s += 4;
            else if (h.end - h.s >= 5 && !memcmp(h.s, "False", 5)) h.s += 5;
            else {
                hp_err(&h, "fortran_order is not True or False");
                goto bad;
            }
            got_f = true;
        } else if (!strcmp(key, "shape")) {
            if (hp_lit(&h, '(')) goto bad;
            v->ndim = 0;
            for (;;) {
                hp_ws(&h);
                if (h.s < h.end && *h.s == ')') {
                    h.s++;
                    break;
                }
                if (h.s >= h.end || !isdigit((unsigned char)*h.s)) {
                    hp_err(&h, "shape entry is not a non-negative integer");
                    goto bad;
                }
                int64_t x = 0;
                while (h.s < h.end && isdigit((unsigned char)*h.s)) {
                    if (x > (INT64_MAX - 9) / 10) {
                        hp_err(&h, "shape entry too large");
                        goto bad;
                    }
                    x = x * 10 + (*h.s++ - '0');
                }
                if (v->ndim == MT_NPY_MAXDIM) {
                    hp_err(&h, "too many dimensions");
                    goto bad;
                }
                v->shape[v->ndim++] = x;
                hp_ws(&h);
                if (h.s < h.end && *h.s == ',') h.s++;
                else if (h.s < h.end && *h.s == ')') {
                    h.s++;
                    break;
                } else {
                    hp_err(&h, "expected ',' or ')' in shape");
                    goto bad;
                }
            }
            got_s = true;
        } else {
            hp_err(&h, "unknown key");
            goto bad;
        }
        hp_ws(&h);
        if (h.s < h.end && *h.s == ',') h.s++;
    }
    hp_ws(&h);
    if (h.s != h.end) {
        hp_err(&h, "trailing characters after the dict");
        goto bad;
    }
    if (!got_d || !got_f || !got_s) {
        mt_err_set(e, "%s: offset %zu: .npy header lacks %s", path, hstart,
                   !got_d ? "'descr'" : !got_f ? "'fortran_order'" : "'shape'");
        goto bad;
    }
    v->itemsize = mt_npy_itemsize(v->descr);
    if (!v->itemsize) {
        mt_err_set(e, "%s: offset %zu: unsupported dtype '%s' (little-endian integers and floats only)", path,
                   hstart, v->descr);
        goto bad;
    }
    if (fortran && v->ndim > 1) {
        mt_err_set(e, "%s: offset %zu: fortran_order True is not supported", path, hstart);
        goto bad;
    }
    uint64_t count = 1;
    for (int i = 0; i < v->ndim; i++) {
        uint64_t s = (uint64_t)v->shape[i];
        if (s && count > UINT64_MAX / 8 / s) {
            mt_err_set(e, "%s: offset %zu: shape too large", path, hstart);
            goto bad;
        }
        count *= s;
    }
    v->count = (int64_t)count;
    v->data_offset = hstart + hlen;
    uint64_t want = (uint64_t)v->data_offset + count * (uint64_t)v->itemsize;
    if (want != sz) {
        mt_err_set(e, "%s: offset %zu: file is %zu bytes but the header (%s, %lld items) needs %llu", path,
                   v->data_offset, sz, v->descr, (long long)count, (unsigned long long)want);
        goto bad;
    }
    v->data = count ? d + v->data_offset : NULL;
    return 0;
bad:
    mt_npy_close(v);
    return -1;
}

void mt_npy_close(mt_npy *v)
{
    mt_map_close(&v->map);
    v->data = NULL;
}

int mt_npy_expect(const mt_npy *v, const char *path, const char *descr, int ndim, const int64_t *want, mt_err *e)
{
    if (strcmp(v->descr, descr))
        return mt_err_set(e, "%s: dtype is '%s', expected '%s'", path, v->descr, descr);
    if (v->ndim != ndim) return mt_err_set(e, "%s: array has %d dimensions, expected %d", path, v->ndim, ndim);
    for (int i = 0; i < ndim; i++)
        if (want && want[i] >= 0 && v->shape[i] != want[i])
            return mt_err_set(e, "%s: shape[%d] is %lld, expected %lld", path, i, (long long)v->shape[i],
                              (long long)want[i]);
    return 0;
}
