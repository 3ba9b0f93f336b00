/* test_tensorboard.c: the TensorBoard event writer: CRC32C known vectors (RFC 3720), TFRecord masking
 * and framing, protobuf bytes of a scalar Event built by hand from the field numbers, the file name
 * and first record. With --write DIR it writes a fixed set of events for tests/pipeline/tensorboard.sh
 * (an independent decoder) and prints "path PID PATH".
 */
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "t.h"
#include "report/tensorboard.h"

TEST(crc32c_vectors)
{
    unsigned char b[32];
    T_EQ_INT(mt_crc32c(0, "123456789", 9), 0xE3069283u);
    memset(b, 0, 32);
    T_EQ_INT(mt_crc32c(0, b, 32), 0x8A9136AAu);
    memset(b, 0xff, 32);
    T_EQ_INT(mt_crc32c(0, b, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++) b[i] = (unsigned char)i;
    T_EQ_INT(mt_crc32c(0, b, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++) b[i] = (unsigned char)(31 - i);
    T_EQ_INT(mt_crc32c(0, b, 32), 0x113FDB5Cu);
    T_EQ_INT(mt_crc32c(0, "", 0), 0);
    /* continuing a CRC over a second piece equals the CRC of the whole */
    T_EQ_INT(mt_crc32c(mt_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    for (int k = 0; k < 9; k++) T_EQ_INT(mt_crc32c(mt_crc32c(0, "123456789", (size_t)k), "123456789" + k, (size_t)(9 - k)), 0xE3069283u);
}

TEST(tfrecord_mask_and_frame)
{
    T_EQ_INT(mt_tfrecord_mask(0), 0xa282ead8u);
    T_EQ_INT(mt_tfrecord_mask(0xE3069283u), 0xc78ab0e5u);
    unsigned char out[32];
    T_EQ_INT(mt_tfrecord_frame("123456789", 9, out), 25);
    unsigned char len[8] = {9, 0, 0, 0, 0, 0, 0, 0};
    uint32_t lc = mt_tfrecord_mask(mt_crc32c(0, len, 8));
    T_CHECK(!memcmp(out, len, 8));
    T_EQ_INT(out[8] | out[9] << 8 | out[10] << 16 | (uint32_t)out[11] << 24, lc);
    T_CHECK(!memcmp(out + 12, "123456789", 9));
    T_EQ_INT(out[21] | out[22] << 8 | out[23] << 16 | (uint32_t)out[24] << 24, 0xc78ab0e5u);
}

TEST(scalar_event_bytes)
{
    /* wall_time 1.5 (field 1, fixed64), step 3 (field 2, varint), summary (field 5) { value (1) { tag (1) "a",
     * simple_value (2, fixed32) 1.0f } } */
    static const unsigned char want[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0x03, 0x2a, 0x0a, 0x0a, 0x08,
                                         0x0a, 0x01, 'a', 0x15, 0, 0, 0x80, 0x3f};
    unsigned char got[128];
    T_EQ_INT(mt_tb_encode_scalar(got, 1.5, 3, "a", 1.0f), sizeof want);
    T_CHECK(!memcmp(got, want, sizeof want));
    /* step 0 is omitted (proto3 default); a 0.0 value is still written (oneof member) */
    static const unsigned char want0[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x2a, 0x0a, 0x0a, 0x08,
                                          0x0a, 0x01, 'a', 0x15, 0, 0, 0, 0};
    T_EQ_INT(mt_tb_encode_scalar(got, 1.5, 0, "a", 0.0f), sizeof want0);
    T_CHECK(!memcmp(got, want0, sizeof want0));
    /* a negative step is a 10-byte varint; 300 is ac 02 */
    size_t n = mt_tb_encode_scalar(got, 1.5, -1, "a", 1.0f);
    T_EQ_INT(n, sizeof want + 9);
    T_CHECK(got[9] == 0x10 && got[10] == 0xff && got[18] == 0xff && got[19] == 0x01);
    n = mt_tb_encode_scalar(got, 1.5, 300, "a", 1.0f);
    T_CHECK(n == sizeof want + 1 && got[10] == 0xac && got[11] == 0x02);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *p = malloc(1 << 16);
    *n = fread(p, 1, 1 << 16, f);
    fclose(f);
    return p;
}

TEST(file_name_and_first_record)
{
    mt_err e;
    time_t t0 = time(NULL);
    char dir[600];
    snprintf(dir, sizeof dir, "%s", t_path("tb/a/b"));
    mt_tb *tb = mt_tb_open(dir, &e);
    if (!tb) T_FAILF("open: %s", e.msg);
    if (!tb) return;
    const char *p = mt_tb_path(tb);
    char host[256] = "localhost";
    gethostname(host, sizeof host);
    char want[1200];
    const char *base = strrchr(p, '/') + 1;
    long long secs = atoll(base + strlen("events.out.tfevents."));
    T_CHECK(secs >= (long long)t0 && secs <= (long long)time(NULL));
    snprintf(want, sizeof want, "%s/events.out.tfevents.%010lld.%s.%ld.", dir, secs, host, (long)getpid());
    T_CHECK(!strncmp(p, want, strlen(want)));
    T_EQ_INT(mt_tb_add_scalar(tb, MT_TB_LM_LOSS, 1, 10.5, &e), 0);
    char *path = mt_xstrdup(p);
    T_EQ_INT(mt_tb_close(tb, &e), 0);
    size_t n;
    unsigned char *d = slurp(path, &n);
    T_CHECK(d != NULL);
    if (!d) return;
    /* record 1: Event {wall_time, file_version "brain.Event:2"} = 9 + 2 + 13 bytes */
    T_CHECK(n > 40 && d[0] == 24 && d[12] == 0x09 && d[21] == 0x1a && d[22] == 13 && !memcmp(d + 23, "brain.Event:2", 13));
    T_EQ_INT(d[8] | d[9] << 8 | d[10] << 16 | (uint32_t)d[11] << 24, mt_tfrecord_mask(mt_crc32c(0, d, 8)));
    T_EQ_INT(d[36] | d[37] << 8 | d[38] << 16 | (uint32_t)d[39] << 24, mt_tfrecord_mask(mt_crc32c(0, d + 12, 24)));
    /* record 2 is the scalar */
    size_t len2 = d[40];
    T_EQ_INT(n, 40 + 16 + len2);
    free(d);
    /* a second writer of the same process gets the next suffix */
    tb = mt_tb_open(dir, &e);
    T_CHECK(tb && strcmp(mt_tb_path(tb), path) != 0);
    mt_tb_close(tb, &e);
    free(path);
    T_CHECK(mt_tb_open("/proc/no/such/dir", &e) == NULL && strstr(e.msg, "cannot create"));
}

/* The events tests/pipeline/tensorboard.sh expects, in this order (the script builds the same list). */
static int write_main(const char *dir)
{
    mt_err e;
    mt_tb *tb = mt_tb_open(dir, &e);
    if (!tb) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
#define ADD(tag, step, v)                                                                                    \
    if (mt_tb_add_scalar(tb, tag, step, v, &e)) goto fail
    if (mt_tb_add_text(tb, "lr", 0, "0.0006", &e)) goto fail;
    if (mt_tb_add_text(tb, "data_path", 0, "['/data/c\xc3\xb6" "de \"x\"']", &e)) goto fail;
    for (int i = 1; i <= 50; i++) {
        ADD(MT_TB_LEARNING_RATE, i, 6e-4 * i / 50);
        ADD(MT_TB_LEARNING_RATE MT_TB_VS_SAMPLES, (int64_t)i * 512, 6e-4 * i / 50);
        ADD(MT_TB_BATCH_SIZE, i, 512);
        ADD(MT_TB_LM_LOSS, i, 11.0 - i * 0.1);
        ADD(MT_TB_LOSS_SCALE, i, 4294967296.0);
        ADD(MT_TB_GRAD_NORM, i, 1.0 / i);
        ADD(MT_TB_TOKENS_PER_SEC, i, 123456.75 + i);
    }
    ADD(MT_TB_LM_LOSS_VALIDATION, 50, 5.25);
    ADD(MT_TB_LM_LOSS_VALIDATION_PPL, 50, exp(5.25));
    ADD("special", 0, 0.0);
    ADD("special", 1, -0.0);
    ADD("special", 2, NAN);
    ADD("special", 3, INFINITY);
    ADD("special", 4, -INFINITY);
    ADD("special", 5, 1e-45);
    ADD("special", 6, 3.4028234663852886e38);
    ADD("special", -1, -7.0);
    ADD("special", (int64_t)1 << 40, 0.1);
    ADD("special", INT64_MAX, 1e30);
    ADD("\xc3\xbcnicode/tag with spaces", 7, 2.5);
#undef ADD
    printf("path %ld %s\n", (long)getpid(), mt_tb_path(tb));
    if (mt_tb_close(tb, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    return 0;
fail:
    fprintf(stderr, "%s\n", e.msg);
    mt_tb_close(tb, NULL);
    return 1;
}

T_MAIN_BEGIN("test_tensorboard")
if (argc > 2 && !strcmp(argv[1], "--write")) return write_main(argv[2]);
t_tmpdir();
RUN(crc32c_vectors);
RUN(tfrecord_mask_and_frame);
RUN(scalar_event_bytes);
RUN(file_name_and_first_record);
t_tmpdir_remove();
T_MAIN_END
