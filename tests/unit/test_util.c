/* test_util.c: flag parsing, zstd/plain reader, atomic outputs, mkdir -p. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include "io/atomic.h"
#include "io/fsutil.h"
#include "io/reader.h"
#include "t.h"
#include "util/flags.h"

static const char *tmpdir;

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

TEST(flags_parse_values)
{
    int workers = 1;
    double lr = 0;
    bool eod = false;
    const char *vocab = NULL, *style = "linear";
    mt_strs keys = {0};
    const mt_flag flags[] = {
        {"--workers", MT_F_INT, &workers, "N", "workers", 1, 1024, NULL},
        {"--lr", MT_F_DOUBLE, &lr, "LR", "lr", 0, 0, NULL},
        {"--append-eod", MT_F_BOOL, &eod, NULL, "eod", 0, 0, NULL},
        {"--vocab-file", MT_F_STR, &vocab, "FILE", "vocab", 0, 0, NULL},
        {"--json-keys", MT_F_STRS, &keys, "KEY", "keys", 0, 0, NULL},
        {"--lr-decay-style", MT_F_CHOICE, &style, NULL, "style", 0, 0, "constant|linear|cosine"},
        {0},
    };
    mt_cmd cmd = {"t", "", "", flags};
    char *argv[] = {"t", "--workers=4", "--lr", "5e-4", "--append-eod", "--json-keys", "a", "b", "--vocab-file",
                    "v.json", "in.jsonl", "--lr-decay-style", "cosine", "-", NULL};
    mt_strs pos;
    mt_err e;
    T_EQ_INT(mt_flags_parse(&cmd, 14, argv, &pos, NULL, &e), 0);
    T_EQ_INT(workers, 4);
    T_NEAR(lr, 5e-4, 1e-12);
    T_CHECK(eod);
    T_EQ_INT(keys.n, 2);
    T_EQ_STR(keys.v[1], "b");
    T_EQ_STR(vocab, "v.json");
    T_EQ_STR(style, "cosine");
    T_EQ_INT(pos.n, 2);
    T_EQ_STR(pos.v[0], "in.jsonl");
    T_EQ_STR(pos.v[1], "-");
    free(pos.v);
    free(keys.v);

    char *bad1[] = {"t", "--workers", "0"};
    T_EQ_INT(mt_flags_parse(&cmd, 3, bad1, &pos, NULL, &e), -1);
    free(pos.v);
    T_CHECK(strstr(e.msg, "--workers") && strstr(e.msg, "range"));
    char *bad2[] = {"t", "--workers", "x2"};
    T_EQ_INT(mt_flags_parse(&cmd, 3, bad2, &pos, NULL, &e), -1);
    free(pos.v);
    T_CHECK(strstr(e.msg, "not an integer"));
    char *bad3[] = {"t", "--nope"};
    T_EQ_INT(mt_flags_parse(&cmd, 2, bad3, &pos, NULL, &e), -1);
    free(pos.v);
    T_CHECK(strstr(e.msg, "unknown option '--nope'"));
    char *bad4[] = {"t", "--lr-decay-style", "cosin"};
    T_EQ_INT(mt_flags_parse(&cmd, 3, bad4, &pos, NULL, &e), -1);
    free(pos.v);
    T_CHECK(strstr(e.msg, "invalid choice"));
    char *bad5[] = {"t", "--vocab-file"};
    T_EQ_INT(mt_flags_parse(&cmd, 2, bad5, &pos, NULL, &e), -1);
    free(pos.v);
    T_CHECK(strstr(e.msg, "needs a value"));
}

static int read_lines(const char *path, char *acc, size_t cap, mt_err *e)
{
    mt_reader *r;
    if (mt_reader_open(&r, path, e)) return -1;
    const char *l;
    size_t n;
    int rc;
    acc[0] = 0;
    while ((rc = mt_reader_getline(r, &l, &n, e)) == 1) {
        strncat(acc, l, n < cap - strlen(acc) - 2 ? n : 0);
        strcat(acc, "|");
    }
    mt_reader_close(r);
    return rc;
}

TEST(reader_plain_and_zstd)
{
    const char text[] = "first\n\nthird line\nno newline";
    char p1[300], p2[300], acc[256];
    mt_err e;
    snprintf(p1, sizeof p1, "%s/plain.txt", tmpdir);
    write_file(p1, text, strlen(text));
    T_EQ_INT(read_lines(p1, acc, sizeof acc, &e), 0);
    T_EQ_STR(acc, "first||third line|no newline|");

    /* two concatenated zstd frames, named without .zst */
    char z[512];
    size_t a = ZSTD_compress(z, sizeof z, text, 10, 3);
    size_t b = ZSTD_compress(z + a, sizeof z - a, text + 10, strlen(text) - 10, 3);
    snprintf(p2, sizeof p2, "%s/compressed.dat", tmpdir);
    write_file(p2, z, a + b);
    T_EQ_INT(read_lines(p2, acc, sizeof acc, &e), 0);
    T_EQ_STR(acc, "first||third line|no newline|");

    /* truncated frame */
    write_file(p2, z, a + b - 3);
    T_EQ_INT(read_lines(p2, acc, sizeof acc, &e), -1);
    T_CHECK(strstr(e.msg, "truncated zstd"));
    T_CHECK(strstr(e.msg, p2));
}

TEST(reader_long_line)
{
    char p[300];
    snprintf(p, sizeof p, "%s/long.txt", tmpdir);
    size_t n = 3u << 20;
    char *big = malloc(n + 3);
    memset(big, 'x', n);
    memcpy(big + n, "\ny\n", 3);
    write_file(p, big, n + 3);
    mt_reader *r;
    mt_err e;
    T_EQ_INT(mt_reader_open(&r, p, &e), 0);
    const char *l;
    size_t len;
    T_EQ_INT(mt_reader_getline(r, &l, &len, &e), 1);
    T_EQ_INT(len, n);
    T_CHECK(l[0] == 'x' && l[n - 1] == 'x');
    T_EQ_INT(mt_reader_getline(r, &l, &len, &e), 1);
    T_EQ_INT(len, 1);
    T_EQ_INT(mt_reader_lineno(r), 2);
    T_EQ_INT(mt_reader_getline(r, &l, &len, &e), 0);
    mt_reader_close(r);
    free(big);
}

TEST(atomic_commit_and_abort)
{
    char p[300];
    mt_err e;
    mt_out o;
    snprintf(p, sizeof p, "%s/out.bin", tmpdir);
    T_EQ_INT(mt_out_open(&o, p, &e), 0);
    T_EQ_INT(mt_out_write(&o, "abc", 3, &e), 0);
    T_CHECK(access(p, F_OK) != 0); /* not visible before commit */
    T_EQ_INT(mt_out_commit(&o, &e), 0);
    struct stat st;
    T_EQ_INT(stat(p, &st), 0);
    T_EQ_INT(st.st_size, 3);

    char p2[300];
    snprintf(p2, sizeof p2, "%s/aborted.bin", tmpdir);
    T_EQ_INT(mt_out_open(&o, p2, &e), 0);
    char tmpname[600];
    snprintf(tmpname, sizeof tmpname, "%s", o.tmp);
    T_EQ_INT(access(tmpname, F_OK), 0);
    mt_out_abort(&o);
    T_CHECK(access(tmpname, F_OK) != 0);
    T_CHECK(access(p2, F_OK) != 0);

    T_EQ_INT(mt_out_open(&o, "/nonexistent-dir/x", &e), -1);
    T_CHECK(strstr(e.msg, "/nonexistent-dir/x"));
}

/* The shared rows parse and print as the programs' own rows did (mt-shuffle's table, in part). */
TEST(flags_shared_rows)
{
    mt_strs data = {0}, pos;
    const char *split = NULL, *vocab = NULL, *merges = NULL;
    int64_t seed = 1234;
    bool decode = false, quiet = false;
    const mt_flag flags[] = {
        MT_FLAG_DATA_PATH(&data, "dataset prefix"),
        MT_FLAG_SPLIT(&split, MT_HELP_SPLIT),
        MT_FLAG_SEED(&seed, "seed"),
        MT_FLAGS_DECODE(&decode, "decode ids", &vocab, &merges),
        MT_FLAG_QUIET(&quiet, "quiet"),
        {0},
    };
    mt_cmd cmd = {"t", "", "", flags};
    mt_err e;
    char *argv[] = {"t", "--data-path", "1", "a", "2", "b", "--split=9,1,0", "--seed", "4294967295", "--decode",
                    "--vocab-file", "v.json", "--merge-file", "m.txt", "--quiet", NULL};
    if (mt_flags_parse(&cmd, 15, argv, &pos, NULL, &e)) {
        T_FAILF("%s:%d: %s", __FILE__, __LINE__, e.msg);
        return;
    }
    T_EQ_INT(data.n, 4);
    T_EQ_STR(split, "9,1,0");
    T_EQ_INT(seed, 4294967295LL);
    T_CHECK(decode && quiet);
    T_EQ_STR(vocab, "v.json");
    T_EQ_STR(merges, "m.txt");
    free(pos.v);
    free(data.v);
    char *bad[] = {"t", "--seed", "4294967296"};
    T_EQ_INT(mt_flags_parse(&cmd, 3, bad, &pos, NULL, &e), -1);
    T_CHECK(strstr(e.msg, "--seed"));
    free(pos.v);

    char *usage = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&usage, &n);
    mt_flags_usage(&cmd, f);
    fclose(f);
    T_CHECK(strstr(usage, "--data-path [W] PREFIX"));
    T_CHECK(strstr(usage, "--seed SEED"));
    T_CHECK(strstr(usage, "train,valid,test weights (default \"969, 30, 1\")"));
    T_CHECK(strstr(usage, "--merge-file FILE") && strstr(usage, "with --decode: merges.txt"));
    free(usage);
}

TEST(mkdir_p_parents_existing_and_errors)
{
    mt_err e;
    struct stat st;
    T_EQ_INT(mt_mkdir_p(t_path("a/b//c/"), &e), 0);
    T_CHECK(stat(t_path("a/b/c"), &st) == 0 && S_ISDIR(st.st_mode));
    T_EQ_INT(mt_mkdir_p(t_path("a/b"), &e), 0); /* already there */
    write_file(t_path("plain"), "x", 1);
    T_EQ_INT(mt_mkdir_p(t_path("plain"), &e), -1);
    T_CHECK(strstr(e.msg, "plain") && strstr(e.msg, "not a directory"));
    T_EQ_INT(mt_mkdir_p(t_path("plain/sub"), &e), -1);
    T_CHECK(strstr(e.msg, "cannot create directory") && strstr(e.msg, "/plain: "));
    T_EQ_INT(mt_mkdir_p("", &e), -1);
}

TEST(reader_max_line)
{
    char p[300];
    snprintf(p, sizeof p, "%s/bounded.txt", tmpdir);
    write_file(p, "abc\nabcd\nab", 11);
    mt_reader *r;
    mt_err e;
    T_EQ_INT(mt_reader_open(&r, p, &e), 0);
    mt_reader_set_max_line(r, 3);
    const char *l;
    size_t len;
    T_EQ_INT(mt_reader_getline(r, &l, &len, &e), 1);
    T_EQ_INT(len, 3);
    T_EQ_INT(mt_reader_getline(r, &l, &len, &e), -1); /* in the buffer: the fast path is bounded too */
    T_CHECK(strstr(e.msg, "bounded.txt: line 2: longer than 3 bytes"));
    mt_reader_close(r);
    T_EQ_INT(mt_reader_open(&r, p, &e), 0);
    mt_reader_set_max_line(r, 4);
    for (int i = 0; i < 3; i++) T_EQ_INT(mt_reader_getline(r, &l, &len, &e), 1);
    T_EQ_INT(len, 2);
    T_EQ_INT(mt_reader_getline(r, &l, &len, &e), 0);
    mt_reader_close(r);
}

/* A PID that no process has: a child's, after it is reaped. */
static long dead_pid(void)
{
    pid_t c = fork();
    if (c == 0) _exit(0);
    waitpid(c, NULL, 0);
    return (long)c;
}

static bool exists(const char *dir, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* The PID of a temporary's name, or -1 when mt_tmp_parse does not take it; its tag into tag. */
static long tmp_pid(const char *name, char *tag)
{
    mt_tmp_owner o;
    if (mt_tmp_parse(name, &o)) return -1;
    if (tag) strcpy(tag, o.tag);
    return o.pid;
}

static long save_pid(const char *name, char *tag)
{
    mt_tmp_owner o;
    if (mt_tmp_parse_save(name, &o)) return -1;
    if (tag) strcpy(tag, o.tag);
    return o.pid;
}

TEST(tmp_names)
{
    char tag[16];
    const char *mine = mt_tmp_tag();
    T_EQ_INT(strlen(mine), MT_TMP_TAG_LEN);
    for (int i = 0; i < MT_TMP_TAG_LEN; i++) T_CHECK(mine[i] >= 'a' && mine[i] <= 'z');
    T_EQ_INT(tmp_pid(".a.bin.tmp.123.0", tag), 123);    /* the old form: no tag */
    T_EQ_STR(tag, "");
    T_EQ_INT(tmp_pid(".a.bin.tmp.abcdefgh.123.0", tag), 123);
    T_EQ_STR(tag, "abcdefgh");
    T_EQ_INT(tmp_pid(".a.tmp.b.bin.tmp.77.12", NULL), 77);
    T_EQ_INT(tmp_pid(".a.tmp.b.bin.tmp.abcdefgh.77.12", NULL), 77);
    T_EQ_INT(tmp_pid("a.bin.tmp.123.0", NULL), -1);    /* no leading dot */
    T_EQ_INT(tmp_pid(".tmp.123.0", NULL), -1);         /* no name */
    T_EQ_INT(tmp_pid(".a.bin.tmp.123.0.x", NULL), -1); /* more after the counter */
    T_EQ_INT(tmp_pid(".a.bin.tmp.abcdefgh.123.0.x", NULL), -1);
    T_EQ_INT(tmp_pid(".a.bin.tmp.abcdefg.123.0", NULL), -1);   /* a tag of 7 letters */
    T_EQ_INT(tmp_pid(".a.bin.tmp.abcdefgH.123.0", NULL), -1);
    T_EQ_INT(tmp_pid(".a.bin.tmp.123.", NULL), -1);
    T_EQ_INT(tmp_pid(".a.bin.tmp.-1.0", NULL), -1);
    T_EQ_INT(tmp_pid(".a.bin.tmp.0.0", NULL), -1);
    T_EQ_INT(save_pid("iter_0000200.tmp-123", tag), 123);
    T_EQ_STR(tag, "");
    T_EQ_INT(save_pid("iter_0000200.tmp-123-old", NULL), 123);
    T_EQ_INT(save_pid("release.tmp-abcdefgh-77-old", tag), 77);
    T_EQ_STR(tag, "abcdefgh");
    T_EQ_INT(save_pid("iter_0000200.tmp-abcdefgh-", NULL), -1);
    T_EQ_INT(save_pid("iter_0000200.tmp-abcdefgh--5", NULL), -1);
    T_EQ_INT(save_pid("x_0000200.tmp-123", NULL), -1);
    /* the names made are the names parsed, with this process's tag and PID */
    char *p = mt_tmp_path("d", "x.bin", 7), *q = mt_tmp_save_path("d/iter_0000001", "-old");
    T_EQ_INT(tmp_pid(p + 2, tag), (long)getpid());
    T_EQ_STR(tag, mine);
    T_CHECK(!strncmp(q, "d/iter_0000001.tmp-", 19));
    T_EQ_INT(save_pid(q + 2, tag), (long)getpid());
    T_EQ_STR(tag, mine);
    free(p);
    free(q);
    T_CHECK(mt_pid_dead(dead_pid()));
    T_CHECK(!mt_pid_dead((long)getpid()));
}

/* A tag that is not this host's. */
static const char *other_tag(void) { return strcmp(mt_tmp_tag(), "otherhst") ? "otherhst" : "anotherh"; }

TEST(atomic_stale_temporaries)
{
    char dir[300], name[9][128], p[4096];
    snprintf(dir, sizeof dir, "%s/stale", tmpdir);
    T_EQ_INT(mkdir(dir, 0755), 0);
    long dead = dead_pid();
    const char *me = mt_tmp_tag(), *other = other_tag();
    snprintf(name[0], sizeof name[0], ".x.bin.tmp.%ld.0", dead);                   /* old form: removed */
    snprintf(name[1], sizeof name[1], ".x.idx.tmp.%ld.3", dead);                   /* old form: removed */
    snprintf(name[2], sizeof name[2], ".x.bin.tmp.%s.%ld.5", me, dead);            /* this host: removed */
    snprintf(name[3], sizeof name[3], ".x.bin.tmp.%s.%ld.0", other, dead);         /* another host: kept */
    snprintf(name[4], sizeof name[4], ".x.bin.tmp.%ld.0", (long)getppid());        /* alive: kept */
    snprintf(name[5], sizeof name[5], ".x.bin.tmp.%s.%ld.1", me, (long)getppid()); /* alive: kept */
    snprintf(name[6], sizeof name[6], ".x.bin.tmp.%s.%ld.999", me, (long)getpid()); /* ours: kept */
    snprintf(name[7], sizeof name[7], "x.bin.tmp.%ld.0", dead);                    /* another name: kept */
    snprintf(name[8], sizeof name[8], ".d.tmp.%s.%ld.0", me, dead);                /* a directory: kept */
    for (int i = 0; i < 8; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, name[i]);
        write_file(p, "x", 1);
    }
    snprintf(p, sizeof p, "%s/%s", dir, name[8]);
    T_EQ_INT(mkdir(p, 0755), 0);
    /* the first output opened in the directory sweeps it */
    mt_out o;
    mt_err e;
    snprintf(p, sizeof p, "%s/x.bin", dir);
    T_EQ_INT(mt_out_open(&o, p, &e), 0);
    T_CHECK(strstr(o.tmp, me) != NULL);
    T_EQ_INT(mt_out_commit(&o, &e), 0);
    for (int i = 0; i < 3; i++) T_CHECK(!exists(dir, name[i]));
    for (int i = 3; i < 9; i++) T_CHECK(exists(dir, name[i]));
    /* directories too, where asked (HF output directories, checkpoint saves) */
    T_EQ_INT(mt_remove_stale(dir, mt_tmp_parse, false, true), 1);
    T_CHECK(!exists(dir, name[8]) && exists(dir, name[3]));
    char save[4][128];
    snprintf(save[0], sizeof save[0], "iter_0000010.tmp-%ld", dead);
    snprintf(save[1], sizeof save[1], "iter_0000010.tmp-%s-%ld", me, dead);
    snprintf(save[2], sizeof save[2], "iter_0000010.tmp-%s-%ld", other, dead);
    snprintf(save[3], sizeof save[3], "release.tmp-%s-%ld-old", me, (long)getpid());
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, save[i]);
        T_EQ_INT(mkdir(p, 0755), 0);
    }
    T_EQ_INT(mt_remove_stale(dir, mt_tmp_parse_save, true, true), 3); /* ours too, with self */
    T_CHECK(exists(dir, save[2]) && !exists(dir, save[0]) && !exists(dir, save[1]) && !exists(dir, save[3]));
}

T_MAIN_BEGIN("test_util")
    tmpdir = t_tmpdir();
    RUN(flags_parse_values);
    RUN(reader_plain_and_zstd);
    RUN(reader_long_line);
    RUN(atomic_commit_and_abort);
    RUN(flags_shared_rows);
    RUN(mkdir_p_parents_existing_and_errors);
    RUN(reader_max_line);
    RUN(tmp_names);
    RUN(atomic_stale_temporaries);
    t_tmpdir_remove();
T_MAIN_END
