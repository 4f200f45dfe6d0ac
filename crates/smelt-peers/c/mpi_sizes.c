/* mpi_sizes.c - latency of MPI_Bcast, MPI_Reduce, MPI_Allreduce and MPI_Barrier over
 * message sizes, as an unchanged MPI program sees it (whatever MPI library, component
 * or interposer runs underneath). Launched by `smelt bench mpi` with
 *   mpirun ... -np N mpi_sizes CPUS N BATCH_US RUNS SIZES OPS
 * SIZES: comma-separated message sizes in bytes (multiples of 8 for the reductions);
 * OPS: comma-separated subset of bcast,reduce,allreduce,barrier.
 * Buffers: bytes (MPI_BYTE) for broadcast, doubles summed (MPI_DOUBLE, MPI_SUM) for the
 * reductions, root 0. Before timing a size, each operation's result is checked
 * against what plain C arithmetic gives (the values are small integers, so every
 * summation order is exact); a wrong result aborts the job with a message.
 * Rank 0 prints RESULT lines (see peer.h) named <op>_<bytes>. */
#include <mpi.h>
#include "peer.h"

static int rank, size;
static unsigned char *bytes;
static double *in, *out;

enum { BCAST, REDUCE, ALLREDUCE, BARRIER };
static const char *names[] = {"bcast", "reduce", "allreduce", "barrier"};

typedef struct {
    int op;
    int n; /* bytes */
} job;

static void one(const void *arg) {
    const job *j = arg;
    int count = j->n / 8 > 0 ? j->n / 8 : 1;
    switch (j->op) {
    case BCAST: MPI_Bcast(bytes, j->n, MPI_BYTE, 0, MPI_COMM_WORLD); break;
    case REDUCE: MPI_Reduce(in, out, count, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD); break;
    case ALLREDUCE: MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
    default: MPI_Barrier(MPI_COMM_WORLD);
    }
}

static void check(const job *j) {
    int count = j->n / 8 > 0 ? j->n / 8 : 1;
    int bad = -1;
    if (j->op == BCAST) {
        for (int i = 0; i < j->n; i++) bytes[i] = rank == 0 ? (unsigned char)(i * 7 + 3) : 0;
        MPI_Bcast(bytes, j->n, MPI_BYTE, 0, MPI_COMM_WORLD);
        for (int i = 0; i < j->n && bad < 0; i++)
            if (bytes[i] != (unsigned char)(i * 7 + 3)) bad = i;
    } else if (j->op == REDUCE || j->op == ALLREDUCE) {
        for (int i = 0; i < count; i++) {
            in[i] = (double)(rank + i % 5);
            out[i] = -1;
        }
        if (j->op == REDUCE)
            MPI_Reduce(in, out, count, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        else
            MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (j->op == ALLREDUCE || rank == 0)
            for (int i = 0; i < count && bad < 0; i++) {
                double want = (double)size * (size - 1) / 2 + (double)size * (i % 5);
                if (out[i] != want) bad = i;
            }
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (bad >= 0) {
        fprintf(stderr, "mpi_sizes: rank %d: wrong result of %s of %d bytes at element %d\n",
                rank, names[j->op], j->n, bad);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

static uint64_t batch(void *arg, uint64_t n) { return peer_mpi_batch(one, arg, n); }

static int parse_list(const char *s, int *v, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 0 || x > (1 << 26)) return -1;
        v[n++] = (int)x;
        if (*end == ',') end++;
        else if (*end) return -1;
        s = end;
    }
    return n;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    peer_cfg cfg = {0};
    if (argc < 7 || peer_parse(argc, argv, &cfg) != 0) {
        if (rank == 0) fprintf(stderr, "usage: %s CPUS THREADS BATCH_US RUNS SIZES OPS\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int sizes[64];
    int nsizes = parse_list(argv[5], sizes, 64);
    if (nsizes <= 0) {
        if (rank == 0) fprintf(stderr, "bad size list '%s'\n", argv[5]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int ops[4], nops = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", argv[6]);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < 4 && strcmp(t, names[k]) != 0) k++;
        if (k == 4 || nops == 4) {
            if (rank == 0) fprintf(stderr, "unknown operation '%s'\n", t);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        ops[nops++] = k;
    }
    int maxn = 8;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > maxn) maxn = sizes[i];
    bytes = calloc((size_t)maxn, 1);
    in = calloc((size_t)maxn / 8 + 1, sizeof(double));
    out = calloc((size_t)maxn / 8 + 1, sizeof(double));
    if (!bytes || !in || !out) MPI_Abort(MPI_COMM_WORLD, 2);
    cfg.threads = size;
    if (size > cfg.ncpus) peer_spin_limit = 8;
    peer_pin(&cfg, rank);
    for (int o = 0; o < nops; o++) {
        for (int s = 0; s < nsizes; s++) {
            job j = {ops[o], sizes[s]};
            if (j.op == BARRIER && s > 0) break; /* a barrier has no size */
            check(&j);
            double v[MAX_RUNS];
            peer_measure(&cfg, batch, &j, v);
            if (rank == 0) {
                char name[64];
                snprintf(name, sizeof name, "%s_%d", names[j.op], j.op == BARRIER ? 0 : j.n);
                peer_report(name, size, v, cfg.runs);
            }
        }
    }
    free(bytes);
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
