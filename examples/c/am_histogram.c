/* am_histogram.c - a distributed histogram on active messages (smelt_am_*).
 *
 * N threads each own a block of a table of BINS counters. Every thread makes U random
 * increments anywhere in the table, batched per owner: each request carries 8 bins of
 * one owner, whose handler adds them and replies. When a thread's requests are all
 * answered it says so and serves the others until all are; then every count is
 * checked against a sequential computation. One request presents a wrong tag on purpose: it must come back to
 * handler 0 and never be counted.
 *
 *   am_histogram [threads] [updates per thread]
 */
#include <smelt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "example_check.h"

enum { ADD = 1, ACK = 2, BINS = 4096, PER_MESSAGE = 8 };

static size_t nthreads = 4;
static uint64_t updates = 20000;
static smelt_am_endpoint **eps;
static uint64_t counts[BINS];          /* each block written only by its owner's handler */
static atomic_size_t done;
static atomic_size_t returned;

static size_t owner(uint64_t bin) {
    size_t per = (BINS + nthreads - 1) / nthreads;
    return (size_t)(bin / per);
}

/* The k-th bin thread t increments (splitmix64). */
static uint64_t bin_of(size_t t, uint64_t k) {
    uint64_t z = 0x9E3779B97F4A7C15ull * (t + 1) + 0xBF58476D1CE4E5B9ull * k;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (z ^ (z >> 31)) % BINS;
}

static void on_add(void *user, const smelt_am_token *token, size_t from, const uint64_t *args,
                   size_t nargs, const void *data, size_t len) {
    (void)user; (void)from; (void)data; (void)len;
    for (size_t i = 0; i < nargs; i++) counts[args[i]]++;
    CHECK(smelt_am_reply(token, ACK, NULL, 0));
}

static void on_ack(void *user, const smelt_am_token *token, size_t from, const uint64_t *args,
                   size_t nargs, const void *data, size_t len) {
    (void)user; (void)token; (void)from; (void)args; (void)nargs; (void)data; (void)len;
}

static void on_returned(void *user, int reason, size_t by, uint8_t handler,
                        const uint64_t *args, size_t nargs, size_t data_len) {
    (void)user; (void)by; (void)args; (void)nargs; (void)data_len;
    if (reason == SMELT_AM_WRONG_TAG && handler == ADD) atomic_fetch_add(&returned, 1);
}

static void *worker(void *arg) {
    size_t me = (size_t)(uintptr_t)arg;
    smelt_am_endpoint *ep = eps[me];
    uint64_t batch[64][PER_MESSAGE];
    size_t fill[64] = {0};
    for (uint64_t k = 0; k < updates; k++) {
        uint64_t b = bin_of(me, k);
        size_t o = owner(b);
        batch[o][fill[o]++] = b;
        if (fill[o] == PER_MESSAGE) {
            CHECK(smelt_am_request(ep, o, ADD, batch[o], fill[o]));
            fill[o] = 0;
        }
    }
    for (size_t o = 0; o < nthreads; o++)
        if (fill[o]) CHECK(smelt_am_request(ep, o, ADD, batch[o], fill[o]));
    if (me == 0) {
        /* A request with a wrong tag: comes back, never counted. */
        uint64_t tag, bogus = 0;
        size_t dest = nthreads - 1;
        CHECK(smelt_am_tags(ep, dest, NULL, &tag));
        CHECK(smelt_am_set_dest_tag(ep, dest, tag ^ 1));
        CHECK(smelt_am_request(ep, dest, ADD, &bogus, 1));
        CHECK(smelt_am_set_dest_tag(ep, dest, tag));
    }
    CHECK(smelt_am_quiesce(ep, 60000));
    atomic_fetch_add(&done, 1);
    /* Serve the others until everyone's requests are answered. */
    while (atomic_load(&done) < nthreads) CHECK(smelt_am_poll(ep, NULL));
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) nthreads = (size_t)strtoul(argv[1], NULL, 10);
    if (argc > 2) updates = strtoull(argv[2], NULL, 10);
    if (nthreads < 1 || nthreads > 64) {
        fprintf(stderr, "threads: 1 to 64\n");
        return 2;
    }
    eps = calloc(nthreads, sizeof *eps);
    CHECK(smelt_am_threads(nthreads, 4, eps));
    for (size_t i = 0; i < nthreads; i++) {
        CHECK(smelt_am_register(eps[i], ADD, on_add, NULL));
        CHECK(smelt_am_register(eps[i], ACK, on_ack, NULL));
        CHECK(smelt_am_on_returned(eps[i], on_returned, NULL));
    }
    pthread_t th[64];
    for (size_t i = 0; i < nthreads; i++)
        pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
    for (size_t i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    for (size_t i = 0; i < nthreads; i++) CHECK(smelt_am_endpoint_free(eps[i]));
    /* The handle is gone: using it again is an error, not a crash. */
    if (smelt_am_poll(eps[0], NULL) != SMELT_ERR_INVALID_HANDLE) {
        fprintf(stderr, "a freed endpoint was accepted\n");
        return 1;
    }
    static uint64_t want[BINS];
    for (size_t t = 0; t < nthreads; t++)
        for (uint64_t k = 0; k < updates; k++) want[bin_of(t, k)]++;
    uint64_t total = 0;
    for (size_t b = 0; b < BINS; b++) {
        if (counts[b] != want[b]) {
            fprintf(stderr, "bin %zu: %llu, want %llu\n", b, (unsigned long long)counts[b],
                    (unsigned long long)want[b]);
            return 1;
        }
        total += counts[b];
    }
    if (atomic_load(&returned) != 1) {
        fprintf(stderr, "%zu returned messages, want 1\n", atomic_load(&returned));
        return 1;
    }
    printf("am histogram ok: %zu threads, %llu updates counted, 1 wrong-tag request returned\n",
           nthreads, (unsigned long long)total);
    free(eps);
    return 0;
}
