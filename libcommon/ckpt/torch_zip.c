/* torch_zip.c: the stored-entry zip archives of torch.save, read and written (torch_zip.h). */
#include "ckpt/torch_zip.h"

#include <stdlib.h>
#include <string.h>

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_END 0x06054b50u
#define SIG_END64 0x06064b50u
#define SIG_LOC64 0x07064b50u
#define ALIGN 64
#define MAX_ENTRIES (1 << 20)

uint32_t mt_crc32(uint32_t crc, const void *p, size_t n)
{
    static uint32_t table[256];
    static int ready;
    if (!ready) {   /* idempotent: racing threads write the same values */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const unsigned char *b = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

static uint64_t rd(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

#define BAD(off, ...) (mt_err_set(e, __VA_ARGS__), mt_err_prefix(e, "%s: offset %llu", z->path, (unsigned long long)(off)))

/* [off, off + n) lies inside [0, lim). */
static bool inside(uint64_t off, uint64_t n, uint64_t lim)
{
    return off <= lim && n <= lim - off;
}

/* The zip64 extra field of a central header: the fields whose 32-bit value is all ones, in order. */
static int zip64_extra(mt_tzip *z, uint64_t at, const unsigned char *x, uint64_t xn, uint64_t *usize,
                       uint64_t *csize, uint64_t *off, mt_err *e)
{
    bool need = *usize == 0xffffffffu || *csize == 0xffffffffu || *off == 0xffffffffu;
    for (uint64_t i = 0; i + 4 <= xn;) {
        uint64_t id = rd(x + i, 2), len = rd(x + i + 2, 2);
        if (len > xn - i - 4) return BAD(at + i, "extra field of %llu bytes runs past its header", (unsigned long long)len);
        if (id == 1) {
            const unsigned char *f = x + i + 4;
            uint64_t k = 0;
            uint64_t *want[3] = {usize, csize, off};
            for (int j = 0; j < 3; j++) {
                if (*want[j] != 0xffffffffu) continue;
                if (k + 8 > len) return BAD(at + i, "zip64 extra field too short (%llu bytes)", (unsigned long long)len);
                *want[j] = rd(f + k, 8);
                k += 8;
            }
            return 0;
        }
        i += 4 + len;
    }
    if (need) return BAD(at, "a size or offset of 0xffffffff without a zip64 extra field");
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int parse(mt_tzip *z, mt_err *e)
{
    const unsigned char *p = z->p;
    uint64_t size = z->size;
    if (size < 22) return BAD(size, "not a zip archive (%llu bytes, no end record)", (unsigned long long)size);
    /* the end record: the last "PK\5\6" whose comment reaches the end of the file */
    uint64_t eocd = UINT64_MAX;
    for (uint64_t i = size - 22, lo = size > 22 + 65535 ? size - 22 - 65535 : 0;; i--) {
        if (rd(p + i, 4) == SIG_END && i + 22 + rd(p + i + 20, 2) == size) { eocd = i; break; }
        if (i == lo) break;
    }
    if (eocd == UINT64_MAX) return BAD(size, "not a zip archive (no end of central directory record)");
    uint64_t n = rd(p + eocd + 10, 2), cd_size = rd(p + eocd + 12, 4), cd_off = rd(p + eocd + 16, 4);
    if (rd(p + eocd + 4, 2) != 0 || rd(p + eocd + 6, 2) != 0 || rd(p + eocd + 8, 2) != n)
        return BAD(eocd, "multi-disk archives are not supported");
    uint64_t cd_end = eocd;
    if (eocd >= 20 && rd(p + eocd - 20, 4) == SIG_LOC64) {
        uint64_t l = eocd - 20, e64 = rd(p + l + 8, 8);
        if (!inside(e64, 56, l) || rd(p + e64, 4) != SIG_END64)
            return BAD(l, "zip64 end record offset %llu is not a zip64 end record", (unsigned long long)e64);
        if (rd(p + e64 + 16, 4) != 0 || rd(p + e64 + 20, 4) != 0 || rd(p + e64 + 24, 8) != rd(p + e64 + 32, 8))
            return BAD(e64, "multi-disk archives are not supported");
        uint64_t n64 = rd(p + e64 + 32, 8), size64 = rd(p + e64 + 40, 8), off64 = rd(p + e64 + 48, 8);
        if ((n != 0xffff && n != n64) || (cd_size != 0xffffffffu && cd_size != size64) ||
            (cd_off != 0xffffffffu && cd_off != off64))
            return BAD(eocd, "end record (%llu entries, directory at %llu) and zip64 end record (%llu, at %llu) disagree",
                       (unsigned long long)n, (unsigned long long)cd_off, (unsigned long long)n64,
                       (unsigned long long)off64);
        n = n64;
        cd_size = size64;
        cd_off = off64;
        cd_end = e64;
    } else if (n == 0xffff || cd_size == 0xffffffffu || cd_off == 0xffffffffu) {
        return BAD(eocd, "zip64 values without a zip64 end record");
    }
    if (!inside(cd_off, cd_size, cd_end))
        return BAD(eocd, "central directory [%llu, +%llu) runs past its end record at %llu",
                   (unsigned long long)cd_off, (unsigned long long)cd_size, (unsigned long long)cd_end);
    if (n > cd_size / 46 || n > MAX_ENTRIES)
        return BAD(eocd, "%llu entries cannot fit a central directory of %llu bytes", (unsigned long long)n,
                   (unsigned long long)cd_size);
    z->e = mt_xcalloc(n ? n : 1, sizeof *z->e);
    uint64_t at = cd_off, end = cd_off + cd_size;
    for (uint64_t i = 0; i < n; i++) {
        if (!inside(at, 46, end) || rd(p + at, 4) != SIG_CENTRAL)
            return BAD(at, "central directory entry %llu is missing", (unsigned long long)i);
        uint64_t flags = rd(p + at + 8, 2), method = rd(p + at + 10, 2), crc = rd(p + at + 16, 4);
        uint64_t csize = rd(p + at + 20, 4), usize = rd(p + at + 24, 4), nl = rd(p + at + 28, 2);
        uint64_t xl = rd(p + at + 30, 2), cl = rd(p + at + 32, 2), off = rd(p + at + 42, 4);
        if (!inside(at + 46, nl + xl + cl, end))
            return BAD(at, "central directory entry %llu runs past the directory", (unsigned long long)i);
        const char *nm = (const char *)p + at + 46;
        if (nl == 0 || memchr(nm, 0, nl)) return BAD(at, "entry %llu has an empty name or one with a NUL", (unsigned long long)i);
        if (zip64_extra(z, at + 46 + nl, p + at + 46 + nl, xl, &usize, &csize, &off, e)) return -1;
        char *name = mt_xmalloc(nl + 1);
        memcpy(name, nm, nl);
        name[nl] = 0;
        mt_tzip_entry *en = &z->e[z->n++];
        en->name = name;
        if (method != 0)
            return BAD(at, "entry '%s' is compressed (method %llu): only stored entries are read, as torch.save writes them",
                       name, (unsigned long long)method);
        if (flags & 1) return BAD(at, "entry '%s' is encrypted", name);
        if (csize != usize) return BAD(at, "stored entry '%s' has sizes %llu and %llu", name,
                                       (unsigned long long)csize, (unsigned long long)usize);
        /* the local header: only its name and extra field lengths are used (sizes may be in a data
         * descriptor); its name must be the central directory's */
        if (!inside(off, 30, cd_off) || rd(p + off, 4) != SIG_LOCAL)
            return BAD(off, "local header of entry '%s' is missing", name);
        uint64_t lnl = rd(p + off + 26, 2), lxl = rd(p + off + 28, 2);
        if (rd(p + off + 8, 2) != 0) return BAD(off, "entry '%s' is compressed in its local header", name);
        if (lnl != nl || !inside(off + 30, lnl, cd_off) || memcmp(p + off + 30, name, nl))
            return BAD(off, "local header of entry '%s' names another entry", name);
        en->data = off + 30 + lnl + lxl;
        en->size = usize;
        en->crc = (uint32_t)crc;
        if (!inside(en->data, en->size, cd_off))
            return BAD(en->data, "entry '%s' of %llu bytes runs past the central directory at %llu", name,
                       (unsigned long long)en->size, (unsigned long long)cd_off);
        at += 46 + nl + xl + cl;
    }
    /* no name twice: sorted, neighbours differ */
    const char **names = mt_xmalloc((n ? n : 1) * sizeof *names);
    for (int i = 0; i < z->n; i++) names[i] = z->e[i].name;
    qsort(names, (size_t)z->n, sizeof *names, cmp_names);
    int rc = 0;
    for (int i = 1; i < z->n && !rc; i++)
        if (!strcmp(names[i - 1], names[i])) rc = BAD(cd_off, "entry '%s' appears twice", names[i]);
    free(names);
    return rc;
}

int mt_tzip_open_buf(mt_tzip *z, const char *path, const void *p, size_t size, mt_err *e)
{
    memset(z, 0, sizeof *z);
    z->path = mt_xstrdup(path);
    z->p = p;
    z->size = size;
    if (parse(z, e)) {
        mt_tzip_close(z);
        return -1;
    }
    return 0;
}

int mt_tzip_open(mt_tzip *z, const char *path, mt_err *e)
{
    mt_map m;
    if (mt_map_open(&m, path, e)) {
        memset(z, 0, sizeof *z);
        return -1;
    }
    if (mt_tzip_open_buf(z, path, m.data, m.size, e)) {
        mt_map_close(&m);
        return -1;
    }
    z->map = m;
    return 0;
}

void mt_tzip_close(mt_tzip *z)
{
    for (int i = 0; i < z->n; i++) free(z->e[i].name);
    free(z->e);
    free(z->path);
    mt_map_close(&z->map);
    memset(z, 0, sizeof *z);
}

const mt_tzip_entry *mt_tzip_find(const mt_tzip *z, const char *name)
{
    for (int i = 0; i < z->n; i++) {
        const char *s = strchr(z->e[i].name, '/');
        if (s && !strcmp(s + 1, name)) return &z->e[i];
    }
    return NULL;
}

int mt_tzip_get(mt_tzip *z, const mt_tzip_entry *en, const unsigned char **p, mt_err *e)
{
    *p = en->size ? z->p + en->data : NULL;
    if (!en->crc_checked) {
        uint32_t c = mt_crc32(0, *p, en->size);
        if (c != en->crc)
            return BAD(en->data, "entry '%s': CRC-32 %08x, the central directory says %08x", en->name, c, en->crc);
        ((mt_tzip_entry *)en)->crc_checked = true;
    }
    return 0;
}

/* ---- the writer ---- */

static void put(unsigned char **q, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) (*q)[i] = (unsigned char)(v >> (8 * i));
    *q += n;
}

static int wr(mt_tzip_writer *w, const void *p, uint64_t n, mt_err *e)
{
    if (n && mt_out_write(&w->out, p, (size_t)n, e)) return -1;
    w->pos += n;
    return 0;
}

int mt_tzip_writer_open(mt_tzip_writer *w, const char *path, const char *prefix, mt_err *e)
{
    memset(w, 0, sizeof *w);
    if (!*prefix || strchr(prefix, '/')) return mt_err_set(e, "%s: archive name '%s' must be one path component", path, prefix);
    if (mt_out_open(&w->out, path, e)) return -1;
    w->prefix = mt_xstrdup(prefix);
    return 0;
}

int mt_tzip_writer_add(mt_tzip_writer *w, const char *name, const void *p, uint64_t n, mt_err *e)
{
    size_t nl = strlen(w->prefix) + 1 + strlen(name);
    if (nl > 0xffff) return mt_err_set(e, "%s: entry name too long", w->out.path);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->w = mt_xrealloc(w->w, (size_t)w->cap * sizeof *w->w);
    }
    struct mt_tzip_wentry *we = &w->w[w->n];
    we->name = mt_xmalloc(nl + 1);
    snprintf(we->name, nl + 1, "%s/%s", w->prefix, name);
    we->offset = w->pos;
    we->size = n;
    we->crc = mt_crc32(0, p, (size_t)n);
    w->n++;
    bool z64 = n >= 0xffffffffu;
    unsigned char h[30 + 0xffff + 20 + 4 + ALIGN], *q = h;
    put(&q, SIG_LOCAL, 4);
    put(&q, z64 ? 45 : 20, 2);
    put(&q, 0x0800, 2);   /* names are UTF-8 */
    put(&q, 0, 2);
    put(&q, 0, 2);
    put(&q, 0x21, 2);     /* 1980-01-01, as torch's writer: no clock in the file */
    put(&q, we->crc, 4);
    put(&q, z64 ? 0xffffffffu : n, 4);
    put(&q, z64 ? 0xffffffffu : n, 4);
    put(&q, nl, 2);
    unsigned char *xlen = q;
    q += 2;
    memcpy(q, we->name, nl);
    q += nl;
    unsigned char *x0 = q;
    if (z64) {
        put(&q, 1, 2);
        put(&q, 16, 2);
        put(&q, n, 8);
        put(&q, n, 8);
    }
    /* padding so that the data starts at a multiple of ALIGN: an extra field "FB" of 'Z's */
    uint64_t start = w->pos + (uint64_t)(q - h) + 4, pad = (ALIGN - start % ALIGN) % ALIGN;
    put(&q, 'F' | 'B' << 8, 2);
    put(&q, pad, 2);
    memset(q, 'Z', pad);
    q += pad;
    put(&xlen, (uint64_t)(q - x0), 2);
    if (wr(w, h, (uint64_t)(q - h), e) || wr(w, p, n, e)) return -1;
    return 0;
}

int mt_tzip_writer_commit(mt_tzip_writer *w, mt_err *e)
{
    uint64_t cd_off = w->pos;
    for (int i = 0; i < w->n; i++) {
        const struct mt_tzip_wentry *we = &w->w[i];
        size_t nl = strlen(we->name);
        bool zs = we->size >= 0xffffffffu, zo = we->offset >= 0xffffffffu;
        unsigned char h[46 + 0xffff + 4 + 24], *q = h;
        put(&q, SIG_CENTRAL, 4);
        put(&q, 45, 2);
        put(&q, zs || zo ? 45 : 20, 2);
        put(&q, 0x0800, 2);
        put(&q, 0, 2);
        put(&q, 0, 2);
        put(&q, 0x21, 2);
        put(&q, we->crc, 4);
        put(&q, zs ? 0xffffffffu : we->size, 4);
        put(&q, zs ? 0xffffffffu : we->size, 4);
        put(&q, nl, 2);
        put(&q, (zs || zo) ? 4 + 16 * zs + 8 * zo : 0, 2);
        put(&q, 0, 2);
        put(&q, 0, 2);
        put(&q, 0, 2);
        put(&q, 0, 4);
        put(&q, zo ? 0xffffffffu : we->offset, 4);
        memcpy(q, we->name, nl);
        q += nl;
        if (zs || zo) {
            put(&q, 1, 2);
            put(&q, 16 * zs + 8 * zo, 2);
            if (zs) {
                put(&q, we->size, 8);
                put(&q, we->size, 8);
            }
            if (zo) put(&q, we->offset, 8);
        }
        if (wr(w, h, (uint64_t)(q - h), e)) return -1;
    }
    uint64_t cd_size = w->pos - cd_off, n = (uint64_t)w->n;
    unsigned char h[56 + 20 + 22], *q = h;
    if (n >= 0xffff || cd_size >= 0xffffffffu || cd_off >= 0xffffffffu) {
        uint64_t e64 = w->pos;
        put(&q, SIG_END64, 4);
        put(&q, 44, 8);
        put(&q, 45, 2);
        put(&q, 45, 2);
        put(&q, 0, 4);
        put(&q, 0, 4);
        put(&q, n, 8);
        put(&q, n, 8);
        put(&q, cd_size, 8);
        put(&q, cd_off, 8);
        put(&q, SIG_LOC64, 4);
        put(&q, 0, 4);
        put(&q, e64, 8);
        put(&q, 1, 4);
    }
    put(&q, SIG_END, 4);
    put(&q, 0, 4);
    put(&q, n >= 0xffff ? 0xffff : n, 2);
    put(&q, n >= 0xffff ? 0xffff : n, 2);
    put(&q, cd_size >= 0xffffffffu ? 0xffffffffu : cd_size, 4);
    put(&q, cd_off >= 0xffffffffu ? 0xffffffffu : cd_off, 4);
    put(&q, 0, 2);
    if (wr(w, h, (uint64_t)(q - h), e) || mt_out_commit(&w->out, e)) return -1;
    for (int i = 0; i < w->n; i++) free(w->w[i].name);
    free(w->w);
    free(w->prefix);
    memset(w, 0, sizeof *w);
    return 0;
}

void mt_tzip_writer_abort(mt_tzip_writer *w)
{
    mt_out_abort(&w->out);
    for (int i = 0; i < w->n; i++) free(w->w[i].name);
    free(w->w);
    free(w->prefix);
    memset(w, 0, sizeof *w);
}
