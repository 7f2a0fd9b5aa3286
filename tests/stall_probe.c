/*
 * stall_probe -- a training job where one rank is slow: `stall_probe SLEEPER SECONDS
 * [mpitrain options]`. Rank SLEEPER sleeps before the second of three allreduces; the
 * others wait in it. Used by tests/stall.sh with small --stall-warn/--stall-timeout.
 */
#include <mpitrain.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    int sleeper;
    double seconds;
} probe;

static int train(mt_context *c, void *arg)
{
    const probe *p = arg;
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
