/* mpi.c - MPI_Barrier, MPI_Bcast of 1 byte and MPI_Reduce of 1 int (root 0), the
 * collectives an HPC user would reach for. Launched by the harness with
 *   mpirun --bind-to none ... -np N mpi CPUS N BATCH_US RUNS
 * Rank i pins itself to CPUS[i % ncpus] (when N <= ncpus). Timing: a batch is n
 * back-to-back operations; its time is the maximum over ranks of the loop time
 * (rooted operations may pipeline across iterations, as they do in applications).
 * Rank 0 prints the RESULT lines (see peer.h). */
#include <mpi.h>
#include "peer.h"

static int rank, size;

static void one(const void *arg) {
    static char byte;
    static int in = 1, out;
    int kind = *(const int *)arg;
    if (kind == 0)
        MPI_Barrier(MPI_COMM_WORLD);
    else if (kind == 1)
        MPI_Bcast(&byte, 1, MPI_CHAR, 0, MPI_COMM_WORLD);
    else
        MPI_Reduce(&in, &out, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
}

static uint64_t batch_of(void *kind, uint64_t n) { return peer_mpi_batch(one, kind, n); }

static void run(const peer_cfg *cfg, int kind, const char *name) {
    double v[MAX_RUNS];
    peer_measure(cfg, batch_of, &kind, v);
    if (rank == 0) peer_report(name, size, v, cfg->runs);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    peer_cfg cfg;
    if (peer_parse(argc, argv, &cfg) != 0) MPI_Abort(MPI_COMM_WORLD, 2);
    cfg.threads = size;
    if (size > cfg.ncpus) peer_spin_limit = 8;
    peer_pin(&cfg, rank);
    run(&cfg, 0, "mpi_barrier");
    run(&cfg, 1, "mpi_bcast_1B");
    run(&cfg, 2, "mpi_reduce_int");
    MPI_Finalize();
    return 0;
}
