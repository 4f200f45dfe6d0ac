/* barriers.c - pthread_barrier_wait and a hand-written dissemination barrier.
 * Usage and output: see peer.h. */
#include "peer.h"

/* pthread_barrier_wait, the barrier every C programmer has at hand. */
static pthread_barrier_t pbar;
static void op_pthread(int tid, void *arg) {
    (void)tid;
    (void)arg;
    pthread_barrier_wait(&pbar);
}

/* Dissemination barrier (Hensgen, Finkel, Manber): in round r thread i signals
 * thread (i + 2^r) mod P and waits for the signal of (i - 2^r) mod P. Each flag is a
 * monotonically increasing episode counter on its own cache line, so no sense
 * reversal is needed: a waiter only needs "flag >= my episode". */
#define MAX_ROUNDS 16
typedef struct {
    _Alignas(LINE) _Atomic uint64_t v;
    char pad[LINE - sizeof(uint64_t)];
} flag_t;

typedef struct {
    int threads, rounds;
    flag_t *flags;          /* flags[tid * MAX_ROUNDS + r] */
    uint64_t *episode;      /* per thread, padded by stride 8 (one line) */
} dissem_t;

static void op_dissem(int tid, void *arg) {
    dissem_t *d = arg;
    uint64_t e = ++d->episode[tid * 8];
    for (int r = 0, dist = 1; r < d->rounds; r++, dist <<= 1) {
        int to = (tid + dist) % d->threads;
        atomic_store_explicit(&d->flags[to * MAX_ROUNDS + r].v, e, memory_order_release);
        unsigned spins = 0;
        while (atomic_load_explicit(&d->flags[tid * MAX_ROUNDS + r].v, memory_order_acquire) < e)
            peer_relax(&spins);
    }
}

int main(int argc, char **argv) {
    peer_cfg cfg;
    if (peer_parse(argc, argv, &cfg) != 0) return 2;
    pthread_barrier_init(&pbar, NULL, (unsigned)cfg.threads);
    if (peer_team_run(&cfg, "pthread_barrier", op_pthread, NULL) != 0) return 1;
    pthread_barrier_destroy(&pbar);

    dissem_t d;
    d.threads = cfg.threads;
    d.rounds = 0;
    while ((1 << d.rounds) < cfg.threads) d.rounds++;
    d.flags = aligned_alloc(LINE, sizeof(flag_t) * MAX_ROUNDS * (size_t)cfg.threads);
    d.episode = aligned_alloc(LINE, LINE * (size_t)cfg.threads);
    if (!d.flags || !d.episode) return 1;
    memset(d.flags, 0, sizeof(flag_t) * MAX_ROUNDS * (size_t)cfg.threads);
    memset(d.episode, 0, LINE * (size_t)cfg.threads);
    if (peer_team_run(&cfg, "dissemination_barrier", op_dissem, &d) != 0) return 1;
    free(d.flags);
    free(d.episode);
    return 0;
}
