/* Collectives from two threads under MPI_THREAD_MULTIPLE (mpi4py's default level).
 *
 *   threads          two threads per rank, each on its own communicator (a dup of
 *                    MPI_COMM_WORLD each), at the same time: MPI_Bcast (rotating root),
 *                    MPI_Allreduce (one int and 40 doubles), MPI_Reduce (rotating root)
 *                    and MPI_Barrier, ITERS rounds each, every result checked against
 *                    plain arithmetic.
 *   threads same     two threads of rank 0 call collectives on ONE communicator at the
 *                    same time (erroneous in MPI, but programs do it): thread A sits in
 *                    an MPI_Barrier that cannot complete before thread B's
 *                    MPI_Allreduce (a user-defined operation, so MPI runs it on every
 *                    rank) has, because the other ranks call that allreduce first and
 *                    the barrier after. The interposer must let B's call through to MPI
 *                    (not use the state A holds) and the job must finish.
 *
 * Prints "threads: OK" (rank 0). */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ITERS 300

static int rank, size;

static void fail(int t, const char *what, double got, double want)
{
    fprintf(stderr, "threads: rank %d thread %d: %s: got %g, want %g\n", rank, t, what, got, want);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

struct work {
    int t;
    MPI_Comm comm;
};

static void *run(void *arg)
{
    struct work *w = arg;
    MPI_Comm c = w->comm;
    int t = w->t;
    for (int i = 0; i < ITERS; i++) {
        int root = (i + t) % size;
        /* Broadcast: the root's value. */
        int v = rank == root ? 1000 * t + i : -1;
        MPI_Bcast(&v, 1, MPI_INT, root, c);
        if (v != 1000 * t + i)
            fail(t, "bcast", v, 1000 * t + i);
        /* Allreduce of one int. */
        int in = rank + i + t, out = -1;
        MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, c);
        int want = size * (size - 1) / 2 + size * (i + t);
        if (out != want)
            fail(t, "allreduce", out, want);
        /* Allreduce of 40 doubles (a byte message, not a word). */
        double d[40], dsum[40];
        for (int k = 0; k < 40; k++)
            d[k] = rank * 0.5 + k + t;
        MPI_Allreduce(d, dsum, 40, MPI_DOUBLE, MPI_SUM, c);
        for (int k = 0; k < 40; k++) {
            double wd = 0.5 * size * (size - 1) / 2 + size * (double)(k + t);
            if (dsum[k] != wd)
                fail(t, "allreduce of doubles", dsum[k], wd);
        }
        /* Reduce to a rotating root. */
        long r = rank * 3 + t, rs = -1;
        MPI_Reduce(&r, &rs, 1, MPI_LONG, MPI_MAX, root, c);
        if (rank == root && rs != (size - 1) * 3 + t)
            fail(t, "reduce", rs, (size - 1) * 3 + t);
        MPI_Barrier(c);
    }
    return NULL;
}

static void two_communicators(void)
{
    MPI_Comm c[2];
    MPI_Comm_dup(MPI_COMM_WORLD, &c[0]);
    MPI_Comm_dup(MPI_COMM_WORLD, &c[1]);
    pthread_t th[2];
    struct work w[2] = {{0, c[0]}, {1, c[1]}};
    for (int t = 0; t < 2; t++)
        if (pthread_create(&th[t], NULL, run, &w[t]) != 0) {
            fprintf(stderr, "threads: pthread_create failed\n");
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    MPI_Comm_free(&c[0]);
    MPI_Comm_free(&c[1]);
}

/* A user-defined sum: never taken by smelt, so MPI runs it on every rank. */
static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((int *)in)[i];
}

static MPI_Comm shared;
static MPI_Op op;
static volatile int a_started;

static void *barrier_thread(void *arg)
{
    (void)arg;
    a_started = 1;
    MPI_Barrier(shared); /* held inside until the other ranks reach their barrier */
    return NULL;
}

static void same_communicator(void)
{
    MPI_Comm_dup(MPI_COMM_WORLD, &shared);
    MPI_Op_create(user_sum, 1, &op);
    /* Past any set-up threshold: the communicator runs on smelt. */
    for (int i = 0; i < 20; i++)
        MPI_Barrier(shared);
    /* Three times: a loaded machine may keep thread A from its barrier for the whole
     * wait once (the calls then simply run one after the other); the test needs the
     * overlap once. */
    for (int round = 0; round < 3; round++) {
        int in = rank + 1 + round, out = -1;
        if (rank == 0) {
            pthread_t a;
            a_started = 0;
            if (pthread_create(&a, NULL, barrier_thread, NULL) != 0) {
                fprintf(stderr, "threads: pthread_create failed\n");
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
            while (!a_started)
                usleep(1000);
            usleep(200 * 1000); /* thread A is inside its barrier by now */
            MPI_Allreduce(&in, &out, 1, MPI_INT, op, shared);
            pthread_join(a, NULL);
        } else {
            MPI_Allreduce(&in, &out, 1, MPI_INT, op, shared);
            MPI_Barrier(shared);
        }
        int want = size * (size + 1) / 2 + size * round;
        if (out != want)
            fail(0, "allreduce while another thread is in a barrier", out, want);
    }
    for (int i = 0; i < 20; i++)
        MPI_Barrier(shared);
    MPI_Op_free(&op);
    MPI_Comm_free(&shared);
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided != MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "threads: this MPI does not provide MPI_THREAD_MULTIPLE\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1 && strcmp(argv[1], "same") == 0)
        same_communicator();
    else
        two_communicators();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("threads: OK\n");
    MPI_Finalize();
    return 0;
}
