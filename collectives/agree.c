/*
 * agree.c -- the agreement step that ends every collective path.
 *
 * One allreduce over a fixed-size frame tells every rank, at once, whether any rank
 * failed (and the lowest such rank), and whether all ranks are in the same call with the
 * same argument signature (min == max, with the minimum carried as -value, every word
 * combined by MAX). Only when something is wrong does a second, rarer step move text: a
 * broadcast of the winning rank's message, or an allgather of every rank's call
 * description. Both are entered by every rank, because every rank learnt the same thing
 * from the allreduce.
 *
 * The frame also has room for a small payload (MT__AGREE_PAYLOAD bytes) that is combined
 * in the same message: the data of a small mt_allreduce, the statistics of a report. The
 * frame's combining step combines two payloads only when both
 * frames say they are in the same call with the same signature and the same payload
 * description, so data of a mismatched call is never combined with another's, and the
 * result reaches the caller only when the agreement is OK. Every agreement, with a
 * payload or without, is the same exchange of one frame, so ranks in different calls, or
 * the same one with different sizes, still meet in matching messages and learn it from
 * the words. The frame is at most 256 bytes: measured on the
 * project's machine (Open MPI 4.1, shared memory, 2 ranks), an allreduce of up to 256
 * bytes cost the same as one of 56 (1.8 us), and one of 320 bytes 2.8 us (the shared
 * memory transport's inline limit), so a larger frame would make every agreement slower.
 * A rank sends only the words (64 bytes) and the payload bytes its call uses.
 *
 * Invariant: each rank calls mt__agree the same number of times, so c->seq is equal on
 * every rank and the agreement itself can never be matched against a data collective.
 */
#include "collectives.h"
#include "position.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { W_KIND, W_NKIND, W_SIG, W_NSIG, W_FAIL, W_VALUE, W_VALUE2, W_DESC, W_COUNT };

/* The payload's description in W_DESC: kind, dtype, op and count, equal on every rank
 * that combines; POISON once two frames with different descriptions met. */
#define POISON INT64_MIN

typedef struct {
    int64_t w[W_COUNT];
    unsigned char pay[MT__AGREE_PAYLOAD];
} frame;

static int64_t describe(const mt__payload *p)
{
    if (!p || p->kind == MT__PAY_NONE)
        return 0;
    return (int64_t)p->kind << 56 | (int64_t)(p->dtype & 0xff) << 48 |
           (int64_t)(p->op & 0xff) << 40 | (int64_t)p->count;
}

static bool clean(const frame *f)
{
    return f->w[W_KIND] == -f->w[W_NKIND] && f->w[W_SIG] == -f->w[W_NSIG] &&
           f->w[W_DESC] != POISON;
}

static void combine_payload(const frame *in, frame *out)
{
    int64_t d = in->w[W_DESC];
    int kind = (int)(d >> 56), dtype = (int)(d >> 48 & 0xff), op = (int)(d >> 40 & 0xff);
    size_t count = (size_t)(d & 0xffffffffff);
    if (kind == MT__PAY_REDUCE && mt_dtype_size(dtype) &&
        count <= MT__AGREE_PAYLOAD / mt_dtype_size(dtype))
        mt__combine_reduce(in->pay, out->pay, count, dtype, op);
    else if (kind == MT__PAY_STATS && count <= MT__AGREE_PAYLOAD / (4 * sizeof(double)))
        mt__combine_stats((const double *)in->pay, (double *)out->pay, count);
    else if (kind == MT__PAY_TRIPLES && count <= MT__AGREE_PAYLOAD / (3 * sizeof(double)))
        mt__combine_triples((const double *)in->pay, (double *)out->pay, count);
}

/* out = in combined with out: the words by MAX, the payloads only between frames of the
 * same call with the same payload description. */
static void combine_frames(const frame *in, frame *out)
{
    if (in->w[W_DESC] && clean(in) && clean(out) && in->w[W_KIND] == out->w[W_KIND] &&
        in->w[W_SIG] == out->w[W_SIG] && in->w[W_DESC] == out->w[W_DESC])
        combine_payload(in, out);
    bool same_desc = in->w[W_DESC] == out->w[W_DESC];
    for (int i = 0; i < W_DESC; i++)
        if (in->w[i] > out->w[i])
            out->w[i] = in->w[i];
    if (!same_desc)
        out->w[W_DESC] = POISON;
}

/* The frame's allreduce: recursive doubling over MPI_Sendrecv (the algorithm MPI
 * libraries use for small messages; ranks past the largest power of two first hand their
 * frame to a partner and get the result back at the end), written here so that an
 * agreement takes ceil(log2 N) steps whatever the MPI library's tuning picks: Open MPI
 * 4.1.4's MPI_Allreduce of one 256-byte element took 62 messages at rank 0 at 32 ranks
 * (a linear algorithm) and 10 at 16 and 12 at 64 (tests/msgcount.sh). Every combining
 * rule is commutative to the bit, so both partners of a step hold the same frame after
 * it, and every rank ends with the same one. */
static int frame_allreduce(frame *f, size_t pay, const mt__comm *c)
{
    frame in;
    /* each rank sends its words and the payload bytes its call uses, and receives up to
     * a whole frame: a partner in a call of another size sends another length, and its
     * payload, never combined with this one (its description differs), is not read */
    int n = (int)(offsetof(frame, pay) + pay), full = (int)sizeof *f, pof2 = 1;
    while (pof2 * 2 <= c->size)
        pof2 *= 2;
    int rem = c->size - pof2, me = c->rank, vrank = me - rem, e = MPI_SUCCESS;
    if (me < 2 * rem) {
        if (me % 2 == 0)
            e = MPI_Send(f, n, MPI_BYTE, me + 1, MT__TAG_AGREE, c->comm);
        else if ((e = MPI_Recv(&in, full, MPI_BYTE, me - 1, MT__TAG_AGREE, c->comm,
                               MPI_STATUS_IGNORE)) == MPI_SUCCESS)
            combine_frames(&in, f);
        vrank = me % 2 ? me / 2 : -1;
    }
    for (int mask = 1; vrank >= 0 && e == MPI_SUCCESS && mask < pof2; mask <<= 1) {
        int vpeer = vrank ^ mask, peer = vpeer < rem ? vpeer * 2 + 1 : vpeer + rem;
        e = MPI_Sendrecv(f, n, MPI_BYTE, peer, MT__TAG_AGREE, &in, full, MPI_BYTE, peer,
                         MT__TAG_AGREE, c->comm, MPI_STATUS_IGNORE);
        if (e == MPI_SUCCESS)
            combine_frames(&in, f);
    }
    if (e == MPI_SUCCESS && me < 2 * rem)
        e = me % 2 ? MPI_Send(f, n, MPI_BYTE, me - 1, MT__TAG_AGREE, c->comm)
                   : MPI_Recv(f, full, MPI_BYTE, me + 1, MT__TAG_AGREE, c->comm,
                              MPI_STATUS_IGNORE);
    return e;
}

typedef struct {
    int code;
    char msg[MT__MSG_LEN];
} fail_note;

/* Every rank: the lowest failing rank broadcasts its code and message. */
static int share_failure(const mt__comm *c, int root, int status, mt__winner *who,
                         bool *broken)
{
    fail_note *note = calloc(1, sizeof *note);
    if (!note) /* cannot allocate: still a uniform answer, without the text */
    {
        who->code = MT_ENOMEM;
        snprintf(who->msg, sizeof who->msg, "rank %d failed", root);
        return mt__error(c->rank == root ? status : MT_EPEER, "rank %d failed", root);
    }
    if (c->rank == root) {
        note->code = status;
        snprintf(note->msg, sizeof note->msg, "%s", mt_last_error());
    }
    int e = MPI_Bcast(note, (int)sizeof *note, MPI_BYTE, root, c->comm);
    int rc;
    who->code = note->code;
    snprintf(who->msg, sizeof who->msg, "%s", note->msg);
    if ((*broken = e != MPI_SUCCESS))
        rc = mt__mpi_error(e, "MPI_Bcast (failure note)");
    else if (c->rank == root)
        rc = status;
    else if (status != MT_OK) {
        char own[MT__MSG_LEN];
        snprintf(own, sizeof own, "%s", mt_last_error());
        rc = mt__error(MT_EPEER, "rank %d failed: %s (%s: this rank failed too: %s)", root,
                       note->msg, mt_err_name(note->code), own);
    } else
        rc = mt__error(MT_EPEER, "rank %d failed: %s", root, note->msg);
    free(note);
    return rc;
}

typedef struct {
    int kind;
    int pad;
    uint64_t sig;
    char desc[MT__DESC_LEN];
} call_note;


/* Every rank: gather every rank's call and name the first two that differ. */
static int share_mismatch(mt__comm *c, const mt__call *call, uint64_t seq, bool *broken)
{
    call_note mine = {.kind = call->kind, .sig = call->sig};
    mt__call_describe(call, mine.desc, sizeof mine.desc);
    call_note *all = calloc((size_t)c->size, sizeof *all);
    if (!all)
        return mt__error(MT_EMISMATCH, "ranks called different collectives at call #%llu "
                                       "(this rank: %s)", (unsigned long long)seq, mine.desc);
    int e = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE,
                          c->comm);
    int rc;
    if ((*broken = e != MPI_SUCCESS))
        rc = mt__mpi_error(e, "MPI_Allgather (call descriptions)");
    else {
        int other = 1;
        while (other < c->size &&
               all[other].kind == all[0].kind && all[other].sig == all[0].sig)
            other++;
        if (other == c->size)
            other = c->size - 1; /* cannot happen: min != max was seen */
        rc = mt__error(MT_EMISMATCH,
                       "ranks called different collectives at call #%llu: rank 0 called %s, "
                       "rank %d called %s",
                       (unsigned long long)seq, all[0].desc, other, all[other].desc);
    }
    free(all);
    return rc;
}

/* The failure word: MAX over ranks picks the lowest rank with an error of its own, else
 * the lowest rank whose error only echoes another's (MT_EPEER, MT_EMISMATCH). */
static int64_t fail_key(const mt__comm *c, int status)
{
    if (status == MT_OK)
        return INT64_MIN;
    bool echo = status == MT_EPEER || status == MT_EMISMATCH;
    return -(int64_t)(echo ? c->size + c->rank : c->rank);
}

/* The allreduce; *same is true when every rank was in the same call, *broken when an MPI
 * call of the agreement itself failed (then nothing was learnt from the others). p (may
 * be NULL) is this rank's payload: read only when status is OK, written back only when
 * the agreement is. */
static int agree(mt__comm *c, const mt__call *call, int status, mt__winner *who, bool *same,
                 bool *broken, int64_t *value, int nvalues, mt__payload *p)
{
    MT__TRACE("agree", "agree");
    uint64_t seq = c->seq++;
    int64_t s = (int64_t)(call->sig >> 1);
    frame f; /* the words; of the payload, only the bytes this call uses are set and sent */
    const int64_t words[W_COUNT] = {
        [W_KIND] = call->kind, [W_NKIND] = -call->kind,
        [W_SIG] = s, [W_NSIG] = -s,
        [W_VALUE] = nvalues > 0 ? value[0] : 0,
        [W_VALUE2] = nvalues > 1 ? value[1] : 0,
        [W_DESC] = describe(p),
    };
    memcpy(f.w, words, sizeof words);
    size_t pay = p ? mt__payload_bytes(p) : 0;
    if (pay > sizeof f.pay) { /* a caller's mistake: never past the frame */
        if (!status)
            status = mt__error(MT_EINVAL, "agreement payload of %zu bytes (at most %d)", pay,
                               MT__AGREE_PAYLOAD);
        pay = 0;
    }
    if (status == MT_OK && pay)
        memcpy(f.pay, p->buf, pay);
    else if (pay)
        memset(f.pay, 0, pay);
    f.w[W_FAIL] = fail_key(c, status);
    mt__winner none;
    if (!who)
        who = &none;
    who->rank = -1;
    who->code = MT_OK;
    who->msg[0] = '\0';
    *same = false;
    *broken = true;
    mt__watch_enter(call, seq);
    int e = frame_allreduce(&f, pay, c);
    mt__watch_leave();
    if (e != MPI_SUCCESS)
        return mt__mpi_error(e, "MPI_Allreduce (agreement)");
    *broken = false;
    if (nvalues > 0)
        value[0] = f.w[W_VALUE];
    if (nvalues > 1)
        value[1] = f.w[W_VALUE2];
    *same = f.w[W_KIND] == -f.w[W_NKIND];
    if (f.w[W_FAIL] != INT64_MIN) {
        int root = (int)(-f.w[W_FAIL] % c->size);
        who->rank = root;
        return share_failure(c, root, status, who, broken);
    }
    if (!*same || f.w[W_SIG] != -f.w[W_NSIG] || f.w[W_DESC] == POISON) {
        *same = false;
        who->code = MT_EMISMATCH;
        int rc = share_mismatch(c, call, seq, broken);
        snprintf(who->msg, sizeof who->msg, "%s", mt_last_error());
        return rc;
    }
    if (pay)
        memcpy(p->buf, f.pay, pay);
    return MT_OK;
}

size_t mt__payload_bytes(const mt__payload *p)
{
    switch (p->kind) {
    case MT__PAY_REDUCE:
        return mt_dtype_size(p->dtype) && p->count <= MT__AGREE_PAYLOAD
                   ? p->count * mt_dtype_size(p->dtype) : SIZE_MAX;
    case MT__PAY_STATS:
        return p->count <= MT__AGREE_PAYLOAD ? p->count * 4 * sizeof(double) : SIZE_MAX;
    case MT__PAY_TRIPLES:
        return p->count <= MT__AGREE_PAYLOAD ? p->count * 3 * sizeof(double) : SIZE_MAX;
    }
    return 0;
}

int mt__agree(mt__comm *c, const mt__call *call, int status, mt__winner *who)
{
    bool same, broken;
    return agree(c, call, status, who, &same, &broken, NULL, 0, NULL);
}

int mt__agree_max(mt__comm *c, const mt__call *call, int status, mt__winner *who,
                  int64_t *values, int nvalues)
{
    bool same, broken;
    return agree(c, call, status, who, &same, &broken, values, nvalues, NULL);
}

int mt__agree_carry(mt__comm *c, const mt__call *call, int status, mt__winner *who,
                    int64_t *values, int nvalues, mt__payload *p)
{
    bool same, broken;
    return agree(c, call, status, who, &same, &broken, values, nvalues, p);
}

int mt__agree_setup(MPI_Comm comm, int status)
{
    mt__comm c = {.comm = comm};
    MPI_Comm_rank(comm, &c.rank);
    MPI_Comm_size(comm, &c.size);
    int64_t key = fail_key(&c, status);
    int e = MPI_Allreduce(MPI_IN_PLACE, &key, 1, MPI_INT64_T, MPI_MAX, comm);
    if (e != MPI_SUCCESS)
        return mt__mpi_error(e, "MPI_Allreduce (set-up agreement)");
    if (key == INT64_MIN)
        return MT_OK;
    mt__winner who;
    bool broken;
    return share_failure(&c, (int)(-key % c.size), status, &who, &broken);
}

int mt__agree_exit(mt__comm *c, int kind, int status, mt__winner *who)
{
    mt__call call;
    mt__call_init(&call, kind, 0, 0, 0);
    char own[MT__MSG_LEN];
    snprintf(own, sizeof own, "%s", mt_last_error());
    for (;;) {
        bool same, broken;
        /* each round must carry this rank's own message, not the last round's */
        if (status != MT_OK)
            mt__error_set_text(own);
        int rc = agree(c, &call, status, who, &same, &broken, NULL, 0, NULL);
        if (!broken && mt__test_fail("agree-exit-mpi", c->rank)) {
            /* what agree() answers when its MPI_Allreduce fails */
            rc = mt__mpi_error(MPI_ERR_OTHER, "MPI_Allreduce (agreement; injected by "
                                              "MT_TEST_FAIL_AT)");
            broken = true;
            same = false;
        }
        /* an agreement that cannot reach the others cannot learn that they left: this
         * rank's error is final (peers still waiting are ended by the stall watchdog) */
        if (broken) {
            if (who) {
                who->rank = c->rank;
                who->code = rc;
                snprintf(who->msg, sizeof who->msg, "%s", mt_last_error());
            }
            return rc;
        }
        if (same)
            return rc;
    }
}
