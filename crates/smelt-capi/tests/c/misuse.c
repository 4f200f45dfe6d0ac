/* misuse.c - handle and argument misuse from C is an error code, never undefined
 * behaviour (run by tests/c_examples.rs; prints "misuse ok" and exits 0 when every
 * check holds, else names the first failed check and exits 1).
 *
 *  1. double free and use after free of models, trees, groups and members;
 *  2. a member handle kept after its smelt_group_run body returned;
 *  3. one member handle used by two threads at once: SMELT_ERR_BUSY for the second;
 *  4. one member passes a len that differs from the root's: every member fails that
 *     collective within a few seconds (not the 30 s group timeout) with the same
 *     status and message. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <smelt.h>

#include "expect.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void make(size_t n, smelt_model **m, smelt_tree **t, smelt_group **g) {
    EXPECT(smelt_model_synthetic(1, (uint32_t)n, 50.0, 60.0, 1.0, m) == SMELT_OK);
    EXPECT(smelt_tree_build(*m, "binary", NULL, 0, -1, t) == SMELT_OK);
    EXPECT(smelt_group_create(*t, g) == SMELT_OK);
}

/* ---- 1. double free, use after free ---------------------------------------- */
static void double_free(void) {
    smelt_model *m;
    smelt_tree *t;
    smelt_group *g;
    make(2, &m, &t, &g);
    smelt_member *a = NULL;
    EXPECT(smelt_group_attach(g, 0, &a) == SMELT_OK);
    EXPECT(smelt_group_free(g) == SMELT_ERR_BUSY); /* a member is attached */
    EXPECT(smelt_member_detach(a) == SMELT_OK);
    EXPECT(smelt_member_detach(a) == SMELT_ERR_INVALID_HANDLE);
    EXPECT(smelt_barrier(a) == SMELT_ERR_INVALID_HANDLE);
    EXPECT(strstr(smelt_last_error(), "not a live member handle") != NULL);

    EXPECT(smelt_group_free(g) == SMELT_OK);
    EXPECT(smelt_group_free(g) == SMELT_ERR_INVALID_HANDLE);
    EXPECT(strstr(smelt_last_error(), "already freed") != NULL);
    EXPECT(smelt_group_attach(g, 0, &a) == SMELT_ERR_INVALID_HANDLE);
    EXPECT(smelt_tree_free(t) == SMELT_OK);
    EXPECT(smelt_tree_free(t) == SMELT_ERR_INVALID_HANDLE);
    size_t n = 0;
    EXPECT(smelt_tree_size(t, &n) == SMELT_ERR_INVALID_HANDLE);
    EXPECT(smelt_group_create(t, &g) == SMELT_ERR_INVALID_HANDLE);
    /* A model handle where a tree is expected. */
    EXPECT(smelt_tree_size((smelt_tree *)m, &n) == SMELT_ERR_INVALID_HANDLE);
    EXPECT(strstr(smelt_last_error(), "model handle, not a tree handle") != NULL);
    EXPECT(smelt_model_free(m) == SMELT_OK);
    EXPECT(smelt_model_free(m) == SMELT_ERR_INVALID_HANDLE);
    EXPECT(smelt_model_ncpus(m, &n) == SMELT_ERR_INVALID_HANDLE);
    EXPECT(smelt_model_free(NULL) == SMELT_OK);
}

/* ---- 2. a run body's handle after the body returned ------------------------- */
static smelt_member *kept[2];

static void keep(smelt_member *m, void *arg) {
    (void)arg;
    size_t i = 0;
    if (smelt_member_index(m, &i) != SMELT_OK || i > 1) return;
    kept[i] = m;
    EXPECT(smelt_barrier(m) == SMELT_OK);
    EXPECT(smelt_member_detach(m) == SMELT_ERR_INVALID_ARGUMENT); /* not attached */
}

static void expired_run_handle(void) {
    smelt_model *m;
    smelt_tree *t;
    smelt_group *g;
    make(2, &m, &t, &g);
    EXPECT(smelt_group_run(g, keep, NULL) == SMELT_OK);
    for (int i = 0; i < 2; i++) {
        size_t idx = 0;
        EXPECT(kept[i] != NULL);
        EXPECT(smelt_member_index(kept[i], &idx) == SMELT_ERR_INVALID_HANDLE);
        EXPECT(smelt_barrier(kept[i]) == SMELT_ERR_INVALID_HANDLE);
        EXPECT(strstr(smelt_last_error(), "smelt_group_run body returned") != NULL);
    }
    EXPECT(smelt_group_free(g) == SMELT_OK);
    EXPECT(smelt_tree_free(t) == SMELT_OK);
    EXPECT(smelt_model_free(m) == SMELT_OK);
}

/* ---- 3. one member handle, two threads --------------------------------------- */
static void *barrier_thread(void *p) {
    static int rc;
    rc = smelt_barrier((smelt_member *)p);
    return &rc;
}

static void two_threads_one_handle(void) {
    smelt_model *m;
    smelt_tree *t;
    smelt_group *g;
    make(2, &m, &t, &g);
    smelt_member *a = NULL, *b = NULL;
    EXPECT(smelt_group_attach(g, 0, &a) == SMELT_OK);
    /* The thread waits in a barrier with `a` (member 1 is not there yet)... */
    pthread_t th;
    pthread_create(&th, NULL, barrier_thread, a);
    /* ...while this thread's calls with `a` are refused. */
    int busy = 0;
    double start = now();
    size_t idx;
    while (!busy && now() - start < 5.0) {
        int rc = smelt_member_index(a, &idx);
        EXPECT(rc == SMELT_OK || rc == SMELT_ERR_BUSY);
        busy = rc == SMELT_ERR_BUSY;
        if (!busy) sched_yield();
    }
    EXPECT(busy);
    EXPECT(smelt_barrier(a) == SMELT_ERR_BUSY);
    EXPECT(strstr(smelt_last_error(), "in use by another thread") != NULL);
    EXPECT(smelt_member_detach(a) == SMELT_ERR_BUSY);
    /* Member 1 arrives: the thread's barrier completes. */
    EXPECT(smelt_group_attach(g, 1, &b) == SMELT_OK);
    EXPECT(smelt_barrier(b) == SMELT_OK);
    void *res;
    pthread_join(th, &res);
    EXPECT(*(int *)res == SMELT_OK);
    EXPECT(smelt_member_index(a, &idx) == SMELT_OK && idx == 0);
    EXPECT(smelt_member_detach(a) == SMELT_OK);
    EXPECT(smelt_member_detach(b) == SMELT_OK);
    EXPECT(smelt_group_free(g) == SMELT_OK);
    EXPECT(smelt_tree_free(t) == SMELT_OK);
    EXPECT(smelt_model_free(m) == SMELT_OK);
}

/* ---- 4. a len that differs from the root's ---------------------------------- */
#define MEMBERS 4

struct outcome {
    int rc;
    double seconds;
    char msg[256];
};

struct mismatch {
    size_t bad; /* the member with the wrong len */
    struct outcome out[MEMBERS];
};

static void mismatch_body(smelt_member *m, void *arg) {
    struct mismatch *s = arg;
    size_t i = 0;
    if (smelt_member_index(m, &i) != SMELT_OK || i >= MEMBERS) return;
    char buf[64] = "payload";
    double start = now();
    int rc = smelt_broadcast(m, buf, i == s->bad ? 32 : 16);
    s->out[i].seconds = now() - start;
    s->out[i].rc = rc;
    snprintf(s->out[i].msg, sizeof s->out[i].msg, "%s", smelt_last_error());
}

static void mismatched_len(void) {
    smelt_model *m;
    smelt_tree *t;
    smelt_group *g;
    make(MEMBERS, &m, &t, &g);
    size_t root = 0;
    EXPECT(smelt_tree_root(t, &root) == SMELT_OK);
    static struct mismatch s;
    memset(&s, 0, sizeof s);
    s.bad = (root + 1) % MEMBERS;
    double start = now();
    int rc = smelt_group_run(g, mismatch_body, &s);
    double took = now() - start;
    printf("mismatch: smelt_group_run returned %d after %.3f s: %s\n", rc, took,
           smelt_last_error());
    EXPECT(took < 5.0);
    EXPECT(rc == SMELT_ERR_INVALID_ARGUMENT);
    char expect[64];
    snprintf(expect, sizeof expect, "member %zu (CPU %zu) failed: ", s.bad, s.bad);
    EXPECT(strncmp(smelt_last_error(), expect, strlen(expect)) == 0);
    EXPECT(strstr(smelt_last_error(), "len 32 differs from the root's len 16") != NULL);
    for (int i = 0; i < MEMBERS; i++) {
        printf("  member %d: %d after %.3f s: %s\n", i, s.out[i].rc, s.out[i].seconds,
               s.out[i].msg);
        EXPECT(s.out[i].rc == rc);
        EXPECT(strcmp(s.out[i].msg, smelt_last_error()) == 0);
        EXPECT(s.out[i].seconds < 5.0);
    }
    EXPECT(smelt_group_free(g) == SMELT_OK);
    EXPECT(smelt_tree_free(t) == SMELT_OK);
    EXPECT(smelt_model_free(m) == SMELT_OK);
}

int main(void) {
    double_free();
    expired_run_handle();
    two_threads_one_handle();
    mismatched_len();
    if (failures) {
        fprintf(stderr, "misuse: %d checks FAILED\n", failures);
        return 1;
    }
    printf("misuse ok\n");
    return 0;
}
