/*
 * fusion_wire.c -- the network step of the flat backend (fusion_mpi.c) and of the
 * hierarchical one (the leaders' allreduce, fusion_hier.c): the fp32 sum, and gradients on
 * the wire as 16-bit floats (fp16 or bf16) averaged in fp32, as Horovod's
 * Compression.fp16 halves the bytes on the link. Within a node nothing is compressed.
 * Across nodes both go in pieces of small messages, several in flight (MSG_BYTES below
 * says why).
 *
 * The 16-bit allreduce is a reduce-scatter and an allgather of 16-bit segments: every
 * rank rounds its values to 16 bits, MPI_Ialltoall gives rank r segment r from every
 * rank, rank r sums them in fp32 in rank order, multiplies by the average's factor and
 * rounds once to 16 bits, and MPI_Iallgather gives every rank every rounded segment. Each
 * rank sends 2 (P - 1) / P of the data's 16-bit size, half of what a ring allreduce of
 * fp32 sends, and every rank decodes the same bits (MPI_Allreduce cannot sum 16-bit
 * floats in fp32).
 *
 * Rounding is to nearest even. fp16 (1 sign, 5 exponent, 10 mantissa bits): finite values
 * beyond +-65504 are clamped to +-65504 (not inf: one large gradient would otherwise make
 * the whole average inf on every rank), inf and NaN stay; fp16's subnormals reach down to
 * 2^-24 and smaller magnitudes round to zero. bf16 (fp32's 8 exponent bits, 7 mantissa
 * bits) keeps fp32's range; only finite values that would round past its largest finite
 * value (about 3.39e38) are clamped to it.
 */
#include "fusion_backend.h"

#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

static inline uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Branch-free (each case computed, the one that applies kept by a mask), so the loops
 * below vectorise. */
static inline uint32_t mask(int cond)
{
    return -(uint32_t)(cond != 0);
}

static inline uint16_t to_f16(float f)
{
    uint32_t x = bits_of(f), a = x & 0x7fffffffu, sign = (x >> 16) & 0x8000u;
    /* normal: rebias the exponent (127 -> 15), round the 13 dropped bits to nearest even */
    uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
    /* below 2^-14: a subnormal, rounded to a multiple of 2^-24 by the FPU's own addition */
    uint32_t sub = bits_of(float_of(a) + 0.5f) - 0x3f000000u;
    /* 65520 and up round past 65504: clamped; inf; NaN (kept quiet) */
    uint32_t nan = mask(a > 0x7f800000u), inf = mask(a == 0x7f800000u);
    uint32_t big = (0x7e00u & nan) | (0x7c00u & inf) | (0x7bffu & ~nan & ~inf);
    uint32_t is_big = mask(a >= 0x477ff000u), is_sub = mask(a < 0x38800000u);
    return (uint16_t)(sign | (big & is_big) | (sub & is_sub) | (normal & ~is_big & ~is_sub));
}

static inline float from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t sub = bits_of((float)m * 0x1p-24f); /* zero or subnormal: m * 2^-24 */
    uint32_t special = 0x7f800000u | (m << 13);  /* inf, NaN */
    uint32_t normal = ((e + 112) << 23) | (m << 13);
    uint32_t zero_e = mask(e == 0), top_e = mask(e == 31);
    return float_of(sign | (sub & zero_e) | (special & top_e) | (normal & ~zero_e & ~top_e));
}

static inline uint16_t to_bf16(float f)
{
    uint32_t x = bits_of(f), a = x & 0x7fffffffu;
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t quiet = (x >> 16) | 0x40u;                 /* keep a NaN a (quiet) NaN */
    uint32_t clamped = ((x >> 16) & 0x8000u) | 0x7f7fu; /* what would round to inf */
    uint32_t nan = mask(a > 0x7f800000u), over = mask(a >= 0x7f7f8000u) & mask(a < 0x7f800000u);
    return (uint16_t)((quiet & nan) | (clamped & over) | (rounded & ~nan & ~over));
}

static inline float from_bf16(uint16_t h)
{
    return float_of((uint32_t)h << 16);
}

uint16_t mt__wire_from_f32(mt_compression k, float f)
{
    return k == MT_COMPRESS_BF16 ? to_bf16(f) : to_f16(f);
}

float mt__wire_to_f32(mt_compression k, uint16_t h)
{
    return k == MT_COMPRESS_BF16 ? from_bf16(h) : from_f16(h);
}

#define VECTORISED __attribute__((optimize("tree-vectorize")))

/* Across nodes, the network step goes in pieces whose messages are at most MSG_BYTES, up
 * to WINDOW pieces in flight. Measured between two emulated nodes (2 x 1 rank, 0.94 MB of
 * gradients, the machine loaded): one blocking MPI_Allreduce 14.2-17.3 ms on the 1 Gbit/s
 * profile and 8.8-15.8 ms unshaped; 32 MPI_Iallreduce pieces of 29 KB 5.3-5.5 ms and
 * 0.5-1.5 ms. Open MPI's TCP transport sends messages above its 64 KiB eager limit by
 * rendezvous, a round trip each, and a busy or shared machine makes round trips slow;
 * many small messages in flight also keep the TCP stream from idling. Within a node
 * (shared-memory transport) one call of everything stays faster (pieces: 1.1-1.6x). */
enum { MSG_BYTES = 32768, WINDOW = 16 };

/* Sleeping (MT_FUSION_SLEEP=1, flat's default: below), across nodes, a piece's wait on the
 * fusion's own thread polls MPI_Test and sleeps in between where MPI_Wait would spin:
 * Open MPI's wait loop polls, and with mpi_yield_when_idle yields, on the core whose rank
 * is computing the rest of the backward pass. The caller's thread, which in mt_fusion_wait has nothing else to do,
 * waits in MPI_Wait. The thread's timer slack is 1 ns, or Linux would round each short
 * sleep up to 50 us.
 *
 * Each sleep is an eighth of the time this wait has taken so far, at least 2 us and at
 * most 1 ms: a piece that arrives soon is seen soon, a wait overshoots its message by at
 * most an eighth (or 1 ms), and a wait of T costs about 8 ln(T / 16 us) + T / 1 ms polls,
 * not T / 16 us. The sleeps once went from 2 us doubling to at most 16 us whatever the
 * wait, and that stalled the whole machine: every poll is a timer interrupt, which on a
 * virtual machine (here Firecracker: KVM) is an exit to the hypervisor; with 4 ranks'
 * threads waiting for a slow piece the guest spent 80% of both CPUs in the kernel (local
 * timer interrupts 58,000/s against 4,700/s, context switches 230,000/s against 57,000/s),
 * the network's receive work (softirqs, run by ksoftirqd when deferred) nearly stopped
 * (216 NET_RX in 3.4 s against about 270 in 0.2 s), so the pieces the threads polled for
 * did not arrive and they kept polling: every process on the machine, the stall watchdog
 * too, went without a CPU for 1 to 7 s (tests/cluster_linkdown.sh's job: "a rank silent
 * for 5 s"). The polls a wait may make now fall as it lasts, so that livelock cannot
 * sustain itself. mt__wire_polls counts them (test_mpi_fusion's sleeping_wait_backs_off
 * holds a wait for a second and bounds them). */
/* Which wait wins is measured per path (benchmarks/cluster_bench.sh, the train suite's
 * row blocks and per-layer buckets, per-rank samples/s; docs/benchmarks.md "The fusion
 * thread's wait, measured quietly"): two full runs on a quiet machine, each node its own
 * CPU, the sleeping wait against MPI_Wait: flat (2 emulated nodes x 1 rank, and
 * MT_FUSION_ALGO=flat at 2 x 2) 0.99x-1.92x over 9 row-block figures (1.48x geometric
 * mean), per layer 0.97x-2.26x (1.54x); hier 0.98x-1.06x over 6 (1.01x), within the two
 * runs' spread. So flat sleeps by default and hier, where neither wins, keeps MPI_Wait.
 * (Under heavy oversubscription the sleeping wait was the faster in each of 3 pairs of
 * tests/fusion_nodes.sh's suite at 2+2: 1.33 s against 1.55 s quiet, 43.7 against 55.5 s
 * beside 8 busy loops, 155.8 against 164.5 s beside 24; its once-seen stall past 240 s
 * was that load, not the wait.) MT_FUSION_SLEEP=0 or 1 decides instead. On one node the
 * fusion's thread makes no MPI wait (shared memory and its barrier). */
static const bool SLEEPS_BY_DEFAULT[2] = {[MT__WIRE_FLAT] = true, [MT__WIRE_HIER] = false};
static _Thread_local enum { NOT_FUSION = 0, KNOB_ON, KNOB_OFF, BY_PATH } thread_mode;
static _Thread_local mt__wire_path thread_path;
static _Thread_local uint64_t thread_polls;
enum { POLL_MIN_NS = 2000, POLL_MAX_NS = 1000000, POLL_SHARE = 8 };

void mt__wire_thread_sleeps(void)
{
    const char *knob = getenv("MT_FUSION_SLEEP");
    thread_mode = !knob ? BY_PATH : mt__env_knob_bool("MT_FUSION_SLEEP", false) ? KNOB_ON
                                                                                : KNOB_OFF;
    if (thread_mode != KNOB_OFF)
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

void mt__wire_thread_done(void)
{
    thread_mode = NOT_FUSION;
}

void mt__wire_set_path(mt__wire_path p)
{
    thread_path = p;
}

static bool thread_sleeps(void)
{
    return thread_mode == KNOB_ON || (thread_mode == BY_PATH && SLEEPS_BY_DEFAULT[thread_path]);
}

uint64_t mt__wire_polls(void)
{
    return thread_polls;
}

int mt__wire_wait(MPI_Request *r)
{
    if (!thread_sleeps())
        return MPI_Wait(r, MPI_STATUS_IGNORE);
    MT__TRACE("fusion", "wire_wait");
    double t0 = mt__now();
    for (;;) {
        int done = 0, e = MPI_Test(r, &done, MPI_STATUS_IGNORE);
        thread_polls++;
        if (e != MPI_SUCCESS || done)
            return e;
        double ns = (mt__now() - t0) * 1e9 / POLL_SHARE;
        ns = ns < POLL_MIN_NS ? POLL_MIN_NS : ns > POLL_MAX_NS ? POLL_MAX_NS : ns;
        struct timespec ts = {0, (long)ns};
        nanosleep(&ts, NULL);
    }
}

/* The four conversions, each one loop the compiler vectorises. */
#define CONVERT(name, from, to, fn)                                                     \
    VECTORISED static void name(const from *restrict src, to *restrict dst, size_t n)   \
    {                                                                                   \
        for (size_t i = 0; i < n; i++)                                                  \
            dst[i] = fn(src[i]);                                                        \
    }
CONVERT(encode_bf16, float, uint16_t, to_bf16)
CONVERT(encode_f16, float, uint16_t, to_f16)
CONVERT(decode_bf16, uint16_t, float, from_bf16)
CONVERT(decode_f16, uint16_t, float, from_f16)

static void encode(mt_compression k, const float *src, uint16_t *dst, size_t n)
{
    (k == MT_COMPRESS_BF16 ? encode_bf16 : encode_f16)(src, dst, n);
}

static void decode(mt_compression k, const uint16_t *src, float *dst, size_t n)
{
    (k == MT_COMPRESS_BF16 ? decode_bf16 : decode_f16)(src, dst, n);
}

int mt__wire_reserve(mt__wire *w, int size, int rank, size_t cap, bool piped)
{
    size_t P = (size_t)size;
    /* across nodes: pieces whose messages stay within MSG_BYTES (an eager send), up to
     * WINDOW of them in flight; else one piece of everything */
    size_t piece = piped && cap > P * (MSG_BYTES / 2) ? P * (MSG_BYTES / 2) : cap;
    size_t seg = (piece + P - 1) / P, pieces = piece ? (cap + piece - 1) / piece : 0;
    int slots = pieces < WINDOW ? (int)pieces : WINDOW;
    size_t per_slot = 3 * P * seg + seg; /* send, recv, gathered; this rank's sums */
    if (w->size == size && w->piece >= piece && w->slots >= slots && w->seg >= seg)
        return MT_OK;
    uint16_t *buf = mt__test_fail("fusion-wire", rank) ? NULL
                                                       : malloc((size_t)slots * per_slot * 2);
    if (!buf && slots)
        return mt__error(MT_ENOMEM, "rank %d: out of memory for the fusion's 16-bit buffers "
                                    "(%zu floats)", rank, cap);
    free(w->buf);
    *w = (mt__wire){.buf = buf, .piece = piece, .seg = seg, .slots = slots, .size = size};
    return MT_OK;
}

void mt__wire_free(mt__wire *w)
{
    free(w->buf);
    *w = (mt__wire){0};
}

/* This rank's segment: seg values from each of p ranks (recv, rank after rank) summed in
 * rank order, times scale, rounded into out. */
VECTORISED static void sum_segment(mt_compression k, const uint16_t *recv, size_t seg,
                                   int p, float scale, uint16_t *out)
{
    enum { BLOCK = 512 };
    float acc[BLOCK], x[BLOCK];
    for (size_t at = 0; at < seg; at += BLOCK) {
        size_t m = seg - at < BLOCK ? seg - at : BLOCK;
        decode(k, recv + at, acc, m);
        for (int q = 1; q < p; q++) {
            decode(k, recv + (size_t)q * seg + at, x, m);
            for (size_t i = 0; i < m; i++)
                acc[i] += x[i];
        }
        for (size_t i = 0; i < m; i++)
            acc[i] *= scale;
        encode(k, acc, out + at, m);
    }
}

/* Slot i's buffers. */
static uint16_t *slot_at(const mt__wire *w, int i, int which)
{
    size_t P = (size_t)w->size, seg = w->seg;
    uint16_t *base = w->buf + (size_t)i * (3 * P * seg + seg);
    return base + (size_t)which * P * seg; /* 0 send, 1 recv, 2 gathered, 3 this rank's */
}

int mt__wire_allreduce(mt__wire *w, MPI_Comm comm, mt_compression k, float *data, size_t n,
                       float scale)
{
    int rc = MT_OK;
    size_t P = (size_t)w->size;
    MPI_Request a[WINDOW], g[WINDOW];
    size_t at[WINDOW], len[WINDOW];
    for (size_t off = 0; off < n;) { /* rounds of up to `slots` pieces in flight */
        int used = 0;
        for (; used < w->slots && off < n; used++) {
            size_t m = n - off < w->piece ? n - off : w->piece, seg = (m + P - 1) / P;
            uint16_t *snd = slot_at(w, used, 0);
            encode(k, data + off, snd, m);
            memset(snd + m, 0, (seg * P - m) * sizeof *snd);
            at[used] = off;
            len[used] = m;
            off += m;
            MT__MPI(MPI_Ialltoall(snd, (int)seg, MPI_UINT16_T, slot_at(w, used, 1), (int)seg,
                                  MPI_UINT16_T, comm, &a[used]), out);
        }
        for (int i = 0; i < used; i++) {
            size_t seg = (len[i] + P - 1) / P;
            MT__MPI(mt__wire_wait(&a[i]), out);
            sum_segment(k, slot_at(w, i, 1), seg, w->size, scale, slot_at(w, i, 3));
            MT__MPI(MPI_Iallgather(slot_at(w, i, 3), (int)seg, MPI_UINT16_T, slot_at(w, i, 2),
                                   (int)seg, MPI_UINT16_T, comm, &g[i]), out);
        }
        for (int i = 0; i < used; i++) {
            MT__MPI(mt__wire_wait(&g[i]), out);
            decode(k, slot_at(w, i, 2), data + at[i], len[i]);
        }
    }
out: /* an MPI error: the job's communicators are not to be trusted any more */
    return rc;
}

int mt__wire_sum(MPI_Comm comm, float *data, size_t n, bool piped)
{
    int rc = MT_OK;
    size_t piece = piped ? MSG_BYTES / sizeof(float) : mt__fusion_chunk();
    size_t pieces = (n + piece - 1) / piece, posted = 0;
    for (size_t off = 0; !piped && off < n; off += piece) { /* within a node: blocking */
        size_t m = n - off < piece ? n - off : piece;
        MT__MPI(MPI_Allreduce(MPI_IN_PLACE, data + off, (int)m, MPI_FLOAT, MPI_SUM, comm), out);
    }
    if (!piped)
        return MT_OK;
    MPI_Request r[WINDOW];
    for (size_t done = 0; done < pieces; done++) { /* a sliding window of pieces */
        for (; posted < pieces && posted - done < WINDOW; posted++) {
            size_t off = posted * piece, m = n - off < piece ? n - off : piece;
            MT__MPI(MPI_Iallreduce(MPI_IN_PLACE, data + off, (int)m, MPI_FLOAT, MPI_SUM, comm,
                                   &r[posted % WINDOW]), out);
        }
        MT__MPI(mt__wire_wait(&r[done % WINDOW]), out);
    }
out:
    return rc;
}
