/* agg_histogram.c - a distributed histogram over message aggregation (smelt_agg_*).
 *
 * P processes of T worker threads (each process one shared active-message endpoint)
 * own a table of BINS counters per worker. Every worker makes U random increments
 * anywhere: an 8-byte item (the bin) inserted for the bin's owner, aggregated by the
 * chosen scheme; then all terminate and every count is checked against a sequential
 * computation. Also checks that mistakes are errors (a wrong item size, an unknown
 * worker or scheme, a freed handle).
 *
 *   agg_histogram [ww|wps|wsp|pp|none] [processes] [workers] [updates per worker]
 */
#include <smelt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "example_check.h"

enum { BINS = 1024 };

static size_t nworkers;
static uint64_t updates = 20000;
static smelt_agg_worker **ws;

struct table {
    uint64_t count[BINS];
};
static struct table *tables;

/* The k-th update of worker t: (owner worker, bin) from splitmix64. */
static uint64_t update_of(size_t t, uint64_t k) {
    uint64_t z = 0x9E3779B97F4A7C15ull * (t + 1) + 0xBF58476D1CE4E5B9ull * k;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void on_item(void *user, size_t me, const void *item, size_t size) {
    struct table *t = user;
    uint64_t bin;
    (void)me;
    if (size != sizeof bin) abort();
    memcpy(&bin, item, sizeof bin);
    t->count[bin % BINS]++;
}

static void *work(void *arg) {
    size_t me = (size_t)(uintptr_t)arg;
    for (uint64_t k = 0; k < updates; k++) {
        uint64_t u = update_of(me, k);
        uint64_t bin = (u >> 32) % BINS;
        CHECK(smelt_agg_insert(ws[me], &bin, sizeof bin, (size_t)(u % nworkers)));
    }
    CHECK(smelt_agg_terminate(ws[me], 60000));
    return NULL;
}

int main(int argc, char **argv) {
    const char *names[] = {"ww", "wps", "wsp", "pp", "none"};
    int scheme = SMELT_AGG_WPS;
    size_t procs = 2, per = 4;
    if (argc > 1) {
        scheme = -1;
        for (int i = 0; i < 5; i++)
            if (strcmp(argv[1], names[i]) == 0) scheme = i;
        if (scheme < 0) {
            fprintf(stderr, "unknown scheme %s\n", argv[1]);
            return 2;
        }
    }
    if (argc > 2) procs = (size_t)strtoul(argv[2], NULL, 10);
    if (argc > 3) per = (size_t)strtoul(argv[3], NULL, 10);
    if (argc > 4) updates = strtoull(argv[4], NULL, 10);
    nworkers = procs * per;
    ws = calloc(nworkers, sizeof *ws);
    tables = calloc(nworkers, sizeof *tables);
    void **users = calloc(nworkers, sizeof *users);
    pthread_t *th = calloc(nworkers, sizeof *th);
    if (!ws || !tables || !users || !th) return 1;
    for (size_t i = 0; i < nworkers; i++) users[i] = &tables[i];

    /* Mistakes are errors, not crashes. */
    if (smelt_agg_threads(procs, per, 9, 8, 0, 0, 0, on_item, users, ws) !=
            SMELT_ERR_INVALID_ARGUMENT ||
        smelt_agg_threads(procs, per, scheme, 0, 0, 0, 0, on_item, users, ws) !=
            SMELT_ERR_INVALID_ARGUMENT ||
        smelt_agg_threads(procs, per, scheme, 8, 0, 0, 0, NULL, users, ws) !=
            SMELT_ERR_INVALID_ARGUMENT) {
        fprintf(stderr, "a bad aggregator was not refused\n");
        return 1;
    }

    /* 64 items per buffer, so a run of a few thousand updates fills many. */
    CHECK(smelt_agg_threads(procs, per, scheme, 8, 64, 0, 0, on_item, users, ws));
    uint32_t small = 1;
    uint64_t one = 1;
    if (smelt_agg_insert(ws[0], &small, sizeof small, 0) != SMELT_ERR_INVALID_ARGUMENT ||
        smelt_agg_insert(ws[0], &one, sizeof one, nworkers) != SMELT_ERR_INVALID_ARGUMENT) {
        fprintf(stderr, "a bad item was not refused\n");
        return 1;
    }
    for (size_t i = 0; i < nworkers; i++)
        if (pthread_create(&th[i], NULL, work, (void *)(uintptr_t)i) != 0) return 1;
    for (size_t i = 0; i < nworkers; i++) pthread_join(th[i], NULL);

    /* Every count against a sequential computation. */
    uint64_t *want = calloc(nworkers * BINS, sizeof *want);
    if (!want) return 1;
    for (size_t t = 0; t < nworkers; t++)
        for (uint64_t k = 0; k < updates; k++) {
            uint64_t u = update_of(t, k);
            want[(u % nworkers) * BINS + (u >> 32) % BINS]++;
        }
    uint64_t counted = 0, messages = 0;
    for (size_t w = 0; w < nworkers; w++) {
        for (size_t b = 0; b < BINS; b++) {
            if (tables[w].count[b] != want[w * BINS + b]) {
                fprintf(stderr, "worker %zu bin %zu: %llu, expected %llu\n", w, b,
                        (unsigned long long)tables[w].count[b],
                        (unsigned long long)want[w * BINS + b]);
                return 1;
            }
            counted += tables[w].count[b];
        }
        uint64_t m = 0;
        CHECK(smelt_agg_stats(ws[w], NULL, NULL, &m));
        messages += m;
    }
    smelt_agg_worker *first = ws[0];
    for (size_t i = 0; i < nworkers; i++) CHECK(smelt_agg_worker_free(ws[i]));
    if (smelt_agg_flush(first) != SMELT_ERR_INVALID_HANDLE) {
        fprintf(stderr, "a freed worker was still usable\n");
        return 1;
    }
    printf("agg histogram ok: %s, %zu processes x %zu workers, %llu updates counted in %llu "
           "messages\n",
           names[scheme], procs, per, (unsigned long long)counted,
           (unsigned long long)messages);
    free(want);
    free(th);
    free(users);
    free(tables);
    free(ws);
    return 0;
}
