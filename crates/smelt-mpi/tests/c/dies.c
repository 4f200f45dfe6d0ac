/* A rank that dies mid-loop must end the job, not hang it.
 * Usage: dies kill|abort|late — the last rank raises SIGKILL, calls MPI_Abort, or
 * (late) sleeps 60 s, at iteration 2000 of a loop of MPI_Allreduce and MPI_Bcast
 * (rotating roots) while the others are inside those collectives. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *how = argc > 1 ? argv[1] : "kill";
    int kill = strcmp(how, "kill") == 0, late = strcmp(how, "late") == 0;
    for (long i = 0; i < 100000000; i++) {
        int x = rank, y = 0;
        MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Bcast(&y, 1, MPI_INT, (int)(i % size), MPI_COMM_WORLD);
        if (i == 2000 && rank == size - 1) {
            fprintf(stderr, "dies: rank %d %s\n", rank,
                    kill ? "raises SIGKILL" : late ? "sleeps 60 s" : "calls MPI_Abort");
            if (kill)
                raise(SIGKILL);
            else if (late)
                sleep(60);
            else
                MPI_Abort(MPI_COMM_WORLD, 3);
        }
    }
    MPI_Finalize();
    return 0;
}
