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
/* The same with a short spin instead (GOMP_SPINCOUNT=10000: a few microseconds before sleeping), for
 * programs made of many small parallel regions: mt-generate's token-by-token steps run about 80
 * regions per token, and waking sleeping threads for each cost a third of its time. */
void mt_omp_env_short_spin(char **argv);

#endif
