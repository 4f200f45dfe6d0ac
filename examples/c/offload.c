/* offload.c - application threads hand their active messages to communication threads
 * (smelt_offload_*).
 *
 * One server endpoint keeps a running sum, served by its own thread. The other LANES
 * endpoints go into an offload pool: each gets a communication thread, which sends the
 * requests the application threads queue and runs the endpoint's reply handler. APPS
 * application threads each queue U requests (ADD v) through lane (thread % LANES),
 * flushing every 32 and pausing now and then, so that dynamic communication threads
 * keep falling asleep and being woken. Then the sum, the replies and the counters are
 * checked, the pool is stopped and its endpoints come back as handles.
 *
 *   offload [direct|static|dynamic] [application threads] [requests per thread]
 */
#define _POSIX_C_SOURCE 200809L
#include <smelt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "example_check.h"

enum { ADD = 1, ACK = 2, LANES = 2, MAX_APPS = 64 };

static size_t apps = 8;
static uint64_t per = 2000;
static smelt_offload *pool;
static uint64_t sum;              /* written only by the server's handler */
static atomic_ullong acks;        /* by the reply handlers, on the communication threads */
static atomic_int stop_server;

static void on_add(void *user, const smelt_am_token *token, size_t from, const uint64_t *args,
                   size_t nargs, const void *data, size_t len) {
    (void)user; (void)from; (void)nargs; (void)data; (void)len;
    sum += args[0];
    CHECK(smelt_am_reply(token, ACK, args, 1));
}

static void on_ack(void *user, const smelt_am_token *token, size_t from, const uint64_t *args,
                   size_t nargs, const void *data, size_t len) {
    (void)user; (void)token; (void)from; (void)args; (void)nargs; (void)data; (void)len;
    atomic_fetch_add(&acks, 1);
}

static void *server(void *arg) {
    smelt_am_endpoint *ep = arg;
    while (!atomic_load(&stop_server)) {
        int rc = smelt_am_wait(ep, 5, NULL);
        if (rc != SMELT_OK && rc != SMELT_ERR_TIMEOUT) {
            fprintf(stderr, "server: %d %s\n", rc, smelt_last_error());
            exit(1);
        }
    }
    return NULL;
}

static void *app(void *arg) {
    size_t me = (size_t)(uintptr_t)arg;
    size_t lane = me % LANES;
    for (uint64_t i = 0; i < per; i++) {
        uint64_t v = me * per + i + 1;
        CHECK(smelt_offload_request(pool, lane, 0, ADD, &v, 1));
        if (i % 32 == 31) CHECK(smelt_offload_flush(pool, lane, 60000));
        if (i % 500 == 499) {
            struct timespec ts = {0, 2000000}; /* 2 ms: the lane goes to sleep */
            nanosleep(&ts, NULL);
        }
    }
    CHECK(smelt_offload_flush(pool, lane, 60000));
    return NULL;
}

#define EXPECT_RC(call, want)                                                          \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != (want)) {                                                           \
            fprintf(stderr, "%s: %d, want %d (%s)\n", #call, rc_, want,                \
                    smelt_last_error());                                               \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

int main(int argc, char **argv) {
    int mode = SMELT_OFFLOAD_DYNAMIC;
    if (argc > 1) {
        if (!strcmp(argv[1], "direct")) mode = SMELT_OFFLOAD_DIRECT;
        else if (!strcmp(argv[1], "static")) mode = SMELT_OFFLOAD_STATIC;
        else if (!strcmp(argv[1], "dynamic")) mode = SMELT_OFFLOAD_DYNAMIC;
        else {
            fprintf(stderr, "mode: direct, static or dynamic\n");
            return 2;
        }
    }
    if (argc > 2) apps = (size_t)strtoul(argv[2], NULL, 10);
    if (argc > 3) per = strtoull(argv[3], NULL, 10);
    if (apps < 1 || apps > MAX_APPS || per < 1) {
        fprintf(stderr, "threads: 1 to %d; requests: at least 1\n", MAX_APPS);
        return 2;
    }
    smelt_am_endpoint *eps[1 + LANES];
    CHECK(smelt_am_threads(1 + LANES, 0, eps));
    CHECK(smelt_am_register(eps[0], ADD, on_add, NULL));
    for (size_t l = 1; l <= LANES; l++) CHECK(smelt_am_register(eps[l], ACK, on_ack, NULL));
    pthread_t srv;
    pthread_create(&srv, NULL, server, eps[0]);

    /* Mistakes are errors, and leave the endpoints with their handles. */
    EXPECT_RC(smelt_offload_start(eps + 1, LANES, 7, NULL, 0, &pool), SMELT_ERR_INVALID_ARGUMENT);
    uint32_t cpu = 0;
    EXPECT_RC(smelt_offload_start(eps + 1, LANES, SMELT_OFFLOAD_STATIC, &cpu, 1, &pool),
              SMELT_ERR_INVALID_ARGUMENT);
    smelt_am_endpoint *twice[2] = {eps[1], eps[1]};
    EXPECT_RC(smelt_offload_start(twice, 2, mode, NULL, 0, &pool), SMELT_ERR_INVALID_ARGUMENT);

    CHECK(smelt_offload_start(eps + 1, LANES, mode, NULL, 0, &pool));
    /* The pool owns the endpoints now. */
    EXPECT_RC(smelt_am_poll(eps[1], NULL), SMELT_ERR_INVALID_HANDLE);
    uint64_t w = 1;
    EXPECT_RC(smelt_offload_request(pool, LANES, 0, ADD, &w, 1), SMELT_ERR_INVALID_ARGUMENT);
    EXPECT_RC(smelt_offload_request(pool, 0, 0, 0, &w, 1), SMELT_ERR_INVALID_ARGUMENT);
    EXPECT_RC(smelt_offload_request(pool, 0, 0, ADD, NULL, 1), SMELT_ERR_INVALID_ARGUMENT);
    /* A bad destination is found on the communication thread: the next flush says so
     * (in direct mode the request itself fails). */
    int direct = mode == SMELT_OFFLOAD_DIRECT;
    EXPECT_RC(smelt_offload_request(pool, 0, 99, ADD, &w, 1),
              direct ? SMELT_ERR_INVALID_ARGUMENT : SMELT_OK);
    EXPECT_RC(smelt_offload_flush(pool, 0, 10000),
              direct ? SMELT_OK : SMELT_ERR_INVALID_ARGUMENT);

    pthread_t th[MAX_APPS];
    for (size_t i = 0; i < apps; i++) pthread_create(&th[i], NULL, app, (void *)(uintptr_t)i);
    for (size_t i = 0; i < apps; i++) pthread_join(th[i], NULL);

    uint64_t requests = 0, sleeps = 0, wakes = 0;
    for (size_t l = 0; l < LANES; l++) {
        smelt_offload_counters st;
        CHECK(smelt_offload_stats(pool, l, &st));
        requests += st.requests;
        sleeps += st.sleeps;
        wakes += st.wakes;
    }
    smelt_am_endpoint *back[LANES];
    uint64_t left = 1;
    CHECK(smelt_offload_stop(pool, 10000, back, LANES, &left));
    EXPECT_RC(smelt_offload_stats(pool, 0, NULL), SMELT_ERR_INVALID_HANDLE);
    atomic_store(&stop_server, 1);
    pthread_join(srv, NULL);

    uint64_t total = apps * per, want = total * (total + 1) / 2;
    if (sum != want || atomic_load(&acks) != total || left != 0) {
        fprintf(stderr, "sum %llu (want %llu), %llu replies (want %llu), %llu left\n",
                (unsigned long long)sum, (unsigned long long)want,
                (unsigned long long)atomic_load(&acks), (unsigned long long)total,
                (unsigned long long)left);
        return 1;
    }
    if (mode != SMELT_OFFLOAD_DIRECT && requests != total) {
        fprintf(stderr, "%llu requests posted, want %llu\n", (unsigned long long)requests,
                (unsigned long long)total);
        return 1;
    }
    /* The endpoints are back: usable and freeable. */
    for (size_t l = 0; l < LANES; l++) {
        size_t me, n;
        CHECK(smelt_am_rank(back[l], &me, &n));
        if (me != l + 1) return 1;
        CHECK(smelt_am_endpoint_free(back[l]));
    }
    CHECK(smelt_am_endpoint_free(eps[0]));
    printf("offload ok: %s, %zu threads, %llu requests summed, %llu sleeps, %llu wake-ups\n",
           argv[1] ? argv[1] : "dynamic", apps, (unsigned long long)total,
           (unsigned long long)sleeps, (unsigned long long)wakes);
    return 0;
}
