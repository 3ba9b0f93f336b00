/* comm_mpi.c: the communicator of CPU ranks over MPI (see comm.h). The collectives are rings of
 * MPI_Sendrecv between neighbours, so that the summation order is fixed, every rank gets identical
 * sums and the bytes sent are the ones counted; all-to-all, which sums nothing, is MPI's own (each block
 * goes straight to its rank). Each transfer step takes at least the modelled link's time when
 * MT_COMM_LINK is set (comm/link.h). */
#include "comm/comm.h"
#include "comm/link.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct mpi_impl {
    MPI_Comm comm;
    int poll_us;        /* mt_comm_mpi_poll: waits test and sleep this long between tests (0: MPI_Waitall) */
    void *tmp;          /* receive buffer of the reductions */
    size_t tmp_bytes;
    size_t int_limit;   /* mt_comm_mpi_int_limit: all-to-all blocks up to this many bytes go as int counts */
} mpi_impl;

#define TAG 77
#define PIECE ((size_t)1 << 26)   /* bytes per MPI call: counts stay below INT_MAX */

static const mt_comm_ops mpi_ops;

static MPI_Comm comm_of(mt_comm *c) { return ((mpi_impl *)c->impl)->comm; }

static int mpi_fail(mt_comm *c, const char *what, int rc, mt_err *e)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
    return mt_err_set(e, "%s (rank %d of %d): %s", what, c->rank, c->size, s);
}

/* MPI_Waitall, or with poll_us a loop of MPI_Testall and sleeps, so that a waiting progress thread leaves
 * the cores to the computation (MPI's own wait spins). */
static int wait_all(mt_comm *c, int n, MPI_Request *q)
{
    int us = ((mpi_impl *)c->impl)->poll_us;
    if (!us) return MPI_Waitall(n, q, MPI_STATUSES_IGNORE);
    struct timespec nap = {0, (long)us * 1000};
    for (;;) {
        int done = 0, rc = MPI_Testall(n, q, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS || done) return rc;
        nanosleep(&nap, NULL);
    }
}

void mt_comm_mpi_poll(mt_comm *c, int us)
{
    if (!strcmp(c->ops->name, "mpi")) ((mpi_impl *)c->impl)->poll_us = us;
}

/* Sends sb bytes to `to` while receiving rb bytes from `from`, each in pieces of at most PIECE bytes
 * (as many pieces as its own length needs, so both sides agree on them). */
static int sendrecv(mt_comm *c, const void *sbuf, size_t sb, int to, void *rbuf, size_t rb, int from, mt_err *e)
{
    size_t ns = sb ? (sb + PIECE - 1) / PIECE : 1, nr = rb ? (rb + PIECE - 1) / PIECE : 1;
    double t0 = mt_comm_link_now();
    MPI_Request *q = mt_xmalloc((ns + nr) * sizeof *q);
    int rc = MPI_SUCCESS;
    for (size_t i = 0; i < nr && rc == MPI_SUCCESS; i++) {
        size_t k = rb - i * PIECE < PIECE ? rb - i * PIECE : PIECE;
        rc = MPI_Irecv((char *)rbuf + i * PIECE, (int)k, MPI_BYTE, from, TAG, comm_of(c), &q[i]);
    }
    for (size_t i = 0; i < ns && rc == MPI_SUCCESS; i++) {
        size_t k = sb - i * PIECE < PIECE ? sb - i * PIECE : PIECE;
        rc = MPI_Isend((const char *)sbuf + i * PIECE, (int)k, MPI_BYTE, to, TAG, comm_of(c), &q[nr + i]);
        c->bytes_sent += k;
    }
    if (rc == MPI_SUCCESS) rc = wait_all(c, (int)(ns + nr), q);
    free(q);
    mt_comm_link_wait(t0, sb > rb ? sb : rb);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, "MPI_Sendrecv", rc, e);
}

static void *tmp_buf(mt_comm *c, size_t bytes)
{
    mpi_impl *m = c->impl;
    if (bytes > m->tmp_bytes) {
        free(m->tmp);
        m->tmp = mt_xmalloc(bytes);
        m->tmp_bytes = bytes;
    }
    return m->tmp;
}

/* The larger of two 16-bit floats (a NaN wins), as its bits. */
static uint16_t max16(uint16_t a, uint16_t b, float (*f)(uint16_t))
{
    float x = f(a), y = f(b);
    return y > x || y != y ? b : a;
}

/* dst = dst (op) src, elementwise: one hop of the ring; 16-bit floats are added in fp32 and rounded. MAX keeps a NaN of either side. */
#define REDUCE(T, SUM, MAX)                                                                       \
    do {                                                                                          \
        T *d = dst;                                                                               \
        const T *s = src;                                                                         \
        if (op == MT_OP_MAX)                                                                      \
            for (size_t i = 0; i < n; i++) d[i] = MAX;                                            \
        else                                                                                      \
            for (size_t i = 0; i < n; i++) d[i] = SUM;                                            \
    } while (0)
static void reduce(void *dst, const void *src, size_t n, mt_cdtype t, mt_redop op)
{
    switch (t) {
    case MT_C_F32: REDUCE(float, d[i] + s[i], s[i] > d[i] || s[i] != s[i] ? s[i] : d[i]); break;
    case MT_C_F64: REDUCE(double, d[i] + s[i], s[i] > d[i] || s[i] != s[i] ? s[i] : d[i]); break;
    case MT_C_I64: REDUCE(int64_t, d[i] + s[i], s[i] > d[i] ? s[i] : d[i]); break;
    case MT_C_BYTE: REDUCE(unsigned char, (unsigned char)(d[i] + s[i]), s[i] > d[i] ? s[i] : d[i]); break;
    case MT_C_BF16: REDUCE(uint16_t, mt_f32_to_bf16(mt_bf16_to_f32(d[i]) + mt_bf16_to_f32(s[i])),
                           max16(d[i], s[i], mt_bf16_to_f32)); break;
    case MT_C_F16: REDUCE(uint16_t, mt_f32_to_f16(mt_f16_to_f32(d[i]) + mt_f16_to_f32(s[i])),
                          max16(d[i], s[i], mt_f16_to_f32)); break;
    }
}
#undef REDUCE

static int mod(int a, int n) { return ((a % n) + n) % n; }

static int reduce_scatter(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, mt_redop op, mt_err *e)
{
    int N = c->size, r = c->rank;
    if (N == 1) return 0;
    size_t es = mt_cdtype_size(t), *off = mt_xmalloc((size_t)N * sizeof *off), maxc = 0;
    for (int i = 0; i < N; i++) {
        off[i] = i ? off[i - 1] + counts[i - 1] : 0;
        if (counts[i] > maxc) maxc = counts[i];
    }
    char *b = buf, *tmp = tmp_buf(c, maxc * es + 1);
    int rc = 0, to = mod(r + 1, N), from = mod(r - 1, N);
    /* step s: send chunk r-s-1 (accumulated so far), receive chunk r-s-2 and add this rank's values;
     * after N-1 steps chunk r is complete here */
    for (int s = 0; s < N - 1 && !rc; s++) {
        int sc = mod(r - s - 1, N), rcv = mod(r - s - 2, N);
        rc = sendrecv(c, b + off[sc] * es, counts[sc] * es, to, tmp, counts[rcv] * es, from, e);
        if (!rc) reduce(b + off[rcv] * es, tmp, counts[rcv], t, op);
    }
    free(off);
    return rc;
}

static int m_reduce_scatter(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, mt_err *e)
{
    return reduce_scatter(c, buf, counts, t, MT_OP_SUM, e);
}

static int m_all_gather(mt_comm *c, void *buf, const size_t *counts, mt_cdtype t, mt_err *e)
{
    int N = c->size, r = c->rank;
    if (N == 1) return 0;
    size_t es = mt_cdtype_size(t), *off = mt_xmalloc((size_t)N * sizeof *off);
    for (int i = 0; i < N; i++) off[i] = i ? off[i - 1] + counts[i - 1] : 0;
    char *b = buf;
    int rc = 0, to = mod(r + 1, N), from = mod(r - 1, N);
    for (int s = 0; s < N - 1 && !rc; s++) {
        int sc = mod(r - s, N), rcv = mod(r - s - 1, N);
        rc = sendrecv(c, b + off[sc] * es, counts[sc] * es, to, b + off[rcv] * es, counts[rcv] * es, from, e);
    }
    free(off);
    return rc;
}

static int m_all_reduce(mt_comm *c, void *buf, size_t n, mt_cdtype t, mt_redop op, mt_err *e)
{
    if (c->size == 1) return 0;
    size_t *counts = mt_xmalloc((size_t)c->size * sizeof *counts);
    mt_comm_even_counts(n, c->size, counts);
    int rc = reduce_scatter(c, buf, counts, t, op, e) || m_all_gather(c, buf, counts, t, e) ? -1 : 0;
    free(counts);
    return rc;
}

static int m_send(mt_comm *c, const void *buf, size_t n, mt_cdtype t, int peer, mt_err *e)
{
    size_t bytes = n * mt_cdtype_size(t), all = bytes;
    const char *p = buf;
    double t0 = mt_comm_link_now();
    do {
        size_t k = bytes < PIECE ? bytes : PIECE;
        int rc = MPI_Send(p, (int)k, MPI_BYTE, peer, TAG, comm_of(c));
        if (rc != MPI_SUCCESS) return mpi_fail(c, "MPI_Send", rc, e);
        c->bytes_sent += k;
        p += k, bytes -= k;
    } while (bytes > 0);
    mt_comm_link_wait(t0, all);
    return 0;
}

static int m_recv(mt_comm *c, void *buf, size_t n, mt_cdtype t, int peer, mt_err *e)
{
    size_t bytes = n * mt_cdtype_size(t), all = bytes;
    char *p = buf;
    double t0 = mt_comm_link_now();
    do {
        size_t k = bytes < PIECE ? bytes : PIECE;
        int rc = MPI_Recv(p, (int)k, MPI_BYTE, peer, TAG, comm_of(c), MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(c, "MPI_Recv", rc, e);
        p += k, bytes -= k;
    } while (bytes > 0);
    mt_comm_link_wait(t0, all);
    return 0;
}

/* Every receive, then every send, posted in pieces of at most PIECE bytes; one wait for them all. */
static int m_p2p(mt_comm *c, mt_p2p *ops, int n, mt_err *e)
{
    size_t nq = 0, sent = 0, got = 0;
    double t0 = mt_comm_link_now();
    for (int i = 0; i < n; i++) {
        if (ops[i].peer < 0 || ops[i].peer >= c->size)
            return mt_err_set(e, "%s rank %d of %d", ops[i].send ? "send to" : "receive from", ops[i].peer, c->size);
        size_t b = ops[i].n * mt_cdtype_size(ops[i].t);
        nq += b ? (b + PIECE - 1) / PIECE : 1;
        *(ops[i].send ? &sent : &got) += b;
    }
    MPI_Request *q = mt_xmalloc((nq ? nq : 1) * sizeof *q);
    int rc = MPI_SUCCESS;
    size_t k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n && rc == MPI_SUCCESS; i++) {
            if (ops[i].send != pass) continue;
            size_t b = ops[i].n * mt_cdtype_size(ops[i].t), off = 0;
            char *p = ops[i].buf;
            do {
                int m = (int)(b - off < PIECE ? b - off : PIECE);
                if (pass) {
                    rc = MPI_Isend(p + off, m, MPI_BYTE, ops[i].peer, TAG, comm_of(c), &q[k++]);
                    c->bytes_sent += (size_t)m;
                } else rc = MPI_Irecv(p + off, m, MPI_BYTE, ops[i].peer, TAG, comm_of(c), &q[k++]);
                off += (size_t)m;
            } while (off < b && rc == MPI_SUCCESS);
        }
    if (rc == MPI_SUCCESS) rc = wait_all(c, (int)k, q);
    free(q);
    mt_comm_link_wait(t0, sent > got ? sent : got);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, "point-to-point batch", rc, e);
}

/* A chain from the root, in pieces so that the ranks forward while receiving. */
static int m_broadcast(mt_comm *c, void *buf, size_t n, mt_cdtype t, int root, mt_err *e)
{
    int N = c->size;
    if (root < 0 || root >= N) return mt_err_set(e, "broadcast from rank %d of %d", root, N);
    if (N == 1) return 0;
    int i = mod(c->rank - root, N), prev = mod(c->rank - 1, N), next = mod(c->rank + 1, N);
    size_t bytes = n * mt_cdtype_size(t), all = bytes;
    char *p = buf;
    double t0 = mt_comm_link_now();
    do {
        size_t k = bytes < PIECE ? bytes : PIECE;
        int rc;
        if (i > 0 && (rc = MPI_Recv(p, (int)k, MPI_BYTE, prev, TAG, comm_of(c), MPI_STATUS_IGNORE)) != MPI_SUCCESS)
            return mpi_fail(c, "MPI_Recv", rc, e);
        if (i < N - 1) {
            if ((rc = MPI_Send(p, (int)k, MPI_BYTE, next, TAG, comm_of(c))) != MPI_SUCCESS)
                return mpi_fail(c, "MPI_Send", rc, e);
            c->bytes_sent += k;
        }
        p += k, bytes -= k;
    } while (bytes > 0);
    mt_comm_link_wait(t0, all);
    return 0;
}

/* One block of an all-to-all as MPI_Ialltoallw takes it (bytes, one datatype per peer): MPI_BYTE with
 * the block's length and offset when both are at most the int limit, else a datatype of pieces of at most
 * the limit at the block's 64-bit offset from the buffer (count 1, displacement 0; *made set: free it). */
static int block_type(size_t off, size_t bytes, size_t limit, int *count, int *displ, MPI_Datatype *type, int *made)
{
    *made = 0;
    if (bytes <= limit && off <= limit) {
        *count = (int)bytes, *displ = (int)off, *type = MPI_BYTE;
        return MPI_SUCCESS;
    }
    size_t piece = limit < PIECE ? limit : PIECE, np = (bytes + piece - 1) / piece;
    int *len = mt_xmalloc(np * sizeof *len);
    MPI_Aint *at = mt_xmalloc(np * sizeof *at);
    for (size_t i = 0; i < np; i++) {
        len[i] = (int)(bytes - i * piece < piece ? bytes - i * piece : piece);
        at[i] = (MPI_Aint)(off + i * piece);
    }
    int rc = MPI_Type_create_hindexed((int)np, len, at, MPI_BYTE, type);
    if (rc == MPI_SUCCESS && (rc = MPI_Type_commit(type)) != MPI_SUCCESS) MPI_Type_free(type);
    free(len);
    free(at);
    *made = rc == MPI_SUCCESS;
    *count = 1, *displ = 0;
    return rc;
}

/* MPI_Ialltoallw rather than MPI_Alltoallv, whose counts and displacements are ints: a rank cannot refuse
 * or reroute a block beyond INT_MAX bytes on its own (its peers would wait in the collective), so every
 * block that does not fit an int travels in the same collective as a datatype of pieces. Waited for as
 * the other operations (mt_comm_mpi_poll). */
static int m_all_to_all_v(mt_comm *c, const void *send, const size_t *sendcounts, void *recv, const size_t *recvcounts,
                          mt_cdtype t, mt_err *e)
{
    int N = c->size;
    size_t es = mt_cdtype_size(t), limit = ((mpi_impl *)c->impl)->int_limit, so = 0, ro = 0, sent = 0, got = 0;
    int *cnt = mt_xmalloc(4 * (size_t)N * sizeof *cnt), *made = mt_xcalloc(2 * (size_t)N, sizeof *made);
    MPI_Datatype *ty = mt_xmalloc(2 * (size_t)N * sizeof *ty);
    int *scount = cnt, *sdispl = cnt + N, *rcount = cnt + 2 * N, *rdispl = cnt + 3 * N, rc = MPI_SUCCESS;
    for (int r = 0; r < N && rc == MPI_SUCCESS; r++) {
        size_t sb = sendcounts[r] * es, rb = recvcounts[r] * es;
        rc = block_type(so, sb, limit, &scount[r], &sdispl[r], &ty[r], &made[r]);
        if (rc == MPI_SUCCESS) rc = block_type(ro, rb, limit, &rcount[r], &rdispl[r], &ty[N + r], &made[N + r]);
        if (r != c->rank) sent += sb, got += rb;
        so += sb, ro += rb;
    }
    double t0 = mt_comm_link_now();
    MPI_Request q;
    if (rc == MPI_SUCCESS)
        rc = MPI_Ialltoallw(send, scount, sdispl, ty, recv, rcount, rdispl, ty + N, comm_of(c), &q);
    if (rc == MPI_SUCCESS) {
        c->bytes_sent += sent;
        rc = wait_all(c, 1, &q);
        mt_comm_link_wait(t0, sent > got ? sent : got);
    }
    for (int i = 0; i < 2 * N; i++)
        if (made[i]) MPI_Type_free(&ty[i]);
    free(cnt), free(made), free(ty);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, "all-to-all", rc, e);
}

void mt_comm_mpi_int_limit(mt_comm *c, size_t bytes)
{
    if (!strcmp(c->ops->name, "mpi")) ((mpi_impl *)c->impl)->int_limit = bytes < 1 ? 1 : bytes > INT_MAX ? INT_MAX : bytes;
}

static int m_barrier(mt_comm *c, mt_err *e)
{
    int rc = MPI_Barrier(comm_of(c));
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, "MPI_Barrier", rc, e);
}

static mt_comm *wrap(MPI_Comm comm)
{
    mt_comm *c = mt_xcalloc(1, sizeof *c);
    mpi_impl *m = mt_xcalloc(1, sizeof *m);
    m->comm = comm;
    m->int_limit = INT_MAX;
    c->ops = &mpi_ops;
    c->impl = m;
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->size);
    return c;
}

static mt_comm *m_split(mt_comm *c, int color, int key, mt_err *e)
{
    MPI_Comm nc;
    int rc = MPI_Comm_split(comm_of(c), color, key, &nc);
    if (rc != MPI_SUCCESS) {
        mpi_fail(c, "MPI_Comm_split", rc, e);
        return NULL;
    }
    return wrap(nc);
}

static void m_free(mt_comm *c)
{
    mpi_impl *m = c->impl;
    if (m->comm != MPI_COMM_WORLD) MPI_Comm_free(&m->comm);
    free(m->tmp);
    free(m);
    free(c);
}

static const mt_comm_ops mpi_ops = {.name = "mpi",
                                    .all_reduce = m_all_reduce,
                                    .reduce_scatter = m_reduce_scatter,
                                    .all_gather = m_all_gather,
                                    .all_to_all_v = m_all_to_all_v,
                                    .broadcast = m_broadcast,
                                    .send = m_send,
                                    .recv = m_recv,
                                    .p2p = m_p2p,
                                    .barrier = m_barrier,
                                    .split = m_split,
                                    .free = m_free};

mt_comm *mt_comm_mpi_world(mt_err *e)
{
    int up = 0;
    MPI_Initialized(&up);
    if (!up) {
        mt_err_set(e, "MPI is not running (comm/bootstrap.h starts it)");
        return NULL;
    }
    return wrap(MPI_COMM_WORLD);
}
