/* link.c: MT_COMM_LINK, the modelled link's delay of each transfer (see link.h). */
#include "comm/link.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double latency_s, bytes_per_s;   /* 0: no delay */
static pthread_once_t parsed = PTHREAD_ONCE_INIT;

static void parse(void)
{
    const char *v = getenv("MT_COMM_LINK");
    if (!v || !*v) return;
    double lat_us, gbs;
    char tail;
    if (sscanf(v, "%lf,%lf%c", &lat_us, &gbs, &tail) != 2 || lat_us < 0 || gbs < 0) {
        fprintf(stderr, "warning: MT_COMM_LINK=%s is not latency_us,GB_per_s; ignored\n", v);
        return;
    }
    latency_s = lat_us * 1e-6;
    bytes_per_s = gbs * 1e9;
}

double mt_comm_link_seconds(size_t bytes)
{
    pthread_once(&parsed, parse);
    return latency_s + (bytes_per_s > 0 ? (double)bytes / bytes_per_s : 0);
}

double mt_comm_link_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void mt_comm_link_wait(double start, size_t bytes)
{
    double d = mt_comm_link_seconds(bytes);
    if (d <= 0) return;
    double until = start + d;
    struct timespec ts = {(time_t)until, (long)((until - (double)(time_t)until) * 1e9)};
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {}
}
