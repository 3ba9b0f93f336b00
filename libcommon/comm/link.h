/* link.h: a model of a slower network for measurements: MT_COMM_LINK=latency_us,GB_per_s makes every
 * transfer step of the MPI communicator (a ring step's send, a send, a batch of point-to-point sends, a
 * broadcast piece) take at least latency + bytes / bandwidth before it completes, on the thread that
 * runs it. Unset (or "0,0"): no delay. A malformed value is reported once on stderr and ignored. For
 * benchmarks only (bench/train-dp, bench/train-mp): results do not depend on it. */
#ifndef MT_COMM_LINK_H
#define MT_COMM_LINK_H

#include <stddef.h>

/* Seconds a transfer of `bytes` takes on the modelled link (0 without MT_COMM_LINK). */
double mt_comm_link_seconds(size_t bytes);
/* Sleeps until `start` (CLOCK_MONOTONIC seconds, mt_comm_link_now) + mt_comm_link_seconds(bytes). */
void mt_comm_link_wait(double start, size_t bytes);
double mt_comm_link_now(void);

#endif
