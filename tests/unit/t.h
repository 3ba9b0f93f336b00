/* t.h: the unit-test harness. Each test binary defines cases with TEST(name) and lists them in main
 * with RUN(name); every case prints "ok - <binary>: <case>" or "not ok - ...: <file>:<line>: <what>",
 * and tests/run counts those lines. A case may call T_SKIP("why") to print "skip - ...".
 */
#ifndef MT_TESTS_T_H
#define MT_TESTS_T_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *t_bin = "test";
static int t_failed_case, t_skipped_case, t_total_failed;
static char t_where[4096];

#define T_FAILF(...)                                                                                         \
    do {                                                                                                     \
        if (!t_failed_case) snprintf(t_where, sizeof t_where, __VA_ARGS__);                                  \
        t_failed_case = 1;                                                                                   \
    } while (0)

#define T_CHECK(cond)                                                                                        \
    do {                                                                                                     \
        if (!(cond)) T_FAILF("%s:%d: %s", __FILE__, __LINE__, #cond);                                        \
    } while (0)

#define T_EQ_INT(a, b)                                                                                       \
    do {                                                                                                     \
        long long t_a = (long long)(a), t_b = (long long)(b);                                                \
        if (t_a != t_b) T_FAILF("%s:%d: %s == %lld, expected %lld", __FILE__, __LINE__, #a, t_a, t_b);       \
    } while (0)

#define T_EQ_STR(a, b)                                                                                       \
    do {                                                                                                     \
        const char *t_a = (a), *t_b = (b);                                                                   \
        if (strcmp(t_a, t_b)) T_FAILF("%s:%d: %s == \"%.1000s\", expected \"%.1000s\"", __FILE__, __LINE__, #a, t_a, t_b); \
    } while (0)

#define T_NEAR(a, b, rel)                                                                                    \
    do {                                                                                                     \
        double t_a = (a), t_b = (b);                                                                         \
        if (!(fabs(t_a - t_b) <= (rel) * fmax(1e-30, fmax(fabs(t_a), fabs(t_b)))))                           \
            T_FAILF("%s:%d: %s == %.9g, expected %.9g", __FILE__, __LINE__, #a, t_a, t_b);                   \
    } while (0)

#define T_SKIP(why)                                                                                          \
    do {                                                                                                     \
        snprintf(t_where, sizeof t_where, "%s", why);                                                        \
        t_skipped_case = 1;                                                                                  \
        return;                                                                                              \
    } while (0)

#define TEST(name) static void name(void)

static inline void t_run(const char *name, void (*fn)(void))
{
    t_failed_case = t_skipped_case = 0;
    t_where[0] = 0;
    fn();
    if (t_failed_case) {
        printf("not ok - %s: %s: %s\n", t_bin, name, t_where);
        t_total_failed++;
    } else if (t_skipped_case) {
        printf("skip - %s: %s: %s\n", t_bin, name, t_where);
    } else {
        printf("ok - %s: %s\n", t_bin, name);
    }
    fflush(stdout);
}

/* A fresh scratch directory for the binary's files under $TMPDIR, removed by t_tmpdir_remove() at the end
 * unless a case failed: then it stays and its path is printed on stderr. Under tests/run
 * (MT_TEST_KEEP_TMP=1) the runner removes it or keeps and prints it. */
static char t_tmp[512];
static inline const char *t_tmpdir(void)
{
    snprintf(t_tmp, sizeof t_tmp, "%s/mt-unit.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(t_tmp)) {
        perror(t_tmp);
        exit(1);
    }
    return t_tmp;
}
/* "<scratch dir>/<name>"; the last four results stay valid. */
static inline char *t_path(const char *name)
{
    static char buf[4][600];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", t_tmp, name);
    return buf[k];
}
static inline void t_tmpdir_remove(void)
{
    if (!t_tmp[0]) return;
    if (t_total_failed) {
        if (!getenv("MT_TEST_KEEP_TMP")) fprintf(stderr, "# scratch kept: %s\n", t_tmp);
        return;
    }
    if (getenv("MT_TEST_KEEP_TMP")) return;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t_tmp);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", t_tmp);
}

#define T_MAIN_BEGIN(binname)                                                                                \
    int main(int argc, char **argv)                                                                          \
    {                                                                                                        \
        (void)argc;                                                                                          \
        (void)argv;                                                                                          \
        t_bin = binname;
#define RUN(name) t_run(#name, name)
#define T_MAIN_END                                                                                           \
    return t_total_failed ? 1 : 0;                                                                           \
    }

#endif
