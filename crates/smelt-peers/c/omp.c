/* omp.c - OpenMP barrier and reduction, as a user of the compiler's OpenMP runtime
 * (libgomp with gcc, LLVM libomp with clang) would write them.
 * Usage and output: see peer.h. Threads pin themselves like the other peers; the
 * runtime's own binding should be disabled (OMP_PROC_BIND=false). */
#include "peer.h"
#include <omp.h>

static double vals[MAX_RUNS];

/* Times `body` in batches inside one parallel region; kind 0 = barrier, 1 = reduction. */
static void run(const peer_cfg *cfg, const char *name, int kind) {
    long red = 0; /* shared reduction target */
    uint64_t shared_n = 1;
    uint64_t t0 = 0;
    int done = 0, r = 0, tries = 0;
    uint64_t fastest = UINT64_MAX;
#pragma omp parallel num_threads(cfg->threads)
    {
        int tid = omp_get_thread_num();
        peer_pin(cfg, tid);
        for (;;) {
#pragma omp barrier
#pragma omp master
            t0 = peer_now();
#pragma omp barrier
            uint64_t n = shared_n;
            if (n == 0) break;
            for (uint64_t i = 0; i < n; i++) {
                if (kind == 0) {
#pragma omp barrier
                } else {
#pragma omp for reduction(+ : red) schedule(static)
                    for (int k = 0; k < cfg->threads; k++) red += k + 1;
                }
            }
#pragma omp barrier
#pragma omp master
            {
                uint64_t took = peer_now() - t0;
                if (!done) {
                    /* two batches per size; the faster one decides */
                    fastest = peer_min(fastest, took);
                    if (++tries == 2) {
                        shared_n = peer_next_n(shared_n, fastest, cfg->batch_ns, &done);
                        tries = 0;
                        fastest = UINT64_MAX;
                    }
                } else {
                    vals[r++] = (double)took / (double)shared_n;
                    if (r == cfg->runs) shared_n = 0;
                }
            }
        }
    }
    if (red < 0) printf("impossible\n");
    peer_report(name, cfg->threads, vals, cfg->runs);
}

int main(int argc, char **argv) {
    peer_cfg cfg;
    if (peer_parse(argc, argv, &cfg) != 0) return 2;
    omp_set_dynamic(0);
    run(&cfg, "omp_barrier", 0);
    run(&cfg, "omp_reduction", 1);
    return 0;
}
