/* Checks MPI_Ibarrier, MPI_Ibcast and MPI_Iallreduce (smelt's non-blocking path)
 * against plain C: several datatypes, operations, roots and sizes (up to several
 * fragments of smelt's rings), completed with MPI_Wait, MPI_Test loops, MPI_Waitall over
 * arrays that mix them with point-to-point requests, MPI_Waitany/Waitsome,
 * MPI_Testall/Testany/Testsome, MPI_Request_get_status; overlapped with computation;
 * several outstanding on one communicator (queued, completed in any order); a
 * blocking collective while one is pending; a rank waiting on point-to-point messages
 * (MPI_Waitall, blocking MPI_Recv, MPI_Probe, blocking MPI_Ssend) that its peers match
 * only after their own wait on a barrier; and the NBX pattern (MPI_Issend, then
 * MPI_Iprobe/MPI_Recv while MPI_Testall of the sends, then MPI_Ibarrier polled with
 * MPI_Test while still receiving), which must not deadlock. On MPI_COMM_WORLD, a
 * duplicate and all ranks reordered.
 *
 * With "multiple" (under MPI_THREAD_MULTIPLE): also two threads per rank at once, one
 * polling non-blocking calls with MPI_Test on one duplicate while the other runs
 * blocking and non-blocking calls on another.
 *
 * Prints "nonblocking: OK <checks>" on rank 0; on a wrong result prints what differed
 * and calls MPI_Abort(2). Usage: nonblocking [rounds [multiple]]. */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int world_rank;
static long checks;

static void wrong(const char *what, MPI_Comm comm, int detail)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    fprintf(stderr, "nonblocking: WRONG %s on rank %d (world %d): %d\n", what, rank, world_rank, detail);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t h(int rank, int i, int seed)
{
    return mix(((uint64_t)(unsigned)seed << 40) ^ ((uint64_t)(unsigned)rank << 24) ^ (uint64_t)(unsigned)i);
}

/* Completes `req` the way `how` says: 0 MPI_Wait, 1 an MPI_Test loop, 2 MPI_Waitany,
 * 3 an MPI_Testany loop, 4 MPI_Waitsome, 5 an MPI_Request_get_status loop then
 * MPI_Wait, 6 an MPI_Testsome loop, 7 an MPI_Testall loop. */
static void complete(MPI_Request *req, int how, MPI_Comm comm)
{
    int flag = 0, idx = -1, out = 0;
    MPI_Status st;
    switch (how % 8) {
    case 0:
        MPI_Wait(req, &st);
        break;
    case 1:
        while (!flag)
            MPI_Test(req, &flag, &st);
        break;
    case 2:
        MPI_Waitany(1, req, &idx, &st);
        if (idx != 0)
            wrong("MPI_Waitany index", comm, idx);
        break;
    case 3:
        while (!flag)
            MPI_Testany(1, req, &idx, &flag, &st);
        if (idx != 0)
            wrong("MPI_Testany index", comm, idx);
        break;
    case 4:
        MPI_Waitsome(1, req, &out, &idx, &st);
        if (out != 1 || idx != 0)
            wrong("MPI_Waitsome count", comm, out);
        break;
    case 5:
        while (!flag)
            MPI_Request_get_status(*req, &flag, &st);
        MPI_Wait(req, &st);
        break;
    case 6:
        while (out == 0)
            MPI_Testsome(1, req, &out, &idx, &st);
        if (out != 1 || idx != 0)
            wrong("MPI_Testsome count", comm, out);
        break;
    default:
        while (!flag)
            MPI_Testall(1, req, &flag, &st);
        break;
    }
    if (*req != MPI_REQUEST_NULL)
        wrong("request not freed at completion", comm, how);
}

/* Iallreduce of `count` values: int SUM/MAX/MIN/PROD, int64 BAND, uint8 BXOR, double
 * SUM (integer-valued: exact), float MIN; in place or not. */
enum { T_INT_SUM, T_INT_MAX, T_INT_MIN, T_INT_PROD, T_I64_BAND, T_U8_BXOR, T_DBL_SUM, T_FLT_MIN, N_CASES };

static void iallreduce_case(MPI_Comm comm, int c, int count, int inplace, int how, int seed)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    size_t esz = c == T_I64_BAND || c == T_DBL_SUM ? 8 : c == T_U8_BXOR ? 1 : 4;
    MPI_Datatype dt = c == T_I64_BAND ? MPI_INT64_T : c == T_U8_BXOR ? MPI_UINT8_T : c == T_DBL_SUM ? MPI_DOUBLE
                      : c == T_FLT_MIN ? MPI_FLOAT : MPI_INT;
    MPI_Op op = c == T_INT_MAX ? MPI_MAX : c == T_INT_MIN || c == T_FLT_MIN ? MPI_MIN : c == T_INT_PROD ? MPI_PROD
                : c == T_I64_BAND ? MPI_BAND : c == T_U8_BXOR ? MPI_BXOR : MPI_SUM;
    char *in = malloc(count * esz + 1), *out = malloc(count * esz + 1), *want = malloc(count * esz + 1);
    for (int r = 0; r < size; r++)
        for (int i = 0; i < count; i++) {
            uint64_t v = h(r, i, seed);
            char *dst = r == rank ? in : NULL;
            union {
                int32_t i32;
                int64_t i64;
                uint8_t u8;
                double d;
                float f;
            } x, w;
            switch (c) {
            case T_INT_PROD: x.i32 = (int32_t)(v % 5) - 2; break;
            case T_I64_BAND: x.i64 = (int64_t)(v | (v << 7)); break;
            case T_U8_BXOR: x.u8 = (uint8_t)v; break;
            case T_DBL_SUM: x.d = (double)(int)(v % 100001) - 50000.0; break;
            case T_FLT_MIN: x.f = (float)((int)(v % 20001) - 10000) / 8.0f; break;
            default: x.i32 = (int32_t)(v % 2000001) - 1000000; break;
            }
            if (dst)
                memcpy(dst + i * esz, &x, esz);
            if (r == 0) {
                memcpy(want + i * esz, &x, esz);
                continue;
            }
            memcpy(&w, want + i * esz, esz);
            switch (c) {
            case T_INT_SUM: w.i32 = (int32_t)((uint32_t)w.i32 + (uint32_t)x.i32); break;
            case T_INT_MAX: w.i32 = w.i32 > x.i32 ? w.i32 : x.i32; break;
            case T_INT_MIN: w.i32 = w.i32 < x.i32 ? w.i32 : x.i32; break;
            case T_INT_PROD: w.i32 = (int32_t)((uint32_t)w.i32 * (uint32_t)x.i32); break;
            case T_I64_BAND: w.i64 &= x.i64; break;
            case T_U8_BXOR: w.u8 ^= x.u8; break;
            case T_DBL_SUM: w.d += x.d; break;
            case T_FLT_MIN: w.f = w.f < x.f ? w.f : x.f; break;
            }
            memcpy(want + i * esz, &w, esz);
        }
    MPI_Request req;
    if (inplace) {
        memcpy(out, in, count * esz);
        MPI_Iallreduce(MPI_IN_PLACE, out, count, dt, op, comm, &req);
    } else {
        memset(out, 0x5a, count * esz);
        MPI_Iallreduce(in, out, count, dt, op, comm, &req);
    }
    complete(&req, how, comm);
    if (memcmp(out, want, count * esz) != 0)
        wrong("MPI_Iallreduce result", comm, c * 100000 + count);
    free(in);
    free(out);
    free(want);
    checks++;
}

/* Ibcast of `count` ints from `root` (contiguous), and of a strided vector type (packed
 * by smelt) every third case. */
static void ibcast_case(MPI_Comm comm, int root, int count, int how, int seed)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    int *buf = malloc(3 * (size_t)count * sizeof(int) + 4);
    MPI_Request req;
    int strided = how % 3 == 2;
    MPI_Datatype vec = MPI_DATATYPE_NULL;
    int n = strided ? 3 * count : count;
    for (int i = 0; i < n; i++)
        buf[i] = rank == root ? (int)h(root, i, seed) : -1;
    if (strided) {
        MPI_Type_vector(count, 1, 3, MPI_INT, &vec);
        MPI_Type_commit(&vec);
        MPI_Ibcast(buf, 1, vec, root, comm, &req);
    } else {
        MPI_Ibcast(buf, count, MPI_INT, root, comm, &req);
    }
    complete(&req, how, comm);
    for (int i = 0; i < n; i++) {
        int want = strided && i % 3 != 0 && rank != root ? -1 : (int)h(root, i, seed);
        if (buf[i] != want)
            wrong("MPI_Ibcast result", comm, i);
    }
    if (strided)
        MPI_Type_free(&vec);
    free(buf);
    checks++;
}

/* Every case of Iallreduce and Ibcast, with every way of completing. */
static void sweep(MPI_Comm comm, int seed)
{
    int size;
    MPI_Comm_size(comm, &size);
    static const int counts[] = {1, 2, 7, 100, 400, 1000, 2000};
    int how = 0;
    for (unsigned k = 0; k < sizeof counts / sizeof counts[0]; k++)
        for (int c = 0; c < N_CASES; c++) {
            iallreduce_case(comm, c, counts[k], (c + k) % 2, how++, seed + 10 * c + (int)k);
            if (c % 2 == 0)
                ibcast_case(comm, (c + (int)k) % size, counts[k], how++, seed + 7 * c + (int)k);
        }
    for (int i = 0; i < 8; i++) {
        MPI_Request req;
        MPI_Ibarrier(comm, &req);
        complete(&req, i, comm);
        checks++;
    }
}

/* Several outstanding on one communicator, completed in reverse order and mixed with
 * point-to-point requests in one MPI_Waitall; a blocking collective while one is
 * pending. */
static void queued(MPI_Comm comm, int seed)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int x = rank + seed, sum = -1, b[5], in = -1, out = rank * 1000 + seed;
    for (int i = 0; i < 5; i++)
        b[i] = rank == size - 1 ? seed + i : -7;
    MPI_Request r[5];
    MPI_Ibarrier(comm, &r[0]);
    MPI_Iallreduce(&x, &sum, 1, MPI_INT, MPI_SUM, comm, &r[1]);
    MPI_Ibcast(b, 5, MPI_INT, size - 1, comm, &r[2]);
    MPI_Irecv(&in, 1, MPI_INT, (rank + size - 1) % size, 77, comm, &r[3]);
    MPI_Isend(&out, 1, MPI_INT, (rank + 1) % size, 77, comm, &r[4]);
    MPI_Request rev[5] = {r[4], r[3], r[2], r[1], r[0]};
    MPI_Status st[5]; /* not MPI_STATUSES_IGNORE: MPICH's prototype makes gcc warn */
    MPI_Waitall(5, rev, st);
    int want_sum = size * seed + size * (size - 1) / 2;
    if (sum != want_sum)
        wrong("queued MPI_Iallreduce", comm, sum);
    for (int i = 0; i < 5; i++)
        if (b[i] != seed + i)
            wrong("queued MPI_Ibcast", comm, b[i]);
    if (in != ((rank + size - 1) % size) * 1000 + seed)
        wrong("point-to-point beside them", comm, in);
    for (int i = 0; i < 5; i++)
        if (rev[i] != MPI_REQUEST_NULL)
            wrong("MPI_Waitall left a request", comm, i);
    /* A blocking allreduce while an Iallreduce is pending: MPI orders them. */
    int y = rank, z = -1, w = 2 * rank, v = -1;
    MPI_Request q;
    MPI_Iallreduce(&y, &z, 1, MPI_INT, MPI_MAX, comm, &q);
    MPI_Allreduce(&w, &v, 1, MPI_INT, MPI_SUM, comm);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    if (z != size - 1 || v != size * (size - 1))
        wrong("blocking allreduce behind a pending one", comm, z * 1000 + v);
    checks += 3;
}

/* Overlap: an Iallreduce left pending while this rank computes (no MPI calls). */
static void overlapped(MPI_Comm comm, int seed)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    enum { N = 64 };
    long a[N], r[N];
    for (int i = 0; i < N; i++)
        a[i] = (long)(h(rank, i, seed) % 1000);
    MPI_Request req;
    MPI_Iallreduce(a, r, N, MPI_LONG, MPI_SUM, comm, &req);
    volatile uint64_t acc = 0;
    for (int i = 0; i < 200000 + 50000 * rank; i++)
        acc += mix((uint64_t)i);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (int i = 0; i < N; i++) {
        long want = 0;
        for (int k = 0; k < size; k++)
            want += (long)(h(k, i, seed) % 1000);
        if (r[i] != want)
            wrong("overlapped MPI_Iallreduce", comm, i);
    }
    checks++;
}

/* Rank 0 waits for every other rank's message, which each sends only after its own
 * MPI_Wait on the barrier: rank 0's waiting must move the barrier on. `how`: 0 MPI_Irecv
 * and MPI_Waitall, 1 blocking MPI_Recv, 2 MPI_Probe then MPI_Recv; 3 the other way
 * round: rank 0 sends each rank a message with a blocking MPI_Ssend before its wait on
 * the barrier, the others receive it after theirs. */
static void wait_on_peer(MPI_Comm comm, int how)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Request bar;
    /* Rank 0 starts first, so that the others' barrier needs its progress while it
     * waits on them. */
    if (rank != 0)
        usleep(20000);
    MPI_Ibarrier(comm, &bar);
    if (how == 3) {
        if (rank == 0) {
            for (int r = 1; r < size; r++)
                MPI_Ssend(&r, 1, MPI_INT, r, 92, comm);
            MPI_Wait(&bar, MPI_STATUS_IGNORE);
        } else {
            int v = -1;
            MPI_Wait(&bar, MPI_STATUS_IGNORE);
            MPI_Recv(&v, 1, MPI_INT, 0, 92, comm, MPI_STATUS_IGNORE);
            if (v != rank)
                wrong("message before the barrier", comm, v);
        }
        checks++;
        return;
    }
    if (rank == 0) {
        int *got = calloc(size, sizeof(int));
        MPI_Request *rr = malloc(size * sizeof(MPI_Request));
        if (how == 0) {
            for (int r = 1; r < size; r++)
                MPI_Irecv(&got[r], 1, MPI_INT, r, 91, comm, &rr[r - 1]);
            MPI_Status st[64];
            if (size - 1 <= 64)
                MPI_Waitall(size - 1, rr, st);
        } else {
            for (int k = 1; k < size; k++) {
                MPI_Status s;
                int from = k;
                if (how == 2) {
                    MPI_Probe(MPI_ANY_SOURCE, 91, comm, &s);
                    from = s.MPI_SOURCE;
                }
                MPI_Recv(&got[from], 1, MPI_INT, from, 91, comm, MPI_STATUS_IGNORE);
            }
        }
        MPI_Wait(&bar, MPI_STATUS_IGNORE);
        for (int r = 1; r < size; r++)
            if (got[r] != r)
                wrong("message after the barrier", comm, got[r]);
        free(got);
        free(rr);
    } else {
        MPI_Wait(&bar, MPI_STATUS_IGNORE);
        MPI_Send(&rank, 1, MPI_INT, 0, 91, comm);
    }
    checks++;
}

/* NBX (Hoefler, Siebert, Lumsdaine): each rank sends to a few others with synchronous
 * sends, receives whatever comes, and once its sends are matched enters a non-blocking
 * barrier; it keeps receiving until the barrier completes. Every message must arrive
 * exactly once. */
static void nbx(MPI_Comm comm, int seed)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    enum { MAX_TO = 3 };
    int to[MAX_TO], payload[MAX_TO], nto = 0;
    for (int k = 0; k < MAX_TO; k++) {
        int d = (int)(h(rank, k, seed) % (unsigned)size);
        if (h(rank, k + 10, seed) % 4 == 0)
            continue; /* some ranks send fewer */
        to[nto] = d;
        payload[nto] = rank * 100 + k;
        nto++;
    }
    /* How many messages this rank must receive (every rank computes every rank's sends). */
    int expect = 0;
    long expect_sum = 0;
    for (int r = 0; r < size; r++)
        for (int k = 0; k < MAX_TO; k++)
            if (h(r, k + 10, seed) % 4 != 0 && (int)(h(r, k, seed) % (unsigned)size) == rank) {
                expect++;
                expect_sum += r * 100 + k;
            }
    /* A tag per round: a rank that saw the barrier complete may send the next round's
     * messages while a peer still receives this round's. */
    int tag = 1000 + seed % 20000;
    MPI_Request sends[MAX_TO], bar = MPI_REQUEST_NULL;
    for (int k = 0; k < nto; k++)
        MPI_Issend(&payload[k], 1, MPI_INT, to[k], tag, comm, &sends[k]);
    int got = 0, barrier_on = 0, done = 0;
    long sum = 0;
    MPI_Status st[MAX_TO];
    while (!done) {
        int flag = 0;
        MPI_Status s;
        MPI_Iprobe(MPI_ANY_SOURCE, tag, comm, &flag, &s);
        if (flag) {
            int v;
            MPI_Recv(&v, 1, MPI_INT, s.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE);
            got++;
            sum += v;
        }
        if (barrier_on) {
            MPI_Test(&bar, &done, MPI_STATUS_IGNORE);
        } else {
            int all = 0;
            MPI_Testall(nto, sends, &all, st);
            if (all) {
                MPI_Ibarrier(comm, &bar);
                barrier_on = 1;
            }
        }
    }
    if (got != expect || sum != expect_sum)
        wrong("NBX messages received", comm, got * 1000 + expect);
    checks++;
}

static void check_comm(MPI_Comm comm, int seed)
{
    /* A blocking call first: it sets the communicator up where the default
     * SMELT_MPI_SETUP_AFTER left it to MPI so far (non-blocking calls never set up). */
    MPI_Barrier(comm);
    sweep(comm, seed);
    queued(comm, seed + 1);
    overlapped(comm, seed + 2);
    for (int how = 0; how < 4; how++)
        wait_on_peer(comm, how);
    for (int i = 0; i < 20; i++)
        nbx(comm, seed + 100 + i);
    /* Broadcasts from every root through blocking calls (each root's own tree made), then
     * non-blocking ones from every root again. */
    int size;
    MPI_Comm_size(comm, &size);
    for (int root = 0; root < size; root++) {
        int v = root;
        MPI_Bcast(&v, 1, MPI_INT, root, comm);
        ibcast_case(comm, root, 3, root, seed + 300 + root);
        ibcast_case(comm, root, 700, root + 1, seed + 400 + root);
    }
}

/* The threads of `threaded`: one polls, the other blocks, each on its own communicator. */
struct worker {
    MPI_Comm comm;
    int polls;
    long checks;
};

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    int rank, size;
    MPI_Comm_rank(w->comm, &rank);
    MPI_Comm_size(w->comm, &size);
    for (int i = 0; i < 300; i++) {
        int x = rank + i, y = -1;
        MPI_Request r;
        if (w->polls) {
            MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, w->comm, &r);
            int done = 0;
            while (!done)
                MPI_Test(&r, &done, MPI_STATUS_IGNORE);
            MPI_Ibarrier(w->comm, &r);
            done = 0;
            while (!done)
                MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        } else {
            MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, w->comm);
            int z = -1;
            MPI_Iallreduce(&x, &z, 1, MPI_INT, MPI_SUM, w->comm, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            if (z != y)
                wrong("threaded MPI_Iallreduce", w->comm, z);
            MPI_Barrier(w->comm);
        }
        if (y != size * i + size * (size - 1) / 2)
            wrong("threaded allreduce", w->comm, y);
        w->checks++;
    }
    return NULL;
}

static void threaded(void)
{
    struct worker w[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &w[t].comm);
        MPI_Barrier(w[t].comm); /* set up (a blocking call) before the threads start */
        w[t].polls = t == 0;
        w[t].checks = 0;
    }
    for (int t = 0; t < 2; t++)
        if (pthread_create(&th[t], NULL, worker_run, &w[t]) != 0) {
            fprintf(stderr, "nonblocking: pthread_create failed\n");
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    for (int t = 0; t < 2; t++) {
        pthread_join(th[t], NULL);
        checks += w[t].checks;
        MPI_Comm_free(&w[t].comm);
    }
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    int multiple = argc > 2 && strcmp(argv[2], "multiple") == 0;
    if (multiple) {
        int provided = 0;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        if (provided != MPI_THREAD_MULTIPLE) {
            fprintf(stderr, "nonblocking: this MPI does not provide MPI_THREAD_MULTIPLE\n");
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    int wsize;
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    for (int r = 0; r < rounds; r++) {
        check_comm(MPI_COMM_WORLD, 1000 * r);
        MPI_Comm dup, perm;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        check_comm(dup, 1000 * r + 500);
        /* Outstanding on two communicators at once, completed in the other order. */
        int a = world_rank, b = 2 * world_rank, sa = -1, sb = -1;
        MPI_Request two[2];
        MPI_Iallreduce(&a, &sa, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &two[0]);
        MPI_Iallreduce(&b, &sb, 1, MPI_INT, MPI_SUM, dup, &two[1]);
        MPI_Wait(&two[1], MPI_STATUS_IGNORE);
        MPI_Wait(&two[0], MPI_STATUS_IGNORE);
        if (sa != wsize * (wsize - 1) / 2 || sb != wsize * (wsize - 1))
            wrong("two communicators", MPI_COMM_WORLD, sa * 1000 + sb);
        /* (Freeing a communicator with a request pending is allowed by MPI, but Debian's
         * Open MPI 4.1 crashes in its own progress then: not tested.) */
        MPI_Comm_free(&dup);
        MPI_Comm_split(MPI_COMM_WORLD, 0, (world_rank % 2) * wsize + world_rank, &perm);
        check_comm(perm, 1000 * r + 700);
        MPI_Comm_free(&perm);
        checks += 2;
    }
    if (multiple)
        threaded();
    long total = 0;
    MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (world_rank == 0)
        printf("nonblocking: OK %ld\n", total);
    MPI_Finalize();
    return 0;
}
