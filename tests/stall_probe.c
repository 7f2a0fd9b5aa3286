/*
 * stall_probe -- a training job where one rank is slow: `stall_probe SLEEPER SECONDS
 * [mpitrain options]`. Rank SLEEPER sleeps before the second of three allreduces; the
 * others wait in it. With SLEEPER -1 every rank prints "stall_probe: rank R pid P" and the
 * ranks run allreduces (a few each 100 ms) for SECONDS, so a test can stop or kill one of
 * them from outside; "stall_probe: rank R running" follows once every rank has passed
 * three rounds (each rank's watchdog has heard from the others by then), the line a test
 * waits for before it acts. Used by tests/stall.sh with small --stall-warn/--stall-timeout.
 */
#include <mpitrain.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int sleeper;
    double seconds;
} probe;

/* Allreduces until rank 0 has run for p->seconds (its word is broadcast each round). */
static int loop(mt_context *c, const probe *p)
{
    printf("stall_probe: rank %d pid %d\n", mt_world_rank(c), (int)getpid());
    fflush(stdout);
    struct timespec t0, now, pause = {0, 20000000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int go = 1, round = 0; go; round++) {
        if (round == 3) {
            printf("stall_probe: rank %d running\n", mt_world_rank(c));
            fflush(stdout);
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        go = (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) <
             p->seconds;
        int rc = mt_broadcast(c, &go, 1, MT_I32, 0);
        double x = 1;
        if (!rc)
            rc = mt_allreduce(c, &x, 1, MT_F64, MT_SUM);
        if (rc)
            return rc;
        nanosleep(&pause, NULL);
    }
    return MT_OK;
}

static int train(mt_context *c, void *arg)
{
    const probe *p = arg;
    if (p->sleeper < 0)
        return loop(c, p);
    for (int i = 0; i < 3; i++) {
        if (i == 1 && mt_world_rank(c) == p->sleeper) {
            struct timespec ts = {(time_t)p->seconds,
                                  (long)((p->seconds - (double)(time_t)p->seconds) * 1e9)};
            nanosleep(&ts, NULL);
        }
        double x = 1;
        int rc = mt_allreduce(c, &x, 1, MT_F64, MT_SUM);
        if (rc)
            return rc;
    }
    return MT_OK;
}

int main(int argc, char **argv)
{
    mt_init(&argc, &argv);
    mt_trainer_config cfg = {.run = {.name = "stall-probe", .overwrite = true}};
    int rc = mt_config_from_args(&cfg, &argc, &argv);
    if (rc || argc != 3) {
        fprintf(stderr, "usage: stall_probe SLEEPER SECONDS [mpitrain options]\n%s\n",
                mt_last_error());
        mt_finalize();
        return 2;
    }
    probe p = {atoi(argv[1]), atof(argv[2])};
    mt_trainer *t = NULL;
    mt_result *r = NULL;
    rc = mt_trainer_create(&t, train, &p, &cfg);
    if (!rc)
        rc = mt_trainer_fit(t, &r);
    if (rc)
        fprintf(stderr, "stall_probe: %s\n", r ? mt_result_error(r) : mt_last_error());
    else
        printf("stall_probe: done\n");
    mt_result_free(&r);
    mt_trainer_destroy(&t);
    mt_finalize();
    return rc ? 1 : 0;
}
