/* peer.h - shared helpers of smelt's peer benchmarks (the C files in crates/smelt-peers/c).
 *
 * Every program takes the same arguments:
 *     prog CPUS THREADS BATCH_US RUNS
 *   CPUS      comma-separated OS CPU ids; thread/rank i runs on CPUS[i % ncpus]
 *             (pinned only when THREADS <= ncpus, otherwise the scheduler places them)
 *   THREADS   number of threads (or MPI ranks; then taken from the communicator)
 *   BATCH_US  a batch of back-to-back operations lasts at least this long
 *   RUNS      number of timed batches
 * and prints one line per measurement:
 *     RESULT <name> <threads> <median_ns> <p10_ns> <p90_ns>
 * where the values are nanoseconds per operation over the RUNS batches.
 * Warm-up = calibration: the batch size doubles until one batch lasts BATCH_US.
 */
#ifndef SMELT_PEER_H
#define SMELT_PEER_H
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LINE 64
#define MAX_CPUS 1024
#define MAX_RUNS 256

typedef struct {
    int cpus[MAX_CPUS];
    int ncpus;
    int threads;
    uint64_t batch_ns;
    int runs;
} peer_cfg;

static inline uint64_t peer_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Spins before a waiter yields its CPU: long when every thread has its own CPU,
 * short when threads outnumber CPUs (set by peer_parse). smelt's runner passes its own
 * wait policy's figure in SMELT_PEER_SPINS (WaitPolicy::DEDICATED.spin_polls = 2048,
 * OVERSUBSCRIBED.spin_polls = 4), so that the C peers wait exactly as smelt's
 * collectives and the Rust harness do; without it, 2048 and 4. */
static unsigned peer_spin_limit = 2048;

/* Busy-wait hint; after peer_spin_limit fruitless spins, give the CPU away. */
static inline void peer_relax(unsigned *spins) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
    if (++*spins > peer_spin_limit) {
        *spins = 0;
        sched_yield();
    }
}

static int peer_parse(int argc, char **argv, peer_cfg *c) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s CPUS THREADS BATCH_US RUNS\n", argv[0]);
        return -1;
    }
    c->ncpus = 0;
    const char *p = argv[1];
    while (*p && c->ncpus < MAX_CPUS) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0) {
            fprintf(stderr, "bad CPU list '%s'\n", argv[1]);
            return -1;
        }
        c->cpus[c->ncpus++] = (int)v;
        p = (*end == ',') ? end + 1 : end;
        if (*end && *end != ',') {
            fprintf(stderr, "bad CPU list '%s'\n", argv[1]);
            return -1;
        }
    }
    c->threads = atoi(argv[2]);
    c->batch_ns = (uint64_t)atol(argv[3]) * 1000ull;
    c->runs = atoi(argv[4]);
    if (c->ncpus < 1 || c->threads < 1 || c->batch_ns < 1000 || c->runs < 1) {
        fprintf(stderr, "bad arguments\n");
        return -1;
    }
    if (c->runs > MAX_RUNS) c->runs = MAX_RUNS;
    if (c->threads > c->ncpus) peer_spin_limit = 4;
    const char *spins = getenv("SMELT_PEER_SPINS");
    if (spins && *spins) {
        char *end;
        unsigned long v = strtoul(spins, &end, 10);
        if (*end || v > 1000000000ul) {
            fprintf(stderr, "bad SMELT_PEER_SPINS '%s'\n", spins);
            return -1;
        }
        peer_spin_limit = (unsigned)v;
    }
    return 0;
}

/* Pins the calling thread to CPUS[idx % ncpus] when there are no more threads than CPUs. */
static void peer_pin(const peer_cfg *c, int idx) {
    if (c->threads > c->ncpus) return;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(c->cpus[idx % c->ncpus], &s);
    if (sched_setaffinity(0, sizeof s, &s) != 0) perror("sched_setaffinity");
}

static int peer_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v and prints the RESULT line. */
static void peer_report(const char *name, int threads, double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, peer_cmp);
    int p10 = (n - 1) / 10, p90 = (n - 1) - (n - 1) / 10;
    double med = (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    printf("RESULT %s %d %.2f %.2f %.2f\n", name, threads, med, v[p10], v[p90]);
    fflush(stdout);
}

/* Next batch size while calibrating: doubles until a batch of `n` took `batch_ns`.
 * Callers pass the faster of two batches of the same size, so that one preemption
 * does not end the calibration with a tiny batch. */
static uint64_t peer_next_n(uint64_t n, uint64_t took, uint64_t batch_ns, int *done) {
    if (took >= batch_ns || n >= (1ull << 40)) {
        *done = 1;
        return n;
    }
    *done = 0;
    return n * 2;
}

static uint64_t peer_min(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Calibrates the batch size with `batch(ctx, n)` (elapsed ns of n ops; the faster of
 * two batches of each size, doubling until it lasts cfg->batch_ns), then records
 * cfg->runs batches into v as ns per op. */
__attribute__((unused)) static void peer_measure(const peer_cfg *cfg, uint64_t (*batch)(void *ctx, uint64_t n),
                                                 void *ctx, double *v) {
    uint64_t n = 1;
    int done = 0;
    while (!done) {
        uint64_t took = batch(ctx, n);
        took = peer_min(took, batch(ctx, n));
        n = peer_next_n(n, took, cfg->batch_ns, &done);
    }
    for (int r = 0; r < cfg->runs; r++) v[r] = (double)batch(ctx, n) / (double)n;
}

/* ---- a team of pinned pthreads running `op(tid)` N times per batch ---------------- */

typedef void (*peer_op)(int tid, void *arg);

typedef struct {
    const peer_cfg *cfg;
    peer_op op;
    void *arg;
    pthread_barrier_t ctl; /* control barrier, outside the timed region */
    _Atomic uint64_t n;    /* ops per batch; 0 = stop */
    uint64_t start[MAX_CPUS * 4];
    uint64_t end[MAX_CPUS * 4];
} peer_team;

typedef struct {
    peer_team *team;
    int tid;
} peer_member;

__attribute__((unused)) static void *peer_team_main(void *p) {
    peer_member *m = p;
    peer_team *t = m->team;
    peer_pin(t->cfg, m->tid);
    for (;;) {
        pthread_barrier_wait(&t->ctl);
        uint64_t n = atomic_load(&t->n);
        if (n == 0) break;
        t->start[m->tid] = peer_now();
        for (uint64_t i = 0; i < n; i++) t->op(m->tid, t->arg);
        t->end[m->tid] = peer_now();
        pthread_barrier_wait(&t->ctl);
    }
    return NULL;
}

/* Runs one batch of n ops on every thread (the caller is thread 0); returns the
 * elapsed ns from the first start to the last end. */
__attribute__((unused)) static uint64_t peer_team_batch(void *team, uint64_t n) {
    peer_team *t = team;
    atomic_store(&t->n, n);
    pthread_barrier_wait(&t->ctl);
    t->start[0] = peer_now();
    for (uint64_t i = 0; i < n; i++) t->op(0, t->arg);
    t->end[0] = peer_now();
    pthread_barrier_wait(&t->ctl);
    uint64_t s = t->start[0], e = t->end[0];
    for (int i = 1; i < t->cfg->threads; i++) {
        if (t->start[i] < s) s = t->start[i];
        if (t->end[i] > e) e = t->end[i];
    }
    return e - s;
}

/* Measures ns per op of `op` run by cfg->threads threads and prints a RESULT line. */
__attribute__((unused)) static int peer_team_run(const peer_cfg *cfg, const char *name, peer_op op, void *arg) {
    int T = cfg->threads;
    if (T > MAX_CPUS * 4) {
        fprintf(stderr, "too many threads\n");
        return -1;
    }
    peer_team *t = calloc(1, sizeof *t);
    peer_member *ms = calloc((size_t)T, sizeof *ms);
    pthread_t *th = calloc((size_t)T, sizeof *th);
    if (!t || !ms || !th) return -1;
    t->cfg = cfg;
    t->op = op;
    t->arg = arg;
    pthread_barrier_init(&t->ctl, NULL, (unsigned)T);
    for (int i = 1; i < T; i++) {
        ms[i].team = t;
        ms[i].tid = i;
        pthread_create(&th[i], NULL, peer_team_main, &ms[i]);
    }
    peer_pin(cfg, 0);
    double v[MAX_RUNS];
    peer_measure(cfg, peer_team_batch, t, v);
    atomic_store(&t->n, 0);
    pthread_barrier_wait(&t->ctl);
    for (int i = 1; i < T; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&t->ctl);
    peer_report(name, T, v, cfg->runs);
    free(t);
    free(ms);
    free(th);
    return 0;
}

/* ---- MPI programs (include <mpi.h> before this header) ---------------------------- */

#ifdef MPI_VERSION
/* One batch of n back-to-back calls of op(arg) on every rank of MPI_COMM_WORLD after a
 * barrier; returns the slowest rank's loop time (the same on every rank). */
__attribute__((unused)) static uint64_t peer_mpi_batch(void (*op)(const void *arg), const void *arg,
                                                     uint64_t n) {
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t t0 = peer_now();
    for (uint64_t i = 0; i < n; i++) op(arg);
    uint64_t took = peer_now() - t0, worst = 0;
    MPI_Allreduce(&took, &worst, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}
#endif

#endif
