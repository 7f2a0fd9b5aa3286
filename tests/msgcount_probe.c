/*
 * msgcount_probe -- `msgcount_probe REPORTS KEYS [mpitrain options]`: a fit that makes
 * REPORTS reports of KEYS numeric metrics each (every rank its own values), with the MPI
 * collectives this process enters counted by PMPI wrappers while the reports run (the
 * wrappers below take the MPI names and call the PMPI ones; nothing else changes).
 * Rank 0 prints "msgcount: ranks N reports R collectives C bytes B agreement_messages M
 * agreement_bytes A": C and B are rank 0's MPI collective calls and the bytes it passed to
 * them over the R reports, M and A the messages (sent and received) of the agreements,
 * which are point-to-point exchanges of their own (collectives/agree.c).
 *
 * tests/msgcount.sh runs it with Open MPI's PML monitoring on, which counts the
 * point-to-point messages each collective is made of, per peer, into one file per rank at
 * MPI_Finalize; two runs that differ only in REPORTS give the messages of one report. So
 * no figure here comes from a clock.
 */
#include <mpitrain.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static bool counting;
static long long calls, bytes, msgs, msg_bytes;

/* the agreement's own messages (collectives/collectives.h: MT__TAG_AGREE) */
#define TAG_AGREE 7100

static void message(int n, MPI_Datatype t, int tag, int times)
{
    if (!counting || tag != TAG_AGREE)
        return;
    int size = 0;
    PMPI_Type_size(t, &size);
    msgs += times;
    msg_bytes += (long long)times * n * size;
}

int MPI_Send(const void *b, int n, MPI_Datatype t, int to, int tag, MPI_Comm c)
{
    message(n, t, tag, 1);
    return PMPI_Send(b, n, t, to, tag, c);
}

int MPI_Recv(void *b, int n, MPI_Datatype t, int from, int tag, MPI_Comm c, MPI_Status *st)
{
    message(n, t, tag, 1);
    return PMPI_Recv(b, n, t, from, tag, c, st);
}

int MPI_Sendrecv(const void *s, int sn, MPI_Datatype st, int to, int stag, void *r, int rn,
                 MPI_Datatype rt, int from, int rtag, MPI_Comm c, MPI_Status *status)
{
    message(sn, st, stag, 1);
    message(rn, rt, rtag, 1);
    return PMPI_Sendrecv(s, sn, st, to, stag, r, rn, rt, from, rtag, c, status);
}

static void count(int n, MPI_Datatype t)
{
    if (!counting)
        return;
    int size = 0;
    PMPI_Type_size(t, &size);
    calls++;
    bytes += (long long)n * size;
}

int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    count(n, t);
    return PMPI_Allreduce(s, r, n, t, op, c);
}

int MPI_Reduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c)
{
    count(n, t);
    return PMPI_Reduce(s, r, n, t, op, root, c);
}

int MPI_Bcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c)
{
    count(n, t);
    return PMPI_Bcast(b, n, t, root, c);
}

int MPI_Gather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
               int root, MPI_Comm c)
{
    count(sn, st);
    return PMPI_Gather(s, sn, st, r, rn, rt, root, c);
}

int MPI_Gatherv(const void *s, int sn, MPI_Datatype st, void *r, const int *rn,
                const int *displs, MPI_Datatype rt, int root, MPI_Comm c)
{
    count(sn, st);
    return PMPI_Gatherv(s, sn, st, r, rn, displs, rt, root, c);
}

int MPI_Allgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                  MPI_Comm c)
{
    count(sn, st);
    return PMPI_Allgather(s, sn, st, r, rn, rt, c);
}

int MPI_Barrier(MPI_Comm c)
{
    count(0, MPI_BYTE);
    return PMPI_Barrier(c);
}

typedef struct {
    int reports, keys;
} probe;

static int train(mt_context *c, void *arg)
{
    const probe *p = arg;
    mt_metrics *m = mt_metrics_new();
    int rc = m ? MT_OK : MT_ENOMEM;
    PMPI_Barrier(mt_comm(c));
    counting = true;
    for (int i = 0; i < p->reports && !rc; i++) {
        for (int k = 0; k < p->keys && !rc; k++) {
            char key[16];
            snprintf(key, sizeof key, "m%d", k);
            rc = mt_metrics_set_f64(m, key, i + k + 0.5 * mt_world_rank(c));
        }
        if (!rc)
            rc = mt_report(c, m, NULL);
    }
    counting = false;
    if (!rc && mt_world_rank(c) == 0)
        printf("msgcount: ranks %d reports %d collectives %lld bytes %lld agreement_messages "
               "%lld agreement_bytes %lld\n", mt_world_size(c), p->reports, calls, bytes, msgs,
               msg_bytes);
    mt_metrics_free(&m);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: msgcount_probe REPORTS KEYS [mpitrain options]\n");
        return 2;
    }
    probe p = {atoi(argv[1]), atoi(argv[2])};
    argv[2] = argv[0];
    argc -= 2;
    argv += 2;
    if (mt_init(&argc, &argv))
        return 1;
    mt_trainer_config cfg = {0};
    mt_trainer *t = NULL;
    mt_result *res = NULL;
    int rc = mt_config_from_args(&cfg, &argc, &argv);
    if (!rc)
        rc = mt_trainer_create(&t, train, &p, &cfg);
    if (!rc)
        rc = mt_trainer_fit(t, &res);
    if (!rc && mt_result_error(res))
        rc = 1;
    if (rc)
        fprintf(stderr, "msgcount_probe: %s\n", res && mt_result_error(res) ? mt_result_error(res)
                                                                          : mt_last_error());
    mt_result_free(&res);
    mt_trainer_destroy(&t);
    mt_finalize();
    return rc ? 1 : 0;
}
