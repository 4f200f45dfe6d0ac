/*
 * launch_collectives.c - a member program for `smelt launch`: every process joins the
 * job (smelt_job_join), runs barrier, broadcast, reduce and allreduce (with a C sum
 * operator) for some rounds, checks every result against plain C arithmetic, and
 * leaves (smelt_job_leave). Rank 0 prints "ok: ..." at the end; any error makes the
 * process exit non-zero (and, through the job, every other member's collective fail).
 *
 *   cargo build -p smelt-capi -p smelt-cli
 *   cc -I crates/smelt-capi/include examples/c/launch_collectives.c \
 *       -L target/debug -lsmelt -o launch_collectives
 *   LD_LIBRARY_PATH=target/debug target/debug/smelt launch -n 4 -- ./launch_collectives 100
 *
 * Usage: launch_collectives [ROUNDS] [bad-len RANK]
 *   bad-len RANK: member RANK broadcasts 16 bytes where the others broadcast 8; every
 *   member must then fail with SMELT_ERR_INVALID_ARGUMENT and the same message, and
 *   prints "failed together: <message>" (exit 0 when it did).
 */
#include <smelt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        int rc_ = (call);                                                            \
        if (rc_ != SMELT_OK) {                                                       \
            fprintf(stderr, "rank %zu: %s failed (%d): %s\n", rank, #call, rc_,      \
                    smelt_last_error());                                             \
            return 3;                                                                \
        }                                                                            \
    } while (0)

#define EXPECT(cond, ...)                                                            \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "rank %zu, round %ld: ", rank, round);                   \
            fprintf(stderr, __VA_ARGS__);                                            \
            fprintf(stderr, "\n");                                                   \
            return 4;                                                                \
        }                                                                            \
    } while (0)

/* Element-wise sum of int64_t values. */
static void sum_i64(void *inout, const void *in, size_t len, void *arg) {
    int64_t a[16], b[16];
    size_t n = len / sizeof(int64_t);
    (void)arg;
    if (n > 16) n = 16;
    memcpy(a, inout, n * sizeof(int64_t));
    memcpy(b, in, n * sizeof(int64_t));
    for (size_t k = 0; k < n; k++) a[k] += b[k];
    memcpy(inout, a, n * sizeof(int64_t));
}

static size_t rank = 0;

/* Every member broadcasts; member `bad` with len 16 instead of 8. */
static int bad_len(smelt_member *m, size_t bad) {
    char buf[16] = "fifteen bytes..";
    size_t len = rank == bad ? 16 : 8;
    int rc = smelt_broadcast(m, buf, len);
    if (rc != SMELT_ERR_INVALID_ARGUMENT) {
        fprintf(stderr, "rank %zu: broadcast with a wrong len returned %d: %s\n", rank, rc,
                smelt_last_error());
        return 5;
    }
    if (!strstr(smelt_last_error(), "differs from the root's len")) {
        fprintf(stderr, "rank %zu: unexpected message: %s\n", rank, smelt_last_error());
        return 5;
    }
    printf("rank %zu failed together: %s\n", rank, smelt_last_error());
    /* The job stays failed: every later collective fails too. */
    if (smelt_barrier(m) == SMELT_OK) {
        fprintf(stderr, "rank %zu: a barrier after the failure succeeded\n", rank);
        return 5;
    }
    return smelt_job_leave(m) == SMELT_OK ? 0 : 5;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 100;
    long round = -1;
    smelt_member *m = NULL;
    size_t n = 0;
    int is_root = 0;
    uint32_t cpu = 0;

    if (smelt_job_join(&m) != SMELT_OK) {
        fprintf(stderr, "launch_collectives: cannot join a job: %s\n", smelt_last_error());
        return 2;
    }
    CHECK(smelt_member_index(m, &rank));
    CHECK(smelt_member_size(m, &n));
    CHECK(smelt_member_is_root(m, &is_root));
    CHECK(smelt_member_cpu(m, &cpu));
    {
        const char *env_size = getenv("SMELT_SIZE");
        const char *env_rank = getenv("SMELT_RANK");
        EXPECT(env_size && (size_t)atol(env_size) == n, "size %zu, SMELT_SIZE %s", n,
               env_size ? env_size : "(unset)");
        EXPECT(env_rank && (size_t)atol(env_rank) == rank, "rank %zu, SMELT_RANK %s",
               rank, env_rank ? env_rank : "(unset)");
    }
    if (argc > 3 && strcmp(argv[2], "bad-len") == 0) return bad_len(m, (size_t)atol(argv[3]));

    const int64_t N = (int64_t)n, me = (int64_t)rank;
    for (round = 0; round < rounds; round++) {
        const int64_t r = round;
        CHECK(smelt_barrier(m));

        /* Broadcast: one word (the word path) and 100 bytes (several messages). */
        int64_t w = is_root ? 7 * r + 1 : -1;
        CHECK(smelt_broadcast(m, &w, sizeof w));
        EXPECT(w == 7 * r + 1, "broadcast word %lld, expected %lld", (long long)w,
               (long long)(7 * r + 1));
        unsigned char bytes[100];
        for (int i = 0; i < 100; i++) bytes[i] = is_root ? (unsigned char)(i + r) : 0;
        CHECK(smelt_broadcast(m, bytes, sizeof bytes));
        for (int i = 0; i < 100; i++)
            EXPECT(bytes[i] == (unsigned char)(i + r), "broadcast byte %d is %u", i, bytes[i]);

        /* Reduce of three integers per member (the gather path); result at the root. */
        int64_t v[3] = {me + 1, r, me * r};
        CHECK(smelt_reduce(m, v, sizeof v, sum_i64, NULL));
        if (is_root) {
            int64_t e[3] = {N * (N + 1) / 2, N * r, r * N * (N - 1) / 2};
            for (int k = 0; k < 3; k++)
                EXPECT(v[k] == e[k], "reduce[%d] = %lld, expected %lld", k, (long long)v[k],
                       (long long)e[k]);
        }

        /* Allreduce: one integer (a true tree reduction) and four (gathered). */
        int64_t s = me + r;
        CHECK(smelt_allreduce(m, &s, sizeof s, sum_i64, NULL));
        EXPECT(s == N * (N - 1) / 2 + N * r, "allreduce %lld, expected %lld", (long long)s,
               (long long)(N * (N - 1) / 2 + N * r));
        int64_t a[4] = {1, me, r, -me};
        CHECK(smelt_allreduce(m, a, sizeof a, sum_i64, NULL));
        int64_t ea[4] = {N, N * (N - 1) / 2, N * r, -N * (N - 1) / 2};
        for (int k = 0; k < 4; k++)
            EXPECT(a[k] == ea[k], "allreduce[%d] = %lld, expected %lld", k, (long long)a[k],
                   (long long)ea[k]);
    }
    CHECK(smelt_barrier(m));
    CHECK(smelt_job_leave(m));
    /* The handle is gone: a second leave and any use are errors, not crashes. */
    round = -1;
    EXPECT(smelt_job_leave(m) == SMELT_ERR_INVALID_HANDLE, "second leave: %s",
           smelt_last_error());
    EXPECT(smelt_barrier(m) == SMELT_ERR_INVALID_HANDLE, "barrier after leave: %s",
           smelt_last_error());
    if (rank == 0)
        printf("ok: %zu members, %ld rounds of barrier, broadcast, reduce, allreduce\n", n,
               rounds);
    return 0;
}
