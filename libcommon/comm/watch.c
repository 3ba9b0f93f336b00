/* watch.c: under `mt-train -n N` each rank's process watches a child that does the rank's work, so that
 * a rank killed by a signal is named (launch.h, mt_launch_watch). */
#include "comm/launch.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/bootstrap.h"

static volatile sig_atomic_t told;   /* a signal came from outside: the launcher ending the job, the user */
static volatile pid_t worker;

static void forward(int sig)
{
    if (sig != SIGCONT) told = 1;
    if (worker > 0) kill(worker, sig);
}

void mt_launch_watch(const char *prog)
{
    const char *v = getenv(MT_LAUNCH_WATCH_ENV);
    if (!v || strcmp(v, "1")) return;
    static const int fwd[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT};
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);   /* no signal between the fork and the handlers below */
    pid_t self = getpid(), pid = fork();
    if (pid < 0) {   /* the rank runs unwatched */
        sigprocmask(SIG_SETMASK, &old, NULL);
        return;
    }
    if (pid == 0) {
        /* the worker: ends with its watcher, whoever ends that (the launcher's SIGKILL included) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != self) raise(SIGKILL);
        unsetenv(MT_LAUNCH_WATCH_ENV);
        sigprocmask(SIG_SETMASK, &old, NULL);
        return;
    }
    worker = pid;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++) sigaction(fwd[i], &sa, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) _exit(1);
    if (WIFEXITED(st)) _exit(WEXITSTATUS(st));
    int sig = WTERMSIG(st);
    if (!told) {
        char host[256] = "localhost";
        if (gethostname(host, sizeof host - 1)) strcpy(host, "localhost");
        const char *abbrev = sigabbrev_np(sig);
        fprintf(stderr, "%s: rank %d (%s): killed by signal %d%s%s%s\n", prog, mt_boot_env_rank(), host, sig,
                abbrev ? " (SIG" : "", abbrev ? abbrev : "", abbrev ? ")" : "");
        fflush(stderr);
    }
    /* the launcher sees the rank end as the worker did: by the same signal (without a core of the watcher) */
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
    _exit(128 + sig);
}
