/*
 * signals.c -- stop requests: SIGTERM and SIGUSR1 (what Slurm sends before preemption,
 * with --signal) set a flag that the next mt_report's agreement shares with every rank.
 * The handlers are installed only while fit runs and the previous ones come back after.
 */
#include "runtime.h"

#include <string.h>

static volatile sig_atomic_t stop_flag;
static struct sigaction old_term, old_usr1;
static bool installed;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

void mt__signals_install(void)
{
    if (installed)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGUSR1, &sa, &old_usr1);
    stop_flag = 0;
    installed = true;
}

void mt__signals_restore(void)
{
    if (!installed)
        return;
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    installed = false;
}

void mt_request_stop(void)
{
    stop_flag = 1; /* fit's mt__signals_install clears it: outside a fit it does nothing */
}

bool mt__stop_signalled(void)
{
    return stop_flag != 0;
}
