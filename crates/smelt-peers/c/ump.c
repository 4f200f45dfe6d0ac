/* ump.c - a Barrelfish-UMP-style single-producer single-consumer ring in C.
 * Each slot is one cache line: 56 payload bytes and a sequence word written last
 * (release), so the consumer polls one line per message. The consumer publishes how
 * far it has read on a separate line; the producer reads it only when the ring looks
 * full. Measured: one-way latency (ping-pong over two rings, RTT/2) and streaming
 * throughput of 8-byte messages (ns per message). Runs on the first two CPUs of
 * CPUS; THREADS must be 2 (the runner passes 2). Usage and output: see peer.h. */
#include "peer.h"

#define SLOTS 64 /* power of two */

typedef struct {
    _Alignas(LINE) uint64_t payload[7];
    _Atomic uint64_t seq; /* message number + 1 once written */
} slot_t;

typedef struct {
    slot_t slot[SLOTS];
    _Alignas(LINE) _Atomic uint64_t acked; /* messages consumed, written by consumer */
    _Alignas(LINE) uint64_t tx;            /* producer-local */
    uint64_t tx_limit;                     /* producer's cached acked + SLOTS */
    _Alignas(LINE) uint64_t rx;            /* consumer-local */
} ring_t;

static void ring_send(ring_t *r, uint64_t v) {
    unsigned spins = 0;
    while (r->tx >= r->tx_limit) {
        r->tx_limit = atomic_load_explicit(&r->acked, memory_order_acquire) + SLOTS;
        if (r->tx >= r->tx_limit) peer_relax(&spins);
    }
    slot_t *s = &r->slot[r->tx & (SLOTS - 1)];
    s->payload[0] = v;
    atomic_store_explicit(&s->seq, r->tx + 1, memory_order_release);
    r->tx++;
}

static uint64_t ring_recv(ring_t *r) {
    slot_t *s = &r->slot[r->rx & (SLOTS - 1)];
    unsigned spins = 0;
    while (atomic_load_explicit(&s->seq, memory_order_acquire) != r->rx + 1) peer_relax(&spins);
    uint64_t v = s->payload[0];
    r->rx++;
    /* acknowledge in bulk: every quarter ring */
    if ((r->rx & (SLOTS / 4 - 1)) == 0) atomic_store_explicit(&r->acked, r->rx, memory_order_release);
    return v;
}

static ring_t *ring_new(void) {
    ring_t *r = aligned_alloc(LINE, sizeof(ring_t));
    if (!r) exit(1);
    memset(r, 0, sizeof *r);
    r->tx_limit = SLOTS;
    return r;
}

/* Ping-pong: thread 0 sends on a, thread 1 echoes on b. One op = one round trip. */
typedef struct {
    ring_t *a, *b;
} pair_t;

static void op_pingpong(int tid, void *arg) {
    pair_t *p = arg;
    if (tid == 0) {
        ring_send(p->a, 1);
        (void)ring_recv(p->b);
    } else {
        ring_send(p->b, ring_recv(p->a));
    }
}

/* Streaming: thread 0 sends, thread 1 receives. One op = one message. */
static void op_stream(int tid, void *arg) {
    pair_t *p = arg;
    if (tid == 0)
        ring_send(p->a, 7);
    else
        (void)ring_recv(p->a);
}

int main(int argc, char **argv) {
    peer_cfg cfg;
    if (peer_parse(argc, argv, &cfg) != 0) return 2;
    cfg.threads = 2; /* one CPU: both threads share it, unpinned (peer_parse saw THREADS=2) */
    pair_t p = {ring_new(), ring_new()};
    /* peer_team_run reports ns per round trip; the harness halves it (RESULT name says rtt) */
    if (peer_team_run(&cfg, "ump_rtt", op_pingpong, &p) != 0) return 1;
    pair_t q = {ring_new(), ring_new()};
    if (peer_team_run(&cfg, "ump_stream", op_stream, &q) != 0) return 1;
    return 0;
}
