/* global_stealing.c - a work-stealing task counter on global arrays (smelt_global_*).
 *
 * T tasks are spread over N threads in blocks. Each block has a counter (element m of a
 * uint64_t array of N elements); a thread takes its next task with a fetch-and-add on
 * its own counter and, when its block is used up, steals from the other counters the
 * same way. A task adds its value to element t of a results array (an accumulate, so a
 * task run twice or never would show); the tasks of thread 0's block cost 8 times more,
 * so the others steal. After a barrier every thread checks the whole results array
 * against a sequential recomputation, and the tasks run add up to T.
 *
 *   global_stealing [threads] [tasks]
 */
#include <smelt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "example_check.h"

static size_t nthreads = 4;
static uint64_t ntasks = 10000;
static smelt_global *counters, *results, *ran;

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Task t's value (never 0); `rounds` rounds of the hash are its cost. */
static uint64_t task_value(uint64_t t, int rounds) {
    uint64_t x = t ^ 0x5EED;
    for (int i = 0; i < rounds; i++) x = mix(x);
    return x | 1;
}

static int rounds_of(uint64_t t) {
    uint64_t s, e;
    CHECK(smelt_global_block(results, 0, &s, &e));
    return t < e ? 160 : 20;
}

static void *worker(void *arg) {
    size_t me = (size_t)(uintptr_t)arg;
    uint64_t own = 0, stolen = 0;
    CHECK(smelt_global_barrier(counters));
    for (size_t k = 0; k < nthreads; k++) {
        size_t victim = (me + k) % nthreads;
        uint64_t start, end;
        CHECK(smelt_global_block(results, victim, &start, &end));
        for (;;) {
            uint64_t claim;
            CHECK(smelt_global_fetch_accumulate_u64(counters, victim, 1, SMELT_GLOBAL_SUM, &claim));
            if (claim >= end - start) break;
            uint64_t t = start + claim;
            uint64_t v = task_value(t, rounds_of(t));
            CHECK(smelt_global_accumulate_u64(results, t, &v, 1, SMELT_GLOBAL_SUM));
            if (k == 0) own++; else stolen++;
        }
    }
    uint64_t both[2] = {own, stolen};
    CHECK(smelt_global_put_u64(ran, 2 * me, both, 2));
    CHECK(smelt_global_barrier(results));
    /* Every thread checks everything. */
    uint64_t *all = malloc(ntasks * sizeof *all);
    if (!all) exit(1);
    CHECK(smelt_global_get_u64(results, 0, all, ntasks));
    for (uint64_t t = 0; t < ntasks; t++) {
        if (all[t] != task_value(t, rounds_of(t))) {
            fprintf(stderr, "thread %zu: task %llu has %llu\n", me, (unsigned long long)t,
                    (unsigned long long)all[t]);
            exit(1);
        }
    }
    free(all);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) nthreads = (size_t)strtoul(argv[1], NULL, 10);
    if (argc > 2) ntasks = strtoull(argv[2], NULL, 10);
    if (nthreads == 0 || nthreads > 256 || ntasks == 0) {
        fprintf(stderr, "usage: global_stealing [threads 1..256] [tasks >= 1]\n");
        return 2;
    }
    CHECK(smelt_global_create(SMELT_GLOBAL_U64, nthreads, nthreads, 60000, &counters));
    CHECK(smelt_global_create(SMELT_GLOBAL_U64, ntasks, nthreads, 60000, &results));
    CHECK(smelt_global_create(SMELT_GLOBAL_U64, 2 * nthreads, nthreads, 60000, &ran));
    pthread_t th[256];
    for (size_t i = 0; i < nthreads; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i) != 0) return 1;
    for (size_t i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    uint64_t total = 0, stolen = 0;
    for (size_t i = 0; i < nthreads; i++) {
        uint64_t both[2];
        CHECK(smelt_global_get_u64(ran, 2 * i, both, 2));
        total += both[0] + both[1];
        stolen += both[1];
    }
    if (total != ntasks) {
        fprintf(stderr, "%llu tasks ran, not %llu\n", (unsigned long long)total,
                (unsigned long long)ntasks);
        return 1;
    }
    printf("global stealing ok: %llu tasks over %zu threads, %llu stolen, results match the sequential recomputation\n",
           (unsigned long long)ntasks, nthreads, (unsigned long long)stolen);
    CHECK(smelt_global_free(counters));
    CHECK(smelt_global_free(results));
    CHECK(smelt_global_free(ran));
    return 0;
}
