/* test_report.c: the Megatron iteration log line and validation block against literal lines built from
 * Megatron's format strings (spec 4.9/4.10), the interval loss bookkeeping, and the JSON-lines metrics.
 */
#include <jansson.h>
#include <stdint.h>
#include <time.h>

#include "t.h"
#include "report/report.h"

static mt_iter_log base_line(void)
{
    mt_iter_log l;
    memset(&l, 0, sizeof l);
    l.time_sec = 1706054400 + 3723; /* 2024-01-24 01:02:03 UTC */
    l.time_usec = 42;
    l.iteration = 100;
    l.train_iters = 1000;
    l.consumed_samples = 51200;
    l.elapsed_ms = 812.25; /* a binary tie: rounds to even like Python */
    l.has_lr = true;
    l.lr = 6e-4;
    l.global_batch_size = 512;
    l.n_losses = 1;
    l.losses[0] = (mt_loss_value){"lm loss", 7.654321};
    l.loss_scale = 1.0;
    l.has_grad_norm = true;
    l.grad_norm = -NAN;
    l.skipped_iters = 1;
    l.nan_iters = 1;
    l.has_tokens_per_sec = true;
    l.tokens_per_sec = 645432.125;
    return l;
}

TEST(v2_spec_example)
{
    mt_iter_log l;
    memset(&l, 0, sizeof l);
    l.iteration = 25;
    l.train_iters = 73242187;
    l.consumed_samples = 200;
    l.elapsed_ms = 1234.5;
    l.has_lr = true;
    l.lr = 1.638e-08;
    l.global_batch_size = 8;
    l.n_losses = 1;
    l.losses[0] = (mt_loss_value){"lm loss", 10.86954};
    l.loss_scale = 4294967296.0;
    l.has_grad_norm = true;
    l.grad_norm = 12.345;
    char *s = mt_format_iter_line(&l, MT_LOG_V2);
    T_EQ_STR(s, " iteration       25/73242187 | consumed samples:          200 | elapsed time per iteration (ms): 1234.5 |"
                " learning rate: 1.638E-08 | global batch size:     8 | lm loss: 1.086954E+01 | loss scale: 4294967296.0 |"
                " grad norm: 12.345 | number of skipped iterations:   0 | number of nan iterations:   0 |");
    free(s);
    /* v2 omits a loss whose average is 0 (nothing advanced); core prints it */
    l.losses[0].value = 0.0;
    s = mt_format_iter_line(&l, MT_LOG_V2);
    T_CHECK(!strstr(s, "lm loss"));
    free(s);
    s = mt_format_iter_line(&l, MT_LOG_CORE);
    T_CHECK(strstr(s, " global batch size:     8 | lm loss: 0.000000E+00 | loss scale:") != NULL);
    free(s);
    l.has_num_zeros = true;
    l.num_zeros = 12;
    s = mt_format_iter_line(&l, MT_LOG_V2);
    T_CHECK(strstr(s, " grad norm: 12.345 | num zeros: 12.0 | number of skipped") != NULL);
    free(s);
}

TEST(core_and_head_lines)
{
    setenv("TZ", "UTC", 1);
    tzset();
    mt_iter_log l = base_line();
    char *s = mt_format_iter_line(&l, MT_LOG_CORE);
    T_EQ_STR(s, " [2024-01-24 01:02:03] iteration      100/    1000 | consumed samples:        51200 |"
                " elapsed time per iteration (ms): 812.2 | learning rate: 6.000000E-04 | global batch size:   512 |"
                " lm loss: 7.654321E+00 | loss scale: 1.0 | grad norm: nan | number of skipped iterations:   1 |"
                " number of nan iterations:   1 | tokens per second: 645432.1 |");
    free(s);
    l.skipped_samples = 3;
    l.has_tflops = true;
    l.tflops_per_gpu = 123.456;
    l.has_num_zeros = true;
    l.num_zeros = 12;
    l.has_params_norm = true;
    l.params_norm = 271.8281;
    s = mt_format_iter_line(&l, MT_LOG_HEAD);
    T_EQ_STR(s, " [2024-01-24 01:02:03.000042] iteration      100/    1000 | consumed samples:        51200 |"
                " skipped samples:            3 | elapsed time per iteration (ms): 812.2 |"
                " throughput per GPU (TFLOP/s/GPU): 123.5 | learning rate: 6.000000E-04 | global batch size:   512 |"
                " lm loss: 7.654321E+00 | loss scale: 1.0 | grad norm: nan | num zeros: 12.0 | params norm: 271.828 |"
                " number of skipped iterations:   1 | number of nan iterations:   1 | tokens per second: 645432.1 |");
    free(s);
    l.has_tokens_per_sec_per_gpu = true;
    l.tokens_per_sec_per_gpu = 80679.015625;
    l.has_lr = false;
    l.has_grad_norm = false;
    s = mt_format_iter_line(&l, MT_LOG_CORE);
    T_CHECK(strstr(s, "(TFLOP/s/GPU): 123.5 | global batch size:") && strstr(s, "loss scale: 1.0 | num zeros: 12.0 |") &&
            strstr(s, "| tokens per second: 645432.1 | tokens per second per GPU: 80679.0 |"));
    size_t n = strlen(s);
    T_CHECK(n > 2 && s[n - 1] == '|' && s[n - 2] == ' ');
    free(s);
    /* mt_print_iter_line adds the newline */
    char buf[2048];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    T_EQ_INT(mt_print_iter_line(f, &l, MT_LOG_CORE), 0);
    fclose(f);
    T_CHECK(buf[strlen(buf) - 1] == '\n' && buf[strlen(buf) - 2] == '|');
}

TEST(validation_block)
{
    char pre[128];
    mt_eval_prefix(pre, sizeof pre, MT_LOG_CORE, MT_EVAL_DURING, 1000);
    T_EQ_STR(pre, "iteration 1000");
    mt_loss_value v = {"lm loss", 5.25};
    char *s = mt_format_validation(NULL, pre, &v, 1);
    char want[1024], dashes[200];
    memset(dashes, '-', 96);
    dashes[96] = 0;
    snprintf(want, sizeof want, "%s\n%s\n%s\n", dashes,
             " validation loss at iteration 1000 | lm loss value: 5.250000E+00 | lm loss PPL: 1.905663E+02 | ", dashes);
    T_EQ_STR(s, want);
    free(s);

    mt_eval_prefix(pre, sizeof pre, MT_LOG_CORE, MT_EVAL_FINAL_TEST, 2000);
    T_EQ_STR(pre, "iteration 2000 on test set");
    mt_loss_value two[2] = {{"lm loss", NAN}, {"aux loss", 25.0}};
    s = mt_format_validation("", pre, two, 2);
    memset(dashes, '-', 159);
    dashes[159] = 0;
    snprintf(want, sizeof want, "%s\n%s\n%s\n", dashes,
             " validation loss at iteration 2000 on test set | lm loss value: NAN | lm loss PPL: 4.851652E+08 |"
             " aux loss value: 2.500000E+01 | aux loss PPL: 4.851652E+08 | ",
             dashes);
    T_EQ_STR(s, want);
    free(s);

    mt_eval_prefix(pre, sizeof pre, MT_LOG_CORE, MT_EVAL_FINAL_VALID, 7);
    T_EQ_STR(pre, "iteration 7 on validation set");
    mt_eval_prefix(pre, sizeof pre, MT_LOG_V2, MT_EVAL_FINAL_VALID, 7);
    T_EQ_STR(pre, "the end of training for val data");
    mt_eval_prefix(pre, sizeof pre, MT_LOG_V2, MT_EVAL_FINAL_TEST, 7);
    T_EQ_STR(pre, "the end of training for test data");
    /* several validation sets: "validation-<i>"; dashes count characters, not UTF-8 bytes */
    mt_loss_value u = {"l\xc3\xb6ss", 1.0};
    s = mt_format_validation("-0", "iteration 5", &u, 1);
    const char *line = " validation-0 loss at iteration 5 | l\xc3\xb6ss value: 1.000000E+00 | l\xc3\xb6ss PPL: 2.718282E+00 | ";
    size_t chars = strlen(line) - 2; /* two 2-byte characters */
    T_CHECK(strchr(s, '\n') - s == (long)chars + 1);
    T_CHECK(!strncmp(strchr(s, '\n') + 1, line, strlen(line)));
    free(s);
    T_NEAR(mt_ppl(25.0), exp(20.0), 0);
    T_NEAR(mt_ppl(2.0), exp(2.0), 0);
    T_CHECK(mt_ppl(NAN) == exp(20.0) && mt_ppl(INFINITY) == exp(20.0));
}

TEST(loss_accumulator)
{
    mt_log_accum a;
    memset(&a, 0, sizeof a);
    mt_iter_log l;
    memset(&l, 0, sizeof l);
    mt_loss_value x = {"lm loss", 0.0};
    /* a skipped first iteration: no key yet */
    x.value = NAN;
    mt_log_accum_add(&a, true, &x, 1);
    mt_log_accum_fill(&a, &l);
    T_EQ_INT(l.n_losses, 0);
    T_EQ_INT(l.skipped_iters, 1);
    T_EQ_INT(l.nan_iters, 1);
    mt_log_accum_reset(&a);
    float want = 0.0f;
    for (int i = 0; i < 10; i++) {
        x.value = 10.0 + 0.1 * i;
        mt_log_accum_add(&a, false, &x, 1);
        want = want + (float)x.value;
    }
    x.value = 3.0; /* skipped, finite: not summed, not nan */
    mt_log_accum_add(&a, true, &x, 1);
    mt_log_accum_fill(&a, &l);
    T_EQ_INT(l.n_losses, 1);
    T_EQ_STR(l.losses[0].key, "lm loss");
    T_CHECK(l.losses[0].value == (double)want / 10.0); /* float32 sum, double division */
    T_EQ_INT(l.skipped_iters, 1);
    T_EQ_INT(l.nan_iters, 0);
    mt_log_accum_reset(&a);
    mt_log_accum_fill(&a, &l);
    T_EQ_INT(l.n_losses, 1);
    T_CHECK(l.losses[0].value == 0.0);
    T_EQ_INT(l.skipped_iters + l.nan_iters, 0);
}

TEST(metrics_json)
{
    setenv("TZ", "UTC", 1);
    tzset();
    mt_iter_log l = base_line();
    char *s = mt_metrics_iter_json(&l);
    T_EQ_STR(s, "{\"type\":\"train\",\"iteration\":100,\"train_iters\":1000,\"consumed_samples\":51200,"
                "\"time\":1706058123.000042,\"elapsed_ms\":812.25,\"lr\":0.00059999999999999995,\"global_batch_size\":512,"
                "\"lm_loss\":7.6543210000000004,\"loss_scale\":1.0,\"grad_norm\":null,\"skipped_iters\":1,\"nan_iters\":1,"
                "\"tokens_per_sec\":645432.125}");
    json_error_t je;
    json_t *o = json_loads(s, 0, &je);
    T_CHECK(o && json_real_value(json_object_get(o, "lr")) == 6e-4 &&
            json_real_value(json_object_get(o, "lm_loss")) == 7.654321);
    json_decref(o);
    free(s);
    mt_loss_value v = {"lm loss", 5.25};
    s = mt_metrics_eval_json("validation", 1000, 512000, &v, 1);
    o = json_loads(s, 0, &je);
    T_CHECK(o && !strcmp(json_string_value(json_object_get(o, "type")), "validation") &&
            json_integer_value(json_object_get(o, "iteration")) == 1000 &&
            json_integer_value(json_object_get(o, "consumed_samples")) == 512000 &&
            json_real_value(json_object_get(o, "lm_loss")) == 5.25 &&
            json_real_value(json_object_get(o, "lm_loss_ppl")) == exp(5.25));
    T_CHECK(!strncmp(s, "{\"type\":\"validation\",\"iteration\":1000,\"consumed_samples\":512000,\"lm_loss\":5.25,\"lm_loss_ppl\":", 92));
    json_decref(o);
    free(s);
    /* a NaN loss: null, and so its perplexity (not exp(20), the log's min(20, nan)) */
    mt_loss_value nan_loss = {"lm loss", NAN};
    s = mt_metrics_eval_json("validation", 1, 8, &nan_loss, 1);
    T_EQ_STR(s, "{\"type\":\"validation\",\"iteration\":1,\"consumed_samples\":8,\"lm_loss\":null,\"lm_loss_ppl\":null}");
    free(s);
    json_t *n = json_object();
    json_object_set_new(n, "loss", mt_json_real(-NAN));
    json_object_set_new(n, "ppl", mt_json_real(INFINITY));
    json_object_set_new(n, "x", mt_json_real(0));
    s = mt_json_line(n);
    T_EQ_STR(s, "{\"loss\": null, \"ppl\": null, \"x\": 0.0}");
    free(s);

    char buf[4096];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    mt_err e;
    T_EQ_INT(mt_metrics_write_iter(f, &l, &e), 0);
    T_EQ_INT(mt_metrics_write_eval(f, "test", 1000, 512000, &v, 1, &e), 0);
    fclose(f);
    char *nl = strchr(buf, '\n');
    T_CHECK(nl && nl[1] == '{' && strchr(nl + 1, '\n') && strchr(nl + 1, '\n')[1] == 0);
}

T_MAIN_BEGIN("test_report")
RUN(v2_spec_example);
RUN(core_and_head_lines);
RUN(validation_block);
RUN(loss_accumulator);
RUN(metrics_json);
T_MAIN_END
