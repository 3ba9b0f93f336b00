/* ompenv.h: the OpenMP runtime settings mt's programs start with.
 *
 * libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT once, when it is loaded, so a program cannot change
 * them for itself after start: mt_omp_env_default() sets OMP_WAIT_POLICY=passive and re-executes the
 * program (same pid, same arguments) unless the caller's environment already sets either variable.
 * Passive waits make idle threads sleep instead of spinning: on a machine whose cores are shared with
 * other work, a spinning thread takes time from its own team's late thread at every barrier.
 * Does nothing under valgrind (which would run the new image outside itself) or if exec fails.
 */
#ifndef MT_UTIL_OMPENV_H
#define MT_UTIL_OMPENV_H

void mt_omp_env_default(char **argv);
/* The same with a short spin instead, GOMP_SPINCOUNT=count (libgomp's spin loop: a pause instruction per
 * count) before a waiting thread sleeps, for programs made of many parallel regions: waking a sleeping
 * thread costs tens of microseconds (about 45 on a 2-core VM), at every region.
 * - mt-generate, 10000: its token-by-token steps run about 80 small regions per token, and waking
 *   sleeping threads for each cost a third of its time;
 * - mt-train, 1000: a GPT-2 124M step runs about 700 regions (the products, the staged elementwise
 *   operations, the optimizer); the short spin takes 5-10% off the step on an idle 2-core machine and
 *   costs about 2% when two runs share its cores (10000 would cost 50% there, spinning against the
 *   other run's threads). */
void mt_omp_env_spin(char **argv, int count);

#endif
