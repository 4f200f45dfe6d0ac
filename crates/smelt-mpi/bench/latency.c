/* Latency of MPI_Bcast, MPI_Reduce, MPI_Allreduce (MPI_DOUBLE, MPI_SUM), MPI_Gather,
 * MPI_Scatter, MPI_Allgather, MPI_Scan, MPI_Reduce_scatter_block, MPI_Alltoall and
 * MPI_Reduce_scatter ("rs": every rank's part as long) (bytes per rank, per block for alltoall) from 8 bytes to a maximum, and of MPI_Barrier. Two ways (see timed()): "osu", as the OSU
 * micro-benchmarks do (root 0, each call after an MPI_Barrier, the call alone timed),
 * and "loop" (calls back to back, rotating roots). The figure is the mean per call,
 * averaged over ranks (the slowest rank's mean beside it). Whatever implements the calls (Open MPI's components, or
 * libsmelt_mpi.so preloaded) is measured the same way.
 *
 * Usage: mpirun -np N latency [max_bytes [label [osu|loop [ops]]]]
 * ops: names separated by commas (default: all; "new": allgather,scan,rsb,alltoall,rs).
 * Prints one line per (operation, size): label op bytes avg_us max_us iterations. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* osu: every call after a barrier, the call alone timed. loop: calls back to back,
 * the root of a broadcast or reduction rotating (i % size) so that a call cannot start
 * before the previous one reached it; per call: loop time / iterations. */
static double timed(int op, double *buf, double *out, int count, int iters, int loop)
{
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double total = 0, t0 = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (loop)
        t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        int root = loop ? i % size : 0;
        if (!loop) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        switch (op) {
        case 0: MPI_Bcast(buf, count, MPI_DOUBLE, root, MPI_COMM_WORLD); break;
        case 1: MPI_Reduce(buf, out, count, MPI_DOUBLE, MPI_SUM, root, MPI_COMM_WORLD); break;
        case 2: MPI_Allreduce(buf, out, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
        case 3: MPI_Gather(buf, count, MPI_DOUBLE, out, count, MPI_DOUBLE, root, MPI_COMM_WORLD); break;
        case 4: MPI_Scatter(out, count, MPI_DOUBLE, buf, count, MPI_DOUBLE, root, MPI_COMM_WORLD); break;
        case 5: MPI_Allgather(buf, count, MPI_DOUBLE, out, count, MPI_DOUBLE, MPI_COMM_WORLD); break;
        case 6: MPI_Scan(buf, out, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
        case 7: MPI_Reduce_scatter_block(buf, out, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
        case 8: MPI_Alltoall(buf, count, MPI_DOUBLE, out, count, MPI_DOUBLE, MPI_COMM_WORLD); break;
        case 9: {
            int counts[1024];
            for (int k = 0; k < size && k < 1024; k++)
                counts[k] = count;
            MPI_Reduce_scatter(buf, out, counts, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            break;
        }
        default: MPI_Barrier(MPI_COMM_WORLD); break;
        }
        if (!loop)
            total += MPI_Wtime() - t0;
    }
    if (loop)
        total = MPI_Wtime() - t0;
    return total / iters;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long max = argc > 1 ? atol(argv[1]) : 65536;
    const char *label = argc > 2 ? argv[2] : "mpi";
    int loop = argc > 3 && strcmp(argv[3], "loop") == 0;
    const char *ops = argc > 4 ? argv[4] : "all";
    if (strcmp(ops, "new") == 0)
        ops = "allgather,scan,rsb,alltoall,rs";
    /* Room for a block per rank on both sides (alltoall, reduce_scatter_block). */
    size_t room = (size_t)(max > 8 ? max : 8) * (size_t)size;
    double *buf = malloc(room), *out = malloc(room);
    for (size_t i = 0; i < room / 8; i++)
        buf[i] = rank + (double)i * 0.5;
    enum { NOPS = 11, BARRIER = NOPS - 1 };
    static const char *names[NOPS] = {"bcast", "reduce", "allreduce", "gather",   "scatter", "allgather",
                                      "scan",  "rsb",    "alltoall",  "rs", "barrier"};
    for (size_t i = 0; i < room / 8; i++)
        out[i] = (double)i;
    for (int op = 0; op < NOPS; op++) {
        if (strcmp(ops, "all") != 0) {
            /* `op`'s name as one of the comma-separated names */
            size_t n = strlen(names[op]);
            const char *at = ops;
            int found = 0;
            while ((at = strstr(at, names[op])) != NULL) {
                if ((at == ops || at[-1] == ',') && (at[n] == ',' || at[n] == 0))
                    found = 1;
                at += n;
            }
            if (!found)
                continue;
        }
        for (long bytes = 8; bytes <= max; bytes *= 2) {
            int count = (int)(bytes / 8);
            int iters = bytes <= 1024 ? 2000 : bytes <= 16384 ? 1000 : 400;
            timed(op, buf, out, count, iters / 10, loop); /* warm-up (and smelt's set-up) */
            double mine = timed(op, buf, out, count, iters, loop), sum = 0, worst = 0;
            /* PMPI: these reductions are not part of what is measured. */
            PMPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            PMPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rank == 0)
                printf("%s %s %ld %.3f %.3f %d\n", label, names[op], op == BARRIER ? 0 : bytes, sum / size * 1e6,
                       worst * 1e6, iters);
            fflush(stdout);
            if (op == BARRIER)
                break;
        }
    }
    free(buf);
    free(out);
    MPI_Finalize();
    return 0;
}
