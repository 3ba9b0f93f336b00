/* reader.c: buffered file/stdin reader with zstd streaming decompression (see reader.h). */
#include "io/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "util/vec.h"

#define RAW_CAP (1u << 17)
#define OUT_CAP (1u << 18)
/* Compressed bytes given to the decoder per call: a corrupt block is reported at most this far from
 * where it ends (the decoder itself reports no position). */
#define ZSTD_SLICE (1u << 13)

struct mt_reader {
    int fd;
    char *name;
    bool zstd, eof_raw, frame_open;
    ZSTD_DCtx *dctx;
    /* raw (compressed or plain) input buffer */
    unsigned char *raw;
    size_t raw_pos, raw_len;
    uint64_t raw_off, raw_size;
    /* decompressed buffer (zstd only) */
    unsigned char *out;
    size_t out_pos, out_len;
    uint64_t off, lineno;
    size_t max_line; /* 0: no limit */
    mt_buf line;
};

static ssize_t fill_raw(mt_reader *r, mt_err *e)
{
    if (r->raw_pos < r->raw_len) return (ssize_t)(r->raw_len - r->raw_pos);
    if (r->eof_raw) return 0;
    for (;;) {
        ssize_t n = read(r->fd, r->raw, RAW_CAP);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return mt_err_sys(e, "%s: read error at byte %llu", r->name, (unsigned long long)r->raw_off);
        r->raw_pos = 0;
        r->raw_len = (size_t)n;
        r->raw_off += (uint64_t)n;
        if (n == 0) r->eof_raw = true;
        return n;
    }
}

int mt_reader_open(mt_reader **out, const char *path, mt_err *e)
{
    mt_reader *r = mt_xcalloc(1, sizeof *r);
    if (!strcmp(path, "-")) {
        r->fd = 0;
        r->name = mt_xstrdup("<stdin>");
    } else {
        r->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (r->fd < 0) {
            mt_err_sys(e, "%s", path);
            free(r);
            return -1;
        }
        r->name = mt_xstrdup(path);
        struct stat st;
        if (fstat(r->fd, &st) == 0) {
            if (S_ISDIR(st.st_mode)) {
                mt_err_set(e, "%s: is a directory", path);
                close(r->fd);
                free(r->name);
                free(r);
                return -1;
            }
            if (S_ISREG(st.st_mode)) r->raw_size = (uint64_t)st.st_size;
        }
    }
    r->raw = mt_xmalloc(RAW_CAP);
    /* Sniff the magic: read until 4 bytes, EOF, or bytes that cannot begin it (so that a short first line
     * typed on a terminal or written into a pipe held open is not kept waiting for more). */
    static const unsigned char magic[4] = {0x28, 0xB5, 0x2F, 0xFD};
    while (r->raw_len < 4 && !r->eof_raw && !memcmp(r->raw, magic, r->raw_len)) {
        ssize_t n = read(r->fd, r->raw + r->raw_len, RAW_CAP - r->raw_len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            mt_err_sys(e, "%s: read error", r->name);
            mt_reader_close(r);
            return -1;
        }
        if (n == 0) r->eof_raw = true;
        r->raw_len += (size_t)n;
        r->raw_off += (uint64_t)n;
    }
    if (r->raw_len >= 4 && !memcmp(r->raw, magic, 4)) {
        r->zstd = true;
        r->dctx = ZSTD_createDCtx();
        r->out = mt_xmalloc(OUT_CAP);
    }
    *out = r;
    return 0;
}

void mt_reader_close(mt_reader *r)
{
    if (!r) return;
    if (r->fd > 0) close(r->fd);
    if (r->dctx) ZSTD_freeDCtx(r->dctx);
    free(r->raw);
    free(r->out);
    free(r->name);
    mt_buf_free(&r->line);
    free(r);
}

/* Runs the decoder on the raw bytes at raw_pos (at most ZSTD_SLICE of them), appending to
 * r->out[out_len..OUT_CAP). The decoder reports no position, so the offset named on corruption is where
 * the slice that completed the bad block ends. */
static int decompress(mt_reader *r, mt_err *e)
{
    size_t end = r->raw_len - r->raw_pos > ZSTD_SLICE ? r->raw_pos + ZSTD_SLICE : r->raw_len;
    ZSTD_inBuffer in = {r->raw, end, r->raw_pos};
    ZSTD_outBuffer ob = {r->out, OUT_CAP, r->out_len};
    size_t ret = ZSTD_decompressStream(r->dctx, &ob, &in);
    if (ZSTD_isError(ret))
        return mt_err_set(e, "%s: corrupt zstd input near compressed byte %llu: %s", r->name,
                          (unsigned long long)(r->raw_off - (r->raw_len - end)), ZSTD_getErrorName(ret));
    r->raw_pos = in.pos;
    r->frame_open = ret != 0;
    r->out_len = ob.pos;
    return 0;
}

/* Makes decompressed bytes available in r->out[out_pos..out_len). Returns count, 0 at EOF, -1 error. */
static ssize_t fill_out(mt_reader *r, mt_err *e)
{
    while (r->out_pos >= r->out_len) {
        ssize_t n = fill_raw(r, e);
        if (n < 0) return -1;
        if (n == 0) {
            if (r->frame_open)
                return mt_err_set(e, "%s: truncated zstd input (ends inside a frame at byte %llu)", r->name,
                                  (unsigned long long)r->raw_off);
            return 0;
        }
        r->out_pos = r->out_len = 0;
        if (decompress(r, e)) return -1;
    }
    return (ssize_t)(r->out_len - r->out_pos);
}

/* Pointer to and count of available bytes, refilling as needed. */
static ssize_t avail(mt_reader *r, const unsigned char **p, mt_err *e)
{
    if (r->zstd) {
        ssize_t n = fill_out(r, e);
        *p = r->out + r->out_pos;
        return n;
    }
    ssize_t n = fill_raw(r, e);
    *p = r->raw + r->raw_pos;
    return n;
}

static void consume(mt_reader *r, size_t n)
{
    if (r->zstd)
        r->out_pos += n;
    else
        r->raw_pos += n;
    r->off += n;
}

ssize_t mt_reader_read(mt_reader *r, void *buf, size_t n, mt_err *e)
{
    size_t got = 0;
    while (got < n) {
        const unsigned char *p;
        ssize_t a = avail(r, &p, e);
        if (a < 0) return -1;
        if (a == 0) break;
        size_t k = (size_t)a < n - got ? (size_t)a : n - got;
        memcpy((char *)buf + got, p, k);
        consume(r, k);
        got += k;
        if (got && r->zstd) break; /* return what a frame gave; caller loops */
    }
    return (ssize_t)got;
}

int mt_reader_read_full(mt_reader *r, void *buf, size_t n, mt_err *e)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = mt_reader_read(r, (char *)buf + got, n - got, e);
        if (k < 0) return -1;
        if (k == 0) {
            if (got == 0) return 0;
            return mt_err_set(e, "%s: truncated input at byte %llu (wanted %zu more bytes)", r->name,
                              (unsigned long long)r->off, n - got);
        }
        got += (size_t)k;
    }
    return 1;
}

/* Appends to the line being assembled; a line over the limit, or memory that cannot be had, is an error
 * naming the line instead of the program's abort on allocation failure. */
static int line_append(mt_reader *r, const void *p, size_t n, mt_err *e)
{
    unsigned long long lineno = (unsigned long long)r->lineno + 1;
    if (r->max_line && r->line.n + n > r->max_line)
        return mt_err_set(e, "%s: line %llu: longer than %zu bytes (--max-line-bytes)", r->name, lineno,
                          r->max_line);
    if (r->line.n + n + 1 > r->line.cap) {
        size_t c = r->line.cap ? r->line.cap : 64;
        while (c < r->line.n + n + 1) c *= 2;
        if (r->max_line && c > r->max_line + 1) c = r->max_line + 1;
        char *q = realloc(r->line.p, c);
        if (!q)
            return mt_err_set(e, "%s: line %llu: out of memory after %zu bytes of it", r->name, lineno, r->line.n);
        r->line.p = q;
        r->line.cap = c;
    }
    memcpy(r->line.p + r->line.n, p, n);
    r->line.n += n;
    return 0;
}

int mt_reader_getline(mt_reader *r, const char **line, size_t *len, mt_err *e)
{
    r->line.n = 0;
    bool any = false;
    for (;;) {
        const unsigned char *p;
        ssize_t a = avail(r, &p, e);
        if (a < 0) return -1;
        if (a == 0) break;
        any = true;
        const unsigned char *nl = memchr(p, '\n', (size_t)a);
        if (nl) {
            size_t k = (size_t)(nl - p);
            if (r->line.n == 0 && (!r->max_line || k <= r->max_line)) {
                /* Fast path: the line lies in the buffer; return it in place. The buffer is only
                 * refilled on the next call, after the caller is done with it. */
                *line = (const char *)p;
                *len = k;
                consume(r, k + 1);
                r->lineno++;
                return 1;
            }
            if (line_append(r, p, k, e)) return -1;
            consume(r, k + 1);
            r->lineno++;
            *line = r->line.p;
            *len = r->line.n;
            return 1;
        }
        if (line_append(r, p, (size_t)a, e)) return -1;
        consume(r, (size_t)a);
    }
    if (!any && r->line.n == 0) return 0;
    r->lineno++;
    if (line_append(r, "", 0, e)) return -1;
    *line = r->line.p;
    *len = r->line.n;
    return 1;
}

int mt_reader_line_ready(mt_reader *r, mt_err *e)
{
    for (;;) {
        const unsigned char *p = r->zstd ? r->out + r->out_pos : r->raw + r->raw_pos;
        size_t have = r->zstd ? r->out_len - r->out_pos : r->raw_len - r->raw_pos;
        if (memchr(p, '\n', have)) return 1;
        if (r->zstd && r->raw_pos < r->raw_len) {   /* compressed bytes not yet decoded */
            if (have == OUT_CAP) return 1;
            memmove(r->out, p, have);
            r->out_pos = 0;
            r->out_len = have;
            if (decompress(r, e)) return -1;
            continue;
        }
        if (r->eof_raw) return 1;   /* the last line, or the end */
        if (r->raw_len - r->raw_pos == RAW_CAP) return 1;
        struct pollfd pf = {r->fd, POLLIN, 0};
        int k = poll(&pf, 1, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return mt_err_sys(e, "%s: poll", r->name);
        if (k == 0) return 0;
        memmove(r->raw, r->raw + r->raw_pos, r->raw_len - r->raw_pos);
        r->raw_len -= r->raw_pos;
        r->raw_pos = 0;
        ssize_t n = read(r->fd, r->raw + r->raw_len, RAW_CAP - r->raw_len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (n < 0) return mt_err_sys(e, "%s: read error at byte %llu", r->name, (unsigned long long)r->raw_off);
        if (n == 0) r->eof_raw = true;
        r->raw_len += (size_t)n;
        r->raw_off += (uint64_t)n;
    }
}

void mt_reader_set_max_line(mt_reader *r, size_t max) { r->max_line = max; }

int mt_reader_peek(mt_reader *r, size_t n, const unsigned char **p, size_t *got, mt_err *e)
{
    if (n > RAW_CAP / 2) n = RAW_CAP / 2;
    for (;;) {
        size_t have = r->zstd ? r->out_len - r->out_pos : r->raw_len - r->raw_pos;
        *p = r->zstd ? r->out + r->out_pos : r->raw + r->raw_pos;
        *got = have;
        if (have >= n) return 0;
        if (!r->zstd) {
            if (r->eof_raw) return 0;
            memmove(r->raw, r->raw + r->raw_pos, have);
            r->raw_pos = 0;
            r->raw_len = have;
            ssize_t k = read(r->fd, r->raw + have, RAW_CAP - have);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) return mt_err_sys(e, "%s: read error", r->name);
            if (k == 0) r->eof_raw = true;
            r->raw_len += (size_t)k;
            r->raw_off += (uint64_t)k;
            continue;
        }
        memmove(r->out, r->out + r->out_pos, have);
        r->out_pos = 0;
        r->out_len = have;
        if (r->raw_pos >= r->raw_len) {
            ssize_t k = fill_raw(r, e);
            if (k < 0) return -1;
            if (k == 0) {
                if (r->frame_open)
                    return mt_err_set(e, "%s: truncated zstd input (ends inside a frame)", r->name);
                return 0;
            }
        }
        if (decompress(r, e)) return -1;
    }
}

const char *mt_reader_name(const mt_reader *r) { return r->name; }
uint64_t mt_reader_lineno(const mt_reader *r) { return r->lineno; }
uint64_t mt_reader_offset(const mt_reader *r) { return r->off; }
uint64_t mt_reader_raw_offset(const mt_reader *r) { return r->raw_off; }
uint64_t mt_reader_raw_size(const mt_reader *r) { return r->raw_size; }
bool mt_reader_is_zstd(const mt_reader *r) { return r->zstd; }
