/* Back-to-back MPI_Bcast / MPI_Reduce / MPI_Allreduce (COUNT doubles, default 1 (8
 * bytes), MPI_SUM), MPI_Allgather (COUNT doubles a rank) or MPI_Barrier on MPI_COMM_WORLD, root 0: `back_to_back N OP [COUNT]`
 * prints rank 0's mean time per call. Used by call_cost.sh (instructions per call under callgrind, and time with
 * and without the interposer, alternated). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    const char *op = argc > 2 ? argv[2] : "bcast";
    int k = !strcmp(op, "bcast")       ? 0
            : !strcmp(op, "reduce")    ? 1
            : !strcmp(op, "allreduce") ? 2
            : !strcmp(op, "allgather") ? 4
                                       : 3;
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int count = argc > 3 ? atoi(argv[3]) : 1;
    if (count < 1 || count > 1 << 20) count = 1;
    double *x = calloc((size_t)count, sizeof *x), *y = calloc((size_t)count * (size_t)size, sizeof *y);
    for (int i = 0; i < count; i++) x[i] = rank + 1;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) {
        if (k == 0) MPI_Bcast(x, count, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        else if (k == 1) MPI_Reduce(x, y, count, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        else if (k == 2) MPI_Allreduce(x, y, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else if (k == 4) MPI_Allgather(x, count, MPI_DOUBLE, y, count, MPI_DOUBLE, MPI_COMM_WORLD);
        else MPI_Barrier(MPI_COMM_WORLD);
    }
    double t = MPI_Wtime() - t0;
    if (rank == 0) printf("%s %.1f ns\n", op, t / n * 1e9);
    free(x);
    free(y);
    MPI_Finalize();
    return 0;
}
