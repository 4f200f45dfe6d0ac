/* Latency of the non-blocking collectives, each followed by MPI_Wait, back to back on
 * MPI_COMM_WORLD (after an MPI_Barrier, which sets smelt's communicator up): ibarrier,
 * iallreduce of one and of 8 doubles, ibcast of one double with the root rotating and
 * from root 0; and the blocking allreduce and bcast of one double for reference.
 *
 *   mpicc -O2 -o nbl crates/smelt-mpi/bench/nonblocking_latency.c
 *   mpirun -np 2 ./nbl ompi 20000
 *   mpirun -np 2 -x LD_PRELOAD=$PWD/target/release/libsmelt_mpi.so ./nbl smelt 20000
 *
 * Prints one line per operation: label op microseconds-per-call (mean over ranks). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *label = argc > 1 ? argv[1] : "x";
    int iters = argc > 2 ? atoi(argv[2]) : 20000;
    double in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
    static const char *names[] = {"ibarrier",  "iallreduce8", "ibcast8", "iallreduce64",
                                  "allreduce8", "ibcast8root0", "bcast8"};
    enum { NOPS = sizeof names / sizeof names[0] };
    for (int op = 0; op < NOPS; op++) {
        for (int pass = 0; pass < 2; pass++) { /* a tenth of the calls as warm-up */
            int n = pass ? iters : iters / 10;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < n; i++) {
                MPI_Request r = MPI_REQUEST_NULL;
                switch (op) {
                case 0: MPI_Ibarrier(MPI_COMM_WORLD, &r); break;
                case 1: MPI_Iallreduce(in, out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r); break;
                case 2: MPI_Ibcast(in, 1, MPI_DOUBLE, i % size, MPI_COMM_WORLD, &r); break;
                case 3: MPI_Iallreduce(in, out, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r); break;
                case 4: MPI_Allreduce(in, out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); break;
                case 5: MPI_Ibcast(in, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD, &r); break;
                default: MPI_Bcast(in, 1, MPI_DOUBLE, i % size, MPI_COMM_WORLD); break;
                }
                MPI_Wait(&r, MPI_STATUS_IGNORE);
            }
            double t = (MPI_Wtime() - t0) / n * 1e6, sum = 0;
            MPI_Reduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            if (pass && rank == 0)
                printf("%s %s %.3f\n", label, names[op], sum / size);
        }
    }
    MPI_Finalize();
    return 0;
}
