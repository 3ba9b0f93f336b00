/* test_serve_metrics: serve/metrics.h without a server: each observation lands in the bucket its bound
 * says (a value on a bound counts in that bound's bucket, as Prometheus' le does), the buckets are written
 * cumulative with +Inf, _count and _sum; requests are counted per path and status, and pairs beyond the
 * table fall into "other"; the gauges are written as given. serve.sh checks the numbers of a running
 * server against its answers and parses the text with Prometheus' own parser. */
#include "serve/metrics.h"

#include "t.h"

/* The number on the line that starts with prefix (followed by a space), or -1. */
static double value(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (!strncmp(l, prefix, n) && l[n] == ' ') return atof(l + n + 1);
    return -1;
}

TEST(histogram_buckets)
{
    mt_serve_metrics m;
    mt_serve_metrics_init(&m);
    /* ttft bounds start 0.005, 0.01, 0.025; itl's 0.001, 0.0025 */
    mt_serve_metrics_token(&m, 1, 0.004);
    mt_serve_metrics_token(&m, 1, 0.005);   /* on the bound: le="0.005" */
    mt_serve_metrics_token(&m, 1, 0.02);
    mt_serve_metrics_token(&m, 1, 1e6);     /* above every bound: +Inf only */
    mt_serve_metrics_token(&m, 0, 0.002);
    mt_serve_metrics_prompt(&m, 7);
    mt_serve_metrics_prompt(&m, 5);
    char *t = mt_serve_metrics_text(&m, 3, 2);
    T_NEAR(value(t, "mt_serve_time_to_first_token_seconds_bucket{le=\"0.005\"}"), 2, 0);
    T_NEAR(value(t, "mt_serve_time_to_first_token_seconds_bucket{le=\"0.01\"}"), 2, 0);
    T_NEAR(value(t, "mt_serve_time_to_first_token_seconds_bucket{le=\"0.025\"}"), 3, 0);
    T_NEAR(value(t, "mt_serve_time_to_first_token_seconds_bucket{le=\"60\"}"), 3, 0);
    T_NEAR(value(t, "mt_serve_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 4, 0);
    T_NEAR(value(t, "mt_serve_time_to_first_token_seconds_count"), 4, 0);
    T_NEAR(value(t, "mt_serve_time_to_first_token_seconds_sum"), 1e6 + 0.029, 1e-9);
    T_NEAR(value(t, "mt_serve_inter_token_latency_seconds_bucket{le=\"0.001\"}"), 0, 0);
    T_NEAR(value(t, "mt_serve_inter_token_latency_seconds_bucket{le=\"0.0025\"}"), 1, 0);
    T_NEAR(value(t, "mt_serve_inter_token_latency_seconds_count"), 1, 0);
    T_NEAR(value(t, "mt_serve_generation_tokens_total"), 5, 0);
    T_NEAR(value(t, "mt_serve_prompt_tokens_total"), 12, 0);
    T_NEAR(value(t, "mt_serve_requests_waiting"), 3, 0);
    T_NEAR(value(t, "mt_serve_sequences_running"), 2, 0);
    T_CHECK(strstr(t, "# TYPE mt_serve_time_to_first_token_seconds histogram\n"));
    T_CHECK(strstr(t, "# TYPE mt_serve_generation_tokens_total counter\n"));
    T_CHECK(strstr(t, "# TYPE mt_serve_requests_waiting gauge\n"));
    T_CHECK(t[strlen(t) - 1] == '\n');
    free(t);
    mt_serve_metrics_destroy(&m);
}

TEST(requests_by_path_and_status)
{
    mt_serve_metrics m;
    mt_serve_metrics_init(&m);
    mt_serve_metrics_request(&m, "/v1/completions", 200, 0.3);
    mt_serve_metrics_request(&m, "/v1/completions", 200, 0.7);
    mt_serve_metrics_request(&m, "/v1/completions", 400, 0.001);
    mt_serve_metrics_request(&m, "/health", 200, 0.001);
    for (int i = 0; i < MT_SERVE_METRICS_PAIRS + 5; i++) mt_serve_metrics_request(&m, "/x", 600 + i, 0.001);
    char *t = mt_serve_metrics_text(&m, 0, 0);
    T_NEAR(value(t, "mt_serve_requests_total{path=\"/v1/completions\",status=\"200\"}"), 2, 0);
    T_NEAR(value(t, "mt_serve_requests_total{path=\"/v1/completions\",status=\"400\"}"), 1, 0);
    T_NEAR(value(t, "mt_serve_requests_total{path=\"/health\",status=\"200\"}"), 1, 0);
    T_NEAR(value(t, "mt_serve_requests_total{path=\"/x\",status=\"600\"}"), 1, 0);
    /* 3 pairs above, then /x 600.. fill the table up to its last pair, kept for "other" */
    int fit = MT_SERVE_METRICS_PAIRS - 1 - 3;
    T_NEAR(value(t, "mt_serve_requests_total{path=\"other\",status=\"0\"}"), MT_SERVE_METRICS_PAIRS + 5 - fit, 0);
    T_NEAR(value(t, "mt_serve_request_duration_seconds_count"), 4 + MT_SERVE_METRICS_PAIRS + 5, 0);
    T_NEAR(value(t, "mt_serve_request_duration_seconds_bucket{le=\"0.5\"}"), 3 + MT_SERVE_METRICS_PAIRS + 5, 0);
    free(t);
    mt_serve_metrics_destroy(&m);
}

T_MAIN_BEGIN("test_serve_metrics")
RUN(histogram_buckets);
RUN(requests_by_path_and_status);
T_MAIN_END
