/*
 * world.c - one world, every service: each member of one job makes, from its
 * smelt_world, tree collectives, an active-message endpoint, an offload lane (an
 * endpoint run by a communication thread), an aggregator and a global array, uses them
 * all, and checks every result against plain sequential arithmetic.
 * The same body runs whoever started the members:
 *
 *   ./world threads N [ROUNDS]                   N threads of this process (smelt_world_run)
 *   smelt launch -n N -- ./world env [ROUNDS]    N processes (smelt_world_from_env)
 *   mpirun -n N ./world_mpi mpi [ROUNDS]         N MPI ranks (smelt_world_from_mpi; built
 *                                                with -DSMELT_EXAMPLE_MPI by mpicc)
 *
 * Build (processes):
 *   cargo build -p smelt-capi -p smelt-cli
 *   cc -std=c11 -I crates/smelt-capi/include examples/c/world.c -L target/debug -lsmelt \
 *       -lpthread -o world
 *   LD_LIBRARY_PATH=target/debug target/debug/smelt launch -n 4 -- ./world env
 *
 * Member 0 prints "world ok: N members (HOW), ..." at the end; any failure makes the
 * member print what failed and exit non-zero (or, as threads, the run fail).
 */
#ifdef SMELT_EXAMPLE_MPI
#include <mpi.h>
#endif
#include <smelt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long rounds = 20;
static const char *how = "threads";
static atomic_int failed;

/* A failed smelt call or check: say which member and what, and give up this member. */
#define CHECK(call)                                                                      \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != SMELT_OK) {                                                           \
            fprintf(stderr, "member %zu: %s failed (%d): %s\n", me, #call, rc_,          \
                    smelt_last_error());                                                 \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

#define EXPECT(cond, ...)                                                                \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "member %zu: ", me);                                         \
            fprintf(stderr, __VA_ARGS__);                                                \
            fprintf(stderr, "\n");                                                       \
            return 2;                                                                    \
        }                                                                                \
    } while (0)

/* Element-wise sum of int64_t values (a C reduction operator). */
static void sum_i64(void *inout, const void *in, size_t len, void *arg) {
    int64_t a[8], b[8];
    size_t k, n = len / sizeof(int64_t);
    (void)arg;
    if (n > 8) n = 8;
    memcpy(a, inout, n * sizeof(int64_t));
    memcpy(b, in, n * sizeof(int64_t));
    for (k = 0; k < n; k++) a[k] += b[k];
    memcpy(inout, a, n * sizeof(int64_t));
}

/* ---- active messages: every member asks every member to double numbers ---------- */

enum { DOUBLE = 1, DOUBLED = 2 };

typedef struct {
    uint64_t served;  /* requests this member's handler answered */
    uint64_t replies; /* replies it received */
    uint64_t sum;     /* the sum of the doubled numbers it received */
} am_state;

static void on_double(void *user, const smelt_am_token *token, size_t from,
                      const uint64_t *args, size_t nargs, const void *data, size_t len) {
    am_state *s = user;
    uint64_t twice = 2 * args[0];
    (void)from; (void)nargs; (void)data; (void)len;
    s->served++;
    if (smelt_am_reply(token, DOUBLED, &twice, 1) != SMELT_OK) atomic_store(&failed, 1);
}

static void on_doubled(void *user, const smelt_am_token *token, size_t from,
                       const uint64_t *args, size_t nargs, const void *data, size_t len) {
    am_state *s = user;
    (void)token; (void)from; (void)nargs; (void)data; (void)len;
    s->replies++;
    s->sum += args[0];
}

/* The number member r sends to member d in round k. */
static uint64_t number(size_t r, size_t d, long k) { return 1000000u * r + 1000u * d + (uint64_t)k; }

/* ---- aggregation: every worker sends numbers round the workers ------------------ */

typedef struct {
    uint64_t items;
    uint64_t sum;
} agg_state;

static void on_item(void *user, size_t me, const void *item, size_t size) {
    agg_state *s = user;
    uint64_t v;
    (void)me;
    if (size != sizeof v) {
        atomic_store(&failed, 1);
        return;
    }
    memcpy(&v, item, sizeof v);
    s->items++;
    s->sum += v;
}

enum { WORKERS = 2 };

/* The value worker w of the job sends as its j-th item, and where it goes. */
static uint64_t item_value(size_t w, long j) { return 7919u * w + (uint64_t)j; }
static size_t item_dest(size_t w, long j, size_t total) { return (w + 1 + (size_t)j) % total; }

/* One worker's thread: its items, then terminate; rc is the first failure. */
typedef struct {
    smelt_agg_worker *w;
    size_t id, total;
    int rc;
} agg_job;

static void *agg_worker(void *arg) {
    agg_job *j = arg;
    for (long k = 0; k < 10 * rounds && j->rc == SMELT_OK; k++) {
        uint64_t v = item_value(j->id, k);
        j->rc = smelt_agg_insert(j->w, &v, sizeof v, item_dest(j->id, k, j->total));
    }
    if (j->rc == SMELT_OK) j->rc = smelt_agg_terminate(j->w, 30000);
    if (j->rc != SMELT_OK)
        fprintf(stderr, "worker %zu: %s\n", j->id, smelt_last_error());
    return NULL;
}

static int body(smelt_world *w) {
    size_t me = 0, n = 0, node = 0, nodes = 0;
    int64_t cpu = 0;
    CHECK(smelt_world_rank(w, &me));
    CHECK(smelt_world_size(w, &n));
    CHECK(smelt_world_node(w, &node, &nodes));
    CHECK(smelt_world_cpu(w, &cpu));
    EXPECT(me < n && node < nodes && cpu >= -1, "rank %zu of %zu, node %zu of %zu, cpu %lld",
           me, n, node, nodes, (long long)cpu);

    /* Collectives: a sum, a broadcast from the root, a barrier. */
    smelt_member *m;
    CHECK(smelt_world_collectives(w, NULL, &m));
    size_t index = 0, size = 0;
    CHECK(smelt_member_index(m, &index));
    CHECK(smelt_member_size(m, &size));
    EXPECT(index == me && size == n, "member %zu of %zu in a world rank %zu of %zu", index,
           size, me, n);
    for (long k = 0; k < rounds; k++) {
        uint64_t x = me + 1 + (uint64_t)k;
        CHECK(smelt_allreduce_typed(m, &x, 1, SMELT_UINT64, SMELT_OP_SUM));
        EXPECT(x == n * (n + 1) / 2 + n * (uint64_t)k, "allreduce round %ld: %llu", k,
               (unsigned long long)x);
        int root = 0;
        CHECK(smelt_member_is_root(m, &root));
        uint64_t b = root ? 4242 + (uint64_t)k : 0;
        CHECK(smelt_broadcast(m, &b, sizeof b));
        EXPECT(b == 4242 + (uint64_t)k, "broadcast round %ld: %llu", k, (unsigned long long)b);
    }
    /* A C operator over several words, and a broadcast of bytes that are no words. */
    int64_t v[3] = {(int64_t)me, 2 * (int64_t)me, 1};
    CHECK(smelt_allreduce(m, v, sizeof v, sum_i64, NULL));
    EXPECT(v[0] == (int64_t)(n * (n - 1) / 2) && v[1] == (int64_t)(n * (n - 1)) &&
               v[2] == (int64_t)n,
           "allreduce with a C operator: %lld %lld %lld", (long long)v[0], (long long)v[1],
           (long long)v[2]);
    char text[21] = "nothing heard yet...";
    int is_root = 0;
    CHECK(smelt_member_is_root(m, &is_root));
    if (is_root) memcpy(text, "one world, all of it", sizeof text);
    CHECK(smelt_broadcast(m, text, sizeof text));
    EXPECT(strcmp(text, "one world, all of it") == 0, "broadcast of bytes: %s", text);
    CHECK(smelt_barrier(m));

    /* Active messages: `rounds` requests to every member; serve until all served. */
    am_state st = {0, 0, 0};
    smelt_am_endpoint *ep;
    CHECK(smelt_world_endpoint(w, 0, &ep));
    size_t epme = 0, epn = 0;
    CHECK(smelt_am_rank(ep, &epme, &epn));
    EXPECT(epme == me && epn == n, "endpoint %zu of %zu", epme, epn);
    CHECK(smelt_am_register(ep, DOUBLE, on_double, &st));
    CHECK(smelt_am_register(ep, DOUBLED, on_doubled, &st));
    for (long k = 0; k < rounds; k++)
        for (size_t d = 0; d < n; d++) {
            uint64_t v = number(me, d, k);
            CHECK(smelt_am_request(ep, d, DOUBLE, &v, 1));
        }
    while (st.served < n * (uint64_t)rounds) CHECK(smelt_am_wait(ep, 30000, NULL));
    CHECK(smelt_am_quiesce(ep, 30000));
    uint64_t want = 0;
    for (long k = 0; k < rounds; k++)
        for (size_t d = 0; d < n; d++) want += 2 * number(me, d, k);
    EXPECT(st.replies == n * (uint64_t)rounds && st.sum == want,
           "active messages: %llu replies summing to %llu, expected %llu summing to %llu",
           (unsigned long long)st.replies, (unsigned long long)st.sum,
           (unsigned long long)(n * (uint64_t)rounds), (unsigned long long)want);
    EXPECT(!atomic_load(&failed), "a handler failed");
    /* Nobody frees its endpoint while another may still be waiting for its replies. */
    CHECK(smelt_barrier(m));
    CHECK(smelt_am_endpoint_free(ep));

    /* Offload: one lane, an endpoint of the world handed to a communication thread
     * (asleep while idle), which runs its handlers; this thread only queues requests. */
    am_state os = {0, 0, 0};
    smelt_am_endpoint *lane;
    CHECK(smelt_world_endpoint(w, 0, &lane));
    CHECK(smelt_am_register(lane, DOUBLE, on_double, &os));
    CHECK(smelt_am_register(lane, DOUBLED, on_doubled, &os));
    smelt_offload *pool;
    CHECK(smelt_offload_start(&lane, 1, SMELT_OFFLOAD_DYNAMIC, NULL, 0, &pool));
    for (long k = 0; k < rounds; k++)
        for (size_t d = 0; d < n; d++) {
            uint64_t v = number(me, d, k);
            CHECK(smelt_offload_request(pool, 0, d, DOUBLE, &v, 1));
        }
    CHECK(smelt_offload_flush(pool, 0, 30000));
    /* Every member's requests are answered: no lane is needed any more. */
    CHECK(smelt_barrier(m));
    uint64_t left = 1;
    CHECK(smelt_offload_stop(pool, 30000, NULL, 0, &left));
    EXPECT(left == 0 && os.replies == n * (uint64_t)rounds && os.sum == want &&
               os.served == n * (uint64_t)rounds,
           "offload: %llu replies summing to %llu, %llu served, %llu left",
           (unsigned long long)os.replies, (unsigned long long)os.sum,
           (unsigned long long)os.served, (unsigned long long)left);

    /* Aggregation: WORKERS workers per member, items round every worker of the job. */
    size_t total = n * WORKERS;
    agg_state as[WORKERS];
    void *users[WORKERS];
    smelt_agg_worker *wk[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        as[i].items = as[i].sum = 0;
        users[i] = &as[i];
    }
    CHECK(smelt_world_agg(w, WORKERS, SMELT_AGG_WPS, sizeof(uint64_t), 16, 0, 0, on_item,
                          users, wk));
    /* Each worker on a thread of its own: inserts, then the collective terminate. */
    pthread_t th[WORKERS];
    agg_job jobs[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        jobs[i].w = wk[i];
        jobs[i].id = me * WORKERS + (size_t)i;
        jobs[i].total = total;
        jobs[i].rc = SMELT_OK;
        EXPECT(pthread_create(&th[i], NULL, agg_worker, &jobs[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < WORKERS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < WORKERS; i++) CHECK(jobs[i].rc);
    for (int i = 0; i < WORKERS; i++) {
        size_t id = me * WORKERS + (size_t)i;
        uint64_t items = 0, sum = 0;
        for (size_t src = 0; src < total; src++)
            for (long j = 0; j < 10 * rounds; j++)
                if (item_dest(src, j, total) == id) {
                    items++;
                    sum += item_value(src, j);
                }
        EXPECT(as[i].items == items && as[i].sum == sum,
               "aggregation: worker %zu got %llu items summing to %llu, expected %llu, %llu",
               id, (unsigned long long)as[i].items, (unsigned long long)as[i].sum,
               (unsigned long long)items, (unsigned long long)sum);
        CHECK(smelt_agg_worker_free(wk[i]));
    }

    /* A global array: each member writes its block, everyone reads all of it, then every
     * member adds its rank + 1 to every element. */
    uint64_t len = 100 * n + 7;
    smelt_global *a;
    CHECK(smelt_world_global(w, SMELT_GLOBAL_U64, len, 30000, &a));
    uint64_t start = 0, end = 0;
    CHECK(smelt_global_block(a, me, &start, &end));
    for (uint64_t i = start; i < end; i++) {
        uint64_t v = 3 * i + 1;
        CHECK(smelt_global_put_u64(a, i, &v, 1));
    }
    CHECK(smelt_global_barrier(a));
    uint64_t *all = malloc(len * sizeof *all);
    EXPECT(all != NULL, "out of memory");
    CHECK(smelt_global_get_u64(a, 0, all, len));
    for (uint64_t i = 0; i < len; i++)
        EXPECT(all[i] == 3 * i + 1, "global array: [%llu] = %llu", (unsigned long long)i,
               (unsigned long long)all[i]);
    CHECK(smelt_global_barrier(a));
    for (uint64_t i = 0; i < len; i++) all[i] = me + 1;
    CHECK(smelt_global_accumulate_u64(a, 0, all, len, SMELT_GLOBAL_SUM));
    CHECK(smelt_global_barrier(a));
    CHECK(smelt_global_get_u64(a, 0, all, len));
    for (uint64_t i = 0; i < len; i++)
        EXPECT(all[i] == 3 * i + 1 + n * (n + 1) / 2, "global array after the sums: [%llu] = %llu",
               (unsigned long long)i, (unsigned long long)all[i]);
    free(all);
    CHECK(smelt_global_barrier(a));
    CHECK(smelt_global_free(a));

    /* Everyone checked everything: one last sum of the failures (none). */
    uint64_t bad = atomic_load(&failed) ? 1 : 0;
    CHECK(smelt_allreduce_typed(m, &bad, 1, SMELT_UINT64, SMELT_OP_SUM));
    EXPECT(bad == 0, "%llu members failed", (unsigned long long)bad);
    CHECK(smelt_member_free(m));
    if (me == 0)
        printf("world ok: %zu members (%s), %ld rounds of collectives, active messages, "
               "offload, aggregation and a global array\n",
               n, how, rounds);
    return 0;
}

static void thread_body(smelt_world *w, void *arg) {
    (void)arg;
    if (body(w) != 0) atomic_store(&failed, 1);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "threads";
    int rc = 0;
    size_t me = 0;
    if (strcmp(mode, "threads") == 0) {
        size_t n = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 4;
        if (argc > 3) rounds = atol(argv[3]);
        CHECK(smelt_world_run(n, thread_body, NULL));
        return atomic_load(&failed) ? 1 : 0;
    }
    if (argc > 2) rounds = atol(argv[2]);
    smelt_world *w;
    if (strcmp(mode, "env") == 0) {
        how = "processes";
        CHECK(smelt_world_from_env(&w));
        rc = body(w);
        CHECK(smelt_world_free(w));
        return rc;
    }
#ifdef SMELT_EXAMPLE_MPI
    if (strcmp(mode, "mpi") == 0) {
        how = "MPI ranks";
        /* The offload lane's thread makes MPI calls (to members on other nodes) while
         * this thread makes its own. */
        int provided = MPI_THREAD_SINGLE;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        if (provided < MPI_THREAD_MULTIPLE) {
            fprintf(stderr, "world: this MPI does not provide MPI_THREAD_MULTIPLE\n");
            MPI_Finalize();
            return 1;
        }
        CHECK(smelt_world_from_mpi(MPI_COMM_WORLD, &w));
        rc = body(w);
        CHECK(smelt_world_free(w));
        MPI_Finalize();
        return rc;
    }
#endif
    fprintf(stderr, "usage: world threads [N [ROUNDS]] | env [ROUNDS] | mpi [ROUNDS]\n");
    return 64;
}
