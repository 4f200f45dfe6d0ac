/* Latency of MPI_Bcast, MPI_Reduce, MPI_Allreduce (MPI_DOUBLE, MPI_SUM), MPI_Gather and
 * MPI_Scatter (bytes per rank) from 8 bytes to a maximum, and of MPI_Barrier. Two ways (see timed()): "osu", as the OSU
 * micro-benchmarks do (root 0, each call after an MPI_Barrier, the call alone timed),
 * and "loop" (calls back to back, rotating roots). The figure is the mean per call,
 * averaged over ranks (the slowest rank's mean beside it). Whatever implements the calls (Open MPI's components, or
 * libsmelt_mpi.so preloaded) is measured the same way.
 *
 * Usage: mpirun -np N latency [max_bytes [label [osu|loop]]]
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
    double *buf = malloc(max > 8 ? max : 8), *out = malloc((max > 8 ? max : 8) * (size_t)size);
    for (long i = 0; i < max / 8; i++)
        buf[i] = rank + i * 0.5;
    static const char *names[6] = {"bcast", "reduce", "allreduce", "gather", "scatter", "barrier"};
    for (int i = 0; i < (max / 8) * size; i++)
        out[i] = i;
    for (int op = 0; op < 6; op++) {
        for (long bytes = 8; bytes <= max; bytes *= 2) {
            int count = (int)(bytes / 8);
            int iters = bytes <= 1024 ? 2000 : bytes <= 16384 ? 1000 : 400;
            timed(op, buf, out, count, iters / 10, loop); /* warm-up (and smelt's set-up) */
            double mine = timed(op, buf, out, count, iters, loop), sum = 0, worst = 0;
            /* PMPI: these reductions are not part of what is measured. */
            PMPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            PMPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rank == 0)
                printf("%s %s %ld %.3f %.3f %d\n", label, names[op], op == 5 ? 0 : bytes, sum / size * 1e6,
                       worst * 1e6, iters);
            fflush(stdout);
            if (op == 5)
                break;
        }
    }
    free(buf);
    free(out);
    MPI_Finalize();
    return 0;
}
