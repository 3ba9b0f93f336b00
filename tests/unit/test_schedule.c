/* test_schedule.c: the learning-rate / weight-decay schedule at hand-computed boundary steps, the option
 * checks, and a --dump mode for tests/pipeline/schedule-ref.sh: each stdin line "key=value ..." (Megatron
 * option names with underscores, plus steps=N,N,...) becomes "err <message>" or "ok" followed by
 * "lr wd" pairs (%.17g) for the listed step counts.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>

#include "t.h"
#include "train/schedule.h"

static mt_sched iter_sched(mt_lr_style style, double lr, double min_lr, int64_t iters, int64_t gbs, int64_t warmup_iters)
{
    mt_sched_args a = mt_sched_args_default();
    a.lr = lr;
    a.min_lr = min_lr;
    a.lr_decay_style = style;
    a.train_iters = iters;
    a.global_batch_size = gbs;
    a.lr_warmup_iters = warmup_iters;
    mt_sched s;
    mt_err e;
    if (mt_sched_init(&s, &a, &e)) T_FAILF("init: %s", e.msg);
    return s;
}

TEST(cosine_iteration_based)
{
    /* 100 iterations of 8 samples, 10 warmup iterations: warmup 80 samples, decay 800. */
    mt_sched s = iter_sched(MT_LR_COSINE, 6e-4, 6e-5, 100, 8, 10);
    T_NEAR(s.warmup_steps, 80, 0);
    T_EQ_INT(s.decay_steps, 800);
    T_EQ_INT(s.wd_incr_steps, 800);
    T_EQ_INT(s.num_steps, 0);
    T_CHECK(s.lr == 0.0);                                     /* constructed with step(0): init lr */
    T_CHECK(mt_sched_lr_at(&s, 40) == 6e-4 * 40 / 80);       /* half way through warmup */
    T_NEAR(mt_sched_lr_at(&s, 80), 6e-4, 1e-15);             /* end of warmup is still warmup */
    T_CHECK(mt_sched_lr_at(&s, 80) == 6e-4 * 80 / 80);
    double c = 0.5 * (cos(M_PI * (8.0 / 720.0)) + 1.0);
    T_CHECK(mt_sched_lr_at(&s, 88) == 6e-5 + c * (6e-4 - 6e-5)); /* one iteration into the decay */
    T_NEAR(mt_sched_lr_at(&s, 440), 3.3e-4, 1e-12);          /* decay midpoint: (max+min)/2 */
    T_NEAR(mt_sched_lr_at(&s, 800), 6e-5, 1e-12);            /* decay end: min (cos(pi) = -1) */
    T_CHECK(mt_sched_lr_at(&s, 808) == 6e-5);                /* beyond: exactly min */
    T_CHECK(mt_sched_lr_at(&s, 100000) == 6e-5);
    /* The trainer steps by the global batch size after each successful iteration. */
    for (int i = 0; i < 11; i++) mt_sched_step(&s, 8);
    T_EQ_INT(s.num_steps, 88);
    T_CHECK(s.lr == mt_sched_lr_at(&s, 88));
    T_CHECK(s.wd == 0.01);
}

TEST(linear_with_warmup_init)
{
    mt_sched_args a = mt_sched_args_default();
    a.lr = 1e-3;
    a.min_lr = 1e-4;
    a.lr_warmup_init = 1e-5;
    a.train_iters = 50;
    a.lr_decay_iters = 40;
    a.global_batch_size = 4;
    a.lr_warmup_iters = 5;
    mt_sched s;
    mt_err e;
    T_EQ_INT(mt_sched_init(&s, &a, &e), 0);
    T_EQ_INT(s.decay_steps, 160);
    T_EQ_INT(s.wd_incr_steps, 200);
    T_CHECK(s.lr == 1e-5);
    T_CHECK(mt_sched_lr_at(&s, 10) == 1e-5 + (1e-3 - 1e-5) * 10.0 / 20.0);
    T_NEAR(mt_sched_lr_at(&s, 20), 1e-3, 1e-15);
    T_NEAR(mt_sched_lr_at(&s, 90), 1e-4 + 0.5 * 9e-4, 1e-12); /* ratio (90-20)/(160-20) = 0.5 */
    T_NEAR(mt_sched_lr_at(&s, 160), 1e-4, 1e-12);
    T_CHECK(mt_sched_lr_at(&s, 161) == 1e-4);
}

TEST(constant_inverse_sqrt_no_warmup)
{
    mt_sched s = iter_sched(MT_LR_CONSTANT, 2e-4, 0, 10, 2, 2);
    T_CHECK(s.lr == 0.0);
    T_CHECK(mt_sched_lr_at(&s, 2) == 2e-4 * 2 / 4);
    T_CHECK(mt_sched_lr_at(&s, 5) == 2e-4);
    T_CHECK(mt_sched_lr_at(&s, 500) == 2e-4); /* constant ignores the decay end */

    s = iter_sched(MT_LR_INVERSE_SQRT, 1e-3, 1e-5, 1000, 1, 100);
    T_NEAR(mt_sched_lr_at(&s, 400), 1e-3 * 10 / 20, 1e-15);
    T_NEAR(mt_sched_lr_at(&s, 1000), 1e-3 * 10 / sqrt(1000), 1e-15);
    T_CHECK(mt_sched_lr_at(&s, 1001) == 1e-5);

    s = iter_sched(MT_LR_LINEAR, 1e-3, 0, 10, 3, 0); /* no warmup: step 0 is already max */
    T_CHECK(s.lr == 1e-3);
    T_NEAR(mt_sched_lr_at(&s, 15), 5e-4, 1e-15);
    s = iter_sched(MT_LR_INVERSE_SQRT, 1e-3, 0, 10, 3, 0); /* max(warmup, 1), max(steps, 1) */
    T_CHECK(s.lr == 1e-3);
    T_NEAR(mt_sched_lr_at(&s, 4), 5e-4, 1e-15);
}

TEST(wsd)
{
    mt_sched_args a = mt_sched_args_default();
    a.lr = 1.0;
    a.min_lr = 0.0;
    a.lr_decay_style = MT_LR_WSD;
    a.lr_wsd_decay_style = MT_WSD_LINEAR;
    a.train_iters = 100;
    a.global_batch_size = 10;
    a.lr_warmup_iters = 10;
    a.lr_wsd_decay_iters = 20;
    mt_sched s;
    mt_err e;
    T_EQ_INT(mt_sched_init(&s, &a, &e), 0);
    T_EQ_INT(s.wsd_decay_steps, 200);
    T_CHECK(mt_sched_lr_at(&s, 500) == 1.0);
    T_CHECK(mt_sched_lr_at(&s, 800) == 1.0); /* anneal starts after decay - wsd */
    T_CHECK(mt_sched_lr_at(&s, 900) == 0.5);
    T_CHECK(mt_sched_lr_at(&s, 1000) == 0.0);
    s.wsd_style = MT_WSD_EXPONENTIAL;
    T_CHECK(mt_sched_lr_at(&s, 1000) == 0.0); /* 2 * 0.5^1 - 1 */
    T_NEAR(mt_sched_lr_at(&s, 900), 2 * sqrt(0.5) - 1, 1e-15);
    s.wsd_style = MT_WSD_MINUS_SQRT;
    T_NEAR(mt_sched_lr_at(&s, 850), 0.5, 1e-15);
    s.wsd_style = MT_WSD_COSINE;
    T_NEAR(mt_sched_lr_at(&s, 900), 0.5, 1e-15);
    a.lr_wsd_decay_iters = -1;
    T_EQ_INT(mt_sched_init(&s, &a, &e), -1);
    T_CHECK(strstr(e.msg, "WSD") != NULL);
}

TEST(sample_based_and_fraction)
{
    mt_sched_args a = mt_sched_args_default();
    a.lr = 1e-3;
    a.lr_decay_style = MT_LR_LINEAR;
    a.train_samples = 1000;
    a.global_batch_size = 16; /* not used for the sample counts */
    a.lr_warmup_samples = 100;
    mt_sched s;
    mt_err e;
    T_EQ_INT(mt_sched_init(&s, &a, &e), 0);
    T_NEAR(s.warmup_steps, 100, 0);
    T_EQ_INT(s.decay_steps, 1000);
    T_EQ_INT(s.wd_incr_steps, 1000);
    T_CHECK(mt_sched_lr_at(&s, 50) == 1e-3 * 50 / 100);
    T_NEAR(mt_sched_lr_at(&s, 550), 5e-4, 1e-12);

    a.lr_warmup_samples = 0;
    a.lr_warmup_fraction = 0.0125; /* 12.5 samples: fractional warmup as in Megatron */
    T_EQ_INT(mt_sched_init(&s, &a, &e), 0);
    T_NEAR(s.warmup_steps, 12.5, 0);
    T_CHECK(mt_sched_lr_at(&s, 12) == 1e-3 * 12.0 / 12.5);
    T_CHECK(mt_sched_lr_at(&s, 13) == 0.0 + 1.0 * (1e-3 - 0.0) * (1.0 - (13 - 12.5) / (1000 - 12.5)));

    a = mt_sched_args_default();
    a.lr = 1e-3;
    a.train_iters = 100;
    a.global_batch_size = 8;
    a.lr_warmup_fraction = 0.01; /* of the decay in samples: 8 */
    T_EQ_INT(mt_sched_init(&s, &a, &e), 0);
    T_NEAR(s.warmup_steps, 8, 1e-15);
}

TEST(weight_decay_increment)
{
    mt_sched_args a = mt_sched_args_default();
    a.lr = 1e-3;
    a.train_iters = 100;
    a.global_batch_size = 2;
    a.weight_decay_incr_style = MT_WD_LINEAR;
    a.start_weight_decay = 0.0;
    a.end_weight_decay = 0.1;
    mt_sched s;
    mt_err e;
    T_EQ_INT(mt_sched_init(&s, &a, &e), 0);
    T_CHECK(s.wd == 0.0);
    T_NEAR(mt_sched_wd_at(&s, 100), 0.05, 1e-15);
    T_CHECK(mt_sched_wd_at(&s, 200) == 0.1);
    T_CHECK(mt_sched_wd_at(&s, 201) == 0.1);
    s.wd_style = MT_WD_COSINE;
    T_CHECK(mt_sched_wd_at(&s, 0) == 0.0); /* 0.5 * (cos(pi) + 1) */
    T_NEAR(mt_sched_wd_at(&s, 100), 0.05, 1e-15);
    T_NEAR(mt_sched_wd_at(&s, 200), 0.1, 1e-15);

    a = mt_sched_args_default();
    a.lr = 1e-3;
    a.train_iters = 10;
    a.global_batch_size = 2;
    a.weight_decay = 0.1;
    T_EQ_INT(mt_sched_init(&s, &a, &e), 0);
    T_CHECK(s.start_wd == 0.1 && s.end_wd == 0.1 && s.wd == 0.1 && mt_sched_wd_at(&s, 7) == 0.1);
}

TEST(option_errors)
{
    mt_sched s;
    mt_err e;
    mt_sched_args ok = mt_sched_args_default();
    ok.lr = 1e-3;
    ok.train_iters = 10;
    ok.global_batch_size = 2;
    T_EQ_INT(mt_sched_init(&s, &ok, &e), 0);
    mt_sched_args a;
#define BAD(field_set, word)                                                                                \
    do {                                                                                                    \
        a = ok;                                                                                             \
        field_set;                                                                                          \
        T_EQ_INT(mt_sched_init(&s, &a, &e), -1);                                                            \
        if (!strstr(e.msg, word)) T_FAILF("%s:%d: message \"%s\" lacks \"%s\"", __FILE__, __LINE__, e.msg, word); \
    } while (0)
    BAD(a.train_samples = 100, "not both");
    BAD(a.train_iters = -1, "either");
    BAD(a.lr = NAN, "--lr");
    BAD(a.lr_decay_samples = 10, "--lr-decay-samples");
    BAD(a.lr_warmup_samples = 1, "--lr-warmup-samples");
    BAD((a.lr_warmup_iters = 1, a.lr_warmup_fraction = 0.1), "only one");
    BAD(a.lr_warmup_iters = 10, "warmup");             /* warmup 20 samples == decay 20 */
    BAD(a.lr_decay_iters = 0, "decay length");
    BAD(a.min_lr = 1e-2, "below --min-lr");
    BAD(a.min_lr = -1, "negative");
    BAD(a.lr_warmup_init = 1, "above --lr");
    BAD(a.start_weight_decay = 0, "incr-style");
    BAD(a.weight_decay_incr_style = MT_WD_COSINE, "--start-weight-decay");
    BAD((a.weight_decay_incr_style = MT_WD_LINEAR, a.start_weight_decay = 0.2, a.end_weight_decay = 0.1), "below the start");
    BAD(a.global_batch_size = 0, "--global-batch-size");
    BAD((a.train_iters = -1, a.train_samples = 100, a.lr_decay_iters = 5), "--lr-decay-iters");
    BAD((a.train_iters = -1, a.train_samples = 100, a.lr_warmup_iters = 5), "--lr-warmup-iters");
#undef BAD
}

TEST(style_names)
{
    mt_lr_style l;
    mt_wsd_style w;
    mt_wd_style d;
    T_EQ_INT(mt_lr_style_parse("inverse-square-root", &l), 0);
    T_EQ_INT(l, MT_LR_INVERSE_SQRT);
    T_EQ_INT(mt_lr_style_parse("WSD", &l), 0);
    T_EQ_INT(mt_lr_style_parse("wsd", &l), -1);
    T_EQ_INT(mt_wsd_style_parse("minus_sqrt", &w), 0);
    T_EQ_INT(w, MT_WSD_MINUS_SQRT);
    T_EQ_INT(mt_wd_style_parse("cosine", &d), 0);
    T_EQ_STR(mt_lr_style_name(MT_LR_COSINE), "cosine");
    T_EQ_STR(mt_wsd_style_name(MT_WSD_EXPONENTIAL), "exponential");
    T_EQ_STR(mt_wd_style_name(MT_WD_LINEAR), "linear");
}

/* --dump: one config per stdin line. */
static int dump_line(char *line)
{
    mt_sched_args a = mt_sched_args_default();
    char *steps = NULL, *save = NULL;
    const char *bad = NULL;
    for (char *tok = strtok_r(line, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
        char *v = strchr(tok, '=');
        if (!v) return fprintf(stderr, "bad token %s\n", tok), -1;
        *v++ = 0;
        int64_t *ip = NULL;
        double *dp = NULL;
        if (!strcmp(tok, "steps")) steps = v;
        else if (!strcmp(tok, "lr")) dp = &a.lr;
        else if (!strcmp(tok, "min_lr")) dp = &a.min_lr;
        else if (!strcmp(tok, "lr_warmup_init")) dp = &a.lr_warmup_init;
        else if (!strcmp(tok, "lr_warmup_fraction")) dp = &a.lr_warmup_fraction;
        else if (!strcmp(tok, "weight_decay")) dp = &a.weight_decay;
        else if (!strcmp(tok, "start_weight_decay")) dp = &a.start_weight_decay;
        else if (!strcmp(tok, "end_weight_decay")) dp = &a.end_weight_decay;
        else if (!strcmp(tok, "train_iters")) ip = &a.train_iters;
        else if (!strcmp(tok, "train_samples")) ip = &a.train_samples;
        else if (!strcmp(tok, "global_batch_size")) ip = &a.global_batch_size;
        else if (!strcmp(tok, "lr_decay_iters")) ip = &a.lr_decay_iters;
        else if (!strcmp(tok, "lr_decay_samples")) ip = &a.lr_decay_samples;
        else if (!strcmp(tok, "lr_warmup_iters")) ip = &a.lr_warmup_iters;
        else if (!strcmp(tok, "lr_warmup_samples")) ip = &a.lr_warmup_samples;
        else if (!strcmp(tok, "lr_wsd_decay_iters")) ip = &a.lr_wsd_decay_iters;
        else if (!strcmp(tok, "lr_wsd_decay_samples")) ip = &a.lr_wsd_decay_samples;
        else if (!strcmp(tok, "lr_decay_style")) { if (mt_lr_style_parse(v, &a.lr_decay_style)) bad = tok; }
        else if (!strcmp(tok, "lr_wsd_decay_style")) { if (mt_wsd_style_parse(v, &a.lr_wsd_decay_style)) bad = tok; }
        else if (!strcmp(tok, "weight_decay_incr_style")) { if (mt_wd_style_parse(v, &a.weight_decay_incr_style)) bad = tok; }
        else bad = tok;
        if (bad) return fprintf(stderr, "bad key or value: %s=%s\n", tok, v), -1;
        if (dp) *dp = strtod(v, NULL);
        if (ip) *ip = strtoll(v, NULL, 10);
    }
    mt_sched s;
    mt_err e;
    if (mt_sched_init(&s, &a, &e)) {
        printf("err %s\n", e.msg);
        return 0;
    }
    printf("ok");
    char *save2 = NULL;
    for (char *t = steps ? strtok_r(steps, ",", &save2) : NULL; t; t = strtok_r(NULL, ",", &save2)) {
        int64_t n = strtoll(t, NULL, 10);
        printf(" %.17g %.17g", mt_sched_lr_at(&s, n), mt_sched_wd_at(&s, n));
    }
    printf("\n");
    return 0;
}

static int dump_main(void)
{
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0)
        if (dump_line(line)) {
            free(line);
            return 2;
        }
    free(line);
    return 0;
}

T_MAIN_BEGIN("test_schedule")
if (argc > 1 && !strcmp(argv[1], "--dump")) return dump_main();
RUN(cosine_iteration_based);
RUN(linear_with_warmup_init);
RUN(constant_inverse_sqrt_no_warmup);
RUN(wsd);
RUN(sample_based_and_fraction);
RUN(weight_decay_increment);
RUN(option_errors);
RUN(style_names);
T_MAIN_END
