/* kvs.c - smelt's replicated key-value store from C: 3 replicas ordering sets with
 * 1Paxos (the acceptor broadcasting over Smelt's adaptive tree), 2 clients on 2
 * threads doing sets and gets, read-your-writes and the final values checked, close.
 *
 *   cc -I crates/smelt-capi/include examples/c/kvs.c -L target/release -lsmelt -lpthread -o kvs
 *   LD_LIBRARY_PATH=target/release ./kvs [protocol] [rounds]
 *
 * protocol: 1paxos (default) or 2pc; rounds: sets per client (default 200). Prints
 * "kvs ok: 3 replicas, 2 clients, PROTOCOL, R sets and 2R gets per client" and exits 0
 * when every check holds; otherwise names the first failure and exits 1. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <smelt.h>
#include "example_check.h"

#define CLIENTS 2
#define KEYS 4 /* keys per client */

#define FAIL(...)                                                                      \
    do {                                                                               \
        fprintf(stderr, __VA_ARGS__);                                                  \
        exit(1);                                                                       \
    } while (0)

/* Keys are "c<client>k<i>" (at most 8 bytes); values "c<client>:<round>". */
static size_t key(char *buf, int client, int i) {
    return (size_t)snprintf(buf, 8 + 1, "c%dk%d", client, i);
}

static size_t value(char *buf, int client, int round) {
    return (size_t)snprintf(buf, 16 + 1, "c%d:%d", client, round);
}

struct worker {
    smelt_kvs *kvs;
    int index;
    int rounds;
};

/* Client `index`: sets its keys in turn, reading each back at once (read your writes)
 * and reading the other client's key (any value it wrote, or not set yet). */
static void *work(void *arg) {
    struct worker *w = arg;
    smelt_kvs_client *c;
    CHECK(smelt_kvs_client_at(w->kvs, (size_t)w->index, &c));
    char k[9], v[17], got[16], other[9];
    for (int r = 0; r < w->rounds; r++) {
        size_t kl = key(k, w->index, r % KEYS), vl = value(v, w->index, r);
        CHECK(smelt_kvs_set(c, k, kl, v, vl));
        size_t len = 0;
        int found = 0;
        CHECK(smelt_kvs_get(c, k, kl, got, sizeof got, &len, &found));
        if (!found || len != vl || memcmp(got, v, vl) != 0)
            FAIL("client %d: read %.*s after writing %s to %s\n", w->index, (int)len, got,
                 v, k);
        size_t ol = key(other, 1 - w->index, r % KEYS);
        CHECK(smelt_kvs_get(c, other, ol, got, sizeof got, &len, &found));
        if (found && (len < 3 || got[1] != (char)('0' + 1 - w->index)))
            FAIL("client %d: %s holds %.*s, which its writer never wrote\n", w->index,
                 other, (int)len, got);
    }
    return NULL;
}

int main(int argc, char **argv) {
    const char *protocol = argc > 1 ? argv[1] : "1paxos";
    int rounds = argc > 2 ? atoi(argv[2]) : 200;
    if (rounds < KEYS) rounds = KEYS;

    smelt_kvs_config cfg;
    CHECK(smelt_kvs_config_init(&cfg));
    cfg.replicas = 3;
    cfg.clients = CLIENTS;
    cfg.protocol = protocol;
    cfg.tree = "adaptive-shuffled";
    smelt_kvs *kvs;
    CHECK(smelt_kvs_open(&cfg, &kvs));

    pthread_t t[CLIENTS];
    struct worker w[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        w[i] = (struct worker){kvs, i, rounds};
        if (pthread_create(&t[i], NULL, work, &w[i]) != 0) FAIL("pthread_create failed\n");
    }
    for (int i = 0; i < CLIENTS; i++) pthread_join(t[i], NULL);

    /* Final values, read through each client (each at its own home replica): every
     * key holds the last value its writer set. A client handle may move between
     * threads: the workers are done with them. */
    for (int reader = 0; reader < CLIENTS; reader++) {
        smelt_kvs_client *c;
        CHECK(smelt_kvs_client_at(kvs, (size_t)reader, &c));
        for (int writer = 0; writer < CLIENTS; writer++) {
            for (int i = 0; i < KEYS; i++) {
                int last = i + (rounds - 1 - i) / KEYS * KEYS; /* last round on key i */
                char k[9], v[17], got[16];
                size_t kl = key(k, writer, i), vl = value(v, writer, last), len = 0;
                int found = 0;
                CHECK(smelt_kvs_get(c, k, kl, got, sizeof got, &len, &found));
                if (!found || len != vl || memcmp(got, v, vl) != 0)
                    FAIL("final value of %s at client %d: %.*s, expected %s\n", k, reader,
                         (int)len, got, v);
            }
        }
        size_t len = 1;
        int found = 1;
        CHECK(smelt_kvs_get(c, "never", 5, NULL, 0, &len, &found));
        if (found || len != 0) FAIL("a key never set was found\n");
    }

    smelt_kvs_client *c0;
    CHECK(smelt_kvs_client_at(kvs, 0, &c0));
    CHECK(smelt_kvs_close(kvs));
    /* After close: the handles are dead, and saying so is an error, not a crash. */
    if (smelt_kvs_set(c0, "k", 1, "v", 1) != SMELT_ERR_INVALID_HANDLE)
        FAIL("a set after close did not fail with SMELT_ERR_INVALID_HANDLE\n");
    if (smelt_kvs_close(kvs) != SMELT_ERR_INVALID_HANDLE)
        FAIL("a second close did not fail with SMELT_ERR_INVALID_HANDLE\n");

    printf("kvs ok: 3 replicas, %d clients, %s, %d sets and %d gets per client\n", CLIENTS,
           protocol, rounds, 2 * rounds);
    return 0;
}
