/* Communicator churn, as libraries do it (PETSc, mpi4py): MPI_Comm_dup, a few
 * collectives, MPI_Comm_free, over and over.
 *
 *   comm_churn [ITERS [CALLS]]
 *
 * Each iteration dups MPI_COMM_WORLD, runs CALLS (default 1) MPI_Allreduce of one int
 * (MPI_SUM) on the duplicate, each checked against plain arithmetic, then frees it.
 * Three phases, each of ITERS (default 200) iterations: CALLS allreduces per
 * duplicate; then 12 (past smelt's lazy set-up threshold, so every duplicate is set
 * up and released); then a long-lived duplicate used 4 * ITERS times. The open
 * descriptors (/proc/self/fd), the resident memory (within 8 MiB) and the entries of
 * smelt's shared-memory directory
 * ($SMELT_SHM_DIR, a private one: /dev/shm itself is shared with every other
 * program; unchecked without it) must be the same after each phase as after its
 * first iteration (nothing leaks per communicator).
 *
 * Rank 0 prints
 *   comm_churn: loop us_per_iter=X calls=CALLS iters=ITERS
 *   comm_churn: setup us_per_iter=Y calls=12
 *   comm_churn: reuse us_per_call=Z
 *   comm_churn: OK
 * (the first is the figure of bench/comm_churn.sh: dup + CALLS allreduce + free). */
#include <dirent.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

/* Resident memory of this process, in KiB (/proc/self/statm). */
static long resident_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return resident * 4;
}

static int count_shm(void)
{
    const char *d = getenv("SMELT_SHM_DIR");
    return d && *d ? count_dir(d) : 0;
}

static void fail(const char *what, long got, long want)
{
    fprintf(stderr, "comm_churn: rank %d: %s: got %ld, want %ld\n", rank, what, got, want);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* One allreduce of one int on `comm`, checked: sum over ranks of (rank + salt). */
static void allreduce_checked(MPI_Comm comm, int salt)
{
    int in = rank + salt, out = -1;
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, comm);
    long want = (long)size * (size - 1) / 2 + (long)size * salt;
    if (out != want)
        fail("allreduce", out, want);
}

/* ITERS iterations of dup + `calls` allreduces + free; seconds per iteration (max
 * over ranks), descriptors and shared-memory entries checked flat. */
static double churn(int iters, int calls, const char *phase)
{
    int fds0 = 0, shm0 = 0;
    long rss0 = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        for (int c = 0; c < calls; c++)
            allreduce_checked(dup, i + c);
        MPI_Comm_free(&dup);
        if (i == 0) {
            fds0 = count_dir("/proc/self/fd");
            shm0 = count_shm();
            rss0 = resident_kib();
        }
    }
    double t = (MPI_Wtime() - t0) / iters, tmax = 0;
    int fds = count_dir("/proc/self/fd"), shm = count_shm();
    if (fds != fds0) {
        fprintf(stderr, "comm_churn: %s: ", phase);
        fail("open descriptors after the loop (vs. after its first iteration)", fds, fds0);
    }
    if (shm != shm0) {
        fprintf(stderr, "comm_churn: %s: ", phase);
        fail("entries in the shared-memory directory after the loop", shm, shm0);
    }
    /* Memory: what a leaked segment mapping or communicator per iteration would add
     * (tens of KiB each) is far past 8 MiB over the loop; the allocator's own growth
     * is not. */
    long rss = resident_kib();
    if (getenv("COMM_CHURN_RSS"))
        fprintf(stderr, "comm_churn: %s: resident %ld -> %ld KiB\n", phase, rss0, rss);
    if (rss - rss0 > 8 * 1024) {
        fprintf(stderr, "comm_churn: %s: ", phase);
        fail("resident KiB after the loop (vs. after its first iteration)", rss, rss0);
    }
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return tmax;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters = argc > 1 ? atoi(argv[1]) : 200;
    int calls = argc > 2 ? atoi(argv[2]) : 1;
    if (iters < 2 || calls < 0) {
        if (rank == 0)
            fprintf(stderr, "usage: comm_churn [ITERS>=2 [CALLS>=0]]\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Warm up MPI's own paths (first dup, first allreduce) outside the timings. */
    churn(2, calls, "warm-up");
    double loop = churn(iters, calls, "loop");
    double setup = churn(iters / 4 > 1 ? iters / 4 : 2, 12, "set-up");
    /* A communicator used many times: as fast as a long-lived one. */
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int reuse = 4 * iters;
    for (int i = 0; i < 16; i++)
        allreduce_checked(dup, i);
    MPI_Barrier(dup);
    double t0 = MPI_Wtime();
    for (int i = 0; i < reuse; i++)
        allreduce_checked(dup, i);
    double per = (MPI_Wtime() - t0) / reuse, permax = 0;
    MPI_Comm_free(&dup);
    MPI_Allreduce(&per, &permax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("comm_churn: loop us_per_iter=%.2f calls=%d iters=%d\n", loop * 1e6, calls, iters);
        printf("comm_churn: setup us_per_iter=%.2f calls=12\n", setup * 1e6);
        printf("comm_churn: reuse us_per_call=%.3f\n", permax * 1e6);
        printf("comm_churn: OK\n");
    }
    MPI_Finalize();
    return 0;
}
