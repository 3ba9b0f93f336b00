/* tensorboard.c: TensorBoard event files: hand-encoded protobuf Events in TFRecord frames (see
 * tensorboard.h). */
#include "report/tensorboard.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "io/fsutil.h"
#include "util/vec.h"

struct mt_tb {
    FILE *f;
    char *path;
    double flush_secs, last_flush;
    int failed;
};

static unsigned writer_count; /* the ".<n>" suffix: writers opened by this process */

/* ---- CRC32C ---- */
static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t mt_crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *b = p;
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
            crc_table[4][lo >> 24] ^ crc_table[3][b[4]] ^ crc_table[2][b[5]] ^ crc_table[1][b[6]] ^ crc_table[0][b[7]];
        b += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *b++) & 0xff];
    return ~c;
}

uint32_t mt_tfrecord_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static void put_le32(unsigned char *o, uint32_t v)
{
    for (int i = 0; i < 4; i++) o[i] = (unsigned char)(v >> (8 * i));
}
static void put_le64(unsigned char *o, uint64_t v)
{
    for (int i = 0; i < 8; i++) o[i] = (unsigned char)(v >> (8 * i));
}

size_t mt_tfrecord_frame(const void *data, size_t n, unsigned char *out)
{
    put_le64(out, (uint64_t)n);
    put_le32(out + 8, mt_tfrecord_mask(mt_crc32c(0, out, 8)));
    if (n) memcpy(out + 12, data, n);
    put_le32(out + 12 + n, mt_tfrecord_mask(mt_crc32c(0, data, n)));
    return n + 16;
}

/* ---- protobuf encoding ---- */
static void pb_varint(mt_buf *b, uint64_t v)
{
    unsigned char t[10];
    int n = 0;
    do {
        t[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) t[n] |= 0x80;
        n++;
    } while (v);
    mt_buf_append(b, t, (size_t)n);
}
static void pb_key(mt_buf *b, unsigned field, unsigned wire) { pb_varint(b, (uint64_t)field << 3 | wire); }
static void pb_bytes(mt_buf *b, unsigned field, const void *p, size_t n)
{
    pb_key(b, field, 2);
    pb_varint(b, n);
    mt_buf_append(b, p, n);
}
static void pb_double(mt_buf *b, unsigned field, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    if (!u) return; /* proto3: a +0.0 double is not serialized */
    unsigned char t[8];
    put_le64(t, u);
    pb_key(b, field, 1);
    mt_buf_append(b, t, 8);
}
static void pb_float_always(mt_buf *b, unsigned field, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    unsigned char t[4];
    put_le32(t, u);
    pb_key(b, field, 5);
    mt_buf_append(b, t, 4);
}
static void pb_int64(mt_buf *b, unsigned field, int64_t v)
{
    if (!v) return; /* proto3 default */
    pb_key(b, field, 0);
    pb_varint(b, (uint64_t)v);
}

/* Event fields: 1 wall_time (double), 2 step (int64), 3 file_version (string), 5 summary (Summary).
 * Summary: 1 value (repeated Summary.Value). Summary.Value: 1 tag, 2 simple_value (float, in a oneof,
 * so written even when 0), 8 tensor (TensorProto), 9 metadata (SummaryMetadata). */
static void event_with_summary(mt_buf *ev, double wall_time, int64_t step, const mt_buf *value)
{
    mt_buf summary = {0};
    pb_bytes(&summary, 1, value->p, value->n);
    pb_double(ev, 1, wall_time);
    pb_int64(ev, 2, step);
    pb_bytes(ev, 5, summary.p, summary.n);
    mt_buf_free(&summary);
}

static void scalar_event(mt_buf *ev, double wall_time, int64_t step, const char *tag, float value)
{
    mt_buf v = {0};
    pb_bytes(&v, 1, tag, strlen(tag));
    pb_float_always(&v, 2, value);
    event_with_summary(ev, wall_time, step, &v);
    mt_buf_free(&v);
}

size_t mt_tb_encode_scalar(unsigned char *out, double wall_time, int64_t step, const char *tag, float value)
{
    mt_buf ev = {0};
    scalar_event(&ev, wall_time, step, tag, value);
    size_t n = ev.n;
    memcpy(out, ev.p, n);
    mt_buf_free(&ev);
    return n;
}

/* ---- the writer ---- */
static double now_secs(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static int write_event(mt_tb *tb, const mt_buf *ev, mt_err *e)
{
    unsigned char head[12], tail[4];
    put_le64(head, (uint64_t)ev->n);
    put_le32(head + 8, mt_tfrecord_mask(mt_crc32c(0, head, 8)));
    put_le32(tail, mt_tfrecord_mask(mt_crc32c(0, ev->p, ev->n)));
    if (fwrite(head, 1, 12, tb->f) != 12 || fwrite(ev->p, 1, ev->n, tb->f) != ev->n || fwrite(tail, 1, 4, tb->f) != 4) {
        tb->failed = 1;
        return mt_err_sys(e, "%s: write failed", tb->path);
    }
    double t = now_secs();
    if (t - tb->last_flush >= tb->flush_secs) return mt_tb_flush(tb, e);
    return 0;
}

mt_tb *mt_tb_open(const char *dir, mt_err *e)
{
    if (mt_mkdir_p(dir, e)) return NULL;
    char host[256];
    if (gethostname(host, sizeof host)) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    double t = now_secs();
    size_t n = strlen(dir) + strlen(host) + 96;
    char *path = mt_xmalloc(n);
    snprintf(path, n, "%s/events.out.tfevents.%010lld.%s.%ld.%u", dir, (long long)t, host, (long)getpid(), writer_count++);
    FILE *f = fopen(path, "wb");
    if (!f) {
        mt_err_sys(e, "cannot create %s", path);
        free(path);
        return NULL;
    }
    mt_tb *tb = mt_xcalloc(1, sizeof *tb);
    tb->f = f;
    tb->path = path;
    tb->flush_secs = 120;
    tb->last_flush = t;
    mt_buf ev = {0};
    static const char version[] = "brain.Event:2";
    pb_double(&ev, 1, t);
    pb_bytes(&ev, 3, version, sizeof version - 1);
    int rc = write_event(tb, &ev, e);
    mt_buf_free(&ev);
    if (rc || mt_tb_flush(tb, e)) {
        mt_tb_close(tb, NULL);
        return NULL;
    }
    return tb;
}

const char *mt_tb_path(const mt_tb *tb) { return tb->path; }
void mt_tb_set_flush_secs(mt_tb *tb, double secs) { tb->flush_secs = secs; }

int mt_tb_add_scalar_at(mt_tb *tb, const char *tag, int64_t step, double value, double wall_time, mt_err *e)
{
    mt_buf ev = {0};
    scalar_event(&ev, wall_time, step, tag, (float)value);
    int rc = write_event(tb, &ev, e);
    mt_buf_free(&ev);
    return rc;
}

int mt_tb_add_scalar(mt_tb *tb, const char *tag, int64_t step, double value, mt_err *e)
{
    return mt_tb_add_scalar_at(tb, tag, step, value, now_secs(), e);
}

int mt_tb_add_text(mt_tb *tb, const char *tag, int64_t step, const char *text, mt_err *e)
{
    /* TensorProto: 1 dtype (DT_STRING = 7), 2 tensor_shape {2 dim {1 size = 1}}, 8 string_val.
     * SummaryMetadata: 1 plugin_data {1 plugin_name "text", 2 content (empty TextPluginData: omitted)}. */
    mt_buf dim = {0}, shape = {0}, tensor = {0}, plugin = {0}, meta = {0}, v = {0}, ev = {0};
    pb_int64(&dim, 1, 1);
    pb_bytes(&shape, 2, dim.p, dim.n);
    pb_int64(&tensor, 1, 7);
    pb_bytes(&tensor, 2, shape.p, shape.n);
    pb_bytes(&tensor, 8, text, strlen(text));
    pb_bytes(&plugin, 1, "text", 4);
    pb_bytes(&meta, 1, plugin.p, plugin.n);
    size_t tl = strlen(tag);
    char *full = mt_xmalloc(tl + 14);
    memcpy(full, tag, tl);
    memcpy(full + tl, "/text_summary", 14);
    pb_bytes(&v, 1, full, tl + 13);
    pb_bytes(&v, 8, tensor.p, tensor.n);
    pb_bytes(&v, 9, meta.p, meta.n);
    event_with_summary(&ev, now_secs(), step, &v);
    int rc = write_event(tb, &ev, e);
    free(full);
    mt_buf_free(&dim);
    mt_buf_free(&shape);
    mt_buf_free(&tensor);
    mt_buf_free(&plugin);
    mt_buf_free(&meta);
    mt_buf_free(&v);
    mt_buf_free(&ev);
    return rc;
}

int mt_tb_flush(mt_tb *tb, mt_err *e)
{
    tb->last_flush = now_secs();
    if (fflush(tb->f)) {
        tb->failed = 1;
        return mt_err_sys(e, "%s: write failed", tb->path);
    }
    return 0;
}

int mt_tb_close(mt_tb *tb, mt_err *e)
{
    if (!tb) return 0;
    int rc = 0;
    if (fclose(tb->f)) rc = mt_err_sys(e, "%s: write failed", tb->path);
    else if (tb->failed) rc = mt_err_set(e, "%s: earlier writes failed", tb->path);
    free(tb->path);
    free(tb);
    return rc;
}
